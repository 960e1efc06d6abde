"""The device manager's pure rules (kopflet.cm.devicemanager.devices, checkpoint) against upstream v1.37.1."""

from __future__ import annotations

import pytest

from kopflet.api import spec
from kopflet.cm.devicemanager import checkpoint, devices
from kopflet.cm.devicemanager.devices import (
    AllocationError,
    AllocResponse,
    ContainerAllocation,
    DeviceSpec,
    Mount,
    Need,
)
from kopflet.cm.devicemanager.proto import api_pb2

# Produced by Go (k8s.io/kubernetes v1.37.1 pkg/kubelet/cm/devicemanager/checkpoint, go-spew d8f796af33cc):
# checkpoint.New(entries, registered).MarshalCheckpoint() and dump.ForHash(cp.Data). The program: New(nil, nil);
# New({}, {}); two entries with NUMA -1 and 0, AllocResp nil and bytes, registered with an empty and a nil list; and
# unsorted int keys (2, 10, -1 nil), empty AllocResp, nil DeviceIDs, non-ASCII IDs, keys differing in case.
GO_VECTORS = [
    ("(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)<nil> "
     "RegisteredDevices:(map[string][]string)<nil>}",
     '{"Data":{"PodDeviceEntries":null,"RegisteredDevices":null},"Checksum":1944006890}'),
    ("(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)[] "
     "RegisteredDevices:(map[string][]string)map[]}",
     '{"Data":{"PodDeviceEntries":[],"RegisteredDevices":{}},"Checksum":2932075448}'),
    ("(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)[{PodUID:(string)uid-1 "
     "ContainerName:(string)c1 ResourceName:(string)example.com/resource DeviceIDs:(checkpoint.DevicesPerNUMA)"
     "map[-1:[Dev-2 Dev-1] 0:[Dev-3]] AllocResp:([]uint8)[10 3 97 98 99]} {PodUID:(string)uid-2 "
     "ContainerName:(string)c2 ResourceName:(string)example.com/resource DeviceIDs:(checkpoint.DevicesPerNUMA)"
     "map[] AllocResp:([]uint8)<nil>}] RegisteredDevices:(map[string][]string)map[a.b/c:[] "
     "example.com/resource:[Dev-1 Dev-2 Dev-3] z/q:<nil>]}",
     '{"Data":{"PodDeviceEntries":[{"PodUID":"uid-1","ContainerName":"c1","ResourceName":"example.com/resource",'
     '"DeviceIDs":{"-1":["Dev-2","Dev-1"],"0":["Dev-3"]},"AllocResp":"CgNhYmM="},{"PodUID":"uid-2",'
     '"ContainerName":"c2","ResourceName":"example.com/resource","DeviceIDs":{},"AllocResp":null}],'
     '"RegisteredDevices":{"a.b/c":[],"example.com/resource":["Dev-1","Dev-2","Dev-3"],"z/q":null}},'
     '"Checksum":1951238272}'),
    ("(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)[{PodUID:(string)u "
     "ContainerName:(string)c ResourceName:(string)r/x DeviceIDs:(checkpoint.DevicesPerNUMA)map[-1:<nil> "
     "2:[a b é] 10:[]] AllocResp:([]uint8)[]} {PodUID:(string)u ContainerName:(string)c ResourceName:(string)r/y "
     "DeviceIDs:(checkpoint.DevicesPerNUMA)<nil> AllocResp:([]uint8)[255 0]}] "
     "RegisteredDevices:(map[string][]string)map[R/x:[Z] r/x:[a b é]]}",
     '{"Data":{"PodDeviceEntries":[{"PodUID":"u","ContainerName":"c","ResourceName":"r/x","DeviceIDs":'
     '{"-1":null,"10":[],"2":["a b","é"]},"AllocResp":""},{"PodUID":"u","ContainerName":"c","ResourceName":"r/y",'
     '"DeviceIDs":null,"AllocResp":"/wA="}],"RegisteredDevices":{"R/x":["Z"],"r/x":["a b","é"]}},'
     '"Checksum":649261910}'),
]


@pytest.mark.parametrize(("spewed", "text"), GO_VECTORS)
def test_checkpoint_matches_go_byte_for_byte(spewed: str, text: str) -> None:
    cp = checkpoint.decode(text.encode())
    assert checkpoint.spew(cp) == spewed
    assert checkpoint.encode(cp).decode() == text


@pytest.mark.parametrize(("text", "error"), [
    ('{"Data":{"PodDeviceEntries":[],"RegisteredDevices":{}},"Checksum":1}', checkpoint.ERR_CORRUPT),
    ('{"Data":{"PodDeviceEntries":[],"RegisteredDevices":{"x/y":[]}},"Checksum":2932075448}', checkpoint.ERR_CORRUPT),
    ("not json", "Expecting value"),
    ('{"Data":{"PodDeviceEntries":{}}}', "PodDeviceEntries: not a list"),
    ('{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"x":[]}}]}}', "bad NUMA node"),
    ('{"Data":{"PodDeviceEntries":[{"AllocResp":"!!"}]}}', "AllocResp"),
])
def test_checkpoint_refusals(text: str, error: str) -> None:
    with pytest.raises(checkpoint.CheckpointError, match=error):
        checkpoint.decode(text.encode())


def test_checkpoint_missing_fields_keep_the_empty_values_upstream_starts_from() -> None:
    # getCheckpoint unmarshals into New([]PodDevicesEntry{}, map[string][]string{}): absent keys stay empty.
    empty = checkpoint.Checkpoint((), {})
    assert checkpoint.decode(b'{"Checksum":%d}' % checkpoint.checksum(empty)) == empty


def _alloc(ids: dict[int, tuple[str, ...] | None], **resp: object) -> ContainerAllocation:
    msg = api_pb2.ContainerAllocateResponse(**resp)  # type: ignore[arg-type]
    raw = msg.SerializeToString(deterministic=True)
    return ContainerAllocation(ids, devices.alloc_response_from_bytes(raw), raw)


def test_pod_devices_round_trip_through_the_checkpoint() -> None:
    pod_devices = {"uid": {"c": {"example.com/resource": _alloc({-1: ("Dev-1",)}, envs={"A": "1"})}}}
    cp = devices.to_checkpoint(pod_devices, {"example.com/resource": frozenset({"Dev-2", "Dev-1"})})
    assert cp.registered == {"example.com/resource": ("Dev-1", "Dev-2")}
    restored, registered, skipped = devices.from_checkpoint(checkpoint.decode(checkpoint.encode(cp)))
    assert restored == pod_devices and registered == ("example.com/resource",) and skipped == ()


def test_a_checkpoint_without_entries_writes_null_as_go() -> None:
    cp = devices.to_checkpoint({}, {})
    assert checkpoint.encode(cp).startswith(b'{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{}}')


def test_an_unparsable_answer_is_skipped() -> None:
    cp = checkpoint.Checkpoint((checkpoint.PodDevicesEntry("u", "c", "r/x", {0: ("a",)}, b"\xff\xff"),), {})
    restored, _, skipped = devices.from_checkpoint(cp)
    assert restored == {} and len(skipped) == 1


@pytest.mark.parametrize(("version", "name", "error"), [
    ("v1beta1", "example.com/resource", None),
    ("v1alpha", "example.com/resource",
     'requested API version "v1alpha" is not supported by kubelet. Supported version is ["v1beta1"]'),
    ("v1beta1", "resource", 'the ResourceName "resource" is invalid'),
    ("v1beta1", "kubernetes.io/gpu", 'the ResourceName "kubernetes.io/gpu" is invalid'),
    ("v1beta1", "requests.example.com/x", 'the ResourceName "requests.example.com/x" is invalid'),
])
def test_registration_errors(version: str, name: str, error: str | None) -> None:
    assert devices.registration_error(version, name) == error


@pytest.mark.parametrize(("endpoint", "path"), [
    ("dp.123", "/var/lib/kopflet/device-plugins/dp.123"),
    ("sub/dp.sock", "/var/lib/kopflet/device-plugins/sub/dp.sock"),
    ("../x.sock", "/var/lib/kopflet/x.sock"),
])
def test_endpoint_path_is_joined_as_go(endpoint: str, path: str) -> None:
    assert devices.endpoint_path("/var/lib/kopflet/device-plugins/", endpoint) == path


def test_device_updates_split_healthy_and_unhealthy() -> None:
    result = devices.device_update([devices.Device("a", "Healthy"), devices.Device("b", "Unhealthy"),
                                    devices.Device("c", "Unknown", (0,))])
    assert result.healthy == {"a"} and result.unhealthy == {"b", "c"} and result.all["c"].numa_nodes == (0,)


@pytest.mark.parametrize(("healthy", "unhealthy", "live", "cap", "alloc", "deleted"), [
    ({"r/a": {"1", "2"}}, {"r/a": {"3"}}, ["r/a"], {"r/a": 3}, {"r/a": 2}, set()),
    ({"r/a": set()}, {"r/a": {"1", "2"}}, ["r/a"], {"r/a": 2}, {"r/a": 0}, set()),  # plugin gone, within grace
    ({"r/a": set()}, {"r/a": {"1"}}, [], {}, {}, {"r/a"}),  # grace period over
    ({"r/a": {"1"}, "r/b": {"2"}}, {}, ["r/b"], {"r/b": 1}, {"r/b": 1}, {"r/a"}),
])
def test_capacity(healthy: dict[str, set[str]], unhealthy: dict[str, set[str]], live: list[str],
                  cap: dict[str, int], alloc: dict[str, int], deleted: set[str]) -> None:
    result = devices.capacity({k: frozenset(v) for k, v in healthy.items()},
                              {k: frozenset(v) for k, v in unhealthy.items()}, live)
    assert (dict(result.capacity), dict(result.allocatable), set(result.deleted)) == (cap, alloc, deleted)


@pytest.mark.parametrize(("stopped", "now", "expired"), [(None, 1e9, False), (0.0, 300.0, False),
                                                         (0.0, 300.5, True)])
def test_stop_grace_period(stopped: float | None, now: float, expired: bool) -> None:
    assert devices.stop_grace_expired(stopped, now) is expired


R = "example.com/resource"
HEALTHY = frozenset({"d1", "d2", "d3"})


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({}, Need(needed=2, required=2, taken=frozenset(), available=HEALTHY)),
    ({"in_use": frozenset({"d1"})}, Need(needed=2, required=2, taken=frozenset(), available=frozenset({"d2", "d3"}))),
    ({"reusable": frozenset({"d3", "d1", "d2"})}, frozenset({"d1", "d2"})),
    ({"reusable": frozenset({"d3"}), "in_use": frozenset({"d3"})},
     Need(needed=1, required=2, taken=frozenset({"d3"}), available=frozenset({"d1", "d2"}))),
    ({"existing": frozenset({"d1", "d2"})}, None),
    ({"running_after_restart": True}, None),
])
def test_devices_to_allocate(kwargs: dict[str, object], expected: object) -> None:
    args: dict[str, object] = {"pod_uid": "u", "container": "c", "resource": R, "required": 2, "existing": None,
                               "healthy": HEALTHY, "in_use": frozenset(), "reusable": frozenset(),
                               "running_after_restart": False}
    assert devices.devices_to_allocate(**{**args, **kwargs}) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"existing": frozenset({"d1"})},
     'pod "u" container "c" changed request for resource "example.com/resource" from 1 to 2'),
    ({"healthy": None}, "cannot allocate unregistered device example.com/resource"),
    ({"healthy": frozenset()}, "no healthy devices present; cannot allocate unhealthy devices example.com/resource"),
    ({"existing": frozenset({"d1", "x"})},
     "previously allocated devices are no longer healthy; cannot allocate unhealthy devices example.com/resource"),
    ({"in_use": frozenset({"d1", "d2"})},
     "requested number of devices unavailable for example.com/resource. Requested: 2, Available: 1"),
])
def test_devices_to_allocate_errors(kwargs: dict[str, object], error: str) -> None:
    args: dict[str, object] = {"pod_uid": "u", "container": "c", "resource": R, "required": 2, "existing": None,
                               "healthy": HEALTHY, "in_use": frozenset(), "reusable": frozenset(),
                               "running_after_restart": False}
    with pytest.raises(AllocationError) as caught:
        devices.devices_to_allocate(**{**args, **kwargs})  # type: ignore[arg-type]
    assert str(caught.value) == error


@pytest.mark.parametrize(("preferred", "expected"), [
    (None, {"d1", "d2"}),
    ({"d3"}, {"d3", "d1"}),
    ({"d3", "d2", "x"}, {"d3", "d2"}),  # only available devices count
    ({"d3", "d2", "d1"}, {"d1", "d2"}),  # sorted: the first two
])
def test_finish_allocation_takes_the_preferred_devices_first(preferred: set[str] | None,
                                                             expected: set[str]) -> None:
    need = Need(needed=2, required=2, taken=frozenset(), available=HEALTHY)
    assert devices.finish_allocation(need, preferred) == expected


def test_finish_allocation_keeps_the_reused_devices() -> None:
    need = Need(needed=1, required=2, taken=frozenset({"d9"}), available=frozenset({"d2"}))
    assert devices.finish_allocation(need, None) == {"d9", "d2"}


def test_admission_rejection_is_upstreams() -> None:
    rejection = devices.admission_rejection(AllocationError("cannot allocate unregistered device x/y"))
    assert rejection.reason == "UnexpectedAdmissionError"
    assert rejection.message == ("Pod was rejected: Allocate failed due to cannot allocate unregistered device x/y, "
                                 "which is unexpected")


def test_run_container_options_first_answer_wins() -> None:
    resources = {
        "b.com/y": _alloc({0: ("y1",)}, envs={"A": "other", "B": "2"},
                          mounts=[api_pb2.Mount(container_path="/m", host_path="/other")],
                          annotations={"k": "v2"}, cdi_devices=[api_pb2.CDIDevice(name="vendor.com/x=1")]),
        "a.com/x": _alloc({-1: ("x1",)}, envs={"A": "1"},
                          mounts=[api_pb2.Mount(container_path="/m", host_path="/h", read_only=True)],
                          devices=[api_pb2.DeviceSpec(container_path="/dev/x", host_path="/dev/x1",
                                                      permissions="rw")],
                          annotations={"k": "v"}, cdi_devices=[api_pb2.CDIDevice(name="vendor.com/x=1")]),
    }
    opts = devices.run_container_options(resources)
    assert opts is not None
    assert opts.envs == (("A", "1"), ("B", "2"))
    assert opts.mounts == (Mount("/m", "/h", True),)
    assert opts.devices == (DeviceSpec("/dev/x", "/dev/x1", "rw"),)
    assert opts.annotations == (("k", "v"),)
    assert opts.cdi_devices == ("vendor.com/x=1",)
    assert len(opts.conflicts) == 3
    assert devices.run_container_options(None) is None


def test_an_answer_without_fields_gives_nothing() -> None:
    assert devices.run_container_options({"r/x": ContainerAllocation({}, AllocResponse(), b"")}) == \
        devices.RunContainerOptions()


@pytest.mark.parametrize(("allocatable", "allocated", "expected"), [
    ({"cpu": "2"}, {R: frozenset({"a", "b"})}, {"cpu": "2", R: "2"}),
    ({R: "0"}, {R: frozenset({"a"})}, {R: "1"}),
    ({R: "3"}, {R: frozenset({"a"})}, {R: "3"}),
    ({R: "1"}, {R: frozenset()}, {R: "1"}),
])
def test_sanitize_allocatable(allocatable: dict[str, str], allocated: dict[str, frozenset[str]],
                              expected: dict[str, str]) -> None:
    assert devices.sanitize_allocatable(allocatable, allocated) == expected


def _container(name: str, limits: dict[str, str]) -> spec.ContainerSpec:
    pod = spec.pod_from_body({"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
                              "spec": {"containers": [{"name": name, "image": "i",
                                                       "resources": {"limits": limits}}]}})
    return pod.spec.containers[0]


def test_container_requests_are_the_limits_of_device_resources() -> None:
    container = _container("c", {R: "2", "cpu": "1", "other.com/x": "1"})
    assert devices.container_requests(container, {R}) == {R: 2}


def test_devices_per_numa() -> None:
    known = {"a": devices.Device("a", "Healthy", (0, 1)), "b": devices.Device("b", "Healthy")}
    assert devices.devices_per_numa({"a", "b", "c"}, known) == {0: ("a",), 1: ("a",), -1: ("b", "c")}


def test_allocated_devices_counts_only_answered_entries() -> None:
    pod_devices = {"u": {"c": {R: ContainerAllocation({0: ("a",)}, None, None),
                               "x/y": ContainerAllocation({0: ("b",)}, AllocResponse(), b"")}}}
    assert devices.allocated_devices(pod_devices) == {R: frozenset(), "x/y": frozenset({"b"})}
