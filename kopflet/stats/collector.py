"""Gathering the node's and its pods' resource usage for ``/stats/summary``, ``/metrics/resource`` and
``/metrics/cadvisor``.

The I/O half of `kopflet.stats.summary`: read /proc and the root cgroup (the machine's CPU and memory), statvfs
(the kubelet root directory's filesystem and the runtime's image filesystem), the CRI stats calls (the
containers), the pod cgroups (the pods' own numbers), the containers' log directories and the pods' volumes (du
and statvfs), log files and etc-hosts (du), then hand it all to the pure builders. Every blocking read runs in a
thread; the CRI calls run concurrently.

Usage::

    collector = StatsCollector(cri, node_name="edge-1", layout=Layout("/var/lib/kubelet"))
    summary = await collector.summary()              # dict for /stats/summary (StatsUnavailable: a 500)
    text = await collector.resource_metrics()        # /metrics/resource, kopflet.metrics.CONTENT_TYPE
    text = await collector.cadvisor_metrics()        # /metrics/cadvisor, same content type
    # or one snapshot for both: snapshot = await collector.collect(); summary_json(snapshot) ...

A `StatsCollector` lives as long as the agent: it remembers the previous CPU samples, so it can report
usageNanoCores where the runtime does not (the node always; containerd computes its containers' own), and
it coalesces scrapes that arrive while a collection is running.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import stat
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Final

from cri_client import CriClient, CriError
from cri_client import types as cri
from kopflet.cm.cgroup_names import DEFAULT_LAYOUT
from kopflet.paths import Layout, escape_qualified_name
from kopflet.stats import cadvisor, cgroup_stats, summary
from kopflet.volumes import plugins

logger = logging.getLogger(__name__)

NODE_CPU_KEY: Final = ""  # the node's entry in the CPU sample cache (container and sandbox ids are never empty)
VOLUME_STATS_PERIOD: Final = 60.0
"""How long a pod's volume measurement is reused by default: upstream volumeStatsAggPeriod's default (1m), the period
of its volume stats calculators (a du of every volume is not cheap)."""
VOLUME_STATS_WAIT: Final = 5.0
"""How long a collection waits for a volume measurement in progress before it reports what it has (the previous
measurement; none yet for a new pod). Upstream's calculators run in the background and the summary never waits
on them: a du of a large volume must hold up neither /stats/summary nor the eviction manager's rounds."""
MEASURED_VOLUME_KINDS: Final = (plugins.KIND_EMPTY_DIR, plugins.KIND_CONFIG_MAP, plugins.KIND_SECRET,
                                plugins.KIND_DOWNWARD_API, plugins.KIND_PROJECTED)
"""The volume types measured: those whose upstream plugin measures with MetricsDu (emptyDir of either medium, and
the configMap, secret, downwardAPI and projected volumes that wrap one). hostPath's plugin has MetricsNil: upstream
never reports it, nor does kopflet (it lives outside the pod's volumes directory anyway)."""


class StatsUnavailable(RuntimeError):
    """The pods could not be measured (the runtime failed): upstream answers /stats/summary with a 500."""


@dataclasses.dataclass(frozen=True)
class _NodeReading:
    cpu: cri.CpuUsage | None
    memory: cri.MemoryUsage | None
    swap: cri.SwapUsage | None
    root_fs: summary.FsInfo | None
    rlimit: summary.Rlimit
    boot_time: int


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def statvfs(path: str, timestamp: int, *, nearest: bool = True) -> summary.FsInfo | None:
    """Size of the filesystem holding `path` (with `nearest`, of its nearest existing ancestor when `path` is
    missing); None if unreadable."""
    probe = path
    while nearest and probe not in ("", "/") and not os.path.exists(probe):
        probe = os.path.dirname(probe)
    try:
        st = os.statvfs(probe or "/")
    except OSError:
        return None
    return summary.FsInfo(
        timestamp=timestamp,
        capacity_bytes=st.f_blocks * st.f_frsize,
        available_bytes=st.f_bavail * st.f_frsize,
        used_bytes=(st.f_blocks - st.f_bfree) * st.f_frsize,
        inodes=st.f_files,
        inodes_free=st.f_ffree,
    )


def read_node(proc: Path, cgroup_root: Path, root_dir: str) -> _NodeReading:
    """The machine's CPU, memory, swap, root filesystem and task counts (blocking: run in a thread)."""
    now = time.time_ns()
    proc_stat = _read(proc / "stat") or ""
    cpu = None
    with contextlib.suppress(ValueError):
        ticks = os.sysconf("SC_CLK_TCK")
        cpu = cri.CpuUsage(timestamp=now, usage_core_nano_seconds=summary.cpu_core_nanoseconds(proc_stat, ticks))
    boot_time = 0
    for line in proc_stat.splitlines():
        if line.startswith("btime "):
            boot_time = int(line.split()[1]) * summary.NANOS
    meminfo = summary.parse_meminfo(_read(proc / "meminfo") or "")
    if (cgroup_root / "cgroup.controllers").exists():  # cgroup v2: the root has memory.stat, no usage file
        cgroup_stat_text, usage_text = _read(cgroup_root / "memory.stat"), None
    else:
        cgroup_stat_text = _read(cgroup_root / "memory" / "memory.stat")
        usage_text = _read(cgroup_root / "memory" / "memory.usage_in_bytes")
    cgroup_usage = int(usage_text) if usage_text and usage_text.strip().isdigit() else None
    cgroup_stat = summary.parse_flat_keyed(cgroup_stat_text) if cgroup_stat_text is not None else None
    if cgroup_stat is not None and cgroup_usage is None and "anon" not in cgroup_stat:
        cgroup_stat = None  # a v1 memory.stat without its usage file: fall back to /proc/meminfo
    vmstat = None if cgroup_stat is not None else summary.parse_flat_keyed(_read(proc / "vmstat") or "")
    memory = summary.node_memory(
        meminfo, timestamp=now, cgroup_stat=cgroup_stat, cgroup_usage=cgroup_usage, vmstat=vmstat
    )
    rlimit = summary.node_rlimit(
        timestamp=now,
        pid_max=_read(proc / "sys" / "kernel" / "pid_max"),
        threads_max=_read(proc / "sys" / "kernel" / "threads-max"),
        loadavg=_read(proc / "loadavg"),
    )
    return _NodeReading(
        cpu=cpu,
        memory=memory,
        swap=summary.node_swap(meminfo, timestamp=now),
        root_fs=statvfs(root_dir, now),
        rlimit=rlimit,
        boot_time=boot_time,
    )


def read_machine(proc: Path, sysfs: Path, etc: Path) -> summary.MachineInfo:
    """cAdvisor's MachineInfo, the part its machine collector prints (blocking: run in a thread).

    machine-id as cAdvisor looks for it (/etc/machine-id, then /var/lib/dbus/machine-id), the DMI product
    UUID (root-only on most machines: "" otherwise), the boot id; cores from /proc/cpuinfo.
    """
    def first(*paths: Path) -> str:
        for path in paths:
            text = _read(path)
            if text and text.strip():
                return text.strip()
        return ""

    cores = summary.count_processors(_read(proc / "cpuinfo") or "") or os.cpu_count() or 0
    return summary.MachineInfo(
        timestamp=time.time_ns(),
        num_cores=cores,
        memory_capacity=summary.parse_meminfo(_read(proc / "meminfo") or "").get("MemTotal", 0),
        machine_id=first(etc / "machine-id", etc.parent / "var" / "lib" / "dbus" / "machine-id"),
        system_uuid=first(sysfs / "class" / "dmi" / "id" / "product_uuid"),
        boot_id=first(proc / "sys" / "kernel" / "random" / "boot_id"),
    )


PodCgroupCandidates = Callable[[str], Sequence[str]]
"""A pod UID -> where its cgroup may be (`cgroup_names.CgroupLayout.pod_cgroup_candidates`)."""


def _find_pod_cgroup(base: Path, uid: str,
                     candidates: PodCgroupCandidates = DEFAULT_LAYOUT.pod_cgroup_candidates) -> str:
    """The pod's cgroup name under `base` (a hierarchy's root), "" when it has none.

    The pod cgroup is where kopflet puts it (`cgroup_names.CgroupLayout.pod_cgroup`: cgroupRoot, the driver's
    spelling): under the QoS tier, which the stats do not say, so the three places are tried. None without
    cgroupsPerQOS.
    """
    return next((c for c in candidates(uid) if (base / c.lstrip("/")).is_dir()), "")


def _count_processes(directory: Path) -> int | None:
    """The processes in this cgroup and the ones below it (cgroup.procs lists each process once)."""
    if not directory.is_dir():
        return None
    count = 0
    for dirpath, _dirs, files in os.walk(directory):
        if "cgroup.procs" in files:
            count += len((_read(Path(dirpath) / "cgroup.procs") or "").split())
    return count


def _netns_inode(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _infra_net_dev(procs_dir: Path, sandbox_id: str, proc: Path) -> str | None:
    """/proc/<pid>/net/dev of the infra container's first process, as cAdvisor reads a container's network; None
    when the pod shares the agent's (the host's) network namespace, as a hostNetwork pod does."""
    if not sandbox_id:
        return None
    pids = (_read(procs_dir / sandbox_id / "cgroup.procs") or "").split()
    if not pids:
        return None
    netns = _netns_inode(proc / pids[0] / "ns" / "net")
    if netns is None or netns == _netns_inode(proc / "self" / "ns" / "net"):
        return None
    return _read(proc / pids[0] / "net" / "dev")


def pod_cgroups(pods: Iterable[summary.PodSample], cgroup_root: Path, proc: Path = Path("/proc"),
                candidates: PodCgroupCandidates = DEFAULT_LAYOUT.pod_cgroup_candidates,
                ) -> tuple[summary.PodSample, ...]:
    """Each pod with its cgroup's name, its own CPU, memory, process and network numbers, and the pod's and
    containers' memory limits (blocking: run in a thread).

    The pod's numbers come from its cgroup as cAdvisor reads them (`cgroup_stats`), not from the runtime's sandbox
    stats. containerd names a container's cgroup ``<pod cgroup>/<container id>`` (cAdvisor's ``id`` label); the
    limits are its memory.max (v2) or memory.limit_in_bytes (v1), as cAdvisor's spec reads them.
    """
    v2 = (cgroup_root / "cgroup.controllers").exists()
    memory_base = cgroup_root if v2 else cgroup_root / "memory"
    limit_file = "memory.max" if v2 else "memory.limit_in_bytes"
    now = time.time_ns()
    result = []
    for pod in pods:
        cgroup = _find_pod_cgroup(memory_base, pod.uid, candidates)
        if not cgroup:
            result.append(pod)
            continue
        relative = cgroup.lstrip("/")
        directory = memory_base / relative
        containers = tuple(
            dataclasses.replace(c, memory_limit=summary.memory_limit(_read(directory / c.stats.id / limit_file)))
            for c in pod.containers
        )
        if v2:
            cpu, procs_dir = _read(directory / "cpu.stat"), directory
        else:
            cpu = _read(cgroup_root / "cpuacct" / relative / "cpuacct.usage")
            procs_dir = next((d for d in (cgroup_root / c / relative for c in ("pids", "cpu")) if d.is_dir()),
                             cgroup_root / "pids" / relative)
        files = cgroup_stats.PodCgroupFiles(
            v2=v2,
            cpu=cpu,
            memory_usage=_read(directory / ("memory.current" if v2 else "memory.usage_in_bytes")),
            memory_limit=_read(directory / limit_file),
            memory_stat=_read(directory / "memory.stat"),
            process_count=_count_processes(procs_dir),
            net_dev=_infra_net_dev(procs_dir, pod.sandbox_id, proc),
        )
        result.append(dataclasses.replace(
            pod, cgroup=cgroup, memory_limit=summary.memory_limit(files.memory_limit), containers=containers,
            sandbox=cgroup_stats.pod_sandbox_stats(pod.sandbox_id, files, now)))
    return tuple(result)


def filesystems(mountpoints: Iterable[str], timestamp: int, proc: Path) -> dict[str, summary.FsInfo]:
    """statvfs of each mountpoint, with its mount's source device (blocking: run in a thread)."""
    mountinfo = _read(proc / "self" / "mountinfo") or ""
    result = {}
    for mountpoint in mountpoints:
        size = statvfs(mountpoint, timestamp)
        if size is not None:
            result[mountpoint] = dataclasses.replace(size, device=summary.mount_source(mountinfo, mountpoint))
    return result


def disk_usage(path: Path, timestamp: int) -> cri.FilesystemUsage | None:
    """Like upstream's ``du``: bytes of allocated blocks and inodes under `path`; None if it is missing."""
    if not path.is_dir():
        return None
    used, inodes = 0, 0
    for dirpath, dirnames, filenames in os.walk(path):
        for name in (".", *dirnames, *filenames):
            with contextlib.suppress(OSError):
                used += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
                inodes += 1
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
    return cri.FilesystemUsage(mountpoint=str(path), timestamp=timestamp, used_bytes=used, inodes_used=inodes)


def du(path: str, timestamp: int) -> cri.FilesystemUsage | None:
    """upstream volume/util/fs DiskUsage (what MetricsDu runs): bytes of allocated blocks (st_blocks * 512) and
    inodes under `path`, itself included, symlinks not followed, not crossing into other filesystems (a
    mount inside is skipped whole), hard links counted once; entries vanishing meanwhile are ignored. None
    when `path` is missing. Blocking: run in a thread."""
    try:
        top = os.stat(path)
    except OSError:
        return None
    used = inodes = 0
    seen: set[int] = set()
    pending = [path]
    while pending:
        current = pending.pop()
        try:
            st = os.lstat(current)
        except OSError:
            continue
        if st.st_dev != top.st_dev:
            continue
        if st.st_nlink > 1:
            if st.st_ino in seen:
                continue
            seen.add(st.st_ino)
        used += st.st_blocks * 512
        inodes += 1
        if stat.S_ISDIR(st.st_mode):
            with contextlib.suppress(OSError), os.scandir(current) as entries:
                pending.extend(entry.path for entry in entries)
    return cri.FilesystemUsage(mountpoint=path, timestamp=timestamp, used_bytes=used, inodes_used=inodes)


def _sum_usage(usages: Iterable[cri.FilesystemUsage | None], path: str, timestamp: int) -> cri.FilesystemUsage:
    known = [u for u in usages if u is not None]
    return cri.FilesystemUsage(mountpoint=path, timestamp=timestamp,
                               used_bytes=sum(u.used_bytes or 0 for u in known),
                               inodes_used=sum(u.inodes_used or 0 for u in known))


def measure_volume(path: str, kind: str, mountinfo: str) -> summary.VolumeSample | None:
    """upstream MetricsDu.GetMetrics for one volume directory: used bytes and inodes from du, capacity, available
    and inodes from statfs of the directory itself (a tmpfs volume reports its own mount's size). None when
    either fails: upstream then leaves the volume out. An emptyDir with a tmpfs mounted on its directory is of
    the Memory medium (kopflet mounts tmpfs there for that medium only). Blocking: run in a thread."""
    timestamp = time.time_ns()
    usage = du(path, timestamp)
    size = statvfs(path, timestamp, nearest=False) if usage is not None else None
    if usage is None or size is None:
        return None
    memory = kind == plugins.KIND_EMPTY_DIR and summary.mount_fstype(mountinfo, os.path.realpath(path)) == "tmpfs"
    return summary.VolumeSample(kind=kind, medium=plugins.MEDIUM_MEMORY if memory else plugins.MEDIUM_DEFAULT,
                                usage=usage, fs=size)


def pod_volumes(layout: Layout, uid: str, mountinfo: str) -> dict[str, summary.VolumeSample]:
    """Each volume of the pod that upstream measures (MEASURED_VOLUME_KINDS), by name: the directories under the
    pod's volumes directory, as upstream's calculator asks the volume manager for the pod's mounted volumes.
    `mountinfo` is /proc/self/mountinfo's text. Blocking: run in a thread."""
    result = {}
    for kind in MEASURED_VOLUME_KINDS:
        directory = os.path.join(layout.volumes_dir(uid), escape_qualified_name(plugins.PLUGIN_NAMES[kind]))
        try:
            names = sorted(entry.name for entry in os.scandir(directory) if entry.is_dir(follow_symlinks=False))
        except OSError:
            continue
        for name in names:
            sample = measure_volume(os.path.join(directory, name), kind, mountinfo)
            if sample is not None:
                result[name] = sample
    return result


def pod_log_usage(layout: Layout, pod: summary.PodSample, timestamp: int) -> cri.FilesystemUsage | None:
    """upstream getPodLogStats: du of each file directly in the pod's log directory (its containers' log
    directories are theirs); None when the directory is missing."""
    directory = layout.pod_log_dir(pod.namespace, pod.name, pod.uid)
    try:
        files = [e.path for e in os.scandir(directory) if not e.is_dir(follow_symlinks=False)]
    except OSError:
        return None
    return _sum_usage((du(f, timestamp) for f in files), directory, timestamp)


def _log_usage(pods: Iterable[summary.PodSample], layout: Layout) -> dict[str, cri.FilesystemUsage]:
    """Log directory usage of every container (upstream hostStatsProvider; blocking: run in a thread)."""
    now = time.time_ns()
    result = {}
    for pod in pods:
        for container in pod.containers:
            log_dir = layout.container_log_dir(pod.namespace, pod.name, pod.uid, container.name)
            usage = disk_usage(Path(log_dir), now)
            if usage is not None:
                result[container.stats.id] = usage
    return result


class StatsCollector:
    """Collects `kopflet.stats.summary.StatsSnapshot`s for one node.

    `layout` says where the kubelet root directory is (its filesystem is the node's ``fs`` and the pods'
    ephemeral storage) and where the containers' logs live. `proc`, `cgroup_root`, `sysfs` and `etc` exist
    for tests. The machine info (cores, memory, ids) is read once, as the kubelet caches cAdvisor's.
    """

    def __init__(
        self,
        cri_client: CriClient,
        *,
        node_name: str,
        layout: Layout,
        proc: str = "/proc",
        cgroup_root: str = "/sys/fs/cgroup",
        sysfs: str = "/sys",
        etc: str = "/etc",
        pod_cgroup_candidates: PodCgroupCandidates = DEFAULT_LAYOUT.pod_cgroup_candidates,
        volume_stats_period: float = VOLUME_STATS_PERIOD,
    ) -> None:
        """`pod_cgroup_candidates`: where a pod's cgroup may be (the node's cgroup layout). `volume_stats_period`:
        volumeStatsAggPeriod, how long a volume measurement is reused; 0 or negative: volumes are never measured
        (upstream's fsResourceAnalyzer with a calcPeriod <= 0: "Volume stats collection disabled")."""
        self.cri, self.node_name, self.layout = cri_client, node_name, layout
        self.volume_stats_period = volume_stats_period
        self.pod_cgroup_candidates = pod_cgroup_candidates
        self.proc, self.cgroup_root = Path(proc), Path(cgroup_root)
        self.sysfs, self.etc = Path(sysfs), Path(etc)
        self._machine: summary.MachineInfo | None = None
        self._previous_cpu: dict[str, cri.CpuUsage] = {}
        self._volumes: dict[str, tuple[float, dict[str, summary.VolumeSample]]] = {}
        """Each pod's last volume measurement (monotonic time it ended, by volume name), by pod UID."""
        self._measuring: asyncio.Task[None] | None = None
        """The volume measurement in progress, if any: one at a time, outliving the collection that started it."""
        self._running: asyncio.Task[summary.StatsSnapshot] | None = None

    async def collect(self) -> summary.StatsSnapshot:
        """A fresh snapshot; callers arriving while one is being collected share it."""
        if self._running is None or self._running.done():
            self._running = asyncio.ensure_future(self._collect())
        return await asyncio.shield(self._running)

    async def summary(self) -> dict[str, Any]:
        """A fresh ``/stats/summary`` object; StatsUnavailable when the runtime could not be listed."""
        snapshot = await self.collect()
        if snapshot.error:
            raise StatsUnavailable(f"failed to get summary stats: {snapshot.error}")
        return summary.summary(snapshot)

    async def resource_metrics(self) -> str:
        """A fresh ``/metrics/resource`` text (a runtime failure is ``resource_scrape_error 1`` in it)."""
        return summary.resource_metrics(await self.collect())

    async def cadvisor_metrics(self) -> str:
        """A fresh ``/metrics/cadvisor`` text (a runtime failure is ``container_scrape_error 1`` in it)."""
        return cadvisor.cadvisor_metrics(await self.collect())

    async def _collect(self) -> summary.StatsSnapshot:
        started = time.time_ns()
        node_task = asyncio.create_task(asyncio.to_thread(read_node, self.proc, self.cgroup_root, self.layout.root_dir))
        image_fs_task = asyncio.create_task(self.cri.images.fs_info())
        error = ""
        pods: tuple[summary.PodSample, ...] = ()
        try:
            sandboxes, containers, container_stats = await asyncio.gather(
                self.cri.sandboxes.list(), self.cri.containers.list(), self.cri.containers.list_stats()
            )
            pods = summary.pod_samples(sandboxes, containers, container_stats)
            logs = await asyncio.to_thread(_log_usage, pods, self.layout)
            pods = summary.pod_samples(sandboxes, containers, container_stats, logs=logs)
            pods = await asyncio.to_thread(self._with_host_files, pods)
            pods = await self._with_volumes(pods)
            pods = await asyncio.to_thread(pod_cgroups, pods, self.cgroup_root, self.proc, self.pod_cgroup_candidates)
        except CriError as e:
            error = f"failed to list pod stats: {e}"
            logger.warning(error)
        except BaseException:
            node_task.cancel()
            image_fs_task.cancel()
            raise
        try:
            image_fs_info = await image_fs_task
        except CriError as e:
            logger.warning(f"failed to get imageFs info: {e}")
            image_fs_info = cri.ImageFsInfo()
        node = await node_task
        image_fs = image_fs_info.image_filesystems[0] if image_fs_info.image_filesystems else None
        pods = self._with_nano_cores(pods)
        cpu = summary.with_nano_cores(node.cpu, self._previous_cpu.get(NODE_CPU_KEY))
        if node.cpu is not None:
            self._previous_cpu[NODE_CPU_KEY] = node.cpu
        mountpoints = {image_fs.mountpoint} if image_fs is not None and image_fs.mountpoint else set()
        for pod in pods:
            for container in pod.containers:
                layer = container.stats.writable_layer
                if layer is not None and layer.mountpoint:
                    mountpoints.add(layer.mountpoint)
        sizes = await asyncio.to_thread(filesystems, sorted(mountpoints), started, self.proc)
        if self._machine is None:
            self._machine = await asyncio.to_thread(read_machine, self.proc, self.sysfs, self.etc)
        return summary.StatsSnapshot(
            timestamp=started,
            node=summary.NodeSample(
                node_name=self.node_name,
                boot_time=node.boot_time,
                cpu=cpu,
                memory=node.memory,
                swap=node.swap,
                root_fs=node.root_fs,
                image_fs=image_fs,
                rlimit=node.rlimit,
                machine=self._machine,
            ),
            pods=pods,
            filesystems=sizes,
            error=error,
        )

    def _with_host_files(self, pods: tuple[summary.PodSample, ...]) -> tuple[summary.PodSample, ...]:
        """The pods with their log directory files (upstream getPodLogStats) and etc-hosts (getPodEtcHostsStats)
        measured, each time as upstream does. Blocking: run in a thread."""
        now = time.time_ns()
        return tuple(dataclasses.replace(pod, pod_logs=pod_log_usage(self.layout, pod, now),
                                         etc_hosts=du(self.layout.etc_hosts(pod.uid), now)) for pod in pods)

    async def _with_volumes(self, pods: tuple[summary.PodSample, ...]) -> tuple[summary.PodSample, ...]:
        """The pods with their volumes' last measurement (upstream fsResourceAnalyzer: a cache the summary reads).

        The pods not measured within `volume_stats_period` (volumeStatsAggPeriod) are measured again off the event
        loop, one measurement at a time, which this collection waits for up to VOLUME_STATS_WAIT; a slower one
        goes on and is reported by the collections after it. The cache forgets the pods no longer running. With the
        period 0 or negative nothing is measured: the pods have no volume stats, as upstream's.
        """
        if self.volume_stats_period <= 0:
            return pods
        running = {p.uid for p in pods}
        self._volumes = {uid: cached for uid, cached in self._volumes.items() if uid in running}
        if self._measuring is None or self._measuring.done():
            now = time.monotonic()
            stale = [p.uid for p in pods
                     if p.uid not in self._volumes or now - self._volumes[p.uid][0] >= self.volume_stats_period]
            if stale:
                self._measuring = asyncio.create_task(self._measure_volumes(stale))
        if self._measuring is not None and not self._measuring.done():
            await asyncio.wait([self._measuring], timeout=VOLUME_STATS_WAIT)  # never cancels it
        return tuple(dataclasses.replace(p, volumes=self._volumes[p.uid][1]) if p.uid in self._volumes else p
                     for p in pods)

    async def _measure_volumes(self, uids: list[str]) -> None:
        """Measure these pods' volumes in a thread and cache the result (an unexpected error is logged: nobody
        may be waiting for this task)."""
        try:
            measured = await asyncio.to_thread(self._measure_pod_volumes, uids)
        except Exception:
            logger.exception("failed to measure the pods' volumes")
            return
        done = time.monotonic()
        self._volumes.update({uid: (done, volumes) for uid, volumes in measured.items()})

    def _measure_pod_volumes(self, uids: list[str]) -> dict[str, dict[str, summary.VolumeSample]]:
        """`pod_volumes` of each pod, reading the mount table once. Blocking: run in a thread."""
        mountinfo = _read(self.proc / "self" / "mountinfo") or ""
        return {uid: pod_volumes(self.layout, uid, mountinfo) for uid in uids}

    async def close(self) -> None:
        """Cancel the collection and the volume measurement in progress (a du already running in its thread
        finishes there; nothing waits for it)."""
        tasks = [t for t in (self._running, self._measuring) if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _with_nano_cores(self, pods: tuple[summary.PodSample, ...]) -> tuple[summary.PodSample, ...]:
        """Fill usageNanoCores the runtime left unset from the previous samples; remember these ones."""
        previous, current = self._previous_cpu, {NODE_CPU_KEY: self._previous_cpu.get(NODE_CPU_KEY)}
        result = []
        for pod in pods:
            containers = []
            for c in pod.containers:
                cpu = summary.with_nano_cores(c.stats.cpu, previous.get(c.stats.id))
                current[c.stats.id] = c.stats.cpu
                containers.append(dataclasses.replace(c, stats=dataclasses.replace(c.stats, cpu=cpu)))
            sandbox = pod.sandbox
            if sandbox is not None and sandbox.linux is not None:
                cpu = summary.with_nano_cores(sandbox.linux.cpu, previous.get(sandbox.id))
                current[sandbox.id] = sandbox.linux.cpu
                sandbox = dataclasses.replace(sandbox, linux=dataclasses.replace(sandbox.linux, cpu=cpu))
            result.append(dataclasses.replace(pod, containers=tuple(containers), sandbox=sandbox))
        self._previous_cpu = {k: v for k, v in current.items() if v is not None}
        return tuple(result)


async def collect(
    cri_client: CriClient,
    *,
    node_name: str,
    layout: Layout,
) -> summary.StatsSnapshot:
    """One snapshot without history (no node usageNanoCores): for one-off use; keep a `StatsCollector` otherwise."""
    collector = StatsCollector(cri_client, node_name=node_name, layout=layout)
    return await collector.collect()


def summary_json(snapshot: summary.StatsSnapshot) -> str:
    """The ``/stats/summary`` body, indented as the kubelet's go-restful writes it (one space)."""
    return json.dumps(summary.summary(snapshot), indent=1, ensure_ascii=False)


def resource_metrics(snapshot: summary.StatsSnapshot) -> str:
    """The ``/metrics/resource`` body (serve with `kopflet.metrics.CONTENT_TYPE`)."""
    return summary.resource_metrics(snapshot)
