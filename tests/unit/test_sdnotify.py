"""sd_notify: READY=1 once the agent is started (upstream server.go's daemon.SdNotify), STOPPING=1 when it stops,
sent as a datagram to $NOTIFY_SOCKET; here to real unix datagram sockets in a temporary directory (a path) and in the
abstract namespace (``@name``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
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


# --- a start-up that waits on someone else ----------------------------------------------------------------------


async def test_extending_start_extends_while_the_body_waits_then_clears_the_status(
        systemd_socket: tuple[socket.socket, str]) -> None:
    sock, path = systemd_socket
    env = {sdnotify.NOTIFY_SOCKET_ENV: path}
    async with sdnotify.extending_start("waiting for the certificate", every=0.05, environ=env):
        await asyncio.sleep(0.12)
    received = []
    sock.settimeout(0.5)
    with contextlib.suppress(TimeoutError):
        while True:
            received.append(sock.recv(4096))
    assert received[-1] == b"STATUS="
    extensions = received[:-1]
    assert len(extensions) >= 2  # at the start and again before the first one ran out
    assert set(extensions) == {b"STATUS=waiting for the certificate\nEXTEND_TIMEOUT_USEC=100000"}


async def test_extending_start_sends_nothing_without_a_notify_socket() -> None:
    async with sdnotify.extending_start("waiting", every=0.01, environ={}):
        await asyncio.sleep(0.05)


async def test_extending_start_survives_a_socket_nobody_listens_on(tmp_path: Path) -> None:
    env = {sdnotify.NOTIFY_SOCKET_ENV: str(tmp_path / "gone")}
    async with sdnotify.extending_start("waiting", every=0.01, environ=env):
        await asyncio.sleep(0.05)


class _AttrMemo(dict[str, Any]):
    """kopf.Memo: a dict whose keys are set as attributes too."""

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value


async def test_the_client_certificate_wait_extends_the_start_up(
        systemd_socket: tuple[socket.socket, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The handler that waits for the node's client certificate tells systemd it is still starting."""
    sock, path = systemd_socket
    monkeypatch.setenv(sdnotify.NOTIFY_SOCKET_ENV, path)
    waited = asyncio.Event()

    async def wait(*_: Any, **__: Any) -> None:
        await asyncio.sleep(0.1)  # the request waits for its approval
        waited.set()

    monkeypatch.setattr(startup, "load_client_cert", wait)
    memo = _AttrMemo(config=SimpleNamespace(bootstrap_kubeconfig="/b", rotate_certificates=False, kubeconfig="/k",
                                        cert_directory="/c", node_name="n"))
    await startup.client_certificate(memo=memo, logger=_Logger())
    assert waited.is_set() and memo["client_certificate_ready"]
    assert sock.recv(4096).startswith(b"STATUS=waiting for the node's client certificate\nEXTEND_TIMEOUT_USEC=")
    assert sock.recv(4096) == b"STATUS="


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
