"""Local ephemeral storage limits: which pod goes for outgrowing its emptyDir or ephemeral-storage limits.

Mirrors upstream `pkg/kubelet/eviction/eviction_manager.go` (1.37): `localStorageEviction` and its three checks
`emptyDirLimitEviction`, `podEphemeralStorageLimitEviction`, `containerEphemeralStorageLimitEviction`, with the
messages of helpers.go; the pod's total is the stats provider's `calcEphemeralStorage` (pkg/kubelet/stats
helper.go) and the pod limit `resourcehelper.PodLimits` (component-helpers) for ephemeral-storage.

Pure and a leaf of the package: `storage_limits(pod)` reads the spec once (the eviction candidate keeps it);
`eviction_message(limits, ...)` takes the measured bytes as plain numbers and says why the pod must go, or None.
Sizes print as Go's `Quantity.String()` of the value as upstream holds it (its format: ``100Mi``, ``1G``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any, NamedTuple

from kopflet import gotext
from kopflet.api import qos, spec
from kopflet.eviction import thresholds as th

# helpers.go
EMPTY_DIR_MESSAGE_FMT = "Usage of EmptyDir volume {} exceeds the limit {}. "
"""emptyDirMessageFmt: ``%q`` of the volume name and of the sizeLimit."""
POD_EPHEMERAL_STORAGE_MESSAGE_FMT = "Pod ephemeral local storage usage exceeds the total limit of containers {}. "
"""podEphemeralStorageMessageFmt: ``%s`` of the pod's aggregated limit (unquoted)."""
CONTAINER_EPHEMERAL_STORAGE_MESSAGE_FMT = "Container {} exceeded its local ephemeral storage limit {}. "
"""containerEphemeralStorageMessageFmt: ``%s`` of the container name, ``%q`` of its limit."""

# eviction_manager.go: the evictions metric's signal label, one per check.
SIGNAL_EMPTY_DIR_FS_LIMIT = "emptydirfs.limit"
SIGNAL_EPHEMERAL_POD_FS_LIMIT = "ephemeralpodfs.limit"
SIGNAL_EPHEMERAL_CONTAINER_FS_LIMIT = "ephemeralcontainerfs.limit"

MEDIUM_MEMORY = "Memory"


@dataclasses.dataclass(frozen=True)
class Limit:
    """A limit's exact value and how upstream prints it (Go's `Quantity.String()` in the quantity's format)."""

    value: Fraction
    text: str


@dataclasses.dataclass(frozen=True)
class StorageLimits:
    """What the three checks read of a pod's spec (empty: nothing to enforce)."""

    empty_dirs: tuple[tuple[str, Limit], ...] = ()
    """emptyDir volumes with a positive sizeLimit, in spec order, by name. Memory-medium ones included:
    upstream skips them only under the InPlacePodVerticalScalingMemoryBackedVolumes gate (alpha, off in
    1.37); their tmpfs is mounted with that size, so they can hardly exceed it."""
    pod: Limit | None = None
    """The containers' aggregated ephemeral-storage limit (PodLimits), None when no container sets one."""
    containers: Mapping[str, Limit] = dataclasses.field(default_factory=dict)
    """Non-zero ephemeral-storage limits of the regular containers and sidecars, by name."""
    ephemeral_volumes: tuple[str, ...] = ()
    """Volumes whose usage counts toward the pod's ephemeral storage (IsLocalEphemeralVolume: disk emptyDir,
    configMap, gitRepo)."""

    @property
    def enforced(self) -> bool:
        """Whether any check can fire (else the pod's usage need not even be looked at)."""
        return bool(self.empty_dirs or self.pod is not None or self.containers)


class ContainerDisk(NamedTuple):
    """One container's measured disk use (summary ContainerStats Rootfs and Logs used bytes; None: no stats)."""

    name: str
    rootfs: int | None = None
    logs: int | None = None


# ------------------------------------------------------------------------------------------------- the spec

_Q = tuple[Fraction, str]
"""A quantity as Go holds it while summing: value and format."""


def _quantity(text: Any) -> _Q | None:
    if text is None or text == "":
        return None
    try:
        return qos.parse_quantity(text), th.quantity_format(str(text))
    except (qos.QuantityError, TypeError, ValueError):
        return None


def _add(total: _Q | None, value: _Q | None) -> _Q | None:
    """Go's addResourceList for one resource: a copy when absent, else `Quantity.Add`, which keeps the
    receiver's format unless the receiver is zero."""
    if value is None:
        return total
    if total is None:
        return value
    return total[0] + value[0], (value[1] if total[0] == 0 else total[1])


def _max(total: _Q | None, value: _Q | None) -> _Q | None:
    """Go's maxResourceList for one resource: the larger, the new one only when strictly larger."""
    if value is None:
        return total
    if total is None or value[0] > total[0]:
        return value
    return total


def _limit(q: _Q) -> Limit:
    return Limit(q[0], th.format_quantity(q[0], q[1]))


def _container_limit(container: spec.ContainerSpec) -> _Q | None:
    return _quantity(container.resources.limits.get(th.RESOURCE_EPHEMERAL_STORAGE))


def pod_limit(pod: spec.Pod) -> Limit | None:
    """upstream `PodLimits(pod, {})[ephemeral-storage]`: the regular containers and sidecars add up, each other
    init container needs itself plus the sidecars before it, the pod needs the larger (aggregateContainer-
    ResourcesByFn); a non-zero total gets spec.overhead. Pod-level ``spec.resources`` does not apply:
    ephemeral-storage is not a supported pod-level resource (IsSupportedPodLevelResource: cpu, memory,
    hugepages). None when no container lists the resource."""
    result: _Q | None = None
    for container in pod.spec.containers:
        result = _add(result, _container_limit(container))
    sidecars: _Q | None = None
    init_peak: _Q | None = None
    for container in pod.spec.init_containers:
        own = _container_limit(container)
        if container.is_sidecar:
            result = _add(result, own)
            sidecars = _add(sidecars, own)
            needed = sidecars
        else:
            needed = _add(own, sidecars)
        init_peak = _max(init_peak, needed)
    result = _max(result, init_peak)
    if result is None:
        return None
    overhead = pod.spec.raw.get("overhead")
    if result[0] != 0 and isinstance(overhead, Mapping):
        result = _add(result, _quantity(overhead.get(th.RESOURCE_EPHEMERAL_STORAGE)))
    return _limit(result)


def _is_local_ephemeral(volume: Mapping[str, Any]) -> bool:
    """upstream volume/util IsLocalEphemeralVolume: gitRepo, emptyDir of the default medium, configMap."""
    empty_dir = volume.get("emptyDir")
    return (volume.get("gitRepo") is not None or volume.get("configMap") is not None
            or (isinstance(empty_dir, Mapping) and not empty_dir.get("medium")))


def _empty_dir_limits(volumes: Iterable[Mapping[str, Any]]) -> tuple[tuple[str, Limit], ...]:
    result = []
    for volume in volumes:
        empty_dir = volume.get("emptyDir")
        if not isinstance(empty_dir, Mapping):
            continue
        size = _quantity(empty_dir.get("sizeLimit"))
        if size is not None and size[0] > 0:  # size.Sign() == 1
            result.append((str(volume.get("name")), _limit(size)))
    return tuple(result)


def storage_limits(pod: spec.Pod) -> StorageLimits:
    """What upstream's three checks read of the spec, read once."""
    containers: dict[str, Limit] = {}
    for container in (*pod.spec.containers, *(c for c in pod.spec.init_containers if c.is_sidecar)):
        q = _container_limit(container)
        if q is not None and math.ceil(q[0]) != 0:  # ephemeralLimit.Value() != 0
            containers[container.name] = _limit(q)
    return StorageLimits(
        empty_dirs=_empty_dir_limits(pod.spec.volumes),
        pod=pod_limit(pod),
        containers=containers,
        ephemeral_volumes=tuple(str(v.get("name")) for v in pod.spec.volumes if _is_local_ephemeral(v)),
    )


# ------------------------------------------------------------------------------------------------ the checks


def pod_ephemeral_usage(limits: StorageLimits, volumes: Mapping[str, int], containers: Iterable[ContainerDisk],
                        other: int = 0) -> int:
    """upstream calcEphemeralStorage's used bytes (PodStats.EphemeralStorage): each container's writable layer
    plus its logs (logs only alongside a writable layer, as addContainerUsage), the local ephemeral volumes
    measured, and `other` (the files of the pod's log directory and its etc-hosts file)."""
    total = other
    for container in containers:
        if container.rootfs is not None:
            total += container.rootfs + (container.logs or 0)
    return total + sum(volumes.get(name, 0) for name in limits.ephemeral_volumes)


def empty_dir_message(limits: StorageLimits, volumes: Mapping[str, int]) -> str | None:
    """upstream emptyDirLimitEviction: the first emptyDir (spec order) using more than its sizeLimit; a volume
    without stats is skipped."""
    for name, size in limits.empty_dirs:
        used = volumes.get(name)
        if used is not None and used > size.value:
            return EMPTY_DIR_MESSAGE_FMT.format(gotext.go_quote(name), gotext.go_quote(size.text))
    return None


def pod_message(limits: StorageLimits, pod_usage: int) -> str | None:
    """upstream podEphemeralStorageLimitEviction: the pod's total over the containers' aggregated limit."""
    if limits.pod is not None and pod_usage > limits.pod.value:
        return POD_EPHEMERAL_STORAGE_MESSAGE_FMT.format(limits.pod.text)
    return None


def container_message(limits: StorageLimits, containers: Iterable[ContainerDisk], *,
                      dedicated_image_fs: bool) -> str | None:
    """upstream containerEphemeralStorageLimitEviction: the first container (stats order) whose logs, plus its
    writable layer unless the image filesystem is dedicated (the layer is not on the node's disk then), exceed
    its limit."""
    for container in containers:
        limit = limits.containers.get(container.name)
        if limit is None:
            continue
        used = (container.logs or 0) + (0 if dedicated_image_fs else (container.rootfs or 0))
        if used > limit.value:
            return CONTAINER_EPHEMERAL_STORAGE_MESSAGE_FMT.format(container.name, gotext.go_quote(limit.text))
    return None


def eviction_message(limits: StorageLimits, *, volumes: Mapping[str, int], containers: Sequence[ContainerDisk],
                     other: int = 0, dedicated_image_fs: bool = False) -> tuple[str, str] | None:
    """upstream localStorageEviction for one pod: the emptyDir check, then the pod's total, then each container.
    The eviction's (signal, message) for the first that fires, else None."""
    message = empty_dir_message(limits, volumes)
    if message is not None:
        return SIGNAL_EMPTY_DIR_FS_LIMIT, message
    message = pod_message(limits, pod_ephemeral_usage(limits, volumes, containers, other))
    if message is not None:
        return SIGNAL_EPHEMERAL_POD_FS_LIMIT, message
    message = container_message(limits, containers, dedicated_image_fs=dedicated_image_fs)
    if message is not None:
        return SIGNAL_EPHEMERAL_CONTAINER_FS_LIMIT, message
    return None


__all__ = [
    "CONTAINER_EPHEMERAL_STORAGE_MESSAGE_FMT",
    "EMPTY_DIR_MESSAGE_FMT",
    "POD_EPHEMERAL_STORAGE_MESSAGE_FMT",
    "ContainerDisk",
    "Limit",
    "StorageLimits",
    "container_message",
    "empty_dir_message",
    "eviction_message",
    "pod_ephemeral_usage",
    "pod_limit",
    "storage_limits",
]
