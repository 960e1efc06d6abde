"""The device manager's rules (pkg/kubelet/cm/devicemanager at v1.37.1: manager.go, pod_devices.go, endpoint.go,
plugin/v1beta1): which devices a container gets, what a resource counts in the Node's capacity and allocatable,
what a registration is refused for, what the Allocate answers put into a container, and the admission results.
Pure: the sockets, RPCs, the clock and the checkpoint file are `kopflet.cm.devicemanager.manager`'s.

The device manager is a topology manager hint provider (upstream topology_hints.go): `topology_hints` and
`pod_topology_hints` answer from a `TopologySnapshot` of its state, and `devices_to_allocate` takes the devices
along the chosen hint (`filter_by_affinity`: those on the hint's NUMA nodes, then the others, then those without
topology). Without a hint (the ``none`` policy, or a resource whose devices report no NUMA node) every available
device is in the no-affinity set: the plugin's preferred allocation over all of them first, then the rest. Go
iterates sets in random order; here they are taken in sorted order.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import ClassVar

from kopflet import gotext
from kopflet.api import qos, spec
from kopflet.apis.podresources.resources import ContainerDevices, TopologyInfo
from kopflet.cm.devicemanager import checkpoint
from kopflet.cm.devicemanager.proto import api_pb2
from kopflet.cm.topologymanager.bitmask import BitMask, iterate_bitmasks
from kopflet.cm.topologymanager.policy import NO_HINT, ProviderHints, TopologyHint
from kopflet.lifecycle import admission

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
VERSION = "v1beta1"
SUPPORTED_VERSIONS = ("v1beta1",)
DEVICE_PLUGINS_DIR = "device-plugins"
"""Under ``<root-dir>``: upstream's DevicePluginPath is ``/var/lib/kubelet/device-plugins/``."""
KUBELET_SOCKET = "kubelet.sock"
DEPRECATION_FILE = "DEPRECATION"
"""Upstream `GetPluginHandler` creates it only when the plugin watcher takes device plugins (not kopflet's case);
a plugin that finds it skips registering on kubelet.sock, so it is never left there."""
ENDPOINT_STOP_GRACE_PERIOD = 5 * 60.0
"""endpointStopGracePeriod: a gone plugin's resource stays in the Node's capacity (all unhealthy) this long."""
PRESTART_TIMEOUT = 30.0
"""KubeletPreStartContainerRPCTimeoutInSecs."""
DIAL_TIMEOUT = 10.0
"""plugin/v1beta1 client.go `dial`."""
RPC_TIMEOUT = 30.0
"""kopflet's bound on GetDevicePluginOptions, GetPreferredAllocation and Allocate (upstream passes the caller's
context, without a deadline of its own; every network call here has one)."""
NODE_WITHOUT_TOPOLOGY = -1
UNEXPECTED_ADMISSION_ERROR = "UnexpectedAdmissionError"
"""pkg/kubelet/cm/admission/errors.go ErrorReasonUnexpected."""

# plugin/v1beta1/api.go
ERR_FAILED_TO_DIAL = "failed to dial device plugin:"
ERR_UNSUPPORTED_VERSION = ("requested API version {version} is not supported by kubelet. "
                           "Supported version is {supported}")
ERR_INVALID_RESOURCE_NAME = "the ResourceName {name} is invalid"
ERR_ENDPOINT_STOPPED = "endpoint {endpoint} has been stopped"


class AllocationError(Exception):
    """A device allocation failed (upstream's error text); the pod is rejected, or the container not created."""


# -------------------------------------------------------------------------------------------- registration


def registration_error(version: str, resource_name: str) -> str | None:
    """Upstream server `Register`'s refusals, in its order: the API version, then the resource name."""
    if version not in SUPPORTED_VERSIONS:
        return ERR_UNSUPPORTED_VERSION.format(version=gotext.go_quote(version),
                                              supported="[" + " ".join(gotext.go_quote(v)
                                                                       for v in SUPPORTED_VERSIONS) + "]")
    if not admission.is_extended_resource(resource_name):
        return ERR_INVALID_RESOURCE_NAME.format(name=gotext.go_quote(resource_name))
    return None


def endpoint_path(socket_dir: str, endpoint: str) -> str:
    """Upstream `filepath.Join(s.socketDir, r.Endpoint)`: the plugin's socket, named relative to the directory."""
    parts = [p for p in f"{socket_dir.rstrip('/')}/{endpoint}".split("/")]
    out: list[str] = []
    for part in parts[1:]:
        if part in ("", "."):
            continue
        if part == "..":
            if out:
                out.pop()
            continue
        out.append(part)
    return "/" + "/".join(out)


# ------------------------------------------------------------------------------------------------ devices


@dataclasses.dataclass(frozen=True)
class Device:
    """A device as ListAndWatch reports it: its ID, health and NUMA nodes (None: the plugin sent no topology;
    upstream tells that from a topology with no nodes in the pod-resources API and the hints)."""

    id: str
    health: str
    numa_nodes: tuple[int, ...] | None = None


def devices_from_proto(response: api_pb2.ListAndWatchResponse) -> tuple[Device, ...]:
    return tuple(Device(d.ID, d.health, tuple(n.ID for n in d.topology.nodes) if d.HasField("topology") else None)
                 for d in response.devices)


@dataclasses.dataclass(frozen=True)
class ResourceDevices:
    """One resource's devices after a ListAndWatch update (upstream `genericDeviceUpdateCallback`): every
    device by ID, the healthy and the unhealthy IDs."""

    all: Mapping[str, Device]
    healthy: frozenset[str]
    unhealthy: frozenset[str]


def device_update(devices: Sequence[Device]) -> ResourceDevices:
    """A ListAndWatch answer replaces the resource's devices; anything but ``Healthy`` counts as unhealthy."""
    by_id = {d.id: d for d in devices}
    healthy = frozenset(d.id for d in devices if d.health == HEALTHY)
    return ResourceDevices(all=by_id, healthy=healthy, unhealthy=frozenset(by_id) - healthy)


@dataclasses.dataclass(frozen=True)
class Capacity:
    """Upstream `GetCapacity`: per resource the device counts for the Node, and the resources to drop."""

    capacity: Mapping[str, int]
    allocatable: Mapping[str, int]
    deleted: frozenset[str]


def capacity(healthy: Mapping[str, frozenset[str]], unhealthy: Mapping[str, frozenset[str]],
             live: Iterable[str]) -> Capacity:
    """Capacity counts healthy and unhealthy devices, allocatable the healthy ones; a resource without an
    endpoint, or whose endpoint stopped longer than the grace period ago (`live` names the others), is deleted."""
    live_set = frozenset(live)
    cap: dict[str, int] = {}
    alloc: dict[str, int] = {}
    deleted: set[str] = set()
    for name, ids in healthy.items():
        if name not in live_set:
            deleted.add(name)
        else:
            cap[name] = alloc[name] = len(ids)
    for name, ids in unhealthy.items():
        if name not in live_set:
            deleted.add(name)
        else:
            cap[name] = cap.get(name, 0) + len(ids)
    return Capacity(capacity=cap, allocatable=alloc, deleted=frozenset(deleted))


def stop_grace_expired(stopped_at: float | None, now: float) -> bool:
    """endpointImpl.stopGracePeriodExpired."""
    return stopped_at is not None and now - stopped_at > ENDPOINT_STOP_GRACE_PERIOD


# ------------------------------------------------------------------------------------ allocation responses


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    container_path: str
    host_path: str
    permissions: str


@dataclasses.dataclass(frozen=True)
class Mount:
    container_path: str
    host_path: str
    read_only: bool


@dataclasses.dataclass(frozen=True)
class AllocResponse:
    """A plugin's ContainerAllocateResponse: what the container gets. Maps sorted by key (Go's order is random)."""

    envs: tuple[tuple[str, str], ...] = ()
    mounts: tuple[Mount, ...] = ()
    devices: tuple[DeviceSpec, ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()
    cdi_devices: tuple[str, ...] = ()


def alloc_response_from_proto(msg: api_pb2.ContainerAllocateResponse) -> AllocResponse:
    return AllocResponse(
        envs=tuple(sorted(msg.envs.items())),
        mounts=tuple(Mount(m.container_path, m.host_path, m.read_only) for m in msg.mounts),
        devices=tuple(DeviceSpec(d.container_path, d.host_path, d.permissions) for d in msg.devices),
        annotations=tuple(sorted(msg.annotations.items())),
        cdi_devices=tuple(c.name for c in msg.cdi_devices))


def alloc_response_from_bytes(blob: bytes) -> AllocResponse:
    """Upstream `fromCheckpointData`'s proto.Unmarshal; raises AllocationError on bad bytes."""
    msg = api_pb2.ContainerAllocateResponse()
    try:
        msg.ParseFromString(blob)
    except Exception as exc:  # google.protobuf.message.DecodeError
        raise AllocationError(f"can't unmarshal allocResp: {exc}") from None
    return alloc_response_from_proto(msg)


@dataclasses.dataclass(frozen=True)
class ContainerAllocation:
    """One container's devices of one resource (upstream `deviceAllocateInfo`): the IDs per NUMA node, the
    plugin's answer, and that answer serialized for the checkpoint."""

    device_ids: checkpoint.DevicesPerNUMA
    response: AllocResponse | None
    raw: bytes | None

    @property
    def ids(self) -> frozenset[str]:
        return frozenset(i for ids in self.device_ids.values() for i in (ids or ()))


PodDevices = Mapping[str, Mapping[str, Mapping[str, ContainerAllocation]]]
"""pod UID -> container name -> resource name -> allocation (upstream `podDevices.devs`)."""


def devices_per_numa(ids: Iterable[str], known: Mapping[str, Device]) -> dict[int, tuple[str, ...] | None]:
    """Upstream `allocateContainerResources`: each device under each of its NUMA nodes, or -1 without topology."""
    out: dict[int, list[str]] = {}
    for dev in sorted(ids):
        nodes = known[dev].numa_nodes if dev in known else ()
        for node in nodes or (NODE_WITHOUT_TOPOLOGY,):
            out.setdefault(node, []).append(dev)
    return {k: tuple(v) for k, v in out.items()}


def container_devices(pod_devices: PodDevices, pod_uid: str, container: str, resource: str) -> frozenset[str] | None:
    """Upstream `containerDevices`: None when nothing is recorded (not even an empty set)."""
    found = pod_devices.get(pod_uid, {}).get(container, {}).get(resource)
    return None if found is None else found.ids


def allocated_devices(pod_devices: PodDevices) -> dict[str, frozenset[str]]:
    """Upstream `podDevices.devices()`: every resource recorded, with the devices of the entries that have an
    Allocate answer."""
    out: dict[str, set[str]] = {}
    for containers in pod_devices.values():
        for resources in containers.values():
            for resource, alloc in resources.items():
                ids = out.setdefault(resource, set())
                if alloc.response is not None:
                    ids |= alloc.ids
    return {k: frozenset(v) for k, v in out.items()}


def to_checkpoint(pod_devices: PodDevices, healthy: Mapping[str, frozenset[str]]) -> checkpoint.Checkpoint:
    """Upstream `writeCheckpoint`: the entries with an answer, and the healthy devices per resource."""
    entries = [checkpoint.PodDevicesEntry(uid, cname, resource, alloc.device_ids, alloc.raw)
               for uid, containers in sorted(pod_devices.items())
               for cname, resources in sorted(containers.items())
               for resource, alloc in sorted(resources.items()) if alloc.raw is not None]
    # Go's `var data []PodDevicesEntry` stays nil without entries; the registered map is made non-nil.
    return checkpoint.Checkpoint(tuple(entries) or None, {k: tuple(sorted(v)) for k, v in sorted(healthy.items())})


def from_checkpoint(cp: checkpoint.Checkpoint) -> tuple[dict[str, dict[str, dict[str, ContainerAllocation]]],
                                                       tuple[str, ...], tuple[str, ...]]:
    """Upstream `readCheckpoint`/`fromCheckpointData`: the pod devices, the resources registered before (their
    capacity shows zero until their plugin registers again), and the entries skipped (an answer that does not
    parse, upstream's "Can't unmarshal allocResp")."""
    out: dict[str, dict[str, dict[str, ContainerAllocation]]] = {}
    skipped: list[str] = []
    for entry in cp.entries or ():
        try:
            response = alloc_response_from_bytes(entry.alloc_resp or b"")
        except AllocationError as exc:
            skipped.append(f"{entry.pod_uid}/{entry.container_name}/{entry.resource_name}: {exc}")
            continue
        ids = dict(entry.device_ids or {})
        out.setdefault(entry.pod_uid, {}).setdefault(entry.container_name, {})[entry.resource_name] = \
            ContainerAllocation(ids, response, entry.alloc_resp or b"")
    return out, tuple(sorted(cp.registered or {})), tuple(skipped)


@dataclasses.dataclass(frozen=True)
class RunContainerOptions:
    """Upstream `DeviceRunContainerOptions`: what the Allocate answers of a container's resources put into its
    ContainerConfig. The first answer to name an env, device path, mount path, annotation or CDI device wins."""

    envs: tuple[tuple[str, str], ...] = ()
    mounts: tuple[Mount, ...] = ()
    devices: tuple[DeviceSpec, ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()
    cdi_devices: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    """Upstream logs these ("Environment variable has conflicting setting" ...) and keeps the first."""


def run_container_options(resources: Mapping[str, ContainerAllocation] | None) -> RunContainerOptions | None:
    """Upstream `deviceRunContainerOptions` over the container's resources (sorted by name; Go's map order is
    random). None when nothing is recorded for the container."""
    if resources is None:
        return None
    envs: dict[str, str] = {}
    devs: dict[str, DeviceSpec] = {}
    mounts: dict[str, Mount] = {}
    annotations: dict[str, str] = {}
    cdi: dict[str, None] = {}
    conflicts: list[str] = []
    for _, alloc in sorted(resources.items()):
        resp = alloc.response or AllocResponse()
        for key, value in resp.envs:
            if key in envs:
                if envs[key] != value:
                    conflicts.append(f"Environment variable has conflicting setting: {key}")
                continue
            envs[key] = value
        for dev in resp.devices:
            if dev.container_path in devs:
                if devs[dev.container_path].host_path != dev.host_path:
                    conflicts.append(f"Container device has conflicting mapping host devices: {dev.container_path}")
                continue
            devs[dev.container_path] = dev
        for mount in resp.mounts:
            if mount.container_path in mounts:
                if mounts[mount.container_path].host_path != mount.host_path:
                    conflicts.append(f"Container mount has conflicting mapping host mounts: {mount.container_path}")
                continue
            mounts[mount.container_path] = mount
        for key, value in resp.annotations:
            if key in annotations:
                if annotations[key] != value:
                    conflicts.append(f"Annotation has conflicting setting: {key}")
                continue
            annotations[key] = value
        for name in resp.cdi_devices:
            cdi.setdefault(name, None)
    return RunContainerOptions(envs=tuple(envs.items()), mounts=tuple(mounts.values()), devices=tuple(devs.values()),
                               annotations=tuple(annotations.items()), cdi_devices=tuple(cdi),
                               conflicts=tuple(conflicts))


# ------------------------------------------------------------------------------------------------ allocate


def container_requests(container: spec.ContainerSpec, is_device_resource: Iterable[str]) -> dict[str, int]:
    """The device plugin resources a container asks for, from its limits (extended resources cannot be
    overcommitted: requests equal limits), as `Quantity.Value()`; those of other resources are left out."""
    known = frozenset(is_device_resource)
    out: dict[str, int] = {}
    for name, amount in container.resources.limits.items():
        if name in known:
            try:
                out[name] = qos.value(amount)
            except ValueError:
                continue
    return out


def pod_requests_devices(pod: spec.Pod, known: Iterable[str]) -> bool:
    """Whether any init or app container asks for a non-zero amount of a device plugin resource."""
    names = frozenset(known)
    return any(v > 0 for c in (*pod.spec.init_containers, *pod.spec.containers)
               for v in container_requests(c, names).values())


@dataclasses.dataclass(frozen=True)
class Need:
    """Devices still to pick after those already taken (`taken`: the reusable ones, and the hint's aligned ones
    when they are not enough): `needed` more. The plugin is asked for a preferred allocation over
    ``available | taken`` that must include `taken`, of `required`; its devices in `available` are taken first,
    then those of `fallback` in order (None: `available` itself)."""

    needed: int
    required: int
    taken: frozenset[str]
    available: frozenset[str]
    fallback: tuple[frozenset[str], ...] | None = None


def filter_by_affinity(available: Iterable[str], known: Mapping[str, Device],
                       hint: TopologyHint) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """Upstream `filterByAffinity`: the available devices on a NUMA node of the hint's affinity, those on other
    nodes only, and those without a NUMA node. Without an affinity, or when no device of the resource reports a
    NUMA node, every device is in the last set."""
    available = frozenset(available)
    if hint.affinity is None or not has_topology_alignment(known):
        return frozenset(), frozenset(), available
    aligned, unaligned, without = set(), set(), set()
    for dev in available:
        nodes = known[dev].numa_nodes if dev in known else None
        if not nodes:
            without.add(dev)
        elif any(hint.affinity.is_set(n) for n in nodes):
            # upstream sorts the hint's nodes first: a device on any of them counts as aligned
            aligned.add(dev)
        else:
            unaligned.add(dev)
    return frozenset(aligned), frozenset(unaligned), frozenset(without)


def devices_to_allocate(*, pod_uid: str, container: str, resource: str, required: int,
                        existing: frozenset[str] | None, healthy: frozenset[str] | None,
                        in_use: frozenset[str], reusable: frozenset[str],
                        running_after_restart: bool, known: Mapping[str, Device] | None = None,
                        hint: TopologyHint = NO_HINT) -> frozenset[str] | Need | None:
    """Upstream `devicesToAllocate` up to the plugin's preferred allocation: None when there is nothing to do,
    the devices when the reusable ones (an init container's, released to the next containers) and the hint's
    aligned ones settle it, else the `Need` `finish_allocation` completes. `existing` is what the container
    already holds, `healthy` the resource's healthy devices (None: never registered), `in_use` its allocated
    devices, `known` its devices with their topology, `hint` the topology manager's for the container. Raises
    AllocationError with upstream's messages."""
    needed = required
    if existing is not None:
        needed -= len(existing)
        if needed != 0:
            raise AllocationError(f"pod {gotext.go_quote(pod_uid)} container {gotext.go_quote(container)} changed "
                                  f"request for resource {gotext.go_quote(resource)} from {len(existing)} to "
                                  f"{required}")
    if running_after_restart:
        return None  # scenario 2: the kubelet restarted, the container runs with its devices already
    if healthy is None:
        raise AllocationError(f"cannot allocate unregistered device {resource}")
    if not healthy:
        raise AllocationError(f"no healthy devices present; cannot allocate unhealthy devices {resource}")
    if existing is not None and not existing <= healthy:
        raise AllocationError(f"previously allocated devices are no longer healthy; cannot allocate unhealthy "
                              f"devices {resource}")
    if needed == 0:
        return None
    taken = sorted(reusable)[:needed]
    if len(taken) == needed:
        return frozenset(taken)
    needed -= len(taken)
    available = healthy - in_use - frozenset(taken)
    if len(available) < needed:
        raise AllocationError(f"requested number of devices unavailable for {resource}. Requested: {needed}, "
                              f"Available: {len(available)}")
    aligned, unaligned, without = filter_by_affinity(available, known or {}, hint)
    if needed < len(aligned):
        # the plugin may choose among the aligned devices
        return Need(needed=needed, required=required, taken=frozenset(taken), available=aligned)
    # every aligned device first (the alignment the topology manager chose), then the plugin's choice
    taken += sorted(aligned)
    needed -= len(aligned)
    if needed == 0:
        return frozenset(taken)
    if not aligned and not unaligned:
        return Need(needed=needed, required=required, taken=frozenset(taken), available=available)
    return Need(needed=needed, required=required, taken=frozenset(taken), available=available - aligned,
                fallback=(unaligned, without))


def finish_allocation(need: Need, preferred: Iterable[str] | None) -> frozenset[str]:
    """The rest of `devicesToAllocate`: the plugin's preferred devices that are in `available` first, then those
    of the fallback sets, each in sorted order."""
    chosen = list(need.taken)
    remaining = need.needed
    fallback = need.fallback if need.fallback is not None else (need.available,)
    for pool in (sorted(frozenset(preferred or ()) & need.available), *(sorted(f) for f in fallback)):
        for dev in pool:
            if remaining == 0:
                break
            if dev not in chosen:
                chosen.append(dev)
                remaining -= 1
    if remaining:
        raise AllocationError(f"unexpectedly allocated less resources than required. Requested: {need.required}, "
                              f"Got: {need.required - remaining}")
    return frozenset(chosen)


# ---------------------------------------------------------------------------------------- topology hints


def has_topology_alignment(known: Mapping[str, Device]) -> bool:
    """Upstream `deviceHasTopologyAlignment`: some device of the resource reports a NUMA node."""
    return any(d.numa_nodes for d in known.values())


def _any_set(mask: BitMask, nodes: Iterable[int] | None) -> bool:
    return any(mask.is_set(n) for n in nodes or ())


def generate_device_topology_hints(known: Mapping[str, Device], machine_nodes: Sequence[int],
                                   available: Iterable[str], reusable: Iterable[str],
                                   request: int) -> list[TopologyHint]:
    """Upstream `generateDeviceTopologyHints`: every set of the NUMA nodes holding the resource's devices (the
    machine's nodes when none does) that holds all the reusable devices with a topology and enough available
    ones; preferred are those as narrow as the narrowest set holding `request` of the resource's devices at all.
    A device on a node the machine does not have is ignored there (upstream logs it)."""
    machine = sorted(set(machine_nodes))
    nodes = sorted({n for d in known.values() for n in d.numa_nodes or ()} & set(machine)) or machine
    min_affinity = len(nodes)
    available, reusable = sorted(available), sorted(reusable)
    hints: list[TopologyHint] = []

    def visit(mask: BitMask) -> None:
        nonlocal min_affinity
        in_mask = sum(1 for d in known.values() if _any_set(mask, d.numa_nodes))
        if in_mask >= request and mask.count() < min_affinity:
            min_affinity = mask.count()
        matching = 0
        for dev in reusable:
            nodes_of = known[dev].numa_nodes if dev in known else None
            if nodes_of is None:
                continue  # a reusable device without topology fits any mask
            if not _any_set(mask, nodes_of):
                return
            matching += 1
        matching += sum(1 for dev in available if _any_set(mask, known[dev].numa_nodes if dev in known else None))
        if matching >= request:
            hints.append(TopologyHint(mask, False))

    iterate_bitmasks(nodes, visit)
    return [TopologyHint(h.affinity, h.affinity is not None and h.affinity.count() == min_affinity)
            for h in hints]


def pod_device_requests(pod: spec.Pod, is_device_resource: Iterable[str]) -> dict[str, int]:
    """Upstream `getPodDeviceRequest`: the pod's limits (`PodLimits` without overhead: the long-running
    containers add up, an init container needs itself and the sidecars before it) of device plugin resources."""
    known = frozenset(is_device_resource)
    limits = admission.aggregate(pod, lambda c: c.resources.limits)
    return {name: math.ceil(amount) for name, amount in limits.items() if name in known}


@dataclasses.dataclass(frozen=True)
class TopologySnapshot:
    """The device manager's state as the topology manager's hint provider sees it, for one pod's admission
    (upstream `GetTopologyHints`, `GetPodTopologyHints`). Its allocation is I/O (the plugins' Allocate):
    `deferred` tells the topology manager to hand it to the caller, which answers with a fresh snapshot."""

    deferred: ClassVar[bool] = True
    numa_nodes: tuple[int, ...] = ()
    """The machine's NUMA nodes."""
    all: Mapping[str, Mapping[str, Device]] = dataclasses.field(default_factory=dict)
    healthy: Mapping[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    allocated: Mapping[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    pod_devices: PodDevices = dataclasses.field(default_factory=dict)
    reusable: Mapping[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    """The devices this pod's init containers leave to its next containers, per resource."""
    resources: frozenset[str] = frozenset()
    """Upstream `isDevicePluginResource`: the registered resources and those with devices allocated."""

    def _hints(self, resource: str, requested: int, allocated: frozenset[str] | None,
               reusable: frozenset[str]) -> list[TopologyHint] | None:
        known = self.all.get(resource, {})
        if not has_topology_alignment(known):
            return None  # "Resource does not have a topology preference"
        if allocated:
            # already allocated (an agent restart): the same hints again, or none for a changed request
            if len(allocated) != requested:
                return []
            return generate_device_topology_hints(known, self.numa_nodes, allocated, (), requested)
        available = self.healthy.get(resource, frozenset()) - self.allocated.get(resource, frozenset())
        if len(available | reusable) < requested:
            return []  # "Unable to generate topology hints: requested number of devices unavailable"
        return generate_device_topology_hints(known, self.numa_nodes, available, reusable, requested)

    def topology_hints(self, pod: spec.Pod, container: spec.ContainerSpec) -> ProviderHints:
        """Upstream `GetTopologyHints`: per device resource the container asks for."""
        return {resource: self._hints(resource, requested, container_devices(self.pod_devices, pod.uid,
                                                                             container.name, resource),
                                      self.reusable.get(resource, frozenset()))
                for resource, requested in sorted(container_requests(container, self.resources).items())}

    def pod_topology_hints(self, pod: spec.Pod) -> ProviderHints:
        """Upstream `GetPodTopologyHints`: per device resource the pod asks for (no reusable devices)."""
        return {resource: self._hints(resource, requested, pod_devices_of(self.pod_devices, pod.uid, resource),
                                      frozenset())
                for resource, requested in sorted(pod_device_requests(pod, self.resources).items())}

    def allocate(self, pod: spec.Pod, container: spec.ContainerSpec, hint: TopologyHint) -> TopologySnapshot:
        """Never called: the allocation is deferred to the device manager (the plugins' Allocate is I/O)."""
        raise NotImplementedError("the device manager allocates through its plugins")


def pod_devices_of(pod_devices: PodDevices, pod_uid: str, resource: str) -> frozenset[str]:
    """Upstream `podDevices.podDevices`: every device of the resource any container of the pod holds."""
    return frozenset(i for resources in pod_devices.get(pod_uid, {}).values()
                     for r, alloc in resources.items() if r == resource for i in alloc.ids)


# ---------------------------------------------------------------------------------------- pod resources
# upstream container_manager.go `containerDevicesFromResourceDeviceInstances`, pod_devices.go `getContainerDevices`,
# manager.go `GetAllocatableDevices`: one `ContainerDevices` per device and NUMA node (a device on two nodes is
# listed twice, one node each), without topology for a device whose plugin sent none; a device whose plugin sent
# a topology without nodes is not listed among the allocatable ones (upstream's loop over its nodes adds
# nothing). Go ranges over maps in random order; here resources, devices and nodes are sorted.

DeviceInstances = Mapping[str, Mapping[str, tuple[int, ...] | None]]
"""resource -> device ID -> its NUMA nodes (None: no topology): upstream `ResourceDeviceInstances` as far as the
pod-resources API reads it."""


def pod_resources_devices(instances: DeviceInstances) -> tuple[ContainerDevices, ...]:
    """Upstream `containerDevicesFromResourceDeviceInstances`: one entry per device and NUMA node, or one without
    topology for a device without."""
    out: list[ContainerDevices] = []
    for resource in sorted(instances):
        for device_id, nodes in sorted(instances[resource].items()):
            if nodes is None:
                # "Some device plugin do not report the topology information. This is legal."
                out.append(ContainerDevices(resource_name=resource, device_ids=(device_id,)))
                continue
            out += [ContainerDevices(resource_name=resource, device_ids=(device_id,), topology=TopologyInfo((node,)))
                    for node in sorted(nodes)]
    return tuple(out)


def container_device_instances(resources: Mapping[str, ContainerAllocation] | None) -> DeviceInstances:
    """Upstream `getContainerDevices`: the devices recorded for a container, each with the NUMA nodes it was
    recorded under (none under the node of no topology); a resource with nothing recorded is left out."""
    out: dict[str, dict[str, tuple[int, ...] | None]] = {}
    for resource, alloc in (resources or {}).items():
        if not alloc.device_ids:
            continue
        devices: dict[str, set[int] | None] = {}
        for node, ids in alloc.device_ids.items():
            for device_id in ids or ():
                if node == NODE_WITHOUT_TOPOLOGY:
                    devices.setdefault(device_id, None)
                else:
                    devices[device_id] = (devices.get(device_id) or set()) | {node}
        out[resource] = {d: None if nodes is None else tuple(sorted(nodes)) for d, nodes in devices.items()}
    return out


def allocatable_device_instances(known: Mapping[str, Mapping[str, Device]],
                                 healthy: Mapping[str, frozenset[str]]) -> DeviceInstances:
    """Upstream `GetAllocatableDevices` (`allDevices.Filter(healthyDevices)`): per resource with healthy devices
    the plugin reported, those devices with their topology."""
    return {resource: {d: known[resource][d].numa_nodes for d in ids if d in known[resource]}
            for resource, ids in healthy.items() if resource in known}


def admission_rejection(err: BaseException | str) -> admission.Rejection:
    """Upstream `admission.GetPodAdmitResult` for the device manager's errors (none has a type of its own):
    ``UnexpectedAdmissionError``, "Allocate failed due to <err>, which is unexpected"."""
    return admission.Rejection(reason=UNEXPECTED_ADMISSION_ERROR,
                               message=f"{admission.REJECTED_PREFIX}Allocate failed due to {err}, which is unexpected")


def sanitize_allocatable(allocatable: Mapping[str, str], allocated: Mapping[str, frozenset[str]]) -> dict[str, str]:
    """Upstream `sanitizeNodeAllocatable`: a resource's allocatable is raised to what is allocated of it, so pods
    holding devices pass the resource predicate while their plugin is away (after a restart)."""
    out = dict(allocatable)
    for resource, ids in allocated.items():
        try:
            current = qos.value(allocatable[resource]) if resource in allocatable else None
        except ValueError:
            current = None
        if current is not None and current >= len(ids):
            continue
        out[resource] = str(len(ids))
    return out


def active_pods_to_remove(recorded: Iterable[str], active: Iterable[str]) -> frozenset[str]:
    """Upstream `UpdateAllocatedDevices`: the pods holding devices that are no longer active."""
    return frozenset(recorded) - frozenset(active)


__all__ = [
    "DEPRECATION_FILE",
    "DEVICE_PLUGINS_DIR",
    "DIAL_TIMEOUT",
    "ENDPOINT_STOP_GRACE_PERIOD",
    "ERR_ENDPOINT_STOPPED",
    "ERR_FAILED_TO_DIAL",
    "ERR_INVALID_RESOURCE_NAME",
    "ERR_UNSUPPORTED_VERSION",
    "HEALTHY",
    "KUBELET_SOCKET",
    "NODE_WITHOUT_TOPOLOGY",
    "PRESTART_TIMEOUT",
    "RPC_TIMEOUT",
    "SUPPORTED_VERSIONS",
    "UNEXPECTED_ADMISSION_ERROR",
    "UNHEALTHY",
    "VERSION",
    "AllocResponse",
    "AllocationError",
    "Capacity",
    "ContainerAllocation",
    "Device",
    "DeviceInstances",
    "DeviceSpec",
    "Mount",
    "Need",
    "PodDevices",
    "ResourceDevices",
    "RunContainerOptions",
    "active_pods_to_remove",
    "admission_rejection",
    "alloc_response_from_bytes",
    "alloc_response_from_proto",
    "allocatable_device_instances",
    "allocated_devices",
    "capacity",
    "container_device_instances",
    "container_devices",
    "container_requests",
    "device_update",
    "devices_from_proto",
    "devices_per_numa",
    "endpoint_path",
    "filter_by_affinity",
    "finish_allocation",
    "from_checkpoint",
    "generate_device_topology_hints",
    "has_topology_alignment",
    "pod_device_requests",
    "pod_devices_of",
    "pod_requests_devices",
    "pod_resources_devices",
    "registration_error",
    "run_container_options",
    "sanitize_allocatable",
    "stop_grace_expired",
    "to_checkpoint",
]
