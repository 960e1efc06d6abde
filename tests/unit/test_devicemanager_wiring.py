"""The device manager where the agent meets it: the Node's capacity and allocatable (nodestatus/heartbeat.py), the
pod's admission (pods/decide.py, pods/workers.py) and the container's config (kuberuntime/container_config.py)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from cri_client import types as cri
from kopflet.cm import admission as resource_admission
from kopflet.cm.devicemanager import devices
from kopflet.cm.devicemanager.manager import DeviceManager
from kopflet.config.settings import AgentConfig
from kopflet.container.podstate import RuntimePodStatus
from kopflet.container.sync_result import SyncResult
from kopflet.kuberuntime import container_config
from kopflet.lifecycle import admission
from kopflet.nodestatus import heartbeat
from kopflet.pods import decide
from kopflet.pods import workers as workers_module
from kopflet.pods.decide import Lifecycle, Memory
from tests.unit.test_cpuset_at_create import pod, start, syncer_and_manager
from tests.unit.test_decide import CFG, base_body, empty, observe
from tests.unit.test_devicemanager_plugins import Plugin, _eventually
from tests.unit.test_nodestatus import FACTS, FakeApi, FakeCri

R = "example.com/resource"
NODE = admission.NodeInfo(name="node-1", allocatable={"cpu": "4", "memory": "4Gi", "pods": "110", R: "2"})


def _pending(count: int = 1) -> dict[str, Any]:
    body = base_body()
    body["spec"]["containers"][0]["resources"] = {"limits": {R: str(count)}, "requests": {R: str(count)}}
    body["status"] = {"phase": "Pending"}
    return body


def test_the_node_reports_the_device_plugins_resources() -> None:
    agent = heartbeat.NodeAgent(AgentConfig(node_name="n1", kube_reserved={"cpu": "1"}), FakeApi(None), FakeCri(),
                                "containerd://2", FACTS,  # type: ignore[arg-type]
                                devices=lambda: ({R: "3", "gone.com/x": "0"}, {R: "2", "gone.com/x": "0"}))
    assert (agent.capacity()[R], agent.capacity()["gone.com/x"]) == ("3", "0")
    assert (agent.allocatable()[R], agent.allocatable()["gone.com/x"]) == ("2", "0")
    assert agent.allocatable()["cpu"] != agent.capacity()["cpu"]  # the rest as before


def test_a_device_rejection_rejects_the_pod_before_the_predicate() -> None:
    obs = observe(_pending(), empty, memory=Memory(), allocated=False, node=NODE)
    rejection = devices.admission_rejection(f"requested number of devices unavailable for {R}. Requested: 1, "
                                            "Available: 0")
    plan = decide.decide(dataclasses.replace(obs, resources=resource_admission.Admission(rejection=rejection)), CFG)
    assert plan.lifecycle is Lifecycle.REJECTED
    assert plan.status is not None and plan.status["reason"] == "UnexpectedAdmissionError"
    assert plan.status["message"] == ("Pod was rejected: Allocate failed due to requested number of devices "
                                      f"unavailable for {R}. Requested: 1, Available: 0, which is unexpected")
    assert decide.decide(obs, CFG).lifecycle is Lifecycle.SYNCING  # without it: admitted


@pytest.mark.parametrize(("body", "memory", "admits"), [
    (_pending(), Memory(), True),
    (_pending(), Memory(admitted=True), False),
    ({**_pending(), "status": {"phase": "Running"}}, Memory(), False),
    ({**_pending(), "status": {"phase": "Failed"}}, Memory(), False),
])
def test_devices_are_allocated_only_when_the_pod_is_admitted(body: dict[str, Any], memory: Memory,
                                                             admits: bool) -> None:
    obs = observe(body, empty, memory=memory, allocated=False, node=NODE)
    assert obs.pod is not None
    assert decide.admits(obs.pod, body["status"], obs.runtime, memory) is admits


@pytest.fixture
def socket_dir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="dp", dir="/tmp")
    yield os.path.join(path, "device-plugins")
    shutil.rmtree(path, ignore_errors=True)


async def test_the_worker_allocates_devices_before_deciding(socket_dir: str) -> None:
    manager = DeviceManager(socket_dir, active_pods=lambda: {"uid-1"})
    plugin = Plugin(os.path.join(socket_dir, "dp.1"), ("Dev-1",))
    await manager.start()
    await plugin.start()
    try:
        await plugin.register(manager.socket_path)
        await _eventually(lambda: manager.capacity()[1] == {R: "1"})
        workers = workers_module.PodWorkers.__new__(workers_module.PodWorkers)
        workers.devices = manager
        worker: Any = type("W", (), {"memory": Memory()})()
        obs = observe(_pending(), empty, memory=Memory(), allocated=False, node=NODE)
        obs = dataclasses.replace(obs, body={**obs.body, "metadata": {**obs.body["metadata"], "uid": "uid-1"}},
                                  pod=dataclasses.replace(obs.pod, uid="uid-1"))  # type: ignore[arg-type]
        admitted = await workers._admit_devices(obs, worker)
        assert admitted.resources is not None and admitted.resources.rejection is None
        assert manager.container_devices("uid-1", "web") == {R: frozenset({"Dev-1"})}
        other = dataclasses.replace(obs, pod=dataclasses.replace(obs.pod, uid="uid-2"))  # type: ignore[arg-type]
        refused = await workers._admit_devices(other, worker)
        assert refused.resources is not None and refused.resources.rejection is not None
        assert refused.resources.rejection.reason == "UnexpectedAdmissionError"
        assert refused.resources.rejection.message == (
            f"Pod was rejected: Allocate failed due to requested number of devices unavailable for {R}. "
            "Requested: 1, Available: 0, which is unexpected")
    finally:
        await plugin.stop()
        await manager.stop()


def test_the_allocate_answer_goes_into_the_container_config() -> None:
    obs = observe(_pending(), empty, memory=Memory(), allocated=False, node=NODE)
    pod = obs.pod
    assert pod is not None
    config = container_config.build_container_config(
        pod, pod.spec.containers[0], restart_count=0, env=[("DEVICES", "Dev-1"), ("A", "1")], image_ref="sha256:1",
        memory_capacity=1 << 30, mounts=[cri.Mount(container_path="/tmp/Dev-1", host_path="/tmp/Dev-1")],
        devices=[cri.Device(container_path="/dev/fake", host_path="/dev/null", permissions="rw")],
        cdi_devices=[f"{R}=CDI-Dev-1"],
        device_annotations={"example.com/devices": "Dev-1", "io.kubernetes.container.restartCount": "99"})
    assert config.envs == {"DEVICES": "Dev-1", "A": "1"}
    assert config.mounts[0].container_path == "/tmp/Dev-1"
    assert config.devices == (cri.Device(container_path="/dev/fake", host_path="/dev/null", permissions="rw"),)
    assert config.cdi_devices == (f"{R}=CDI-Dev-1",)
    assert config.annotations["example.com/devices"] == "Dev-1"
    assert config.annotations["io.kubernetes.container.restartCount"] == "0"  # the kubelet's own win


class _Devices:
    """The device manager as PodSyncer asks it at CreateContainer."""

    def __init__(self, answer: devices.RunContainerOptions | None, error: str = "") -> None:
        self.answer, self.error = answer, error

    async def run_container_options(self, *_: Any) -> devices.RunContainerOptions | None:
        if self.error:
            raise devices.AllocationError(self.error)
        return self.answer


async def test_create_container_gets_the_device_options(tmp_path: Any) -> None:
    syncer, fake, _ = await syncer_and_manager(tmp_path, "none")
    syncer.devices = _Devices(devices.RunContainerOptions(  # type: ignore[assignment]
        envs=(("DEVICES", "Dev-1"),), mounts=(devices.Mount("/tmp/Dev-1", "/tmp/Dev-1", True),),
        devices=(devices.DeviceSpec("/dev/fake", "/dev/null", "rw"),), annotations=(("example.com/d", "1"),),
        cdi_devices=(f"{R}=CDI-Dev-1",)))
    await start(syncer, pod("g"))
    created = fake.containers.created[0]
    assert created.envs["DEVICES"] == "Dev-1"
    assert created.mounts[0] == cri.Mount(container_path="/tmp/Dev-1", host_path="/tmp/Dev-1", readonly=True)
    assert created.devices == (cri.Device(container_path="/dev/fake", host_path="/dev/null", permissions="rw"),)
    assert created.cdi_devices == (f"{R}=CDI-Dev-1",) and created.annotations["example.com/d"] == "1"


async def test_a_device_error_is_a_create_container_config_error(tmp_path: Any) -> None:
    syncer, fake, _ = await syncer_and_manager(tmp_path, "none")
    syncer.devices = _Devices(None, "device plugin PreStartContainer rpc failed with err: boom")  # type: ignore[assignment]
    p = pod("g")
    result = SyncResult()
    config = cri.PodSandboxConfig(metadata=cri.PodSandboxMetadata(name="p", uid=p.uid, namespace="ns"))
    ok = await syncer.start_container(p, p.spec.containers[0], False, "sb", config,
                                      cri.PodSandboxStatus(id="sb", ip="10.0.0.2"), RuntimePodStatus(uid=p.uid),
                                      result, {})
    assert not ok and not fake.containers.created
    assert result.waiting[p.spec.containers[0].name].reason == "CreateContainerConfigError"
    assert result.waiting[p.spec.containers[0].name].message == \
        "device plugin PreStartContainer rpc failed with err: boom"


def test_device_pods_leave_out_pods_known_terminated() -> None:
    """Upstream GetActivePods (isPodInactive): pods gone from the API, and terminal or deleted pods with nothing
    running any more, hold no devices; a pod still in its grace period (or terminal but still stopping) keeps
    them."""
    w = workers_module.PodWorkers.__new__(workers_module.PodWorkers)
    w.workers = {}

    class Relist:
        pods: ClassVar[dict[str, Any]] = {}

    class View:
        def __init__(self, running: bool) -> None:
            self.running = running

        def running_containers(self) -> list[str]:
            return ["c"] if self.running else []

    w.relist = Relist()  # type: ignore[assignment]
    deleting = "2026-11-27T10:00:00Z"
    rows = (("a", "Running", False, None, True), ("b", "Succeeded", False, None, False),
            ("b2", "Failed", False, None, True), ("c", "Running", True, None, False),
            ("d", "Running", False, deleting, False), ("d2", "Running", False, deleting, True),
            ("e", "Pending", False, None, None))
    for uid, phase, gone, deletion, running in rows:
        body: dict[str, Any] = {"metadata": {"uid": uid, "name": uid, "namespace": "ns"},
                                "spec": {"containers": [{"name": "c", "image": "i"}]}, "status": {"phase": phase}}
        if deletion:
            body["metadata"]["deletionTimestamp"] = deletion
        worker = workers_module._Worker(uid, body)
        worker.gone = gone
        w.workers[uid] = worker
        if running is not None:
            Relist.pods[uid] = View(running)
    assert w.device_pods() == {"a", "b2", "d2", "e"}
