"""Admission on the real stack: pods this node cannot run end Failed with the upstream reason and
message, a Warning event, and never reach the runtime."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from devstack import processes, stack
from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_pod_lifecycle import (
    container,
    events,
    is_ready,
    phase,
    pod_manifest,
    runtime_sandboxes,
    wait_node_idle,
    wait_pod,
)

MAX_PODS = 3


@pytest.fixture(scope="module")
def small_agent(layout: Layout, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    """An agent with --max-pods=3, configured through KOPFLET_ARGS as a `kopf run` user would."""
    a = Agent(layout, tmp_path_factory.mktemp("agent") / "agent.log", env={"KOPFLET_ARGS": f"--max-pods={MAX_PODS}"})
    a.start()
    a.wait_for(r"Activity 'start_agent' succeeded")
    yield a
    a.stop()


def rejected(admin: Kubectl, namespace: str, name: str, layout: Layout) -> dict[str, Any]:
    pod = wait_pod(admin, namespace, name, phase("Failed"), timeout=60, what="rejected")
    assert pod["status"]["message"].startswith("Pod was rejected: "), pod["status"]
    warnings = [e for e in events(admin, namespace, name) if e["type"] == "Warning"]
    assert any(e["reason"] == pod["status"]["reason"] for e in warnings), warnings
    assert runtime_sandboxes(layout, pod["metadata"]["uid"]) == []  # never reached the runtime
    return pod


@pytest.mark.parametrize(("name", "spec_extra", "resources", "reason", "message"), [
    ("greedy", {}, {"requests": {"cpu": "64"}}, "OutOfcpu",
     "Pod was rejected: Node didn't have enough resource: cpu, requested: 64000, used: 0, capacity: "),
    ("hungry", {}, {"requests": {"memory": "100Ti"}}, "OutOfmemory",
     "Pod was rejected: Node didn't have enough resource: memory, requested: 109951162777600, used: 0, capacity: "),
    ("picky", {"nodeSelector": {"disktype": "ssd"}}, {}, "NodeAffinity",
     "Pod was rejected: Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"),
    ("windowsy", {"os": {"name": "windows"}}, {}, "PodOSNotSupported",
     "Pod was rejected: Failed to admit pod as the OS field doesn't match node OS"),
    ("tuned", {"securityContext": {"sysctls": [{"name": "net.core.somaxconn", "value": "1024"}]}}, {},
     "SysctlForbidden", 'Pod was rejected: forbidden sysctl: "net.core.somaxconn" not allowlisted'),
])
def test_rejections(small_agent: Agent, admin: Kubectl, layout: Layout, namespace: str, name: str,
                    spec_extra: dict[str, Any], resources: dict[str, Any], reason: str, message: str) -> None:
    c = container("main", "sleep 3600", resources=resources) if resources else container("main", "sleep 3600")
    admin.apply(pod_manifest(name, namespace, layout.node_name, [c], **spec_extra))
    pod = rejected(admin, namespace, name, layout)
    assert pod["status"]["reason"] == reason
    assert pod["status"]["message"].startswith(message), pod["status"]["message"]
    time.sleep(2)  # final: it stays rejected
    assert admin.json("get", "pod", name, "-n", namespace)["status"]["phase"] == "Failed"


def test_untolerated_no_execute_taint(small_agent: Agent, admin: Kubectl, layout: Layout, namespace: str) -> None:
    # The controller-manager's taint eviction would delete the pod first; the kubelet's own check is for the
    # window before that. Stop the controller-manager so only the agent acts on the taint.
    cm = next(c for c in stack.components(layout) if c.name == "kube-controller-manager")
    processes.stop(cm.name, pids=layout.pids)
    admin.run("taint", "node", layout.node_name, "kopflet-test=yes:NoExecute")
    try:
        admin.apply(pod_manifest("intolerant", namespace, layout.node_name, [container("main", "sleep 3600")]))
        pod = rejected(admin, namespace, "intolerant", layout)
        assert pod["status"]["reason"] == "TaintToleration"
        admin.apply(pod_manifest("tolerant", namespace, layout.node_name, [container("main", "sleep 3600")],
                                 tolerations=[{"key": "kopflet-test", "operator": "Exists", "effect": "NoExecute"}]))
        wait_pod(admin, namespace, "tolerant", is_ready, what="Ready despite the taint it tolerates")
    finally:
        admin.run("taint", "node", layout.node_name, "kopflet-test=yes:NoExecute-", check=False)
        admin.run("delete", "pod", "tolerant", "-n", namespace, "--wait=false", check=False)
        processes.start(cm.name, cm.argv, pids=layout.pids, logs=layout.logs, healthy=cm.healthy, timeout=cm.timeout)


def test_out_of_pods(small_agent: Agent, admin: Kubectl, layout: Layout, namespace: str) -> None:
    wait_node_idle(admin, layout.node_name)
    for i in range(MAX_PODS):
        admin.apply(pod_manifest(f"filler-{i}", namespace, layout.node_name, [container("main", "sleep 3600")]))
    for i in range(MAX_PODS):
        wait_pod(admin, namespace, f"filler-{i}", is_ready, what="Ready")
    admin.apply(pod_manifest("one-too-many", namespace, layout.node_name, [container("main", "sleep 3600")]))
    pod = rejected(admin, namespace, "one-too-many", layout)
    assert pod["status"]["reason"] == "OutOfpods"
    assert pod["status"]["message"] == ("Pod was rejected: Node didn't have enough resource: pods, "
                                        f"requested: 1, used: {MAX_PODS}, capacity: {MAX_PODS}")


def arrive_together(admin: Kubectl, namespace: str, node: str, names: list[str],
                    containers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Create these pods in one request (one List), wait until each runs or is refused; the refused ones."""
    items = [json.loads(pod_manifest(name, namespace, node, containers, terminationGracePeriodSeconds=0))
             for name in names]
    admin.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    pods = [wait_pod(admin, namespace, name, lambda p: is_ready(p) or phase("Failed")(p), timeout=90,
                     what="admitted or refused") for name in names]
    return [p for p in pods if p["status"].get("phase") == "Failed"]


def test_pods_arriving_together_are_admitted_one_at_a_time(small_agent: Agent, admin: Kubectl, layout: Layout,
                                                             namespace: str) -> None:
    """Upstream admits pods one at a time (HandlePodAdditions under the allocation lock), each against those admitted
    before it: of three pods created at once that each want 60% of the node's CPU, one runs and two are refused
    OutOfcpu counting the first one's request; of two pods created at once wanting the same host port, one runs
    and the other is refused NodePorts."""
    wait_node_idle(admin, layout.node_name)
    allocatable = admin.json("get", "node", layout.node_name)["status"]["allocatable"]["cpu"]
    milli = int(float(allocatable.removesuffix("m")) * (1 if allocatable.endswith("m") else 1000))
    share = milli * 6 // 10
    names = [f"share-{i}" for i in range(3)]
    refused = arrive_together(admin, namespace, layout.node_name, names, [
        container("main", "sleep 3600", resources={"requests": {"cpu": f"{share}m"}})])
    assert len(refused) == 2, [p["metadata"]["name"] for p in refused]
    for pod in refused:
        assert pod["status"]["reason"] == "OutOfcpu"
        assert f"requested: {share}, used: {share}, capacity: {milli}" in pod["status"]["message"], pod["status"]
    for name in names:
        admin.run("delete", "pod", name, "-n", namespace, "--wait=false")
    wait_node_idle(admin, layout.node_name)

    refused = arrive_together(admin, namespace, layout.node_name, ["port-0", "port-1"], [
        container("main", "sleep 3600", ports=[{"containerPort": 8080, "hostPort": 31999}])])
    assert len(refused) == 1, [p["metadata"]["name"] for p in refused]
    assert refused[0]["status"]["reason"] == "NodePorts"
    assert refused[0]["status"]["message"] == (
        "Pod was rejected: Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports")
