"""
A simulated container runtime for hollow nodes: CRI v1 and containerd's event service, served from memory.

Why: a hollow node (issue 24; upstream kubemark's hollow kubelet) runs the whole agent with only the container
runtime simulated, so many nodes fit on one machine. Upstream kubemark starts k8s.io/cri-client/pkg/fake (a gRPC
server over cri-api's FakeRuntimeService) on a unix socket and points the kubelet's real remote runtime client at
it. This is kopflet's counterpart: `HollowRuntime` serves RuntimeService and ImageService (the generated stubs of
cri_client/proto/api.proto) and the subset of containerd's Events service the agent subscribes to
(cri_client/proto/events.proto) with ``grpc.aio`` on a unix socket, so `cri_client.CriClient` talks to it
unchanged. Nothing runs: state lives in memory on one event loop; every change is made with no await between its
check and its write, so concurrent calls see consistent state.

Where upstream's fake is cruder, this follows containerd (the runtime kopflet drives, v2.4.2's CRI plugin):
- ids are random 64-hex; sandbox and container names are reserved (``name_namespace_uid_attempt``,
  ``container_pod_namespace_uid_attempt``) until removal, a second use FAILED_PRECONDITION ("failed to reserve
  sandbox name ..."); a runtime handler other than "" or the configured ones fails RunPodSandbox.
- absent objects: the status calls answer NOT_FOUND with containerd's texts ("an error occurred when try to find
  container \"<id>\": not found"); Stop/Remove of an absent sandbox, container or image succeed (CRI's idempotence).
- sandboxes get IPs from the configured CIDRs (default: containerd's default CNI bridge, 10.88.0.0/16; a second
  CIDR gives an additional IP, as dual-stack), the next free address after the last given, like host-local IPAM;
  released at stop. A host-network sandbox and a stopped one report no IP (containerd reads it from the open netns).
- statuses: times in ns; EXITED with reason "Completed" (code 0) or "Error"; metadata, labels, annotations,
  mounts and resources echoed (UpdateContainerResources replaces the latter); image is the image's first repo tag,
  image_ref its repo digest, image_id its ID (as containerd's ContainerStatus); log_path is the sandbox's
  log_directory joined with the container's log_path, a file that does not exist unless `Simulation.log_files`.
- events: containerd's envelopes for "/tasks/start", "/tasks/exit" and "/containers/delete" (the sandbox's own
  task and container under the sandbox id; an exec's exit under its exec id), honouring the subscriber's filters;
  and CRI's GetContainerEvents (created/started/stopped/deleted), sent here to every reader where containerd hands
  each event to one.

Containers: a started container is RUNNING until stopped, unless it exits by itself: the first `ExitRule` whose
image and command match decides (its code, after its delay), else a shell one-liner ``sh -c "exit N"`` (sh, bash,
ash or dash, any path) exits N after `Simulation.shell_exit_after`. StopContainer with a grace period exits
`Simulation.stop_exit_code` (default 0: upstream's fake never sets an exit code either); a kill (grace period 0, or
the forced stops of RemoveContainer and StopPodSandbox) exits 137, as SIGKILL does. ExecSync answers exit 0 with no
output, or N for ``sh -c "exit N"``; a command timeout no longer than the exec latency is DEADLINE_EXCEEDED.

Latencies: upstream's fake (and so kubemark) answers at once. Here each mutating call first sleeps its `Latencies`
value; the defaults split this project's measured runtime floor on containerd (bench/results: sandbox + container
start p50 179 ms, stop + remove 196 ms), so a hollow node paces like a real one; `Latencies.zero()` is upstream's.

Not simulated: Exec, Attach and PortForward (UNIMPLEMENTED: their streams need a process), checkpoints, metrics.
RuntimeConfig answers UNIMPLEMENTED like containerd 1.6 unless `Simulation.cgroup_driver` is set. Stats are zeros.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hashlib
import ipaddress
import itertools
import os
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import grpc
import grpc.aio
from google.protobuf.message import Message

from cri_client import convert
from cri_client.proto import api_pb2 as pb
from cri_client.proto import api_pb2_grpc as pb_grpc
from cri_client.proto import events_pb2 as events_pb
from cri_client.proto import events_pb2_grpc as events_grpc
from kopflet import gotext
from kopflet.images import imageref

CRI_API_VERSION: Final = "v1"
KILLED_EXIT_CODE: Final = 137
"""128 + SIGKILL: what a killed container (and a stopped sandbox's pause process) exits with."""
STATE_NAMES: Final = {pb.CONTAINER_CREATED: "CONTAINER_CREATED", pb.CONTAINER_RUNNING: "CONTAINER_RUNNING",
                      pb.CONTAINER_EXITED: "CONTAINER_EXITED", pb.CONTAINER_UNKNOWN: "CONTAINER_UNKNOWN"}
_SHELLS: Final = frozenset({"sh", "bash", "ash", "dash"})
_SHELL_EXIT: Final = re.compile(r"\s*exit(?:\s+(\d+))?\s*;?\s*")
_ID: Final = re.compile(r"sha256:[0-9a-f]{64}")


# ------------------------------------------------------------------------------------------- configuration


@dataclasses.dataclass(frozen=True, kw_only=True)
class Latencies:
    """Seconds each call waits before it acts (0: at once). The sum of run_sandbox, create and start is a pod's
    start, of stop, stop_sandbox, remove and remove_sandbox its teardown (bench's runtime floor: 179 and 196 ms)."""

    run_sandbox: float = 0.10
    stop_sandbox: float = 0.10
    remove_sandbox: float = 0.04
    create: float = 0.03
    start: float = 0.05
    stop: float = 0.03
    remove: float = 0.02
    pull: float = 0.05
    """A pull of an image the registry has; the node's cache is not simulated, so every pull waits."""
    remove_image: float = 0.01
    exec_sync: float = 0.01

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            if getattr(self, field.name) < 0:
                raise ValueError(f"latency {field.name} must not be negative")

    @classmethod
    def zero(cls) -> Latencies:
        """No latency at all, as upstream's fake runtime."""
        return cls(**{field.name: 0.0 for field in dataclasses.fields(cls)})


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExitRule:
    """Started containers that match exit by themselves: `exit_code` after `after` seconds.

    `image` ("" any) is compared, both normalised like containerd (``busybox`` is
    ``docker.io/library/busybox:latest``), with the image as the pod names it; `command` (() any) with the
    container's command followed by its args, exactly. `reason` ("" derives Completed/Error) may say e.g.
    "OOMKilled"."""

    exit_code: int = 0
    after: float = 0.0
    image: str = ""
    command: tuple[str, ...] = ()
    reason: str = ""

    def matches(self, image: str, argv: tuple[str, ...]) -> bool:
        if self.image and _docker_ref(self.image) != image:
            return False
        return not self.command or self.command == argv


@dataclasses.dataclass(frozen=True, kw_only=True)
class Simulation:
    """What the simulated runtime does; the defaults make a containerd-like node with small latencies."""

    latencies: Latencies = dataclasses.field(default_factory=Latencies)
    pod_cidrs: tuple[str, ...] = ("10.88.0.0/16",)
    """Where sandbox IPs come from: the first CIDR gives the IP, each further one an additional IP."""
    exit_rules: tuple[ExitRule, ...] = ()
    shell_exit_after: float | None = 0.01
    """Delay before a ``sh -c "exit N"`` container exits with N; None runs such containers until stopped."""
    stop_exit_code: int = 0
    """The exit code of a container stopped with a grace period (a kill is always 137)."""
    cgroup_driver: str | None = None
    """RuntimeConfig's answer ("systemd" or "cgroupfs"); None: UNIMPLEMENTED, as containerd 1.6."""
    runtime_handlers: tuple[str, ...] = ("runc",)
    """Handlers besides the default "" that RunPodSandbox accepts and Status lists."""
    runtime_name: str = "hollow"
    runtime_version: str = "0.1.0"
    sandbox_image: str = "registry.k8s.io/pause:3.10"
    """Present and pinned from the start, as containerd keeps its sandbox image; "" for none."""
    images: tuple[str, ...] = ()
    """Images present from the start, as if pulled."""
    unpullable: tuple[str, ...] = ()
    """Images whose pull fails NOT_FOUND, as a registry without them."""
    image_size: int = 4 * 1024 * 1024
    image_fs_path: str = ""
    """ImageFsInfo's mountpoint (the agent statvfs()es it, so it must exist); "": the socket's directory."""
    log_files: bool = False
    """Create each container's (empty) log file at start, as containerd does; off: the path is only reported."""
    namespace: str = "k8s.io"
    """The containerd namespace of the event envelopes (the CRI plugin's)."""

    def __post_init__(self) -> None:
        if self.cgroup_driver not in (None, "systemd", "cgroupfs"):
            raise ValueError(f"unknown cgroup driver {self.cgroup_driver!r}")
        if not self.pod_cidrs:
            raise ValueError("at least one pod CIDR is needed")
        for cidr in self.pod_cidrs:
            ipaddress.ip_network(cidr, strict=False)


# ------------------------------------------------------------------------------------------------- state


class _Fault(Exception):
    """A call's failure as the runtime answers it: a gRPC code and containerd's text."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(code, details)
        self.code, self.details = code, details


def _not_found_container(container_id: str) -> _Fault:
    return _Fault(grpc.StatusCode.NOT_FOUND,
                  f'an error occurred when try to find container "{container_id}": not found')


@dataclasses.dataclass(eq=False)
class _Sandbox:
    id: str
    name: str
    config: pb.PodSandboxConfig
    runtime_handler: str
    created_at: int
    ips: tuple[str, ...]
    pid: int
    ready: bool = True


@dataclasses.dataclass(eq=False)
class _Container:
    id: str
    name: str
    sandbox_id: str
    config: pb.ContainerConfig
    image_id: str
    log_path: str
    created_at: int
    resources: pb.LinuxContainerResources | None
    state: int = pb.CONTAINER_CREATED
    started_at: int = 0
    finished_at: int = 0
    exit_code: int = 0
    reason: str = ""
    pid: int = 0
    starting: bool = False
    removing: bool = False
    exit_task: asyncio.Task[None] | None = None


@dataclasses.dataclass(eq=False)
class _Image:
    id: str
    references: list[str]
    size: int
    pinned: bool = False


class _IpPool:
    """One CIDR's addresses, given the way CNI's host-local IPAM does: the next free one after the last given,
    the network's first address (the bridge's gateway) kept back."""

    def __init__(self, cidr: str) -> None:
        network = ipaddress.ip_network(cidr, strict=False)
        self.version = network.version
        self.first = int(network.network_address) + 1
        self.last = int(network.broadcast_address) - (1 if network.version == 4 else 0)
        self.range = f"{ipaddress.ip_address(self.first)}-{ipaddress.ip_address(self.last)}"
        self.used: set[int] = {self.first}
        self.cursor = self.first

    def allocate(self) -> str | None:
        size = self.last - self.first + 1
        for step in range(1, size + 1):
            candidate = self.first + (self.cursor - self.first + step) % size
            if candidate not in self.used:
                self.used.add(candidate)
                self.cursor = candidate
                return str(ipaddress.ip_address(candidate))
        return None

    def release(self, ip: str) -> None:
        self.used.discard(int(ipaddress.ip_address(ip)))


def _docker_ref(text: str) -> str | None:
    """containerd's docker.ParseDockerRef: the normalised reference, ``:latest`` added, a tag dropped beside a
    digest; None when it does not parse."""
    try:
        ref = imageref.parse_normalized_named(text)
    except imageref.InvalidReferenceError:
        return None
    if ref.digest:
        return f"{ref.name}@{ref.digest}"
    return f"{ref.name}:{ref.tag or imageref.DEFAULT_TAG}"


def _digest(kind: str, text: str) -> str:
    return "sha256:" + hashlib.sha256(f"{kind}:{text}".encode()).hexdigest()


def _shell_exit(argv: Iterable[str]) -> int | None:
    """N for ``sh -c "exit N"`` (any of sh, bash, ash, dash, by any path), else None."""
    args = list(argv)
    if len(args) != 3 or os.path.basename(args[0]) not in _SHELLS or args[1] != "-c":
        return None
    match = _SHELL_EXIT.fullmatch(args[2])
    if match is None:
        return None
    return int(match.group(1) or 0) % 256


async def _wait(seconds: float) -> None:
    if seconds > 0:
        await asyncio.sleep(seconds)


def _selected(labels: Mapping[str, str], selector: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def _touch(path: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).touch()


# ------------------------------------------------------------------------------------------ event filters

_CLAUSE: Final = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(?:(==|!=|~=)\s*("(?:[^"\\]|\\.)*"|[^,"\s]+))?\s*')


def _parse_filter(text: str) -> list[tuple[str, str, str]]:
    """One containerd filter (``topic=="/tasks/exit",namespace=="k8s.io"``): its clauses, all to hold. ValueError
    when it does not parse."""
    clauses: list[tuple[str, str, str]] = []
    position = 0
    while True:
        match = _CLAUSE.match(text, position)
        if match is None or match.end() == position:
            raise ValueError(f"parse error in filter {text!r} at {position}")
        field, operator, value = match.group(1), match.group(2) or "", match.group(3) or ""
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        clauses.append((field, operator, value))
        position = match.end()
        if position == len(text):
            return clauses
        if text[position] != ",":
            raise ValueError(f"parse error in filter {text!r} at {position}")
        position += 1


def _envelope_matches(envelope: events_pb.Envelope, filters: list[list[tuple[str, str, str]]]) -> bool:
    """containerd's filters over an envelope's topic and namespace: any filter, each clause of it (no filter: all);
    a field the envelope lacks is absent, as containerd's adaptor has it."""
    if not filters:
        return True
    fields = {"topic": envelope.topic, "namespace": envelope.namespace}
    for clauses in filters:
        for field, operator, value in clauses:
            present = field in fields
            actual = fields.get(field, "")
            if operator == "":
                held = present
            elif operator == "==":
                held = present and actual == value
            elif operator == "!=":
                held = actual != value
            else:
                try:
                    held = present and re.search(value, actual) is not None
                except re.error:
                    held = False
            if not held:
                break
        else:
            return True
    return False


class _Subscribers:
    """Readers of an event stream: each has its own queue, every event goes to each; None ends them. The queues are
    unbounded: a reader that goes away ends its call, which drops its queue."""

    def __init__(self) -> None:
        self._queues: set[asyncio.Queue[Message | None]] = set()

    def __bool__(self) -> bool:
        return bool(self._queues)

    @contextlib.contextmanager
    def subscribe(self) -> Iterator[asyncio.Queue[Message | None]]:
        queue: asyncio.Queue[Message | None] = asyncio.Queue()
        self._queues.add(queue)
        try:
            yield queue
        finally:
            self._queues.discard(queue)

    def publish(self, message: Message | None) -> None:
        for queue in self._queues:
            queue.put_nowait(message)


# ---------------------------------------------------------------------------------------------- servicer


def _rpc(method: Callable[[Any, Any], Awaitable[Message]]) -> Callable[[Any, Any, grpc.aio.ServicerContext],
                                                                        Awaitable[Message]]:
    """A unary handler from a method that raises `_Fault`: the fault becomes the call's status."""

    @functools.wraps(method)
    async def handler(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Message:
        try:
            return await method(self, request)
        except _Fault as fault:
            await context.abort(fault.code, fault.details)
            raise  # abort raises; this keeps type checkers content

    return handler


class _Service(pb_grpc.RuntimeServiceServicer, pb_grpc.ImageServiceServicer, events_grpc.EventsServicer):
    """The RPC handlers and the state they share; `HollowRuntime` owns one and serves it."""

    def __init__(self, sim: Simulation, image_fs_path: str) -> None:
        self.sim, self.image_fs_path = sim, image_fs_path
        self.sandboxes: dict[str, _Sandbox] = {}
        self.containers: dict[str, _Container] = {}
        self.images: dict[str, _Image] = {}
        self.names: dict[str, str] = {}
        """Reserved sandbox and container names -> the id that holds each."""
        self.pools = [_IpPool(cidr) for cidr in sim.pod_cidrs]
        self.envelopes = _Subscribers()
        self.cri_events = _Subscribers()
        self.exit_tasks: set[asyncio.Task[None]] = set()
        self._pids = itertools.cycle(range(1000, 1 << 22))  # pid_max's default range, reused as the kernel does
        for image in ((sim.sandbox_image,) if sim.sandbox_image else ()) + sim.images:
            ref = _docker_ref(image)
            if ref is None:
                raise ValueError(f"image {image!r} is not a valid reference")
            self._add_image(ref, pinned=image == sim.sandbox_image)

    # ------------------------------------------------------------------------------------------- helpers

    def _reserve(self, name: str, object_id: str, kind: str) -> None:
        holder = self.names.get(name)
        if holder is not None:
            raise _Fault(grpc.StatusCode.FAILED_PRECONDITION,
                         f'failed to reserve {kind} name "{name}": name "{name}" is reserved for "{holder}"')
        self.names[name] = object_id

    def _release(self, name: str, object_id: str) -> None:
        if self.names.get(name) == object_id:
            del self.names[name]

    def _add_image(self, ref: str, *, pinned: bool = False) -> _Image:
        """The image a pull of `ref` gives: its ID and repo digest derived from the reference, as if the registry
        served one manifest per reference."""
        image_id = _digest("config", ref)
        image = self.images.get(image_id)
        if image is None:
            image = self.images[image_id] = _Image(image_id, [], self.sim.image_size, pinned)
        name = ref.partition("@")[0] if "@" in ref else ref.rpartition(":")[0]
        digest_ref = ref if "@" in ref else f"{name}@{_digest('manifest', ref)}"
        for reference in (ref, digest_ref):
            if reference not in image.references:
                image.references.append(reference)
        return image

    def _resolve_image(self, ref_or_id: str) -> _Image | None:
        """containerd's LocalResolve: an image ID, else a reference normalised and looked up."""
        if _ID.fullmatch(ref_or_id):
            return self.images.get(ref_or_id)
        ref = _docker_ref(ref_or_id)
        if ref is not None:
            for image in self.images.values():
                if ref in image.references:
                    return image
        return self.images.get(ref_or_id)

    def _image_pb(self, image: _Image) -> pb.Image:
        return pb.Image(id=image.id, size=image.size, pinned=image.pinned,
                        repo_tags=[r for r in image.references if "@" not in r],
                        repo_digests=[r for r in image.references if "@" in r])

    def _sandbox_status(self, sandbox: _Sandbox) -> pb.PodSandboxStatus:
        config = sandbox.config
        status = pb.PodSandboxStatus(
            id=sandbox.id, metadata=config.metadata, created_at=sandbox.created_at,
            state=pb.SANDBOX_READY if sandbox.ready else pb.SANDBOX_NOTREADY,
            labels=config.labels, annotations=config.annotations, runtime_handler=sandbox.runtime_handler)
        if sandbox.ready and sandbox.ips:
            status.network.ip = sandbox.ips[0]
            status.network.additional_ips.extend(pb.PodIP(ip=ip) for ip in sandbox.ips[1:])
        else:
            status.network.SetInParent()
        status.linux.namespaces.options.CopyFrom(config.linux.security_context.namespace_options)
        return status

    def _container_image(self, container: _Container) -> tuple[pb.ImageSpec, str]:
        """(image, image_ref) as containerd's ContainerStatus: the first repo tag and repo digest of the image,
        the config's image and the ID when the image is gone."""
        image = self.images.get(container.image_id)
        spec, ref = pb.ImageSpec(), container.image_id
        spec.CopyFrom(container.config.image)
        if image is not None:
            tags = [r for r in image.references if "@" not in r]
            digests = [r for r in image.references if "@" in r]
            if tags:
                spec = pb.ImageSpec(image=tags[0])
            if digests:
                ref = digests[0]
        return spec, ref

    def _container_status(self, container: _Container) -> pb.ContainerStatus:
        config = container.config
        spec, ref = self._container_image(container)
        reason = container.reason
        if container.state == pb.CONTAINER_EXITED and not reason:
            reason = "Completed" if container.exit_code == 0 else "Error"
        status = pb.ContainerStatus(
            id=container.id, metadata=config.metadata, state=container.state, created_at=container.created_at,
            started_at=container.started_at if container.state != pb.CONTAINER_CREATED else 0,
            finished_at=container.finished_at if container.state == pb.CONTAINER_EXITED else 0,
            exit_code=container.exit_code, image=spec, image_ref=ref, image_id=container.image_id, reason=reason,
            labels=config.labels, annotations=config.annotations, mounts=config.mounts, log_path=container.log_path)
        if container.resources is not None:
            status.resources.linux.CopyFrom(container.resources)
        return status

    def _container_pb(self, container: _Container) -> pb.Container:
        config = container.config
        return pb.Container(
            id=container.id, pod_sandbox_id=container.sandbox_id, metadata=config.metadata, image=config.image,
            image_ref=container.image_id, image_id=container.image_id, state=container.state,
            created_at=container.created_at, labels=config.labels, annotations=config.annotations)

    def _container_stats(self, container: _Container, now: int) -> pb.ContainerStats:
        config = container.config
        stats = pb.ContainerStats()
        stats.attributes.CopyFrom(pb.ContainerAttributes(id=container.id, metadata=config.metadata,
                                                         labels=config.labels, annotations=config.annotations))
        stats.cpu.timestamp = stats.memory.timestamp = stats.writable_layer.timestamp = now
        stats.cpu.usage_core_nano_seconds.value = stats.cpu.usage_nano_cores.value = 0
        stats.memory.working_set_bytes.value = stats.memory.usage_bytes.value = 0
        stats.writable_layer.fs_id.mountpoint = self.image_fs_path
        stats.writable_layer.used_bytes.value = stats.writable_layer.inodes_used.value = 0
        return stats

    def _sandbox_stats(self, sandbox: _Sandbox, now: int) -> pb.PodSandboxStats:
        config = sandbox.config
        stats = pb.PodSandboxStats()
        stats.attributes.CopyFrom(pb.PodSandboxAttributes(id=sandbox.id, metadata=config.metadata,
                                                          labels=config.labels, annotations=config.annotations))
        linux = stats.linux
        linux.cpu.timestamp = linux.memory.timestamp = linux.network.timestamp = linux.process.timestamp = now
        linux.cpu.usage_core_nano_seconds.value = linux.cpu.usage_nano_cores.value = 0
        linux.memory.working_set_bytes.value = linux.memory.usage_bytes.value = 0
        linux.network.default_interface.name = "eth0"
        linux.process.process_count.value = sum(1 for c in self._sandbox_containers(sandbox.id)
                                                if c.state == pb.CONTAINER_RUNNING)
        linux.containers.extend(self._container_stats(c, now) for c in self._sandbox_containers(sandbox.id)
                                if c.state == pb.CONTAINER_RUNNING)
        return stats

    def _sandbox_containers(self, sandbox_id: str) -> list[_Container]:
        return [c for c in self.containers.values() if c.sandbox_id == sandbox_id]

    # --------------------------------------------------------------------------------------------- events

    def _envelope(self, topic: str, event: Message) -> None:
        """A change as containerd's event service sends it, to its subscribers."""
        if self.envelopes:
            type_name = f"containerd.events.{type(event).__name__}"
            self.envelopes.publish(convert.envelope(topic, event, type_name, time.time_ns(), self.sim.namespace))

    def _cri_event(self, object_id: str, sandbox_id: str, kind: int) -> None:
        """A change as CRI's GetContainerEvents sends it, with the pod's statuses (containerd's
        generateAndSendContainerEvent), to its readers."""
        if not self.cri_events:
            return
        response = pb.ContainerEventResponse(container_id=object_id, container_event_type=kind,
                                             created_at=time.time_ns())
        sandbox = self.sandboxes.get(sandbox_id)
        if sandbox is not None:
            response.pod_sandbox_status.CopyFrom(self._sandbox_status(sandbox))
        response.containers_statuses.extend(self._container_status(c) for c in self._sandbox_containers(sandbox_id))
        self.cri_events.publish(response)

    def _task_exit(self, container_id: str, exec_id: str, pid: int, code: int, at: int) -> None:
        exit_event = events_pb.TaskExit(container_id=container_id, id=exec_id, pid=pid, exit_status=code)
        exit_event.exited_at.FromNanoseconds(at)
        self._envelope("/tasks/exit", exit_event)

    # ---------------------------------------------------------------------------------------- transitions

    def exit_container(self, container: _Container, code: int, reason: str = "") -> None:
        """A running container's process ended: EXITED, its code and time, the task's exit published."""
        if container.state != pb.CONTAINER_RUNNING:
            return
        container.state, container.exit_code, container.reason = pb.CONTAINER_EXITED, code, reason
        container.finished_at = time.time_ns()
        task, container.exit_task = container.exit_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        self._task_exit(container.id, container.id, container.pid, code, container.finished_at)
        self._cri_event(container.id, container.sandbox_id, pb.CONTAINER_STOPPED_EVENT)

    def _schedule_exit(self, container: _Container) -> None:
        """The container's own exit, if a rule or a shell one-liner says it has one."""
        config = container.config
        argv = (*config.command, *config.args)
        named = _docker_ref(config.image.user_specified_image or config.image.image) or ""
        image = self.images.get(container.image_id)
        names = {named, *(image.references if image is not None else ())}
        rule = next((r for r in self.sim.exit_rules if any(r.matches(n, argv) for n in names)), None)
        if rule is not None:
            after, code, reason = rule.after, rule.exit_code, rule.reason
        else:
            shell = _shell_exit(argv)
            if shell is None or self.sim.shell_exit_after is None:
                return
            after, code, reason = self.sim.shell_exit_after, shell, ""

        async def exit_later() -> None:
            await _wait(after)
            self.exit_container(container, code, reason)

        task = asyncio.get_running_loop().create_task(exit_later(), name=f"hollow-exit-{container.id[:12]}")
        container.exit_task = task
        self.exit_tasks.add(task)
        task.add_done_callback(self.exit_tasks.discard)

    def _stop_sandbox_now(self, sandbox: _Sandbox) -> None:
        """Kill its running containers, close its network (the IPs go back), end its pause process."""
        for container in self._sandbox_containers(sandbox.id):
            self.exit_container(container, KILLED_EXIT_CODE)
        if not sandbox.ready:
            return
        sandbox.ready = False
        for pool, ip in zip(self.pools, sandbox.ips, strict=False):
            pool.release(ip)
        self._task_exit(sandbox.id, sandbox.id, sandbox.pid, KILLED_EXIT_CODE, time.time_ns())
        self._cri_event(sandbox.id, sandbox.id, pb.CONTAINER_STOPPED_EVENT)

    def _remove_container_now(self, container: _Container) -> None:
        if self.containers.pop(container.id, None) is None:
            return
        self._release(container.name, container.id)
        if container.exit_task is not None:
            container.exit_task.cancel()
        self._envelope("/containers/delete", events_pb.ContainerDelete(id=container.id))
        self._cri_event(container.id, container.sandbox_id, pb.CONTAINER_DELETED_EVENT)

    # ------------------------------------------------------------------------------------ RuntimeService

    @_rpc
    async def Version(self, request: pb.VersionRequest) -> pb.VersionResponse:
        return pb.VersionResponse(version="0.1.0", runtime_name=self.sim.runtime_name,
                                  runtime_version=self.sim.runtime_version, runtime_api_version=CRI_API_VERSION)

    @_rpc
    async def Status(self, request: pb.StatusRequest) -> pb.StatusResponse:
        response = pb.StatusResponse()
        response.status.conditions.extend([pb.RuntimeCondition(type="RuntimeReady", status=True),
                                           pb.RuntimeCondition(type="NetworkReady", status=True)])
        for name in ("", *self.sim.runtime_handlers):
            handler = response.runtime_handlers.add(name=name)
            handler.features.recursive_read_only_mounts = True
        response.features.supplemental_groups_policy = True
        return response

    @_rpc
    async def RuntimeConfig(self, request: pb.RuntimeConfigRequest) -> pb.RuntimeConfigResponse:
        if self.sim.cgroup_driver is None:
            # What grpc-go answers for a method the server does not know (containerd 1.6's CRI has no RuntimeConfig).
            raise _Fault(grpc.StatusCode.UNIMPLEMENTED,
                         "unknown method RuntimeConfig for service runtime.v1.RuntimeService")
        driver = pb.SYSTEMD if self.sim.cgroup_driver == "systemd" else pb.CGROUPFS
        return pb.RuntimeConfigResponse(linux=pb.LinuxRuntimeConfiguration(cgroup_driver=driver))

    @_rpc
    async def UpdateRuntimeConfig(self, request: pb.UpdateRuntimeConfigRequest) -> pb.UpdateRuntimeConfigResponse:
        return pb.UpdateRuntimeConfigResponse()

    @_rpc
    async def RunPodSandbox(self, request: pb.RunPodSandboxRequest) -> pb.RunPodSandboxResponse:
        config = request.config
        if not config.HasField("metadata"):
            raise _Fault(grpc.StatusCode.UNKNOWN, "sandbox config must include metadata")
        metadata = config.metadata
        sandbox_id = secrets.token_hex(32)
        name = "_".join((metadata.name, metadata.namespace, metadata.uid, str(metadata.attempt)))
        self._reserve(name, sandbox_id, "sandbox")
        taken: list[tuple[_IpPool, str]] = []
        try:
            if request.runtime_handler and request.runtime_handler not in self.sim.runtime_handlers:
                raise _Fault(grpc.StatusCode.UNKNOWN, f'unable to get OCI runtime for sandbox "{sandbox_id}": '
                                                      f'no runtime for "{request.runtime_handler}" is configured')
            await _wait(self.sim.latencies.run_sandbox)
            if config.linux.security_context.namespace_options.network != pb.NODE:
                for pool in self.pools:
                    ip = pool.allocate()
                    if ip is None:
                        raise _Fault(grpc.StatusCode.UNKNOWN,
                                     f'failed to setup network for sandbox "{sandbox_id}": plugin type="host-local" '
                                     f"failed (add): failed to allocate for range 0: no IP addresses available in "
                                     f"range set: {pool.range}")
                    taken.append((pool, ip))
        except BaseException:
            for pool, ip in taken:
                pool.release(ip)
            self._release(name, sandbox_id)
            raise
        sandbox = _Sandbox(sandbox_id, name, config, request.runtime_handler, time.time_ns(),
                           tuple(ip for _, ip in taken), next(self._pids))
        self.sandboxes[sandbox_id] = sandbox
        self._cri_event(sandbox_id, sandbox_id, pb.CONTAINER_CREATED_EVENT)
        self._envelope("/tasks/start", events_pb.TaskStart(container_id=sandbox_id, pid=sandbox.pid))
        self._cri_event(sandbox_id, sandbox_id, pb.CONTAINER_STARTED_EVENT)
        return pb.RunPodSandboxResponse(pod_sandbox_id=sandbox_id)

    @_rpc
    async def StopPodSandbox(self, request: pb.StopPodSandboxRequest) -> pb.StopPodSandboxResponse:
        sandbox = self.sandboxes.get(request.pod_sandbox_id)
        if sandbox is None:
            return pb.StopPodSandboxResponse()
        for container in self._sandbox_containers(sandbox.id):
            self.exit_container(container, KILLED_EXIT_CODE)
        if sandbox.ready:
            await _wait(self.sim.latencies.stop_sandbox)
        self._stop_sandbox_now(sandbox)
        return pb.StopPodSandboxResponse()

    @_rpc
    async def RemovePodSandbox(self, request: pb.RemovePodSandboxRequest) -> pb.RemovePodSandboxResponse:
        sandbox = self.sandboxes.get(request.pod_sandbox_id)
        if sandbox is None:
            return pb.RemovePodSandboxResponse()
        self._stop_sandbox_now(sandbox)
        await _wait(self.sim.latencies.remove_sandbox)
        if self.sandboxes.get(sandbox.id) is not sandbox:
            return pb.RemovePodSandboxResponse()
        self._stop_sandbox_now(sandbox)  # a container started meanwhile
        for container in self._sandbox_containers(sandbox.id):
            self._remove_container_now(container)
        del self.sandboxes[sandbox.id]
        self._release(sandbox.name, sandbox.id)
        self._envelope("/containers/delete", events_pb.ContainerDelete(id=sandbox.id))
        self._cri_event(sandbox.id, sandbox.id, pb.CONTAINER_DELETED_EVENT)
        return pb.RemovePodSandboxResponse()

    @_rpc
    async def PodSandboxStatus(self, request: pb.PodSandboxStatusRequest) -> pb.PodSandboxStatusResponse:
        sandbox = self.sandboxes.get(request.pod_sandbox_id)
        if sandbox is None:
            raise _Fault(grpc.StatusCode.NOT_FOUND, "an error occurred when try to find sandbox: not found")
        return pb.PodSandboxStatusResponse(status=self._sandbox_status(sandbox))

    @_rpc
    async def ListPodSandbox(self, request: pb.ListPodSandboxRequest) -> pb.ListPodSandboxResponse:
        wanted = request.filter
        items = []
        for sandbox in self.sandboxes.values():
            state = pb.SANDBOX_READY if sandbox.ready else pb.SANDBOX_NOTREADY
            if wanted.id and not sandbox.id.startswith(wanted.id):
                continue
            if wanted.HasField("state") and wanted.state.state != state:
                continue
            if not _selected(sandbox.config.labels, wanted.label_selector):
                continue
            config = sandbox.config
            items.append(pb.PodSandbox(id=sandbox.id, metadata=config.metadata, state=state,
                                       created_at=sandbox.created_at, labels=config.labels,
                                       annotations=config.annotations, runtime_handler=sandbox.runtime_handler))
        return pb.ListPodSandboxResponse(items=items)

    @_rpc
    async def CreateContainer(self, request: pb.CreateContainerRequest) -> pb.CreateContainerResponse:
        config = request.config
        sandbox = self.sandboxes.get(request.pod_sandbox_id)
        if sandbox is None:
            raise _Fault(grpc.StatusCode.NOT_FOUND, f'failed to find sandbox id "{request.pod_sandbox_id}": not found')
        if not sandbox.ready:
            raise _Fault(grpc.StatusCode.UNKNOWN, f'sandbox container "{sandbox.id}" is not running')
        if not config.HasField("metadata"):
            raise _Fault(grpc.StatusCode.UNKNOWN, "container config must include metadata")
        pod = sandbox.config.metadata
        container_id = secrets.token_hex(32)
        name = "_".join((config.metadata.name, pod.name, pod.namespace, pod.uid, str(config.metadata.attempt)))
        self._reserve(name, container_id, "container")
        try:
            image = self._resolve_image(config.image.image)
            if image is None:
                raise _Fault(grpc.StatusCode.NOT_FOUND, f'failed to resolve image "{config.image.image}": not found')
            await _wait(self.sim.latencies.create)
            if self.sandboxes.get(sandbox.id) is not sandbox:
                raise _Fault(grpc.StatusCode.NOT_FOUND, f'failed to find sandbox id "{sandbox.id}": not found')
        except BaseException:
            self._release(name, container_id)
            raise
        log_path = os.path.join(sandbox.config.log_directory, config.log_path) if config.log_path else ""
        resources = pb.LinuxContainerResources()
        resources.CopyFrom(config.linux.resources)
        container = _Container(container_id, name, sandbox.id, config, image.id, log_path, time.time_ns(),
                               resources if config.linux.HasField("resources") else None)
        self.containers[container_id] = container
        self._cri_event(container_id, sandbox.id, pb.CONTAINER_CREATED_EVENT)
        return pb.CreateContainerResponse(container_id=container_id)

    @_rpc
    async def StartContainer(self, request: pb.StartContainerRequest) -> pb.StartContainerResponse:
        container = self.containers.get(request.container_id)
        if container is None:
            raise _not_found_container(request.container_id)
        if container.state != pb.CONTAINER_CREATED:
            raise _Fault(grpc.StatusCode.UNKNOWN, f"container is in {STATE_NAMES[container.state]} state")
        if container.removing:
            raise _Fault(grpc.StatusCode.UNKNOWN, "container is in removing state, can't be started")
        if container.starting:
            raise _Fault(grpc.StatusCode.UNKNOWN, "container is already in starting state")
        sandbox = self.sandboxes.get(container.sandbox_id)
        if sandbox is None or not sandbox.ready:
            raise _Fault(grpc.StatusCode.UNKNOWN, f'sandbox container "{container.sandbox_id}" is not running')
        container.starting = True
        try:
            await _wait(self.sim.latencies.start)
            if self.sim.log_files and container.log_path:
                try:
                    await asyncio.to_thread(_touch, container.log_path)
                except OSError as exc:
                    raise _Fault(grpc.StatusCode.UNKNOWN, f"failed to create container loggers: {exc}") from None
        finally:
            container.starting = False
        if self.containers.get(container.id) is not container:
            raise _not_found_container(container.id)
        if not sandbox.ready:  # stopped meanwhile
            raise _Fault(grpc.StatusCode.UNKNOWN, f'sandbox container "{sandbox.id}" is not running')
        container.state, container.started_at, container.pid = pb.CONTAINER_RUNNING, time.time_ns(), next(self._pids)
        self._envelope("/tasks/start", events_pb.TaskStart(container_id=container.id, pid=container.pid))
        self._cri_event(container.id, container.sandbox_id, pb.CONTAINER_STARTED_EVENT)
        self._schedule_exit(container)
        return pb.StartContainerResponse()

    @_rpc
    async def StopContainer(self, request: pb.StopContainerRequest) -> pb.StopContainerResponse:
        container = self.containers.get(request.container_id)
        if container is None or container.state != pb.CONTAINER_RUNNING:
            return pb.StopContainerResponse()
        await _wait(self.sim.latencies.stop)
        self.exit_container(container, self.sim.stop_exit_code if request.timeout > 0 else KILLED_EXIT_CODE)
        return pb.StopContainerResponse()

    @_rpc
    async def RemoveContainer(self, request: pb.RemoveContainerRequest) -> pb.RemoveContainerResponse:
        container = self.containers.get(request.container_id)
        if container is None:
            return pb.RemoveContainerResponse()
        self.exit_container(container, KILLED_EXIT_CODE)
        container.removing = True
        await _wait(self.sim.latencies.remove)
        self._remove_container_now(container)
        return pb.RemoveContainerResponse()

    @_rpc
    async def ContainerStatus(self, request: pb.ContainerStatusRequest) -> pb.ContainerStatusResponse:
        container = self.containers.get(request.container_id)
        if container is None:
            raise _not_found_container(request.container_id)
        return pb.ContainerStatusResponse(status=self._container_status(container))

    @_rpc
    async def ListContainers(self, request: pb.ListContainersRequest) -> pb.ListContainersResponse:
        wanted = request.filter
        containers = [
            self._container_pb(c) for c in self.containers.values()
            if (not wanted.id or c.id.startswith(wanted.id))
            and (not wanted.pod_sandbox_id or c.sandbox_id.startswith(wanted.pod_sandbox_id))
            and (not wanted.HasField("state") or wanted.state.state == c.state)
            and _selected(c.config.labels, wanted.label_selector)]
        return pb.ListContainersResponse(containers=containers)

    @_rpc
    async def UpdateContainerResources(
            self, request: pb.UpdateContainerResourcesRequest) -> pb.UpdateContainerResourcesResponse:
        container = self.containers.get(request.container_id)
        if container is None:
            raise _Fault(grpc.StatusCode.NOT_FOUND, "failed to find container: not found")
        if container.removing:
            raise _Fault(grpc.StatusCode.UNKNOWN, f'container "{container.id}" is in removing state')
        if request.HasField("linux"):
            container.resources = pb.LinuxContainerResources()
            container.resources.CopyFrom(request.linux)
        return pb.UpdateContainerResourcesResponse()

    @_rpc
    async def UpdatePodSandboxResources(
            self, request: pb.UpdatePodSandboxResourcesRequest) -> pb.UpdatePodSandboxResourcesResponse:
        if request.pod_sandbox_id not in self.sandboxes:
            raise _Fault(grpc.StatusCode.NOT_FOUND,
                         f'an error occurred when try to find sandbox "{request.pod_sandbox_id}": not found')
        return pb.UpdatePodSandboxResourcesResponse()

    @_rpc
    async def ReopenContainerLog(self, request: pb.ReopenContainerLogRequest) -> pb.ReopenContainerLogResponse:
        container = self.containers.get(request.container_id)
        if container is None:
            raise _not_found_container(request.container_id)
        if container.state != pb.CONTAINER_RUNNING:
            raise _Fault(grpc.StatusCode.UNKNOWN, "container is not running")
        if self.sim.log_files and container.log_path:
            await asyncio.to_thread(_touch, container.log_path)
        return pb.ReopenContainerLogResponse()

    @_rpc
    async def ExecSync(self, request: pb.ExecSyncRequest) -> pb.ExecSyncResponse:
        container = self.containers.get(request.container_id)
        if container is None:
            raise _Fault(grpc.StatusCode.NOT_FOUND,
                         f'failed to exec in container: failed to find container "{request.container_id}" in store: '
                         f"not found")
        if container.state != pb.CONTAINER_RUNNING:
            raise _Fault(grpc.StatusCode.UNKNOWN,
                         f"failed to exec in container: container is in {STATE_NAMES[container.state]} state")
        latency, timeout = self.sim.latencies.exec_sync, request.timeout
        if 0 < timeout <= latency:
            await asyncio.sleep(timeout)
            raise _Fault(grpc.StatusCode.DEADLINE_EXCEEDED, f"failed to exec in container: timeout "
                                                            f"{gotext.go_duration(timeout)} exceeded: context "
                                                            f"deadline exceeded")
        await _wait(latency)
        code = _shell_exit(request.cmd) or 0
        # An exec's exit is a task exit under the exec's own id, which subscribers tell from the container's.
        self._task_exit(container.id, secrets.token_hex(32), next(self._pids), code, time.time_ns())
        return pb.ExecSyncResponse(exit_code=code)

    @_rpc
    async def ContainerStats(self, request: pb.ContainerStatsRequest) -> pb.ContainerStatsResponse:
        container = self.containers.get(request.container_id)
        if container is None:
            raise _Fault(grpc.StatusCode.NOT_FOUND, "failed to find container: not found")
        return pb.ContainerStatsResponse(stats=self._container_stats(container, time.time_ns()))

    @_rpc
    async def ListContainerStats(self, request: pb.ListContainerStatsRequest) -> pb.ListContainerStatsResponse:
        wanted, now = request.filter, time.time_ns()
        stats = [
            self._container_stats(c, now) for c in self.containers.values()
            if c.state == pb.CONTAINER_RUNNING
            and (not wanted.id or c.id.startswith(wanted.id))
            and (not wanted.pod_sandbox_id or c.sandbox_id.startswith(wanted.pod_sandbox_id))
            and _selected(c.config.labels, wanted.label_selector)]
        return pb.ListContainerStatsResponse(stats=stats)

    @_rpc
    async def PodSandboxStats(self, request: pb.PodSandboxStatsRequest) -> pb.PodSandboxStatsResponse:
        sandbox = self.sandboxes.get(request.pod_sandbox_id)
        if sandbox is None:
            raise _Fault(grpc.StatusCode.NOT_FOUND,
                         f"an error occurred when trying to find sandbox {request.pod_sandbox_id}: not found")
        if not sandbox.ready:
            raise _Fault(grpc.StatusCode.UNAVAILABLE, f'failed to get pod sandbox stats since sandbox container '
                                                      f'"{sandbox.id}" is not in ready state: unavailable')
        return pb.PodSandboxStatsResponse(stats=self._sandbox_stats(sandbox, time.time_ns()))

    @_rpc
    async def ListPodSandboxStats(self, request: pb.ListPodSandboxStatsRequest) -> pb.ListPodSandboxStatsResponse:
        wanted, now = request.filter, time.time_ns()
        stats = [self._sandbox_stats(s, now) for s in self.sandboxes.values()
                 if s.ready and (not wanted.id or s.id.startswith(wanted.id))
                 and _selected(s.config.labels, wanted.label_selector)]
        return pb.ListPodSandboxStatsResponse(stats=stats)

    async def GetContainerEvents(self, request: pb.GetEventsRequest,
                                 context: grpc.aio.ServicerContext) -> AsyncIterator[pb.ContainerEventResponse]:
        """CRI's container events, from the moment of the call until the runtime stops."""
        with self.cri_events.subscribe() as queue:
            while (event := await queue.get()) is not None:
                yield event

    # -------------------------------------------------------------------------------------- ImageService

    @_rpc
    async def PullImage(self, request: pb.PullImageRequest) -> pb.PullImageResponse:
        name = request.image.image
        ref = _docker_ref(name)
        if ref is None:
            raise _Fault(grpc.StatusCode.UNKNOWN, f'failed to pull and unpack image "{name}": failed to parse image '
                                                  f'reference "{name}": invalid reference format')
        if any(_docker_ref(u) == ref for u in self.sim.unpullable):
            raise _Fault(grpc.StatusCode.NOT_FOUND, f'failed to pull and unpack image "{ref}": failed to resolve '
                                                    f'reference "{ref}": {ref}: not found')
        await _wait(self.sim.latencies.pull)
        return pb.PullImageResponse(image_ref=self._add_image(ref).id)

    @_rpc
    async def ImageStatus(self, request: pb.ImageStatusRequest) -> pb.ImageStatusResponse:
        image = self._resolve_image(request.image.image)
        return pb.ImageStatusResponse() if image is None else pb.ImageStatusResponse(image=self._image_pb(image))

    @_rpc
    async def ListImages(self, request: pb.ListImagesRequest) -> pb.ListImagesResponse:
        if request.filter.image.image:
            image = self._resolve_image(request.filter.image.image)
            return pb.ListImagesResponse(images=[] if image is None else [self._image_pb(image)])
        return pb.ListImagesResponse(images=[self._image_pb(image) for image in self.images.values()])

    @_rpc
    async def RemoveImage(self, request: pb.RemoveImageRequest) -> pb.RemoveImageResponse:
        image = self._resolve_image(request.image.image)
        if image is None:
            return pb.RemoveImageResponse()
        await _wait(self.sim.latencies.remove_image)
        self.images.pop(image.id, None)
        return pb.RemoveImageResponse()

    @_rpc
    async def ImageFsInfo(self, request: pb.ImageFsInfoRequest) -> pb.ImageFsInfoResponse:
        usage = pb.FilesystemUsage(timestamp=time.time_ns())
        usage.fs_id.mountpoint = self.image_fs_path
        usage.used_bytes.value = sum(image.size for image in self.images.values())
        usage.inodes_used.value = len(self.images)
        return pb.ImageFsInfoResponse(image_filesystems=[usage])

    # ----------------------------------------------------------------------------- containerd's Events

    async def Subscribe(self, request: events_pb.SubscribeRequest,
                        context: grpc.aio.ServicerContext) -> AsyncIterator[events_pb.Envelope]:
        """containerd's event stream, filtered as its subscriber asks, until the runtime stops."""
        try:
            filters = [_parse_filter(text) for text in request.filters]
        except ValueError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        with self.envelopes.subscribe() as queue:
            while (envelope := await queue.get()) is not None:
                if _envelope_matches(envelope, filters):
                    yield envelope


def _unimplemented(name: str) -> Callable[..., Awaitable[None]]:
    async def handler(self: _Service, request: Message, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"method {name} not implemented")

    handler.__name__ = name
    return handler


# The servicer bases' own defaults are synchronous, which grpc.aio cannot run without a thread pool: every call
# the simulation does not implement (Exec, Attach, PortForward, checkpoints, metrics, the Stream* lists) answers
# UNIMPLEMENTED the way grpc-go's generated Unimplemented*Server does.
for _base in (pb_grpc.RuntimeServiceServicer, pb_grpc.ImageServiceServicer):
    for _name in vars(_base):
        if _name[:1].isupper() and _name not in vars(_Service):
            setattr(_Service, _name, _unimplemented(_name))


# ------------------------------------------------------------------------------------------------ server


class HollowRuntime:
    """The simulated runtime on a unix socket: ``async with HollowRuntime(path) as runtime:`` or
    ``await runtime.start()`` / ``await runtime.stop()``; `endpoint` is what the agent's
    ``--container-runtime-endpoint`` (and ``--image-service-endpoint``) names."""

    def __init__(self, socket_path: str | os.PathLike[str], simulation: Simulation | None = None) -> None:
        self.socket_path: Final = Path(socket_path)
        self.simulation: Final = simulation or Simulation()
        self._service = _Service(self.simulation, self.simulation.image_fs_path or str(self.socket_path.parent))
        self._server: grpc.aio.Server | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.socket_path)!r})"

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket_path}"

    async def start(self) -> None:
        """Listen on the socket (its directory made, a stale socket file replaced) and serve."""
        if self._server is not None:
            return
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        server = grpc.aio.server()
        pb_grpc.add_RuntimeServiceServicer_to_server(self._service, server)
        pb_grpc.add_ImageServiceServicer_to_server(self._service, server)
        events_grpc.add_EventsServicer_to_server(self._service, server)
        server.add_insecure_port(self.endpoint)
        await server.start()
        self._server = server

    async def stop(self, grace: float | None = 1.0) -> None:
        """End the event streams, stop serving (calls in flight get `grace` seconds), drop the pending self-exits
        and remove the socket. The state is kept: a second start serves the same sandboxes and containers (those whose
        exit was pending then run until stopped)."""
        server, self._server = self._server, None
        if server is None:
            return
        self._service.envelopes.publish(None)
        self._service.cri_events.publish(None)
        await server.stop(grace)
        tasks = list(self._service.exit_tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()

    # ------------------------------------------------------------------------------------ for operators

    def exit_container(self, container_id: str, exit_code: int, reason: str = "") -> bool:
        """Make a running container exit now (a crash, an OOM kill with reason "OOMKilled"); False when it is
        not running."""
        container = self._service.containers.get(container_id)
        if container is None or container.state != pb.CONTAINER_RUNNING:
            return False
        self._service.exit_container(container, exit_code, reason)
        return True

    def counts(self) -> dict[str, int]:
        """How many sandboxes (ready ones), containers (running ones) and images the runtime holds."""
        service = self._service
        return {"sandboxes": len(service.sandboxes),
                "ready_sandboxes": sum(s.ready for s in service.sandboxes.values()),
                "containers": len(service.containers),
                "running_containers": sum(c.state == pb.CONTAINER_RUNNING for c in service.containers.values()),
                "images": len(service.images)}


__all__ = ["ExitRule", "HollowRuntime", "Latencies", "Simulation"]
