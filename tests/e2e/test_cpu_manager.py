"""The CPU manager's static policy on the real stack (upstream pkg/kubelet/cm/cpumanager at v1.37.1): with
``--cpu-manager-policy=static --reserved-cpus=0`` a Guaranteed pod with an integer CPU request gets CPUs of its own
(every CPU but the reserved one on this 2-CPU node: CPU 1), every other container the shared pool, which shrinks and
grows back; ``<root-dir>/cpu_manager_state`` holds the assignment in upstream's format (its checksums verified as a
kubelet verifies them) and survives a restart; a Guaranteed pod that finds no CPU left is rejected with upstream's
reason and message.

A policy change needs the checkpoint removed, as upstream documents it (kubernetes.io "Control CPU Management
Policies on the Node", "Changing the CPU Manager Policy"): drain the node, stop the agent, delete
``<root-dir>/cpu_manager_state``, start the agent with the new policy. Without that the agent refuses to start with
upstream's message (`test_a_policy_change_without_removing_the_checkpoint_is_refused`). The agents of the other
modules run with the default ``none`` policy, whose checkpoint they write too: so each test here removes the file
before it starts its static agent and after it stopped it (with its pods deleted), as that procedure says.

Not run by the helper that wrote them (the stack belongs to another process); run with
``python -m devstack run -- pytest -q tests/e2e/test_cpu_manager.py`` (or ``make test``).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.layout import Layout
from kopflet import paths
from kopflet.cm.cpumanager import cpuset
from kopflet.cm.cpumanager import state as checkpoint
from kopflet.cm.cpumanager.static_policy import State
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent, agent_with
from tests.e2e.test_pod_lifecycle import (
    container,
    events,
    is_ready,
    pod_manifest,
    wait_gone,
    wait_node_idle,
    wait_pod,
    wait_served,
)

pytestmark = pytest.mark.skipif(os.path.exists("/sys/fs/cgroup/cgroup.controllers"),
                                reason="reads the cgroup v1 hierarchy this machine has")

ONLINE = cpuset.parse(Path("/sys/devices/system/cpu/online").read_text().strip())
ALL = str(ONLINE)  # "0-1" on this machine
EXCLUSIVE = ONLINE - cpuset.CPUSet((0,))  # what is left once CPU 0 is reserved: "1" here
STATE_FILE = Path(os.environ.get("KOPFLET_ROOT_DIR", paths.DEFAULT_ROOT_DIR)) / checkpoint.CHECKPOINT_NAME
ARGS = "--cpu-manager-policy=static --reserved-cpus=0 --cpu-manager-reconcile-period=2s"
RECONCILE_WAIT = 30.0
NOT_ENOUGH = ("Allocate failed due to not enough cpus available to satisfy request: requested=1, available=0, "
              "which is unexpected")

running = contextlib.contextmanager(agent_with)


def remove_state_file() -> None:
    """Upstream's procedure for a policy change: the checkpoint goes while no agent runs."""
    with contextlib.suppress(FileNotFoundError):
        STATE_FILE.unlink()


def read_state() -> checkpoint.Checkpoint:
    """The checkpoint as a v1.37 kubelet reads it: ``data`` verified against ``dataChecksum``."""
    text = STATE_FILE.read_text()
    body = json.loads(text)
    assert list(body) in (["policyName", "defaultCpuSet", "entries", "checksum", "data", "dataChecksum"],
                          ["policyName", "defaultCpuSet", "checksum", "data", "dataChecksum"]), body
    got = checkpoint.decode(text)  # raises on a checksum a kubelet would refuse
    assert (got.policy_name, got.default_cpu_set, dict(got.entries)) == \
        (body["policyName"], body["defaultCpuSet"], body.get("entries", {}))
    return got


def guaranteed(name: str, namespace: str, node: str, cpus: int) -> str:
    resources = {"requests": {"cpu": str(cpus), "memory": "64Mi"}, "limits": {"cpu": str(cpus), "memory": "64Mi"}}
    return pod_manifest(name, namespace, node, [container("main", "sleep 3600", resources=resources)],
                        terminationGracePeriodSeconds=0)


def burstable(name: str, namespace: str, node: str) -> str:
    # a memory request only: no cpu request, so it fits next to the Guaranteed pod's whole allocatable cpu
    return pod_manifest(name, namespace, node,
                        [container("main", "sleep 3600", resources={"requests": {"memory": "16Mi"}})],
                        terminationGracePeriodSeconds=0)


def cpus_of(admin: Kubectl, namespace: str, pod: str) -> tuple[str, str]:
    """The container's own cgroup ``cpuset.cpus`` (v1: runc mounts the container's cgroup at the controller's root)
    and the CPUs its first process may run on."""
    script = "cat /sys/fs/cgroup/cpuset/cpuset.cpus; grep Cpus_allowed_list /proc/1/status"
    out = admin.run("exec", "-n", namespace, pod, "-c", "main", "--", "sh", "-c", script).stdout.split("\n")
    return out[0].strip(), out[1].split(":", 1)[1].strip()


def host_cgroup(pod: dict[str, Any], controller: str, name: str, *, container: bool = True) -> str:
    """A cgroup v1 file from the host: ``/sys/fs/cgroup/<controller>/kubepods[/<qos>]/pod<uid>[/<container id>]``."""
    uid = pod["metadata"]["uid"]
    tier = {"Guaranteed": "", "Burstable": "burstable/", "BestEffort": "besteffort/"}[pod["status"]["qosClass"]]
    path = Path(f"/sys/fs/cgroup/{controller}/kubepods/{tier}pod{uid}")
    if container:
        path /= pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    return (path / name).read_text().strip()


def host_cpuset(pod: dict[str, Any]) -> str:
    """The container's ``cpuset.cpus`` read from the host."""
    return host_cgroup(pod, "cpuset", "cpuset.cpus")


def cfs(pod: dict[str, Any], *, container: bool = True) -> tuple[str, str]:
    """The CFS quota and period of the container (or its pod cgroup), read from the host."""
    return (host_cgroup(pod, "cpu", "cpu.cfs_quota_us", container=container),
            host_cgroup(pod, "cpu", "cpu.cfs_period_us", container=container))


def wait_for(check: Callable[[], bool], what: str, timeout: float = RECONCILE_WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.5)


def rejected(pod: dict[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") == "Failed"


@pytest.fixture
def static_node() -> Iterator[None]:
    """The checkpoint removed before and after (the pods deleted first by the test's own cleanup)."""
    remove_state_file()
    try:
        yield
    finally:
        remove_state_file()


def test_guaranteed_pods_get_cpus_of_their_own_and_the_rest_share_the_others(
        static_node: None, admin: Kubectl, layout: Layout, namespace: str, tmp_path: Path) -> None:
    node = layout.node_name
    with running(layout, tmp_path, ARGS) as agent:
        wait_node_idle(admin, node)
        try:
            # A new checkpoint: every CPU shared, nothing assigned; the reserved CPU counts as the cpu reservation.
            state = read_state()
            assert (state.policy_name, state.default_cpu_set, dict(state.entries)) == ("static", ALL, {})
            wait_for(lambda: admin.json("get", "node", node)["status"]["allocatable"]["cpu"] == str(len(EXCLUSIVE)),
                     "allocatable cpu = capacity less the reserved CPUs")

            # A Burstable pod runs on the shared pool, which is every CPU for now.
            admin.apply(burstable("shared", namespace, node))
            shared = wait_pod(admin, namespace, "shared", is_ready, what="Ready")
            assert shared["status"]["qosClass"] == "Burstable"
            assert cpus_of(admin, namespace, "shared") == (ALL, ALL)

            # A Guaranteed pod with an integer request gets every CPU but the reserved one, for itself alone.
            admin.apply(guaranteed("pinned", namespace, node, len(EXCLUSIVE)))
            pinned = wait_pod(admin, namespace, "pinned", is_ready, what="Ready")
            assert pinned["status"]["qosClass"] == "Guaranteed"
            assert cpus_of(admin, namespace, "pinned") == (str(EXCLUSIVE), str(EXCLUSIVE))
            assert host_cpuset(pinned) == str(EXCLUSIVE)
            # upstream DisableCPUQuotaWithExclusiveCPUs (locked on at v1.37): no CFS quota on exclusive CPUs, for
            # the container and its pod cgroup alike, seen from the host and from inside the container.
            assert cfs(pinned) == ("-1", "100000")
            assert cfs(pinned, container=False) == ("-1", "100000")
            assert admin.run("exec", "-n", namespace, "pinned", "-c", "main", "--", "cat",
                             "/sys/fs/cgroup/cpu/cpu.cfs_quota_us").stdout.strip() == "-1"
            state = read_state()
            assert (state.default_cpu_set, dict(state.entries)) == \
                ("0", {pinned["metadata"]["uid"]: {"main": str(EXCLUSIVE)}})

            # The shared pool shrank: the reconcile loop moves the Burstable container onto what is left (CPU 0).
            wait_for(lambda: cpus_of(admin, namespace, "shared") == ("0", "0"), "the shared pool reached 'shared'")
            assert host_cpuset(shared) == "0"

            # No CPU left for a second Guaranteed pod: rejected as upstream rejects it.
            admin.apply(guaranteed("second", namespace, node, 1))
            second = wait_pod(admin, namespace, "second", rejected, what="rejected")
            assert (second["status"]["reason"], second["status"]["message"]) == \
                ("UnexpectedAdmissionError", "Pod was rejected: " + NOT_ENOUGH)
            assert [(e["type"], e["message"]) for e in events(admin, namespace, "second")
                    if e["reason"] == "UnexpectedAdmissionError"] == [("Warning", NOT_ENOUGH)]
            assert not second["status"].get("containerStatuses") or \
                all("running" not in s.get("state", {}) for s in second["status"]["containerStatuses"])
            before_restart = STATE_FILE.read_text()

            # The assignment survives the agent's restart: same file, same CPUs, the pod not restarted.
            assert agent.stop() == 0
            assert STATE_FILE.read_text() == before_restart
            again = Agent(layout, tmp_path / "agent-again.log", env={"KOPFLET_ARGS": ARGS})
            again.start()
            try:
                again.wait_for(r"Activity 'start_agent' succeeded")
                pinned = wait_pod(admin, namespace, "pinned", is_ready, what="Ready after the restart")
                assert pinned["status"]["containerStatuses"][0]["restartCount"] == 0
                wait_served(admin, namespace, "pinned", "main")
                assert cpus_of(admin, namespace, "pinned") == (str(EXCLUSIVE), str(EXCLUSIVE))
                assert STATE_FILE.read_text() == before_restart
                admin.apply(guaranteed("third", namespace, node, 1))
                third = wait_pod(admin, namespace, "third", rejected, what="rejected after the restart")
                assert third["status"]["reason"] == "UnexpectedAdmissionError"

                # Deleted, the pod gives its CPUs back: the shared container runs on every CPU again.
                admin.run("delete", "pod", "pinned", "-n", namespace, "--wait=false")
                wait_gone(admin, namespace, "pinned")
                wait_for(lambda: cpus_of(admin, namespace, "shared") == (ALL, ALL), "the CPUs back in the pool")
                wait_for(lambda: (read_state().default_cpu_set, dict(read_state().entries)) == (ALL, {}),
                         "the checkpoint without the pod")

                # A Guaranteed pod without an integer CPU count stays on the shared pool and keeps its quota.
                half = {"requests": {"cpu": "500m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "64Mi"}}
                admin.apply(pod_manifest("fractional", namespace, node,
                                         [container("main", "sleep 3600", resources=half)],
                                         terminationGracePeriodSeconds=0))
                fractional = wait_pod(admin, namespace, "fractional", is_ready, what="Ready")
                assert fractional["status"]["qosClass"] == "Guaranteed"
                assert host_cpuset(fractional) == ALL
                assert cfs(fractional) == ("50000", "100000")
                assert cfs(fractional, container=False) == ("50000", "100000")
            finally:
                admin.run("delete", "pods", "--all", "-n", namespace, "--wait=true", "--timeout=60s", check=False)
                assert again.stop() == 0
        finally:
            admin.run("delete", "pods", "--all", "-n", namespace, "--wait=true", "--timeout=60s", check=False)


def test_a_policy_change_without_removing_the_checkpoint_is_refused(static_node: None, layout: Layout,
                                                                    tmp_path: Path) -> None:
    """The checkpoint a none-policy agent wrote stops a static-policy agent at its start (upstream: "could not
    restore state from checkpoint ... please drain this node and delete the CPU manager checkpoint file")."""
    STATE_FILE.parent.mkdir(parents=True, exist_ok=True)
    STATE_FILE.write_text(checkpoint.encode("none", State()))
    agent = Agent(layout, tmp_path / "agent.log", env={"KOPFLET_ARGS": ARGS})
    agent.start()
    try:
        agent.wait_for(
            r'start cpu manager error: could not restore state from checkpoint: configured policy "static" differs '
            r'from state checkpoint policy "none", please drain this node and delete the CPU manager checkpoint file '
            + json.dumps(str(STATE_FILE)).replace(".", r"\.") + " before restarting Kubelet")
        assert agent.proc is not None
        agent.proc.wait(timeout=60)  # a permanent start-up error: the operator stops
        assert "Activity 'start_agent' succeeded" not in agent.output()
        assert checkpoint.decode(STATE_FILE.read_text()).policy_name == "none"  # left for the operator to remove
    finally:
        if agent.proc is not None and agent.proc.poll() is None:
            agent.proc.kill()
            agent.proc.wait()


def test_the_static_policy_without_a_cpu_reservation_does_not_start(layout: Layout, tmp_path: Path) -> None:
    agent = Agent(layout, tmp_path / "agent.log", env={"KOPFLET_ARGS": "--cpu-manager-policy=static"})
    agent.start()
    try:
        agent.wait_for(r"\[cpumanager\] unable to determine reserved CPU resources for static policy")
        assert agent.proc is not None
        agent.proc.wait(timeout=60)
    finally:
        if agent.proc is not None and agent.proc.poll() is None:
            agent.proc.kill()
            agent.proc.wait()
