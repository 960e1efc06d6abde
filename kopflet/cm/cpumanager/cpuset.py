"""An immutable set of logical CPU ids, as `k8s.io/utils/cpuset.CPUSet`.

The text forms are upstream's: `parse` accepts what `cpuset.Parse` accepts ("0-3,7", the empty string) with the
same error texts, and `str()` is `CPUSet.String` (sorted, consecutive ids folded into ranges), so sets written to
cgroup ``cpuset.cpus`` and to the checkpoint read the same as a kubelet's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from kopflet.gotext import go_quote

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


class CPUSetError(ValueError):
    """A cpuset text upstream's `cpuset.Parse` refuses."""


def _atoi(text: str) -> int:
    """Go `strconv.Atoi` on a 64-bit platform: optional sign, ASCII digits only, int64 range."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not all("0" <= ch <= "9" for ch in digits):
        raise CPUSetError(f"strconv.Atoi: parsing {go_quote(text)}: invalid syntax")
    value = int(text)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise CPUSetError(f"strconv.Atoi: parsing {go_quote(text)}: value out of range")
    return value


class CPUSet:
    """Immutable CPU set; set operations return new sets (upstream's `New`, `Union`, `Difference`, ...)."""

    __slots__ = ("_cpus",)

    def __init__(self, cpus: Iterable[int] = ()) -> None:
        self._cpus: frozenset[int] = frozenset(cpus)

    # -- upstream's accessors
    def size(self) -> int:
        return len(self._cpus)

    def is_empty(self) -> bool:
        return not self._cpus

    def contains(self, cpu: int) -> bool:
        return cpu in self._cpus

    def is_subset_of(self, other: CPUSet) -> bool:
        return self._cpus <= other._cpus

    def union(self, *others: CPUSet) -> CPUSet:
        return CPUSet(self._cpus.union(*(o._cpus for o in others)))

    def intersection(self, other: CPUSet) -> CPUSet:
        return CPUSet(self._cpus & other._cpus)

    def difference(self, other: CPUSet) -> CPUSet:
        return CPUSet(self._cpus - other._cpus)

    def sorted(self) -> list[int]:
        """Upstream `List`: the ids in ascending order."""
        return sorted(self._cpus)

    # -- Python protocol
    def __len__(self) -> int:
        return len(self._cpus)

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self._cpus))

    def __contains__(self, cpu: object) -> bool:
        return cpu in self._cpus

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CPUSet) and self._cpus == other._cpus

    def __hash__(self) -> int:
        return hash(self._cpus)

    def __or__(self, other: CPUSet) -> CPUSet:
        return self.union(other)

    def __and__(self, other: CPUSet) -> CPUSet:
        return self.intersection(other)

    def __sub__(self, other: CPUSet) -> CPUSet:
        return self.difference(other)

    def __bool__(self) -> bool:
        return bool(self._cpus)

    def __str__(self) -> str:
        """Upstream `CPUSet.String`: "0-2,5,7-8"; the empty set is ""."""
        ranges: list[list[int]] = []
        for cpu in sorted(self._cpus):
            if ranges and cpu == ranges[-1][1] + 1:
                ranges[-1][1] = cpu
            else:
                ranges.append([cpu, cpu])
        return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)

    def __repr__(self) -> str:
        return f"CPUSet({str(self)!r})"


EMPTY = CPUSet()


def parse(text: str) -> CPUSet:
    """Upstream `cpuset.Parse`: comma-separated ids and inclusive "a-b" ranges; errors as Go prints them."""
    if text == "":
        return EMPTY
    cpus: set[int] = set()
    for part in text.split(","):
        bounds = part.split("-", 1)
        if len(bounds) == 1:
            cpus.add(_atoi(bounds[0]))
            continue
        start, end = _atoi(bounds[0]), _atoi(bounds[1])
        if start > end:
            raise CPUSetError(f"invalid range {go_quote(part)} ({start} > {end})")
        cpus.update(range(start, end + 1))
    return CPUSet(cpus)
