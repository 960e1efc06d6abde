"""The pod-resources API's answers (upstream pkg/kubelet/apis/podresources server_v1.go, server_v1alpha1.go at
v1.37.1), the CPU manager as its CPUs provider (cm/container_manager_linux.go GetCPUs, GetAllocatableCPUs), the rate
limit (apis/grpc/ratelimit.go over x/time/rate) and the protobuf conversion, table-driven. The server on a real
socket is tests/unit/test_podresources_server.py."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from kopflet.apis.grpc import ratelimit
from kopflet.apis.podresources import resources as pr
from kopflet.apis.podresources import server as prs
from kopflet.apis.podresources.resources import (
    AllocatableResources,
    CDIDevice,
    ClaimResource,
    ContainerDevices,
    ContainerMemory,
    ContainerResources,
    DynamicResource,
    PodResources,
    Providers,
    TopologyInfo,
)
from kopflet.cm.cpumanager import cpu_manager as cm
from kopflet.cm.cpumanager.cpuset import parse
from kopflet.cm.cpumanager.static_policy import State
from kopflet.paths import Layout
from tests.unit.test_cpumanager_manager import TWO_CPUS, static


def pod(name: str, uid: str = "", *, namespace: str = "ns", phase: str = "Running",
        containers: Sequence[str] = ("main",), init: Sequence[str] = (), sidecars: Sequence[str] = (),
        ephemeral: Sequence[str] = ()) -> dict[str, Any]:
    """A Pod as the agent holds it; `init` are ordinary init containers, `sidecars` restartable ones (they come
    after the ordinary ones in the spec here)."""
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}"},
            "spec": {"initContainers": [{"name": n} for n in init] +
                                       [{"name": n, "restartPolicy": "Always"} for n in sidecars],
                     "containers": [{"name": n} for n in containers],
                     "ephemeralContainers": [{"name": n} for n in ephemeral]},
            "status": {"phase": phase} if phase else {}}


class Recorder:
    """Every provider at once, answering from tables and recording the calls, in order."""

    def __init__(self, cpus: Mapping[tuple[str, str], Sequence[int]] | None = None,
                 pod_cpus: Mapping[str, Sequence[int]] | None = None,
                 devices: Mapping[tuple[str, str], Sequence[ContainerDevices]] | None = None,
                 memory: Mapping[tuple[str, str], Sequence[ContainerMemory]] | None = None,
                 pod_memory: Mapping[str, Sequence[ContainerMemory]] | None = None,
                 dynamic: Mapping[tuple[str, str], Sequence[DynamicResource]] | None = None,
                 allocatable: AllocatableResources | None = None) -> None:
        self.cpus, self.pod_cpus, self.devices = cpus or {}, pod_cpus or {}, devices or {}
        self.memory, self.pod_memory, self.dynamic = memory or {}, pod_memory or {}, dynamic or {}
        self.allocatable = allocatable or AllocatableResources()
        self.calls: list[str] = []

    @staticmethod
    def _key(p: Mapping[str, Any], c: Mapping[str, Any]) -> tuple[str, str]:
        return p["metadata"]["uid"], c["name"]

    def get_cpus(self, p: Mapping[str, Any], c: Mapping[str, Any]) -> Sequence[int]:
        self.calls.append(f"cpus {self._key(p, c)}")
        return self.cpus.get(self._key(p, c), ())

    def get_pod_cpus(self, uid: str) -> Sequence[int]:
        self.calls.append(f"pod cpus {uid}")
        return self.pod_cpus.get(uid, ())

    def get_allocatable_cpus(self) -> Sequence[int]:
        return self.allocatable.cpu_ids

    def get_memory(self, p: Mapping[str, Any], c: Mapping[str, Any]) -> Sequence[ContainerMemory]:
        return self.memory.get(self._key(p, c), ())

    def get_pod_memory(self, uid: str) -> Sequence[ContainerMemory]:
        self.calls.append(f"pod memory {uid}")
        return self.pod_memory.get(uid, ())

    def get_allocatable_memory(self) -> Sequence[ContainerMemory]:
        return self.allocatable.memory

    def update_allocated_devices(self) -> None:
        self.calls.append("update devices")

    def get_devices(self, uid: str, name: str) -> Sequence[ContainerDevices]:
        return self.devices.get((uid, name), ())

    def get_allocatable_devices(self) -> Sequence[ContainerDevices]:
        return self.allocatable.devices

    def get_dynamic_resources(self, p: Mapping[str, Any], c: Mapping[str, Any]) -> Sequence[DynamicResource]:
        return self.dynamic.get(self._key(p, c), ())


def providers(r: Recorder) -> Providers:
    return Providers(cpus=r, memory=r, devices=r, dynamic_resources=r)


def names(answer: Sequence[PodResources]) -> list[tuple[str, str, list[str]]]:
    return [(p.namespace, p.name, [c.name for c in p.containers]) for p in answer]


GPU = ContainerDevices("example.com/gpu", ("gpu-0", "gpu-1"), TopologyInfo((0,)))
HUGE = ContainerMemory("hugepages-2Mi", 4 << 20, TopologyInfo((0, 1)))
CLAIM = DynamicResource("claim", "ns", (ClaimResource((CDIDevice("vendor.com/gpu=gpu0"),), "driver", "pool", "dev",
                                                      share_id="s1"),))


# ------------------------------------------------------------------------------------------------- List


@pytest.mark.parametrize(("pods", "use_active", "expected"), [
    pytest.param([], True, [], id="no pods"),
    pytest.param([pod("a"), pod("b", phase="Pending"), pod("c", phase="")], True,
                 [("ns", "a", ["main"]), ("ns", "b", ["main"]), ("ns", "c", ["main"])],
                 id="running, pending and not yet admitted pods are active"),
    pytest.param([pod("a"), pod("done", phase="Succeeded"), pod("failed", phase="Failed")], True,
                 [("ns", "a", ["main"])], id="terminal pods are left out (KubeletPodResourcesListUseActivePods)"),
    pytest.param([pod("a"), pod("done", phase="Succeeded")], False,
                 [("ns", "a", ["main"]), ("ns", "done", ["main"])], id="without the gate: every pod"),
    pytest.param([pod("p", containers=("app", "helper"), init=("setup",), sidecars=("proxy", "logs"),
                      ephemeral=("debug",))], True,
                 [("ns", "p", ["proxy", "logs", "app", "helper"])],
                 id="restartable init containers first, then app containers; no init, no ephemeral"),
    pytest.param([pod("p", containers=())], True, [("ns", "p", [])], id="a pod without containers"),
    pytest.param([pod("x", namespace="a"), pod("x", namespace="b")], True,
                 [("a", "x", ["main"]), ("b", "x", ["main"])], id="the order the agent holds them in"),
])
def test_list_reports_the_active_pods_and_their_containers(pods: list[dict[str, Any]], use_active: bool,
                                                           expected: list[tuple[str, str, list[str]]]) -> None:
    r = Recorder()
    assert names(pr.list_pod_resources(providers(r), pods, use_active_pods=use_active)) == expected
    assert r.calls[0] == "update devices"  # upstream asks the device manager to refresh first


def test_list_asks_every_provider_for_each_container() -> None:
    r = Recorder(cpus={("u1", "app"): (2, 3)}, devices={("u1", "app"): (GPU,)}, memory={("u1", "proxy"): (HUGE,)},
                 dynamic={("u1", "app"): (CLAIM,)})
    answer = pr.list_pod_resources(providers(r), [pod("p", "u1", containers=("app",), sidecars=("proxy",))])
    assert answer == (PodResources("p", "ns", (
        ContainerResources("proxy", memory=(HUGE,)),
        ContainerResources("app", devices=(GPU,), cpu_ids=(2, 3), dynamic_resources=(CLAIM,)))),)


@pytest.mark.parametrize(("pod_level", "cpu_ids", "memory", "asked"), [
    pytest.param(False, (), (), False, id="PodLevelResourceManagers off (v1.37.1's default): not even asked"),
    pytest.param(True, (1, 2), (HUGE,), True, id="on: the pod-level CPUs and memory"),
])
def test_pod_level_resources_only_with_pod_level_resource_managers(
        pod_level: bool, cpu_ids: tuple[int, ...], memory: tuple[ContainerMemory, ...], asked: bool) -> None:
    r = Recorder(pod_cpus={"u1": (1, 2)}, pod_memory={"u1": (HUGE,)})
    for answer in (pr.list_pod_resources(providers(r), [pod("p", "u1")], pod_level=pod_level)[0],
                   pr.get_pod_resources(providers(r), [pod("p", "u1")], "ns", "p", pod_level=pod_level)):
        assert (answer.cpu_ids, answer.memory) == (cpu_ids, memory)
    assert ("pod cpus u1" in r.calls) is asked and ("pod memory u1" in r.calls) is asked


def test_no_providers_report_empty_resources() -> None:
    answer = pr.list_pod_resources(Providers(), [pod("p", containers=("a", "b"))])
    assert answer == (PodResources("p", "ns", (ContainerResources("a"), ContainerResources("b"))),)
    assert pr.allocatable_resources(Providers()) == AllocatableResources()


# -------------------------------------------------------------------------------------------------- Get


PODS = [pod("web", "u-web"), pod("web", "u-other", namespace="other"), pod("done", phase="Succeeded"),
        pod("failed", phase="Failed"), pod("pending", phase="Pending")]


@pytest.mark.parametrize(("namespace", "name", "expected"), [
    ("ns", "web", "u-web"),
    ("other", "web", "u-other"),
    ("ns", "pending", "uid-pending"),
])
def test_get_finds_the_pod_by_namespace_and_name(namespace: str, name: str, expected: str) -> None:
    r = Recorder(cpus={(expected, "main"): (1,)})
    answer = pr.get_pod_resources(providers(r), PODS, namespace, name)
    assert (answer.namespace, answer.name, answer.containers) == \
        (namespace, name, (ContainerResources("main", cpu_ids=(1,)),))
    assert "update devices" not in r.calls  # upstream's Get does not refresh the devices


@pytest.mark.parametrize(("namespace", "name", "message"), [
    pytest.param("ns", "nope", "pod nope in namespace ns not found", id="unknown pod"),
    pytest.param("nowhere", "web", "pod web in namespace nowhere not found", id="unknown namespace"),
    pytest.param("", "web", "pod web in namespace  not found", id="no namespace"),
    pytest.param("ns", "", "pod  in namespace ns not found", id="no name"),
    pytest.param("ns", "done", "pod done in namespace ns not found", id="a succeeded pod is inactive"),
    pytest.param("ns", "failed", "pod failed in namespace ns not found", id="a failed pod is inactive"),
])
def test_get_refuses_unknown_and_inactive_pods_with_upstreams_message(namespace: str, name: str,
                                                                      message: str) -> None:
    with pytest.raises(pr.NotFoundError) as err:
        pr.get_pod_resources(Providers(), PODS, namespace, name)
    assert str(err.value) == message


# --------------------------------------------------------------------------------- GetAllocatableResources


def test_allocatable_resources_are_the_providers_capacity() -> None:
    capacity = AllocatableResources(devices=(GPU,), cpu_ids=(1, 2, 3), memory=(HUGE,))
    assert pr.allocatable_resources(providers(Recorder(allocatable=capacity))) == capacity


# --------------------------------------------------------------------------------------------- v1alpha1


def test_v1alpha1_lists_every_pod_with_its_app_containers_devices_only() -> None:
    r = Recorder(cpus={("u1", "app"): (1,)}, devices={("u1", "app"): (GPU,), ("u1", "proxy"): (GPU,)})
    pods = [pod("p", "u1", containers=("app",), sidecars=("proxy",)), pod("done", phase="Succeeded")]
    assert pr.list_pod_resources_v1alpha1(providers(r), pods) == (
        PodResources("p", "ns", (ContainerResources("app", devices=(GPU,)),)),
        PodResources("done", "ns", (ContainerResources("main"),)))
    assert r.calls == ["update devices"]  # no CPUs asked: v1alpha1 has none


# --------------------------------------------------------------------------------- the CPU manager's CPUs


@pytest.mark.parametrize(("state", "uid", "container", "expected"), [
    pytest.param(State(parse("0")), "u1", "main", (), id="nothing assigned: the shared pool is not reported"),
    pytest.param(State(parse("0"), {"u1": {"main": parse("1-3,5")}}), "u1", "main", (1, 2, 3, 5),
                 id="the exclusive CPUs, sorted"),
    pytest.param(State(parse("0"), {"u1": {"main": parse("1")}}), "u1", "side", (),
                 id="another container of the pod on the shared pool"),
    pytest.param(State(parse("0"), {"u1": {"main": parse("1")}}), "u2", "main", (), id="another pod"),
])
def test_container_cpu_ids_are_the_exclusive_cpus_only(state: State, uid: str, container: str,
                                                       expected: tuple[int, ...]) -> None:
    assert cm.container_cpu_ids(state, uid, container) == expected


@pytest.mark.parametrize(("policy", "expected"), [
    pytest.param(None, (), id="none policy: nothing allocatable"),
    pytest.param(static(system_reserved={"cpu": "1"}), (1,), id="static: every CPU but the one reserved"),
    pytest.param(static(reserved_cpus="1"), (0,), id="static with --reserved-cpus=1"),
])
def test_allocatable_cpu_ids_are_the_online_cpus_minus_the_reserved(policy: Any, expected: tuple[int, ...]) -> None:
    assert cm.allocatable_cpu_ids(policy) == expected
    assert TWO_CPUS.details.cpus() == parse("0-1")


# -------------------------------------------------------------------------------------------- rate limit


LIMIT = ratelimit.Limit(qps=100, burst=10)


@pytest.mark.parametrize(("times", "expected"), [
    pytest.param([0.0] * 11, [True] * 10 + [False], id="a full bucket of 10, then refused"),
    pytest.param([0.0] * 10 + [0.005, 0.01], [True] * 10 + [False, True], id="one token every 10 ms"),
    pytest.param([0.0] * 10 + [10.0] * 11, [True] * 20 + [False], id="refilled to the burst, no more"),
    pytest.param([5.0] * 10 + [4.0, 5.0, 5.5], [True] * 10 + [False, False, True],
                 id="a clock going back gives no tokens"),
    pytest.param([0.0, 0.0, 0.1], [True, True, True], id="first call at any time: full"),
])
def test_the_token_bucket_is_x_time_rates(times: list[float], expected: list[bool]) -> None:
    bucket, got = ratelimit.Bucket(), []
    for now in times:
        allowed, bucket = ratelimit.allow(LIMIT, bucket, now)
        got.append(allowed)
    assert got == expected


def test_the_pod_resources_limit_is_upstreams() -> None:
    assert (pr.DEFAULT_QPS, pr.DEFAULT_BURST_TOKENS) == (100, 10)
    assert prs.DEFAULT_LIMIT == ratelimit.Limit(100, 10)
    assert (ratelimit.LIMIT_EXCEEDED_CODE, ratelimit.LIMIT_EXCEEDED_MESSAGE) == \
        ("RESOURCE_EXHAUSTED", "rejected by rate limit")


# ---------------------------------------------------------------------------------------- socket, protobuf


@pytest.mark.parametrize(("root", "socket"), [
    ("/var/lib/kopflet", "/var/lib/kopflet/pod-resources/kubelet.sock"),
    ("/var/lib/kubelet", "/var/lib/kubelet/pod-resources/kubelet.sock"),
])
def test_the_socket_is_under_the_root_dir(root: str, socket: str) -> None:
    assert Layout(root).pod_resources_socket == socket
    assert Layout(root).pod_resources_dir == socket.rsplit("/", 1)[0]


def test_the_v1_message_carries_every_field() -> None:
    message = prs.to_v1(PodResources("p", "ns", (ContainerResources(
        "app", devices=(GPU, ContainerDevices("example.com/nic", ("nic0",))), cpu_ids=(2, 3), memory=(HUGE,),
        dynamic_resources=(CLAIM, DynamicResource("c2", "ns", (ClaimResource(driver_name="d"),)))),),
        cpu_ids=(2, 3), memory=(HUGE,)))
    container = message.containers[0]
    assert (message.name, message.namespace, list(message.cpu_ids)) == ("p", "ns", [2, 3])
    assert [(d.resource_name, list(d.device_ids), [n.ID for n in d.topology.nodes], d.HasField("topology"))
            for d in container.devices] == [("example.com/gpu", ["gpu-0", "gpu-1"], [0], True),
                                            ("example.com/nic", ["nic0"], [], False)]
    assert [(m.memory_type, m.size, [n.ID for n in m.topology.nodes]) for m in container.memory] == \
        [("hugepages-2Mi", 4 << 20, [0, 1])]
    first, second = container.dynamic_resources
    assert (first.claim_name, first.claim_namespace) == ("claim", "ns")
    resource = first.claim_resources[0]
    assert ([d.name for d in resource.cdi_devices], resource.driver_name, resource.pool_name, resource.device_name,
            resource.HasField("share_id"), resource.share_id) == \
        (["vendor.com/gpu=gpu0"], "driver", "pool", "dev", True, "s1")
    assert not second.claim_resources[0].HasField("share_id")  # optional: absent, not ""


def test_the_v1alpha1_message_keeps_names_and_device_ids() -> None:
    message = prs.to_v1alpha1(PodResources("p", "ns", (ContainerResources("app", devices=(GPU,), cpu_ids=(1,)),)))
    assert [(c.name, [(d.resource_name, list(d.device_ids)) for d in c.devices]) for c in message.containers] == \
        [("app", [("example.com/gpu", ["gpu-0", "gpu-1"])])]


def test_the_allocatable_message() -> None:
    message = prs.to_v1_allocatable(AllocatableResources(devices=(GPU,), cpu_ids=(0, 1), memory=(HUGE,)))
    assert (list(message.cpu_ids), [d.resource_name for d in message.devices],
            [m.memory_type for m in message.memory]) == ([0, 1], ["example.com/gpu"], ["hugepages-2Mi"])
