"""The RestartAllContainers rule action (RestartAllContainersOnContainerExits, beta and on at v1.37), pure parts.

Modelled on upstream's five e2e specs (test/e2e/common/node/container_restart_policy.go, "Pod Extended
(RestartAllContainers)"): each pod goes through the three syncs upstream makes of a reset, with the status
written between them as the agent writes it:

1. a container exits with a code its RestartAllContainers rule matches: the status shows that exit and
   AllContainersRestarting=True (reason RestartAllContainersStarted); the reconciler, told so, only removes every
   init and regular container instance (`containers_to_reset`), killing those still running, sources last;
2. nothing left on the runtime (the sandbox kept): every container waits with reason RestartingAllContainers,
   lastState terminated (RestartingAllContainers, 137), restartCount + 1; the condition is False again, the phase
   what it was (Running; Pending for the pod whose init container exited) and so is Initialized; the
   reconciler starts the pod from its first init container;
3. the new instances run: what the e2e spec's `validateAllContainersRestarted` checks holds (restartCount > 0
   and a lastState.terminated for every container it names).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from kopflet.api import spec
from kopflet.backoff import Backoff
from kopflet.container.podstate import ContainerInfo, RuntimePodStatus, SandboxInfo, State
from kopflet.kuberuntime import container_config, reconciler
from kopflet.kuberuntime.reconciler import ResetInfo, compute_pod_actions
from kopflet.nodestatus import setters
from kopflet.status import generate

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
NS = 1_000_000_000
SANDBOX = SandboxInfo(id="sb", attempt=0, ready=True, ip="10.0.0.5")
RULES = [{"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}]


def _c(name: str, *, policy: str | None = None, rules: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "image": "busybox"}
    if policy is not None:
        body["restartPolicy"] = policy
    if rules:
        body["restartPolicyRules"] = RULES
    return body


def _pod(containers: list[dict[str, Any]], inits: Sequence[dict[str, Any]] = (),
         restart_policy: str = "Never") -> spec.Pod:
    return spec.pod_from_body({"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
                               "spec": {"restartPolicy": restart_policy, "initContainers": list(inits),
                                        "containers": containers}})


# The five e2e pods (restartPolicy Never unless said; the rule is In [42]).
REGULAR_EXIT = _pod([_c("source-container", policy="Never", rules=True), _c("regular")],
                    [_c("init"), _c("sidecar", policy="Always")])
SIDECAR_EXIT = _pod([_c("regular")], [_c("init"), _c("sidecar", policy="Always"),
                                      _c("source-sidecar", policy="Always", rules=True)])
INIT_EXIT = _pod([_c("regular")], [_c("sidecar", policy="Always"), _c("init"),
                                   _c("source-init", policy="Never", rules=True)])
TWO_RULES = _pod([_c("source-container", policy="Never", rules=True), _c("regular", policy="Never", rules=True)])
PREVIOUSLY_RESTARTED = _pod([_c("source-container", policy="Always", rules=True), _c("regular")],
                            restart_policy="Always")


def _info(name: str, state: State, *, code: int = 0, restarts: int = 0, at: int = 100,
          cid: str | None = None) -> ContainerInfo:
    return ContainerInfo(id=cid or f"{name}-{restarts}", name=name, state=state, exit_code=code,
                         restart_count=restarts, created_at=at * NS, started_at=at * NS,
                         finished_at=(at + 5) * NS if state is State.EXITED else 0, image="busybox",
                         sandbox_id="sb", hash=spec.container_hash({"name": name, "image": "busybox"}))


def _runtime(*infos: ContainerInfo) -> RuntimePodStatus:
    ordered = sorted(infos, key=lambda c: c.created_at, reverse=True)
    return RuntimePodStatus(uid="u", name="p", namespace="ns", sandboxes=(SANDBOX,), containers=tuple(ordered))


def _status(pod: spec.Pod, runtime: RuntimePodStatus, previous: Mapping[str, Any]) -> dict[str, Any]:
    return generate.compute_pod_status(pod, runtime, previous=previous, now=NOW)


def _by_name(st: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {s["name"]: s for s in (*st.get("initContainerStatuses", ()), *st["containerStatuses"])}


def _condition(st: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in st["conditions"] if c["type"] == kind), None)


def _actions(pod: spec.Pod, runtime: RuntimePodStatus, st: Mapping[str, Any]) -> reconciler.PodActions:
    """What the worker asks: the reset flag read off the status generated for this sync."""
    return compute_pod_actions(pod, runtime, backoff=Backoff(), now=1000.0,
                               restart_all_containers=generate.all_containers_restarting(st))


def e2e_all_restarted(st: Mapping[str, Any], names: Sequence[str]) -> bool:
    """Upstream e2e `validateAllContainersRestarted` on one status: every named container has restartCount > 0
    and a lastState.terminated."""
    statuses = _by_name(st)
    return all(statuses[n].get("restartCount", 0) > 0 and (statuses[n].get("lastState") or {}).get("terminated")
               for n in names)


# (pod, runtime before the exit, runtime when the rule fires, expected reset order, the e2e's names,
#  runtime once started again)
SPECS: dict[str, tuple[Any, ...]] = {
    "should restart all containers on regular container exit": (
        REGULAR_EXIT,
        [_info("init", State.EXITED, at=10), _info("sidecar", State.RUNNING, at=20),
         _info("source-container", State.RUNNING, at=30), _info("regular", State.RUNNING, at=31)],
        {"source-container": (State.EXITED, 42)},
        [ResetInfo(container_id="regular-0", name="regular", kill=True),
         ResetInfo(container_id="init-0", name="init"),
         ResetInfo(container_id="sidecar-0", name="sidecar", kill=True),
         ResetInfo(container_id="source-container-0", name="source-container")],
        ["init", "sidecar", "source-container", "regular"],
        ("init",), [_info("init", State.EXITED, restarts=1, at=200),
                    _info("sidecar", State.RUNNING, restarts=1, at=210),
                    _info("source-container", State.RUNNING, restarts=1, at=220),
                    _info("regular", State.RUNNING, restarts=1, at=221)]),
    "should restart all containers on sidecar container exit": (
        SIDECAR_EXIT,
        [_info("init", State.EXITED, at=10), _info("sidecar", State.RUNNING, at=20),
         _info("source-sidecar", State.RUNNING, at=21), _info("regular", State.RUNNING, at=30)],
        {"source-sidecar": (State.EXITED, 42)},
        [ResetInfo(container_id="regular-0", name="regular", kill=True),
         ResetInfo(container_id="init-0", name="init"),
         ResetInfo(container_id="sidecar-0", name="sidecar", kill=True),
         ResetInfo(container_id="source-sidecar-0", name="source-sidecar")],
        ["init", "sidecar", "source-sidecar", "regular"],
        ("init",), [_info("init", State.EXITED, restarts=1, at=200),
                    _info("sidecar", State.RUNNING, restarts=1, at=210),
                    _info("source-sidecar", State.RUNNING, restarts=1, at=211),
                    _info("regular", State.RUNNING, restarts=1, at=220)]),
    "should restart init and sidecar containers on init container exit": (
        INIT_EXIT,
        [_info("sidecar", State.RUNNING, at=10), _info("init", State.EXITED, at=11),
         _info("source-init", State.RUNNING, at=20)],
        {"source-init": (State.EXITED, 42)},
        [ResetInfo(container_id="sidecar-0", name="sidecar", kill=True),
         ResetInfo(container_id="init-0", name="init"),
         ResetInfo(container_id="source-init-0", name="source-init")],
        ["init", "sidecar", "source-init"],
        ("sidecar",), [_info("sidecar", State.RUNNING, restarts=1, at=200),
                       _info("init", State.EXITED, restarts=1, at=201),
                       _info("source-init", State.EXITED, restarts=1, at=210),
                       _info("regular", State.RUNNING, at=220)]),
    "should allow multiple RestartAllContainers actions and not introduce a loop": (
        TWO_RULES,
        [_info("source-container", State.RUNNING, at=30), _info("regular", State.RUNNING, at=31)],
        {"source-container": (State.EXITED, 42)},
        [ResetInfo(container_id="regular-0", name="regular", kill=True),
         ResetInfo(container_id="source-container-0", name="source-container")],
        ["source-container", "regular"],
        ("source-container", "regular"), [_info("source-container", State.RUNNING, restarts=1, at=200),
                                          _info("regular", State.RUNNING, restarts=1, at=201)]),
    "should restart all containers on a previously restarted regular container exit": (
        PREVIOUSLY_RESTARTED,
        [_info("source-container", State.EXITED, code=1, at=30), _info("source-container", State.RUNNING,
                                                                       restarts=1, at=40),
         _info("regular", State.RUNNING, at=31)],
        {"source-container-1": (State.EXITED, 42)},
        [ResetInfo(container_id="source-container-0", name="source-container"),  # exit 1: no rule, a target
         ResetInfo(container_id="regular-0", name="regular", kill=True),
         ResetInfo(container_id="source-container-1", name="source-container")],
        ["source-container", "regular"],
        ("source-container", "regular"), [_info("source-container", State.RUNNING, restarts=2, at=200),
                                          _info("regular", State.RUNNING, restarts=1, at=201)]),
}


def _exit(infos: list[ContainerInfo], changes: Mapping[str, tuple[State, int]]) -> list[ContainerInfo]:
    out = []
    for info in infos:
        change = changes.get(info.id if info.id in changes else info.name)
        if change is not None and info.state is State.RUNNING:
            info = ContainerInfo(**{**info.__dict__, "state": change[0], "exit_code": change[1],
                                    "finished_at": info.started_at + 5 * NS})
        out.append(info)
    return out


@pytest.mark.parametrize("case", list(SPECS), ids=list(SPECS))
def test_the_e2e_pods_through_a_reset(case: str) -> None:
    pod, before, exits, resets, names, first_starts, after = SPECS[case]
    assert spec.all_containers_could_restart(pod.spec)

    # Running, before the exit: the condition is there, False (the pod has a RestartAllContainers rule).
    running = _status(pod, _runtime(*before), {})
    assert _condition(running, generate.ALL_CONTAINERS_RESTARTING)["status"] == "False"
    assert not generate.all_containers_restarting(running)

    # 1. The exit: the status written before the reset shows it and AllContainersRestarting True.
    exited = _runtime(*_exit(before, exits))
    pre = _status(pod, exited, running)
    condition = _condition(pre, generate.ALL_CONTAINERS_RESTARTING)
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "True", "RestartAllContainersStarted", "container exited with restart policy rule")
    assert pre["phase"] == ("Pending" if pod is INIT_EXIT else "Running")
    source = next(n for n in names if n.startswith("source"))
    assert _by_name(pre)[source]["state"]["terminated"]["exitCode"] == 42
    actions = _actions(pod, exited, pre)
    assert actions == reconciler.PodActions(sandbox_id="sb", containers_to_reset=tuple(resets))

    # 2. All removed, the sandbox kept: every container waits to run again.
    empty = _runtime()
    post = _status(pod, empty, pre)
    assert _condition(post, generate.ALL_CONTAINERS_RESTARTING)["status"] == "False"
    assert post["phase"] == pre["phase"]  # Pending only while the pod had not initialised (the init exit)
    assert _condition(post, generate.INITIALIZED)["status"] == _condition(pre, generate.INITIALIZED)["status"] == (
        "False" if pod is INIT_EXIT else "True")  # initialised once: stays so while init containers re-run
    old = _by_name(pre)
    for name, item in _by_name(post).items():
        if "waiting" in old[name]["state"]:  # never ran (the init exit's regular container): left as it was
            assert item == {**old[name], "state": item["state"]} and "RestartingAllContainers" not in str(item)
            continue
        assert item["state"] == {"waiting": {"reason": "RestartingAllContainers", "message":
                                             "The container is removed because RestartAllContainers in place"}}
        assert item["lastState"]["terminated"]["reason"] == "RestartingAllContainers"
        assert item["lastState"]["terminated"]["exitCode"] == 137
        assert item["restartCount"] == old[name].get("restartCount", 0) + 1
    assert e2e_all_restarted(post, names)
    again = _actions(pod, empty, post)
    assert again.containers_to_reset == () and not again.kill_pod and not again.create_sandbox
    assert (*again.init_containers_to_start, *again.containers_to_start) == first_starts

    # 3. Started again (the new instances count on from the log files): what the e2e spec waits for.
    final = _status(pod, _runtime(*after), post)
    assert e2e_all_restarted(final, names)
    assert _condition(final, generate.ALL_CONTAINERS_RESTARTING)["status"] == "False"
    assert final["phase"] == "Running"
    assert not generate.all_containers_restarting(final)
    assert _actions(pod, _runtime(*after), final).containers_to_reset == ()


@pytest.mark.parametrize(("runtime", "previous", "expected"), [
    (_runtime(_info("source-container", State.EXITED, code=42)), {}, True),
    (_runtime(_info("source-container", State.EXITED, code=1)), {}, False),
    (_runtime(_info("regular", State.EXITED, code=42)), {}, False),  # "regular" has no rule in this pod
    (_runtime(_info("source-container", State.RUNNING)), {}, False),
    (_runtime(), {"containerStatuses": [{"name": "source-container", "state": {"terminated": {"exitCode": 42}}}]},
     True),
    (_runtime(), {"containerStatuses": [{"name": "source-container",
                                         "lastState": {"terminated": {"exitCode": 42}}, "state": {"waiting": {}}}]},
     False),  # only the current state counts
    (_runtime(), {"conditions": [{"type": "AllContainersRestarting", "status": "True"}]}, True),
    (_runtime(), {"conditions": [{"type": "AllContainersRestarting", "status": "False"}]}, False),
], ids=["runtime exit matches", "runtime exit 1", "no rule", "running", "API status exit matches",
        "API lastState only", "condition True", "condition False"])
def test_should_all_containers_restart(runtime: RuntimePodStatus, previous: dict[str, Any], expected: bool) -> None:
    """Upstream `ShouldAllContainersRestart` (pkg/kubelet/container/helpers.go)."""
    assert reconciler.should_all_containers_restart(REGULAR_EXIT, runtime, previous) is expected


@pytest.mark.parametrize(("phase", "runtime", "previous", "expected"), [
    ("Succeeded", _runtime(_info("source-container", State.EXITED, code=42)), {}, ("False", "PodCompleted")),
    ("Failed", _runtime(_info("source-container", State.EXITED, code=42)), {}, ("False", "PodFailed")),
    ("Running", _runtime(_info("source-container", State.EXITED, code=42)), {},
     ("True", "RestartAllContainersStarted")),
    ("Running", _runtime(_info("regular", State.RUNNING)), {}, ("False", None)),
    ("Running", _runtime(), {"conditions": [{"type": "AllContainersRestarting", "status": "True"}]},
     ("False", None)),  # all cleaned up
    ("Running", _runtime(_info("init", State.EXITED)),
     {"conditions": [{"type": "AllContainersRestarting", "status": "True"}]},
     ("True", "RestartAllContainersStarted")),  # an init container is still there
])
def test_all_containers_restarting_condition(phase: str, runtime: RuntimePodStatus, previous: dict[str, Any],
                                             expected: tuple[str, str | None]) -> None:
    """Upstream `GenerateAllContainersRestartingCondition` (pkg/kubelet/status/generate.go)."""
    condition = generate.all_containers_restarting_condition(REGULAR_EXIT, runtime, previous, phase)
    assert (condition["status"], condition.get("reason")) == expected


def test_no_condition_without_a_restart_all_containers_rule() -> None:
    """Upstream adds the condition only when `AllContainersCouldRestart`."""
    pod = _pod([_c("app", policy="Never", rules=False)])
    assert not spec.all_containers_could_restart(pod.spec)
    st = _status(pod, _runtime(_info("app", State.RUNNING)), {})
    assert _condition(st, generate.ALL_CONTAINERS_RESTARTING) is None


def test_a_sandbox_to_recreate_kills_the_pod_instead_of_resetting() -> None:
    """Upstream computePodActions with restartAllContainers keeps KillPod/CreateSandbox from PodSandboxChanged;
    SyncPod then kills the pod and leaves ContainersToReset alone, and nothing is started."""
    dead = RuntimePodStatus(uid="u", name="p", namespace="ns",
                            sandboxes=(SandboxInfo(id="sb", attempt=2, ready=False),),
                            containers=(_info("source-container", State.EXITED, code=42),))
    actions = compute_pod_actions(REGULAR_EXIT, dead, backoff=Backoff(), now=1000.0, restart_all_containers=True)
    assert actions == reconciler.PodActions(
        kill_pod=True, create_sandbox=True, sandbox_id="sb", attempt=3,
        reason="No ready sandbox for pod can be found. Need to start a new one")


def test_a_pod_being_deleted_is_killed_not_reset() -> None:
    deleting = spec.pod_from_body({"metadata": {"name": "p", "namespace": "ns", "uid": "u",
                                                "deletionTimestamp": "2026-01-01T00:00:00Z"},
                                   "spec": {"restartPolicy": "Never",
                                            "containers": [_c("source-container", policy="Never", rules=True)]}})
    actions = compute_pod_actions(deleting, _runtime(_info("source-container", State.EXITED, code=42)),
                                  backoff=Backoff(), now=1000.0, restart_all_containers=True)
    assert actions.kill_pod and actions.containers_to_reset == ()


def test_phase_counts_a_removed_container_as_restarting() -> None:
    """Upstream getPhase: a termination with reason RestartingAllContainers is restartable, even for a container
    whose own policy says Never; the same exit code with another reason is not."""
    removed = {"exitCode": 137, "reason": "RestartingAllContainers"}
    statuses = [{"name": "source-container", "state": {"waiting": {}}, "lastState": {"terminated": removed}},
                {"name": "regular", "state": {"terminated": removed}}]
    assert generate.get_phase(TWO_RULES, statuses) == "Running"
    killed = {"exitCode": 137, "reason": "Error"}
    statuses = [{"name": "source-container", "state": {"terminated": killed}},
                {"name": "regular", "state": {"terminated": killed}}]
    assert generate.get_phase(TWO_RULES, statuses) == "Failed"


def test_initialized_stays_true_while_init_containers_rerun() -> None:
    """Upstream GeneratePodInitializedCondition with RestartAllContainersOnContainerExits: once True, kept."""
    statuses = [{"name": "init", "state": {"running": {}}, "ready": False},
                {"name": "sidecar", "state": {"waiting": {}}}, {"name": "source-container", "state": {"waiting": {}}},
                {"name": "regular", "state": {"waiting": {}}}]
    assert generate.initialized_condition(REGULAR_EXIT, statuses, "Pending")["status"] == "False"
    kept = generate.initialized_condition(REGULAR_EXIT, statuses, "Pending",
                                          [{"type": "Initialized", "status": "True"}])
    assert kept == {"type": "Initialized", "status": "True"}


def test_last_state_and_restart_count_carry_over_a_removed_instance() -> None:
    """convertContainerStatus with the gate on: the old status's termination becomes lastState when the
    container id changed, and the restart count never goes down."""
    pod = _pod([_c("app")], restart_policy="Always")
    previous = {"containerStatuses": [{"name": "app", "containerID": "containerd://old", "restartCount": 3,
                                       "state": {"terminated": {"exitCode": 2, "reason": "Error"}}}]}
    st = _status(pod, _runtime(_info("app", State.RUNNING, restarts=0, cid="new")), previous)
    app = _by_name(st)["app"]
    assert app["lastState"] == {"terminated": {"exitCode": 2, "reason": "Error"}}
    assert app["restartCount"] == 4  # running after a terminated status with a count >= the runtime's: + 1


@pytest.mark.parametrize(("names", "expected"), [
    ([], 0), (["0.log"], 1), (["0.log", "1.log", "1.log.20260101-000000.gz"], 2), (["3.log.tmp"], 4),
    (["x.log", "log", "12"], 0), (["9.log", "10.log"], 11),
])
def test_restart_count_from_log_names(names: list[str], expected: int) -> None:
    """Upstream `calcRestartCountByLogDir`: a new instance with none left on the runtime never reuses a log."""
    assert container_config.restart_count_from_log_names(names) == expected


def test_the_node_declares_the_feature() -> None:
    """The scheduler's NodeDeclaredFeatures filter sends pods with a RestartAllContainers rule only to nodes that
    declare RestartAllContainersOnContainerExits (component-helpers nodedeclaredfeatures/restartallcontainers)."""
    features = setters.declared_features()
    assert "RestartAllContainersOnContainerExits" in features
    assert features == sorted(set(features))  # the apiserver rejects an unsorted or repeated list
