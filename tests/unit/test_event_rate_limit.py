"""eventRecordQPS / eventBurst: the event client's token bucket (client-go's rate limiter on x/time/rate), and the
broadcaster's queue of 1000."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from kopflet.apis.grpc import ratelimit
from kopflet.apis.grpc.ratelimit import Bucket, Limit
from kopflet.client import events
from kopflet.client.events import EventRecorder


def waits(limit: Limit, times: list[float]) -> list[float]:
    bucket, out = Bucket(), []
    for now in times:
        delay, bucket = ratelimit.reserve(limit, bucket, now)
        out.append(round(delay, 6))
    return out


@pytest.mark.parametrize(("limit", "times", "expected"), [
    # Full at first: `burst` go at once, then one every 1/qps, queued behind each other.
    (Limit(2, 3), [0, 0, 0, 0, 0], [0, 0, 0, 0.5, 1.0]),
    (Limit(50, 100), [0] * 101, [0] * 100 + [0.02]),
    # Tokens come back at qps, up to burst.
    (Limit(2, 3), [0, 0, 0, 1.0, 1.0, 1.0], [0, 0, 0, 0, 0, 0.5]),
    (Limit(1, 1), [0, 10, 10], [0, 0, 1.0]),
    # A debt is paid before new tokens count: the fourth at t=0.25 waits till 0.5.
    (Limit(2, 3), [0, 0, 0, 0.25], [0, 0, 0, 0.25]),
    # The clock going back gives no tokens.
    (Limit(1, 1), [5, 4], [0, 1.0]),
])
def test_reserve_is_x_time_rate_wait(limit: Limit, times: list[float], expected: list[float]) -> None:
    assert waits(limit, times) == expected


@pytest.mark.parametrize(("qps", "burst", "limit"), [
    (0, 100, None),  # server.go: QPS 0 becomes -1, no rate limiter
    (50, 100, Limit(50, 100)),  # the defaults
    (5, 0, Limit(5, 10)),  # rest.RESTClientFor: Burst 0 is DefaultBurst
    (1, 1, Limit(1, 1)),
])
def test_the_event_clients_limit(qps: int, burst: int, limit: Limit | None) -> None:
    assert events.event_limit(qps, burst) == limit


class TimedApi:
    """Records each write and the loop time it was made at."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str, float]] = []

    async def create_event(self, namespace: str, event: dict[str, Any]) -> dict[str, Any]:
        self.writes.append(("create", event["reason"], asyncio.get_running_loop().time()))
        return event

    async def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.writes.append(("patch", str(patch["count"]), asyncio.get_running_loop().time()))
        return patch


async def test_writes_past_the_burst_wait_their_turn_in_order() -> None:
    api = TimedApi()
    recorder = EventRecorder(api, "node-1", qps=20, burst=2)  # type: ignore[arg-type]
    start = asyncio.get_running_loop().time()
    for n in range(6):
        recorder.node_event("Normal", f"R{n}", "m")
    await recorder.flush()
    assert [reason for _, reason, _ in api.writes] == [f"R{n}" for n in range(6)]
    at = [when - start for _, _, when in api.writes]
    assert at[0] < 0.04 and at[1] < 0.04  # the burst
    for n in range(2, 6):  # then one every 50 ms
        assert at[n] >= (n - 1) * 0.05 - 0.005, at


async def test_repeats_counted_up_are_writes_too() -> None:
    api = TimedApi()
    recorder = EventRecorder(api, "node-1", qps=10, burst=1)  # type: ignore[arg-type]
    start = asyncio.get_running_loop().time()
    recorder.node_event("Warning", "Same", "m")
    await recorder.flush()
    recorder.node_event("Warning", "Same", "m")
    recorder.node_event("Warning", "Same", "m")
    await recorder.flush()
    assert [(kind, what) for kind, what, _ in api.writes] == [("create", "Same"), ("patch", "2"), ("patch", "3")]
    assert api.writes[2][2] - start >= 0.2 - 0.005


async def test_qps_zero_is_no_limit() -> None:
    api = TimedApi()
    recorder = EventRecorder(api, "node-1", qps=0, burst=1)  # type: ignore[arg-type]
    start = asyncio.get_running_loop().time()
    for n in range(300):
        recorder.node_event("Normal", f"R{n}", "m")
    await recorder.flush()
    assert len(api.writes) == 300
    assert api.writes[-1][2] - start < 1.0


async def test_past_the_queue_events_are_dropped(monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(events, "MAX_QUEUED_EVENTS", 3)
    api = TimedApi()
    recorder = EventRecorder(api, "node-1", qps=100, burst=1)  # type: ignore[arg-type]
    with caplog.at_level(logging.ERROR, logger="kopflet.client.events"):
        for n in range(5):
            recorder.node_event("Normal", f"R{n}", "m")
    await recorder.flush()
    assert [reason for _, reason, _ in api.writes] == ["R0", "R1", "R2"]
    assert caplog.text.count("Unable to record event: too many queued events, dropped event") == 2


def test_upstreams_numbers() -> None:
    assert (events.MAX_QUEUED_EVENTS, events.DEFAULT_BURST) == (1000, 10)


async def test_a_stopping_agent_waits_a_grace_for_queued_events_then_drops_them() -> None:
    api = TimedApi()
    recorder = EventRecorder(api, "node-1", qps=1, burst=1)  # type: ignore[arg-type]
    start = asyncio.get_running_loop().time()
    for n in range(10):  # one a second: ten would take nine seconds
        recorder.node_event("Normal", f"R{n}", "m")
    await recorder.flush(grace=0.3)
    assert asyncio.get_running_loop().time() - start < 1.0
    assert [reason for _, reason, _ in api.writes] == ["R0"]
    await recorder.flush()  # nothing left waiting
