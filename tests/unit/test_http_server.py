"""kopflet.server.http_server: the connection loop the kubelet API and the healthz port share (Go's http.Server:
requests one at a time, keep-alive, refusals, Shutdown's graceful close), with a small handler over real plain
sockets on 127.0.0.1 and kernel-chosen ports. tests/unit/test_server*.py cover it again behind TLS and the kubelet
API's routes, tests/unit/test_healthz_server.py behind the healthz port's."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator

import pytest

from kopflet.server.http import HttpConnection, Request
from kopflet.server.http_server import HttpServer

logger = logging.getLogger("tests.http_server")


class Echo(HttpServer[HttpConnection]):
    """Answers the path; ``/hold`` waits for `release`, ``/raise`` fails, ``/last`` ends the connection."""

    log_name = "echo connection"
    logger = logger

    def __init__(self) -> None:
        super().__init__(HttpConnection)
        self.seen: list[tuple[int, str, bool]] = []
        """Per request: which connection (its id), the path, and the keep the loop handed over."""
        self.holding = asyncio.Event()
        self.release = asyncio.Event()

    async def _handle(self, connection: HttpConnection, request: Request, keep: bool) -> bool:
        self.seen.append((id(connection), request.path, keep))
        if request.path == "/hold":
            self.holding.set()
            await self.release.wait()
        if request.path == "/raise":
            raise RuntimeError("a bug")
        await connection.respond(200, request.path, close=not keep)
        return keep and request.path != "/last"


@contextlib.asynccontextmanager
async def echo() -> AsyncIterator[tuple[Echo, int]]:
    server = Echo()
    listening = await server._listen("127.0.0.1", 0)
    try:
        yield server, int(listening.sockets[0].getsockname()[1])
    finally:
        await server.close(grace=0.5)


async def exchange(port: int, data: bytes) -> bytes:
    """Send `data`, then read until the server closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()


def get(path: str, *headers: str) -> bytes:
    return "".join(f"{line}\r\n" for line in (f"GET {path} HTTP/1.1", "Host: a", *headers, "")).encode()


def statuses(data: bytes) -> list[str]:
    """The status lines in what a connection received (a body has no line end before the next answer)."""
    return [line.decode() for line in re.findall(rb"HTTP/1\.1 [0-9]{3} [^\r]*", data)]


@pytest.mark.parametrize(("data", "status", "body"), [
    (b"GET /a\r\n\r\n", "HTTP/1.1 400 Bad Request", b"400 Bad Request"),  # no HTTP version
    (b"GET /a HTTP/2.0\r\nHost: a\r\n\r\n", "HTTP/1.1 505 HTTP Version Not Supported",
     b"505 HTTP Version Not Supported: unsupported protocol version"),
    (b"GET /a HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request", b"400 Bad Request: missing required Host header"),
    (b"GET http://a/b HTTP/1.1\r\nHost: a\r\n\r\n", "HTTP/1.1 400 Bad Request", b"400 Bad Request"),
])
async def test_a_request_that_cannot_be_read_is_answered_and_the_connection_closed(data: bytes, status: str,
                                                                                   body: bytes) -> None:
    async with echo() as (server, port):
        answer = await exchange(port, data + get("/after"))  # a request after it is never read
    assert statuses(answer) == [status]
    assert b"\r\nConnection: close\r\n" in answer and answer.endswith(b"\r\n\r\n" + body)
    assert server.seen == []


@pytest.mark.parametrize(("requests", "paths", "closed"), [
    # two requests on one connection, the last one asking to close it
    ([get("/a"), get("/b", "Connection: close")], ["/a", "/b"], [False, True]),
    # the handler ends the connection: what follows is not read
    ([get("/last"), get("/b")], ["/last"], [False]),
    # HTTP/1.0 closes after its one request
    ([b"GET /a HTTP/1.0\r\n\r\n", get("/b")], ["/a"], [True]),
])
async def test_keep_alive_serves_requests_one_after_another(requests: list[bytes], paths: list[str],
                                                            closed: list[bool]) -> None:
    async with echo() as (server, port):
        answer = await exchange(port, b"".join(requests))
    assert [path for _, path, _ in server.seen] == paths
    assert len({connection for connection, _, _ in server.seen}) == 1
    assert len(statuses(answer)) == len(paths)
    heads = re.split(rb"HTTP/1\.1 [0-9]{3} ", answer)[1:]
    assert [b"\r\nConnection: close\r\n" in head for head in heads] == closed


async def test_close_lets_a_request_in_flight_finish_and_cuts_idle_connections_at_once() -> None:
    async with echo() as (server, port):
        busy_reader, busy_writer = await asyncio.open_connection("127.0.0.1", port)
        idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", port)
        busy_writer.write(get("/hold"))
        idle_writer.write(get("/a"))
        await asyncio.gather(busy_writer.drain(), idle_writer.drain())
        assert (await idle_reader.readuntil(b"\r\n\r\n/a")).startswith(b"HTTP/1.1 200 OK")
        await asyncio.wait_for(server.holding.wait(), 5)
        closing = asyncio.create_task(server.close(grace=5))
        assert await asyncio.wait_for(idle_reader.read(), 1) == b""  # idle: cut without waiting for the grace
        assert not closing.done()
        server.release.set()
        answer = await asyncio.wait_for(busy_reader.read(), 5)  # answered, then closed: no next request
        await asyncio.wait_for(closing, 5)
        for writer in (busy_writer, idle_writer):
            writer.close()
    assert statuses(answer) == ["HTTP/1.1 200 OK"] and answer.endswith(b"\r\n\r\n/hold")
    assert [keep for _, _, keep in server.seen] == [True, True]  # both began before close


async def test_close_cuts_a_request_still_in_flight_after_the_grace() -> None:
    async with echo() as (server, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(get("/hold"))
        await writer.drain()
        await asyncio.wait_for(server.holding.wait(), 5)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.wait_for(server.close(grace=0.2), 5)
        assert 0.2 <= loop.time() - started < 2
        assert await asyncio.wait_for(reader.read(), 5) == b""  # cut, no answer
        writer.close()
    with pytest.raises(OSError):
        await exchange(port, get("/a"))


async def test_a_failing_handler_is_logged_under_its_servers_name_and_answered_500(
        caplog: pytest.LogCaptureFixture) -> None:
    async with echo() as (_, port):
        answer = await exchange(port, get("/raise") + get("/after"))
    assert statuses(answer) == ["HTTP/1.1 500 Internal Server Error"]
    assert answer.endswith(b"\r\n\r\n500 Internal Server Error")
    failed = [r for r in caplog.records if "failed" in r.getMessage()]
    assert [(r.name, r.getMessage(), r.levelno) for r in failed] == [
        ("tests.http_server", "echo connection from 127.0.0.1 failed", logging.ERROR)]


async def test_a_client_going_away_is_logged_at_debug_only(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="tests.http_server")
    async with echo() as (server, port):
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /a HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nshort")  # then gone
        await writer.drain()
        writer.close()
        for _ in range(100):
            if not server._connections:
                break
            await asyncio.sleep(0.02)
    ended = [r for r in caplog.records if r.name == "tests.http_server"]
    assert [(r.levelno, r.getMessage().startswith("echo connection from 127.0.0.1 ended: ")) for r in ended] == [
        (logging.DEBUG, True)]
    assert server.seen == []
