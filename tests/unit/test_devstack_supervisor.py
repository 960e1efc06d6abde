"""The dev stack's supervisor with real processes: a daemon that dies on its own is started again and the crash
recorded; one stopped on purpose stays stopped."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack import processes
from devstack.layout import Layout
from devstack.stack import Component, Supervisor


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout(root=tmp_path / ".devstack", cache=tmp_path / "cache", node_name="node-a")


@pytest.fixture
def sleeper(layout: Layout) -> Iterator[Component]:
    comp = Component(name="sleeper", argv=["sleep", "300"], healthy=lambda: True, timeout=10)
    processes.start(comp.name, comp.argv, pids=layout.pids, logs=layout.logs, healthy=comp.healthy)
    yield comp
    processes.stop(comp.name, pids=layout.pids)


def wait_for(predicate: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_crashed_daemon_is_started_again_and_the_crash_recorded(layout: Layout, sleeper: Component) -> None:
    pidfile = layout.pids / "sleeper.pid"
    first = processes.read_pid(pidfile)
    assert first is not None
    supervisor = Supervisor(layout, period=0.1, daemons=lambda _: [sleeper])
    supervisor.start()
    try:
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: processes.read_pid(pidfile) not in (None, first))
    finally:
        supervisor.stop()
    crashes = (layout.logs / "crashes.log").read_text()
    assert f"sleeper (pid {first}) exited on its own (killed by SIGKILL)" in crashes
    assert "starting: sleep 300" in crashes  # the end of the daemon's own log


def test_a_daemon_stopped_on_purpose_stays_stopped(layout: Layout, sleeper: Component) -> None:
    pidfile = layout.pids / "sleeper.pid"
    supervisor = Supervisor(layout, period=0.05, daemons=lambda _: [sleeper])
    supervisor.start()
    try:
        assert processes.stop("sleeper", pids=layout.pids)
        time.sleep(0.5)  # ten supervision rounds
        assert processes.read_pid(pidfile) is None
    finally:
        supervisor.stop()
    assert not (layout.logs / "crashes.log").exists()
