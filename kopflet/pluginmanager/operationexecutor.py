"""The plugin manager's operations (upstream pkg/kubelet/pluginmanager/operationexecutor): registering the plugin
behind a registration socket, and unregistering it, one operation at a time per socket.

`register_plugin` is upstream operation_generator.go GenerateRegisterPluginFunc step for step: dial the socket
(10 s), GetInfo (1 s), pick the handler of the plugin's type (none: the plugin is told so), default the endpoint
to the socket, ValidatePlugin (a refusal is told to the plugin), record the plugin as registered, RegisterPlugin
(a failure takes the record back and is told to the plugin), then NotifyRegistrationStatus(registered) (5 s; if
that fails the plugin is deregistered again). Every text the plugin receives or the agent logs is upstream's
(`kopflet.pluginmanager.cache`). `unregister_plugin` is GenerateUnregisterPluginFunc: the record goes first, then
the handler's DeRegisterPlugin.

`OperationExecutor` is upstream's goroutinemap with exponential backoff on error: one task per socket path; while
it runs no other operation on that path starts, and after a failure none does before the backoff allows it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from typing import Final, Protocol

import grpc
import grpc.aio

from kopflet.pluginmanager import cache
from kopflet.pluginmanager.cache import PluginInfo
from kopflet.pluginmanager.proto import api_pb2, api_pb2_grpc

logger = logging.getLogger(__name__)

_CHANNEL_OPTIONS: Final = (
    ("grpc.enable_http_proxy", 0),  # a local socket never goes through $http_proxy
    ("grpc.use_local_subchannel_pool", 1),  # each dial its own connection, as upstream's
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
)


class PluginHandler(Protocol):
    """Upstream cache.PluginHandler: what a consumer of one plugin type implements. A refusal or failure is an
    exception, whose text is what the plugin is told."""

    async def validate_plugin(self, name: str, endpoint: str, versions: Sequence[str]) -> None:
        """Raise if the plugin cannot be registered (an unsupported version, ...)."""

    async def register_plugin(self, name: str, endpoint: str, versions: Sequence[str],
                              client_timeout: float | None) -> None:
        """Take the plugin (`client_timeout`: upstream's pluginClientTimeout, None from the plugin manager)."""

    async def deregister_plugin(self, name: str, endpoint: str) -> None:
        """The plugin's registration socket is gone."""


class OperationError(Exception):
    """An operation failed; its text is upstream's operation error."""


async def _notify(stub: api_pb2_grpc.RegistrationStub, registered: bool, error: str) -> str | None:
    """Upstream notifyPlugin's RPC (5 s): None when it was sent, else grpc-go's text of its error."""
    try:
        await stub.NotifyRegistrationStatus(api_pb2.RegistrationStatus(plugin_registered=registered, error=error),
                                            timeout=cache.NOTIFY_TIMEOUT)
    except grpc.aio.AioRpcError as exc:
        return cache.rpc_error_text(exc.code().name, exc.details() or "")
    return None


async def _refuse(stub: api_pb2_grpc.RegistrationStub, socket_path: str, text: str) -> OperationError:
    """The plugin told `text`; upstream's operation error (``failed to send error``, even when it was sent)."""
    return OperationError(cache.failed_to_send_error(socket_path,
                                                     cache.notify_failed(text, await _notify(stub, False, text))))


async def register_plugin(socket_path: str, uuid: str, handlers: Mapping[str, PluginHandler],
                          actual: MutableMapping[str, PluginInfo], *,
                          dial_timeout: float = cache.DIAL_TIMEOUT) -> None:
    """Upstream GenerateRegisterPluginFunc's operation; OperationError with upstream's text when it fails."""
    channel = grpc.aio.insecure_channel(f"unix://{socket_path}", options=list(_CHANNEL_OPTIONS))
    try:
        try:
            await asyncio.wait_for(channel.channel_ready(), dial_timeout)
        except TimeoutError:
            raise OperationError(cache.dial_failed(socket_path)) from None
        stub = api_pb2_grpc.RegistrationStub(channel)
        try:
            info = await stub.GetInfo(api_pb2.InfoRequest(), timeout=cache.GET_INFO_TIMEOUT)
        except grpc.aio.AioRpcError as exc:
            raise OperationError(cache.get_info_failed(
                socket_path, cache.rpc_error_text(exc.code().name, exc.details() or ""))) from None
        handler = handlers.get(info.type)
        if handler is None:
            raise await _refuse(stub, socket_path, cache.no_handler(info.type, socket_path))
        endpoint = info.endpoint or socket_path
        versions = tuple(info.supported_versions)
        try:
            await handler.validate_plugin(info.name, endpoint, versions)
        except Exception as exc:
            raise await _refuse(stub, socket_path, cache.validation_failed(str(exc))) from None
        # recorded before the handler registers it, so a socket removed meanwhile is unregistered after
        actual[socket_path] = PluginInfo(socket_path, uuid, info.type, info.name, endpoint)
        try:
            await handler.register_plugin(info.name, endpoint, versions, None)
        except Exception as exc:
            actual.pop(socket_path, None)
            text = cache.registration_failed(str(exc))
            raise OperationError(cache.notify_failed(text, await _notify(stub, False, text))) from None
        # notified after the handler registered it: a plugin told "registered" is registered
        rpc_error = await _notify(stub, True, "")
        if rpc_error is not None:
            actual.pop(socket_path, None)
            await handler.deregister_plugin(info.name, endpoint)
            raise OperationError(cache.failed_to_send_status(socket_path, rpc_error))
        logger.info(f"Registered plugin {info.name} of type {info.type} at endpoint {endpoint} "
                    f"(registration socket {socket_path})")
    finally:
        await channel.close()


async def unregister_plugin(info: PluginInfo, handlers: Mapping[str, PluginHandler],
                            actual: MutableMapping[str, PluginInfo]) -> None:
    """Upstream GenerateUnregisterPluginFunc's operation: the record first (a new registration of the socket may
    then start), then the handler's DeRegisterPlugin (which logs its own errors, as upstream's returns none)."""
    handler = handlers.get(info.type)
    if handler is None:
        raise OperationError(cache.no_handler_to_unregister(info.socket_path))
    actual.pop(info.socket_path, None)
    try:
        await handler.deregister_plugin(info.name, info.endpoint)
    except Exception:
        logger.exception(f"DeRegisterPlugin of {info.name} at {info.endpoint} failed")
    logger.info(f"DeRegisterPlugin called for {info.name} at {info.endpoint}")


@dataclasses.dataclass
class _Operation:
    task: asyncio.Task[None] | None = None
    backoff: cache.ExponentialBackoff = dataclasses.field(default_factory=cache.ExponentialBackoff)


class OperationExecutor:
    """Upstream operationExecutor over goroutinemap.NewGoRoutineMap(exponentialBackOffOnError=true)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._operations: dict[str, _Operation] = {}

    def pending(self, name: str) -> bool:
        operation = self._operations.get(name)
        return operation is not None and operation.task is not None

    def run(self, name: str, operation: Callable[[], Awaitable[None]]) -> bool:
        """Start `operation` as the one operation of `name`; False (upstream's AlreadyExists or
        ExponentialBackoff error, expected and not logged) when one runs or the last one failed too recently."""
        existing = self._operations.get(name)
        if existing is not None and (existing.task is not None or not existing.backoff.safe_to_retry(self.clock())):
            return False
        entry = existing or _Operation()
        entry.task = asyncio.create_task(self._run(name, entry, operation), name=f"plugin-operation {name}")
        self._operations[name] = entry
        return True

    async def _run(self, name: str, entry: _Operation, operation: Callable[[], Awaitable[None]]) -> None:
        try:
            await operation()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = str(exc) if isinstance(exc, OperationError) else f"{type(exc).__name__}: {exc}"
            entry.backoff = entry.backoff.updated(error, self.clock())
            entry.task = None
            logger.error(entry.backoff.no_retries_permitted_message(name))
            return
        self._operations.pop(name, None)

    async def stop(self) -> None:
        """Cancel the operations still running."""
        tasks = [entry.task for entry in self._operations.values() if entry.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._operations.clear()

    async def wait(self) -> None:
        """Until no operation runs (tests)."""
        while tasks := [entry.task for entry in self._operations.values() if entry.task is not None]:
            await asyncio.gather(*tasks, return_exceptions=True)


__all__ = ["OperationError", "OperationExecutor", "PluginHandler", "register_plugin", "unregister_plugin"]
