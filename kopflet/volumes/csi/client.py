"""
The asynchronous client of one CSI driver's node plugin (upstream pkg/volume/csi/csi_client.go `csiDriverClient`):
the Identity and Node services over the driver's unix socket, protobufs hidden behind `kopflet.volumes.csi.types`
and every failure one `CSIError`.

Usage::

    async with CSIClient("/var/lib/kopflet/plugins/csi-hostpath/csi.sock", driver="hostpath.csi.k8s.io") as csi:
        info = await csi.node_get_info()
        await csi.node_publish_volume("vol-1", target, access_mode="ReadWriteOnce", fs_type="ext4")

Every call goes through `_call`, which sets a deadline (the client's `timeout`, upstream ``csiTimeout``: 2 minutes,
unless the caller gives its own `deadline` in seconds), does not queue on a broken connection (UNAVAILABLE at once,
as grpc-go's default), and maps gRPC errors to `CSIError`. As upstream, NodeStageVolume, NodePublishVolume and
NodeExpandVolume first ask NodeGetCapabilities (to map the access mode) within the same deadline, and a transient
error of theirs or of NodeGetCapabilities is ``uncertain`` (upstream's UncertainProgressError: the driver may still
be at it). Requests missing a volume ID or path are refused before any call with upstream's messages.

Upstream dials a new connection per call; here one channel per client serves every call (gRPC reconnects it
by itself with a short backoff), closed with the client.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Final, Literal, Self

import grpc
import grpc.aio
from google.protobuf.message import Message

from kopflet.volumes.csi import types
from kopflet.volumes.csi.errors import CSIError, is_final_error
from kopflet.volumes.csi.proto import csi_pb2 as pb
from kopflet.volumes.csi.proto import csi_pb2_grpc as pb_grpc

logger = logging.getLogger(__name__)

_CHANNEL_OPTIONS: Final = (
    ("grpc.default_authority", "localhost"),  # upstream newGrpcConn: grpc.WithAuthority("localhost")
    ("grpc.enable_http_proxy", 0),  # a local socket never goes through $http_proxy
    ("grpc.use_local_subchannel_pool", 1),  # each client's connection (and its backoff) its own
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
)

_Service = Literal["Identity", "Node"]


def grpc_target(endpoint: str) -> str:
    """A driver's endpoint as a gRPC target: the plugin registration gives a socket path (upstream dials it as a
    ``unix`` address); ``unix:`` targets are taken as they are."""
    return endpoint if endpoint.startswith("unix:") else f"unix://{endpoint}"


class CSIClient:
    """A connection to one CSI driver's socket. `driver` names it in logs and errors; `timeout` bounds each call
    made without a timeout of its own (upstream csiTimeout)."""

    def __init__(self, endpoint: str, *, driver: str = "", timeout: float = types.CSI_TIMEOUT) -> None:
        self.endpoint: Final = endpoint
        self.driver: Final = driver
        self.timeout: Final = timeout
        self._channel: grpc.aio.Channel | None = None
        self._identity: pb_grpc.IdentityStub | None = None
        self._node: pb_grpc.NodeStub | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.endpoint!r}, driver={self.driver!r})"

    # -------------------------------------------------------------------------------------- lifecycle

    async def open(self) -> None:
        """Create the channel (it connects at the first call)."""
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(grpc_target(self.endpoint), options=list(_CHANNEL_OPTIONS))
            self._identity = pb_grpc.IdentityStub(self._channel)
            self._node = pb_grpc.NodeStub(self._channel)

    async def close(self) -> None:
        """Close the channel, cancelling calls in flight. Safe to call twice."""
        channel, self._channel, self._identity, self._node = self._channel, None, None, None
        if channel is not None:
            await channel.close()

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    # ---------------------------------------------------------------------------------- the one choke

    def _until(self, deadline: float | None) -> float:
        """The time.monotonic() by which a call given `deadline` seconds (None: the client's timeout) must end."""
        return time.monotonic() + (self.timeout if deadline is None else deadline)

    async def _call(self, service: _Service, method: str, request: Message, until: float, *,
                    uncertain_unless_final: bool = False) -> Any:
        """One unary call that must end by `until` (time.monotonic()). The only place that touches grpc errors:
        `uncertain_unless_final` marks a transient error as upstream's UncertainProgressError."""
        if self._channel is None:
            await self.open()
        stub = self._identity if service == "Identity" else self._node
        assert stub is not None
        rpc = getattr(stub, method)
        try:
            return await rpc(request, timeout=max(until - time.monotonic(), 0.0), wait_for_ready=False)
        except grpc.aio.AioRpcError as e:
            code = e.code().name
            raise CSIError(code, e.details() or "", f"csi.v1.{service}/{method}", self.endpoint,
                           uncertain=uncertain_unless_final and not is_final_error(code)) from e

    # ---------------------------------------------------------------------------------------- identity

    async def get_plugin_info(self, *, deadline: float | None = None) -> types.PluginInfo:
        """Identity GetPluginInfo: the driver's name, version and manifest."""
        response = await self._call("Identity", "GetPluginInfo", pb.GetPluginInfoRequest(), self._until(deadline))
        return types.PluginInfo(response.name, response.vendor_version, dict(response.manifest))

    async def probe(self, *, deadline: float | None = None) -> bool | None:
        """Identity Probe: the driver's readiness (None when it does not say: the spec reads that as ready)."""
        response = await self._call("Identity", "Probe", pb.ProbeRequest(), self._until(deadline))
        return response.ready.value if response.HasField("ready") else None

    # -------------------------------------------------------------------------------------------- node

    async def node_get_info(self, *, deadline: float | None = None) -> types.NodeInfo:
        """Node NodeGetInfo (upstream nodeGetInfoV1)."""
        logger.debug(f"kubernetes.io/csi: calling NodeGetInfo rpc ({self.driver or self.endpoint})")
        response = await self._call("Node", "NodeGetInfo", pb.NodeGetInfoRequest(), self._until(deadline))
        topology = dict(response.accessible_topology.segments) if response.HasField("accessible_topology") else None
        return types.NodeInfo(response.node_id, response.max_volumes_per_node, topology)

    async def node_get_capabilities(self, *, deadline: float | None = None) -> frozenset[str]:
        """Node NodeGetCapabilities: the names of the RPC capabilities (upstream nodeGetCapabilities; a transient
        error is uncertain)."""
        return await self._capabilities(self._until(deadline))

    async def _capabilities(self, until: float) -> frozenset[str]:
        response = await self._call("Node", "NodeGetCapabilities", pb.NodeGetCapabilitiesRequest(), until,
                                    uncertain_unless_final=True)
        return frozenset(pb.NodeServiceCapability.RPC.Type.Name(c.rpc.type)
                         for c in response.capabilities if c.HasField("rpc"))

    async def node_supports(self, capability: str, *, deadline: float | None = None) -> bool:
        """Upstream nodeSupportsCapability: whether NodeGetCapabilities lists `capability` (a name in `types`)."""
        return capability in await self.node_get_capabilities(deadline=deadline)

    async def node_supports_stage_unstage(self, *, deadline: float | None = None) -> bool:
        return await self.node_supports(types.STAGE_UNSTAGE_VOLUME, deadline=deadline)

    async def node_supports_node_expand(self, *, deadline: float | None = None) -> bool:
        return await self.node_supports(types.EXPAND_VOLUME, deadline=deadline)

    async def node_supports_volume_stats(self, *, deadline: float | None = None) -> bool:
        return await self.node_supports(types.GET_VOLUME_STATS, deadline=deadline)

    async def node_supports_volume_mount_group(self, *, deadline: float | None = None) -> bool:
        return await self.node_supports(types.VOLUME_MOUNT_GROUP, deadline=deadline)

    async def node_supports_single_node_multi_writer_access_mode(self, *, deadline: float | None = None) -> bool:
        return await self.node_supports(types.SINGLE_NODE_MULTI_WRITER, deadline=deadline)

    async def _access_mode(self, access_mode: str, until: float) -> str:
        """Upstream getNodeV1AccessModeMapper: the mapping depends on the driver's SINGLE_NODE_MULTI_WRITER."""
        capabilities = await self._capabilities(until)
        return types.csi_access_mode(access_mode,
                                     single_node_multi_writer=types.SINGLE_NODE_MULTI_WRITER in capabilities)

    @staticmethod
    def _capability(access_mode: str, fs_type: str, mount_options: Sequence[str],
                    fs_group: int | None = None) -> pb.VolumeCapability:
        """The VolumeCapability of a stage, publish or expand request: a block volume for fsType ``block``, else a
        mount with the fsType, mount flags and (when the caller checked VOLUME_MOUNT_GROUP) the fsGroup."""
        capability = pb.VolumeCapability(access_mode=pb.VolumeCapability.AccessMode(
            mode=pb.VolumeCapability.AccessMode.Mode.Value(access_mode)))
        if fs_type == types.FS_TYPE_BLOCK:
            capability.block.SetInParent()
        else:
            capability.mount.fs_type = fs_type
            capability.mount.mount_flags.extend(mount_options)
            if fs_group is not None:
                capability.mount.volume_mount_group = str(fs_group)
        return capability

    async def node_stage_volume(self, volume_id: str, staging_target_path: str, *, access_mode: str,
                                fs_type: str = "", publish_context: Mapping[str, str] | None = None,
                                volume_context: Mapping[str, str] | None = None,
                                secrets: Mapping[str, str] | None = None, mount_options: Sequence[str] = (),
                                fs_group: int | None = None, deadline: float | None = None) -> None:
        """Node NodeStageVolume (upstream NodeStageVolume). `fs_group` only for drivers with VOLUME_MOUNT_GROUP
        (the caller checks, as upstream's)."""
        logger.debug(f"kubernetes.io/csi: calling NodeStageVolume rpc volID={volume_id} "
                     f"stagingTargetPath={staging_target_path}")
        if not volume_id:
            raise CSIError("", "missing volume id")
        if not staging_target_path:
            raise CSIError("", "missing staging target path")
        until = self._until(deadline)
        mode = await self._access_mode(access_mode, until)
        request = pb.NodeStageVolumeRequest(
            volume_id=volume_id, publish_context=publish_context or {}, staging_target_path=staging_target_path,
            volume_capability=self._capability(mode, fs_type, mount_options, fs_group), secrets=secrets or {},
            volume_context=volume_context or {})
        await self._call("Node", "NodeStageVolume", request, until, uncertain_unless_final=True)

    async def node_unstage_volume(self, volume_id: str, staging_target_path: str, *,
                                  deadline: float | None = None) -> None:
        """Node NodeUnstageVolume (upstream NodeUnstageVolume: its errors are never uncertain)."""
        logger.debug(f"kubernetes.io/csi: calling NodeUnstageVolume rpc volID={volume_id} "
                     f"stagingTargetPath={staging_target_path}")
        if not volume_id:
            raise CSIError("", "missing volume id")
        if not staging_target_path:
            raise CSIError("", "missing staging target path")
        request = pb.NodeUnstageVolumeRequest(volume_id=volume_id, staging_target_path=staging_target_path)
        await self._call("Node", "NodeUnstageVolume", request, self._until(deadline))

    async def node_publish_volume(self, volume_id: str, target_path: str, *, access_mode: str,
                                  staging_target_path: str = "", read_only: bool = False, fs_type: str = "",
                                  publish_context: Mapping[str, str] | None = None,
                                  volume_context: Mapping[str, str] | None = None,
                                  secrets: Mapping[str, str] | None = None, mount_options: Sequence[str] = (),
                                  fs_group: int | None = None, deadline: float | None = None) -> None:
        """Node NodePublishVolume (upstream NodePublishVolume). `staging_target_path` only when the driver stages;
        `fs_group` only for drivers with VOLUME_MOUNT_GROUP."""
        logger.debug(f"kubernetes.io/csi: calling NodePublishVolume rpc volID={volume_id} targetPath={target_path}")
        if not volume_id:
            raise CSIError("", "missing volume id")
        if not target_path:
            raise CSIError("", "missing target path")
        until = self._until(deadline)
        mode = await self._access_mode(access_mode, until)
        request = pb.NodePublishVolumeRequest(
            volume_id=volume_id, target_path=target_path, readonly=read_only, publish_context=publish_context or {},
            volume_context=volume_context or {}, secrets=secrets or {},
            volume_capability=self._capability(mode, fs_type, mount_options, fs_group))
        if staging_target_path:
            request.staging_target_path = staging_target_path
        await self._call("Node", "NodePublishVolume", request, until, uncertain_unless_final=True)

    async def node_unpublish_volume(self, volume_id: str, target_path: str, *, deadline: float | None = None) -> None:
        """Node NodeUnpublishVolume (upstream NodeUnpublishVolume: its errors are never uncertain)."""
        logger.debug(f"kubernetes.io/csi: calling NodeUnpublishVolume rpc volID={volume_id} "
                     f"targetPath={target_path}")
        if not volume_id:
            raise CSIError("", "missing volume id")
        if not target_path:
            raise CSIError("", "missing target path")
        request = pb.NodeUnpublishVolumeRequest(volume_id=volume_id, target_path=target_path)
        await self._call("Node", "NodeUnpublishVolume", request, self._until(deadline))

    async def node_get_volume_stats(self, volume_id: str, target_path: str, *,
                                    deadline: float | None = None) -> types.VolumeStats:
        """Node NodeGetVolumeStats as upstream's ``volume.Metrics``; an answer without usage is a CSIError with
        upstream's message."""
        logger.debug(f"kubernetes.io/csi: calling NodeGetVolumeStats rpc volID={volume_id} targetPath={target_path}")
        if not volume_id:
            raise CSIError("", "missing volume id")
        if not target_path:
            raise CSIError("", "missing target path")
        request = pb.NodeGetVolumeStatsRequest(volume_id=volume_id, volume_path=target_path)
        response = await self._call("Node", "NodeGetVolumeStats", request, self._until(deadline))
        usages = [types.VolumeUsage(pb.VolumeUsage.Unit.Name(u.unit) if u.unit in pb.VolumeUsage.Unit.values()
                                    else str(u.unit), u.available, u.total, u.used) for u in response.usage]
        try:
            stats, unknown = types.volume_stats(usages)
        except types.VolumeStatsError as exc:
            raise CSIError("", str(exc), "csi.v1.Node/NodeGetVolumeStats", self.endpoint) from None
        for unit in unknown:
            logger.error(f"unknown unit in VolumeUsage: unit={unit}")
        return stats

    async def node_expand_volume(self, volume_id: str, volume_path: str, new_size: int, *, access_mode: str,
                                 staging_target_path: str = "", fs_type: str = "", mount_options: Sequence[str] = (),
                                 secrets: Mapping[str, str] | None = None, deadline: float | None = None) -> int:
        """Node NodeExpandVolume (upstream NodeExpandVolume): the volume's new capacity in bytes."""
        if not volume_id:
            raise CSIError("", "missing volume id")
        if not volume_path:
            raise CSIError("", "missing volume path")
        if new_size < 0:
            raise CSIError("", "size can not be less than 0")
        until = self._until(deadline)
        mode = await self._access_mode(access_mode, until)
        request = pb.NodeExpandVolumeRequest(
            volume_id=volume_id, volume_path=volume_path, capacity_range=pb.CapacityRange(required_bytes=new_size),
            volume_capability=self._capability(mode, fs_type, mount_options), secrets=secrets or {})
        if staging_target_path:  # not every driver stages
            request.staging_target_path = staging_target_path
        response = await self._call("Node", "NodeExpandVolume", request, until, uncertain_unless_final=True)
        return int(response.capacity_bytes)


__all__ = ["CSIClient", "grpc_target"]
