"""The memory manager's I/O (upstream pkg/kubelet/cm/memorymanager/memory_manager.go `manager`,
state/state_checkpoint.go): the machine's NUMA nodes read once from sysfs, the ``<root-dir>/memory_manager_state``
checkpoint, and the topology manager built over the same nodes (upstream builds both in NewContainerManager).

The decisions are pure (`kopflet.cm.memorymanager.memory_manager`, `static_policy`, and
`kopflet.cm.topologymanager`); here they meet the files:

- `start`: the topology manager and the memory manager's policy are built, the checkpoint read (a new one
  written, as upstream writes one for either policy) and checked; any problem is a `MemoryManagerError` with
  upstream's message and the agent does not start.
- admission happens in the pod worker's decide step, under the node's allocation lock: the worker takes a
  `snapshot` and records the state the admitted pod needs with `commit` (the checkpoint written atomically before
  the pod's containers are created).
- `cpuset_mems`: the NUMA nodes a container is created with (upstream PreCreateContainer's
  `GetMemoryNUMANodes`), "" when it has no blocks.
- `container_added`: upstream `AddContainer`: the blocks of the regular init containers before it are released.
- `run` (Static policy only): the blocks of containers no longer in an active pod are released (those of a pod no
  worker has only once the apiserver confirms it is gone), as upstream's `removeStaleState`.
- the pod-resources API's `MemoryProvider` (upstream container manager `GetMemory`, `GetAllocatableMemory`): a
  container's blocks, and the allocatable memory per NUMA node and type as `start` found it; nothing under the
  ``None`` policy.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kopflet import checkpointmanager
from kopflet.api import spec
from kopflet.apis.podresources.resources import ContainerMemory
from kopflet.client.kubeapi import API_ERRORS
from kopflet.cm.cpumanager.cpu_manager import Pods
from kopflet.cm.memorymanager import machine, memory_manager, static_policy
from kopflet.cm.memorymanager import state as checkpoint
from kopflet.cm.memorymanager.machine import NUMANode
from kopflet.cm.memorymanager.memory_manager import MemoryReservation, Snapshot
from kopflet.cm.memorymanager.state import State
from kopflet.cm.memorymanager.static_policy import StaticPolicy
from kopflet.cm.topologymanager import policy as topology_policy
from kopflet.cm.topologymanager.topology_manager import NO_TOPOLOGY, TopologyManager
from kopflet.eviction.thresholds import Threshold
from kopflet.rounds import log_failed_round

logger = logging.getLogger(__name__)

_NODE_ENTRY = re.compile(r"^node(\d+)$")
_HUGEPAGES_ENTRY = re.compile(r"^hugepages-(\d+)kB$")
STALE_STATE_PERIOD = 10.0
"""How often the blocks of containers gone are released (the CPU manager's default reconcile period)."""


class MemoryManagerError(Exception):
    """The memory or topology manager cannot start: the configuration, the machine and the checkpoint do not fit."""


def read_numa_nodes(node_dir: str = machine.NODE_DIR) -> tuple[NUMANode, ...]:
    """The machine's NUMA nodes from sysfs (what cadvisor reads for `MachineInfo.Topology`): each ``nodeN``'s
    meminfo, hugepages and distances; () without NUMA directories. Blocking: call it in a thread. Raises OSError
    or `machine.MachineError`."""
    try:
        names = os.listdir(node_dir)
    except FileNotFoundError:
        return ()
    nodes = sorted(int(m.group(1)) for name in names if (m := _NODE_ENTRY.match(name)))
    sizes: dict[int, list[int]] = {}
    for node in nodes:
        try:
            entries = os.listdir(f"{node_dir}/node{node}/hugepages")
        except FileNotFoundError:
            entries = []
        sizes[node] = sorted(int(m.group(1)) for e in entries if (m := _HUGEPAGES_ENTRY.match(e)))
    files: dict[str, str] = {}
    for path in machine.sysfs_paths(nodes, sizes):
        try:
            files[path] = Path(path.replace(machine.NODE_DIR, node_dir, 1)).read_text()
        except FileNotFoundError:
            continue
    return machine.from_sysfs(files)


class MemoryManager:
    """One node's memory manager (its policy, state and checkpoint file) and its topology manager."""

    def __init__(self, policy_name: str, reservations: Sequence[MemoryReservation], *,
                 numa_nodes: Sequence[NUMANode], memory_capacity: int, system_reserved: Mapping[str, str],
                 kube_reserved: Mapping[str, str], hard_thresholds: Iterable[Threshold], topology_policy_name: str,
                 topology_scope: str, topology_options: Mapping[str, str], state_file: str, lock: asyncio.Lock,
                 pods: Callable[[], Pods] = Pods, listed: Callable[[], Awaitable[Iterable[str]]] | None = None,
                 period: float = STALE_STATE_PERIOD) -> None:
        """No I/O. `numa_nodes` is what was read of the machine (empty: one node with `memory_capacity`); `lock`
        the node's allocation lock; `pods` the pods the agent handles; `listed` the UIDs of the node's pods in the
        apiserver."""
        self.policy_name, self.reservations = policy_name, tuple(reservations)
        self.numa_nodes = tuple(numa_nodes) or machine.single_node(memory_capacity)
        self.memory_capacity = memory_capacity
        self.system_reserved, self.kube_reserved = system_reserved, kube_reserved
        self.hard_thresholds = tuple(hard_thresholds)
        self.topology_policy_name, self.topology_scope = topology_policy_name, topology_scope
        self.topology_options = dict(topology_options)
        self.state_file, self.lock, self.pods, self.listed, self.period = state_file, lock, pods, listed, period
        self.topology: TopologyManager = NO_TOPOLOGY
        self.policy: StaticPolicy | None = None
        self.state = State()
        self._file = checkpointmanager.CheckpointFile(self.state_file)
        self._allocatable: tuple[ContainerMemory, ...] = ()
        self.started = False

    # ----------------------------------------------------------------------------------------- start

    async def start(self) -> None:
        """Upstream NewContainerManager's topology and memory managers, then the memory manager's `Start`. Raises
        `MemoryManagerError`."""
        try:
            policy = topology_policy.new_policy(
                self.topology_policy_name, self.topology_scope, self.topology_options,
                [n.id for n in self.numa_nodes], machine.distances(self.numa_nodes))
        except topology_policy.TopologyManagerError as err:
            raise MemoryManagerError(str(err)) from None
        self.topology = TopologyManager(policy, self.topology_scope)
        try:
            self.policy = memory_manager.new_policy(
                self.policy_name, nodes=self.numa_nodes, reservations=self.reservations,
                allocatable_reservation=memory_manager.node_allocatable_reservation(
                    self.system_reserved, self.kube_reserved, self.hard_thresholds, self.memory_capacity))
        except memory_manager.ManagerError as err:
            raise MemoryManagerError(str(err)) from None
        try:
            text = await asyncio.to_thread(self._file.read)
        except OSError as err:
            raise MemoryManagerError(f"start memory manager error: failed to initialize checkpoint manager: "
                                     f"{err}") from None
        try:
            state, write = memory_manager.restore(self.policy, self.policy_name, text, self.state_file)
        except memory_manager.ManagerError as err:
            raise MemoryManagerError(str(err)) from None
        self.state = state
        if write:
            try:
                await asyncio.to_thread(self._save, state)
            except OSError as err:
                raise MemoryManagerError(f"start memory manager error: could not write {self.state_file}: "
                                         f"{err}") from None
        self.started = True
        if self.policy is not None:
            # upstream Start: `m.allocatableMemory = m.policy.GetAllocatableMemory(m.state)`, kept from then on
            self._allocatable = memory_manager.container_memory(static_policy.allocatable_memory(state))
            free = ", ".join(f"node {b.numa_affinity[0]} {b.type} {b.size}"
                             for b in static_policy.allocatable_memory(state))
            logger.info(f"memory manager: Static policy, allocatable {free}; topology manager: "
                        f"{policy.name} policy, {self.topology_scope} scope")

    def _save(self, state: State) -> None:
        """The checkpoint as upstream writes it, atomically, when it changed. Blocking: call it in a thread."""
        self._file.write(checkpoint.encode(self.policy_name, state))

    # ------------------------------------------------------------------------------------- admission

    def snapshot(self, pods: Pods) -> Snapshot:
        """What admission decides against (take it under the allocation lock)."""
        return Snapshot(policy=self.policy, state=self.state, pods=pods)

    async def commit(self, state: State) -> None:
        """Record the state an admission allocated (under the allocation lock), written before the pod's
        containers are created."""
        self.state = state
        await asyncio.to_thread(self._save, state)

    def cpuset_mems(self, pod_uid: str, container: str) -> str:
        """The ``cpusetMems`` a container is created with (upstream PreCreateContainer): its blocks' NUMA nodes;
        "" without blocks (the runtime's default: every node)."""
        if self.policy is None:
            return ""
        return static_policy.cpuset_mems(static_policy.memory_numa_nodes(self.state, pod_uid, container))

    async def container_added(self, pod: spec.Pod, container: str) -> None:
        """Upstream `AddContainer`: the regular init containers before `container` have completed; their blocks
        go back to the nodes."""
        if self.policy is None or not pod.spec.init_containers:
            return
        async with self.lock:
            state = static_policy.container_added(self.state, pod, container)
            if state != self.state:
                await self.commit(state)

    # ---------------------------------------------------------------------------------- pod resources

    def get_memory(self, pod: Mapping[str, Any], container: Mapping[str, Any]) -> tuple[ContainerMemory, ...]:
        """Upstream container manager `GetMemory`: the container's blocks (none: it shares the node's memory)."""
        if self.policy is None:
            return ()
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        return memory_manager.container_memory(self.state.blocks(uid, str(container.get("name", ""))))

    def get_pod_memory(self, pod_uid: str) -> tuple[ContainerMemory, ...]:
        """Pod-level blocks: none (`PodLevelResourceManagers` is off: the state has no pod-level entries)."""
        return ()

    def get_allocatable_memory(self) -> tuple[ContainerMemory, ...]:
        """Upstream `GetAllocatableMemory`: per NUMA node and type, the bytes the Static policy may hand out
        (the machine's less `reservedMemory`), as found at `start`; none under the ``None`` policy."""
        return self._allocatable

    # ------------------------------------------------------------------------------------- stale state

    async def remove_stale_state(self) -> None:
        """Upstream `removeStaleState`, with the apiserver asked first about pods the agent has no worker for."""
        unknown = set(self.state.assignments) - self.pods().known
        gone: set[str] = set()
        if unknown and self.listed is not None:
            try:
                gone = unknown - set(await self.listed())
            except API_ERRORS as exc:
                logger.warning(f"memory manager: cannot list the node's pods to release stale memory: {exc}")
        async with self.lock:
            state = memory_manager.remove_stale_state(self.state, self.pods(), gone)
            if state != self.state:
                logger.info("memory manager: released the memory of containers no longer active")
                await self.commit(state)

    async def run(self) -> None:
        """The stale-state loop (Static policy only)."""
        if self.policy is None:
            return
        while True:
            try:
                await self.remove_stale_state()
            except Exception as exc:
                log_failed_round(logger, "memory manager: releasing stale memory failed", exc)
            await asyncio.sleep(self.period)
