"""Giving freed heap memory back to the host, as Go's background scavenger does for the upstream kubelet.

CPython hands objects larger than 512 bytes (watch event bodies, JSON, protobuf messages) to the C library's
malloc. glibc gives memory back on its own only from the top of each heap: after a burst of pods the pages freed
in the middle stay in the process's RSS for good, though nothing uses them (a 110-pod burst left ~10 MiB so). The
Go runtime returns such pages to the OS in the background (its scavenger, madvise(MADV_DONTNEED)); here
``malloc_trim(0)`` does the same for every arena, asked only when the heaps hold enough free memory to matter.
Without glibc (musl) there is nothing to ask, and nothing runs.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging

from kopflet.libc import libc
from kopflet.logs.verbosity import v

logger = logging.getLogger(__name__)

PERIOD = 10.0
# Free bytes in the malloc heaps worth a trim: below this the pages freed are too few to show in RSS.
MIN_FREE_BYTES = 4 * 2**20


class _MallInfo2(ctypes.Structure):
    """glibc's struct mallinfo2 (2.33+): the totals over every arena."""
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def worth_trimming(free_bytes: int, top_releasable: int, minimum: int = MIN_FREE_BYTES) -> bool:
    """Whether the free memory inside the heaps (not the releasable top, which glibc trims itself) is enough to
    ask for a trim."""
    return free_bytes - top_releasable >= minimum


class Scavenger:
    """One per process (hollow nodes share it): `start` is idempotent."""

    def __init__(self, period: float = PERIOD, min_free: int = MIN_FREE_BYTES) -> None:
        self.period, self.min_free = period, min_free
        self._task: asyncio.Task[None] | None = None
        self.trims = 0

    @staticmethod
    def available() -> bool:
        try:
            c = libc()
            return hasattr(c, "mallinfo2") and hasattr(c, "malloc_trim")
        except OSError:
            return False

    def start(self) -> None:
        if self._task is None and self.available():
            self._task = asyncio.create_task(self.run(), name="heap-scavenger")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.period)
            await self.scavenge()

    async def scavenge(self) -> bool:
        """One round: trim when the heaps hold enough free memory; whether it released any."""
        info = _mallinfo2()
        if not worth_trimming(info.fordblks, info.keepcost, self.min_free):
            return False
        # malloc_trim walks every arena (milliseconds on a large heap): off the event loop
        released = bool(await asyncio.to_thread(libc().malloc_trim, 0))
        self.trims += 1
        logger.log(v(5), f"heap scavenger: {info.fordblks / 2**20:.1f} MiB free in the heaps, trimmed "
                         f"({'some' if released else 'nothing'} released)")
        return released


def _mallinfo2() -> _MallInfo2:
    fn = libc().mallinfo2
    fn.restype = _MallInfo2
    fn.argtypes = []
    info: _MallInfo2 = fn()
    return info


SCAVENGER = Scavenger()

__all__ = ["MIN_FREE_BYTES", "PERIOD", "SCAVENGER", "Scavenger", "worth_trimming"]
