"""Start, find and stop the stack's daemons: pid files, log files, health checks.

Daemons run in their own session so that Ctrl-C in the developer's terminal reaches only the
foreground agent; the stack then stops them in order itself.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

HealthCheck = Callable[[], bool]


class StackError(RuntimeError):
    """A component would not start or stop; the message says which and where its log is."""


def read_pid(pidfile: Path) -> int | None:
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if alive(pid) else None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours is not alive for our purposes.
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z"):
            return False
    return True


def cmdline(pid: int) -> list[str] | None:
    """A process's argv as it was started (None when it is gone or unreadable)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.decode(errors="replace").split("\0")[:-1] if raw else None


def port_owner(port: int) -> str | None:
    """Who listens on a TCP port of this machine (or None): clear errors beat 'address in use'."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        if s.connect_ex(("127.0.0.1", port)) != 0:
            return None
    out = subprocess.run(["ss", "-Hltnp", f"sport = :{port}"], capture_output=True, text=True).stdout
    return out.strip() or f"something on port {port}"


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start(
    name: str,
    argv: Sequence[str],
    *,
    pids: Path,
    logs: Path,
    healthy: HealthCheck,
    timeout: float = 60.0,
    env: dict[str, str] | None = None,
) -> bool:
    """Start ``name`` detached unless it already runs; wait until healthy. True if started now."""
    pidfile, logfile = pids / f"{name}.pid", logs / f"{name}.log"
    if read_pid(pidfile) is not None:
        wait_healthy(name, healthy, timeout, logfile)
        return False
    pids.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    with logfile.open("ab") as log:
        log.write(f"\n==== {time.strftime('%Y-%m-%dT%H:%M:%S')} starting: {' '.join(argv)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env={**os.environ, **(env or {})},
        )
    pidfile.write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pidfile.unlink(missing_ok=True)
            raise StackError(f"{name} exited with {proc.returncode}; its log {logfile} ends:\n{tail(logfile)}")
        if healthy():
            return True
        time.sleep(0.25)
    raise StackError(f"{name} did not become healthy in {timeout:.0f}s; its log {logfile} ends:\n{tail(logfile)}")


def wait_healthy(name: str, healthy: HealthCheck, timeout: float, logfile: Path) -> None:
    deadline = time.monotonic() + timeout
    while not healthy():
        if time.monotonic() > deadline:
            raise StackError(f"{name} runs but is not healthy after {timeout:.0f}s; see {logfile}:\n{tail(logfile)}")
        time.sleep(0.25)


def stop(name: str, *, pids: Path, timeout: float = 20.0) -> bool:
    """SIGTERM, then SIGKILL after ``timeout``. True if something was stopped."""
    pidfile = pids / f"{name}.pid"
    pid = read_pid(pidfile)
    if pid is None:
        pidfile.unlink(missing_ok=True)
        return False
    # The pid file goes first: a process that is gone while its pid file stays has crashed (`Supervisor`).
    pidfile.unlink(missing_ok=True)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if not wait_gone(pid, timeout):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_gone(pid, 5)
    return True


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)
    return True


def processes_matching(needle: str) -> list[int]:
    """Pids whose command line contains ``needle`` (for sweeping containerd shims)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if needle in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                found.append(int(entry.name))
    return found


def https_ok(url: str, ca: Path | None = None, cert: tuple[Path, Path] | None = None,
             expect: bytes | None = b"ok") -> HealthCheck:
    """A health check for an HTTPS endpoint (``ca=None`` skips verification: self-signed ports). The files are read
    at the first check, so the stack's daemons can be listed before their certificates exist."""
    contexts: list[ssl.SSLContext] = []

    def context() -> ssl.SSLContext:
        if not contexts:
            ctx = ssl.create_default_context(cafile=str(ca)) if ca else ssl._create_unverified_context()
            if cert:
                ctx.load_cert_chain(str(cert[0]), str(cert[1]))
            contexts.append(ctx)
        return contexts[0]

    def check() -> bool:
        try:
            with urllib.request.urlopen(url, context=context(), timeout=2) as resp:
                return resp.status == 200 and (expect is None or resp.read().strip() == expect)
        except OSError:
            return False

    return check


def http_ok(url: str) -> HealthCheck:
    def check() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    return check


def http_status(url: str, status: int) -> HealthCheck:
    """Healthy when the URL answers with `status` (a registry behind a login answers 401)."""
    def check() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return resp.status == status
        except urllib.error.HTTPError as err:
            return err.code == status
        except OSError:
            return False

    return check


def unix_socket_ok(path: Path) -> HealthCheck:
    def check() -> bool:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(1)
            return s.connect_ex(str(path)) == 0

    return check
