"""A pod's own numbers (CPU, memory, processes, network) from its pod cgroup, as cAdvisor gives them to the
upstream kubelet.

The upstream kubelet's default stats provider (cAdvisor; the CRI one is the PodAndContainerStatsFromCRI feature)
reads the pod-level CPU and memory from the pod cgroup (``getCadvisorPodInfoFromPodUID``), the network from the
infra (pause) container's network namespace, and sums the processes of the pod's containers, the infra one
included. kopflet does the same from the files the collector reads (`kopflet.stats.collector.pod_cgroups`), rather
than asking the runtime for sandbox stats: containerd before 1.6.22 writes its sandbox map under a read lock while
it answers PodSandboxStats and ListPodSandboxStats, and dies of it ("fatal error: concurrent map read and map
write") when another request reads the map at that moment.

The numbers are shaped as the CRI's `PodSandboxStats`, so the summary, the metrics and the eviction manager read
them as before. Pure: the caller reads the files.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from cri_client import types as cri
from kopflet.stats import summary

DEFAULT_INTERFACE: Final = "eth0"
"""The pod's default interface (upstream defaultNetworkInterfaceName)."""
IGNORED_INTERFACE_PREFIXES: Final = ("lo", "veth", "docker", "nerdctl")
"""Interfaces cAdvisor leaves out of a container's network stats (its ignoredDevicePrefixes)."""
UNLIMITED_MEMORY: Final = 1 << 62
"""A memory limit above this is "no limit" (the kernel rounds the unlimited value: cAdvisor's maxMemorySize)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodCgroupFiles:
    """What was read for one pod (None: missing or unreadable).

    `cpu` is cgroup v1 ``cpuacct.usage`` or cgroup v2 ``cpu.stat``; `memory_usage` is ``memory.usage_in_bytes``
    or ``memory.current``; `memory_limit` ``memory.limit_in_bytes`` or ``memory.max``; `net_dev` is
    ``/proc/<pid>/net/dev`` of the infra container's process, None when the pod shares the host's network
    namespace (upstream reports no network for it then) or that process is gone.
    """

    v2: bool
    cpu: str | None = None
    memory_usage: str | None = None
    memory_limit: str | None = None
    memory_stat: str | None = None
    process_count: int | None = None
    net_dev: str | None = None


def _int(text: str | None) -> int | None:
    value = (text or "").strip()
    return int(value) if value.isdigit() else None


def cpu_usage(files: PodCgroupFiles, timestamp: int) -> cri.CpuUsage | None:
    """Cumulative CPU time; the rate (usageNanoCores) is left to the collector, which keeps the previous sample."""
    if files.v2:
        usec = summary.parse_flat_keyed(files.cpu or "").get("usage_usec")
        total = usec * 1000 if usec is not None else None
    else:
        total = _int(files.cpu)
    return None if total is None else cri.CpuUsage(timestamp=timestamp, usage_core_nano_seconds=total)


def memory_usage(files: PodCgroupFiles, timestamp: int) -> cri.MemoryUsage | None:
    """cAdvisor's memory numbers: working set is usage less inactive file pages; available is the limit less the
    working set, absent without a limit; RSS is ``total_rss`` (v1) or ``anon`` (v2)."""
    usage = _int(files.memory_usage)
    if usage is None:
        return None
    stat = summary.parse_flat_keyed(files.memory_stat or "")
    prefix = "" if files.v2 else "total_"
    inactive = stat.get(f"{prefix}inactive_file", 0)
    working_set = usage - inactive if inactive < usage else 0
    limit = _int(files.memory_limit)  # v2 "max" reads as None: no limit
    available = max(limit - working_set, 0) if limit is not None and limit <= UNLIMITED_MEMORY else None
    return cri.MemoryUsage(
        timestamp=timestamp,
        working_set_bytes=working_set,
        available_bytes=available,
        usage_bytes=usage,
        rss_bytes=stat.get("anon" if files.v2 else "total_rss"),
        page_faults=stat.get(f"{prefix}pgfault"),
        major_page_faults=stat.get(f"{prefix}pgmajfault"),
    )


def parse_net_dev(text: str) -> tuple[cri.NetworkInterfaceUsage, ...]:
    """The interfaces of ``/proc/<pid>/net/dev`` cAdvisor reports, with their byte and error counters."""
    found = []
    for line in text.splitlines()[2:]:  # two header lines
        name, sep, counters = line.partition(":")
        fields = counters.split()
        name = name.strip()
        if not sep or len(fields) < 11 or not all(f.isdigit() for f in fields) or \
                name.startswith(IGNORED_INTERFACE_PREFIXES):
            continue
        # receive: bytes packets errs drop fifo frame compressed multicast; transmit: bytes packets errs ...
        found.append(cri.NetworkInterfaceUsage(name=name, rx_bytes=int(fields[0]), rx_errors=int(fields[2]),
                                               tx_bytes=int(fields[8]), tx_errors=int(fields[10])))
    return tuple(found)


def network_usage(files: PodCgroupFiles, timestamp: int) -> cri.NetworkUsage | None:
    """Every interface, and eth0 as the default one (upstream cadvisorInfoToNetworkStats)."""
    if files.net_dev is None:
        return None
    interfaces = parse_net_dev(files.net_dev)
    default = next((i for i in interfaces if i.name == DEFAULT_INTERFACE), None)
    return cri.NetworkUsage(timestamp=timestamp, default_interface=default, interfaces=interfaces)


def pod_sandbox_stats(sandbox_id: str, files: PodCgroupFiles, timestamp: int) -> cri.PodSandboxStats:
    """The pod's numbers in the shape of the CRI's sandbox stats (the containers' own come from the runtime)."""
    processes = None if files.process_count is None else \
        cri.ProcessUsage(timestamp=timestamp, process_count=files.process_count)
    return cri.PodSandboxStats(id=sandbox_id, linux=cri.LinuxPodSandboxStats(
        cpu=cpu_usage(files, timestamp),
        memory=memory_usage(files, timestamp),
        network=network_usage(files, timestamp),
        process=processes,
    ))


__all__ = [
    "DEFAULT_INTERFACE",
    "PodCgroupFiles",
    "cpu_usage",
    "memory_usage",
    "network_usage",
    "parse_net_dev",
    "pod_sandbox_stats",
]
