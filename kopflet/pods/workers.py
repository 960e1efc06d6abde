"""One worker per pod (upstream podWorkers): everything done for a pod is serialized in its worker,
pods are worked in parallel.

A worker wakes on a pod update from the watch, on a runtime change noticed by the relist, when a
backoff ends, and at least every resync period. Each wake is one sync: fresh runtime view, pure
decision (``compute_pod_actions``), execution, fresh runtime view, pure status, and a status patch
only if something changed. Its coarse lifecycle is syncing -> terminating (deletionTimestamp: stop
containers, write the terminal status, delete the Pod with grace 0 and a UID precondition) ->
gone (object deleted: remove containers, sandboxes and directories).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from cri_client import CriError
from kopflet import backoff as backoffs
from kopflet.allocation import policy
from kopflet.api import spec
from kopflet.api.events import NORMAL, WARNING
from kopflet.client.events import EventRecorder
from kopflet.client.kubeapi import API_ERRORS, KubeClient
from kopflet.cm import helpers
from kopflet.config.settings import AgentConfig
from kopflet.container import podstate
from kopflet.container.sync_result import SyncResult
from kopflet.kuberuntime import gc, reconciler, resize
from kopflet.kuberuntime.executor import PodSyncer
from kopflet.lifecycle import admission, deadline
from kopflet.metrics import KubeletMetrics
from kopflet.pleg.relist import RuntimeCache
from kopflet.prober.manager import ProbeManager
from kopflet.status import generate
from kopflet.status.manager import StatusManager

logger = logging.getLogger(__name__)

ERROR_RETRY = 10.0  # upstream backOffPeriod for a failed sync
STARTED_RECHECK = 1.0  # seconds; the relist period
PENDING_RESIZE_RETRY = 30.0  # upstream retries pending resizes every 30 s until the pod sources are ready, then 3 min
MAX_TERMINATION_MESSAGE = 4096  # upstream: bytes per container
FALLBACK_LOG_LINES = 80
FALLBACK_LOG_BYTES = 2048
TERMINAL_PHASES = ("Succeeded", "Failed")


class _Worker:
    def __init__(self, uid: str, body: Mapping[str, Any]) -> None:
        self.uid, self.body = uid, body
        self.wake = asyncio.Event()
        self.gone = False
        self.admitted = False
        self.pod: spec.Pod | None = None
        self.task: asyncio.Task[None] | None = None
        self.reported_error = ""
        self.first_seen = time.time()
        self.synced = self.updated = self.start_observed = False
        self.deadline_reported = False  # the DeadlineExceeded event was posted
        self.resize_conditions: dict[str, dict[str, Any]] | None = None
        """PodResizePending / PodResizeInProgress as the agent holds them (None: not read from the API yet)."""


class PodWorkers:
    def __init__(self, cfg: AgentConfig, api: KubeClient, cache: RuntimeCache, syncer: PodSyncer,
                 recorder: EventRecorder, backoff: backoffs.Backoff,
                 node_info: Callable[[], Awaitable[admission.NodeInfo]]) -> None:
        self.cfg, self.api, self.cache, self.syncer = cfg, api, cache, syncer
        self.recorder, self.backoff, self.node_info = recorder, backoff, node_info
        self.probes: ProbeManager | None = None  # set once built: it needs this object's wake()
        self.metrics: KubeletMetrics | None = None
        self.status = StatusManager(api)
        self.workers: dict[str, _Worker] = {}
        # Resize decisions one at a time, each against what the others hold once the previous one is recorded
        # (upstream allocationMutex).
        self.allocating = asyncio.Lock()

    # ------------------------------------------------------------------------------------- inputs

    def update(self, body: Mapping[str, Any]) -> None:
        """A pod as the watch delivered it (ADDED, MODIFIED, or listed at start)."""
        uid = body.get("metadata", {}).get("uid", "")
        if not uid:
            return
        worker = self.workers.get(uid)
        if worker is None:
            worker = self.workers[uid] = _Worker(uid, body)
            worker.task = asyncio.create_task(self._run(worker), name=f"pod-worker-{uid}")
        else:
            changed = _sync_relevant(worker.body) != _sync_relevant(body)
            gates_moved = _gate_conditions(worker.body) != _gate_conditions(body)
            worker.body = body
            if not changed:
                if gates_moved:  # upstream HandlePodReconcile: re-judge Ready when a gate's condition moved
                    worker.wake.set()
                return  # only the status moved (often our own patch): nothing to do before the next wake
            worker.updated = True
        worker.wake.set()

    def deleted(self, body: Mapping[str, Any]) -> None:
        """The Pod object is gone from the API: clean up what is left of it on the node."""
        uid = body.get("metadata", {}).get("uid", "")
        worker = self.workers.get(uid)
        if worker is None:
            self.update(body)
            worker = self.workers[uid]
        worker.gone = True
        worker.wake.set()

    def status_lost(self, uid: str) -> None:
        """The API object lost the pod's status (a static pod's mirror was re-created): write it all again."""
        worker = self.workers.get(uid)
        if worker is not None:
            worker.body = {**worker.body, "status": {}}
            worker.wake.set()

    def wake(self, uids: Iterable[str]) -> None:
        for uid in uids:
            worker = self.workers.get(uid)
            if worker is not None:
                worker.wake.set()

    async def stop(self) -> None:
        """The agent stops: workers stop, containers keep running for the next start to adopt."""
        tasks = [w.task for w in self.workers.values() if w.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # --------------------------------------------------------------------------------------- loop

    async def _run(self, worker: _Worker) -> None:
        delay: float = 0
        while True:
            with contextlib.suppress(TimeoutError):  # asyncio.timeout keeps a cancel that races the timeout
                async with asyncio.timeout(delay):
                    await worker.wake.wait()
            worker.wake.clear()
            kind = _sync_type(worker)
            worker.updated, started = False, time.monotonic()
            try:
                delay = await self._sync(worker)
                worker.synced = True
                if self.metrics is not None:
                    self.metrics.observe_pod_worker(kind, time.monotonic() - started)
            except (*API_ERRORS, CriError) as exc:
                logger.warning(f"pod {_ref(worker.body)}: sync failed, retrying in {ERROR_RETRY:.0f}s: {exc}")
                delay = ERROR_RETRY
            except Exception:
                logger.exception(f"pod {_ref(worker.body)}: sync crashed, retrying in {ERROR_RETRY:.0f}s")
                delay = ERROR_RETRY
            if worker.gone and worker.uid not in self.cache.pods:
                self.workers.pop(worker.uid, None)
                return

    async def _sync(self, worker: _Worker) -> float:
        body = worker.body
        uid = worker.uid
        runtime = await self.cache.refresh_pod(uid)
        if worker.gone:
            self._probes_forget(uid)
            self.syncer.images.pulling.pop(uid, None)
            meta = body.get("metadata", {})
            pod = spec.minimal_pod(meta.get("uid", ""), meta.get("namespace", ""), meta.get("name", ""))
            await self.syncer.kill_pod(pod, runtime, grace=0)
            await self.syncer.remove_pod(await self.cache.refresh_pod(uid), uid)
            await self.cache.refresh_pod(uid)
            self.cache.pods.pop(uid, None)
            self._wake_pending_resizes()  # upstream retries pending resizes when a pod is removed
            return self.cfg.resync_period
        try:
            pod = spec.pod_from_body(body)
        except spec.SpecError as exc:
            return await self._invalid(worker, str(exc))

        previous = body.get("status", {}) or {}
        if pod.is_deleting or previous.get("phase") in TERMINAL_PHASES:
            pod = policy.apply_allocation(pod, self.syncer.allocations.allocation(uid))  # never ungranted values
        if pod.is_deleting:
            self._probe(pod, runtime)  # liveness and startup stop, readiness goes on
            return await self._terminate(worker, pod, runtime, previous)
        if previous.get("phase") in TERMINAL_PHASES:
            return await self._finish(worker, pod, runtime)  # final: never restarted

        if not worker.admitted:
            worker.pod = pod
            if await self._admit(worker, pod, runtime, previous):
                worker.admitted = True
            else:
                return self.cfg.resync_period
        # From here on the pod is the allocated one (upstream: the pod worker runs UpdatePodFromAllocation's pod).
        pod = await self._allocate(worker, pod, previous)
        worker.pod = pod
        if deadline.past_active_deadline(pod, deadline.start_time(previous), datetime.datetime.now(datetime.UTC)):
            # Upstream activeDeadlineHandler: the pod is terminal and killed; Failed (DeadlineExceeded) is written
            # once its containers stopped (upstream mergePodStatus holds a terminal phase back until then).
            if not worker.deadline_reported:
                worker.deadline_reported = True
                self.recorder.pod_event(pod, NORMAL, deadline.REASON, deadline.MESSAGE)  # upstream ShouldEvict's
            return await self._finish(worker, pod, runtime, write=True)
        self._probe(pod, runtime)
        started = {cid for cid, ok in self.probes.started(uid).items() if ok} if self.probes else set()
        restart_all = await self._restarting_all_containers(worker, pod, runtime, previous)
        actuated = self.syncer.allocations.actuation(uid)
        actions = reconciler.compute_pod_actions(
            pod, runtime, backoff=self.backoff, now=time.time(),
            liveness_failures=self.probes.liveness_failures(uid) if self.probes else (),
            startup_failures=self.probes.startup_failures(uid) if self.probes else (), started=started,
            restart_all_containers=restart_all,
            resize_restarts=resize.compute(pod, runtime, actuated).restart if not restart_all else None)
        if actions.reason:
            logger.info(f"pod {pod.namespace}/{pod.name}: {actions.reason}")
        resizing = resize.compute(pod, runtime, actuated,
                                  starting=(*actions.init_containers_to_start, *actions.containers_to_start))
        self._resize_progress(worker, pod, runtime, actuated)
        before = runtime
        result = await self.syncer.sync(pod, runtime, actions, resizing)
        if result.resize_error:
            self._resize_failed(worker, pod, result.resize_error)
        self.cache.forget_containers(result.resized)
        runtime = await self.cache.refresh_pod(uid)
        self._probe(pod, runtime)
        await self._write_status(worker, pod, runtime, result)
        evictions = gc.evictable(runtime)
        if evictions.containers or evictions.sandboxes:
            await self.syncer.remove(evictions.containers, evictions.sandboxes)
        # Wake when activeDeadlineSeconds runs out (upstream ShouldSync picks the pod up then).
        left = deadline.time_left(pod, deadline.start_time(worker.body.get("status") or {}),
                                  datetime.datetime.now(datetime.UTC))
        delay = self._next_delay(result) if left is None else min(self._next_delay(result), max(left, 0.5))
        if actions.init_containers_to_start:
            # A sidecar just started stays running: no runtime change will wake the worker for the next step of
            # initialisation, so look again soon (upstream's PLEG reports ContainerStarted and resyncs the pod).
            delay = min(delay, STARTED_RECHECK)
        if not actions.kill_pod and podstate.exited_meanwhile(before, runtime, stopped=actions.containers_to_kill):
            delay = 0.0  # this refresh hid the exit from the relist: decide on it now
        if actions.containers_to_reset:
            delay = 0.0  # upstream requeues the pod right after a RestartAllContainers reset to start it again
        if result.resize_error:
            delay = min(delay, ERROR_RETRY)  # upstream retries a failed resize after its sync backoff
        elif resizing.any or resizing.restart or resize.in_progress(pod, runtime,
                                                                    self.syncer.allocations.actuation(uid)):
            delay = min(delay, STARTED_RECHECK)  # upstream RequestPodReinspect: see the resize through soon
        if (worker.resize_conditions or {}).get(policy.POD_RESIZE_PENDING):
            delay = min(delay, PENDING_RESIZE_RETRY)
        return delay

    # ------------------------------------------------------------------------------------ resize

    def _wake_pending_resizes(self) -> None:
        self.wake([w.uid for w in self.workers.values()
                   if (w.resize_conditions or {}).get(policy.POD_RESIZE_PENDING)])

    def _resize_state(self, worker: _Worker, previous: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        """The resize conditions, taken over from the API status once (upstream BackfillPodResizeConditions)."""
        if worker.resize_conditions is None:
            worker.resize_conditions = {
                c["type"]: dict(c) for c in previous.get("conditions") or ()
                if isinstance(c, Mapping) and c.get("type") in generate.RESIZE_CONDITIONS}
        return worker.resize_conditions

    async def _allocate(self, worker: _Worker, pod: spec.Pod, previous: Mapping[str, Any]) -> spec.Pod:
        """Upstream handlePodResourcesResize: grant the spec's new resources if they fit next to what the other
        pods hold, else say why in PodResizePending; return the pod with what is allocated."""
        allocations = self.syncer.allocations
        granted = allocations.allocation(pod.uid)
        if granted is None:  # admitted now, or before a restart that lost the checkpoint
            await asyncio.to_thread(allocations.set_allocation, pod)
            return pod
        conditions = self._resize_state(worker, previous)
        if not policy.resize_pending_differs(pod, granted):
            conditions.pop(policy.POD_RESIZE_PENDING, None)
            return pod
        generation = int(worker.body.get("metadata", {}).get("generation") or 0)
        node = await self.node_info()
        async with self.allocating:
            others = [policy.held_pod(w.pod, w.body.get("status"))
                      for w in self.workers.values()
                      if w is not worker and w.admitted and w.pod is not None and not w.gone
                      and (w.body.get("status", {}) or {}).get("phase") not in TERMINAL_PHASES]
            decision = policy.decide(pod, granted, node, others)
            if decision.outcome == policy.ACCEPTED:
                await asyncio.to_thread(allocations.set_allocation, pod)
                worker.pod = pod  # what the next decision counts for this pod
        now = generate.timestamp(datetime.datetime.now(datetime.UTC))
        event = decision.event(pod, generation)
        if decision.outcome == policy.ACCEPTED:
            conditions.pop(policy.POD_RESIZE_PENDING, None)
            conditions.pop(policy.POD_RESIZE_IN_PROGRESS, None)
            conditions[policy.POD_RESIZE_IN_PROGRESS], _ = policy.in_progress_condition(
                None, "", "", generation, now)
            logger.info(f"pod {pod.namespace}/{pod.name}: resize accepted")
        elif decision.pending:
            previous_pending = conditions.get(policy.POD_RESIZE_PENDING)
            condition, changed = policy.pending_condition(
                previous_pending, decision.reason, decision.message, generation, now)
            same = previous_pending is not None and all(
                previous_pending.get(k) == condition.get(k) for k in ("status", "reason", "message"))
            conditions[policy.POD_RESIZE_PENDING] = _keep_probe_time(previous_pending, condition, not same)
            if not changed:
                event = None
        if event is not None:
            self.recorder.pod_event(pod, event.type, event.reason, event.message)
        return policy.apply_allocation(pod, allocations.allocation(pod.uid))

    def _resize_progress(self, worker: _Worker, pod: spec.Pod, runtime: podstate.RuntimePodStatus,
                         actuated: policy.PodAllocation | None) -> None:
        """Upstream SyncPod before actuating: PodResizeInProgress while the allocation is not actuated; cleared
        (with ResizeCompleted, only if one was there) once it is."""
        conditions = self._resize_state(worker, worker.body.get("status") or {})
        generation = int(worker.body.get("metadata", {}).get("generation") or 0)
        if resize.in_progress(pod, runtime, actuated):
            now = generate.timestamp(datetime.datetime.now(datetime.UTC))
            previous = conditions.get(policy.POD_RESIZE_IN_PROGRESS)
            condition, changed = policy.in_progress_condition(previous, "", "", generation, now)
            conditions[policy.POD_RESIZE_IN_PROGRESS] = _keep_probe_time(previous, condition, changed)
            return
        cleared = conditions.pop(policy.POD_RESIZE_IN_PROGRESS, None)
        if cleared is not None:
            done = int(cleared.get("observedGeneration") or generation)
            self.recorder.pod_event(pod, NORMAL, policy.RESIZE_COMPLETED,
                                    policy.resize_event_message("Pod resize completed", pod, done))

    def _resize_failed(self, worker: _Worker, pod: spec.Pod, message: str) -> None:
        """A resize the runtime or the kernel refused: PodResizeInProgress reason Error, ResizeError if new."""
        conditions = self._resize_state(worker, worker.body.get("status") or {})
        generation = int(worker.body.get("metadata", {}).get("generation") or 0)
        now = generate.timestamp(datetime.datetime.now(datetime.UTC))
        previous = conditions.get(policy.POD_RESIZE_IN_PROGRESS)
        condition, changed = policy.in_progress_condition(previous, policy.REASON_ERROR, message, generation,
                                                          now)
        conditions[policy.POD_RESIZE_IN_PROGRESS] = _keep_probe_time(previous, condition, changed)
        if changed:
            done = int(condition.get("observedGeneration") or generation)
            self.recorder.pod_event(pod, WARNING, policy.RESIZE_ERROR,
                                    policy.resize_event_message("Pod resize error", pod, done, message))

    async def _restarting_all_containers(self, worker: _Worker, pod: spec.Pod, runtime: podstate.RuntimePodStatus,
                                         previous: Mapping[str, Any]) -> bool:
        """Upstream's restartingAllContainers: AllContainersRestarting True in the status generated before
        SyncPod. When it is, that status is written first, as upstream's status manager has it before the
        containers go: the container that triggered the reset shows its exit, and the status after the reset
        (containers waiting with RestartingAllContainers, restartCount + 1) is computed against it."""
        if not spec.all_containers_could_restart(pod.spec):
            return False
        before = generate.compute_pod_status(pod, runtime, previous=previous, now=datetime.datetime.now(datetime.UTC))
        if not generate.all_containers_restarting(before):
            return False
        await self._write_status(worker, pod, runtime, SyncResult())
        return True

    async def _finish(self, worker: _Worker, pod: spec.Pod, runtime: podstate.RuntimePodStatus,
                      write: bool = False) -> float:
        """A terminal pod (Succeeded, Failed, past its deadline): make sure nothing of it still runs, then write
        the status its stopped containers give when something had to be stopped or `write` (upstream
        SyncTerminatingPod, then SyncTerminatedPod). A terminal phase already written stays."""
        self._probes_forget(worker.uid)
        if runtime.running_containers() or any(s.ready for s in runtime.sandboxes):
            await self.syncer.kill_pod(pod, runtime, grace=None)
            runtime = await self.cache.refresh_pod(worker.uid)
            if runtime.running_containers():
                return 1.0  # still stopping: look again shortly
            write = True
        if write:
            await self._write_status(worker, pod, runtime, SyncResult(), terminal=True)
        return self.cfg.resync_period

    def _probe(self, pod: spec.Pod, runtime: podstate.RuntimePodStatus) -> None:
        """Start, keep or stop the pod's probe loops for its current containers."""
        if self.probes is not None:
            pod_ip = self.cfg.node_ip if pod.spec.host_network else next(iter(runtime.ips), "")
            self.probes.sync_pod(pod, runtime, pod_ip)

    def _probes_forget(self, uid: str) -> None:
        if self.probes is not None:
            self.probes.forget(uid)

    def _next_delay(self, result: SyncResult) -> float:
        delay = self.cfg.resync_period
        if result.failed:
            delay = ERROR_RETRY
        if result.retry_after is not None:
            delay = min(delay, max(result.retry_after, 0.5))
        return delay

    async def _terminate(self, worker: _Worker, pod: spec.Pod, runtime: podstate.RuntimePodStatus,
                         previous: Mapping[str, Any]) -> float:
        """deletionTimestamp: stop within the grace period, write the terminal status, then delete."""
        if runtime.running_containers() or any(s.ready for s in runtime.sandboxes):
            await self.syncer.kill_pod(pod, runtime, grace=None)
            runtime = await self.cache.refresh_pod(worker.uid)
        if runtime.running_containers():
            return 1.0  # still stopping: look again shortly
        await self._write_status(worker, pod, runtime, SyncResult(), terminal=True)
        await self.status.delete(pod.namespace, pod.name, pod.uid)
        return self.cfg.resync_period

    async def _admit(self, worker: _Worker, pod: spec.Pod, runtime: podstate.RuntimePodStatus,
                     previous: Mapping[str, Any]) -> bool:
        """Upstream canAdmitPod, once per pod before anything runs. A pod that already has something on
        the runtime, or is past Pending, was admitted before (by this agent before a restart)."""
        if runtime.sandboxes or runtime.containers or previous.get("phase", "Pending") != "Pending":
            return True
        others = [w.pod for w in self.workers.values()
                  if w is not worker and w.admitted and w.pod is not None and not w.gone
                  and (w.body.get("status", {}) or {}).get("phase") not in TERMINAL_PHASES]
        rejection = admission.admit(pod, await self.node_info(), others)
        if rejection is None:
            return True
        # Final: phase Failed with the reason and message, never retried (upstream rejectPod).
        logger.warning(f"pod {pod.namespace}/{pod.name} rejected: {rejection.reason}: {rejection.message}")
        self.recorder.pod_event(pod, WARNING, rejection.reason, rejection.event_message)
        await self._send_status(worker, pod, previous,
                                generate.rejected_status(previous, rejection.reason, rejection.message))
        return False

    async def _invalid(self, worker: _Worker, message: str) -> float:
        """A spec the agent cannot run: say so on the pod, once, and keep the other pods going."""
        if worker.reported_error != message:
            worker.reported_error = message
            logger.warning(f"pod {_ref(worker.body)}: {message}")
            meta = worker.body.get("metadata", {})
            pod = spec.minimal_pod(meta.get("uid", ""), meta.get("namespace", ""), meta.get("name", ""))
            self.recorder.pod_event(pod, WARNING, "Failed", f"Error: {message}")
        return self.cfg.resync_period

    async def _write_status(self, worker: _Worker, pod: spec.Pod, runtime: podstate.RuntimePodStatus,
                            result: SyncResult, terminal: bool = False) -> None:
        previous = worker.body.get("status", {}) or {}
        messages = await asyncio.to_thread(self._termination_messages, pod, runtime)
        actuated = self.syncer.allocations.actuation(pod.uid)
        pod_cgroup = await asyncio.to_thread(self.syncer.cgroups.read, helpers.pod_cgroup_parent(pod)) \
            if previous.get("phase") == generate.RUNNING else None
        generation = worker.body.get("metadata", {}).get("generation")
        desired = generate.compute_pod_status(
            pod, runtime, previous=previous, waiting=result.waiting, termination_messages=messages,
            readiness=self.probes.readiness(pod.uid) if self.probes else None,
            startup=self.probes.started(pod.uid) if self.probes else None,
            host_ip=self.cfg.node_ip, host_ips=(self.cfg.node_ip,) if self.cfg.node_ip else (),
            now=datetime.datetime.now(datetime.UTC), pod_is_terminal=terminal,
            generation=generation if isinstance(generation, int) else None,
            actuated=actuated.containers if actuated is not None else None,
            resize_conditions=list((worker.resize_conditions or {}).values()), pod_cgroup=pod_cgroup)
        if desired.get("reason") == deadline.REASON and previous.get("reason") != deadline.REASON \
                and not worker.deadline_reported:  # the deadline passed during this sync
            worker.deadline_reported = True
            self.recorder.pod_event(pod, NORMAL, deadline.REASON, deadline.MESSAGE)
        if not worker.start_observed and _all_started(desired):
            worker.start_observed = True
            if (previous.get("phase") or "Pending") == "Pending":  # not a pod adopted already running
                self._observe_start(worker)
        await self._send_status(worker, pod, previous, desired)

    async def _send_status(self, worker: _Worker, pod: spec.Pod, previous: Mapping[str, Any],
                           desired: Mapping[str, Any]) -> None:
        written = await self.status.write(pod.namespace, pod.name, pod.uid, previous, desired)
        if written is not None:
            worker.body = {**worker.body, "status": written}

    def _observe_start(self, worker: _Worker) -> None:
        """Pod start latency (upstream pod_startup_latency_tracker): from first seen by the agent, and the
        SLI from creation to running minus the time spent pulling images."""
        now = time.time()
        pulling = self.syncer.images.pulling.pop(worker.uid, None)
        if self.metrics is None:
            return
        self.metrics.pod_start_duration.observe(max(0.0, now - worker.first_seen))
        created = _timestamp((worker.body.get("metadata") or {}).get("creationTimestamp"))
        if created is not None:
            pulled = pulling[1] - pulling[0] if pulling else 0.0
            self.metrics.pod_start_sli_duration.observe(max(0.0, now - created - pulled))

    def _termination_messages(self, pod: spec.Pod, runtime: podstate.RuntimePodStatus) -> dict[str, str]:
        """Upstream getTerminationMessage: the file the container wrote, or (FallbackToLogsOnError) the
        tail of its log after a failure. Blocking reads: called in a thread."""
        out: dict[str, str] = {}
        for info in runtime.containers:
            if info.state != podstate.State.EXITED:
                continue
            raw = self.cache.container_status(info.id)
            if raw is None:
                continue
            message = ""
            for mount in raw.mounts:
                if info.termination_message_path and mount.container_path == info.termination_message_path:
                    with contextlib.suppress(OSError):
                        with open(mount.host_path, "rb") as f:
                            message = f.read(MAX_TERMINATION_MESSAGE).decode(errors="replace")
            if not message and info.exit_code != 0 and \
                    info.termination_message_policy == spec.TERMINATION_MESSAGE_FALLBACK_TO_LOGS and raw.log_path:
                message = _log_tail(Path(raw.log_path))
            if message:
                out[info.id] = message
        return out


def _keep_probe_time(previous: Mapping[str, Any] | None, condition: dict[str, Any],
                     changed: bool) -> dict[str, Any]:
    """The condition with the previous lastProbeTime when nothing else changed: upstream's status manager does not
    count probe times as a change (isPodStatusByKubeletEqual), so an unchanged condition writes nothing."""
    if previous is not None and not changed and previous.get("lastProbeTime"):
        return {**condition, "lastProbeTime": previous["lastProbeTime"]}
    return condition


def _gate_conditions(body: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The conditions named by the pod's readiness gates (set by other controllers through pods/status)."""
    gates = {g.get("conditionType") for g in (body.get("spec") or {}).get("readinessGates") or ()
             if isinstance(g, Mapping)}
    return tuple(sorted((str(c.get("type")), str(c.get("status"))) for c in
                        (body.get("status") or {}).get("conditions") or () if c.get("type") in gates))


def _sync_type(worker: _Worker) -> str:
    """The operation_type of kubelet_pod_worker_duration_seconds (upstream SyncPodType)."""
    if worker.gone or (worker.body.get("metadata") or {}).get("deletionTimestamp"):
        return "kill"
    if not worker.synced:
        return "create"
    return "update" if worker.updated else "sync"


def _all_started(pod_status: Mapping[str, Any]) -> bool:
    """Running with every regular container running: what upstream counts as a started pod."""
    containers = pod_status.get("containerStatuses") or ()
    return pod_status.get("phase") == "Running" and bool(containers) and \
        all("running" in (c.get("state") or {}) for c in containers)


def _timestamp(value: Any) -> float | None:
    try:
        return datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp() if value else None
    except ValueError:
        return None


def _log_tail(path: Path) -> str:
    """The last lines of a CRI log file, message text only (upstream: 80 lines, at most 2 KiB)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(size - 64 * 1024, 0))
            lines = f.read().decode(errors="replace").splitlines()[-FALLBACK_LOG_LINES:]
    except OSError:
        return ""
    text = ""
    for line in lines:
        parts = line.split(" ", 3)  # <time> <stream> <P|F> <message>
        if len(parts) == 4:
            text += parts[3] + ("" if parts[2] == "P" else "\n")
    return text[-FALLBACK_LOG_BYTES:]


def _sync_relevant(body: Mapping[str, Any]) -> tuple[Any, ...]:
    """What an update must change to make the worker sync now (upstream checkAndUpdatePod: spec, labels,
    annotations, deletion), so a status-only update, such as the agent's own patch, wakes nothing."""
    meta = body.get("metadata", {})
    return (body.get("spec"), meta.get("labels"), meta.get("annotations"), meta.get("deletionTimestamp"),
            meta.get("deletionGracePeriodSeconds"))


def _ref(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata", {})
    return f"{meta.get('namespace')}/{meta.get('name')}"
