"""The hostile-request corpus (tests/hostile_requests.py) against kopflet's kubelet API server in-process, over
TLS on 127.0.0.1: every case gets its answer, and the server answers a normal request after each one. Then the
timing cases, with the server's timeouts shortened: a slow-loris head and a slow body get 408 while other clients
are served, connections that never start TLS or stay idle are closed, a client that stops reading is cut, a piped
session idle too long ends, a failing handler still answers 500, and plain HTTP to the TLS port is refused.

The backend is the agent's own (kopflet.server.backend.AgentBackend), with a pod list and a runtime that fails the
test if it is reached at all: no hostile request may make the agent ask the runtime for anything.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import ssl
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest

from kopflet.config.settings import AgentConfig
from kopflet.server import auth_rules
from kopflet.server import http as kubelet_http
from kopflet.server import server as srv
from kopflet.server.auth_reviews import Authenticator
from kopflet.server.backend import AgentBackend
from tests import hostile_requests as hostile
from tests.unit import test_server
from tests.unit.test_server import NODE, Pki, RecordingAuthorizer, StreamingServer
from tests.unit.test_server_auth import FakeKube

pki = test_server.pki  # the session's serving certificate and client CA (a fixture)

T = TypeVar("T")
CLIENTS = ThreadPoolExecutor(max_workers=64, thread_name_prefix="hostile-client")
"""The raw clients block: each runs in a thread of its own (asyncio's default pool has too few for 20 slow ones
and a normal client at once)."""


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    return await asyncio.get_running_loop().run_in_executor(CLIENTS, functools.partial(fn, *args))


POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "ns", "uid": "u-1"},
       "spec": {"containers": [{"name": "c"}]}, "status": {}}


class LoudRuntime:
    """The CRI client, the runtime cache and the stats: any use of them is recorded and fails the request."""

    def __init__(self) -> None:
        self.touched: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.touched.append(name)
        raise AssertionError(f"the runtime was reached ({name})")


class Workers:
    """The pods the agent holds (PodWorkers.bodies)."""

    def __init__(self) -> None:
        self.pods: list[Mapping[str, Any]] = [POD]

    def bodies(self) -> Iterator[Mapping[str, Any]]:
        return iter(self.pods)


class Harness:
    def __init__(self, server: srv.Server, runtime: LoudRuntime, workers: Workers, pki: Pki) -> None:
        self.server, self.runtime, self.workers = server, runtime, workers
        self.context = hostile.tls_context(pki.serving_cert, pki.client)

    @property
    def port(self) -> int:
        return self.server.port

    async def run(self, case: hostile.Case) -> hostile.Answer:
        return await in_thread(hostile.run, case, self.port, self.context)

    async def get(self, target: str, *headers: str) -> hostile.Answer:
        return await in_thread(hostile.get, self.port, self.context, target, *headers)

    async def alive(self) -> None:
        """The server answers a normal request, and an authorized one that reads the agent's pods."""
        answer = await self.get("/healthz")
        assert (answer.status, answer.text) == (200, "ok")
        assert (await self.get("/pods")).status == 200


async def start(pki: Pki) -> Harness:
    runtime, workers = LoudRuntime(), Workers()
    backend = AgentBackend(workers, runtime, runtime, runtime, runtime)  # type: ignore[arg-type]
    # the corpus's /logs/ cases are upstream's with its defaults (enableSystemLogHandler on: the /var/log file server)
    config = AgentConfig(node_name=NODE, address="127.0.0.1", port=0, client_ca_file=pki.ca)
    authenticator = Authenticator(FakeKube(), client_certificates=True, webhook=False, anonymous=False)
    tls = srv.tls_context(pki.serving_cert, pki.serving_key, pki.ca)
    server = await srv.serve(config, backend, authenticator, RecordingAuthorizer(), tls=tls)
    return Harness(server, runtime, workers, pki)


@pytest.fixture(scope="module")
async def h(pki: Pki) -> AsyncIterator[Harness]:
    """One server for the whole corpus: it must keep serving through all of it."""
    harness = await start(pki)
    try:
        yield harness
    finally:
        await harness.server.close(grace=1.0)


# --------------------------------------------------------------------------------------------------- the corpus

@pytest.mark.parametrize("case", hostile.CASES, ids=str)
async def test_hostile_request(h: Harness, case: hostile.Case) -> None:
    await h.run(case)
    assert h.runtime.touched == [], f"{case.id} reached the runtime"
    await h.alive()


def test_the_corpus_covers_every_category() -> None:
    counts: dict[str, int] = {}
    for case in hostile.CASES:
        counts[case.category] = counts.get(case.category, 0) + 1
    assert set(counts) == {"head", "body", "malformed", "logs", "containerLogs", "upgrade"}, counts
    assert len({case.id for case in hostile.CASES}) == len(hostile.CASES)
    assert all(case.upstream for case in hostile.CASES)


async def test_a_good_upgrade_still_reaches_the_streaming_server(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """The handshake checks refuse only what the streaming server would: a right one goes through."""
    calls: list[tuple[str, ...]] = []

    async def exec_url(namespace: str, pod: str, uid: str | None, container: str, command: list[str],
                       **_: bool) -> str:
        calls.append((namespace, pod, container))
        return streaming.url

    def upgrade(headers: tuple[str, ...], method: str) -> int:
        with hostile.connect(h.port, h.context) as sock:
            sock.sendall(hostile.request(hostile.EXEC, *headers, method=method))
            return hostile.read_answer(sock, head_only=True).status

    async with StreamingServer() as streaming:
        monkeypatch.setattr(h.server.backend, "exec_url", exec_url)
        assert await in_thread(upgrade, hostile.SPDY_EXEC, "POST") == 101
        assert await in_thread(upgrade, (*hostile.WEBSOCKET, "Sec-WebSocket-Protocol: v4.channel.k8s.io"),
                                       "GET") == 101
        assert await in_thread(upgrade, hostile.WEBSOCKET, "GET") == 101  # a WebSocket may name none
    assert calls == [("ns", "p", "c")] * 3


# ------------------------------------------------------------------------------------------------ slow clients


async def test_slow_loris_gets_408_while_others_are_served(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """Twenty clients send their heads a byte a second; the server times each out (408) and serves everyone else
    meanwhile (upstream sets no ReadHeaderTimeout: its 4h ReadTimeout would hold them)."""
    monkeypatch.setattr(kubelet_http, "HEAD_TIMEOUT", 3.0)
    head = hostile.request("/healthz", "X-Slow: " + "s" * 50)
    slow = [asyncio.ensure_future(in_thread(hostile.slow_loris, h.port, h.context, head, 1.0)) for _ in range(20)]
    await asyncio.sleep(0.5)
    for _ in range(5):
        started = time.monotonic()
        await h.alive()
        assert time.monotonic() - started < 3.0, "a normal client waited behind the slow ones"
        await asyncio.sleep(0.3)
    for answer, took in await asyncio.gather(*slow):
        assert (answer.status, answer.text, answer.header("connection")) == (408, "408 Request Timeout", "close")
        assert 2.5 < took < 6, took
    await h.alive()


def slow_body(port: int, context: ssl.SSLContext) -> tuple[hostile.Answer, float]:
    """A whole head announcing 10 bytes of body, 3 of them sent, then nothing."""
    started = time.monotonic()
    with hostile.connect(port, context) as sock:
        sock.sendall(hostile.request("/healthz", "Content-Length: 10", method="POST", body=b"abc"))
        answer = hostile.read_answer(sock, timeout=30)
        assert hostile.is_closed(sock)
        return answer, time.monotonic() - started


async def test_a_body_shorter_than_its_length_gets_408(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kubelet_http, "HEAD_TIMEOUT", 2.0)
    pending = asyncio.ensure_future(in_thread(slow_body, h.port, h.context))
    await asyncio.sleep(0.5)
    await h.alive()
    answer, took = await pending
    assert (answer.status, answer.text) == (408, "408 Request Timeout")
    assert 1.5 < took < 5, took
    await h.alive()


def silent(port: int, seconds: float) -> float:
    """A TCP connection that never starts TLS: how long until the server hangs up (or ``seconds``)."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=seconds) as sock:
        try:
            while sock.recv(1024):
                pass
        except TimeoutError:
            pass
        except ConnectionError:
            pass
    return time.monotonic() - started


async def test_connections_that_never_start_tls_are_closed(pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(srv, "HANDSHAKE_TIMEOUT", 1.0)  # read when the server starts
    harness = await start(pki)
    try:
        waits = [asyncio.ensure_future(in_thread(silent, harness.port, 10)) for _ in range(20)]
        await asyncio.sleep(0.2)
        await harness.alive()
        for took in await asyncio.gather(*waits):
            assert took < 5, "a connection without a TLS handshake was kept"
        await harness.alive()
    finally:
        await harness.server.close(grace=1.0)


async def test_an_idle_kept_alive_connection_is_closed_without_an_answer(
        h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kubelet_http, "IDLE_TIMEOUT", 1.0)

    def idle() -> tuple[int, bool, float]:
        with hostile.connect(h.port, h.context) as sock:
            sock.sendall(hostile.request("/healthz"))
            status = hostile.read_answer(sock).status
            started = time.monotonic()
            closed = hostile.is_closed(sock, timeout=10)  # no answer, only the end of the connection
            return status, closed, time.monotonic() - started

    status, closed, took = await in_thread(idle)
    assert (status, closed) == (200, True) and took < 5


async def test_a_client_that_stops_reading_is_cut(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pipelined requests for a large answer, never read: the write times out and the connection is aborted
    (what was asked is never all sent), while others are served meanwhile."""
    monkeypatch.setattr(kubelet_http, "WRITE_TIMEOUT", 1.0)
    answer_size = 8 * hostile.MIB
    h.workers.pods = [{**POD, "metadata": {**POD["metadata"], "annotations": {"a": "x" * answer_size}}}]
    connections = len(h.server._connections)

    def drain(sock: ssl.SSLSocket) -> int:
        received = 0
        sock.settimeout(10)
        try:
            while chunk := sock.recv(65536):
                received += len(chunk)
        except (ConnectionError, ssl.SSLError):
            pass
        return received

    try:
        sock = await in_thread(hostile.connect, h.port, h.context)
        try:
            await in_thread(sock.sendall, hostile.request("/pods") * 4)
            await asyncio.sleep(0.3)
            h.workers.pods = [POD]
            await h.alive()
            deadline = time.monotonic() + 10
            while len(h.server._connections) > connections:
                assert time.monotonic() < deadline, "the stalled connection was kept"
                await asyncio.sleep(0.1)
            assert await in_thread(drain, sock) < 4 * answer_size
        finally:
            sock.close()
    finally:
        h.workers.pods = [POD]
    await h.alive()


async def test_an_idle_piped_session_ends(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(h.server, "stream_idle_timeout", 1.0)  # --streaming-connection-idle-timeout=1s

    async def exec_url(*_: Any, **__: Any) -> str:
        return streaming.url

    def session() -> tuple[int, bytes, float]:
        """Upgrade, then stay silent: what came after the 101 until the server ended it, and when."""
        with hostile.connect(h.port, h.context) as sock:
            sock.sendall(hostile.request(hostile.EXEC, *hostile.SPDY_EXEC, method="POST"))
            answer = hostile.read_answer(sock, head_only=True, timeout=10)
            started = time.monotonic()
            sock.settimeout(10)
            data = b""
            while chunk := sock.recv(1024):
                data += chunk
            return answer.status, data, time.monotonic() - started

    async with StreamingServer() as streaming:
        monkeypatch.setattr(h.server.backend, "exec_url", exec_url)
        status, _, took = await in_thread(session)
        assert status == 101 and took < 5
        await asyncio.wait_for(streaming.closed.wait(), 5)


# ------------------------------------------------------------------------------------------------ the rest

async def test_a_failing_handler_answers_500_without_a_traceback(
        h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any) -> Any:
        raise RuntimeError("boom: a secret detail")

    monkeypatch.setattr(auth_rules, "request_attributes", broken)
    answer = await h.get("/healthz")
    assert (answer.status, answer.text, answer.header("connection")) == (500, "500 Internal Server Error", "close")
    monkeypatch.undo()
    await h.alive()


async def test_plain_http_to_the_tls_port_is_dropped(h: Harness) -> None:
    """Go's TLS server answers a plain-HTTP request with 400 "Client sent an HTTP request to an HTTPS server.";
    asyncio's TLS layer gives no way to answer before the handshake fails: the connection is closed."""
    assert await in_thread(hostile.plain_http, h.port) == b""
    await h.alive()
