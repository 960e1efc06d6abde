"""The ``cpu_manager_state`` checkpoint, byte for byte as upstream v1.37.1 writes it, and its restore checks.

Upstream (pkg/kubelet/cm/cpumanager/state/checkpoint.go, `CPUManagerCheckpoint` a.k.a. V4, `MarshalCheckpoint`)
writes one JSON object: ``policyName``, ``defaultCpuSet``, ``entries`` (pod uid -> container -> cpuset text,
left out when empty), ``checksum``, then ``data`` (the JSON of the same three fields, `CPUManagerCheckpointData`)
and ``dataChecksum``. A v1.37 kubelet reads back ``data`` and verifies only ``dataChecksum``; the top-level
fields and ``checksum`` are there for older kubelets (V2/V3), which verify ``checksum``.

Both checksums are computed exactly as upstream does, not approximated: fnv-1a 32 over spew's ``%#v`` text
(`k8s.io/utils/dump.ForHash`, the config `hashutil.DeepHashObject` uses), which for these types is simple enough
to write directly:

- ``dataChecksum`` = `checksum.New(data)`: the spew of a Go string, ``(string)`` followed by the raw text;
- ``checksum``: the spew of ``&cp.CPUManagerCheckpointV2`` with ``Checksum`` 0, its type name then rewritten to
  ``CPUManagerCheckpoint`` (upstream's `strings.Replace`): ``(*state.CPUManagerCheckpoint){PolicyName:(string)...
  DefaultCPUSet:(string)... Entries:(map[string]map[string]string)map[uid:map[name:cpus]] Checksum:(checksum.
  Checksum)0}`` with map keys sorted bytewise.

The unit tests hold vectors produced by Go (go-spew d8f796af33cc, the version v1.37.1 pins) running that code.
A checkpoint without ``data`` (written by a kubelet before V4) is read as upstream falls back to V3 then V2:
accepted when its ``checksum`` is 0 or matches the V2 or V3 spew (V3 ``podEntries`` must be empty: the pod-level
resource managers are off).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from kopflet.cm.cpumanager import cpuset
from kopflet.cm.cpumanager.cpuset import CPUSet
from kopflet.cm.cpumanager.static_policy import State
from kopflet.gotext import go_json, go_quote

CHECKPOINT_NAME = "cpu_manager_state"
_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193


class CheckpointError(ValueError):
    """The checkpoint cannot be restored (upstream's message texts)."""


def fnv1a_32(data: bytes) -> int:
    """Go's ``hash/fnv`` New32a."""
    value = _FNV_OFFSET
    for byte in data:
        value = ((value ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return value


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _sorted(mapping: Mapping[str, Any]) -> list[str]:
    """Go's map key order for spew (SortKeys) and encoding/json: bytewise."""
    return sorted(mapping, key=_bytes)


def _spew_entries(entries: Mapping[str, Mapping[str, str]] | None) -> str:
    if entries is None:
        return "<nil>"
    pods = []
    for uid in _sorted(entries):
        inner = entries[uid]
        pods.append(f"{uid}:map[" + " ".join(f"{name}:{inner[name]}" for name in _sorted(inner)) + "]")
    return "map[" + " ".join(pods) + "]"


def _legacy_spews(policy: str, default: str, entries: Mapping[str, Mapping[str, str]] | None,
                  v3: bool) -> list[str]:
    """The spew texts upstream's V2/V3 `VerifyChecksum` hashes (with ``Checksum`` 0): as the type is named,
    and with the name rewritten to ``CPUManagerCheckpoint``."""
    fields = f"PolicyName:(string){policy} DefaultCPUSet:(string){default} " \
             f"Entries:(map[string]map[string]string){_spew_entries(entries)} "
    if v3:
        fields += "PodEntries:(state.PodCPUAssignments)map[] "
    fields += "Checksum:(checksum.Checksum)0"
    name = "CPUManagerCheckpointV3" if v3 else "CPUManagerCheckpointV2"
    return [f"(*state.{name}){{{fields}}}", f"(*state.CPUManagerCheckpoint){{{fields}}}"]


def checksum(policy: str, default: str, entries: Mapping[str, Mapping[str, str]] | None) -> int:
    """The top-level ``checksum`` upstream `CPUManagerCheckpoint.MarshalCheckpoint` writes."""
    return fnv1a_32(_bytes(_legacy_spews(policy, default, entries, v3=False)[1]))


def data_checksum(data: str) -> int:
    """``dataChecksum``: upstream `checksum.New(cp.Data)`, fnv-1a 32 of spew's ``(string)<data>``."""
    return fnv1a_32(_bytes("(string)" + data))


def _entries_text(state: State) -> dict[str, dict[str, str]]:
    return {uid: {name: str(state.assignments[uid][name]) for name in _sorted(state.assignments[uid])}
            for uid in _sorted(state.assignments)}


def encode(policy_name: str, state: State) -> str:
    """The checkpoint file's text, as upstream `stateCheckpoint.storeState` + `MarshalCheckpoint` write it."""
    default = str(state.default)
    entries = _entries_text(state)
    body: dict[str, Any] = {"policyName": policy_name, "defaultCpuSet": default}
    if entries:
        body["entries"] = entries
    data = go_json(body)
    out = dict(body)
    out["checksum"] = checksum(policy_name, default, entries)
    out["data"] = data
    out["dataChecksum"] = data_checksum(data)
    return go_json(out)


def _object(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise CheckpointError(f"{what}: not a JSON object")
    return value


def _string(body: Mapping[str, Any], key: str) -> str:
    value = body.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise CheckpointError(f"{key}: not a string")
    return value


def _entries(body: Mapping[str, Any]) -> dict[str, dict[str, str]] | None:
    value = body.get("entries", {})
    if value is None:
        return None
    result: dict[str, dict[str, str]] = {}
    for uid, containers in _object(value, "entries").items():
        if containers is None:
            result[uid] = {}
            continue
        inner = _object(containers, f"entries[{uid}]")
        if not all(isinstance(v, str) for v in inner.values()):
            raise CheckpointError(f"entries[{uid}]: not a map of strings")
        result[uid] = dict(inner)
    return result


def _uint(body: Mapping[str, Any], key: str) -> int:
    value = body.get(key, 0)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 64:
        raise CheckpointError(f"{key}: not an unsigned integer")
    return value


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """The restorable content of a checkpoint (upstream `CPUManagerCheckpointData`)."""

    policy_name: str
    default_cpu_set: str
    entries: Mapping[str, Mapping[str, str]]


def decode(text: str | bytes) -> Checkpoint:
    """Upstream `loadAndMigrateCheckpointV4` (with its V3/V2 fallbacks): parse and verify. Raises
    `CheckpointError`: "could not load v4 checkpoint: checkpoint is corrupted" for a bad ``dataChecksum``,
    "checkpoint is corrupted" for a bad legacy ``checksum``."""
    try:
        body = _object(json.loads(text), "checkpoint")
    except (ValueError, RecursionError) as err:
        raise CheckpointError(f"failed to deserialize cpu manager checkpoint: {err}") from None
    data = _string(body, "data")
    stored_data_checksum = _uint(body, "dataChecksum")
    if data or stored_data_checksum:
        try:
            inner = _object(json.loads(data), "data")
            policy, default, entries = _string(inner, "policyName"), _string(inner, "defaultCpuSet"), _entries(inner)
        except (ValueError, RecursionError) as err:
            raise CheckpointError(f"could not load v4 checkpoint: failed to deserialize cpu manager checkpoint "
                                  f"data: {err}") from None
        if data_checksum(data) != stored_data_checksum:
            raise CheckpointError("could not load v4 checkpoint: checkpoint is corrupted")
        return Checkpoint(policy, default, entries or {})
    # a pre-V4 file: upstream falls back to V3, then V2
    policy, default, entries = _string(body, "policyName"), _string(body, "defaultCpuSet"), _entries(body)
    stored = _uint(body, "checksum")
    if stored != 0 and body.get("podEntries"):
        raise CheckpointError("checkpoint is corrupted")  # pod-level entries: not supported here (gate off)
    candidates = _legacy_spews(policy, default, entries, v3=True) + _legacy_spews(policy, default, entries, v3=False)
    if stored != 0 and all(fnv1a_32(_bytes(spew)) != stored for spew in candidates):
        raise CheckpointError("checkpoint is corrupted")
    return Checkpoint(policy, default, entries or {})


def restore(checkpoint: Checkpoint, policy_name: str) -> State:
    """Upstream `stateCheckpoint.restoreState` after the load: the policy must be the configured one and every
    cpuset must parse. The policy's `validate_state` then checks the result against the topology."""
    if checkpoint.policy_name != policy_name:
        raise CheckpointError(f"configured policy {go_quote(policy_name)} differs from state checkpoint policy "
                              f"{go_quote(checkpoint.policy_name)}")
    try:
        default = cpuset.parse(checkpoint.default_cpu_set)
    except cpuset.CPUSetError as err:
        raise CheckpointError(f"could not parse default CPU set {go_quote(checkpoint.default_cpu_set)}: "
                              f"{err}") from None
    assignments: dict[str, dict[str, CPUSet]] = {}
    for uid, containers in checkpoint.entries.items():
        assignments[uid] = {}
        for name, text in containers.items():
            try:
                assignments[uid][name] = cpuset.parse(text)
            except cpuset.CPUSetError as err:
                raise CheckpointError(f"could not parse cpuset {go_quote(text)} for container {go_quote(name)} "
                                      f"in pod {go_quote(uid)}: {err}") from None
    return State(default=default, assignments=assignments)


def restore_failure(err: Exception, path: str) -> str:
    """Upstream `NewCheckpointState`'s message when restoring fails: the agent refuses to start."""
    return (f"could not restore state from checkpoint: {err}, please drain this node and delete the CPU manager "
            f"checkpoint file {go_quote(path)} before restarting Kubelet")
