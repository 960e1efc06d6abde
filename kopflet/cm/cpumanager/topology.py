"""The node's CPU topology as the CPU manager sees it (pkg/kubelet/cm/cpumanager/topology/topology.go).

`CPUDetails` maps each logical CPU to its NUMA node, socket, core and uncore cache; `CPUTopology` adds the
counts the allocator divides by. `from_sysfs` is upstream's `Discover` fed by what cadvisor reads from sysfs,
kept pure: it takes the files' text (path -> content), the caller does the reading.

A core's id is the lowest CPU id among its threads (upstream `getUniqueCoreID`): sysfs ``core_id`` values repeat
across sockets, the allocator needs ids unique on the machine. Uncore caches are not read: every CPU's uncore
cache is its socket, which is upstream's fallback when cadvisor reports none (only the
``prefer-align-cpus-by-uncorecache`` option, not supported here, looks at them).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator, Mapping

from kopflet.cm.cpumanager import cpuset
from kopflet.cm.cpumanager.cpuset import CPUSet

CPU_DIR = "/sys/devices/system/cpu"
NODE_DIR = "/sys/devices/system/node"
_CPU_FILE = re.compile(r"^/sys/devices/system/cpu/cpu(\d+)/(topology/physical_package_id|topology/core_id|online)$")
_NODE_CPULIST = re.compile(r"^/sys/devices/system/node/node(\d+)/cpulist$")


class TopologyError(ValueError):
    """The topology cannot be built, or a CPU is not in it."""


@dataclasses.dataclass(frozen=True)
class CPUInfo:
    """Upstream `CPUInfo`: where one logical CPU sits."""

    numa_node_id: int
    socket_id: int
    core_id: int
    uncore_cache_id: int = 0


class CPUDetails(Mapping[int, CPUInfo]):
    """Upstream `CPUDetails` (cpu id -> `CPUInfo`) with its set-valued queries, immutable."""

    __slots__ = ("_cpus",)

    def __init__(self, cpus: Mapping[int, CPUInfo]) -> None:
        self._cpus = dict(cpus)

    def __getitem__(self, cpu: int) -> CPUInfo:
        return self._cpus[cpu]

    def __iter__(self) -> Iterator[int]:
        return iter(self._cpus)

    def __len__(self) -> int:
        return len(self._cpus)

    def __repr__(self) -> str:
        return f"CPUDetails({self._cpus!r})"

    def keep_only(self, cpus: CPUSet) -> CPUDetails:
        """Upstream `KeepOnly`: the details of the given CPUs only."""
        return CPUDetails({cpu: info for cpu, info in self._cpus.items() if cpu in cpus})

    def cpus(self) -> CPUSet:
        return CPUSet(self._cpus)

    def numa_nodes(self) -> CPUSet:
        return CPUSet(info.numa_node_id for info in self._cpus.values())

    def sockets(self) -> CPUSet:
        return CPUSet(info.socket_id for info in self._cpus.values())

    def cores(self) -> CPUSet:
        return CPUSet(info.core_id for info in self._cpus.values())

    def uncore_caches(self) -> CPUSet:
        return CPUSet(info.uncore_cache_id for info in self._cpus.values())

    def cpus_in_numa_nodes(self, *ids: int) -> CPUSet:
        return CPUSet(cpu for cpu, info in self._cpus.items() if info.numa_node_id in ids)

    def cpus_in_sockets(self, *ids: int) -> CPUSet:
        return CPUSet(cpu for cpu, info in self._cpus.items() if info.socket_id in ids)

    def cpus_in_cores(self, *ids: int) -> CPUSet:
        return CPUSet(cpu for cpu, info in self._cpus.items() if info.core_id in ids)

    def cores_in_sockets(self, *ids: int) -> CPUSet:
        return CPUSet(info.core_id for info in self._cpus.values() if info.socket_id in ids)

    def cores_in_numa_nodes(self, *ids: int) -> CPUSet:
        return CPUSet(info.core_id for info in self._cpus.values() if info.numa_node_id in ids)

    def numa_nodes_in_sockets(self, *ids: int) -> CPUSet:
        return CPUSet(info.numa_node_id for info in self._cpus.values() if info.socket_id in ids)

    def sockets_in_numa_nodes(self, *ids: int) -> CPUSet:
        return CPUSet(info.socket_id for info in self._cpus.values() if info.numa_node_id in ids)


@dataclasses.dataclass(frozen=True)
class CPUTopology:
    """Upstream `CPUTopology`: counts plus per-CPU details."""

    num_cpus: int
    num_cores: int
    num_sockets: int
    num_numa_nodes: int
    details: CPUDetails
    num_uncore_cache: int = 0

    def cpus_per_core(self) -> int:
        """Upstream `CPUsPerCore`: 2 with hyperthreading, 1 without (0 for an empty topology)."""
        return self.num_cpus // self.num_cores if self.num_cores else 0

    def cpus_per_socket(self) -> int:
        return self.num_cpus // self.num_sockets if self.num_sockets else 0

    def _info(self, cpu: int) -> CPUInfo:
        try:
            return self.details[cpu]
        except KeyError:
            raise TopologyError(f"unknown CPU ID: {cpu}") from None

    def cpu_core_id(self, cpu: int) -> int:
        """Upstream `CPUCoreID`."""
        return self._info(cpu).core_id

    def cpu_socket_id(self, cpu: int) -> int:
        return self._info(cpu).socket_id

    def cpu_numa_node_id(self, cpu: int) -> int:
        return self._info(cpu).numa_node_id


def from_cpu_infos(infos: Mapping[int, CPUInfo], num_cores: int | None = None) -> CPUTopology:
    """A topology from per-CPU details, the counts derived as upstream `Discover` does (cores: distinct core
    ids unless given; sockets, NUMA nodes, uncore caches: distinct ids)."""
    details = CPUDetails(infos)
    return CPUTopology(
        num_cpus=len(details),
        num_cores=details.cores().size() if num_cores is None else num_cores,
        num_sockets=details.sockets().size(),
        num_numa_nodes=details.numa_nodes().size(),
        num_uncore_cache=details.uncore_caches().size(),
        details=details,
    )


def _int(files: Mapping[str, str], path: str) -> int:
    text = files[path].strip()
    try:
        return int(text)
    except ValueError:
        raise TopologyError(f"{path}: not a number: {text!r}") from None


def from_sysfs(files: Mapping[str, str]) -> CPUTopology:
    """Upstream `Discover` over cadvisor's sysfs topology, from file texts keyed by absolute path.

    Reads, for each ``cpuN``, ``topology/physical_package_id`` and ``topology/core_id`` (a CPU whose ``online``
    says 0 is left out, as cadvisor does), and each ``nodeN/cpulist``. Without any NUMA node directory (a kernel
    without NUMA) each socket is its own node, as cadvisor then reports it. Threads sharing a NUMA node, a
    package and a ``core_id`` form one core (cadvisor's grouping), named by its lowest CPU id.
    """
    cpu_ids: set[int] = set()
    offline: set[int] = set()
    node_of: dict[int, int] = {}
    nodes_seen = False
    for path, text in files.items():
        if match := _CPU_FILE.match(path):
            cpu = int(match.group(1))
            if match.group(2) == "online":
                if text.strip() == "0":
                    offline.add(cpu)
            else:
                cpu_ids.add(cpu)
        elif match := _NODE_CPULIST.match(path):
            nodes_seen = True
            node = int(match.group(1))
            try:
                members = cpuset.parse(text.strip())
            except cpuset.CPUSetError as err:
                raise TopologyError(f"{path}: {err}") from None
            for cpu in members:
                node_of[cpu] = node
    groups: dict[tuple[int, int, int], list[int]] = {}
    for cpu in sorted(cpu_ids - offline):
        base = f"{CPU_DIR}/cpu{cpu}/topology/"
        if base + "physical_package_id" not in files or base + "core_id" not in files:
            raise TopologyError(f"cpu{cpu}: missing {base}physical_package_id or {base}core_id")
        socket = _int(files, base + "physical_package_id")
        if nodes_seen and cpu not in node_of:
            continue  # not in any NUMA node: cadvisor does not see it
        node = node_of[cpu] if nodes_seen else socket
        groups.setdefault((node, socket, _int(files, base + "core_id")), []).append(cpu)
    if not groups:
        raise TopologyError("could not detect number of cpus")
    infos: dict[int, CPUInfo] = {}
    for (node, socket, _), threads in groups.items():
        core = min(threads)  # upstream getUniqueCoreID
        for cpu in threads:
            infos[cpu] = CPUInfo(numa_node_id=node, socket_id=socket, core_id=core, uncore_cache_id=socket)
    return from_cpu_infos(infos, num_cores=len(groups))


def sysfs_paths(cpus: Iterable[int], nodes: Iterable[int]) -> list[str]:
    """The files `from_sysfs` reads for the given CPU and NUMA node ids (the later I/O reader lists the
    ``cpuN``/``nodeN`` directories, then reads these)."""
    paths = []
    for cpu in cpus:
        paths += [f"{CPU_DIR}/cpu{cpu}/topology/physical_package_id", f"{CPU_DIR}/cpu{cpu}/topology/core_id",
                  f"{CPU_DIR}/cpu{cpu}/online"]
    paths += [f"{NODE_DIR}/node{node}/cpulist" for node in nodes]
    return paths
