"""In-place pod resize on the real stack (upstream InPlacePodVerticalScaling and its pod-level variant): the pod
cgroup is created with the pod's limits, a resize through ``pods/resize`` reaches the container's and the pod's
cgroups without a restart, the status reports the new values and the conditions go away, a RestartContainer policy
restarts just that container, a resize that does not fit is Deferred, and a memory limit below what is in use
fails with PodResizeInProgress reason Error."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_pod_lifecycle import container, events, is_ready, pod_manifest, statuses, wait_pod

MI = 2**20


def cgroup_read(admin: Kubectl, namespace: str, pod: str, name: str, path: str) -> str:
    """A file of the container's own cgroup (v1: /sys/fs/cgroup/<controller>/..., v2: /sys/fs/cgroup/...)."""
    return admin.run("exec", "-n", namespace, pod, "-c", name, "--", "sh", "-c", f"head -n 1 {path}").stdout.strip()


def pod_cgroup(pod: dict[str, Any], controller: str) -> str:
    """The pod's cgroup directory on the host (cgroupfs driver, cgroup v1 as on this machine, or v2)."""
    uid = pod["metadata"]["uid"]
    tier = {"Guaranteed": "", "Burstable": "burstable/", "BestEffort": "besteffort/"}[pod["status"]["qosClass"]]
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        return f"/sys/fs/cgroup/kubepods/{tier}pod{uid}"
    return f"/sys/fs/cgroup/{controller}/kubepods/{tier}pod{uid}"


def host_read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def resize(admin: Kubectl, namespace: str, name: str, patch: dict[str, Any]) -> None:
    admin.run("patch", "pod", name, "-n", namespace, "--subresource", "resize", "--type", "strategic",
              "-p", json.dumps(patch))


def settled(generation: int) -> Any:
    """Upstream WaitForPodResizeActuation: observedGeneration caught up, no resize condition left, Ready."""
    def check(pod: dict[str, Any]) -> bool:
        st = pod.get("status", {})
        kinds = {c["type"] for c in st.get("conditions", [])}
        return (st.get("observedGeneration", 0) >= generation and is_ready(pod)
                and not kinds & {"PodResizePending", "PodResizeInProgress"})
    return check


def condition(pod: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in pod.get("status", {}).get("conditions", []) if c["type"] == kind), None)


def test_resize_reaches_container_and_pod_cgroups_without_a_restart(running_agent: Agent, admin: Kubectl,
                                                                     layout: Layout, namespace: str) -> None:
    resources = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "96Mi"}}
    admin.apply(pod_manifest("grow", namespace, layout.node_name,
                             [container("main", "sleep 3600", resources=resources)],
                             terminationGracePeriodSeconds=0))
    pod = wait_pod(admin, namespace, "grow", is_ready, what="Ready")
    # The pod cgroup exists with the pod's limits before any resize (upstream ResourceConfigForPod).
    assert host_read(pod_cgroup(pod, "memory") + "/memory.limit_in_bytes") == str(96 * MI)
    assert host_read(pod_cgroup(pod, "cpu") + "/cpu.cfs_quota_us") == "20000"
    assert pod["status"]["resources"] == resources and pod["status"]["allocatedResources"] == resources["requests"]
    assert statuses(pod)["main"]["resources"] == resources

    wanted = {"requests": {"cpu": "150m", "memory": "80Mi"}, "limits": {"cpu": "300m", "memory": "128Mi"}}
    resize(admin, namespace, "grow", {"spec": {"containers": [{"name": "main", "resources": wanted}]}})
    pod = wait_pod(admin, namespace, "grow", settled(2), what="resized")
    main = statuses(pod)["main"]
    assert main["restartCount"] == 0
    assert main["resources"] == wanted and main["allocatedResources"] == wanted["requests"]
    assert cgroup_read(admin, namespace, "grow", "main", "/sys/fs/cgroup/memory/memory.limit_in_bytes") == \
        str(128 * MI)
    assert cgroup_read(admin, namespace, "grow", "main", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us") == "30000"
    assert cgroup_read(admin, namespace, "grow", "main", "/sys/fs/cgroup/cpu/cpu.shares") == "153"
    assert host_read(pod_cgroup(pod, "memory") + "/memory.limit_in_bytes") == str(128 * MI)
    assert host_read(pod_cgroup(pod, "cpu") + "/cpu.cfs_quota_us") == "30000"
    reasons = [e["reason"] for e in events(admin, namespace, "grow")]
    assert "ResizeStarted" in reasons and "ResizeCompleted" in reasons, reasons
    completed = next(e for e in events(admin, namespace, "grow") if e["reason"] == "ResizeCompleted")
    assert completed["message"].startswith('Pod resize completed: {"containers":[{"name":"main","resources":')


def test_restart_container_policy_restarts_only_that_container(running_agent: Agent, admin: Kubectl,
                                                               layout: Layout, namespace: str) -> None:
    limits = {"cpu": "100m", "memory": "64Mi"}
    policy = [{"resourceName": "memory", "restartPolicy": "RestartContainer"}]
    admin.apply(pod_manifest("restart", namespace, layout.node_name,
                             [container("mem", "sleep 3600", resources={"limits": limits}, resizePolicy=policy),
                              container("other", "sleep 3600", resources={"limits": limits})],
                             terminationGracePeriodSeconds=0))
    wait_pod(admin, namespace, "restart", is_ready, what="Ready")
    resize(admin, namespace, "restart", {"spec": {"containers": [
        {"name": "mem", "resources": {"limits": {"memory": "80Mi"}, "requests": {"memory": "80Mi"}}}]}})
    pod = wait_pod(admin, namespace, "restart", settled(2), what="resized")
    assert statuses(pod)["mem"]["restartCount"] == 1
    assert statuses(pod)["other"]["restartCount"] == 0
    assert cgroup_read(admin, namespace, "restart", "mem", "/sys/fs/cgroup/memory/memory.limit_in_bytes") == \
        str(80 * MI)
    killing = [e["message"] for e in events(admin, namespace, "restart") if e["reason"] == "Killing"]
    assert killing == ["Container mem resize requires restart"], killing


def test_a_resize_beyond_what_is_free_is_deferred_and_a_memory_limit_below_usage_fails(
        running_agent: Agent, admin: Kubectl, layout: Layout, namespace: str) -> None:
    allocatable = admin.json("get", "node", layout.node_name)["status"]["allocatable"]
    admin.apply(pod_manifest("neighbour", namespace, layout.node_name,
                             [container("main", "sleep 3600", resources={"requests": {"cpu": "50m"}})],
                             terminationGracePeriodSeconds=0))
    # 40 MiB in a tmpfs file, charged to the container's memory cgroup for as long as the file exists.
    admin.apply(pod_manifest("big", namespace, layout.node_name,
                             [container("main", "head -c 40m /dev/zero > /dev/shm/fill; sleep 3600",
                                        resources={"limits": {"cpu": "100m", "memory": "128Mi"}})],
                             terminationGracePeriodSeconds=0))
    wait_pod(admin, namespace, "neighbour", is_ready, what="Ready")
    wait_pod(admin, namespace, "big", is_ready, what="Ready")
    # All of the node's cpu while the neighbour holds 50m: Deferred with the admission message (the apiserver
    # itself refuses more than the node's whole allocatable).
    everything = {"requests": {"cpu": allocatable["cpu"]}, "limits": {"cpu": allocatable["cpu"]}}
    resize(admin, namespace, "big", {"spec": {"containers": [{"name": "main", "resources": everything}]}})
    pod = wait_pod(admin, namespace, "big", lambda p: condition(p, "PodResizePending") is not None,
                   what="PodResizePending")
    pending = condition(pod, "PodResizePending")
    assert pending is not None and pending["reason"] == "Deferred"
    assert pending["message"].startswith("Node didn't have enough resource: cpu, requested: "), pending
    assert "ResizeDeferred" in [e["reason"] for e in events(admin, namespace, "big")]
    # Reverting the resize clears the condition.
    resize(admin, namespace, "big", {"spec": {"containers": [
        {"name": "main", "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "100m"}}}]}})
    pod = wait_pod(admin, namespace, "big", settled(3), what="pending resize reverted")

    # 40 MiB in use: a memory limit of 8 MiB is refused before anything changes.
    resize(admin, namespace, "big", {"spec": {"containers": [
        {"name": "main", "resources": {"requests": {"memory": "8Mi"}, "limits": {"memory": "8Mi"}}}]}})
    pod = wait_pod(admin, namespace, "big",
                   lambda p: (condition(p, "PodResizeInProgress") or {}).get("reason") == "Error",
                   what="PodResizeInProgress Error")
    message = condition(pod, "PodResizeInProgress")["message"]  # type: ignore[index]
    assert message.startswith("cannot decrease memory limits: "), message
    assert "below current usage" in message
    assert statuses(pod)["main"]["resources"]["limits"]["memory"] == "128Mi"
    assert cgroup_read(admin, namespace, "big", "main", "/sys/fs/cgroup/memory/memory.limit_in_bytes") == \
        str(128 * MI)
    assert "ResizeError" in [e["reason"] for e in events(admin, namespace, "big")]


def test_requests_up_and_limits_down_in_one_resize(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                   namespace: str) -> None:
    """The pod cgroup's shares grow and its quota shrinks: the shares go before the container, the quota after it
    (cgroup v1 refuses a pod quota below its container's: upstream writes each value in its own direction)."""
    admin.apply(pod_manifest("opposite", namespace, layout.node_name,
                             [container("main", "sleep 3600", resources={"requests": {"cpu": "100m"},
                                                                          "limits": {"cpu": "400m"}})],
                             terminationGracePeriodSeconds=0))
    pod = wait_pod(admin, namespace, "opposite", is_ready, what="Ready")
    wanted = {"requests": {"cpu": "200m"}, "limits": {"cpu": "300m"}}
    resize(admin, namespace, "opposite", {"spec": {"containers": [{"name": "main", "resources": wanted}]}})
    pod = wait_pod(admin, namespace, "opposite", settled(2), what="resized")
    assert statuses(pod)["main"]["resources"] == wanted
    assert host_read(pod_cgroup(pod, "cpu") + "/cpu.cfs_quota_us") == "30000"
    assert host_read(pod_cgroup(pod, "cpu") + "/cpu.shares") == "204"
    assert cgroup_read(admin, namespace, "opposite", "main", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us") == "30000"


def host_write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def test_a_pod_cgroup_on_another_cfs_period_is_resized_with_the_period_retried(
        running_agent: Agent, admin: Kubectl, layout: Layout, namespace: str) -> None:
    """cgroup v1 refuses a new cpu.cfs_period_us whose old quota would then fall below a child's: libcontainer lets
    that EINVAL go when a quota follows, writes the quota, then the period again (CpuGroup.Set). The pod cgroup is
    put on a 50 ms period (the container's 0.2 CPU kept), so writing the agent's 100 ms period first is refused."""
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        pytest.skip("cgroup v2: cpu.max takes quota and period in one write, nothing to retry")
    admin.apply(pod_manifest("period", namespace, layout.node_name,
                             [container("main", "sleep 3600", resources={"requests": {"cpu": "100m"},
                                                                          "limits": {"cpu": "200m"}})],
                             terminationGracePeriodSeconds=0))
    pod = wait_pod(admin, namespace, "period", is_ready, what="Ready")
    cpu = pod_cgroup(pod, "cpu")
    host_write(cpu + "/cpu.cfs_period_us", "50000")  # 20000 / 50000: still above the container's 0.2
    host_write(cpu + "/cpu.cfs_quota_us", "10000")  # 10000 / 50000 = 0.2: 100000 alone would make it 0.1
    wanted = {"requests": {"cpu": "100m"}, "limits": {"cpu": "300m"}}
    resize(admin, namespace, "period", {"spec": {"containers": [{"name": "main", "resources": wanted}]}})
    pod = wait_pod(admin, namespace, "period", settled(2), what="resized")
    assert host_read(cpu + "/cpu.cfs_period_us") == "100000"
    assert host_read(cpu + "/cpu.cfs_quota_us") == "30000"
    assert cgroup_read(admin, namespace, "period", "main", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us") == "30000"
    assert statuses(pod)["main"]["resources"] == wanted


def test_a_pod_level_memory_limit_lowered_below_usage_alone_is_refused_by_the_kernel(
        running_agent: Agent, admin: Kubectl, layout: Layout, namespace: str) -> None:
    """Only the pod-level limit falls (each container keeps its own): upstream validatePodResizeAction does not
    check usage (no container memory update), the pod cgroup's memory.limit_in_bytes is written and cgroup v1
    refuses it as busy, in libcontainer's words ("unable to set memory limit to ..."). The pod's limits stand."""
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        pytest.skip("cgroup v2: memory.max below the usage reclaims and OOM-kills instead of refusing")
    own = {"requests": {"memory": "8Mi"}, "limits": {"memory": "32Mi"}}
    level = {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}}

    def filler(name: str) -> dict[str, Any]:
        """Ready once its 25 MiB tmpfs file is whole: a running container alone may still be writing it."""
        return container(name, f"head -c 25m /dev/zero > /dev/shm/{name}.part && mv /dev/shm/{name}.part "
                               f"/dev/shm/{name}; sleep 3600", resources=own,
                         readinessProbe={"exec": {"command": ["test", "-e", f"/dev/shm/{name}"]},
                                         "periodSeconds": 1})
    admin.apply(pod_manifest("podlevel", namespace, layout.node_name, [filler("a"), filler("b")],
                             resources=level, terminationGracePeriodSeconds=0))
    pod = wait_pod(admin, namespace, "podlevel", is_ready, what="Ready")
    memory = pod_cgroup(pod, "memory")
    assert host_read(memory + "/memory.limit_in_bytes") == str(128 * MI)
    assert int(host_read(memory + "/memory.usage_in_bytes")) > 48 * MI  # the two 25 MiB tmpfs files
    resize(admin, namespace, "podlevel", {"spec": {"resources": {"requests": {"memory": "32Mi"},
                                                                 "limits": {"memory": "40Mi"}}}})
    pod = wait_pod(admin, namespace, "podlevel",
                   lambda p: (condition(p, "PodResizeInProgress") or {}).get("reason") == "Error",
                   what="PodResizeInProgress Error")
    message = condition(pod, "PodResizeInProgress")["message"]  # type: ignore[index]
    assert message.startswith(f"unable to set memory limit to {40 * MI} (current usage: "), message
    assert host_read(memory + "/memory.limit_in_bytes") == str(128 * MI)
    assert pod["status"]["resources"]["limits"]["memory"] == "128Mi"


def test_a_cpu_limit_given_to_the_last_container_without_one_sets_the_pod_quota(
        running_agent: Agent, admin: Kubectl, layout: Layout, namespace: str) -> None:
    """A Burstable pod with a container without a cpu limit has no pod quota (-1). Giving it one makes every
    container limited: the pod cgroup gets the summed quota, written before the containers (upstream compares
    the int64 quotas: -1 is the smallest, so this is an increase)."""
    admin.apply(pod_manifest("unlimited", namespace, layout.node_name,
                             [container("a", "sleep 3600", resources={"requests": {"cpu": "100m"},
                                                                       "limits": {"cpu": "200m"}}),
                              container("b", "sleep 3600", resources={"requests": {"cpu": "100m"}})],
                             terminationGracePeriodSeconds=0))
    pod = wait_pod(admin, namespace, "unlimited", is_ready, what="Ready")
    cpu = pod_cgroup(pod, "cpu")
    assert host_read(cpu + "/cpu.cfs_quota_us") == "-1"
    wanted = {"requests": {"cpu": "100m"}, "limits": {"cpu": "100m"}}
    resize(admin, namespace, "unlimited", {"spec": {"containers": [{"name": "b", "resources": wanted}]}})
    pod = wait_pod(admin, namespace, "unlimited", settled(2), what="resized")
    assert host_read(cpu + "/cpu.cfs_quota_us") == "30000"
    assert cgroup_read(admin, namespace, "unlimited", "b", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us") == "10000"
    assert statuses(pod)["b"]["resources"] == wanted
