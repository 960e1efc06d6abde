"""Node pressure and eviction for real: a pod that takes the node's memory below the hard threshold makes the node
report MemoryPressure, is evicted (Failed, reason Evicted, DisruptionTarget, an Evicted event) ahead of a
well-behaved pod, BestEffort pods are refused while the pressure lasts, and the pressure clears once it is gone.

The threshold is set just under what the node has free when the test starts, so one pod holding a few hundred
MiB crosses it; nothing else on the machine is starved."""

from __future__ import annotations

import contextlib
import datetime as dt
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.layout import Layout
from kopflet.eviction import signals
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent, agent_with
from tests.e2e.test_pod_lifecycle import container, events, is_ready, pod_manifest, wait_gone, wait_pod

MiB = 1024 * 1024
HOG = 1000 * MiB  # what the hog pod holds (dd's buffer, blocked on a pipe nobody reads)
MARGIN = 400 * MiB  # the threshold sits this far under what is free at the start
PID_MARGIN = 400  # pid.available's threshold sits this far under what is free at the start
PID_HOG = 1000  # processes the forking pod starts
FAST = "--node-status-update-frequency=2s "  # the node's conditions follow the manager within seconds
SOFT_GRACE = 40  # seconds a soft threshold must hold before a pod is evicted


def condition(node: dict[str, Any], kind: str) -> str:
    return next((c["status"] for c in node["status"].get("conditions", []) if c["type"] == kind), "")


@pytest.fixture
def pressured_agent(layout: Layout, tmp_path: Path) -> Iterator[Agent]:
    available = signals.observe("/")["memory.available"].available
    threshold = max(available - MARGIN, 64 * MiB) // MiB
    yield from agent_with(layout, tmp_path, f"--eviction-hard=memory.available<{threshold}Mi {FAST}"
                                            "--eviction-pressure-transition-period=30s")


def test_memory_pressure_evicts_the_best_effort_hog_first(pressured_agent: Agent, admin: Kubectl, layout: Layout,
                                                         namespace: str) -> None:
    node = layout.node_name
    admin.apply(pod_manifest("steady", namespace, node, [container(
        "main", "sleep 3600", resources={"requests": {"memory": "64Mi", "cpu": "10m"}})]))
    wait_pod(admin, namespace, "steady", is_ready, what="Ready")
    assert condition(admin.json("get", "node", node), "MemoryPressure") == "False"

    admin.apply(pod_manifest("hog", namespace, node, [container(
        "main", f"dd if=/dev/zero bs={HOG // MiB}M count=1 | sleep 3600")]))
    # The node says so, and while it does a new BestEffort pod is refused (upstream's eviction admit).
    deadline = time.monotonic() + 120
    while condition(admin.json("get", "node", node), "MemoryPressure") != "True":
        assert time.monotonic() < deadline, "the node never reported MemoryPressure"
        time.sleep(1)
    admin.apply(pod_manifest("late", namespace, node, [container("main", "sleep 3600")]))
    late = wait_pod(admin, namespace, "late", lambda p: p.get("status", {}).get("phase") == "Failed",
                    timeout=60, what="rejected under memory pressure")
    # The node lifecycle controller taints the node from the condition (TaintNodesByCondition), as upstream.
    deadline = time.monotonic() + 60
    while not any(t.get("key") == "node.kubernetes.io/memory-pressure" and t.get("effect") == "NoSchedule"
                  for t in admin.json("get", "node", node)["spec"].get("taints") or ()):
        assert time.monotonic() < deadline, "the node never got the memory-pressure NoSchedule taint"
        time.sleep(1)
    assert late["status"]["reason"] == "Evicted"
    assert late["status"]["message"] == "Pod was rejected: The node had condition: [MemoryPressure]. "

    hog = wait_pod(admin, namespace, "hog", lambda p: p.get("status", {}).get("phase") == "Failed",
                   timeout=120, what="evicted")
    status = hog["status"]
    assert status["reason"] == "Evicted"
    assert status["message"].startswith("The node was low on resource: memory. Threshold quantity: ")
    assert "Container main was using" in status["message"] and "request is 0" in status["message"]
    target = next(c for c in status["conditions"] if c["type"] == "DisruptionTarget")
    assert (target["status"], target["reason"]) == ("True", "TerminationByKubelet")
    assert any(e["reason"] == "Evicted" and e["type"] == "Warning" for e in events(admin, namespace, "hog"))

    # The well-behaved pod was not touched, and the pressure clears once the hog is gone.
    steady = admin.json("get", "pod", "steady", "-n", namespace)
    assert is_ready(steady) and steady["status"]["containerStatuses"][0]["restartCount"] == 0
    deadline = time.monotonic() + 120
    while condition(admin.json("get", "node", node), "MemoryPressure") != "False":
        assert time.monotonic() < deadline, "MemoryPressure never cleared after the eviction"
        time.sleep(2)
    admin.apply(pod_manifest("after", namespace, node, [container("main", "sleep 3600")]))
    wait_pod(admin, namespace, "after", is_ready, what="a BestEffort pod admitted once the pressure is gone")
    node_events = admin.json("get", "events", "-n", "default", "--field-selector",
                             f"involvedObject.kind=Node,involvedObject.name={node}")["items"]
    reasons = {e["reason"] for e in node_events}
    assert {"NodeHasInsufficientMemory", "NodeHasSufficientMemory"} <= reasons



def wait_condition(admin: Kubectl, node: str, kind: str, status: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while condition(admin.json("get", "node", node), kind) != status:
        assert time.monotonic() < deadline, f"the node's {kind} never became {status}"
        time.sleep(1)


def failed(pod: dict[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") == "Failed"


@pytest.fixture
def pid_agent(layout: Layout, tmp_path: Path) -> Iterator[Agent]:
    available = signals.observe("/")["pid.available"].available
    yield from agent_with(layout, tmp_path, f"--eviction-hard=pid.available<{available - PID_MARGIN} {FAST}"
                                            "--eviction-pressure-transition-period=10s")


def test_pid_pressure_evicts_the_pod_that_forks(pid_agent: Agent, admin: Kubectl, layout: Layout,
                                                namespace: str) -> None:
    node = layout.node_name
    admin.apply(pod_manifest("forker", namespace, node, [container(
        "main", f"for i in $(seq {PID_HOG}); do sleep 3600 & done; wait")]))
    wait_condition(admin, node, "PIDPressure", "True")
    pod = wait_pod(admin, namespace, "forker", failed, timeout=120, what="evicted")
    assert pod["status"]["reason"] == "Evicted"
    assert pod["status"]["message"].startswith("The node was low on resource: pids. Threshold quantity: ")
    wait_condition(admin, node, "PIDPressure", "False")
    reasons = {e["reason"] for e in admin.json("get", "events", "-n", "default", "--field-selector",
                                               f"involvedObject.kind=Node,involvedObject.name={node}")["items"]}
    assert {"NodeHasInsufficientPID", "NodeHasSufficientPID"} <= reasons


@pytest.fixture
def small_disk_agent(layout: Layout, tmp_path: Path) -> Iterator[tuple[Agent, Path]]:
    """The agent's root dir (nodefs: pods' emptyDirs, their files) on a 64 MiB tmpfs."""
    root = tmp_path / "root"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(root)], check=True)
    args = (f"--root-dir={root} --eviction-hard=nodefs.available<40% --eviction-pressure-transition-period=10s "
            "--node-status-update-frequency=2s")
    agent = Agent(layout, tmp_path / "agent.log", env={"KOPFLET_ARGS": args})
    try:
        agent.start()
        agent.wait_for(r"Activity 'start_agent' succeeded")
        yield agent, root
    finally:
        if agent.proc is not None:
            agent.stop()
        subprocess.run(["umount", "-l", str(root)], check=False)


def test_disk_pressure_evicts_the_pod_that_fills_the_node(small_disk_agent: tuple[Agent, Path], admin: Kubectl,
                                                          layout: Layout, namespace: str) -> None:
    node = layout.node_name
    admin.apply(pod_manifest("filler", namespace, node, [container(
        "main", "dd if=/dev/zero of=/scratch/fill bs=1M count=48 && sleep 3600",
        volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}])],
        volumes=[{"name": "scratch", "emptyDir": {}}]))
    wait_condition(admin, node, "DiskPressure", "True")
    admin.apply(pod_manifest("late", namespace, node, [container(
        "main", "sleep 3600", resources={"requests": {"cpu": "10m", "memory": "16Mi"}})]))
    late = wait_pod(admin, namespace, "late", failed, timeout=60, what="refused under disk pressure")
    assert (late["status"]["reason"], late["status"]["message"]) == (
        "Evicted", "Pod was rejected: The node had condition: [DiskPressure]. ")
    pod = wait_pod(admin, namespace, "filler", failed, timeout=180, what="evicted")
    assert pod["status"]["reason"] == "Evicted"
    assert pod["status"]["message"].startswith("The node was low on resource: ephemeral-storage. ")
    # Its emptyDir goes with it (the terminated pod's volumes are torn down), so the pressure clears.
    wait_condition(admin, node, "DiskPressure", "False")
    for name in ("filler", "late"):
        admin.run("delete", "pod", name, "-n", namespace, "--wait=false")
    for name in ("filler", "late"):
        wait_gone(admin, namespace, name, timeout=90)

@pytest.fixture
def tmpfs_root(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs for the agent's root dir (nodefs: the pods' emptyDirs)."""
    root = tmp_path / "root"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(root)], check=True)
    try:
        yield root
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)


@pytest.mark.parametrize("minimum_reclaim", [0, 24], ids=["no-minimum-reclaim", "minimum-reclaim-24Mi"])
def test_minimum_reclaim_keeps_evicting_until_that_much_is_free(tmpfs_root: Path, minimum_reclaim: int,
                                                                 admin: Kubectl, layout: Layout, namespace: str,
                                                                 tmp_path: Path) -> None:
    """evictionMinimumReclaim: once a threshold is met, the pressure lasts until the signal is that far above it
    (upstream thresholdsMet with enforceMinReclaim for the thresholds met in the last round), so the manager goes
    on evicting. 40 MiB in two pods on a 64 MiB nodefs with nodefs.available<40% (25.6 MiB): evicting the bigger
    one leaves about 45 MiB free, enough without a minimum reclaim, not with 24 MiB more to reclaim."""
    args = (f"--root-dir={tmpfs_root} --eviction-hard=nodefs.available<40% "
            "--eviction-pressure-transition-period=10s --node-status-update-frequency=2s")
    if minimum_reclaim:
        args += f" --eviction-minimum-reclaim=nodefs.available={minimum_reclaim}Mi"
    node = layout.node_name
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1))
    with contextlib.contextmanager(agent_with)(layout, tmp_path, args):
        for name, size in (("big", 21), ("small", 19)):
            admin.apply(pod_manifest(name, namespace, node, [container(
                "main", f"dd if=/dev/zero of=/scratch/fill bs=1M count={size} && sleep 3600",
                volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}])],
                volumes=[{"name": "scratch", "emptyDir": {}}], terminationGracePeriodSeconds=0))
            wait_pod(admin, namespace, name, is_ready, what="Ready")
        wait_condition(admin, node, "DiskPressure", "True")
        big = wait_pod(admin, namespace, "big", failed, timeout=120, what="evicted")
        assert big["status"]["message"].startswith("The node was low on resource: ephemeral-storage. ")
        met = admin.json("get", "events", "-n", "default", "--field-selector",
                         f"involvedObject.kind=Node,involvedObject.name={node},reason=EvictionThresholdMet")
        assert any(e["message"] == "Attempting to reclaim ephemeral-storage" and (e.get("lastTimestamp") or "") >=
                   since for e in met["items"]), met["items"]
        if minimum_reclaim:
            small = wait_pod(admin, namespace, "small", failed, timeout=120, what="evicted for the minimum reclaim")
            assert small["status"]["reason"] == "Evicted"
            wait_condition(admin, node, "DiskPressure", "False")
        else:
            wait_condition(admin, node, "DiskPressure", "False")
            time.sleep(15)  # a few more rounds of the manager (every 10 s): nothing else goes
            assert admin.json("get", "pod", "small", "-n", namespace)["status"]["phase"] == "Running"
        for name in ("big", "small"):
            admin.run("delete", "pod", name, "-n", namespace, "--wait=false")
        for name in ("big", "small"):
            wait_gone(admin, namespace, name, timeout=90)


@pytest.fixture
def soft_agent(layout: Layout, tmp_path: Path) -> Iterator[Agent]:
    available = signals.observe("/")["memory.available"].available
    threshold = max(available - MARGIN, 64 * MiB) // MiB
    yield from agent_with(layout, tmp_path, f"--eviction-soft=memory.available<{threshold}Mi "
                                            f"--eviction-soft-grace-period=memory.available={SOFT_GRACE}s "
                                            f"--eviction-max-pod-grace-period=3 {FAST}"
                                            "--eviction-pressure-transition-period=30s")


def test_a_soft_threshold_evicts_after_its_grace_period_with_the_max_pod_grace(
        soft_agent: Agent, admin: Kubectl, layout: Layout, namespace: str) -> None:
    """Upstream: the condition follows the soft threshold at once, the eviction waits for the threshold's grace
    period, and the pod is killed with min(evictionMaxPodGracePeriod, its terminationGracePeriodSeconds)."""
    node = layout.node_name
    admin.apply(pod_manifest("hog", namespace, node, [container(
        "main", f"trap '' TERM; dd if=/dev/zero bs={HOG // MiB}M count=1 | sleep 3600")],
        terminationGracePeriodSeconds=120))
    wait_condition(admin, node, "MemoryPressure", "True")
    pressured = time.time()
    pod = wait_pod(admin, namespace, "hog", failed, timeout=SOFT_GRACE + 120, what="evicted")
    evicted = next(e for e in events(admin, namespace, "hog") if e["reason"] == "Evicted")
    stamp = dt.datetime.fromisoformat(evicted["firstTimestamp"]).timestamp()
    # The pressure was seen at most a status update and a manager round before `pressured`.
    assert stamp >= pressured + SOFT_GRACE - 15, "evicted before the soft threshold's grace period"
    assert pod["status"]["reason"] == "Evicted"
    assert pod["status"]["message"].startswith("The node was low on resource: memory. Threshold quantity: ")
    # TERM is ignored, so the container died of the KILL after the 3 s override, not the pod's 120 s.
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 137
    killed = dt.datetime.fromisoformat(terminated["finishedAt"]).timestamp()
    assert killed - stamp < 60, f"killed {killed - stamp:.0f}s after the eviction: the pod's own grace was used"


def test_without_local_storage_isolation_nothing_is_evicted_for_local_storage(
        layout: Layout, admin: Kubectl, namespace: str, tmp_path: Path) -> None:
    """localStorageCapacityIsolation off (upstream): no local storage limit is enforced, and nothing of the node's
    ephemeral storage is reserved (allocatable equals the capacity the Node already reports)."""
    agents = agent_with(layout, tmp_path, "--local-storage-capacity-isolation=false")
    next(agents)
    try:
        admin.apply(pod_manifest("spill", namespace, layout.node_name, [container(
            "main", "dd if=/dev/zero of=/scratch/fill bs=1M count=24 && touch /tmp/ready && sleep 3600",
            volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}],
            readinessProbe={"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 1})],
            volumes=[{"name": "scratch", "emptyDir": {"sizeLimit": "8Mi"}}]))
        wait_pod(admin, namespace, "spill", is_ready, what="Ready")
        # With isolation on the same pod is evicted within a volume measurement and a round (the test below).
        deadline = time.monotonic() + 100
        while time.monotonic() < deadline:
            pod = admin.json("get", "pod", "spill", "-n", namespace)
            assert pod["status"]["phase"] == "Running", pod["status"]
            time.sleep(5)
        status = admin.json("get", "node", layout.node_name)["status"]
        if "ephemeral-storage" in status["capacity"]:
            assert status["allocatable"]["ephemeral-storage"] == status["capacity"]["ephemeral-storage"]
    finally:
        next(agents, None)


def test_a_container_over_its_memory_limit_is_oom_killed(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                         namespace: str) -> None:
    admin.apply(pod_manifest("oom", namespace, layout.node_name, [container(
        "main", "exec dd if=/dev/zero of=/dev/null bs=256M count=1",
        resources={"limits": {"memory": "64Mi"}, "requests": {"memory": "64Mi"}})], restartPolicy="Never"))
    pod = wait_pod(admin, namespace, "oom", lambda p: p.get("status", {}).get("phase") == "Failed",
                   timeout=120, what="Failed")
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["reason"] == "OOMKilled" and terminated["exitCode"] == 137



def test_a_system_oom_in_the_kernel_log_becomes_a_node_event(running_agent: Agent, admin: Kubectl,
                                                              layout: Layout) -> None:
    # The kernel log is real; the OOM kill in it is written by the test (a real one would starve the machine).
    pid = 400000 + int(time.time()) % 99999
    lines = ["kopflet-e2e invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0",
             "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,"
             f"task_memcg=/,task=kopflet-e2e,pid={pid},uid=0",
             f"Out of memory: Killed process {pid} (kopflet-e2e) total-vm:0kB, anon-rss:0kB, file-rss:0kB"]
    for line in lines:
        with open("/dev/kmsg", "w") as kmsg:
            kmsg.write(f"<4>{line}\n")
    expected = f"System OOM encountered, victim process: kopflet-e2e, pid: {pid}"
    deadline = time.monotonic() + 60
    while True:
        found = [e for e in admin.json("get", "events", "-n", "default", "--field-selector",
                                       f"involvedObject.kind=Node,involvedObject.name={layout.node_name},"
                                       "reason=SystemOOM")["items"] if e["message"] == expected]
        if found:
            break
        assert time.monotonic() < deadline, f"no SystemOOM event {expected!r} on the node"
        time.sleep(1)
    assert found[0]["type"] == "Warning"


def test_an_empty_dir_over_its_size_limit_is_evicted(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                     namespace: str) -> None:
    admin.apply(pod_manifest("spill", namespace, layout.node_name, [container(
        "main", "dd if=/dev/zero of=/scratch/fill bs=1M count=24 && sleep 3600",
        volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}])],
        volumes=[{"name": "scratch", "emptyDir": {"sizeLimit": "8Mi"}}]))
    # Volumes are measured once a minute (upstream volumeStatsAggPeriod), the limits checked every 10 s.
    pod = wait_pod(admin, namespace, "spill", lambda p: p.get("status", {}).get("phase") == "Failed",
                   timeout=180, what="evicted for its emptyDir")
    assert pod["status"]["reason"] == "Evicted"
    assert pod["status"]["message"] == 'Usage of EmptyDir volume "scratch" exceeds the limit "8Mi". '
    assert any(e["reason"] == "Evicted" for e in events(admin, namespace, "spill"))


def test_pods_and_containers_over_their_ephemeral_storage_limits_are_evicted(
        running_agent: Agent, admin: Kubectl, layout: Layout, namespace: str) -> None:
    """What a container writes outside volumes (its writable layer) and its logs count against its limit, and
    the pod's usage against the sum of its containers' limits, checked first (upstream localStorageEviction:
    podEphemeralStorageLimitEviction, then containerEphemeralStorageLimitEviction)."""
    writer = container("main", "dd if=/dev/zero of=/fill bs=1M count=24 && sleep 3600",
                       resources={"limits": {"ephemeral-storage": "8Mi"}})
    admin.apply(pod_manifest("alone", namespace, layout.node_name, [writer]))
    admin.apply(pod_manifest("pair", namespace, layout.node_name, [writer, container(
        "roomy", "sleep 3600", resources={"limits": {"ephemeral-storage": "1Gi"}})]))
    alone = wait_pod(admin, namespace, "alone", failed, timeout=180, what="evicted for the pod's total")
    pair = wait_pod(admin, namespace, "pair", failed, timeout=60, what="evicted for its container")
    assert (alone["status"]["reason"], alone["status"]["message"]) == (
        "Evicted", "Pod ephemeral local storage usage exceeds the total limit of containers 8Mi. ")
    assert (pair["status"]["reason"], pair["status"]["message"]) == (
        "Evicted", 'Container main exceeded its local ephemeral storage limit "8Mi". ')
    assert any(e["reason"] == "Evicted" for e in events(admin, namespace, "pair"))
