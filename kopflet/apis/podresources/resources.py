"""The pod-resources API's answers (upstream pkg/kubelet/apis/podresources at v1.37.1: server_v1.go,
server_v1alpha1.go, types.go, constants.go), from the node's pods and what the resource managers hold.

Pure: the pods are the API objects the agent handles, the resource managers are providers (upstream's
`CPUsProvider`, `MemoryProvider`, `DevicesProvider`, `DynamicResourcesProvider` interfaces, which the container
manager implements); the answers are frozen dataclasses shaped as the v1 messages. The gRPC server, the socket and
the protobuf conversion are `kopflet.apis.podresources.server`'s.

What upstream v1.37.1 does, mirrored here:

- `List` (v1): the active pods (`KubeletPodResourcesListUseActivePods`, deprecated and on by default since 1.34:
  `GetActivePods`, so pods in a terminal phase are left out), each with its restartable init containers (sidecars,
  ``restartPolicy: Always``) then its app containers; the device provider is asked to refresh first
  (`UpdateAllocatedDevices`).
- `Get` (v1): the one pod by namespace and name, found as `List` would find it (`GetPodByName`, then the same
  `isPodInactive` filter); else the error "pod <name> in namespace <namespace> not found". The
  `KubeletPodResourcesGet` gate is GA and locked on at v1.37.1: Get is always served (older kubelets answered
  "PodResources API Get method disabled" with the gate off; that message is gone upstream).
- `GetAllocatableResources` (v1): the devices, CPUs and memory the providers can hand out.
- pod-level ``cpu_ids`` and ``memory`` are filled only with `PodLevelResourceManagers` (beta, off by default at
  v1.37.1; kopflet refuses feature gates, so it is off: `pod_level` False).
- `List` (v1alpha1): every pod the agent has (`GetPods`, terminal ones too), app containers only, devices only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

SOCKET = "kubelet"
"""upstream podresources.Socket: the socket is ``<root-dir>/pod-resources/kubelet.sock``."""
DEFAULT_QPS = 100
"""upstream podresources.DefaultQPS: the requests a second the server takes, summed over its methods."""
DEFAULT_BURST_TOKENS = 10
"""upstream podresources.DefaultBurstTokens."""

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
RESTART_POLICY_ALWAYS = "Always"


class NotFoundError(LookupError):
    """`Get` found no active pod of that name in that namespace (upstream's message; gRPC code Unknown, as a plain
    Go error from a handler)."""

    def __init__(self, namespace: str, name: str) -> None:
        super().__init__(f"pod {name} in namespace {namespace} not found")


# ----------------------------------------------------------------------------------------------- messages


@dataclasses.dataclass(frozen=True)
class TopologyInfo:
    """v1 TopologyInfo: the NUMA nodes (their IDs) a device or memory block is on."""

    nodes: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class ContainerDevices:
    """v1 ContainerDevices: one resource's devices (device plugin IDs)."""

    resource_name: str
    device_ids: tuple[str, ...] = ()
    topology: TopologyInfo | None = None


@dataclasses.dataclass(frozen=True)
class ContainerMemory:
    """v1 ContainerMemory: a memory or hugepages block (``memory``, ``hugepages-2Mi``) in bytes."""

    memory_type: str
    size: int
    topology: TopologyInfo | None = None


@dataclasses.dataclass(frozen=True)
class CDIDevice:
    """v1 CDIDevice: a fully qualified CDI device name (``vendor.com/gpu=gpu0``)."""

    name: str


@dataclasses.dataclass(frozen=True)
class ClaimResource:
    """v1 ClaimResource: one DRA device (driver, pool, device) and its CDI devices."""

    cdi_devices: tuple[CDIDevice, ...] = ()
    driver_name: str = ""
    pool_name: str = ""
    device_name: str = ""
    share_id: str | None = None


@dataclasses.dataclass(frozen=True)
class DynamicResource:
    """v1 DynamicResource: a ResourceClaim a container uses and what was allocated for it."""

    claim_name: str
    claim_namespace: str
    claim_resources: tuple[ClaimResource, ...] = ()


@dataclasses.dataclass(frozen=True)
class ContainerResources:
    """v1 ContainerResources (v1alpha1: name and devices only)."""

    name: str
    devices: tuple[ContainerDevices, ...] = ()
    cpu_ids: tuple[int, ...] = ()
    memory: tuple[ContainerMemory, ...] = ()
    dynamic_resources: tuple[DynamicResource, ...] = ()


@dataclasses.dataclass(frozen=True)
class PodResources:
    """v1 PodResources; `cpu_ids` and `memory` are the pod-level ones (`PodLevelResourceManagers` only)."""

    name: str
    namespace: str
    containers: tuple[ContainerResources, ...] = ()
    cpu_ids: tuple[int, ...] = ()
    memory: tuple[ContainerMemory, ...] = ()


@dataclasses.dataclass(frozen=True)
class AllocatableResources:
    """v1 AllocatableResourcesResponse."""

    devices: tuple[ContainerDevices, ...] = ()
    cpu_ids: tuple[int, ...] = ()
    memory: tuple[ContainerMemory, ...] = ()


# ---------------------------------------------------------------------------------------------- providers
# upstream types.go. `pod` and `container` are the API objects (a Pod, one of its spec's containers): what
# upstream's providers are given as *v1.Pod and *v1.Container.


class CPUsProvider(Protocol):
    """upstream CPUsProvider: the CPU manager (`kopflet.cm.cpumanager.manager.CPUManager`)."""

    def get_cpus(self, pod: Mapping[str, Any], container: Mapping[str, Any]) -> Sequence[int]:
        """The container's exclusive CPUs; none for a container on the shared pool."""
        ...

    def get_pod_cpus(self, pod_uid: str) -> Sequence[int]:
        """The pod-level exclusive CPUs (asked only with `PodLevelResourceManagers`)."""
        ...

    def get_allocatable_cpus(self) -> Sequence[int]:
        """The CPUs the manager may hand out exclusively."""
        ...


class MemoryProvider(Protocol):
    """upstream MemoryProvider: the memory manager (`kopflet.cm.memorymanager.manager.MemoryManager`)."""

    def get_memory(self, pod: Mapping[str, Any], container: Mapping[str, Any]) -> Sequence[ContainerMemory]: ...

    def get_pod_memory(self, pod_uid: str) -> Sequence[ContainerMemory]: ...

    def get_allocatable_memory(self) -> Sequence[ContainerMemory]: ...


class DevicesProvider(Protocol):
    """upstream DevicesProvider: the device manager (`kopflet.cm.devicemanager.manager.DeviceManager`)."""

    def update_allocated_devices(self) -> None:
        """Refresh what is allocated before a `List` (upstream frees the devices of pods gone since)."""
        ...

    def get_devices(self, pod_uid: str, container_name: str) -> Sequence[ContainerDevices]: ...

    def get_allocatable_devices(self) -> Sequence[ContainerDevices]: ...


class DynamicResourcesProvider(Protocol):
    """upstream DynamicResourcesProvider: the DRA manager (kopflet has none: DRA claims are refused at admission)."""

    def get_dynamic_resources(self, pod: Mapping[str, Any],
                              container: Mapping[str, Any]) -> Sequence[DynamicResource]: ...


class _Nothing:
    """A provider with nothing to report: upstream's container manager without that manager (its answers are
    empty lists)."""

    def get_cpus(self, pod: Mapping[str, Any], container: Mapping[str, Any]) -> Sequence[int]:
        return ()

    def get_pod_cpus(self, pod_uid: str) -> Sequence[int]:
        return ()

    def get_allocatable_cpus(self) -> Sequence[int]:
        return ()

    def get_memory(self, pod: Mapping[str, Any], container: Mapping[str, Any]) -> Sequence[ContainerMemory]:
        return ()

    def get_pod_memory(self, pod_uid: str) -> Sequence[ContainerMemory]:
        return ()

    def get_allocatable_memory(self) -> Sequence[ContainerMemory]:
        return ()

    def update_allocated_devices(self) -> None:
        return None

    def get_devices(self, pod_uid: str, container_name: str) -> Sequence[ContainerDevices]:
        return ()

    def get_allocatable_devices(self) -> Sequence[ContainerDevices]:
        return ()

    def get_dynamic_resources(self, pod: Mapping[str, Any],
                              container: Mapping[str, Any]) -> Sequence[DynamicResource]:
        return ()


NOTHING = _Nothing()
"""Every provider at once, reporting nothing."""
NO_CPUS: CPUsProvider = NOTHING
NO_MEMORY: MemoryProvider = NOTHING
NO_DEVICES: DevicesProvider = NOTHING
NO_DYNAMIC_RESOURCES: DynamicResourcesProvider = NOTHING


@dataclasses.dataclass(frozen=True)
class Providers:
    """upstream PodResourcesProviders (the pods are passed to each call instead)."""

    cpus: CPUsProvider = NO_CPUS
    memory: MemoryProvider = NO_MEMORY
    devices: DevicesProvider = NO_DEVICES
    dynamic_resources: DynamicResourcesProvider = NO_DYNAMIC_RESOURCES


# ------------------------------------------------------------------------------------------------- pods


def _meta(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get("metadata") or {}


def _containers(pod: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    return [c for c in (pod.get("spec") or {}).get(key) or () if isinstance(c, Mapping)]


def is_pod_inactive(pod: Mapping[str, Any]) -> bool:
    """upstream `isPodInactive` as the agent can tell it: the pod (with the status the agent wrote last) is in a
    terminal phase. Upstream also drops a pod its worker has fully terminated (`IsPodKnownTerminated`), and keeps
    a terminal pod whose termination was requested and is still under way; here a deleted pod drops out once the
    agent wrote its terminal phase (right after its containers stopped) or the API object is gone, and a terminal
    pod as soon as its phase is terminal."""
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def active_pods(pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """upstream `GetActivePods`: the pods not inactive, in the order given."""
    return [pod for pod in pods if not is_pod_inactive(pod)]


def pod_by_name(pods: Iterable[Mapping[str, Any]], namespace: str, name: str) -> Mapping[str, Any] | None:
    """upstream kubeletPodsProvider `GetPodByName`: the pod of that namespace and name, None when there is none or
    it is inactive."""
    for pod in pods:
        meta = _meta(pod)
        if meta.get("namespace", "") == namespace and meta.get("name", "") == name:
            return None if is_pod_inactive(pod) else pod
    return None


def is_restartable_init_container(container: Mapping[str, Any]) -> bool:
    """upstream podutil `IsRestartableInitContainer`: a sidecar (``restartPolicy: Always``)."""
    return container.get("restartPolicy") == RESTART_POLICY_ALWAYS


def listed_containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The containers v1 reports, in upstream's order: the restartable init containers, then the app containers
    (ephemeral containers and ordinary init containers are not reported)."""
    return [*(c for c in _containers(pod, "initContainers") if is_restartable_init_container(c)),
            *_containers(pod, "containers")]


# ---------------------------------------------------------------------------------------------------- v1


def container_resources(providers: Providers, pod: Mapping[str, Any],
                        container: Mapping[str, Any]) -> ContainerResources:
    """upstream `getContainerResources`: each provider asked about the container."""
    uid, name = str(_meta(pod).get("uid", "")), str(container.get("name", ""))
    return ContainerResources(
        name=name,
        devices=tuple(providers.devices.get_devices(uid, name)),
        cpu_ids=tuple(providers.cpus.get_cpus(pod, container)),
        memory=tuple(providers.memory.get_memory(pod, container)),
        dynamic_resources=tuple(providers.dynamic_resources.get_dynamic_resources(pod, container)))


def pod_resources(providers: Providers, pod: Mapping[str, Any], *, pod_level: bool = False) -> PodResources:
    """One pod as v1 List and Get report it; the pod-level CPUs and memory only with `pod_level`
    (`PodLevelResourceManagers`)."""
    meta = _meta(pod)
    uid = str(meta.get("uid", ""))
    return PodResources(
        name=str(meta.get("name", "")), namespace=str(meta.get("namespace", "")),
        containers=tuple(container_resources(providers, pod, c) for c in listed_containers(pod)),
        cpu_ids=tuple(providers.cpus.get_pod_cpus(uid)) if pod_level else (),
        memory=tuple(providers.memory.get_pod_memory(uid)) if pod_level else ())


def list_pod_resources(providers: Providers, pods: Iterable[Mapping[str, Any]], *, use_active_pods: bool = True,
                       pod_level: bool = False) -> tuple[PodResources, ...]:
    """upstream v1 `List`: the active pods (every pod without `use_active_pods`), the devices refreshed first."""
    chosen = active_pods(pods) if use_active_pods else list(pods)
    providers.devices.update_allocated_devices()
    return tuple(pod_resources(providers, pod, pod_level=pod_level) for pod in chosen)


def get_pod_resources(providers: Providers, pods: Iterable[Mapping[str, Any]], namespace: str, name: str, *,
                      pod_level: bool = False) -> PodResources:
    """upstream v1 `Get`. Raises `NotFoundError` for a pod that is unknown or inactive."""
    pod = pod_by_name(pods, namespace, name)
    if pod is None:
        raise NotFoundError(namespace, name)
    return pod_resources(providers, pod, pod_level=pod_level)


def allocatable_resources(providers: Providers) -> AllocatableResources:
    """upstream v1 `GetAllocatableResources`: the capacity the providers can hand out, not what is free."""
    return AllocatableResources(devices=tuple(providers.devices.get_allocatable_devices()),
                                cpu_ids=tuple(providers.cpus.get_allocatable_cpus()),
                                memory=tuple(providers.memory.get_allocatable_memory()))


# ---------------------------------------------------------------------------------------------- v1alpha1


def list_pod_resources_v1alpha1(providers: Providers,
                                 pods: Iterable[Mapping[str, Any]]) -> tuple[PodResources, ...]:
    """upstream v1alpha1 `List`: every pod (`GetPods`: terminal ones too), its app containers with their devices
    only (the v1alpha1 messages have no more; the devices' topology is dropped in the conversion)."""
    pods = list(pods)
    providers.devices.update_allocated_devices()
    out = []
    for pod in pods:
        meta = _meta(pod)
        uid = str(meta.get("uid", ""))
        names = [str(c.get("name", "")) for c in _containers(pod, "containers")]
        out.append(PodResources(
            name=str(meta.get("name", "")), namespace=str(meta.get("namespace", "")),
            containers=tuple(ContainerResources(name=name, devices=tuple(providers.devices.get_devices(uid, name)))
                             for name in names)))
    return tuple(out)


__all__ = [
    "DEFAULT_BURST_TOKENS",
    "DEFAULT_QPS",
    "NOTHING",
    "NO_CPUS",
    "NO_DEVICES",
    "NO_DYNAMIC_RESOURCES",
    "NO_MEMORY",
    "SOCKET",
    "AllocatableResources",
    "CDIDevice",
    "CPUsProvider",
    "ClaimResource",
    "ContainerDevices",
    "ContainerMemory",
    "ContainerResources",
    "DevicesProvider",
    "DynamicResource",
    "DynamicResourcesProvider",
    "MemoryProvider",
    "NotFoundError",
    "PodResources",
    "Providers",
    "TopologyInfo",
    "active_pods",
    "allocatable_resources",
    "container_resources",
    "get_pod_resources",
    "is_pod_inactive",
    "is_restartable_init_container",
    "list_pod_resources",
    "list_pod_resources_v1alpha1",
    "listed_containers",
    "pod_by_name",
    "pod_resources",
]
