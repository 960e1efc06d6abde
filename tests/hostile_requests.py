"""A corpus of hostile requests against the kubelet API (:10250) and the answer each must get, with a small raw
TLS client to send them: oversized heads and bodies, malformed HTTP, path traversal in ``/logs/`` and
``/containerLogs/``, containerLogs query abuse, and bad exec/attach/portForward upgrade handshakes.

One table for two tests: tests/unit/test_server_hostile.py sends it to kopflet's server in-process (a backend whose
runtime fails loudly if reached), tests/e2e/test_kubelet_api_hostile.py to the running agent. Each answer is the
upstream kubelet's where it has one (``upstream`` says from where, and why kopflet differs where it does); the
tests also check that the server answers a normal request after every case. Timing cases (slow clients, idle and
silent connections) are tests of their own in both modules.

Every request carries ``Host: kubelet`` and no credentials: the client authenticates with its TLS certificate.
Blocking (sockets): the async unit test runs it in a thread.
"""

from __future__ import annotations

import dataclasses
import select
import socket
import ssl
import time
from collections.abc import Mapping

MIB = 1 << 20
HOST = "Host: kubelet"
TLS_TIMEOUT = 10.0

SPDY_EXEC = ("Connection: Upgrade", "Upgrade: SPDY/3.1", "X-Stream-Protocol-Version: v4.channel.k8s.io")
SPDY_PORT_FORWARD = ("Connection: Upgrade", "Upgrade: SPDY/3.1", "X-Stream-Protocol-Version: portforward.k8s.io")
WEBSOCKET = ("Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13",
             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==")
EXEC = "/exec/ns/p/c?command=sh&output=1"
REMOTE_COMMAND_PROTOCOLS = "[v4.channel.k8s.io v3.channel.k8s.io v2.channel.k8s.io channel.k8s.io]"
NOT_FOUND = "404 page not found\n"
X_FORWARDED_FOR = '"X-Forwarded-For":[]string{"127.0.0.1"}'
"""The client's address as the streaming server would see it (both tests connect from 127.0.0.1)."""


def request(target: str, *headers: str, method: str = "GET", body: bytes = b"", host: bool = True) -> bytes:
    """One HTTP/1.1 request's bytes."""
    lines = [f"{method} {target} HTTP/1.1", *([HOST] if host else []), *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def redirect_link(location: str) -> str:
    """Go's http.Redirect body for a GET."""
    return f'<a href="{location}">Temporary Redirect</a>.\n\n'


@dataclasses.dataclass(frozen=True)
class Case:
    """One hostile request and the answer it must get."""

    id: str
    category: str
    request: bytes
    status: int
    body: str | None = None
    """The whole body, exactly; None: see ``contains``."""
    contains: str = ""
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Response headers that must be there (lower-case name: first value)."""
    closes: bool = False
    """The server ends the connection after the answer; otherwise it must serve another request on it."""
    upstream: str = ""
    """Where upstream's answer comes from; where kopflet's differs, why."""

    def __str__(self) -> str:
        return self.id


def _refused(case_id: str, category: str, data: bytes, status: int, body: str, upstream: str) -> Case:
    """A request the HTTP layer refuses: the answer names the status, and the connection ends."""
    return Case(case_id, category, data, status, body, closes=True, upstream=upstream)


BAD_REQUEST = "400 Bad Request"
HEAD_TOO_LARGE = "431 Request Header Fields Too Large"
TE_REFUSED = "request bodies with Transfer-Encoding are not supported"

CASES: tuple[Case, ...] = (
    # ---------------------------------------------------------------------------------- oversized heads
    _refused("head-over-1mib", "head", request("/healthz", *(f"X-H{i}: {'v' * 4500}" for i in range(250))),
             431, HEAD_TOO_LARGE, "Go's MaxHeaderBytes (1 MiB, server.go ListenAndServeKubeletServer)"),
    _refused("header-line-2mib", "head", request("/healthz", "X-Big: " + "a" * (2 * MIB)), 431, HEAD_TOO_LARGE,
             "Go's MaxHeaderBytes"),
    _refused("request-line-70kib", "head", request("/" + "a" * 70_000), 414, "414 Request-URI Too Long",
             "Go limits only the whole head; kopflet also limits a line to 64 KiB (docs/architecture.md)"),
    _refused("300-headers", "head", request("/healthz", *(f"X-Many: {i}" for i in range(300))), 431, HEAD_TOO_LARGE,
             "Go has no count limit under MaxHeaderBytes; kopflet takes 256 header lines"),
    # --------------------------------------------------------------------------------------- bodies
    _refused("get-body-5mib", "body", request("/healthz", f"Content-Length: {5 * MIB}", body=b"x" * (5 * MIB)),
             413, "413 Request Entity Too Large",
             "Go leaves an unread body to the handler (the kubelet's read none); kopflet refuses over 1 MiB"),
    _refused("expect-continue-5mib", "body", request("/healthz", f"Content-Length: {5 * MIB}",
                                                     "Expect: 100-continue", method="POST"),
             413, "413 Request Entity Too Large", "as get-body-5mib, before the client sends the body"),
    _refused("chunked-garbage", "body", request("/healthz", "Transfer-Encoding: chunked", method="POST",
                                                body=b"zz\r\nhello\r\n0\r\n\r\n"),
             501, TE_REFUSED, "Go takes chunked bodies; no kubelet endpoint takes a body"),
    _refused("content-length-and-chunked", "body", request("/healthz", "Content-Length: 3",
                                                           "Transfer-Encoding: chunked", method="POST", body=b"abc"),
             501, TE_REFUSED, "request smuggling: Go drops the Content-Length; kopflet refuses the coding"),
    _refused("two-content-lengths", "body", request("/healthz", "Content-Length: 3", "Content-Length: 4",
                                                    method="POST", body=b"abcd"),
             400, BAD_REQUEST, "Go's readTransfer: 400"),
    _refused("negative-content-length", "body", request("/healthz", "Content-Length: -1", method="POST"), 400,
             BAD_REQUEST, "Go: bad Content-Length, 400"),
    # ------------------------------------------------------------------------------------ malformed
    _refused("garbage", "malformed", b"\x16\x03\x01\x00\xff\xfe garbage\r\n\r\n", 400, BAD_REQUEST,
             "Go: malformed HTTP request"),
    _refused("control-byte-in-method", "malformed", b"G\x01T /healthz HTTP/1.1\r\nHost: kubelet\r\n\r\n", 400,
             BAD_REQUEST, "Go: invalid method"),
    _refused("http-0.9", "malformed", b"GET /healthz\r\n", 400, BAD_REQUEST,
             "Go answers once the request line is read; kopflet used to wait for the head's deadline"),
    _refused("lower-case-version", "malformed", b"GET /healthz http/1.1\r\nHost: kubelet\r\n\r\n", 400, BAD_REQUEST,
             "Go: malformed HTTP version"),
    _refused("http-2.0", "malformed", b"GET /healthz HTTP/2.0\r\nHost: kubelet\r\n\r\n", 505,
             "505 HTTP Version Not Supported: unsupported protocol version", "Go's http1ServerSupportsRequest"),
    _refused("h2-preface", "malformed", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505,
             "505 HTTP Version Not Supported: unsupported protocol version",
             "Go answers 400 (no h2c on :10250); kopflet refuses the version first"),
    _refused("no-host", "malformed", request("/healthz", host=False), 400,
             "400 Bad Request: missing required Host header", "Go's readRequest"),
    _refused("two-hosts", "malformed", request("/healthz", "Host: other"), 400,
             "400 Bad Request: too many Host headers", "Go's readRequest"),
    _refused("obsolete-line-folding", "malformed", request("/healthz", "X-A: a", " folded"), 400,
             "obsolete line folding is not supported", "Go unfolds; RFC 9112 5.2 lets a server refuse instead"),
    _refused("nul-in-header", "malformed", b"GET /healthz HTTP/1.1\r\nHost: kubelet\r\nX-A: a\x00b\r\n\r\n", 400,
             BAD_REQUEST, "Go: invalid header field value"),
    _refused("absolute-form-target", "malformed", request("http://evil.example/healthz"), 400, BAD_REQUEST,
             "Go serves the path of an absolute URL; kopflet is no proxy and takes origin-form only"),
    _refused("bad-percent-escape", "malformed", request("/healthz%zz"), 400, BAD_REQUEST,
             "Go's url.ParseRequestURI: invalid URL escape"),
    _refused("non-ascii-target", "malformed", "GET /containerLogs/ns/p\u00e9/c HTTP/1.1\r\nHost: kubelet\r\n\r\n"
             .encode(), 400, BAD_REQUEST, "Go routes raw UTF-8; h11 (RFC 9112) takes visible ASCII only"),
    Case("bare-lf-line-ends", "malformed", b"GET /healthz HTTP/1.1\nHost: kubelet\n\n", 200, "ok",
         upstream="tolerated by both (RFC 9112 2.2)"),
    # ------------------------------------------------------------------------ /logs/: path traversal
    Case("logs-dot-dot", "logs", request("/logs/../../etc/passwd"), 307, redirect_link("/etc/passwd"),
         headers={"location": "/etc/passwd"},
         upstream="Go's ServeMux redirects to the clean path before any filter; no handler sees a '..' segment"),
    Case("logs-dot-dot-post", "logs", request("/logs/../x?a=1", "Content-Length: 0", method="POST"), 307, "",
         headers={"location": "/x?a=1"}, upstream="http.Redirect: no body (nor Content-Type) but for GET/HEAD"),
    Case("logs-dot-dot-deep", "logs", request("/logs/containers/../../../../etc/shadow"), 307,
         redirect_link("/etc/shadow"), headers={"location": "/etc/shadow"}, upstream="Go's ServeMux"),
    Case("logs-double-slash", "logs", request("/logs//etc/passwd"), 307, redirect_link("/logs/etc/passwd"),
         headers={"location": "/logs/etc/passwd"}, upstream="Go's ServeMux"),
    Case("root-double-slash", "logs", request("//etc/passwd"), 307, redirect_link("/etc/passwd"),
         headers={"location": "/etc/passwd"}, upstream="Go's ServeMux"),
    Case("logs-encoded-dot-dot", "logs", request("/logs/%2e%2e/%2e%2e/etc/passwd"), 404, NOT_FOUND,
         upstream="not a dot segment for the mux; the file server (enableSystemLogHandler, on by default) cleans "
                  "the decoded path inside /var/log: /var/log/etc/passwd, not there"),
    Case("logs-encoded-slashes", "logs", request("/logs/..%2f..%2fetc%2fpasswd"), 404, NOT_FOUND,
         upstream="as logs-encoded-dot-dot"),
    Case("logs-double-encoded", "logs", request("/logs/%252e%252e%252fetc%252fpasswd"), 404, NOT_FOUND,
         upstream="as logs-encoded-dot-dot: one decoding, a file named '%2e%2e%2fetc%2fpasswd'"),
    Case("logs-absolute", "logs", request("/logs/%2fetc%2fpasswd"), 404, NOT_FOUND,
         upstream="as logs-encoded-dot-dot: /var/log/etc/passwd"),
    Case("logs-root", "logs", request("/logs/"), 200, None,
         contains='<meta name="viewport" content="width=device-width">',
         upstream="http.FileServer's listing of /var/log (enableSystemLogHandler on, upstream's default)"),
    # -------------------------------------------------------------------------------- /containerLogs/
    Case("container-logs-dot-dot", "containerLogs", request("/containerLogs/ns/../p/c"), 307,
         redirect_link("/containerLogs/p/c"), headers={"location": "/containerLogs/p/c"}, upstream="Go's ServeMux"),
    Case("container-logs-deep-dot-dot", "containerLogs", request("/containerLogs/../../../etc/passwd/c/d"), 307,
         redirect_link("/etc/passwd/c/d"), headers={"location": "/etc/passwd/c/d"}, upstream="Go's ServeMux"),
    Case("container-logs-encoded-dot-dot-pod", "containerLogs", request("/containerLogs/ns/%2e%2e/c"), 404,
         'pod ".." does not exist', closes=True, upstream='getContainerLogs: pod %q does not exist'),
    Case("container-logs-encoded-slashes", "containerLogs", request("/containerLogs/..%2f..%2fetc/passwd/c"), 404,
         "404 page not found\n", upstream="the decoded path has five segments: no route"),
    Case("container-logs-newline-in-name", "containerLogs", request("/containerLogs/ns/p%0aX-Evil:%201/c"), 404,
         'pod "p\\nX-Evil: 1" does not exist', closes=True, upstream="%q: the caller's newline is escaped"),
    Case("container-logs-negative-tail", "containerLogs", request("/containerLogs/ns/p/c?tailLines=-1"), 422,
         "tailLines: Invalid value: -1: must be greater than or equal to 0", closes=True,
         upstream='ValidatePodLogOptions: 422 (upstream\'s body: {"message": "Invalid request."})'),
    Case("container-logs-legacy-tail", "containerLogs", request("/containerLogs/ns/p/c?tail=-5"), 422,
         "tailLines: Invalid value: -5: must be greater than or equal to 0", closes=True,
         upstream="the old tail parameter becomes tailLines"),
    Case("container-logs-since-seconds-abc", "containerLogs", request("/containerLogs/ns/p/c?sinceSeconds=abc"), 400,
         'sinceSeconds: strconv.ParseInt: parsing "abc": invalid syntax', closes=True,
         upstream='DecodeParameters fails: 400 (upstream\'s body: {"message": "Unable to decode query."})'),
    Case("container-logs-limit-bytes-huge", "containerLogs",
         request("/containerLogs/ns/p/c?limitBytes=99999999999999999999"), 400,
         'limitBytes: strconv.ParseInt: parsing "99999999999999999999": value out of range', closes=True,
         upstream="as container-logs-since-seconds-abc"),
    Case("container-logs-limit-bytes-zero", "containerLogs", request("/containerLogs/ns/p/c?limitBytes=0"), 422,
         "limitBytes: Invalid value: 0: must be greater than 0", closes=True, upstream="ValidatePodLogOptions"),
    Case("container-logs-since-time-bad", "containerLogs", request("/containerLogs/ns/p/c?sinceTime=yesterday"), 400,
         contains='sinceTime: parsing time "yesterday" as RFC3339', closes=True, upstream="DecodeParameters"),
    Case("container-logs-since-both", "containerLogs",
         request("/containerLogs/ns/p/c?sinceSeconds=1&sinceTime=2024-01-02T03:04:05Z"), 422,
         "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified", closes=True,
         upstream="ValidatePodLogOptions"),
    Case("container-logs-stream-bogus", "containerLogs", request("/containerLogs/ns/p/c?stream=bogus"), 422,
         'stream: Unsupported value: "bogus": supported values: "All", "Stderr", "Stdout"', closes=True,
         upstream="ValidatePodLogOptions (PodLogsQuerySplitStreams)"),
    Case("container-logs-post", "containerLogs", request("/containerLogs/ns/p/c", "Content-Length: 0", method="POST"),
         405, "Method Not Allowed", headers={"allow": "GET"}, upstream="restful route: GET only"),
    # -------------------------------------------------------------------------- upgrade handshakes
    Case("exec-not-an-upgrade", "upgrade", request(EXEC, method="POST"), 400, "Upgrade request required",
         upstream="UpgradeAwareHandler with upgradeRequired (upstream asks the runtime first)"),
    Case("exec-websocket-without-connection-upgrade", "upgrade",
         request(EXEC, "Connection: keep-alive", "Upgrade: websocket"), 400, "Upgrade request required",
         upstream="httpstream.IsUpgradeRequest"),
    Case("exec-connection-upgrade-no-upgrade-header", "upgrade",
         request(EXEC, "Connection: Upgrade", "X-Stream-Protocol-Version: v4.channel.k8s.io", method="POST"), 400,
         'unable to upgrade: missing upgrade headers in request: http.Header{"Connection":[]string{"Upgrade"}, '
         f'{X_FORWARDED_FOR}, "X-Stream-Protocol-Version":[]string{{"v4.channel.k8s.io"}}}}\n',
         upstream="spdy.responseUpgrader.UpgradeResponse on the streaming server"),
    Case("exec-upgrade-h2c", "upgrade",
         request(EXEC, "Connection: Upgrade", "Upgrade: h2c", "X-Stream-Protocol-Version: v4.channel.k8s.io",
                 method="POST"), 400,
         contains='unable to upgrade: missing upgrade headers in request: http.Header{"Connection":[]string{'
                  '"Upgrade"}, "Upgrade":[]string{"h2c"}', upstream="spdy.responseUpgrader.UpgradeResponse"),
    Case("attach-upgrade-spdy-2", "upgrade",
         request("/attach/ns/p/c?output=1", "Connection: Upgrade", "Upgrade: SPDY/2",
                 "X-Stream-Protocol-Version: v4.channel.k8s.io", method="POST"), 400,
         contains="unable to upgrade: missing upgrade headers in request:",
         upstream="spdy.responseUpgrader.UpgradeResponse"),
    Case("exec-spdy-unknown-protocol", "upgrade",
         request(EXEC, "Connection: Upgrade", "Upgrade: SPDY/3.1", "X-Stream-Protocol-Version: v99.channel.k8s.io",
                 method="POST"), 403,
         "unable to upgrade: unable to negotiate protocol: client supports [v99.channel.k8s.io], server accepts "
         f"{REMOTE_COMMAND_PROTOCOLS}\n", headers={"x-accepted-stream-protocol-versions": "v4.channel.k8s.io"},
         upstream="httpstream.Handshake on the streaming server"),
    Case("exec-spdy-no-protocol", "upgrade",
         request(EXEC, "Connection: Upgrade", "Upgrade: SPDY/3.1", method="POST"), 400,
         "unable to upgrade: header X-Stream-Protocol-Version does not exist in request with 3 headers\n",
         upstream="httpstream.Handshake (the streaming server sees Connection, Upgrade, X-Forwarded-For)"),
    Case("exec-spdy-empty-protocol", "upgrade",
         request(EXEC, "Connection: Upgrade", "Upgrade: SPDY/3.1", "X-Stream-Protocol-Version: , ,",
                 method="POST"), 400,
         "unable to upgrade: header X-Stream-Protocol-Version contains [, ,], but no valid protocols\n",
         upstream="httpstream.Handshake"),
    Case("port-forward-spdy-exec-protocol", "upgrade", request("/portForward/ns/p", *SPDY_EXEC, method="POST"), 403,
         "unable to upgrade: unable to negotiate protocol: client supports [v4.channel.k8s.io], server accepts "
         "[portforward.k8s.io]\n", headers={"x-accepted-stream-protocol-versions": "portforward.k8s.io"},
         upstream="httpstream.Handshake with portforward.SupportedProtocols"),
    Case("exec-websocket-post", "upgrade", request(EXEC, *WEBSOCKET, method="POST"), 405, "bad method",
         upstream="x/net/websocket ReadHandshake"),
    Case("exec-websocket-no-key", "upgrade", request(EXEC, "Connection: Upgrade", "Upgrade: websocket",
                                                     "Sec-WebSocket-Version: 13"), 400,
         "mismatch challenge/response", upstream="x/net/websocket ReadHandshake"),
    Case("exec-websocket-version-8", "upgrade",
         request(EXEC, "Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 8",
                 "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="), 400, "missing or bad WebSocket Version",
         headers={"sec-websocket-version": "13"}, upstream="x/net/websocket ReadHandshake"),
    Case("exec-websocket-unknown-subprotocol", "upgrade",
         request(EXEC, *WEBSOCKET, "Sec-WebSocket-Protocol: chat, superchat"), 403,
         "requested protocol(s) are not supported: [chat superchat]; supports "
         "[ channel.k8s.io base64.channel.k8s.io v4.channel.k8s.io v4.base64.channel.k8s.io]",
         upstream="wsstream's handshake: 403 (x/net sends it without this reason)"),
    Case("port-forward-websocket-spdy-subprotocol", "upgrade",
         request("/portForward/ns/p?port=80", *WEBSOCKET, "Sec-WebSocket-Protocol: portforward.k8s.io"), 403,
         contains="requested protocol(s) are not supported: [portforward.k8s.io]", upstream="wsstream's handshake"),
    Case("port-forward-websocket-no-port", "upgrade", request("/portForward/ns/p", *WEBSOCKET), 400,
         'query parameter "port" is required', upstream="portforward.NewV4Options"),
    Case("port-forward-websocket-port-too-big", "upgrade", request("/portForward/ns/p?port=99999", *WEBSOCKET), 400,
         'unable to parse "99999" as a port', upstream="portforward.NewV4Options"),
    Case("exec-no-streams", "upgrade", request("/exec/ns/p/c?command=sh", *SPDY_EXEC, method="POST"), 400,
         "you must specify at least 1 of stdin, stdout, stderr", upstream="remotecommand.NewOptions"),
    Case("exec-put", "upgrade", request(EXEC, *SPDY_EXEC, "Content-Length: 0", method="PUT"), 405,
         "Method Not Allowed", headers={"allow": "GET, POST"}, upstream="restful routes: GET and POST"),
)


# --------------------------------------------------------------------------------------------------- the client

@dataclasses.dataclass
class Answer:
    status: int
    headers: dict[str, list[str]]
    body: bytes

    def header(self, name: str) -> str | None:
        values = self.headers.get(name.lower())
        return values[0] if values else None

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


def tls_context(cafile: str | None = None, cert: tuple[str, str] | None = None) -> ssl.SSLContext:
    """A client context: verifying the server against ``cafile`` (no hostname), or not at all without one."""
    context = ssl.create_default_context(cafile=cafile)
    context.check_hostname = False
    if cafile is None:
        context.verify_mode = ssl.CERT_NONE
    if cert is not None:
        context.load_cert_chain(*cert)
    return context


def connect(port: int, context: ssl.SSLContext, *, host: str = "127.0.0.1",
            timeout: float = TLS_TIMEOUT) -> ssl.SSLSocket:
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        return context.wrap_socket(sock, server_hostname=host)
    except BaseException:
        sock.close()
        raise


class _Reader:
    """Buffered reads from a socket, with a deadline for the whole answer."""

    def __init__(self, sock: ssl.SSLSocket, timeout: float) -> None:
        self.sock, self.buffer, self.deadline = sock, bytearray(), time.monotonic() + timeout

    def _more(self) -> bool:
        self.sock.settimeout(max(0.01, self.deadline - time.monotonic()))
        data = self.sock.recv(65536)
        self.buffer += data
        return bool(data)

    def until(self, marker: bytes) -> bytes:
        while (end := self.buffer.find(marker)) < 0:
            if not self._more():
                raise ConnectionError(f"connection closed before {marker!r}: {bytes(self.buffer[:200])!r}")
        data = bytes(self.buffer[:end + len(marker)])
        del self.buffer[:end + len(marker)]
        return data

    def exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            if not self._more():
                raise ConnectionError(f"connection closed after {len(self.buffer)} of {size} bytes")
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    def rest(self) -> bytes:
        while self._more():
            pass
        data = bytes(self.buffer)
        self.buffer.clear()
        return data


def read_answer(sock: ssl.SSLSocket, *, head_only: bool = False, timeout: float = TLS_TIMEOUT) -> Answer:
    """One response: its head, then its body by Content-Length, chunks or the connection's end."""
    reader = _Reader(sock, timeout)
    lines = reader.until(b"\r\n\r\n").decode("latin-1").split("\r\n")
    headers: dict[str, list[str]] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers.setdefault(name.strip().lower(), []).append(value.strip())
    status = int(lines[0].split(" ")[1])
    body = b""
    if head_only or status in (101, 204, 304):
        pass
    elif "chunked" in headers.get("transfer-encoding", []):
        while size := int(reader.until(b"\r\n").strip().split(b";")[0], 16):
            body += reader.exactly(size + 2)[:-2]
        reader.until(b"\r\n")
    elif "content-length" in headers:
        body = reader.exactly(int(headers["content-length"][0]))
    else:
        body = reader.rest()
    if reader.buffer and status != 101:  # after a 101 the new protocol's bytes may follow at once
        raise AssertionError(f"bytes after the answer: {bytes(reader.buffer[:200])!r}")
    return Answer(status, headers, body)


def send(sock: ssl.SSLSocket, data: bytes) -> None:
    """Send it all; a server that refused early may hang up before the rest is sent (its answer is then read)."""
    try:
        sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError, ssl.SSLEOFError, ssl.SSLZeroReturnError):
        pass


def is_closed(sock: ssl.SSLSocket, timeout: float = 5.0) -> bool:
    """Whether the server ended the connection (EOF or reset within ``timeout``); False when it stays open."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except (ConnectionError, ssl.SSLError):
        return True


def get(port: int, context: ssl.SSLContext, target: str, *headers: str) -> Answer:
    """A plain request on a connection of its own."""
    with connect(port, context) as sock:
        sock.sendall(request(target, *headers, "Connection: close"))
        return read_answer(sock)


def check(case: Case, answer: Answer) -> None:
    """The answer is the one ``case`` names."""
    assert answer.status == case.status, (case.id, answer.status, answer.text[:500])
    if case.body is not None:
        assert answer.text == case.body, (case.id, answer.text[:500])
    assert case.contains in answer.text, (case.id, answer.text[:500])
    for name, value in case.headers.items():
        assert answer.header(name) == value, (case.id, name, answer.headers)
    assert "Traceback" not in answer.text, case.id


def run(case: Case, port: int, context: ssl.SSLContext) -> Answer:
    """Send one case on a new connection, check the answer, then that the connection ended (``closes``) or
    serves a normal request next."""
    with connect(port, context) as sock:
        send(sock, case.request)
        answer = read_answer(sock, head_only=case.request.startswith(b"HEAD "))
        check(case, answer)
        if case.closes:
            assert is_closed(sock), f"{case.id}: the connection stayed open"
        else:
            sock.sendall(request("/healthz"))
            after = read_answer(sock)
            assert (after.status, after.text) == (200, "ok"), (case.id, after.status, after.text)
    return answer


def slow_loris(port: int, context: ssl.SSLContext, data: bytes, pause: float,
               answer_timeout: float = 30.0) -> tuple[Answer, float]:
    """Send ``data`` a byte at a time, ``pause`` apart, until the server answers; the answer and when it came (after
    it the server must have closed the connection)."""
    started = time.monotonic()
    with connect(port, context) as sock:
        for byte in data:
            try:
                sock.sendall(bytes([byte]))
            except (ConnectionError, ssl.SSLError):
                break
            if sock.pending() or select.select([sock], [], [], pause)[0]:
                break  # the server answered
        answer = read_answer(sock, timeout=answer_timeout)
        assert is_closed(sock)
        return answer, time.monotonic() - started


def plain_http(port: int, path: str = "/healthz") -> bytes:
    """A plain-HTTP request to the TLS port; whatever comes back before the connection ends."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request(path))
        data = b""
        try:
            while chunk := sock.recv(1024):
                data += chunk
        except ConnectionError:
            pass
        return data
