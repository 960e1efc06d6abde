"""Which dead containers and sandboxes of a live pod can go (upstream container GC, kuberuntime_gc.go).

Upstream's defaults: ``MaxPerPodContainer = 1`` and ``MinAge = 0`` — every container keeps its newest
dead instance (it backs ``lastState``, ``restartCount`` and ``kubectl logs --previous``), older dead
instances are removed; so is a created-but-never-started instance once a newer one exists. Sandboxes
that are not ready, not the pod's newest, and no longer hold any container are removed too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping

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


# ---------------------------------------------------------------------------------------------------------------
# The node-wide pass (upstream containerGC.GarbageCollect, every minute): every pod's dead containers at once.

@dataclasses.dataclass(frozen=True)
class GCPolicy:
    """Upstream `kubecontainer.GCPolicy`, from the deprecated flags --minimum-container-ttl-duration,
    --maximum-dead-containers-per-container and --maximum-dead-containers (defaults 0s, 1, -1)."""

    min_age: float = 0.0
    """Seconds a dead container must have existed (since creation) before it may be removed."""
    max_per_pod_container: int = KEEP_DEAD_PER_CONTAINER
    """Dead instances kept per (pod, container name); negative: no limit."""
    max_containers: int = -1
    """Dead containers kept on the node in all; negative: no limit."""


def _newest_first(instances: list[podstate.ContainerInfo]) -> list[podstate.ContainerInfo]:
    return sorted(instances, key=lambda c: (c.created_at, c.id), reverse=True)


def collect(pods: Mapping[str, podstate.RuntimePodStatus], policy: GCPolicy, remove_all: Collection[str],
            now_ns: int) -> Evictions:
    """What the node-wide pass removes (upstream evictContainers then evictSandboxes, evictNonDeletedPods off).

    `remove_all` are the uids whose content should go (deleted pods, once every pod source is ready): all their
    dead containers and their inactive sandboxes. Elsewhere each (pod, container name) keeps its newest
    `max_per_pod_container` dead instances, then `max_containers` caps the node: first evenly per unit (at least
    one each), then the oldest overall. Running containers are never chosen, nor any younger than `min_age`;
    a pod keeps its newest sandbox, and a sandbox that is ready or still holds a container is never removed.
    """
    newest_allowed = now_ns - int(policy.min_age * 1e9)
    units: dict[tuple[str, str], list[podstate.ContainerInfo]] = {}
    removed: list[str] = []
    for uid, pod in pods.items():
        for c in pod.containers:
            if c.state is State.RUNNING or c.created_at > newest_allowed:
                continue
            if uid in remove_all:
                removed.append(c.id)
            else:
                units.setdefault((uid, c.name), []).append(c)
    kept = {key: _newest_first(instances) for key, instances in units.items()}

    def cap(per_unit: int) -> None:
        for key, instances in kept.items():
            removed.extend(c.id for c in instances[per_unit:])
            kept[key] = instances[:per_unit]

    if policy.max_per_pod_container >= 0:
        cap(policy.max_per_pod_container)
    total = sum(len(instances) for instances in kept.values())
    if policy.max_containers >= 0 and total > policy.max_containers:
        cap(max(1, policy.max_containers // max(1, len(kept))))
        flattened = _newest_first([c for instances in kept.values() for c in instances])
        removed.extend(c.id for c in flattened[policy.max_containers:])

    gone = set(removed)
    sandboxes: list[str] = []
    for uid, pod in pods.items():
        holding = {c.sandbox_id for c in pod.containers if c.id not in gone}
        ordered = sorted(pod.sandboxes, key=lambda s: (s.created_at, s.id), reverse=True)
        # Upstream removeOldestNSandboxes: keep the newest unless the pod's content is to be removed; active
        # sandboxes (ready, or holding a container) are skipped either way.
        candidates = ordered if uid in remove_all else ordered[1:]
        sandboxes.extend(s.id for s in candidates if not s.ready and s.id not in holding)
    return Evictions(containers=tuple(removed), sandboxes=tuple(sandboxes))
