"""Which dead containers and sandboxes of a live pod can go (upstream container GC, kuberuntime_gc.go).

Upstream's defaults: ``MaxPerPodContainer = 1`` and ``MinAge = 0`` — every container keeps its newest
dead instance (it backs ``lastState``, ``restartCount`` and ``kubectl logs --previous``), older dead
instances are removed; so is a created-but-never-started instance once a newer one exists. Sandboxes
that are not ready, not the pod's newest, and no longer hold any container are removed too.
"""

from __future__ import annotations

import dataclasses

from kopflet.container import podstate
from kopflet.container.podstate import State

KEEP_DEAD_PER_CONTAINER = 1


@dataclasses.dataclass(frozen=True)
class Evictions:
    containers: tuple[str, ...] = ()
    sandboxes: tuple[str, ...] = ()


def evictable(runtime: podstate.RuntimePodStatus, keep: int = KEEP_DEAD_PER_CONTAINER) -> Evictions:
    """Container and sandbox ids of ``runtime`` that can be removed without losing what status needs."""
    dead_by_name: dict[str, list[podstate.ContainerInfo]] = {}
    newest: dict[str, str] = {}
    superseded: list[str] = []
    for c in runtime.containers:  # newest first
        newest.setdefault(c.name, c.id)
        if c.state is State.CREATED and newest[c.name] != c.id:
            # Created but never started, and a newer instance exists (the agent died between CreateContainer
            # and StartContainer): no logs, no exit code, nothing for status; it would only linger as a
            # duplicate of the container, so it goes whatever `keep` says.
            superseded.append(c.id)
        elif c.state in (State.EXITED, State.CREATED):
            dead_by_name.setdefault(c.name, []).append(c)
    containers = (*superseded, *(c.id for instances in dead_by_name.values() for c in instances[keep:]))
    remaining = {c.sandbox_id for c in runtime.containers if c.id not in containers}
    latest = runtime.latest_sandbox
    sandboxes = tuple(s.id for s in runtime.sandboxes
                      if s is not latest and not s.ready and s.id not in remaining)
    return Evictions(containers=containers, sandboxes=sandboxes)
