"""``/healthz``: the checks run for one request, and the plain HTTP server on ``--healthz-port``.

The kubelet API (:mod:`kopflet.server.server`) answers ``/healthz`` and ``/healthz/<check>`` with `respond` and
the agent's checks (ping, log, syncloop, device-plugin). `HealthzServer` is upstream's other healthz endpoint
(cmd/kubelet/app/server.go run, after RunKubelet): plain HTTP on ``healthzBindAddress``:``healthzPort``, no
authentication, and only the ping check (``healthz.InstallHandler(mux)`` with none given), so it answers ``ok``
as long as the process serves, also while the sync loop is stuck or before the Node is registered (kubeadm's
``kubelet-check`` waits for it). A port that cannot be bound is logged and tried again every 5 seconds
(``wait.UntilWithContext``), never fatal.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence

from kopflet.logs.verbosity import v
from kopflet.server import healthz
from kopflet.server.http import NOT_FOUND, HttpConnection, Request, canonical_location, redirect_body
from kopflet.server.http_server import HttpServer
from kopflet.watchdog.health_checker import Check, outcome, ping

logger = logging.getLogger(__name__)

RETRY_PERIOD = 5.0
"""How often a healthz port that could not be served is tried again (upstream's wait.UntilWithContext period)."""
PING_ONLY: tuple[Check, ...] = (("ping", ping),)
"""The healthz port's checks: healthz.InstallHandler with none installs PingHealthz."""


def answer(path: str, query: Mapping[str, Sequence[str]], checks: Sequence[Check]) -> healthz.Answer | None:
    """The answer to a request for `path` when it is healthz's (None otherwise): the root runs every check the
    query does not exclude, ``/healthz/<name>`` that one check; none given: ping alone (InstallPathHandler).
    Failures are logged as upstream logs them."""
    checks = checks or PING_ONLY
    which = healthz.target(path, [name for name, _ in checks])
    if which is None:
        return None
    if which:
        return healthz.individual(outcome(dict(checks)[which]))
    exclude = healthz.excluded(query)
    result = healthz.root([(name, None if name in exclude else outcome(check)) for name, check in checks], query,
                          name=healthz.PATH.strip("/"))
    if result.unmatched_log:
        logger.log(v(6), result.unmatched_log)
    if result.failure_log:
        logger.log(v(2), result.failure_log)
    return result


async def respond(connection: HttpConnection, request: Request, checks: Sequence[Check], keep: bool) -> bool:
    """Answer `request` when its path is healthz's: True when answered (any method, as upstream's mux handlers)."""
    result = answer(request.path, request.query, checks)
    if result is None:
        return False
    await connection.respond(result.status, result.body, content_type=healthz.CONTENT_TYPE, close=not keep,
                             nosniff=result.nosniff)
    return True


class HealthzServer(HttpServer[HttpConnection]):
    """``--healthz-bind-address``:``--healthz-port``, served from `start` until `close`."""

    log_name = "healthz connection"
    logger = logging.getLogger(__name__)

    def __init__(self, host: str, port: int, checks: Sequence[Check] = PING_ONLY, *,
                 retry_period: float = RETRY_PERIOD) -> None:
        super().__init__(HttpConnection)
        self.host, self.requested_port, self.checks = host, port, tuple(checks)
        self.retry_period = retry_period
        self._task: asyncio.Task[None] | None = None
        self._serving = asyncio.Event()

    @property
    def port(self) -> int:
        """The bound port (the one asked for, or the kernel's choice for 0); 0 while not serving."""
        return int(self._server.sockets[0].getsockname()[1]) if self._server is not None else 0

    @property
    def serving(self) -> bool:
        return self._serving.is_set()

    def start(self) -> None:
        """Listen in the background, tried again every `retry_period` while the port cannot be bound."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="healthz-server")

    async def wait_serving(self) -> None:
        await self._serving.wait()

    async def _run(self) -> None:
        while True:
            try:
                await self._listen(self.host, self.requested_port)
            except OSError as exc:
                logger.error(f"Failed to start healthz server: {exc}")
                await asyncio.sleep(self.retry_period)
                continue
            self._serving.set()
            logger.info(f"Serving /healthz on http://{self.host}:{self.port}")
            await asyncio.Event().wait()  # until close() cancels this

    async def close(self, grace: float = 1.0) -> None:
        """Stop listening; requests in progress get `grace` seconds."""
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self._serving.clear()
        await super().close(grace)

    async def _handle(self, connection: HttpConnection, request: Request, keep: bool) -> bool:
        """Go's ServeMux with healthz's handlers: an unclean path redirected (307), healthz's paths answered, any
        other path 404."""
        location = canonical_location(request.method, request.target)
        if location is not None:
            content_type, body = redirect_body(request.method, location)
            await connection.respond(307, body, content_type=content_type, close=not keep,
                                     headers=[("Location", location)])
        elif not await respond(connection, request, self.checks, keep):
            await connection.respond(404, NOT_FOUND, close=not keep)
        return keep


__all__ = ["PING_ONLY", "RETRY_PERIOD", "HealthzServer", "answer", "respond"]
