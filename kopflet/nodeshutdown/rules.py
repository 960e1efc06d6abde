"""The node shutdown manager's rules, as pure functions (upstream pkg/kubelet/nodeshutdown).

Mirrors upstream's ``nodeshutdown_manager.go`` (newPodManager's choice of the grace periods, migrateConfig,
periodRequested, groupByPriority, killPods' grace period per pod and its status function, the admission
refusal), ``nodeshutdown_manager_linux.go`` (the events, ShutdownStatus' error, the timeout waiting for logind),
``storage.go`` (the state file's JSON) and ``systemd/inhibit_linux.go`` (the inhibitor and logind's override
file). The D-Bus calls, the files and the manager's loop live elsewhere; here are only values and texts.

Durations are seconds (float) as elsewhere in kopflet; where upstream computes on time.Duration it is done on
whole nanoseconds so the results (truncations, Go's formatting) are the same.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from kopflet import gotext
from kopflet.api import qos
from kopflet.eviction import helpers as eviction
from kopflet.lifecycle import admission

P = TypeVar("P")

_NANOS = 1_000_000_000

# scheduling.DefaultPriorityWhenNoDefaultClassExists and scheduling.SystemCriticalPriority: the two groups
# migrateConfig makes of shutdownGracePeriod and shutdownGracePeriodCriticalPods.
DEFAULT_PRIORITY_WHEN_NO_DEFAULT_CLASS_EXISTS = 0
SYSTEM_CRITICAL_PRIORITY = qos.SYSTEM_CRITICAL_PRIORITY

# nodeshutdown_manager.go constants.
NODE_SHUTDOWN_NOT_ADMITTED_REASON = "NodeShutdown"
"""The admission refusal's reason while the node shuts down (also the event's reason on the pod)."""
NODE_SHUTDOWN_NOT_ADMITTED_MESSAGE = "Pod was rejected as the node is shutting down."
NODE_SHUTDOWN_REASON = "Terminated"
"""status.reason of a pod the shutdown manager terminated."""
NODE_SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."
"""status.message of such a pod, and its DisruptionTarget condition's message."""
STATE_FILE = "graceful_node_shutdown_state"
"""localStorageStateFile: the shutdown's start and end times, in the kubelet's root directory."""

# nodeshutdown_manager_linux.go.
SHUTTING_DOWN_ERROR = "node is shutting down"
"""ShutdownStatus' error while the node shuts down: the node's Ready condition reports it (not Ready)."""
EVENT_REASON = "Shutdown"
"""kubeletevents.NodeShutdown: the reason of the Normal events on the Node (the constant's value, not its name)."""
EVENT_SHUTDOWN_MESSAGE = "Shutdown manager detected shutdown event"
EVENT_CANCELLED_MESSAGE = "Shutdown manager detected shutdown cancellation"
DBUS_RECONNECT_PERIOD = 1.0
"""dbusReconnectPeriod: how long Start's loop waits before watching again after the watch ended."""
INHIBIT_DELAY_POLL_DELAYS = (0.1, 0.2, 0.4, 0.8)
"""After overriding InhibitDelayMaxSec and reloading logind, InhibitDelayMaxUSec is read again up to five times
(wait.ExponentialBackoff of 100ms, factor 2, 5 steps): these are the sleeps between the reads."""
INHIBIT_DELAY_POLL_ATTEMPTS = len(INHIBIT_DELAY_POLL_DELAYS) + 1

# systemd/inhibit_linux.go: the inhibitor (logind's Inhibit(what, who, why, mode)) and logind's override file.
INHIBIT_WHAT = "shutdown"
INHIBIT_WHO = "kubelet"
INHIBIT_WHY = "Kubelet needs time to handle node shutdown"
INHIBIT_MODE = "delay"
LOGIND_CONFIG_DIRECTORY = "/etc/systemd/logind.conf.d/"
LOGIND_OVERRIDE_FILE = "99-kubelet.conf"

_ZERO_TIME = "0001-01-01T00:00:00Z"  # Go's zero time.Time, as encoding/json writes it
_RFC3339 = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})")


@dataclasses.dataclass(frozen=True)
class ShutdownGracePeriodByPodPriority:
    """One item of ``shutdownGracePeriodByPodPriority`` (kubeletconfig.ShutdownGracePeriodByPodPriority): pods of
    this priority and up to the next item's get this many seconds to stop."""

    priority: int
    """int32 upstream."""
    shutdown_grace_period_seconds: int
    """int64 upstream."""


Periods = tuple[ShutdownGracePeriodByPodPriority, ...]


def _nanos(seconds: float) -> int:
    return round(seconds * _NANOS)


def _go_div(a: int, b: int) -> int:
    """Go's integer division (toward zero)."""
    quotient = abs(a) // abs(b)
    return quotient if (a >= 0) == (b > 0) else -quotient


def migrate_config(grace_period: float, critical_pods: float) -> Periods:
    """upstream migrateConfig: shutdownGracePeriod and shutdownGracePeriodCriticalPods as two groups, priority 0
    with the grace period less the critical pods' and SystemCriticalPriority with the critical pods' (whole
    seconds, truncated); none when the grace period is 0 or shorter than the critical pods' (the manager is
    then off)."""
    requested, critical = _nanos(grace_period), _nanos(critical_pods)
    if requested == 0:
        return ()
    default_period = requested - critical
    if default_period < 0:
        return ()
    critical_period = requested - default_period
    if critical_period < 0:
        return ()
    return (ShutdownGracePeriodByPodPriority(DEFAULT_PRIORITY_WHEN_NO_DEFAULT_CLASS_EXISTS,
                                             _go_div(default_period, _NANOS)),
            ShutdownGracePeriodByPodPriority(SYSTEM_CRITICAL_PRIORITY, _go_div(critical_period, _NANOS)))


def periods(by_priority: Iterable[ShutdownGracePeriodByPodPriority], grace_period: float, critical_pods: float, *,
            priority_gate: bool = True) -> Periods:
    """upstream newPodManager: `by_priority` when the GracefulNodeShutdownBasedOnPodPriority gate is on and it
    is not empty, else `migrate_config`; sorted by priority, lowest first (stable: upstream's sort.Slice leaves
    equal priorities in no set order). Empty: no graceful shutdown (upstream NewManager's stub)."""
    chosen = tuple(by_priority)
    if not priority_gate or not chosen:
        chosen = migrate_config(grace_period, critical_pods)
    return tuple(sorted(chosen, key=lambda period: period.priority))


def period_requested(shutdown_periods: Iterable[ShutdownGracePeriodByPodPriority]) -> float:
    """upstream periodRequested: the sum of the groups' grace periods, in seconds. The manager makes logind's
    InhibitDelayMaxSec at least this."""
    return float(sum(period.shutdown_grace_period_seconds for period in shutdown_periods))


def _search(n: int, predicate: Callable[[int], bool]) -> int:
    """Go's sort.Search: the smallest index in [0, n) where `predicate` is true (n if none), by binary search."""
    low, high = 0, n
    while low < high:
        middle = (low + high) // 2
        if not predicate(middle):
            low = middle + 1
        else:
            high = middle
    return low


def group_by_priority(shutdown_periods: Sequence[ShutdownGracePeriodByPodPriority], pods: Iterable[P],
                      priority_of: Callable[[P], int | None]) -> list[tuple[ShutdownGracePeriodByPodPriority, list[P]]]:
    """upstream groupByPriority: one group per period (in the periods' order, `periods` sorts them), each pod in
    the group of the highest priority at or below its own (``spec.priority``; None counts as 0); a pod above
    every period's priority goes in the last group, one below every period's in the first. Groups may be empty
    (upstream's killPods skips them without waiting). No periods: ValueError if there are pods (upstream would
    index out of range; its manager is a stub then and never groups)."""
    groups: list[tuple[ShutdownGracePeriodByPodPriority, list[P]]] = [(period, []) for period in shutdown_periods]
    for pod in pods:
        if not groups:
            raise ValueError("no shutdown grace periods to group pods by: graceful node shutdown is off")
        priority = priority_of(pod)
        if priority is None:
            priority = 0
        index = _search(len(groups), lambda i, p=priority: groups[i][0].priority >= p)
        if index == len(groups):
            index = len(groups) - 1  # above the highest priority: the highest group
        elif index > 0 and groups[index][0].priority > priority:
            index -= 1  # between two priorities: the lower one
        groups[index][1].append(pod)
    return groups


def pod_grace_period(group_seconds: int, termination_grace_period_seconds: int | None) -> int:
    """killPods' gracePeriodOverride: the group's grace period, or the pod's terminationGracePeriodSeconds when
    that is set and not longer."""
    if termination_grace_period_seconds is not None and termination_grace_period_seconds <= group_seconds:
        return termination_grace_period_seconds
    return group_seconds


def shutdown_status(previous_status: Mapping[str, Any], *, generation: int = 0,
                    now: datetime.datetime | None = None) -> dict[str, Any]:
    """killPods' status function: the fields a pod terminated for the shutdown ends with. Phase Failed, unless it
    was Succeeded (then kept), reason Terminated, NODE_SHUTDOWN_MESSAGE, and a DisruptionTarget condition (True,
    TerminationByKubelet, the same message, observedGeneration = `generation`; its lastTransitionTime kept when
    `previous_status` already has it True, else `now`). `previous_status` is the pod's status before the kill
    (upstream applies the function to the status it generates before killing). The shape of
    `eviction.evicted_status`: `conditions` holds only that condition, to merge by type (PodWorkers.evict)."""
    phase = "Succeeded" if previous_status.get("phase") == "Succeeded" else "Failed"
    conditions = [c for c in previous_status.get("conditions") or () if isinstance(c, Mapping)]
    condition = eviction.disruption_target_condition(NODE_SHUTDOWN_MESSAGE, generation=generation, now=now,
                                                     previous_conditions=conditions)
    return {"phase": phase, "reason": NODE_SHUTDOWN_REASON, "message": NODE_SHUTDOWN_MESSAGE,
            "conditions": [condition]}


def admit(shutting_down: bool) -> admission.Rejection | None:
    """managerImpl.Admit: every pod is refused while the node shuts down (reason NodeShutdown; the status message
    gets "Pod was rejected: " in front, as every rejection), none otherwise."""
    if not shutting_down:
        return None
    return admission.Rejection(reason=NODE_SHUTDOWN_NOT_ADMITTED_REASON,
                               message=admission.REJECTED_PREFIX + NODE_SHUTDOWN_NOT_ADMITTED_MESSAGE)


def _go_seconds(nanos: int) -> float:
    """time.Duration.Seconds: whole seconds plus the rest, each as a float."""
    whole = _go_div(nanos, _NANOS)
    return float(whole) + float(nanos - whole * _NANOS) / 1e9


def logind_override(seconds: float) -> str:
    """The text of LOGIND_CONFIG_DIRECTORY/LOGIND_OVERRIDE_FILE (OverrideInhibitDelay): InhibitDelayMaxSec set to
    `seconds` as Go's ``%.0f`` writes it (rounded, a tie to even)."""
    return f"# Kubelet logind override\n[Login]\nInhibitDelayMaxSec={_go_seconds(_nanos(seconds)):.0f}\n"


def inhibit_delay_error(attempts: int, requested: float, current: float) -> str:
    """The error when logind's InhibitDelayMaxUSec is still below the requested period after the last read."""
    return (f"node shutdown manager was timed out after {attempts} attempts waiting for logind InhibitDelayMaxSec "
            f"to update to {gotext.go_duration(requested)} (ShutdownGracePeriod), current value is "
            f"{gotext.go_duration(current)}")


def _go_time(value: datetime.datetime | None) -> str:
    """time.Time.MarshalJSON's text (RFC 3339 with nanoseconds, trailing zeros dropped, Z for a zero offset);
    None is Go's zero time."""
    if value is None:
        return _ZERO_TIME
    offset = value.utcoffset()
    if offset is None:
        raise ValueError(f"a time without a time zone cannot be written as Go's time.Time: {value.isoformat()}")
    text = (f"{value.year:04d}-{value.month:02d}-{value.day:02d}T{value.hour:02d}:{value.minute:02d}:"
            f"{value.second:02d}")
    if value.microsecond:
        text += "." + f"{value.microsecond:06d}".rstrip("0")
    minutes = int(offset.total_seconds()) // 60
    if minutes == 0:
        return text + "Z"
    sign = "-" if minutes < 0 else "+"
    return text + f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def _parse_go_time(value: Any, field: str) -> datetime.datetime | None:
    """time.Time.UnmarshalJSON of one field: null or the zero time is None; nanoseconds are cut to
    microseconds."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{field}: expected an RFC 3339 time string, got {json.dumps(value)}")
    match = _RFC3339.fullmatch(value)
    if match is None:
        raise ValueError(f"{field}: cannot parse {json.dumps(value)} as an RFC 3339 time")
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    micro = int((fraction or "").ljust(6, "0")[:6])
    try:
        tz = datetime.UTC
        if zone != "Z":
            delta = datetime.timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6]))
            tz = datetime.timezone(-delta if zone[0] == "-" else delta)
        parsed = datetime.datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), micro,
                                   tzinfo=tz)
    except ValueError as exc:
        raise ValueError(f"{field}: cannot parse {json.dumps(value)} as an RFC 3339 time: {exc}") from None
    if parsed == datetime.datetime(1, 1, 1, tzinfo=datetime.UTC):
        return None  # Go's zero time (IsZero)
    return parsed


class _Pairs(list[tuple[str, Any]]):
    """A JSON object as its (key, value) pairs in document order."""


def encode_state(start: datetime.datetime | None, end: datetime.datetime | None) -> bytes:
    """The state file's bytes (encoding/json of upstream's state struct): ``{"startTime":..,"endTime":..}``, a
    missing time (None) as Go's zero time. Times must be aware (Go's carry their zone)."""
    return ('{"startTime":"' + _go_time(start) + '","endTime":"' + _go_time(end) + '"}').encode()


def decode_state(data: bytes) -> tuple[datetime.datetime | None, datetime.datetime | None]:
    """The (start, end) of a state file's bytes (json.Unmarshal into upstream's state), None for a time missing or
    zero; ValueError when it is not such a JSON object."""
    try:
        body = json.loads(data, object_pairs_hook=_Pairs)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"the graceful node shutdown state is not JSON: {exc}") from None
    if not isinstance(body, _Pairs):
        raise ValueError(f"the graceful node shutdown state is not a JSON object: {data[:80]!r}")

    def field(name: str) -> Any:
        # encoding/json: keys in document order, each matched to a field exactly or case-insensitively; the last wins
        values = [value for key, value in body if key.casefold() == name.casefold()]
        return values[-1] if values else None

    return _parse_go_time(field("startTime"), "startTime"), _parse_go_time(field("endTime"), "endTime")


def metric_timestamp(value: datetime.datetime | None) -> float:
    """storage.go timestamp: a time as the graceful shutdown metrics carry it, whole seconds since the epoch
    (time.Unix, rounded down); 0 for the zero time."""
    if value is None:
        return 0.0
    return float(math.floor(value.timestamp()))


__all__ = [
    "DBUS_RECONNECT_PERIOD", "DEFAULT_PRIORITY_WHEN_NO_DEFAULT_CLASS_EXISTS", "EVENT_CANCELLED_MESSAGE",
    "EVENT_REASON", "EVENT_SHUTDOWN_MESSAGE", "INHIBIT_DELAY_POLL_ATTEMPTS", "INHIBIT_DELAY_POLL_DELAYS",
    "INHIBIT_MODE", "INHIBIT_WHAT", "INHIBIT_WHO", "INHIBIT_WHY", "LOGIND_CONFIG_DIRECTORY", "LOGIND_OVERRIDE_FILE",
    "NODE_SHUTDOWN_MESSAGE", "NODE_SHUTDOWN_NOT_ADMITTED_MESSAGE", "NODE_SHUTDOWN_NOT_ADMITTED_REASON",
    "NODE_SHUTDOWN_REASON", "SHUTTING_DOWN_ERROR", "STATE_FILE", "SYSTEM_CRITICAL_PRIORITY", "Periods",
    "ShutdownGracePeriodByPodPriority", "admit", "decode_state", "encode_state", "group_by_priority",
    "inhibit_delay_error", "logind_override", "metric_timestamp", "migrate_config", "period_requested", "periods",
    "pod_grace_period", "shutdown_status",
]
