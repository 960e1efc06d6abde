"""The agent survives its dependencies restarting: containerd and the apiserver go away and come back,
running pods stay untouched, and new pods still start."""
# The reliability report (python -m reliability) reads each test's record_property("injected"/"saw").

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from cri_client import CriClient
from cri_client import types as cri
from devstack import processes, stack
from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_pod_lifecycle import (
    container,
    is_ready,
    pod_manifest,
    runtime_containers,
    statuses,
    wait_gone,
    wait_pod,
)


def restart(layout: Layout, name: str, down_for: float = 3.0) -> None:
    comp = next(c for c in stack.components(layout) if c.name == name)
    processes.stop(name, pids=layout.pids)
    time.sleep(down_for)
    processes.start(name, comp.argv, pids=layout.pids, logs=layout.logs, healthy=comp.healthy, timeout=comp.timeout)


@pytest.mark.parametrize("component", ["containerd", "kube-apiserver"])
def test_restart_keeps_pods_and_converges(running_agent: Agent, admin: Kubectl, layout: Layout, namespace: str,
                                          component: str) -> None:
    admin.apply(pod_manifest("before", namespace, layout.node_name, [container("main", "sleep 3600")]))
    pod = wait_pod(admin, namespace, "before", is_ready, what="Ready")
    uid, container_id = pod["metadata"]["uid"], statuses(pod)["main"]["containerID"]

    restart(layout, component)

    admin.apply(pod_manifest("after", namespace, layout.node_name, [container("main", "sleep 3600")]))
    wait_pod(admin, namespace, "after", is_ready, timeout=120, what=f"Ready after a {component} restart")
    pod = admin.json("get", "pod", "before", "-n", namespace)
    assert statuses(pod)["main"]["containerID"] == container_id and statuses(pod)["main"]["restartCount"] == 0
    assert len(runtime_containers(layout, uid)) == 1
    assert running_agent.proc is not None and running_agent.proc.poll() is None


def cni_ips(layout: Layout) -> int:
    """Addresses host-local IPAM holds (one file per IP, beside its lock and last_reserved_ip files)."""
    return sum(1 for net in layout.cni_data_dir.iterdir() if net.is_dir()
               for f in net.iterdir() if f.name[:1].isdigit() or ":" in f.name)


def node_ready(admin: Kubectl, layout: Layout, timeout: float = 90) -> None:
    """The node's Ready condition is True (it may have gone False while the runtime was away)."""
    deadline = time.monotonic() + timeout
    ready: dict[str, Any] = {}
    while time.monotonic() < deadline:
        node = admin.json("get", "node", layout.node_name)
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        if ready["status"] == "True":
            return
        time.sleep(1)
    raise AssertionError(f"node not Ready after the restart: {ready}")


def ip_leaks(layout: Layout, timeout: float = 60) -> int:
    """IPs host-local holds beyond one per ready pod-network sandbox, once pods still being torn down (from
    earlier tests) have settled."""

    async def ready_sandboxes() -> int:
        async with CriClient(layout.runtime_endpoint) as client:
            listed = await client.sandboxes.list(cri.PodSandboxFilter(state=cri.SandboxState.READY))
            statuses_ = [await client.sandboxes.status(s.id) for s in listed]
        return sum(1 for st in statuses_ if st.ip)

    deadline = time.monotonic() + timeout
    while True:
        extra = cni_ips(layout) - asyncio.run(ready_sandboxes())
        if extra == 0 or time.monotonic() > deadline:
            return extra
        time.sleep(2)


def many_pods(namespace: str, node: str, count: int, prefix: str) -> str:
    items: list[dict[str, Any]] = [json.loads(pod_manifest(f"{prefix}-{i:02d}", namespace, node,
                                                          [container("main", "sleep 3600")])) for i in range(count)]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def test_containerd_restart_under_50_pods(running_agent: Agent, admin: Kubectl, layout: Layout, namespace: str,
                                          record_property: Any) -> None:
    count = 50
    admin.apply(many_pods(namespace, layout.node_name, count, "load"))
    deadline = time.monotonic() + 300
    while True:
        pods = admin.json("get", "pods", "-n", namespace)["items"]
        if len(pods) == count and all(is_ready(p) for p in pods):
            break
        assert time.monotonic() < deadline, f"only {sum(map(is_ready, pods))}/{count} pods Ready"
        time.sleep(2)
    containers = {p["metadata"]["name"]: statuses(p)["main"]["containerID"] for p in pods}
    assert ip_leaks(layout) == 0

    restart(layout, "containerd")
    node_ready(admin, layout)
    admin.apply(pod_manifest("after", namespace, layout.node_name, [container("main", "sleep 3600")]))
    wait_pod(admin, namespace, "after", is_ready, timeout=120, what="Ready after the containerd restart")

    pods = [p for p in admin.json("get", "pods", "-n", namespace)["items"] if p["metadata"]["name"] != "after"]
    restarted = [p["metadata"]["name"] for p in pods
                 if statuses(p)["main"]["containerID"] != containers[p["metadata"]["name"]]
                 or statuses(p)["main"]["restartCount"] != 0 or not is_ready(p)]
    assert not restarted, f"pods restarted or not Ready after the containerd restart: {restarted}"
    assert ip_leaks(layout) == 0, "IP addresses leaked across the restart"
    record_property("injected", f"containerd stopped for 3 s and started again under {count} running pods")
    record_property("saw", f"node Ready again; 0 of {count} pods restarted (same container IDs, restartCount 0); "
                           f"a new pod started; CNI IPs held = ready pod sandboxes (no leak)")


def test_apiserver_restart_while_pods_change(running_agent: Agent, admin: Kubectl, layout: Layout, namespace: str,
                                             record_property: Any) -> None:
    admin.apply(pod_manifest("stays", namespace, layout.node_name, [container("main", "sleep 3600")]))
    admin.apply(pod_manifest("goes", namespace, layout.node_name, [container("main", "sleep 3600")]))
    stays = wait_pod(admin, namespace, "stays", is_ready, what="Ready")
    goes = wait_pod(admin, namespace, "goes", is_ready, what="Ready")
    restart(layout, "kube-apiserver", down_for=5)
    # Changes the moment it is back, while the agent's watches are still reconnecting.
    admin.run("delete", "pod", "goes", "-n", namespace, "--wait=false")
    admin.apply(pod_manifest("new", namespace, layout.node_name, [container("main", "sleep 3600")]))
    wait_pod(admin, namespace, "new", is_ready, timeout=120, what="Ready after the apiserver restart")
    wait_gone(admin, namespace, "goes", timeout=120)
    assert runtime_containers(layout, goes["metadata"]["uid"]) == [] or all(
        c.state.name == "EXITED" for c in runtime_containers(layout, goes["metadata"]["uid"]))
    now = admin.json("get", "pod", "stays", "-n", namespace)
    assert statuses(now)["main"]["containerID"] == statuses(stays)["main"]["containerID"]
    assert statuses(now)["main"]["restartCount"] == 0
    record_property("injected", "kube-apiserver stopped for 5 s; a pod deleted and one created as it returned")
    record_property("saw", "the new pod Ready, the deleted one gone, the untouched one not restarted")
