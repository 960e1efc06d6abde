"""The runtime's state of every pod, refreshed by relisting CRI (upstream PLEG, the generic relist).

Every ``RELIST_PERIOD`` the cache lists sandboxes and containers; statuses are fetched only for objects
that are new or changed state, so an idle node costs two cheap list calls a second. Pods whose runtime
state changed are reported to a callback, which wakes their workers: a container that exits is acted on
within about a second even with no runtime events. `kopflet.pleg.evented` makes it sooner where the runtime
has events; this loop keeps its period as the safety net under them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping

from cri_client import CriClient, CriError
from cri_client import types as cri
from kopflet.container import labels, podstate

logger = logging.getLogger(__name__)

RELIST_PERIOD = 1.0  # upstream genericPlegRelistPeriod


class RuntimeCache:
    def __init__(self, cri_client: CriClient,
                 on_relist: Callable[[float, float | None], None] | None = None) -> None:
        self.cri = cri_client
        self._sandboxes: dict[str, cri.PodSandboxStatus] = {}
        self._containers: dict[str, cri.ContainerStatus] = {}
        self._container_sandbox: dict[str, str] = {}
        self._fingerprints: dict[str, tuple[tuple[str, str], ...]] = {}
        self.pods: dict[str, podstate.RuntimePodStatus] = {}
        self.synced = asyncio.Event()
        self.on_relist = on_relist
        """Called after each relist with (duration, interval since the previous start): PLEG metrics."""
        self.relisted_at: float | None = None
        """When (time.monotonic) the relist loop last completed a round; None before its first. The node's
        syncloop health check (the systemd watchdog's) reads it as upstream reads its sync loop's entry time."""

    def pod(self, uid: str) -> podstate.RuntimePodStatus:
        return self.pods.get(uid, podstate.RuntimePodStatus(uid=uid))

    def container_status(self, container_id: str) -> cri.ContainerStatus | None:
        """The last CRI status seen for a container (mounts, log path: what podstate leaves out)."""
        return self._containers.get(container_id)

    def owner(self, object_id: str) -> tuple[str, bool] | None:
        """The pod uid of a container or sandbox the cache has seen, and whether it is a sandbox."""
        if object_id in self._containers:
            return self.owner_of_status(self._containers[object_id])
        if object_id in self._sandboxes:
            return self.owner_of_status(self._sandboxes[object_id])
        return None

    def seen_stopped(self, object_id: str) -> bool:
        """Whether the cache already holds this container as not running (or this sandbox as not ready): a worker's
        refresh or the relist has read it, and whoever read it has acted or woken the pod."""
        if object_id in self._containers:
            return self._containers[object_id].state is not cri.ContainerState.RUNNING
        if object_id in self._sandboxes:
            return self._sandboxes[object_id].state is not cri.SandboxState.READY
        return False

    @staticmethod
    def owner_of_status(status: cri.ContainerStatus | cri.PodSandboxStatus) -> tuple[str, bool] | None:
        """The pod uid a status's labels name (None for an object not a pod's), and whether it is a sandbox."""
        uid = _uid(status.labels)
        return (uid, isinstance(status, cri.PodSandboxStatus)) if uid else None

    async def relist(self) -> set[str]:
        """Refresh everything; return the uids whose sandboxes or containers changed (or vanished)."""
        sandboxes = await self.cri.sandboxes.list()
        containers = await self.cri.containers.list()
        seen_sandboxes, seen_containers = await self._refresh(sandboxes, containers, prune=True)
        pods = podstate.group_by_pod(seen_sandboxes.values(), seen_containers.values(),
                                     container_sandbox_ids={c.id: c.pod_sandbox_id for c in containers})
        changed = {uid for uid in pods if _fingerprint(pods[uid]) != self._fingerprints.get(uid)}
        changed |= set(self._fingerprints) - set(pods)
        self.pods = pods
        self._fingerprints = {uid: _fingerprint(p) for uid, p in pods.items()}
        self.synced.set()
        return changed

    def forget_pod(self, uid: str) -> None:
        """The pod was removed from the node: it is not a runtime pod any more, even before the next relist."""
        self.pods.pop(uid, None)

    def forget_containers(self, container_ids: Iterable[str]) -> None:
        """Read these containers' status again at the next refresh (their resources changed in place)."""
        for cid in container_ids:
            self._containers.pop(cid, None)

    async def refresh_pod(self, uid: str) -> podstate.RuntimePodStatus:
        """A fresh view of one pod (a worker calls this right before deciding and after acting).

        The view is built from what this call listed and read, never from the shared cache after an await: a
        relist running meanwhile may prune an entry it did not list, and a container that is listed but whose
        status cannot be read fails the refresh instead of looking gone (which status would report as a restart).
        """
        selector = {labels.POD_UID: uid}
        # Both lists at once (one round trip, not two): only this pod's worker makes or removes its objects, and
        # it is not acting while it refreshes.
        sandboxes, containers = await asyncio.gather(
            self.cri.sandboxes.list(cri.PodSandboxFilter(label_selector=selector)),
            self.cri.containers.list(cri.ContainerFilter(label_selector=selector)))
        seen_sandboxes, seen_containers = await self._refresh(sandboxes, containers, prune=False)
        # Objects of this pod that the runtime no longer has are dropped from the cache too.
        for sid in [s for s, st in self._sandboxes.items() if _uid(st.labels) == uid and s not in seen_sandboxes]:
            del self._sandboxes[sid]
        for cid in [c for c, st in self._containers.items() if _uid(st.labels) == uid and c not in seen_containers]:
            self._containers.pop(cid, None)
            self._container_sandbox.pop(cid, None)
        view = podstate.from_cri(seen_sandboxes.values(), seen_containers.values(), uid=uid,
                                 container_sandbox_ids={c.id: c.pod_sandbox_id for c in containers})
        self.pods[uid] = view
        self._fingerprints[uid] = _fingerprint(view)
        return view

    async def _refresh(self, sandboxes: Iterable[cri.PodSandbox], containers: Iterable[cri.Container],
                       *, prune: bool) -> tuple[dict[str, cri.PodSandboxStatus], dict[str, cri.ContainerStatus]]:
        """Read the status of what is new or changed; return the statuses of everything listed that still exists.

        NotFound (removed between list and status) leaves an object out. Any other error is raised for one pod's
        refresh, so a worker never takes an unreadable container for a removed one; the whole-node relist (`prune`)
        keeps the last status it had instead and reads it again next round (upstream PLEG's reinspection), so one
        unreadable object does not stop change detection for every pod.
        """
        seen_sandboxes: dict[str, cri.PodSandboxStatus] = {}
        seen_containers: dict[str, cri.ContainerStatus] = {}
        for sb in sandboxes:
            status = self._sandboxes.get(sb.id)
            if status is None or status.state != sb.state:
                try:
                    status = await self.cri.sandboxes.status(sb.id)
                except CriError as exc:
                    if not exc.not_found and not prune:
                        raise
                    if status is None or exc.not_found:
                        continue  # removed between list and status: gone
                    logger.debug(f"sandbox {sb.id}: status not read, keeping the last one: {exc}")
            self._sandboxes[sb.id] = seen_sandboxes[sb.id] = status
        for c in containers:
            self._container_sandbox[c.id] = c.pod_sandbox_id
            cached = self._containers.get(c.id)
            if cached is None or cached.state != c.state or (
                    c.state == cri.ContainerState.RUNNING and not cached.started_at):
                try:
                    cached = await self.cri.containers.status(c.id)
                except CriError as exc:
                    if not exc.not_found and not prune:
                        raise
                    if cached is None or exc.not_found:
                        continue
                    logger.debug(f"container {c.id}: status not read, keeping the last one: {exc}")
            self._containers[c.id] = seen_containers[c.id] = cached
        if prune:
            for sid in set(self._sandboxes) - set(seen_sandboxes):
                del self._sandboxes[sid]
            for cid in set(self._containers) - set(seen_containers):
                del self._containers[cid]
                self._container_sandbox.pop(cid, None)
        return seen_sandboxes, seen_containers

    async def run(self, on_change: Callable[[set[str]], None], period: float = RELIST_PERIOD) -> None:
        """The relist loop; runtime outages are logged and waited out, never fatal."""
        failing = False
        last_start: float | None = None
        while True:
            started = time.monotonic()
            try:
                changed = await self.relist()
                self.relisted_at = time.monotonic()
                if self.on_relist is not None:
                    self.on_relist(time.monotonic() - started, None if last_start is None else started - last_start)
                last_start = started
                if failing:
                    logger.info("container runtime is reachable again")
                    failing = False
                if changed:
                    on_change(changed)
            except CriError as exc:
                if not failing:
                    logger.warning(f"relisting the container runtime failed: {exc}")
                failing = True
            await asyncio.sleep(period)


def _uid(values: Mapping[str, str]) -> str:
    """The pod UID label alone: a refresh of one pod reads it for every object the cache holds."""
    return labels.pod_uid(values)


def _fingerprint(pod: podstate.RuntimePodStatus) -> tuple[tuple[str, str], ...]:
    """What a change means for a worker: which sandboxes/containers exist, and in which state."""
    sandboxes = tuple((s.id, "ready" if s.ready else "notready") for s in pod.sandboxes)
    containers = tuple((c.id, str(c.state)) for c in pod.containers)
    return sandboxes + containers
