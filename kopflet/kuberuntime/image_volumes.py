"""Image volumes when containers start (upstream kuberuntime_manager.go: getImageVolumes,
toKubeContainerImageVolumes, incrementImageVolumeMetrics).

Pure. SyncPod pulls every image volume of the pod once, before the first container it starts in that sync (its
lazyStart), in spec order, through the image manager (pull policy, backoff, pull secrets and events as for a
container's image, the events on the pod itself); each outcome is an `ImageVolumePull`. Each container then takes
the images of the volumes it mounts (`for_container`). A mounted volume whose pull failed fails the container's
start with that pull's reason and message (ErrImagePull, ImagePullBackOff, ErrImageNeverPull, InvalidImageName:
upstream "fails late" so the container shows them) and one Warning ``Failed`` event per such mount, before the
container's own image is looked at; a container that does not mount it starts as usual.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from cri_client import types as cri
from kopflet.api import spec
from kopflet.container.sync_result import Waiting

FAILED_TO_CREATE_CONTAINER = "Failed"  # upstream events.FailedToCreateContainer
ERR_IMAGE_VOLUME_MOUNT_FAILED = "ImageVolumeMountFailed"
"""cri-api errors.ErrImageVolumeMountFailed: the prefix of a runtime's error when it could not mount an image."""


@dataclasses.dataclass(frozen=True)
class ImageVolumePull:
    """One image volume's pull in this sync (upstream imageVolumePullResult): the image to mount, or why not."""

    image: cri.ImageSpec | None = None
    reason: str = ""
    """The pull's error (ErrImagePull, ImagePullBackOff, ...): the container's waiting reason."""
    message: str = ""
    """The pull's message: the container's waiting message."""


def pulled(reference: str, image_ref: str, annotations: Mapping[str, str]) -> ImageVolumePull:
    """The ImageSpec the runtime mounts (upstream getImageVolumes): the image ref the pull returned, the pod's
    reference as written, the pod's annotations; no runtime handler (RuntimeClassInImageCriAPI is off)."""
    return ImageVolumePull(image=cri.ImageSpec(image=image_ref, user_specified_image=reference,
                                               annotations=dict(annotations)))


def failed(reason: str, message: str) -> ImageVolumePull:
    return ImageVolumePull(reason=reason, message=message)


@dataclasses.dataclass(frozen=True)
class ContainerImageVolumes:
    """What a container gets of the pod's image volume pulls (upstream toKubeContainerImageVolumes)."""

    images: Mapping[str, cri.ImageSpec] = dataclasses.field(default_factory=dict)
    """The pulled images of the image volumes it mounts, by volume name (for `plugins.container_mounts`)."""
    events: tuple[str, ...] = ()
    """The Warning ``Failed`` events to record on the container, one per mount of a volume whose pull failed."""
    waiting: Waiting | None = None
    """Set when a mounted volume's pull failed: the container does not start, and waits with the last one's reason
    and message."""


def for_container(container: spec.ContainerSpec, pulls: Mapping[str, ImageVolumePull]) -> ContainerImageVolumes:
    """The container's image volumes, in the order of its ``volumeMounts`` (a volume mounted twice counts twice
    for the events, as upstream walks the mounts). The event text is upstream's ``"Error: %v"`` of the error's
    gRPC status message, which for the image manager's errors is the error's own name (the reason)."""
    images: dict[str, cri.ImageSpec] = {}
    events: list[str] = []
    waiting: Waiting | None = None
    for mount in container.volume_mounts:
        name = mount.get("name")
        pull = pulls.get(name) if isinstance(name, str) else None
        if pull is None:
            continue
        if pull.image is None:
            events.append(f"Error: {pull.reason}")
            waiting = Waiting(pull.reason, pull.message)
            continue
        images[str(name)] = pull.image
    if waiting is not None:
        return ContainerImageVolumes(events=tuple(events), waiting=waiting)
    return ContainerImageVolumes(images=images)


@dataclasses.dataclass(frozen=True)
class MountCounts:
    """The increments of upstream's image volume counters for one container start."""

    requested: int = 0
    """kubelet_image_volume_requested_total: the image volumes the container mounts."""
    succeeded: int = 0
    """kubelet_image_volume_mounted_succeed_total: its mounts of them, unless the runtime could not mount one."""
    errors: int = 0
    """kubelet_image_volume_mounted_errors_total: its mounts of them when the runtime could not mount one."""


def mount_counts(container: spec.ContainerSpec, images: Mapping[str, cri.ImageSpec],
                 create_error: str | None) -> MountCounts:
    """Upstream incrementImageVolumeMetrics, after the container's start was tried: every mount of an image volume
    counts as mounted unless CreateContainer failed (`create_error`, the runtime's message) with
    ImageVolumeMountFailed; whatever else failed (the container's own image, its start) still counts as mounted."""
    mounts = sum(1 for mount in container.volume_mounts if mount.get("name") in images)
    failed_mount = create_error is not None and create_error.startswith(ERR_IMAGE_VOLUME_MOUNT_FAILED)
    return MountCounts(requested=len(images), succeeded=0 if failed_mount else mounts,
                       errors=mounts if failed_mount else 0)


__all__ = [
    "ContainerImageVolumes",
    "ImageVolumePull",
    "MountCounts",
    "failed",
    "for_container",
    "mount_counts",
    "pulled",
]
