"""The device manager against real device plugins: Python gRPC servers on temporary unix sockets that register with
the manager's real Registration server (kubelet.sock in a temporary directory), as upstream's stub plugin does."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest

from kopflet.api import spec
from kopflet.cm.devicemanager import checkpoint, devices
from kopflet.cm.devicemanager.manager import DeviceManager
from kopflet.cm.devicemanager.proto import api_pb2, api_pb2_grpc

R = "example.com/resource"


class Plugin(api_pb2_grpc.DevicePluginServicer):
    """A device plugin: its devices, an Allocate answer per device (a mount and an env), and the calls it got."""

    def __init__(self, socket: str, ids: tuple[str, ...] = ("Dev-1", "Dev-2"), *, pre_start: bool = False,
                 preferred: tuple[str, ...] | None = None, fail_allocate: str = "") -> None:
        self.socket, self.pre_start, self.preferred, self.fail_allocate = socket, pre_start, preferred, fail_allocate
        self.devices = [api_pb2.Device(ID=i, health=devices.HEALTHY) for i in ids]
        self.updates: asyncio.Queue[list[api_pb2.Device] | None] = asyncio.Queue()
        self.calls: list[tuple[str, Any]] = []
        self.server: grpc.aio.Server | None = None

    async def start(self) -> None:
        self.server = grpc.aio.server()
        api_pb2_grpc.add_DevicePluginServicer_to_server(self, self.server)
        self.server.add_insecure_port(f"unix://{self.socket}")
        await self.server.start()

    async def stop(self) -> None:
        if self.server is not None:
            await self.updates.put(None)
            await self.server.stop(grace=None)
            self.server = None

    async def register(self, kubelet_socket: str, *, resource: str = R, version: str = "v1beta1") -> None:
        async with grpc.aio.insecure_channel(f"unix://{kubelet_socket}") as channel:
            await api_pb2_grpc.RegistrationStub(channel).Register(api_pb2.RegisterRequest(
                version=version, endpoint=os.path.basename(self.socket), resource_name=resource,
                options=api_pb2.DevicePluginOptions(pre_start_required=self.pre_start)), timeout=10)

    async def GetDevicePluginOptions(self, request: Any, context: Any) -> api_pb2.DevicePluginOptions:
        return api_pb2.DevicePluginOptions(pre_start_required=self.pre_start,
                                           get_preferred_allocation_available=self.preferred is not None)

    async def ListAndWatch(self, request: Any, context: Any) -> AsyncIterator[api_pb2.ListAndWatchResponse]:
        yield api_pb2.ListAndWatchResponse(devices=self.devices)
        while (update := await self.updates.get()) is not None:
            yield api_pb2.ListAndWatchResponse(devices=update)

    async def GetPreferredAllocation(self, request: Any, context: Any) -> api_pb2.PreferredAllocationResponse:
        self.calls.append(("GetPreferredAllocation", request))
        return api_pb2.PreferredAllocationResponse(container_responses=[
            api_pb2.ContainerPreferredAllocationResponse(deviceIDs=list(self.preferred or ()))])

    async def Allocate(self, request: Any, context: Any) -> api_pb2.AllocateResponse:
        self.calls.append(("Allocate", request))
        if self.fail_allocate:
            await context.abort(grpc.StatusCode.UNKNOWN, self.fail_allocate)
        responses = []
        for req in request.container_requests:
            ids = list(req.devices_ids)
            responses.append(api_pb2.ContainerAllocateResponse(
                envs={"DEVICES": ",".join(ids)},
                mounts=[api_pb2.Mount(container_path=f"/tmp/{i}", host_path=f"/tmp/{i}") for i in ids],
                devices=[api_pb2.DeviceSpec(container_path="/dev/fake", host_path="/dev/null", permissions="rw")],
                annotations={"example.com/devices": ",".join(ids)},
                cdi_devices=[api_pb2.CDIDevice(name=f"{R}=CDI-{i}") for i in ids]))
        return api_pb2.AllocateResponse(container_responses=responses)

    async def PreStartContainer(self, request: Any, context: Any) -> api_pb2.PreStartContainerResponse:
        self.calls.append(("PreStartContainer", request))
        return api_pb2.PreStartContainerResponse()


@pytest.fixture
def socket_dir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="dp", dir="/tmp")  # unix socket paths are short
    yield os.path.join(path, "device-plugins")
    shutil.rmtree(path, ignore_errors=True)


def _pod(uid: str, containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None) -> spec.Pod:
    return spec.pod_from_body({"metadata": {"name": f"pod-{uid}", "namespace": "ns", "uid": uid},
                               "spec": {"containers": containers, "initContainers": init or []}})


def _c(name: str, count: int, **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": "i", "resources": {"limits": {R: str(count)}, "requests": {R: str(count)}},
            **extra}


async def _eventually(check: Any) -> None:
    """Poll (every 20 ms, 5 s at most): the plugin's stream is read by the manager's own task."""
    async with asyncio.timeout(5.0):
        for _ in iter(check, True):
            await asyncio.sleep(0.02)


def _exists(path: str) -> bool:
    return os.path.exists(path)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


@contextlib.asynccontextmanager
async def _running(manager: DeviceManager, *plugins: Plugin) -> AsyncIterator[None]:
    await manager.start()
    try:
        for plugin in plugins:
            await plugin.start()
        yield
    finally:
        for plugin in plugins:
            await plugin.stop()
        await manager.stop()


async def test_a_plugin_registers_and_its_devices_show_in_capacity(socket_dir: str) -> None:
    manager = DeviceManager(socket_dir)
    plugin = Plugin(os.path.join(socket_dir, "dp.1"), ("Dev-1", "Dev-2", "Dev-3"))
    async with _running(manager, plugin):
        assert _exists(os.path.join(socket_dir, "kubelet.sock"))
        await plugin.register(manager.socket_path)
        await _eventually(lambda: manager.capacity() == ({R: "3"}, {R: "3"}))
        # ListAndWatch updates: one device turns unhealthy, one goes.
        await plugin.updates.put([api_pb2.Device(ID="Dev-1", health="Healthy"),
                                  api_pb2.Device(ID="Dev-2", health="Unhealthy")])
        await _eventually(lambda: manager.capacity() == ({R: "2"}, {R: "1"}))
        cp = checkpoint.decode(_read(manager.checkpoint_path))
        assert cp.registered == {R: ("Dev-1",)}
        assert manager.healthy() == ""


@pytest.mark.parametrize(("version", "resource", "error"), [
    ("v1alpha1", R, 'requested API version "v1alpha1" is not supported by kubelet. Supported version is '
                    '["v1beta1"]'),
    ("v1beta1", "gpu", 'the ResourceName "gpu" is invalid'),
])
async def test_a_bad_registration_is_refused_with_upstreams_error(socket_dir: str, version: str, resource: str,
                                                                  error: str) -> None:
    manager = DeviceManager(socket_dir)
    plugin = Plugin(os.path.join(socket_dir, "dp.1"))
    async with _running(manager, plugin):
        with pytest.raises(grpc.RpcError) as caught:
            await plugin.register(manager.socket_path, version=version, resource=resource)
        assert caught.value.code() == grpc.StatusCode.UNKNOWN
        assert caught.value.details() == error
        assert manager.capacity() == ({}, {})


async def test_registering_an_endpoint_that_does_not_answer_fails(socket_dir: str) -> None:
    manager = DeviceManager(socket_dir, dial_timeout=0.5)
    async with _running(manager):
        plugin = Plugin(os.path.join(socket_dir, "missing.sock"))
        with pytest.raises(grpc.RpcError) as caught:
            await plugin.register(manager.socket_path)
        assert caught.value.details().startswith("failed to dial device plugin:")


async def test_admission_allocates_and_the_container_gets_the_answer(socket_dir: str) -> None:
    active = {"p1"}
    manager = DeviceManager(socket_dir, active_pods=lambda: active)
    plugin = Plugin(os.path.join(socket_dir, "dp.1"), ("Dev-1", "Dev-2", "Dev-3"), pre_start=True, preferred=("Dev-3",))
    async with _running(manager, plugin):
        await plugin.register(manager.socket_path)
        await _eventually(lambda: manager.capacity()[1] == {R: "3"})
        pod = _pod("p1", [_c("app", 2)])
        assert await manager.admit(pod) is None
        assert manager.container_devices("p1", "app") == {R: frozenset({"Dev-3", "Dev-1"})}
        preferred = plugin.calls[0][1].container_requests[0]
        assert (list(preferred.available_deviceIDs), preferred.allocation_size) == (["Dev-1", "Dev-2", "Dev-3"], 2)
        assert list(plugin.calls[1][1].container_requests[0].devices_ids) == ["Dev-1", "Dev-3"]
        options = await manager.run_container_options(pod, pod.spec.containers[0])
        assert options is not None
        assert options.envs == (("DEVICES", "Dev-1,Dev-3"),)
        assert [m.container_path for m in options.mounts] == ["/tmp/Dev-1", "/tmp/Dev-3"]
        assert options.devices == (devices.DeviceSpec("/dev/fake", "/dev/null", "rw"),)
        assert options.annotations == (("example.com/devices", "Dev-1,Dev-3"),)
        assert options.cdi_devices == (f"{R}=CDI-Dev-1", f"{R}=CDI-Dev-3")
        assert plugin.calls[-1][0] == "PreStartContainer"
        assert sorted(plugin.calls[-1][1].devices_ids) == ["Dev-1", "Dev-3"]
        # Only one device is left: a pod asking for two is rejected as upstream rejects it.
        active.add("p2")
        rejection = await manager.admit(_pod("p2", [_c("app", 2)]))
        assert rejection is not None and rejection.reason == "UnexpectedAdmissionError"
        assert rejection.message == ("Pod was rejected: Allocate failed due to requested number of devices "
                                     f"unavailable for {R}. Requested: 2, Available: 1, which is unexpected")
        # The first pod terminates: its devices are freed at the next allocation.
        active.discard("p1")
        assert await manager.admit(_pod("p2", [_c("app", 2)])) is None
        assert manager.container_devices("p2", "app") == {R: frozenset({"Dev-3", "Dev-1"})}
        assert not manager.pod_has_devices("p1")


async def test_init_container_devices_are_reused_by_the_app_containers(socket_dir: str) -> None:
    manager = DeviceManager(socket_dir, active_pods=lambda: {"p"})
    plugin = Plugin(os.path.join(socket_dir, "dp.1"), ("Dev-1", "Dev-2"))
    async with _running(manager, plugin):
        await plugin.register(manager.socket_path)
        await _eventually(lambda: manager.capacity()[1] == {R: "2"})
        pod = _pod("p", [_c("app", 2)], init=[_c("init", 2)])
        assert await manager.admit(pod) is None
        assert manager.container_devices("p", "init") == manager.container_devices("p", "app") == \
            {R: frozenset({"Dev-1", "Dev-2"})}
        sidecar = _pod("q", [_c("app", 1)], init=[_c("side", 1, restartPolicy="Always")])
        rejection = await manager.admit(sidecar)  # every device is held by pod p
        assert rejection is not None


async def test_an_allocate_error_rejects_with_the_rpc_error(socket_dir: str) -> None:
    manager = DeviceManager(socket_dir, active_pods=lambda: {"p"})
    plugin = Plugin(os.path.join(socket_dir, "dp.1"), fail_allocate="device on fire")
    async with _running(manager, plugin):
        await plugin.register(manager.socket_path)
        await _eventually(lambda: manager.capacity()[1] == {R: "2"})
        rejection = await manager.admit(_pod("p", [_c("app", 1)]))
        assert rejection is not None
        assert rejection.message == ("Pod was rejected: Allocate failed due to rpc error: code = Unknown desc = "
                                     "device on fire, which is unexpected")
        assert manager.allocated() == {}  # restored from the pod devices


async def test_an_unregistered_resource_is_not_the_device_managers(socket_dir: str) -> None:
    manager = DeviceManager(socket_dir, active_pods=lambda: {"p"})
    async with _running(manager):
        assert await manager.admit(_pod("p", [_c("app", 1)])) is None  # the predicate's to judge
        assert manager.container_devices("p", "app") == {}


async def test_a_plugin_that_goes_away_leaves_unhealthy_devices_then_none(socket_dir: str) -> None:
    now = [1000.0]
    manager = DeviceManager(socket_dir, clock=lambda: now[0])
    plugin = Plugin(os.path.join(socket_dir, "dp.1"))
    async with _running(manager, plugin):
        await plugin.register(manager.socket_path)
        await _eventually(lambda: manager.capacity() == ({R: "2"}, {R: "2"}))
        await plugin.stop()
        await _eventually(lambda: manager.capacity() == ({R: "2"}, {R: "0"}))
        now[0] += devices.ENDPOINT_STOP_GRACE_PERIOD + 1
        assert manager.capacity() == ({R: "0"}, {R: "0"})
        assert manager.capacity() == ({R: "0"}, {R: "0"})  # stays 0, as upstream's Node keeps it
        # It comes back and registers again.
        plugin2 = Plugin(os.path.join(socket_dir, "dp.2"), ("Dev-9",))
        await plugin2.start()
        try:
            await plugin2.register(manager.socket_path)
            await _eventually(lambda: manager.capacity() == ({R: "1"}, {R: "1"}))
        finally:
            await plugin2.stop()


async def test_the_checkpoint_is_restored_at_start(socket_dir: str) -> None:
    manager = DeviceManager(socket_dir, active_pods=lambda: {"p"})
    plugin = Plugin(os.path.join(socket_dir, "dp.1"))
    async with _running(manager, plugin):
        await plugin.register(manager.socket_path)
        await _eventually(lambda: manager.capacity()[1] == {R: "2"})
        pod = _pod("p", [_c("app", 1)])
        assert await manager.admit(pod) is None
        held = manager.container_devices("p", "app")
    # Restarted: the allocation is back, the resource shows no devices until its plugin registers again, and the
    # container is created with the recorded answer (no Allocate: the plugin is away).
    restarted = DeviceManager(socket_dir, active_pods=lambda: {"p"})
    await restarted.start()
    try:
        assert restarted.container_devices("p", "app") == held
        assert restarted.capacity() == ({R: "0"}, {R: "0"})
        assert restarted.sanitize_allocatable("p", {R: "0"}) == {R: "1"}
        assert not _exists(os.path.join(socket_dir, "dp.1"))  # the stale socket is cleared
        options = await restarted.run_container_options(pod, pod.spec.containers[0])
        assert options is not None and options.envs == (("DEVICES", next(iter(held[R]))),)
    finally:
        await restarted.stop()


async def test_a_corrupt_checkpoint_is_ignored(socket_dir: str) -> None:
    _write(os.path.join(socket_dir, checkpoint.CHECKPOINT_NAME),
           '{"Data":{"PodDeviceEntries":[],"RegisteredDevices":{"x/y":[]}},"Checksum":1}')
    manager = DeviceManager(socket_dir)
    async with _running(manager):
        assert manager.capacity() == ({}, {})


async def test_a_deleted_kubelet_socket_is_reported_unhealthy(socket_dir: str) -> None:
    manager = DeviceManager(socket_dir)
    async with _running(manager):
        os.unlink(manager.socket_path)
        assert "device plugin registration gRPC server failed" in manager.healthy()
