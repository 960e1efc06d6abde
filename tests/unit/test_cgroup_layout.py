"""cgroupRoot, cgroupsPerQOS and cgroupDriver: the cgroup names (`kopflet.cm.cgroup_names`, upstream
cgroup_manager_linux.go and its tests), the pod cgroups and ``kubepods`` in cgroup v1 and v2 trees made for the test
(`PodCgroups`, `ContainerManager`), the sandbox's CgroupParent, and the runtime's cgroup driver (CRI RuntimeConfig,
upstream getCgroupDriverFromCRI) from a real gRPC server on a temporary socket."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from cri_client import CriClient, CriError, convert
from cri_client import types as cri_types
from cri_client.proto import api_pb2 as pb
from cri_client.proto import api_pb2_grpc as pb_grpc
from kopflet import node as node_module
from kopflet.api import spec
from kopflet.cm import cgroup_names, helpers, node_allocatable
from kopflet.cm.cgroup_names import CgroupLayout, CgroupNameError
from kopflet.cm.cgroups import PodCgroups, systemd_running
from kopflet.cm.container_manager import CgroupConfigError, ContainerManager
from kopflet.config import settings
from kopflet.kuberuntime import sandbox_config

GIB = 1 << 30
CAPACITY = node_allocatable.internal_capacity(4, 8 * GIB, 32768)
UID = "6c1a4e95-6bb6-11e6-bc26-28d2444e470d"


def _pod(resources: dict[str, Any] | None = None, uid: str = UID) -> spec.Pod:
    container: dict[str, Any] = {"name": "c", "image": "i"}
    if resources is not None:
        container["resources"] = resources
    return spec.pod_from_body({"metadata": {"uid": uid, "name": "p", "namespace": "ns"},
                               "spec": {"containers": [container]}})


BEST_EFFORT = _pod()
BURSTABLE = _pod({"requests": {"cpu": "100m"}})
GUARANTEED = _pod({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}})


# ------------------------------------------------------------------------------------------- names (pure)


@pytest.mark.parametrize(("name", "systemd", "cgroupfs"), [
    # upstream TestCgroupNameToSystemd, TestCgroupNameToCgroupfs and TestCgroupNameToSystemdBasename
    ((), "/", "/"),
    (("Burstable",), "/Burstable.slice", "/Burstable"),
    (("Burstable", "pod-123"), "/Burstable.slice/Burstable-pod_123.slice", "/Burstable/pod-123"),
    (("BestEffort", "pod-6c1a4e95-6bb6-11e6-bc26-28d2444e470d"),
     "/BestEffort.slice/BestEffort-pod_6c1a4e95_6bb6_11e6_bc26_28d2444e470d.slice",
     "/BestEffort/pod-6c1a4e95-6bb6-11e6-bc26-28d2444e470d"),
    (("kubepods",), "/kubepods.slice", "/kubepods"),
    (("system", "Burstable"), "/system.slice/system-Burstable.slice", "/system/Burstable"),
    (("test", "a", "b", "Burstable"), "/test.slice/test-a.slice/test-a-b.slice/test-a-b-Burstable.slice",
     "/test/a/b/Burstable"),
    (("kubepods", "burstable", "pod1234-abcd"),
     "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd.slice",
     "/kubepods/burstable/pod1234-abcd"),
])
def test_cgroup_name_spellings(name: tuple[str, ...], systemd: str, cgroupfs: str) -> None:
    assert cgroup_names.to_systemd(name) == systemd
    assert cgroup_names.to_cgroupfs(name) == cgroupfs
    if name:
        assert cgroup_names.parse_systemd(systemd) == name  # "-" escaped as "_" comes back
        assert cgroup_names.is_systemd_style_name(systemd)
    assert cgroup_names.parse_cgroupfs(cgroupfs) == name


@pytest.mark.parametrize(("slice_name", "expanded"), [
    ("-.slice", "/"),
    ("a.slice", "/a.slice"),
    ("a-b-c.slice", "/a.slice/a-b.slice/a-b-c.slice"),
    ("a--b.slice", None), ("-a.slice", None), ("a-.slice", None), ("a", None), ("a/b.slice", None), (".slic", None),
])
def test_expand_slice(slice_name: str, expanded: str | None) -> None:
    """opencontainers/cgroups systemd.ExpandSlice, its refusals included."""
    if expanded is None:
        with pytest.raises(CgroupNameError, match=f"invalid slice name: {slice_name}"):
            cgroup_names.expand_slice(slice_name)
    else:
        assert cgroup_names.expand_slice(slice_name) == expanded


@pytest.mark.parametrize(("text", "name"), [
    ("", ()), ("/", ()), ("/custom", ("custom",)), ("custom", ("custom",)), ("/a/b", ("a", "b")),
    ("/a//b", ("a", "", "b")),  # upstream keeps the empty component (TestNewCgroupName)
])
def test_parse_cgroupfs(text: str, name: tuple[str, ...]) -> None:
    assert cgroup_names.parse_cgroupfs(text) == name


@pytest.mark.parametrize("component", ["a/b", "a_b"])
def test_new_cgroup_name_refuses_what_systemd_cannot_undo(component: str) -> None:
    with pytest.raises(CgroupNameError, match=r"invalid character in component \[\"a.b\"\] of CgroupName"):
        cgroup_names.new_cgroup_name(("kubepods",), component)


# The pods' root, each tier and a pod's cgroup, by layout (upstream NodeAllocatableRoot, GetQOSContainersInfo,
# GetPodContainerName; podContainerManagerNoop without cgroupsPerQOS).
LAYOUTS = {
    "defaults": (CgroupLayout(), "/kubepods", "/kubepods/burstable", f"/kubepods/besteffort/pod{UID}",
                 f"/kubepods/pod{UID}"),
    "root-slash": (CgroupLayout(cgroup_root="/"), "/kubepods", "/kubepods/burstable",
                   f"/kubepods/besteffort/pod{UID}", f"/kubepods/pod{UID}"),
    "custom-root": (CgroupLayout(cgroup_root="/custom"), "/custom/kubepods", "/custom/kubepods/burstable",
                    f"/custom/kubepods/besteffort/pod{UID}", f"/custom/kubepods/pod{UID}"),
    "nested-root": (CgroupLayout(cgroup_root="/a/b/"), "/a/b/kubepods", "/a/b/kubepods/burstable",
                    f"/a/b/kubepods/besteffort/pod{UID}", f"/a/b/kubepods/pod{UID}"),
    "systemd": (CgroupLayout(driver="systemd"), "/kubepods.slice", "/kubepods.slice/kubepods-burstable.slice",
                "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
                "6c1a4e95_6bb6_11e6_bc26_28d2444e470d.slice",
                "/kubepods.slice/kubepods-pod6c1a4e95_6bb6_11e6_bc26_28d2444e470d.slice"),
    "systemd-custom-root": (CgroupLayout(cgroup_root="/custom", driver="systemd"),
                            "/custom.slice/custom-kubepods.slice",
                            "/custom.slice/custom-kubepods.slice/custom-kubepods-burstable.slice",
                            "/custom.slice/custom-kubepods.slice/custom-kubepods-besteffort.slice/"
                            "custom-kubepods-besteffort-pod6c1a4e95_6bb6_11e6_bc26_28d2444e470d.slice",
                            "/custom.slice/custom-kubepods.slice/"
                            "custom-kubepods-pod6c1a4e95_6bb6_11e6_bc26_28d2444e470d.slice"),
    "no-qos": (CgroupLayout(cgroups_per_qos=False), "/", None, "", ""),
    "no-qos-custom-root": (CgroupLayout(cgroup_root="/custom", cgroups_per_qos=False), "/custom", None, "", ""),
    "no-qos-systemd": (CgroupLayout(cgroup_root="/custom", cgroups_per_qos=False, driver="systemd"),
                       "/custom.slice", None, "", ""),
}


@pytest.mark.parametrize(("layout", "pods_root", "burstable", "best_effort_pod", "guaranteed_pod"),
                         LAYOUTS.values(), ids=LAYOUTS.keys())
def test_layout(layout: CgroupLayout, pods_root: str, burstable: str | None, best_effort_pod: str,
                guaranteed_pod: str) -> None:
    assert layout.pods_root == pods_root
    assert cgroup_names.node_allocatable_root(layout.cgroup_root, layout.cgroups_per_qos, layout.driver) == pods_root
    if burstable is not None:
        assert layout.qos_cgroup("Burstable") == burstable
        assert layout.qos_cgroup("Guaranteed") == pods_root
    assert layout.pod_cgroup_parent(BEST_EFFORT) == best_effort_pod
    assert layout.pod_cgroup_parent(GUARANTEED) == guaranteed_pod
    assert len(layout.pod_cgroup_candidates(UID)) == (3 if layout.cgroups_per_qos else 0)


@pytest.mark.parametrize(("layout", "expected"), [
    (CgroupLayout(), "/kubepods/burstable/poduid-1"),
    (CgroupLayout(cgroup_root="/custom"), "/custom/kubepods/burstable/poduid-1"),
    (CgroupLayout(driver="systemd"), "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poduid_1.slice"),
    (CgroupLayout(cgroups_per_qos=False), ""),  # upstream podContainerManagerNoop: the runtime's default
])
def test_the_sandbox_cgroup_parent(layout: CgroupLayout, expected: str) -> None:
    pod = _pod({"requests": {"cpu": "100m"}}, uid="uid-1")
    linux = sandbox_config.linux_sandbox_config(pod, layout.pod_cgroup_parent(pod))
    assert linux.cgroup_parent == expected
    assert convert.linux_sandbox_config_to_pb(linux).cgroup_parent == expected  # as the runtime gets it


def test_the_default_layout_names_what_helpers_did() -> None:
    for pod in (BEST_EFFORT, BURSTABLE, GUARANTEED):
        assert cgroup_names.DEFAULT_LAYOUT.pod_cgroup_parent(pod) == helpers.pod_cgroup_parent(pod)


@pytest.mark.parametrize(("argv", "layout"), [
    ([], CgroupLayout()),
    (["--cgroup-root=/custom"], CgroupLayout(cgroup_root="/custom")),
    (["--cgroups-per-qos=false", "--enforce-node-allocatable="], CgroupLayout(cgroups_per_qos=False)),
    (["--cgroups-per-qos=false", "--enforce-node-allocatable=none"], CgroupLayout(cgroups_per_qos=False)),
    (["--cgroup-driver=systemd"], CgroupLayout(driver="systemd")),
])
def test_flags_make_the_layout(argv: list[str], layout: CgroupLayout) -> None:
    assert settings.load(argv, {}, "node-1", lambda _: "").cgroup_layout == layout


# ----------------------------------------------------------------------------------- the trees (I/O)


def _v1_tree(tmp_path: Path, controllers: tuple[str, ...] = ("cpu", "cpuacct", "memory", "pids")) -> Path:
    root = tmp_path / "cgroup"
    for controller in controllers:
        (root / controller).mkdir(parents=True)
    return root


def _v2_tree(tmp_path: Path) -> Path:
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids\n")
    (root / "cgroup.subtree_control").write_text("")
    return root


def _v1_files(directory: Path) -> None:
    """The files cgroupfs would show in a new v1 cgroup (a tmpfs tree does not make them)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("cpu.shares", "cpu.cfs_quota_us", "cpu.cfs_period_us", "memory.limit_in_bytes", "pids.max"):
        (directory / name).write_text("")


@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
async def test_a_custom_root_holds_kubepods_and_its_tiers(tmp_path: Path, v2: bool) -> None:
    root = _v2_tree(tmp_path) if v2 else _v1_tree(tmp_path)
    layout = CgroupLayout(cgroup_root="/custom")
    if v2:
        (root / "custom").mkdir()
        (root / "custom" / "cgroup.controllers").write_text("cpuset cpu memory hugetlb pids\n")
        for part in ("custom/kubepods", "custom/kubepods/burstable", "custom/kubepods/besteffort"):
            (root / part).mkdir()
            for name in ("cpu.weight", "cpu.max", "memory.max", "pids.max", "cgroup.controllers"):
                (root / part / name).write_text("")
    else:
        for controller in ("cpu", "cpuacct", "memory", "pids"):
            (root / controller / "custom").mkdir()
            for tier in ("", "/burstable", "/besteffort"):
                _v1_files(root / controller / f"custom/kubepods{tier}")
    events: list[tuple[str, str, str]] = []
    manager = ContainerManager(
        PodCgroups(str(root), v2=v2, layout=layout), capacity=CAPACITY, system_reserved={"memory": "1Gi"},
        kube_reserved={}, enforcement=("pods",), hugepage_sizes=(), active_pods=lambda: [BURSTABLE],
        node_event=lambda *event: events.append(event))
    await manager.start()
    await manager.close()
    assert events == [("Normal", "NodeAllocatableEnforced", "Updated Node Allocatable limit across pods")]
    if v2:
        assert (root / "custom/kubepods/memory.max").read_text() == str(7 * GIB)
        assert (root / "custom/kubepods/burstable/cpu.weight").read_text() == "4"  # 102 shares
        assert not (root / "kubepods").exists()
    else:
        assert (root / "memory/custom/kubepods/memory.limit_in_bytes").read_text() == str(7 * GIB)
        assert (root / "cpu/custom/kubepods/cpu.shares").read_text() == "4096"
        assert (root / "cpu/custom/kubepods/burstable/cpu.shares").read_text() == "102"
        assert (root / "cpu/custom/kubepods/besteffort/cpu.shares").read_text() == "2"
        assert not (root / "cpu/kubepods").exists()

    # the pod's cgroup under the custom root, read back and removed
    cgroups = manager.cgroups
    name = cgroups.pod_cgroup_parent(BURSTABLE)
    assert name == f"/custom/kubepods/burstable/pod{UID}"
    cgroups.apply(name, helpers.pod_resource_config(BURSTABLE))
    assert cgroups.exists(name)
    cgroups.remove(UID)
    assert not cgroups.exists(name)


@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
async def test_a_missing_cgroup_root_stops_the_agent(tmp_path: Path, v2: bool) -> None:
    root = _v2_tree(tmp_path) if v2 else _v1_tree(tmp_path)
    manager = ContainerManager(
        PodCgroups(str(root), v2=v2, layout=CgroupLayout(cgroup_root="/custom")), capacity=CAPACITY,
        system_reserved={}, kube_reserved={}, enforcement=("pods",), hugepage_sizes=(), active_pods=list,
        node_event=lambda *_: None)
    with pytest.raises(CgroupConfigError) as info:
        await manager.start()
    if v2:
        assert str(info.value) == (f'invalid configuration: could not read controllers for cgroup ["custom"]: '
                                   f"open {root}/custom/cgroup.controllers: no such file or directory")
    else:
        missing = ", ".join(f"{root}/{c}/custom" for c in ("cpu", "cpuacct", "memory", "pids"))
        assert str(info.value) == f'invalid configuration: cgroup ["custom"] has some missing paths: {missing}'
    assert not any(root.rglob("kubepods*"))  # nothing was made


async def test_a_v2_root_without_the_controllers_stops_the_agent(tmp_path: Path) -> None:
    root = _v2_tree(tmp_path)
    (root / "custom").mkdir()
    (root / "custom" / "cgroup.controllers").write_text("cpu memory\n")
    manager = ContainerManager(
        PodCgroups(str(root), v2=True, layout=CgroupLayout(cgroup_root="/custom")), capacity=CAPACITY,
        system_reserved={}, kube_reserved={}, enforcement=("pods",), hugepage_sizes=(), active_pods=list,
        node_event=lambda *_: None)
    with pytest.raises(CgroupConfigError, match=r'^invalid configuration: cgroup \["custom"\] has some missing '
                                                r"controllers: cpuset, hugetlb, pids$"):
        await manager.start()


@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
@pytest.mark.parametrize("cgroup_root", ["", "/custom"])
async def test_without_cgroups_per_qos_there_is_no_kubepods(tmp_path: Path, v2: bool, cgroup_root: str) -> None:
    """upstream: no kubepods, no QoS tiers, no pod cgroups; a non-empty cgroupRoot still gets the whole node's
    shares, memory and pids (enforceNodeAllocatableCgroups), and it is not checked to exist first."""
    root = _v2_tree(tmp_path) if v2 else _v1_tree(tmp_path)
    if cgroup_root and v2:
        (root / "custom").mkdir()
        for name in ("cpu.weight", "memory.max", "pids.max"):
            (root / "custom" / name).write_text("")
    elif cgroup_root:
        for controller in ("cpu", "memory", "pids"):
            _v1_files(root / controller / "custom")
    events: list[tuple[str, str, str]] = []
    cgroups = PodCgroups(str(root), v2=v2, layout=CgroupLayout(cgroup_root=cgroup_root, cgroups_per_qos=False))
    manager = ContainerManager(
        cgroups, capacity=CAPACITY, system_reserved={"memory": "1Gi"}, kube_reserved={}, enforcement=(),
        hugepage_sizes=(), active_pods=lambda: [BURSTABLE], node_event=lambda *event: events.append(event))
    assert manager.allocatable_memory is None
    await manager.start()
    await manager.update_qos()
    await manager.close()
    assert not any(root.rglob("kubepods*")) and not any(root.rglob("burstable"))
    if cgroup_root:
        assert events == [("Normal", "NodeAllocatableEnforced", "Updated Node Allocatable limit across pods")]
        memory = root / "custom/memory.max" if v2 else root / "memory/custom/memory.limit_in_bytes"
        assert memory.read_text() == str(8 * GIB)  # the whole node: nothing is enforced
    else:
        assert events == []  # the root cgroup is left alone
    assert cgroups.pod_cgroup_parent(BURSTABLE) == ""
    assert cgroups.layout.pod_cgroup_candidates(UID) == ()
    cgroups.remove(UID)  # nothing to remove, nothing fails


@pytest.mark.parametrize("cgroups_per_qos", [True, False])
async def test_the_systemd_driver_without_systemd_stops_the_agent(tmp_path: Path, cgroups_per_qos: bool) -> None:
    """This host's case: PID 1 is not systemd (no /run/systemd/system). Upstream's libcontainer refuses the first
    cgroup with this error and the kubelet exits ("Failed to start ContainerManager")."""
    root = _v1_tree(tmp_path)
    manager = ContainerManager(
        PodCgroups(str(root), v2=False, layout=CgroupLayout(driver="systemd", cgroups_per_qos=cgroups_per_qos)),
        capacity=CAPACITY, system_reserved={}, kube_reserved={}, enforcement=("pods",) if cgroups_per_qos else (),
        hugepage_sizes=(), active_pods=list, node_event=lambda *_: None,
        systemd_dir=str(tmp_path / "run" / "systemd" / "system"))
    with pytest.raises(CgroupConfigError, match=r"^Failed to start ContainerManager: systemd not running on this "
                                                r"host, cannot use systemd cgroups manager$"):
        await manager.start()
    assert not any(root.rglob("kubepods*"))


async def test_the_systemd_driver_with_systemd_uses_the_slices(tmp_path: Path) -> None:
    """Where systemd runs (a directory stands in for /run/systemd/system), the slices are the cgroups; written
    through cgroupfs here, where upstream asks systemd over D-Bus (not verifiable on this host)."""
    root = _v1_tree(tmp_path)
    systemd_dir = tmp_path / "run" / "systemd" / "system"
    systemd_dir.mkdir(parents=True)
    assert systemd_running(str(systemd_dir)) and not systemd_running(str(tmp_path / "nowhere"))
    for controller in ("cpu", "memory", "pids"):
        for part in ("kubepods.slice", "kubepods.slice/kubepods-burstable.slice",
                     "kubepods.slice/kubepods-besteffort.slice"):
            _v1_files(root / controller / part)
    manager = ContainerManager(
        PodCgroups(str(root), v2=False, layout=CgroupLayout(driver="systemd")), capacity=CAPACITY,
        system_reserved={}, kube_reserved={}, enforcement=("pods",), hugepage_sizes=(), active_pods=list,
        node_event=lambda *_: None, systemd_dir=str(systemd_dir))
    await manager.start()
    await manager.close()
    assert (root / "cpu/kubepods.slice/cpu.shares").read_text() == "4096"
    assert (root / "cpu/kubepods.slice/kubepods-besteffort.slice/cpu.shares").read_text() == "2"


async def test_the_failure_event_names_the_internal_cgroup(tmp_path: Path) -> None:
    """upstream formats cm.cgroupRoot (a CgroupName) with %q: ["custom" "kubepods"], whatever the driver."""
    root = _v1_tree(tmp_path, ("memory",))
    (root / "memory" / "custom" / "kubepods" / "memory.limit_in_bytes").mkdir(parents=True)  # refuses writes
    arrived = asyncio.Event()
    events: list[tuple[str, ...]] = []
    manager = ContainerManager(
        PodCgroups(str(root), v2=False, layout=CgroupLayout(cgroup_root="/custom")), capacity=CAPACITY,
        system_reserved={}, kube_reserved={}, enforcement=("pods",), hugepage_sizes=(), active_pods=list,
        node_event=lambda *event: (events.append(event), arrived.set()))
    task = asyncio.create_task(manager.start())
    await asyncio.wait_for(arrived.wait(), 5)
    assert events[0][1] == "FailedNodeAllocatableEnforcement"
    assert events[0][2].startswith('Failed to update Node Allocatable Limits ["custom" "kubepods"]: ')
    await task
    await manager.close()


# ------------------------------------------------------------------ the runtime's driver (CRI RuntimeConfig)


class _Runtime(pb_grpc.RuntimeServiceServicer):
    """RuntimeConfig as containerd 2.x answers it, or not at all (containerd 1.6: UNIMPLEMENTED)."""

    def __init__(self, answer: pb.RuntimeConfigResponse | grpc.StatusCode | None) -> None:
        self.answer, self.calls = answer, 0

    async def RuntimeConfig(self, request: pb.RuntimeConfigRequest,
                            context: grpc.aio.ServicerContext) -> pb.RuntimeConfigResponse:
        self.calls += 1
        if self.answer is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method RuntimeConfig")
        if isinstance(self.answer, grpc.StatusCode):
            await context.abort(self.answer, "starting")
        assert isinstance(self.answer, pb.RuntimeConfigResponse)
        return self.answer


async def _serve(servicer: _Runtime) -> AsyncIterator[str]:
    with tempfile.TemporaryDirectory(prefix="kopflet-cri-") as tmp:
        endpoint = f"unix://{tmp}/cri.sock"
        server = grpc.aio.server()
        pb_grpc.add_RuntimeServiceServicer_to_server(servicer, server)
        server.add_insecure_port(endpoint)
        await server.start()
        try:
            yield endpoint
        finally:
            await server.stop(grace=None)


@pytest.mark.parametrize(("answer", "driver"), [
    (None, ""),  # containerd 1.6: the configured cgroupDriver stands
    (pb.RuntimeConfigResponse(), ""),  # no linux section: the configured one stands
    (pb.RuntimeConfigResponse(linux=pb.LinuxRuntimeConfiguration(cgroup_driver=pb.SYSTEMD)), "systemd"),
    (pb.RuntimeConfigResponse(linux=pb.LinuxRuntimeConfiguration(cgroup_driver=pb.CGROUPFS)), "cgroupfs"),
], ids=["unimplemented", "no-linux", "systemd", "cgroupfs"])
async def test_the_runtime_tells_its_cgroup_driver(answer: pb.RuntimeConfigResponse | None, driver: str) -> None:
    servicer = _Runtime(answer)
    async for endpoint in _serve(servicer):
        async with CriClient(endpoint, timeout=5) as cri:
            assert await node_module.cgroup_driver_from_cri(cri, delay=0) == driver
    assert servicer.calls == 1


async def test_other_runtime_config_errors_are_tried_three_times() -> None:
    servicer = _Runtime(grpc.StatusCode.UNAVAILABLE)
    async for endpoint in _serve(servicer):
        async with CriClient(endpoint, timeout=5) as cri:
            with pytest.raises(CriError) as info:
                await node_module.cgroup_driver_from_cri(cri, delay=0)
    assert servicer.calls == 3 and info.value.code == "UNAVAILABLE"


def test_an_unknown_driver_value_is_an_error() -> None:
    with pytest.raises(CriError, match="runtime returned an unknown cgroup driver 7"):
        node_module.cgroup_driver_from_runtime_config(cri_types.RuntimeConfig(linux_cgroup_driver=7))


@pytest.mark.parametrize(("name", "effective"), [("containerd", "containerd"), ("cri-o", "cri-o"), ("hollow", "hollow"),
                                               ("", "containerd")])
def test_container_ids_take_the_runtimes_name(name: str, effective: str) -> None:
    """upstream kubeGenericRuntimeManager.runtimeName, from CRI Version: every containerID is <name>://<id>."""
    cfg = settings.load([], {}, "node-1", lambda _: "")
    runtime = node_module.Runtime(None, None, name, "2.1.0", "v1")  # type: ignore[arg-type]
    assert runtime.configured(cfg).runtime_name == effective


@pytest.mark.parametrize(("configured", "told", "effective"), [
    ("cgroupfs", "", "cgroupfs"), ("cgroupfs", "systemd", "systemd"), ("systemd", "cgroupfs", "cgroupfs"),
])
def test_the_runtime_driver_replaces_the_configured_one(configured: str, told: str, effective: str) -> None:
    cfg = settings.load([f"--cgroup-driver={configured}"], {}, "node-1", lambda _: "")
    runtime = node_module.Runtime(None, None, "containerd", "2.1.0", "v1", told)  # type: ignore[arg-type]
    assert runtime.configured(cfg).cgroup_driver == effective
    assert runtime.configured(cfg).cgroup_layout.driver == effective
