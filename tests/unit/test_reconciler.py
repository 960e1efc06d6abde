"""kopflet.kuberuntime.reconciler.compute_pod_actions: table-driven like upstream TestComputePodActions.

One base pod (three containers, optionally three init containers) and one base runtime status where all is
running and ready; each case mutates either and states the whole expected PodActions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from cri_client.types import NamespaceMode
from kopflet.api.spec import Pod, container_hash, pod_from_body
from kopflet.backoff import Backoff
from kopflet.container import podstate
from kopflet.container.podstate import ContainerInfo, SandboxInfo, State
from kopflet.kuberuntime import reconciler
from kopflet.kuberuntime.reconciler import KillInfo, PodActions, compute_pod_actions

NOW = 10_000.0
S = 1_000_000_000  # ns per second
FULL_NAME = "foo_foo-ns(12345678)"


def base_body(init: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"name": "foo", "namespace": "foo-ns", "uid": "12345678"},
        "spec": {"containers": [{"name": n, "image": "busybox"} for n in ("foo1", "foo2", "foo3")]},
    }
    if init:
        body["spec"]["initContainers"] = [{"name": n, "image": "bar-image"} for n in ("init1", "init2", "init3")]
    return body


@dataclasses.dataclass
class Runtime:
    """A mutable runtime status for the cases to edit; lists are newest first, as podstate keeps them."""

    sandboxes: list[SandboxInfo]
    containers: list[ContainerInfo]
    failed_probes: dict[str, set[str]] = dataclasses.field(
        default_factory=lambda: {"liveness": set(), "startup": set()})
    started: set[str] = dataclasses.field(default_factory=set)
    """Ids whose startup probe succeeded."""

    def c(self, index: int, **changes: Any) -> None:
        self.containers[index] = dataclasses.replace(self.containers[index], **changes)

    def s(self, index: int, **changes: Any) -> None:
        self.sandboxes[index] = dataclasses.replace(self.sandboxes[index], **changes)

    def exited(self, index: int, code: int, at: float = NOW - 1000) -> None:
        self.c(index, state=State.EXITED, exit_code=code, finished_at=int(at * S))

    def build(self) -> podstate.RuntimePodStatus:
        return podstate.RuntimePodStatus(uid="12345678", name="foo", namespace="foo-ns",
                                         sandboxes=tuple(self.sandboxes), containers=tuple(self.containers))


def _info(cid: str, name: str, state: State, sandbox_id: str = "") -> ContainerInfo:
    image = "bar-image" if name.startswith(("init", "sidecar")) else "busybox"
    return ContainerInfo(id=cid, name=name, state=state, image="busybox", sandbox_id=sandbox_id,
                         hash=container_hash({"name": name, "image": image}))


def base_runtime(init: bool = False) -> Runtime:
    sandboxes = [SandboxInfo(id="sandboxID", attempt=0, ready=True, ip="10.0.0.1")]
    if init:  # upstream makeBasePodAndStatusWithInitContainers: every init container exited 0, nothing else
        return Runtime(sandboxes, [_info(f"initid{i}", f"init{i}", State.EXITED) for i in (1, 2, 3)])
    return Runtime(sandboxes, [_info(f"id{i}", f"foo{i}", State.RUNNING) for i in (1, 2, 3)])


def policy(name: str) -> Callable[[dict[str, Any]], None]:
    def mutate(body: dict[str, Any]) -> None:
        body["spec"]["restartPolicy"] = name
    return mutate


NO_ACTION = PodActions(sandbox_id="sandboxID")
AGO = NOW - 1000  # finishedAt of the exited containers in most cases: long out of any backoff
NEW_SANDBOX = "No sandbox for pod can be found. Need to start a new one"
NOT_READY = "No ready sandbox for pod can be found. Need to start a new one"
ALL_DEAD = "All containers are dead and none is due to restart"
NOT_RECREATED_NEVER = NOT_READY + "; restartPolicy Never and containers already ran: not re-creating it"
NOT_RECREATED_DONE = NOT_READY + "; all containers succeeded: not re-creating it"


def init_not_restarted(name: str) -> str:
    return f"Init container {name} failed and its restart policy does not restart it"


def killed(name: str, message: str, reason: str = "") -> KillInfo:
    return KillInfo(name=name, reason=reason, message=message)


def _all_exited(code: int) -> Callable[[Runtime], None]:
    def mutate(rt: Runtime) -> None:
        for i in range(len(rt.containers)):
            rt.exited(i, code)
    return mutate


def _keep_only(*indexes: int) -> Callable[[Runtime], None]:
    def mutate(rt: Runtime) -> None:
        rt.containers[:] = [rt.containers[i] for i in indexes]
    return mutate


def _add_exited_regulars(rt: Runtime) -> None:
    """Every regular container ran and exited 0 after the init containers (newest first)."""
    rt.containers[:0] = [_info(f"id{i}", f"foo{i}", State.EXITED) for i in (1, 2, 3)]


def _probe_failed(kind: str) -> Callable[[Runtime], None]:
    def mutate(rt: Runtime) -> None:
        rt.failed_probes[kind].add("id2")
    return mutate


LIVENESS_FAILED = _probe_failed("liveness")
STARTUP_FAILED = _probe_failed("startup")


def _set_ready_sandboxes(rt: Runtime) -> None:
    rt.sandboxes.insert(0, SandboxInfo(id="sandbox2", attempt=3, ready=True, ip="10.0.0.2", created_at=5))


Case = tuple[Callable[[dict[str, Any]], None] | None, Callable[[Runtime], None] | None, PodActions]

CASES: dict[str, Case] = {
    "everything is good; do nothing": (None, None, NO_ACTION),
    "start pod sandbox and all containers for a new pod": (
        None, lambda rt: (rt.sandboxes.clear(), rt.containers.clear()),
        PodActions(kill_pod=True, create_sandbox=True, attempt=0, containers_to_start=("foo1", "foo2", "foo3"),
                   reason=NEW_SANDBOX)),
    "restart exited containers if RestartPolicy == Always": (
        policy("Always"), lambda rt: (rt.exited(0, 0), rt.exited(1, 111)),
        PodActions(sandbox_id="sandboxID", containers_to_start=("foo1", "foo2"),
                   backoff_since={"foo1": AGO, "foo2": AGO})),
    "restart failed containers if RestartPolicy == OnFailure": (
        policy("OnFailure"), lambda rt: (rt.exited(0, 0), rt.exited(1, 111)),
        PodActions(sandbox_id="sandboxID", containers_to_start=("foo2",), backoff_since={"foo2": AGO})),
    "restart created but not started containers if RestartPolicy == OnFailure": (
        policy("OnFailure"), lambda rt: (rt.exited(0, 0), rt.c(1, state=State.CREATED)),
        PodActions(sandbox_id="sandboxID", containers_to_start=("foo2",))),
    "don't restart containers if RestartPolicy == Never": (
        policy("Never"), lambda rt: (rt.exited(0, 0), rt.exited(1, 111)), NO_ACTION),
    "kill pod and recreate everything if the sandbox is dead, RestartPolicy == Always": (
        policy("Always"), lambda rt: rt.s(0, ready=False),
        PodActions(kill_pod=True, create_sandbox=True, sandbox_id="sandboxID", attempt=1,
                   containers_to_start=("foo1", "foo2", "foo3"), reason=NOT_READY)),
    "kill pod and recreate all but the succeeded containers if the sandbox is dead, OnFailure": (
        policy("OnFailure"), lambda rt: (rt.s(0, ready=False), rt.exited(1, 0)),
        PodActions(kill_pod=True, create_sandbox=True, sandbox_id="sandboxID", attempt=1,
                   containers_to_start=("foo1", "foo3"), reason=NOT_READY)),
    "kill pod and recreate all containers if the sandbox has no IP": (
        None, lambda rt: rt.s(0, ip=""),
        PodActions(kill_pod=True, create_sandbox=True, sandbox_id="sandboxID", attempt=1,
                   containers_to_start=("foo1", "foo2", "foo3"),
                   reason="Sandbox for pod has no IP address. Need to start a new one")),
    "a hostNetwork sandbox needs no IP": (
        lambda b: b["spec"].update(hostNetwork=True), lambda rt: rt.s(0, ip="", network_mode=NamespaceMode.NODE),
        NO_ACTION),
    "recreate the sandbox without an id if the network namespace mode changed": (
        lambda b: b["spec"].update(hostNetwork=True), None,
        PodActions(kill_pod=True, create_sandbox=True, sandbox_id="", attempt=1,
                   containers_to_start=("foo1", "foo2", "foo3"),
                   reason="Sandbox for pod has changed. Need to start a new one")),
    "reconcile more than one ready sandbox with a new one": (
        None, _set_ready_sandboxes,
        PodActions(kill_pod=True, create_sandbox=True, sandbox_id="sandbox2", attempt=4,
                   containers_to_start=("foo1", "foo2", "foo3"),
                   reason="Multiple sandboxes are ready for Pod. Need to reconcile them")),
    "a newer ready sandbox next to an older dead one is fine": (
        None, lambda rt: rt.sandboxes.append(SandboxInfo(id="old", attempt=7, ready=False)),
        PodActions(sandbox_id="sandboxID", attempt=7)),
    "kill and recreate the container if the container's spec changed": (
        policy("Always"), lambda rt: rt.c(1, hash="deadbeef"),
        PodActions(sandbox_id="sandboxID", containers_to_start=("foo2",),
                   containers_to_kill={"id2": killed("foo2", "Container foo2 definition changed, will be restarted")})),
    "a changed spec restarts even under RestartPolicy == Never": (
        policy("Never"), lambda rt: rt.c(1, hash=""),
        PodActions(sandbox_id="sandboxID", containers_to_start=("foo2",),
                   containers_to_kill={"id2": killed("foo2", "Container foo2 definition changed, will be restarted")})),
    "kill and recreate the container if the liveness check has failed": (
        policy("Always"), LIVENESS_FAILED,
        PodActions(sandbox_id="sandboxID", containers_to_start=("foo2",),
                   containers_to_kill={"id2": killed("foo2", "Container foo2 failed liveness probe, will be restarted",
                                                     "LivenessProbe")})),
    "kill and recreate the container if the startup check has failed": (
        policy("OnFailure"), STARTUP_FAILED,
        PodActions(sandbox_id="sandboxID", containers_to_start=("foo2",),
                   containers_to_kill={"id2": killed("foo2", "Container foo2 failed startup probe, will be restarted",
                                                     "StartupProbe")})),
    "a failed liveness check under RestartPolicy == Never kills without restart": (
        policy("Never"), LIVENESS_FAILED,
        PodActions(sandbox_id="sandboxID",
                   containers_to_kill={"id2": killed("foo2", "Container foo2 failed liveness probe",
                                                     "LivenessProbe")})),
    "do not create a sandbox for a dead sandbox with RestartPolicy=Never and all containers exited": (
        policy("Never"), lambda rt: (rt.s(0, ready=False, attempt=1), _all_exited(0)(rt)),
        PodActions(kill_pod=True, sandbox_id="sandboxID", attempt=2, reason=NOT_RECREATED_NEVER)),
    "do not create a sandbox for a dead sandbox with RestartPolicy=OnFailure and all containers succeeded": (
        policy("OnFailure"), lambda rt: (rt.s(0, ready=False, attempt=1), _all_exited(0)(rt)),
        PodActions(kill_pod=True, sandbox_id="sandboxID", attempt=2, reason=NOT_RECREATED_DONE)),
    "create a sandbox with RestartPolicy=Never when no container was ever created": (
        policy("Never"), lambda rt: (rt.s(0, ready=False, attempt=2), rt.containers.clear()),
        PodActions(kill_pod=True, create_sandbox=True, sandbox_id="sandboxID", attempt=3,
                   containers_to_start=("foo1", "foo2", "foo3"), reason=NOT_READY)),
    "kill and recreate the container if the container is in unknown state": (
        policy("Never"), lambda rt: rt.c(1, state=State.UNKNOWN),
        PodActions(sandbox_id="sandboxID", containers_to_start=("foo2",),
                   containers_to_kill={"id2": killed("foo2", 'Container is in "unknown" state, try killing it '
                                                     "before restart", "Unknown")})),
    "restart the container if the container is in created state": (
        policy("Never"), lambda rt: rt.c(1, state=State.CREATED),
        PodActions(sandbox_id="sandboxID", containers_to_start=("foo2",))),
    "kill the pod (stop the sandbox) when all containers exited under RestartPolicy == Never": (
        policy("Never"), _all_exited(1),
        PodActions(kill_pod=True, sandbox_id="sandboxID", reason=ALL_DEAD)),
    "kill the pod when all containers succeeded under RestartPolicy == OnFailure": (
        policy("OnFailure"), _all_exited(0),
        PodActions(kill_pod=True, sandbox_id="sandboxID", reason=ALL_DEAD)),
    "kill everything and start nothing once the pod is being deleted": (
        lambda b: b["metadata"].update(deletionTimestamp="2024-01-01T00:00:00Z"),
        lambda rt: (rt.exited(0, 1), rt.s(0, attempt=2)),
        PodActions(kill_pod=True, sandbox_id="sandboxID", attempt=2, reason="Pod is being deleted")),
    "a deleted pod without a sandbox is still killed (idempotent)": (
        lambda b: b["metadata"].update(deletionTimestamp="2024-01-01T00:00:00Z"),
        lambda rt: rt.sandboxes.clear(),
        PodActions(kill_pod=True, reason="Pod is being deleted")),
}

INIT_CASES: dict[str, Case] = {
    "initialization completed; start all containers": (
        None, None, PodActions(sandbox_id="sandboxID", containers_to_start=("foo1", "foo2", "foo3"))),
    "no init containers have been started; start the first one": (
        None, lambda rt: rt.containers.clear(),
        PodActions(sandbox_id="sandboxID", init_containers_to_start=("init1",))),
    "initialization in progress; do nothing": (
        policy("Always"), lambda rt: rt.c(2, state=State.RUNNING), NO_ACTION),
    "first init container done; start the second": (
        None, _keep_only(0),
        PodActions(sandbox_id="sandboxID", init_containers_to_start=("init2",))),
    "kill pod and restart the first init container if the pod sandbox is dead": (
        policy("Always"), lambda rt: rt.s(0, ready=False),
        PodActions(kill_pod=True, create_sandbox=True, sandbox_id="sandboxID", attempt=1,
                   init_containers_to_start=("init1",), backoff_since={"init1": 0.0}, reason=NOT_READY)),
    "initialization failed; restart the last init container if RestartPolicy == Always": (
        policy("Always"), lambda rt: rt.exited(2, 137),
        PodActions(sandbox_id="sandboxID", init_containers_to_start=("init3",), backoff_since={"init3": AGO})),
    "initialization failed; restart the last init container if RestartPolicy == OnFailure": (
        policy("OnFailure"), lambda rt: rt.exited(2, 137),
        PodActions(sandbox_id="sandboxID", init_containers_to_start=("init3",), backoff_since={"init3": AGO})),
    "an OOM-killed init container failed even with exit code 0": (
        policy("Always"), lambda rt: (rt.exited(2, 0), rt.c(2, reason="OOMKilled")),
        PodActions(sandbox_id="sandboxID", init_containers_to_start=("init3",), backoff_since={"init3": AGO})),
    "an OOM-killed init container with exit code 0 under OnFailure: the exit code says no restart, kill the pod": (
        # Upstream ShouldContainerBeRestarted (ContainerRestartRules on) judges the exit code, not the OOM kill.
        policy("OnFailure"), lambda rt: (rt.exited(2, 0), rt.c(2, reason="OOMKilled")),
        PodActions(kill_pod=True, sandbox_id="sandboxID", reason=init_not_restarted("init3"))),
    "initialization failed; kill pod if RestartPolicy == Never": (
        policy("Never"), lambda rt: rt.exited(2, 137),
        PodActions(kill_pod=True, sandbox_id="sandboxID",
                   reason=init_not_restarted("init3"))),
    "init container state unknown; kill and recreate the last init container if RestartPolicy == Always": (
        policy("Always"), lambda rt: rt.c(2, state=State.UNKNOWN),
        PodActions(sandbox_id="sandboxID", init_containers_to_start=("init3",),
                   containers_to_kill={"initid3": killed("init3", 'Init container is in "unknown" state, try killing '
                                                         "it before restart", "Unknown")})),
    "init container state unknown; kill pod if RestartPolicy == Never": (
        policy("Never"), lambda rt: rt.c(2, state=State.UNKNOWN),
        PodActions(kill_pod=True, sandbox_id="sandboxID",
                   reason=init_not_restarted("init3"))),
    "sandbox not ready, init containers ran, RestartPolicy == Never; kill pod only": (
        policy("Never"), lambda rt: rt.s(0, ready=False),
        PodActions(kill_pod=True, sandbox_id="sandboxID", attempt=1, reason=NOT_RECREATED_NEVER)),
    "sandbox not ready, RestartPolicy == Never, no visible containers; create a new sandbox": (
        policy("Never"), lambda rt: (rt.s(0, ready=False), rt.containers.clear()),
        PodActions(kill_pod=True, create_sandbox=True, sandbox_id="sandboxID", attempt=1,
                   init_containers_to_start=("init1",), reason=NOT_READY)),
    "sandbox not ready, init container failed, RestartPolicy == OnFailure; create a new sandbox": (
        policy("OnFailure"), lambda rt: (rt.s(0, ready=False), rt.exited(2, 137)),
        PodActions(kill_pod=True, create_sandbox=True, sandbox_id="sandboxID", attempt=1,
                   init_containers_to_start=("init1",), backoff_since={"init1": 0.0}, reason=NOT_READY)),
    "some init container statuses are missing but the last one runs; don't restart preceding ones": (
        policy("Always"), lambda rt: (rt.c(2, state=State.RUNNING), _keep_only(2)(rt)),
        NO_ACTION),
    "an init container is in the created state after a failed start; restart it": (
        policy("Always"), lambda rt: rt.c(2, state=State.CREATED),
        PodActions(sandbox_id="sandboxID", init_containers_to_start=("init3",))),
    "a regular container runs: initialisation is done even if init statuses were removed": (
        None, lambda rt: (rt.containers.clear(), rt.containers.append(_info("id1", "foo1", State.RUNNING))),
        PodActions(sandbox_id="sandboxID", containers_to_start=("foo2", "foo3"))),
    "sandbox dead with exited containers under Always: run the init containers again": (
        policy("Always"), lambda rt: (rt.s(0, ready=False),
                                      rt.containers.insert(0, _info("id1", "foo1", State.EXITED))),
        PodActions(kill_pod=True, create_sandbox=True, sandbox_id="sandboxID", attempt=1,
                   init_containers_to_start=("init1",), backoff_since={"init1": 0.0}, reason=NOT_READY)),
    "sandbox dead, OnFailure, every container succeeded: done, no new sandbox": (
        policy("OnFailure"), lambda rt: (rt.s(0, ready=False), _add_exited_regulars(rt)),
        PodActions(kill_pod=True, sandbox_id="sandboxID", attempt=1, reason=NOT_RECREATED_DONE)),
}


def _run(init: bool, mutate_pod: Any, mutate_rt: Any) -> PodActions:
    body = base_body(init)
    if mutate_pod is not None:
        mutate_pod(body)
    pod = pod_from_body(body)
    rt = base_runtime(init)
    if mutate_rt is not None:
        mutate_rt(rt)
    return compute_pod_actions(pod, rt.build(), backoff=Backoff(), now=NOW,
                               liveness_failures=rt.failed_probes["liveness"],
                               startup_failures=rt.failed_probes["startup"], started=rt.started)


@pytest.mark.parametrize(("mutate_pod", "mutate_rt", "expected"), list(CASES.values()), ids=list(CASES))
def test_compute_pod_actions(mutate_pod: Any, mutate_rt: Any, expected: PodActions) -> None:
    assert _run(False, mutate_pod, mutate_rt) == expected


@pytest.mark.parametrize(("mutate_pod", "mutate_rt", "expected"), list(INIT_CASES.values()), ids=list(INIT_CASES))
def test_compute_pod_actions_with_init_containers(mutate_pod: Any, mutate_rt: Any, expected: PodActions) -> None:
    assert _run(True, mutate_pod, mutate_rt) == expected


# ------------------------------------------------ container-level restartPolicy and restartPolicyRules (upstream
# TestComputePodActionsWithContainerRestartRules, and the e2e "Container Restart Rules" pods)


def own_policy(pod_policy: str, container_policy: str, *indexes: int, rules: list[dict[str, Any]] | None = None,
               kind: str = "containers") -> Callable[[dict[str, Any]], None]:
    """The pod's restartPolicy, and a restartPolicy (and restartPolicyRules) of their own for the containers at
    `indexes` of `kind` (``containers`` or ``initContainers``)."""
    def mutate(body: dict[str, Any]) -> None:
        body["spec"]["restartPolicy"] = pod_policy
        for index in indexes:
            container = body["spec"][kind][index]
            container["restartPolicy"] = container_policy
            if rules is not None:
                container["restartPolicyRules"] = rules
    return mutate


def rule(operator: str, *values: int, action: str = "Restart") -> dict[str, Any]:
    return {"action": action, "exitCodes": {"operator": operator, "values": list(values)}}


IN_42 = [rule("In", 42)]
UNKNOWN_INIT3 = killed("init3", 'Init container is in "unknown" state, try killing it before restart', "Unknown")

OWN_POLICY_CASES: dict[str, Case] = {
    "container Always in a Never pod: restart the exited containers, succeeded or not": (
        own_policy("Never", "Always", 0, 1), lambda rt: (rt.exited(0, 0), rt.exited(1, 111)),
        PodActions(sandbox_id="sandboxID", containers_to_start=("foo1", "foo2"),
                   backoff_since={"foo1": AGO, "foo2": AGO})),
    "container OnFailure in a Never pod: restart the failed one only": (
        own_policy("Never", "OnFailure", 0, 1), lambda rt: (rt.exited(0, 0), rt.exited(1, 111)),
        PodActions(sandbox_id="sandboxID", containers_to_start=("foo2",), backoff_since={"foo2": AGO})),
    "container OnFailure in a Never pod: restart one created but never started": (
        own_policy("Never", "OnFailure", 0, 1), lambda rt: (rt.exited(0, 0), rt.c(1, state=State.CREATED)),
        PodActions(sandbox_id="sandboxID", containers_to_start=("foo2",))),
    "container Never in an Always pod: do not restart the exited containers": (
        own_policy("Always", "Never", 0, 1), lambda rt: (rt.exited(0, 0), rt.exited(1, 111)), NO_ACTION),
    "container Never in an Always pod, all exited (e2e 'container-level restart policy Never'): kill the pod": (
        own_policy("Always", "Never", 0, 1, 2), _all_exited(1),
        PodActions(kill_pod=True, sandbox_id="sandboxID", reason=ALL_DEAD)),
    "a container without a policy of its own follows the pod's": (
        own_policy("Always", "Never", 0), lambda rt: (rt.exited(0, 1), rt.exited(1, 1)),
        PodActions(sandbox_id="sandboxID", containers_to_start=("foo2",), backoff_since={"foo2": AGO})),
    "rule In [42] matches exit code 42 (e2e 'rule match'): restart under container and pod Never": (
        own_policy("Never", "Never", 0, rules=IN_42), lambda rt: rt.exited(0, 42),
        PodActions(sandbox_id="sandboxID", containers_to_start=("foo1",), backoff_since={"foo1": AGO})),
    "rule In [42] does not match exit code 1 (e2e 'rule mismatch'): the container's Never applies": (
        own_policy("Never", "Never", 0, rules=IN_42), lambda rt: rt.exited(0, 1), NO_ACTION),
    "rule NotIn [0 1] matches exit code 2: restart": (
        own_policy("Never", "Never", 0, rules=[rule("NotIn", 0, 1)]), lambda rt: rt.exited(0, 2),
        PodActions(sandbox_id="sandboxID", containers_to_start=("foo1",), backoff_since={"foo1": AGO})),
    "rule NotIn [0 1] does not match exit code 1: the container's Never applies": (
        own_policy("Never", "Never", 0, rules=[rule("NotIn", 0, 1)]), lambda rt: rt.exited(0, 1), NO_ACTION),
    "a matching rule restarts even a container that exited 0": (
        own_policy("Never", "Never", 0, rules=[rule("In", 0)]), lambda rt: rt.exited(0, 0),
        PodActions(sandbox_id="sandboxID", containers_to_start=("foo1",), backoff_since={"foo1": AGO})),
    "no rule matches: the container's OnFailure applies to the failure": (
        own_policy("Never", "OnFailure", 0, rules=IN_42), lambda rt: rt.exited(0, 3),
        PodActions(sandbox_id="sandboxID", containers_to_start=("foo1",), backoff_since={"foo1": AGO})),
    "no rule matches: the container's OnFailure leaves a success alone": (
        own_policy("Always", "OnFailure", 0, rules=IN_42), lambda rt: rt.exited(0, 0), NO_ACTION),
    "a later rule matches when the first does not": (
        own_policy("Never", "Never", 0, rules=[rule("In", 1), rule("NotIn", 42)]), lambda rt: rt.exited(0, 3),
        PodActions(sandbox_id="sandboxID", containers_to_start=("foo1",), backoff_since={"foo1": AGO})),
    "the first matching rule decides: RestartAllContainers counts as a restart (upstream ContainerShouldRestart)": (
        own_policy("Never", "Never", 0, rules=[rule("In", 42, action="RestartAllContainers"), rule("NotIn", 42)]),
        lambda rt: rt.exited(0, 42),
        PodActions(sandbox_id="sandboxID", containers_to_start=("foo1",), backoff_since={"foo1": AGO})),
    "RestartAllContainers rule not matching: the next rule, then the container's Never": (
        own_policy("Never", "Never", 0, rules=[rule("In", 42, action="RestartAllContainers"), rule("In", 7)]),
        lambda rt: rt.exited(0, 1), NO_ACTION),
    "failed liveness probe, container Never in an Always pod: kill without restart": (
        own_policy("Always", "Never", 1), LIVENESS_FAILED,
        PodActions(sandbox_id="sandboxID",
                   containers_to_kill={"id2": killed("foo2", "Container foo2 failed liveness probe",
                                                     "LivenessProbe")})),
    "failed startup probe, container Always in a Never pod: kill and restart": (
        own_policy("Never", "Always", 1), STARTUP_FAILED,
        PodActions(sandbox_id="sandboxID", containers_to_start=("foo2",),
                   containers_to_kill={"id2": killed("foo2", "Container foo2 failed startup probe, will be restarted",
                                                     "StartupProbe")})),
    "failed liveness probe: no exit code, the rules are not consulted, the container's Never wins": (
        own_policy("Always", "Never", 1, rules=[rule("NotIn", 0)]), LIVENESS_FAILED,
        PodActions(sandbox_id="sandboxID",
                   containers_to_kill={"id2": killed("foo2", "Container foo2 failed liveness probe",
                                                     "LivenessProbe")})),
    "a changed spec restarts even a container with its own Never": (
        own_policy("Always", "Never", 1), lambda rt: rt.c(1, hash="deadbeef"),
        PodActions(sandbox_id="sandboxID", containers_to_start=("foo2",),
                   containers_to_kill={"id2": killed("foo2", "Container foo2 definition changed, will be restarted")})),
    "sandbox dead, container OnFailure in an Always pod: the succeeded one is not run again": (
        own_policy("Always", "OnFailure", 1), lambda rt: (rt.s(0, ready=False), rt.exited(1, 0)),
        PodActions(kill_pod=True, create_sandbox=True, sandbox_id="sandboxID", attempt=1,
                   containers_to_start=("foo1", "foo3"), reason=NOT_READY)),
    "sandbox dead, container Always in an OnFailure pod: the succeeded one runs again": (
        own_policy("OnFailure", "Always", 1), lambda rt: (rt.s(0, ready=False), rt.exited(1, 0)),
        PodActions(kill_pod=True, create_sandbox=True, sandbox_id="sandboxID", attempt=1,
                   containers_to_start=("foo1", "foo2", "foo3"), backoff_since={"foo2": AGO}, reason=NOT_READY)),
    "sandbox dead, container Never in an Always pod: everything runs again (only OnFailure means run once)": (
        own_policy("Always", "Never", 0), lambda rt: (rt.s(0, ready=False), rt.exited(0, 1)),
        PodActions(kill_pod=True, create_sandbox=True, sandbox_id="sandboxID", attempt=1,
                   containers_to_start=("foo1", "foo2", "foo3"), backoff_since={"foo1": AGO}, reason=NOT_READY)),
    "sandbox dead, a Never pod with a container Always: the pod's Never decides, no new sandbox": (
        own_policy("Never", "Always", 0), lambda rt: (rt.s(0, ready=False), rt.exited(0, 1)),
        PodActions(kill_pod=True, sandbox_id="sandboxID", attempt=1, reason=NOT_RECREATED_NEVER)),
}

OWN_POLICY_INIT_CASES: dict[str, Case] = {
    "init container OnFailure in a Never pod failed: restart it": (
        own_policy("Never", "OnFailure", 2, kind="initContainers"), lambda rt: rt.exited(2, 1),
        PodActions(sandbox_id="sandboxID", init_containers_to_start=("init3",), backoff_since={"init3": AGO})),
    "init container Never in an Always pod failed: kill the pod": (
        own_policy("Always", "Never", 2, kind="initContainers"), lambda rt: rt.exited(2, 1),
        PodActions(kill_pod=True, sandbox_id="sandboxID", reason=init_not_restarted("init3"))),
    "init container with rule In [42] in a Never pod exited 42: restart it": (
        own_policy("Never", "Never", 2, rules=IN_42, kind="initContainers"), lambda rt: rt.exited(2, 42),
        PodActions(sandbox_id="sandboxID", init_containers_to_start=("init3",), backoff_since={"init3": AGO})),
    "init container with rule In [42] in an Always pod exited 1: its own Never kills the pod": (
        own_policy("Always", "Never", 2, rules=IN_42, kind="initContainers"), lambda rt: rt.exited(2, 1),
        PodActions(kill_pod=True, sandbox_id="sandboxID", reason=init_not_restarted("init3"))),
    "init container with its own OnFailure succeeded: start the regular containers": (
        own_policy("Never", "OnFailure", 2, kind="initContainers"), None,
        PodActions(sandbox_id="sandboxID", containers_to_start=("foo1", "foo2", "foo3"))),
    "init container in unknown state, its own OnFailure in a Never pod: kill and restart it": (
        own_policy("Never", "OnFailure", 2, kind="initContainers"), lambda rt: rt.c(2, state=State.UNKNOWN),
        PodActions(sandbox_id="sandboxID", init_containers_to_start=("init3",),
                   containers_to_kill={"initid3": UNKNOWN_INIT3})),
    "init container in unknown state, its own Never in an Always pod: kill the pod, rules not consulted": (
        own_policy("Always", "Never", 2, rules=[rule("NotIn", 0)], kind="initContainers"),
        lambda rt: rt.c(2, state=State.UNKNOWN),
        PodActions(kill_pod=True, sandbox_id="sandboxID", reason=init_not_restarted("init3"))),
}


@pytest.mark.parametrize(("mutate_pod", "mutate_rt", "expected"), list(OWN_POLICY_CASES.values()),
                         ids=list(OWN_POLICY_CASES))
def test_compute_pod_actions_with_container_restart_policies(mutate_pod: Any, mutate_rt: Any,
                                                             expected: PodActions) -> None:
    assert _run(False, mutate_pod, mutate_rt) == expected


@pytest.mark.parametrize(("mutate_pod", "mutate_rt", "expected"), list(OWN_POLICY_INIT_CASES.values()),
                         ids=list(OWN_POLICY_INIT_CASES))
def test_compute_pod_actions_with_init_container_restart_policies(mutate_pod: Any, mutate_rt: Any,
                                                                  expected: PodActions) -> None:
    assert _run(True, mutate_pod, mutate_rt) == expected


def test_a_restart_by_rule_waits_out_the_crash_loop_backoff() -> None:
    """Restarts a rule asks for use the same per-container crash-loop backoff as any other (upstream doBackOff)."""
    body = base_body()
    own_policy("Never", "Never", 0, rules=IN_42)(body)
    pod = pod_from_body(body)
    b = _backoff_with(pod, "foo1", [NOW - 30, NOW - 15])  # 20s since the last bump
    rt = base_runtime()
    rt.exited(0, 42, at=NOW - 5)
    actions = compute_pod_actions(pod, rt.build(), backoff=b, now=NOW)
    assert actions == PodActions(
        sandbox_id="sandboxID",
        containers_in_backoff={"foo1": f"back-off 20s restarting failed container=foo1 pod={FULL_NAME}"},
        retry_after=15.0)


# ------------------------------------------------------------------------- sidecars (restartable init containers)

PROBE = {"exec": {"command": ["true"]}}


def sidecar_body() -> dict[str, Any]:
    """Upstream makeBasePodAndStatusWithRestartableInitContainers: three sidecars, the last two with liveness
    and startup probes, and the three regular containers."""
    body = base_body()
    body["spec"]["initContainers"] = [
        {"name": "sidecar1", "image": "bar-image", "restartPolicy": "Always"},
        *({"name": f"sidecar{i}", "image": "bar-image", "restartPolicy": "Always", "livenessProbe": PROBE,
           "startupProbe": PROBE} for i in (2, 3))]
    return body


def sidecar_runtime() -> Runtime:
    """Every sidecar runs, the probed ones have started; no regular container yet."""
    rt = Runtime([SandboxInfo(id="sandboxID", attempt=0, ready=True, ip="10.0.0.1")],
                 [_info(f"sidecarid{i}", f"sidecar{i}", State.RUNNING) for i in (1, 2, 3)])
    rt.started.update({"sidecarid2", "sidecarid3"})
    return rt


def _add_regulars(state: State, code: int = 0) -> Callable[[Runtime], None]:
    def mutate(rt: Runtime) -> None:
        rt.containers[:0] = [_info(f"id{i}", f"foo{i}", state) for i in (1, 2, 3)]
        if state is State.EXITED:
            for i in range(3):
                rt.exited(i, code)
    return mutate


def _regular_init(index: int) -> Callable[[dict[str, Any]], None]:
    """Make one of the sidecars an ordinary init container (no restartPolicy, no probes)."""
    def mutate(body: dict[str, Any]) -> None:
        container = body["spec"]["initContainers"][index]
        for key in ("restartPolicy", "livenessProbe", "startupProbe"):
            container.pop(key, None)
    return mutate


def _sidecar_image(body: dict[str, Any]) -> None:
    body["spec"]["initContainers"][2]["image"] = "foo-image"


ALL_REGULAR = ("foo1", "foo2", "foo3")

SIDECAR_CASES: dict[str, Case] = {
    "initialization completed; start all containers": (
        None, None, PodActions(sandbox_id="sandboxID", containers_to_start=ALL_REGULAR)),
    "no init containers have been started; start the first one": (
        None, lambda rt: rt.containers.clear(),
        PodActions(sandbox_id="sandboxID", init_containers_to_start=("sidecar1",))),
    "an init container is stuck in the created state; restart it": (
        None, lambda rt: rt.c(2, state=State.CREATED),
        PodActions(sandbox_id="sandboxID", init_containers_to_start=("sidecar3",))),
    "a sidecar without startup probe has started; start the next": (
        None, _keep_only(0), PodActions(sandbox_id="sandboxID", init_containers_to_start=("sidecar2",))),
    "startup probe has not succeeded yet; do nothing": (
        None, lambda rt: (_keep_only(0, 1)(rt), rt.started.discard("sidecarid2")), NO_ACTION),
    "startup probe has succeeded; start the next": (
        None, _keep_only(0, 1), PodActions(sandbox_id="sandboxID", init_containers_to_start=("sidecar3",))),
    "kill and recreate the sidecar if the startup probe failed": (
        None, lambda rt: (rt.started.discard("sidecarid3"), rt.failed_probes["startup"].add("sidecarid3")),
        PodActions(sandbox_id="sandboxID", init_containers_to_start=("sidecar3",),
                   containers_to_kill={"sidecarid3": killed("sidecar3", "Init container sidecar3 failed startup probe",
                                                            "StartupProbe")})),
    "kill and recreate the sidecar if the liveness probe failed; the pod is initialised": (
        None, lambda rt: rt.failed_probes["liveness"].add("sidecarid3"),
        PodActions(sandbox_id="sandboxID", init_containers_to_start=("sidecar3",), containers_to_start=ALL_REGULAR,
                   containers_to_kill={"sidecarid3": killed("sidecar3", "Init container sidecar3 failed liveness "
                                                            "probe", "LivenessProbe")})),
    "kill and recreate the sidecar if its definition changed": (
        _sidecar_image, None,
        PodActions(sandbox_id="sandboxID", init_containers_to_start=("sidecar3",), containers_to_start=ALL_REGULAR,
                   containers_to_kill={"sidecarid3": killed("sidecar3",
                                                            "Init container sidecar3 definition changed")})),
    "restart exited sidecars in spec order; nothing else until the last one has started": (
        None, lambda rt: (rt.exited(0, 0), rt.exited(2, 0)),
        PodActions(sandbox_id="sandboxID", init_containers_to_start=("sidecar1", "sidecar3"),
                   backoff_since={"sidecar1": AGO, "sidecar3": AGO})),
    "restart an exited sidecar and start the regular containers": (
        None, lambda rt: rt.exited(0, 1),
        PodActions(sandbox_id="sandboxID", init_containers_to_start=("sidecar1",), containers_to_start=ALL_REGULAR,
                   backoff_since={"sidecar1": AGO})),
    "a failed sidecar restarts even under RestartPolicy == Never": (
        policy("Never"), lambda rt: rt.exited(2, 137),
        PodActions(sandbox_id="sandboxID", init_containers_to_start=("sidecar3",), backoff_since={"sidecar3": AGO})),
    "a sidecar in unknown state is killed and restarted even under RestartPolicy == Never": (
        policy("Never"), lambda rt: rt.c(2, state=State.UNKNOWN),
        PodActions(sandbox_id="sandboxID", init_containers_to_start=("sidecar3",),
                   containers_to_kill={"sidecarid3": killed("sidecar3", 'Init container is in "unknown" state, try '
                                                            "killing it before restart", "Unknown")})),
    "a sidecar is restarted while the regular containers run, even under RestartPolicy == Never": (
        policy("Never"), lambda rt: (rt.exited(2, 137), _add_regulars(State.RUNNING)(rt)),
        PodActions(sandbox_id="sandboxID", init_containers_to_start=("sidecar3",), backoff_since={"sidecar3": AGO})),
    "all regular containers succeeded under Never: kill the pod, sidecars are not restarted": (
        policy("Never"), lambda rt: (rt.exited(0, 1), _add_regulars(State.EXITED)(rt)),
        PodActions(kill_pod=True, sandbox_id="sandboxID", reason=ALL_DEAD)),
    "all regular containers succeeded under OnFailure: kill the pod while the sidecars run": (
        policy("OnFailure"), _add_regulars(State.EXITED),
        PodActions(kill_pod=True, sandbox_id="sandboxID", reason=ALL_DEAD)),
    "regular containers restart under Always while the sidecars keep running": (
        policy("Always"), _add_regulars(State.EXITED, 1),
        PodActions(sandbox_id="sandboxID", containers_to_start=ALL_REGULAR,
                   backoff_since={"foo1": AGO, "foo2": AGO, "foo3": AGO})),
    "init statuses missing but the last sidecar runs: restart the others and start the regular containers": (
        None, _keep_only(2),
        PodActions(sandbox_id="sandboxID", init_containers_to_start=("sidecar1", "sidecar2"),
                   containers_to_start=ALL_REGULAR)),
    "a regular container of an earlier sandbox does not count as initialised; start the first one": (
        _regular_init(1), lambda rt: rt.containers.__setitem__(slice(None), [_info("id1", "foo1", State.CREATED,
                                                                                    sandbox_id="old")]),
        PodActions(sandbox_id="sandboxID", init_containers_to_start=("sidecar1",))),
    "a sidecar of an earlier sandbox is no progress in this one": (
        None, lambda rt: rt.containers.__setitem__(slice(None), [_info("sidecarid1", "sidecar1", State.EXITED,
                                                                                    sandbox_id="old")]),
        PodActions(sandbox_id="sandboxID", init_containers_to_start=("sidecar1",), backoff_since={"sidecar1": 0.0})),
    "an earlier sidecar is restarted while a later ordinary init container runs": (
        _regular_init(1), lambda rt: (rt.exited(0, 1), _keep_only(0, 1)(rt)),
        PodActions(sandbox_id="sandboxID", init_containers_to_start=("sidecar1",), backoff_since={"sidecar1": AGO})),
    "an ordinary init container after a started sidecar completed; start the next sidecar": (
        _regular_init(1), lambda rt: (rt.exited(1, 0), _keep_only(0, 1)(rt)),
        PodActions(sandbox_id="sandboxID", init_containers_to_start=("sidecar3",))),
    "an ordinary init container failed under Never: kill the pod, sidecars included": (
        lambda b: (_regular_init(1)(b), policy("Never")(b)), lambda rt: (rt.exited(1, 2), _keep_only(0, 1)(rt)),
        PodActions(kill_pod=True, sandbox_id="sandboxID",
                   reason=init_not_restarted("sidecar2"))),
    "sandbox dead, a sidecar failed, RestartPolicy == Never: kill the pod only": (
        policy("Never"), lambda rt: (rt.s(0, ready=False), rt.exited(2, 137)),
        PodActions(kill_pod=True, sandbox_id="sandboxID", attempt=1, reason=NOT_RECREATED_NEVER)),
    "sandbox dead, a sidecar failed, RestartPolicy == OnFailure: new sandbox from the first init container": (
        policy("OnFailure"), lambda rt: (rt.s(0, ready=False), rt.exited(2, 137)),
        PodActions(kill_pod=True, create_sandbox=True, sandbox_id="sandboxID", attempt=1,
                   init_containers_to_start=("sidecar1",), reason=NOT_READY)),
    "the pod is being deleted: kill everything, restart no sidecar": (
        lambda b: b["metadata"].update(deletionTimestamp="2024-01-01T00:00:00Z"), lambda rt: rt.exited(0, 1),
        PodActions(kill_pod=True, sandbox_id="sandboxID", reason="Pod is being deleted")),
}


def _run_sidecars(mutate_pod: Any, mutate_rt: Any) -> PodActions:
    body = sidecar_body()
    if mutate_pod is not None:
        mutate_pod(body)
    rt = sidecar_runtime()
    if mutate_rt is not None:
        mutate_rt(rt)
    return compute_pod_actions(pod_from_body(body), rt.build(), backoff=Backoff(), now=NOW,
                               liveness_failures=rt.failed_probes["liveness"],
                               startup_failures=rt.failed_probes["startup"], started=rt.started)


@pytest.mark.parametrize(("mutate_pod", "mutate_rt", "expected"), list(SIDECAR_CASES.values()), ids=list(SIDECAR_CASES))
def test_compute_pod_actions_with_sidecars(mutate_pod: Any, mutate_rt: Any, expected: PodActions) -> None:
    assert _run_sidecars(mutate_pod, mutate_rt) == expected


def test_a_crash_looping_sidecar_waits_while_the_rest_goes_on() -> None:
    pod = pod_from_body(sidecar_body())
    b = Backoff()
    b.next(reconciler.backoff_key(pod, "sidecar1"), NOW - 30)
    b.next(reconciler.backoff_key(pod, "sidecar1"), NOW - 10)  # 20s now
    rt = sidecar_runtime()
    rt.exited(0, 1, at=NOW - 5)
    actions = compute_pod_actions(pod, rt.build(), backoff=b, now=NOW, started=rt.started)
    assert actions == PodActions(
        sandbox_id="sandboxID", containers_to_start=ALL_REGULAR, retry_after=15.0,
        containers_in_backoff={"sidecar1": f"back-off 20s restarting failed container=sidecar1 pod={FULL_NAME}"})


@pytest.mark.parametrize(("running", "expected"), [
    (["sidecar1", "sidecar2", "sidecar3", "foo1", "foo2", "foo3"],
     {"sidecar3": ("foo1", "foo2", "foo3"), "sidecar2": ("foo1", "foo2", "foo3", "sidecar3"),
      "sidecar1": ("foo1", "foo2", "foo3", "sidecar2")}),
    (["sidecar1", "sidecar3", "foo2"],  # upstream: sidecar1 waits for sidecar2 only, which does not run
     {"sidecar3": ("foo2",), "sidecar2": ("foo2", "sidecar3"), "sidecar1": ("foo2",)}),
    (["sidecar1"], {"sidecar3": (), "sidecar2": (), "sidecar1": ()}),
], ids=["everything runs", "gaps", "only a sidecar"])
def test_termination_prereqs(running: list[str], expected: dict[str, tuple[str, ...]]) -> None:
    assert reconciler.termination_prereqs(pod_from_body(sidecar_body()), running) == expected


def test_no_termination_order_without_sidecars() -> None:
    assert reconciler.termination_prereqs(_pod(init=True), ["init1", "foo1"]) == {}


# ------------------------------------------------------------------------------------- ephemeral containers


def ephemeral_body(init: bool = False, **debug: Any) -> dict[str, Any]:
    body = base_body(init)
    body["spec"]["ephemeralContainers"] = [{"name": "debugger", "image": "busybox", "stdin": True, "tty": True,
                                            **debug}]
    return body


def _debugger(state: State) -> Callable[[Runtime], None]:
    def mutate(rt: Runtime) -> None:
        rt.containers.insert(0, _info("debugid", "debugger", state))
    return mutate


EPHEMERAL_CASES: dict[str, tuple[bool, Callable[[dict[str, Any]], None] | None, Callable[[Runtime], None] | None,
                                 PodActions]] = {
    "a new ephemeral container is started": (
        False, None, None, PodActions(sandbox_id="sandboxID", ephemeral_containers_to_start=("debugger",))),
    "a running ephemeral container is left alone": (False, None, _debugger(State.RUNNING), NO_ACTION),
    "an exited ephemeral container is never restarted": (False, None, _debugger(State.EXITED), NO_ACTION),
    "even under RestartPolicy == Always and exit code 1": (
        False, policy("Always"), lambda rt: (_debugger(State.EXITED)(rt), rt.exited(0, 1)), NO_ACTION),
    "ephemeral containers start while initialisation is in progress": (
        True, None, lambda rt: rt.c(2, state=State.RUNNING),
        PodActions(sandbox_id="sandboxID", ephemeral_containers_to_start=("debugger",))),
    "not before the sandbox exists: the new sandbox starts the pod's own containers only": (
        False, None, lambda rt: (rt.sandboxes.clear(), rt.containers.clear()),
        PodActions(kill_pod=True, create_sandbox=True, containers_to_start=ALL_REGULAR, reason=NEW_SANDBOX)),
    "not while the pod is being killed": (
        False, policy("Never"), _all_exited(0), PodActions(kill_pod=True, sandbox_id="sandboxID", reason=ALL_DEAD)),
    "not once the pod is being deleted": (
        False, lambda b: b["metadata"].update(deletionTimestamp="2024-01-01T00:00:00Z"), None,
        PodActions(kill_pod=True, sandbox_id="sandboxID", reason="Pod is being deleted")),
}


@pytest.mark.parametrize(("init", "mutate_pod", "mutate_rt", "expected"), list(EPHEMERAL_CASES.values()),
                         ids=list(EPHEMERAL_CASES))
def test_compute_pod_actions_with_ephemeral_containers(init: bool, mutate_pod: Any, mutate_rt: Any,
                                                       expected: PodActions) -> None:
    body = ephemeral_body(init)
    if mutate_pod is not None:
        mutate_pod(body)
    rt = base_runtime(init)
    if mutate_rt is not None:
        mutate_rt(rt)
    assert compute_pod_actions(pod_from_body(body), rt.build(), backoff=Backoff(), now=NOW) == expected


def test_namespace_target_id_is_the_targets_newest_instance() -> None:
    pod = pod_from_body(ephemeral_body(targetContainerName="foo2"))
    debugger = pod.spec.ephemeral_containers[0]
    rt = base_runtime()
    rt.containers.insert(0, _info("id2b", "foo2", State.RUNNING))
    assert reconciler.namespace_target_id(debugger, rt.build()) == "id2b"
    assert reconciler.namespace_target_id(pod.spec.containers[0], rt.build()) == ""  # no target: none
    with pytest.raises(LookupError, match=r"^unable to find target container foo2$"):
        reconciler.namespace_target_id(debugger, podstate.RuntimePodStatus(uid="12345678"))


# --------------------------------------------------------------------------------------- crash-loop backoff


def _pod(init: bool = False, **spec_fields: Any) -> Pod:
    body = base_body(init)
    body["spec"].update(spec_fields)
    return pod_from_body(body)


def _backoff_with(pod: Pod, name: str, bumps: list[float]) -> Backoff:
    b = Backoff()
    for t in bumps:
        b.next(reconciler.backoff_key(pod, name), t)
    return b


def test_container_in_backoff_is_held_back_with_the_upstream_message() -> None:
    pod = _pod()
    b = _backoff_with(pod, "foo2", [NOW - 40, NOW - 20])  # delay now 20s
    rt = base_runtime()
    rt.exited(1, 1, at=NOW - 5)
    actions = compute_pod_actions(pod, rt.build(), backoff=b, now=NOW)
    assert actions == PodActions(
        sandbox_id="sandboxID",
        containers_in_backoff={"foo2": f"back-off 20s restarting failed container=foo2 pod={FULL_NAME}"},
        retry_after=15.0)


def test_container_out_of_backoff_is_started_and_reports_its_exit_time() -> None:
    pod = _pod()
    b = _backoff_with(pod, "foo2", [NOW - 60, NOW - 40])
    rt = base_runtime()
    rt.exited(1, 1, at=NOW - 30)
    actions = compute_pod_actions(pod, rt.build(), backoff=b, now=NOW)
    assert actions == PodActions(sandbox_id="sandboxID", containers_to_start=("foo2",),
                                 backoff_since={"foo2": NOW - 30})


def test_every_container_in_backoff_does_not_kill_the_pod() -> None:
    pod = _pod()
    b = Backoff()
    rt = base_runtime()
    for i, name in enumerate(("foo1", "foo2", "foo3")):
        b.next(reconciler.backoff_key(pod, name), NOW - 10 * (i + 1))
        rt.exited(i, 2, at=NOW - 1)
    actions = compute_pod_actions(pod, rt.build(), backoff=b, now=NOW)
    assert not actions.kill_pod and actions.containers_to_start == ()
    assert list(actions.containers_in_backoff) == ["foo1", "foo2", "foo3"]
    assert actions.containers_in_backoff["foo3"] == f"back-off 10s restarting failed container=foo3 pod={FULL_NAME}"
    assert actions.retry_after == 9.0


def test_a_changed_spec_gets_a_fresh_backoff() -> None:
    old = _pod()
    b = _backoff_with(old, "foo2", [NOW - 50, NOW - 30, NOW - 10])  # 40s for the old spec
    new_body = base_body()
    new_body["spec"]["containers"][1]["image"] = "busybox:1.37"
    new = pod_from_body(new_body)
    rt = base_runtime()
    rt.exited(1, 1, at=NOW - 2)
    assert compute_pod_actions(old, rt.build(), backoff=b, now=NOW).containers_in_backoff
    assert compute_pod_actions(new, rt.build(), backoff=b, now=NOW).containers_to_start == ("foo2",)


def test_init_container_in_backoff_is_not_started() -> None:
    pod = _pod(init=True)
    b = _backoff_with(pod, "init3", [NOW - 30])
    rt = base_runtime(init=True)
    rt.exited(2, 1, at=NOW - 3)
    actions = compute_pod_actions(pod, rt.build(), backoff=b, now=NOW)
    assert actions == PodActions(
        sandbox_id="sandboxID",
        containers_in_backoff={"init3": f"back-off 10s restarting failed container=init3 pod={FULL_NAME}"},
        retry_after=7.0)


def test_backoff_also_applies_after_sandbox_recreation() -> None:
    pod = _pod()
    b = _backoff_with(pod, "foo2", [NOW - 5])
    rt = base_runtime()
    rt.s(0, ready=False)
    rt.exited(1, 1, at=NOW - 4)
    actions = compute_pod_actions(pod, rt.build(), backoff=b, now=NOW)
    assert actions.create_sandbox and actions.kill_pod
    assert actions.containers_to_start == ("foo1", "foo3")
    assert set(actions.containers_in_backoff) == {"foo2"}


def test_compute_does_not_touch_the_backoff_and_note_restarts_does() -> None:
    pod = _pod()
    b = Backoff()
    rt = base_runtime()
    rt.exited(1, 1, at=NOW - 1)
    first = compute_pod_actions(pod, rt.build(), backoff=b, now=NOW)
    assert len(b) == 0 and first.containers_to_start == ("foo2",)
    assert compute_pod_actions(pod, rt.build(), backoff=b, now=NOW) == first  # same input, same answer

    reconciler.note_restarts(first, pod, b, NOW)
    assert b.get(reconciler.backoff_key(pod, "foo2")) == 10
    # The restarted instance crashes 2s later: now it waits.
    rt.containers.insert(0, dataclasses.replace(rt.containers[1], id="id2b", finished_at=int((NOW + 2) * S)))
    later = compute_pod_actions(pod, rt.build(), backoff=b, now=NOW + 3)
    assert later.containers_in_backoff == {"foo2": f"back-off 10s restarting failed container=foo2 pod={FULL_NAME}"}
    assert later.retry_after == pytest.approx(9.0)


def test_note_restarts_only_for_attempted_names() -> None:
    pod = _pod()
    actions = PodActions(backoff_since={"foo1": 1.0, "foo2": 2.0})
    b = Backoff()
    reconciler.note_restarts(actions, pod, b, NOW, attempted=["foo2", "foo3"])
    assert b.get(reconciler.backoff_key(pod, "foo1")) == 0
    assert b.get(reconciler.backoff_key(pod, "foo2")) == 10


# ----------------------------------------------------------------------------------------------- helpers


def test_sandbox_change_rules_directly() -> None:
    pod = _pod()
    rt = base_runtime()
    assert reconciler.sandbox_change(pod, rt.build()) == reconciler.SandboxChange(create=False, attempt=0,
                                                                                  sandbox_id="sandboxID")
    assert reconciler.network_mode(_pod(hostNetwork=True)) is NamespaceMode.NODE
    assert reconciler.network_mode(pod) is NamespaceMode.POD


@pytest.mark.parametrize(("restart_policy", "state", "exit_code", "expected"), [
    ("Always", None, 0, True),
    ("Never", None, 0, True),
    ("Always", State.RUNNING, 0, False),
    ("Never", State.UNKNOWN, 0, True),
    ("Never", State.CREATED, 0, True),
    ("Never", State.EXITED, 1, False),
    ("OnFailure", State.EXITED, 0, False),
    ("OnFailure", State.EXITED, 1, True),
    ("Always", State.EXITED, 0, True),
])
def test_should_restart(restart_policy: str, state: State | None, exit_code: int, expected: bool) -> None:
    pod = _pod(restartPolicy=restart_policy)
    containers = () if state is None else (ContainerInfo(id="c", name="foo1", state=state, exit_code=exit_code),)
    rt = podstate.RuntimePodStatus(uid="12345678", containers=containers)
    assert reconciler.should_restart(pod.spec.containers[0], pod, rt) is expected


@pytest.mark.parametrize(("pod_policy", "own", "rules", "state", "exit_code", "expected"), [
    ("Always", "Never", None, State.EXITED, 0, False),
    ("Always", "Never", None, State.EXITED, 1, False),
    ("Never", "Always", None, State.EXITED, 0, True),
    ("Never", "OnFailure", None, State.EXITED, 0, False),
    ("Never", "OnFailure", None, State.EXITED, 1, True),
    ("Never", "Never", IN_42, State.EXITED, 42, True),
    ("Never", "Never", IN_42, State.EXITED, 1, False),
    ("Always", "Never", IN_42, State.EXITED, 1, False),
    ("Always", "Never", None, State.CREATED, 0, True),   # never ran: started whatever the policy
    ("Always", "Never", None, State.UNKNOWN, 0, True),
    ("Always", "Never", None, None, 0, True),
    ("Never", "Always", None, State.RUNNING, 0, False),
], ids=str)
def test_should_restart_with_a_container_policy(pod_policy: str, own: str, rules: list[dict[str, Any]] | None,
                                                state: State | None, exit_code: int, expected: bool) -> None:
    body = base_body()
    own_policy(pod_policy, own, 0, rules=rules)(body)
    pod = pod_from_body(body)
    containers = () if state is None else (ContainerInfo(id="c", name="foo1", state=state, exit_code=exit_code),)
    rt = podstate.RuntimePodStatus(uid="12345678", containers=containers)
    assert reconciler.should_restart(pod.spec.containers[0], pod, rt) is expected


def test_should_restart_never_for_a_deleted_pod() -> None:
    body = base_body()
    body["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    pod = pod_from_body(body)
    assert not reconciler.should_restart(pod.spec.containers[0], pod, podstate.RuntimePodStatus(uid="12345678"))


# --------------------------------------------------------------------- why each start: what kopflet explain shows

NEW = reconciler.NEW_SANDBOX_START
ReasonCase = tuple[str, Callable[[dict[str, Any]], None] | None, Callable[[Runtime], None] | None, dict[str, str]]

START_REASONS: dict[str, ReasonCase] = {
    "a new pod: everything starts in the new sandbox": (
        "plain", None, lambda rt: (rt.sandboxes.clear(), rt.containers.clear()),
        {"foo1": NEW, "foo2": NEW, "foo3": NEW}),
    "an exited container under the pod's Always": (
        "plain", None, lambda rt: (rt.exited(1, 137), rt.c(1, reason="Error")),
        {"foo2": "exited 137 (Error), restartPolicy Always"}),
    "a failed container under its own OnFailure": (
        "plain", own_policy("Never", "OnFailure", 1), lambda rt: rt.exited(1, 3),
        {"foo2": "exited 3, container restartPolicy OnFailure"}),
    "a restart rule matched the exit code": (
        "plain", own_policy("Never", "Never", 1, rules=IN_42), lambda rt: rt.exited(1, 42),
        {"foo2": "exited 42, restartPolicyRules Restart (exit code In [42])"}),
    "a container created but never started": (
        "plain", None, lambda rt: rt.c(1, state=State.CREATED), {"foo2": 'in "created" state'}),
    "a container with no instance": ("plain", None, _keep_only(0, 2), {"foo2": reconciler.NOT_STARTED}),
    "a failed liveness probe kills and restarts": (
        "plain", None, LIVENESS_FAILED, {"foo2": "Container foo2 failed liveness probe, will be restarted"}),
    "the first init container of a pod that has run none": (
        "init", None, lambda rt: rt.containers.clear(), {"init1": reconciler.NOT_STARTED}),
    "the next init container once the previous one exited 0": (
        "init", None, lambda rt: (_keep_only(2)(rt), rt.c(0, id="initid1", name="init1", reason="Completed")),
        {"init2": "init container init1 exited 0 (Completed)"}),
    "a failed init container under OnFailure": (
        "init", policy("OnFailure"), lambda rt: rt.exited(2, 1), {"init3": "exited 1, restartPolicy OnFailure"}),
    "an init container in unknown state": (
        "init", None, lambda rt: rt.c(2, state=State.UNKNOWN),
        {"init3": 'Init container is in "unknown" state, try killing it before restart'}),
    "a started sidecar lets the next init container start": (
        "sidecar", None, _keep_only(0), {"sidecar2": "init container sidecar1 started"}),
    "sidecars whose instances are gone start again": (
        "sidecar", None, _keep_only(2), {"sidecar1": "no instance in the active sandbox",
                                         "sidecar2": "no instance in the active sandbox",
                                         **{f"foo{i}": reconciler.NOT_STARTED for i in (1, 2, 3)}}),
    "an exited sidecar": (
        "sidecar", None, lambda rt: rt.exited(0, 1),
        {"sidecar1": "exited 1, container restartPolicy Always",
         **{f"foo{i}": reconciler.NOT_STARTED for i in (1, 2, 3)}}),
}


@pytest.mark.parametrize(("base", "mutate_pod", "mutate_rt", "expected"), list(START_REASONS.values()),
                         ids=list(START_REASONS))
def test_each_start_carries_the_rule_that_fired(base: str, mutate_pod: Any, mutate_rt: Any,
                                                expected: dict[str, str]) -> None:
    actions = _run_sidecars(mutate_pod, mutate_rt) if base == "sidecar" else \
        _run(base == "init", mutate_pod, mutate_rt)
    assert set(actions.start_reasons) >= {*actions.init_containers_to_start, *actions.containers_to_start}
    assert dict(actions.start_reasons) == expected


def test_a_container_held_back_keeps_its_reason_and_the_seconds_left() -> None:
    pod = _pod()
    b = _backoff_with(pod, "foo2", [NOW - 40, NOW - 20])  # delay now 20s
    rt = base_runtime()
    rt.exited(1, 1, at=NOW - 5)
    actions = compute_pod_actions(pod, rt.build(), backoff=b, now=NOW)
    assert actions.containers_in_backoff and actions.containers_to_start == ()
    assert actions.start_reasons == {"foo2": "exited 1, restartPolicy Always"}
    assert actions.backoff_remaining == {"foo2": 15.0}
    # explanatory fields are not part of the decision: the same steps compare equal without them
    assert dataclasses.replace(actions, start_reasons={}, backoff_remaining={}) == actions
