"""logind on the system D-Bus: the inhibitor lock and the PrepareForShutdown signal (upstream
pkg/kubelet/nodeshutdown/systemd, godbus there, dbus-fast here).

The system bus is found as libdbus and godbus find it: ``DBUS_SYSTEM_BUS_ADDRESS``, else
``unix:path=/var/run/dbus/system_bus_socket``. Every call has a timeout (libdbus's default, 25 s): a logind that
does not answer must not hang the agent."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kopflet.nodeshutdown import rules

if TYPE_CHECKING:  # dbus-fast is imported on the first connection: a node without shutdownGracePeriod never loads it
    from dbus_fast import Message
    from dbus_fast.aio import MessageBus

LOGIND_SERVICE = "org.freedesktop.login1"
LOGIND_OBJECT = "/org/freedesktop/login1"
LOGIND_INTERFACE = "org.freedesktop.login1.Manager"
SYSTEMD_SERVICE = "org.freedesktop.systemd1"
SYSTEMD_OBJECT = "/org/freedesktop/systemd1"
SYSTEMD_INTERFACE = "org.freedesktop.systemd1.Manager"
CALL_TIMEOUT = 25.0
"""libdbus's default method call timeout (DBUS_TIMEOUT_USE_DEFAULT)."""
PREPARE_FOR_SHUTDOWN_MATCH = (f"type='signal',interface='{LOGIND_INTERFACE}',member='PrepareForShutdown',"
                              f"path='{LOGIND_OBJECT}'")
"""upstream MonitorShutdown's match: interface, member and path, no sender (any connection's signal counts)."""


class DBusError(Exception):
    """A D-Bus call failed: the error name and text, as godbus shows them."""


class LogindBus:
    """One system bus connection (upstream DBusCon)."""

    def __init__(self, bus: MessageBus, *, logind_conf_dir: str = rules.LOGIND_CONFIG_DIRECTORY) -> None:
        self._bus = bus
        self.logind_conf_dir = logind_conf_dir

    @classmethod
    async def connect(cls, *, logind_conf_dir: str = rules.LOGIND_CONFIG_DIRECTORY) -> LogindBus:
        from dbus_fast import BusType
        from dbus_fast.aio import MessageBus

        try:
            bus = MessageBus(bus_type=BusType.SYSTEM, negotiate_unix_fd=True, auth_timeout=CALL_TIMEOUT)
        except Exception as exc:  # a malformed DBUS_SYSTEM_BUS_ADDRESS
            raise DBusError(f"cannot connect to the system bus: {exc}") from exc
        try:
            await asyncio.wait_for(bus.connect(), CALL_TIMEOUT)
        except Exception as exc:  # refused, authentication failed, timed out: dbus-fast's errors are not OSErrors
            bus.disconnect()
            raise DBusError(f"cannot connect to the system bus: {exc or type(exc).__name__}") from exc
        return cls(bus, logind_conf_dir=logind_conf_dir)

    async def _call(self, destination: str, path: str, interface: str, member: str, signature: str = "",
                    body: list[Any] | None = None) -> Message:
        from dbus_fast import Message, MessageType

        try:
            reply = await asyncio.wait_for(self._bus.call(Message(
                destination=destination, path=path, interface=interface, member=member, signature=signature,
                body=body or [])), CALL_TIMEOUT)
        except Exception as exc:  # the connection broke, or no answer in time
            raise DBusError(str(exc) or type(exc).__name__) from exc
        if reply.message_type == MessageType.ERROR:
            for fd in reply.unix_fds:
                os.close(fd)
            # godbus Error.Error(): the first body string, else the error's name
            text = reply.body[0] if reply.body and isinstance(reply.body[0], str) else ""
            raise DBusError(text or str(reply.error_name))
        return reply

    async def current_inhibit_delay(self) -> float:
        """logind's InhibitDelayMaxUSec, in seconds."""
        try:
            reply = await self._call(LOGIND_SERVICE, LOGIND_OBJECT, "org.freedesktop.DBus.Properties", "Get", "ss",
                                     [LOGIND_INTERFACE, "InhibitDelayMaxUSec"])
        except (TimeoutError, DBusError, OSError) as exc:
            raise DBusError(f"failed reading InhibitDelayMaxUSec property from logind: {exc}") from exc
        variant = reply.body[0] if reply.body else None
        if getattr(variant, "signature", None) != "t":
            raise DBusError("InhibitDelayMaxUSec from logind is not a uint64 as expected")
        return int(variant.value) / 1e6  # type: ignore[union-attr]

    async def inhibit_shutdown(self) -> int:
        """A delay inhibitor lock: the file descriptor logind watches; closing it releases the lock."""
        try:
            reply = await self._call(LOGIND_SERVICE, LOGIND_OBJECT, LOGIND_INTERFACE, "Inhibit", "ssss",
                                     [rules.INHIBIT_WHAT, rules.INHIBIT_WHO, rules.INHIBIT_WHY, rules.INHIBIT_MODE])
        except (TimeoutError, DBusError, OSError) as exc:
            raise DBusError(f"failed creating systemd inhibitor: {exc}") from exc
        index = reply.body[0] if reply.body and isinstance(reply.body[0], int) else 0
        if not 0 <= index < len(reply.unix_fds):
            for other in reply.unix_fds:
                os.close(other)
            raise DBusError("failed storing inhibit lock file descriptor: no file descriptor in the reply")
        fd = reply.unix_fds[index]
        for other in reply.unix_fds:
            if other != fd:
                os.close(other)
        return fd

    @staticmethod
    def release_inhibit_lock(lock: int) -> None:
        try:
            os.close(lock)
        except OSError as exc:
            raise DBusError(f"unable to close systemd inhibitor lock: {exc}") from exc

    async def reload_logind_conf(self) -> None:
        """systemd's KillUnit(systemd-logind.service, all, SIGHUP): logind rereads logind.conf and its drop-ins."""
        try:
            await self._call(SYSTEMD_SERVICE, SYSTEMD_OBJECT, SYSTEMD_INTERFACE, "KillUnit", "ssi",
                             ["systemd-logind.service", "all", int(signal.SIGHUP)])
        except (TimeoutError, DBusError, OSError) as exc:
            raise DBusError(f"unable to reload logind conf: {exc}") from exc

    async def monitor_shutdown(self, on_event: Callable[[bool], None], on_bad: Callable[[str], None]) -> None:
        """Calls `on_event` with each PrepareForShutdown's boolean (True: the node is shutting down, False: the
        shutdown was cancelled); a signal without a boolean is reported to `on_bad` and skipped."""
        from dbus_fast import MessageType

        def handler(message: Message) -> None:
            if (message.message_type != MessageType.SIGNAL or message.member != "PrepareForShutdown"
                    or message.interface != LOGIND_INTERFACE or message.path != LOGIND_OBJECT):
                return
            if not message.body:
                on_bad("Failed obtaining shutdown event, PrepareForShutdown event was empty")
            elif not isinstance(message.body[0], bool):
                on_bad("Failed obtaining shutdown event, PrepareForShutdown event was not bool type as expected")
            else:
                on_event(message.body[0])
        self._bus.add_message_handler(handler)
        await self._call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "AddMatch", "s",
                         [PREPARE_FOR_SHUTDOWN_MATCH])

    async def wait_for_disconnect(self) -> None:
        """Returns when the connection is gone (the bus daemon restarted, or `close`)."""
        try:
            await self._bus.wait_for_disconnect()
        except Exception:
            return

    def override_inhibit_delay(self, seconds: float) -> None:
        """Writes the logind drop-in that raises InhibitDelayMaxSec (upstream's 99-kubelet.conf). Blocking: call it
        in a thread."""
        directory = Path(self.logind_conf_dir)
        try:
            directory.mkdir(mode=0o755, parents=True, exist_ok=True)
        except OSError as exc:
            raise DBusError(f"failed creating {self.logind_conf_dir} directory: {exc}") from exc
        path = directory / rules.LOGIND_OVERRIDE_FILE
        try:
            path.write_text(rules.logind_override(seconds))
            path.chmod(0o644)
        except OSError as exc:
            raise DBusError(f"failed writing logind shutdown inhibit override file {path}: {exc}") from exc

    def close(self) -> None:
        self._bus.disconnect()
