"""The kubelet API server (kopflet.server.server) over real TLS on 127.0.0.1: authentication and authorization answers
(401/403/500), routing (404/405/400), the backend's errors, chunked log streaming, keep-alive, and the upgrade
proxy for exec/attach/portForward against a tiny local "streaming server" that answers 101 and echoes.

The serving certificate is made by ``ensure_self_signed`` (the openssl command), a client CA and a client
certificate by openssl too; the apiserver's reviews are a fake client (tests/stack checks the real ones).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import json
import ssl
import subprocess
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from kopflet.config.settings import AgentConfig
from kopflet.pods import explain, timeline
from kopflet.server import auth_rules, streaming
from kopflet.server import server as srv
from kopflet.server.auth_reviews import Authenticator, Authorizer
from kopflet.server.auth_rules import Attributes, UserInfo
from kopflet.server.http import split_target
from tests.unit.test_server_auth import FakeKube

NODE = "node-1"
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"}}
_AT = datetime.datetime(2026, 6, 1, 12, 0, 0, tzinfo=datetime.UTC)
DECISION = explain.Decision(time=_AT, sync="sync", lifecycle="syncing", phase="Running",
                            rules=(explain.Rule(subject="status", action="write", reason="phase Running"),),
                            next_at=_AT + datetime.timedelta(seconds=60), next_reason="resync period")
START = timeline.finish(timeline.add_step(timeline.begin(_AT, 0.0), "admission", "", 0.0, 0.01), 1.0)


# --- certificates -----------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Pki:
    serving_cert: str
    serving_key: str
    ca: str
    client: tuple[str, str]
    stranger: tuple[str, str]
    """A client certificate from another CA."""


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def _client_cert(directory: Path, name: str, subject: str, ca: str, ca_key: str) -> tuple[str, str]:
    ext = directory / "client.ext"
    ext.write_text("extendedKeyUsage=clientAuth\n")
    key, csr, crt = (str(directory / f"{name}.{s}") for s in ("key", "csr", "crt"))
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", subject)
    _openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", crt, "-days", "1",
             "-extfile", str(ext))
    return crt, key


def _client_pki(directory: Path) -> tuple[str, tuple[str, str], tuple[str, str]]:
    """A client CA, a client certificate from it and one from another CA (blocking: openssl)."""
    cas = {}
    for name in ("ca", "other-ca"):
        cas[name] = (str(directory / f"{name}.crt"), str(directory / f"{name}.key"))
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", cas[name][1], "-out", cas[name][0],
                 "-subj", f"/CN={name}", "-days", "1")
    client = _client_cert(directory, "client", "/O=g1/O=g2/CN=kube-apiserver-kubelet-client", *cas["ca"])
    stranger = _client_cert(directory, "stranger", "/CN=mallory", *cas["other-ca"])
    return cas["ca"][0], client, stranger


@pytest.fixture(scope="session")
async def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    cert, key = await srv.ensure_self_signed(str(directory / "serving"), "localhost", ["127.0.0.1"])
    ca, client, stranger = await asyncio.to_thread(_client_pki, directory)
    return Pki(cert, key, ca, client, stranger)


def _certificate_facts(cert: str, key: str) -> tuple[bytes, int, str]:
    text = subprocess.run(["openssl", "x509", "-in", cert, "-noout", "-text"], capture_output=True, text=True,
                          check=True).stdout
    return Path(cert).read_bytes(), Path(key).stat().st_mode & 0o777, text


async def test_self_signed_certificate_is_reused(pki: Pki) -> None:
    before, _, _ = await asyncio.to_thread(_certificate_facts, pki.serving_cert, pki.serving_key)
    cert, key = await srv.ensure_self_signed(str(Path(pki.serving_cert).parent), "localhost")
    assert (cert, key) == (pki.serving_cert, pki.serving_key)
    after, mode, text = await asyncio.to_thread(_certificate_facts, cert, key)
    assert after == before and mode == 0o600
    assert "DNS:localhost, IP Address:127.0.0.1" in text and "TLS Web Server Authentication" in text
    assert "CA:FALSE" in text


# --- the backend ------------------------------------------------------------------------------------------------

class FakeBackend:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.stream_url = ""
        self.log_chunks: list[bytes] = []
        self.log_gate: asyncio.Event | None = None
        self.log_cancelled = asyncio.Event()
        self.fail: BaseException | None = None
        self.unhealthy: dict[str, str] = {}
        """A check's name to its error: the checks below fail with them."""
        self.checked: list[str] = []

    def health_checks(self) -> list[tuple[str, Any]]:
        def check(name: str) -> Any:
            def run() -> str:
                self.checked.append(name)
                return self.unhealthy.get(name, "")
            return run
        return [(name, check(name)) for name in ("ping", "log", "syncloop", "device-plugin")]

    def _maybe_fail(self) -> None:
        if self.fail is not None:
            raise self.fail

    def pods(self) -> list[dict[str, Any]]:
        self._maybe_fail()
        return [POD]

    async def running_pods(self) -> list[dict[str, Any]]:
        self._maybe_fail()
        return []

    def metrics(self) -> str:
        return "kubelet_running_pods 1\n"

    async def resource_metrics(self) -> str:
        return "node_cpu_usage_seconds_total 1\n"

    async def probe_metrics(self) -> str:
        return ""

    async def cadvisor_metrics(self) -> str:
        return "container_scrape_error 0\n"

    async def stats_summary(self) -> dict[str, Any]:
        self._maybe_fail()
        return {"node": {"nodeName": NODE}, "pods": []}

    async def container_logs(self, namespace: str, pod: str, container: str, query: Mapping[str, list[str]],
                             write: srv.WriteFn) -> None:
        self.calls.append(("logs", namespace, pod, container, dict(query)))
        self._maybe_fail()
        try:
            for chunk in self.log_chunks:
                await write(chunk)
                if self.log_gate is not None:
                    await self.log_gate.wait()
                    self.log_gate.clear()
        except asyncio.CancelledError:
            self.log_cancelled.set()
            raise

    async def exec_url(self, namespace: str, pod: str, uid: str | None, container: str, command: list[str], *,
                       stdin: bool, stdout: bool, stderr: bool, tty: bool) -> str:
        self.calls.append(("exec", namespace, pod, uid, container, command, stdin, stdout, stderr, tty))
        self._maybe_fail()
        return self.stream_url

    async def attach_url(self, namespace: str, pod: str, uid: str | None, container: str, *,
                         stdin: bool, stdout: bool, stderr: bool, tty: bool) -> str:
        self.calls.append(("attach", namespace, pod, uid, container, stdin, stdout, stderr, tty))
        self._maybe_fail()
        return self.stream_url

    async def port_forward_url(self, namespace: str, pod: str, uid: str | None, ports: list[int]) -> str:
        self.calls.append(("portForward", namespace, pod, uid, ports))
        self._maybe_fail()
        return self.stream_url

    async def pod_decisions(self, namespace: str, name: str) \
            -> tuple[str, list[explain.Decision], timeline.Timeline | None]:
        self.calls.append(("explain", namespace, name))
        self._maybe_fail()
        if (namespace, name) != ("ns", "p"):
            raise LookupError(f'pod "{name}" does not exist')
        return "u-1", [DECISION], START


class StreamingServer:
    """Answers an upgrade with ``status`` (101 by default) and then echoes; records what it was sent."""

    def __init__(self, status: int = 101, body: bytes = b"") -> None:
        self.status, self.body = status, body
        self.heads: list[bytes] = []
        self.closed = asyncio.Event()
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> StreamingServer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/exec/T0KEN?x=1"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            self.heads.append(await reader.readuntil(b"\r\n\r\n"))
            if self.status != 101:
                phrase = "Not Found" if self.status == 404 else "OK"
                writer.write(f"HTTP/1.1 {self.status} {phrase}\r\nContent-Length: {len(self.body)}\r\n\r\n".encode()
                             + self.body)
                await writer.drain()
                await reader.read()
                return
            writer.write(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
                         b"X-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\nhello")
            await writer.drain()
            while data := await reader.read(1024):
                if data == b"bye":
                    break
                writer.write(data)
                await writer.drain()
        finally:
            self.closed.set()
            writer.close()


# --- the server and a raw client --------------------------------------------------------------------------------

class RecordingAuthorizer:
    """Allows the (user, subresource) pairs in ``allowed``; records every question."""

    def __init__(self, allowed: set[tuple[str, str]] | None = None, fail: BaseException | None = None) -> None:
        self.allowed, self.fail = allowed, fail
        self.asked: list[tuple[str, Attributes]] = []

    async def authorize(self, user: UserInfo, attrs: Attributes) -> bool:
        self.asked.append((user.name, attrs))
        if self.fail is not None:
            raise self.fail
        return self.allowed is None or (user.name, attrs.subresource) in self.allowed


@dataclasses.dataclass
class Harness:
    server: srv.Server
    backend: FakeBackend
    authorizer: RecordingAuthorizer
    kube: FakeKube
    pki: Pki


SA_TOKEN = {"authenticated": True, "user": {"username": "system:serviceaccount:default:sa"}}


@contextlib.asynccontextmanager
async def running(pki: Pki, *, anonymous: bool = True, authorizer: RecordingAuthorizer | None = None,
                  client_ca: bool = True) -> AsyncIterator[Harness]:
    kube = FakeKube(tokens={"good": SA_TOKEN})
    backend, authorizer = FakeBackend(), authorizer or RecordingAuthorizer()
    config = AgentConfig(node_name=NODE, address="127.0.0.1", port=0, client_ca_file=pki.ca if client_ca else "")
    authenticator = Authenticator(kube, client_certificates=client_ca, webhook=True, anonymous=anonymous)
    tls = srv.tls_context(pki.serving_cert, pki.serving_key, config.client_ca_file)
    server = await srv.serve(config, backend, authenticator, authorizer, tls=tls)
    try:
        yield Harness(server, backend, authorizer, kube, pki)
    finally:
        await server.close(grace=1.0)


@pytest.fixture
async def h(pki: Pki) -> AsyncIterator[Harness]:
    async with running(pki) as harness:
        yield harness


@dataclasses.dataclass
class Response:
    status: int
    headers: dict[str, list[str]]
    body: bytes

    def header(self, name: str) -> str | None:
        values = self.headers.get(name.lower())
        return values[0] if values else None

    @property
    def text(self) -> str:
        return self.body.decode()


async def connect(h: Harness, cert: tuple[str, str] | None = None) -> tuple[asyncio.StreamReader,
                                                                            asyncio.StreamWriter]:
    context = ssl.create_default_context(cafile=h.pki.serving_cert)  # the self-signed certificate verifies
    if cert is not None:
        context.load_cert_chain(*cert)
    return await asyncio.open_connection("127.0.0.1", h.server.port, ssl=context, server_hostname="127.0.0.1")


async def read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, list[str]]]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    lines = head.decode("latin-1").split("\r\n")
    headers: dict[str, list[str]] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers.setdefault(name.lower(), []).append(value.strip())
    return int(lines[0].split(" ")[1]), headers


async def read_chunk(reader: asyncio.StreamReader) -> bytes:
    size = int((await asyncio.wait_for(reader.readline(), 5)).strip(), 16)
    data = await reader.readexactly(size + 2)
    return data[:-2]


async def read_response(reader: asyncio.StreamReader, *, head_only: bool = False) -> Response:
    status, headers = await read_head(reader)
    body = b""
    if head_only or status == 101:
        pass
    elif "chunked" in headers.get("transfer-encoding", []):
        while chunk := await read_chunk(reader):
            body += chunk
    elif "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"][0]))
    else:
        body = await asyncio.wait_for(reader.read(), 5)
    return Response(status, headers, body)


def request_bytes(method: str, target: str, headers: Mapping[str, str] | None = None) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Host: node-1:10250"]
    lines.extend(f"{k}: {v}" for k, v in (headers or {}).items())
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def call(h: Harness, method: str, target: str, headers: Mapping[str, str] | None = None, *,
               token: str | None = None, cert: tuple[str, str] | None = None) -> Response:
    reader, writer = await connect(h, cert)
    try:
        all_headers = {"Connection": "close", **(headers or {})}
        if token:
            all_headers["Authorization"] = f"Bearer {token}"
        writer.write(request_bytes(method, target, all_headers))
        await writer.drain()
        return await read_response(reader, head_only=method == "HEAD")
    finally:
        writer.close()


async def raw(h: Harness, data: bytes) -> Response:
    reader, writer = await connect(h)
    try:
        writer.write(data)
        await writer.drain()
        return await read_response(reader)
    finally:
        writer.close()


# --- authentication and authorization ---------------------------------------------------------------------------

async def test_no_credentials_without_anonymous_is_401(pki: Pki) -> None:
    async with running(pki, anonymous=False) as h:
        response = await call(h, "GET", "/pods")
        assert (response.status, response.text) == (401, "Unauthorized")
        assert response.header("content-type") == "text/plain; charset=utf-8"
        assert h.authorizer.asked == []


async def test_bogus_token_is_401_even_with_anonymous(h: Harness) -> None:
    response = await call(h, "GET", "/pods", token="bogus")
    assert (response.status, response.text) == (401, "Unauthorized")


async def test_token_user_is_authorized_on_the_fine_grained_subresource_first(pki: Pki) -> None:
    authorizer = RecordingAuthorizer(allowed={("system:serviceaccount:default:sa", "pods")})
    async with running(pki, authorizer=authorizer) as h:
        response = await call(h, "GET", "/pods", token="good")
        assert response.status == 200
        assert [(user, a.subresource, a.verb, a.name) for user, a in h.authorizer.asked] == [
            ("system:serviceaccount:default:sa", "pods", "get", NODE)]


async def test_proxy_is_the_fallback(pki: Pki) -> None:
    authorizer = RecordingAuthorizer(allowed={("system:anonymous", "proxy")})
    async with running(pki, authorizer=authorizer) as h:
        assert (await call(h, "GET", "/healthz")).text == "ok"
        assert [a.subresource for _, a in h.authorizer.asked] == ["healthz", "proxy"]


async def test_forbidden_names_user_verb_and_subresources(pki: Pki) -> None:
    async with running(pki, authorizer=RecordingAuthorizer(allowed=set())) as h:
        response = await call(h, "GET", "/pods", token="good")
        assert response.status == 403
        assert response.text == ("Forbidden (user=system:serviceaccount:default:sa, verb=get, resource=nodes, "
                                 "subresource(s)=[pods proxy])\n")
        response = await call(h, "POST", "/exec/ns/p/c?output=1")
        assert response.text == ("Forbidden (user=system:anonymous, verb=create, resource=nodes, "
                                 "subresource(s)=[proxy])\n")
        assert h.backend.calls == []


async def test_authorizer_failure_is_500(pki: Pki) -> None:
    async with running(pki, authorizer=RecordingAuthorizer(fail=OSError("apiserver down"))) as h:
        response = await call(h, "GET", "/stats/summary")
        assert (response.status, response.text) == (
            500, "Authorization error (user=system:anonymous, verb=get, resource=nodes, subresource=stats)")


async def test_client_certificate_is_the_user(h: Harness) -> None:
    response = await call(h, "GET", "/healthz", cert=h.pki.client)
    assert response.status == 200
    user = h.authorizer.asked[0][0]
    assert user == "kube-apiserver-kubelet-client"


async def test_webhook_authorizer_end_to_end(pki: Pki) -> None:
    kube = FakeKube(allowed={("kube-apiserver-kubelet-client", "get", "stats")})
    async with running(pki, authorizer=Authorizer(kube)) as h:  # type: ignore[arg-type]
        assert (await call(h, "GET", "/stats/summary", cert=h.pki.client)).status == 200
        spec = kube.calls[0][1]["spec"]
        assert spec["user"] == "kube-apiserver-kubelet-client"
        assert spec["groups"] == ["g1", "g2", "system:authenticated"]
        assert spec["extra"][auth_rules.CREDENTIAL_ID_KEY][0].startswith("X509SHA256=")
        assert (await call(h, "GET", "/pods", cert=h.pki.client)).status == 403


async def test_certificate_of_another_ca_is_refused_by_tls(h: Harness) -> None:
    with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
        await call(h, "GET", "/healthz", cert=h.pki.stranger)


async def test_without_a_client_ca_no_certificate_is_asked_for(pki: Pki) -> None:
    async with running(pki, client_ca=False) as h:
        await call(h, "GET", "/healthz", cert=h.pki.client)
        assert h.authorizer.asked[0][0] == "system:anonymous"


# --- routes -----------------------------------------------------------------------------------------------------

async def test_healthz(h: Harness) -> None:
    response = await call(h, "GET", "/healthz")
    assert (response.status, response.text, response.header("content-type")) == (200, "ok", srv.TEXT)
    assert response.header("x-content-type-options") == "nosniff"
    for path in ("/healthz/ping", "/healthz/syncloop", "/healthz/log", "/healthz/device-plugin"):
        response = await call(h, "GET", path)
        assert (response.status, response.text, response.header("content-type")) == (200, "ok", srv.TEXT)
        assert response.header("x-content-type-options") is None  # Go sniffed the type of a bare "ok"
    head = await call(h, "HEAD", "/healthz")
    assert (head.status, head.header("content-length"), head.body) == (200, "2", b"")
    response = await call(h, "GET", "/healthz?verbose")
    assert response.text == "[+]ping ok\n[+]log ok\n[+]syncloop ok\n[+]device-plugin ok\nhealthz check passed\n"


SLOW = "sync Loop took longer than expected"
SYNCLOOP_FAILED = ("[+]ping ok\n[+]log ok\n[-]syncloop failed: reason withheld\n[+]device-plugin ok\n"
                   "healthz check failed\n")


@pytest.mark.parametrize(("method", "target", "status", "body", "nosniff"), [
    ("GET", "/healthz", 500, SYNCLOOP_FAILED, True),
    ("POST", "/healthz", 500, SYNCLOOP_FAILED, True),  # any method, as upstream's mux handlers
    ("GET", "/healthz?verbose", 500, SYNCLOOP_FAILED, True),
    ("GET", "/healthz?exclude=syncloop", 200, "ok", True),
    ("GET", "/healthz?exclude=syncloop&verbose=1", 200,
     "[+]ping ok\n[+]log ok\n[+]syncloop excluded: ok\n[+]device-plugin ok\nhealthz check passed\n", True),
    ("GET", "/healthz/syncloop", 500, f"internal server error: {SLOW}\n", True),
    ("GET", "/healthz/syncloop?exclude=syncloop", 500, f"internal server error: {SLOW}\n", True),
    ("GET", "/healthz/ping", 200, "ok", False),
    ("GET", "/healthz/log", 200, "ok", False),
])
async def test_healthz_when_the_sync_loop_is_stuck(h: Harness, method: str, target: str, status: int, body: str,
                                                   nosniff: bool) -> None:
    h.backend.unhealthy["syncloop"] = SLOW
    response = await call(h, method, target)
    assert (response.status, response.text, response.header("content-type")) == (status, body, srv.TEXT)
    assert response.header("content-length") == str(len(body))
    assert (response.header("x-content-type-options") == "nosniff") is nosniff


async def test_healthz_runs_the_checks_not_excluded_once_each_request(h: Harness) -> None:
    h.backend.unhealthy["device-plugin"] = "device registration error: gone"
    head = await call(h, "HEAD", "/healthz?exclude=log")
    body = ("[+]ping ok\n[+]log excluded: ok\n[+]syncloop ok\n[-]device-plugin failed: reason withheld\n"
            "healthz check failed\n")
    assert (head.status, head.header("content-length"), head.body) == (500, str(len(body)), b"")
    assert h.backend.checked == ["ping", "syncloop", "device-plugin"]
    h.backend.checked.clear()
    assert (await call(h, "GET", "/healthz/device-plugin")).status == 500
    assert h.backend.checked == ["device-plugin"]


async def test_healthz_is_authorized_before_any_check_runs(pki: Pki) -> None:
    async with running(pki, authorizer=RecordingAuthorizer(allowed=set())) as h:
        h.backend.unhealthy["syncloop"] = SLOW
        for target in ("/healthz", "/healthz/syncloop"):
            assert (await call(h, "GET", target)).status == 403
        assert h.backend.checked == []


async def test_pods_and_running_pods(h: Harness) -> None:
    import json

    response = await call(h, "GET", "/pods")
    assert response.header("content-type") == "application/json"
    assert json.loads(response.body) == {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [POD]}
    assert json.loads((await call(h, "GET", "/pods/")).body)["items"] == [POD]
    for path in ("/runningpods/", "/runningpods"):
        assert json.loads((await call(h, "GET", path)).body)["items"] == []
    response = await call(h, "POST", "/pods")
    assert (response.status, response.header("allow")) == (405, "GET")


async def test_metrics(h: Harness) -> None:
    for path, text in (("/metrics", "kubelet_running_pods 1\n"), ("/metrics/resource", "node_cpu_usage_seconds_total"
                                                                                        " 1\n"),
                       ("/metrics/probes", ""), ("/metrics/cadvisor", "container_scrape_error 0\n")):
        response = await call(h, "GET", path)
        assert (response.status, response.text) == (200, text), path
        assert response.header("content-type") == "text/plain; version=0.0.4; charset=utf-8"
    assert (await call(h, "GET", "/metrics/nope")).status == 404


async def test_stats_summary(h: Harness) -> None:
    response = await call(h, "GET", "/stats/summary")
    assert (response.status, response.header("content-type")) == (200, "application/json")
    assert response.text == '{"node":{"nodeName":"node-1"},"pods":[]}'


@pytest.mark.parametrize(("target", "headers", "content_type"), [
    ("/debug/pods/ns/p", {}, "application/json"),
    ("/debug/pods/ns/p?format=json", {"Accept": "text/plain"}, "application/json"),
    ("/debug/pods/ns/p?format=text", {}, "text/plain; charset=utf-8"),
    ("/debug/pods/ns/p", {"Accept": "text/plain"}, "text/plain; charset=utf-8"),
    ("/debug/pods/ns/p", {"Accept": "application/json, */*"}, "application/json"),  # kubectl get --raw
])
async def test_a_pods_decisions(h: Harness, target: str, headers: dict[str, str], content_type: str) -> None:
    response = await call(h, "GET", target, headers)
    assert (response.status, response.header("content-type")) == (200, content_type)
    assert h.backend.calls == [("explain", "ns", "p")]
    if content_type == "application/json":
        assert json.loads(response.body) == explain.to_json([DECISION], namespace="ns", name="p", uid="u-1",
                                                            timeline=START)
        assert json.loads(response.body)["startTimeline"]["outcome"] == "Ready"
    else:
        assert response.text == explain.render_text([DECISION], namespace="ns", name="p", uid="u-1",
                                                     timeline=START)
        assert "-> status: write — phase Running" in response.text
        assert "start timeline, from 2026-06-01 12:00:00.000 UTC: Ready after 1s" in response.text


@pytest.mark.parametrize(("method", "target", "status", "text"), [
    ("GET", "/debug/pods/ns/nope", 404, 'pod "nope" does not exist'),
    ("GET", "/debug/pods/ns/p?format=yaml", 400, 'unknown format "yaml": json or text'),
    ("GET", "/debug/pods/ns", 404, "404 page not found\n"),
    ("GET", "/debug/pods/ns/p/x", 404, "404 page not found\n"),
    ("POST", "/debug/pods/ns/p", 405, "Method Not Allowed"),
])
async def test_a_pods_decisions_refused(h: Harness, method: str, target: str, status: int, text: str) -> None:
    response = await call(h, method, target)
    assert (response.status, response.text) == (status, text)


async def test_the_agents_backend_answers_from_the_pod_workers() -> None:
    from kopflet.server.backend import AgentBackend

    class Workers:
        def decisions(self, namespace: str, name: str) \
                -> tuple[str, tuple[explain.Decision, ...], timeline.Timeline | None] | None:
            return ("u-1", (DECISION,), START) if (namespace, name) == ("ns", "p") else None

    backend = AgentBackend(Workers(), None, None, None, None)  # type: ignore[arg-type]
    assert await backend.pod_decisions("ns", "p") == ("u-1", (DECISION,), START)
    with pytest.raises(LookupError, match=r'^pod "p\\n" does not exist$'):  # quoted as upstream's %q
        await backend.pod_decisions("other", "p\n")


async def test_a_pods_decisions_need_nodes_proxy(pki: Pki) -> None:
    authorizer = RecordingAuthorizer(allowed={("system:anonymous", "pods")})
    async with running(pki, authorizer=authorizer) as h:
        response = await call(h, "GET", "/debug/pods/ns/p")
        assert (response.status, response.text) == (
            403, "Forbidden (user=system:anonymous, verb=get, resource=nodes, subresource(s)=[proxy])\n")
        assert [attrs.subresource for _, attrs in authorizer.asked] == ["proxy"]
        assert h.backend.calls == []


# A path with an empty segment ("/exec/ns//c", "/pods//") is redirected to its clean form first, as Go's ServeMux
# does: tests/unit/test_server_hostile.py.
@pytest.mark.parametrize("path", ["/", "/nope", "/stats", "/stats/container", "/exec/ns/p", "/exec/ns/p/u/c/x",
                                  "/exec/ns/p/", "/containerLogs/ns/p", "/portForward/ns", "/healthz/other",
                                  "/healthz/", "/healthz/ping/x", "/pods/x"])
async def test_unknown_paths_are_404(h: Harness, path: str) -> None:
    response = await call(h, "GET", path)
    assert (response.status, response.text) == (404, "404 page not found\n")


@pytest.mark.parametrize(("error", "status", "text"), [
    (LookupError('pod "ns/p" not found'), 404, 'pod "ns/p" not found'),
    (KeyError("gone"), 404, "gone"),
    (ValueError("bad query"), 400, "bad query"),
    (RuntimeError("boom"), 500, "boom"),
])
async def test_backend_errors(h: Harness, error: BaseException, status: int, text: str) -> None:
    h.backend.fail = error
    response = await call(h, "GET", "/stats/summary")
    assert (response.status, response.text) == (status, text)
    h.backend.fail = None
    assert (await call(h, "GET", "/stats/summary")).status == 200  # the server carries on


async def test_keep_alive_serves_several_requests(h: Harness) -> None:
    reader, writer = await connect(h)
    try:
        for path in ("/healthz", "/pods", "/nope", "/healthz"):
            writer.write(request_bytes("GET", path))
            await writer.drain()
            response = await read_response(reader)
            assert response.status in (200, 404)
            assert response.header("connection") is None
        writer.write(request_bytes("GET", "/healthz", {"Connection": "close"}))
        response = await read_response(reader)
        assert response.header("connection") == "close"
        assert await asyncio.wait_for(reader.read(), 5) == b""
    finally:
        writer.close()


@pytest.mark.parametrize(("data", "status"), [
    (b"GARBAGE\r\n\r\n", 400),
    (b"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", 505),
    (b"GET /healthz HTTP/1.1\r\n\r\n", 400),  # no Host
    (b"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
    (b"GET healthz HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    (b"GET http://x/healthz HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    (b"GET /healthz HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", 400),
    (b"GET /healthz HTTP/1.1\r\nHost : a\r\n\r\n", 400),
    (b"GET /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 1, 2\r\n\r\n", 400),
    (b"GET /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999\r\n\r\n", 413),
    (b"POST /healthz HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
    (b"GET /healthz HTTP/1.1\r\nHost: a\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n", 431),
    (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\nHost: a\r\n\r\n", 414),
    (b"GET /healthz HTTP/1.1\r\nHost: a\r\n" + b"X-Many: 1\r\n" * 300 + b"\r\n", 431),
])
async def test_malformed_requests(h: Harness, data: bytes, status: int) -> None:
    response = await raw(h, data)
    assert response.status == status
    assert response.header("connection") == "close"


async def test_http_1_0_and_a_body(h: Harness) -> None:
    response = await raw(h, b"POST /healthz HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc")
    assert (response.status, response.text, response.header("connection")) == (200, "ok", "close")
    # Expect: 100-continue: answered without asking for the body, which is then never read: the connection ends.
    response = await raw(h, b"POST /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n"
                            b"Expect: 100-continue\r\n\r\n")
    assert (response.status, response.text, response.header("connection")) == (200, "ok", "close")


async def test_pipelined_requests_are_answered_in_order(h: Harness) -> None:
    reader, writer = await connect(h)
    try:
        writer.write(b"\r\n" + request_bytes("GET", "/healthz") + request_bytes("GET", "/nope")
                     + request_bytes("GET", "/healthz", {"Connection": "close"}))
        assert [(await read_response(reader)).status for _ in range(3)] == [200, 404, 200]
        assert await asyncio.wait_for(reader.read(), 5) == b""
    finally:
        writer.close()


async def test_a_head_of_many_short_lines_up_to_1_mib_is_taken(h: Harness) -> None:
    # As Go's MaxHeaderBytes: the head's total is limited (1 MiB); beyond that only one line over 64 KiB is refused.
    response = await call(h, "GET", "/healthz", {f"X-H{i}": "v" * 1000 for i in range(200)})
    assert (response.status, response.text) == (200, "ok")


# --- container logs ---------------------------------------------------------------------------------------------

async def test_logs_are_chunked_and_flushed_as_they_come(h: Harness) -> None:
    h.backend.log_chunks = [b"line 1\n", b"line 2\n"]
    h.backend.log_gate = asyncio.Event()
    reader, writer = await connect(h)
    try:
        writer.write(request_bytes("GET", "/containerLogs/ns/p/c?follow=true&tail=5&timestamps=true"))
        status, headers = await read_head(reader)
        assert (status, headers["transfer-encoding"], headers["content-type"]) == (200, ["chunked"], [srv.TEXT])
        assert await read_chunk(reader) == b"line 1\n"  # before the backend writes more
        h.backend.log_gate.set()
        assert await read_chunk(reader) == b"line 2\n"
        h.backend.log_gate.set()
        assert await read_chunk(reader) == b""
        assert await asyncio.wait_for(reader.read(), 5) == b""  # a stream ends the connection
    finally:
        writer.close()
    assert h.backend.calls == [("logs", "ns", "p", "c", {"follow": ["true"], "tail": ["5"], "tailLines": ["5"],
                                                         "timestamps": ["true"]})]


async def test_tail_all_means_no_limit(h: Harness) -> None:
    await call(h, "GET", "/containerLogs/ns/p/c?tail=all&tailLines=3")
    assert h.backend.calls[0][4] == {"tail": ["all"]}


async def test_logs_stop_when_the_client_goes(h: Harness) -> None:
    h.backend.log_chunks = [b"first\n", b"never\n"]
    h.backend.log_gate = asyncio.Event()  # never set: the backend follows forever
    reader, writer = await connect(h)
    writer.write(request_bytes("GET", "/containerLogs/ns/p/c?follow=true"))
    await read_head(reader)
    assert await read_chunk(reader) == b"first\n"
    writer.close()
    await asyncio.wait_for(h.backend.log_cancelled.wait(), 5)


async def test_empty_log_and_log_errors(h: Harness) -> None:
    response = await call(h, "GET", "/containerLogs/ns/p/c")
    assert (response.status, response.body, response.header("transfer-encoding")) == (200, b"", "chunked")
    h.backend.fail = LookupError('container "c" not found in pod "p"')
    response = await call(h, "GET", "/containerLogs/ns/p/c")
    assert (response.status, response.text) == (404, 'container "c" not found in pod "p"')
    assert (await call(h, "POST", "/containerLogs/ns/p/c")).status == 405


# --- exec, attach, portForward: the upgrade proxy ---------------------------------------------------------------

SPDY = {"Connection": "Upgrade", "Upgrade": "SPDY/3.1", "X-Stream-Protocol-Version": "v4.channel.k8s.io"}


async def test_exec_upgrade_is_proxied_and_piped(h: Harness) -> None:
    async with StreamingServer() as streaming:
        h.backend.stream_url = url = streaming.url
        reader, writer = await connect(h)
        try:
            writer.write(request_bytes("POST", "/exec/ns/p/c?command=ls&command=-l&output=1&error=1&input=1&tty=1",
                                       {**SPDY, "Authorization": "Bearer good", "X-Forwarded-For": "10.0.0.9",
                                        "X-Stream-Protocol-Version": "v4.channel.k8s.io",
                                        "User-Agent": "kube-apiserver"}))
            status, headers = await read_head(reader)
            assert (status, headers["upgrade"]) == (101, ["SPDY/3.1"])
            assert await reader.readexactly(5) == b"hello"  # bytes that came with the 101
            for message in (b"ping", b"\x00\x01binary\xff"):
                writer.write(message)
                await writer.drain()
                assert await asyncio.wait_for(reader.readexactly(len(message)), 5) == message
            writer.write(b"bye")  # the streaming server ends the session: so does the client's connection
            await writer.drain()
            assert await asyncio.wait_for(reader.read(), 5) == b""
        finally:
            writer.close()
    assert h.backend.calls == [("exec", "ns", "p", None, "c", ["ls", "-l"], True, True, False, True)]
    head = streaming.heads[0].decode()
    lines = head.split("\r\n")
    assert lines[0] == "POST /exec/T0KEN?x=1 HTTP/1.1"
    assert f"Host: {url.split('/')[2]}" in lines
    assert {"Connection: Upgrade", "Upgrade: SPDY/3.1", "X-Stream-Protocol-Version: v4.channel.k8s.io",
            "User-Agent: kube-apiserver", "X-Forwarded-For: 10.0.0.9, 127.0.0.1"} <= set(lines)
    assert "authorization" not in head.lower()


async def test_client_hanging_up_closes_the_streaming_connection(h: Harness) -> None:
    async with StreamingServer() as streaming:
        h.backend.stream_url = streaming.url
        reader, writer = await connect(h)
        writer.write(request_bytes("GET", "/attach/ns/p/u-1/c?output=1", SPDY))
        assert (await read_head(reader))[0] == 101
        writer.close()
        await asyncio.wait_for(streaming.closed.wait(), 5)
    assert h.backend.calls == [("attach", "ns", "p", "u-1", "c", False, True, False, False)]


async def test_websocket_upgrade_passes_through(h: Harness) -> None:
    async with StreamingServer() as streaming:
        h.backend.stream_url = streaming.url
        reader, writer = await connect(h)
        try:
            writer.write(request_bytes("GET", "/exec/ns/p/c?command=sh&output=1", {
                "Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Protocol": "v4.channel.k8s.io"}))
            assert (await read_head(reader))[0] == 101
        finally:
            writer.close()
    lines = streaming.heads[0].decode().split("\r\n")
    assert lines[0].startswith("GET /exec/T0KEN")
    assert {"Sec-Websocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-Websocket-Version: 13",
            "Sec-Websocket-Protocol: v4.channel.k8s.io", "Upgrade: websocket"} <= set(lines)


async def test_bytes_sent_with_the_upgrade_request_reach_the_streaming_server(h: Harness) -> None:
    async with StreamingServer() as streaming:
        h.backend.stream_url = streaming.url
        reader, writer = await connect(h)
        try:
            # The client's first frame in the same write as its request: past the head, so h11 holds it.
            writer.write(request_bytes("POST", "/exec/ns/p/c?command=sh&input=1&output=1", SPDY) + b"early")
            assert (await read_head(reader))[0] == 101
            assert await asyncio.wait_for(reader.readexactly(10), 5) == b"helloearly"  # echoed after the 101
        finally:
            writer.close()
    assert streaming.heads[0].endswith(b"\r\n\r\n") and b"early" not in streaming.heads[0]


async def test_logs_for_an_http_1_0_client_end_with_the_connection(h: Harness) -> None:
    h.backend.log_chunks = [b"line 1\n"]
    response = await raw(h, b"GET /containerLogs/ns/p/c HTTP/1.0\r\n\r\n")
    assert (response.status, response.header("transfer-encoding"), response.body) == (200, None, b"line 1\n")


PORT_FORWARD_SPDY = {**SPDY, "X-Stream-Protocol-Version": "portforward.k8s.io"}
WEBSOCKET = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
             "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}


@pytest.mark.parametrize(("method", "target", "headers", "ports"), [
    ("POST", "/portForward/ns/p?port=80", PORT_FORWARD_SPDY, []),  # SPDY names its ports in stream headers, later
    ("POST", "/portForward/ns/p/u-1", PORT_FORWARD_SPDY, []),
    ("GET", "/portForward/ns/p?port=80,81&port=82", WEBSOCKET, [80, 81, 82]),
])
async def test_port_forward_ports(h: Harness, method: str, target: str, headers: dict[str, str],
                                  ports: list[int]) -> None:
    async with StreamingServer() as streaming:
        h.backend.stream_url = streaming.url
        reader, writer = await connect(h)
        try:
            writer.write(request_bytes(method, target, headers))
            assert (await read_head(reader))[0] == 101
        finally:
            writer.close()
    assert h.backend.calls[0][4] == ports
    assert h.backend.calls[0][3] == ("u-1" if "u-1" in target else None)


@pytest.mark.parametrize(("method", "target", "headers", "status", "text"), [
    ("POST", "/exec/ns/p/c?command=ls", SPDY, 400, "you must specify at least 1 of stdin, stdout, stderr"),
    ("POST", "/exec/ns/p/c?command=ls&output=1", {}, 400, "Upgrade request required"),
    ("GET", "/attach/ns/p/c?output=1", {"Upgrade": "SPDY/3.1"}, 400, "Upgrade request required"),
    ("GET", "/portForward/ns/p", {}, 400, "Upgrade request required"),
    ("GET", "/portForward/ns/p", {"Connection": "Upgrade", "Upgrade": "websocket"}, 400,
     'query parameter "port" is required'),
    ("GET", "/portForward/ns/p?port=0", {"Connection": "Upgrade", "Upgrade": "websocket"}, 400,
     'port "0" must be > 0'),
    ("GET", "/portForward/ns/p?port=http", {"Connection": "Upgrade", "Upgrade": "websocket"}, 400,
     'unable to parse "http" as a port'),
    ("PUT", "/exec/ns/p/c?output=1", SPDY, 405, "Method Not Allowed"),
])
async def test_stream_request_errors(h: Harness, method: str, target: str, headers: dict[str, str], status: int,
                                     text: str) -> None:
    response = await call(h, method, target, headers)
    assert (response.status, response.text) == (status, text)
    assert h.backend.calls == []  # refused before asking the runtime for a session


async def test_backend_refusing_a_session(h: Harness) -> None:
    h.backend.fail = LookupError("pod does not exist")
    response = await call(h, "POST", "/exec/ns/p/c?output=1", SPDY)
    assert (response.status, response.text) == (404, "pod does not exist")


async def test_streaming_server_errors_are_echoed(h: Harness) -> None:
    async with StreamingServer(status=404, body=b"session not found") as streaming:
        h.backend.stream_url = streaming.url
        response = await call(h, "POST", "/exec/ns/p/c?output=1", SPDY)
        assert (response.status, response.text) == (404, "session not found")


async def test_streaming_server_not_upgrading_is_500(h: Harness) -> None:
    async with StreamingServer(status=200) as streaming:
        h.backend.stream_url = streaming.url
        response = await call(h, "POST", "/exec/ns/p/c?output=1", SPDY)
        assert (response.status, response.text) == (500, "invalid upgrade response: status code 200")


async def test_unreachable_streaming_server_is_500(h: Harness) -> None:
    async with StreamingServer() as streaming:
        url = streaming.url
    h.backend.stream_url = url  # closed: nothing listens there now
    response = await call(h, "POST", "/exec/ns/p/c?output=1", SPDY)
    assert response.status == 500 and response.text.startswith("error dialing backend:")
    h.backend.stream_url = "unix:///run/x.sock"
    response = await call(h, "POST", "/exec/ns/p/c?output=1", SPDY)
    assert response.status == 500


# --- graceful close ---------------------------------------------------------------------------------------------

async def test_close_cuts_streams_after_the_grace_and_idle_connections_at_once(pki: Pki) -> None:
    async with running(pki) as h:
        h.backend.log_chunks = [b"x\n", b"y\n"]
        h.backend.log_gate = asyncio.Event()
        idle_reader, idle_writer = await connect(h)
        reader, writer = await connect(h)
        writer.write(request_bytes("GET", "/containerLogs/ns/p/c?follow=true"))
        await read_head(reader)
        assert await read_chunk(reader) == b"x\n"
        started = asyncio.get_running_loop().time()
        await h.server.close(grace=0.3)
        assert asyncio.get_running_loop().time() - started < 3
        assert await asyncio.wait_for(idle_reader.read(), 5) == b""
        assert h.backend.log_cancelled.is_set()
        for w in (writer, idle_writer):
            w.close()
        with pytest.raises(OSError):
            await connect(h)


# --- pure helpers -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("query", "options"), [
    ({"output": ["1"]}, streaming.StreamOptions(stdin=False, stdout=True, stderr=False, tty=False)),
    ({"input": ["1"], "error": ["1"]}, streaming.StreamOptions(stdin=True, stdout=False, stderr=True, tty=False)),
    ({"output": ["1"], "error": ["1"], "tty": ["1"]}, streaming.StreamOptions(stdin=False, stdout=True, stderr=False,
                                                                       tty=True)),
    ({"output": ["true"], "input": ["1"]}, streaming.StreamOptions(stdin=True, stdout=False, stderr=False, tty=False)),
])
def test_stream_options(query: dict[str, list[str]], options: streaming.StreamOptions) -> None:
    assert streaming.stream_options(query) == options


@pytest.mark.parametrize(("headers", "upgrade", "websocket"), [
    ({"connection": ["Upgrade"], "upgrade": ["SPDY/3.1"]}, True, False),
    ({"connection": ["keep-alive, Upgrade"], "upgrade": ["websocket"]}, True, True),
    ({"connection": ["keep-alive"], "upgrade": ["websocket"]}, False, False),
    ({"upgrade": ["websocket"]}, False, False),
])
def test_upgrade_detection(headers: dict[str, list[str]], upgrade: bool, websocket: bool) -> None:
    assert (srv.is_upgrade_request(headers), srv.is_websocket_request(headers)) == (upgrade, websocket)


def test_split_target_decodes_the_path() -> None:
    assert split_target("/containerLogs/ns/p%2Dx/c?follow=true&x=&x=2") == (
        "/containerLogs/ns/p-x/c", {"follow": ["true"], "x": ["", "2"]})
