"""kopflet.images.gc (pure) and kopflet.images.gc_manager (against a fake runtime): upstream image_gc_manager_test.go's
cases, table-driven where they are decisions."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from typing import Any

import pytest

from cri_client import CriError
from cri_client import types as cri
from kopflet.client.events import NODE_EVENT_NAMESPACE, EventRecorder
from kopflet.images import gc
from kopflet.images.gc import Candidate, ImageGCPolicy, ImageRecord
from kopflet.images.gc_manager import ImageGCManager

GiB = 1024**3


def image(n: int, size: int = 1024, pinned: bool = False, tags: tuple[str, ...] = ()) -> cri.Image:
    return cri.Image(id=f"image-{n}", size=size, pinned=pinned, repo_tags=tags)


def container(n: int, state: cri.ContainerState = cri.ContainerState.RUNNING, *,
              ref_only: bool = False) -> cri.Container:
    if ref_only:  # a runtime older than CRI v1.30 sets image_ref only
        return cri.Container(id=f"c-{n}", image=f"image-{n}-name", image_ref=f"image-{n}", state=state)
    return cri.Container(id=f"c-{n}", image=f"image-{n}-name", image_ref="ref", image_id=f"image-{n}", state=state)


def rec(first: float, last: float | None = None, size: int = 1024, pinned: bool = False) -> ImageRecord:
    return ImageRecord(first_detected=first, last_used=last, size=size, pinned=pinned)


# ------------------------------------------------------------------------------------------------- policy


@pytest.mark.parametrize(("policy", "error"), [
    pytest.param(ImageGCPolicy(), None, id="defaults"),
    pytest.param(ImageGCPolicy(high_threshold_percent=2, low_threshold_percent=1), None, id="low below high"),
    pytest.param(ImageGCPolicy(high_threshold_percent=80, low_threshold_percent=80), None, id="low equal to high"),
    pytest.param(ImageGCPolicy(high_threshold_percent=-1, low_threshold_percent=0),
                 "invalid HighThresholdPercent -1, must be in range [0-100]", id="high below 0"),
    pytest.param(ImageGCPolicy(high_threshold_percent=101),
                 "invalid HighThresholdPercent 101, must be in range [0-100]", id="high above 100"),
    pytest.param(ImageGCPolicy(low_threshold_percent=-1),
                 "invalid LowThresholdPercent -1, must be in range [0-100]", id="low below 0"),
    pytest.param(ImageGCPolicy(high_threshold_percent=100, low_threshold_percent=101),
                 "invalid LowThresholdPercent 101, must be in range [0-100]", id="low above 100"),
    pytest.param(ImageGCPolicy(high_threshold_percent=1, low_threshold_percent=2),
                 "LowThresholdPercent 2 can not be higher than HighThresholdPercent 1", id="low above high"),
])
def test_policy_validation_as_new_image_gc_manager(policy: ImageGCPolicy, error: str | None) -> None:
    if error is None:
        policy.validate()
    else:
        with pytest.raises(gc.InvalidPolicyError) as exc:
            policy.validate()
        assert str(exc.value) == error


def test_policy_defaults_are_the_kubelet_configuration_defaults() -> None:
    assert ImageGCPolicy() == ImageGCPolicy(high_threshold_percent=85, low_threshold_percent=80,
                                            minimum_gc_age=120.0, maximum_gc_age=0.0)
    assert gc.IMAGE_GC_PERIOD == 300.0


@pytest.mark.parametrize(("policy", "disabled"), [
    (ImageGCPolicy(), False),
    (ImageGCPolicy(high_threshold_percent=100, low_threshold_percent=80), True),
    (ImageGCPolicy(high_threshold_percent=100, low_threshold_percent=80, maximum_gc_age=3600), False),
])
def test_gc_is_disabled_only_at_100_percent_without_a_maximum_age(policy: ImageGCPolicy, disabled: bool) -> None:
    assert policy.disabled is disabled


@pytest.mark.parametrize(("args", "errors"), [
    pytest.param((85, 80, 120.0, 0.0), [], id="defaults"),
    pytest.param((101, -1, 120.0, 0.0), [
        "invalid configuration: imageGCHighThresholdPercent (--image-gc-high-threshold) 101 must be between 0 and "
        "100, inclusive",
        "invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) -1 must be between 0 and 100, "
        "inclusive"], id="out of range"),
    pytest.param((80, 80, 120.0, 0.0), [
        "invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 80 must be less than "
        "imageGCHighThresholdPercent (--image-gc-high-threshold) 80"], id="low not below high"),
    pytest.param((85, 80, -1.0, -2.0), [
        "invalid configuration: imageMinimumGCAge -1s must not be negative",
        "invalid configuration: imageMaximumGCAge -2s must not be negative"], id="negative ages"),
    pytest.param((85, 80, 120.0, 60.0), [
        "invalid configuration: imageMaximumGCAge 1m0s must be greater than imageMinimumGCAge 2m0s"],
        id="maximum not above minimum"),
])
def test_configuration_errors_as_validate_kubelet_configuration(args: tuple[int, int, float, float],
                                                                errors: list[str]) -> None:
    assert gc.configuration_errors(*args) == errors


# ------------------------------------------------------------------------------------------- detection


def test_in_use_image_ids_are_image_id_else_image_ref_of_every_container() -> None:
    containers = [container(1), container(2, cri.ContainerState.EXITED), container(3, ref_only=True),
                  cri.Container(id="c-none")]
    assert gc.in_use_image_ids(containers) == {"image-1", "image-2", "image-3"}


def image_mount(image_id: str) -> cri.Mount:
    return cri.Mount(container_path="/volume", host_path="/run/containerd/image-volumes/x", readonly=True,
                     image=cri.ImageSpec(image=image_id, user_specified_image=f"{image_id}-name"))


@pytest.mark.parametrize(("mounts", "expected"), [
    pytest.param([], set(), id="no mounts"),
    pytest.param([cri.Mount(container_path="/d", host_path="/d")], set(), id="bind mounts only"),
    pytest.param([image_mount("image-1")], {"image-1"}, id="an image volume"),
    pytest.param([image_mount("image-1"), image_mount("image-2")], {"image-1", "image-2"}, id="two"),
    pytest.param([image_mount("image-9")], set(), id="an image the runtime no longer lists"),
    pytest.param([image_mount("image-1-name")], set(), id="matched by ID, not by name"),
])
def test_image_volume_ids(mounts: list[cri.Mount], expected: set[str]) -> None:
    """Upstream handleImageVolumes: a mount's ImageSpec.Image equal to a listed image's ID keeps it in use."""
    statuses = [cri.ContainerStatus(id="c-1", mounts=tuple(mounts)), cri.ContainerStatus(id="c-2")]
    assert gc.image_volume_ids(statuses, [image(1), image(2)]) == expected


@pytest.mark.parametrize(("sandbox", "listed", "pinned"), [
    pytest.param("", image(0), False, id="no sandbox image configured"),
    pytest.param("", image(0, pinned=True), True, id="the runtime's pin"),
    pytest.param("registry.k8s.io/pause:3.10", image(0, tags=("registry.k8s.io/pause:3.10",)), True,
                 id="the sandbox image by tag"),
    pytest.param("pause", image(0, tags=("docker.io/library/pause:latest",)), True,
                 id="a short sandbox name, qualified with the default tag"),
    pytest.param("image-0", image(0), True, id="the sandbox image by ID"),
    pytest.param("registry.k8s.io/pause:3.10", image(0, tags=("registry.k8s.io/pause:3.9",)), False,
                 id="another tag is not pinned"),
    pytest.param("Not A Reference", image(0, tags=("registry.k8s.io/pause:3.10",)), False,
                 id="an unparsable name matches only itself"),
])
def test_pinned(sandbox: str, listed: cri.Image, pinned: bool) -> None:
    assert gc.is_pinned(listed, gc.pinned_references(sandbox)) is pinned


def test_detect_initial() -> None:
    records = gc.detect({}, [image(0, 1024), image(1, 2048)], frozenset({"image-1"}), 10.0)
    assert records == {"image-0": rec(10.0, None, 1024), "image-1": rec(10.0, 10.0, 2048)}


def test_detect_new_image_keeps_the_old_records_first_detected() -> None:
    records = gc.detect({}, [image(0), image(1, 2048)], frozenset({"image-1"}), 0.0)
    records = gc.detect(records, [image(0), image(1, 2048), image(2, 1024)], frozenset({"image-1"}), 5.0)
    assert records == {"image-0": rec(0.0), "image-1": rec(0.0, 5.0, 2048), "image-2": rec(5.0)}


def test_detect_a_stopped_container_keeps_its_images_last_used() -> None:
    records = gc.detect({}, [image(0), image(1, 2048)], frozenset({"image-1"}), 0.0)
    records = gc.detect(records, [image(0), image(1, 2048)], frozenset(), 7.0)
    assert records == {"image-0": rec(0.0), "image-1": rec(0.0, 0.0, 2048)}


def test_detect_forgets_removed_images_and_follows_size_and_pin() -> None:
    records = gc.detect({}, [image(0), image(1)], frozenset(), 0.0)
    assert gc.detect(records, [], frozenset(), 1.0) == {}
    records = gc.detect(records, [image(1, 4096, pinned=True)], frozenset(), 1.0)
    assert records == {"image-1": rec(0.0, None, 4096, pinned=True)}


def test_detect_marks_the_sandbox_image_pinned() -> None:
    refs = gc.pinned_references("registry.k8s.io/pause:3.10")
    records = gc.detect({}, [image(0, tags=("registry.k8s.io/pause:3.10",)), image(1)], frozenset(), 0.0, refs)
    assert records["image-0"].pinned and not records["image-1"].pinned


# ------------------------------------------------------------------------------------------- selection


def ids(candidates: list[Candidate]) -> list[str]:
    return [c.id for c in candidates]


@pytest.mark.parametrize(("records", "in_use", "expected"), [
    pytest.param({"a": rec(0, 5), "b": rec(0, 3), "c": rec(0, 4)}, set(), ["b", "c", "a"],
                 id="least recently used first"),
    pytest.param({"a": rec(2, 5), "b": rec(1, 5), "c": rec(3, 5)}, set(), ["b", "a", "c"],
                 id="ties broken by first detected"),
    pytest.param({"a": rec(0, 1), "b": rec(5, None), "c": rec(1, None)}, set(), ["c", "b", "a"],
                 id="never used is oldest"),
    pytest.param({"a": rec(0), "b": rec(0, pinned=True), "c": rec(0)}, {"c"}, ["a"],
                 id="in use and pinned are not candidates"),
])
def test_eviction_order(records: dict[str, ImageRecord], in_use: set[str], expected: list[str]) -> None:
    assert ids(gc.eviction_order(records, in_use)) == expected


def order_of(*images: cri.Image, in_use: frozenset[str] = frozenset(), at: float = 0.0) -> list[Candidate]:
    return gc.eviction_order(gc.detect({}, images, in_use, at), in_use)


@pytest.mark.parametrize(("order", "to_free", "free_time", "min_age", "expected"), [
    pytest.param(order_of(image(1, pinned=True), image(2)), 4096, 10.0, 0, ["image-2"],
                 id="a pinned image is not deleted"),
    pytest.param(order_of(image(1), image(2)), 2048, 10.0, 0, ["image-1", "image-2"], id="unpinned ones are"),
    pytest.param(order_of(image(1, pinned=True), image(2, pinned=True)), 2048, 10.0, 0, [],
                 id="all pinned: nothing"),
    pytest.param(order_of(image(0), image(1, 2048), in_use=frozenset({"image-1"})), 2048, 10.0, 0, ["image-0"],
                 id="images of containers are ignored"),
    pytest.param(order_of(image(0), image(1), image(2)), 1024, 10.0, 0, ["image-0"],
                 id="stops once enough is freed"),
    pytest.param(order_of(image(0), image(1)), 0, 10.0, 0, ["image-0"],
                 id="one goes even when nothing is to be freed (checked after a removal)"),
    pytest.param(order_of(image(0), image(1)), 1024, 59.0, 60.0, [], id="younger than the minimum age: kept"),
    pytest.param(order_of(image(0), image(1)), 1024, 60.0, 60.0, ["image-0"], id="at the minimum age: eligible"),
    pytest.param([Candidate("x", rec(0, 10.0))], 1024, 10.0, 0, [], id="used at the free time: kept"),
])
def test_select_to_free(order: list[Candidate], to_free: int, free_time: float, min_age: float,
                        expected: list[str]) -> None:
    assert ids(gc.select_to_free(order, to_free, free_time, min_age)) == expected


def test_free_space_by_least_recently_used() -> None:
    # upstream TestFreeSpaceRemoveByLeastRecentlyUsed: 1 used more recently than 0, so 0 goes.
    images = [image(0), image(1, 2048)]
    records = gc.detect({}, images, frozenset({"image-0", "image-1"}), 0.0)
    records = gc.detect(records, images, frozenset({"image-1"}), 1.0)
    records = gc.detect(records, images, frozenset(), 2.0)
    assert ids(gc.select_to_free(gc.eviction_order(records, frozenset()), 1024, 62.0, 0)) == ["image-0"]


def test_free_space_after_a_new_image() -> None:
    # upstream TestFreeSpaceTiesBrokenByDetectedTime: image 1, detected later and never used, goes first.
    records = gc.detect({}, [image(0)], frozenset({"image-0"}), 0.0)
    records = gc.detect(records, [image(0), image(1, 2048)], frozenset({"image-0"}), 1.0)
    records = gc.detect(records, [image(0), image(1, 2048)], frozenset(), 2.0)
    assert ids(gc.select_to_free(gc.eviction_order(records, frozenset()), 1024, 3.0, 0)) == ["image-1"]


@pytest.mark.parametrize(("free_time", "began", "max_age", "expected"), [
    pytest.param(1000.0, 0.0, 0.0, [], id="maximum age off"),
    pytest.param(1000.0, 950.0, 60.0, [], id="the kubelet has not run that long"),
    pytest.param(1000.0, 940.0, 60.0, [], id="exactly that long is not longer"),
    pytest.param(1000.0, 0.0, 60.0, ["never", "old"], id="unused longer than the maximum age"),
    pytest.param(1000.0, 0.0, 100.0, ["never"], id="never used is the oldest"),
])
def test_too_old(free_time: float, began: float, max_age: float, expected: list[str]) -> None:
    order = gc.eviction_order({"never": rec(0), "old": rec(0, 930.0), "recent": rec(0, 990.0)}, frozenset())
    assert ids(gc.too_old(order, free_time, began, max_age)) == expected


def test_too_old_as_upstream_image_too_old() -> None:
    # TestGarbageCollectImageTooOld: just used, kept; a step past the maximum age, gone.
    order = [Candidate("image-0", rec(0.0, 0.0))]
    assert gc.too_old(order, 0.0, 0.0, 60.0) == []
    assert ids(gc.too_old(order, 60.001, 0.0, 60.0)) == ["image-0"]


# ------------------------------------------------------------------------------------------------- disk


@pytest.mark.parametrize(("capacity", "available", "over", "usage", "to_free"), [
    pytest.param(1000, 600, False, 40, 0, id="40%: below the low threshold"),
    pytest.param(1000, 150, False, 85, 0, id="85%: between the thresholds"),
    pytest.param(1000, 100, True, 90, 100, id="90%: at the high threshold, down to 80%"),
    pytest.param(1000, 50, True, 95, 150, id="95%"),
    pytest.param(1000, 2000, False, 0, 0, id="available over capacity is clamped"),
    pytest.param(1000, 0, True, 100, 200, id="full"),
    pytest.param(1000, 105, True, 90, 95, id="integer percent, as upstream"),
])
def test_disk_usage(capacity: int, available: int, over: bool, usage: int, to_free: int) -> None:
    policy = ImageGCPolicy(high_threshold_percent=90, low_threshold_percent=80)
    result = gc.disk_usage(policy, capacity, available)
    assert (result.over_high_threshold, result.usage_percent, result.bytes_to_free) == (over, usage, to_free)
    assert result.available == min(available, capacity)


def test_disk_usage_can_ask_for_a_negative_amount_as_upstream() -> None:
    # 20.5% available truncates to 20: usage 80 >= high 80, and 80% of 1000 minus 205 is -5.
    result = gc.disk_usage(ImageGCPolicy(high_threshold_percent=80, low_threshold_percent=80), 1000, 205)
    assert result.over_high_threshold and result.bytes_to_free == -5


def test_zero_capacity_is_invalid_disk_capacity() -> None:
    with pytest.raises(gc.ImageGCError) as exc:
        gc.disk_usage(ImageGCPolicy(), 0, 0)
    assert (str(exc.value), exc.value.event_reason) == ("invalid capacity 0 on image filesystem", "InvalidDiskCapacity")


@pytest.mark.parametrize(("size", "text"), [
    (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (5 * 1024**2, "5.0 MiB"),
    (10 * GiB, "10.0 GiB"), (3 * 1024**4, "3.0 TiB"),
])
def test_format_size(size: int, text: str) -> None:
    assert gc.format_size(size) == text


def test_free_disk_space_failed_message_word_for_word() -> None:
    # TestGarbageCollectNotEnoughFreed: 95% of 10 GiB used, one 500 MiB image freed.
    capacity = 10 * GiB
    usage = gc.disk_usage(ImageGCPolicy(high_threshold_percent=90, low_threshold_percent=80), capacity,
                          capacity // 20)
    assert gc.free_disk_space_failed_message(usage, 500 * 1024 * 1024) == (
        "Insufficient free disk space on the node's image filesystem (95% of 10.0 GiB used). Failed to free "
        "sufficient space by deleting unused images (freed 524288000 bytes). Investigate disk usage, as it could be "
        "used by active images, logs, volumes, or other data.")


@pytest.mark.parametrize(("messages", "text"), [
    (["a"], "a"), (["a", "a"], "a"), (["a", "b", "a"], "[a, b]"),
])
def test_aggregate(messages: list[str], text: str) -> None:
    assert gc.aggregate(messages) == text


def test_deletion_error_messages() -> None:
    assert gc.free_old_images_error(3600.0, ["x"]) == \
        "wanted to free images older than 1h0m0s, encountered errors in image deletion: x"
    assert gc.free_space_error(100, 40, ["x", "y"]) == \
        "wanted to free 100 bytes, but freed 40 bytes space with errors in image deletion: [x, y]"


# ------------------------------------------------------------------------------------------------ manager


class FakeImages:
    def __init__(self, images: list[cri.Image], mountpoint: str = "/var/lib/containerd") -> None:
        self.images, self.mountpoint = images, mountpoint
        self.removed: list[str] = []
        self.refuse: set[str] = set()
        self.list_error: CriError | None = None

    async def list(self) -> list[cri.Image]:
        if self.list_error is not None:
            raise self.list_error
        return list(self.images)

    async def remove(self, image_id: str) -> None:
        if image_id in self.refuse:
            raise CriError("UNKNOWN", f"cannot remove {image_id}")
        self.removed.append(image_id)
        self.images = [i for i in self.images if i.id != image_id]

    async def fs_info(self) -> cri.ImageFsInfo:
        return cri.ImageFsInfo(image_filesystems=(cri.FilesystemUsage(mountpoint=self.mountpoint),))


class FakeContainers:
    def __init__(self, containers: list[cri.Container]) -> None:
        self.containers = containers
        self.calls = 0
        self.mounts: dict[str, tuple[cri.Mount, ...]] = {}  # container id -> the mounts its status reports
        self.status_error: CriError | None = None

    async def list(self) -> list[cri.Container]:
        self.calls += 1
        return list(self.containers)

    async def status(self, container_id: str) -> cri.ContainerStatus:
        if self.status_error is not None:
            raise self.status_error
        return cri.ContainerStatus(id=container_id, mounts=self.mounts.get(container_id, ()))


@dataclasses.dataclass
class FakeCri:
    images: FakeImages
    containers: FakeContainers
    info: dict[str, str] = dataclasses.field(default_factory=dict)

    async def status(self, verbose: bool = False) -> cri.RuntimeStatus:
        return cri.RuntimeStatus(info=self.info if verbose else {})


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []
        self.collected: list[str] = []  # the reasons of the images removed

    def node_event(self, type_: str, reason: str, message: str, uid: str = "") -> None:
        self.events.append((type_, reason, message, uid))


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def manager(images: list[cri.Image], containers: list[cri.Container] = (), *, fs: tuple[int, int] = (1000, 600),
            policy: ImageGCPolicy | None = None, sandbox_image: str = "", clock: Clock | None = None,
            statfs: Any = None) -> tuple[ImageGCManager, FakeCri, Recorder, Clock]:
    fake = FakeCri(FakeImages(images), FakeContainers(list(containers)))
    recorder, clock = Recorder(), clock or Clock()
    policy = policy or ImageGCPolicy(high_threshold_percent=90, low_threshold_percent=80, minimum_gc_age=0)
    m = ImageGCManager(fake, policy, recorder, node_uid=lambda: "node-uid",  # type: ignore[arg-type]
                       sandbox_image=sandbox_image, period=0.0, clock=clock, statfs=statfs or (lambda path: fs),
                       collected=recorder.collected.append)
    return m, fake, recorder, clock


def test_manager_refuses_an_invalid_policy() -> None:
    with pytest.raises(gc.InvalidPolicyError):
        manager([], policy=ImageGCPolicy(high_threshold_percent=1, low_threshold_percent=2))


async def test_below_the_threshold_nothing_is_removed() -> None:
    m, fake, recorder, _ = manager([image(0, 450)], fs=(1000, 600))
    await m.garbage_collect()
    assert fake.images.removed == [] and recorder.events == []
    assert set(m.records) == {"image-0"}


async def test_over_the_threshold_unused_images_go_least_recently_used_first() -> None:
    images = [image(0, 100), image(1, 100), image(2, 100), image(3, 100, pinned=True),
              image(4, 100, tags=("registry.k8s.io/pause:3.10",))]
    m, fake, recorder, clock = manager(images, [container(2, cri.ContainerState.EXITED)], fs=(1000, 100),
                                       sandbox_image="registry.k8s.io/pause:3.10")
    fake.containers.containers.append(container(1))
    await m.detect()  # image 1 used now, then not any more; image 0 never: it goes first
    fake.containers.containers.pop()
    clock.now += 10
    fake.images.refuse = {"image-0"}
    with pytest.raises(gc.ImageGCError):  # 90% used, 100 bytes to free: image 0 fails, image 1 is enough
        await m.garbage_collect()
    assert fake.images.removed == ["image-1"]
    fake.images.refuse = set()
    await m.garbage_collect()
    assert fake.images.removed == ["image-1", "image-0"]
    assert recorder.collected == ["space", "space"]  # kubelet_image_garbage_collected_total{reason="space"}
    # image 2 is held by an exited container, image 3 pinned by the runtime, image 4 is the sandbox image
    assert {i.id for i in fake.images.images} == {"image-2", "image-3", "image-4"}
    assert set(m.records) == {"image-2", "image-3", "image-4"}
    assert recorder.events == []


async def test_a_failed_removal_is_reported_and_the_next_image_tried() -> None:
    m, fake, recorder, _ = manager([image(0, 100), image(1, 200)], fs=(1000, 50))
    fake.images.refuse = {"image-0"}
    with pytest.raises(gc.ImageGCError) as exc:
        await m.garbage_collect()
    assert str(exc.value) == ("wanted to free 150 bytes, but freed 200 bytes space with errors in image deletion: "
                              "rpc error: code = Unknown desc = cannot remove image-0")
    assert fake.images.removed == ["image-1"] and recorder.events == []


async def test_young_images_stay_until_the_minimum_age() -> None:
    policy = ImageGCPolicy(high_threshold_percent=90, low_threshold_percent=80, minimum_gc_age=60)
    m, fake, recorder, clock = manager([image(0, 1024), image(1, 2048)], [container(1)], fs=(10000, 100),
                                       policy=policy)
    with pytest.raises(gc.ImageGCError):
        await m.garbage_collect()
    assert fake.images.removed == []
    assert recorder.events[-1][1] == "FreeDiskSpaceFailed"
    clock.now += 60
    with pytest.raises(gc.ImageGCError):  # still 1024 short of 1900
        await m.garbage_collect()
    assert fake.images.removed == ["image-0"]


async def test_not_enough_freed_is_a_free_disk_space_failed_event() -> None:
    capacity = 10 * GiB
    m, _, recorder, _ = manager([image(0, 500 * 1024 * 1024)], fs=(capacity, capacity // 20))
    with pytest.raises(gc.ImageGCError) as exc:
        await m.garbage_collect()
    message = ("Insufficient free disk space on the node's image filesystem (95% of 10.0 GiB used). Failed to free "
               "sufficient space by deleting unused images (freed 524288000 bytes). Investigate disk usage, as it "
               "could be used by active images, logs, volumes, or other data.")
    assert str(exc.value) == message
    assert recorder.events == [("Warning", "FreeDiskSpaceFailed", message, "node-uid")]


async def test_enough_freed_is_success() -> None:
    m, fake, recorder, _ = manager([image(0, 450)], fs=(1000, 50))
    await m.garbage_collect()
    assert fake.images.removed == ["image-0"] and recorder.events == []


async def test_no_mountpoint_is_invalid_disk_capacity() -> None:
    m, fake, recorder, _ = manager([image(0)])
    fake.images.mountpoint = ""
    with pytest.raises(gc.ImageGCError, match="invalid capacity 0 on image filesystem"):
        await m.garbage_collect()
    assert recorder.events == [("Warning", "InvalidDiskCapacity", "invalid capacity 0 on image filesystem",
                                "node-uid")]


async def test_an_unreadable_image_filesystem_is_an_error() -> None:
    def statfs(path: str) -> tuple[int, int]:
        raise FileNotFoundError(2, "No such file or directory", path)

    m, _, recorder, _ = manager([image(0)], statfs=statfs)
    with pytest.raises(gc.ImageGCError, match=r"^get filesystem info: Failed to get the info of the filesystem with "
                                              r"mountpoint: .*No such file or directory"):
        await m.garbage_collect()
    assert recorder.events == []


async def test_maximum_age_removes_long_unused_images_whatever_the_disk() -> None:
    policy = ImageGCPolicy(high_threshold_percent=90, low_threshold_percent=80, minimum_gc_age=0,
                           maximum_gc_age=60)
    m, fake, recorder, clock = manager([image(0), image(1)], [container(1)], fs=(1000, 900), policy=policy)
    began = clock.now
    await m.garbage_collect(began)
    clock.now += 30
    await m.garbage_collect(began)  # image 1 last used now
    assert fake.images.removed == []
    fake.containers.containers = []
    clock.now += 31
    await m.garbage_collect(began)
    assert fake.images.removed == ["image-0"]  # never used; image 1 was used 31 s ago
    assert recorder.collected == ["age"]
    clock.now += 30
    fake.images.refuse = {"image-1"}
    with pytest.raises(gc.ImageGCError, match=r"^wanted to free images older than 1m0s, encountered errors"):
        await m.garbage_collect(began)


async def test_delete_unused_images_spares_in_use_and_pinned() -> None:
    m, fake, _, _ = manager([image(0), image(1), image(2), image(3, pinned=True)], [container(2)])
    await m.delete_unused_images()
    assert sorted(fake.images.removed) == ["image-0", "image-1"]


async def wait_for(condition: Any) -> None:
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("condition never met")


async def test_run_reports_only_repeated_failures_and_goes_on() -> None:
    m, fake, recorder, _ = manager([image(0)])
    fake.images.list_error = CriError("UNAVAILABLE", "connection refused")
    task = asyncio.create_task(m.run())
    await wait_for(lambda: len(recorder.events) >= 2)
    fake.images.list_error = None
    calls = fake.containers.calls
    await wait_for(lambda: fake.containers.calls > calls + 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert recorder.events[:2] == [("Warning", "ImageGCFailed", "rpc error: code = Unavailable desc = connection "
                                    "refused", "node-uid")] * 2
    assert "image-0" in m.records


async def test_run_does_nothing_when_disabled() -> None:
    m, fake, _, _ = manager([image(0)], policy=ImageGCPolicy(high_threshold_percent=100, low_threshold_percent=80))
    await asyncio.wait_for(m.run(), 1)
    assert fake.containers.calls == 0


# ----------------------------------------------------------------------------------------------- events


class FakeApi:
    def __init__(self) -> None:
        self.created: list[tuple[str, dict[str, Any]]] = []

    async def create_event(self, namespace: str, event: dict[str, Any]) -> dict[str, Any]:
        self.created.append((namespace, event))
        return event


async def test_node_events_go_to_the_default_namespace_about_the_node() -> None:
    api = FakeApi()
    recorder = EventRecorder(api, "node-1")  # type: ignore[arg-type]
    recorder.node_event("Warning", "ImageGCFailed", "boom", "uid-1")
    recorder.node_event("Warning", "FreeDiskSpaceFailed", "full")
    await recorder.flush()
    assert [(ns, e["involvedObject"], e["reason"], e["message"]) for ns, e in api.created] == [
        (NODE_EVENT_NAMESPACE, {"kind": "Node", "apiVersion": "v1", "name": "node-1", "uid": "uid-1"},
         "ImageGCFailed", "boom"),
        ("default", {"kind": "Node", "apiVersion": "v1", "name": "node-1"}, "FreeDiskSpaceFailed", "full"),
    ]


@pytest.mark.parametrize(("info", "expected"), [
    ({"config": '{"sandboxImage": "registry.k8s.io/pause:3.10.1", "enableSelinux": false}'},
     "registry.k8s.io/pause:3.10.1"),
    ({"config": "not json"}, ""),
    ({}, ""),
])
def test_the_runtimes_sandbox_image_from_its_verbose_status(info: dict[str, str], expected: str) -> None:
    assert gc.sandbox_image_from_runtime_info(info) == expected


async def test_the_runtimes_sandbox_image_is_kept_even_unpinned() -> None:
    pause = image(1, size=100, tags=("registry.k8s.io/pause:3.10.1",))
    other = image(2, size=100, tags=("docker.io/library/nginx:1.27",))
    m, fake, _, _ = manager([pause, other], policy=ImageGCPolicy(high_threshold_percent=1, low_threshold_percent=0,
                                                                   minimum_gc_age=0), fs=(1000, 0))
    fake.info = {"config": '{"sandboxImage": "registry.k8s.io/pause:3.10.1"}'}
    with contextlib.suppress(gc.ImageGCError):
        await m.garbage_collect()
    assert fake.images.removed == ["image-2"]


async def test_an_image_mounted_as_a_volume_is_in_use() -> None:
    """Upstream handleImageVolumes: the image a container mounts as an image volume is never collected while the
    container exists, running or exited, like the container's own image."""
    exited = container(2, cri.ContainerState.EXITED)
    m, fake, _, clock = manager([image(0), image(1), image(2), image(3)], [container(1), exited])
    fake.containers.mounts = {"c-1": (image_mount("image-0"),), "c-2": (image_mount("image-3"),)}
    assert await m.detect() == {"image-0", "image-1", "image-2", "image-3"}
    clock.now += 1
    await m.delete_unused_images()
    assert fake.images.removed == []
    fake.containers.mounts = {}
    clock.now += 1
    await m.delete_unused_images()
    assert sorted(fake.images.removed) == ["image-0", "image-3"]


async def test_a_container_status_that_cannot_be_read_fails_the_detection() -> None:
    """Upstream detectImages returns handleImageVolumes' error: the round fails (ImageGCFailed when repeated), the
    records stay as they were."""
    m, fake, _, _ = manager([image(0)], [container(1)])
    await m.detect()
    before = dict(m.records)
    fake.containers.status_error = CriError("NOT_FOUND", 'an error occurred when try to find container "c-1"')
    with pytest.raises(gc.ImageGCError) as caught:
        await m.garbage_collect()
    assert str(caught.value) == ('get container status: runtime container status: rpc error: code = NotFound desc = '
                                 'an error occurred when try to find container "c-1"')
    assert m.records == before
