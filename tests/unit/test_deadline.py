"""kopflet.lifecycle.deadline: activeDeadlineSeconds measured from status.startTime (upstream active_deadline.go)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from kopflet.api.spec import pod_from_body
from kopflet.lifecycle import deadline

NOW = datetime.datetime(2024, 6, 1, 12, 0, 0, tzinfo=datetime.UTC)


def pod(seconds: int | None) -> Any:
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "busybox"}]}
    if seconds is not None:
        spec["activeDeadlineSeconds"] = seconds
    return pod_from_body({"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": spec})


@pytest.mark.parametrize(("status", "expected"), [
    ({"startTime": "2024-06-01T11:50:00Z"}, datetime.datetime(2024, 6, 1, 11, 50, tzinfo=datetime.UTC)),
    ({"startTime": "2024-06-01T13:50:00+02:00"}, datetime.datetime(2024, 6, 1, 11, 50, tzinfo=datetime.UTC)),
    ({"startTime": datetime.datetime(2024, 6, 1, 11, 50)}, datetime.datetime(2024, 6, 1, 11, 50, tzinfo=datetime.UTC)),
    ({}, None),
    ({"startTime": ""}, None),
    ({"startTime": "yesterday"}, None),
    ({"startTime": 5}, None),
], ids=["Z", "offset", "parsed naive", "missing", "empty", "garbled", "wrong type"])
def test_start_time(status: dict[str, Any], expected: datetime.datetime | None) -> None:
    assert deadline.start_time(status) == expected


@pytest.mark.parametrize(("seconds", "started_ago", "left", "past"), [
    (600, 700, -100.0, True),
    (600, 600, 0.0, True),  # upstream: duration >= allowed duration
    (600, 599.5, 0.5, False),
    (600, None, None, False),  # no start time: the deadline cannot have passed
    (None, 7000, None, False),
])
def test_time_left_and_past_deadline(seconds: int | None, started_ago: float | None, left: float | None,
                                     past: bool) -> None:
    started = None if started_ago is None else NOW - datetime.timedelta(seconds=started_ago)
    assert deadline.time_left(pod(seconds), started, NOW) == left
    assert deadline.past_active_deadline(pod(seconds), started, NOW) is past


def test_reason_and_message_are_upstreams() -> None:
    assert deadline.REASON == "DeadlineExceeded"
    assert deadline.MESSAGE == "Pod was active on the node longer than the specified deadline"
