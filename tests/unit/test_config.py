"""kopflet.config.settings: the kubelet's flags, the KubeletConfiguration file, the legacy environment, and their
precedence.

Every case goes through `load(argv, environ, hostname, read_file)`; the config file lives in a dict, so no test
touches the disk. Error cases check that the message names the flag, field or variable at fault.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from kopflet.cm.memorymanager.memory_manager import MemoryReservation
from kopflet.config import settings
from kopflet.config.settings import DEFAULT_RUNTIME_ENDPOINT, AgentConfig, ConfigError, Taint, load
from kopflet.nodeshutdown.rules import ShutdownGracePeriodByPodPriority

REPO = Path(__file__).resolve().parents[2]
HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"


def files(**contents: str) -> Any:
    """A read_file over in-memory files; a missing one raises OSError as open() would."""
    def read(path: str) -> str:
        name = path.lstrip("/")
        if name not in contents:
            raise FileNotFoundError(2, "No such file or directory", path)
        return contents[name]
    return read


def run(argv: list[str] | tuple[str, ...] = (), environ: Mapping[str, str] | None = None, hostname: str = "node-1",
        **contents: str) -> AgentConfig:
    return load(list(argv), environ or {}, hostname, files(**contents))


def with_file(body: str, *argv: str) -> AgentConfig:
    return run(["--config=/k.yaml", *argv], **{"k.yaml": HEADER + body})


# --- defaults -------------------------------------------------------------------------------------------------

def test_defaults_match_the_upstream_kubelet() -> None:
    cfg = run()
    assert cfg == AgentConfig(node_name="node-1")
    assert cfg.runtime_endpoint == cfg.image_endpoint == DEFAULT_RUNTIME_ENDPOINT == "unix:///run/containerd/containerd.sock"
    assert cfg.runtime_request_timeout == 120.0
    assert (cfg.resync_period, cfg.file_check_frequency) == (60.0, 20.0)
    assert (cfg.node_status_update_frequency, cfg.node_status_report_frequency) == (10.0, 300.0)
    assert (cfg.max_pods, cfg.serialize_image_pulls) == (110, True)
    assert (cfg.healthz_port, cfg.healthz_bind_address) == (10248, "127.0.0.1")
    assert cfg.healthz_endpoint == "http://127.0.0.1:10248/healthz"
    assert (cfg.kubeconfig, cfg.pod_manifest_path, cfg.pod_log_root) == ("", "", "/var/log/pods")
    assert cfg.node_labels == {} and cfg.system_reserved == {} and cfg.kube_reserved == {}
    assert cfg.register_with_taints == () and cfg.allowed_unsafe_sysctls == () and cfg.cluster_dns == ()
    assert cfg.pod_field_selector == "spec.nodeName=node-1"
    assert cfg.local_storage_capacity_isolation is True  # v1beta1 defaults.go: LocalStorageCapacityIsolation


def test_kubelet_api_defaults_are_the_config_files() -> None:
    # The KubeletConfiguration file's defaults, not the insecure legacy ones of upstream's flags without --config.
    cfg = run()
    assert (cfg.address, cfg.port) == ("0.0.0.0", 10250)
    assert (cfg.tls_cert_file, cfg.tls_private_key_file, cfg.client_ca_file) == ("", "", "")
    assert cfg.cert_directory == "/var/lib/kopflet/pki"
    assert (cfg.anonymous_auth, cfg.authentication_token_webhook) == (False, True)
    assert cfg.authentication_token_webhook_cache_ttl == 120.0
    assert cfg.authorization_mode == "Webhook"
    assert (cfg.authorization_webhook_cache_authorized_ttl, cfg.authorization_webhook_cache_unauthorized_ttl) == (
        300.0, 30.0)


@pytest.mark.parametrize(("argv", "cert_dir"), [
    ([], "/var/lib/kopflet/pki"),
    (["--root-dir=/srv/k/"], "/srv/k/pki"),
    (["--root-dir=/srv/k", "--cert-dir=/etc/kopflet/pki"], "/etc/kopflet/pki"),
])
def test_cert_dir_defaults_under_the_root_dir(argv: list[str], cert_dir: str) -> None:
    assert run(argv).cert_directory == cert_dir


# --- flags ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("argv", "expected"), [
    (["--kubeconfig=/etc/kopflet/node.kubeconfig"], {"kubeconfig": "/etc/kopflet/node.kubeconfig"}),
    (["--kubeconfig", "/k"], {"kubeconfig": "/k"}),
    (["--hostname-override=Edge-7"], {"node_name": "edge-7"}),
    (["--node-ip", "10.0.0.5"], {"node_ip": "10.0.0.5"}),
    (["--node-ip=fd00::5"], {"node_ip": "fd00::5"}),
    (["--container-runtime-endpoint=unix:///run/x.sock"],
     {"runtime_endpoint": "unix:///run/x.sock", "image_endpoint": "unix:///run/x.sock"}),
    (["--container-runtime-endpoint=/run/x.sock"],
     {"runtime_endpoint": "unix:///run/x.sock", "image_endpoint": "unix:///run/x.sock"}),
    (["--image-service-endpoint=unix:///run/img.sock"], {"image_endpoint": "unix:///run/img.sock"}),
    (["--pod-manifest-path=/etc/kubernetes/manifests"], {"pod_manifest_path": "/etc/kubernetes/manifests"}),
    (["--max-pods=20"], {"max_pods": 20}),
    (["--max-pods", "0"], {"max_pods": 0}),
    (["--root-dir=/srv/kopflet"], {"root_dir": "/srv/kopflet"}),
    (["--cluster-dns=10.96.0.10,fd00::10"], {"cluster_dns": ("10.96.0.10", "fd00::10")}),
    (["--cluster-dns=10.96.0.10", "--cluster-dns=10.96.0.11"], {"cluster_dns": ("10.96.0.10", "10.96.0.11")}),
    (["--cluster-dns="], {"cluster_dns": ()}),
    (["--cluster-domain=Example.ORG."], {"cluster_domain": "example.org"}),
    (["--runtime-request-timeout=2m0s"], {"runtime_request_timeout": 120.0}),
    (["--runtime-request-timeout=1h30m"], {"runtime_request_timeout": 5400.0}),
    (["--runtime-request-timeout=1.5s"], {"runtime_request_timeout": 1.5}),
    (["--runtime-request-timeout=250ms"], {"runtime_request_timeout": 0.25}),
    (["--sync-frequency=30s"], {"resync_period": 30.0}),
    (["--file-check-frequency=5s"], {"file_check_frequency": 5.0}),
    (["--node-status-update-frequency=4s"], {"node_status_update_frequency": 4.0}),
    (["--healthz-port=0"], {"healthz_port": 0}),
    (["--healthz-port=9999", "--healthz-bind-address=0.0.0.0"],
     {"healthz_port": 9999, "healthz_bind_address": "0.0.0.0"}),
    (["--serialize-image-pulls=false"], {"serialize_image_pulls": False}),
    (["--serialize-image-pulls"], {"serialize_image_pulls": True}),
    (["--local-storage-capacity-isolation=false"], {"local_storage_capacity_isolation": False}),
    (["--local-storage-capacity-isolation=0"], {"local_storage_capacity_isolation": False}),
    (["--local-storage-capacity-isolation"], {"local_storage_capacity_isolation": True}),
    (["--enforce-node-allocatable=none"], {"enforce_node_allocatable": ("none",)}),
    (["--enforce-node-allocatable="], {"enforce_node_allocatable": ()}),
    (["--enforce-node-allocatable=pods"], {"enforce_node_allocatable": ("pods",)}),
    (["--system-reserved=cpu=100m, memory=200Mi"], {"system_reserved": {"cpu": "100m", "memory": "200Mi"}}),
    (["--kube-reserved=ephemeral-storage=1Gi,pid=100"], {"kube_reserved": {"ephemeral-storage": "1Gi", "pid": "100"}}),
    (["--allowed-unsafe-sysctls=net.core.somaxconn,kernel.msg*"],
     {"allowed_unsafe_sysctls": ("net.core.somaxconn", "kernel.msg*")}),
    (["-v", "4"], {"log_verbosity": 4}),
    (["-v=5"], {"log_verbosity": 5}),
    (["-v6"], {"log_verbosity": 6}),
    (["--v=2"], {"log_verbosity": 2}),
    (["--address=127.0.0.1", "--port", "10350"], {"address": "127.0.0.1", "port": 10350}),
    (["--address=::"], {"address": "::"}),
    (["--tls-cert-file=/pki/k.crt", "--tls-private-key-file=/pki/k.key"],
     {"tls_cert_file": "/pki/k.crt", "tls_private_key_file": "/pki/k.key"}),
    (["--cert-dir=/etc/kopflet/pki"], {"cert_dir": "/etc/kopflet/pki"}),
    (["--client-ca-file=/pki/ca.crt"], {"client_ca_file": "/pki/ca.crt"}),
    (["--anonymous-auth"], {"anonymous_auth": True}),
    (["--anonymous-auth=false"], {}),
    (["--authentication-token-webhook=false"], {"authentication_token_webhook": False}),
    (["--authentication-token-webhook-cache-ttl=10s"], {"authentication_token_webhook_cache_ttl": 10.0}),
    (["--authentication-token-webhook-cache-ttl=0s"], {"authentication_token_webhook_cache_ttl": 0.0}),
    (["--authorization-mode=AlwaysAllow"], {"authorization_mode": "AlwaysAllow"}),
    (["--authorization-mode="], {}),
    (["--authorization-webhook-cache-authorized-ttl=1m", "--authorization-webhook-cache-unauthorized-ttl=0"],
     {"authorization_webhook_cache_authorized_ttl": 60.0, "authorization_webhook_cache_unauthorized_ttl": 0.0}),
    # The last of a repeated scalar flag wins; an empty value falls back to the default.
    (["--max-pods=5", "--max-pods=7"], {"max_pods": 7}),
    (["--node-ip=10.0.0.5", "--node-ip="], {}),
    (["--hostname-override="], {}),
    (["--"], {}),
])
def test_flags(argv: list[str], expected: dict[str, Any]) -> None:
    cfg = run(argv)
    assert {name: getattr(cfg, name) for name in expected} == expected
    untouched = {name for name in AgentConfig.__dataclass_fields__ if name not in expected}
    default = AgentConfig(node_name="node-1")
    changed = {name for name in untouched if getattr(cfg, name) != getattr(default, name)}
    assert changed <= {"image_endpoint"}, f"unexpected changes: {changed}"


@pytest.mark.parametrize(("argv", "message"), [
    (["--foo=1"], "unknown flag: --foo"),
    (["--max-pod=3"], "unknown flag: --max-pod (did you mean --max-pods?)"),
    (["-x"], "unknown shorthand flag"),
    (["run"], 'unexpected argument "run"'),
    (["--", "extra"], 'unexpected argument "extra"'),
    (["--kubeconfig"], "flag needs an argument: --kubeconfig"),
    (["--max-pods=many"], '--max-pods: expected an integer, got "many"'),
    (["--max-pods=-1"], "--max-pods: must not be negative"),
    (["--healthz-port=70000"], "--healthz-port: must be a port number"),
    (["--serialize-image-pulls=maybe"], "--serialize-image-pulls: expected true or false"),
    (["--serialize-image-pulls", "false"], 'unexpected argument "false"'),
    (["--local-storage-capacity-isolation=off"], "--local-storage-capacity-isolation: expected true or false"),
    (["--runtime-request-timeout=soon"], '--runtime-request-timeout: expected a duration such as "1m30s"'),
    (["--runtime-request-timeout=10"], "--runtime-request-timeout: expected a duration"),
    (["--runtime-request-timeout=0s"], "--runtime-request-timeout: must be a positive duration"),
    (["--sync-frequency=-1s"], "--sync-frequency: must be a positive duration"),
    (["--container-runtime-endpoint=tcp://1.2.3.4:1"], "--container-runtime-endpoint: \"tcp://1.2.3.4:1\" must be a unix://"),
    (["--image-service-endpoint=unix://"], "--image-service-endpoint"),
    (["--node-ip=10.0.0.300"], '--node-ip: "10.0.0.300" is not an IP address'),
    (["--node-ip=10.0.0.1,fd00::1"], "--node-ip: \"10.0.0.1,fd00::1\": dual-stack"),
    (["--cluster-dns=10.96.0.10,dns.local"], '--cluster-dns: "dns.local" is not an IP address'),
    (["--cluster-domain=bad_domain"], "--cluster-domain"),
    (["--healthz-bind-address=localhost"], "--healthz-bind-address"),
    (["--root-dir=relative/dir"], "--root-dir: \"relative/dir\" must be an absolute path"),
    (["--system-reserved=gpu=1"], '--system-reserved: cannot reserve "gpu"'),
    (["--system-reserved=cpu=lots"], "--system-reserved: cpu: "),
    (["--kube-reserved=memory=-1Gi"], "--kube-reserved: resource quantity for \"memory\" cannot be negative"),
    (["--kube-reserved=memory"], "--kube-reserved: malformed pair \"memory\""),
    (["--allowed-unsafe-sysctls=net core"], "--allowed-unsafe-sysctls"),
    (["--allowed-unsafe-sysctls=vm.swappiness"], '--allowed-unsafe-sysctls: the sysctl "vm.swappiness" are not known'),
    (["-v=loud"], '-v: expected an integer, got "loud"'),
    (["--hostname-override=Not_Valid!"], "--hostname-override: \"Not_Valid!\" is not a valid node name"),
    (["--port=0"], "--port: must be between 1 and 65535, inclusive, got 0"),
    (["--port=65536"], "--port: must be between 1 and 65535"),
    (["--address=localhost"], '--address: "localhost" is not an IP address'),
    (["--anonymous-auth=maybe"], "--anonymous-auth: expected true or false"),
    (["--authorization-mode=RBAC"], '--authorization-mode: unknown authorization mode "RBAC": expected one of '
                                    "AlwaysAllow, Webhook"),
    (["--authorization-mode=Node,Webhook"], "--authorization-mode: unknown authorization mode"),
    (["--authentication-token-webhook-cache-ttl=-1s"], "--authentication-token-webhook-cache-ttl: must not be "
                                                       "a negative duration"),
    (["--authorization-webhook-cache-authorized-ttl=5"], "--authorization-webhook-cache-authorized-ttl: expected "
                                                         "a duration"),
    (["--tls-cert-file=/pki/k.crt"], "--tls-cert-file (tlsCertFile) and --tls-private-key-file (tlsPrivateKeyFile) "
                                     "must be given together"),
    (["--tls-private-key-file=/pki/k.key"], "must be given together"),
])
def test_flag_errors_name_the_flag(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        run(argv)
    assert message in str(info.value)


# --- --node-labels ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("argv", "labels"), [
    (["--node-labels=role=edge"], {"role": "edge"}),
    (["--node-labels=a=1,b=2", "--node-labels=b=3,c="], {"a": "1", "b": "3", "c": ""}),
    (["--node-labels=example.com/tier=gold, node.kubernetes.io/pool=p1"],
     {"example.com/tier": "gold", "node.kubernetes.io/pool": "p1"}),
    (["--node-labels=topology.kubernetes.io/zone=z1,x.kubelet.kubernetes.io/y=1"],
     {"topology.kubernetes.io/zone": "z1", "x.kubelet.kubernetes.io/y": "1"}),
    (["--node-labels="], {}),
])
def test_node_labels(argv: list[str], labels: dict[str, str]) -> None:
    assert run(argv).node_labels == labels


@pytest.mark.parametrize(("value", "message"), [
    ("role", 'malformed pair "role"'),
    ("Bad Key=1", 'invalid label key "Bad Key"'),
    ("a/b/c=1", "at most one '/'"),
    ("Example.com/x=1", "the prefix must be a lowercase DNS subdomain"),
    ("/x=1", "the prefix must be a lowercase DNS subdomain"),
    ("k=" + "v" * 64, "invalid value"),
    ("k=-v", "invalid value"),
    ("kubernetes.io/role=edge", "kubernetes.io"),
    ("node-role.kubernetes.io/worker=", "kubernetes.io"),
    ("x.k8s.io/y=1", "k8s.io"),
])
def test_node_label_errors(value: str, message: str) -> None:
    with pytest.raises(ConfigError, match="--node-labels") as info:
        run([f"--node-labels={value}"])
    assert message in str(info.value)


# --- --register-with-taints ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "taints"), [
    ("dedicated=edge:NoSchedule", (Taint("dedicated", "edge", "NoSchedule"),)),
    ("example.com/gpu:NoExecute,spot=true:PreferNoSchedule",
     (Taint("example.com/gpu", "", "NoExecute"), Taint("spot", "true", "PreferNoSchedule"))),
    ("k=:NoSchedule", (Taint("k", "", "NoSchedule"),)),
    ("k:NoSchedule,k:NoExecute", (Taint("k", "", "NoSchedule"), Taint("k", "", "NoExecute"))),
    ("", ()),
])
def test_register_with_taints(value: str, taints: tuple[Taint, ...]) -> None:
    assert run([f"--register-with-taints={value}"]).register_with_taints == taints


def test_taint_forms() -> None:
    taint = Taint("k", "v", "NoSchedule")
    assert str(taint) == "k=v:NoSchedule" and str(Taint("k", "", "NoExecute")) == "k:NoExecute"
    assert taint.as_dict() == {"key": "k", "value": "v", "effect": "NoSchedule"}
    assert Taint("k", "", "NoExecute").as_dict() == {"key": "k", "effect": "NoExecute"}


def test_register_with_taints_last_flag_wins() -> None:
    cfg = run(["--register-with-taints=a:NoSchedule", "--register-with-taints=b:NoExecute"])
    assert cfg.register_with_taints == (Taint("b", "", "NoExecute"),)


@pytest.mark.parametrize(("value", "message"), [
    ("dedicated=edge", "expected key=value:Effect or key:Effect"),
    ("dedicated", "expected key=value:Effect or key:Effect"),
    ("k=v:Sometimes", 'effect "Sometimes" is not one of NoSchedule, PreferNoSchedule, NoExecute'),
    ("k=v:noschedule", "is not one of"),
    ("a:b:NoSchedule", "more than one ':'"),
    ("k=v=w:NoSchedule", "more than one '='"),
    ("=v:NoSchedule", "invalid label key"),
    ("bad key=v:NoSchedule", "invalid label key"),
    ("k=bad value:NoSchedule", "invalid value"),
    ("k=1:NoSchedule,k=2:NoSchedule", "duplicated taints with the same key and effect: k:NoSchedule"),
])
def test_taint_errors(value: str, message: str) -> None:
    with pytest.raises(ConfigError, match="--register-with-taints") as info:
        run([f"--register-with-taints={value}"])
    assert message in str(info.value)


# --- durations -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "seconds"), [
    ("0", 0.0), ("0s", 0.0), ("2m0s", 120.0), ("1h", 3600.0), ("1h2m3s", 3723.0), ("1.5h", 5400.0),
    ("300ms", 0.3), ("10us", 1e-5), ("10µs", 1e-5), ("7ns", 7e-9), (".5s", 0.5), ("-1m", -60.0), ("+5s", 5.0),
])
def test_parse_duration(text: str, seconds: float) -> None:
    assert settings.parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "1", "5 s", "s", "1d", "1m 2s", "m1", "--1s", "1.2.3s"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        settings.parse_duration(text)


# --- the node name ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("argv", "environ", "hostname", "name"), [
    ([], {}, "Worker-1", "worker-1"),
    ([], {}, " worker-1\n", "worker-1"),
    ([], {"NODE_NAME": "ds-node"}, "host", "ds-node"),
    ([], {"KOPFLET_NODE_NAME": "legacy"}, "host", "legacy"),
    ([], {"NODE_NAME": "ds-node", "KOPFLET_NODE_NAME": "legacy"}, "host", "ds-node"),
    (["--hostname-override=flag"], {"NODE_NAME": "ds-node", "KOPFLET_NODE_NAME": "legacy"}, "host", "flag"),
    ([], {"NODE_NAME": ""}, "host", "host"),
    ([], {}, "a.b-c.d", "a.b-c.d"),
])
def test_node_name_precedence(argv: list[str], environ: dict[str, str], hostname: str, name: str) -> None:
    assert run(argv, environ, hostname).node_name == name


@pytest.mark.parametrize(("argv", "environ", "hostname", "message"), [
    ([], {"NODE_NAME": "Not_Valid!"}, "host", "NODE_NAME"),
    ([], {"KOPFLET_NODE_NAME": "x" * 254}, "host", "KOPFLET_NODE_NAME"),
    ([], {}, "bad_host", "the hostname"),
    ([], {}, "", "the hostname"),
    (["--hostname-override=-edge"], {}, "host", "--hostname-override"),
])
def test_node_name_errors_name_the_source(argv: list[str], environ: dict[str, str], hostname: str,
                                          message: str) -> None:
    with pytest.raises(ConfigError, match="not a valid node name") as info:
        run(argv, environ, hostname)
    assert str(info.value).startswith(message)


# --- the legacy environment ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("environ", "expected"), [
    ({"CONTAINER_RUNTIME_ENDPOINT": "unix:///run/x.sock"},
     {"runtime_endpoint": "unix:///run/x.sock", "image_endpoint": "unix:///run/x.sock"}),
    ({"KOPFLET_RUNTIME_REQUEST_TIMEOUT": "30"}, {"runtime_request_timeout": 30.0}),
    ({"KOPFLET_RUNTIME_REQUEST_TIMEOUT": "1m"}, {"runtime_request_timeout": 60.0}),
    ({"KOPFLET_NODE_IP": "192.168.1.9"}, {"node_ip": "192.168.1.9"}),
    ({"KOPFLET_ROOT_DIR": "/srv/k"}, {"root_dir": "/srv/k"}),
    ({"KOPFLET_CLUSTER_DNS": "10.96.0.10, 10.96.0.11"}, {"cluster_dns": ("10.96.0.10", "10.96.0.11")}),
    ({"KOPFLET_CLUSTER_DOMAIN": "corp.local"}, {"cluster_domain": "corp.local"}),
    ({"KOPFLET_ROOT_DIR": "", "CONTAINER_RUNTIME_ENDPOINT": ""}, {}),
    ({"KUBECONFIG": "/admin.kubeconfig"}, {"kubeconfig": ""}),  # KUBECONFIG is the fallback login, not a setting
])
def test_legacy_environment(environ: dict[str, str], expected: dict[str, Any]) -> None:
    cfg = run([], environ)
    assert {name: getattr(cfg, name) for name in expected} == expected


@pytest.mark.parametrize(("environ", "message"), [
    ({"CONTAINER_RUNTIME_ENDPOINT": "tcp://1.2.3.4:1"}, "CONTAINER_RUNTIME_ENDPOINT: "),
    ({"KOPFLET_RUNTIME_REQUEST_TIMEOUT": "soon"}, "KOPFLET_RUNTIME_REQUEST_TIMEOUT: expected a number of seconds"),
    ({"KOPFLET_RUNTIME_REQUEST_TIMEOUT": "0"}, "KOPFLET_RUNTIME_REQUEST_TIMEOUT: must be positive"),
    ({"KOPFLET_RUNTIME_REQUEST_TIMEOUT": "inf"}, "KOPFLET_RUNTIME_REQUEST_TIMEOUT: must be positive"),
    ({"KOPFLET_NODE_IP": "nope"}, "KOPFLET_NODE_IP: "),
    ({"KOPFLET_ROOT_DIR": "rel"}, "KOPFLET_ROOT_DIR: "),
    ({"KOPFLET_CLUSTER_DNS": "10.96.0.10,x"}, "KOPFLET_CLUSTER_DNS: "),
])
def test_legacy_environment_errors(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        run([], environ)
    assert str(info.value).startswith(message)


# --- KOPFLET_ARGS (how the flags reach the agent under `kopf run`) -------------------------------------------

def test_from_env_reads_the_flags_from_kopflet_args() -> None:
    environ = {"KOPFLET_ARGS": "--hostname-override=edge-2 --pod-manifest-path='/etc/static pods' --max-pods 9",
               "KOPFLET_NODE_NAME": "ignored"}
    cfg = settings.from_env(environ, "host", files())
    assert (cfg.node_name, cfg.max_pods, cfg.pod_manifest_path) == ("edge-2", 9, "/etc/static pods")


def test_from_env_validates_kopflet_args() -> None:
    with pytest.raises(ConfigError, match="--node-labels"):
        settings.from_env({"KOPFLET_ARGS": "--node-labels='a=x y'"}, "host", files())


def test_from_env_without_kopflet_args_is_the_old_behaviour() -> None:
    environ = {"KOPFLET_NODE_NAME": "edge-7", "CONTAINER_RUNTIME_ENDPOINT": "unix:///run/x.sock"}
    assert settings.from_env(environ, "host", files()) == AgentConfig(
        node_name="edge-7", runtime_endpoint="unix:///run/x.sock", image_endpoint="unix:///run/x.sock")


def test_kopflet_args_with_broken_quoting() -> None:
    with pytest.raises(ConfigError, match="KOPFLET_ARGS: cannot split"):
        settings.from_env({"KOPFLET_ARGS": "--node-labels='a=b"}, "host", files())


def test_kopflet_args_with_config_file() -> None:
    cfg = settings.from_env({"KOPFLET_ARGS": "--config /etc/kopflet/config.yaml"}, "host",
                            files(**{"etc/kopflet/config.yaml": HEADER + "maxPods: 12\n"}))
    assert cfg.max_pods == 12


# --- the config file -------------------------------------------------------------------------------------------

FULL_FILE = """\
staticPodPath: /etc/kubernetes/manifests
podLogsDir: /srv/logs/pods
syncFrequency: 30s
configMapAndSecretChangeDetectionStrategy: Get
fileCheckFrequency: 10s
healthzPort: 10300
healthzBindAddress: 0.0.0.0
clusterDomain: corp.local
clusterDNS: [10.96.0.10, 10.96.0.11]
nodeStatusUpdateFrequency: 5s
nodeStatusReportFrequency: 1m
runtimeRequestTimeout: 4m0s
maxPods: 50
serializeImagePulls: false
systemReserved: {cpu: 100m, memory: 256Mi}
kubeReserved:
  cpu: 200m
  ephemeral-storage: 1Gi
allowedUnsafeSysctls: ["net.core.somaxconn", "kernel.shm*"]
registerWithTaints:
- key: dedicated
  value: edge
  effect: NoSchedule
- {key: example.com/spot, effect: PreferNoSchedule}
containerRuntimeEndpoint: unix:///run/containerd/other.sock
imageServiceEndpoint: unix:///run/images.sock
failCgroupV1: true
address: 10.0.0.5
port: 10350
tlsCertFile: /etc/kopflet/pki/serving.crt
tlsPrivateKeyFile: /etc/kopflet/pki/serving.key
tlsMinVersion: VersionTLS13
tlsCipherSuites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_AES_128_GCM_SHA256]
rotateCertificates: true
serverTLSBootstrap: true
authentication:
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
  anonymous:
    enabled: true
  webhook:
    enabled: false
    cacheTTL: 10s
authorization:
  mode: AlwaysAllow
  webhook:
    cacheAuthorizedTTL: 1m
    cacheUnauthorizedTTL: 5s
containerLogMaxSize: 50Mi
containerLogMaxFiles: 3
containerLogMaxWorkers: 2
containerLogMonitorInterval: 30s
imageGCHighThresholdPercent: 70
imageGCLowThresholdPercent: 0
imageMinimumGCAge: 10m
imageMaximumGCAge: 168h
cpuManagerPolicy: static
cpuManagerPolicyOptions: {full-pcpus-only: "true"}
cpuManagerReconcilePeriod: 5s
reservedSystemCPUs: "0"
memoryManagerPolicy: Static
reservedMemory:
- numaNode: 0
  limits: {memory: 256Mi, hugepages-2Mi: 4Mi}
- numaNode: 1
  limits: {memory: 209715200}
topologyManagerPolicy: single-numa-node
topologyManagerScope: pod
topologyManagerPolicyOptions: {prefer-closest-numa-nodes: "true"}
evictionHard: {memory.available: 200Mi}
evictionSoft: {memory.available: 500Mi}
evictionSoftGracePeriod: {memory.available: 1m}
evictionMinimumReclaim: {memory.available: 50Mi}
evictionPressureTransitionPeriod: 1m
evictionMaxPodGracePeriod: 30
mergeDefaultEvictionSettings: true
seccompDefault: true
localStorageCapacityIsolation: false
enforceNodeAllocatable: [none]
cgroupRoot: /custom
cgroupsPerQOS: false
cgroupDriver: systemd
readOnlyPort: 0
runOnce: false
streamingConnectionIdleTimeout: 30m
eventRecordQPS: 0
eventBurst: 20
podPidsLimit: 1024
protectKernelDefaults: true
featureGates: {QOSReserved: true, LoggingAlphaOptions: true}
qosReserved: {memory: 50%}
httpCheckFrequency: 40s
staticPodURL: http://10.0.0.1/pods
staticPodURLHeader: {Authorization: [Bearer t], X-A: [a, b]}
volumeStatsAggPeriod: 2m
memorySwap: {swapBehavior: NoSwap}
logging:
  format: text
  flushFrequency: 2s
  verbosity: 3
  vmodule: [{filePattern: workers, verbosity: 4}]
  options: {text: {splitStream: true, infoBufferSize: "0"}, json: {splitStream: true, infoBufferSize: 64Ki}}
enableSystemLogHandler: false
enableSystemLogQuery: true
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
shutdownGracePeriodByPodPriority:
- {priority: 2000000000, shutdownGracePeriodSeconds: 10}
- {priority: 0, shutdownGracePeriodSeconds: 30}
crashLoopBackOff: {maxContainerRestartPeriod: 5m}
tracing: {endpoint: "dns:///otel.monitoring:4317", samplingRatePerMillion: 100}
"""


def test_full_config_file() -> None:
    cfg = with_file(FULL_FILE, "--kubeconfig=/etc/kopflet/kubelet.conf")  # rotateCertificates needs it
    assert cfg == AgentConfig(
        node_name="node-1", kubeconfig="/etc/kopflet/kubelet.conf", rotate_certificates=True, server_tls_bootstrap=True,
        pod_manifest_path="/etc/kubernetes/manifests", pod_log_root="/srv/logs/pods",
        resync_period=30.0, config_map_and_secret_strategy="Get",
        file_check_frequency=10.0, healthz_port=10300, healthz_bind_address="0.0.0.0",
        cluster_domain="corp.local", cluster_dns=("10.96.0.10", "10.96.0.11"), node_status_update_frequency=5.0,
        node_status_report_frequency=60.0, runtime_request_timeout=240.0, max_pods=50, serialize_image_pulls=False,
        system_reserved={"cpu": "100m", "memory": "256Mi"}, kube_reserved={"cpu": "200m", "ephemeral-storage": "1Gi"},
        allowed_unsafe_sysctls=("net.core.somaxconn", "kernel.shm*"),
        register_with_taints=(Taint("dedicated", "edge", "NoSchedule"),
                              Taint("example.com/spot", "", "PreferNoSchedule")),
        runtime_endpoint="unix:///run/containerd/other.sock", image_endpoint="unix:///run/images.sock",
        fail_cgroup_v1=True, address="10.0.0.5", port=10350, tls_cert_file="/etc/kopflet/pki/serving.crt",
        tls_private_key_file="/etc/kopflet/pki/serving.key", tls_min_version="VersionTLS13",
        tls_cipher_suites=("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256"),
        client_ca_file="/etc/kubernetes/pki/ca.crt",
        anonymous_auth=True, authentication_token_webhook=False, authentication_token_webhook_cache_ttl=10.0,
        authorization_mode="AlwaysAllow", authorization_webhook_cache_authorized_ttl=60.0,
        authorization_webhook_cache_unauthorized_ttl=5.0, container_log_max_size=50 * 1024 * 1024,
        container_log_max_files=3, container_log_max_workers=2, container_log_monitor_interval=30.0,
        image_gc_high_threshold_percent=70, image_gc_low_threshold_percent=0, image_minimum_gc_age=600.0,
        image_maximum_gc_age=168 * 3600.0, cpu_manager_policy="static",
        cpu_manager_policy_options={"full-pcpus-only": "true"}, cpu_manager_reconcile_period=5.0,
        reserved_system_cpus="0", memory_manager_policy="Static",
        reserved_memory=(MemoryReservation(0, {"memory": "256Mi", "hugepages-2Mi": "4Mi"}),
                         MemoryReservation(1, {"memory": "209715200"})),
        topology_manager_policy="single-numa-node", topology_manager_scope="pod",
        topology_manager_policy_options={"prefer-closest-numa-nodes": "true"},
        eviction_hard={"memory.available": "200Mi"},
        eviction_soft={"memory.available": "500Mi"}, eviction_soft_grace_period={"memory.available": "1m"},
        eviction_minimum_reclaim={"memory.available": "50Mi"}, eviction_pressure_transition_period=60.0,
        eviction_max_pod_grace_period=30, merge_default_eviction_settings=True,
        seccomp_default=True, local_storage_capacity_isolation=False, enforce_node_allocatable=("none",),
        streaming_connection_idle_timeout=1800.0, event_record_qps=0, event_burst=20, pod_pids_limit=1024,
        protect_kernel_defaults=True, enable_system_log_handler=False, enable_system_log_query=True,
        cgroup_root="/custom", cgroups_per_qos=False, cgroup_driver="systemd",
        feature_gates={"QOSReserved": True, "LoggingAlphaOptions": True}, qos_reserved={"memory": "50%"},
        http_check_frequency=40.0, static_pod_url="http://10.0.0.1/pods",
        static_pod_url_header={"Authorization": ("Bearer t",), "X-A": ("a", "b")}, volume_stats_agg_period=120.0,
        memory_swap_behavior="NoSwap", log_verbosity=3,
        tracing_endpoint="dns:///otel.monitoring:4317", tracing_sampling_rate_per_million=100,
        log_flush_frequency=2.0, log_vmodule=(("workers", 4),), log_text_split_stream=True,
        log_json_split_stream=True, log_json_info_buffer_size="64Ki",
        shutdown_grace_period_by_pod_priority=(ShutdownGracePeriodByPodPriority(2000000000, 10),
                                               ShutdownGracePeriodByPodPriority(0, 30)),
    )
    assert cfg.healthz_endpoint == "http://0.0.0.0:10300/healthz"


@pytest.mark.parametrize(("argv", "body", "flag", "field", "effective"), [
    ((), "", False, False, False),
    (("--seccomp-default",), "", True, False, True),
    (("--seccomp-default=false",), "seccompDefault: true\n", False, True, True),  # the flag cannot turn it off
    ((), "seccompDefault: false\n", False, False, False),
    (("--seccomp-default=true",), "seccompDefault: false\n", True, False, True),
], ids=["unset", "flag", "file over a false flag", "file false", "flag over a false file"])
def test_seccomp_default_is_the_flag_or_the_field(argv: tuple[str, ...], body: str, flag: bool, field: bool,
                                                 effective: bool) -> None:
    """Upstream server.go: KubeletFlags.SeccompDefault || KubeletConfiguration.SeccompDefault."""
    cfg = with_file(body, *argv)
    assert (cfg.seccomp_default_flag, cfg.seccomp_default, cfg.effective_seccomp_default) == (flag, field, effective)


def test_json_config_file() -> None:
    text = '{"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "maxPods": 7}'
    assert run(["--config=/k.json"], **{"k.json": text}).max_pods == 7


def test_empty_config_file_body_gives_the_defaults() -> None:
    assert with_file("") == AgentConfig(node_name="node-1")


@pytest.mark.parametrize(("body", "expected"), [
    # Upstream defaulting: zero or null values of omitempty fields mean the default.
    ("maxPods: 0\n", {"max_pods": 110}),
    ("syncFrequency: 0s\n", {"resync_period": 60.0}),
    ("staticPodPath: ''\n", {"pod_manifest_path": ""}),
    ("maxPods: null\n", {"max_pods": 110}),
    ("clusterDNS: []\n", {"cluster_dns": ()}),
    # ... but pointer fields keep an explicit zero.
    ("healthzPort: 0\n", {"healthz_port": 0, "healthz_endpoint": ""}),
    ("serializeImagePulls: false\n", {"serialize_image_pulls": False}),
    # localStorageCapacityIsolation is a *bool upstream (defaults.go: nil means true): false is a value.
    ("localStorageCapacityIsolation: false\n", {"local_storage_capacity_isolation": False}),
    ("localStorageCapacityIsolation: true\n", {"local_storage_capacity_isolation": True}),
    ("localStorageCapacityIsolation: null\n", {"local_storage_capacity_isolation": True}),
    # nodeStatusReportFrequency defaults to an explicit nodeStatusUpdateFrequency of the file.
    ("nodeStatusUpdateFrequency: 20s\n", {"node_status_update_frequency": 20.0, "node_status_report_frequency": 20.0}),
    ("nodeStatusUpdateFrequency: 20s\nnodeStatusReportFrequency: 2m\n", {"node_status_report_frequency": 120.0}),
    ("containerRuntimeEndpoint: unix:///run/r.sock\n", {"image_endpoint": "unix:///run/r.sock"}),
    ("healthzBindAddress: '::1'\n", {"healthz_endpoint": "http://[::1]:10248/healthz"}),
    # The kubelet API: zero values mean the defaults, but the *bool fields keep an explicit false.
    ("port: 0\n", {"port": 10250}),
    ("authentication:\n", {"anonymous_auth": False, "authentication_token_webhook": True}),
    ("authentication: {webhook: {cacheTTL: 0s}}\n", {"authentication_token_webhook_cache_ttl": 120.0}),
    ("authentication: {webhook: null, x509: {clientCAFile: ''}}\n", {"client_ca_file": ""}),
    ("authentication: {webhook: {enabled: false}}\n", {"authentication_token_webhook": False}),
    ("authentication: {anonymous: {enabled: false}}\n", {"anonymous_auth": False}),
    ("authorization: {mode: ''}\n", {"authorization_mode": "Webhook"}),
    ("authorization: {webhook: {cacheAuthorizedTTL: 0s, cacheUnauthorizedTTL: 1m}}\n",
     {"authorization_webhook_cache_authorized_ttl": 300.0, "authorization_webhook_cache_unauthorized_ttl": 60.0}),
])
def test_config_file_defaulting(body: str, expected: dict[str, Any]) -> None:
    cfg = with_file(body)
    assert {name: getattr(cfg, name) for name in expected} == expected


@pytest.mark.parametrize(("body", "message"), [
    ("fooBar: 1\n", 'unknown field "fooBar"'),
    ("maxpods: 1\n", 'unknown field "maxpods" (did you mean maxPods?)'),
    ("hairpinMode: promiscuous-bridge\n", 'field "hairpinMode" is not supported by kopflet'),
    ("systemCgroups: /system\n", 'field "systemCgroups" is not supported'),
    ("readOnlyPort: 10255\n", 'field "readOnlyPort": kopflet serves no read-only port'),
    ("makeIPTablesUtilChains: true\n", 'field "makeIPTablesUtilChains" is not supported'),
    ("authentication: []\n", 'field "authentication": expected a mapping, got a list'),
    ("authentication: {x509: yes}\n", 'field "authentication.x509": expected a mapping, got true'),
    ("authentication: {x509: {clientCAFil: /ca.crt}}\n",
     'unknown field "authentication.x509.clientCAFil" (did you mean authentication.x509.clientCAFile?)'),
    ("authentication: {webhok: {}}\n", 'unknown field "authentication.webhok" (did you mean authentication.webhook?)'),
    ("authentication: {webhook: {cacheTTL: 2}}\n", 'field "authentication.webhook.cacheTTL": expected a string'),
    ("authentication: {anonymous: {enabled: 'yes'}}\n",
     'field "authentication.anonymous.enabled": expected true or false, got "yes"'),
    ("authorization: {mode: RBAC}\n", 'field "authorization.mode": unknown authorization mode "RBAC"'),
    ("authorization: {webhook: {cacheUnauthorizedTTL: -1s}}\n",
     'field "authorization.webhook.cacheUnauthorizedTTL": must not be a negative duration'),
    ("port: 70000\n", 'field "port": must be a port number'),
    ("address: localhost\n", 'field "address": "localhost" is not an IP address'),
    ("tlsCertFile: /k.crt\n", "--tls-cert-file (tlsCertFile) and --tls-private-key-file (tlsPrivateKeyFile)"),
    ("maxPods: many\n", 'field "maxPods": expected an integer, got "many"'),
    ("maxPods: '110'\n", 'field "maxPods": expected an integer, got "110"'),
    ("maxPods: 1.5\n", 'field "maxPods": expected an integer, got 1.5'),
    ("maxPods: true\n", 'field "maxPods": expected an integer, got true'),
    ("maxPods: -3\n", 'field "maxPods": must not be negative'),
    ("healthzPort: 65536\n", 'field "healthzPort": must be a port number'),
    ("syncFrequency: 60\n", 'field "syncFrequency": expected a string, got 60'),
    ("syncFrequency: soon\n", 'field "syncFrequency": expected a duration'),
    ("syncFrequency: -1s\n", 'field "syncFrequency": must not be a negative duration'),
    ("serializeImagePulls: 'no'\n", 'field "serializeImagePulls": expected true or false, got "no"'),
    ("localStorageCapacityIsolation: 'false'\n",
     'field "localStorageCapacityIsolation": expected true or false, got "false"'),
    ("localStorageCapacityIsolation: 0\n", 'field "localStorageCapacityIsolation": expected true or false, got 0'),
    ("clusterDNS: 10.96.0.10\n", 'field "clusterDNS": expected a list of strings, got "10.96.0.10"'),
    ("clusterDNS: [10.96.0.300]\n", 'field "clusterDNS": "10.96.0.300" is not an IP address'),
    ("clusterDomain: [a]\n", 'field "clusterDomain": expected a string, got a list'),
    ("staticPodPath: {a: b}\n", 'field "staticPodPath": expected a string, got a mapping'),
    ("podLogsDir: logs\n", 'field "podLogsDir": "logs" must be an absolute path'),
    ("systemReserved: {cpu: 1}\n", 'field "systemReserved": expected a mapping of strings, got 1 for "cpu"'),
    ("systemReserved: {gpu: '1'}\n", 'field "systemReserved": cannot reserve "gpu"'),
    ("kubeReserved: [cpu]\n", 'field "kubeReserved": expected a mapping of strings, got a list'),
    ("allowedUnsafeSysctls: [1]\n", 'field "allowedUnsafeSysctls": expected a list of strings, got an item 1'),
    ("registerWithTaints: [{key: k, effect: Bad}]\n", 'field "registerWithTaints": invalid taint "k:Bad"'),
    ("registerWithTaints: [{key: k}]\n", 'field "registerWithTaints": item 0: a taint needs a key and an effect'),
    ("registerWithTaints: [{key: k, effect: NoSchedule, timeAdded: x}]\n",
     'field "registerWithTaints": item 0: unknown field "timeAdded"'),
    ("registerWithTaints: [k:NoSchedule]\n", 'field "registerWithTaints": item 0: expected a taint'),
    ("registerWithTaints: {key: k}\n", 'field "registerWithTaints": expected a list of taints'),
    ("containerRuntimeEndpoint: tcp://x:1\n", 'field "containerRuntimeEndpoint": "tcp://x:1" must be a unix://'),
    ("maxPods: 1\nmaxPods: 2\n", 'duplicate field "maxPods"'),
    ("maxPods: [\n", "not valid YAML"),
])
def test_config_file_errors_name_the_field(body: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        with_file(body)
    text = str(info.value)
    assert text.startswith("config file /k.yaml: ") or "tlsCertFile" in message
    assert message in text


def test_config_file_reports_every_problem_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        with_file("fooBar: 1\nmaxPods: many\nsystemCgroups: /system\n")
    text = str(info.value)
    assert text.startswith("config file /k.yaml: 3 problems:")
    for part in ('unknown field "fooBar"', 'field "maxPods"', 'field "systemCgroups"'):
        assert part in text


@pytest.mark.parametrize(("text", "message"), [
    ("kind: KubeletConfiguration\n", 'apiVersion must be "kubelet.config.k8s.io/v1beta1", got null'),
    ("apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n", 'got "kubelet.config.k8s.io/v1"'),
    ("apiVersion: kubelet.config.k8s.io/v1beta1\n", 'kind must be "KubeletConfiguration", got null'),
    ("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n", 'got "KubeProxyConfiguration"'),
    ("", "expected one KubeletConfiguration document, found 0"),
    (HEADER + "---\n" + HEADER, "found 2"),
    ("- a\n- b\n", "expected a KubeletConfiguration mapping, got a list"),
])
def test_config_file_header_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        run(["--config=/k.yaml"], **{"k.yaml": text})
    assert str(info.value).startswith("config file /k.yaml: ")
    assert message in str(info.value)


def test_unreadable_config_file() -> None:
    with pytest.raises(ConfigError, match=r"--config /missing\.yaml: cannot read it: No such file or directory"):
        run(["--config=/missing.yaml"])


def test_config_file_from_the_environment_below_the_flag() -> None:
    files_ = {"env.yaml": HEADER + "maxPods: 7\n", "flag.yaml": HEADER + "maxPods: 9\n"}
    assert run(environ={"KOPFLET_CONFIG": "/env.yaml"}, **files_).max_pods == 7
    assert run(["--config=/flag.yaml"], environ={"KOPFLET_CONFIG": "/env.yaml"}, **files_).max_pods == 9
    with pytest.raises(ConfigError, match=r"KOPFLET_CONFIG /nope\.yaml: cannot read it"):
        run(environ={"KOPFLET_CONFIG": "/nope.yaml"})


@pytest.mark.parametrize(("value", "strategy", "error"), [
    ("", "Watch", ""),
    ("Watch", "Watch", ""),
    ("Get", "Get", ""),
    ("Cache", "", 'configMapAndSecretChangeDetectionStrategy "Cache" is not supported by kopflet (upstream\'s TTL '
               'cache); use "Watch" or "Get"'),
    ("watch", "", "unknown configmap and secret manager mode: watch"),
])
def test_config_map_and_secret_strategy(value: str, strategy: str, error: str) -> None:
    body = f"configMapAndSecretChangeDetectionStrategy: {value!r}\n"
    if error:
        with pytest.raises(ConfigError) as info:
            with_file(body)
        assert str(info.value) == error
    else:
        assert with_file(body).config_map_and_secret_strategy == strategy


def test_every_known_field_is_either_honoured_or_refused() -> None:
    honoured = {s.field for s in settings.SETTINGS if s.field}
    assert not honoured & settings.UNSUPPORTED_FIELDS
    assert not {field.split(".")[0] for field in honoured} & settings.UNSUPPORTED_FIELDS
    full = yaml.safe_load(FULL_FILE)
    for field in sorted(honoured):
        node = full
        for part in field.split("."):
            assert isinstance(node, dict) and part in node, f"{field} is not exercised by FULL_FILE"
            node = node[part]


# --- precedence: flag > file > legacy environment > default ---------------------------------------------------

@pytest.mark.parametrize(("argv", "body", "environ", "expected"), [
    ([], "", {}, 110),
    ([], "maxPods: 50\n", {}, 50),
    (["--max-pods=20"], "maxPods: 50\n", {}, 20),
    (["--max-pods=20"], "", {}, 20),
])
def test_precedence_max_pods(argv: list[str], body: str, environ: dict[str, str], expected: int) -> None:
    cfg = run(["--config=/k.yaml", *argv], environ, **{"k.yaml": HEADER + body})
    assert cfg.max_pods == expected


@pytest.mark.parametrize(("argv", "body", "environ", "expected"), [
    ([], "", {}, DEFAULT_RUNTIME_ENDPOINT),
    ([], "", {"CONTAINER_RUNTIME_ENDPOINT": "unix:///env.sock"}, "unix:///env.sock"),
    ([], "containerRuntimeEndpoint: unix:///file.sock\n", {"CONTAINER_RUNTIME_ENDPOINT": "unix:///env.sock"},
     "unix:///file.sock"),
    (["--container-runtime-endpoint=unix:///flag.sock"], "containerRuntimeEndpoint: unix:///file.sock\n",
     {"CONTAINER_RUNTIME_ENDPOINT": "unix:///env.sock"}, "unix:///flag.sock"),
])
def test_precedence_runtime_endpoint(argv: list[str], body: str, environ: dict[str, str], expected: str) -> None:
    cfg = run(["--config=/k.yaml", *argv], environ, **{"k.yaml": HEADER + body})
    assert (cfg.runtime_endpoint, cfg.image_endpoint) == (expected, expected)


@pytest.mark.parametrize(("argv", "body", "expected"), [
    ([], "", True),
    ([], "localStorageCapacityIsolation: false\n", False),
    (["--local-storage-capacity-isolation=true"], "localStorageCapacityIsolation: false\n", True),
    (["--local-storage-capacity-isolation=false"], "localStorageCapacityIsolation: true\n", False),
    (["--local-storage-capacity-isolation=false"], "", False),
])
def test_precedence_local_storage_capacity_isolation(argv: list[str], body: str, expected: bool) -> None:
    assert with_file(body, *argv).local_storage_capacity_isolation is expected


def test_precedence_maps_and_lists_from_a_flag_replace_the_file() -> None:
    cfg = with_file("systemReserved: {cpu: 1m, memory: 1Mi}\nclusterDNS: [10.0.0.1]\n"
                    "registerWithTaints: [{key: a, effect: NoSchedule}]\n",
                    "--system-reserved=cpu=5m", "--cluster-dns=10.0.0.2", "--register-with-taints=b:NoExecute")
    assert cfg.system_reserved == {"cpu": "5m"}
    assert cfg.cluster_dns == ("10.0.0.2",)
    assert cfg.register_with_taints == (Taint("b", "", "NoExecute"),)


def test_flag_update_frequency_keeps_the_report_default() -> None:
    # The flag applies after the file's defaulting upstream: only a file's update frequency moves the report's.
    assert run(["--node-status-update-frequency=20s"]).node_status_report_frequency == 300.0


def test_config_flag_position_does_not_matter() -> None:
    cfg = run(["--max-pods=3", "--config=/k.yaml"], **{"k.yaml": HEADER + "maxPods: 9\n"})
    assert cfg.max_pods == 3


# --- the documentation matches the code -----------------------------------------------------------------------

def test_readme_documents_every_flag_and_honoured_field() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Running the agent", 1)[1].split("\n## ", 1)[0]
    for setting in settings.SETTINGS:
        if setting.flag and setting.flag != "v":
            assert f"`--{setting.flag}" in section, f"--{setting.flag} is not in README's Running the agent"
        if setting.field:
            assert f"`{setting.field}`" in section, f"{setting.field} is not in README's config file table"
    for name in settings.LEGACY_ENV:
        assert f"`{name}`" in section


def test_usage_lists_every_flag() -> None:
    text = settings.usage()
    for setting in settings.SETTINGS:
        if setting.flag:
            assert f"--{setting.flag}" in text


@pytest.mark.parametrize(("argv", "text", "message"), [
    (["--image-gc-low-threshold=85"], "", r"imageGCLowThresholdPercent \(--image-gc-low-threshold\) 85 must be less "
                                          r"than imageGCHighThresholdPercent \(--image-gc-high-threshold\) 85"),
    (["--image-gc-high-threshold=101"], "", r"--image-gc-high-threshold: 101 must be between 0 and 100, inclusive"),
    ([], "imageGCHighThresholdPercent: 0\n", r"imageGCLowThresholdPercent .* 80 must be less than .* 0"),
    ([], "imageMaximumGCAge: 1m\n", r"imageMaximumGCAge 1m0s must be greater than imageMinimumGCAge 2m0s"),
    (["--container-log-max-files=1"], "", r"containerLogMaxFiles must be greater than 1"),
    ([], "containerLogMaxFiles: 0\n", r"containerLogMaxFiles must be greater than 1"),
    ([], "containerLogMaxWorkers: 0\n", r"containerLogMaxWorkers must be greater than or equal to 1"),
    ([], "containerLogMonitorInterval: 1s\n", r"containerLogMonitorInterval must be .* greater than or equal to 3s"),
    (["--container-log-max-size=ten"], "", r"failed to parse container log max size \"ten\""),
    (["--container-log-max-size=0"], "", r"container log max size must be positive"),
    # cgroupsPerQOS off needs enforceNodeAllocatable empty or none (upstream ValidateKubeletConfiguration)
    (["--cgroups-per-qos=false"], "", r"^invalid configuration: cgroupsPerQOS \(--cgroups-per-qos\) must be set to "
     r"true when \"pods\" contained in enforceNodeAllocatable \(--enforce-node-allocatable\)$"),
    ([], "cgroupsPerQOS: false\nenforceNodeAllocatable: [pods, system-reserved]\n",
     r"^\[invalid configuration: cgroupsPerQOS \(--cgroups-per-qos\) must be set to true when \"pods\" contained "
     r"in enforceNodeAllocatable \(--enforce-node-allocatable\), invalid configuration: systemReservedCgroup "
     r"\(--system-reserved-cgroup\) must be specified when \"system-reserved\" or \"system-reserved-compressible\" "
     r"included in enforceNodeAllocatable \(--enforce-node-allocatable\), invalid configuration: cgroupsPerQOS "
     r"\(--cgroups-per-qos\) must be set to true when \"system-reserved\" contained in enforceNodeAllocatable "
     r"\(--enforce-node-allocatable\)\]$"),
    (["--cgroup-driver=systemD"], "", r"^invalid configuration: option \"systemD\" specified for cgroupDriver "
     r"\(--cgroup-driver\)\. Valid options are \"cgroupfs\" or \"systemd\"$"),
    (["--cgroup-driver=systemd", "--cgroup-root=/a//b"], "",
     r"^invalid configuration: cgroupRoot \(--cgroup-root\) \"/a//b\": invalid slice name: a--b-kubepods\.slice$"),
    (["--enforce-node-allocatable=pods,none"], "", r"^invalid configuration: enforceNodeAllocatable "
     r"\(--enforce-node-allocatable\) may not contain additional enforcements when \"none\" is specified$"),
    (["--enforce-node-allocatable=system-reserved"], "", r"^invalid configuration: systemReservedCgroup "
     r"\(--system-reserved-cgroup\) must be specified when \"system-reserved\" or \"system-reserved-compressible\" "
     r"included in enforceNodeAllocatable \(--enforce-node-allocatable\)$"),
    ([], "enforceNodeAllocatable: [pods, pods, cpu]\n",
     r"^\[invalid configuration: duplicated enforcements \"pods\" in enforceNodeAllocatable "
     r"\(--enforce-node-allocatable\), invalid configuration: option \"cpu\" specified for enforceNodeAllocatable "
     r"\(--enforce-node-allocatable\)\. Valid options are \"pods\", \"system-reserved\", "
     r"\"system-reserved-compressible\", \"kube-reserved\", \"kube-reserved-compressible\" or \"none\"\]$"),
])
def test_log_rotation_and_image_gc_settings_are_checked_as_upstream(argv: list[str], text: str,
                                                                     message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        if text:
            with_file(text, *argv)
        else:
            run(argv)


def test_eviction_settings_parse_as_upstream() -> None:
    cfg = run(["--eviction-hard=memory.available<1Gi,nodefs.available<5%", "--eviction-soft=memory.available<2Gi",
               "--eviction-soft-grace-period=memory.available=1m30s"])
    assert cfg.effective_eviction_hard == {"memory.available": "1Gi", "nodefs.available": "5%"}
    signals = [(t.signal, t.grace_period) for t in cfg.eviction_config.thresholds]
    # with "pods" enforced (the default), the hard memory threshold again for allocatableMemory.available
    assert signals == [("memory.available", 0.0), ("nodefs.available", 0.0), ("memory.available", 90.0),
                       ("allocatableMemory.available", 0.0)]
    unenforced = run(["--eviction-hard=memory.available<1Gi", "--enforce-node-allocatable=none"])
    assert [t.signal for t in unenforced.eviction_config.thresholds] == ["memory.available"]
    assert run().effective_eviction_hard["imagefs.available"] == "15%"  # the Linux defaults
    merged = with_file("evictionHard: {memory.available: 1Gi}\nmergeDefaultEvictionSettings: true\n")
    assert merged.effective_eviction_hard["nodefs.available"] == "10%"
    assert with_file("evictionHard: {}\n").effective_eviction_hard == {}


@pytest.mark.parametrize(("argv", "message"), [
    (["--eviction-hard=memory.available>1Gi"], r"malformed pair, expect string<string"),
    (["--eviction-soft=memory.available<1Gi"], r"grace period must be specified for the soft eviction threshold"),
    (["--eviction-hard=disk.available<1Gi"], r"unsupported eviction signal disk.available"),
])
def test_bad_eviction_settings_are_refused(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        run(argv)


# --- tlsMinVersion, tlsCipherSuites (k8s.io/component-base/cli/flag: TLSVersion, TLSCipherSuites) --------------

@pytest.mark.parametrize(("argv", "body", "expected"), [
    ([], "", ("", ())),
    (["--tls-min-version=VersionTLS10"], "", ("VersionTLS10", ())),
    (["--tls-min-version", "VersionTLS11"], "", ("VersionTLS11", ())),
    ([], "tlsMinVersion: VersionTLS13\n", ("VersionTLS13", ())),
    (["--tls-min-version=VersionTLS12"], "tlsMinVersion: VersionTLS13\n", ("VersionTLS12", ())),
    (["--tls-min-version="], "tlsMinVersion: VersionTLS13\n", ("VersionTLS13", ())),  # empty flag: unset
    ([], "tlsMinVersion: ''\n", ("", ())),
    (["--tls-cipher-suites=TLS_RSA_WITH_RC4_128_SHA,TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305"], "",
     ("", ("TLS_RSA_WITH_RC4_128_SHA", "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305"))),
    # pflag StringSlice: a repeated flag appends; the flag replaces the file's list.
    (["--tls-cipher-suites=TLS_AES_128_GCM_SHA256", "--tls-cipher-suites=TLS_RSA_WITH_AES_128_GCM_SHA256"],
     "tlsCipherSuites: [TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA]\n",
     ("", ("TLS_AES_128_GCM_SHA256", "TLS_RSA_WITH_AES_128_GCM_SHA256"))),
    ([], "tlsCipherSuites: [TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA]\n", ("", ("TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",))),
    (["--tls-cipher-suites="], "", ("", ())),
    ([], "tlsCipherSuites: []\n", ("", ())),
])
def test_tls_options(argv: list[str], body: str, expected: tuple[str, tuple[str, ...]]) -> None:
    cfg = with_file(body, *argv)
    assert (cfg.tls_min_version, cfg.tls_cipher_suites) == expected


@pytest.mark.parametrize(("argv", "body", "message"), [
    (["--tls-min-version=VersionTLS14"], "", '--tls-min-version: unknown tls version "VersionTLS14"'),
    (["--tls-min-version=TLSv1.2"], "", '--tls-min-version: unknown tls version "TLSv1.2"'),
    (["--tls-min-version=versiontls12"], "", 'unknown tls version "versiontls12"'),
    ([], "tlsMinVersion: VersionTLS9\n", 'field "tlsMinVersion": unknown tls version "VersionTLS9"'),
    ([], "tlsMinVersion: 12\n", 'field "tlsMinVersion": expected a string, got 12'),
    (["--tls-cipher-suites=ECDHE-RSA-AES128-GCM-SHA256"], "",
     "--tls-cipher-suites: Cipher suite ECDHE-RSA-AES128-GCM-SHA256 not supported or doesn't exist"),
    (["--tls-cipher-suites=TLS_AES_128_GCM_SHA256, TLS_AES_256_GCM_SHA384"], "",
     "Cipher suite  TLS_AES_256_GCM_SHA384 not supported or doesn't exist"),
    (["--tls-cipher-suites=TLS_AES_128_GCM_SHA256,"], "", "Cipher suite  not supported or doesn't exist"),
    ([], "tlsCipherSuites: [TLS_FALLBACK_SCSV]\n",
     "field \"tlsCipherSuites\": Cipher suite TLS_FALLBACK_SCSV not supported or doesn't exist"),
    ([], "tlsCipherSuites: TLS_AES_128_GCM_SHA256\n", 'field "tlsCipherSuites": expected a list of strings'),
])
def test_tls_option_errors(argv: list[str], body: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        with_file(body, *argv)
    assert message in str(info.value)


RUN_ONCE = ("invalid configuration: runOnce (--runOnce) true, Runonce mode has been deprecated and should not be "
            "set")


@pytest.mark.parametrize(("argv", "body", "refused"), [
    ([], "runOnce: false\n", False),  # upstream's default: taken
    (["--runonce=false"], "", False),
    (["--runonce"], "", True),
    ([], "runOnce: true\n", True),
    (["--runonce=false"], "runOnce: true\n", False),  # upstream validates the merged configuration: the flag wins
    (["--runonce=true"], "runOnce: false\n", True),
])
def test_run_once_is_refused_with_upstreams_validation_error(argv: list[str], body: str, refused: bool) -> None:
    """v1.37.1 still has --runonce and runOnce, and its validation refuses true; kopflet has no run-once mode."""
    if refused:
        with pytest.raises(ConfigError) as info:
            with_file(body, *argv)
        assert str(info.value) == RUN_ONCE
    else:
        assert with_file(body, *argv).run_once is False


def test_tls_curve_preferences_are_still_refused() -> None:
    with pytest.raises(ConfigError, match='field "tlsCurvePreferences" is not supported by kopflet'):
        with_file("tlsCurvePreferences: [23]\n")


# --- the CIS Benchmark's kubelet settings (readOnlyPort, streaming idle timeout, events, pids, kernel) ----------

@pytest.mark.parametrize(("argv", "body", "expected"), [
    # readOnlyPort: 0 is what CIS 4.2.4 asks, and all kopflet takes.
    (["--read-only-port=0"], "", {"read_only_port": 0}),
    ([], "readOnlyPort: 0\n", {"read_only_port": 0}),
    # streamingConnectionIdleTimeout: 4h; 0 on the command line is no timeout, in the file the default.
    ([], "", {"streaming_connection_idle_timeout": 14400.0}),
    (["--streaming-connection-idle-timeout=0"], "", {"streaming_connection_idle_timeout": 0.0}),
    (["--streaming-connection-idle-timeout=5m"], "", {"streaming_connection_idle_timeout": 300.0}),
    ([], "streamingConnectionIdleTimeout: 0s\n", {"streaming_connection_idle_timeout": 14400.0}),
    ([], "streamingConnectionIdleTimeout: 1h\n", {"streaming_connection_idle_timeout": 3600.0}),
    # eventRecordQPS is a pointer (an explicit 0 is no limit); eventBurst is not (0 in the file is 100).
    ([], "", {"event_record_qps": 50, "event_burst": 100}),
    ([], "eventRecordQPS: 0\neventBurst: 0\n", {"event_record_qps": 0, "event_burst": 100}),
    (["--event-qps=0", "--event-burst=0"], "", {"event_record_qps": 0, "event_burst": 0}),
    (["--event-qps=5", "--event-burst=7"], "eventRecordQPS: 1\neventBurst: 2\n",
     {"event_record_qps": 5, "event_burst": 7}),
    # podPidsLimit: a pointer defaulted to -1 when unset or negative in the file; the flag keeps its value.
    ([], "", {"pod_pids_limit": -1}),
    ([], "podPidsLimit: 0\n", {"pod_pids_limit": 0}),
    ([], "podPidsLimit: -7\n", {"pod_pids_limit": -1}),
    ([], "podPidsLimit: 4096\n", {"pod_pids_limit": 4096}),
    (["--pod-max-pids=100"], "podPidsLimit: 4096\n", {"pod_pids_limit": 100}),
    (["--pod-max-pids=-1"], "", {"pod_pids_limit": -1}),
    # protectKernelDefaults.
    ([], "", {"protect_kernel_defaults": False}),
    (["--protect-kernel-defaults"], "", {"protect_kernel_defaults": True}),
    ([], "protectKernelDefaults: true\n", {"protect_kernel_defaults": True}),
])
def test_cis_settings(argv: list[str], body: str, expected: dict[str, Any]) -> None:
    cfg = with_file(body, *argv)
    assert {name: getattr(cfg, name) for name in expected} == expected


@pytest.mark.parametrize(("argv", "body", "message"), [
    (["--read-only-port=10255"], "", "--read-only-port: kopflet serves no read-only port: readOnlyPort "
     "(--read-only-port) must be 0 (disabled)"),
    ([], "readOnlyPort: 10255\n", 'field "readOnlyPort": kopflet serves no read-only port'),
    (["--read-only-port=70000"], "", "invalid configuration: readOnlyPort (--read-only-port) 70000 must be between "
     "0 and 65535, inclusive"),
    ([], "readOnlyPort: -1\n", "readOnlyPort (--read-only-port) -1 must be between 0 and 65535, inclusive"),
    (["--streaming-connection-idle-timeout=-1s"], "", "--streaming-connection-idle-timeout: must not be a negative"),
    (["--event-qps=-1"], "", "invalid configuration: eventRecordQPS (--event-qps) -1 must not be a negative number"),
    ([], "eventBurst: -1\n", "invalid configuration: eventBurst (--event-burst) -1 must not be a negative number"),
    (["--event-qps=-1", "--event-burst=-2"], "",
     "[invalid configuration: eventBurst (--event-burst) -2 must not be a negative number, invalid configuration: "
     "eventRecordQPS (--event-qps) -1 must not be a negative number]"),
    ([], "podPidsLimit: many\n", 'field "podPidsLimit": expected an integer'),
    ([], "protectKernelDefaults: yes please\n", 'field "protectKernelDefaults": expected true or false'),
    (["--make-iptables-util-chains=true"], "", "unknown flag: --make-iptables-util-chains"),
])
def test_cis_settings_refused(argv: list[str], body: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        with_file(body, *argv)
    assert message in str(info.value)
