"""The heap scavenger: when a trim is asked, that a round over this process's real heaps gives memory back and is not
asked again for nothing, and its task held by nodes."""

from __future__ import annotations

import asyncio
import os

import pytest

from kopflet.util import scavenger
from kopflet.util.scavenger import MIN_FREE_BYTES, Scavenger, decide

MIB = 2**20


@pytest.mark.parametrize(("free", "baseline", "trim", "after"), [
    (0, 0, False, 0),
    (MIN_FREE_BYTES - 1, 0, False, 0),
    (MIN_FREE_BYTES, 0, True, MIN_FREE_BYTES),
    (64 * MIB, 0, True, 64 * MIB),
    # what the last trim left free is not new: nothing to ask
    (64 * MIB, 64 * MIB, False, 64 * MIB),
    (64 * MIB + MIN_FREE_BYTES - 1, 64 * MIB, False, 64 * MIB),
    (64 * MIB + MIN_FREE_BYTES, 64 * MIB, True, 64 * MIB + MIN_FREE_BYTES),
    # the free memory used again: the baseline follows it down, and new holes count from there
    (2 * MIB, 64 * MIB, False, 2 * MIB),
    (2 * MIB + MIN_FREE_BYTES, 2 * MIB, True, 2 * MIB + MIN_FREE_BYTES),
])
def test_decide(free: int, baseline: int, trim: bool, after: int) -> None:
    assert decide(free, baseline) == (trim, after)


needs_glibc = pytest.mark.skipif(not Scavenger.available(), reason="not glibc 2.33+: no mallinfo2")


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@needs_glibc
def test_mallinfo2_is_read_as_glibc_lays_it_out() -> None:
    info = scavenger.mallinfo2()
    assert info.arena > 0
    assert info.arena == info.uordblks + info.fordblks  # glibc's own identity over the heaps it counts


@needs_glibc
def test_a_round_gives_back_the_holes_a_burst_leaves_and_the_next_asks_nothing() -> None:
    # 40 MiB in 60 KB blocks (malloc's heap, below its mmap threshold), every other one freed: 20 MiB of holes
    # inside the heap, which glibc never gives back on its own
    blocks = [bytearray(60_000) for _ in range(700)]
    kept = blocks[1::2]
    del blocks
    s = Scavenger()
    before = _rss()
    assert asyncio.run(s.scavenge()) is True
    assert before - _rss() >= 8 * MIB
    assert s.trims == 1
    assert asyncio.run(s.scavenge()) is False  # nothing freed since: nothing asked
    assert s.trims == 1
    assert len(kept) == 350


@needs_glibc
def test_nothing_asked_below_the_minimum() -> None:
    s = Scavenger(min_free=1 << 60)
    assert asyncio.run(s.scavenge()) is False
    assert s.trims == 0


@needs_glibc
def test_held_by_nodes_the_first_starts_it_the_last_stops_it() -> None:
    async def main() -> None:
        s = Scavenger(period=3600)
        s.acquire()
        task = s._task
        assert task is not None and not task.done()
        s.acquire()
        assert s._task is task
        await s.release()
        assert not task.done()  # one node still holds it
        await s.release()
        assert task.cancelled() and s._task is None
        await s.release()  # more releases than holders change nothing
        s.acquire()
        assert s._task is not None and s._task is not task
        await s.release()

    asyncio.run(main())
