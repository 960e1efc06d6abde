"""The node shutdown manager's loop (kopflet/nodeshutdown/manager.py) over a fake bus: the inhibit delay raised,
the lock taken and let go, pods killed group by group, a cancellation, a lost bus. The real logind is in
tests/e2e/test_node_shutdown.py."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from kopflet.metrics import KubeletMetrics
from kopflet.nodeshutdown import manager as manager_module
from kopflet.nodeshutdown import rules
from kopflet.nodeshutdown.manager import ShutdownManager
from kopflet.nodeshutdown.systemd import DBusError

Period = rules.ShutdownGracePeriodByPodPriority
TWO_GROUPS = (Period(priority=0, shutdown_grace_period_seconds=2),
              Period(priority=2000000000, shutdown_grace_period_seconds=1))


FDS = itertools.count(101)


class FakeBus:
    def __init__(self, delay: float = 5.0, reloaded_delay: float | None = None) -> None:
        self.delay, self.reloaded_delay = delay, reloaded_delay
        self.calls: list[Any] = []
        self.held: set[int] = set()
        self.on_event: Callable[[bool], None] | None = None
        self.gone = asyncio.Event()
        self.closed = False

    async def current_inhibit_delay(self) -> float:
        return self.delay

    async def inhibit_shutdown(self) -> int:
        fd = next(FDS)
        self.held.add(fd)
        self.calls.append(("inhibit", fd))
        return fd

    def release_inhibit_lock(self, lock: int) -> None:
        self.held.discard(lock)
        self.calls.append(("release", lock))

    async def reload_logind_conf(self) -> None:
        self.calls.append(("reload",))
        if self.reloaded_delay is not None:
            self.delay = self.reloaded_delay

    async def monitor_shutdown(self, on_event: Callable[[bool], None], on_bad: Callable[[str], None]) -> None:
        self.on_event = on_event

    async def wait_for_disconnect(self) -> None:
        await self.gone.wait()

    def override_inhibit_delay(self, seconds: float) -> None:
        self.calls.append(("override", seconds))

    def close(self) -> None:
        self.closed = True


@dataclasses.dataclass
class FakePod:
    uid: str


def body(uid: str, priority: int | None = None, grace: int | None = None, phase: str = "Running") -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if priority is not None:
        spec["priority"] = priority
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"metadata": {"name": uid, "namespace": "ns", "uid": uid, "generation": 1}, "spec": spec,
            "status": {"phase": phase}}


class Node:
    """The node's side: active pods, the kill, the cleanup the manager waits for, its status and events."""

    def __init__(self, pods: list[dict[str, Any]], *, stuck: frozenset[str] = frozenset()) -> None:
        self.pods = pods
        self.stuck = stuck
        self.killed: list[tuple[str, dict[str, Any], int]] = []
        self.cleaned: set[str] = set()
        self.events: list[tuple[str, str]] = []
        self.status_syncs = 0

    def active(self) -> list[tuple[FakePod, Mapping[str, Any]]]:
        return [(FakePod(p["metadata"]["uid"]), p) for p in self.pods]

    def kill(self, uid: str, status: dict[str, Any], grace: int) -> bool:
        self.killed.append((uid, status, grace))
        if uid not in self.stuck:
            self.cleaned.add(uid)
        return True

    async def cleaned_up(self, uid: str) -> bool:
        return uid in self.cleaned

    async def sync(self) -> None:
        self.status_syncs += 1


def new_manager(node: Node, bus: FakeBus, tmp_path: Path, periods: tuple[Period, ...] = TWO_GROUPS,
                metrics: KubeletMetrics | None = None) -> ShutdownManager:
    async def connect() -> FakeBus:
        return bus
    return ShutdownManager(periods, state_file=tmp_path / rules.STATE_FILE, active_pods=node.active, kill=node.kill,
                           cleaned_up=node.cleaned_up, sync_node_status=node.sync,
                           node_event=lambda reason, message: node.events.append((reason, message)),
                           metrics=metrics, connect=connect)


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manager_module, "INHIBIT_DELAY_POLL_DELAYS", (0.01,) * 4)
    monkeypatch.setattr(manager_module, "DBUS_RECONNECT_PERIOD", 0.01)
    monkeypatch.setattr(manager_module, "CLEANED_UP_POLL", 0.01)


async def settle(check: Callable[[], bool]) -> None:
    """Polls the fake's state, which has no event to wait on."""
    async def wait() -> None:
        while not check():  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    await asyncio.wait_for(wait(), 5.0)


async def test_off_without_periods(tmp_path: Path) -> None:
    manager = new_manager(Node([]), FakeBus(), tmp_path, periods=())
    assert not manager.enabled
    assert await manager.start() is None
    assert manager.admit() is None and manager.shutdown_status() is None


async def test_start_raises_logind_delay_then_takes_the_lock(tmp_path: Path) -> None:
    bus = FakeBus(delay=2.0, reloaded_delay=2.5)  # the groups ask for 3 s
    manager = new_manager(Node([]), bus, tmp_path)
    with pytest.raises(DBusError) as raised:  # logind never took it: upstream's error after 5 attempts
        await manager.start()
    assert str(raised.value) == rules.inhibit_delay_error(5, 3.0, 2.5)
    assert bus.closed and not bus.held and bus.calls == [("override", 3.0), ("reload",)]

    bus = FakeBus(delay=2.0, reloaded_delay=30.0)
    manager = new_manager(Node([]), bus, tmp_path)
    task = await manager.start()
    assert task is not None
    assert [c[0] for c in bus.calls] == ["override", "reload", "inhibit"] and bus.calls[0] == ("override", 3.0)
    assert bus.held == {bus.calls[2][1]}
    task.cancel()
    await manager.stop()
    assert not bus.held


async def test_no_override_when_logind_allows_enough(tmp_path: Path) -> None:
    bus = FakeBus(delay=3.0)
    manager = new_manager(Node([]), bus, tmp_path)
    task = await manager.start()
    assert [c[0] for c in bus.calls] == ["inhibit"]
    assert task is not None
    task.cancel()


async def test_shutdown_kills_groups_in_priority_order_then_lets_the_lock_go(tmp_path: Path) -> None:
    node = Node([body("critical", priority=2000000000), body("regular"), body("quick", grace=0),
                 body("low", priority=-5, grace=60)])
    bus = FakeBus(delay=10.0)
    metrics = KubeletMetrics("node")
    manager = new_manager(node, bus, tmp_path, metrics=metrics)
    task = await manager.start()
    assert task is not None and bus.on_event is not None
    lock = bus.calls[0][1]
    bus.on_event(True)
    await settle(lambda: ("release", lock) in bus.calls)
    assert manager.shutting_down and manager.shutdown_status() == rules.SHUTTING_DOWN_ERROR
    assert manager.admit() == rules.admit(True)
    assert [(uid, grace) for uid, _, grace in node.killed] == [("regular", 2), ("quick", 0), ("low", 2),
                                                               ("critical", 1)]
    for _, status, _ in node.killed:
        assert (status["phase"], status["reason"], status["message"]) == (
            "Failed", "Terminated", "Pod was terminated in response to imminent node shutdown.")
        assert [(c["type"], c["reason"]) for c in status["conditions"]] == [
            ("DisruptionTarget", "TerminationByKubelet")]
    assert node.events == [(rules.EVENT_REASON, rules.EVENT_SHUTDOWN_MESSAGE)]
    await settle(lambda: node.status_syncs == 1)
    start, end = rules.decode_state((tmp_path / rules.STATE_FILE).read_bytes())
    assert start is not None and end is not None and start <= end
    assert metrics.graceful_shutdown_start_time.labels().value == float(int(start.timestamp()))
    assert metrics.graceful_shutdown_end_time.labels().value == float(int(end.timestamp()))
    json.loads((tmp_path / rules.STATE_FILE).read_text())

    # Cancelled: a new lock, the node back to normal.
    bus.on_event(False)
    await settle(lambda: len(bus.held) == 1)
    assert not manager.shutting_down and manager.admit() is None
    assert node.events[-1] == (rules.EVENT_REASON, rules.EVENT_CANCELLED_MESSAGE)
    assert bus.calls[-1] == ("inhibit", next(iter(bus.held)))
    task.cancel()


async def test_a_group_that_does_not_end_in_time_does_not_hold_the_next(tmp_path: Path) -> None:
    periods = (Period(priority=0, shutdown_grace_period_seconds=1),
               Period(priority=10, shutdown_grace_period_seconds=1))
    node = Node([body("stuck"), body("next", priority=10)], stuck=frozenset({"stuck"}))
    bus = FakeBus(delay=10.0)
    manager = new_manager(node, bus, tmp_path, periods=periods)
    task = await manager.start()
    assert task is not None and bus.on_event is not None
    loop = asyncio.get_running_loop()
    began = loop.time()
    bus.on_event(True)
    await settle(lambda: not bus.held)
    assert [uid for uid, _, _ in node.killed] == ["stuck", "next"]
    assert loop.time() - began >= 1.0  # the stuck group's whole period
    task.cancel()


async def test_a_lost_bus_is_connected_again(tmp_path: Path) -> None:
    first, second = FakeBus(delay=10.0), FakeBus(delay=10.0)
    buses = [first, second]

    async def connect() -> FakeBus:
        return buses.pop(0)
    node = Node([])
    manager = new_manager(node, first, tmp_path)
    manager._connect = connect  # type: ignore[assignment]
    task = await manager.start()
    assert task is not None
    first.gone.set()
    await settle(lambda: second.on_event is not None)
    assert second.held and first.closed
    task.cancel()


async def test_restored_metrics_from_the_state_file(tmp_path: Path) -> None:
    import datetime
    start = datetime.datetime(2026, 11, 28, 1, 2, 3, 500000, tzinfo=datetime.UTC)
    end = start + datetime.timedelta(seconds=7)
    (tmp_path / rules.STATE_FILE).write_bytes(rules.encode_state(start, end))
    metrics = KubeletMetrics("node")
    manager = new_manager(Node([]), FakeBus(delay=10.0), tmp_path, metrics=metrics)
    task = await manager.start()
    assert metrics.graceful_shutdown_start_time.labels().value == float(int(start.timestamp()))
    assert metrics.graceful_shutdown_end_time.labels().value == float(int(end.timestamp()))
    assert task is not None
    task.cancel()


@pytest.mark.parametrize("address", ["unix:path=/nonexistent/system_bus_socket", "no transport"])
async def test_no_system_bus_is_a_dbus_error(address: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The node logs it as upstream's "Failed to start node shutdown manager" and runs on."""
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", address)
    manager = ShutdownManager(TWO_GROUPS, state_file=tmp_path / rules.STATE_FILE, active_pods=list,
                              kill=lambda uid, status, grace: True, cleaned_up=Node([]).cleaned_up,
                              sync_node_status=Node([]).sync, node_event=lambda reason, message: None)
    with pytest.raises(DBusError, match="cannot connect to the system bus"):
        await manager.start()


async def test_the_lock_is_let_go_at_stop_even_with_the_bus_gone(tmp_path: Path) -> None:
    """The descriptor is ours: closed at stop although the connection that gave it was lost and no new one came."""
    first = FakeBus(delay=10.0)
    attempts = 0

    async def connect() -> FakeBus:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            return first
        raise DBusError("cannot connect to the system bus: refused")
    manager = new_manager(Node([]), first, tmp_path)
    manager._connect = connect  # type: ignore[assignment]
    task = await manager.start()
    assert task is not None and first.held
    first.gone.set()
    await settle(lambda: attempts >= 3)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await manager.stop()
    assert not first.held
    pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    assert not pending, pending
