"""kopflet.status.generate.status_patch: minimal strategic-merge patches of pods/status."""

from __future__ import annotations

from typing import Any

import pytest

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
    pytest.param({**BASE, "nominatedNodeName": "x"}, BASE, {}, id="fields the kubelet does not own are left"),
    pytest.param({}, {"phase": "Pending", "qosClass": "BestEffort"},
                 {"status": {"phase": "Pending", "qosClass": "BestEffort"}}, id="first status"),
])
def test_status_patch(current: dict[str, Any], desired: dict[str, Any], expected: dict[str, Any]) -> None:
    assert status_patch(current, desired) == expected
