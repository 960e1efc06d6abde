"""One benchmark run of one agent: the phases, in order, on the real stack.

idle → sequential starts and deletes → exit to status → bursts (with the footprint at full load) →
churn and leftovers → soak (log and image disk, dead containers and RSS sampled over many pod cycles).
Each phase's raw samples go into the results; `bench.report` summarises them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import kubernetes

from bench import audit, cluster, host, soak, workload
from bench.agents import Agent, wait_until
from bench.cluster import PodRecord, PodWatcher
from cri_client import CriClient, types
from kopflet.paths import DEFAULT_CONTAINER_LOGS_DIR, DEFAULT_POD_LOG_ROOT

POD_UID_LABEL = "io.kubernetes.pod.uid"

# The settings that decide how much cgroup work an agent does per pod, read back from each agent's /configz so
# the report shows that both ran with the same ones (issue 20: like-for-like figures).
CGROUP_SETTINGS = ("cgroupsPerQOS", "cgroupDriver", "cgroupRoot", "enforceNodeAllocatable", "cpuManagerPolicy",
                   "memoryManagerPolicy", "topologyManagerPolicy")


def node_cgroup_settings(core: kubernetes.client.CoreV1Api, node: str) -> dict:
    """The running agent's cgroup settings, through the apiserver's node proxy to its /configz."""
    response = core.connect_get_node_proxy_with_path(node, "configz", _preload_content=False, _request_timeout=30)
    return cgroup_settings(json.loads(response.data))


def cgroup_settings(configz: dict) -> dict:
    config = configz.get("kubeletconfig", {})
    # cgroupRoot is omitempty in v1beta1: absent means "" (the root of each hierarchy).
    return {key: config.get(key, "" if key == "cgroupRoot" else None) for key in CGROUP_SETTINGS}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Plan:
    sequential: int = 50
    exits: int = 20
    bursts: tuple[int, ...] = (30, 110)
    churn: int = 300
    churn_parallel: int = 10
    idle_seconds: float = 60
    hold_seconds: float = 30
    settle_seconds: float = 15
    # Upstream's container GC runs once a minute (ContainerGCPeriod): leftovers are counted right after the
    # churn and again after one GC period, so a kubelet that removes dead sandboxes lazily is judged fairly.
    gc_wait_seconds: float = 70
    pod_timeout: float = 180
    # The soak: pods that write logs (an init container's 32 KiB, the main container's soak_log_kib per run),
    # pull one of several images and exit, soak_parallel at a time; every soak_restart_every-th restarts
    # soak_restarts times first. Node disk, runtime containers and RSS are sampled every soak_sample_seconds.
    soak_cycles: int = 2000
    soak_parallel: int = 10
    soak_log_kib: int = 256
    soak_restart_every: int = 4
    soak_restarts: int = 1
    soak_sample_seconds: float = 5

    @classmethod
    def quick(cls) -> Plan:
        """A few of each, to check the harness end to end in minutes."""
        return cls(sequential=5, exits=3, bursts=(5, 10), churn=12, churn_parallel=4, idle_seconds=10,
                   hold_seconds=5, settle_seconds=5, gc_wait_seconds=5, soak_cycles=40, soak_parallel=4,
                   soak_sample_seconds=1)


class Run:
    def __init__(self, agent: Agent, plan: Plan, core: kubernetes.client.CoreV1Api, audit_log: Path) -> None:
        self.agent, self.plan, self.core = agent, plan, core
        self.audit = audit.AuditTail(audit_log)  # this agent's run on: not the whole log, and across its rotation
        layout = agent.layout
        self.node, self.endpoint = layout.node_name, layout.runtime_endpoint
        self.user = f"system:node:{layout.node_name}"
        self.namespace = f"bench-{agent.name}-{uuid.uuid4().hex[:6]}"
        self.watcher = PodWatcher(core, self.namespace)
        self.results: dict = {"agent": agent.name}
        self._seq = 0

    def _name(self, prefix: str) -> str:
        self._seq += 1
        return f"{prefix}-{self._seq:04d}"

    def _api_counts(self, start: float, end: float) -> tuple[dict[str, int], list[str]]:
        requests = self.audit.requests()
        if self.audit.lost:
            self.results["api_lost"] = audit.AuditTail.LOST
        return audit.count(requests, self.user, start, end), audit.user_agents(requests, self.user, start, end)

    # ---------------------------------------------------------------------------------------- phases

    def start_agent(self) -> None:
        # What an earlier run or agent left is not this agent's doing: counted before it starts.
        self.results["leftovers_before"] = self._leftovers()
        since = time.time()
        t0 = time.monotonic()
        self.agent.start()
        wait_until(lambda: cluster.node_ready_since(self.core, self.node, since), 120, "the node to be Ready",
                   self.agent)
        self.results["version"] = self.agent.version()
        self.results["cgroups"] = node_cgroup_settings(self.core, self.node)
        self.results["ready_after_start_seconds"] = round(time.monotonic() - t0, 2)
        time.sleep(self.plan.settle_seconds)  # the first relists and syncs are start-up, not idle

    def idle(self) -> None:
        start = time.time()
        self.results["idle"] = host.idle_window(self.agent.pid, self.plan.idle_seconds)
        end = time.time()
        counts, agents = self._api_counts(start, end)
        self.results["api_idle"] = {"window_seconds": round(end - start, 1), "counts": counts,
                                    "per_minute": audit.rate_per_minute(counts, end - start), "user_agents": agents}

    def sequential(self) -> None:
        """One pod at a time: creation to Running with all started, then delete to the object gone."""
        start_wall = time.time()
        starts, deletes = [], []
        for _ in range(self.plan.sequential):
            name = self._name("seq")
            cluster.create_pod(self.core, self.namespace, workload.pod(name, self.node), self.watcher)
            rec = self._wait_one(name, lambda r: r.running is not None, "Running")
            starts.append(rec.running - rec.created)
            cluster.delete_pod(self.core, self.namespace, name, self.watcher)
            rec = self._wait_one(name, lambda r: r.gone is not None, "gone")
            deletes.append(rec.gone - rec.delete_called)
        end_wall = time.time()
        counts, agents = self._api_counts(start_wall, end_wall)
        idle_rate = self.results["api_idle"]["per_minute"]
        self.results["sequential"] = {"start": starts, "delete": deletes}
        self.results["api_per_pod"] = {
            "pods": self.plan.sequential, "window_seconds": round(end_wall - start_wall, 1), "counts": counts,
            "net_per_pod": audit.per_pod(counts, end_wall - start_wall, idle_rate, self.plan.sequential),
            "user_agents": agents}

    def exits(self) -> None:
        """Container exit (the runtime's finishedAt) to the Pod's status showing it terminated."""
        samples = []
        for _ in range(self.plan.exits):
            name = self._name("exit")
            cluster.create_pod(self.core, self.namespace, workload.exiting_pod(name, self.node), self.watcher)
            rec = self._wait_one(name, lambda r: r.terminated_wall is not None, "terminated")
            finished = asyncio.run(self._finished_at(rec.uid))
            samples.append(rec.terminated_wall - finished)
            cluster.delete_pod(self.core, self.namespace, name, self.watcher)
            self._wait_one(name, lambda r: r.gone is not None, "gone")
        self.results["exit_to_status"] = samples

    async def _finished_at(self, uid: str) -> float:
        async with CriClient(self.endpoint, timeout=30) as cri:
            found = await cri.containers.list(types.ContainerFilter(label_selector={POD_UID_LABEL: uid}))
            stamps = [(await cri.containers.status(c.id)).finished_at for c in found]
        if not stamps or not all(stamps):
            raise RuntimeError(f"pod {uid}: no exited container in the runtime")
        return max(stamps) / 1e9

    def bursts(self) -> None:
        """N pods created at once; per-pod latency and until all run. The largest burst is held for the
        footprint with every pod running."""
        self.results["bursts"] = {}
        for size in self.plan.bursts:
            names = [self._name(f"burst{size}") for _ in range(size)]
            with host.Sampler(self.agent.pid) as sampler:
                cluster.in_parallel(
                    lambda n: cluster.create_pod(self.core, self.namespace, workload.pod(n, self.node),
                                                 self.watcher), names)
                self._wait_all(names, lambda r: r.running is not None, "Running", timeout=self.plan.pod_timeout * 3)
            recs = [self.watcher.record(n) for n in names]
            first = min(r.created for r in recs if r.created is not None)
            entry = {"per_pod": [r.running - r.created for r in recs],
                     "all_running": max(r.running for r in recs) - first,
                     "peak_rss_mib": round(sampler.peak_rss / 2**20, 1), "cpu_seconds": round(sampler.cpu_used, 2)}
            if size == max(self.plan.bursts):
                entry["held"] = host.idle_window(self.agent.pid, self.plan.hold_seconds)
            cluster.in_parallel(lambda n: cluster.delete_pod(self.core, self.namespace, n, self.watcher), names)
            self._wait_all(names, lambda r: r.gone is not None, "gone", timeout=self.plan.pod_timeout * 3)
            entry["all_deleted"] = max(r.gone for r in recs) - min(r.delete_called for r in recs)
            self.results["bursts"][str(size)] = entry

    def churn(self) -> None:
        """Create/delete cycles with mixed specs, some in parallel; then what is left on the node."""
        cycles = [(self._name("churn"), i) for i in range(self.plan.churn)]
        failures: list[str] = []

        def cycle(item: tuple[str, int]) -> None:
            name, index = item
            try:
                cluster.create_pod(self.core, self.namespace, workload.churn_pod(name, self.node, index),
                                   self.watcher)
                self._wait_one(name, lambda r: r.running is not None, "Running")
                cluster.delete_pod(self.core, self.namespace, name, self.watcher)
                self._wait_one(name, lambda r: r.gone is not None, "gone")
            except Exception as exc:
                failures.append(f"{name}: {exc}")

        t0 = time.monotonic()
        with host.Sampler(self.agent.pid) as sampler:
            cluster.in_parallel(cycle, cycles, workers=self.plan.churn_parallel)
        elapsed = time.monotonic() - t0
        recs = [self.watcher.record(n) for n, _ in cycles]
        time.sleep(self.plan.settle_seconds)
        self.results["churn"] = {
            "cycles": self.plan.churn, "parallel": self.plan.churn_parallel, "seconds": round(elapsed, 1),
            "start": [r.running - r.created for r in recs if r.running and r.created],
            "failures": failures, "peak_rss_mib": round(sampler.peak_rss / 2**20, 1),
            "cpu_seconds": round(sampler.cpu_used, 2),
            "rss_after_mib": round(host.rss_bytes(self.agent.pid) / 2**20, 1),
            "leftovers_at_once": self._leftovers()}
        time.sleep(self.plan.gc_wait_seconds)
        self.results["churn"]["leftovers"] = self._leftovers()
        self.results["churn"]["rss_after_gc_mib"] = round(host.rss_bytes(self.agent.pid) / 2**20, 1)

    def soak(self) -> None:
        """Many short pods that write logs, pull one of several images and exit (some after a restart), each
        deleted once done; what they leave on the node is sampled throughout (bench.host.SoakSampler) and
        once more after one GC period. bench.soak judges whether each series levels off."""
        plan = self.plan
        cycles = [(self._name("soak"), i) for i in range(plan.soak_cycles)]
        failures: list[str] = []
        done = [0]
        lock = threading.Lock()
        abort = threading.Event()
        max_failures = max(5, plan.soak_cycles // 10)

        def cycle(item: tuple[str, int]) -> None:
            name, index = item
            if abort.is_set():
                return
            created = False
            try:
                manifest = workload.soak_pod(name, self.node, index, plan.soak_log_kib, plan.soak_restart_every,
                                             plan.soak_restarts)
                cluster.create_pod(self.core, self.namespace, manifest, self.watcher)
                created = True
                rec = self._wait_one(name, lambda r: r.finished is not None, "Succeeded or Failed")
                if rec.phase != "Succeeded":
                    raise RuntimeError(f"phase {rec.phase}")
            except Exception as exc:
                self._soak_failure(failures, lock, abort, max_failures, f"{name}: {exc}")
            if created:  # deleted whatever happened: a stuck pod must not hold its logs and containers
                try:
                    cluster.delete_pod(self.core, self.namespace, name, self.watcher)
                    self._wait_one(name, lambda r: r.gone is not None, "gone")
                except Exception as exc:
                    self._soak_failure(failures, lock, abort, max_failures, f"{name} delete: {exc}")
            with lock:
                done[0] += 1

        per_pod_logs = workload.soak_pod_log_bytes(plan.soak_log_kib, plan.soak_restarts)
        sampler = host.SoakSampler(self.agent.pid, self.endpoint, Path(DEFAULT_POD_LOG_ROOT),
                                   Path(DEFAULT_CONTAINER_LOGS_DIR), plan.soak_sample_seconds, lambda: done[0])
        result: dict = {
            "cycles": plan.soak_cycles, "parallel": plan.soak_parallel, "images": list(workload.SOAK_IMAGES),
            "log_kib": plan.soak_log_kib, "restart_every": plan.soak_restart_every, "restarts_per_pod":
            plan.soak_restarts, "interval": plan.soak_sample_seconds,
            "tolerances": soak.tolerances(plan.soak_parallel, per_pod_logs, 2 + plan.soak_restarts),
            "before": sampler.once()}
        self.results["soak"] = result
        cpu0, t0 = host.cpu_seconds(self.agent.pid), time.monotonic()
        with sampler:
            cluster.in_parallel(cycle, cycles, workers=plan.soak_parallel)
        result.update({
            "seconds": round(time.monotonic() - t0, 1), "completed": done[0],
            "cpu_seconds": round(host.cpu_seconds(self.agent.pid) - cpu0, 2),
            "failures": failures, "restarts": sum(self.watcher.record(n).restarts for n, _ in cycles),
            "series": sampler.series, "sample_errors": sampler.errors})
        if abort.is_set():
            raise RuntimeError(f"soak stopped after {len(failures)} failures, first: {failures[0]}")
        time.sleep(plan.gc_wait_seconds)
        result["after"] = sampler.once()
        result["leftovers"] = self._leftovers()

    def _soak_failure(self, failures: list[str], lock: threading.Lock, abort: threading.Event, limit: int,
                      what: str) -> None:
        """Record a failed cycle; stop the soak when the agent is gone or too many fail (each would otherwise
        wait out pod_timeout)."""
        with lock:
            failures.append(what)
            if len(failures) >= limit or not self.agent.alive():
                abort.set()

    def _leftovers(self) -> dict[str, int]:
        return host.leftovers(self.endpoint, self.agent.pod_dirs, self.agent.layout.cni_data_dir)

    # ---------------------------------------------------------------------------------------- waiting

    def _wait_one(self, name: str, done: Callable[[PodRecord], bool], what: str) -> PodRecord:
        self._wait_all([name], done, what, self.plan.pod_timeout)
        return self.watcher.record(name)

    def _wait_all(self, names: list[str], done: Callable[[PodRecord], bool], what: str, timeout: float) -> None:
        if not self.watcher.wait(names, done, timeout):
            late = [n for n in names if not done(self.watcher.record(n))][:5]
            raise RuntimeError(f"{self.agent.name}: pods {late} not {what} after {timeout:.0f}s")
        if not self.agent.alive():
            raise RuntimeError(f"{self.agent.name} exited during the run (log: {self.agent.log})")

    # ---------------------------------------------------------------------------------------- all

    def run(self) -> dict:
        self.start_agent()
        try:
            self.idle()
            cluster.ensure_namespace(self.core, self.namespace)
            self.watcher.start()
            try:
                self.sequential()
                self.exits()
                self.bursts()
                self.churn()
                if self.plan.soak_cycles:
                    self.soak()
            finally:
                self.watcher.stop()
                self._cleanup_namespace()
        finally:
            self.agent.stop()
        return self.results

    def _cleanup_namespace(self) -> None:
        """Delete what is left while the agent still runs, so it can stop the containers."""
        try:
            self.core.delete_collection_namespaced_pod(self.namespace, _request_timeout=30)
            wait_until(lambda: not self.core.list_namespaced_pod(self.namespace, _request_timeout=30).items, 300,
                       "the benchmark pods to be gone", self.agent)
            self.core.delete_namespace(self.namespace, _request_timeout=30)
        except Exception as exc:
            self.results.setdefault("errors", []).append(f"cleanup: {exc}")
