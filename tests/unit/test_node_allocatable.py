"""Node allocatable on ``kubepods`` (`kopflet.cm.node_allocatable`) and the container manager writing it and the
QoS tiers into a cgroup v1 tree made for the test."""

from __future__ import annotations

import asyncio
from fractions import Fraction
from pathlib import Path

import pytest

from kopflet.api import spec
from kopflet.cm import container_manager, helpers, node_allocatable
from kopflet.cm.cgroups import PodCgroups
from kopflet.cm.container_manager import ContainerManager

GIB = 1 << 30
CAPACITY = node_allocatable.internal_capacity(4, 8 * GIB, 32768)


@pytest.mark.parametrize(("system", "kube", "enforcement", "expected"), [
    pytest.param({}, {}, ("pods",), helpers.ResourceConfig(memory=8 * GIB, cpu_shares=4096, pids_limit=32768),
                 id="nothing-reserved"),
    pytest.param({"cpu": "500m", "memory": "1Gi"}, {"cpu": "250m", "memory": "512Mi", "pid": "1000"}, ("pods",),
                 helpers.ResourceConfig(memory=8 * GIB - GIB - GIB // 2, cpu_shares=3328, pids_limit=31768),
                 id="both-reservations-subtracted"),
    pytest.param({"memory": "1Gi"}, {}, ("none",), helpers.ResourceConfig(memory=8 * GIB, cpu_shares=4096,
                                                                          pids_limit=32768),
                 id="not-enforced-the-whole-node"),
    pytest.param({"memory": "1Gi"}, {}, (), helpers.ResourceConfig(memory=8 * GIB, cpu_shares=4096, pids_limit=32768),
                 id="empty-is-not-enforced"),
    pytest.param({"memory": "20Gi", "cpu": "8"}, {}, ("pods",),
                 helpers.ResourceConfig(memory=0, cpu_shares=2, pids_limit=32768), id="never-below-zero"),
])
def test_pods_cgroup_config(system: dict[str, str], kube: dict[str, str], enforcement: tuple[str, ...],
                            expected: helpers.ResourceConfig) -> None:
    assert node_allocatable.pods_cgroup_config(CAPACITY, system, kube, enforcement) == expected


def test_without_a_pid_limit_kubepods_gets_none() -> None:
    capacity = node_allocatable.internal_capacity(2, GIB, None)
    assert capacity == {"cpu": Fraction(2), "memory": Fraction(GIB)}
    assert node_allocatable.pods_cgroup_config(capacity, {}, {}, ("pods",)).pids_limit is None


@pytest.mark.parametrize(("values", "cgroups", "errors"), [
    pytest.param(["pods"], {}, [], id="default"),
    pytest.param([], {}, [], id="empty"),
    pytest.param(["none"], {}, [], id="none-alone"),
    pytest.param(["pods", "system-reserved"], {"system_reserved_cgroup": "/system.slice"}, [], id="with-its-cgroup"),
    pytest.param(["none", "pods"], {}, [
        'invalid configuration: enforceNodeAllocatable (--enforce-node-allocatable) may not contain additional '
        'enforcements when "none" is specified'], id="none-with-others"),
    pytest.param(["kube-reserved-compressible"], {}, [
        'invalid configuration: kubeReservedCgroup (--kube-reserved-cgroup) must be specified when "kube-reserved" '
        'or "kube-reserved-compressible" included in enforceNodeAllocatable (--enforce-node-allocatable)'],
        id="kube-reserved-without-cgroup"),
    pytest.param(["system-reserved", "system-reserved-compressible"], {"system_reserved_cgroup": "/s"}, [
        'invalid configuration: both "system-reserved" and "system-reserved-compressible" cannot be specified '
        'together in enforceNodeAllocatable (--enforce-node-allocatable)'], id="plain-and-compressible"),
    pytest.param(["pods", "pods"], {}, [
        'invalid configuration: duplicated enforcements "pods" in enforceNodeAllocatable (--enforce-node-allocatable)'],
        id="duplicate"),
    pytest.param(["Pods"], {}, [
        'invalid configuration: option "Pods" specified for enforceNodeAllocatable (--enforce-node-allocatable). '
        'Valid options are "pods", "system-reserved", "system-reserved-compressible", "kube-reserved", '
        '"kube-reserved-compressible" or "none"'], id="unknown"),
])
def test_validate_enforcement_as_upstream(values: list[str], cgroups: dict[str, str], errors: list[str]) -> None:
    assert node_allocatable.validate_enforcement(values, **cgroups) == errors


def test_failed_message_names_the_cgroup_as_go_prints_a_cgroup_name() -> None:
    assert node_allocatable.failed_message("/kubepods", "write: device or resource busy") == \
        'Failed to update Node Allocatable Limits ["kubepods"]: write: device or resource busy'


# --------------------------------------------------------------------------- the container manager's writes


def _v1_tree(root: Path) -> Path:
    for controller in ("cpu", "memory", "pids"):
        (root / controller).mkdir(parents=True)
    return root


def _files(directory: Path) -> None:
    """The files a cgroup directory would have: the container manager only writes files that exist."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("cpu.shares", "cpu.cfs_quota_us", "cpu.cfs_period_us", "memory.limit_in_bytes", "pids.max"):
        (directory / name).write_text("")


def _burstable_pod(uid: str, cpu: str) -> spec.Pod:
    return spec.pod_from_body({"metadata": {"uid": uid, "name": uid, "namespace": "ns"},
                           "spec": {"containers": [{"name": "c", "image": "i",
                                                    "resources": {"requests": {"cpu": cpu}}}]}})


async def test_the_manager_enforces_allocatable_and_keeps_the_tiers(tmp_path: Path) -> None:
    root = _v1_tree(tmp_path)
    for controller in ("cpu", "memory", "pids"):
        for tier in ("", "/burstable", "/besteffort"):
            _files(root / controller / f"kubepods{tier}")
    events: list[tuple[str, str, str]] = []
    pods = [_burstable_pod("a", "500m")]
    manager = ContainerManager(
        PodCgroups(str(root), v2=False), capacity=CAPACITY, system_reserved={"memory": "1Gi"},
        kube_reserved={"cpu": "1"}, enforcement=("pods",), hugepage_sizes=(), active_pods=lambda: pods,
        node_event=lambda *event: events.append(event))
    assert manager.allocatable_memory == 7 * GIB
    await manager.start()
    assert events == [("Normal", "NodeAllocatableEnforced", "Updated Node Allocatable limit across pods")]
    assert (root / "memory" / "kubepods" / "memory.limit_in_bytes").read_text() == str(7 * GIB)
    assert (root / "cpu" / "kubepods" / "cpu.shares").read_text() == "3072"
    assert (root / "pids" / "kubepods" / "pids.max").read_text() == "32768"
    assert (root / "cpu" / "kubepods" / "burstable" / "cpu.shares").read_text() == "512"
    assert (root / "cpu" / "kubepods" / "besteffort" / "cpu.shares").read_text() == "2"

    pods.append(_burstable_pod("b", "1"))
    await manager.update_qos()
    assert (root / "cpu" / "kubepods" / "burstable" / "cpu.shares").read_text() == "1536"
    assert (root / "memory" / "kubepods" / "memory.limit_in_bytes").read_text() == str(7 * GIB)  # untouched
    await manager.close()


async def test_a_refused_limit_is_a_warning_retried_until_it_holds(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    root = _v1_tree(tmp_path)
    _files(root / "memory" / "kubepods")
    (root / "memory" / "kubepods" / "memory.limit_in_bytes").unlink()
    (root / "memory" / "kubepods" / "memory.limit_in_bytes").mkdir()  # writing it fails: IsADirectoryError
    monkeypatch.setattr(container_manager, "ENFORCE_RETRY_PERIOD", 0.05)
    events: list[tuple[str, str, str]] = []
    arrived = asyncio.Event()

    def record(*event: str) -> None:
        events.append((event[0], event[1], event[2]))
        arrived.set()

    manager = ContainerManager(
        PodCgroups(str(root), v2=False), capacity=CAPACITY, system_reserved={}, kube_reserved={},
        enforcement=("pods",), hugepage_sizes=(), active_pods=list, node_event=record)
    start = asyncio.create_task(manager.start())
    await asyncio.wait_for(arrived.wait(), 5)
    assert events[0][:2] == ("Warning", "FailedNodeAllocatableEnforcement")
    assert events[0][2].startswith('Failed to update Node Allocatable Limits ["kubepods"]: failed to write')
    (root / "memory" / "kubepods" / "memory.limit_in_bytes").rmdir()
    (root / "memory" / "kubepods" / "memory.limit_in_bytes").write_text("")
    await start
    assert manager._enforcing is not None
    await asyncio.wait_for(manager._enforcing, 5)
    assert events[-1] == ("Normal", "NodeAllocatableEnforced", "Updated Node Allocatable limit across pods")
    assert all(e[1] == "FailedNodeAllocatableEnforcement" for e in events[:-1])
    assert (root / "memory" / "kubepods" / "memory.limit_in_bytes").read_text() == str(8 * GIB)
    await manager.close()
