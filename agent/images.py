"""Making sure a container's image is on the node (upstream ``EnsureImageExists``).

Pull policy as defaulted by the apiserver, pulls serialized (upstream ``serializeImagePulls`` default),
a per pod+image backoff after a failed pull, and the kubelet's events and waiting reasons:
``ErrImagePull`` right after a failure, ``ImagePullBackOff`` while backing off, ``ErrImageNeverPull``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

from agent.events import NORMAL, WARNING, EventRecorder
from cri_client import CriClient, CriError
from cri_client import types as cri
from kopflet import backoff as backoffs
from kopflet import spec

ERR_IMAGE_PULL = "ErrImagePull"
IMAGE_PULL_BACKOFF = "ImagePullBackOff"
ERR_IMAGE_NEVER_PULL = "ErrImageNeverPull"


@dataclasses.dataclass(frozen=True)
class ImageError(Exception):
    """Why a container cannot get its image: the waiting reason and message for its status."""

    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


class ImageManager:
    def __init__(self, cri_client: CriClient, recorder: EventRecorder, backoff: backoffs.Backoff) -> None:
        self.cri, self.recorder, self.backoff = cri_client, recorder, backoff
        self._pull_lock = asyncio.Lock()
        self.pulling: dict[str, tuple[float, float]] = {}
        """Pod uid -> (first pull started, last pull finished), wall clock: the pod start SLI leaves it out
        (upstream pod_startup_latency_tracker)."""

    async def ensure(self, pod: spec.Pod, container: spec.ContainerSpec, sandbox: cri.PodSandboxConfig,
                     init: bool = False) -> str:
        """Return the image reference to create the container from, or raise ImageError."""
        image = container.image

        def event(type_: str, reason: str, message: str) -> None:
            self.recorder.pod_event(pod, type_, reason, message, container.name, init)

        present = await self.cri.images.status(image)
        policy = container.image_pull_policy
        if present is not None and policy != spec.PULL_ALWAYS:
            event(NORMAL, "Pulled", f'Container image "{image}" already present on machine')
            return present.id or image
        if policy == spec.PULL_NEVER:
            message = f'Container image "{image}" is not present with pull policy of Never'
            event(WARNING, ERR_IMAGE_NEVER_PULL, message)
            raise ImageError(ERR_IMAGE_NEVER_PULL, message)

        key = backoffs.image_pull_key(pod.uid, image)
        now = time.time()
        if key in self.backoff and self.backoff.is_in_backoff_since(key, now, now):
            message = f'Back-off pulling image "{image}"'
            event(NORMAL, "BackOff", message)
            raise ImageError(IMAGE_PULL_BACKOFF, message)

        event(NORMAL, "Pulling", f'Pulling image "{image}"')
        waited_from = time.time()
        async with self._pull_lock:
            started = time.time()
            try:
                ref = await self.cri.images.pull(image, sandbox_config=sandbox)
            except CriError as exc:
                self.backoff.next(key, time.time())
                message = f"failed to pull and unpack image \"{image}\": {exc.details}" \
                    if "failed to pull" not in exc.details else exc.details
                event(WARNING, "Failed", f'Failed to pull image "{image}": {message}')
                raise ImageError(ERR_IMAGE_PULL, message) from exc
            done = time.time()
        first, _ = self.pulling.get(pod.uid, (waited_from, done))
        self.pulling[pod.uid] = (first, done)
        self.backoff.reset(key)
        pulled = await self.cri.images.status(ref or image)
        size = f" Image size: {pulled.size} bytes." if pulled is not None and pulled.size else ""
        event(NORMAL, "Pulled", f'Successfully pulled image "{image}" in {_duration(done - started)} '
                                f"({_duration(done - waited_from)} including waiting).{size}")
        return (pulled.id if pulled is not None and pulled.id else ref) or image


def _duration(seconds: float) -> str:
    """A Go duration truncated to milliseconds, as the Pulled event prints it (``1.5s``, ``512ms``)."""
    millis = max(int(seconds * 1000), 0)
    if millis < 1000:
        return f"{millis}ms"
    return f"{millis / 1000:.3f}".rstrip("0").rstrip(".") + "s"
