"""kopflet.backoff: upstream flowcontrol.Backoff timelines on an explicit clock and keys."""

from __future__ import annotations

import itertools

import pytest

from kopflet.backoff import Backoff, crash_loop_key, image_pull_key

KEY = crash_loop_key("uid-1", "app", pod_name="web", namespace="shop", container_hash="3e36954e")


def test_delay_doubles_from_10s_to_a_300s_cap() -> None:
    b = Backoff()
    delays = []
    now = 1000.0
    for _ in range(8):
        delays.append(b.next(KEY, now))
        assert b.get(KEY) == delays[-1]
        now += delays[-1] + 1  # crash again right after each backoff ends
    assert delays == [10, 20, 40, 80, 160, 300, 300, 300]


def test_unknown_key_has_no_delay_and_is_not_in_backoff() -> None:
    b = Backoff()
    assert b.get(KEY) == 0.0
    assert not b.is_in_backoff_since(KEY, event_time=0.0, now=1.0)
    assert b.remaining(KEY, 0.0, 1.0) == 0.0
    assert KEY not in b and len(b) == 0


@pytest.mark.parametrize(("elapsed", "in_backoff"), [(0.0, True), (9.9, True), (10.0, False), (30.0, False)])
def test_in_backoff_until_the_delay_has_passed_since_the_event(elapsed: float, in_backoff: bool) -> None:
    b = Backoff()
    b.next(KEY, now=100.0)  # delay 10s
    assert b.is_in_backoff_since(KEY, event_time=100.0, now=100.0 + elapsed) is in_backoff
    assert b.remaining(KEY, 100.0, 100.0 + elapsed) == (pytest.approx(10.0 - elapsed) if in_backoff else 0.0)


def test_crash_loop_timeline_as_the_kubelet_drives_it() -> None:
    # The kubelet checks IsInBackOffSince(finishedAt) and, when out of backoff, calls Next(finishedAt)
    # right before starting. A container that crashes 1s after each start:
    b = Backoff()
    finished, starts = 0.0, []
    now = 0.0
    while len(starts) < 7:
        if b.is_in_backoff_since(KEY, finished, now):
            now += 1
            continue
        b.next(KEY, now, event_time=finished)
        starts.append(now)
        finished = now + 1
        now = finished
    gaps = [round(b_ - a - 1) for a, b_ in itertools.pairwise(starts)]
    assert gaps == [10, 20, 40, 80, 160, 300]


def test_entry_resets_after_ten_minutes_without_a_bump() -> None:
    b = Backoff()
    for t in (0.0, 20.0, 60.0):
        b.next(KEY, t)
    assert b.get(KEY) == 40
    assert b.next(KEY, 60.0 + 600.0) == 80        # exactly 2 x max later: still remembered
    assert b.next(KEY, 660.0 + 600.1) == 10       # more than 2 x max: starts over


def test_expiry_is_judged_against_the_event_time() -> None:
    # A container that ran cleanly for more than 10 minutes before crashing starts over at 10s,
    # even if the agent only notices later.
    b = Backoff()
    b.next(KEY, 0.0)
    b.next(KEY, 15.0)
    assert b.get(KEY) == 20
    assert not b.is_in_backoff_since(KEY, event_time=700.0, now=701.0)
    assert b.next(KEY, 705.0, event_time=700.0) == 10
    b.next(KEY, 720.0, event_time=716.0)
    assert b.get(KEY) == 20


def test_keys_are_independent() -> None:
    b = Backoff()
    other_container = crash_loop_key("uid-1", "sidecar", pod_name="web", namespace="shop", container_hash="1")
    other_pod = crash_loop_key("uid-2", "app", pod_name="web", namespace="shop", container_hash="3e36954e")
    changed_spec = crash_loop_key("uid-1", "app", pod_name="web", namespace="shop", container_hash="ffff")
    image = image_pull_key("uid-1", "app")  # same strings as a container key, still a different key
    for t in (0.0, 11.0, 32.0):
        b.next(KEY, t)
    b.next(image, 0.0)
    assert b.get(KEY) == 40
    assert b.get(image) == 10
    assert b.get(other_container) == b.get(other_pod) == b.get(changed_spec) == 0.0
    assert image != crash_loop_key("uid-1", "app")


def test_reset_forgets_a_key() -> None:
    b = Backoff()
    b.next(KEY, 0.0)
    b.next(KEY, 11.0)
    b.reset(KEY)
    b.reset(KEY)  # idempotent
    assert b.get(KEY) == 0.0
    assert b.next(KEY, 12.0) == 10


def test_gc_drops_only_entries_idle_for_more_than_twice_the_maximum() -> None:
    b = Backoff()
    old, fresh = image_pull_key("u", "old:1"), image_pull_key("u", "fresh:1")
    b.next(old, 0.0)
    b.next(fresh, 500.0)
    b.gc(now=600.0)
    assert old in b and fresh in b
    b.gc(now=600.5)
    assert old not in b and fresh in b and len(b) == 1


def test_custom_limits_and_validation() -> None:
    b = Backoff(initial=1.0, maximum=4.0)
    assert [b.next("k", float(t)) for t in range(5)] == [1, 2, 4, 4, 4]
    with pytest.raises(ValueError):
        Backoff(initial=0.0)
    with pytest.raises(ValueError):
        Backoff(initial=10.0, maximum=5.0)


def test_image_pull_backoff_is_judged_since_the_last_failure() -> None:
    """Upstream's image manager asks IsInBackOffSinceUpdate(now): pull again once the delay since the last
    failure has passed (10s, then 20s...), not only when the entry expires ten minutes later."""
    b = Backoff()
    assert not b.is_in_backoff_since_update(KEY, 50.0)
    b.next(KEY, 100.0)
    assert b.is_in_backoff_since_update(KEY, 109.9)
    assert not b.is_in_backoff_since_update(KEY, 110.0)
    b.next(KEY, 110.5)  # the retry failed too: 20s now
    assert b.is_in_backoff_since_update(KEY, 130.0)
    assert not b.is_in_backoff_since_update(KEY, 130.5)
