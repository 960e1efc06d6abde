"""The CPU manager's decisions around the policy (pkg/kubelet/cm/cpumanager/cpu_manager.go `manager` at v1.37.1),
with the topology manager's admit handler at its default ``none`` policy (topologymanager/scope.go
`admitPolicyNone`) and the admission errors of pkg/kubelet/cm/admission/errors.go. Pure: the files, the runtime and
the clock are `kopflet.cm.cpumanager.manager`'s.

- `new_policy`: upstream `NewManager` (with cmd/kubelet/app/server.go `getReservedCPUs`): the none policy is
  `None`, the static policy is built from the topology and the CPU reservation (``reservedSystemCPUs`` replaces
  the reserved cpu of systemReserved and kubeReserved by its CPU count).
- `restore`: upstream `Start`: the ``cpu_manager_state`` checkpoint restored (or a new one), then the policy's
  `validateState`; a checkpoint of another policy, or one that does not fit the machine, stops the agent.
- `admit`: the admit handler: stale state released first (`removeStaleState`), then every init and app container
  of the pod through `Allocate`, the first error rejecting the pod. With the topology manager's none policy no
  `TopologyAffinityError` can arise: a failed allocation is ``UnexpectedAdmissionError`` ("Allocate failed due to
  ..., which is unexpected"), or ``SMTAlignmentError`` (an error with its own type) under ``full-pcpus-only``.
- `remove_stale_state`: an assignment of a container that is not in an active pod is released.
- `reconcile_updates`: upstream `reconcileState`: the running containers whose cpuset differs from what the state
  says now (the shared pool shrinks and grows with each exclusive allocation).
- `container_cpu_ids`, `allocatable_cpu_ids`: what the pod-resources API reports (cm/container_manager_linux.go
  `GetCPUs`, `GetAllocatableCPUs`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from kopflet.api import spec
from kopflet.cm.cpumanager import assignment, policy_options, static_policy
from kopflet.cm.cpumanager import state as checkpoint
from kopflet.cm.cpumanager.cpuset import EMPTY, CPUSet
from kopflet.cm.cpumanager.policy_options import POLICY_NONE, POLICY_STATIC
from kopflet.cm.cpumanager.static_policy import State, StaticPolicy
from kopflet.cm.cpumanager.topology import CPUTopology
from kopflet.cm.topologymanager.policy import ProviderHints, TopologyHint
from kopflet.lifecycle import admission

UNEXPECTED_ADMISSION_ERROR = "UnexpectedAdmissionError"
"""pkg/kubelet/cm/admission/errors.go ErrorReasonUnexpected: the reason of an allocation error without a type."""

__all__ = [
    "POLICY_NONE",
    "POLICY_STATIC",
    "UNEXPECTED_ADMISSION_ERROR",
    "Admission",
    "HintProvider",
    "ManagerError",
    "Pods",
    "RunningContainer",
    "Snapshot",
    "admission_rejection",
    "admit",
    "allocatable_cpu_ids",
    "container_cpu_ids",
    "new_policy",
    "pod_exclusive_cpus",
    "reconcile_updates",
    "remove_stale_state",
    "reserved_cpu_set",
    "restore",
]


class ManagerError(ValueError):
    """The CPU manager cannot start (upstream's message); the agent does not start."""


def reserved_cpu_set(text: str, topology: CPUTopology | None, topology_error: str = "") -> CPUSet:
    """Upstream `getReservedCPUs`: ``--reserved-cpus`` must name online CPUs (the empty set without it)."""
    if not text:
        return EMPTY
    if topology is None:
        raise ManagerError(f"unable to discover CPU topology info: {topology_error}")
    try:
        reserved = policy_options.parse_reserved_cpus(text)
    except policy_options.OptionsError as err:
        raise ManagerError(str(err)) from None
    online = topology.details.cpus()
    if not reserved.is_subset_of(online):
        raise ManagerError(f"reserved-cpus: {text} is not a subset of online-cpus: {online}")
    return reserved


def new_policy(name: str, options: Mapping[str, str], *, topology: CPUTopology | None, topology_error: str = "",
               system_reserved: Mapping[str, str], kube_reserved: Mapping[str, str],
               reserved_cpus: str = "") -> StaticPolicy | None:
    """Upstream `NewManager`: None for the none policy, the static policy otherwise. `topology` is what was read
    of the machine (None with `topology_error` when it could not be); the static policy needs it. Raises
    `ManagerError` with upstream's messages."""
    reserved = reserved_cpu_set(reserved_cpus, topology, topology_error)
    system, kube = policy_options.reservations(system_reserved, kube_reserved, reserved)
    milli = policy_options.reserved_cpu_milli(system, kube)
    try:
        options_ = policy_options.validate(name, options, milli)
    except policy_options.OptionsError as err:
        raise ManagerError(str(err)) from None
    if name == POLICY_NONE:
        return None
    if topology is None:
        raise ManagerError(topology_error or "could not detect number of cpus")
    try:
        return static_policy.new_static_policy(
            topology, policy_options.num_reserved_cpus(milli), reserved,
            full_pcpus_only=options_.full_pcpus_only, strict_cpu_reservation=options_.strict_cpu_reservation)
    except static_policy.PolicyError as err:
        raise ManagerError(f"new static policy error: {err}") from None


def restore(policy: StaticPolicy | None, policy_name: str, text: str | bytes | None, path: str) -> tuple[State, bool]:
    """Upstream `Start`: the checkpoint's content (`text`, None when there is no file) restored for the configured
    policy (`state.NewCheckpointState`), then checked by the static policy (`validateState`, which fills an empty
    state with every CPU). Returns the state and whether it must be written (upstream stores a new checkpoint,
    and the state the policy initialised). Raises `ManagerError` ("start cpu manager error: ...")."""
    if text is None:
        state, write = State(), True
    else:
        try:
            state = checkpoint.restore(checkpoint.decode(text), policy_name)
        except checkpoint.CheckpointError as err:
            raise ManagerError(f"start cpu manager error: {checkpoint.restore_failure(err, path)}") from None
        write = False
    if policy is not None:
        try:
            validated = static_policy.validate_state(policy, state)
        except static_policy.PolicyError as err:
            raise ManagerError(f"start cpu manager error: {err}") from None
        write = write or validated != state
        state = validated
    return state, write


# ------------------------------------------------------------------------------------------------ pods


@dataclasses.dataclass(frozen=True)
class Pods:
    """The node's pods as the CPU manager counts them (upstream `activePods`)."""

    known: frozenset[str] = frozenset()
    """The UIDs of the pods the agent handles (has a worker for)."""
    active: Mapping[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    """The pods not deleted and not terminal, by UID, with the names of their init and app containers."""

    def with_pod(self, pod: spec.Pod) -> Pods:
        """These pods and `pod` (the one being admitted counts as active, as upstream adds it to the pod manager
        before its admission)."""
        names = frozenset(c.name for c in (*pod.spec.init_containers, *pod.spec.containers))
        return Pods(known=self.known | {pod.uid}, active={**self.active, pod.uid: names})


def remove_stale_state(state: State, pods: Pods, gone: Iterable[str] = ()) -> State:
    """Upstream `removeStaleState`: the assignments of containers that are not in an active pod are released
    (`RemoveContainer`: their CPUs back to the shared pool). An assignment of a pod the agent does not know yet
    is kept unless `gone` (UIDs the apiserver no longer has) names it: after a restart the checkpoint is read
    before the pods arrive, and upstream too waits until its pod sources are ready."""
    confirmed = set(gone)
    for uid in sorted(state.assignments):
        if uid not in pods.known and uid not in confirmed:
            continue
        wanted = pods.active.get(uid, frozenset())
        for name in sorted(state.assignments.get(uid, {})):
            if name not in wanted:
                state = static_policy.remove_container(state, uid, name)
    return state


# -------------------------------------------------------------------------------------------- admission


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """What admission sees of the CPU manager, taken under the node's allocation lock."""

    policy: StaticPolicy | None
    """None: the none policy (nothing is allocated)."""
    state: State
    pods: Pods = Pods()


@dataclasses.dataclass(frozen=True)
class Admission:
    """The admit handler's answer: the state to record once the pod is admitted, or why it is rejected."""

    state: State | None = None
    """None: nothing to record (the none policy, or a rejection)."""
    rejection: admission.Rejection | None = None


def admission_rejection(err: assignment.AllocationError) -> admission.Rejection:
    """Upstream `admission.GetPodAdmitResult`: an error with a type of its own (``SMTAlignmentError``) is the
    rejection's reason with its text; any other is ``UnexpectedAdmissionError``, "Allocate failed due to <err>,
    which is unexpected"."""
    if isinstance(err, assignment.SMTAlignmentError):
        reason, message = err.reason, str(err)
    else:
        reason, message = UNEXPECTED_ADMISSION_ERROR, f"Allocate failed due to {err}, which is unexpected"
    return admission.Rejection(reason=reason, message=admission.REJECTED_PREFIX + message)


def admit(snapshot: Snapshot, pod: spec.Pod) -> Admission:
    """The topology manager's admit handler with its none policy: stale state released, then `Allocate` for each
    init and app container in order; the first failure rejects the pod."""
    policy = snapshot.policy
    if policy is None:
        return Admission()
    state = remove_stale_state(snapshot.state, snapshot.pods.with_pod(pod))
    for container in (*pod.spec.init_containers, *pod.spec.containers):
        try:
            state = static_policy.allocate(policy, state, pod, container)
        except assignment.AllocationError as err:
            return Admission(rejection=admission_rejection(err))
    return Admission(state=state)


@dataclasses.dataclass(frozen=True)
class HintProvider:
    """The CPU manager as a topology manager hint provider (upstream `GetTopologyHints`, `GetPodTopologyHints`,
    `Allocate` along the hint); the none policy gives no hints and allocates nothing."""

    policy: StaticPolicy | None
    state: State

    def topology_hints(self, pod: spec.Pod, container: spec.ContainerSpec) -> ProviderHints:
        if self.policy is None:
            return None
        return static_policy.topology_hints(self.policy, self.state, pod, container)

    def pod_topology_hints(self, pod: spec.Pod) -> ProviderHints:
        if self.policy is None:
            return None
        return static_policy.pod_topology_hints(self.policy, self.state, pod)

    def allocate(self, pod: spec.Pod, container: spec.ContainerSpec, hint: TopologyHint) -> HintProvider:
        if self.policy is None:
            return self
        return dataclasses.replace(self, state=static_policy.allocate(self.policy, self.state, pod, container, hint))


# -------------------------------------------------------------------------------------------- reconcile


@dataclasses.dataclass(frozen=True)
class RunningContainer:
    """A running container of the runtime, with its pod's UID and its name."""

    pod_uid: str
    name: str
    container_id: str


def reconcile_updates(state: State, pods: Pods, running: Iterable[RunningContainer],
                      applied: Mapping[str, CPUSet]) -> list[tuple[RunningContainer, CPUSet]]:
    """Upstream `reconcileState`: for each running init or app container of an active pod, the cpuset the state
    gives it (its exclusive CPUs, else the shared pool) when that is not what it was last given (`applied`, by
    container ID: at its creation or by an earlier update). An empty cpuset is never given."""
    updates = []
    for container in running:
        if container.name not in pods.active.get(container.pod_uid, frozenset()):
            continue
        cpus = state.cpuset_or_default(container.pod_uid, container.name)
        if cpus.is_empty():
            continue
        if applied.get(container.container_id) != cpus:
            updates.append((container, cpus))
    return updates


# -------------------------------------------------------------------------------------------- pod resources


def container_cpu_ids(state: State, pod_uid: str, container: str) -> tuple[int, ...]:
    """upstream container manager `GetCPUs` for the pod-resources API: the container's exclusive CPUs when the
    state has an assignment for it (`GetResourceIsolationLevel` is then ResourceIsolationContainer: with
    `PodLevelResourceManagers` off nothing is isolated at the pod level), else none (a container on the shared
    pool, or the none policy). Sorted (upstream's order is a Go map's)."""
    cpus = state.get(pod_uid, container)
    return () if cpus is None else tuple(cpus.sorted())


def pod_exclusive_cpus(state: State, pod_uid: str) -> dict[str, CPUSet]:
    """Upstream `GetExclusiveCPUs` for each container of the pod: the non-empty assignments the state holds for it
    (none under the none policy, whose state has no assignments), by container name. What decides that a container,
    its pod cgroup and its sandbox run without CFS quota (`helpers.pod_has_exclusive_cpus`)."""
    return {name: cpus for name, cpus in state.assignments.get(pod_uid, {}).items() if cpus}


def allocatable_cpu_ids(policy: StaticPolicy | None) -> tuple[int, ...]:
    """upstream `GetAllocatableCPUs`, fixed at `Start`: under the static policy every online CPU of the topology but
    the reserved ones (``reservedSystemCPUs``, or those the policy took for systemReserved and kubeReserved); none
    under the none policy."""
    return () if policy is None else tuple(policy.allocatable_cpus().sorted())
