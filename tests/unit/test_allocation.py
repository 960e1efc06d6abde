"""kopflet.allocation.policy: in-place resize allocation as upstream kubelet v1.37.1 decides it.

Expected strings are upstream's: the condition messages and events of pkg/kubelet/allocation's tests, and
checkpoint files produced by a Go program with upstream's state types, encoding/json and checksum.New.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from kopflet.allocation import policy
from kopflet.allocation.policy import PendingResize, PodAllocation, ResizeEvent
from kopflet.api.spec import Pod, Resources, pod_from_body
from kopflet.lifecycle import admission
from kopflet.lifecycle.admission import NodeInfo, Taint

GI = 2**30
MI = 2**20


def res(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if limits:
        body["limits"] = limits
    if requests:
        body["requests"] = requests
    return body


def make_pod(containers: dict[str, dict[str, Any]] | None = None, *, name: str = "p",
             init: dict[str, dict[str, Any]] | None = None, pod_level: dict[str, Any] | None = None,
             sidecars: tuple[str, ...] = (), **spec_fields: Any) -> Pod:
    """A pod from container name -> resources body (default: one container c1 without resources)."""
    containers = {"c1": {}} if containers is None else containers
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": n, "image": "busybox", "resources": r} for n, r in containers.items()],
                 **spec_fields},
    }
    if init:
        body["spec"]["initContainers"] = [
            {"name": n, "image": "busybox", "resources": r, **({"restartPolicy": "Always"} if n in sidecars else {})}
            for n, r in init.items()]
    if pod_level is not None:
        body["spec"]["resources"] = pod_level
    return pod_from_body(body)


def node(**allocatable: str) -> NodeInfo:
    values = {"cpu": "4", "memory": "4Gi", "pods": "110"}
    values.update(allocatable)
    return NodeInfo(name="node-1", allocatable=values)


def alloc(containers: dict[str, dict[str, Any]], pod_level: dict[str, Any] | None = None) -> PodAllocation:
    return PodAllocation(
        containers={n: Resources(requests=r.get("requests", {}), limits=r.get("limits", {}))
                    for n, r in containers.items()},
        pod_level=None if pod_level is None else Resources(requests=pod_level.get("requests", {}),
                                                           limits=pod_level.get("limits", {})))


# ------------------------------------------------------------------------------------------ PodAllocation


def test_from_pod_records_every_init_and_regular_container_and_pod_level_resources() -> None:
    pod = make_pod({"c1": res({"cpu": "20m"}, {"cpu": "30m"}), "c2": {}},
                   init={"i1": res({"memory": "35Mi"}), "s1": res({"cpu": "5m"})}, sidecars=("s1",),
                   pod_level=res({"cpu": "500m", "memory": "1Gi"}, {"memory": "1Gi"}))
    got = PodAllocation.from_pod(pod)
    assert got == alloc({"c1": res({"cpu": "20m"}, {"cpu": "30m"}), "c2": {}, "i1": res({"memory": "35Mi"}),
                         "s1": res({"cpu": "5m"})},
                        res({"cpu": "500m", "memory": "1Gi"}, {"memory": "1Gi"}))
    assert PodAllocation.from_pod(make_pod()).pod_level is None


def test_to_json_is_upstreams_pod_resource_info_and_reads_back() -> None:
    value = alloc({"c1": res({"cpu": "20m", "memory": "35Mi"}, {"cpu": "30m", "memory": "45Mi"}), "a-init": {}})
    body = value.to_json()
    assert body == {
        "ContainerResources": {"a-init": {},
                               "c1": {"limits": {"cpu": "30m", "memory": "45Mi"},
                                      "requests": {"cpu": "20m", "memory": "35Mi"}}},
        "PodLevelResources": None,
        "EmptyDirVolumeLimits": None,
    }
    assert list(body) == ["ContainerResources", "PodLevelResources", "EmptyDirVolumeLimits"]
    assert PodAllocation.from_json(body) == value
    with_level = alloc({}, res({"cpu": "1"}))
    assert PodAllocation.from_json(with_level.to_json()) == with_level


# Produced by Go: upstream's PodResourceCheckpointInfo/Checkpoint shapes, encoding/json, checksum.New.
GO_EMPTY = '{"data":"{}","checksum":694314937}'
GO_TWO_PODS = (
    '{"data":"{\\"entries\\":{\\"uid-1\\":{\\"ContainerResources\\":{\\"c1\\":{\\"requests\\":{\\"cpu\\":\\"1\\"}}},'
    '\\"PodLevelResources\\":{\\"limits\\":{\\"memory\\":\\"1Gi\\"},\\"requests\\":{\\"cpu\\":\\"500m\\",'
    '\\"memory\\":\\"1Gi\\"}},\\"EmptyDirVolumeLimits\\":null},\\"uid-2\\":{\\"ContainerResources\\":{\\"a-init\\":{},'
    '\\"c1\\":{\\"limits\\":{\\"cpu\\":\\"30m\\",\\"memory\\":\\"45Mi\\"},\\"requests\\":{\\"cpu\\":\\"20m\\",'
    '\\"memory\\":\\"35Mi\\"}}},\\"PodLevelResources\\":null,\\"EmptyDirVolumeLimits\\":null}}}","checksum":4187774868}'
)
TWO_PODS = {
    "uid-2": alloc({"c1": res({"cpu": "20m", "memory": "35Mi"}, {"cpu": "30m", "memory": "45Mi"}), "a-init": {}}),
    "uid-1": alloc({"c1": res({"cpu": "1"})}, res({"cpu": "500m", "memory": "1Gi"}, {"memory": "1Gi"})),
}


@pytest.mark.parametrize(("entries", "text"), [({}, GO_EMPTY), (TWO_PODS, GO_TWO_PODS)])
def test_checkpoint_text_is_byte_for_byte_upstreams(entries: dict[str, PodAllocation], text: str) -> None:
    assert policy.checkpoint_text(entries) == text
    assert policy.read_checkpoint(text) == entries


def test_read_checkpoint_accepts_an_entry_without_containers() -> None:
    text = ('{"data":"{\\"entries\\":{\\"x\\":{\\"ContainerResources\\":null,\\"PodLevelResources\\":null,'
            '\\"EmptyDirVolumeLimits\\":null}}}","checksum":955699264}')
    assert policy.read_checkpoint(text) == {"x": PodAllocation()}


@pytest.mark.parametrize(("text", "message"), [
    (GO_TWO_PODS.replace("4187774868", "4187774869"), "checkpoint is corrupted"),
    (GO_TWO_PODS.replace("30m", "31m"), "checkpoint is corrupted"),
    ("not json", "checkpoint is not JSON"),
    ('{"checksum": 1}', "checkpoint has no data"),
])
def test_read_checkpoint_refuses_what_upstream_refuses(text: str, message: str) -> None:
    with pytest.raises(policy.CheckpointError, match=message):
        policy.read_checkpoint(text)


# ------------------------------------------------------------------------- desired versus allocated

BASE = {"c1": res({"cpu": "1", "memory": "1Gi"}, {"cpu": "2", "memory": "2Gi"})}


@pytest.mark.parametrize(("pod", "allocated", "differs"), [
    (make_pod(BASE), alloc(BASE), False),
    (make_pod({"c1": res({"cpu": "1000m", "memory": "1024Mi"}, {"cpu": "2", "memory": "2Gi"})}), alloc(BASE), False),
    (make_pod({"c1": res({"cpu": "1500m", "memory": "1Gi"}, {"cpu": "2", "memory": "2Gi"})}), alloc(BASE), True),
    (make_pod({"c1": res({"cpu": "1", "memory": "1Gi"}, {"cpu": "2", "memory": "3Gi"})}), alloc(BASE), True),
    (make_pod({"c1": res({"cpu": "1", "memory": "1Gi"})}), alloc(BASE), True),
    (make_pod({"c1": res({"cpu": "1", "memory": "1Gi"}, {"cpu": "2", "memory": "2Gi"}), "new": res({"cpu": "9"})}),
     alloc(BASE), False),
    (make_pod(BASE, init={"i1": res({"cpu": "2"})}), alloc({**BASE, "i1": res({"cpu": "1"})}), True),
    (make_pod(BASE, pod_level=res({"cpu": "2"})), alloc(BASE), True),
    (make_pod(BASE), alloc(BASE, res({"cpu": "2"})), True),
    (make_pod(BASE, pod_level=res({"cpu": "2"})), alloc(BASE, res({"cpu": "2000m"})), False),
    (make_pod(BASE, pod_level={}), alloc(BASE), True),
    (make_pod(BASE), None, False),
], ids=["same", "equivalent-quantities", "cpu-request", "memory-limit", "limits-removed", "unknown-container",
        "init-container", "pod-level-added", "pod-level-removed", "pod-level-equivalent", "pod-level-empty-vs-unset",
        "not-admitted"])
def test_resize_pending_differs(pod: Pod, allocated: PodAllocation | None, differs: bool) -> None:
    assert policy.resize_pending_differs(pod, allocated) is differs
    assert (policy.apply_allocation(pod, allocated) is not pod) is differs


def test_apply_allocation_puts_the_allocated_resources_in_spec_and_raw_bodies() -> None:
    claims = [{"name": "gpu"}]
    desired = make_pod({"c1": {**res({"cpu": "2"}, {"cpu": "2"}), "claims": claims}, "c2": res({"cpu": "1"})},
                       init={"i1": res({"memory": "2Gi"})}, pod_level=res({"cpu": "4"}))
    allocated = alloc({"c1": res({"cpu": "1"}, {"cpu": "1"}), "c2": res({"cpu": "1"}), "i1": {}})
    got = policy.apply_allocation(desired, allocated)
    c1, c2 = got.spec.containers
    assert c1.resources == Resources(requests={"cpu": "1"}, limits={"cpu": "1"})
    assert c1.raw["resources"] == {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}, "claims": claims}
    assert c2 is desired.spec.containers[1]
    assert got.spec.init_containers[0].resources == Resources()
    assert "resources" not in got.spec.init_containers[0].raw
    assert "resources" not in got.spec.raw
    assert desired.spec.containers[0].resources.requests == {"cpu": "2"}  # the desired pod is left alone
    assert policy.PodAllocation.from_pod(got) == allocated
    assert not policy.resize_pending_differs(got, allocated)
    level = policy.apply_allocation(desired, alloc({}, res({"cpu": "3"}, {"cpu": "3"})))
    assert level.spec.raw["resources"] == {"limits": {"cpu": "3"}, "requests": {"cpu": "3"}}


# ---------------------------------------------------------------------------------------------- decide

UPSTREAM_POD = {"c1": res({"cpu": "5", "memory": "4500Mi"})}


def holding(name: str, cpu: str, memory: str = "0", **extra: Any) -> Pod:
    return make_pod({"c1": res({"cpu": cpu, "memory": memory})}, name=name, **extra)


DECIDE_CASES: list[tuple[str, Pod, PodAllocation, NodeInfo, list[Pod], dict[str, Any], tuple[str, str, str, str]]] = [
    ("unchanged", make_pod(BASE), alloc(BASE), node(), [], {}, (policy.UNCHANGED, "", "", "")),
    ("fits", make_pod({"c1": res({"cpu": "3", "memory": "1Gi"})}), alloc({"c1": res({"cpu": "1"})}), node(),
     [holding("a", "1")], {}, (policy.ACCEPTED, "", "", "")),
    # allocation_manager_test.go: "Request CPU increase beyond node capacity - expect Deferred"
    ("cpu-beyond", make_pod({"c1": res({"cpu": "5"})}), alloc({"c1": res({"cpu": "1"})}), node(),
     [holding("a", "2")], {},
     (policy.DEFERRED, "Deferred", "Node didn't have enough resource: cpu, requested: 5000, used: 2000, "
      "capacity: 4000", "OutOfcpu")),
    # "Request memory increase beyond node capacity - expect Deferred"
    ("memory-beyond", make_pod({"c1": res({"cpu": "1", "memory": "4500Mi"})}), alloc({"c1": res({"cpu": "1"})}),
     node(), [holding("a", "1", "2Gi")], {},
     (policy.DEFERRED, "Deferred", "Node didn't have enough resource: memory, requested: 4718592000, "
      "used: 2147483648, capacity: 4294967296", "OutOfmemory")),
    ("cpu-checked-before-memory", make_pod(UPSTREAM_POD), alloc({"c1": res({"cpu": "1"})}), node(), [], {},
     (policy.DEFERRED, "Deferred", "Node didn't have enough resource: cpu, requested: 5000, used: 0, "
      "capacity: 4000", "OutOfcpu")),
    ("a-decrease-on-an-overcommitted-node-waits-too", make_pod({"c1": res({"cpu": "2"})}),
     alloc({"c1": res({"cpu": "3"})}), node(), [holding("a", "3")], {},
     (policy.DEFERRED, "Deferred", "Node didn't have enough resource: cpu, requested: 2000, used: 3000, "
      "capacity: 4000", "OutOfcpu")),
    ("own-uid-is-not-another-pod", make_pod({"c1": res({"cpu": "3"})}), alloc({"c1": res({"cpu": "1"})}), node(),
     [holding("p", "1")], {}, (policy.ACCEPTED, "", "", "")),
    ("pod-count", make_pod({"c1": res({"cpu": "2"})}), alloc({"c1": res({"cpu": "1"})}), node(pods="1"),
     [holding("a", "0")], {},
     (policy.DEFERRED, "Deferred", "Node didn't have enough resource: pods, requested: 1, used: 1, "
      "capacity: 1", "OutOfpods")),
    ("pod-level-requests", make_pod({"c1": {}}, pod_level=res({"cpu": "3"})), alloc({"c1": {}}, res({"cpu": "1"})),
     node(), [holding("a", "2")], {},
     (policy.DEFERRED, "Deferred", "Node didn't have enough resource: cpu, requested: 3000, used: 2000, "
      "capacity: 4000", "OutOfcpu")),
    ("sidecar-and-init-aggregate", make_pod({"c1": res({"cpu": "1"})}, init={"s1": res({"cpu": "2"})},
                                            sidecars=("s1",)),
     alloc({"c1": res({"cpu": "1"}), "s1": res({"cpu": "1"})}), node(), [holding("a", "2")], {},
     (policy.DEFERRED, "Deferred", "Node didn't have enough resource: cpu, requested: 3000, used: 2000, "
      "capacity: 4000", "OutOfcpu")),
    ("every-admit-handler-runs-again", make_pod({"c1": res({"cpu": "2"})}), alloc({"c1": res({"cpu": "1"})}),
     NodeInfo(name="node-1", allocatable={"cpu": "4", "memory": "4Gi", "pods": "110"},
              taints=(Taint("dedicated", "x", "NoExecute"),)), [], {},
     (policy.DEFERRED, "Deferred", "Predicate TaintToleration failed: node(s) had taints that the pod didn't "
      "tolerate", "TaintToleration")),
    ("guaranteed-static-cpu-manager",
     make_pod({"c1": res({"cpu": "2", "memory": "1Gi"}, {"cpu": "2", "memory": "1Gi"})}),
     alloc({"c1": res({"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})}), node(), [],
     {"cpu_manager_policy": "static"},
     (policy.INFEASIBLE, "Infeasible", 'Resize is infeasible for Guaranteed Pods alongside CPU Manager policy '
      '"static"', "Infeasible")),
    ("guaranteed-static-memory-manager", make_pod({"c1": res({"cpu": "1", "memory": "2Gi"},
                                                             {"cpu": "1", "memory": "2Gi"})}),
     alloc({"c1": res({"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})}), node(), [],
     {"cpu_manager_policy": "static", "memory_manager_policy": "Static"},
     (policy.INFEASIBLE, "Infeasible", 'Resize is infeasible for Guaranteed Pods alongside Memory Manager '
      'policy "Static"', "Infeasible")),
    ("guaranteed-memory-only-under-static-cpu-manager", make_pod({"c1": res({"cpu": "1", "memory": "2Gi"},
                                                                            {"cpu": "1", "memory": "2Gi"})}),
     alloc({"c1": res({"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})}), node(), [],
     {"cpu_manager_policy": "static"}, (policy.ACCEPTED, "", "", "")),
    ("burstable-under-static-cpu-manager", make_pod({"c1": res({"cpu": "2"})}), alloc({"c1": res({"cpu": "1"})}),
     node(), [], {"cpu_manager_policy": "static", "memory_manager_policy": "Static"},
     (policy.ACCEPTED, "", "", "")),
    # Upstream's AppArmor handler admits a pod past Pending (lifecycle/handlers.go:200-203) and checks a Pending one.
    ("apparmor-not-rechecked-once-running",
     make_pod({"c1": res({"cpu": "2"})}, securityContext={"appArmorProfile": {"type": "RuntimeDefault"}}),
     alloc({"c1": res({"cpu": "1"})}), node(), [], {}, (policy.ACCEPTED, "", "", "")),
    ("apparmor-checked-while-pending",
     make_pod({"c1": res({"cpu": "2"})}, securityContext={"appArmorProfile": {"type": "RuntimeDefault"}}),
     alloc({"c1": res({"cpu": "1"})}), node(), [], {"pending": True},
     (policy.DEFERRED, "Deferred", "Cannot enforce AppArmor: AppArmor is not enabled on the host", "AppArmor")),
]


@pytest.mark.parametrize(("pod", "allocated", "node_info", "others", "options", "expected"),
                         [case[1:] for case in DECIDE_CASES], ids=[case[0] for case in DECIDE_CASES])
def test_decide(pod: Pod, allocated: PodAllocation, node_info: NodeInfo, others: list[Pod], options: dict[str, Any],
                expected: tuple[str, str, str, str]) -> None:
    decision = policy.decide(pod, allocated, node_info, others, **options)
    assert (decision.outcome, decision.reason, decision.message, decision.admit_reason) == expected
    if decision.outcome == policy.ACCEPTED:
        assert decision.allocation == PodAllocation.from_pod(pod)
    else:
        assert decision.allocation is allocated
    assert decision.pending is (decision.outcome in (policy.DEFERRED, policy.INFEASIBLE))


def test_events_of_decisions_are_upstreams() -> None:
    # allocation_manager_test.go TestRetryPendingResizesMultipleConditions: its ResizeStarted/ResizeDeferred events
    started = make_pod({"c1": res({"cpu": "1", "memory": "1Gi"})})
    decision = policy.decide(started, alloc({"c1": res({"cpu": "500m", "memory": "500Mi"})}), node(), [])
    assert decision.event(started, 1) == ResizeEvent(
        "Normal", "ResizeStarted",
        'Pod resize started: {"containers":[{"name":"c1","resources":{"requests":{"cpu":"1","memory":"1Gi"}}}],'
        '"generation":1}')
    deferred = make_pod(UPSTREAM_POD)
    decision = policy.decide(deferred, alloc({"c1": res({"cpu": "1", "memory": "1Gi"})}), node(), [])
    assert decision.event(deferred, 2) == ResizeEvent(
        "Warning", "ResizeDeferred",
        'Pod resize OutOfcpu: {"containers":[{"name":"c1","resources":{"requests":{"cpu":"5","memory":"4500Mi"}}}],'
        '"generation":2,"error":"Node didn\'t have enough resource: cpu, requested: 5000, used: 0, capacity: 4000"}')
    guaranteed = make_pod({"c1": res({"cpu": "2", "memory": "1Gi"}, {"cpu": "2", "memory": "1Gi"})})
    decision = policy.decide(guaranteed, alloc({"c1": res({"cpu": "1", "memory": "1Gi"},
                                                          {"cpu": "1", "memory": "1Gi"})}), node(), [],
                             cpu_manager_policy="static")
    event = decision.event(guaranteed, 3)
    assert event is not None and (event.type, event.reason) == ("Warning", "ResizeInfeasible")
    assert event.message.startswith('Pod resize Infeasible: {"containers":')
    assert policy.decide(started, PodAllocation.from_pod(started), node(), []).event(started, 1) is None


def test_resource_summary_and_messages_are_gos_json() -> None:
    pod = make_pod({"c1": res({"cpu": "1500m", "memory": "10Ki"}, {"memory": "10Ki"})}, init={"init": {}})
    error = 'cannot decrease memory limits: attempting to set container "c1" memory limit (10240) below current ' \
            'usage (3 < 4 & 5)'
    assert policy.resize_event_message("Pod resize error", pod, 3, error) == (
        'Pod resize error: {"initContainers":[{"name":"init","resources":{}}],"containers":[{"name":"c1",'
        '"resources":{"limits":{"memory":"10Ki"},"requests":{"cpu":"1500m","memory":"10Ki"}}}],"generation":3,'
        '"error":"cannot decrease memory limits: attempting to set container \\"c1\\" memory limit (10240) below '
        'current usage (3 \\u003c 4 \\u0026 5)"}')
    assert policy.resource_summary(make_pod(), 0) == '{"containers":[{"name":"c1","resources":{}}],"generation":0}'


# ------------------------------------------------------------------------------ what other pods hold

INFEASIBLE = {"type": "PodResizePending", "status": "True", "reason": "Infeasible", "message": "x"}


def cstatus(name: str = "c1", allocated: dict[str, str] | None = None,
            actual: dict[str, str] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"name": name}
    if allocated is not None:
        status["allocatedResources"] = allocated
    if actual is not None:
        status["resources"] = {"requests": actual}
    return status


HELD_CASES: list[tuple[str, Pod, dict[str, Any] | None, dict[str, Fraction]]] = [
    ("no-status", holding("a", "1", "1Gi"), None, {"cpu": Fraction(1), "memory": Fraction(GI)}),
    ("status-allocated-larger", holding("a", "1", "1Gi"),
     {"containerStatuses": [cstatus(allocated={"cpu": "2", "memory": "1Gi"}, actual={"cpu": "1", "memory": "1Gi"})]},
     {"cpu": Fraction(2), "memory": Fraction(GI)}),
    ("status-running-larger", holding("a", "1", "1Gi"),
     {"containerStatuses": [cstatus(allocated={"cpu": "1", "memory": "1Gi"}, actual={"cpu": "3", "memory": "2Gi"})]},
     {"cpu": Fraction(3), "memory": Fraction(2 * GI)}),
    ("spec-larger", holding("a", "2", "1Gi"),
     {"containerStatuses": [cstatus(allocated={"cpu": "1", "memory": "1Gi"}, actual={"cpu": "1", "memory": "1Gi"})]},
     {"cpu": Fraction(2), "memory": Fraction(GI)}),
    ("infeasible-ignores-spec", holding("a", "2", "1Gi"),
     {"conditions": [INFEASIBLE],
      "containerStatuses": [cstatus(allocated={"cpu": "1", "memory": "1Gi"}, actual={"cpu": "1", "memory": "512Mi"})]},
     {"cpu": Fraction(1), "memory": Fraction(GI)}),
    ("infeasible-without-statuses-holds-nothing", holding("a", "2", "1Gi"), {"conditions": [INFEASIBLE]}, {}),
    ("container-resources-without-requests-fall-back-to-allocated", holding("a", "1"),
     {"containerStatuses": [{"name": "c1", "allocatedResources": {"cpu": "2"}, "resources": {}}]},
     {"cpu": Fraction(2), "memory": Fraction(0)}),
    ("pod-level-status-maps-win", make_pod({"c1": res({"cpu": "1"}), "c2": res({"cpu": "1"})}, name="a"),
     {"allocatedResources": {"cpu": "3"}, "resources": {"requests": {"cpu": "2500m"}},
      "containerStatuses": [cstatus("c1", {"cpu": "9"}), cstatus("c2", {"cpu": "9"})]},
     {"cpu": Fraction(3)}),
    ("pod-level-spec-requests", make_pod({"c1": res({"cpu": "1"})}, name="a", pod_level=res({"cpu": "2"})),
     None, {"cpu": Fraction(2)}),
    ("pod-level-spec-and-status", make_pod({"c1": res({"cpu": "1"})}, name="a", pod_level=res({"cpu": "2"})),
     {"allocatedResources": {"cpu": "2"}, "resources": {"requests": {"cpu": "3"}}}, {"cpu": Fraction(3)}),
    ("overhead-added", make_pod({"c1": res({"cpu": "1"})}, name="a", overhead={"cpu": "250m"}),
     None, {"cpu": Fraction(5, 4)}),
    ("sidecars-sum-init-containers-peak", make_pod({"c1": res({"cpu": "1"})}, name="a",
                                                   init={"s1": res({"cpu": "1"}), "i2": res({"cpu": "3"})},
                                                   sidecars=("s1",)),
     {"initContainerStatuses": [cstatus("s1", {"cpu": "2"})]}, {"cpu": Fraction(5)}),
]


@pytest.mark.parametrize(("pod", "status", "expected"), [case[1:] for case in HELD_CASES],
                         ids=[case[0] for case in HELD_CASES])
def test_held_requests(pod: Pod, status: dict[str, Any] | None, expected: dict[str, Fraction]) -> None:
    held = policy.held_requests(pod, status)
    assert {k: v for k, v in held.items() if v or k in expected} == expected
    counted = admission.pod_requests(policy.held_pod(pod, status))
    for name in ("cpu", "memory"):
        assert counted.get(name, Fraction(0)) == held.get(name, Fraction(0))


def test_decide_counts_what_other_pods_hold_by_their_status() -> None:
    shrinking = holding("a", "1")  # allocated down to 1 cpu, still running with 3
    status = {"containerStatuses": [cstatus(allocated={"cpu": "1"}, actual={"cpu": "3"})]}
    pod = make_pod({"c1": res({"cpu": "2"})})
    before = policy.decide(pod, alloc({"c1": res({"cpu": "1"})}), node(),
                           [policy.held_pod(shrinking, status)])
    assert (before.outcome, before.message) == (
        policy.DEFERRED, "Node didn't have enough resource: cpu, requested: 2000, used: 3000, capacity: 4000")
    actuated = {"containerStatuses": [cstatus(allocated={"cpu": "1"}, actual={"cpu": "1"})]}
    after = policy.decide(pod, alloc({"c1": res({"cpu": "1"})}), node(), [policy.held_pod(shrinking, actuated)])
    assert after.outcome == policy.ACCEPTED


# ---------------------------------------------------------------------------------- pending resizes


@pytest.mark.parametrize(("pod", "allocated", "increasing"), [
    (make_pod({"c1": res({"cpu": "2"})}), alloc({"c1": res({"cpu": "1"})}), True),
    (make_pod({"c1": res({"cpu": "1", "memory": "2Gi"})}), alloc({"c1": res({"cpu": "2", "memory": "1Gi"})}), True),
    (make_pod({"c1": res({"cpu": "1"})}), alloc({"c1": res({"cpu": "2"})}), False),
    (make_pod({"c1": res({"cpu": "1"}, {"cpu": "4"})}), alloc({"c1": res({"cpu": "1"}, {"cpu": "2"})}), False),
    (make_pod({"c1": res({"cpu": "1"})}, pod_level=res({"cpu": "3"})), alloc({"c1": res({"cpu": "1"})},
                                                                            res({"cpu": "2"})), True),
    (make_pod({"c1": res({"cpu": "2"})}), alloc({"c1": res({"cpu": "2"})}), False),
], ids=["cpu-up", "memory-up-cpu-down", "down", "limits-only", "pod-level-up", "unchanged"])
def test_increases_requests(pod: Pod, allocated: PodAllocation, increasing: bool) -> None:
    assert policy.increases_requests(pod, allocated) is increasing


def test_order_pending_follows_upstreams_priorities() -> None:
    entries = [
        PendingResize("late-burstable", True, 0, False, "2026-01-01T00:00:09Z"),
        PendingResize("never-pending", True, 0, False, None),
        PendingResize("early-burstable", True, 0, False, "2026-01-01T00:00:01Z"),
        PendingResize("guaranteed", True, 0, True, "2026-01-01T00:00:05Z"),
        PendingResize("high-priority", True, 1000, False, "2026-01-01T00:00:08Z"),
        PendingResize("shrinking", False, -5, False, None),
    ]
    assert [e.uid for e in policy.order_pending(entries)] == [
        "shrinking", "high-priority", "guaranteed", "early-burstable", "late-burstable", "never-pending"]


# ---------------------------------------------------------------------------------------- conditions

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z"


def test_pending_condition_new_then_refreshed_then_reason_change() -> None:
    first, due = policy.pending_condition(None, "OutOfcpu", "no cpu", 2, T0)
    assert due
    assert first == {"type": "PodResizePending", "status": "True", "observedGeneration": 2, "lastProbeTime": T0,
                     "lastTransitionTime": T0, "reason": "Deferred", "message": "no cpu"}
    again, due = policy.pending_condition(first, "OutOfmemory", "no memory", 2, T1)
    assert not due  # same reason and generation: the message changes silently
    assert (again["lastTransitionTime"], again["lastProbeTime"], again["message"]) == (T0, T1, "no memory")
    newer, due = policy.pending_condition(again, "OutOfmemory", "no memory", 3, T1)
    assert due and newer["observedGeneration"] == 3 and newer["lastTransitionTime"] == T0
    infeasible, due = policy.pending_condition(newer, "Infeasible", "never", 3, T1)
    assert due and (infeasible["reason"], infeasible["lastTransitionTime"]) == ("Infeasible", T1)


def test_in_progress_condition_keeps_its_generation_and_reason() -> None:
    started, changed = policy.in_progress_condition(None, "", "", 5, T0)
    assert changed
    assert started == {"type": "PodResizeInProgress", "status": "True", "observedGeneration": 5,
                       "lastProbeTime": T0, "lastTransitionTime": T0}
    same, changed = policy.in_progress_condition(started, "", "", 7, T1)
    assert not changed and same["observedGeneration"] == 5 and same["lastTransitionTime"] == T0
    error, changed = policy.in_progress_condition(same, "Error", "cannot decrease memory limits: x", 7, T1)
    assert changed
    assert (error["observedGeneration"], error["reason"], error["lastTransitionTime"]) == (5, "Error", T1)
    still, changed = policy.in_progress_condition(error, "", "", 8, T1)
    assert not changed and (still["reason"], still["message"]) == ("Error", "cannot decrease memory limits: x")
    repeat, changed = policy.in_progress_condition(still, "Error", "cannot decrease memory limits: x", 8, T1)
    assert not changed and repeat == still


def test_node_capacity_helpers_agree_with_admission() -> None:
    # The Deferred message's integers are admission's: milliCPU and bytes, rounded up.
    pod = make_pod({"c1": res({"cpu": "1500m", "memory": "1.5Mi"})})
    decision = policy.decide(pod, alloc({"c1": res({"cpu": "1"})}), node(cpu="1"), [])
    assert decision.message == "Node didn't have enough resource: cpu, requested: 1500, used: 0, capacity: 1000"
    assert admission.pod_requests(pod)["memory"] == Fraction(3 * MI, 2)
