"""kopflet.server.healthz_server: the checks run for a healthz request, and the plain HTTP server on the healthz
port (upstream's cmd/kubelet/app/server.go: ping alone, no authentication, bound again every 5 s until it can be),
over real sockets on 127.0.0.1 and kernel-chosen ports."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Callable

import pytest

from kopflet.logs.verbosity import v
from kopflet.server import healthz_server
from kopflet.server.healthz_server import HealthzServer
from kopflet.watchdog.health_checker import Check, ping

TEXT = "text/plain; charset=utf-8"
SLOW = "sync Loop took longer than expected"


async def call(port: int, method: str, target: str, *headers: str) -> tuple[int, dict[str, str], bytes]:
    """One request on a connection of its own (Connection: close): status, headers (lower-case, Date left out),
    body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        head = "".join(f"{h}\r\n" for h in ("Host: 127.0.0.1", "Connection: close", *headers))
        writer.write(f"{method} {target} HTTP/1.1\r\n{head}\r\n".encode())
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()
    raw_head, _, body = data.partition(b"\r\n\r\n")
    lines = raw_head.decode("latin-1").split("\r\n")
    fields = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split(" ")[1]), {k.lower(): v for k, v in fields.items() if k.lower() != "date"}, body


@contextlib.asynccontextmanager
async def serving(checks: tuple[Check, ...] = healthz_server.PING_ONLY) -> AsyncIterator[HealthzServer]:
    server = HealthzServer("127.0.0.1", 0, checks)
    server.start()
    try:
        await asyncio.wait_for(server.wait_serving(), 5)
        yield server
    finally:
        await server.close()


OK = {"content-type": TEXT, "x-content-type-options": "nosniff", "content-length": "2", "connection": "close"}


@pytest.mark.parametrize(("method", "target", "status", "headers", "body"), [
    ("GET", "/healthz", 200, OK, b"ok"),
    ("POST", "/healthz", 200, OK, b"ok"),
    ("HEAD", "/healthz", 200, OK, b""),
    ("GET", "/healthz?verbose", 200, {**OK, "content-length": "32"}, b"[+]ping ok\nhealthz check passed\n"),
    ("GET", "/healthz?verbose=0&exclude=log", 200, {**OK, "content-length": "98"},
     b'[+]ping ok\nwarn: some health checks cannot be excluded: no matches for "log"\nhealthz check passed\n'),
    ("GET", "/healthz/ping", 200, {"content-type": TEXT, "content-length": "2", "connection": "close"}, b"ok"),
    ("GET", "/healthz/syncloop", 404, {**OK, "content-length": "19"}, b"404 page not found\n"),
    ("GET", "/healthz/", 404, {**OK, "content-length": "19"}, b"404 page not found\n"),
    ("GET", "/", 404, {**OK, "content-length": "19"}, b"404 page not found\n"),
    ("GET", "/pods", 404, {**OK, "content-length": "19"}, b"404 page not found\n"),
    ("GET", "/healthz//ping", 307, {"content-type": "text/html; charset=utf-8", "location": "/healthz/ping",
                                    "content-length": "49", "connection": "close"},
     b'<a href="/healthz/ping">Temporary Redirect</a>.\n\n'),
])
async def test_the_healthz_port_answers_as_upstreams(method: str, target: str, status: int,
                                                     headers: dict[str, str], body: bytes) -> None:
    async with serving() as server:
        assert await call(server.port, method, target) == (status, headers, body)


async def test_the_healthz_port_keeps_connections_alive_and_refuses_bad_requests() -> None:
    async with serving() as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\nGET /healthz/ping HTTP/1.1\r\nHost: a\r\n"
                     b"Connection: close\r\n\r\n")
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        assert data.count(b"HTTP/1.1 200 OK") == 2 and data.endswith(b"\r\n\r\nok")
        status, _, _ = await call(server.port, "GET", "/healthz", "Host: b")  # two Host headers
        assert status == 400


async def test_the_healthz_port_runs_only_its_own_checks() -> None:
    """Whatever the node's state, the port's checks are the ones it was given (upstream: ping alone)."""
    asked: list[str] = []

    def failing() -> str:
        asked.append("syncloop")
        return SLOW
    async with serving() as server:
        assert (await call(server.port, "GET", "/healthz"))[2] == b"ok"
    async with serving((("ping", ping), ("syncloop", failing))) as server:
        assert (await call(server.port, "GET", "/healthz"))[0] == 500
        assert asked == ["syncloop"]


async def test_a_taken_port_is_logged_and_tried_again_until_it_is_free(caplog: pytest.LogCaptureFixture) -> None:
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    port = blocker.getsockname()[1]
    server = HealthzServer("127.0.0.1", port, retry_period=0.05)
    server.start()
    try:
        for _ in range(100):
            if caplog.text.count("Failed to start healthz server") >= 2:
                break
            await asyncio.sleep(0.02)
        assert caplog.text.count("Failed to start healthz server") >= 2 and not server.serving
        assert all(r.levelno == logging.ERROR for r in caplog.records if "healthz server" in r.message)
        blocker.close()
        await asyncio.wait_for(server.wait_serving(), 5)
        assert server.port == port
        assert (await call(port, "GET", "/healthz"))[2] == b"ok"
    finally:
        blocker.close()
        await server.close()
    assert not server.serving and server.port == 0
    with pytest.raises(OSError):
        await call(port, "GET", "/healthz")


async def test_close_before_it_serves_and_twice() -> None:
    server = HealthzServer("127.0.0.1", 0)
    await server.close()
    server = HealthzServer("127.0.0.1", 0)
    server.start()
    await server.close()
    await server.close()
    assert not server.serving


# --- answer: the checks a request runs, and what is logged ------------------------------------------------------

def recording(errors: dict[str, str], asked: list[str]) -> tuple[Check, ...]:
    def check(name: str) -> Callable[[], str]:
        def run() -> str:
            asked.append(name)
            return errors.get(name, "")
        return run
    return tuple((name, check(name)) for name in ("ping", "log", "syncloop", "device-plugin"))


@pytest.mark.parametrize(("path", "query", "ran"), [
    ("/healthz", {}, ["ping", "log", "syncloop", "device-plugin"]),
    ("/healthz", {"exclude": ["syncloop", "log"]}, ["ping", "device-plugin"]),
    ("/healthz/syncloop", {"exclude": ["syncloop"]}, ["syncloop"]),  # an individual check ignores the query
    ("/healthz/nope", {}, []),
    ("/metrics", {}, []),
])
def test_only_the_checks_asked_for_run(path: str, query: dict[str, list[str]], ran: list[str]) -> None:
    asked: list[str] = []
    healthz_server.answer(path, query, recording({}, asked))
    assert asked == ran


def test_a_failure_is_logged_at_v2_with_its_reason(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(1, logger=healthz_server.__name__)
    answer = healthz_server.answer("/healthz", {"exclude": ["x"]}, recording({"syncloop": SLOW}, []))
    assert answer is not None and answer.status == 500 and SLOW not in answer.body
    levels = {r.getMessage(): r.levelno for r in caplog.records}
    assert levels == {f"syncloop check failed: healthz\n[-]syncloop failed: {SLOW}\n": v(2),
                      'cannot exclude some health checks, no health checks are installed matching "x"': v(6)}


def test_a_check_that_raises_fails_with_what_it_raised() -> None:
    def broken() -> str:
        raise RuntimeError("boom")
    checks = (("ping", ping), ("broken", broken))
    root = healthz_server.answer("/healthz", {}, checks)
    assert root is not None and root.body == "[+]ping ok\n[-]broken failed: reason withheld\nhealthz check failed\n"
    alone = healthz_server.answer("/healthz/broken", {}, checks)
    assert alone is not None and (alone.status, alone.body) == (500, "internal server error: RuntimeError: boom\n")


def test_no_checks_is_ping_alone() -> None:
    """InstallPathHandler: none given, PingHealthz is installed."""
    verbose = healthz_server.answer("/healthz", {"verbose": [""]}, ())
    assert verbose is not None and verbose.body == "[+]ping ok\nhealthz check passed\n"
    ping = healthz_server.answer("/healthz/ping", {}, ())
    assert ping is not None and ping.body == "ok"
