"""The CSI client against a fake driver (a real grpc.aio server on a temporary unix socket), and the pure rules it
applies: upstream csi_client.go's access mode mapping, isFinalError, volume stats, the requests it builds."""

from __future__ import annotations

import os
import pickle
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest

from kopflet.volumes.csi import types
from kopflet.volumes.csi.client import CSIClient, grpc_target
from kopflet.volumes.csi.errors import CSIError, is_final_error
from kopflet.volumes.csi.proto import csi_pb2 as pb
from tests.unit.csi_fakes import FakeDriver, short_tmpdir

# ------------------------------------------------------------------------------------------------ pure rules


@pytest.mark.parametrize(("code", "final"), [
    ("CANCELLED", False), ("DEADLINE_EXCEEDED", False), ("UNAVAILABLE", False), ("RESOURCE_EXHAUSTED", False),
    ("ABORTED", False),
    ("OK", True), ("UNKNOWN", True), ("INVALID_ARGUMENT", True), ("NOT_FOUND", True), ("ALREADY_EXISTS", True),
    ("PERMISSION_DENIED", True), ("FAILED_PRECONDITION", True), ("OUT_OF_RANGE", True), ("UNIMPLEMENTED", True),
    ("INTERNAL", True), ("DATA_LOSS", True), ("UNAUTHENTICATED", True),
    (None, False), ("", False),  # not a gRPC status: the operation may be in progress ("be on the safe side")
    (grpc.StatusCode.ABORTED, False), (grpc.StatusCode.INTERNAL, True),
])
def test_is_final_error(code: str | grpc.StatusCode | None, final: bool) -> None:
    assert is_final_error(code) is final


@pytest.mark.parametrize(("mode", "plain", "multi_writer"), [
    ("ReadWriteOnce", "SINGLE_NODE_WRITER", "SINGLE_NODE_MULTI_WRITER"),
    ("ReadOnlyMany", "MULTI_NODE_READER_ONLY", "MULTI_NODE_READER_ONLY"),
    ("ReadWriteMany", "MULTI_NODE_MULTI_WRITER", "MULTI_NODE_MULTI_WRITER"),
    ("ReadWriteOncePod", "SINGLE_NODE_WRITER", "SINGLE_NODE_SINGLE_WRITER"),
    ("", "UNKNOWN", "UNKNOWN"),
    ("Bogus", "UNKNOWN", "UNKNOWN"),
])
def test_access_modes(mode: str, plain: str, multi_writer: str) -> None:
    assert types.csi_access_mode(mode, single_node_multi_writer=False) == plain
    assert types.csi_access_mode(mode, single_node_multi_writer=True) == multi_writer


@pytest.mark.parametrize(("usages", "stats", "unknown"), [
    ([types.VolumeUsage("BYTES", 1, 10, 9)], types.VolumeStats(available=1, capacity=10, used=9), ()),
    ([types.VolumeUsage("INODES", 2, 20, 18)], types.VolumeStats(inodes_free=2, inodes=20, inodes_used=18), ()),
    ([types.VolumeUsage("BYTES", 1, 10, 9), types.VolumeUsage("INODES", 2, 20, 18)],
     types.VolumeStats(1, 10, 9, 2, 20, 18), ()),
    ([types.VolumeUsage("BYTES", 1, 10, 9), types.VolumeUsage("BYTES", 5, 50, 45)],
     types.VolumeStats(available=5, capacity=50, used=45), ()),  # the last one wins, as upstream's loop
    ([types.VolumeUsage("UNKNOWN", 1, 1, 1), types.VolumeUsage("BYTES", 1, 10, 9)],
     types.VolumeStats(available=1, capacity=10, used=9), ("UNKNOWN",)),
])
def test_volume_stats(usages: list[types.VolumeUsage], stats: types.VolumeStats, unknown: tuple[str, ...]) -> None:
    assert types.volume_stats(usages) == (stats, unknown)


def test_volume_stats_without_usage_is_upstreams_error() -> None:
    with pytest.raises(types.VolumeStatsError, match=r"^failed to get usage from response\. usage is nil$"):
        types.volume_stats([])


@pytest.mark.parametrize(("error", "text", "go_text"), [
    (CSIError("NOT_FOUND", "no such volume", "csi.v1.Node/NodeUnpublishVolume", "unix:///p/csi.sock"),
     "csi.v1.Node/NodeUnpublishVolume at unix:///p/csi.sock: NOT_FOUND: no such volume",
     "rpc error: code = NotFound desc = no such volume"),
    (CSIError("CANCELLED", "gone"), "CANCELLED: gone", "rpc error: code = Canceled desc = gone"),
    (CSIError("DEADLINE_EXCEEDED", ""), "DEADLINE_EXCEEDED: (no details)",
     "rpc error: code = DeadlineExceeded desc = "),
    (CSIError("", "missing volume id"), "missing volume id", "missing volume id"),
])
def test_error_texts(error: CSIError, text: str, go_text: str) -> None:
    assert str(error) == text
    assert error.go_text == go_text


def test_the_error_keeps_its_fields_through_pickling() -> None:
    error = pickle.loads(pickle.dumps(CSIError(grpc.StatusCode.ABORTED, "busy", "m", "e", uncertain=True)))
    assert (error.code, error.details, error.method, error.endpoint, error.uncertain) == ("ABORTED", "busy", "m", "e",
                                                                                          True)
    assert not error.final


@pytest.mark.parametrize(("endpoint", "target"), [
    ("/var/lib/kopflet/plugins/x/csi.sock", "unix:///var/lib/kopflet/plugins/x/csi.sock"),
    ("unix:///run/csi.sock", "unix:///run/csi.sock"),
])
def test_grpc_target(endpoint: str, target: str) -> None:
    assert grpc_target(endpoint) == target


# ------------------------------------------------------------------------------------------- against a driver


@pytest.fixture
def tmpdir_short() -> Iterator[str]:
    yield from short_tmpdir("csi")


@pytest.fixture
async def driver(tmpdir_short: str) -> AsyncIterator[FakeDriver]:
    fake = FakeDriver(os.path.join(tmpdir_short, "csi.sock"), topology={"topology.example.com/zone": "z1"},
                      max_volumes=7)
    await fake.start()
    yield fake
    await fake.stop()


@pytest.fixture
async def client(driver: FakeDriver) -> AsyncIterator[CSIClient]:
    async with CSIClient(driver.socket, driver="fake.csi.k8s.io", timeout=5.0) as csi:
        yield csi


async def test_identity(driver: FakeDriver, client: CSIClient) -> None:
    assert await client.get_plugin_info() == types.PluginInfo("fake.csi.k8s.io", "1.2.3", {"url": "x"})
    assert await client.probe() is True
    driver.ready = False
    assert await client.probe() is False
    driver.ready = None
    assert await client.probe() is None


async def test_node_get_info(driver: FakeDriver, client: CSIClient) -> None:
    assert await client.node_get_info() == types.NodeInfo("node-1", 7, {"topology.example.com/zone": "z1"})
    driver.topology, driver.max_volumes = None, 0
    assert await client.node_get_info() == types.NodeInfo("node-1", 0, None)


async def test_capabilities(driver: FakeDriver, client: CSIClient) -> None:
    driver.capabilities = ("STAGE_UNSTAGE_VOLUME", "GET_VOLUME_STATS", "EXPAND_VOLUME", "VOLUME_MOUNT_GROUP")
    assert await client.node_get_capabilities() == {"STAGE_UNSTAGE_VOLUME", "GET_VOLUME_STATS", "EXPAND_VOLUME",
                                                    "VOLUME_MOUNT_GROUP"}
    assert await client.node_supports_stage_unstage()
    assert await client.node_supports_volume_stats()
    assert await client.node_supports_node_expand()
    assert await client.node_supports_volume_mount_group()
    assert not await client.node_supports_single_node_multi_writer_access_mode()
    assert not await client.node_supports(types.GET_VOLUME_HEALTH)


@pytest.mark.parametrize(("capabilities", "mode"), [
    ((), "SINGLE_NODE_WRITER"), (("SINGLE_NODE_MULTI_WRITER",), "SINGLE_NODE_MULTI_WRITER")])
async def test_publish_a_mount(driver: FakeDriver, client: CSIClient, capabilities: tuple[str, ...],
                               mode: str) -> None:
    driver.capabilities = capabilities
    await client.node_publish_volume(
        "vol-1", "/pods/u/volumes/kubernetes.io~csi/pv/mount", access_mode="ReadWriteOnce",
        staging_target_path="/plugins/kubernetes.io/csi/d/h/globalmount", read_only=True, fs_type="ext4",
        publish_context={"p": "1"}, volume_context={"v": "2"}, secrets={"s": "3"}, mount_options=("noatime", "ro"),
        fs_group=2000)
    [request] = driver.calls("NodePublishVolume")
    assert len(driver.calls("NodeGetCapabilities")) == 1  # the access mode mapper's
    expected = pb.NodePublishVolumeRequest(
        volume_id="vol-1", target_path="/pods/u/volumes/kubernetes.io~csi/pv/mount",
        staging_target_path="/plugins/kubernetes.io/csi/d/h/globalmount", readonly=True,
        publish_context={"p": "1"}, volume_context={"v": "2"}, secrets={"s": "3"},
        volume_capability=pb.VolumeCapability(
            access_mode=pb.VolumeCapability.AccessMode(mode=pb.VolumeCapability.AccessMode.Mode.Value(mode)),
            mount=pb.VolumeCapability.MountVolume(fs_type="ext4", mount_flags=["noatime", "ro"],
                                                  volume_mount_group="2000")))
    assert request == expected


async def test_publish_a_block_volume_without_staging(driver: FakeDriver, client: CSIClient) -> None:
    await client.node_publish_volume("vol-1", "/t", access_mode="ReadWriteOncePod", fs_type="block",
                                     mount_options=("ignored",), fs_group=5)
    [request] = driver.calls("NodePublishVolume")
    assert request.staging_target_path == ""
    assert request.volume_capability.WhichOneof("access_type") == "block"
    assert request.volume_capability.access_mode.mode == pb.VolumeCapability.AccessMode.SINGLE_NODE_WRITER


async def test_stage_unstage_unpublish(driver: FakeDriver, client: CSIClient) -> None:
    await client.node_stage_volume("vol-1", "/stage", access_mode="ReadOnlyMany", fs_type="xfs",
                                   publish_context={"a": "b"}, volume_context={"c": "d"}, secrets={"e": "f"},
                                   mount_options=("nodev",))
    [stage] = driver.calls("NodeStageVolume")
    assert stage == pb.NodeStageVolumeRequest(
        volume_id="vol-1", staging_target_path="/stage", publish_context={"a": "b"}, volume_context={"c": "d"},
        secrets={"e": "f"}, volume_capability=pb.VolumeCapability(
            access_mode=pb.VolumeCapability.AccessMode(mode=pb.VolumeCapability.AccessMode.MULTI_NODE_READER_ONLY),
            mount=pb.VolumeCapability.MountVolume(fs_type="xfs", mount_flags=["nodev"])))
    await client.node_unpublish_volume("vol-1", "/t")
    await client.node_unstage_volume("vol-1", "/stage")
    assert driver.calls("NodeUnpublishVolume") == [pb.NodeUnpublishVolumeRequest(volume_id="vol-1", target_path="/t")]
    assert driver.calls("NodeUnstageVolume") == [pb.NodeUnstageVolumeRequest(volume_id="vol-1",
                                                                             staging_target_path="/stage")]


async def test_volume_stats_and_expand(driver: FakeDriver, client: CSIClient) -> None:
    driver.usage = [pb.VolumeUsage(unit=pb.VolumeUsage.BYTES, available=1, total=10, used=9),
                    pb.VolumeUsage(unit=pb.VolumeUsage.INODES, available=2, total=20, used=18)]
    assert await client.node_get_volume_stats("vol-1", "/t") == types.VolumeStats(1, 10, 9, 2, 20, 18)
    assert driver.calls("NodeGetVolumeStats") == [pb.NodeGetVolumeStatsRequest(volume_id="vol-1", volume_path="/t")]
    driver.usage = []
    with pytest.raises(CSIError, match=r"failed to get usage from response\. usage is nil") as caught:
        await client.node_get_volume_stats("vol-1", "/t")
    assert caught.value.code == "" and not caught.value.uncertain
    driver.capacity_bytes = 1 << 30
    assert await client.node_expand_volume("vol-1", "/t", 1 << 30, access_mode="ReadWriteMany",
                                           staging_target_path="/stage", fs_type="ext4") == 1 << 30
    [expand] = driver.calls("NodeExpandVolume")
    assert expand.capacity_range.required_bytes == 1 << 30
    assert expand.staging_target_path == "/stage"
    assert expand.volume_capability.mount.fs_type == "ext4"


@pytest.mark.parametrize(("call", "message"), [
    (lambda c: c.node_publish_volume("", "/t", access_mode="ReadWriteOnce"), "missing volume id"),
    (lambda c: c.node_publish_volume("v", "", access_mode="ReadWriteOnce"), "missing target path"),
    (lambda c: c.node_unpublish_volume("", "/t"), "missing volume id"),
    (lambda c: c.node_unpublish_volume("v", ""), "missing target path"),
    (lambda c: c.node_stage_volume("", "/s", access_mode="ReadWriteOnce"), "missing volume id"),
    (lambda c: c.node_stage_volume("v", "", access_mode="ReadWriteOnce"), "missing staging target path"),
    (lambda c: c.node_unstage_volume("", "/s"), "missing volume id"),
    (lambda c: c.node_unstage_volume("v", ""), "missing staging target path"),
    (lambda c: c.node_get_volume_stats("", "/t"), "missing volume id"),
    (lambda c: c.node_get_volume_stats("v", ""), "missing target path"),
    (lambda c: c.node_expand_volume("", "/t", 1, access_mode="ReadWriteOnce"), "missing volume id"),
    (lambda c: c.node_expand_volume("v", "", 1, access_mode="ReadWriteOnce"), "missing volume path"),
    (lambda c: c.node_expand_volume("v", "/t", -1, access_mode="ReadWriteOnce"), "size can not be less than 0"),
])
async def test_requests_refused_before_any_call(driver: FakeDriver, client: CSIClient, call: object,
                                                message: str) -> None:
    with pytest.raises(CSIError) as caught:
        await call(client)  # type: ignore[operator]
    assert str(caught.value) == message and caught.value.code == "" and not caught.value.uncertain
    assert driver.requests == []


# Which methods' transient errors upstream makes uncertain: Stage, Publish, Expand and GetCapabilities.
CALLS = {
    "NodeStageVolume": lambda c: c.node_stage_volume("v", "/s", access_mode="ReadWriteOnce"),
    "NodePublishVolume": lambda c: c.node_publish_volume("v", "/t", access_mode="ReadWriteOnce"),
    "NodeExpandVolume": lambda c: c.node_expand_volume("v", "/t", 1, access_mode="ReadWriteOnce"),
    "NodeGetCapabilities": lambda c: c.node_get_capabilities(),
    "NodeUnstageVolume": lambda c: c.node_unstage_volume("v", "/s"),
    "NodeUnpublishVolume": lambda c: c.node_unpublish_volume("v", "/t"),
    "NodeGetVolumeStats": lambda c: c.node_get_volume_stats("v", "/t"),
    "NodeGetInfo": lambda c: c.node_get_info(),
}
UNCERTAIN_ON_TRANSIENT = {"NodeStageVolume", "NodePublishVolume", "NodeExpandVolume", "NodeGetCapabilities"}


@pytest.mark.parametrize("method", sorted(CALLS))
@pytest.mark.parametrize("code", [grpc.StatusCode.ABORTED, grpc.StatusCode.RESOURCE_EXHAUSTED,
                                  grpc.StatusCode.INTERNAL, grpc.StatusCode.NOT_FOUND])
async def test_driver_errors_are_mapped(driver: FakeDriver, client: CSIClient, method: str,
                                        code: grpc.StatusCode) -> None:
    driver.fail[method] = (code, f"{method} failed")
    with pytest.raises(CSIError) as caught:
        await CALLS[method](client)
    error = caught.value
    assert (error.code, error.details) == (code.name, f"{method} failed")
    assert error.method == f"csi.v1.Node/{method}" and error.endpoint == driver.socket
    assert error.final is is_final_error(code.name)
    assert error.uncertain is (method in UNCERTAIN_ON_TRANSIENT and not error.final)


async def test_a_capabilities_failure_ends_a_publish_before_it_is_sent(driver: FakeDriver, client: CSIClient) -> None:
    driver.fail["NodeGetCapabilities"] = (grpc.StatusCode.UNAVAILABLE, "restarting")
    with pytest.raises(CSIError) as caught:
        await client.node_publish_volume("v", "/t", access_mode="ReadWriteOnce")
    assert caught.value.method == "csi.v1.Node/NodeGetCapabilities" and caught.value.uncertain
    assert driver.calls("NodePublishVolume") == []


async def test_every_call_has_a_deadline(driver: FakeDriver, client: CSIClient) -> None:
    driver.delay["NodePublishVolume"] = 5.0
    with pytest.raises(CSIError) as caught:
        await client.node_publish_volume("v", "/t", access_mode="ReadWriteOnce", deadline=0.3)
    assert caught.value.code == "DEADLINE_EXCEEDED" and caught.value.uncertain
    driver.delay["NodeGetInfo"] = 5.0
    async with CSIClient(driver.socket, timeout=0.3) as short:
        with pytest.raises(CSIError) as caught:
            await short.node_get_info()
    assert caught.value.code == "DEADLINE_EXCEEDED"


async def test_a_driver_that_is_not_there_is_unavailable_at_once(tmpdir_short: str) -> None:
    async with CSIClient(os.path.join(tmpdir_short, "gone.sock"), timeout=30.0) as csi:
        with pytest.raises(CSIError) as caught:
            await csi.node_publish_volume("v", "/t", access_mode="ReadWriteOnce")
    assert caught.value.code == "UNAVAILABLE" and caught.value.uncertain and not caught.value.final
