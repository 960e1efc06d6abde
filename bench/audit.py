"""The agent's API cost, read from the apiserver's own audit log (the stack logs the system:nodes group).

The apiserver's request metrics carry no user, so the audit log is the one source that tells the agent's
requests from the controllers' and the benchmark's own. Each request is counted once (by auditID: a watch
logs ResponseStarted and later ResponseComplete), by verb and resource[/subresource], inside a time window.

Pure: lines in, counts out; the caller reads the file.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections import Counter
from collections.abc import Iterable, Mapping


@dataclasses.dataclass(frozen=True, kw_only=True)
class Request:
    audit_id: str
    user: str
    user_agent: str
    verb: str
    resource: str  # "pods", "pods/status", "nodes", "leases", ... ("" for non-resource URLs)
    code: int
    received: float  # epoch seconds


def parse(lines: Iterable[str]) -> list[Request]:
    """The requests in an audit log (JSON lines), each once; lines that are not audit events are skipped."""
    seen: set[str] = set()
    out: list[Request] = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict) or event.get("kind") != "Event" or event.get("auditID") in seen:
            continue
        seen.add(event["auditID"])
        ref = event.get("objectRef") or {}
        resource = ref.get("resource", "")
        if ref.get("subresource"):
            resource = f"{resource}/{ref['subresource']}"
        out.append(Request(
            audit_id=event["auditID"], user=(event.get("user") or {}).get("username", ""),
            user_agent=event.get("userAgent", ""), verb=event.get("verb", ""), resource=resource,
            code=int((event.get("responseStatus") or {}).get("code", 0)),
            received=_epoch(event.get("requestReceivedTimestamp", ""))))
    return out


def _epoch(stamp: str) -> float:
    try:
        return datetime.datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return 0.0


def count(requests: Iterable[Request], user: str, start: float, end: float) -> dict[str, int]:
    """Requests of `user` received in [start, end), keyed "verb resource"."""
    counter: Counter[str] = Counter(
        f"{r.verb} {r.resource}".strip() for r in requests if r.user == user and start <= r.received < end)
    return dict(sorted(counter.items()))


def user_agents(requests: Iterable[Request], user: str, start: float, end: float) -> list[str]:
    """The distinct user agents `user` sent in the window: shows which agent the counts belong to."""
    return sorted({r.user_agent for r in requests if r.user == user and start <= r.received < end})


def rate_per_minute(counts: Mapping[str, int], seconds: float) -> dict[str, float]:
    """Counts over a window as requests per minute."""
    if seconds <= 0:
        return {}
    return {key: round(n * 60 / seconds, 2) for key, n in counts.items()}


def per_pod(window: Mapping[str, int], window_seconds: float, idle_per_minute: Mapping[str, float],
            pods: int) -> dict[str, float]:
    """Requests per pod lifecycle: the window's counts less what the node does idle in as long, over the pods.

    Heartbeats and lease renewals happen whether pods come and go or not; subtracting the idle rate leaves
    the cost the pods themselves caused. Negative remainders (jitter in the idle traffic) are clipped to 0.
    """
    if pods <= 0:
        return {}
    out: dict[str, float] = {}
    for key in sorted(set(window) | set(idle_per_minute)):
        net = window.get(key, 0) - idle_per_minute.get(key, 0.0) * window_seconds / 60
        if net > 0:
            out[key] = round(net / pods, 2)
    return out
