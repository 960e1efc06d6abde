"""The kernel log's OOM kills (upstream's fork of cAdvisor's oomparser), over /dev/kmsg records.

An OOM kill is a run of kernel messages: it starts at ``<comm> invoked oom-killer:``, may name the memory cgroup
that ran out (``oom-kill:constraint=...,oom_memcg=<cg>,task_memcg=<cg>,task=<comm>,pid=<pid>,...``; a global OOM's
line has no ``oom_memcg``) and ends at ``Killed process <pid> (<comm>)``. Only a kill whose victim cgroup is the
root one is a *system* OOM (upstream realWatcher records ``SystemOOM`` then).
"""

from __future__ import annotations

import dataclasses
import re

ROOT = "/"
SYSTEM_OOM = "SystemOOM"

_FIRST = re.compile(r"invoked oom-killer:")
_CONTAINER = re.compile(r"oom-kill:constraint=(.*),nodemask=(.*),cpuset=(.*),mems_allowed=(.*),oom_memcg=(.*),"
                        r"task_memcg=(.*),task=(.*),pid=(.*),uid=(.*)")
_LEGACY_CONTAINER = re.compile(r"Task in (.*) killed as a result of limit of (.*)")
_LAST = re.compile(r"Killed process ([0-9]+) \((.+)\)")


@dataclasses.dataclass(frozen=True)
class KmsgRecord:
    """One /dev/kmsg record: ``<priority>,<sequence>,<usec since boot>,<flags>[,...];<message>``."""

    sequence: int
    usec: int
    message: str


@dataclasses.dataclass
class OomInstance:
    pid: int = 0
    process_name: str = ""
    container_name: str = ROOT
    """The cgroup whose task was killed (task_memcg)."""
    victim_container_name: str = ROOT
    """The cgroup that ran out of memory (oom_memcg); the root one for a global OOM."""
    constraint: str = ""
    usec: int = 0


def parse_record(raw: str) -> KmsgRecord | None:
    """One record as read from /dev/kmsg (continuation lines, `` KEY=value``, are dropped); None if malformed."""
    head, semicolon, rest = raw.partition(";")
    fields = head.split(",")
    if not semicolon or len(fields) < 3:
        return None
    try:
        sequence, usec = int(fields[1]), int(fields[2])
    except ValueError:
        return None
    return KmsgRecord(sequence=sequence, usec=usec, message=rest.split("\n", 1)[0])


class OomStream:
    """Fed kernel messages one at a time, hands back each OOM kill once its last message arrived."""

    def __init__(self) -> None:
        self._current: OomInstance | None = None

    def feed(self, record: KmsgRecord) -> OomInstance | None:
        line = record.message
        if self._current is None:
            if _FIRST.search(line):
                self._current = OomInstance(usec=record.usec)
            return None
        oom = self._current
        if (found := _CONTAINER.search(line)) is not None:
            oom.container_name, oom.victim_container_name, oom.constraint = found[6], found[5], found[1]
            oom.pid, oom.process_name = _int(found[8]), found[7]
            finished = True  # upstream: the new-style line completes the instance
        elif (legacy := _LEGACY_CONTAINER.search(line)) is not None:
            oom.container_name = "/" + legacy[1].lstrip("/")
            oom.victim_container_name = "/" + legacy[2].lstrip("/")
            finished = False
        elif (last := _LAST.search(line)) is not None:
            oom.pid, oom.process_name = _int(last[1]), last[2]
            finished = True
        else:
            finished = False
        if not finished:
            return None
        oom.usec = record.usec
        self._current = None
        return oom


def system_oom_message(oom: OomInstance) -> str | None:
    """The ``SystemOOM`` Warning's message (upstream realWatcher), or None when the OOM was a cgroup's own."""
    if oom.victim_container_name != ROOT:
        return None
    message = "System OOM encountered"
    if oom.process_name and oom.pid:
        message += f", victim process: {oom.process_name}, pid: {oom.pid}"
    return message


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0
