"""In-place resize actuation: which running containers get new cgroup values, which restart, and when a resize is
still in progress (upstream kuberuntime `computePodResizeAction`, `computePodLevelResourcesResizeAction`,
`IsPodResizeInProgress`, `startingResizedContainer` and the update order of `doPodResizeAction`).

Pure. The pod given is the *allocated* pod (`policy.apply_allocation`); `actuated` is what was last applied to
the runtime (`policy.PodAllocation` read from the actuated checkpoint: each container's resources as created or
last updated, limits merged with the pod-level ones, and the pod-level resources its cgroup got). Upstream compares
allocated against actuated, never against what the runtime reports, so a runtime that reports nothing still
converges, and a resize is "in progress" exactly until each running container's record matches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from cri_client import types as cri
from kopflet.allocation import policy
from kopflet.api import qos, spec
from kopflet.cm import helpers
from kopflet.container import podstate
from kopflet.container.podstate import State
from kopflet.kuberuntime import container_config

CPU = "cpu"
MEMORY = "memory"
RESTART_CONTAINER = "RestartContainer"


@dataclasses.dataclass(frozen=True)
class Values:
    """The four numbers a resize compares (upstream `resourceRequirements`): milli-CPU and bytes, 0 = unset."""

    cpu_request: int = 0
    cpu_limit: int = 0
    memory_request: int = 0
    memory_limit: int = 0


def merged_limits(pod_level: spec.Resources | None, container: spec.Resources) -> dict[str, str]:
    """The container's limits with the pod-level cpu/memory limit filling in what it does not set (upstream
    `kubeutil.GetLimits`): what its cgroup gets under pod-level resources."""
    limits = dict(container.limits)
    if pod_level is None or not pod_level.limits:
        return limits
    for name in (CPU, MEMORY):
        if not qos.parse_quantity(limits.get(name, "0")) and qos.parse_quantity(pod_level.limits.get(name, "0")):
            limits[name] = pod_level.limits[name]
    return limits


def effective(pod_level: spec.Resources | None, container: spec.Resources) -> spec.Resources:
    """The container's resources as actuated: its requests, its limits merged with the pod-level ones."""
    return spec.Resources(requests=dict(container.requests), limits=merged_limits(pod_level, container))


def values(pod_level: spec.Resources | None, container: spec.Resources) -> Values:
    """Upstream `containerResourcesFromRequirements` (InPlacePodLevelResourcesVerticalScaling on)."""
    limits = merged_limits(pod_level, container)
    return Values(cpu_request=qos.milli_cpu(container.requests.get(CPU)), cpu_limit=qos.milli_cpu(limits.get(CPU)),
                  memory_request=qos.byte_value(container.requests.get(MEMORY)),
                  memory_limit=qos.byte_value(limits.get(MEMORY)))


def pod_values(resources: spec.Resources | None) -> Values:
    """Upstream `podResourcesFromRequirements`."""
    if resources is None:
        return Values()
    return values(None, resources)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ContainerUpdate:
    """One UpdateContainerResources call: `resource`'s desired values with the other resource kept as actuated
    (upstream `containerToUpdateInfo`; doPodResizeAction sends desired memory + current cpu in the memory pass)."""

    name: str
    container_id: str
    resource: str
    desired: Values
    current: Values

    def resources(self, *, other_done: bool = False) -> Values:
        """What this call sets: `resource` from the desired values, the other from the current ones, or from the
        desired ones when `other_done` (the memory pass already applied them: upstream moves its current record
        forward after each successful update)."""
        if other_done:
            return self.desired
        if self.resource == MEMORY:
            return dataclasses.replace(self.current, memory_request=self.desired.memory_request,
                                       memory_limit=self.desired.memory_limit)
        return dataclasses.replace(self.current, cpu_request=self.desired.cpu_request,
                                   cpu_limit=self.desired.cpu_limit)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ResizeActions:
    """What a sync must do to actuate the allocation (the resize part of upstream `podActions`)."""

    restart: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Container id -> name of running containers whose changed resource has the RestartContainer policy."""
    memory_updates: tuple[ContainerUpdate, ...] = ()
    """Memory UpdateContainerResources calls in order: decreases first, then increases."""
    cpu_updates: tuple[ContainerUpdate, ...] = ()
    update_pod_resources: bool = False
    """The pod cgroup must be rewritten (a restart for resize, or a container about to start with other values)."""
    update_pod_level_resources: bool = False
    """Pod-level resources differ from the actuated ones."""

    @property
    def any(self) -> bool:
        return bool(self.memory_updates or self.cpu_updates or self.update_pod_resources
                    or self.update_pod_level_resources)


def _policy(container: spec.ContainerSpec, resource: str) -> str:
    for entry in container.raw.get("resizePolicy") or ():
        if isinstance(entry, Mapping) and entry.get("resourceName") == resource:
            return str(entry.get("restartPolicy") or "NotRequired")
    return "NotRequired"


def _actuated_container(actuated: policy.PodAllocation | None, name: str) -> spec.Resources:
    found = actuated.containers.get(name) if actuated is not None else None
    return found if found is not None else spec.Resources()


def _pod_level(pod: spec.Pod) -> spec.Resources | None:
    return policy.pod_level(pod)


def compute(pod: spec.Pod, runtime: podstate.RuntimePodStatus, actuated: policy.PodAllocation | None, *,
            starting: Sequence[str] = ()) -> ResizeActions:
    """The resize actions for the allocated `pod`. `starting` are the containers this sync is about to start
    (upstream `startingResizedContainer`: one whose allocation differs from its record makes the pod cgroup be
    resized first)."""
    desired_level = _pod_level(pod)
    actuated_level = actuated.pod_level if actuated is not None else None
    restart: dict[str, str] = {}
    updates: dict[str, list[ContainerUpdate]] = {MEMORY: [], CPU: []}
    for container in (*pod.spec.init_containers, *pod.spec.containers):
        status = runtime.latest_container(container.name)
        if status is None or status.state is not State.RUNNING:
            continue
        desired = values(desired_level, container.resources)
        current = values(actuated_level, _actuated_container(actuated, container.name))
        if desired == current:
            continue
        changed = {MEMORY: (desired.memory_limit != current.memory_limit,
                            desired.memory_request != current.memory_request),
                   CPU: (desired.cpu_limit != current.cpu_limit, desired.cpu_request != current.cpu_request)}
        if any(any(flags) and _policy(container, resource) == RESTART_CONTAINER for resource, flags in changed.items()):
            restart[status.id] = container.name
            continue
        for resource, (limit_changed, request_changed) in changed.items():
            if not (limit_changed or request_changed):
                continue
            if resource == MEMORY:
                new, old = (desired.memory_limit, current.memory_limit) if limit_changed else \
                    (desired.memory_request, current.memory_request)
            else:
                new, old = (desired.cpu_limit, current.cpu_limit) if limit_changed else \
                    (desired.cpu_request, current.cpu_request)
            update = ContainerUpdate(name=container.name, container_id=status.id, resource=resource,
                                     desired=desired, current=current)
            if new > old:
                updates[resource].append(update)
            elif new < old:
                updates[resource].insert(0, update)
    starting_differs = any(
        values(desired_level, c.resources) != values(actuated_level, _actuated_container(actuated, c.name))
        for c in (*pod.spec.init_containers, *pod.spec.containers) if c.name in starting)
    level_differs = desired_level is not None and pod_values(desired_level) != pod_values(actuated_level)
    return ResizeActions(restart=restart, memory_updates=tuple(updates[MEMORY]), cpu_updates=tuple(updates[CPU]),
                         update_pod_resources=bool(restart) or starting_differs,
                         update_pod_level_resources=level_differs)


def _same(a: str | None, b: str | None) -> bool:
    return qos.parse_quantity(a or "0") == qos.parse_quantity(b or "0")


def in_progress(pod: spec.Pod, runtime: podstate.RuntimePodStatus, actuated: policy.PodAllocation | None) -> bool:
    """Upstream `IsPodResizeInProgress`: a running regular container or sidecar whose allocated cpu/memory
    (limits merged with the pod-level ones) differ from its actuated record, or pod-level resources that differ
    from the actuated pod-level ones (only when both exist). Non-sidecar init containers are not looked at."""
    desired_level = _pod_level(pod)
    for container in (*[c for c in pod.spec.init_containers if c.is_sidecar], *pod.spec.containers):
        status = runtime.latest_container(container.name)
        if status is None or status.state is not State.RUNNING:
            continue
        wanted = effective(desired_level, container.resources)
        have = _actuated_container(actuated, container.name)
        for kind in ("requests", "limits"):
            for name in (CPU, MEMORY):
                if not _same(getattr(wanted, kind).get(name), getattr(have, kind).get(name)):
                    return True
    actuated_level = actuated.pod_level if actuated is not None else None
    if desired_level is None or actuated_level is None:
        return False
    return any(not _same(getattr(desired_level, kind).get(name), getattr(actuated_level, kind).get(name))
               for kind in ("requests", "limits") for name in (CPU, MEMORY))


def restart_message(name: str) -> str:
    """The Killing event's message for a RestartContainer resize (upstream computePodResizeAction)."""
    return f"Container {name} resize requires restart"


# ------------------------------------------------------------------------------------- actuation order
# Upstream doPodResizeAction: memory, then cpu; for each, its pass runs only when a container's resource changes,
# a container restarts or starts with other values (UpdatePodResources) or the pod-level resources changed.


def resource_pass_runs(actions: ResizeActions, resource: str) -> bool:
    """Whether doPodResizeAction's pass for `resource` runs (upstream: ContainersToUpdate[resource],
    UpdatePodResources or UpdatePodLevelResources)."""
    updates = actions.memory_updates if resource == MEMORY else actions.cpu_updates
    return bool(updates) or actions.update_pod_resources or actions.update_pod_level_resources


PodCgroupWrites = tuple[helpers.ResourceConfig, ...]


def pod_cgroup_writes(resource: str, target: helpers.ResourceConfig, current: helpers.ResourceConfig
                      ) -> tuple[PodCgroupWrites, PodCgroupWrites]:
    """The pod cgroup writes of one resource's pass: (before the containers' UpdateContainerResources, after them).

    Upstream doPodResizeAction's resizeContainers: a limit that grows, then a request that grows, are written
    before the containers; a request that shrinks, then a limit that shrinks, after them; equal values are not
    written (nor is the runtime told). `target` is ResourceConfigForPod; `current` the pod cgroup read back
    (GetPodCgroupConfig). The values compare as the int64s upstream has, so unlimited counts as what the kernel
    reads: cpu quota -1 (v1 and v2's "max") is the smallest, memory is 9223372036854771712 on v1 (the largest)
    and -1 on v2 ("max", the smallest). A target without a memory limit or cpu quota (a Burstable pod that does
    not declare one for every container) keeps the current one: limits are never removed. Memory requests are
    never written; the memory limit write carries the unified (memory.min/low/high) settings with it; the cpu
    limit write is quota and period, the request write cpu shares.
    """
    if resource == MEMORY:
        old = current.memory
        new = target.memory if target.memory is not None else old
        if new is None or new == old:
            return (), ()
        limit = helpers.ResourceConfig(memory=new, unified=dict(target.unified))
        return ((limit,), ()) if old is None or new > old else ((), (limit,))
    before: list[helpers.ResourceConfig] = []
    after: list[helpers.ResourceConfig] = []
    old_quota = current.cpu_quota
    new_quota = target.cpu_quota if target.cpu_quota is not None else old_quota
    if new_quota is not None and new_quota != old_quota:
        limit = helpers.ResourceConfig(cpu_quota=new_quota, cpu_period=target.cpu_period)
        (before if old_quota is None or new_quota > old_quota else after).append(limit)
    old_shares, new_shares = current.cpu_shares, target.cpu_shares
    request = helpers.ResourceConfig(cpu_shares=new_shares)
    if new_shares is not None and new_shares != old_shares:
        if old_shares is None or new_shares > old_shares:
            before.append(request)  # limits grow before requests: requests <= limits throughout
        else:
            after.insert(0, request)  # requests shrink before limits
    return tuple(before), tuple(after)


# ------------------------------------------------------------------------------ memory decrease check


def memory_check_runs(actions: ResizeActions) -> bool:
    """Upstream validatePodResizeAction checks memory only when a container's memory changes in place or a
    container restarts or starts with other values (ContainersToUpdate[memory] or UpdatePodResources), not for a
    change of the pod-level resources alone: a pod limit lowered that way is left to the kernel's write."""
    return bool(actions.memory_updates) or actions.update_pod_resources


def memory_limit_decreases(target: helpers.ResourceConfig, current: helpers.ResourceConfig,
                           updates: Sequence[ContainerUpdate]) -> tuple[int | None, dict[str, int]]:
    """(the pod's new memory limit if it is added or lowered, else None; each container whose memory limit is
    added or lowered -> its new limit), as upstream validateMemoryResizeAction decides it. The pod limit compares
    as the int64s read back, so on cgroup v2 an unlimited pod cgroup ("max", -1) never counts as lowered."""
    pod_limit = target.memory if target.memory is not None and (
        current.memory is None or target.memory < current.memory) else None
    containers: dict[str, int] = {}
    for update in updates:
        new, old = update.desired.memory_limit, update.current.memory_limit
        if new and (not old or new < old):
            containers[update.name] = new
    return pod_limit, containers


@dataclasses.dataclass(frozen=True, kw_only=True)
class MemoryUsage:
    """What upstream's PodCPUAndMemoryStats gives the memory check: usage in bytes."""

    readable: bool = True
    """False: the stats could not be read at all (upstream "unable to read memory usage for pod")."""
    pod: int | None = None
    """The pod cgroup's usage; None: the stats have none."""
    containers: Mapping[str, int | None] = dataclasses.field(default_factory=dict)
    """Container name -> its usage (None: stats without memory); a container absent has no stats."""


def _aggregate(messages: Sequence[str]) -> str:
    """utilerrors.NewAggregate(...).Error(): one message as is, more deduplicated within brackets."""
    unique = list(dict.fromkeys(messages))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


def memory_resize_error(pod_name: str, pod_limit: int | None, container_limits: Mapping[str, int],
                        usage: MemoryUsage) -> str:
    """Upstream validateMemoryResizeAction's error ("" when the resize may go on) for the decreases
    `memory_limit_decreases` found; `pod_name` is format.Pod's ``name_namespace(uid)``.

    A container's message, as upstream writes it, carries the pod's usage, not the container's (the comparison
    is with the container's own usage)."""
    if pod_limit is None and not container_limits:
        return ""
    if not usage.readable:
        return f'unable to read memory usage for pod "{pod_name}"'
    errors: list[str] = []
    if pod_limit is not None:
        if usage.pod is None:
            errors.append("missing pod memory usage")
        elif usage.pod >= pod_limit:
            errors.append(f"attempting to set pod memory limit ({pod_limit}) below current usage ({usage.pod})")
    for name, limit in container_limits.items():
        if name not in usage.containers:
            continue  # no stats for it: upstream looks only at the containers the stats list
        used = usage.containers[name]
        if used is None:
            errors.append(f'missing container "{name}" memory usage')
        elif used >= limit:
            shown = usage.pod if usage.pod is not None else used
            errors.append(f'attempting to set container "{name}" memory limit ({limit}) below current usage '
                          f"({shown})")
    return f"cannot decrease memory limits: {_aggregate(errors)}" if errors else ""


# ------------------------------------------------------------------------------------------------ status

MIN_SHARES_MILLI = 2
"""Upstream cm.MinShares compared with milli-CPU: a request at or below it reads back as the allocated value."""
MIN_MILLI_CPU_LIMIT = 10
"""Upstream cm.MinMilliCPULimit: a CFS quota for less than 10m is rounded up by the kernel."""
_BINARY = (("Ei", 1 << 60), ("Pi", 1 << 50), ("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10))


def quantity_text(value: Fraction, *, binary: bool = False) -> str:
    """A quantity as Go's canonical Quantity.String() would write a value of that format: milli-units when
    fractional (``500m``), binary suffixes for whole byte counts (``200Mi``) when `binary`."""
    if value.denominator != 1:
        milli = value * 1000
        return f"{milli.numerator // milli.denominator}m" if milli.denominator == 1 else policy._text(value)
    number = value.numerator
    if binary and number:
        for suffix, size in _BINARY:
            if number % size == 0:
                return f"{number // size}{suffix}"
    return str(number)


def _milli_text(milli: int) -> str:
    return quantity_text(Fraction(milli, 1000))


def container_status_resources(allocated: spec.Resources, running: bool, reported: Any,
                               actuated: spec.Resources | None, previous: Mapping[str, Any] | None) -> dict[str, Any]:
    """``containerStatuses[].resources`` (upstream `convertContainerStatusResources`).

    `allocated` are the container's allocated resources; not running: those as they are. Running: the keys the
    allocation has, with what the runtime `reported` (`cri.LinuxContainerResources`, None if it reports nothing)
    for cpu request (shares), cpu limit (quota) and memory limit, except where both the reported and allocated
    cpu values sit at the floor (2m request, 10m limit: the allocated value is kept); the memory request from
    the `actuated` record. A value the runtime does not report keeps `previous`' (the same instance's last
    status resources), else the allocated one.
    """
    requests, limits = dict(allocated.requests), dict(allocated.limits)
    if running:
        old = previous or {}
        old_requests, old_limits = dict(old.get("requests") or {}), dict(old.get("limits") or {})
        if CPU in limits:
            quota = getattr(reported, "cpu_quota", 0) or 0
            if quota > 0:
                milli = helpers.quota_to_milli_cpu(quota, getattr(reported, "cpu_period", 0) or 100000)
                if milli > MIN_MILLI_CPU_LIMIT or qos.milli_cpu(limits[CPU]) > MIN_MILLI_CPU_LIMIT:
                    limits[CPU] = _milli_text(milli)
            elif CPU in old_limits:
                limits[CPU] = old_limits[CPU]
        if MEMORY in limits:
            memory = getattr(reported, "memory_limit_in_bytes", 0) or 0
            if memory > 0:
                limits[MEMORY] = quantity_text(Fraction(memory), binary=True)
            elif MEMORY in old_limits:
                limits[MEMORY] = old_limits[MEMORY]
        if CPU in requests:
            shares = getattr(reported, "cpu_shares", 0) or 0
            if shares > 0:
                milli = helpers.shares_to_milli_cpu(shares)
                if milli > MIN_SHARES_MILLI or qos.milli_cpu(requests[CPU]) > MIN_SHARES_MILLI:
                    requests[CPU] = _milli_text(milli)
            elif CPU in old_requests:
                requests[CPU] = old_requests[CPU]
        if MEMORY in requests and actuated is not None and qos.byte_value(actuated.requests.get(MEMORY)):
            requests[MEMORY] = actuated.requests[MEMORY]
    return requirements(limits, requests)


def requirements(limits: Mapping[str, str], requests: Mapping[str, str]) -> dict[str, Any]:
    """A ResourceRequirements body as the API writes it: empty lists left out."""
    result: dict[str, Any] = {}
    if limits:
        result["limits"] = dict(limits)
    if requests:
        result["requests"] = dict(requests)
    return result


def _resource_list(values: Mapping[str, Fraction]) -> dict[str, str]:
    return {name: quantity_text(amount, binary=name != CPU) for name, amount in sorted(values.items())}


def pod_allocated_resources(pod: spec.Pod) -> dict[str, str]:
    """Pod ``status.allocatedResources``: the allocated pod's requests (upstream `PodRequests`)."""
    return _resource_list(helpers.pod_requests(pod))


def pod_status_resources(pod: spec.Pod, *, running: bool, cgroup: Any,
                         previous: Mapping[str, Any] | None) -> dict[str, Any]:
    """Pod ``status.resources`` (upstream `convertToAPIPodLevelResourcesStatus`).

    Not Running (judged on the API status before this one): the allocated pod's requests and limits. Running:
    the allocated pod-level resources with the cpu request, cpu limit and memory limit read back from the pod
    `cgroup` (`helpers.ResourceConfig`, None if unreadable: the previous status keeps its values), the memory
    request from the pod's requests when it sets none.
    """
    if not running:
        return requirements(_resource_list(helpers.pod_limits(pod)), _resource_list(helpers.pod_requests(pod)))
    level = policy.pod_level(pod) or spec.Resources()
    requests, limits = dict(level.requests), dict(level.limits)
    old = (previous or {}).get("resources") or {}
    old_requests, old_limits = dict(old.get("requests") or {}), dict(old.get("limits") or {})
    shares = getattr(cgroup, "cpu_shares", None)
    if shares is not None:
        milli = helpers.shares_to_milli_cpu(shares)
        allocated_milli = qos.milli_cpu(requests.get(CPU))
        allocated_shares = container_config_shares(allocated_milli)
        # cgroup v2's cpu.weight is coarse: read-back shares equal to the allocated ones seen through it keep the
        # allocated value (upstream CPUSharesEqualAfterV2RoundTrip); on v1 they are simply equal.
        same = shares == allocated_shares or helpers.cpu_shares_equal_after_v2_round_trip(allocated_shares, shares)
        if (milli > MIN_SHARES_MILLI or allocated_milli > MIN_SHARES_MILLI) and not same:
            requests[CPU] = _milli_text(milli)
    elif CPU in old_requests:
        requests[CPU] = old_requests[CPU]
    if MEMORY not in requests:
        memory = helpers.pod_requests(pod).get(MEMORY)
        if memory is not None:
            requests[MEMORY] = quantity_text(memory, binary=True)
    quota = getattr(cgroup, "cpu_quota", None)
    # upstream CPULimitsFromConfig: no limit read back for an unlimited quota (-1: cpuCFSQuota off, or exclusive
    # CPUs), and then the previous status keeps its value, as for an unreadable cgroup
    milli = 0 if quota is None else helpers.quota_to_milli_cpu(quota, getattr(cgroup, "cpu_period", None) or 100000)
    if milli > 0:
        if milli > MIN_MILLI_CPU_LIMIT or qos.milli_cpu(limits.get(CPU)) > MIN_MILLI_CPU_LIMIT:
            limits[CPU] = _milli_text(milli)
    elif CPU in old_limits:
        limits[CPU] = old_limits[CPU]
    memory_limit = getattr(cgroup, "memory", None)
    if memory_limit is not None and 0 < memory_limit < helpers.CGROUP_V1_MEMORY_UNLIMITED:
        limits[MEMORY] = quantity_text(Fraction(memory_limit), binary=True)
    elif memory_limit is None and MEMORY in old_limits:
        limits[MEMORY] = old_limits[MEMORY]
    return requirements(limits, requests)


def container_config_shares(milli: int) -> int:
    """The shares the allocated cpu request gives (upstream MilliCPUToShares)."""
    return helpers.milli_cpu_to_shares(milli)


# ------------------------------------------------------------------------------ UpdatePodSandboxResources
# What a resize tells the runtime about the whole pod, before each pod cgroup write (upstream doPodResizeAction's
# setPodCgroupConfig), so that runtimes sizing a VM or a sandbox-level cgroup follow the pod.

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _overhead(pod: spec.Pod) -> Mapping[str, Any] | None:
    overhead = pod.spec.raw.get("overhead")
    return overhead if isinstance(overhead, Mapping) else None


def merge_resource_config(source: helpers.ResourceConfig, update: helpers.ResourceConfig) -> helpers.ResourceConfig:
    """`source` with every value `update` sets (upstream `mergeResourceConfig`): the pod's resources as they stand
    after one cgroup write. Hugepage limits and unified files merge key by key."""
    fields = ("memory", "cpu_shares", "cpu_quota", "cpu_period", "pids_limit")
    changes: dict[str, Any] = {name: getattr(update, name) for name in fields if getattr(update, name) is not None}
    return dataclasses.replace(source, **changes,
                               hugepage_limits={**source.hugepage_limits, **update.hugepage_limits},
                               unified={**source.unified, **update.unified})


def subtract_overhead(config: helpers.ResourceConfig, pod: spec.Pod) -> helpers.ResourceConfig:
    """The pod's resources without its spec.overhead (upstream `subtractOverheadFromResourceConfig`): the runtime
    is told the overhead apart. cpu overhead comes off the quota (when a period is set) and off the shares (through
    milliCPU, so the shares floor of 2 holds); memory overhead comes off the limit when it is a whole number."""
    overhead = _overhead(pod)
    if overhead is None:
        return config
    changes: dict[str, int] = {}
    if CPU in overhead:
        milli = qos.milli_value(overhead[CPU])
        if config.cpu_period is not None and config.cpu_quota is not None:
            changes["cpu_quota"] = config.cpu_quota - helpers.milli_cpu_to_quota(milli, config.cpu_period)
        if config.cpu_shares is not None:
            changes["cpu_shares"] = helpers.milli_cpu_to_shares(helpers.shares_to_milli_cpu(config.cpu_shares) - milli)
    if MEMORY in overhead and config.memory is not None:
        amount = qos.parse_quantity(overhead[MEMORY])
        if amount.denominator == 1 and _INT64_MIN <= amount <= _INT64_MAX:  # Quantity.AsInt64 succeeds
            changes["memory"] = config.memory - int(amount)
    return dataclasses.replace(config, **changes)


def resource_config_to_linux(config: helpers.ResourceConfig) -> cri.LinuxContainerResources:
    """A cgroup's settings as CRI LinuxContainerResources (upstream `convertResourceConfigToLinuxContainerResources`):
    cpu period, quota and shares, memory limit and unified files; unset values stay 0, hugepages and pids are not
    sent."""
    return cri.LinuxContainerResources(
        cpu_period=config.cpu_period or 0, cpu_quota=config.cpu_quota or 0, cpu_shares=config.cpu_shares or 0,
        memory_limit_in_bytes=config.memory or 0, unified=dict(config.unified))


def overhead_linux_resources(pod: spec.Pod, *, cpu_cfs_quota: bool = True,
                             memory_oom_group: bool = False) -> cri.LinuxContainerResources:
    """The pod's spec.overhead as CRI resources (upstream `convertOverheadToLinuxResources`): treated as Guaranteed,
    request = limit; all zero for a pod without overhead."""
    overhead = _overhead(pod)
    if overhead is None:
        return cri.LinuxContainerResources()
    cpu = overhead.get(CPU, 0)
    return container_config.calculate_linux_resources(cpu, cpu, overhead.get(MEMORY, 0), cpu_cfs_quota=cpu_cfs_quota,
                                                      memory_oom_group=memory_oom_group)


def sandbox_resources(pod: spec.Pod, config: helpers.ResourceConfig, *, cpu_cfs_quota: bool = True,
                      memory_oom_group: bool = False
                      ) -> tuple[cri.LinuxContainerResources, cri.LinuxContainerResources]:
    """(overhead, resources) of UpdatePodSandboxResources for the pod cgroup settings `config` (upstream
    `generateUpdatePodSandboxResourcesRequest`): the runtime gets the overhead and the rest apart."""
    return (overhead_linux_resources(pod, cpu_cfs_quota=cpu_cfs_quota, memory_oom_group=memory_oom_group),
            resource_config_to_linux(subtract_overhead(config, pod)))
