"""kopflet.hooks.runner: each hook kind called with its time limit, plain hooks in a thread, coroutines as tasks; a
hook that raises, hangs, returns the wrong type or exits is a HookFailed event and its call changes nothing; a veto
rejects, a rewrite is returned; observers run from their queue in order."""

from __future__ import annotations

import asyncio
import datetime
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from kopflet import hooks
from kopflet.api import spec
from kopflet.hooks.runner import PolicyHooks
from kopflet.metrics import KubeletMetrics
from kopflet.pods.explain import Decision

NOW = datetime.datetime(2026, 6, 1, 12, 0, 0, tzinfo=datetime.UTC)
POD = spec.pod_from_body({"metadata": {"name": "web", "namespace": "ns", "uid": "u1"},
                          "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]}})
SHORT = 0.2
"""A time limit the tests' hanging hooks run into."""


def request() -> hooks.AdmitRequest:
    return hooks.AdmitRequest(pod=POD, node_name="node-1", now=NOW)


def view() -> hooks.PlanView:
    return hooks.PlanView(pod=POD, node_name="node-1", creates_sandbox=True, starts=("app",), now=NOW)


def decision_view() -> hooks.DecisionView:
    decision = Decision(time=NOW, sync="create", lifecycle="syncing", phase="Pending", next_at=NOW)
    return hooks.DecisionView(pod=POD, decision=decision, first_seen=NOW)


def registered(kind: str, fn: Callable[..., Any], **options: Any) -> PolicyHooks:
    registry = hooks.Registry()
    getattr(registry, kind)(**options)(fn)
    return PolicyHooks(registry.hooks)


# ------------------------------------------------------------------------------------------------ failures

def _raises(_: Any) -> None:
    raise ValueError("boom")


async def _raises_async(_: Any) -> None:
    raise ValueError("boom")


def _hangs(_: Any) -> None:
    time.sleep(3)


async def _hangs_async(_: Any) -> None:
    await asyncio.sleep(3)


async def _ignores_the_cancel(_: Any) -> None:
    deadline = time.monotonic() + 1
    while time.monotonic() < deadline:
        try:
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            continue  # a badly written hook: the runner must not wait for it


def _exits(_: Any) -> None:
    sys.exit(3)


async def _exits_async(_: Any) -> None:
    sys.exit(3)


def _wrong_type(_: Any) -> str:
    return "yes"


FAILURES = [
    pytest.param(_raises, "raised ValueError: boom", id="raises"),
    pytest.param(_raises_async, "raised ValueError: boom", id="raises (async)"),
    pytest.param(_hangs, f"timed out after {SHORT:g}s", id="hangs in its thread"),
    pytest.param(_hangs_async, f"timed out after {SHORT:g}s", id="hangs (async)"),
    pytest.param(_ignores_the_cancel, f"timed out after {SHORT:g}s", id="ignores the cancel (async)"),
    pytest.param(_exits, "raised SystemExit: 3", id="calls sys.exit"),
    pytest.param(_exits_async, "raised SystemExit: 3", id="calls sys.exit (async)"),
]


@pytest.mark.parametrize(("fn", "error"), FAILURES)
async def test_a_failing_admit_hook_is_an_event_and_the_pod_is_admitted(fn: Callable[..., Any], error: str) -> None:
    runner = registered("admit", fn, name="policy.check", timeout=SHORT)
    started = time.monotonic()
    outcome = await runner.admit(POD, request)
    assert time.monotonic() - started < SHORT + 0.5  # never held beyond the time limit
    assert outcome.rejection is None
    assert [(e.type, e.reason, e.message) for e in outcome.events] == [
        ("Warning", "HookFailed", f"Policy hook policy.check (admit) {error}; the default decision is used")]


@pytest.mark.parametrize(("fn", "error"), FAILURES)
async def test_a_failing_plan_hook_changes_nothing(fn: Callable[..., Any], error: str) -> None:
    def failing(v: hooks.PlanView) -> Any:
        v.set_env("A", "1")  # asked for, then the hook fails: dropped
        return fn(v)

    async def failing_async(v: hooks.PlanView) -> Any:
        v.set_env("A", "1")
        return await fn(v)

    runner = registered("plan", failing_async if asyncio.iscoroutinefunction(fn) else failing, name="p",
                        timeout=SHORT)
    outcome = await runner.plan(POD, view)
    assert outcome.changes == ()
    assert [f.error for f in outcome.failures] == [error]
    assert [e.reason for e in outcome.events] == ["HookFailed"]


async def test_a_wrong_return_type_is_a_failure() -> None:
    outcome = await registered("admit", _wrong_type, name="a").admit(POD, request)
    assert outcome.rejection is None
    assert outcome.failures[0].error == "returned 'yes', not an AdmitVerdict (allow() or reject()) or None"
    outcome = await registered("plan", _wrong_type, name="p").plan(POD, view)
    assert outcome.failures[0].error.startswith("returned 'yes': a plan hook changes the plan through its view")


async def test_a_failing_admit_hook_with_failure_policy_fail_rejects_the_pod() -> None:
    runner = registered("admit", _raises, name="strict", failure_policy="Fail")
    outcome = await runner.admit(POD, request)
    assert outcome.rejection == hooks.AdmitVerdict(
        False, "HookFailed", "Policy hook strict (admit) raised ValueError: boom; the pod is rejected (failure "
                             "policy Fail)")
    assert outcome.events == ()  # the rejection's own Warning event says it


async def test_a_hung_plain_hook_is_not_called_again_while_its_thread_runs() -> None:
    release = threading.Event()
    calls = []

    def blocks(_: Any) -> None:
        calls.append(1)
        release.wait(5)

    runner = registered("admit", blocks, name="slow", timeout=SHORT)
    first = await runner.admit(POD, request)
    second = await runner.admit(POD, request)
    assert first.failures[0].error == f"timed out after {SHORT:g}s"
    assert second.failures[0].error == f"is still running from an earlier call that timed out (after {SHORT:g}s)"
    assert len(calls) == 1  # one thread held, not one per sync
    release.set()
    for _ in range(50):  # the thread ends, and the hook is called again
        await asyncio.sleep(0.02)
        if not runner._busy:
            break
    third = await runner.admit(POD, request)
    assert third.failures == () and len(calls) == 2


@pytest.mark.parametrize("is_async", [False, True], ids=["plain", "async"])
async def test_a_slow_hook_within_its_time_limit_is_waited_for(is_async: bool) -> None:
    def slow(_: Any) -> hooks.AdmitVerdict:
        time.sleep(0.1)
        return hooks.reject("too slow to be wrong", reason="Slow")

    async def slow_async(_: Any) -> hooks.AdmitVerdict:
        await asyncio.sleep(0.1)
        return hooks.reject("too slow to be wrong", reason="Slow")

    outcome = await registered("admit", slow_async if is_async else slow, timeout=1).admit(POD, request)
    assert outcome.rejection == hooks.AdmitVerdict(False, "Slow", "too slow to be wrong") and outcome.failures == ()


async def test_a_plain_hook_does_not_block_the_loop() -> None:
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    def blocking(_: Any) -> None:
        time.sleep(0.3)

    ticker = asyncio.create_task(tick())
    try:
        await registered("plan", blocking, timeout=1).plan(POD, view)
    finally:
        ticker.cancel()
    assert ticks >= 10


# ------------------------------------------------------------------------------------------------ answers

async def test_the_first_rejection_wins_and_later_admit_hooks_are_not_asked() -> None:
    asked = []
    registry = hooks.Registry()

    @registry.admit(name="first")
    def first(req: hooks.AdmitRequest) -> None:
        asked.append("first")
        req.event("Normal", "Checked", "looked at it")

    @registry.admit(name="second")
    def second(_: hooks.AdmitRequest) -> hooks.AdmitVerdict:
        asked.append("second")
        return hooks.reject("image registry.example/app:1 is not allowed", reason="ImageNotAllowed")

    @registry.admit(name="third")
    def third(_: hooks.AdmitRequest) -> None:
        asked.append("third")

    outcome = await PolicyHooks(registry.hooks).admit(POD, request)
    assert asked == ["first", "second"]
    assert (outcome.rejection, outcome.hook) == (
        hooks.AdmitVerdict(False, "ImageNotAllowed", "image registry.example/app:1 is not allowed"), "second")
    assert [(e.reason, e.message) for e in outcome.events] == [("Checked", "looked at it")]


async def test_allow_and_none_admit() -> None:
    registry = hooks.Registry()
    registry.admit(lambda _: None)
    registry.admit(lambda _: hooks.allow())
    outcome = await PolicyHooks(registry.hooks).admit(POD, request)
    assert outcome.rejection is None and outcome.failures == ()


async def test_plan_hooks_each_get_a_view_and_their_changes_in_order() -> None:
    registry = hooks.Registry()

    @registry.plan(name="env")
    async def env(v: hooks.PlanView) -> None:
        assert v.starts == ("app",) and v.creates_sandbox
        v.set_env("NODE_ZONE", "a")
        v.event("Normal", "Annotated", "zone a")

    @registry.plan(name="load")
    def load(v: hooks.PlanView) -> None:
        assert v.changes().env == ()  # a view of its own: the earlier hook's changes are not in it
        v.delay(30, "node load 5.2 above 4")

    outcome = await PolicyHooks(registry.hooks).plan(POD, view)
    assert [(name, rewrite.describe()) for name, rewrite in outcome.changes] == [
        ("env", [("set env NODE_ZONE", "in app")]), ("load", [("delay the starts by 30s", "node load 5.2 above 4")])]
    assert [e.reason for e in outcome.events] == ["Annotated"]


async def test_a_view_is_sealed_once_its_call_is_over() -> None:
    kept: list[hooks.PlanView] = []
    runner = registered("plan", kept.append, name="keeps")
    await runner.plan(POD, view)
    with pytest.raises(RuntimeError, match="belongs to a hook call that is over"):
        kept[0].set_env("LATE", "1")


# ------------------------------------------------------------------------------------------------ observers

async def test_observers_run_in_order_from_their_queue_and_post_their_events() -> None:
    seen: list[str] = []
    posted: list[tuple[str, str, str]] = []
    registry = hooks.Registry()

    @registry.observe(name="log")
    def log(v: hooks.DecisionView) -> None:
        seen.append(v.decision.sync)
        v.event("Normal", "Seen", v.decision.sync)

    @registry.observe(name="broken")
    async def broken(_: hooks.DecisionView) -> None:
        raise RuntimeError("observer bug")

    runner = PolicyHooks(registry.hooks, post_event=lambda pod, e: posted.append((pod.name, e.reason, e.message)))
    task = asyncio.create_task(runner.run())
    try:
        for sync in ("create", "sync", "update"):
            runner.observe(POD, lambda sync=sync: hooks.DecisionView(  # type: ignore[misc]
                pod=POD, decision=Decision(time=NOW, sync=sync, lifecycle="syncing", phase="", next_at=NOW),
                first_seen=NOW))
        await asyncio.wait_for(runner.drain(), 5)
    finally:
        task.cancel()
    assert seen == ["create", "sync", "update"]
    failed = "Policy hook broken (observe) raised RuntimeError: observer bug; the default decision is used"
    assert posted == [("web", "Seen", "create"), ("web", "HookFailed", failed), ("web", "Seen", "sync"),
                      ("web", "HookFailed", failed), ("web", "Seen", "update"), ("web", "HookFailed", failed)]


async def test_a_full_observer_queue_drops_decisions_and_counts_them() -> None:
    registry = hooks.Registry()
    registry.observe(lambda _: None)
    runner = PolicyHooks(registry.hooks, queue_size=2)
    for _ in range(5):  # nothing runs the queue
        runner.observe(POD, decision_view)
    assert runner.dropped == 3


def test_nothing_is_queued_without_observers() -> None:
    runner = PolicyHooks(())
    runner.observe(POD, decision_view)
    assert runner.dropped == 0 and runner._queue.empty()



def test_the_guide_quotes_the_failure_messages_the_runner_writes() -> None:
    from pathlib import Path

    from kopflet.hooks.runner import Failure
    guide = (Path(__file__).resolve().parents[2] / "docs" / "extending.md").read_text(encoding="utf-8")
    zone = hooks.Hook("plan", "acme.policy.zone", lambda _: None)
    check = hooks.Hook("admit", "acme.policy.check", lambda _: None)
    for failure in (Failure(zone, "raised KeyError: 'zone'"), Failure(check, "timed out after 2s"),
                    Failure(check, "is still running from an earlier call that timed out (after 2s)")):
        assert failure.message in guide


async def test_the_hook_stays_busy_until_every_call_that_timed_out_has_ended() -> None:
    """Two syncs at once ran into a hung hook: the first thread to end does not make the hook callable again while
    the other still runs."""
    releases = [threading.Event(), threading.Event(), threading.Event()]
    releases[2].set()  # the call after both ended returns at once
    calls: list[int] = []

    def blocks(_: Any) -> None:
        index = len(calls)
        calls.append(index)
        releases[index].wait(5)

    runner = registered("admit", blocks, name="slow", timeout=SHORT)
    both = await asyncio.gather(runner.admit(POD, request), runner.admit(POD, request))
    assert [o.failures[0].error for o in both] == [f"timed out after {SHORT:g}s"] * 2 and len(calls) == 2
    releases[0].set()
    await asyncio.sleep(0.2)
    still = await runner.admit(POD, request)
    assert still.failures[0].error.startswith("is still running") and len(calls) == 2
    releases[1].set()
    for _ in range(50):
        await asyncio.sleep(0.02)
        if not runner._busy:
            break
    assert (await runner.admit(POD, request)).failures == () and len(calls) == 3


class _Odd(BaseException):
    """Neither an Exception nor SystemExit/KeyboardInterrupt (GeneratorExit's kind)."""


async def test_an_async_hook_raising_a_base_exception_fails_the_call_not_the_worker() -> None:
    async def odd(_: Any) -> None:
        raise _Odd("odd")

    outcome = await registered("plan", odd, name="odd").plan(POD, view)
    assert [f.error for f in outcome.failures] == ["raised _Odd: odd"]


async def test_the_observers_loop_outlives_a_view_that_cannot_be_built() -> None:
    seen: list[str] = []
    runner = registered("observe", lambda v: seen.append(v.pod.name), name="watch")
    task = asyncio.create_task(runner.run())
    try:
        def broken() -> hooks.DecisionView:
            raise RuntimeError("no view")

        runner.observe(POD, broken)
        runner.observe(POD, decision_view)
        await asyncio.wait_for(runner.drain(), 5)
        assert seen == ["web"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


# ------------------------------------------------------------------------------------------------ metrics


def _returns_a_string(_: Any) -> str:
    return "yes"


@pytest.mark.parametrize(("fn", "reason"), [
    (_raises, "raised"), (_raises_async, "raised"), (_hangs_async, "timeout"), (_returns_a_string, "invalid"),
])
async def test_each_failure_is_counted_by_reason_and_each_call_timed(fn: Callable[..., Any], reason: str) -> None:
    metrics = KubeletMetrics("node-1")
    registry = hooks.Registry()
    registry.admit(name="policy", timeout=SHORT)(fn)
    runner = PolicyHooks(registry.hooks, metrics=metrics)
    await runner.admit(POD, request)
    await runner.admit(POD, request)
    out = metrics.exposition()
    assert f'kopflet_policy_hook_failures_total{{hook="policy",kind="admit",reason="{reason}"}} 2\n' in out
    assert 'kopflet_policy_hook_duration_seconds_count{hook="policy",kind="admit"} 2\n' in out


async def test_a_busy_hook_is_counted_but_not_timed_and_a_good_call_only_timed() -> None:
    metrics = KubeletMetrics("node-1")
    release = threading.Event()
    registry = hooks.Registry()
    registry.plan(name="slow", timeout=SHORT)(lambda _: release.wait(5) and None)
    registry.plan(name="fine")(lambda _: None)
    runner = PolicyHooks(registry.hooks, metrics=metrics)
    await runner.plan(POD, view)
    await runner.plan(POD, view)  # slow: still busy
    release.set()
    out = metrics.exposition()
    assert 'kopflet_policy_hook_failures_total{hook="slow",kind="plan",reason="timeout"} 1\n' in out
    assert 'kopflet_policy_hook_failures_total{hook="slow",kind="plan",reason="busy"} 1\n' in out
    assert 'kopflet_policy_hook_duration_seconds_count{hook="slow",kind="plan"} 1\n' in out
    assert 'kopflet_policy_hook_duration_seconds_count{hook="fine",kind="plan"} 2\n' in out
    assert 'hook="fine",kind="plan",reason=' not in out


async def test_dropped_observations_are_counted() -> None:
    metrics = KubeletMetrics("node-1")
    registry = hooks.Registry()
    registry.observe(lambda _: None)
    runner = PolicyHooks(registry.hooks, queue_size=1, metrics=metrics)
    for _ in range(4):
        runner.observe(POD, decision_view)
    assert "kopflet_policy_hook_observations_dropped_total 3\n" in metrics.exposition()
