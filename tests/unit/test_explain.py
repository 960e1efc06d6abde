"""kopflet.pods.explain: a sync's decision summarised from the Observation and the Plan `decide` made of it.

Table-driven over realistic syncs built as tests/unit/test_decide.py builds them (one base pod, its runtime, the
worker's memory): each case runs `decide` once and states the rules that fired, the waits and what comes next, as
`record` must read them from the plan; then the text and JSON renderings, the per-pod ring, and the worker keeping
it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
from collections.abc import Callable
from typing import Any

import pytest

from kopflet.api import spec
from kopflet.backoff import Backoff
from kopflet.container.podstate import ContainerInfo, RuntimePodStatus, SandboxInfo, State
from kopflet.container.sync_result import SyncResult, Waiting
from kopflet.kuberuntime import reconciler
from kopflet.lifecycle import deadline
from kopflet.pods import decide, explain
from kopflet.pods import workers as workers_module
from kopflet.pods.decide import Memory, Observation, ProbeResults
from tests.unit.test_decide import CFG, NODE, NOW, UID, S, base_body, deleting, empty, exited, observe, running, stopped

SECOND = datetime.timedelta(seconds=1)


def crash_looping() -> Observation:
    """web exited 137 five seconds ago, after two restarts: 20 s of back-off, 15 s left."""
    body = base_body()
    backoff = Backoff()
    key = reconciler.backoff_key(spec.pod_from_body(body), "web")
    for _ in range(2):
        backoff.next(key, NOW.timestamp() - 5, event_time=NOW.timestamp() - 5)

    def runtime(b: dict[str, Any]) -> RuntimePodStatus:
        view = exited(b, 137)
        return dataclasses.replace(view, containers=(dataclasses.replace(view.containers[0], reason="Error",
                                                                         restart_count=2),))
    return observe(body, runtime, backoff=backoff)


def liveness_failed() -> Observation:
    obs = observe(base_body())
    return dataclasses.replace(obs, probes=ProbeResults(liveness_failures=frozenset({"c1"}),
                                                        readiness={"c1": False}))


def new_pod() -> Observation:
    body = base_body()
    body["status"] = {"phase": "Pending"}
    return observe(body, empty, memory=Memory(), allocated=False, node=NODE)


def too_big() -> Observation:
    body = base_body()
    body["status"] = {"phase": "Pending"}
    body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "3"}}
    return observe(body, empty, memory=Memory(), allocated=False, node=NODE)


def image_pull_back_off() -> Observation:
    body = base_body()
    body["status"] = {"phase": "Pending"}
    last = SyncResult(waiting={"web": Waiting("ImagePullBackOff", 'Back-off pulling image "busybox"')})
    return observe(body, _sandbox_only, memory=Memory(admitted=True, last=last, followup=True))


def volume_not_ready() -> Observation:
    body = base_body()
    body["status"] = {"phase": "Pending"}
    last = SyncResult(volume_error='MountVolume.SetUp failed for volume "cfg" : configmap "cfg" not found')
    return observe(body, _sandbox_only, memory=Memory(admitted=True, last=last, followup=True))


def _sandbox_only(_: dict[str, Any]) -> RuntimePodStatus:
    return RuntimePodStatus(uid=UID, sandboxes=(SandboxInfo(id="sb1", ready=True, ip="10.1.0.5"),))


def init_running() -> Observation:
    body = base_body()
    body["status"] = {"phase": "Pending"}
    body["spec"]["initContainers"] = [{"name": "migrate", "image": "busybox"}]
    init_hash = spec.container_hash(body["spec"]["initContainers"][0])

    def runtime(_: dict[str, Any]) -> RuntimePodStatus:
        return RuntimePodStatus(uid=UID, sandboxes=(SandboxInfo(id="sb1", ready=True, ip="10.1.0.5"),),
                                containers=(ContainerInfo(id="i1", name="migrate", state=State.RUNNING,
                                                          sandbox_id="sb1", hash=init_hash,
                                                          started_at=int((NOW.timestamp() - 3) * S)),))
    return observe(body, runtime)


def past_deadline() -> Observation:
    body = base_body()
    body["spec"]["activeDeadlineSeconds"] = 10
    return observe(body)


def evicted() -> Observation:
    status = {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}
    return dataclasses.replace(observe(base_body()), eviction=decide.Eviction(status=status, grace_period=0))


R = tuple[str, str, str]
"""A rule as (subject, action, reason)."""


@dataclasses.dataclass(frozen=True)
class Case:
    observation: Callable[[], Observation]
    lifecycle: str
    rules: tuple[R, ...]
    waits: tuple[tuple[str, str], ...] = ()
    next_in: float | None = None
    next_reason: str = decide.WAKE_RESYNC
    reason: str = ""


STATUS_RUNNING = ("status", "write", "phase Running")
STATUS_PENDING = ("status", "write", "phase Pending")
BACK_OFF = "back-off 20s restarting failed container=web pod=foo_ns(12345678)"
REJECTED = "OutOfcpu: Pod was rejected: Node didn't have enough resource: cpu, requested: 3000, used: 0, capacity: 2000"

CASES = {
    "a pod in sync changes nothing": Case(
        lambda: observe(base_body()), "syncing", (STATUS_RUNNING,), next_in=CFG.resync_period),
    "a new pod is admitted and started in a new sandbox": Case(
        new_pod, "syncing",
        (("pod", "admit", ""), ("pod", "record the allocated resources", ""),
         ("sandbox", "create (attempt 0)", "No sandbox for pod can be found. Need to start a new one"),
         ("container web", "start", reconciler.NEW_SANDBOX_START), STATUS_PENDING),
        waits=(("container web", "ContainerCreating"),), next_in=0, next_reason=decide.WAKE_STEPS),
    "a dead sandbox is re-created and its containers run again in it": Case(
        lambda: observe(base_body(), stopped), "syncing",
        (("sandbox", "re-create (attempt 1)", "No ready sandbox for pod can be found. Need to start a new one"),
         ("container web", "restart", reconciler.NEW_SANDBOX_START), ("status", "write", "phase Running")),
        next_in=0, next_reason=decide.WAKE_STEPS),
    "a failed liveness probe kills and restarts": Case(
        liveness_failed, "syncing",
        (("container web", "kill", "Container web failed liveness probe, will be restarted (LivenessProbe)"),
         ("container web", "restart", "Container web failed liveness probe, will be restarted"), STATUS_RUNNING),
        next_in=0, next_reason=decide.WAKE_STEPS),
    "a crash-looping container is held back until its back-off ends": Case(
        crash_looping, "syncing",
        (("container web", "restart held back", f"exited 137 (Error), restartPolicy Always; {BACK_OFF}"),
         STATUS_RUNNING),
        waits=(("container web", "CrashLoopBackOff"),), next_in=15, next_reason=decide.WAKE_BACKOFF),
    "admission refuses a pod that does not fit": Case(
        too_big, "rejected",
        (("pod", "reject", REJECTED), ("status", "write", "phase Failed")), next_in=CFG.resync_period,
        reason=REJECTED),
    "an image pull back-off: only the status until the error back-off ends": Case(
        image_pull_back_off, "syncing", (STATUS_PENDING,),
        waits=(("container web", "ImagePullBackOff"),),
        next_in=decide.ERROR_RETRY, next_reason=decide.WAKE_ERROR, reason=decide.REASON_GATED),
    "volumes not ready": Case(
        volume_not_ready, "syncing", (STATUS_PENDING,),
        waits=(("container web", "ContainerCreating"), ("volumes", "not ready")),
        next_in=decide.ERROR_RETRY, next_reason=decide.WAKE_ERROR, reason=decide.REASON_GATED),
    "an init container runs: the containers wait for it": Case(
        init_running, "syncing", (STATUS_PENDING,),
        waits=(("pod", "ContainersNotInitialized"), ("init container migrate", "Running"),
               ("container web", "PodInitializing")),
        next_in=CFG.resync_period),
    "a deleted pod that still runs is killed": Case(
        lambda: observe(deleting(base_body())), "terminating", (("pod", "kill", decide.REASON_DELETING),),
        next_in=0, next_reason=decide.WAKE_KILL, reason=decide.REASON_DELETING),
    "a pod gone from the API is torn down": Case(
        lambda: observe(base_body(), gone=True), "gone", (("pod", "tear down", decide.REASON_GONE),),
        next_in=CFG.resync_period, reason=decide.REASON_GONE),
    "past activeDeadlineSeconds the pod is killed": Case(
        past_deadline, "terminated", (("pod", "kill", deadline.MESSAGE),),
        next_in=0, next_reason=decide.WAKE_KILL, reason=deadline.MESSAGE),
    "an evicted pod is killed with the eviction's grace period": Case(
        evicted, "terminated", (("pod", "kill (grace period 0s)", decide.REASON_EVICTED),),
        next_in=0, next_reason=decide.WAKE_KILL, reason=decide.REASON_EVICTED),
}


def _decided(case: Case) -> tuple[Observation, decide.Plan, explain.Decision]:
    obs = case.observation()
    plan = decide.decide(obs, CFG)
    return obs, plan, explain.record(obs, plan, obs.now, sync="sync")


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_record_reads_the_rules_that_fired_from_the_plan(case: Case) -> None:
    _, plan, decision = _decided(case)
    assert decision.lifecycle == case.lifecycle
    assert tuple((r.subject, r.action, r.reason) for r in decision.rules) == case.rules
    assert tuple((w.subject, w.reason) for w in decision.waits) == case.waits
    assert decision.reason == case.reason
    assert (decision.next_at - decision.time).total_seconds() == case.next_in
    assert decision.next_reason == case.next_reason
    assert decision.changes_runtime is plan.changes_runtime


def test_a_back_off_ends_at_the_same_second_whenever_it_is_judged() -> None:
    obs = crash_looping()
    decision = explain.record(obs, decide.decide(obs, CFG), obs.now)
    (held,) = [r for r in decision.rules if r.action == explain.HELD_BACK]
    assert held.until == NOW + 15 * SECOND
    assert decision.waits[0].until == NOW + 15 * SECOND
    later = dataclasses.replace(obs, now=NOW + datetime.timedelta(seconds=4.3))
    again = explain.record(later, decide.decide(later, CFG), later.now)
    assert [r.until for r in again.rules if r.action == explain.HELD_BACK] == [NOW + 15 * SECOND]
    assert again.same_as(decision)


def test_the_inputs_are_each_containers_newest_instance_with_its_probe_results() -> None:
    obs = liveness_failed()
    (web,) = explain.record(obs, decide.decide(obs, CFG), obs.now).containers
    assert web == explain.ContainerInput(
        name="web", kind="container", state="running", started_at=NOW - 50 * SECOND, ready=False,
        liveness_failed=True)
    obs = crash_looping()
    (web,) = explain.record(obs, decide.decide(obs, CFG), obs.now).containers
    assert (web.state, web.exit_code, web.reason, web.restart_count, web.finished_at) == \
        ("exited", 137, "Error", 2, NOW - 5 * SECOND)


def test_an_invalid_spec_is_refused_with_its_error() -> None:
    body = base_body()
    body["spec"]["containers"][0]["image"] = ""
    obs = observe(body)
    decision = explain.record(obs, decide.decide(obs, CFG), obs.now)
    assert decision.lifecycle == "invalid" and decision.containers == ()
    assert [(r.action, r.reason) for r in decision.rules] == [("refuse the spec", obs.spec_error)]
    assert decision.events == (f"Warning Failed: Error: {obs.spec_error}",)


# ------------------------------------------------------------------------------------------------- rendering


def test_the_text_says_what_fired_with_its_inputs_and_what_comes_next() -> None:
    ring = explain.Ring()
    for make in (liveness_failed, crash_looping):
        obs = make()
        ring.add(explain.record(obs, decide.decide(obs, CFG), obs.now, sync="sync"))
    text = explain.render_text(ring.decisions(), namespace="ns", name="foo", uid=UID)
    assert text.splitlines() == [
        "pod ns/foo (uid 12345678): 2 decisions, oldest first, times UTC",
        "",
        "2026-06-01 12:00:00 [sync] syncing, phase Running",
        "  container web: running since 11:59:10, restarts 0, liveness probe failed, not ready",
        "  -> container web: kill — Container web failed liveness probe, will be restarted (LivenessProbe)",
        "  -> container web: restart — Container web failed liveness probe, will be restarted",
        "  -> status: write — phase Running",
        "  next: at once — observe what these steps did",
        "",
        "2026-06-01 12:00:00 [sync] syncing, phase Running",
        "  container web: exited 137 (Error) at 11:59:55, restarts 2",
        f"  -> container web: restart held back — exited 137 (Error), restartPolicy Always; {BACK_OFF}, "
        "until 12:00:15, in 15s",
        "  -> status: write — phase Running",
        "  event: Warning BackOff: Back-off restarting failed container web in pod foo_ns(12345678)",
        "  next: 12:00:15, in 15s — crash-loop back-off ends",
    ]


@pytest.mark.parametrize(("make", "lines"), [
    (lambda: observe(base_body()), ["  -> nothing to change", "  next: 12:01:00, in 1m0s — resync period "
                                                               "(syncFrequency)"]),
    (volume_not_ready, ["  why: " + decide.REASON_GATED,
                        '  waiting: volumes: not ready — MountVolume.SetUp failed for volume "cfg" : configmap "cfg" '
                        'not found', "  next: 12:00:10, in 10s — error back-off after failed steps"]),
    (init_running, ["  init container migrate: running since 11:59:57, restarts 0",
                    "  waiting: pod: ContainersNotInitialized — containers with incomplete status: [migrate]",
                    "  waiting: init container migrate: Running — the containers after it start once it exits 0",
                    "  waiting: container web: PodInitializing"]),
], ids=["in sync", "volumes", "init container"])
def test_the_text_of_a_wait(make: Callable[[], Observation], lines: list[str]) -> None:
    obs = make()
    text = explain.render_text([explain.record(obs, decide.decide(obs, CFG), obs.now)])
    for line in lines:
        assert line in text.splitlines(), text


def test_no_decision_yet() -> None:
    assert explain.render_text([], namespace="ns", name="p") == \
        "pod ns/p: 0 decisions, oldest first, times UTC\nno decision yet\n"


def test_json_is_camel_case_with_rfc3339_times() -> None:
    obs = crash_looping()
    decision = explain.record(obs, decide.decide(obs, CFG), obs.now, sync="sync")
    body = explain.to_json([decision], namespace="ns", name="foo", uid=UID)
    assert json.loads(json.dumps(body)) == body
    assert (body["namespace"], body["name"], body["uid"]) == ("ns", "foo", UID)
    (d,) = body["decisions"]
    assert (d["time"], d["nextAt"], d["nextReason"]) == ("2026-06-01T12:00:00.000000Z", "2026-06-01T12:00:15.000000Z",
                                                        decide.WAKE_BACKOFF)
    assert d["containers"][0]["exitCode"] == 137 and d["containers"][0]["finishedAt"] == "2026-06-01T11:59:55.000000Z"
    assert d["rules"][0] == {"subject": "container web", "action": "restart held back",
                             "reason": f"exited 137 (Error), restartPolicy Always; {BACK_OFF}",
                             "until": "2026-06-01T12:00:15.000000Z"}


# ------------------------------------------------------------------------------------------------- the ring


def _at(seconds: int, phase: str = "Running") -> explain.Decision:
    at = NOW + seconds * SECOND
    return explain.Decision(time=at, sync="sync", lifecycle="syncing", phase=phase, next_at=at + 60 * SECOND)


def test_the_ring_keeps_the_last_decisions() -> None:
    ring = explain.Ring(size=3)
    for i in range(5):
        ring.add(_at(i, phase=f"P{i}"))
    assert [d.phase for d in ring.decisions()] == ["P2", "P3", "P4"] and len(ring) == 3
    ring = explain.Ring()
    for i in range(explain.RING_SIZE + 5):
        ring.add(_at(i, phase=f"P{i}"))
    assert len(ring) == explain.RING_SIZE == 20 and ring.decisions()[0].phase == "P5"


def test_the_same_decision_made_again_is_counted_not_kept_twice() -> None:
    ring = explain.Ring(size=3)
    ring.add(_at(0))
    ring.add(dataclasses.replace(_at(60), sync="update"))
    ring.add(_at(120))
    (only,) = ring.decisions()
    assert (only.repeats, only.time, only.last_time, only.next_at) == (3, NOW, NOW + 120 * SECOND,
                                                                      NOW + 180 * SECOND)
    assert "2026-06-01 12:00:00 .. 12:02:00 (3 syncs)" in explain.render_text(ring.decisions())
    assert "next: 12:03:00, in 1m0s" in explain.render_text(ring.decisions())
    ring.add(_at(180, phase="Failed"))
    ring.add(_at(240))
    assert [(d.phase, d.repeats) for d in ring.decisions()] == [("Running", 3), ("Failed", 1), ("Running", 1)]


# ------------------------------------------------------------------------------------------------ the worker


class _Workers(workers_module.PodWorkers):
    """A PodWorkers whose observe is the test's and whose act does nothing."""

    def __init__(self) -> None:
        self.cfg, self.cpus, self.memory_manager, self.allocating, self.workers = CFG, None, None, asyncio.Lock(), {}

        class Allocations:
            def set_allocation(self, pod: Any) -> None:
                pass
        self.allocations = Allocations()  # type: ignore[assignment]

    async def _observe(self, worker: Any) -> Observation:
        return observe(worker.body, running, memory=worker.memory)

    async def _act(self, worker: Any, observation: Observation, plan: decide.Plan) -> float:
        return plan.wake_after


async def test_the_worker_keeps_each_decision_and_finds_it_by_name() -> None:
    w = _Workers()
    old = workers_module._Worker("old-uid", {**base_body(), "metadata": {**base_body()["metadata"], "uid": "old"}})
    old.gone = True
    current = workers_module._Worker(UID, base_body())
    w.workers = {"old": old, UID: current}
    await w._sync(current, "create")  # admits it
    await w._sync(current, "sync")
    await w._sync(current, "update")
    found = w.decisions("ns", "foo")
    assert found is not None
    uid, decisions, start = found
    assert uid == UID  # not the deleted pod of the same name
    assert start is None  # a pod adopted running (phase Running at its admission): no start to time
    assert [(d.sync, d.repeats) for d in decisions] == [("create", 1), ("sync", 2)]
    assert [r.action for r in decisions[0].rules] == ["admit", "write"]
    assert w.decisions("ns", "other") is None and w.decisions("other", "foo") is None


async def test_a_decision_that_cannot_be_summarised_never_stops_the_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any, **__: Any) -> explain.Decision:
        raise RuntimeError("bug")
    monkeypatch.setattr(explain, "record", broken)
    w = _Workers()
    worker = workers_module._Worker(UID, base_body())
    w.workers = {UID: worker}
    assert await w._sync(worker, "sync") == CFG.resync_period
    assert len(worker.decisions) == 0
