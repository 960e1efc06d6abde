"""Reading a container's CRI log file for ``/containerLogs``: tail, read, follow, rotation (upstream
`k8s.io/cri-client/pkg/logs/logs.go` ReadLogs).

The rules (since, stream, timestamps, limitBytes, what a CRI line is) are `kopflet.logs.cri_logs`; this module only
moves bytes: every read is a positional read (`os.pread`) in `asyncio.to_thread`, so the event loop never
blocks on the disk, and a cancelled request (the client went away) leaves nothing half-read behind.

Following polls instead of using inotify (upstream uses fsnotify plus a 1s forced re-check, so polling
every `poll_interval` is no slower): at end of file it looks for rotation and, about once a second, asks
whether the container still runs; once it does not, the rest of the file is drained and the call returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import os
import time
from collections.abc import Awaitable, Callable

from kopflet.logs.cri_logs import LogFormatter, LogOptions, scan_tail_block

logger = logging.getLogger(__name__)

READ_SIZE = 64 * 1024
"""Bytes per read, forwards and (tail) backwards. Upstream reads tail blocks of 1 KiB; bigger is fewer calls."""
RUNNING_CHECK_INTERVAL = 1.0
"""Seconds between container-state checks while following (upstream re-checks at least every second)."""


def _find_tail_start(fd: int, size: int, n: int) -> int:
    """Offset where the last `n` lines of the open file start, reading backwards block by block (blocking)."""
    needed = n + 1
    right = size
    while right > 0:
        left = max(0, right - READ_SIZE)
        block = os.pread(fd, right - left, left)
        found, needed = scan_tail_block(block, needed)
        if found is not None:
            return left + found
        right = left
    return 0


def _open(path: str) -> tuple[int, os.stat_result]:
    """Open the file read-only and stat it; FileNotFoundError when it is not there.

    Called on the loop, not in a thread: opening a local file is a metadata operation that does not wait on
    the disk's data, and a cancellation between a threaded open and its assignment would leak the fd.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return fd, os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise


def _replaced(path: str, current: os.stat_result) -> bool:
    """The file at `path` is no longer the open one: renamed away (rotation), maybe already recreated."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return True
    return (st.st_dev, st.st_ino) != (current.st_dev, current.st_ino)


def read_last(path: str, lines: int, max_bytes: int) -> bytes:
    """The content of the last `lines` entries of a CRI log file, at most its last `max_bytes` (blocking: call it
    in a thread); OSError when the file cannot be read.

    Upstream readLastStringFromContainerLogs, the FallbackToLogsOnError termination message: ReadLogs with
    tailLines into a circular buffer, so the message is what `kubectl logs --tail` shows, cut from the front.
    """
    fd, st = _open(path)
    try:
        offset = _find_tail_start(fd, st.st_size, lines)
        formatter = LogFormatter(max_entries=lines)
        kept = bytearray()
        while not formatter.done:
            chunk = os.pread(fd, READ_SIZE, offset)
            if not chunk:
                break
            offset += len(chunk)
            kept += formatter.feed(chunk)
            del kept[:-max_bytes]
        kept += formatter.flush()
        return bytes(kept[-max_bytes:])
    finally:
        os.close(fd)


async def write_container_logs(
    path: str,
    opts: LogOptions,
    write: Callable[[bytes], Awaitable[None]],
    *,
    is_running: Callable[[], Awaitable[bool]],
    now: dt.datetime | None = None,
    poll_interval: float = 0.2,
    check_interval: float = RUNNING_CHECK_INTERVAL,
) -> None:
    """Send the container's log at `path` through `write`, formatted by `opts` (upstream ReadLogs).

    Without ``follow``: from the tail offset (or the start) to the end of the file. With ``follow``: keeps
    reading what the runtime appends, switches to the new file when the log is rotated (the old one is
    finished first), and returns once `is_running` says the container stopped and the file is drained.
    Returns early when limitBytes is reached. Raises FileNotFoundError when the log file does not exist:
    upstream fails the request then even with follow (it only waits for a file that rotation removed).
    """
    now = now if now is not None else dt.datetime.now(dt.UTC)
    formatter = LogFormatter.from_options(opts, now=now)
    path = await asyncio.to_thread(os.path.realpath, path)  # upstream EvalSymlinks before opening
    fd, st = _open(path)
    try:
        offset = 0
        if opts.tail_lines is not None:
            offset = await asyncio.to_thread(_find_tail_start, fd, st.st_size, opts.tail_lines)

        async def drain() -> None:
            """Read the open file to its current end, writing what the formatter makes of it."""
            nonlocal offset
            while not formatter.done:
                chunk = await asyncio.to_thread(os.pread, fd, READ_SIZE, offset)
                if not chunk:
                    return
                offset += len(chunk)
                out = formatter.feed(chunk)
                if out:
                    await write(out)

        async def finish() -> None:
            out = formatter.flush()
            if out:
                await write(out)
            if formatter.skipped:
                logger.warning("Skipped %d malformed line(s) in log file %s", formatter.skipped, path)

        await drain()
        if not opts.follow:
            await finish()
            return

        last_check = -float("inf")
        while not formatter.done:
            # At the end of the open file. Rotation: the runtime now writes to a new file at `path`.
            if await asyncio.to_thread(_replaced, path, st):
                try:
                    new_fd, new_st = _open(path)
                except FileNotFoundError:
                    pass  # renamed, not recreated yet: keep watching the old one (upstream: retry later)
                else:
                    try:
                        await drain()  # whatever reached the old file before the runtime switched
                        out = formatter.flush()
                        if out:
                            await write(out)
                    except BaseException:
                        os.close(new_fd)
                        raise
                    os.close(fd)
                    fd, st, offset = new_fd, new_st, 0
                    await drain()
                    continue
            else:
                size = (await asyncio.to_thread(os.fstat, fd)).st_size
                if size < offset:  # truncated in place (copytruncate): start over, as `tail -F` does
                    offset = 0
            if time.monotonic() - last_check >= check_interval:
                last_check = time.monotonic()
                if not await is_running():
                    # Upstream: once the container is not running, read until the next EOF, then stop.
                    await drain()
                    break
            await asyncio.sleep(poll_interval)
            await drain()
        await finish()
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
