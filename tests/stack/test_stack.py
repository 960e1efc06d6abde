"""The local stack itself: a real apiserver with TLS, Node+RBAC authorization and NodeRestriction,
the node identity the agent runs as, and the registry with the project's images."""

from __future__ import annotations

import json
import urllib.request
import uuid

from devstack import configs
from devstack.layout import Layout, read_versions
from tests.conftest import Kubectl, forbidden


def test_apiserver_ready_over_tls(admin: Kubectl) -> None:
    assert admin.raw("/readyz").stdout.strip() == "ok"


def test_apiserver_is_the_pinned_release(admin: Kubectl) -> None:
    version = json.loads(admin.raw("/version").stdout)
    assert version["gitVersion"] == read_versions()["KUBERNETES_VERSION"]


def test_node_identity(node_kubectl: Kubectl, layout: Layout) -> None:
    who = json.loads(node_kubectl.run("auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]
    assert who["username"] == f"system:node:{layout.node_name}"
    assert "system:nodes" in who["groups"]


def test_node_may_watch_only_its_own_pods(node_kubectl: Kubectl, layout: Layout) -> None:
    own = node_kubectl.raw(f"/api/v1/pods?fieldSelector=spec.nodeName%3D{layout.node_name}")
    assert json.loads(own.stdout)["kind"] == "PodList"
    assert forbidden(node_kubectl.raw("/api/v1/pods", check=False))
    assert forbidden(node_kubectl.raw("/api/v1/pods?fieldSelector=spec.nodeName%3Dsomebody-else", check=False))


def test_node_may_not_read_unreferenced_secrets(admin: Kubectl, node_kubectl: Kubectl) -> None:
    name = f"stack-test-{uuid.uuid4().hex[:8]}"
    admin.run("create", "secret", "generic", name, "--from-literal=k=v", "-n", "default")
    try:
        assert forbidden(node_kubectl.run("get", "secret", name, "-n", "default", check=False))
    finally:
        admin.run("delete", "secret", name, "-n", "default", "--wait=false")


def test_node_may_not_modify_another_node(admin: Kubectl, node_kubectl: Kubectl) -> None:
    other = f"other-node-{uuid.uuid4().hex[:8]}"
    admin.apply(json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": other}}))
    try:
        proc = node_kubectl.run("label", "node", other, "kopflet-test=1", check=False)
        assert forbidden(proc), proc.stderr
        proc = node_kubectl.run("delete", "node", other, check=False)
        assert forbidden(proc), proc.stderr
    finally:
        admin.run("delete", "node", other, "--wait=false")


def test_node_may_not_create_pods_for_another_node(node_kubectl: Kubectl) -> None:
    # NodeRestriction: a node may create only mirror pods bound to itself.
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "not-mine", "namespace": "default"},
           "spec": {"nodeName": "somebody-else", "containers": [{"name": "c", "image": "busybox"}]}}
    assert forbidden(node_kubectl.run("create", "-f", "-", stdin=json.dumps(pod), check=False))


def test_node_may_not_change_another_nodes_pods(admin: Kubectl, node_kubectl: Kubectl) -> None:
    """The Node authorizer and NodeRestriction: no status write, delete or eviction of a pod bound elsewhere."""
    name = f"elsewhere-{uuid.uuid4().hex[:8]}"
    admin.run("create", "-f", "-", stdin=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": "somebody-else", "containers": [{"name": "c", "image": "busybox"}]}}))
    try:
        status = json.dumps({"status": {"phase": "Failed", "reason": "Hijacked"}})
        proc = node_kubectl.run("patch", "pod", name, "-n", "default", "--subresource=status", "--type=merge",
                                "-p", status, check=False)
        assert forbidden(proc), proc.stderr
        proc = node_kubectl.run("delete", "pod", name, "-n", "default", "--grace-period=0", "--force", check=False)
        assert forbidden(proc), proc.stderr
        assert forbidden(node_kubectl.run("get", "pod", name, "-n", "default", check=False))
        assert admin.json("get", "pod", name, "-n", "default")["status"].get("reason") != "Hijacked"
    finally:
        admin.run("delete", "pod", name, "-n", "default", "--grace-period=0", "--force", "--wait=false")


def test_kubelet_client_identity_is_bound_to_kubelet_api_admin(admin: Kubectl) -> None:
    binding = admin.json("get", "clusterrolebinding", "kube-apiserver-kubelet-api-admin")
    assert binding["roleRef"]["name"] == "system:kubelet-api-admin"
    allowed = admin.run("auth", "can-i", "get", "nodes/proxy", "--as=kube-apiserver-kubelet-client", check=False)
    assert allowed.stdout.strip() == "yes"


def test_registry_serves_the_projects_images(layout: Layout) -> None:
    with urllib.request.urlopen(f"http://{layout.registry_addr}/v2/_catalog", timeout=5) as resp:
        repos = json.load(resp)["repositories"]
    assert {"library/busybox", "pause"} <= set(repos)


def test_containerd_config_has_what_this_vm_needs(layout: Layout) -> None:
    text = (layout.containerd_dir / "config.toml").read_text()
    assert text == configs.containerd_config(layout)
    assert "restrict_oom_score_adj = true" in text
