"""The pod-resources gRPC server on a real unix socket, called with a real gRPC client (upstream
pkg/kubelet/server/server.go ListenAndServePodResources, apis/podresources server_v1.go at v1.37.1): the answers,
upstream's errors and rate limit, the socket's life (replaced at start, directory 0750, removed at stop), the
request metrics, and the static CPU manager as the CPUs provider."""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from kopflet.api.spec import pod_from_body
from kopflet.apis.grpc import ratelimit
from kopflet.apis.podresources.proto.v1 import api_pb2 as v1
from kopflet.apis.podresources.proto.v1 import api_pb2_grpc as v1_grpc
from kopflet.apis.podresources.proto.v1alpha1 import api_pb2 as v1alpha1
from kopflet.apis.podresources.proto.v1alpha1 import api_pb2_grpc as v1alpha1_grpc
from kopflet.apis.podresources.resources import AllocatableResources, Providers
from kopflet.apis.podresources.server import ListenerError, PodResourcesServer
from kopflet.cm.cpumanager import cpu_manager as cm
from kopflet.cm.cpumanager.cpu_manager import Pods
from kopflet.cm.cpumanager.manager import CPUManager
from kopflet.metrics import KubeletMetrics
from kopflet.paths import Layout
from tests.unit.test_cpumanager_manager import TWO_CPUS
from tests.unit.test_podresources import GPU, HUGE, Recorder, pod, providers

TIMEOUT = 5.0


@pytest.fixture
def root() -> Iterator[Path]:
    """A short directory: a unix socket's path must fit in 108 bytes, pytest's tmp_path may not."""
    path = Path(tempfile.mkdtemp(prefix="podres-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Served:
    """A running server and stubs of both versions on one channel."""

    def __init__(self, server: PodResourcesServer, channel: grpc.aio.Channel, clock: Clock) -> None:
        self.server, self.channel, self.clock = server, channel, clock
        self.v1 = v1_grpc.PodResourcesListerStub(channel)
        self.v1alpha1 = v1alpha1_grpc.PodResourcesListerStub(channel)

    async def list(self) -> v1.ListPodResourcesResponse:
        return await self.v1.List(v1.ListPodResourcesRequest(), timeout=TIMEOUT)

    async def get(self, namespace: str, name: str) -> v1.GetPodResourcesResponse:
        return await self.v1.Get(v1.GetPodResourcesRequest(pod_namespace=namespace, pod_name=name), timeout=TIMEOUT)

    async def allocatable(self) -> v1.AllocatableResourcesResponse:
        return await self.v1.GetAllocatableResources(v1.AllocatableResourcesRequest(), timeout=TIMEOUT)


async def serve(root: Path, pods: list[dict[str, Any]], provided: Providers,
                metrics: KubeletMetrics | None = None) -> AsyncIterator[Served]:
    clock = Clock()
    socket = Layout(str(root)).pod_resources_socket
    server = PodResourcesServer(socket, pods=lambda: pods, providers=provided, metrics=metrics, clock=clock)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
            yield Served(server, channel, clock)
    finally:
        await server.stop()


PODS = [pod("web", "u-web", containers=("app",), sidecars=("proxy",), init=("setup",)),
        pod("done", "u-done", phase="Succeeded")]
RECORDER = Recorder(cpus={("u-web", "app"): (2, 3)}, devices={("u-web", "app"): (GPU,)},
                    memory={("u-web", "proxy"): (HUGE,)},
                    allocatable=AllocatableResources(devices=(GPU,), cpu_ids=(1, 2, 3), memory=(HUGE,)))


@pytest.fixture
async def served(root: Path) -> AsyncIterator[Served]:
    async for s in serve(root, PODS, providers(RECORDER)):
        yield s


def containers(message: v1.PodResources) -> list[tuple[str, list[int], list[str], list[str]]]:
    return [(c.name, list(c.cpu_ids), [d.resource_name for d in c.devices], [m.memory_type for m in c.memory])
            for c in message.containers]


async def test_list_answers_the_active_pods(served: Served) -> None:
    answer = await served.list()
    assert [(p.namespace, p.name) for p in answer.pod_resources] == [("ns", "web")]
    assert containers(answer.pod_resources[0]) == [("proxy", [], [], ["hugepages-2Mi"]),
                                                  ("app", [2, 3], ["example.com/gpu"], [])]


async def test_get_answers_one_pod_and_upstreams_error_for_the_others(served: Served) -> None:
    answer = await served.get("ns", "web")
    assert (answer.pod_resources.name, containers(answer.pod_resources)[1]) == \
        ("web", ("app", [2, 3], ["example.com/gpu"], []))
    for namespace, name in (("ns", "nope"), ("other", "web"), ("ns", "done")):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await served.get(namespace, name)
        assert (err.value.code(), err.value.details()) == \
            (grpc.StatusCode.UNKNOWN, f"pod {name} in namespace {namespace} not found")


async def test_get_allocatable_resources(served: Served) -> None:
    answer = await served.allocatable()
    assert (list(answer.cpu_ids), [d.resource_name for d in answer.devices], [m.size for m in answer.memory]) == \
        ([1, 2, 3], ["example.com/gpu"], [4 << 20])


async def test_v1alpha1_list_is_served_too(served: Served) -> None:
    answer = await served.v1alpha1.List(v1alpha1.ListPodResourcesRequest(), timeout=TIMEOUT)
    assert [(p.name, [(c.name, [list(d.device_ids) for d in c.devices]) for c in p.containers])
            for p in answer.pod_resources] == [("web", [("app", [["gpu-0", "gpu-1"]])]), ("done", [("main", [])])]


async def test_the_rate_limit_is_shared_by_every_method_and_refills(served: Served) -> None:
    calls = [served.list, served.allocatable, lambda: served.get("ns", "web")] * 4  # 12 calls at one instant
    codes = []
    for call in calls:
        try:
            await call()
            codes.append("OK")
        except grpc.aio.AioRpcError as err:
            codes.append(f"{err.code().name}: {err.details()}")
    assert codes == ["OK"] * 10 + ["RESOURCE_EXHAUSTED: rejected by rate limit"] * 2
    with pytest.raises(grpc.aio.AioRpcError):
        await served.v1alpha1.List(v1alpha1.ListPodResourcesRequest(), timeout=TIMEOUT)
    served.clock.now += 0.02  # 100 a second: two more tokens
    await served.list()
    await served.allocatable()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await served.list()
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_the_requests_are_counted_as_upstream_counts_them(root: Path) -> None:
    metrics = KubeletMetrics()
    async for s in serve(root, PODS, providers(RECORDER), metrics):
        await s.list()
        await s.allocatable()
        await s.get("ns", "web")
        with pytest.raises(grpc.aio.AioRpcError):
            await s.get("ns", "nope")
        await s.v1alpha1.List(v1alpha1.ListPodResourcesRequest(), timeout=TIMEOUT)
    text = metrics.exposition()
    for line in ('kubelet_pod_resources_endpoint_requests_total{server_api_version="v1"} 4',
                 'kubelet_pod_resources_endpoint_requests_total{server_api_version="v1alpha1"} 1',
                 'kubelet_pod_resources_endpoint_requests_list{server_api_version="v1"} 1',
                 'kubelet_pod_resources_endpoint_requests_get_allocatable{server_api_version="v1"} 1',
                 'kubelet_pod_resources_endpoint_requests_get{server_api_version="v1"} 2',
                 'kubelet_pod_resources_endpoint_errors_get{server_api_version="v1"} 1'):
        assert line in text.splitlines()
    assert "kubelet_pod_resources_endpoint_errors_list{" not in text  # never moves at v1.37.1


def stale_socket(root: Path) -> str:
    """A regular file where the socket goes, left by a previous run."""
    socket = Path(Layout(str(root)).pod_resources_socket)
    socket.parent.mkdir()
    socket.write_text("left by a previous run")
    return str(socket)


async def test_the_socket_replaces_a_stale_one_and_goes_at_stop(root: Path) -> None:
    socket = stale_socket(root)
    server = PodResourcesServer(socket, pods=lambda: [])
    await server.start()
    try:
        assert stat.S_ISSOCK(os.stat(socket).st_mode)
        assert os.listdir(os.path.dirname(socket)) == ["kubelet.sock"]  # the temporary name was renamed into place
        async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
            answer = await v1_grpc.PodResourcesListerStub(channel).List(v1.ListPodResourcesRequest(),
                                                                      timeout=TIMEOUT)
            assert list(answer.pod_resources) == []
    finally:
        await server.stop()
    assert os.listdir(os.path.dirname(socket)) == []
    await server.stop()  # twice: nothing left to do


async def test_the_directory_is_made_0750(root: Path) -> None:
    socket = Path(Layout(str(root / "deeper")).pod_resources_socket)
    old = os.umask(0)
    try:
        server = PodResourcesServer(str(socket), pods=lambda: [])
        await server.start()
    finally:
        os.umask(old)
    try:
        assert stat.S_IMODE(socket.parent.stat().st_mode) == 0o750
    finally:
        await server.stop()


async def test_a_socket_that_cannot_be_made_is_an_os_error(root: Path) -> None:
    (root / "pod-resources").write_text("a file where the directory should be")
    socket = Layout(str(root)).pod_resources_socket
    server = PodResourcesServer(socket, pods=lambda: [])
    with pytest.raises(ListenerError, match=f"^failed to create listener for podResources endpoint unix://{socket}: "):
        await server.start()
    await server.stop()


async def test_the_static_cpu_manager_reports_exclusive_and_allocatable_cpus(root: Path) -> None:
    """``--cpu-manager-policy=static --reserved-cpus=0`` on 2 CPUs: a Guaranteed pod with 1 CPU gets CPU 1 for
    itself; a Burstable pod runs on the shared pool and reports none; CPU 1 is what is allocatable."""
    manager = CPUManager("static", {}, reconcile_period=10.0, topology=TWO_CPUS, system_reserved={},
                         kube_reserved={}, reserved_cpus="0", state_file=str(root / "cpu_manager_state"), cri=None,
                         lock=asyncio.Lock())
    assert manager.get_allocatable_cpus() == ()  # not started: upstream's allocatableCPUs is set by Start
    await manager.start()
    resources = {"requests": {"cpu": "1", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "64Mi"}}
    guaranteed = pod("pinned", "u-pinned")
    guaranteed["spec"]["containers"][0].update(image="i", resources=resources)
    burstable = pod("shared", "u-shared")
    burstable["spec"]["containers"][0].update(image="i", resources={"requests": {"memory": "16Mi"}})
    for body in (guaranteed, burstable):
        admitted = cm.admit(manager.snapshot(Pods()), pod_from_body(body))
        assert admitted.rejection is None and admitted.state is not None
        await manager.commit(admitted.state)
    async for s in serve(root, [guaranteed, burstable], Providers(cpus=manager)):
        listed = {p.name: containers(p) for p in (await s.list()).pod_resources}
        assert listed == {"pinned": [("main", [1], [], [])], "shared": [("main", [], [], [])]}
        got = (await s.get("ns", "pinned")).pod_resources
        assert (containers(got), list(got.cpu_ids)) == ([("main", [1], [], [])], [])  # no pod-level CPUs
        assert list((await s.allocatable()).cpu_ids) == [1]


async def test_the_none_policy_reports_no_cpus(root: Path) -> None:
    manager = CPUManager("none", {}, reconcile_period=10.0, topology=TWO_CPUS, system_reserved={},
                         kube_reserved={}, reserved_cpus="", state_file=str(root / "cpu_manager_state"), cri=None,
                         lock=asyncio.Lock())
    await manager.start()
    async for s in serve(root, [pod("p", "u1")], Providers(cpus=manager)):
        assert containers((await s.list()).pod_resources[0]) == [("main", [], [], [])]
        assert list((await s.allocatable()).cpu_ids) == []


def test_the_server_limit_is_upstreams_by_default() -> None:
    server = PodResourcesServer("/x/kubelet.sock", pods=lambda: [])
    assert server.limiter.limit == ratelimit.Limit(100, 10)
    assert (server.use_active_pods, server.pod_level) == (True, False)
