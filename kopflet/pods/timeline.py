"""
Where a pod start's time went: from the agent first seeing the pod until it is Ready, step by step (admission, the
volumes, the sandbox, each image pull, each container's create and start, until Ready), as `kopflet explain` shows
it and kopflet_pod_start_step_duration_seconds counts it.

Upstream's pod start metrics (kubelet_pod_start_duration_seconds, kubelet_pod_start_sli_duration_seconds) are one
number per pod, and its traces (KubeletTracing) are per sync and per CRI call, not per start. Here the I/O side times
each step where it happens (`time.monotonic`, `kopflet.container.sync_result.StepTime`), the pod worker folds them
into the pod's `Timeline` with `add_step` and ends it with `finish` once the status it writes says Ready (or the pod
ended first). Times are monotonic seconds with one wall-clock anchor, so a clock step changes no duration.

A step tried again after a failure (an image pull backing off, volumes waiting for a ConfigMap) is one step from its
first attempt to the one that worked, with its attempts counted; once a step is done, the same step again in this
start (the volumes are set up on every sync) changes nothing. Pure.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any, Final

from kopflet import gotext
from kopflet.api import times
from kopflet.container.sync_result import ADMISSION, CREATE, IMAGE_PULL, SANDBOX, START, UNTIL_READY, VOLUMES

READY: Final = "Ready"
"""The outcome of a start that reached Ready; a pod that ended first ends its start with its phase."""
_TERMINAL = ("Succeeded", "Failed")

METRIC_STEPS: Final[Mapping[str, str]] = {
    ADMISSION: "admission", VOLUMES: "volumes", SANDBOX: "sandbox", IMAGE_PULL: "image_pull",
    CREATE: "container_create", START: "container_start", UNTIL_READY: "until_ready",
}
"""The ``step`` label of kopflet_pod_start_step_duration_seconds for each kind of step (no image or container
names: the label stays bounded)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Step:
    """One step of a start: its kind, what it was for (an image, a container; "" for the pod's own), from its first
    attempt's start to its last attempt's end (monotonic seconds)."""

    kind: str
    detail: str = ""
    start: float
    end: float
    attempts: int = 1
    error: str = ""
    """Why the last attempt failed ("": the step is done)."""

    @property
    def name(self) -> str:
        """``image pull busybox:1.36``, ``create web``, ``sandbox``."""
        return f"{self.kind} {self.detail}" if self.detail else self.kind

    @property
    def done(self) -> bool:
        return not self.error

    @property
    def duration(self) -> float:
        return max(0.0, self.end - self.start)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Timeline:
    """One pod start, from `origin` (monotonic; `started_at` on the wall clock)."""

    started_at: datetime.datetime
    origin: float
    steps: tuple[Step, ...] = ()
    """In the order they began."""
    outcome: str = ""
    """`READY`, the phase the pod ended in before it was Ready, or "" while it is starting."""
    ended: float | None = None
    """When the start ended (monotonic), None while it is starting."""

    @property
    def finished(self) -> bool:
        return self.ended is not None

    def at(self, moment: float) -> datetime.datetime:
        """The wall-clock time of monotonic `moment`."""
        return self.started_at + datetime.timedelta(seconds=moment - self.origin)


def begin(started_at: datetime.datetime, origin: float) -> Timeline:
    """A start beginning at monotonic `origin`, `started_at` on the wall clock."""
    return Timeline(started_at=started_at, origin=origin)


def add_step(timeline: Timeline, kind: str, detail: str, start: float, end: float, error: str = "") -> Timeline:
    """`timeline` with one attempt at a step: a new step, or the same step's next attempt after a failed one (one
    step from the first attempt to this one). A step already done, or a finished timeline, stays as it is."""
    if timeline.finished:
        return timeline
    steps = list(timeline.steps)
    for index, step in enumerate(steps):
        if (step.kind, step.detail) != (kind, detail):
            continue
        if step.done:
            return timeline  # the first time it was done stands (the volumes are set up again on every sync)
        steps[index] = dataclasses.replace(step, end=max(end, step.end), attempts=step.attempts + 1, error=error)
        return dataclasses.replace(timeline, steps=tuple(steps))
    steps.append(Step(kind=kind, detail=detail, start=start, end=max(end, start), error=error))
    return dataclasses.replace(timeline, steps=tuple(sorted(steps, key=lambda s: s.start)))


def finish(timeline: Timeline, at: float, how: str = READY) -> Timeline:
    """The start ended at monotonic `at`: Ready (`READY`, with the ``until ready`` step from the end of the last
    step, or from the start when there is none) or with the pod's phase. A finished timeline stays as it is."""
    if timeline.finished:
        return timeline
    steps = timeline.steps
    if how == READY:
        since = max((s.end for s in steps), default=timeline.origin)
        steps = (*steps, Step(kind=UNTIL_READY, start=since, end=max(at, since)))
    return dataclasses.replace(timeline, steps=steps, outcome=how, ended=max(at, timeline.origin))


def outcome(status: Mapping[str, Any]) -> str:
    """How a pod status ends a start: `READY` when its Ready condition is True, its phase when the pod ended
    (Succeeded, Failed), "" while it is still starting."""
    for condition in status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "Ready" and condition.get("status") == "True":
            return READY
    phase = status.get("phase")
    return str(phase) if phase in _TERMINAL else ""


def step_durations(timeline: Timeline) -> tuple[tuple[str, float], ...]:
    """Each step's ``step`` label (`METRIC_STEPS`) and seconds, in order: what the histogram observes."""
    return tuple((METRIC_STEPS.get(s.kind, s.kind.replace(" ", "_")), s.duration) for s in timeline.steps)


# ------------------------------------------------------------------------------------------------------ render


def _took(seconds: float) -> str:
    """To the millisecond, as the kubelet's image pull events: ``12ms``, ``1.234s``, ``1m2.5s``."""
    return gotext.go_duration(max(0.0, seconds), truncate=0.001)


def _clock(at: datetime.datetime) -> str:
    return at.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def render_lines(timeline: Timeline) -> list[str]:
    """The start for people: when it began and how it ended, then each step with when it began after the start
    (``+460ms``), how long it took and, for one tried again or failing, its attempts and last error."""
    if timeline.outcome == READY and timeline.ended is not None:
        how = f"Ready after {_took(timeline.ended - timeline.origin)}"
    elif timeline.ended is not None:
        how = f"ended {timeline.outcome} after {_took(timeline.ended - timeline.origin)}, never Ready"
    else:
        how = "not Ready yet"
    lines = [f"start timeline, from {_clock(timeline.started_at)} UTC: {how}"]
    if not timeline.steps:
        lines.append("  no step yet")
    for step in timeline.steps:
        text = f"  {'+' + _took(step.start - timeline.origin):<10}{_took(step.duration):>8}  {step.name}"
        if step.attempts > 1:
            text += f" ({step.attempts} attempts)"
        if step.error:
            text += f" — failed: {step.error}"
        lines.append(text)
    return lines


def to_json(timeline: Timeline) -> dict[str, Any]:
    """The start as JSON: its start (RFC 3339 UTC), outcome ("" while starting), seconds until it ended, and each
    step with its name, kind, detail, start (RFC 3339 and seconds after the start), seconds, attempts and error."""
    return {
        "start": times.micro_timestamp(timeline.started_at), "outcome": timeline.outcome,
        "seconds": round(timeline.ended - timeline.origin, 6) if timeline.ended is not None else None,
        "steps": [{"name": s.name, "kind": s.kind, "detail": s.detail,
                   "start": times.micro_timestamp(timeline.at(s.start)),
                   "offsetSeconds": round(s.start - timeline.origin, 6), "seconds": round(s.duration, 6),
                   "attempts": s.attempts, "error": s.error} for s in timeline.steps],
    }

