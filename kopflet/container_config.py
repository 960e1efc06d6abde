"""
The CRI `ContainerConfig` of one container instance: what CreateContainer gets.

Mirrors upstream `generateContainerConfig` (pkg/kubelet/kuberuntime/kuberuntime_container.go),
`generateLinuxContainerResources` / `calculateLinuxResources` (kuberuntime_container_linux.go),
`MilliCPUToShares` / `milliCPUToQuota` (cm/helpers_linux.go, kuberuntime/helpers_linux.go),
`ExpandContainerCommandAndArgs`, `buildContainerLogsPath`, and the basics of
`determineEffectiveSecurityContext` (security_context.go).

Pure: the environment (`envvars.resolve_env`), the pulled image reference, the mounts and the node's memory
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

import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from cri_client import types as cri
from kopflet import envvars, labels, qos, sandbox_config, spec

# cm/helpers_linux.go and kuberuntime/helpers_linux.go
MIN_SHARES = 2
MAX_SHARES = 262144
SHARES_PER_CPU = 1024
MILLI_CPU_TO_CPU = 1000
QUOTA_PERIOD = 100000  # 100ms in microseconds
MIN_QUOTA_PERIOD = 1000

ETC_HOSTS_PATH = "/etc/hosts"
MAX_TERMINATION_MESSAGE_LENGTH = 4096
"""Bytes of the termination-log file the kubelet reads back (kubecontainer.MaxContainerTerminationMessageLength)."""


# ------------------------------------------------------------------------------------------------ paths


def pod_log_dir(pod: spec.Pod, root: str = sandbox_config.DEFAULT_POD_LOG_ROOT) -> str:
    """``/var/log/pods/<namespace>_<name>_<uid>``, the sandbox's log directory."""
    return sandbox_config.pod_log_dir(pod, root)


def container_log_dir(pod_log_dir: str, name: str) -> str:
    """``<pod log dir>/<container>``: the executor creates it (mode 0755) before CreateContainer."""
    return posixpath.join(pod_log_dir, name)


def relative_log_path(name: str, restart_count: int) -> str:
    """``<container>/<restartCount>.log``, the config's log_path (relative to the sandbox's log directory)."""
    return posixpath.join(name, f"{restart_count}.log")


def container_log_path(pod_log_dir: str, name: str, restart_count: int) -> str:
    """The absolute log file path of one container instance (upstream `BuildContainerLogsDirectory` + name)."""
    return posixpath.join(pod_log_dir, relative_log_path(name, restart_count))


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


def milli_cpu_to_shares(milli_cpu: int) -> int:
    """cpu.shares for a milliCPU request (upstream `MilliCPUToShares`): * 1024 / 1000 within [2, 262144]."""
    if milli_cpu == 0:
        return MIN_SHARES
    return max(MIN_SHARES, min(MAX_SHARES, milli_cpu * SHARES_PER_CPU // MILLI_CPU_TO_CPU))


def milli_cpu_to_quota(milli_cpu: int, period: int = QUOTA_PERIOD) -> int:
    """CFS quota for a milliCPU limit (upstream `milliCPUToQuota`): 0 (unlimited) without a limit, else at
    least 1000µs."""
    if milli_cpu == 0:
        return 0
    return max(MIN_QUOTA_PERIOD, milli_cpu * period // MILLI_CPU_TO_CPU)


def linux_resources(pod: spec.Pod, container: spec.ContainerSpec, *, memory_capacity: int,
                    cpu_cfs_quota: bool = True, memory_oom_group: bool = False) -> cri.LinuxContainerResources:
    """The container's cgroup settings (upstream `generateLinuxContainerResources`).

    cpu shares from the cpu request, or from the cpu limit when no request is set (what the apiserver
    would have defaulted), 2 when neither; CFS period 100ms and quota from the limit; memory limit;
    oom_score_adj by QoS class. `memory_oom_group` asks for ``memory.oom.group=1`` (upstream does so on
    cgroup v2 nodes unless singleProcessOOMKill). Hugepages and swap are not configured.
    """
    requests, limits = container.resources.requests, container.resources.limits
    if "cpu" in requests:
        shares = milli_cpu_to_shares(qos.milli_cpu(requests["cpu"]))
    else:
        shares = milli_cpu_to_shares(qos.milli_cpu(limits.get("cpu")))
    return cri.LinuxContainerResources(
        cpu_shares=shares,
        cpu_period=QUOTA_PERIOD if cpu_cfs_quota else 0,
        cpu_quota=milli_cpu_to_quota(qos.milli_cpu(limits.get("cpu"))) if cpu_cfs_quota else 0,
        memory_limit_in_bytes=qos.byte_value(limits.get("memory")),
        oom_score_adj=qos.oom_score_adj(pod, container, memory_capacity),
        unified={"memory.oom.group": "1"} if memory_oom_group else {},
    )


# ------------------------------------------------------------------------------------------- security


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _seccomp(context: Mapping[str, Any]) -> cri.SecurityProfile | None:
    profile = context.get("seccompProfile")
    if not isinstance(profile, Mapping):
        return None
    kind = profile.get("type")
    if kind == "RuntimeDefault":
        return cri.SecurityProfile(profile_type=cri.ProfileType.RUNTIME_DEFAULT)
    if kind == "Localhost":
        return cri.SecurityProfile(profile_type=cri.ProfileType.LOCALHOST,
                                   localhost_ref=str(profile.get("localhostProfile") or ""))
    return cri.SecurityProfile(profile_type=cri.ProfileType.UNCONFINED)


def container_security_context(pod: spec.Pod, container: spec.ContainerSpec) -> cri.ContainerSecurityContext:
    """The basics of upstream `determineEffectiveSecurityContext`: container settings over the pod's.

    Namespaces as the sandbox (PID per container unless shared); privileged; capabilities; runAsUser/Group;
    readOnlyRootFilesystem; no_new_privs when allowPrivilegeEscalation is false; fsGroup and
    supplementalGroups; SELinux; seccomp (Unconfined unless a profile is set: the kubelet's default without
    ``seccompDefault``). Not covered: runAsNonRoot verification (needs the image user), procMount,
    AppArmor, the runtime's masked/read-only paths (left to the runtime's defaults).
    """
    pod_context = pod.spec.security_context
    context = container.security_context or {}
    capabilities = context.get("capabilities")
    run_as_user = _int_or_none(context.get("runAsUser"))
    run_as_group = _int_or_none(context.get("runAsGroup"))
    seccomp = _seccomp(context) or _seccomp(pod_context) or cri.SecurityProfile(profile_type=cri.ProfileType.UNCONFINED)
    caps = None
    if isinstance(capabilities, Mapping):
        caps = cri.Capabilities(add=tuple(capabilities.get("add") or ()), drop=tuple(capabilities.get("drop") or ()))
    return cri.ContainerSecurityContext(
        capabilities=caps,
        privileged=context.get("privileged") is True,
        namespace_options=sandbox_config.namespace_options(pod),
        selinux_options=sandbox_config.selinux_options(context) or sandbox_config.selinux_options(pod_context),
        run_as_user=run_as_user if run_as_user is not None else _int_or_none(pod_context.get("runAsUser")),
        run_as_group=run_as_group if run_as_group is not None else _int_or_none(pod_context.get("runAsGroup")),
        readonly_rootfs=context.get("readOnlyRootFilesystem") is True,
        supplemental_groups=sandbox_config.pod_supplemental_groups(pod),
        no_new_privs=context.get("allowPrivilegeEscalation") is False,
        seccomp=seccomp,
    )


# ----------------------------------------------------------------------------------------------- config


def expand_command_and_args(container: spec.ContainerSpec,
                            env: Sequence[tuple[str, str]]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``$(VAR)`` expansion of command and args from the resolved env (upstream
    `ExpandContainerCommandAndArgs`); empty stays empty, meaning the image's entrypoint/cmd."""
    lookup = envvars.mapping_for(dict(env))
    return (tuple(envvars.expand(c, lookup) for c in container.command),
            tuple(envvars.expand(a, lookup) for a in container.args))


def build_container_config(pod: spec.Pod, container: spec.ContainerSpec, *,
                           restart_count: int,
                           env: Sequence[tuple[str, str]],
                           image_ref: str,
                           memory_capacity: int,
                           mounts: Sequence[cri.Mount] = (),
                           cpu_cfs_quota: bool = True,
                           memory_oom_group: bool = False) -> cri.ContainerConfig:
    """The ContainerConfig for CreateContainer (upstream `generateContainerConfig`).

    `restart_count` is the new instance's (the previous instance's count + 1, 0 for the first): it becomes
    the metadata attempt, the restartCount annotation and the log file name. `image_ref` is the pulled
    image (ID or digest ref), the spec's image goes into user_specified_image.
    """
    command, args = expand_command_and_args(container, env)
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
        annotations=labels.container_annotations(pod, container, restart_count),
        log_path=relative_log_path(container.name, restart_count),
        stdin=container.stdin,
        stdin_once=container.stdin_once,
        tty=container.tty,
        linux=cri.LinuxContainerConfig(
            resources=linux_resources(pod, container, memory_capacity=memory_capacity, cpu_cfs_quota=cpu_cfs_quota,
                                      memory_oom_group=memory_oom_group),
            security_context=container_security_context(pod, container),
        ),
    )


__all__ = [
    "build_container_config",
    "container_log_dir",
    "container_log_path",
    "container_security_context",
    "etc_hosts_mount",
    "expand_command_and_args",
    "linux_resources",
    "managed_hosts_file",
    "milli_cpu_to_quota",
    "milli_cpu_to_shares",
    "node_hosts_file",
    "pod_log_dir",
    "relative_log_path",
    "should_mount_etc_hosts",
    "termination_message_mount",
]
