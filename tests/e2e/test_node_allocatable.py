"""Node allocatable on the real cgroups (upstream node_container_manager_linux.go and qos_container_manager_linux.go):
``kubepods`` holds every pod together to capacity less the reservations, a NodeAllocatableEnforced event says so,
the QoS tiers follow the pods' requests, and ``--enforce-node-allocatable=none`` gives the pods the whole node."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest

from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import agent_with
from tests.e2e.test_pod_lifecycle import container, is_ready, pod_manifest, wait_pod

pytestmark = pytest.mark.skipif(os.path.exists("/sys/fs/cgroup/cgroup.controllers"),
                                reason="reads the cgroup v1 hierarchy this machine has")

MI = 2**20
CGROUP = Path("/sys/fs/cgroup")
running = contextlib.contextmanager(agent_with)


def read(controller: str, cgroup: str, name: str) -> int:
    return int((CGROUP / controller / cgroup / name).read_text().strip())


def mem_total() -> int:
    line = next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal:"))
    return int(line.split()[1]) * 1024


def max_pid() -> int:
    return min(int(Path(f"/proc/sys/kernel/{name}").read_text()) for name in ("pid_max", "threads-max"))


def node_events(admin: Kubectl, layout: Layout, reason: str, since: str) -> list[dict]:
    selector = f"involvedObject.kind=Node,involvedObject.name={layout.node_name},reason={reason}"
    items = admin.json("get", "events", "-n", "default", "--field-selector", selector)["items"]
    return [e for e in items if (e.get("lastTimestamp") or e.get("eventTime") or "") >= since]


def wait_event(admin: Kubectl, layout: Layout, reason: str, since: str) -> dict:
    deadline = time.monotonic() + 30
    while True:
        found = node_events(admin, layout, reason, since)
        if found:
            return found[0]
        assert time.monotonic() < deadline, f"no {reason} event on the node"
        time.sleep(1)


def test_kubepods_is_held_to_allocatable_and_the_tiers_follow_the_pods(admin: Kubectl, layout: Layout,
                                                                      namespace: str, tmp_path: Path) -> None:
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1))
    args = "--system-reserved=memory=256Mi,pid=1000 --kube-reserved=cpu=250m,memory=64Mi"
    with running(layout, tmp_path, args):
        event = wait_event(admin, layout, "NodeAllocatableEnforced", since)
        assert (event["type"], event["message"]) == ("Normal", "Updated Node Allocatable limit across pods")
        assert "uid" not in event["involvedObject"]  # upstream refers to the node by name only here
        # memory: capacity less both reservations (the kernel keeps whole pages)
        expected = mem_total() - 320 * MI
        assert expected - 4096 < read("memory", "kubepods", "memory.limit_in_bytes") <= expected
        assert read("cpu", "kubepods", "cpu.shares") == (os.cpu_count() or 1) * 1024 - 256  # 250m as shares
        assert read("pids", "kubepods", "pids.max") == max_pid() - 1000
        assert read("cpu", "kubepods/besteffort", "cpu.shares") == 2

        # A Burstable pod's cpu request reaches the burstable tier before its pod cgroup is made.
        before = read("cpu", "kubepods/burstable", "cpu.shares")
        resources = {"requests": {"cpu": "700m", "memory": "16Mi"}}
        admin.apply(pod_manifest("burst", namespace, layout.node_name,
                                 [container("main", "sleep 3600", resources=resources)],
                                 terminationGracePeriodSeconds=0))
        pod = wait_pod(admin, namespace, "burst", is_ready, what="Ready")
        assert pod["status"]["qosClass"] == "Burstable"
        after = read("cpu", "kubepods/burstable", "cpu.shares")
        assert after >= 716 and after >= before + 716 - 2, (before, after)  # 700m is 716 shares (2 with none)
        admin.run("delete", "pod", "burst", "-n", namespace, "--wait=true")


def test_without_enforcement_kubepods_gets_the_whole_node(admin: Kubectl, layout: Layout, tmp_path: Path) -> None:
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1))
    with running(layout, tmp_path, "--system-reserved=memory=256Mi --enforce-node-allocatable=none"):
        wait_event(admin, layout, "NodeAllocatableEnforced", since)  # upstream writes kubepods either way
        total = mem_total()
        assert total - 4096 < read("memory", "kubepods", "memory.limit_in_bytes") <= total
        assert read("cpu", "kubepods", "cpu.shares") == (os.cpu_count() or 1) * 1024
        node = admin.json("get", "node", layout.node_name)["status"]
        assert node["allocatable"]["memory"] != node["capacity"]["memory"]  # the scheduler still sees the reserve
