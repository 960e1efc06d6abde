"""Per-pod lines at upstream's verbosity, never at the default one: each watch event (handlers/pods.py) as upstream's
sync loop logs it ("SyncLoop ADD", "UPDATE", "DELETE", "REMOVE", source api) at V(2), and each sync's decision
(pods/workers.py: the reconciler's reason, "No sandbox for pod can be found. Need to start a new one") at V(2), as
upstream's kuberuntime logs it; a pod refused stays a warning."""

from __future__ import annotations

import logging
from typing import Any

import kopf
import pytest

from handlers import pods
from kopflet.api.spec import pod_from_body
from kopflet.logs.verbosity import v
from kopflet.pods.decide import Lifecycle, Memory, Plan
from kopflet.pods.workers import PodWorkers

BODY: dict[str, Any] = {"metadata": {"name": "web", "namespace": "default", "uid": "u1"}}
DELETING: dict[str, Any] = {"metadata": {**BODY["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}


@pytest.mark.parametrize(("event_type", "body", "operation"), [
    (None, BODY, "ADD"),  # the initial listing
    ("ADDED", BODY, "ADD"),
    ("MODIFIED", BODY, "UPDATE"),
    ("MODIFIED", DELETING, "DELETE"),  # a graceful deletion
    ("DELETED", DELETING, "REMOVE"),  # gone from the apiserver
])
def test_sync_loop_operation(event_type: str | None, body: dict[str, Any], operation: str) -> None:
    assert pods.sync_loop_operation(event_type, kopf.Body(body)) == operation


class _Node:
    def __init__(self) -> None:
        self.events: list[tuple[str | None, dict[str, Any]]] = []

    def pod_event(self, kind: str | None, body: dict[str, Any]) -> None:
        self.events.append((kind, body))


async def test_an_event_is_logged_at_v2_and_handed_to_the_node(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="test.pods")
    node = _Node()
    await pods.pod_event(type="MODIFIED", body=kopf.Body(BODY), name="web", namespace="default",
                         memo=kopf.Memo(node=node), logger=logging.getLogger("test.pods"))
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (v(2), "SyncLoop UPDATE (source api): pod default/web")]
    assert node.events == [("MODIFIED", BODY)]


@pytest.mark.parametrize(("lifecycle", "level"), [
    (Lifecycle.SYNCING, v(2)),
    (Lifecycle.INVALID, logging.WARNING),
    (Lifecycle.REJECTED, logging.WARNING),
])
async def test_a_syncs_decision_is_logged_at_v2(lifecycle: Lifecycle, level: int,
                                                caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(v(2), logger="kopflet.pods.workers")
    workers = PodWorkers.__new__(PodWorkers)  # _act needs nothing else for a plan with only a log line
    plan = Plan(lifecycle=lifecycle, pod=pod_from_body({**BODY, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
                memory=Memory(),
                log="No sandbox for pod can be found. Need to start a new one")
    await workers._act(None, None, plan)  # type: ignore[arg-type]
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (level, "pod default/web: No sandbox for pod can be found. Need to start a new one")]
