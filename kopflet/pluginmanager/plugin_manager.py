"""The plugin manager (upstream pkg/kubelet/pluginmanager plugin_manager.go and reconciler): every second, the
registration sockets in ``<root-dir>/plugins_registry`` are looked at (the plugin watcher, the desired state of the
world), then plugins no longer there (or there anew) are unregistered and new ones registered
(`kopflet.pluginmanager.operationexecutor`) with the handler of their type (upstream kubelet.go adds CSIPlugin's
handler, csi.PluginHandler; the container manager's are DevicePlugin's and, with DynamicResourceAllocation,
DRAPlugin's).

The directory is made (0750, as upstream's setupDataDirs) when the manager starts; one it cannot make or read
stops the manager with upstream's log line, not the agent. Operations still running at stop are cancelled; what
was registered is not unregistered (upstream's plugin manager does not either: the kubelet's next start finds the
sockets again).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable

from kopflet.pluginmanager import cache, pluginwatcher
from kopflet.pluginmanager.cache import PluginInfo
from kopflet.pluginmanager.operationexecutor import (
    OperationExecutor,
    PluginHandler,
    register_plugin,
    unregister_plugin,
)

logger = logging.getLogger(__name__)


class PluginManager:
    """Upstream pluginManager: `add_handler` per plugin type, then `run` until cancelled."""

    def __init__(self, sock_dir: str, *, period: float = cache.LOOP_SLEEP,
                 clock: Callable[[], float] = time.monotonic, dial_timeout: float = cache.DIAL_TIMEOUT) -> None:
        self.sock_dir = sock_dir
        self.period = period
        self.dial_timeout = dial_timeout
        self.handlers: dict[str, PluginHandler] = {}
        self.desired: dict[str, str] = {}
        """The desired state of the world: registration socket → generation."""
        self.actual: dict[str, PluginInfo] = {}
        """The actual state of the world: registration socket → the plugin registered through it."""
        self.executor = OperationExecutor(clock)

    def add_handler(self, plugin_type: str, handler: PluginHandler) -> None:
        """Upstream AddHandler: the handler for plugins of `plugin_type` (``CSIPlugin``, ...)."""
        self.handlers[plugin_type] = handler

    async def run(self) -> None:
        """Upstream Run: the directory, then a reconcile round every `period` until cancelled."""
        try:
            await asyncio.to_thread(os.makedirs, self.sock_dir, 0o750, exist_ok=True)
        except OSError as exc:
            logger.error(f"The desired_state_of_world populator (plugin watcher) starts failed!: error (re-)creating "
                         f"root {self.sock_dir}: {exc}")
            return
        logger.info(f"Starting Kubelet Plugin Manager on {self.sock_dir}")
        try:
            while True:
                await self.reconcile()
                await asyncio.sleep(self.period)
        finally:
            await self.executor.stop()
            logger.info("Shutting down Kubelet Plugin Manager")

    async def reconcile(self) -> None:
        """One round: look at the directory (the watcher), then upstream reconciler.reconcile."""
        try:
            self.desired = await asyncio.to_thread(pluginwatcher.scan, self.sock_dir)
        except OSError as exc:
            logger.error(f"Failed to traverse plugin socket path {self.sock_dir}: {exc}")
        plan = cache.reconcile(self.desired, self.actual)
        for info in plan.unregister:
            logger.debug(f"Starting operationExecutor.UnregisterPlugin for {info}")
            if self.executor.run(info.socket_path, lambda info=info: unregister_plugin(info, self.handlers,
                                                                                       self.actual)):
                logger.info(f"OperationExecutor.UnregisterPlugin started for {info.name} at {info.socket_path}")
        for info in plan.register:
            logger.debug(f"Starting operationExecutor.RegisterPlugin for {info}")
            if self.executor.run(info.socket_path, lambda info=info: register_plugin(
                    info.socket_path, info.uuid, dict(self.handlers), self.actual, dial_timeout=self.dial_timeout)):
                logger.info(f"OperationExecutor.RegisterPlugin started for {info.socket_path}")


__all__ = ["PluginManager"]
