"""The device manager's I/O (upstream pkg/kubelet/cm/devicemanager at v1.37.1: manager.go `ManagerImpl`, endpoint.go,
plugin/v1beta1 server.go, client.go, handler.go): the Registration gRPC server on
``<root-dir>/device-plugins/kubelet.sock``, one client per registered plugin, the ``kubelet_internal_checkpoint``.

The rules are pure (`kopflet.cm.devicemanager.devices`, `checkpoint`); here they meet the sockets and the file:

- `start`: the socket directory is made (0750) and cleared of sockets (upstream `CleanupPluginDirectory`: plugins
  see their socket go and register again), the checkpoint read (a bad one is logged and ignored, as upstream),
  then the Registration server listens.
- `Register`: the version and resource name checked (upstream's errors), then the plugin's socket dialled (10 s),
  GetDevicePluginOptions asked, and ListAndWatch followed: each answer replaces the resource's devices and writes
  the checkpoint. When the stream ends the plugin is disconnected: its devices turn unhealthy (allocatable 0) and,
  once `ENDPOINT_STOP_GRACE_PERIOD` has passed without a new registration, the resource is dropped (capacity 0).
- `admit`: upstream's `Allocate` for each init and app container of a pod that asks for device plugin
  resources (GetPreferredAllocation when the plugin offers it, then Allocate); the first error rejects the pod with
  ``UnexpectedAdmissionError``. The checkpoint is written before anything of the pod is created.
- `run_container_options`: upstream `GetDeviceRunContainerOptions` at CreateContainer: PreStartContainer (30 s) for
  plugins that ask for it, Allocate again when nothing is recorded (a restart raced the plugin), then the envs,
  mounts, devices, annotations and CDI devices of the Allocate answers.
- Devices of pods that are no longer active are freed at the next allocation (upstream `UpdateAllocatedDevices`).
- `topology_snapshot`: the state the topology manager asks for hints (`devices.TopologySnapshot`), and
  `admit_steps`: the topology manager's admission driven here, each container's devices allocated along its
  hint by the plugins (the CPU and memory managers' allocations stay pure).
- the pod-resources API's `DevicesProvider` (upstream container manager `GetDevices`, `GetAllocatableDevices`).

Upstream v1.37 does not watch the socket directory: a deleted ``kubelet.sock`` stays deleted until the kubelet
restarts (plugins re-register when it is created again). `healthy` reports whether the server still serves, as
upstream's ``device-plugin`` health checker.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import stat
import time
from collections.abc import Callable, Generator, Iterable, Mapping
from typing import Any, TypeVar

import grpc

from kopflet import checkpointmanager
from kopflet.api import spec
from kopflet.apis.podresources.resources import ContainerDevices
from kopflet.cm.devicemanager import checkpoint, devices
from kopflet.cm.devicemanager.devices import AllocationError, ContainerAllocation, RunContainerOptions
from kopflet.cm.devicemanager.proto import api_pb2, api_pb2_grpc
from kopflet.cm.topologymanager.policy import NO_HINT, TopologyHint
from kopflet.cm.topologymanager.topology_manager import AllocationFailed, AllocationRequest
from kopflet.lifecycle import admission

Result = TypeVar("Result")

logger = logging.getLogger(__name__)


def go_rpc_error(exc: grpc.RpcError) -> str:
    """A gRPC error as grpc-go prints it (``rpc error: code = Unknown desc = ...``): upstream's messages embed it."""
    code = exc.code() if hasattr(exc, "code") else None
    name = "Unknown" if code is None else ("OK" if code == grpc.StatusCode.OK else
                                          "".join(w.capitalize() for w in code.name.split("_")))
    details = exc.details() if hasattr(exc, "details") else str(exc)
    return f"rpc error: code = {name} desc = {details}"


@dataclasses.dataclass
class _Endpoint:
    """A plugin endpoint (upstream endpointImpl): its socket, its API (None for one restored from the checkpoint,
    which is born stopped), its options, and when it stopped."""

    resource: str
    socket: str
    channel: grpc.aio.Channel | None = None
    api: api_pb2_grpc.DevicePluginStub | None = None
    options: api_pb2.DevicePluginOptions | None = None
    stopped_at: float | None = None
    task: asyncio.Task[None] | None = None


class DeviceManagerError(Exception):
    """The device manager cannot start (upstream's container manager fails to start, and the kubelet exits)."""


def _write_atomically(path: str, blob: bytes) -> None:
    """The checkpoint, whole or not at all; a failure is logged (upstream logs a failed checkpoint write and goes
    on)."""
    try:
        checkpointmanager.write_atomically(path, blob)
    except OSError as exc:
        logger.error(f"failed to write checkpoint file {checkpoint.CHECKPOINT_NAME!r}: {exc}")


class DeviceManager:
    """Upstream's ManagerImpl: one per agent. `active_pods` gives the UIDs of the pods that are active (upstream
    ActivePodsFunc), `sources_ready` whether every pod source has been seen (until then nothing is freed)."""

    def __init__(self, socket_dir: str, *, active_pods: Callable[[], Iterable[str]] = tuple,
                 sources_ready: Callable[[], bool] = lambda: True,
                 clock: Callable[[], float] = time.monotonic, dial_timeout: float = devices.DIAL_TIMEOUT) -> None:
        self.dial_timeout = dial_timeout
        self.socket_dir = socket_dir.rstrip("/") or "/"
        self.socket_path = os.path.join(self.socket_dir, devices.KUBELET_SOCKET)
        self.checkpoint_path = os.path.join(self.socket_dir, checkpoint.CHECKPOINT_NAME)
        self.active_pods, self.sources_ready, self.clock = active_pods, sources_ready, clock
        self._endpoints: dict[str, _Endpoint] = {}
        self._store: dict[str, dict[str, _Endpoint]] = {}
        self._all: dict[str, Mapping[str, devices.Device]] = {}
        self._healthy: dict[str, frozenset[str]] = {}
        self._unhealthy: dict[str, frozenset[str]] = {}
        self._allocated: dict[str, frozenset[str]] = {}
        self._pod_devices: dict[str, dict[str, dict[str, ContainerAllocation]]] = {}
        self._reuse: dict[str, dict[str, frozenset[str]]] = {}
        self._affinity: dict[tuple[str, str], TopologyHint] = {}
        """The topology manager's hint per (pod UID, container) (upstream's topology affinity store), for a
        container allocated again at CreateContainer."""
        self._removed: set[str] = set()
        self._lock = asyncio.Lock()
        self._checkpoint_lock = asyncio.Lock()
        self._checkpoint_writes: set[asyncio.Task[None]] = set()
        self._server: grpc.aio.Server | None = None
        self._serve_error: str = ""

    # ------------------------------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Upstream `Start`: the checkpoint, then the Registration server. OSError when the socket cannot be served."""
        await asyncio.to_thread(self._prepare_dir)
        await asyncio.to_thread(self._read_checkpoint)
        server = grpc.aio.server()
        api_pb2_grpc.add_RegistrationServicer_to_server(_Registration(self), server)
        try:  # grpcio raises RuntimeError when it cannot bind; older versions return port 0
            bound = server.add_insecure_port(f"unix://{self.socket_path}")
        except RuntimeError as exc:
            raise DeviceManagerError(f"failed to listen to socket {self.socket_path} while starting device plugin "
                                     f"registry: {exc}") from None
        if bound == 0:
            raise DeviceManagerError(f"failed to listen to socket {self.socket_path} while starting device plugin "
                                     f"registry")
        await server.start()
        self._server = server
        logger.info(f"device plugin registration server listening on {self.socket_path}")

    async def stop(self) -> None:
        """Upstream `Stop`: every client disconnected, then the server stopped (the sockets stay for the next start
        to clear)."""
        for resource, endpoints in list(self._store.items()):
            for socket in list(endpoints):
                await self._disconnect(resource, socket)
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None
        await asyncio.gather(*list(self._checkpoint_writes), return_exceptions=True)

    def healthy(self) -> str:
        """Upstream's ``device-plugin`` health check: "" while the registration server serves, else why not."""
        if self._server is not None and not os.path.exists(self.socket_path):
            return (f"device registration error: device plugin registration gRPC server failed and no device "
                    f"plugins can register: {self.socket_path} is gone")
        return self._serve_error

    def _prepare_dir(self) -> None:
        os.makedirs(self.socket_dir, mode=0o750, exist_ok=True)
        for name in os.listdir(self.socket_dir):
            path = os.path.join(self.socket_dir, name)
            if path == self.checkpoint_path:
                continue
            try:
                mode = os.stat(path).st_mode
            except OSError as exc:
                logger.warning(f"device plugins: cannot stat {path}: {exc}")
                continue
            if stat.S_ISDIR(mode) or not stat.S_ISSOCK(mode):
                continue
            os.unlink(path)

    def _read_checkpoint(self) -> None:
        """Upstream `readCheckpoint`: the pod devices and the resources registered before (shown with no devices,
        their endpoint stopped, until their plugin registers again). Errors are logged, never fatal."""
        try:
            with open(self.checkpoint_path, "rb") as f:
                blob = f.read()
        except FileNotFoundError:
            logger.info(f"device plugins: no checkpoint at {self.checkpoint_path}")
            return
        except OSError as exc:
            logger.error(f"Continue after failing to read checkpoint file. Device allocation info may NOT be "
                         f"up-to-date: {exc}")
            return
        try:
            cp = checkpoint.decode(blob)
        except checkpoint.CheckpointError as exc:
            logger.error(f"Continue after failing to read checkpoint file. Device allocation info may NOT be "
                         f"up-to-date: {exc}")
            return
        pod_devices, registered, skipped = devices.from_checkpoint(cp)
        for entry in skipped:
            logger.error(f"device plugins: checkpoint entry skipped: {entry}")
        self._pod_devices = pod_devices
        self._allocated = devices.allocated_devices(pod_devices)
        now = self.clock()
        for resource in registered:
            self._healthy[resource] = frozenset()
            self._unhealthy[resource] = frozenset()
            self._endpoints[resource] = _Endpoint(resource, "", stopped_at=now)

    def _write_checkpoint(self) -> None:
        """Upstream `writeCheckpoint`, from code that cannot wait: the write is scheduled (in order, after those
        already scheduled) and its failure only logged."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop (a caller outside asyncio): at once
            _write_atomically(self.checkpoint_path, self._checkpoint_blob())
            return
        task = asyncio.create_task(self._save_checkpoint(), name="device-manager-checkpoint")
        self._checkpoint_writes.add(task)
        task.add_done_callback(self._checkpoint_writes.discard)

    async def _save_checkpoint(self) -> None:
        """One write at a time, each of the state as it is when its turn comes (built here, on the loop, where
        nothing changes it meanwhile), written and fsynced in a thread."""
        async with self._checkpoint_lock:
            await asyncio.to_thread(_write_atomically, self.checkpoint_path, self._checkpoint_blob())

    def _checkpoint_blob(self) -> bytes:
        return checkpoint.encode(devices.to_checkpoint(self._pod_devices, self._healthy))

    # ----------------------------------------------------------------------------------- registration

    async def register(self, request: api_pb2.RegisterRequest) -> str | None:
        """Upstream server `Register`: None when the plugin is connected, else the error."""
        logger.info(f"Got registration request from device plugin with resource {request.resource_name}")
        error = devices.registration_error(request.version, request.resource_name)
        if error is None:
            error = await self._connect(request.resource_name,
                                        devices.endpoint_path(self.socket_dir, request.endpoint))
        if error is not None:
            logger.error(f"Bad registration request from device plugin with resource {request.resource_name}: "
                         f"{error}")
        return error

    async def _connect(self, resource: str, socket: str) -> str | None:
        """Upstream `connectClient` + `PluginConnected`: dial, GetDevicePluginOptions, then ListAndWatch."""
        channel = grpc.aio.insecure_channel(f"unix://{socket}", options=[("grpc.default_authority", "localhost")])
        try:
            await asyncio.wait_for(channel.channel_ready(), self.dial_timeout)
        except (TimeoutError, grpc.RpcError) as exc:
            await channel.close()
            return f"{devices.ERR_FAILED_TO_DIAL} {exc or 'context deadline exceeded'}"
        api = api_pb2_grpc.DevicePluginStub(channel)
        try:
            options = await api.GetDevicePluginOptions(api_pb2.Empty(), timeout=devices.RPC_TIMEOUT)
        except grpc.RpcError as exc:
            await channel.close()
            return f"failed to get device plugin options: {go_rpc_error(exc)}"
        if socket in self._store.get(resource, {}):
            await channel.close()
            return f"device plugin already connected: {socket}"
        endpoints = self._store.setdefault(resource, {})
        endpoint = _Endpoint(resource, socket, channel, api, options)
        self._endpoints[resource] = endpoints[socket] = endpoint
        self._removed.discard(resource)
        endpoint.task = asyncio.create_task(self._run_client(endpoint), name=f"device-plugin {resource}")
        logger.info(f"Device plugin connected: {resource} at {socket}")
        return None

    async def _run_client(self, endpoint: _Endpoint) -> None:
        """Upstream client `Run`, then `runClient`'s disconnect when the stream ends."""
        assert endpoint.api is not None
        try:
            stream = endpoint.api.ListAndWatch(api_pb2.Empty())
            async for response in stream:
                logger.debug(f"State pushed for device plugin {endpoint.resource}: {len(response.devices)} devices")
                self._device_update(endpoint.resource, devices.devices_from_proto(response))
            logger.warning(f"ListAndWatch ended unexpectedly for device plugin {endpoint.resource}")
        except grpc.RpcError as exc:
            logger.warning(f"ListAndWatch ended unexpectedly for device plugin {endpoint.resource}: "
                           f"{go_rpc_error(exc)}")
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception(f"device plugin {endpoint.resource}: ListAndWatch failed")
        if self._store.get(endpoint.resource, {}).get(endpoint.socket) is endpoint:
            await self._disconnect(endpoint.resource, endpoint.socket, from_stream=True)

    def _device_update(self, resource: str, update: Iterable[devices.Device]) -> None:
        """Upstream `genericDeviceUpdateCallback`: the resource's devices replaced, the checkpoint written."""
        result = devices.device_update(tuple(update))
        self._all[resource] = result.all
        self._healthy[resource] = result.healthy
        self._unhealthy[resource] = result.unhealthy
        self._write_checkpoint()
        logger.info(f"Processed device updates for resource {resource}: {len(result.all)} devices, "
                    f"{len(result.healthy)} healthy")

    async def _disconnect(self, resource: str, socket: str, *, from_stream: bool = False) -> None:
        """Upstream `disconnectClient` + `PluginDisconnected`: the endpoint stops (its grace period starts); the
        last one of a resource leaves its devices unhealthy, else another endpoint takes over."""
        endpoints = self._store.get(resource)
        endpoint = endpoints.get(socket) if endpoints is not None else None
        if endpoints is None or endpoint is None:
            return
        endpoint.stopped_at = self.clock()
        if endpoint.task is not None and not from_stream:
            endpoint.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await endpoint.task
        if endpoint.channel is not None:
            await endpoint.channel.close()
            endpoint.channel = None
        if len(endpoints) == 1:
            del self._store[resource]
            self._healthy[resource], self._unhealthy[resource] = frozenset(), \
                self._unhealthy.get(resource, frozenset()) | self._healthy.get(resource, frozenset())
            logger.info(f"Last device plugin for resource {resource} disconnected: its devices are unhealthy")
        else:
            del endpoints[socket]
            self._endpoints[resource] = next(iter(endpoints.values()))

    # -------------------------------------------------------------------------------------- capacity

    def capacity(self) -> tuple[dict[str, str], dict[str, str]]:
        """Upstream `GetCapacity` as the node status setter applies it: each resource's devices (allocatable: the
        healthy ones), and 0 for the resources dropped (their plugin gone longer than the grace period), which
        stay 0 in the Node as upstream's setter leaves them."""
        now = self.clock()
        live = [r for r, e in self._endpoints.items() if not devices.stop_grace_expired(e.stopped_at, now)]
        result = devices.capacity(self._healthy, self._unhealthy, live)
        for resource in result.deleted:
            self._endpoints.pop(resource, None)
            self._healthy.pop(resource, None)
            self._unhealthy.pop(resource, None)
            self._removed.add(resource)
        if result.deleted:
            logger.info(f"device plugin resources removed: {sorted(result.deleted)}")
            self._write_checkpoint()
        cap = {r: "0" for r in self._removed}
        cap.update({r: str(n) for r, n in result.capacity.items()})
        alloc = {r: "0" for r in self._removed}
        alloc.update({r: str(n) for r, n in result.allocatable.items()})
        return cap, alloc

    def resources(self) -> frozenset[str]:
        """Upstream `isDevicePluginResource`: the registered resources and those with devices allocated."""
        return frozenset(self._healthy) | frozenset(self._allocated)

    def allocated(self) -> dict[str, frozenset[str]]:
        return dict(self._allocated)

    def pod_has_devices(self, uid: str) -> bool:
        return uid in self._pod_devices

    def sanitize_allocatable(self, uid: str, allocatable: Mapping[str, str]) -> dict[str, str]:
        """Upstream `UpdatePluginResources`: a pod that holds devices sees the node's allocatable raised to what is
        allocated, so it passes the resource predicate while the plugin is away."""
        if uid not in self._pod_devices:
            return dict(allocatable)
        return devices.sanitize_allocatable(allocatable, self._allocated)

    def container_devices(self, uid: str, container: str) -> dict[str, frozenset[str]]:
        """The devices a container holds per resource (for the tests)."""
        return {r: a.ids for r, a in self._pod_devices.get(uid, {}).get(container, {}).items()}

    # ---------------------------------------------------------------------------------- pod resources

    def get_devices(self, pod_uid: str, container_name: str) -> tuple[ContainerDevices, ...]:
        """Upstream container manager `GetDevices`: the container's devices with the NUMA nodes recorded when
        they were allocated."""
        return devices.pod_resources_devices(devices.container_device_instances(
            self._pod_devices.get(pod_uid, {}).get(container_name)))

    def get_allocatable_devices(self) -> tuple[ContainerDevices, ...]:
        """Upstream `GetAllocatableDevices`: the healthy devices of each resource with their topology (none of a
        plugin gone: its devices turned unhealthy)."""
        return devices.pod_resources_devices(devices.allocatable_device_instances(self._all, self._healthy))

    # -------------------------------------------------------------------------------- topology hints

    def topology_snapshot(self, pod_uid: str, numa_nodes: Iterable[int]) -> devices.TopologySnapshot:
        """What the topology manager asks for hints about one pod (upstream `GetTopologyHints` under the mutex):
        `numa_nodes` the machine's."""
        reuse = self._reuse.get(pod_uid, {})
        return devices.TopologySnapshot(
            numa_nodes=tuple(numa_nodes), all=dict(self._all), healthy=dict(self._healthy),
            allocated=dict(self._allocated),
            pod_devices={uid: {c: dict(r) for c, r in cs.items()} for uid, cs in self._pod_devices.items()},
            reusable=dict(reuse), resources=self.resources())

    async def admit_steps(self, steps: Generator[AllocationRequest, Any, Result], pod_uid: str,
                          numa_nodes: Iterable[int]) -> Result:
        """Drive the topology manager's admission (`topology_manager.admit_steps`): each container's devices
        allocated along its hint (the plugins' GetPreferredAllocation and Allocate), answered with a fresh
        snapshot; an allocation error goes back into the admission, which rejects the pod with it."""
        nodes = tuple(numa_nodes)
        try:
            request = next(steps)
            while True:
                try:
                    await self.allocate(request.pod, request.container, request.hint)
                except AllocationError as exc:
                    request = steps.throw(AllocationFailed(str(exc)))
                    continue
                request = steps.send(self.topology_snapshot(pod_uid, nodes))
        except StopIteration as stop:
            result: Result = stop.value
            return result

    # -------------------------------------------------------------------------------------- allocate

    def update_allocated_devices(self) -> None:
        """Upstream `UpdateAllocatedDevices`: the devices of pods no longer active are freed (not before every pod
        source has been seen)."""
        active = tuple(self.active_pods())
        if not self.sources_ready():
            return
        gone = devices.active_pods_to_remove(self._pod_devices, active)
        if not gone:
            return
        logger.info(f"device plugins: freeing the devices of pods {sorted(gone)}")
        for uid in gone:
            self._pod_devices.pop(uid, None)
        self._affinity = {key: hint for key, hint in self._affinity.items() if key[0] not in gone}
        self._allocated = devices.allocated_devices(self._pod_devices)

    async def admit(self, pod: spec.Pod) -> admission.Rejection | None:
        """The device manager's part of the container manager's admit handler (topology manager ``none``):
        `allocate` for each init then app container; the first error rejects the pod (UnexpectedAdmissionError)."""
        for container in (*pod.spec.init_containers, *pod.spec.containers):
            try:
                await self.allocate(pod, container)
            except AllocationError as exc:
                return devices.admission_rejection(exc)
        return None

    async def allocate(self, pod: spec.Pod, container: spec.ContainerSpec, hint: TopologyHint | None = None) -> None:
        """Upstream `Allocate` (add): devices for one container along the topology manager's `hint` (None: the
        one it gave at admission, if any), reusing those an init container releases."""
        async with self._lock:
            uid = pod.uid
            if hint is not None:
                self._affinity[(uid, container.name)] = hint
            for other in [u for u in self._reuse if u != uid]:
                del self._reuse[other]
            reuse = self._reuse.setdefault(uid, {})
            await self._allocate_container(pod, container, reuse,
                                           self._affinity.get((uid, container.name), NO_HINT))
            held = self._pod_devices.get(uid, {}).get(container.name, {})
            is_init = any(c.name == container.name for c in pod.spec.init_containers)
            for resource, alloc in held.items():
                if is_init and not container.is_sidecar:
                    reuse[resource] = reuse.get(resource, frozenset()) | alloc.ids
                else:
                    reuse[resource] = reuse.get(resource, frozenset()) - alloc.ids

    async def _allocate_container(self, pod: spec.Pod, container: spec.ContainerSpec,
                                  reuse: Mapping[str, frozenset[str]], hint: TopologyHint) -> None:
        """Upstream `allocateContainerResources`."""
        uid, name = pod.uid, container.name
        updated = written = False
        for resource, needed in sorted(devices.container_requests(container, self.resources()).items()):
            if not updated:
                self.update_allocated_devices()
                updated = True
            picked = devices.devices_to_allocate(
                pod_uid=uid, container=name, resource=resource, required=needed,
                existing=devices.container_devices(self._pod_devices, uid, name, resource),
                healthy=self._healthy.get(resource), in_use=self._allocated.get(resource, frozenset()),
                reusable=reuse.get(resource, frozenset()), running_after_restart=False,
                known=self._all.get(resource, {}), hint=hint)
            if picked is None:
                continue
            endpoint = self._endpoints.get(resource)
            if isinstance(picked, devices.Need):
                if endpoint is None:
                    raise AllocationError(f"endpoint not found in cache for a registered resource: {resource}")
                picked = devices.finish_allocation(picked, await self._preferred(endpoint, picked))
            if not picked:
                continue
            written = True
            self._allocated[resource] = self._allocated.get(resource, frozenset()) | picked
            if endpoint is None:
                self._allocated = devices.allocated_devices(self._pod_devices)
                raise AllocationError(f"unknown Device Plugin {resource}")
            try:
                response = await self._call_allocate(endpoint, sorted(picked))
            except AllocationError:
                self._allocated = devices.allocated_devices(self._pod_devices)
                raise
            if not response.container_responses:
                raise AllocationError(f"no containers return in allocation response {response}")
            first = response.container_responses[0]
            self._pod_devices.setdefault(uid, {}).setdefault(name, {})[resource] = ContainerAllocation(
                devices.devices_per_numa(picked, self._all.get(resource, {})),
                devices.alloc_response_from_proto(first), first.SerializeToString(deterministic=True))
        if written:
            await self._save_checkpoint()

    async def _preferred(self, endpoint: _Endpoint, need: devices.Need) -> frozenset[str] | None:
        """Upstream `callGetPreferredAllocationIfAvailable`."""
        if endpoint.options is None or not endpoint.options.get_preferred_allocation_available:
            return None
        if endpoint.api is None or endpoint.stopped_at is not None:
            raise AllocationError("device plugin GetPreferredAllocation rpc failed with err: " +
                                  devices.ERR_ENDPOINT_STOPPED.format(endpoint=endpoint.socket))
        request = api_pb2.PreferredAllocationRequest(container_requests=[
            api_pb2.ContainerPreferredAllocationRequest(
                available_deviceIDs=sorted(need.available | need.taken),
                must_include_deviceIDs=sorted(need.taken), allocation_size=need.required)])
        try:
            response = await endpoint.api.GetPreferredAllocation(request, timeout=devices.RPC_TIMEOUT)
        except grpc.RpcError as exc:
            raise AllocationError(f"device plugin GetPreferredAllocation rpc failed with err: "
                                  f"{go_rpc_error(exc)}") from None
        if response.container_responses:
            return frozenset(response.container_responses[0].deviceIDs)
        return frozenset()

    async def _call_allocate(self, endpoint: _Endpoint, ids: list[str]) -> api_pb2.AllocateResponse:
        if endpoint.api is None or endpoint.stopped_at is not None:
            raise AllocationError(devices.ERR_ENDPOINT_STOPPED.format(endpoint=endpoint.socket or endpoint.resource))
        request = api_pb2.AllocateRequest(container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=ids)])
        try:
            response: api_pb2.AllocateResponse = await endpoint.api.Allocate(request, timeout=devices.RPC_TIMEOUT)
        except grpc.RpcError as exc:
            raise AllocationError(go_rpc_error(exc)) from None
        return response

    async def run_container_options(self, pod: spec.Pod, container: spec.ContainerSpec) -> RunContainerOptions | None:
        """Upstream `GetDeviceRunContainerOptions`: PreStartContainer where the plugin asks for it, Allocate again
        for a resource with nothing recorded (while the pod is active), then what the answers give the container.
        Raises AllocationError (the container is not created)."""
        reallocate = False
        for resource, amount in sorted(devices.container_requests(container, self.resources()).items()):
            if amount == 0:
                continue
            await self._pre_start(pod.uid, container.name, resource)
            if pod.uid not in set(self.active_pods()):
                continue
            if devices.container_devices(self._pod_devices, pod.uid, container.name, resource) is None:
                reallocate = True
        if reallocate:
            logger.info(f"Needs to re-allocate device plugin resources for pod {pod.namespace}/{pod.name} "
                        f"container {container.name}")
            await self.allocate(pod, container)
        options = devices.run_container_options(self._pod_devices.get(pod.uid, {}).get(container.name))
        for conflict in options.conflicts if options is not None else ():
            logger.error(f"pod {pod.namespace}/{pod.name} container {container.name}: {conflict}")
        return options

    async def _pre_start(self, uid: str, container: str, resource: str) -> None:
        """Upstream `callPreStartContainerIfNeeded`."""
        endpoint = self._endpoints.get(resource)
        if endpoint is None:
            raise AllocationError(f"endpoint not found in cache for a registered resource: {resource}")
        if endpoint.options is None or not endpoint.options.pre_start_required:
            return
        ids = devices.container_devices(self._pod_devices, uid, container, resource)
        if ids is None:
            raise AllocationError(f"no devices found allocated in local cache for pod {uid}, container "
                                  f"{container}, resource {resource}")
        if endpoint.api is None or endpoint.stopped_at is not None:
            raise AllocationError("device plugin PreStartContainer rpc failed with err: " +
                                  devices.ERR_ENDPOINT_STOPPED.format(endpoint=endpoint.socket))
        try:
            await endpoint.api.PreStartContainer(api_pb2.PreStartContainerRequest(devices_ids=sorted(ids)),
                                                 timeout=devices.PRESTART_TIMEOUT)
        except grpc.RpcError as exc:
            raise AllocationError(f"device plugin PreStartContainer rpc failed with err: "
                                  f"{go_rpc_error(exc)}") from None


class _Registration(api_pb2_grpc.RegistrationServicer):
    """The Registration service on kubelet.sock."""

    def __init__(self, manager: DeviceManager) -> None:
        self.manager = manager

    async def Register(self, request: api_pb2.RegisterRequest,  # the gRPC method's name
                       context: grpc.aio.ServicerContext) -> api_pb2.Empty:
        error = await self.manager.register(request)
        if error is not None:
            await context.abort(grpc.StatusCode.UNKNOWN, error)  # grpc-go's status for a plain error
        return api_pb2.Empty()


__all__ = ["DeviceManager", "go_rpc_error"]
