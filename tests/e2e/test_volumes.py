"""Volumes on the real stack: emptyDir shared between containers, configMap and secret files (secrets on
tmpfs), the default kube-api-access token volume bound to the pod, a missing source keeping the pod
ContainerCreating with FailedMount until it appears, and unsupported volume types refused clearly."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_pod_lifecycle import container, events, is_ready, phase, pod_manifest, statuses, wait_pod

ROOT_DIR = Path("/var/lib/kopflet")


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
    admin.apply(pod_manifest("claims", namespace, layout.node_name,
                             [container("main", "sleep 3600", volumeMounts=[{"name": "data", "mountPath": "/d"}])],
                             volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "nope"}}]))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        mounts = [e for e in events(admin, namespace, "claims") if e["reason"] == "FailedMount"]
        if mounts:
            break
        time.sleep(1)
    assert mounts and "persistentVolumeClaim" in mounts[0]["message"]
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
