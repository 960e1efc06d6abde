"""kopflet.status.generate.status_patch: minimal strategic-merge patches of pods/status."""

from __future__ import annotations

from typing import Any

import pytest

from kopflet.status import generate
from kopflet.status.generate import status_patch

READY = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
FOREIGN = {"type": "example.com/Gate", "status": "True"}
RUNNING = [{"name": "c", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}, "ready": True}]
BASE: dict[str, Any] = {"phase": "Running", "conditions": [READY, FOREIGN], "podIP": "10.88.0.5",
                        "podIPs": [{"ip": "10.88.0.5"}], "containerStatuses": RUNNING, "qosClass": "BestEffort"}


@pytest.mark.parametrize(("current", "desired", "expected"), [
    pytest.param(BASE, BASE, {}, id="nothing changed: nothing written"),
    pytest.param(BASE, {**BASE, "conditions": [READY]}, {}, id="a foreign condition is never removed"),
    pytest.param(BASE, {**BASE, "phase": "Succeeded"}, {"status": {"phase": "Succeeded"}}, id="scalar"),
    pytest.param(BASE, {**BASE, "conditions": [{**READY, "status": "False"}]},
                 {"status": {"conditions": [{**READY, "status": "False"}]}}, id="changed condition only"),
    pytest.param(BASE, {**BASE, "containerStatuses": [{**RUNNING[0], "ready": False}]},
                 {"status": {"containerStatuses": [{**RUNNING[0], "ready": False}]}},
                 id="container statuses are atomic: sent whole"),
    pytest.param({**BASE, "message": "old"}, BASE, {"status": {"message": None}}, id="a dropped owned field is nulled"),
    pytest.param({**BASE, "conditions": [{**READY, "status": "False", "reason": "ContainersNotReady", "message": "m"},
                                         FOREIGN]}, BASE,
                 {"status": {"conditions": [{**READY, "reason": None, "message": None}]}},
                 id="a field a merged condition dropped is nulled"),
    pytest.param({**BASE, "nominatedNodeName": "x"}, BASE, {}, id="fields the kubelet does not own are left"),
    pytest.param(BASE, {**BASE, "podIP": "10.88.0.9", "podIPs": [{"ip": "10.88.0.9"}]},
                 {"status": {"podIP": "10.88.0.9",
                             "podIPs": [{"ip": "10.88.0.9"}, {"ip": "10.88.0.5", "$patch": "delete"}]}},
                 id="a pod IP gone is deleted from the list"),
    pytest.param({}, {"phase": "Pending", "qosClass": "BestEffort"},
                 {"status": {"phase": "Pending", "qosClass": "BestEffort"}}, id="first status"),
])
def test_status_patch(current: dict[str, Any], desired: dict[str, Any], expected: dict[str, Any]) -> None:
    assert status_patch(current, desired) == expected


APPLY_CASES = [
    pytest.param({"phase": "Pending"}, {"status": {"phase": "Running"}}, {"phase": "Running"}, id="replace"),
    pytest.param({"phase": "Running", "podIP": "10.0.0.5"}, {"status": {"podIP": None}}, {"phase": "Running"},
                 id="null-removes"),
    pytest.param({"conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}]},
                 {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
                 {"conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]},
                 id="conditions-merge-by-type"),
    pytest.param({"conditions": [{"type": "PodResizePending", "status": "True"}, {"type": "Ready", "status": "True"}]},
                 {"status": {"conditions": [{"type": "PodResizePending", "$patch": "delete"}]}},
                 {"conditions": [{"type": "Ready", "status": "True"}]}, id="delete-directive"),
    pytest.param({}, {}, {}, id="empty"),
]


def test_a_new_pod_ip_replaces_the_old_one() -> None:
    """A sandbox made again with a new IP: the API ends with the new IP alone (merged in beside the old one, podIPs[0]
    would differ from podIP and the apiserver would refuse this and every later patch)."""
    moved = {**BASE, "podIP": "10.88.0.9", "podIPs": [{"ip": "10.88.0.9"}]}
    held = generate.apply_status_patch(BASE, status_patch(BASE, moved))
    assert held["podIPs"] == [{"ip": "10.88.0.9"}] and held["podIP"] == "10.88.0.9"
    assert status_patch(held, moved) == {}


def test_a_condition_that_lost_its_reason_is_written_once() -> None:
    """Ready turned True (no reason, no message) over a Ready False with both: the API's condition loses them, and
    the next sync, against what the API then holds, writes nothing (a steady pod was patched every resync)."""
    pending = {**BASE, "conditions": [{**READY, "status": "False", "reason": "ContainersNotReady",
                                       "message": "containers with unready status: [c]"}, FOREIGN]}
    patch = status_patch(pending, BASE)
    held = generate.apply_status_patch(pending, patch)
    assert held["conditions"] == [READY, FOREIGN]
    assert status_patch(held, BASE) == {}


@pytest.mark.parametrize(("previous", "patch", "expected"), APPLY_CASES)
def test_apply_status_patch_is_what_the_apiserver_would_hold(previous: dict[str, Any], patch: dict[str, Any],
                                                            expected: dict[str, Any]) -> None:
    assert generate.apply_status_patch(previous, patch) == expected


@pytest.mark.parametrize("previous,new", [
    ({"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}], "podIP": "1.2.3.4"},
     {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}], "hostIP": "5.6.7.8"}),
    ({}, {"phase": "Running", "podIPs": [{"ip": "10.0.0.1"}]}),
])
def test_applying_the_patch_gives_the_new_status(previous: dict[str, Any], new: dict[str, Any]) -> None:
    assert generate.apply_status_patch(previous, generate.status_patch(previous, new)) == new
