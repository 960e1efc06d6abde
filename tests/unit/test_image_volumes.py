"""Image volumes (upstream ImageVolume, GA at v1.37): the pure rules of kopflet.kuberuntime.image_volumes (what a
container gets of the pod's image volume pulls, the mount counters), and PodSyncer pulling them once per sync before
the first container starts, failing only the containers that mount a volume whose pull failed, and naming the pulled
image in the CRI mount (upstream kuberuntime_manager.go getImageVolumes, toKubeContainerImageVolumes,
incrementImageVolumeMetrics; kubelet_pods.go makeMounts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cri_client import CriError
from cri_client import types as cri
from kopflet.allocation.state import AllocationManager
from kopflet.api.spec import Pod, pod_from_body
from kopflet.backoff import Backoff
from kopflet.cm.cgroups import PodCgroups
from kopflet.config.settings import AgentConfig
from kopflet.container.podstate import RuntimePodStatus
from kopflet.container.sync_result import SyncResult, Waiting
from kopflet.images.manager import ImageError
from kopflet.kuberuntime import image_volumes, reconciler, sandbox_config
from kopflet.kuberuntime.executor import CREATE_CONTAINER_ERROR, PodSyncer
from kopflet.kuberuntime.image_volumes import ContainerImageVolumes, ImageVolumePull, MountCounts
from kopflet.metrics import KubeletMetrics
from kopflet.paths import Layout
from kopflet.volumes import plugins

KITTEN = "registry.k8s.io/e2e-test-images/kitten:1.8"
KITTEN_SPEC = cri.ImageSpec(image="sha256:kitten", user_specified_image=KITTEN, annotations={"a": "b"})
NAUTILUS_SPEC = cri.ImageSpec(image="sha256:nautilus", user_specified_image="nautilus:1.8")
PULL_FAILED = image_volumes.failed("ErrImagePull", 'failed to pull and unpack image "localhost/invalid:latest": x')
BACKING_OFF = image_volumes.failed("ImagePullBackOff", 'Back-off pulling image "localhost/invalid"')


def container(*mounts: str) -> Any:
    pod = pod_from_body({"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {"containers": [
        {"name": "app", "image": "busybox", "volumeMounts": [{"name": m, "mountPath": f"/{m}-{i}"}
                                                             for i, m in enumerate(mounts)]}]}})
    return pod.spec.containers[0]


# ------------------------------------------------------------------------------------------------ pure


def test_a_pulled_image_is_mounted_by_its_image_ref_with_the_pods_reference_and_annotations() -> None:
    """Upstream getImageVolumes: ImageSpec{Image: ref, UserSpecifiedImage: the volume's reference, RuntimeHandler
    (off: ""), Annotations: the pod's}."""
    assert image_volumes.pulled(KITTEN, "sha256:kitten", {"a": "b"}) == ImageVolumePull(image=KITTEN_SPEC)
    assert image_volumes.failed("ErrImagePull", "m") == ImageVolumePull(reason="ErrImagePull", message="m")


FOR_CONTAINER: list[tuple[str, tuple[str, ...], dict[str, ImageVolumePull], ContainerImageVolumes]] = [
    ("no image volumes", ("data",), {}, ContainerImageVolumes()),
    ("mounts a pulled one", ("data", "kitten"), {"kitten": ImageVolumePull(image=KITTEN_SPEC)},
     ContainerImageVolumes(images={"kitten": KITTEN_SPEC})),
    ("only the ones it mounts", ("kitten",), {"kitten": ImageVolumePull(image=KITTEN_SPEC),
                                              "nautilus": ImageVolumePull(image=NAUTILUS_SPEC)},
     ContainerImageVolumes(images={"kitten": KITTEN_SPEC})),
    # upstream "should succeed if image volume is not existing but unused"
    ("a failed one it does not mount", ("kitten",), {"kitten": ImageVolumePull(image=KITTEN_SPEC),
                                                     "invalid": PULL_FAILED},
     ContainerImageVolumes(images={"kitten": KITTEN_SPEC})),
    # upstream "should fail if image volume is not existing": the pull's error is the container's waiting reason
    ("a failed one it mounts", ("invalid",), {"invalid": PULL_FAILED},
     ContainerImageVolumes(events=("Error: ErrImagePull",), waiting=Waiting("ErrImagePull", PULL_FAILED.message))),
    ("one failed beside a pulled one: nothing mounted", ("kitten", "invalid"),
     {"kitten": ImageVolumePull(image=KITTEN_SPEC), "invalid": BACKING_OFF},
     ContainerImageVolumes(events=("Error: ImagePullBackOff",),
                           waiting=Waiting("ImagePullBackOff", BACKING_OFF.message))),
    ("an event per mount, the last failure waits", ("invalid", "other", "invalid"),
     {"invalid": PULL_FAILED, "other": BACKING_OFF},
     ContainerImageVolumes(events=("Error: ErrImagePull", "Error: ImagePullBackOff", "Error: ErrImagePull"),
                           waiting=Waiting("ErrImagePull", PULL_FAILED.message))),
]


@pytest.mark.parametrize(("mounts", "pulls", "expected"), [c[1:] for c in FOR_CONTAINER],
                         ids=[c[0] for c in FOR_CONTAINER])
def test_for_container(mounts: tuple[str, ...], pulls: dict[str, ImageVolumePull],
                       expected: ContainerImageVolumes) -> None:
    assert image_volumes.for_container(container(*mounts), pulls) == expected


MOUNT_COUNTS: list[tuple[str, tuple[str, ...], dict[str, cri.ImageSpec], str | None, MountCounts]] = [
    ("no image volumes", ("data",), {}, None, MountCounts()),
    ("started", ("data", "kitten"), {"kitten": KITTEN_SPEC}, None, MountCounts(requested=1, succeeded=1)),
    ("mounted twice: one request, two mounts", ("kitten", "kitten"), {"kitten": KITTEN_SPEC}, None,
     MountCounts(requested=1, succeeded=2)),
    ("two volumes", ("kitten", "nautilus"), {"kitten": KITTEN_SPEC, "nautilus": NAUTILUS_SPEC}, None,
     MountCounts(requested=2, succeeded=2)),
    ("the runtime could not mount it", ("kitten", "nautilus"), {"kitten": KITTEN_SPEC, "nautilus": NAUTILUS_SPEC},
     "ImageVolumeMountFailed: failed to resolve image", MountCounts(requested=2, errors=2)),
    ("CreateContainer failed otherwise: still mounted", ("kitten",), {"kitten": KITTEN_SPEC},
     "failed to create containerd task: oops", MountCounts(requested=1, succeeded=1)),
]


@pytest.mark.parametrize(("mounts", "images", "create_error", "expected"), [c[1:] for c in MOUNT_COUNTS],
                         ids=[c[0] for c in MOUNT_COUNTS])
def test_mount_counts(mounts: tuple[str, ...], images: dict[str, cri.ImageSpec], create_error: str | None,
                      expected: MountCounts) -> None:
    assert image_volumes.mount_counts(container(*mounts), images, create_error) == expected


# ------------------------------------------------------------------------------------------- PodSyncer


def make_pod(volumes: list[dict[str, Any]], containers: list[dict[str, Any]]) -> Pod:
    return pod_from_body({"metadata": {"name": "p", "namespace": "ns", "uid": "u", "annotations": {"a": "b"}},
                          "spec": {"volumes": volumes, "containers": containers}})


VOLUMES = [
    {"name": "kitten", "image": {"reference": KITTEN, "pullPolicy": "Always"}},
    {"name": "data", "emptyDir": {}},
    {"name": "invalid", "image": {"reference": "localhost/invalid"}},
]


def plans_of(pod: Pod) -> dict[str, plugins.VolumePlan]:
    return plugins.plan_volumes(pod, layout=Layout("/nonexistent"), config_maps={}, secrets={}, tokens={})


class FakeImages:
    """The image manager: records each ensure_image (the pod, the image, the policy, the container named) and
    fails the images in `failing`."""

    def __init__(self, failing: dict[str, Exception] | None = None) -> None:
        self.failing = failing or {}
        self.calls: list[tuple[str, str, str | None]] = []

    async def ensure_image(self, pod: Pod, image: str, policy: str, sandbox: Any, *, container: str | None = None,
                           init: bool = False) -> str:
        self.calls.append((image, policy, container))
        if image in self.failing:
            raise self.failing[image]
        return f"sha256:{image.rsplit('/', 1)[-1].split(':')[0]}"

    async def ensure(self, pod: Pod, c: Any, sandbox: Any, init: bool = False) -> str:
        return await self.ensure_image(pod, c.image, c.image_pull_policy, sandbox, container=c.name, init=init)

    async def image_status(self, ref: str) -> None:
        return None


class FakeContainers:
    def __init__(self, error: CriError | None = None) -> None:
        self.created: list[cri.ContainerConfig] = []
        self.error = error

    async def create(self, sandbox_id: str, config: cri.ContainerConfig, sandbox: Any) -> str:
        if self.error is not None:
            raise self.error
        self.created.append(config)
        return f"cid-{config.metadata.name}"

    async def start(self, container_id: str) -> None:
        pass


class FakeCriImages:
    async def status(self, ref: str) -> Any:
        return None


class FakeSandboxes:
    async def status(self, sandbox_id: str) -> cri.PodSandboxStatus:
        return cri.PodSandboxStatus(id=sandbox_id, ip="10.0.0.2")


class FakeCri:
    def __init__(self, error: CriError | None = None) -> None:
        self.containers, self.images, self.sandboxes = FakeContainers(error), FakeCriImages(), FakeSandboxes()


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str | None]] = []

    def pod_event(self, pod: Any, type_: str, reason: str, message: str, container: str | None = None,
                  init: bool = False) -> None:
        self.events.append((type_, reason, message, container))


SANDBOX_CONFIG = cri.PodSandboxConfig(metadata=cri.PodSandboxMetadata(name="p", uid="u", namespace="ns"))


def make_syncer(tmp_path: Path, images: FakeImages, error: CriError | None = None) -> tuple[PodSyncer, FakeCri,
                                                                                            Recorder]:
    syncer = PodSyncer.__new__(PodSyncer)
    fake, recorder = FakeCri(error), Recorder()
    layout = Layout(str(tmp_path / "root"), str(tmp_path / "pods"), str(tmp_path / "containers"))
    syncer.cfg, syncer.cri, syncer.images, syncer.recorder = AgentConfig(node_name="n"), fake, images, \
        recorder  # type: ignore[assignment]
    syncer.layout, syncer.allocations, syncer.metrics = layout, AllocationManager(layout), KubeletMetrics()
    syncer.node_memory_capacity, syncer.masked_paths, syncer.hugepage_sizes = 2**30, (), ()

    async def environment(*_: Any) -> list[tuple[str, str]]:
        return []

    syncer.environment = environment  # type: ignore[method-assign]
    return syncer, fake, recorder


async def test_every_image_volume_is_pulled_in_spec_order_with_its_policy_events_on_the_pod(tmp_path: Path) -> None:
    """Upstream getImageVolumes: each volume with an image, whether a container mounts it or not, through
    EnsureImageExists with the pod's reference (no container); a failure is kept for the volume."""
    images = FakeImages({"localhost/invalid": ImageError("ErrImagePull", "no such host")})
    syncer, _, _ = make_syncer(tmp_path, images)
    pod = make_pod(VOLUMES, [{"name": "app", "image": "busybox:1"}])
    pulls = await syncer.pull_image_volumes(pod, SANDBOX_CONFIG, plans_of(pod))
    assert images.calls == [(KITTEN, "Always", None), ("localhost/invalid", "Always", None)]
    assert pulls == {"kitten": ImageVolumePull(image=cri.ImageSpec(image="sha256:kitten", user_specified_image=KITTEN,
                                                                   annotations={"a": "b"})),
                     "invalid": ImageVolumePull(reason="ErrImagePull", message="no such host")}


async def test_a_runtime_failure_fails_the_volume_as_it_fails_a_containers_image(tmp_path: Path) -> None:
    images = FakeImages({KITTEN: CriError("UNAVAILABLE", "connection refused")})
    syncer, _, _ = make_syncer(tmp_path, images)
    pod = make_pod(VOLUMES[:1], [{"name": "app", "image": "busybox:1"}])
    assert await syncer.pull_image_volumes(pod, SANDBOX_CONFIG, plans_of(pod)) == {
        "kitten": ImageVolumePull(reason=CREATE_CONTAINER_ERROR, message="connection refused")}


async def start(syncer: PodSyncer, pod: Pod, pulls: dict[str, ImageVolumePull]) -> tuple[bool, SyncResult]:
    result = SyncResult()
    ok = await syncer.start_container(pod, pod.spec.containers[0], False, "sb", SANDBOX_CONFIG,
                                      cri.PodSandboxStatus(id="sb", ip="10.0.0.2"), RuntimePodStatus(uid="u"), result,
                                      plans_of(pod), image_volume_pulls=pulls)
    return ok, result


def counters(syncer: PodSyncer) -> tuple[float, float, float]:
    assert syncer.metrics is not None
    return (syncer.metrics.image_volume_requested.labels().value,
            syncer.metrics.image_volume_mounted_succeeded.labels().value,
            syncer.metrics.image_volume_mounted_errors.labels().value)


async def test_the_container_mounts_the_pulled_image_read_only(tmp_path: Path) -> None:
    """makeMounts: Mount{Image: the pulled ImageSpec, ImageSubPath: the subPath, ReadOnly}, no host path; beside
    it the other volumes' mounts as ever."""
    images = FakeImages()
    syncer, fake, recorder = make_syncer(tmp_path, images)
    pod = make_pod(VOLUMES[:2], [{"name": "app", "image": "busybox:1", "volumeMounts": [
        {"name": "kitten", "mountPath": "/volume"}, {"name": "kitten", "mountPath": "/etc-of-kitten", "subPath": "etc"},
        {"name": "data", "mountPath": "/data"}]}])
    pulls = {"kitten": image_volumes.pulled(KITTEN, "sha256:kitten", {"a": "b"})}
    ok, result = await start(syncer, pod, pulls)
    assert ok and not result.waiting
    [config] = fake.containers.created
    image_mounts = [m for m in config.mounts if m.image is not None]
    assert image_mounts == [cri.Mount(container_path="/volume", readonly=True, image=KITTEN_SPEC),
                            cri.Mount(container_path="/etc-of-kitten", readonly=True, image=KITTEN_SPEC,
                                      image_sub_path="etc")]
    assert any(m.container_path == "/data" and m.host_path.endswith("kubernetes.io~empty-dir/data")
               for m in config.mounts)
    assert not (tmp_path / "root" / "pods" / "u" / "volumes" / "kubernetes.io~image").exists()
    assert images.calls == [("busybox:1", "IfNotPresent", "app")]  # the container's own image, as ever
    assert counters(syncer) == (1, 2, 0)
    assert [e[1] for e in recorder.events] == ["Created", "Started"]


async def test_a_failed_pull_of_a_mounted_volume_fails_the_container_before_its_own_image(tmp_path: Path) -> None:
    """toKubeContainerImageVolumes: "Error: <the error>" events on the container, its waiting reason and message
    the pull's (ErrImagePull, then ImagePullBackOff as the image manager backs off); nothing is created."""
    images = FakeImages()
    syncer, fake, recorder = make_syncer(tmp_path, images)
    pod = make_pod(VOLUMES, [{"name": "app", "image": "busybox:1", "volumeMounts": [
        {"name": "kitten", "mountPath": "/k"}, {"name": "invalid", "mountPath": "/volume"}]}])
    pulls = {"kitten": image_volumes.pulled(KITTEN, "sha256:kitten", {}), "invalid": BACKING_OFF}
    ok, result = await start(syncer, pod, pulls)
    assert not ok
    assert result.waiting == {"app": Waiting("ImagePullBackOff", 'Back-off pulling image "localhost/invalid"')}
    assert recorder.events == [("Warning", "Failed", "Error: ImagePullBackOff", "app")]
    assert images.calls == [] and fake.containers.created == []
    assert counters(syncer) == (0, 0, 0)  # upstream returns before incrementImageVolumeMetrics


async def test_a_failed_pull_of_a_volume_the_container_does_not_mount_changes_nothing(tmp_path: Path) -> None:
    syncer, fake, _ = make_syncer(tmp_path, FakeImages())
    pod = make_pod(VOLUMES, [{"name": "app", "image": "busybox:1"}])
    ok, result = await start(syncer, pod, {"kitten": image_volumes.pulled(KITTEN, "sha256:kitten", {}),
                                           "invalid": PULL_FAILED})
    assert ok and not result.waiting
    assert [m.image for m in fake.containers.created[0].mounts] == [None] * len(fake.containers.created[0].mounts)
    assert counters(syncer) == (0, 0, 0)


async def test_the_runtime_failing_to_mount_the_image_counts_as_a_mount_error(tmp_path: Path) -> None:
    """incrementImageVolumeMetrics: CreateContainer's ImageVolumeMountFailed counts each mount as an error; the
    container waits with CreateContainerError and the runtime's message, as any CreateContainer failure."""
    error = CriError("UNKNOWN", 'ImageVolumeMountFailed: failed to ensure image subpath "not-existing"')
    syncer, _, recorder = make_syncer(tmp_path, FakeImages(), error)
    pod = make_pod(VOLUMES[:1], [{"name": "app", "image": "busybox:1", "volumeMounts": [
        {"name": "kitten", "mountPath": "/volume", "subPath": "not-existing"}]}])
    ok, result = await start(syncer, pod, {"kitten": image_volumes.pulled(KITTEN, "sha256:kitten", {})})
    assert not ok
    assert result.waiting == {"app": Waiting(CREATE_CONTAINER_ERROR, error.details)}
    assert counters(syncer) == (1, 0, 1)
    assert recorder.events[-1] == ("Warning", "Failed", f"Error: {error.details}", "app")


# ------------------------------------------------------------------------------------------------- sync


class Volumes:
    def __init__(self, plans: dict[str, plugins.VolumePlan]) -> None:
        self.plans = plans

    async def setup(self, pod: Pod) -> dict[str, plugins.VolumePlan]:
        return self.plans


async def synced(tmp_path: Path, actions: reconciler.PodActions,
                 images: FakeImages) -> tuple[SyncResult, FakeCri, Recorder]:
    syncer, fake, recorder = make_syncer(tmp_path, images)
    pod = make_pod(VOLUMES, [{"name": "app", "image": "busybox:1", "volumeMounts": [
        {"name": "kitten", "mountPath": "/volume"}]}, {"name": "other", "image": "busybox:1"}])
    syncer.volumes = Volumes(plans_of(pod))  # type: ignore[assignment]
    syncer.dns, syncer.backoff, syncer.cgroups = sandbox_config.DnsSettings(), Backoff(), PodCgroups()
    syncer.cgroup_layout = syncer.cgroups.layout

    async def ensure_pod_cgroup(*_: Any) -> bool:
        return True

    syncer.ensure_pod_cgroup = ensure_pod_cgroup  # type: ignore[method-assign]
    result = await syncer.sync(pod, RuntimePodStatus(uid="u"), actions)
    return result, fake, recorder


async def test_sync_pulls_the_image_volumes_once_before_the_containers(tmp_path: Path) -> None:
    """SyncPod's lazyStart: one pull of each image volume for the sync, whatever the number of containers; the
    container mounting the failed one waits, the other starts."""
    images = FakeImages({KITTEN: ImageError("ErrImagePull", "not found")})
    actions = reconciler.PodActions(sandbox_id="sb", containers_to_start=("app", "other"))
    result, fake, _ = await synced(tmp_path, actions, images)
    assert images.calls == [(KITTEN, "Always", None), ("localhost/invalid", "Always", None),
                            ("busybox:1", "IfNotPresent", "other")]
    assert result.waiting == {"app": Waiting("ErrImagePull", "not found")}
    assert [c.metadata.name for c in fake.containers.created] == ["other"]


async def test_sync_with_nothing_to_start_pulls_nothing(tmp_path: Path) -> None:
    images = FakeImages()
    result, fake, _ = await synced(tmp_path, reconciler.PodActions(sandbox_id="sb"), images)
    assert images.calls == [] and fake.containers.created == [] and not result.waiting
