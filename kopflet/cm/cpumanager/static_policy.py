"""The CPU manager's ``static`` policy decisions (pkg/kubelet/cm/cpumanager/policy_static.go), as pure functions.

A container of a Guaranteed pod with an integer CPU request gets CPUs of its own; everything else runs on the
shared (default) set, which shrinks by each exclusive allocation and grows back on removal. The reserved CPUs stay
in the shared set and are never handed out. Upstream mutates a `State` object; here `allocate` and
`remove_container` take a `State` and return the next one, and the caller persists it (`state.encode`).

Mirrored at v1.37.1 with no topology manager (every hint is "no preference") and with PodLevelResourceManagers
and InPlacePodVerticalScalingExclusiveCPUs off (their defaults): a pod with pod-level resources gets no exclusive
CPUs, as upstream skips it with the gate off. Options: ``full-pcpus-only`` and ``strict-cpu-reservation``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from fractions import Fraction

from kopflet.api import qos, spec
from kopflet.cm import helpers
from kopflet.cm.cpumanager import assignment
from kopflet.cm.cpumanager.cpuset import EMPTY, CPUSet
from kopflet.cm.cpumanager.topology import CPUTopology, TopologyError
from kopflet.cm.topologymanager.bitmask import BitMask, iterate_bitmasks
from kopflet.cm.topologymanager.policy import NO_HINT, ProviderHints, TopologyHint
from kopflet.gotext import go_quote

POLICY_NAME = "static"

Assignments = Mapping[str, Mapping[str, CPUSet]]


class PolicyError(ValueError):
    """The policy cannot start: bad reservation, or a restored state that does not fit (upstream's texts)."""


@dataclasses.dataclass(frozen=True)
class State:
    """Upstream `state.State` for this policy: exclusive assignments (pod uid -> container -> cpuset) and the
    default (shared) set. `cpus_to_reuse` is the policy's in-memory `cpusToReuse` (an init container's CPUs
    a later container of the same pod may take); it is not checkpointed, as upstream."""

    default: CPUSet = EMPTY
    assignments: Assignments = dataclasses.field(default_factory=dict)
    cpus_to_reuse: Mapping[str, CPUSet] = dataclasses.field(default_factory=dict, compare=False)

    def get(self, pod_uid: str, container: str) -> CPUSet | None:
        """Upstream `GetCPUSet`."""
        return self.assignments.get(pod_uid, {}).get(container)

    def cpuset_or_default(self, pod_uid: str, container: str) -> CPUSet:
        """Upstream `GetCPUSetOrDefault`: what the container's cgroup ``cpuset.cpus`` gets."""
        found = self.get(pod_uid, container)
        return self.default if found is None else found

    def with_assignment(self, pod_uid: str, container: str, cpus: CPUSet) -> State:
        pod = dict(self.assignments.get(pod_uid, {}))
        pod[container] = cpus
        return dataclasses.replace(self, assignments={**self.assignments, pod_uid: pod})

    def without_assignment(self, pod_uid: str, container: str) -> State:
        """Upstream `Delete`: drops the pod's entry with its last container."""
        pod = {name: cpus for name, cpus in self.assignments.get(pod_uid, {}).items() if name != container}
        rest = {uid: value for uid, value in self.assignments.items() if uid != pod_uid}
        if pod:
            rest[pod_uid] = pod
        return dataclasses.replace(self, assignments=rest)


@dataclasses.dataclass(frozen=True)
class StaticPolicy:
    """Upstream `staticPolicy`'s fixed part: the topology, the reserved CPUs and their whole cores, options."""

    topology: CPUTopology
    reserved: CPUSet
    reserved_physical: CPUSet
    full_pcpus_only: bool = False
    strict_cpu_reservation: bool = False

    def allocatable_cpus(self) -> CPUSet:
        """Upstream `GetAllocatableCPUs`: every CPU but the reserved ones."""
        return self.topology.details.cpus() - self.reserved

    def available_cpus(self, state: State) -> CPUSet:
        """Upstream `GetAvailableCPUs`: the shared set minus the reserved CPUs."""
        return state.default - self.reserved


def num_reserved_cpus(reserved_cpu: Fraction | int | str) -> int:
    """Upstream `NewManager`: ceil(kube-reserved + system-reserved cpu), which must not be zero for ``static``."""
    if isinstance(reserved_cpu, str):
        milli = qos.milli_value(reserved_cpu)
    else:
        milli = math.ceil(Fraction(reserved_cpu) * 1000)
    if milli == 0:
        raise PolicyError("[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu "
                          "to be greater than zero")
    return math.ceil(milli / 1000)


def new_static_policy(topology: CPUTopology, num_reserved: int, reserved_cpus: CPUSet = EMPTY, *,
                      full_pcpus_only: bool = False, strict_cpu_reservation: bool = False) -> StaticPolicy:
    """Upstream `NewStaticPolicy`: the reserved CPUs are ``--reserved-cpus`` when given, else `num_reserved`
    taken by topology (lowest cores first: 2 on an 8-CPU HT machine is {0,4}); their size must be
    `num_reserved`."""
    if reserved_cpus:
        reserved = reserved_cpus
    else:
        try:
            reserved = assignment.take_by_topology(topology, topology.details.cpus(), num_reserved)
        except assignment.AllocationError:
            reserved = EMPTY  # upstream ignores the error; the size check below reports it
    if reserved.size() != num_reserved:
        raise PolicyError(f"[cpumanager] unable to reserve the required amount of CPUs "
                          f"(size of {reserved} did not equal {num_reserved})")
    physical = EMPTY
    for cpu in reserved:
        try:
            core = topology.cpu_core_id(cpu)
        except TopologyError as err:
            raise PolicyError(f"[cpumanager] unable to build the reserved physical CPUs from the reserved set: "
                              f"{err}") from None
        physical = physical | topology.details.cpus_in_cores(core)
    return StaticPolicy(topology=topology, reserved=reserved, reserved_physical=physical,
                        full_pcpus_only=full_pcpus_only, strict_cpu_reservation=strict_cpu_reservation)


def validate_state(policy: StaticPolicy, state: State) -> State:
    """Upstream `validateState` (run by `Start`): an empty state is initialised to all CPUs (minus the reserved
    ones under ``strict-cpu-reservation``); a restored one must keep the reserved CPUs shared, not overlap the
    shared set with an assignment, and cover exactly the CPUs the machine has now. Raises `PolicyError`."""
    all_cpus = policy.topology.details.cpus()
    if policy.strict_cpu_reservation:
        all_cpus = all_cpus - policy.reserved
    default = state.default
    if default.is_empty():
        if state.assignments:
            raise PolicyError("default cpuset cannot be empty")
        return dataclasses.replace(state, default=all_cpus)
    if policy.strict_cpu_reservation:
        overlap = policy.reserved & default
        if overlap:
            raise PolicyError(f"some of strictly reserved cpus: {go_quote(str(overlap))} are present in "
                              f"defaultCpuSet: {go_quote(str(default))}")
    elif (policy.reserved & default) != policy.reserved:
        raise PolicyError(f"not all reserved cpus: {go_quote(str(policy.reserved))} are present in "
                          f"defaultCpuSet: {go_quote(str(default))}")
    for pod_uid, containers in state.assignments.items():
        for name, cpus in containers.items():
            if default & cpus:
                raise PolicyError(f"pod: {pod_uid}, container: {name} cpuset: {go_quote(str(cpus))} overlaps "
                                  f"with default cpuset {go_quote(str(default))}")
    known = default.union(*(cpus for containers in state.assignments.values() for cpus in containers.values()))
    if known != all_cpus:
        raise PolicyError(f"current set of available CPUs {go_quote(str(all_cpus))} doesn't match with CPUs in "
                          f"state {go_quote(str(known))}")
    return state


def _integral(quantity: str) -> bool:
    """Upstream `isIntegralCPUAmount`: Value()*1000 == MilliValue()."""
    return qos.value(quantity) * 1000 == qos.milli_value(quantity)


def guaranteed_cpus(pod: spec.Pod, container: spec.ContainerSpec) -> int:
    """Upstream `guaranteedCPUs`: the container's CPU request when the pod is Guaranteed and the request is an
    integer, else 0 (the container stays on the shared set)."""
    if helpers.pod_qos_class(pod) != qos.GUARANTEED:
        return 0
    request = container.resources.requests.get(qos.CPU)
    if request is None or not _integral(request):
        return 0
    return qos.value(request)


def pod_guaranteed_cpus(pod: spec.Pod) -> int:
    """Upstream `podGuaranteedCPUs` (container-level resources): the pod's exclusive CPUs at its peak, the
    larger of the biggest init container (on top of the sidecars started before it) and the long-running
    containers (app containers plus sidecars)."""
    by_init = by_sidecars = 0
    for container in pod.spec.init_containers:
        if qos.CPU not in container.resources.requests:
            continue
        cpus = guaranteed_cpus(pod, container)
        if container.is_sidecar:
            by_sidecars += cpus
        elif by_sidecars + cpus > by_init:
            by_init = by_sidecars + cpus
    by_apps = sum(guaranteed_cpus(pod, c) for c in pod.spec.containers if qos.CPU in c.resources.requests)
    return max(by_init, by_apps + by_sidecars)


def _update_cpus_to_reuse(state: State, pod: spec.Pod, container: spec.ContainerSpec, cpus: CPUSet) -> State:
    """Upstream `updateCPUsToReuse`: only the current pod's entry is kept; a (non-sidecar) init container's
    CPUs become reusable by the pod's later containers, an app container's or sidecar's stop being so."""
    uid = pod.uid
    reuse = state.cpus_to_reuse.get(uid, EMPTY)
    init = next((c for c in pod.spec.init_containers if c.name == container.name), None)
    reuse = reuse | cpus if init is not None and not init.is_sidecar else reuse - cpus
    return dataclasses.replace(state, cpus_to_reuse={uid: reuse})


def allocate(policy: StaticPolicy, state: State, pod: spec.Pod, container: spec.ContainerSpec,
             hint: TopologyHint = NO_HINT) -> State:
    """Upstream `Allocate` / `allocateForAdd`: the next state, with the container's exclusive CPUs taken from the
    shared set, first from the NUMA nodes of the topology manager's `hint` (none: anywhere). Unchanged for a
    shared-pool container, and for one already in the state (after a restart: its checkpointed CPUs are kept even
    if the options changed). Raises `assignment.SMTAlignmentError` or `assignment.AllocationError` with upstream's
    messages."""
    num = guaranteed_cpus(pod, container)
    if num == 0 or helpers.pod_level_resources_set(pod):
        return state
    uid = pod.uid
    existing = state.get(uid, container.name)
    if existing is not None:
        return _update_cpus_to_reuse(state, pod, container, existing)
    if policy.full_pcpus_only:
        assignment.check_smt_alignment(num, policy.topology.cpus_per_core(),
                                       (state.default - policy.reserved_physical).size())
    # upstream allocateCPUs: from the available CPUs plus those reusable from this pod's init containers
    allocatable = policy.available_cpus(state) | state.cpus_to_reuse.get(uid, EMPTY)
    cpus = EMPTY
    if hint.affinity is not None:
        # upstream allocateCPUs: as many as possible from the hint's NUMA nodes (getAlignedCPUs), then the rest
        aligned = allocatable & policy.topology.details.cpus_in_numa_nodes(*hint.affinity.bits())
        cpus = assignment.take_by_topology(policy.topology, aligned, min(num, aligned.size()))
    cpus = cpus | assignment.take_by_topology(policy.topology, allocatable - cpus, num - cpus.size())
    state = dataclasses.replace(state, default=state.default - cpus).with_assignment(uid, container.name, cpus)
    return _update_cpus_to_reuse(state, pod, container, cpus)


def remove_container(state: State, pod_uid: str, container: str) -> State:
    """Upstream `RemoveContainer`: the container's CPUs go back to the shared set, except those a sibling in the
    same pod still holds (an app container reusing its init container's CPUs)."""
    released = state.get(pod_uid, container)
    if released is None:
        return state
    state = state.without_assignment(pod_uid, container)
    in_use = EMPTY.union(*state.assignments.get(pod_uid, {}).values())
    return dataclasses.replace(state, default=state.default | (released - in_use))



# ------------------------------------------------------------------------------------------ topology hints


def generate_cpu_topology_hints(policy: StaticPolicy, available: CPUSet, reusable: CPUSet,
                                request: int) -> list[TopologyHint]:
    """Upstream `generateCPUTopologyHints`: every NUMA node set whose CPUs (the reusable ones all inside it, plus
    the available ones in it) cover the request; preferred are those as narrow as the narrowest set that could
    hold the request on an empty machine."""
    details = policy.topology.details
    nodes = details.numa_nodes().sorted()
    min_affinity = len(nodes)
    hints: list[TopologyHint] = []

    def visit(mask: BitMask) -> None:
        nonlocal min_affinity
        if details.cpus_in_numa_nodes(*mask.bits()).size() >= request and mask.count() < min_affinity:
            min_affinity = mask.count()
        matching = 0
        for cpu in reusable:
            if not mask.is_set(details[cpu].numa_node_id):
                return
            matching += 1
        matching += sum(1 for cpu in available if mask.is_set(details[cpu].numa_node_id))
        if matching < request:
            return
        hints.append(TopologyHint(mask, False))

    iterate_bitmasks(nodes, visit)
    return [TopologyHint(h.affinity, h.affinity is not None and h.affinity.count() == min_affinity) for h in hints]


def topology_hints(policy: StaticPolicy, state: State, pod: spec.Pod, container: spec.ContainerSpec) -> ProviderHints:
    """Upstream `GetTopologyHints` for an added pod: None for a shared-pool container; for one already allocated
    (after a restart) the hints of its CPUs, or none possible if their count no longer matches; else the hints
    of the available and reusable CPUs."""
    requested = guaranteed_cpus(pod, container)
    if requested == 0 or helpers.pod_level_resources_set(pod):
        return None
    allocated = state.get(pod.uid, container.name)
    if allocated is not None:
        if allocated.size() != requested:
            return {qos.CPU: []}
        return {qos.CPU: generate_cpu_topology_hints(policy, allocated, EMPTY, requested)}
    return {qos.CPU: generate_cpu_topology_hints(policy, policy.available_cpus(state),
                                                 state.cpus_to_reuse.get(pod.uid, EMPTY), requested)}


def pod_topology_hints(policy: StaticPolicy, state: State, pod: spec.Pod) -> ProviderHints:
    """Upstream `GetPodTopologyHints` for an added pod (the pod scope): the hints for the pod's peak exclusive
    CPUs (`pod_guaranteed_cpus`), counting what its containers already hold."""
    requested = pod_guaranteed_cpus(pod)
    if requested == 0 or helpers.pod_level_resources_set(pod):
        return None
    assigned = EMPTY
    for container in (*pod.spec.init_containers, *pod.spec.containers):
        allocated = state.get(pod.uid, container.name)
        if allocated is not None:
            if allocated.size() != guaranteed_cpus(pod, container):
                return {qos.CPU: []}
            assigned = assigned | allocated
    if assigned.size() == requested:
        return {qos.CPU: generate_cpu_topology_hints(policy, assigned, EMPTY, requested)}
    reusable = state.cpus_to_reuse.get(pod.uid, EMPTY) | assigned
    return {qos.CPU: generate_cpu_topology_hints(policy, policy.available_cpus(state), reusable, requested)}
