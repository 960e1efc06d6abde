"""The kubelet API: the HTTPS server on ``--address``:``--port`` that ``kubectl logs/exec/port-forward`` reach.

The apiserver proxies those commands here (``/containerLogs``, ``/exec``, ``/attach``, ``/portForward``), and
monitoring reads ``/pods``, ``/stats/summary`` and ``/metrics/*``. As upstream (``pkg/kubelet/server``) every
request is authenticated (401 ``Unauthorized``), then authorized on ``nodes/<subresource>`` (403 with upstream's
message), then routed. For exec, attach and port-forward the runtime hands out a streaming URL (the CRI
``Exec``/``Attach``/``PortForward`` answer, containerd's own streaming server); the client's upgrade request is
replayed there and the bytes are piped both ways untouched, as ``proxy.UpgradeAwareHandler`` does, so SPDY/3.1
and WebSocket sessions both pass through.

The HTTP/1.1 here is our own and small, because those upgrades need the raw connection: request line, headers
and ``Content-Length`` bodies with size limits, keep-alive between plain requests, and a streaming response
(chunked logs, an upgrade) ends the connection. The rest of the agent is reached only through :class:`Backend`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import email.utils
import http
import ipaddress
import logging
import os
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

from kopflet import gotext
from kopflet.config.settings import AgentConfig
from kopflet.server import auth_rules
from kopflet.server.auth_rules import Attributes, Subject, UserInfo, is_upgrade_request, is_websocket_request

logger = logging.getLogger(__name__)

MAX_LINE = 64 * 1024
"""The longest request line or header line."""
MAX_HEADER_BYTES = 1 << 20
"""All of a request's head, as upstream's ``MaxHeaderBytes``."""
MAX_HEADERS = 256
MAX_BODY = 1 << 20
"""No kubelet endpoint takes a body; a small one is read and ignored."""
IDLE_TIMEOUT = 90.0
"""A kept-alive connection waits this long for its next request (upstream's ``IdleTimeout``)."""
HEAD_TIMEOUT = 60.0
"""Once a request has started, its head and body must arrive within this."""
WRITE_TIMEOUT = 120.0
"""One response write to a client that does not read; streams (logs, upgrades) are not limited."""
HANDSHAKE_TIMEOUT = 30.0
BACKEND_CONNECT_TIMEOUT = 10.0
BACKEND_RESPONSE_TIMEOUT = 30.0
BACKEND_ERROR_TIMEOUT = 10.0
"""How long a streaming server's error answer is relayed (upstream's 10s deadline)."""
PIPE_CHUNK = 64 * 1024

TEXT = "text/plain; charset=utf-8"
METRICS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
JSON = "application/json"
NOT_FOUND = "404 page not found\n"
# Request headers never replayed to the streaming server: ours to answer, or already used (the credentials).
_NOT_PROXIED = frozenset({"host", "authorization", "content-length", "transfer-encoding", "expect"})


# --------------------------------------------------------------------------------------------------- the backend

WriteFn = Callable[[bytes], Awaitable[None]]


class Backend(Protocol):
    """What the server needs from the agent. LookupError means 404, ValueError 400, anything else 500."""

    def pods(self) -> list[dict[str, Any]]:
        """The pods the agent manages (``GET /pods``), as API objects."""
        ...

    async def running_pods(self) -> list[dict[str, Any]]:
        """The pods the runtime runs (``GET /runningpods/``), as API objects built from the runtime's view."""
        ...

    def metrics(self) -> str:
        """``GET /metrics``: the agent's own metrics, Prometheus text format 0.0.4."""
        ...

    async def resource_metrics(self) -> str:
        """``GET /metrics/resource``: node, pod and container CPU and memory (what metrics-server reads)."""
        ...

    async def probe_metrics(self) -> str:
        """``GET /metrics/probes``: prober results; "" when there are none."""
        ...

    async def stats_summary(self) -> dict[str, Any]:
        """``GET /stats/summary``: the Summary API object."""
        ...

    async def container_logs(self, namespace: str, pod: str, container: str, query: Mapping[str, list[str]],
                             write: WriteFn) -> None:
        """Stream a container's log to ``write`` as it comes (``follow`` etc. are in ``query``, PodLogOptions).

        Return when done; with follow, the server cancels this when the client goes away.
        """
        ...

    async def exec_url(self, namespace: str, pod: str, uid: str | None, container: str, command: list[str], *,
                       stdin: bool, stdout: bool, stderr: bool, tty: bool) -> str:
        """The runtime's streaming URL for an exec session (CRI ``Exec``)."""
        ...

    async def attach_url(self, namespace: str, pod: str, uid: str | None, container: str, *,
                         stdin: bool, stdout: bool, stderr: bool, tty: bool) -> str:
        """The runtime's streaming URL for attaching to a container (CRI ``Attach``)."""
        ...

    async def port_forward_url(self, namespace: str, pod: str, uid: str | None, ports: list[int]) -> str:
        """The runtime's streaming URL for port forwarding (CRI ``PortForward``); SPDY clients name the ports
        in their streams later, so ``ports`` is often empty."""
        ...


class Authenticating(Protocol):
    async def authenticate(self, headers: MutableMapping[str, list[str]], subject: Subject | None = None,
                           der: bytes | None = None) -> UserInfo | None: ...


class Authorizing(Protocol):
    async def authorize(self, user: UserInfo, attrs: Attributes) -> bool: ...


# ------------------------------------------------------------------------------------------------------ HTTP/1.1

class HttpError(Exception):
    """A request we answer with ``status`` and ``message`` and then close the connection."""

    def __init__(self, status: int, message: str | None = None) -> None:
        phrase = http.HTTPStatus(status).phrase
        super().__init__(message or f"{status} {phrase}")
        self.status, self.message = status, message or f"{status} {phrase}"


@dataclasses.dataclass
class Request:
    method: str
    target: str
    """The request-target as sent (path and query)."""
    path: str
    """The percent-decoded path, as Go's ``URL.Path``."""
    query: dict[str, list[str]]
    version: str
    headers: dict[str, list[str]]
    """Lower-case names; repeated headers keep every value in order."""
    body: bytes = b""
    remote: str = ""
    unread_body: int = 0
    """``Expect: 100-continue``: the body was not asked for (nothing here needs one); the connection then closes."""

    def header(self, name: str) -> str | None:
        values = self.headers.get(name.lower())
        return values[0] if values else None

    def tokens(self, name: str) -> list[str]:
        """A comma-separated header's tokens, lower-cased, over all its lines."""
        return [t.strip().lower() for v in self.headers.get(name.lower(), ()) for t in v.split(",") if t.strip()]

    @property
    def keep_alive(self) -> bool:
        return self.version == "HTTP/1.1" and "close" not in self.tokens("connection") and not self.unread_body


_T = TypeVar("_T")
_TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def parse_request_line(line: bytes) -> tuple[str, str, str]:
    """``METHOD target HTTP/1.x`` -> its parts; HttpError for anything else."""
    try:
        text = line.decode("ascii").rstrip("\r\n")
    except UnicodeDecodeError:
        raise HttpError(400) from None
    parts = text.split(" ")
    if len(parts) != 3 or not parts[0] or not set(parts[0]) <= _TOKEN_CHARS:
        raise HttpError(400)
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise HttpError(505)
    if not target.startswith("/") or any(c <= " " or c == "\x7f" for c in target):
        raise HttpError(400)
    return method, target, version


def parse_header_line(line: bytes) -> tuple[str, str]:
    """``Name: value`` -> (lower-case name, value without surrounding whitespace)."""
    try:
        text = line.decode("latin-1").rstrip("\r\n")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes anything
        raise HttpError(400) from None
    name, colon, value = text.partition(":")
    if not colon or not name or not set(name) <= _TOKEN_CHARS:
        raise HttpError(400)  # also obsolete line folding and "Name :" (RFC 9112 5.1)
    if any(c in value for c in "\r\n\0"):
        raise HttpError(400)
    return name.lower(), value.strip(" \t")


def split_target(target: str) -> tuple[str, dict[str, list[str]]]:
    """The decoded path and the query's parameters (repeated ones in order, blanks kept)."""
    raw_path, _, raw_query = target.partition("?")
    return unquote(raw_path), parse_qs(raw_query, keep_blank_values=True)


async def read_request(reader: asyncio.StreamReader, *, remote: str = "",
                       idle_timeout: float = IDLE_TIMEOUT) -> Request | None:
    """The next request on a connection; None when the client closed it (or stayed idle) between requests."""
    try:
        async with asyncio.timeout(idle_timeout):
            line = await reader.readline()
            while line in (b"\r\n", b"\n"):  # RFC 9112 2.2: ignore empty lines before a request
                line = await reader.readline()
    except TimeoutError:
        return None
    except ValueError:  # the line exceeded the reader's limit
        raise HttpError(414) from None
    if not line:
        return None
    if not line.endswith(b"\n"):
        raise HttpError(400)
    async with asyncio.timeout(HEAD_TIMEOUT):
        method, target, version = parse_request_line(line)
        headers: dict[str, list[str]] = {}
        total, count = len(line), 0
        while True:
            try:
                line = await reader.readline()
            except ValueError:
                raise HttpError(431) from None
            if not line.endswith(b"\n"):
                raise HttpError(400)
            total += len(line)
            if total > MAX_HEADER_BYTES:
                raise HttpError(431)
            if line in (b"\r\n", b"\n"):
                break
            count += 1
            if count > MAX_HEADERS:
                raise HttpError(431)
            name, value = parse_header_line(line)
            headers.setdefault(name, []).append(value)
        if version == "HTTP/1.1" and len(headers.get("host", ())) != 1:
            raise HttpError(400, "missing required Host header" if "host" not in headers else None)
        if "transfer-encoding" in headers:
            raise HttpError(501, "request bodies with Transfer-Encoding are not supported")
        lengths = {v.strip() for values in headers.get("content-length", ()) for v in values.split(",")}
        body, unread = b"", 0
        if lengths:
            if len(lengths) != 1 or not next(iter(lengths)).isdigit():
                raise HttpError(400, "bad Content-Length")
            length = int(next(iter(lengths)))
            if length > MAX_BODY:
                raise HttpError(413)
            if length and "100-continue" in [v.strip().lower() for v in headers.get("expect", ())]:
                unread = length  # answered without "100 Continue", so the client does not send it
            elif length:
                body = await reader.readexactly(length)
    path, query = split_target(target)
    return Request(method, target, path, query, version, headers, body, remote, unread)


def status_line(status: int) -> bytes:
    return f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\n".encode()


def response_head(status: int, headers: Iterable[tuple[str, str]]) -> bytes:
    lines = [status_line(status), f"Date: {email.utils.formatdate(usegmt=True)}\r\n".encode()]
    lines.extend(f"{name}: {value}\r\n".encode("latin-1") for name, value in headers)
    lines.append(b"\r\n")
    return b"".join(lines)


@dataclasses.dataclass(frozen=True)
class StreamOptions:
    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool


def stream_options(query: Mapping[str, list[str]]) -> StreamOptions:
    """``remotecommand.NewOptions``: ``input``/``output``/``error``/``tty`` are on when "1"; no tty stderr."""
    def on(name: str) -> bool:
        return (query.get(name) or [""])[0] == "1"

    tty, stdin, stdout, stderr = on("tty"), on("input"), on("output"), on("error")
    if tty and stderr:
        stderr = False  # upstream ignores stderr with a tty
    if not (stdin or stdout or stderr):
        raise ValueError("you must specify at least 1 of stdin, stdout, stderr")
    return StreamOptions(stdin=stdin, stdout=stdout, stderr=stderr, tty=tty)


def port_forward_ports(query: Mapping[str, list[str]], websocket: bool) -> list[int]:
    """``portforward.NewV4Options``: a websocket names its ports in ``port`` (required); SPDY names none here."""
    if not websocket:
        return []
    values = query.get("port") or []
    if not values:
        raise ValueError('query parameter "port" is required')
    ports: list[int] = []
    for value in values:
        if not value:
            raise ValueError('query parameter "port" cannot be empty')
        for part in value.split(","):
            if not part.isdigit() or int(part) > 65535:
                raise ValueError(f'unable to parse "{value}" as a port')
            if int(part) < 1:
                raise ValueError(f'port "{value}" must be > 0')
            ports.append(int(part))
    return ports


# ------------------------------------------------------------------------------------------------- connections

class _Connection:
    """One client connection and the helpers that answer on it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.busy = False
        peer = writer.get_extra_info("peername")
        self.remote = peer[0] if isinstance(peer, tuple) and peer else ""
        self.subject: Subject | None = None
        self.der: bytes | None = None
        ssl_object = writer.get_extra_info("ssl_object")
        if ssl_object is not None:
            cert = ssl_object.getpeercert()  # empty unless the client CA verified a certificate
            if cert:
                self.subject = cert.get("subject")
                self.der = ssl_object.getpeercert(binary_form=True)

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        async with asyncio.timeout(WRITE_TIMEOUT):
            await self.writer.drain()

    async def respond(self, request: Request | None, status: int, body: bytes | str, *,
                      content_type: str = TEXT, close: bool = False,
                      headers: Sequence[tuple[str, str]] = ()) -> None:
        data = body.encode() if isinstance(body, str) else body
        head = [("Content-Type", content_type), ("Content-Length", str(len(data))), *headers]
        if content_type == TEXT:
            head.append(("X-Content-Type-Options", "nosniff"))
        if close:
            head.append(("Connection", "close"))
        head_only = request is not None and request.method == "HEAD"
        await self.write(response_head(status, head) + (b"" if head_only else data))

    async def start_chunked(self, status: int, content_type: str) -> None:
        await self.write(response_head(status, [("Content-Type", content_type), ("Transfer-Encoding", "chunked"),
                                                ("X-Content-Type-Options", "nosniff"), ("Connection", "close")]))

    async def chunk(self, data: bytes) -> None:
        if data:
            await self.write(b"%x\r\n%s\r\n" % (len(data), data))

    async def end_chunked(self) -> None:
        await self.write(b"0\r\n\r\n")

    async def wait_closed_by_client(self) -> None:
        """Return when the client closes its side (data it sends meanwhile is dropped: we close after)."""
        while await self.reader.read(PIPE_CHUNK):
            pass


class Server:
    """The listening kubelet API; :meth:`close` stops it gracefully."""

    def __init__(self, node_name: str, backend: Backend, authenticator: Authenticating,
                 authorizer: Authorizing) -> None:
        self.node_name, self.backend = node_name, backend
        self.authenticator, self.authorizer = authenticator, authorizer
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], _Connection] = {}
        self._closing = False
        self._port = 0

    @property
    def sockets(self) -> list[Any]:
        return list(self._server.sockets) if self._server is not None else []

    @property
    def port(self) -> int:
        """The bound port (useful when asked for port 0)."""
        return self._port

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None) -> None:
        self._server = await asyncio.start_server(
            self._serve_connection, host=host, port=port, ssl=tls, limit=MAX_LINE, reuse_address=True,
            ssl_handshake_timeout=HANDSHAKE_TIMEOUT if tls is not None else None)
        self._port = int(self._server.sockets[0].getsockname()[1])

    async def close(self, grace: float = 5.0) -> None:
        """Stop listening, let requests in progress finish for ``grace`` seconds, then cut the rest (streams)."""
        self._closing = True
        if self._server is not None:
            self._server.close()
        for task, connection in list(self._connections.items()):
            if not connection.busy:
                task.cancel()
        tasks = list(self._connections)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace)
            for task in pending:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> Server:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    # ----------------------------------------------------------------------------------------- per connection

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        connection = _Connection(reader, writer)
        self._connections[task] = connection
        try:
            while not self._closing:
                try:
                    request = await read_request(reader, remote=connection.remote)
                except HttpError as exc:
                    await connection.respond(None, exc.status, exc.message, close=True)
                    break
                if request is None:
                    break
                connection.busy = True
                keep_alive = await self._handle(connection, request)
                connection.busy = False
                if not keep_alive:
                    break
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError, ssl.SSLError) as exc:
            logger.debug(f"Connection from {connection.remote} ended: {exc!r}")
        except asyncio.CancelledError:
            # close() cut it: end quietly (asyncio's stream callback would log a cancelled connection task).
            if not self._closing:
                raise
        except Exception:
            logger.exception(f"Connection from {connection.remote} failed")
        finally:
            self._connections.pop(task, None)
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                async with asyncio.timeout(5):
                    await writer.wait_closed()

    async def _handle(self, connection: _Connection, request: Request) -> bool:
        """Authenticate, authorize, route. True when the connection may serve another request."""
        keep = request.keep_alive and not self._closing
        started = time.monotonic()
        try:
            user = await self.authenticator.authenticate(request.headers, connection.subject, connection.der)
        except Exception:
            logger.exception("Unable to authenticate the request due to an error")
            user = None
        if user is None:
            await connection.respond(request, 401, auth_rules.UNAUTHORIZED_MESSAGE, close=not keep)
            return keep
        attributes = auth_rules.request_attributes(request.method, request.path, self.node_name)
        for attrs in attributes:
            try:
                allowed = await self.authorizer.authorize(user, attrs)
            except Exception as exc:
                logger.error(f"Authorization error (user={user.name}, verb={attrs.verb}, "
                             f"subresource={attrs.subresource}): {exc}")
                await connection.respond(request, 500, auth_rules.authorization_error_message(user, attrs),
                                         close=not keep)
                return keep
            if allowed:
                break
        else:
            logger.debug(f"Forbidden: {auth_rules.forbidden_message(user, attributes).strip()}")
            await connection.respond(request, 403, auth_rules.forbidden_message(user, attributes), close=not keep)
            return keep
        keep = await self._route(connection, request, keep)
        logger.debug(f"{request.method} {request.path} by {user.name} in {time.monotonic() - started:.3f}s")
        return keep

    # ------------------------------------------------------------------------------------------------ routing

    async def _route(self, connection: _Connection, request: Request, keep: bool) -> bool:
        segments = request.path.split("/")[1:]
        head, rest = segments[0], segments[1:]
        if "" in rest and not (head in ("pods", "runningpods") and rest == [""]):
            return await self._not_found(connection, request, keep)
        if head == "healthz" and (not rest or rest[0] in ("ping", "log", "syncloop")) and len(rest) <= 1:
            await connection.respond(request, 200, "ok", close=not keep)
            return keep
        if head in ("pods", "runningpods") and rest in ([], [""]):
            if not await self._methods(connection, request, keep, "GET"):
                return keep
            pods = await self._call(connection, request, keep, self._pods, head == "runningpods")
            if pods is not None:
                await connection.respond(request, 200, pods, content_type=JSON, close=not keep)
            return keep
        if head == "metrics" and len(rest) <= 1:
            sources: dict[str, Callable[[], Awaitable[str]]] = {
                "": self._metrics, "resource": self.backend.resource_metrics,
                "probes": self.backend.probe_metrics, "cadvisor": self._no_metrics}
            source = sources.get(rest[0] if rest else "")
            if source is None:
                return await self._not_found(connection, request, keep)
            text = await self._call(connection, request, keep, source)
            if text is not None:
                await connection.respond(request, 200, text, content_type=METRICS_TEXT, close=not keep)
            return keep
        if (head, rest) == ("stats", ["summary"]):
            if not await self._methods(connection, request, keep, "GET", "POST"):
                return keep
            summary = await self._call(connection, request, keep, self.backend.stats_summary)
            if summary is not None:
                payload = gotext.go_json(summary, escape_html=False, ensure_ascii=True)  # the bytes served so far
                await connection.respond(request, 200, payload, content_type=JSON, close=not keep)
            return keep
        if head == "containerLogs" and len(rest) == 3:
            if not await self._methods(connection, request, keep, "GET"):
                return keep
            await self._container_logs(connection, request, *rest)
            return False
        if head in ("exec", "attach") and len(rest) in (3, 4):
            if not await self._methods(connection, request, keep, "GET", "POST"):
                return keep
            return await self._remote_command(connection, request, keep, head, rest)
        if head == "portForward" and len(rest) in (2, 3):
            if not await self._methods(connection, request, keep, "GET", "POST"):
                return keep
            return await self._port_forward(connection, request, keep, rest)
        return await self._not_found(connection, request, keep)

    async def _not_found(self, connection: _Connection, request: Request, keep: bool) -> bool:
        await connection.respond(request, 404, NOT_FOUND, close=not keep)
        return keep

    async def _methods(self, connection: _Connection, request: Request, keep: bool, *allowed: str) -> bool:
        """Upstream's restful routes: other methods get 405 with ``Allow``; HEAD goes with GET."""
        if request.method in allowed or (request.method == "HEAD" and "GET" in allowed):
            return True
        await connection.respond(request, 405, "Method Not Allowed", close=not keep,
                                 headers=[("Allow", ", ".join(allowed))])
        return False

    async def _call(self, connection: _Connection, request: Request, keep: bool,
                    fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        """Call the backend; its errors become 404, 400 or 500 here and the result None."""
        try:
            return await fn(*args, **kwargs)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            status, message = self._error(request, exc)
            await connection.respond(request, status, message, close=not keep)
            return None

    def _error(self, request: Request, exc: BaseException) -> tuple[int, str]:
        if isinstance(exc, LookupError):
            return 404, str(exc.args[0]) if exc.args else "not found"
        if isinstance(exc, ValueError):
            return 400, str(exc)
        logger.error(f"{request.method} {request.path} failed", exc_info=exc)
        return 500, str(exc) or type(exc).__name__

    async def _pods(self, running: bool) -> str:
        items = await self.backend.running_pods() if running else self.backend.pods()
        body = {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
        return gotext.go_json(body, escape_html=False, ensure_ascii=True)  # the bytes served so far

    async def _metrics(self) -> str:
        return self.backend.metrics()

    async def _no_metrics(self) -> str:
        return ""  # no cAdvisor here: an empty, valid exposition

    # ------------------------------------------------------------------------------------------------- streams

    async def _container_logs(self, connection: _Connection, request: Request, namespace: str, pod: str,
                              container: str) -> None:
        """Chunked, flushed as the backend writes, cancelled when the client goes; the connection then closes."""
        query = {k: list(v) for k, v in request.query.items()}
        tail = (query.get("tail") or [""])[0]
        if tail:  # the kubelet's old "tail" parameter; "all" means no limit
            query.pop("tailLines", None)
            if tail != "all":
                query["tailLines"] = [tail]
        started = False

        async def write(data: bytes) -> None:
            nonlocal started
            if not data:
                return
            if not started:
                started = True
                await connection.start_chunked(200, TEXT)
            await connection.chunk(data)

        logs = asyncio.ensure_future(self.backend.container_logs(namespace, pod, container, query, write))
        gone = asyncio.ensure_future(connection.wait_closed_by_client())
        try:
            await asyncio.wait({logs, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (logs, gone):
                task.cancel()
            await asyncio.gather(logs, gone, return_exceptions=True)
        if not logs.done() or logs.cancelled():
            logger.debug(f"Log stream of {namespace}/{pod}/{container} ended: the client went away")
            return
        exc = logs.exception()
        if exc is None:
            if not started:
                await connection.start_chunked(200, TEXT)
            await connection.end_chunked()
        elif not started:
            status, message = self._error(request, exc)
            await connection.respond(request, status, message, close=True)
        elif isinstance(exc, OSError | TimeoutError):
            logger.debug(f"Log stream of {namespace}/{pod}/{container} ended: {exc!r}")
        else:
            # Mid-stream: the status is sent already; end without the last chunk so the client sees it broke.
            logger.warning(f"Log stream of {namespace}/{pod}/{container} failed: {exc!r}")

    async def _streaming_params(self, connection: _Connection, request: Request, keep: bool,
                                parse: Callable[[], _T]) -> _T | None:
        """The parameters of an exec/attach/portForward request, or None once a 400 has been sent (bad
        parameters, or not an upgrade request)."""
        try:
            params = parse()
        except ValueError as exc:
            await connection.respond(request, 400, str(exc), close=not keep)
            return None
        if not is_upgrade_request(request.headers):
            await connection.respond(request, 400, "Upgrade request required", close=not keep)
            return None
        return params

    async def _remote_command(self, connection: _Connection, request: Request, keep: bool, kind: str,
                              rest: list[str]) -> bool:
        namespace, pod = rest[0], rest[1]
        uid, container = (rest[2], rest[3]) if len(rest) == 4 else (None, rest[2])
        options = await self._streaming_params(connection, request, keep, lambda: stream_options(request.query))
        if options is None:
            return keep
        flags = dataclasses.asdict(options)
        if kind == "exec":
            url = await self._call(connection, request, keep, self.backend.exec_url, namespace, pod, uid, container,
                                   request.query.get("command", []), **flags)
        else:
            url = await self._call(connection, request, keep, self.backend.attach_url, namespace, pod, uid,
                                   container, **flags)
        if url is None:
            return keep
        await self._proxy_upgrade(connection, request, url)
        return False

    async def _port_forward(self, connection: _Connection, request: Request, keep: bool, rest: list[str]) -> bool:
        namespace, pod, uid = rest[0], rest[1], (rest[2] if len(rest) == 3 else None)
        ports = await self._streaming_params(
            connection, request, keep, lambda: port_forward_ports(request.query, is_websocket_request(request.headers)))
        if ports is None:
            return keep
        url = await self._call(connection, request, keep, self.backend.port_forward_url, namespace, pod, uid, ports)
        if url is None:
            return keep
        await self._proxy_upgrade(connection, request, url)
        return False

    async def _proxy_upgrade(self, connection: _Connection, request: Request, url: str) -> None:
        """Replay the upgrade request to the streaming server, relay its answer, then pipe bytes both ways."""
        location = urlsplit(url)
        if location.scheme not in ("http", "https") or not location.hostname:
            logger.error(f"The runtime gave an unusable streaming URL: {url!r}")
            await connection.respond(request, 500, f"unsupported streaming URL scheme in {url!r}", close=True)
            return
        port = location.port or (443 if location.scheme == "https" else 80)
        try:
            tls = await asyncio.to_thread(ssl.create_default_context) if location.scheme == "https" else None
            async with asyncio.timeout(BACKEND_CONNECT_TIMEOUT):
                backend_reader, backend_writer = await asyncio.open_connection(location.hostname, port, ssl=tls,
                                                                               limit=MAX_LINE)
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            await connection.respond(request, 500, f"error dialing backend: {exc}", close=True)
            return
        try:
            backend_writer.write(upgrade_request(request, location.path or "/", location.query, location.netloc))
            async with asyncio.timeout(BACKEND_RESPONSE_TIMEOUT):
                await backend_writer.drain()
                head = await backend_reader.readuntil(b"\r\n\r\n")
            status = _response_status(head)
            if status == 101:
                await connection.write(head)
                await pipe(connection.reader, connection.writer, backend_reader, backend_writer)
            elif status < 400:
                await connection.respond(request, 500, f"invalid upgrade response: status code {status}", close=True)
            else:
                await _relay_error(head, backend_reader, connection)
        except (OSError, TimeoutError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            logger.debug(f"Proxying {request.path} to the streaming server failed: {exc!r}")
            with contextlib.suppress(OSError, TimeoutError):
                await connection.respond(request, 500, f"error proxying to the streaming server: {exc}", close=True)
        finally:
            backend_writer.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await backend_writer.wait_closed()


def upgrade_request(request: Request, path: str, query: str, host: str) -> bytes:
    """The client's request as replayed to the streaming server: its method and headers (minus the used
    credentials and our framing), the streaming URL's path, and ``X-Forwarded-For`` extended with the client."""
    target = f"{path}?{query}" if query else path
    lines = [f"{request.method} {target} HTTP/1.1", f"Host: {host}"]
    for name, values in request.headers.items():
        if name in _NOT_PROXIED or name == "x-forwarded-for":
            continue
        lines.extend(f"{gotext.canonical_header(name)}: {value}" for value in values)
    forwarded = ", ".join([*request.headers.get("x-forwarded-for", []), *([request.remote] if request.remote else [])])
    if forwarded:
        lines.append(f"X-Forwarded-For: {forwarded}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _response_status(head: bytes) -> int:
    parts = head.split(b"\r\n", 1)[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise ValueError(f"malformed response from the streaming server: {head[:80]!r}")
    return int(parts[1])


async def _relay_error(head: bytes, reader: asyncio.StreamReader, connection: _Connection) -> None:
    """The streaming server refused: pass its answer on as it is (upstream echoes it), then close."""
    length = next((int(line.split(b":", 1)[1].strip()) for line in head.split(b"\r\n")[1:]
                   if line.lower().startswith(b"content-length:") and line.split(b":", 1)[1].strip().isdigit()), None)
    await connection.write(head)
    with contextlib.suppress(TimeoutError, asyncio.IncompleteReadError):
        async with asyncio.timeout(BACKEND_ERROR_TIMEOUT):
            if length is not None:
                await connection.write(await reader.readexactly(min(length, MAX_BODY)))
            else:
                while data := await reader.read(PIPE_CHUNK):
                    await connection.write(data)


async def pipe(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter,
               backend_reader: asyncio.StreamReader, backend_writer: asyncio.StreamWriter) -> None:
    """Copy both ways until either side ends; then both end (as upstream's proxy)."""
    async def copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(PIPE_CHUNK):
            writer.write(data)
            await writer.drain()

    tasks = [asyncio.ensure_future(copy(client_reader, backend_writer)),
             asyncio.ensure_future(copy(backend_reader, client_writer))]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        for result in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(result, Exception):
                logger.debug(f"A proxied stream ended with {result!r}")


# ---------------------------------------------------------------------------------------------------- TLS, serve

async def ensure_self_signed(cert_dir: str, host: str, addresses: Sequence[str] = (), *,
                             openssl: str = "openssl", days: int = 365) -> tuple[str, str]:
    """``<cert_dir>/kubelet.crt`` and ``kubelet.key``, made once like upstream's self-signed serving pair.

    Reused when both can be read; otherwise a 2048-bit RSA key and a certificate for ``host`` (and the node's
    IP ``addresses``) valid for a year are made with the ``openssl`` command and moved into place atomically.
    """
    directory = Path(cert_dir)
    cert, key = directory / "kubelet.crt", directory / "kubelet.key"
    if await asyncio.to_thread(lambda: os.access(cert, os.R_OK) and os.access(key, os.R_OK)):
        return str(cert), str(key)
    await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=True)
    names = [f"IP:{host}" if _is_ip(host) else f"DNS:{host}"]
    names.extend(f"IP:{ipaddress.ip_address(a)}" for a in addresses if _is_ip(a))
    tmp_cert, tmp_key = directory / f".kubelet.crt.{os.getpid()}", directory / f".kubelet.key.{os.getpid()}"
    process = await asyncio.create_subprocess_exec(
        openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", str(days),
        "-subj", f"/CN={host}@{int(time.time())}", "-keyout", str(tmp_key), "-out", str(tmp_cert),
        "-addext", f"subjectAltName={','.join(dict.fromkeys(names))}",
        "-addext", "basicConstraints=critical,CA:FALSE",
        "-addext", "keyUsage=critical,digitalSignature,keyEncipherment",
        "-addext", "extendedKeyUsage=serverAuth",
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        async with asyncio.timeout(60):
            _, stderr = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise RuntimeError("openssl did not make the serving certificate within 60s") from None
    if process.returncode != 0:
        raise RuntimeError(f"openssl could not make the serving certificate: {stderr.decode(errors='replace')}")

    def install() -> None:
        os.chmod(tmp_key, 0o600)
        os.replace(tmp_key, key)
        os.replace(tmp_cert, cert)

    await asyncio.to_thread(install)
    logger.info(f"Made a self-signed serving certificate {cert} for {', '.join(names)}")
    return str(cert), str(key)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def tls_context(cert_file: str, key_file: str, client_ca_file: str = "") -> ssl.SSLContext:
    """TLS 1.2+, HTTP/1.1 only; a client certificate is asked for (not required: tokens work too) and verified
    against the client CA when there is one. Blocking (reads files): call it in a thread."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    if client_ca_file:
        context.load_verify_locations(cafile=client_ca_file)
        context.verify_mode = ssl.CERT_OPTIONAL
    context.set_alpn_protocols(["http/1.1"])
    return context


async def serving_tls(config: AgentConfig, addresses: Sequence[str] = ()) -> ssl.SSLContext:
    """The TLS of ``--tls-cert-file``/``--tls-private-key-file``, else of the self-signed pair in ``--cert-dir``."""
    cert, key = config.tls_cert_file, config.tls_private_key_file
    if not cert:
        cert, key = await ensure_self_signed(config.cert_directory, config.node_name, addresses)
    return await asyncio.to_thread(tls_context, cert, key, config.client_ca_file)


async def serve(config: AgentConfig, backend: Backend, authenticator: Authenticating, authorizer: Authorizing, *,
                tls: ssl.SSLContext | None = None, addresses: Sequence[str] = ()) -> Server:
    """Start the kubelet API on ``config.address``:``config.port``; ``await server.close()`` stops it.

    ``tls`` defaults to :func:`serving_tls` (``addresses``: the node's IPs for a self-signed certificate).
    """
    if tls is None:
        tls = await serving_tls(config, addresses)
    server = Server(config.node_name, backend, authenticator, authorizer)
    await server.start(config.address, config.port, tls)
    logger.info(f"Serving the kubelet API on https://{config.address}:{server.port}")
    return server
