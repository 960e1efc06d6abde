"""
Translation between `cri_client.types` and the generated CRI v1 protobuf messages.

The only module that knows both sides. Pure functions, no I/O: `client.py` builds requests with the
`*_to_pb` functions and unpacks responses with the `*_from_pb` ones. Every type converts both ways, so
round trips are testable without a runtime and a fake runtime could reuse them.

Optional sub-messages map to ``None`` when unset (checked with HasField), and wrapped integers
(`Int64Value`, `UInt64Value`) map to ``int | None``, so "not set" survives a round trip. Unknown enum
numbers from a newer runtime do not crash a status read: they fall back to a safe member.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from google.protobuf.message import Message

from cri_client import types
from cri_client.proto import api_pb2 as pb
from cri_client.proto import events_pb2 as events_pb

_E = TypeVar("_E", bound=enum.IntEnum)
_T = TypeVar("_T")
_M = TypeVar("_M", bound=Message)


def _enum(cls: type[_E], value: int, fallback: _E) -> _E:
    """Map a proto enum number to our enum, tolerating numbers added by newer CRI versions."""
    try:
        return cls(value)
    except ValueError:
        return fallback


def _map(value: Mapping[str, str]) -> dict[str, str]:
    return dict(value)


def _tuple(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _put(m: Message, field: str, value: _T | None, to_pb: Callable[[_T], Message]) -> None:
    """An optional sub-message: set from `value` when it is known, left unset (HasField false) for None."""
    if value is not None:
        getattr(m, field).CopyFrom(to_pb(value))


def _get(m: Message, field: str, from_pb: Callable[[Any], _T]) -> _T | None:
    """An optional sub-message: None when it is unset."""
    return from_pb(getattr(m, field)) if m.HasField(field) else None


def _put_wrapped(m: Message, field: str, value: int | None) -> None:
    """A wrapped integer (`Int64Value`, `UInt64Value`): set when known, left unset for None."""
    if value is not None:
        getattr(m, field).value = value


def _wrapped(m: Message, field: str) -> int | None:
    """A wrapped integer: None when unset, else its value (zero included)."""
    return getattr(m, field).value if m.HasField(field) else None


# ------------------------------------------------------------------------------------------- runtime


def version_to_pb(v: types.Version) -> pb.VersionResponse:
    return pb.VersionResponse(
        version=v.version,
        runtime_name=v.runtime_name,
        runtime_version=v.runtime_version,
        runtime_api_version=v.runtime_api_version,
    )


def version_from_pb(m: pb.VersionResponse) -> types.Version:
    return types.Version(
        version=m.version,
        runtime_name=m.runtime_name,
        runtime_version=m.runtime_version,
        runtime_api_version=m.runtime_api_version,
    )


def runtime_config_to_pb(c: types.RuntimeConfig) -> pb.RuntimeConfigResponse:
    if c.linux_cgroup_driver is None:
        return pb.RuntimeConfigResponse()
    return pb.RuntimeConfigResponse(linux=pb.LinuxRuntimeConfiguration(cgroup_driver=c.linux_cgroup_driver))


def runtime_config_from_pb(m: pb.RuntimeConfigResponse) -> types.RuntimeConfig:
    return types.RuntimeConfig(linux_cgroup_driver=int(m.linux.cgroup_driver) if m.HasField("linux") else None)


def runtime_status_to_pb(s: types.RuntimeStatus) -> pb.StatusResponse:
    return pb.StatusResponse(
        status=pb.RuntimeStatus(
            conditions=[
                pb.RuntimeCondition(type=c.type, status=c.status, reason=c.reason, message=c.message)
                for c in s.conditions
            ]
        ),
        info=_map(s.info),
        runtime_handlers=[
            pb.RuntimeHandler(
                name=h.name,
                features=pb.RuntimeHandlerFeatures(
                    recursive_read_only_mounts=h.recursive_read_only_mounts,
                    user_namespaces=h.user_namespaces,
                ),
            )
            for h in s.handlers
        ],
    )


def runtime_status_from_pb(m: pb.StatusResponse) -> types.RuntimeStatus:
    return types.RuntimeStatus(
        conditions=tuple(
            types.RuntimeCondition(type=c.type, status=c.status, reason=c.reason, message=c.message)
            for c in m.status.conditions
        ),
        handlers=tuple(
            types.RuntimeHandler(
                name=h.name,
                recursive_read_only_mounts=h.features.recursive_read_only_mounts,
                user_namespaces=h.features.user_namespaces,
            )
            for h in m.runtime_handlers
        ),
        info=_map(m.info),
    )


# ----------------------------------------------------------------------------------- shared sub-parts


def _id_mappings_to_pb(mappings: tuple[types.IDMapping, ...]) -> list[pb.IDMapping]:
    return [pb.IDMapping(host_id=i.host_id, container_id=i.container_id, length=i.length) for i in mappings]


def _id_mappings_from_pb(mappings: Iterable[pb.IDMapping]) -> tuple[types.IDMapping, ...]:
    return tuple(types.IDMapping(host_id=i.host_id, container_id=i.container_id, length=i.length) for i in mappings)


def user_namespace_to_pb(u: types.UserNamespace) -> pb.UserNamespace:
    return pb.UserNamespace(mode=int(u.mode), uids=_id_mappings_to_pb(u.uids), gids=_id_mappings_to_pb(u.gids))


def user_namespace_from_pb(m: pb.UserNamespace) -> types.UserNamespace:
    return types.UserNamespace(mode=_enum(types.NamespaceMode, m.mode, types.NamespaceMode.POD),
                               uids=_id_mappings_from_pb(m.uids), gids=_id_mappings_from_pb(m.gids))


def namespace_options_to_pb(o: types.NamespaceOptions) -> pb.NamespaceOption:
    m = pb.NamespaceOption(
        network=int(o.network),
        pid=int(o.pid),
        ipc=int(o.ipc),
        target_id=o.target_id,
    )
    _put(m, "userns_options", o.userns_options, user_namespace_to_pb)
    return m


def namespace_options_from_pb(m: pb.NamespaceOption) -> types.NamespaceOptions:
    mode = types.NamespaceMode
    return types.NamespaceOptions(
        network=_enum(mode, m.network, mode.POD),
        pid=_enum(mode, m.pid, mode.POD),
        ipc=_enum(mode, m.ipc, mode.POD),
        target_id=m.target_id,
        userns_options=_get(m, "userns_options", user_namespace_from_pb),
    )


def security_profile_to_pb(p: types.SecurityProfile) -> pb.SecurityProfile:
    return pb.SecurityProfile(profile_type=int(p.profile_type), localhost_ref=p.localhost_ref)


def security_profile_from_pb(m: pb.SecurityProfile) -> types.SecurityProfile:
    return types.SecurityProfile(
        profile_type=_enum(types.ProfileType, m.profile_type, types.ProfileType.RUNTIME_DEFAULT),
        localhost_ref=m.localhost_ref,
    )


def selinux_options_to_pb(o: types.SELinuxOptions) -> pb.SELinuxOption:
    return pb.SELinuxOption(user=o.user, role=o.role, type=o.type, level=o.level)


def selinux_options_from_pb(m: pb.SELinuxOption) -> types.SELinuxOptions:
    return types.SELinuxOptions(user=m.user, role=m.role, type=m.type, level=m.level)


def linux_resources_to_pb(r: types.LinuxContainerResources) -> pb.LinuxContainerResources:
    return pb.LinuxContainerResources(
        cpu_period=r.cpu_period,
        cpu_quota=r.cpu_quota,
        cpu_shares=r.cpu_shares,
        memory_limit_in_bytes=r.memory_limit_in_bytes,
        oom_score_adj=r.oom_score_adj,
        cpuset_cpus=r.cpuset_cpus,
        cpuset_mems=r.cpuset_mems,
        hugepage_limits=[pb.HugepageLimit(page_size=h.page_size, limit=h.limit) for h in r.hugepage_limits],
        unified=_map(r.unified),
        memory_swap_limit_in_bytes=r.memory_swap_limit_in_bytes,
    )


def linux_resources_from_pb(m: pb.LinuxContainerResources) -> types.LinuxContainerResources:
    return types.LinuxContainerResources(
        cpu_period=m.cpu_period,
        cpu_quota=m.cpu_quota,
        cpu_shares=m.cpu_shares,
        memory_limit_in_bytes=m.memory_limit_in_bytes,
        oom_score_adj=m.oom_score_adj,
        cpuset_cpus=m.cpuset_cpus,
        cpuset_mems=m.cpuset_mems,
        hugepage_limits=tuple(types.HugepageLimit(page_size=h.page_size, limit=h.limit) for h in m.hugepage_limits),
        unified=_map(m.unified),
        memory_swap_limit_in_bytes=m.memory_swap_limit_in_bytes,
    )


def image_spec_to_pb(s: types.ImageSpec) -> pb.ImageSpec:
    return pb.ImageSpec(image=s.image, annotations=_map(s.annotations), user_specified_image=s.user_specified_image,
                        runtime_handler=s.runtime_handler)


def image_spec_from_pb(m: pb.ImageSpec) -> types.ImageSpec:
    return types.ImageSpec(image=m.image, annotations=_map(m.annotations), user_specified_image=m.user_specified_image,
                           runtime_handler=m.runtime_handler)


def mount_to_pb(m: types.Mount) -> pb.Mount:
    message = pb.Mount(
        container_path=m.container_path,
        host_path=m.host_path,
        readonly=m.readonly,
        selinux_relabel=m.selinux_relabel,
        propagation=int(m.propagation),
        recursive_read_only=m.recursive_read_only,
        uidMappings=_id_mappings_to_pb(m.uid_mappings),
        gidMappings=_id_mappings_to_pb(m.gid_mappings),
        image_sub_path=m.image_sub_path,
    )
    _put(message, "image", m.image, image_spec_to_pb)
    return message


def mount_from_pb(m: pb.Mount) -> types.Mount:
    return types.Mount(
        container_path=m.container_path,
        host_path=m.host_path,
        readonly=m.readonly,
        selinux_relabel=m.selinux_relabel,
        propagation=_enum(types.MountPropagation, m.propagation, types.MountPropagation.PRIVATE),
        recursive_read_only=m.recursive_read_only,
        uid_mappings=_id_mappings_from_pb(m.uidMappings),
        gid_mappings=_id_mappings_from_pb(m.gidMappings),
        image=_get(m, "image", image_spec_from_pb),
        image_sub_path=m.image_sub_path,
    )


# ------------------------------------------------------------------------------------------ sandboxes


def sandbox_metadata_to_pb(md: types.PodSandboxMetadata) -> pb.PodSandboxMetadata:
    return pb.PodSandboxMetadata(name=md.name, namespace=md.namespace, uid=md.uid, attempt=md.attempt)


def sandbox_metadata_from_pb(m: pb.PodSandboxMetadata) -> types.PodSandboxMetadata:
    return types.PodSandboxMetadata(name=m.name, namespace=m.namespace, uid=m.uid, attempt=m.attempt)


def _put_linux_security(m: pb.LinuxSandboxSecurityContext | pb.LinuxContainerSecurityContext,
                        sc: types.SandboxSecurityContext | types.ContainerSecurityContext) -> None:
    """The fields the sandbox's and a container's Linux security contexts share (same names on both sides)."""
    m.readonly_rootfs = sc.readonly_rootfs
    m.supplemental_groups.extend(sc.supplemental_groups)
    m.privileged = sc.privileged
    _put(m, "namespace_options", sc.namespace_options, namespace_options_to_pb)
    _put(m, "selinux_options", sc.selinux_options, selinux_options_to_pb)
    _put_wrapped(m, "run_as_user", sc.run_as_user)
    _put_wrapped(m, "run_as_group", sc.run_as_group)
    _put(m, "seccomp", sc.seccomp, security_profile_to_pb)
    _put(m, "apparmor", sc.apparmor, security_profile_to_pb)


def _linux_security_from_pb(m: pb.LinuxSandboxSecurityContext | pb.LinuxContainerSecurityContext) -> dict[str, Any]:
    """The shared fields, as keyword arguments of either security context type."""
    return {
        "namespace_options": _get(m, "namespace_options", namespace_options_from_pb),
        "selinux_options": _get(m, "selinux_options", selinux_options_from_pb),
        "run_as_user": _wrapped(m, "run_as_user"),
        "run_as_group": _wrapped(m, "run_as_group"),
        "readonly_rootfs": m.readonly_rootfs,
        "supplemental_groups": tuple(m.supplemental_groups),
        "privileged": m.privileged,
        "seccomp": _get(m, "seccomp", security_profile_from_pb),
        "apparmor": _get(m, "apparmor", security_profile_from_pb),
    }


def sandbox_security_context_to_pb(sc: types.SandboxSecurityContext) -> pb.LinuxSandboxSecurityContext:
    m = pb.LinuxSandboxSecurityContext()
    _put_linux_security(m, sc)
    return m


def sandbox_security_context_from_pb(m: pb.LinuxSandboxSecurityContext) -> types.SandboxSecurityContext:
    return types.SandboxSecurityContext(**_linux_security_from_pb(m))


def linux_sandbox_config_to_pb(lc: types.LinuxSandboxConfig) -> pb.LinuxPodSandboxConfig:
    m = pb.LinuxPodSandboxConfig(cgroup_parent=lc.cgroup_parent, sysctls=_map(lc.sysctls))
    _put(m, "security_context", lc.security_context, sandbox_security_context_to_pb)
    _put(m, "overhead", lc.overhead, linux_resources_to_pb)
    _put(m, "resources", lc.resources, linux_resources_to_pb)
    return m


def linux_sandbox_config_from_pb(m: pb.LinuxPodSandboxConfig) -> types.LinuxSandboxConfig:
    return types.LinuxSandboxConfig(
        cgroup_parent=m.cgroup_parent,
        security_context=_get(m, "security_context", sandbox_security_context_from_pb),
        sysctls=_map(m.sysctls),
        overhead=_get(m, "overhead", linux_resources_from_pb),
        resources=_get(m, "resources", linux_resources_from_pb),
    )


def dns_config_to_pb(d: types.DNSConfig) -> pb.DNSConfig:
    return pb.DNSConfig(servers=list(d.servers), searches=list(d.searches), options=list(d.options))


def dns_config_from_pb(m: pb.DNSConfig) -> types.DNSConfig:
    return types.DNSConfig(servers=_tuple(m.servers), searches=_tuple(m.searches), options=_tuple(m.options))


def port_mapping_to_pb(p: types.PortMapping) -> pb.PortMapping:
    return pb.PortMapping(
        protocol=int(p.protocol),
        container_port=p.container_port,
        host_port=p.host_port,
        host_ip=p.host_ip,
    )


def port_mapping_from_pb(m: pb.PortMapping) -> types.PortMapping:
    return types.PortMapping(
        container_port=m.container_port,
        host_port=m.host_port,
        protocol=_enum(types.Protocol, m.protocol, types.Protocol.TCP),
        host_ip=m.host_ip,
    )


def sandbox_config_to_pb(c: types.PodSandboxConfig) -> pb.PodSandboxConfig:
    m = pb.PodSandboxConfig(
        metadata=sandbox_metadata_to_pb(c.metadata),
        hostname=c.hostname,
        log_directory=c.log_directory,
        port_mappings=[port_mapping_to_pb(p) for p in c.port_mappings],
        labels=_map(c.labels),
        annotations=_map(c.annotations),
    )
    _put(m, "dns_config", c.dns_config, dns_config_to_pb)
    _put(m, "linux", c.linux, linux_sandbox_config_to_pb)
    return m


def sandbox_config_from_pb(m: pb.PodSandboxConfig) -> types.PodSandboxConfig:
    return types.PodSandboxConfig(
        metadata=sandbox_metadata_from_pb(m.metadata),
        hostname=m.hostname,
        log_directory=m.log_directory,
        dns_config=_get(m, "dns_config", dns_config_from_pb),
        port_mappings=tuple(port_mapping_from_pb(p) for p in m.port_mappings),
        labels=_map(m.labels),
        annotations=_map(m.annotations),
        linux=_get(m, "linux", linux_sandbox_config_from_pb),
    )


def _sandbox_state(value: int) -> types.SandboxState:
    """An unknown state is reported as not ready: the safe reading for a sandbox."""
    return _enum(types.SandboxState, value, types.SandboxState.NOTREADY)


def _sandbox_to_pb(cls: type[_M], s: types.PodSandbox | types.PodSandboxStatus, **fields: Any) -> _M:
    """A listed sandbox or a sandbox status: what both carry (same names in both messages), plus `fields`."""
    m = cls(
        id=s.id,
        state=int(s.state),
        created_at=s.created_at,
        labels=_map(s.labels),
        annotations=_map(s.annotations),
        runtime_handler=s.runtime_handler,
        **fields,
    )
    _put(m, "metadata", s.metadata, sandbox_metadata_to_pb)
    return m


def _sandbox_from_pb(m: pb.PodSandbox | pb.PodSandboxStatus) -> dict[str, Any]:
    """What a listed sandbox and a sandbox status both carry, as keyword arguments of either type."""
    return {
        "id": m.id,
        "metadata": _get(m, "metadata", sandbox_metadata_from_pb),
        "state": _sandbox_state(m.state),
        "created_at": m.created_at,
        "labels": _map(m.labels),
        "annotations": _map(m.annotations),
        "runtime_handler": m.runtime_handler,
    }


def sandbox_to_pb(s: types.PodSandbox) -> pb.PodSandbox:
    return _sandbox_to_pb(pb.PodSandbox, s)


def sandbox_from_pb(m: pb.PodSandbox) -> types.PodSandbox:
    return types.PodSandbox(**_sandbox_from_pb(m))


def sandbox_status_to_pb(s: types.PodSandboxStatus) -> pb.PodSandboxStatus:
    m = _sandbox_to_pb(pb.PodSandboxStatus, s)
    if s.ip or s.additional_ips:
        m.network.ip = s.ip
        m.network.additional_ips.extend(pb.PodIP(ip=ip) for ip in s.additional_ips)
    _put(m.linux.namespaces, "options", s.namespace_options, namespace_options_to_pb)
    return m


def sandbox_status_from_pb(m: pb.PodSandboxStatus) -> types.PodSandboxStatus:
    has_ns = m.HasField("linux") and m.linux.HasField("namespaces") and m.linux.namespaces.HasField("options")
    return types.PodSandboxStatus(
        **_sandbox_from_pb(m),
        ip=m.network.ip,
        additional_ips=tuple(p.ip for p in m.network.additional_ips),
        namespace_options=namespace_options_from_pb(m.linux.namespaces.options) if has_ns else None,
    )


def sandbox_filter_to_pb(f: types.PodSandboxFilter) -> pb.PodSandboxFilter:
    m = pb.PodSandboxFilter(id=f.id, label_selector=_map(f.label_selector))
    if f.state is not None:
        m.state.state = int(f.state)
    return m


def sandbox_filter_from_pb(m: pb.PodSandboxFilter) -> types.PodSandboxFilter:
    return types.PodSandboxFilter(
        id=m.id,
        state=_sandbox_state(m.state.state) if m.HasField("state") else None,
        label_selector=_map(m.label_selector),
    )


# ----------------------------------------------------------------------------------------- containers


def container_metadata_to_pb(md: types.ContainerMetadata) -> pb.ContainerMetadata:
    return pb.ContainerMetadata(name=md.name, attempt=md.attempt)


def container_metadata_from_pb(m: pb.ContainerMetadata) -> types.ContainerMetadata:
    return types.ContainerMetadata(name=m.name, attempt=m.attempt)


def capabilities_to_pb(c: types.Capabilities) -> pb.Capability:
    return pb.Capability(
        add_capabilities=list(c.add),
        drop_capabilities=list(c.drop),
        add_ambient_capabilities=list(c.add_ambient),
    )


def capabilities_from_pb(m: pb.Capability) -> types.Capabilities:
    return types.Capabilities(
        add=_tuple(m.add_capabilities),
        drop=_tuple(m.drop_capabilities),
        add_ambient=_tuple(m.add_ambient_capabilities),
    )


def container_security_context_to_pb(sc: types.ContainerSecurityContext) -> pb.LinuxContainerSecurityContext:
    m = pb.LinuxContainerSecurityContext(
        run_as_username=sc.run_as_username,
        no_new_privs=sc.no_new_privs,
        masked_paths=list(sc.masked_paths),
        readonly_paths=list(sc.readonly_paths),
        apparmor_profile=sc.apparmor_profile,
    )
    _put_linux_security(m, sc)
    _put(m, "capabilities", sc.capabilities, capabilities_to_pb)
    return m


def container_security_context_from_pb(m: pb.LinuxContainerSecurityContext) -> types.ContainerSecurityContext:
    return types.ContainerSecurityContext(
        **_linux_security_from_pb(m),
        capabilities=_get(m, "capabilities", capabilities_from_pb),
        run_as_username=m.run_as_username,
        no_new_privs=m.no_new_privs,
        masked_paths=_tuple(m.masked_paths),
        readonly_paths=_tuple(m.readonly_paths),
        apparmor_profile=m.apparmor_profile,
    )


def linux_container_config_to_pb(lc: types.LinuxContainerConfig) -> pb.LinuxContainerConfig:
    m = pb.LinuxContainerConfig()
    _put(m, "resources", lc.resources, linux_resources_to_pb)
    _put(m, "security_context", lc.security_context, container_security_context_to_pb)
    return m


def linux_container_config_from_pb(m: pb.LinuxContainerConfig) -> types.LinuxContainerConfig:
    return types.LinuxContainerConfig(
        resources=_get(m, "resources", linux_resources_from_pb),
        security_context=_get(m, "security_context", container_security_context_from_pb),
    )


def container_config_to_pb(c: types.ContainerConfig) -> pb.ContainerConfig:
    m = pb.ContainerConfig(
        metadata=container_metadata_to_pb(c.metadata),
        image=pb.ImageSpec(image=c.image, user_specified_image=c.user_specified_image),
        command=list(c.command),
        args=list(c.args),
        working_dir=c.working_dir,
        # KeyValue.value is `bytes` in CRI v1 (wire-compatible with the older `string`): send UTF-8.
        envs=[pb.KeyValue(key=k, value=v.encode()) for k, v in c.envs.items()],
        mounts=[mount_to_pb(x) for x in c.mounts],
        labels=_map(c.labels),
        annotations=_map(c.annotations),
        log_path=c.log_path,
        stdin=c.stdin,
        stdin_once=c.stdin_once,
        tty=c.tty,
        devices=[pb.Device(container_path=d.container_path, host_path=d.host_path, permissions=d.permissions)
                 for d in c.devices],
        CDI_devices=[pb.CDIDevice(name=name) for name in c.cdi_devices],
    )
    _put(m, "linux", c.linux, linux_container_config_to_pb)
    return m


def container_config_from_pb(m: pb.ContainerConfig) -> types.ContainerConfig:
    return types.ContainerConfig(
        metadata=container_metadata_from_pb(m.metadata),
        image=m.image.image,
        user_specified_image=m.image.user_specified_image,
        command=_tuple(m.command),
        args=_tuple(m.args),
        working_dir=m.working_dir,
        envs={kv.key: kv.value.decode(errors="replace") for kv in m.envs},
        mounts=tuple(mount_from_pb(x) for x in m.mounts),
        labels=_map(m.labels),
        annotations=_map(m.annotations),
        log_path=m.log_path,
        stdin=m.stdin,
        stdin_once=m.stdin_once,
        tty=m.tty,
        linux=_get(m, "linux", linux_container_config_from_pb),
        devices=tuple(types.Device(container_path=d.container_path, host_path=d.host_path, permissions=d.permissions)
                      for d in m.devices),
        cdi_devices=tuple(d.name for d in m.CDI_devices),
    )


def _container_state(value: int) -> types.ContainerState:
    return _enum(types.ContainerState, value, types.ContainerState.UNKNOWN)


def _container_to_pb(cls: type[_M], c: types.Container | types.ContainerStatus, **fields: Any) -> _M:
    """A listed container or a container status: what both carry (same names in both messages), plus `fields`."""
    m = cls(
        id=c.id,
        image=pb.ImageSpec(image=c.image),
        image_ref=c.image_ref,
        image_id=c.image_id,
        state=int(c.state),
        created_at=c.created_at,
        labels=_map(c.labels),
        annotations=_map(c.annotations),
        **fields,
    )
    _put(m, "metadata", c.metadata, container_metadata_to_pb)
    return m


def _container_from_pb(m: pb.Container | pb.ContainerStatus) -> dict[str, Any]:
    """What a listed container and a container status both carry, as keyword arguments of either type."""
    return {
        "id": m.id,
        "metadata": _get(m, "metadata", container_metadata_from_pb),
        "image": m.image.image,
        "image_ref": m.image_ref,
        "image_id": m.image_id,
        "state": _container_state(m.state),
        "created_at": m.created_at,
        "labels": _map(m.labels),
        "annotations": _map(m.annotations),
    }


def container_to_pb(c: types.Container) -> pb.Container:
    m = _container_to_pb(pb.Container, c, pod_sandbox_id=c.pod_sandbox_id)
    m.image.user_specified_image = c.user_specified_image
    return m


def container_from_pb(m: pb.Container) -> types.Container:
    return types.Container(**_container_from_pb(m), pod_sandbox_id=m.pod_sandbox_id,
                           user_specified_image=m.image.user_specified_image)


def container_status_to_pb(s: types.ContainerStatus) -> pb.ContainerStatus:
    m = _container_to_pb(
        pb.ContainerStatus,
        s,
        started_at=s.started_at,
        finished_at=s.finished_at,
        exit_code=s.exit_code,
        reason=s.reason,
        message=s.message,
        mounts=[mount_to_pb(x) for x in s.mounts],
        log_path=s.log_path,
    )
    _put(m.resources, "linux", s.resources, linux_resources_to_pb)
    return m


def container_status_from_pb(m: pb.ContainerStatus) -> types.ContainerStatus:
    return types.ContainerStatus(
        **_container_from_pb(m),
        started_at=m.started_at,
        finished_at=m.finished_at,
        exit_code=m.exit_code,
        reason=m.reason,
        message=m.message,
        mounts=tuple(mount_from_pb(x) for x in m.mounts),
        log_path=m.log_path,
        resources=linux_resources_from_pb(m.resources.linux)
        if m.HasField("resources") and m.resources.HasField("linux") else None,
    )


def container_filter_to_pb(f: types.ContainerFilter) -> pb.ContainerFilter:
    m = pb.ContainerFilter(id=f.id, pod_sandbox_id=f.pod_sandbox_id, label_selector=_map(f.label_selector))
    if f.state is not None:
        m.state.state = int(f.state)
    return m


def container_filter_from_pb(m: pb.ContainerFilter) -> types.ContainerFilter:
    return types.ContainerFilter(
        id=m.id,
        state=_container_state(m.state.state) if m.HasField("state") else None,
        pod_sandbox_id=m.pod_sandbox_id,
        label_selector=_map(m.label_selector),
    )


def exec_sync_result_to_pb(r: types.ExecSyncResult) -> pb.ExecSyncResponse:
    return pb.ExecSyncResponse(stdout=r.stdout, stderr=r.stderr, exit_code=r.exit_code)


def exec_sync_result_from_pb(m: pb.ExecSyncResponse) -> types.ExecSyncResult:
    return types.ExecSyncResult(stdout=m.stdout, stderr=m.stderr, exit_code=m.exit_code)


# --------------------------------------------------------------------------------------------- images


def auth_config_to_pb(a: types.AuthConfig) -> pb.AuthConfig:
    return pb.AuthConfig(
        username=a.username,
        password=a.password,
        auth=a.auth,
        server_address=a.server_address,
        identity_token=a.identity_token,
        registry_token=a.registry_token,
    )


def auth_config_from_pb(m: pb.AuthConfig) -> types.AuthConfig:
    return types.AuthConfig(
        username=m.username,
        password=m.password,
        auth=m.auth,
        server_address=m.server_address,
        identity_token=m.identity_token,
        registry_token=m.registry_token,
    )


def image_to_pb(i: types.Image) -> pb.Image:
    m = pb.Image(
        id=i.id,
        repo_tags=list(i.repo_tags),
        repo_digests=list(i.repo_digests),
        size=i.size,
        username=i.username,
        pinned=i.pinned,
    )
    _put_wrapped(m, "uid", i.uid)
    return m


def image_from_pb(m: pb.Image) -> types.Image:
    return types.Image(
        id=m.id,
        repo_tags=_tuple(m.repo_tags),
        repo_digests=_tuple(m.repo_digests),
        size=m.size,
        uid=_wrapped(m, "uid"),
        username=m.username,
        pinned=m.pinned,
    )


def filesystem_usage_to_pb(u: types.FilesystemUsage) -> pb.FilesystemUsage:
    m = pb.FilesystemUsage(timestamp=u.timestamp, fs_id=pb.FilesystemIdentifier(mountpoint=u.mountpoint))
    _put_wrapped(m, "used_bytes", u.used_bytes)
    _put_wrapped(m, "inodes_used", u.inodes_used)
    return m


def filesystem_usage_from_pb(m: pb.FilesystemUsage) -> types.FilesystemUsage:
    return types.FilesystemUsage(
        mountpoint=m.fs_id.mountpoint,
        timestamp=m.timestamp,
        used_bytes=_wrapped(m, "used_bytes"),
        inodes_used=_wrapped(m, "inodes_used"),
    )


def image_fs_info_to_pb(i: types.ImageFsInfo) -> pb.ImageFsInfoResponse:
    return pb.ImageFsInfoResponse(
        image_filesystems=[filesystem_usage_to_pb(u) for u in i.image_filesystems],
        container_filesystems=[filesystem_usage_to_pb(u) for u in i.container_filesystems],
    )


def image_fs_info_from_pb(m: pb.ImageFsInfoResponse) -> types.ImageFsInfo:
    return types.ImageFsInfo(
        image_filesystems=tuple(filesystem_usage_from_pb(u) for u in m.image_filesystems),
        container_filesystems=tuple(filesystem_usage_from_pb(u) for u in m.container_filesystems),
    )


# ---------------------------------------------------------------------------------------------- stats


_CPU_FIELDS = ("usage_core_nano_seconds", "usage_nano_cores")
_MEMORY_FIELDS = (
    "working_set_bytes",
    "available_bytes",
    "usage_bytes",
    "rss_bytes",
    "page_faults",
    "major_page_faults",
)
_SWAP_FIELDS = ("swap_available_bytes", "swap_usage_bytes")
_INTERFACE_FIELDS = ("rx_bytes", "rx_errors", "tx_bytes", "tx_errors")
_PROCESS_FIELDS = ("process_count",)


def _usage_to_pb(cls: type[_M], u: object, key: str, fields: Iterable[str]) -> _M:
    """A usage message: its `key` field (timestamp or name) and wrapped integers, unset where `u` has None."""
    m = cls(**{key: getattr(u, key)})
    for field in fields:
        _put_wrapped(m, field, getattr(u, field))
    return m


def _usage_from_pb(cls: type[_T], m: Message, key: str, fields: Iterable[str]) -> _T:
    return cls(**{key: getattr(m, key)}, **{field: _wrapped(m, field) for field in fields})


def cpu_usage_to_pb(u: types.CpuUsage) -> pb.CpuUsage:
    return _usage_to_pb(pb.CpuUsage, u, "timestamp", _CPU_FIELDS)


def cpu_usage_from_pb(m: pb.CpuUsage) -> types.CpuUsage:
    return _usage_from_pb(types.CpuUsage, m, "timestamp", _CPU_FIELDS)


def memory_usage_to_pb(u: types.MemoryUsage) -> pb.MemoryUsage:
    return _usage_to_pb(pb.MemoryUsage, u, "timestamp", _MEMORY_FIELDS)


def memory_usage_from_pb(m: pb.MemoryUsage) -> types.MemoryUsage:
    return _usage_from_pb(types.MemoryUsage, m, "timestamp", _MEMORY_FIELDS)


def swap_usage_to_pb(u: types.SwapUsage) -> pb.SwapUsage:
    return _usage_to_pb(pb.SwapUsage, u, "timestamp", _SWAP_FIELDS)


def swap_usage_from_pb(m: pb.SwapUsage) -> types.SwapUsage:
    return _usage_from_pb(types.SwapUsage, m, "timestamp", _SWAP_FIELDS)


def network_interface_usage_to_pb(u: types.NetworkInterfaceUsage) -> pb.NetworkInterfaceUsage:
    return _usage_to_pb(pb.NetworkInterfaceUsage, u, "name", _INTERFACE_FIELDS)


def network_interface_usage_from_pb(m: pb.NetworkInterfaceUsage) -> types.NetworkInterfaceUsage:
    return _usage_from_pb(types.NetworkInterfaceUsage, m, "name", _INTERFACE_FIELDS)


def network_usage_to_pb(u: types.NetworkUsage) -> pb.NetworkUsage:
    m = pb.NetworkUsage(timestamp=u.timestamp, interfaces=[network_interface_usage_to_pb(i) for i in u.interfaces])
    _put(m, "default_interface", u.default_interface, network_interface_usage_to_pb)
    return m


def network_usage_from_pb(m: pb.NetworkUsage) -> types.NetworkUsage:
    return types.NetworkUsage(
        timestamp=m.timestamp,
        default_interface=_get(m, "default_interface", network_interface_usage_from_pb),
        interfaces=tuple(network_interface_usage_from_pb(i) for i in m.interfaces),
    )


def process_usage_to_pb(u: types.ProcessUsage) -> pb.ProcessUsage:
    return _usage_to_pb(pb.ProcessUsage, u, "timestamp", _PROCESS_FIELDS)


def process_usage_from_pb(m: pb.ProcessUsage) -> types.ProcessUsage:
    return _usage_from_pb(types.ProcessUsage, m, "timestamp", _PROCESS_FIELDS)


def _attributes_to_pb(cls: type[_M], s: types.ContainerStats | types.PodSandboxStats,
                      metadata_to_pb: Callable[[Any], Message]) -> _M:
    """The `attributes` of a container's or a sandbox's stats: whose numbers they are."""
    m = cls(id=s.id, labels=_map(s.labels), annotations=_map(s.annotations))
    _put(m, "metadata", s.metadata, metadata_to_pb)
    return m


def _attributes_from_pb(m: pb.ContainerAttributes | pb.PodSandboxAttributes,
                        metadata_from_pb: Callable[[Any], Any]) -> dict[str, Any]:
    return {
        "id": m.id,
        "metadata": _get(m, "metadata", metadata_from_pb),
        "labels": _map(m.labels),
        "annotations": _map(m.annotations),
    }


def container_stats_to_pb(s: types.ContainerStats) -> pb.ContainerStats:
    m = pb.ContainerStats(attributes=_attributes_to_pb(pb.ContainerAttributes, s, container_metadata_to_pb))
    _put(m, "cpu", s.cpu, cpu_usage_to_pb)
    _put(m, "memory", s.memory, memory_usage_to_pb)
    _put(m, "writable_layer", s.writable_layer, filesystem_usage_to_pb)
    _put(m, "swap", s.swap, swap_usage_to_pb)
    return m


def container_stats_from_pb(m: pb.ContainerStats) -> types.ContainerStats:
    return types.ContainerStats(
        **_attributes_from_pb(m.attributes, container_metadata_from_pb),
        cpu=_get(m, "cpu", cpu_usage_from_pb),
        memory=_get(m, "memory", memory_usage_from_pb),
        writable_layer=_get(m, "writable_layer", filesystem_usage_from_pb),
        swap=_get(m, "swap", swap_usage_from_pb),
    )


def linux_sandbox_stats_to_pb(s: types.LinuxPodSandboxStats) -> pb.LinuxPodSandboxStats:
    m = pb.LinuxPodSandboxStats(containers=[container_stats_to_pb(c) for c in s.containers])
    _put(m, "cpu", s.cpu, cpu_usage_to_pb)
    _put(m, "memory", s.memory, memory_usage_to_pb)
    _put(m, "network", s.network, network_usage_to_pb)
    _put(m, "process", s.process, process_usage_to_pb)
    return m


def linux_sandbox_stats_from_pb(m: pb.LinuxPodSandboxStats) -> types.LinuxPodSandboxStats:
    return types.LinuxPodSandboxStats(
        cpu=_get(m, "cpu", cpu_usage_from_pb),
        memory=_get(m, "memory", memory_usage_from_pb),
        network=_get(m, "network", network_usage_from_pb),
        process=_get(m, "process", process_usage_from_pb),
        containers=tuple(container_stats_from_pb(c) for c in m.containers),
    )


def sandbox_stats_to_pb(s: types.PodSandboxStats) -> pb.PodSandboxStats:
    m = pb.PodSandboxStats(attributes=_attributes_to_pb(pb.PodSandboxAttributes, s, sandbox_metadata_to_pb))
    _put(m, "linux", s.linux, linux_sandbox_stats_to_pb)
    return m


def sandbox_stats_from_pb(m: pb.PodSandboxStats) -> types.PodSandboxStats:
    return types.PodSandboxStats(
        **_attributes_from_pb(m.attributes, sandbox_metadata_from_pb),
        linux=_get(m, "linux", linux_sandbox_stats_from_pb),
    )


def container_stats_filter_to_pb(f: types.ContainerStatsFilter) -> pb.ContainerStatsFilter:
    return pb.ContainerStatsFilter(id=f.id, pod_sandbox_id=f.pod_sandbox_id, label_selector=_map(f.label_selector))


def container_stats_filter_from_pb(m: pb.ContainerStatsFilter) -> types.ContainerStatsFilter:
    return types.ContainerStatsFilter(id=m.id, pod_sandbox_id=m.pod_sandbox_id, label_selector=_map(m.label_selector))


def sandbox_stats_filter_to_pb(f: types.PodSandboxStatsFilter) -> pb.PodSandboxStatsFilter:
    return pb.PodSandboxStatsFilter(id=f.id, label_selector=_map(f.label_selector))


def sandbox_stats_filter_from_pb(m: pb.PodSandboxStatsFilter) -> types.PodSandboxStatsFilter:
    return types.PodSandboxStatsFilter(id=m.id, label_selector=_map(m.label_selector))


# -------------------------------------------------------------------------------------- runtime events

def container_event_to_pb(e: types.ContainerEvent) -> pb.ContainerEventResponse:
    return pb.ContainerEventResponse(container_id=e.container_id, container_event_type=int(e.type),
                                     created_at=e.created_at)


def container_event_from_pb(m: pb.ContainerEventResponse) -> types.ContainerEvent:
    """CRI's event; an event type a newer runtime adds reads as a stop, which makes the agent look again."""
    return types.ContainerEvent(
        container_id=m.container_id,
        type=_enum(types.ContainerEventType, m.container_event_type, types.ContainerEventType.STOPPED),
        created_at=m.created_at)


CONTAINERD_TOPICS: dict[str, types.ContainerEventType] = {
    "/tasks/start": types.ContainerEventType.STARTED,
    "/tasks/exit": types.ContainerEventType.STOPPED,
    "/containers/delete": types.ContainerEventType.DELETED,
}
"""containerd's topics that say what CRI's events say (containerd 2.x's CRI plugin makes its own events from these
same ones): a task's start and exit, a container's removal."""

_CONTAINERD_PAYLOADS: dict[str, tuple[str, type[Message]]] = {
    "/tasks/start": ("containerd.events.TaskStart", events_pb.TaskStart),
    "/tasks/exit": ("containerd.events.TaskExit", events_pb.TaskExit),
    "/containers/delete": ("containerd.events.ContainerDelete", events_pb.ContainerDelete),
}


def container_event_from_envelope(m: events_pb.Envelope) -> types.ContainerEvent | None:
    """containerd's envelope as CRI's event; None for what is not one: another topic or payload, or an exec's
    exit (a probe's or ``kubectl exec``'s process, whose exit id is not the container's)."""
    kind = CONTAINERD_TOPICS.get(m.topic)
    payload = _CONTAINERD_PAYLOADS.get(m.topic)
    if kind is None or payload is None or not m.HasField("event"):
        return None
    type_name, message_type = payload
    if m.event.type_url.rsplit("/", 1)[-1] != type_name:
        return None
    event: Any = message_type.FromString(m.event.value)
    if isinstance(event, events_pb.TaskExit) and event.id and event.id != event.container_id:
        return None
    container_id = event.id if isinstance(event, events_pb.ContainerDelete) else event.container_id
    if not container_id:
        return None
    at = m.timestamp.seconds * 1_000_000_000 + m.timestamp.nanos if m.HasField("timestamp") else 0
    return types.ContainerEvent(container_id=container_id, type=kind, created_at=at)


def container_event_to_envelope(e: types.ContainerEvent, namespace: str = "k8s.io") -> events_pb.Envelope:
    """The envelope containerd sends for what CRI calls `e` (a simulated runtime, tests); ValueError for a creation,
    which kopflet does not subscribe to."""
    payloads: dict[types.ContainerEventType, Message] = {
        types.ContainerEventType.STARTED: events_pb.TaskStart(container_id=e.container_id),
        types.ContainerEventType.STOPPED: events_pb.TaskExit(container_id=e.container_id, id=e.container_id),
        types.ContainerEventType.DELETED: events_pb.ContainerDelete(id=e.container_id),
    }
    if e.type not in payloads:
        raise ValueError(f"containerd has no event kopflet reads for {e.type.name}")
    topic = next(topic for topic, kind in CONTAINERD_TOPICS.items() if kind is e.type)
    return envelope(topic, payloads[e.type], _CONTAINERD_PAYLOADS[topic][0], e.created_at, namespace)


def envelope(topic: str, event: Message, type_name: str, at: int = 0, namespace: str = "k8s.io") -> events_pb.Envelope:
    """An envelope as containerd packs one: `event` under its type name, stamped `at` (ns; 0: unstamped)."""
    packed = events_pb.Envelope(topic=topic, namespace=namespace)
    packed.event.type_url, packed.event.value = type_name, event.SerializeToString()
    if at:
        packed.timestamp.seconds, packed.timestamp.nanos = divmod(at, 1_000_000_000)
    return packed
