"""Fake CSI drivers and plugin registrars for unit tests: real grpc.aio servers on temporary unix sockets.

- `FakeDriver` serves the CSI Identity and Node services (what a driver's node plugin serves on csi.sock): it
  records every request and answers from its fields, or aborts with `fail[method]` = (grpc.StatusCode, details).
- `FakeRegistrar` serves the kubelet plugin registration service (what node-driver-registrar serves in
  ``plugins_registry``): GetInfo answers its `info`, NotifyRegistrationStatus statuses are recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any

import grpc

from kopflet.pluginmanager.proto import api_pb2 as reg_pb2
from kopflet.pluginmanager.proto import api_pb2_grpc as reg_grpc
from kopflet.volumes.csi.proto import csi_pb2 as pb
from kopflet.volumes.csi.proto import csi_pb2_grpc as pb_grpc


def short_tmpdir(prefix: str) -> Iterator[str]:
    """A directory under /tmp (unix socket paths are limited to 107 bytes), removed afterwards."""
    path = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class _Server:
    def __init__(self, socket: str) -> None:
        self.socket = socket
        self.server: grpc.aio.Server | None = None

    def _add(self, server: grpc.aio.Server) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        os.makedirs(os.path.dirname(self.socket), exist_ok=True)
        self.server = grpc.aio.server()
        self._add(self.server)
        assert self.server.add_insecure_port(f"unix://{self.socket}")
        await self.server.start()

    async def stop(self, *, remove: bool = True) -> None:
        if self.server is not None:
            await self.server.stop(grace=None)
            self.server = None
        if remove:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.socket)


class FakeDriver(_Server, pb_grpc.IdentityServicer, pb_grpc.NodeServicer):
    """A CSI node plugin."""

    def __init__(self, socket: str, *, name: str = "fake.csi.k8s.io", node_id: str = "node-1",
                 max_volumes: int = 0, topology: Mapping[str, str] | None = None,
                 capabilities: tuple[str, ...] = ("STAGE_UNSTAGE_VOLUME",)) -> None:
        super().__init__(socket)
        self.name, self.node_id, self.max_volumes, self.topology = name, node_id, max_volumes, topology
        self.capabilities = capabilities
        self.ready: bool | None = True
        self.usage: list[pb.VolumeUsage] = []
        self.capacity_bytes = 0
        self.fail: dict[str, tuple[grpc.StatusCode, str]] = {}
        self.delay: dict[str, float] = {}
        self.requests: list[tuple[str, Any]] = []

    def _add(self, server: grpc.aio.Server) -> None:
        pb_grpc.add_IdentityServicer_to_server(self, server)
        pb_grpc.add_NodeServicer_to_server(self, server)

    def calls(self, method: str) -> list[Any]:
        return [request for name, request in self.requests if name == method]

    async def _answer(self, method: str, request: Any, context: grpc.aio.ServicerContext) -> None:
        self.requests.append((method, request))
        if method in self.delay:
            await asyncio.sleep(self.delay[method])
        if method in self.fail:
            code, details = self.fail[method]
            await context.abort(code, details)

    async def GetPluginInfo(self, request: Any, context: Any) -> pb.GetPluginInfoResponse:
        await self._answer("GetPluginInfo", request, context)
        return pb.GetPluginInfoResponse(name=self.name, vendor_version="1.2.3", manifest={"url": "x"})

    async def Probe(self, request: Any, context: Any) -> pb.ProbeResponse:
        await self._answer("Probe", request, context)
        response = pb.ProbeResponse()
        if self.ready is not None:
            response.ready.value = self.ready
        return response

    async def NodeGetInfo(self, request: Any, context: Any) -> pb.NodeGetInfoResponse:
        await self._answer("NodeGetInfo", request, context)
        response = pb.NodeGetInfoResponse(node_id=self.node_id, max_volumes_per_node=self.max_volumes)
        if self.topology is not None:
            response.accessible_topology.segments.update(self.topology)
        return response

    async def NodeGetCapabilities(self, request: Any, context: Any) -> pb.NodeGetCapabilitiesResponse:
        await self._answer("NodeGetCapabilities", request, context)
        rpc = pb.NodeServiceCapability.RPC
        return pb.NodeGetCapabilitiesResponse(capabilities=[
            pb.NodeServiceCapability(rpc=rpc(type=rpc.Type.Value(name))) for name in self.capabilities])

    async def NodeStageVolume(self, request: Any, context: Any) -> pb.NodeStageVolumeResponse:
        await self._answer("NodeStageVolume", request, context)
        return pb.NodeStageVolumeResponse()

    async def NodeUnstageVolume(self, request: Any, context: Any) -> pb.NodeUnstageVolumeResponse:
        await self._answer("NodeUnstageVolume", request, context)
        return pb.NodeUnstageVolumeResponse()

    async def NodePublishVolume(self, request: Any, context: Any) -> pb.NodePublishVolumeResponse:
        await self._answer("NodePublishVolume", request, context)
        return pb.NodePublishVolumeResponse()

    async def NodeUnpublishVolume(self, request: Any, context: Any) -> pb.NodeUnpublishVolumeResponse:
        await self._answer("NodeUnpublishVolume", request, context)
        return pb.NodeUnpublishVolumeResponse()

    async def NodeGetVolumeStats(self, request: Any, context: Any) -> pb.NodeGetVolumeStatsResponse:
        await self._answer("NodeGetVolumeStats", request, context)
        return pb.NodeGetVolumeStatsResponse(usage=self.usage)

    async def NodeExpandVolume(self, request: Any, context: Any) -> pb.NodeExpandVolumeResponse:
        await self._answer("NodeExpandVolume", request, context)
        return pb.NodeExpandVolumeResponse(capacity_bytes=self.capacity_bytes)


class FakeRegistrar(_Server, reg_grpc.RegistrationServicer):
    """A plugin's registration socket, as node-driver-registrar (CSI) serves it."""

    def __init__(self, socket: str, *, type: str = "CSIPlugin", name: str = "fake.csi.k8s.io",
                 endpoint: str = "", versions: tuple[str, ...] = ("1.0.0",)) -> None:
        super().__init__(socket)
        self.info = reg_pb2.PluginInfo(type=type, name=name, endpoint=endpoint, supported_versions=list(versions))
        self.statuses: list[tuple[bool, str]] = []
        self.get_info_calls = 0
        self.fail_notify: tuple[grpc.StatusCode, str] | None = None
        self.notified = asyncio.Event()

    def _add(self, server: grpc.aio.Server) -> None:
        reg_grpc.add_RegistrationServicer_to_server(self, server)

    async def GetInfo(self, request: Any, context: Any) -> reg_pb2.PluginInfo:
        self.get_info_calls += 1
        return self.info

    async def NotifyRegistrationStatus(self, request: Any, context: Any) -> reg_pb2.RegistrationStatusResponse:
        self.statuses.append((request.plugin_registered, request.error))
        self.notified.set()
        if self.fail_notify is not None:
            await context.abort(*self.fail_notify)
        return reg_pb2.RegistrationStatusResponse()
