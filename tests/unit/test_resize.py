"""kopflet.kuberuntime.resize: which running containers an in-place resize updates or restarts, in which order, when it
is still
in progress, and what the status reads back (upstream computePodResizeAction, IsPodResizeInProgress,
convertContainerStatusResources, convertToAPIPodLevelResourcesStatus)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from cri_client import types as cri
from kopflet import backoff as backoffs
from kopflet.allocation.policy import PodAllocation
from kopflet.api.spec import Pod, Resources, pod_from_body
from kopflet.cm import helpers
from kopflet.container.podstate import ContainerInfo, RuntimePodStatus, SandboxInfo, State
from kopflet.kuberuntime import reconciler, resize
from tests.unit.test_allocation import alloc, make_pod, res

MI = 2**20


def running(*names: str, state: State = State.RUNNING, **extra: Any) -> RuntimePodStatus:
    return RuntimePodStatus(
        uid="uid-p", sandboxes=(SandboxInfo(id="sb", ready=True, ip="10.0.0.2"),),
        containers=tuple(ContainerInfo(id=f"id-{n}", name=n, state=state, sandbox_id="sb", hash="", **extra)
                         for n in names))


def with_policy(pod: Pod, name: str, **policies: str) -> Pod:
    body = {"metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
            "spec": {**pod.spec.raw, "containers": [
                {**c.raw, "resizePolicy": [{"resourceName": r, "restartPolicy": p} for r, p in policies.items()]}
                if c.name == name else c.raw for c in pod.spec.containers]}}
    return pod_from_body(body)


# ------------------------------------------------------------------------------------------- compute


def test_nothing_to_do_when_the_actuated_record_matches() -> None:
    pod = make_pod({"c1": res({"cpu": "100m", "memory": "64Mi"}, {"cpu": "200m", "memory": "128Mi"})})
    actuated = alloc({"c1": res({"cpu": "100m", "memory": "64Mi"}, {"cpu": "200m", "memory": "128Mi"})})
    actions = resize.compute(pod, running("c1"), actuated)
    assert not actions.any and not actions.restart


def test_updates_are_per_resource_decreases_first() -> None:
    pod = make_pod({"a": res({"cpu": "300m", "memory": "64Mi"}, {"cpu": "300m", "memory": "64Mi"}),
                    "b": res({"cpu": "100m", "memory": "32Mi"}, {"cpu": "100m", "memory": "32Mi"})})
    actuated = alloc({"a": res({"cpu": "200m", "memory": "64Mi"}, {"cpu": "200m", "memory": "64Mi"}),
                      "b": res({"cpu": "200m", "memory": "64Mi"}, {"cpu": "200m", "memory": "64Mi"})})
    actions = resize.compute(pod, running("a", "b"), actuated)
    assert [u.name for u in actions.cpu_updates] == ["b", "a"]  # b shrinks: first
    assert [u.name for u in actions.memory_updates] == ["b"]
    assert actions.cpu_updates[0].container_id == "id-b"
    assert not actions.restart and not actions.update_pod_resources


def test_a_memory_pass_sends_desired_memory_with_current_cpu() -> None:
    pod = make_pod({"c1": res({"cpu": "300m", "memory": "96Mi"}, {"cpu": "300m", "memory": "96Mi"})})
    actuated = alloc({"c1": res({"cpu": "200m", "memory": "64Mi"}, {"cpu": "200m", "memory": "64Mi"})})
    actions = resize.compute(pod, running("c1"), actuated)
    (memory,), (cpu,) = actions.memory_updates, actions.cpu_updates
    assert memory.resources() == resize.Values(cpu_request=200, cpu_limit=200, memory_request=96 * MI,
                                               memory_limit=96 * MI)
    assert cpu.resources() == resize.Values(cpu_request=300, cpu_limit=300, memory_request=64 * MI,
                                            memory_limit=64 * MI)
    assert cpu.resources(other_done=True) == resize.values(None, pod.spec.containers[0].resources)


@pytest.mark.parametrize(("policies", "restarts"), [
    ({"memory": "RestartContainer"}, False),  # only cpu changes: the memory policy does not matter
    ({"cpu": "RestartContainer"}, True),
    ({"cpu": "NotRequired", "memory": "RestartContainer"}, False),
])
def test_restart_container_policy_applies_only_to_a_changed_resource(policies: dict[str, str],
                                                                      restarts: bool) -> None:
    pod = with_policy(make_pod({"c1": res({"cpu": "300m", "memory": "64Mi"}, {"cpu": "300m", "memory": "64Mi"})}),
                      "c1", **policies)
    actuated = alloc({"c1": res({"cpu": "200m", "memory": "64Mi"}, {"cpu": "200m", "memory": "64Mi"})})
    actions = resize.compute(pod, running("c1"), actuated)
    assert (actions.restart == {"id-c1": "c1"}) is restarts
    assert actions.update_pod_resources is restarts
    assert bool(actions.cpu_updates) is not restarts


def test_containers_not_running_are_not_resized_and_a_start_with_other_values_resizes_the_pod_cgroup() -> None:
    pod = make_pod({"c1": res({"cpu": "300m"}, {"cpu": "300m"})})
    actuated = alloc({"c1": res({"cpu": "200m"}, {"cpu": "200m"})})
    exited = running("c1", state=State.EXITED)
    assert not resize.compute(pod, exited, actuated).any
    assert resize.compute(pod, exited, actuated, starting=("c1",)).update_pod_resources


def test_pod_level_limits_fill_in_for_containers_and_pod_level_changes_are_seen() -> None:
    pod = make_pod({"c1": res({"cpu": "100m"})}, pod_level=res({"cpu": "200m"}, {"cpu": "400m", "memory": "64Mi"}))
    assert resize.merged_limits(Resources(limits={"cpu": "400m", "memory": "64Mi"}),
                                pod.spec.containers[0].resources) == {"cpu": "400m", "memory": "64Mi"}
    same = PodAllocation(containers={"c1": Resources(requests={"cpu": "100m"},
                                                     limits={"cpu": "400m", "memory": "64Mi"})},
                         pod_level=Resources(requests={"cpu": "200m"}, limits={"cpu": "400m", "memory": "64Mi"}))
    assert not resize.compute(pod, running("c1"), same).any
    grown = make_pod({"c1": res({"cpu": "100m"})}, pod_level=res({"cpu": "200m"}, {"cpu": "500m", "memory": "64Mi"}))
    actions = resize.compute(grown, running("c1"), same)
    assert actions.update_pod_level_resources
    assert [u.resource for u in actions.cpu_updates] == ["cpu"]  # the merged container limit moved too


@pytest.mark.parametrize(("container", "memory_updates", "checked"), [
    # The container has its own memory limit: only the pod-level resources change, upstream does not check usage.
    (res({"memory": "32Mi"}, {"memory": "48Mi"}), [], False),
    # It takes the pod's limit: its merged limit falls too, a container memory update, and the usage is checked.
    (res({"memory": "32Mi"}), ["c1"], True),
])
def test_a_pod_level_memory_limit_lowered_is_checked_only_through_a_container(
        container: Resources, memory_updates: list[str], checked: bool) -> None:
    """Upstream validatePodResizeAction: ContainersToUpdate[memory] or UpdatePodResources, not
    UpdatePodLevelResources."""
    before = make_pod({"c1": container}, pod_level=res({"memory": "32Mi"}, {"memory": "128Mi"}))
    level = before.spec.raw["resources"]
    actuated = PodAllocation(containers={"c1": resize.effective(Resources(limits=level["limits"]),
                                                                before.spec.containers[0].resources)},
                             pod_level=Resources(requests=level["requests"], limits=level["limits"]))
    after = make_pod({"c1": container}, pod_level=res({"memory": "32Mi"}, {"memory": "64Mi"}))
    actions = resize.compute(after, running("c1"), actuated)
    assert actions.update_pod_level_resources and not actions.update_pod_resources
    assert [u.name for u in actions.memory_updates] == memory_updates
    assert resize.memory_check_runs(actions) is checked


# --------------------------------------------------------------------------------------- in progress


@pytest.mark.parametrize(("actuated", "state", "expected"), [
    (alloc({"c1": res({"cpu": "100m"}, {"cpu": "100m"})}), State.RUNNING, False),
    (alloc({"c1": res({"cpu": "0.1"}, {"cpu": "100m"})}), State.RUNNING, False),  # equal by value
    (alloc({"c1": res({"cpu": "50m"}, {"cpu": "100m"})}), State.RUNNING, True),
    (alloc({"c1": res({"cpu": "50m"}, {"cpu": "100m"})}), State.EXITED, False),  # not running: nothing to resize
    (None, State.RUNNING, True),  # no record: upstream compares against zeros
])
def test_in_progress(actuated: PodAllocation | None, state: State, expected: bool) -> None:
    pod = make_pod({"c1": res({"cpu": "100m"}, {"cpu": "100m"})})
    assert resize.in_progress(pod, running("c1", state=state), actuated) is expected


def test_a_non_sidecar_init_container_is_not_in_progress_but_a_sidecar_is() -> None:
    pod = make_pod({"c1": {}}, init={"i1": res({"cpu": "100m"}), "s1": res({"cpu": "100m"})}, sidecars=("s1",))
    actuated = alloc({"c1": {}, "i1": res({"cpu": "50m"}), "s1": res({"cpu": "100m"})})
    assert not resize.in_progress(pod, running("i1", "s1"), actuated)
    actuated = alloc({"c1": {}, "i1": res({"cpu": "100m"}), "s1": res({"cpu": "50m"})})
    assert resize.in_progress(pod, running("i1", "s1"), actuated)


# ------------------------------------------------------------------------------------ reconciler glue


def test_a_resize_restart_kills_and_starts_the_container_in_one_sync_without_backoff() -> None:
    pod = make_pod({"c1": {}, "c2": {}})
    runtime = RuntimePodStatus(uid="uid-p", sandboxes=(SandboxInfo(id="sb", ready=True, ip="10.0.0.2"),),
                               containers=tuple(ContainerInfo(id=f"id-{c.name}", name=c.name, state=State.RUNNING,
                                                              sandbox_id="sb", hash=c.hash)
                                                for c in pod.spec.containers))
    actions = reconciler.compute_pod_actions(pod, runtime, backoff=backoffs.Backoff(), now=0,
                                             resize_restarts={"id-c2": "c2"})
    assert actions.containers_to_kill["id-c2"].message == "Container c2 resize requires restart"
    assert actions.containers_to_start == ("c2",)
    assert not actions.kill_pod


# -------------------------------------------------------------------------------------------- status


@pytest.mark.parametrize(("allocated", "running_now", "reported", "previous", "expected"), [
    # Not running: the allocation as it is.
    (Resources(requests={"cpu": "100m"}, limits={"cpu": "200m"}), False, None, None,
     {"limits": {"cpu": "200m"}, "requests": {"cpu": "100m"}}),
    # Running: cpu from shares and quota, memory limit from the runtime.
    (Resources(requests={"cpu": "100m", "memory": "32Mi"}, limits={"cpu": "200m", "memory": "64Mi"}), True,
     cri.LinuxContainerResources(cpu_shares=307, cpu_quota=30000, cpu_period=100000, memory_limit_in_bytes=96 * MI),
     None, {"limits": {"cpu": "300m", "memory": "96Mi"}, "requests": {"cpu": "300m", "memory": "32Mi"}}),
    # At the floor (1m request, 5m limit): the allocated values stay.
    (Resources(requests={"cpu": "1m"}, limits={"cpu": "5m"}), True,
     cri.LinuxContainerResources(cpu_shares=2, cpu_quota=1000, cpu_period=100000), None,
     {"limits": {"cpu": "5m"}, "requests": {"cpu": "1m"}}),
    # The runtime reports nothing: the same instance's previous values.
    (Resources(limits={"memory": "64Mi"}), True, None, {"limits": {"memory": "48Mi"}},
     {"limits": {"memory": "48Mi"}}),
    # No resources at all: {} (every running container's status carries resources).
    (Resources(), True, cri.LinuxContainerResources(cpu_shares=2), None, {}),
])
def test_container_status_resources(allocated: Resources, running_now: bool, reported: Any,
                                    previous: dict[str, Any] | None, expected: dict[str, Any]) -> None:
    assert resize.container_status_resources(allocated, running_now, reported, None, previous) == expected


def test_pod_status_resources_before_running_are_the_pods_requests_and_limits() -> None:
    pod = make_pod({"c1": res({"cpu": "100m", "memory": "32Mi"}, {"cpu": "200m", "memory": "64Mi"}),
                    "c2": res({"cpu": "100m"})})
    assert resize.pod_status_resources(pod, running=False, cgroup=None, previous=None) == {
        "limits": {"cpu": "200m", "memory": "64Mi"}, "requests": {"cpu": "200m", "memory": "32Mi"}}
    assert resize.pod_allocated_resources(pod) == {"cpu": "200m", "memory": "32Mi"}


def test_pod_status_resources_while_running_read_the_pod_cgroup() -> None:
    pod = make_pod({"c1": {}}, pod_level=res({"cpu": "200m", "memory": "32Mi"}, {"cpu": "400m", "memory": "64Mi"}))
    cgroup = helpers.ResourceConfig(cpu_shares=204, cpu_quota=50000, cpu_period=100000, memory=80 * MI)
    assert resize.pod_status_resources(pod, running=True, cgroup=cgroup, previous=None) == {
        "limits": {"cpu": "500m", "memory": "80Mi"}, "requests": {"cpu": "200m", "memory": "32Mi"}}
    unreadable = resize.pod_status_resources(pod, running=True, cgroup=None,
                                             previous={"resources": {"limits": {"cpu": "300m", "memory": "48Mi"}}})
    assert unreadable["limits"] == {"cpu": "300m", "memory": "48Mi"}


@pytest.mark.parametrize(("value", "binary", "text"), [
    (Fraction(1, 2), False, "500m"), (Fraction(2), False, "2"), (Fraction(64 * MI), True, "64Mi"),
    (Fraction(64 * MI + 1), True, str(64 * MI + 1)), (Fraction(0), True, "0"),
])
def test_quantity_text(value: Fraction, binary: bool, text: str) -> None:
    assert resize.quantity_text(value, binary=binary) == text


# ------------------------------------------------------------------------------- pod cgroup write order

RC = helpers.ResourceConfig
V1_UNLIMITED = helpers.CGROUP_V1_MEMORY_UNLIMITED


def quota(value: int) -> helpers.ResourceConfig:
    return RC(cpu_quota=value, cpu_period=100000)


@pytest.mark.parametrize(("resource", "target", "current", "before", "after"), [
    # Upstream doPodResizeAction's resizeContainers: limit up, request up | containers | request down, limit down.
    ("cpu", RC(cpu_shares=409, cpu_quota=80000, cpu_period=100000), RC(cpu_shares=204, cpu_quota=40000),
     (quota(80000), RC(cpu_shares=409)), ()),
    ("cpu", RC(cpu_shares=102, cpu_quota=20000, cpu_period=100000), RC(cpu_shares=204, cpu_quota=40000),
     (), (RC(cpu_shares=102), quota(20000))),
    # Request up, limit down (the rollback of "requests and limits in opposite directions"): shares first, the
    # quota after the containers, or cgroup v1 refuses a child quota above its parent's.
    ("cpu", RC(cpu_shares=409, cpu_quota=40000, cpu_period=100000), RC(cpu_shares=204, cpu_quota=80000),
     (RC(cpu_shares=409),), (quota(40000),)),
    ("cpu", RC(cpu_shares=102, cpu_quota=80000, cpu_period=100000), RC(cpu_shares=204, cpu_quota=40000),
     (quota(80000),), (RC(cpu_shares=102),)),
    # Unlimited is -1 as the kernel reads it (v1 cfs_quota_us, v2 "max"), compared as a number: the smallest.
    # A quota set where there was none grows (before the containers); one removed shrinks (after them).
    ("cpu", RC(cpu_shares=204, cpu_quota=30000, cpu_period=100000), RC(cpu_shares=204, cpu_quota=-1),
     (quota(30000),), ()),
    ("cpu", RC(cpu_shares=102, cpu_quota=-1, cpu_period=100000), RC(cpu_shares=204, cpu_quota=80000),
     (), (RC(cpu_shares=102), quota(-1))),
    # No quota in the target (a Burstable pod with a container without a cpu limit): the current one stays.
    ("cpu", RC(cpu_shares=307), RC(cpu_shares=204, cpu_quota=-1), (RC(cpu_shares=307),), ()),
    ("cpu", RC(cpu_shares=307), RC(cpu_shares=204, cpu_quota=50000), (RC(cpu_shares=307),), ()),
    # Nothing changes: nothing is written, the runtime is not told.
    ("cpu", RC(cpu_shares=204, cpu_quota=40000, cpu_period=100000), RC(cpu_shares=204, cpu_quota=40000), (), ()),
    ("memory", RC(memory=64 * MI), RC(memory=96 * MI), (), (RC(memory=64 * MI),)),
    ("memory", RC(memory=128 * MI), RC(memory=96 * MI), (RC(memory=128 * MI),), ()),
    ("memory", RC(memory=96 * MI), RC(memory=96 * MI), (), ()),
    ("memory", RC(), RC(memory=96 * MI), (), ()),  # no limit: left alone (limits are never removed)
    # An unlimited pod cgroup getting a limit: v1 reads 9223372036854771712 (larger: after the containers), v2
    # reads "max" as -1 (smaller: before them).
    ("memory", RC(memory=64 * MI), RC(memory=V1_UNLIMITED), (), (RC(memory=64 * MI),)),
    ("memory", RC(memory=64 * MI), RC(memory=-1), (RC(memory=64 * MI),), ()),
    # The limit write carries the unified memory settings (MemoryQoS on v2).
    ("memory", RC(memory=64 * MI, cpu_shares=2, unified={"memory.high": "60000000"}), RC(memory=96 * MI),
     (), (RC(memory=64 * MI, unified={"memory.high": "60000000"}),)),
])
def test_pod_cgroup_values_that_grow_go_before_the_containers(resource: str, target: helpers.ResourceConfig,
                                                              current: helpers.ResourceConfig, before: Any,
                                                              after: Any) -> None:
    assert resize.pod_cgroup_writes(resource, target, current) == (before, after)


@pytest.mark.parametrize(("actions", "memory", "cpu", "check"), [
    (resize.ResizeActions(), False, False, False),
    (resize.ResizeActions(memory_updates=(object(),)), True, False, True),  # type: ignore[arg-type]
    (resize.ResizeActions(cpu_updates=(object(),)), False, True, False),  # type: ignore[arg-type]
    (resize.ResizeActions(update_pod_resources=True), True, True, True),
    # Pod-level resources alone: both passes, but no usage check (upstream validatePodResizeAction).
    (resize.ResizeActions(update_pod_level_resources=True), True, True, False),
])
def test_which_passes_run_and_when_memory_usage_is_checked(actions: resize.ResizeActions, memory: bool, cpu: bool,
                                                           check: bool) -> None:
    assert resize.resource_pass_runs(actions, resize.MEMORY) is memory
    assert resize.resource_pass_runs(actions, resize.CPU) is cpu
    assert resize.memory_check_runs(actions) is check


def memory_update(name: str, desired: int, current: int) -> resize.ContainerUpdate:
    return resize.ContainerUpdate(name=name, container_id=f"id-{name}", resource=resize.MEMORY,
                                  desired=resize.Values(memory_limit=desired),
                                  current=resize.Values(memory_limit=current))


@pytest.mark.parametrize(("target", "current", "updates", "pod_limit", "containers"), [
    (RC(memory=64 * MI), RC(memory=96 * MI), (), 64 * MI, {}),  # lowered
    (RC(memory=128 * MI), RC(memory=96 * MI), (), None, {}),  # raised
    (RC(memory=96 * MI), RC(memory=96 * MI), (), None, {}),
    (RC(), RC(memory=96 * MI), (), None, {}),  # no pod limit
    (RC(memory=64 * MI), RC(), (), 64 * MI, {}),  # added (nothing read back)
    (RC(memory=64 * MI), RC(memory=V1_UNLIMITED), (), 64 * MI, {}),  # added on v1: below 9223372036854771712
    (RC(memory=64 * MI), RC(memory=-1), (), None, {}),  # added on v2: "max" is -1, not above 64Mi
    (RC(), RC(), (memory_update("a", 32 * MI, 64 * MI), memory_update("b", 64 * MI, 32 * MI),
                  memory_update("c", 32 * MI, 0), memory_update("d", 0, 0)), None, {"a": 32 * MI, "c": 32 * MI}),
])
def test_which_memory_limits_decrease(target: helpers.ResourceConfig, current: helpers.ResourceConfig,
                                      updates: tuple[resize.ContainerUpdate, ...], pod_limit: int | None,
                                      containers: dict[str, int]) -> None:
    assert resize.memory_limit_decreases(target, current, updates) == (pod_limit, containers)


Usage = resize.MemoryUsage


@pytest.mark.parametrize(("pod_limit", "containers", "usage", "error"), [
    (None, {}, Usage(readable=False), ""),  # nothing decreases: the usage is not even looked at
    (64, {}, Usage(pod=10), ""),
    (64, {}, Usage(pod=64), "cannot decrease memory limits: attempting to set pod memory limit (64) below current "
                            "usage (64)"),
    (64, {}, Usage(), "cannot decrease memory limits: missing pod memory usage"),
    (64, {}, Usage(readable=False), 'unable to read memory usage for pod "p_ns(u)"'),
    (None, {"a": 32}, Usage(readable=False), 'unable to read memory usage for pod "p_ns(u)"'),
    (None, {"a": 32}, Usage(pod=50, containers={"a": 20}), ""),
    # The container's own usage decides; its message shows the pod's (upstream's text).
    (None, {"a": 32}, Usage(pod=50, containers={"a": 40}),
     'cannot decrease memory limits: attempting to set container "a" memory limit (32) below current usage (50)'),
    (None, {"a": 32}, Usage(containers={"a": 40}),
     'cannot decrease memory limits: attempting to set container "a" memory limit (32) below current usage (40)'),
    (None, {"a": 32}, Usage(pod=50, containers={"a": None}),
     'cannot decrease memory limits: missing container "a" memory usage'),
    (None, {"a": 32}, Usage(pod=50), ""),  # no stats for the container: not looked at
    (64, {"a": 32, "b": 16}, Usage(pod=70, containers={"a": 40, "b": 20}),
     "cannot decrease memory limits: [attempting to set pod memory limit (64) below current usage (70), "
     'attempting to set container "a" memory limit (32) below current usage (70), '
     'attempting to set container "b" memory limit (16) below current usage (70)]'),
])
def test_the_memory_check_refuses_limits_at_or_below_usage(pod_limit: int | None, containers: dict[str, int],
                                                           usage: resize.MemoryUsage, error: str) -> None:
    """Upstream validateMemoryResizeAction and TestValidatePodResizeAction."""
    assert resize.memory_resize_error("p_ns(u)", pod_limit, containers, usage) == error


def test_pod_status_cpu_request_survives_the_cgroup_v2_weight_round_trip() -> None:
    pod = make_pod({"c1": {}}, pod_level=res({"cpu": "1"}, {"cpu": "1"}))
    readback = helpers.cpu_weight_to_shares(helpers.cpu_shares_to_weight(1024))
    assert readback != 1024
    got = resize.pod_status_resources(pod, running=True, cgroup=helpers.ResourceConfig(cpu_shares=readback,
                                                                                    cpu_quota=100000,
                                                                                    cpu_period=100000),
                                      previous=None)
    assert got["requests"]["cpu"] == "1"
