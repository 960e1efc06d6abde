"""The deployment as users run it: manifests/ applied to the real stack, with the image the Containerfile builds.

The stack's own agent (Node ``<node>``) plays the resident kubelet that runs the DaemonSet's pod, as minikube's
kubelet would. Inside that pod kopflet registers ``kopflet-<node>`` (tainted, labelled) and runs the pods bound to
it in its own containerd, which the resident agent's runtime never sees; the scheduler places a tolerating pod
there, and deleting it goes through the inner agent's two-phase delete.

What differs from a user's install, and why (all of it rewriting the manifests, never the code under test):
- the image is loaded into the resident runtime (``ctr images import``: what ``minikube image load`` does);
- the host paths move to ``*-e2e-ds`` folders and the bridge to ``kopflet-ds0``, because this machine's stack
  already uses ``/run/kopflet`` and a ``kopflet0`` bridge (10.88.0.0/16);
- the root folder is made a shared mount first: ``mountPropagation: Bidirectional`` needs one (systemd hosts
  have ``/`` shared; this VM does not), as docs/operations.md's requirements say;
- the inner containerd mirrors docker.io and registry.k8s.io to the stack's registry (no internet here).
"""

from __future__ import annotations

import configparser
import contextlib
import ipaddress
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from devstack.layout import REPO, Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_pod_lifecycle import BUSYBOX, container, events, is_ready, runtime_sandboxes, wait_gone, wait_pod
from tests.stack.test_manifests import remove_service_account

NAMESPACE = "kopflet-system"
TAINT = {"key": "kopflet.dev/agent", "value": "true", "effect": "NoSchedule"}
# The DaemonSet's host folders, moved next to the stack's (which has /run/kopflet already).
HOST_PATHS = {"/var/lib/kopflet": "/var/lib/kopflet-e2e-ds", "/run/kopflet": "/run/kopflet-e2e-ds",
              "/var/log/kopflet": "/var/log/kopflet-e2e-ds"}
POD_SUBNET = ipaddress.ip_network("10.89.0.0/24")  # manifests/30-configmap.yaml's 10-kopflet.conflist
BRIDGE = "kopflet-ds0"  # in place of the conflist's kopflet0


def image_archive() -> tuple[str, Path]:
    """The image and the archive images/build-agent-image.sh writes (a `make test` prerequisite)."""
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    version = cfg["metadata"]["version"]
    cache = Path(os.environ.get("KOPFLET_CACHE", "/var/cache/kopflet"))
    return f"localhost/kopflet:{version}", cache / "images" / f"kopflet-{version}.tar"


def mirrored_containerd_toml(toml: str, registry: str) -> str:
    """The ConfigMap's containerd.toml with docker.io and registry.k8s.io pulled from the stack's registry."""
    mirrors = "".join(f'\n[plugins."io.containerd.grpc.v1.cri".registry.mirrors."{name}"]\n'
                      f'  endpoint = ["http://{registry}"]\n' for name in ("docker.io", "registry.k8s.io"))
    return toml + mirrors


def manifests_for_this_machine(image: str, registry: str) -> list[dict[str, Any]]:
    """manifests/ in apply order, with host paths and bridge moved and the registry mirrored (see the module doc)."""
    return [doc for docs in manifest_files_for_this_machine(image, registry).values() for doc in docs]


def manifest_files_for_this_machine(image: str, registry: str) -> dict[str, list[dict[str, Any]]]:
    """manifests/*.yaml's documents by file name, in apply order, changed as `manifests_for_this_machine` says."""
    files = {path.name: [d for d in yaml.safe_load_all(path.read_text()) if d]
             for path in sorted((REPO / "manifests").glob("*.yaml"))}
    for doc in (d for docs in files.values() for d in docs):
        if doc["kind"] == "ConfigMap":
            doc["data"]["containerd.toml"] = mirrored_containerd_toml(doc["data"]["containerd.toml"], registry)
            conflist = json.loads(doc["data"]["10-kopflet.conflist"])
            bridge = next(p for p in conflist["plugins"] if p["type"] == "bridge")
            assert bridge["bridge"] == "kopflet0" and bridge["ipam"]["ranges"] == [[{"subnet": str(POD_SUBNET)}]]
            bridge["bridge"] = BRIDGE
            doc["data"]["10-kopflet.conflist"] = json.dumps(conflist, indent=2)
        if doc["kind"] == "DaemonSet":
            spec = doc["spec"]["template"]["spec"]
            for volume in spec["volumes"]:
                host = volume.get("hostPath")
                if host and host["path"] in HOST_PATHS:
                    host["path"] = HOST_PATHS[host["path"]]
            for c in spec["containers"]:
                assert c["image"] == image, "the DaemonSet runs another image than setup.cfg's version"
    return files


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=check)


def share(folder: str) -> None:
    """Make the folder a shared mount of its own (a bind mount onto itself), as a systemd host's would be."""
    os.makedirs(folder, exist_ok=True)
    if run("mountpoint", "-q", folder, check=False).returncode != 0:
        run("mount", "--bind", folder, folder)
    run("mount", "--make-rshared", folder)


def unmount_below(folder: str) -> None:
    """Every mount at or below the folder, deepest first (volumes the inner agent propagated, the bind itself)."""
    with open("/proc/self/mountinfo") as f:
        points = {line.split()[4] for line in f}
    for point in sorted((p for p in points if p == folder or p.startswith(folder + "/")), key=len, reverse=True):
        run("umount", "-l", point, check=False)


def remove_cgroups(name: str = "kopflet") -> None:
    """The inner runtime's cgroup subtree in every hierarchy (empty once its containers are gone)."""
    for top in [Path("/sys/fs/cgroup") / name, *Path("/sys/fs/cgroup").glob(f"*/{name}")]:
        if top.is_dir():
            for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    d.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()


def node_condition(node: dict[str, Any], kind: str) -> str:
    return next((c["status"] for c in node.get("status", {}).get("conditions", []) if c["type"] == kind), "")


T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


@pytest.fixture(scope="module")
def daemonset(running_agent: Agent, admin: Kubectl, layout: Layout) -> Iterator[dict[str, Any]]:
    """The DaemonSet installed and its pod Running on the stack's node; everything removed afterwards."""
    with installed(admin, layout) as found:
        yield found


@contextlib.contextmanager
def installed(admin: Kubectl, layout: Layout) -> Iterator[dict[str, Any]]:
    """manifests/ applied with `admin`, its pod Ready on the node `layout` names (whatever its kubelet: the stack's
    agent, or kopflet as a kubeadm node's kubelet); the pod and the inner Node, then everything removed."""
    image, archive = image_archive()
    assert archive.is_file(), f"{archive} is missing: build it with `bash images/build-agent-image.sh`"
    socket = layout.runtime_endpoint.removeprefix("unix://")
    run("ctr", "--address", socket, "-n", "k8s.io", "images", "import", str(archive))
    share(HOST_PATHS["/var/lib/kopflet"])
    inner_node = f"kopflet-{layout.node_name}"
    try:
        for doc in manifests_for_this_machine(image, layout.registry_addr):
            admin.run("apply", "-f", "-", stdin=json.dumps(doc))

        def pod() -> dict[str, Any] | None:
            pods = admin.json("get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=kopflet")["items"]
            return next((p for p in pods if is_ready(p)), None)
        try:
            ready = wait_for("the DaemonSet's pod to be Ready", pod, timeout=240)
        except AssertionError:
            described = admin.run("describe", "pods", "-n", NAMESPACE, check=False).stdout
            logs = admin.run("logs", "-n", NAMESPACE, "ds/kopflet", "--all-containers", "--tail=60",
                             check=False).stdout
            raise AssertionError(f"the DaemonSet's pod never got Ready:\n{described[-4000:]}\n{logs}") from None
        yield {"pod": ready, "node": inner_node}
    finally:
        logs = admin.run("logs", "-n", NAMESPACE, "ds/kopflet", "--all-containers", "--tail=200", check=False)
        print(logs.stdout[-8000:])
        admin.run("delete", "daemonset", "kopflet", "-n", NAMESPACE, "--ignore-not-found", "--wait=true",
                  "--timeout=120s", check=False)
        lingering: AssertionError | None = None
        try:
            wait_for("the DaemonSet's pod to go", lambda: not admin.json(
                "get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=kopflet")["items"], timeout=120)
        except AssertionError as exc:
            lingering = exc  # clean up the rest all the same, then report it
        admin.run("delete", "node", inner_node, "--ignore-not-found", check=False)
        admin.run("delete", "lease", inner_node, "-n", "kube-node-lease", "--ignore-not-found", check=False)
        remove_service_account(admin)  # the RBAC objects, then the namespace (with its ConfigMap)
        for folder in HOST_PATHS.values():
            unmount_below(folder)
            shutil.rmtree(folder, ignore_errors=True)
        remove_cgroups()
        run("ip", "link", "delete", BRIDGE, check=False)
        if lingering is not None:
            raise lingering


def test_the_daemonset_registers_a_node_of_its_own(daemonset: dict[str, Any], admin: Kubectl,
                                                    layout: Layout) -> None:
    pod = daemonset["pod"]
    assert pod["spec"]["nodeName"] == layout.node_name  # run by the resident agent
    assert {c["name"] for c in pod["status"]["containerStatuses"] if c["ready"]} == {"agent", "runtime"}
    node = wait_for(f"Node {daemonset['node']} Ready", lambda: next(
        (n for n in admin.json("get", "nodes")["items"]
         if n["metadata"]["name"] == daemonset["node"] and node_condition(n, "Ready") == "True"), None), timeout=120)
    assert node["metadata"]["labels"]["kopflet.dev/agent"] == "true"
    assert TAINT in node["spec"].get("taints", [])
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert addresses["InternalIP"] == pod["status"]["hostIP"]  # --node-ip=$(HOST_IP)
    assert node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == 10350
    # Never kopflet on its own Node: the DaemonSet wants exactly the one resident node.
    ds = admin.json("get", "daemonset", "kopflet", "-n", NAMESPACE)
    assert ds["status"]["desiredNumberScheduled"] == 1


def test_a_tolerating_pod_runs_in_the_inner_runtime_and_is_deleted_by_it(daemonset: dict[str, Any],
                                                                        admin: Kubectl, layout: Layout,
                                                                        namespace: str) -> None:
    inner = daemonset["node"]
    # Placed by the scheduler (no nodeName): the toleration and the node selector of docs/operations.md.
    admin.apply(json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "edge", "namespace": namespace},
                            "spec": {"nodeSelector": {"kubernetes.io/hostname": inner},
                                     "tolerations": [{**TAINT, "operator": "Equal"}],
                                     "terminationGracePeriodSeconds": 5,
                                     "containers": [container("main", "sleep 3600", image=BUSYBOX)]}}))
    pod = wait_pod(admin, namespace, "edge", is_ready, timeout=180, what="Ready on the kopflet node")
    assert pod["spec"]["nodeName"] == inner
    assert ipaddress.ip_address(pod["status"]["podIP"]) in POD_SUBNET  # the inner runtime's own bridge
    assert runtime_sandboxes(layout, pod["metadata"]["uid"]) == []  # the resident runtime never sees it
    reasons = {e["reason"] for e in events(admin, namespace, "edge")}
    assert {"Scheduled", "Pulled", "Created", "Started"} <= reasons
    # An untolerating pod aimed at the kopflet node stays unscheduled.
    admin.apply(json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain", "namespace": namespace},
                            "spec": {"nodeSelector": {"kubernetes.io/hostname": inner},
                                     "containers": [container("main", "sleep 3600", image=BUSYBOX)]}}))
    unscheduled = wait_pod(admin, namespace, "plain", lambda p: any(
        c["type"] == "PodScheduled" and c["status"] == "False" for c in p.get("status", {}).get("conditions", [])),
        timeout=60, what="unschedulable")
    assert "untolerated taint" in json.dumps(unscheduled["status"]["conditions"])
    admin.run("delete", "pod", "edge", "-n", namespace, "--wait=false")
    wait_gone(admin, namespace, "edge", timeout=60)
