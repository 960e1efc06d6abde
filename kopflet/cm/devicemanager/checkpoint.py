"""The device manager's checkpoint, ``<root-dir>/device-plugins/kubelet_internal_checkpoint``, byte for byte as
upstream writes it (pkg/kubelet/cm/devicemanager/checkpoint at v1.37.1, `Data.MarshalCheckpoint`):

``{"Data":{"PodDeviceEntries":[{"PodUID":..,"ContainerName":..,"ResourceName":..,"DeviceIDs":{"<numa>":[ids]},
"AllocResp":"<base64 of the ContainerAllocateResponse protobuf>"}],"RegisteredDevices":{"<resource>":[ids]}},
"Checksum":<uint64>}``

The checksum is upstream's `checksum.New(cp.Data)`: fnv-1a 32 over go-spew's ``%#v`` of the `checkpointData`
struct with `dump.ForHash`'s settings (sorted map keys, no pointers or capacities). Go's nil and empty differ
there (``<nil>`` vs ``[]``/``map[]``), so the entries keep which they were (None vs empty). The unit tests hold
vectors produced by Go running upstream's package. Pure: the file is `kopflet.cm.devicemanager.manager`'s.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from kopflet import gotext

CHECKPOINT_NAME = "kubelet_internal_checkpoint"
"""Upstream kubeletDeviceManagerCheckpoint, in the device plugin socket directory."""

ERR_CORRUPT = "checkpoint is corrupted"
"""checkpointmanager/errors ErrCorruptCheckpoint."""

DevicesPerNUMA = Mapping[int, tuple[str, ...] | None]
"""Device IDs per NUMA node (-1: no topology); a None list is Go's nil slice."""


class CheckpointError(ValueError):
    """The checkpoint cannot be read (bad JSON, or its checksum does not match: `ERR_CORRUPT`)."""


@dataclasses.dataclass(frozen=True)
class PodDevicesEntry:
    """One container's devices of one resource, with the plugin's Allocate answer (serialized protobuf)."""

    pod_uid: str
    container_name: str
    resource_name: str
    device_ids: DevicesPerNUMA | None
    alloc_resp: bytes | None


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """`checkpointData`; None stands for Go's nil slice or map (it changes the checksum)."""

    entries: tuple[PodDevicesEntry, ...] | None
    registered: Mapping[str, tuple[str, ...] | None] | None


def fnv1a_32(data: bytes) -> int:
    """Go's ``hash/fnv`` New32a."""
    value = 0x811C9DC5
    for byte in data:
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def _spew_strings(values: tuple[str, ...] | None) -> str:
    return "<nil>" if values is None else "[" + " ".join(values) + "]"


def _bytewise(key: str) -> bytes:
    return key.encode("utf-8", "surrogatepass")


def _spew_entry(entry: PodDevicesEntry) -> str:
    if entry.device_ids is None:
        ids = "<nil>"
    else:
        ids = "map[" + " ".join(f"{numa}:{_spew_strings(entry.device_ids[numa])}"
                                for numa in sorted(entry.device_ids)) + "]"
    resp = "<nil>" if entry.alloc_resp is None else "[" + " ".join(str(b) for b in entry.alloc_resp) + "]"
    return (f"{{PodUID:(string){entry.pod_uid} ContainerName:(string){entry.container_name} "
            f"ResourceName:(string){entry.resource_name} DeviceIDs:(checkpoint.DevicesPerNUMA){ids} "
            f"AllocResp:([]uint8){resp}}}")


def spew(cp: Checkpoint) -> str:
    """`dump.ForHash(cp.Data)`: what upstream's checksum hashes."""
    entries = "<nil>" if cp.entries is None else "[" + " ".join(_spew_entry(e) for e in cp.entries) + "]"
    if cp.registered is None:
        registered = "<nil>"
    else:
        registered = "map[" + " ".join(f"{k}:{_spew_strings(cp.registered[k])}"
                                       for k in sorted(cp.registered, key=_bytewise)) + "]"
    return (f"(checkpoint.checkpointData){{PodDeviceEntries:([]checkpoint.PodDevicesEntry){entries} "
            f"RegisteredDevices:(map[string][]string){registered}}}")


def checksum(cp: Checkpoint) -> int:
    """Upstream `checksum.New(cp.Data)`."""
    return fnv1a_32(spew(cp).encode("utf-8", "surrogatepass"))


def _json_strings(values: tuple[str, ...] | None) -> list[str] | None:
    return None if values is None else list(values)


def _json_entry(entry: PodDevicesEntry) -> dict[str, Any]:
    ids: dict[str, Any] | None = None
    if entry.device_ids is not None:
        # encoding/json writes an int-keyed map's keys as strings, sorted as strings.
        ids = {str(k): _json_strings(entry.device_ids[k]) for k in sorted(entry.device_ids, key=str)}
    return {"PodUID": entry.pod_uid, "ContainerName": entry.container_name, "ResourceName": entry.resource_name,
            "DeviceIDs": ids,
            "AllocResp": None if entry.alloc_resp is None else base64.b64encode(entry.alloc_resp).decode()}


def encode(cp: Checkpoint) -> bytes:
    """Upstream `MarshalCheckpoint`: the JSON with the checksum of the data."""
    registered = None if cp.registered is None else {
        k: _json_strings(cp.registered[k]) for k in sorted(cp.registered, key=_bytewise)}
    body = {"Data": {"PodDeviceEntries": None if cp.entries is None else [_json_entry(e) for e in cp.entries],
                     "RegisteredDevices": registered},
            "Checksum": checksum(cp)}
    return gotext.go_json(body).encode("utf-8", "surrogatepass")


def _field(body: Mapping[str, Any], name: str) -> tuple[bool, Any]:
    """encoding/json matches struct field names case-insensitively (an exact match first)."""
    if name in body:
        return True, body[name]
    for key, value in body.items():
        if key.lower() == name.lower():
            return True, value
    return False, None


def _strings(value: Any, what: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CheckpointError(f"{what}: not a list of strings")
    return tuple(value)


def _decode_entry(raw: Any) -> PodDevicesEntry:
    if not isinstance(raw, Mapping):
        raise CheckpointError("PodDeviceEntries: not an object")
    texts = []
    for name in ("PodUID", "ContainerName", "ResourceName"):
        value = _field(raw, name)[1]
        if value is not None and not isinstance(value, str):
            raise CheckpointError(f"{name}: not a string")
        texts.append(value or "")
    found, ids_raw = _field(raw, "DeviceIDs")
    device_ids: dict[int, tuple[str, ...] | None] | None = None
    if found and ids_raw is not None:
        if not isinstance(ids_raw, Mapping):
            raise CheckpointError("DeviceIDs: not an object")
        device_ids = {}
        for key, value in ids_raw.items():
            try:
                numa = int(key, 10)
            except ValueError:
                raise CheckpointError(f"DeviceIDs: bad NUMA node {key!r}") from None
            device_ids[numa] = _strings(value, "DeviceIDs")
    _, resp_raw = _field(raw, "AllocResp")
    alloc_resp: bytes | None = None
    if resp_raw is not None:
        if not isinstance(resp_raw, str):
            raise CheckpointError("AllocResp: not a string")
        try:
            alloc_resp = base64.b64decode(resp_raw, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise CheckpointError(f"AllocResp: {exc}") from None
    return PodDevicesEntry(texts[0], texts[1], texts[2], device_ids, alloc_resp)


def decode(blob: bytes) -> Checkpoint:
    """Upstream `GetCheckpoint`: unmarshal into an empty (non-nil) checkpoint, then `VerifyChecksum`."""
    try:
        body = json.loads(blob)
    except ValueError as exc:
        raise CheckpointError(str(exc)) from None
    if not isinstance(body, Mapping):
        raise CheckpointError("not a JSON object")
    _, data = _field(body, "Data")
    data = data if isinstance(data, Mapping) else {}
    entries: tuple[PodDevicesEntry, ...] | None = ()
    found, raw_entries = _field(data, "PodDeviceEntries")
    if found:
        if raw_entries is not None and not isinstance(raw_entries, list):
            raise CheckpointError("PodDeviceEntries: not a list")
        entries = None if raw_entries is None else tuple(_decode_entry(e) for e in raw_entries)
    registered: dict[str, tuple[str, ...] | None] | None = {}
    found, raw_registered = _field(data, "RegisteredDevices")
    if found:
        if raw_registered is None:
            registered = None
        elif isinstance(raw_registered, Mapping):
            registered = {str(k): _strings(v, "RegisteredDevices") for k, v in raw_registered.items()}
        else:
            raise CheckpointError("RegisteredDevices: not an object")
    _, stored = _field(body, "Checksum")
    if isinstance(stored, bool) or not isinstance(stored, int) or stored < 0:
        stored = -1 if stored is not None else 0
    cp = Checkpoint(entries, registered)
    if stored != checksum(cp):
        raise CheckpointError(ERR_CORRUPT)
    return cp


__all__ = ["CHECKPOINT_NAME", "ERR_CORRUPT", "Checkpoint", "CheckpointError", "DevicesPerNUMA", "PodDevicesEntry",
           "checksum", "decode", "encode", "fnv1a_32", "spew"]
