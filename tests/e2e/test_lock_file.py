"""--lock-file and --exit-on-lock-contention on the real stack: two agents for one Node never both run. The second
waits for the lock (upstream flock.Acquire blocks) or, with --exit-on-lock-contention, makes the first stop
(upstream watchForLockfileContention); the pods run through the handover."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_pod_lifecycle import BUSYBOX


def sleeper(layout: Layout, namespace: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sleeper", "namespace": namespace},
                       "spec": {"nodeName": layout.node_name, "automountServiceAccountToken": False,
                                "terminationGracePeriodSeconds": 1,
                                "containers": [{"name": "c", "image": BUSYBOX, "command": ["sleep", "3600"]}]}})


def running_container(admin: Kubectl, namespace: str, timeout: float = 90.0) -> tuple[str, int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        statuses = (admin.json("get", "pod", "sleeper", "-n", namespace).get("status") or {}).get(
            "containerStatuses") or []
        if statuses and "running" in (statuses[0].get("state") or {}):
            return statuses[0]["containerID"], statuses[0]["restartCount"]
        time.sleep(0.5)
    raise AssertionError("the pod never ran")


def stop_all(*agents: Agent) -> None:
    for agent in agents:
        if agent.proc is not None and agent.proc.poll() is None:
            agent.stop()


def test_a_second_agent_waits_for_the_lock_then_takes_over(admin: Kubectl, layout: Layout, namespace: str,
                                                           tmp_path: Path) -> None:
    lock = tmp_path / "kopflet.lock"
    args = {"KOPFLET_ARGS": f"--lock-file={lock}"}
    first, second = Agent(layout, tmp_path / "first.log", env=args), Agent(layout, tmp_path / "second.log", env=args)
    first.start()
    try:
        first.wait_for(r"Activity 'start_agent' succeeded")
        admin.apply(sleeper(layout, namespace))
        container = running_container(admin, namespace)
        second.start()
        assert first.proc is not None
        second.wait_for(rf"the lock file {re.escape(str(lock))} is locked by another process: "
                        rf"held by process {first.proc.pid}\b.*waiting for it")
        time.sleep(5)  # it really waits: nothing after the lock runs
        assert "Activity 'connect_runtime' succeeded" not in second.output()
        assert first.stop() == 0
        second.wait_for(r"acquired the lock file")
        second.wait_for(r"Activity 'start_agent' succeeded")
        assert running_container(admin, namespace) == container  # adopted, not restarted
        assert second.stop() == 0
    finally:
        stop_all(first, second)


def test_the_first_agent_exits_when_a_second_starts(admin: Kubectl, layout: Layout, namespace: str,
                                                    tmp_path: Path) -> None:
    lock = tmp_path / "kopflet.lock"
    args = {"KOPFLET_ARGS": f"--lock-file={lock} --exit-on-lock-contention"}
    first, second = Agent(layout, tmp_path / "first.log", env=args), Agent(layout, tmp_path / "second.log", env=args)
    first.start()
    try:
        first.wait_for(r"Watching for inotify events")
        first.wait_for(r"Activity 'start_agent' succeeded")
        admin.apply(sleeper(layout, namespace))
        container = running_container(admin, namespace)
        second.start()
        first.wait_for(rf"Inotify event: {re.escape(str(lock))}: IN_OPEN")
        assert first.proc is not None and first.proc.wait(timeout=60) == 0  # a clean stop, as on SIGTERM
        second.wait_for(r"Activity 'start_agent' succeeded")
        assert running_container(admin, namespace) == container  # the pod ran through the handover
        node = admin.json("get", "node", layout.node_name)
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True"
        assert second.stop() == 0
    finally:
        stop_all(first, second)


def test_an_agent_waiting_for_the_lock_stops_on_sigterm(layout: Layout, tmp_path: Path) -> None:
    lock = tmp_path / "kopflet.lock"
    args = {"KOPFLET_ARGS": f"--lock-file={lock}"}
    first, second = Agent(layout, tmp_path / "first.log", env=args), Agent(layout, tmp_path / "second.log", env=args)
    first.start()
    try:
        first.wait_for(r"Activity 'start_agent' succeeded")
        second.start()
        second.wait_for(r"is locked by another process")
        assert second.stop(timeout=15) == 0  # the waiting thread does not hold up the exit
        assert first.proc is not None and first.proc.poll() is None  # the holder is untouched
    finally:
        stop_all(first, second)
