"""The CPU manager's cpuset reaches CreateContainer (upstream internal_container_lifecycle_linux.go
PreCreateContainer: ``LinuxContainerResources.cpusetCpus`` is `GetCPUAffinity`, the container's exclusive CPUs or
the shared pool; PreStartContainer's AddContainer records it), in the pure config and through PodSyncer."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from cri_client import types as cri
from kopflet.allocation.state import AllocationManager
from kopflet.api.spec import pod_from_body
from kopflet.cm.cpumanager import cpu_manager
from kopflet.cm.cpumanager import manager as io
from kopflet.cm.cpumanager.cpu_manager import Pods
from kopflet.cm.cpumanager.cpuset import parse
from kopflet.config.settings import AgentConfig
from kopflet.container.podstate import RuntimePodStatus
from kopflet.container.sync_result import SyncResult
from kopflet.kuberuntime import container_config
from kopflet.kuberuntime.executor import PodSyncer
from kopflet.paths import Layout
from tests.unit.test_cpumanager_manager import TWO_CPUS


def pod(uid: str = "u", cpu: str = "1", limits: bool = True) -> Any:
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": "64Mi"}}
    if limits:
        resources["limits"] = dict(resources["requests"])
    return pod_from_body({"metadata": {"name": "p", "namespace": "ns", "uid": uid},
                          "spec": {"containers": [{"name": "app", "image": "busybox", "resources": resources}]}})


@pytest.mark.parametrize("cpus", ["", "1", "0-1,4"])
def test_linux_resources_carry_the_cpuset(cpus: str) -> None:
    p = pod()
    resources = container_config.linux_resources(p, p.spec.containers[0], memory_capacity=2**30, cpuset_cpus=cpus)
    assert resources.cpuset_cpus == cpus
    config = container_config.build_container_config(p, p.spec.containers[0], restart_count=0, env=(),
                                                     image_ref="sha256:x", memory_capacity=2**30, cpuset_cpus=cpus)
    assert config.linux is not None and config.linux.resources.cpuset_cpus == cpus


class FakeCriContainers:
    def __init__(self) -> None:
        self.created: list[cri.ContainerConfig] = []

    async def create(self, sandbox_id: str, config: cri.ContainerConfig, sandbox: Any) -> str:
        self.created.append(config)
        return f"cid-{len(self.created)}"

    async def start(self, container_id: str) -> None:
        pass


class FakeCriImages:
    async def status(self, ref: str) -> Any:
        return None


class FakeCri:
    def __init__(self) -> None:
        self.containers, self.images = FakeCriContainers(), FakeCriImages()


class FakeImages:
    async def ensure(self, *_: Any) -> str:
        return "sha256:busybox"

    async def image_status(self, ref: str) -> None:
        return None


class FakeRecorder:
    def pod_event(self, *_: Any, **__: Any) -> None:
        pass


async def syncer_and_manager(tmp_path: Path, policy: str) -> tuple[PodSyncer, FakeCri, io.CPUManager]:
    cpus = io.CPUManager(policy, {}, reconcile_period=10.0, topology=TWO_CPUS, system_reserved={},
                         kube_reserved={}, reserved_cpus="0" if policy == "static" else "",
                         state_file=str(tmp_path / "cpu_manager_state"), cri=None, lock=asyncio.Lock())
    await cpus.start()
    syncer = PodSyncer.__new__(PodSyncer)
    fake = FakeCri()
    layout = Layout(str(tmp_path / "root"), str(tmp_path / "pods"), str(tmp_path / "containers"))
    syncer.cfg, syncer.cri, syncer.images, syncer.recorder = AgentConfig(node_name="n"), fake, FakeImages(), \
        FakeRecorder()  # type: ignore[assignment]
    syncer.layout, syncer.allocations, syncer.cpus = layout, AllocationManager(layout), cpus
    syncer.node_memory_capacity, syncer.masked_paths, syncer.hugepage_sizes = 2**30, (), ()

    async def environment(*_: Any) -> list[tuple[str, str]]:
        return []

    syncer.environment = environment  # type: ignore[method-assign]
    return syncer, fake, cpus


async def start(syncer: PodSyncer, p: Any) -> None:
    config = cri.PodSandboxConfig(metadata=cri.PodSandboxMetadata(name="p", uid=p.uid, namespace="ns"))
    ok = await syncer.start_container(p, p.spec.containers[0], False, "sb", config,
                                      cri.PodSandboxStatus(id="sb", ip="10.0.0.2"), RuntimePodStatus(uid=p.uid),
                                      SyncResult(), {})
    assert ok


async def test_exclusive_and_shared_containers_are_created_with_their_cpusets(tmp_path: Path) -> None:
    syncer, fake, cpus = await syncer_and_manager(tmp_path, "static")
    guaranteed, burstable = pod("g"), pod("b", "500m", limits=False)
    admitted = cpu_manager.admit(cpus.snapshot(Pods()), guaranteed)
    assert admitted.state is not None
    await cpus.commit(admitted.state)
    await start(syncer, guaranteed)
    await start(syncer, burstable)
    assert [c.linux.resources.cpuset_cpus for c in fake.containers.created] == ["1", "0"]  # type: ignore[union-attr]
    assert cpus.applied == {"cid-1": parse("1"), "cid-2": parse("0")}  # the reconcile loop's starting point


async def test_the_none_policy_sets_no_cpuset(tmp_path: Path) -> None:
    syncer, fake, cpus = await syncer_and_manager(tmp_path, "none")
    await start(syncer, pod("g"))
    assert fake.containers.created[0].linux.resources.cpuset_cpus == ""  # type: ignore[union-attr]
    assert cpus.applied == {}
