"""Policy hooks on the real stack (docs/extending.md): the image allowlist example refuses a pod, a plan hook's
environment variable and volume reach the container, the start timeline example posts its event, a hook that
raises leaves the pod to the default decision, and a module that cannot be loaded stops the start."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_pod_lifecycle import container, events, is_ready, pod_manifest, wait_pod

KOPFLET = str(Path(sys.executable).with_name("kopflet"))
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

POLICY = '''
from kopflet import hooks


@hooks.plan
def hooked(view: hooks.PlanView) -> None:
    if view.pod.labels.get("boom") == "yes":
        raise KeyError("boom")
    view.set_env("HOOKED", "1")
    view.add_empty_dir("hooked")
    view.mount("hooked", "/hooked")
'''


@pytest.fixture(scope="module")
def hooked_agent(layout: Layout, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Agent, Path]]:
    work = tmp_path_factory.mktemp("hooks")
    (work / "policy.py").write_text(POLICY)
    timelines = work / "timelines.jsonl"
    agent = Agent(layout, work / "agent.log", env={
        # The examples by their files: the agent's process has no checkout on its path (docs/extending.md).
        "KOPFLET_ARGS": f"--hooks {work / 'policy.py'},{EXAMPLES / 'image_allowlist.py'},"
                        f"{EXAMPLES / 'start_timeline.py'}",
        "KOPFLET_IMAGE_ALLOWLIST": "docker.io/library/busybox:*,registry.k8s.io/pause:*",
        "KOPFLET_START_TIMELINE_FILE": str(timelines)})
    agent.start()
    agent.wait_for(r"Activity 'start_agent' succeeded")
    try:
        yield agent, timelines
    finally:
        agent.stop()


def event_messages(admin: Kubectl, namespace: str, pod: str, reason: str) -> list[str]:
    return [e["message"] for e in events(admin, namespace, pod) if e["reason"] == reason]


def wait_event(admin: Kubectl, namespace: str, pod: str, reason: str, timeout: float = 60) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = event_messages(admin, namespace, pod, reason)
        if found:
            return found
        time.sleep(1)
    raise AssertionError(f"no {reason} event on {namespace}/{pod}: {events(admin, namespace, pod)}")


def test_an_image_outside_the_allowlist_is_refused(hooked_agent: tuple[Agent, Path], admin: Kubectl,
                                                   layout: Layout, namespace: str) -> None:
    image = "registry.k8s.io/e2e-test-images/agnhost:2.55"
    admin.apply(pod_manifest("refused", namespace, layout.node_name, [container("app", "true", image=image)]))
    pod = wait_pod(admin, namespace, "refused", lambda p: p.get("status", {}).get("phase") == "Failed",
                   what="Failed")
    status: dict[str, Any] = pod["status"]
    assert status["reason"] == "ImageNotAllowed"
    assert status["message"].startswith(f'Pod was rejected: container app: image "{image}" is not allowed'), status
    assert wait_event(admin, namespace, "refused", "ImageNotAllowed")
    assert not status.get("containerStatuses") or all("running" not in s.get("state", {})
                                                      for s in status["containerStatuses"])


def test_a_plan_hook_s_environment_and_volume_reach_the_container_and_the_timeline_is_reported(
        hooked_agent: tuple[Agent, Path], admin: Kubectl, layout: Layout, namespace: str) -> None:
    _, timelines = hooked_agent
    admin.apply(pod_manifest("allowed", namespace, layout.node_name, [container("app", "sleep 3600")]))
    pod = wait_pod(admin, namespace, "allowed", is_ready, what="Ready")
    out = admin.run("exec", "-n", namespace, "allowed", "-c", "app", "--", "sh", "-c",
                    "echo $HOOKED; test -d /hooked && echo dir").stdout.split()
    assert out == ["1", "dir"]
    spec = pod["spec"]
    assert all(v["name"] != "hooked" for v in spec.get("volumes") or ())
    assert all(e["name"] != "HOOKED" for e in spec["containers"][0].get("env") or ())

    started = wait_event(admin, namespace, "allowed", "StartTimeline")
    assert started[0].startswith("Ready after "), started
    deadline = time.monotonic() + 30
    records: list[dict[str, Any]] = []
    while time.monotonic() < deadline and not records:
        lines = timelines.read_text().splitlines() if timelines.exists() else []
        records = [r for r in map(json.loads, lines) if r["uid"] == pod["metadata"]["uid"]]
        time.sleep(0.5)
    assert len(records) == 1 and records[0]["outcome"] == "Ready"
    assert "sandbox" in [s["kind"] for s in records[0]["steps"]]


def test_a_hook_that_raises_leaves_the_default_decision(hooked_agent: tuple[Agent, Path], admin: Kubectl,
                                                        layout: Layout, namespace: str) -> None:
    manifest = json.loads(pod_manifest("boom", namespace, layout.node_name, [container("app", "sleep 3600")]))
    manifest["metadata"]["labels"] = {"boom": "yes"}
    admin.apply(json.dumps(manifest))
    wait_pod(admin, namespace, "boom", is_ready, what="Ready")
    failed = wait_event(admin, namespace, "boom", "HookFailed")
    assert any(m.startswith("Policy hook ") and "(plan) raised KeyError: 'boom'; the default decision is used" in m
               for m in failed), failed
    # The default decision: no HOOKED variable.
    assert admin.run("exec", "-n", namespace, "boom", "-c", "app", "--", "sh", "-c",
                     "echo x$HOOKED").stdout.strip() == "x"


def test_a_hook_module_that_cannot_be_imported_stops_the_start(layout: Layout) -> None:
    proc = subprocess.run([KOPFLET, f"--kubeconfig={layout.node_kubeconfig}", "--hooks", "no_such_module_here"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "--hooks no_such_module_here: cannot import" in proc.stderr
