"""The connection loop the kubelet API (:mod:`kopflet.server.server`) and the healthz port
(:mod:`kopflet.server.healthz_server`) share, as upstream serves both with Go's ``http.Server``.

One request at a time per connection (:class:`~kopflet.server.http.HttpConnection` reads it, with its idle and head
deadlines and its limits), kept alive while both sides allow it; a request that cannot be read is answered with its
error and the connection closed. `close` is ``http.Server.Shutdown``: stop listening, cut the idle connections at
once, give the requests in progress a grace period, then cut what is left (streams).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable
from typing import ClassVar, Generic, TypeVar

from kopflet.server.http import MAX_LINE, HttpConnection, HttpError, Request

C = TypeVar("C", bound=HttpConnection)
"""What a server knows of one client connection (the kubelet API's: its TLS certificate too)."""


class HttpServer(Generic[C]):
    """Listens (`_listen`) and serves each connection's requests with `_handle`, which subclasses define."""

    log_name: ClassVar[str] = "Connection"
    """How the debug and error lines name a connection ("<log_name> from <address> ended: ...")."""
    logger: ClassVar[logging.Logger] = logging.getLogger(__name__)
    """The subclass's module logger: its lines stay under its name (``-vmodule``, log filters)."""

    def __init__(self, connection: Callable[[asyncio.StreamReader, asyncio.StreamWriter], C]) -> None:
        self._make_connection = connection
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._busy: set[asyncio.Task[None]] = set()
        """The connections handling a request: `close` lets them finish within its grace."""
        self._closing = False

    async def _listen(self, host: str, port: int, tls: ssl.SSLContext | None = None, *,
                      handshake_timeout: float | None = None) -> asyncio.Server:
        """Start listening (OSError when the address cannot be bound)."""
        self._server = await asyncio.start_server(
            self._serve_connection, host=host, port=port, ssl=tls, limit=MAX_LINE, reuse_address=True,
            ssl_handshake_timeout=handshake_timeout if tls is not None else None)
        return self._server

    async def close(self, grace: float = 5.0) -> None:
        """Stop listening, let requests in progress finish for ``grace`` seconds, then cut the rest (streams)."""
        self._closing = True
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for task in self._connections - self._busy:
            task.cancel()  # idle between requests (or still sending one): as Shutdown closes idle connections
        tasks = list(self._connections)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace)
            for task in pending:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if server is not None:
            await server.wait_closed()

    async def _handle(self, connection: C, request: Request, keep: bool) -> bool:
        """Answer `request` (with ``close=not keep``): True when the connection may serve another."""
        raise NotImplementedError

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        connection = self._make_connection(reader, writer)
        self._connections.add(task)
        try:
            while not self._closing:
                try:
                    request = await connection.read_request()
                except HttpError as exc:
                    await connection.respond(exc.status, exc.message, close=True)
                    break
                if request is None:
                    break
                self._busy.add(task)
                keep_alive = await self._handle(connection, request, request.keep_alive and not self._closing)
                self._busy.discard(task)
                if not keep_alive or not connection.next_cycle():
                    break
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError, ssl.SSLError) as exc:
            self.logger.debug(f"{self.log_name} from {connection.remote} ended: {exc!r}")
            if isinstance(exc, TimeoutError):  # a write the client did not read: no graceful close flushing it
                writer.transport.abort()
        except asyncio.CancelledError:
            # close() cut it: end quietly (asyncio's stream callback would log a cancelled connection task).
            if not self._closing:
                raise
        except Exception:
            self.logger.exception(f"{self.log_name} from {connection.remote} failed")
            if connection.can_respond:  # Go's server would hang up; a client still waiting gets told (no traceback)
                with contextlib.suppress(Exception):
                    await connection.respond(500, "500 Internal Server Error", close=True)
        finally:
            self._connections.discard(task)
            self._busy.discard(task)
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                async with asyncio.timeout(5):
                    await writer.wait_closed()


__all__ = ["HttpServer"]
