"""sd_notify: READY=1 once the agent is started (upstream server.go's daemon.SdNotify), STOPPING=1 when it stops,
sent as a datagram to $NOTIFY_SOCKET; here to real unix datagram sockets in a temporary directory (a path) and in the
abstract namespace (``@name``)."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from handlers import startup
from kopflet import sdnotify


@pytest.mark.parametrize(("value", "expected"), [
    ("", None),
    ("/run/systemd/notify", "/run/systemd/notify"),
    ("@/org/freedesktop/systemd1/notify/123", b"\0/org/freedesktop/systemd1/notify/123"),
    ("relative/notify", "relative/notify"),  # Go's DialUnix takes it as it is too
])
def test_address(value: str, expected: str | bytes | None) -> None:
    assert sdnotify.address(value) == expected


def test_a_vsock_address_is_refused() -> None:
    with pytest.raises(sdnotify.NotifyError, match="AF_VSOCK"):
        sdnotify.address("vsock:2:1234")


@pytest.mark.parametrize(("states", "expected"), [
    ((sdnotify.READY,), b"READY=1"),
    ((sdnotify.STOPPING,), b"STOPPING=1"),
    (("READY=1", "STATUS=serving"), b"READY=1\nSTATUS=serving"),
])
def test_message(states: tuple[str, ...], expected: bytes) -> None:
    assert sdnotify.message(*states) == expected


@pytest.mark.parametrize("state", ["READY", "READY=1\nSTOPPING=1"])
def test_message_refuses_what_is_not_one_assignment(state: str) -> None:
    with pytest.raises(ValueError):
        sdnotify.message(state)


@pytest.fixture
def systemd_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    """What systemd listens on for a Type=notify unit: a datagram socket, bound to a path."""
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        sock.settimeout(5)
        yield sock, str(path)


@pytest.fixture
def abstract_socket() -> Iterator[tuple[socket.socket, str]]:
    name = f"/kopflet/test/{uuid.uuid4()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(b"\0" + name.encode())
        sock.settimeout(5)
        yield sock, f"@{name}"


def test_notify_sends_one_datagram_to_the_path(systemd_socket: tuple[socket.socket, str]) -> None:
    sock, path = systemd_socket
    assert sdnotify.notify(sdnotify.READY, environ={sdnotify.NOTIFY_SOCKET_ENV: path}) is True
    assert sock.recv(4096) == b"READY=1"


def test_notify_to_an_abstract_name(abstract_socket: tuple[socket.socket, str]) -> None:
    sock, name = abstract_socket
    assert sdnotify.notify(sdnotify.STOPPING, environ={sdnotify.NOTIFY_SOCKET_ENV: name}) is True
    assert sock.recv(4096) == b"STOPPING=1"


def test_notify_without_notify_socket_sends_nothing() -> None:
    assert sdnotify.notify(sdnotify.READY, environ={}) is False
    assert sdnotify.notify(sdnotify.READY, environ={sdnotify.NOTIFY_SOCKET_ENV: ""}) is False


def test_notify_reads_the_process_environment(systemd_socket: tuple[socket.socket, str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    sock, path = systemd_socket
    monkeypatch.setenv(sdnotify.NOTIFY_SOCKET_ENV, path)
    assert sdnotify.notify(sdnotify.READY) is True
    assert sock.recv(4096) == b"READY=1"
    assert os.environ[sdnotify.NOTIFY_SOCKET_ENV] == path  # left set, as upstream's SdNotify(false, ...)


def test_notify_to_a_socket_nobody_listens_on(tmp_path: Path) -> None:
    with pytest.raises(sdnotify.NotifyError, match=r"cannot notify systemd at .*/gone: "):
        sdnotify.notify(sdnotify.READY, environ={sdnotify.NOTIFY_SOCKET_ENV: str(tmp_path / "gone")})


async def test_notify_async(systemd_socket: tuple[socket.socket, str]) -> None:
    sock, path = systemd_socket
    assert await sdnotify.notify_async(sdnotify.READY, environ={sdnotify.NOTIFY_SOCKET_ENV: path}) is True
    assert sock.recv(4096) == b"READY=1"


async def test_notify_async_times_out_on_a_full_socket(tmp_path: Path) -> None:
    """A receiver that never reads: once its queue is full the send waits, and gives up after the timeout."""
    path = tmp_path / "full"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
        sock.bind(str(path))
        env = {sdnotify.NOTIFY_SOCKET_ENV: str(path)}
        with pytest.raises(sdnotify.NotifyError, match="cannot notify systemd"):
            for _ in range(100_000):  # the kernel's per-socket datagram queue (net.unix.max_dgram_qlen) fills up
                await sdnotify.notify_async("STATUS=" + "x" * 1024, environ=env, send_timeout=0.05)


# --- where the agent sends them ---------------------------------------------------------------------------------


class _Logger:
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, message: str) -> None:
        self.warnings.append(message)


async def test_the_start_up_says_ready_and_the_clean_up_stopping(
        systemd_socket: tuple[socket.socket, str], monkeypatch: pytest.MonkeyPatch) -> None:
    sock, path = systemd_socket
    monkeypatch.setenv(sdnotify.NOTIFY_SOCKET_ENV, path)
    logger: Any = _Logger()
    await startup._notify(logger, sdnotify.READY)
    assert sock.recv(4096) == b"READY=1"
    await startup.stop_agent(memo=_Memo(), logger=logger)  # nothing started: only the notification
    assert sock.recv(4096) == b"STOPPING=1"
    assert logger.warnings == []


async def test_a_failed_notification_is_a_warning_not_a_failure(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sdnotify.NOTIFY_SOCKET_ENV, str(tmp_path / "gone"))
    logger: Any = _Logger()
    await startup._notify(logger, sdnotify.READY)
    assert len(logger.warnings) == 1 and logger.warnings[0].startswith("READY=1: cannot notify systemd at ")


class _Memo(dict[str, Any]):
    """kopf.Memo's get, with nothing started."""
