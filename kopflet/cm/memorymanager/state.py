"""The memory manager's state and its ``memory_manager_state`` checkpoint, byte for byte as upstream v1.37.1
writes it (pkg/kubelet/cm/memorymanager/state: state.go, checkpoint.go `MemoryManagerCheckpoint` a.k.a. V3,
state_checkpoint.go).

The state is the machine state (per NUMA node: how many assignments use it, the group of nodes it is allocated
with, and per memory type its total, system-reserved, allocatable, reserved and free bytes) and the memory blocks
of each container (pod uid -> container -> blocks of a type and size on a set of NUMA nodes).

The file is one JSON object: ``policyName``, ``machineState``, ``entries`` (left out when empty), ``checksum``,
``data`` (the JSON of the same fields, `MemoryManagerCheckpointData`) and ``dataChecksum``. A v1.37 kubelet reads
``data`` and verifies ``dataChecksum`` (fnv-1a 32 of spew's ``(string)<data>``); ``checksum`` is for older
kubelets: fnv-1a 32 of `k8s.io/utils/dump.ForHash` (go-spew d8f796af33cc) of the V1 struct with ``Checksum`` 0,
its type renamed ``MemoryManagerCheckpoint``. The unit tests hold vectors Go produced running that code. A file
without ``data`` (written before V3) is accepted when its ``checksum`` is 0 or matches the V1 or V2 spew. Pure.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from kopflet.cm.cpumanager.state import data_checksum, fnv1a_32
from kopflet.gotext import go_json, go_quote

CHECKPOINT_NAME = "memory_manager_state"


class CheckpointError(ValueError):
    """The checkpoint cannot be restored (upstream's texts)."""


@dataclasses.dataclass(frozen=True)
class MemoryTable:
    """Upstream `MemoryTable`: one memory type on one NUMA node, in bytes."""

    total: int = 0
    system_reserved: int = 0
    allocatable: int = 0
    reserved: int = 0
    free: int = 0


@dataclasses.dataclass(frozen=True)
class NUMANodeState:
    """Upstream `NUMANodeState`."""

    number_of_assignments: int = 0
    memory_map: Mapping[str, MemoryTable] = dataclasses.field(default_factory=dict)
    cells: tuple[int, ...] = ()
    """The node and those it is allocated together with (one container's blocks spanning them)."""


@dataclasses.dataclass(frozen=True)
class Block:
    """Upstream `Block`: `size` bytes of memory type `type` on the NUMA nodes `numa_affinity`."""

    numa_affinity: tuple[int, ...]
    type: str
    size: int


MachineState = Mapping[int, NUMANodeState]
Assignments = Mapping[str, Mapping[str, tuple[Block, ...]]]


@dataclasses.dataclass(frozen=True)
class State:
    """Upstream `state.State`. `reusable` is the static policy's in-memory ``initContainersReusableMemory`` (pod
    uid -> NUMA mask text -> memory type -> bytes an init container's blocks leave to the pod's later
    containers); it is not checkpointed, as upstream."""

    machine_state: MachineState = dataclasses.field(default_factory=dict)
    assignments: Assignments = dataclasses.field(default_factory=dict)
    reusable: Mapping[str, Mapping[str, Mapping[str, int]]] = dataclasses.field(default_factory=dict, compare=False)

    def blocks(self, pod_uid: str, container: str) -> tuple[Block, ...] | None:
        """Upstream `GetMemoryBlocks` (None: no entry)."""
        return self.assignments.get(pod_uid, {}).get(container)

    def with_blocks(self, pod_uid: str, container: str, blocks: Sequence[Block]) -> State:
        """Upstream `SetMemoryBlocks`."""
        pod = dict(self.assignments.get(pod_uid, {}))
        pod[container] = tuple(blocks)
        return dataclasses.replace(self, assignments={**self.assignments, pod_uid: pod})

    def without_blocks(self, pod_uid: str, container: str) -> State:
        """Upstream `Delete`: the pod's entry goes with its last container."""
        pod = {name: b for name, b in self.assignments.get(pod_uid, {}).items() if name != container}
        rest = {uid: value for uid, value in self.assignments.items() if uid != pod_uid}
        if pod:
            rest[pod_uid] = pod
        return dataclasses.replace(self, assignments=rest)


# ------------------------------------------------------------------------------------------------ encode


def _machine_json(machine: MachineState) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for node in sorted(machine, key=str):  # encoding/json sorts a map[int]'s keys as text
        state = machine[node]
        out[str(node)] = {
            "numberOfAssignments": state.number_of_assignments,
            "memoryMap": {name: {"total": t.total, "systemReserved": t.system_reserved,
                                 "allocatable": t.allocatable, "reserved": t.reserved, "free": t.free}
                          for name, t in sorted(state.memory_map.items())},
            "cells": list(state.cells),
        }
    return out


def _blocks_json(blocks: Sequence[Block]) -> list[dict[str, Any]]:
    return [{"numaAffinity": list(b.numa_affinity), "type": b.type, "size": b.size} for b in blocks]


def _entries_json(assignments: Assignments) -> dict[str, Any]:
    return {uid: {name: _blocks_json(assignments[uid][name]) for name in sorted(assignments[uid])}
            for uid in sorted(assignments)}


def _spew_blocks(blocks: Sequence[Block]) -> str:
    inner = " ".join(f"{{NUMAAffinity:([]int)[{' '.join(map(str, b.numa_affinity))}] "
                     f"Type:(v1.ResourceName){b.type} Size:(uint64){b.size}}}" for b in blocks)
    return f"[{inner}]"


def _spew_machine(machine: MachineState) -> str:
    nodes = []
    for node in sorted(machine):  # spew sorts int keys by value
        state = machine[node]
        tables = " ".join(
            f"{name}:<*>{{TotalMemSize:(uint64){t.total} SystemReserved:(uint64){t.system_reserved} "
            f"Allocatable:(uint64){t.allocatable} Reserved:(uint64){t.reserved} Free:(uint64){t.free}}}"
            for name, t in sorted(state.memory_map.items()))
        nodes.append(f"{node}:<*>{{NumberOfAssignments:(int){state.number_of_assignments} "
                     f"MemoryMap:(map[v1.ResourceName]*state.MemoryTable)map[{tables}] "
                     f"Cells:([]int)[{' '.join(map(str, state.cells))}]}}")
    return f"map[{' '.join(nodes)}]"


def _spew_entries(assignments: Assignments) -> str:
    pods = []
    for uid in sorted(assignments):
        inner = " ".join(f"{name}:{_spew_blocks(assignments[uid][name])}" for name in sorted(assignments[uid]))
        pods.append(f"{uid}:map[{inner}]")
    return f"map[{' '.join(pods)}]"


def _legacy_spews(policy: str, machine: MachineState, assignments: Assignments) -> list[str]:
    """The spew texts upstream's V1 and V2 `VerifyChecksum` hash (``Checksum`` 0, the type renamed)."""
    head = (f"PolicyName:(string){policy} MachineState:(state.NUMANodeMap){_spew_machine(machine)} "
            f"Entries:(state.ContainerMemoryAssignments){_spew_entries(assignments)} ")
    tail = "Checksum:(checksum.Checksum)0"
    return [f"(*state.MemoryManagerCheckpoint){{{head}{tail}}}",
            f"(*state.MemoryManagerCheckpoint){{{head}PodEntries:(state.PodMemoryAssignments)map[] {tail}}}"]


def checksum(policy: str, machine: MachineState, assignments: Assignments) -> int:
    """The top-level ``checksum`` upstream's V3 `MarshalCheckpoint` writes (over the V1 part)."""
    return fnv1a_32(_legacy_spews(policy, machine, assignments)[0].encode())


def encode(policy_name: str, state: State) -> str:
    """The checkpoint file's text, as upstream `storeState` + `MarshalCheckpoint` write it."""
    body: dict[str, Any] = {"policyName": policy_name, "machineState": _machine_json(state.machine_state)}
    entries = _entries_json(state.assignments)
    if entries:
        body["entries"] = entries
    data = go_json(body)
    out = dict(body)
    out["checksum"] = checksum(policy_name, state.machine_state, state.assignments)
    out["data"] = data
    out["dataChecksum"] = data_checksum(data)
    return go_json(out)


# ------------------------------------------------------------------------------------------------ decode


def _object(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise CheckpointError(f"{what}: not a JSON object")
    return value


def _uint(value: Any, what: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 64:
        raise CheckpointError(f"{what}: not an unsigned integer")
    return value


def _int(value: Any, what: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise CheckpointError(f"{what}: not an integer")
    return value


def _ints(value: Any, what: str) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise CheckpointError(f"{what}: not a list")
    return tuple(_int(v, what) for v in value)


def _machine(value: Any) -> dict[int, NUMANodeState]:
    machine: dict[int, NUMANodeState] = {}
    for key, node in _object(value if value is not None else {}, "machineState").items():
        try:
            node_id = int(key)
        except ValueError:
            raise CheckpointError(f"machineState: node id {go_quote(key)} is not an integer") from None
        body = _object(node, f"machineState[{key}]")
        tables = {}
        for name, table in _object(body.get("memoryMap") or {}, f"machineState[{key}].memoryMap").items():
            t = _object(table, f"machineState[{key}].memoryMap[{name}]")
            tables[name] = MemoryTable(*(_uint(t.get(f), f) for f in
                                         ("total", "systemReserved", "allocatable", "reserved", "free")))
        machine[node_id] = NUMANodeState(_int(body.get("numberOfAssignments"), "numberOfAssignments"), tables,
                                         _ints(body.get("cells"), "cells"))
    return machine


def _assignments(value: Any) -> dict[str, dict[str, tuple[Block, ...]]]:
    result: dict[str, dict[str, tuple[Block, ...]]] = {}
    for uid, containers in _object(value if value is not None else {}, "entries").items():
        result[uid] = {}
        for name, blocks in _object(containers if containers is not None else {}, f"entries[{uid}]").items():
            if blocks is None:
                blocks = []
            if not isinstance(blocks, list):
                raise CheckpointError(f"entries[{uid}][{name}]: not a list")
            parsed = []
            for block in blocks:
                b = _object(block, f"entries[{uid}][{name}]")
                kind = b.get("type") or ""
                if not isinstance(kind, str):
                    raise CheckpointError(f"entries[{uid}][{name}]: type is not a string")
                parsed.append(Block(_ints(b.get("numaAffinity"), "numaAffinity"), kind, _uint(b.get("size"), "size")))
            result[uid][name] = tuple(parsed)
    return result


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """The restorable content of a checkpoint (upstream `MemoryManagerCheckpointData`)."""

    policy_name: str
    machine_state: MachineState
    assignments: Assignments


def decode(text: str | bytes) -> Checkpoint:
    """Upstream `loadAndMigrateCheckpointV3` with its V2/V1 fallbacks: parse and verify. Raises `CheckpointError`
    ("could not load v3 checkpoint: checkpoint is corrupted" for a bad ``dataChecksum``)."""
    try:
        body = _object(json.loads(text), "checkpoint")
    except (ValueError, RecursionError) as err:
        raise CheckpointError(f"failed to deserialize memory manager checkpoint: {err}") from None
    data = body.get("data") or ""
    if not isinstance(data, str):
        raise CheckpointError("data: not a string")
    stored_data_checksum = _uint(body.get("dataChecksum"), "dataChecksum")
    if data or stored_data_checksum:
        try:
            inner = _object(json.loads(data), "data")
            policy = inner.get("policyName") or ""
            checkpoint = Checkpoint(str(policy), _machine(inner.get("machineState")),
                                    _assignments(inner.get("entries")))
        except (ValueError, RecursionError) as err:
            raise CheckpointError(f"could not load v3 checkpoint: failed to deserialize memory manager checkpoint "
                                  f"data: {err}") from None
        if data_checksum(data) != stored_data_checksum:
            raise CheckpointError("could not load v3 checkpoint: checkpoint is corrupted")
        return checkpoint
    policy = body.get("policyName") or ""
    if not isinstance(policy, str):
        raise CheckpointError("policyName: not a string")
    machine, assignments = _machine(body.get("machineState")), _assignments(body.get("entries"))
    stored = _uint(body.get("checksum"), "checksum")
    if stored != 0 and all(fnv1a_32(s.encode()) != stored for s in _legacy_spews(policy, machine, assignments)):
        raise CheckpointError("checkpoint is corrupted")
    return Checkpoint(policy, machine, assignments)


def restore(checkpoint: Checkpoint, policy_name: str) -> State:
    """Upstream `restoreState` after the load: the policy must be the configured one."""
    if checkpoint.policy_name != policy_name:
        raise CheckpointError(f"[memorymanager] configured policy {go_quote(policy_name)} differs from state "
                              f"checkpoint policy {go_quote(checkpoint.policy_name)}")
    return State(machine_state=dict(checkpoint.machine_state), assignments=dict(checkpoint.assignments))


def restore_failure(err: Exception, path: str) -> str:
    """Upstream `NewCheckpointState`'s message when restoring fails: the agent refuses to start."""
    return (f"could not restore state from checkpoint: {err}, please drain this node and delete the memory manager "
            f"checkpoint file {go_quote(path)} before restarting Kubelet")
