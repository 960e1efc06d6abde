"""
The kubelet's resource usage endpoints, built from typed samples: ``/stats/summary`` and ``/metrics/resource``.

Pure: no I/O. `kopflet.stats.collector` reads /proc, statvfs and the CRI stats calls; this module turns what it
read into

- `summary()`: the Summary API object (k8s.io/kubelet/pkg/apis/stats/v1alpha1) as a JSON-ready dict, the
  way metrics-server and ``kubectl get --raw /api/v1/nodes/<node>/proxy/stats/summary`` read it;
- `resource_metrics()`: the Prometheus text of upstream pkg/kubelet/metrics/collectors/resource_metrics.go,
  with its names, help texts, stability levels and millisecond sample timestamps.

It follows upstream's CRI stats provider (pkg/kubelet/stats/cri_stats_provider.go) in its default mode:
a pod is reported when it has a running container with stats; a container's numbers come from
ListContainerStats; the pod's CPU, memory, network and process count come from its pod cgroup and its infra
container's network namespace, as upstream reads them through cAdvisor (`kopflet.stats.cgroup_stats`, in the shape
of the CRI's sandbox stats), else the containers' CPU and memory are summed as upstream does without cAdvisor. A
pod's volumes are what its volume stats calculator reports (volume_stat_calculator.go, MetricsDu: du of the
volume, statfs of its filesystem), and its ephemeral storage adds the local ephemeral ones to its layers and logs
(helper.go calcEphemeralStorage). The parsers of /proc, cgroup files and the mount table live here too, so the
arithmetic is testable; `kopflet.stats.collector` only reads the files.

Timestamps are nanoseconds since the epoch (ints), as in `cri_client.types`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, TypeVar

from cri_client import types as cri
from kopflet import metrics
from kopflet.api import times
from kopflet.container import labels as kubelabels
from kopflet.eviction.helpers import ContainerUsage, FsUsage, PodUsage
from kopflet.images import imageref
from kopflet.volumes import plugins

NANOS: Final = 1_000_000_000

# ---------------------------------------------------------------------------------------------- input


@dataclasses.dataclass(frozen=True, kw_only=True)
class FsInfo:
    """Size of one filesystem as statvfs reports it (cAdvisor's FsInfo): capacity, free space, inodes.

    `device` is the mount's source (/proc/self/mountinfo), cAdvisor's ``device`` label; "" when unknown.
    """

    timestamp: int = 0
    device: str = ""
    capacity_bytes: int = 0
    available_bytes: int = 0
    used_bytes: int = 0
    inodes: int | None = None
    inodes_free: int | None = None

    @property
    def inodes_used(self) -> int | None:
        if self.inodes is None or self.inodes_free is None:
            return None
        return max(0, self.inodes - self.inodes_free)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Rlimit:
    """The node's task limit (min of pid_max and threads-max) and how many tasks exist (RlimitStats)."""

    timestamp: int = 0
    max_pid: int | None = None
    running_processes: int | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class MachineInfo:
    """What cAdvisor's machine collector reports (its MachineInfo): read once, as the kubelet caches it.

    `num_cores` is the logical CPUs, `memory_capacity` MemTotal in bytes; the three ids label every
    ``machine_*`` series (/etc/machine-id, the DMI product UUID, the kernel's boot id), "" when unreadable.
    """

    timestamp: int = 0
    num_cores: int = 0
    memory_capacity: int = 0
    machine_id: str = ""
    system_uuid: str = ""
    boot_id: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class NodeSample:
    """What the node measured: CPU and memory of the whole machine, its filesystems, its task count.

    `image_fs` is the runtime's own report (CRI ImageFsInfo: used bytes and inodes of the image store);
    the size of each filesystem comes from `StatsSnapshot.filesystems`, keyed by mountpoint.
    """

    node_name: str
    boot_time: int = 0
    cpu: cri.CpuUsage | None = None
    memory: cri.MemoryUsage | None = None
    swap: cri.SwapUsage | None = None
    root_fs: FsInfo | None = None
    image_fs: cri.FilesystemUsage | None = None
    rlimit: Rlimit | None = None
    machine: MachineInfo | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ContainerSample:
    """One running container of a pod: its name, creation time (the summary's startTime) and CRI stats.

    `logs` is the usage of its log directory, when the collector measured it. `image` is the image as
    cAdvisor labels it (`image_name`); `memory_limit` the container cgroup's memory limit in bytes (0 for
    unlimited, None when not read).
    """

    name: str
    start_time: int = 0
    stats: cri.ContainerStats
    logs: cri.FilesystemUsage | None = None
    image: str = ""
    memory_limit: int | None = None


_GIT_REPO: Final = "gitRepo"
"""A volume type kopflet has no plugin for (deprecated upstream), named for IsLocalEphemeralVolume's sake."""


def is_local_ephemeral(kind: str, medium: str = plugins.MEDIUM_DEFAULT) -> bool:
    """upstream volume/util IsLocalEphemeralVolume: gitRepo, configMap and emptyDir of the default medium live on
    the node's disk and count toward the pod's ephemeral storage; a memory-medium emptyDir and the secret,
    downwardAPI and projected volumes (tmpfs) do not. `kind` is the volume's type as the pod spec names it."""
    if kind == plugins.KIND_EMPTY_DIR:
        return medium == plugins.MEDIUM_DEFAULT
    return kind in (plugins.KIND_CONFIG_MAP, _GIT_REPO)


@dataclasses.dataclass(frozen=True, kw_only=True)
class VolumeSample:
    """One mounted volume of a pod as upstream's MetricsDu measures it (pkg/volume/metrics_du.go): `usage` is the
    du of its directory (used bytes, inodes used, when), `fs` the statfs of that directory: the size of the
    filesystem holding it, a tmpfs volume's own mount or else the kubelet root directory's filesystem.

    `kind` is the volume's type as the pod spec names it (``emptyDir``, ``configMap``, ...) and `medium` an
    emptyDir's (``""`` on disk, ``Memory`` for tmpfs): whether it is part of the pod's ephemeral storage.
    """

    kind: str
    medium: str = plugins.MEDIUM_DEFAULT
    usage: cri.FilesystemUsage
    fs: FsInfo

    @property
    def local_ephemeral(self) -> bool:
        return is_local_ephemeral(self.kind, self.medium)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodSample:
    """One pod: its identity, its sandbox's creation time (the summary's startTime) and what was measured.

    `sandbox` is the pod-level stats, in the CRI's shape (None when the pod cgroup was not found);
    `containers` are its running containers, in name order. `volumes` are its measured volumes by name (see
    `VolumeSample`); `pod_logs` (the files directly in its log directory) and `etc_hosts` are the host's du of
    them, when the collector measured them. `cgroup` is the pod cgroup's name as cAdvisor names it
    (``/kubepods/burstable/pod<uid>``, "" when the collector did not find it); `memory_limit` its memory
    limit in bytes (0 for unlimited, None when not read).
    """

    name: str
    namespace: str
    uid: str
    start_time: int = 0
    sandbox_id: str = ""
    sandbox: cri.PodSandboxStats | None = None
    containers: tuple[ContainerSample, ...] = ()
    volumes: Mapping[str, VolumeSample] = dataclasses.field(default_factory=dict)
    pod_logs: cri.FilesystemUsage | None = None
    etc_hosts: cri.FilesystemUsage | None = None
    cgroup: str = ""
    memory_limit: int | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class StatsSnapshot:
    """One collection: the node, its pods, the filesystems by mountpoint, and when it was taken.

    `error` is set when the pods could not be listed or measured (the runtime failed): the summary then
    has no pods and /metrics/resource reports only ``resource_scrape_error 1``, as upstream does.
    """

    timestamp: int
    node: NodeSample
    pods: tuple[PodSample, ...] = ()
    filesystems: Mapping[str, FsInfo] = dataclasses.field(default_factory=dict)
    error: str = ""


# -------------------------------------------------------------------------------------- node parsers


def cpu_core_nanoseconds(proc_stat: str, clock_ticks: int = 100) -> int:
    """Cumulative busy CPU time of the whole machine from /proc/stat's ``cpu`` line, in core-nanoseconds.

    Busy is user + nice + system + irq + softirq + steal (guest time is already inside user and nice);
    idle and iowait are not. cAdvisor reads the root cgroup's CPU accounting instead, which counts the
    same task time; the two agree to within interrupt accounting.
    """
    for line in proc_stat.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            ticks = [int(x) for x in fields[1:]] + [0] * 8
            user, nice, system, _idle, _iowait, irq, softirq, steal = ticks[:8]
            return (user + nice + system + irq + softirq + steal) * NANOS // clock_ticks
    raise ValueError("no aggregate cpu line in /proc/stat")


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo as bytes by field name ("MemTotal", "Inactive(file)", ...)."""
    result: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        parts = rest.split()
        if not sep or not parts or not parts[0].isdigit():
            continue
        result[key.strip()] = int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    return result


def parse_flat_keyed(text: str) -> dict[str, int]:
    """A cgroup "flat keyed" file (memory.stat) or /proc/vmstat: ``name value`` per line."""
    result: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            result[parts[0]] = int(parts[1])
    return result


def node_memory(
    meminfo: Mapping[str, int],
    *,
    timestamp: int,
    cgroup_stat: Mapping[str, int] | None = None,
    cgroup_usage: int | None = None,
    vmstat: Mapping[str, int] | None = None,
) -> cri.MemoryUsage | None:
    """The node's memory as upstream reports it: cAdvisor's root cgroup numbers, capacity from MemTotal.

    Working set is usage minus inactive file pages (cAdvisor), available is MemTotal minus working set.
    Usage comes from the root cgroup: cgroup v1 ``memory.usage_in_bytes`` (`cgroup_usage`, with the
    ``total_*`` counters of its memory.stat), cgroup v2 ``anon + file`` of /sys/fs/cgroup/memory.stat (as
    runc emulates the root's missing memory.current). Without either, /proc/meminfo stands in with the
    same quantities system-wide: usage = AnonPages + Buffers + Cached + SwapCached (the kernel's
    NR_ANON_MAPPED + NR_FILE_PAGES), inactive file = Inactive(file), rss = AnonPages, page faults from
    /proc/vmstat. (MemTotal - MemAvailable is not used: it leaves out active page cache, which upstream's
    working set includes, and would read far lower than a real kubelet on the same node.)
    """
    total = meminfo.get("MemTotal")
    if total is None:
        return None
    stat = cgroup_stat or {}
    if cgroup_stat is not None and cgroup_usage is not None:  # cgroup v1 root
        usage, inactive = cgroup_usage, stat.get("total_inactive_file", 0)
        rss, faults, major = stat.get("total_rss"), stat.get("pgfault"), stat.get("pgmajfault")
    elif cgroup_stat is not None and "anon" in stat:  # cgroup v2 root
        usage, inactive = stat.get("anon", 0) + stat.get("file", 0), stat.get("inactive_file", 0)
        rss, faults, major = stat.get("anon"), stat.get("pgfault"), stat.get("pgmajfault")
    else:
        usage = sum(meminfo.get(k, 0) for k in ("AnonPages", "Buffers", "Cached", "SwapCached"))
        inactive = meminfo.get("Inactive(file)", 0)
        rss = meminfo.get("AnonPages")
        faults = (vmstat or {}).get("pgfault")
        major = (vmstat or {}).get("pgmajfault")
    working_set = max(0, usage - inactive)
    return cri.MemoryUsage(
        timestamp=timestamp,
        working_set_bytes=working_set,
        available_bytes=max(0, total - working_set),
        usage_bytes=usage,
        rss_bytes=rss,
        page_faults=faults,
        major_page_faults=major,
    )


def node_swap(meminfo: Mapping[str, int], *, timestamp: int) -> cri.SwapUsage | None:
    """Swap in use and still free on the node (cAdvisor: the root's swap, limited by the machine's swap)."""
    if "SwapTotal" not in meminfo or "SwapFree" not in meminfo:
        return None
    free = meminfo["SwapFree"]
    return cri.SwapUsage(
        timestamp=timestamp, swap_usage_bytes=max(0, meminfo["SwapTotal"] - free), swap_available_bytes=free
    )


def node_rlimit(
    *, timestamp: int, pid_max: str | None = None, threads_max: str | None = None, loadavg: str | None = None
) -> Rlimit:
    """Upstream pidlimit.Stats: the smaller of kernel.pid_max and threads-max; tasks from /proc/loadavg."""
    limits = [int(v) for v in (pid_max, threads_max) if v is not None and v.strip().isdigit()]
    running = None
    fields = (loadavg or "").split()
    if len(fields) >= 4 and "/" in fields[3]:
        total = fields[3].partition("/")[2]
        running = int(total) if total.isdigit() else None
    return Rlimit(timestamp=timestamp, max_pid=min(limits) if limits else None, running_processes=running)


_MOUNTINFO_ESCAPE: Final = re.compile(r"\\([0-7]{3})")


def _mounts(mountinfo: str) -> Iterator[tuple[str, str, str]]:
    """(mount point, filesystem type, source) of each well-formed /proc/self/mountinfo line, in order.

    Fields: id, parent, major:minor, root, mount point, options, optional fields, "-", type, source, ...; the
    kernel writes a space, tab, newline or backslash in a path as an octal escape (``\\040``).
    """
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) < 5 or "-" not in fields[6:]:
            continue
        after = fields[fields.index("-", 6) + 1:]
        if len(after) >= 2:
            yield _MOUNTINFO_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), fields[4]), after[0], after[1]


def mount_source(mountinfo: str, path: str) -> str:
    """The source (device) of the mount holding `path`, from /proc/self/mountinfo; "" when none matches.

    The longest mount point that contains `path` wins, the later of two equal ones (an overmount) too.
    """
    best, source = -1, ""
    for mountpoint, _, device in _mounts(mountinfo):
        inside = path == mountpoint or mountpoint == "/" or path.startswith(mountpoint.rstrip("/") + "/")
        if inside and len(mountpoint) >= best:
            best, source = len(mountpoint), device
    return source


def mount_fstype(mountinfo: str, path: str) -> str:
    """The filesystem type of the mount whose mount point is `path` itself (the last one: an overmount hides
    the others), "" when `path` is not a mount point. `path` must be resolved (no symlinks), as the kernel
    lists mount points. A memory-medium emptyDir is a tmpfs mounted on its own directory."""
    fstype = ""
    for mountpoint, kind, _ in _mounts(mountinfo):
        if mountpoint == path:
            fstype = kind
    return fstype


def count_processors(cpuinfo: str) -> int:
    """Logical CPUs in /proc/cpuinfo (its ``processor`` lines): cAdvisor's NumCores, machine_cpu_cores."""
    return sum(1 for line in cpuinfo.splitlines() if line.partition(":")[0].strip() == "processor")


def memory_limit(text: str | None) -> int | None:
    """A cgroup's memory limit as cAdvisor's spec reports it (container_spec_memory_limit_bytes): bytes, and 0
    for unlimited (v2 ``max``, or v1's huge page-counter maximum: cAdvisor zeroes anything above 2^62)."""
    value = (text or "").strip()
    if value == "max":
        return 0
    if not value.isdigit():
        return None
    return 0 if int(value) > 1 << 62 else int(value)


def image_name(container: cri.Container) -> str:
    """The image as cAdvisor labels a containerd container: the name containerd keeps for it, the pulled
    reference fully qualified (``nginx`` is ``docker.io/library/nginx:latest``). The pod spec's image
    (user_specified_image) normalized the same way, else what the runtime lists (the image ref)."""
    if container.user_specified_image:
        try:
            return str(imageref.parse_normalized_named(imageref.apply_default_tag(container.user_specified_image)))
        except ValueError:
            pass
    return container.image


def usage_nano_cores(previous: cri.CpuUsage | None, current: cri.CpuUsage) -> int | None:
    """The CPU rate between two cumulative samples, in nanocores (upstream's cpuUsageCache arithmetic).

    None without a usable earlier sample (none, counter reset, or no time passed).
    """
    if previous is None or previous.usage_core_nano_seconds is None or current.usage_core_nano_seconds is None:
        return None
    used = current.usage_core_nano_seconds - previous.usage_core_nano_seconds
    elapsed = current.timestamp - previous.timestamp
    if used < 0 or elapsed <= 0:
        return None
    return int(float(used) / float(elapsed) * NANOS)


def with_nano_cores(cpu: cri.CpuUsage | None, previous: cri.CpuUsage | None) -> cri.CpuUsage | None:
    """`cpu` with usage_nano_cores filled from `previous` when the runtime left it unset."""
    if cpu is None or cpu.usage_nano_cores is not None:
        return cpu
    return dataclasses.replace(cpu, usage_nano_cores=usage_nano_cores(previous, cpu))


# ------------------------------------------------------------------------------------- pod selection


def _pod_ref(sandbox: cri.PodSandbox) -> tuple[str, str, str]:
    """(namespace, name, uid) of a sandbox: its metadata, else kubelet's identity labels."""
    identity = kubelabels.pod_identity(sandbox.labels)
    md = sandbox.metadata
    return (
        (md.namespace if md and md.namespace else identity.namespace),
        (md.name if md and md.name else identity.name),
        (md.uid if md and md.uid else identity.uid),
    )


def _current_sandboxes(sandboxes: Iterable[cri.PodSandbox]) -> list[cri.PodSandbox]:
    """One sandbox per pod (namespace/name): the newest ready one, else the newest (upstream removeTerminatedPods).

    Upstream keeps every ready sandbox; keeping one avoids two series with the same pod labels.
    """
    by_pod: dict[tuple[str, str], list[cri.PodSandbox]] = {}
    for sandbox in sorted(sandboxes, key=lambda s: s.created_at):
        namespace, name, _ = _pod_ref(sandbox)
        by_pod.setdefault((namespace, name), []).append(sandbox)
    chosen = []
    for group in by_pod.values():
        ready = [s for s in group if s.state == cri.SandboxState.READY]
        chosen.append((ready or group)[-1])
    return chosen


def pod_samples(
    sandboxes: Iterable[cri.PodSandbox],
    containers: Iterable[cri.Container],
    container_stats: Iterable[cri.ContainerStats],
    sandbox_stats: Mapping[str, cri.PodSandboxStats] | None = None,
    logs: Mapping[str, cri.FilesystemUsage] | None = None,
) -> tuple[PodSample, ...]:
    """Group the runtime's container stats into pods, as upstream's CRI stats provider does.

    Only running containers count, and a pod appears once one of them has stats. A container belongs to
    the sandbox it runs in (its pod_sandbox_id); its name is its CRI metadata name, else the
    io.kubernetes.container.name label. `sandbox_stats` (by sandbox id) adds the pod-level numbers;
    `logs` (by container id) the log usage. Pods come out sorted by namespace and name.
    """
    current = {s.id: s for s in _current_sandboxes(sandboxes)}
    running = {c.id: c for c in containers if c.state == cri.ContainerState.RUNNING}
    by_sandbox: dict[str, list[ContainerSample]] = {}
    for stats in container_stats:
        container = running.get(stats.id)
        if container is None or container.pod_sandbox_id not in current:
            continue
        name = (
            (stats.metadata.name if stats.metadata else "")
            or (container.metadata.name if container.metadata else "")
            or kubelabels.container_name(stats.labels or container.labels)
        )
        sample = ContainerSample(
            name=name,
            start_time=container.created_at,
            stats=stats,
            logs=(logs or {}).get(stats.id),
            image=image_name(container),
        )
        by_sandbox.setdefault(container.pod_sandbox_id, []).append(sample)
    pods = []
    for sandbox_id, samples in by_sandbox.items():
        sandbox = current[sandbox_id]
        namespace, name, uid = _pod_ref(sandbox)
        pods.append(
            PodSample(
                name=name,
                namespace=namespace,
                uid=uid,
                start_time=sandbox.created_at,
                sandbox_id=sandbox_id,
                sandbox=(sandbox_stats or {}).get(sandbox_id),
                containers=tuple(sorted(samples, key=lambda c: c.name)),
            )
        )
    return tuple(sorted(pods, key=lambda p: (p.namespace, p.name, p.uid)))


# ------------------------------------------------------------------------------------ summary (JSON)


def rfc3339(ns: int) -> str | None:
    """A metav1.Time as JSON: RFC 3339 in UTC, whole seconds; None (null) for "never"."""
    return times.timestamp(ns) if ns > 0 else None


def _put(obj: dict[str, Any], key: str, value: int | None) -> None:
    """Pointer fields with omitempty: absent when unknown, present (zero included) when known."""
    if value is not None:
        obj[key] = value


def _sum(values: Iterable[int | None]) -> int | None:
    """Upstream addUsage: unknown plus unknown is unknown, unknown plus a number is that number."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


# The runtime's numbers by their JSON names, in the order of upstream's structs (which the JSON keeps).
_CPU_FIELDS = (("usageNanoCores", "usage_nano_cores"), ("usageCoreNanoSeconds", "usage_core_nano_seconds"))
_MEMORY_FIELDS = (
    ("availableBytes", "available_bytes"),
    ("usageBytes", "usage_bytes"),
    ("workingSetBytes", "working_set_bytes"),
    ("rssBytes", "rss_bytes"),
    ("pageFaults", "page_faults"),
    ("majorPageFaults", "major_page_faults"),
)
_SWAP_FIELDS = (("swapAvailableBytes", "swap_available_bytes"), ("swapUsageBytes", "swap_usage_bytes"))
_RLIMIT_FIELDS = (("maxpid", "max_pid"), ("curproc", "running_processes"))
_INTERFACE_FIELDS = (
    ("rxBytes", "rx_bytes"), ("rxErrors", "rx_errors"), ("txBytes", "tx_bytes"), ("txErrors", "tx_errors"),
)


def _with(obj: dict[str, Any], source: object, fields: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """`obj` plus each known number of `source` under its JSON name."""
    for key, attr in fields:
        _put(obj, key, getattr(source, attr))
    return obj


def _timed(usage: cri.CpuUsage | cri.MemoryUsage | cri.SwapUsage | Rlimit, fallback_time: int,
           fields: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """CPUStats, MemoryStats, SwapStats, RlimitStats: the time (`fallback_time` when the runtime gave none), then the
    known numbers."""
    return _with({"time": rfc3339(usage.timestamp or fallback_time)}, usage, fields)


def _fs(
    time: int,
    size: FsInfo | None,
    *,
    used_bytes: int | None = None,
    inodes_used: int | None = None,
) -> dict[str, Any]:
    """FsStats: the filesystem's size (if known) with the usage of whoever is reported on it."""
    obj: dict[str, Any] = {"time": rfc3339(time)}
    if size is not None:
        obj["availableBytes"] = size.available_bytes
        obj["capacityBytes"] = size.capacity_bytes
    _put(obj, "usedBytes", used_bytes)
    if size is not None:
        _put(obj, "inodesFree", size.inodes_free)
        _put(obj, "inodes", size.inodes)
    _put(obj, "inodesUsed", inodes_used)
    return obj


def _interface(usage: cri.NetworkInterfaceUsage) -> dict[str, Any]:
    return _with({"name": usage.name}, usage, _INTERFACE_FIELDS)


def _network(network: cri.NetworkUsage, fallback_time: int) -> dict[str, Any]:
    """NetworkStats: the default interface's fields inline (an embedded struct in Go), all in `interfaces`."""
    # containerd 1.6 leaves the network timestamp at 0: the sandbox's other numbers are as fresh.
    obj: dict[str, Any] = {"time": rfc3339(network.timestamp or fallback_time)}
    obj.update(_interface(network.default_interface or cri.NetworkInterfaceUsage()))
    if network.interfaces:
        obj["interfaces"] = [_interface(i) for i in network.interfaces]
    return obj


def _container_cpu(sample: ContainerSample, now: int) -> cri.CpuUsage:
    """The container's CPU, or zeros stamped now when the runtime reports none (upstream makeContainerStats)."""
    return sample.stats.cpu or cri.CpuUsage(timestamp=now, usage_core_nano_seconds=0, usage_nano_cores=0)


def _container_memory(sample: ContainerSample, now: int, *, zero_all: bool) -> cri.MemoryUsage:
    if sample.stats.memory is not None:
        return sample.stats.memory
    # /stats/summary zeroes three fields, /metrics/resource all of them (upstream's two code paths).
    faults = 0 if zero_all else None
    return cri.MemoryUsage(
        timestamp=now,
        working_set_bytes=0,
        usage_bytes=0,
        rss_bytes=0,
        available_bytes=faults,
        page_faults=faults,
        major_page_faults=faults,
    )


def _container_swap(sample: ContainerSample, now: int) -> cri.SwapUsage:
    return sample.stats.swap or cri.SwapUsage(timestamp=now, swap_usage_bytes=0, swap_available_bytes=0)


def _pod_cpu(pod: PodSample, now: int) -> cri.CpuUsage | None:
    """The pod cgroup's CPU (sandbox stats), else the containers' sum."""
    linux = pod.sandbox.linux if pod.sandbox else None
    if linux is not None and linux.cpu is not None:
        return linux.cpu
    return _summed(cri.CpuUsage, [_container_cpu(c, now) for c in pod.containers], _CPU_FIELDS)


def _pod_memory(pod: PodSample, now: int) -> cri.MemoryUsage | None:
    linux = pod.sandbox.linux if pod.sandbox else None
    if linux is not None and linux.memory is not None:
        return linux.memory
    return _summed(cri.MemoryUsage, [_container_memory(c, now, zero_all=False) for c in pod.containers], _MEMORY_FIELDS)


def _pod_swap(pod: PodSample, now: int) -> cri.SwapUsage | None:
    return _summed(cri.SwapUsage, [_container_swap(c, now) for c in pod.containers], _SWAP_FIELDS)


def pod_usage(pod: PodSample, now: int) -> tuple[cri.CpuUsage | None, cri.MemoryUsage | None, cri.SwapUsage | None]:
    """The pod's CPU, memory and swap as /stats/summary reports them (sandbox stats, else the containers' sums),
    for the other endpoints to agree with it."""
    return _pod_cpu(pod, now), _pod_memory(pod, now), _pod_swap(pod, now)


_U = TypeVar("_U", cri.CpuUsage, cri.MemoryUsage, cri.SwapUsage)


def _summed(cls: type[_U], usages: Sequence[_U], fields: Iterable[tuple[str, str]]) -> _U | None:
    """The containers' numbers summed (unknown counts as 0), stamped with the last one's time; None without any."""
    if not usages:
        return None
    sums = {attr: sum(getattr(u, attr) or 0 for u in usages) for _, attr in fields}
    return cls(timestamp=usages[-1].timestamp, **sums)


def _container_summary(sample: ContainerSample, snapshot: StatsSnapshot) -> dict[str, Any]:
    now = snapshot.timestamp
    obj: dict[str, Any] = {"name": sample.name, "startTime": rfc3339(sample.start_time)}
    obj["cpu"] = _timed(_container_cpu(sample, now), now, _CPU_FIELDS)
    obj["memory"] = _timed(_container_memory(sample, now, zero_all=False), now, _MEMORY_FIELDS)
    layer = sample.stats.writable_layer
    if layer is not None:
        obj["rootfs"] = _fs(
            layer.timestamp or now,
            snapshot.filesystems.get(layer.mountpoint),
            used_bytes=layer.used_bytes,
            inodes_used=layer.inodes_used,
        )
    else:
        obj["rootfs"] = {"time": None}  # upstream always has a (then empty) rootfs
    if sample.logs is not None:
        root = snapshot.node.root_fs
        obj["logs"] = _fs(
            sample.logs.timestamp or now, root, used_bytes=sample.logs.used_bytes, inodes_used=sample.logs.inodes_used
        )
    obj["swap"] = _timed(_container_swap(sample, now), now, _SWAP_FIELDS)
    return obj


def _ephemeral_storage(pod: PodSample, snapshot: StatsSnapshot) -> dict[str, Any] | None:
    """Upstream calcEphemeralStorage (CRI stats provider): the root filesystem's size with what the pod keeps on
    it, its containers' writable layers and logs, its local ephemeral volumes (disk emptyDir, configMap), the
    files of its log directory and its etc-hosts; stamped with the newest of their times."""
    root = snapshot.node.root_fs
    if root is None:
        return None
    # Upstream addContainerUsage counts a container's logs with its writable layer, only when it has one.
    parts = [u for c in pod.containers if c.stats.writable_layer is not None
             for u in (c.stats.writable_layer, c.logs) if u is not None]
    parts += [v.usage for _, v in sorted(pod.volumes.items()) if v.local_ephemeral]
    parts += [u for u in (pod.pod_logs, pod.etc_hosts) if u is not None]
    return _fs(
        max([root.timestamp] + [u.timestamp for u in parts]) or snapshot.timestamp,
        root,
        used_bytes=_sum(u.used_bytes for u in parts),
        inodes_used=_sum(u.inodes_used for u in parts),
    )


def _volume(name: str, volume: VolumeSample, now: int) -> dict[str, Any]:
    """VolumeStats as upstream's parsePodVolumeStats fills it: every number present (0 where MetricsDu had none),
    the FsStats fields inline (an embedded struct), then the name; no pvcRef (kopflet mounts no claims)."""
    usage, size = volume.usage, volume.fs
    return {
        "time": rfc3339(usage.timestamp or now),
        "availableBytes": size.available_bytes,
        "capacityBytes": size.capacity_bytes,
        "usedBytes": usage.used_bytes or 0,
        "inodesFree": size.inodes_free or 0,
        "inodes": size.inodes or 0,
        "inodesUsed": usage.inodes_used or 0,
        "name": name,
    }


def _volumes(pod: PodSample, now: int) -> list[dict[str, Any]]:
    """PodStats.VolumeStats as upstream's makePodStorageStats lists them: the calculator's local ephemeral volumes,
    then the others (its "persistent" list: tmpfs volumes too); by name within each (upstream: map order)."""
    ordered = sorted(pod.volumes.items(), key=lambda item: (not item[1].local_ephemeral, item[0]))
    return [_volume(name, volume, now) for name, volume in ordered]


def _pod_summary(pod: PodSample, snapshot: StatsSnapshot) -> dict[str, Any]:
    now = snapshot.timestamp
    obj: dict[str, Any] = {
        "podRef": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
        "startTime": rfc3339(pod.start_time),
        "containers": [_container_summary(c, snapshot) for c in pod.containers],
    }
    cpu = _pod_cpu(pod, now)
    if cpu is not None:
        obj["cpu"] = _timed(cpu, now, _CPU_FIELDS)
    memory = _pod_memory(pod, now)
    if memory is not None:
        obj["memory"] = _timed(memory, now, _MEMORY_FIELDS)
    linux = pod.sandbox.linux if pod.sandbox else None
    if linux is not None and linux.network is not None:
        obj["network"] = _network(linux.network, linux.cpu.timestamp if linux.cpu and linux.cpu.timestamp else now)
    if pod.volumes:  # omitempty
        obj["volume"] = _volumes(pod, now)
    ephemeral = _ephemeral_storage(pod, snapshot)
    if ephemeral is not None:
        obj["ephemeral-storage"] = ephemeral
    if linux is not None and linux.process is not None and linux.process.process_count is not None:
        obj["process_stats"] = {"process_count": linux.process.process_count}
    swap = _pod_swap(pod, now)
    if swap is not None:
        obj["swap"] = _timed(swap, now, _SWAP_FIELDS)
    return obj


def _node_summary(snapshot: StatsSnapshot) -> dict[str, Any]:
    node, now = snapshot.node, snapshot.timestamp
    obj: dict[str, Any] = {"nodeName": node.node_name, "startTime": rfc3339(node.boot_time)}
    if node.cpu is not None:
        obj["cpu"] = _timed(node.cpu, now, _CPU_FIELDS)
    if node.memory is not None:
        obj["memory"] = _timed(node.memory, now, _MEMORY_FIELDS)
    if node.root_fs is not None:
        root = node.root_fs
        obj["fs"] = _fs(root.timestamp or now, root, used_bytes=root.used_bytes, inodes_used=root.inodes_used)
    if node.image_fs is not None:
        image = node.image_fs
        image_fs = _fs(
            image.timestamp or now,
            snapshot.filesystems.get(image.mountpoint),
            used_bytes=image.used_bytes,
            inodes_used=image.inodes_used,
        )
        # Upstream's CRI provider reports the image filesystem as the container filesystem too.
        obj["runtime"] = {"imageFs": image_fs, "containerFs": dict(image_fs)}
    if node.rlimit is not None:
        obj["rlimit"] = _timed(node.rlimit, now, _RLIMIT_FIELDS)
    if node.swap is not None:
        obj["swap"] = _timed(node.swap, now, _SWAP_FIELDS)
    return obj


def summary(snapshot: StatsSnapshot) -> dict[str, Any]:
    """The Summary API object (stats/v1alpha1 ``Summary``) as JSON-ready dicts and lists.

    Field names and nesting follow the Go types; unknown numbers are left out (omitempty pointers),
    times are RFC 3339 seconds in UTC. Not reported: systemContainers, node network, PSI/IO, accelerators, and
    a volume's pvcRef (kopflet mounts no persistentVolumeClaim or ephemeral volumes). With `snapshot.error` set,
    the node is reported without pods.
    """
    pods = [] if snapshot.error else [_pod_summary(p, snapshot) for p in snapshot.pods]
    return {"node": _node_summary(snapshot), "pods": pods}


# --------------------------------------------------------------------------------- /metrics/resource

# Name, help, stability (collectors/resource_metrics.go, v1.37). scrape_error, deprecated in 1.29.0 and
# ALPHA, is hidden from 1.30 on (component-base hides deprecated ALPHA metrics the next minor release).
_RESOURCE_FAMILIES: Final[Mapping[str, tuple[str, str, str]]] = {
    "node_cpu_usage_seconds_total": (
        metrics.COUNTER, "Cumulative cpu time consumed by the node in core-seconds", metrics.STABLE),
    "node_memory_working_set_bytes": (
        metrics.GAUGE, "Current working set of the node in bytes", metrics.STABLE),
    "node_swap_usage_bytes": (
        metrics.GAUGE, "Current swap usage of the node in bytes. Reported only on non-windows systems", metrics.ALPHA),
    "container_cpu_usage_seconds_total": (
        metrics.COUNTER, "Cumulative cpu time consumed by the container in core-seconds", metrics.STABLE),
    "container_memory_working_set_bytes": (
        metrics.GAUGE, "Current working set of the container in bytes", metrics.STABLE),
    "container_swap_usage_bytes": (
        metrics.GAUGE, "Current amount of the container swap usage in bytes. Reported only on non-windows systems",
        metrics.ALPHA),
    "container_swap_limit_bytes": (
        metrics.GAUGE, "Current amount of the container swap limit in bytes. Reported only on non-windows systems",
        metrics.ALPHA),
    "container_start_time_seconds": (
        metrics.GAUGE, "Start time of the container since unix epoch in seconds", metrics.STABLE),
    "pod_cpu_usage_seconds_total": (
        metrics.COUNTER, "Cumulative cpu time consumed by the pod in core-seconds", metrics.STABLE),
    "pod_memory_working_set_bytes": (
        metrics.GAUGE, "Current working set of the pod in bytes", metrics.STABLE),
    "pod_swap_usage_bytes": (
        metrics.GAUGE, "Current amount of the pod swap usage in bytes. Reported only on non-windows systems",
        metrics.ALPHA),
    "resource_scrape_error": (
        metrics.GAUGE, "1 if there was an error while getting container metrics, 0 otherwise", metrics.STABLE),
}  # fmt: skip

def _seconds(ns: int) -> float:
    """Nanoseconds as float seconds the way Go computes float64(ns)/float64(time.Second): both rounded first."""
    return float(ns) / float(NANOS)


def resource_metrics(snapshot: StatsSnapshot) -> str:
    """The ``/metrics/resource`` text: node, container and pod CPU/memory/swap with their sample times."""
    samples = metrics.Samples(_RESOURCE_FAMILIES)
    add = samples.add
    if not snapshot.error:
        now, node = snapshot.timestamp, snapshot.node
        _usage_samples("node", {}, node.cpu, node.memory, node.swap, now, add)
        for pod in snapshot.pods:
            _pod_resource_samples(pod, now, add)
    add("resource_scrape_error", {}, 1 if snapshot.error else 0, None)
    return samples.render()


def _pod_resource_samples(pod: PodSample, now: int, add: metrics.AddSample) -> None:
    """A pod's container and pod samples. Containers read missing numbers as 0, as upstream's resource
    path does (zeroMissingValues); the pod's come from the sandbox or the containers' sums."""
    pod_labels = {"pod": pod.name, "namespace": pod.namespace}
    for container in pod.containers:
        labels = {"container": container.name, **pod_labels}
        if container.start_time > 0:
            add("container_start_time_seconds", labels, _seconds(container.start_time), None)
        cpu = _container_cpu(container, now)
        add(
            "container_cpu_usage_seconds_total",
            labels,
            _seconds(cpu.usage_core_nano_seconds or 0),
            cpu.timestamp or now,
        )
        memory = _container_memory(container, now, zero_all=True)
        add("container_memory_working_set_bytes", labels, memory.working_set_bytes or 0, memory.timestamp or now)
        swap = _container_swap(container, now)
        usage = swap.swap_usage_bytes or 0
        add("container_swap_usage_bytes", labels, usage, swap.timestamp or now)
        add("container_swap_limit_bytes", labels, (swap.swap_available_bytes or 0) + usage, swap.timestamp or now)
    _usage_samples("pod", pod_labels, _pod_cpu(pod, now), _pod_memory(pod, now), _pod_swap(pod, now), now, add)


def _usage_samples(level: str, labels: Mapping[str, str], cpu: cri.CpuUsage | None, memory: cri.MemoryUsage | None,
                   swap: cri.SwapUsage | None, now: int, add: metrics.AddSample) -> None:
    """The node's or a pod's ``<level>_cpu_usage_seconds_total``, ``_memory_working_set_bytes`` and
    ``_swap_usage_bytes``, each only when the number is known."""
    if cpu is not None and cpu.usage_core_nano_seconds is not None:
        add(f"{level}_cpu_usage_seconds_total", labels, _seconds(cpu.usage_core_nano_seconds), cpu.timestamp or now)
    if memory is not None and memory.working_set_bytes is not None:
        add(f"{level}_memory_working_set_bytes", labels, memory.working_set_bytes, memory.timestamp or now)
    if swap is not None and swap.swap_usage_bytes is not None:
        add(f"{level}_swap_usage_bytes", labels, swap.swap_usage_bytes, swap.timestamp or now)




def eviction_usage(sample: PodSample) -> PodUsage:
    """What the eviction manager ranks a pod by (upstream reads the same numbers from the summary API's PodStats):
    the pod's memory working set (its sandbox's, else the sum of its containers'), its process count, each
    container's working set, writable layer and log usage, and the host's du of its volumes, log directory
    files and etc-hosts (the local storage limits and the disk ranking read them)."""
    containers = tuple(
        ContainerUsage(
            name=c.name,
            memory_working_set=c.stats.memory.working_set_bytes if c.stats.memory is not None else None,
            rootfs=FsUsage(c.stats.writable_layer.used_bytes, c.stats.writable_layer.inodes_used)
            if c.stats.writable_layer is not None else None,
            logs=FsUsage(c.logs.used_bytes, c.logs.inodes_used) if c.logs is not None else None)
        for c in sample.containers)
    linux = sample.sandbox.linux if sample.sandbox is not None else None
    memory = linux.memory.working_set_bytes if linux is not None and linux.memory is not None else None
    if memory is None:
        known = [c.memory_working_set for c in containers if c.memory_working_set is not None]
        memory = sum(known) if known else None
    processes = linux.process.process_count if linux is not None and linux.process is not None else None
    return PodUsage(memory_working_set=memory, process_count=processes, containers=containers,
                    volumes={name: _fs_usage(v.usage) for name, v in sample.volumes.items()},
                    pod_logs=_fs_usage(sample.pod_logs) if sample.pod_logs is not None else None,
                    etc_hosts=_fs_usage(sample.etc_hosts) if sample.etc_hosts is not None else None)


def _fs_usage(usage: cri.FilesystemUsage) -> FsUsage:
    return FsUsage(usage.used_bytes, usage.inodes_used)
