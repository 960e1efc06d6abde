"""The memory manager's I/O (kopflet.cm.memorymanager.manager): the NUMA nodes read from a sysfs tree, the
``memory_manager_state`` file written at start and at each admission and restored after a restart, the start-up
refusals with upstream's messages, ``cpuset.mems`` at CreateContainer and AddContainer's release of init
containers' blocks; and the settings (flags and file)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from kopflet.cm import admission as resource_admission
from kopflet.cm.cpumanager import cpu_manager
from kopflet.cm.cpumanager.cpu_manager import Pods
from kopflet.cm.memorymanager import state as ms
from kopflet.cm.memorymanager.machine import NUMANode
from kopflet.cm.memorymanager.manager import MemoryManager, MemoryManagerError, read_numa_nodes
from kopflet.cm.memorymanager.memory_manager import MemoryReservation
from kopflet.cm.memorymanager.state import Block
from kopflet.config import settings
from kopflet.config.settings import ConfigError
from kopflet.eviction import thresholds
from kopflet.kuberuntime import container_config
from tests.unit.test_cpuset_at_create import pod, start, syncer_and_manager

GI, MI = 1 << 30, 1 << 20
HARD = thresholds.parse_threshold_config([], {"memory.available": "100Mi"}, {}, {}, {})


def test_read_numa_nodes(tmp_path: Path) -> None:
    for node, kib, pages in ((0, 4096, "2"), (1, 8192, "0")):
        d = tmp_path / f"node{node}"
        (d / "hugepages" / "hugepages-2048kB").mkdir(parents=True)
        (d / "meminfo").write_text(f"Node {node} MemTotal:       {kib} kB\n")
        (d / "distance").write_text("10 20\n" if node == 0 else "20 10\n")
        (d / "hugepages" / "hugepages-2048kB" / "nr_hugepages").write_text(pages)
    (tmp_path / "possible").write_text("0-1\n")
    assert read_numa_nodes(str(tmp_path)) == (NUMANode(0, 4 * MI, ((2048, 2),), (10, 20)),
                                              NUMANode(1, 8 * MI, ((2048, 0),), (20, 10)))
    assert read_numa_nodes(str(tmp_path / "missing")) == ()


def manager(tmp_path: Path, policy: str = "Static", *, reserved: str = "412Mi", nodes: Any = (),
            topology: str = "single-numa-node", options: dict[str, str] | None = None) -> MemoryManager:
    return MemoryManager(policy, (MemoryReservation(0, {"memory": "512Mi"}),) if policy == "Static" else (),
                         numa_nodes=nodes, memory_capacity=8 * GI, system_reserved={"memory": reserved},
                         kube_reserved={}, hard_thresholds=HARD, topology_policy_name=topology,
                         topology_scope="container", topology_options=options or {},
                         state_file=str(tmp_path / "memory_manager_state"), lock=asyncio.Lock())


async def test_start_writes_the_checkpoint_and_a_restart_restores_it(tmp_path: Path) -> None:
    first = manager(tmp_path)
    await first.start()
    assert first.topology.policy.name == "single-numa-node"
    text = (tmp_path / "memory_manager_state").read_text()
    assert ms.decode(text).machine_state[0].memory_map["memory"].allocatable == 8 * GI - 512 * MI
    p = pod("g", "1")
    admitted = resource_admission.admit(first.topology, None, first.snapshot(Pods()), p)
    assert admitted.memory_state is not None
    await first.commit(admitted.memory_state)
    assert first.cpuset_mems("g", "app") == "0" and first.cpuset_mems("other", "app") == ""
    second = manager(tmp_path)
    await second.start()
    assert second.state == first.state and second.state.blocks("g", "app") == (Block((0,), "memory", 64 * MI),)


async def test_the_none_policy_writes_its_checkpoint_and_sets_no_mems(tmp_path: Path) -> None:
    none = manager(tmp_path, "None", topology="none")
    await none.start()
    assert ms.decode((tmp_path / "memory_manager_state").read_text()).policy_name == "None"
    assert none.cpuset_mems("g", "app") == ""
    static = manager(tmp_path)  # a policy change needs the file removed, as upstream
    with pytest.raises(MemoryManagerError) as info:
        await static.start()
    assert str(info.value).startswith('start memory manager error: could not restore state from checkpoint: '
                                      '[memorymanager] configured policy "Static" differs from state checkpoint '
                                      'policy "None", please drain this node and delete the memory manager checkpoint '
                                      'file')


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"reserved": "1Gi"}, 'the total amount "512Mi" of type "memory" is not equal to the value "1124Mi" determined '
                          'by Node Allocatable feature'),
    ({"nodes": tuple(NUMANode(i, GI) for i in range(9))}, "unsupported on machines with more than 8 NUMA Nodes"),
    ({"options": {"prefer-closest-numa-nodes": "true"}, "nodes": (NUMANode(0, 8 * GI),)},
     "cannot discover NUMA topology: error getting NUMA distances from cadvisor"),
])
async def test_start_refusals(tmp_path: Path, kwargs: dict[str, Any], error: str) -> None:
    with pytest.raises(MemoryManagerError) as info:
        await manager(tmp_path, **kwargs).start()
    assert str(info.value) == error


def test_linux_resources_carry_the_mems() -> None:
    p = pod()
    assert container_config.linux_resources(p, p.spec.containers[0], memory_capacity=GI,
                                            cpuset_mems="0,1").cpuset_mems == "0,1"
    config = container_config.build_container_config(p, p.spec.containers[0], restart_count=0, env=(),
                                                     image_ref="sha256:x", memory_capacity=GI, cpuset_mems="1")
    assert config.linux is not None and config.linux.resources.cpuset_mems == "1"


async def test_create_container_gets_cpuset_mems_and_cpus(tmp_path: Path) -> None:
    syncer, fake, cpus = await syncer_and_manager(tmp_path, "static")
    memory = manager(tmp_path)
    await memory.start()
    syncer.memory = memory
    g = pod("g")
    admitted = resource_admission.admit(memory.topology, cpus.snapshot(Pods()), memory.snapshot(Pods()), g)
    assert admitted.rejection is None and admitted.cpu_state is not None and admitted.memory_state is not None
    await cpus.commit(admitted.cpu_state)
    await memory.commit(admitted.memory_state)
    await start(syncer, g)
    await start(syncer, pod("b", "500m", limits=False))
    resources = [c.linux.resources for c in fake.containers.created]  # type: ignore[union-attr]
    assert [(r.cpuset_cpus, r.cpuset_mems) for r in resources] == [("1", "0"), ("0", "")]


async def test_container_added_releases_the_init_containers_blocks(tmp_path: Path) -> None:
    from tests.unit.test_cpumanager_static_policy import make_pod
    memory = manager(tmp_path)
    await memory.start()
    res = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
    p = make_pod("u", ("app", res), init=(("init", res, False),))
    admitted = resource_admission.admit(memory.topology, None, memory.snapshot(Pods()), p)
    assert admitted.memory_state is not None
    await memory.commit(admitted.memory_state)
    await memory.container_added(p, "init")
    assert memory.state.blocks("u", "init") is not None
    await memory.container_added(p, "app")
    assert memory.state.blocks("u", "init") is None
    assert ms.decode((tmp_path / "memory_manager_state").read_text()).assignments == \
        {"u": {"app": (Block((0,), "memory", GI),)}}


async def test_stale_blocks_wait_for_the_apiserver(tmp_path: Path) -> None:
    memory = manager(tmp_path)
    await memory.start()
    p = pod("gone")
    admitted = resource_admission.admit(memory.topology, cpu_manager.Snapshot(None, cpu_manager.State()),
                                        memory.snapshot(Pods()), p)
    assert admitted.memory_state is not None
    await memory.commit(admitted.memory_state)

    async def listed() -> list[str]:
        return ["gone"]

    memory.listed = listed
    await memory.remove_stale_state()
    assert "gone" in memory.state.assignments  # the apiserver still has it

    async def none_listed() -> list[str]:
        return []

    memory.listed = none_listed
    await memory.remove_stale_state()
    assert memory.state.assignments == {}


# ---------------------------------------------------------------------------------------------- settings

def load(*argv: str, body: str = "") -> settings.AgentConfig:
    args = [*argv, "--config=/k.yaml"] if body else list(argv)
    return settings.load(args, {}, "node-1", lambda _: "apiVersion: kubelet.config.k8s.io/v1beta1\n"
                                                       "kind: KubeletConfiguration\n" + body)


def test_flags() -> None:
    cfg = load("--memory-manager-policy=Static", "--reserved-memory=0:memory=1Gi;1:memory=512Mi",
               "--reserved-memory", "2:hugepages-2Mi=4Mi", "--topology-manager-policy=restricted",
               "--topology-manager-scope=pod", "--topology-manager-policy-options=prefer-closest-numa-nodes=true,"
               "max-allowable-numa-nodes=9")
    assert cfg.memory_manager_policy == "Static" and cfg.topology_manager_policy == "restricted"
    assert cfg.reserved_memory == (MemoryReservation(0, {"memory": "1Gi"}), MemoryReservation(1, {"memory": "512Mi"}),
                                   MemoryReservation(2, {"hugepages-2Mi": "4Mi"}))
    assert cfg.topology_manager_scope == "pod"
    assert cfg.topology_manager_policy_options == {"prefer-closest-numa-nodes": "true", "max-allowable-numa-nodes": "9"}
    defaults = load()
    assert (defaults.memory_manager_policy, defaults.topology_manager_policy, defaults.topology_manager_scope,
            defaults.reserved_memory) == ("None", "none", "container", ())


@pytest.mark.parametrize(("argv", "body", "error"), [
    (["--topology-manager-policy=numa"], "",
     'invalid configuration: topologyManagerPolicy (--topology-manager-policy) "numa" must be one of: '
     '["none" "best-effort" "restricted" "single-numa-node"]'),
    (["--topology-manager-scope=node"], "",
     'invalid configuration: topologyManagerScope (--topology-manager-scope) "node" must be one of: "container", '
     'or "pod"'),
    (["--topology-manager-policy=best-effort", "--topology-manager-policy-options=foo=1"], "",
     'unknown Topology Manager Policy option: "foo"'),
    (["--memory-manager-policy=static"], "", 'unknown policy: "static"'),
    (["--reserved-memory=0:memory=0"], "",
     'invalid configuration: reserved memory may not be zero for NUMA node 0 and resource "memory"'),
    (["--reserved-memory=0:cpu=1"], "", 'memory type conversion error, unknown type: "cpu"'),
    ([], "reservedMemory: [{numaNode: 0, limits: {memory: 1Gi}}, {numaNode: 0, limits: {memory: 1Gi}}]\n",
     'invalid configuration: the reserved memory has a duplicate value for NUMA node 0 and resource "memory"'),
    ([], "reservedMemory: [{numaNode: x, limits: {}}]\n", "numaNode: expected an int32"),
])
def test_setting_errors(argv: list[str], body: str, error: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(*argv, body=body)
    assert error in str(info.value)
