"""Probes on the real stack: readiness gates Ready, a failing liveness probe restarts the container with
the upstream events, and probes reach the pod over its IP (httpGet, tcpSocket) or run in it (exec)."""

from __future__ import annotations

import json
import time
from typing import Any

from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_pod_lifecycle import container, events, is_ready, pod_manifest, statuses, wait_pod


def conditions(pod: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}


def test_readiness_exec_probe_holds_ready_back(running_agent: Agent, admin: Kubectl, layout: Layout,
                                               namespace: str) -> None:
    probe = {"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 1}
    admin.apply(pod_manifest("late", namespace, layout.node_name,
                             [container("main", "sleep 6; touch /tmp/ready; sleep 3600", readinessProbe=probe)]))
    running = wait_pod(admin, namespace, "late", lambda p: "running" in statuses(p).get("main", {}).get("state", {}),
                       what="running")
    assert conditions(running)["Ready"] == "False" and statuses(running)["main"]["ready"] is False
    assert conditions(running)["ContainersReady"] == "False"
    pod = wait_pod(admin, namespace, "late", is_ready, timeout=60, what="Ready once the probe passes")
    assert statuses(pod)["main"]["ready"] is True and statuses(pod)["main"]["restartCount"] == 0


def test_liveness_http_probe_restarts_the_container(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                     namespace: str) -> None:
    script = ("mkdir -p /www && echo ok > /www/healthz && httpd -p 8080 -h /www; "
              "sleep 4; rm /www/healthz; sleep 3600")
    liveness = {"httpGet": {"path": "/healthz", "port": "web"}, "periodSeconds": 1, "failureThreshold": 2}
    readiness = {"tcpSocket": {"port": 8080}, "periodSeconds": 1}
    admin.apply(pod_manifest("sick", namespace, layout.node_name, [container(
        "main", script, ports=[{"name": "web", "containerPort": 8080}],
        livenessProbe=liveness, readinessProbe=readiness)]))
    pod = wait_pod(admin, namespace, "sick", lambda p: statuses(p).get("main", {}).get("restartCount", 0) >= 1,
                   timeout=90, what="restarted by its liveness probe")
    assert statuses(pod)["main"]["lastState"]["terminated"]["exitCode"] != 0
    evs = events(admin, namespace, "sick")
    unhealthy = [e for e in evs if e["reason"] == "Unhealthy"]
    assert unhealthy and unhealthy[0]["type"] == "Warning"
    assert any(e["message"].startswith("Liveness probe failed: HTTP probe failed with statuscode: 404")
               for e in unhealthy), [e["message"] for e in unhealthy]
    assert any(e["reason"] == "Killing" and "failed liveness probe, will be restarted" in e["message"] for e in evs), \
        [(e["reason"], e["message"]) for e in evs]


AGNHOST = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"


def test_grpc_readiness_probe_passes(running_agent: Agent, admin: Kubectl, layout: Layout, namespace: str) -> None:
    probe = {"grpc": {"port": 5000}, "periodSeconds": 1}
    admin.apply(pod_manifest("grpc-ok", namespace, layout.node_name, [
        {"name": "main", "image": AGNHOST, "args": ["grpc-health-checking", "--port=5000"], "readinessProbe": probe}]))
    pod = wait_pod(admin, namespace, "grpc-ok", is_ready, what="Ready through the gRPC health protocol")
    assert statuses(pod)["main"]["restartCount"] == 0


def test_grpc_liveness_probe_failure_restarts(running_agent: Agent, admin: Kubectl, layout: Layout,
                                              namespace: str) -> None:
    probe = {"grpc": {"port": 5000}, "periodSeconds": 1, "failureThreshold": 2}
    admin.apply(pod_manifest("grpc-sick", namespace, layout.node_name, [
        {"name": "main", "image": AGNHOST, "args": ["grpc-health-checking", "--port=5000", "--delay-unhealthy-sec=3"],
         "livenessProbe": probe}]))
    wait_pod(admin, namespace, "grpc-sick", lambda p: statuses(p).get("main", {}).get("restartCount", 0) >= 1,
             timeout=90, what="restarted by its gRPC liveness probe")
    messages = [e["message"] for e in events(admin, namespace, "grpc-sick") if e["reason"] == "Unhealthy"]
    assert 'Liveness probe failed: service unhealthy (responded with "NOT_SERVING")' in messages, messages


def test_probe_termination_grace_period_overrides_the_pods(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                           namespace: str) -> None:
    """The container ignores SIGTERM and the pod allows 600s: only the probe's own 2s let it restart soon."""
    liveness = {"exec": {"command": ["cat", "/tmp/alive"]}, "periodSeconds": 1, "failureThreshold": 1,
                "terminationGracePeriodSeconds": 2}
    admin.apply(pod_manifest("stubborn", namespace, layout.node_name, [container(
        "main", "trap '' TERM; touch /tmp/alive; sleep 3; rm /tmp/alive; while true; do sleep 1; done",
        livenessProbe=liveness)], terminationGracePeriodSeconds=600))
    try:
        pod = wait_pod(admin, namespace, "stubborn", lambda p: statuses(p).get("main", {}).get("restartCount", 0) >= 1,
                       timeout=60, what="restarted after the probe's 2s grace, not the pod's 600s")
        assert statuses(pod)["main"]["lastState"]["terminated"]["exitCode"] == 137  # SIGKILL after the grace
    finally:
        admin.run("delete", "pod", "stubborn", "-n", namespace, "--grace-period=1", "--wait=false")


def test_tcp_readiness_probe_failing_keeps_the_pod_unready(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                           namespace: str) -> None:
    probe = {"tcpSocket": {"port": 9999}, "periodSeconds": 1}
    admin.apply(pod_manifest("closed", namespace, layout.node_name,
                             [container("main", "sleep 3600", readinessProbe=probe)]))
    deadline = time.monotonic() + 60
    messages: list[str] = []
    while time.monotonic() < deadline and not messages:
        messages = [e["message"] for e in events(admin, namespace, "closed") if e["reason"] == "Unhealthy"]
        time.sleep(1)
    assert messages and messages[0].startswith("Readiness probe failed: dial tcp ") \
        and messages[0].endswith(":9999: connect: connection refused"), messages
    pod = admin.json("get", "pod", "closed", "-n", namespace)
    assert conditions(pod)["Ready"] == "False" and statuses(pod)["main"]["ready"] is False


def test_readiness_gate_holds_ready_until_its_condition_is_true(running_agent: Agent, admin: Kubectl,
                                                                layout: Layout, namespace: str) -> None:
    gate = "example.com/load-balancer-attached"
    admin.apply(pod_manifest("gated", namespace, layout.node_name, [container("main", "sleep 3600")],
                             readinessGates=[{"conditionType": gate}]))
    pod = wait_pod(admin, namespace, "gated", lambda p: conditions(p).get("ContainersReady") == "True",
                   what="containers ready")
    ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and ready["reason"] == "ReadinessGatesNotReady"
    assert ready["message"] == f'corresponding condition of pod readiness gate "{gate}" does not exist.'
    # What a load balancer controller does; the agent re-judges Ready when it sees the condition.
    admin.run("patch", "pod", "gated", "-n", namespace, "--subresource=status", "--type=strategic", "-p",
              json.dumps({"status": {"conditions": [{"type": gate, "status": "True"}]}}))
    wait_pod(admin, namespace, "gated", is_ready, timeout=30, what="Ready once the gate's condition is True")
