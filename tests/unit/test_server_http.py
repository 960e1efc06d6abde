"""The kubelet API's HTTP/1.1 glue (kopflet.server.http) on an in-memory stream: what h11 leaves to us and what we
rely on h11 for (the head limits, keep-alive cycles, pipelining, HEAD, the Date header, an upgrade's early bytes).

tests/unit/test_server.py covers the same code over real TLS connections.
"""

from __future__ import annotations

import asyncio
import email.utils

import pytest

from kopflet.server import http


class Writer:
    """Enough of a StreamWriter: what was written, and a peer address."""

    def __init__(self) -> None:
        self.data = bytearray()

    def get_extra_info(self, name: str) -> object:
        return ("10.0.0.7", 40000) if name == "peername" else None

    def write(self, data: bytes) -> None:
        self.data += data

    async def drain(self) -> None:
        pass


def connection(data: bytes, *, eof: bool = True) -> tuple[http.HttpConnection, Writer]:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    if eof:
        reader.feed_eof()
    writer = Writer()
    return http.HttpConnection(reader, writer), writer  # type: ignore[arg-type]


def head_of(data: bytes) -> tuple[str, dict[str, str]]:
    lines = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    return lines[0], {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}


def request(target: str = "/healthz", *headers: str, method: str = "GET") -> bytes:
    return "\r\n".join([f"{method} {target} HTTP/1.1", "Host: a", *headers, "", ""]).encode()


async def test_a_request_and_its_body() -> None:
    conn, _ = connection(request("/x%2Dy?a=1&a=", "Content-Length: 3", "X-A: 1", "x-a: 2", method="POST") + b"abc")
    got = await conn.read_request()
    assert got is not None
    assert (got.method, got.target, got.path, got.query, got.version, got.body, got.remote) == (
        "POST", "/x%2Dy?a=1&a=", "/x-y", {"a": ["1", ""]}, "HTTP/1.1", b"abc", "10.0.0.7")
    assert got.headers["x-a"] == ["1", "2"] and got.keep_alive


async def test_responses_carry_date_and_length_and_keep_the_connection() -> None:
    conn, writer = connection(request() + request("/b", method="HEAD"))
    assert await conn.read_request() is not None
    await conn.respond(200, "ok")
    status, headers = head_of(writer.data)
    assert status == "HTTP/1.1 200 OK" and writer.data.endswith(b"\r\n\r\nok")
    assert email.utils.parsedate_to_datetime(headers["date"]) is not None  # h11 writes none; Go always does
    assert (headers["content-length"], headers["x-content-type-options"]) == ("2", "nosniff")
    assert "connection" not in headers
    # The second request came in the same read (pipelined): h11 holds it until the next cycle.
    assert conn.next_cycle()
    writer.data.clear()
    second = await conn.read_request()
    assert second is not None and second.method == "HEAD"
    await conn.respond(200, "ok")
    assert head_of(writer.data)[1]["content-length"] == "2" and writer.data.endswith(b"\r\n\r\n")  # HEAD: no body
    assert conn.next_cycle()
    assert await conn.read_request() is None  # the client closed between requests


@pytest.mark.parametrize(("data", "reason"), [
    (b"GET / HTTP/1.0\r\n\r\n", "HTTP/1.0"),
    (request("/", "Connection: close"), "the client's Connection: close"),
])
async def test_h11_closes_on_http_1_0_and_connection_close(data: bytes, reason: str) -> None:
    conn, writer = connection(data)
    assert await conn.read_request() is not None
    await conn.respond(200, "ok")
    assert head_of(writer.data)[1]["connection"] == "close", reason
    assert not conn.next_cycle()


async def test_empty_lines_before_a_request_are_ignored() -> None:
    conn, _ = connection(b"\r\n\n\r\n" + request())
    got = await conn.read_request()
    assert got is not None and got.path == "/healthz"


async def test_idle_connection_ends_without_an_answer() -> None:
    conn, writer = connection(b"", eof=False)
    assert await conn.read_request(idle_timeout=0.05) is None
    assert writer.data == b""


async def test_a_head_up_to_1_mib_of_short_lines_is_taken() -> None:
    # Go's MaxHeaderBytes is for the whole head; only a single line over 64 KiB is refused (414 or 431).
    lines = [f"X-H{i}: {'v' * 4000}" for i in range(200)]  # 800 KB
    conn, _ = connection(request("/", *lines))
    got = await conn.read_request()
    assert got is not None and len(got.headers) == 201


async def test_a_head_over_1_mib_is_431() -> None:
    lines = [f"X-H{i}: {'v' * 4500}" for i in range(250)]  # under 256 headers, over 1 MiB
    conn, _ = connection(request("/", *lines))
    with pytest.raises(http.HttpError) as refused:
        await conn.read_request()
    assert refused.value.status == 431


async def test_a_refused_head_request_is_answered_without_a_body() -> None:
    conn, writer = connection(request("/", "Content-Length: 99999999", method="HEAD"))
    with pytest.raises(http.HttpError) as refused:
        await conn.read_request()
    await conn.respond(refused.value.status, refused.value.message, close=True)
    status, headers = head_of(writer.data)
    assert (status, headers["connection"]) == ("HTTP/1.1 413 Request Entity Too Large", "close")
    assert writer.data.endswith(b"\r\n\r\n")


async def test_expect_100_continue_leaves_the_body_unread_and_closes() -> None:
    conn, writer = connection(request("/", "Content-Length: 3", "Expect: 100-continue"), eof=False)
    got = await conn.read_request()
    assert got is not None and (got.body, got.unread_body, got.keep_alive) == (b"", 3, False)
    await conn.respond(200, "ok", close=not got.keep_alive)
    assert b"100 Continue" not in writer.data and head_of(writer.data)[1]["connection"] == "close"
    assert not conn.next_cycle()


@pytest.mark.parametrize(("data", "chunked", "body"), [
    (request(), True, b"2\r\nhi\r\n0\r\n\r\n"),
    (b"GET / HTTP/1.0\r\n\r\n", False, b"hi"),  # HTTP/1.0 has no chunks: the body ends with the connection
])
async def test_streamed_responses_are_chunked(data: bytes, chunked: bool, body: bytes) -> None:
    conn, writer = connection(data)
    assert await conn.read_request() is not None
    await conn.start_chunked(200, http.TEXT)
    await conn.chunk(b"hi")
    await conn.chunk(b"")
    await conn.end_chunked()
    head, _, sent = bytes(writer.data).partition(b"\r\n\r\n")
    assert (sent, b"Transfer-Encoding: chunked" in head, b"Connection: close" in head) == (body, chunked, True)
