"""kopflet.nodeshutdown.rules: upstream nodeshutdown's pure parts (the grace periods, the groups, the status, the
texts and the state file), with Go's outputs written out where Go formats."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from kopflet.eviction import helpers as eviction
from kopflet.lifecycle import admission
from kopflet.nodeshutdown import rules
from kopflet.nodeshutdown.rules import ShutdownGracePeriodByPodPriority as Period
from kopflet.pods import decide

CRITICAL = 2_000_000_000  # scheduling.SystemCriticalPriority
HIGHEST_USER_DEFINABLE = 1_000_000_000  # scheduling.HighestUserDefinablePriority
UTC = datetime.UTC


# ------------------------------------------------------------------------------------------ grace periods

@pytest.mark.parametrize(("grace", "critical", "expected"), [
    # upstream Test_migrateConfig
    (300.0, 120.0, (Period(0, 180), Period(CRITICAL, 120))),  # both
    (100.0, 0.0, (Period(0, 100), Period(CRITICAL, 0))),  # only the grace period: critical pods get 0s
    (0.0, 0.0, ()),  # empty: off
    (1.0, 100.0, ()),  # the critical pods' longer than the whole: off
    # and more
    (0.0, 10.0, ()),  # no grace period: off, whatever the critical pods'
    (30.0, 30.0, (Period(0, 0), Period(CRITICAL, 30))),
    (1.5, 0.0, (Period(0, 1), Period(CRITICAL, 0))),  # whole seconds, truncated (Duration / time.Second)
    (2.5, 1.2, (Period(0, 1), Period(CRITICAL, 1))),  # 1.3s and 1.2s
    (10.0, 9.999999999, (Period(0, 0), Period(CRITICAL, 9))),  # on nanoseconds: 1ns and 9.999999999s
    (-5.0, 0.0, ()),
    (5.0, -1.0, ()),  # the critical pods' negative: off
])
def test_migrate_config(grace: float, critical: float, expected: tuple[Period, ...]) -> None:
    assert rules.migrate_config(grace, critical) == expected


@pytest.mark.parametrize(("by_priority", "grace", "critical", "gate", "expected"), [
    # the list, sorted lowest first, when the gate is on and it is not empty
    ((Period(CRITICAL, 10), Period(10000, 20), Period(0, 30)), 0.0, 0.0, True,
     (Period(0, 30), Period(10000, 20), Period(CRITICAL, 10))),
    ((Period(5, 1), Period(-3, 2)), 30.0, 10.0, True, (Period(-3, 2), Period(5, 1))),  # the list wins
    ((Period(5, 1), Period(1, 2), Period(5, 3)), 0.0, 0.0, True,
     (Period(1, 2), Period(5, 1), Period(5, 3))),  # equal priorities keep their order
    # else the two periods, migrated
    ((), 30.0, 10.0, True, (Period(0, 20), Period(CRITICAL, 10))),
    ((Period(5, 1),), 30.0, 10.0, False, (Period(0, 20), Period(CRITICAL, 10))),  # gate off: the list is ignored
    ((Period(5, 1),), 0.0, 0.0, False, ()),
    ((), 0.0, 0.0, True, ()),  # off: upstream's manager is a stub
])
def test_periods(by_priority: tuple[Period, ...], grace: float, critical: float, gate: bool,
                 expected: tuple[Period, ...]) -> None:
    assert rules.periods(by_priority, grace, critical, priority_gate=gate) == expected


@pytest.mark.parametrize(("periods", "seconds"), [
    ((), 0.0),
    ((Period(0, 20), Period(CRITICAL, 10)), 30.0),
    ((Period(0, 30), Period(10000, 20), Period(CRITICAL, 10)), 60.0),
])
def test_period_requested_is_the_sum(periods: tuple[Period, ...], seconds: float) -> None:
    assert rules.period_requested(periods) == seconds


# ------------------------------------------------------------------------------------------------ groups

def _groups(periods: tuple[Period, ...], pods: list[tuple[str, int | None]]) -> list[tuple[Period, list[str]]]:
    grouped = rules.group_by_priority(periods, pods, lambda pod: pod[1])
    return [(period, [name for name, _ in members]) for period, members in grouped]


FOUR = (Period(1, 10), Period(2, 20), Period(3, 30), Period(4, 40))


@pytest.mark.parametrize(("periods", "pods", "expected"), [
    # upstream Test_groupByPriority "migrate config": a user priority, however high, is with the default pods
    (rules.migrate_config(300.0, 120.0),
     [("normal-pod", 0), ("highest-user-definable-pod", HIGHEST_USER_DEFINABLE), ("critical-pod", CRITICAL)],
     [(Period(0, 180), ["normal-pod", "highest-user-definable-pod"]), (Period(CRITICAL, 120), ["critical-pod"])]),
    # "pod priority": below the lowest to the first group, above the highest to the last, on a boundary its own
    (FOUR, [(f"pod-{n}", n) for n in range(6)],
     [(Period(1, 10), ["pod-0", "pod-1"]), (Period(2, 20), ["pod-2"]), (Period(3, 30), ["pod-3"]),
      (Period(4, 40), ["pod-4", "pod-5"])]),
    # between two priorities: the lower one; no priority counts as 0; empty groups stay
    ((Period(0, 30), Period(10000, 20), Period(CRITICAL, 10)),
     [("a", 9999), ("b", None), ("c", 10001), ("d", CRITICAL + 1000), ("e", -5)],
     [(Period(0, 30), ["a", "b", "e"]), (Period(10000, 20), ["c"]), (Period(CRITICAL, 10), ["d"])]),
    ((Period(0, 30), Period(100, 20)), [("low", 1)], [(Period(0, 30), ["low"]), (Period(100, 20), [])]),
    ((Period(100, 5),), [("x", None), ("y", 100), ("z", 10**9)], [(Period(100, 5), ["x", "y", "z"])]),
    # equal priorities (upstream takes them unchecked): sort.Search finds the first of them; a pod above them but
    # below the next goes to the last of them
    ((Period(0, 1), Period(5, 2), Period(5, 3), Period(10, 4)), [("five", 5), ("seven", 7), ("ten", 10)],
     [(Period(0, 1), []), (Period(5, 2), ["five"]), (Period(5, 3), ["seven"]), (Period(10, 4), ["ten"])]),
    # pods keep their order within a group
    ((Period(0, 1),), [("b", 3), ("a", 1), ("c", 2)], [(Period(0, 1), ["b", "a", "c"])]),
    ((Period(0, 1), Period(1, 1)), [], [(Period(0, 1), []), (Period(1, 1), [])]),
    ((), [], []),
])
def test_group_by_priority(periods: tuple[Period, ...], pods: list[tuple[str, int | None]],
                           expected: list[tuple[Period, list[str]]]) -> None:
    assert _groups(periods, pods) == expected


def test_grouping_pods_without_periods_is_refused() -> None:
    """Upstream would index out of range (its manager is a stub then and never groups); a pod is never lost."""
    with pytest.raises(ValueError, match="graceful node shutdown is off"):
        rules.group_by_priority((), [("a", 0)], lambda pod: pod[1])


@pytest.mark.parametrize(("group", "pod", "expected"), [
    (30, None, 30),  # no terminationGracePeriodSeconds: the group's
    (30, 10, 10),  # shorter: the pod's
    (30, 30, 30),
    (30, 60, 30),  # longer: the group's
    (30, 0, 0),
    (0, 5, 0),
])
def test_pod_grace_period(group: int, pod: int | None, expected: int) -> None:
    assert rules.pod_grace_period(group, pod) == expected


# ------------------------------------------------------------------------------------------------ status

NOW = datetime.datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
CONDITION = {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
             "message": "Pod was terminated in response to imminent node shutdown."}


@pytest.mark.parametrize(("previous", "generation", "now", "phase", "condition"), [
    ({"phase": "Running"}, 3, NOW, "Failed",
     {**CONDITION, "observedGeneration": 3, "lastTransitionTime": "2026-03-04T05:06:07Z"}),
    ({"phase": "Pending"}, 0, NOW, "Failed", {**CONDITION, "lastTransitionTime": "2026-03-04T05:06:07Z"}),
    ({}, 1, None, "Failed", {**CONDITION, "observedGeneration": 1}),
    ({"phase": "Failed"}, 1, None, "Failed", {**CONDITION, "observedGeneration": 1}),
    ({"phase": "Succeeded"}, 2, NOW, "Succeeded",  # a successful terminal phase stays
     {**CONDITION, "observedGeneration": 2, "lastTransitionTime": "2026-03-04T05:06:07Z"}),
    # UpdatePodCondition: a condition already True keeps its time; one False changes now
    ({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"},
                                         {"type": "DisruptionTarget", "status": "True",
                                          "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
     1, NOW, "Failed", {**CONDITION, "observedGeneration": 1, "lastTransitionTime": "2026-01-01T00:00:00Z"}),
    ({"phase": "Running", "conditions": [{"type": "DisruptionTarget", "status": "False",
                                          "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
     1, NOW, "Failed", {**CONDITION, "observedGeneration": 1, "lastTransitionTime": "2026-03-04T05:06:07Z"}),
])
def test_shutdown_status(previous: dict[str, Any], generation: int, now: datetime.datetime | None, phase: str,
                         condition: dict[str, Any]) -> None:
    assert rules.shutdown_status(previous, generation=generation, now=now) == {
        "phase": phase, "reason": "Terminated",
        "message": "Pod was terminated in response to imminent node shutdown.", "conditions": [condition]}


@pytest.mark.parametrize(("previous_phase", "terminal_phase", "written"), [
    ("Running", "Succeeded", "Failed"),  # containers that exit 0 on SIGTERM: Failed, as upstream's first write
    ("Running", "Failed", "Failed"),
    ("Succeeded", "Succeeded", "Succeeded"),  # already Succeeded: stays
])
def test_the_pod_workers_merge_keeps_the_phase_it_gives(previous_phase: str, terminal_phase: str,
                                                        written: str) -> None:
    """PodWorkers.evict's status goes over the terminal status the worker computes (decide._with_eviction): the
    phase written is the one the status function chose, and the conditions merge by type."""
    status = rules.shutdown_status({"phase": previous_phase}, generation=1, now=NOW)
    terminal = {"phase": terminal_phase, "reason": "", "conditions": [{"type": "Ready", "status": "False"},
                                                                     {"type": "DisruptionTarget", "status": "False"}]}
    merged = decide._with_eviction(terminal, decide.Eviction(status=status, grace_period=30))
    assert merged["phase"] == written and merged["reason"] == "Terminated"
    assert [c["type"] for c in merged["conditions"]] == ["Ready", "DisruptionTarget"]
    assert merged["conditions"][1]["status"] == "True"


def test_the_eviction_status_shares_the_condition() -> None:
    previous = [{"type": "DisruptionTarget", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    assert eviction.evicted_status("m", generation=2, now=NOW, previous_conditions=previous)["conditions"] == [
        eviction.disruption_target_condition("m", generation=2, now=NOW, previous_conditions=previous)]
    assert rules.shutdown_status({"conditions": previous}, generation=2, now=NOW)["conditions"] == [
        eviction.disruption_target_condition(rules.NODE_SHUTDOWN_MESSAGE, generation=2, now=NOW,
                                             previous_conditions=previous)]


# --------------------------------------------------------------------------------------------- admission

def test_admit_refuses_every_pod_while_shutting_down() -> None:
    rejection = rules.admit(True)
    assert rejection == admission.Rejection(
        reason="NodeShutdown", message="Pod was rejected: Pod was rejected as the node is shutting down.")
    assert rejection is not None and rejection.event_message == "Pod was rejected as the node is shutting down."
    assert rules.admit(False) is None


def test_upstreams_words() -> None:
    assert (rules.NODE_SHUTDOWN_NOT_ADMITTED_REASON, rules.NODE_SHUTDOWN_NOT_ADMITTED_MESSAGE) == \
        ("NodeShutdown", "Pod was rejected as the node is shutting down.")
    assert (rules.NODE_SHUTDOWN_REASON, rules.NODE_SHUTDOWN_MESSAGE) == \
        ("Terminated", "Pod was terminated in response to imminent node shutdown.")
    assert rules.SHUTTING_DOWN_ERROR == "node is shutting down"
    assert (rules.EVENT_REASON, rules.EVENT_SHUTDOWN_MESSAGE, rules.EVENT_CANCELLED_MESSAGE) == \
        ("Shutdown", "Shutdown manager detected shutdown event", "Shutdown manager detected shutdown cancellation")
    assert (rules.INHIBIT_WHAT, rules.INHIBIT_WHO, rules.INHIBIT_WHY, rules.INHIBIT_MODE) == \
        ("shutdown", "kubelet", "Kubelet needs time to handle node shutdown", "delay")
    assert (rules.LOGIND_CONFIG_DIRECTORY, rules.LOGIND_OVERRIDE_FILE) == ("/etc/systemd/logind.conf.d/",
                                                                           "99-kubelet.conf")
    assert rules.STATE_FILE == "graceful_node_shutdown_state"
    assert (rules.DEFAULT_PRIORITY_WHEN_NO_DEFAULT_CLASS_EXISTS, rules.SYSTEM_CRITICAL_PRIORITY) == (0, CRITICAL)


def test_logind_is_polled_as_upstreams_backoff() -> None:
    """wait.ExponentialBackoff{100ms, x2, 5 steps}: five reads, four sleeps between them."""
    assert rules.INHIBIT_DELAY_POLL_DELAYS == (0.1, 0.2, 0.4, 0.8)
    assert rules.INHIBIT_DELAY_POLL_ATTEMPTS == 5
    assert rules.DBUS_RECONNECT_PERIOD == 1.0


# ------------------------------------------------------------------------------------------------ logind

@pytest.mark.parametrize(("seconds", "text"), [
    # Go: fmt.Sprintf("%.0f", d.Seconds())
    (0.0, "0"), (0.5, "0"), (1.5, "2"), (2.5, "2"), (3.5, "4"), (29.4, "29"), (29.5, "30"), (30.5, "30"),
    (1e-9, "0"), (30.0, "30"), (3600.0, "3600"),
])
def test_logind_override(seconds: float, text: str) -> None:
    assert rules.logind_override(seconds) == f"# Kubelet logind override\n[Login]\nInhibitDelayMaxSec={text}\n"


@pytest.mark.parametrize(("attempts", "requested", "current", "text"), [
    (5, 90.0, 1.5, "node shutdown manager was timed out after 5 attempts waiting for logind InhibitDelayMaxSec to "
                   "update to 1m30s (ShutdownGracePeriod), current value is 1.5s"),
    (5, 30.0, 5.0, "node shutdown manager was timed out after 5 attempts waiting for logind InhibitDelayMaxSec to "
                   "update to 30s (ShutdownGracePeriod), current value is 5s"),
    (1, 3600.0, 0.0, "node shutdown manager was timed out after 1 attempts waiting for logind InhibitDelayMaxSec to "
                     "update to 1h0m0s (ShutdownGracePeriod), current value is 0s"),
])
def test_inhibit_delay_error(attempts: int, requested: float, current: float, text: str) -> None:
    assert rules.inhibit_delay_error(attempts, requested, current) == text


# ------------------------------------------------------------------------------------------- state file

MINUS_0530 = datetime.timezone(-datetime.timedelta(hours=5, minutes=30))


@pytest.mark.parametrize(("start", "end", "data"), [
    # Go: json.Marshal(state{...})
    (datetime.datetime(2024, 1, 2, 3, 4, 5, 120000, tzinfo=UTC), datetime.datetime(2024, 1, 2, 3, 4, 6,
                                                                                   tzinfo=MINUS_0530),
     b'{"startTime":"2024-01-02T03:04:05.12Z","endTime":"2024-01-02T03:04:06-05:30"}'),
    (None, None, b'{"startTime":"0001-01-01T00:00:00Z","endTime":"0001-01-01T00:00:00Z"}'),
    (datetime.datetime(2024, 6, 30, 23, 59, 59, 999999, tzinfo=datetime.timezone(datetime.timedelta(hours=2))),
     None, b'{"startTime":"2024-06-30T23:59:59.999999+02:00","endTime":"0001-01-01T00:00:00Z"}'),
    (datetime.datetime(999, 1, 1, tzinfo=UTC), None,  # four digits, as Go (strftime's %Y would write "999")
     b'{"startTime":"0999-01-01T00:00:00Z","endTime":"0001-01-01T00:00:00Z"}'),
])
def test_encode_state_and_back(start: datetime.datetime | None, end: datetime.datetime | None, data: bytes) -> None:
    assert rules.encode_state(start, end) == data
    assert rules.decode_state(data) == (start, end)


def test_a_naive_time_cannot_be_stored() -> None:
    with pytest.raises(ValueError, match="without a time zone"):
        rules.encode_state(datetime.datetime(2024, 1, 1), None)


@pytest.mark.parametrize(("data", "expected"), [
    # keys matched case-insensitively, null and missing fields the zero time, nanoseconds cut to microseconds
    (b'{"StartTime":"2024-01-02T03:04:05.123456789+01:00","endTime":null}',
     (datetime.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=datetime.timezone(datetime.timedelta(hours=1))), None)),
    (b'{}', (None, None)),
    (b'{"endTime":"2024-01-02T03:04:05Z","other":1}', (None, datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC))),
    (b'{"startTime":"2024-01-02T03:04:05Z","STARTTIME":"2025-01-02T03:04:05Z"}',
     (datetime.datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC), None)),  # the last match wins
])
def test_decode_state(data: bytes, expected: tuple[datetime.datetime | None, datetime.datetime | None]) -> None:
    assert rules.decode_state(data) == expected


@pytest.mark.parametrize(("data", "message"), [
    # Go's json.Unmarshal refuses these too
    (b'{"startTime":"2024-01-02t03:04:05Z"}', "startTime: cannot parse"),
    (b'{"startTime":"2024-01-02T03:04:05z"}', "startTime: cannot parse"),
    (b'{"startTime":"2024-01-02 03:04:05Z"}', "startTime: cannot parse"),
    (b'{"endTime":"2024-01-02T03:04:05.Z"}', "endTime: cannot parse"),
    (b'{"startTime":"2024-13-02T03:04:05Z"}', "startTime: cannot parse"),
    (b'{"startTime":1}', "startTime: expected an RFC 3339 time string, got 1"),
    (b'[]', "not a JSON object"),
    (b'', "not JSON"),
    (b'{"startTime":', "not JSON"),
    (b'\xff', "not JSON"),
])
def test_decode_state_refuses(data: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        rules.decode_state(data)


@pytest.mark.parametrize(("value", "seconds"), [
    (None, 0.0),
    (datetime.datetime(2024, 1, 2, 3, 4, 5, 900000, tzinfo=UTC), 1704164645.0),  # time.Unix: whole seconds
    (datetime.datetime(1969, 12, 31, 23, 59, 59, 500000, tzinfo=UTC), -1.0),  # rounded down
])
def test_metric_timestamp(value: datetime.datetime | None, seconds: float) -> None:
    assert rules.metric_timestamp(value) == seconds
