"""
The asynchronous CRI v1 client: one object owns the gRPC channel to the container runtime.

Usage::

    async with CriClient("unix:///run/containerd/containerd.sock") as cri:
        version = await cri.check_runtime()
        sandbox_id = await cri.sandboxes.run(sandbox_config)
        image_ref = await cri.images.pull("docker.io/library/busybox:1.36")
        container_id = await cri.containers.create(sandbox_id, container_config, sandbox_config)
        await cri.containers.start(container_id)

(or ``await cri.open()`` / ``await cri.close()`` where one scope cannot hold the client, e.g. Kopf's
startup and cleanup handlers). Resource facades (`.sandboxes`, `.containers`, `.images`) group the calls
the way kubelet uses them. Every RPC goes through `CriClient._call`, the single choke point that sets a
deadline, refuses to queue on a broken connection and turns gRPC errors into `CriError`. Callers only
see `cri_client.types` and `CriError`: no protobuf, no grpc.

Restarts of the runtime are expected (containerd upgrades, crashes): while it is down, calls fail fast
with `CriError(UNAVAILABLE)` instead of hanging; once it is back, the same client object works again,
because the channel reconnects by itself with a short, capped backoff.
"""

from __future__ import annotations

import builtins
import math
import time
from collections.abc import AsyncIterator, Callable, Sequence
from types import TracebackType
from typing import Any, Final, Literal, Self

import grpc
import grpc.aio
from google.protobuf.message import DecodeError, Message

from cri_client import convert, errors, types
from cri_client.proto import api_pb2 as pb
from cri_client.proto import api_pb2_grpc as pb_grpc
from cri_client.proto import events_pb2 as events_pb
from cri_client.proto import events_pb2_grpc as events_grpc

DEFAULT_ENDPOINT: Final = "unix:///run/containerd/containerd.sock"
DEFAULT_TIMEOUT: Final = 120.0  # kubelet's --runtime-request-timeout default (2m)
DEFAULT_PULL_TIMEOUT: Final = 900.0  # a pull has no natural bound; this only stops a stuck one forever
CRI_API_VERSION: Final = "v1"

# kubelet's message size limit for CRI (16 MiB): ListContainers on a busy node exceeds gRPC's 4 MiB.
_MAX_MESSAGE_BYTES: Final = 16 * 1024 * 1024

# Reconnect quickly after a runtime restart: gRPC's default backoff grows to 120 s, which would leave
# the node "runtime down" for minutes after containerd is long back. kubelet's CRI client uses a
# 100 ms base delay capped at 3 s; use the same order of magnitude.
_CHANNEL_OPTIONS: Final[Sequence[tuple[str, Any]]] = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
    ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
    # A local unix socket must never be sent through an http_proxy from the environment.
    ("grpc.enable_http_proxy", 0),
    # gRPC shares connections (and their backoff state) between channels with equal options; keep each
    # client's connection its own, so a second client (a probe, a test) neither inherits nor resets it.
    ("grpc.use_local_subchannel_pool", 1),
)

_Service = Literal["RuntimeService", "ImageService"]

CONTAINERD_NAMESPACE: Final = "k8s.io"
"""The containerd namespace its CRI plugin keeps pods in (its default; the stack's config keeps it)."""


def normalize_endpoint(endpoint: str) -> str:
    """Accept kubelet-style endpoints ("unix:///path") and bare socket paths ("/path")."""
    if endpoint.startswith("/"):
        return f"unix://{endpoint}"
    return endpoint


class CriClient:
    """A connection to one CRI runtime endpoint, with resource facades for its calls.

    `timeout` bounds every call (like kubelet's runtime request timeout); calls that wait on purpose
    get it added to their own wait: `containers.stop` (the grace period) and `containers.exec_sync`
    (the command timeout). Image pulls use `pull_timeout` instead.
    """

    def __init__(
        self,
        endpoint: str = DEFAULT_ENDPOINT,
        timeout: float = DEFAULT_TIMEOUT,
        pull_timeout: float = DEFAULT_PULL_TIMEOUT,
        observer: Callable[[str, float, bool], None] | None = None,
    ) -> None:
        self.endpoint: Final = normalize_endpoint(endpoint)
        self.timeout: Final = timeout
        self.pull_timeout: Final = pull_timeout
        self._channel: grpc.aio.Channel | None = None
        self._runtime: pb_grpc.RuntimeServiceStub | None = None
        self._image: pb_grpc.ImageServiceStub | None = None
        self._events: events_grpc.EventsStub | None = None
        self.observer = observer
        """Called after every RPC with (method, seconds, failed): the kubelet's runtime operation metrics."""
        self.sandboxes: Final = Sandboxes(self)
        self.containers: Final = Containers(self)
        self.images: Final = Images(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.endpoint!r})"

    # -------------------------------------------------------------------------------------- lifecycle

    async def open(self) -> None:
        """Create the channel. Does not connect: gRPC connects lazily on the first call."""
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(self.endpoint, options=list(_CHANNEL_OPTIONS))
            self._runtime = pb_grpc.RuntimeServiceStub(self._channel)
            self._image = pb_grpc.ImageServiceStub(self._channel)
            self._events = events_grpc.EventsStub(self._channel)

    async def close(self) -> None:
        """Close the channel, cancelling calls still in flight. Safe to call twice."""
        channel, self._channel, self._runtime, self._image, self._events = self._channel, None, None, None, None
        if channel is not None:
            await channel.close()

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # ---------------------------------------------------------------------------------- the one choke

    async def _call(self, service: _Service, method: str, request: Message, *, deadline: float | None = None) -> Any:
        """Run one unary RPC with a deadline (seconds, default: the client timeout).

        The only place that touches grpc errors.

        `wait_for_ready=False`: while the runtime is unreachable the call fails at once with
        UNAVAILABLE instead of queueing until the deadline, so callers see an outage as an outage.
        """
        stub = self._runtime if service == "RuntimeService" else self._image
        if stub is None:
            raise RuntimeError(f"{self!r} is not open: use 'async with' or 'await client.open()' first")
        rpc = getattr(stub, method)
        started, failed = time.monotonic(), True
        try:
            response = await rpc(request, timeout=self.timeout if deadline is None else deadline, wait_for_ready=False)
            failed = False
            return response
        except grpc.aio.AioRpcError as e:
            raise errors.CriError(e.code().name, e.details() or "", f"{service}/{method}", self.endpoint) from e
        finally:
            if self.observer is not None:
                self.observer(method, time.monotonic() - started, failed)

    # ---------------------------------------------------------------------------------------- runtime

    async def version(self) -> types.Version:
        """The runtime's name, version and CRI API version."""
        # kubelet sends its own (historic) API version string; runtimes ignore it.
        response = await self._call("RuntimeService", "Version", pb.VersionRequest(version="0.1.0"))
        return convert.version_from_pb(response)

    async def status(self, verbose: bool = False) -> types.RuntimeStatus:
        """RuntimeReady/NetworkReady conditions (node readiness) and the runtime handlers."""
        response = await self._call("RuntimeService", "Status", pb.StatusRequest(verbose=verbose))
        return convert.runtime_status_from_pb(response)

    async def runtime_config(self) -> types.RuntimeConfig:
        """The runtime's global configuration (its cgroup driver); UNIMPLEMENTED from runtimes older than the call
        (containerd 1.x)."""
        response = await self._call("RuntimeService", "RuntimeConfig", pb.RuntimeConfigRequest())
        return convert.runtime_config_from_pb(response)

    async def check_runtime(self, deadline: float | None = None) -> types.Version:
        """Prove the runtime is reachable and speaks CRI v1; return its Version.

        Meant for startup: the errors name the endpoint so a wrong socket path or a stopped runtime is
        obvious from one log line.
        """
        try:
            response = await self._call(
                "RuntimeService", "Version", pb.VersionRequest(version="0.1.0"), deadline=deadline
            )
        except errors.CriError as e:
            if e.unavailable:
                problem = "is unreachable"
            elif e.deadline_exceeded:
                problem = "did not answer in time"
            else:
                problem = "failed the version check"
            raise errors.CriError(
                e.code,
                f"container runtime at {self.endpoint} {problem}: {e.details or e.code}",
                e.method,
                self.endpoint,
            ) from e
        version = convert.version_from_pb(response)
        if version.runtime_api_version != CRI_API_VERSION:
            raise errors.CriError(
                "FAILED_PRECONDITION",
                f"container runtime at {self.endpoint} ({version.runtime_name} {version.runtime_version})"
                f" speaks CRI {version.runtime_api_version!r}, kopflet needs {CRI_API_VERSION!r}",
                "RuntimeService/Version",
                self.endpoint,
            )
        return version


    # ------------------------------------------------------------------------------------------ events

    async def container_events(self) -> AsyncIterator[types.ContainerEvent]:
        """CRI's container events (``GetContainerEvents``, containerd 1.7 and later), for as long as the stream
        lasts; CriError when it breaks, UNIMPLEMENTED from a runtime without them. No deadline: the stream is
        meant to stay open."""
        if self._runtime is None:
            raise RuntimeError(f"{self!r} is not open: use 'async with' or 'await client.open()' first")
        call = self._runtime.GetContainerEvents(pb.GetEventsRequest(), wait_for_ready=False)
        async for response in self._stream(call, "RuntimeService/GetContainerEvents"):
            yield convert.container_event_from_pb(response)

    async def containerd_events(self, namespace: str = CONTAINERD_NAMESPACE) -> AsyncIterator[types.ContainerEvent]:
        """The same events from containerd's own event service on the same socket (its task starts and exits, its
        container removals in the CRI plugin's namespace): containerd 1.6 has no CRI events, and on later
        releases every subscriber gets every event, where CRI's stream hands each event to one reader only.
        UNIMPLEMENTED from a runtime that is not containerd."""
        if self._events is None:
            raise RuntimeError(f"{self!r} is not open: use 'async with' or 'await client.open()' first")
        filters = [f'namespace=="{namespace}",topic=="{topic}"' for topic in convert.CONTAINERD_TOPICS]
        call = self._events.Subscribe(events_pb.SubscribeRequest(filters=filters), wait_for_ready=False)
        async for envelope in self._stream(call, "containerd.services.events.v1.Events/Subscribe"):
            try:
                event = convert.container_event_from_envelope(envelope)
            except DecodeError:  # a payload this subset does not read: skipped, the relist still sees the change
                continue
            if event is not None:
                yield event

    async def _stream(self, call: Any, method: str) -> AsyncIterator[Any]:
        """A server stream's messages; its gRPC errors as CriError; the call cancelled when the reader stops."""
        try:
            async for message in call:
                yield message
        except grpc.aio.AioRpcError as e:
            raise errors.CriError(e.code().name, e.details() or "", method, self.endpoint) from e
        finally:
            call.cancel()


class _Facade:
    """Base of the resource facades: they only build requests and convert responses."""

    def __init__(self, client: CriClient) -> None:
        self._client = client

    async def _runtime(self, method: str, request: Message, *, deadline: float | None = None) -> Any:
        return await self._client._call("RuntimeService", method, request, deadline=deadline)

    async def _images(self, method: str, request: Message, *, deadline: float | None = None) -> Any:
        return await self._client._call("ImageService", method, request, deadline=deadline)


class Sandboxes(_Facade):
    """Pod sandboxes: the pause container plus the pod's network namespace and IP."""

    async def run(self, config: types.PodSandboxConfig, runtime_handler: str = "") -> str:
        """Create and start a sandbox (including CNI setup); return its ID."""
        request = pb.RunPodSandboxRequest(config=convert.sandbox_config_to_pb(config), runtime_handler=runtime_handler)
        response = await self._runtime("RunPodSandbox", request)
        return response.pod_sandbox_id

    async def stop(self, pod_sandbox_id: str) -> None:
        """Stop the sandbox and its containers and release the pod IP. Idempotent."""
        await self._runtime("StopPodSandbox", pb.StopPodSandboxRequest(pod_sandbox_id=pod_sandbox_id))

    async def remove(self, pod_sandbox_id: str) -> None:
        """Remove a sandbox (and any containers left in it). Idempotent for absent sandboxes."""
        await self._runtime("RemovePodSandbox", pb.RemovePodSandboxRequest(pod_sandbox_id=pod_sandbox_id))

    async def status(self, pod_sandbox_id: str) -> types.PodSandboxStatus:
        """State, IPs and namespaces of one sandbox; CriError(NOT_FOUND) when it does not exist."""
        response = await self._runtime("PodSandboxStatus", pb.PodSandboxStatusRequest(pod_sandbox_id=pod_sandbox_id))
        return convert.sandbox_status_from_pb(response.status)

    async def list(self, filter: types.PodSandboxFilter | None = None) -> builtins.list[types.PodSandbox]:
        """All sandboxes the runtime knows, optionally filtered by ID, state or labels."""
        request = pb.ListPodSandboxRequest()
        if filter is not None:
            request.filter.CopyFrom(convert.sandbox_filter_to_pb(filter))
        response = await self._runtime("ListPodSandbox", request)
        return [convert.sandbox_from_pb(item) for item in response.items]

    async def stats(self, pod_sandbox_id: str) -> types.PodSandboxStats:
        """Resource usage of one sandbox (pod cgroup, network, processes, containers); NOT_FOUND when absent.

        Beware containerd before 1.6.22: answering this writes its sandbox map under a read lock, and a request
        reading the map at the same moment kills containerd ("concurrent map read and map write"). The agent reads
        pod cgroups instead (`kopflet.stats.cgroup_stats`)."""
        response = await self._runtime("PodSandboxStats", pb.PodSandboxStatsRequest(pod_sandbox_id=pod_sandbox_id))
        return convert.sandbox_stats_from_pb(response.stats)

    async def list_stats(
        self, filter: types.PodSandboxStatsFilter | None = None
    ) -> builtins.list[types.PodSandboxStats]:
        """Resource usage of all sandboxes, optionally filtered by ID or labels (containerd before 1.6.22: see
        `stats`)."""
        request = pb.ListPodSandboxStatsRequest()
        if filter is not None:
            request.filter.CopyFrom(convert.sandbox_stats_filter_to_pb(filter))
        response = await self._runtime("ListPodSandboxStats", request)
        return [convert.sandbox_stats_from_pb(item) for item in response.stats]

    async def update_resources(self, pod_sandbox_id: str, resources: types.LinuxContainerResources | None,
                               overhead: types.LinuxContainerResources | None = None) -> None:
        """Tell the runtime a sandbox's new pod resources after an in-place resize (upstream
        UpdatePodSandboxResources): `resources` the containers' sum without overhead, `overhead` the pod's
        spec.overhead; None leaves a field unset. Runtimes may not implement it (UNIMPLEMENTED, or containerd 2.2's
        UNKNOWN "not implemented yet"); the caller decides whether that matters."""
        request = pb.UpdatePodSandboxResourcesRequest(pod_sandbox_id=pod_sandbox_id)
        if resources is not None:
            request.resources.CopyFrom(convert.linux_resources_to_pb(resources))
        if overhead is not None:
            request.overhead.CopyFrom(convert.linux_resources_to_pb(overhead))
        await self._runtime("UpdatePodSandboxResources", request)

    async def port_forward(self, pod_sandbox_id: str, ports: Sequence[int] = ()) -> str:
        """Prepare a port-forward into a sandbox's network namespace; return the streaming URL."""
        request = pb.PortForwardRequest(pod_sandbox_id=pod_sandbox_id, port=list(ports))
        response = await self._runtime("PortForward", request)
        return response.url


class Containers(_Facade):
    """Containers inside sandboxes: lifecycle, status, exec and the streaming URLs."""

    async def create(
        self,
        pod_sandbox_id: str,
        config: types.ContainerConfig,
        sandbox_config: types.PodSandboxConfig,
    ) -> str:
        """Create (not start) a container in a sandbox; return its ID.

        The sandbox config is repeated because the runtime derives the log directory and the
        namespaces from it.
        """
        request = pb.CreateContainerRequest(
            pod_sandbox_id=pod_sandbox_id,
            config=convert.container_config_to_pb(config),
            sandbox_config=convert.sandbox_config_to_pb(sandbox_config),
        )
        response = await self._runtime("CreateContainer", request)
        return response.container_id

    async def start(self, container_id: str) -> None:
        """Start a created container."""
        await self._runtime("StartContainer", pb.StartContainerRequest(container_id=container_id))

    # `timeout` here and in exec_sync is the CRI request's own field (enforced by the runtime), not an
    # asyncio timeout, hence the noqa.
    async def stop(self, container_id: str, timeout: int = 0) -> None:  # noqa: ASYNC109
        """Stop a container: the stop signal, then SIGKILL after `timeout` seconds. Idempotent.

        The call's deadline is the grace period plus the client timeout, so a long grace period is
        not cut short by the RPC deadline.
        """
        grace = max(0, int(timeout))
        await self._runtime(
            "StopContainer",
            pb.StopContainerRequest(container_id=container_id, timeout=grace),
            deadline=self._client.timeout + grace,
        )

    async def remove(self, container_id: str) -> None:
        """Remove a container (force-stopping it if needed). Idempotent for absent containers."""
        await self._runtime("RemoveContainer", pb.RemoveContainerRequest(container_id=container_id))

    async def update_resources(self, container_id: str, linux: types.LinuxContainerResources) -> None:
        """Change a container's cgroup settings in place (in-place pod resize). The runtime applies the whole
        set, so pass every field, not only the changed ones; a failed update leaves the old values."""
        request = pb.UpdateContainerResourcesRequest(container_id=container_id,
                                                     linux=convert.linux_resources_to_pb(linux))
        await self._runtime("UpdateContainerResources", request)

    async def reopen_log(self, container_id: str) -> None:
        """Make the runtime reopen the container's stdout/stderr log file (upstream ReopenContainerLog).

        Log rotation renames the file aside and calls this so the runtime writes to a new file at the
        log path; a container that is not running fails the call.
        """
        await self._runtime("ReopenContainerLog", pb.ReopenContainerLogRequest(container_id=container_id))

    async def status(self, container_id: str) -> types.ContainerStatus:
        """State, times, exit code and image of one container; CriError(NOT_FOUND) when absent."""
        response = await self._runtime("ContainerStatus", pb.ContainerStatusRequest(container_id=container_id))
        return convert.container_status_from_pb(response.status)

    async def list(self, filter: types.ContainerFilter | None = None) -> builtins.list[types.Container]:
        """All containers, optionally filtered by ID, state, sandbox or labels."""
        request = pb.ListContainersRequest()
        if filter is not None:
            request.filter.CopyFrom(convert.container_filter_to_pb(filter))
        response = await self._runtime("ListContainers", request)
        return [convert.container_from_pb(item) for item in response.containers]

    async def stats(self, container_id: str) -> types.ContainerStats:
        """CPU, memory and writable-layer usage of one container; CriError(NOT_FOUND) when absent."""
        response = await self._runtime("ContainerStats", pb.ContainerStatsRequest(container_id=container_id))
        return convert.container_stats_from_pb(response.stats)

    async def list_stats(self, filter: types.ContainerStatsFilter | None = None) -> builtins.list[types.ContainerStats]:
        """Usage of the runtime's containers (containerd: the running ones), optionally filtered."""
        request = pb.ListContainerStatsRequest()
        if filter is not None:
            request.filter.CopyFrom(convert.container_stats_filter_to_pb(filter))
        response = await self._runtime("ListContainerStats", request)
        return [convert.container_stats_from_pb(item) for item in response.stats]

    async def exec_sync(
        self,
        container_id: str,
        cmd: Sequence[str],
        timeout: float = 0,  # noqa: ASYNC109
    ) -> types.ExecSyncResult:
        """Run a command in a container to completion (exec probes); a non-zero exit is a result.

        `timeout` (seconds, rounded up; 0 = none) is enforced by the runtime, which then fails the call
        with DEADLINE_EXCEEDED (`CriError.deadline_exceeded`, a probe timeout); the call's own
        deadline is that plus the client timeout.
        """
        seconds = max(0, math.ceil(timeout))
        response = await self._runtime(
            "ExecSync",
            pb.ExecSyncRequest(container_id=container_id, cmd=list(cmd), timeout=seconds),
            deadline=self._client.timeout + seconds,
        )
        return convert.exec_sync_result_from_pb(response)

    async def exec(
        self,
        container_id: str,
        cmd: Sequence[str],
        *,
        tty: bool = False,
        stdin: bool = False,
        stdout: bool = True,
        stderr: bool | None = None,
    ) -> str:
        """Prepare an interactive exec; return the runtime's streaming-server URL to connect to.

        `stderr` defaults to ``not tty``: with a TTY both streams are one, and the CRI rejects both.
        """
        request = pb.ExecRequest(
            container_id=container_id,
            cmd=list(cmd),
            tty=tty,
            stdin=stdin,
            stdout=stdout,
            stderr=(not tty) if stderr is None else stderr,
        )
        response = await self._runtime("Exec", request)
        return response.url

    async def attach(
        self,
        container_id: str,
        *,
        tty: bool = False,
        stdin: bool = False,
        stdout: bool = True,
        stderr: bool | None = None,
    ) -> str:
        """Prepare an attach to the container's main process; return the streaming URL.

        `tty` must match the container's config; `stderr` defaults to ``not tty`` as for exec.
        """
        request = pb.AttachRequest(
            container_id=container_id,
            stdin=stdin,
            tty=tty,
            stdout=stdout,
            stderr=(not tty) if stderr is None else stderr,
        )
        response = await self._runtime("Attach", request)
        return response.url


class Images(_Facade):
    """Images on the node: pull (with the pull deadline), inspect, list, remove, filesystem usage."""

    async def pull(
        self,
        image: str,
        *,
        auth: types.AuthConfig | None = None,
        sandbox_config: types.PodSandboxConfig | None = None,
        deadline: float | None = None,
    ) -> str:
        """Pull an image; return the runtime's image reference (the ID to create containers with).

        The deadline defaults to the client's `pull_timeout`, not its request timeout.
        """
        request = pb.PullImageRequest(image=pb.ImageSpec(image=image))
        if auth is not None:
            request.auth.CopyFrom(convert.auth_config_to_pb(auth))
        if sandbox_config is not None:
            request.sandbox_config.CopyFrom(convert.sandbox_config_to_pb(sandbox_config))
        response = await self._images(
            "PullImage", request, deadline=self._client.pull_timeout if deadline is None else deadline
        )
        return response.image_ref

    async def status(self, image: str) -> types.Image | None:
        """The image if the runtime has it, None otherwise (absence is not an error in CRI)."""
        response = await self._images("ImageStatus", pb.ImageStatusRequest(image=pb.ImageSpec(image=image)))
        return convert.image_from_pb(response.image) if response.HasField("image") else None

    async def list(self) -> builtins.list[types.Image]:
        """All images the runtime has.

        No filter argument: containerd 1.6 ignores ListImages' filter; use `status()` for one image.
        """
        response = await self._images("ListImages", pb.ListImagesRequest())
        return [convert.image_from_pb(item) for item in response.images]

    async def remove(self, image: str) -> None:
        """Remove an image by reference or ID. Idempotent for absent images."""
        await self._images("RemoveImage", pb.RemoveImageRequest(image=pb.ImageSpec(image=image)))

    async def fs_info(self) -> types.ImageFsInfo:
        """Usage of the image (and container) filesystems, for image garbage collection."""
        response = await self._images("ImageFsInfo", pb.ImageFsInfoRequest())
        return convert.image_fs_info_from_pb(response)
