"""The agent's Node on the real apiserver: registration, Lease heartbeat, Ready following containerd."""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Callable
from typing import Any

from devstack import processes, stack
from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent


def wait_node(admin: Kubectl, name: str, predicate: Callable[[dict[str, Any]], bool], timeout: float,
              what: str) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    node: dict[str, Any] = {}
    while time.monotonic() < deadline:
        proc = admin.run("get", "node", name, "-o", "json", check=False)
        if proc.returncode == 0:
            node = json.loads(proc.stdout)
            if predicate(node):
                return node
        time.sleep(1)
    raise AssertionError(f"node {name} never became {what}; conditions: {node.get('status', {}).get('conditions')}")


def ready(node: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in node.get("status", {}).get("conditions", []) if c["type"] == "Ready")


def test_node_registers_ready_with_its_facts(running_agent: Agent, admin: Kubectl, layout: Layout) -> None:
    node = wait_node(admin, layout.node_name, lambda n: ready(n)["status"] == "True", 60, "Ready")
    labels = node["metadata"]["labels"]
    assert labels["kubernetes.io/hostname"] == layout.node_name
    assert labels["kubernetes.io/os"] == "linux" and labels["kubernetes.io/arch"] == "amd64"
    st = node["status"]
    assert set(st["capacity"]) >= {"cpu", "memory", "pods", "ephemeral-storage"}
    assert st["capacity"]["pods"] == "110" and int(st["capacity"]["cpu"]) >= 1
    assert st["allocatable"]["memory"] != st["capacity"]["memory"]  # hard eviction threshold kept back
    types = {a["type"]: a["address"] for a in st["addresses"]}
    assert types["Hostname"] == layout.node_name and types["InternalIP"]
    info = st["nodeInfo"]
    assert info["containerRuntimeVersion"].startswith("containerd://1.6")
    assert info["kubeletVersion"].startswith("v") and "kopflet" in info["kubeletVersion"]
    assert info["operatingSystem"] == "linux" and info["architecture"] == "amd64"
    assert info["kernelVersion"] and info["osImage"] and info["bootID"]
    assert st["daemonEndpoints"]["kubeletEndpoint"]["Port"] == 10250
    names = [n for image in st.get("images", []) for n in image["names"]]
    assert any("pause" in n for n in names), names
    assert {c["type"] for c in st["conditions"]} >= {"Ready", "MemoryPressure", "DiskPressure", "PIDPressure"}
    assert ready(node)["reason"] == "KubeletReady"


def test_lease_is_renewed(running_agent: Agent, admin: Kubectl, layout: Layout) -> None:
    lease = admin.json("get", "lease", layout.node_name, "-n", "kube-node-lease")
    assert lease["spec"]["holderIdentity"] == layout.node_name
    assert lease["spec"]["leaseDurationSeconds"] == 40
    assert lease["metadata"]["ownerReferences"][0]["kind"] == "Node"
    first = lease["spec"]["renewTime"]
    deadline = time.monotonic() + 25
    while time.monotonic() < deadline:
        if admin.json("get", "lease", layout.node_name, "-n", "kube-node-lease")["spec"]["renewTime"] != first:
            return
        time.sleep(1)
    raise AssertionError("the Lease was not renewed within 25s")


def test_ready_follows_the_runtime(running_agent: Agent, admin: Kubectl, layout: Layout) -> None:
    wait_node(admin, layout.node_name, lambda n: ready(n)["status"] == "True", 60, "Ready")
    containerd = next(c for c in stack.components(layout) if c.name == "containerd")
    processes.stop("containerd", pids=layout.pids)
    try:
        node = wait_node(admin, layout.node_name, lambda n: ready(n)["status"] == "False", 45, "NotReady")
        cond = ready(node)
        assert cond["reason"] == "KubeletNotReady" and "container runtime is down" in cond["message"]
        transition = datetime.datetime.fromisoformat(cond["lastTransitionTime"].replace("Z", "+00:00"))
        assert transition > datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=2)
    finally:
        processes.start("containerd", containerd.argv, pids=layout.pids, logs=layout.logs,
                        healthy=containerd.healthy, timeout=containerd.timeout)
    wait_node(admin, layout.node_name, lambda n: ready(n)["status"] == "True", 45, "Ready again")
    assert running_agent.proc is not None and running_agent.proc.poll() is None
