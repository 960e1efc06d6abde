"""Image garbage collection on the real image filesystem: with the thresholds set so that this node's disk is
"too full" and no minimum age, the agent's first collection (upstream runs one as it starts) removes the unused
images, keeps the one a container uses and the pinned pause image, and reports that it could not free enough
(the disk holds far more than images) with upstream's FreeDiskSpaceFailed event on the Node.

Every other test pulls its images again on demand (none uses imagePullPolicy Never), so removing unused images
here costs the next tests a pull from the local registry, nothing more."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cri_client import CriClient
from devstack.layout import Layout
from kopflet.images import gc
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_eviction import failed, wait_condition
from tests.e2e.test_pod_lifecycle import BUSYBOX, container, is_ready, pod_manifest, wait_pod

UNUSED = "registry.k8s.io/e2e-test-images/kitten:1.8"


def image_present(layout: Layout, image: str) -> bool:
    async def status() -> bool:
        async with CriClient(layout.runtime_endpoint) as client:
            return await client.images.status(image) is not None
    return asyncio.run(status())


def pull(layout: Layout, image: str) -> None:
    async def pulling() -> None:
        async with CriClient(layout.runtime_endpoint) as client:
            await client.images.pull(image)
    asyncio.run(pulling())


def kept_images(layout: Layout) -> list[str]:
    """The runtime's pinned images and its sandbox image (containerd 1.6 does not pin it; the agent keeps it)."""
    async def listing() -> list[str]:
        async with CriClient(layout.runtime_endpoint) as client:
            sandbox = gc.sandbox_image_from_runtime_info((await client.status(verbose=True)).info)
            return [i.id for i in await client.images.list() if i.pinned] + ([sandbox] if sandbox else [])
    return asyncio.run(listing())


def start_agent(layout: Layout, log: Path, args: str = "") -> Agent:
    agent = Agent(layout, log, env={"KOPFLET_ARGS": args} if args else None)
    agent.start()
    agent.wait_for(r"Activity 'start_agent' succeeded")
    return agent


@pytest.fixture
def user_pod(layout: Layout, admin: Kubectl, namespace: str, tmp_path: Path) -> Iterator[str]:
    """A running pod (its image in use), started by a plain agent that is stopped again: pods keep running."""
    agent = start_agent(layout, tmp_path / "before.log")
    try:
        admin.apply(pod_manifest("user", namespace, layout.node_name, [container("main", "sleep 3600")]))
        wait_pod(admin, namespace, "user", is_ready, what="Ready")
    finally:
        agent.stop()
    yield namespace


def test_the_first_collection_frees_unused_images_and_keeps_used_and_pinned(
        user_pod: str, layout: Layout, admin: Kubectl, tmp_path: Path) -> None:
    pull(layout, UNUSED)
    assert image_present(layout, UNUSED) and image_present(layout, BUSYBOX)
    pinned = kept_images(layout)
    assert pinned and all(image_present(layout, image) for image in pinned)
    started = time.time()
    agent = start_agent(layout, tmp_path / "gc.log",
                        "--image-gc-high-threshold=1 --image-gc-low-threshold=0 --minimum-image-ttl-duration=0s")
    try:
        deadline = time.monotonic() + 90
        while image_present(layout, UNUSED):
            assert time.monotonic() < deadline, "the unused image was never collected"
            time.sleep(1)
        assert image_present(layout, BUSYBOX), "an image in use by a running container was removed"
        assert all(image_present(layout, image) for image in pinned), "the pinned or sandbox image was removed"
        pod = admin.json("get", "pod", "user", "-n", user_pod)
        assert is_ready(pod) and pod["status"]["containerStatuses"][0]["restartCount"] == 0

        deadline = time.monotonic() + 60
        while True:
            items = admin.json("get", "events", "-n", "default", "--field-selector",
                               f"involvedObject.kind=Node,involvedObject.name={layout.node_name},"
                               "reason=FreeDiskSpaceFailed")["items"]
            mine = [e for e in items if (e.get("lastTimestamp") or e.get("eventTime") or "") >=
                    time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(started - 1))]
            if mine:
                break
            assert time.monotonic() < deadline, "no FreeDiskSpaceFailed event on the node"
            time.sleep(1)
        event = mine[-1]
        assert event["type"] == "Warning"
        assert event["message"].startswith("Insufficient free disk space on the node's image filesystem (")
        assert "Failed to free sufficient space by deleting unused images (freed " in event["message"]
    finally:
        agent.stop()


def node_events_since(admin: Kubectl, layout: Layout, reason: str, since: float) -> list[dict]:
    items = admin.json("get", "events", "-n", "default", "--field-selector",
                       f"involvedObject.kind=Node,involvedObject.name={layout.node_name},reason={reason}")["items"]
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(since - 1))
    return [e for e in items if (e.get("lastTimestamp") or e.get("eventTime") or "") >= stamp]


def test_the_maximum_age_removes_an_unused_image_and_repeated_failures_are_image_gc_failed(
        user_pod: str, layout: Layout, admin: Kubectl, tmp_path: Path) -> None:
    """imageMaximumGCAge (config file only, as upstream): an image unused that long goes at the next collection
    once the agent itself has run that long, counted as reason "age". The disk thresholds are set so that every
    collection fails to free enough: at start every image is new to the agent and imageMinimumGCAge keeps it from
    the disk-usage path, a failure that is FreeDiskSpaceFailed only; the second failure in a row is also
    ImageGCFailed (upstream StartGarbageCollection). Collections run at start and every 5 minutes (upstream
    ImageGCPeriod), so this test takes one period."""
    pull(layout, UNUSED)
    config = tmp_path / "config.yaml"
    config.write_text(layout.kubelet_config.read_text() +
                      "imageMaximumGCAge: 3m\nimageMinimumGCAge: 2m\n"
                      "imageGCHighThresholdPercent: 1\nimageGCLowThresholdPercent: 0\n")
    started = time.time()
    agent = start_agent(layout, tmp_path / "gc.log", f"--config={config}")
    try:
        deadline = time.monotonic() + 60
        while not node_events_since(admin, layout, "FreeDiskSpaceFailed", started):
            assert time.monotonic() < deadline, "no FreeDiskSpaceFailed event from the first collection"
            time.sleep(1)
        assert image_present(layout, UNUSED), "imageMinimumGCAge did not protect a newly seen image"
        assert not node_events_since(admin, layout, "ImageGCFailed", started)  # one failure is not an event

        deadline = time.monotonic() + gc.IMAGE_GC_PERIOD + 60
        while image_present(layout, UNUSED):
            assert time.monotonic() < deadline, "the image unused for longer than imageMaximumGCAge stayed"
            time.sleep(2)
        assert image_present(layout, BUSYBOX), "an image in use was removed"
        # Counted once the runtime's RemoveImage returns, which can be a moment after the image stops being listed.
        deadline = time.monotonic() + 30
        while not (aged := [line for line in admin.raw(f"/api/v1/nodes/{layout.node_name}/proxy/metrics")
                            .stdout.splitlines()
                            if line.startswith('kubelet_image_garbage_collected_total{reason="age"} ')]):
            assert time.monotonic() < deadline, "no image counted as collected for its age"
            time.sleep(1)
        assert float(aged[0].split()[-1]) >= 1, aged
        deadline = time.monotonic() + 30
        while not (failed := node_events_since(admin, layout, "ImageGCFailed", started)):
            assert time.monotonic() < deadline, "no ImageGCFailed event after two failed collections in a row"
            time.sleep(1)
        assert failed[0]["type"] == "Warning"
        assert failed[0]["message"].startswith("Insufficient free disk space on the node's image filesystem (")
    finally:
        agent.stop()


def test_imagefs_pressure_reclaims_unused_images_then_evicts(user_pod: str, layout: Layout, admin: Kubectl,
                                                              tmp_path: Path) -> None:
    """imagefs.available below its hard threshold: DiskPressure, node-level reclaim first (the unused images go,
    upstream's image GC DeleteUnusedImages, which spares images younger than imageMinimumGCAge: 0 here), then,
    still short, a pod is evicted for ephemeral-storage. The image filesystem shares the root dir's disk here, so
    the threshold is set above what that disk has free."""
    pull(layout, UNUSED)
    st = os.statvfs(layout.containerd_root)
    threshold = min(99, int(st.f_bavail * 100 / st.f_blocks) + 5)
    since = time.time()
    agent = start_agent(layout, tmp_path / "imagefs.log",
                        f"--eviction-hard=imagefs.available<{threshold}% --eviction-pressure-transition-period=10s "
                        "--minimum-image-ttl-duration=0s "
                        "--node-status-update-frequency=2s")
    try:
        wait_condition(admin, layout.node_name, "DiskPressure", "True")
        deadline = time.monotonic() + 60
        while image_present(layout, UNUSED):
            assert time.monotonic() < deadline, "the unused image was not reclaimed under imagefs pressure"
            time.sleep(1)
        pod = wait_pod(admin, user_pod, "user", failed, timeout=120, what="evicted")
        assert pod["status"]["reason"] == "Evicted"
        assert pod["status"]["message"].startswith(
            "The node was low on resource: ephemeral-storage. Threshold quantity: ")
        met = node_events_since(admin, layout, "EvictionThresholdMet", since)
        assert met and met[0]["message"] == "Attempting to reclaim ephemeral-storage", met
    finally:
        agent.stop()
