"""
The runtime's view of one pod: its sandboxes and containers, newest first (upstream `kubecontainer.PodStatus`).

Pure builders from the CRI's plain dataclasses (`cri_client.types`): sandboxes and containers are grouped by
their pod uid label (upstream `getSandboxIDByPodUID` / `getContainerInfoFromLabels`), the container's name
and recovery state come from its labels and annotations (`kopflet.container.labels`), and both lists are ordered by
creation time, newest first, so "the latest instance of container X" is the first one with that name, as
upstream's `FindContainerStatusByName` assumes.

Times stay in nanoseconds since the epoch as the CRI reports them (0 means "never").
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Collection, Iterable

from cri_client import types as cri
from kopflet.api import spec
from kopflet.container import labels


class State(enum.StrEnum):
    """A container's state, with upstream `kubecontainer.State` names (they appear in kill messages)."""

    CREATED = "created"
    RUNNING = "running"
    EXITED = "exited"
    UNKNOWN = "unknown"


_STATES = {
    cri.ContainerState.CREATED: State.CREATED,
    cri.ContainerState.RUNNING: State.RUNNING,
    cri.ContainerState.EXITED: State.EXITED,
    cri.ContainerState.UNKNOWN: State.UNKNOWN,
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class SandboxInfo:
    """One sandbox of the pod: attempt, readiness, IPs and the network namespace mode it was created with."""

    id: str
    attempt: int = 0
    ready: bool = False
    ip: str = ""
    additional_ips: tuple[str, ...] = ()
    created_at: int = 0
    network_mode: cri.NamespaceMode = cri.NamespaceMode.POD
    """POD for a pod network, NODE for hostNetwork; a sandbox without namespace options reads as POD."""

    @property
    def ips(self) -> tuple[str, ...]:
        """Primary IP first, as status.podIPs lists them."""
        return ((self.ip,) if self.ip else ()) + self.additional_ips


@dataclasses.dataclass(frozen=True, kw_only=True)
class ContainerInfo:
    """One container instance, as upstream `kubecontainer.Status` (times in ns, 0 = never)."""

    id: str
    name: str
    state: State = State.UNKNOWN
    created_at: int = 0
    started_at: int = 0
    finished_at: int = 0
    exit_code: int = 0
    image: str = ""
    image_ref: str = ""
    image_id: str = ""
    hash: str = ""
    """The spec hash annotation, normalised ("" when missing or garbled: never equal to a real hash)."""
    restart_count: int = 0
    reason: str = ""
    message: str = ""
    attempt: int = 0
    sandbox_id: str = ""
    termination_message_path: str = ""
    termination_message_policy: str = ""
    resources: cri.LinuxContainerResources | None = None
    """The cgroup settings the runtime reports for it (in-place resize reads them back into the status)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class RuntimePodStatus:
    """Everything the runtime has for one pod uid, sandboxes and containers newest first."""

    uid: str
    name: str = ""
    namespace: str = ""
    sandboxes: tuple[SandboxInfo, ...] = ()
    containers: tuple[ContainerInfo, ...] = ()

    @property
    def latest_sandbox(self) -> SandboxInfo | None:
        """The newest sandbox, the one upstream `PodSandboxChanged` judges."""
        return self.sandboxes[0] if self.sandboxes else None

    @property
    def ips(self) -> tuple[str, ...]:
        """The pod's IPs: those of the newest sandbox while it is ready (upstream `GetPodStatus`)."""
        sandbox = self.latest_sandbox
        return sandbox.ips if sandbox is not None and sandbox.ready else ()

    def latest_container(self, name: str) -> ContainerInfo | None:
        """The newest instance of that container (upstream `FindContainerStatusByName`)."""
        return next((c for c in self.containers if c.name == name), None)

    def latest_exited(self, name: str) -> ContainerInfo | None:
        """The newest exited instance of that container: backs lastState, restartCount and crash-loop backoff."""
        return next((c for c in self.containers if c.name == name and c.state is State.EXITED), None)

    def instances(self, name: str) -> tuple[ContainerInfo, ...]:
        """Every instance of that container, newest first."""
        return tuple(c for c in self.containers if c.name == name)

    def any_regular_container_created(self, pod: spec.Pod) -> bool:
        """Whether a regular container of the pod exists (created, running or exited), so initialisation happened
        (upstream `HasAnyRegularContainerCreated`)."""
        for container in pod.spec.containers:
            info = self.latest_container(container.name)
            if info is not None and info.state in (State.CREATED, State.RUNNING, State.EXITED):
                return True
        return False

    def running_containers(self) -> tuple[ContainerInfo, ...]:
        """The running instances, what killing the pod has to stop (upstream `ConvertPodStatusToRunningPod`)."""
        return tuple(c for c in self.containers if c.state is State.RUNNING)

    @property
    def active_sandbox_id(self) -> str:
        """The newest sandbox's id while it is ready, else "" (upstream `activePodSandboxID` in `GetPodStatus`)."""
        sandbox = self.latest_sandbox
        return sandbox.id if sandbox is not None and sandbox.ready else ""

    def active_containers(self) -> tuple[ContainerInfo, ...]:
        """Instances in the active sandbox, newest first (upstream `ActiveContainerStatuses`).

        Init containers are judged on these only, so instances left over from an earlier sandbox never count
        as progress in the current one. An instance whose sandbox is not known ("") counts as active.
        """
        active = self.active_sandbox_id
        if not active:
            return ()
        return tuple(c for c in self.containers if c.sandbox_id in (active, ""))

    def latest_active_container(self, name: str) -> ContainerInfo | None:
        """The newest instance of that container in the active sandbox (upstream `FindActiveContainerStatusByName`)."""
        return next((c for c in self.active_containers() if c.name == name), None)


# ---------------------------------------------------------------------------------------------- builders


def sandbox_info(status: cri.PodSandboxStatus) -> SandboxInfo:
    """One CRI sandbox status as the reconciler needs it."""
    options = status.namespace_options
    return SandboxInfo(
        id=status.id,
        attempt=status.metadata.attempt if status.metadata is not None else 0,
        ready=status.state == cri.SandboxState.READY,
        ip=status.ip,
        additional_ips=tuple(status.additional_ips),
        created_at=status.created_at,
        network_mode=options.network if options is not None else cri.NamespaceMode.POD,
    )


def container_info(status: cri.ContainerStatus, *, sandbox_id: str = "") -> ContainerInfo:
    """One CRI container status; name and recovery state from its labels/annotations (metadata as fallback)."""
    annotations = labels.container_annotations_info(status.annotations)
    metadata_name = status.metadata.name if status.metadata is not None else ""
    return ContainerInfo(
        id=status.id,
        name=labels.container_name(status.labels) or metadata_name,
        state=_STATES.get(status.state, State.UNKNOWN),
        created_at=status.created_at,
        started_at=status.started_at,
        finished_at=status.finished_at,
        exit_code=status.exit_code,
        image=status.image,
        image_ref=status.image_ref,
        image_id=status.image_id,
        hash=annotations.hash,
        restart_count=annotations.restart_count,
        reason=status.reason,
        message=status.message,
        attempt=status.metadata.attempt if status.metadata is not None else 0,
        sandbox_id=sandbox_id,
        termination_message_path=annotations.termination_message_path,
        termination_message_policy=annotations.termination_message_policy,
        resources=status.resources,
    )


def group_by_pod(sandboxes: Iterable[cri.PodSandboxStatus],
                 containers: Iterable[cri.ContainerStatus],
                 *,
                 container_sandbox_ids: dict[str, str] | None = None) -> dict[str, RuntimePodStatus]:
    """A whole relist grouped by pod uid; objects without a pod uid label are not kopflet's and are skipped.

    `container_sandbox_ids` (container id -> sandbox id, from ListContainers) is optional: ContainerStatus
    does not carry the sandbox id.
    """
    sandbox_ids = container_sandbox_ids or {}
    pod_sandboxes: dict[str, list[SandboxInfo]] = {}
    pod_containers: dict[str, list[ContainerInfo]] = {}
    identities: dict[str, labels.PodIdentity] = {}

    for sandbox in sandboxes:
        identity = labels.pod_identity(sandbox.labels)
        metadata = sandbox.metadata
        uid = identity.uid or (metadata.uid if metadata is not None else "")
        if not uid:
            continue
        if metadata is not None and not (identity.name and identity.namespace):
            identity = labels.PodIdentity(uid=uid, name=identity.name or metadata.name,
                                          namespace=identity.namespace or metadata.namespace)
        identities.setdefault(uid, identity)
        pod_sandboxes.setdefault(uid, []).append(sandbox_info(sandbox))

    for container in containers:
        identity = labels.pod_identity(container.labels)
        if not identity.uid:
            continue
        identities.setdefault(identity.uid, identity)
        info = container_info(container, sandbox_id=sandbox_ids.get(container.id, ""))
        pod_containers.setdefault(identity.uid, []).append(info)

    result: dict[str, RuntimePodStatus] = {}
    for uid, identity in identities.items():
        result[uid] = RuntimePodStatus(
            uid=uid,
            name=identity.name,
            namespace=identity.namespace,
            # Newest first; ties broken by id so the order never depends on the runtime's listing order.
            sandboxes=tuple(sorted(pod_sandboxes.get(uid, ()), key=lambda s: (s.created_at, s.attempt, s.id),
                                   reverse=True)),
            containers=tuple(sorted(pod_containers.get(uid, ()), key=lambda c: (c.created_at, c.attempt, c.id),
                                    reverse=True)),
        )
    return result


def from_cri(sandboxes: Iterable[cri.PodSandboxStatus],
             containers: Iterable[cri.ContainerStatus],
             *,
             uid: str | None = None,
             container_sandbox_ids: dict[str, str] | None = None) -> RuntimePodStatus:
    """The runtime status of one pod (upstream `GetPodStatus`).

    With `uid`, objects of other pods are ignored and an empty status is returned when nothing matches;
    without it, the input must belong to at most one pod (ValueError otherwise).
    """
    pods = group_by_pod(sandboxes, containers, container_sandbox_ids=container_sandbox_ids)
    if uid is not None:
        return pods.get(uid, RuntimePodStatus(uid=uid))
    if len(pods) > 1:
        raise ValueError(f"from_cri got objects of {len(pods)} pods ({', '.join(sorted(pods))}); pass uid=")
    return next(iter(pods.values()), RuntimePodStatus(uid=""))


def exited_meanwhile(before: RuntimePodStatus, after: RuntimePodStatus, stopped: Collection[str] = ()) -> bool:
    """Whether a container exited between two views of a pod without being one of the `stopped` names.

    A worker's refresh right after its own sync records the pod's state, so the relist that follows sees
    no change; a container that exited on its own meanwhile (a quick init container, a crash right after
    start) must then make the worker look again itself, as upstream's PLEG would report ContainerDied.
    """
    was = {c.id: c.state for c in before.containers}
    return any(c.state is State.EXITED and was.get(c.id) is not State.EXITED and c.name not in stopped
               for c in after.containers)
