"""
Image calls against the real containerd, pulling from the local registry that mirrors docker.io.
"""

from __future__ import annotations

import pytest

from cri_client import CriClient, CriError

BUSYBOX = "docker.io/library/busybox:1.36"
MISSING_IMAGE = "docker.io/library/does-not-exist:0"


async def test_pull_returns_the_image_ref(cri: CriClient, busybox: str) -> None:
    assert busybox.startswith("sha256:")
    assert await cri.images.pull(BUSYBOX) == busybox  # pulling again is a no-op with the same ref


async def test_status_of_a_pulled_image(cri: CriClient, busybox: str) -> None:
    image = await cri.images.status(BUSYBOX)
    assert image is not None
    assert image.id == busybox
    assert BUSYBOX in image.repo_tags
    assert any(d.startswith("docker.io/library/busybox@sha256:") for d in image.repo_digests)
    assert image.size > 0
    assert image.uid == 0 or image.username in ("", "root")  # busybox has no USER


async def test_status_by_id(cri: CriClient, busybox: str) -> None:
    image = await cri.images.status(busybox)
    assert image is not None and image.id == busybox


async def test_status_of_an_absent_image_is_none(cri: CriClient) -> None:
    assert await cri.images.status(MISSING_IMAGE) is None


async def test_list_includes_the_pulled_image(cri: CriClient, busybox: str) -> None:
    assert busybox in {image.id for image in await cri.images.list()}
    listed = next(image for image in await cri.images.list() if image.id == busybox)
    assert listed == await cri.images.status(BUSYBOX)


async def test_pull_of_a_missing_image_names_it(cri: CriClient) -> None:
    with pytest.raises(CriError) as info:
        await cri.images.pull(MISSING_IMAGE)
    assert info.value.code in ("NOT_FOUND", "UNKNOWN"), info.value
    assert "does-not-exist" in info.value.details
    assert info.value.method == "ImageService/PullImage"


async def test_remove_of_an_absent_image_is_idempotent(cri: CriClient) -> None:
    await cri.images.remove(MISSING_IMAGE)


async def test_fs_info_reports_the_image_filesystem(cri: CriClient, busybox: str) -> None:
    info = await cri.images.fs_info()
    assert info.image_filesystems
    usage = info.image_filesystems[0]
    assert usage.mountpoint
    assert usage.timestamp > 0
