"""
One pod sync's decision: what the pod worker observed goes in, one `Plan` comes out (upstream podWorkers'
SyncPod / SyncTerminatingPod / SyncTerminatedPod, and the decisions they make in between).

Pure: the worker gathers an `Observation` (the watch object, a fresh runtime view, probe results, allocation
checkpoints, termination messages, what the other pods hold, the clock), calls `decide` once, carries out the
plan (`kopflet.pods.workers`) and writes its status through the one status writer. As upstream's SyncPod, the
status is generated from the observation before anything is done; a plan that changes the runtime asks to be
observed again at once (`wake_after` 0), and that follow-up sync writes what the steps achieved.

What a worker keeps between syncs (upstream podSyncStatus and the reasonCache) is `Memory`: decide returns the
next one, and the worker records the outcome of the steps it executed into it (`Memory.last`).
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from kopflet import backoff as backoffs
from kopflet.allocation import policy
from kopflet.api import spec, times
from kopflet.api.events import NORMAL, WARNING
from kopflet.cm import admission as resource_admission
from kopflet.cm.cpumanager import cpu_manager, static_policy
from kopflet.cm.memorymanager import memory_manager
from kopflet.cm.memorymanager.state import State as MemoryState
from kopflet.cm.topologymanager.topology_manager import NO_TOPOLOGY, TopologyManager
from kopflet.config.settings import AgentConfig
from kopflet.container import podstate
from kopflet.container.sync_result import CRASH_LOOP_BACK_OFF, SyncResult, Waiting
from kopflet.eviction import helpers as eviction
from kopflet.kuberuntime import gc, reconciler, resize
from kopflet.lifecycle import admission, deadline
from kopflet.nodeshutdown import rules as nodeshutdown
from kopflet.status import generate

ERROR_RETRY = 10.0
"""Seconds before a failed sync is tried again (upstream podWorkers' backOffPeriod)."""
STILL_STOPPING = 1.0
"""Seconds before killing again a pod whose containers outlived the kill."""
STARTED_RECHECK = 1.0
"""Seconds, the relist period: how soon an in-place resize is looked at again (upstream RequestPodReinspect)."""
PENDING_RESIZE_RETRY = policy.INITIAL_RETRY_DELAY
"""Upstream retries pending resizes every 30 s until the pod sources are ready."""
MIN_WAKE = 0.5
TERMINAL_PHASES = (generate.SUCCEEDED, generate.FAILED)

# Why a pod is in its lifecycle, in upstream's words (kubelet.go HandlePodRemoves, pod_workers.go UpdatePod): the
# `Plan.reason` `kopflet explain` shows.
REASON_GONE = "Pod has been deleted and must be killed"
REASON_DELETING = "Pod is marked for graceful deletion, begin teardown"
REASON_TERMINAL = "Pod is in a terminal phase (success/failed), begin teardown"
REASON_EVICTED = "Pod is being evicted by the kubelet, begin teardown"
REASON_GATED = "The previous steps failed: only the status is written until the error back-off ends"
REASON_FOLLOWUP = "Follow-up sync: observes what the previous steps did"

# When the worker looks again (`Plan.wake_reason`).
WAKE_RESYNC = "resync period (syncFrequency)"
WAKE_STEPS = "observe what these steps did"
WAKE_KILL = "observe the kill"
WAKE_STILL_STOPPING = "something outlived the kill"
WAKE_ERROR = "error back-off after failed steps"
WAKE_BACKOFF = "crash-loop back-off ends"
WAKE_DEADLINE = "activeDeadlineSeconds runs out"
WAKE_RESIZE = "in-place resize in progress"
WAKE_RESIZE_PENDING = "pending resize retried"


class Lifecycle(enum.StrEnum):
    """Where the pod is in its life, as the worker handles it (upstream's pod worker states, finer)."""

    GONE = "gone"  # the API object is deleted: tear everything down
    INVALID = "invalid"  # the spec cannot be run: say so once
    REJECTED = "rejected"  # admission refused it: Failed, never retried
    TERMINATING = "terminating"  # deletionTimestamp: stop, write the final status, delete
    TERMINATED = "terminated"  # Succeeded/Failed, or past activeDeadlineSeconds: stop, never restart
    SYNCING = "syncing"  # running it


@dataclasses.dataclass(frozen=True)
class Event:
    """An event for the pod (type, reason, message), optionally about one of its containers."""

    type: str
    reason: str
    message: str
    container: str | None = None
    init: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProbeResults:
    """The prober's results for the pod's running containers, by container id."""

    readiness: Mapping[str, bool] = dataclasses.field(default_factory=dict)
    started: Mapping[str, bool] = dataclasses.field(default_factory=dict)
    liveness_failures: frozenset[str] = frozenset()
    startup_failures: frozenset[str] = frozenset()


@dataclasses.dataclass(frozen=True, kw_only=True)
class Memory:
    """What the worker keeps about its pod between syncs (upstream podSyncStatus plus the reasonCache)."""

    admitted: bool = False
    reported_error: str = ""
    """The spec error already reported (once per message)."""
    deadline_reported: bool = False
    """The DeadlineExceeded event was recorded."""
    start_observed: bool = False
    """The pod start latency was observed."""
    resize_conditions: Mapping[str, Mapping[str, Any]] | None = None
    """PodResizePending / PodResizeInProgress as the agent holds them (None: not taken from the API yet)."""
    last: SyncResult | None = None
    """The outcome of the last steps carried out (their waiting reasons show in the status)."""
    followup: bool = False
    """The previous sync changed the runtime: this one observes what it achieved."""
    kill_sent: bool = False
    """The previous sync killed the pod."""
    terminal_write_due: bool = False
    """A terminated pod had to be stopped: its final status is still to be written."""
    volumes_released: bool = False
    """The terminated pod's volumes were torn down."""


@dataclasses.dataclass(frozen=True)
class Eviction:
    """The eviction manager chose this pod: the status fields it ends with (phase Failed, reason Evicted, the
    message, the DisruptionTarget condition) and the grace period its containers get."""

    status: Mapping[str, Any]
    grace_period: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class Observation:
    """Everything read before deciding; data only, no handles."""

    body: Mapping[str, Any]
    """The Pod as the watch delivered it, with the status the agent wrote last."""
    gone: bool = False
    pod: spec.Pod | None = None
    """The parsed pod (None with `spec_error` when it cannot be parsed, or when `gone`)."""
    spec_error: str = ""
    runtime: podstate.RuntimePodStatus
    probes: ProbeResults = ProbeResults()
    allocated: policy.PodAllocation | None = None
    actuated: policy.PodAllocation | None = None
    node: admission.NodeInfo | None = None
    """This node for admission and resize decisions (`needs_node_info` says when it is read)."""
    cpus: cpu_manager.Snapshot | None = None
    """The CPU manager's policy, state and the node's pods, when the pod may be admitted in this sync."""
    memory_blocks: memory_manager.Snapshot | None = None
    """The memory manager's policy, state and the node's pods, when the pod may be admitted in this sync."""
    resources: resource_admission.Admission | None = None
    """The container manager's admit handler's answer, when the worker ran it before deciding (a pod asking for
    device plugin resources: the device manager's allocations along the topology manager's hints are I/O);
    else `decide` runs it from `cpus`, `memory_blocks` and `topology`."""
    topology: TopologyManager = NO_TOPOLOGY
    """The topology manager's policy and scope, which align the CPU and memory managers' allocations."""
    others: Sequence[tuple[spec.Pod, Mapping[str, Any]]] = ()
    """The other admitted, live, non-terminal pods of the node with their API status."""
    termination_messages: Mapping[str, str] = dataclasses.field(default_factory=dict)
    pod_cgroup: Any = None
    eviction: Eviction | None = None
    hook_rejection: admission.Rejection | None = None
    """A policy hook's rejection of the pod, asked before deciding when the pod is to be admitted in this sync
    (`kopflet.hooks`): the last admit handler, after the built-in ones."""
    memory: Memory = Memory()
    backoff: backoffs.Backoff
    now: datetime.datetime


@dataclasses.dataclass(frozen=True, kw_only=True)
class Plan:
    """The outcome of one decision, carried out by the worker in this order: record `allocate`, post `events`,
    write `status`, then `teardown`, `stop_probes`, `kill_pod` and `actions` (with `resize`), then `delete`
    and `evict`; observe again after `wake_after` seconds."""

    lifecycle: Lifecycle
    pod: spec.Pod
    """The (allocated) pod the steps are for; a minimal one when the spec cannot be parsed."""
    memory: Memory
    allocate: spec.Pod | None = None
    """Record this pod's resources as allocated (first admission, accepted resize)."""
    cpu_state: static_policy.State | None = None
    """Record this CPU manager state (the pod's exclusive CPUs, taken at its admission) before anything runs."""
    memory_state: MemoryState | None = None
    """Record this memory manager state (the pod's NUMA memory blocks, taken at its admission) before anything
    runs."""
    admitted: bool = False
    """The pod counts as admitted on the node (for the next pods' admission and resize decisions)."""
    events: tuple[Event, ...] = ()
    status: Mapping[str, Any] | None = None
    """The desired status (None: nothing to write this sync)."""
    teardown: bool = False
    release_volumes: bool = False
    """The pod is terminated and nothing of it runs: tear its volumes down (it is not deleted yet)."""
    stop_probes: bool = False
    kill_pod: bool = False
    kill_grace: int | None = None
    """The grace period of `kill_pod` (None: the pod's own)."""
    actions: reconciler.PodActions | None = None
    """SyncPod's steps; None: the executor is not run this sync."""
    resize: resize.ResizeActions | None = None
    evict: gc.Evictions | None = None
    delete: bool = False
    """The final DELETE once the terminal status is written."""
    observe_start: bool = False
    """The pod has just started: observe its start latency."""
    wake_after: float = 0.0
    wake_reason: str = WAKE_RESYNC
    """Why the worker looks again after `wake_after` (what `kopflet explain` says comes next)."""
    log: str = ""
    reason: str = ""
    """Why the pod is in this lifecycle, or why this sync takes no steps (upstream's words where it has them)."""
    hook_rules: tuple[tuple[str, str, str], ...] = ()
    """What the policy hooks changed in this plan: (hook, action, reason), for `kopflet explain`."""

    @property
    def changes_runtime(self) -> bool:
        return self.kill_pod or self.teardown or (self.actions is not None and _has_steps(self.actions, self.resize))


def _has_steps(actions: reconciler.PodActions, resizing: resize.ResizeActions | None) -> bool:
    return bool(actions.kill_pod or actions.create_sandbox or actions.init_containers_to_start
                or actions.ephemeral_containers_to_start or actions.containers_to_start or actions.containers_to_kill
                or actions.containers_to_reset or (resizing is not None and (resizing.any or resizing.restart)))


def needs_node_info(pod: spec.Pod, previous: Mapping[str, Any], runtime: podstate.RuntimePodStatus,
                    memory: Memory, allocated: policy.PodAllocation | None) -> bool:
    """Whether this sync decides against the node (admission, or a resize to allocate): reading it costs a GET."""
    if pod.is_deleting or previous.get("phase") in TERMINAL_PHASES:
        return False
    if not memory.admitted and _needs_admission(runtime, previous):
        return True
    return allocated is not None and policy.resize_pending_differs(pod, allocated)


def admits(pod: spec.Pod, previous: Mapping[str, Any], runtime: podstate.RuntimePodStatus, memory: Memory) -> bool:
    """Whether this sync runs the pod's admission (`decide`'s condition): what the device manager allocates for."""
    return not (pod.is_deleting or previous.get("phase") in TERMINAL_PHASES or memory.admitted) and \
        _needs_admission(runtime, previous)


def _needs_admission(runtime: podstate.RuntimePodStatus, previous: Mapping[str, Any]) -> bool:
    """Upstream canAdmitPod runs once per pod before anything runs. A pod that already has something on the
    runtime, or is past Pending, was admitted before (by this agent before a restart)."""
    return not (runtime.sandboxes or runtime.containers or previous.get("phase", generate.PENDING) != generate.PENDING)


def decide(obs: Observation, cfg: AgentConfig) -> Plan:
    """The one decision of a pod sync."""
    memory = obs.memory
    if obs.gone or obs.pod is None:
        meta = obs.body.get("metadata") or {}
        pod = spec.minimal_pod(meta.get("uid", ""), meta.get("namespace", ""), meta.get("name", ""))
        if obs.gone:
            return Plan(lifecycle=Lifecycle.GONE, pod=pod, memory=memory, teardown=True, stop_probes=True,
                        wake_after=cfg.resync_period, reason=REASON_GONE)
        events: tuple[Event, ...] = ()
        if memory.reported_error != obs.spec_error:
            events = (Event(WARNING, "Failed", f"Error: {obs.spec_error}"),)
        return Plan(lifecycle=Lifecycle.INVALID, pod=pod, events=events, log=obs.spec_error if events else "",
                    memory=dataclasses.replace(memory, reported_error=obs.spec_error), wake_after=cfg.resync_period,
                    reason=obs.spec_error)

    pod = obs.pod
    previous: Mapping[str, Any] = obs.body.get("status") or {}
    if pod.is_deleting or previous.get("phase") in TERMINAL_PHASES:
        pod = policy.apply_allocation(pod, obs.allocated)  # never ungranted values
    if pod.is_deleting:
        return _terminating(obs, pod, previous, cfg)
    if previous.get("phase") in TERMINAL_PHASES:
        return _terminated(obs, pod, previous, cfg, memory, ())  # final: never restarted

    resources = resource_admission.Admission()
    if not memory.admitted and _needs_admission(obs.runtime, previous):
        # The CPU manager's exclusive CPUs and the memory manager's NUMA blocks are taken with the admission, as
        # the topology manager aligns them (upstream's container manager admit handler, after the sysctls); they
        # are recorded only if every handler admits the pod.
        resources = obs.resources if obs.resources is not None else \
            resource_admission.admit(obs.topology, obs.cpus, obs.memory_blocks, pod)
        # The eviction manager's admit runs first, as upstream registers it first.
        rejection = eviction.admit(pod, _node(obs).pressure) or \
            admission.admit(pod, _node(obs), [p for p, _ in obs.others],
                            allocation=resources.rejection) or \
            nodeshutdown.admit(_node(obs).shutting_down) or \
            obs.hook_rejection  # upstream appends the shutdown manager last; kopflet's policy hooks come after it
        if rejection is not None:
            # Final: phase Failed with the reason and message, never retried (upstream rejectPod).
            return Plan(lifecycle=Lifecycle.REJECTED, pod=pod, memory=memory,
                        events=(Event(WARNING, rejection.reason, rejection.event_message),),
                        status=generate.rejected_status(previous, rejection.reason, rejection.message),
                        log=f"rejected: {rejection.reason}: {rejection.message}", wake_after=cfg.resync_period,
                        reason=f"{rejection.reason}: {rejection.message}")
    plan = _admitted(obs, pod, previous, cfg, dataclasses.replace(memory, admitted=True))
    if resources.cpu_state is None and resources.memory_state is None:
        return plan
    return dataclasses.replace(plan, cpu_state=resources.cpu_state, memory_state=resources.memory_state)


def _admitted(obs: Observation, pod: spec.Pod, previous: Mapping[str, Any], cfg: AgentConfig,
              memory: Memory) -> Plan:
    """An admitted pod that is not deleting nor terminal: its resize, deadline, eviction, or its sync."""
    events: list[Event] = []

    # From here on the pod is the allocated one (upstream: the pod worker runs UpdatePodFromAllocation's pod).
    conditions = _resize_conditions(memory, previous)
    generation = _generation(obs.body)
    stamp = times.timestamp(obs.now)
    allocate, pod = _allocate(obs, pod, conditions, generation, stamp, events, cfg.cpu_manager_policy,
                              cfg.memory_manager_policy)

    if deadline.past_active_deadline(pod, deadline.start_time(previous), obs.now):
        # Upstream activeDeadlineHandler: the pod is terminal and killed; Failed (DeadlineExceeded) is written
        # once its containers stopped (upstream mergePodStatus holds a terminal phase back until then).
        if not memory.deadline_reported:
            memory = dataclasses.replace(memory, deadline_reported=True)
            events.append(Event(NORMAL, deadline.REASON, deadline.MESSAGE))  # upstream ShouldEvict's
        plan = _terminated(obs, pod, previous, cfg, dataclasses.replace(memory, resize_conditions=conditions),
                           tuple(events), write=True)
        return dataclasses.replace(plan, allocate=allocate, admitted=True, reason=deadline.MESSAGE)
    if obs.eviction is not None:
        # Upstream killPodFunc from the eviction manager: killed with the eviction's grace period, then terminal
        # with the eviction's status (written once its containers stopped, as the status manager holds a
        # terminal phase back until then).
        plan = _terminated(obs, pod, previous, cfg, dataclasses.replace(memory, resize_conditions=conditions),
                           tuple(events), write=True)
        if plan.kill_pod:
            plan = dataclasses.replace(plan, kill_grace=obs.eviction.grace_period)
        if plan.status is not None:
            plan = dataclasses.replace(plan, status=_with_eviction(plan.status, obs.eviction))
        return dataclasses.replace(plan, allocate=allocate, admitted=True, reason=REASON_EVICTED)
    return _syncing(obs, pod, previous, cfg, memory, conditions, generation, stamp, allocate, events)


def _syncing(obs: Observation, pod: spec.Pod, previous: Mapping[str, Any], cfg: AgentConfig, memory: Memory,
             conditions: dict[str, dict[str, Any]], generation: int, stamp: str, allocate: spec.Pod | None,
             events: list[Event]) -> Plan:
    """Upstream SyncPod: the status from what was observed, then the steps towards the spec."""
    runtime, last = obs.runtime, memory.last
    if memory.followup and last is not None and last.resize_error:
        _resize_failed(pod, conditions, last.resize_error, generation, stamp, events)
    # A sync right after failed steps only reports them: the steps are tried again after the error backoff.
    gated = memory.followup and last is not None and (last.failed or bool(last.resize_error))
    clock = obs.now.timestamp()
    started = {cid for cid, ok in obs.probes.started.items() if ok}
    restart_all = spec.all_containers_could_restart(pod.spec) and generate.all_containers_restarting(
        generate.compute_pod_status(pod, runtime, previous=previous, now=obs.now))
    actions = reconciler.compute_pod_actions(
        pod, runtime, backoff=obs.backoff, now=clock, liveness_failures=obs.probes.liveness_failures,
        startup_failures=obs.probes.startup_failures, started=started, restart_all_containers=restart_all,
        resize_restarts=resize.compute(pod, runtime, obs.actuated).restart if not restart_all else None)
    resizing = resize.compute(pod, runtime, obs.actuated,
                              starting=(*actions.init_containers_to_start, *actions.containers_to_start))
    _resize_progress(pod, runtime, obs.actuated, conditions, generation, stamp, events)

    waiting: dict[str, Waiting] = dict(last.waiting) if last is not None else {}
    init_names = {c.name for c in pod.spec.init_containers}
    for name, message in actions.containers_in_backoff.items():  # upstream SyncPod's doBackOff, on every sync
        waiting[name] = Waiting(CRASH_LOOP_BACK_OFF, message)
        events.append(Event(WARNING, "BackOff", f"Back-off restarting failed container {name} in pod {pod.full_name}",
                            name, name in init_names))
    status = _status(obs, pod, previous, cfg, conditions, waiting)
    memory = dataclasses.replace(memory, resize_conditions=conditions, followup=False, kill_sent=False)
    memory, observe_start = _after_status(memory, status, previous, events)

    steps = not gated and _has_steps(actions, resizing)
    run = not gated and (steps or not obs.memory.followup)
    wake, wake_reason = (0.0, WAKE_STEPS) if steps else _delay(obs, pod, cfg, actions, resizing, conditions, gated)
    return Plan(lifecycle=Lifecycle.SYNCING, pod=pod, memory=dataclasses.replace(memory, followup=steps),
                allocate=allocate, admitted=True, events=tuple(events), status=status,
                actions=actions if run else None, resize=resizing if run else None,
                evict=gc.evictable(runtime, _dead_kept(cfg)), observe_start=observe_start,
                wake_after=wake, wake_reason=wake_reason, log=actions.reason if run else "",
                reason=REASON_GATED if gated else "" if run else REASON_FOLLOWUP)


def _dead_kept(cfg: AgentConfig) -> int:
    """Dead instances of each container a sync leaves for the node's container GC: its per-container maximum
    (--maximum-dead-containers-per-container; negative, no limit), so pruning at sync time never keeps fewer
    than upstream's containerGC would."""
    limit = cfg.maximum_dead_containers_per_container
    return limit if limit >= 0 else sys.maxsize


def _delay(obs: Observation, pod: spec.Pod, cfg: AgentConfig, actions: reconciler.PodActions,
           resizing: resize.ResizeActions, conditions: Mapping[str, Any], gated: bool) -> tuple[float, str]:
    """When to look at a pod that is not being changed right now, and why then (the earliest reason wins)."""
    last = obs.memory.last
    wake = (cfg.resync_period, WAKE_RESYNC)

    def sooner(delay: float, why: str) -> None:
        nonlocal wake
        if delay < wake[0]:
            wake = (delay, why)

    if gated and last is not None:
        if last.failed or last.resize_error:
            wake = (ERROR_RETRY, WAKE_ERROR)
        if last.retry_after is not None:
            sooner(max(last.retry_after, MIN_WAKE), WAKE_BACKOFF)
    elif actions.retry_after is not None:  # the earliest crash-loop backoff ends
        sooner(max(actions.retry_after, MIN_WAKE), WAKE_BACKOFF)
    # Wake when activeDeadlineSeconds runs out (upstream ShouldSync picks the pod up then).
    left = deadline.time_left(pod, deadline.start_time(obs.body.get("status") or {}), obs.now)
    if left is not None:
        sooner(max(left, MIN_WAKE), WAKE_DEADLINE)
    if resizing.any or resizing.restart or resize.in_progress(pod, obs.runtime, obs.actuated):
        sooner(STARTED_RECHECK, WAKE_RESIZE)  # upstream RequestPodReinspect: see the resize through soon
    if conditions.get(policy.POD_RESIZE_PENDING):
        sooner(PENDING_RESIZE_RETRY, WAKE_RESIZE_PENDING)
    return wake


def _terminating(obs: Observation, pod: spec.Pod, previous: Mapping[str, Any], cfg: AgentConfig) -> Plan:
    """deletionTimestamp (upstream SyncTerminatingPod): stop within the grace period, write the terminal status,
    then delete the Pod object."""
    memory = obs.memory
    if _running(obs.runtime):
        return dataclasses.replace(_kill(obs, pod, Lifecycle.TERMINATING, memory, ()), reason=REASON_DELETING)
    status = _status(obs, pod, previous, cfg, memory.resize_conditions or {}, {}, terminal=True)
    memory, _ = _after_status(memory, status, previous, [])
    return Plan(lifecycle=Lifecycle.TERMINATING, pod=pod, status=status, delete=True,
                memory=dataclasses.replace(memory, kill_sent=False, followup=False), wake_after=cfg.resync_period,
                reason=REASON_DELETING)


def _terminated(obs: Observation, pod: spec.Pod, previous: Mapping[str, Any], cfg: AgentConfig, memory: Memory,
                events: tuple[Event, ...], *, write: bool = False) -> Plan:
    """A terminal pod (Succeeded, Failed, past its deadline; upstream SyncTerminatingPod then SyncTerminatedPod):
    make sure nothing of it still runs, then write the status its stopped containers give when something had to
    be stopped or `write`. A terminal phase already written stays."""
    if _running(obs.runtime):
        plan = _kill(obs, pod, Lifecycle.TERMINATED, dataclasses.replace(memory, terminal_write_due=True), events)
        return dataclasses.replace(plan, stop_probes=True, reason=REASON_TERMINAL)
    status, observe_start, more = None, False, list(events)
    if write or memory.terminal_write_due:
        status = _status(obs, pod, previous, cfg, memory.resize_conditions or {}, {}, terminal=True)
        memory, observe_start = _after_status(memory, status, previous, more)
    # Volumes go once the terminal phase is written (the status read the termination messages from them).
    release = (status or previous).get("phase") in TERMINAL_PHASES and not memory.volumes_released
    memory = dataclasses.replace(memory, terminal_write_due=False, kill_sent=False, followup=False,
                                 volumes_released=memory.volumes_released or release)
    return Plan(lifecycle=Lifecycle.TERMINATED, pod=pod, memory=memory, events=tuple(more), status=status,
                release_volumes=release, stop_probes=True, observe_start=observe_start, wake_after=cfg.resync_period,
                reason=REASON_TERMINAL)


def _with_eviction(status: Mapping[str, Any], evicted: Eviction) -> dict[str, Any]:
    """The terminal status with the eviction's fields over it; its conditions replace those of the same type."""
    extra = dict(evicted.status)
    conditions = list(extra.pop("conditions", None) or ())
    kinds = {c.get("type") for c in conditions}
    merged = [c for c in status.get("conditions") or () if c.get("type") not in kinds] + conditions
    return {**status, **extra, "conditions": merged}


def _kill(obs: Observation, pod: spec.Pod, lifecycle: Lifecycle, memory: Memory, events: tuple[Event, ...]) -> Plan:
    """Kill what still runs; when a kill already went out and something outlived it, look again shortly first."""
    if obs.memory.kill_sent:
        return Plan(lifecycle=lifecycle, pod=pod, events=events, wake_after=STILL_STOPPING,
                    wake_reason=WAKE_STILL_STOPPING,
                    memory=dataclasses.replace(memory, kill_sent=False, followup=False))
    return Plan(lifecycle=lifecycle, pod=pod, events=events, kill_pod=True, wake_after=0.0, wake_reason=WAKE_KILL,
                memory=dataclasses.replace(memory, kill_sent=True, followup=True))


def _running(runtime: podstate.RuntimePodStatus) -> bool:
    return bool(runtime.running_containers()) or any(s.ready for s in runtime.sandboxes)


def _node(obs: Observation) -> admission.NodeInfo:
    if obs.node is None:
        raise ValueError("decide needs the node's info for this pod: read it when needs_node_info says so")
    return obs.node


def _generation(body: Mapping[str, Any]) -> int:
    return int((body.get("metadata") or {}).get("generation") or 0)


def _status(obs: Observation, pod: spec.Pod, previous: Mapping[str, Any], cfg: AgentConfig,
            conditions: Mapping[str, Any], waiting: Mapping[str, Waiting], *, terminal: bool = False) -> dict[str, Any]:
    """Upstream generateAPIPodStatus over this observation."""
    generation = (obs.body.get("metadata") or {}).get("generation")
    return generate.compute_pod_status(
        pod, obs.runtime, previous=previous, waiting=waiting, termination_messages=obs.termination_messages,
        readiness=obs.probes.readiness, startup=obs.probes.started, host_ip=cfg.node_ip,
        host_ips=(cfg.node_ip,) if cfg.node_ip else (), now=obs.now, pod_is_terminal=terminal,
        runtime_name=cfg.runtime_name,
        generation=generation if isinstance(generation, int) else None,
        actuated=obs.actuated.containers if obs.actuated is not None else None,
        resize_conditions=list(conditions.values()),
        pod_cgroup=obs.pod_cgroup if previous.get("phase") == generate.RUNNING else None)


def _after_status(memory: Memory, status: Mapping[str, Any], previous: Mapping[str, Any],
                  events: list[Event]) -> tuple[Memory, bool]:
    """What writing `status` means beyond the pod: the DeadlineExceeded event when the deadline passed during this
    sync, and whether the pod has just started (its start latency is observed once)."""
    if status.get("reason") == deadline.REASON and previous.get("reason") != deadline.REASON \
            and not memory.deadline_reported:
        memory = dataclasses.replace(memory, deadline_reported=True)
        events.append(Event(NORMAL, deadline.REASON, deadline.MESSAGE))
    observe_start = False
    if not memory.start_observed and _all_started(status):
        memory = dataclasses.replace(memory, start_observed=True)
        observe_start = (previous.get("phase") or generate.PENDING) == generate.PENDING  # not adopted running
    return memory, observe_start


def _all_started(pod_status: Mapping[str, Any]) -> bool:
    """Running with every regular container running: what upstream counts as a started pod."""
    containers = pod_status.get("containerStatuses") or ()
    return pod_status.get("phase") == generate.RUNNING and bool(containers) and \
        all("running" in (c.get("state") or {}) for c in containers)


# ------------------------------------------------------------------------------------------------ resize


def _resize_conditions(memory: Memory, previous: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The resize conditions, taken over from the API status once (upstream BackfillPodResizeConditions)."""
    if memory.resize_conditions is not None:
        return {kind: dict(c) for kind, c in memory.resize_conditions.items()}
    return {c["type"]: dict(c) for c in previous.get("conditions") or ()
            if isinstance(c, Mapping) and c.get("type") in generate.RESIZE_CONDITIONS}


def _allocate(obs: Observation, pod: spec.Pod, conditions: dict[str, dict[str, Any]], generation: int,
              stamp: str, events: list[Event], cpu_manager_policy: str,
              memory_manager_policy: str = "None") -> tuple[spec.Pod | None, spec.Pod]:
    """Upstream handlePodResourcesResize: grant the spec's new resources if they fit next to what the other pods
    hold, else say why in PodResizePending. Returns the pod to record as allocated (if any) and the allocated pod."""
    granted = obs.allocated
    if granted is None:  # admitted now, or before a restart that lost the checkpoint
        return pod, pod
    if not policy.resize_pending_differs(pod, granted):
        conditions.pop(policy.POD_RESIZE_PENDING, None)
        return None, pod
    phase = (obs.body.get("status") or {}).get("phase", generate.PENDING)
    decision = policy.decide(pod, granted, _node(obs), [policy.held_pod(p, status) for p, status in obs.others],
                             pending=phase == generate.PENDING, cpu_manager_policy=cpu_manager_policy,
                             memory_manager_policy=memory_manager_policy)
    event = decision.event(pod, generation)
    if decision.outcome == policy.ACCEPTED:
        conditions.pop(policy.POD_RESIZE_PENDING, None)
        conditions.pop(policy.POD_RESIZE_IN_PROGRESS, None)
        conditions[policy.POD_RESIZE_IN_PROGRESS], _ = policy.in_progress_condition(None, "", "", generation, stamp)
    elif decision.pending:
        previous_pending = conditions.get(policy.POD_RESIZE_PENDING)
        condition, changed = policy.pending_condition(
            previous_pending, decision.reason, decision.message, generation, stamp)
        same = previous_pending is not None and all(
            previous_pending.get(k) == condition.get(k) for k in ("status", "reason", "message"))
        conditions[policy.POD_RESIZE_PENDING] = _keep_probe_time(previous_pending, condition, not same)
        if not changed:
            event = None
    if event is not None:
        events.append(Event(event.type, event.reason, event.message))
    if decision.outcome == policy.ACCEPTED:
        return pod, policy.apply_allocation(pod, policy.PodAllocation.from_pod(pod))
    return None, policy.apply_allocation(pod, granted)


def _resize_progress(pod: spec.Pod, runtime: podstate.RuntimePodStatus, actuated: policy.PodAllocation | None,
                     conditions: dict[str, dict[str, Any]], generation: int, stamp: str,
                     events: list[Event]) -> None:
    """Upstream SyncPod before actuating: PodResizeInProgress while the allocation is not actuated; cleared (with
    ResizeCompleted, only if one was there) once it is."""
    if resize.in_progress(pod, runtime, actuated):
        previous = conditions.get(policy.POD_RESIZE_IN_PROGRESS)
        condition, changed = policy.in_progress_condition(previous, "", "", generation, stamp)
        conditions[policy.POD_RESIZE_IN_PROGRESS] = _keep_probe_time(previous, condition, changed)
        return
    cleared = conditions.pop(policy.POD_RESIZE_IN_PROGRESS, None)
    if cleared is not None:
        done = int(cleared.get("observedGeneration") or generation)
        events.append(Event(NORMAL, policy.RESIZE_COMPLETED,
                            policy.resize_event_message("Pod resize completed", pod, done)))


def _resize_failed(pod: spec.Pod, conditions: dict[str, dict[str, Any]], message: str, generation: int, stamp: str,
                   events: list[Event]) -> None:
    """A resize the runtime or the kernel refused: PodResizeInProgress reason Error, ResizeError if new."""
    previous = conditions.get(policy.POD_RESIZE_IN_PROGRESS)
    condition, changed = policy.in_progress_condition(previous, policy.REASON_ERROR, message, generation, stamp)
    conditions[policy.POD_RESIZE_IN_PROGRESS] = _keep_probe_time(previous, condition, changed)
    if changed:
        done = int(condition.get("observedGeneration") or generation)
        events.append(Event(WARNING, policy.RESIZE_ERROR,
                            policy.resize_event_message("Pod resize error", pod, done, message)))


def _keep_probe_time(previous: Mapping[str, Any] | None, condition: dict[str, Any],
                     changed: bool) -> dict[str, Any]:
    """The condition with the previous lastProbeTime when nothing else changed: upstream's status manager does not
    count probe times as a change (isPodStatusByKubeletEqual), so an unchanged condition writes nothing."""
    if previous is not None and not changed and previous.get("lastProbeTime"):
        return {**condition, "lastProbeTime": previous["lastProbeTime"]}
    return condition
