"""What the node looks like from the host: the agent's memory and CPU, and what pods left behind.

Read from /proc, the runtime (through cri_client) and the directories the agents and CNI write, so the
same counts apply to kopflet and to the upstream kubelet.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench import soak
from cri_client import CriClient, types

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes(pid: int) -> int:
    """Resident set size (the statm field, as `ps` shows it)."""
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE


def pss_bytes(pid: int) -> int:
    """Proportional set size: shared pages divided among the processes sharing them (kubemark's hollow nodes share
    one binary's pages, which RSS counts once per process)."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time the process has used so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class Sampler:
    """Samples a process's RSS every `interval` seconds in a thread: the peak during a burst."""

    def __init__(self, pid: int, interval: float = 0.25) -> None:
        self.pid, self.interval = pid, interval
        self.peak_rss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self.cpu_start = cpu_seconds(self.pid)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.cpu_used = cpu_seconds(self.pid) - self.cpu_start

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak_rss = max(self.peak_rss, rss_bytes(self.pid))
            except OSError:
                return
            self._stop.wait(self.interval)


def idle_window(pid: int, seconds: float) -> dict[str, float]:
    """RSS at the end and CPU used over a quiet window, as a share of one core."""
    start, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    used, elapsed = cpu_seconds(pid) - start, time.monotonic() - t0
    return {"rss_mib": round(rss_bytes(pid) / 2**20, 1), "cpu_seconds": round(used, 3),
            "cpu_percent_of_core": round(100 * used / elapsed, 2), "window_seconds": round(elapsed, 1)}


def dir_usage(root: Path) -> int:
    """Disk used under `root` (as `du` counts it: allocated blocks, symlinks not followed); 0 when absent.
    Files removed while the walk runs are skipped."""
    total, stack = 0, [str(root)]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            continue
    return total


def entry_count(directory: Path) -> int:
    try:
        return len(os.listdir(directory))
    except OSError:
        return 0


class SoakSampler:
    """What a long run can pile up, sampled every `interval` seconds in a thread: the bytes under the pod
    log root and the entries in the container log directory, the image filesystem's used bytes and the
    containers and sandboxes the runtime holds (through CRI), and the agent's RSS. `progress()` gives the
    cycles completed so far. Columns in `series` (see bench.soak.SERIES); a source that cannot be read at
    one sample leaves None there. Sampling stops if the agent process is gone."""

    def __init__(self, pid: int, endpoint: str, pod_logs: Path, container_logs: Path, interval: float,
                 progress: Callable[[], int]) -> None:
        self.pid, self.endpoint, self.interval, self.progress = pid, endpoint, interval, progress
        self.pod_logs, self.container_logs = pod_logs, container_logs
        self.series: dict[str, list] = {k: [] for k in ("t", "cycles", *soak.SERIES, soak.RSS)}
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), name="soak-sampler", daemon=True)

    def __enter__(self) -> SoakSampler:
        self.t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def once(self) -> dict[str, int | None]:
        """One sample, outside the thread (before and after the run)."""
        return asyncio.run(self._once_with_client())

    async def _once_with_client(self) -> dict[str, int | None]:
        async with CriClient(self.endpoint, timeout=30) as cri:
            return await self._sample(cri)

    async def _sample(self, cri: CriClient) -> dict[str, int | None]:
        out: dict[str, int | None] = {
            "pod_log_bytes": await asyncio.to_thread(dir_usage, self.pod_logs),
            "container_log_links": entry_count(self.container_logs)}
        try:
            fs = await cri.images.fs_info()
            used = [f.used_bytes for f in fs.image_filesystems if f.used_bytes is not None]
            out["image_fs_bytes"] = sum(used) if used else None
            containers = await cri.containers.list()
            out["containers"] = len(containers)
            out["exited_containers"] = sum(1 for c in containers if c.state == types.ContainerState.EXITED)
            out["sandboxes"] = len(await cri.sandboxes.list())
        except Exception:
            self.errors += 1
            for key in ("image_fs_bytes", "containers", "exited_containers", "sandboxes"):
                out.setdefault(key, None)
        try:
            out[soak.RSS] = rss_bytes(self.pid)
        except OSError:
            out[soak.RSS] = None
        return out

    async def _run(self) -> None:
        async with CriClient(self.endpoint, timeout=30) as cri:
            while not self._stop.is_set():
                t = time.monotonic() - self.t0
                sample = await self._sample(cri)
                if sample[soak.RSS] is None:  # the agent is gone: the run fails on its own
                    return
                self.series["t"].append(round(t, 2))
                self.series["cycles"].append(self.progress())
                for key, value in sample.items():
                    self.series[key].append(value)
                await asyncio.to_thread(self._stop.wait, self.interval)


async def _runtime_counts(endpoint: str) -> tuple[int, int]:
    async with CriClient(endpoint, timeout=30) as cri:
        return len(await cri.sandboxes.list()), len(await cri.containers.list())


def leftovers(endpoint: str, pod_dirs: Path, cni_networks: Path) -> dict[str, int]:
    """What remains on the node once every benchmark pod is gone; all zero on a clean node.

    Sandboxes and containers from the runtime; network namespaces containerd made (/var/run/netns/cni-*);
    IPs host-local IPAM still holds; mounts under the agent's pod directories; those directories; and pod
    cgroups.
    """
    sandboxes, containers = asyncio.run(_runtime_counts(endpoint))
    netns_dir = Path("/var/run/netns")
    netns = len([p for p in netns_dir.iterdir() if p.name.startswith("cni-")]) if netns_dir.is_dir() else 0
    ips = 0
    if cni_networks.is_dir():
        for net in cni_networks.iterdir():
            if net.is_dir():
                ips += len([p for p in net.iterdir() if p.name[:1].isdigit() or ":" in p.name])
    prefix = str(pod_dirs).rstrip("/") + "/"
    mounts = sum(1 for line in Path("/proc/self/mountinfo").read_text().splitlines()
                 if line.split()[4].startswith(prefix))
    dirs = len(list(pod_dirs.iterdir())) if pod_dirs.is_dir() else 0
    return {"sandboxes": sandboxes, "containers": containers, "network_namespaces": netns, "cni_ips": ips,
            "mounts": mounts, "pod_directories": dirs, "pod_cgroups": pod_cgroups()}


def pod_cgroups() -> int:
    """Pod-level cgroups left under the kubepods hierarchy (memory controller on v1, the unified tree on v2)."""
    root = next((p for p in (Path("/sys/fs/cgroup/memory/kubepods"), Path("/sys/fs/cgroup/kubepods"))
                 if p.is_dir()), None)
    return sum(1 for d in root.rglob("pod*") if d.is_dir()) if root else 0


def machine() -> dict[str, str | int]:
    """The machine the figures were taken on."""
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "?")
    mem = next((int(line.split()[1]) // 1024 for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")), 0)
    return {"cpu": cpu, "cores": os.cpu_count() or 0, "memory_mib": mem, "kernel": os.uname().release,
            "cgroup": "v2" if Path("/sys/fs/cgroup/cgroup.controllers").exists() else "v1"}
