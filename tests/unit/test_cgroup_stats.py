"""A pod's own numbers from its pod cgroup (`kopflet.stats.cgroup_stats`), and the collector reading them from
real directory trees shaped as cgroup v1 and v2 and /proc."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cri_client import types as cri
from kopflet.stats import cgroup_stats, summary
from kopflet.stats import collector as agent_stats
from kopflet.stats.cgroup_stats import PodCgroupFiles

T = 1_700_000_000_000_000_000
MIB = 1 << 20

V1_STAT = ("cache 1\nrss 2\npgfault 3\npgmajfault 4\ninactive_file 5\n"
           f"total_rss {6 * MIB}\ntotal_pgfault 700\ntotal_pgmajfault 8\ntotal_inactive_file {2 * MIB}\n")
V2_STAT = f"anon {5 * MIB}\nfile {4 * MIB}\ninactive_file {3 * MIB}\npgfault 900\npgmajfault 9\n"

NET_DEV = """\
Inter-|   Receive                                                |  Transmit
 face |bytes packets errs drop fifo frame compressed multicast|bytes packets errs drop fifo colls carrier compressed
    lo:  100       1    0    0    0     0          0         0  100       1    0    0    0     0       0          0
  eth0: 4200      30    2    0    0     0          0         0 1700      20    1    0    0     0       0          0
  net1:   10       1    0    0    0     0          0         0   20       2    0    0    0     0       0          0
veth12:   99       1    0    0    0     0          0         0   99       1    0    0    0     0       0          0
"""


@pytest.mark.parametrize(("files", "expected"), [
    pytest.param(PodCgroupFiles(v2=False, cpu="123456789\n"), 123456789, id="v1-cpuacct.usage"),
    pytest.param(PodCgroupFiles(v2=True, cpu="usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n"), 1_500_000,
                 id="v2-cpu.stat-in-usec"),
    pytest.param(PodCgroupFiles(v2=False), None, id="unreadable"),
    pytest.param(PodCgroupFiles(v2=True, cpu="user_usec 1\n"), None, id="v2-without-usage"),
])
def test_cpu_usage(files: PodCgroupFiles, expected: int | None) -> None:
    usage = cgroup_stats.cpu_usage(files, T)
    if expected is None:
        assert usage is None
    else:  # the rate is the collector's to compute, from its previous sample
        assert usage == cri.CpuUsage(timestamp=T, usage_core_nano_seconds=expected, usage_nano_cores=None)


@pytest.mark.parametrize(("files", "expected"), [
    pytest.param(
        PodCgroupFiles(v2=False, memory_usage=f"{10 * MIB}\n", memory_limit=f"{64 * MIB}\n", memory_stat=V1_STAT),
        cri.MemoryUsage(timestamp=T, working_set_bytes=8 * MIB, available_bytes=56 * MIB, usage_bytes=10 * MIB,
                        rss_bytes=6 * MIB, page_faults=700, major_page_faults=8),
        id="v1-hierarchical-total-counters"),
    pytest.param(
        PodCgroupFiles(v2=False, memory_usage=f"{10 * MIB}\n", memory_limit="9223372036854771712\n",
                       memory_stat=V1_STAT),
        cri.MemoryUsage(timestamp=T, working_set_bytes=8 * MIB, available_bytes=None, usage_bytes=10 * MIB,
                        rss_bytes=6 * MIB, page_faults=700, major_page_faults=8),
        id="v1-unlimited-no-available"),
    pytest.param(
        PodCgroupFiles(v2=True, memory_usage=f"{9 * MIB}\n", memory_limit="max\n", memory_stat=V2_STAT),
        cri.MemoryUsage(timestamp=T, working_set_bytes=6 * MIB, available_bytes=None, usage_bytes=9 * MIB,
                        rss_bytes=5 * MIB, page_faults=900, major_page_faults=9),
        id="v2-max-rss-is-anon"),
    pytest.param(
        PodCgroupFiles(v2=True, memory_usage=f"{2 * MIB}\n", memory_limit=f"{8 * MIB}\n", memory_stat=V2_STAT),
        cri.MemoryUsage(timestamp=T, working_set_bytes=0, available_bytes=8 * MIB, usage_bytes=2 * MIB,
                        rss_bytes=5 * MIB, page_faults=900, major_page_faults=9),
        id="v2-inactive-above-usage-is-zero-working-set"),
    pytest.param(PodCgroupFiles(v2=False, memory_stat=V1_STAT), None, id="no-usage-file"),
])
def test_memory_usage(files: PodCgroupFiles, expected: cri.MemoryUsage | None) -> None:
    assert cgroup_stats.memory_usage(files, T) == expected


def test_net_dev_keeps_what_cadvisor_keeps() -> None:
    interfaces = cgroup_stats.parse_net_dev(NET_DEV)
    assert interfaces == (
        cri.NetworkInterfaceUsage(name="eth0", rx_bytes=4200, rx_errors=2, tx_bytes=1700, tx_errors=1),
        cri.NetworkInterfaceUsage(name="net1", rx_bytes=10, rx_errors=0, tx_bytes=20, tx_errors=0),
    )
    assert cgroup_stats.parse_net_dev("") == ()
    assert cgroup_stats.parse_net_dev(NET_DEV.splitlines()[0] + "\nx\n eth0: 1 2 3\n") == ()


@pytest.mark.parametrize(("net_dev", "default", "names"), [
    pytest.param(NET_DEV, "eth0", ["eth0", "net1"], id="eth0-is-the-default"),
    pytest.param("\n\n  net1: 1 0 0 0 0 0 0 0 2 0 0 0 0 0 0 0\n", None, ["net1"], id="no-eth0"),
])
def test_network_usage(net_dev: str, default: str | None, names: list[str]) -> None:
    network = cgroup_stats.network_usage(PodCgroupFiles(v2=False, net_dev=net_dev), T)
    assert network is not None and network.timestamp == T
    assert (network.default_interface.name if network.default_interface else None) == default
    assert [i.name for i in network.interfaces] == names


def test_host_network_has_no_network_usage() -> None:
    assert cgroup_stats.network_usage(PodCgroupFiles(v2=False), T) is None


def test_pod_sandbox_stats_in_the_cri_shape_the_summary_reads() -> None:
    files = PodCgroupFiles(v2=False, cpu=f"{3 * 10**9}\n", memory_usage=f"{10 * MIB}\n",
                           memory_limit=f"{64 * MIB}\n", memory_stat=V1_STAT, process_count=4, net_dev=NET_DEV)
    stats = cgroup_stats.pod_sandbox_stats("sb-1", files, T)
    assert stats.id == "sb-1" and stats.linux is not None
    assert stats.linux.process == cri.ProcessUsage(timestamp=T, process_count=4)
    pod = summary.PodSample(name="web", namespace="ns", uid="u", sandbox_id="sb-1", sandbox=stats)
    obj = summary.summary(summary.StatsSnapshot(timestamp=T, node=summary.NodeSample(node_name="n"), pods=(pod,)))
    web = obj["pods"][0]
    assert web["cpu"]["usageCoreNanoSeconds"] == 3 * 10**9
    assert web["memory"]["workingSetBytes"] == 8 * MIB and web["memory"]["availableBytes"] == 56 * MIB
    assert web["network"]["name"] == "eth0" and web["network"]["rxBytes"] == 4200
    assert [i["name"] for i in web["network"]["interfaces"]] == ["eth0", "net1"]
    assert web["process_stats"] == {"process_count": 4}
    assert summary.eviction_usage(pod).process_count == 4
    assert cgroup_stats.pod_sandbox_stats("sb", PodCgroupFiles(v2=True), T).linux == cri.LinuxPodSandboxStats()


# ------------------------------------------------------------------------------ the collector's reads


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _fake_proc(tmp_path: Path, pod_pid: int) -> Path:
    """A /proc where the agent and `pod_pid` are in different network namespaces (two distinct files)."""
    proc = tmp_path / "proc"
    _write(proc / "self" / "ns" / "net", "host")
    _write(proc / str(pod_pid) / "ns" / "net", "pod")
    _write(proc / str(pod_pid) / "net" / "dev", NET_DEV)
    _write(proc / "77" / "net" / "dev", NET_DEV)
    (proc / "77" / "ns").mkdir()
    os.symlink(proc / "self" / "ns" / "net", proc / "77" / "ns" / "net")  # the host's namespace
    return proc


def _pod(uid: str, sandbox_id: str) -> summary.PodSample:
    return summary.PodSample(name=uid, namespace="ns", uid=uid, sandbox_id=sandbox_id, containers=(
        summary.ContainerSample(name="app", stats=cri.ContainerStats(id="c1")),))


def test_collector_reads_a_v1_pod_cgroup(tmp_path: Path) -> None:
    root, proc = tmp_path / "cgroup", _fake_proc(tmp_path, 4242)
    pod = "kubepods/burstable/poda"
    _write(root / "memory" / pod / "memory.usage_in_bytes", f"{10 * MIB}\n")
    _write(root / "memory" / pod / "memory.limit_in_bytes", f"{64 * MIB}\n")
    _write(root / "memory" / pod / "memory.stat", V1_STAT)
    _write(root / "cpuacct" / pod / "cpuacct.usage", "5000\n")
    _write(root / "pids" / pod / "cgroup.procs", "")
    _write(root / "pids" / pod / "sb-a" / "cgroup.procs", "4242\n")  # the infra container's pause
    _write(root / "pids" / pod / "c1" / "cgroup.procs", "4300\n4301\n")
    hostnet = "kubepods/besteffort/podh"
    _write(root / "memory" / hostnet / "memory.usage_in_bytes", "4096\n")
    _write(root / "pids" / hostnet / "sb-h" / "cgroup.procs", "77\n")
    a, h, gone = agent_stats.pod_cgroups([_pod("a", "sb-a"), _pod("h", "sb-h"), _pod("x", "sb-x")], root, proc)
    assert a.cgroup == "/kubepods/burstable/poda" and a.memory_limit == 64 * MIB
    assert a.sandbox is not None and a.sandbox.linux is not None and a.sandbox.id == "sb-a"
    linux = a.sandbox.linux
    assert linux.cpu is not None and linux.cpu.usage_core_nano_seconds == 5000
    assert linux.memory is not None and linux.memory.working_set_bytes == 8 * MIB
    assert linux.process is not None and linux.process.process_count == 3  # pause included, as cAdvisor counts
    assert linux.network is not None and linux.network.default_interface is not None
    assert linux.network.default_interface.rx_bytes == 4200
    assert h.sandbox is not None and h.sandbox.linux is not None
    assert h.sandbox.linux.network is None  # hostNetwork: upstream reports no pod network
    assert h.sandbox.linux.memory is not None and h.sandbox.linux.memory.usage_bytes == 4096
    assert gone.cgroup == "" and gone.sandbox is None


def test_collector_reads_a_v2_pod_cgroup(tmp_path: Path) -> None:
    root, proc = tmp_path / "cgroup", _fake_proc(tmp_path, 4242)
    _write(root / "cgroup.controllers", "cpu memory pids\n")
    pod = root / "kubepods" / "poda"  # Guaranteed: right under kubepods
    _write(pod / "cpu.stat", "usage_usec 20\n")
    _write(pod / "memory.current", f"{9 * MIB}\n")
    _write(pod / "memory.max", "max\n")
    _write(pod / "memory.stat", V2_STAT)
    _write(pod / "cgroup.procs", "")
    _write(pod / "sb-a" / "cgroup.procs", "4242\n")
    _write(pod / "c1" / "cgroup.procs", "4300\n")
    (a,) = agent_stats.pod_cgroups([_pod("a", "sb-a")], root, proc)
    assert a.cgroup == "/kubepods/poda" and a.memory_limit == 0
    assert a.sandbox is not None and a.sandbox.linux is not None
    linux = a.sandbox.linux
    assert linux.cpu is not None and linux.cpu.usage_core_nano_seconds == 20_000
    assert linux.memory == cgroup_stats.memory_usage(
        PodCgroupFiles(v2=True, memory_usage=f"{9 * MIB}", memory_limit="max", memory_stat=V2_STAT),
        linux.memory.timestamp if linux.memory else 0)
    assert linux.process is not None and linux.process.process_count == 2
    assert linux.network is not None and [i.name for i in linux.network.interfaces] == ["eth0", "net1"]
