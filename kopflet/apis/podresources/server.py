"""The pod-resources gRPC server (upstream pkg/kubelet/server/server.go `ListenAndServePodResources`, started by
kubelet.go `ListenAndServePodResources`): v1 and v1alpha1 `PodResourcesLister` on the unix socket
``<root-dir>/pod-resources/kubelet.sock``, rate limited as upstream (`podresources.DefaultQPS` requests a second,
`DefaultBurstTokens` at once, over every method: then ``RESOURCE_EXHAUSTED`` "rejected by rate limit").

The answers are `kopflet.apis.podresources.resources`'s (pure); here they meet the socket and the protobufs:

- `start`: the socket as upstream's `util.CreateListener` makes it: a stale socket file removed, the directory made
  (0750), the socket bound under a temporary name in that directory and renamed into place, so a client never
  finds a socket that does not answer. A socket that cannot be made is an OSError (upstream exits).
- each call reads the pods and the providers at once, on the event loop (they are in memory), so an answer is one
  consistent view; the request counters are upstream's ``kubelet_pod_resources_endpoint_*`` metrics.
- `stop`: the server stops (in-flight calls get a second) and the socket file is removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import grpc

from kopflet.apis.grpc import ratelimit
from kopflet.apis.podresources import resources
from kopflet.apis.podresources.proto.v1 import api_pb2 as v1
from kopflet.apis.podresources.proto.v1 import api_pb2_grpc as v1_grpc
from kopflet.apis.podresources.proto.v1alpha1 import api_pb2 as v1alpha1
from kopflet.apis.podresources.proto.v1alpha1 import api_pb2_grpc as v1alpha1_grpc
from kopflet.apis.podresources.resources import Providers
from kopflet.metrics import KubeletMetrics

logger = logging.getLogger(__name__)

STOP_GRACE = 1.0
"""Seconds in-flight calls get when the agent stops."""
DEFAULT_LIMIT = ratelimit.Limit(resources.DEFAULT_QPS, resources.DEFAULT_BURST_TOKENS)
"""upstream `WithRateLimiter(ctx, "podresources", DefaultQPS, DefaultBurstTokens)`."""
NO_PROVIDERS = Providers()

Pods = Callable[[], Iterable[Mapping[str, Any]]]
"""The pods the agent handles, as API objects with the status it wrote last (upstream's pod manager)."""


# ------------------------------------------------------------------------------------------- conversion


def _topology(topology: resources.TopologyInfo | None) -> v1.TopologyInfo | None:
    return None if topology is None else v1.TopologyInfo(nodes=[v1.NUMANode(ID=n) for n in topology.nodes])


def _devices(devices: Iterable[resources.ContainerDevices]) -> list[v1.ContainerDevices]:
    return [v1.ContainerDevices(resource_name=d.resource_name, device_ids=list(d.device_ids),
                                topology=_topology(d.topology)) for d in devices]


def _memory(memory: Iterable[resources.ContainerMemory]) -> list[v1.ContainerMemory]:
    return [v1.ContainerMemory(memory_type=m.memory_type, size=m.size, topology=_topology(m.topology))
            for m in memory]


def _claim_resource(claim: resources.ClaimResource) -> v1.ClaimResource:
    message = v1.ClaimResource(cdi_devices=[v1.CDIDevice(name=d.name) for d in claim.cdi_devices],
                               driver_name=claim.driver_name, pool_name=claim.pool_name,
                               device_name=claim.device_name)
    if claim.share_id is not None:
        message.share_id = claim.share_id
    return message


def to_v1(pod: resources.PodResources) -> v1.PodResources:
    """One pod's resources as the v1 message."""
    return v1.PodResources(
        name=pod.name, namespace=pod.namespace, cpu_ids=list(pod.cpu_ids), memory=_memory(pod.memory),
        containers=[v1.ContainerResources(
            name=c.name, devices=_devices(c.devices), cpu_ids=list(c.cpu_ids), memory=_memory(c.memory),
            dynamic_resources=[v1.DynamicResource(claim_name=r.claim_name, claim_namespace=r.claim_namespace,
                                                  claim_resources=[_claim_resource(x) for x in r.claim_resources])
                               for r in c.dynamic_resources])
            for c in pod.containers])


def to_v1_allocatable(allocatable: resources.AllocatableResources) -> v1.AllocatableResourcesResponse:
    return v1.AllocatableResourcesResponse(devices=_devices(allocatable.devices), cpu_ids=list(allocatable.cpu_ids),
                                           memory=_memory(allocatable.memory))


def to_v1alpha1(pod: resources.PodResources) -> v1alpha1.PodResources:
    """upstream `v1DevicesToAlphaV1`: resource names and device IDs only."""
    return v1alpha1.PodResources(name=pod.name, namespace=pod.namespace, containers=[
        v1alpha1.ContainerResources(name=c.name, devices=[
            v1alpha1.ContainerDevices(resource_name=d.resource_name, device_ids=list(d.device_ids))
            for d in c.devices]) for c in pod.containers])


# --------------------------------------------------------------------------------------------- services


class _Limiter:
    """The one rate limit every method of the server shares (upstream's unary interceptor)."""

    def __init__(self, limit: ratelimit.Limit, clock: Callable[[], float]) -> None:
        self.limit, self.clock = limit, clock
        self.bucket = ratelimit.Bucket()

    async def check(self, context: grpc.aio.ServicerContext) -> None:
        """Refuse the call (RESOURCE_EXHAUSTED) when the bucket is empty."""
        allowed, self.bucket = ratelimit.allow(self.limit, self.bucket, self.clock())
        if not allowed:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, ratelimit.LIMIT_EXCEEDED_MESSAGE)


class _V1(v1_grpc.PodResourcesListerServicer):
    """upstream v1PodResourcesServer (the methods are named as the gRPC service's)."""

    def __init__(self, server: PodResourcesServer) -> None:
        self.server = server

    async def List(self, request: v1.ListPodResourcesRequest,
                   context: grpc.aio.ServicerContext) -> v1.ListPodResourcesResponse:
        s = self.server
        await s.limiter.check(context)
        s.count("v1", "requests_list")
        pods = resources.list_pod_resources(s.providers, s.pods(), use_active_pods=s.use_active_pods,
                                            pod_level=s.pod_level)
        return v1.ListPodResourcesResponse(pod_resources=[to_v1(p) for p in pods])

    async def GetAllocatableResources(self, request: v1.AllocatableResourcesRequest,
                                      context: grpc.aio.ServicerContext) -> v1.AllocatableResourcesResponse:
        s = self.server
        await s.limiter.check(context)
        s.count("v1", "requests_get_allocatable")
        return to_v1_allocatable(resources.allocatable_resources(s.providers))

    async def Get(self, request: v1.GetPodResourcesRequest,
                  context: grpc.aio.ServicerContext) -> v1.GetPodResourcesResponse:
        s = self.server
        await s.limiter.check(context)
        s.count("v1", "requests_get")
        try:
            pod = resources.get_pod_resources(s.providers, s.pods(), request.pod_namespace, request.pod_name,
                                              pod_level=s.pod_level)
        except resources.NotFoundError as err:
            s.count("v1", "errors_get", total=False)
            # a plain Go error from a handler: gRPC code Unknown with the error's text
            await context.abort(grpc.StatusCode.UNKNOWN, str(err))
        return v1.GetPodResourcesResponse(pod_resources=to_v1(pod))


class _V1alpha1(v1alpha1_grpc.PodResourcesListerServicer):
    """upstream v1alpha1PodResourcesServer."""

    def __init__(self, server: PodResourcesServer) -> None:
        self.server = server

    async def List(self, request: v1alpha1.ListPodResourcesRequest,
                   context: grpc.aio.ServicerContext) -> v1alpha1.ListPodResourcesResponse:
        s = self.server
        await s.limiter.check(context)
        s.count("v1alpha1")
        pods = resources.list_pod_resources_v1alpha1(s.providers, s.pods())
        return v1alpha1.ListPodResourcesResponse(pod_resources=[to_v1alpha1(p) for p in pods])


# ----------------------------------------------------------------------------------------------- server


class ListenerError(OSError):
    """The socket cannot be made (upstream logs "Failed to create listener for podResources endpoint" and exits)."""


def _bind_socket(server: grpc.aio.Server, path: str) -> None:
    """upstream `util.CreateListener`: unlink a stale socket, make its directory (0750), listen under a temporary
    name there and rename it into place. Blocking (small file operations). Raises OSError."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o750, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=directory)
    os.close(fd)
    os.remove(temporary)
    try:
        server.add_insecure_port(f"unix:{temporary}")
    except RuntimeError as exc:  # grpc's way of saying the address could not be bound
        raise OSError(str(exc)) from None
    try:
        os.rename(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise


class PodResourcesServer:
    """The pod-resources API of one node agent: built with no I/O, served from `start` to `stop`."""

    def __init__(self, socket_path: str, *, pods: Pods, providers: Providers = NO_PROVIDERS,
                 metrics: KubeletMetrics | None = None, limit: ratelimit.Limit = DEFAULT_LIMIT,
                 clock: Callable[[], float] = time.monotonic, use_active_pods: bool = True,
                 pod_level: bool = False) -> None:
        """`pods` the agent's pods (with their last written status); `providers` the resource managers';
        `use_active_pods` and `pod_level` are upstream's `KubeletPodResourcesListUseActivePods` (on at v1.37.1) and
        `PodLevelResourceManagers` (off)."""
        self.socket_path, self.pods, self.providers, self.metrics = socket_path, pods, providers, metrics
        self.use_active_pods, self.pod_level = use_active_pods, pod_level
        self.limiter = _Limiter(limit, clock)
        self._server: grpc.aio.Server | None = None

    def count(self, version: str, counter: str = "", *, total: bool = True) -> None:
        """upstream's PodResourcesEndpoint* counters: every request, and the method's own."""
        if self.metrics is None:
            return
        if total:
            self.metrics.pod_resources_requests.labels(version).inc()
        if counter:
            getattr(self.metrics, f"pod_resources_{counter}").labels(version).inc()

    async def start(self) -> None:
        """Listen on the socket and serve. `ListenerError` (an OSError) when the socket cannot be made."""
        server = grpc.aio.server()
        v1alpha1_grpc.add_PodResourcesListerServicer_to_server(_V1alpha1(self), server)
        v1_grpc.add_PodResourcesListerServicer_to_server(_V1(self), server)
        try:
            await asyncio.to_thread(_bind_socket, server, self.socket_path)
        except OSError as exc:
            await server.stop(None)
            raise ListenerError(f"failed to create listener for podResources endpoint unix://{self.socket_path}: "
                                f"{exc}") from None
        await server.start()
        self._server = server
        logger.info(f"serving the pod-resources API on unix://{self.socket_path} "
                    f"(rate limit {self.limiter.limit.qps:g}/s, burst {self.limiter.limit.burst})")

    async def stop(self) -> None:
        """Stop serving and remove the socket file."""
        server, self._server = self._server, None
        if server is None:
            return
        await server.stop(STOP_GRACE)
        with contextlib.suppress(OSError):
            await asyncio.to_thread(os.unlink, self.socket_path)


__all__ = [
    "DEFAULT_LIMIT",
    "NO_PROVIDERS",
    "STOP_GRACE",
    "ListenerError",
    "PodResourcesServer",
    "to_v1",
    "to_v1_allocatable",
    "to_v1alpha1",
]
