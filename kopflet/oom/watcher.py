"""Reads /dev/kmsg in a thread and records a ``SystemOOM`` Warning on the Node for each system OOM kill.

As upstream (its oomparser does not seek to the end), the kernel log is read from its start, so a system OOM
still in the ring buffer is reported again when the agent starts. Without /dev/kmsg (an unprivileged container)
the watcher logs once and stops: upstream fails to start its OOM watcher the same way and runs on.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import select
import threading
from collections.abc import Callable

from kopflet.oom import parser

logger = logging.getLogger(__name__)

KMSG = "/dev/kmsg"
BATCH = 1000
"""The most records handed to the event loop at once."""
POLL = 1.0  # seconds the reading thread waits for a record before it checks whether to stop


class OomWatcher:
    def __init__(self, record: Callable[[str, str], None], path: str = KMSG) -> None:
        """`record(reason, message)` posts a Warning event about the Node."""
        self.record, self.path = record, path

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[list[parser.KmsgRecord] | None] = asyncio.Queue()
        stop = threading.Event()
        reader = threading.Thread(target=self._read, args=(loop, queue, stop), name="kmsg-reader", daemon=True)
        reader.start()
        stream = parser.OomStream()
        try:
            while (batch := await queue.get()) is not None:
                for record in batch:
                    oom = stream.feed(record)
                    if oom is None:
                        continue
                    message = parser.system_oom_message(oom)
                    if message is not None:
                        logger.warning(message)
                        self.record(parser.SYSTEM_OOM, message)
        finally:
            stop.set()

    def _read(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[list[parser.KmsgRecord] | None],
              stop: threading.Event) -> None:
        """Blocking: each read() of /dev/kmsg returns one record; EPIPE means records were overwritten before we
        read them (the next read goes on with the oldest left). The records are handed over in batches, whatever
        is there to read at once (the whole ring buffer at start): one wake-up of the event loop per batch, not per
        record. Thousands of call_soon_threadsafe in a burst fill the loop's self-pipe, which is also the signal
        wake-up fd: a SIGTERM arriving then was lost ("Exception ignored when trying to write to the signal wakeup
        fd"), and the agent ignored it."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            logger.warning(f"cannot read {self.path}, system OOMs will not be reported: {exc}")
            _hand_over(loop, queue, None)
            return
        batch: list[parser.KmsgRecord] = []
        # poll(), not select(): select() refuses a descriptor above FD_SETSIZE (1024), which a busy agent, or a
        # process of many hollow nodes, opens /dev/kmsg as ("filedescriptor out of range in select()")
        readable = select.poll()
        readable.register(fd, select.POLLIN)
        try:
            while not stop.is_set():
                try:
                    data = os.read(fd, 8192)
                except BlockingIOError:
                    if batch:
                        if not _hand_over(loop, queue, batch):
                            break
                        batch = []
                    readable.poll(POLL * 1000)
                    continue
                except OSError as exc:
                    if exc.errno == errno.EPIPE:
                        continue
                    logger.warning(f"reading {self.path} failed, system OOMs will not be reported: {exc}")
                    break
                record = parser.parse_record(data.decode("utf-8", errors="replace"))
                if record is not None:
                    batch.append(record)
                    if len(batch) >= BATCH:
                        if not _hand_over(loop, queue, batch):
                            break
                        batch = []
        finally:
            os.close(fd)
            if not stop.is_set():
                if batch:
                    _hand_over(loop, queue, batch)
                _hand_over(loop, queue, None)


def _hand_over(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[list[parser.KmsgRecord] | None],
               item: list[parser.KmsgRecord] | None) -> bool:
    """To the event loop; False once it is closed (the agent stopped while this thread was reading)."""
    try:
        loop.call_soon_threadsafe(queue.put_nowait, item)
    except RuntimeError:
        return False
    return True
