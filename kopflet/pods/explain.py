"""
Why a pod is in its state: the pod worker's last decisions, as `kopflet explain <namespace>/<pod>` and the kubelet
API's ``/debug/pods/<namespace>/<name>`` show them.

No kubelet answers this without reading its log at a high verbosity. Here every sync's decision (`decide.decide`'s
`Plan`, and the `Observation` it was made from) is summarised by `record` into a frozen `Decision`: the inputs (the
phase, each container's newest instance with its exit code, restart count and probe results), the rules that
fired (admission, each container's start, kill or back-off with the rule's own words, the pod's kill, teardown,
delete), the waits the status shows (image pull back-off, volumes not ready, init containers running) and when
the worker looks again. `record` only reads what the decision computed: a reason the plan does not carry is added
where it is decided (`Plan.reason`, `Plan.wake_reason`, `PodActions.start_reasons`), never re-derived here.

Each worker keeps the last `RING_SIZE` decisions in a `Ring`; consecutive decisions that differ only in their time
(a pod in sync, resynced every minute) are kept as one, counted, so the ring holds what changed. The renderings
end with the pod's last start, step by step (`kopflet.pods.timeline`), when the worker has one. Pure.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kopflet import gotext
from kopflet.allocation import policy
from kopflet.api import spec, times
from kopflet.container import podstate
from kopflet.container.sync_result import CRASH_LOOP_BACK_OFF
from kopflet.kuberuntime import reconciler
from kopflet.pods import timeline as timelines
from kopflet.pods.decide import Lifecycle, Observation, Plan
from kopflet.status import generate

RING_SIZE = 20
"""Decisions kept per pod."""

INIT, SIDECAR, CONTAINER, EPHEMERAL = "init container", "sidecar", "container", "ephemeral container"
HELD_BACK = "restart held back"
_WAIT_CONDITIONS = (generate.INITIALIZED, policy.POD_RESIZE_PENDING)
"""Pod conditions that, False or True respectively, say what the pod waits for."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ContainerInput:
    """One container as the decision saw it: its newest runtime instance and the prober's verdicts on it."""

    name: str
    kind: str
    """`CONTAINER`, `INIT`, `SIDECAR` or `EPHEMERAL`."""
    state: str = ""
    """The newest instance's runtime state (running, exited, created, unknown); "" when it has none."""
    exit_code: int | None = None
    reason: str = ""
    """The runtime's reason for an exited instance (Completed, Error, OOMKilled)."""
    restart_count: int = 0
    started_at: datetime.datetime | None = None
    finished_at: datetime.datetime | None = None
    ready: bool | None = None
    """The readiness probe's result (None: none yet)."""
    started: bool | None = None
    """The startup probe's result (None: none yet)."""
    liveness_failed: bool = False
    startup_failed: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class Rule:
    """A rule that fired: what it does to whom, in the rule's own words, and until when for a back-off."""

    subject: str
    """``pod``, ``sandbox``, ``status``, ``volumes``, ``runtime`` or ``<kind> <name>``."""
    action: str
    reason: str = ""
    until: datetime.datetime | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Wait:
    """Something the pod waits for: a container's waiting reason, a condition, an error of the previous steps."""

    subject: str
    reason: str
    message: str = ""
    until: datetime.datetime | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Decision:
    """One sync's decision, summarised."""

    time: datetime.datetime
    sync: str
    """The sync's kind, as kubelet_pod_worker_duration_seconds' operation_type (create, update, sync, kill)."""
    lifecycle: str
    phase: str
    """The phase the decision started from (the status the agent wrote last)."""
    reason: str = ""
    """Why the pod is in this lifecycle, or why the sync takes no steps."""
    containers: tuple[ContainerInput, ...] = ()
    rules: tuple[Rule, ...] = ()
    waits: tuple[Wait, ...] = ()
    events: tuple[str, ...] = ()
    """The events the decision posts, ``<type> <reason>: <message>``."""
    changes_runtime: bool = False
    next_at: datetime.datetime
    next_reason: str = ""
    repeats: int = 1
    """How many consecutive syncs made this same decision (the first at `time`, the last at `last_time`)."""
    last_time: datetime.datetime | None = None

    def same_as(self, other: Decision) -> bool:
        """The same decision made again: equal but for the times and the sync's kind."""
        def key(d: Decision) -> Decision:
            return dataclasses.replace(d, time=_EPOCH, sync="", next_at=_EPOCH, repeats=1, last_time=None)
        return key(self) == key(other)


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


class Ring:
    """The last decisions of one pod, oldest first; a decision made again is counted on the last one."""

    def __init__(self, size: int = RING_SIZE) -> None:
        self._items: collections.deque[Decision] = collections.deque(maxlen=size)

    def add(self, decision: Decision) -> None:
        last = self._items[-1] if self._items else None
        if last is not None and last.same_as(decision):
            self._items[-1] = dataclasses.replace(last, repeats=last.repeats + 1, last_time=decision.time,
                                                  next_at=decision.next_at)
            return
        self._items.append(decision)

    def decisions(self) -> tuple[Decision, ...]:
        return tuple(self._items)

    def __len__(self) -> int:
        return len(self._items)


# ------------------------------------------------------------------------------------------------------ record


def record(obs: Observation, plan: Plan, now: datetime.datetime, *, sync: str = "") -> Decision:
    """The decision `plan`, made from `obs`, summarised: nothing is decided again."""
    previous: Mapping[str, Any] = obs.body.get("status") or {}
    pod = plan.pod if obs.pod is not None else None
    kinds = _kinds(pod) if pod is not None else {}
    actions = plan.actions
    return Decision(
        time=now, sync=sync, lifecycle=str(plan.lifecycle), phase=str(previous.get("phase") or ""),
        reason=plan.reason, containers=_inputs(obs, kinds) if not obs.gone else (),
        rules=tuple(_rules(obs, plan, kinds, now)),
        waits=tuple(_waits(obs, plan, kinds, actions, now)),
        events=tuple(f"{e.type} {e.reason}: {e.message}" for e in plan.events),
        changes_runtime=plan.changes_runtime,
        next_at=now + datetime.timedelta(seconds=plan.wake_after), next_reason=plan.wake_reason)


def _kinds(pod: spec.Pod) -> dict[str, str]:
    kinds = {c.name: SIDECAR if c.is_sidecar else INIT for c in pod.spec.init_containers}
    kinds.update({c.name: CONTAINER for c in pod.spec.containers})
    kinds.update({c.name: EPHEMERAL for c in pod.spec.ephemeral_containers})
    return kinds


def _until(now: datetime.datetime, seconds: float | None) -> datetime.datetime | None:
    """`now` + `seconds`, to the second: the same back-off judged at two syncs ends at the same time."""
    if seconds is None:
        return None
    return (now + datetime.timedelta(seconds=seconds + 0.5)).replace(microsecond=0)


def _subject(name: str, kinds: Mapping[str, str]) -> str:
    return f"{kinds.get(name, CONTAINER)} {name}"


def _time(nanoseconds: int) -> datetime.datetime | None:
    return datetime.datetime.fromtimestamp(nanoseconds / 1e9, datetime.UTC) if nanoseconds else None


def _inputs(obs: Observation, kinds: Mapping[str, str]) -> tuple[ContainerInput, ...]:
    """Each container of the spec, in spec order (init, regular, ephemeral), with its newest instance."""
    probes = obs.probes
    out = []
    for name, kind in kinds.items():
        info = obs.runtime.latest_container(name)
        if info is None:
            out.append(ContainerInput(name=name, kind=kind))
            continue
        out.append(ContainerInput(
            name=name, kind=kind, state=str(info.state),
            exit_code=info.exit_code if info.state is podstate.State.EXITED else None,
            reason=info.reason if info.state is podstate.State.EXITED else "",
            restart_count=info.restart_count, started_at=_time(info.started_at), finished_at=_time(info.finished_at),
            ready=probes.readiness.get(info.id), started=probes.started.get(info.id),
            liveness_failed=info.id in probes.liveness_failures, startup_failed=info.id in probes.startup_failures))
    return tuple(out)


def _rules(obs: Observation, plan: Plan, kinds: Mapping[str, str], now: datetime.datetime) -> Iterable[Rule]:
    if plan.lifecycle is Lifecycle.REJECTED:
        yield Rule(subject="pod", action="reject", reason=plan.reason)
    elif plan.lifecycle is Lifecycle.INVALID:
        yield Rule(subject="pod", action="refuse the spec", reason=plan.reason)
    elif plan.admitted and not obs.memory.admitted:
        yield Rule(subject="pod", action="admit")
    if plan.allocate is not None:
        yield Rule(subject="pod", action="record the allocated resources")
    if plan.teardown:
        yield Rule(subject="pod", action="tear down", reason=plan.reason)
    if plan.kill_pod:
        grace = f" (grace period {plan.kill_grace}s)" if plan.kill_grace is not None else ""
        yield Rule(subject="pod", action=f"kill{grace}", reason=plan.reason)
    actions = plan.actions
    if actions is not None:
        yield from _action_rules(obs, actions, kinds, now)
    resizing = plan.resize
    if resizing is not None and (resizing.memory_updates or resizing.cpu_updates
                                 or resizing.update_pod_level_resources):
        names = sorted({u.name for u in (*resizing.memory_updates, *resizing.cpu_updates)})
        yield Rule(subject="pod", action="resize in place",
                   reason=f"update the resources of {', '.join(names)}" if names else "update the pod's resources")
    for hook, action, reason in plan.hook_rules:
        yield Rule(subject=f"policy hook {hook}", action=action, reason=reason)
    if plan.status is not None:
        yield Rule(subject="status", action="write", reason=f"phase {plan.status.get('phase', '')}")
    if plan.release_volumes:
        yield Rule(subject="volumes", action="release", reason="the pod is terminal and nothing of it runs")
    if plan.delete:
        yield Rule(subject="pod", action="delete from the API", reason="once its final status is written")
    if plan.evict is not None and (plan.evict.containers or plan.evict.sandboxes):
        yield Rule(subject="runtime", action="remove dead instances",
                   reason=f"{len(plan.evict.containers)} containers, {len(plan.evict.sandboxes)} sandboxes beyond "
                          f"the garbage collector's limits")


def _action_rules(obs: Observation, actions: reconciler.PodActions, kinds: Mapping[str, str],
                  now: datetime.datetime) -> Iterable[Rule]:
    """SyncPod's steps (upstream computePodActions' podActions) with the reasons the reconciler gave."""
    if actions.create_sandbox:  # whatever still runs of the pod is killed first (upstream SyncPod)
        action = "re-create" if actions.sandbox_id else "create"
        yield Rule(subject="sandbox", action=f"{action} (attempt {actions.attempt})", reason=actions.reason)
    elif actions.kill_pod:
        yield Rule(subject="pod", action="kill", reason=actions.reason)
    for info in actions.containers_to_kill.values():
        reason = f"{info.message} ({info.reason})" if info.reason else info.message
        yield Rule(subject=_subject(info.name, kinds), action="kill", reason=reason)
    for reset in actions.containers_to_reset:
        yield Rule(subject=_subject(reset.name, kinds), action="kill and remove" if reset.kill else "remove",
                   reason=reconciler.REASON_RESTART_ALL_CONTAINERS)
    for name in actions.ephemeral_containers_to_start:
        yield Rule(subject=_subject(name, kinds), action="start", reason=reconciler.NOT_STARTED)
    for name in (*actions.init_containers_to_start, *actions.containers_to_start):
        ran = obs.runtime.latest_container(name) is not None
        yield Rule(subject=_subject(name, kinds), action="restart" if ran else "start",
                   reason=actions.start_reasons.get(name, ""))
    for name, message in actions.containers_in_backoff.items():
        why = actions.start_reasons.get(name, "")
        yield Rule(subject=_subject(name, kinds), action=HELD_BACK, reason=f"{why}; {message}" if why else message,
                   until=_until(now, actions.backoff_remaining.get(name)))


def _waits(obs: Observation, plan: Plan, kinds: Mapping[str, str], actions: reconciler.PodActions | None,
           now: datetime.datetime) -> Iterable[Wait]:
    """What the status this decision writes (else the one written last) says the pod waits for, and what the
    previous steps could not do."""
    status: Mapping[str, Any] = plan.status if plan.status is not None else (obs.body.get("status") or {})
    remaining = actions.backoff_remaining if actions is not None else {}
    for condition in status.get("conditions") or ():
        kind = condition.get("type")
        waiting = condition.get("status") == ("False" if kind == generate.INITIALIZED else "True")
        if kind in _WAIT_CONDITIONS and waiting:
            yield Wait(subject="pod", reason=str(condition.get("reason") or kind),
                       message=str(condition.get("message") or ""))
    for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        for item in status.get(key) or ():
            name = str(item.get("name", ""))
            state = item.get("state") or {}
            waiting = state.get("waiting")
            if isinstance(waiting, Mapping):
                left = remaining.get(name) if waiting.get("reason") == CRASH_LOOP_BACK_OFF else None
                yield Wait(subject=_subject(name, kinds), reason=str(waiting.get("reason") or ""),
                           message=str(waiting.get("message") or ""), until=_until(now, left))
            elif key == "initContainerStatuses" and "running" in state and kinds.get(name) == INIT:
                yield Wait(subject=_subject(name, kinds), reason="Running",
                           message="the containers after it start once it exits 0")
    last = obs.memory.last
    if last is not None and obs.memory.followup:
        if last.volume_error:
            yield Wait(subject="volumes", reason="not ready", message=last.volume_error)
        if last.sandbox_error:
            yield Wait(subject="sandbox", reason="FailedCreatePodSandBox", message=last.sandbox_error)
        if last.resize_error:
            yield Wait(subject="pod", reason="resize failed", message=last.resize_error)


# ------------------------------------------------------------------------------------------------------ render


def _clock(at: datetime.datetime) -> str:
    return at.astimezone(datetime.UTC).strftime("%H:%M:%S")


def _after(at: datetime.datetime, since: datetime.datetime) -> str:
    """``12:03:10, in 40s``."""
    left = (at - since).total_seconds()
    if left <= 0:
        return _clock(at)
    return f"{_clock(at)}, in {gotext.go_duration(round(left) if left >= 1 else round(left, 1))}"


def to_json(decisions: Sequence[Decision], *, namespace: str = "", name: str = "", uid: str = "",
            timeline: timelines.Timeline | None = None) -> dict[str, Any]:
    """The decisions as JSON (oldest first; times RFC 3339 UTC), what ``/debug/pods/<ns>/<name>`` serves, with the
    last start's timeline as ``startTimeline`` (null: none)."""
    def clean(value: Any) -> Any:
        if isinstance(value, datetime.datetime):
            return times.micro_timestamp(value)
        if isinstance(value, dict):
            return {_camel(k): clean(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [clean(v) for v in value]
        return value
    return {"namespace": namespace, "name": name, "uid": uid,
            "decisions": [clean(dataclasses.asdict(d)) for d in decisions],
            "startTimeline": timelines.to_json(timeline) if timeline is not None else None}


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part.title() for part in rest)


def _describe(c: ContainerInput) -> str:
    if not c.state:
        return "no instance"
    parts = [c.state]
    if c.exit_code is not None:
        parts = [f"exited {c.exit_code}" + (f" ({c.reason})" if c.reason else "")]
        if c.finished_at is not None:
            parts[0] += f" at {_clock(c.finished_at)}"
    elif c.started_at is not None and c.state == str(podstate.State.RUNNING):
        parts[0] += f" since {_clock(c.started_at)}"
    parts.append(f"restarts {c.restart_count}")
    if c.liveness_failed:
        parts.append("liveness probe failed")
    if c.startup_failed:
        parts.append("startup probe failed")
    if c.started is not None:
        parts.append("started" if c.started else "not started (startup probe)")
    if c.ready is not None:
        parts.append("ready" if c.ready else "not ready")
    return ", ".join(parts)


def render_text(decisions: Sequence[Decision], *, namespace: str = "", name: str = "", uid: str = "",
                timeline: timelines.Timeline | None = None) -> str:
    """The decisions for people, oldest first: each with its inputs, the rules that fired (``container app:
    restart held back — exited 137 (Error), restartPolicy Always; back-off 40s ..., until 12:03:10``), what the
    pod waits for and what comes next; then the last start's timeline, when there is one."""
    lines = []
    if name:
        lines.append(f"pod {namespace}/{name}" + (f" (uid {uid})" if uid else "") +
                     f": {len(decisions)} decision{'s' if len(decisions) != 1 else ''}, oldest first, times UTC")
    if not decisions:
        lines.append("no decision yet")
    for d in decisions:
        when = d.time.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")
        if d.repeats > 1 and d.last_time is not None:
            when += f" .. {_clock(d.last_time)} ({d.repeats} syncs)"
        head = f"{when} {f'[{d.sync}] ' if d.sync else ''}{d.lifecycle}" + (f", phase {d.phase}" if d.phase else "")
        lines.extend(["", head])
        if d.reason:
            lines.append(f"  why: {d.reason}")
        for c in d.containers:
            lines.append(f"  {c.kind} {c.name}: {_describe(c)}")
        for r in d.rules:
            text = f"  -> {r.subject}: {r.action}" + (f" — {r.reason}" if r.reason else "")
            if r.until is not None:
                text += f", until {_after(r.until, d.time)}"
            lines.append(text)
        if not d.changes_runtime and d.lifecycle == str(Lifecycle.SYNCING) and \
                not any(r.subject not in ("status", "runtime") for r in d.rules):
            lines.append("  -> nothing to change")
        held = {r.subject for r in d.rules if r.action == HELD_BACK}
        for w in d.waits:
            if w.subject in held and w.reason == CRASH_LOOP_BACK_OFF:
                continue  # said by its rule
            text = f"  waiting: {w.subject}: {w.reason}" + (f" — {w.message}" if w.message else "")
            if w.until is not None:
                text += f", until {_after(w.until, d.time)}"
            lines.append(text)
        for event in d.events:
            lines.append(f"  event: {event}")
        latest = d.last_time if d.repeats > 1 and d.last_time is not None else d.time
        at_once = d.next_at <= latest
        lines.append(f"  next: {'at once' if at_once else _after(d.next_at, latest)}" +
                     (f" — {d.next_reason}" if d.next_reason else ""))
    if timeline is not None:
        lines.extend(["", *timelines.render_lines(timeline)])
    return "\n".join(lines) + "\n"
