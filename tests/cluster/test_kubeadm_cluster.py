"""A kubeadm cluster whose kubelet is kopflet: the control plane kopflet runs as static pods, the node kubeadm
registered, and kube-proxy and CoreDNS serving pods on it (Services by ClusterIP, NodePort and DNS name).

Every check goes through real clients: kubectl as the cluster's admin, agnhost's own client in a pod, and the
host's TCP stack for the NodePort."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator

import pytest

from devstack.layout import Layout, host_ip
from tests.conftest import Kubectl

AGNHOST = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


def wait(check, what: str, timeout: float = 120.0, interval: float = 1.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout:.0f}s (last: {last!r})")


def test_the_node_is_kopflet_and_ready(kubectl: Kubectl, layout: Layout) -> None:
    node = kubectl.json("get", "node", layout.node_name)
    assert "kopflet" in node["status"]["nodeInfo"]["kubeletVersion"]
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True", ready
    assert "node-role.kubernetes.io/control-plane" in node["metadata"]["labels"]  # kubeadm's mark-control-plane


@pytest.mark.parametrize("component", CONTROL_PLANE)
def test_the_control_plane_runs_as_static_pods_with_mirror_pods(kubectl: Kubectl, layout: Layout,
                                                                component: str) -> None:
    pod = kubectl.json("-n", "kube-system", "get", "pod", f"{component}-{layout.node_name}")
    annotations = pod["metadata"]["annotations"]
    assert annotations["kubernetes.io/config.source"] == "file"
    assert "kubernetes.io/config.mirror" in annotations
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "Node"
    assert pod["status"]["phase"] == "Running"
    assert next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")["status"] == "True"


@pytest.mark.parametrize(("label", "minimum"), [("k8s-app=kube-proxy", 1), ("k8s-app=kube-dns", 1)])
def test_kube_proxy_and_coredns_run_on_the_kopflet_node(kubectl: Kubectl, layout: Layout, label: str,
                                                        minimum: int) -> None:
    pods = kubectl.json("-n", "kube-system", "get", "pods", "-l", label)["items"]
    ready = [p for p in pods if p["spec"].get("nodeName") == layout.node_name and any(
        c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))]
    assert len(ready) >= minimum, [(p["metadata"]["name"], p["status"].get("phase")) for p in pods]


@pytest.fixture(scope="module")
def service(kubectl: Kubectl) -> Iterator[dict]:
    """A namespace with an agnhost netexec server behind a NodePort Service, and a client pod."""
    ns = f"cluster-{uuid.uuid4().hex[:6]}"
    kubectl.run("create", "namespace", ns)
    kubectl.apply(f"""
apiVersion: v1
kind: Pod
metadata: {{name: server, namespace: {ns}, labels: {{app: server}}}}
spec:
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
  type: NodePort
  selector: {{app: server}}
  ports: [{{port: 80, targetPort: 8080}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: client, namespace: {ns}}}
spec:
  containers:
  - name: c
    image: {AGNHOST}
    args: [pause]
""")
    for pod in ("server", "client"):
        kubectl.run("-n", ns, "wait", "--for=condition=Ready", f"pod/{pod}", "--timeout=180s")
    svc = kubectl.json("-n", ns, "get", "service", "web")
    yield {"namespace": ns, "service": svc}
    kubectl.run("delete", "namespace", ns, "--wait=false", check=False)


def _exec(kubectl: Kubectl, ns: str, *command: str) -> tuple[int, str]:
    proc = kubectl.run("-n", ns, "exec", "client", "--", *command, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def _curl(kubectl: Kubectl, ns: str, url: str) -> str:
    """The body the client pod gets from `url`, tried until it answers (kube-proxy syncs its rules in a second)."""

    def attempt() -> str:
        code, out = _exec(kubectl, ns, "curl", "-sS", "--max-time", "5", url)
        return out if code == 0 else ""

    return wait(attempt, f"curl {url} from the client pod")


def test_a_cluster_ip_service_reaches_its_pod_through_kube_proxy(kubectl: Kubectl, service: dict) -> None:
    ns, ip = service["namespace"], service["service"]["spec"]["clusterIP"]
    assert _curl(kubectl, ns, f"http://{ip}/hostname").strip() == "server"


def test_a_service_resolves_by_name_through_coredns_with_the_cluster_first_search_path(kubectl: Kubectl,
                                                                                      service: dict) -> None:
    ns = service["namespace"]
    resolv = _exec(kubectl, ns, "cat", "/etc/resolv.conf")[1]
    assert f"search {ns}.svc.cluster.local svc.cluster.local cluster.local" in resolv, resolv
    assert "nameserver 10.96.0.10" in resolv, resolv
    # "web" alone: the pod's search path (dnsPolicy ClusterFirst) makes it web.<ns>.svc.cluster.local
    assert _curl(kubectl, ns, "http://web/hostname").strip() == "server"
    code, out = _exec(kubectl, ns, "nslookup", "kubernetes.default")
    assert code == 0 and "10.96.0.1" in out, out


def test_a_node_port_answers_on_the_nodes_address(service: dict) -> None:
    port = service["service"]["spec"]["ports"][0]["nodePort"]

    def get() -> str:
        try:
            with socket.create_connection((host_ip(), port), timeout=5) as sock:
                sock.sendall(b"GET /hostname HTTP/1.0\r\nHost: node\r\n\r\n")
                data = b""
                while chunk := sock.recv(4096):
                    data += chunk
                return data.decode(errors="replace")
        except OSError:
            return ""

    answer = wait(get, f"NodePort {port}")
    assert answer.startswith("HTTP/1.") and answer.rstrip().endswith("server"), answer


def _top(kubectl: Kubectl, *args: str) -> list[list[str]]:
    """`kubectl top` rows, tried until the metrics API has a sample (metrics-server scrapes every 15 s)."""

    def attempt() -> list[list[str]]:
        proc = kubectl.run("top", *args, "--no-headers", check=False)
        return [line.split() for line in proc.stdout.splitlines() if line.strip()] if proc.returncode == 0 else []

    return wait(attempt, f"kubectl top {' '.join(args)}", timeout=180, interval=5)


def test_kubectl_top_reads_kopflets_resource_metrics_through_metrics_server(kubectl: Kubectl,
                                                                            layout: Layout) -> None:
    (name, cpu, _cpu_share, memory, _memory_share), = _top(kubectl, "node")
    assert name == layout.node_name
    assert cpu.endswith("m") and int(cpu[:-1]) > 0, cpu
    assert memory.endswith("Mi") and int(memory[:-2]) > 0, memory
    pods = {row[1]: row for row in _top(kubectl, "pod", "-A")}
    for pod in (f"etcd-{layout.node_name}", f"kube-apiserver-{layout.node_name}"):
        _ns, _name, _cpu, memory = pods[pod]
        assert int(memory.removesuffix("Mi")) > 0, pods[pod]
    assert any(row[1].startswith("coredns-") for row in pods.values())


def test_the_unit_got_ready_and_the_default_log_has_no_line_per_pod_event(layout: Layout) -> None:
    """kopflet told the unit it was ready (sd_notify READY=1, as upstream's kubelet tells systemd), and at the default
    verbosity its log has what an operator needs, not Kopf's or the sync loop's line per pod event."""
    text = (layout.logs / "kubelet.log").read_text(errors="replace")
    current = text[text.rindex("kubelet.service: starting"):]  # this run of kopflet
    assert "kubelet.service: READY=1" in current
    assert "Handler 'pod_event' succeeded" not in current
    assert "SyncLoop" not in current
    assert "static pod kube-system/kube-apiserver-" in current  # what it does log: the static pods it starts
