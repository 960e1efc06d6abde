"""kopflet.pods.rewrite and the pod worker with policy hooks: an admit hook's veto is an upstream-style rejection, a
plan hook's changes reach the pod the executor starts (never the hash, the status or the node's accounting), a delay
holds the starts back and says why in explain, observers get every decision, a failing hook is a HookFailed event
and the default decision."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from kopflet import hooks
from kopflet.api import spec
from kopflet.hooks.runner import PolicyHooks
from kopflet.lifecycle import admission
from kopflet.pods import decide, explain, rewrite
from kopflet.pods import workers as workers_module
from kopflet.pods.decide import Lifecycle, Memory, Observation
from tests.unit.test_decide import CFG, NODE, NOW, UID, base_body, empty, exited, observe, running


def pending_body() -> dict[str, Any]:
    body = base_body()
    body["status"] = {"phase": "Pending", "qosClass": "Burstable"}
    body["spec"]["initContainers"] = [{"name": "init", "image": "busybox"}]
    body["spec"]["containers"][0]["env"] = [{"name": "MODE", "value": "prod"}]
    body["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    body["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    return body


def new_pod() -> Observation:
    return observe(pending_body(), empty, memory=Memory(), allocated=False, node=NODE)


# ------------------------------------------------------------------------------------------------------ admit

def test_a_hook_rejection_is_an_upstream_rejection() -> None:
    veto = rewrite.rejection(hooks.reject("image busybox is not allowed on this node", reason="ImageNotAllowed"))
    plan = decide.decide(dataclasses.replace(new_pod(), hook_rejection=veto), CFG)
    assert plan.lifecycle is Lifecycle.REJECTED and not plan.admitted and plan.actions is None
    assert plan.status == {"phase": "Failed", "qosClass": "Burstable", "reason": "ImageNotAllowed",
                           "message": "Pod was rejected: image busybox is not allowed on this node"}
    assert [(e.type, e.reason, e.message) for e in plan.events] == [
        ("Warning", "ImageNotAllowed", "image busybox is not allowed on this node")]
    assert [(r.subject, r.action) for r in explain.record(new_pod(), plan, NOW).rules] == [("pod", "reject"),
                                                                                      ("status", "write")]


def test_a_built_in_rejection_comes_before_the_hooks() -> None:
    obs = new_pod()
    too_big = dataclasses.replace(obs, pod=dataclasses.replace(obs.pod, spec=dataclasses.replace(
        obs.pod.spec, containers=(dataclasses.replace(obs.pod.spec.containers[0], resources=spec.Resources(
            requests={"cpu": "3"})),))))
    veto = admission.Rejection(reason="HookRejected", message="Pod was rejected: no")
    plan = decide.decide(dataclasses.replace(too_big, hook_rejection=veto), CFG)
    assert plan.status is not None and plan.status["reason"] == "OutOfcpu"


def test_a_rejection_without_a_reason_gets_the_default() -> None:
    assert rewrite.rejection(hooks.AdmitVerdict(False, "", "no")) == admission.Rejection(
        reason="HookRejected", message="Pod was rejected: no")


# ------------------------------------------------------------------------------------------------------- plan

def decided(obs: Observation | None = None) -> tuple[Observation, decide.Plan]:
    obs = obs or new_pod()
    return obs, decide.decide(obs, CFG)


def changes(edit: Any, obs: Observation | None = None) -> tuple[decide.Plan, decide.Plan]:
    obs, plan = decided(obs)
    view = rewrite.plan_view(obs, plan, node_name="node-1", first_seen=NOW)
    edit(view)
    return plan, rewrite.apply(obs, plan, [("policy.edit", view.changes())])


def test_the_view_says_what_the_plan_starts() -> None:
    obs, plan = decided()
    assert rewrite.starts(plan)
    view = rewrite.plan_view(obs, plan, node_name="node-1", first_seen=NOW)
    assert (view.creates_sandbox, view.starts, view.restarts) == (True, ("init",), ())
    crashed = observe(base_body(), exited)
    _, restart = decided(crashed)
    view = rewrite.plan_view(crashed, restart, node_name="node-1", first_seen=NOW)
    assert (view.creates_sandbox, view.starts, view.restarts) == (False, ("web",), ("web",))


@pytest.mark.parametrize("obs", [
    pytest.param(lambda: observe(base_body()), id="in sync: nothing starts"),
    pytest.param(lambda: observe(base_body(), memory=Memory(admitted=True, followup=True,
                                                            last=None)), id="a follow-up that starts nothing"),
])
def test_plan_hooks_are_not_asked_when_nothing_starts(obs: Any) -> None:
    _, plan = decided(obs())
    assert not rewrite.starts(plan)


def test_env_volumes_and_mounts_reach_the_pod_the_executor_runs() -> None:
    def edit(v: hooks.PlanView) -> None:
        v.set_env("MODE", "canary", containers=["web"])  # replaces the spec's
        v.set_env("NODE_ZONE", "a")
        v.add_empty_dir("scratch")
        v.add_host_path("certs", "/etc/ssl/certs", type="Directory")
        v.mount("scratch", "/scratch")
        v.mount("certs", "/etc/ssl/certs", containers=["web"], read_only=True)

    before, after = changes(edit)
    web, init = after.pod.spec.containers[0], after.pod.spec.init_containers[0]
    assert [(e.name, e.value) for e in web.env] == [("MODE", "canary"), ("NODE_ZONE", "a")]
    assert [(e.name, e.value) for e in init.env] == [("NODE_ZONE", "a")]
    assert [m["mountPath"] for m in web.volume_mounts] == ["/data", "/scratch", "/etc/ssl/certs"]
    assert [m["mountPath"] for m in init.volume_mounts] == ["/scratch"]
    assert [v["name"] for v in after.pod.spec.volumes] == ["data", "scratch", "certs"]
    # the hash is the API spec's (a hook's edit restarts nothing), and the rest of the plan is as decided
    assert web.hash == before.pod.spec.containers[0].hash
    assert (after.actions, after.status, after.wake_after) == (before.actions, before.status, before.wake_after)
    assert before.pod.spec.containers[0].env == (spec.EnvVar(name="MODE", value="prod"),)  # the decided pod stays
    rules = [(r.subject, r.action, r.reason) for r in explain.record(new_pod(), after, NOW).rules
             if r.subject.startswith("policy hook")]
    assert rules[:2] == [("policy hook policy.edit", "set env MODE", "in web"),
                         ("policy hook policy.edit", "set env NODE_ZONE", "in init, web")]


def test_for_one_name_the_first_hook_wins() -> None:
    obs, plan = decided()
    first, second = (rewrite.plan_view(obs, plan, node_name="n", first_seen=NOW) for _ in range(2))
    for v, medium in ((first, "Memory"), (second, "")):
        v.add_empty_dir("scratch", medium=medium)  # type: ignore[arg-type]
        v.mount("scratch", "/scratch", containers=["web"])
    after = rewrite.apply(obs, plan, [("a", first.changes()), ("b", second.changes())])
    assert [v for v in after.pod.spec.volumes if v["name"] == "scratch"] == [
        {"name": "scratch", "emptyDir": {"medium": "Memory"}}]
    assert [m["mountPath"] for m in after.pod.spec.containers[0].volume_mounts] == ["/data", "/scratch"]


def test_a_delay_holds_every_start_and_looks_again_after_it() -> None:
    before, after = changes(lambda v: v.delay(30, "node load 5.2 above 4"))
    assert before.actions is not None and before.actions.create_sandbox and before.memory.followup
    assert after.actions is not None and not after.actions.create_sandbox
    assert (after.actions.init_containers_to_start, after.actions.containers_to_start) == ((), ())
    assert not after.changes_runtime and not after.memory.followup
    why = "start delayed by policy hook policy.edit: node load 5.2 above 4"
    assert (after.wake_after, after.wake_reason, after.reason) == (30, why, why)
    assert after.status == before.status and after.admitted  # admitted, Pending, its status written
    decision = explain.record(new_pod(), after, NOW)
    assert decision.next_reason == why and decision.reason == why
    assert ("policy hook policy.edit", "delay the starts by 30s") in [(r.subject, r.action) for r in decision.rules]
    assert not any(r.subject == "sandbox" for r in decision.rules)


def test_a_delay_still_lets_the_kills_go() -> None:
    body = base_body()
    obs = observe(body, lambda b: running(b), memory=Memory(admitted=True))
    changed = dataclasses.replace(obs, pod=dataclasses.replace(obs.pod, spec=dataclasses.replace(
        obs.pod.spec, containers=(dataclasses.replace(obs.pod.spec.containers[0], hash="new-spec"),))))
    before, after = changes(lambda v: v.delay(10, "later"), changed)
    assert before.actions is not None and before.actions.containers_to_kill and before.actions.containers_to_start
    assert after.actions is not None and after.actions.containers_to_kill == before.actions.containers_to_kill
    assert after.actions.containers_to_start == ()
    assert after.changes_runtime and after.wake_after == 0 and after.memory.followup  # observe the kill at once


def test_of_several_delays_the_longest_wins() -> None:
    obs, plan = decided()
    views = [rewrite.plan_view(obs, plan, node_name="n", first_seen=NOW) for _ in range(2)]
    views[0].delay(5, "short")
    views[1].delay(20, "long")
    after = rewrite.apply(obs, plan, [("a", views[0].changes()), ("b", views[1].changes())])
    assert after.wake_after == 20 and after.wake_reason == "start delayed by policy hook b: long"


# ------------------------------------------------------------------------------------------------- the worker

class _Workers(workers_module.PodWorkers):
    """A PodWorkers whose observe is the test's (a new pod) and whose act only keeps the plan."""

    def __init__(self, runner: PolicyHooks) -> None:
        self.cfg, self.cpus, self.memory_manager, self.allocating, self.workers = CFG, None, None, asyncio.Lock(), {}
        self.hooks = runner
        self.plans: list[decide.Plan] = []

        class Allocations:
            def set_allocation(self, pod: Any) -> None:
                pass
        self.allocations = Allocations()  # type: ignore[assignment]

    async def _observe(self, worker: Any) -> Observation:
        return observe(pending_body(), empty, memory=worker.memory, allocated=False, node=NODE)

    async def _act(self, worker: Any, observation: Observation, plan: decide.Plan) -> float:
        self.plans.append(plan)
        return plan.wake_after


async def sync(registry: hooks.Registry) -> tuple[_Workers, workers_module._Worker, decide.Plan]:
    runner = PolicyHooks(registry.hooks)
    w = _Workers(runner)
    worker = workers_module._Worker(UID, pending_body())
    w.workers = {UID: worker}
    await w._sync(worker, "create")
    return w, worker, w.plans[-1]


async def test_the_worker_rejects_a_pod_an_admit_hook_vetoes() -> None:
    registry = hooks.Registry()
    seen: list[tuple[str, tuple[str, ...]]] = []

    @registry.admit(name="allowlist")
    def allowlist(request: hooks.AdmitRequest) -> hooks.AdmitVerdict:
        seen.append((request.pod.name, tuple(p.name for p in request.others)))
        return hooks.reject("image busybox is not allowed", reason="ImageNotAllowed")

    _, worker, plan = await sync(registry)
    assert seen == [("foo", ())]
    assert plan.lifecycle is Lifecycle.REJECTED and plan.status is not None
    assert (plan.status["reason"], plan.status["message"]) == ("ImageNotAllowed",
                                                               "Pod was rejected: image busybox is not allowed")
    assert worker.decisions.decisions()[-1].rules[0].action == "reject"


async def test_the_worker_admits_the_pod_when_an_admit_hook_fails_and_says_so() -> None:
    registry = hooks.Registry()

    @registry.admit(name="buggy")
    def buggy(_: hooks.AdmitRequest) -> None:
        raise KeyError("labels")

    _, worker, plan = await sync(registry)
    assert plan.lifecycle is Lifecycle.SYNCING and plan.admitted
    assert (plan.events[0].type, plan.events[0].reason, plan.events[0].message) == (
        "Warning", "HookFailed", "Policy hook buggy (admit) raised KeyError: 'labels'; the default decision is used")
    assert worker.decisions.decisions()[-1].events[0].startswith("Warning HookFailed: Policy hook buggy")


async def test_admit_hooks_are_asked_once_per_pod() -> None:
    registry = hooks.Registry()
    asked = []
    registry.admit(lambda r: asked.append(r.pod.name))
    w, worker, _ = await sync(registry)
    await w._sync(worker, "sync")  # admitted now: not asked again
    assert asked == ["foo"]


async def test_the_worker_applies_a_plan_hooks_changes_and_records_them() -> None:
    registry = hooks.Registry()

    @registry.plan(name="zone")
    async def zone(view: hooks.PlanView) -> None:
        view.set_env("NODE_ZONE", "a")
        view.delay(15, "warming up")

    _, worker, plan = await sync(registry)
    assert [e.name for e in plan.pod.spec.init_containers[0].env] == ["NODE_ZONE"]
    assert plan.wake_after == 15 and plan.actions is not None and not plan.actions.create_sandbox
    assert worker.memory == plan.memory and not worker.memory.followup
    assert worker.pod is not None and worker.pod.spec.init_containers[0].env == ()  # the node counts the decided pod
    assert worker.decisions.decisions()[-1].next_reason == "start delayed by policy hook zone: warming up"


async def test_the_worker_queues_every_decision_for_the_observers() -> None:
    registry = hooks.Registry()
    seen: list[tuple[str, str, bool]] = []

    @registry.observe(name="watch")
    def watch(view: hooks.DecisionView) -> None:
        steps = [step.name for step in view.timeline.steps] if view.timeline is not None else []
        seen.append((view.decision.sync, view.decision.lifecycle, steps[:1]))

    w, worker, _ = await sync(registry)
    await w._sync(worker, "sync")
    assert w.hooks is not None
    task = asyncio.create_task(w.hooks.run())
    try:
        await asyncio.wait_for(w.hooks.drain(), 5)
    finally:
        task.cancel()
    # each with the pod's start timeline (the test's act runs no step: only the admission so far)
    assert seen == [("create", "syncing", ["admission"]), ("sync", "syncing", ["admission"])]


async def test_a_decision_whose_steps_failed_is_observed_all_the_same() -> None:
    registry = hooks.Registry()
    seen: list[str] = []
    registry.observe(lambda view: seen.append(view.decision.sync))
    w = _Workers(PolicyHooks(registry.hooks))

    async def failing_act(*_: Any) -> float:
        raise RuntimeError("the apiserver is gone")
    w._act = failing_act  # type: ignore[method-assign]
    worker = workers_module._Worker(UID, pending_body())
    w.workers = {UID: worker}
    with pytest.raises(RuntimeError):
        await w._sync(worker, "create")
    assert w.hooks is not None
    task = asyncio.create_task(w.hooks.run())
    try:
        await asyncio.wait_for(w.hooks.drain(), 5)
    finally:
        task.cancel()
    assert seen == ["create"]
