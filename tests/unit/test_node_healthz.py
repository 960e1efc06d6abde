"""The node's healthz wiring (kopflet.node): the kubelet API's ``/healthz`` runs the watchdog's checks (upstream's
InstallAuthNotRequiredHandlers and SetHealthCheckers name the same ones, with one LogHealthz per process), and
the healthz port (ping alone) is served from the end of `Node.start` to `Node.stop`."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from kopflet.server import healthz_server
from kopflet.server.healthz_server import HealthzServer
from kopflet.watchdog.health_checker import HealthChecker, LogFlushCheck
from tests.unit.test_healthz_server import call
from tests.unit.test_node import node

SYNCLOOP_FAILED = ("[+]ping ok\n[+]log ok\n[-]syncloop failed: reason withheld\n[+]device-plugin ok\n"
                   "healthz check failed\n")


def test_the_kubelet_apis_healthz_runs_the_watchdogs_checks_and_its_one_log_check() -> None:
    watchdog = HealthChecker(None)
    n = node("node-a", "/var/lib/a", watchdog=watchdog, resync_period=60.0)
    checks = n.backend.health_checks()
    assert n.log_check is watchdog.log_check and dict(checks)["log"] is watchdog.log_check
    watchdog.set_health_checkers(n.sync_loop_health_check, n.health_checkers())
    assert tuple(name for name, _ in checks) == watchdog.check_names == ("ping", "log", "syncloop", "device-plugin")
    try:
        answer = healthz_server.answer("/healthz", {}, checks)
        assert answer is not None and (answer.status, answer.body) == (200, "ok")
        n.relist.relisted_at = time.monotonic() - 301  # twice syncFrequency, at least five minutes
        answer = healthz_server.answer("/healthz", {}, checks)
        assert answer is not None and (answer.status, answer.body) == (500, SYNCLOOP_FAILED)
        answer = healthz_server.answer("/healthz/syncloop", {}, checks)
        assert answer is not None and answer.body == "internal server error: sync Loop took longer than expected\n"
        assert watchdog.check() == "checker syncloop failed: sync Loop took longer than expected"
    finally:
        watchdog.log_check.close()


def test_a_node_without_a_watchdog_has_a_log_check_of_its_own() -> None:
    a, b = node("node-a", "/var/lib/a"), node("node-b", "/var/lib/b")
    assert isinstance(a.log_check, LogFlushCheck) and a.log_check is not b.log_check
    assert dict(a.backend.health_checks())["log"] is a.log_check


def test_the_healthz_port_is_built_from_the_config_and_not_bound_in_the_constructor() -> None:
    n = node("node-a", "/var/lib/a", healthz_port=10248, healthz_bind_address="127.0.0.1")
    assert n.healthz_server is not None
    assert (n.healthz_server.host, n.healthz_server.requested_port) == ("127.0.0.1", 10248)
    assert [name for name, _ in n.healthz_server.checks] == ["ping"]
    assert not n.healthz_server.serving and n.healthz_server.port == 0
    assert node("node-b", "/var/lib/b").healthz_server is None  # healthzPort 0: none


async def _idle(*_: Any, **__: Any) -> None:
    await asyncio.Event().wait()


async def _nothing(*_: Any, **__: Any) -> Any:
    return None


async def test_start_serves_the_healthz_port_which_stays_ok_while_the_sync_loop_is_stuck(tmp_path: Path) -> None:
    """Upstream's healthz port has ping alone: kubeadm's kubelet-check passes from the start (the Node need not be
    registered: try_register failed here), and a stuck sync loop fails only the kubelet API's /healthz."""
    n = node("node-a", str(tmp_path))
    n.healthz_server = HealthzServer("127.0.0.1", 0)  # the kernel's port, never this machine's 10248
    registered: list[bool] = []

    async def no_apiserver() -> bool:
        registered.append(False)
        return False
    for part, method in ((n.cpu_manager, "start"), (n.memory_manager, "start"), (n.device_manager, "start"),
                         (n.api, "open"), (n.container_manager, "start"), (n.pod_resources, "start")):
        setattr(part, method, _nothing)
    n.heartbeat.try_register = no_apiserver  # type: ignore[method-assign]
    for part in (n.services, n.relist, n.heartbeat, n.status, n.housekeeping, n.container_gc, n.image_gc,
                 n.log_manager, n.eviction, n.oom, n.container_manager, n.cpu_manager, n.memory_manager,
                 n.pod_certificates, n.csi_node_info, n.plugin_manager):
        part.run = _idle  # type: ignore[method-assign]
    server = n.healthz_server
    try:
        await n.start()
        assert registered == [False]
        await asyncio.wait_for(server.wait_serving(), 5)
        assert (await call(server.port, "GET", "/healthz"))[::2] == (200, b"ok")
        n.relist.relisted_at = time.monotonic() - 301
        assert (await call(server.port, "GET", "/healthz?verbose"))[::2] == (
            200, b"[+]ping ok\nhealthz check passed\n")
        answer = healthz_server.answer("/healthz", {}, n.backend.health_checks())
        assert answer is not None and answer.status == 500
        port = server.port
    finally:
        await n.stop(close_runtime=False)
    assert not server.serving
    try:
        await call(port, "GET", "/healthz")
    except OSError:
        pass
    else:
        raise AssertionError("the healthz port still answers after Node.stop")
