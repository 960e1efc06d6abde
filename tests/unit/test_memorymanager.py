"""The memory manager (pkg/kubelet/cm/memorymanager at v1.37.1): the ``memory_manager_state`` checkpoint as Go
writes it, the NUMA nodes from sysfs, ``reservedMemory`` and its check against Node Allocatable, and the Static
policy's hints, allocations, releases and state validation on synthetic multi-NUMA machines (as upstream's
policy_static_test.go), and on one node (this host)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kopflet.cm.cpumanager.cpu_manager import Pods
from kopflet.cm.memorymanager import machine, memory_manager
from kopflet.cm.memorymanager import state as ms
from kopflet.cm.memorymanager import static_policy as sp
from kopflet.cm.memorymanager.machine import NUMANode
from kopflet.cm.memorymanager.memory_manager import MemoryReservation
from kopflet.cm.memorymanager.state import Block, MemoryTable, NUMANodeState, State
from kopflet.cm.topologymanager.bitmask import BitMask
from kopflet.cm.topologymanager.policy import TopologyHint
from kopflet.eviction import thresholds
from tests.unit.test_cpumanager_static_policy import make_pod

VECTORS = json.loads((Path(__file__).parents[1] / "data" / "memory_manager_state_vectors.json").read_text())
GI, MI = 1 << 30, 1 << 20


def M(*bits: int) -> BitMask:
    return BitMask.of(*bits)


def mem(memory: str, cpu: str = "1", **hugepages: str) -> dict[str, Any]:
    """Guaranteed resources (requests == limits)."""
    amounts = {"cpu": cpu, "memory": memory, **{f"hugepages-{k}": v for k, v in hugepages.items()}}
    return {"requests": dict(amounts), "limits": dict(amounts)}


# --------------------------------------------------------------------------------------------- checkpoint

@pytest.mark.parametrize("name", sorted(VECTORS))
def test_checkpoint_round_trips_go_vectors(name: str) -> None:
    """encode(decode(file)) is the file Go wrote, and the legacy checksum hashes Go's spew text."""
    text = VECTORS[name]["file"]
    cp = ms.decode(text)
    assert ms.encode(cp.policy_name, State(cp.machine_state, cp.assignments)) == text
    assert ms._legacy_spews(cp.policy_name, cp.machine_state, cp.assignments)[0] == VECTORS[name]["spew"]


def test_checkpoint_content() -> None:
    cp = ms.decode(VECTORS["static-pod"]["file"])
    assert cp.policy_name == "Static"
    assert cp.assignments == {"pod-a": {"app": (Block((0,), "hugepages-2Mi", 4 * MI), Block((0,), "memory", GI))}}
    assert cp.machine_state[0] == NUMANodeState(2, {
        "hugepages-2Mi": MemoryTable(GI, 0, GI, 4 * MI, GI - 4 * MI),
        "memory": MemoryTable(8 * GI, 512 * MI, 8 * GI - 512 * MI - GI, GI, 8 * GI - 512 * MI - 2 * GI)}, (0,))


def test_checkpoint_errors_and_legacy_files() -> None:
    good = json.loads(VECTORS["static-empty"]["file"])
    with pytest.raises(ms.CheckpointError, match=r"^could not load v3 checkpoint: checkpoint is corrupted$"):
        ms.decode(json.dumps({**good, "dataChecksum": good["dataChecksum"] + 1}))
    legacy = {k: v for k, v in good.items() if k not in ("data", "dataChecksum")}
    assert ms.decode(json.dumps(legacy)).policy_name == "Static"  # V1: its checksum matches
    assert ms.decode(json.dumps({**legacy, "checksum": 0})).policy_name == "Static"  # 0: accepted
    with pytest.raises(ms.CheckpointError, match=r"^checkpoint is corrupted$"):
        ms.decode(json.dumps({**legacy, "checksum": 1}))
    with pytest.raises(ms.CheckpointError) as info:
        ms.restore(ms.decode(VECTORS["none"]["file"]), "Static")
    assert str(info.value) == '[memorymanager] configured policy "Static" differs from state checkpoint policy "None"'
    assert ms.restore_failure(info.value, "/var/lib/kubelet/memory_manager_state") == (
        'could not restore state from checkpoint: [memorymanager] configured policy "Static" differs from state '
        'checkpoint policy "None", please drain this node and delete the memory manager checkpoint file '
        '"/var/lib/kubelet/memory_manager_state" before restarting Kubelet')


# ------------------------------------------------------------------------------------------------ machine

def test_numa_nodes_from_sysfs() -> None:
    base = machine.NODE_DIR
    files = {
        f"{base}/node0/meminfo": "Node 0 MemTotal:       16384 kB\nNode 0 MemFree: 1 kB\n",
        f"{base}/node1/meminfo": "Node 1 MemTotal:       32768 kB\n",
        f"{base}/node0/distance": "10 21\n", f"{base}/node1/distance": "21 10\n",
        f"{base}/node0/hugepages/hugepages-2048kB/nr_hugepages": "4\n",
        f"{base}/node0/hugepages/hugepages-1048576kB/nr_hugepages": "0\n",
    }
    assert machine.from_sysfs(files) == (NUMANode(0, 16 * MI, ((2048, 4), (1048576, 0)), (10, 21)),
                                         NUMANode(1, 32 * MI, (), (21, 10)))
    assert machine.distances(machine.from_sysfs(files)) == {0: (10, 21), 1: (21, 10)}
    assert [machine.hugepage_resource_name(s) for s in (2048, 1048576, 64)] == \
        ["hugepages-2Mi", "hugepages-1Gi", "hugepages-64Ki"]


# ------------------------------------------------------------------------------------------ reservedMemory

@pytest.mark.parametrize(("text", "expected"), [
    ("0:memory=1Gi", (MemoryReservation(0, {"memory": "1Gi"}),)),
    ("0:memory=1Gi,hugepages-2Mi=2Mi;1:memory=512Mi",
     (MemoryReservation(0, {"memory": "1Gi", "hugepages-2Mi": "2Mi"}), MemoryReservation(1, {"memory": "512Mi"}))),
    ("0", "the reserved memory has incorrect format, expected numaNodeID:type=quantity[,type=quantity...], got 0"),
    ("x:memory=1Gi", "failed to convert the NUMA node ID, expected integer, got x"),
    ("0:memory", "the reserved limit has incorrect value, expected type=quantity, got memory"),
    ("0:cpu=1", 'memory type conversion error, unknown type: "cpu"'),
    ("0:memory=1Q", "failed to parse the quantity: 1Q"),
])
def test_reserved_memory_flag(text: str, expected: Any) -> None:
    if isinstance(expected, str):
        with pytest.raises(ValueError) as info:
            memory_manager.parse_reserved_memory_flag(text)
        assert str(info.value) == expected
    else:
        assert memory_manager.parse_reserved_memory_flag(text) == expected


def test_reserved_memory_configuration_errors() -> None:
    assert memory_manager.validate_reserved_memory([
        MemoryReservation(0, {"memory": "1Gi", "cpu": "1"}), MemoryReservation(0, {"memory": "0"})]) == [
        'invalid configuration: the limit type "cpu" for NUMA node 0 is not supported, only [memory '
        'hugepages-<HugePageSize>] is accepted',
        'invalid configuration: reserved memory may not be zero for NUMA node 0 and resource "memory"',
        'invalid configuration: the reserved memory has a duplicate value for NUMA node 0 and resource "memory"']


TWO_NODES = (NUMANode(0, 8 * GI, ((2048, 512),)), NUMANode(1, 8 * GI))
HARD_100MI = thresholds.parse_threshold_config([], {"memory.available": "100Mi"}, {}, {}, {})


@pytest.mark.parametrize(("system", "kube", "hard", "reservations", "error"), [
    ({"memory": "412Mi"}, {"memory": "0.5Gi"}, HARD_100MI,
     [MemoryReservation(0, {"memory": "512Mi"}), MemoryReservation(1, {"memory": "512Mi"})], ""),
    ({"memory": "1Gi"}, {}, HARD_100MI, [MemoryReservation(0, {"memory": "1Gi"})],
     'the total amount "1Gi" of type "memory" is not equal to the value "1124Mi" determined by Node Allocatable '
     'feature'),
    ({}, {}, HARD_100MI, [MemoryReservation(2, {"memory": "100Mi"})],
     "the reserved memory configuration references a NUMA node 2 that does not exist on this machine"),
    ({}, {}, HARD_100MI, [MemoryReservation(0, {"memory": "100Mi", "hugepages-2Mi": "2Mi"})],
     'the total amount "2Mi" of type "hugepages-2Mi" is not equal to the value "0" determined by Node Allocatable '
     'feature'),
    ({}, {}, [], [], ""),  # nothing reserved anywhere: equal (the Static policy then refuses: no memory reserved)
    ({}, {}, thresholds.parse_threshold_config([], {"memory.available": "1%"}, {}, {}, {}),
     [MemoryReservation(0, {"memory": "100Mi"})],
     'the total amount "100Mi" of type "memory" is not equal to the value "171798688" determined by Node '
     'Allocatable feature'),  # int64(capacity * float32(0.01)), as upstream's GetThresholdQuantity
])
def test_reserved_memory_against_node_allocatable(system: dict[str, str], kube: dict[str, str], hard: Any,
                                                  reservations: list[MemoryReservation], error: str) -> None:
    allocatable = memory_manager.node_allocatable_reservation(system, kube, hard, 16 * GI)
    if error:
        with pytest.raises(memory_manager.ManagerError) as info:
            memory_manager.system_reserved_memory(TWO_NODES, allocatable, reservations)
        assert str(info.value) == error
    else:
        reserved = memory_manager.system_reserved_memory(TWO_NODES, allocatable, reservations)
        assert set(reserved) == {0, 1}  # every node, in bytes
        assert sum(v for node in reserved.values() for v in node.values()) == \
            sum(int(a.value) for a in allocatable.values())


def test_new_policy_errors() -> None:
    with pytest.raises(memory_manager.ManagerError, match=r'^unknown policy: "static"$'):
        memory_manager.new_policy("static", nodes=TWO_NODES, allocatable_reservation={}, reservations=())
    with pytest.raises(memory_manager.ManagerError, match=r"^\[memorymanager\] you should specify the system "
                                                          r"reserved memory$"):
        memory_manager.new_policy("Static", nodes=TWO_NODES, allocatable_reservation={}, reservations=())
    assert memory_manager.new_policy("None", nodes=TWO_NODES, allocatable_reservation={}, reservations=()) is None


# --------------------------------------------------------------------------------------------- the policy

def policy(nodes: tuple[NUMANode, ...] = TWO_NODES, reserved: int = 512 * MI) -> sp.StaticPolicy:
    return sp.new_static_policy(nodes, {n.id: {"memory": reserved} for n in nodes})


def fresh(p: sp.StaticPolicy) -> State:
    return sp.validate_state(p, State())


def test_default_machine_state() -> None:
    state = fresh(policy())
    assert state.machine_state == {
        0: NUMANodeState(0, {"hugepages-2Mi": MemoryTable(GI, 0, GI, 0, GI),
                             "memory": MemoryTable(8 * GI, 512 * MI, 6 * GI + 512 * MI, 0, 6 * GI + 512 * MI)}, (0,)),
        1: NUMANodeState(0, {"memory": MemoryTable(8 * GI, 512 * MI, 7 * GI + 512 * MI, 0, 7 * GI + 512 * MI)}, (1,))}
    assert sp.allocatable_memory(state) == [Block((0,), "hugepages-2Mi", GI), Block((0,), "memory", 6 * GI + 512 * MI),
                                            Block((1,), "memory", 7 * GI + 512 * MI)]


def hints(state: State, pod_memory: str, **hugepages: str) -> Any:
    p = make_pod("u", ("c", mem(pod_memory, **hugepages)))
    return sp.topology_hints(state, p, p.spec.containers[0])


@pytest.mark.parametrize(("memory", "hugepages", "expected"), [
    # fits on either node: both single nodes preferred, the pair not
    ("1Gi", {}, {"memory": [TopologyHint(M(0), True), TopologyHint(M(1), True), TopologyHint(M(0, 1), False)]}),
    # only node 1 has the room; the pair too
    ("7Gi", {}, {"memory": [TopologyHint(M(1), True), TopologyHint(M(0, 1), False)]}),
    # only both together: preferred, as the narrowest possible
    ("10Gi", {}, {"memory": [TopologyHint(M(0, 1), True)]}),
    # hugepages only on node 0
    ("1Gi", {"2Mi": "4Mi"}, {"memory": [TopologyHint(M(0), True), TopologyHint(M(0, 1), False)],
                             "hugepages-2Mi": [TopologyHint(M(0), True), TopologyHint(M(0, 1), False)]}),
    # more than the machine: no hints at all (an empty map: no preference for the topology manager)
    ("20Gi", {}, {}),
])
def test_hints(memory: str, hugepages: dict[str, str], expected: Any) -> None:
    assert hints(fresh(policy()), memory, **hugepages) == expected


def test_hints_for_non_guaranteed_or_allocated_containers() -> None:
    state = fresh(policy())
    burstable = make_pod("u", ("c", {"requests": {"memory": "1Gi"}}))
    assert sp.topology_hints(state, burstable, burstable.spec.containers[0]) is None
    p = make_pod("u", ("c", mem("1Gi")))
    state = sp.allocate(state, p, p.spec.containers[0])
    assert sp.topology_hints(state, p, p.spec.containers[0]) == {"memory": [TopologyHint(M(0), True)]}  # regenerated


def test_allocate_on_the_hint_and_release() -> None:
    p0 = policy()
    state = fresh(p0)
    pod = make_pod("u", ("c", mem("1Gi", **{"2Mi": "4Mi"})))
    c = pod.spec.containers[0]
    after = sp.allocate(state, pod, c, TopologyHint(M(0), True))
    assert after.blocks("u", "c") == (Block((0,), "hugepages-2Mi", 4 * MI), Block((0,), "memory", GI))
    node0 = after.machine_state[0]
    assert node0.number_of_assignments == 2 and node0.cells == (0,)
    assert node0.memory_map["memory"].reserved == GI and node0.memory_map["hugepages-2Mi"].free == GI - 4 * MI
    assert sp.memory_numa_nodes(after, "u", "c") == (0,) and sp.cpuset_mems((0, 1)) == "0,1"
    assert sp.validate_state(p0, after) == after  # a restart finds it consistent
    assert sp.remove_container(after, "u", "c") == State(state.machine_state)


def test_allocate_without_hint_takes_the_narrowest_and_spans_nodes_when_needed() -> None:
    state = fresh(policy())
    big = make_pod("big", ("c", mem("10Gi")))
    after = sp.allocate(state, big, big.spec.containers[0])
    assert after.blocks("big", "c") == (Block((0, 1), "memory", 10 * GI),)
    assert after.machine_state[0].cells == after.machine_state[1].cells == (0, 1)
    assert after.machine_state[0].memory_map["memory"].free == 0  # node 0 first, then node 1
    assert after.machine_state[1].memory_map["memory"].reserved == 10 * GI - (6 * GI + 512 * MI)
    # a node in a group is no single-node hint any more; the group is, though not preferred
    assert hints(after, "100Mi") == {"memory": [TopologyHint(M(0, 1), False)]}
    small = make_pod("small", ("c", mem("100Mi")))
    grouped = sp.allocate(after, small, small.spec.containers[0])
    assert grouped.blocks("small", "c") == (Block((0, 1), "memory", 100 * MI),)
    assert grouped.machine_state[0].number_of_assignments == 2


def test_a_hint_across_another_group_violates_the_allocations() -> None:
    three = tuple(NUMANode(i, 4 * GI) for i in range(3))
    state = fresh(policy(three))
    big = make_pod("big", ("c", mem("5Gi")))
    state = sp.allocate(state, big, big.spec.containers[0])
    assert state.blocks("big", "c") == (Block((0, 1), "memory", 5 * GI),)
    small = make_pod("small", ("c", mem("100Mi")))
    with pytest.raises(sp.MemoryManagerError) as info:
        sp.allocate(state, small, small.spec.containers[0], TopologyHint(M(1, 2), True))
    assert str(info.value) == "[memorymanager] preferred hint violates NUMA node allocation"
    assert sp.allocate(state, small, small.spec.containers[0], TopologyHint(M(2), True)).blocks("small", "c") == \
        (Block((2,), "memory", 100 * MI),)


def test_allocate_errors() -> None:
    state = fresh(policy())
    huge = make_pod("u", ("c", mem("20Gi")))
    with pytest.raises(sp.MemoryManagerError) as info:
        sp.allocate(state, huge, huge.spec.containers[0])
    assert str(info.value) == ("[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough "
                               "memory is available")
    p = make_pod("u", ("c", mem("7Gi")))
    with pytest.raises(sp.MemoryManagerError, match="failed to find the extended preferred hint"):
        sp.allocate(state, p, p.spec.containers[0], TopologyHint(M(0), True))  # node 0 too small: widened, not pref.
    frac = make_pod("u", ("c", mem("0.5")))
    with pytest.raises(sp.MemoryManagerError, match=r"failed to represent quantity as int64"):
        sp.allocate(state, frac, frac.spec.containers[0])


def test_init_containers_memory_is_reused_then_released() -> None:
    state = fresh(policy())
    pod = make_pod("u", ("app", mem("1Gi")), init=(("init", mem("2Gi"), False),))
    init, app = pod.spec.init_containers[0], pod.spec.containers[0]
    state = sp.allocate(state, pod, init, TopologyHint(M(0), True))
    state = sp.allocate(state, pod, app, TopologyHint(M(0), True))
    # the app container reuses 1Gi of the init container's 2Gi: 2Gi reserved in all, the init block shrinks
    assert state.machine_state[0].memory_map["memory"].reserved == 2 * GI
    assert state.blocks("u", "init") == (Block((0,), "memory", GI),)
    assert state.blocks("u", "app") == (Block((0,), "memory", GI),)
    released = sp.container_added(state, pod, "app")  # upstream AddContainer: init containers before it are done
    assert released.blocks("u", "init") is None
    assert released.machine_state[0].memory_map["memory"].reserved == GI


def test_validate_state_errors() -> None:
    p = policy()
    with pytest.raises(sp.MemoryManagerError, match="machine state can not be empty when it has memory assignments"):
        sp.validate_state(p, State({}, {"u": {"c": (Block((0,), "memory", GI),)}}))
    state = fresh(p)
    with pytest.raises(sp.MemoryManagerError, match="the expected machine state is different from the real one"):
        sp.validate_state(p, State(state.machine_state, {"u": {"c": (Block((0,), "memory", GI),)}}))
    with pytest.raises(sp.MemoryManagerError, match=r"\(pod: u, container: c\) the memory assignment uses the NUMA "
                                                    r"that does not exist"):
        sp.validate_state(p, State(state.machine_state, {"u": {"c": (Block((3,), "memory", GI),)}}))
    smaller = policy(reserved=GI)  # the reservation changed since: the checkpoint no longer fits
    with pytest.raises(sp.MemoryManagerError, match="the expected machine state is different"):
        sp.validate_state(smaller, state)


def test_remove_stale_state_waits_for_unknown_pods() -> None:
    state = fresh(policy())
    pod = make_pod("u", ("c", mem("1Gi")))
    state = sp.allocate(state, pod, pod.spec.containers[0])
    assert memory_manager.remove_stale_state(state, Pods()) == state  # after a restart: not known yet
    assert memory_manager.remove_stale_state(state, Pods(), gone={"u"}).assignments == {}
    assert memory_manager.remove_stale_state(state, Pods(known=frozenset({"u"}))).assignments == {}
    active = Pods(known=frozenset({"u"}), active={"u": frozenset({"c"})})
    assert memory_manager.remove_stale_state(state, active) == state


def test_restore() -> None:
    p = policy()
    state, write = memory_manager.restore(p, "Static", None, "/x")
    assert write and state == fresh(p)
    text = ms.encode("Static", state)
    assert memory_manager.restore(p, "Static", text, "/x") == (state, False)
    with pytest.raises(memory_manager.ManagerError) as info:
        memory_manager.restore(p, "None", text, "/x")
    assert str(info.value).startswith('start memory manager error: could not restore state from checkpoint: '
                                      '[memorymanager] configured policy "None" differs')
    with pytest.raises(memory_manager.ManagerError, match=r"^start memory manager error: .memorymanager. the expected"):
        memory_manager.restore(policy(reserved=GI), "Static", text, "/x")
    assert memory_manager.restore(None, "None", None, "/x") == (State(), True)
