"""PersistentVolumeClaims on the real stack: a hostPath PV and a local PV (node affinity, fsGroup) bound to claims by
``volumeName`` (``storageClassName: ""``, the stack's PV controller binds them) and mounted into pods, a generic
ephemeral volume whose claim the ephemeral volume controller makes, a claim that binds only after its pod waits, and a
claim bound to an nfs PV: upstream's "no volume plugin matched" FailedMount, the pod stays ContainerCreating.

PersistentVolumes are cluster-scoped: each test names its own uniquely and deletes it in a ``finally`` (the claims go
with the test's namespace; a manually made PV's reclaim policy is Retain, so nothing deletes the host's files).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_pod_lifecycle import container, events, is_ready, phase, pod_manifest, statuses, wait_pod

ROOT_DIR = Path("/var/lib/kopflet")
# A pod whose claim is not bound yet is retried on its next sync (upstream: the populator and syncFrequency).
AGENT_ARGS = "--sync-frequency=10s"


def terminated_message(pod: dict[str, Any], name: str = "main") -> str:
    return statuses(pod)[name]["state"]["terminated"].get("message", "")


@pytest.fixture
def pv_names(admin: Kubectl) -> Iterator[list[str]]:
    """The PersistentVolumes a test makes (cluster-scoped: deleted whatever happens)."""
    names: list[str] = []
    try:
        yield names
    finally:
        for name in names:
            admin.run("delete", "pv", name, "--wait=false", "--ignore-not-found", check=False)


def make_pv(admin: Kubectl, names: list[str], source: dict[str, Any], **spec: Any) -> str:
    name = f"e2e-pv-{uuid.uuid4().hex[:8]}"
    names.append(name)
    admin.apply(json.dumps({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name}, "spec": {
        **source, "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
        "persistentVolumeReclaimPolicy": "Retain", **spec}}))
    return name


def make_claim(admin: Kubectl, namespace: str, name: str, pv: str) -> None:
    admin.apply(json.dumps(claim_body(namespace, name, pv)))


def claim_body(namespace: str, name: str, pv: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": namespace},
            "spec": claim_spec(pv)}


def claim_spec(pv: str) -> dict[str, Any]:
    return {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": "", "volumeName": pv}


def wait_bound(admin: Kubectl, namespace: str, name: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    claim: dict[str, Any] = {}
    while time.monotonic() < deadline:
        claim = admin.json("get", "pvc", name, "-n", namespace)
        if claim.get("status", {}).get("phase") == "Bound":
            return
        time.sleep(0.5)
    raise AssertionError(f"claim {namespace}/{name} never bound: {json.dumps(claim.get('status'))}")


def wait_event(admin: Kubectl, namespace: str, pod: str, reason: str, timeout: float = 60.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [e for e in events(admin, namespace, pod) if e["reason"] == reason]
        if found:
            return found
        time.sleep(1)
    raise AssertionError(f"no {reason} event for {namespace}/{pod}: {events(admin, namespace, pod)}")


def hostname_affinity(admin: Kubectl, layout: Layout) -> dict[str, Any]:
    """A local PV's required node affinity on this node's kubernetes.io/hostname label (as the Node has it)."""
    node = admin.json("get", "node", layout.node_name)
    hostname = node["metadata"]["labels"]["kubernetes.io/hostname"]
    return {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": [hostname]}]}]}}


def test_a_hostpath_pv_is_written_through_its_claim(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                    namespace: str, tmp_path: Path, pv_names: list[str]) -> None:
    folder = tmp_path / "hostpath-pv"
    pv = make_pv(admin, pv_names, {"hostPath": {"path": str(folder), "type": "DirectoryOrCreate"}})
    make_claim(admin, namespace, "data", pv)
    wait_bound(admin, namespace, "data")
    admin.apply(pod_manifest("writer", namespace, layout.node_name, [container(
        "main", "echo from-pod > /data/hello && ls /data > /dev/termination-log",
        volumeMounts=[{"name": "data", "mountPath": "/data"}])],
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}], restartPolicy="Never"))
    pod = wait_pod(admin, namespace, "writer", phase("Succeeded"), what="Succeeded")
    assert terminated_message(pod).split() == ["hello"]
    assert (folder / "hello").read_text() == "from-pod\n"  # DirectoryOrCreate made the folder, the pod wrote in it


def test_a_read_only_claim_cannot_be_written(running_agent: Agent, admin: Kubectl, layout: Layout, namespace: str,
                                             tmp_path: Path, pv_names: list[str]) -> None:
    folder = tmp_path / "ro-pv"
    folder.mkdir()
    (folder / "greeting").write_text("from-host")
    pv = make_pv(admin, pv_names, {"hostPath": {"path": str(folder), "type": "Directory"}})
    make_claim(admin, namespace, "ro", pv)
    wait_bound(admin, namespace, "ro")
    admin.apply(pod_manifest("reader", namespace, layout.node_name, [container(
        "main", "cat /data/greeting > /dev/termination-log; touch /data/x 2>/dev/null && echo written "
                ">> /dev/termination-log; true", volumeMounts=[{"name": "data", "mountPath": "/data"}])],
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "ro", "readOnly": True}}],
        restartPolicy="Never"))
    pod = wait_pod(admin, namespace, "reader", phase("Succeeded"), what="Succeeded")
    assert terminated_message(pod) == "from-host"
    assert not (folder / "x").exists()


def test_a_local_pv_with_node_affinity_and_fs_group(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                    namespace: str, tmp_path: Path, pv_names: list[str]) -> None:
    disk = tmp_path / "local-pv"
    disk.mkdir(mode=0o755)
    pv = make_pv(admin, pv_names, {"local": {"path": str(disk)}}, nodeAffinity=hostname_affinity(admin, layout))
    make_claim(admin, namespace, "fast", pv)
    wait_bound(admin, namespace, "fast")
    # Upstream's local plugin: a bind mount of the PV's directory, handed to the fsGroup (group rw, setgid) the
    # first time, so a non-root user of that group writes into it and its files take the group.
    # Running while checked: a terminated pod's volumes are unmounted (upstream's volume manager), the bind mount too.
    admin.apply(pod_manifest("local", namespace, layout.node_name, [container(
        "main", "echo ok > /data/made-by-pod && stat -c '%A %g' /data > /tmp/stat && mv /tmp/stat /tmp/done; "
                "sleep 3600",
        volumeMounts=[{"name": "data", "mountPath": "/data"}],
        readinessProbe={"exec": {"command": ["test", "-e", "/tmp/done"]}, "periodSeconds": 1})],
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "fast"}}],
        securityContext={"runAsUser": 1000, "fsGroup": 2000}, terminationGracePeriodSeconds=1))
    pod = wait_pod(admin, namespace, "local", is_ready, what="Ready")
    out = admin.run("exec", "-n", namespace, "local", "-c", "main", "--", "cat", "/tmp/done").stdout
    assert out.split() == ["drwxrwsr-x", "2000"]
    made = disk / "made-by-pod"
    assert made.read_text() == "ok\n" and made.stat().st_uid == 1000 and made.stat().st_gid == 2000
    bind = ROOT_DIR / "pods" / pod["metadata"]["uid"] / "volumes" / "kubernetes.io~local-volume" / pv
    assert str(bind) in Path("/proc/self/mounts").read_text()  # the bind mount the runtime mounted from
    admin.run("delete", "pod", "local", "-n", namespace)
    deadline = time.monotonic() + 60
    while str(bind) in Path("/proc/self/mounts").read_text() and time.monotonic() < deadline:
        time.sleep(1)
    assert str(bind) not in Path("/proc/self/mounts").read_text()  # unmounted with the pod
    assert made.read_text() == "ok\n"  # the PV's files are the PV's: the pod's directory went, they did not


def test_a_local_pv_for_another_node_is_not_mounted(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                    namespace: str, tmp_path: Path, pv_names: list[str]) -> None:
    disk = tmp_path / "elsewhere"
    disk.mkdir()
    affinity = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["no-such-node"]}]}]}}
    pv = make_pv(admin, pv_names, {"local": {"path": str(disk)}}, nodeAffinity=affinity)
    make_claim(admin, namespace, "far", pv)
    wait_bound(admin, namespace, "far")
    admin.apply(pod_manifest("far", namespace, layout.node_name, [container(
        "main", "sleep 3600", volumeMounts=[{"name": "data", "mountPath": "/data"}])],
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "far"}}]))
    mounts = wait_event(admin, namespace, "far", "FailedMount")
    assert any(m["message"] == f'MountVolume.NodeAffinity check failed for volume "{pv}" : no matching '
                                "NodeSelectorTerms" for m in mounts), mounts
    assert statuses(admin.json("get", "pod", "far", "-n", namespace))["main"]["state"]["waiting"]["reason"] == \
        "ContainerCreating"


def test_a_generic_ephemeral_volume_uses_the_claim_made_for_the_pod(running_agent: Agent, admin: Kubectl,
                                                                    layout: Layout, namespace: str, tmp_path: Path,
                                                                    pv_names: list[str]) -> None:
    folder = tmp_path / "ephemeral-pv"
    pv = make_pv(admin, pv_names, {"hostPath": {"path": str(folder), "type": "DirectoryOrCreate"}})
    admin.apply(pod_manifest("eph", namespace, layout.node_name, [container(
        "main", "echo scratch > /scratch/f && cat /scratch/f > /dev/termination-log",
        volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}])],
        volumes=[{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": claim_spec(pv)}}}],
        restartPolicy="Never"))
    pod = wait_pod(admin, namespace, "eph", phase("Succeeded"), timeout=120, what="Succeeded")
    assert terminated_message(pod).strip() == "scratch"
    claim = admin.json("get", "pvc", "eph-scratch", "-n", namespace)  # <pod>-<volume>, owned by the pod
    assert claim["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
    assert (folder / "f").read_text() == "scratch\n"


def test_a_pod_waits_for_its_claim_to_bind(running_agent: Agent, admin: Kubectl, layout: Layout, namespace: str,
                                           tmp_path: Path, pv_names: list[str]) -> None:
    admin.apply(pod_manifest("patient", namespace, layout.node_name, [container(
        "main", "sleep 3600", volumeMounts=[{"name": "data", "mountPath": "/data"}])],
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "later"}}]))
    mounts = wait_event(admin, namespace, "patient", "FailedMount")
    assert mounts[0]["type"] == "Warning"
    assert mounts[0]["message"] == (
        "Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[], failed to process "
        f'volumes=[data]: error processing PVC {namespace}/later: failed to fetch PVC from API server: '
        'persistentvolumeclaims "later" not found')
    pod = admin.json("get", "pod", "patient", "-n", namespace)
    assert pod["status"]["phase"] == "Pending"
    assert statuses(pod)["main"]["state"]["waiting"]["reason"] == "ContainerCreating"
    pv = make_pv(admin, pv_names, {"hostPath": {"path": str(tmp_path / "later"), "type": "DirectoryOrCreate"}})
    make_claim(admin, namespace, "later", pv)
    wait_pod(admin, namespace, "patient", is_ready, timeout=120, what="Ready once the claim is bound")


def test_a_claim_bound_to_an_nfs_pv_waits_with_no_plugin(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                         namespace: str, pv_names: list[str]) -> None:
    pv = make_pv(admin, pv_names, {"nfs": {"server": "nfs.invalid", "path": "/exports"}})
    make_claim(admin, namespace, "shared", pv)
    wait_bound(admin, namespace, "shared")
    admin.apply(pod_manifest("nfs", namespace, layout.node_name, [container(
        "main", "sleep 3600", volumeMounts=[{"name": "data", "mountPath": "/data"}])],
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "shared"}}]))
    mounts = wait_event(admin, namespace, "nfs", "FailedMount")
    assert mounts[0]["message"] == (
        "Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[], failed to process "
        f'volumes=[data]: failed to get Plugin from volumeSpec for volume "{pv}" err=no volume plugin matched: '
        "kopflet has no nfs plugin (it mounts local and hostPath PersistentVolumes)")
    time.sleep(5)
    pod = admin.json("get", "pod", "nfs", "-n", namespace)
    assert pod["status"]["phase"] == "Pending"
    assert statuses(pod)["main"]["state"]["waiting"]["reason"] == "ContainerCreating"
