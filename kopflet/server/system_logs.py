"""``/logs/``'s I/O: the node's log files under /var/log and the node log query's ``journalctl`` runs.

Upstream's logServer (kubelet.go Run): ``http.FileServer(http.Dir("/var/log"))`` behind ``/logs/``, and with
``enableSystemLogQuery`` the journal server before it (kubelet_server_journal.go Copy): ``journalctl`` for services
journald knows, the heuristics' files for the others, all within one 30 s deadline. The rules are in
:mod:`kopflet.server.node_log_query`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import mimetypes
import os
import posixpath
import stat
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from email.utils import formatdate

from kopflet.server import node_log_query as nlq

logger = logging.getLogger(__name__)

WriteFn = Callable[[bytes], Awaitable[None]]
READ_SIZE = 64 * 1024


def _go_errno(code: int | None) -> str:
    """Go's syscall.Errno text: the C library's, lower-cased first letter as Go's table writes them."""
    text = os.strerror(code or 0)
    return text[:1].lower() + text[1:]


def _inside(root: str, name: str) -> str | None:
    """os.Root's lookup of `name` under `root`: the real path, or None when it escapes (an absolute name, ``..``
    above the root, a symlink out of it)."""
    if name.startswith("/") or name.startswith("\\"):
        return None
    joined = posixpath.normpath(posixpath.join(root, name))
    real_root = os.path.realpath(root)
    real = os.path.realpath(joined)
    if real != real_root and not real.startswith(real_root.rstrip("/") + "/"):
        return None
    if joined != root.rstrip("/") and not joined.startswith(root.rstrip("/") + "/"):
        return None
    return real


@dataclass(frozen=True)
class FileAnswer:
    """http.FileServer's answer for one path: an error, a redirect, a listing, or a file to stream."""

    status: int
    body: bytes = b""
    content_type: str | None = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()
    path: str | None = None
    """A regular file to stream (status 200)."""


class SystemLogs:
    """The node's logs as ``/logs/`` serves them; `query` is ``enableSystemLogQuery`` (the NodeLogQuery gate is
    locked on at v1.37.1)."""

    def __init__(self, *, query: bool, log_dir: str = nlq.NODE_LOG_DIR, journalctl: str = "journalctl",
                 timeout: float = nlq.TIMEOUT) -> None:
        self.query, self.log_dir, self.journalctl, self.timeout = query, log_dir, journalctl, timeout

    # ------------------------------------------------------------------------------------------ the query mode

    def stat_error(self, name: str) -> str | None:
        """validate's ``os.OpenRoot(nodeLogDir).Stat(file)`` error text, or None."""
        if "\0" in name:  # Go's syscalls refuse a NUL byte: EINVAL
            return f"statat {name}: invalid argument"
        real = _inside(self.log_dir, name)
        if real is None:
            return f"statat {name}: path escapes from parent"
        try:
            os.stat(real)
        except OSError as exc:
            return f"statat {name}: {_go_errno(exc.errno)}"
        return None

    async def copy(self, request: nlq.NodeLogQuery, write: WriteFn) -> None:
        """nodeLogQuery.Copy: everything within the deadline; a command or file cut by it ends the answer."""
        deadline = time.monotonic() + self.timeout
        native: list[str] = []
        files: list[str] = []
        for service in request.services:
            units = await self._units(deadline)
            (native if nlq.is_native(units, service) else files).append(service)
        if native:
            await self._journal(request, native, write, deadline)
        if files and not request.options.empty:
            await write(nlq.options_with_files(files).encode())
            return
        if files:
            if time.monotonic() >= deadline:
                await write(nlq.context_error(nlq.DEADLINE_EXCEEDED).encode())
                return
            for service in files:
                await self._service_file(service, write, deadline)

    async def _units(self, deadline: float) -> str | None:
        """checkForNativeLogger's ``journalctl --field _SYSTEMD_UNIT`` (combined output), None when it fails."""
        try:
            proc = await asyncio.create_subprocess_exec(
                self.journalctl, *nlq.UNITS_ARGS, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        except OSError:
            return None
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            return None
        finally:  # a deadline, or the client gone (the answer cancelled): journalctl must not run on
            if proc.returncode is None:
                await _kill(proc)
        return out.decode(errors="replace") if proc.returncode == 0 else None

    async def _journal(self, request: nlq.NodeLogQuery, services: list[str], write: WriteFn,
                       deadline: float) -> None:
        """copyServiceLogs: journalctl's stdout and stderr into the answer as they come; killed at the deadline.
        journalctl's own failure (an exit status) adds nothing; one that could not run adds upstream's line."""
        try:
            proc = await asyncio.create_subprocess_exec(
                self.journalctl, *nlq.journalctl_args(request, services), stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        except OSError as exc:
            logger.debug(f"journalctl did not start: {exc}")
            if (request.options.boot or 0) == 0:
                await write(nlq.JOURNAL_NOT_AVAILABLE.encode())
            return
        assert proc.stdout is not None
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                data = await asyncio.wait_for(proc.stdout.read(READ_SIZE), remaining)
                if not data:
                    break
                await write(data)
            await asyncio.wait_for(proc.wait(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            await _kill(proc)  # exec.CommandContext kills it: an ExitError, nothing written
        finally:
            if proc.returncode is None:
                await _kill(proc)

    async def _service_file(self, service: str, write: WriteFn, deadline: float) -> None:
        """heuristicsCopyFileLogs: the first of the candidates that is a file, copied whole; a missing one (or a
        directory) tries the next, any other error ends the search."""
        error: str | None = None
        missing = True
        for name in nlq.log_file_candidates(service):
            missing = False
            real = _inside(self.log_dir, name)
            if real is None:
                error = f"openat {name}: path escapes from parent"
                break
            try:
                fd = await asyncio.to_thread(os.open, real, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                missing = True
                continue
            except OSError as exc:
                error = f"openat {name}: {_go_errno(exc.errno)}"
                break
            if stat.S_ISDIR(os.fstat(fd).st_mode):  # /var/log/<service>/ is not the log: os.ErrNotExist
                os.close(fd)
                missing = True
                continue
            with os.fdopen(fd, "rb") as f:
                error = await _copy(f, write, deadline)
            break
        if missing:
            await write(nlq.log_not_found(service).encode())
        elif error is not None:
            await write(nlq.log_error(service, error).encode())

    # ------------------------------------------------------------------------------------------- file server

    async def file_answer(self, url_path: str, query_string: str = "") -> FileAnswer:
        """http.FileServer(http.Dir(/var/log)) for the path after ``/logs/``: 404/403/500 in Go's words, a
        directory's redirect to its slash and its listing, a file's redirect without the slash, or the file."""
        upath = url_path if url_path.startswith("/") else "/" + url_path
        name = posixpath.normpath(upath) if upath != "/" else "/"
        if name.startswith("//"):
            name = "/" + name.lstrip("/")
        real = os.path.join(self.log_dir, name.lstrip("/"))
        if "\0" in real:  # http.Dir's open fails with EINVAL: toHTTPError's 500
            return FileAnswer(500, b"500 Internal Server Error\n")
        try:
            st = await asyncio.to_thread(os.stat, real)
        except OSError as exc:
            return _fs_error(exc)
        suffix = "?" + query_string if query_string else ""
        if stat.S_ISDIR(st.st_mode):
            if not upath.endswith("/"):
                return _redirect(posixpath.basename(upath) + "/" + suffix)
            try:
                names = await asyncio.to_thread(_listing, real)
            except OSError as exc:
                return _fs_error(exc)
            return FileAnswer(200, names.encode(), "text/html; charset=utf-8",
                              (("Last-Modified", formatdate(st.st_mtime, usegmt=True)),))
        if upath.endswith("/"):
            return _redirect("../" + posixpath.basename(upath.rstrip("/")) + suffix)
        try:
            head = await asyncio.to_thread(_head, real)
        except OSError as exc:
            return _fs_error(exc)
        return FileAnswer(200, b"", _content_type(real, head),
                          (("Last-Modified", formatdate(st.st_mtime, usegmt=True)), ("Accept-Ranges", "bytes")),
                          path=real)

    async def stream_file(self, path: str, write: WriteFn) -> None:
        f = await asyncio.to_thread(open, path, "rb")
        try:
            while data := await asyncio.to_thread(f.read, READ_SIZE):
                await write(data)
        finally:
            f.close()


def _fs_error(exc: OSError) -> FileAnswer:
    """toHTTPError: not found 404, permission 403, else 500 (the texts http.Error writes)."""
    if isinstance(exc, FileNotFoundError | NotADirectoryError):
        return FileAnswer(404, b"404 page not found\n")
    if isinstance(exc, PermissionError):
        return FileAnswer(403, b"403 Forbidden\n")
    return FileAnswer(500, b"500 Internal Server Error\n")


def _redirect(location: str) -> FileAnswer:
    """localRedirect: 301 with a relative Location, no body."""
    return FileAnswer(301, b"", None, (("Location", location),))


_HTML_ESCAPES = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ('"', "&#34;"), ("'", "&#39;"))


def _listing(directory: str) -> str:
    """dirList: the names sorted, directories with a slash, as Go's FileServer writes them."""
    from urllib.parse import quote
    lines = ['<!doctype html>\n<meta name="viewport" content="width=device-width">\n<pre>\n']
    with os.scandir(directory) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            name = entry.name + ("/" if entry.is_dir() else "")
            shown = name
            for char, escape in _HTML_ESCAPES:
                shown = shown.replace(char, escape)
            href = quote(name, safe="/!$&'()*+,;=:@-._~")
            if ":" in name.split("/")[0]:
                href = "./" + href  # url.URL{Path: name}.String() keeps a colon out of the scheme
            lines.append(f'<a href="{href}">{shown}</a>\n')
    lines.append("</pre>\n")
    return "".join(lines)


def _head(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read(512)


def _content_type(path: str, head: bytes) -> str:
    """serveContent's type: by extension, else sniffed (text when the first bytes are, as logs are)."""
    guessed, _ = mimetypes.guess_type(path)
    if guessed:
        return f"{guessed}; charset=utf-8" if guessed.startswith("text/") else guessed
    if not any(b < 0x20 and b not in (0x09, 0x0A, 0x0C, 0x0D, 0x1B) for b in head):
        return "text/plain; charset=utf-8"
    return "application/octet-stream"


async def _copy(f: object, write: WriteFn, deadline: float) -> str | None:
    """io.Copy through readerCtx: stops at the deadline with the context's error."""
    while True:
        if time.monotonic() >= deadline:
            return nlq.DEADLINE_EXCEEDED
        data = await asyncio.to_thread(f.read, READ_SIZE)  # type: ignore[attr-defined]
        if not data:
            return None
        await write(data)


async def _kill(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(proc.wait(), 5.0)
