"""kopflet.pods.decide: one pod sync's decision, table-driven from one base pod as upstream's TestComputePodActions.

Each case edits the base observation (the watch object, the runtime, the worker's memory) and states what the
plan must hold: its lifecycle, whether it writes a status (and what), kills, runs the executor, deletes, which
events it posts and when the worker looks again.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable
from typing import Any

import pytest

from kopflet.allocation import policy
from kopflet.api import spec
from kopflet.backoff import Backoff
from kopflet.config.settings import AgentConfig
from kopflet.container.podstate import ContainerInfo, RuntimePodStatus, SandboxInfo, State
from kopflet.container.sync_result import SyncResult, Waiting
from kopflet.lifecycle import admission
from kopflet.pods import decide
from kopflet.pods.decide import Lifecycle, Memory, Observation, ProbeResults

UID = "12345678"
NOW = datetime.datetime(2026, 6, 1, 12, 0, 0, tzinfo=datetime.UTC)
S = 1_000_000_000
CFG = AgentConfig(node_name="node-1", node_ip="10.0.0.9")
NODE = admission.NodeInfo(name="node-1", allocatable={"cpu": "2", "memory": "4Gi", "pods": "110"})


def base_body() -> dict[str, Any]:
    return {
        "metadata": {"name": "foo", "namespace": "ns", "uid": UID, "generation": 1,
                     "creationTimestamp": "2026-06-01T11:59:00Z"},
        "spec": {"nodeName": "node-1", "containers": [{"name": "web", "image": "busybox",
                                                        "resources": {"requests": {"cpu": "100m"}}}]},
        "status": {"phase": "Running", "startTime": "2026-06-01T11:59:01Z", "qosClass": "Burstable"},
    }


def _hash(body: dict[str, Any]) -> str:
    return spec.container_hash(body["spec"]["containers"][0])


def running(body: dict[str, Any]) -> RuntimePodStatus:
    return RuntimePodStatus(
        uid=UID, name="foo", namespace="ns",
        sandboxes=(SandboxInfo(id="sb1", ready=True, ip="10.1.0.5"),),
        containers=(ContainerInfo(id="c1", name="web", state=State.RUNNING, image="busybox", sandbox_id="sb1",
                                  hash=_hash(body), started_at=int((NOW.timestamp() - 50) * S)),))


def exited(body: dict[str, Any], code: int = 1) -> RuntimePodStatus:
    view = running(body)
    c = dataclasses.replace(view.containers[0], state=State.EXITED, exit_code=code,
                            finished_at=int((NOW.timestamp() - 5) * S))
    return dataclasses.replace(view, containers=(c,))


def stopped(body: dict[str, Any]) -> RuntimePodStatus:
    view = exited(body, 0)
    return dataclasses.replace(view, sandboxes=(dataclasses.replace(view.sandboxes[0], ready=False),))


def empty(_: dict[str, Any]) -> RuntimePodStatus:
    return RuntimePodStatus(uid=UID)


def observe(body: dict[str, Any], runtime: Callable[[dict[str, Any]], RuntimePodStatus] = running, *,
            memory: Memory | None = None, gone: bool = False, backoff: Backoff | None = None,
            allocated: bool = True, node: admission.NodeInfo | None = None,
            others: tuple[tuple[spec.Pod, dict[str, Any]], ...] = ()) -> Observation:
    pod, error = None, ""
    if not gone:
        try:
            pod = spec.pod_from_body(body)
        except spec.SpecError as exc:
            error = str(exc)
    return Observation(body=body, gone=gone, pod=pod, spec_error=error, runtime=runtime(body),
                       probes=ProbeResults(), node=node,
                       allocated=policy.PodAllocation.from_pod(pod) if pod is not None and allocated else None,
                       actuated=policy.PodAllocation.from_pod(pod) if pod is not None and allocated else None,
                       memory=memory or Memory(admitted=True), backoff=backoff or Backoff(), others=others,
                       now=NOW)


def test_a_running_pod_in_sync_writes_its_status_and_changes_nothing() -> None:
    plan = decide.decide(observe(base_body()), CFG)
    assert plan.lifecycle is Lifecycle.SYNCING
    assert plan.status is not None and plan.status["phase"] == "Running"
    assert not plan.changes_runtime and not plan.kill_pod and not plan.delete
    assert plan.actions is not None  # the executor still runs: volumes are refreshed on every sync
    assert plan.wake_after == CFG.resync_period
    assert not plan.memory.followup


def test_a_new_pod_is_admitted_its_allocation_recorded_and_its_sandbox_created() -> None:
    body = base_body()
    body["status"] = {"phase": "Pending"}
    plan = decide.decide(observe(body, empty, memory=Memory(), allocated=False, node=NODE), CFG)
    assert plan.lifecycle is Lifecycle.SYNCING and plan.admitted and plan.memory.admitted
    assert plan.allocate is not None and plan.allocate.uid == UID
    assert plan.actions is not None and plan.actions.create_sandbox and plan.actions.containers_to_start == ("web",)
    assert plan.status is not None and plan.status["phase"] == "Pending"  # written before the steps, as upstream
    assert plan.changes_runtime and plan.wake_after == 0 and plan.memory.followup


def test_admission_needs_the_node() -> None:
    body = base_body()
    body["status"] = {"phase": "Pending"}
    pod = spec.pod_from_body(body)
    assert decide.needs_node_info(pod, body["status"], empty(body), Memory(), None)
    assert not decide.needs_node_info(pod, body["status"], empty(body), Memory(admitted=True), None)
    assert not decide.needs_node_info(pod, {"phase": "Running"}, running(body), Memory(), None)


def test_a_pod_that_does_not_fit_is_rejected_once_with_three_status_fields() -> None:
    body = base_body()
    body["status"] = {"phase": "Pending", "qosClass": "Burstable"}
    body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "3"}}
    plan = decide.decide(observe(body, empty, memory=Memory(), allocated=False, node=NODE), CFG)
    assert plan.lifecycle is Lifecycle.REJECTED and not plan.admitted and not plan.memory.admitted
    assert plan.status == {"phase": "Failed", "qosClass": "Burstable", "reason": "OutOfcpu",
                           "message": "Pod was rejected: Node didn't have enough resource: cpu, requested: 3000, "
                                      "used: 0, capacity: 2000"}
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "OutOfcpu")]
    assert plan.actions is None and not plan.changes_runtime


def test_an_invalid_spec_is_reported_once() -> None:
    body = base_body()
    body["spec"]["containers"][0]["image"] = ""
    plan = decide.decide(observe(body), CFG)
    assert plan.lifecycle is Lifecycle.INVALID and plan.status is None and plan.actions is None
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "Failed")]
    again = decide.decide(observe(body, memory=plan.memory), CFG)
    assert again.events == ()


def test_a_deleted_pod_is_torn_down() -> None:
    plan = decide.decide(observe(base_body(), gone=True), CFG)
    assert plan.lifecycle is Lifecycle.GONE and plan.teardown and plan.stop_probes and plan.status is None
    assert plan.pod.uid == UID


def deleting(body: dict[str, Any]) -> dict[str, Any]:
    body["metadata"]["deletionTimestamp"] = "2026-06-01T11:59:59Z"
    body["metadata"]["deletionGracePeriodSeconds"] = 30
    return body


def test_a_deleting_running_pod_is_killed_before_any_status() -> None:
    plan = decide.decide(observe(deleting(base_body())), CFG)
    assert plan.lifecycle is Lifecycle.TERMINATING and plan.kill_pod and plan.status is None and not plan.delete
    assert plan.wake_after == 0 and plan.memory.kill_sent


def test_a_pod_that_outlived_its_kill_is_looked_at_again_shortly() -> None:
    plan = decide.decide(observe(deleting(base_body()), memory=Memory(admitted=True, kill_sent=True)), CFG)
    assert not plan.kill_pod and plan.wake_after == decide.STILL_STOPPING and not plan.memory.kill_sent


def test_a_deleting_stopped_pod_gets_its_terminal_status_then_is_deleted() -> None:
    plan = decide.decide(observe(deleting(base_body()), stopped), CFG)
    assert plan.lifecycle is Lifecycle.TERMINATING and plan.delete and not plan.kill_pod
    assert plan.status is not None and plan.status["phase"] == "Succeeded"


def test_a_terminal_pod_with_something_running_is_stopped_then_its_status_written() -> None:
    body = base_body()
    body["status"]["phase"] = "Failed"
    plan = decide.decide(observe(body), CFG)
    assert plan.lifecycle is Lifecycle.TERMINATED and plan.kill_pod and plan.stop_probes and plan.status is None
    after = decide.decide(observe(body, stopped, memory=plan.memory), CFG)
    assert after.status is not None and not after.kill_pod and not after.memory.terminal_write_due
    quiet = decide.decide(observe(body, stopped, memory=after.memory), CFG)
    assert quiet.status is None and quiet.actions is None  # a terminal phase already written stays


def test_a_terminated_pods_volumes_are_released_once_nothing_runs() -> None:
    body = base_body()
    body["status"]["phase"] = "Succeeded"
    killing = decide.decide(observe(body), CFG)
    assert killing.kill_pod and not killing.release_volumes  # not while something still runs
    done = decide.decide(observe(body, stopped, memory=killing.memory), CFG)
    assert done.release_volumes and done.memory.volumes_released
    again = decide.decide(observe(body, stopped, memory=done.memory), CFG)
    assert not again.release_volumes  # once
    running = base_body()
    assert not decide.decide(observe(running), CFG).release_volumes


def test_past_its_deadline_a_pod_is_killed_with_one_event_then_failed() -> None:
    body = base_body()
    body["spec"]["activeDeadlineSeconds"] = 10
    plan = decide.decide(observe(body), CFG)
    assert plan.lifecycle is Lifecycle.TERMINATED and plan.kill_pod
    assert [(e.reason) for e in plan.events] == ["DeadlineExceeded"]
    after = decide.decide(observe(body, stopped, memory=plan.memory), CFG)
    assert after.events == () and after.status is not None
    assert (after.status["phase"], after.status["reason"]) == ("Failed", "DeadlineExceeded")


def test_a_crash_looping_container_shows_crash_loop_back_off_without_a_step() -> None:
    body = base_body()
    key_pod = spec.pod_from_body(body)
    backoff = Backoff()
    from kopflet.kuberuntime import reconciler
    backoff.next(reconciler.backoff_key(key_pod, "web"), NOW.timestamp() - 5, event_time=NOW.timestamp() - 5)
    plan = decide.decide(observe(body, exited, backoff=backoff), CFG)
    assert plan.actions is not None and plan.actions.containers_to_start == ()
    assert not plan.changes_runtime
    waiting = plan.status["containerStatuses"][0]["state"]["waiting"]  # type: ignore[index]
    assert waiting["reason"] == "CrashLoopBackOff"
    assert 0 < plan.wake_after <= 10


def test_right_after_a_failed_start_only_the_status_is_written_until_the_error_backoff() -> None:
    body = base_body()
    last = SyncResult(waiting={"web": Waiting("CreateContainerConfigError", 'configmap "x" not found')})
    plan = decide.decide(observe(body, exited, memory=Memory(admitted=True, last=last, followup=True)), CFG)
    assert plan.actions is None and not plan.changes_runtime
    waiting = plan.status["containerStatuses"][0]["state"]["waiting"]  # type: ignore[index]
    assert waiting == {"reason": "CreateContainerConfigError", "message": 'configmap "x" not found'}
    assert plan.wake_after == decide.ERROR_RETRY
    retry = decide.decide(observe(body, exited, memory=plan.memory), CFG)  # woken later: tried again
    assert retry.actions is not None and retry.actions.containers_to_start == ("web",) and retry.wake_after == 0


def test_a_follow_up_after_good_steps_does_not_run_the_executor_again() -> None:
    plan = decide.decide(observe(base_body(), memory=Memory(admitted=True, last=SyncResult(), followup=True)), CFG)
    assert plan.actions is None and plan.status is not None and plan.wake_after == CFG.resync_period


def test_the_first_time_all_containers_run_the_start_is_observed_once() -> None:
    body = base_body()
    body["status"] = {"phase": "Pending"}
    plan = decide.decide(observe(body), CFG)
    assert plan.observe_start and plan.memory.start_observed
    assert not decide.decide(observe(body, memory=plan.memory), CFG).observe_start


def resized(body: dict[str, Any], cpu: str) -> dict[str, Any]:
    body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu}}
    body["metadata"]["generation"] = 2
    return body


def test_a_resize_that_fits_is_accepted_and_recorded() -> None:
    granted = spec.pod_from_body(base_body())
    obs = dataclasses.replace(observe(resized(base_body(), "200m"), node=NODE),
                              allocated=policy.PodAllocation.from_pod(granted),
                              actuated=policy.PodAllocation.from_pod(granted))
    assert decide.needs_node_info(obs.pod, obs.body["status"], obs.runtime, obs.memory, obs.allocated)  # type: ignore[arg-type]
    plan = decide.decide(obs, CFG)
    assert plan.allocate is not None
    assert [e.reason for e in plan.events] == ["ResizeStarted"]
    assert policy.POD_RESIZE_IN_PROGRESS in (plan.memory.resize_conditions or {})


def test_a_resize_that_does_not_fit_now_is_deferred_and_retried() -> None:
    granted = spec.pod_from_body(base_body())
    obs = dataclasses.replace(observe(resized(base_body(), "5"), node=NODE),
                              allocated=policy.PodAllocation.from_pod(granted),
                              actuated=policy.PodAllocation.from_pod(granted))
    plan = decide.decide(obs, CFG)
    assert plan.allocate is None
    assert [e.reason for e in plan.events] == ["ResizeDeferred"]
    assert plan.memory.resize_conditions is not None
    assert plan.memory.resize_conditions[policy.POD_RESIZE_PENDING]["reason"] == "Deferred"
    assert plan.wake_after <= decide.PENDING_RESIZE_RETRY


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_terminal_pods_never_need_the_node(phase: str) -> None:
    body = base_body()
    body["status"]["phase"] = phase
    pod = spec.pod_from_body(body)
    assert not decide.needs_node_info(pod, body["status"], stopped(body), Memory(), None)


def test_an_evicted_pod_is_killed_with_the_evictions_grace_then_failed_evicted() -> None:
    from kopflet.eviction import helpers as eviction

    body = base_body()
    evicted = eviction.evicted_status("The node was low on resource: memory. ", generation=1, now=NOW)
    order = decide.Eviction(status=evicted, grace_period=1)
    plan = decide.decide(dataclasses.replace(observe(body), eviction=order), CFG)
    assert plan.lifecycle is Lifecycle.TERMINATED and plan.kill_pod and plan.kill_grace == 1
    assert plan.status is None  # the terminal phase waits for the containers to stop
    after = decide.decide(dataclasses.replace(observe(body, stopped, memory=plan.memory), eviction=order), CFG)
    assert after.status is not None and not after.kill_pod
    assert (after.status["phase"], after.status["reason"]) == ("Failed", "Evicted")
    assert after.status["message"] == "The node was low on resource: memory. "
    targets = [c for c in after.status["conditions"] if c["type"] == "DisruptionTarget"]
    assert [(c["status"], c["reason"]) for c in targets] == [("True", "TerminationByKubelet")]
    assert len({c["type"] for c in after.status["conditions"]}) == len(after.status["conditions"])


@pytest.mark.parametrize(("pressure", "requests", "reason"), [
    pytest.param(("MemoryPressure",), {}, "Evicted", id="BestEffort under memory pressure"),
    pytest.param(("MemoryPressure",), {"cpu": "100m"}, None, id="Burstable under memory pressure"),
    pytest.param(("DiskPressure",), {"cpu": "100m"}, "Evicted", id="anything under disk pressure"),
    pytest.param((), {}, None, id="no pressure"),
])
def test_admission_under_node_pressure_is_the_eviction_managers(pressure: tuple[str, ...],
                                                                requests: dict[str, str], reason: str | None) -> None:
    body = base_body()
    body["status"] = {"phase": "Pending"}
    body["spec"]["containers"][0]["resources"] = {"requests": requests} if requests else {}
    node = dataclasses.replace(NODE, pressure=pressure)
    plan = decide.decide(observe(body, empty, memory=Memory(), allocated=False, node=node), CFG)
    if reason is None:
        assert plan.lifecycle is Lifecycle.SYNCING
    else:
        assert plan.lifecycle is Lifecycle.REJECTED and plan.status is not None
        assert plan.status["reason"] == reason
        assert plan.status["message"] == f"Pod was rejected: The node had condition: [{pressure[0]}]. "


@pytest.mark.parametrize(("shutting_down", "pressure", "reason"), [
    pytest.param(True, (), "NodeShutdown", id="the node shuts down"),
    pytest.param(True, ("DiskPressure",), "Evicted", id="the eviction manager's admit runs first"),
    pytest.param(False, (), None, id="no shutdown"),
])
def test_admission_while_the_node_shuts_down(shutting_down: bool, pressure: tuple[str, ...],
                                             reason: str | None) -> None:
    body = base_body()
    body["status"] = {"phase": "Pending"}
    node = dataclasses.replace(NODE, pressure=pressure, shutting_down=shutting_down)
    plan = decide.decide(observe(body, empty, memory=Memory(), allocated=False, node=node), CFG)
    if reason is None:
        assert plan.lifecycle is Lifecycle.SYNCING
        return
    assert plan.lifecycle is Lifecycle.REJECTED and plan.status is not None
    assert plan.status["reason"] == reason
    if reason == "NodeShutdown":
        assert plan.status["message"] == "Pod was rejected: Pod was rejected as the node is shutting down."


def dead_instances(body: dict[str, Any]) -> RuntimePodStatus:
    """The web container restarted four times: the running instance and four dead ones, newest first."""
    view = running(body)
    dead = tuple(dataclasses.replace(view.containers[0], id=f"d{i}", state=State.EXITED, exit_code=1,
                                     finished_at=int((NOW.timestamp() - 10 * i) * S)) for i in range(1, 5))
    return dataclasses.replace(view, containers=(view.containers[0], *dead))


@pytest.mark.parametrize(("per_container", "removed"), [
    (1, ("d2", "d3", "d4")),  # upstream's default: the newest dead instance stays (kubectl logs --previous)
    (3, ("d4",)),
    (0, ("d1", "d2", "d3", "d4")),
    (-1, ()),  # no per-container limit: left to the node-wide pass
])
def test_a_sync_keeps_as_many_dead_instances_as_the_gc_policy(per_container: int, removed: tuple[str, ...]) -> None:
    cfg = dataclasses.replace(CFG, maximum_dead_containers_per_container=per_container)
    plan = decide.decide(observe(base_body(), dead_instances), cfg)
    assert plan.evict.containers == removed
