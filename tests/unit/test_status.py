"""kopflet.status.generate: the pod status as upstream generateAPIPodStatus + the status manager would write it.

One base pod (containers ``web`` and ``log``; optionally init containers ``init1``/``init2``) and one base
runtime where everything runs; cases edit either and compare whole status dicts where practical.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
from typing import Any

import pytest

from cri_client.types import NamespaceMode
from kopflet.api.spec import Pod, pod_from_body
from kopflet.container.podstate import ContainerInfo, RuntimePodStatus, SandboxInfo, State
from kopflet.container.sync_result import Waiting
from kopflet.status import generate as pod_status
from kopflet.status.generate import (
    compute_pod_status,
    get_phase,
    status_changed,
    status_patch,
    terminal_status,
)

S = 1_000_000_000
T0 = 1_717_243_000  # seconds: when the containers started
NOW = datetime.datetime.fromtimestamp(T0 + 600, tz=datetime.UTC)
LATER = NOW + datetime.timedelta(minutes=5)
HOST_IP = "192.168.1.10"
POD_IP = "10.244.0.5"
IMAGES = {"web": "docker.io/library/busybox:latest", "log": "docker.io/library/alpine:3.20",
          "init1": "docker.io/library/busybox:latest", "init2": "docker.io/library/busybox:latest",
          "proxy": "docker.io/library/busybox:latest", "debugger": "docker.io/library/busybox:latest"}


def ts(seconds: float) -> str:
    return pod_status.timestamp(datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC))


def make_pod(init: bool = False, policy: str = "Always", deleting: bool = False, **spec: Any) -> Pod:
    body: dict[str, Any] = {
        "metadata": {"name": "foo", "namespace": "ns", "uid": "uid-1"},
        "spec": {"restartPolicy": policy, "containers": [{"name": "web", "image": "busybox"},
                                                          {"name": "log", "image": "alpine:3.20"}], **spec},
    }
    if init:
        body["spec"]["initContainers"] = [{"name": n, "image": "busybox"} for n in ("init1", "init2")]
    if deleting:
        body["metadata"]["deletionTimestamp"] = "2024-06-01T12:00:00Z"
    return pod_from_body(body)


def info(name: str, cid: str, state: State, *, started: float = T0, finished: float = 0, code: int = 0,
         restart: int = 0, reason: str = "", message: str = "", created: float | None = None) -> ContainerInfo:
    return ContainerInfo(id=cid, name=name, state=state, created_at=int((created or started - 1) * S),
                         started_at=int(started * S) if state is not State.CREATED else 0,
                         finished_at=int(finished * S), exit_code=code, image=IMAGES[name],
                         image_ref=IMAGES[name].rsplit(":", 1)[0] + f"@sha256:{name}", restart_count=restart,
                         reason=reason, message=message)


def exited(name: str, cid: str, code: int, *, started: float = T0, finished: float = T0 + 60, restart: int = 0,
           **kwargs: Any) -> ContainerInfo:
    return info(name, cid, State.EXITED, started=started, finished=finished, code=code, restart=restart,
                reason=kwargs.pop("reason", "Completed" if code == 0 else "Error"), **kwargs)


SANDBOX = SandboxInfo(id="sb1", attempt=0, ready=True, ip=POD_IP, created_at=(T0 - 10) * S)


def runtime(*containers: ContainerInfo, sandbox: SandboxInfo | None = SANDBOX) -> RuntimePodStatus:
    ordered = sorted(containers, key=lambda c: c.created_at, reverse=True)  # newest first, as podstate keeps them
    return RuntimePodStatus(uid="uid-1", name="foo", namespace="ns", sandboxes=(sandbox,) if sandbox else (),
                            containers=tuple(ordered))


BASE_RUNTIME = runtime(info("web", "c-web", State.RUNNING), info("log", "c-log", State.RUNNING, started=T0 + 1))


def compute(pod: Pod, rt: RuntimePodStatus, previous: dict[str, Any] | None = None, now: datetime.datetime = NOW,
            **kwargs: Any) -> dict[str, Any]:
    return compute_pod_status(pod, rt, previous=previous or {}, now=now, host_ip=HOST_IP, **kwargs)


# ------------------------------------------------------------------------------------------ expected parts


def cond(kind: str, ok: bool, at: datetime.datetime = NOW, reason: str = "", message: str = "") -> dict[str, Any]:
    result: dict[str, Any] = {"type": kind, "status": "True" if ok else "False", "lastProbeTime": None,
                              "lastTransitionTime": pod_status.timestamp(at)}
    if reason:
        result["reason"] = reason
    if message:
        result["message"] = message
    return result


def conditions(ready_to_start: bool = True, initialized: bool = True, ready: bool = True, at: datetime.datetime = NOW,
               reason: str = "", message: str = "", init_reason: str = "", init_message: str = "",
               ) -> list[dict[str, Any]]:
    """The five kubelet conditions in upstream order; Ready and ContainersReady share reason and message."""
    return [cond("PodReadyToStartContainers", ready_to_start, at),
            cond("Initialized", initialized, at, init_reason, init_message),
            cond("Ready", ready, at, reason, message),
            cond("ContainersReady", ready, at, reason, message),
            cond("PodScheduled", True, at)]


def running(name: str, cid: str, started: float = T0, *, restart: int = 0, ready: bool = True,
            last: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "image": IMAGES[name], "imageID": IMAGES[name].rsplit(":", 1)[0] + f"@sha256:{name}",
            "containerID": f"containerd://{cid}", "restartCount": restart, "ready": ready, "started": True,
            "lastState": last or {}, "state": {"running": {"startedAt": ts(started)}}, "resources": {}}


def terminated(cid: str, code: int, started: float = T0, finished: float = T0 + 60, reason: str = "",
               message: str = "") -> dict[str, Any]:
    result: dict[str, Any] = {"exitCode": code, "reason": reason or ("Completed" if code == 0 else "Error")}
    if message:
        result["message"] = message
    result.update(startedAt=ts(started), finishedAt=ts(finished), containerID=f"containerd://{cid}")
    return {"terminated": result}


def stopped(name: str, cid: str, code: int, *, restart: int = 0, ready: bool = False, **kwargs: Any) -> dict[str, Any]:
    result = running(name, cid, restart=restart, ready=ready)
    result.update(state=terminated(cid, code, **kwargs), started=False)
    return result


def waiting(name: str, reason: str, message: str = "", *, restart: int = 0,
            last: dict[str, Any] | None = None) -> dict[str, Any]:
    state: dict[str, Any] = {"reason": reason}
    if message:
        state["message"] = message
    return {"name": name, "image": {"web": "busybox", "log": "alpine:3.20"}.get(name, "busybox"), "imageID": "",
            "state": {"waiting": state}, "lastState": last or {}, "ready": False, "restartCount": restart,
            "started": False}


def status(phase: str, container_statuses: list[dict[str, Any]], conds: list[dict[str, Any]], *,
           init_statuses: list[dict[str, Any]] | None = None, pod_ip: str | None = POD_IP,
           qos: str = "BestEffort", start: datetime.datetime = NOW) -> dict[str, Any]:
    result: dict[str, Any] = {"phase": phase, "conditions": conds, "hostIP": HOST_IP, "hostIPs": [{"ip": HOST_IP}]}
    if pod_ip:
        result.update(podIP=pod_ip, podIPs=[{"ip": pod_ip}])
    result["startTime"] = pod_status.timestamp(start)
    if init_statuses is not None:
        result["initContainerStatuses"] = init_statuses
    # Every pod's pod-level status.resources (InPlacePodLevelResourcesVerticalScaling): these pods set none.
    result.update(containerStatuses=container_statuses, qosClass=qos, resources={})
    return result


RUNNING_STATUS = status("Running", [running("log", "c-log", T0 + 1), running("web", "c-web")], conditions())


# ------------------------------------------------------------------------------------------------ the table

UNREADY = "containers with unready status: [{}]"
CRASH_MESSAGE = "back-off 20s restarting failed container=web pod=foo_ns(uid-1)"
PULL_MESSAGE = 'Failed to pull image "busybox": not found'
INIT_DONE = (exited("init1", "c-i1", 0, started=T0 - 30, finished=T0 - 20, created=T0 - 31),
             exited("init2", "c-i2", 0, started=T0 - 19, finished=T0 - 10, created=T0 - 20))


@dataclasses.dataclass
class Case:
    name: str
    pod: Pod
    runtime: RuntimePodStatus
    expected: dict[str, Any]
    previous: dict[str, Any] = dataclasses.field(default_factory=dict)
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)


CASES = [
    Case("running pod is Ready; statuses sorted by name", make_pod(), BASE_RUNTIME, RUNNING_STATUS),
    Case("readiness probe without a result: not ready",
         make_pod(containers=[{"name": "web", "image": "busybox", "readinessProbe": {"exec": {"command": ["true"]}}},
                              {"name": "log", "image": "alpine:3.20"}]),
         BASE_RUNTIME,
         status("Running", [running("log", "c-log", T0 + 1), running("web", "c-web", ready=False)],
                conditions(ready=False, reason="ContainersNotReady", message=UNREADY.format("web")))),
    Case("readiness results by container id", make_pod(), BASE_RUNTIME,
         status("Running", [running("log", "c-log", T0 + 1, ready=False), running("web", "c-web")],
                conditions(ready=False, reason="ContainersNotReady", message=UNREADY.format("log"))),
         kwargs={"readiness": {"c-log": False, "c-web": True}}),
    Case("no sandbox yet: ContainerCreating", make_pod(), runtime(sandbox=None),
         status("Pending", [waiting("log", "ContainerCreating"), waiting("web", "ContainerCreating")],
                conditions(ready_to_start=False, ready=False, reason="ContainersNotReady",
                           message=UNREADY.format("web log")), pod_ip=None)),
    Case("init container running: PodInitializing, Initialized False", make_pod(init=True),
         runtime(info("init1", "c-i1", State.RUNNING, started=T0 - 30)),
         status("Pending", [waiting("log", "PodInitializing"), waiting("web", "PodInitializing")],
                conditions(initialized=False, ready=False, reason="ContainersNotReady",
                           message=UNREADY.format("web log"), init_reason="ContainersNotInitialized",
                           init_message="containers with incomplete status: [init1 init2]"),
                init_statuses=[running("init1", "c-i1", T0 - 30, ready=False), waiting("init2", "PodInitializing")])),
    Case("init containers done, containers running: Initialized True", make_pod(init=True),
         runtime(*INIT_DONE, info("web", "c-web", State.RUNNING), info("log", "c-log", State.RUNNING, started=T0 + 1)),
         status("Running", [running("log", "c-log", T0 + 1), running("web", "c-web")], conditions(),
                init_statuses=[stopped("init1", "c-i1", 0, ready=True, started=T0 - 30, finished=T0 - 20),
                               stopped("init2", "c-i2", 0, ready=True, started=T0 - 19, finished=T0 - 10)])),
    Case("init containers gone from the runtime once regular containers exist: assumed Completed", make_pod(init=True),
         BASE_RUNTIME,
         status("Running", [running("log", "c-log", T0 + 1), running("web", "c-web")], conditions(),
                init_statuses=[
                    {**waiting(n, "PodInitializing"), "ready": True,
                     "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                              "message": pod_status.MESSAGE_INIT_ASSUMED_DONE,
                                              "startedAt": None, "finishedAt": None}}} for n in ("init1", "init2")])),
    Case("Succeeded: all exited 0 under Never", make_pod(policy="Never"),
         runtime(exited("web", "c-web", 0), exited("log", "c-log", 0, finished=T0 + 61)),
         status("Succeeded", [stopped("log", "c-log", 0, finished=T0 + 61), stopped("web", "c-web", 0)],
                conditions(init_reason="PodCompleted", ready=False, reason="PodCompleted"))),
    Case("Succeeded: all exited 0 under OnFailure", make_pod(policy="OnFailure"),
         runtime(exited("web", "c-web", 0), exited("log", "c-log", 0)),
         status("Succeeded", [stopped("log", "c-log", 0), stopped("web", "c-web", 0)],
                conditions(init_reason="PodCompleted", ready=False, reason="PodCompleted"))),
    Case("Failed: exit 1 under Never", make_pod(policy="Never"),
         runtime(exited("web", "c-web", 1), exited("log", "c-log", 0)),
         status("Failed", [stopped("log", "c-log", 0), stopped("web", "c-web", 1)],
                conditions(ready=False, reason="PodFailed"))),
    Case("OnFailure with a failure is Running (restarting)", make_pod(policy="OnFailure"),
         runtime(exited("web", "c-web", 1), exited("log", "c-log", 0)),
         status("Running", [stopped("log", "c-log", 0), stopped("web", "c-web", 1)],
                conditions(ready=False, reason="ContainersNotReady", message=UNREADY.format("web log")))),
    Case("Failed: failed init container under Never", make_pod(init=True, policy="Never"),
         runtime(exited("init1", "c-i1", 2, started=T0 - 30, finished=T0 - 20)),
         status("Failed", [waiting("log", "PodInitializing"), waiting("web", "PodInitializing")],
                conditions(initialized=False, ready=False, reason="PodFailed", init_reason="ContainersNotInitialized",
                           init_message="containers with incomplete status: [init1 init2]"),
                init_statuses=[stopped("init1", "c-i1", 2, started=T0 - 30, finished=T0 - 20),
                               waiting("init2", "PodInitializing")])),
    Case("failed init container under Always: Pending, waiting with lastState", make_pod(init=True),
         runtime(exited("init1", "c-i1", 2, started=T0 - 30, finished=T0 - 20)),
         status("Pending", [waiting("log", "PodInitializing"), waiting("web", "PodInitializing")],
                conditions(initialized=False, ready=False, reason="ContainersNotReady",
                           message=UNREADY.format("web log"), init_reason="ContainersNotInitialized",
                           init_message="containers with incomplete status: [init1 init2]"),
                init_statuses=[
                    {**stopped("init1", "c-i1", 0), "state": {"waiting": {"reason": "CrashLoopBackOff",
                                                                          "message": "back-off 10s"}},
                     "lastState": terminated("c-i1", 2, started=T0 - 30, finished=T0 - 20)},
                    waiting("init2", "PodInitializing")]),
         kwargs={"waiting": {"init1": Waiting("CrashLoopBackOff", "back-off 10s")}}),
    Case("CrashLoopBackOff: waiting with lastState and restartCount", make_pod(),
         runtime(exited("web", "c-web-2", 1, restart=2, started=T0 + 100, finished=T0 + 110, created=T0 + 99),
                 exited("web", "c-web-1", 1, restart=1, started=T0 + 50, finished=T0 + 60, created=T0 + 49),
                 info("log", "c-log", State.RUNNING, started=T0 + 1)),
         status("Running", [running("log", "c-log", T0 + 1),
                            {**stopped("web", "c-web-2", 1, restart=2),
                             "state": {"waiting": {"reason": "CrashLoopBackOff", "message": CRASH_MESSAGE}},
                             "lastState": terminated("c-web-2", 1, started=T0 + 100, finished=T0 + 110)}],
                conditions(ready=False, reason="ContainersNotReady", message=UNREADY.format("web"))),
         kwargs={"waiting": {"web": Waiting("CrashLoopBackOff", CRASH_MESSAGE)}}),
    Case("restarted container: lastState is the previous instance", make_pod(),
         runtime(info("web", "c-web-2", State.RUNNING, restart=1, started=T0 + 100),
                 exited("web", "c-web-1", 137, started=T0, finished=T0 + 90, reason="OOMKilled"),
                 info("log", "c-log", State.RUNNING, started=T0 + 1)),
         status("Running", [running("log", "c-log", T0 + 1),
                            running("web", "c-web-2", T0 + 100, restart=1,
                                    last=terminated("c-web-1", 137, finished=T0 + 90, reason="OOMKilled"))],
                conditions())),
    Case("ErrImagePull with its message", make_pod(),
         runtime(info("log", "c-log", State.RUNNING, started=T0 + 1)),
         status("Pending", [running("log", "c-log", T0 + 1), waiting("web", "ErrImagePull", PULL_MESSAGE)],
                conditions(ready=False, reason="ContainersNotReady", message=UNREADY.format("web"))),
         kwargs={"waiting": {"web": Waiting("ErrImagePull", PULL_MESSAGE)}}),
    Case("created, not started: waiting without reason", make_pod(),
         runtime(info("web", "c-web", State.CREATED), info("log", "c-log", State.RUNNING, started=T0 + 1)),
         status("Pending", [running("log", "c-log", T0 + 1),
                            {**stopped("web", "c-web", 0), "state": {"waiting": {}}}],
                conditions(ready=False, reason="ContainersNotReady", message=UNREADY.format("web")))),
    Case("termination message appended to the runtime's", make_pod(policy="Never"),
         runtime(exited("web", "c-web", 1, message="exit status 1"), exited("log", "c-log", 0)),
         status("Failed", [stopped("log", "c-log", 0, message="bye"),
                           stopped("web", "c-web", 1, message="exit status 1: oops")],
                conditions(ready=False, reason="PodFailed")),
         kwargs={"termination_messages": {"c-web": "oops", "c-log": "bye"}}),
    Case("terminal phase stays terminal", make_pod(), BASE_RUNTIME,
         {**RUNNING_STATUS, "phase": "Succeeded", "reason": "Done",
          "conditions": conditions(init_reason="PodCompleted", ready=False, reason="PodCompleted")},
         previous={"phase": "Succeeded", "reason": "Done"}),
    Case("host network pod gets the node IP", make_pod(hostNetwork=True),
         runtime(info("web", "c-web", State.RUNNING), info("log", "c-log", State.RUNNING, started=T0 + 1),
                 sandbox=dataclasses.replace(SANDBOX, ip="", network_mode=NamespaceMode.NODE)),
         {**RUNNING_STATUS, "podIP": HOST_IP, "podIPs": [{"ip": HOST_IP}]}),
    Case("dual stack: the node's family first", make_pod(),
         runtime(info("web", "c-web", State.RUNNING), info("log", "c-log", State.RUNNING, started=T0 + 1),
                 sandbox=dataclasses.replace(SANDBOX, ip="fd00::5", additional_ips=("10.244.0.5", "10.244.0.6"))),
         {**RUNNING_STATUS, "podIPs": [{"ip": POD_IP}, {"ip": "fd00::5"}]}),
    Case("qosClass and observedGeneration", make_pod(), BASE_RUNTIME,
         {**RUNNING_STATUS, "qosClass": "Guaranteed", "observedGeneration": 3,
          "conditions": [{**c, "observedGeneration": 3} for c in conditions()]},
         previous={"qosClass": "Guaranteed"}, kwargs={"generation": 3}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_compute_pod_status(case: Case) -> None:
    assert compute(case.pod, case.runtime, case.previous, **case.kwargs) == case.expected


# --------------------------------------------------------------------------------------- history rules


def test_last_transition_time_and_start_time_are_kept_while_nothing_flips() -> None:
    first = compute(make_pod(), BASE_RUNTIME)
    again = compute(make_pod(), BASE_RUNTIME, previous=first, now=LATER)
    assert again == first
    assert not status_changed(first, again)
    assert status_patch(first, again) == {}


def test_last_transition_time_moves_only_for_conditions_that_flip() -> None:
    first = compute(make_pod(), BASE_RUNTIME)
    unready = compute(make_pod(), BASE_RUNTIME, previous=first, now=LATER, readiness={"c-web": False})
    assert unready["conditions"] == [
        *conditions()[:2],
        cond("Ready", False, LATER, "ContainersNotReady", UNREADY.format("web")),
        cond("ContainersReady", False, LATER, "ContainersNotReady", UNREADY.format("web")),
        cond("PodScheduled", True)]
    assert unready["startTime"] == pod_status.timestamp(NOW)
    assert status_changed(first, unready)


def test_conditions_the_kubelet_does_not_own_are_kept() -> None:
    gate = {"type": "example.com/gate", "status": "True", "lastProbeTime": None,
            "lastTransitionTime": "2024-01-01T00:00:00Z"}
    disruption = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                  "lastTransitionTime": "2024-01-01T00:00:00Z"}
    scheduled = {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                 "lastTransitionTime": "2024-01-01T00:00:00Z"}
    previous = {"conditions": [scheduled, gate, disruption]}
    result = compute(make_pod(readinessGates=[{"conditionType": "example.com/gate"}]), BASE_RUNTIME, previous)
    assert result["conditions"] == [gate, disruption, *conditions()[:4], scheduled]


@pytest.mark.parametrize(("gates", "message"), [
    (["example.com/missing"], 'corresponding condition of pod readiness gate "example.com/missing" does not exist.'),
    (["example.com/off"], 'the status of pod readiness gate "example.com/off" is not "True", but False'),
])
def test_readiness_gates(gates: list[str], message: str) -> None:
    previous = {"conditions": [{"type": "example.com/off", "status": "False"}]}
    pod = make_pod(readinessGates=[{"conditionType": g} for g in gates])
    result = compute(pod, BASE_RUNTIME, previous)
    assert result["conditions"][3] == cond("Ready", False, NOW, "ReadinessGatesNotReady", message)
    assert result["conditions"][4] == cond("ContainersReady", True)


def test_a_container_that_vanished_while_running() -> None:
    first = compute(make_pod(), BASE_RUNTIME)
    gone = runtime(info("log", "c-log", State.RUNNING, started=T0 + 1))
    result = compute(make_pod(), gone, previous=first, now=LATER)
    assert result["phase"] == "Running"  # stopped, not back to Pending
    assert result["containerStatuses"][1] == {
        **waiting("web", "ContainerCreating", restart=1), "image": "busybox",
        "lastState": {"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown",
                                     "message": pod_status.MESSAGE_UNKNOWN_DELETED, "startedAt": None,
                                     "finishedAt": None}}}


def test_a_container_in_unknown_state_that_was_running() -> None:
    first = compute(make_pod(), BASE_RUNTIME)
    unknown = runtime(info("web", "c-web", State.UNKNOWN), info("log", "c-log", State.RUNNING, started=T0 + 1))
    result = compute(make_pod(), unknown, previous=first, now=LATER)
    assert result["containerStatuses"][1]["state"] == {"terminated": {
        "exitCode": 137, "reason": "ContainerStatusUnknown", "message": pod_status.MESSAGE_UNKNOWN_TERMINATED,
        "startedAt": None, "finishedAt": None}}
    assert result["containerStatuses"][1]["restartCount"] == 1


def test_a_terminated_container_stays_terminated_when_the_runtime_lost_it() -> None:
    pod = make_pod(policy="Never")
    done = compute(pod, runtime(exited("web", "c-web", 0), exited("log", "c-log", 0)))
    assert done["phase"] == "Succeeded"
    again = compute(pod, runtime(), previous=done, now=LATER)  # containers garbage-collected, sandbox gone
    assert again == done


def test_pod_ip_dropped_while_running_kept_once_terminal() -> None:
    first = compute(make_pod(), BASE_RUNTIME)
    no_sandbox = runtime(info("web", "c-web", State.RUNNING), info("log", "c-log", State.RUNNING, started=T0 + 1),
                         sandbox=dataclasses.replace(SANDBOX, ready=False))
    result = compute(make_pod(), no_sandbox, previous=first, now=LATER)
    assert "podIP" not in result
    assert status_patch(first, result)["status"]["podIP"] is None
    assert result["conditions"][0] == cond("PodReadyToStartContainers", False, LATER)
    stopped_pod = make_pod(policy="Never")
    done = compute(stopped_pod, runtime(exited("web", "c-web", 0), exited("log", "c-log", 0), sandbox=None),
                   previous=first, now=LATER)
    assert (done["phase"], done["podIP"], done["podIPs"]) == ("Succeeded", POD_IP, [{"ip": POD_IP}])


def test_status_patch_clears_the_reason_of_an_older_phase() -> None:
    previous = {**RUNNING_STATUS, "phase": "Pending", "reason": "Old"}
    patch = status_patch(previous, compute(make_pod(), BASE_RUNTIME, previous))
    assert patch["status"]["phase"] == "Running"
    assert patch["status"]["reason"] is None


def test_status_changed_ignores_condition_order() -> None:
    reordered = {**RUNNING_STATUS, "conditions": list(reversed(RUNNING_STATUS["conditions"]))}
    assert not status_changed(RUNNING_STATUS, reordered)
    assert status_changed(RUNNING_STATUS, {**RUNNING_STATUS, "podIP": "10.0.0.1"})


def test_termination_messages_share_12_kib() -> None:
    pod = make_pod(policy="Never")
    result = compute(pod, runtime(exited("web", "c-web", 1), exited("log", "c-log", 0)),
                     termination_messages={"c-web": "é" * 5000})
    message = result["containerStatuses"][1]["state"]["terminated"]["message"]
    assert message == "é" * 3072  # 6144 bytes for each of the two containers


def test_volume_mounts_appear_in_waiting_statuses_and_are_carried_over() -> None:
    pod = make_pod(volumes=[{"name": "data", "emptyDir": {}}],
                   containers=[{"name": "web", "image": "busybox",
                                "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}]},
                               {"name": "log", "image": "alpine:3.20"}])
    mounts = [{"name": "data", "mountPath": "/data", "readOnly": True, "recursiveReadOnly": "Disabled"}]
    pending = compute(pod, runtime(sandbox=None))
    assert pending["containerStatuses"][1]["volumeMounts"] == mounts
    started = compute(pod, BASE_RUNTIME, previous=pending, now=LATER)
    assert started["containerStatuses"][1] == {**running("web", "c-web"), "volumeMounts": mounts}


def test_spec_resources_are_reported() -> None:
    resources = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}}
    pod = make_pod(containers=[{"name": "web", "image": "busybox", "resources": resources},
                               {"name": "log", "image": "alpine:3.20"}])
    web = compute(pod, BASE_RUNTIME)["containerStatuses"][1]
    assert (web["resources"], web["allocatedResources"]) == (resources, resources["requests"])


# --------------------------------------------------------------------------------------------- termination


def test_terminal_status_after_a_graceful_delete() -> None:
    pod = make_pod(deleting=True)
    first = compute(make_pod(), BASE_RUNTIME)
    killed = runtime(exited("web", "c-web", 137, finished=T0 + 700), exited("log", "c-log", 0, finished=T0 + 700),
                     sandbox=dataclasses.replace(SANDBOX, ready=False))
    result = terminal_status(pod, killed, previous=first, now=LATER, host_ip=HOST_IP)
    assert result == status(
        "Failed", [stopped("log", "c-log", 0, finished=T0 + 700), stopped("web", "c-web", 137, finished=T0 + 700)],
        [cond("PodReadyToStartContainers", False, LATER), cond("Initialized", True),
         cond("Ready", False, LATER, "PodFailed"), cond("ContainersReady", False, LATER, "PodFailed"),
         cond("PodScheduled", True)])


def test_terminal_status_all_exited_zero_is_succeeded_even_under_always() -> None:
    killed = runtime(exited("web", "c-web", 0), exited("log", "c-log", 0), sandbox=None)
    result = terminal_status(make_pod(deleting=True), killed, previous=RUNNING_STATUS, now=LATER, host_ip=HOST_IP)
    assert result["phase"] == "Succeeded"
    assert [c["reason"] for c in result["conditions"] if c["type"] in ("Ready", "ContainersReady")] == [
        "PodCompleted", "PodCompleted"]
    assert result["podIP"] == POD_IP


def test_terminal_status_of_a_container_that_never_started() -> None:
    pod = make_pod(deleting=True)
    rt = runtime(exited("log", "c-log", 0), sandbox=None)
    result = terminal_status(pod, rt, previous={}, now=NOW, host_ip=HOST_IP,
                             waiting={"web": Waiting("ErrImagePull", PULL_MESSAGE)})
    assert result["phase"] == "Failed"
    assert result["containerStatuses"][1]["state"] == {"terminated": {
        "exitCode": 137, "reason": "ContainerStatusUnknown", "message": pod_status.MESSAGE_UNKNOWN_TERMINATED,
        "startedAt": None, "finishedAt": None}}


def test_terminal_status_init_containers() -> None:
    pod = make_pod(init=True, deleting=True)
    rt = runtime(info("init1", "c-i1", State.RUNNING, started=T0 - 30), sandbox=None)
    previous = compute(make_pod(init=True), rt)
    stopped_rt = runtime(exited("init1", "c-i1", 143, started=T0 - 30, finished=T0), sandbox=None)
    result = terminal_status(pod, stopped_rt, previous=previous, now=LATER, host_ip=HOST_IP)
    assert result["phase"] == "Failed"
    assert [s["state"] for s in result["initContainerStatuses"]] == [
        terminated("c-i1", 143, started=T0 - 30, finished=T0), {"waiting": {"reason": "PodInitializing"}}]
    # Not initialised: regular containers keep waiting rather than claiming they ran.
    assert [s["state"] for s in result["containerStatuses"]] == [{"waiting": {"reason": "PodInitializing"}}] * 2


# ------------------------------------------------------------------------------------------------ getPhase


def st(name: str, state: str, *, code: int = 0, last_code: int | None = None,
       started: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"waiting": {}} if state == "waiting" else (
        {"running": {}} if state == "running" else {"terminated": {"exitCode": code}})
    result: dict[str, Any] = {"name": name, "state": body, "lastState": {}, "started": started}
    if last_code is not None:
        result["lastState"] = {"terminated": {"exitCode": last_code}}
    return result


@pytest.mark.parametrize(("policy", "statuses", "terminal", "expected"), [
    ("Always", [st("web", "running"), st("log", "running")], False, "Running"),
    ("Always", [st("web", "running"), st("log", "waiting")], False, "Pending"),
    ("Always", [st("web", "running")], False, "Pending"),                                # log unknown
    ("Always", [st("web", "running"), st("log", "waiting", last_code=1)], False, "Running"),
    ("Always", [st("web", "terminated"), st("log", "terminated", code=1)], False, "Running"),
    ("OnFailure", [st("web", "terminated"), st("log", "terminated", code=1)], False, "Running"),
    ("OnFailure", [st("web", "terminated"), st("log", "terminated")], False, "Succeeded"),
    ("Never", [st("web", "terminated"), st("log", "terminated", code=1)], False, "Failed"),
    ("Never", [st("web", "terminated"), st("log", "terminated")], False, "Succeeded"),
    ("Always", [st("web", "terminated"), st("log", "terminated")], True, "Succeeded"),
    ("Always", [st("web", "terminated", code=143), st("log", "terminated")], True, "Failed"),
    ("Always", [st("web", "waiting"), st("log", "waiting")], True, "Pending"),
], ids=str)
def test_get_phase(policy: str, statuses: list[dict[str, Any]], terminal: bool, expected: str) -> None:
    assert get_phase(make_pod(policy=policy), statuses, pod_is_terminal=terminal) == expected


@pytest.mark.parametrize(("policy", "init", "expected"), [
    ("Never", [st("init1", "terminated", code=1)], "Failed"),
    ("Always", [st("init1", "terminated", code=1)], "Pending"),
    ("Never", [st("init1", "waiting", last_code=1)], "Failed"),
    ("Always", [st("init1", "terminated"), st("init2", "running")], "Pending"),
    ("Always", [st("init1", "terminated"), st("init2", "terminated")], "Running"),
], ids=str)
def test_get_phase_with_init_containers(policy: str, init: list[dict[str, Any]], expected: str) -> None:
    regular = [st("web", "running"), st("log", "running")] if expected == "Running" else [
        st("web", "waiting"), st("log", "waiting")]
    assert get_phase(make_pod(init=True, policy=policy), [*regular, *init]) == expected


# getPhase with container-level restartPolicy / restartPolicyRules (upstream getPhase, ContainerRestartRules on)

NEVER_UNLESS_42 = {"restartPolicy": "Never",
                   "restartPolicyRules": [{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}]}


def own_pod(pod_policy: str, web: dict[str, Any] | None = None, log: dict[str, Any] | None = None,
            init1: dict[str, Any] | None = None) -> Pod:
    """The base pod with restartPolicy fields of their own on web, log and (if given) init1."""
    fields: dict[str, Any] = {"containers": [{"name": "web", "image": "busybox", **(web or {})},
                                             {"name": "log", "image": "alpine:3.20", **(log or {})}]}
    if init1 is not None:
        fields["initContainers"] = [{"name": "init1", "image": "busybox", **init1},
                                    {"name": "init2", "image": "busybox"}]
    return make_pod(policy=pod_policy, **fields)


NEVER = {"restartPolicy": "Never"}


@pytest.mark.parametrize(("pod", "statuses", "terminal", "expected"), [
    (own_pod("Always", NEVER, NEVER), [st("web", "terminated", code=1), st("log", "terminated")], False, "Failed"),
    (own_pod("Always", NEVER, NEVER), [st("web", "terminated"), st("log", "terminated")], False, "Succeeded"),
    (own_pod("Always", NEVER), [st("web", "terminated", code=1), st("log", "terminated")], False, "Running"),
    (own_pod("Always", NEVER), [st("web", "terminated", code=1), st("log", "running")], False, "Running"),
    (own_pod("Always", NEVER), [st("web", "waiting"), st("log", "running")], False, "Pending"),
    (own_pod("Never", NEVER_UNLESS_42), [st("web", "terminated", code=42), st("log", "terminated")], False,
     "Running"),
    (own_pod("Never", NEVER_UNLESS_42), [st("web", "waiting", last_code=42), st("log", "terminated")], False,
     "Running"),
    (own_pod("Never", NEVER_UNLESS_42), [st("web", "terminated", code=1), st("log", "terminated")], False, "Failed"),
    (own_pod("Never", NEVER_UNLESS_42), [st("web", "terminated", code=42), st("log", "terminated")], True,
     "Failed"),
    (own_pod("Never", {"restartPolicy": "Always"}), [st("web", "terminated"), st("log", "terminated")], False,
     "Running"),
    (own_pod("Never", {"restartPolicy": "OnFailure"}), [st("web", "terminated"), st("log", "terminated")], False,
     "Succeeded"),
    (own_pod("Never", {"restartPolicy": "OnFailure"}), [st("web", "terminated", code=1), st("log", "terminated")],
     False, "Running"),
    (own_pod("OnFailure", NEVER), [st("web", "terminated", code=1), st("log", "terminated")], False, "Failed"),
    (own_pod("OnFailure", NEVER), [st("web", "terminated"), st("log", "terminated", code=1)], False, "Running"),
], ids=str)
def test_get_phase_with_container_restart_policies(pod: Pod, statuses: list[dict[str, Any]], terminal: bool,
                                                   expected: str) -> None:
    assert get_phase(pod, statuses, pod_is_terminal=terminal) == expected


@pytest.mark.parametrize(("pod", "init", "expected"), [
    (own_pod("Never", init1={"restartPolicy": "OnFailure"}), [st("init1", "terminated", code=1)], "Pending"),
    (own_pod("Never", init1={"restartPolicy": "OnFailure"}), [st("init1", "waiting", last_code=1)], "Pending"),
    (own_pod("Always", init1=NEVER), [st("init1", "terminated", code=1)], "Failed"),
    (own_pod("Always", init1=NEVER), [st("init1", "waiting", last_code=1)], "Failed"),
    (own_pod("Always", init1=NEVER), [st("init1", "terminated"), st("init2", "running")], "Pending"),
    (own_pod("Never", init1=NEVER_UNLESS_42), [st("init1", "waiting", last_code=42)], "Pending"),
    (own_pod("Never", init1=NEVER_UNLESS_42), [st("init1", "terminated", code=1)], "Failed"),
], ids=str)
def test_get_phase_with_init_container_restart_policies(pod: Pod, init: list[dict[str, Any]], expected: str) -> None:
    assert get_phase(pod, [st("web", "waiting"), st("log", "waiting"), *init]) == expected


def test_container_never_in_an_always_pod_ends_failed_without_a_restart() -> None:
    """The e2e "should restart container on container-level restart policy Never" pod: it must end Failed, with
    its container terminated and restartCount 0 (not CrashLoopBackOff) even if a crash-loop reason is pending."""
    pod = make_pod(policy="Always", containers=[{"name": "web", "image": "busybox", "restartPolicy": "Never"}])
    rt = runtime(exited("web", "c-web", 1), sandbox=dataclasses.replace(SANDBOX, ready=False))
    result = compute(pod, rt, {"phase": "Running"}, waiting={"web": Waiting("CrashLoopBackOff", CRASH_MESSAGE)})
    assert result["phase"] == "Failed"
    (web,) = result["containerStatuses"]
    assert web["state"] == terminated("c-web", 1) and web["restartCount"] == 0 and web["lastState"] == {}
    assert {c["type"]: (c["status"], c.get("reason")) for c in result["conditions"]}["Ready"] == ("False", "PodFailed")


def test_restart_by_rule_shows_crash_loop_then_counts_the_restart() -> None:
    """The e2e "should restart container on rule match" pod (Never pod, container Never + Restart on exit 42)."""
    pod = make_pod(policy="Never", containers=[{"name": "web", "image": "busybox", **NEVER_UNLESS_42}])
    first = runtime(exited("web", "c-web-1", 42))
    crash = compute(pod, first, {"phase": "Running"}, waiting={"web": Waiting("CrashLoopBackOff", CRASH_MESSAGE)})
    assert crash["phase"] == "Running"
    (web,) = crash["containerStatuses"]
    assert web["state"] == {"waiting": {"reason": "CrashLoopBackOff", "message": CRASH_MESSAGE}}
    assert web["lastState"] == terminated("c-web-1", 42) and web["restartCount"] == 0
    again = runtime(info("web", "c-web-2", State.RUNNING, started=T0 + 100, restart=1),
                    exited("web", "c-web-1", 42))
    result = compute(pod, again, crash)
    assert result["phase"] == "Running"
    (web,) = result["containerStatuses"]
    assert web["restartCount"] == 1 and web["state"] == {"running": {"startedAt": ts(T0 + 100)}}
    assert web["lastState"] == terminated("c-web-1", 42)


def test_sidecars_count_for_the_phase_and_readiness() -> None:
    pod = make_pod(initContainers=[{"name": "init1", "image": "busybox"},
                                              {"name": "init2", "image": "busybox", "restartPolicy": "Always"}])
    not_started = [st("init1", "terminated"), st("init2", "running"), st("web", "waiting"), st("log", "waiting")]
    assert get_phase(pod, not_started) == "Pending"
    up = [st("init1", "terminated"), st("init2", "running", started=True), st("web", "running"), st("log", "running")]
    assert get_phase(pod, up) == "Running"
    ready = [{**s, "ready": s["name"] != "init2"} for s in up]
    assert pod_status.containers_ready_condition(pod, ready, "Running") == {
        "type": "ContainersReady", "status": "False", "reason": "ContainersNotReady",
        "message": "containers with unready status: [init2]"}


def test_statuses_are_deep_copies_of_previous() -> None:
    pod = make_pod(policy="Never")
    done = compute(pod, runtime(exited("web", "c-web", 0), exited("log", "c-log", 0)))
    snapshot = copy.deepcopy(done)
    again = compute(pod, runtime(), previous=done, now=LATER)
    again["containerStatuses"][0]["state"]["terminated"]["exitCode"] = 99
    assert done == snapshot


# ------------------------------------------------------------------------------------------------ sidecars

PROBE = {"exec": {"command": ["true"]}}
SIDECAR_INIT = [{"name": "init1", "image": "busybox"},
                {"name": "proxy", "image": "busybox", "restartPolicy": "Always", "startupProbe": PROBE,
                 "readinessProbe": PROBE}]
INIT1_DONE = exited("init1", "c-i1", 0, started=T0 - 30, finished=T0 - 20, created=T0 - 31)
PROXY_UP = info("proxy", "c-proxy", State.RUNNING, started=T0 - 15, created=T0 - 16)


def sidecar_pod(policy: str = "Always", **spec: Any) -> Pod:
    return make_pod(policy=policy, initContainers=SIDECAR_INIT, **spec)


def test_a_started_ready_sidecar_with_running_containers() -> None:
    rt = runtime(INIT1_DONE, PROXY_UP, info("web", "c-web", State.RUNNING), info("log", "c-log", State.RUNNING,
                                                                                   started=T0 + 1))
    result = compute(sidecar_pod(), rt, startup={"c-proxy": True}, readiness={"c-proxy": True})
    assert result == status(
        "Running", [running("log", "c-log", T0 + 1), running("web", "c-web")], conditions(),
        init_statuses=[stopped("init1", "c-i1", 0, ready=True, started=T0 - 30, finished=T0 - 20),
                       running("proxy", "c-proxy", T0 - 15)])


def test_a_sidecar_waiting_for_its_startup_probe_keeps_the_pod_initialising() -> None:
    result = compute(sidecar_pod(), runtime(INIT1_DONE, PROXY_UP))
    assert result["phase"] == "Pending"
    assert result["initContainerStatuses"][1] == {**running("proxy", "c-proxy", T0 - 15, ready=False),
                                                  "started": False}
    assert result["conditions"][1] == cond("Initialized", False, NOW, "ContainersNotInitialized",
                                           "containers with incomplete status: [proxy]")
    assert [s["state"] for s in result["containerStatuses"]] == [{"waiting": {"reason": "PodInitializing"}}] * 2


def test_a_started_sidecar_initialises_the_pod_and_its_readiness_counts() -> None:
    result = compute(sidecar_pod(), runtime(INIT1_DONE, PROXY_UP), startup={"c-proxy": True},
                     readiness={"c-proxy": False})
    assert result["phase"] == "Pending"  # regular containers not created yet
    assert result["initContainerStatuses"][1] == {**running("proxy", "c-proxy", T0 - 15, ready=False)}
    assert result["conditions"][1] == cond("Initialized", True)
    assert result["conditions"][3] == cond("ContainersReady", False, NOW, "ContainersNotReady",
                                           "containers with unready status: [proxy web log]")


def test_a_crash_looping_sidecar_under_never_shows_back_off_and_the_pod_stays_running() -> None:
    message = "back-off 10s restarting failed container=proxy pod=foo_ns(uid-1)"
    rt = runtime(INIT1_DONE, exited("proxy", "c-proxy", 1, started=T0 - 15, finished=T0 + 5, created=T0 - 16),
                 info("web", "c-web", State.RUNNING), info("log", "c-log", State.RUNNING, started=T0 + 1))
    result = compute(sidecar_pod("Never"), rt, waiting={"proxy": Waiting("CrashLoopBackOff", message)})
    assert result["phase"] == "Running"
    assert result["initContainerStatuses"][1] == {
        **stopped("proxy", "c-proxy", 0), "state": {"waiting": {"reason": "CrashLoopBackOff", "message": message}},
        "lastState": terminated("c-proxy", 1, started=T0 - 15, finished=T0 + 5)}
    assert result["conditions"][1] == cond("Initialized", True)  # a regular container ran: stays initialised


@pytest.mark.parametrize(("proxy", "phase"), [
    (PROXY_UP, "Running"),  # until the pod is killed
    (exited("proxy", "c-proxy", 143, started=T0 - 15, finished=T0 + 70, created=T0 - 16), "Succeeded"),
], ids=["sidecar still running", "sidecar killed"])
def test_sidecars_do_not_decide_the_phase_once_regular_containers_finished(proxy: Any, phase: str) -> None:
    rt = runtime(INIT1_DONE, proxy, exited("web", "c-web", 0), exited("log", "c-log", 0))
    assert compute(sidecar_pod("Never"), rt, startup={"c-proxy": True})["phase"] == phase


def test_a_restarted_sidecar_after_initialisation_does_not_make_the_pod_pending() -> None:
    rt = runtime(INIT1_DONE, info("proxy", "c-proxy-2", State.RUNNING, started=T0 + 30, created=T0 + 29, restart=1),
                 info("web", "c-web", State.RUNNING), info("log", "c-log", State.RUNNING, started=T0 + 1))
    result = compute(sidecar_pod(), rt)  # startup probe not run yet for the new instance
    assert result["phase"] == "Running"
    assert result["initContainerStatuses"][1]["started"] is False


# ------------------------------------------------------------------------------------- ephemeral containers

DEBUGGER = {"name": "debugger", "image": "busybox", "stdin": True, "tty": True, "targetContainerName": "web"}


def debug_pod(policy: str = "Always", init: bool = False) -> Pod:
    return make_pod(policy=policy, init=init, ephemeralContainers=[DEBUGGER])


def ephemeral(state: dict[str, Any], cid: str = "c-dbg", *, started: float = T0 + 100) -> dict[str, Any]:
    """An ephemeral container's status: no started, never ready (no probes), restartCount 0."""
    return {"name": "debugger", "image": IMAGES["debugger"], "imageID": IMAGES["debugger"].rsplit(":", 1)[0]
            + "@sha256:debugger", "containerID": f"containerd://{cid}", "restartCount": 0, "ready": False,
            "lastState": {}, "state": state, "resources": {}}


@pytest.mark.parametrize(("debugger", "waiting_for", "expected"), [
    (info("debugger", "c-dbg", State.RUNNING, started=T0 + 100), {},
     ephemeral({"running": {"startedAt": ts(T0 + 100)}})),
    (exited("debugger", "c-dbg", 2, started=T0 + 100, finished=T0 + 160), {},
     ephemeral(terminated("c-dbg", 2, started=T0 + 100, finished=T0 + 160))),
    (None, {}, {"name": "debugger", "image": "busybox", "imageID": "", "state": {"waiting": {
        "reason": "ContainerCreating"}}, "lastState": {}, "ready": False, "restartCount": 0}),
    (None, {"debugger": Waiting("ErrImagePull", PULL_MESSAGE)},
     {"name": "debugger", "image": "busybox", "imageID": "", "state": {"waiting": {
         "reason": "ErrImagePull", "message": PULL_MESSAGE}}, "lastState": {}, "ready": False, "restartCount": 0}),
], ids=["running", "exited", "not started yet", "image pull failed"])
def test_ephemeral_container_statuses(debugger: ContainerInfo | None, waiting_for: dict[str, Waiting],
                                      expected: dict[str, Any]) -> None:
    containers = [info("web", "c-web", State.RUNNING), info("log", "c-log", State.RUNNING, started=T0 + 1)]
    rt = runtime(*containers, *([debugger] if debugger else []))
    result = compute(debug_pod(), rt, waiting=waiting_for)
    assert result["ephemeralContainerStatuses"] == [expected]
    # They count for nothing else: phase, conditions and the other statuses are the base pod's.
    assert {k: v for k, v in result.items() if k != "ephemeralContainerStatuses"} == RUNNING_STATUS


def test_an_exited_ephemeral_container_stays_terminated_and_pod_fields_are_patched() -> None:
    rt = runtime(info("web", "c-web", State.RUNNING), info("log", "c-log", State.RUNNING, started=T0 + 1),
                 exited("debugger", "c-dbg", 0, started=T0 + 100, finished=T0 + 160))
    first = compute(debug_pod(), rt)
    assert status_patch(RUNNING_STATUS, first) == {"status": {
        "ephemeralContainerStatuses": first["ephemeralContainerStatuses"]}}
    gone = runtime(info("web", "c-web", State.RUNNING), info("log", "c-log", State.RUNNING, started=T0 + 1))
    again = compute(debug_pod(), gone, previous=first, now=LATER)  # garbage-collected: terminated stays
    assert again["ephemeralContainerStatuses"] == first["ephemeralContainerStatuses"]


def test_ephemeral_statuses_are_sorted_by_name_and_share_the_termination_message_budget() -> None:
    pod = make_pod(policy="Never", ephemeralContainers=[{"name": "z-debug", "image": "busybox"},
                                                        {"name": "debugger", "image": "busybox"}])
    rt = runtime(exited("web", "c-web", 0), exited("log", "c-log", 0),
                 exited("debugger", "c-dbg", 1, started=T0 + 100, finished=T0 + 160))
    result = compute(pod, rt, termination_messages={"c-dbg": "x" * 5000})
    assert [s["name"] for s in result["ephemeralContainerStatuses"]] == ["debugger", "z-debug"]
    assert len(result["ephemeralContainerStatuses"][0]["state"]["terminated"]["message"]) == 12 * 1024 // 4


# ---------------------------------------------------------------------------------- activeDeadlineSeconds

DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"


def _started(seconds_ago: float) -> dict[str, Any]:
    return {**RUNNING_STATUS, "startTime": pod_status.timestamp(NOW - datetime.timedelta(seconds=seconds_ago))}


KILLED = runtime(exited("web", "c-web", 137, finished=T0 + 700), exited("log", "c-log", 143, finished=T0 + 700),
                 sandbox=dataclasses.replace(SANDBOX, ready=False))


@pytest.mark.parametrize(("deadline", "previous", "phase", "reason"), [
    (600, _started(700), "Failed", "DeadlineExceeded"),
    (600, _started(600), "Failed", "DeadlineExceeded"),  # upstream: duration >= allowed
    (600, _started(599), "Running", None),
    (600, {}, "Running", None),  # no startTime yet: the clock has not started
    (None, _started(7000), "Running", None),
    (600, {**_started(700), "phase": "Succeeded", "reason": "Done"}, "Succeeded", "Done"),  # terminal stays
], ids=["past", "exactly", "not yet", "no start time", "no deadline", "already terminal"])
def test_active_deadline_once_the_containers_are_stopped(deadline: int | None, previous: dict[str, Any], phase: str,
                                                          reason: str | None) -> None:
    pod = make_pod(activeDeadlineSeconds=deadline) if deadline else make_pod()
    result = compute(pod, KILLED, previous, pod_is_terminal=phase != "Running")
    if phase == "Running":  # not past the deadline: the stopped containers restart under Always
        assert (result["phase"], result.get("reason")) == ("Running", None)
        return
    assert (result["phase"], result.get("reason")) == (phase, reason)
    if reason == "DeadlineExceeded":
        assert result["message"] == DEADLINE_MESSAGE
        ready = {c["type"]: c for c in result["conditions"]}
        assert (ready["Ready"]["status"], ready["Ready"]["reason"]) == ("False", "PodFailed")
        assert (ready["ContainersReady"]["status"], ready["ContainersReady"]["reason"]) == ("False", "PodFailed")
        again = compute(pod, KILLED, previous=result, now=LATER)  # final: kept as written
        assert (again["phase"], again["reason"], again["message"]) == ("Failed", "DeadlineExceeded", DEADLINE_MESSAGE)


def test_a_pod_past_its_deadline_is_not_reported_failed_while_containers_run() -> None:
    """Upstream mergePodStatus: the terminal phase waits until the agent has killed the containers."""
    previous = {**_started(700), "reason": "Old"}
    result = compute(make_pod(activeDeadlineSeconds=600), BASE_RUNTIME, previous)
    assert (result["phase"], result["reason"]) == ("Running", "Old")
    assert "message" not in result


def test_a_terminal_phase_is_held_back_while_a_sidecar_still_runs() -> None:
    # An ordinary init container failed under Never while the sidecar before it runs: Failed once it stopped.
    pod = make_pod(policy="Never", initContainers=[SIDECAR_INIT[1], {"name": "init1", "image": "busybox"}])
    failed = exited("init1", "c-i1", 1, started=T0 - 10, finished=T0 - 5, created=T0 - 11)
    assert compute(pod, runtime(PROXY_UP, failed), startup={"c-proxy": True})["phase"] == "Pending"
    proxy_stopped = exited("proxy", "c-proxy", 143, started=T0 - 15, finished=T0, created=T0 - 16)
    assert compute(pod, runtime(proxy_stopped, failed))["phase"] == "Failed"
