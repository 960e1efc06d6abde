"""The memory manager's ``Static`` policy (pkg/kubelet/cm/memorymanager/policy_static.go at v1.37.1), as pure
functions over `state.State`.

A Guaranteed pod's containers get blocks of memory and hugepages on a set of NUMA nodes (the topology manager's
hint, else the narrowest that fits): the node's free bytes become reserved, and ``cpuset.mems`` confines the
container to those nodes. Nodes used together by one container form a group (``cells``) no other container may
use with another set of nodes. A regular init container's blocks are reused by the pod's later containers (and
released once the next container starts: `container_added`). Upstream mutates its state; here each function takes
a state and returns the next one.

Pod-level resources take no blocks (upstream's PodLevelResourceManagers gate is off), so `AllocatePod` and the
pod-level checkpoint entries are not mirrored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from kopflet.api import qos, spec
from kopflet.cm import helpers
from kopflet.cm.memorymanager.machine import NUMANode, hugepage_resource_name
from kopflet.cm.memorymanager.state import Block, MachineState, MemoryTable, NUMANodeState, State
from kopflet.cm.topologymanager.bitmask import BitMask, iterate_bitmasks
from kopflet.cm.topologymanager.policy import NO_HINT, ProviderHints, TopologyHint

POLICY_NAME = "Static"
_HUGEPAGES_PREFIX = "hugepages-"


class MemoryManagerError(ValueError):
    """An allocation or validation failure, with upstream's text ("[memorymanager] ...")."""


@dataclasses.dataclass(frozen=True)
class StaticPolicy:
    """Upstream `staticPolicy`'s fixed part: the machine's NUMA nodes and the reserved memory per node and type."""

    nodes: tuple[NUMANode, ...]
    system_reserved: Mapping[int, Mapping[str, int]]


def new_static_policy(nodes: Sequence[NUMANode], system_reserved: Mapping[int, Mapping[str, int]]) -> StaticPolicy:
    """Upstream `NewPolicyStatic`: some memory must be reserved."""
    total = sum(reserved.get(qos.MEMORY, 0) for reserved in system_reserved.values())
    if total <= 0:
        raise MemoryManagerError("[memorymanager] you should specify the system reserved memory")
    return StaticPolicy(tuple(nodes), {node: dict(r) for node, r in system_reserved.items()})


# ------------------------------------------------------------------------------ a mutable working copy


@dataclasses.dataclass
class _Table:
    total: int
    system_reserved: int
    allocatable: int
    reserved: int
    free: int


@dataclasses.dataclass
class _Node:
    number_of_assignments: int
    memory_map: dict[str, _Table]
    cells: list[int]


def _thaw(machine: MachineState) -> dict[int, _Node]:
    return {node: _Node(s.number_of_assignments, {name: _Table(**dataclasses.asdict(t))
                                                  for name, t in s.memory_map.items()}, list(s.cells))
            for node, s in machine.items()}


def _freeze(machine: Mapping[int, _Node]) -> dict[int, NUMANodeState]:
    return {node: NUMANodeState(s.number_of_assignments, {name: MemoryTable(**dataclasses.asdict(t))
                                                          for name, t in s.memory_map.items()}, tuple(s.cells))
            for node, s in machine.items()}


def _table(machine: Mapping[int, _Node], node: int, resource: str) -> _Table:
    """A node's table of a memory type (a zero one when the node has none of that type: upstream would
    dereference nil)."""
    found = machine.get(node)
    table = found.memory_map.get(resource) if found is not None else None
    return table if table is not None else _Table(0, 0, 0, 0, 0)


# ------------------------------------------------------------------------------------ machine state


def _reserved(policy: StaticPolicy, node: int, resource: str) -> int:
    """Upstream `getResourceSystemReserved`."""
    return policy.system_reserved.get(node, {}).get(resource, 0)


def default_machine_state(policy: StaticPolicy) -> dict[int, NUMANodeState]:
    """Upstream `getDefaultMachineState`: per node, each hugepage size's pages and the memory left after the
    reservation and the hugepages, all free."""
    machine: dict[int, NUMANodeState] = {}
    for node in policy.nodes:
        tables: dict[str, MemoryTable] = {}
        hugepages_total = 0
        for page_size_kib, num_pages in node.hugepages:
            name = hugepage_resource_name(page_size_kib)
            reserved = _reserved(policy, node.id, name)
            total = num_pages * page_size_kib * 1024
            allocatable = total - reserved
            tables[name] = MemoryTable(total=total, system_reserved=reserved, allocatable=allocatable, free=allocatable)
            hugepages_total += total
        reserved = _reserved(policy, node.id, qos.MEMORY)
        allocatable = node.memory - reserved - hugepages_total
        tables[qos.MEMORY] = MemoryTable(total=node.memory, system_reserved=reserved, allocatable=allocatable,
                                         free=allocatable)
        machine[node.id] = NUMANodeState(0, tables, (node.id,))
    return machine


def _update_machine_state(machine: dict[int, _Node], affinity: Sequence[int], resource: str, size: int) -> None:
    """Upstream `updateMachineState`: the size is taken from the nodes' free bytes in order; every node of the
    affinity counts one more assignment and joins the group."""
    for node_id in affinity:
        node = machine[node_id]
        node.number_of_assignments += 1
        node.cells = list(affinity)
        if size == 0:
            continue
        table = node.memory_map.get(resource)
        if table is None or table.free <= 0:
            continue
        if table.free >= size:
            table.reserved += size
            table.free -= size
            size = 0
            continue
        size -= table.free
        table.reserved += table.free
        table.free = 0


def _release(machine: dict[int, _Node], blocks: Sequence[Block]) -> None:
    """Upstream `releaseMemory`."""
    for block in blocks:
        released = block.size
        for node_id in block.numa_affinity:
            node = machine.get(node_id)
            if node is None:
                continue
            node.number_of_assignments -= 1
            if node.number_of_assignments == 0:
                node.cells = [node_id]
            if released == 0:
                continue
            table = node.memory_map.get(block.type)
            if table is None or table.reserved == 0:
                continue
            if table.reserved < released:
                released -= table.reserved
                table.free += table.reserved
                table.reserved = 0
                continue
            table.free += released
            table.reserved -= released
            released = 0


def validate_state(policy: StaticPolicy, state: State) -> State:
    """Upstream `validateState` (run by `Start`): an empty machine state is initialised (only without
    assignments); a restored one must be what the assignments make of the machine as it is now."""
    if not state.machine_state:
        if state.assignments:
            raise MemoryManagerError("[memorymanager] machine state can not be empty when it has memory assignments")
        return dataclasses.replace(state, machine_state=default_machine_state(policy))
    expected = _thaw(default_machine_state(policy))
    for uid, containers in state.assignments.items():
        for name, blocks in containers.items():
            for block in blocks:
                size = block.size
                for node_id in block.numa_affinity:
                    node = expected.get(node_id)
                    if node is None:
                        raise MemoryManagerError(f"[memorymanager] (pod: {uid}, container: {name}) the memory "
                                                 f"assignment uses the NUMA that does not exist")
                    node.number_of_assignments += 1
                    node.cells = list(block.numa_affinity)
                    table = node.memory_map.get(block.type)
                    if table is None:
                        raise MemoryManagerError(f"[memorymanager] (pod: {uid}, container: {name}) the memory "
                                                 f"assignment uses memory resource that does not exist")
                    if size == 0 or table.free <= 0:
                        continue
                    if table.free >= size:
                        table.reserved += size
                        table.free -= size
                        size = 0
                        continue
                    size -= table.free
                    table.reserved += table.free
                    table.free = 0
    if not _machine_states_equal(_thaw(state.machine_state), expected):
        raise MemoryManagerError("[memorymanager] the expected machine state is different from the real one")
    return state


def _machine_states_equal(ms1: Mapping[int, _Node], ms2: Mapping[int, _Node]) -> bool:
    """Upstream `areMachineStatesEqual`: per node the assignments, the group, each type's total, reservation and
    allocatable, and the group's summed free and reserved bytes."""
    if set(ms1) != set(ms2):
        return False
    for node_id, n1 in ms1.items():
        n2 = ms2[node_id]
        if n1.number_of_assignments != n2.number_of_assignments or sorted(n1.cells) != sorted(n2.cells):
            return False
        if set(n1.memory_map) != set(n2.memory_map):
            return False
        for resource, t1 in n1.memory_map.items():
            t2 = n2.memory_map[resource]
            if (t1.total, t1.system_reserved, t1.allocatable) != (t2.total, t2.system_reserved, t2.allocatable):
                return False
            free1 = sum(_table(ms1, c, resource).free for c in n1.cells)
            reserved1 = sum(_table(ms1, c, resource).reserved for c in n1.cells)
            free2 = sum(_table(ms2, c, resource).free for c in n1.cells)
            reserved2 = sum(_table(ms2, c, resource).reserved for c in n1.cells)
            if free1 != free2 or reserved1 != reserved2:
                return False
    return True


def allocatable_memory(state: State) -> list[Block]:
    """Upstream `GetAllocatableMemory`: each node's allocatable bytes per type (zero left out)."""
    return [Block((node,), name, table.allocatable)
            for node, s in sorted(state.machine_state.items()) for name, table in sorted(s.memory_map.items())
            if table.allocatable != 0]


# ------------------------------------------------------------------------------------------- requests


def _is_memory_resource(name: str) -> bool:
    return name == qos.MEMORY or name.startswith(_HUGEPAGES_PREFIX)


def container_requested_resources(container: spec.ContainerSpec) -> dict[str, int]:
    """Upstream `getContainerRequestedResources`: the container's memory and hugepages requests in bytes."""
    requested: dict[str, int] = {}
    for name, quantity in container.resources.requests.items():
        if not _is_memory_resource(name):
            continue
        value = qos.parse_quantity(quantity)
        if value.denominator != 1 or not -(1 << 63) <= value < 1 << 63:
            raise MemoryManagerError("[memorymanager] failed to represent quantity as int64")
        requested[name] = int(value)
    return requested


def pod_requested_resources(pod: spec.Pod) -> dict[str, int]:
    """Upstream `getPodRequestedResources`: per type, the larger of the long-running containers' sum (app
    containers and sidecars) and the biggest init container on top of the sidecars started before it."""
    by_init: dict[str, int] = {}
    by_sidecars: dict[str, int] = {}
    for container in pod.spec.init_containers:
        for name, size in container_requested_resources(container).items():
            by_init.setdefault(name, 0)
            if container.is_sidecar:
                by_sidecars[name] = by_sidecars.get(name, 0) + size
            elif by_sidecars.get(name, 0) + size > by_init[name]:
                by_init[name] = by_sidecars.get(name, 0) + size
    by_apps: dict[str, int] = {}
    for container in pod.spec.containers:
        for name, size in container_requested_resources(container).items():
            by_apps[name] = by_apps.get(name, 0) + size
    return {name: max(total + by_sidecars.get(name, 0), by_init.get(name, 0)) for name, total in by_apps.items()}


# ---------------------------------------------------------------------------------------------- hints


def _reusable(state: State, pod_uid: str, mask: BitMask, resource: str) -> int:
    """Upstream `getPodReusableMemory`."""
    return state.reusable.get(pod_uid, {}).get(str(mask), {}).get(resource, 0)


def calculate_hints(state: State, pod_uid: str, requested: Mapping[str, int]) -> dict[str, list[TopologyHint]]:
    """Upstream `calculateHints`: every NUMA node set whose allocatable bytes could hold the request, that does
    not break an existing group, and whose free bytes (plus what the pod's init containers leave) hold it now;
    preferred are those as narrow as the narrowest set whose allocatable could hold it. {} when none."""
    machine = state.machine_state
    nodes = sorted(machine)
    min_affinity = len(nodes)
    found: list[BitMask] = []

    def visit(mask: BitMask) -> None:
        nonlocal min_affinity
        bits = mask.bits()
        single = len(bits) == 1
        free = {r: sum(_node_table(machine, n, r).free for n in bits) for r in requested}
        allocatable = {r: sum(_node_table(machine, n, r).allocatable for n in bits) for r in requested}
        if any(allocatable[r] < size for r, size in requested.items()):
            return
        min_affinity = min(min_affinity, mask.count())
        if single and len(machine[bits[0]].cells) > 1:
            return  # the node is in a group already
        for node in bits:
            if not single and machine[node].number_of_assignments > 0:
                if len(machine[node].cells) == 1 or sorted(machine[node].cells) != bits:
                    return
        for r, size in requested.items():
            if free[r] + _reusable(state, pod_uid, mask, r) < size:
                return
        found.append(mask)

    iterate_bitmasks(nodes, visit)
    return {r: [TopologyHint(mask, mask.count() == min_affinity) for mask in found] for r in requested} if found \
        else {}


def _node_table(machine: MachineState, node: int, resource: str) -> MemoryTable:
    table = machine[node].memory_map.get(resource)
    return table if table is not None else MemoryTable()


def _regenerate_hints(blocks: Sequence[Block], requested: Mapping[str, int]) -> ProviderHints:
    """Upstream `regenerateHints`: the hints of blocks allocated before (after a restart), None when they do not
    match the request."""
    hints: dict[str, list[TopologyHint]] = {r: [] for r in requested}
    if len(blocks) != len(requested):
        return None
    for block in blocks:
        if block.type not in requested or block.size != requested[block.type]:
            return None
        try:
            mask = BitMask.of(*block.numa_affinity)
        except ValueError:
            return None
        hints[block.type].append(TopologyHint(mask, True))
    return hints


def _skips(pod: spec.Pod) -> bool:
    """Upstream: only Guaranteed pods get blocks, and not those with pod-level resources (the gate is off)."""
    return helpers.pod_qos_class(pod) != qos.GUARANTEED or helpers.pod_level_resources_set(pod)


def topology_hints(state: State, pod: spec.Pod, container: spec.ContainerSpec) -> ProviderHints:
    """Upstream `GetTopologyHints` for an added pod."""
    if helpers.pod_qos_class(pod) != qos.GUARANTEED:
        return None
    try:
        requested = container_requested_resources(container)
    except MemoryManagerError:
        return None
    if not requested or helpers.pod_level_resources_set(pod):
        return None
    blocks = state.blocks(pod.uid, container.name)
    if blocks is not None:
        return _regenerate_hints(blocks, requested)
    return calculate_hints(state, pod.uid, requested)


def pod_topology_hints(state: State, pod: spec.Pod) -> ProviderHints:
    """Upstream `GetPodTopologyHints` for an added pod (the pod scope)."""
    if helpers.pod_qos_class(pod) != qos.GUARANTEED:
        return None
    try:
        requested = pod_requested_resources(pod)
    except MemoryManagerError:
        return None
    if helpers.pod_level_resources_set(pod) or not requested:
        return None
    for container in (*pod.spec.init_containers, *pod.spec.containers):
        blocks = state.blocks(pod.uid, container.name)
        if blocks is not None:
            return _regenerate_hints(blocks, requested)
    return calculate_hints(state, pod.uid, requested)


def _find_best_hint(hints: Sequence[TopologyHint]) -> TopologyHint:
    """Upstream `findBestHint`: preferred first, then the narrowest."""
    best = TopologyHint()
    for hint in hints:
        if best.affinity is None:
            best = hint
            continue
        if hint.preferred and not best.preferred:
            best = hint
            continue
        if hint.preferred == best.preferred and hint.affinity is not None and \
                hint.affinity.is_narrower_than(best.affinity):
            best = hint
    return best


def _default_hint(state: State, pod_uid: str, requested: Mapping[str, int]) -> TopologyHint:
    hints = calculate_hints(state, pod_uid, requested)
    if not hints:
        raise MemoryManagerError("[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with "
                                 "enough memory is available")
    return _find_best_hint(hints.get(qos.MEMORY, []))


def _satisfies(machine: MachineState, mask: BitMask, requested: Mapping[str, int]) -> bool:
    """Upstream `isAffinitySatisfyRequest`: the nodes' free bytes hold the request."""
    return all(sum(_node_table(machine, n, r).free for n in mask.bits()) >= size for r, size in requested.items())


def _extend_hint(state: State, pod_uid: str, requested: Mapping[str, int], mask: BitMask) -> TopologyHint:
    """Upstream `extendTopologyManagerHint`: the best hint among those that contain the given nodes."""
    wanted = set(mask.bits())
    candidates = [h for h in calculate_hints(state, pod_uid, requested).get(qos.MEMORY, [])
                  if h.affinity is not None and wanted <= set(h.affinity.bits())]
    if not candidates:
        raise MemoryManagerError("[memorymanager] failed to find NUMA nodes to extend the current topology hint")
    return _find_best_hint(candidates)


def _violates_allocations(machine: MachineState, mask: BitMask) -> bool:
    """Upstream `isAffinityViolatingNUMAAllocations`."""
    bits = mask.bits()
    if len(bits) == 1:
        return False
    for node in bits:
        if machine[node].number_of_assignments == 0:
            continue
        if len(machine[node].cells) == 1 or sorted(machine[node].cells) != bits:
            return True
    return False


def _is_regular_init(pod: spec.Pod, name: str) -> bool:
    """Upstream `isRegularInitContainer`."""
    return any(c.name == name and not c.is_sidecar for c in pod.spec.init_containers)


def _update_reusable(state: State, pod: spec.Pod, container: spec.ContainerSpec, blocks: Sequence[Block]) -> State:
    """Upstream `updatePodReusableMemory`: only this pod's entry is kept; a regular init container's blocks become
    reusable by its later containers, and what a later container takes stops being so."""
    pod_reusable = {mask: dict(types) for mask, types in state.reusable.get(pod.uid, {}).items()}
    if _is_regular_init(pod, container.name):
        for block in blocks:
            key = str(BitMask.of(*block.numa_affinity))
            types = pod_reusable.setdefault(key, {})
            if block.size > types.get(block.type, 0):
                types[block.type] = block.size
    else:
        for block in blocks:
            key = str(BitMask.of(*block.numa_affinity))
            reusable = pod_reusable.get(key, {}).get(block.type, 0)
            if reusable != 0:
                pod_reusable[key][block.type] = 0 if block.size >= reusable else reusable - block.size
    return dataclasses.replace(state, reusable={pod.uid: pod_reusable} if pod_reusable else {})


def _update_init_containers_blocks(state: State, pod: spec.Pod, container: spec.ContainerSpec,
                                   container_blocks: Sequence[Block]) -> State:
    """Upstream `updateInitContainersMemoryBlocks`: the blocks the container reuses are taken off the earlier
    regular init containers' blocks of the same type and nodes, so the bytes are counted once."""
    for container_block in container_blocks:
        size = container_block.size
        for init in pod.spec.init_containers:
            if init.name == container.name or size == 0:
                break
            if init.is_sidecar:
                continue
            init_blocks = list(state.blocks(pod.uid, init.name) or ())
            if not init_blocks:
                continue
            for i, block in enumerate(init_blocks):
                if block.size == 0 or block.type != container_block.type:
                    continue
                if set(block.numa_affinity) != set(container_block.numa_affinity):
                    continue
                if block.size > size:
                    init_blocks[i] = dataclasses.replace(block, size=block.size - size)
                    size = 0
                else:
                    size -= block.size
                    init_blocks[i] = dataclasses.replace(block, size=0)
            state = state.with_blocks(pod.uid, init.name, init_blocks)
    return state


def allocate(state: State, pod: spec.Pod, container: spec.ContainerSpec, hint: TopologyHint = NO_HINT) -> State:
    """Upstream `Allocate` for an added pod: the container's blocks on the hint's nodes (none: the best that fits,
    widened when the hint's nodes cannot hold it). Unchanged for a container that is not Guaranteed or asks no
    memory, and for one allocated before (after a restart). Raises `MemoryManagerError`."""
    if _skips(pod):
        return state
    requested = container_requested_resources(container)
    if not requested:
        return state
    existing = state.blocks(pod.uid, container.name)
    if existing is not None:
        return _update_reusable(state, pod, container, existing)
    machine = state.machine_state
    best = hint
    if hint.affinity is None:
        default = _default_hint(state, pod.uid, requested)
        if not default.preferred and best.preferred:
            raise MemoryManagerError("[memorymanager] failed to find the default preferred hint")
        best = default
    mask = best.affinity if best.affinity is not None else BitMask()
    if not _satisfies(machine, mask, requested):
        extended = _extend_hint(state, pod.uid, requested, mask)
        if not extended.preferred and best.preferred:
            raise MemoryManagerError("[memorymanager] failed to find the extended preferred hint")
        best = extended
        mask = best.affinity if best.affinity is not None else BitMask()
    if _violates_allocations(machine, mask):
        raise MemoryManagerError("[memorymanager] preferred hint violates NUMA node allocation")
    bits = tuple(mask.bits())
    work = _thaw(machine)
    blocks = []
    for resource in sorted(requested):  # upstream ranges over a map: any order
        size = requested[resource]
        blocks.append(Block(bits, resource, size))
        reusable = _reusable(state, pod.uid, mask, resource)
        _update_machine_state(work, bits, resource, 0 if reusable >= size else size - reusable)
    state = _update_reusable(state, pod, container, blocks)
    state = dataclasses.replace(state, machine_state=_freeze(work)).with_blocks(pod.uid, container.name, blocks)
    return _update_init_containers_blocks(state, pod, container, blocks)


def remove_container(state: State, pod_uid: str, container: str) -> State:
    """Upstream `RemoveContainer`: the container's blocks go back to their nodes' free bytes."""
    blocks = state.blocks(pod_uid, container)
    if blocks is None:
        return state
    work = _thaw(state.machine_state)
    _release(work, blocks)
    return dataclasses.replace(state.without_blocks(pod_uid, container), machine_state=_freeze(work))


def container_added(state: State, pod: spec.Pod, container: str) -> State:
    """Upstream `AddContainer`: once a container starts, the regular init containers before it have run to
    completion; their blocks are released (sidecars keep theirs)."""
    for init in pod.spec.init_containers:
        if init.name == container:
            break
        if init.is_sidecar:
            continue
        state = remove_container(state, pod.uid, init.name)
    return state


def memory_numa_nodes(state: State, pod_uid: str, container: str) -> tuple[int, ...]:
    """Upstream `GetMemoryNUMANodes`: the nodes of the container's blocks (empty: no constraint)."""
    return tuple(sorted({n for block in state.blocks(pod_uid, container) or () for n in block.numa_affinity}))


def cpuset_mems(nodes: Sequence[int]) -> str:
    """Upstream PreCreateContainer: ``cpuset.mems`` as the node ids joined by commas ("" for none)."""
    return ",".join(str(n) for n in sorted(nodes))
