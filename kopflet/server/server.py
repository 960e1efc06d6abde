"""The kubelet API: the HTTPS server on ``--address``:``--port`` that ``kubectl logs/exec/port-forward`` reach.

The apiserver proxies those commands here (``/containerLogs``, ``/exec``, ``/attach``, ``/portForward``), and
monitoring reads ``/pods``, ``/stats/summary`` and ``/metrics/*``. As upstream (``pkg/kubelet/server``) every
request is authenticated (401 ``Unauthorized``), then authorized on ``nodes/<subresource>`` (403 with upstream's
message), then routed. For exec, attach and port-forward the runtime hands out a streaming URL (the CRI
``Exec``/``Attach``/``PortForward`` answer, containerd's own streaming server); the client's upgrade request is
replayed there and the bytes are piped both ways untouched, as ``proxy.UpgradeAwareHandler`` does, so SPDY/3.1
and WebSocket sessions both pass through.

Those upgrades need the raw connection, so HTTP/1.1 is h11 over our own streams (:mod:`kopflet.server.http`):
keep-alive between plain requests, and a streaming response (chunked logs, an upgrade) ends the connection. The
rest of the agent is reached only through :class:`Backend`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import logging
import os
import ssl
import time
import warnings
import zlib
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

from kopflet import gotext
from kopflet.config import configz, tls_options
from kopflet.config.settings import AgentConfig
from kopflet.logs.cri_logs import LogOptionsError
from kopflet.pods import explain, timeline
from kopflet.server import auth_rules, healthz_server
from kopflet.server import node_log_query as nlq
from kopflet.server.auth_rules import Attributes, Subject, UserInfo, is_upgrade_request, is_websocket_request
from kopflet.server.http import (
    MAX_LINE,
    NOT_FOUND,
    TEXT,
    HttpConnection,
    Request,
    canonical_location,
    redirect_body,
    replay,
)
from kopflet.server.http_server import HttpServer
from kopflet.server.streaming import handshake_refusal, port_forward_ports, replayed_headers, stream_options
from kopflet.server.system_logs import SystemLogs
from kopflet.watchdog.health_checker import Check

logger = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT = 30.0
BACKEND_CONNECT_TIMEOUT = 10.0
BACKEND_RESPONSE_TIMEOUT = 30.0
BACKEND_ERROR_TIMEOUT = 10.0
"""How long a streaming server's error answer is relayed (upstream's 10s deadline)."""
PIPE_CHUNK = 64 * 1024
STREAM_IDLE_TIMEOUT = 4 * 3600.0
"""A piped exec/attach/portForward session cut after this long without a byte passed either way, a client that
stopped reading included: ``streamingConnectionIdleTimeout``'s default (4h), for a :class:`Server` given none."""

METRICS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
JSON = "application/json"
DEBUG_PODS = "pods"
"""``/debug/pods/<namespace>/<name>``: what `kopflet explain` reads (kopflet's own; upstream has no such path, and
authorizes every ``/debug/`` path it has no subresource for on ``nodes/proxy``)."""
# InstallSystemLogHandler with enableSystemLogHandler off (getHandlerForDisabledEndpoint; http.Error adds the
# newline): /logs/ then never reads a path.
LOGS_DISABLED = "logs endpoint is disabled.\n"
_T = TypeVar("_T")


# --------------------------------------------------------------------------------------------------- the backend

WriteFn = Callable[[bytes], Awaitable[None]]


class Backend(Protocol):
    """What the server needs from the agent. LookupError means 404, ValueError 400, anything else 500."""

    def health_checks(self) -> Sequence[Check]:
        """``/healthz``'s checks, in order (InstallAuthNotRequiredHandlers: ping, log, syncloop, then the container
        manager's); each is also served alone on ``/healthz/<name>``."""
        ...

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

    async def cadvisor_metrics(self) -> str:
        """``GET /metrics/cadvisor``: per-container usage under cAdvisor's names and the kubelet's labels."""
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

    async def pod_decisions(self, namespace: str, name: str) \
            -> tuple[str, Sequence[explain.Decision], timeline.Timeline | None]:
        """``GET /debug/pods/<namespace>/<name>``: the pod's uid, its worker's last decisions, oldest first, and its
        last start's timeline (None: none) (LookupError ``pod "<name>" does not exist`` when the agent has no such
        pod)."""
        ...


class Authenticating(Protocol):
    async def authenticate(self, headers: MutableMapping[str, list[str]], subject: Subject | None = None,
                           der: bytes | None = None) -> UserInfo | None: ...


class Authorizing(Protocol):
    async def authorize(self, user: UserInfo, attrs: Attributes) -> bool: ...


# ------------------------------------------------------------------------------------------------- connections

class _Connection(HttpConnection):
    """One client connection: its HTTP, and who the client is by its TLS certificate."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        super().__init__(reader, writer)
        self.subject: Subject | None = None
        self.der: bytes | None = None
        ssl_object = writer.get_extra_info("ssl_object")
        if ssl_object is not None:
            cert = ssl_object.getpeercert()  # empty unless the client CA verified a certificate
            if cert:
                self.subject = cert.get("subject")
                self.der = ssl_object.getpeercert(binary_form=True)


class Server(HttpServer[_Connection]):
    """The listening kubelet API; :meth:`close` stops it gracefully."""

    logger = logging.getLogger(__name__)

    def __init__(self, node_name: str, backend: Backend, authenticator: Authenticating,
                 authorizer: Authorizing, *, configz_body: str = "{}",
                 stream_idle_timeout: float | None = None, system_logs: SystemLogs | None = None) -> None:
        """`stream_idle_timeout`: ``streamingConnectionIdleTimeout`` in seconds, 0 for none; None:
        STREAM_IDLE_TIMEOUT. `system_logs`: ``/logs/`` with ``enableSystemLogHandler``; None: off (405)."""
        super().__init__(_Connection)
        self.node_name, self.backend = node_name, backend
        self.stream_idle_timeout = stream_idle_timeout
        self.system_logs = system_logs
        # GET /configz: fixed at start, as upstream registers the configuration once. "{}": none registered.
        self.configz_body = configz_body
        self.authenticator, self.authorizer = authenticator, authorizer
        self._port = 0

    @property
    def sockets(self) -> list[Any]:
        return list(self._server.sockets) if self._server is not None else []

    @property
    def port(self) -> int:
        """The bound port (useful when asked for port 0)."""
        return self._port

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None) -> None:
        server = await self._listen(host, port, tls, handshake_timeout=HANDSHAKE_TIMEOUT)
        self._port = int(server.sockets[0].getsockname()[1])

    async def __aenter__(self) -> Server:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    # ----------------------------------------------------------------------------------------- per connection

    async def _handle(self, connection: _Connection, request: Request, keep: bool) -> bool:
        """Authenticate, authorize, route. True when the connection may serve another request."""
        location = canonical_location(request.method, request.target)
        if location is not None:
            # Go's ServeMux redirects a path with "//", "." or ".." segments to its clean form, before the kubelet's
            # authentication filter runs: no such path reaches a handler.
            content_type, body = redirect_body(request.method, location)
            await connection.respond(307, body, content_type=content_type, close=not keep,
                                     headers=[("Location", location)])
            return keep
        started = time.monotonic()
        try:
            user = await self.authenticator.authenticate(request.headers, connection.subject, connection.der)
        except Exception:
            logger.exception("Unable to authenticate the request due to an error")
            user = None
        if user is None:
            await connection.respond(401, auth_rules.UNAUTHORIZED_MESSAGE, close=not keep)
            return keep
        attributes = auth_rules.request_attributes(request.method, request.path, self.node_name)
        for attrs in attributes:
            try:
                allowed = await self.authorizer.authorize(user, attrs)
            except Exception as exc:
                logger.error(f"Authorization error (user={user.name}, verb={attrs.verb}, "
                             f"subresource={attrs.subresource}): {exc}")
                await connection.respond(500, auth_rules.authorization_error_message(user, attrs),
                                         close=not keep)
                return keep
            if allowed:
                break
        else:
            logger.debug(f"Forbidden: {auth_rules.forbidden_message(user, attributes).strip()}")
            await connection.respond(403, auth_rules.forbidden_message(user, attributes), close=not keep)
            return keep
        keep = await self._route(connection, request, keep)
        logger.debug(f"{request.method} {request.path} by {user.name} in {time.monotonic() - started:.3f}s")
        return keep

    # ------------------------------------------------------------------------------------------------ routing

    async def _route(self, connection: _Connection, request: Request, keep: bool) -> bool:
        segments = request.path.split("/")[1:]
        head, rest = segments[0], segments[1:]
        if head == "logs":
            if self.system_logs is None:
                await connection.respond(405, LOGS_DISABLED, close=not keep)
                return keep
            return await self._logs(connection, request, keep)
        if "" in rest and not (head in ("pods", "runningpods") and rest == [""]):
            return await self._not_found(connection, request, keep)
        if request.path == configz.CONFIGZ_PATH:
            # configz.InstallHandler: a plain handler on the exact path, any method.
            await connection.respond(200, self.configz_body, content_type=JSON, close=not keep,
                                     headers=[("X-Content-Type-Options", "nosniff")])
            return keep
        if head == "healthz" and await healthz_server.respond(connection, request, self.backend.health_checks(),
                                                              keep):
            return keep
        if head in ("pods", "runningpods") and rest in ([], [""]):
            if not await self._methods(connection, request, keep, "GET"):
                return keep
            pods = await self._call(connection, request, keep, self._pods, head == "runningpods")
            if pods is not None:
                await connection.respond(200, pods, content_type=JSON, close=not keep)
            return keep
        if head == "metrics" and len(rest) <= 1:
            sources: dict[str, Callable[[], Awaitable[str]]] = {
                "": self._metrics, "resource": self.backend.resource_metrics,
                "probes": self.backend.probe_metrics, "cadvisor": self.backend.cadvisor_metrics}
            source = sources.get(rest[0] if rest else "")
            if source is None:
                return await self._not_found(connection, request, keep)
            text = await self._call(connection, request, keep, source)
            if text is not None:
                await connection.respond(200, text, content_type=METRICS_TEXT, close=not keep)
            return keep
        if (head, rest) == ("stats", ["summary"]):
            if not await self._methods(connection, request, keep, "GET", "POST"):
                return keep
            summary = await self._call(connection, request, keep, self.backend.stats_summary)
            if summary is not None:
                payload = gotext.go_json(summary, escape_html=False, ensure_ascii=True)  # the bytes served so far
                await connection.respond(200, payload, content_type=JSON, close=not keep)
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
        if head == "debug" and len(rest) == 3 and rest[0] == DEBUG_PODS:
            if not await self._methods(connection, request, keep, "GET"):
                return keep
            return await self._explain(connection, request, keep, rest[1], rest[2])
        return await self._not_found(connection, request, keep)

    async def _not_found(self, connection: _Connection, request: Request, keep: bool) -> bool:
        await connection.respond(404, NOT_FOUND, close=not keep)
        return keep

    async def _methods(self, connection: _Connection, request: Request, keep: bool, *allowed: str) -> bool:
        """Upstream's restful routes: other methods get 405 with ``Allow``; HEAD goes with GET."""
        if request.method in allowed or (request.method == "HEAD" and "GET" in allowed):
            return True
        await connection.respond(405, "Method Not Allowed", close=not keep,
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
            await connection.respond(status, message, close=not keep)
            return None

    def _error(self, request: Request, exc: BaseException) -> tuple[int, str]:
        if isinstance(exc, LogOptionsError):
            return exc.status, str(exc)  # getContainerLogs: 400 for a query that does not decode, 422 invalid
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

    async def _explain(self, connection: _Connection, request: Request, keep: bool, namespace: str,
                       name: str) -> bool:
        """The pod's last decisions: JSON, or text with ``?format=text`` (or, without ``format``, when the client
        accepts ``text/plain`` before anything else)."""
        wanted = (request.query.get("format") or [""])[-1]
        if wanted not in ("", "json", "text"):
            await connection.respond(400, f"unknown format {gotext.go_quote(wanted)}: json or text", close=not keep)
            return keep
        if not wanted:
            accept = (request.header("Accept") or "").split(",")[0].split(";")[0].strip().lower()
            wanted = "text" if accept == "text/plain" else "json"
        found = await self._call(connection, request, keep, self.backend.pod_decisions, namespace, name)
        if found is None:
            return keep
        uid, decisions, start = found
        if wanted == "text":
            text = explain.render_text(decisions, namespace=namespace, name=name, uid=uid, timeline=start)
            await connection.respond(200, text, content_type=TEXT, close=not keep)
        else:
            body = explain.to_json(decisions, namespace=namespace, name=name, uid=uid, timeline=start)
            await connection.respond(200, gotext.go_json(body, escape_html=False), content_type=JSON,
                                     close=not keep)
        return keep

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
            await connection.respond(status, message, close=True)
        elif isinstance(exc, OSError | TimeoutError):
            logger.debug(f"Log stream of {namespace}/{pod}/{container} ended: {exc!r}")
        else:
            # Mid-stream: the status is sent already; end without the last chunk so the client sees it broke.
            logger.warning(f"Log stream of {namespace}/{pod}/{container} failed: {exc!r}")

    async def _logs(self, connection: _Connection, request: Request, keep: bool) -> bool:
        """``/logs/``: kubelet.go Run's logServer behind InstallSystemLogHandler's GET-only routes. With
        ``enableSystemLogQuery`` a ``query`` goes to the journal server (400 for parameters that do not parse, 406
        for a path besides it or a query validate refuses); everything else is the file server on /var/log."""
        logs = self.system_logs
        assert logs is not None
        if request.method != "GET":  # GETOnlyRestfulFilter: HEAD too is 405
            await connection.respond(405, "Method Not Allowed", close=not keep, headers=[("Allow", "GET")])
            return keep
        if not request.path.startswith("/logs/"):
            # GET /logs reaches the same handler (go-restful's "" route), whose http.StripPrefix("/logs/") answers
            # NotFound for a path without the slash, a node log query's too.
            return await self._not_found(connection, request, keep)
        sub = request.path.removeprefix("/logs/")  # http.StripPrefix("/logs/")
        if logs.query:
            try:
                query = nlq.parse(request.query)
            except nlq.QueryErrors as exc:
                await connection.respond(exc.status, str(exc) + "\n", close=not keep)
                return keep
            if query is not None:
                if sub not in ("", "/"):
                    await connection.respond(406, nlq.PATH_NOT_ALLOWED + "\n", close=not keep)
                    return keep
                stat_error = (await asyncio.to_thread(logs.stat_error, query.files[0])
                              if len(query.files) == 1 and not query.services else None)
                if errors := nlq.validate(query, stat_error):
                    await connection.respond(406, nlq.aggregate(errors) + "\n", close=not keep)
                    return keep
                if query.services:
                    await self._journal(connection, request, query)
                    return False
                sub = query.files[0].replace("\\", "/")  # filepath.ToSlash (Windows clients' backslashes)
        answer = await logs.file_answer(sub, urlsplit(request.target).query)
        if answer.path is None:
            await connection.respond(answer.status, answer.body, content_type=answer.content_type, close=not keep,
                                     headers=answer.headers, nosniff=answer.status >= 400)
            return keep
        await self._stream(connection, answer.content_type or TEXT, answer.headers,
                           lambda write: logs.stream_file(answer.path or "", write), f"/logs/{sub}")
        return False

    async def _journal(self, connection: _Connection, request: Request, query: nlq.NodeLogQuery) -> None:
        """journalServer.ServeHTTP: text, gzipped when ``Accept-Encoding`` is exactly ``gzip``."""
        logs = self.system_logs
        assert logs is not None
        headers: tuple[tuple[str, str], ...] = ()
        gzip = request.header("Accept-Encoding") == "gzip"
        if gzip:
            headers = (("Content-Encoding", "gzip"),)
        await self._stream(connection, nlq.CONTENT_TYPE, headers, lambda write: logs.copy(query, write),
                           "the node log query", gzip=gzip)

    async def _stream(self, connection: _Connection, content_type: str, headers: Sequence[tuple[str, str]],
                      produce: Callable[[Callable[[bytes], Awaitable[None]]], Awaitable[None]], what: str, *,
                      gzip: bool = False) -> None:
        """A 200 streamed in chunks as `produce` writes, cancelled when the client goes; the connection then
        closes."""
        compressor = zlib.compressobj(1, zlib.DEFLATED, 31) if gzip else None  # gzip.BestSpeed
        await connection.start_chunked(200, content_type, headers)

        async def write(data: bytes) -> None:
            if compressor is not None:
                data = compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)
            await connection.chunk(data)

        task = asyncio.ensure_future(produce(write))
        gone = asyncio.ensure_future(connection.wait_closed_by_client())
        try:
            await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (task, gone):
                t.cancel()
            await asyncio.gather(task, gone, return_exceptions=True)
        if not task.done() or task.cancelled():
            logger.debug(f"{what} ended: the client went away")
            return
        if (exc := task.exception()) is not None:
            logger.warning(f"{what} failed: {exc!r}")  # the status is sent already: end without the last chunk
            return
        if compressor is not None:
            await connection.chunk(compressor.flush())
        await connection.end_chunked()

    async def _streaming_params(self, connection: _Connection, request: Request, keep: bool,
                                parse: Callable[[], _T], *, port_forward: bool = False) -> _T | None:
        """The parameters of an exec/attach/portForward request, or None once it has been refused: bad parameters,
        not an upgrade request, or an upgrade the runtime's streaming server would refuse. All before the runtime
        is asked for a session (upstream asks first, then relays the streaming server's refusal)."""
        try:
            params = parse()
        except ValueError as exc:
            await connection.respond(400, str(exc), close=not keep)
            return None
        if not is_upgrade_request(request.headers):
            await connection.respond(400, "Upgrade request required", close=not keep)
            return None
        refusal = handshake_refusal(request.method, replayed_headers(request.headers, "", request.remote),
                                    port_forward=port_forward)
        if refusal is not None:
            logger.debug(f"Refused the {request.path} handshake: {refusal.status} {refusal.message.strip()}")
            await connection.respond(refusal.status, refusal.message, close=not keep, headers=refusal.headers)
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
            connection, request, keep, lambda: port_forward_ports(request.query, is_websocket_request(request.headers)),
            port_forward=True)
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
            await connection.respond(500, f"unsupported streaming URL scheme in {url!r}", close=True)
            return
        port = location.port or (443 if location.scheme == "https" else 80)
        try:
            tls = await asyncio.to_thread(ssl.create_default_context) if location.scheme == "https" else None
            async with asyncio.timeout(BACKEND_CONNECT_TIMEOUT):
                backend_reader, backend_writer = await asyncio.open_connection(location.hostname, port, ssl=tls,
                                                                               limit=MAX_LINE)
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            await connection.respond(500, f"error dialing backend: {exc}", close=True)
            return
        try:
            path = location.path or "/"
            target = f"{path}?{location.query}" if location.query else path
            async with asyncio.timeout(BACKEND_RESPONSE_TIMEOUT):
                answer = await replay(backend_reader, backend_writer, request.method, target,
                                      replayed_headers(request.headers, location.netloc, request.remote))
            if answer.status == 101:
                await connection.switch_protocols(answer)
                await pipe(connection.reader, connection.writer, backend_reader, backend_writer,
                           idle_timeout=self.stream_idle_timeout)
            elif answer.status < 400:
                await connection.respond(500, f"invalid upgrade response: status code {answer.status}", close=True)
            else:
                with contextlib.suppress(TimeoutError, ValueError):  # the refusal is relayed as far as it came
                    async with asyncio.timeout(BACKEND_ERROR_TIMEOUT):
                        await connection.relay(answer)
        except (OSError, TimeoutError, ValueError) as exc:
            logger.debug(f"Proxying {request.path} to the streaming server failed: {exc!r}")
            if connection.can_respond:
                with contextlib.suppress(OSError, TimeoutError):
                    await connection.respond(500, f"error proxying to the streaming server: {exc}", close=True)
        finally:
            backend_writer.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await backend_writer.wait_closed()


async def pipe(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter,
               backend_reader: asyncio.StreamReader, backend_writer: asyncio.StreamWriter, *,
               idle_timeout: float | None = None) -> None:
    """Copy both ways until either side ends, or nothing has passed for `idle_timeout` seconds (None:
    STREAM_IDLE_TIMEOUT; 0: no limit, as ``--streaming-connection-idle-timeout=0``); then both end (as upstream's
    proxy). The caller closes the backend side, the server the client's."""
    timeout = STREAM_IDLE_TIMEOUT if idle_timeout is None else idle_timeout
    loop = asyncio.get_running_loop()
    last = loop.time()

    async def copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal last
        while data := await reader.read(PIPE_CHUNK):
            writer.write(data)
            await writer.drain()  # a side that stops reading stalls here: the idle watch below ends it
            last = loop.time()

    async def idle() -> None:
        while True:  # wakes when the last activity it knows of would have gone stale
            left = last + timeout - loop.time()
            if left <= 0:
                break
            await asyncio.sleep(left)
        logger.debug(f"A proxied stream was idle for {gotext.go_duration(timeout)}: closing it")

    tasks = [asyncio.ensure_future(copy(client_reader, backend_writer)),
             asyncio.ensure_future(copy(backend_reader, client_writer))]
    if timeout > 0:
        tasks.append(asyncio.ensure_future(idle()))
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


def tls_context(cert_file: str, key_file: str, client_ca_file: str = "", *, min_version: str = "",
                cipher_suites: Sequence[str] = ()) -> ssl.SSLContext:
    """HTTP/1.1 only; a client certificate is asked for (not required: tokens work too) and verified against the
    client CA when there is one. Blocking (reads files): call it in a thread. Without ``cert_file`` the context has
    no certificate (a handshake needs one switched in: :class:`ServingTLS`).

    ``min_version`` and ``cipher_suites`` are ``tlsMinVersion`` and ``tlsCipherSuites`` (checked names); by
    default TLS 1.2+ with Python's suites. ValueError when the host's OpenSSL lacks a named suite: serving
    without a suite the configuration names would be a silent difference.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    apply_tls_options(context, min_version, cipher_suites)
    if cert_file:
        context.load_cert_chain(cert_file, key_file)
    if client_ca_file:
        context.load_verify_locations(cafile=client_ca_file)
        context.verify_mode = ssl.CERT_OPTIONAL
    context.set_alpn_protocols(["http/1.1"])
    return context


# kubelet.go NewMainKubelet's GetCertificate: the handshake fails with this while there is no certificate (a
# serverTLSBootstrap node whose serving certificate request is not approved yet).
NO_SERVING_CERTIFICATE = "no serving certificate available for the kubelet"
# dynamiccertificates.DynamicCertKeyPairContent (ReloadKubeletServerCertificateFile, on by default): the
# certificate and key files are looked at again this often.
CERT_FILE_REFRESH = 60.0


class ServingTLS:
    """The kubelet API's TLS, whose certificate can change without a restart (kubelet.go's
    ``TLSConfig.GetCertificate``): every handshake takes the certificate selected at that moment, so a renewed
    serving certificate (``serverTLSBootstrap``) or a replaced ``tlsCertFile`` is served from the next connection
    on, and connections already open (``kubectl exec`` streams) go on with theirs."""

    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.context: ssl.SSLContext | None = None
        """The context the server listens with (options and client CA; a certificate only once there is one)."""
        self._selected: ssl.SSLContext | None = None
        self._files: tuple[str, str] | None = None
        self._stamp: tuple[tuple[int, int, int], ...] | None = None

    async def open(self) -> ssl.SSLContext:
        """The listening context (no certificate of its own: each handshake gets the selected one)."""
        self.context = await self._new_context("", "")
        self.context.sni_callback = self._select_certificate
        return self.context

    async def _new_context(self, cert_file: str, key_file: str) -> ssl.SSLContext:
        cfg = self.config
        return await asyncio.to_thread(tls_context, cert_file, key_file, cfg.client_ca_file,
                                       min_version=cfg.tls_min_version, cipher_suites=cfg.tls_cipher_suites)

    def _select_certificate(self, ssl_object: Any, server_name: str | None, context: ssl.SSLContext) -> int | None:
        selected = self._selected
        if selected is None:
            logger.warning(f"TLS handshake refused: {NO_SERVING_CERTIFICATE}")
            return ssl.ALERT_DESCRIPTION_INTERNAL_ERROR  # what Go's GetCertificate error sends
        ssl_object.context = selected
        return None

    @property
    def has_certificate(self) -> bool:
        return self._selected is not None

    async def use(self, cert_file: str, key_file: str) -> None:
        """Serve this pair from the next handshake on. ssl.SSLError or OSError when it cannot be loaded (the
        certificate served until now stays)."""
        stamp = await asyncio.to_thread(_file_stamp, cert_file, key_file)  # before reading: a later change is seen
        self._selected = await self._new_context(cert_file, key_file)
        self._files, self._stamp = (cert_file, key_file), stamp
        logger.info(f"Serving the kubelet API with the certificate {cert_file}")

    async def watch_files(self, period: float = CERT_FILE_REFRESH) -> None:
        """ReloadKubeletServerCertificateFile: the pair given by files (``tlsCertFile``, or the self-signed pair)
        is loaded again when either file changes; a pair that does not load is logged and the old one kept."""
        while True:
            await asyncio.sleep(period)
            await self.reload_if_changed()

    async def reload_if_changed(self) -> bool:
        """One look at the files: True when a changed pair was loaded."""
        if self._files is None:
            return False
        cert_file, key_file = self._files
        try:
            stamp = await asyncio.to_thread(_file_stamp, cert_file, key_file)
        except OSError as exc:
            logger.error(f"Cannot read the serving certificate files {cert_file}, {key_file}: {exc}")
            return False
        if stamp == self._stamp:
            return False
        try:
            await self.use(cert_file, key_file)
        except (OSError, ssl.SSLError, ValueError) as exc:
            self._stamp = stamp  # not tried again until the files change again
            logger.error(f"invalid certificate and key pair from file {cert_file}, {key_file}: {exc}")
            return False
        return True


def _file_stamp(*paths: str) -> tuple[tuple[int, int, int], ...]:
    """What tells a changed file (a symlink swapped to a new target too): inode, size and mtime of each."""
    stamps = []
    for path in paths:
        info = os.stat(path)
        stamps.append((info.st_ino, info.st_size, info.st_mtime_ns))
    return tuple(stamps)


def apply_tls_options(context: ssl.SSLContext, min_version: str = "", cipher_suites: Sequence[str] = ()) -> None:
    """Set ``tlsMinVersion`` and ``tlsCipherSuites`` on a server context as :func:`tls_options.plan` says, and log
    what upstream logs at start (InitializeTLS: insecure suites, ignored TLS 1.3 suites)."""
    plan = tls_options.plan(min_version, cipher_suites)
    for note in plan.notes:
        logger.warning(note)
    with warnings.catch_warnings():  # TLS 1.0 and 1.1 are deprecated in Python: asked for here, on purpose
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = ssl.TLSVersion[plan.minimum_version]
    if plan.ciphers is None:
        return
    try:
        context.set_ciphers(plan.ciphers)
    except ssl.SSLError:
        enabled: set[str] = set()
    else:
        enabled = {cipher["name"] for cipher in context.get_ciphers()}
    missing = [name for name in plan.openssl_names if name not in enabled]
    if missing and cipher_suites:
        by_openssl = {suite.openssl: name for name, suite in tls_options.CIPHER_SUITES.items()}
        raise ValueError(f"tlsCipherSuites: {', '.join(by_openssl[m] for m in missing)} not available in this "
                         f"host's {ssl.OPENSSL_VERSION}; remove them")
    if not enabled:  # pragma: no cover - the default suites are in every OpenSSL with TLS 1.2
        raise ValueError(f"{ssl.OPENSSL_VERSION} has none of the default cipher suites {plan.ciphers}")


async def serving_tls(config: AgentConfig, addresses: Sequence[str] = ()) -> ServingTLS:
    """The TLS of ``--tls-cert-file``/``--tls-private-key-file``, else of the self-signed pair in ``--cert-dir``
    (InitializeTLS), reloaded when the files change. With ``serverTLSBootstrap`` there is no self-signed pair:
    the caller selects the certificate manager's pair (until there is one, handshakes fail, as upstream's)."""
    tls = ServingTLS(config)
    await tls.open()
    cert, key = config.tls_cert_file, config.tls_private_key_file
    if not cert and not config.server_tls_bootstrap:
        cert, key = await ensure_self_signed(config.cert_directory, config.node_name, addresses)
    if cert and not config.server_tls_bootstrap:
        await tls.use(cert, key)
    return tls


async def serve(config: AgentConfig, backend: Backend, authenticator: Authenticating, authorizer: Authorizing, *,
                tls: ServingTLS | ssl.SSLContext | None = None, addresses: Sequence[str] = ()) -> Server:
    """Start the kubelet API on ``config.address``:``config.port``; ``await server.close()`` stops it.

    ``tls`` defaults to :func:`serving_tls` (``addresses``: the node's IPs for a self-signed certificate); a
    plain context serves its one certificate.
    """
    if tls is None:
        tls = await serving_tls(config, addresses)
    if isinstance(tls, ssl.SSLContext):
        context = tls
    else:
        context = tls.context if tls.context is not None else await tls.open()
    server = Server(config.node_name, backend, authenticator, authorizer,
                    configz_body=configz.configz_body(config),
                    stream_idle_timeout=config.streaming_connection_idle_timeout,
                    # InstallSystemLogHandler; the query mode with enableSystemLogQuery (NodeLogQuery: locked on)
                    system_logs=SystemLogs(query=config.enable_system_log_query)
                    if config.enable_system_log_handler else None)
    await server.start(config.address, config.port, context)
    logger.info(f"Serving the kubelet API on https://{config.address}:{server.port}")
    return server
