"""A set of NUMA node ids as upstream's `bitmask.BitMask` (pkg/kubelet/cm/topologymanager/bitmask): 64 bits,
ordered by count then by value (`IsNarrowerThan`), printed as upstream's `String` (binary, zero-padded to pairs of
bits). Immutable; the operations return new masks. Pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence


class BitMaskError(ValueError):
    """Upstream's "bit number must be in range 0-63"."""


@dataclasses.dataclass(frozen=True, order=False)
class BitMask:
    """Upstream `bitMask` (a uint64)."""

    value: int = 0

    @classmethod
    def of(cls, *bits: int) -> BitMask:
        """Upstream `NewBitMask`: raises `BitMaskError` for a bit outside 0-63."""
        value = 0
        for bit in bits:
            if not 0 <= bit < 64:
                raise BitMaskError("bit number must be in range 0-63")
            value |= 1 << bit
        return cls(value)

    def bits(self) -> list[int]:
        """Upstream `GetBits`: the set bits, ascending."""
        return [i for i in range(64) if self.value >> i & 1]

    def count(self) -> int:
        return bin(self.value).count("1")

    def is_set(self, bit: int) -> bool:
        return 0 <= bit < 64 and bool(self.value >> bit & 1)

    def is_empty(self) -> bool:
        return self.value == 0

    def is_less_than(self, other: BitMask) -> bool:
        return self.value < other.value

    def is_narrower_than(self, other: BitMask) -> bool:
        """Upstream `IsNarrowerThan`: fewer bits, or as many and a lower value."""
        if self.count() == other.count():
            return self.is_less_than(other)
        return self.count() < other.count()

    def and_(self, *others: BitMask) -> BitMask:
        value = self.value
        for other in others:
            value &= other.value
        return BitMask(value)

    def or_(self, *others: BitMask) -> BitMask:
        value = self.value
        for other in others:
            value |= other.value
        return BitMask(value)

    def __str__(self) -> str:
        """Upstream `String`: binary, zero-padded to the smallest even width that holds it ("01", "0110")."""
        grouping = 2
        for shift in range(64 - grouping, 0, -grouping):
            if self.value > 1 << shift:
                return format(self.value, f"0{shift + grouping}b")
        return format(self.value, f"0{grouping}b")

    def __repr__(self) -> str:
        return f"BitMask({self.bits()})"


def iterate_bitmasks(bits: Sequence[int], callback: Callable[[BitMask], None]) -> None:
    """Upstream `IterateBitMasks`: every non-empty combination of `bits`, by size, then in order."""
    def iterate(rest: Sequence[int], accum: list[int], size: int) -> None:
        if len(accum) == size:
            callback(BitMask.of(*accum))
            return
        for i, bit in enumerate(rest):
            iterate(rest[i + 1:], [*accum, bit], size)

    for size in range(1, len(bits) + 1):
        iterate(bits, [], size)


def all_bitmasks(bits: Iterable[int]) -> list[BitMask]:
    """`iterate_bitmasks` as a list."""
    out: list[BitMask] = []
    iterate_bitmasks(list(bits), out.append)
    return out
