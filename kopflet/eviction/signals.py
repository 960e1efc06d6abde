"""Measuring the eviction signals on this host (what upstream reads from the stats summary and cAdvisor).

memory.available is MemTotal minus the root memory cgroup's working set (cAdvisor: usage minus inactive file
pages; cgroup v1 ``memory.usage_in_bytes`` and ``total_inactive_file``, v2 ``memory.current`` or, at the
root where the kernel has none, ``anon + file`` of memory.stat, and ``inactive_file``). nodefs.* is statvfs of
the kubelet root directory, imagefs.* statvfs of the runtime's image filesystem (the mountpoint CRI
ImageFsInfo names), containerfs.* the same as imagefs (upstream's CRI stats provider reports the image
filesystem for both). pid.available is min(kernel.pid_max, kernel.threads-max) minus the tasks in
/proc/loadavg (upstream pkg/kubelet/stats/pidlimit). allocatableMemory.available is the pods cgroup's
limit minus its working set.

Blocking: call these from a thread (``asyncio.to_thread``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from kopflet.eviction import thresholds as th
from kopflet.eviction.helpers import Observation

PROC = Path("/proc")
CGROUP_ROOT = Path("/sys/fs/cgroup")


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _int(text: str | None) -> int | None:
    text = (text or "").strip()
    return int(text) if text.isdigit() else None


def _flat_keyed(text: str | None) -> dict[str, int]:
    """A cgroup "flat keyed" file (memory.stat): ``name value`` per line."""
    result: dict[str, int] = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            result[parts[0]] = int(parts[1])
    return result


def mem_total(proc: Path = PROC) -> int | None:
    """MemTotal of /proc/meminfo in bytes (cAdvisor's machine memory capacity)."""
    for line in (_read(proc / "meminfo") or "").splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if key.strip() == "MemTotal" and parts and parts[0].isdigit():
            return int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    return None


def is_cgroup2(cgroup_root: Path = CGROUP_ROOT) -> bool:
    """A unified hierarchy has cgroup.controllers at its root."""
    return (cgroup_root / "cgroup.controllers").exists()


def cgroup_working_set(cgroup_dir: Path, *, v2: bool) -> int | None:
    """cAdvisor's working set of one memory cgroup directory: usage minus inactive file pages (not below 0).

    v1: ``memory.usage_in_bytes`` and memory.stat ``total_inactive_file``. v2: ``memory.current`` (at the root,
    which has none, ``anon + file`` of memory.stat, as runc computes it) and ``inactive_file``. None when the
    usage cannot be read.
    """
    stat = _flat_keyed(_read(cgroup_dir / "memory.stat"))
    if v2:
        usage = _int(_read(cgroup_dir / "memory.current"))
        if usage is None and "anon" in stat:
            usage = stat["anon"] + stat.get("file", 0)
        inactive = stat.get("inactive_file", 0)
    else:
        usage = _int(_read(cgroup_dir / "memory.usage_in_bytes"))
        inactive = stat.get("total_inactive_file", 0)
    if usage is None:
        return None
    return usage - inactive if inactive < usage else 0


def read_memory(proc: Path = PROC, cgroup_root: Path = CGROUP_ROOT, now: float | None = None) -> Observation | None:
    """memory.available: MemTotal minus the root cgroup's working set; capacity MemTotal. None if unreadable."""
    total = mem_total(proc)
    v2 = is_cgroup2(cgroup_root)
    working_set = cgroup_working_set(cgroup_root if v2 else cgroup_root / "memory", v2=v2)
    if total is None or working_set is None:
        return None
    return Observation(available=max(total - working_set, 0), capacity=total,
                       time=time.time() if now is None else now)


def read_allocatable_memory(pods_cgroup: Path, limit: int, *, cgroup_root: Path = CGROUP_ROOT,
                            now: float | None = None) -> Observation | None:
    """allocatableMemory.available: `limit` (the pods cgroup's memory limit, node allocatable) minus the
    working set of `pods_cgroup` (relative to the memory hierarchy: ``kubepods``, or an absolute path)."""
    v2 = is_cgroup2(cgroup_root)
    base = cgroup_root if v2 else cgroup_root / "memory"
    working_set = cgroup_working_set(base / pods_cgroup, v2=v2)
    if working_set is None:
        return None
    return Observation(available=max(limit - working_set, 0), capacity=limit,
                       time=time.time() if now is None else now)


def read_fs(path: str, now: float | None = None) -> tuple[Observation, Observation] | None:
    """The bytes and inodes left on the filesystem holding `path` (statvfs: f_bavail blocks, f_ffree inodes;
    capacities f_blocks and f_files), or None if it cannot be read."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    stamp = time.time() if now is None else now
    return (Observation(available=st.f_bavail * st.f_frsize, capacity=st.f_blocks * st.f_frsize, time=stamp),
            Observation(available=st.f_ffree, capacity=st.f_files, time=stamp))


def max_pid(proc: Path = PROC) -> int | None:
    """The system-wide task limit: the smaller of kernel.pid_max and kernel.threads-max (upstream pidlimit)."""
    limits = [v for v in (_int(_read(proc / "sys" / "kernel" / name)) for name in ("pid_max", "threads-max"))
              if v is not None]
    return min(limits) if limits else None


def running_tasks(proc: Path = PROC) -> int | None:
    """Tasks (threads included) on the host: the total in /proc/loadavg's fourth field (``2/3518``), as
    upstream prefers; else the processes listed in /proc (upstream falls back to sysinfo's procs)."""
    fields = (_read(proc / "loadavg") or "").split()
    if len(fields) >= 5:
        _, sep, total = fields[3].partition("/")
        if sep and total.isdigit():
            return int(total)
    try:
        return sum(1 for name in os.listdir(proc) if name.isdigit())
    except OSError:
        return None


def read_pids(proc: Path = PROC, now: float | None = None) -> Observation | None:
    """pid.available: the task limit minus the running tasks; capacity the limit."""
    limit, running = max_pid(proc), running_tasks(proc)
    if limit is None or running is None:
        return None
    return Observation(available=limit - running, capacity=limit, time=time.time() if now is None else now)


def has_dedicated_image_fs(root_dir: str, image_fs_mountpoint: str) -> bool:
    """upstream HasDedicatedImageFs: the image filesystem is on another device than the kubelet root dir."""
    return os.stat(image_fs_mountpoint).st_dev != os.stat(root_dir).st_dev


def observe(root_dir: str, image_fs_mountpoint: str | None = None, *, proc: Path = PROC,
            cgroup_root: Path = CGROUP_ROOT, pods_cgroup: Path | None = None, allocatable_memory: int | None = None,
            now: float | None = None) -> dict[str, Observation]:
    """Every signal that can be measured now (upstream makeSignalObservations); one missing is left out.

    `image_fs_mountpoint` is CRI ImageFsInfo's first filesystem mountpoint (None: no imagefs signals).
    `pods_cgroup` and `allocatable_memory` give allocatableMemory.available (only needed with "pods" in
    enforceNodeAllocatable).
    """
    stamp = time.time() if now is None else now
    result: dict[str, Observation] = {}
    memory = read_memory(proc, cgroup_root, stamp)
    if memory is not None:
        result[th.MEMORY_AVAILABLE] = memory
    if pods_cgroup is not None and allocatable_memory is not None:
        allocatable = read_allocatable_memory(pods_cgroup, allocatable_memory, cgroup_root=cgroup_root, now=stamp)
        if allocatable is not None:
            result[th.ALLOCATABLE_MEMORY_AVAILABLE] = allocatable
    nodefs = read_fs(root_dir, stamp)
    if nodefs is not None:
        result[th.NODEFS_AVAILABLE], result[th.NODEFS_INODES_FREE] = nodefs
    imagefs = read_fs(image_fs_mountpoint, stamp) if image_fs_mountpoint else None
    if imagefs is not None:
        result[th.IMAGEFS_AVAILABLE], result[th.IMAGEFS_INODES_FREE] = imagefs
        result[th.CONTAINERFS_AVAILABLE], result[th.CONTAINERFS_INODES_FREE] = imagefs
    pids = read_pids(proc, stamp)
    if pids is not None:
        result[th.PID_AVAILABLE] = pids
    return result
