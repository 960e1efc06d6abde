"""One worker per pod (upstream podWorkers): everything done for a pod is serialized in its worker, pods are
worked in parallel.

A worker wakes on a pod update from the watch, on a runtime change noticed by the relist, on a probe result, when
a backoff ends, and at least every resync period. Each wake is one sync in three steps:

- observe: a fresh runtime view of the pod (and its probe loops set to what runs), the probe results, the
  allocation checkpoints, termination messages, the pod cgroup, the node when admission or a resize needs it;
- decide: `kopflet.pods.decide.decide`, once, under the node's allocation lock (upstream allocationMutex), so
  admissions and resizes are judged one at a time against what the other pods hold;
- act: record the allocation, post the events, write the status through the one status writer
  (`kopflet.status.manager`), then tear down, kill, or carry out SyncPod's steps (`kopflet.kuberuntime.executor`),
  then the final delete and the container GC. A sync that changed the runtime is followed at once by one that
  observes what it achieved.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

from cri_client import CriError
from kopflet import backoff as backoffs
from kopflet.allocation import policy
from kopflet.allocation.state import AllocationManager
from kopflet.api import spec, times
from kopflet.client.events import EventRecorder
from kopflet.client.kubeapi import API_ERRORS
from kopflet.cm import admission as resource_admission
from kopflet.cm.cgroups import PodCgroups
from kopflet.cm.cpumanager.cpu_manager import Pods
from kopflet.cm.cpumanager.manager import CPUManager
from kopflet.cm.devicemanager import devices as devicemanager
from kopflet.cm.devicemanager.manager import DeviceManager
from kopflet.cm.memorymanager.manager import MemoryManager
from kopflet.cm.topologymanager.topology_manager import NO_TOPOLOGY
from kopflet.config.settings import AgentConfig
from kopflet.container import podstate
from kopflet.container.sync_result import ADMISSION, StepTime
from kopflet.hooks import api as hooks
from kopflet.hooks.runner import PolicyHooks
from kopflet.images.manager import ImageManager
from kopflet.kuberuntime.executor import PodSyncer
from kopflet.lifecycle import admission
from kopflet.logs import reader as logreader
from kopflet.logs.verbosity import v
from kopflet.metrics import KubeletMetrics
from kopflet.pleg.relist import RuntimeCache
from kopflet.pods import decide, explain, rewrite, timeline
from kopflet.pods.decide import Lifecycle, Memory, Observation, Plan, ProbeResults
from kopflet.pods.teardown import Teardown
from kopflet.prober.manager import ProbeManager
from kopflet.status.manager import RETRY_PERIOD, StatusManager
from kopflet.tracing.exporter import StartTracer
from kopflet.tracing.spans import PodRef

logger = logging.getLogger(__name__)

ERROR_RETRY = decide.ERROR_RETRY
MAX_TERMINATION_MESSAGE = 4096  # upstream: bytes per container
FALLBACK_LOG_LINES = 80
FALLBACK_LOG_BYTES = 2048


class _Worker:
    """One pod's worker: the latest watch object (with the status written last) and what decide remembers."""

    def __init__(self, uid: str, body: Mapping[str, Any]) -> None:
        self.uid, self.body = uid, body
        self.wake = asyncio.Event()
        self.gone = False
        self.pod: spec.Pod | None = None
        """The allocated pod as last decided, once admitted: what the other pods' decisions count."""
        self.memory = Memory()
        self.task: asyncio.Task[None] | None = None
        self.first_seen, self.first_seen_monotonic = time.time(), time.monotonic()
        self.synced = self.updated = False
        self.eviction: decide.Eviction | None = None
        """Set by the eviction manager: the pod is killed and ends Failed (Evicted)."""
        self.decisions = explain.Ring()
        """The last decisions, for `kopflet explain` (`PodWorkers.decisions`)."""
        self.timeline: timeline.Timeline | None = None
        """The pod's last start, step by step (None: none seen by this agent, such as a pod adopted running)."""

    @property
    def holds_node(self) -> bool:
        """Admitted, alive and not terminal: its resources and ports count against the node."""
        return self.memory.admitted and self.pod is not None and not self.gone and \
            (self.body.get("status") or {}).get("phase") not in decide.TERMINAL_PHASES


class PodWorkers:
    metrics: KubeletMetrics | None = None
    """The kubelet's metrics (None: not recorded; also for parts built without `__init__` in tests)."""
    devices: DeviceManager | None = None
    """The device manager (None: no device plugins; also for parts built without `__init__` in tests)."""
    memory_manager: MemoryManager | None = None
    """The memory manager (None: none), set by the constructor."""
    hooks: PolicyHooks | None = None
    """The policy hooks (None: none loaded), set by the constructor."""
    tracer: StartTracer | None = None
    """The pod start traces (None: tracing off), set by the constructor."""

    def __init__(self, cfg: AgentConfig, *, relist: RuntimeCache, executor: PodSyncer, prober: ProbeManager,
                 status: StatusManager, recorder: EventRecorder, backoff: backoffs.Backoff,
                 node_info: Callable[[spec.Pod], Awaitable[admission.NodeInfo]], allocations: AllocationManager,
                 cgroups: PodCgroups, images: ImageManager, teardown: Teardown,
                 metrics: KubeletMetrics | None = None, cpus: CPUManager | None = None,
                 devices: DeviceManager | None = None,
                 allocating: asyncio.Lock | None = None, memory: MemoryManager | None = None,
                 hooks: PolicyHooks | None = None, tracer: StartTracer | None = None) -> None:
        """`cpus` is the CPU manager whose exclusive CPUs admissions take, `memory` the memory manager whose NUMA
        blocks they take (with the topology manager that aligns both), `devices` the device manager whose plugins
        allocate devices; `allocating` the node's allocation lock
        (the CPU manager's reconcile loop takes it too; one of its own by default); `hooks` the policy hooks
        (None: none); `tracer` the pod start traces (None: not traced)."""
        self.cfg, self.relist, self.executor, self.prober, self.status = cfg, relist, executor, prober, status
        self.recorder, self.backoff, self.node_info = recorder, backoff, node_info
        self.allocations, self.cgroups, self.images, self.teardown = allocations, cgroups, images, teardown
        self.metrics, self.cpus, self.devices, self.memory_manager = metrics, cpus, devices, memory
        self.hooks = hooks if hooks is not None and hooks.hooks else None
        self.tracer = tracer
        self.workers: dict[str, _Worker] = {}
        # Admission and resize decisions one at a time, each against what the others hold once the previous one
        # is recorded (upstream allocationMutex).
        self.allocating = allocating if allocating is not None else asyncio.Lock()

    # ------------------------------------------------------------------------------------- inputs

    def update(self, body: Mapping[str, Any]) -> None:
        """A pod as the watch delivered it (ADDED, MODIFIED, or listed at start)."""
        uid = body.get("metadata", {}).get("uid", "")
        if not uid:
            return
        body = _kept(body)
        cached = self.status.observed(uid, body.get("status") or {})
        if cached is not None:  # the status the agent decided and the apiserver has not taken yet is the one to see
            body = {**body, "status": cached}
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

    def evict(self, uid: str, status: Mapping[str, Any], grace_period: int) -> bool:
        """The eviction manager's kill (upstream killPodFunc): the pod's worker kills it with that grace period
        and writes `status` over its terminal status. False when no worker has the pod."""
        worker = self.workers.get(uid)
        if worker is None or worker.gone:
            return False
        worker.eviction = decide.Eviction(status=dict(status), grace_period=grace_period)
        worker.wake.set()
        return True

    def wake(self, uids: Iterable[str]) -> None:
        for uid in uids:
            worker = self.workers.get(uid)
            if worker is not None:
                worker.wake.set()

    def __contains__(self, uid: object) -> bool:
        return uid in self.workers

    def active_pods(self) -> list[tuple[spec.Pod, Mapping[str, Any]]]:
        """The admitted pods that hold the node (alive, not terminal) with their API object: eviction's candidates."""
        return [(w.pod, w.body) for w in list(self.workers.values())
                if w.holds_node and w.pod is not None and w.eviction is None]

    def terminated(self) -> frozenset[str]:
        """The pods in a terminal phase: their runtime may go (upstream ShouldPodRuntimeBeRemoved)."""
        return frozenset(w.uid for w in list(self.workers.values())
                         if (w.body.get("status") or {}).get("phase") in decide.TERMINAL_PHASES)

    def cpu_pods(self) -> Pods:
        """The pods as the CPU manager counts them (upstream GetActivePods): every pod with a worker is known; those
        not deleted from the API and not terminal are active, with their init and app containers' names."""
        active: dict[str, frozenset[str]] = {}
        for w in list(self.workers.values()):
            if w.gone or (w.body.get("status") or {}).get("phase") in decide.TERMINAL_PHASES:
                continue
            pod_spec = w.body.get("spec") or {}
            containers = (*(pod_spec.get("initContainers") or ()), *(pod_spec.get("containers") or ()))
            active[w.uid] = frozenset(str(c.get("name")) for c in containers if isinstance(c, Mapping))
        return Pods(known=frozenset(self.workers), active=active)

    def device_pods(self) -> set[str]:
        """The pods whose devices stay held (upstream GetActivePods, isPodInactive): those with a worker, unless
        the pod is gone from the API, or is terminal or being deleted and nothing of it runs any more (the pod
        worker knows it terminated). So a pod arriving just as another finished terminating may take its devices,
        and a pod still in its grace period keeps them."""
        active = set()
        for w in list(self.workers.values()):
            if w.gone:
                continue
            ending = (w.body.get("metadata") or {}).get("deletionTimestamp") or \
                (w.body.get("status") or {}).get("phase") in decide.TERMINAL_PHASES
            view = self.relist.pods.get(w.uid)
            if ending and (view is None or not view.running_containers()):
                continue
            active.add(w.uid)
        return active

    def pod(self, uid: str) -> spec.Pod | None:
        worker = self.workers.get(uid)
        return worker.pod if worker is not None else None

    def decisions(self, namespace: str, name: str) \
            -> tuple[str, tuple[explain.Decision, ...], timeline.Timeline | None] | None:
        """The uid, the last decisions (oldest first) and the last start's timeline of the pod of that name, None
        when no worker has it; of two workers for the name (a pod deleted and created again), the one whose pod is
        not deleted."""
        found = [w for w in list(self.workers.values())
                 if (w.body.get("metadata") or {}).get("namespace") == namespace
                 and (w.body.get("metadata") or {}).get("name") == name]
        if not found:
            return None
        worker = min(found, key=lambda w: (w.gone, -w.first_seen))
        return worker.uid, worker.decisions.decisions(), worker.timeline

    def bodies(self) -> Iterator[Mapping[str, Any]]:
        """The pods the workers hold that are not deleted from the API, as last seen (with their status)."""
        return (w.body for w in list(self.workers.values()) if not w.gone)

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
                delay = await self._sync(worker, kind)
                worker.synced = True
                if self.metrics is not None:
                    self.metrics.observe_pod_worker(kind, time.monotonic() - started)
            except (*API_ERRORS, CriError) as exc:
                logger.warning(f"pod {_ref(worker.body)}: sync failed, retrying in {ERROR_RETRY:.0f}s: {exc}")
                delay = ERROR_RETRY
            except Exception:
                logger.exception(f"pod {_ref(worker.body)}: sync crashed, retrying in {ERROR_RETRY:.0f}s")
                delay = ERROR_RETRY
            if worker.gone and worker.uid not in self.relist.pods:
                self.workers.pop(worker.uid, None)
                self.status.forget(worker.uid)
                return

    async def _sync(self, worker: _Worker, kind: str = "") -> float:
        """Observe, decide once, act; the seconds until the worker looks again. `kind` is the sync's
        operation_type, recorded with the decision. The policy hooks are asked outside the allocation lock: the
        admit hooks before deciding (their rejection is an input), the plan hooks once the plan starts something
        (their changes are applied to it), the observers once it is recorded."""
        observation = await self._observe(worker)
        runner = self.hooks
        hook_events: tuple[decide.Event, ...] = ()
        if runner is not None and runner.admits:
            observation, hook_events = await self._admit_hooks(runner, observation, worker)
        async with self.allocating:
            # The node's other pods count only where the sync decides against the node (admission, a resize:
            # `needs_node_info`, which read the node): gathered then only, so a burst is not N x N.
            observation = dataclasses.replace(observation, others=tuple(
                (w.pod, w.body.get("status") or {}) for w in self.workers.values()
                if w is not worker and w.holds_node and w.pod is not None) if observation.node is not None else (),
                cpus=self.cpus.snapshot(self.cpu_pods()) if self.cpus is not None and not worker.memory.admitted
                else None,
                memory_blocks=self.memory_manager.snapshot(self.cpu_pods())
                if self.memory_manager is not None and not worker.memory.admitted else None,
                topology=self.memory_manager.topology if self.memory_manager is not None else NO_TOPOLOGY)
            observation = await self._admit_devices(observation, worker)
            plan = decide.decide(observation, self.cfg)
            if plan.admitted and not worker.memory.admitted:
                self._begin_start(worker, observation)
            if plan.cpu_state is not None and self.cpus is not None:
                await self.cpus.commit(plan.cpu_state)  # the checkpoint, before any container is created
            if plan.memory_state is not None and self.memory_manager is not None:
                await self.memory_manager.commit(plan.memory_state)  # likewise the memory manager's
            if plan.allocate is not None:
                await asyncio.to_thread(self.allocations.set_allocation, plan.allocate)
            worker.memory = plan.memory
            if plan.admitted:
                worker.pod = plan.pod  # the pod as decided: what a plan hook adds holds nothing of the node
        if runner is not None and runner.plans and rewrite.starts(plan):
            plan, more = await self._plan_hooks(runner, observation, worker, plan)
            worker.memory, hook_events = plan.memory, hook_events + more
        if hook_events:
            plan = dataclasses.replace(plan, events=hook_events + plan.events)
        decision = self._record(worker, observation, plan, kind)
        try:
            return await self._act(worker, observation, plan)
        finally:  # after the steps: the observers see the start timeline they extended (or finished)
            if decision is not None and runner is not None and runner.observes:
                self._observe_hooks(runner, worker, plan, decision)

    @staticmethod
    def _record(worker: _Worker, observation: Observation, plan: Plan, kind: str) -> explain.Decision | None:
        """Keep the decision for `kopflet explain`; a failure to summarise it never stops the sync."""
        try:
            decision = explain.record(observation, plan, observation.now, sync=kind)
        except Exception:
            logger.exception(f"pod {_ref(worker.body)}: could not record the decision for explain")
            return None
        worker.decisions.add(decision)
        return decision

    # ------------------------------------------------------------------------------------------ policy hooks

    async def _admit_hooks(self, runner: PolicyHooks, observation: Observation,
                           worker: _Worker) -> tuple[Observation, tuple[decide.Event, ...]]:
        """The admit hooks, when this sync admits the pod (`decide.admits`): their rejection goes to `decide`."""
        pod = observation.pod
        if observation.gone or pod is None or not decide.admits(
                pod, observation.body.get("status") or {}, observation.runtime, worker.memory):
            return observation, ()
        others = tuple(w.pod for w in list(self.workers.values())
                       if w is not worker and w.holds_node and w.pod is not None)
        outcome = await runner.admit(pod, lambda: hooks.AdmitRequest(
            pod=pod, node_name=self.cfg.node_name, others=others, now=observation.now))
        rejected = rewrite.rejection(outcome.rejection) if outcome.rejection is not None else None
        if rejected is not None:
            logger.info(f"pod {pod.namespace}/{pod.name}: rejected by policy hook {outcome.hook}")
        return dataclasses.replace(observation, hook_rejection=rejected), rewrite.events(outcome.events)

    async def _plan_hooks(self, runner: PolicyHooks, observation: Observation, worker: _Worker,
                          plan: Plan) -> tuple[Plan, tuple[decide.Event, ...]]:
        """The plan hooks, for a plan that starts something: the plan with their changes, and their events."""
        first_seen = datetime.datetime.fromtimestamp(worker.first_seen, datetime.UTC)
        outcome = await runner.plan(plan.pod, lambda: rewrite.plan_view(
            observation, plan, node_name=self.cfg.node_name, first_seen=first_seen))
        return rewrite.apply(observation, plan, outcome.changes), rewrite.events(outcome.events)

    @staticmethod
    def _observe_hooks(runner: PolicyHooks, worker: _Worker, plan: Plan, decision: explain.Decision) -> None:
        """Queue the decision for the observers, with the pod's start timeline as its steps left it."""
        first_seen = datetime.datetime.fromtimestamp(worker.first_seen, datetime.UTC)
        start = worker.timeline
        runner.observe(plan.pod, lambda: hooks.DecisionView(
            pod=plan.pod, decision=decision, status=MappingProxyType(plan.status) if plan.status is not None else None,
            started=plan.observe_start, first_seen=first_seen, timeline=start))

    @staticmethod
    def _begin_start(worker: _Worker, observation: Observation) -> None:
        """The pod is admitted: a start begins, from the moment the agent first saw it, with its admission as the
        first step; unless the pod is past Pending (adopted running after an agent restart: no start to time)."""
        if ((observation.body.get("status") or {}).get("phase") or "Pending") != "Pending":
            return
        origin = worker.first_seen_monotonic
        began = timeline.begin(datetime.datetime.fromtimestamp(worker.first_seen, datetime.UTC), origin)
        worker.timeline = timeline.add_step(began, ADMISSION, "", origin, time.monotonic())

    @staticmethod
    def _add_steps(worker: _Worker, steps: Iterable[StepTime]) -> None:
        """The steps the executor and the image manager carried out, into the pod's start timeline."""
        if worker.timeline is None:
            return
        for step in sorted(steps, key=lambda s: s.start):
            worker.timeline = timeline.add_step(worker.timeline, step.kind, step.detail, step.start, step.end,
                                                step.error)

    def _end_start(self, worker: _Worker, status: Mapping[str, Any]) -> None:
        """The status written says the start is over (Ready, or the pod ended first): the timeline is finished and
        each step observed (kopflet_pod_start_step_duration_seconds)."""
        current = worker.timeline
        how = timeline.outcome(status)
        if current is None or current.finished or not how:
            return
        worker.timeline = timeline.finish(current, time.monotonic(), how)
        if self.metrics is not None:
            for step, seconds in timeline.step_durations(worker.timeline):
                self.metrics.pod_start_step_duration.labels(step).observe(seconds)
        if self.tracer is not None:
            meta = worker.body.get("metadata") or {}
            self.tracer.record(worker.timeline, PodRef(uid=worker.uid, name=str(meta.get("name", "")),
                                                       namespace=str(meta.get("namespace", ""))))

    async def _admit_devices(self, observation: Observation, worker: _Worker) -> Observation:
        """The container manager's admit handler for a pod asking for device plugin resources, run before
        deciding as the device manager's allocations call the plugins: the topology manager merges the device,
        CPU and memory managers' hints and each container's devices are allocated along its hint
        (`DeviceManager.admit_steps`), its CPUs and memory taken purely; `decide` takes the answer. The node's
        allocatable is raised to the devices the pod holds (upstream UpdatePluginResources). Devices of a pod
        `decide` rejects all the same are freed at the next allocation, as upstream frees those of pods no longer
        active."""
        pod, node = observation.pod, observation.node
        if self.devices is None or pod is None or node is None or not decide.admits(
                pod, observation.body.get("status") or {}, observation.runtime, worker.memory):
            return observation
        if not devicemanager.pod_requests_devices(pod, self.devices.resources()):
            return observation
        self.devices.update_allocated_devices()  # upstream GetTopologyHints' first step
        topology = observation.topology
        nodes = topology.policy.numa.nodes
        steps = resource_admission.admit_steps(topology, observation.cpus, observation.memory_blocks, pod,
                                               devices=self.devices.topology_snapshot(pod.uid, nodes))
        resources = await self.devices.admit_steps(steps, pod.uid, nodes)
        node = dataclasses.replace(node, allocatable=self.devices.sanitize_allocatable(pod.uid, node.allocatable))
        return dataclasses.replace(observation, resources=resources, node=node)

    # ------------------------------------------------------------------------------------ observe

    async def _observe(self, worker: _Worker) -> Observation:
        body, uid = worker.body, worker.uid
        runtime = await self.relist.refresh_pod(uid)
        now = datetime.datetime.now(datetime.UTC)
        if worker.gone:
            return Observation(body=body, gone=True, runtime=runtime, memory=worker.memory, backoff=self.backoff,
                               now=now)
        try:
            pod = spec.pod_from_body(body)
        except spec.SpecError as exc:
            return Observation(body=body, spec_error=str(exc), runtime=runtime, memory=worker.memory,
                               backoff=self.backoff, now=now)
        previous = body.get("status") or {}
        if previous.get("phase") not in decide.TERMINAL_PHASES:
            # Probe loops follow what runs: liveness and startup stop once the pod is deleting, readiness goes on.
            pod_ip = self.cfg.node_ip if pod.spec.host_network else next(iter(runtime.ips), "")
            self.prober.sync_pod(pod, runtime, pod_ip)
        allocated = self.allocations.allocation(uid)
        node = await self.node_info(pod) if decide.needs_node_info(pod, previous, runtime, worker.memory, allocated) \
            else None
        # Only an exited container has a message to read: no thread hand-off at every sync of a running pod.
        messages = await asyncio.to_thread(self._termination_messages, runtime) \
            if any(c.state == podstate.State.EXITED for c in runtime.containers) else {}
        cgroup_name = self.cgroups.pod_cgroup_parent(pod)  # "" without cgroupsPerQOS: none to read
        pod_cgroup = await asyncio.to_thread(self.cgroups.read, cgroup_name) \
            if cgroup_name and previous.get("phase") == "Running" else None
        probes = ProbeResults(readiness=self.prober.readiness(uid), started=self.prober.started(uid),
                              liveness_failures=frozenset(self.prober.liveness_failures(uid)),
                              startup_failures=frozenset(self.prober.startup_failures(uid)))
        return Observation(body=body, pod=pod, runtime=runtime, probes=probes, allocated=allocated,
                           eviction=worker.eviction,
                           actuated=self.allocations.actuation(uid), node=node, termination_messages=messages,
                           pod_cgroup=pod_cgroup, memory=worker.memory, backoff=self.backoff,
                           now=datetime.datetime.now(datetime.UTC))

    def _termination_messages(self, runtime: podstate.RuntimePodStatus) -> dict[str, str]:
        """Upstream getTerminationMessage: the file the container wrote, or (FallbackToLogsOnError) the tail of its
        log after a failure. Blocking reads: called in a thread."""
        out: dict[str, str] = {}
        for info in runtime.containers:
            if info.state != podstate.State.EXITED:
                continue
            raw = self.relist.container_status(info.id)
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
                with contextlib.suppress(OSError):
                    tail = logreader.read_last(raw.log_path, FALLBACK_LOG_LINES, FALLBACK_LOG_BYTES)
                    message = tail.decode(errors="replace")
            if message:
                out[info.id] = message
        return out

    # ---------------------------------------------------------------------------------------- act

    async def _act(self, worker: _Worker, observation: Observation, plan: Plan) -> float:
        pod = plan.pod
        if plan.log:
            # the reconciler's reasons ("No sandbox for pod can be found. Need to start a new one" ...) are
            # per sync: V(2), as upstream's (kuberuntime/util.go); a pod refused stays a warning
            level = logging.WARNING if plan.lifecycle in (Lifecycle.INVALID, Lifecycle.REJECTED) else v(2)
            logger.log(level, f"pod {pod.namespace}/{pod.name}: {plan.log}")
        for event in plan.events:
            self.recorder.pod_event(pod, event.type, event.reason, event.message, event.container, event.init)
        writing: asyncio.Task[None] | None = None
        if plan.status is not None:
            if plan.actions is not None and not (plan.teardown or plan.kill_pod or plan.delete):
                # The status goes to the apiserver while the runtime works (upstream's status manager sends it
                # apart from the sync); the sync ends once both are done.
                writing = asyncio.create_task(self._write_status(worker, plan), name=f"pod-status-{pod.uid}")
            else:
                await self._write_status(worker, plan)
        try:
            return await self._act_on_runtime(worker, observation, plan)
        finally:
            if writing is not None:
                await _settle(writing)

    async def _write_status(self, worker: _Worker, plan: Plan) -> None:
        pod, status = plan.pod, plan.status
        assert status is not None
        written = await self.status.write(pod.namespace, pod.name, pod.uid, worker.body.get("status") or {},
                                          status, precondition=not spec.is_static(pod))
        if written is not None:
            worker.body = {**worker.body, "status": written}
        try:
            self._end_start(worker, status)
        except Exception:
            logger.exception(f"pod {_ref(worker.body)}: could not finish the start timeline")

    async def _act_on_runtime(self, worker: _Worker, observation: Observation, plan: Plan) -> float:
        pod = plan.pod
        if plan.stop_probes:
            self.prober.forget(pod.uid)
        if plan.release_volumes:
            await self.executor.release_volumes(pod.uid)
        if plan.teardown:
            await self.teardown.pod(pod.uid, pod.namespace, pod.name)
            self._wake_pending_resizes()  # upstream retries pending resizes when a pod is removed
            return plan.wake_after
        if plan.kill_pod:
            await self.executor.kill_pod(pod, observation.runtime, grace=plan.kill_grace)
        wake = plan.wake_after
        if plan.actions is not None:
            current = worker.timeline
            if plan.actions.create_sandbox and (current is None or current.finished):
                # a new sandbox for a pod that started before (or was adopted running): the pod starts again
                worker.timeline = timeline.begin(datetime.datetime.now(datetime.UTC), time.monotonic())
            result = await self.executor.sync(pod, observation.runtime, plan.actions, plan.resize)
            self.relist.forget_containers(result.resized)
            failed = result.failed or bool(result.resize_error)
            # What the steps could not do is reported by a sync right away, which then waits out the error backoff.
            worker.memory = dataclasses.replace(worker.memory, last=result,
                                                followup=worker.memory.followup or failed)
            try:  # the start timeline is for explain and metrics: never what the sync's outcome depends on
                self._add_steps(worker, [*result.steps, *self.images.take_pull_steps(pod.uid)])
            except Exception:
                logger.exception(f"pod {_ref(worker.body)}: could not record the start timeline's steps")
            if failed:
                wake = 0.0
        if plan.delete:
            if self.status.unsent(pod.uid):
                # upstream canBeDeleted: the final status lands first; the delete is tried again after it
                wake = min(wake, RETRY_PERIOD) if wake > 0 else RETRY_PERIOD
            else:
                await self.status.delete(pod.namespace, pod.name, pod.uid)
        if plan.evict is not None and (plan.evict.containers or plan.evict.sandboxes):
            await self.executor.remove(plan.evict.containers, plan.evict.sandboxes)
        if plan.observe_start:
            self._observe_start(worker)
        return wake

    def _wake_pending_resizes(self) -> None:
        self.wake([w.uid for w in self.workers.values()
                   if (w.memory.resize_conditions or {}).get(policy.POD_RESIZE_PENDING)])

    def _observe_start(self, worker: _Worker) -> None:
        """Pod start latency (upstream pod_startup_latency_tracker): from first seen by the agent, and the SLI from
        creation to running minus the time spent pulling images."""
        now = time.time()
        pulled = self.images.pull_time(worker.uid)
        if self.metrics is None:
            return
        self.metrics.pod_start_duration.observe(max(0.0, now - worker.first_seen))
        created = times.parse_timestamp((worker.body.get("metadata") or {}).get("creationTimestamp"))
        if created is not None:
            self.metrics.pod_start_total_duration.observe(max(0.0, now - created.timestamp()))
            self.metrics.pod_start_sli_duration.observe(max(0.0, now - created.timestamp() - pulled))


async def _settle(task: asyncio.Task[None]) -> None:
    """Wait for a sync's status write; its error is the sync's. A worker stopped meanwhile (or before) stops it
    too and waits for it to end: what was not sent stays unsent, for the status manager's retries."""
    current = asyncio.current_task()
    try:
        if current is not None and current.cancelling():
            task.cancel()
        await asyncio.wait({task})
    except asyncio.CancelledError:
        task.cancel()
        await asyncio.wait({task})
        raise
    if not task.cancelled() and (error := task.exception()) is not None:
        raise error


def _gate_conditions(body: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The conditions named by the pod's readiness gates (set by other controllers through pods/status)."""
    gates = {g.get("conditionType") for g in (body.get("spec") or {}).get("readinessGates") or ()
             if isinstance(g, Mapping)}
    return tuple(sorted((str(c.get("type")), str(c.get("status"))) for c in
                        (body.get("status") or {}).get("conditions") or () if c.get("type") in gates))


def _kept(body: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod as a worker keeps it: without ``metadata.managedFields``, which nothing on a node reads and which is
    some 40 % of a pod's objects once the agent has written its status (server-side apply's field sets)."""
    metadata = body.get("metadata")
    if not isinstance(metadata, Mapping) or "managedFields" not in metadata:
        return body
    return {**body, "metadata": {k: v for k, v in metadata.items() if k != "managedFields"}}


def _sync_type(worker: _Worker) -> str:
    """The operation_type of kubelet_pod_worker_duration_seconds (upstream SyncPodType)."""
    if worker.gone or (worker.body.get("metadata") or {}).get("deletionTimestamp"):
        return "kill"
    if not worker.synced:
        return "create"
    return "update" if worker.updated else "sync"


def _sync_relevant(body: Mapping[str, Any]) -> tuple[Any, ...]:
    """What an update must change to make the worker sync now (upstream checkAndUpdatePod: spec, labels,
    annotations, deletion), so a status-only update, such as the agent's own patch, wakes nothing."""
    meta = body.get("metadata", {})
    return (body.get("spec"), meta.get("labels"), meta.get("annotations"), meta.get("deletionTimestamp"),
            meta.get("deletionGracePeriodSeconds"))


def _ref(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata", {})
    return f"{meta.get('namespace')}/{meta.get('name')}"
