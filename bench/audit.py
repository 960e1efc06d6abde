"""The agent's API cost, read from the apiserver's own audit log (the stack logs the system:nodes group).

The apiserver's request metrics carry no user, so the audit log is the one source that tells the agent's
requests from the controllers' and the benchmark's own. Each request is counted once (by auditID: a watch
logs ResponseStarted and later ResponseComplete), by verb and resource[/subresource], inside a time window.

`parse` and the counts are pure (lines in, counts out); `AuditTail` reads the file, across its rotation.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path


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


HEAD_BYTES = 4096


class AuditTail:
    """The audit log from a point on. The apiserver rotates it (``--audit-log-maxsize``: the file is renamed to
    ``<name>-<UTC time>.log`` beside it and a new one begun, the oldest backups removed), so what was written after
    the point is in the file of the point (from its offset), every backup renamed after it, and the current file.
    The file of the point is known by its inode and first bytes (a new file may get a freed inode). `lost` is set
    when that file is gone (its part after the point is not in the counts); `LOST` says so in a report."""

    LOST = "the audit log rotated past its kept backups during the run: some requests are not counted"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.inode: int | None = None
        self.offset, self.head = 0, b""
        self.started = time.time()
        try:
            with path.open("rb") as f:
                self.inode, self.offset = os.fstat(f.fileno()).st_ino, f.seek(0, 2)
                f.seek(0)
                self.head = f.read(HEAD_BYTES)
        except FileNotFoundError:
            pass
        self.lost = False

    def _is_the_first(self, path: Path) -> bool:
        try:
            with path.open("rb") as f:
                return os.fstat(f.fileno()).st_ino == self.inode and f.read(len(self.head)) == self.head
        except FileNotFoundError:
            return False

    def _backups(self) -> list[Path]:
        """The renamed files, oldest first (their names end in a sortable UTC time)."""
        return sorted(self.path.parent.glob(f"{self.path.stem}-*{self.path.suffix}"))

    def requests(self) -> list[Request]:
        """Every request logged since the point (each time from the point, not from the last call)."""
        if self.inode is not None and self._is_the_first(self.path):
            chunks = [_read_from(self.path, self.offset)]
        else:
            backups = self._backups()
            first = next((i for i, p in enumerate(backups) if self._is_the_first(p)), None) \
                if self.inode is not None else None
            if first is not None:
                chunks = [_read_from(backups[first], self.offset), *(_read_from(p, 0) for p in backups[first + 1:])]
            else:
                # The file of the point is gone (or there was none): the backups written to since the point.
                self.lost = self.lost or self.inode is not None
                chunks = [_read_from(p, 0) for p in backups if _modified_since(p, self.started)]
            chunks.append(_read_from(self.path, 0))
        return parse(line for chunk in chunks for line in chunk.decode(errors="replace").splitlines())


def _modified_since(path: Path, since: float) -> bool:
    try:
        return path.stat().st_mtime >= since
    except FileNotFoundError:
        return False


def _read_from(path: Path, offset: int) -> bytes:
    """The file from `offset` on (from its start when it is shorter: truncated); nothing when it is gone."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, 2)
            f.seek(offset if size >= offset else 0)
            return f.read()
    except FileNotFoundError:
        return b""


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
