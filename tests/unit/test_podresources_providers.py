"""The memory and device managers as the pod-resources API's providers (upstream container_manager_linux.go
GetMemory, GetAllocatableMemory, GetDevices, GetAllocatableDevices at v1.37.1), served by the real gRPC server
and asked by a real client; and the device manager as a topology manager hint provider in a real admission: real
device plugins (gRPC servers on temporary sockets) registered with the real device manager, the memory manager's
Static policy, the topology manager's ``single-numa-node`` policy, the pod worker's admission step."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from kopflet.api import spec
from kopflet.apis.podresources.proto.v1 import api_pb2 as v1
from kopflet.apis.podresources.proto.v1 import api_pb2_grpc as v1_grpc
from kopflet.apis.podresources.resources import ContainerMemory, Providers, TopologyInfo
from kopflet.apis.podresources.server import PodResourcesServer
from kopflet.cm import admission as resource_admission
from kopflet.cm.cpumanager.cpu_manager import Pods
from kopflet.cm.devicemanager import devices
from kopflet.cm.devicemanager.manager import DeviceManager
from kopflet.cm.devicemanager.proto import api_pb2
from kopflet.cm.memorymanager.machine import NUMANode
from kopflet.cm.memorymanager.manager import MemoryManager
from kopflet.cm.memorymanager.memory_manager import MemoryReservation
from kopflet.eviction import thresholds
from kopflet.lifecycle import admission
from kopflet.paths import Layout
from kopflet.pods import decide
from kopflet.pods import workers as workers_module
from kopflet.pods.decide import Lifecycle, Memory
from tests.unit.test_decide import CFG, empty, observe
from tests.unit.test_devicemanager_plugins import Plugin, _eventually

GI, MI = 1 << 30, 1 << 20
R = "example.com/resource"
HARD = thresholds.parse_threshold_config([], {"memory.available": "100Mi"}, {}, {}, {})
TWO_NODES = (NUMANode(0, 4 * GI, ((2048, 4),), (10, 20)), NUMANode(1, 4 * GI, ((2048, 0),), (20, 10)))
NODE = admission.NodeInfo(name="node-1", allocatable={"cpu": "4", "memory": "8Gi", "pods": "110", R: "3"})
TIMEOUT = 5.0


@pytest.fixture
def root() -> Iterator[Path]:
    """A short directory: unix socket paths must fit in 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="prv-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def memory_manager(root: Path, policy: str = "Static", topology: str = "single-numa-node") -> MemoryManager:
    return MemoryManager(policy, (MemoryReservation(0, {"memory": "512Mi"}),) if policy == "Static" else (),
                         numa_nodes=TWO_NODES, memory_capacity=8 * GI, system_reserved={"memory": "412Mi"},
                         kube_reserved={}, hard_thresholds=HARD, topology_policy_name=topology,
                         topology_scope="container", topology_options={},
                         state_file=str(root / "memory_manager_state"), lock=asyncio.Lock())


def body(uid: str, *, devices_: int = 0, memory: str = "64Mi", name: str = "app") -> dict[str, Any]:
    """A Guaranteed pod (the memory manager's Static policy gives it blocks), asking for `devices_` devices."""
    resources: dict[str, Any] = {"cpu": "1", "memory": memory}
    if devices_:
        resources[R] = str(devices_)
    return {"metadata": {"name": f"pod-{uid}", "namespace": "ns", "uid": uid},
            "spec": {"containers": [{"name": name, "image": "busybox",
                                     "resources": {"requests": dict(resources), "limits": dict(resources)}}]},
            "status": {"phase": "Pending"}}


async def client(socket: str) -> AsyncIterator[v1_grpc.PodResourcesListerStub]:
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        yield v1_grpc.PodResourcesListerStub(channel)


async def serving(root: Path, pods: list[dict[str, Any]], providers: Providers) -> AsyncIterator[Any]:
    socket = Layout(str(root)).pod_resources_socket
    server = PodResourcesServer(socket, pods=lambda: pods, providers=providers)
    await server.start()
    try:
        async for stub in client(socket):
            yield stub
    finally:
        await server.stop()


def topology(message: Any) -> list[int]:
    return [n.ID for n in message.topology.nodes]


# ------------------------------------------------------------------------------------------------ memory


async def test_the_static_memory_manager_reports_blocks_and_allocatable_memory(root: Path) -> None:
    mm = memory_manager(root)
    await mm.start()
    # upstream GetAllocatableMemory: per node and type the machine's (memory less the node's hugepages) less
    # reservedMemory, zero left out (node 1 has no hugepages)
    assert mm.get_allocatable_memory() == (
        ContainerMemory("hugepages-2Mi", 8 * MI, TopologyInfo((0,))),
        ContainerMemory("memory", 4 * GI - 8 * MI - 512 * MI, TopologyInfo((0,))),
        ContainerMemory("memory", 4 * GI, TopologyInfo((1,))))
    b = body("g")
    admitted = resource_admission.admit(mm.topology, None, mm.snapshot(Pods()), spec.pod_from_body(b))
    assert admitted.memory_state is not None
    await mm.commit(admitted.memory_state)
    assert mm.get_memory(b, b["spec"]["containers"][0]) == (ContainerMemory("memory", 64 * MI, TopologyInfo((0,))),)
    assert mm.get_memory(b, {"name": "other"}) == () and mm.get_pod_memory("g") == ()

    b["status"] = {"phase": "Running"}
    async for stub in serving(root, [b], Providers(memory=mm)):
        listed = await stub.List(v1.ListPodResourcesRequest(), timeout=TIMEOUT)
        [container] = listed.pod_resources[0].containers
        assert [(m.memory_type, m.size, topology(m)) for m in container.memory] == [("memory", 64 * MI, [0])]
        got = await stub.Get(v1.GetPodResourcesRequest(pod_namespace="ns", pod_name="pod-g"), timeout=TIMEOUT)
        assert got.pod_resources.containers[0].memory == container.memory
        allocatable = await stub.GetAllocatableResources(v1.AllocatableResourcesRequest(), timeout=TIMEOUT)
        assert [(m.memory_type, m.size, topology(m)) for m in allocatable.memory] == [
            ("hugepages-2Mi", 8 * MI, [0]), ("memory", 4 * GI - 520 * MI, [0]), ("memory", 4 * GI, [1])]


async def test_the_none_memory_policy_reports_nothing(root: Path) -> None:
    """upstream: the none policy has no blocks and `GetAllocatableMemory` returns an empty list."""
    mm = memory_manager(root, "None", topology="none")
    await mm.start()
    b = body("g")
    admitted = resource_admission.admit(mm.topology, None, mm.snapshot(Pods()), spec.pod_from_body(b))
    assert admitted.memory_state is None
    assert (mm.get_memory(b, b["spec"]["containers"][0]), mm.get_allocatable_memory()) == ((), ())
    async for stub in serving(root, [b], Providers(memory=mm)):
        allocatable = await stub.GetAllocatableResources(v1.AllocatableResourcesRequest(), timeout=TIMEOUT)
        assert list(allocatable.memory) == []


# ------------------------------------------------------------------------------------------------ devices


def numa_device(id_: str, *nodes: int, health: str = devices.HEALTHY) -> api_pb2.Device:
    return api_pb2.Device(ID=id_, health=health,
                          topology=api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=n) for n in nodes]))


@dataclasses.dataclass
class Stack:
    root: Path
    devices: DeviceManager
    memory: MemoryManager
    plugin: Plugin
    workers: Any
    active: set[str]
    """The UIDs of the active pods (upstream ActivePodsFunc): the devices of the others are freed."""


@pytest.fixture
async def stack(root: Path) -> AsyncIterator[Stack]:
    """A device manager with one plugin (Dev-0 on NUMA node 0, Dev-1 and Dev-2 on node 1, Dev-x without
    topology, and Dev-e with a topology of no nodes), the memory manager's Static policy, single-numa-node."""
    active: set[str] = set()
    dm = DeviceManager(str(root / "device-plugins"), active_pods=lambda: active)
    plugin = Plugin(str(root / "device-plugins" / "dp.sock"))
    plugin.devices = [numa_device("Dev-0", 0), numa_device("Dev-1", 1), numa_device("Dev-2", 1)]
    mm = memory_manager(root)
    await mm.start()
    await dm.start()
    await plugin.start()
    workers = workers_module.PodWorkers.__new__(workers_module.PodWorkers)
    workers.devices = dm
    try:
        await plugin.register(dm.socket_path)
        await _eventually(lambda: dm.capacity()[1] == {R: "3"})
        yield Stack(root, dm, mm, plugin, workers, active)
    finally:
        await plugin.stop()
        await dm.stop()


async def admit(s: Stack, b: dict[str, Any]) -> decide.Plan:
    """The pod worker's admission: the device manager's allocations along the topology manager's hints (I/O),
    then `decide` with the CPU and memory managers' parts."""
    obs = observe(b, empty, memory=Memory(), allocated=False, node=NODE)
    obs = dataclasses.replace(obs, topology=s.memory.topology, memory_blocks=s.memory.snapshot(Pods()))
    obs = await s.workers._admit_devices(obs, type("W", (), {"memory": Memory()})())
    plan = decide.decide(obs, CFG)
    if plan.memory_state is not None:
        await s.memory.commit(plan.memory_state)
    return plan


async def test_devices_are_allocated_on_the_numa_node_the_topology_manager_chose(stack: Stack) -> None:
    b = body("g", devices_=2)
    stack.active.add("g")
    plan = await admit(stack, b)
    assert plan.lifecycle is Lifecycle.SYNCING
    # the devices' hint {1} merged with the memory's: both on node 1 (sorted order alone would take Dev-0, Dev-1)
    assert stack.devices.container_devices("g", "app") == {R: frozenset({"Dev-1", "Dev-2"})}
    assert stack.memory.state.blocks("g", "app") is not None
    assert [b_.numa_affinity for b_ in stack.memory.state.blocks("g", "app") or ()] == [(1,)]
    allocate = [request for name, request in stack.plugin.calls if name == "Allocate"]
    assert [list(r.container_requests[0].devices_ids) for r in allocate] == [["Dev-1", "Dev-2"]]

    b["status"] = {"phase": "Running"}
    async for stub in serving(stack.root, [b], Providers(memory=stack.memory, devices=stack.devices)):
        listed = await stub.List(v1.ListPodResourcesRequest(), timeout=TIMEOUT)
        [container] = listed.pod_resources[0].containers
        assert [(d.resource_name, list(d.device_ids), topology(d)) for d in container.devices] == \
            [(R, ["Dev-1"], [1]), (R, ["Dev-2"], [1])]
        assert [(m.memory_type, m.size, topology(m)) for m in container.memory] == [("memory", 64 * MI, [1])]
        stack.active.clear()  # upstream List frees the devices of pods no longer active first
        listed = await stub.List(v1.ListPodResourcesRequest(), timeout=TIMEOUT)
        assert list(listed.pod_resources[0].containers[0].devices) == []


async def test_a_pod_the_policy_cannot_align_is_rejected_before_any_device_is_allocated(stack: Stack) -> None:
    plan = await admit(stack, body("g", devices_=3))  # three devices span both nodes: single-numa-node refuses
    assert plan.lifecycle is Lifecycle.REJECTED and plan.status is not None
    assert (plan.status["reason"], plan.status["message"]) == \
        ("TopologyAffinityError", "Pod was rejected: Resources cannot be allocated with Topology locality")
    assert stack.devices.container_devices("g", "app") == {}
    assert not [name for name, _ in stack.plugin.calls if name == "Allocate"]


async def test_a_plugins_allocate_error_rejects_the_pod(stack: Stack) -> None:
    stack.plugin.fail_allocate = "no luck"
    plan = await admit(stack, body("g", devices_=1))
    assert plan.lifecycle is Lifecycle.REJECTED and plan.status is not None
    assert (plan.status["reason"], plan.status["message"]) == (
        "UnexpectedAdmissionError",
        "Pod was rejected: Allocate failed due to rpc error: code = Unknown desc = no luck, which is unexpected")
    assert plan.memory_state is None  # nothing of the memory manager recorded for a rejected pod


async def test_allocatable_devices_are_the_healthy_ones_with_their_topology(stack: Stack) -> None:
    async def allocatable(stub: Any) -> list[tuple[str, list[int]]]:
        answer = await stub.GetAllocatableResources(v1.AllocatableResourcesRequest(), timeout=TIMEOUT)
        return [(d.device_ids[0], topology(d)) for d in answer.devices if d.resource_name == R]

    async for stub in serving(stack.root, [], Providers(devices=stack.devices)):
        assert await allocatable(stub) == [("Dev-0", [0]), ("Dev-1", [1]), ("Dev-2", [1])]
        await stack.plugin.updates.put([numa_device("Dev-0", 0), numa_device("Dev-1", 0, 1),
                                        numa_device("Dev-2", 1, health=devices.UNHEALTHY),
                                        api_pb2.Device(ID="Dev-x", health=devices.HEALTHY),
                                        numa_device("Dev-e", health=devices.HEALTHY)])
        await _eventually(lambda: stack.devices.capacity()[0] == {R: "5"})
        # a device on two nodes once per node; none without topology; one with a topology of no nodes not at all
        assert await allocatable(stub) == [("Dev-0", [0]), ("Dev-1", [0]), ("Dev-1", [1]), ("Dev-x", [])]
        await stack.plugin.stop()  # the plugin goes: its devices turn unhealthy
        await _eventually(lambda: stack.devices.capacity()[1] == {R: "0"})
        assert await allocatable(stub) == []


async def test_a_container_allocated_again_at_create_keeps_its_hint(stack: Stack) -> None:
    """upstream GetDeviceRunContainerOptions' Allocate again (nothing recorded: a restart raced the plugin) reads
    the topology manager's affinity store: the devices come from the same NUMA node again."""
    b = body("g", devices_=2)
    stack.active.add("g")
    await admit(stack, b)
    stack.devices._pod_devices.pop("g")  # the record lost
    stack.devices._allocated = devices.allocated_devices(stack.devices._pod_devices)
    p = spec.pod_from_body(b)
    options = await stack.devices.run_container_options(p, p.spec.containers[0])
    assert options is not None and dict(options.envs)["DEVICES"] == "Dev-1,Dev-2"
    assert stack.devices.container_devices("g", "app") == {R: frozenset({"Dev-1", "Dev-2"})}
