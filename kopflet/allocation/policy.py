"""
In-place pod resize: what the kubelet has allocated to a pod, and whether a resize may be allocated now.

Mirrors upstream kubelet v1.37.1 (InPlacePodVerticalScaling GA, InPlacePodVerticalScalingInitContainers GA,
InPlacePodLevelResourcesVerticalScaling beta and on; InPlacePodVerticalScalingMemoryBackedVolumes alpha and off):

- `pkg/kubelet/allocation/allocation_manager.go`: `ResourceInfoForPod` (`PodAllocation.from_pod`),
  `UpdatePodFromAllocation` (`apply_allocation`, `resize_pending_differs`), `handlePodResourcesResize` and
  `canAdmitPod` with `ResizeOperation` (`decide`), `isResizeIncreasingRequests` and `sortPendingResizes`
  (`increases_requests`, `order_pending`);
- `pkg/kubelet/allocation/handlers.go`: the resize admit handler (the Infeasible cases), run before the pod's
  ordinary admit handlers, which kopflet has in `admission.admit` (any refusal there means Deferred);
- `pkg/kubelet/allocation/state`: the ``allocated_pods_state`` / ``actuated_pods_state`` checkpoint files,
  byte for byte (`checkpoint_text`, `read_checkpoint`);
- `pkg/kubelet/status/status_manager.go`: the PodResizePending / PodResizeInProgress conditions
  (`pending_condition`, `in_progress_condition`);
- `pkg/kubelet/events/resize.go`: the Resize* events' messages (`resize_event_message`).

The other pods count against the node as upstream's scheduler NodeInfo counts them (component-helpers
`PodRequests` with UseStatusResources): the larger of what is allocated and what their status reports
(`held_requests`, `held_pod`).

Pure: no clock (timestamps are arguments), no files (checkpoints are text in and out).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from kopflet import gotext
from kopflet.api import qos, spec
from kopflet.api.events import NORMAL, WARNING
from kopflet.lifecycle import admission

CPU = "cpu"
MEMORY = "memory"
_HUGEPAGES_PREFIX = "hugepages-"

# Condition types and reasons (k8s.io/api/core/v1).
POD_RESIZE_PENDING = "PodResizePending"
POD_RESIZE_IN_PROGRESS = "PodResizeInProgress"
REASON_DEFERRED = "Deferred"
REASON_INFEASIBLE = "Infeasible"
REASON_ERROR = "Error"

# Outcomes of `decide`.
UNCHANGED = "Unchanged"
ACCEPTED = "Accepted"
DEFERRED = REASON_DEFERRED
INFEASIBLE = REASON_INFEASIBLE

# Event reasons (pkg/kubelet/events/event.go).
RESIZE_DEFERRED = "ResizeDeferred"
RESIZE_INFEASIBLE = "ResizeInfeasible"
RESIZE_STARTED = "ResizeStarted"
RESIZE_COMPLETED = "ResizeCompleted"
RESIZE_ERROR = "ResizeError"

# Pending resizes are retried 30s after start (or while the pod sources are not ready), then every 3 minutes,
# and at once on these triggers (allocation_manager.go).
INITIAL_RETRY_DELAY = 30.0
RETRY_DELAY = 180.0
TRIGGER_POD_RESIZED = "pod_resized"
TRIGGER_POD_UPDATED = "pod_updated"
TRIGGER_PODS_ADDED = "pods_added"
TRIGGER_PODS_REMOVED = "pods_removed"
TRIGGER_POD_TERMINATED = "pod_terminated"
TRIGGER_PERIODIC = "periodic_retry"

# Resource manager policies that make Guaranteed pods' resizes infeasible (cpumanager.PolicyStatic,
# memorymanager.PolicyTypeStatic); kopflet runs neither, the defaults are upstream's "none" / "None".
CPU_MANAGER_STATIC = "static"
MEMORY_MANAGER_STATIC = "Static"


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used; upstream refuses to start with it."""


# ------------------------------------------------------------------------------------------- allocation


def _quantity_map(value: Any) -> dict[str, str]:
    """A ResourceList as quantity strings; bare JSON numbers keep their text (as `spec` does)."""
    if not isinstance(value, Mapping):
        return {}
    return {str(k): v if isinstance(v, str) else format(v, "g") for k, v in value.items()
            if isinstance(v, str | int | float) and not isinstance(v, bool)}


def _resources_of(body: Any) -> spec.Resources:
    body = body if isinstance(body, Mapping) else {}
    return spec.Resources(requests=_quantity_map(body.get("requests")), limits=_quantity_map(body.get("limits")))


def _resources_body(resources: spec.Resources) -> dict[str, Any]:
    """A ResourceRequirements as Go writes it: ``limits`` then ``requests``, empty ones left out, keys sorted."""
    body: dict[str, Any] = {}
    if resources.limits:
        body["limits"] = dict(sorted(resources.limits.items()))
    if resources.requests:
        body["requests"] = dict(sorted(resources.requests.items()))
    return body


def _same_list(a: Mapping[str, str], b: Mapping[str, str]) -> bool:
    """apiequality.Semantic on two ResourceLists: same names, quantities equal by value, empty == absent."""
    if a.keys() != b.keys():
        return False
    return all(qos.parse_quantity(a[k]) == qos.parse_quantity(b[k]) for k in a)


def same_resources(a: spec.Resources, b: spec.Resources) -> bool:
    """Upstream `apiequality.Semantic.DeepEqual` of two ResourceRequirements (claims are not kept)."""
    return _same_list(a.requests, b.requests) and _same_list(a.limits, b.limits)


def _same_pod_level(a: spec.Resources | None, b: spec.Resources | None) -> bool:
    """Pod-level resources are a pointer upstream: unset differs from set, even to nothing."""
    if a is None or b is None:
        return a is b
    return same_resources(a, b)


def pod_level(pod: spec.Pod) -> spec.Resources | None:
    """``spec.resources`` (pod-level resources) of the pod, None when unset."""
    body = qos.pod_level_resources(pod)
    return None if body is None else _resources_of(body)


@dataclasses.dataclass(frozen=True)
class PodAllocation:
    """The resources the kubelet has allocated to one pod (upstream `state.PodResourceInfo`).

    `containers` holds every init and regular container by name (all of them are resizable at 1.37);
    `pod_level` is ``spec.resources``, None when the pod has none. Memory-backed emptyDir size limits are
    only kept with InPlacePodVerticalScalingMemoryBackedVolumes, off at 1.37, so never here.
    """

    containers: Mapping[str, spec.Resources] = dataclasses.field(default_factory=dict)
    pod_level: spec.Resources | None = None

    @classmethod
    def from_pod(cls, pod: spec.Pod) -> PodAllocation:
        """The allocation that admitting (or resizing to) `pod` records (upstream `ResourceInfoForPod`)."""
        containers = {c.name: spec.Resources(requests=dict(c.resources.requests), limits=dict(c.resources.limits))
                      for c in (*pod.spec.init_containers, *pod.spec.containers)}
        return cls(containers=containers, pod_level=pod_level(pod))

    def to_json(self) -> dict[str, Any]:
        """The checkpoint entry as upstream writes it (Go field names, no json tags on PodResourceInfo)."""
        return {
            "ContainerResources": {name: _resources_body(r) for name, r in sorted(self.containers.items())},
            "PodLevelResources": None if self.pod_level is None else _resources_body(self.pod_level),
            "EmptyDirVolumeLimits": None,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PodAllocation:
        """Read a checkpoint entry (`to_json`'s layout, or upstream's)."""
        if not isinstance(data, Mapping):
            raise CheckpointError(f"pod resource info must be an object, not {type(data).__name__}")
        containers = data.get("ContainerResources") or {}
        if not isinstance(containers, Mapping):
            raise CheckpointError("ContainerResources must be an object")
        level = data.get("PodLevelResources")
        return cls(containers={str(name): _resources_of(body) for name, body in containers.items()},
                   pod_level=None if level is None else _resources_of(level))


def _claims(container: spec.ContainerSpec) -> Any:
    """``resources.claims`` of the container's body (DRA), which a resize cannot change."""
    resources = container.raw.get("resources")
    return resources.get("claims") if isinstance(resources, Mapping) else None


def _with_resources(container: spec.ContainerSpec, resources: spec.Resources) -> spec.ContainerSpec:
    """The container with other requests/limits, in its parsed fields and in its raw body alike."""
    raw = dict(container.raw)
    body = _resources_body(resources)
    if _claims(container):
        body["claims"] = _claims(container)
    if body:
        raw["resources"] = body
    else:
        raw.pop("resources", None)
    return dataclasses.replace(container, resources=resources, raw=raw)


def apply_allocation(pod: spec.Pod, allocation: PodAllocation | None) -> spec.Pod:
    """The pod as the runtime is to see it: its spec with the allocated resources (upstream
    `UpdatePodFromAllocation`). Containers the allocation does not list keep theirs; pod-level resources
    are replaced (removed when the allocation has none). The same object comes back when nothing differs.
    """
    if allocation is None or not resize_pending_differs(pod, allocation):
        return pod
    pod_spec = pod.spec
    if not _same_pod_level(pod_level(pod), allocation.pod_level):
        raw = dict(pod_spec.raw)
        if allocation.pod_level is None:
            raw.pop("resources", None)
        else:
            raw["resources"] = _resources_body(allocation.pod_level)
        pod_spec = dataclasses.replace(pod_spec, raw=raw)

    def allocated(container: spec.ContainerSpec) -> spec.ContainerSpec:
        wanted = allocation.containers.get(container.name)
        if wanted is None or same_resources(container.resources, wanted):
            return container
        return _with_resources(container, wanted)

    pod_spec = dataclasses.replace(pod_spec, containers=tuple(allocated(c) for c in pod_spec.containers),
                                   init_containers=tuple(allocated(c) for c in pod_spec.init_containers),
                                   raw=pod_spec.raw)
    return dataclasses.replace(pod, spec=pod_spec)


def resize_pending_differs(pod: spec.Pod, allocation: PodAllocation | None) -> bool:
    """Whether the pod's spec asks for other resources than are allocated (upstream `UpdatePodFromAllocation`'s
    ``updated``): pod-level resources differ, or a container the allocation lists has other requests/limits.
    No allocation (a pod not admitted yet) means no."""
    if allocation is None:
        return False
    if not _same_pod_level(pod_level(pod), allocation.pod_level):
        return True
    for container in (*pod.spec.containers, *pod.spec.init_containers):
        wanted = allocation.containers.get(container.name)
        if wanted is not None and not same_resources(container.resources, wanted):
            return True
    return False


# ------------------------------------------------------------------------------ what other pods hold


def _text(value: Fraction) -> str:
    """An exact quantity string for a value parsed from quantities (a terminating decimal)."""
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    value = abs(value)
    digits = 0
    while (value * 10**digits).denominator != 1:
        digits += 1
        if digits > 40:  # not a sum of quantities: round up to nano units, as Go's Quantity would
            return f"{sign}{-(-value.numerator * 10**9 // value.denominator)}n"
    scaled = str((value * 10**digits).numerator).rjust(digits + 1, "0")
    return f"{sign}{scaled[:-digits]}.{scaled[-digits:]}"


def _parsed(values: Any) -> dict[str, Fraction] | None:
    """A ResourceList from a status, or None when absent (Go's nil)."""
    return qos.parse_resource_list(values) if isinstance(values, Mapping) else None


def _max(*lists: Mapping[str, Fraction] | None) -> dict[str, Fraction]:
    """component-helpers `max`: per resource name, the largest of the lists that have it."""
    result: dict[str, Fraction] = {}
    for values in lists:
        for name, amount in (values or {}).items():
            if name not in result or amount > result[name]:
                result[name] = amount
    return result


def _aggregate(pod: spec.Pod, chosen: Mapping[str, Mapping[str, Fraction] | None]) -> dict[str, Fraction]:
    """The sidecar-aware sum of per-container request lists (`admission.pod_requests` without pod-level
    resources or overhead), for lists chosen per container name."""
    def swap(container: spec.ContainerSpec) -> spec.ContainerSpec:
        requests = {k: _text(v) for k, v in (chosen.get(container.name) or {}).items()}
        return dataclasses.replace(container, resources=dataclasses.replace(container.resources, requests=requests))

    raw = {k: v for k, v in pod.spec.raw.items() if k not in ("resources", "overhead")}
    pod_spec = dataclasses.replace(pod.spec, containers=tuple(swap(c) for c in pod.spec.containers),
                                   init_containers=tuple(swap(c) for c in pod.spec.init_containers), raw=raw)
    return admission.pod_requests(dataclasses.replace(pod, spec=pod_spec))


def _container_status(status: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    for key in ("containerStatuses", "initContainerStatuses"):
        for item in status.get(key) or ():
            if isinstance(item, Mapping) and item.get("name") == name:
                return item
    return None


def resize_infeasible(status: Mapping[str, Any] | None) -> bool:
    """Whether the status carries PodResizePending with reason Infeasible (component-helpers
    `IsPodResizeInfeasible`)."""
    for condition in (status or {}).get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == POD_RESIZE_PENDING:
            return condition.get("reason") == REASON_INFEASIBLE
    return False


def _held_before_overhead(pod: spec.Pod, status: Mapping[str, Any] | None) -> dict[str, Fraction]:
    status = status or {}
    infeasible = resize_infeasible(status)
    everyone = (*pod.spec.containers, *pod.spec.init_containers)
    specs = {c.name: {k: qos.parse_quantity(v) for k, v in c.resources.requests.items()} for c in everyone}
    spec_requests = _aggregate(pod, specs)
    pod_status_resources = status.get("resources")
    allocated = _parsed(status.get("allocatedResources"))
    actuated = _parsed(pod_status_resources.get("requests")) if isinstance(pod_status_resources, Mapping) else None
    if allocated is None or actuated is None:
        allocated_lists: dict[str, Mapping[str, Fraction] | None] = {}
        actuated_lists: dict[str, Mapping[str, Fraction] | None] = {}
        for c in everyone:
            cs = _container_status(status, c.name) or {}
            fallback = None if infeasible else specs[c.name]
            cs_allocated = _parsed(cs.get("allocatedResources"))
            cs_resources = cs.get("resources")
            cs_actuated = _parsed(cs_resources.get("requests")) if isinstance(cs_resources, Mapping) else None
            allocated_lists[c.name] = cs_allocated if cs_allocated is not None else fallback
            actuated_lists[c.name] = cs_actuated if cs_actuated is not None else allocated_lists[c.name]
        allocated, actuated = _aggregate(pod, allocated_lists), _aggregate(pod, actuated_lists)
    result = _max(actuated, allocated) if infeasible else _max(spec_requests, actuated, allocated)
    level = pod_level(pod)
    level_requests = {k: qos.parse_quantity(v) for k, v in (level.requests if level else {}).items()}
    if any(_pod_level_supported(k) for k in level_requests):
        effective: Mapping[str, Fraction] = level_requests
        if isinstance(pod_status_resources, Mapping):
            effective = _max(None if infeasible else level_requests, _actuated_pod_level(status),
                             _parsed(status.get("allocatedResources")))
        result.update({k: v for k, v in effective.items() if _pod_level_supported(k)})
    return result


def _actuated_pod_level(status: Mapping[str, Any]) -> dict[str, Fraction] | None:
    """``status.resources.requests`` of a pod, None when absent."""
    resources = status.get("resources")
    return _parsed(resources.get("requests")) if isinstance(resources, Mapping) else None


def _pod_level_supported(name: str) -> bool:
    """component-helpers `IsSupportedPodLevelResource`: cpu, memory and hugepages-*."""
    return name in (CPU, MEMORY) or name.startswith(_HUGEPAGES_PREFIX)


def held_requests(pod: spec.Pod, status: Mapping[str, Any] | None) -> dict[str, Fraction]:
    """What an admitted pod holds on the node while resizes are decided (component-helpers `PodRequests` with
    UseStatusResources, as the scheduler's NodeInfo counts the kubelet's other pods).

    `pod` is the pod as allocated (`apply_allocation`), `status` its last API status. Per resource the largest
    of the allocated spec, what the status reports running (``resources.requests``) and what it reports
    allocated (``allocatedResources``): the pod-level status maps when both are present, else the containers'.
    A pod whose resize is Infeasible counts its status only. Pod-level requests then apply (the largest of
    spec, ``status.resources.requests`` and ``status.allocatedResources`` once the status has resources),
    and ``spec.overhead`` is added.
    """
    result = _held_before_overhead(pod, status)
    overhead = pod.spec.raw.get("overhead")
    if isinstance(overhead, Mapping):
        for name, amount in overhead.items():
            result[str(name)] = result.get(str(name), Fraction(0)) + qos.parse_quantity(amount)
    return result


def held_pod(pod: spec.Pod, status: Mapping[str, Any] | None) -> spec.Pod:
    """`pod` (as allocated) made to count, for `admission.pod_requests`, what `held_requests` says it holds.

    The cpu, memory and hugepages it holds become pod-level requests, which `admission.pod_requests` puts over
    the containers' sum before it adds the overhead, so `decide` can hand the other pods to `admission.admit`
    unchanged (pod count, host ports and the rest are the pod's own). Other resources count from the spec:
    they cannot be resized, so status and spec agree on them.
    """
    held = _held_before_overhead(pod, status)
    requests = {name: _text(held.get(name, Fraction(0))) for name in (CPU, MEMORY)}
    requests.update({k: _text(v) for k, v in held.items() if k.startswith(_HUGEPAGES_PREFIX)})
    raw = dict(pod.spec.raw)
    raw["resources"] = {"requests": requests}
    return dataclasses.replace(pod, spec=dataclasses.replace(pod.spec, raw=raw))


# ------------------------------------------------------------------------------------------ the decision


@dataclasses.dataclass(frozen=True)
class ResizeEvent:
    """An event the kubelet records on the pod: type (Normal/Warning), reason and message."""

    type: str
    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class ResizeDecision:
    """The outcome of one attempt to allocate a pod's desired resources (upstream `handlePodResourcesResize`).

    `outcome` is UNCHANGED (desired == allocated: clear PodResizePending, nothing else), ACCEPTED (checkpoint
    `allocation`, clear PodResizePending, restart PodResizeInProgress at the pod's generation, record
    ResizeStarted, sync the pod now), DEFERRED or INFEASIBLE (set PodResizePending with `reason` and
    `message`; record the event only when `pending_condition` says it changed). `allocation` is what stays
    allocated afterwards. `admit_reason` is the refusing admit handler's own reason (``OutOfcpu``,
    ``Infeasible``, ``NodeAffinity`` ...), which the event message names.
    """

    outcome: str
    allocation: PodAllocation
    reason: str = ""
    message: str = ""
    admit_reason: str = ""

    @property
    def pending(self) -> bool:
        return self.outcome in (DEFERRED, INFEASIBLE)

    def event(self, pod: spec.Pod, generation: int) -> ResizeEvent | None:
        """The event that goes with this decision for the desired `pod` at `generation`, if any."""
        if self.outcome == ACCEPTED:
            return ResizeEvent(NORMAL, RESIZE_STARTED, resize_event_message("Pod resize started", pod, generation))
        if self.pending:
            return ResizeEvent(WARNING, RESIZE_INFEASIBLE if self.reason == REASON_INFEASIBLE else RESIZE_DEFERRED,
                               resize_event_message(f"Pod resize {self.admit_reason}", pod, generation, self.message))
        return None


def _guaranteed_resize_required(pod: spec.Pod, allocation: PodAllocation, resource: str) -> bool:
    """Upstream `guaranteedPodResourceResizeRequired`: a container's request of `resource` changes."""
    for container in (*pod.spec.init_containers, *pod.spec.containers):
        allocated = allocation.containers.get(container.name, spec.Resources())
        wanted = qos.parse_quantity(container.resources.requests.get(resource, 0))
        if wanted != qos.parse_quantity(allocated.requests.get(resource, 0)):
            return True
    return False


def infeasible_message(pod: spec.Pod, allocation: PodAllocation, *, cpu_manager_policy: str = "none",
                       memory_manager_policy: str = "None") -> str | None:
    """The resize admit handler's refusal (reason Infeasible), or None (upstream handlers.go `Admit`).

    At 1.37 with kopflet's node only the Guaranteed-pod checks can fire: the feature gates are on, swap is not
    configured (NoSwap) and a memory-backed volume never differs from its allocation while that gate is off.
    """
    if qos.qos_class(pod) != qos.GUARANTEED:
        return None
    if cpu_manager_policy == CPU_MANAGER_STATIC and _guaranteed_resize_required(pod, allocation, CPU):
        return f'Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "{CPU_MANAGER_STATIC}"'
    if memory_manager_policy == MEMORY_MANAGER_STATIC and _guaranteed_resize_required(pod, allocation, MEMORY):
        return f'Resize is infeasible for Guaranteed Pods alongside Memory Manager policy "{MEMORY_MANAGER_STATIC}"'
    return None


def decide(pod: spec.Pod, allocation: PodAllocation, node: admission.NodeInfo, others: Sequence[spec.Pod], *,
           cpu_manager_policy: str = "none", memory_manager_policy: str = "None",
           pending: bool = False) -> ResizeDecision:
    """May the desired resources of `pod` be allocated now? (upstream `handlePodResourcesResize`).

    `pod` is the pod as the API has it (desired resources), `allocation` what is allocated to it. `others` are
    the other admitted, active pods as they hold the node: each `held_pod(apply_allocation(p, its
    allocation), its status)`; pods not admitted yet are left out, and one with `pod`'s UID is ignored.

    First the resize handler (Infeasible, see `infeasible_message`), then every ordinary admit handler with
    the desired pod (`admission.admit`: sysctls, OS, resources, node affinity, node name, host ports, NoExecute
    taints, and AppArmor when the pod's phase is still Pending: `pending`); whatever they refuse is Deferred, with
    the handler's message without the "Pod was rejected: " prefix, e.g. ``Node didn't have enough resource: cpu,
    requested: 5000, used: 2000, capacity: 4000``.
    """
    if not resize_pending_differs(pod, allocation):
        return ResizeDecision(UNCHANGED, allocation)
    message = infeasible_message(pod, allocation, cpu_manager_policy=cpu_manager_policy,
                                 memory_manager_policy=memory_manager_policy)
    if message is not None:
        return ResizeDecision(INFEASIBLE, allocation, REASON_INFEASIBLE, message, REASON_INFEASIBLE)
    rejection = admission.admit(pod, node, [p for p in others if p.uid != pod.uid], pending=pending)
    if rejection is not None:
        reason = REASON_INFEASIBLE if rejection.reason == REASON_INFEASIBLE else REASON_DEFERRED
        return ResizeDecision(reason, allocation, reason, rejection.event_message, rejection.reason)
    return ResizeDecision(ACCEPTED, PodAllocation.from_pod(pod))


# ---------------------------------------------------------------------------------- pending resizes


def increases_requests(pod: spec.Pod, allocation: PodAllocation | None) -> bool:
    """Whether the desired cpu or memory requests of the pod exceed the allocated ones (upstream
    `isResizeIncreasingRequests`, pod-level requests and overhead included)."""
    allocated = apply_allocation(pod, allocation)
    if allocated is pod:
        return False
    old, new = admission.pod_requests(allocated), admission.pod_requests(pod)
    return any(new.get(name, Fraction(0)) > old.get(name, Fraction(0)) for name in (MEMORY, CPU))


@dataclasses.dataclass(frozen=True)
class PendingResize:
    """A pod waiting for its resize, with what upstream orders the queue by.

    `pending_since` is its PodResizePending lastTransitionTime (RFC 3339, None when it has none yet).
    """

    uid: str
    increasing: bool
    priority: int = 0
    guaranteed: bool = False
    pending_since: str | None = None


def order_pending(entries: Iterable[PendingResize]) -> list[PendingResize]:
    """The order pending resizes are retried in (upstream `sortPendingResizes`): resizes that do not increase
    requests first, then higher priority, then Guaranteed before the rest, then the longest pending (those
    without a PodResizePending condition last). Upstream's comparator leaves non-increasing resizes in no
    particular order; here they are ordered by the same later keys."""
    def key(entry: PendingResize) -> tuple[bool, int, bool, bool, str]:
        return (entry.increasing, -entry.priority, not entry.guaranteed, entry.pending_since is None,
                entry.pending_since or "")
    return sorted(entries, key=key)


# ---------------------------------------------------------------------------------------- conditions


def _condition(kind: str, reason: str, message: str, generation: int, now: str,
               last_transition: str) -> dict[str, Any]:
    """A resize condition as the API stores it: status True, probe time now, empty fields left out."""
    condition: dict[str, Any] = {"type": kind, "status": "True"}
    if generation:
        condition["observedGeneration"] = generation
    condition["lastProbeTime"] = now
    condition["lastTransitionTime"] = last_transition
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return condition


def _since(previous: Mapping[str, Any] | None, now: str) -> str:
    """The previous condition's lastTransitionTime (now if it has none)."""
    value = (previous or {}).get("lastTransitionTime")
    return str(value) if value else now


def pending_condition(previous: Mapping[str, Any] | None, reason: str, message: str, generation: int,
                      now: str) -> tuple[dict[str, Any], bool]:
    """PodResizePending after a refused resize (upstream `SetPodResizePendingCondition`), and whether the
    ResizeDeferred/ResizeInfeasible event is due.

    Any reason but Infeasible is written as Deferred. lastTransitionTime moves only when the reason changes;
    the event is due when the condition is new or its reason or observedGeneration changed (a new message
    alone updates the condition silently).
    """
    reason = REASON_INFEASIBLE if reason == REASON_INFEASIBLE else REASON_DEFERRED
    same_reason = previous is not None and previous.get("reason", "") == reason
    since = _since(previous, now) if same_reason else now
    changed = (previous is None or not same_reason
               or int(previous.get("observedGeneration") or 0) != generation)
    return _condition(POD_RESIZE_PENDING, reason, message, generation, now, since), changed


def in_progress_condition(previous: Mapping[str, Any] | None, reason: str, message: str, generation: int,
                          now: str) -> tuple[dict[str, Any], bool]:
    """PodResizeInProgress set or refreshed (upstream `SetPodResizeInProgressCondition`), and whether it changed.

    An existing condition keeps its observedGeneration (clear it first to move it: an accepted resize does),
    and keeps its reason and message when both new ones are empty. Changed means anything but the two
    timestamps differs; a ResizeError event goes with a change to reason Error.
    """
    if previous is not None:
        if not reason and not message:
            reason, message = str(previous.get("reason", "")), str(previous.get("message", ""))
        generation = int(previous.get("observedGeneration") or 0)
    same_reason = previous is not None and previous.get("reason", "") == reason
    since = _since(previous, now) if same_reason else now
    condition = _condition(POD_RESIZE_IN_PROGRESS, reason, message, generation, now, since)
    if previous is None:
        return condition, True
    ignored = ("lastProbeTime", "lastTransitionTime")
    before = {k: v for k, v in previous.items() if k not in ignored and v not in (None, "", 0)}
    after = {k: v for k, v in condition.items() if k not in ignored}
    return condition, before != after


# ---------------------------------------------------------------------------------------------- events


def _container_body(container: spec.ContainerSpec) -> dict[str, Any]:
    body = _resources_body(container.resources)
    if _claims(container):
        body["claims"] = _claims(container)
    return {"name": container.name, "resources": body}


def resource_summary(pod: spec.Pod, generation: int, error: str = "") -> str:
    """The JSON in resize event messages (upstream `makeResourceSummaryFromSpec`): the containers' resources
    as in the given pod's spec (pod-level resources are not included), its generation and the error if any.
    Quantities appear as the pod has them; the API's are canonical already (``1500m``, not ``1.5``)."""
    summary: dict[str, Any] = {}
    if pod.spec.init_containers:
        summary["initContainers"] = [_container_body(c) for c in pod.spec.init_containers]
    if pod.spec.containers:
        summary["containers"] = [_container_body(c) for c in pod.spec.containers]
    summary["generation"] = generation
    if error:
        summary["error"] = error
    return gotext.go_json(summary)


def resize_event_message(prefix: str, pod: spec.Pod, generation: int, error: str = "") -> str:
    """``<prefix>: <resource_summary>`` (upstream `podResizeMessage`). Prefixes: ``Pod resize started``
    (desired pod), ``Pod resize completed`` and ``Pod resize error`` (allocated pod, the generation of the
    PodResizeInProgress condition), ``Pod resize <admit reason>`` (desired pod)."""
    return f"{prefix}: {resource_summary(pod, generation, error)}"


# ------------------------------------------------------------------------------------------ checkpoints


def _fnv1a_32(data: bytes) -> int:
    value = 0x811C9DC5
    for byte in data:
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def checksum(data: str) -> int:
    """Upstream `checksum.New(data)`: fnv-1a 32 over spew's ``%#v`` of the string, ``(string)<data>``."""
    return _fnv1a_32(b"(string)" + data.encode("utf-8", "surrogatepass"))


def checkpoint_text(entries: Mapping[str, PodAllocation]) -> str:
    """The content of ``allocated_pods_state`` / ``actuated_pods_state`` for these pods (by UID), byte for byte
    what upstream's checkpoint manager writes: ``{"data":"<json>","checksum":<n>}``."""
    info: dict[str, Any] = {}
    if entries:
        info["entries"] = {uid: entries[uid].to_json() for uid in sorted(entries)}
    data = gotext.go_json(info)
    return gotext.go_json({"data": data, "checksum": checksum(data)})


def read_checkpoint(text: str) -> dict[str, PodAllocation]:
    """The allocations in a checkpoint file's content; `CheckpointError` when it is not one or its checksum
    does not match (upstream then refuses to start: drain the node and delete the file)."""
    try:
        outer = json.loads(text)
    except ValueError as error:
        raise CheckpointError(f"checkpoint is not JSON: {error}") from None
    if not isinstance(outer, Mapping) or not isinstance(outer.get("data"), str):
        raise CheckpointError("checkpoint has no data")
    data = outer["data"]
    if outer.get("checksum") != checksum(data):
        raise CheckpointError("checkpoint is corrupted")
    try:
        info = json.loads(data)
    except ValueError as error:
        raise CheckpointError(f"failed to get pod resource information: {error}") from None
    entries = info.get("entries") or {} if isinstance(info, Mapping) else None
    if not isinstance(entries, Mapping):
        raise CheckpointError("failed to get pod resource information: entries must be an object")
    return {str(uid): PodAllocation.from_json(entry) for uid, entry in entries.items()}


__all__ = [
    "ACCEPTED",
    "DEFERRED",
    "INFEASIBLE",
    "POD_RESIZE_IN_PROGRESS",
    "POD_RESIZE_PENDING",
    "REASON_DEFERRED",
    "REASON_ERROR",
    "REASON_INFEASIBLE",
    "RESIZE_COMPLETED",
    "RESIZE_DEFERRED",
    "RESIZE_ERROR",
    "RESIZE_INFEASIBLE",
    "RESIZE_STARTED",
    "UNCHANGED",
    "CheckpointError",
    "PendingResize",
    "PodAllocation",
    "ResizeDecision",
    "ResizeEvent",
    "apply_allocation",
    "checkpoint_text",
    "checksum",
    "decide",
    "held_pod",
    "held_requests",
    "in_progress_condition",
    "increases_requests",
    "infeasible_message",
    "order_pending",
    "pending_condition",
    "read_checkpoint",
    "resize_event_message",
    "resize_infeasible",
    "resize_pending_differs",
    "resource_summary",
    "same_resources",
]
