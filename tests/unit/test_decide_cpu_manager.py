"""Admission with the CPU manager's static policy in the pod's decision (kopflet.pods.decide) and in the pod worker
(kopflet.pods.workers): the exclusive CPUs are taken once, at admission, in upstream's handler order (after the
sysctls, before the predicate), recorded before anything runs, and given back once the pod is no longer active."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from kopflet.allocation import policy
from kopflet.api import spec
from kopflet.cm.cpumanager import cpu_manager
from kopflet.cm.cpumanager import manager as io
from kopflet.cm.cpumanager.cpu_manager import Pods, Snapshot
from kopflet.config.settings import AgentConfig
from kopflet.lifecycle import admission
from kopflet.pods import decide
from kopflet.pods import workers as workers_module
from kopflet.pods.decide import Lifecycle, Memory
from tests.unit.test_cpumanager_manager import TWO_CPUS, st
from tests.unit.test_decide import CFG, UID, base_body, empty, observe

STATIC = cpu_manager.new_policy("static", {}, topology=TWO_CPUS, system_reserved={}, kube_reserved={},
                                reserved_cpus="0")
NODE = admission.NodeInfo(name="node-1", allocatable={"cpu": "1", "memory": "4Gi", "pods": "110"})


def pending(cpu: str = "1", memory: str = "64Mi", limits: bool = True) -> dict[str, Any]:
    body = base_body()
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": memory}}
    if limits:
        resources["limits"] = dict(resources["requests"])
    body["spec"]["containers"][0]["resources"] = resources
    body["status"] = {"phase": "Pending"}
    return body


def admit(body: dict[str, Any], state: Any, *, node: admission.NodeInfo = NODE, pods: Pods | None = None,
          cfg: AgentConfig = CFG) -> decide.Plan:
    obs = observe(body, empty, memory=Memory(), allocated=False, node=node)
    obs = dataclasses.replace(obs, cpus=Snapshot(policy=STATIC, state=state, pods=pods or Pods()))
    return decide.decide(obs, cfg)


def test_a_guaranteed_pod_gets_its_cpu_at_admission() -> None:
    plan = admit(pending(), st("0-1"))
    assert plan.lifecycle is Lifecycle.SYNCING and plan.admitted
    assert plan.cpu_state == st("0", {UID: {"web": "1"}})
    assert plan.actions is not None and plan.actions.containers_to_start == ("web",)


@pytest.mark.parametrize("body", [pending("500m"), pending("1", limits=False)], ids=["fractional", "burstable"])
def test_a_pod_without_exclusive_cpus_records_the_state_unchanged(body: dict[str, Any]) -> None:
    plan = admit(body, st("0-1"))
    assert plan.admitted and plan.cpu_state == st("0-1")


def test_more_cpus_than_the_shared_pool_has_to_give() -> None:
    node = dataclasses.replace(NODE, allocatable={**NODE.allocatable, "cpu": "2"})  # as the scheduler saw it
    plan = admit(pending("2"), st("0-1"), node=node)
    assert plan.status is not None and plan.status["reason"] == "UnexpectedAdmissionError"
    assert "requested=2, available=1" in plan.status["message"]


def test_no_cpu_left_rejects_the_pod_with_upstreams_reason() -> None:
    plan = admit(pending(), st("0", {"other": {"c": "1"}}), pods=Pods(known=frozenset({"other"}),
                                                                       active={"other": frozenset({"c"})}))
    assert plan.lifecycle is Lifecycle.REJECTED and plan.cpu_state is None
    message = ("Allocate failed due to not enough cpus available to satisfy request: requested=1, available=0, "
               "which is unexpected")
    assert plan.status is not None
    assert (plan.status["phase"], plan.status["reason"], plan.status["message"]) == \
        ("Failed", "UnexpectedAdmissionError", "Pod was rejected: " + message)
    assert [(e.type, e.reason, e.message) for e in plan.events] == [("Warning", "UnexpectedAdmissionError", message)]


def test_the_cpu_managers_answer_comes_before_the_predicate() -> None:
    """Upstream runs the topology manager's handler before the predicate: the pod that wants the CPU another holds
    is refused for its CPUs, not OutOfcpu, though the node's allocatable is used up too."""
    holder = admission_pod("holder")
    plan = admit(pending(), st("0", {"holder": {"c": "1"}}),
                 pods=Pods(known=frozenset({"holder"}), active={"holder": frozenset({"c"})}))
    assert plan.status is not None and plan.status["reason"] == "UnexpectedAdmissionError"
    obs = observe(pending(), empty, memory=Memory(), allocated=False, node=NODE, others=((holder, {}),))
    assert decide.decide(obs, CFG).status["reason"] == "OutOfcpu"  # type: ignore[index]  # without the CPU manager


def test_the_sysctls_come_before_the_cpu_manager() -> None:
    body = pending()
    body["spec"]["securityContext"] = {"sysctls": [{"name": "kernel.unknown", "value": "1"}]}
    plan = admit(body, st("0", {"other": {"c": "1"}}), pods=Pods(known=frozenset({"other"}),
                                                                 active={"other": frozenset({"c"})}))
    assert plan.status is not None and plan.status["reason"] == "SysctlForbidden"


def test_a_pod_a_later_handler_rejects_keeps_no_cpus() -> None:
    body = pending()
    body["spec"]["nodeSelector"] = {"disk": "ssd"}
    plan = admit(body, st("0-1"))
    assert plan.lifecycle is Lifecycle.REJECTED and plan.status["reason"] == "NodeAffinity"  # type: ignore[index]
    assert plan.cpu_state is None


def test_an_admitted_pod_is_not_allocated_again() -> None:
    obs = observe(pending(), empty, memory=Memory(admitted=True), node=NODE)
    obs = dataclasses.replace(obs, cpus=Snapshot(policy=STATIC, state=st("0-1")))
    assert decide.decide(obs, CFG).cpu_state is None


def test_without_the_cpu_manager_nothing_is_recorded() -> None:
    plan = decide.decide(observe(pending(), empty, memory=Memory(), allocated=False, node=NODE), CFG)
    assert plan.admitted and plan.cpu_state is None


def test_a_guaranteed_pods_cpu_resize_is_infeasible_under_the_static_policy() -> None:
    body = pending("1")
    body["status"] = {"phase": "Running", "startTime": "2026-06-01T11:59:01Z", "qosClass": "Guaranteed"}
    body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "2", "memory": "64Mi"},
                                                  "limits": {"cpu": "2", "memory": "64Mi"}}
    obs = observe(body, node=NODE, allocated=False)
    granted = policy.PodAllocation.from_pod(admission_pod(UID, cpu="1"))
    obs = dataclasses.replace(obs, allocated=granted, actuated=granted)
    plan = decide.decide(obs, dataclasses.replace(CFG, cpu_manager_policy="static"))
    pending_condition = next(c for c in plan.status["conditions"]  # type: ignore[index]
                             if c["type"] == "PodResizePending")
    assert (pending_condition["reason"], pending_condition["message"]) == \
        ("Infeasible", 'Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"')


def admission_pod(uid: str, cpu: str = "1") -> spec.Pod:
    body = pending(cpu)
    body["metadata"] = {**body["metadata"], "uid": uid, "name": uid}
    return spec.pod_from_body(body)


# ------------------------------------------------------------------------------------------ the worker

async def test_the_worker_commits_the_admitted_state_before_acting(tmp_path: Path) -> None:
    """PodWorkers._sync: under the allocation lock, the CPU manager's snapshot goes into the observation and the
    plan's state is written to the checkpoint before _act runs (containers are created with it)."""
    lock = asyncio.Lock()
    cpus = io.CPUManager("static", {}, reconcile_period=10.0, topology=TWO_CPUS, system_reserved={},
                         kube_reserved={}, reserved_cpus="0", state_file=str(tmp_path / "cpu_manager_state"),
                         cri=None, lock=lock)
    await cpus.start()
    seen: dict[str, Any] = {}

    class Workers(workers_module.PodWorkers):
        async def _observe(self, worker: Any) -> decide.Observation:
            return observe(worker.body, empty, memory=worker.memory, allocated=False, node=NODE)

        async def _act(self, worker: Any, observation: decide.Observation, plan: decide.Plan) -> float:
            seen["snapshot"] = observation.cpus
            seen["affinity"] = cpus.affinity(UID, "web")
            seen["on_disk"] = (tmp_path / "cpu_manager_state").read_text()
            return 60.0

    class Allocations:
        def set_allocation(self, pod: Any) -> None:
            seen["allocated"] = pod.uid

    w = Workers.__new__(Workers)
    w.cfg, w.cpus, w.allocating, w.workers, w.allocations = CFG, cpus, lock, {}, Allocations()
    worker = workers_module._Worker(UID, pending())
    w.workers[UID] = worker
    await w._sync(worker)
    assert seen["snapshot"] is not None and seen["snapshot"].pods.known == frozenset({UID})
    assert seen["affinity"] == "1" and '"entries":{"' + UID + '":{"web":"1"}}' in seen["on_disk"]
    assert worker.memory.admitted and seen["allocated"] == UID
    # a second sync does not allocate again (the pod is admitted)
    seen.clear()
    await w._sync(worker)
    assert seen["snapshot"] is None and cpus.affinity(UID, "web") == "1"


def test_cpu_pods_counts_live_pods_and_their_containers() -> None:
    w = workers_module.PodWorkers.__new__(workers_module.PodWorkers)
    w.workers = {}
    for uid, phase, gone in (("a", "Running", False), ("b", "Succeeded", False), ("c", "Pending", True)):
        body = pending()
        body["metadata"]["uid"] = uid
        body["spec"]["initContainers"] = [{"name": "init", "image": "i"}]
        body["status"] = {"phase": phase}
        worker = workers_module._Worker(uid, body)
        worker.gone = gone
        w.workers[uid] = worker
    assert w.cpu_pods() == Pods(known=frozenset({"a", "b", "c"}), active={"a": frozenset({"init", "web"})})
