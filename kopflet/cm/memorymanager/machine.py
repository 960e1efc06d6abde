"""The machine's NUMA nodes as the memory and topology managers see them (cadvisor's `MachineInfo.Topology`:
each node's memory, hugepages and distances), kept pure: `from_sysfs` takes the files' text, the caller reads.

cadvisor reads ``/sys/devices/system/node/node<N>/meminfo`` (``Node <N> MemTotal: <kB> kB``), the node's
``hugepages/hugepages-<size>kB/nr_hugepages`` and its ``distance`` line. A machine without NUMA directories is
one node 0 holding the whole memory (`single_node`), as cadvisor then reports it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping

from kopflet.eviction.thresholds import BINARY_SI, format_quantity

NODE_DIR = "/sys/devices/system/node"
_MEMINFO = re.compile(r"^/sys/devices/system/node/node(\d+)/meminfo$")
_HUGEPAGES = re.compile(r"^/sys/devices/system/node/node(\d+)/hugepages/hugepages-(\d+)kB/nr_hugepages$")
_DISTANCE = re.compile(r"^/sys/devices/system/node/node(\d+)/distance$")
_MEMTOTAL = re.compile(r"^Node\s+\d+\s+MemTotal:\s+(\d+)\s*kB", re.MULTILINE)


class MachineError(ValueError):
    """The NUMA nodes cannot be read."""


@dataclasses.dataclass(frozen=True)
class NUMANode:
    """One NUMA node (cadvisor `Node`): its id, memory in bytes, hugepages as (page size in KiB, pages), and its
    distance to each node in id order (empty when unknown)."""

    id: int
    memory: int
    hugepages: tuple[tuple[int, int], ...] = ()
    distances: tuple[int, ...] = ()


def hugepage_resource_name(page_size_kib: int) -> str:
    """Upstream `HugePageResourceName`: ``hugepages-`` and the page size as a BinarySI quantity (``2Mi``)."""
    return "hugepages-" + format_quantity(page_size_kib * 1024, BINARY_SI)


def sysfs_paths(nodes: Iterable[int], page_sizes: Mapping[int, Iterable[int]]) -> list[str]:
    """The files `from_sysfs` reads for the given nodes and each node's hugepage sizes (KiB)."""
    paths = []
    for node in nodes:
        paths += [f"{NODE_DIR}/node{node}/meminfo", f"{NODE_DIR}/node{node}/distance"]
        paths += [f"{NODE_DIR}/node{node}/hugepages/hugepages-{size}kB/nr_hugepages"
                  for size in page_sizes.get(node, ())]
    return paths


def from_sysfs(files: Mapping[str, str]) -> tuple[NUMANode, ...]:
    """The NUMA nodes from file texts keyed by absolute path; each node needs its ``meminfo``."""
    memory: dict[int, int] = {}
    hugepages: dict[int, list[tuple[int, int]]] = {}
    distances: dict[int, tuple[int, ...]] = {}
    for path, text in files.items():
        if match := _MEMINFO.match(path):
            found = _MEMTOTAL.search(text)
            if found is None:
                raise MachineError(f"{path}: no MemTotal")
            memory[int(match.group(1))] = int(found.group(1)) * 1024
        elif match := _HUGEPAGES.match(path):
            try:
                pages = int(text.strip())
            except ValueError:
                raise MachineError(f"{path}: not a number: {text.strip()!r}") from None
            hugepages.setdefault(int(match.group(1)), []).append((int(match.group(2)), pages))
        elif match := _DISTANCE.match(path):
            try:
                distances[int(match.group(1))] = tuple(int(d) for d in text.split())
            except ValueError:
                raise MachineError(f"{path}: not numbers: {text.strip()!r}") from None
    return tuple(NUMANode(node, memory[node], tuple(sorted(hugepages.get(node, ()))), distances.get(node, ()))
                 for node in sorted(memory))


def single_node(memory_bytes: int, hugepages: Iterable[tuple[int, int]] = ()) -> tuple[NUMANode, ...]:
    """A machine without NUMA: node 0 with all the memory."""
    return (NUMANode(0, memory_bytes, tuple(sorted(hugepages)), (10,)),)


def distances(nodes: Iterable[NUMANode]) -> dict[int, tuple[int, ...]] | None:
    """The nodes' distances as the topology manager takes them (node -> distance to each node id), None when a
    node has none (``prefer-closest-numa-nodes`` then cannot work)."""
    nodes = list(nodes)
    ids = [n.id for n in nodes]
    out: dict[int, tuple[int, ...]] = {}
    for node in nodes:
        if len(node.distances) < len(ids):
            return None
        # cadvisor indexes distances by node id: the distance line lists every node in id order
        out[node.id] = node.distances
    return out if ids else None
