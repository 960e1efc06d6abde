"""The eviction manager: every 10 seconds, measure the node, report pressure, and evict one pod if it must.

Mirrors upstream `pkg/kubelet/eviction/eviction_manager.go` (managerImpl: `synchronize`, `Start`'s loop with
its wait for the evicted pod's cleanup, `IsUnder*Pressure`, `Admit`). The decisions are
`kopflet.eviction.helpers`; everything that touches the world comes in through the constructor, so the agent
wires it:

    manager = EvictionManager(config, observe=..., active_pods=..., evict=..., container_gc=..., image_gc=...)
    asyncio.create_task(manager.run())
    setters.conditions(ready, previous, now, pressure=manager.conditions())   # node status
    rejection = manager.admit(pod)                                             # pod admission

With localStorageCapacityIsolation on (the default), each round first enforces the local storage limits
(upstream localStorageEviction: emptyDir sizeLimit, the pod's and each container's ephemeral-storage limit;
`kopflet.eviction.local_storage`): every pod over a limit is evicted that round, and the thresholds wait for
the next one. With it off, those limits are not enforced, and a manager without thresholds does nothing at all
(upstream synchronize returns at once: no filesystem layout asked, no stats, no pressure).

Left out from upstream: the memcg threshold notifiers (kernelMemcgNotification).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol

from kopflet.api import spec
from kopflet.eviction import helpers as h
from kopflet.eviction import thresholds as th
from kopflet.eviction.helpers import EvictionCandidate, EvictionState, Observation
from kopflet.lifecycle import admission
from kopflet.rounds import log_failed_round

logger = logging.getLogger(__name__)

MONITORING_PERIOD = 10.0
"""upstream evictionMonitoringPeriod (kubelet.go)."""
POD_CLEANUP_TIMEOUT = 30.0
POD_CLEANUP_POLL = 1.0
EVICTION_THRESHOLD_MET = "EvictionThresholdMet"
"""The node event's reason when a threshold drives reclaim ("Attempting to reclaim memory")."""


class Evict(Protocol):
    """Kill the pod with that grace period after setting its status to `status` (phase, reason, message,
    conditions: `helpers.evicted_status`); returns when the pod is killed or the kill failed (raise)."""

    def __call__(self, uid: str, status: dict[str, object], grace_period: int) -> Awaitable[object]: ...


class RecordEvent(Protocol):
    """A Warning event: about the pod (`uid`, with annotations) or, with `uid` None, about the node."""

    def __call__(self, uid: str | None, reason: str, message: str, annotations: Mapping[str, str]) -> object: ...


Reclaim = Callable[[], Awaitable[object]]


class EvictionManager:
    """One eviction manager per agent: holds the round-to-round state and the pressure conditions."""

    def __init__(self, config: th.EvictionConfig, *,
                 observe: Callable[[], Awaitable[Mapping[str, Observation]]],
                 active_pods: Callable[[], Awaitable[Sequence[EvictionCandidate]]],
                 evict: Evict,
                 container_gc: Reclaim | None = None,
                 image_gc: Reclaim | None = None,
                 disk_layout: Callable[[], Awaitable[tuple[bool, bool]]] | None = None,
                 pod_cleaned_up: Callable[[str], Awaitable[bool]] | None = None,
                 record_event: RecordEvent | None = None,
                 local_storage_capacity_isolation: bool = True,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC)) -> None:
        """`observe` measures the signals (`signals.observe` in a thread); `active_pods` lists the pods
        eligible for eviction (not terminal) with their usage (`helpers.candidate`); `evict` kills one;
        `container_gc` / `image_gc` remove unused containers / images (node-level reclaim before evicting);
        `disk_layout` answers (dedicated imagefs, containers split from images), asked once (default: one
        filesystem); `pod_cleaned_up` tells when an evicted pod's resources are gone (the loop waits up to
        30s for it before the next round); `local_storage_capacity_isolation` (the KubeletConfiguration
        field) turns the local storage limit evictions on."""
        self._config = config
        self._thresholds: list[th.Threshold] = list(config.thresholds)
        self._observe = observe
        self._active_pods = active_pods
        self._evict = evict
        self._reclaimers: dict[str, Reclaim | None] = {h.RECLAIM_CONTAINERS: container_gc,
                                                       h.RECLAIM_IMAGES: image_gc}
        self._disk_layout = disk_layout
        self._pod_cleaned_up = pod_cleaned_up
        self._record_event = record_event
        self._local_storage_capacity_isolation = local_storage_capacity_isolation
        self._clock = clock
        self._wall_clock = wall_clock
        self._state = EvictionState()
        self._rank: dict[str, h.RankFunc] | None = None
        self._dedicated_image_fs = False
        self._node_reclaim: dict[str, tuple[str, ...]] = {}

    # ---------------------------------------------------------------------------------------- for the node

    @property
    def node_conditions(self) -> tuple[str, ...]:
        """The pressure conditions now reported (MemoryPressure, DiskPressure, PIDPressure)."""
        return self._state.node_conditions

    def conditions(self) -> dict[str, bool]:
        """The `pressure` mapping of `nodestatus.setters.conditions` (upstream IsUnder*Pressure)."""
        return {c: c in self._state.node_conditions for c in th.NODE_CONDITIONS}

    def is_under_memory_pressure(self) -> bool:
        return th.MEMORY_PRESSURE in self._state.node_conditions

    def is_under_disk_pressure(self) -> bool:
        return th.DISK_PRESSURE in self._state.node_conditions

    def is_under_pid_pressure(self) -> bool:
        return th.PID_PRESSURE in self._state.node_conditions

    def admit(self, pod: spec.Pod, *, qos_class: str | None = None) -> admission.Rejection | None:
        """upstream Admit: refuse pods the pressure says not to start (reason Evicted), else None."""
        return h.admit(pod, self._state.node_conditions, qos_class=qos_class)

    # --------------------------------------------------------------------------------------------- rounds

    async def _ensure_layout(self) -> bool:
        """Once: learn the filesystem layout, derive the containerfs thresholds, rank and reclaim functions."""
        if self._rank is not None:
            return True
        image_fs, split = False, False
        if self._disk_layout is not None:
            try:
                image_fs, split = await self._disk_layout()
            except Exception as exc:
                log_failed_round(logger, "Eviction manager: failed to get the image filesystem layout", exc)
                return False
        self._thresholds, warnings = th.update_container_fs_thresholds(self._thresholds, image_fs, split)
        for warning in warnings:
            logger.warning("Eviction manager: found conflicting containerfs eviction. Ignoring: %s", warning)
        self._rank = h.signal_to_rank(image_fs, split)
        self._dedicated_image_fs = image_fs
        self._node_reclaim = h.signal_to_node_reclaim(image_fs, split)
        return True

    def _event(self, uid: str | None, reason: str, message: str, annotations: Mapping[str, str] = {}) -> None:
        if self._record_event is not None:
            try:
                self._record_event(uid, reason, message, annotations)
            except Exception as exc:
                log_failed_round(logger, "Eviction manager: failed to record an event", exc)

    async def synchronize(self) -> list[EvictionCandidate]:
        """One round (upstream synchronize): observe, update thresholds and pressure conditions; evict every pod
        over a local storage limit (localStorageCapacityIsolation on), and if there were none, when a threshold
        is met past its grace period, reclaim node-level resources or else evict one pod. Returns the pods
        evicted.

        Nothing to do, nothing done: with no thresholds and isolation off upstream returns before it even asks
        for the filesystem layout; with isolation on it runs without thresholds too (for the limits)."""
        if not self._thresholds and not self._local_storage_capacity_isolation:
            return []
        if not await self._ensure_layout():
            return []
        assert self._rank is not None
        try:
            pods = list(await self._active_pods())
            observations = await self._observe()
        except Exception as exc:
            log_failed_round(logger, "Eviction manager: failed to get summary stats", exc)
            return []
        result = h.evaluate(self._thresholds, observations, self._state, self._clock(),
                            self._config.pressure_transition_period)
        self._state = result.state
        if self._local_storage_capacity_isolation:
            evicted = await self._local_storage_eviction(pods)
            if evicted:
                return evicted
        found = h.reclaimable_threshold(result.act_on)
        if found is None:
            return []
        threshold, resource = found
        logger.info("Eviction manager: attempting to reclaim %s", resource)
        self._event(None, EVICTION_THRESHOLD_MET, f"Attempting to reclaim {resource}")
        if await self._reclaim_node_level(threshold.signal, resource):
            logger.info("Eviction manager: able to reduce %s pressure without evicting pods", resource)
            return []
        rank = self._rank.get(threshold.signal)
        if rank is None:
            logger.error("Eviction manager: no ranking function for signal %s", threshold.signal)
            return []
        if not pods:
            logger.error("Eviction manager: eviction thresholds have been met, but no pods are active to evict")
            return []
        for pod in rank(pods):
            if await self._evict_pod(pod, threshold, resource, result.act_on, observations):
                return [pod]
        logger.info("Eviction manager: unable to evict any pods from the node")
        return []

    async def _local_storage_eviction(self, pods: Sequence[EvictionCandidate]) -> list[EvictionCandidate]:
        """upstream localStorageEviction: every pod over its emptyDir sizeLimit, its containers' total
        ephemeral-storage limit or one container's, evicted at once (grace period 1s, immediateEviction-
        GracePeriodSeconds) with the message and no DisruptionTarget condition (upstream passes none)."""
        evicted = []
        for pod in pods:
            found = h.local_storage_eviction(pod, dedicated_image_fs=self._dedicated_image_fs)
            if found is None:
                continue
            _signal, message = found
            status = h.evicted_status(message, disruption_target=False)
            if await self._kill(pod, message, {}, status, h.IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS):
                evicted.append(pod)
        return evicted

    async def _reclaim_node_level(self, signal: str, resource: str) -> bool:
        """upstream reclaimNodeLevelResources: run the signal's GC steps, then measure again; True when no
        threshold is met any more counting min reclaim (no pod need go)."""
        steps = self._node_reclaim.get(signal, ())
        for step in steps:
            reclaim = self._reclaimers.get(step)
            if reclaim is None:
                continue
            try:
                await reclaim()
            except Exception as err:
                logger.info("Eviction manager: unexpected error when attempting to reduce %s pressure: %s",
                            resource, err)
        if not steps:
            return False
        try:
            observations = await self._observe()
        except Exception as exc:
            log_failed_round(logger, "Eviction manager: failed to get summary stats after resource reclaim", exc)
            return False
        return not h.thresholds_met(self._thresholds, observations, enforce_min_reclaim=True)

    async def _evict_pod(self, pod: EvictionCandidate, threshold: th.Threshold, resource: str,
                         met: Sequence[th.Threshold], observations: Mapping[str, Observation]) -> bool:
        """Evict for a threshold: the grace period, message and status (with DisruptionTarget) it calls for."""
        grace = h.eviction_grace_period(threshold, pod.termination_grace_period_seconds,
                                        self._config.max_pod_grace_period)
        message, annotations = h.eviction_message(resource, pod, met, observations)
        status = h.evicted_status(message, generation=pod.generation, now=self._wall_clock())
        return await self._kill(pod, message, annotations, status, grace)

    async def _kill(self, pod: EvictionCandidate, message: str, annotations: Mapping[str, str],
                    status: dict[str, object], grace: int) -> bool:
        """upstream evictPod: never a critical pod (False: try the next); otherwise the event, then the kill
        with the evicted status. A failed kill is logged and still counts (as upstream)."""
        if pod.critical:
            logger.error("Eviction manager: cannot evict a critical pod %s/%s", pod.namespace, pod.name)
            return False
        self._event(pod.uid, h.REASON, message, annotations)
        try:
            await self._evict(pod.uid, status, grace)
        except Exception as exc:
            log_failed_round(logger, f"Eviction manager: pod {pod.namespace}/{pod.name} failed to evict", exc)
        else:
            logger.info("Eviction manager: pod %s/%s is evicted successfully", pod.namespace, pod.name)
        return True

    async def _wait_for_cleanup(self, pods: Sequence[EvictionCandidate]) -> None:
        """upstream waitForPodsCleanup: poll every second until every pod is cleaned up, give up after 30s."""
        if self._pod_cleaned_up is None:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(POD_CLEANUP_TIMEOUT):
                while True:
                    await asyncio.sleep(POD_CLEANUP_POLL)
                    for pod in pods:
                        if not await self._pod_cleaned_up(pod.uid):
                            break
                    else:
                        return
        logger.info("Eviction manager: timed out waiting for pods %s to be cleaned up",
                    ", ".join(f"{p.namespace}/{p.name}" for p in pods))

    async def run(self, period: float = MONITORING_PERIOD) -> None:
        """The control loop (upstream Start): a round every `period`; after an eviction, the next round
        comes as soon as the evicted pods are cleaned up. Runs until cancelled."""
        logger.info("Eviction manager: starting control loop")
        while True:
            try:
                evicted = await self.synchronize()
            except Exception as exc:
                log_failed_round(logger, "Eviction manager: failed to synchronize", exc)
                evicted = []
            if evicted:
                await self._wait_for_cleanup(evicted)
            else:
                await asyncio.sleep(period)
