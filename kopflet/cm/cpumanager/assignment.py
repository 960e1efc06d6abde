"""Upstream's default CPU allocation, `takeByTopologyNUMAPacked` (pkg/kubelet/cm/cpumanager/cpu_assignment.go),
and the ``full-pcpus-only`` refusal (`SMTAlignmentError`, policy_static.go).

The packed strategy takes, in order: whole NUMA nodes / sockets (whichever is higher in the hierarchy first),
then whole cores, then single threads, always walking the candidates by ascending count of free CPUs (ties by
id), so allocations fill already-fragmented sockets and cores first and keep free ones whole. The spread
strategy, ``distribute-cpus-across-numa`` and the uncore-cache option are not mirrored.
"""

from __future__ import annotations

from collections.abc import Callable

from kopflet.cm.cpumanager.cpuset import CPUSet
from kopflet.cm.cpumanager.topology import CPUDetails, CPUTopology

ERROR_SMT_ALIGNMENT = "SMTAlignmentError"


class AllocationError(ValueError):
    """Upstream's allocation failures ("not enough cpus available to satisfy request: ...")."""


class SMTAlignmentError(AllocationError):
    """Upstream `SMTAlignmentError`: ``full-pcpus-only`` refuses a request that would split a physical core."""

    def __init__(self, requested_cpus: int, cpus_per_core: int, available_physical_cpus: int = 0,
                 caused_by_physical_cpus: bool = False) -> None:
        self.requested_cpus = requested_cpus
        self.cpus_per_core = cpus_per_core
        self.available_physical_cpus = available_physical_cpus
        self.caused_by_physical_cpus = caused_by_physical_cpus
        super().__init__(str(self))

    def __str__(self) -> str:
        if self.caused_by_physical_cpus:
            return (f"SMT Alignment Error: not enough free physical CPUs: available physical CPUs = "
                    f"{self.available_physical_cpus}, requested CPUs = {self.requested_cpus}, "
                    f"CPUs per core = {self.cpus_per_core}")
        return f"SMT Alignment Error: requested {self.requested_cpus} cpus not multiple cpus per core = " \
               f"{self.cpus_per_core}"

    @property
    def reason(self) -> str:
        """Upstream `Type()`: the pod's admission failure reason."""
        return ERROR_SMT_ALIGNMENT


class _Accumulator:
    """Upstream `cpuAccumulator` with the packed sorter: claims CPUs from the free ones until enough."""

    def __init__(self, topo: CPUTopology, available: CPUSet, num_cpus: int) -> None:
        self.topo = topo
        self.details: CPUDetails = topo.details.keep_only(available)
        self.needed = num_cpus
        self.result = CPUSet()
        # upstream newCPUAccumulator: numaFirst when NUMA nodes are at least as big as sockets
        self.numa_first = topo.num_sockets >= topo.num_numa_nodes

    # -- upstream cpuAccumulator.sort: ascending free-CPU count, ties by id
    def _sort(self, ids: CPUSet, cpus_of: Callable[..., CPUSet]) -> list[int]:
        return sorted(ids, key=lambda i: (cpus_of(i).size(), i))

    def sort_numa_nodes(self) -> list[int]:
        d = self.details
        if self.numa_first:
            return self._sort(d.numa_nodes(), d.cpus_in_numa_nodes)
        return [n for s in self.sort_sockets() for n in self._sort(d.numa_nodes_in_sockets(s), d.cpus_in_numa_nodes)]

    def sort_sockets(self) -> list[int]:
        d = self.details
        if self.numa_first:
            return [s for n in self.sort_numa_nodes()
                    for s in self._sort(d.sockets_in_numa_nodes(n), d.cpus_in_sockets)]
        return self._sort(d.sockets(), d.cpus_in_sockets)

    def sort_cores(self) -> list[int]:
        d = self.details
        if self.numa_first:
            return [c for s in self.sort_sockets() for c in self._sort(d.cores_in_sockets(s), d.cpus_in_cores)]
        return [c for n in self.sort_numa_nodes() for c in self._sort(d.cores_in_numa_nodes(n), d.cpus_in_cores)]

    def sort_cpus(self) -> list[int]:
        """Upstream `sortAvailableCPUsPacked`: core by core in `sort_cores` order, ids ascending within."""
        return [cpu for core in self.sort_cores() for cpu in self.details.cpus_in_cores(core).sorted()]

    # -- claims
    def take(self, cpus: CPUSet) -> None:
        self.result = self.result | cpus
        self.details = self.details.keep_only(self.details.cpus() - self.result)
        self.needed -= cpus.size()

    def satisfied(self) -> bool:
        return self.needed < 1

    def failed(self) -> bool:
        return self.needed > len(self.details)

    def take_full_numa_nodes(self) -> None:
        # upstream freeNUMANodes: the free list is made before any claim
        free = [n for n in self.sort_numa_nodes()
                if self.details.cpus_in_numa_nodes(n).size() == self.topo.details.cpus_in_numa_nodes(n).size()]
        for numa in free:
            whole = self.topo.details.cpus_in_numa_nodes(numa)
            if self.needed >= whole.size():
                self.take(whole)

    def take_full_sockets(self) -> None:
        # upstream freeSockets / isSocketFree (compares with CPUsPerSocket)
        free = [s for s in self.sort_sockets() if self.details.cpus_in_sockets(s).size() == self.topo.cpus_per_socket()]
        for socket in free:
            whole = self.topo.details.cpus_in_sockets(socket)
            if self.needed >= whole.size():
                self.take(whole)

    def take_full_cores(self) -> None:
        # upstream freeCores / isCoreFree (compares with CPUsPerCore)
        free = [c for c in self.sort_cores() if self.details.cpus_in_cores(c).size() == self.topo.cpus_per_core()]
        for core in free:
            whole = self.topo.details.cpus_in_cores(core)
            if self.needed >= whole.size():
                self.take(whole)

    def take_remaining_cpus(self) -> None:
        for cpu in self.sort_cpus():
            self.take(CPUSet((cpu,)))
            if self.satisfied():
                return


def take_by_topology(topo: CPUTopology, available: CPUSet, num_cpus: int) -> CPUSet:
    """Upstream `takeByTopologyNUMAPacked` with the packed sorting strategy and no uncore-cache preference.

    Raises `AllocationError` with upstream's texts when the available CPUs cannot cover the request."""
    acc = _Accumulator(topo, available, num_cpus)
    if acc.satisfied():
        return acc.result
    if acc.failed():
        raise AllocationError(f"not enough cpus available to satisfy request: requested={num_cpus}, "
                              f"available={available.size()}")
    if acc.numa_first:
        steps = (acc.take_full_numa_nodes, acc.take_full_sockets, acc.take_full_cores, acc.take_remaining_cpus)
    else:
        steps = (acc.take_full_sockets, acc.take_full_numa_nodes, acc.take_full_cores, acc.take_remaining_cpus)
    for step in steps:
        step()
        if acc.satisfied():
            return acc.result
    raise AllocationError("failed to allocate cpus")


def check_smt_alignment(num_cpus: int, cpus_per_core: int, available_physical_cpus: int) -> None:
    """Upstream `staticPolicy.enforceSMTAlignment` with ``full-pcpus-only`` on: the request must be whole cores,
    and fit in the free CPUs once the reserved CPUs' core siblings are counted as taken too."""
    if cpus_per_core and num_cpus % cpus_per_core != 0:
        raise SMTAlignmentError(requested_cpus=num_cpus, cpus_per_core=cpus_per_core)
    if num_cpus > available_physical_cpus:
        raise SMTAlignmentError(requested_cpus=num_cpus, cpus_per_core=cpus_per_core,
                                available_physical_cpus=available_physical_cpus, caused_by_physical_cpus=True)
