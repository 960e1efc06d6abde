"""``kopflet explain`` and the kubelet API's ``/debug/pods`` on the real stack: a crash-looping pod's decisions, read
through the apiserver's node proxy with kubectl and with the kopflet command."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_pod_lifecycle import container, pod_manifest, wait_pod

KOPFLET = str(Path(sys.executable).with_name("kopflet"))


def crash_looping(pod: dict[str, Any]) -> bool:
    return any((s.get("state", {}).get("waiting") or {}).get("reason") == "CrashLoopBackOff"
               for s in pod.get("status", {}).get("containerStatuses") or ())


def explain(layout: Layout, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([KOPFLET, "explain", *args, f"--kubeconfig={layout.admin_kubeconfig}"],
                          capture_output=True, text=True, timeout=60)


def test_a_crash_looping_pod_is_explained(running_agent: Agent, admin: Kubectl, layout: Layout,
                                          namespace: str) -> None:
    node = layout.node_name
    admin.apply(pod_manifest("crashes", namespace, node, [container("app", "sleep 1; exit 3")]))
    pod = wait_pod(admin, namespace, "crashes", crash_looping, timeout=120, what="CrashLoopBackOff")
    uid = pod["metadata"]["uid"]
    path = f"/api/v1/nodes/{node}/proxy/debug/pods/{namespace}/crashes"

    text = admin.run("get", "--raw", path + "?format=text").stdout
    assert text.startswith(f"pod {namespace}/crashes (uid {uid}): ")
    assert "container app: restart held back — exited 3 (Error), restartPolicy Always; back-off " in text
    assert "crash-loop back-off ends" in text

    # The command says the same, finding the node from the pod.
    command = explain(layout, f"{namespace}/crashes")
    assert command.returncode == 0, command.stderr
    assert "container app: restart held back — exited 3 (Error), restartPolicy Always; back-off " in command.stdout

    answer = json.loads(admin.run("get", "--raw", path).stdout)
    assert (answer["namespace"], answer["name"], answer["uid"]) == (namespace, "crashes", uid)
    assert answer["decisions"], answer
    held = [r for d in answer["decisions"] for r in d["rules"]
            if r["subject"] == "container app" and r["action"] == "restart held back"]
    assert held and all(r["until"] for r in held), answer
    assert any(d["nextReason"] == "crash-loop back-off ends" for d in answer["decisions"])

    # A pod the agent does not have: upstream's words, from the agent and from the command.
    missing = admin.run("get", "--raw", f"/api/v1/nodes/{node}/proxy/debug/pods/{namespace}/nope?format=text",
                        check=False)
    assert missing.returncode != 0
    command = explain(layout, "nope", "-n", namespace, "--node", node)
    assert command.returncode == 1
    assert f'node {node}: pod "nope" does not exist' in command.stderr
    command = explain(layout, f"{namespace}/nope")
    assert command.returncode == 1 and f"pod {namespace}/nope not found" in command.stderr


def test_a_pod_start_has_its_timeline(running_agent: Agent, admin: Kubectl, layout: Layout, namespace: str) -> None:
    node = layout.node_name
    init = container("init", "true", imagePullPolicy="Always")
    app = container("app", "touch /tmp/ready; sleep 3600",
                    readinessProbe={"exec": {"command": ["cat", "/tmp/ready"]}, "initialDelaySeconds": 2,
                                    "periodSeconds": 1})
    admin.apply(pod_manifest("started", namespace, node, [app], initContainers=[init]))
    wait_pod(admin, namespace, "started", lambda p: any(
        c["type"] == "Ready" and c["status"] == "True" for c in p.get("status", {}).get("conditions") or ()),
        what="Ready")
    path = f"/api/v1/nodes/{node}/proxy/debug/pods/{namespace}/started"

    def timeline() -> dict[str, Any]:
        return json.loads(admin.run("get", "--raw", path).stdout)["startTimeline"] or {}

    deadline = time.monotonic() + 10  # the worker ends the timeline with the sync that writes Ready
    start = timeline()
    while start.get("outcome") != "Ready" and time.monotonic() < deadline:
        time.sleep(0.5)
        start = timeline()
    assert start.get("outcome") == "Ready", start
    steps = [(s["kind"], s["detail"]) for s in start["steps"]]
    assert steps[:3] == [("admission", ""), ("volumes", ""), ("sandbox", "")], steps
    assert ("image pull", "docker.io/library/busybox:1.36") in steps  # imagePullPolicy Always
    order = [s for s in steps if s[0] in ("create", "start")]
    assert order == [("create", "init"), ("start", "init"), ("create", "app"), ("start", "app")], steps
    assert steps[-1][0] == "until ready"
    offsets = [s["offsetSeconds"] for s in start["steps"]]
    assert offsets == sorted(offsets) and not any(s["error"] for s in start["steps"])
    assert "start timeline, from " in admin.run("get", "--raw", path + "?format=text").stdout

    metrics = admin.run("get", "--raw", f"/api/v1/nodes/{node}/proxy/metrics").stdout
    for series in ('kopflet_pod_start_step_duration_seconds_count{step="image_pull"}',
                   "kubelet_image_pull_duration_seconds_count{", "kubelet_pod_start_total_duration_seconds_count"):
        assert series in metrics, series
