"""
The Pod's ``status`` as the kubelet writes it: `compute_pod_status(pod, runtime, previous=..., now=...) -> dict`.

Mirrors, in one pure pass, what upstream spreads over several places:
- `generateAPIPodStatus`, `convertStatusToAPIStatus`, `convertToAPIContainerStatuses`, `getPhase` and
  `sortPodIPs` (pkg/kubelet/kubelet_pods.go);
- the probe manager's `UpdatePodStatus` (started/ready of each container);
- the condition generators of pkg/kubelet/status/generate.go;
- the status manager's `updateStatusInternal` (lastTransitionTime, startTime), `normalizeStatus`
  (second precision, termination messages capped at 12 KiB per pod), `mergePodStatus` (conditions the
  kubelet does not own are kept, terminal pods never Ready) and `TerminatePod` (`terminal_status`).

Inputs are the spec, the runtime's view (`podstate.RuntimePodStatus`), the Pod's current status from the API
(`previous`, a plain dict, maybe empty) and what the last sync recorded: `waiting` (container name ->
`Waiting`, upstream's reasonCache: ErrImagePull, ImagePullBackOff, CrashLoopBackOff,
CreateContainerConfigError ... — the caller removes an entry once the container started), termination
messages read from the termination-log files, probe results. Time is `now`.

The output is the whole ``status`` body as the API returns it (camelCase keys, RFC 3339 second-precision
times with ``Z``, ``lastProbeTime: None``), so `status_changed` can compare it with what the API has, and
`status_patch` turns it into a JSON merge patch that also clears fields the kubelet owns and no longer sets.

Sidecars (restartable init containers) appear in ``initContainerStatuses`` with ``started`` (startup probe)
and ``ready`` (readiness probe); they count for Initialized once started and for ContainersReady, not for the
phase once the pod has initialised. Ephemeral containers get ``ephemeralContainerStatuses`` (state and
lastState like the others, never started/ready: no probes) and count for nothing else. A pod past its
``activeDeadlineSeconds`` (`kopflet.lifecycle.deadline`, measured from ``startTime``) is Failed with reason
DeadlineExceeded, as upstream's activeDeadlineHandler makes `generateAPIPodStatus` write it.

In-place resize: the status is computed for the allocated pod; containers' ``resources`` are read back from what the
runtime reports (`resize.container_status_resources`), the pod's ``resources`` from its cgroup, and the
PodResizePending / PodResizeInProgress conditions the agent holds are written as given (a cleared one is deleted
from the API status by `status_patch`).

Not covered yet: the container ``user``/``stopSignal`` fields, readiness gates other than reading the conditions
already present.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kopflet import gotext
from kopflet.api import qos, spec
from kopflet.api.times import timestamp
from kopflet.container import podstate
from kopflet.container.podstate import State
from kopflet.container.sync_result import Waiting
from kopflet.kuberuntime import reconciler, resize, sandbox_config
from kopflet.lifecycle import deadline

PENDING = "Pending"
RUNNING = "Running"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
TERMINAL_PHASES = (SUCCEEDED, FAILED)

# Condition types.
POD_SCHEDULED = "PodScheduled"
POD_READY_TO_START_CONTAINERS = "PodReadyToStartContainers"
INITIALIZED = "Initialized"
CONTAINERS_READY = "ContainersReady"
READY = "Ready"
DISRUPTION_TARGET = "DisruptionTarget"
ALL_CONTAINERS_RESTARTING = reconciler.ALL_CONTAINERS_RESTARTING
KUBELET_CONDITIONS = (POD_SCHEDULED, READY, INITIALIZED, CONTAINERS_READY, POD_READY_TO_START_CONTAINERS,
                      "PodResizeInProgress", "PodResizePending", ALL_CONTAINERS_RESTARTING)
"""Upstream `PodConditionsByKubelet` (+ PodReadyToStartContainers, AllContainersRestarting): regenerated; all
others are kept."""

# Condition reasons (pkg/kubelet/status/generate.go).
UNKNOWN_CONTAINER_STATUSES = "UnknownContainerStatuses"
POD_COMPLETED = "PodCompleted"
POD_FAILED = "PodFailed"
CONTAINERS_NOT_READY = "ContainersNotReady"
CONTAINERS_NOT_INITIALIZED = "ContainersNotInitialized"
READINESS_GATES_NOT_READY = "ReadinessGatesNotReady"
RESTART_ALL_CONTAINERS_STARTED = "RestartAllContainersStarted"
MESSAGE_RESTART_ALL_CONTAINERS_STARTED = "container exited with restart policy rule"

# Container state reasons.
CONTAINER_CREATING = "ContainerCreating"
POD_INITIALIZING = "PodInitializing"
CONTAINER_STATUS_UNKNOWN = "ContainerStatusUnknown"
COMPLETED = "Completed"
RESTARTING_ALL_CONTAINERS = "RestartingAllContainers"
MESSAGE_RESTARTING_ALL_CONTAINERS = "The container is removed because RestartAllContainers in place"

MESSAGE_UNKNOWN_TERMINATED = "The container could not be located when the pod was terminated"
MESSAGE_UNKNOWN_DELETED = ("The container could not be located when the pod was deleted.  "
                           "The container used to be Running")
MESSAGE_INIT_ASSUMED_DONE = ("Unable to get init container status from container runtime and pod has been "
                             "initialized, treat it as exited normally")

MAX_POD_TERMINATION_MESSAGE_LENGTH = 1024 * 12
"""Bytes of termination messages per pod, shared by its containers (kubecontainer.MaxPodTerminationMessageLogLength)."""

OWNED_FIELDS = ("phase", "conditions", "message", "reason", "hostIP", "hostIPs", "podIP", "podIPs", "startTime",
                "initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses", "qosClass",
                "observedGeneration", "resources", "allocatedResources")
"""Top-level status fields the kubelet writes: `status_patch` clears those it no longer sets."""


# ------------------------------------------------------------------------------------- container statuses


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Inputs:
    pod: spec.Pod
    runtime: podstate.RuntimePodStatus
    waiting: Mapping[str, Waiting]
    termination_messages: Mapping[str, str]
    readiness: Mapping[str, bool]
    startup: Mapping[str, bool]
    runtime_name: str
    pod_restarting: bool = False
    """Upstream podRestarting: `reconciler.should_all_containers_restart` (RestartAllContainers under way)."""
    actuated: Mapping[str, spec.Resources] = dataclasses.field(default_factory=dict)
    """Each container's resources as last given to the runtime (the resize's actuated record)."""


def _state_of(status: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    """``status.state.<key>`` (waiting/running/terminated) or None."""
    state = status.get("state") or {}
    value = state.get(key)
    return value if isinstance(value, Mapping) else None


def _last_terminated(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    value = (status.get("lastState") or {}).get("terminated")
    return value if isinstance(value, Mapping) else None


def _restart_count(status: Mapping[str, Any]) -> int:
    value = status.get("restartCount")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _restartable(container: spec.ContainerSpec, pod: spec.Pod, terminated: Mapping[str, Any]) -> bool:
    """Upstream getPhase: the container runs again after this termination (its restart policy and rules), or
    it was removed by RestartAllContainers."""
    return (spec.container_should_restart(container, pod.spec, _exit_code(terminated))
            or terminated.get("reason") == RESTARTING_ALL_CONTAINERS)


def _volume_mounts(container: spec.ContainerSpec) -> list[dict[str, Any]]:
    """``volumeMounts`` of a status (RecursiveReadOnlyMounts): read-only mounts say whether it is recursive."""
    result = []
    for mount in container.volume_mounts:
        item: dict[str, Any] = {"name": mount.get("name", ""), "mountPath": mount.get("mountPath", "")}
        if mount.get("readOnly") is True:
            item["readOnly"] = True
            item["recursiveReadOnly"] = "Disabled"
        result.append(item)
    return result


def _convert(inputs: _Inputs, info: podstate.ContainerInfo, container: spec.ContainerSpec,
             old: Mapping[str, Any] | None) -> dict[str, Any]:
    """One runtime instance as a container status (upstream `convertContainerStatus`)."""
    container_id = f"{inputs.runtime_name}://{info.id}"
    status: dict[str, Any] = {
        "name": info.name,
        "image": info.image or container.image,
        "imageID": info.image_ref,
        "containerID": container_id,
        "restartCount": info.restart_count,
        "ready": False,
        "lastState": {},
    }
    if old is not None and "volumeMounts" in old:
        status["volumeMounts"] = copy.deepcopy(old["volumeMounts"])
    if old is not None:
        # RestartAllContainersOnContainerExits (on at 1.37, for every pod): a reset removes the old instances,
        # so the count and the last termination are carried over from the API status.
        status["restartCount"] = max(info.restart_count, _restart_count(old))
        old_terminated = _state_of(old, "terminated")
        if old.get("containerID") != container_id and old_terminated is not None:
            status["lastState"] = {"terminated": copy.deepcopy(dict(old_terminated))}
        elif (last := _last_terminated(old)) is not None:
            status["lastState"] = {"terminated": copy.deepcopy(dict(last))}
    if info.state is State.RUNNING:
        status["state"] = {"running": {"startedAt": timestamp(info.started_at)}}
        if old is not None and _state_of(old, "terminated") is not None and _restart_count(old) >= info.restart_count:
            status["restartCount"] = _restart_count(old) + 1
    elif info.state is State.EXITED:
        message = info.message
        extra = inputs.termination_messages.get(info.id, "")
        if extra:
            message = f"{message}: {extra}" if message else extra
        terminated: dict[str, Any] = {"exitCode": info.exit_code}
        if info.reason:
            terminated["reason"] = info.reason
        if message:
            terminated["message"] = message
        terminated.update(startedAt=timestamp(info.started_at), finishedAt=timestamp(info.finished_at),
                          containerID=container_id)
        status["state"] = {"terminated": terminated}
    elif info.state is State.UNKNOWN and old is not None and _state_of(old, "running") is not None:
        # It ran and the runtime lost it: "ran and failed", not "never ran" (so run-once pods do not rerun).
        reason = RESTARTING_ALL_CONTAINERS if inputs.pod_restarting else CONTAINER_STATUS_UNKNOWN
        status["state"] = {"terminated": {"exitCode": 137, "reason": reason,
                                          "message": MESSAGE_UNKNOWN_TERMINATED, "startedAt": None,
                                          "finishedAt": None}}
        status["restartCount"] = int(old.get("restartCount") or 0) + 1
    else:
        status["state"] = {"waiting": {}}  # created, or unknown without a previous running status
    if info.state is State.RUNNING and old is not None and old.get("started") is True:
        status["started"] = True
    same_instance = old is not None and old.get("containerID") == container_id
    status["resources"] = resize.container_status_resources(
        container.resources, info.state is State.RUNNING, info.resources, inputs.actuated.get(container.name),
        old.get("resources") if same_instance and old is not None else None)
    if container.resources.requests:
        status["allocatedResources"] = dict(container.resources.requests)
    return status


def _container_statuses(inputs: _Inputs, containers: Sequence[spec.ContainerSpec],
                        previous: Iterable[Any], *, is_init: bool, ephemeral: bool = False) -> list[dict[str, Any]]:
    """Upstream `convertToAPIContainerStatuses` followed by the probe manager's started/ready (which leaves
    ephemeral containers alone: they have no probes)."""
    pod, runtime = inputs.pod, inputs.runtime
    olds = {s["name"]: s for s in previous if isinstance(s, Mapping) and isinstance(s.get("name"), str)}
    default_reason = POD_INITIALIZING if pod.spec.init_containers else CONTAINER_CREATING
    statuses: dict[str, dict[str, Any]] = {}

    for container in containers:
        status: dict[str, Any] = {"name": container.name, "image": container.image, "imageID": "",
                                  "state": {"waiting": {"reason": default_reason}}, "lastState": {},
                                  "ready": False, "restartCount": 0}
        if container.volume_mounts:
            status["volumeMounts"] = _volume_mounts(container)
        old = olds.get(container.name)
        if old is not None:
            if _state_of(old, "terminated") is not None:
                status = copy.deepcopy(dict(old))  # terminated stays terminated even if the runtime lost it
            else:
                status["restartCount"] = int(old.get("restartCount") or 0)
                status["lastState"] = copy.deepcopy(old.get("lastState") or {})
        statuses[container.name] = status

    for container in containers:
        old = olds.get(container.name)
        if runtime.latest_container(container.name) is not None or old is None:
            continue
        if inputs.pod_restarting and _state_of(old, "waiting") is None:
            # RestartAllContainers removed it: waiting to run again, its last state a synthetic termination.
            status = statuses[container.name]
            status["state"] = {"waiting": {"reason": RESTARTING_ALL_CONTAINERS,
                                           "message": MESSAGE_RESTARTING_ALL_CONTAINERS}}
            status["lastState"] = {"terminated": {"exitCode": 137, "reason": RESTARTING_ALL_CONTAINERS,
                                                  "message": MESSAGE_RESTARTING_ALL_CONTAINERS, "startedAt": None,
                                                  "finishedAt": None}}
            status["restartCount"] = _restart_count(old) + 1
            continue
        if _state_of(old, "terminated") is not None or _state_of(old, "running") is None:
            continue
        status = statuses[container.name]
        waiting = _state_of(status, "waiting")
        if waiting is None or waiting.get("reason") != default_reason or _last_terminated(status) is not None:
            continue
        # It was running and its container vanished: show it stopped, so the pod does not go back to Pending.
        status["lastState"] = {"terminated": {"exitCode": 137, "reason": CONTAINER_STATUS_UNKNOWN,
                                              "message": MESSAGE_UNKNOWN_DELETED, "startedAt": None,
                                              "finishedAt": None}}
        if not pod.is_deleting:
            status["restartCount"] = int(status.get("restartCount") or 0) + 1

    seen: dict[str, int] = {}
    for info in runtime.containers:  # newest first: the latest instance, then the one before (lastState)
        if info.name not in statuses or seen.get(info.name, 0) >= 2:
            continue
        container = next(c for c in containers if c.name == info.name)
        converted = _convert(inputs, info, container, olds.get(info.name))
        if seen.get(info.name, 0) == 0:
            statuses[info.name] = converted
        else:
            statuses[info.name]["lastState"] = converted["state"]
        seen[info.name] = seen.get(info.name, 0) + 1

    for container in containers:
        latest = runtime.latest_container(container.name)
        status = statuses[container.name]
        if is_init:
            if latest is not None and latest.state is State.EXITED and latest.exit_code == 0:
                continue
            if (latest is None and runtime.any_regular_container_created(pod) and not container.is_sidecar
                    and _state_of(status, "waiting") is not None):
                status["state"] = {"terminated": {"exitCode": 0, "reason": COMPLETED,
                                                  "message": MESSAGE_INIT_ASSUMED_DONE, "startedAt": None,
                                                  "finishedAt": None}}
                continue
        if not reconciler.should_restart(container, pod, runtime):
            continue
        reason = inputs.waiting.get(container.name)
        if reason is None:
            continue
        if _state_of(status, "terminated") is not None:
            status["lastState"] = status["state"]
        waiting: dict[str, Any] = {"reason": reason.reason}
        if reason.message:
            waiting["message"] = reason.message
        status["state"] = {"waiting": waiting}

    for container in containers:
        if not ephemeral:
            _probe(inputs, container, statuses[container.name], is_init=is_init)

    if is_init:
        return [statuses[c.name] for c in containers]
    return [statuses[name] for name in sorted(statuses)]  # upstream SortedContainerStatuses: by name


def _probe(inputs: _Inputs, container: spec.ContainerSpec, status: dict[str, Any], *, is_init: bool) -> None:
    """The probe manager's `UpdatePodStatus` for one container: ``started`` always, ``ready`` when started.

    Without a probe result a container is started unless it has a startup probe, and ready unless it has a
    readiness probe; a regular init container is ready once it exited 0.
    """
    running = _state_of(status, "running") is not None
    container_id = str(status.get("containerID") or "").partition("://")[2]
    if not running:
        started = False
    elif container_id in inputs.startup:
        started = inputs.startup[container_id]
    else:
        started = status.get("started") is True or container.startup_probe is None
    status["started"] = started
    if is_init and not container.is_sidecar:
        terminated = _state_of(status, "terminated")
        if terminated is not None and terminated.get("exitCode") == 0:
            status["ready"] = True
        return
    if not started:
        return
    if container_id in inputs.readiness:
        status["ready"] = running and inputs.readiness[container_id]
    else:
        status["ready"] = running and container.readiness_probe is None


# --------------------------------------------------------------------------------------------------- phase


def get_phase(pod: spec.Pod, statuses: Sequence[Mapping[str, Any]], *, pod_is_terminal: bool = False,
              pod_has_initialized: bool = False) -> str:
    """The pod phase from its container statuses (upstream `getPhase` with ContainerRestartRules on).

    Whether a stopped container will run again is `spec.container_should_restart` on its last exit code (its
    restartPolicyRules, its own restartPolicy, else the pod's), so the phase agrees with what the reconciler
    does; one whose termination says RestartingAllContainers (removed by a reset) runs again too. Pending
    while a regular init container has not succeeded or a container waits without having run;
    Failed when an init container failed and will not be restarted; Running while one runs; when all stopped:
    Running while one of them will be restarted, else Succeeded if all exited 0, else Failed; a terminal pod
    (being torn down) is Succeeded or Failed by its exit codes whatever the policy.
    """
    by_name = {s.get("name"): s for s in statuses}
    pending_init = pending_sidecars = failed_init_for_good = 0
    for container in pod.spec.init_containers:
        if container.is_sidecar:
            continue
        status = by_name.get(container.name)
        if status is None or _state_of(status, "running") is not None:
            pending_init += 1
        elif (exited := _state_of(status, "terminated")) is not None or (
                _state_of(status, "waiting") is not None and (exited := _last_terminated(status)) is not None):
            failed_init_for_good += _exit_code(exited) != 0 and not _restartable(container, pod, exited)
        else:
            pending_init += 1

    unknown = running = waiting = stopped = succeeded = 0
    for container in pod.spec.init_containers:
        if not container.is_sidecar:
            continue
        status = by_name.get(container.name)
        if status is None:
            unknown += 1
        elif _state_of(status, "running") is not None:
            pending_sidecars += status.get("started") is not True
            running += 1
        elif _state_of(status, "terminated") is not None:
            pass
        elif _state_of(status, "waiting") is not None:
            if _last_terminated(status) is None:
                pending_sidecars += 1
                waiting += 1
        else:
            pending_sidecars += 1
            unknown += 1

    stopped_for_good = 0
    for container in pod.spec.containers:
        status = by_name.get(container.name)
        if status is None:
            unknown += 1
        elif _state_of(status, "running") is not None:
            running += 1
        elif (terminated := _state_of(status, "terminated")) is not None:
            stopped += 1
            succeeded += terminated.get("exitCode") == 0
            stopped_for_good += not _restartable(container, pod, terminated)
        elif _state_of(status, "waiting") is not None:
            if (last := _last_terminated(status)) is not None:
                stopped += 1
                stopped_for_good += not _restartable(container, pod, last)
            else:
                waiting += 1
        else:
            unknown += 1

    if failed_init_for_good:
        return FAILED
    if pending_init or (pending_sidecars and not pod_has_initialized) or waiting:
        return PENDING
    if running and not unknown:
        return RUNNING
    if not running and stopped and not unknown:
        if pod_is_terminal and not spec.is_static(pod):
            return SUCCEEDED if stopped == succeeded else FAILED
        if stopped != stopped_for_good:
            return RUNNING  # at least one of them is restarting
        return SUCCEEDED if stopped == succeeded else FAILED
    return PENDING


def _exit_code(terminated: Mapping[str, Any]) -> int:
    """A terminated state's exitCode (0 when absent, as Go reads a missing int32)."""
    code = terminated.get("exitCode")
    return code if isinstance(code, int) and not isinstance(code, bool) else 0


# --------------------------------------------------------------------------------------------- conditions


def _condition(kind: str, ok: bool, reason: str = "", message: str = "") -> dict[str, Any]:
    result: dict[str, Any] = {"type": kind, "status": "True" if ok else "False"}
    if reason:
        result["reason"] = reason
    if message:
        result["message"] = message
    return result


def containers_ready_condition(pod: spec.Pod, statuses: Sequence[Mapping[str, Any]], phase: str) -> dict[str, Any]:
    """Upstream `GenerateContainersReadyCondition`: sidecars and regular containers all ready."""
    by_name = {s.get("name"): s for s in statuses}
    unknown: list[str] = []
    unready: list[str] = []
    for container in (*(c for c in pod.spec.init_containers if c.is_sidecar), *pod.spec.containers):
        status = by_name.get(container.name)
        if status is None:
            unknown.append(container.name)
        elif status.get("ready") is not True:
            unready.append(container.name)
    if (phase == SUCCEEDED and not unknown) or phase == FAILED:
        return _condition(CONTAINERS_READY, False, POD_FAILED if phase == FAILED else POD_COMPLETED)
    message = _containers_message(unknown, "unready", unready)
    if message:
        return _condition(CONTAINERS_READY, False, CONTAINERS_NOT_READY, message)
    return _condition(CONTAINERS_READY, True)


def _containers_message(unknown: Sequence[str], kind: str, names: Sequence[str]) -> str:
    """Upstream's "containers with unknown status: [a], containers with <kind> status: [b]"; empty when both are."""
    messages = []
    if unknown:
        messages.append(f"containers with unknown status: {gotext.go_string_slice(unknown)}")
    if names:
        messages.append(f"containers with {kind} status: {gotext.go_string_slice(names)}")
    return ", ".join(messages)


def ready_condition(pod: spec.Pod, conditions: Sequence[Mapping[str, Any]], statuses: Sequence[Mapping[str, Any]],
                    phase: str) -> dict[str, Any]:
    """Upstream `GeneratePodReadyCondition`: ContainersReady, and every readiness gate's condition True."""
    containers_ready = containers_ready_condition(pod, statuses, phase)
    if containers_ready["status"] != "True":
        return {**containers_ready, "type": READY}
    messages = []
    by_type = {c.get("type"): c for c in conditions}
    for gate in pod.spec.readiness_gates:
        found = by_type.get(gate)
        if found is None:
            messages.append(f'corresponding condition of pod readiness gate "{gate}" does not exist.')
        elif found.get("status") != "True":
            messages.append(f'the status of pod readiness gate "{gate}" is not "True", but {found.get("status")}')
    if messages:
        return _condition(READY, False, READINESS_GATES_NOT_READY, ", ".join(messages))
    return _condition(READY, True)


def _has_any_regular_container_started(pod: spec.Pod, statuses: Sequence[Mapping[str, Any]]) -> bool:
    """Upstream `HasAnyRegularContainerStarted`: a regular container status says running or terminated."""
    names = {c.name for c in pod.spec.containers}
    return any(s.get("name") in names and (_state_of(s, "running") is not None
                                           or _state_of(s, "terminated") is not None) for s in statuses)


def initialized_condition(pod: spec.Pod, statuses: Sequence[Mapping[str, Any]], phase: str,
                          previous_conditions: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """Upstream `GeneratePodInitializedCondition`: every init container done (sidecars: started). Once True
    it stays True while init containers re-run after RestartAllContainers (`previous_conditions`)."""
    by_name = {s.get("name"): s for s in statuses}
    unknown: list[str] = []
    incomplete: list[str] = []
    for container in pod.spec.init_containers:
        status = by_name.get(container.name)
        if status is None:
            unknown.append(container.name)
        elif container.is_sidecar and status.get("started") is not True:
            incomplete.append(container.name)
        elif not container.is_sidecar and status.get("ready") is not True:
            incomplete.append(container.name)
    if phase == SUCCEEDED and not unknown:
        return _condition(INITIALIZED, True, POD_COMPLETED)
    if _has_any_regular_container_started(pod, statuses):
        return _condition(INITIALIZED, True)
    message = _containers_message(unknown, "incomplete", incomplete)
    if message:
        if any(c.get("type") == INITIALIZED and c.get("status") == "True" for c in previous_conditions):
            return _condition(INITIALIZED, True)
        return _condition(INITIALIZED, False, CONTAINERS_NOT_INITIALIZED, message)
    return _condition(INITIALIZED, True)


def all_containers_restarting_condition(pod: spec.Pod, runtime: podstate.RuntimePodStatus,
                                        previous: Mapping[str, Any], phase: str) -> dict[str, Any]:
    """Upstream `GenerateAllContainersRestartingCondition`: True from a RestartAllContainers exit until every
    init and regular container is removed from the runtime; False on a terminal pod."""
    if phase == SUCCEEDED:
        return _condition(ALL_CONTAINERS_RESTARTING, False, POD_COMPLETED)
    if phase == FAILED:
        return _condition(ALL_CONTAINERS_RESTARTING, False, POD_FAILED)
    if not reconciler.should_all_containers_restart(pod, runtime, previous) \
            or reconciler.all_containers_restart_cleaned_up(pod, runtime):
        return _condition(ALL_CONTAINERS_RESTARTING, False)
    return _condition(ALL_CONTAINERS_RESTARTING, True, RESTART_ALL_CONTAINERS_STARTED,
                      MESSAGE_RESTART_ALL_CONTAINERS_STARTED)


def all_containers_restarting(status: Mapping[str, Any]) -> bool:
    """Whether a status `compute_pod_status` made has AllContainersRestarting True: the reconciler's
    `restart_all_containers` (upstream reads it off the status generated before SyncPod)."""
    return any(c.get("type") == ALL_CONTAINERS_RESTARTING and c.get("status") == "True"
               for c in status.get("conditions") or ())


def ready_to_start_containers_condition(pod: spec.Pod, runtime: podstate.RuntimePodStatus) -> dict[str, Any]:
    """Upstream `GeneratePodReadyToStartContainersCondition`: a ready sandbox with networking exists."""
    return _condition(POD_READY_TO_START_CONTAINERS, not reconciler.sandbox_change(pod, runtime).create)


# ----------------------------------------------------------------------------------------------------- IPs


# ---------------------------------------------------------------------------------------------- the status


def _truncate(message: str, limit: int) -> str:
    data = message.encode()
    return message if len(data) <= limit else data[:limit].decode(errors="ignore")


def _normalize_messages(pod: spec.Pod, status: dict[str, Any]) -> None:
    """Upstream `normalizeStatus`: terminated messages share 12 KiB among the pod's containers."""
    count = len(pod.spec.containers) + len(pod.spec.init_containers) + len(pod.spec.ephemeral_containers)
    limit = MAX_POD_TERMINATION_MESSAGE_LENGTH // count if count else MAX_POD_TERMINATION_MESSAGE_LENGTH
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        for item in status.get(key) or ():
            for state_key in ("state", "lastState"):
                terminated = (item.get(state_key) or {}).get("terminated")
                if isinstance(terminated, dict) and isinstance(terminated.get("message"), str):
                    terminated["message"] = _truncate(terminated["message"], limit)


def _previous_conditions(previous: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in previous.get("conditions") or () if isinstance(c, Mapping)]


def compute_pod_status(pod: spec.Pod,
                       runtime: podstate.RuntimePodStatus,
                       *,
                       previous: Mapping[str, Any],
                       now: datetime.datetime,
                       waiting: Mapping[str, Waiting] | None = None,
                       termination_messages: Mapping[str, str] | None = None,
                       host_ip: str = "",
                       host_ips: Sequence[str] = (),
                       readiness: Mapping[str, bool] | None = None,
                       startup: Mapping[str, bool] | None = None,
                       pod_is_terminal: bool = False,
                       generation: int | None = None,
                       runtime_name: str = "containerd",
                       actuated: Mapping[str, spec.Resources] | None = None,
                       resize_conditions: Sequence[Mapping[str, Any]] = (),
                       pod_cgroup: Any = None) -> dict[str, Any]:
    """The ``status`` to write for the pod (upstream `generateAPIPodStatus` + the status manager).

    `previous` is the Pod's ``status`` from the API ({} if none). `waiting` maps container names to the
    failure of the last start attempt; `termination_messages` maps container ids to what the caller read
    from their termination-log files; `readiness` / `startup` map running container ids to probe results
    (a container without a result is ready/started unless it has that probe). `host_ips` are the node's
    IPs, primary first (`host_ip` if empty). `pod_is_terminal` is upstream's podIsTerminal: the pod is
    being torn down and its containers will not restart, so stopped containers decide Succeeded/Failed.
    `generation` is metadata.generation, written as observedGeneration when given.

    In-place resize: `pod` is the *allocated* pod; `actuated` maps container names to the resources last given
    to the runtime; `resize_conditions` are the PodResizePending / PodResizeInProgress conditions the agent
    holds (written as they are); `pod_cgroup` is the pod cgroup's settings read back (`cm.ResourceConfig`, for
    the pod-level ``status.resources`` of a running pod).
    """
    inputs = _Inputs(pod=pod, runtime=runtime, waiting=waiting or {}, termination_messages=termination_messages or {},
                     readiness=readiness or {}, startup=startup or {}, runtime_name=runtime_name,
                     pod_restarting=reconciler.should_all_containers_restart(pod, runtime, previous),
                     actuated=actuated or {})
    node_ips = list(host_ips) or ([host_ip] if host_ip else [])
    status: dict[str, Any] = {}

    container_statuses = _container_statuses(inputs, pod.spec.containers, previous.get("containerStatuses") or (),
                                             is_init=False)
    init_statuses = _container_statuses(inputs, pod.spec.init_containers,
                                        previous.get("initContainerStatuses") or (), is_init=True)
    ephemeral_statuses = _container_statuses(inputs, pod.spec.ephemeral_containers,
                                             previous.get("ephemeralContainerStatuses") or (), is_init=False,
                                             ephemeral=True)
    all_statuses = [*container_statuses, *init_statuses]

    # Upstream HasAnyActiveRegularContainerStarted: a regular container exists in the current sandbox.
    regular = {c.name for c in pod.spec.containers}
    active = any(c.name in regular for c in runtime.active_containers())
    phase = get_phase(pod, all_statuses, pod_is_terminal=pod_is_terminal, pod_has_initialized=active)
    previous_phase = previous.get("phase")
    if previous_phase in TERMINAL_PHASES:
        phase = previous_phase  # Succeeded and Failed are final
    status["phase"] = phase
    if phase == previous_phase:
        for key in ("reason", "message"):
            if previous.get(key):
                status[key] = previous[key]
    if previous_phase not in TERMINAL_PHASES and \
            deadline.past_active_deadline(pod, deadline.start_time(previous), now):
        # Upstream activeDeadlineHandler.ShouldEvict: the pod is terminal, Failed with DeadlineExceeded.
        phase = status["phase"] = FAILED
        status.update(reason=deadline.REASON, message=deadline.MESSAGE)
    if phase in TERMINAL_PHASES and previous_phase not in TERMINAL_PHASES and runtime.running_containers():
        # Upstream mergePodStatus: a pod never turns terminal while containers may still run (the agent kills
        # them first); until then the phase, reason and message stay as they were.
        phase = status["phase"] = previous_phase or PENDING
        for key in ("reason", "message"):
            status.pop(key, None)
            if previous.get(key):
                status[key] = previous[key]

    conditions = [dict(c) for c in _previous_conditions(previous) if c.get("type") not in KUBELET_CONDITIONS]
    owned = [ready_to_start_containers_condition(pod, runtime),
             initialized_condition(pod, [*init_statuses, *container_statuses], phase, _previous_conditions(previous))]
    owned.append(ready_condition(pod, [*conditions, *owned], [*init_statuses, *container_statuses], phase))
    owned.append(containers_ready_condition(pod, [*init_statuses, *container_statuses], phase))
    owned.append(_condition(POD_SCHEDULED, True))
    if spec.all_containers_could_restart(pod.spec):
        owned.append(all_containers_restarting_condition(pod, runtime, previous, phase))
    if phase in TERMINAL_PHASES:  # mergePodStatus: a terminal pod is never ready
        reason = POD_FAILED if phase == FAILED else POD_COMPLETED
        owned = [_condition(c["type"], False, reason)
                 if c["type"] in (READY, CONTAINERS_READY) and c["status"] == "True" else c for c in owned]
    status["conditions"] = [*conditions, *_stamp(owned, previous, now, generation),
                            *(dict(c) for c in resize_conditions if phase not in TERMINAL_PHASES)]

    if node_ips:
        status["hostIP"] = node_ips[0]
        status["hostIPs"] = [{"ip": ip} for ip in node_ips[:2]]
    else:
        for key in ("hostIP", "hostIPs"):
            if key in previous:
                status[key] = copy.deepcopy(previous[key])

    pod_ips = sandbox_config.effective_pod_ips(pod, runtime.ips, node_ips)
    if pod_ips:
        status["podIP"] = pod_ips[0]
        status["podIPs"] = [{"ip": ip} for ip in pod_ips]
    elif pod.is_deleting or pod_is_terminal or phase in TERMINAL_PHASES:
        # The sandbox is gone once the pod stopped; keep the IPs it had (upstream preserveDataFromBeforeStopping).
        for key in ("podIP", "podIPs"):
            if key in previous:
                status[key] = copy.deepcopy(previous[key])

    status["startTime"] = previous.get("startTime") or timestamp(now)
    if init_statuses:
        status["initContainerStatuses"] = init_statuses
    status["containerStatuses"] = container_statuses
    if ephemeral_statuses:
        status["ephemeralContainerStatuses"] = ephemeral_statuses
    status["qosClass"] = previous.get("qosClass") or qos.qos_class(pod)
    # InPlacePodLevelResourcesVerticalScaling (beta, on): every pod's pod-level resources and allocation.
    status["resources"] = resize.pod_status_resources(pod, running=previous.get("phase") == RUNNING,
                                                      cgroup=pod_cgroup, previous=previous)
    allocated_resources = resize.pod_allocated_resources(pod)
    if allocated_resources:
        status["allocatedResources"] = allocated_resources
    if generation is not None:
        status["observedGeneration"] = generation
    _normalize_messages(pod, status)
    return status


def _stamp(conditions: Iterable[dict[str, Any]], previous: Mapping[str, Any], now: datetime.datetime,
           generation: int | None) -> list[dict[str, Any]]:
    """lastTransitionTime kept while the status is unchanged, else now (upstream `updateLastTransitionTime`)."""
    old = {c.get("type"): c for c in _previous_conditions(previous)}
    result = []
    for condition in conditions:
        before = old.get(condition["type"])
        stamped: dict[str, Any] = {"type": condition["type"], "status": condition["status"]}
        if generation is not None and condition["type"] != ALL_CONTAINERS_RESTARTING:  # upstream sets none on it
            stamped["observedGeneration"] = generation
        stamped["lastProbeTime"] = None
        if before is not None and before.get("status") == condition["status"] and before.get("lastTransitionTime"):
            stamped["lastTransitionTime"] = before["lastTransitionTime"]
        else:
            stamped["lastTransitionTime"] = timestamp(now)
        stamped.update({k: v for k, v in condition.items() if k in ("reason", "message")})
        result.append(stamped)
    return result


def _has_pod_initialized(pod: spec.Pod, previous: Mapping[str, Any]) -> bool:
    """Upstream `hasPodInitialized` on the API status: evidence that a regular container ever started."""
    if not pod.spec.init_containers:
        return True
    for status in previous.get("containerStatuses") or ():
        if _last_terminated(status) is not None or _state_of(status, "waiting") is None:
            return True
    inits = previous.get("initContainerStatuses") or ()
    if inits:
        last = inits[-1]
        for terminated in (_last_terminated(last), _state_of(last, "terminated")):
            if terminated is not None and terminated.get("exitCode") == 0:
                return True
    return False


def terminal_status(pod: spec.Pod, runtime: podstate.RuntimePodStatus, *, previous: Mapping[str, Any],
                    now: datetime.datetime, **kwargs: Any) -> dict[str, Any]:
    """The final status once every container of the pod stopped (upstream `SyncTerminatedPod` +
    `TerminatePod`).

    `compute_pod_status` with `pod_is_terminal`, then: regular containers that are not terminated become
    ``ContainerStatusUnknown`` (exit 137) when the pod had initialised, so do init containers up to the last
    one that started; a phase still Pending or Running becomes Failed; Ready and ContainersReady are False.
    Takes the same keyword arguments as `compute_pod_status`.
    """
    status = compute_pod_status(pod, runtime, previous=previous, now=now, pod_is_terminal=True, **kwargs)
    unknown = {"terminated": {"exitCode": 137, "reason": CONTAINER_STATUS_UNKNOWN,
                              "message": MESSAGE_UNKNOWN_TERMINATED, "startedAt": None, "finishedAt": None}}
    if _has_pod_initialized(pod, previous):
        for item in status["containerStatuses"]:
            if _state_of(item, "terminated") is None:
                item["state"] = copy.deepcopy(unknown)
    inits = status.get("initContainerStatuses") or []
    started = [i for i, s in enumerate(inits) if _state_of(s, "waiting") is None or _last_terminated(s) is not None]
    for item in inits[:max(started, default=0) + 1]:
        if _state_of(item, "terminated") is None:
            item["state"] = copy.deepcopy(unknown)
    if status["phase"] not in TERMINAL_PHASES:
        status["phase"] = FAILED
        status.pop("reason", None)
        status.pop("message", None)
    reason = POD_FAILED if status["phase"] == FAILED else POD_COMPLETED
    for condition in status["conditions"]:
        if condition.get("type") in (READY, CONTAINERS_READY) and condition.get("status") == "True":
            condition.update(status="False", reason=reason, lastTransitionTime=timestamp(now))
            condition.pop("message", None)
    return status


# ------------------------------------------------------------------------------------------------ writing


def _conditions_by_type(value: Any) -> dict[Any, Any]:
    return {c.get("type"): c for c in value or () if isinstance(c, Mapping)}


def status_changed(previous: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether writing `new` would change the Pod's status: any field the kubelet owns differs.

    Conditions are compared by type (their order is not significant); every other field exactly.
    """
    for key in OWNED_FIELDS:
        if key == "conditions":
            if _conditions_by_type(previous.get(key)) != _conditions_by_type(new.get(key)):
                return True
        elif previous.get(key) != new.get(key):
            return True
    return False


# Lists that strategic merge patches merge by a key (the rest of the status lists are atomic).
MERGE_KEYS = {"conditions": "type", "podIPs": "ip", "hostIPs": "ip"}
RESIZE_CONDITIONS = ("PodResizePending", "PodResizeInProgress")


def rejected_status(previous: Mapping[str, Any], reason: str, message: str) -> dict[str, Any]:
    """A pod admission refused: phase Failed with the reason and message, final (upstream rejectPod). The rest of
    the status stays as it was, so the patch carries exactly these three fields."""
    return {**previous, "phase": FAILED, "reason": reason, "message": message}


def status_patch(previous: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The smallest strategic merge patch for ``pods/status`` (``{"status": ...}``), or {} when nothing changed.

    As upstream's status manager: ``conditions`` merge by type, so only the changed ones are sent and
    conditions other writers own are never removed; ``podIPs``/``hostIPs`` merge by ip; container status
    lists are atomic and sent whole. Owned fields set before but not now are sent as null so the API drops
    them (a podIP after the sandbox is gone, a reason of an older phase).
    """
    body: dict[str, Any] = {}
    for key in OWNED_FIELDS:
        old, value = previous.get(key), new.get(key)
        if key in previous and key not in new:
            body[key] = None
        elif key in MERGE_KEYS and key in new:
            merge_key = MERGE_KEYS[key]
            before = {item.get(merge_key): item for item in old or []}
            changed = [_item_patch(before.get(item.get(merge_key)), item) for item in value or []
                       if before.get(item.get(merge_key)) != item]
            kept = {item.get(merge_key) for item in value or []}
            if key == "conditions":
                # The resize conditions are the kubelet's: one it cleared must go from the API object too.
                changed += [{"type": kind, "$patch": "delete"} for kind in before
                            if kind in RESIZE_CONDITIONS and kind not in kept]
            else:
                # podIPs/hostIPs are the kubelet's alone: an IP gone (a sandbox made again with a new one) is
                # deleted, as upstream's two-way merge patch does; merged in, the old IP would stay first and the
                # apiserver refuses every later patch ("podIPs[0] must be equal to podIP")
                changed += [{merge_key: ip, "$patch": "delete"} for ip in before if ip not in kept]
            if changed:
                body[key] = changed
        elif key in new and old != value:
            body[key] = copy.deepcopy(value)
    return {"status": body} if body else {}


def _item_patch(before: Mapping[str, Any] | None, item: Mapping[str, Any]) -> dict[str, Any]:
    """A keyed list item as the patch sends it: whole, and a field it had before but has no more as null. The
    strategic merge merges the item into the API's by its key, so a field left out would stay (a Ready condition
    turned True kept its old ``ContainersNotReady`` reason and message, and was patched again at every resync);
    upstream's CreateTwoWayMergePatch sends such a field as null too."""
    sent = copy.deepcopy(dict(item))
    for key in before or {}:
        sent.setdefault(key, None)
    return sent


def apply_status_patch(previous: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """The status the apiserver would hold after `patch` (a `status_patch` answer) on `previous`: the status
    manager's cache while the apiserver cannot take the patch. Keyed lists merge as the strategic merge does
    (an item's fields merge into those of the item of its key, ``$patch: delete`` removes it, the others stay);
    other fields are replaced, and removed when null."""
    out = copy.deepcopy(dict(previous))
    for key, value in (patch.get("status") or {}).items():
        if value is None:
            out.pop(key, None)
        elif key in MERGE_KEYS:
            merge_key = MERGE_KEYS[key]
            items = {item.get(merge_key): item for item in out.get(key) or []}
            for item in value:
                if item.get("$patch") == "delete":
                    items.pop(item.get(merge_key), None)
                else:
                    merged = {**items.get(item.get(merge_key), {}), **copy.deepcopy(item)}
                    items[item.get(merge_key)] = {k: v for k, v in merged.items() if v is not None}
            out[key] = list(items.values())
        else:
            out[key] = copy.deepcopy(value)
    return out


__all__ = [
    "ALL_CONTAINERS_RESTARTING",
    "FAILED",
    "PENDING",
    "RUNNING",
    "SUCCEEDED",
    "all_containers_restarting",
    "all_containers_restarting_condition",
    "apply_status_patch",
    "compute_pod_status",
    "containers_ready_condition",
    "get_phase",
    "initialized_condition",
    "ready_condition",
    "ready_to_start_containers_condition",
    "rejected_status",
    "status_changed",
    "status_patch",
    "terminal_status",
    "timestamp",
]
