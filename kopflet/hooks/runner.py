"""Call the policy hooks, each with its time limit, so that no hook can stop the agent.

- A coroutine hook runs as a task of its own on the agent's loop; at its time limit the task is cancelled and
  left behind (a hook that swallows the cancel does not hold the sync). ``SystemExit`` and ``KeyboardInterrupt``
  raised by a hook are caught like any error instead of stopping the loop.
- A plain hook runs in a daemon thread of its own, so a hook that blocks holds neither the loop, nor the agent's
  thread pool, nor its exit. A thread cannot be stopped: a hook that timed out is not called again while its last
  call still runs (each call in the meantime fails at once), so a hung hook holds one thread, not one per sync.

A failure (an exception, the time limit, a wrong return type) becomes a Warning event ``HookFailed`` on the pod and a
log line with the traceback; what the hook asked for in that call is dropped and the agent goes on with its own
decision (an admit hook with failure policy ``Fail`` rejects the pod instead).

Admit and plan hooks are awaited by the pod's worker (`kopflet.pods.workers`). Observers run in `run`, one decision
after the other in the order they were made, from a bounded queue: a slow observer delays other observers, never a
sync; when the queue is full, the newest decisions are not observed (counted in `dropped`, logged).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from kopflet.api import spec
from kopflet.api.events import WARNING
from kopflet.hooks import api
from kopflet.metrics import KubeletMetrics

logger = logging.getLogger(__name__)

OBSERVE_QUEUE = 1000
"""Decisions waiting for the observers at most."""


@dataclasses.dataclass(frozen=True)
class Failure:
    """A hook call that failed."""

    hook: api.Hook
    error: str
    """What went wrong: ``raised ValueError: ...``, ``timed out after 2s`` ..."""

    @property
    def rejects(self) -> bool:
        """The failure rejects the pod (an admit hook with failure policy Fail)."""
        return self.hook.kind == api.ADMIT and self.hook.failure_policy == api.FAIL

    @property
    def message(self) -> str:
        then = "the pod is rejected (failure policy Fail)" if self.rejects else "the default decision is used"
        return f"Policy hook {self.hook.name} ({self.hook.kind}) {self.error}; {then}"

    @property
    def event(self) -> api.HookEvent:
        return api.HookEvent(WARNING, api.HOOK_FAILED, api.truncate(self.message))


@dataclasses.dataclass(frozen=True)
class AdmitOutcome:
    """What the admit hooks said: the first rejection (None: admitted), who said it, and the events to post."""

    rejection: api.AdmitVerdict | None = None
    hook: str = ""
    failures: tuple[Failure, ...] = ()
    events: tuple[api.HookEvent, ...] = ()


@dataclasses.dataclass(frozen=True)
class PlanOutcome:
    """What the plan hooks asked for, by hook in their order, and the events to post."""

    changes: tuple[tuple[str, api.Rewrite], ...] = ()
    failures: tuple[Failure, ...] = ()
    events: tuple[api.HookEvent, ...] = ()


RAISED, TIMEOUT, BUSY, INVALID = "raised", "timeout", "busy", "invalid"
"""The ``reason`` label of kopflet_policy_hook_failures_total: the hook raised, ran past its limit, was still busy
from a call that did, or returned what its kind does not take."""


class _Failed(Exception):
    def __init__(self, error: str, exc: BaseException | None = None, *, reason: str = RAISED) -> None:
        super().__init__(error)
        self.error, self.exc, self.reason = error, exc, reason


class PolicyHooks:
    """The loaded hooks, called for the pod workers. `post_event` posts an observer's events (the workers post
    the admit and plan hooks' with their decision)."""

    def __init__(self, hooks: Iterable[api.Hook], *,
                 post_event: Callable[[spec.Pod, api.HookEvent], None] | None = None,
                 queue_size: int = OBSERVE_QUEUE, metrics: KubeletMetrics | None = None) -> None:
        self.hooks = tuple(hooks)
        self.metrics = metrics
        self.admits = tuple(h for h in self.hooks if h.kind == api.ADMIT)
        self.plans = tuple(h for h in self.hooks if h.kind == api.PLAN)
        self.observes = tuple(h for h in self.hooks if h.kind == api.OBSERVE)
        self.post_event = post_event
        self.dropped = 0
        """Decisions not observed because the queue was full."""
        self._queue: asyncio.Queue[tuple[spec.Pod, Callable[[], api.DecisionView]]] = asyncio.Queue(queue_size)
        self._busy: dict[int, int] = {}
        """The plain hooks (by id) with calls that timed out and still run, and how many."""
        self._abandoned: set[asyncio.Task[Any]] = set()

    # ------------------------------------------------------------------------------------------------ kinds

    async def admit(self, pod: spec.Pod, request: Callable[[], api.AdmitRequest]) -> AdmitOutcome:
        """Ask the admit hooks in order, each with a request of its own (`request()`); the first rejection ends it,
        as upstream's admit handlers."""
        failures: list[Failure] = []
        events: list[api.HookEvent] = []
        for hook in self.admits:
            view = request()
            try:
                verdict = await self._call(hook, view)
                if verdict is not None and not isinstance(verdict, api.AdmitVerdict):
                    raise _Failed(f"returned {_short(verdict)}, not an AdmitVerdict (allow() or reject()) or None",
                                  reason=INVALID)
            except _Failed as failed:
                failure = self._failed(pod, hook, failed)
                failures.append(failure)
                if failure.rejects:  # the rejection's own event says it
                    return AdmitOutcome(api.AdmitVerdict(False, api.HOOK_FAILED, api.truncate(failure.message)),
                                        hook.name, tuple(failures), tuple(events))
                events.append(failure.event)
                continue
            finally:
                view.seal()
            events += view.events
            if verdict is not None and not verdict.allowed:
                return AdmitOutcome(verdict, hook.name, tuple(failures), tuple(events))
        return AdmitOutcome(None, "", tuple(failures), tuple(events))

    async def plan(self, pod: spec.Pod, view: Callable[[], api.PlanView]) -> PlanOutcome:
        """Ask every plan hook in order, each with a view of its own (`view()`)."""
        changes: list[tuple[str, api.Rewrite]] = []
        failures: list[Failure] = []
        events: list[api.HookEvent] = []
        for hook in self.plans:
            current = view()
            try:
                result = await self._call(hook, current)
                if result is not None:
                    raise _Failed(f"returned {_short(result)}: a plan hook changes the plan through its view and "
                                  f"returns None", reason=INVALID)
            except _Failed as failed:
                failure = self._failed(pod, hook, failed)
                failures.append(failure)
                events.append(failure.event)
                continue
            finally:
                current.seal()
            rewrite = current.changes()
            changes.append((hook.name, rewrite))
            events += rewrite.events
        return PlanOutcome(tuple(changes), tuple(failures), tuple(events))

    def observe(self, pod: spec.Pod, view: Callable[[], api.DecisionView]) -> None:
        """Queue a decision for the observers (`run` calls them, each with a view of its own)."""
        if not self.observes:
            return
        try:
            self._queue.put_nowait((pod, view))
        except asyncio.QueueFull:
            self.dropped += 1
            if self.metrics is not None:
                self.metrics.policy_hook_observations_dropped.inc()
            if self.dropped == 1 or self.dropped % 100 == 0:
                logger.warning(f"policy hook observers are behind: {self.dropped} decisions not observed so far "
                               f"(the queue holds {self._queue.maxsize})")

    async def run(self) -> None:
        """The observers' loop: each queued decision to each observer, in order."""
        while True:
            pod, view = await self._queue.get()
            try:
                await self._observe(pod, view)
            except Exception:  # a view that cannot be built, an event that cannot be posted: the next goes on
                logger.exception(f"pod {pod.namespace}/{pod.name}: the policy hook observers failed")
            finally:
                self._queue.task_done()

    async def drain(self) -> None:
        """Wait until every queued decision was observed (`run` must be running)."""
        await self._queue.join()

    async def _observe(self, pod: spec.Pod, view: Callable[[], api.DecisionView]) -> None:
        for hook in self.observes:
            current = view()
            try:
                result = await self._call(hook, current)
                if result is not None:
                    raise _Failed(f"returned {_short(result)}: an observe hook returns None", reason=INVALID)
            except _Failed as failed:
                self._post(pod, (self._failed(pod, hook, failed).event,))
                continue
            finally:
                current.seal()
            self._post(pod, current.events)

    # ------------------------------------------------------------------------------------------------- calls

    async def _call(self, hook: api.Hook, view: Any) -> Any:
        """The hook's answer for `view`, or _Failed; timed (kopflet_policy_hook_duration_seconds) unless it was
        not called (busy)."""
        began = time.monotonic()
        try:
            value = await (self._call_async(hook, view) if hook.is_async else self._call_in_thread(hook, view))
        except _Failed as failed:
            if failed.reason != BUSY:
                self._took(hook, began)
            raise
        self._took(hook, began)
        return value

    def _took(self, hook: api.Hook, began: float) -> None:
        if self.metrics is not None:
            self.metrics.policy_hook_duration.labels(hook.name, hook.kind).observe(time.monotonic() - began)

    async def _call_async(self, hook: api.Hook, view: Any) -> Any:
        async def guarded() -> tuple[bool, Any]:
            try:
                return True, await hook.fn(view)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # SystemExit, KeyboardInterrupt and the rest: never out of the worker
                return False, exc

        task = asyncio.ensure_future(guarded())
        try:
            done, _ = await asyncio.wait({task}, timeout=hook.timeout)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if not done:
            task.cancel()  # not awaited: a hook that ignores the cancel does not hold the sync
            self._abandoned.add(task)
            task.add_done_callback(self._forget)
            raise _Failed(f"timed out after {hook.timeout:g}s", reason=TIMEOUT)
        try:
            ok, value = task.result()
        except asyncio.CancelledError:
            raise _Failed("was cancelled") from None
        except Exception as exc:
            raise _Failed(f"raised {type(exc).__name__}: {exc}", exc) from None
        if not ok:
            raise _Failed(f"raised {type(value).__name__}: {value}", value)
        return value

    async def _call_in_thread(self, hook: api.Hook, view: Any) -> Any:
        key = id(hook.fn)
        if key in self._busy:
            raise _Failed(f"is still running from an earlier call that timed out (after {hook.timeout:g}s)",
                          reason=BUSY)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def settle(value: Any, exc: BaseException | None) -> None:
            if future.done():  # timed out: nobody waits for it; one fewer of the hook's calls still running
                left = self._busy.get(key, 0) - 1
                if left > 0:
                    self._busy[key] = left
                else:
                    self._busy.pop(key, None)
                return
            if exc is not None:
                future.set_exception(_Failed(f"raised {type(exc).__name__}: {exc}", exc))
            else:
                future.set_result(value)

        def work() -> None:
            value, error = None, None
            try:
                value = hook.fn(view)
            except BaseException as exc:  # SystemExit too: a thread's, never the agent's
                error = exc
            with contextlib.suppress(RuntimeError):  # the loop is closed: the agent is gone
                loop.call_soon_threadsafe(settle, value, error)

        threading.Thread(target=work, name=f"kopflet-hook {hook.name}", daemon=True).start()
        try:
            done, _ = await asyncio.wait({future}, timeout=hook.timeout)
        except asyncio.CancelledError:
            future.cancel()
            raise
        if not done:
            future.cancel()
            self._busy[key] = self._busy.get(key, 0) + 1  # until its thread ends (settle)
            raise _Failed(f"timed out after {hook.timeout:g}s", reason=TIMEOUT)
        return future.result()

    def _forget(self, task: asyncio.Task[Any]) -> None:
        self._abandoned.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: no "never retrieved" noise for a hook that was given up on

    def _failed(self, pod: spec.Pod, hook: api.Hook, failed: _Failed) -> Failure:
        failure = Failure(hook, failed.error)
        if self.metrics is not None:
            self.metrics.policy_hook_failures.labels(hook.name, hook.kind, failed.reason).inc()
        exc = failed.exc
        logger.warning(f"pod {pod.namespace}/{pod.name}: {failure.message}",
                       exc_info=(type(exc), exc, exc.__traceback__) if exc is not None else None)
        return failure

    def _post(self, pod: spec.Pod, events: Iterable[api.HookEvent]) -> None:
        if self.post_event is None:
            return
        for event in events:
            self.post_event(pod, event)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
