"""Admission on the real stack: pods this node cannot run end Failed with the upstream reason and
message, a Warning event, and never reach the runtime."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from devstack import processes, stack
from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_pod_lifecycle import container, events, is_ready, phase, pod_manifest, runtime_sandboxes, wait_pod

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


def wait_node_idle(admin: Kubectl, node: str, timeout: float = 90) -> None:
    """No pod on the node counts towards max-pods: pods left by earlier tests are gone or terminal."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = admin.json("get", "pods", "-A", "--field-selector", f"spec.nodeName={node}")["items"]
        if all(p.get("status", {}).get("phase") in ("Succeeded", "Failed") for p in pods):
            return
        time.sleep(1)
    raise AssertionError(f"pods still active on {node}: {[p['metadata']['name'] for p in pods]}")


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
