"""
kopflet.stats.cadvisor (pure): the ``/metrics/cadvisor`` text, checked line by line.

The expected lines follow cAdvisor's metrics/prometheus.go and prometheus_machine.go (names, help texts, types,
extra labels, millisecond sample times) with the labels the kubelet's containerPrometheusLabelsFunc puts on a
containerd node (pkg/kubelet/server/server.go): the layout of a real ``kubectl get --raw
/api/v1/nodes/<node>/proxy/metrics/cadvisor``. Also the small parsers the collector feeds it with, and the
collector's cgroup, machine and mount reads against a fake /proc, /sys and /etc.
"""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest

from cri_client import types as cri
from kopflet.paths import Layout
from kopflet.stats import cadvisor, summary
from kopflet.stats import collector as agent_stats

# 2021-06-22T21:11:18.302091597Z, the static timestamp of upstream's stats tests.
T0 = 1_624_396_278_302_091_597
SECOND = 1_000_000_000
IMAGE_FS = "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs"
POD_CGROUP = "/kubepods/burstable/poduid-web"
GIB = 1 << 30


def text(block: str) -> str:
    return textwrap.dedent(block).lstrip("\n")


def family(exposition: str, name: str) -> list[str]:
    """The HELP, TYPE and sample lines of one family (an absent family is [])."""
    return [line for line in exposition.splitlines()
            if line.split("{")[0].split(" ")[0] == name or line.startswith((f"# HELP {name} ", f"# TYPE {name} "))]


ETH0 = cri.NetworkInterfaceUsage(name="eth0", rx_bytes=1000, rx_errors=0, tx_bytes=2000, tx_errors=1)
NET1 = cri.NetworkInterfaceUsage(name="net1", rx_bytes=5, rx_errors=0, tx_bytes=6, tx_errors=0)
APP = summary.ContainerSample(
    name="app",
    start_time=T0 - 30 * SECOND,
    image="docker.io/library/nginx:1.27",
    memory_limit=256 * 1024 * 1024,
    stats=cri.ContainerStats(
        id="c-1",
        cpu=cri.CpuUsage(timestamp=T0, usage_core_nano_seconds=2_500_000_000, usage_nano_cores=1),
        memory=cri.MemoryUsage(timestamp=T0, working_set_bytes=400, usage_bytes=450, rss_bytes=250),
        swap=cri.SwapUsage(timestamp=T0, swap_usage_bytes=0, swap_available_bytes=0),
        writable_layer=cri.FilesystemUsage(timestamp=T0, mountpoint=IMAGE_FS, used_bytes=4096, inodes_used=3),
    ),
)
WEB = summary.PodSample(
    name="web",
    namespace="default",
    uid="uid-web",
    start_time=T0 - 60 * SECOND,
    sandbox_id="sb-1",
    cgroup=POD_CGROUP,
    memory_limit=0,
    sandbox=cri.PodSandboxStats(
        id="sb-1",
        linux=cri.LinuxPodSandboxStats(
            cpu=cri.CpuUsage(timestamp=T0, usage_core_nano_seconds=3 * SECOND),
            memory=cri.MemoryUsage(timestamp=T0, working_set_bytes=500, usage_bytes=600, rss_bytes=300),
            network=cri.NetworkUsage(timestamp=T0, default_interface=ETH0, interfaces=(ETH0, NET1)),
        ),
    ),
    containers=(APP,),
)
SNAPSHOT = summary.StatsSnapshot(
    timestamp=T0,
    node=summary.NodeSample(
        node_name="node-1",
        cpu=cri.CpuUsage(timestamp=T0, usage_core_nano_seconds=100 * SECOND),
        memory=cri.MemoryUsage(timestamp=T0, working_set_bytes=2000, usage_bytes=3000, rss_bytes=1000),
        machine=summary.MachineInfo(timestamp=T0 - 3600 * SECOND, num_cores=4, memory_capacity=8 * GIB,
                                    machine_id="mid", system_uuid="uuid", boot_id="bid"),
    ),
    pods=(WEB,),
    filesystems={IMAGE_FS: summary.FsInfo(timestamp=T0, device="/dev/vda1")},
)

ROOT = 'container="",id="/",image="",name="",namespace="",pod=""'
POD = f'container="",id="{POD_CGROUP}",image="",name="",namespace="default",pod="web"'
PAUSE = f'container="",id="{POD_CGROUP}/sb-1",image="",name="sb-1",namespace="default",pod="web"'
CTR = (f'container="app",id="{POD_CGROUP}/c-1",image="docker.io/library/nginx:1.27",name="c-1",'
       'namespace="default",pod="web"')
# cAdvisor's extra labels (cpu, device, interface) sorted in among the kubelet's, as the Go client writes them.
ROOT_CPU = 'container="",cpu="total",id="/",image="",name="",namespace="",pod=""'
POD_CPU = f'container="",cpu="total",id="{POD_CGROUP}",image="",name="",namespace="default",pod="web"'
CTR_CPU = (f'container="app",cpu="total",id="{POD_CGROUP}/c-1",image="docker.io/library/nginx:1.27",name="c-1",'
           'namespace="default",pod="web"')
CTR_FS = (f'container="app",device="/dev/vda1",id="{POD_CGROUP}/c-1",image="docker.io/library/nginx:1.27",'
          'name="c-1",namespace="default",pod="web"')
ETH0_L = f'container="",id="{POD_CGROUP}/sb-1",image="",interface="eth0",name="sb-1",namespace="default",pod="web"'
NET1_L = f'container="",id="{POD_CGROUP}/sb-1",image="",interface="net1",name="sb-1",namespace="default",pod="web"'
MS = "1624396278302"

EXPECTED = text(f"""
    # HELP container_cpu_usage_seconds_total Cumulative cpu time consumed in seconds.
    # TYPE container_cpu_usage_seconds_total counter
    container_cpu_usage_seconds_total{{{ROOT_CPU}}} 100 {MS}
    container_cpu_usage_seconds_total{{{POD_CPU}}} 3 {MS}
    container_cpu_usage_seconds_total{{{CTR_CPU}}} 2.5 {MS}
    # HELP container_creation_time_seconds Container creation time since unix epoch in seconds.
    # TYPE container_creation_time_seconds gauge
    container_creation_time_seconds{{{PAUSE}}} 1.624396218e+09
    container_creation_time_seconds{{{CTR}}} 1.624396248e+09
    # HELP container_fs_usage_bytes Number of bytes that are consumed by the container on this filesystem.
    # TYPE container_fs_usage_bytes gauge
    container_fs_usage_bytes{{{CTR_FS}}} 4096 {MS}
    # HELP container_last_seen Last time a container was seen by the exporter
    # TYPE container_last_seen gauge
    container_last_seen{{{ROOT}}} 1.624396278e+09 {MS}
    container_last_seen{{{POD}}} 1.624396278e+09 {MS}
    container_last_seen{{{PAUSE}}} 1.624396278e+09 {MS}
    container_last_seen{{{CTR}}} 1.624396278e+09 {MS}
    # HELP container_memory_rss Size of RSS in bytes.
    # TYPE container_memory_rss gauge
    container_memory_rss{{{ROOT}}} 1000 {MS}
    container_memory_rss{{{POD}}} 300 {MS}
    container_memory_rss{{{CTR}}} 250 {MS}
    # HELP container_memory_swap Container swap usage in bytes.
    # TYPE container_memory_swap gauge
    container_memory_swap{{{POD}}} 0 {MS}
    container_memory_swap{{{CTR}}} 0 {MS}
    # HELP container_memory_usage_bytes Current memory usage in bytes, including all memory regardless of when it was accessed
    # TYPE container_memory_usage_bytes gauge
    container_memory_usage_bytes{{{ROOT}}} 3000 {MS}
    container_memory_usage_bytes{{{POD}}} 600 {MS}
    container_memory_usage_bytes{{{CTR}}} 450 {MS}
    # HELP container_memory_working_set_bytes Current working set in bytes.
    # TYPE container_memory_working_set_bytes gauge
    container_memory_working_set_bytes{{{ROOT}}} 2000 {MS}
    container_memory_working_set_bytes{{{POD}}} 500 {MS}
    container_memory_working_set_bytes{{{CTR}}} 400 {MS}
    # HELP container_network_receive_bytes_total Cumulative count of bytes received
    # TYPE container_network_receive_bytes_total counter
    container_network_receive_bytes_total{{{ETH0_L}}} 1000 {MS}
    container_network_receive_bytes_total{{{NET1_L}}} 5 {MS}
    # HELP container_network_receive_errors_total Cumulative count of errors encountered while receiving
    # TYPE container_network_receive_errors_total counter
    container_network_receive_errors_total{{{ETH0_L}}} 0 {MS}
    container_network_receive_errors_total{{{NET1_L}}} 0 {MS}
    # HELP container_network_transmit_bytes_total Cumulative count of bytes transmitted
    # TYPE container_network_transmit_bytes_total counter
    container_network_transmit_bytes_total{{{ETH0_L}}} 2000 {MS}
    container_network_transmit_bytes_total{{{NET1_L}}} 6 {MS}
    # HELP container_network_transmit_errors_total Cumulative count of errors encountered while transmitting
    # TYPE container_network_transmit_errors_total counter
    container_network_transmit_errors_total{{{ETH0_L}}} 1 {MS}
    container_network_transmit_errors_total{{{NET1_L}}} 0 {MS}
    # HELP container_scrape_error 1 if there was an error while getting container metrics, 0 otherwise
    # TYPE container_scrape_error gauge
    container_scrape_error 0
    # HELP container_spec_memory_limit_bytes Memory limit for the container.
    # TYPE container_spec_memory_limit_bytes gauge
    container_spec_memory_limit_bytes{{{POD}}} 0
    container_spec_memory_limit_bytes{{{CTR}}} 2.68435456e+08
    # HELP container_start_time_seconds Start time of the container since unix epoch in seconds.
    # TYPE container_start_time_seconds gauge
    container_start_time_seconds{{{PAUSE}}} 1.624396218e+09
    container_start_time_seconds{{{CTR}}} 1.624396248e+09
    # HELP machine_cpu_cores Number of logical CPU cores.
    # TYPE machine_cpu_cores gauge
    machine_cpu_cores{{boot_id="bid",machine_id="mid",system_uuid="uuid"}} 4 1624392678302
    # HELP machine_memory_bytes Amount of memory installed on the machine.
    # TYPE machine_memory_bytes gauge
    machine_memory_bytes{{boot_id="bid",machine_id="mid",system_uuid="uuid"}} 8.589934592e+09 1624392678302
    # HELP machine_scrape_error 1 if there was an error while getting machine metrics, 0 otherwise.
    # TYPE machine_scrape_error gauge
    machine_scrape_error 0
""")  # noqa: E501


def test_cadvisor_metrics() -> None:
    assert cadvisor.cadvisor_metrics(SNAPSHOT) == EXPECTED


def _web(**changes: object) -> summary.StatsSnapshot:
    return dataclasses.replace(SNAPSHOT, pods=(dataclasses.replace(WEB, **changes),))  # type: ignore[arg-type]


def _app(**changes: object) -> summary.StatsSnapshot:
    return _web(containers=(dataclasses.replace(APP, **changes),))  # type: ignore[arg-type]


NO_CGROUP = 'container="",id="",image="",name="",namespace="default",pod="web"'
NO_CGROUP_CTR = 'container="app",id="",image="docker.io/library/nginx:1.27",name="c-1",namespace="default",pod="web"'
ESCAPED = (f'container="app",id="{POD_CGROUP}/c-1",image="reg.example/a\\"b\\\\c:1",name="c-1",'
           'namespace="default",pod="web"')
WORKING_SET = ["# HELP container_memory_working_set_bytes Current working set in bytes.",
               "# TYPE container_memory_working_set_bytes gauge"]

# (snapshot, family, its exact lines)
CASES = {
    # cAdvisor prints the total only when above 0 (prometheus.go: `if s.Cpu.Usage.Total > 0`).
    "zero-cpu-is-left-out": (
        _app(stats=dataclasses.replace(APP.stats, cpu=cri.CpuUsage(timestamp=T0, usage_core_nano_seconds=0))),
        "container_cpu_usage_seconds_total",
        ["# HELP container_cpu_usage_seconds_total Cumulative cpu time consumed in seconds.",
         "# TYPE container_cpu_usage_seconds_total counter",
         f"container_cpu_usage_seconds_total{{{ROOT_CPU}}} 100 {MS}",
         f"container_cpu_usage_seconds_total{{{POD_CPU}}} 3 {MS}"]),
    # A pod cgroup the collector did not find: id is blank, the other labels still tell the series apart.
    "pod-cgroup-unknown": (
        _web(cgroup=""),
        "container_memory_working_set_bytes",
        [*WORKING_SET,  # sorted by label values, as the Go client sorts: id "" before "/"
         f"container_memory_working_set_bytes{{{NO_CGROUP}}} 500 {MS}",
         f"container_memory_working_set_bytes{{{ROOT}}} 2000 {MS}",
         f"container_memory_working_set_bytes{{{NO_CGROUP_CTR}}} 400 {MS}"]),
    # Without sandbox stats the pod's numbers are the containers' sums, as /stats/summary reports them.
    "no-sandbox-stats-pod-is-the-containers-sum": (
        _web(sandbox=None),
        "container_memory_working_set_bytes",
        [*WORKING_SET,
         f"container_memory_working_set_bytes{{{ROOT}}} 2000 {MS}",
         f"container_memory_working_set_bytes{{{POD}}} 400 {MS}",
         f"container_memory_working_set_bytes{{{CTR}}} 400 {MS}"]),
    "no-sandbox-stats-no-network": (_web(sandbox=None), "container_network_receive_bytes_total", []),
    "no-sandbox-stats-pause-still-has-its-start-time": (
        _web(sandbox=None),
        "container_start_time_seconds",
        ["# HELP container_start_time_seconds Start time of the container since unix epoch in seconds.",
         "# TYPE container_start_time_seconds gauge",
         f"container_start_time_seconds{{{PAUSE}}} 1.624396218e+09",
         f"container_start_time_seconds{{{CTR}}} 1.624396248e+09"]),
    # Unknown numbers are left out rather than printed as 0.
    "unknown-memory-fields": (
        _app(stats=dataclasses.replace(APP.stats, memory=cri.MemoryUsage(timestamp=T0 + SECOND, working_set_bytes=7))),
        "container_memory_rss",
        ["# HELP container_memory_rss Size of RSS in bytes.",
         "# TYPE container_memory_rss gauge",
         f"container_memory_rss{{{ROOT}}} 1000 {MS}",
         f"container_memory_rss{{{POD}}} 300 {MS}"]),
    "sample-time-is-the-stats-time": (
        _app(stats=dataclasses.replace(APP.stats, memory=cri.MemoryUsage(timestamp=T0 + SECOND, working_set_bytes=7))),
        "container_memory_working_set_bytes",
        [*WORKING_SET,
         f"container_memory_working_set_bytes{{{ROOT}}} 2000 {MS}",
         f"container_memory_working_set_bytes{{{POD}}} 500 {MS}",
         f"container_memory_working_set_bytes{{{CTR}}} 7 1624396279302"]),
    "no-limit-read-no-spec-series": (
        _web(memory_limit=None, containers=(dataclasses.replace(APP, memory_limit=None),)),
        "container_spec_memory_limit_bytes", []),
    # A writable layer on a filesystem the collector could not size: the device is blank.
    "fs-device-unknown": (
        dataclasses.replace(SNAPSHOT, filesystems={}),
        "container_fs_usage_bytes",
        ["# HELP container_fs_usage_bytes Number of bytes that are consumed by the container on this filesystem.",
         "# TYPE container_fs_usage_bytes gauge",
         f"container_fs_usage_bytes{{{CTR_FS.replace('/dev/vda1', '')}}} 4096 {MS}"]),
    "no-writable-layer": (
        _app(stats=dataclasses.replace(APP.stats, writable_layer=None)), "container_fs_usage_bytes", []),
    # Upstream's collector fails as a whole: only the error gauge, while the machine collector goes on.
    "runtime-failed": (
        dataclasses.replace(SNAPSHOT, error="failed to list pod stats: UNAVAILABLE"),
        "container_scrape_error",
        ["# HELP container_scrape_error 1 if there was an error while getting container metrics, 0 otherwise",
         "# TYPE container_scrape_error gauge",
         "container_scrape_error 1"]),
    "runtime-failed-no-container-series": (
        dataclasses.replace(SNAPSHOT, error="failed to list pod stats: UNAVAILABLE"), "container_last_seen", []),
    "runtime-failed-machine-still-reported": (
        dataclasses.replace(SNAPSHOT, error="failed to list pod stats: UNAVAILABLE"),
        "machine_cpu_cores",
        ["# HELP machine_cpu_cores Number of logical CPU cores.",
         "# TYPE machine_cpu_cores gauge",
         'machine_cpu_cores{boot_id="bid",machine_id="mid",system_uuid="uuid"} 4 1624392678302']),
    "machine-unknown": (
        dataclasses.replace(SNAPSHOT, node=dataclasses.replace(SNAPSHOT.node, machine=None)),
        "machine_scrape_error",
        ["# HELP machine_scrape_error 1 if there was an error while getting machine metrics, 0 otherwise.",
         "# TYPE machine_scrape_error gauge",
         "machine_scrape_error 1"]),
    "machine-unknown-no-cores": (
        dataclasses.replace(SNAPSHOT, node=dataclasses.replace(SNAPSHOT.node, machine=None)), "machine_cpu_cores", []),
    # containerd lists eth0 as the default interface and among the interfaces: one series for it.
    "interface-listed-twice-once": (
        _web(sandbox=dataclasses.replace(WEB.sandbox, linux=cri.LinuxPodSandboxStats(
            network=cri.NetworkUsage(timestamp=T0, default_interface=ETH0, interfaces=(ETH0,))))),
        "container_network_transmit_bytes_total",
        ["# HELP container_network_transmit_bytes_total Cumulative count of bytes transmitted",
         "# TYPE container_network_transmit_bytes_total counter",
         f"container_network_transmit_bytes_total{{{ETH0_L}}} 2000 {MS}"]),
    "label-values-escaped": (
        _app(image='reg.example/a"b\\c:1'),
        "container_start_time_seconds",
        ["# HELP container_start_time_seconds Start time of the container since unix epoch in seconds.",
         "# TYPE container_start_time_seconds gauge",
         f"container_start_time_seconds{{{PAUSE}}} 1.624396218e+09",
         f"container_start_time_seconds{{{ESCAPED}}} 1.624396248e+09"]),
}


@pytest.mark.parametrize(("snapshot", "name", "lines"), CASES.values(), ids=CASES.keys())
def test_cadvisor_family(snapshot: summary.StatsSnapshot, name: str, lines: list[str]) -> None:
    assert family(cadvisor.cadvisor_metrics(snapshot), name) == lines


def test_every_family_is_declared_with_cadvisor_help() -> None:
    declared = [line.split()[2] for line in EXPECTED.splitlines() if line.startswith("# TYPE ")]
    assert declared == sorted(cadvisor.FAMILIES)  # the full snapshot shows every family, sorted by name


# ----------------------------------------------------------------------------- what the collector reads

MOUNTINFO = text(r"""
    22 1 253:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
    30 22 0:26 / /sys rw,nosuid shared:7 - sysfs sysfs rw
    40 22 253:2 / /var/lib/containerd rw,relatime shared:20 - xfs /dev/vdb rw
    41 22 253:3 / /mnt/with\040space rw - ext4 /dev/vdc rw
    42 40 253:4 / /var/lib/containerd rw shared:21 - xfs /dev/vdd rw
""")
MOUNT_CASES = {
    "root-for-anything-unmounted": ("/var/lib/kubelet", "/dev/vda1"),
    "deepest-mount-wins-overmount-last": (IMAGE_FS, "/dev/vdd"),
    "mount-point-itself": ("/var/lib/containerd", "/dev/vdd"),
    "prefix-is-not-a-parent": ("/var/lib/containerd2", "/dev/vda1"),
    "escaped-space": ("/mnt/with space/x", "/dev/vdc"),
}


@pytest.mark.parametrize(("path", "device"), MOUNT_CASES.values(), ids=MOUNT_CASES.keys())
def test_mount_source(path: str, device: str) -> None:
    assert summary.mount_source(MOUNTINFO, path) == device


def test_mount_source_without_mounts() -> None:
    assert summary.mount_source("", "/") == ""


LIMIT_CASES = {
    "v2-bytes": ("268435456\n", 268435456),
    "v2-unlimited": ("max\n", 0),
    "v1-unlimited-page-counter-max": ("9223372036854771712\n", 0),
    "missing-file": (None, None),
    "garbage": ("x", None),
}


@pytest.mark.parametrize(("content", "limit"), LIMIT_CASES.values(), ids=LIMIT_CASES.keys())
def test_memory_limit(content: str | None, limit: int | None) -> None:
    assert summary.memory_limit(content) == limit


IMAGE_CASES = {
    "docker-hub-short-name": (cri.Container(id="c", image="sha256:abc", user_specified_image="nginx"),
                              "docker.io/library/nginx:latest"),
    "tag-kept": (cri.Container(id="c", image="sha256:abc", user_specified_image="busybox:1.36"),
                 "docker.io/library/busybox:1.36"),
    "registry-kept": (cri.Container(id="c", image="sha256:abc", user_specified_image="registry.k8s.io/pause:3.10"),
                      "registry.k8s.io/pause:3.10"),
    "runtime-without-the-field": (cri.Container(id="c", image="sha256:abc"), "sha256:abc"),
    "unparsable-falls-back": (cri.Container(id="c", image="sha256:abc", user_specified_image="UPPER/Case"),
                              "sha256:abc"),
}


@pytest.mark.parametrize(("container", "image"), IMAGE_CASES.values(), ids=IMAGE_CASES.keys())
def test_image_name(container: cri.Container, image: str) -> None:
    assert summary.image_name(container) == image


def test_count_processors() -> None:
    cpuinfo = "processor\t: 0\nmodel name\t: x\n\nprocessor\t: 1\nmodel name\t: x\n"
    assert summary.count_processors(cpuinfo) == 2
    assert summary.count_processors("") == 0


def test_pod_samples_carry_the_image() -> None:
    sandboxes = [cri.PodSandbox(id="sb", metadata=cri.PodSandboxMetadata(name="p", namespace="n", uid="u"))]
    containers = [cri.Container(id="c", pod_sandbox_id="sb", metadata=cri.ContainerMetadata(name="app"),
                                state=cri.ContainerState.RUNNING, image="sha256:abc", user_specified_image="nginx")]
    pods = summary.pod_samples(sandboxes, containers, [cri.ContainerStats(id="c")])
    assert pods[0].containers[0].image == "docker.io/library/nginx:latest"


def _pod(uid: str, *container_ids: str) -> summary.PodSample:
    return summary.PodSample(name=uid, namespace="ns", uid=uid, containers=tuple(
        summary.ContainerSample(name=c, stats=cri.ContainerStats(id=c)) for c in container_ids))


@pytest.mark.parametrize("v2", [True, False], ids=["cgroup-v2", "cgroup-v1"])
def test_pod_cgroups(tmp_path: Path, v2: bool) -> None:
    base = tmp_path if v2 else tmp_path / "memory"
    limit_file = "memory.max" if v2 else "memory.limit_in_bytes"
    if v2:
        (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    burstable = base / "kubepods" / "burstable" / "poda"
    (burstable / "c1").mkdir(parents=True)
    (burstable / limit_file).write_text("max\n" if v2 else "9223372036854771712\n")
    (burstable / "c1" / limit_file).write_text("1048576\n")
    (base / "kubepods" / "podb").mkdir(parents=True)  # Guaranteed: right under kubepods, no limit file
    pods = agent_stats.pod_cgroups([_pod("a", "c1", "c2"), _pod("b"), _pod("gone", "c3")], tmp_path)
    assert [(p.cgroup, p.memory_limit, [c.memory_limit for c in p.containers]) for p in pods] == [
        ("/kubepods/burstable/poda", 0, [1048576, None]),
        ("/kubepods/podb", None, []),
        ("", None, [None]),
    ]


def test_read_machine(tmp_path: Path) -> None:
    proc, sysfs, etc = tmp_path / "proc", tmp_path / "sys", tmp_path / "etc"
    (proc / "sys" / "kernel" / "random").mkdir(parents=True)
    (proc / "cpuinfo").write_text("processor\t: 0\n\nprocessor\t: 1\n\nprocessor\t: 2\n")
    (proc / "meminfo").write_text("MemTotal:        1000 kB\n")
    (proc / "sys" / "kernel" / "random" / "boot_id").write_text("b-1\n")
    (sysfs / "class" / "dmi" / "id").mkdir(parents=True)
    (sysfs / "class" / "dmi" / "id" / "product_uuid").write_text("U-1\n")
    (tmp_path / "var" / "lib" / "dbus").mkdir(parents=True)
    (tmp_path / "var" / "lib" / "dbus" / "machine-id").write_text("m-dbus\n")  # no /etc/machine-id: the fallback
    machine = agent_stats.read_machine(proc, sysfs, etc)
    assert dataclasses.replace(machine, timestamp=0) == summary.MachineInfo(
        num_cores=3, memory_capacity=1000 * 1024, machine_id="m-dbus", system_uuid="U-1", boot_id="b-1")
    assert machine.timestamp > 0


def test_filesystems_carry_the_device(tmp_path: Path) -> None:
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "mountinfo").write_text(f"22 1 253:1 / / rw - ext4 /dev/vda1 rw\n"
                                                 f"40 22 253:2 / {tmp_path} rw - xfs /dev/vdb rw\n")
    sizes = agent_stats.filesystems([str(tmp_path)], T0, tmp_path)
    assert sizes[str(tmp_path)].device == "/dev/vdb" and sizes[str(tmp_path)].capacity_bytes > 0


async def test_collector_serves_cadvisor_metrics(tmp_path: Path) -> None:
    """End to end against the fake runtime of test_stats: pods found in a v2 cgroup tree, the machine read once."""
    from tests.unit.test_stats import MEMINFO_TEXT, PROC_STAT, FakeCri

    proc, cgroup, root = tmp_path / "proc", tmp_path / "cgroup", tmp_path / "root"
    for directory in (proc, root, cgroup / "kubepods" / "besteffort" / "poduid-web" / "c-1"):
        directory.mkdir(parents=True)
    (proc / "stat").write_text(PROC_STAT)
    (proc / "meminfo").write_text(MEMINFO_TEXT)
    (cgroup / "cgroup.controllers").write_text("memory\n")
    (cgroup / "kubepods" / "besteffort" / "poduid-web" / "c-1" / "memory.max").write_text("max\n")
    client: object = FakeCri(image_fs=str(root))
    collector = agent_stats.StatsCollector(
        client,  # type: ignore[arg-type]
        node_name="node-1", layout=Layout(str(root), str(tmp_path / "logs")), proc=str(proc),
        cgroup_root=str(cgroup), sysfs=str(tmp_path / "sys"), etc=str(tmp_path / "etc"))
    exposition = await collector.cadvisor_metrics()
    web = 'id="/kubepods/besteffort/poduid-web/c-1",image="",name="c-1",namespace="default",pod="web"'
    assert f'container_spec_memory_limit_bytes{{container="app",{web}}} 0\n' in exposition
    assert 'container_last_seen{container="main",id="",image="",name="c-2",namespace="default",pod="other"}' \
        in exposition  # its pod cgroup is not in the tree
    assert "container_scrape_error 0\n" in exposition
    assert 'machine_memory_bytes{boot_id="",machine_id="",system_uuid=""} 1.024e+09 ' in exposition
    first = collector._machine
    await collector.cadvisor_metrics()
    assert collector._machine is first  # cached, as the kubelet caches cAdvisor's machine info
