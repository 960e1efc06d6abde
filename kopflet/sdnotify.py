"""systemd's readiness protocol (sd_notify), as the upstream kubelet speaks it through go-systemd's daemon.SdNotify.

Under a ``Type=notify`` unit systemd sets ``$NOTIFY_SOCKET`` and counts the service started only when it sends
``READY=1``: a datagram on that unix socket (a path, or ``@name`` for a name in the abstract namespace, as Go's
net package reads a leading ``@``). Upstream sends it once its server and healthz are up (cmd/kubelet/app/server.go
run, right after RunKubelet: ``go daemon.SdNotify(false, "READY=1")``), ignoring errors and leaving
``$NOTIFY_SOCKET`` set; kopflet sends it at the same point (the end of the start-up, `handlers.startup`). Under a unit
with ``WatchdogSec=``, ``WATCHDOG=1`` follows every half of the timeout while the agent is healthy
(`kopflet.watchdog`, upstream pkg/kubelet/watchdog). kopflet also
says ``STOPPING=1`` when it starts to stop (go-systemd's SdNotifyStopping, which the kubelet does not send), so that
``systemctl status`` shows it deactivating while the agent finishes its clean-up. Without ``$NOTIFY_SOCKET``
nothing is sent, as go-systemd.

`address` and `message` are pure; `notify` sends with a timeout (a datagram to a full socket would block), and
`notify_async` does so off the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator, Mapping
from typing import Final

logger = logging.getLogger(__name__)

NOTIFY_SOCKET_ENV: Final = "NOTIFY_SOCKET"
READY: Final = "READY=1"
"""go-systemd SdNotifyReady: start-up is finished."""
STOPPING: Final = "STOPPING=1"
"""go-systemd SdNotifyStopping: the service is beginning its shutdown."""
EXTEND_TIMEOUT_USEC: Final = "EXTEND_TIMEOUT_USEC"
"""sd_notify(3): the current state (here the start-up) may last this many microseconds more, beyond
``TimeoutStartSec=``, before systemd gives up on it; sent again before it runs out, it extends again."""
STATUS: Final = "STATUS"
"""sd_notify(3): one line of free text that ``systemctl status`` shows."""
EXTEND_EVERY: Final = 30.0
"""Seconds between two extensions of a start-up that waits on someone else (`extending_start`); each one grants
twice as long, so one lost datagram does not end it."""
WATCHDOG: Final = "WATCHDOG=1"
"""go-systemd SdNotifyWatchdog: the keep-alive ping of a unit with ``WatchdogSec=`` (`kopflet.watchdog`)."""
SEND_TIMEOUT: Final = 5.0
"""Seconds a notification may wait for room in systemd's socket."""


class NotifyError(OSError):
    """The notification could not be sent (a socket systemd does not listen on, an address kopflet cannot use)."""


def address(value: str) -> str | bytes | None:
    """``$NOTIFY_SOCKET`` as a socket address: None when unset or empty; ``@name`` is the abstract name (a leading
    NUL byte); anything else a path. systemd's ``vsock:`` addresses are refused, as go-systemd cannot use them."""
    if not value:
        return None
    if value.startswith("@"):
        return b"\0" + value[1:].encode()
    if value.startswith("vsock:"):
        raise NotifyError(f"{NOTIFY_SOCKET_ENV}={value}: an AF_VSOCK address, which kopflet does not speak")
    return value


def message(*states: str) -> bytes:
    """One datagram of ``KEY=VALUE`` assignments, newline-separated (sd_notify(3)); a state must be one line."""
    for state in states:
        if "\n" in state or "=" not in state:
            raise ValueError(f"not a KEY=VALUE notification: {state!r}")
    return "\n".join(states).encode()


def notify(*states: str, environ: Mapping[str, str] | None = None, send_timeout: float = SEND_TIMEOUT) -> bool:
    """Send ``states`` to ``$NOTIFY_SOCKET``: False when it is not set (not under a notify unit), True when sent;
    NotifyError when sending fails."""
    env = os.environ if environ is None else environ
    target = address(env.get(NOTIFY_SOCKET_ENV, ""))
    if target is None:
        return False
    payload = message(*states)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.settimeout(send_timeout)
            sock.connect(target)
            sock.send(payload)
    except OSError as exc:
        raise NotifyError(f"cannot notify systemd at {env[NOTIFY_SOCKET_ENV]}: {exc.strerror or exc}") from None
    return True


async def notify_async(*states: str, environ: Mapping[str, str] | None = None,
                       send_timeout: float = SEND_TIMEOUT) -> bool:
    """`notify` in a thread, so that a full socket never holds up the event loop; at most ``send_timeout`` plus a
    second."""
    async with asyncio.timeout(send_timeout + 1.0):
        return await asyncio.to_thread(notify, *states, environ=environ, send_timeout=send_timeout)


@contextlib.asynccontextmanager
async def extending_start(status: str, *, every: float = EXTEND_EVERY,
                          environ: Mapping[str, str] | None = None) -> AsyncIterator[None]:
    """While the body waits on someone else (a certificate signing request to be approved: upstream waits up to an
    hour), tell systemd every ``every`` seconds that the start-up goes on (``EXTEND_TIMEOUT_USEC``) and why
    (``STATUS``), so a Type=notify unit's ``TimeoutStartSec=`` (90 s by default) does not kill a start-up that is
    only waiting. Upstream's kubelet needs none of this: its units are Type=simple. A failed notification is logged
    at debug level once; nothing is sent without ``$NOTIFY_SOCKET``."""
    grant = f"{EXTEND_TIMEOUT_USEC}={int(2 * every * 1_000_000)}"
    sent = False

    async def keep_extending() -> None:
        nonlocal sent
        failed = False
        while True:
            try:
                if not await notify_async(f"{STATUS}={status}", grant, environ=environ):
                    return  # not under a notify unit
                sent = True
            except (NotifyError, TimeoutError) as exc:
                if not failed:
                    logger.debug(f"{grant}: {exc}")
                failed = True
            await asyncio.sleep(every)

    task = asyncio.create_task(keep_extending(), name="sdnotify-extend-start")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if sent:  # the wait is over: `systemctl status` no longer says it waits
            with contextlib.suppress(NotifyError, TimeoutError):
                await notify_async(f"{STATUS}=", environ=environ)


__all__ = ["EXTEND_EVERY", "EXTEND_TIMEOUT_USEC", "NOTIFY_SOCKET_ENV", "READY", "SEND_TIMEOUT", "STATUS", "STOPPING",
           "WATCHDOG", "NotifyError", "address", "extending_start", "message", "notify", "notify_async"]
