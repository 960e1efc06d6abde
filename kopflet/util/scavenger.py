"""Freed heap memory back to the host, as Go's background scavenger gives back the upstream kubelet's.

CPython hands objects larger than 512 bytes (watch event bodies, JSON, protobuf messages) to the C library's
malloc. glibc gives memory back on its own only from the top of a heap, and only above a trim threshold that grows
to as much as 64 MiB once large blocks have been freed: after a burst of pods the pages freed inside the heaps stay
in the process's RSS, though nothing uses them. The Go runtime returns such pages to the OS in the background
(madvise(MADV_DONTNEED)); here ``malloc_trim(0)`` does the same for every arena, asked when the free memory in the
heaps has grown by `MIN_FREE_BYTES` since the last trim (a trim leaves the pages it gave back counted as free, so
asking again without new frees would only walk the arenas for nothing). Without glibc 2.33 or later (musl:
no mallinfo2) nothing runs.
"""

from __future__ import annotations

import asyncio
import contextvars
import ctypes
import functools
import logging
from collections.abc import Callable
from typing import NamedTuple

from kopflet.libc import libc
from kopflet.logs.verbosity import v

logger = logging.getLogger(__name__)

PERIOD = 10.0
MIN_FREE_BYTES = 4 * 2**20
"""New free memory in the heaps worth a trim: below this the pages given back are too few to show in RSS."""


class _MallInfo2(ctypes.Structure):
    """glibc's struct mallinfo2 (2.33+): totals over every arena."""
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def decide(free: int, baseline: int, minimum: int = MIN_FREE_BYTES) -> tuple[bool, int]:
    """Whether to trim with `free` bytes free in the heaps, `baseline` free after the last trim; and the baseline
    from now on (it follows the free memory down as it is used again, and is the free memory a trim left)."""
    baseline = min(baseline, free)
    trim = free - baseline >= minimum
    return trim, free if trim else baseline


class _Malloc(NamedTuple):
    mallinfo2: Callable[[], _MallInfo2]
    malloc_trim: Callable[[int], int]


@functools.cache
def _malloc() -> _Malloc | None:
    """glibc's mallinfo2 and malloc_trim with their signatures, or None without them (not glibc, glibc before
    2.33)."""
    try:
        c = libc()
        mallinfo2, malloc_trim = c.mallinfo2, c.malloc_trim
    except (OSError, AttributeError):
        return None
    mallinfo2.restype, mallinfo2.argtypes = _MallInfo2, []
    malloc_trim.restype, malloc_trim.argtypes = ctypes.c_int, [ctypes.c_size_t]
    return _Malloc(mallinfo2, malloc_trim)


def mallinfo2() -> _MallInfo2:
    malloc = _malloc()
    assert malloc is not None
    return malloc.mallinfo2()


def _round(baseline: int, minimum: int) -> tuple[bool, int, int]:
    """One round, in a thread (mallinfo2 and malloc_trim both lock and walk every arena): whether it trimmed, the
    free bytes it saw and the next baseline."""
    malloc = _malloc()
    assert malloc is not None
    free = malloc.mallinfo2().fordblks
    trim, baseline = decide(free, baseline, minimum)
    if trim:
        malloc.malloc_trim(0)
        # the pages given back inside the heaps stay counted as free; a heap top released is not any more
        baseline = malloc.mallinfo2().fordblks
    return trim, free, baseline


class Scavenger:
    """One per process, held by each node that runs in it (hollow nodes share it): the first `acquire` starts it,
    the last `release` stops it."""

    def __init__(self, period: float = PERIOD, min_free: int = MIN_FREE_BYTES) -> None:
        self.period, self.min_free = period, min_free
        self.trims, self._baseline, self._holders = 0, 0, 0
        self._task: asyncio.Task[None] | None = None

    @staticmethod
    def available() -> bool:
        return _malloc() is not None

    def acquire(self) -> None:
        self._holders += 1
        if (self._task is None or self._task.done()) and self.available():
            # a context without a node: hollow nodes' task owners (handlers.hollow, by the NODE context variable)
            # leave it to every node; under `kopf run` the last node's stop releases it before Kopf's own end
            self._task = asyncio.create_task(self.run(), name="heap-scavenger", context=contextvars.Context())

    async def release(self) -> None:
        self._holders = max(0, self._holders - 1)
        if self._holders == 0:
            task, self._task = self._task, None
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.period)
            try:
                await self.scavenge()
            except Exception:  # a round that fails is said, and the next one tried
                logger.exception("heap scavenger: a round failed")

    async def scavenge(self) -> bool:
        """One round; whether it trimmed."""
        trimmed, free, self._baseline = await asyncio.to_thread(_round, self._baseline, self.min_free)
        if trimmed:
            self.trims += 1
            logger.log(v(5), f"heap scavenger: {free / 2**20:.1f} MiB free in the heaps, trimmed")
        return trimmed


SCAVENGER = Scavenger()


__all__ = ["MIN_FREE_BYTES", "PERIOD", "SCAVENGER", "Scavenger", "decide", "mallinfo2"]
