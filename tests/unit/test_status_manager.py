"""kopflet.status.manager: the one status writer sends the smallest patch, nothing when nothing changed, and the
final delete with grace 0 and the pod's UID as a precondition."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kopflet.logs.verbosity import v
from kopflet.status import generate
from kopflet.status import manager as status_manager
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
    assert api.calls == [("patch", "ns", "p", {"metadata": {"uid": "u1"}, "status": {
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
    assert api.calls[-1] == ("patch", "ns", "p", {"metadata": {"uid": "u1"}, "status": {
        "phase": "Running", "podIP": "10.0.0.5", "conditions": [{"type": "Ready", "status": "True"}]}})


async def test_while_a_status_is_unsent_writes_only_update_it_and_the_retry_sends_the_latest() -> None:
    api = DownApi()
    manager = StatusManager(api)  # type: ignore[arg-type]
    running = {**PREVIOUS, "phase": "Running"}
    await manager.write("ns", "p", "u1", PREVIOUS, running)
    api.up = True
    succeeded = {**PREVIOUS, "phase": "Succeeded"}
    assert await manager.write("ns", "p", "u1", running, succeeded) == succeeded  # no request: the sync goes on
    assert [c[0] for c in api.calls] == ["refused"]
    await manager._send("u1")  # run's next round
    assert not manager.unsent("u1")
    assert api.calls[-1] == ("patch", "ns", "p", {"metadata": {"uid": "u1"}, "status": {"phase": "Succeeded"}})


def test_a_body_from_the_watch_shows_the_unsent_status_and_becomes_the_base() -> None:
    manager = StatusManager(DownApi())  # type: ignore[arg-type]
    assert manager.observed("u1", PREVIOUS) is None
    manager._unsent["u1"] = status_manager._Unsent("ns", "p", PREVIOUS, {**PREVIOUS, "phase": "Failed"})
    assert manager.observed("u1", {**PREVIOUS, "podIP": "10.0.0.9"}) == {**PREVIOUS, "phase": "Failed"}
    assert manager._unsent["u1"].base == {**PREVIOUS, "podIP": "10.0.0.9"}


class Server:
    """One pod's status on an apiserver that applies the patches; `gate` holds the next patch in flight."""

    def __init__(self, status: dict[str, Any], uid: str = "u1", mirror_of: str = "") -> None:
        self.status, self.uid, self.mirror_of, self.up = dict(status), uid, mirror_of, False
        self.gate: asyncio.Event | None = None

    async def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        if not self.up:
            raise ConnectionRefusedError(111, "refused")
        if self.gate is not None:
            gate, self.gate = self.gate, None
            await gate.wait()
        self.status = generate.apply_status_patch(self.status, patch)
        annotations = {"kubernetes.io/config.mirror": self.mirror_of} if self.mirror_of else {}
        return {"metadata": {"uid": self.uid, "annotations": annotations}, "status": dict(self.status)}


def ready(value: str) -> list[dict[str, str]]:
    return [{"type": "Ready", "status": value}]


async def test_a_retry_landing_while_a_newer_status_waits_sends_the_newer_one_against_what_landed() -> None:
    b0 = {"phase": "Running", "conditions": ready("False")}
    s1 = {"phase": "Running", "conditions": ready("True"), "podIP": "10.0.0.5"}
    s2 = {"phase": "Succeeded", "conditions": ready("False")}
    server = Server(b0)
    manager = StatusManager(server)  # type: ignore[arg-type]
    await manager.write("ns", "p", "u1", b0, s1)  # refused: cached with base b0
    gate = asyncio.Event()
    server.up, server.gate = True, gate
    retry = asyncio.create_task(manager._send("u1"))  # run's retry, in flight
    await asyncio.sleep(0.01)
    assert await manager.write("ns", "p", "u1", s1, s2) == s2
    gate.set()
    await retry
    await manager._send("u1")
    assert server.status == s2 and not manager.unsent("u1")


async def test_a_patch_names_the_pods_uid_except_a_static_pods() -> None:
    api = FakeApi()
    await StatusManager(api).write("ns", "p", "u1", PREVIOUS, {**PREVIOUS, "phase": "Running"})  # type: ignore[arg-type]
    await StatusManager(api).write("ns", "s", "u1", PREVIOUS, {**PREVIOUS, "phase": "Running"},  # type: ignore[arg-type]
                                   precondition=False)
    assert [call[3].get("metadata") for call in api.calls] == [{"uid": "u1"}, None]


async def test_a_static_pods_status_follows_its_mirror_pod_after_an_outage() -> None:
    server = Server({"phase": "Running", "conditions": ready("True")}, uid="mirror-uid", mirror_of="static-uid")
    manager = StatusManager(server)  # type: ignore[arg-type]
    body: dict[str, Any] = {"phase": "Running", "conditions": ready("True")}
    for up, desired in ((False, "False"), (True, "True"), (True, "False")):
        server.up = up
        written = await manager.write("ns", "p", "static-uid", body, {"phase": "Running", "conditions": ready(desired)},
                                      precondition=False)
        body = written if written is not None else body  # as PodWorkers._act does
        if up:
            await manager._send("static-uid")  # run's round
    assert server.status["conditions"] == ready("False")
    assert not manager.unsent("static-uid")


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
        (v(3), 'pod ns/p: status patched: {"metadata":{"uid":"u1"},"status":{"phase":"Running"}}'),
        (v(3), "pod ns/p: fully terminated and removed from the apiserver")]
