"""kopflet.kuberuntime.sandbox_config: PodSandboxConfig (upstream generatePodSandboxConfig) and pod DNS (GetPodDNS).

One base pod and one node DNS setup; DNS cases change the pod or the settings and state the whole
DNSConfig and the warnings' reasons.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from cri_client import types as cri
from kopflet.api.spec import Pod, pod_from_body
from kopflet.kuberuntime import sandbox_config
from kopflet.kuberuntime.sandbox_config import DnsSettings, SandboxConfigError
from kopflet.paths import Layout

DNS = DnsSettings(cluster_dns=("10.96.0.10",), cluster_domain="cluster.local",
                  host_servers=("192.168.1.1", "8.8.8.8"), host_searches=("corp.example",), host_options=("edns0",))
CLUSTER_SEARCHES = ("shop.svc.cluster.local", "svc.cluster.local", "cluster.local")
HOST = cri.DNSConfig(servers=("192.168.1.1", "8.8.8.8"), searches=("corp.example",), options=("edns0",))
LAYOUT = Layout("/var/lib/kopflet")


def make_pod(name: str = "web", **spec: Any) -> Pod:
    return pod_from_body({
        "metadata": {"name": name, "namespace": "shop", "uid": "uid-1", "labels": {"app": "web"},
                     "annotations": {"note": "x"}},
        "spec": {"containers": [{"name": "app", "image": "nginx"}], **spec},
    })


# ------------------------------------------------------------------------------------------------------ DNS

DNS_CASES: list[tuple[str, dict[str, Any], DnsSettings, cri.DNSConfig, tuple[str, ...]]] = [
    ("ClusterFirst", {}, DNS,
     cri.DNSConfig(servers=("10.96.0.10",), searches=(*CLUSTER_SEARCHES, "corp.example"), options=("ndots:5",)), ()),
    ("ClusterFirst on the host network is Default", {"hostNetwork": True}, DNS, HOST, ()),
    ("ClusterFirstWithHostNet", {"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"}, DNS,
     cri.DNSConfig(servers=("10.96.0.10",), searches=(*CLUSTER_SEARCHES, "corp.example"), options=("ndots:5",)), ()),
    ("Default", {"dnsPolicy": "Default"}, DNS, HOST, ()),
    ("None takes only dnsConfig",
     {"dnsPolicy": "None", "dnsConfig": {"nameservers": ["1.1.1.1"], "searches": ["a.example"],
                                         "options": [{"name": "ndots", "value": "2"}, {"name": "rotate"}]}},
     DNS, cri.DNSConfig(servers=("1.1.1.1",), searches=("a.example",), options=("ndots:2", "rotate")), ()),
    ("None without dnsConfig is empty", {"dnsPolicy": "None"}, DNS, cri.DNSConfig(), ()),
    ("dnsConfig merges: appended without duplicates, options by name",
     {"dnsConfig": {"nameservers": ["10.96.0.10", "1.1.1.1"], "searches": ["svc.cluster.local", "b.example"],
                    "options": [{"name": "ndots", "value": "2"}, {"name": "single-request-reopen"}]}},
     DNS, cri.DNSConfig(servers=("10.96.0.10", "1.1.1.1"), searches=(*CLUSTER_SEARCHES, "corp.example", "b.example"),
                        options=("ndots:2", "single-request-reopen")), ()),
    ("ClusterFirst without cluster DNS falls back to Default", {},
     dataclasses.replace(DNS, cluster_dns=()), HOST, ("MissingClusterDNS", "MissingClusterDNS")),
    ("no cluster domain: host searches only", {}, dataclasses.replace(DNS, cluster_domain=""),
     cri.DNSConfig(servers=("10.96.0.10",), searches=("corp.example",), options=("ndots:5",)), ()),
    ("Default without a resolv.conf: localhost", {"dnsPolicy": "Default"},
     dataclasses.replace(DNS, host_servers=(), host_searches=(), host_options=(), resolv_conf=False,
                         node_ips=("192.168.1.10", "fd00::10")),
     cri.DNSConfig(servers=("127.0.0.1", "::1"), searches=(".",)), ()),
    ("at most 3 nameservers", {"dnsPolicy": "Default", "dnsConfig": {"nameservers": ["1.1.1.1", "9.9.9.9"]}}, DNS,
     cri.DNSConfig(servers=("192.168.1.1", "8.8.8.8", "1.1.1.1"), searches=("corp.example",), options=("edns0",)),
     ("DNSConfigForming",)),
    ("at most 32 search paths", {"dnsPolicy": "None", "dnsConfig": {"searches": [f"s{i}.example" for i in range(40)]}},
     DNS, cri.DNSConfig(searches=tuple(f"s{i}.example" for i in range(32))), ("DNSConfigForming",)),
    ("search paths over 253 characters are dropped",
     {"dnsPolicy": "None", "dnsConfig": {"searches": ["a.example", "x" * 254, "b.example"]}},
     DNS, cri.DNSConfig(searches=("a.example", "b.example")), ("DNSConfigForming",)),
    ("the search line fits 2048 characters",
     {"dnsPolicy": "None", "dnsConfig": {"searches": [f"{i:02d}" + "x" * 250 for i in range(9)]}},
     DNS, cri.DNSConfig(searches=tuple(f"{i:02d}" + "x" * 250 for i in range(8))), ("DNSConfigForming",)),
]


@pytest.mark.parametrize(("change", "dns", "expected", "warnings"), [c[1:] for c in DNS_CASES],
                         ids=[c[0] for c in DNS_CASES])
def test_pod_dns_config(change: dict[str, Any], dns: DnsSettings, expected: cri.DNSConfig,
                        warnings: tuple[str, ...]) -> None:
    result = sandbox_config.pod_dns_config(make_pod(**change), dns)
    assert result.config == expected
    assert tuple(w.reason for w in result.warnings) == warnings


def test_missing_cluster_dns_messages() -> None:
    result = sandbox_config.pod_dns_config(make_pod(), dataclasses.replace(DNS, cluster_dns=()))
    message = ('kubelet does not have ClusterDNS IP configured and cannot create Pod using "ClusterFirst" policy. '
               'Falling back to "Default" policy.')
    assert result.warnings == (
        sandbox_config.SandboxWarning(reason="MissingClusterDNS", message=message, on_node=True),
        sandbox_config.SandboxWarning(reason="MissingClusterDNS", message=f'pod: "web_shop(uid-1)". {message}'),
    )


def test_parse_resolv_conf() -> None:
    text = ("# generated\nnameserver 10.0.0.2\nsearch old.example\nnameserver fd00::2\n"
            "search corp.example. lab.example\noptions ndots:2\noptions edns0 rotate\nnameserver\n")
    assert sandbox_config.parse_resolv_conf(text) == (
        ("10.0.0.2", "fd00::2"), ("corp.example", "lab.example"), ("edns0", "rotate"))


# ------------------------------------------------------------------------------------------------ hostname

HOSTNAME_CASES: list[tuple[str, str, dict[str, Any], str]] = [
    ("the pod name", "web", {}, "web"),
    ("spec.hostname", "web", {"hostname": "db-0"}, "db-0"),
    ("FQDN with setHostnameAsFQDN and a subdomain", "web",
     {"hostname": "db-0", "subdomain": "db", "setHostnameAsFQDN": True}, "db-0.db.shop.svc.cluster.local"),
    ("setHostnameAsFQDN without a subdomain", "web", {"setHostnameAsFQDN": True}, "web"),
    ("a subdomain alone does not change it", "web", {"subdomain": "db"}, "web"),
    ("long names are cut at 63 without a trailing - or .", "a" * 60 + "-b.c-d" + "e" * 10, {}, "a" * 60 + "-b"),
    ("no hostname on the host network", "web", {"hostNetwork": True}, ""),
    # spec.hostnameOverride (GA at v1.37): taken as is, a DNS subdomain, over hostname and subdomain.
    ("hostnameOverride, a subdomain", "web", {"hostnameOverride": "override.example.host"}, "override.example.host"),
    ("hostnameOverride over hostname", "web", {"hostname": "custom-host", "hostnameOverride": "override-host"},
     "override-host"),
    ("hostnameOverride with a subdomain: no domain", "web",
     {"subdomain": "t", "setHostnameAsFQDN": True, "hostnameOverride": "override-host"}, "override-host"),
    ("hostnameOverride cut at 63", "web", {"hostnameOverride": "a" * 62 + ".bc"}, "a" * 62),
]


@pytest.mark.parametrize(("name", "change", "expected"), [c[1:] for c in HOSTNAME_CASES],
                         ids=[c[0] for c in HOSTNAME_CASES])
def test_sandbox_hostname(name: str, change: dict[str, Any], expected: str) -> None:
    assert sandbox_config.build_sandbox_config(make_pod(name, **change), 0, dns=DNS, layout=LAYOUT).hostname == expected


@pytest.mark.parametrize(("change", "message"), [
    ({"hostname": "Not_A_Label"}, 'pod Hostname "Not_A_Label" is not a valid DNS label: a lowercase RFC 1123 label'),
    ({"hostnameOverride": "Not.A.Subdomain"}, 'pod HostnameOverride "Not.A.Subdomain" is not a valid DNS '
     "subdomain: a lowercase RFC 1123 subdomain must consist of"),
    ({"hostnameOverride": "x" * 254}, f'pod HostnameOverride "{"x" * 254}" is not a valid DNS subdomain: must be '
     "no more than 253 characters"),
    ({"subdomain": "x" * 64}, f'pod Subdomain "{"x" * 64}" is not a valid DNS label: must be no more than 63'),
    ({"hostname": "h" * 30, "subdomain": "s" * 20, "setHostnameAsFQDN": True},
     "failed to construct FQDN from pod hostname and cluster domain, FQDN "),
])
def test_sandbox_hostname_errors(change: dict[str, Any], message: str) -> None:
    with pytest.raises(SandboxConfigError) as error:
        sandbox_config.build_sandbox_config(make_pod(**change), 0, dns=DNS, layout=LAYOUT)
    assert str(error.value).startswith(message)


# -------------------------------------------------------------------------------------------- whole config


def test_build_sandbox_config_for_the_base_pod() -> None:
    pod = make_pod(containers=[{"name": "app", "image": "nginx",
                                "ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 9090}]}],
                   securityContext={"sysctls": [{"name": "net.core.somaxconn", "value": "1024"}]})
    config = sandbox_config.build_sandbox_config(pod, 2, dns=DNS, layout=LAYOUT,
                                                 cgroup_parent="/kubepods/burstable/poduid-1")
    assert config == cri.PodSandboxConfig(
        metadata=cri.PodSandboxMetadata(name="web", namespace="shop", uid="uid-1", attempt=2),
        hostname="web",
        log_directory="/var/log/pods/shop_web_uid-1",
        dns_config=cri.DNSConfig(servers=("10.96.0.10",), searches=(*CLUSTER_SEARCHES, "corp.example"),
                                 options=("ndots:5",)),
        port_mappings=(cri.PortMapping(container_port=80, host_port=8080), cri.PortMapping(container_port=9090)),
        labels={"app": "web", "io.kubernetes.pod.name": "web", "io.kubernetes.pod.namespace": "shop",
                "io.kubernetes.pod.uid": "uid-1"},
        annotations={"note": "x"},
        linux=cri.LinuxSandboxConfig(
            cgroup_parent="/kubepods/burstable/poduid-1",
            sysctls={"net.core.somaxconn": "1024"},
            security_context=cri.SandboxSecurityContext(
                namespace_options=cri.NamespaceOptions(network=cri.NamespaceMode.POD, pid=cri.NamespaceMode.CONTAINER,
                                                       ipc=cri.NamespaceMode.POD,
                                                       userns_options=cri.UserNamespace(mode=cri.NamespaceMode.NODE)),
                seccomp=cri.SecurityProfile(profile_type=cri.ProfileType.RUNTIME_DEFAULT),
            ),
        ),
    )


def test_log_directory_root_is_configurable() -> None:
    config = sandbox_config.build_sandbox_config(make_pod(), 0, dns=DNS, layout=Layout("/var/lib/kopflet", "/srv/logs"))
    assert config.log_directory == "/srv/logs/shop_web_uid-1"


def test_port_mappings() -> None:
    pod = make_pod(containers=[
        {"name": "a", "image": "nginx", "ports": [
            {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "name": "dns"},
            {"containerPort": 54, "hostPort": 54, "protocol": "UDP", "name": "dns"},     # name repeated: skipped
            {"containerPort": 80, "hostPort": 80, "hostIP": "192.168.1.10"},
            {"containerPort": 80, "hostPort": 80, "hostIP": "192.168.1.10"},             # same derived name
            {"containerPort": 80, "hostPort": 80, "hostIP": "fd00::10"}]},               # other family: kept
        {"name": "b", "image": "nginx", "ports": [{"containerPort": 9000, "protocol": "SCTP", "name": "dns"}]},
    ])
    assert sandbox_config.port_mappings(pod) == (
        cri.PortMapping(container_port=53, host_port=53, protocol=cri.Protocol.UDP),
        cri.PortMapping(container_port=80, host_port=80, host_ip="192.168.1.10"),
        cri.PortMapping(container_port=80, host_port=80, host_ip="fd00::10"),
        cri.PortMapping(container_port=9000, protocol=cri.Protocol.SCTP),
    )


NODE, POD, CONTAINER = cri.NamespaceMode.NODE, cri.NamespaceMode.POD, cri.NamespaceMode.CONTAINER


@pytest.mark.parametrize(("change", "expected"), [
    ({}, (POD, CONTAINER, POD)),
    ({"hostNetwork": True}, (NODE, CONTAINER, POD)),
    ({"hostPID": True}, (POD, NODE, POD)),
    ({"hostIPC": True}, (POD, CONTAINER, NODE)),
    ({"shareProcessNamespace": True}, (POD, POD, POD)),
    ({"hostPID": True, "shareProcessNamespace": True}, (POD, NODE, POD)),
], ids=str)
def test_namespace_options(change: dict[str, Any], expected: tuple[cri.NamespaceMode, ...]) -> None:
    options = sandbox_config.namespace_options(make_pod(**change))
    assert (options.network, options.pid, options.ipc) == expected


def test_linux_security_context_from_the_pod() -> None:
    pod = make_pod(securityContext={"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000,
                                    "supplementalGroups": [4000, 5000],
                                    "seLinuxOptions": {"level": "s0:c123,c456"}},
                   initContainers=[{"name": "init", "image": "busybox", "securityContext": {"privileged": True}}])
    context = sandbox_config.linux_sandbox_config(pod).security_context
    assert context is not None
    assert (context.run_as_user, context.run_as_group, context.supplemental_groups, context.privileged) == (
        1000, 3000, (2000, 4000, 5000), True)
    assert context.selinux_options == cri.SELinuxOptions(level="s0:c123,c456")


@pytest.mark.parametrize("security_context", [
    {},
    {"seccompProfile": {"type": "Unconfined"}},
    {"seccompProfile": {"type": "Localhost", "localhostProfile": "deny-all.json"}},
], ids=["unset", "Unconfined", "Localhost"])
def test_the_sandbox_runs_with_runtime_default_seccomp_whatever_the_pod_asks(security_context: dict[str, Any]) -> None:
    """Upstream generatePodSandboxLinuxConfig forces RuntimeDefault on the sandbox (issue #84623); the pod's profile
    is its containers'. No AppArmor profile on the sandbox."""
    context = sandbox_config.linux_sandbox_config(make_pod(securityContext=security_context)).security_context
    assert context is not None
    assert (context.seccomp, context.apparmor) == (cri.SecurityProfile(profile_type=cri.ProfileType.RUNTIME_DEFAULT),
                                                   None)


# ------------------------------------------------------------------------------------------ user namespaces

HOST_USERNS = cri.UserNamespace(mode=NODE)
NOT_SUPPORTED = "can't set `spec.hostUsers: false`, runtime does not support user namespaces"
RUNC, RUNC_USERNS = cri.RuntimeHandler(name="runc"), cri.RuntimeHandler(name="runc", user_namespaces=True)
DEFAULT_USERNS = cri.RuntimeHandler(name="", user_namespaces=True)

# (hostUsers, the pod's runtime handler, the runtime's handlers, the user namespace or the error), as upstream
# GetOrCreateUserNamespaceMappings with HandlerSupportsUserNamespaces (UserNamespacesSupport is GA, locked on).
USERNS_CASES: list[tuple[str, bool | None, str, tuple[cri.RuntimeHandler, ...], cri.UserNamespace | str]] = [
    ("unset: the host's", None, "", (), HOST_USERNS),
    ("true: the host's", True, "", (), HOST_USERNS),
    ("true, whatever the runtime", True, "kata", (RUNC,), HOST_USERNS),
    ("false, a runtime listing no handlers (containerd 1.6)", False, "", (), NOT_SUPPORTED),
    ("false, the default handler without the feature", False, "", (cri.RuntimeHandler(name=""), RUNC),
     NOT_SUPPORTED),
    ("false, a RuntimeClass handler without the feature", False, "runc", (DEFAULT_USERNS, RUNC),
     "can't set `spec.hostUsers: false`, RuntimeClass handler \"runc\" does not support user namespaces"),
    ("false, an unknown handler", False, "kata", (RUNC_USERNS,),
     "can't set `spec.hostUsers: false`, RuntimeClass handler \"kata\" does not support user namespaces: "
     "the handler \"kata\" is not known"),
    ("false, the default handler unknown", False, "", (RUNC_USERNS,),
     f"{NOT_SUPPORTED}: the handler \"\" is not known"),
    ("false, supported: kopflet has no ID mappings to give", False, "runc", (RUNC_USERNS,),
     sandbox_config.USERNS_NOT_IMPLEMENTED),
    ("false, the default handler supports it", False, "", (DEFAULT_USERNS,), sandbox_config.USERNS_NOT_IMPLEMENTED),
]
IDS = (cri.IDMapping(host_id=5 * 65536, container_id=0, length=65536),)
POD_USERNS = cri.UserNamespace(mode=cri.NamespaceMode.POD, uids=IDS, gids=IDS)
# With the user namespace manager's mappings for the pod: they are its user namespace once the handler supports it.
USERNS_MAPPED_CASES: list[tuple[str, bool | None, str, tuple[cri.RuntimeHandler, ...], cri.UserNamespace | str]] = [
    ("false, the default handler supports it: the pod's own", False, "", (DEFAULT_USERNS,), POD_USERNS),
    ("false, the RuntimeClass handler supports it", False, "runc", (RUNC_USERNS,), POD_USERNS),
    ("false, containerd 1.6: refused whatever the mappings", False, "", (), NOT_SUPPORTED),
    ("unset: the host's, mappings or not", None, "", (DEFAULT_USERNS,), HOST_USERNS),
    ("true: the host's, mappings or not", True, "", (DEFAULT_USERNS,), HOST_USERNS),
]


@pytest.mark.parametrize(("host_users", "handler", "handlers", "expected", "mappings"),
                         [(*case[1:], None) for case in USERNS_CASES] +
                         [(*case[1:], POD_USERNS) for case in USERNS_MAPPED_CASES],
                         ids=[case[0] for case in USERNS_CASES + USERNS_MAPPED_CASES])
def test_user_namespace(host_users: bool | None, handler: str, handlers: tuple[cri.RuntimeHandler, ...],
                        expected: cri.UserNamespace | str, mappings: cri.UserNamespace | None) -> None:
    pod = make_pod(**({} if host_users is None else {"hostUsers": host_users}))
    if isinstance(expected, str):
        with pytest.raises(SandboxConfigError) as error:
            sandbox_config.build_sandbox_config(pod, 0, dns=DNS, layout=LAYOUT, runtime_handler=handler,
                                                runtime_handlers=handlers, userns_mappings=mappings)
        assert str(error.value) == expected
        return
    config = sandbox_config.build_sandbox_config(pod, 0, dns=DNS, layout=LAYOUT, runtime_handler=handler,
                                                 runtime_handlers=handlers, userns_mappings=mappings)
    assert config.linux is not None and config.linux.security_context is not None
    options = config.linux.security_context.namespace_options
    assert options is not None and options.userns_options == expected


@pytest.mark.parametrize(("resources", "expected"), [
    ({}, "/kubepods/besteffort/poduid-1"),
    ({"requests": {"cpu": "100m"}}, "/kubepods/burstable/poduid-1"),
    ({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}, "/kubepods/poduid-1"),
])
def test_pod_cgroup_parent_by_qos_class(resources: dict, expected: str) -> None:
    from kopflet.api import spec as specs
    from kopflet.cm.helpers import pod_cgroup_parent

    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "uid": "uid-1"},
            "spec": {"containers": [{"name": "c", "image": "busybox", "resources": resources}]}}
    assert pod_cgroup_parent(specs.pod_from_body(body)) == expected
