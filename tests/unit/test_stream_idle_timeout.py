"""--streaming-connection-idle-timeout on a proxied stream: `kopflet.server.server.pipe` between real sockets.

A client, a proxy that pipes as the kubelet API does after a 101, and a backend standing for the runtime's streaming
server, all on loopback: no byte either way for the timeout closes both sides; bytes either way keep it open; 0 never
times out.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ssl
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest

from kopflet.config.settings import AgentConfig
from kopflet.server import server as srv

TIMEOUT = 0.4


@dataclasses.dataclass
class Pair:
    """The client's end of the proxied stream, and what the backend saw."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    backend_writers: list[asyncio.StreamWriter]
    backend_closed: asyncio.Event


@contextlib.asynccontextmanager
async def proxied(idle_timeout: float | None) -> AsyncIterator[Pair]:
    backend_closed = asyncio.Event()
    backend_writers: list[asyncio.StreamWriter] = []

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        backend_writers.append(writer)
        try:
            while data := await reader.read(1024):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            backend_closed.set()
            writer.close()

    backend = await asyncio.start_server(echo, "127.0.0.1", 0)
    backend_port = backend.sockets[0].getsockname()[1]

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        backend_reader, backend_writer = await asyncio.open_connection("127.0.0.1", backend_port)
        try:
            await srv.pipe(reader, writer, backend_reader, backend_writer, idle_timeout=idle_timeout)
        finally:
            backend_writer.close()
            writer.close()

    front = await asyncio.start_server(proxy, "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", front.sockets[0].getsockname()[1])
    try:
        yield Pair(reader, writer, backend_writers, backend_closed)
    finally:
        writer.close()
        for server in (front, backend):
            server.close()
            await server.wait_closed()


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    """Whether the client's side reaches EOF within `seconds` (anything still arriving is read and dropped)."""
    try:
        async with asyncio.timeout(seconds):
            while await reader.read(1024):
                pass
    except TimeoutError:
        return False
    return True


async def test_an_idle_stream_is_closed_on_both_sides() -> None:
    async with proxied(TIMEOUT) as pair:
        pair.writer.write(b"ping")
        assert await asyncio.wait_for(pair.reader.readexactly(4), 5) == b"ping"
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await closed_within(pair.reader, 5)
        assert TIMEOUT * 0.9 <= loop.time() - started < TIMEOUT + 2
        await asyncio.wait_for(pair.backend_closed.wait(), 5)


@pytest.mark.parametrize("direction", ["client to backend", "backend to client"])
async def test_bytes_either_way_keep_it_open(direction: str) -> None:
    async with proxied(TIMEOUT) as pair:
        pair.writer.write(b"x")
        await asyncio.wait_for(pair.reader.readexactly(1), 5)
        for _ in range(6):  # 6 x TIMEOUT/2: well past one timeout, never idle for one
            await asyncio.sleep(TIMEOUT / 2)
            if direction == "client to backend":
                pair.writer.write(b"y")
                await asyncio.wait_for(pair.reader.readexactly(1), 5)  # the echo: both ways alive
            else:
                pair.backend_writers[0].write(b"z")
                assert await asyncio.wait_for(pair.reader.readexactly(1), 5) == b"z"
        assert not pair.backend_closed.is_set()
        assert await closed_within(pair.reader, 5)  # then silent: closed after all


async def test_zero_means_no_timeout() -> None:
    async with proxied(0.0) as pair:
        pair.writer.write(b"ping")
        await asyncio.wait_for(pair.reader.readexactly(4), 5)
        assert not await closed_within(pair.reader, TIMEOUT * 3)
        pair.writer.write(b"still")
        assert await asyncio.wait_for(pair.reader.readexactly(5), 5) == b"still"
        pair.writer.close()  # the client leaving ends it
        await asyncio.wait_for(pair.backend_closed.wait(), 5)


async def test_no_timeout_given_is_the_4h_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Server built without one (and `pipe` called without one) uses STREAM_IDLE_TIMEOUT, upstream's 4h."""
    assert srv.STREAM_IDLE_TIMEOUT == 4 * 3600.0
    monkeypatch.setattr(srv, "STREAM_IDLE_TIMEOUT", TIMEOUT)
    async with proxied(None) as pair:
        pair.writer.write(b"ping")
        await asyncio.wait_for(pair.reader.readexactly(4), 5)
        assert await closed_within(pair.reader, 5)


@pytest.mark.parametrize("seconds", [0.0, 300.0, 4 * 3600.0])
async def test_serve_takes_the_setting(seconds: float) -> None:
    config = AgentConfig(node_name="n", address="127.0.0.1", port=0, streaming_connection_idle_timeout=seconds)
    server = await srv.serve(config, cast(Any, None), cast(Any, None), cast(Any, None),
                             tls=ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
    try:
        assert server.stream_idle_timeout == seconds
    finally:
        await server.close()
