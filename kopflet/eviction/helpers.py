"""The eviction manager's decisions: thresholds met, pressure conditions, whom to evict and how to say so.

Mirrors upstream `pkg/kubelet/eviction/helpers.go` (thresholdsMet with min-reclaim, thresholdsFirstObservedAt,
thresholdsMetGracePeriod, nodeConditions, nodeConditionsLastObservedAt / ObservedSince, thresholdsUpdatedStats,
byEvictionPriority, the rank functions, buildSignalToRankFunc / buildSignalToNodeReclaimFuncs, evictionMessage)
and the pure parts of `eviction_manager.go` (one round's bookkeeping in `synchronize`, the grace period given
to an evicted pod, the status it is failed with, and `Admit`).

Pure: times are seconds (any clock, as long as one clock is used throughout), pods are `EvictionCandidate`s
(what ranking needs from the spec plus the pod's measured usage), the round's state is a value passed back in.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from kopflet import gotext
from kopflet.api import qos, spec, times
from kopflet.eviction import local_storage as ls
from kopflet.eviction import thresholds as th
from kopflet.eviction.thresholds import Threshold
from kopflet.lifecycle import admission

# helpers.go constants.
REASON = "Evicted"
"""The pod status reason (and event reason) of an eviction, and of an admission refused under pressure."""
NODE_LOW_MESSAGE_FMT = "The node was low on resource: {}. "
NODE_CONDITION_MESSAGE_FMT = "The node had condition: {}. "
THRESHOLD_MET_MESSAGE_FMT = "Threshold quantity: {}, available: {}. "
CONTAINER_MESSAGE_FMT = "Container {} was using {}, request is {}, has larger consumption of {}. "
POD_MESSAGE_FMT = "Pod {} was using {}, request is {}, has larger consumption of {}. "
# The eviction event's annotations (upstream Offending*Key, StarvedResourceKey).
OFFENDING_CONTAINERS_KEY = "offending_containers"
OFFENDING_CONTAINERS_USAGE_KEY = "offending_containers_usage"
OFFENDING_POD_KEY = "offending_pod"
OFFENDING_POD_USAGE_KEY = "offending_pod_usage"
STARVED_RESOURCE_KEY = "starved_resource"

IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS = 1
"""eviction_manager.go: the grace period of a pod evicted for a hard threshold (not 0)."""
DISRUPTION_TARGET = "DisruptionTarget"
TERMINATION_BY_KUBELET = "TerminationByKubelet"
"""v1.PodReasonTerminationByKubelet: the DisruptionTarget condition's reason on an evicted pod."""
TAINT_MEMORY_PRESSURE = "node.kubernetes.io/memory-pressure"
"""v1.TaintNodeMemoryPressure. The kubelet does not set the pressure taints: the node lifecycle controller
(kube-controller-manager, doNoScheduleTaintingPass) maps the conditions to NoSchedule taints. The kubelet
only honours a BestEffort pod's toleration of this one in `admit`."""

# fsStatsType: which parts of a pod's disk usage a disk signal counts.
FS_LOCAL_VOLUME_SOURCE = "localVolumeSource"
FS_LOGS = "logs"
FS_ROOT = "root"
FS_IMAGES = "images"

# Node-level reclaim steps (buildSignalToNodeReclaimFuncs), by name; the manager maps them to callables.
RECLAIM_CONTAINERS = "containers"
"""ContainerGC.DeleteAllUnusedContainers."""
RECLAIM_IMAGES = "images"
"""ImageGC.DeleteUnusedImages."""


# ------------------------------------------------------------------------------------------- observations


@dataclasses.dataclass(frozen=True)
class Observation:
    """One signal's measurement (upstream signalObservation): what is left of what there is.

    `time` is when it was taken (seconds, None when unknown: Go's zero time), used to act only on fresh data.
    """

    available: int
    capacity: int
    time: float | None = None


Observations = Mapping[str, Observation]


def _quantity_format(signal: str) -> str:
    """How upstream builds a signal's quantities: bytes in BinarySI, inodes and PIDs in DecimalSI."""
    resource = th.SIGNAL_TO_RESOURCE.get(signal)
    return th.BINARY_SI if resource in (th.RESOURCE_MEMORY, th.RESOURCE_EPHEMERAL_STORAGE) else th.DECIMAL_SI


def threshold_amount(threshold: Threshold, observation: Observation, *, enforce_min_reclaim: bool = False) -> Fraction:
    """The level the signal must stay at or above (GetThresholdQuantity), plus the min reclaim if asked."""
    amount = Fraction(threshold.value.amount(observation.capacity)[0])
    if enforce_min_reclaim and threshold.min_reclaim is not None:
        amount += threshold.min_reclaim.amount(observation.capacity)[0]
    return amount


def thresholds_met(thresholds: Iterable[Threshold], observations: Observations,
                   enforce_min_reclaim: bool = False) -> list[Threshold]:
    """upstream thresholdsMet: the thresholds whose signal is below them, ignoring grace periods. With
    `enforce_min_reclaim` a threshold counts until the signal is back above threshold + min reclaim.
    A signal without an observation meets nothing."""
    results = []
    for threshold in thresholds:
        observed = observations.get(threshold.signal)
        if observed is None:
            continue
        amount = threshold_amount(threshold, observed, enforce_min_reclaim=enforce_min_reclaim)
        if threshold.operator == th.OP_LESS_THAN and amount > observed.available:
            results.append(threshold)
    return results


def _same_threshold(a: Threshold, b: Threshold) -> bool:
    """upstream hasThreshold's comparison: signal, operator, grace period and value (min reclaim ignored)."""
    return (a.grace_period == b.grace_period and a.operator == b.operator and a.signal == b.signal
            and _same_value(a.value, b.value))


def _same_value(a: th.ThresholdValue, b: th.ThresholdValue) -> bool:
    """upstream compareThresholdValue: equal quantities, or (both without one) equal percentages."""
    if a.quantity is not None or b.quantity is not None:
        return a.quantity is not None and b.quantity is not None and a.quantity == b.quantity
    return a.percentage == b.percentage


def merge_thresholds(first: Sequence[Threshold], second: Iterable[Threshold]) -> list[Threshold]:
    """upstream mergeThresholds: `first`, then those of `second` not already in it."""
    results = list(first)
    for threshold in second:
        if not any(_same_threshold(kept, threshold) for kept in results):
            results.append(threshold)
    return results


def thresholds_first_observed_at(thresholds: Iterable[Threshold], last_observed_at: Mapping[Threshold, float],
                                 now: float) -> dict[Threshold, float]:
    """upstream thresholdsFirstObservedAt: when each currently met threshold started being met (now if new);
    thresholds no longer met are dropped, so their grace period starts over."""
    return {t: last_observed_at.get(t, now) for t in thresholds}


def thresholds_met_grace_period(observed_at: Mapping[Threshold, float], now: float) -> list[Threshold]:
    """upstream thresholdsMetGracePeriod: the thresholds met for at least their grace period."""
    return [t for t, at in observed_at.items() if now - at >= t.grace_period]


def node_conditions(thresholds: Iterable[Threshold]) -> list[str]:
    """upstream nodeConditions: the pressure conditions of the given thresholds, each once."""
    results: list[str] = []
    for threshold in thresholds:
        condition = th.SIGNAL_TO_NODE_CONDITION.get(threshold.signal)
        if condition is not None and condition not in results:
            results.append(condition)
    return results


def node_conditions_last_observed_at(conditions: Iterable[str], last_observed_at: Mapping[str, float],
                                     now: float) -> dict[str, float]:
    """upstream nodeConditionsLastObservedAt: the given conditions seen now, the others keep their time."""
    results = dict(last_observed_at)
    results.update(dict.fromkeys(conditions, now))
    return results


def node_conditions_observed_since(observed_at: Mapping[str, float], period: float, now: float) -> list[str]:
    """upstream nodeConditionsObservedSince: the conditions seen within `period` (the pressure transition
    period), so a condition stays until the pressure has been gone that long. In MemoryPressure, DiskPressure,
    PIDPressure order (upstream's is a map's)."""
    seen = [c for c, at in observed_at.items() if now - at < period]
    return sorted(seen, key=lambda c: (th.NODE_CONDITIONS.index(c) if c in th.NODE_CONDITIONS else 99, c))


def thresholds_updated_stats(thresholds: Iterable[Threshold], observations: Observations,
                             last_observations: Observations) -> list[Threshold]:
    """upstream thresholdsUpdatedStats: only thresholds whose signal was measured again since the last round
    (or has no time, or was not seen before) drive an eviction, so one stale reading evicts once."""
    results = []
    for threshold in thresholds:
        observed = observations.get(threshold.signal)
        if observed is None:
            continue
        last = last_observations.get(threshold.signal)
        if last is None or observed.time is None or last.time is None or observed.time > last.time:
            results.append(threshold)
    return results


def sort_by_eviction_priority(thresholds: Iterable[Threshold]) -> list[Threshold]:
    """upstream byEvictionPriority: memory signals first, signals with nothing to reclaim last."""
    def rank(threshold: Threshold) -> int:
        if threshold.signal in (th.MEMORY_AVAILABLE, th.ALLOCATABLE_MEMORY_AVAILABLE):
            return 0
        return 1 if threshold.signal in th.SIGNAL_TO_RESOURCE else 2
    return sorted(thresholds, key=rank)


def reclaimable_threshold(thresholds: Iterable[Threshold]) -> tuple[Threshold, str] | None:
    """upstream getReclaimableThreshold: the first threshold with a resource to reclaim, and that resource."""
    for threshold in thresholds:
        resource = th.SIGNAL_TO_RESOURCE.get(threshold.signal)
        if resource is not None:
            return threshold, resource
    return None


# -------------------------------------------------------------------------------------------------- rounds


@dataclasses.dataclass(frozen=True)
class EvictionState:
    """What one round hands the next (the manager's fields in upstream managerImpl)."""

    node_conditions: tuple[str, ...] = ()
    """The pressure conditions now reported (after the transition period)."""
    thresholds_first_observed_at: Mapping[Threshold, float] = dataclasses.field(default_factory=dict)
    node_conditions_last_observed_at: Mapping[str, float] = dataclasses.field(default_factory=dict)
    thresholds_met: tuple[Threshold, ...] = ()
    """Met including grace period, kept until their min reclaim is satisfied."""
    last_observations: Observations = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class RoundResult:
    """One round's outcome: the state for the next round and the thresholds to act on now (grace periods
    met, freshly measured, in eviction priority order)."""

    state: EvictionState
    act_on: tuple[Threshold, ...]


def evaluate(thresholds: Sequence[Threshold], observations: Observations, state: EvictionState, now: float,
             pressure_transition_period: float = th.DEFAULT_PRESSURE_TRANSITION_PERIOD) -> RoundResult:
    """The bookkeeping of upstream synchronize, from the observations to the thresholds to reclaim for.

    Thresholds met now, plus those met before whose min reclaim is not yet satisfied; when each was first met;
    the pressure conditions they imply, held for the transition period; those past their grace period (kept
    for the next round); of those, the ones measured since the last round, memory first.
    """
    met = thresholds_met(thresholds, observations)
    if state.thresholds_met:
        met = merge_thresholds(met, thresholds_met(state.thresholds_met, observations, enforce_min_reclaim=True))
    first_observed = thresholds_first_observed_at(met, state.thresholds_first_observed_at, now)
    last_seen = node_conditions_last_observed_at(node_conditions(met), state.node_conditions_last_observed_at, now)
    conditions = node_conditions_observed_since(last_seen, pressure_transition_period, now)
    past_grace = thresholds_met_grace_period(first_observed, now)
    new_state = EvictionState(node_conditions=tuple(conditions), thresholds_first_observed_at=first_observed,
                              node_conditions_last_observed_at=last_seen, thresholds_met=tuple(past_grace),
                              last_observations=dict(observations))
    fresh = thresholds_updated_stats(past_grace, observations, state.last_observations)
    return RoundResult(state=new_state, act_on=tuple(sort_by_eviction_priority(fresh)))


def signal_to_node_reclaim(with_image_fs: bool, split_container_image_fs: bool) -> dict[str, tuple[str, ...]]:
    """upstream buildSignalToNodeReclaimFuncs: the node-level reclaim steps (RECLAIM_*) tried, in order,
    before evicting a pod for a disk signal. Memory and PIDs have none."""
    both = (RECLAIM_CONTAINERS, RECLAIM_IMAGES)
    if with_image_fs and not split_container_image_fs:  # nodefs: only logs, which nothing reclaims here
        nodefs: tuple[str, ...] = ()
        imagefs = both
        containerfs = imagefs
    elif with_image_fs:  # images apart from the writable layers, which are on nodefs
        imagefs = (RECLAIM_IMAGES,)
        nodefs = (RECLAIM_CONTAINERS,)
        containerfs = nodefs
    else:  # one filesystem
        nodefs = imagefs = containerfs = both
    return {th.NODEFS_AVAILABLE: nodefs, th.NODEFS_INODES_FREE: nodefs,
            th.IMAGEFS_AVAILABLE: imagefs, th.IMAGEFS_INODES_FREE: imagefs,
            th.CONTAINERFS_AVAILABLE: containerfs, th.CONTAINERFS_INODES_FREE: containerfs}


# ---------------------------------------------------------------------------------------------- pod stats


@dataclasses.dataclass(frozen=True)
class FsUsage:
    """Used bytes and inodes of one filesystem use (a writable layer, a log directory, a volume)."""

    used_bytes: int | None = None
    inodes_used: int | None = None


@dataclasses.dataclass(frozen=True)
class ContainerUsage:
    """One container's measured usage (the summary API's ContainerStats, what eviction reads of it)."""

    name: str
    memory_working_set: int | None = None
    rootfs: FsUsage | None = None
    logs: FsUsage | None = None


@dataclasses.dataclass(frozen=True)
class PodUsage:
    """One pod's measured usage (the summary API's PodStats, what eviction reads of it)."""

    memory_working_set: int | None = None
    process_count: int | None = None
    containers: tuple[ContainerUsage, ...] = ()
    volumes: Mapping[str, FsUsage] = dataclasses.field(default_factory=dict)
    """By volume name: every volume measured (upstream VolumeStats, du of each: emptyDir, configMap, secret,
    downwardAPI, projected); the checks pick theirs by the pod's spec."""
    pod_logs: FsUsage | None = None
    """The files directly in the pod's log directory (upstream getPodLogStats; not the containers' logs)."""
    etc_hosts: FsUsage | None = None
    """The pod's managed etc-hosts file (upstream getPodEtcHostsStats)."""


@dataclasses.dataclass(frozen=True)
class EvictionCandidate:
    """A pod as eviction ranks and describes it: the spec facts it needs and its usage (None: not measured,
    which ranks it first, as upstream does with a pod missing from the stats)."""

    uid: str
    name: str
    namespace: str = ""
    priority: int = 0
    qos_class: str = qos.BEST_EFFORT
    critical: bool = False
    generation: int = 0
    termination_grace_period_seconds: int | None = None
    requests: Mapping[str, Fraction] = dataclasses.field(default_factory=dict)
    """upstream GetResourceRequestQuantity per resource (memory, ephemeral-storage): pod-level requests
    replacing the containers', overhead added to a non-zero total."""
    container_requests: Mapping[str, Mapping[str, str]] = dataclasses.field(default_factory=dict)
    """Regular and init containers' requests as written (for the message), by container name."""
    pod_level_requests: Mapping[str, str] | None = None
    """``spec.resources.requests`` when pod-level resources are set, else None."""
    local_volumes: tuple[str, ...] = ()
    """Volumes that use the node's disk (hostPath, emptyDir on disk, configMap, gitRepo: localVolumeNames)."""
    storage_limits: ls.StorageLimits = dataclasses.field(default_factory=ls.StorageLimits)
    """emptyDir sizeLimits and ephemeral-storage limits (the local storage limit evictions)."""
    usage: PodUsage | None = None


def _is_local_volume(volume: Mapping[str, Any]) -> bool:
    """upstream localVolumeNames: hostPath or IsLocalEphemeralVolume (gitRepo, disk emptyDir, configMap)."""
    empty_dir = volume.get("emptyDir")
    disk_empty_dir = isinstance(empty_dir, Mapping) and not empty_dir.get("medium")
    return any(volume.get(k) is not None for k in ("hostPath", "gitRepo", "configMap")) or disk_empty_dir


def _request_quantity(pod: spec.Pod, resource: str, pod_level_set: bool) -> Fraction:
    """upstream GetResourceRequestQuantity (PodLevelResources on): overhead only added to a non-zero total."""
    total = admission.aggregate(pod, lambda c: c.resources.requests).get(resource, Fraction(0))
    if pod_level_set and resource in (qos.CPU, qos.MEMORY):
        requests = (qos.pod_level_resources(pod) or {}).get("requests") or {}
        if resource in requests:
            total = qos.parse_quantity(requests[resource])
    overhead = pod.spec.raw.get("overhead")
    if total and isinstance(overhead, Mapping) and resource in overhead:
        total += qos.parse_quantity(overhead[resource])
    return total


def candidate(pod: spec.Pod, usage: PodUsage | None, *, qos_class: str | None = None,
              generation: int = 0) -> EvictionCandidate:
    """The candidate for a bound pod (`qos_class`: status.qosClass when known, else computed)."""
    pod_resources = qos.pod_level_resources(pod) or {}
    pod_level_set = any(name in (qos.CPU, qos.MEMORY) or name.startswith("hugepages-")
                        for kind in ("requests", "limits") for name in (pod_resources.get(kind) or {}))
    return EvictionCandidate(
        uid=pod.uid, name=pod.name, namespace=pod.namespace, priority=pod.spec.priority or 0,
        qos_class=qos_class or qos.qos_class(pod), critical=qos.is_critical_pod(pod), generation=generation,
        termination_grace_period_seconds=pod.spec.termination_grace_period_seconds,
        requests={r: _request_quantity(pod, r, pod_level_set) for r in (qos.MEMORY, th.RESOURCE_EPHEMERAL_STORAGE)},
        container_requests={c.name: dict(c.resources.requests)
                            for c in (*pod.spec.containers, *pod.spec.init_containers)},
        pod_level_requests=dict(pod_resources.get("requests") or {}) if pod_level_set else None,
        local_volumes=tuple(str(v.get("name")) for v in pod.spec.volumes if _is_local_volume(v)),
        storage_limits=ls.storage_limits(pod),
        usage=usage,
    )


def _bytes(usage: FsUsage | None) -> int | None:
    return usage.used_bytes if usage is not None else None


def local_storage_eviction(pod: EvictionCandidate, *, dedicated_image_fs: bool) -> tuple[str, str] | None:
    """upstream localStorageEviction's checks for one pod (`kopflet.eviction.local_storage`): the (signal,
    message) of the limit it exceeds, else None. A pod without stats is skipped (statsFunc not ok)."""
    limits, usage = pod.storage_limits, pod.usage
    if usage is None or not limits.enforced:
        return None
    volumes = {name: v.used_bytes for name, v in usage.volumes.items() if v.used_bytes is not None}
    containers = [ls.ContainerDisk(c.name, _bytes(c.rootfs), _bytes(c.logs)) for c in usage.containers]
    other = (_bytes(usage.pod_logs) or 0) + (_bytes(usage.etc_hosts) or 0)
    return ls.eviction_message(limits, volumes=volumes, containers=containers, other=other,
                               dedicated_image_fs=dedicated_image_fs)


# ------------------------------------------------------------------------------------------------- ranking

Cmp = Callable[[EvictionCandidate, EvictionCandidate], int]
RankFunc = Callable[[Sequence[EvictionCandidate]], list[EvictionCandidate]]


def _cmp_bool(a: bool, b: bool) -> int:
    """upstream cmpBool: true before false."""
    return 0 if a == b else (-1 if not b else 1)


def _sign(value: Fraction | int) -> int:
    return (value > 0) - (value < 0)


def _memory(usage: PodUsage) -> int:
    return usage.memory_working_set or 0


def _request(pod: EvictionCandidate, resource: str) -> Fraction:
    return pod.requests.get(resource, Fraction(0))


def _unmeasured_first(p1: EvictionCandidate, p2: EvictionCandidate) -> int | None:
    """Every usage comparison first puts a pod without stats ahead (upstream: !p1Found || !p2Found)."""
    if p1.usage is None or p2.usage is None:
        return _cmp_bool(p1.usage is None, p2.usage is None)
    return None


def cmp_priority(p1: EvictionCandidate, p2: EvictionCandidate) -> int:
    """upstream priority: lower priority first."""
    return _sign(p1.priority - p2.priority)


def cmp_exceeds_memory_requests(p1: EvictionCandidate, p2: EvictionCandidate) -> int:
    """upstream exceedMemoryRequests: pods using more memory than requested first."""
    first = _unmeasured_first(p1, p2)
    if first is not None:
        return first
    assert p1.usage is not None and p2.usage is not None
    return _cmp_bool(_memory(p1.usage) > _request(p1, qos.MEMORY), _memory(p2.usage) > _request(p2, qos.MEMORY))


def cmp_memory(p1: EvictionCandidate, p2: EvictionCandidate) -> int:
    """upstream memory: the larger use of memory above its request first."""
    first = _unmeasured_first(p1, p2)
    if first is not None:
        return first
    assert p1.usage is not None and p2.usage is not None
    return _sign((_memory(p2.usage) - _request(p2, qos.MEMORY)) - (_memory(p1.usage) - _request(p1, qos.MEMORY)))


def cmp_process(p1: EvictionCandidate, p2: EvictionCandidate) -> int:
    """upstream process: more processes first."""
    first = _unmeasured_first(p1, p2)
    if first is not None:
        return first
    assert p1.usage is not None and p2.usage is not None
    return _sign((p2.usage.process_count or 0) - (p1.usage.process_count or 0))


def pod_disk_usage(pod: EvictionCandidate, fs_stats: Iterable[str]) -> dict[str, int]:
    """upstream podDiskUsage: bytes (ephemeral-storage) and inodes of the containers' writable layers
    (``root``) and logs (``logs``), and of the local volumes (``localVolumeSource``). ``images`` adds nothing
    per pod, as upstream."""
    kinds = set(fs_stats)
    disk = inodes = 0
    usage = pod.usage or PodUsage()
    parts: list[FsUsage | None] = []
    for container in usage.containers:
        if FS_ROOT in kinds:
            parts.append(container.rootfs)
        if FS_LOGS in kinds:
            parts.append(container.logs)
    if FS_LOCAL_VOLUME_SOURCE in kinds:
        parts.extend(usage.volumes.get(name) for name in pod.local_volumes)
    for part in parts:
        if part is not None:
            disk += part.used_bytes or 0
            inodes += part.inodes_used or 0
    return {th.RESOURCE_EPHEMERAL_STORAGE: disk, th.RESOURCE_INODES: inodes}


def cmp_exceeds_disk_requests(fs_stats: Sequence[str], resource: str) -> Cmp:
    """upstream exceedDiskRequests: pods using more of the disk resource than requested first."""
    def cmp(p1: EvictionCandidate, p2: EvictionCandidate) -> int:
        first = _unmeasured_first(p1, p2)
        if first is not None:
            return first
        u1, u2 = pod_disk_usage(p1, fs_stats)[resource], pod_disk_usage(p2, fs_stats)[resource]
        return _cmp_bool(u1 > _request(p1, resource), u2 > _request(p2, resource))
    return cmp


def cmp_disk(fs_stats: Sequence[str], resource: str) -> Cmp:
    """upstream disk: the larger use above the request first. The ephemeral-storage request is subtracted
    even when the resource is inodes, as upstream does."""
    def cmp(p1: EvictionCandidate, p2: EvictionCandidate) -> int:
        first = _unmeasured_first(p1, p2)
        if first is not None:
            return first
        u1 = pod_disk_usage(p1, fs_stats)[resource] - _request(p1, th.RESOURCE_EPHEMERAL_STORAGE)
        u2 = pod_disk_usage(p2, fs_stats)[resource] - _request(p2, th.RESOURCE_EPHEMERAL_STORAGE)
        return _sign(u2 - u1)
    return cmp


def ordered_by(*cmps: Cmp) -> RankFunc:
    """upstream orderedBy(...).Sort: each comparison breaks the previous one's ties."""
    def combined(p1: EvictionCandidate, p2: EvictionCandidate) -> int:
        for cmp in cmps:
            result = cmp(p1, p2)
            if result:
                return result
        return 0

    def rank(pods: Sequence[EvictionCandidate]) -> list[EvictionCandidate]:
        return sorted(pods, key=functools.cmp_to_key(combined))
    return rank


rank_memory_pressure: RankFunc = ordered_by(cmp_exceeds_memory_requests, cmp_priority, cmp_memory)
"""upstream rankMemoryPressure: over requests first, then lowest priority, then most memory above requests."""
rank_pid_pressure: RankFunc = ordered_by(cmp_priority, cmp_process)
"""upstream rankPIDPressure: lowest priority first, then most processes."""


def rank_disk_pressure(fs_stats: Sequence[str], resource: str) -> RankFunc:
    """upstream rankDiskPressureFunc: over requests first, then lowest priority, then most use above requests."""
    return ordered_by(cmp_exceeds_disk_requests(fs_stats, resource), cmp_priority, cmp_disk(fs_stats, resource))


def signal_to_rank(with_image_fs: bool, split_container_image_fs: bool) -> dict[str, RankFunc]:
    """upstream buildSignalToRankFunc: which disk usage each disk signal ranks pods by, per filesystem layout."""
    storage, inodes = th.RESOURCE_EPHEMERAL_STORAGE, th.RESOURCE_INODES
    result: dict[str, RankFunc] = {th.MEMORY_AVAILABLE: rank_memory_pressure,
                                   th.ALLOCATABLE_MEMORY_AVAILABLE: rank_memory_pressure,
                                   th.PID_AVAILABLE: rank_pid_pressure}
    if with_image_fs and not split_container_image_fs:
        node_stats, image_stats = (FS_LOGS, FS_LOCAL_VOLUME_SOURCE), (FS_ROOT, FS_IMAGES)
        container_stats = image_stats
    elif with_image_fs:
        node_stats, image_stats = (FS_LOGS, FS_LOCAL_VOLUME_SOURCE, FS_ROOT), (FS_IMAGES,)
        container_stats = node_stats
    else:
        node_stats = image_stats = container_stats = (FS_IMAGES, FS_ROOT, FS_LOGS, FS_LOCAL_VOLUME_SOURCE)
    for (available, free), stats in (((th.NODEFS_AVAILABLE, th.NODEFS_INODES_FREE), node_stats),
                                     ((th.IMAGEFS_AVAILABLE, th.IMAGEFS_INODES_FREE), image_stats),
                                     ((th.CONTAINERFS_AVAILABLE, th.CONTAINERFS_INODES_FREE), container_stats)):
        result[available] = rank_disk_pressure(stats, storage)
        result[free] = rank_disk_pressure(stats, inodes)
    return result


# ------------------------------------------------------------------------------------------------ eviction


def threshold_met_info(resource: str, thresholds: Iterable[Threshold],
                       observations: Observations) -> tuple[str, str] | None:
    """upstream getThresholdMetInfo: the first threshold of that resource with an observation, as the
    threshold quantity and the available amount, written as Go writes them."""
    for threshold in thresholds:
        if th.SIGNAL_TO_RESOURCE.get(threshold.signal) != resource:
            continue
        observed = observations.get(threshold.signal)
        if observed is not None:
            amount, fmt = threshold.value.amount(observed.capacity)
            return (th.format_quantity(amount, fmt),
                    th.format_quantity(observed.available, _quantity_format(threshold.signal)))
    return None


def _written(text: str | None) -> tuple[Fraction, str]:
    """A request as written, its value and how Go prints it (a missing one is Go's zero Quantity, "0")."""
    if text is None:
        return Fraction(0), "0"
    value = qos.parse_quantity(text)
    return value, th.format_quantity(value, th.quantity_format(str(text)))


def eviction_message(resource: str, pod: EvictionCandidate, thresholds: Iterable[Threshold],
                     observations: Observations) -> tuple[str, dict[str, str]]:
    """upstream evictionMessage: the pod's status message and the eviction event's annotations.

    ``The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. `` then, for memory
    with pod-level requests, the pod's usage against them, and each container using more than it requests
    (``Container c was using 200Mi, request is 100Mi, has larger consumption of memory. ``). Annotations only
    when the pod has stats: the offending containers and their usage (comma-separated), the starved resource.
    """
    annotations: dict[str, str] = {}
    message = NODE_LOW_MESSAGE_FMT.format(resource)
    info = threshold_met_info(resource, thresholds, observations)
    if info is not None:
        message += THRESHOLD_MET_MESSAGE_FMT.format(*info)
    usage = pod.usage
    if usage is None:
        return message, annotations
    if (resource == th.RESOURCE_MEMORY and pod.pod_level_requests is not None
            and th.RESOURCE_MEMORY in pod.pod_level_requests and usage.memory_working_set is not None):
        pod_usage = th.format_quantity(usage.memory_working_set, th.BINARY_SI)
        message += POD_MESSAGE_FMT.format(pod.name, pod_usage, _written(pod.pod_level_requests[resource])[1],
                                          resource)
        annotations[OFFENDING_POD_KEY] = pod.name
        annotations[OFFENDING_POD_USAGE_KEY] = pod_usage
    exceeded: list[str] = []
    used: list[str] = []
    for container in usage.containers:
        if container.name not in pod.container_requests:
            continue  # ephemeral containers (no requests) are never blamed
        request, request_text = _written(pod.container_requests[container.name].get(resource))
        amount: int | None = None
        if resource == th.RESOURCE_EPHEMERAL_STORAGE:
            root, logs = container.rootfs, container.logs
            if root and logs and root.used_bytes is not None and logs.used_bytes is not None:
                amount = root.used_bytes + logs.used_bytes
        elif resource == th.RESOURCE_MEMORY:
            amount = container.memory_working_set
        if amount is not None and amount > request:
            text = th.format_quantity(amount, th.BINARY_SI)
            message += CONTAINER_MESSAGE_FMT.format(container.name, text, request_text, resource)
            exceeded.append(container.name)
            used.append(text)
    annotations[OFFENDING_CONTAINERS_KEY] = ",".join(exceeded)
    annotations[OFFENDING_CONTAINERS_USAGE_KEY] = ",".join(used)
    annotations[STARVED_RESOURCE_KEY] = resource
    return message, annotations


def eviction_grace_period(threshold: Threshold, pod_grace_period: int | None, max_pod_grace_period: int) -> int:
    """The grace period an evicted pod gets (eviction_manager.go synchronize): 1s for a hard threshold;
    for a soft one evictionMaxPodGracePeriod, lowered to the pod's terminationGracePeriodSeconds."""
    if threshold.is_hard:
        return IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS
    if pod_grace_period is None:
        return max_pod_grace_period
    return min(max_pod_grace_period, pod_grace_period)


def disruption_target_condition(message: str, *, generation: int = 0, now: datetime.datetime | None = None,
                                previous_conditions: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The DisruptionTarget condition the kubelet puts on a pod it terminates (the eviction manager's and the node
    shutdown manager's status functions): True, reason TerminationByKubelet, `message`, observedGeneration =
    metadata.generation (PodObservedGenerationTracking is GA; 0 is left out, as omitempty). Upstream
    UpdatePodCondition keeps the lastTransitionTime of a condition already True; else it is `now` (left out when
    None)."""
    condition: dict[str, Any] = {"type": DISRUPTION_TARGET, "status": "True", "reason": TERMINATION_BY_KUBELET,
                                 "message": message}
    if generation:
        condition["observedGeneration"] = generation
    old = next((c for c in previous_conditions if c.get("type") == DISRUPTION_TARGET), None)
    if old is not None and old.get("status") == "True" and old.get("lastTransitionTime"):
        condition["lastTransitionTime"] = old["lastTransitionTime"]
    elif now is not None:
        condition["lastTransitionTime"] = times.timestamp(now)
    return condition


def evicted_status(message: str, *, generation: int = 0, now: datetime.datetime | None = None,
                   previous_conditions: Sequence[Mapping[str, Any]] = (),
                   disruption_target: bool = True) -> dict[str, Any]:
    """The status fields an evicted pod is given (upstream evictPod's status function): phase Failed, reason
    Evicted, the message, and a DisruptionTarget condition (`disruption_target_condition`: True,
    TerminationByKubelet, the same message, observedGeneration = metadata.generation; its lastTransitionTime kept
    if `previous_conditions` already had it True). `conditions` holds only that condition: merge it into the
    pod's other conditions by type. Without `disruption_target` (upstream's local storage limit evictions pass no
    condition) only phase, reason and message."""
    if not disruption_target:
        return {"phase": "Failed", "reason": REASON, "message": message}
    condition = disruption_target_condition(message, generation=generation, now=now,
                                            previous_conditions=previous_conditions)
    return {"phase": "Failed", "reason": REASON, "message": message, "conditions": [condition]}


def pod_is_evicted(status: Mapping[str, Any]) -> bool:
    """upstream PodIsEvicted: phase Failed with reason Evicted."""
    return status.get("phase") == "Failed" and status.get("reason") == REASON


# ----------------------------------------------------------------------------------------------- admission


def admit(pod: spec.Pod, conditions: Sequence[str], *, qos_class: str | None = None) -> admission.Rejection | None:
    """upstream managerImpl.Admit: under no pressure, or for a critical pod, admit. Under memory pressure
    alone, admit all but BestEffort pods, and those that tolerate the memory-pressure NoSchedule taint. Any
    disk or PID pressure refuses every non-critical pod. Refused: reason Evicted, message ``The node had
    condition: [MemoryPressure]. `` (prefixed "Pod was rejected: " in the status, as every rejection)."""
    if not conditions or qos.is_critical_pod(pod):
        return None
    if list(conditions) == [th.MEMORY_PRESSURE]:
        if (qos_class or qos.qos_class(pod)) != qos.BEST_EFFORT:
            return None
        taint = admission.Taint(key=TAINT_MEMORY_PRESSURE, effect="NoSchedule")
        tolerations = [t for t in pod.spec.raw.get("tolerations") or () if isinstance(t, Mapping)]
        if any(admission.toleration_tolerates(t, taint) for t in tolerations):
            return None
    message = NODE_CONDITION_MESSAGE_FMT.format(gotext.go_string_slice(conditions))
    return admission.Rejection(reason=REASON, message=admission.REJECTED_PREFIX + message)
