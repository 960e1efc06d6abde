"""devstack/cluster.py and devstack/kubelet_unit.py: the kubeadm configuration and the kubelet unit's command line."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
import yaml

from devstack import cluster, cluster_join, kubelet_unit
from devstack.layout import Layout


def layout(tmp_path: Path) -> Layout:
    return Layout(root=tmp_path, cache=tmp_path / "cache", node_name="node-1")


@pytest.mark.parametrize("v1", [True, False])
def test_the_kubeadm_config_names_the_stack_and_kubeadms_kubelet_directory(tmp_path: Path, v1: bool) -> None:
    docs = list(yaml.safe_load_all(cluster.kubeadm_config(layout(tmp_path), "192.0.2.2", v1=v1)))
    init, clusterconf, kubelet = docs
    assert init["kind"] == "InitConfiguration" and init["apiVersion"] == "kubeadm.k8s.io/v1beta4"
    assert init["localAPIEndpoint"] == {"advertiseAddress": "192.0.2.2", "bindPort": 6443}
    registration = init["nodeRegistration"]
    assert registration["name"] == "node-1" and registration["taints"] == []
    assert registration["criSocket"].startswith("unix:///")
    assert registration["kubeletExtraArgs"] == [{"name": "root-dir", "value": "/var/lib/kubelet"}]
    assert clusterconf["kubernetesVersion"].startswith("v1.")
    assert clusterconf["networking"]["podSubnet"] and clusterconf["networking"]["serviceSubnet"]
    assert kubelet["cgroupDriver"] == "cgroupfs"
    assert ("failCgroupV1" in kubelet) is v1 and kubelet.get("failCgroupV1", False) is False
    assert cluster.ignored_preflight(v1) == (("SystemVerification",) if v1 else ())


def test_cgroup_v1_is_told_by_the_unified_root(tmp_path: Path) -> None:
    assert cluster.cgroup_v1(tmp_path)
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    assert not cluster.cgroup_v1(tmp_path)


def test_environment_files_as_systemd_reads_them() -> None:
    text = ('# kubeadm\nKUBELET_KUBEADM_ARGS="--root-dir=/var/lib/kubelet --node-ip=192.0.2.2"\n; comment\n'
            "KUBELET_EXTRA_ARGS='--v=2'\nBARE=value\nnot an assignment\n")
    assert kubelet_unit.parse_environment_file(text) == {
        "KUBELET_KUBEADM_ARGS": "--root-dir=/var/lib/kubelet --node-ip=192.0.2.2", "KUBELET_EXTRA_ARGS": "--v=2",
        "BARE": "value"}


def test_exec_start_is_the_drop_ins_command_line() -> None:
    env = {"KUBELET_KUBEADM_ARGS": "--root-dir=/var/lib/kubelet", "KUBELET_EXTRA_ARGS": "--v=2"}
    assert kubelet_unit.exec_start("/usr/bin/kubelet", env) == [
        "/usr/bin/kubelet", "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
        "--kubeconfig=/etc/kubernetes/kubelet.conf", "--config=/var/lib/kubelet/config.yaml",
        "--root-dir=/var/lib/kubelet", "--v=2"]
    assert kubelet_unit.exec_start("/usr/bin/kubelet", {})[-1] == "--config=/var/lib/kubelet/config.yaml"


def test_the_second_node_has_its_own_paths_name_and_pod_range() -> None:
    layout = Layout(root=Path('/x/.devstack'), cache=Path('/var/cache/kopflet'), node_name='node-1')
    node = cluster_join.node_layout(layout)
    assert node.node_name == f"{layout.node_name}-2"
    assert node.pod_cidr == cluster_join.POD_SUBNET
    assert node.containerd_socket != layout.containerd_socket and node.root != layout.root
    assert node.cni_data_dir != layout.cni_data_dir
    assert node.registry_storage == layout.registry_storage  # the same images, served in its namespace
    assert not ipaddress.ip_network(node.pod_cidr).overlaps(ipaddress.ip_network(layout.pod_cidr))
    assert not ipaddress.ip_network(node.pod_cidr).overlaps(ipaddress.ip_network(layout.service_cidr))


@pytest.mark.parametrize("v1", [True, False])
def test_the_join_configuration(v1: bool) -> None:
    layout = Layout(root=Path('/x/.devstack'), cache=Path('/var/cache/kopflet'), node_name='node-1')
    docs = list(yaml.safe_load_all(cluster_join.join_config(layout, "192.0.2.2:6443", "abcdef.0123456789abcdef",
                                                            "sha256:00", v1=v1)))
    (join,) = docs
    assert join["kind"] == "JoinConfiguration" and join["apiVersion"] == "kubeadm.k8s.io/v1beta4"
    assert join["discovery"]["bootstrapToken"] == {"apiServerEndpoint": "192.0.2.2:6443",
                                                   "token": "abcdef.0123456789abcdef", "caCertHashes": ["sha256:00"]}
    reg = join["nodeRegistration"]
    assert reg["name"] == cluster_join.node_name(layout)
    assert reg["criSocket"] == cluster_join.node_layout(layout).runtime_endpoint
    assert reg["taints"] == []
    assert {a["name"]: a["value"] for a in reg["kubeletExtraArgs"]} == {
        "root-dir": cluster.KUBELET_ROOT, "node-ip": cluster_join.NODE_ADDR}
    assert reg.get("ignorePreflightErrors", []) == (["SystemVerification"] if v1 else [])
    assert join["patches"]["directory"].endswith("/patches")
    assert yaml.safe_load(cluster_join.kubelet_patch()) == {"cgroupRoot": cluster_join.CGROUP_ROOT}


@pytest.mark.parametrize(("notifications", "now", "expired"), [
    ([], 89.9, False),
    ([], 90.0, True),  # TimeoutStartSec=90 from the start
    ([(10.0, ["READY=1"])], 1000.0, False),  # started: no start timeout any more
    ([(80.0, ["STATUS=waiting", "EXTEND_TIMEOUT_USEC=60000000"])], 139.0, False),  # extended to 140 s
    ([(80.0, ["EXTEND_TIMEOUT_USEC=60000000"])], 140.0, True),  # and not again
    ([(10.0, ["EXTEND_TIMEOUT_USEC=1000000"])], 89.0, False),  # an extension never shortens the original maximum
    ([(80.0, ["EXTEND_TIMEOUT_USEC=60000000"]), (130.0, ["EXTEND_TIMEOUT_USEC=60000000"])], 189.0, False),
    ([(80.0, ["EXTEND_TIMEOUT_USEC=60000000"]), (130.0, ["READY=1"])], 500.0, False),
    ([(80.0, ["EXTEND_TIMEOUT_USEC=bogus"])], 90.0, True),
])
def test_the_unit_start_timeout(notifications: list[tuple[float, list[str]]], now: float, expired: bool) -> None:
    """systemd's TimeoutStartSec of a Type=notify unit with sd_notify's EXTEND_TIMEOUT_USEC (sd_notify(3))."""
    start = kubelet_unit.StartTimeout(started=0.0)
    for at, states in notifications:
        start.notified(states, at)
    assert start.expired(now) is expired


def test_the_unit_restarts_kopflet_when_kubeadm_rewrites_its_flags() -> None:
    """kubeadm writes kubeadm-flags.env, then asks systemd to restart the kubelet: without systemd, the runner sees
    the file change and restarts it, so a kopflet started before the file was written does not run on without it."""
    import subprocess
    import time

    reads = iter([{}, {}, {"KUBELET_KUBEADM_ARGS": "--hostname-override=vm-2"}])
    child = subprocess.Popen(["sleep", "30"])
    try:
        code = kubelet_unit._wait(child, kubelet_unit.StartTimeout(time.monotonic()),
                                  lambda: next(reads, {"KUBELET_KUBEADM_ARGS": "--hostname-override=vm-2"}))
    finally:
        child.kill()
        child.wait()
    assert code == kubelet_unit.RESTARTED
    assert child.returncode == -15  # stopped with SIGTERM, not killed


def test_the_unit_waits_for_kopflet_while_its_flags_stay() -> None:
    import subprocess
    import time

    child = subprocess.Popen(["sh", "-c", "sleep 1; exit 3"])
    code = kubelet_unit._wait(child, kubelet_unit.StartTimeout(time.monotonic()), dict)
    assert code == 3


def test_the_unit_starts_kopflet_only_once_kubeadm_has_written_its_flags(tmp_path: Path) -> None:
    config, flags = tmp_path / "config.yaml", tmp_path / "kubeadm-flags.env"
    assert kubelet_unit.wait_for_flags(config, flags, timeout=0.3)  # no config yet: systemd's crash loop goes on
    config.write_text("kind: KubeletConfiguration\n")
    assert not kubelet_unit.wait_for_flags(config, flags, timeout=0.3)  # config without flags: waited, then started
    flags.touch()  # kubeadm's WriteFile has created the file and not yet written it
    assert not kubelet_unit.wait_for_flags(config, flags, timeout=0.3)
    flags.write_text('KUBELET_KUBEADM_ARGS="--hostname-override=vm-2"\n')
    assert kubelet_unit.wait_for_flags(config, flags, timeout=0.3)


def test_the_unit_waits_for_kubeadms_config_before_it_starts_kopflet(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    assert not kubelet_unit.wait_for_config(config, stopping=lambda: True)  # stopped while waiting
    config.write_text("kind: KubeletConfiguration\n")
    assert kubelet_unit.wait_for_config(config, stopping=lambda: True)


def test_the_second_node_keeps_kopflets_own_root_to_itself() -> None:
    # A start without kubeadm's flags uses kopflet's default root; the host's holds another cluster's certificate.
    assert {"/var/lib/kopflet", "/var/lib/kubelet", "/etc/kubernetes"} <= set(cluster_join.PRIVATE_PATHS)
