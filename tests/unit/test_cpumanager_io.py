"""The CPU manager's I/O side (kopflet.cm.cpumanager.manager): the topology read from a sysfs tree, the
``cpu_manager_state`` file written and read back with real files, and the reconcile loop's container updates
against a fake runtime."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from cri_client import CriError
from cri_client import types as cri
from kopflet.client.kubeapi import KubeApiError
from kopflet.cm.cpumanager import cpu_manager, topology
from kopflet.cm.cpumanager import manager as io
from kopflet.cm.cpumanager import state as cs
from kopflet.cm.cpumanager.cpu_manager import Pods, RunningContainer
from kopflet.cm.cpumanager.cpuset import parse
from kopflet.cm.cpumanager.static_policy import State
from tests.unit.test_cpumanager_manager import TWO_CPUS, pods, st
from tests.unit.test_cpumanager_static_policy import make_pod, res


def sysfs(root: Path, cpus: dict[int, tuple[int, int]], nodes: dict[int, str], offline: tuple[int, ...] = ()) -> \
        tuple[str, str]:
    """A sysfs tree: cpu -> (package, core id), node -> cpulist."""
    cpu_dir, node_dir = root / "cpu", root / "node"
    for cpu, (package, core) in cpus.items():
        (cpu_dir / f"cpu{cpu}" / "topology").mkdir(parents=True)
        (cpu_dir / f"cpu{cpu}" / "topology" / "physical_package_id").write_text(f"{package}\n")
        (cpu_dir / f"cpu{cpu}" / "topology" / "core_id").write_text(f"{core}\n")
        if cpu:  # the boot CPU has no `online` file
            (cpu_dir / f"cpu{cpu}" / "online").write_text("0\n" if cpu in offline else "1\n")
    (cpu_dir / "cpufreq").mkdir(parents=True, exist_ok=True)  # other entries are not CPUs
    for node, cpulist in nodes.items():
        (node_dir / f"node{node}").mkdir(parents=True)
        (node_dir / f"node{node}" / "cpulist").write_text(cpulist + "\n")
    return str(cpu_dir), str(node_dir)


def test_read_topology_of_this_projects_machine_shape(tmp_path: Path) -> None:
    t = io.read_topology(*sysfs(tmp_path, {0: (0, 0), 1: (0, 1)}, {0: "0-1"}))
    assert (t.num_cpus, t.num_cores, t.num_sockets, t.num_numa_nodes, t.cpus_per_core()) == (2, 2, 1, 1, 1)


def test_read_topology_with_smt_and_an_offline_cpu(tmp_path: Path) -> None:
    t = io.read_topology(*sysfs(tmp_path, {0: (0, 0), 1: (0, 1), 2: (0, 0), 3: (0, 1), 4: (0, 2)},
                                {0: "0-4"}, offline=(4,)))
    assert (t.num_cpus, t.num_cores, t.cpus_per_core()) == (4, 2, 2)
    assert str(t.details.cpus_in_cores(t.cpu_core_id(2))) == "0,2"


def test_read_topology_without_cpus(tmp_path: Path) -> None:
    with pytest.raises(topology.TopologyError, match="could not detect number of cpus"):
        io.read_topology(str(tmp_path / "cpu"), str(tmp_path / "node"))


@pytest.mark.skipif(not os.path.isdir(topology.CPU_DIR), reason="no sysfs")
def test_read_topology_of_the_host() -> None:
    online = (Path(topology.CPU_DIR) / "online").read_text().strip()
    assert io.read_topology().details.cpus() == parse(online)


# ---------------------------------------------------------------------------------------------- manager

class FakeContainers:
    def __init__(self) -> None:
        self.updates: list[tuple[str, str]] = []
        self.fail: set[str] = set()

    async def update_resources(self, container_id: str, linux: cri.LinuxContainerResources) -> None:
        assert linux == cri.LinuxContainerResources(cpuset_cpus=linux.cpuset_cpus)  # only the cpuset, as upstream
        if container_id in self.fail:
            raise CriError("UNKNOWN", "boom", "UpdateContainerResources")
        self.updates.append((container_id, linux.cpuset_cpus))


class FakeCri:
    def __init__(self) -> None:
        self.containers = FakeContainers()


def manager(tmp_path: Path, policy: str = "static", **kwargs: Any) -> io.CPUManager:
    kwargs.setdefault("system_reserved", {})
    kwargs.setdefault("kube_reserved", {})
    kwargs.setdefault("reserved_cpus", "0" if policy == "static" else "")
    kwargs.setdefault("topology", TWO_CPUS)
    return io.CPUManager(policy, kwargs.pop("options", {}), reconcile_period=10.0,
                         state_file=str(tmp_path / "cpu_manager_state"), cri=kwargs.pop("cri", FakeCri()),
                         lock=asyncio.Lock(), **kwargs)


def on_disk(tmp_path: Path) -> dict[str, Any]:
    return json.loads((tmp_path / "cpu_manager_state").read_text())


async def test_a_new_static_state_is_written_with_every_cpu_shared(tmp_path: Path) -> None:
    m = manager(tmp_path)
    await m.start()
    assert m.static and str(m.policy.reserved) == "0" and m.state == st("0-1")  # type: ignore[union-attr]
    assert (tmp_path / "cpu_manager_state").read_text() == cs.encode("static", st("0-1"))
    assert on_disk(tmp_path)["defaultCpuSet"] == "0-1"
    assert not (tmp_path / "cpu_manager_state.tmp").exists()


async def test_the_none_policy_writes_its_checkpoint_too(tmp_path: Path) -> None:
    m = manager(tmp_path, "none")
    await m.start()
    assert not m.static and m.affinity("p", "c") == ""
    assert on_disk(tmp_path)["policyName"] == "none" and on_disk(tmp_path)["defaultCpuSet"] == ""
    assert await asyncio.wait_for(m.run(), 1) is None  # no reconcile loop for the none policy


async def test_allocations_survive_a_restart(tmp_path: Path) -> None:
    m = manager(tmp_path)
    await m.start()
    await m.commit(st("0", {"pod-a": {"main": "1"}}))
    assert on_disk(tmp_path)["entries"] == {"pod-a": {"main": "1"}}
    again = manager(tmp_path)
    await again.start()
    assert again.state == st("0", {"pod-a": {"main": "1"}})
    assert (again.affinity("pod-a", "main"), again.affinity("pod-b", "c")) == ("1", "0")
    before = (tmp_path / "cpu_manager_state").stat().st_mtime_ns
    await again.commit(again.state)  # unchanged: not written again
    assert (tmp_path / "cpu_manager_state").stat().st_mtime_ns == before


async def test_the_checkpoint_of_a_kubelet_is_read(tmp_path: Path) -> None:
    """A file a v1.37.1 kubelet wrote (its checksums) is restored as it is."""
    (tmp_path / "cpu_manager_state").write_text(cs.encode("static", st("0", {"u": {"c": "1"}})))
    m = manager(tmp_path)
    await m.start()
    assert m.state == st("0", {"u": {"c": "1"}})


@pytest.mark.parametrize(("policy", "content", "message"), [
    ("static", cs.encode("none", State()),
     'start cpu manager error: could not restore state from checkpoint: configured policy "static" differs from '
     'state checkpoint policy "none", please drain this node and delete the CPU manager checkpoint file "{path}" '
     'before restarting Kubelet'),
    ("none", cs.encode("static", st("0-1")),
     'start cpu manager error: could not restore state from checkpoint: configured policy "none" differs from '
     'state checkpoint policy "static", please drain this node'),
    ("static", cs.encode("static", st("0-1")).replace('"dataChecksum":', '"dataChecksum":1'),
     "start cpu manager error: could not restore state from checkpoint: could not load v4 checkpoint: checkpoint "
     "is corrupted"),
    ("static", cs.encode("static", st("0-3")),
     'start cpu manager error: current set of available CPUs "0-1" doesn\'t match with CPUs in state "0-3"'),
])
async def test_start_errors(tmp_path: Path, policy: str, content: str, message: str) -> None:
    (tmp_path / "cpu_manager_state").write_text(content)
    m = manager(tmp_path, policy)
    with pytest.raises(io.CPUManagerError) as err:
        await m.start()
    assert str(err.value).startswith(message.format(path=tmp_path / "cpu_manager_state"))
    assert (tmp_path / "cpu_manager_state").read_text() == content  # left for the operator to remove


async def test_start_error_of_the_policy(tmp_path: Path) -> None:
    m = manager(tmp_path, reserved_cpus="3")
    with pytest.raises(io.CPUManagerError, match="reserved-cpus: 3 is not a subset of online-cpus: 0-1"):
        await m.start()
    assert not (tmp_path / "cpu_manager_state").exists()


# ---------------------------------------------------------------------------------------------- reconcile

async def test_reconcile_updates_shared_containers_when_the_pool_changes(tmp_path: Path) -> None:
    fake = FakeCri()
    known = pods(g=("main",), b=("main",))
    running = [RunningContainer("g", "main", "id-g"), RunningContainer("b", "main", "id-b")]
    m = manager(tmp_path, cri=fake, pods=lambda: known, running=lambda: running)
    await m.start()
    m.container_created("id-b", m.affinity("b", "main"))  # created while every CPU was shared
    assert m.affinity("b", "main") == "0-1"
    await m.commit(st("0", {"g": {"main": "1"}}))  # g admitted
    m.container_created("id-g", m.affinity("g", "main"))
    await m.reconcile()
    assert fake.containers.updates == [("id-b", "0")]
    await m.reconcile()  # nothing changed since
    assert fake.containers.updates == [("id-b", "0")]


async def test_reconcile_releases_the_cpus_of_a_pod_gone_and_grows_the_pool(tmp_path: Path) -> None:
    fake = FakeCri()
    live = {"pods": pods(g=("main",), b=("main",))}
    running = [RunningContainer("b", "main", "id-b")]
    m = manager(tmp_path, cri=fake, pods=lambda: live["pods"], running=lambda: running)
    await m.start()
    await m.commit(st("0", {"g": {"main": "1"}}))
    m.container_created("id-b", "0")
    live["pods"] = Pods(known=frozenset({"g", "b"}), active={"b": frozenset({"main"})})  # g terminated
    await m.reconcile()
    assert m.state == st("0-1") and on_disk(tmp_path)["defaultCpuSet"] == "0-1" and "entries" not in on_disk(tmp_path)
    assert fake.containers.updates == [("id-b", "0-1")]


@pytest.mark.parametrize(("listed", "released"), [
    (["other"], True),  # the apiserver does not have the pod: gone while the agent was down
    (["g"], False),  # it does: its worker is not there yet (a restart), the CPUs stay
    (KubeApiError(500, "InternalError", "down", "GET", "/api/v1/pods"), False),  # cannot tell: asked again later
])
async def test_an_unknown_pods_cpus_wait_for_the_apiserver(tmp_path: Path, listed: Any, released: bool) -> None:
    asked: list[bool] = []

    async def list_uids() -> list[str]:
        asked.append(True)
        if isinstance(listed, Exception):
            raise listed
        return listed

    m = manager(tmp_path, pods=Pods, listed=list_uids)
    await m.start()
    await m.commit(st("0", {"g": {"main": "1"}}))
    await m.reconcile()
    assert asked == [True]
    assert (m.state == st("0-1")) is released


async def test_a_failed_update_is_tried_again(tmp_path: Path) -> None:
    fake = FakeCri()
    fake.containers.fail.add("id-b")
    m = manager(tmp_path, cri=fake, pods=lambda: pods(b=("main",)),
                running=lambda: [RunningContainer("b", "main", "id-b")])
    await m.start()
    await m.reconcile()
    assert fake.containers.updates == [] and "id-b" not in m.applied
    fake.containers.fail.clear()
    await m.reconcile()
    assert fake.containers.updates == [("id-b", "0-1")] and m.applied == {"id-b": parse("0-1")}


async def test_containers_gone_are_forgotten(tmp_path: Path) -> None:
    m = manager(tmp_path, pods=lambda: pods(b=("main",)), running=list)
    await m.start()
    m.container_created("id-old", "0-1")
    await m.reconcile()
    assert m.applied == {}


async def test_the_loop_reconciles_at_once_and_goes_on_after_a_failure(tmp_path: Path) -> None:
    calls: list[int] = []
    third = asyncio.Event()

    def running() -> list[RunningContainer]:
        calls.append(1)
        if len(calls) == 3:
            third.set()
        if len(calls) == 1:
            raise RuntimeError("first round fails")
        return []

    m = manager(tmp_path, running=running)
    m.reconcile_period = 0.01
    await m.start()
    task = asyncio.create_task(m.run())
    await asyncio.wait_for(third.wait(), 5)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_affinity_of_an_admitted_pod(tmp_path: Path) -> None:
    m = manager(tmp_path)
    await m.start()
    pod = make_pod("p", ("c", res("1")), ("side", res("500m", "500m")))
    admitted = cpu_manager.admit(m.snapshot(Pods()), pod)
    assert admitted.state is not None
    await m.commit(admitted.state)
    assert (m.affinity("p", "c"), m.affinity("p", "side")) == ("1", "0")
