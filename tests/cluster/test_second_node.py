"""A second kopflet node joins the kubeadm cluster with ``kubeadm join`` and a bootstrap token
(devstack/cluster_join.py: a network and a mount namespace of its own on this machine, its own containerd): TLS
bootstrap, registration, kube-proxy on it, its pods reachable from the first node's through a Service and by DNS,
its kubelet API behind `kubectl logs` and `exec`; and `leave` takes it off the machine.

Runs after the single-node checks (this file sorts last): while it is joined the cluster has two nodes."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from devstack import cluster_join
from devstack.layout import Layout
from tests.cluster.test_kubeadm_cluster import AGNHOST, wait
from tests.conftest import Kubectl


@pytest.fixture(scope="module")
def node2(layout: Layout, kubectl: Kubectl) -> Iterator[str]:
    cluster_join.join(layout)
    yield cluster_join.node_name(layout)
    cluster_join.leave(layout)


def _ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


def test_the_joined_node_is_kopflet_ready_with_its_own_address(kubectl: Kubectl, node2: str) -> None:
    node = kubectl.json("get", "node", node2)
    assert "kopflet" in node["status"]["nodeInfo"]["kubeletVersion"]
    assert next(c for c in node["status"]["conditions"] if c["type"] == "Ready")["status"] == "True"
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert addresses["InternalIP"] == cluster_join.NODE_ADDR, addresses
    assert not node["spec"].get("taints")
    assert "node-role.kubernetes.io/control-plane" not in node["metadata"]["labels"]  # a worker


def test_the_node_got_its_client_certificate_through_tls_bootstrap(kubectl: Kubectl, node2: str) -> None:
    """kubeadm join leaves a bootstrap token kubeconfig; the kubelet's CSR, approved by kubeadm's auto-approval
    binding, is what its own identity came from."""
    csrs = kubectl.json("get", "csr")["items"]
    mine = [c for c in csrs if c["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet"
            and c["spec"]["username"].startswith("system:bootstrap:")]
    assert any(c["status"].get("certificate") for c in mine), [c["metadata"]["name"] for c in csrs]
    configz = json.loads(kubectl.raw(f"/api/v1/nodes/{node2}/proxy/configz").stdout)["kubeletconfig"]
    assert configz["cgroupRoot"] == cluster_join.CGROUP_ROOT  # kubeadm's patch for this node, taken


def test_kube_proxy_runs_on_the_joined_node(kubectl: Kubectl, node2: str) -> None:
    def ready() -> bool:
        pods = kubectl.json("-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-proxy")["items"]
        return any(p["spec"].get("nodeName") == node2 and _ready(p) for p in pods)

    wait(ready, f"kube-proxy Ready on {node2}")


@pytest.fixture(scope="module")
def across(kubectl: Kubectl, layout: Layout, node2: str) -> Iterator[str]:
    """A server pod on the joined node behind a Service, and a client pod on the first node."""
    ns = f"join-{uuid.uuid4().hex[:6]}"
    kubectl.run("create", "namespace", ns)
    kubectl.apply(f"""
apiVersion: v1
kind: Pod
metadata: {{name: server, namespace: {ns}, labels: {{app: server}}}}
spec:
  nodeName: {node2}
  containers:
  - name: netexec
    image: {AGNHOST}
    args: [netexec, --http-port=8080]
    readinessProbe: {{httpGet: {{path: /healthz, port: 8080}}, periodSeconds: 1}}
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: {ns}}}
spec:
  selector: {{app: server}}
  ports: [{{port: 80, targetPort: 8080}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: client, namespace: {ns}}}
spec:
  nodeName: {layout.node_name}
  containers:
  - name: c
    image: {AGNHOST}
    args: [pause]
""")
    for pod in ("server", "client"):
        kubectl.run("-n", ns, "wait", "--for=condition=Ready", f"pod/{pod}", "--timeout=180s")
    yield ns
    kubectl.run("delete", "namespace", ns, "--wait=false", check=False)


def test_a_pod_on_the_joined_node_gets_an_address_of_its_range(kubectl: Kubectl, across: str) -> None:
    pod = kubectl.json("-n", across, "get", "pod", "server")
    assert pod["status"]["podIP"].startswith(cluster_join.POD_SUBNET.rsplit(".", 2)[0] + "."), pod["status"]
    assert pod["status"]["hostIP"] == cluster_join.NODE_ADDR


def test_a_pod_on_the_first_node_reaches_it_by_service_name(kubectl: Kubectl, across: str) -> None:
    def attempt() -> str:
        proc = kubectl.run("-n", across, "exec", "client", "--", "curl", "-sS", "--max-time", "5",
                           "http://web/hostname", check=False)
        return proc.stdout if proc.returncode == 0 else ""

    assert wait(attempt, "curl http://web/hostname from the first node").strip() == "server"


def test_logs_and_exec_go_through_the_joined_nodes_kubelet(kubectl: Kubectl, across: str) -> None:
    out = kubectl.run("-n", across, "exec", "server", "--", "cat", "/etc/hostname").stdout
    assert out.strip() == "server"
    logs = kubectl.run("-n", across, "logs", "server").stdout
    assert "Started HTTP server on port 8080" in logs, logs


def test_leave_takes_the_node_off_the_machine(kubectl: Kubectl, layout: Layout, node2: str, across: str) -> None:
    kubectl.run("delete", "namespace", across, "--wait=false")
    cluster_join.leave(layout)
    assert not cluster_join.has_traces(layout)
    ip = subprocess.run(["ip", "link", "show", cluster_join.VETH_HOST], capture_output=True, text=True)
    assert ip.returncode != 0
    assert kubectl.run("get", "node", node2, check=False).returncode != 0
