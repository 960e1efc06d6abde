"""kopflet.pods.timeline: a pod start's steps, table-driven (a step added, tried again, done; a start finished; the
status that ends it; the text, the JSON and the step histogram's labels), and explain's renderings ending with it.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from typing import Any

import pytest

from kopflet.pods import explain, timeline
from kopflet.pods.timeline import READY, Step, Timeline
from tests.unit.test_decide import UID

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
