"""
What the CSI client takes and gives, as frozen dataclasses and names (no protobuf), and the rules upstream's
csi_client.go applies between the kubelet's words and the driver's.

- `csi_access_mode`: a PersistentVolume access mode as a CSI ``VolumeCapability.AccessMode.Mode`` name
  (upstream ``asCSIAccessModeV1`` and, for drivers with the ``SINGLE_NODE_MULTI_WRITER`` node capability,
  ``asSingleNodeMultiWriterCapableCSIAccessModeV1``).
- `volume_stats`: NodeGetVolumeStats' usages as upstream's ``volume.Metrics`` (bytes and inodes, zero when the
  driver leaves a unit out); an empty answer is upstream's error.

Enum values travel by name ("STAGE_UNSTAGE_VOLUME", "SINGLE_NODE_WRITER"), the names in csi.proto. Pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

CSI_TIMEOUT = 120.0
"""Upstream csi_plugin.go ``csiTimeout`` (2 min): NodeGetInfo at registration and every node operation's context."""
FS_TYPE_BLOCK = "block"
"""Upstream ``fsTypeBlockName``: the fsType that asks for a raw block volume instead of a mount."""

# NodeServiceCapability.RPC.Type names (csi.proto).
STAGE_UNSTAGE_VOLUME = "STAGE_UNSTAGE_VOLUME"
GET_VOLUME_STATS = "GET_VOLUME_STATS"
EXPAND_VOLUME = "EXPAND_VOLUME"
SINGLE_NODE_MULTI_WRITER = "SINGLE_NODE_MULTI_WRITER"
VOLUME_MOUNT_GROUP = "VOLUME_MOUNT_GROUP"
GET_VOLUME_HEALTH = "GET_VOLUME_HEALTH"
GET_STORAGE_HEALTH = "GET_STORAGE_HEALTH"

# PersistentVolumeAccessMode (core/v1).
READ_WRITE_ONCE = "ReadWriteOnce"
READ_ONLY_MANY = "ReadOnlyMany"
READ_WRITE_MANY = "ReadWriteMany"
READ_WRITE_ONCE_POD = "ReadWriteOncePod"

_ACCESS_MODES = {  # asCSIAccessModeV1
    READ_WRITE_ONCE: "SINGLE_NODE_WRITER",
    READ_ONLY_MANY: "MULTI_NODE_READER_ONLY",
    READ_WRITE_MANY: "MULTI_NODE_MULTI_WRITER",
    # lets drivers without SINGLE_NODE_MULTI_WRITER serve ReadWriteOncePod
    READ_WRITE_ONCE_POD: "SINGLE_NODE_WRITER",
}
_SINGLE_NODE_MULTI_WRITER_ACCESS_MODES = {  # asSingleNodeMultiWriterCapableCSIAccessModeV1
    READ_WRITE_ONCE: "SINGLE_NODE_MULTI_WRITER",
    READ_ONLY_MANY: "MULTI_NODE_READER_ONLY",
    READ_WRITE_MANY: "MULTI_NODE_MULTI_WRITER",
    READ_WRITE_ONCE_POD: "SINGLE_NODE_SINGLE_WRITER",
}


def csi_access_mode(access_mode: str, *, single_node_multi_writer: bool) -> str:
    """The CSI access mode for a PersistentVolume's; ``UNKNOWN`` for any other (upstream's default case)."""
    table = _SINGLE_NODE_MULTI_WRITER_ACCESS_MODES if single_node_multi_writer else _ACCESS_MODES
    return table.get(access_mode, "UNKNOWN")


@dataclasses.dataclass(frozen=True)
class PluginInfo:
    """Identity GetPluginInfo: the driver's name (the CSIDriver's), its version and free-form manifest."""

    name: str
    vendor_version: str = ""
    manifest: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class NodeInfo:
    """Node NodeGetInfo as upstream's csiClient returns it: the driver's ID for this node, how many volumes it may
    publish here (0: no limit), and the topology segments it can reach from here (None when it reports none)."""

    node_id: str
    max_volumes_per_node: int = 0
    accessible_topology: Mapping[str, str] | None = None


@dataclasses.dataclass(frozen=True)
class VolumeStats:
    """Upstream ``volume.Metrics`` from NodeGetVolumeStats: bytes and inodes, each zero when not reported."""

    available: int = 0
    capacity: int = 0
    used: int = 0
    inodes_free: int = 0
    inodes: int = 0
    inodes_used: int = 0


@dataclasses.dataclass(frozen=True)
class VolumeUsage:
    """One VolumeUsage of a NodeGetVolumeStats answer (`unit`: "BYTES", "INODES", or another name)."""

    unit: str
    available: int = 0
    total: int = 0
    used: int = 0


class VolumeStatsError(ValueError):
    """NodeGetVolumeStats answered with no usage (upstream: ``failed to get usage from response. usage is nil``)."""


def volume_stats(usages: Iterable[VolumeUsage]) -> tuple[VolumeStats, tuple[str, ...]]:
    """Upstream NodeGetVolumeStats' loop: the last BYTES usage gives the bytes, the last INODES one the inodes;
    the names of units it does not know are returned to be logged (upstream ``unknown unit in VolumeUsage``)."""
    usages = list(usages)
    if not usages:
        raise VolumeStatsError("failed to get usage from response. usage is nil")
    stats, unknown = VolumeStats(), []
    for usage in usages:
        if usage.unit == "BYTES":
            stats = dataclasses.replace(stats, available=usage.available, capacity=usage.total, used=usage.used)
        elif usage.unit == "INODES":
            stats = dataclasses.replace(stats, inodes_free=usage.available, inodes=usage.total,
                                        inodes_used=usage.used)
        else:
            unknown.append(usage.unit)
    return stats, tuple(unknown)


__all__ = [
    "CSI_TIMEOUT", "EXPAND_VOLUME", "FS_TYPE_BLOCK", "GET_STORAGE_HEALTH", "GET_VOLUME_HEALTH", "GET_VOLUME_STATS",
    "READ_ONLY_MANY", "READ_WRITE_MANY", "READ_WRITE_ONCE", "READ_WRITE_ONCE_POD", "SINGLE_NODE_MULTI_WRITER",
    "STAGE_UNSTAGE_VOLUME", "VOLUME_MOUNT_GROUP", "NodeInfo", "PluginInfo", "VolumeStats", "VolumeStatsError",
    "VolumeUsage", "csi_access_mode", "volume_stats",
]
