"""Which images can go when the image filesystem fills up, or when they sat unused too long (upstream image GC,
pkg/kubelet/images/image_gc_manager.go).

Why pure: the kubelet's decisions (what counts as in use, the eviction order, how much to free, which images are
too young or too old) are table-tested here without a runtime; `kopflet.images.gc_manager` does the CRI calls,
statvfs and the events around them.

Times are seconds on one monotonic clock (upstream compares Go times, whose monotonic reading makes ``Sub``
immune to wall-clock jumps); `None` as ``last_used`` is upstream's zero time: never seen in use.

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping, Set

from cri_client import types as cri
from kopflet import gotext
from kopflet.images import imageref

DEFAULT_HIGH_THRESHOLD_PERCENT = 85  # KubeletConfiguration imageGCHighThresholdPercent default
DEFAULT_LOW_THRESHOLD_PERCENT = 80  # imageGCLowThresholdPercent
DEFAULT_MINIMUM_GC_AGE = 120.0  # imageMinimumGCAge: 2m
DEFAULT_MAXIMUM_GC_AGE = 0.0  # imageMaximumGCAge: 0 = off
IMAGE_GC_PERIOD = 300.0  # kubelet.go ImageGCPeriod (5m); the detect loop of Start runs every 5m too

# pkg/kubelet/events/event.go: the reasons of the Warning events image GC records on the Node.
INVALID_DISK_CAPACITY = "InvalidDiskCapacity"
FREE_DISK_SPACE_FAILED = "FreeDiskSpaceFailed"
IMAGE_GC_FAILED = "ImageGCFailed"

INVALID_CAPACITY_MESSAGE = "invalid capacity 0 on image filesystem"  # GarbageCollect's error, word for word
IMAGE_FS_UNAVAILABLE = "imageFs information is unavailable"  # criStatsProvider.ImageFsStats: no image filesystem


class InvalidPolicyError(ValueError):
    """The policy NewImageGCManager refuses; the text is upstream's."""


class ImageGCError(Exception):
    """One garbage collection failed; ``str()`` is upstream's error text (the ImageGCFailed event's message).

    `event_reason` is set when upstream records a Warning event of its own for this failure, with the same text
    (InvalidDiskCapacity, FreeDiskSpaceFailed)."""

    def __init__(self, message: str, event_reason: str = "") -> None:
        super().__init__(message)
        self.message, self.event_reason = message, event_reason

    def __str__(self) -> str:
        return self.message


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImageGCPolicy:
    """The band GC keeps the image filesystem in (upstream ImageGCPolicy), ages in seconds."""

    high_threshold_percent: int = DEFAULT_HIGH_THRESHOLD_PERCENT
    """Usage at or above this always triggers GC."""
    low_threshold_percent: int = DEFAULT_LOW_THRESHOLD_PERCENT
    """GC frees down to this usage."""
    minimum_gc_age: float = DEFAULT_MINIMUM_GC_AGE
    """An image detected more recently is never removed for space (it may have just been pulled for a container)."""
    maximum_gc_age: float = DEFAULT_MAXIMUM_GC_AGE
    """An image unused for longer is removed whatever the disk usage; 0 turns this off."""

    def validate(self) -> None:
        """Raise InvalidPolicyError as NewImageGCManager does (the first problem, in upstream's order)."""
        if not 0 <= self.high_threshold_percent <= 100:
            raise InvalidPolicyError(
                f"invalid HighThresholdPercent {self.high_threshold_percent}, must be in range [0-100]")
        if not 0 <= self.low_threshold_percent <= 100:
            raise InvalidPolicyError(
                f"invalid LowThresholdPercent {self.low_threshold_percent}, must be in range [0-100]")
        if self.low_threshold_percent > self.high_threshold_percent:
            raise InvalidPolicyError(
                f"LowThresholdPercent {self.low_threshold_percent} can not be higher than "
                f"HighThresholdPercent {self.high_threshold_percent}")

    @property
    def disabled(self) -> bool:
        """StartGarbageCollection stubs image GC out when the high threshold is 100 and there is no maximum age."""
        return self.high_threshold_percent == 100 and self.maximum_gc_age == 0


def configuration_errors(high_threshold_percent: int, low_threshold_percent: int, minimum_gc_age: float,
                         maximum_gc_age: float) -> list[str]:
    """The KubeletConfiguration checks of these four fields (upstream validation.go ValidateKubeletConfiguration),
    word for word, for the settings loader; stricter than `ImageGCPolicy.validate` (low must be below high)."""
    errors = []
    if not 0 <= high_threshold_percent <= 100:
        errors.append(f"invalid configuration: imageGCHighThresholdPercent (--image-gc-high-threshold) "
                      f"{high_threshold_percent} must be between 0 and 100, inclusive")
    if not 0 <= low_threshold_percent <= 100:
        errors.append(f"invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) "
                      f"{low_threshold_percent} must be between 0 and 100, inclusive")
    if low_threshold_percent >= high_threshold_percent:
        errors.append(f"invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) "
                      f"{low_threshold_percent} must be less than imageGCHighThresholdPercent "
                      f"(--image-gc-high-threshold) {high_threshold_percent}")
    if minimum_gc_age < 0:
        errors.append(f"invalid configuration: imageMinimumGCAge {gotext.go_duration(minimum_gc_age)} "
                      "must not be negative")
    if maximum_gc_age < 0:
        errors.append(f"invalid configuration: imageMaximumGCAge {gotext.go_duration(maximum_gc_age)} "
                      "must not be negative")
    if 0 < maximum_gc_age <= minimum_gc_age:
        errors.append(f"invalid configuration: imageMaximumGCAge {gotext.go_duration(maximum_gc_age)} "
                      f"must be greater than imageMinimumGCAge {gotext.go_duration(minimum_gc_age)}")
    return errors


# ------------------------------------------------------------------------------------------------ records


@dataclasses.dataclass(frozen=True)
class ImageRecord:
    """What GC remembers of one image (upstream imageRecord), keyed by image ID."""

    first_detected: float
    last_used: float | None = None
    """When a container was last seen using it; None: never (upstream's zero time, oldest of all)."""
    size: int = 0
    pinned: bool = False


def in_use_image_ids(containers: Iterable[cri.Container]) -> frozenset[str]:
    """Image IDs of every container the runtime lists, exited ones too (upstream GetPods(all=true)).

    The ID is toKubeContainer's: ``image_id``, or ``image_ref`` from runtimes older than CRI v1.30; it is what
    ListImages reports as an image's ``id`` (containerd: ``sha256:...``)."""
    return frozenset(c.image_id or c.image_ref for c in containers if c.image_id or c.image_ref)


def image_volume_ids(statuses: Iterable[cri.ContainerStatus], images: Iterable[cri.Image]) -> frozenset[str]:
    """Image IDs the containers mount as image volumes (upstream handleImageVolumes, ImageVolume on): a mount's
    image spec names the image ref the kubelet pulled, which is the image's ``id`` in the runtime's list; a mount
    naming an image the runtime no longer lists adds nothing."""
    ids = {image.id for image in images}
    return frozenset(mount.image.image for status in statuses for mount in status.mounts
                     if mount.image is not None and mount.image.image in ids)


def sandbox_image_from_runtime_info(info: Mapping[str, str]) -> str:
    """containerd's ``sandboxImage`` from CRI Status(verbose)'s ``config`` (a JSON document); "" when absent."""
    try:
        config = json.loads(info.get("config") or "{}")
    except ValueError:
        return ""
    image = config.get("sandboxImage") if isinstance(config, dict) else None
    return image if isinstance(image, str) else ""


def pinned_references(sandbox_image: str) -> frozenset[str]:
    """The names under which the configured sandbox (pause) image can appear in ListImages: as given and fully
    qualified with the default tag (containerd lists ``registry.k8s.io/pause:3.10``), so it is treated as pinned
    even by a runtime that does not pin it (upstream relies on the runtime's ``pinned`` alone)."""
    if not sandbox_image:
        return frozenset()
    names = {sandbox_image}
    try:
        ref = imageref.parse_normalized_named(sandbox_image)
    except imageref.InvalidReferenceError:
        return frozenset(names)
    if not ref.tag and not ref.digest:
        ref = dataclasses.replace(ref, tag=imageref.DEFAULT_TAG)
    names.add(str(ref))
    if ref.tag and ref.digest:  # the runtime lists tags and digests apart
        names.update((f"{ref.name}:{ref.tag}", f"{ref.name}@{ref.digest}"))
    return frozenset(names)


def is_pinned(image: cri.Image, pinned_refs: Set[str] = frozenset()) -> bool:
    """Pinned by the runtime (containerd pins its sandbox image), or the configured sandbox image."""
    return image.pinned or image.id in pinned_refs or any(
        name in pinned_refs for name in (*image.repo_tags, *image.repo_digests))


def detect(records: Mapping[str, ImageRecord], images: Iterable[cri.Image], in_use: Set[str], now: float,
           pinned_refs: Set[str] = frozenset()) -> dict[str, ImageRecord]:
    """The records after one listing (upstream detectImages): new images first detected `now`, images in use last
    used `now`, size and pinned as listed, images no longer listed forgotten."""
    updated: dict[str, ImageRecord] = {}
    for image in images:
        old = records.get(image.id) or updated.get(image.id) or ImageRecord(first_detected=now)
        updated[image.id] = ImageRecord(
            first_detected=old.first_detected,
            last_used=now if image.id in in_use else old.last_used,
            size=image.size,
            pinned=is_pinned(image, pinned_refs),
        )
    return updated


# --------------------------------------------------------------------------------------------- selection


@dataclasses.dataclass(frozen=True)
class Candidate:
    """An image that may be removed (upstream evictionInfo): not in use, not pinned."""

    id: str
    record: ImageRecord

    @property
    def size(self) -> int:
        return self.record.size


def eviction_order(records: Mapping[str, ImageRecord], in_use: Set[str]) -> list[Candidate]:
    """Images GC may remove, least recently used first, ties broken by first detected (upstream
    imagesInEvictionOrder with byLastUsedAndDetected); images in use and pinned images are left out.
    The ID is the last key only to make the order deterministic (Go's sort is not stable)."""
    candidates = [Candidate(image_id, record) for image_id, record in records.items()
                  if image_id not in in_use and not record.pinned]
    return sorted(candidates, key=lambda c: (-math.inf if c.record.last_used is None else c.record.last_used,
                                             c.record.first_detected, c.id))


def eligible_for_space(order: Iterable[Candidate], free_time: float, minimum_gc_age: float) -> list[Candidate]:
    """The candidates freeSpace may remove, in order: not used at or after `free_time`, and detected at least
    `minimum_gc_age` ago (a younger image may have just been pulled for a container about to start)."""
    return [c for c in order
            if (c.record.last_used is None or c.record.last_used < free_time)
            and free_time - c.record.first_detected >= minimum_gc_age]


def select_to_free(order: Iterable[Candidate], bytes_to_free: int, free_time: float,
                   minimum_gc_age: float) -> list[Candidate]:
    """The images freeSpace removes to free `bytes_to_free` when every removal succeeds: eligible ones in eviction
    order, stopping once enough is freed. As upstream, the check comes after a removal, so at least one eligible
    image goes even when `bytes_to_free` is not positive."""
    selected, freed = [], 0
    for candidate in eligible_for_space(order, free_time, minimum_gc_age):
        selected.append(candidate)
        freed += candidate.size
        if freed >= bytes_to_free:
            break
    return selected


def too_old(order: Iterable[Candidate], free_time: float, began: float, maximum_gc_age: float) -> list[Candidate]:
    """The images freeOldImages removes: unused for longer than `maximum_gc_age`. None while the maximum age is off,
    or before the kubelet itself (`began`) has run that long, lest images be collected prematurely."""
    if maximum_gc_age == 0 or free_time - began <= maximum_gc_age:
        return []
    return [c for c in order if c.record.last_used is None or free_time - c.record.last_used > maximum_gc_age]


# ------------------------------------------------------------------------------------------------ disk


@dataclasses.dataclass(frozen=True)
class DiskUsage:
    """GarbageCollect's view of the image filesystem."""

    capacity: int
    available: int
    """Clamped to `capacity` as upstream does ("Availability is larger than capacity")."""
    usage_percent: int
    over_high_threshold: bool
    """GC must free space now."""
    bytes_to_free: int
    """What brings usage down to the low threshold; only meaningful when `over_high_threshold` (and, upstream's
    integer arithmetic, may then be slightly negative)."""


def disk_usage(policy: ImageGCPolicy, capacity: int, available: int) -> DiskUsage:
    """Whether GC must free space and how much (upstream GarbageCollect): ``usage = 100 - available*100/capacity``;
    at or over the high threshold, free ``capacity*(100-low)/100 - available``. ImageGCError (InvalidDiskCapacity)
    for a zero capacity."""
    available = min(available, capacity)
    if capacity <= 0:
        raise ImageGCError(INVALID_CAPACITY_MESSAGE, INVALID_DISK_CAPACITY)
    usage = 100 - available * 100 // capacity
    over = usage >= policy.high_threshold_percent
    to_free = capacity * (100 - policy.low_threshold_percent) // 100 - available if over else 0
    return DiskUsage(capacity=capacity, available=available, usage_percent=usage, over_high_threshold=over,
                     bytes_to_free=to_free)


def format_size(size_bytes: int) -> str:
    """A human-readable size (upstream formatSize): ``512 B``, ``1.5 KiB``, ``10.0 GiB``."""
    units = (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024))
    for unit, scale in units:
        if size_bytes >= scale:
            return f"{size_bytes / scale:.1f} {unit}"
    return f"{size_bytes} B"


def free_disk_space_failed_message(usage: DiskUsage, freed: int) -> str:
    """The FreeDiskSpaceFailed event's message and GarbageCollect's error when too little could be freed."""
    return (f"Insufficient free disk space on the node's image filesystem ({usage.usage_percent}% of "
            f"{format_size(usage.capacity)} used). Failed to free sufficient space by deleting unused images "
            f"(freed {freed} bytes). Investigate disk usage, as it could be used by active images, logs, volumes, "
            "or other data.")


def aggregate(messages: Iterable[str]) -> str:
    """apimachinery's errors.NewAggregate(...).Error(): one message alone, several deduplicated in ``[a, b]``."""
    unique = list(dict.fromkeys(messages))
    if len(unique) == 1:
        return unique[0]
    return "[" + ", ".join(unique) + "]"


def free_old_images_error(maximum_gc_age: float, messages: Iterable[str]) -> str:
    """freeOldImages' error when a removal failed."""
    return (f"wanted to free images older than {gotext.go_duration(maximum_gc_age)}, encountered errors in image "
            f"deletion: {aggregate(messages)}")


def free_space_error(bytes_to_free: int, freed: int, messages: Iterable[str]) -> str:
    """freeSpace's error when a removal failed."""
    return (f"wanted to free {bytes_to_free} bytes, but freed {freed} bytes space with errors in image deletion: "
            f"{aggregate(messages)}")
