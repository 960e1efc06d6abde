"""kopflet.prober.manager: probes run for real against local endpoints (an aiohttp server, TCP listeners, a gRPC
server, all on 127.0.0.1), exec through an injected ExecSync stand-in; and the manager's loop end to end
with sub-second periods."""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from aiohttp import web

from cri_client import CriError
from cri_client.types import ExecSyncResult
from kopflet.api.spec import ContainerPort, ContainerSpec, Pod, pod_from_body
from kopflet.container.podstate import ContainerInfo, RuntimePodStatus, State
from kopflet.logs.verbosity import v
from kopflet.prober import manager as agent_probes
from kopflet.prober import probes as p
from kopflet.prober.manager import ProbeManager, grpc_probe, tcp_probe
from kopflet.prober.probes import Kind, ProbeSpec, Result

UID = "uid-1"


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Events:
    def __init__(self) -> None:
        self.posted: list[tuple[str, str, str, str | None, bool]] = []

    def pod_event(self, pod: Any, type_: str, reason: str, message: str, container: str | None = None,
                  init: bool = False) -> None:
        self.posted.append((type_, reason, message, container, init))


class Wakes:
    def __init__(self) -> None:
        self.calls: list[set[str]] = []

    def __call__(self, uids: set[str]) -> None:
        self.calls.append(set(uids))


def answer(response: web.Response) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        return response
    return handler


def redirect(location: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        raise web.HTTPFound(location)
    return handler


class Server:
    """An aiohttp app on 127.0.0.1 whose /ready answer the test flips, recording request headers."""

    def __init__(self) -> None:
        self.ready_status = 500
        self.seen_headers: list[dict[str, str]] = []
        self.port = 0
        self.hits: dict[str, int] = {}

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/ok", self.ok)
        app.router.add_get("/ready", self.ready)
        app.router.add_get("/fail", answer(web.Response(status=503, text="secret")))
        app.router.add_get("/slow", self.slow)
        app.router.add_get("/same", redirect("/ok"))
        app.router.add_get("/elsewhere", redirect("http://elsewhere.invalid/"))
        app.router.add_get("/loop", redirect("/loop"))
        app.router.add_get("/big", answer(web.Response(body=b"y" * 50_000)))
        return app

    async def ok(self, request: web.Request) -> web.Response:
        self.seen_headers.append(dict(request.headers))
        self.hits[request.path_qs] = self.hits.get(request.path_qs, 0) + 1
        return web.Response(text="fine")

    async def ready(self, request: web.Request) -> web.Response:
        return web.Response(status=self.ready_status, text="r")

    async def slow(self, request: web.Request) -> web.Response:
        await asyncio.sleep(1)
        return web.Response(text="late")


async def _serve(server: Server, ssl_context: ssl.SSLContext | None = None) -> web.AppRunner:
    runner = web.AppRunner(server.app())
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server.port = sock.getsockname()[1]
    await web.SockSite(runner, sock, ssl_context=ssl_context).start()
    return runner


@pytest.fixture
async def http_server() -> AsyncIterator[Server]:
    server = Server()
    runner = await _serve(server)
    yield server
    await runner.cleanup()


@pytest.fixture
async def manager() -> AsyncIterator[ProbeManager]:
    mgr = ProbeManager(None, Events(), Wakes(), user_agent="kube-probe/1.31", jitter=False)
    yield mgr
    await mgr.close()


def app_container(port: int) -> ContainerSpec:
    return ContainerSpec(name="app", image="i", image_pull_policy="Never", hash="h",
                         ports=(ContainerPort(container_port=port, name="web"),))


def http_spec(path: str, port: int | str = "web", timeout: float = 1.0, **kwargs: Any) -> ProbeSpec:
    return ProbeSpec(kind=Kind.READINESS, handler=p.HTTPGetAction(port=port, path=path, **kwargs),
                     timeout_seconds=timeout)


# ------------------------------------------------------------------------------------------------- http


async def test_http_success_by_named_port_with_upstream_headers(manager: ProbeManager, http_server: Server) -> None:
    spec = http_spec("/ok", headers=(("x-probe", "1"),))
    result = await manager.run_probe(spec, app_container(http_server.port), "c1", "127.0.0.1")
    assert result == Result.success("fine")
    headers = http_server.seen_headers[-1]
    assert headers["User-Agent"] == "kube-probe/1.31"
    assert headers["Accept"] == "*/*"
    assert headers["X-Probe"] == "1"
    assert "Accept-Encoding" not in headers


@pytest.mark.parametrize(("path", "expected"), [
    ("/fail", Result.failure("HTTP probe failed with statuscode: 503")),
    ("/same", Result.success("fine")),  # a same-host redirect is followed
    ("/elsewhere", Result.warning("Probe terminated redirects, Response body: 302: Found")),
    ("/big", Result.success("y" * 10240)),
])
async def test_http_results(manager: ProbeManager, http_server: Server, path: str, expected: Result) -> None:
    assert await manager.run_probe(http_spec(path), app_container(http_server.port), "c1", "127.0.0.1") == expected


async def test_http_redirect_loop_stops_after_ten(manager: ProbeManager, http_server: Server) -> None:
    result = await manager.run_probe(http_spec("/loop"), app_container(http_server.port), "c1", "127.0.0.1")
    assert result == Result.failure(f'Get "http://127.0.0.1:{http_server.port}/loop": stopped after 10 redirects')


async def test_http_timeout(manager: ProbeManager, http_server: Server) -> None:
    started = time.monotonic()
    result = await manager.run_probe(http_spec("/slow", timeout=0.3), app_container(http_server.port), "c1",
                                     "127.0.0.1")
    assert time.monotonic() - started < 2
    assert result == Result.failure(f'Get "http://127.0.0.1:{http_server.port}/slow": context deadline exceeded '
                                    "(Client.Timeout exceeded while awaiting headers)")


async def test_http_connection_refused(manager: ProbeManager) -> None:
    port = free_port()
    result = await manager.run_probe(http_spec("/", port=port), app_container(1), "c1", "127.0.0.1")
    assert result == Result.failure(f'Get "http://127.0.0.1:{port}/": dial tcp 127.0.0.1:{port}: '
                                    "connect: connection refused")


async def test_http_unknown_port_name_is_a_prober_error(manager: ProbeManager) -> None:
    result = await manager.run_probe(http_spec("/", port="nope"), app_container(1), "c1", "127.0.0.1")
    assert result == Result.unknown('strconv.Atoi: parsing "nope": invalid syntax')


@pytest.fixture
def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A throwaway self-signed key and certificate (nobody trusts it: the probe must not verify)."""
    if shutil.which("openssl") is None:
        pytest.skip("needs openssl to make a test certificate")
    key, cert = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=nobody"], check=True, capture_output=True, timeout=60)
    return key, cert


async def test_https_skips_verification(manager: ProbeManager, self_signed: tuple[Path, Path]) -> None:
    key, cert = self_signed
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server = Server()
    runner = await _serve(server, context)
    try:
        spec = http_spec("/ok", scheme="HTTPS")
        assert await manager.run_probe(spec, app_container(server.port), "c1", "127.0.0.1") == Result.success("fine")
    finally:
        await runner.cleanup()


# -------------------------------------------------------------------------------------------------- tcp


async def test_tcp_success_and_refused() -> None:
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        assert await tcp_probe("127.0.0.1", port, 1) == Result.success()
    finally:
        server.close()
        await server.wait_closed()
    assert await tcp_probe("127.0.0.1", port, 1) == Result.failure(
        f"dial tcp 127.0.0.1:{port}: connect: connection refused")


async def test_tcp_by_named_port_through_the_manager(manager: ProbeManager) -> None:
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        spec = ProbeSpec(kind=Kind.LIVENESS, handler=p.TCPSocketAction(port="web"))
        assert await manager.run_probe(spec, app_container(port), "c1", "127.0.0.1") == Result.success()
        no_ip = await manager.run_probe(spec, app_container(port), "c1", "")
        assert no_ip.outcome is p.Outcome.UNKNOWN
    finally:
        server.close()
        await server.wait_closed()


async def test_tcp_timeout() -> None:
    """A listener whose accept queue is full: further SYNs are dropped, so connecting hangs."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(4):  # fill the queue; connects that would hang are given up quickly
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        await asyncio.sleep(0.05)
        started = time.monotonic()
        result = await tcp_probe("127.0.0.1", port, 0.3)
        if result.outcome is p.Outcome.SUCCESS:
            pytest.skip("this kernel accepted the connection despite the full backlog")
        assert time.monotonic() - started < 1.5
        assert result == Result.failure(f"dial tcp 127.0.0.1:{port}: i/o timeout")
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


# ------------------------------------------------------------------------------------------------- exec


def fake_exec(answer: Callable[[str, list[str], float], Awaitable[ExecSyncResult]]) -> tuple[
        Callable[[str, Sequence[str], float], Awaitable[ExecSyncResult]], list[tuple[str, list[str], float]]]:
    calls: list[tuple[str, list[str], float]] = []

    async def exec_sync(container_id: str, cmd: Sequence[str], timeout: float) -> ExecSyncResult:  # noqa: ASYNC109
        calls.append((container_id, list(cmd), timeout))
        return await answer(container_id, list(cmd), timeout)
    return exec_sync, calls


async def _exit(code: int, out: bytes = b"", err: bytes = b"") -> ExecSyncResult:
    return ExecSyncResult(stdout=out, stderr=err, exit_code=code)


@pytest.mark.parametrize(("answer", "expected"), [
    (lambda *_: _exit(0, b"ok\n"), Result.success("ok\n")),
    (lambda *_: _exit(2, b"out;", b"err"), Result.failure("out;err")),
])
async def test_exec(answer: Any, expected: Result) -> None:
    exec_sync, calls = fake_exec(answer)
    mgr = ProbeManager(None, None, Wakes(), exec_sync=exec_sync)
    container = ContainerSpec(name="app", image="i", image_pull_policy="Never", hash="h",
                              env=(p.spec.EnvVar(name="F", value="/tmp/x"),))
    spec = ProbeSpec(kind=Kind.LIVENESS, handler=p.ExecAction(command=("cat", "$(F)")), timeout_seconds=5)
    assert await mgr.run_probe(spec, container, "cid", "") == expected
    assert calls == [("cid", ["cat", "/tmp/x"], 5)]


async def test_exec_runtime_deadline_is_a_timed_out_failure() -> None:
    async def deadline(*_: Any) -> ExecSyncResult:
        raise CriError("DEADLINE_EXCEEDED", "context deadline exceeded", "RuntimeService/ExecSync")
    exec_sync, _ = fake_exec(deadline)
    result = await ProbeManager(None, None, Wakes(), exec_sync=exec_sync).exec_probe("c", ["sleep", "9"], 1)
    assert result == Result.failure('command "sleep 9" timed out')


async def test_exec_runtime_error_is_a_prober_error() -> None:
    async def down(*_: Any) -> ExecSyncResult:
        raise CriError("UNAVAILABLE", "connection refused", "RuntimeService/ExecSync")
    exec_sync, _ = fake_exec(down)
    result = await ProbeManager(None, None, Wakes(), exec_sync=exec_sync).exec_probe("c", ["true"], 1)
    assert result == Result.unknown("RuntimeService/ExecSync: UNAVAILABLE: connection refused")


async def test_exec_that_never_answers_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent_probes, "EXEC_GRACE", 0.1)

    async def hang(*_: Any) -> ExecSyncResult:
        await asyncio.sleep(30)
        raise AssertionError("not reached")
    exec_sync, _ = fake_exec(hang)
    started = time.monotonic()
    result = await ProbeManager(None, None, Wakes(), exec_sync=exec_sync).exec_probe("c", ["true"], 0.1)
    assert result == Result.failure('command "true" timed out')
    assert time.monotonic() - started < 2


# ------------------------------------------------------------------------------------------------- grpc


async def _grpc_server(statuses: dict[bytes, bytes] | None) -> tuple[grpc.aio.Server, int]:
    """A server implementing grpc.health.v1.Health/Check on raw bytes (or nothing, when statuses is None)."""
    server = grpc.aio.server()
    if statuses is not None:
        async def check(request: bytes, context: Any) -> bytes:
            return statuses.get(request, b"\x08\x03")
        handler = grpc.method_handlers_generic_handler(
            "grpc.health.v1.Health", {"Check": grpc.unary_unary_rpc_method_handler(check)})
        server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


@pytest.mark.parametrize(("service", "expected"), [
    ("", Result.success("service healthy")),
    ("db", Result.failure('service unhealthy (responded with "NOT_SERVING")')),
    ("other", Result.failure('service unhealthy (responded with "SERVICE_UNKNOWN")')),
])
async def test_grpc_health(service: str, expected: Result) -> None:
    server, port = await _grpc_server({b"": b"\x08\x01", b"\x0a\x02db": b"\x08\x02"})
    try:
        assert await grpc_probe("127.0.0.1", port, service, 1, "kube-probe/1.31") == expected
    finally:
        await server.stop(None)


async def test_grpc_without_health_service() -> None:
    server, port = await _grpc_server(None)
    try:
        result = await grpc_probe("127.0.0.1", port, "", 1, "kube-probe/1.31")
    finally:
        await server.stop(None)
    assert result.outcome is p.Outcome.FAILURE
    assert result.message.startswith("error: this server does not implement the grpc health protocol "
                                     "(grpc.health.v1.Health): ")


async def test_grpc_connect_timeout() -> None:
    port = free_port()
    started = time.monotonic()
    result = await grpc_probe("127.0.0.1", port, "", 0.3, "kube-probe/1.31")
    assert time.monotonic() - started < 2
    assert result == Result.failure(f'timeout: failed to connect service "127.0.0.1:{port}" within 300ms: '
                                    "context deadline exceeded")


# ------------------------------------------------------------------------------------- the manager's loop


def make_pod(probes: dict[str, Any], *, deleting: bool = False, port: int = 1) -> Pod:
    metadata: dict[str, Any] = {"name": "web", "namespace": "ns", "uid": UID}
    if deleting:
        metadata["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    return pod_from_body({"metadata": metadata, "spec": {"containers": [
        {"name": "app", "image": "i", "ports": [{"name": "web", "containerPort": port}], **probes}]}})


def runtime(container_id: str, state: State = State.RUNNING) -> RuntimePodStatus:
    return RuntimePodStatus(uid=UID, containers=(
        ContainerInfo(id=container_id, name="app", state=state, started_at=time.time_ns()),))


def short(specs: dict[Kind, ProbeSpec]) -> Callable[[ContainerSpec], dict[Kind, ProbeSpec]]:
    """The manager's `specs` seam: the container's probes replaced by sub-second ones."""
    return lambda container: {k: v for k, v in specs.items() if getattr(container, f"{k}_probe") is not None}


async def eventually(check: Callable[[], bool], within: float = 3.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


RAW = {"exec": {"command": ["true"]}}  # what the pod declares; the periods come from `short`


async def test_loop_readiness_and_liveness(http_server: Server) -> None:
    events, wakes = Events(), Wakes()
    dead_port = free_port()
    specs = {
        Kind.READINESS: ProbeSpec(kind=Kind.READINESS, handler=p.HTTPGetAction(port="web", path="/ready"),
                                  period_seconds=0.05, timeout_seconds=1),
        Kind.LIVENESS: ProbeSpec(kind=Kind.LIVENESS, handler=p.TCPSocketAction(port=dead_port),
                                 period_seconds=0.05, timeout_seconds=1, failure_threshold=2),
    }
    mgr = ProbeManager(None, events, wakes, specs=short(specs), jitter=False)
    pod = make_pod({"readinessProbe": RAW, "livenessProbe": RAW}, port=http_server.port)
    try:
        mgr.sync_pod(pod, runtime("c1"), "127.0.0.1")
        assert mgr.readiness(UID) == {"c1": False}  # readiness starts failed
        assert mgr.liveness_failures(UID) == set()  # liveness starts passed
        assert mgr.started(UID) == {} and mgr.startup_failures(UID) == set()

        await eventually(lambda: mgr.liveness_failures(UID) == {"c1"})
        assert {"uid-1"} in wakes.calls
        unhealthy = [e for e in events.posted if e[1] == "Unhealthy" and e[2].startswith("Liveness")]
        assert unhealthy[0] == ("Warning", "Unhealthy", f"Liveness probe failed: dial tcp 127.0.0.1:{dead_port}: "
                                "connect: connection refused", "app", False)
        assert len(unhealthy) == 2  # one event per failed probe; then on hold until a new container
        assert any(e[2] == "Readiness probe failed: HTTP probe failed with statuscode: 500" for e in events.posted)

        http_server.ready_status = 200
        await eventually(lambda: mgr.readiness(UID) == {"c1": True})

        mgr.sync_pod(pod, runtime("c2"), "127.0.0.1")  # restarted after the liveness failure
        assert mgr.liveness_failures(UID) == set()
        assert mgr.readiness(UID) == {"c2": False}
        await eventually(lambda: mgr.readiness(UID) == {"c2": True})
    finally:
        await mgr.close()


async def test_loop_startup_gates_the_others() -> None:
    log: list[tuple[str, int]] = []  # (probe, exit code) in call order

    async def answer(container_id: str, cmd: list[str], seconds: float) -> ExecSyncResult:
        code = 0
        if cmd[0] == "startup":
            code = 0 if sum(1 for name, _ in log if name == "startup") >= 2 else 1
        log.append((cmd[0], code))
        return await _exit(code, b"not yet" if code else b"")
    exec_sync, _ = fake_exec(answer)
    specs = {kind: ProbeSpec(kind=kind, handler=p.ExecAction(command=(str(kind),)), period_seconds=0.05,
                             failure_threshold=10)
             for kind in Kind}
    mgr = ProbeManager(None, Events(), Wakes(), exec_sync=exec_sync, specs=short(specs), jitter=False)
    pod = make_pod({"startupProbe": RAW, "livenessProbe": RAW, "readinessProbe": RAW})
    try:
        mgr.sync_pod(pod, runtime("c1"), "10.0.0.1")
        assert mgr.started(UID) == {"c1": False}
        assert mgr.readiness(UID) == {"c1": False}
        await eventually(lambda: mgr.started(UID) == {"c1": True})
        await eventually(lambda: mgr.readiness(UID) == {"c1": True})
        await eventually(lambda: any(name == "liveness" for name, _ in log))
        await asyncio.sleep(0.15)
        startups = [i for i, (name, _) in enumerate(log) if name == "startup"]
        others = [i for i, (name, _) in enumerate(log) if name != "startup"]
        assert [log[i][1] for i in startups] == [1, 1, 0]  # the startup probe is done once it succeeded
        assert min(others) > startups[-1]  # liveness and readiness were held back until then
    finally:
        await mgr.close()


async def test_loop_startup_failure_is_reported() -> None:
    exec_sync, calls = fake_exec(lambda *_: _exit(1, b"nope"))
    specs = {Kind.STARTUP: ProbeSpec(kind=Kind.STARTUP, handler=p.ExecAction(command=("x",)), period_seconds=0.05,
                                     failure_threshold=2)}
    events = Events()
    mgr = ProbeManager(None, events, Wakes(), exec_sync=exec_sync, specs=short(specs), jitter=False)
    try:
        mgr.sync_pod(make_pod({"startupProbe": RAW}), runtime("c1"), "10.0.0.1")
        await eventually(lambda: mgr.startup_failures(UID) == {"c1"})
        assert mgr.started(UID) == {"c1": False}
        await asyncio.sleep(0.15)
        assert len(calls) == 2  # on hold after the failure
        assert events.posted[0] == ("Warning", "Unhealthy", "Startup probe failed: nope", "app", False)
    finally:
        await mgr.close()


async def test_a_probe_failure_is_logged_at_v1(caplog: pytest.LogCaptureFixture) -> None:
    """Upstream prober.go logs "Probe failed" at V(1): a failing probe of a pod is not for the default verbosity
    (the Unhealthy event tells the pod's owner)."""
    caplog.set_level(v(1), logger="kopflet.prober.manager")
    exec_sync, _ = fake_exec(lambda *_: _exit(1, b"nope"))
    specs = {Kind.STARTUP: ProbeSpec(kind=Kind.STARTUP, handler=p.ExecAction(command=("x",)), period_seconds=0.05,
                                     failure_threshold=2)}
    mgr = ProbeManager(None, Events(), Wakes(), exec_sync=exec_sync, specs=short(specs), jitter=False)
    try:
        mgr.sync_pod(make_pod({"startupProbe": RAW}), runtime("c1"), "10.0.0.1")
        await eventually(lambda: mgr.startup_failures(UID) == {"c1"})
        failures = [r for r in caplog.records if "Startup probe failed: nope" in r.getMessage()]
        assert failures and {(r.levelno, r.levelname) for r in failures} == {(v(1), "V1")}
    finally:
        await mgr.close()


async def test_loop_deletion_stops_liveness_not_readiness() -> None:
    exec_sync, calls = fake_exec(lambda *_: _exit(1))
    specs = {kind: ProbeSpec(kind=kind, handler=p.ExecAction(command=(str(kind),)), period_seconds=0.05,
                             failure_threshold=100) for kind in (Kind.LIVENESS, Kind.READINESS)}
    mgr = ProbeManager(None, Events(), Wakes(), exec_sync=exec_sync, specs=short(specs), jitter=False)
    probes = {"livenessProbe": RAW, "readinessProbe": RAW}
    try:
        mgr.sync_pod(make_pod(probes), runtime("c1"), "10.0.0.1")
        await eventually(lambda: len(calls) >= 4)
        mgr.sync_pod(make_pod(probes, deleting=True), runtime("c1"), "10.0.0.1")
        assert mgr.liveness_failures(UID) == set()
        calls.clear()
        await asyncio.sleep(0.2)
        assert {cmd[0] for _, cmd, _ in calls} == {"readiness"}
    finally:
        await mgr.close()


async def test_forget_cancels_and_drops_results() -> None:
    exec_sync, calls = fake_exec(lambda *_: _exit(0))
    specs = {Kind.READINESS: ProbeSpec(kind=Kind.READINESS, handler=p.ExecAction(command=("r",)),
                                       period_seconds=0.05)}
    mgr = ProbeManager(None, Events(), Wakes(), exec_sync=exec_sync, specs=short(specs), jitter=False)
    try:
        mgr.sync_pod(make_pod({"readinessProbe": RAW}), runtime("c1"), "10.0.0.1")
        await eventually(lambda: mgr.readiness(UID) == {"c1": True})
        mgr.forget(UID)
        assert mgr.readiness(UID) == {}
        await asyncio.sleep(0.02)
        count = len(calls)
        await asyncio.sleep(0.15)
        assert len(calls) == count
    finally:
        await mgr.close()


async def test_sync_pod_without_probes_or_with_a_bad_one() -> None:
    mgr = ProbeManager(None, Events(), Wakes(), jitter=False)
    try:
        mgr.sync_pod(make_pod({}), runtime("c1"), "10.0.0.1")
        mgr.sync_pod(make_pod({"livenessProbe": {"httpGet": {}}}), runtime("c1"), "10.0.0.1")  # logged, skipped
        assert mgr.readiness(UID) == {} and mgr.liveness_failures(UID) == set()
    finally:
        await mgr.close()
