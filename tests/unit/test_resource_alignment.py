"""The CPU and memory managers aligned by the topology manager (upstream's container manager admit handler): the
CPU manager's hints (topology_hints_test.go's cases on a two-NUMA machine) and its allocation along a hint, the
combined admission on synthetic two-NUMA machines, the one-node case this host has, and the pod's decision
(kopflet.pods.decide) with both managers."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kopflet.cm import admission as resource_admission
from kopflet.cm.cpumanager import cpu_manager
from kopflet.cm.cpumanager import static_policy as cp
from kopflet.cm.cpumanager.cpu_manager import Pods
from kopflet.cm.cpumanager.cpuset import parse
from kopflet.cm.memorymanager import memory_manager
from kopflet.cm.memorymanager import static_policy as mp
from kopflet.cm.memorymanager.machine import NUMANode
from kopflet.cm.memorymanager.state import Block, State
from kopflet.cm.topologymanager import policy as tp
from kopflet.cm.topologymanager.bitmask import BitMask
from kopflet.cm.topologymanager.policy import TopologyHint
from kopflet.cm.topologymanager.topology_manager import TopologyManager
from kopflet.pods import decide
from kopflet.pods.decide import Lifecycle, Memory
from tests.unit.test_cpumanager_assignment import DUAL_SOCKET_NO_HT, topo
from tests.unit.test_cpumanager_static_policy import make_pod
from tests.unit.test_decide import CFG, UID, empty, observe
from tests.unit.test_decide_cpu_manager import NODE, pending

GI, MI = 1 << 30, 1 << 20


def M(*bits: int) -> BitMask:
    return BitMask.of(*bits)


def guaranteed(cpu: str, memory: str = "1Gi") -> dict[str, Any]:
    return {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}}


# ----------------------------------------------------------------------------------------- CPU hints

# DUAL_SOCKET_NO_HT: CPUs 0-3 on socket and NUMA node 0, 4-7 on node 1; CPU 0 reserved.
CPU_POLICY = cp.new_static_policy(DUAL_SOCKET_NO_HT, 1)


def cpu_state(default: str) -> cp.State:
    return cp.State(default=parse(default))


@pytest.mark.parametrize(("cpus", "default", "expected"), [
    ("1", "0-7", [TopologyHint(M(0), True), TopologyHint(M(1), True), TopologyHint(M(0, 1), False)]),
    ("3", "0-7", [TopologyHint(M(0), True), TopologyHint(M(1), True), TopologyHint(M(0, 1), False)]),
    ("4", "0-7", [TopologyHint(M(1), True), TopologyHint(M(0, 1), False)]),  # node 0 has the reserved CPU 0
    ("5", "0-7", [TopologyHint(M(0, 1), True)]),
    ("2", "0-1,4-5", [TopologyHint(M(1), True), TopologyHint(M(0, 1), False)]),
    ("8", "0-7", []),  # more than the available CPUs: no possible affinity
])
def test_cpu_hints(cpus: str, default: str, expected: list[TopologyHint]) -> None:
    pod = make_pod("u", ("c", guaranteed(cpus)))
    assert cp.topology_hints(CPU_POLICY, cpu_state(default), pod, pod.spec.containers[0]) == {"cpu": expected}


def test_cpu_hints_none_for_shared_containers_and_regenerated_for_allocated_ones() -> None:
    shared = make_pod("u", ("c", guaranteed("500m")))
    assert cp.topology_hints(CPU_POLICY, cpu_state("0-7"), shared, shared.spec.containers[0]) is None
    pod = make_pod("u", ("c", guaranteed("2")))
    state = cp.State(default=parse("0-3,6-7"), assignments={"u": {"c": parse("4-5")}})
    assert cp.topology_hints(CPU_POLICY, state, pod, pod.spec.containers[0]) == \
        {"cpu": [TopologyHint(M(1), True), TopologyHint(M(0, 1), False)]}
    other = make_pod("u", ("c", guaranteed("3")))  # its allocation no longer matches the request
    assert cp.topology_hints(CPU_POLICY, state, other, other.spec.containers[0]) == {"cpu": []}
    two = make_pod("u", ("a", guaranteed("2")), ("b", guaranteed("2")))
    assert cp.pod_topology_hints(CPU_POLICY, cpu_state("0-7"), two) == \
        {"cpu": [TopologyHint(M(1), True), TopologyHint(M(0, 1), False)]}


@pytest.mark.parametrize(("hint", "cpus"), [
    (TopologyHint(), "1-2"),  # packed: the fullest node first
    (TopologyHint(M(1), True), "4-5"),
    (TopologyHint(M(0), True), "1-2"),
])
def test_cpu_allocation_follows_the_hint(hint: TopologyHint, cpus: str) -> None:
    pod = make_pod("u", ("c", guaranteed("2")))
    state = cp.allocate(CPU_POLICY, cpu_state("0-7"), pod, pod.spec.containers[0], hint)
    assert state.get("u", "c") == parse(cpus)


def test_cpu_allocation_takes_the_rest_elsewhere_when_the_hint_is_short() -> None:
    pod = make_pod("u", ("c", guaranteed("5")))
    state = cp.allocate(CPU_POLICY, cpu_state("0-7"), pod, pod.spec.containers[0], TopologyHint(M(1), False))
    assert state.get("u", "c") is not None and parse("4-7").is_subset_of(state.get("u", "c"))  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- two NUMA nodes, aligned

TWO_NODES = (NUMANode(0, 8 * GI), NUMANode(1, 8 * GI))
MEMORY_POLICY = mp.new_static_policy(TWO_NODES, {0: {"memory": 512 * MI}, 1: {"memory": 512 * MI}})


def snapshots(cpu_default: str = "0-7", memory: State | None = None) -> tuple[Any, Any]:
    return (cpu_manager.Snapshot(CPU_POLICY, cpu_state(cpu_default)),
            memory_manager.Snapshot(MEMORY_POLICY, memory or mp.validate_state(MEMORY_POLICY, State())))


def topology(name: str, scope: str = tp.SCOPE_CONTAINER) -> TopologyManager:
    return TopologyManager(tp.new_policy(name, scope, {}, [0, 1]), scope)


@pytest.mark.parametrize("scope", [tp.SCOPE_CONTAINER, tp.SCOPE_POD])
def test_single_numa_node_puts_cpus_and_memory_on_one_node(scope: str) -> None:
    cpus, memory = snapshots("0-1,4-7")  # node 0 has one free CPU but for the reserved one
    pod = make_pod("u", ("c", guaranteed("2", "2Gi")))
    result = resource_admission.admit(topology(tp.POLICY_SINGLE_NUMA_NODE, scope), cpus, memory, pod)
    assert result.rejection is None and result.cpu_state is not None and result.memory_state is not None
    assert result.cpu_state.get("u", "c") == parse("4-5")
    assert result.memory_state.blocks("u", "c") == (Block((1,), "memory", 2 * GI),)


def test_single_numa_node_rejects_what_no_one_node_can_hold() -> None:
    cpus, memory = snapshots()
    pod = make_pod("u", ("c", guaranteed("2", "10Gi")))  # the memory needs both nodes
    result = resource_admission.admit(topology(tp.POLICY_SINGLE_NUMA_NODE), cpus, memory, pod)
    assert result.rejection is not None and result.cpu_state is None and result.memory_state is None
    assert (result.rejection.reason, result.rejection.message) == (
        "TopologyAffinityError", "Pod was rejected: Resources cannot be allocated with Topology locality")
    # best-effort admits it, across both nodes
    admitted = resource_admission.admit(topology(tp.POLICY_BEST_EFFORT), cpus, memory, pod)
    assert admitted.rejection is None and admitted.memory_state is not None
    assert admitted.memory_state.blocks("u", "c") == (Block((0, 1), "memory", 10 * GI),)


def test_restricted_rejects_a_non_preferred_merge() -> None:
    cpus, memory = snapshots("0-3,7")  # node 1 has one CPU, node 0 three: 2 CPUs fit node 0 only
    taken = mp.allocate(mp.validate_state(MEMORY_POLICY, State()), make_pod("x", ("c", guaranteed("1", "7Gi"))),
                        make_pod("x", ("c", guaranteed("1", "7Gi"))).spec.containers[0], TopologyHint(M(0), True))
    cpus, memory = snapshots("0-3,7", taken)  # and node 0's memory is taken: memory fits node 1 only
    pod = make_pod("u", ("c", guaranteed("2", "2Gi")))
    result = resource_admission.admit(topology(tp.POLICY_RESTRICTED),
                                      cpus, dataclasses.replace(memory, pods=Pods(known=frozenset({"x"}),
                                                                                  active={"x": frozenset({"c"})})), pod)
    assert result.rejection is not None and result.rejection.reason == "TopologyAffinityError"


def test_none_policies_record_nothing() -> None:
    pod = make_pod("u", ("c", guaranteed("1")))
    assert resource_admission.admit(TopologyManager(), cpu_manager.Snapshot(None, cp.State()),
                                    memory_manager.Snapshot(None, State()), pod) == resource_admission.Admission()


# --------------------------------------------------------------------------------- one node (this host)

ONE_CPU_POLICY = cp.new_static_policy(topo({i: (i, 0, 0) for i in range(4)}), 1)
ONE_NODE = (NUMANode(0, 8 * GI),)
ONE_MEMORY_POLICY = mp.new_static_policy(ONE_NODE, {0: {"memory": GI}})


def one_node(pod_resources: dict[str, Any]) -> resource_admission.Admission:
    cpus = cpu_manager.Snapshot(ONE_CPU_POLICY, cpu_state("0-3"))
    memory = memory_manager.Snapshot(ONE_MEMORY_POLICY, mp.validate_state(ONE_MEMORY_POLICY, State()))
    return resource_admission.admit(topology_one(), cpus, memory, make_pod("u", ("c", pod_resources)))


def topology_one() -> TopologyManager:
    return TopologyManager(tp.new_policy(tp.POLICY_SINGLE_NUMA_NODE, tp.SCOPE_CONTAINER, {}, [0]))


def test_one_node_a_guaranteed_pod_gets_node_0() -> None:
    result = one_node(guaranteed("1", "1Gi"))
    assert result.memory_state is not None and result.cpu_state is not None
    assert mp.cpuset_mems(mp.memory_numa_nodes(result.memory_state, "u", "c")) == "0"
    assert result.cpu_state.get("u", "c") == parse("1")


def test_one_node_too_much_memory_is_the_memory_managers_admission_error() -> None:
    result = one_node(guaranteed("1", "64Gi"))
    assert result.rejection is not None
    assert (result.rejection.reason, result.rejection.message) == (
        "UnexpectedAdmissionError", "Pod was rejected: Allocate failed due to [memorymanager] failed to get the "
        "default NUMA affinity, no NUMA nodes with enough memory is available, which is unexpected")


def test_one_node_too_many_cpus_is_a_topology_affinity_error() -> None:
    result = one_node(guaranteed("8", "1Gi"))
    assert result.rejection is not None and result.rejection.reason == "TopologyAffinityError"


# ---------------------------------------------------------------------------------------------- decide

def test_decide_records_both_states_and_rejects_with_the_topology_managers_reason() -> None:
    obs = observe(pending("1", "1Gi"), empty, memory=Memory(), allocated=False, node=NODE)
    memory = memory_manager.Snapshot(ONE_MEMORY_POLICY, mp.validate_state(ONE_MEMORY_POLICY, State()))
    obs = dataclasses.replace(obs, cpus=cpu_manager.Snapshot(ONE_CPU_POLICY, cpu_state("0-3")),
                              memory_blocks=memory, topology=topology_one())
    plan = decide.decide(obs, CFG)
    assert plan.lifecycle is Lifecycle.SYNCING and plan.admitted
    assert plan.memory_state is not None and plan.memory_state.blocks(UID, "web") == (Block((0,), "memory", GI),)
    assert plan.cpu_state is not None and plan.cpu_state.get(UID, "web") == parse("1")
    too_many = dataclasses.replace(obs, body=pending("8", "1Gi"))
    too_many = dataclasses.replace(too_many, pod=decide.spec.pod_from_body(too_many.body))
    rejected = decide.decide(too_many, CFG)
    assert rejected.lifecycle is Lifecycle.REJECTED and rejected.memory_state is None and rejected.cpu_state is None
    assert rejected.status is not None and (rejected.status["reason"], rejected.status["message"]) == (
        "TopologyAffinityError", "Pod was rejected: Resources cannot be allocated with Topology locality")


def test_a_guaranteed_pods_memory_resize_is_infeasible_under_the_static_memory_policy() -> None:
    from kopflet.allocation import policy as allocation_policy
    from tests.unit.test_decide_cpu_manager import admission_pod

    body = pending("1")
    body["status"] = {"phase": "Running", "startTime": "2026-06-01T11:59:01Z", "qosClass": "Guaranteed"}
    body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1", "memory": "128Mi"},
                                                  "limits": {"cpu": "1", "memory": "128Mi"}}
    obs = observe(body, node=NODE, allocated=False)
    granted = allocation_policy.PodAllocation.from_pod(admission_pod(UID, cpu="1"))  # 64Mi granted
    obs = dataclasses.replace(obs, allocated=granted, actuated=granted)
    plan = decide.decide(obs, dataclasses.replace(CFG, memory_manager_policy="Static"))
    assert plan.status is not None
    condition = next(c for c in plan.status["conditions"] if c["type"] == "PodResizePending")
    assert (condition["reason"], condition["message"]) == \
        ("Infeasible", 'Resize is infeasible for Guaranteed Pods alongside Memory Manager policy "Static"')
