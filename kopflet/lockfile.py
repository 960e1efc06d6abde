"""``--lock-file`` and ``--exit-on-lock-contention``: one agent per node, as the upstream kubelet guarantees.

Upstream (cmd/kubelet/app/server.go ``run``) takes ``flock.Acquire(LockFilePath)`` before it builds any client:
the file is opened ``O_CREAT|O_RDWR|O_CLOEXEC`` (mode 0600) and locked ``LOCK_EX``, blocking while another
process holds it, and the descriptor is kept open until the process exits. With ``ExitOnLockContention`` it then
``watchForLockfileContention`` (server_linux.go): an inotify watch for ``IN_OPEN|IN_DELETE_SELF`` on the file, and
the kubelet returns from ``Run`` (exits cleanly) at the first event: a new kubelet opening the file to lock it.

Here the blocking ``flock`` runs in a daemon thread (the event loop keeps running, and a stop while waiting is not
held up by it), and the inotify descriptor is read by the event loop (``add_reader``) through libc's syscalls.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import fcntl
import logging
import os
import struct
import threading
from collections.abc import Callable

from kopflet import gotext
from kopflet.libc import libc as load_libc

logger = logging.getLogger(__name__)

# inotify(7) constants (linux/inotify.h).
IN_OPEN = 0x00000020
IN_DELETE_SELF = 0x00000400
IN_IGNORED = 0x00008000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
_EVENT_HEADER = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then len bytes of name)
_EVENT_NAMES = {IN_OPEN: "IN_OPEN", IN_DELETE_SELF: "IN_DELETE_SELF", IN_IGNORED: "IN_IGNORED"}


class LockFileError(OSError):
    """The lock file cannot be opened or locked (upstream: ``unable to acquire file lock on "<path>": ...``)."""

    @classmethod
    def of(cls, path: str, exc: OSError) -> LockFileError:
        """Upstream's message (server.go run): the path Go-quoted, then the error as Go spells errno (lowercase)."""
        reason = exc.strerror or str(exc)
        error = cls(f"unable to acquire file lock on {gotext.go_quote(path)}: {reason[:1].lower()}{reason[1:]}")
        error.errno = exc.errno
        return error


def _open(path: str) -> int:
    """The lock file's descriptor, created if missing (upstream flock.Acquire's open flags and mode)."""
    try:
        return os.open(path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise LockFileError.of(path, exc) from exc


def holders(path: str, proc_locks: str | None = None) -> list[int]:
    """The pids holding a flock on `path`, from /proc/locks (empty when unreadable or none is visible).

    Only to say who the agent waits for: the kernel's answer is the lock itself. A holder in another pid
    namespace may be missing or shown as 0."""
    try:
        st = os.stat(path)
        if proc_locks is None:
            with open("/proc/locks", encoding="ascii", errors="replace") as f:
                proc_locks = f.read()
    except OSError:
        return []
    # "1: FLOCK  ADVISORY  WRITE 4242 00:2f:1234 0 EOF": major:minor in hex, inode in decimal. Blocked waiters
    # are listed as "1: -> FLOCK ..." and are not holders.
    wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids = []
    for line in proc_locks.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == wanted and fields[4].isdigit():
            pids.append(int(fields[4]))
    return pids


def describe_holders(path: str) -> str:
    """"held by process 4242 (kopflet --lock-file=...)" when /proc says who, else ""."""
    parts = []
    for pid in holders(path):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmdline = ""
        parts.append(f"process {pid}" + (f" ({cmdline})" if cmdline else ""))
    return f"held by {', '.join(parts)}" if parts else ""


class LockFile:
    """An exclusive flock on one file, held until the process exits (upstream never releases it either)."""

    def __init__(self, path: str, fd: int) -> None:
        self.path, self.fd = path, fd

    @classmethod
    async def acquire(cls, path: str) -> LockFile:
        """Lock `path`, waiting as long as another process holds it (upstream flock.Acquire blocks: LOCK_EX
        without LOCK_NB). The wait is logged with the holder when /proc/locks shows it. LockFileError when the
        file cannot be opened or locked; cancelling the wait leaves nothing locked."""
        logger.info(f"Acquiring file lock: path={path!r}")
        fd = _open(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return cls(path, fd)
        except BlockingIOError:
            pass
        except OSError as exc:
            os.close(fd)
            raise LockFileError.of(path, exc) from exc
        holder = describe_holders(path)
        logger.warning(f"the lock file {path} is locked by another process{': ' + holder if holder else ''}; "
                       f"waiting for it (--lock-file: one agent per node)")
        await _flock_in_thread(path, fd)
        logger.info(f"acquired the lock file {path}")
        return cls(path, fd)

    def release(self) -> None:
        """Close the descriptor, which drops the lock (for tests: the agent holds it until it exits)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


async def _flock_in_thread(path: str, fd: int) -> None:
    """A blocking LOCK_EX in a daemon thread: the loop keeps running, and a stop while waiting does not wait
    for the thread (a plain executor thread would hold up the interpreter's exit until the lock came)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def settle(error: OSError | None) -> None:
        if done.cancelled():
            os.close(fd)  # nobody wants the lock any more: drop it at once
        elif error is not None:
            os.close(fd)
            done.set_exception(LockFileError.of(path, error))
        else:
            done.set_result(None)

    def wait() -> None:
        error: OSError | None = None
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                break
            except InterruptedError:
                continue
            except OSError as exc:
                error = exc
                break
        try:
            loop.call_soon_threadsafe(settle, error)
        except RuntimeError:  # the loop is closed: the process is stopping
            os.close(fd)

    threading.Thread(target=wait, name=f"flock {path}", daemon=True).start()
    await done


# ---------------------------------------------------------------------------------------------------- inotify

def describe_events(data: bytes) -> list[str]:
    """inotify_event records as text: ``IN_OPEN``, ``IN_DELETE_SELF|IN_IGNORED`` ..."""
    events, offset = [], 0
    while offset + _EVENT_HEADER.size <= len(data):
        _, mask, _, name_len = _EVENT_HEADER.unpack_from(data, offset)
        offset += _EVENT_HEADER.size + name_len
        names = [name for bit, name in _EVENT_NAMES.items() if mask & bit]
        events.append("|".join(names) or hex(mask))
    return events


class ContentionWatch:
    """upstream watchForLockfileContention: the first IN_OPEN or IN_DELETE_SELF of the lock file calls
    `on_contention` once (upstream closes its done channel and Run returns), then the watch is closed."""

    def __init__(self, path: str, on_contention: Callable[[], None]) -> None:
        self.path, self.on_contention = path, on_contention
        self._fd = -1
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        """Watch the file from now on (OSError when inotify is unavailable or the file is gone). Only opens by
        others count: the agent has its descriptor already and does not open the file again."""
        libc = load_libc()
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"unable to create watcher for lockfile: {os.strerror(err)}")
        if libc.inotify_add_watch(fd, os.fsencode(self.path), IN_OPEN | IN_DELETE_SELF) < 0:
            err = ctypes.get_errno()
            os.close(fd)
            raise OSError(err, f"unable to watch lockfile {self.path}: {os.strerror(err)}")
        self._fd, self._loop = fd, asyncio.get_running_loop()
        self._loop.add_reader(fd, self._readable)
        logger.info(f"Watching for inotify events: path={self.path!r}")

    def _readable(self) -> None:
        try:
            data = os.read(self._fd, 4096)
        except BlockingIOError:
            return
        except OSError as exc:
            logger.error(f"inotify watcher error: {exc}")
            data = b""
        events = describe_events(data)
        logger.info(f"Inotify event: {self.path}: {', '.join(events) or 'none'}")
        self.close()
        self.on_contention()

    @property
    def active(self) -> bool:
        return self._fd >= 0

    def close(self) -> None:
        if self._fd < 0:
            return
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._fd)
        try:
            os.close(self._fd)
        except OSError as exc:  # pragma: no cover - closing an inotify fd does not fail
            if exc.errno != errno.EBADF:
                raise
        self._fd = -1
