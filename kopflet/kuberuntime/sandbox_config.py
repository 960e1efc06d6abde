"""
The CRI `PodSandboxConfig` of a pod: what RunPodSandbox (and every CreateContainer/PullImage) gets.

Mirrors upstream `generatePodSandboxConfig` / `generatePodSandboxLinuxConfig`
(pkg/kubelet/kuberuntime/kuberuntime_sandbox.go), `GeneratePodHostNameAndDomain` /
`truncatePodHostnameIfNeeded` (pkg/kubelet/kubelet_pods.go), `GetNodenameForKernel`, `MakePortMappings`,
`NamespacesForPod` with the user namespace manager's `GetOrCreateUserNamespaceMappings`
(pkg/kubelet/userns/userns_manager.go) and the DNS configurer `GetPodDNS` (pkg/kubelet/network/dns/dns.go).

Pure: the node's DNS settings (cluster DNS, cluster domain, the host's resolv.conf contents) are passed in
as `DnsSettings`; `parse_resolv_conf` turns the text of a resolv.conf into them. Problems the kubelet
reports as events (no cluster DNS configured, DNS limits exceeded) come back as `SandboxWarning`s from
`pod_dns_config`; a pod that cannot get a sandbox config at all raises `SandboxConfigError` (the caller
reports ``FailedCreatePodSandBox``).
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cri_client import types as cri
from kopflet import gotext, paths
from kopflet.api import spec, validation
from kopflet.container import labels

DEFAULT_DNS_OPTIONS = ("ndots:5",)

# pkg/apis/core/validation: MaxDNSNameservers and the ExpandedDNSConfig (GA) search limits.
MAX_DNS_NAMESERVERS = 3
MAX_DNS_SEARCH_PATHS = 32
MAX_DNS_SEARCH_LIST_CHARS = 2048
MAX_DNS_SEARCH_PATH_LENGTH = validation.DNS1123_SUBDOMAIN_MAX_LENGTH  # longer paths make glibc abort()

HOSTNAME_MAX_LENGTH = 63
FQDN_MAX_LENGTH = 64

REASON_MISSING_CLUSTER_DNS = "MissingClusterDNS"
REASON_DNS_CONFIG_FORMING = "DNSConfigForming"

_PROTOCOLS = {"TCP": cri.Protocol.TCP, "UDP": cri.Protocol.UDP, "SCTP": cri.Protocol.SCTP}


class SandboxConfigError(ValueError):
    """No sandbox config can be made for the pod (bad hostname, FQDN too long ...)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class DnsSettings:
    """The node's DNS setup, as the kubelet's ``clusterDNS``, ``clusterDomain`` and ``resolvConf``."""

    cluster_dns: tuple[str, ...] = ()
    """Cluster DNS server IPs (kubelet ``clusterDNS``); empty makes ClusterFirst fall back to Default."""
    cluster_domain: str = ""
    """``cluster.local`` usually; empty means no cluster search domains."""
    host_servers: tuple[str, ...] = ()
    host_searches: tuple[str, ...] = ()
    host_options: tuple[str, ...] = ()
    """The node's resolv.conf (``parse_resolv_conf``), the base for dnsPolicy Default."""
    resolv_conf: bool = True
    """False is kubelet ``--resolv-conf=""``: Default pods get a localhost nameserver and search ``.``."""
    node_ips: tuple[str, ...] = ()
    """Only used without resolv.conf, to pick 127.0.0.1 or ::1 per node IP family."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class SandboxWarning:
    """Something the kubelet reports as a Warning event; `on_node` events go to the Node, others to the pod."""

    reason: str
    message: str
    on_node: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class DnsResult:
    """The pod's resolver config and the warnings met while forming it."""

    config: cri.DNSConfig
    warnings: tuple[SandboxWarning, ...] = ()


# ------------------------------------------------------------------------------------------------- DNS


def parse_resolv_conf(text: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """Nameservers, searches and options of a resolv.conf (upstream `parseResolvConf`).

    Nameserver lines accumulate; the last ``search`` and ``options`` lines win; trailing dots of search
    domains are dropped so ``a.`` and ``a`` count once.
    """
    servers: list[str] = []
    searches: list[str] = []
    options: list[str] = []
    for line in text.split("\n"):
        stripped = line.strip()
        if stripped.startswith("#"):
            continue
        fields = stripped.split()
        if not fields:
            continue
        if fields[0] == "nameserver" and len(fields) >= 2:
            servers.append(fields[1])
        elif fields[0] == "search":
            searches = [s.removesuffix(".") for s in fields[1:]]
        elif fields[0] == "options":
            options = fields[1:]
    return tuple(servers), tuple(searches), tuple(options)


def _dns_type(pod: spec.Pod) -> str:
    """Upstream `getPodDNSType`: "none", "cluster" or "host"; ClusterFirst on the host network is "host"."""
    policy = pod.spec.dns_policy
    if policy == "None":
        return "none"
    if policy == "ClusterFirstWithHostNet" or (policy == "ClusterFirst" and not pod.spec.host_network):
        return "cluster"
    return "host"


def pod_dns_config(pod: spec.Pod, dns: DnsSettings) -> DnsResult:
    """The pod's DNS config by its dnsPolicy, merged with its dnsConfig (upstream `GetPodDNS`).

    ClusterFirst: the cluster DNS servers only, searches ``<ns>.svc.<domain> svc.<domain> <domain>`` then
    the host's, options ``ndots:5``; without cluster DNS it falls back to Default with a
    ``MissingClusterDNS`` warning. Default (and ClusterFirst on the host network): the host's resolv.conf.
    None: only dnsConfig. dnsConfig nameservers and searches are appended without duplicates, options
    merged by name (dnsConfig wins); then the limits apply (3 nameservers, 32 search paths of at most 253
    characters, 2048 characters in all) with a ``DNSConfigForming`` warning when something was dropped.
    """
    warnings: list[SandboxWarning] = []
    servers = list(dns.host_servers)
    searches = list(dns.host_searches)
    options = list(dns.host_options)
    kind = _dns_type(pod)
    if kind == "none":
        servers, searches, options = [], [], []
    elif kind == "cluster" and dns.cluster_dns:
        servers = list(dns.cluster_dns)
        searches = _cluster_searches(searches, pod.namespace, dns.cluster_domain)
        options = list(DEFAULT_DNS_OPTIONS)
    else:
        if kind == "cluster":
            message = ('kubelet does not have ClusterDNS IP configured and cannot create Pod using "ClusterFirst" '
                       'policy. Falling back to "Default" policy.')
            warnings.append(SandboxWarning(reason=REASON_MISSING_CLUSTER_DNS, message=message, on_node=True))
            warnings.append(SandboxWarning(reason=REASON_MISSING_CLUSTER_DNS,
                                           message=f'pod: "{pod.full_name}". {message}'))
        if not dns.resolv_conf:
            servers = [_localhost_for(ip) for ip in dns.node_ips] or ["127.0.0.1"]
            searches = ["."]
    if pod.spec.dns_config is not None:
        servers, searches, options = _append_dns_config(servers, searches, options, pod.spec.dns_config)
    servers, server_warning = _fit_nameservers(servers)
    searches, search_warning = _fit_searches(searches)
    warnings.extend(w for w in (server_warning, search_warning) if w is not None)
    return DnsResult(config=cri.DNSConfig(servers=tuple(servers), searches=tuple(searches), options=tuple(options)),
                     warnings=tuple(warnings))


def _localhost_for(ip: str) -> str:
    try:
        return "::1" if ipaddress.ip_address(ip).version == 6 else "127.0.0.1"
    except ValueError:
        return "127.0.0.1"


def _omit_duplicates(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _cluster_searches(host_searches: Sequence[str], namespace: str, domain: str) -> list[str]:
    """Upstream `generateSearchesForDNSClusterFirst`."""
    if not domain:
        return list(host_searches)
    return _omit_duplicates([f"{namespace}.svc.{domain}", f"svc.{domain}", domain, *host_searches])


def _append_dns_config(servers: list[str], searches: list[str], options: list[str],
                       dns_config: Mapping[str, Any]) -> tuple[list[str], list[str], list[str]]:
    """Upstream `appendDNSConfig` / `mergeDNSOptions` (order kept: existing options first, then new names)."""
    servers = _omit_duplicates([*servers, *(dns_config.get("nameservers") or ())])
    searches = _omit_duplicates([*searches, *(dns_config.get("searches") or ())])
    merged: dict[str, str] = {}
    for option in options:
        name, _, value = option.partition(":")
        merged[name] = value
    for option in dns_config.get("options") or ():
        if isinstance(option, Mapping) and isinstance(option.get("name"), str):
            merged[option["name"]] = option.get("value") or ""
    return servers, searches, [f"{name}:{value}" if value else name for name, value in merged.items()]


def _fit_nameservers(servers: list[str]) -> tuple[list[str], SandboxWarning | None]:
    """Upstream `formDNSNameserversFitsLimits`."""
    if len(servers) <= MAX_DNS_NAMESERVERS:
        return servers, None
    servers = servers[:MAX_DNS_NAMESERVERS]
    return servers, SandboxWarning(
        reason=REASON_DNS_CONFIG_FORMING,
        message=f"Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver "
                f"line is: {' '.join(servers)}")


def _fit_searches(searches: list[str]) -> tuple[list[str], SandboxWarning | None]:
    """Upstream `formDNSSearchFitsLimits`: at most 32 paths, none over 253 characters, 2048 in all."""
    exceeded = len(searches) > MAX_DNS_SEARCH_PATHS
    searches = searches[:MAX_DNS_SEARCH_PATHS]
    kept = [s for s in searches if len(s) <= MAX_DNS_SEARCH_PATH_LENGTH]
    exceeded = exceeded or len(kept) != len(searches)
    while kept and len(" ".join(kept)) > MAX_DNS_SEARCH_LIST_CHARS:
        kept.pop()
        exceeded = True
    if not exceeded:
        return kept, None
    return kept, SandboxWarning(
        reason=REASON_DNS_CONFIG_FORMING,
        message=f"Search Line limits were exceeded, some search paths have been omitted, the applied search line "
                f"is: {' '.join(kept)}")


# -------------------------------------------------------------------------------------------- hostname


def _label_errors(value: str) -> str:
    """Upstream IsDNS1123Label, joined with ";" as the kubelet's messages join them."""
    return ";".join(validation.dns1123_label_errors(value))


def _subdomain_errors(value: str) -> str:
    """Upstream IsDNS1123Subdomain, joined with ";" as the kubelet's messages join them."""
    return ";".join(validation.dns1123_subdomain_errors(value))


def truncate_hostname(pod_name: str, hostname: str) -> str:
    """Cap a hostname at 63 characters, then strip trailing ``-`` and ``.`` (upstream
    `truncatePodHostnameIfNeeded`)."""
    if len(hostname) <= HOSTNAME_MAX_LENGTH:
        return hostname
    truncated = hostname[:HOSTNAME_MAX_LENGTH].rstrip("-.")
    if not truncated:
        raise SandboxConfigError(f'hostname for pod "{pod_name}" was invalid: "{hostname}"')
    return truncated


def pod_hostname_and_domain(pod: spec.Pod, cluster_domain: str) -> tuple[str, str]:
    """The pod's short hostname and its domain (upstream `GeneratePodHostNameAndDomain`).

    The hostname is spec.hostnameOverride (GA at v1.37: a DNS subdomain, with no domain at all), else
    spec.hostname or the pod name, truncated to 63 characters; the domain is
    ``<subdomain>.<namespace>.svc.<cluster domain>`` when spec.subdomain is set, else empty.
    """
    if pod.spec.hostname_override is not None:
        override = pod.spec.hostname_override
        if errors := _subdomain_errors(override):
            raise SandboxConfigError(f'pod HostnameOverride "{override}" is not a valid DNS subdomain: {errors}')
        return truncate_hostname(pod.name, override), ""
    hostname = pod.name
    if pod.spec.hostname:
        if errors := _label_errors(pod.spec.hostname):
            raise SandboxConfigError(f'pod Hostname "{pod.spec.hostname}" is not a valid DNS label: {errors}')
        hostname = pod.spec.hostname
    hostname = truncate_hostname(pod.name, hostname)
    domain = ""
    if pod.spec.subdomain:
        if errors := _label_errors(pod.spec.subdomain):
            raise SandboxConfigError(f'pod Subdomain "{pod.spec.subdomain}" is not a valid DNS label: {errors}')
        domain = f"{pod.spec.subdomain}.{pod.namespace}.svc.{cluster_domain}"
    return hostname, domain


def kernel_hostname(hostname: str, domain: str, set_hostname_as_fqdn: bool) -> str:
    """The sandbox's hostname (upstream `GetNodenameForKernel`): the FQDN with setHostnameAsFQDN."""
    if not (domain and set_hostname_as_fqdn):
        return hostname
    fqdn = f"{hostname}.{domain}"
    if len(fqdn) > FQDN_MAX_LENGTH:
        raise SandboxConfigError(f"failed to construct FQDN from pod hostname and cluster domain, FQDN {fqdn} is too "
                                 f"long ({FQDN_MAX_LENGTH} characters is the max, {len(fqdn)} characters requested)")
    return fqdn


# ---------------------------------------------------------------------------------------------- config


def port_mappings(pod: spec.Pod) -> tuple[cri.PortMapping, ...]:
    """Every declared container port (upstream `MakePortMappings`; the CNI portmap plugin publishes only
    those with a hostPort); a repeated port name within one container is skipped."""
    result: list[cri.PortMapping] = []
    for container in pod.spec.containers:
        names: set[str] = set()
        for port in container.ports:
            name = port.name
            if not name:
                family = "any" if not port.host_ip else ("v6" if ":" in port.host_ip else "v4")
                name = f"{family}-{port.protocol}-{port.host_ip}:{port.container_port}:{port.host_port}"
            if name in names:
                continue
            names.add(name)
            result.append(cri.PortMapping(container_port=port.container_port, host_port=port.host_port,
                                          protocol=_PROTOCOLS.get(port.protocol, cri.Protocol.TCP),
                                          host_ip=port.host_ip))
    return tuple(result)


# -------------------------------------------------------------------------------------- user namespaces

USERNS_NOT_SUPPORTED = "can't set `spec.hostUsers: false`, runtime does not support user namespaces"
"""Upstream `GetOrCreateUserNamespaceMappings`'s refusal when the runtime handler lacks user namespaces."""
USERNS_NOT_IMPLEMENTED = ("can't set `spec.hostUsers: false`: no user namespace manager to allocate its ID mappings")
"""kopflet's own refusal when the runtime could do it but no ID mappings were given (a part built without the
user namespace manager): never the host's user namespace in its place."""
HOST_USER_NAMESPACE = cri.UserNamespace(mode=cri.NamespaceMode.NODE)


def handler_supports_user_namespaces(handler: str, handlers: Sequence[cri.RuntimeHandler]) -> tuple[bool, str]:
    """Whether the runtime handler supports user namespaces, and the error when the handler is not listed
    (upstream `HandlerSupportsUserNamespaces`: a runtime that lists no handlers at all, as containerd 1.6's
    Status, supports none)."""
    if not handlers:
        return False, ""
    for known in handlers:
        if known.name == handler:
            return known.user_namespaces, ""
    return False, f"the handler {gotext.go_quote(handler)} is not known"


def user_namespace(pod: spec.Pod, *, runtime_handler: str = "", runtime_handlers: Sequence[cri.RuntimeHandler] = (),
                   mappings: cri.UserNamespace | None = None) -> cri.UserNamespace:
    """The pod's user namespace (upstream `GetOrCreateUserNamespaceMappings`, UserNamespacesSupport being GA
    and locked on): the host's (mode NODE) unless ``hostUsers: false``.

    ``hostUsers: false``: SandboxConfigError with upstream's message when the runtime handler (`runtime_handler`,
    "" for the default; `runtime_handlers` as the runtime's Status lists them) does not support user namespaces;
    else `mappings`, the pod's own user namespace (mode POD) as the user namespace manager allocated it
    (`kopflet.userns`), asked only once the handler is known to support it. Never the host's user namespace in its
    place: without `mappings`, SandboxConfigError too. The caller reports ``FailedCreatePodSandBox`` and retries.
    """
    if pod.spec.host_users is not False:
        return HOST_USER_NAMESPACE
    supported, error = handler_supports_user_namespaces(runtime_handler, runtime_handlers)
    if supported:
        if mappings is None:
            raise SandboxConfigError(USERNS_NOT_IMPLEMENTED)
        return mappings
    message = USERNS_NOT_SUPPORTED if not runtime_handler else (
        f"can't set `spec.hostUsers: false`, RuntimeClass handler {gotext.go_quote(runtime_handler)} does not "
        f"support user namespaces")
    raise SandboxConfigError(f"{message}: {error}" if error else message)


def namespace_options(pod: spec.Pod, userns: cri.UserNamespace | None = None) -> cri.NamespaceOptions:
    """Upstream `NamespacesForPod`: NODE for hostNetwork/hostPID/hostIPC, else POD; without hostPID the
    PID namespace is per CONTAINER unless shareProcessNamespace. `userns` is the pod's user namespace
    (`user_namespace`, which this calls when it is not given: SandboxConfigError for ``hostUsers: false``)."""
    if userns is None:
        userns = user_namespace(pod)
    if pod.spec.host_pid:
        pid = cri.NamespaceMode.NODE
    elif pod.spec.share_process_namespace:
        pid = cri.NamespaceMode.POD
    else:
        pid = cri.NamespaceMode.CONTAINER
    return cri.NamespaceOptions(
        network=cri.NamespaceMode.NODE if pod.spec.host_network else cri.NamespaceMode.POD,
        pid=pid,
        ipc=cri.NamespaceMode.NODE if pod.spec.host_ipc else cri.NamespaceMode.POD,
        userns_options=userns,
    )


def selinux_options(context: Mapping[str, Any] | None) -> cri.SELinuxOptions | None:
    """A securityContext's seLinuxOptions as CRI options (None when unset)."""
    options = (context or {}).get("seLinuxOptions")
    if not isinstance(options, Mapping):
        return None
    return cri.SELinuxOptions(user=options.get("user") or "", role=options.get("role") or "",
                              type=options.get("type") or "", level=options.get("level") or "")


def has_privileged_container(pod: spec.Pod) -> bool:
    """Upstream `HasPrivilegedContainer`: any init, regular or ephemeral container runs privileged."""
    contexts = [c.security_context for c in (*pod.spec.init_containers, *pod.spec.containers)]
    contexts += [c.get("securityContext") for c in pod.spec.raw.get("ephemeralContainers") or ()
                 if isinstance(c, Mapping)]
    return any(isinstance(c, Mapping) and c.get("privileged") is True for c in contexts)


def pod_supplemental_groups(pod: spec.Pod) -> tuple[int, ...]:
    """fsGroup then supplementalGroups of the pod's securityContext (volume GIDs are not added yet)."""
    context = pod.spec.security_context
    groups = [context["fsGroup"]] if isinstance(context.get("fsGroup"), int) else []
    groups += [g for g in context.get("supplementalGroups") or () if isinstance(g, int)]
    return tuple(groups)


# Upstream's pod cgroup hierarchy with cgroups-per-qos and the cgroupfs driver.
def _family(ip: str) -> int:
    try:
        return ipaddress.ip_address(ip).version
    except ValueError:
        return 0


def effective_pod_ips(pod: spec.Pod, sandbox_ips: Sequence[str], node_ips: Sequence[str]) -> list[str]:
    """Upstream generateAPIPodStatus: the sandbox's IPs in the node's family order, and for a hostNetwork pod
    the node's own IPs; the kubelet's SyncPod hands these same IPs to ``status.podIP(s)`` env vars."""
    pod_ips = sort_pod_ips(sandbox_ips, node_ips)
    if not pod_ips and pod.spec.host_network and node_ips:
        pod_ips = [node_ips[0]]
        if len(node_ips) > 1 and _family(node_ips[1]) != _family(node_ips[0]):
            pod_ips.append(node_ips[1])
    return pod_ips


def sort_pod_ips(ips: Sequence[str], node_ips: Sequence[str] = ()) -> list[str]:
    """Upstream `sortPodIPs`: the first IP of the node's family, then the first of the other (at most two)."""
    primary = 6 if node_ips and _family(node_ips[0]) == 6 else 4
    result = []
    for family in (primary, 10 - primary):
        found = next((str(ipaddress.ip_address(ip)) for ip in ips if _family(ip) == family), None)
        if found is not None:
            result.append(found)
    return result


def linux_sandbox_config(pod: spec.Pod, cgroup_parent: str = "",
                         userns: cri.UserNamespace | None = None, *,
                         resources: cri.LinuxContainerResources | None = None,
                         overhead: cri.LinuxContainerResources | None = None) -> cri.LinuxSandboxConfig:
    """Upstream `generatePodSandboxLinuxConfig`: cgroup parent, sysctls and the sandbox security context
    (namespaces with `userns`, runAsUser/Group, groups, SELinux, privileged if any container is, seccomp
    RuntimeDefault), with the caller's `resources` and `overhead` (upstream applySandboxResources:
    `container_config.sandbox_linux_resources`, `resize.overhead_linux_resources`).

    The sandbox's seccomp profile is RuntimeDefault whatever the pod asks (upstream forces it, issue #84623: the
    pause container needs nothing more, and a pod-level profile then cannot keep the sandbox from starting); the
    pod's ``seccompProfile`` applies to its containers (`container_config.container_security_context`). No AppArmor
    profile for the sandbox either, as upstream."""
    context = pod.spec.security_context
    sysctls = {s["name"]: str(s.get("value", "")) for s in context.get("sysctls") or ()
               if isinstance(s, Mapping) and isinstance(s.get("name"), str)}
    run_as_user = context.get("runAsUser")
    run_as_group = context.get("runAsGroup")
    return cri.LinuxSandboxConfig(
        cgroup_parent=cgroup_parent,
        sysctls=sysctls,
        security_context=cri.SandboxSecurityContext(
            namespace_options=namespace_options(pod, userns),
            selinux_options=selinux_options(context),
            run_as_user=run_as_user if isinstance(run_as_user, int) else None,
            run_as_group=run_as_group if isinstance(run_as_group, int) else None,
            supplemental_groups=pod_supplemental_groups(pod),
            privileged=has_privileged_container(pod),
            seccomp=cri.SecurityProfile(profile_type=cri.ProfileType.RUNTIME_DEFAULT),
        ),
        overhead=overhead,
        resources=resources,
    )


def build_sandbox_config(pod: spec.Pod, attempt: int, *, dns: DnsSettings, layout: paths.Layout,
                         cgroup_parent: str = "", runtime_handler: str = "",
                         runtime_handlers: Sequence[cri.RuntimeHandler] = (),
                         userns_mappings: cri.UserNamespace | None = None,
                         resources: cri.LinuxContainerResources | None = None,
                         overhead: cri.LinuxContainerResources | None = None) -> cri.PodSandboxConfig:
    """The PodSandboxConfig for RunPodSandbox (upstream `generatePodSandboxConfig`).

    The log directory is the pod's under `layout`'s log root (`BuildPodLogsDirectory`). Hostname only off the
    host network (the runtime uses the node's otherwise). DNS warnings are dropped here: call `pod_dns_config`
    to get them for events. `runtime_handler` and `runtime_handlers` decide ``hostUsers: false``, and
    `userns_mappings` is then the pod's user namespace (`user_namespace`). `resources` and `overhead` are the
    pod's, as upstream applySandboxResources adds them (None: left out). Raises SandboxConfigError.
    """
    hostname = ""
    if not pod.spec.host_network:
        short, domain = pod_hostname_and_domain(pod, dns.cluster_domain)
        hostname = kernel_hostname(short, domain, pod.spec.raw.get("setHostnameAsFQDN") is True)
    return cri.PodSandboxConfig(
        metadata=cri.PodSandboxMetadata(name=pod.name, namespace=pod.namespace, uid=pod.uid, attempt=attempt),
        hostname=hostname,
        log_directory=layout.pod_log_dir(pod.namespace, pod.name, pod.uid),
        dns_config=pod_dns_config(pod, dns).config,
        port_mappings=port_mappings(pod),
        labels=labels.sandbox_labels(pod),
        annotations=labels.sandbox_annotations(pod),
        linux=linux_sandbox_config(pod, cgroup_parent, user_namespace(
            pod, runtime_handler=runtime_handler, runtime_handlers=runtime_handlers, mappings=userns_mappings),
            resources=resources, overhead=overhead),
    )


__all__ = [
    "HOST_USER_NAMESPACE",
    "USERNS_NOT_IMPLEMENTED",
    "USERNS_NOT_SUPPORTED",
    "DnsResult",
    "DnsSettings",
    "SandboxConfigError",
    "SandboxWarning",
    "build_sandbox_config",
    "effective_pod_ips",
    "handler_supports_user_namespaces",
    "kernel_hostname",
    "linux_sandbox_config",
    "namespace_options",
    "parse_resolv_conf",
    "pod_dns_config",
    "pod_hostname_and_domain",
    "port_mappings",
    "sort_pod_ips",
    "truncate_hostname",
    "user_namespace",
]
