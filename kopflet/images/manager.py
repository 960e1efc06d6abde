"""Making sure an image is on the node, a container's or an image volume's (upstream ``EnsureImageExists``).

Pull policy as defaulted by the apiserver, pulls serialized (upstream ``serializeImagePulls`` default),
a per pod+image backoff after a failed pull, and the kubelet's events and waiting reasons:
``ErrImagePull`` right after a failure, ``ImagePullBackOff`` while backing off, ``ErrImageNeverPull``, and
``InvalidImageName`` (with a Warning ``InspectFailed`` event) for a reference that does not parse, which never
reaches the runtime.
"""

from __future__ import annotations

import asyncio
import binascii
import dataclasses
import logging
import time

from cri_client import CriClient, CriError
from cri_client import types as cri
from kopflet import backoff as backoffs
from kopflet import gotext
from kopflet.api import spec
from kopflet.api.events import NORMAL, WARNING
from kopflet.client.events import EventRecorder
from kopflet.client.kubeapi import API_ERRORS, KubeClient, secret_bytes
from kopflet.container.sync_result import IMAGE_PULL, StepTime
from kopflet.images import credentials, imageref
from kopflet.metrics import KubeletMetrics, image_size_bucket
from kopflet.util.manager import DirectObjects, NotRegisteredError, Objects

logger = logging.getLogger(__name__)

ERR_IMAGE_PULL = "ErrImagePull"
IMAGE_PULL_BACKOFF = "ImagePullBackOff"
ERR_IMAGE_NEVER_PULL = "ErrImageNeverPull"
INVALID_IMAGE_NAME = "InvalidImageName"
FAILED_TO_INSPECT_IMAGE = "InspectFailed"  # upstream events.FailedToInspectImage
MAX_KNOWN_IMAGES = 256
"""How many images' statuses `image_status` keeps by ID (the oldest dropped first)."""


@dataclasses.dataclass(frozen=True)
class ImageError(Exception):
    """Why a container cannot get its image: the waiting reason and message for its status."""

    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


class ImageManager:
    metrics: KubeletMetrics | None = None
    """Where kubelet_image_pull_duration_seconds goes (None: not recorded)."""

    def __init__(self, cri_client: CriClient, recorder: EventRecorder, backoff: backoffs.Backoff,
                 api: KubeClient | None = None, *, metrics: KubeletMetrics | None = None,
                 objects: Objects | None = None) -> None:
        self.cri, self.recorder, self.backoff, self.api, self.metrics = cri_client, recorder, backoff, api, metrics
        # where pull secrets are read: the node's watches of what its pods reference (default a GET each time)
        self.objects: Objects | None = objects if objects is not None or api is None else DirectObjects(api)
        self._pull_lock = asyncio.Lock()
        self.pulling: dict[str, tuple[float, float]] = {}
        """Pod uid -> (first pull started, last pull finished), wall clock: the pod start SLI leaves it out
        (upstream pod_startup_latency_tracker)."""
        self.pull_steps: dict[str, list[StepTime]] = {}
        """Pod uid -> the pulls tried for it since its worker last took them (`take_pull_steps`), for its start
        timeline."""
        self._known: dict[str, cri.Image] = {}
        """Image ID -> its status as the last `ensure_image` read it."""

    def _remember(self, image: cri.Image) -> None:
        if image.id.startswith("sha256:"):
            self._known.pop(image.id, None)
            self._known[image.id] = image
            while len(self._known) > MAX_KNOWN_IMAGES:
                del self._known[next(iter(self._known))]

    async def image_status(self, ref: str) -> cri.Image | None:
        """The image `ensure` just returned the reference of (its user, for runAsNonRoot): what that call read when
        `ref` is an image ID, which names the same content (and so the same config) for as long as it exists; the
        runtime's ImageStatus otherwise. Upstream asks the runtime again (getImageUser), a round trip per container
        start that the ID makes needless."""
        known = self._known.get(ref)
        return known if known is not None else await self.cri.images.status(ref)

    def pull_time(self, uid: str) -> float:
        """Seconds the pod spent pulling images, from its first pull's start to its last pull's end; forgotten once
        read (the pod start SLI is observed once)."""
        first, last = self.pulling.pop(uid, (0.0, 0.0))
        return last - first

    def take_pull_steps(self, uid: str) -> list[StepTime]:
        """The pulls tried for the pod since the last call, timed (monotonic), each failed one with ErrImagePull."""
        return self.pull_steps.pop(uid, [])

    def forget(self, uid: str) -> None:
        self.pulling.pop(uid, None)
        self.pull_steps.pop(uid, None)

    async def ensure(self, pod: spec.Pod, container: spec.ContainerSpec, sandbox: cri.PodSandboxConfig,
                     init: bool = False) -> str:
        """Return the image reference to create the container from, or raise ImageError; the events name the
        container (upstream startContainer's GenerateContainerRef)."""
        return await self.ensure_image(pod, container.image, container.image_pull_policy, sandbox,
                                       container=container.name, init=init)

    async def ensure_image(self, pod: spec.Pod, image: str, policy: str, sandbox: cri.PodSandboxConfig, *,
                           container: str | None = None, init: bool = False) -> str:
        """Upstream EnsureImageExists for `image` under pull `policy`: the image reference the runtime knows it
        by, or ImageError. The events are on the pod, or on `container` when one is named; an image volume's
        name none (upstream getImageVolumes passes the pod's own reference). The backoff is per pod and image,
        shared by a container and a volume of the same image, as upstream keys it."""

        def event(type_: str, reason: str, message: str) -> None:
            self.recorder.pod_event(pod, type_, reason, message, container, init)

        # Upstream applyDefaultImageTag: the runtime gets ``<image>:latest`` when no tag or digest is given; a
        # reference that does not parse fails here (ErrInvalidImageName), before any runtime call.
        try:
            spec_image = imageref.apply_default_tag(image)
        except imageref.InvalidImageNameError as exc:
            event(WARNING, FAILED_TO_INSPECT_IMAGE, exc.message)
            raise ImageError(INVALID_IMAGE_NAME, exc.message) from None

        present = await self.cri.images.status(spec_image)
        if present is not None and policy != spec.PULL_ALWAYS:
            event(NORMAL, "Pulled", f"Container image {gotext.go_quote(image)} already present on machine")
            self._remember(present)
            return present.id or spec_image
        if policy == spec.PULL_NEVER:
            message = f"Container image {gotext.go_quote(image)} is not present with pull policy of Never"
            event(WARNING, ERR_IMAGE_NEVER_PULL, message)
            raise ImageError(ERR_IMAGE_NEVER_PULL, message)

        key = backoffs.image_pull_key(pod.uid, image)
        now = time.time()
        if self.backoff.is_in_backoff_since_update(key, now):
            message = f"Back-off pulling image {gotext.go_quote(image)}"
            event(NORMAL, "BackOff", message)
            raise ImageError(IMAGE_PULL_BACKOFF, message)

        event(NORMAL, "Pulling", f"Pulling image {gotext.go_quote(image)}")
        auths = (await self.keyring(pod)).lookup(spec_image)
        waited_from, step_from = time.time(), time.monotonic()
        async with self._pull_lock:
            started = time.time()
            try:
                ref = await self._pull(spec_image, sandbox, auths)
            except CriError as exc:
                self.pull_steps.setdefault(pod.uid, []).append(
                    StepTime(IMAGE_PULL, image, step_from, time.monotonic(), ERR_IMAGE_PULL))
                self.backoff.next(key, time.time())
                message = f"failed to pull and unpack image \"{image}\": {exc.details}" \
                    if "failed to pull" not in exc.details else exc.details
                event(WARNING, "Failed", f"Failed to pull image {gotext.go_quote(image)}: {message}")
                raise ImageError(ERR_IMAGE_PULL, message) from exc
            done = time.time()
        self.pull_steps.setdefault(pod.uid, []).append(StepTime(IMAGE_PULL, image, step_from, time.monotonic()))
        first, _ = self.pulling.get(pod.uid, (waited_from, done))
        self.pulling[pod.uid] = (first, done)
        self.backoff.reset(key)
        pulled = await self.cri.images.status(ref or spec_image)
        if pulled is not None:
            self._remember(pulled)
        # image_manager.go pullImage: both times Truncate(time.Millisecond), the size 0 when not known.
        size = pulled.size if pulled is not None else 0
        pulling = gotext.go_duration(max(done - started, 0.0), truncate=0.001)
        waiting = gotext.go_duration(max(done - waited_from, 0.0), truncate=0.001)
        event(NORMAL, "Pulled", f"Successfully pulled image {gotext.go_quote(image)} in {pulling} "
                                f"({waiting} including waiting). Image size: {size} bytes.")
        if self.metrics is not None:  # upstream: the "including waiting" time, truncated to the millisecond
            waited_ms = round(max(done - waited_from, 0.0) * 1e9) // 1_000_000
            self.metrics.image_pull_duration.labels(image_size_bucket(size)).observe(waited_ms / 1000)
        return (pulled.id if pulled is not None and pulled.id else ref) or spec_image


    async def _pull(self, image: str, sandbox: cri.PodSandboxConfig, auths: list[cri.AuthConfig]) -> str:
        """Anonymously without credentials, else with each matching credential in turn until one works
        (upstream kuberuntime PullImage); the last error stands for all."""
        if not auths:
            return await self.cri.images.pull(image, sandbox_config=sandbox)
        error: CriError | None = None
        for auth in auths:
            try:
                return await self.cri.images.pull(image, sandbox_config=sandbox, auth=auth)
            except CriError as exc:
                error = exc
        assert error is not None
        raise error

    async def keyring(self, pod: spec.Pod) -> credentials.Keyring:
        """The pod's imagePullSecrets as a keyring (upstream getPullSecretsForPod + MakeDockerKeyring); the
        ones that cannot be read get one FailedToRetrieveImagePullSecret event and are left out."""
        names = credentials.pull_secret_names(pod.spec.raw)
        if not names or self.objects is None:
            return credentials.Keyring()
        secrets, failed = [], []
        for name in names:
            try:
                obj = await self.objects.secret(pod, name)
            except (*API_ERRORS, NotRegisteredError) as exc:  # upstream: any GetSecret error
                logger.info(f"{pod.namespace}/{pod.name}: cannot read pull secret {name}: {exc}")
                obj = None
            if obj is None:
                failed.append(name)
                continue
            try:
                data = secret_bytes(obj)
            except (binascii.Error, TypeError, ValueError):
                failed.append(name)
                continue
            secrets.append(credentials.PullSecret(name=name, type=str(obj.get("type") or ""), data=data))
        if failed:
            self.recorder.pod_event(pod, WARNING, "FailedToRetrieveImagePullSecret",
                                    f"Unable to retrieve some image pull secrets ({', '.join(failed)}); attempting "
                                    "to pull the image may not succeed.")
        keyring, warnings = credentials.make_keyring(secrets)
        for warning in warnings:
            logger.warning(f"{pod.namespace}/{pod.name}: {warning}")
        return keyring
