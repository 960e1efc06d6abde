"""The Node's labels and status as the upstream kubelet computes them (pkg/kubelet/nodestatus), pure.

The machine's facts, the runtime's readiness and images come in as data; the agent's node module reads
them and sends the result.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cri_client import types as cri
from kopflet.api import qos, times

# Upstream's default hard eviction thresholds, which allocatable also keeps back.
DEFAULT_EVICTION_HARD = {"memory.available": "100Mi", "nodefs.available": "10%"}
MAX_IMAGES = 50  # nodeStatusMaxImages
EPHEMERAL_STORAGE = "ephemeral-storage"
ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le", "s390x": "s390x"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class MachineFacts:
    """What the node is made of, read once at start (upstream cadvisor's MachineInfo and /etc/os-release)."""

    cpus: int
    memory_bytes: int
    ephemeral_storage_bytes: int
    """The root dir's filesystem size; 0 when not measured (localStorageCapacityIsolation off)."""
    machine: str = "x86_64"  # uname -m
    kernel_version: str = ""
    os_image: str = ""
    machine_id: str = ""
    system_uuid: str = ""
    boot_id: str = ""
    apparmor_enabled: bool = False
    """The kernel enforces AppArmor: pods asking for a profile are admitted (upstream's AppArmor validator)."""

    @property
    def architecture(self) -> str:
        return ARCHITECTURES.get(self.machine, self.machine)


@dataclasses.dataclass(frozen=True)
class Condition:
    status: str
    reason: str
    message: str


def node_labels(node_name: str, facts: MachineFacts, extra: Mapping[str, str]) -> dict[str, str]:
    """The well-known labels upstream sets (plus the deprecated beta ones it still sets) and --node-labels."""
    arch = facts.architecture
    return {"kubernetes.io/hostname": node_name, "kubernetes.io/os": "linux", "kubernetes.io/arch": arch,
            "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": arch, **extra}


def capacity(facts: MachineFacts, max_pods: int, *, local_storage_capacity_isolation: bool = True,
             reported: Mapping[str, str] = {}) -> dict[str, str]:
    """The Node's capacity (upstream MachineInfo setter with the container manager's GetCapacity).

    ``ephemeral-storage`` (the root dir's filesystem) only with localStorageCapacityIsolation on: upstream's
    container manager learns it from cAdvisor's RootFsInfo only then. Off, the setter leaves whatever the Node
    already `reported` for it (it writes into the existing Node's capacity, never clearing it), so a node that
    had it on keeps showing its old value."""
    out = {"cpu": str(facts.cpus), "memory": f"{facts.memory_bytes // 1024}Ki"}
    if local_storage_capacity_isolation:
        out[EPHEMERAL_STORAGE] = f"{facts.ephemeral_storage_bytes // 1024}Ki"
    elif EPHEMERAL_STORAGE in reported:
        out[EPHEMERAL_STORAGE] = reported[EPHEMERAL_STORAGE]
    out["pods"] = str(max_pods)
    return out


def allocatable(cap: Mapping[str, str], *, system_reserved: Mapping[str, str] = {},
                kube_reserved: Mapping[str, str] = {},
                eviction_hard: Mapping[str, str] = DEFAULT_EVICTION_HARD,
                local_storage_capacity_isolation: bool = True) -> dict[str, str]:
    """Capacity minus reservations and hard eviction thresholds (upstream GetNodeAllocatableReservation).

    Upstream reserves only for what its container manager's capacity holds, where ephemeral-storage is only
    with localStorageCapacityIsolation on; off, a stale ephemeral-storage capacity (`capacity`'s `reported`)
    is copied to allocatable as it is."""
    out: dict[str, str] = {}
    for name, value in cap.items():
        if name == EPHEMERAL_STORAGE and not local_storage_capacity_isolation:
            out[name] = value
            continue
        total = qos.parse_quantity(value)
        reserved = sum((qos.parse_quantity(r[name]) for r in (system_reserved, kube_reserved) if name in r),
                       start=qos.parse_quantity("0"))
        signal = {"memory": "memory.available", "ephemeral-storage": "nodefs.available"}.get(name)
        if signal and signal in eviction_hard:
            threshold = eviction_hard[signal]
            reserved += total * qos.parse_quantity(threshold[:-1]) / 100 if threshold.endswith("%") \
                else qos.parse_quantity(threshold)
        left = max(total - reserved, 0)
        if name == "cpu":
            out[name] = f"{int(left * 1000)}m" if left != int(left) else str(int(left))
        elif name in ("memory", EPHEMERAL_STORAGE):
            out[name] = f"{int(left) // 1024}Ki"
        else:
            out[name] = str(int(left))
    return out


def missing_capacities(cap: Mapping[str, str], *, local_storage_capacity_isolation: bool = True) -> list[str]:
    """The resources the Node must report before it is Ready (upstream ReadyCondition's requiredCapacities):
    cpu, memory and pods, and ephemeral-storage only with localStorageCapacityIsolation on."""
    required = [qos.CPU, qos.MEMORY, "pods"]
    if local_storage_capacity_isolation:
        required.append(EPHEMERAL_STORAGE)
    return [name for name in required if name not in cap]


def conditions(ready: Condition, previous: Sequence[Mapping[str, Any]], now: datetime.datetime,
               pressure: Mapping[str, bool] | None = None) -> list[dict[str, str]]:
    """Ready plus the three pressure conditions; lastTransitionTime moves only when a status flips."""
    pressure = pressure or {}
    wanted = {
        "MemoryPressure": Condition("True", "KubeletHasInsufficientMemory",
                                    "kubelet has insufficient memory available")
        if pressure.get("MemoryPressure") else
        Condition("False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        "DiskPressure": Condition("True", "KubeletHasDiskPressure", "kubelet has disk pressure")
        if pressure.get("DiskPressure") else
        Condition("False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        "PIDPressure": Condition("True", "KubeletHasInsufficientPID", "kubelet has insufficient PID available")
        if pressure.get("PIDPressure") else
        Condition("False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        "Ready": ready,
    }
    before = {c.get("type"): c for c in previous}
    stamp = times.timestamp(now)
    out = []
    for kind, cond in wanted.items():
        old = before.get(kind)
        transition = old.get("lastTransitionTime", stamp) if old and old.get("status") == cond.status else stamp
        out.append({"type": kind, "status": cond.status, "reason": cond.reason, "message": cond.message,
                    "lastHeartbeatTime": stamp, "lastTransitionTime": transition})
    return out


# The event each condition status is announced with (upstream setters' recordEventFunc; events.NodeReady ...).
_CONDITION_EVENTS: Mapping[str, Mapping[str, str]] = {
    "MemoryPressure": {"True": "NodeHasInsufficientMemory", "False": "NodeHasSufficientMemory"},
    "DiskPressure": {"True": "NodeHasDiskPressure", "False": "NodeHasNoDiskPressure"},
    "PIDPressure": {"True": "NodeHasInsufficientPID", "False": "NodeHasSufficientPID"},
    "Ready": {"True": "NodeReady", "False": "NodeNotReady", "Unknown": "NodeNotReady"},
}


def condition_events(node_name: str, previous: Sequence[Mapping[str, Any]],
                     current: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(reason, message) of the Normal events for the conditions whose status moved, a new one included
    (upstream recordNodeStatusEvent: "Node %s status is now: %s"); an unchanged status says nothing, so an
    agent restart on a registered node announces nothing but its start."""
    before = {c.get("type"): c.get("status") for c in previous}
    out = []
    for cond in current:
        kind, status = cond.get("type"), cond.get("status")
        reason = _CONDITION_EVENTS.get(str(kind), {}).get(str(status))
        if reason and before.get(kind) != status:
            out.append((reason, f"Node {node_name} status is now: {reason}"))
    return out


def rebooted_message(node_name: str, previous_boot_id: str, boot_id: str) -> str | None:
    """The Warning ``Rebooted`` event's message when the Node last reported another boot id (upstream
    MachineInfo setter); None when it is the same boot or the Node never reported one."""
    if not previous_boot_id or not boot_id or previous_boot_id == boot_id:
        return None
    return f"Node {node_name} has been rebooted, boot id: {boot_id}"


def ready_condition(runtime: cri.RuntimeStatus | None, error: str = "", *, missing: Sequence[str] = (),
                    shutdown: str | None = None) -> Condition:
    """Ready from CRI Status (upstream runtimeState errors): the runtime and its network must be ready, the node
    must not be shutting down (`shutdown`: the node shutdown manager's error), and the Node must report every
    capacity `missing_capacities` asks for (`missing` lists those it lacks)."""
    problems = []
    if runtime is None:
        problems.append(f"container runtime is down{': ' + error if error else ''}")
    else:
        by_type = {c.type: c for c in runtime.conditions}
        for kind, what in (("RuntimeReady", "container runtime not ready"),
                           ("NetworkReady", "container runtime network not ready")):
            c = by_type.get(kind)
            if c is None or not c.status:
                problems.append(f"{what}: {kind}=false reason:{c.reason if c else ''} "
                                f"message:{c.message if c else ''}")
    if shutdown:
        problems.append(shutdown)
    if missing:
        problems.append(f"missing node capacity for resources: {', '.join(missing)}")
    if problems:
        return Condition("False", "KubeletNotReady", problems[0] if len(problems) == 1 else f"[{', '.join(problems)}]")
    return Condition("True", "KubeletReady", "kubelet is posting ready status")


def images(listed: Iterable[cri.Image], limit: int = MAX_IMAGES) -> list[dict[str, Any]]:
    """The node's images, biggest first, at most ``limit`` (upstream nodestatus.Images)."""
    out = []
    for image in sorted(listed, key=lambda i: i.size, reverse=True)[:limit]:
        names = [*image.repo_digests, *image.repo_tags] or [image.id]
        out.append({"names": names, "sizeBytes": image.size})
    return out


def addresses(node_name: str, node_ip: str) -> list[dict[str, str]]:
    out = [{"type": "Hostname", "address": node_name}]
    if node_ip:
        out.insert(0, {"type": "InternalIP", "address": node_ip})
    return out


DECLARED_FEATURES = ("InPlacePodLevelResourcesVerticalScaling", "InPlacePodVerticalScalingInitContainers",
                     "RestartAllContainersOnContainerExits")
"""The node features kopflet implements among upstream's registry (k8s.io/component-helpers
nodedeclaredfeatures, NodeDeclaredFeatures GA at 1.37): the scheduler's NodeDeclaredFeatures plugin sends a pod
that needs one (a RestartAllContainers rule) only to nodes declaring it. The upstream kubelet declares each
whose gate is on; kopflet declares only what it does."""


def declared_features() -> list[str]:
    """``status.declaredFeatures``: sorted and unique, as the apiserver requires (upstream
    `DiscoverNodeFeatures`, then `validateNodeDeclaredFeatures`)."""
    return sorted(set(DECLARED_FEATURES))


def node_info(facts: MachineFacts, kubelet_version: str, runtime_version: str) -> dict[str, str]:
    return {"machineID": facts.machine_id, "systemUUID": facts.system_uuid, "bootID": facts.boot_id,
            "kernelVersion": facts.kernel_version, "osImage": facts.os_image,
            "containerRuntimeVersion": runtime_version, "kubeletVersion": kubelet_version,
            "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": facts.architecture}


def without_heartbeats(status: Mapping[str, Any]) -> dict[str, Any]:
    """The status with heartbeat times blanked: what decides whether a change is worth posting."""
    return {**status, "conditions": [{k: v for k, v in c.items() if k != "lastHeartbeatTime"}
                                     for c in status.get("conditions", [])]}
