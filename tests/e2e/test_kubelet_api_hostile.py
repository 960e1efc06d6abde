"""Hostile requests against the running agent's kubelet API on :10250, straight over TLS (the admin's client
certificate, the stack's CA for the serving certificate): the corpus of tests/hostile_requests.py, each case
answered as it names and the agent serving a normal request after every one; then slow clients with the agent's
real timeouts (a slow-loris head and a slow body get 408 within HEAD_TIMEOUT, a connection that never starts TLS
is closed after HANDSHAKE_TIMEOUT, an idle kept-alive one after IDLE_TIMEOUT) while another client is served
throughout; plain HTTP to the TLS port. Last, the agent is alive, logged no Traceback (the `running_agent`
fixture checks), and a normal pod still becomes Ready, with logs and exec working through the apiserver.

tests/unit/test_server_hostile.py runs the same corpus against the server in-process.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from devstack.layout import Layout
from kopflet.server import http as kubelet_http
from kopflet.server import server as kubelet_server
from tests import hostile_requests as hostile
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_pod_lifecycle import container, is_ready, pod_manifest, wait_pod

PORT = 10250


@pytest.fixture(scope="module")
def context(running_agent: Agent, layout: Layout) -> ssl.SSLContext:
    """As the admin (system:masters: every nodes/* subresource allowed), checking the agent's serving certificate."""
    return hostile.tls_context(str(layout.pki / "ca.crt"), (str(layout.pki / "admin.crt"),
                                                           str(layout.pki / "admin.key")))


def alive(context: ssl.SSLContext) -> None:
    """The agent answers a normal request, and an authorized one that reads its pods."""
    answer = hostile.get(PORT, context, "/healthz")
    assert (answer.status, answer.text) == (200, "ok")
    assert hostile.get(PORT, context, "/pods").status == 200


# --------------------------------------------------------------------------------------------------- the corpus

@pytest.mark.parametrize("case", hostile.CASES, ids=str)
def test_hostile_request(running_agent: Agent, context: ssl.SSLContext, case: hostile.Case,
                         record_property: Callable[[str, object], None]) -> None:
    line = case.request.split(b"\n", 1)[0].decode("latin-1").strip()
    record_property("injected", f"{case.category}: {line[:100]}{'…' if len(line) > 100 else ''} "
                                f"({len(case.request)} bytes)")
    answer = hostile.run(case, PORT, context)
    record_property("saw", f"{answer.status} {answer.text.splitlines()[0][:120] if answer.text else '(no body)'}; "
                           "the agent served the next request")
    alive(context)
    assert running_agent.proc is not None and running_agent.proc.poll() is None, f"the agent died after {case.id}"


# ------------------------------------------------------------------------------------------------ slow clients

def slow_loris(context: ssl.SSLContext, data: bytes, pause: float) -> tuple[hostile.Answer, float]:
    """`hostile.slow_loris` against the agent, waiting out its head timeout."""
    return hostile.slow_loris(PORT, context, data, pause, answer_timeout=kubelet_http.HEAD_TIMEOUT + 30)


def slow_body(context: ssl.SSLContext) -> tuple[hostile.Answer, float]:
    started = time.monotonic()
    with hostile.connect(PORT, context) as sock:
        sock.sendall(hostile.request("/healthz", "Content-Length: 10", method="POST", body=b"abc"))
        answer = hostile.read_answer(sock, timeout=kubelet_http.HEAD_TIMEOUT + 30)
        assert hostile.is_closed(sock)
        return answer, time.monotonic() - started


def silent(limit: float) -> float:
    """A TCP connection that never starts TLS: how long until the agent hangs up."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", PORT), timeout=limit) as sock:
        try:
            while sock.recv(1024):
                pass
        except (TimeoutError, ConnectionError):
            pass
    return time.monotonic() - started


def idle(context: ssl.SSLContext) -> tuple[int, bool, float]:
    """One request, then nothing: the connection must end without another answer."""
    with hostile.connect(PORT, context) as sock:
        sock.sendall(hostile.request("/healthz"))
        status = hostile.read_answer(sock).status
        started = time.monotonic()
        closed = hostile.is_closed(sock, timeout=kubelet_http.IDLE_TIMEOUT + 30)
        return status, closed, time.monotonic() - started


def test_slow_clients_time_out_while_others_are_served(running_agent: Agent, context: ssl.SSLContext,
                                                       record_property: Callable[[str, object], None]) -> None:
    """All at once, for about IDLE_TIMEOUT (90 s): ten slow-loris heads (a byte a second), a slow body, five
    connections that never start TLS and an idle one; a normal client is served every second meanwhile."""
    head = hostile.request("/healthz", "X-Slow: " + "s" * 200)  # longer than HEAD_TIMEOUT at a byte a second
    with ThreadPoolExecutor(max_workers=32) as pool:
        lorises = [pool.submit(slow_loris, context, head, 1.0) for _ in range(10)]
        body = pool.submit(slow_body, context)
        silents = [pool.submit(silent, kubelet_server.HANDSHAKE_TIMEOUT + 30) for _ in range(5)]
        idler = pool.submit(idle, context)
        deadline = time.monotonic() + kubelet_http.IDLE_TIMEOUT + 60  # each client gives up before this
        waits: list[float] = []
        while not all(f.done() for f in [*lorises, body, *silents, idler]):
            assert time.monotonic() < deadline, "a slow client never got its answer"
            started = time.monotonic()
            alive(context)
            waits.append(time.monotonic() - started)
            time.sleep(1.0)
        assert max(waits) < 5, f"a normal client waited {max(waits):.1f}s behind the slow ones"
        for future in [*lorises, body]:
            answer, took = future.result()
            assert (answer.status, answer.text, answer.header("connection")) == (408, "408 Request Timeout", "close")
            assert kubelet_http.HEAD_TIMEOUT - 5 < took < kubelet_http.HEAD_TIMEOUT + 15, took
        for took in (f.result() for f in silents):
            assert took < kubelet_server.HANDSHAKE_TIMEOUT + 15, "a connection without a TLS handshake was kept"
        status, closed, took = idler.result()
        assert (status, closed) == (200, True) and took < kubelet_http.IDLE_TIMEOUT + 15
    alive(context)
    record_property("injected", "10 slow-loris heads (a byte a second), a body shorter than its Content-Length, "
                                "5 connections without a TLS handshake, an idle kept-alive connection")
    record_property("saw", f"408 for each slow request within {kubelet_http.HEAD_TIMEOUT:.0f} s, the others "
                           f"closed; a normal client served every second (slowest {max(waits):.2f} s)")


def test_plain_http_to_the_tls_port_is_dropped(running_agent: Agent, context: ssl.SSLContext) -> None:
    """Upstream's Go TLS server answers 400 "Client sent an HTTP request to an HTTPS server."; kopflet's asyncio TLS
    layer can only close the connection. Either way the agent keeps serving."""
    assert b"200 OK" not in hostile.plain_http(PORT)
    alive(context)


# --------------------------------------------------------------------------------------------------- afterwards

def test_the_agent_is_alive_and_a_pod_still_becomes_ready(running_agent: Agent, context: ssl.SSLContext,
                                                          admin: Kubectl, layout: Layout, namespace: str) -> None:
    assert running_agent.proc is not None and running_agent.proc.poll() is None, "the agent died"
    alive(context)
    admin.apply(pod_manifest("after-hostile", namespace, layout.node_name,
                             [container("main", "echo still-here; sleep 3600")]))
    wait_pod(admin, namespace, "after-hostile", is_ready, what="Ready")
    deadline = time.monotonic() + 30
    while "still-here" not in (logs := admin.run("logs", "after-hostile", "-n", namespace, check=False).stdout):
        assert time.monotonic() < deadline, f"kubectl logs never showed the line: {logs!r}"
        time.sleep(0.5)
    # An upgrade through the apiserver (SPDY or WebSocket, as kubectl picks) still reaches the runtime.
    assert admin.run("exec", "after-hostile", "-n", namespace, "--", "echo", "exec-ok").stdout == "exec-ok\n"
