"""
The CRI `ContainerConfig` of one container instance: what CreateContainer gets.

Mirrors upstream `generateContainerConfig` (pkg/kubelet/kuberuntime/kuberuntime_container.go),
`generateLinuxContainerResources` / `calculateLinuxResources` (kuberuntime_container_linux.go),
`MilliCPUToShares` / `milliCPUToQuota` (cm/helpers_linux.go, kuberuntime/helpers_linux.go),
`ExpandContainerCommandAndArgs`, `determineEffectiveSecurityContext` (security_context.go) with its seccomp
(`getSeccompProfile` / `fieldSeccompProfile`) and AppArmor (`getAppArmorProfile`) profiles (helpers.go).

Pure: the environment (`container_env.resolve_env`), the pulled image reference, the mounts and the node's memory
capacity are passed in.

Mounts are the caller's: besides the volume mounts, upstream adds
- the termination-log file: an empty file ``<pod dir>/containers/<name>/<random id>`` (mode 0666) bind-mounted
  at `container.termination_message_path` (`termination_message_mount`); after exit the caller reads at
  most 4096 bytes of it back for the status (with FallbackToLogsOnError and a non-zero exit and an empty
  file, the last 80 lines / 2048 bytes of the log instead);
- ``/etc/hosts``: ``<pod dir>/etc-hosts`` (`managed_hosts_file` content) when the pod has IPs or uses the host
  network, unless the container mounts something at /etc/hosts itself (`should_mount_etc_hosts`).
resolv.conf is written by the runtime from the sandbox's DNS config.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cri_client import types as cri
from kopflet import gotext, paths
from kopflet.api import apparmor, qos, spec
from kopflet.cm import helpers
from kopflet.container import labels
from kopflet.envvars import container_env
from kopflet.kuberuntime import sandbox_config

ETC_HOSTS_PATH = "/etc/hosts"
MAX_TERMINATION_MESSAGE_LENGTH = 4096
"""Bytes of the termination-log file the kubelet reads back (kubecontainer.MaxContainerTerminationMessageLength)."""
DEFAULT_SECCOMP_PROFILE_ROOT = paths.Layout(paths.DEFAULT_ROOT_DIR).seccomp_dir
"""``<root-dir>/seccomp`` for the default root dir; the agent passes its own (`paths.Layout.seccomp_dir`)."""


class ContainerConfigError(ValueError):
    """No ContainerConfig can be made for the container (upstream generateContainerConfig's errors); the caller
    reports it as CreateContainerConfigError."""


# ------------------------------------------------------------------------------------------------ files


_LOG_FILE = re.compile(r"^(\d+)\.log(\..*)?")


def restart_count_from_log_names(names: Iterable[str]) -> int:
    """The restart count for a container with no instance left on the runtime: one past the highest
    ``<n>.log`` (rotated ``<n>.log.<suffix>`` too) in its log directory, 0 if none (upstream
    `calcRestartCountByLogDir`), so a new instance never writes over an earlier one's log (after
    RestartAllContainers removed them, or the runtime lost them)."""
    count = 0
    for name in names:
        match = _LOG_FILE.match(name)
        if match is not None:
            count = max(count, int(match.group(1)) + 1)
    return count


def termination_message_mount(container: spec.ContainerSpec, host_path: str) -> cri.Mount | None:
    """The bind mount of the termination-log file `host_path` (None when the container sets no path)."""
    if not container.termination_message_path:
        return None
    return cri.Mount(container_path=container.termination_message_path, host_path=host_path)


def should_mount_etc_hosts(pod: spec.Pod, container: spec.ContainerSpec, pod_ips: Sequence[str]) -> bool:
    """Upstream `shouldMountHostsFile` / `makeMounts`: with pod IPs or the host network, unless the
    container mounts /etc/hosts itself."""
    if not (pod_ips or pod.spec.host_network):
        return False
    return all(m.get("mountPath") != ETC_HOSTS_PATH for m in container.volume_mounts)


def etc_hosts_mount(host_path: str) -> cri.Mount:
    """The /etc/hosts bind mount (read-write, SELinux relabelled, as upstream `makeHostsMount`)."""
    return cri.Mount(container_path=ETC_HOSTS_PATH, host_path=host_path, selinux_relabel=True)


def managed_hosts_file(pod_ips: Sequence[str], hostname: str, domain: str,
                       host_aliases: Sequence[Mapping[str, Any]] = ()) -> str:
    """The kubelet-managed /etc/hosts of a pod on the pod network (upstream `managedHostsFileContent`)."""
    lines = ["# Kubernetes-managed hosts file.", "127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback",
             "fe00::0\tip6-localnet", "fe00::0\tip6-mcastprefix", "fe00::1\tip6-allnodes", "fe00::2\tip6-allrouters"]
    for ip in pod_ips:
        lines.append(f"{ip}\t{hostname}.{domain}\t{hostname}" if domain else f"{ip}\t{hostname}")
    return "\n".join(lines) + "\n" + _host_alias_entries(host_aliases)


def node_hosts_file(node_hosts: str, host_aliases: Sequence[Mapping[str, Any]] = ()) -> str:
    """/etc/hosts of a host-network pod: the node's file plus hostAliases (upstream `nodeHostsFileContent`)."""
    return "# Kubernetes-managed hosts file (host network).\n" + node_hosts + _host_alias_entries(host_aliases)


def _host_alias_entries(host_aliases: Sequence[Mapping[str, Any]]) -> str:
    if not host_aliases:
        return ""
    entries = [f"{alias.get('ip', '')}\t{chr(9).join(alias.get('hostnames') or ())}" for alias in host_aliases]
    return "\n# Entries added by HostAliases.\n" + "".join(f"{entry}\n" for entry in entries)


# -------------------------------------------------------------------------------------------- resources


def hugepage_page_sizes(dir_names: Iterable[str]) -> tuple[str, ...]:
    """The node's hugepage sizes as the CRI names them, from the entries of /sys/kernel/mm/hugepages
    (``hugepages-2048kB`` is ``2MB``, ``hugepages-1048576kB`` is ``1GB``), in the given order; other names are
    skipped (runc `cgroups.HugePageSizes`, which upstream lists in `GetHugepageLimitsFromResources`)."""
    sizes = []
    for name in dir_names:
        kilobytes = name.removeprefix(helpers.HUGEPAGES_PREFIX).removesuffix("kB")
        if not name.startswith(helpers.HUGEPAGES_PREFIX) or not name.endswith("kB") or not kilobytes.isdecimal():
            continue
        size = int(kilobytes)
        sizes.append(f"{size >> 20}GB" if size >= 1 << 20 else f"{size >> 10}MB" if size >= 1 << 10 else f"{size}KB")
    return tuple(sizes)


def hugepage_limits(pod: spec.Pod, container: spec.ContainerSpec,
                    page_sizes: Sequence[str]) -> tuple[cri.HugepageLimit, ...]:
    """One limit per page size of the node, 0 unless the container's (or else the pod-level) limits name it
    (upstream `GetHugepageLimitsFromResources`: hugepages are denied unless requested). Requests are not read:
    the apiserver requires hugepages limits, and sizes the node does not have are dropped. DRA allocations
    are not covered."""
    required: dict[str, int] = {}
    pod_resources = qos.pod_level_resources(pod) or {}
    pod_limits = pod_resources.get("limits")
    for limits in (pod_limits if isinstance(pod_limits, Mapping) else {}, container.resources.limits):
        for name, amount in limits.items():
            size = helpers.hugepage_unit_size(name)
            if size is not None:
                required[size] = qos.value(amount)
    return tuple(cri.HugepageLimit(page_size=size, limit=required.get(size, 0)) for size in page_sizes)


def linux_resources(pod: spec.Pod, container: spec.ContainerSpec, *, memory_capacity: int,
                    cpu_cfs_quota: bool = True, memory_oom_group: bool = False,
                    hugepage_sizes: Sequence[str] = (), cpuset_cpus: str = "",
                    cpuset_mems: str = "",
                    exclusive_cpus: helpers.ExclusiveCPUs = helpers.NO_EXCLUSIVE_CPUS,
                    swap: helpers.SwapController = helpers.SwapController.NONE) -> cri.LinuxContainerResources:
    """The container's cgroup settings (upstream `generateLinuxContainerResources`), at creation and for each
    in-place resize's UpdateContainerResources.

    cpu shares from the cpu request, or from the cpu limit when no request is set (what the apiserver
    would have defaulted), 2 when neither; CFS period 100ms and quota from the limit; memory limit;
    oom_score_adj by QoS class. `memory_oom_group` asks for ``memory.oom.group=1`` (upstream does so on
    cgroup v2 nodes unless singleProcessOOMKill). `hugepage_sizes` are the node's page sizes
    (`hugepage_page_sizes`), each given a limit (`hugepage_limits`). `swap` is the node's swap controller: the
    container gets no swap through it (`configure_no_swap`). `cpuset_cpus` is what
    the CPU manager gives the container (upstream PreCreateContainer: its exclusive CPUs or the shared pool under
    the static policy; "" leaves the runtime's default), `cpuset_mems` the NUMA nodes of the memory manager's
    blocks for it (the Static policy; "" leaves the runtime's default). `exclusive_cpus` are the pod's exclusive
    CPUs by container (`helpers.ExclusiveCPUs`): when this container has some, its quota is -1, unlimited, with the
    period still set (upstream DisableCPUQuotaWithExclusiveCPUs, locked on at 1.37; nothing without
    `cpu_cfs_quota`).
    """
    # Under pod-level resources a container without its own cpu/memory limit takes the pod's (upstream
    # getCPULimit/getMemoryLimit), and the pod-level memory request counts in its OOM score.
    effective = helpers.container_effective_limits(pod, container)
    quota = 0
    if cpu_cfs_quota:  # upstream calculateLinuxResources(..., disableCPUQuota)
        quota = -1 if helpers.container_has_exclusive_cpus(exclusive_cpus, container.name) else \
            helpers.milli_cpu_to_quota(effective.cpu_limit_milli)
    return configure_no_swap(cri.LinuxContainerResources(
        cpu_shares=helpers.milli_cpu_to_shares(effective.cpu_request_milli),
        cpu_period=helpers.QUOTA_PERIOD if cpu_cfs_quota else 0,
        cpu_quota=quota,
        memory_limit_in_bytes=effective.memory_limit,
        oom_score_adj=helpers.container_oom_score_adj(pod, container, memory_capacity),
        hugepage_limits=hugepage_limits(pod, container, hugepage_sizes),
        unified={"memory.oom.group": "1"} if memory_oom_group else {},
        cpuset_cpus=cpuset_cpus,
        cpuset_mems=cpuset_mems,
    ), swap)


def configure_no_swap(resources: cri.LinuxContainerResources,
                      swap: helpers.SwapController) -> cri.LinuxContainerResources:
    """Upstream configureContainerSwapResources for NoSwap, what every container gets with memorySwap.swapBehavior
    "" or NoSwap (the only behaviours kopflet takes; GetContainerSwapBehavior): without a swap controller nothing;
    on cgroup v1 (ConfigureNoSwap) the memory+swap limit equal to the memory limit, so no swap beyond it (0, no
    limit, stays 0: runc then leaves memsw alone); on cgroup v2 (configureSwap) memory.swap.max 0."""
    if swap is helpers.SwapController.V1:
        return dataclasses.replace(resources, memory_swap_limit_in_bytes=resources.memory_limit_in_bytes)
    if swap is helpers.SwapController.V2:
        return dataclasses.replace(resources, unified={**resources.unified, helpers.CGROUP2_MAX_SWAP: "0"})
    return resources


def calculate_linux_resources(cpu_request: qos.Quantity | None, cpu_limit: qos.Quantity | None,
                              memory_limit: qos.Quantity | None, *, cpu_cfs_quota: bool = True,
                              disable_cpu_quota: bool = False,
                              memory_oom_group: bool = False) -> cri.LinuxContainerResources:
    """cgroup settings from bare cpu and memory quantities, not from a container (upstream
    `calculateLinuxResources`, which the pod's overhead and the sandbox's resources go through): shares from the
    request, or from the limit when only that is given; a memory limit only when non-zero; period and quota with
    CFS quota on (-1 when `disable_cpu_quota`)."""
    shares_from = cpu_limit if cpu_request is None and cpu_limit is not None else cpu_request
    memory = qos.value(memory_limit) if memory_limit is not None else 0
    period = quota = 0
    if cpu_cfs_quota:
        period = helpers.QUOTA_PERIOD
        quota = -1 if disable_cpu_quota else helpers.milli_cpu_to_quota(qos.milli_cpu(cpu_limit), period)
    return cri.LinuxContainerResources(
        cpu_shares=helpers.milli_cpu_to_shares(qos.milli_cpu(shares_from)),
        cpu_period=period, cpu_quota=quota, memory_limit_in_bytes=memory,
        unified={"memory.oom.group": "1"} if memory_oom_group else {})


def sandbox_linux_resources(pod: spec.Pod, *, cpu_cfs_quota: bool = True,
                            exclusive_cpus: helpers.ExclusiveCPUs = helpers.NO_EXCLUSIVE_CPUS,
                            memory_oom_group: bool = False) -> cri.LinuxContainerResources:
    """The sandbox's ``LinuxPodSandboxConfig.resources`` at RunPodSandbox (upstream `calculateSandboxResources`):
    the pod's requests and limits without its overhead (sent apart: `resize.overhead_linux_resources`), pod-level
    resources replacing the containers' sums, through `calculate_linux_resources`; the cpu request only when one is
    set. With a container holding exclusive CPUs (`helpers.pod_has_exclusive_cpus`) the quota is -1 (upstream
    DisableCPUQuotaWithExclusiveCPUs)."""
    raw = {key: value for key, value in pod.spec.raw.items() if key != "overhead"}  # upstream's ExcludeOverhead
    bare = dataclasses.replace(pod, spec=dataclasses.replace(pod.spec, raw=raw))
    requests, limits = helpers.pod_requests(bare), helpers.pod_limits(bare)
    return calculate_linux_resources(requests.get(helpers.CPU), limits.get(helpers.CPU, 0),
                                     limits.get(helpers.MEMORY, 0), cpu_cfs_quota=cpu_cfs_quota,
                                     disable_cpu_quota=helpers.pod_has_exclusive_cpus(pod, exclusive_cpus),
                                     memory_oom_group=memory_oom_group)


# ------------------------------------------------------------------------------------------- security

# pkg/securitycontext/util.go `defaultMaskedPaths` (without the per-CPU thermal_throttle directories, which depend
# on the node: `thermal_throttle_paths`) and `defaultReadonlyPaths`, kept in sync with moby's defaults.
DEFAULT_MASKED_PATHS: tuple[str, ...] = (
    "/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
    "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
    "/sys/devices/virtual/powercap",
)
DEFAULT_READONLY_PATHS: tuple[str, ...] = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")
PROC_MOUNT_UNMASKED = "Unmasked"
MAX_USER_ID = 2**31 - 1
"""validation.IsValidUserID's upper bound (math.MaxInt32)."""


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def proc_mount_paths(proc_mount: Any, defaults: Sequence[str]) -> tuple[str, ...]:
    """The masked or read-only paths for a procMount (upstream `ConvertToRuntimeMaskedPaths` /
    `ConvertToRuntimeReadonlyPaths`): none for ``Unmasked``, else the defaults.

    Upstream sends them for privileged containers too (the runtime drops them there). That ``Unmasked`` needs
    ``hostUsers: false`` is validation's rule (the apiserver's, and the kubelet's own for static pods:
    `kopflet.config.static_pods`); a pod with ``hostUsers: false`` gets no sandbox on a runtime without user
    namespaces (`sandbox_config.user_namespace`), so an unmasked /proc never meets the host's user namespace.
    """
    return () if proc_mount == PROC_MOUNT_UNMASKED else tuple(defaults)


_RUNTIME_DEFAULT = cri.SecurityProfile(profile_type=cri.ProfileType.RUNTIME_DEFAULT)
_UNCONFINED = cri.SecurityProfile(profile_type=cri.ProfileType.UNCONFINED)


def _field_seccomp_profile(profile: Mapping[str, Any], profile_root: str) -> cri.SecurityProfile:
    """Upstream `fieldSeccompProfile` of a set ``seccompProfile``: a Localhost profile's ``localhostProfile`` is a
    path under the kubelet's seccomp directory (Go's ``filepath.Join``: joined, then cleaned)."""
    kind = profile.get("type")
    if kind == "RuntimeDefault":
        return _RUNTIME_DEFAULT
    if kind == "Localhost":
        name = profile.get("localhostProfile")
        if not isinstance(name, str) or not name:
            raise ContainerConfigError("localhostProfile must be set if seccompProfile type is Localhost.")
        return cri.SecurityProfile(profile_type=cri.ProfileType.LOCALHOST,
                                   localhost_ref=posixpath.normpath(f"{profile_root}/{name}"))
    return _UNCONFINED


def seccomp_profile(pod: spec.Pod, container: spec.ContainerSpec, *, profile_root: str = DEFAULT_SECCOMP_PROFILE_ROOT,
                    seccomp_default: bool = False) -> cri.SecurityProfile:
    """The container's seccomp profile (upstream `getSeccompProfile`): the container's ``seccompProfile``, else the
    pod's; with neither, RuntimeDefault under the kubelet's ``seccompDefault``, else Unconfined. `profile_root` is
    ``<root-dir>/seccomp`` (`paths.Layout.seccomp_dir`). ContainerConfigError for a Localhost profile without a
    name (the apiserver refuses those)."""
    for context in (container.security_context or {}, pod.spec.security_context):
        profile = context.get("seccompProfile")
        if isinstance(profile, Mapping):
            return _field_seccomp_profile(profile, profile_root)
    return _RUNTIME_DEFAULT if seccomp_default else _UNCONFINED


def apparmor_profile(pod: spec.Pod, container: spec.ContainerSpec) -> tuple[cri.SecurityProfile | None, str]:
    """The container's AppArmor profile for the CRI and its deprecated string form, which upstream still sends for
    older runtimes (upstream `getAppArmorProfile`); (None, "") when none is asked for. ContainerConfigError for a
    Localhost profile without a name, or an unknown type.

    Whether the host can enforce it is admission's question (`lifecycle.admission`: a pod asking for a profile on a
    host without AppArmor never gets this far)."""
    profile = apparmor.profile_for(pod, container)
    if profile is None:
        return None, ""
    kind = profile.get("type")
    if kind == apparmor.RUNTIME_DEFAULT:
        return _RUNTIME_DEFAULT, apparmor.BETA_RUNTIME_DEFAULT
    if kind == apparmor.UNCONFINED:
        return _UNCONFINED, apparmor.BETA_UNCONFINED
    if kind == apparmor.LOCALHOST:
        name = profile.get("localhostProfile")
        if not isinstance(name, str):
            raise ContainerConfigError("missing localhost apparmor profile name")
        return (cri.SecurityProfile(profile_type=cri.ProfileType.LOCALHOST, localhost_ref=name),
                apparmor.BETA_LOCALHOST_PREFIX + name)
    raise ContainerConfigError(f"unknown apparmor profile type: {gotext.go_quote(str(kind or ''))}")


def possible_cpus(text: str) -> list[int] | None:
    """The CPU numbers of /sys/devices/system/cpu/possible (``0-3,6``), None when it does not parse (upstream
    `possibleCPUsParsed`; the caller then counts the CPUs itself, as upstream falls back to runtime.NumCPU)."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        start, dash, end = part.partition("-")
        try:
            cpus.extend(range(int(start), int(end) + 1) if dash else (int(start),))
        except ValueError:
            return None
    return cpus


def thermal_throttle_paths(cpus: Iterable[int]) -> list[str]:
    """The per-CPU thermal_throttle directories upstream adds to the masked paths when they exist on the node
    (the caller checks that): ``/sys/devices/system/cpu/cpu<N>/thermal_throttle``."""
    return [f"/sys/devices/system/cpu/cpu{cpu}/thermal_throttle" for cpu in cpus]


def _effective(pod: spec.Pod, container: spec.ContainerSpec, field: str) -> Any:
    """A field both levels have, as upstream `DetermineEffectiveSecurityContext`: the container's, else the pod's."""
    value = (container.security_context or {}).get(field)
    return pod.spec.security_context.get(field) if value is None else value


def verify_run_as_non_root(pod: spec.Pod, container: spec.ContainerSpec, image_uid: int | None,
                           image_user: str) -> str | None:
    """Why the container must not start under runAsNonRoot, or None (upstream `verifyRunAsNonRoot`).

    `image_uid` / `image_user` are the image's user from ImageStatus (`cri.Image.uid` / `username`); with
    neither (or no image status) the image runs as root, as upstream `getImageUser` assumes. The caller reports
    the message as CreateContainerConfigError.
    """
    if _effective(pod, container, "runAsNonRoot") is not True:
        return None
    where = f"(pod: {gotext.go_quote(pod.full_name)}, container: {container.name})"
    run_as_user = _int_or_none(_effective(pod, container, "runAsUser"))
    if run_as_user is not None:
        return f"container's runAsUser breaks non-root policy {where}" if run_as_user == 0 else None
    if image_uid is None and image_user:
        return (f"container has runAsNonRoot and image has non-numeric user ({image_user}), "
                f"cannot verify user is non-root {where}")
    uid = 0 if image_uid is None else image_uid
    if uid == 0:
        return f"container has runAsNonRoot and image will run as root {where}"
    if not 0 <= uid <= MAX_USER_ID:  # validation.IsValidUserID
        return (f"container has runAsNonRoot and image has an invalid user id ({uid}). (Must be 1-({MAX_USER_ID})): "
                f"must be between 0 and {MAX_USER_ID}, inclusive {where}")
    return None


def container_security_context(pod: spec.Pod, container: spec.ContainerSpec, *,
                               masked_paths: Sequence[str] = DEFAULT_MASKED_PATHS,
                               seccomp_profile_root: str = DEFAULT_SECCOMP_PROFILE_ROOT,
                               seccomp_default: bool = False,
                               userns: cri.UserNamespace | None = None) -> cri.ContainerSecurityContext:
    """Upstream `determineEffectiveSecurityContext`: container settings over the pod's.

    Namespaces as the sandbox (PID per container unless shared; `userns` the sandbox's user namespace, the host's
    when not given); privileged; capabilities; runAsUser/Group; readOnlyRootFilesystem; no_new_privs when
    allowPrivilegeEscalation is false; fsGroup and supplementalGroups; SELinux; seccomp (`seccomp_profile`, with
    `seccomp_profile_root` and `seccomp_default`); AppArmor (`apparmor_profile`); masked and read-only /proc and
    /sys paths by procMount (`proc_mount_paths`; the node's defaults are `masked_paths`). Not covered: the image's
    user as runAsUser/runAsUsername; runAsNonRoot is checked apart (`verify_run_as_non_root`). Raises
    ContainerConfigError.
    """
    pod_context = pod.spec.security_context
    context = container.security_context or {}
    capabilities = context.get("capabilities")
    run_as_user = _int_or_none(context.get("runAsUser"))
    run_as_group = _int_or_none(context.get("runAsGroup"))
    seccomp = seccomp_profile(pod, container, profile_root=seccomp_profile_root, seccomp_default=seccomp_default)
    armor, armor_name = apparmor_profile(pod, container)
    try:
        namespaces = sandbox_config.namespace_options(pod, userns)
    except sandbox_config.SandboxConfigError as exc:  # hostUsers: false without the sandbox's user namespace
        raise ContainerConfigError(str(exc)) from None
    caps = None
    if isinstance(capabilities, Mapping):
        caps = cri.Capabilities(add=tuple(capabilities.get("add") or ()), drop=tuple(capabilities.get("drop") or ()))
    return cri.ContainerSecurityContext(
        capabilities=caps,
        privileged=context.get("privileged") is True,
        namespace_options=namespaces,
        selinux_options=sandbox_config.selinux_options(context) or sandbox_config.selinux_options(pod_context),
        run_as_user=run_as_user if run_as_user is not None else _int_or_none(pod_context.get("runAsUser")),
        run_as_group=run_as_group if run_as_group is not None else _int_or_none(pod_context.get("runAsGroup")),
        readonly_rootfs=context.get("readOnlyRootFilesystem") is True,
        supplemental_groups=sandbox_config.pod_supplemental_groups(pod),
        no_new_privs=context.get("allowPrivilegeEscalation") is False,
        masked_paths=proc_mount_paths(context.get("procMount"), masked_paths),
        readonly_paths=proc_mount_paths(context.get("procMount"), DEFAULT_READONLY_PATHS),
        seccomp=seccomp,
        apparmor=armor,
        apparmor_profile=armor_name,
    )


# ----------------------------------------------------------------------------------------------- config


def expand_command_and_args(container: spec.ContainerSpec,
                            env: Sequence[tuple[str, str]]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``$(VAR)`` expansion of command and args from the resolved env (upstream
    `ExpandContainerCommandAndArgs`); empty stays empty, meaning the image's entrypoint/cmd."""
    lookup = container_env.mapping_for(dict(env))
    return (tuple(container_env.expand(c, lookup) for c in container.command),
            tuple(container_env.expand(a, lookup) for a in container.args))


def target_pid_namespace(context: cri.ContainerSecurityContext, target_id: str) -> cri.ContainerSecurityContext:
    """An ephemeral container joins its target's PID namespace (upstream `generateLinuxContainerConfig`:
    NamespaceMode TARGET with the target's id) when it would otherwise get its own one; with a shared
    (shareProcessNamespace) or host PID namespace, or no target, it is left as it is."""
    options = context.namespace_options
    if not target_id or options is None or options.pid != cri.NamespaceMode.CONTAINER:
        return context
    return dataclasses.replace(context, namespace_options=dataclasses.replace(
        options, pid=cri.NamespaceMode.TARGET, target_id=target_id))


def build_container_config(pod: spec.Pod, container: spec.ContainerSpec, *,
                           restart_count: int,
                           env: Sequence[tuple[str, str]],
                           image_ref: str,
                           memory_capacity: int,
                           mounts: Sequence[cri.Mount] = (),
                           cpu_cfs_quota: bool = True,
                           memory_oom_group: bool = False,
                           pid_target_id: str = "",
                           masked_paths: Sequence[str] = DEFAULT_MASKED_PATHS,
                           hugepage_sizes: Sequence[str] = (),
                           seccomp_profile_root: str = DEFAULT_SECCOMP_PROFILE_ROOT,
                           seccomp_default: bool = False,
                           userns: cri.UserNamespace | None = None,
                           cpuset_cpus: str = "", cpuset_mems: str = "",
                           devices: Sequence[cri.Device] = (),
                           cdi_devices: Sequence[str] = (),
                           device_annotations: Mapping[str, str] = {},
                           exclusive_cpus: helpers.ExclusiveCPUs = helpers.NO_EXCLUSIVE_CPUS,
                           swap: helpers.SwapController = helpers.SwapController.NONE) -> cri.ContainerConfig:
    """The ContainerConfig for CreateContainer (upstream `generateContainerConfig`).

    `restart_count` is the new instance's (the previous instance's count + 1, 0 for the first): it becomes
    the metadata attempt, the restartCount annotation and the log file name. `image_ref` is the pulled
    image (ID or digest ref), the spec's image goes into user_specified_image. `pid_target_id` is, for an
    ephemeral container with a targetContainerName, the target's container id (`target_pid_namespace`).
    `masked_paths` are the node's default masked paths, `seccomp_profile_root` its ``<root-dir>/seccomp``,
    `seccomp_default` the kubelet's ``seccompDefault`` and `userns` the sandbox's user namespace
    (`container_security_context`); `hugepage_sizes` its hugepage sizes, `cpuset_cpus` the CPU manager's cpuset,
    `exclusive_cpus` the pod's exclusive CPUs (no CFS quota for a container holding some), `cpuset_mems` the
    memory manager's NUMA nodes for it and `swap` the node's swap controller (`linux_resources`). `devices`,
    `cdi_devices` and `device_annotations` come from the device plugins' Allocate answers (upstream makeDevices,
    makeCDIDevices; newContainerAnnotations lets the kubelet's own annotations override the plugins'); their envs
    and mounts are the caller's, before the container's own. runAsNonRoot is the caller's check first
    (`verify_run_as_non_root`). Raises ContainerConfigError.

    With a user namespace of its own (``hostUsers: false``: `userns` in mode POD), every mount carries its ID
    mappings, so the runtime makes it an idmapped mount (upstream applyPlatformSpecificContainerConfig sets the
    sandbox's UIDs and GIDs on each mount whenever the user namespace is set: none for the host's).
    """
    command, args = expand_command_and_args(container, env)
    if userns is not None:
        mounts = [dataclasses.replace(m, uid_mappings=userns.uids, gid_mappings=userns.gids) for m in mounts]
    return cri.ContainerConfig(
        metadata=cri.ContainerMetadata(name=container.name, attempt=restart_count),
        image=image_ref,
        user_specified_image=container.image,
        command=command,
        args=args,
        working_dir=container.working_dir,
        envs=dict(env),
        mounts=tuple(mounts),
        labels=labels.container_labels(pod, container),
        annotations={**device_annotations, **labels.container_annotations(pod, container, restart_count)},
        log_path=paths.Layout.relative_log_path(container.name, restart_count),
        stdin=container.stdin,
        stdin_once=container.stdin_once,
        tty=container.tty,
        linux=cri.LinuxContainerConfig(
            resources=linux_resources(pod, container, memory_capacity=memory_capacity, cpu_cfs_quota=cpu_cfs_quota,
                                      memory_oom_group=memory_oom_group, hugepage_sizes=hugepage_sizes,
                                      cpuset_cpus=cpuset_cpus, cpuset_mems=cpuset_mems,
                                      exclusive_cpus=exclusive_cpus, swap=swap),
            security_context=target_pid_namespace(
                container_security_context(pod, container, masked_paths=masked_paths,
                                           seccomp_profile_root=seccomp_profile_root,
                                           seccomp_default=seccomp_default, userns=userns), pid_target_id),
        ),
        devices=tuple(devices),
        cdi_devices=tuple(cdi_devices),
    )


__all__ = [
    "DEFAULT_SECCOMP_PROFILE_ROOT",
    "ContainerConfigError",
    "apparmor_profile",
    "build_container_config",
    "configure_no_swap",
    "container_security_context",
    "etc_hosts_mount",
    "expand_command_and_args",
    "hugepage_limits",
    "hugepage_page_sizes",
    "linux_resources",
    "managed_hosts_file",
    "node_hosts_file",
    "possible_cpus",
    "proc_mount_paths",
    "restart_count_from_log_names",
    "sandbox_linux_resources",
    "seccomp_profile",
    "should_mount_etc_hosts",
    "target_pid_namespace",
    "termination_message_mount",
    "thermal_throttle_paths",
    "verify_run_as_non_root",
]
