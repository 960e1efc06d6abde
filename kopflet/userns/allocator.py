"""User namespace ID ranges for ``hostUsers: false`` pods: the rules of upstream's user namespace manager
(pkg/kubelet/userns/userns_manager.go) and of the kubelet's mappings (kubelet_pods.go getKubeletMappings,
parseGetSubIdsOutput), without its I/O.

The kubelet owns one range of host IDs (by default ``[idsPerPod, 2^32)``, or the ``kubelet`` user's subordinate
IDs from ``getsubids``), cut into slots of `ids_per_pod` IDs; each such pod gets one slot for both its UIDs and GIDs,
mapped from container ID 0. The slot is persisted in ``<root-dir>/pods/<uid>/userns`` (`record_json`), read back on
restart (`parse_record`, then `Allocations.record`), and freed when the pod is terminated or gone.

Pure: the random start of upstream's bitmap scan is the caller's argument.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

from cri_client import types as cri
from kopflet import gotext

USER_NS_UNIT_LENGTH = 65536
"""Upstream userNsUnitLength: a pod's IDs are a multiple of this."""
DEFAULT_IDS_PER_POD = 65536
"""Upstream DefaultKubeletUserNamespacesIDsPerPod (the kubelet config's ``userNamespaces.idsPerPod``)."""
KUBELET_USER = "kubelet"
"""Upstream kubeletUser: whose subordinate IDs (``getsubids kubelet``) the kubelet uses when it exists."""
ID_SPACE = 1 << 32


class UsernsError(Exception):
    """The user namespace manager's errors, worded as upstream's."""


# ------------------------------------------------------------------------------------- kubelet mappings

def default_kubelet_mappings(ids_per_pod: int = DEFAULT_IDS_PER_POD) -> tuple[int, int]:
    """Upstream getKubeletMappings' default: every ID from `ids_per_pod` up (the first pod's worth, with root,
    is never given to a pod). (first ID, length)."""
    return ids_per_pod, ID_SPACE - ids_per_pod


_GO_UINT = re.compile(r"[0-9]+")


def _parse_uint32(text: str, line: str) -> int:
    """Go's ``strconv.ParseUint(text, 10, 32)`` with parseGetSubIdsOutput's wrapping of its errors."""
    if not _GO_UINT.fullmatch(text):
        reason = "invalid syntax"
    elif int(text) >= ID_SPACE:
        reason = "value out of range"
    else:
        return int(text)
    raise UsernsError(f"error parsing line {gotext.go_quote(line)}: strconv.ParseUint: parsing "
                      f"{gotext.go_quote(text)}: {reason}")


def parse_getsubids_output(output: str) -> tuple[int, int]:
    """Upstream parseGetSubIdsOutput: exactly one ``<index>: <user> <first> <count>`` line (the same range serves
    UIDs and GIDs). (first ID, length); UsernsError otherwise."""
    lines = output.strip("\n").split("\n")
    if len(lines) != 1:
        raise UsernsError(f"error parsing line {gotext.go_quote(output)}: it must contain only one line")
    parts = lines[0].split()
    if len(parts) != 4:
        raise UsernsError(f"invalid line {gotext.go_quote(output)}")
    return _parse_uint32(parts[2], output), _parse_uint32(parts[3], output)


# ------------------------------------------------------------------------------------------- the slots

@dataclasses.dataclass(frozen=True)
class Allocations:
    """The slots and who holds them (upstream UsernsManager's ``used`` bitmap and ``usedBy``): slot ``i`` is the
    IDs ``[(offset + i) * ids_per_pod, (offset + i + 1) * ids_per_pod)``. Changes return a new value."""

    offset: int
    """The first slot's number (the kubelet's first ID / ids_per_pod)."""
    count: int
    """How many slots there are."""
    ids_per_pod: int = DEFAULT_IDS_PER_POD
    used_by: Mapping[str, int] = dataclasses.field(default_factory=dict)
    """Pod UID -> its first host ID."""

    @classmethod
    def for_kubelet(cls, first_id: int, length: int, *, max_pods: int,
                    ids_per_pod: int = DEFAULT_IDS_PER_POD) -> Allocations:
        """Upstream MakeUserNsManager's checks of the kubelet's mappings (`first_id`, `length`), in its order and
        words; UsernsError when they cannot serve `max_pods` pods of `ids_per_pod` IDs each."""
        if ids_per_pod % USER_NS_UNIT_LENGTH != 0:
            raise UsernsError(f"kubelet user namespace length {ids_per_pod} is not a multiple of "
                              f"{USER_NS_UNIT_LENGTH}")
        if first_id % ids_per_pod != 0:
            raise UsernsError(f"kubelet user assigned ID {first_id} is not a multiple of {ids_per_pod}")
        if first_id < ids_per_pod:  # upstream: mapping 0 would circumvent security
            raise UsernsError(f"kubelet user assigned ID {first_id} must be greater or equal to {ids_per_pod}")
        if length % ids_per_pod != 0:
            raise UsernsError(f"kubelet user assigned IDs length {length} is not a multiple of {ids_per_pod}")
        if length // ids_per_pod < max_pods:
            raise UsernsError(f"kubelet user assigned IDs are not enough to support {max_pods} pods")
        return cls(offset=first_id // ids_per_pod, count=length // ids_per_pod, ids_per_pod=ids_per_pod)

    def _index(self, first_id: int) -> int:
        return first_id // self.ids_per_pod - self.offset

    def _taken(self) -> set[int]:
        return {self._index(v) for v in self.used_by.values()}

    def is_set(self, first_id: int) -> bool:
        """Upstream isSet: the slot of `first_id` is taken (out of range counts as taken)."""
        index = self._index(first_id)
        return not 0 <= index < self.count or index in self._taken()

    def allocate(self, uid: str, start: int) -> tuple[Allocations, int]:
        """Upstream allocateOne: a free slot for pod `uid`, scanning from slot ``start % count`` on (upstream's
        bitmap starts at a random slot); (the new allocations, its first host ID). UsernsError when all are taken."""
        taken = self._taken()
        if len(taken) < self.count:
            for step in range(self.count):
                index = (start + step) % self.count
                if index not in taken:
                    first_id = (index + self.offset) * self.ids_per_pod
                    return dataclasses.replace(self, used_by={**self.used_by, uid: first_id}), first_id
        raise UsernsError("could not find an empty slot to allocate a user namespace")

    def record(self, uid: str, first_id: int, length: int) -> Allocations:
        """Upstream record: pod `uid` holds the range recorded in its file (on restart, or on every sync)."""
        if length != self.ids_per_pod:
            raise UsernsError(f"wrong user namespace length {length}")
        if first_id % self.ids_per_pod != 0:
            raise UsernsError(f"wrong user namespace offset specified {first_id}")
        previous = self.used_by.get(uid)
        if previous is not None and previous != first_id:
            raise UsernsError(f"different user namespace range already used by pod {gotext.go_quote(uid)}")
        index = self._index(first_id)
        if not 0 <= index < self.count:
            raise UsernsError(f"id {first_id} is out of range")
        if previous is None and index in self._taken():
            raise UsernsError(f"range picked for pod {gotext.go_quote(uid)} already taken")
        if previous is not None:
            return self
        return dataclasses.replace(self, used_by={**self.used_by, uid: first_id})

    def release(self, uid: str) -> Allocations:
        """Upstream releaseWithLock: the pod's slot is free again (nothing if it held none)."""
        if uid not in self.used_by:
            return self
        return dataclasses.replace(self, used_by={k: v for k, v in self.used_by.items() if k != uid})


def orphaned(allocated: Collection[str], on_disk: Collection[str], known: Callable[[str], bool]) -> list[str]:
    """Upstream CleanupOrphanedPodUsernsAllocations: the pods whose allocation must go: those with a directory
    that no one knows (`known`: neither the pod sources nor the runtime), then allocations whose pod has no
    directory."""
    result = [uid for uid in on_disk if not known(uid)]
    result += [uid for uid in allocated if uid not in on_disk and uid not in result]
    return result


# ------------------------------------------------------------------------------------ the per-pod record

def new_record(first_id: int, length: int) -> cri.UserNamespace:
    """Upstream createUserNs: one mapping from container ID 0, the same for UIDs and GIDs (mode POD)."""
    mapping = (cri.IDMapping(host_id=first_id, container_id=0, length=length),)
    return cri.UserNamespace(mode=cri.NamespaceMode.POD, uids=mapping, gids=mapping)


def _mapping_json(m: cri.IDMapping) -> dict[str, int]:
    return {"hostId": m.host_id, "containerId": m.container_id, "length": m.length}


def record_json(userns: cri.UserNamespace) -> str:
    """The ``userns`` file's content: upstream's userNamespace struct as Go's json.Marshal writes it (fields in
    declaration order, no spaces)."""
    return gotext.go_json({"uidMappings": [_mapping_json(m) for m in userns.uids],
                           "gidMappings": [_mapping_json(m) for m in userns.gids]})


def _field(obj: Mapping[str, Any], name: str) -> Any:
    """Go's json.Unmarshal into a struct: the exact key, else one that matches ignoring case; absent: None."""
    if name in obj:
        return obj[name]
    return next((v for k, v in obj.items() if k.lower() == name.lower()), None)


def _uint32(value: Any, where: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or \
            not 0 <= value < ID_SPACE:
        raise UsernsError(f"invalid user namespace mappings file: json: cannot unmarshal {json.dumps(value)} into "
                          f"Go struct field idMapping.{where} of type uint32")
    return int(value)


def _mappings(obj: Mapping[str, Any], name: str) -> tuple[cri.IDMapping, ...]:
    items = _field(obj, name)
    if items is None:
        return ()
    if not isinstance(items, list):
        raise UsernsError(f"invalid user namespace mappings file: json: cannot unmarshal {type(items).__name__} "
                          f"into Go struct field userNamespace.{name} of type []userns.idMapping")
    out = []
    for item in items:
        if item is None:
            out.append(cri.IDMapping())
            continue
        if not isinstance(item, Mapping):
            raise UsernsError(f"invalid user namespace mappings file: json: cannot unmarshal {json.dumps(item)} "
                              f"into Go struct field userNamespace.{name} of type userns.idMapping")
        out.append(cri.IDMapping(host_id=_uint32(_field(item, "hostId"), f"{name}.hostId"),
                                 container_id=_uint32(_field(item, "containerId"), f"{name}.containerId"),
                                 length=_uint32(_field(item, "length"), f"{name}.length")))
    return tuple(out)


def parse_record(content: str) -> cri.UserNamespace:
    """Upstream parseUserNsFileAndRecord's checks of a ``userns`` file: valid JSON, one UID mapping, the same GID
    mapping, both from container ID 0 (kopflet writes nothing else and runtimes assume root is mapped).
    UsernsError with upstream's words otherwise."""
    try:
        obj = json.loads(content)
    except ValueError as exc:
        raise UsernsError(f"invalid user namespace mappings file: {exc}") from None
    if obj is None:
        obj = {}
    if not isinstance(obj, Mapping):
        raise UsernsError(f"invalid user namespace mappings file: json: cannot unmarshal {type(obj).__name__} "
                          f"into Go value of type userns.userNamespace")
    uids, gids = _mappings(obj, "uidMappings"), _mappings(obj, "gidMappings")
    if len(uids) != 1:
        raise UsernsError("invalid user namespace configuration: no more than one mapping allowed.")
    if len(uids) != len(gids):
        raise UsernsError("invalid user namespace configuration: GID and UID mappings should be identical.")
    if uids[0] != gids[0]:
        raise UsernsError("invalid user namespace configuration: GID and UID mapping should be identical")
    if uids[0].container_id != 0:
        raise UsernsError("invalid user namespace configuration: UID 0 must be mapped")
    if gids[0].container_id != 0:
        raise UsernsError("invalid user namespace configuration: GID 0 must be mapped")
    return cri.UserNamespace(mode=cri.NamespaceMode.POD, uids=uids, gids=gids)


__all__ = [
    "DEFAULT_IDS_PER_POD",
    "KUBELET_USER",
    "USER_NS_UNIT_LENGTH",
    "Allocations",
    "UsernsError",
    "default_kubelet_mappings",
    "new_record",
    "orphaned",
    "parse_getsubids_output",
    "parse_record",
    "record_json",
]
