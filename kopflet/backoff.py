"""
Per-key exponential backoff with upstream `flowcontrol.Backoff` semantics, on an explicit clock.

The kubelet keeps two of these: crash-loop backoff per pod and container (`GetStableKey`: pod name,
namespace, uid, container name and spec hash, so a changed spec starts afresh) and image-pull backoff per
pod uid and image. Both start at 10s, double on every failure up to 300s, and forget an entry that was not
bumped for twice the maximum (600s): the "reset after 10 minutes of good running".

Deterministic: every method takes the current time (`now`, seconds as float) instead of reading a clock,
and no jitter is added (the kubelet's crash-loop and image backoffs use none either).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable

INITIAL = 10.0
"""Upstream kubelet `backOffPeriod` (and image pull backoff start)."""
MAXIMUM = 300.0
"""Upstream `MaxContainerBackOff` / `MaxImageBackOff`."""

BackoffKey = Hashable


def crash_loop_key(pod_uid: str, container_name: str, *, pod_name: str = "", namespace: str = "",
                   container_hash: str = "") -> tuple[str, ...]:
    """Crash-loop key of one container (upstream `GetStableKey` ``name_namespace_uid_container_hash``)."""
    return ("container", pod_uid, container_name, pod_name, namespace, container_hash)


def image_pull_key(pod_uid: str, image: str) -> tuple[str, ...]:
    """Image pull key (upstream ``<pod uid>_<image>``); tagged so it never collides with a crash-loop key."""
    return ("image", pod_uid, image)


@dataclasses.dataclass
class _Entry:
    delay: float
    last_update: float


class Backoff:
    """Exponential backoff per key. Mutable, but clock-free: the caller passes `now` everywhere."""

    def __init__(self, initial: float = INITIAL, maximum: float = MAXIMUM) -> None:
        if initial <= 0 or maximum < initial:
            raise ValueError(f"need 0 < initial <= maximum, got initial={initial}, maximum={maximum}")
        self.initial = initial
        self.maximum = maximum
        self._entries: dict[BackoffKey, _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: BackoffKey) -> bool:
        return key in self._entries

    def get(self, key: BackoffKey) -> float:
        """The current delay of the key in seconds; 0.0 when it has none (upstream `Get`)."""
        entry = self._entries.get(key)
        return entry.delay if entry is not None else 0.0

    def next(self, key: BackoffKey, now: float, *, event_time: float | None = None) -> float:
        """Bump the key after a failure and return its new delay (upstream `Next`).

        A new key, or one whose last bump is more than 2 x maximum before `event_time` (default `now`),
        starts at `initial`; otherwise the delay doubles, capped at `maximum`. The kubelet passes the
        failed container's finishedAt as event time, so a container that ran cleanly for 10 minutes before
        crashing again starts over at 10s.
        """
        event = now if event_time is None else event_time
        entry = self._entries.get(key)
        if entry is None or self._expired(entry, event):
            entry = self._entries[key] = _Entry(delay=self.initial, last_update=now)
        else:
            entry.delay = min(entry.delay * 2, self.maximum)
            entry.last_update = now
        return entry.delay

    def is_in_backoff_since(self, key: BackoffKey, event_time: float, now: float) -> bool:
        """Whether less than the current delay has passed since `event_time` (upstream `IsInBackOffSince`).

        False for unknown keys and for entries that expired relative to `event_time`.
        """
        entry = self._entries.get(key)
        if entry is None or self._expired(entry, event_time):
            return False
        return now - event_time < entry.delay

    def is_in_backoff_since_update(self, key: BackoffKey, now: float) -> bool:
        """Whether less than the current delay has passed since the key's last bump (upstream
        `IsInBackOffSinceUpdate`, what the image manager asks before pulling again)."""
        entry = self._entries.get(key)
        if entry is None or self._expired(entry, now):
            return False
        return now - entry.last_update < entry.delay

    def remaining(self, key: BackoffKey, event_time: float, now: float) -> float:
        """Seconds until the backoff since `event_time` is over (0.0 when not in backoff); for requeueing."""
        if not self.is_in_backoff_since(key, event_time, now):
            return 0.0
        return max(0.0, event_time + self.get(key) - now)

    def reset(self, key: BackoffKey) -> None:
        """Forget the key (upstream `Reset`)."""
        self._entries.pop(key, None)

    def gc(self, now: float) -> None:
        """Drop entries not bumped for more than 2 x maximum (upstream `GC`); call it periodically."""
        for key in [k for k, e in self._entries.items() if now - e.last_update > 2 * self.maximum]:
            del self._entries[key]

    def _expired(self, entry: _Entry, event_time: float) -> bool:
        return event_time - entry.last_update > 2 * self.maximum

