"""Volumes on the real stack: emptyDir shared between containers, configMap and secret files (secrets on
tmpfs), the default kube-api-access token volume bound to the pod, a missing source keeping the pod
ContainerCreating with FailedMount until it appears, unsupported volume types refused clearly, and projected
clusterTrustBundle and podCertificate sources (a changed bundle reaching the running pod)."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from devstack.layout import Layout
from kopflet.api import qos
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_pod_lifecycle import container, events, is_ready, phase, pod_manifest, statuses, wait_pod

ROOT_DIR = Path("/var/lib/kopflet")
AGNHOST = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"
# ConfigMap and Secret volumes are refreshed on each periodic sync (upstream: syncFrequency, 1m by default).
AGENT_ARGS = "--sync-frequency=10s"


def terminated_message(pod: dict[str, Any], name: str = "main") -> str:
    return statuses(pod)[name]["state"]["terminated"].get("message", "")


def test_empty_dir_is_shared_between_init_and_main(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                   namespace: str) -> None:
    mount = [{"name": "scratch", "mountPath": "/data"}]
    admin.apply(pod_manifest(
        "shared", namespace, layout.node_name,
        [container("main", "cat /data/hello > /dev/termination-log", volumeMounts=mount)],
        initContainers=[container("init", "echo from-init > /data/hello", volumeMounts=mount)],
        volumes=[{"name": "scratch", "emptyDir": {}}], restartPolicy="Never"))
    pod = wait_pod(admin, namespace, "shared", phase("Succeeded"), what="Succeeded")
    assert terminated_message(pod).strip() == "from-init"


def test_config_map_and_secret_files(running_agent: Agent, admin: Kubectl, layout: Layout, namespace: str) -> None:
    admin.run("create", "configmap", "settings", "-n", namespace, "--from-literal=mode=fast")
    admin.run("create", "secret", "generic", "creds", "-n", namespace, "--from-literal=password=s3cret")
    # The secret must be on tmpfs (a mount of its own); the configMap file has the default mode 0644.
    script = ("grep -q ' /etc/creds ' /proc/mounts && echo $(cat /etc/settings/mode) $(cat /etc/creds/password) "
              "$(stat -c %a /etc/settings/..data/mode) > /dev/termination-log")
    admin.apply(pod_manifest(
        "files", namespace, layout.node_name,
        [container("main", script, volumeMounts=[{"name": "cfg", "mountPath": "/etc/settings"},
                                                 {"name": "sec", "mountPath": "/etc/creds"}])],
        volumes=[{"name": "cfg", "configMap": {"name": "settings"}},
                 {"name": "sec", "secret": {"secretName": "creds", "defaultMode": 0o400}}],
        restartPolicy="Never"))
    pod = wait_pod(admin, namespace, "files", phase("Succeeded"), what="Succeeded")
    assert terminated_message(pod).split() == ["fast", "s3cret", "644"]


def test_default_service_account_token_is_bound_to_the_pod(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                           namespace: str) -> None:
    body = json.loads(pod_manifest("tokened", namespace, layout.node_name, [container(
        "main", "cat /var/run/secrets/kubernetes.io/serviceaccount/namespace > /dev/termination-log; "
                "test -s /var/run/secrets/kubernetes.io/serviceaccount/ca.crt && sleep 3600")]))
    del body["spec"]["automountServiceAccountToken"]  # the ServiceAccount admission adds kube-api-access-*
    admin.apply(json.dumps(body))
    pod = wait_pod(admin, namespace, "tokened", is_ready, what="Ready")
    volume = next(v["name"] for v in pod["spec"]["volumes"] if v["name"].startswith("kube-api-access-"))
    token = (ROOT_DIR / "pods" / pod["metadata"]["uid"] / "volumes" / "kubernetes.io~projected" / volume /
             "token").read_text()
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
    status = json.loads(admin.run("create", "-f", "-", "-o", "json", stdin=json.dumps(review)).stdout)["status"]
    assert status["authenticated"] is True
    assert status["user"]["username"] == f"system:serviceaccount:{namespace}:default"
    assert status["user"]["extra"]["authentication.kubernetes.io/pod-name"] == ["tokened"]


def test_memory_empty_dir_is_a_sized_tmpfs(running_agent: Agent, admin: Kubectl, layout: Layout,
                                           namespace: str) -> None:
    script = "echo $(grep ' /cache ' /proc/mounts | cut -d' ' -f3) $(df -k /cache | tail -1 | awk '{print $2}') " \
             "> /dev/termination-log"
    admin.apply(pod_manifest("ram", namespace, layout.node_name, [container(
        "main", script, volumeMounts=[{"name": "cache", "mountPath": "/cache"}])],
        volumes=[{"name": "cache", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}}], restartPolicy="Never"))
    pod = wait_pod(admin, namespace, "ram", phase("Succeeded"), what="Succeeded")
    assert terminated_message(pod).split() == ["tmpfs", "16384"]


def test_config_map_update_reaches_the_running_pod(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                   namespace: str) -> None:
    admin.run("create", "configmap", "live", "-n", namespace, "--from-literal=version=1")
    # Seen from inside: the container turns Ready only once it reads the new value from its volume.
    probe = {"exec": {"command": ["grep", "-qx", "2", "/cfg/version"]}, "periodSeconds": 1}
    admin.apply(pod_manifest("watcher", namespace, layout.node_name, [container(
        "main", "sleep 3600", volumeMounts=[{"name": "cfg", "mountPath": "/cfg"}], readinessProbe=probe)],
        volumes=[{"name": "cfg", "configMap": {"name": "live"}}]))
    pod = wait_pod(admin, namespace, "watcher", lambda p: "running" in statuses(p).get("main", {}).get("state", {}),
                   what="running")
    assert not is_ready(pod)
    admin.run("patch", "configmap", "live", "-n", namespace, "-p", '{"data": {"version": "2"}}')
    pod = wait_pod(admin, namespace, "watcher", is_ready, timeout=90, what="Ready: the update is in the volume")
    assert statuses(pod)["main"]["restartCount"] == 0
    # The agent's reads of it (the apiserver's audit log of node requests): the Watch strategy's one watch (a
    # WatchList, field selector metadata.name), never a GET, however many syncs the pod had.
    verbs: list[str] = []
    deadline = time.monotonic() + 10
    while "watch" not in verbs and time.monotonic() < deadline:
        time.sleep(0.5)
        verbs = audited_verbs(layout, namespace, "configmaps", "live")
    assert "watch" in verbs and "get" not in verbs and "list" not in verbs, verbs


def audited_verbs(layout: Layout, namespace: str, resource: str, name: str) -> list[str]:
    """The verbs of the node's requests for one object in the audit log, each request once."""
    user, seen, verbs = f"system:node:{layout.node_name}", set(), []
    for line in layout.audit_log.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        ref = entry.get("objectRef") or {}
        if (entry.get("user", {}).get("username") == user and ref.get("namespace") == namespace
                and ref.get("resource") == resource and ref.get("name") == name and entry["auditID"] not in seen):
            seen.add(entry["auditID"])
            verbs.append(entry.get("verb", ""))
    return verbs


def test_host_path_read_and_written_from_the_container(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                       namespace: str, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "greeting").write_text("from-host")
    created = tmp_path / "created.log"
    admin.apply(pod_manifest("hosted", namespace, layout.node_name, [container(
        "main", "cat /host/greeting > /dev/termination-log; echo from-pod > /out.log",
        volumeMounts=[{"name": "dir", "mountPath": "/host", "readOnly": True},
                      {"name": "file", "mountPath": "/out.log"}])],
        volumes=[{"name": "dir", "hostPath": {"path": str(shared), "type": "Directory"}},
                 {"name": "file", "hostPath": {"path": str(created), "type": "FileOrCreate"}}],
        restartPolicy="Never"))
    pod = wait_pod(admin, namespace, "hosted", phase("Succeeded"), what="Succeeded")
    assert terminated_message(pod) == "from-host"
    assert created.read_text() == "from-pod\n"


def test_downward_api_files(running_agent: Agent, admin: Kubectl, layout: Layout, namespace: str) -> None:
    body = json.loads(pod_manifest("reader", namespace, layout.node_name, [container(
        "main", "echo $(cat /info/name) $(cat /info/labels) $(cat /info/mem) $(cat /info/cpu) > /dev/termination-log",
        volumeMounts=[{"name": "info", "mountPath": "/info"}],
        resources={"limits": {"memory": "64Mi", "cpu": "250m"}})],
        volumes=[{"name": "info", "downwardAPI": {"items": [
            {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "mem", "resourceFieldRef": {"containerName": "main", "resource": "limits.memory",
                                                 "divisor": "1Mi"}},
            {"path": "cpu", "resourceFieldRef": {"containerName": "main", "resource": "limits.cpu",
                                                 "divisor": "1m"}}]}}],
        restartPolicy="Never"))
    body["metadata"]["labels"] = {"app": "demo"}
    admin.apply(json.dumps(body))
    pod = wait_pod(admin, namespace, "reader", phase("Succeeded"), what="Succeeded")
    assert terminated_message(pod).split() == ["reader", 'app="demo"', "64", "250"]


def test_pod_calls_the_apiserver_with_its_token(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                namespace: str) -> None:
    """client-go's in-cluster config: KUBERNETES_SERVICE_HOST/PORT from the kubelet, the projected token and
    CA; the stack routes the `kubernetes` Service to the apiserver as kube-proxy would."""
    body = json.loads(pod_manifest("incluster", namespace, layout.node_name, [
        {"name": "main", "image": AGNHOST, "args": ["inclusterclient", "--poll-interval=1"]}]))
    del body["spec"]["automountServiceAccountToken"]
    admin.apply(json.dumps(body))
    pod = wait_pod(admin, namespace, "incluster", lambda p: "running" in statuses(p).get("main", {}).get("state", {}),
                   what="running")
    log = Path("/var/log/pods", f"{namespace}_incluster_{pod['metadata']['uid']}", "main", "0.log")
    deadline = time.monotonic() + 60
    text = ""
    while time.monotonic() < deadline and text.count("calling /healthz") < 3:
        text = log.read_text() if log.exists() else ""
        time.sleep(0.5)
    assert text.count("calling /healthz") >= 3, text
    assert "status=failed" not in text and "authz_header=<empty>" not in text, text
    assert statuses(wait_pod(admin, namespace, "incluster", lambda p: True))["main"]["restartCount"] == 0


def test_missing_source_waits_with_failed_mount(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                namespace: str) -> None:
    admin.apply(pod_manifest("waiting", namespace, layout.node_name,
                             [container("main", "sleep 3600", volumeMounts=[{"name": "cfg", "mountPath": "/cfg"}])],
                             volumes=[{"name": "cfg", "configMap": {"name": "later"}}]))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        mounts = [e for e in events(admin, namespace, "waiting") if e["reason"] == "FailedMount"]
        if mounts:
            break
        time.sleep(1)
    assert mounts and mounts[0]["type"] == "Warning"
    assert 'MountVolume.SetUp failed for volume "cfg"' in mounts[0]["message"]
    assert 'configmap "later" not found' in mounts[0]["message"]
    pod = admin.json("get", "pod", "waiting", "-n", namespace)
    assert pod["status"]["phase"] == "Pending"
    assert statuses(pod).get("main", {}).get("state", {}).get("waiting", {}).get("reason") == "ContainerCreating"
    admin.run("create", "configmap", "later", "-n", namespace, "--from-literal=k=v")
    wait_pod(admin, namespace, "waiting", is_ready, timeout=60, what="Ready once the ConfigMap exists")


def test_unsupported_volume_type_is_refused_clearly(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                    namespace: str) -> None:
    # An inline nfs volume (persistent volumes: tests/e2e/test_persistent_volumes.py).
    admin.apply(pod_manifest("claims", namespace, layout.node_name,
                             [container("main", "sleep 3600", volumeMounts=[{"name": "data", "mountPath": "/d"}])],
                             volumes=[{"name": "data", "nfs": {"server": "nfs.invalid", "path": "/"}}]))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        mounts = [e for e in events(admin, namespace, "claims") if e["reason"] == "FailedMount"]
        if mounts:
            break
        time.sleep(1)
    assert mounts and mounts[0]["message"] == ('MountVolume.SetUp failed for volume "data" : unsupported volume type '
                                               "nfs: kopflet has no plugin for it")
    assert admin.json("get", "pod", "claims", "-n", namespace)["status"]["phase"] == "Pending"


def test_sub_path_is_created_in_the_volume(running_agent: Agent, admin: Kubectl, layout: Layout,
                                           namespace: str) -> None:
    mounts = [{"name": "scratch", "mountPath": "/logs", "subPath": "app/logs"}]
    admin.apply(pod_manifest("subpath", namespace, layout.node_name,
                             [container("main", "echo ok > /logs/x && cat /logs/x > /dev/termination-log",
                                        volumeMounts=mounts)],
                             volumes=[{"name": "scratch", "emptyDir": {}}], restartPolicy="Never"))
    pod = wait_pod(admin, namespace, "subpath", phase("Succeeded"), what="Succeeded")
    assert terminated_message(pod).strip() == "ok"


def test_orphaned_pod_directory_is_unmounted_and_removed(running_agent: Agent) -> None:
    # What a pod deleted while the agent was down leaves behind: its directory with a tmpfs volume.
    uid = f"orphan-{uuid.uuid4()}"
    volume = ROOT_DIR / "pods" / uid / "volumes" / "kubernetes.io~empty-dir" / "cache"
    volume.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(volume)], check=True)
    deadline = time.monotonic() + 45  # housekeeping runs every 30s
    while (ROOT_DIR / "pods" / uid).exists() and time.monotonic() < deadline:
        time.sleep(1)
    assert not (ROOT_DIR / "pods" / uid).exists()
    assert str(volume) not in Path("/proc/self/mounts").read_text()


# ------------------------------------------------------------------ upstream conformance: modes and defaults


def test_downward_api_volume_limits_default_to_node_allocatable(running_agent: Agent, admin: Kubectl,
                                                                layout: Layout, namespace: str) -> None:
    # Upstream e2e "Downward API volume / Projected downwardAPI should provide node allocatable (cpu|memory) as
    # default ... limit if the limit is not set": with no limits the files read the node's allocatable.
    items = [{"path": "cpu", "resourceFieldRef": {"containerName": "main", "resource": "limits.cpu",
                                                  "divisor": "1m"}},
             {"path": "mem", "resourceFieldRef": {"containerName": "main", "resource": "limits.memory"}}]
    admin.apply(pod_manifest("unlimited", namespace, layout.node_name, [container(
        "main", "echo $(cat /info/cpu) $(cat /info/mem) $(cat /proj/cpu) $(cat /proj/mem) > /dev/termination-log",
        volumeMounts=[{"name": "info", "mountPath": "/info"}, {"name": "proj", "mountPath": "/proj"}])],
        volumes=[{"name": "info", "downwardAPI": {"items": items}},
                 {"name": "proj", "projected": {"sources": [{"downwardAPI": {"items": items}}]}}],
        restartPolicy="Never"))
    pod = wait_pod(admin, namespace, "unlimited", phase("Succeeded"), what="Succeeded")
    node = json.loads(admin.run("get", "node", layout.node_name, "-o", "json").stdout)
    cpu_m = str(int(qos.parse_quantity(node["status"]["allocatable"]["cpu"]) * 1000))
    mem = str(qos.value(node["status"]["allocatable"]["memory"]))
    assert terminated_message(pod).split() == [cpu_m, mem, cpu_m, mem]


def test_config_map_volumes_are_readable_by_a_non_root_user(running_agent: Agent, admin: Kubectl,
                                                            layout: Layout, namespace: str) -> None:
    # Upstream e2e "ConfigMap / Projected configMap should be consumable from pods in volume (with mappings) as
    # non-root": the volume directory is 0777 (configMap on disk) or tmpfs's 1777 (projected), as upstream
    # emptyDir setupDir leaves the directory every such volume wraps.
    admin.run("create", "configmap", "cm", "-n", namespace, "--from-literal=data-1=value-1",
              "--from-literal=data-2=value-2")
    script = ("echo $(id -u) $(cat /plain/data-1) $(cat /mapped/path/to/data-2) $(cat /proj/path/to/data-2) "
              "$(stat -c %A /plain) $(stat -c %A /proj) $(stat -c %a /mapped/path/to/data-2) > /dev/termination-log")
    mapped = {"name": "cm", "items": [{"key": "data-2", "path": "path/to/data-2"}]}
    admin.apply(pod_manifest("nonroot", namespace, layout.node_name, [container(
        "main", script, volumeMounts=[{"name": "plain", "mountPath": "/plain"},
                                      {"name": "mapped", "mountPath": "/mapped"},
                                      {"name": "proj", "mountPath": "/proj"}])],
        volumes=[{"name": "plain", "configMap": {"name": "cm"}}, {"name": "mapped", "configMap": mapped},
                 {"name": "proj", "projected": {"sources": [{"configMap": mapped}]}}],
        securityContext={"runAsUser": 1000}, restartPolicy="Never"))
    pod = wait_pod(admin, namespace, "nonroot", lambda p: p.get("status", {}).get("phase") in ("Succeeded", "Failed"),
                   what="finished")
    assert pod["status"]["phase"] == "Succeeded", json.dumps(pod["status"], indent=1)
    assert terminated_message(pod).split() == ["1000", "value-1", "value-2", "value-2", "drwxrwxrwx",
                                               "drwxrwxrwt", "644"]


def test_sub_path_of_an_fs_group_tmpfs_keeps_setgid_and_sticky(running_agent: Agent, admin: Kubectl,
                                                              layout: Layout, namespace: str) -> None:
    # Upstream e2e "EmptyDir volumes when FSGroup is specified nonexistent volume subPath should have the correct
    # mode and owner using FSGroup": the subPath directory takes the volume's mode, setgid and sticky included
    # (Go's "dgtrwxrwxrwx"), and the fsGroup.
    admin.apply(pod_manifest("subpath-fsgroup", namespace, layout.node_name, [container(
        "main", "stat -c '%A %u %g' /test-volume > /dev/termination-log",
        volumeMounts=[{"name": "scratch", "mountPath": "/test-volume", "subPath": "test-sub"}])],
        volumes=[{"name": "scratch", "emptyDir": {"medium": "Memory"}}],
        securityContext={"runAsUser": 1001, "fsGroup": 123}, restartPolicy="Never"))
    pod = wait_pod(admin, namespace, "subpath-fsgroup", phase("Succeeded"), what="Succeeded")
    assert terminated_message(pod).split() == ["drwxrwsrwt", "0", "123"]


def _self_signed_pem(tmp: Path, name: str) -> str:
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", str(tmp / f"{name}.key"), "-out", str(tmp / f"{name}.pem"), "-days", "1",
                    "-subj", f"/CN={name}"], check=True, capture_output=True, timeout=60)
    return (tmp / f"{name}.pem").read_text()


def test_cluster_trust_bundles_projected_by_name_and_by_signer(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                               namespace: str, tmp_path: Path) -> None:
    """upstream's projected clusterTrustBundle: by name, one bundle's certificates; by signer and label selector,
    every matching bundle's, each certificate once; optional and missing, an empty file."""
    signer, suffix = "example.com/kopflet-e2e", uuid.uuid4().hex[:6]
    a, b, c = (_self_signed_pem(tmp_path, n) for n in ("ctb-a", "ctb-b", "ctb-c"))
    bundles = {
        f"kopflet-e2e-{suffix}": {"trustBundle": a},
        f"example.com:kopflet-e2e:one-{suffix}": {"signerName": signer, "trustBundle": b + a},
        f"example.com:kopflet-e2e:two-{suffix}": {"signerName": signer, "trustBundle": c + b},
        f"example.com:kopflet-e2e:other-{suffix}": {"signerName": signer, "trustBundle": a},
    }
    labels = {"kopflet-e2e": suffix}
    try:
        for name, spec in bundles.items():
            admin.apply(json.dumps({"apiVersion": "certificates.k8s.io/v1", "kind": "ClusterTrustBundle",
                                    "metadata": {"name": name, "labels": labels if "other" not in name else {}},
                                    "spec": spec}))
        count = "grep -c 'BEGIN CERTIFICATE'"
        script = (f"echo $({count} /ctb/by-name.pem) $({count} /ctb/by-signer.pem) $(wc -c < /ctb/none.pem) "
                  "> /dev/termination-log")
        sources = [
            {"clusterTrustBundle": {"name": f"kopflet-e2e-{suffix}", "path": "by-name.pem"}},
            {"clusterTrustBundle": {"signerName": signer, "labelSelector": {"matchLabels": labels},
                                    "path": "by-signer.pem"}},
            {"clusterTrustBundle": {"name": f"missing-{suffix}", "optional": True, "path": "none.pem"}},
        ]
        admin.apply(pod_manifest("bundles", namespace, layout.node_name,
                                 [container("main", script, volumeMounts=[{"name": "ctb", "mountPath": "/ctb"}])],
                                 volumes=[{"name": "ctb", "projected": {"sources": sources}}], restartPolicy="Never"))
        pod = wait_pod(admin, namespace, "bundles", phase("Succeeded"), what="Succeeded")
        # by name: a alone; by signer and labels: one and two (b, a, c, b), deduplicated to three; "other" is not
        # labelled.
        assert terminated_message(pod).split() == ["1", "3", "0"]
    finally:
        for name in bundles:
            admin.run("delete", "clustertrustbundle", name, "--ignore-not-found", check=False)


def test_cluster_trust_bundle_update_reaches_the_running_pod(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                             namespace: str, tmp_path: Path) -> None:
    """A ClusterTrustBundle changed while a pod projects it: the file follows, the container is not restarted
    (upstream: the informer's handlers and the periodic remount; kopflet's watch also wakes the pod at once), and the
    agent started one informer for the whole run rather than listing on each sync."""
    name = f"kopflet-e2e-live-{uuid.uuid4().hex[:6]}"
    first, second = _self_signed_pem(tmp_path, "live-1"), _self_signed_pem(tmp_path, "live-2")

    def bundle(trust: str) -> None:
        admin.apply(json.dumps({"apiVersion": "certificates.k8s.io/v1", "kind": "ClusterTrustBundle",
                                "metadata": {"name": name}, "spec": {"trustBundle": trust}}))

    try:
        bundle(first)
        # Seen from inside: Ready only once the projected file holds both certificates.
        probe = {"exec": {"command": ["sh", "-c", "test $(grep -c 'BEGIN CERTIFICATE' /ctb/ca.pem) -eq 2"]},
                 "periodSeconds": 1}
        admin.apply(pod_manifest("ctb-watcher", namespace, layout.node_name, [container(
            "main", "sleep 3600", volumeMounts=[{"name": "ctb", "mountPath": "/ctb"}], readinessProbe=probe)],
            volumes=[{"name": "ctb", "projected": {"sources": [{"clusterTrustBundle": {"name": name,
                                                                                          "path": "ca.pem"}}]}}]))
        pod = wait_pod(admin, namespace, "ctb-watcher",
                       lambda p: "running" in statuses(p).get("main", {}).get("state", {}), what="running")
        assert not is_ready(pod)
        started = time.monotonic()
        bundle(first + second)
        pod = wait_pod(admin, namespace, "ctb-watcher", is_ready, timeout=90,
                       what="Ready: the updated bundle is in the volume")
        assert statuses(pod)["main"]["restartCount"] == 0, f"took {time.monotonic() - started:.1f}s"
        assert running_agent.output().count("Started ClusterTrustBundle informer") == 1
    finally:
        admin.run("delete", "clustertrustbundle", name, "--ignore-not-found", check=False)


def _requests(admin: Kubectl, namespace: str, signer: str) -> list[dict[str, Any]]:
    items = admin.json("get", "podcertificaterequests", "-n", namespace)["items"]
    return [r for r in items if r["spec"]["signerName"] == signer]


def _await_request(admin: Kubectl, namespace: str, signer: str, pod: str) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        mine = [r for r in _requests(admin, namespace, signer) if r["spec"]["podName"] == pod]
        if mine:
            return mine[0]
        time.sleep(1)
    raise AssertionError(f"no PodCertificateRequest for {pod} within 120s")


def _answer(admin: Kubectl, request: dict[str, Any], status: dict[str, Any], kind: str, reason: str) -> None:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    condition = {"type": kind, "status": "True", "reason": reason, "message": f"{kind} by the e2e signer",
                 "lastTransitionTime": now}
    admin.run("patch", "podcertificaterequest", request["metadata"]["name"], "-n", request["metadata"]["namespace"],
              "--subresource=status", "--type=merge", "-p", json.dumps({"status": {**status,
                                                                                    "conditions": [condition]}}))


def _issue(tmp: Path, request: dict[str, Any], ca: tuple[Path, Path]) -> dict[str, Any]:
    """What a signer writes: a leaf for the request's key, 24 h, with the CA after it, and its times."""
    import base64
    import datetime

    (tmp / "req.der").write_bytes(base64.b64decode(request["spec"]["stubPKCS10Request"]))
    leaf = subprocess.run(["openssl", "x509", "-req", "-inform", "DER", "-in", str(tmp / "req.der"), "-CA", str(ca[0]),
                           "-CAkey", str(ca[1]), "-set_serial", "7", "-days", "1", "-subj", "/CN=e2e-pod"],
                          check=True, capture_output=True, timeout=60).stdout.decode()
    dates = subprocess.run(["openssl", "x509", "-noout", "-startdate", "-enddate"], input=leaf.encode(), check=True,
                           capture_output=True, timeout=60).stdout.decode()
    when = {k: datetime.datetime.strptime(v.strip(), "%b %d %H:%M:%S %Y %Z").replace(tzinfo=datetime.UTC)
            for k, v in (line.split("=", 1) for line in dates.splitlines())}
    stamp = "%Y-%m-%dT%H:%M:%SZ"
    return {"certificateChain": leaf + ca[0].read_text(), "notBefore": when["notBefore"].strftime(stamp),
            "beginRefreshAt": (when["notBefore"] + datetime.timedelta(hours=12)).strftime(stamp),
            "notAfter": when["notAfter"].strftime(stamp)}


def test_pod_certificates_issued_and_denied(running_agent: Agent, admin: Kubectl, layout: Layout, namespace: str,
                                            tmp_path: Path) -> None:
    """upstream's podCertificate projection against a signer in the test: kopflet's PodCertificateRequest names the
    node, pod and ServiceAccount, the volume holds the key then the issued chain once the signer answers; a denied
    request is a permanent FailedMount."""
    signer = f"example.com/kopflet-e2e-{uuid.uuid4().hex[:6]}"
    ca = (tmp_path / "ca.pem", tmp_path / "ca.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", str(ca[1]), "-out", str(ca[0]), "-days", "2", "-subj", "/CN=kopflet-e2e-ca"],
                   check=True, capture_output=True, timeout=60)
    source = {"podCertificate": {"signerName": signer, "keyType": "ECDSAP256", "credentialBundlePath": "creds.pem"}}
    count = "grep -c"
    script = (f"echo $({count} 'BEGIN CERTIFICATE' /pc/creds.pem) $({count} 'BEGIN PRIVATE KEY' /pc/creds.pem) "
              "$(head -1 /pc/creds.pem) > /dev/termination-log")
    for name in ("issued", "denied"):
        admin.apply(pod_manifest(name, namespace, layout.node_name,
                                 [container("main", script, volumeMounts=[{"name": "pc", "mountPath": "/pc"}])],
                                 volumes=[{"name": "pc", "projected": {"sources": [source]}}], restartPolicy="Never"))

    request = _await_request(admin, namespace, signer, "issued")
    pod = admin.json("get", "pod", "issued", "-n", namespace)
    node = admin.json("get", "node", layout.node_name)
    spec = request["spec"]
    assert (spec["nodeName"], spec["nodeUID"]) == (layout.node_name, node["metadata"]["uid"])
    assert (spec["podUID"], spec["serviceAccountName"]) == (pod["metadata"]["uid"], "default")
    assert spec["maxExpirationSeconds"] == 86400  # the apiserver's default
    _answer(admin, request, _issue(tmp_path, request, ca), "Issued", "Issued")
    pod = wait_pod(admin, namespace, "issued", phase("Succeeded"), what="Succeeded once issued")
    assert terminated_message(pod).split() == ["2", "1", "-----BEGIN", "PRIVATE", "KEY-----"]

    _answer(admin, _await_request(admin, namespace, signer, "denied"), {}, "Denied", "NotForYou")
    deadline = time.monotonic() + 90
    mounts: list[dict[str, Any]] = []
    while time.monotonic() < deadline and not mounts:
        mounts = [e for e in events(admin, namespace, "denied") if e["reason"] == "FailedMount"
                  and "permanently denied" in e["message"]]
        time.sleep(1)
    assert mounts, events(admin, namespace, "denied")
    assert 'reason="NotForYou"' in mounts[-1]["message"], mounts[-1]["message"]
    assert admin.json("get", "pod", "denied", "-n", namespace)["status"]["phase"] == "Pending"
