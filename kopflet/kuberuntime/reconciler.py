"""
What to do next for one pod: `compute_pod_actions(pod, runtime, backoff=..., now=...) -> PodActions`.

Mirrors upstream `computePodActions` (pkg/kubelet/kuberuntime/kuberuntime_manager.go) with its helpers
`PodSandboxChanged`, `computeInitContainerActions`, `ShouldContainerBeRestarted` and `containerChanged`, and
folds in the crash-loop check upstream's `SyncPod` makes right before each start (`doBackOff`), so the
caller learns here which containers wait in CrashLoopBackOff and with which message.

Pure: the pod, the runtime's view and the backoff table go in, a frozen `PodActions` comes out; nothing is
mutated (the executor bumps the backoff with `note_restarts` when it tries to start containers). Decisions
are re-derived from the current state on every sync, kubelet style, so a restarted agent converges.

The executor applies PodActions in upstream `SyncPod` order: kill the pod (if `kill_pod`, sidecars last:
`termination_prereqs`) or else the `containers_to_kill`; create the sandbox (if `create_sandbox`); start the
`ephemeral_containers_to_start`; start the `init_containers_to_start` in order (stopping at the first regular
init container that fails to start, going on past a sidecar that does); start `containers_to_start`.

Sidecars (init containers with restartPolicy Always, upstream restartable init containers) follow
`computeInitContainerActions`: the next init container starts once a sidecar is *started* (running, and its
startup probe succeeded if it has one: `started`); a sidecar that exits, is in unknown state, changed its
spec or failed its liveness/startup probe is restarted whatever the pod's restartPolicy, with crash-loop
backoff; sidecars do not keep a pod alive: when no regular container runs or is due to start, the pod is
killed and no sidecar is restarted.

Container-level restart policies and rules (upstream ContainerRestartRules, beta and on by default): whether an
exited container runs again is `spec.container_should_restart` on its last exit code (its first matching
restartPolicyRules entry, else its own restartPolicy, else the pod's), for regular and init containers alike;
where upstream has no exit code to judge (a running container killed for a failed probe, an init container in
unknown state, which containers a new sandbox runs) the container's own restartPolicy overrides the pod's and
the rules are not consulted. Whether a dead sandbox is re-created still depends on the pod's policy alone.

The RestartAllContainers rule action (RestartAllContainersOnContainerExits, beta and on by default at 1.37):
when the pod's status carries AllContainersRestarting=True (`status.all_containers_restarting`, computed from
`should_all_containers_restart`), the caller passes `restart_all_containers` and the only action is
`containers_to_reset`: every instance of every init and regular container is killed (if not exited, grace 0)
and removed, in place, the sandbox kept; the next sync, seeing none left, starts the pod from its first init
container as for a new pod (upstream `computePodActions` with `restartAllContainers`).

In-place resize: the caller passes the allocated pod, and `resize_restarts` for the running containers a resize
restarts (RestartContainer policy); resource updates themselves are `kopflet.kuberuntime.resize`'s and the executor's.

Not covered yet: the post-start hook failure kill reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from cri_client import types as cri
from kopflet import backoff as backoffs
from kopflet import gotext
from kopflet.api import spec
from kopflet.container import podstate
from kopflet.container.podstate import State

# Kill reasons, upstream `containerKillReason` ("" for a changed spec).
REASON_UNKNOWN = "Unknown"
REASON_LIVENESS_PROBE = "LivenessProbe"
REASON_STARTUP_PROBE = "StartupProbe"
REASON_RESTART_ALL_CONTAINERS = "RestartAllContainers"

OOM_KILLED = "OOMKilled"

# The pod condition RestartAllContainers sets while it removes the containers (upstream v1.AllContainersRestarting).
ALL_CONTAINERS_RESTARTING = "AllContainersRestarting"


@dataclasses.dataclass(frozen=True, kw_only=True)
class KillInfo:
    """Why one container gets stopped (upstream `containerToKillInfo`); the message goes into the Killing event."""

    name: str
    reason: str = ""
    message: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ResetInfo:
    """One container instance to remove for RestartAllContainers (upstream `containerToRemoveInfo`)."""

    container_id: str
    name: str
    kill: bool = False
    """Stop it first (grace period 0, so the runtime's minimum): it has not exited."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodActions:
    """The outcome of one sync decision for a pod (upstream `podActions`, plus the crash-loop verdicts).

    Container names, not indexes: starts are in spec order.
    """

    kill_pod: bool = False
    """Stop every running container and every sandbox of the pod (containers are kept for status)."""
    create_sandbox: bool = False
    """Create a new sandbox with `attempt` (after killing the pod; init containers restart from the first)."""
    sandbox_id: str = ""
    """The existing sandbox to start containers in; when re-creating, the old one ("" if none or if only the
    network mode changed): a non-empty id with `create_sandbox` is upstream's cue for a SandboxChanged event."""
    attempt: int = 0
    """Attempt number for a new sandbox (0 for the first), else the current highest attempt."""
    init_containers_to_start: tuple[str, ...] = ()
    """Init containers to start now, in spec order: sidecars to (re)start and at most one regular init
    container (those run strictly one at a time)."""
    ephemeral_containers_to_start: tuple[str, ...] = ()
    """Ephemeral containers never started yet, in spec order (they are never restarted)."""
    containers_to_start: tuple[str, ...] = ()
    """Regular containers to start now, in spec order (those in backoff are left out)."""
    containers_to_kill: Mapping[str, KillInfo] = dataclasses.field(default_factory=dict)
    """Container id -> why, for containers to stop when the pod itself is not killed."""
    containers_in_backoff: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Container name -> CrashLoopBackOff message (``back-off 40s restarting failed container=...``)."""
    backoff_since: Mapping[str, float] = dataclasses.field(default_factory=dict)
    """Container name -> finishedAt (seconds) of the exited instance a start replaces: pass to `note_restarts`."""
    retry_after: float | None = None
    """Seconds until the earliest backoff in `containers_in_backoff` ends: when to sync this pod again."""
    reason: str = ""
    """Why the pod is killed or its sandbox re-created, for logs (empty when neither)."""
    containers_to_reset: tuple[ResetInfo, ...] = ()
    """RestartAllContainers, when the pod is not killed: remove these instances in this order (killing those
    with `kill` first), keeping the sandbox; the containers whose exit triggered it come last."""
    start_reasons: Mapping[str, str] = dataclasses.field(default_factory=dict, compare=False)
    """Container name -> the rule that (re)starts it, also for those held back in `containers_in_backoff`
    (upstream logs only "Container of pod is not in the desired state and shall be started"): what `kopflet
    explain` shows. Not part of the decision's equality."""
    backoff_remaining: Mapping[str, float] = dataclasses.field(default_factory=dict, compare=False)
    """Container name -> seconds until its crash-loop back-off ends, for each of `containers_in_backoff`."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class SandboxChange:
    """Upstream `PodSandboxChanged`: whether a new sandbox is needed, with its attempt and the old id."""

    create: bool
    attempt: int
    sandbox_id: str
    reason: str = ""


# ------------------------------------------------------------------------------------------------- rules


def network_mode(pod: spec.Pod) -> cri.NamespaceMode:
    """The network namespace the pod's sandbox must have (upstream `NetworkNamespaceForPod`)."""
    return cri.NamespaceMode.NODE if pod.spec.host_network else cri.NamespaceMode.POD


def sandbox_change(pod: spec.Pod, runtime: podstate.RuntimePodStatus) -> SandboxChange:
    """Upstream `PodSandboxChanged`: judge the newest sandbox; any problem means a new one with attempt + 1."""
    latest = runtime.latest_sandbox
    if latest is None:
        return SandboxChange(create=True, attempt=0, sandbox_id="",
                             reason="No sandbox for pod can be found. Need to start a new one")
    attempt = max(s.attempt for s in runtime.sandboxes)
    if sum(1 for s in runtime.sandboxes if s.ready) > 1:
        return SandboxChange(create=True, attempt=attempt + 1, sandbox_id=latest.id,
                             reason="Multiple sandboxes are ready for Pod. Need to reconcile them")
    if not latest.ready:
        return SandboxChange(create=True, attempt=attempt + 1, sandbox_id=latest.id,
                             reason="No ready sandbox for pod can be found. Need to start a new one")
    if latest.network_mode != network_mode(pod):
        return SandboxChange(create=True, attempt=attempt + 1, sandbox_id="",
                             reason="Sandbox for pod has changed. Need to start a new one")
    if not pod.spec.host_network and not latest.ip:
        return SandboxChange(create=True, attempt=attempt + 1, sandbox_id=latest.id,
                             reason="Sandbox for pod has no IP address. Need to start a new one")
    return SandboxChange(create=False, attempt=attempt, sandbox_id=latest.id)


NOT_STARTED = "not started yet"
NEW_SANDBOX_START = "starts in the new sandbox"


def should_restart(container: spec.ContainerSpec, pod: spec.Pod, runtime: podstate.RuntimePodStatus) -> bool:
    """Upstream `ShouldContainerBeRestarted` (ContainerRestartRules on), for a container that is not running.

    Never for a pod being deleted; always for one that never ran (or whose instances are gone), is only
    created or in unknown state; for an exited one, `spec.container_should_restart` on its last exit code: its
    first matching restartPolicyRules entry, else its own restartPolicy (a sidecar's Always), else the pod's.
    """
    return restart_verdict(container, pod, runtime)[0]


def restart_verdict(container: spec.ContainerSpec, pod: spec.Pod,
                    runtime: podstate.RuntimePodStatus) -> tuple[bool, str]:
    """`should_restart` with the rule that decided it, in the words `kopflet explain` shows."""
    if pod.is_deleting:
        return False, "Pod is being deleted"
    status = runtime.latest_container(container.name)
    if status is None:
        return True, NOT_STARTED
    if status.state is State.RUNNING:
        return False, f'in "{status.state}" state'
    if status.state in (State.UNKNOWN, State.CREATED):
        return True, f'in "{status.state}" state'
    restart, rule = spec.restart_verdict(container, pod.spec, status.exit_code)
    return restart, f"{exited(status)}, {rule}"


def exited(status: podstate.ContainerInfo) -> str:
    """An exited instance as explain names it: its exit code and the runtime's reason (``exited 137 (Error)``)."""
    return f"exited {status.exit_code} ({status.reason})" if status.reason else f"exited {status.exit_code}"


def _restarts_all(container: spec.ContainerSpec, exit_code: int) -> bool:
    """The container's first rule matching the exit code has the RestartAllContainers action."""
    rule = spec.matching_restart_rule(container, exit_code)
    return rule is not None and rule.action == spec.RULE_ACTION_RESTART_ALL_CONTAINERS


def _last_terminated_exit_code(status: Mapping[str, Any]) -> int | None:
    """``state.terminated.exitCode`` of an API container status, None when it is not terminated."""
    terminated = (status.get("state") or {}).get("terminated")
    if not isinstance(terminated, Mapping):
        return None
    code = terminated.get("exitCode")
    return code if isinstance(code, int) and not isinstance(code, bool) else 0


def should_all_containers_restart(pod: spec.Pod, runtime: podstate.RuntimePodStatus | None,
                                  previous: Mapping[str, Any] | None) -> bool:
    """Upstream `ShouldAllContainersRestart`: the pod's API status (`previous`) says AllContainersRestarting
    is True, or an init or regular container exited with an exit code whose first matching rule is
    RestartAllContainers, judged on its newest runtime instance or on its API status."""
    previous = previous or {}
    for condition in previous.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == ALL_CONTAINERS_RESTARTING \
                and condition.get("status") == "True":
            return True
    api: dict[str, Mapping[str, Any]] = {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for item in previous.get(key) or ():
            if isinstance(item, Mapping) and isinstance(item.get("name"), str):
                api[item["name"]] = item
    for container in (*pod.spec.init_containers, *pod.spec.containers):
        if runtime is not None:
            latest = runtime.latest_container(container.name)
            if latest is not None and latest.state is State.EXITED and _restarts_all(container, latest.exit_code):
                return True
        if container.name in api:
            code = _last_terminated_exit_code(api[container.name])
            if code is not None and _restarts_all(container, code):
                return True
    return False


def all_containers_restart_cleaned_up(pod: spec.Pod, runtime: podstate.RuntimePodStatus) -> bool:
    """Upstream `AllContainersRestartCleanedUp`: no instance of any init or regular container is left."""
    return all(runtime.latest_container(c.name) is None for c in (*pod.spec.init_containers, *pod.spec.containers))


def containers_to_reset(pod: spec.Pod, runtime: podstate.RuntimePodStatus) -> tuple[ResetInfo, ...]:
    """Upstream `getContainersToReset`, in `computePodActions` order: every instance (all sandboxes) of the
    regular containers, then of the init containers, then the instances whose exit triggered the reset (exited
    with a matching RestartAllContainers rule): regular, then init. Ones not exited are killed first."""
    def split(containers: Sequence[spec.ContainerSpec]) -> tuple[list[ResetInfo], list[ResetInfo]]:
        sources: list[ResetInfo] = []
        targets: list[ResetInfo] = []
        for container in containers:
            for info in runtime.instances(container.name):
                if info.state is State.EXITED:
                    reset = ResetInfo(container_id=info.id, name=info.name)
                    (sources if _restarts_all(container, info.exit_code) else targets).append(reset)
                else:
                    targets.append(ResetInfo(container_id=info.id, name=info.name, kill=True))
        return sources, targets

    init_sources, init_targets = split(pod.spec.init_containers)
    sources, targets = split(pod.spec.containers)
    return (*targets, *init_targets, *sources, *init_sources)


def init_container_failed(status: podstate.ContainerInfo) -> bool:
    """Upstream `isInitContainerFailed`: OOM-killed, exited non-zero, or in unknown state."""
    return (status.reason == OOM_KILLED
            or (status.state is State.EXITED and status.exit_code != 0)
            or status.state is State.UNKNOWN)


def backoff_key(pod: spec.Pod, container_name: str) -> backoffs.BackoffKey:
    """The crash-loop key of a container of this pod (upstream `GetStableKey`, spec hash included)."""
    container = pod.spec.container(container_name)
    return backoffs.crash_loop_key(pod.uid, container_name, pod_name=pod.name, namespace=pod.namespace,
                                   container_hash=container.hash if container is not None else "")


def crash_loop_message(pod: spec.Pod, container_name: str, delay: float) -> str:
    """The CrashLoopBackOff waiting message, worded as upstream `doBackOff`."""
    return (f"back-off {gotext.go_duration(delay)} restarting failed container={container_name} "
            f"pod={pod.full_name}")


def termination_prereqs(pod: spec.Pod, running: Collection[str]) -> dict[str, tuple[str, ...]]:
    """Which running containers each container must see stopped before its own stop (upstream
    `newTerminationOrdering`), for killing a pod that has sidecars.

    Every sidecar waits for the running regular containers and for the next sidecar after it in spec order
    if that one runs (which waits for the one after it, and so on): regular containers stop first, then the
    sidecars in reverse order. Others wait for nothing. Empty when the pod has no sidecar.
    """
    if not any(c.is_sidecar for c in pod.spec.init_containers):
        return {}
    running = set(running)
    regular = tuple(c.name for c in pod.spec.containers if c.name in running)
    prereqs: dict[str, tuple[str, ...]] = {}
    later = ""
    for container in reversed(pod.spec.init_containers):
        if not container.is_sidecar:
            continue
        prereqs[container.name] = regular + ((later,) if later and later in running else ())
        later = container.name
    return prereqs


def namespace_target_id(container: spec.ContainerSpec, runtime: podstate.RuntimePodStatus) -> str:
    """The runtime id of the container whose PID namespace an ephemeral container joins ("" for none)
    (upstream `startSpec.getTargetID`): the target's newest instance.

    Raises LookupError with upstream's message when the target has no instance (the start fails with
    CreateContainerConfigError and is tried again on the next sync).
    """
    if not container.target_container_name:
        return ""
    target = runtime.latest_container(container.target_container_name)
    if target is None:
        raise LookupError(f"unable to find target container {container.target_container_name}")
    return target.id


def note_restarts(actions: PodActions, pod: spec.Pod, backoff: backoffs.Backoff, now: float,
                  attempted: Iterable[str] | None = None) -> None:
    """Bump the crash-loop backoff of the containers the executor tried to start, whether or not the start
    succeeded (upstream `doBackOff` calls `Next` before `startContainer`).

    `attempted` limits it to the names actually tried (default: every name in `backoff_since`).
    """
    names = set(actions.backoff_since) if attempted is None else set(attempted) & set(actions.backoff_since)
    for name in sorted(names):
        backoff.next(backoff_key(pod, name), now, event_time=actions.backoff_since[name])


# -------------------------------------------------------------------------------------------- the planner


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Probes:
    """Probe verdicts by container id, as the probe manager publishes them."""

    liveness_failures: frozenset[str]
    startup_failures: frozenset[str]
    started: frozenset[str]


@dataclasses.dataclass
class _Draft:
    """The mutable working copy of PodActions while the rules run."""

    kill_pod: bool
    create_sandbox: bool
    sandbox_id: str
    attempt: int
    reason: str = ""
    init_containers_to_start: list[str] = dataclasses.field(default_factory=list)
    ephemeral_containers_to_start: list[str] = dataclasses.field(default_factory=list)
    containers_to_start: list[str] = dataclasses.field(default_factory=list)
    containers_to_kill: dict[str, KillInfo] = dataclasses.field(default_factory=dict)
    containers_in_backoff: dict[str, str] = dataclasses.field(default_factory=dict)
    backoff_since: dict[str, float] = dataclasses.field(default_factory=dict)
    retry_after: float | None = None
    start_reasons: dict[str, str] = dataclasses.field(default_factory=dict)
    backoff_remaining: dict[str, float] = dataclasses.field(default_factory=dict)

    def start_reason(self, name: str, reason: str) -> None:
        """Why `name` is started: the first rule that asked for it."""
        self.start_reasons.setdefault(name, reason)

    def freeze(self) -> PodActions:
        return PodActions(
            kill_pod=self.kill_pod, create_sandbox=self.create_sandbox, sandbox_id=self.sandbox_id,
            attempt=self.attempt, init_containers_to_start=tuple(self.init_containers_to_start),
            ephemeral_containers_to_start=tuple(self.ephemeral_containers_to_start),
            containers_to_start=tuple(self.containers_to_start), containers_to_kill=dict(self.containers_to_kill),
            containers_in_backoff=dict(self.containers_in_backoff), backoff_since=dict(self.backoff_since),
            retry_after=self.retry_after, reason=self.reason, start_reasons=dict(self.start_reasons),
            backoff_remaining=dict(self.backoff_remaining),
        )


def compute_pod_actions(pod: spec.Pod,
                        runtime: podstate.RuntimePodStatus,
                        *,
                        backoff: backoffs.Backoff,
                        now: float,
                        liveness_failures: Collection[str] = (),
                        startup_failures: Collection[str] = (),
                        started: Collection[str] = (),
                        restart_all_containers: bool = False,
                        resize_restarts: Mapping[str, str] | None = None) -> PodActions:
    """Decide the next step for a pod from its spec and what the runtime has (upstream `computePodActions`).

    `now` is seconds since the epoch (the runtime's nanosecond times are compared against it);
    `liveness_failures` / `startup_failures` are ids of running containers whose probe failed; `started` are
    ids of running containers whose startup probe succeeded (a sidecar with a startup probe counts as started
    for the init order only then). `restart_all_containers` is upstream's flag: the status generated for this
    sync has AllContainersRestarting True; then the containers are only removed (`containers_to_reset`).
    `resize_restarts` (container id -> name, `resize.ResizeActions.restart`) are running containers an in-place
    resize restarts (RestartContainer policy): killed and started again in this sync, with no crash-loop backoff.
    """
    if pod.is_deleting:
        # Upstream's pod worker stops calling SyncPod and kills the pod instead (SyncTerminatingPod).
        latest = runtime.latest_sandbox
        return PodActions(kill_pod=True, sandbox_id=latest.id if latest else "",
                          attempt=max((s.attempt for s in runtime.sandboxes), default=0),
                          reason="Pod is being deleted")

    change = sandbox_change(pod, runtime)
    if restart_all_containers:
        # Nothing starts in this sync; with a sandbox to re-create the pod is killed instead (upstream SyncPod
        # then leaves the reset list alone), and it is re-created with nothing to start in it.
        return PodActions(kill_pod=change.create, create_sandbox=change.create, sandbox_id=change.sandbox_id,
                          attempt=change.attempt, reason=change.reason,
                          containers_to_reset=() if change.create else containers_to_reset(pod, runtime))
    draft = _Draft(kill_pod=change.create, create_sandbox=change.create, sandbox_id=change.sandbox_id,
                   attempt=change.attempt, reason=change.reason)
    probes = _Probes(liveness_failures=frozenset(liveness_failures), startup_failures=frozenset(startup_failures),
                     started=frozenset(started))
    if change.create:
        _plan_new_sandbox(pod, runtime, draft)
    else:
        # Ephemeral containers may start before initialisation completes; never restarted (upstream).
        draft.ephemeral_containers_to_start = [c.name for c in pod.spec.ephemeral_containers
                                               if runtime.latest_container(c.name) is None]
        if _plan_init_containers(pod, runtime, draft, probes) and not draft.kill_pod:
            _plan_containers(pod, runtime, draft, probes)
        if draft.kill_pod:
            draft.ephemeral_containers_to_start = []  # nothing starts in a sandbox about to be stopped
        else:
            _plan_resize_restarts(pod, draft, resize_restarts or {})
    _apply_backoff(pod, runtime, draft, backoff, now, exempt=set((resize_restarts or {}).values()))
    return draft.freeze()


def _plan_resize_restarts(pod: spec.Pod, draft: _Draft, restarts: Mapping[str, str]) -> None:
    """Upstream computePodResizeAction with RestartContainer: kill the running instance ("Container c resize
    requires restart") and start it again in spec order, unless something else already restarts it."""
    for container_id, name in restarts.items():
        if container_id in draft.containers_to_kill:
            continue
        message = f"Container {name} resize requires restart"
        draft.containers_to_kill[container_id] = KillInfo(name=name, message=message)
        draft.start_reason(name, message)
        if any(c.name == name for c in pod.spec.init_containers):
            if name not in draft.init_containers_to_start:
                order = [c.name for c in pod.spec.init_containers]
                draft.init_containers_to_start = sorted([*draft.init_containers_to_start, name], key=order.index)
        elif name not in draft.containers_to_start:
            order = [c.name for c in pod.spec.containers]
            draft.containers_to_start = sorted([*draft.containers_to_start, name], key=order.index)


def _succeeded(name: str, runtime: podstate.RuntimePodStatus) -> bool:
    """Upstream `containerSucceeded`: the latest instance exited with code 0."""
    status = runtime.latest_container(name)
    return status is not None and status.state is State.EXITED and status.exit_code == 0


def _plan_new_sandbox(pod: spec.Pod, runtime: podstate.RuntimePodStatus, draft: _Draft) -> None:
    """Everything restarts in a new sandbox, unless the restart policy says the pod is done.

    As upstream: the pod's restartPolicy alone decides whether a sandbox is re-created once containers ran
    (Never: no, whatever the containers' own policies); then every regular container runs again except one
    that succeeded under OnFailure, its own restartPolicy overriding the pod's.
    """
    if pod.spec.restart_policy == spec.RESTART_NEVER and draft.attempt != 0 and runtime.containers:
        # Containers already ran under Never: stop what is left rather than run them again.
        draft.create_sandbox = False
        draft.reason += "; restartPolicy Never and containers already ran: not re-creating it"
        return
    to_start = [c.name for c in pod.spec.containers
                if not (spec.effective_restart_policy(c, pod.spec) == spec.RESTART_ON_FAILURE
                        and _succeeded(c.name, runtime))]
    if not to_start and runtime.any_regular_container_created(pod):
        # Initialised before, and nothing left to run (all succeeded under OnFailure): the pod is done.
        draft.create_sandbox = False
        draft.reason += "; all containers succeeded: not re-creating it"
        return
    if pod.spec.init_containers:
        draft.init_containers_to_start = [pod.spec.init_containers[0].name]
        draft.start_reason(pod.spec.init_containers[0].name, NEW_SANDBOX_START)
        return
    draft.containers_to_start = to_start
    for name in to_start:
        draft.start_reason(name, NEW_SANDBOX_START)


def _plan_init_containers(pod: spec.Pod, runtime: podstate.RuntimePodStatus, draft: _Draft, probes: _Probes) -> bool:
    """Upstream `computeInitContainerActions`; True once the pod is initialised.

    Judged on the instances in the active sandbox only. Regular init containers run strictly one at a time
    in spec order and each must exit 0; a sidecar lets the next one start once it is started (running, and its
    startup probe succeeded if it has one) and keeps running. Walking backwards from the last init container,
    the newest one with a status decides what comes next (earlier ones may have been garbage-collected):
    running -> wait (a sidecar: start the next); created -> start it again; exited 0 -> start the next one;
    failed -> restart it if `spec.container_should_restart` says so for its exit code (its restartPolicyRules,
    its own restartPolicy or the pod's), else kill the pod; unknown -> kill it and restart it, or kill the pod
    if its own restartPolicy (else the pod's) is Never. Earlier sidecars are kept running all along: restarted
    when they exited or are in unknown state, killed and restarted when their spec changed or a liveness/startup
    probe failed. Once a regular container exists in the sandbox, only sidecars are looked at.
    """
    inits = pod.spec.init_containers
    if not inits:
        return True
    regular = {c.name for c in pod.spec.containers}
    # A regular container in the current sandbox means initialisation finished before (upstream
    # HasAnyActiveRegularContainerStarted): init containers may have been garbage-collected since.
    initialized = any(c.name in regular for c in runtime.active_containers())
    previously_initialized = initialized
    to_start: list[str] = []  # collected backwards, reversed at the end

    def kill(status: podstate.ContainerInfo, reason: str, message: str) -> None:
        draft.containers_to_kill[status.id] = KillInfo(name=status.name, reason=reason, message=message)

    def start(name: str, reason: str) -> None:
        to_start.append(name)
        draft.start_reason(name, reason)

    for index in range(len(inits) - 1, -1, -1):
        container = inits[index]
        status = runtime.latest_active_container(container.name)
        if status is None:
            if previously_initialized and container.is_sidecar:
                start(container.name, "no instance in the active sandbox")  # its instance is gone: start it again
            continue
        if previously_initialized and not container.is_sidecar:
            continue  # after initialisation only sidecars are kept running
        if status.state is State.CREATED:
            start(container.name, f'in "{status.state}" state')  # created but never started: start it again
        elif status.state is State.RUNNING:
            if container.is_sidecar:
                initialized = _plan_running_sidecar(inits, index, status, previously_initialized, probes, kill,
                                                    start) or initialized
        elif status.state is State.EXITED:
            if container.is_sidecar:
                start(container.name, f"{exited(status)}, container restartPolicy {container.restart_policy}")
            elif init_container_failed(status):
                # Upstream asks ShouldContainerBeRestarted, which judges the newest instance of any sandbox; this
                # is the active one, the same instance unless an older sandbox holds a newer one (never in practice).
                restart, rule = spec.restart_verdict(container, pod.spec, status.exit_code)
                if not restart:
                    draft.kill_pod = True
                    draft.reason = f"Init container {container.name} failed and its restart policy does not restart it"
                    return False
                start(container.name, f"{exited(status)}, {rule}")
            elif index == len(inits) - 1:
                initialized = True
            else:
                start(inits[index + 1].name, f"init container {container.name} {exited(status)}")
        else:  # unknown: it may still run, stop it before starting it again
            # No exit code to match rules against: the container's own restartPolicy, else the pod's (upstream).
            if not container.is_sidecar and spec.effective_restart_policy(container, pod.spec) == spec.RESTART_NEVER:
                draft.kill_pod = True
                draft.reason = f"Init container {container.name} failed and its restart policy does not restart it"
                return False
            message = f'Init container is in "{status.state}" state, try killing it before restart'
            kill(status, REASON_UNKNOWN, message)
            start(container.name, message)
        previously_initialized = True
    if not previously_initialized:
        start(inits[0].name, NOT_STARTED)  # nothing started yet: the first one
    draft.init_containers_to_start = list(reversed(to_start))
    return initialized


def _plan_running_sidecar(inits: Sequence[spec.ContainerSpec], index: int, status: podstate.ContainerInfo,
                          previously_initialized: bool, probes: _Probes,
                          kill: Callable[[podstate.ContainerInfo, str, str], None],
                          start: Callable[[str, str], None]) -> bool:
    """A running sidecar (upstream `computeInitContainerActions`, running restartable init container).

    Waits for its startup probe, then counts as done for the init order (True when it is the last init
    container: the pod is initialised; else the next init container starts the first time round); restarted
    when its startup probe failed, its spec changed or its liveness probe failed.
    """
    container = inits[index]
    name = container.name
    if container.startup_probe is not None and status.id not in probes.started:
        if status.id in probes.startup_failures:
            message = f"Init container {name} failed startup probe"
            kill(status, REASON_STARTUP_PROBE, message)
            start(name, message)
        return False  # not started yet: wait for the startup probe
    initialized = index == len(inits) - 1
    if not initialized and not previously_initialized:
        start(inits[index + 1].name, f"init container {name} started")
    if status.hash != container.hash:
        message = f"Init container {name} definition changed"
        kill(status, "", message)
        start(name, message)
    elif status.id in probes.liveness_failures:
        message = f"Init container {name} failed liveness probe"
        kill(status, REASON_LIVENESS_PROBE, message)
        start(name, message)
    return initialized


def _plan_containers(pod: spec.Pod, runtime: podstate.RuntimePodStatus, draft: _Draft, probes: _Probes) -> None:
    """Regular containers: start what should run, kill and restart what changed or failed its probes.

    A running container killed for a failed probe is restarted unless its own restartPolicy (else the pod's)
    is Never; restartPolicyRules are not consulted, it has no exit code yet (upstream). When none runs or is due
    to start, the pod is done: it is killed, and sidecars are not restarted (they do not keep a pod alive).
    """
    keep = 0
    for container in pod.spec.containers:
        status = runtime.latest_container(container.name)
        if status is None or status.state is not State.RUNNING:
            restart, why = restart_verdict(container, pod, runtime)
            if restart:
                draft.containers_to_start.append(container.name)
                draft.start_reason(container.name, why)
                if status is not None and status.state is State.UNKNOWN:
                    # It may still run: stop it first so two instances never run side by side.
                    draft.containers_to_kill[status.id] = KillInfo(
                        name=container.name, reason=REASON_UNKNOWN,
                        message=f'Container is in "{status.state}" state, try killing it before restart')
            continue
        restart = spec.effective_restart_policy(container, pod.spec) != spec.RESTART_NEVER
        if status.hash != container.hash:
            message, reason = f"Container {container.name} definition changed", ""
            restart = True  # a changed spec restarts regardless of the restart policy
        elif status.id in probes.liveness_failures:
            message, reason = f"Container {container.name} failed liveness probe", REASON_LIVENESS_PROBE
        elif status.id in probes.startup_failures:
            message, reason = f"Container {container.name} failed startup probe", REASON_STARTUP_PROBE
        else:
            keep += 1
            continue
        if restart:
            message += ", will be restarted"
            draft.containers_to_start.append(container.name)
            draft.start_reason(container.name, message)
        draft.containers_to_kill[status.id] = KillInfo(name=container.name, reason=reason, message=message)
    if keep == 0 and not draft.containers_to_start:
        draft.kill_pod = True
        draft.reason = "All containers are dead and none is due to restart"
        draft.init_containers_to_start = []  # sidecars must not keep the pod alive


def _apply_backoff(pod: spec.Pod, runtime: podstate.RuntimePodStatus, draft: _Draft,
                   backoff: backoffs.Backoff, now: float, exempt: Collection[str] = ()) -> None:
    """Hold back starts still in crash-loop backoff since their last exit (upstream `doBackOff`); `exempt` ones
    are restarted by the agent itself (a resize), judged on their running instance upstream: no backoff."""
    for name in [*draft.init_containers_to_start, *draft.containers_to_start]:
        if name in exempt:
            continue
        exited = runtime.latest_exited(name)
        if exited is None:
            continue
        since = exited.finished_at / 1e9
        key = backoff_key(pod, name)
        if backoff.is_in_backoff_since(key, since, now):
            draft.containers_in_backoff[name] = crash_loop_message(pod, name, backoff.get(key))
            remaining = backoff.remaining(key, since, now)
            draft.backoff_remaining[name] = remaining
            draft.retry_after = remaining if draft.retry_after is None else min(draft.retry_after, remaining)
        else:
            draft.backoff_since[name] = since
    draft.init_containers_to_start = [n for n in draft.init_containers_to_start
                                      if n not in draft.containers_in_backoff]
    draft.containers_to_start = [n for n in draft.containers_to_start if n not in draft.containers_in_backoff]
