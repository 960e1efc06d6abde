"""
The kubelet's ``/metrics/cadvisor`` text, built from a `kopflet.stats.summary.StatsSnapshot`.

Pure: no I/O. Upstream the kubelet registers cAdvisor's two Prometheus collectors (github.com/google/cadvisor
metrics/prometheus.go and prometheus_machine.go, v0.60) and labels each cgroup's series with
``containerPrometheusLabelsFunc`` (pkg/kubelet/server/server.go): ``id`` the cgroup name, ``name`` the
container's first alias (containerd: the container id), ``image`` the image containerd keeps for it, and
``pod``, ``namespace``, ``container`` from the io.kubernetes.* labels ("" when absent). Names, help texts,
types and extra labels (``cpu``, ``interface``, ``device``) are cAdvisor's; help texts carry no stability
level (the kubelet registers these collectors raw). Samples carry their stats' time in milliseconds, as
cAdvisor's ``NewMetricWithTimestamp`` does; the spec series (start, creation time, limits) carry none.

The same numbers as ``/stats/summary`` and ``/metrics/resource``, on the cgroups cAdvisor reports under
containerd (cgroupfs driver):

- ``id="/"``: the machine (the summary's node CPU and memory);
- ``id="/kubepods/<tier>/pod<uid>"``: the pod cgroup, with pod and namespace but no container, image or name
  (the kubelet finds the pod by cgroup: ``GetPodByCgroupfs``); the summary's pod CPU, memory and swap;
- the sandbox (pause) container ``<pod cgroup>/<sandbox id>``: the pod's network counters, since cAdvisor's
  containerd handler keeps network metrics for the sandbox only. containerd gives the pause container no
  io.kubernetes.container.name, so its ``container`` is "" (docker's "POD" never applied to containerd);
  its image is not known here and is "";
- each running container ``<pod cgroup>/<container id>``: CPU, memory, swap, writable layer, start time.

Not reported: cAdvisor's other families (per-CPU usage, CFS, I/O, tasks, processes, OOM events, PSI,
``cadvisor_version_info``), the QoS-tier and system cgroups, the pause container's own CPU and memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from cri_client import types as cri
from kopflet import metrics
from kopflet.stats.summary import NANOS, ContainerSample, PodSample, StatsSnapshot, pod_usage

# Name: (type, help), as cAdvisor declares them (metrics/prometheus.go, prometheus_machine.go).
FAMILIES: Final[Mapping[str, tuple[str, str]]] = {
    "container_cpu_usage_seconds_total": (metrics.COUNTER, "Cumulative cpu time consumed in seconds."),
    "container_creation_time_seconds": (metrics.GAUGE, "Container creation time since unix epoch in seconds."),
    "container_fs_usage_bytes": (
        metrics.GAUGE, "Number of bytes that are consumed by the container on this filesystem."),
    "container_last_seen": (metrics.GAUGE, "Last time a container was seen by the exporter"),
    "container_memory_rss": (metrics.GAUGE, "Size of RSS in bytes."),
    "container_memory_swap": (metrics.GAUGE, "Container swap usage in bytes."),
    "container_memory_usage_bytes": (
        metrics.GAUGE, "Current memory usage in bytes, including all memory regardless of when it was accessed"),
    "container_memory_working_set_bytes": (metrics.GAUGE, "Current working set in bytes."),
    "container_network_receive_bytes_total": (metrics.COUNTER, "Cumulative count of bytes received"),
    "container_network_receive_errors_total": (
        metrics.COUNTER, "Cumulative count of errors encountered while receiving"),
    "container_network_transmit_bytes_total": (metrics.COUNTER, "Cumulative count of bytes transmitted"),
    "container_network_transmit_errors_total": (
        metrics.COUNTER, "Cumulative count of errors encountered while transmitting"),
    "container_scrape_error": (
        metrics.GAUGE, "1 if there was an error while getting container metrics, 0 otherwise"),
    "container_spec_memory_limit_bytes": (metrics.GAUGE, "Memory limit for the container."),
    "container_start_time_seconds": (metrics.GAUGE, "Start time of the container since unix epoch in seconds."),
    "machine_cpu_cores": (metrics.GAUGE, "Number of logical CPU cores."),
    "machine_memory_bytes": (metrics.GAUGE, "Amount of memory installed on the machine."),
    "machine_scrape_error": (
        metrics.GAUGE, "1 if there was an error while getting machine metrics, 0 otherwise."),
}  # fmt: skip

def _unix(ns: int) -> int:
    """Go's ``time.Unix()``: whole seconds, what cAdvisor prints for start times and last-seen."""
    return ns // NANOS


def labels(*, cgroup: str, name: str = "", image: str = "", pod: str = "", namespace: str = "",
           container: str = "") -> dict[str, str]:
    """The six labels the kubelet puts on every cAdvisor series, blanks included (one label set per family)."""
    return {"container": container, "id": cgroup, "image": image, "name": name, "namespace": namespace, "pod": pod}


def cadvisor_metrics(snapshot: StatsSnapshot) -> str:
    """The ``/metrics/cadvisor`` text: machine, pod cgroup, sandbox and container series.

    With `snapshot.error` set (the runtime could not be listed) cAdvisor's container collector reports
    only ``container_scrape_error 1``; the machine series do not depend on it.
    """
    samples = metrics.Samples(FAMILIES)
    add = samples.add
    if not snapshot.error:
        now, node = snapshot.timestamp, snapshot.node
        _usage(labels(cgroup="/"), node.cpu, node.memory, None, now, add)
        for pod in snapshot.pods:
            _pod(pod, snapshot, add)
    add("container_scrape_error", {}, 1 if snapshot.error else 0, None)
    machine = snapshot.node.machine
    if machine is not None:
        ids = {"boot_id": machine.boot_id, "machine_id": machine.machine_id, "system_uuid": machine.system_uuid}
        stamp = machine.timestamp or None
        add("machine_cpu_cores", ids, machine.num_cores, stamp)
        add("machine_memory_bytes", ids, machine.memory_capacity, stamp)
    add("machine_scrape_error", {}, 0 if machine is not None else 1, None)
    return samples.render()


def _usage(labelset: Mapping[str, str], cpu: cri.CpuUsage | None, memory: cri.MemoryUsage | None,
           swap: cri.SwapUsage | None, now: int, add: metrics.AddSample) -> None:
    """One cgroup's CPU, memory and swap, and its last-seen time; unknown numbers are left out.

    cAdvisor without per-CPU usage (cgroup v2) reports the total under ``cpu="total"``, and only when above 0.
    """
    if cpu is not None and cpu.usage_core_nano_seconds:
        add("container_cpu_usage_seconds_total", {**labelset, "cpu": "total"},
            float(cpu.usage_core_nano_seconds) / float(NANOS), cpu.timestamp or now)
    if memory is not None:
        for name, value in (("container_memory_working_set_bytes", memory.working_set_bytes),
                            ("container_memory_rss", memory.rss_bytes),
                            ("container_memory_usage_bytes", memory.usage_bytes)):
            if value is not None:
                add(name, labelset, value, memory.timestamp or now)
    if swap is not None and swap.swap_usage_bytes is not None:
        add("container_memory_swap", labelset, swap.swap_usage_bytes, swap.timestamp or now)
    add("container_last_seen", labelset, _unix(now), now)


def _times(labelset: Mapping[str, str], created: int, add: metrics.AddSample) -> None:
    """Creation and start time (cAdvisor's spec series, no sample time): containerd's creation time for both,
    as CRI lists no start time (cAdvisor takes the cgroup's, set the moment the task starts)."""
    if created > 0:
        add("container_creation_time_seconds", labelset, _unix(created), None)
        add("container_start_time_seconds", labelset, _unix(created), None)


def _child(pod: PodSample, container_id: str) -> str:
    """containerd's cgroup for a container of the pod (cgroupfs driver: ``<pod cgroup>/<id>``); "" if unknown."""
    return f"{pod.cgroup}/{container_id}" if pod.cgroup else ""


def _pod(pod: PodSample, snapshot: StatsSnapshot, add: metrics.AddSample) -> None:
    now = snapshot.timestamp
    cpu, memory, swap = pod_usage(pod, now)  # the summary's own numbers: sandbox stats, else the sums
    pod_labels = labels(cgroup=pod.cgroup, pod=pod.name, namespace=pod.namespace)
    _usage(pod_labels, cpu, memory, swap, now, add)
    if pod.memory_limit is not None:
        add("container_spec_memory_limit_bytes", pod_labels, pod.memory_limit, None)
    if pod.sandbox_id:
        _sandbox(pod, now, add)
    for container in pod.containers:
        _container(pod, container, snapshot, add)


def _sandbox(pod: PodSample, now: int, add: metrics.AddSample) -> None:
    """The pause container: its creation time and the pod's network (cAdvisor's containerd handler keeps
    network metrics for the sandbox only, so each pod's traffic is counted once)."""
    labelset = labels(cgroup=_child(pod, pod.sandbox_id), name=pod.sandbox_id, pod=pod.name, namespace=pod.namespace)
    _times(labelset, pod.start_time, add)
    linux = pod.sandbox.linux if pod.sandbox is not None else None
    if linux is None:
        return
    add("container_last_seen", labelset, _unix(now), now)
    network = linux.network
    if network is None:
        return
    stamp = network.timestamp or now
    for interface in _interfaces(network):
        with_interface = {**labelset, "interface": interface.name}
        for name, value in (("container_network_receive_bytes_total", interface.rx_bytes),
                            ("container_network_receive_errors_total", interface.rx_errors),
                            ("container_network_transmit_bytes_total", interface.tx_bytes),
                            ("container_network_transmit_errors_total", interface.tx_errors)):
            if value is not None:
                add(name, with_interface, value, stamp)


def _interfaces(network: cri.NetworkUsage) -> Iterable[cri.NetworkInterfaceUsage]:
    """The default interface, then the others, each name once (containerd lists eth0 in both)."""
    seen: set[str] = set()
    default = () if network.default_interface is None else (network.default_interface,)
    for interface in (*default, *network.interfaces):
        if interface.name and interface.name not in seen:
            seen.add(interface.name)
            yield interface


def _container(pod: PodSample, container: ContainerSample, snapshot: StatsSnapshot, add: metrics.AddSample) -> None:
    now, stats = snapshot.timestamp, container.stats
    labelset = labels(cgroup=_child(pod, stats.id), name=stats.id, image=container.image, pod=pod.name,
                      namespace=pod.namespace, container=container.name)
    _times(labelset, container.start_time, add)
    _usage(labelset, stats.cpu, stats.memory, stats.swap, now, add)
    if container.memory_limit is not None:
        add("container_spec_memory_limit_bytes", labelset, container.memory_limit, None)
    layer = stats.writable_layer
    if layer is not None and layer.used_bytes is not None:
        # cAdvisor's per-device usage; CRI measures the writable layer only, on the snapshotter's filesystem.
        size = snapshot.filesystems.get(layer.mountpoint)
        device = size.device if size is not None else ""
        add("container_fs_usage_bytes", {**labelset, "device": device}, layer.used_bytes, layer.timestamp or now)
