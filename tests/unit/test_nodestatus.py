"""kopflet.nodestatus.setters: node labels, capacity/allocatable, conditions, readiness, images."""

from __future__ import annotations

import datetime

import pytest

from cri_client import types as cri
from kopflet.nodestatus import setters
from kopflet.nodestatus.setters import Condition, MachineFacts

FACTS = MachineFacts(cpus=2, memory_bytes=24 * 1024**3, ephemeral_storage_bytes=100 * 1024**3, machine="x86_64")
NOW = datetime.datetime(2026, 11, 22, 1, 0, 0, tzinfo=datetime.UTC)
READY = Condition("True", "KubeletReady", "kubelet is posting ready status")


def test_labels_are_the_well_known_ones_plus_node_labels() -> None:
    assert setters.node_labels("n1", FACTS, {"team": "edge"}) == {
        "kubernetes.io/hostname": "n1", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64", "team": "edge"}


def test_capacity_from_the_machine() -> None:
    assert setters.capacity(FACTS, 110) == {"cpu": "2", "memory": "25165824Ki",
                                            "ephemeral-storage": "104857600Ki", "pods": "110"}


@pytest.mark.parametrize(("system", "kube", "expected"), [
    pytest.param({}, {}, {"cpu": "2", "memory": f"{25165824 - 102400}Ki",
                          "ephemeral-storage": f"{104857600 - 10485760}Ki", "pods": "110"},
                 id="hard eviction thresholds only (100Mi memory, 10% nodefs)"),
    pytest.param({"cpu": "500m", "memory": "1Gi"}, {"cpu": "100m"},
                 {"cpu": "1400m", "memory": f"{25165824 - 102400 - 1048576}Ki",
                  "ephemeral-storage": f"{104857600 - 10485760}Ki", "pods": "110"}, id="reservations"),
])
def test_allocatable(system: dict[str, str], kube: dict[str, str], expected: dict[str, str]) -> None:
    cap = setters.capacity(FACTS, 110)
    assert setters.allocatable(cap, system_reserved=system, kube_reserved=kube) == expected


def test_conditions_keep_transition_time_while_status_holds() -> None:
    first = setters.conditions(READY, [], NOW)
    assert [c["type"] for c in first] == ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
    later = NOW + datetime.timedelta(seconds=10)
    again = setters.conditions(READY, first, later)
    ready = next(c for c in again if c["type"] == "Ready")
    assert ready["lastTransitionTime"] == "2026-11-22T01:00:00Z"
    assert ready["lastHeartbeatTime"] == "2026-11-22T01:00:10Z"
    down = setters.conditions(Condition("False", "KubeletNotReady", "x"), again, later)
    assert next(c for c in down if c["type"] == "Ready")["lastTransitionTime"] == "2026-11-22T01:00:10Z"


@pytest.mark.parametrize(("runtime", "error", "expected"), [
    pytest.param(cri.RuntimeStatus(conditions=(cri.RuntimeCondition(type="RuntimeReady", status=True),
                                               cri.RuntimeCondition(type="NetworkReady", status=True))),
                 "", READY, id="ready"),
    pytest.param(None, "connection refused", Condition("False", "KubeletNotReady",
                                                      "container runtime is down: connection refused"), id="down"),
    pytest.param(cri.RuntimeStatus(conditions=(
        cri.RuntimeCondition(type="RuntimeReady", status=True),
        cri.RuntimeCondition(type="NetworkReady", status=False, reason="NetworkPluginNotReady",
                             message="cni plugin not initialized"))), "",
        Condition("False", "KubeletNotReady", "container runtime network not ready: NetworkReady=false "
                  "reason:NetworkPluginNotReady message:cni plugin not initialized"), id="network not ready"),
])
def test_ready_condition(runtime: cri.RuntimeStatus | None, error: str, expected: Condition) -> None:
    assert setters.ready_condition(runtime, error) == expected


def test_images_biggest_first_with_digests_and_tags() -> None:
    small = cri.Image(id="sha256:a", repo_tags=("x:1",), repo_digests=("x@sha256:1",), size=10)
    big = cri.Image(id="sha256:b", repo_tags=("y:1",), size=99)
    assert setters.images([small, big], limit=1) == [{"names": ["y:1"], "sizeBytes": 99}]
    assert setters.images([small]) == [{"names": ["x@sha256:1", "x:1"], "sizeBytes": 10}]


def test_changes_ignore_heartbeats() -> None:
    a = {"conditions": setters.conditions(READY, [], NOW)}
    b = {"conditions": setters.conditions(READY, a["conditions"], NOW + datetime.timedelta(seconds=10))}
    assert setters.without_heartbeats(a) == setters.without_heartbeats(b)


def _conds(**statuses: str) -> list[dict[str, str]]:
    return [{"type": kind, "status": status} for kind, status in statuses.items()]


@pytest.mark.parametrize(("previous", "current", "expected"), [
    pytest.param([], _conds(MemoryPressure="False", DiskPressure="False", PIDPressure="False", Ready="True"),
                 ["NodeHasSufficientMemory", "NodeHasNoDiskPressure", "NodeHasSufficientPID", "NodeReady"],
                 id="a new node announces every condition"),
    pytest.param(_conds(MemoryPressure="False", Ready="True"), _conds(MemoryPressure="False", Ready="True"), [],
                 id="nothing moved: nothing said (an agent restart)"),
    pytest.param(_conds(MemoryPressure="False", Ready="True"), _conds(MemoryPressure="True", Ready="False"),
                 ["NodeHasInsufficientMemory", "NodeNotReady"], id="flips"),
    pytest.param(_conds(DiskPressure="True", PIDPressure="True"), _conds(DiskPressure="False", PIDPressure="False"),
                 ["NodeHasNoDiskPressure", "NodeHasSufficientPID"], id="pressure gone"),
])
def test_condition_events_as_upstream_record_node_status_event(previous: list[dict[str, str]],
                                                               current: list[dict[str, str]],
                                                               expected: list[str]) -> None:
    events = setters.condition_events("n1", previous, current)
    assert [reason for reason, _ in events] == expected
    assert all(message == f"Node n1 status is now: {reason}" for reason, message in events)


def test_rebooted_only_when_the_node_reported_another_boot() -> None:
    assert setters.rebooted_message("n1", "aaa", "bbb") == "Node n1 has been rebooted, boot id: bbb"
    assert setters.rebooted_message("n1", "", "bbb") is None
    assert setters.rebooted_message("n1", "bbb", "bbb") is None
