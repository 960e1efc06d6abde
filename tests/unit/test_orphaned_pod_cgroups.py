"""Orphaned pod cgroups: found under the QoS tiers as upstream's GetAllPodsFromCgroups finds them, and destroyed by
housekeeping as upstream's cleanupOrphanedPodCgroups destroys them (their processes killed first), unless the pod
may still run or its volumes are still there."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from kopflet.cm.cgroup_names import DRIVER_SYSTEMD, CgroupLayout
from kopflet.cm.cgroups import CgroupError, PodCgroups
from kopflet.paths import Layout
from kopflet.pods.housekeeping import Housekeeping
from tests.unit.test_housekeeping_userns import Api, Relist, Teardown

SYSTEMD = CgroupLayout(driver=DRIVER_SYSTEMD)


@pytest.mark.parametrize(("layout", "tier", "entry", "uid"), [
    (CgroupLayout(), "/kubepods/burstable", "pod12-ab", "12-ab"),
    (CgroupLayout(), "/kubepods", "pod7", "7"),
    (CgroupLayout(), "/kubepods", "burstable", None),
    (CgroupLayout(), "/kubepods", "besteffort", None),
    (CgroupLayout(), "/kubepods", "pod", None),
    (CgroupLayout(), "/kubepods", "podpod1", None),  # split on "pod" into three parts: not a pod (upstream)
    (CgroupLayout(), "/kubepods", "notpods", "s"),  # upstream only splits on "pod": anything under kubepods counts
    (CgroupLayout(cgroup_root="/custom"), "/custom/kubepods/besteffort", "pod9", "9"),
    (SYSTEMD, "/kubepods.slice/kubepods-burstable.slice", "kubepods-burstable-pod12_ab.slice", "12-ab"),
    (SYSTEMD, "/kubepods.slice", "kubepods-pod3_4.slice", "3-4"),
    (SYSTEMD, "/kubepods.slice", "kubepods-besteffort.slice", None),
])
def test_a_pods_uid_is_read_from_its_cgroups_name(layout: CgroupLayout, tier: str, entry: str,
                                                  uid: str | None) -> None:
    assert layout.pod_uid(tier, entry) == uid


def _v1(tmp_path: Path, *cgroups: str) -> Path:
    root = tmp_path / "cgroup"
    for controller in ("cpu", "memory", "pids"):
        (root / controller / "kubepods/burstable").mkdir(parents=True)
        (root / controller / "kubepods/besteffort").mkdir(parents=True)
    for cgroup in cgroups:
        (root / cgroup).mkdir(parents=True, exist_ok=True)
    return root


def test_pod_cgroups_are_found_in_any_hierarchy_and_tier(tmp_path: Path) -> None:
    root = _v1(tmp_path, "cpu/kubepods/poda", "memory/kubepods/poda", "memory/kubepods/besteffort/podb",
               "pids/kubepods/burstable/podc", "cpu/kubepods/other", "cpu/elsewhere/podd")
    (root / "cpu/kubepods/podfile").write_text("")  # not a directory
    found = PodCgroups(str(root), v2=False).pod_cgroups()
    assert found == {"a": ["/kubepods/poda"], "b": ["/kubepods/besteffort/podb"],
                     "c": ["/kubepods/burstable/podc"]}


def test_pod_cgroups_on_cgroup_v2_and_without_cgroups_per_qos(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    (root / "kubepods/burstable/podx").mkdir(parents=True)
    (root / "kubepods/poda").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    assert PodCgroups(str(root), v2=True).pod_cgroups() == {"x": ["/kubepods/burstable/podx"], "a": ["/kubepods/poda"]}
    assert PodCgroups(str(root), v2=True, layout=CgroupLayout(cgroups_per_qos=False)).pod_cgroups() == {}


def test_destroy_kills_the_processes_in_the_cgroup_first(tmp_path: Path) -> None:
    root = _v1(tmp_path, "cpu/kubepods/podk/container")
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        # cgroupfs lists a cgroup's processes in cgroup.procs, here of a container below the pod's cgroup
        (root / "cpu/kubepods/podk/container/cgroup.procs").write_text(f"{sleeper.pid}\n")
        with pytest.raises(CgroupError, match="still in use"):  # a built tree's files keep its directories
            PodCgroups(str(root), v2=False).destroy("k", ["/kubepods/podk"])
        assert sleeper.wait(timeout=10) == -9
    finally:
        sleeper.kill()
        sleeper.wait()


async def test_housekeeping_destroys_only_the_cgroups_of_pods_that_cannot_be_running(tmp_path: Path) -> None:
    pods = {uid: f"kubepods/besteffort/pod{uid}" for uid in ("orphan", "worker", "listed", "running", "volumes")}
    root = _v1(tmp_path, *(f"{controller}/{path}" for controller in ("cpu", "memory") for path in pods.values()))
    (root / "cpu" / pods["volumes"] / "cpu.shares").write_text("1024")
    layout = Layout(str(tmp_path / "root"), pod_log_root=str(tmp_path / "logs"))
    os.makedirs(layout.volumes_dir("volumes"))  # its volumes are not cleaned up yet
    teardown = Teardown()
    keeper = Housekeeping(Api(["listed"]), Relist({"running"}), {"worker"}, teardown, layout,  # type: ignore[arg-type]
                          "spec.nodeName=n", cgroups=PodCgroups(str(root), v2=False))
    await keeper.cleanup_orphans()
    left = {path.name for path in (root / "cpu/kubepods/besteffort").iterdir()}
    assert left == {"podworker", "podlisted", "podrunning", "podvolumes"}
    assert not (root / "memory" / pods["orphan"]).exists()
    # upstream ReduceCPULimits while the volumes remain
    assert (root / "cpu" / pods["volumes"] / "cpu.shares").read_text() == "2"
    # the runtime's orphan is torn down (which removes its cgroup); the orphaned directory too (the fake leaves it)
    assert teardown.pods == ["running", "volumes"]

    # its volumes gone, the next round destroys its cgroup too
    os.rmdir(layout.volumes_dir("volumes"))
    (root / "cpu" / pods["volumes"] / "cpu.shares").unlink()
    await keeper.cleanup_orphans()
    assert {path.name for path in (root / "cpu/kubepods/besteffort").iterdir()} == {"podworker", "podlisted",
                                                                                    "podrunning"}


def test_on_cgroup_v2_only_the_nodes_own_tree_is_looked_at(tmp_path: Path) -> None:
    # another owner's tree one level down (a container's, a nested cluster's) is not this node's
    root = tmp_path / "cgroup"
    (root / "lxc.payload.other/kubepods/besteffort/podforeign").mkdir(parents=True)
    (root / "lxc.payload.other/kubepods/besteffort/podforeign/cgroup.procs").write_text("1\n")
    (root / "kubepods/besteffort/podmine").mkdir(parents=True)
    cgroups = PodCgroups(str(root), v2=True)
    assert cgroups.pod_cgroups() == {"mine": ["/kubepods/besteffort/podmine"]}
    assert cgroups.pids("/kubepods/besteffort/podforeign") == []
    cgroups.remove("foreign")
    assert (root / "lxc.payload.other/kubepods/besteffort/podforeign").is_dir()


def test_reducing_a_cgroup_already_gone_does_not_make_it_again(tmp_path: Path) -> None:
    root = _v1(tmp_path)
    PodCgroups(str(root), v2=False).reduce_cpu_limits("/kubepods/besteffort/podgone")
    assert not (root / "cpu/kubepods/besteffort/podgone").exists()


async def test_a_pod_whose_worker_starts_while_housekeeping_waits_keeps_its_cgroup(tmp_path: Path) -> None:
    root = _v1(tmp_path, "cpu/kubepods/podnew", "memory/kubepods/podnew")
    cgroups = PodCgroups(str(root), v2=False)
    workers: set[str] = set()
    keeper = Housekeeping(Api([]), Relist(), workers, Teardown(),  # type: ignore[arg-type]
                          Layout(str(tmp_path / "root"), pod_log_root=str(tmp_path / "logs")), "spec.nodeName=n",
                          cgroups=cgroups)
    async with cgroups.lock:  # a worker making the pod's cgroup
        cleanup = asyncio.create_task(keeper.cleanup_orphans())
        await asyncio.sleep(0.2)  # housekeeping found the cgroup and waits for the lock
        workers.add("new")
    await cleanup
    assert (root / "cpu/kubepods/podnew").is_dir() and (root / "memory/kubepods/podnew").is_dir()
