"""Graceful node shutdown (upstream's node shutdown manager) against a real systemd-logind on a private system bus
(`devstack.logind`; systemd's manager side is a stand-in that records the poweroff job instead of doing it).

The agent runs with shutdownGracePeriod 20s and shutdownGracePeriodCriticalPods 10s: it raises logind's
InhibitDelayMaxSec with its drop-in and a reload, holds a delay lock, and on PrepareForShutdown(true) kills the
regular pods, then the critical ones, marks them Failed/Terminated with the DisruptionTarget condition, sets the
Node NotReady, rejects new pods, and lets the lock go: only then does logind start the poweroff job. A cancelled
job (PrepareForShutdown(false)) takes the lock again and the Node is Ready again."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.layout import Layout
from devstack.logind import Logind
from kopflet import paths
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_pod_lifecycle import container, events, is_ready, pod_manifest, wait_pod

ROOT_DIR = Path(os.environ.get("KOPFLET_ROOT_DIR", paths.DEFAULT_ROOT_DIR))
LOGIND_DROP_IN = Path("/etc/systemd/logind.conf.d/99-kubelet.conf")
MESSAGE = "Pod was terminated in response to imminent node shutdown."
QUICK_EXIT = "trap 'exit 0' TERM; while true; do sleep 1; done"


def wait_for(what: str, check: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.5)


@pytest.fixture
def logind(tmp_path: Path) -> Iterator[Logind]:
    """The private logind, started without the agent's drop-in: one an aborted run left (or the host's) is moved
    aside and put back afterwards, as is the directory the agent creates."""
    directory_existed = LOGIND_DROP_IN.parent.exists()
    kept = tmp_path / "kept-99-kubelet.conf"
    if LOGIND_DROP_IN.exists():
        LOGIND_DROP_IN.rename(kept)
    try:
        with Logind(tmp_path / "logind") as bus:
            yield bus
    finally:
        LOGIND_DROP_IN.unlink(missing_ok=True)
        if kept.exists():
            kept.rename(LOGIND_DROP_IN)
        elif not directory_existed:
            with contextlib.suppress(OSError):
                LOGIND_DROP_IN.parent.rmdir()


def node_ready(admin: Kubectl, node: str) -> dict[str, Any]:
    conditions = admin.json("get", "node", node)["status"].get("conditions", [])
    return next(c for c in conditions if c["type"] == "Ready")


def node_events(admin: Kubectl, node: str, reason: str) -> list[str]:
    items = admin.json("get", "events", "-n", "default", "--field-selector",
                       f"involvedObject.kind=Node,involvedObject.name={node},reason={reason}")["items"]
    return [e.get("message", "") for e in items]


def terminated_by_shutdown(pod: dict[str, Any]) -> bool:
    status = pod.get("status", {})
    return status.get("phase") == "Failed" and status.get("reason") == "Terminated"


def test_shutdown_kills_regular_then_critical_pods_before_logind_powers_off(
        layout: Layout, admin: Kubectl, namespace: str, tmp_path: Path, logind: Logind) -> None:
    assert logind.inhibit_delay_max() < 20, "the host's logind.conf already allows 20 s: nothing to raise"
    config = tmp_path / "config.yaml"
    config.write_text(layout.kubelet_config.read_text() +
                      "shutdownGracePeriod: 20s\nshutdownGracePeriodCriticalPods: 10s\n")
    agent = Agent(layout, tmp_path / "agent.log",
                  env={"KOPFLET_ARGS": f"--config={config}", "DBUS_SYSTEM_BUS_ADDRESS": logind.address})
    agent.start()
    try:
        agent.wait_for(r"Activity 'start_agent' succeeded")
        # The delay lock, with logind's limit raised to the whole period through the drop-in and a reload.
        wait_for("a kubelet delay lock", lambda: ("shutdown", "kubelet", "Kubelet needs time to handle node shutdown",
                                                 "delay") in logind.inhibitors())
        assert logind.inhibit_delay_max() == 20.0
        assert LOGIND_DROP_IN.read_text() == "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=20\n"
        assert [j["signal"] for j in logind.jobs() if (j["call"], j["unit"]) == ("KillUnit", "systemd-logind.service")
                ] == [1]  # SIGHUP

        admin.apply(pod_manifest("regular", namespace, layout.node_name, [container("main", QUICK_EXIT)],
                                 terminationGracePeriodSeconds=30))
        admin.apply(pod_manifest("critical", namespace, layout.node_name, [container("main", QUICK_EXIT)],
                                 priorityClassName="system-node-critical", terminationGracePeriodSeconds=30))
        for name in ("regular", "critical"):
            wait_pod(admin, namespace, name, is_ready, what="Ready")

        logind.power_off()
        regular = wait_pod(admin, namespace, "regular", terminated_by_shutdown, what="Failed, Terminated")
        critical = wait_pod(admin, namespace, "critical", terminated_by_shutdown, what="Failed, Terminated")
        for pod in (regular, critical):
            assert pod["status"]["message"] == MESSAGE
            target = next(c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget")
            assert (target["status"], target["reason"], target["message"]) == ("True", "TerminationByKubelet",
                                                                               MESSAGE)
        # Regular pods first: the critical pod's container ends after the regular one's.
        finished = {name: pod["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"]
                    for name, pod in (("regular", regular), ("critical", critical))}
        assert finished["regular"] <= finished["critical"], finished

        ready = wait_for("the Node NotReady", lambda: (r := node_ready(admin, layout.node_name))["status"] == "False"
                         and r)
        assert (ready["reason"], ready["message"]) == ("KubeletNotReady", "node is shutting down")
        assert "Shutdown manager detected shutdown event" in node_events(admin, layout.node_name, "Shutdown")

        # logind started the poweroff only once the agent let its lock go, after both pods were down.
        job = wait_for("the poweroff job", lambda: next(
            (j for j in logind.jobs() if (j["call"], j["unit"]) == ("StartUnit", "poweroff.target")), None))
        assert job["mode"] == "replace-irreversibly"
        assert ("shutdown", "kubelet", "Kubelet needs time to handle node shutdown", "delay") not in \
            logind.inhibitors()

        # A pod that arrives while the node shuts down is rejected by the shutdown manager's admit handler.
        admin.apply(pod_manifest("late", namespace, layout.node_name, [container("main", "sleep 3600")]))
        late = wait_pod(admin, namespace, "late", lambda p: p.get("status", {}).get("phase") == "Failed",
                        what="rejected")
        assert (late["status"]["reason"], late["status"]["message"]) == (
            "NodeShutdown", "Pod was rejected: Pod was rejected as the node is shutting down.")
        assert any(e["reason"] == "NodeShutdown" for e in events(admin, namespace, "late"))

        # The state file and the metrics keep when it happened.
        state = json.loads((ROOT_DIR / "graceful_node_shutdown_state").read_text())
        assert state["startTime"] <= state["endTime"] and not state["endTime"].startswith("0001-")
        metrics = admin.run("get", "--raw", f"/api/v1/nodes/{layout.node_name}/proxy/metrics").stdout
        values = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines()
                  if line.startswith("kubelet_graceful_shutdown_")}
        assert 0 < values["kubelet_graceful_shutdown_start_time_seconds"] <= \
            values["kubelet_graceful_shutdown_end_time_seconds"], values

        # The job cancelled: PrepareForShutdown(false) takes the lock again and the Node is Ready again.
        logind.cancel_jobs()
        wait_for("the lock taken again", lambda: ("shutdown", "kubelet", "Kubelet needs time to handle node shutdown",
                                                  "delay") in logind.inhibitors())
        wait_for("the cancellation event", lambda: "Shutdown manager detected shutdown cancellation" in
                 node_events(admin, layout.node_name, "Shutdown"))
        wait_for("the Node Ready again", lambda: node_ready(admin, layout.node_name)["status"] == "True")
    finally:
        agent.stop()
