"""The stack's generated configuration files (pure text; the stack tests run them for real)."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import yaml

from devstack import configs, pki, stack
from devstack.layout import REPO, Layout, read_versions

LAYOUT = Layout(root=Path("/r/.devstack"), cache=Path("/c"), node_name="node-a")
CRI = "io.containerd.grpc.v1.cri"


def test_containerd_config_has_cri_settings_this_vm_needs() -> None:
    cfg = tomllib.loads(configs.containerd_config(LAYOUT))
    cri = cfg["plugins"][CRI]
    assert cri["restrict_oom_score_adj"] is True
    assert cri["sandbox_image"] == "registry.k8s.io/pause:3.10.1"
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is False  # cgroupfs
    assert cri["cni"]["bin_dir"] == "/usr/lib/cni"
    assert cri["registry"]["config_path"] == "/r/.devstack/containerd/certs.d"
    assert cfg["grpc"]["address"] == "/run/kopflet/containerd/containerd.sock"


def test_mirrors_route_public_registries_to_the_local_one_and_nowhere_else() -> None:
    files = configs.registry_host_files(LAYOUT)
    assert set(files) == {"docker.io/hosts.toml", "registry.k8s.io/hosts.toml", "127.0.0.1:5050/hosts.toml",
                          "127.0.0.1:5001/hosts.toml"}
    for name, text in files.items():
        hosts = tomllib.loads(text)
        # the private registry (behind a login) is reached as itself; everything else goes to the public one
        expected = "http://127.0.0.1:5001" if name.startswith("127.0.0.1:5001") else "http://127.0.0.1:5050"
        assert hosts["server"] == expected
        assert list(hosts["host"]) == [expected]


def test_the_stack_leaves_port_5000_to_upstreams_fake_registry() -> None:
    """The image-pull specs run agnhost's fake-registry-server on hostPort 5000 (test/e2e/framework/registry)."""
    addrs = {LAYOUT.registry_addr, LAYOUT.private_registry_addr}
    assert addrs == {"127.0.0.1:5050", "127.0.0.1:5001"}
    assert "addr: 127.0.0.1:5050" in configs.registry_config(LAYOUT)
    assert not any(":5000" in text for text in configs.registry_host_files(LAYOUT).values())
    # images/build-agent-image.sh pushes the agent's base there unless told otherwise
    script = (REPO / "images" / "build-agent-image.sh").read_text()
    assert f"registry=${{KOPFLET_REGISTRY-{LAYOUT.registry_addr}}}" in script.splitlines()


def test_private_registry_wants_a_login() -> None:
    conf = configs.private_registry_config(LAYOUT)
    assert "addr: 127.0.0.1:5001" in conf and f"path: {LAYOUT.private_registry_htpasswd}" in conf


def test_cni_conflist_is_a_bridge_with_portmap() -> None:
    conf = json.loads(configs.cni_conflist(LAYOUT))
    assert [p["type"] for p in conf["plugins"]] == ["bridge", "portmap"]
    assert conf["plugins"][0]["ipam"]["ranges"] == [[{"subnet": "10.88.0.0/16"}]]


def test_cni_bridge_lets_the_node_reach_its_pods() -> None:
    """The node-pod networking specs dial pod IPs from a hostNetwork pod, and the agent's HTTP/TCP probes
    do too: that works only because the bridge is the pods' gateway (the host gets the subnet's first
    address on it, hence an on-link route to the pod CIDR) and the plugin turns on IPv4 forwarding."""
    bridge = json.loads(configs.cni_conflist(LAYOUT))["plugins"][0]
    assert bridge["isGateway"] is True
    assert bridge["ipam"]["routes"] == [{"dst": "0.0.0.0/0"}]  # pods route everything via the bridge address
    assert bridge["ipMasq"] is True and bridge["hairpinMode"] is True


def test_env_file_exports_what_the_readme_promises() -> None:
    text = configs.env_file(LAYOUT)
    exported = dict(line[len("export "):].split("=", 1) for line in text.splitlines() if line.startswith("export "))
    assert exported["KUBECONFIG"] == "/r/.devstack/kubeconfig/admin.kubeconfig"
    assert exported["CONTAINER_RUNTIME_ENDPOINT"] == "unix:///run/kopflet/containerd/containerd.sock"
    assert exported["PATH"].startswith(f'"{LAYOUT.bin_dir}:')
    assert exported["KOPFLET_REGISTRY"] == "127.0.0.1:5050"


def test_kubeconfig_is_valid_yaml_with_file_references() -> None:
    kc = yaml.safe_load(configs.kubeconfig("https://127.0.0.1:6443", Path("/p/ca.crt"), Path("/p/a.crt"),
                                           Path("/p/a.key"), "u"))
    assert kc["clusters"][0]["cluster"] == {"server": "https://127.0.0.1:6443", "certificate-authority": "/p/ca.crt"}
    assert kc["users"][0]["user"] == {"client-certificate": "/p/a.crt", "client-key": "/p/a.key"}


def test_node_certificate_is_what_the_node_authorizer_recognises() -> None:
    cert = pki.node_cert("node-a")
    assert (cert.cn, cert.orgs, cert.client, cert.server) == ("system:node:node-a", ("system:nodes",), True, False)


def test_versions_pin_one_kubernetes_release_for_all_components() -> None:
    v = read_versions()
    major_minor_patch = v["KUBERNETES_VERSION"].removeprefix("v1.")
    assert v["KUBERNETES_STAGING_VERSION"] == f"v0.{major_minor_patch}"
    assert LAYOUT.bin_dir == Path(f"/c/bin/{v['KUBERNETES_VERSION']}-etcd-{v['ETCD_VERSION']}")


def _stack_layout(tmp_path: Path) -> Layout:
    return Layout(root=tmp_path / ".devstack", cache=tmp_path / "cache", node_name="node-a")


def test_a_registry_running_with_its_old_address_is_found(tmp_path: Path) -> None:
    """A clone whose registry was started on 127.0.0.1:5000: `up` must restart it, not wait for it on 5050."""
    layout = _stack_layout(tmp_path)
    layout.pids.mkdir(parents=True)
    configs_now = stack.registry_configs(layout)
    path, text = configs_now["registry"]
    path.write_text(text.replace("127.0.0.1:5050", "127.0.0.1:5000"))
    private_path, private_text = configs_now["registry-private"]
    private_path.write_text(private_text)
    assert stack.reconfigured(layout) == []  # neither runs: nothing to restart
    for name in ("registry", "registry-private"):
        (layout.pids / f"{name}.pid").write_text(f"{os.getpid()}\n")  # a live process stands in for each
    assert stack.reconfigured(layout) == ["registry"]
    path.write_text(text)
    assert stack.reconfigured(layout) == []
    path.unlink()  # running, but its config file is gone: it cannot be the one this version wants
    assert stack.reconfigured(layout) == ["registry"]


def test_containerd_hosts_of_a_moved_registry_are_removed(tmp_path: Path) -> None:
    certs_d = tmp_path / "certs.d"
    wanted = configs.registry_host_files(LAYOUT)
    for rel in [*wanted, "127.0.0.1:5000/hosts.toml"]:
        (certs_d / rel).parent.mkdir(parents=True, exist_ok=True)
        (certs_d / rel).write_text("x")
    assert stack.prune_host_dirs(certs_d, wanted) == ["127.0.0.1:5000"]
    assert sorted(str(p.relative_to(certs_d)) for p in certs_d.rglob("hosts.toml")) == sorted(wanted)
    assert stack.prune_host_dirs(certs_d, wanted) == []
    assert stack.prune_host_dirs(tmp_path / "missing", wanted) == []


def test_private_files_are_0600_even_when_they_were_not(tmp_path: Path) -> None:
    """Kubeconfigs and the agent's config file: CIS 4.1.5 and 4.1.9 (docs/security.md), also over an older 0644."""
    fresh, older = tmp_path / "fresh.kubeconfig", tmp_path / "older.yaml"
    older.write_text("old text that is longer than the new\n")
    older.chmod(0o644)
    for path in (fresh, older):
        stack.write_private(path, "new\n")
        assert path.read_text() == "new\n"
        assert path.stat().st_mode & 0o777 == 0o600


# --- TLS bootstrap, as kubeadm sets it up ---------------------------------------------------------------------

def test_bootstrap_kubeconfig_holds_the_token_and_the_cluster_only() -> None:
    kc = yaml.safe_load(configs.bootstrap_kubeconfig("https://127.0.0.1:6443", Path("/p/ca.crt"),
                                                     "abcdef.0123456789abcdef"))
    assert kc["current-context"] == "tls-bootstrap-token-user@kubernetes"
    assert kc["clusters"] == [{"name": "kubernetes", "cluster": {"server": "https://127.0.0.1:6443",
                                                                 "certificate-authority": "/p/ca.crt"}}]
    assert kc["users"] == [{"name": "tls-bootstrap-token-user", "user": {"token": "abcdef.0123456789abcdef"}}]
    assert LAYOUT.bootstrap_kubeconfig == Path("/r/.devstack/kubeconfig/bootstrap-kubelet.kubeconfig")


def test_bootstrap_token_secret_is_kubeadms() -> None:
    secret = json.loads(configs.bootstrap_token_secret("abcdef", "0123456789abcdef"))
    assert secret["metadata"] == {"name": "bootstrap-token-abcdef", "namespace": "kube-system"}
    assert secret["type"] == "bootstrap.kubernetes.io/token"
    data = secret["stringData"]
    assert (data["token-id"], data["token-secret"], data["usage-bootstrap-authentication"]) == (
        "abcdef", "0123456789abcdef", "true")
    assert data["auth-extra-groups"] == "system:bootstrappers:kubeadm:default-node-token"
    assert "expiration" not in data and "usage-bootstrap-signing" not in data


def test_tls_bootstrap_bindings_are_kubeadms() -> None:
    bindings = {b["metadata"]["name"]: (b["roleRef"]["name"], b["subjects"][0]["name"])
                for b in yaml.safe_load_all(configs.TLS_BOOTSTRAP_BINDINGS)}
    group = "system:bootstrappers:kubeadm:default-node-token"
    assert bindings == {
        "kubeadm:kubelet-bootstrap": ("system:node-bootstrapper", group),
        "kubeadm:node-autoapprove-bootstrap": ("system:certificates.k8s.io:certificatesigningrequests:nodeclient",
                                               group),
        "kubeadm:node-autoapprove-certificate-rotation": (
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "system:nodes"),
    }


def test_the_bootstrap_token_is_made_once_in_the_apiservers_format(tmp_path: Path) -> None:
    layout = _stack_layout(tmp_path)
    token = stack.bootstrap_token(layout)
    assert stack.BOOTSTRAP_TOKEN.fullmatch(token)
    assert stack.bootstrap_token(layout) == token
    assert oct(layout.bootstrap_token_file.stat().st_mode & 0o777) == "0o600"
    layout.bootstrap_token_file.write_text("not a token\n")
    assert stack.bootstrap_token(layout) != token  # an unusable one is replaced


def test_the_apiserver_takes_bootstrap_tokens() -> None:
    apiserver = next(c for c in stack.components(LAYOUT) if c.name == "kube-apiserver")
    assert "--enable-bootstrap-token-auth=true" in apiserver.argv
    manager = next(c for c in stack.components(LAYOUT) if c.name == "kube-controller-manager")
    assert "--controllers=*,bootstrapsigner,tokencleaner" in manager.argv  # csrapproving, csrsigning among '*'


def test_an_apiserver_running_with_other_flags_is_restarted(tmp_path: Path) -> None:
    layout = _stack_layout(tmp_path)
    layout.pids.mkdir(parents=True)
    assert stack.reconfigured(layout) == []
    (layout.pids / "kube-apiserver.pid").write_text(f"{os.getpid()}\n")  # this process: other flags
    assert stack.reconfigured(layout) == ["kube-apiserver"]
