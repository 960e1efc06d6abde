"""The deployment manifests (manifests/): valid for the real apiserver, and RBAC that is exactly what the agent uses.

- Every manifest passes ``kubectl apply --dry-run=server`` (its namespace is created for real first, and removed
  again if this module created it).
- The ClusterRole's and the kube-node-lease Role's rules equal ``EXPECTED_CLUSTER_RULES`` / ``EXPECTED_LEASE_RULES``
  below, so they cannot grow silently; each rule names the code that makes the call, and that code is checked to
  be there. Every apiserver path in kopflet/ and handlers/ is checked to be covered by a rule.
- The ServiceAccount, logged in with a real token, may make each of those calls and is refused a list of
  neighbouring ones (``kubectl auth can-i``); real requests with its kubeconfig work, through kubectl and through
  the agent's own login and client (read-only calls: nothing is registered on the shared stack).
- The DaemonSet's flags and config file are accepted by kopflet's own config loader, and its paths, ports and
  mounts agree with the containerd and CNI configuration in the ConfigMap.

For the main test suite, `service_account_kubeconfig` gives a kubeconfig of the manifests' ServiceAccount, so
the agent can be run with exactly the ClusterRole's permissions::

    from tests.stack.test_manifests import remove_service_account, service_account_kubeconfig
    kubeconfig = service_account_kubeconfig(admin, tmp_path / "kopflet-sa.kubeconfig")
    agent = Agent(layout, tmp_path / "agent.log", env={"KUBECONFIG": str(kubeconfig)})
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import logging
import re
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml

from devstack.layout import Layout
from handlers.configuring import connection_info
from kopflet.client.kubeapi import Credentials, KubeClient
from kopflet.config import settings
from kopflet.server.auth_reviews import SUBJECT_ACCESS_REVIEWS, TOKEN_REVIEWS
from tests.conftest import REPO, Kubectl, forbidden

MANIFESTS = REPO / "manifests"
NAMESPACE = "kopflet-system"
SERVICE_ACCOUNT = "kopflet"
LEASE_NAMESPACE = "kube-node-lease"
# The manifests that make the ServiceAccount and its permissions (the DaemonSet and its ConfigMap are not needed).
RBAC_MANIFESTS = ("00-namespace.yaml", "10-serviceaccount.yaml", "20-rbac.yaml")


@dataclasses.dataclass(frozen=True)
class Rule:
    """One RBAC rule, and where the agent makes each call it allows: (file, text of the call in that file)."""

    group: str
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    used_by: tuple[tuple[str, str], ...]

    def key(self) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
        return self.group, tuple(sorted(self.resources)), tuple(sorted(self.verbs))


# The ClusterRole "kopflet", rule for rule, in the manifest's order.
EXPECTED_CLUSTER_RULES = (
    # Kopf's pod watch (list, then watch) with the spec.nodeName field selector; the housekeeping relist and the
    # mirror-pod check list the same pods.
    Rule("", ("pods",), ("list", "watch"), (
        ("handlers/pods.py", '@kopf.on.event("v1", "pods")'),
        ("handlers/startup.py", 'settings.watching.field_selectors["v1", "pods"] = cfg.pod_field_selector'),
        ("kopflet/client/kubeapi.py", 'self.request("GET", "/api/v1/pods", params={"fieldSelector": field_selector})'),
    )),
    # The final delete (grace 0, UID precondition) after the terminal status; stale mirror pods.
    Rule("", ("pods",), ("delete",), (
        ("kopflet/client/kubeapi.py", 'self.request("DELETE", f"/api/v1/namespaces/{q(namespace)}/pods/{q(name)}"'),
        ("kopflet/status/manager.py", "deleted = await self.api.delete_pod(namespace, name, uid)"),
    )),
    # Mirror pods of static pods.
    Rule("", ("pods",), ("create",), (
        ("kopflet/config/file_source.py", 'self.api.request("POST", f"/api/v1/namespaces/{pod.namespace}/pods"'),
    )),
    # Pod status (strategic merge patch).
    Rule("", ("pods/status",), ("patch",), (
        ("kopflet/client/kubeapi.py",
         'self.request("PATCH", f"/api/v1/namespaces/{q(namespace)}/pods/{q(name)}/status"'),
    )),
    # Registering the Node, adopting an existing one (labels), watching its labels and taints (a list+watch
    # cache, field selector metadata.name), reading them again before a pod is refused.
    Rule("", ("nodes",), ("create", "get", "list", "patch", "watch"), (
        ("kopflet/nodestatus/heartbeat.py", 'self.api.request("POST", "/api/v1/nodes", body=body)'),
        ("kopflet/nodestatus/heartbeat.py", 'api, "/api/v1/nodes", labels_and_taints, what="node",'),
        ("kopflet/client/informer.py", 'self.api.watch(self.path, version, timeout_seconds=timeout,'),
        ("kopflet/nodestatus/heartbeat.py", 'self.api.request("PATCH", f"/api/v1/nodes/{q(self.cfg.node_name)}",'),
        ("kopflet/nodestatus/heartbeat.py", 'self.api.request("GET", f"/api/v1/nodes/{q(self.cfg.node_name)}")'),
    )),
    # Node status; the CSI drivers' node ID annotation and topology labels (upstream PatchNodeStatus).
    Rule("", ("nodes/status",), ("patch",), (
        ("kopflet/nodestatus/heartbeat.py",
         'self.api.request("PATCH", f"/api/v1/nodes/{q(self.cfg.node_name)}/status",'),
        ("kopflet/volumes/csi/nodeinfomanager.py",
         'await self.api.request("PATCH", f"/api/v1/nodes/{q(self.node_name)}/status", body=patch,'),
    )),
    # Pod events, repeats folded into one with a patch.
    Rule("", ("events",), ("create", "patch"), (
        ("kopflet/client/kubeapi.py", 'self.request("POST", f"/api/v1/namespaces/{q(namespace)}/events", body=event)'),
        ("kopflet/client/kubeapi.py", 'self.request("PATCH", f"/api/v1/namespaces/{q(namespace)}/events/{q(name)}",'),
    )),
    # ConfigMaps pods reference (volumes, env, kube-root-ca.crt), a GET at each read: the DaemonSet's config sets
    # configMapAndSecretChangeDetectionStrategy Get, as RBAC cannot scope list and watch to the objects its pods
    # reference (a node identity's Watch strategy lists and watches each one, which the Node authorizer scopes).
    Rule("", ("configmaps",), ("get",), (
        ("kopflet/client/kubeapi.py", 'self.get_or_none(f"/api/v1/namespaces/{q(namespace)}/configmaps/{q(name)}")'),
        ("kopflet/util/manager.py", "return await self.api.get_config_map(pod.namespace, name)"),
    )),
    # Secrets pods reference (volumes, env, imagePullSecrets), likewise a GET at each read.
    Rule("", ("secrets",), ("get",), (
        ("kopflet/client/kubeapi.py", 'self.get_or_none(f"/api/v1/namespaces/{q(namespace)}/secrets/{q(name)}")'),
        ("kopflet/util/manager.py", "return await self.api.get_secret(pod.namespace, name)"),
    )),
    # PVCs pods use and the PVs they are bound to (persistentVolumeClaim and generic ephemeral volumes).
    Rule("", ("persistentvolumeclaims", "persistentvolumes"), ("get",), (
        ("kopflet/volumes/manager.py",
         'f"/api/v1/namespaces/{q(pod.namespace)}/persistentvolumeclaims/{q(name)}"'),
        ("kopflet/volumes/manager.py", 'f"/api/v1/persistentvolumes/{q(name)}"'),
    )),
    # Bound ServiceAccount tokens for projected volumes (TokenRequest).
    Rule("", ("serviceaccounts/token",), ("create",), (
        ("kopflet/volumes/manager.py",
         '"POST", f"/api/v1/namespaces/{q(pod.namespace)}/serviceaccounts/{q(account)}/token"'),
    )),
    # Service environment variables (a list+watch cache: kopflet/client/informer.py lists and watches).
    Rule("", ("services",), ("list", "watch"), (
        ("kopflet/envvars/services.py", 'Informer(api, "/api/v1/services", '),
        ("kopflet/client/informer.py", 'await self.api.request("GET", self.path, params=self.params or None)'),
        ("kopflet/client/informer.py", 'self.api.watch(self.path, version, timeout_seconds=timeout,'),
    )),
    # ClusterTrustBundles for projected clusterTrustBundle sources (a list+watch cache from the first pod that has
    # one, as upstream's informer).
    Rule("certificates.k8s.io", ("clustertrustbundles",), ("list", "watch"), (
        ("kopflet/volumes/trust_bundles.py", 'return f"/apis/certificates.k8s.io/{version}/clustertrustbundles"'),
        ("kopflet/volumes/trust_bundle_manager.py", "Informer(self.api, ctb.list_path(version), "),
        ("kopflet/client/informer.py", 'self.api.watch(self.path, version, timeout_seconds=timeout,'),
    )),
    # runtimeClassName to the CRI handler.
    Rule("node.k8s.io", ("runtimeclasses",), ("get",), (
        ("kopflet/kuberuntime/executor.py", 'self.api.get_or_none(f"/apis/node.k8s.io/v1/runtimeclasses/{name}")'),
    )),
    # The node's CSINode: made at start and for the first driver, a driver's entry written and removed, replaced when
    # an earlier Node of the name owned it.
    Rule("storage.k8s.io", ("csinodes",), ("get", "create", "update", "delete"), (
        ("kopflet/volumes/csi/nodeinfomanager.py", 'CSINODES = "/apis/storage.k8s.io/v1/csinodes"'),
        ("kopflet/volumes/csi/nodeinfomanager.py", "csi_node = await self.api.get_or_none(self._csi_node_path)"),
        ("kopflet/volumes/csi/nodeinfomanager.py", 'return await self.api.request("POST", CSINODES, body=body)'),
        ("kopflet/volumes/csi/nodeinfomanager.py",
         'await self.api.request("PUT", self._csi_node_path, body=install.csi_node)'),
        ("kopflet/volumes/csi/nodeinfomanager.py", 'await self.api.request("DELETE", self._csi_node_path)'),
    )),
    # The kubelet API: bearer tokens.
    Rule("authentication.k8s.io", ("tokenreviews",), ("create",), (
        ("kopflet/server/auth_reviews.py", 'TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"'),
    )),
    # The kubelet API: authorization of each request.
    Rule("authorization.k8s.io", ("subjectaccessreviews",), ("create",), (
        ("kopflet/server/auth_reviews.py",
         'SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"'),
    )),
)

# The Role "kopflet" in kube-node-lease: the node's Lease, renewed with a merge patch, created when missing.
EXPECTED_LEASE_RULES = (
    Rule("coordination.k8s.io", ("leases",), ("create", "patch"), (
        ("kopflet/nodestatus/heartbeat.py",
         'path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases"'),
        ("kopflet/nodestatus/heartbeat.py",
         'self.api.request("PATCH", f"{path}/{q(self.cfg.node_name)}", body={"spec": spec}'),
        ("kopflet/nodestatus/heartbeat.py", 'await self.api.request("POST", path, body={'),
    )),
)

# Neighbouring permissions the ServiceAccount must not have: (verb, resource, subresource, namespace).
DENIED = (
    ("get", "pods", "", "default"),
    ("update", "pods", "", "default"),
    ("patch", "pods", "", "default"),
    ("update", "pods", "status", "default"),
    ("create", "pods", "eviction", "default"),
    ("create", "pods", "exec", "default"),
    ("update", "nodes", "", ""),
    ("delete", "nodes", "", ""),
    ("get", "nodes", "proxy", ""),
    ("list", "secrets", "", "default"),
    ("watch", "secrets", "", "default"),
    ("create", "secrets", "", "default"),
    ("list", "configmaps", "", "default"),
    ("get", "serviceaccounts", "", "default"),
    ("create", "serviceaccounts", "", "default"),
    ("get", "services", "", "default"),
    ("delete", "events", "", "default"),
    ("get", "leases.coordination.k8s.io", "", LEASE_NAMESPACE),
    ("update", "leases.coordination.k8s.io", "", LEASE_NAMESPACE),
    ("delete", "leases.coordination.k8s.io", "", LEASE_NAMESPACE),
    ("patch", "leases.coordination.k8s.io", "", "default"),
    ("create", "leases.coordination.k8s.io", "", "default"),
    ("list", "runtimeclasses.node.k8s.io", "", ""),
    ("list", "csinodes.storage.k8s.io", "", ""),
    ("patch", "csinodes.storage.k8s.io", "", ""),
    ("list", "csidrivers.storage.k8s.io", "", ""),
    ("list", "namespaces", "", ""),
    ("list", "persistentvolumeclaims", "", "default"),
    ("update", "persistentvolumeclaims", "", "default"),
    ("list", "persistentvolumes", "", ""),
    ("create", "persistentvolumes", "", ""),
    ("list", "customresourcedefinitions.apiextensions.k8s.io", "", ""),
    ("create", "certificatesigningrequests.certificates.k8s.io", "", ""),
    ("create", "clustertrustbundles.certificates.k8s.io", "", ""),
    ("create", "podcertificaterequests.certificates.k8s.io", "", "default"),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io", "", ""),
)


# ------------------------------------------------------------------------------------------------ helpers


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def find(kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    for path in sorted(MANIFESTS.glob("*.yaml")):
        for doc in documents(path):
            meta = doc.get("metadata", {})
            if doc.get("kind") == kind and meta.get("name") == name and meta.get("namespace") == namespace:
                return doc
    raise AssertionError(f"no {kind} {namespace + '/' if namespace else ''}{name} in {MANIFESTS}")


def rule_keys(rules: list[dict[str, Any]]) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    for rule in rules:
        assert set(rule) <= {"apiGroups", "resources", "verbs"}, f"unexpected rule fields: {rule}"
        assert len(rule["apiGroups"]) == 1, f"one API group per rule, please: {rule}"
    return [(r["apiGroups"][0], tuple(sorted(r["resources"])), tuple(sorted(r["verbs"]))) for r in rules]


def install_service_account(admin: Kubectl, timeout: float = 120.0) -> None:
    """Apply the namespace, the ServiceAccount, the ClusterRole, the Role and their bindings from manifests/
    (idempotent). Waits out a namespace still being deleted by an earlier clean-up."""
    deadline = time.monotonic() + timeout
    for name in RBAC_MANIFESTS:
        while True:
            proc = admin.run("apply", "-f", str(MANIFESTS / name), check=False)
            if proc.returncode == 0:
                break
            if "being terminated" not in proc.stderr or time.monotonic() > deadline:
                raise AssertionError(f"kubectl apply -f manifests/{name} failed: {proc.stderr}")
            time.sleep(1)


def remove_service_account(admin: Kubectl) -> None:
    """Delete what `install_service_account` made (the namespace last, waiting until it is gone)."""
    for kind, name, namespace in (("clusterrolebinding", "kopflet", None), ("clusterrole", "kopflet", None),
                                  ("rolebinding", "kopflet", LEASE_NAMESPACE), ("role", "kopflet", LEASE_NAMESPACE)):
        admin.run("delete", kind, name, "--ignore-not-found", *(["-n", namespace] if namespace else []))
    admin.run("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true", "--timeout=120s", check=False)


def service_account_kubeconfig(admin: Kubectl, path: Path, *, duration: str = "2h") -> Path:
    """A kubeconfig that logs in as the manifests' ServiceAccount (system:serviceaccount:kopflet-system:kopflet).

    Creates the ServiceAccount, ClusterRole, Role and bindings from manifests/ (`install_service_account`), gets
    a token with ``kubectl create token`` and takes the server and CA from the admin kubeconfig; the file is
    self-contained (CA inlined). Remove the objects with `remove_service_account` when done.
    """
    install_service_account(admin)
    token = admin.run("create", "token", SERVICE_ACCOUNT, "-n", NAMESPACE, f"--duration={duration}").stdout.strip()
    view = admin.json("config", "view", "--raw", "--minify")
    cluster = view["clusters"][0]["cluster"]
    ca = cluster.get("certificate-authority-data")
    if not ca and cluster.get("certificate-authority"):
        ca = base64.b64encode(Path(cluster["certificate-authority"]).read_bytes()).decode()
    server: dict[str, Any] = {"server": cluster["server"]}
    if ca:
        server["certificate-authority-data"] = ca
    kubeconfig = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": server}],
        "users": [{"name": SERVICE_ACCOUNT, "user": {"token": token}}],
        "contexts": [{"name": SERVICE_ACCOUNT, "context": {"cluster": "cluster", "user": SERVICE_ACCOUNT}}],
        "current-context": SERVICE_ACCOUNT,
    }
    path.write_text(json.dumps(kubeconfig, indent=2))
    path.chmod(0o600)
    return path


def _path_resource(path: str) -> tuple[str, str]:
    """An apiserver path (with f-string placeholders) as (API group, resource[/subresource])."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    if parts[0] == "api":
        group, rest = "", parts[2:]
    else:
        group, rest = parts[1], parts[3:]
    if rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    resource = rest[0]
    if len(rest) >= 3:
        resource += f"/{rest[2]}"
    return group, resource


# -------------------------------------------------------------------------------------- pure: the files


def test_every_manifest_is_kubernetes_yaml() -> None:
    # manifests/systemd/ holds the host's units (not Kubernetes objects; tests/unit/test_systemd_units.py), and
    # manifests/cluster/ the kubeadm cluster's add-ons (devstack/cluster.py), Kubernetes objects checked below
    # manifests/csi-hostpath/ the CSI hostpath driver's deployment (issue 22), Kubernetes objects checked below too
    paths = sorted(p for p in MANIFESTS.glob("*") if p.name not in ("systemd", "cluster", "csi-hostpath"))
    assert paths and all(p.suffix == ".yaml" for p in paths), paths
    addons = sorted((MANIFESTS / "cluster").glob("*")) + sorted((MANIFESTS / "csi-hostpath").glob("*"))
    assert addons and all(p.suffix == ".yaml" for p in addons), addons
    for path in addons:
        for doc in documents(path):
            assert doc.get("apiVersion") and doc.get("kind") and doc.get("metadata", {}).get("name"), path
    kinds = set()
    for path in paths:
        for doc in documents(path):
            assert doc.get("apiVersion") and doc.get("kind") and doc.get("metadata", {}).get("name"), path
            kinds.add(doc["kind"])
    assert {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap",
            "DaemonSet"} <= kinds


def test_cluster_role_rules_are_exactly_the_expected_ones() -> None:
    role = find("ClusterRole", "kopflet")
    assert rule_keys(role["rules"]) == [r.key() for r in EXPECTED_CLUSTER_RULES]
    assert "aggregationRule" not in role


def test_lease_role_is_exactly_the_expected_one_and_only_in_kube_node_lease() -> None:
    role = find("Role", "kopflet", LEASE_NAMESPACE)
    assert rule_keys(role["rules"]) == [r.key() for r in EXPECTED_LEASE_RULES]


def test_bindings_give_the_roles_to_the_service_account_only() -> None:
    subject = [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}]
    cluster_binding = find("ClusterRoleBinding", "kopflet")
    assert cluster_binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                          "name": "kopflet"}
    assert cluster_binding["subjects"] == subject
    lease_binding = find("RoleBinding", "kopflet", LEASE_NAMESPACE)
    assert lease_binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kopflet"}
    assert lease_binding["subjects"] == subject
    find("ServiceAccount", SERVICE_ACCOUNT, NAMESPACE)


@pytest.mark.parametrize("rule", EXPECTED_CLUSTER_RULES + EXPECTED_LEASE_RULES,
                         ids=lambda r: f"{r.group or 'core'}:{','.join(r.resources)}:{','.join(r.verbs)}")
def test_every_rule_is_used_by_the_agent(rule: Rule) -> None:
    assert rule.used_by
    for file, text in rule.used_by:
        assert text in (REPO / file).read_text(), f"{file} no longer has {text!r}: is the rule still needed?"


# API calls made only under a node identity, never under the DaemonSet's ServiceAccount: client certificates
# (--bootstrap-kubeconfig, rotateCertificates) need --kubeconfig, which the DaemonSet does not pass (it runs with the
# ServiceAccount's token), and the role must not let that account ask for certificates (the DENIED table above).
# Likewise podCertificate volumes (kopflet/podcertificate/manager.py): a PodCertificateRequest is worth signing only
# because NodeRestriction checks that its pod, ServiceAccount and their UIDs are the requesting node's, which it
# does for node identities alone; reading the ServiceAccount (its UID) is the Node authorizer's "get serviceaccounts
# of my pods". Under the ServiceAccount such a volume fails (FailedMount), and the role gets neither.
NODE_IDENTITY_ONLY = {("certificates.k8s.io", "certificatesigningrequests"),
                      ("certificates.k8s.io", "podcertificaterequests"), ("", "serviceaccounts")}


# Commands a user runs with the user's own credentials, never the agent's: `kopflet explain` reads nodes/proxy as
# whoever runs it (docs/operations.md), so the agent's role needs no rule for it.
USER_COMMANDS = {"handlers/explain.py"}


def test_every_apiserver_path_in_the_agent_is_covered_by_a_rule() -> None:
    granted = {(r.group, resource) for r in EXPECTED_CLUSTER_RULES + EXPECTED_LEASE_RULES for resource in r.resources}
    found = {}
    assert all((REPO / command).is_file() for command in USER_COMMANDS), "a user command is gone: drop it"
    for path in sorted([*REPO.glob("kopflet/**/*.py"), *REPO.glob("handlers/*.py")]):
        if str(path.relative_to(REPO)) in USER_COMMANDS:
            continue
        for match in re.finditer(r'f?"(/apis?/[^"]+)"', path.read_text()):
            found[_path_resource(match.group(1))] = f"{path.relative_to(REPO)}: {match.group(1)}"
    assert len(found) >= 10, found
    assert NODE_IDENTITY_ONLY <= set(found), "a node-identity-only call is gone: drop it from NODE_IDENTITY_ONLY"
    missing = {key: where for key, where in found.items() if key not in granted and key not in NODE_IDENTITY_ONLY}
    assert not missing, f"API calls without an RBAC rule in manifests/20-rbac.yaml: {missing}"


def _daemonset_pod() -> dict[str, Any]:
    return find("DaemonSet", "kopflet", NAMESPACE)["spec"]["template"]["spec"]


def _container(name: str) -> dict[str, Any]:
    return next(c for c in _daemonset_pod()["containers"] if c["name"] == name)


def _config_map() -> dict[str, str]:
    return find("ConfigMap", "kopflet-config", NAMESPACE)["data"]


def _agent_config(node: str = "minikube", host_ip: str = "192.168.49.2") -> settings.AgentConfig:
    """The agent's configuration as the DaemonSet gives it, on a machine whose Node is `node`."""
    agent = _container("agent")
    env = {e["name"]: e for e in agent["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["HOST_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.hostIP"}}
    args = [a.replace("$(NODE_NAME)", node).replace("$(HOST_IP)", host_ip) for a in agent["args"]]
    files = {"/etc/kopflet/config.yaml": _config_map()["config.yaml"]}
    mounts = {m["mountPath"]: m for m in agent["volumeMounts"]}
    assert mounts["/etc/kopflet"]["name"] == "agent-config"
    return settings.load(args, {"NODE_NAME": node}, "ignored-hostname", files.__getitem__)


def test_the_daemonset_registers_its_own_tainted_labelled_node() -> None:
    cfg = _agent_config()
    assert cfg.node_name == "kopflet-minikube"
    assert cfg.node_ip == "192.168.49.2"
    assert cfg.register_with_taints == (settings.Taint("kopflet.dev/agent", "true", "NoSchedule"),)
    assert dict(cfg.node_labels) == {"kopflet.dev/agent": "true"}
    assert _container("agent")["command"] == ["kopflet"]
    # ... and never lands on such a node itself (kopflet would run kopflet).
    terms = _daemonset_pod()["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [{"matchExpressions": [{"key": "kopflet.dev/agent",
                                                                  "operator": "DoesNotExist"}]}]
    assert not any(t.get("key") == "kopflet.dev/agent" or (t.get("operator") == "Exists" and not t.get("key"))
                   for t in _daemonset_pod().get("tolerations", []))


def test_the_daemonset_reads_configmaps_and_secrets_with_get_only() -> None:
    # Its role grants get on them, never list or watch (the DENIED table): the Watch strategy's watches would fail.
    assert _agent_config().config_map_and_secret_strategy == "Get"


def test_the_daemonset_stays_clear_of_a_resident_kubelet() -> None:
    cfg = _agent_config()
    assert (cfg.healthz_port, cfg.port) == (10348, 10350)  # the resident kubelet has 10248 and 10250
    assert cfg.healthz_bind_address == "127.0.0.1"
    assert cfg.root_dir == "/var/lib/kopflet"
    assert cfg.pod_log_root.startswith("/var/log/kopflet/")  # a resident kubelet prunes unknown /var/log/pods dirs
    assert cfg.runtime_endpoint == "unix:///run/kopflet/containerd/containerd.sock"
    pod = _daemonset_pod()
    assert pod["hostNetwork"] is True and pod.get("hostPID", False) is False
    probe = _container("agent")["livenessProbe"]["httpGet"]
    assert (probe["host"], probe["port"], probe["path"]) == ("127.0.0.1", cfg.healthz_port, "/healthz")
    host_paths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert host_paths == {"/var/lib/kopflet", "/run/kopflet", "/var/log/kopflet", "/run/xtables.lock"}
    for container in pod["containers"]:
        resources = container["resources"]
        assert set(resources["requests"]) == set(resources["limits"]) == {"cpu", "memory"}, container["name"]


def test_the_runtime_container_runs_the_containerd_the_agent_talks_to() -> None:
    cfg = _agent_config()
    data = _config_map()
    containerd = tomllib.loads(data["containerd.toml"])
    cri = containerd["plugins"]["io.containerd.grpc.v1.cri"]
    assert f"unix://{containerd['grpc']['address']}" == cfg.runtime_endpoint
    assert containerd["root"].startswith(cfg.root_dir + "/") and containerd["state"].startswith("/run/kopflet/")
    assert cri["restrict_oom_score_adj"] is True
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is False
    runtime = _container("runtime")
    mounts = {m["mountPath"]: m for m in runtime["volumeMounts"]}
    assert mounts[cri["cni"]["conf_dir"]]["name"] == "cni-config"
    assert runtime["command"][-1] == "/etc/kopflet/containerd/start-containerd.sh"
    assert "exec containerd --config /etc/kopflet/containerd/config.toml" in data["start-containerd.sh"]
    volumes = {v["name"]: v for v in _daemonset_pod()["volumes"]}
    items = {i["key"]: i["path"] for i in volumes["runtime-config"]["configMap"]["items"]}
    assert items == {"containerd.toml": "config.toml", "start-containerd.sh": "start-containerd.sh"}
    cni_items = volumes["cni-config"]["configMap"]["items"]
    assert [i["key"] for i in cni_items] == ["10-kopflet.conflist"]
    network = json.loads(data["10-kopflet.conflist"])
    bridge = network["plugins"][0]
    assert bridge["bridge"] == "kopflet0" and bridge["ipam"]["dataDir"].startswith(cfg.root_dir + "/")
    # The paths both containers share are the same inside each: the agent's mounts (tmpfs volumes) propagate
    # to the runtime, which writes the logs the agent serves and listens on the socket it dials.
    agent = {m["mountPath"]: m for m in _container("agent")["volumeMounts"]}
    assert agent[cfg.root_dir]["mountPropagation"] == "Bidirectional"
    assert mounts[cfg.root_dir]["mountPropagation"] == "HostToContainer"
    for shared in (cfg.root_dir, "/run/kopflet", "/var/log/kopflet"):
        assert agent[shared]["name"] == mounts[shared]["name"], shared
    assert all(c["securityContext"]["privileged"] is True for c in _daemonset_pod()["containers"])


def test_the_namespace_admits_privileged_pods() -> None:
    labels = find("Namespace", NAMESPACE)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"


# ----------------------------------------------------------------------------------- against the apiserver


@pytest.fixture(scope="module")
def sa_kubeconfig(layout: Layout, admin: Kubectl, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The ServiceAccount's kubeconfig; what this module created is removed afterwards (not what it found)."""
    existed = admin.run("get", "namespace", NAMESPACE, check=False).returncode == 0
    try:
        yield service_account_kubeconfig(admin, tmp_path_factory.mktemp("sa") / "kopflet.kubeconfig")
    finally:
        if not existed:
            remove_service_account(admin)


@pytest.fixture(scope="module")
def sa(layout: Layout, sa_kubeconfig: Path) -> Kubectl:
    return Kubectl(layout.bin_dir / "kubectl", sa_kubeconfig)


@pytest.mark.stack
@pytest.mark.parametrize("manifest", sorted(p.name for p in MANIFESTS.glob("*.yaml")))
def test_manifest_passes_server_side_dry_run(admin: Kubectl, sa_kubeconfig: Path, manifest: str) -> None:
    # sa_kubeconfig: the namespace exists, so its objects can be dry-run.
    proc = admin.run("apply", "--dry-run=server", "-f", str(MANIFESTS / manifest), check=False)
    assert proc.returncode == 0, proc.stderr
    assert "(server dry run)" in proc.stdout


@pytest.mark.stack
def test_the_service_account_is_who_the_kubeconfig_says(sa: Kubectl) -> None:
    review = sa.json("auth", "whoami")
    assert review["status"]["userInfo"]["username"] == f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"


def _can_i(kubectl: Kubectl, verb: str, resource: str, subresource: str, namespace: str) -> bool:
    args = ["auth", "can-i", verb, resource]
    if subresource:
        args.append(f"--subresource={subresource}")
    args += ["-n", namespace] if namespace else []
    proc = kubectl.run(*args, check=False)
    assert proc.stdout.strip() in ("yes", "no"), proc.stderr
    return proc.stdout.strip() == "yes"


def _allowed_calls() -> list[tuple[str, str, str, str]]:
    calls = []
    for rule, namespace in [(r, "default") for r in EXPECTED_CLUSTER_RULES] + \
            [(r, LEASE_NAMESPACE) for r in EXPECTED_LEASE_RULES]:
        for resource in rule.resources:
            name, _, sub = resource.partition("/")
            qualified = f"{name}.{rule.group}" if rule.group else name
            for verb in rule.verbs:
                calls.append((verb, qualified, sub, namespace))
    return calls


@pytest.mark.stack
@pytest.mark.parametrize("call", _allowed_calls(), ids=lambda c: "-".join(p for p in c if p))
def test_the_service_account_may_make_the_agents_calls(sa: Kubectl, call: tuple[str, str, str, str]) -> None:
    assert _can_i(sa, *call)


@pytest.mark.stack
@pytest.mark.parametrize("call", DENIED, ids=lambda c: "-".join(p for p in c if p))
def test_the_service_account_may_not_do_more(sa: Kubectl, call: tuple[str, str, str, str]) -> None:
    assert not _can_i(sa, *call)


@pytest.mark.stack
def test_real_requests_with_the_service_account(sa: Kubectl, layout: Layout) -> None:
    sa.run("get", "--raw", "/api")  # discovery, as Kopf reads it at start
    sa.run("get", "pods", "--all-namespaces", f"--field-selector=spec.nodeName={layout.node_name}")
    sa.run("get", "node", layout.node_name)
    sa.run("get", "nodes", f"--field-selector=metadata.name={layout.node_name}")  # the node watch's list
    sa.run("get", "services", "--all-namespaces")
    assert forbidden(sa.run("get", "secrets", "--all-namespaces", check=False))
    assert forbidden(sa.run("delete", "node", "no-such-node", check=False))


@pytest.mark.stack
async def test_the_agents_own_client_works_with_the_service_account_kubeconfig(sa_kubeconfig: Path,
                                                                                layout: Layout) -> None:
    """The agent's login (handlers/configuring.py) with a token kubeconfig, and read-only calls it makes."""
    cfg = settings.AgentConfig(node_name=layout.node_name, kubeconfig=str(sa_kubeconfig))
    info = await asyncio.to_thread(connection_info, cfg, logger=logging.getLogger("test"),
                                   settings=kopf.OperatorSettings())
    client = KubeClient(Credentials.from_kopf(info), user_agent="kopflet-test/rbac")
    try:
        review = await client.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                                      body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        assert review["status"]["userInfo"]["username"] == f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
        await client.list_pods(cfg.pod_field_selector)
        await client.request("GET", "/api/v1/services")
        assert await client.get_config_map("default", "kube-root-ca.crt") is not None
        assert await client.get_or_none("/apis/node.k8s.io/v1/runtimeclasses/no-such-class") is None
        node = await client.request("GET", f"/api/v1/nodes/{layout.node_name}")
        assert node["metadata"]["name"] == layout.node_name
        token_review = await client.request("POST", TOKEN_REVIEWS, body={
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "not-a-token"}})
        assert token_review["status"].get("authenticated") is not True
        access_review = await client.request("POST", SUBJECT_ACCESS_REVIEWS, body={
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": "nobody", "resourceAttributes": {"verb": "get", "resource": "nodes",
                                                              "subresource": "log", "name": layout.node_name}}})
        assert access_review["status"]["allowed"] is False
    finally:
        await client.close()
