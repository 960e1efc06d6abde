"""Image garbage collection against the runtime (upstream realImageGCManager and Kubelet.StartGarbageCollection).

The I/O half of `kopflet.images.gc`: list images and containers over CRI, size the image filesystem with statvfs,
remove images, and record the Warning events on the Node. Every CRI call carries the client's request deadline
(`CriClient.timeout`, the kubelet's runtime request timeout); statvfs runs in a thread under the same bound.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections.abc import Callable
from typing import Protocol

from cri_client import CriClient, CriError
from kopflet.api.events import WARNING
from kopflet.images import gc

logger = logging.getLogger(__name__)

STATFS_TIMEOUT = 120.0
"""statvfs of a hung filesystem never returns; the loop must not hang with it (the runtime request timeout)."""


class NodeEventRecorder(Protocol):
    """What the manager needs of `kopflet.client.events.EventRecorder`."""

    def node_event(self, type_: str, reason: str, message: str, uid: str = "") -> None: ...


def filesystem_size(path: str) -> tuple[int, int]:
    """Capacity and available bytes of the filesystem at `path` (cAdvisor GetDirFsInfo: blocks and blocks available
    to unprivileged users); blocking, OSError when it cannot be read."""
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def _error_text(exc: BaseException) -> str:
    """The error as upstream words it in events: a CRI failure as grpc-go's status error."""
    return exc.go_text if isinstance(exc, CriError) else str(exc)


class ImageGCManager:
    """Keeps the image filesystem between the policy's thresholds and drops images unused for too long.

    Records (first detected, last used) live in memory only, as upstream: after a restart every image is new again,
    so nothing is removed for space before `minimum_gc_age` has passed since the start.
    """

    def __init__(self, cri: CriClient, policy: gc.ImageGCPolicy, recorder: NodeEventRecorder | None, *,
                 node_uid: Callable[[], str] = lambda: "", sandbox_image: str = "",
                 period: float = gc.IMAGE_GC_PERIOD, image_cri: CriClient | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 statfs: Callable[[str], tuple[int, int]] = filesystem_size,
                 collected: Callable[[str], None] = lambda reason: None) -> None:
        """`cri` lists containers; `image_cri` (default: `cri`) lists, sizes and removes images (an
        --image-service-endpoint of its own). `node_uid` gives the Node's UID for the events' reference once
        registered. `sandbox_image` is treated as pinned whatever the runtime says. `collected` counts each image
        removed by its reason, "age" or "space" (kubelet_image_garbage_collected_total). InvalidPolicyError as
        NewImageGCManager."""
        self.collected = collected
        policy.validate()
        self.cri, self.image_cri = cri, image_cri if image_cri is not None else cri
        self.policy, self.recorder, self.node_uid = policy, recorder, node_uid
        self.pinned_refs = gc.pinned_references(sandbox_image)
        self._asked_runtime = False
        self.period, self.clock, self.statfs = period, clock, statfs
        self.records: dict[str, gc.ImageRecord] = {}
        self._lock = asyncio.Lock()  # upstream imageRecordsLock: one collection at a time

    # ------------------------------------------------------------------------------------------------- loop

    async def run(self) -> None:
        """Collect now and every `period` after the previous run ends (StartGarbageCollection's
        wait.UntilWithContext), until cancelled. A failure is logged; only a repeated one becomes an ImageGCFailed
        event (the first may just be stats not being ready yet). Nothing runs when the policy disables image GC."""
        if self.policy.disabled:
            logger.info("ImageGCHighThresholdPercent is set 100 and ImageMaximumGCAge is 0, Disable image GC")
            return
        began = self.clock()
        failed_before = False
        while True:
            try:
                await self.garbage_collect(began)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # no failure may end the loop (upstream: wait.Until goes on)
                message = _error_text(exc)
                if failed_before:
                    logger.error(f"Image garbage collection failed multiple times in a row: {message}")
                    self._event(gc.IMAGE_GC_FAILED, message)
                else:
                    logger.warning(f"Image garbage collection failed once. Stats initialization may not have "
                                   f"completed yet: {message}")
                failed_before = True
            else:
                if failed_before:
                    logger.info("Image garbage collection succeeded")
                failed_before = False
            await asyncio.sleep(self.period)

    # ------------------------------------------------------------------------------------------- collecting

    async def detect(self, now: float | None = None) -> frozenset[str]:
        """Update the records from the runtime's images and containers; return the image IDs in use
        (upstream detectImages): the containers' images and the images they mount as image volumes, which only
        each container's status tells (upstream handleImageVolumes asks it of every container). CriError when a
        listing fails, ImageGCError with upstream's text when a container's status cannot be read; the records
        are then unchanged."""
        now = self.clock() if now is None else now
        if not self._asked_runtime:
            await self._add_runtime_sandbox_image()
        images = await self.image_cri.images.list()
        containers = await self.cri.containers.list()  # all states: an exited container still holds its image
        statuses = []
        for container in containers:
            try:
                statuses.append(await self.cri.containers.status(container.id))
            except CriError as exc:
                raise gc.ImageGCError(f"get container status: runtime container status: {exc.go_text}") from exc
        in_use = gc.in_use_image_ids(containers) | gc.image_volume_ids(statuses, images)
        self.records = gc.detect(self.records, images, in_use, now, self.pinned_refs)
        return in_use

    async def _add_runtime_sandbox_image(self) -> None:
        """The runtime's own sandbox image (containerd's CRI config, in verbose Status) counts as pinned too: a
        runtime that does not pin it (containerd before 1.7) would otherwise see its pause image collected while
        no sandbox runs, and every new pod wait for it to be pulled again. Asked once; a runtime that does not say
        leaves only its pins."""
        try:
            info = (await self.cri.status(verbose=True)).info
        except CriError as exc:
            logger.debug(f"image GC: the runtime's sandbox image is unknown for now: {exc}")
            return
        self._asked_runtime = True
        image = gc.sandbox_image_from_runtime_info(info)
        if image:
            self.pinned_refs = self.pinned_refs | gc.pinned_references(image)

    async def garbage_collect(self, began: float | None = None) -> None:
        """One collection (upstream GarbageCollect): remove images unused for longer than the maximum age, then, if
        the image filesystem is at or over the high threshold, least recently used images until it is down to the
        low threshold. `began` is when collecting started (the maximum age waits that long); default now.
        ImageGCError or CriError when it failed, after recording the event upstream records for it."""
        async with self._lock:
            free_time = self.clock()
            began = free_time if began is None else began
            in_use = await self.detect(free_time)
            order = gc.eviction_order(self.records, in_use)
            order = await self._free_old_images(order, free_time, began)
            capacity, available = await self._image_fs_size()
            if available > capacity:
                logger.info(f"Availability is larger than capacity: available={available} capacity={capacity}")
            try:
                usage = gc.disk_usage(self.policy, capacity, available)
            except gc.ImageGCError as exc:
                self._event(exc.event_reason, exc.message)
                raise
            if not usage.over_high_threshold:
                return
            logger.info(f"Disk usage on image filesystem is over the high threshold, trying to free bytes down to the "
                        f"low threshold: usage={usage.usage_percent} highThreshold="
                        f"{self.policy.high_threshold_percent} amountToFree={usage.bytes_to_free} "
                        f"lowThreshold={self.policy.low_threshold_percent}")
            freed = await self._free_space(usage.bytes_to_free, free_time, order)
            if freed < usage.bytes_to_free:
                # Usually the disk is full of something else than images (logs, volumes), or of images in use.
                message = gc.free_disk_space_failed_message(usage, freed)
                self._event(gc.FREE_DISK_SPACE_FAILED, message)
                raise gc.ImageGCError(message, gc.FREE_DISK_SPACE_FAILED)

    async def delete_unused_images(self) -> None:
        """Remove every image not in use, pinned or too young (upstream DeleteUnusedImages, for the eviction
        manager). ImageGCError or CriError when a listing or a removal failed."""
        async with self._lock:
            free_time = self.clock()
            in_use = await self.detect(free_time)
            await self._free_space(math.inf, free_time, gc.eviction_order(self.records, in_use))

    # -------------------------------------------------------------------------------------------- helpers

    async def _image_fs_size(self) -> tuple[int, int]:
        """Capacity and available bytes of the image filesystem (criStatsProvider.ImageFsStats: the first one the
        runtime reports, sized by its mountpoint). (0, 0) without a mountpoint, as upstream leaves both unset."""
        info = await self.image_cri.images.fs_info()
        if not info.image_filesystems:
            raise gc.ImageGCError(gc.IMAGE_FS_UNAVAILABLE)
        mountpoint = info.image_filesystems[0].mountpoint
        if not mountpoint:
            return 0, 0
        try:
            async with asyncio.timeout(STATFS_TIMEOUT):
                return await asyncio.to_thread(self.statfs, mountpoint)
        except (OSError, TimeoutError) as exc:
            cause = str(exc) or f"statvfs {mountpoint} timed out"
            raise gc.ImageGCError(
                f"get filesystem info: Failed to get the info of the filesystem with mountpoint: {cause}") from exc

    async def _free_old_images(self, order: list[gc.Candidate], free_time: float,
                               began: float) -> list[gc.Candidate]:
        """Remove the images unused for longer than the maximum age (upstream freeOldImages); return the
        candidates left. ImageGCError when a removal failed (the others are still tried)."""
        old = gc.too_old(order, free_time, began, self.policy.maximum_gc_age)
        failures: list[str] = []
        removed: set[str] = set()
        for candidate in old:
            try:
                await self._remove(candidate, "age")
            except CriError as exc:
                failures.append(exc.go_text)
                continue
            removed.add(candidate.id)
        if failures:
            raise gc.ImageGCError(gc.free_old_images_error(self.policy.maximum_gc_age, failures))
        return [c for c in order if c.id not in removed]

    async def _free_space(self, bytes_to_free: float, free_time: float, order: list[gc.Candidate]) -> int:
        """Remove eligible images in eviction order until `bytes_to_free` are freed (upstream freeSpace, i.e.
        `gc.select_to_free` where a failed removal frees nothing and the next image is tried); return the bytes
        freed. ImageGCError when a removal failed."""
        freed = 0
        failures: list[str] = []
        for candidate in gc.eligible_for_space(order, free_time, self.policy.minimum_gc_age):
            try:
                await self._remove(candidate, "space")
            except CriError as exc:
                failures.append(exc.go_text)
                continue
            freed += candidate.size
            if freed >= bytes_to_free:
                break
        if failures:
            wanted = bytes_to_free if math.isfinite(bytes_to_free) else 2**63 - 1  # DeleteUnusedImages' MaxInt64
            raise gc.ImageGCError(gc.free_space_error(int(wanted), freed, failures))
        return freed

    async def _remove(self, candidate: gc.Candidate, reason: str) -> None:
        """Remove one image by ID and forget it (upstream freeImage); CriError when the runtime refuses."""
        logger.info(f"Removing image to free bytes: imageID={candidate.id} size={candidate.size} reason={reason}")
        try:
            await self.image_cri.images.remove(candidate.id)
        except CriError as exc:
            logger.error(f"Failed to remove image {candidate.id}: {exc}")
            raise
        self.records.pop(candidate.id, None)
        self.collected(reason)

    def _event(self, reason: str, message: str) -> None:
        """A Warning event on this Node, best effort."""
        if self.recorder is not None and reason:
            self.recorder.node_event(WARNING, reason, message, self.node_uid())
