"""
kopflet.stats.summary (pure) and kopflet.stats.collector (the collector, against a fake runtime and a fake /proc).

The summary is compared as a whole dict, /metrics/resource as exact text: both are what metrics-server,
``kubectl get --raw .../stats/summary`` and Prometheus read. The expected resource metrics follow
upstream's collectors/resource_metrics_test.go (same timestamps, same values).
"""

from __future__ import annotations

import asyncio
import json
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from cri_client import CriError
from cri_client import types as cri
from kopflet.paths import Layout
from kopflet.stats import collector as agent_stats
from kopflet.stats import summary

# 2021-06-22T21:11:18.302091597Z, upstream's static test timestamp.
T0 = 1_624_396_278_302_091_597
T0_TEXT = "2021-06-22T21:11:18Z"
T0_MS = "1624396278302"
SECOND = 1_000_000_000
IMAGE_FS = "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs"


def text(block: str) -> str:
    return textwrap.dedent(block).lstrip("\n")


# ----------------------------------------------------------------------------------------- parsers

PROC_STAT = "cpu  100 5 20 1000 7 1 2 3 4 5\ncpu0 50 2 10 500 3 0 1 1 2 2\nbtime 1624390000\n"
CPU_CASES = {
    "busy-ticks-at-100hz": (PROC_STAT, 100, (100 + 5 + 20 + 1 + 2 + 3) * SECOND // 100),
    "busy-ticks-at-250hz": (PROC_STAT, 250, 131 * SECOND // 250),
    "old-kernel-short-line": ("cpu 10 0 10 99\n", 100, 20 * SECOND // 100),
}


@pytest.mark.parametrize(("proc_stat", "ticks", "expected"), CPU_CASES.values(), ids=CPU_CASES.keys())
def test_cpu_core_nanoseconds(proc_stat: str, ticks: int, expected: int) -> None:
    assert summary.cpu_core_nanoseconds(proc_stat, ticks) == expected


def test_cpu_core_nanoseconds_needs_the_cpu_line() -> None:
    with pytest.raises(ValueError):
        summary.cpu_core_nanoseconds("cpu0 1 2 3\n")


MEMINFO_TEXT = """\
MemTotal:        1000000 kB
MemFree:          200000 kB
MemAvailable:     700000 kB
Buffers:           10000 kB
Cached:           400000 kB
SwapCached:            0 kB
Inactive(file):   250000 kB
AnonPages:        300000 kB
SwapTotal:        100000 kB
SwapFree:          60000 kB
HugePages_Total:       0
"""
MEMINFO = summary.parse_meminfo(MEMINFO_TEXT)
KIB = 1024


def test_parse_meminfo_and_flat_keyed() -> None:
    assert MEMINFO["MemTotal"] == 1_000_000 * KIB
    assert MEMINFO["Inactive(file)"] == 250_000 * KIB
    assert MEMINFO["HugePages_Total"] == 0  # no unit: a count, not kB
    assert summary.parse_flat_keyed("anon 10\nfile 20\nbogus line here\nneg -1\n") == {
        "anon": 10, "file": 20, "neg": -1}


V1_STAT = {"total_inactive_file": 100 * KIB, "total_rss": 50 * KIB, "pgfault": 7, "pgmajfault": 1, "rss": 1}
V2_STAT = {"anon": 300 * KIB, "file": 500 * KIB, "inactive_file": 200 * KIB, "pgfault": 9, "pgmajfault": 2}
MEMORY_CASES: dict[str, tuple[dict[str, Any], cri.MemoryUsage]] = {
    "cgroup-v1-root": (
        {"cgroup_stat": V1_STAT, "cgroup_usage": 400 * KIB},
        cri.MemoryUsage(
            timestamp=T0,
            working_set_bytes=300 * KIB,
            available_bytes=1_000_000 * KIB - 300 * KIB,
            usage_bytes=400 * KIB,
            rss_bytes=50 * KIB,
            page_faults=7,
            major_page_faults=1,
        ),
    ),
    "cgroup-v2-root": (
        {"cgroup_stat": V2_STAT},
        cri.MemoryUsage(
            timestamp=T0,
            working_set_bytes=600 * KIB,
            available_bytes=1_000_000 * KIB - 600 * KIB,
            usage_bytes=800 * KIB,
            rss_bytes=300 * KIB,
            page_faults=9,
            major_page_faults=2,
        ),
    ),
    "meminfo-fallback": (
        {"vmstat": {"pgfault": 11, "pgmajfault": 3}},
        cri.MemoryUsage(
            timestamp=T0,
            # usage = AnonPages + Buffers + Cached + SwapCached; working set = usage - Inactive(file)
            working_set_bytes=(300_000 + 10_000 + 400_000 - 250_000) * KIB,
            available_bytes=(1_000_000 - 460_000) * KIB,
            usage_bytes=710_000 * KIB,
            rss_bytes=300_000 * KIB,
            page_faults=11,
            major_page_faults=3,
        ),
    ),
    "working-set-floors-at-zero": (
        {"cgroup_stat": {"total_inactive_file": 10 * KIB}, "cgroup_usage": 5 * KIB},
        cri.MemoryUsage(timestamp=T0, working_set_bytes=0, available_bytes=1_000_000 * KIB, usage_bytes=5 * KIB),
    ),
}


@pytest.mark.parametrize(("sources", "expected"), MEMORY_CASES.values(), ids=MEMORY_CASES.keys())
def test_node_memory(sources: dict[str, Any], expected: cri.MemoryUsage) -> None:
    assert summary.node_memory(MEMINFO, timestamp=T0, **sources) == expected


def test_node_memory_needs_mem_total_and_swap_needs_swap() -> None:
    assert summary.node_memory({}, timestamp=T0) is None
    assert summary.node_swap({}, timestamp=T0) is None
    assert summary.node_swap(MEMINFO, timestamp=T0) == cri.SwapUsage(
        timestamp=T0, swap_usage_bytes=40_000 * KIB, swap_available_bytes=60_000 * KIB
    )


RLIMIT_CASES = {
    "both-limits": (("32768\n", "192730\n", "0.77 1.20 1.15 2/145 3120\n"), summary.Rlimit(timestamp=T0, max_pid=32768,
                                                                                           running_processes=145)),
    "threads-max-smaller": (("4194304\n", "60000\n", None), summary.Rlimit(timestamp=T0, max_pid=60000)),
    "nothing-readable": ((None, "garbage", "x y"), summary.Rlimit(timestamp=T0)),
}  # fmt: skip


@pytest.mark.parametrize(("files", "expected"), RLIMIT_CASES.values(), ids=RLIMIT_CASES.keys())
def test_node_rlimit(files: tuple[str | None, str | None, str | None], expected: summary.Rlimit) -> None:
    pid_max, threads_max, loadavg = files
    assert summary.node_rlimit(timestamp=T0, pid_max=pid_max, threads_max=threads_max, loadavg=loadavg) == expected


def cpu(ts: int, total: int | None, rate: int | None = None) -> cri.CpuUsage:
    return cri.CpuUsage(timestamp=ts, usage_core_nano_seconds=total, usage_nano_cores=rate)


NANO_CORES = {
    "half-a-core": (cpu(T0, 10 * SECOND), cpu(T0 + 2 * SECOND, 11 * SECOND), 500_000_000),
    "no-previous": (None, cpu(T0, 1), None),
    "counter-reset": (cpu(T0, 10 * SECOND), cpu(T0 + SECOND, SECOND), None),
    "no-time-passed": (cpu(T0, 1), cpu(T0, 2), None),
    "no-counter": (cpu(T0, None), cpu(T0 + SECOND, 5), None),
}


@pytest.mark.parametrize(("previous", "current", "expected"), NANO_CORES.values(), ids=NANO_CORES.keys())
def test_usage_nano_cores(previous: cri.CpuUsage | None, current: cri.CpuUsage, expected: int | None) -> None:
    assert summary.usage_nano_cores(previous, current) == expected


def test_with_nano_cores_keeps_the_runtimes_value() -> None:
    previous = cpu(T0, 0)
    assert summary.with_nano_cores(cpu(T0 + SECOND, SECOND, 7), previous) == cpu(T0 + SECOND, SECOND, 7)
    assert summary.with_nano_cores(cpu(T0 + SECOND, SECOND), previous) == cpu(T0 + SECOND, SECOND, SECOND)
    assert summary.with_nano_cores(None, previous) is None


RFC3339 = {"epoch-second": (T0, T0_TEXT), "never": (0, None), "negative": (-5, None)}


@pytest.mark.parametrize(("ns", "expected"), RFC3339.values(), ids=RFC3339.keys())
def test_rfc3339(ns: int, expected: str | None) -> None:
    assert summary.rfc3339(ns) == expected


# ------------------------------------------------------------------------------------- CRI fixtures


def sandbox(
    sid: str, name: str, *, created: int = T0 - 60 * SECOND, ready: bool = True, ns: str = "default"
) -> cri.PodSandbox:
    return cri.PodSandbox(
        id=sid,
        metadata=cri.PodSandboxMetadata(name=name, namespace=ns, uid=f"uid-{name}"),
        state=cri.SandboxState.READY if ready else cri.SandboxState.NOTREADY,
        created_at=created,
    )


def container(cid: str, sid: str, name: str, *, running: bool = True, created: int = T0 - 30 * SECOND) -> cri.Container:
    return cri.Container(
        id=cid,
        pod_sandbox_id=sid,
        metadata=cri.ContainerMetadata(name=name),
        state=cri.ContainerState.RUNNING if running else cri.ContainerState.EXITED,
        created_at=created,
        labels={"io.kubernetes.container.name": name},
    )


def cstats(cid: str, name: str = "", **fields: Any) -> cri.ContainerStats:
    metadata = cri.ContainerMetadata(name=name) if name else None
    return cri.ContainerStats(id=cid, metadata=metadata, **fields)


WEB_CPU = cpu(T0, 10 * SECOND, 250_000_000)
WEB_MEMORY = cri.MemoryUsage(
    timestamp=T0, working_set_bytes=1000, available_bytes=0, usage_bytes=2000, rss_bytes=500, page_faults=3
)
WEB_LAYER = cri.FilesystemUsage(mountpoint=IMAGE_FS, timestamp=0, used_bytes=12288, inodes_used=6)


def test_pod_samples_selects_running_containers_of_current_sandboxes() -> None:
    sandboxes = [
        sandbox("old", "web", created=T0 - 90 * SECOND, ready=False),
        sandbox("new", "web"),
        sandbox("idle", "idle"),  # only an exited container: not reported
        sandbox("z", "zeta", ns="a-first"),
    ]
    containers = [
        container("c-app", "new", "app"),
        container("c-side", "new", "sidecar"),
        container("c-old", "old", "app"),
        container("c-exited", "idle", "app", running=False),
        container("c-z", "z", "z"),
    ]
    stats_list = [
        cstats("c-side", "sidecar"),
        cstats("c-app"),  # no metadata: the name comes from the container (or its label)
        cstats("c-old", "app"),
        cstats("c-exited", "app"),
        cstats("c-z", "z"),
        cstats("c-unknown", "ghost"),
    ]
    web_sandbox_stats = cri.PodSandboxStats(id="new")
    logs = {"c-app": cri.FilesystemUsage(used_bytes=1)}
    pods = summary.pod_samples(sandboxes, containers, stats_list, {"new": web_sandbox_stats}, logs)
    assert [(p.namespace, p.name, p.sandbox_id) for p in pods] == [("a-first", "zeta", "z"), ("default", "web", "new")]
    web = pods[1]
    assert web.uid == "uid-web" and web.start_time == T0 - 60 * SECOND and web.sandbox is web_sandbox_stats
    assert [(c.name, c.stats.id, c.start_time) for c in web.containers] == [
        ("app", "c-app", T0 - 30 * SECOND),
        ("sidecar", "c-side", T0 - 30 * SECOND),
    ]
    assert web.containers[0].logs == logs["c-app"] and web.containers[1].logs is None
    assert pods[0].sandbox is None


def test_pod_identity_falls_back_to_the_labels() -> None:
    labelled = cri.PodSandbox(
        id="s",
        labels={
            "io.kubernetes.pod.name": "p",
            "io.kubernetes.pod.namespace": "n",
            "io.kubernetes.pod.uid": "u",
        },
    )
    bare = cri.Container(id="c", pod_sandbox_id="s", state=cri.ContainerState.RUNNING)
    (pod,) = summary.pod_samples([labelled], [bare], [cstats("c", labels={"io.kubernetes.container.name": "main"})])
    assert (pod.namespace, pod.name, pod.uid, pod.containers[0].name) == ("n", "p", "u", "main")


# ------------------------------------------------------------------------------------------ snapshot

ROOT_FS = summary.FsInfo(
    timestamp=T0, capacity_bytes=1000, available_bytes=600, used_bytes=400, inodes=100, inodes_free=70
)
IMAGE_FS_SIZE = summary.FsInfo(
    timestamp=T0, capacity_bytes=5000, available_bytes=4000, used_bytes=1000, inodes=500, inodes_free=450
)
NODE = summary.NodeSample(
    node_name="node-1",
    boot_time=T0 - 3600 * SECOND,
    cpu=cpu(T0, 10 * SECOND),
    memory=cri.MemoryUsage(timestamp=T0, working_set_bytes=1000, available_bytes=9000, usage_bytes=1500),
    swap=cri.SwapUsage(timestamp=T0 + 10 * SECOND, swap_usage_bytes=500, swap_available_bytes=0),
    root_fs=ROOT_FS,
    image_fs=cri.FilesystemUsage(mountpoint=IMAGE_FS, timestamp=T0, used_bytes=3000, inodes_used=30),
    rlimit=summary.Rlimit(timestamp=T0, max_pid=32768, running_processes=145),
)
WEB = summary.PodSample(
    name="web",
    namespace="default",
    uid="uid-web",
    start_time=T0 - 60 * SECOND,
    sandbox_id="sb-web",
    sandbox=cri.PodSandboxStats(
        id="sb-web",
        linux=cri.LinuxPodSandboxStats(
            cpu=cpu(T0, 11 * SECOND, 300_000_000),
            memory=cri.MemoryUsage(timestamp=T0, working_set_bytes=1500, usage_bytes=2500),
            network=cri.NetworkUsage(
                timestamp=0,  # as containerd 1.6 sends it
                default_interface=cri.NetworkInterfaceUsage(name="eth0", rx_bytes=540, rx_errors=0, tx_bytes=382),
            ),
            process=cri.ProcessUsage(timestamp=T0, process_count=2),
        ),
    ),
    containers=(
        summary.ContainerSample(
            name="app",
            start_time=T0 - 30 * SECOND,
            stats=cstats("c-app", "app", cpu=WEB_CPU, memory=WEB_MEMORY, writable_layer=WEB_LAYER),
            logs=cri.FilesystemUsage(timestamp=T0, used_bytes=4096, inodes_used=2),
        ),
    ),
)
# A pod whose sandbox could not be measured: its CPU and memory are its containers' sums.
BATCH = summary.PodSample(
    name="batch",
    namespace="jobs",
    uid="uid-batch",
    start_time=T0 - 60 * SECOND,
    sandbox_id="sb-batch",
    containers=(
        summary.ContainerSample(
            name="a", start_time=T0 - 20 * SECOND, stats=cstats("c-a", "a", cpu=cpu(T0, 2 * SECOND), memory=WEB_MEMORY)
        ),
        summary.ContainerSample(name="b", start_time=0, stats=cstats("c-b", "b")),  # the runtime had nothing yet
    ),
)
NOW = T0 + 5 * SECOND
NOW_TEXT = "2021-06-22T21:11:23Z"
NOW_MS = "1624396283302"
SNAPSHOT = summary.StatsSnapshot(timestamp=NOW, node=NODE, pods=(BATCH, WEB), filesystems={IMAGE_FS: IMAGE_FS_SIZE})

ROOT_FS_JSON = {"availableBytes": 600, "capacityBytes": 1000, "inodesFree": 70, "inodes": 100}
IMAGE_FS_JSON = {
    "time": T0_TEXT,
    "availableBytes": 4000,
    "capacityBytes": 5000,
    "usedBytes": 3000,
    "inodesFree": 450,
    "inodes": 500,
    "inodesUsed": 30,
}
ZERO_SWAP_NOW = {"time": NOW_TEXT, "swapAvailableBytes": 0, "swapUsageBytes": 0}
EXPECTED_SUMMARY = {
    "node": {
        "nodeName": "node-1",
        "startTime": "2021-06-22T20:11:18Z",
        "cpu": {"time": T0_TEXT, "usageCoreNanoSeconds": 10 * SECOND},
        "memory": {"time": T0_TEXT, "availableBytes": 9000, "usageBytes": 1500, "workingSetBytes": 1000},
        "fs": {"time": T0_TEXT, **ROOT_FS_JSON, "usedBytes": 400, "inodesUsed": 30},
        "runtime": {"imageFs": IMAGE_FS_JSON, "containerFs": IMAGE_FS_JSON},
        "rlimit": {"time": T0_TEXT, "maxpid": 32768, "curproc": 145},
        "swap": {"time": "2021-06-22T21:11:28Z", "swapAvailableBytes": 0, "swapUsageBytes": 500},
    },
    "pods": [
        {
            "podRef": {"name": "batch", "namespace": "jobs", "uid": "uid-batch"},
            "startTime": "2021-06-22T21:10:18Z",
            "containers": [
                {
                    "name": "a",
                    "startTime": "2021-06-22T21:10:58Z",
                    "cpu": {"time": T0_TEXT, "usageCoreNanoSeconds": 2 * SECOND},
                    "memory": {
                        "time": T0_TEXT,
                        "availableBytes": 0,
                        "usageBytes": 2000,
                        "workingSetBytes": 1000,
                        "rssBytes": 500,
                        "pageFaults": 3,
                    },
                    "rootfs": {"time": None},
                    "swap": ZERO_SWAP_NOW,
                },
                {
                    "name": "b",
                    "startTime": None,
                    "cpu": {"time": NOW_TEXT, "usageNanoCores": 0, "usageCoreNanoSeconds": 0},
                    "memory": {"time": NOW_TEXT, "usageBytes": 0, "workingSetBytes": 0, "rssBytes": 0},
                    "rootfs": {"time": None},
                    "swap": ZERO_SWAP_NOW,
                },
            ],
            # The containers' sums, stamped with the last container's time (upstream addPodCPUMemoryStats).
            "cpu": {"time": NOW_TEXT, "usageNanoCores": 0, "usageCoreNanoSeconds": 2 * SECOND},
            "memory": {
                "time": NOW_TEXT,
                "availableBytes": 0,
                "usageBytes": 2000,
                "workingSetBytes": 1000,
                "rssBytes": 500,
                "pageFaults": 3,
                "majorPageFaults": 0,
            },
            "ephemeral-storage": {"time": T0_TEXT, **ROOT_FS_JSON},
            "swap": ZERO_SWAP_NOW,
        },
        {
            "podRef": {"name": "web", "namespace": "default", "uid": "uid-web"},
            "startTime": "2021-06-22T21:10:18Z",
            "containers": [
                {
                    "name": "app",
                    "startTime": "2021-06-22T21:10:48Z",
                    "cpu": {"time": T0_TEXT, "usageNanoCores": 250_000_000, "usageCoreNanoSeconds": 10 * SECOND},
                    "memory": {
                        "time": T0_TEXT,
                        "availableBytes": 0,
                        "usageBytes": 2000,
                        "workingSetBytes": 1000,
                        "rssBytes": 500,
                        "pageFaults": 3,
                    },
                    # The writable layer (time 0 from containerd: the collection's time) on the image fs.
                    "rootfs": {
                        "time": NOW_TEXT,
                        "availableBytes": 4000,
                        "capacityBytes": 5000,
                        "usedBytes": 12288,
                        "inodesFree": 450,
                        "inodes": 500,
                        "inodesUsed": 6,
                    },
                    "logs": {"time": T0_TEXT, **ROOT_FS_JSON, "usedBytes": 4096, "inodesUsed": 2},
                    "swap": ZERO_SWAP_NOW,
                },
            ],
            "cpu": {"time": T0_TEXT, "usageNanoCores": 300_000_000, "usageCoreNanoSeconds": 11 * SECOND},
            "memory": {"time": T0_TEXT, "usageBytes": 2500, "workingSetBytes": 1500},
            "network": {"time": T0_TEXT, "name": "eth0", "rxBytes": 540, "rxErrors": 0, "txBytes": 382},
            # Writable layers plus logs, on the root filesystem (upstream calcEphemeralStorage).
            "ephemeral-storage": {"time": T0_TEXT, **ROOT_FS_JSON, "usedBytes": 12288 + 4096, "inodesUsed": 8},
            "process_stats": {"process_count": 2},
            "swap": ZERO_SWAP_NOW,
        },
    ],
}


def test_summary() -> None:
    assert summary.summary(SNAPSHOT) == EXPECTED_SUMMARY


def test_summary_json_is_indented_like_go_restful() -> None:
    body = agent_stats.summary_json(SNAPSHOT)
    assert json.loads(body) == EXPECTED_SUMMARY
    assert body.startswith('{\n "node": {\n  "nodeName": "node-1",\n')


def test_summary_of_a_failed_collection_has_no_pods() -> None:
    failed = summary.StatsSnapshot(timestamp=NOW, node=summary.NodeSample(node_name="n"), pods=(WEB,), error="down")
    assert summary.summary(failed) == {"node": {"nodeName": "n", "startTime": None}, "pods": []}


EXPECTED_RESOURCE_METRICS = text(
    f"""
    # HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
    # TYPE container_cpu_usage_seconds_total counter
    container_cpu_usage_seconds_total{{container="a",namespace="jobs",pod="batch"}} 2 {T0_MS}
    container_cpu_usage_seconds_total{{container="app",namespace="default",pod="web"}} 10 {T0_MS}
    container_cpu_usage_seconds_total{{container="b",namespace="jobs",pod="batch"}} 0 {NOW_MS}
    # HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
    # TYPE container_memory_working_set_bytes gauge
    container_memory_working_set_bytes{{container="a",namespace="jobs",pod="batch"}} 1000 {T0_MS}
    container_memory_working_set_bytes{{container="app",namespace="default",pod="web"}} 1000 {T0_MS}
    container_memory_working_set_bytes{{container="b",namespace="jobs",pod="batch"}} 0 {NOW_MS}
    # HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
    # TYPE container_start_time_seconds gauge
    container_start_time_seconds{{container="a",namespace="jobs",pod="batch"}} 1.6243962583020916e+09
    container_start_time_seconds{{container="app",namespace="default",pod="web"}} 1.6243962483020916e+09
    # HELP container_swap_limit_bytes [ALPHA] Current amount of the container swap limit in bytes. \
Reported only on non-windows systems
    # TYPE container_swap_limit_bytes gauge
    container_swap_limit_bytes{{container="a",namespace="jobs",pod="batch"}} 0 {NOW_MS}
    container_swap_limit_bytes{{container="app",namespace="default",pod="web"}} 0 {NOW_MS}
    container_swap_limit_bytes{{container="b",namespace="jobs",pod="batch"}} 0 {NOW_MS}
    # HELP container_swap_usage_bytes [ALPHA] Current amount of the container swap usage in bytes. \
Reported only on non-windows systems
    # TYPE container_swap_usage_bytes gauge
    container_swap_usage_bytes{{container="a",namespace="jobs",pod="batch"}} 0 {NOW_MS}
    container_swap_usage_bytes{{container="app",namespace="default",pod="web"}} 0 {NOW_MS}
    container_swap_usage_bytes{{container="b",namespace="jobs",pod="batch"}} 0 {NOW_MS}
    # HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
    # TYPE node_cpu_usage_seconds_total counter
    node_cpu_usage_seconds_total 10 {T0_MS}
    # HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
    # TYPE node_memory_working_set_bytes gauge
    node_memory_working_set_bytes 1000 {T0_MS}
    # HELP node_swap_usage_bytes [ALPHA] Current swap usage of the node in bytes. Reported only on non-windows systems
    # TYPE node_swap_usage_bytes gauge
    node_swap_usage_bytes 500 1624396288302
    # HELP pod_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the pod in core-seconds
    # TYPE pod_cpu_usage_seconds_total counter
    pod_cpu_usage_seconds_total{{namespace="default",pod="web"}} 11 {T0_MS}
    pod_cpu_usage_seconds_total{{namespace="jobs",pod="batch"}} 2 {NOW_MS}
    # HELP pod_memory_working_set_bytes [STABLE] Current working set of the pod in bytes
    # TYPE pod_memory_working_set_bytes gauge
    pod_memory_working_set_bytes{{namespace="default",pod="web"}} 1500 {T0_MS}
    pod_memory_working_set_bytes{{namespace="jobs",pod="batch"}} 1000 {NOW_MS}
    # HELP pod_swap_usage_bytes [ALPHA] Current amount of the pod swap usage in bytes. Reported only on non-windows \
systems
    # TYPE pod_swap_usage_bytes gauge
    pod_swap_usage_bytes{{namespace="default",pod="web"}} 0 {NOW_MS}
    pod_swap_usage_bytes{{namespace="jobs",pod="batch"}} 0 {NOW_MS}
    # HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
    # TYPE resource_scrape_error gauge
    resource_scrape_error 0
    """
)


def test_resource_metrics() -> None:
    assert summary.resource_metrics(SNAPSHOT) == EXPECTED_RESOURCE_METRICS


def test_resource_metrics_of_a_failed_collection_is_only_the_error() -> None:
    failed = summary.StatsSnapshot(timestamp=NOW, node=NODE, pods=(WEB,), error="runtime down")
    assert summary.resource_metrics(failed) == text(
        """
        # HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
        # TYPE resource_scrape_error gauge
        resource_scrape_error 1
        """
    )


def test_resource_metrics_escape_labels_and_skip_unknown_node_numbers() -> None:
    odd = summary.PodSample(
        name='we"ird',
        namespace="ns",
        uid="u",
        containers=(summary.ContainerSample(name="c\\1", start_time=0, stats=cstats("x", cpu=cpu(T0, SECOND))),),
    )
    snapshot = summary.StatsSnapshot(timestamp=NOW, node=summary.NodeSample(node_name="n"), pods=(odd,))
    out = summary.resource_metrics(snapshot)
    assert f'container_cpu_usage_seconds_total{{container="c\\\\1",namespace="ns",pod="we\\"ird"}} 1 {T0_MS}\n' in out
    assert "node_" not in out


# ---------------------------------------------------------------------------------- agent collector


class FakeSandboxes:
    def __init__(self, cri_: FakeCri) -> None:
        self.cri = cri_

    async def list(self) -> list[cri.PodSandbox]:
        return self.cri.sandbox_list

    async def list_stats(self) -> list[cri.PodSandboxStats]:
        raise AssertionError("sandbox stats asked: containerd 1.6 dies of concurrent ones")

    async def stats(self, sandbox_id: str) -> cri.PodSandboxStats:
        raise AssertionError("sandbox stats asked: containerd 1.6 dies of concurrent ones")


class FakeContainers:
    def __init__(self, cri_: FakeCri) -> None:
        self.cri = cri_

    async def list(self) -> list[cri.Container]:
        if self.cri.down:
            raise CriError("UNAVAILABLE", "connection refused")
        return self.cri.container_list

    async def list_stats(self) -> list[cri.ContainerStats]:
        return self.cri.container_stats


class FakeImages:
    def __init__(self, cri_: FakeCri) -> None:
        self.cri = cri_

    async def fs_info(self) -> cri.ImageFsInfo:
        return cri.ImageFsInfo(image_filesystems=(cri.FilesystemUsage(mountpoint=self.cri.image_fs, used_bytes=9),))


class FakeCri:
    """Stands in for CriClient: the few stats calls the collector makes, answered from plain lists."""

    def __init__(self, image_fs: str) -> None:
        self.image_fs = image_fs
        self.sandbox_list = [sandbox("sb-1", "web"), sandbox("sb-2", "other")]
        self.container_list = [container("c-1", "sb-1", "app"), container("c-2", "sb-2", "main")]
        self.container_stats = [
            cstats("c-1", "app", cpu=cpu(T0, SECOND)),  # no usage_nano_cores: the collector computes it
            cstats("c-2", "main", cpu=cpu(T0, SECOND, 5)),
        ]
        self.down = False
        self.sandboxes = FakeSandboxes(self)
        self.containers = FakeContainers(self)
        self.images = FakeImages(self)


@pytest.fixture
def fake_node(tmp_path: Path) -> dict[str, Path]:
    """A /proc with the files the collector reads, a cgroup v1 root with only web's pod cgroup (the node's memory
    falls back to meminfo), a log tree."""
    proc = tmp_path / "proc"
    (proc / "sys" / "kernel").mkdir(parents=True)
    (proc / "stat").write_text(PROC_STAT)
    (proc / "meminfo").write_text(MEMINFO_TEXT)
    (proc / "vmstat").write_text("pgfault 11\npgmajfault 3\n")
    (proc / "loadavg").write_text("0.77 1.20 1.15 2/145 3120\n")
    (proc / "sys" / "kernel" / "pid_max").write_text("32768\n")
    (proc / "sys" / "kernel" / "threads-max").write_text("192730\n")
    cgroup = tmp_path / "cgroup"
    (cgroup / "memory" / "kubepods" / "burstable" / "poduid-web").mkdir(parents=True)
    (cgroup / "memory" / "kubepods" / "burstable" / "poduid-web" / "memory.usage_in_bytes").write_text("4096\n")
    (cgroup / "cpuacct" / "kubepods" / "burstable" / "poduid-web").mkdir(parents=True)
    (cgroup / "cpuacct" / "kubepods" / "burstable" / "poduid-web" / "cpuacct.usage").write_text("3\n")
    logs = tmp_path / "logs"
    (logs / "default_web_uid-web" / "app").mkdir(parents=True)
    (logs / "default_web_uid-web" / "app" / "0.log").write_text("hello\n")
    root = tmp_path / "root"
    root.mkdir()
    return {"proc": proc, "cgroup": cgroup, "logs": logs, "root": root}


def make_collector(fake: FakeCri, paths: dict[str, Path], **options: Any) -> agent_stats.StatsCollector:
    client: Any = fake
    return agent_stats.StatsCollector(
        client,
        node_name="node-1",
        layout=Layout(str(paths["root"]), str(paths["logs"])),
        proc=str(paths["proc"]),
        cgroup_root=str(paths["cgroup"]),
        **options,
    )


async def test_collector_gathers_node_pods_and_filesystems(fake_node: dict[str, Path]) -> None:
    fake = FakeCri(image_fs=str(fake_node["root"]))
    collector = make_collector(fake, fake_node)
    first = await collector.collect()
    assert first.error == ""
    node = first.node
    assert node.node_name == "node-1" and node.boot_time == 1624390000 * SECOND
    assert node.cpu is not None and node.cpu.usage_core_nano_seconds == 131 * SECOND // 100
    assert node.cpu.usage_nano_cores is None  # no earlier sample yet
    assert node.memory == summary.node_memory(
        MEMINFO, timestamp=node.memory.timestamp, vmstat={"pgfault": 11, "pgmajfault": 3}
    )
    assert node.rlimit is not None and (node.rlimit.max_pid, node.rlimit.running_processes) == (32768, 145)
    assert node.root_fs is not None and node.root_fs.capacity_bytes > 0
    assert node.image_fs is not None and node.image_fs.used_bytes == 9
    assert set(first.filesystems) == {str(fake_node["root"])}
    # web's own numbers come from its pod cgroup; other has none, so its containers' are summed
    assert [(p.name, p.sandbox is not None) for p in first.pods] == [("other", False), ("web", True)]
    web_sandbox = first.pods[1].sandbox
    assert web_sandbox is not None and web_sandbox.linux is not None and web_sandbox.linux.cpu is not None
    assert web_sandbox.id == "sb-1" and web_sandbox.linux.cpu.usage_core_nano_seconds == 3
    app = first.pods[1].containers[0]
    assert app.logs is not None and app.logs.used_bytes and app.logs.inodes_used == 2  # the dir and 0.log

    # The second collection computes usageNanoCores where the runtime left it unset, and keeps the runtime's.
    fake.container_stats = [
        cstats("c-1", "app", cpu=cpu(T0 + SECOND, 2 * SECOND)),
        cstats("c-2", "main", cpu=cpu(T0 + SECOND, 2 * SECOND, 5)),
    ]
    second = await collector.collect()
    cpus = {c.name: c.stats.cpu for p in second.pods for c in p.containers}
    assert cpus["app"] == cpu(T0 + SECOND, 2 * SECOND, SECOND)
    assert cpus["main"] == cpu(T0 + SECOND, 2 * SECOND, 5)
    assert second.node.cpu is not None and second.node.cpu.usage_nano_cores is not None


async def test_collector_reports_a_runtime_failure_as_an_error(fake_node: dict[str, Path]) -> None:
    fake = FakeCri(image_fs=str(fake_node["root"]))
    fake.down = True
    snapshot = await make_collector(fake, fake_node).collect()
    assert "UNAVAILABLE" in snapshot.error and snapshot.pods == ()
    assert snapshot.node.cpu is not None  # the node part is still measured
    assert agent_stats.resource_metrics(snapshot).endswith("resource_scrape_error 1\n")
    collector = make_collector(fake, fake_node)
    assert (await collector.resource_metrics()).endswith("resource_scrape_error 1\n")
    with pytest.raises(agent_stats.StatsUnavailable, match="UNAVAILABLE"):
        await collector.summary()  # upstream: 500
    fake.down = False
    assert [p["podRef"]["name"] for p in (await collector.summary())["pods"]] == ["other", "web"]


async def test_concurrent_scrapes_share_one_collection(fake_node: dict[str, Path]) -> None:
    fake = FakeCri(image_fs=str(fake_node["root"]))
    collector = make_collector(fake, fake_node)
    first, second = await asyncio.gather(collector.collect(), collector.collect())
    assert first is second


# ------------------------------------------------------------------------------ local storage (du, volumes)


def _blocks(*paths: Path) -> int:
    return sum(p.lstat().st_blocks * 512 for p in paths)


def test_du_counts_blocks_once_per_inode_without_following_links(tmp_path: Path) -> None:
    top = tmp_path / "vol"
    (top / "sub").mkdir(parents=True)
    (top / "a").write_bytes(b"x" * 10000)
    (top / "sub" / "b").write_bytes(b"y" * 5000)
    (top / "hard").hardlink_to(top / "a")  # the same inode: counted once
    outside = tmp_path / "outside"
    outside.write_bytes(b"z" * 50000)
    (top / "link").symlink_to(outside)  # the link itself, not its target
    usage = agent_stats.du(str(top), 7)
    assert usage is not None
    assert usage.used_bytes == _blocks(top, top / "sub", top / "a", top / "sub" / "b", top / "link")
    assert (usage.inodes_used, usage.timestamp, usage.mountpoint) == (5, 7, str(top))
    single = agent_stats.du(str(top / "a"), 7)
    assert single is not None and (single.used_bytes, single.inodes_used) == (_blocks(top / "a"), 1)
    assert agent_stats.du(str(tmp_path / "missing"), 7) is None


def _pod_files(root: Path, uid: str) -> Path:
    volumes = root / "pods" / uid / "volumes"
    for plugin, name in (("kubernetes.io~empty-dir", "scratch"), ("kubernetes.io~empty-dir", "shm"),
                         ("kubernetes.io~configmap", "conf"), ("kubernetes.io~secret", "token")):
        (volumes / plugin / name).mkdir(parents=True)
        (volumes / plugin / name / "f").write_bytes(b"d" * 20000)
    (root / "pods" / uid / "etc-hosts").write_text("127.0.0.1 localhost\n")
    return volumes


def test_pod_volumes_measures_the_volumes_upstream_measures(tmp_path: Path) -> None:
    volumes = _pod_files(tmp_path, "u1")
    found = agent_stats.pod_volumes(Layout(str(tmp_path)), "u1", "")
    assert sorted(found) == ["conf", "scratch", "shm", "token"]  # every MetricsDu plugin, secrets too
    scratch = volumes / "kubernetes.io~empty-dir" / "scratch"
    assert found["scratch"].usage.used_bytes == _blocks(scratch, scratch / "f")
    assert agent_stats.pod_volumes(Layout(str(tmp_path)), "nobody", "") == {}


async def test_collector_measures_volumes_each_minute_and_host_files_each_time(
        fake_node: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    volumes = _pod_files(fake_node["root"], "uid-web")
    (fake_node["logs"] / "default_web_uid-web" / "stray.log").write_bytes(b"s" * 9000)
    collector = make_collector(FakeCri(image_fs=str(fake_node["root"])), fake_node)
    web = (await collector.collect()).pods[1]
    scratch = volumes / "kubernetes.io~empty-dir" / "scratch"
    assert web.volumes["scratch"].usage.used_bytes == _blocks(scratch, scratch / "f")
    assert web.etc_hosts is not None and web.etc_hosts.inodes_used == 1
    stray = fake_node["logs"] / "default_web_uid-web" / "stray.log"
    assert web.pod_logs is not None and web.pod_logs.used_bytes == _blocks(stray)  # not the app/ directory
    other = (await collector.collect()).pods[0]
    assert other.volumes == {} and other.etc_hosts is None and other.pod_logs is None
    usage = summary.eviction_usage(web)
    assert usage.volumes["scratch"].used_bytes == web.volumes["scratch"].usage.used_bytes
    assert usage.etc_hosts is not None and usage.pod_logs is not None

    (scratch / "more").write_bytes(b"m" * 100000)
    again = (await collector.collect()).pods[1]
    assert again.volumes["scratch"] == web.volumes["scratch"]  # within VOLUME_STATS_PERIOD: reused
    monkeypatch.setattr(collector, "volume_stats_period", 1e-9)  # the period has gone by
    later = (await collector.collect()).pods[1]
    assert later.volumes["scratch"].usage.used_bytes == _blocks(scratch, scratch / "f", scratch / "more")


@pytest.mark.parametrize("period", [0.0, -60.0])
async def test_collector_measures_no_volumes_when_the_period_is_not_positive(
        fake_node: dict[str, Path], period: float) -> None:
    """volumeStatsAggPeriod 0 (the flag's; the file's 0 is the default) or negative: upstream's fsResourceAnalyzer
    never starts, so the summary has no volume stats (the pod's logs and etc-hosts are still measured)."""
    _pod_files(fake_node["root"], "uid-web")
    collector = make_collector(FakeCri(image_fs=str(fake_node["root"])), fake_node, volume_stats_period=period)
    web = (await collector.collect()).pods[1]
    assert web.volumes == {} and web.etc_hosts is not None
    assert "volume" not in (await collector.summary())["pods"][1]


async def test_collector_reports_the_volumes_in_the_summary(fake_node: dict[str, Path]) -> None:
    volumes = _pod_files(fake_node["root"], "uid-web")
    scratch = volumes / "kubernetes.io~empty-dir" / "scratch"
    (scratch / "big").write_bytes(b"b" * (2 << 20))
    collector = make_collector(FakeCri(image_fs=str(fake_node["root"])), fake_node)
    other, web = (await collector.summary())["pods"]
    assert "volume" not in other  # no volumes directory: the list is left out (omitempty)
    listed = {v["name"]: v for v in web["volume"]}
    assert [v["name"] for v in web["volume"]] == ["conf", "scratch", "shm", "token"]  # local ephemeral first
    assert listed["scratch"]["usedBytes"] == _blocks(scratch, scratch / "f", scratch / "big") >= 2 << 20
    assert listed["scratch"]["inodesUsed"] == 3
    assert set(listed["scratch"]) == {"time", "availableBytes", "capacityBytes", "usedBytes", "inodesFree", "inodes",
                                      "inodesUsed", "name"}
    # ephemeral-storage: the disk volumes (conf, scratch, shm: no tmpfs here) and etc-hosts. The container's logs
    # count only with its writable layer (upstream addContainerUsage), which this runtime did not report.
    etc_hosts = fake_node["root"] / "pods" / "uid-web" / "etc-hosts"
    disk = sum(listed[name]["usedBytes"] for name in ("conf", "scratch", "shm"))
    assert web["ephemeral-storage"]["usedBytes"] == disk + _blocks(etc_hosts)


async def test_a_slow_volume_measurement_does_not_hold_up_the_collection(
        fake_node: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    _pod_files(fake_node["root"], "uid-web")
    release, calls = threading.Event(), []
    measure = agent_stats.pod_volumes

    def slow(layout: Layout, uid: str, mountinfo: str) -> dict[str, summary.VolumeSample]:
        calls.append(uid)
        release.wait(10)
        return measure(layout, uid, mountinfo)

    monkeypatch.setattr(agent_stats, "pod_volumes", slow)
    monkeypatch.setattr(agent_stats, "VOLUME_STATS_WAIT", 0.05)
    collector = make_collector(FakeCri(image_fs=str(fake_node["root"])), fake_node)
    first = await collector.collect()
    assert [p.volumes for p in first.pods] == [{}, {}]  # not measured yet: reported without volumes
    assert all(p.etc_hosts is not None for p in first.pods[1:])  # the rest of the pod is measured as before
    second = await collector.collect()  # still measuring: no second measurement is started
    assert [p.volumes for p in second.pods] == [{}, {}] and calls == ["uid-other"]  # one pod after the other
    release.set()
    measuring = collector._measuring
    assert measuring is not None
    await measuring
    third = await collector.collect()  # the finished measurement is fresh: reported, not measured again
    assert sorted(third.pods[1].volumes) == ["conf", "scratch", "shm", "token"]
    assert sorted(calls) == ["uid-other", "uid-web"]


async def test_close_leaves_no_volume_measurement_pending(fake_node: dict[str, Path],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _pod_files(fake_node["root"], "uid-web")
    release = threading.Event()
    measure = agent_stats.pod_volumes

    def slow(layout: Layout, uid: str, mountinfo: str) -> dict[str, summary.VolumeSample]:
        release.wait(10)
        return measure(layout, uid, mountinfo)

    monkeypatch.setattr(agent_stats, "pod_volumes", slow)
    monkeypatch.setattr(agent_stats, "VOLUME_STATS_WAIT", 0.05)
    collector = make_collector(FakeCri(image_fs=str(fake_node["root"])), fake_node)
    await collector.collect()
    measuring = collector._measuring
    assert measuring is not None and not measuring.done()
    await collector.close()
    assert measuring.cancelled()
    release.set()
