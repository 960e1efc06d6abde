"""Lifecycle hooks on the real stack: postStart runs in the container and a failing one kills it with the
upstream events; preStop runs before SIGTERM and inside the grace period."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_pod_lifecycle import container, events, is_ready, pod_manifest, statuses, wait_gone, wait_pod


def test_post_start_hook_runs_in_the_container(running_agent: Agent, admin: Kubectl, layout: Layout,
                                               namespace: str) -> None:
    hook = {"postStart": {"exec": {"command": ["sh", "-c", "echo started > /tmp/hooked"]}}}
    probe = {"exec": {"command": ["cat", "/tmp/hooked"]}, "periodSeconds": 1}
    admin.apply(pod_manifest("hooked", namespace, layout.node_name,
                             [container("main", "sleep 3600", lifecycle=hook, readinessProbe=probe)]))
    pod = wait_pod(admin, namespace, "hooked", is_ready, what="Ready (the hook's file is there)")
    assert statuses(pod)["main"]["restartCount"] == 0


def test_failing_post_start_hook_kills_the_container(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                     namespace: str) -> None:
    hook = {"postStart": {"exec": {"command": ["sh", "-c", "echo nope; exit 3"]}}}
    admin.apply(pod_manifest("badhook", namespace, layout.node_name,
                             [container("main", "sleep 3600", lifecycle=hook)], restartPolicy="Never"))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        reasons = {e["reason"]: e for e in events(admin, namespace, "badhook")}
        if "FailedPostStartHook" in reasons and "Killing" in reasons:
            break
        time.sleep(1)
    failed = reasons["FailedPostStartHook"]
    assert failed["type"] == "Warning"
    assert failed["message"].startswith("Exec lifecycle hook ([sh -c echo nope; exit 3]) for Container \"main\"")
    assert "exited with 3" in failed["message"]
    assert reasons["Killing"]["message"] == "FailedPostStartHook"
    wait_pod(admin, namespace, "badhook", lambda p: p["status"].get("phase") == "Failed", what="Failed")


def test_pre_stop_hook_runs_before_sigterm(running_agent: Agent, admin: Kubectl, layout: Layout,
                                           namespace: str) -> None:
    hook = {"preStop": {"sleep": {"seconds": 4}}}
    admin.apply(pod_manifest("polite", namespace, layout.node_name,
                             [container("main", "trap 'exit 0' TERM; while true; do sleep 0.2; done", lifecycle=hook)],
                             terminationGracePeriodSeconds=20))
    wait_pod(admin, namespace, "polite", is_ready, what="Ready")
    admin.run("delete", "pod", "polite", "-n", namespace, "--wait=false")
    took = wait_gone(admin, namespace, "polite", timeout=40)
    assert 4 <= took < 15, f"deletion took {took:.1f}s; the 4s preStop sleep must come first"


def test_hook_order_seen_from_inside_the_container(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                   namespace: str, tmp_path: Path) -> None:
    """postStart finishes before the container is reported running; preStop runs before SIGTERM."""
    record = tmp_path / "order.log"
    record.touch()
    hooks: dict[str, Any] = {
        "postStart": {"exec": {"command": ["sh", "-c", "sleep 2; echo postStart >> /rec/order.log"]}},
        "preStop": {"exec": {"command": ["sh", "-c", "echo preStop >> /rec/order.log"]}}}
    script = ("trap 'echo TERM >> /rec/order.log; exit 0' TERM; echo main >> /rec/order.log; "
              "while true; do sleep 0.2; done")
    admin.apply(pod_manifest("ordered", namespace, layout.node_name, [container(
        "main", script, lifecycle=hooks, volumeMounts=[{"name": "rec", "mountPath": "/rec"}])],
        volumes=[{"name": "rec", "hostPath": {"path": str(tmp_path), "type": "Directory"}}],
        terminationGracePeriodSeconds=20))
    wait_pod(admin, namespace, "ordered", lambda p: "running" in statuses(p).get("main", {}).get("state", {}),
             what="running", timeout=60)
    assert "postStart" in record.read_text().split(), "reported running before its postStart hook returned"
    admin.run("delete", "pod", "ordered", "-n", namespace, "--wait=false")
    wait_gone(admin, namespace, "ordered", timeout=40)
    lines = record.read_text().split()
    assert sorted(lines[:2]) == ["main", "postStart"] and lines[2:] == ["preStop", "TERM"], lines
