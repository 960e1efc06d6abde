"""kopflet.pods.timeline: a pod start's steps, and where they are timed.

The pure part table-driven (a step added, tried again, done; a start finished; the status that ends it; the text,
the JSON and the step histogram's labels), then the seams that time the steps: the image manager's pulls (with
kubelet_image_pull_duration_seconds), the executor's volumes, sandbox, create and start, and the pod worker folding
them into the pod's timeline from its admission until the status it writes says Ready, where explain shows it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from cri_client import CriError
from cri_client import types as cri
from kopflet.allocation.state import AllocationManager
from kopflet.api.spec import Pod, pod_from_body
from kopflet.backoff import Backoff
from kopflet.config.settings import AgentConfig
from kopflet.container.podstate import RuntimePodStatus
from kopflet.container.sync_result import StepTime, SyncResult
from kopflet.images.manager import ImageError, ImageManager
from kopflet.kuberuntime import reconciler, sandbox_config
from kopflet.kuberuntime.executor import PodSyncer
from kopflet.metrics import KubeletMetrics
from kopflet.paths import Layout
from kopflet.pods import decide, explain, timeline
from kopflet.pods import workers as workers_module
from kopflet.pods.decide import Memory, Observation
from kopflet.pods.timeline import READY, Step, Timeline
from kopflet.tracing.spans import PodRef
from kopflet.volumes.plugins import VolumeError
from tests.unit.test_decide import CFG, NODE, UID, base_body, empty, observe, running, stopped

T0 = datetime.datetime(2026, 6, 1, 12, 0, 0, tzinfo=datetime.UTC)
ORIGIN = 1000.0  # monotonic seconds at T0


def tl(*steps: Step) -> Timeline:
    return dataclasses.replace(timeline.begin(T0, ORIGIN), steps=steps)


def step(kind: str, detail: str, start: float, end: float, error: str = "", *, attempts: int = 1) -> Step:
    return Step(kind=kind, detail=detail, start=ORIGIN + start, end=ORIGIN + end, attempts=attempts, error=error)


# ------------------------------------------------------------------------------------------------ add a step

A = (timeline.ADMISSION, "", 0.0, 0.01)
PULL_FAILED = (timeline.IMAGE_PULL, "busybox", 1.0, 2.0, "ErrImagePull")
PULL_DONE = (timeline.IMAGE_PULL, "busybox", 12.0, 15.0)

ADD_CASES: dict[str, tuple[Timeline, tuple[Any, ...], Timeline]] = {
    "a first step": (tl(), A, tl(step(*A))),
    "a step done after a failed attempt spans both": (
        tl(step(*PULL_FAILED)), PULL_DONE, tl(step(timeline.IMAGE_PULL, "busybox", 1.0, 15.0, attempts=2))),
    "a step failing again keeps its last error": (
        tl(step(*PULL_FAILED)), (timeline.IMAGE_PULL, "busybox", 5.0, 6.0, "ErrImagePull"),
        tl(step(timeline.IMAGE_PULL, "busybox", 1.0, 6.0, attempts=2, error="ErrImagePull"))),
    "a step already done stays as it was (volumes are set up on every sync)": (
        tl(step(timeline.VOLUMES, "", 0.1, 0.2)), (timeline.VOLUMES, "", 30.0, 30.1),
        tl(step(timeline.VOLUMES, "", 0.1, 0.2))),
    "the same kind for another container is another step": (
        tl(step(timeline.CREATE, "web", 3.0, 3.1)), (timeline.CREATE, "sidecar", 2.0, 2.5),
        tl(step(timeline.CREATE, "sidecar", 2.0, 2.5), step(timeline.CREATE, "web", 3.0, 3.1))),
    "an end before its start is the start": (
        tl(), (timeline.SANDBOX, "", 2.0, 1.0), tl(step(timeline.SANDBOX, "", 2.0, 2.0))),
    "a finished start takes no more steps": (
        dataclasses.replace(tl(), outcome=READY, ended=ORIGIN + 5), A,
        dataclasses.replace(tl(), outcome=READY, ended=ORIGIN + 5)),
}


@pytest.mark.parametrize(("before", "added", "after"), ADD_CASES.values(), ids=ADD_CASES.keys())
def test_add_step(before: Timeline, added: tuple[Any, ...], after: Timeline) -> None:
    kind, detail, start, end, *error = added
    assert timeline.add_step(before, kind, detail, ORIGIN + start, ORIGIN + end, *error) == after


# ------------------------------------------------------------------------------------------------ finish

STARTED = tl(step(*A), step(timeline.START, "web", 4.0, 4.5))

FINISH_CASES: dict[str, tuple[Timeline, float, str, Timeline]] = {
    "Ready: until ready from the last step's end": (
        STARTED, 6.0, READY,
        dataclasses.replace(STARTED, steps=(*STARTED.steps, step(timeline.UNTIL_READY, "", 4.5, 6.0)), outcome=READY,
                            ended=ORIGIN + 6.0)),
    "Ready with no step: from the start": (
        tl(), 2.0, READY, dataclasses.replace(tl(step(timeline.UNTIL_READY, "", 0.0, 2.0)), outcome=READY,
                                              ended=ORIGIN + 2.0)),
    "ended before Ready: no until ready": (
        STARTED, 9.0, "Succeeded", dataclasses.replace(STARTED, outcome="Succeeded", ended=ORIGIN + 9.0)),
    "finished already: unchanged": (
        dataclasses.replace(STARTED, outcome="Failed", ended=ORIGIN + 5.0), 9.0, READY,
        dataclasses.replace(STARTED, outcome="Failed", ended=ORIGIN + 5.0)),
}


@pytest.mark.parametrize(("before", "at", "how", "after"), FINISH_CASES.values(), ids=FINISH_CASES.keys())
def test_finish(before: Timeline, at: float, how: str, after: Timeline) -> None:
    assert timeline.finish(before, ORIGIN + at, how) == after


def ready(status: str) -> dict[str, str]:
    return {"type": "Ready", "status": status}


OUTCOMES: dict[str, tuple[dict[str, Any], str]] = {
    "Ready True": ({"phase": "Running", "conditions": [{"type": "Initialized", "status": "True"}, ready("True")]},
                   READY),
    "Ready False, running": ({"phase": "Running", "conditions": [ready("False")]}, ""),
    "pending": ({"phase": "Pending", "conditions": [ready("False")]}, ""),
    "succeeded before it was ever Ready": ({"phase": "Succeeded", "conditions": [ready("False")]}, "Succeeded"),
    "failed": ({"phase": "Failed"}, "Failed"),
    "nothing written yet": ({}, ""),
}


@pytest.mark.parametrize(("status", "expected"), OUTCOMES.values(), ids=OUTCOMES.keys())
def test_the_status_that_ends_a_start(status: dict[str, Any], expected: str) -> None:
    assert timeline.outcome(status) == expected


# ------------------------------------------------------------------------------------------------ render

FULL = timeline.finish(tl(
    step(*A), step(timeline.VOLUMES, "", 0.015, 0.045), step(timeline.SANDBOX, "", 0.05, 0.45),
    step(timeline.IMAGE_PULL, "busybox:1.36", 0.46, 3.46, attempts=2), step(timeline.CREATE, "web", 3.47, 3.52),
    step(timeline.START, "web", 3.52, 3.6)), ORIGIN + 4.2511)


def test_step_durations_are_labelled_by_kind_only() -> None:
    assert [(label, round(seconds, 3)) for label, seconds in timeline.step_durations(FULL)] == [
        ("admission", 0.01), ("volumes", 0.03), ("sandbox", 0.4), ("image_pull", 3.0), ("container_create", 0.05),
        ("container_start", 0.08), ("until_ready", 0.651)]


RENDERED: dict[str, tuple[Timeline, list[str]]] = {
    "Ready": (FULL, [
        "start timeline, from 2026-06-01 12:00:00.000 UTC: Ready after 4.251s",
        "  +0s           10ms  admission",
        "  +15ms         30ms  volumes",
        "  +50ms        400ms  sandbox",
        "  +460ms          3s  image pull busybox:1.36 (2 attempts)",
        "  +3.47s        50ms  create web",
        "  +3.52s        80ms  start web",
        "  +3.6s        651ms  until ready"]),
    "still starting, a pull failing": (tl(step(*A), step(*PULL_FAILED)), [
        "start timeline, from 2026-06-01 12:00:00.000 UTC: not Ready yet",
        "  +0s           10ms  admission",
        "  +1s             1s  image pull busybox — failed: ErrImagePull"]),
    "ended first": (dataclasses.replace(tl(step(*A)), outcome="Failed", ended=ORIGIN + 70.5), [
        "start timeline, from 2026-06-01 12:00:00.000 UTC: ended Failed after 1m10.5s, never Ready",
        "  +0s           10ms  admission"]),
    "no step yet": (tl(), ["start timeline, from 2026-06-01 12:00:00.000 UTC: not Ready yet", "  no step yet"]),
}


@pytest.mark.parametrize(("start", "lines"), RENDERED.values(), ids=RENDERED.keys())
def test_render_lines(start: Timeline, lines: list[str]) -> None:
    assert timeline.render_lines(start) == lines


def test_json_has_each_step_with_its_wall_clock_start() -> None:
    out = timeline.to_json(tl(step(*A), step(*PULL_FAILED)))
    assert out["start"] == "2026-06-01T12:00:00.000000Z" and out["outcome"] == "" and out["seconds"] is None
    assert out["steps"][1] == {"name": "image pull busybox", "kind": "image pull", "detail": "busybox",
                               "start": "2026-06-01T12:00:01.000000Z", "offsetSeconds": 1.0, "seconds": 1.0,
                               "attempts": 1, "error": "ErrImagePull"}
    assert timeline.to_json(FULL)["outcome"] == READY and timeline.to_json(FULL)["seconds"] == 4.2511


def test_explain_ends_with_the_start_timeline() -> None:
    text = explain.render_text((), namespace="ns", name="foo", uid=UID, timeline=FULL)
    assert text.endswith("\n\n" + "\n".join(timeline.render_lines(FULL)) + "\n")
    assert "start timeline" not in explain.render_text((), namespace="ns", name="foo")
    body = explain.to_json((), namespace="ns", name="foo", uid=UID, timeline=FULL)
    assert json.loads(json.dumps(body))["startTimeline"]["steps"][-1]["name"] == "until ready"
    assert explain.to_json(())["startTimeline"] is None


# ------------------------------------------------------------------------------------------------ image pulls


class _CriImages:
    def __init__(self, fail: bool = False, size: int = 20 * 1024 * 1024) -> None:
        self.fail, self.size, self.pulled = fail, size, False

    async def status(self, image: str) -> Any:
        return SimpleNamespace(id="sha256:pulled", size=self.size) if self.pulled else None

    async def pull(self, image: str, **_: Any) -> str:
        if self.fail:
            raise CriError("UNKNOWN", "failed to pull and unpack image: not found")
        self.pulled = True
        return "sha256:pulled"


class _Recorder:
    def pod_event(self, *_: Any, **__: Any) -> None:
        pass


def _pod(image: str = "busybox:1.36") -> Pod:
    return pod_from_body({"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
                          "spec": {"containers": [{"name": "app", "image": image}]}})


@pytest.mark.parametrize(("fail", "size", "error", "bucket"), [
    (False, 20 * 1024 * 1024, "", "10MB-100MB"),
    (False, 0, "", "N/A"),
    (True, 0, "ErrImagePull", None),
], ids=["pulled, 20 MiB", "pulled, size unknown", "failed"])
async def test_each_pull_is_timed_for_the_pods_start_and_observed_by_size(fail: bool, size: int, error: str,
                                                                          bucket: str | None) -> None:
    metrics = KubeletMetrics()
    manager = ImageManager(SimpleNamespace(images=_CriImages(fail, size)), _Recorder(), Backoff(),  # type: ignore[arg-type]
                           metrics=metrics)
    pod = _pod()
    before = time.monotonic()
    if fail:
        with pytest.raises(ImageError):
            await manager.ensure(pod, pod.spec.containers[0], SimpleNamespace())  # type: ignore[arg-type]
    else:
        await manager.ensure(pod, pod.spec.containers[0], SimpleNamespace())  # type: ignore[arg-type]
    (pulled,) = manager.take_pull_steps("u")
    assert (pulled.kind, pulled.detail, pulled.error) == ("image pull", "busybox:1.36", error)
    assert before <= pulled.start <= pulled.end <= time.monotonic()
    assert manager.take_pull_steps("u") == []  # taken once
    out = metrics.exposition()
    if bucket is None:
        assert "kubelet_image_pull_duration_seconds_count" not in out
    else:
        assert f'kubelet_image_pull_duration_seconds_count{{image_size_in_bytes="{bucket}"}} 1\n' in out
        assert f'kubelet_image_pull_duration_seconds_bucket{{image_size_in_bytes="{bucket}",le="1"}} 1\n' in out


async def test_an_image_already_present_is_no_pull() -> None:
    images = _CriImages()
    images.pulled = True
    manager = ImageManager(SimpleNamespace(images=images), _Recorder(), Backoff())  # type: ignore[arg-type]
    pod = pod_from_body({"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
                         "spec": {"containers": [{"name": "app", "image": "busybox:1.36",
                                                  "imagePullPolicy": "IfNotPresent"}]}})
    await manager.ensure(pod, pod.spec.containers[0], SimpleNamespace())  # type: ignore[arg-type]
    assert manager.take_pull_steps("u") == []


# ------------------------------------------------------------------------------------------------ the executor


class _Containers:
    def __init__(self, fail_start: bool = False) -> None:
        self.fail_start = fail_start

    async def create(self, sandbox_id: str, config: cri.ContainerConfig, sandbox: Any) -> str:
        return f"cid-{config.metadata.name}"

    async def start(self, container_id: str) -> None:
        if self.fail_start:
            raise CriError("UNKNOWN", "exec format error")


class _Sandboxes:
    async def status(self, sandbox_id: str) -> cri.PodSandboxStatus:
        return cri.PodSandboxStatus(id=sandbox_id, ip="10.0.0.2")


class _NoImages:
    async def status(self, ref: str) -> Any:
        return None


class _Images:
    async def ensure(self, *_: Any) -> str:
        return "sha256:busybox"

    async def image_status(self, ref: str) -> None:
        return None


class _Volumes:
    def __init__(self, error: VolumeError | None = None) -> None:
        self.error = error

    async def setup(self, pod: Pod) -> dict[str, Any]:
        if self.error is not None:
            raise self.error
        return {}


def _syncer(tmp_path: Path, *, sandbox: str = "sb", volumes: _Volumes | None = None,
            fail_start: bool = False) -> PodSyncer:
    """A PodSyncer over fakes that goes through a whole sync: volumes, the sandbox (RunPodSandbox answering
    `sandbox`, "" for a failure), each container's image, create and start."""
    syncer = PodSyncer.__new__(PodSyncer)
    layout = Layout(str(tmp_path / "root"), str(tmp_path / "pods"), str(tmp_path / "containers"))
    syncer.cfg, syncer.layout, syncer.allocations = AgentConfig(node_name="n"), layout, AllocationManager(layout)
    syncer.cri = SimpleNamespace(containers=_Containers(fail_start), sandboxes=_Sandboxes(),  # type: ignore[assignment]
                                 images=_NoImages())
    syncer.images, syncer.recorder = _Images(), _Recorder()  # type: ignore[assignment]
    syncer.volumes = volumes or _Volumes()  # type: ignore[assignment]
    syncer.dns, syncer.backoff = sandbox_config.DnsSettings(), Backoff()
    syncer.node_memory_capacity, syncer.masked_paths, syncer.hugepage_sizes = 2**30, (), ()

    async def environment(*_: Any) -> list[tuple[str, str]]:
        return []

    async def ensure_pod_cgroup(*_: Any) -> bool:
        return True

    async def create_sandbox(*_: Any) -> str:
        return sandbox

    syncer.environment, syncer.ensure_pod_cgroup = environment, ensure_pod_cgroup  # type: ignore[method-assign]
    syncer.create_sandbox = create_sandbox  # type: ignore[method-assign]
    return syncer


def _two_containers() -> Pod:
    return pod_from_body({"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
                          "spec": {"initContainers": [{"name": "setup", "image": "busybox"}],
                                   "containers": [{"name": "app", "image": "busybox"}]}})


def _kinds(result: SyncResult) -> list[tuple[str, str, str]]:
    return [(s.kind, s.detail, s.error) for s in result.steps]


SYNC_CASES: dict[str, tuple[dict[str, Any], reconciler.PodActions, list[tuple[str, str, str]]]] = {
    "a new pod: volumes, sandbox, the init container's create and start": (
        {}, reconciler.PodActions(create_sandbox=True, init_containers_to_start=("setup",)),
        [("volumes", "", ""), ("sandbox", "", ""), ("create", "setup", ""), ("start", "setup", "")]),
    "the sandbox there already: no sandbox step": (
        {}, reconciler.PodActions(sandbox_id="sb", containers_to_start=("app",)),
        [("volumes", "", ""), ("create", "app", ""), ("start", "app", "")]),
    "volumes not ready: nothing else": (
        {"volumes": _Volumes(VolumeError('MountVolume.SetUp failed for volume "c" : configmap "c" not found'))},
        reconciler.PodActions(create_sandbox=True, containers_to_start=("app",)),
        [("volumes", "", "FailedMount")]),
    "RunPodSandbox failed": (
        {"sandbox": ""}, reconciler.PodActions(create_sandbox=True, containers_to_start=("app",)),
        [("volumes", "", ""), ("sandbox", "", "FailedCreatePodSandBox")]),
    "StartContainer failed": (
        {"fail_start": True}, reconciler.PodActions(sandbox_id="sb", containers_to_start=("app",)),
        [("volumes", "", ""), ("create", "app", ""), ("start", "app", "RunContainerError")]),
}


@pytest.mark.parametrize(("kwargs", "actions", "expected"), SYNC_CASES.values(), ids=SYNC_CASES.keys())
async def test_the_executor_times_each_step_it_carries_out(tmp_path: Path, kwargs: dict[str, Any],
                                                          actions: reconciler.PodActions,
                                                          expected: list[tuple[str, str, str]]) -> None:
    before = time.monotonic()
    result = await _syncer(tmp_path, **kwargs).sync(_two_containers(), RuntimePodStatus(uid="u"), actions)
    assert _kinds(result) == expected
    starts = [s.start for s in result.steps]
    assert starts == sorted(starts) and all(before <= s.start <= s.end <= time.monotonic() for s in result.steps)


# ------------------------------------------------------------------------------------------------ the worker


class _Status:
    async def write(self, namespace: str, name: str, uid: str, old: Any, new: Any, precondition: bool = True) -> Any:
        return new


class _PodImages:
    def __init__(self) -> None:
        self.steps: list[StepTime] = []

    def take_pull_steps(self, uid: str) -> list[StepTime]:
        steps, self.steps = self.steps, []
        return steps

    def pull_time(self, uid: str) -> float:
        return 0.0


class _Executor:
    """Reports the steps a sync carries out, each taking 10 ms from when it is called; the image manager pulls
    each container's image before its create (the first time)."""

    def __init__(self, images: _PodImages) -> None:
        self.images, self.pulled = images, set[str]()

    async def sync(self, pod: Pod, runtime: Any, actions: reconciler.PodActions, resizing: Any = None) -> SyncResult:
        now = time.monotonic()
        kinds = [("volumes", "")]
        if actions.create_sandbox:
            kinds.append(("sandbox", ""))
        for name in actions.containers_to_start:
            image = pod.spec.container(name).image  # type: ignore[union-attr]
            if image not in self.pulled:
                self.pulled.add(image)
                kinds.append(("image pull", image))
            kinds += [("create", name), ("start", name)]
        steps = [StepTime(kind, detail, now + i * 0.01, now + (i + 1) * 0.01) for i, (kind, detail) in enumerate(kinds)]
        self.images.steps += [s for s in steps if s.kind == "image pull"]
        return SyncResult(steps=[s for s in steps if s.kind != "image pull"])


class _Workers(workers_module.PodWorkers):
    """PodWorkers over fakes whose observations are the test's, one per sync."""

    def __init__(self, observations: list[Any]) -> None:
        self.cfg, self.cpus, self.memory_manager, self.allocating, self.workers = CFG, None, None, asyncio.Lock(), {}
        self.observations = observations
        self.allocations = SimpleNamespace(set_allocation=lambda pod: None)  # type: ignore[assignment]
        self.recorder = SimpleNamespace(pod_event=lambda *a, **k: None)  # type: ignore[assignment]
        self.images = _PodImages()  # type: ignore[assignment]
        self.status, self.executor = _Status(), _Executor(self.images)  # type: ignore[assignment,arg-type]
        self.relist = SimpleNamespace(forget_containers=lambda ids: None)  # type: ignore[assignment]
        self.prober = SimpleNamespace(forget=lambda uid: None)  # type: ignore[assignment]
        self.metrics = KubeletMetrics()
        self.traced: list[tuple[Timeline, PodRef]] = []
        self.tracer = SimpleNamespace(record=lambda start, pod: self.traced.append((start, pod)))  # type: ignore

    async def _observe(self, worker: Any) -> Observation:
        make = self.observations.pop(0)
        return make(worker)


def pending() -> dict[str, Any]:
    body = base_body()
    body["status"] = {"phase": "Pending"}
    return body


async def test_the_worker_times_a_start_from_first_seen_until_ready() -> None:
    new = lambda w: observe(pending(), empty, memory=w.memory, allocated=False, node=NODE)  # noqa: E731
    started = lambda w: observe(pending(), running, memory=w.memory)  # noqa: E731
    w = _Workers([new, started, lambda w: observe(base_body(), running, memory=w.memory)])
    worker = workers_module._Worker(UID, pending())
    w.workers = {UID: worker}

    await w._sync(worker, "create")  # admitted, the sandbox and the container started
    start = worker.timeline
    assert start is not None and not start.finished
    assert [s.name for s in start.steps] == ["admission", "volumes", "sandbox", "image pull busybox", "create web",
                                             "start web"]
    assert start.steps[0].start == worker.first_seen_monotonic
    assert start.started_at == datetime.datetime.fromtimestamp(worker.first_seen, datetime.UTC)
    assert "kopflet_pod_start_step_duration_seconds" not in w.metrics.exposition()  # observed once it ends

    await w._sync(worker, "sync")  # running, no readiness probe: Ready
    done = worker.timeline
    assert done is not None and done.outcome == READY and done.steps[-1].name == "until ready"
    assert done.steps[:-1] == start.steps  # the volumes set up again on this sync change nothing
    out = w.metrics.exposition()
    for label in ("admission", "volumes", "sandbox", "image_pull", "container_create", "container_start",
                  "until_ready"):
        assert f'kopflet_pod_start_step_duration_seconds_count{{step="{label}"}} 1\n' in out
    assert "kubelet_pod_start_total_duration_seconds_count 1\n" in out

    await w._sync(worker, "sync")  # in sync: the timeline is kept as it ended
    assert worker.timeline is done
    assert w.traced == [(done, PodRef(uid=UID, name="foo", namespace="ns"))]  # traced once, when it ended
    found = w.decisions("ns", "foo")
    assert found is not None and found[2] is done
    assert "start timeline, from " in explain.render_text(found[1], timeline=found[2])


async def test_a_pod_adopted_running_has_no_start_until_its_sandbox_is_created_again() -> None:
    adopted = lambda w: observe(base_body(), running, memory=w.memory, node=NODE)  # noqa: E731
    dead = lambda w: observe(base_body(), stopped, memory=w.memory)  # noqa: E731
    w = _Workers([adopted, dead])
    worker = workers_module._Worker(UID, base_body())
    w.workers = {UID: worker}
    await w._sync(worker, "create")
    assert worker.memory.admitted and worker.timeline is None
    await w._sync(worker, "sync")  # the sandbox died: a new one, the pod starts again
    again = worker.timeline
    assert again is not None and [s.name for s in again.steps] == ["volumes", "sandbox", "image pull busybox",
                                                                   "create web", "start web"]
    assert again.origin >= worker.first_seen_monotonic


async def test_the_plan_outcome_is_read_from_the_status_written() -> None:
    """A pod whose status says Ready ends its start; decide's plan for a running pod does."""
    plan = decide.decide(observe(base_body(), running, memory=Memory(admitted=True)), CFG)
    assert plan.status is not None and timeline.outcome(plan.status) == READY


class _SlowStatus:
    """A status write the test releases: the apiserver is slow."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.order: list[str] = []

    async def write(self, namespace: str, name: str, uid: str, old: Any, new: Any, precondition: bool = True) -> Any:
        self.order.append("write sent")
        await self.release.wait()
        self.order.append("write done")
        return new


async def test_a_sync_that_starts_things_sends_its_status_while_the_runtime_works() -> None:
    """Upstream's status manager sends apart from the sync: the sandbox is not held back by the PATCH, and the sync
    still ends only once the status is written (the next one is made against it)."""
    new = lambda w: observe(pending(), empty, memory=w.memory, allocated=False, node=NODE)  # noqa: E731
    w = _Workers([new])
    status = w.status = _SlowStatus()  # type: ignore[assignment]
    synced: list[str] = []
    real_sync = w.executor.sync

    async def sync(*args: Any, **kwargs: Any) -> SyncResult:
        synced.append("runtime")
        status.order.append("runtime")
        return await real_sync(*args, **kwargs)

    w.executor.sync = sync  # type: ignore[method-assign]
    worker = workers_module._Worker(UID, pending())
    w.workers = {UID: worker}
    task = asyncio.create_task(w._sync(worker, "create"))
    async with asyncio.timeout(5):
        while not synced:  # noqa: ASYNC110
            await asyncio.sleep(0.001)
    assert not task.done()  # the runtime worked, the sync waits for the status
    status.release.set()
    await task
    assert sorted(status.order[:2]) == ["runtime", "write sent"] and status.order[2] == "write done"
    assert worker.body["status"]["phase"] == "Pending"  # the status written is the worker's


async def test_a_worker_stopped_mid_sync_leaves_no_status_write_behind() -> None:
    new = lambda w: observe(pending(), empty, memory=w.memory, allocated=False, node=NODE)  # noqa: E731
    w = _Workers([new])
    status = w.status = _SlowStatus()  # type: ignore[assignment]
    worker = workers_module._Worker(UID, pending())
    w.workers = {UID: worker}
    before = asyncio.all_tasks()
    task = asyncio.create_task(w._sync(worker, "create"))
    async with asyncio.timeout(5):
        while "write sent" not in status.order:  # noqa: ASYNC110
            await asyncio.sleep(0.001)
    await asyncio.sleep(0.05)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()
    left = [t for t in asyncio.all_tasks() - before if t.get_name().startswith("pod-status-") and not t.done()]
    assert left == []
