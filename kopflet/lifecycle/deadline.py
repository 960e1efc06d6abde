"""
A pod's ``activeDeadlineSeconds``: when it has run on the node too long (upstream pkg/kubelet/active_deadline.go).

Upstream's activeDeadlineHandler is both a sync-loop handler (`ShouldSync`: sync the pod once its deadline
passed) and an eviction handler (`ShouldEvict`: `generateAPIPodStatus` then writes phase Failed with reason
`DeadlineExceeded`, the pod is terminal, its containers are killed and never restarted). The clock starts at
the pod's ``status.startTime``, which the agent writes on the pod's first status; without it the deadline
cannot have passed. The spec field may be updated (only lowered, by apiserver validation): every check reads
the current value.

Pure: the pod, its start time and `now` go in; `kopflet.pods.workers` records the event, kills the pod and schedules
its next sync for `time_left`.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from kopflet.api import spec, times

REASON = "DeadlineExceeded"
MESSAGE = "Pod was active on the node longer than the specified deadline"
"""Upstream's status reason/message, also the Normal event's reason and message."""


def start_time(pod_status: Mapping[str, Any]) -> datetime.datetime | None:
    """``status.startTime`` as an aware datetime (None when missing or unreadable)."""
    return times.parse_timestamp(pod_status.get("startTime"))


def time_left(pod: spec.Pod, started: datetime.datetime | None, now: datetime.datetime) -> float | None:
    """Seconds until the deadline passes (<= 0 once it has), or None without a deadline or a start time."""
    seconds = pod.spec.active_deadline_seconds
    if seconds is None or started is None:
        return None
    return seconds - (now - started).total_seconds()


def past_active_deadline(pod: spec.Pod, started: datetime.datetime | None, now: datetime.datetime) -> bool:
    """Upstream `pastActiveDeadline`: the pod has been active for at least activeDeadlineSeconds."""
    left = time_left(pod, started, now)
    return left is not None and left <= 0


__all__ = ["MESSAGE", "REASON", "past_active_deadline", "start_time", "time_left"]
