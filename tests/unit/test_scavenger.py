"""The heap scavenger: when a trim is worth asking, and that a round over this process's real heaps trims them."""

from __future__ import annotations

import asyncio

import pytest

from kopflet.util import scavenger
from kopflet.util.scavenger import MIN_FREE_BYTES, Scavenger, worth_trimming

MIB = 2**20


@pytest.mark.parametrize(("free", "top", "worth"), [
    (0, 0, False),
    (MIN_FREE_BYTES - 1, 0, False),
    (MIN_FREE_BYTES, 0, True),
    (64 * MIB, 0, True),
    # all of it at the top: glibc gives that back itself
    (64 * MIB, 64 * MIB, False),
    (MIN_FREE_BYTES + MIB, 2 * MIB, False),
    (MIN_FREE_BYTES + 2 * MIB, 2 * MIB, True),
])
def test_worth_trimming(free: int, top: int, worth: bool) -> None:
    assert worth_trimming(free, top) is worth


needs_glibc = pytest.mark.skipif(not Scavenger.available(), reason="not glibc: no mallinfo2/malloc_trim")


@needs_glibc
def test_a_round_trims_the_holes_a_burst_leaves() -> None:
    # 20 MiB in 60 KB blocks (malloc's heap, below its mmap threshold), every other one freed: holes mid-heap,
    # which glibc never gives back on its own
    blocks = [bytearray(60_000) for _ in range(340)]
    kept = blocks[1::2]
    del blocks
    free_before = scavenger._mallinfo2().fordblks
    s = Scavenger()
    released = asyncio.run(s.scavenge())
    assert len(kept) == 170
    assert free_before >= MIN_FREE_BYTES
    assert s.trims == 1
    assert released


@needs_glibc
def test_nothing_asked_when_the_heaps_hold_little_free_memory() -> None:
    s = Scavenger(min_free=1 << 60)
    assert asyncio.run(s.scavenge()) is False
    assert s.trims == 0


@needs_glibc
def test_started_once_per_process() -> None:
    async def main() -> None:
        s = Scavenger(period=3600)
        s.start()
        task = s._task
        s.start()
        assert s._task is task and task is not None
        await s.stop()
        assert task.cancelled() and s._task is None

    asyncio.run(main())
