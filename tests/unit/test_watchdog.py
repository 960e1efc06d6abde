"""The systemd watchdog (upstream pkg/kubelet/watchdog): $WATCHDOG_USEC and $WATCHDOG_PID read as go-systemd's
SdWatchdogEnabled and NewHealthChecker read them, the health checks that gate each WATCHDOG=1, the ping retried as
upstream's backoff retries it; the loop pinging a real unix datagram socket standing for systemd's $NOTIFY_SOCKET;
its place in the start-up, the Node and the clean-up."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kopf
import pytest

from cri_client import CriError
from handlers import startup
from kopflet import sdnotify
from kopflet.config.settings import AgentConfig
from kopflet.watchdog import rules
from kopflet.watchdog.health_checker import HealthChecker, LogFlushCheck
from kopflet.watchdog.rules import Backoff, WatchdogConfigError
from tests.unit.test_node import node

PID = 4242
USEC, PID_ENV = rules.WATCHDOG_USEC_ENV, rules.WATCHDOG_PID_ENV

# ------------------------------------------------------------------------------------ the environment's values


@pytest.mark.parametrize(("environ", "timeout"), [
    ({}, None),
    ({USEC: ""}, None),  # empty is unset
    ({USEC: "30000000"}, 30.0),
    ({USEC: "30000000", PID_ENV: str(PID)}, 30.0),  # meant for this process
    ({USEC: "30000000", PID_ENV: ""}, 30.0),
    ({USEC: "30000000", PID_ENV: "1"}, None),  # another process's watchdog (inherited): not ours
    ({USEC: "+2500000"}, 2.5),  # strconv.Atoi takes a sign
    ({USEC: "0030000000"}, 30.0),
    ({USEC: "1"}, 1e-6),
    ({PID_ENV: str(PID)}, None),  # a PID without a timeout: no watchdog
])
def test_watchdog_timeout_as_go_systemd_reads_it(environ: dict[str, str], timeout: float | None) -> None:
    assert rules.watchdog_timeout(environ, PID) == timeout


@pytest.mark.parametrize(("environ", "message"), [
    ({USEC: "30s"}, 'error converting WATCHDOG_USEC: strconv.Atoi: parsing "30s": invalid syntax'),
    ({USEC: " 30"}, 'error converting WATCHDOG_USEC: strconv.Atoi: parsing " 30": invalid syntax'),
    ({USEC: "1_000"}, 'error converting WATCHDOG_USEC: strconv.Atoi: parsing "1_000": invalid syntax'),
    ({USEC: "+"}, 'error converting WATCHDOG_USEC: strconv.Atoi: parsing "+": invalid syntax'),
    ({USEC: "99999999999999999999"},
     'error converting WATCHDOG_USEC: strconv.Atoi: parsing "99999999999999999999": value out of range'),
    ({USEC: "0"}, "error WATCHDOG_USEC must be a positive number"),
    ({USEC: "-5"}, "error WATCHDOG_USEC must be a positive number"),
    ({USEC: "30000000", PID_ENV: "self"}, 'error converting WATCHDOG_PID: strconv.Atoi: parsing "self": invalid '
                                          'syntax'),
    ({USEC: "bad", PID_ENV: "1"}, 'error converting WATCHDOG_USEC: strconv.Atoi: parsing "bad": invalid syntax'),
])
def test_watchdog_timeout_errors_are_go_systemds(environ: dict[str, str], message: str) -> None:
    with pytest.raises(WatchdogConfigError) as caught:
        rules.watchdog_timeout(environ, PID)
    assert str(caught.value) == message


@pytest.mark.parametrize(("environ", "interval", "error"), [
    ({}, None, None),
    ({USEC: "30000000", PID_ENV: "1"}, None, None),
    ({USEC: "30000000"}, 15.0, None),  # half of WatchdogSec=30s
    ({USEC: "4000000", PID_ENV: str(PID)}, 2.0, None),
    ({USEC: "1000001"}, 0.5000005, None),  # just over a second is enough
    ({USEC: "1000000"}, None, "configure watchdog timeout too small: 1s"),
    ({USEC: "500000"}, None, "configure watchdog timeout too small: 500ms"),
    ({USEC: "abc"}, None, 'configure watchdog: error converting WATCHDOG_USEC: strconv.Atoi: parsing "abc": '
                          'invalid syntax'),
    ({USEC: "-1"}, None, "configure watchdog: error WATCHDOG_USEC must be a positive number"),
    ({USEC: "30000000", PID_ENV: "x"}, None, 'configure watchdog: error converting WATCHDOG_PID: strconv.Atoi: '
                                             'parsing "x": invalid syntax'),
    ({USEC: "1000000", PID_ENV: "1"}, None, None),  # not ours: too small does not matter
])
def test_notify_interval_is_half_the_timeout_as_new_health_checker_makes_it(
        environ: dict[str, str], interval: float | None, error: str | None) -> None:
    if error is None:
        assert rules.notify_interval(environ, PID) == interval
    else:
        with pytest.raises(WatchdogConfigError) as caught:
            rules.notify_interval(environ, PID)
        assert str(caught.value) == error


# ---------------------------------------------------------------------------------------------- the checks


@pytest.mark.parametrize(("results", "failure"), [
    ([], ""),
    ([("ping", ""), ("log", ""), ("syncloop", "")], ""),
    ([("ping", ""), ("syncloop", "sync Loop took longer than expected")],
     "checker syncloop failed: sync Loop took longer than expected"),
    ([("log", "logging blocked"), ("syncloop", "sync Loop took longer than expected")],
     "checker log failed: logging blocked"),  # the first failure only
    ([("ping", ""), ("device-plugin", "device registration error: x")],
     "checker device-plugin failed: device registration error: x"),
])
def test_first_failure_and_whether_to_notify(results: list[tuple[str, str]], failure: str) -> None:
    assert rules.first_failure(results) == failure
    assert rules.should_notify(results) is (failure == "")


def test_the_checks_stop_at_the_first_failure() -> None:
    asked: list[str] = []

    def results() -> Iterator[tuple[str, str]]:
        for name, error in (("ping", ""), ("log", "logging blocked"), ("syncloop", "")):
            asked.append(name)
            yield name, error
    assert rules.first_failure(results()) == "checker log failed: logging blocked"
    assert asked == ["ping", "log"]


@pytest.mark.parametrize(("last_entry", "now", "resync", "error"), [
    (None, 10_000.0, 60.0, ""),  # never entered: healthy
    (1000.0, 1000.0, 60.0, ""),
    (1000.0, 1300.0, 60.0, ""),  # exactly five minutes: not yet
    (1000.0, 1300.5, 60.0, "sync Loop took longer than expected"),
    (1000.0, 1300.5, 1.0, "sync Loop took longer than expected"),  # at least five minutes whatever syncFrequency
    (1000.0, 1300.5, 200.0, ""),  # twice syncFrequency when that is longer
    (1000.0, 1400.5, 200.0, "sync Loop took longer than expected"),
])
def test_sync_loop_health_check(last_entry: float | None, now: float, resync: float, error: str) -> None:
    assert rules.sync_loop_error(last_entry, now, resync) == error


@pytest.mark.parametrize(("last", "now", "error"), [
    (100.0, 100.0, ""), (100.0, 219.9, ""), (100.0, 220.0, "logging blocked"), (100.0, 1000.0, "logging blocked"),
])
def test_log_health_check(last: float, now: float, error: str) -> None:
    assert rules.log_error(last, now) == error


@pytest.mark.parametrize(("backoff", "randoms", "delays"), [
    (rules.NOTIFY_RETRY, [0.0], [1.0]),  # upstream's: two tries, one wait of a second ...
    (rules.NOTIFY_RETRY, [0.5], [1.05]),  # ... jittered by up to 10%
    (rules.NOTIFY_RETRY, [0.999], [pytest.approx(1.0999)]),
    (Backoff(duration=1.0, factor=2.0, jitter=0.0, steps=4), [0.7, 0.7, 0.7], [1.0, 2.0, 4.0]),
    (Backoff(duration=0.5, factor=3.0, jitter=0.2, steps=3), [0.5, 1.0], [0.55, pytest.approx(1.8)]),
    (Backoff(duration=1.0, factor=2.0, jitter=0.1, steps=1), [], []),  # one try: no wait
])
def test_retry_delays_as_exponential_backoff(backoff: Backoff, randoms: list[float], delays: list[Any]) -> None:
    assert rules.retry_delays(backoff, randoms) == delays


def test_upstreams_retry_backoff() -> None:
    assert rules.NOTIFY_RETRY == Backoff(duration=1.0, factor=2.0, jitter=0.1, steps=2)


# --------------------------------------------------------------------------------------------- one round


class FakeNotify:
    """What each try of a ping answers: True sent, False no $NOTIFY_SOCKET, an exception not sent."""

    def __init__(self, *answers: bool | BaseException) -> None:
        self.answers, self.calls = list(answers), 0

    async def __call__(self) -> bool:
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


@pytest.fixture
def quick_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rules, "NOTIFY_RETRY", Backoff(duration=0.01, factor=2.0, jitter=0.1, steps=2))


def _healthy() -> str:
    return ""


@pytest.mark.parametrize(("answers", "notified", "calls", "logged"), [
    ((True,), True, 1, [("V5", "Watchdog plugin notified: acknowledgment=true state=WATCHDOG=1")]),
    ((False,), False, 1, [("ERROR", "Failed to notify watchdog: failed to notify systemd watchdog, notification not "
                                    "supported - (i.e. NOTIFY_SOCKET is unset)")]),
    ((sdnotify.NotifyError("cannot notify systemd at /run/x: Connection refused"), True), True, 2,
     [("V5", "Failed to notify systemd watchdog, retrying: cannot notify systemd at /run/x: Connection refused"),
      ("V5", "Watchdog plugin notified: acknowledgment=true state=WATCHDOG=1")]),
    ((sdnotify.NotifyError("refused"), TimeoutError()), False, 2,
     [("V5", "Failed to notify systemd watchdog, retrying: refused"),
      ("V5", "Failed to notify systemd watchdog, retrying: TimeoutError"),
      ("ERROR", "Failed to notify watchdog: timed out waiting for the condition")]),
])
async def test_a_round_pings_and_retries_as_upstream(
        answers: tuple[bool | BaseException, ...], notified: bool, calls: int, logged: list[tuple[str, str]],
        quick_retry: None, caplog: pytest.LogCaptureFixture) -> None:
    notify = FakeNotify(*answers)
    checker = HealthChecker(2.0, notify=notify, log_check=LogFlushCheck(flush=lambda: None))
    checker.set_health_checkers(_healthy)
    caplog.set_level(1, logger="kopflet.watchdog")
    assert await checker.check_and_notify() is notified
    assert notify.calls == calls
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == logged
    await checker.stop()


@pytest.mark.parametrize(("sync_loop", "extra", "failure"), [
    (_healthy, [], ""),
    (lambda: "sync Loop took longer than expected", [], "checker syncloop failed: sync Loop took longer than expected"),
    (_healthy, [("device-plugin", lambda: "device registration error: gone")],
     "checker device-plugin failed: device registration error: gone"),
    (_healthy, [("broken", lambda: 1 / 0)], "checker broken failed: ZeroDivisionError: division by zero"),
    (None, [], ""),  # no checks (starting, or the node stopped): every round pings
])
async def test_a_failed_check_skips_the_ping_and_says_why(
        sync_loop: Callable[[], str] | None, extra: list[Any], failure: str, caplog: pytest.LogCaptureFixture) -> None:
    notify = FakeNotify(True)
    checker = HealthChecker(2.0, notify=notify, log_check=LogFlushCheck(flush=lambda: None))
    checker.set_health_checkers(sync_loop, extra)
    assert checker.check() == failure
    assert await checker.check_and_notify() is (failure == "")
    assert notify.calls == (0 if failure else 1)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == ([f"Do not notify watchdog this iteration as the kubelet is reportedly not healthy: {failure}"]
                      if failure else [])
    await checker.stop()


def test_the_checks_are_upstreams_in_upstreams_order() -> None:
    checker = HealthChecker(2.0)
    assert checker.check_names == ()
    checker.set_health_checkers(_healthy, [("device-plugin", _healthy)])
    assert checker.check_names == ("ping", "log", "syncloop", "device-plugin")
    checker.set_health_checkers(None)
    assert checker.check_names == ()


# ------------------------------------------------------------------------------------------ the log check


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_the_log_check_flushes_in_a_thread_and_passes_while_flushes_end() -> None:
    clock, flushes = FakeClock(), []
    check = LogFlushCheck(period=0.01, flush=lambda: flushes.append(clock.now), clock=clock)
    try:
        assert check() == ""  # the first check starts the thread (sync.Once)
        _wait_for(lambda: len(flushes) >= 2)
        clock.now += 500  # time passes, and the flushes go on
        _wait_for(lambda: flushes[-1] == clock.now and len(flushes) >= 4)
        assert check() == ""
    finally:
        check.close()


def test_a_flush_that_never_returns_is_logging_blocked() -> None:
    clock, release, entered = FakeClock(), threading.Event(), threading.Event()

    def stuck() -> None:
        entered.set()
        release.wait(10)
    check = LogFlushCheck(period=0.01, flush=stuck, clock=clock)
    try:
        assert check() == ""
        assert entered.wait(5)
        clock.now += 119
        assert check() == ""
        clock.now += 1
        assert check() == "logging blocked"
    finally:
        check.close()
        release.set()


def test_a_flush_that_raises_is_not_blocked() -> None:
    clock, tries = FakeClock(), []

    def broken() -> None:
        tries.append(clock.now)
        raise BrokenPipeError("stderr is gone")
    check = LogFlushCheck(period=0.01, flush=broken, clock=clock)
    try:
        assert check() == ""
        clock.now += 500
        _wait_for(lambda: tries[-1] == clock.now and len(tries) >= 2)
        _wait_for(lambda: check() == "")
    finally:
        check.close()


def test_the_log_check_flushes_the_root_loggers_handlers() -> None:
    flushed = threading.Event()

    class Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            pass

        def flush(self) -> None:
            flushed.set()
    handler = Handler()
    logging.getLogger().addHandler(handler)
    check = LogFlushCheck(period=0.01)
    try:
        assert check() == ""
        assert flushed.wait(5)
    finally:
        check.close()
        logging.getLogger().removeHandler(handler)


# -------------------------------------------------------------------- the loop, against a real notify socket


@pytest.fixture
def systemd_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    """systemd's end of $NOTIFY_SOCKET: a datagram socket bound to a path."""
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        sock.setblocking(False)
        yield sock, str(path)


async def _datagrams(sock: socket.socket, count: int, within: float = 5.0) -> list[bytes]:
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(within):
        return [await loop.sock_recv(sock, 4096) for _ in range(count)]


def _drain(sock: socket.socket) -> list[bytes]:
    out = []
    while True:
        try:
            out.append(sock.recv(4096))
        except BlockingIOError:
            return out


async def test_the_loop_pings_only_while_the_checks_pass(
        systemd_socket: tuple[socket.socket, str], caplog: pytest.LogCaptureFixture) -> None:
    sock, path = systemd_socket
    environ = {USEC: "100000", sdnotify.NOTIFY_SOCKET_ENV: path}  # WatchdogSec=100ms: too small for from_environ
    checker = HealthChecker(0.05, environ=environ, log_check=LogFlushCheck(flush=lambda: None))
    caplog.set_level(logging.INFO, logger="kopflet.watchdog")
    checker.start()
    try:
        assert checker.running
        assert "Starting systemd watchdog with interval 50ms" in caplog.text
        assert await _datagrams(sock, 3) == [b"WATCHDOG=1"] * 3  # no checks yet (the start-up): pings
        healthy = True
        checker.set_health_checkers(lambda: "" if healthy else "sync Loop took longer than expected")
        assert await _datagrams(sock, 2) == [b"WATCHDOG=1"] * 2
        healthy = False
        await asyncio.sleep(0.3)  # a round that was sending finishes
        _drain(sock)
        await asyncio.sleep(0.25)
        assert _drain(sock) == []
        assert ("Do not notify watchdog this iteration as the kubelet is reportedly not healthy: checker syncloop "
                "failed: sync Loop took longer than expected") in caplog.text
        healthy = True
        assert await _datagrams(sock, 2) == [b"WATCHDOG=1"] * 2
    finally:
        await checker.stop()
    assert not checker.running
    await asyncio.sleep(0.15)
    _drain(sock)
    await asyncio.sleep(0.15)
    assert _drain(sock) == []  # stopped: no more pings


async def test_without_a_watchdog_nothing_runs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="kopflet.watchdog")
    checker = HealthChecker.from_environ({}, pid=PID)
    assert not checker.enabled
    checker.start()
    assert not checker.running
    assert [r.getMessage() for r in caplog.records] == [
        "Systemd watchdog is not enabled",
        "Systemd watchdog is not enabled or the interval is invalid, so health checking will not be started."]
    await checker.stop()


def test_from_environ_reads_the_process_environment_and_pid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(USEC, "30000000")
    monkeypatch.setenv(PID_ENV, str(os.getpid()))
    assert HealthChecker.from_environ().interval == 15.0
    monkeypatch.setenv(PID_ENV, str(os.getpid() + 1))
    assert HealthChecker.from_environ().interval is None
    monkeypatch.setenv(USEC, "2")
    monkeypatch.delenv(PID_ENV)
    with pytest.raises(WatchdogConfigError, match="configure watchdog timeout too small: 2µs"):
        HealthChecker.from_environ()


async def test_without_notify_socket_each_round_is_an_error(caplog: pytest.LogCaptureFixture) -> None:
    checker = HealthChecker(2.0, environ={USEC: "4000000"}, log_check=LogFlushCheck(flush=lambda: None))
    assert await checker.check_and_notify() is False
    assert "Failed to notify watchdog: failed to notify systemd watchdog, notification not supported" in caplog.text
    await checker.stop()


# ------------------------------------------------------------------------ the start-up, the Node, the clean-up


class _Memo(dict[str, Any]):
    """kopf.Memo's get and attributes."""

    def __getattr__(self, name: str) -> Any:
        return self[name]

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value


@pytest.mark.parametrize(("usec", "message"), [
    ("abc", 'create health checker: configure watchdog: error converting WATCHDOG_USEC: strconv.Atoi: parsing '
            '"abc": invalid syntax'),
    ("1000000", "create health checker: configure watchdog timeout too small: 1s"),
])
async def test_a_watchdog_configured_wrongly_stops_the_agent(usec: str, message: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(USEC, usec)
    monkeypatch.delenv(PID_ENV, raising=False)
    memo = _Memo()
    with pytest.raises(kopf.PermanentError) as caught:
        await startup.start_watchdog(memo=memo)
    assert str(caught.value) == message
    assert memo.get("watchdog") is None


async def test_the_start_up_starts_the_watchdog_and_the_clean_up_stops_it_last(
        systemd_socket: tuple[socket.socket, str], monkeypatch: pytest.MonkeyPatch) -> None:
    sock, path = systemd_socket
    monkeypatch.setenv(USEC, "30000000")
    monkeypatch.setenv(PID_ENV, str(os.getpid()))
    monkeypatch.setenv(sdnotify.NOTIFY_SOCKET_ENV, path)
    memo = _Memo()
    await startup.start_watchdog(memo=memo)
    watchdog: HealthChecker = memo["watchdog"]
    assert watchdog.running and watchdog.interval == 15.0
    assert await _datagrams(sock, 1) == [b"WATCHDOG=1"]  # the first round at once
    await startup.start_watchdog(memo=memo)  # a retried start-up keeps the one it has
    assert memo["watchdog"] is watchdog
    await startup.stop_agent(memo=memo, logger=logging.getLogger("t"))
    assert await _datagrams(sock, 1) == [b"STOPPING=1"]
    assert not watchdog.running


async def test_no_watchdog_is_started_without_watchdog_usec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(USEC, raising=False)
    memo = _Memo()
    await startup.start_watchdog(memo=memo)
    assert not memo["watchdog"].running and not memo["watchdog"].enabled
    await memo["watchdog"].stop()


def test_the_nodes_checks_are_the_relists_progress_and_the_device_plugins_server() -> None:
    n = node("node-a", "/var/lib/a", resync_period=60.0)
    assert n.sync_loop_health_check() == ""  # no relist yet
    n.relist.relisted_at = time.monotonic() - 10
    assert n.sync_loop_health_check() == ""
    n.relist.relisted_at = time.monotonic() - 301
    assert n.sync_loop_health_check() == "sync Loop took longer than expected"
    assert node("node-b", "/var/lib/b", resync_period=200.0).sync_loop_health_check() == ""
    ((name, check),) = n.health_checkers()
    assert name == "device-plugin" and check == n.device_manager.healthy and check() == ""


async def _idle(*_: Any, **__: Any) -> None:
    await asyncio.Event().wait()


async def _nothing(*_: Any, **__: Any) -> Any:
    return None


async def test_node_start_hands_its_checks_to_the_watchdog_and_stop_takes_them_back(tmp_path: Path) -> None:
    watchdog = HealthChecker(None)
    n = node("node-a", str(tmp_path))
    n.watchdog = watchdog
    for part, method in ((n.cpu_manager, "start"), (n.memory_manager, "start"), (n.device_manager, "start"),
                         (n.api, "open"), (n.container_manager, "start"), (n.pod_resources, "start"),
                         (n.heartbeat, "try_register")):
        setattr(part, method, _nothing)
    for part in (n.services, n.relist, n.heartbeat, n.status, n.housekeeping, n.container_gc, n.image_gc,
                 n.log_manager, n.eviction, n.oom, n.container_manager, n.cpu_manager, n.memory_manager):
        part.run = _idle  # type: ignore[method-assign]
    await n.start()
    assert watchdog.check_names == ("ping", "log", "syncloop", "device-plugin")
    assert watchdog.check() == ""
    n.relist.relisted_at = time.monotonic() - 301
    assert watchdog.check() == "checker syncloop failed: sync Loop took longer than expected"
    await n.stop(close_runtime=False)
    assert watchdog.check_names == () and watchdog.check() == ""
    await watchdog.stop()


async def test_the_relist_loop_notes_each_round_it_completes() -> None:
    from kopflet.pleg.relist import RuntimeCache

    class Cri:
        fail = False

        class _Lister:
            def __init__(self, cri: Any) -> None:
                self.cri = cri

            async def list(self) -> list[Any]:
                if self.cri.fail:
                    raise CriError("UNAVAILABLE", "connection refused")
                return []

        def __init__(self) -> None:
            self.sandboxes = self.containers = Cri._Lister(self)

    cri = Cri()
    cache = RuntimeCache(cri)  # type: ignore[arg-type]
    assert cache.relisted_at is None
    task = asyncio.create_task(cache.run(lambda _: None, period=0.01))
    try:
        await asyncio.wait_for(cache.synced.wait(), 5)
        first = cache.relisted_at
        assert first is not None
        await asyncio.sleep(0.05)
        assert cache.relisted_at is not None and cache.relisted_at > first
        cri.fail = True  # the runtime is down: the rounds stop counting
        await asyncio.sleep(0.05)
        stalled = cache.relisted_at
        await asyncio.sleep(0.05)
        assert cache.relisted_at == stalled
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


# ---------------------------------------------------------------------------------------- the feature gate


def test_the_systemd_watchdog_gate_is_no_startup_note() -> None:
    cfg = AgentConfig(node_name="n", feature_gates={"SystemdWatchdog": True, "PodLevelResources": True})
    assert cfg.startup_notes == ("feature gate PodLevelResources=true is upstream's default: accepted, nothing to do",)
