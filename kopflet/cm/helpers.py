"""
Pod and QoS cgroup settings: what the upstream kubelet's container manager writes outside the containers.

Mirrors, at Kubernetes v1.37.1 (PodLevelResources beta and on, MemoryQoS beta and on, CPUCFSQuotaPeriod GA,
InPlacePodLevelResourcesVerticalScaling beta and on, DRANodeAllocatableResources alpha and off):

- `ResourceConfig` (pkg/kubelet/cm/types.go) and `ResourceConfigForPod` / `ApplyPodLevelMemoryHigh` /
  `HugePageLimits` (cm/helpers_linux.go), plus what `podContainerManagerImpl.EnsureExists`
  (cm/pod_container_manager_linux.go) adds: the pod pids limit and memory.high;
- the requests/limits sums of `k8s.io/component-helpers/resource` (`PodRequests`, `PodLimits`,
  `AggregateContainerRequests`, `IsPodLevelResourcesSet`) with spec resources only (no status resources, no DRA);
- the cgroup files libcontainer (github.com/opencontainers/cgroups v0.0.7, the version v1.37.1 pins) writes for
  such a config through the kubelet's `cgroupCommon.toResources` (cm/cgroup_manager_linux.go), on cgroup v1
  (`fs`) and v2 (`fs2`), with the cgroupfs driver; and the read-back the kubelet does for a resize;
- what a container's own cgroup gets under pod-level resources (kuberuntime_container_linux.go
  `getCPULimit` / `getMemoryLimit` / `generateLinuxContainerResources`) and its oom_score_adj
  (pkg/kubelet/qos/policy.go with pod-level memory requests);
- the QoS-tier cgroups (`kubepods`, `kubepods/burstable`, `kubepods/besteffort`) as
  `qosContainerManagerImpl.UpdateCgroups` (cm/qos_container_manager_linux.go) sets them, with the memory limits of
  qosReserved (`setMemoryReserve`, `retrySetMemoryReserve`) and its parsing (cm/container_manager.go
  `ParseQOSReserved`);
- `podHasExclusiveCPUs` / `containerHasExclusiveCPUs` (cm/container_manager.go), which decide, with
  DisableCPUQuotaWithExclusiveCPUs (locked on at 1.37), that a container the CPU manager gave CPUs of its own, its
  sandbox and its pod cgroup run without CFS quota.

Pure: no I/O. The pod given is the *allocated* pod: during an in-place resize the caller first rewrites the
spec with the allocated resources (`allocated_pod`), as upstream's allocation manager does
(`UpdatePodFromAllocation`) before calling `ResourceConfigForPod`.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from fractions import Fraction
from types import MappingProxyType
from typing import Any

from kopflet import gotext
from kopflet.api import qos, spec
from kopflet.lifecycle import admission

CPU = qos.CPU
MEMORY = qos.MEMORY

# The cgroup arithmetic of cm/helpers_linux.go (kuberuntime's container settings use it too)
MIN_SHARES = 2
MAX_SHARES = 262144
SHARES_PER_CPU = 1024
MILLI_CPU_TO_CPU = 1000
QUOTA_PERIOD = 100000  # 100ms in microseconds
MIN_QUOTA_PERIOD = 1000
HUGEPAGES_PREFIX = "hugepages-"


def milli_cpu_to_shares(milli_cpu: int) -> int:
    """cpu.shares for a milliCPU request (upstream `MilliCPUToShares`): * 1024 / 1000 within [2, 262144]."""
    if milli_cpu == 0:
        return MIN_SHARES
    return max(MIN_SHARES, min(MAX_SHARES, milli_cpu * SHARES_PER_CPU // MILLI_CPU_TO_CPU))


def milli_cpu_to_quota(milli_cpu: int, period: int = QUOTA_PERIOD) -> int:
    """CFS quota for a milliCPU limit (upstream `milliCPUToQuota`): 0 (unlimited) without a limit, else at
    least 1000µs."""
    if milli_cpu == 0:
        return 0
    return max(MIN_QUOTA_PERIOD, milli_cpu * period // MILLI_CPU_TO_CPU)


def hugepage_unit_size(resource_name: str) -> str | None:
    """The CRI page size of a ``hugepages-<size>`` resource (``hugepages-2Mi`` is ``2MB``), None when it is not one
    or the size is not a whole number of its largest unit (upstream `HugePageSizeFromResourceName` and
    `HugePageUnitSizeFromByteSize`)."""
    if not resource_name.startswith(HUGEPAGES_PREFIX):
        return None
    try:
        size = qos.value(resource_name.removeprefix(HUGEPAGES_PREFIX))
    except qos.QuantityError:
        return None
    units = ("B", "KB", "MB", "GB", "TB", "PB")
    index = 0
    while size % 1024 == 0 and index < len(units) - 1:
        size //= 1024
        index += 1
    if size > 1024 and index < len(units) - 1:
        return None
    return f"{size}{units[index]}"


# kubeletconfig.MemoryReservationPolicy
MEMORY_RESERVATION_NONE = "None"
MEMORY_RESERVATION_TIERED = "TieredReservation"

# cm/cgroup_manager_linux.go
CGROUP2_MEMORY_MIN = "memory.min"
CGROUP2_MEMORY_LOW = "memory.low"
CGROUP2_MEMORY_HIGH = "memory.high"
CGROUP2_MAX = "max"
CGROUP2_MAX_SWAP = "memory.swap.max"  # cm.Cgroup2MaxSwapFilename
CGROUP1_MEMSW_LIMIT = "memory.memsw.limit_in_bytes"
MAX_CPU_WEIGHT = 10000
DEFAULT_PAGE_SIZE = 4096
"""os.Getpagesize() on the usual x86-64/arm64 kernels; memory.high is rounded down to it."""

HUGEPAGES_UNBOUNDED = 1 << 62
"""What the QoS-tier cgroups get for every hugepage size (`setHugePagesUnbounded`)."""

CGROUP_V1_MEMORY_UNLIMITED = 9223372036854771712
"""What memory.limit_in_bytes reads on cgroup v1 when nothing was written (PAGE_COUNTER_MAX pages of 4 KiB)."""

_UINT64_MAX = 2**64 - 1


class SwapController(enum.Enum):
    """Whether a container's swap can be limited on this node, and how (upstream kuberuntime
    checkSwapControllerAvailability with isCgroup2UnifiedMode): found once at start."""

    NONE = "none"
    """No swap accounting (or unknown): nothing is set."""
    V1 = CGROUP1_MEMSW_LIMIT
    """cgroup v1 with the memory hierarchy's memory.memsw.limit_in_bytes: the memory+swap limit."""
    V2 = CGROUP2_MAX_SWAP
    """cgroup v2 with memory.swap.max in the agent's own cgroup (the root has none)."""


def unified_cgroup_path(proc_cgroup: str) -> str | None:
    """The cgroup v2 path of a /proc/<pid>/cgroup (its ``0::<path>`` line, as libcontainer's ParseCgroupFile gives
    it under the "" key); None when there is none."""
    for line in proc_cgroup.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, colon, path = rest.partition(":")
        if hierarchy == "0" and colon and not controllers:
            return path
    return None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ResourceConfig:
    """One cgroup's settings (upstream `cm.ResourceConfig`); None (or empty) means "not set": libcontainer then
    writes nothing and the cgroup keeps what it has (a new cgroup: the kernel default, unlimited)."""

    cpu_shares: int | None = None
    """cpu.shares on v1; cpu.weight (`cpu_shares_to_weight`) on v2."""
    cpu_quota: int | None = None
    """µs of CPU time per period; -1 is unlimited."""
    cpu_period: int | None = None
    """µs (cpuCFSQuotaPeriod, 100000 by default)."""
    memory: int | None = None
    """Limit in bytes."""
    hugepage_limits: Mapping[int, int] = dataclasses.field(default_factory=dict)
    """Page size in bytes -> limit in bytes. Sizes the node has but this omits get 0 when written."""
    pids_limit: int | None = None
    unified: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Raw cgroup v2 files (memory.min, memory.low, memory.high); ignored on v1."""


# ------------------------------------------------------------------------------------------ resource sums

Resources = dict[str, Fraction]


def _aggregate(pod: spec.Pod, pick: Callable[[spec.ContainerSpec], Mapping[str, Any]]) -> Resources:
    """Upstream `aggregateContainerResourcesByFn` (`admission.aggregate`)."""
    return admission.aggregate(pod, pick)


def is_pod_level_resource(name: str) -> bool:
    """Upstream `IsSupportedPodLevelResource`: cpu, memory and hugepages-* may be set on the pod."""
    return name in (CPU, MEMORY) or name.startswith(HUGEPAGES_PREFIX)


def _pod_level(pod: spec.Pod, kind: str) -> Mapping[str, Any]:
    resources = qos.pod_level_resources(pod) or {}
    values = resources.get(kind)
    return values if isinstance(values, Mapping) else {}


def pod_level_requests_set(pod: spec.Pod) -> bool:
    """Upstream `IsPodLevelRequestsSet`: ``spec.resources.requests`` names a supported resource."""
    return any(is_pod_level_resource(name) for name in _pod_level(pod, "requests"))


def pod_level_resources_set(pod: spec.Pod) -> bool:
    """Upstream `IsPodLevelResourcesSet`: ``spec.resources`` requests or limits name a supported resource (an
    empty ``resources: {}`` does not count)."""
    return pod_level_requests_set(pod) or any(is_pod_level_resource(name) for name in _pod_level(pod, "limits"))


def aggregate_container_requests(pod: spec.Pod) -> Resources:
    """Upstream `AggregateContainerRequests` from the spec: containers only, no pod-level values, no overhead."""
    return _aggregate(pod, lambda c: c.resources.requests)


def pod_requests(pod: spec.Pod) -> Resources:
    """Upstream `PodRequests` (pod-level requests replace the aggregate, overhead added), exact."""
    return admission.pod_requests(pod)


def pod_limits(pod: spec.Pod) -> Resources:
    """Upstream `PodLimits`: the containers' aggregate with pod-level limits (cpu, memory, hugepages-*) replacing
    it when pod-level resources are set, then ``spec.overhead`` added to each non-zero limit."""
    limits = _aggregate(pod, lambda c: c.resources.limits)
    if pod_level_resources_set(pod):
        for name, amount in qos.parse_resource_list(_pod_level(pod, "limits")).items():
            if is_pod_level_resource(name):
                limits[name] = amount
    overhead = pod.spec.raw.get("overhead")
    for name, amount in qos.parse_resource_list(overhead if isinstance(overhead, Mapping) else None).items():
        if limits.get(name, 0) != 0:
            limits[name] += amount
    return limits


def pod_qos_class(pod: spec.Pod, status_qos_class: str | None = None) -> str:
    """Upstream `GetPodQOS`: ``status.qosClass`` when known, else `ComputePodQOS` with
    PodLevelResourcesFixKubeletQOSClass (on at 1.37): the pod-level resources decide only when they are set
    (`pod_level_resources_set`), otherwise the containers do, even if ``spec.resources`` is present but empty."""
    if status_qos_class:
        return status_qos_class
    if pod_level_resources_set(pod):
        return qos.resource_qos(_pod_level(pod, "requests"), _pod_level(pod, "limits"))
    return qos.containers_qos_class(pod)


def hugepage_limits(resources: Mapping[str, Any]) -> dict[int, int]:
    """Upstream `HugePageLimits`: page size in bytes -> bytes, for every ``hugepages-<size>`` entry; two names
    of one size (``hugepages-2Mi``, ``hugepages-2097152``) add up. Names whose size does not parse are skipped
    (upstream would key them 0; the apiserver refuses them)."""
    limits: dict[int, int] = {}
    for name, amount in resources.items():
        if not name.startswith(HUGEPAGES_PREFIX):
            continue
        try:
            page_size = qos.value(name.removeprefix(HUGEPAGES_PREFIX))
        except qos.QuantityError:
            continue
        limits[page_size] = limits.get(page_size, 0) + qos.value(amount)
    return limits


def allocated_pod(pod: spec.Pod, containers: Mapping[str, spec.Resources],
                  pod_resources: spec.Resources | None = None) -> spec.Pod:
    """The pod with its allocated resources in the spec (upstream `UpdatePodFromAllocation`): each init or regular
    container named in `containers` gets those resources, and `pod_resources` (when given) replaces
    ``spec.resources``. Only resources change: container hashes and the rest of the raw spec stay."""
    def swap(container: spec.ContainerSpec) -> spec.ContainerSpec:
        if container.name not in containers:
            return container
        return dataclasses.replace(container, resources=containers[container.name])

    raw = pod.spec.raw
    if pod_resources is not None:
        raw = {**raw, "resources": {"requests": dict(pod_resources.requests), "limits": dict(pod_resources.limits)}}
    pod_spec = dataclasses.replace(pod.spec, containers=tuple(swap(c) for c in pod.spec.containers),
                                   init_containers=tuple(swap(c) for c in pod.spec.init_containers), raw=raw)
    return dataclasses.replace(pod, spec=pod_spec)


# ------------------------------------------------------------------------------------- exclusive CPUs

ExclusiveCPUs = Mapping[str, Collection[int]]
"""One pod's exclusive CPUs by container name, as the CPU manager holds them (upstream `GetExclusiveCPUs` asked for
each container): a container absent, or with none, runs on the shared pool; nothing under the none policy."""

NO_EXCLUSIVE_CPUS: ExclusiveCPUs = MappingProxyType({})
"""No container has CPUs of its own: the none policy, or no CPU manager."""


def container_has_exclusive_cpus(exclusive_cpus: ExclusiveCPUs, container: str) -> bool:
    """Upstream `containerHasExclusiveCPUs` (cm/container_manager.go): the CPU manager gave `container` CPUs of its
    own, so its CFS quota is not enforced (DisableCPUQuotaWithExclusiveCPUs, locked on at 1.37: a quota on pinned
    CPUs only throttles them). PodLevelResourceManagers is off at 1.37: no pod-level isolation to ask about."""
    return bool(exclusive_cpus.get(container))


def pod_has_exclusive_cpus(pod: spec.Pod, exclusive_cpus: ExclusiveCPUs) -> bool:
    """Upstream `podHasExclusiveCPUs`: any init or regular container of `pod` has exclusive CPUs (ephemeral ones are
    not asked; they never get any), so the pod cgroup and the sandbox run without CFS quota."""
    return any(container_has_exclusive_cpus(exclusive_cpus, c.name)
               for c in (*pod.spec.init_containers, *pod.spec.containers))


# --------------------------------------------------------------------------------------- the pod cgroup


def _zero(values: Mapping[str, Any], name: str) -> bool:
    return qos.parse_quantity(values.get(name, 0)) == 0


def pod_resource_config(pod: spec.Pod, *, cpu_cfs_quota: bool = True, cpu_cfs_quota_period: int = QUOTA_PERIOD,
                        enforce_memory_qos: bool = False,
                        memory_reservation_policy: str = MEMORY_RESERVATION_NONE,
                        memory_throttling_factor: float | None = None, page_size: int = DEFAULT_PAGE_SIZE,
                        pod_pids_limit: int | None = None, qos_class: str | None = None,
                        exclusive_cpus: ExclusiveCPUs = NO_EXCLUSIVE_CPUS) -> ResourceConfig:
    """The pod cgroup's settings (upstream `ResourceConfigForPod`, plus what `EnsureExists` adds).

    `pod` is the allocated pod (`allocated_pod`). Requests and limits are summed as upstream (sidecars and init
    containers, pod-level resources replacing the sums, overhead added). cpu shares always, from the requests
    (2 for BestEffort); Guaranteed pods get quota, period and memory limit; Burstable ones get quota and period
    only if every init and regular container has a cpu limit or the pod has a pod-level cpu limit, and the
    memory limit likewise. Quota is -1 (unlimited) without `cpu_cfs_quota`, and when a container has CPUs of its
    own in `exclusive_cpus` (the CPU manager's for this pod: `pod_has_exclusive_cpus`; upstream EnsureExists and
    doPodResizeAction pass enforceCPULimits=false then). `cpu_cfs_quota_period` is in µs.

    `enforce_memory_qos` is upstream's "MemoryQoS gate on (the default) and cgroup v2": with the TieredReservation
    `memory_reservation_policy` the pod's memory request goes to memory.min (Guaranteed) or memory.low, and with
    a `memory_throttling_factor` memory.high is set as `pod_memory_high`. `pod_pids_limit` (podPidsLimit) is set
    when positive. `qos_class` is the pod's ``status.qosClass`` if known (upstream prefers it).
    """
    requests = pod_requests(pod)
    limits = pod_limits(pod)
    containers = (*pod.spec.init_containers, *pod.spec.containers)
    cpu_limits_declared = all(not _zero(c.resources.limits, CPU) for c in containers)
    memory_limits_declared = all(not _zero(c.resources.limits, MEMORY) for c in containers)
    if pod_level_resources_set(pod):
        pod_level_limits = _pod_level(pod, "limits")
        cpu_limits_declared = cpu_limits_declared or not _zero(pod_level_limits, CPU)
        memory_limits_declared = memory_limits_declared or not _zero(pod_level_limits, MEMORY)

    cpu_shares = milli_cpu_to_shares(qos.milli_value(requests.get(CPU, 0)))
    cpu_quota = milli_cpu_to_quota(qos.milli_value(limits.get(CPU, 0)), cpu_cfs_quota_period)
    if not cpu_cfs_quota or pod_has_exclusive_cpus(pod, exclusive_cpus):  # upstream's enforceCPULimits false
        cpu_quota = -1
    memory = qos.value(limits.get(MEMORY, 0))

    klass = pod_qos_class(pod, qos_class)
    config: dict[str, Any] = {"hugepage_limits": hugepage_limits(requests)}
    if klass == qos.GUARANTEED:
        config.update(cpu_shares=cpu_shares, cpu_quota=cpu_quota, cpu_period=cpu_cfs_quota_period, memory=memory)
    elif klass == qos.BURSTABLE:
        config["cpu_shares"] = cpu_shares
        if cpu_limits_declared:
            config.update(cpu_quota=cpu_quota, cpu_period=cpu_cfs_quota_period)
        if memory_limits_declared:
            config["memory"] = memory
    else:
        config["cpu_shares"] = MIN_SHARES

    unified: dict[str, str] = {}
    if enforce_memory_qos and memory_reservation_policy == MEMORY_RESERVATION_TIERED:
        memory_request = qos.value(requests.get(MEMORY, 0))
        if memory_request > 0:
            unified[CGROUP2_MEMORY_MIN if klass == qos.GUARANTEED else CGROUP2_MEMORY_LOW] = str(memory_request)
    if enforce_memory_qos and memory_throttling_factor is not None:
        high = pod_memory_high(pod, memory_throttling_factor, page_size)
        if high is not None:
            unified[CGROUP2_MEMORY_HIGH] = str(high)
    if pod_pids_limit is not None and pod_pids_limit > 0:
        config["pids_limit"] = pod_pids_limit
    return ResourceConfig(**config, unified=unified)


def pod_memory_high(pod: spec.Pod, throttling_factor: float, page_size: int = DEFAULT_PAGE_SIZE) -> int | None:
    """The pod cgroup's memory.high (upstream `ApplyPodLevelMemoryHigh`), None when it is not set.

    Only with pod-level resources, and only if the pod has a memory limit (pod-level, or every container):
    ``request + (limit - request) * factor`` rounded down to a page, unless request == limit (Guaranteed-like)
    or the result is not above the request. The kernel applies it to everything below the pod cgroup.
    """
    if not pod_level_resources_set(pod):
        return None
    containers = (*pod.spec.init_containers, *pod.spec.containers)
    declared = all(not _zero(c.resources.limits, MEMORY) for c in containers)
    if not (declared or not _zero(_pod_level(pod, "limits"), MEMORY)):
        return None
    request = qos.value(pod_requests(pod).get(MEMORY, 0))
    limit = qos.value(pod_limits(pod).get(MEMORY, 0))
    if (request == limit and request != 0) or limit == 0:
        return None
    # float64 arithmetic as upstream: floor, then a truncating division by the page size.
    high = int(math.floor(float(request) + (float(limit) - float(request)) * throttling_factor) / float(page_size))
    high *= page_size
    return high if high > 0 and high > request else None


# --------------------------------------------------------------------------------- cpu unit conversions


def cpu_shares_to_weight(shares: int) -> int:
    """cpu.weight the kubelet writes on cgroup v2 for pod and QoS cgroups (`getCPUWeight`): the linear map of
    [2, 262144] onto [1, 10000]. (Container cgroups are converted by the OCI runtime instead:
    `runc_cpu_shares_to_weight`.)"""
    if shares < MIN_SHARES:
        raise ValueError(f"cpu shares below {MIN_SHARES}: {shares}")
    if shares >= MAX_SHARES:
        return MAX_CPU_WEIGHT
    return 1 + ((shares - MIN_SHARES) * 9999) // 262142


def cpu_weight_to_shares(weight: int) -> int:
    """The shares the kubelet reads back from cpu.weight (`cpuWeightToCPUShares`), lossy: 102 -> 4 -> 80."""
    if weight < 1:
        raise ValueError(f"cpu weight below 1: {weight}")
    return ((weight - 1) * 262142) // 9999 + MIN_SHARES


def cpu_shares_equal_after_v2_round_trip(allocated_shares: int, readback_shares: int) -> bool:
    """Upstream `CPUSharesEqualAfterV2RoundTrip`: whether read-back shares are the allocated ones seen through
    cpu.weight, so a resize is not reported as still in progress on cgroup v2."""
    return cpu_weight_to_shares(cpu_shares_to_weight(allocated_shares)) == readback_shares


def _go_log2(x: float) -> float:
    """Go's math.Log2: exact for powers of two, else log(frac)/ln2 + exp."""
    fraction, exponent = math.frexp(x)
    if fraction == 0.5:
        return float(exponent - 1)
    return math.log(fraction) * (1 / math.log(2)) + exponent


def runc_cpu_shares_to_weight(shares: int) -> int:
    """cpu.weight a CRI cpu_shares value becomes on cgroup v2 under an OCI runtime built on
    opencontainers/cgroups v0.0.7 (`ConvertCPUSharesToCgroupV2Value`): a quadratic in log2(shares) through
    (2, 1), (1024, 100) and (262144, 10000); 0 stays 0 (unset). Older runtimes (runc 1.1, Debian 12's) use
    the linear `cpu_shares_to_weight` instead."""
    if shares == 0:
        return 0
    if shares <= MIN_SHARES:
        return 1
    if shares >= MAX_SHARES:
        return MAX_CPU_WEIGHT
    log = _go_log2(float(shares))
    exponent = (log * log + 125 * log) / 612.0 - 7.0 / 34.0
    return math.ceil(math.pow(10, exponent))


def shares_to_milli_cpu(shares: int) -> int:
    """Upstream `SharesToMilliCPU` (pod status resources read from the cgroup): 0 below 2 shares."""
    if shares < MIN_SHARES:
        return 0
    return math.ceil((shares * MILLI_CPU_TO_CPU) / SHARES_PER_CPU)


def quota_to_milli_cpu(quota: int, period: int) -> int:
    """Upstream `QuotaToMilliCPU`: 0 for an unlimited (-1) quota."""
    if quota == -1:
        return 0
    milli = abs(quota) * MILLI_CPU_TO_CPU // abs(period)  # Go's int64 division truncates towards zero
    return milli if (quota < 0) == (period < 0) else -milli


# ------------------------------------------------------------------------------------- cgroup file values


def _pids_max(limit: int) -> str:
    """libcontainer's pids.max: the number, "1" for 0 (as systemd), "max" when negative."""
    return str(limit) if limit > 0 else "1" if limit == 0 else CGROUP2_MAX


def _hugetlb_entries(config: ResourceConfig, hugepage_sizes: Sequence[str]) -> list[tuple[str, int]]:
    """(size, limit) as upstream `maybeSetHugetlb`: the config's sizes, then 0 for each other size of the node."""
    entries: list[tuple[str, int]] = []
    for page_size, limit in sorted(config.hugepage_limits.items()):
        # hugepage_unit_size is HugePageUnitSizeFromByteSize over a resource name.
        size = hugepage_unit_size(f"{HUGEPAGES_PREFIX}{page_size}")
        if size is not None:
            entries.append((size, limit))
    named = {size for size, _ in entries}
    entries += [(size, 0) for size in hugepage_sizes if size not in named]
    return entries


def cgroup_v1_files(config: ResourceConfig, *,
                    hugepage_sizes: Sequence[str] | None = None) -> dict[str, dict[str, str]]:
    """{subsystem: {file: value}} that libcontainer's cgroup v1 (fs) manager writes for `config`, subsystems and
    files in its write order (memory, cpu, pids, hugetlb). Unset values write nothing.

    `hugepage_sizes` are the node's page sizes as libcontainer names them (``2MB``, ``1GB``:
    `container_config.hugepage_page_sizes`), None when the hugetlb controller is not mounted. The
    ``.rsvd.`` hugetlb files are skipped, with every later one, when the kernel has none. If writing
    cpu.cfs_period_us fails with EINVAL while a quota is written too, libcontainer writes the quota and then the
    period again (`cgroups.PodCgroups` does the same). `config.unified` is v2-only and ignored.
    """
    files: dict[str, dict[str, str]] = {}
    if config.memory is not None and config.memory != 0:
        memory: dict[str, str] = {}
        if config.memory == -1:
            memory["memory.memsw.limit_in_bytes"] = "-1"  # only where swap accounting exists
        memory["memory.limit_in_bytes"] = str(config.memory)
        files["memory"] = memory
    cpu: dict[str, str] = {}
    if config.cpu_shares:
        cpu["cpu.shares"] = str(config.cpu_shares)
    if config.cpu_period:
        cpu["cpu.cfs_period_us"] = str(config.cpu_period)
    if config.cpu_quota:
        cpu["cpu.cfs_quota_us"] = str(config.cpu_quota)
    if cpu:
        files["cpu"] = cpu
    if config.pids_limit is not None:
        files["pids"] = {"pids.max": _pids_max(config.pids_limit)}
    if hugepage_sizes is not None:
        hugetlb: dict[str, str] = {}
        for size, limit in _hugetlb_entries(config, hugepage_sizes):
            hugetlb[f"hugetlb.{size}.limit_in_bytes"] = str(limit)
            hugetlb[f"hugetlb.{size}.rsvd.limit_in_bytes"] = str(limit)
        if hugetlb:
            files["hugetlb"] = hugetlb
    return files


def cgroup_v2_files(config: ResourceConfig, *, hugepage_sizes: Sequence[str] | None = None) -> dict[str, str]:
    """{file: value} that libcontainer's cgroup v2 (fs2) manager writes for `config`, in its write order (pids,
    memory, cpu, hugetlb, then the unified files). Unset values write nothing.

    cpu.weight comes from the shares by the kubelet's own `cpu_shares_to_weight`; cpu.max is
    ``"<quota|max> <period>"`` whenever a quota or period is set (period 100000 if only a quota is);
    memory.max "max" for -1 (with memory.swap.max "max", skipped where swap is off). `hugepage_sizes` as for
    `cgroup_v1_files` (None: the hugetlb controller is not enabled).
    """
    files: dict[str, str] = {}
    if config.pids_limit is not None:
        files["pids.max"] = _pids_max(config.pids_limit)
    if config.memory is not None and config.memory != 0:
        if config.memory == -1:
            files["memory.swap.max"] = CGROUP2_MAX  # skipped where swap is off
        files["memory.max"] = CGROUP2_MAX if config.memory == -1 else str(config.memory)
    if config.cpu_shares:
        files["cpu.weight"] = str(cpu_shares_to_weight(config.cpu_shares))
    quota, period = config.cpu_quota or 0, config.cpu_period or 0
    if quota or period:
        files["cpu.max"] = f"{quota if quota > 0 else CGROUP2_MAX} {period or QUOTA_PERIOD}"
    if hugepage_sizes is not None:
        for size, limit in _hugetlb_entries(config, hugepage_sizes):
            files[f"hugetlb.{size}.max"] = str(limit)
            files[f"hugetlb.{size}.rsvd.max"] = str(limit)
    files.update(config.unified)
    return files


def _cgroup_uint(text: str) -> int:
    """fscommon.GetCgroupParamUint: "max" is MaxUint64, negative numbers 0."""
    text = text.strip()
    if text == CGROUP2_MAX:
        return _UINT64_MAX
    number = int(text)
    return max(number, 0)


def _as_int64(number: int) -> int:
    return number - 2**64 if number >= 2**63 else number


def cpu_config_from_v1(shares: str, quota: str, period: str) -> ResourceConfig:
    """The kubelet's read-back of a v1 cgroup's cpu.shares, cpu.cfs_quota_us, cpu.cfs_period_us
    (`cgroupV1impl.getCgroupCPUConfig`), as used for resize and pod status."""
    return ResourceConfig(cpu_shares=_cgroup_uint(shares), cpu_quota=int(quota.strip()),
                          cpu_period=_cgroup_uint(period))


def cpu_config_from_v2(cpu_max: str, cpu_weight: str) -> ResourceConfig:
    """The kubelet's read-back of a v2 cgroup's cpu.max and cpu.weight (`cgroupV2impl.getCgroupCPUConfig`):
    quota -1 for "max", shares through `cpu_weight_to_shares`."""
    parts = cpu_max.split()
    if len(parts) != 2:
        raise ValueError(f"cpu.max is not '<quota> <period>': {cpu_max!r}")
    quota = -1 if parts[0] == CGROUP2_MAX else int(parts[0])
    return ResourceConfig(cpu_shares=cpu_weight_to_shares(_cgroup_uint(cpu_weight)), cpu_quota=quota,
                          cpu_period=int(parts[1]))


def memory_limit_from_file(text: str) -> int:
    """The kubelet's read-back of memory.limit_in_bytes / memory.max (`readCgroupMemoryConfig`): "max" is -1;
    v1's unlimited reads as `CGROUP_V1_MEMORY_UNLIMITED`."""
    return _as_int64(_cgroup_uint(text))


# ----------------------------------------------------------------- containers under pod-level resources


@dataclasses.dataclass(frozen=True, kw_only=True)
class ContainerLimits:
    """What a container's own cgroup is computed from (upstream `generateLinuxContainerResources`)."""

    cpu_request_milli: int
    """The cpu shares come from this (`milli_cpu_to_shares`)."""
    cpu_limit_milli: int
    """The CFS quota comes from this; 0: no limit."""
    memory_limit: int
    """Bytes; 0: no limit."""


def container_effective_limits(pod: spec.Pod, container: spec.ContainerSpec) -> ContainerLimits:
    """The container's effective cpu request and cpu/memory limits (upstream `getCPULimit`, `getMemoryLimit`).

    With pod-level resources set, a container without its own cpu (memory) limit takes the pod-level cpu (memory)
    limit, and none if the pod has none either. A container without a cpu request (the key absent) takes its
    effective cpu limit as the request, so one with no resources at all under a pod-level cpu limit of 2 gets
    2048 shares, not 2; one with only requests gets shares from its request and the pod's limits.
    """
    requests, limits = container.resources.requests, container.resources.limits
    pod_level_limits = _pod_level(pod, "limits") if pod_level_resources_set(pod) else None
    cpu_limit = limits.get(CPU)
    if pod_level_limits is not None and _zero(limits, CPU):
        cpu_limit = pod_level_limits.get(CPU)
    memory_limit = limits.get(MEMORY)
    if pod_level_limits is not None and _zero(limits, MEMORY):
        memory_limit = pod_level_limits.get(MEMORY)
    cpu_request = requests[CPU] if CPU in requests else cpu_limit
    return ContainerLimits(cpu_request_milli=qos.milli_cpu(cpu_request), cpu_limit_milli=qos.milli_cpu(cpu_limit),
                           memory_limit=qos.byte_value(memory_limit))


def container_resource_config(pod: spec.Pod, container: spec.ContainerSpec, *, cpu_cfs_quota: bool = True,
                              cpu_cfs_quota_period: int = QUOTA_PERIOD) -> ResourceConfig:
    """The container cgroup's cpu and memory settings (upstream `calculateLinuxResources` over
    `container_effective_limits`): shares always; period, and the quota when there is a cpu limit, with
    `cpu_cfs_quota`; the memory limit when there is one. None is what the CRI leaves at 0."""
    effective = container_effective_limits(pod, container)
    quota = milli_cpu_to_quota(effective.cpu_limit_milli, cpu_cfs_quota_period) if cpu_cfs_quota else 0
    return ResourceConfig(cpu_shares=milli_cpu_to_shares(effective.cpu_request_milli), cpu_quota=quota or None,
                          cpu_period=cpu_cfs_quota_period if cpu_cfs_quota else None,
                          memory=effective.memory_limit or None)


def container_oom_score_adj(pod: spec.Pod, container: spec.ContainerSpec, memory_capacity: int, *,
                            qos_class: str | None = None) -> int:
    """The container's oom_score_adj (upstream `GetContainerOOMScoreAdjust` with PodLevelResources on).

    As `qos.oom_score_adj`, except that with pod-level memory *requests* the part of the pod's memory request not
    claimed by the containers' (aggregated) requests is split equally over all init and regular containers and
    added to each one's request, for the container itself and for the smallest regular container a sidecar is
    capped by. Guaranteed and node-critical -997, BestEffort 1000 (by the pod's class, pod-level included).
    """
    if memory_capacity <= 0:
        raise ValueError(f"memory_capacity must be positive, got {memory_capacity}")
    if qos.is_node_critical_pod(pod):
        return qos.GUARANTEED_OOM_SCORE_ADJ
    klass = pod_qos_class(pod, qos_class)
    if klass == qos.GUARANTEED:
        return qos.GUARANTEED_OOM_SCORE_ADJ
    if klass == qos.BEST_EFFORT:
        return qos.BEST_EFFORT_OOM_SCORE_ADJ
    remaining = 0
    if pod_level_requests_set(pod):
        pod_request = qos.value(qos.parse_resource_list(_pod_level(pod, "requests")).get(MEMORY, 0))
        if pod_request != 0:
            claimed = qos.value(aggregate_container_requests(pod).get(MEMORY, 0))
            count = len(pod.spec.containers) + len(pod.spec.init_containers)
            remaining = max(pod_request - claimed, 0) // count
    request = qos.byte_value(container.resources.requests.get(MEMORY))
    adjust = 1000 - (1000 * (request + remaining)) // memory_capacity
    is_sidecar = container.is_sidecar and any(c.name == container.name for c in pod.spec.init_containers)
    if is_sidecar and pod.spec.containers:
        smallest = min(qos.byte_value(c.resources.requests.get(MEMORY)) for c in pod.spec.containers)
        adjust = min(adjust, 1000 - (1000 * (smallest + remaining)) // memory_capacity)
    if adjust < 1000 + qos.GUARANTEED_OOM_SCORE_ADJ:
        return 1000 + qos.GUARANTEED_OOM_SCORE_ADJ
    if adjust == qos.BEST_EFFORT_OOM_SCORE_ADJ:
        return adjust - 1
    return adjust


# ----------------------------------------------------------------------------------- the QoS-tier cgroups


def hugepage_size_bytes(size: str) -> int:
    """Bytes of a libcontainer page size name (``2MB`` is 2 MiB, as docker's `units.RAMInBytes`)."""
    units = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40, "PB": 1 << 50}
    for unit in ("KB", "MB", "GB", "TB", "PB", "B"):
        if size.endswith(unit) and size[:-len(unit)].isdecimal():
            return int(size[:-len(unit)]) * units[unit]
    raise ValueError(f"not a hugepage size: {size!r}")


def parse_percentage(text: str) -> int:
    """Upstream `parsePercentage`: ``N%`` with N a decimal int64 from 0 to 100 (every trailing ``%`` trimmed, as
    strings.TrimRight does); ValueError with upstream's text otherwise."""
    if not text.endswith("%"):
        raise ValueError(f"percentage expected, got '{text}'")
    number = text.rstrip("%")
    if not re.fullmatch(r"[+-]?[0-9]+", number) or not -(2**63) <= int(number) < 2**63:  # strconv.ParseInt(s, 10, 0)
        raise ValueError(f"invalid number in percentage '{text}'")
    percentage = int(number)
    if not 0 <= percentage <= 100:
        raise ValueError("percentage must be between 0 and 100")
    return percentage


def parse_qos_reserved(values: Mapping[str, str]) -> dict[str, int]:
    """Upstream `ParseQOSReserved` (``--qos-reserved`` / ``qosReserved``): resource -> percent of the higher QoS
    classes' requests kept from the lower ones; only ``memory``. ValueError with upstream's text: ``cannot reserve
    "cpu" resource``, ``failed to parse percentage "50" for "memory" resource: percentage expected, got '50'``.
    Names are looked at in order (upstream walks a Go map, so which of two bad entries it names varies)."""
    reservations: dict[str, int] = {}
    for name in sorted(values):
        if name != MEMORY:
            raise ValueError(f"cannot reserve {gotext.go_quote(name)} resource")
        text = values[name]
        try:
            reservations[name] = parse_percentage(text)
        except ValueError as exc:
            raise ValueError(f"failed to parse percentage {gotext.go_quote(text)} for {gotext.go_quote(name)} "
                             f"resource: {exc}") from None
    return reservations


@dataclasses.dataclass(frozen=True)
class PodQOSRequests:
    """What the QoS tiers take of one pod: its class and, unless BestEffort, its cpu (milliCPU) and memory (bytes,
    rounded up) requests by `pod_requests`. Pure of the pod, so a caller may keep it for as long as it holds the
    same pod object (the container manager does: a burst recomputes the tiers for every new pod over all pods)."""

    qos_class: str
    milli_cpu: int = 0
    memory: int = 0


def pod_qos_requests(pod: spec.Pod) -> PodQOSRequests:
    """The pod's `PodQOSRequests`, from its spec (its status' qosClass is not read, as `pod_qos_class` without it)."""
    klass = pod_qos_class(pod)
    if klass == qos.BEST_EFFORT:
        return PodQOSRequests(klass)
    requests = pod_requests(pod)
    return PodQOSRequests(klass, qos.milli_value(requests.get(CPU, 0)), qos.value(requests.get(MEMORY, 0)))


def _qos_requests(pods: Iterable[spec.Pod | PodQOSRequests]) -> list[PodQOSRequests]:
    return [p if isinstance(p, PodQOSRequests) else pod_qos_requests(p) for p in pods]


def qos_memory_requests(pods: Iterable[spec.Pod | PodQOSRequests]) -> dict[str, int]:
    """Upstream `getQoSMemoryRequests`: the summed memory requests of the Guaranteed and of the Burstable `pods`,
    in bytes, each pod's by `pod_requests` (pod-level requests, init and sidecar containers, overhead: upstream's
    `resource.PodRequests`) rounded up to a byte; BestEffort pods count for nothing. A pod may come as its
    `PodQOSRequests`."""
    requests = {qos.GUARANTEED: 0, qos.BURSTABLE: 0}
    for summary in _qos_requests(pods):
        if summary.qos_class != qos.BEST_EFFORT:
            requests[summary.qos_class] += summary.memory
    return requests


@dataclasses.dataclass(frozen=True, kw_only=True)
class QOSMemoryLimits:
    """The QoS tiers' memory limits of qosReserved, in bytes (upstream setMemoryReserve)."""

    burstable: int
    best_effort: int


def qos_reserved_memory_limits(requests: Mapping[str, int], allocatable_memory: int,
                               percent: int) -> QOSMemoryLimits | None:
    """Upstream `setMemoryReserve`: the Burstable tier may use the node's allocatable memory (capacity less
    systemReserved and kubeReserved, never the eviction thresholds: `GetNodeAllocatableAbsolute`) less `percent` of
    the Guaranteed pods' memory requests; the BestEffort tier that, less `percent` of the Burstable pods' requests.
    (int64 arithmetic: the product, then a division truncated.) None when the allocatable memory is 0 (upstream:
    "might be in standalone mode, not setting QoS memory limits").

    Nothing is clamped, as upstream: a limit at or below zero is handed to the cgroup as it is (0 writes nothing,
    -1 is "unlimited", below that the kernel refuses it), and the retry (`qos_memory_retry_limits`) then holds the
    tier at its usage."""
    if allocatable_memory <= 0:
        return None
    burstable = allocatable_memory - requests.get(qos.GUARANTEED, 0) * percent // 100
    return QOSMemoryLimits(burstable=burstable,
                           best_effort=burstable - requests.get(qos.BURSTABLE, 0) * percent // 100)


def qos_memory_retry_limits(configs: Mapping[str, ResourceConfig],
                            usage: Sequence[tuple[str, int | None]]) -> dict[str, ResourceConfig]:
    """Upstream `retrySetMemoryReserve`, after a QoS update failed: each tier whose memory usage is above the limit
    just tried gets its usage as the limit (the kernel refuses a limit below what is in use on cgroup v1; held at
    its usage, the tier cannot grow), the others keep theirs. `usage` is (class, bytes) in the order they were
    read; None (unreadable) stops the adjustments there, as upstream returns at the first error."""
    adjusted = dict(configs)
    for klass, used in usage:
        if used is None:
            break
        limit = adjusted[klass].memory
        if limit is not None and used > limit:
            adjusted[klass] = dataclasses.replace(adjusted[klass], memory=used)
    return adjusted


def qos_cgroup_configs(pods: Iterable[spec.Pod | PodQOSRequests], *, hugepage_sizes: Sequence[str] = (),
                       enforce_memory_qos: bool = False, memory_reservation_policy: str = MEMORY_RESERVATION_NONE,
                       qos_reserved_memory_percent: int | None = None,
                       allocatable_memory: int = 0) -> dict[str, ResourceConfig]:
    """The QoS-tier cgroups' settings as upstream `UpdateCgroups` sets them for the active `pods` (every minute,
    and before each new pod cgroup is created): keyed by class, Guaranteed meaning the root (``kubepods``).

    besteffort: cpu shares 2; burstable: shares of the summed cpu requests (`pod_requests`, milliCPU per pod) of
    the Burstable pods (2 if none); kubepods: no cpu setting here. All three: every node hugepage size unbounded
    (2^62). With TieredReservation memory QoS (cgroup v2): kubepods memory.min = Guaranteed + Burstable memory
    requests and memory.low = Burstable ones, burstable memory.low = Burstable ones. With the QOSReserved gate
    (alpha, off) and a memory percentage (`qos_reserved_memory_percent`, None without either): burstable and
    besteffort memory limits as `qos_reserved_memory_limits` over `allocatable_memory`; kubepods none (its limit is
    node allocatable's). A pod may come as its `PodQOSRequests`.
    """
    summaries = _qos_requests(pods)
    burstable_milli_cpu = sum(p.milli_cpu for p in summaries if p.qos_class == qos.BURSTABLE)
    memory_requests = qos_memory_requests(summaries)
    unbounded = {hugepage_size_bytes(size): HUGEPAGES_UNBOUNDED for size in hugepage_sizes}
    configs = {
        qos.GUARANTEED: ResourceConfig(hugepage_limits=unbounded),
        qos.BURSTABLE: ResourceConfig(cpu_shares=milli_cpu_to_shares(burstable_milli_cpu), hugepage_limits=unbounded),
        qos.BEST_EFFORT: ResourceConfig(cpu_shares=MIN_SHARES, hugepage_limits=unbounded),
    }
    guaranteed, burstable = memory_requests[qos.GUARANTEED], memory_requests[qos.BURSTABLE]
    if enforce_memory_qos and memory_reservation_policy == MEMORY_RESERVATION_TIERED:
        configs[qos.GUARANTEED] = dataclasses.replace(configs[qos.GUARANTEED], unified={
            CGROUP2_MEMORY_MIN: str(guaranteed + burstable), CGROUP2_MEMORY_LOW: str(burstable)})
        configs[qos.BURSTABLE] = dataclasses.replace(configs[qos.BURSTABLE],
                                                     unified={CGROUP2_MEMORY_LOW: str(burstable)})
    if qos_reserved_memory_percent is not None:
        limits = qos_reserved_memory_limits(memory_requests, allocatable_memory, qos_reserved_memory_percent)
        if limits is not None:
            configs[qos.BURSTABLE] = dataclasses.replace(configs[qos.BURSTABLE], memory=limits.burstable)
            configs[qos.BEST_EFFORT] = dataclasses.replace(configs[qos.BEST_EFFORT], memory=limits.best_effort)
    return configs


CGROUP_ROOT = "/kubepods"
"""The node's pod cgroup root (upstream --cgroup-root defaults to the root; kubepods is its child)."""


def pod_cgroup_parent(pod: spec.Pod, root: str = CGROUP_ROOT) -> str:
    """The pod's own cgroup (upstream podContainerManager.GetPodContainerName): Guaranteed pods directly
    under the root, the others under their QoS class's cgroup."""
    qos_class = qos.qos_class(pod)
    tier = "" if qos_class == "Guaranteed" else f"/{qos_class.lower()}"
    return f"{root}{tier}/pod{pod.uid}"


__all__ = [
    "CGROUP1_MEMSW_LIMIT",
    "CGROUP2_MAX_SWAP",
    "CGROUP_ROOT",
    "HUGEPAGES_PREFIX",
    "MAX_SHARES",
    "MILLI_CPU_TO_CPU",
    "MIN_QUOTA_PERIOD",
    "MIN_SHARES",
    "NO_EXCLUSIVE_CPUS",
    "QUOTA_PERIOD",
    "SHARES_PER_CPU",
    "ContainerLimits",
    "ExclusiveCPUs",
    "PodQOSRequests",
    "QOSMemoryLimits",
    "ResourceConfig",
    "SwapController",
    "aggregate_container_requests",
    "allocated_pod",
    "cgroup_v1_files",
    "cgroup_v2_files",
    "container_effective_limits",
    "container_has_exclusive_cpus",
    "container_oom_score_adj",
    "container_resource_config",
    "cpu_config_from_v1",
    "cpu_config_from_v2",
    "cpu_shares_equal_after_v2_round_trip",
    "cpu_shares_to_weight",
    "cpu_weight_to_shares",
    "hugepage_limits",
    "hugepage_size_bytes",
    "hugepage_unit_size",
    "memory_limit_from_file",
    "milli_cpu_to_quota",
    "milli_cpu_to_shares",
    "parse_percentage",
    "parse_qos_reserved",
    "pod_cgroup_parent",
    "pod_has_exclusive_cpus",
    "pod_level_requests_set",
    "pod_level_resources_set",
    "pod_limits",
    "pod_memory_high",
    "pod_qos_class",
    "pod_qos_requests",
    "pod_requests",
    "pod_resource_config",
    "qos_cgroup_configs",
    "qos_memory_requests",
    "qos_memory_retry_limits",
    "qos_reserved_memory_limits",
    "quota_to_milli_cpu",
    "runc_cpu_shares_to_weight",
    "shares_to_milli_cpu",
    "unified_cgroup_path",
]
