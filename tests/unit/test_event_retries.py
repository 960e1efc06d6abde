"""Events written while the apiserver cannot be reached are tried again (client-go recordToSink: 12 tries, 10 s
apart, the first wait randomized); an apiserver's refusal is not."""

from __future__ import annotations

from typing import Any

import pytest

from kopflet.client import events
from kopflet.client.events import EventRecorder
from kopflet.client.kubeapi import KubeApiError


class Api:
    def __init__(self, failures: list[BaseException]) -> None:
        self.failures, self.created = list(failures), []

    async def create_event(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.failures:
            raise self.failures.pop(0)
        self.created.append(body)
        return body


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    out: list[float] = []

    async def sleep(delay: float) -> None:
        out.append(delay)

    monkeypatch.setattr(events.asyncio, "sleep", sleep)
    monkeypatch.setattr(events.random, "random", lambda: 0.5)
    return out


async def test_an_unreachable_apiserver_is_tried_again_until_it_answers(sleeps: list[float]) -> None:
    api = Api([ConnectionRefusedError(111, "refused"), TimeoutError()])
    recorder = EventRecorder(api, "node-1")  # type: ignore[arg-type]
    recorder.node_event("Normal", "Starting", "Starting kubelet.")
    await recorder.flush()
    assert [e["reason"] for e in api.created] == ["Starting"]
    assert sleeps == [5.0, 10.0]


async def test_retries_end_at_the_limit(sleeps: list[float]) -> None:
    api = Api([ConnectionRefusedError(111, "refused")] * events.MAX_TRIES)
    recorder = EventRecorder(api, "node-1")  # type: ignore[arg-type]
    recorder.node_event("Normal", "Starting", "Starting kubelet.")
    await recorder.flush()
    assert api.created == [] and len(sleeps) == events.MAX_TRIES - 1


async def test_a_refusal_is_not_retried(sleeps: list[float]) -> None:
    api = Api([KubeApiError(404, "NotFound", 'namespaces "kube-system" not found', "POST", "/api/v1/...")])
    recorder = EventRecorder(api, "node-1")  # type: ignore[arg-type]
    recorder.node_event("Normal", "Starting", "Starting kubelet.")
    await recorder.flush()
    assert api.created == [] and sleeps == []
