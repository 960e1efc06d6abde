"""No CFS quota on exclusive CPUs: upstream DisableCPUQuotaWithExclusiveCPUs (locked on at v1.37.1,
pkg/features/kube_features.go). A container the static CPU manager gave CPUs of its own (`GetExclusiveCPUs`
non-empty: cm/container_manager.go containerHasExclusiveCPUs / podHasExclusiveCPUs) runs with cpu quota -1, and so
do its pod's sandbox and pod cgroup, at each of upstream's four places:

1. the container's LinuxContainerResources at CreateContainer (generateLinuxContainerResources →
   calculateLinuxResources(disableCPUQuota)): -1 only with cpuCFSQuota, the period still set;
2. the sandbox's LinuxPodSandboxConfig.resources at RunPodSandbox (calculateSandboxResources);
3. the pod cgroup at creation (podContainerManager.EnsureExists: enforceCPULimits false → ResourceConfigForPod -1);
4. an in-place resize (doPodResizeAction: the pod cgroup's config with enforceCPULimits false, and each container's
   UpdateContainerResources through generateLinuxContainerResources again).

The exclusive CPU sets come from the static policy's own admission (`cpu_manager.admit`) on a 2-CPU machine with
CPU 0 reserved: a Guaranteed container with an integer cpu gets CPU 1, a non-integer one stays on the shared pool.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from cri_client import types as cri
from kopflet.allocation.state import AllocationManager
from kopflet.api.spec import Pod, pod_from_body
from kopflet.backoff import Backoff
from kopflet.cm import helpers
from kopflet.cm.cgroups import PodCgroups
from kopflet.cm.cpumanager import cpu_manager
from kopflet.cm.cpumanager import manager as io
from kopflet.cm.cpumanager.cpu_manager import Pods, Snapshot
from kopflet.cm.cpumanager.cpuset import EMPTY, parse
from kopflet.container.podstate import RuntimePodStatus
from kopflet.container.sync_result import SyncResult
from kopflet.kuberuntime import container_config, reconciler, resize, sandbox_config
from kopflet.kuberuntime.executor import PodSyncer
from kopflet.paths import Layout
from tests.unit.test_cpumanager_manager import TWO_CPUS, static

MI = 2**20
PERIOD = helpers.QUOTA_PERIOD
CAPACITY = 8 * 2**30


def res(cpu: str, memory: str = "64Mi", *, limits: bool = True) -> dict[str, Any]:
    requests = {"cpu": cpu, "memory": memory}
    return {"requests": requests, "limits": dict(requests)} if limits else {"requests": requests}


def make_pod(*containers: tuple[str, dict[str, Any]], init: tuple[tuple[str, dict[str, Any]], ...] = (),
             overhead: dict[str, str] | None = None, uid: str = "u") -> Pod:
    spec: dict[str, Any] = {"containers": [{"name": n, "image": "i", "resources": r} for n, r in containers]}
    if init:
        spec["initContainers"] = [{"name": n, "image": "i", "resources": r} for n, r in init]
    if overhead is not None:
        spec["overhead"] = overhead
    return pod_from_body({"metadata": {"name": "p", "namespace": "ns", "uid": uid}, "spec": spec})


# A Guaranteed pod: "pinned" asks for a whole CPU (exclusive under static), "shared" for 500m (the shared pool).
MIXED = make_pod(("pinned", res("1")), ("shared", res("500m")))
# A Guaranteed pod whose integer-cpu init container is pinned, its app container not.
PINNED_INIT = make_pod(("app", res("500m")), init=(("setup", res("1")),))
# Burstable: an integer request without a limit gets nothing of its own.
BURSTABLE = make_pod(("app", res("1", limits=False)))


def exclusive(pod: Pod, policy: str) -> dict[str, Any]:
    """The pod's exclusive CPUs after the CPU manager admitted it under `policy` (what `CPUManager.exclusive_cpus`
    answers then)."""
    if policy == "none":
        return cpu_manager.pod_exclusive_cpus(cpu_manager.restore(None, "none", None, "f")[0], pod.uid)
    chosen = static()
    state, _ = cpu_manager.restore(chosen, "static", None, "f")
    admitted = cpu_manager.admit(Snapshot(policy=chosen, state=state, pods=Pods()), pod)
    assert admitted.rejection is None and admitted.state is not None
    return cpu_manager.pod_exclusive_cpus(admitted.state, pod.uid)


# ------------------------------------------------------------------------------------------ the decision

def test_the_static_policy_pins_only_integer_guaranteed_containers() -> None:
    assert exclusive(MIXED, "static") == {"pinned": parse("1")}
    assert exclusive(PINNED_INIT, "static") == {"setup": parse("1")}
    assert exclusive(BURSTABLE, "static") == {}
    assert exclusive(MIXED, "none") == {}


@pytest.mark.parametrize(("exclusive_cpus", "container", "expected"), [
    ({"pinned": parse("1")}, "pinned", True),
    ({"pinned": parse("1-3")}, "shared", False),
    ({"pinned": EMPTY}, "pinned", False),  # GetExclusiveCPUs empty: the shared pool
    ({}, "pinned", False),  # the none policy
    ({"pinned": (2, 3)}, "pinned", True),  # any collection of CPU ids
])
def test_container_has_exclusive_cpus(exclusive_cpus: dict[str, Any], container: str, expected: bool) -> None:
    assert helpers.container_has_exclusive_cpus(exclusive_cpus, container) is expected


@pytest.mark.parametrize(("pod", "exclusive_cpus", "expected"), [
    (MIXED, {"pinned": parse("1")}, True),
    (MIXED, {"shared": EMPTY}, False),
    (PINNED_INIT, {"setup": parse("1")}, True),  # init containers count
    (MIXED, {"gone": parse("1")}, False),  # only the pod's own containers are asked, as upstream
    (MIXED, {}, False),
])
def test_pod_has_exclusive_cpus(pod: Pod, exclusive_cpus: dict[str, Any], expected: bool) -> None:
    assert helpers.pod_has_exclusive_cpus(pod, exclusive_cpus) is expected


def test_ephemeral_containers_are_not_asked() -> None:
    body = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [{"name": "app", "image": "i"}],
                     "ephemeralContainers": [{"name": "debug", "image": "i"}]}}
    assert not helpers.pod_has_exclusive_cpus(pod_from_body(body), {"debug": parse("1")})


# ------------------------------------------------------------------------- 1. the container at creation

@pytest.mark.parametrize(("pod", "policy", "container", "cfs_quota", "period", "quota"), [
    pytest.param(MIXED, "static", "pinned", True, PERIOD, -1, id="static, integer Guaranteed: no quota"),
    pytest.param(MIXED, "static", "shared", True, PERIOD, 50000, id="static, 500m in the same pod: its quota"),
    pytest.param(MIXED, "none", "pinned", True, PERIOD, 100000, id="none policy: the quota"),
    pytest.param(MIXED, "static", "pinned", False, 0, 0, id="cpuCFSQuota off: neither period nor quota"),
    pytest.param(MIXED, "none", "pinned", False, 0, 0, id="cpuCFSQuota off, none policy"),
    pytest.param(PINNED_INIT, "static", "setup", True, PERIOD, -1, id="static, pinned init container"),
    pytest.param(PINNED_INIT, "static", "app", True, PERIOD, 50000, id="static, the init container's app"),
    pytest.param(BURSTABLE, "static", "app", True, PERIOD, 0, id="static, Burstable: no limit, no quota"),
])
def test_the_container_config(pod: Pod, policy: str, container: str, cfs_quota: bool, period: int,
                              quota: int) -> None:
    spec = next(c for c in (*pod.spec.init_containers, *pod.spec.containers) if c.name == container)
    cpus = exclusive(pod, policy)
    resources = container_config.linux_resources(pod, spec, memory_capacity=CAPACITY, cpu_cfs_quota=cfs_quota,
                                                 exclusive_cpus=cpus)
    assert (resources.cpu_period, resources.cpu_quota) == (period, quota)
    assert resources.cpu_shares == helpers.milli_cpu_to_shares(1000 if spec.resources.requests["cpu"] == "1" else 500)
    # build_container_config passes them through: what CreateContainer gets
    config = container_config.build_container_config(pod, spec, restart_count=0, env=(), image_ref="sha256:x",
                                                     memory_capacity=CAPACITY, cpu_cfs_quota=cfs_quota,
                                                     exclusive_cpus=cpus)
    assert config.linux is not None and config.linux.resources == resources


# ----------------------------------------------------------------------------- 2. the sandbox's resources

@pytest.mark.parametrize(("pod", "policy", "cfs_quota", "expected"), [
    pytest.param(MIXED, "static", True, cri.LinuxContainerResources(
        cpu_shares=1536, cpu_period=PERIOD, cpu_quota=-1, memory_limit_in_bytes=128 * MI), id="static: no quota"),
    pytest.param(MIXED, "none", True, cri.LinuxContainerResources(
        cpu_shares=1536, cpu_period=PERIOD, cpu_quota=150000, memory_limit_in_bytes=128 * MI), id="none policy"),
    pytest.param(MIXED, "static", False, cri.LinuxContainerResources(
        cpu_shares=1536, memory_limit_in_bytes=128 * MI), id="cpuCFSQuota off"),
    pytest.param(PINNED_INIT, "static", True, cri.LinuxContainerResources(
        cpu_shares=1024, cpu_period=PERIOD, cpu_quota=-1, memory_limit_in_bytes=64 * MI),
        id="static, a pinned init container"),
    pytest.param(BURSTABLE, "static", True, cri.LinuxContainerResources(cpu_shares=1024, cpu_period=PERIOD),
                 id="static, Burstable"),
    # upstream TestApplySandboxResources (cgroup v1): the overhead is left out of the resources
    pytest.param(make_pod(("c", {"requests": {"memory": "128Mi", "cpu": "2"},
                                 "limits": {"memory": "256Mi", "cpu": "4"}}), overhead={"memory": "128Mi", "cpu": "1"}),
                 "static", True, cri.LinuxContainerResources(cpu_shares=2048, cpu_period=PERIOD, cpu_quota=400000,
                                                             memory_limit_in_bytes=256 * MI),
                 id="upstream: pod with overhead"),
    pytest.param(make_pod(("c", {"requests": {"memory": "128Mi"}, "limits": {"memory": "256Mi"}})), "static", True,
                 cri.LinuxContainerResources(cpu_shares=2, cpu_period=PERIOD, memory_limit_in_bytes=256 * MI),
                 id="upstream: pod without overhead"),
])
def test_the_sandbox_resources(pod: Pod, policy: str, cfs_quota: bool, expected: cri.LinuxContainerResources) -> None:
    resources = container_config.sandbox_linux_resources(pod, cpu_cfs_quota=cfs_quota,
                                                         exclusive_cpus=exclusive(pod, policy))
    assert resources == expected
    config = sandbox_config.build_sandbox_config(pod, 0, dns=sandbox_config.DnsSettings(), layout=Layout("/x"),
                                                 resources=resources)
    assert config.linux is not None and config.linux.resources == expected


def test_the_overhead_keeps_its_quota() -> None:
    """upstream convertOverheadToLinuxResources calls calculateLinuxResources with disableCPUQuota false."""
    pod = make_pod(("pinned", res("1")), overhead={"cpu": "250m", "memory": "32Mi"})
    assert exclusive(pod, "static") == {"pinned": parse("1")}
    assert resize.overhead_linux_resources(pod) == cri.LinuxContainerResources(
        cpu_shares=256, cpu_period=PERIOD, cpu_quota=25000, memory_limit_in_bytes=32 * MI)


# ------------------------------------------------------------------------------------- 3. the pod cgroup

@pytest.mark.parametrize(("pod", "policy", "cfs_quota", "quota", "period"), [
    pytest.param(MIXED, "static", True, -1, PERIOD, id="static: no quota"),
    pytest.param(MIXED, "none", True, 150000, PERIOD, id="none policy: the quota"),
    pytest.param(MIXED, "static", False, -1, PERIOD, id="cpuCFSQuota off: -1 as before"),
    pytest.param(MIXED, "none", False, -1, PERIOD, id="cpuCFSQuota off, none policy: -1 as before"),
    pytest.param(PINNED_INIT, "static", True, -1, PERIOD, id="static, a pinned init container"),
    pytest.param(BURSTABLE, "static", True, None, None, id="static, Burstable without limits: no quota set"),
])
def test_the_pod_cgroup_config(pod: Pod, policy: str, cfs_quota: bool, quota: int | None,
                               period: int | None) -> None:
    config = helpers.pod_resource_config(pod, cpu_cfs_quota=cfs_quota, exclusive_cpus=exclusive(pod, policy))
    assert (config.cpu_quota, config.cpu_period) == (quota, period)
    unpinned = helpers.pod_resource_config(pod, cpu_cfs_quota=cfs_quota)
    assert dataclasses.replace(config, cpu_quota=unpinned.cpu_quota) == unpinned  # nothing else changes


NO_QUOTA = helpers.ResourceConfig(cpu_shares=1536, cpu_quota=-1, cpu_period=PERIOD, memory=128 * MI)


@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
def test_the_pod_cgroup_files_for_no_quota(tmp_path: Path, v2: bool) -> None:
    """What the kernel gets for quota -1 (libcontainer fs / fs2): v1 cpu.cfs_quota_us "-1" after the period, v2
    cpu.max "max <period>"; and the kubelet's read-back is quota -1 again."""
    name = "/kubepods/podu"
    files = ("cpu.weight", "cpu.max", "memory.max") if v2 else ()
    if v2:
        (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
        (tmp_path / "cgroup.subtree_control").write_text("")
        directory = tmp_path / "kubepods" / "podu"
    else:
        directory = tmp_path / "cpu" / "kubepods" / "podu"
        memory = tmp_path / "memory" / "kubepods" / "podu"
        memory.mkdir(parents=True)
        (memory / "memory.limit_in_bytes").write_text("")
        files = ("cpu.shares", "cpu.cfs_quota_us", "cpu.cfs_period_us")
    directory.mkdir(parents=True)
    for file in files:  # what cgroupfs shows in a new cgroup (a test tree has to make them)
        (directory / file).write_text("")
    cgroups = PodCgroups(str(tmp_path), v2=v2)
    cgroups.apply(name, NO_QUOTA)
    if v2:
        assert helpers.cgroup_v2_files(NO_QUOTA)["cpu.max"] == "max 100000"
        assert (directory / "cpu.max").read_text() == "max 100000"
    else:
        assert helpers.cgroup_v1_files(NO_QUOTA)["cpu"] == {
            "cpu.shares": "1536", "cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "-1"}
        assert (directory / "cpu.cfs_quota_us").read_text() == "-1"
        assert (directory / "cpu.cfs_period_us").read_text() == "100000"
    read = cgroups.read(name)
    assert read is not None and (read.cpu_quota, read.cpu_period) == (-1, PERIOD)


# ------------------------------------------------------------- through PodSyncer with the CPU manager's state

class RecordingCgroups:
    """No pod cgroup yet; `apply` records what a new one is made with; `read` answers the last one written."""

    def __init__(self) -> None:
        self.applied: list[tuple[str, helpers.ResourceConfig]] = []
        self.current = helpers.ResourceConfig()
        self.lock = asyncio.Lock()

    def exists(self, name: str) -> bool:
        return False

    def apply(self, name: str, config: helpers.ResourceConfig) -> None:
        self.applied.append((name, config))
        self.current = resize.merge_resource_config(self.current, config)

    def read(self, name: str) -> helpers.ResourceConfig:
        return self.current

    def memory_usage(self, name: str) -> int:
        return 0


class FakeContainers:
    def __init__(self) -> None:
        self.created: list[cri.ContainerConfig] = []
        self.updated: list[tuple[str, cri.LinuxContainerResources]] = []

    async def create(self, sandbox_id: str, config: cri.ContainerConfig, sandbox: Any) -> str:
        self.created.append(config)
        return f"cid-{config.metadata.name}"

    async def start(self, container_id: str) -> None:
        pass

    async def update_resources(self, container_id: str, resources: cri.LinuxContainerResources) -> None:
        self.updated.append((container_id, resources))


class FakeSandboxes:
    def __init__(self) -> None:
        self.updated: list[cri.LinuxContainerResources] = []

    async def update_resources(self, sandbox_id: str, resources: cri.LinuxContainerResources,
                               overhead: cri.LinuxContainerResources) -> None:
        self.updated.append(resources)

    async def status(self, sandbox_id: str) -> cri.PodSandboxStatus:
        return cri.PodSandboxStatus(id=sandbox_id)


class FakeImages:
    async def ensure(self, *_: Any) -> str:
        return "sha256:i"

    async def image_status(self, ref: str) -> None:
        return None

    async def status(self, ref: str) -> None:
        return None


class FakeCri:
    def __init__(self) -> None:
        self.containers, self.sandboxes, self.images = FakeContainers(), FakeSandboxes(), FakeImages()


class Ignore:
    def pod_event(self, *_: Any, **__: Any) -> None:
        pass

    async def setup(self, pod: Pod) -> dict[str, Any]:
        return {}


async def admitted_syncer(tmp_path: Path, policy: str, pod: Pod) -> tuple[PodSyncer, FakeCri, RecordingCgroups]:
    """A PodSyncer with a CPU manager under `policy` that admitted `pod` (its state committed, as decide does)."""
    from kopflet.config.settings import AgentConfig

    cpus = io.CPUManager(policy, {}, reconcile_period=10.0, topology=TWO_CPUS, system_reserved={},
                         kube_reserved={}, reserved_cpus="0" if policy == "static" else "",
                         state_file=str(tmp_path / "cpu_manager_state"), cri=None, lock=asyncio.Lock())
    await cpus.start()
    admitted = cpu_manager.admit(cpus.snapshot(Pods()), pod)
    if admitted.state is not None:
        await cpus.commit(admitted.state)
    syncer = PodSyncer.__new__(PodSyncer)
    fake, cgroups = FakeCri(), RecordingCgroups()
    layout = Layout(str(tmp_path / "root"), str(tmp_path / "pods"), str(tmp_path / "containers"))
    syncer.cfg, syncer.cri, syncer.recorder, syncer.volumes = AgentConfig(node_name="n"), fake, Ignore(), Ignore()  # type: ignore[assignment]
    syncer.images = fake.images  # type: ignore[assignment]
    syncer.layout, syncer.allocations, syncer.cpus, syncer.cgroups = layout, AllocationManager(layout), cpus, cgroups  # type: ignore[assignment]
    syncer.node_memory_capacity, syncer.masked_paths, syncer.hugepage_sizes = CAPACITY, (), ()
    syncer.dns, syncer.before_pod_cgroup, syncer.backoff = sandbox_config.DnsSettings(), None, Backoff()

    async def environment(*_: Any) -> list[tuple[str, str]]:
        return []

    syncer.environment = environment  # type: ignore[method-assign]
    return syncer, fake, cgroups


@pytest.mark.parametrize(("policy", "pod_quota", "sandbox_quota", "container_quotas"), [
    pytest.param("static", -1, -1, {"pinned": -1, "shared": 50000}, id="static"),
    pytest.param("none", 150000, 150000, {"pinned": 100000, "shared": 50000}, id="none"),
])
async def test_a_new_pod_through_the_syncer(tmp_path: Path, policy: str, pod_quota: int, sandbox_quota: int,
                                            container_quotas: dict[str, int]) -> None:
    """SyncPod's order: the sandbox config (its resources), the pod cgroup, the sandbox, the containers; each with
    the CPU manager's state as admission left it."""
    syncer, fake, cgroups = await admitted_syncer(tmp_path, policy, MIXED)
    sandboxes: list[cri.PodSandboxConfig] = []

    async def create_sandbox(pod: Pod, config: cri.PodSandboxConfig, result: Any) -> str:
        sandboxes.append(config)
        return "sb"

    syncer.create_sandbox = create_sandbox  # type: ignore[method-assign]
    actions = reconciler.PodActions(create_sandbox=True, containers_to_start=("pinned", "shared"))
    result = await syncer.sync(MIXED, RuntimePodStatus(uid="u"), actions)
    assert not result.sandbox_error and not result.waiting
    [(_, pod_config)] = cgroups.applied
    assert (pod_config.cpu_quota, pod_config.cpu_period) == (pod_quota, PERIOD)
    [sandbox] = sandboxes
    assert sandbox.linux is not None and sandbox.linux.resources is not None
    assert (sandbox.linux.resources.cpu_quota, sandbox.linux.resources.cpu_period) == (sandbox_quota, PERIOD)
    assert sandbox.linux.overhead == cri.LinuxContainerResources()  # no overhead: an empty one, as upstream
    created = {c.metadata.name: c.linux.resources for c in fake.containers.created}  # type: ignore[union-attr]
    assert {name: r.cpu_quota for name, r in created.items()} == container_quotas
    assert {name: r.cpu_period for name, r in created.items()} == {"pinned": PERIOD, "shared": PERIOD}
    assert created["pinned"].cpuset_cpus == ("1" if policy == "static" else "")


# --------------------------------------------------------------------------------------- 4. in-place resize

def values(cpu: int, memory: int) -> resize.Values:
    return resize.Values(cpu_request=cpu, cpu_limit=cpu, memory_request=memory, memory_limit=memory)


# The allocated pod after a resize: both containers' memory to 128Mi, the shared one's cpu to 600m.
RESIZED = make_pod(("pinned", res("1", "128Mi")), ("shared", res("600m", "128Mi")))
UPDATES = resize.ResizeActions(
    memory_updates=(
        resize.ContainerUpdate(name="pinned", container_id="cid-pinned", resource=resize.MEMORY,
                               desired=values(1000, 128 * MI), current=values(1000, 64 * MI)),
        resize.ContainerUpdate(name="shared", container_id="cid-shared", resource=resize.MEMORY,
                               desired=values(600, 128 * MI), current=values(500, 64 * MI))),
    cpu_updates=(resize.ContainerUpdate(name="shared", container_id="cid-shared", resource=resize.CPU,
                                        desired=values(600, 128 * MI), current=values(500, 64 * MI)),),
)


@pytest.mark.parametrize(("policy", "pod_quota", "container_quotas"), [
    pytest.param("static", -1, [("cid-pinned", -1), ("cid-shared", 50000), ("cid-shared", 60000)], id="static"),
    pytest.param("none", 160000, [("cid-pinned", 100000), ("cid-shared", 50000), ("cid-shared", 60000)],
                 id="none"),
])
async def test_a_resize_keeps_the_quota_off(tmp_path: Path, policy: str, pod_quota: int,
                                           container_quotas: list[tuple[str, int]]) -> None:
    """upstream doPodResizeAction: the pod cgroup's target has enforceCPULimits false while a container holds
    exclusive CPUs, and every UpdateContainerResources is generateLinuxContainerResources again: the pinned
    container's memory resize leaves its quota -1, the shared one's cpu resize sets its own."""
    syncer, fake, cgroups = await admitted_syncer(tmp_path, policy, MIXED)
    assert await syncer.ensure_pod_cgroup(MIXED, SyncResult())  # as created, before the resize
    result = SyncResult()
    await syncer.resize(RESIZED, RuntimePodStatus(uid="u"), UPDATES, result)
    assert result.resize_error == ""
    assert syncer.pod_cgroup_config(RESIZED).cpu_quota == pod_quota
    assert cgroups.current.cpu_quota == pod_quota and cgroups.current.memory == 256 * MI
    assert [(cid, r.cpu_quota) for cid, r in fake.containers.updated] == container_quotas
    assert all(r.cpu_period == PERIOD for _, r in fake.containers.updated)
    assert fake.sandboxes.updated and fake.sandboxes.updated[-1].cpu_quota == pod_quota  # UpdatePodSandboxResources


async def test_the_cpu_manager_answers_the_pods_exclusive_cpus(tmp_path: Path) -> None:
    syncer, _, _ = await admitted_syncer(tmp_path, "static", MIXED)
    assert syncer.cpus is not None and syncer.cpus.exclusive_cpus("u") == {"pinned": parse("1")}
    assert syncer.cpus.exclusive_cpus("other") == {}
    assert syncer.exclusive_cpus(MIXED) == {"pinned": parse("1")}
    bare = PodSyncer.__new__(PodSyncer)  # no CPU manager at all
    assert bare.exclusive_cpus(MIXED) == {}


# ------------------------------------------------------------------------------- what the status reads back

POD_LEVEL = pod_from_body({"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
                           "spec": {"resources": {"requests": {"cpu": "2", "memory": "128Mi"},
                                                  "limits": {"cpu": "2", "memory": "128Mi"}},
                                    "containers": [{"name": "app", "image": "i"}]}})
RUNNING_WITH = {"phase": "Running", "resources": {"limits": {"cpu": "2"}}}


@pytest.mark.parametrize(("pod", "cgroup", "previous", "cpu_limit"), [
    pytest.param(MIXED, NO_QUOTA, {"phase": "Running"}, None, id="exclusive CPUs: no limit read back"),
    pytest.param(POD_LEVEL, dataclasses.replace(NO_QUOTA, cpu_quota=200000), RUNNING_WITH, "2", id="a quota: read"),
    pytest.param(POD_LEVEL, NO_QUOTA, RUNNING_WITH, "2", id="-1: the previous status keeps its value"),
    pytest.param(POD_LEVEL, NO_QUOTA, {"phase": "Running"}, "2", id="-1, nothing before: the allocated value"),
])
def test_an_unlimited_pod_cgroup_reads_back_no_cpu_limit(pod: Pod, cgroup: helpers.ResourceConfig,
                                                          previous: dict[str, Any], cpu_limit: str | None) -> None:
    """upstream convertToAPIPodLevelResourcesStatus: CPULimitsFromConfig gives no limit for quota -1 (QuotaToMilliCPU
    0), so the previous status's cpu limit is kept (preserveOldResourcesValue), never a limit of "0"."""
    status = resize.pod_status_resources(pod, running=True, cgroup=cgroup, previous=previous)
    assert status.get("limits", {}).get("cpu") == cpu_limit
