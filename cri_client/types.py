"""
Plain data for the CRI v1 API: what callers build and what the runtime reports.

Pure: no gRPC, no protobuf, no I/O. `cri_client.convert` is the only place that maps these to and from
the generated messages, so the rest of kopflet never sees protobuf and can build configs tersely:
every field that the CRI treats as optional has a default that means "not set" (the proto zero value,
or ``None`` for optional sub-messages and wrapped integers).

Conventions:
- Timestamps are nanoseconds since the epoch (ints), exactly as the CRI reports them; 0 means "never".
- Repeated fields are tuples (the converters produce tuples; callers may pass lists or tuples).
- Map fields are dicts (read them, do not mutate them: the dataclasses are frozen but dicts are not).
- Enum values equal the proto numbers, so conversion is ``Enum(pb_value)`` and back ``int(value)``.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping

# --------------------------------------------------------------------------------------------- enums


class SandboxState(enum.IntEnum):
    """`PodSandboxState`: a sandbox is ready (its network and infra container are up) or not."""

    READY = 0
    NOTREADY = 1


class ContainerState(enum.IntEnum):
    """`ContainerState`: the runtime's view of one container's lifecycle."""

    CREATED = 0
    RUNNING = 1
    EXITED = 2
    UNKNOWN = 3


class ContainerEventType(enum.IntEnum):
    """`ContainerEventType`: what happened to a container (or a sandbox's own container) in a runtime event."""

    CREATED = 0
    STARTED = 1
    STOPPED = 2
    DELETED = 3


@dataclasses.dataclass(frozen=True, kw_only=True)
class ContainerEvent:
    """One runtime event (CRI `ContainerEventResponse`, or containerd's own task and container events): which
    container, and what happened to it. The id may be a sandbox's: its infra container's events carry it."""

    container_id: str
    type: ContainerEventType
    created_at: int = 0
    """When the runtime saw it, in nanoseconds since the epoch (0: not said)."""


class Protocol(enum.IntEnum):
    """`Protocol` of a port mapping."""

    TCP = 0
    UDP = 1
    SCTP = 2


class MountPropagation(enum.IntEnum):
    """`MountPropagation` of a bind mount (private, rslave, rshared)."""

    PRIVATE = 0
    HOST_TO_CONTAINER = 1
    BIDIRECTIONAL = 2


class NamespaceMode(enum.IntEnum):
    """`NamespaceMode`: whose namespace a container or sandbox uses (the pod's, its own, the node's)."""

    POD = 0
    CONTAINER = 1
    NODE = 2
    TARGET = 3


class ProfileType(enum.IntEnum):
    """`SecurityProfile.ProfileType` for seccomp and AppArmor."""

    RUNTIME_DEFAULT = 0
    UNCONFINED = 1
    LOCALHOST = 2


# ------------------------------------------------------------------------------------------- runtime


@dataclasses.dataclass(frozen=True, kw_only=True)
class Version:
    """`VersionResponse`: who the runtime is and which CRI version it speaks (kopflet needs "v1")."""

    version: str = ""
    runtime_name: str = ""
    runtime_version: str = ""
    runtime_api_version: str = ""


# CRI `CgroupDriver` (the enum's values).
CGROUP_DRIVER_SYSTEMD = 0
CGROUP_DRIVER_CGROUPFS = 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class RuntimeConfig:
    """`RuntimeConfigResponse`: the runtime's global configuration (CRI v1, containerd 2.0 and later)."""

    linux_cgroup_driver: int | None = None
    """The `CgroupDriver` of its `linux` section (`CGROUP_DRIVER_SYSTEMD`, `CGROUP_DRIVER_CGROUPFS`); None when the
    runtime sent no `linux` section."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class RuntimeCondition:
    """One `RuntimeCondition`; the node's readiness derives from RuntimeReady and NetworkReady."""

    type: str
    status: bool = False
    reason: str = ""
    message: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class RuntimeHandler:
    """One `RuntimeHandler` (a runtime class) with the features it supports."""

    name: str = ""
    recursive_read_only_mounts: bool = False
    user_namespaces: bool = False


RUNTIME_READY = "RuntimeReady"
NETWORK_READY = "NetworkReady"


@dataclasses.dataclass(frozen=True, kw_only=True)
class RuntimeStatus:
    """`StatusResponse`: the runtime's conditions, optional verbose info, and its runtime handlers."""

    conditions: tuple[RuntimeCondition, ...] = ()
    handlers: tuple[RuntimeHandler, ...] = ()
    info: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def condition(self, type_: str) -> RuntimeCondition | None:
        """The condition of that type, or None when the runtime does not report it."""
        return next((c for c in self.conditions if c.type == type_), None)

    @property
    def runtime_ready(self) -> bool:
        """Whether the runtime can run containers; a missing condition counts as not ready."""
        cond = self.condition(RUNTIME_READY)
        return cond is not None and cond.status

    @property
    def network_ready(self) -> bool:
        """Whether pod networking (CNI) is ready; a missing condition counts as not ready."""
        cond = self.condition(NETWORK_READY)
        return cond is not None and cond.status


# ----------------------------------------------------------------------------------- shared sub-parts


@dataclasses.dataclass(frozen=True, kw_only=True)
class IDMapping:
    """`IDMapping`: `length` IDs from `container_id` in the user namespace map to `host_id` on the host."""

    host_id: int = 0
    container_id: int = 0
    length: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class UserNamespace:
    """`UserNamespace`: NODE (the host's user namespace) or POD (a new one with these UID and GID mappings)."""

    mode: NamespaceMode = NamespaceMode.POD
    uids: tuple[IDMapping, ...] = ()
    gids: tuple[IDMapping, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class NamespaceOptions:
    """`NamespaceOption`; defaults are the proto zero values (all POD), not kubelet's pod defaults.
    `userns_options` None leaves the user namespace unset (the runtime's default: the host's)."""

    network: NamespaceMode = NamespaceMode.POD
    pid: NamespaceMode = NamespaceMode.POD
    ipc: NamespaceMode = NamespaceMode.POD
    target_id: str = ""
    userns_options: UserNamespace | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class SecurityProfile:
    """`SecurityProfile` for seccomp or AppArmor; `localhost_ref` only with LOCALHOST."""

    profile_type: ProfileType = ProfileType.RUNTIME_DEFAULT
    localhost_ref: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class SELinuxOptions:
    """`SELinuxOption`: the label applied to the sandbox or container."""

    user: str = ""
    role: str = ""
    type: str = ""
    level: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class HugepageLimit:
    """`HugepageLimit`: the hugetlb cgroup limit in bytes of one page size, named as the kernel's ("2MB", "1GB")."""

    page_size: str
    limit: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class LinuxContainerResources:
    """`LinuxContainerResources` (cgroup knobs); zero means "not set" for every field.

    `hugepage_limits` lists every page size of the node, 0 for those the container does not request.
    """

    cpu_period: int = 0
    cpu_quota: int = 0
    cpu_shares: int = 0
    memory_limit_in_bytes: int = 0
    oom_score_adj: int = 0
    cpuset_cpus: str = ""
    cpuset_mems: str = ""
    hugepage_limits: tuple[HugepageLimit, ...] = ()
    unified: Mapping[str, str] = dataclasses.field(default_factory=dict)
    memory_swap_limit_in_bytes: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImageSpec:
    """`ImageSpec`: an image as the kubelet names it to the runtime. `image` is what the runtime resolves (the
    kubelet passes the image ref the pull returned), `user_specified_image` the pod's reference as written;
    `annotations` are the pod's (upstream passes them along) and `runtime_handler` the pod's RuntimeClass handler
    ("" unless RuntimeClassInImageCriAPI)."""

    image: str
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)
    user_specified_image: str = ""
    runtime_handler: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Mount:
    """`Mount`: a host path bind-mounted into a container; `uid_mappings`/`gid_mappings` (the proto's
    ``uidMappings``/``gidMappings``) make it an idmapped mount for a pod in its own user namespace.

    An image volume's mount names its `image` instead of a host path (``host_path`` empty, read-only, as the
    runtime demands), and `image_sub_path` the directory inside the image to mount in place of its root; the
    runtime mounts the image and reports the mount back with the host path it chose."""

    container_path: str
    host_path: str = ""
    readonly: bool = False
    selinux_relabel: bool = False
    propagation: MountPropagation = MountPropagation.PRIVATE
    recursive_read_only: bool = False
    uid_mappings: tuple[IDMapping, ...] = ()
    gid_mappings: tuple[IDMapping, ...] = ()
    image: ImageSpec | None = None
    image_sub_path: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Device:
    """`Device`: a host device node mapped into a container (a device plugin's Allocate answer)."""

    container_path: str
    host_path: str
    permissions: str = ""


# ------------------------------------------------------------------------------------------ sandboxes


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodSandboxMetadata:
    """`PodSandboxMetadata`: identifies the pod (and the attempt) a sandbox belongs to."""

    name: str
    namespace: str = ""
    uid: str = ""
    attempt: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class DNSConfig:
    """`DNSConfig`: what the runtime writes to the sandbox's resolv.conf."""

    servers: tuple[str, ...] = ()
    searches: tuple[str, ...] = ()
    options: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class PortMapping:
    """`PortMapping`: a hostPort published by the CNI portmap plugin."""

    container_port: int
    host_port: int = 0
    protocol: Protocol = Protocol.TCP
    host_ip: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class SandboxSecurityContext:
    """`LinuxSandboxSecurityContext` basics; `None` integers mean "not set" (Int64Value absent)."""

    namespace_options: NamespaceOptions | None = None
    selinux_options: SELinuxOptions | None = None
    run_as_user: int | None = None
    run_as_group: int | None = None
    readonly_rootfs: bool = False
    supplemental_groups: tuple[int, ...] = ()
    privileged: bool = False
    seccomp: SecurityProfile | None = None
    apparmor: SecurityProfile | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class LinuxSandboxConfig:
    """`LinuxPodSandboxConfig`: cgroup parent, security context and namespaced sysctls of a pod, and the pod's
    resources without its overhead and the overhead apart (for runtimes that size a sandbox or a VM by them)."""

    cgroup_parent: str = ""
    security_context: SandboxSecurityContext | None = None
    sysctls: Mapping[str, str] = dataclasses.field(default_factory=dict)
    overhead: LinuxContainerResources | None = None
    resources: LinuxContainerResources | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodSandboxConfig:
    """`PodSandboxConfig`: everything RunPodSandbox needs (and CreateContainer/PullImage repeat)."""

    metadata: PodSandboxMetadata
    hostname: str = ""
    log_directory: str = ""
    dns_config: DNSConfig | None = None
    port_mappings: tuple[PortMapping, ...] = ()
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)
    linux: LinuxSandboxConfig | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodSandbox:
    """`PodSandbox`: one item of ListPodSandbox (no network, no namespaces: use status for those)."""

    id: str
    metadata: PodSandboxMetadata | None = None
    state: SandboxState = SandboxState.READY
    created_at: int = 0
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)
    runtime_handler: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodSandboxStatus:
    """`PodSandboxStatus`: the sandbox's state, pod IPs and namespace modes."""

    id: str
    metadata: PodSandboxMetadata | None = None
    state: SandboxState = SandboxState.READY
    created_at: int = 0
    ip: str = ""
    additional_ips: tuple[str, ...] = ()
    namespace_options: NamespaceOptions | None = None
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)
    runtime_handler: str = ""

    @property
    def ips(self) -> tuple[str, ...]:
        """All pod IPs, primary first, as the pod's status.podIPs lists them (empty without a network)."""
        return ((self.ip,) if self.ip else ()) + self.additional_ips


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodSandboxFilter:
    """`PodSandboxFilter` for ListPodSandbox; empty fields do not filter."""

    id: str = ""
    state: SandboxState | None = None
    label_selector: Mapping[str, str] = dataclasses.field(default_factory=dict)


# ----------------------------------------------------------------------------------------- containers


@dataclasses.dataclass(frozen=True, kw_only=True)
class ContainerMetadata:
    """`ContainerMetadata`: the container's name in the pod and its restart attempt."""

    name: str
    attempt: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Capabilities:
    """`Capability`: capabilities to add to or drop from the runtime's default set."""

    add: tuple[str, ...] = ()
    drop: tuple[str, ...] = ()
    add_ambient: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class ContainerSecurityContext:
    """`LinuxContainerSecurityContext` basics; `None` integers mean "not set" (Int64Value absent)."""

    capabilities: Capabilities | None = None
    privileged: bool = False
    namespace_options: NamespaceOptions | None = None
    selinux_options: SELinuxOptions | None = None
    run_as_user: int | None = None
    run_as_group: int | None = None
    run_as_username: str = ""
    readonly_rootfs: bool = False
    supplemental_groups: tuple[int, ...] = ()
    no_new_privs: bool = False
    masked_paths: tuple[str, ...] = ()
    readonly_paths: tuple[str, ...] = ()
    seccomp: SecurityProfile | None = None
    apparmor: SecurityProfile | None = None
    apparmor_profile: str = ""
    """The deprecated string form of `apparmor` (``runtime/default``, ``unconfined``, ``localhost/<name>``),
    which upstream still sends for runtimes that only read it."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class LinuxContainerConfig:
    """`LinuxContainerConfig`: cgroup resources and security context of one container."""

    resources: LinuxContainerResources | None = None
    security_context: ContainerSecurityContext | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ContainerConfig:
    """`ContainerConfig` for CreateContainer.

    `image` is what the runtime resolves (kubelet passes the image ref returned by the pull);
    `user_specified_image` is the pod spec's image string, for the runtime's bookkeeping only.
    `envs` keeps insertion order. `log_path` is relative to the sandbox's `log_directory`.
    """

    metadata: ContainerMetadata
    image: str
    user_specified_image: str = ""
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    working_dir: str = ""
    envs: Mapping[str, str] = dataclasses.field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)
    log_path: str = ""
    stdin: bool = False
    stdin_once: bool = False
    tty: bool = False
    linux: LinuxContainerConfig | None = None
    devices: tuple[Device, ...] = ()
    cdi_devices: tuple[str, ...] = ()
    """Fully qualified CDI device names (``vendor.com/class=name``) the runtime resolves."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Container:
    """`Container`: one item of ListContainers (no exit code, no times but creation: see status).

    `user_specified_image` is the pod spec's image as the kubelet passed it at creation ("" from runtimes
    that predate the field); `image` is what the runtime resolved (the kubelet passes the image ref).
    """

    id: str
    pod_sandbox_id: str = ""
    metadata: ContainerMetadata | None = None
    image: str = ""
    user_specified_image: str = ""
    image_ref: str = ""
    image_id: str = ""
    state: ContainerState = ContainerState.CREATED
    created_at: int = 0
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ContainerStatus:
    """`ContainerStatus`: what kubelet turns into a pod's containerStatuses[] entry.

    `image` is the image spec the container was created with, `image_ref` the resolved reference
    (usually repo@digest) and `image_id` the image's ID (config digest), when the runtime reports them.
    """

    id: str
    metadata: ContainerMetadata | None = None
    state: ContainerState = ContainerState.CREATED
    created_at: int = 0
    started_at: int = 0
    finished_at: int = 0
    exit_code: int = 0
    image: str = ""
    image_ref: str = ""
    image_id: str = ""
    reason: str = ""
    message: str = ""
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    log_path: str = ""
    resources: LinuxContainerResources | None = None
    """The cgroup settings the runtime applied (after creation or the last UpdateContainerResources), when it
    reports them."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ContainerFilter:
    """`ContainerFilter` for ListContainers; empty fields do not filter."""

    id: str = ""
    state: ContainerState | None = None
    pod_sandbox_id: str = ""
    label_selector: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExecSyncResult:
    """`ExecSyncResponse`: the raw output of a command run to completion (exec probes use it)."""

    stdout: bytes = b""
    stderr: bytes = b""
    exit_code: int = 0


# --------------------------------------------------------------------------------------------- images


@dataclasses.dataclass(frozen=True, kw_only=True)
class AuthConfig:
    """`AuthConfig`: registry credentials for one pull; secrets are kept out of repr()."""

    username: str = ""
    password: str = dataclasses.field(default="", repr=False)
    auth: str = dataclasses.field(default="", repr=False)
    server_address: str = ""
    identity_token: str = dataclasses.field(default="", repr=False)
    registry_token: str = dataclasses.field(default="", repr=False)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Image:
    """`Image`: an image the runtime has, as ListImages and ImageStatus report it.

    `uid`/`username` are the image's configured user (a numeric uid or a name), for runAsNonRoot checks.
    """

    id: str
    repo_tags: tuple[str, ...] = ()
    repo_digests: tuple[str, ...] = ()
    size: int = 0
    uid: int | None = None
    username: str = ""
    pinned: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class FilesystemUsage:
    """`FilesystemUsage` of the image or container filesystem; `None` when the runtime leaves it unset."""

    mountpoint: str = ""
    timestamp: int = 0
    used_bytes: int | None = None
    inodes_used: int | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImageFsInfo:
    """`ImageFsInfoResponse`: usage of the filesystems holding images and container layers."""

    image_filesystems: tuple[FilesystemUsage, ...] = ()
    container_filesystems: tuple[FilesystemUsage, ...] = ()


# ---------------------------------------------------------------------------------------------- stats
#
# Resource usage as the runtime measures it (the summary API and /metrics/resource are built from it).
# Every `UInt64Value` is ``int | None``: None is "the runtime did not report it", which the summary API
# must keep apart from a measured zero. Timestamps are nanoseconds since the epoch, as everywhere here.


@dataclasses.dataclass(frozen=True, kw_only=True)
class CpuUsage:
    """`CpuUsage`: cumulative CPU time (core-nanoseconds) and, if the runtime computes it, the current rate."""

    timestamp: int = 0
    usage_core_nano_seconds: int | None = None
    usage_nano_cores: int | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class MemoryUsage:
    """`MemoryUsage`: working set (what eviction and metrics-server use), usage, RSS and page faults."""

    timestamp: int = 0
    working_set_bytes: int | None = None
    available_bytes: int | None = None
    usage_bytes: int | None = None
    rss_bytes: int | None = None
    page_faults: int | None = None
    major_page_faults: int | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class SwapUsage:
    """`SwapUsage` of a container (cgroup swap accounting)."""

    timestamp: int = 0
    swap_available_bytes: int | None = None
    swap_usage_bytes: int | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class NetworkInterfaceUsage:
    """`NetworkInterfaceUsage`: cumulative byte and error counters of one interface in the pod's netns."""

    name: str = ""
    rx_bytes: int | None = None
    rx_errors: int | None = None
    tx_bytes: int | None = None
    tx_errors: int | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class NetworkUsage:
    """`NetworkUsage` of a pod sandbox: its default interface (eth0) and the others."""

    timestamp: int = 0
    default_interface: NetworkInterfaceUsage | None = None
    interfaces: tuple[NetworkInterfaceUsage, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProcessUsage:
    """`ProcessUsage`: how many processes run in a pod sandbox."""

    timestamp: int = 0
    process_count: int | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ContainerStats:
    """`ContainerStats`, its `ContainerAttributes` flattened in (id, metadata, labels, annotations).

    The labels are the ones the container was created with, so the kubelet's io.kubernetes.* labels
    map the numbers to a pod and container without another call.
    """

    id: str
    metadata: ContainerMetadata | None = None
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)
    cpu: CpuUsage | None = None
    memory: MemoryUsage | None = None
    writable_layer: FilesystemUsage | None = None
    swap: SwapUsage | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class LinuxPodSandboxStats:
    """`LinuxPodSandboxStats`: the pod cgroup's CPU and memory, the netns traffic, and each container."""

    cpu: CpuUsage | None = None
    memory: MemoryUsage | None = None
    network: NetworkUsage | None = None
    process: ProcessUsage | None = None
    containers: tuple[ContainerStats, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodSandboxStats:
    """`PodSandboxStats`, its `PodSandboxAttributes` flattened in; only the Linux part is kept."""

    id: str
    metadata: PodSandboxMetadata | None = None
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)
    linux: LinuxPodSandboxStats | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ContainerStatsFilter:
    """`ContainerStatsFilter` for ListContainerStats; empty fields do not filter."""

    id: str = ""
    pod_sandbox_id: str = ""
    label_selector: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodSandboxStatsFilter:
    """`PodSandboxStatsFilter` for ListPodSandboxStats; empty fields do not filter."""

    id: str = ""
    label_selector: Mapping[str, str] = dataclasses.field(default_factory=dict)


__all__ = [
    "CGROUP_DRIVER_CGROUPFS",
    "CGROUP_DRIVER_SYSTEMD",
    "NETWORK_READY",
    "RUNTIME_READY",
    "AuthConfig",
    "Capabilities",
    "Container",
    "ContainerConfig",
    "ContainerEvent",
    "ContainerEventType",
    "ContainerFilter",
    "ContainerMetadata",
    "ContainerSecurityContext",
    "ContainerState",
    "ContainerStats",
    "ContainerStatsFilter",
    "ContainerStatus",
    "CpuUsage",
    "DNSConfig",
    "Device",
    "ExecSyncResult",
    "FilesystemUsage",
    "HugepageLimit",
    "IDMapping",
    "Image",
    "ImageFsInfo",
    "ImageSpec",
    "LinuxContainerConfig",
    "LinuxContainerResources",
    "LinuxPodSandboxStats",
    "LinuxSandboxConfig",
    "MemoryUsage",
    "Mount",
    "MountPropagation",
    "NamespaceMode",
    "NamespaceOptions",
    "NetworkInterfaceUsage",
    "NetworkUsage",
    "PodSandbox",
    "PodSandboxConfig",
    "PodSandboxFilter",
    "PodSandboxMetadata",
    "PodSandboxStats",
    "PodSandboxStatsFilter",
    "PodSandboxStatus",
    "PortMapping",
    "ProcessUsage",
    "ProfileType",
    "Protocol",
    "RuntimeCondition",
    "RuntimeConfig",
    "RuntimeHandler",
    "RuntimeStatus",
    "SELinuxOptions",
    "SandboxSecurityContext",
    "SecurityProfile",
    "SwapUsage",
    "UserNamespace",
    "Version",
]
