"""The device manager as a topology manager hint provider (upstream devicemanager/topology_hints.go and its
tests at v1.37.1: GetTopologyHints, GetPodTopologyHints, generateDeviceTopologyHints; manager.go filterByAffinity
and devicesToAllocate along the hint), and the pod-resources API's view of its devices (container_manager.go
containerDevicesFromResourceDeviceInstances, pod_devices.go getContainerDevices, manager.go GetAllocatableDevices).
Pure tables here; the plugins, the topology manager and the CPU and memory managers together in
test_podresources_providers.py."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import pytest

from kopflet.api import spec
from kopflet.apis.podresources.resources import ContainerDevices, TopologyInfo
from kopflet.cm import admission as resource_admission
from kopflet.cm.devicemanager import devices
from kopflet.cm.devicemanager.devices import ContainerAllocation, Device, Need, TopologySnapshot
from kopflet.cm.topologymanager import policy as topology_policy
from kopflet.cm.topologymanager import topology_manager
from kopflet.cm.topologymanager.bitmask import BitMask
from kopflet.cm.topologymanager.policy import NO_HINT, ProviderHints, TopologyHint
from kopflet.lifecycle import admission

T = "testdevice"


def numa(id_: str, *nodes: int) -> Device:
    """upstream's makeNUMADevice (healthy, on the given nodes)."""
    return Device(id_, devices.HEALTHY, tuple(nodes))


def hint(*nodes: int, preferred: bool = True) -> TopologyHint:
    return TopologyHint(BitMask.of(*nodes), preferred)


def pod(limits: dict[str, str], *, init: list[dict[str, str]] | None = None, uid: str = "fake-pod",
        containers: list[dict[str, str]] | None = None) -> spec.Pod:
    def c(name: str, lim: dict[str, str], **extra: Any) -> dict[str, Any]:
        return {"name": name, "image": "i", "resources": {"limits": lim, "requests": lim}, **extra}
    apps = [c("fake-container", limits)] + [c(f"app{i}", lim) for i, lim in enumerate(containers or ())]
    return spec.pod_from_body({"metadata": {"name": "p", "namespace": "ns", "uid": uid},
                               "spec": {"containers": apps,
                                        "initContainers": [c(f"init{i}", lim) for i, lim in enumerate(init or ())]}})


def snapshot(known: dict[str, list[Device]], allocated: dict[str, dict[str, dict[str, list[str]]]] | None = None,
             reusable: dict[str, frozenset[str]] | None = None) -> TopologySnapshot:
    """As upstream's test harness: every device healthy, `allocated` pod -> container -> resource -> IDs."""
    pod_devices = {uid: {name: {r: ContainerAllocation(devices.devices_per_numa(ids, {d.id: d for d in known[r]}),
                                                       None, None) for r, ids in rs.items()}
                         for name, rs in cs.items()} for uid, cs in (allocated or {}).items()}
    in_use: dict[str, set[str]] = {}
    for cs in (allocated or {}).values():
        for rs in cs.values():
            for r, ids in rs.items():
                in_use.setdefault(r, set()).update(ids)
    return TopologySnapshot(numa_nodes=(0, 1), all={r: {d.id: d for d in ds} for r, ds in known.items()},
                            healthy={r: frozenset(d.id for d in ds) for r, ds in known.items()},
                            allocated={r: frozenset(ids) for r, ids in in_use.items()}, pod_devices=pod_devices,
                            reusable=reusable or {}, resources=frozenset(known))


# upstream getCommonTestCases, the container's hints
@pytest.mark.parametrize(("limits", "known", "allocated", "expected"), [
    pytest.param({T: "1"}, {T: [Device("Dev1", "Healthy"), Device("Dev2", "Healthy"), Device("Dev3", "Healthy", ()),
                                Device("Dev4", "Healthy", ())]}, None, {T: None}, id="no alignment"),
    pytest.param({T: "1"}, {T: [Device("Dev1", "Healthy"), numa("Dev2", 1)]}, None, {T: [hint(1)]},
                 id="only one with alignment"),
    pytest.param({T: "1"}, {T: [numa("Dev1", 0), numa("Dev2", 1)]}, None,
                 {T: [hint(0), hint(1), hint(0, 1, preferred=False)]}, id="one device per socket"),
    pytest.param({T: "2"}, {T: [numa("Dev1", 0), numa("Dev2", 1)]}, None, {T: [hint(0, 1)]},
                 id="request for 2, one device per socket"),
    pytest.param({T: "2"}, {T: [numa("Dev1", 0), numa("Dev2", 1), numa("Dev3", 0), numa("Dev4", 1)]}, None,
                 {T: [hint(0), hint(1), hint(0, 1, preferred=False)]}, id="request for 2, 2 devices per socket"),
    pytest.param({T: "2"}, {T: [numa("Dev1", 0), numa("Dev2", 1), numa("Dev3", 0), numa("Dev4", 1)]},
                 {"fake-pod": {"fake-other-container": {T: ["Dev1", "Dev2"]}}}, {T: [hint(0, 1, preferred=False)]},
                 id="optimal on 1 NUMA node, forced cross-NUMA"),
    pytest.param({"testdevice1": "2", "testdevice2": "1"},
                 {"testdevice1": [numa("Dev1", 0), numa("Dev2", 1), numa("Dev3", 0), numa("Dev4", 1)],
                  "testdevice2": [numa("Dev1", 0)]}, None,
                 {"testdevice1": [hint(0), hint(1), hint(0, 1, preferred=False)], "testdevice2": [hint(0)]},
                 id="2 device types, mixed configuration"),
    pytest.param({T: "6"}, {T: [numa("Dev1", 0), numa("Dev2", 0), numa("Dev3", 1), numa("Dev4", 1)]}, None, {T: []},
                 id="more requested than available"),
    pytest.param({T: "2"}, {T: [numa("Dev1", 0), numa("Dev2", 0)]},
                 {"fake-pod": {"fake-container": {T: ["Dev1", "Dev2"]}}}, {T: [hint(0)]},
                 id="all already allocated to container"),
    pytest.param({T: "4"}, {T: [numa("Dev1", 0), numa("Dev2", 0), numa("Dev3", 1), numa("Dev4", 1)]},
                 {"fake-pod": {"fake-container": {T: ["Dev1", "Dev2"]}}}, {T: []},
                 id="less already allocated than requested"),
    pytest.param({T: "2"}, {T: [numa("Dev1", 0), numa("Dev2", 0), numa("Dev3", 1), numa("Dev4", 1)]},
                 {"fake-pod": {"fake-container": {T: ["Dev1", "Dev2", "Dev3", "Dev4"]}}}, {T: []},
                 id="more already allocated than requested"),
    pytest.param({"cpu": "1"}, {T: [numa("Dev1", 0)]}, None, {}, id="no device resource asked for"),
])
def test_container_topology_hints(limits: dict[str, str], known: dict[str, list[Device]],
                                  allocated: dict[str, dict[str, dict[str, list[str]]]] | None,
                                  expected: dict[str, list[TopologyHint] | None]) -> None:
    p = pod(limits)
    assert snapshot(known, allocated).topology_hints(p, p.spec.containers[0]) == expected


# upstream TestGetPodTopologyHints' scope cases: the pod's request is its PodLimits
@pytest.mark.parametrize(("p", "expected"), [
    pytest.param(pod({T: "1"}, init=[{T: "2"}]), {T: [hint(0), hint(1), hint(0, 1, preferred=False)]},
                 id="init container asks for more"),
    pytest.param(pod({T: "1"}, containers=[{T: "2"}]), {T: [hint(0, 1)]}, id="app containers add up"),
    pytest.param(pod({T: "3"}), {T: [hint(0, 1)]}, id="more than one node holds"),
])
def test_pod_topology_hints(p: spec.Pod, expected: dict[str, list[TopologyHint]]) -> None:
    known = {T: [numa("Dev1", 0), numa("Dev2", 0), numa("Dev3", 1), numa("Dev4", 1)]}
    assert snapshot(known).pod_topology_hints(p) == expected


# upstream TestTopologyAlignedAllocation's reusable cases (getCommonTestCases with reusable devices)
@pytest.mark.parametrize(("request_", "reusable", "available", "expected"), [
    (1, set(), {"Dev1", "Dev2", "Dev3", "Dev4"}, [hint(0), hint(1), hint(0, 1, preferred=False)]),
    (2, {"Dev1"}, {"Dev2", "Dev3", "Dev4"}, [hint(0), hint(0, 1, preferred=False)]),  # Dev1 is on node 0
    (2, {"Dev1", "Dev3"}, {"Dev2"}, [hint(0, 1, preferred=False)]),
    (1, {"Dev5"}, {"Dev1"}, [hint(0), hint(0, 1, preferred=False)]),  # a reusable device without topology fits all
])
def test_generate_device_topology_hints_with_reusable_devices(request_: int, reusable: set[str], available: set[str],
                                                             expected: list[TopologyHint]) -> None:
    known = {d.id: d for d in (numa("Dev1", 0), numa("Dev2", 0), numa("Dev3", 1), numa("Dev4", 1),
                               Device("Dev5", "Healthy"))}
    assert devices.generate_device_topology_hints(known, (0, 1), available, reusable, request_) == expected


def test_device_nodes_narrow_the_masks_and_unknown_nodes_are_ignored() -> None:
    """upstream deviceNUMANodes: only the nodes holding devices (known to the machine) are combined."""
    known = {d.id: d for d in (numa("Dev1", 2), numa("Dev2", 9))}
    assert devices.generate_device_topology_hints(known, (0, 1, 2, 3), {"Dev1", "Dev2"}, (), 1) == [hint(2)]


@pytest.mark.parametrize(("affinity", "expected"), [
    (NO_HINT, (set(), set(), {"a0", "a01", "b1", "none", "empty"})),
    (hint(0), ({"a0", "a01"}, {"b1"}, {"none", "empty"})),
    (hint(1), ({"a01", "b1"}, {"a0"}, {"none", "empty"})),
])
def test_filter_by_affinity(affinity: TopologyHint, expected: tuple[set[str], set[str], set[str]]) -> None:
    known = {d.id: d for d in (numa("a0", 0), numa("a01", 0, 1), numa("b1", 1), Device("none", "Healthy"),
                               Device("empty", "Healthy", ()))}
    assert devices.filter_by_affinity(known, known, affinity) == expected


def test_filter_by_affinity_without_alignment_leaves_everything_unaligned() -> None:
    known = {"x": Device("x", "Healthy"), "y": Device("y", "Healthy")}
    assert devices.filter_by_affinity(known, known, hint(0)) == (frozenset(), frozenset(), {"x", "y"})


KNOWN = {d.id: d for d in (numa("n0a", 0), numa("n0b", 0), numa("n0c", 0), numa("n1a", 1), numa("n1b", 1),
                           Device("free", "Healthy"))}


# upstream devicesToAllocate along the topology manager's hint
@pytest.mark.parametrize(("required", "affinity", "reusable", "expected"), [
    pytest.param(2, hint(0), set(), Need(needed=2, required=2, taken=frozenset(),
                                         available=frozenset({"n0a", "n0b", "n0c"})),
                 id="fewer than the aligned: the plugin chooses among them"),
    pytest.param(3, hint(0), set(), frozenset({"n0a", "n0b", "n0c"}), id="exactly the aligned ones"),
    pytest.param(4, hint(1), set(),
                 Need(needed=2, required=4, taken=frozenset({"n1a", "n1b"}),
                      available=frozenset({"n0a", "n0b", "n0c", "free"}),
                      fallback=(frozenset({"n0a", "n0b", "n0c"}), frozenset({"free"}))),
                 id="every aligned one, then the others, those without topology last"),
    pytest.param(2, hint(1), {"n0a"}, Need(needed=1, required=2, taken=frozenset({"n0a"}),
                                           available=frozenset({"n1a", "n1b"})),
                 id="reusable ones first"),
    pytest.param(2, NO_HINT, set(), Need(needed=2, required=2, taken=frozenset(), available=frozenset(KNOWN)),
                 id="no hint: every device"),
])
def test_devices_to_allocate_along_the_hint(required: int, affinity: TopologyHint, reusable: set[str],
                                            expected: object) -> None:
    assert devices.devices_to_allocate(
        pod_uid="u", container="c", resource=T, required=required, existing=None, healthy=frozenset(KNOWN),
        in_use=frozenset(), reusable=frozenset(reusable), running_after_restart=False, known=KNOWN,
        hint=affinity) == expected


@pytest.mark.parametrize(("preferred", "expected"), [
    (None, {"n1a", "n1b", "n0a", "n0b"}),
    ({"n0c", "free"}, {"n1a", "n1b", "n0c", "free"}),  # the plugin's choice among the rest wins
])
def test_finish_allocation_falls_back_to_unaligned_then_no_topology(preferred: set[str] | None,
                                                                    expected: set[str]) -> None:
    need = devices.devices_to_allocate(
        pod_uid="u", container="c", resource=T, required=4, existing=None, healthy=frozenset(KNOWN),
        in_use=frozenset(), reusable=frozenset(), running_after_restart=False, known=KNOWN, hint=hint(1))
    assert isinstance(need, Need) and devices.finish_allocation(need, preferred) == expected


# ----------------------------------------------------------------------------------------- pod resources


def gpu(device: str, *nodes: int) -> ContainerDevices:
    return ContainerDevices("example.com/gpu", (device,), TopologyInfo(nodes) if nodes else None)


@pytest.mark.parametrize(("instances", "expected"), [
    ({}, ()),
    ({"example.com/gpu": {"g1": None}}, (gpu("g1"),)),
    ({"example.com/gpu": {"g1": (0,)}}, (gpu("g1", 0),)),
    ({"example.com/gpu": {"g1": (1, 0)}}, (gpu("g1", 0), gpu("g1", 1))),  # one entry per node
    ({"example.com/gpu": {"g1": ()}}, ()),  # a topology without nodes: nothing (upstream's loop)
    ({"example.com/gpu": {"g2": (0,), "g1": None}, "example.com/a": {"x": None}},
     (ContainerDevices("example.com/a", ("x",)), gpu("g1"), gpu("g2", 0))),
])
def test_pod_resources_devices(instances: devices.DeviceInstances, expected: tuple[ContainerDevices, ...]) -> None:
    assert devices.pod_resources_devices(instances) == expected


def test_a_containers_devices_come_from_its_allocation_record() -> None:
    alloc = {"example.com/gpu": ContainerAllocation({0: ("g0", "g01"), 1: ("g01",), -1: ("plain",)}, None, None),
             "example.com/none": ContainerAllocation({}, None, None)}
    assert devices.container_device_instances(alloc) == {"example.com/gpu": {"g0": (0,), "g01": (0, 1),
                                                                             "plain": None}}
    assert devices.pod_resources_devices(devices.container_device_instances(alloc)) == (
        gpu("g0", 0), gpu("g01", 0), gpu("g01", 1), gpu("plain"))
    assert devices.container_device_instances(None) == {}


def test_allocatable_devices_are_the_healthy_ones_the_plugin_reported() -> None:
    known = {"example.com/gpu": {"g0": numa("g0", 0), "g1": Device("g1", devices.UNHEALTHY, (1,)),
                                 "g2": Device("g2", "Healthy")}}
    healthy = {"example.com/gpu": frozenset({"g0", "g2"}), "example.com/restored": frozenset()}
    assert devices.allocatable_device_instances(known, healthy) == {"example.com/gpu": {"g0": (0,), "g2": None}}


# ------------------------------------------------------------------------- deferred allocations (I/O)


@dataclasses.dataclass(frozen=True)
class Deferred:
    """A provider whose allocation the caller makes (as the device manager's): its hints, and what it holds."""

    deferred: ClassVar[bool] = True
    hints: tuple[TopologyHint, ...] = ()
    held: tuple[str, ...] = ()

    def topology_hints(self, pod: spec.Pod, container: spec.ContainerSpec) -> ProviderHints:
        return {T: list(self.hints)}

    def pod_topology_hints(self, pod: spec.Pod) -> ProviderHints:
        return {T: list(self.hints)}

    def allocate(self, pod: spec.Pod, container: spec.ContainerSpec, hint: TopologyHint) -> Deferred:
        raise AssertionError("deferred: never called")


@pytest.mark.parametrize("scope", ["container", "pod"])
def test_admit_steps_yield_the_deferred_allocations_along_the_merged_hint(scope: str) -> None:
    policy = topology_policy.new_policy("single-numa-node", scope, {}, [0, 1])
    p = pod({T: "1"}, init=[{T: "1"}])
    steps = topology_manager.admit_steps(policy, scope, [Deferred((hint(0, preferred=False), hint(1)))], p)
    made = []
    request = next(steps)
    with pytest.raises(StopIteration) as stop:
        while True:
            made.append((request.container.name, request.hint))
            request = steps.send(dataclasses.replace(request.provider, held=(*request.provider.held,  # type: ignore
                                                                                request.container.name)))
    result = stop.value.value
    assert made == [("init0", hint(1)), ("fake-container", hint(1))]
    assert result.rejection is None and result.providers[0].held == ("init0", "fake-container")
    assert result.hints == {"init0": hint(1), "fake-container": hint(1)}


def test_an_error_thrown_into_the_admission_rejects_the_pod_and_stops_it() -> None:
    policy = topology_policy.new_policy("best-effort", "container", {}, [0, 1])
    p = pod({T: "1"}, containers=[{T: "1"}])
    steps = topology_manager.admit_steps(policy, "container", [Deferred((hint(0),))], p)
    next(steps)
    with pytest.raises(StopIteration) as stop:
        steps.throw(topology_manager.AllocationFailed("requested number of devices unavailable"))
    assert stop.value.value.rejection == admission.Rejection(
        reason="UnexpectedAdmissionError",
        message="Pod was rejected: Allocate failed due to requested number of devices unavailable, which is "
                "unexpected")


def test_the_pure_admission_needs_no_driver() -> None:
    """`cm.admission.admit` (no device plugin resources) runs to its end without yielding."""
    p = pod({"cpu": "1"})
    assert resource_admission.admit(topology_manager.NO_TOPOLOGY, None, None, p) == resource_admission.Admission()
