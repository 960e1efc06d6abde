"""The CSI plugin's registration handler (upstream pkg/volume/csi csi_plugin.go `RegistrationHandler`): what the
plugin manager calls for a ``CSIPlugin`` registration socket (node-driver-registrar's).

- `validate_plugin`: the driver's versions (`kopflet.volumes.csi.registration.validate_versions`), refused with
  upstream's ``validation failed for CSI Driver <name> at endpoint <endpoint>: ...``.
- `register_plugin`: the versions again, the driver recorded in the `DriversStore` (name → its CSI socket and
  highest version: every CSI component finds the driver there), NodeGetInfo on that socket (2 min, upstream
  csiTimeout), then the node info manager's InstallCSIDriver (the Node's annotation and labels, the CSINode). Either
  failing takes the driver out again (upstream unregisterDriver) and fails the registration with its error.
- `deregister_plugin`: upstream unregisterDriver: out of the store, then UninstallCSIDriver (errors logged).

`new_csi_driver_client` is upstream newCsiDriverClient: a client for a registered driver by name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from kopflet.volumes.csi import types
from kopflet.volumes.csi.client import CSIClient
from kopflet.volumes.csi.errors import CSIError
from kopflet.volumes.csi.nodeinfomanager import NodeInfoManager, NodeInfoManagerError
from kopflet.volumes.csi.registration import (
    Driver,
    DriversStore,
    ValidationError,
    log,
    validate_versions,
    validation_failed,
)

logger = logging.getLogger(__name__)


class RegistrationError(Exception):
    """A CSI driver could not be registered; the text is upstream's (what the plugin is told)."""


def new_csi_driver_client(drivers: DriversStore, name: str, *, timeout: float = types.CSI_TIMEOUT) -> CSIClient:
    """Upstream newCsiDriverClient: a client of the registered driver `name` (not yet connected);
    RegistrationError with upstream's text when there is none."""
    if not name:
        raise RegistrationError("driver name is empty")
    driver = drivers.get(name)
    if driver is None:
        raise RegistrationError(f"driver name {name} not found in the list of registered CSI drivers")
    return CSIClient(driver.endpoint, driver=name, timeout=timeout)


class RegistrationHandler:
    """Upstream csi.PluginHandler, for one agent: its drivers' store and node info manager."""

    def __init__(self, drivers: DriversStore, nim: NodeInfoManager, *,
                 client: Callable[[DriversStore, str], CSIClient] = new_csi_driver_client) -> None:
        self.drivers, self.nim, self.client = drivers, nim, client

    async def validate_plugin(self, name: str, endpoint: str, versions: Sequence[str]) -> None:
        """Upstream ValidatePlugin."""
        logger.info(log(f"Trying to validate a new CSI Driver with name: {name} endpoint: {endpoint} "
                        f"versions: {','.join(versions)}"))
        try:
            validate_versions("ValidatePlugin", name, versions, self.drivers.get(name))
        except ValidationError as exc:
            raise ValidationError(validation_failed(name, endpoint, str(exc))) from None

    async def register_plugin(self, name: str, endpoint: str, versions: Sequence[str],
                              client_timeout: float | None) -> None:
        """Upstream RegisterPlugin."""
        logger.info(log(f"Register new plugin with name: {name} at endpoint: {endpoint}"))
        highest = validate_versions("RegisterPlugin", name, versions, self.drivers.get(name))
        self.drivers.set(name, Driver(endpoint, highest))
        csi = self.client(self.drivers, name)
        try:
            async with csi:
                info = await csi.node_get_info(deadline=types.CSI_TIMEOUT if client_timeout is None
                                               else client_timeout)
        except CSIError as exc:
            logger.info(f"Error calling CSI NodeGetInfo(): {exc.go_text}")
            await self._unregister_after_failure(name)
            raise RegistrationError(exc.go_text) from None
        try:
            await self.nim.install_csi_driver(name, info.node_id, info.max_volumes_per_node, info.accessible_topology)
        except NodeInfoManagerError as exc:
            await self._unregister_after_failure(name)
            raise RegistrationError(str(exc)) from None
        logger.info(log(f"Registered CSI driver {name} at {endpoint}: node ID {info.node_id}, CSI {highest}"))

    async def _unregister_after_failure(self, name: str) -> None:
        try:
            await self.unregister_driver(name)
        except RegistrationError as exc:
            logger.error(log(f"registrationHandler.RegisterPlugin failed to unregister plugin due to previous "
                             f"error: {exc}"))

    async def deregister_plugin(self, name: str, endpoint: str) -> None:
        """Upstream DeRegisterPlugin: its errors are logged, never returned."""
        logger.info(log(f"registrationHandler.DeRegisterPlugin request for plugin {name}, endpoint {endpoint}"))
        try:
            await self.unregister_driver(name)
        except RegistrationError as exc:
            logger.error(log(f"registrationHandler.DeRegisterPlugin failed: {exc}"))

    async def unregister_driver(self, name: str) -> None:
        """Upstream unregisterDriver: out of the store, then out of the Node and CSINode."""
        self.drivers.delete(name)
        try:
            await self.nim.uninstall_csi_driver(name)
        except NodeInfoManagerError as exc:
            raise RegistrationError(log(f"Error uninstalling CSI driver: {exc}")) from None


__all__ = ["RegistrationError", "RegistrationHandler", "new_csi_driver_client"]
