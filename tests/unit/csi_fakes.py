"""Fake CSI drivers and plugin registrars for unit tests: real grpc.aio servers on temporary unix sockets.

- `FakeDriver` serves the CSI Identity and Node services (what a driver's node plugin serves on csi.sock): it
  records every request and answers from its fields, or aborts with `fail[method]` = (grpc.StatusCode, details).
- `FakeRegistrar` serves the kubelet plugin registration service (what node-driver-registrar serves in
  ``plugins_registry``): GetInfo answers its `info`, NotifyRegistrationStatus statuses are recorded.
- `FakeKube` stands for the apiserver of the node info manager's calls (a Node and its CSINode in memory).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any

import grpc

from kopflet.client.kubeapi import KubeApiError
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


class FakeKube:
    """The apiserver calls of the node info manager, on a Node and its CSINode held in memory: GET, POST, PUT,
    DELETE of csinodes (resourceVersion checked on PUT), GET of the Node and strategic merge patches of its metadata
    on nodes/status. `fail` holds (method, path) → KubeApiErrors to raise, one per call, before anything else."""

    def __init__(self, node_name: str = "node-a", node_uid: str = "uid-a") -> None:
        self.node_name = node_name
        self.node: dict[str, Any] = {"metadata": {"name": node_name, "uid": node_uid, "labels": {}, "annotations": {}}}
        self.csi_node: dict[str, Any] | None = None
        self.version = 0
        self.calls: list[tuple[str, str, Any]] = []
        self.fail: dict[tuple[str, str], list[Any]] = {}

    def _error(self, status: int, reason: str, message: str, method: str, path: str) -> Exception:
        return KubeApiError(status, reason, message, method, path)

    def _bump(self, obj: dict[str, Any]) -> None:
        self.version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)

    async def get_or_none(self, path: str) -> dict[str, Any] | None:
        try:
            return await self.request("GET", path)
        except Exception as exc:
            if getattr(exc, "not_found", False):
                return None
            raise

    async def request(self, method: str, path: str, *, body: Any = None, content_type: str = "application/json",
                      params: Mapping[str, str] | None = None) -> dict[str, Any]:
        json.dumps(body)  # what the real client sends must be JSON
        self.calls.append((method, path, copy.deepcopy(body)))
        queued = self.fail.get((method, path))
        if queued:
            raise queued.pop(0)
        csinodes = "/apis/storage.k8s.io/v1/csinodes"
        node_path = f"/api/v1/nodes/{self.node_name}"
        if path == node_path and method == "GET":
            return copy.deepcopy(self.node)
        if path == f"{node_path}/status" and method == "PATCH":
            assert content_type == "application/strategic-merge-patch+json"
            for field, changes in (body.get("metadata") or {}).items():
                current = self.node["metadata"].setdefault(field, {})
                for key, value in changes.items():
                    if value is None:
                        current.pop(key, None)
                    else:
                        current[key] = value
            return copy.deepcopy(self.node)
        name = f"{csinodes}/{self.node_name}"
        if path == name and method == "GET":
            if self.csi_node is None:
                raise self._error(404, "NotFound", f'csinodes.storage.k8s.io "{self.node_name}" not found', method,
                                  path)
            return copy.deepcopy(self.csi_node)
        if path == csinodes and method == "POST":
            if self.csi_node is not None:
                raise self._error(409, "AlreadyExists", f'csinodes.storage.k8s.io "{self.node_name}" already exists',
                                  method, path)
            refs = body["metadata"].get("ownerReferences") or []
            if any(not ref.get("uid") for ref in refs):
                raise self._error(422, "Invalid", "metadata.ownerReferences.uid: Invalid value: \"\": uid must not "
                                  "be empty", method, path)
            self.csi_node = copy.deepcopy(body)
            self._bump(self.csi_node)
            return copy.deepcopy(self.csi_node)
        if path == name and method == "PUT":
            if self.csi_node is None:
                raise self._error(404, "NotFound", "not found", method, path)
            if body["metadata"].get("resourceVersion") != self.csi_node["metadata"]["resourceVersion"]:
                raise self._error(409, "Conflict", "the object has been modified; please apply your changes to the "
                                  "latest version and try again", method, path)
            self.csi_node = copy.deepcopy(body)
            self._bump(self.csi_node)
            return copy.deepcopy(self.csi_node)
        if path == name and method == "DELETE":
            if self.csi_node is None:
                raise self._error(404, "NotFound", "not found", method, path)
            self.csi_node = None
            return {}
        raise AssertionError(f"unexpected call {method} {path}")
