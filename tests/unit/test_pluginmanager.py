"""The plugin manager (upstream pkg/kubelet/pluginmanager): its pure rules (the reconciler's plan, the operation
backoff, the messages), the watcher's scan of a real directory, and whole registrations against fake plugins (real
grpc.aio Registration servers on temporary unix sockets) with a recording handler."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import grpc
import pytest

from kopflet.pluginmanager import cache, pluginwatcher
from kopflet.pluginmanager.cache import ExponentialBackoff, Plan, PluginInfo
from kopflet.pluginmanager.operationexecutor import OperationExecutor
from kopflet.pluginmanager.plugin_manager import PluginManager
from tests.unit.csi_fakes import FakeRegistrar, short_tmpdir

# ------------------------------------------------------------------------------------------------ pure rules

P = PluginInfo


@pytest.mark.parametrize(("desired", "actual", "plan"), [
    pytest.param({}, {}, Plan(), id="nothing"),
    pytest.param({"/r/a.sock": "1"}, {}, Plan(register=(P("/r/a.sock", "1"),)), id="new socket: register"),
    pytest.param({"/r/a.sock": "1"}, {"/r/a.sock": P("/r/a.sock", "1", "CSIPlugin", "a", "/e")}, Plan(),
                 id="registered at its generation: nothing"),
    pytest.param({}, {"/r/a.sock": P("/r/a.sock", "1", "CSIPlugin", "a", "/e")},
                 Plan(unregister=(P("/r/a.sock", "1", "CSIPlugin", "a", "/e"),)), id="socket gone: unregister"),
    pytest.param({"/r/a.sock": "2"}, {"/r/a.sock": P("/r/a.sock", "1", "CSIPlugin", "a", "/e")},
                 Plan(unregister=(P("/r/a.sock", "1", "CSIPlugin", "a", "/e"),), register=(P("/r/a.sock", "2"),)),
                 id="socket made again: unregister, then register the new one"),
    pytest.param({"/r/b.sock": "1", "/r/a.sock": "1"}, {"/r/c.sock": P("/r/c.sock", "9")},
                 Plan(unregister=(P("/r/c.sock", "9"),), register=(P("/r/a.sock", "1"), P("/r/b.sock", "1"))),
                 id="several, in path order"),
])
def test_reconcile(desired: dict[str, str], actual: dict[str, PluginInfo], plan: Plan) -> None:
    assert cache.reconcile(desired, actual) == plan


def test_exponential_backoff() -> None:
    backoff = ExponentialBackoff()
    assert backoff.safe_to_retry(0.0)
    durations = []
    now = 100.0
    for _ in range(12):
        backoff = backoff.updated("boom", now)
        durations.append(backoff.duration_before_retry)
        assert not backoff.safe_to_retry(now + backoff.duration_before_retry)  # upstream: <= is not yet
        assert backoff.safe_to_retry(now + backoff.duration_before_retry + 0.001)
    assert durations == [0.5, 1, 2, 4, 8, 16, 32, 64, 122, 122, 122, 122]
    assert backoff.last_error == "boom" and backoff.last_error_time == now
    assert backoff.no_retries_permitted_message("/r/a.sock") == (
        'Operation for "/r/a.sock" failed. No retries permitted for 122s (durationBeforeRetry 122s). Error: boom')


@pytest.mark.parametrize(("text", "expected"), [
    (cache.dial_failed("/r/a.sock"), "RegisterPlugin error -- dial failed at socket /r/a.sock, err: failed to dial "
                                      "socket /r/a.sock, err: context deadline exceeded"),
    (cache.get_info_failed("/r/a.sock", cache.rpc_error_text("UNIMPLEMENTED", "unknown service")),
     "RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket /r/a.sock, err: rpc error: "
     "code = Unimplemented desc = unknown service"),
    (cache.no_handler("DRAPlugin", "/r/a.sock"),
     "RegisterPlugin error -- no handler registered for plugin type: DRAPlugin at socket /r/a.sock"),
    (cache.validation_failed("bad"), "RegisterPlugin error -- plugin validation failed with err: bad"),
    (cache.registration_failed("bad"), "RegisterPlugin error -- plugin registration failed with err: bad"),
    (cache.failed_to_send_error("/r/a.sock", "x"), "RegisterPlugin error -- failed to send error at socket "
                                                   "/r/a.sock, err: x"),
    (cache.failed_to_send_status("/r/a.sock", "rpc error: code = Internal desc = no"),
     "RegisterPlugin error -- failed to send registration status at socket /r/a.sock, err: : rpc error: "
     "code = Internal desc = no"),
    (cache.notify_failed("told", None), "told"),
    (cache.notify_failed("told", "rpc error: code = Unavailable desc = gone"),
     "told: rpc error: code = Unavailable desc = gone"),
    (cache.no_handler_to_unregister("/r/a.sock"),
     "UnregisterPlugin error -- failed to get plugin handler for /r/a.sock"),
    (cache.rpc_error_text("CANCELLED", "x"), "rpc error: code = Canceled desc = x"),
    (cache.rpc_error_text("DEADLINE_EXCEEDED", "x"), "rpc error: code = DeadlineExceeded desc = x"),
])
def test_upstream_texts(text: str, expected: str) -> None:
    assert text == expected


# -------------------------------------------------------------------------------------------- the watcher


@pytest.fixture
def registry() -> Iterator[str]:
    for base in short_tmpdir("pm"):
        yield os.path.join(base, "plugins_registry")


def _bind(path: str) -> socket.socket:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(path)
    return sock


def test_scan_finds_sockets_only(registry: str) -> None:
    with contextlib.ExitStack() as stack:
        for name in ("a-reg.sock", "sub/b-reg.sock", "sub/deeper/c-reg.sock", ".hidden.sock", ".dot/d-reg.sock"):
            stack.enter_context(_bind(os.path.join(registry, name)))
        with open(os.path.join(registry, "not-a-socket"), "w") as f:
            f.write("x")
        os.symlink(os.path.join(registry, "a-reg.sock"), os.path.join(registry, "link-reg.sock"))
        os.symlink(os.path.join(registry, "sub"), os.path.join(registry, "linked-dir"))
        os.symlink(os.path.join(registry, "gone.sock"), os.path.join(registry, "dangling"))
        found = pluginwatcher.scan(registry)
        assert sorted(os.path.relpath(p, registry) for p in found) == [
            "a-reg.sock", "link-reg.sock", "sub/b-reg.sock", "sub/deeper/c-reg.sock"]
        assert found[os.path.join(registry, "link-reg.sock")] == found[os.path.join(registry, "a-reg.sock")]
        assert pluginwatcher.scan(registry) == found  # the same sockets: the same generations


def test_scan_sees_a_socket_made_again_as_a_new_generation(registry: str) -> None:
    path = os.path.join(registry, "a-reg.sock")
    with _bind(path):
        before = pluginwatcher.scan(registry)[path]
    os.unlink(path)
    with _bind(path):
        assert pluginwatcher.scan(registry)[path] != before


def test_a_chmod_is_not_a_new_generation(registry: str) -> None:
    """Upstream's watcher ignores Chmod events: a plugin that chmods its socket after listening stays registered."""
    path = os.path.join(registry, "a-reg.sock")
    with _bind(path):
        before = pluginwatcher.scan(registry)[path]
        time.sleep(0.01)
        os.chmod(path, 0o600)
        assert pluginwatcher.scan(registry)[path] == before


def test_scan_of_a_missing_directory_finds_nothing(registry: str) -> None:
    assert pluginwatcher.scan(registry) == {}


# ----------------------------------------------------------------------------------- registrations, whole


class Handler:
    """A recording PluginHandler; `refuse` / `fail` make validation / registration raise that text."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.refuse = ""
        self.fail = ""
        self.registered: dict[str, str] = {}

    async def validate_plugin(self, name: str, endpoint: str, versions: Sequence[str]) -> None:
        self.events.append(("validate", name, endpoint, tuple(versions)))
        if self.refuse:
            raise ValueError(self.refuse)

    async def register_plugin(self, name: str, endpoint: str, versions: Sequence[str],
                              client_timeout: float | None) -> None:
        self.events.append(("register", name, endpoint, tuple(versions), client_timeout))
        if self.fail:
            raise RuntimeError(self.fail)
        self.registered[name] = endpoint

    async def deregister_plugin(self, name: str, endpoint: str) -> None:
        self.events.append(("deregister", name, endpoint))
        self.registered.pop(name, None)


@pytest.fixture
def handler() -> Handler:
    return Handler()


@pytest.fixture
async def manager(registry: str, handler: Handler) -> AsyncIterator[PluginManager]:
    pm = PluginManager(registry, period=0.05, dial_timeout=0.5)
    pm.add_handler(cache.CSI_PLUGIN, handler)
    task = asyncio.create_task(pm.run())
    yield pm
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


@contextlib.asynccontextmanager
async def serving(registrar: FakeRegistrar) -> AsyncIterator[FakeRegistrar]:
    await registrar.start()
    try:
        yield registrar
    finally:
        await registrar.stop()


async def _eventually(check: Any, within: float = 5.0) -> None:
    """Poll every 20 ms, `within` seconds at most: the manager works in its own task."""
    async with asyncio.timeout(within):
        for _ in iter(lambda: bool(check()), True):
            await asyncio.sleep(0.02)


async def test_a_plugin_registers_and_is_told(registry: str, handler: Handler, manager: PluginManager) -> None:
    path = os.path.join(registry, "fake-reg.sock")
    async with serving(FakeRegistrar(path, endpoint="/plugins/fake/csi.sock", versions=("1.0.0", "1.5.0"))) as reg:
        await _eventually(lambda: reg.statuses)
        assert reg.statuses == [(True, "")]
        assert handler.events == [("validate", "fake.csi.k8s.io", "/plugins/fake/csi.sock", ("1.0.0", "1.5.0")),
                                  ("register", "fake.csi.k8s.io", "/plugins/fake/csi.sock", ("1.0.0", "1.5.0"),
                                   None)]
        [info] = manager.actual.values()
        assert (info.socket_path, info.type, info.name, info.endpoint) == (path, "CSIPlugin", "fake.csi.k8s.io",
                                                                          "/plugins/fake/csi.sock")
        await asyncio.sleep(0.2)  # later rounds leave a registered plugin alone
        assert reg.get_info_calls == 1 and len(handler.events) == 2
    # the socket is gone (the registrar stopped and removed it): deregistered
    await _eventually(lambda: handler.events[-1][0] == "deregister")
    assert handler.events[-1] == ("deregister", "fake.csi.k8s.io", "/plugins/fake/csi.sock")
    assert manager.actual == {} and manager.desired == {}


async def test_the_endpoint_defaults_to_the_registration_socket(registry: str, handler: Handler,
                                                                manager: PluginManager) -> None:
    path = os.path.join(registry, "sub", "fake-reg.sock")  # subdirectories are watched too
    async with serving(FakeRegistrar(path)) as reg:
        await _eventually(lambda: reg.statuses)
    assert handler.events[1][2] == path


async def test_a_plugin_made_again_is_unregistered_then_registered(registry: str, handler: Handler,
                                                                   manager: PluginManager) -> None:
    path = os.path.join(registry, "fake-reg.sock")
    first = FakeRegistrar(path, endpoint="/e1")
    async with serving(first):
        await _eventually(lambda: first.statuses)
        await first.stop()  # gone and back before the next round sees it gone
        second = FakeRegistrar(path, endpoint="/e2")
        async with serving(second):
            await _eventually(lambda: second.statuses)
            assert second.statuses == [(True, "")]
    kinds = [(e[0], e[2]) for e in handler.events]
    assert kinds[:5] == [("validate", "/e1"), ("register", "/e1"), ("deregister", "/e1"), ("validate", "/e2"),
                         ("register", "/e2")]


@pytest.mark.parametrize(("plugin_type", "refuse", "fail", "told", "events"), [
    pytest.param("DevicePlugin", "", "", "RegisterPlugin error -- no handler registered for plugin type: "
                 "DevicePlugin at socket {path}", [], id="no handler for the type"),
    pytest.param("CSIPlugin", "unsupported version", "", "RegisterPlugin error -- plugin validation failed with "
                 "err: unsupported version", ["validate"], id="validation refused"),
    pytest.param("CSIPlugin", "", "NodeGetInfo failed", "RegisterPlugin error -- plugin registration failed with "
                 "err: NodeGetInfo failed", ["validate", "register"], id="registration failed"),
])
async def test_refusals_are_told_to_the_plugin_and_retried_with_backoff(
        registry: str, handler: Handler, manager: PluginManager, plugin_type: str, refuse: str, fail: str,
        told: str, events: list[str]) -> None:
    handler.refuse, handler.fail = refuse, fail
    path = os.path.join(registry, "fake-reg.sock")
    async with serving(FakeRegistrar(path, type=plugin_type)) as reg:
        await _eventually(lambda: reg.statuses)
        assert reg.statuses[0] == (False, told.format(path=path))
        assert [e[0] for e in handler.events] == events
        assert manager.actual == {}
        # tried again once the backoff allows it (500 ms, then 1 s ...), never in every round
        await asyncio.sleep(0.3)
        assert len(reg.statuses) == 1
        await _eventually(lambda: len(reg.statuses) == 2, within=3.0)
        assert reg.statuses[1] == reg.statuses[0]
        handler.refuse = handler.fail = ""
        if plugin_type == "CSIPlugin":  # fixed: the next try (after 1 s) registers it
            await _eventually(lambda: reg.statuses[-1] == (True, ""), within=5.0)
            assert manager.actual


async def test_the_operation_error_is_upstreams(registry: str, handler: Handler, caplog: Any) -> None:
    """The operation's error (logged with the backoff) is upstream's, "failed to send error" even when it was
    sent."""
    handler.refuse = "nope"
    pm = PluginManager(registry, period=10, dial_timeout=0.5)
    pm.add_handler(cache.CSI_PLUGIN, handler)
    path = os.path.join(registry, "fake-reg.sock")
    async with serving(FakeRegistrar(path)) as reg:
        os.makedirs(registry, exist_ok=True)
        with caplog.at_level("ERROR"):
            await pm.reconcile()
            await pm.executor.wait()
        assert reg.statuses == [(False, "RegisterPlugin error -- plugin validation failed with err: nope")]
    assert (f'Operation for "{path}" failed. No retries permitted for 0.5s (durationBeforeRetry 0.5s). Error: '
            f"RegisterPlugin error -- failed to send error at socket {path}, err: RegisterPlugin error -- plugin "
            f"validation failed with err: nope") in caplog.text
    await pm.executor.stop()


async def test_a_failed_success_notification_deregisters(registry: str, handler: Handler, caplog: Any) -> None:
    pm = PluginManager(registry, period=10, dial_timeout=0.5)
    pm.add_handler(cache.CSI_PLUGIN, handler)
    path = os.path.join(registry, "fake-reg.sock")
    registrar = FakeRegistrar(path)
    registrar.fail_notify = (grpc.StatusCode.INTERNAL, "cannot take it")
    async with serving(registrar):
        with caplog.at_level("ERROR"):
            await pm.reconcile()
            await pm.executor.wait()
    assert [e[0] for e in handler.events] == ["validate", "register", "deregister"]
    assert pm.actual == {}
    assert (f"RegisterPlugin error -- failed to send registration status at socket {path}, err: : rpc error: "
            f"code = Internal desc = cannot take it") in caplog.text


async def test_a_socket_nobody_serves_fails_to_dial(registry: str, handler: Handler, caplog: Any) -> None:
    pm = PluginManager(registry, period=10, dial_timeout=0.3)
    pm.add_handler(cache.CSI_PLUGIN, handler)
    path = os.path.join(registry, "stale-reg.sock")
    with _bind(path), caplog.at_level("ERROR"):  # bound, never listening: connections are refused
        await pm.reconcile()
        await pm.executor.wait()
    assert handler.events == []
    assert cache.dial_failed(path) in caplog.text
    await pm.reconcile()  # within the backoff: not tried again
    assert not pm.executor.pending(path)


async def test_get_info_failure(registry: str, handler: Handler, caplog: Any) -> None:
    class Broken(FakeRegistrar):
        async def GetInfo(self, request: Any, context: Any) -> Any:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "not ready")

    pm = PluginManager(registry, period=10, dial_timeout=0.5)
    pm.add_handler(cache.CSI_PLUGIN, handler)
    path = os.path.join(registry, "fake-reg.sock")
    async with serving(Broken(path)) as reg:
        with caplog.at_level("ERROR"):
            await pm.reconcile()
            await pm.executor.wait()
    assert reg.statuses == [] and handler.events == []
    assert cache.get_info_failed(path, "rpc error: code = Unavailable desc = not ready") in caplog.text


async def test_one_operation_per_socket(registry: str) -> None:
    executor = OperationExecutor()
    release = asyncio.Event()
    runs: list[str] = []

    async def operation() -> None:
        runs.append("run")
        await release.wait()

    assert executor.run("/r/a.sock", operation)
    assert not executor.run("/r/a.sock", operation)  # upstream's AlreadyExists
    assert executor.run("/r/b.sock", operation)
    assert executor.pending("/r/a.sock")
    release.set()
    await executor.wait()
    assert runs == ["run", "run"] and not executor.pending("/r/a.sock")
    assert executor.run("/r/a.sock", operation)  # a success leaves no backoff
    await executor.stop()


async def test_the_manager_makes_its_directory(registry: str) -> None:
    pm = PluginManager(registry, period=0.05)
    task = asyncio.create_task(pm.run())
    await _eventually(lambda: os.path.isdir(registry))
    assert os.stat(registry).st_mode & 0o777 == 0o750
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
