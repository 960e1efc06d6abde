"""kopflet.status.manager: the one status writer sends the smallest patch, nothing when nothing changed, and the
final delete with grace 0 and the pod's UID as a precondition."""

from __future__ import annotations

from typing import Any

import pytest

from kopflet.logs.verbosity import v
from kopflet.status import generate
from kopflet.status.manager import StatusManager


class FakeApi:
    def __init__(self, uid: str = "u1") -> None:
        self.uid = uid
        self.calls: list[tuple[Any, ...]] = []

    async def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("patch", namespace, name, patch))
        return {"metadata": {"uid": self.uid}, "status": {"phase": "Failed", **patch["status"]}}

    async def delete_pod(self, namespace: str, name: str, uid: str) -> bool:
        self.calls.append(("delete", namespace, name, uid))
        return True


PREVIOUS = {"phase": "Pending", "qosClass": "BestEffort",
            "conditions": [{"type": "PodScheduled", "status": "True"}]}


async def test_a_rejection_sends_exactly_phase_reason_and_message() -> None:
    api = FakeApi()
    written = await StatusManager(api).write(  # type: ignore[arg-type]
        "ns", "p", "u1", PREVIOUS, generate.rejected_status(PREVIOUS, "OutOfcpu", "Pod was rejected: no cpu"))
    assert api.calls == [("patch", "ns", "p", {"status": {
        "phase": "Failed", "reason": "OutOfcpu", "message": "Pod was rejected: no cpu"}})]
    assert written is not None and written["reason"] == "OutOfcpu"


async def test_nothing_is_sent_when_nothing_changed() -> None:
    api = FakeApi()
    assert await StatusManager(api).write("ns", "p", "u1", PREVIOUS, dict(PREVIOUS)) is None  # type: ignore[arg-type]
    assert api.calls == []


async def test_the_status_of_another_pod_under_the_name_is_not_taken() -> None:
    api = FakeApi(uid="someone-else")
    desired = {**PREVIOUS, "phase": "Running"}
    assert await StatusManager(api).write("ns", "p", "u1", PREVIOUS, desired) is None  # type: ignore[arg-type]
    assert len(api.calls) == 1


async def test_the_final_delete_names_the_uid() -> None:
    api = FakeApi()
    assert await StatusManager(api).delete("ns", "p", "u1")  # type: ignore[arg-type]
    assert api.calls == [("delete", "ns", "p", "u1")]


class DownApi(FakeApi):
    """An apiserver that refuses connections until `up` is set (a kubeadm control plane not started yet)."""

    def __init__(self) -> None:
        super().__init__()
        self.up = False

    async def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        if not self.up:
            self.calls.append(("refused", namespace, name, patch))
            raise ConnectionRefusedError(111, "Connect call failed")
        return await super().patch_pod_status(namespace, name, patch)


async def test_a_status_the_apiserver_cannot_take_is_answered_from_the_cache_and_sent_later() -> None:
    api = DownApi()
    manager = StatusManager(api)  # type: ignore[arg-type]
    running = {**PREVIOUS, "phase": "Running", "podIP": "10.0.0.5"}
    written = await manager.write("ns", "p", "u1", PREVIOUS, running)
    assert written == running  # the sync goes on with what the API will hold
    assert manager.unsent("u1")
    # a later sync diffs against what the API last held, not against the cache
    ready = {**running, "conditions": [*running["conditions"], {"type": "Ready", "status": "True"}]}
    assert await manager.write("ns", "p", "u1", running, ready) == ready
    api.up = True
    await manager._send("u1")
    assert not manager.unsent("u1")
    assert api.calls[-1] == ("patch", "ns", "p", {"status": {
        "phase": "Running", "podIP": "10.0.0.5", "conditions": [{"type": "Ready", "status": "True"}]}})


async def test_an_unchanged_status_still_sends_what_is_unsent() -> None:
    api = DownApi()
    manager = StatusManager(api)  # type: ignore[arg-type]
    running = {**PREVIOUS, "phase": "Running"}
    await manager.write("ns", "p", "u1", PREVIOUS, running)
    api.up = True
    assert await manager.write("ns", "p", "u1", running, running) == {"phase": "Running"}  # what the API answered
    assert not manager.unsent("u1")
    assert api.calls[-1] == ("patch", "ns", "p", {"status": {"phase": "Running"}})


async def test_a_forgotten_pod_is_not_sent_again() -> None:
    api = DownApi()
    manager = StatusManager(api)  # type: ignore[arg-type]
    await manager.write("ns", "p", "u1", PREVIOUS, {**PREVIOUS, "phase": "Running"})
    manager.forget("u1")
    api.up = True
    assert await manager._send("u1") == (True, None)
    assert [c[0] for c in api.calls] == ["refused"]


async def test_a_written_status_and_the_final_delete_are_logged_at_v3(caplog: pytest.LogCaptureFixture) -> None:
    """Upstream's status manager: "Patch status for pod" (with the patch) and "Pod fully terminated and removed
    from etcd" at V(3): per pod, so not at the default verbosity."""
    caplog.set_level(v(3), logger="kopflet.status.manager")
    manager = StatusManager(FakeApi())  # type: ignore[arg-type]
    await manager.write("ns", "p", "u1", PREVIOUS, {**PREVIOUS, "phase": "Running"})
    await manager.delete("ns", "p", "u1")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (v(3), 'pod ns/p: status patched: {"status":{"phase":"Running"}}'),
        (v(3), "pod ns/p: fully terminated and removed from the apiserver")]
