"""The memory manager's decisions around the policy (pkg/kubelet/cm/memorymanager/memory_manager.go at v1.37.1),
with the ``reservedMemory`` configuration (pkg/util/flag ReservedMemoryVar, pkg/kubelet/apis/config/validation
validation_reserved_memory.go) and its check against Node Allocatable. Pure: the files are
`kopflet.cm.memorymanager.manager`'s.

- `new_policy`: upstream `NewManager`: ``None`` is None; ``Static`` needs ``reservedMemory`` on existing NUMA
  nodes whose totals per type equal what Node Allocatable reserves (systemReserved + kubeReserved + the hard
  ``memory.available`` threshold), and some memory reserved.
- `restore`: upstream `Start`: the ``memory_manager_state`` checkpoint restored (or a new one), then the Static
  policy's `validateState`; a checkpoint of another policy, or one that does not fit the machine, stops the agent.
- `Provider`: the memory manager as a topology manager hint provider (upstream `GetTopologyHints`,
  `GetPodTopologyHints`, `Allocate`).
- `remove_stale_state`: the blocks of containers not in an active pod are released.
- `container_memory`: blocks as the pod-resources API reports them (upstream `containerMemoryFromBlock`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction

from kopflet.api import qos, spec
from kopflet.apis.podresources.resources import ContainerMemory, TopologyInfo
from kopflet.cm.cpumanager.cpu_manager import Pods
from kopflet.cm.memorymanager import state as checkpoint
from kopflet.cm.memorymanager import static_policy
from kopflet.cm.memorymanager.machine import NUMANode
from kopflet.cm.memorymanager.state import Block, State
from kopflet.cm.memorymanager.static_policy import StaticPolicy
from kopflet.cm.topologymanager.policy import ProviderHints, TopologyHint
from kopflet.eviction import thresholds
from kopflet.gotext import go_quote

POLICY_NONE = "None"
POLICY_STATIC = "Static"
POLICIES = (POLICY_NONE, POLICY_STATIC)
_HUGEPAGES_PREFIX = "hugepages-"
_FORMAT_HINT = "numaNodeID:type=quantity[,type=quantity...]"


class ManagerError(ValueError):
    """The memory manager cannot start (upstream's message); the agent does not start."""


@dataclasses.dataclass(frozen=True)
class MemoryReservation:
    """Upstream `MemoryReservation`: the memory and hugepages kept for the system on one NUMA node (quantities)."""

    numa_node: int
    limits: Mapping[str, str]


def _is_memory_type(name: str) -> bool:
    return name == qos.MEMORY or name.startswith(_HUGEPAGES_PREFIX)


def parse_reserved_memory_flag(text: str) -> tuple[MemoryReservation, ...]:
    """One ``--reserved-memory`` value (upstream `ReservedMemoryVar.Set`): ``0:memory=1Gi,hugepages-2Mi=2Gi``,
    several NUMA nodes separated by ``;``. Raises ValueError with upstream's texts."""
    if text == "":
        return ()
    out = []
    for reservation in text.split(";"):
        parts = reservation.split(":")
        if len(parts) != 2:
            raise ValueError(f"the reserved memory has incorrect format, expected {_FORMAT_HINT}, got {reservation}")
        node_text, limits_text = parts
        digits = node_text[1:] if node_text[:1] in "+-" else node_text
        if not digits or not digits.isascii() or not digits.isdigit():
            raise ValueError(f"failed to convert the NUMA node ID, expected integer, got {node_text}")
        limits: dict[str, str] = {}
        for item in limits_text.split(","):
            pair = item.split("=")
            if len(pair) != 2:
                raise ValueError(f"the reserved limit has incorrect value, expected type=quantity, got {item}")
            name, quantity = pair
            if not _is_memory_type(name):
                raise ValueError(f"memory type conversion error, unknown type: {go_quote(name)}")
            try:
                qos.parse_quantity(quantity)
            except qos.QuantityError:
                raise ValueError(f"failed to parse the quantity: {quantity}") from None
            limits[name] = quantity
        out.append(MemoryReservation(int(node_text), limits))
    return tuple(out)


def validate_reserved_memory(reservations: Sequence[MemoryReservation]) -> list[str]:
    """Upstream `validateReservedMemoryConfiguration`: supported types only, no zero, no duplicate per node."""
    errors = []
    seen: dict[int, set[str]] = {}
    for reservation in reservations:
        node = reservation.numa_node
        types = seen.setdefault(node, set())
        for name, quantity in reservation.limits.items():
            if not _is_memory_type(name):
                errors.append(f'invalid configuration: the limit type {go_quote(name)} for NUMA node {node} is not '
                              f'supported, only [memory hugepages-<HugePageSize>] is accepted')
            if qos.parse_quantity(quantity) == 0:
                errors.append(f"invalid configuration: reserved memory may not be zero for NUMA node {node} and "
                              f"resource {go_quote(name)}")
            if name in types:
                errors.append(f"invalid configuration: the reserved memory has a duplicate value for NUMA node "
                              f"{node} and resource {go_quote(name)}")
            types.add(name)
    return errors


# ------------------------------------------------------------------------------------ Node Allocatable


@dataclasses.dataclass(frozen=True)
class _Amount:
    """A Go `resource.Quantity` as far as the message needs it: the value and the format `Add` leaves."""

    value: Fraction = Fraction(0)
    fmt: str = ""

    def add(self, value: Fraction, fmt: str) -> _Amount:
        # Quantity.Add: a zero receiver takes the addend's format
        return _Amount(self.value + value, fmt if self.value == 0 else self.fmt)

    def __str__(self) -> str:
        return thresholds.format_quantity(self.value, self.fmt or thresholds.DECIMAL_SI)


def node_allocatable_reservation(system_reserved: Mapping[str, str], kube_reserved: Mapping[str, str],
                                 hard_thresholds: Iterable[thresholds.Threshold],
                                 memory_capacity: int) -> dict[str, _Amount]:
    """Upstream `GetNodeAllocatableReservation` for memory (the types the check looks at): systemReserved +
    kubeReserved + the hard ``memory.available`` threshold (`hardEvictionReservation`); zero left out."""
    amount = _Amount()
    for reserved in (system_reserved, kube_reserved):
        if qos.MEMORY in reserved:
            text = reserved[qos.MEMORY]
            amount = amount.add(qos.parse_quantity(text), thresholds.quantity_format(text))
    for threshold in hard_thresholds:
        if threshold.signal == thresholds.MEMORY_AVAILABLE and threshold.is_hard and \
                threshold.operator == thresholds.OP_LESS_THAN:
            value, fmt = threshold.value.amount(memory_capacity)
            amount = amount.add(Fraction(value), fmt)
    return {qos.MEMORY: amount} if amount.value != 0 else {}


def system_reserved_memory(nodes: Sequence[NUMANode], allocatable_reservation: Mapping[str, _Amount],
                           reservations: Sequence[MemoryReservation]) -> dict[int, dict[str, int]]:
    """Upstream `getSystemReservedMemory`: `validateReservedMemory` (every node exists; per type the total equals
    Node Allocatable's reservation), then the bytes per node and type. Raises `ManagerError`."""
    ids = {node.id for node in nodes}
    totals: dict[str, _Amount] = {}
    for reservation in reservations:
        if reservation.numa_node not in ids:
            raise ManagerError(f"the reserved memory configuration references a NUMA node {reservation.numa_node} "
                               f"that does not exist on this machine")
        for name, text in reservation.limits.items():
            # upstream: q.Add(previous total), so the latest reservation's format wins
            current = _Amount(qos.parse_quantity(text), thresholds.quantity_format(text))
            previous = totals.get(name)
            totals[name] = current.add(previous.value, previous.fmt) if previous is not None else current
    for name in sorted(set(totals) | {n for n in allocatable_reservation if _is_memory_type(n)}):
        allocatable = _Amount().add(allocatable_reservation[name].value, allocatable_reservation[name].fmt) \
            if name in allocatable_reservation else _Amount()
        reserved = _Amount().add(totals[name].value, totals[name].fmt) if name in totals else _Amount()
        if allocatable.value != reserved.value:
            raise ManagerError(f"the total amount {go_quote(str(reserved))} of type {go_quote(name)} is not equal to "
                               f"the value {go_quote(str(allocatable))} determined by Node Allocatable feature")
    converted: dict[int, dict[str, int]] = {node.id: {} for node in nodes}
    for reservation in reservations:
        for name, text in reservation.limits.items():
            value = qos.parse_quantity(text)
            if value.denominator != 1 or not -(1 << 63) <= value < 1 << 63:
                raise ManagerError("could not covert a variable of type Quantity to int64")
            converted[reservation.numa_node][name] = int(value)
    return converted


def new_policy(name: str, *, nodes: Sequence[NUMANode], allocatable_reservation: Mapping[str, _Amount],
               reservations: Sequence[MemoryReservation]) -> StaticPolicy | None:
    """Upstream `NewManager`: None for the ``None`` policy, the Static policy otherwise. Raises `ManagerError`."""
    if name == POLICY_NONE:
        return None
    if name != POLICY_STATIC:
        raise ManagerError(f"unknown policy: {go_quote(name)}")
    reserved = system_reserved_memory(nodes, allocatable_reservation, reservations)
    try:
        return static_policy.new_static_policy(nodes, reserved)
    except static_policy.MemoryManagerError as err:
        raise ManagerError(str(err)) from None


def restore(policy: StaticPolicy | None, policy_name: str, text: str | bytes | None, path: str) -> tuple[State, bool]:
    """Upstream `Start`: the checkpoint (`text`, None without a file) restored for the configured policy, then the
    Static policy's `validateState`. Returns the state and whether it must be written. Raises `ManagerError`
    ("start memory manager error: ...")."""
    if text is None:
        state, write = State(), True
    else:
        try:
            state = checkpoint.restore(checkpoint.decode(text), policy_name)
        except checkpoint.CheckpointError as err:
            raise ManagerError(f"start memory manager error: {checkpoint.restore_failure(err, path)}") from None
        write = False
    if policy is not None:
        try:
            validated = static_policy.validate_state(policy, state)
        except static_policy.MemoryManagerError as err:
            raise ManagerError(f"start memory manager error: {err}") from None
        write = write or validated != state
        state = validated
    return state, write


def remove_stale_state(state: State, pods: Pods, gone: Iterable[str] = ()) -> State:
    """Upstream `removeStaleState`: blocks of containers not in an active pod are released. As the CPU manager
    here, a pod the agent does not know yet keeps its blocks until the apiserver confirms it is `gone`."""
    confirmed = set(gone)
    for uid in sorted(state.assignments):
        if uid not in pods.known and uid not in confirmed:
            continue
        wanted = pods.active.get(uid, frozenset())
        for name in sorted(state.assignments.get(uid, {})):
            if name not in wanted:
                state = static_policy.remove_container(state, uid, name)
    return state


def container_memory(blocks: Iterable[Block] | None) -> tuple[ContainerMemory, ...]:
    """Upstream `containerMemoryFromBlock`: each block, its topology always set (its NUMA affinity)."""
    return tuple(ContainerMemory(memory_type=b.type, size=b.size, topology=TopologyInfo(tuple(b.numa_affinity)))
                 for b in blocks or ())



@dataclasses.dataclass(frozen=True)
class Provider:
    """The memory manager as a topology manager hint provider (None policy: no hints, nothing allocated)."""

    policy: StaticPolicy | None
    state: State

    def topology_hints(self, pod: spec.Pod, container: spec.ContainerSpec) -> ProviderHints:
        return None if self.policy is None else static_policy.topology_hints(self.state, pod, container)

    def pod_topology_hints(self, pod: spec.Pod) -> ProviderHints:
        return None if self.policy is None else static_policy.pod_topology_hints(self.state, pod)

    def allocate(self, pod: spec.Pod, container: spec.ContainerSpec, hint: TopologyHint) -> Provider:
        if self.policy is None:
            return self
        return dataclasses.replace(self, state=static_policy.allocate(self.state, pod, container, hint))


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """What admission sees of the memory manager, taken under the node's allocation lock."""

    policy: StaticPolicy | None
    """None: the None policy (nothing is allocated)."""
    state: State
    pods: Pods = dataclasses.field(default_factory=Pods)
