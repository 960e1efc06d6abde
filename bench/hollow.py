"""``python -m bench.hollow``: kopflet's hollow nodes beside upstream's kubemark hollow kubelets, on one apiserver in
one run (`make bench-hollow`; issue 24's cluster-scale benchmark).

Each fleet runs alone on the stack's apiserver, one after the other: N nodes register (each its own
``system:node:<name>`` certificate through TLS bootstrap with the stack's bootstrap token), sit idle, take
``pods_per_node`` pods per node created at once and placed by the scheduler at its own pace, hold them, and lose them
again. What is measured, the same way for both fleets:

- the fleet's memory (RSS and PSS summed over its processes: kopflet's one process, kubemark's one per node; PSS
  counts the kubemark binary's shared pages once) and CPU, idle and with the pods running;
- the apiserver requests the nodes' users sent (the audit log), per node per minute, idle and with pods running,
  and per pod over the whole burst;
- per pod: creation → Running (all containers started), and bound → Running (the node agent's own share; the
  scheduler's queue is the rest), seen by one raw watch (the bench's watch must not be what limits 3000 pods).

Both fleets run over simulated runtimes with no call latency (kopflet's ``--runtime-latency zero``; kubemark's fake
remote runtime), so what differs is the node agents' own work. Results: bench/results/<date>-hollow.{json,md}.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import kubernetes
from kubernetes.client.exceptions import ApiException

from bench import audit, cluster, flamegraph, host, profile, stats
from bench.agents import _version, agent_python, other_agents_running
from devstack.layout import REPO, Layout

RESULTS = REPO / "bench" / "results"
FLEET_LABEL = "bench.kopflet.io/fleet"
IMAGE = "registry.k8s.io/pause:3.10.1"
FLEETS = ("kopflet", "kubemark")


@dataclasses.dataclass(frozen=True)
class Plan:
    nodes: int = 100
    pods_per_node: int = 30
    settle_seconds: float = 20.0
    idle_seconds: float = 60.0
    hold_seconds: float = 60.0
    ready_timeout: float = 900.0
    pods_timeout: float = 1800.0
    create_workers: int = 16
    profile: bool = False
    """py-spy samples the kopflet fleet (--gil) through its hold window: where 30 running pods a node cost."""

    @classmethod
    def quick(cls, nodes: int = 5) -> Plan:
        return cls(nodes=nodes, pods_per_node=4, settle_seconds=5, idle_seconds=10, hold_seconds=10, ready_timeout=120,
                   pods_timeout=120)


# ---------------------------------------------------------------------------------------------------- pure summaries


def per_node_per_minute(counts: Mapping[str, int], nodes: int, seconds: float) -> float:
    """All requests in a window as requests per node per minute."""
    if nodes <= 0 or seconds <= 0:
        return 0.0
    return round(sum(counts.values()) * 60 / seconds / nodes, 2)


def requests_by_user(requests: Iterable[audit.Request], users: set[str], start: float, end: float) -> dict[str, int]:
    """The fleet's requests in [start, end), keyed "verb resource" (all its nodes together)."""
    out: dict[str, int] = {}
    for r in requests:
        if r.user in users and start <= r.received < end:
            key = f"{r.verb} {r.resource}".strip()
            out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items()))


def latencies(records: Mapping[str, PodTimes], since: str) -> list[float]:
    """Seconds from `since` ("created" or "bound") to Running, for the pods that have both."""
    out = []
    for rec in records.values():
        start = rec.created if since == "created" else rec.bound
        if start is not None and rec.running is not None:
            out.append(max(0.0, rec.running - start))
    return out


def markdown(results: Mapping[str, Any]) -> str:
    plan = results["plan"]
    lines = [f"# kopflet hollow nodes beside kubemark, {results['date']}", "",
             f"Machine: {results['machine']['cpu']}, {results['machine']['cores']} cores, "
             f"{results['machine']['memory_mib']} MiB, kernel {results['machine']['kernel']}.  ",
             f"Versions: {', '.join(f'{k} {v}' for k, v in results['versions'].items())}.  ",
             f"Plan: {', '.join(f'{k}={v}' for k, v in plan.items())}.", "",
             "Each fleet ran alone on the stack's apiserver, one after the other, over a simulated runtime with no "
             "call latency. Pods were created at once and bound by the scheduler at its own pace; bound → Running "
             "is the node agent's share. Memory is summed over the fleet's processes (kopflet: one; kubemark: one "
             "per node); PSS counts shared pages once.", ""]
    fleets: Mapping[str, Any] = results["fleets"]
    lines += ["## Footprint and API cost", "",
              "| fleet | nodes | all Ready s | idle RSS MiB/node | idle PSS MiB/node | idle CPU % core/node "
              "| running RSS MiB/node | running CPU % core/node | idle req/node/min | running req/node/min "
              "| req per pod |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, f in fleets.items():
        if "error" in f and "idle" not in f:
            lines.append(f"| {name} | {f.get('nodes', '?')} | did not complete: {f['error'][:100]} "
                         "| | | | | | | | |")
            continue
        idle, hold = f.get("idle", {}), f.get("running", {})
        lines.append(
            f"| {name} | {f['nodes']} | {f.get('ready_seconds', '-')} | {idle.get('rss_mib_per_node', '-')} "
            f"| {idle.get('pss_mib_per_node', '-')} | {idle.get('cpu_percent_per_node', '-')} "
            f"| {hold.get('rss_mib_per_node', '-')} | {hold.get('cpu_percent_per_node', '-')} "
            f"| {f.get('api_idle', {}).get('per_node_per_minute', '-')} "
            f"| {f.get('api_running', {}).get('per_node_per_minute', '-')} "
            f"| {f.get('api_pods', {}).get('per_pod', '-')} |")
    lines += [f"\n**{name}:** {f['api_lost']}." for name, f in fleets.items() if "api_lost" in f]
    lines += ["", "## Pod start at the scheduler's pace", "",
              "| fleet | pods | what | p50 ms | p90 ms | p99 ms | max ms | all Running s |",
              "|---|---|---|---|---|---|---|---|"]
    for name, f in fleets.items():
        for what in ("created_to_running", "bound_to_running"):
            s = f.get("start", {}).get(what)
            if not s or not s.get("n"):
                continue
            label = what.replace("_to_", " → ").replace("_", " ")
            every = f["start"].get("all_running_seconds", "-")
            lines.append(f"| {name} | {s['n']} | {label} | {s['p50'] * 1000:.0f} | {s['p90'] * 1000:.0f} "
                         f"| {s['p99'] * 1000:.0f} | {s['max'] * 1000:.0f} | {every} |")
    lines += ["", "## Requests by kind (whole fleet)", ""]
    for name, f in fleets.items():
        for window in ("api_idle", "api_running", "api_pods"):
            counts = f.get(window, {}).get("counts")
            if counts:
                top = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])[:10])
                lines.append(f"- {name}, {window.removeprefix('api_')} ({f[window]['window_seconds']} s): {top}")
    for name, f in fleets.items():
        if f.get("profile", {}).get("costs"):
            lines += ["", f"## Where {name}'s CPU went with the pods running (py-spy --gil, {f['profile']['samples']} "
                      "samples)", "", f["profile"]["costs"]]
    errors = [f"- {name}: {f['error']}" for name, f in fleets.items() if f.get("error")]
    if errors:
        lines += ["", "## Errors", "", *errors]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------- the host side


def fleet_footprint(pids: Sequence[int], seconds: float, nodes: int) -> dict[str, float]:
    """Memory at the end and CPU over a window, summed over the fleet's processes, total and per node."""
    wall, start, t0 = time.time(), sum(host.cpu_seconds(p) for p in pids), time.monotonic()
    time.sleep(seconds)
    used, elapsed = sum(host.cpu_seconds(p) for p in pids) - start, time.monotonic() - t0
    window = (wall, time.time())
    # memory after the window's end (reading a busy process's smaps can take long: not part of the window)
    rss, pss = sum(host.rss_bytes(p) for p in pids) / 2**20, sum(host.pss_bytes(p) for p in pids) / 2**20
    cpu = 100 * used / elapsed
    return {"processes": len(pids), "rss_mib": round(rss, 1), "pss_mib": round(pss, 1),
            "rss_mib_per_node": round(rss / nodes, 2), "pss_mib_per_node": round(pss / nodes, 2),
            "cpu_percent_of_core": round(cpu, 2), "cpu_percent_per_node": round(cpu / nodes, 3),
            "window_seconds": round(elapsed, 1), "window": window}


@dataclasses.dataclass
class PodTimes:
    created: float | None = None
    bound: float | None = None
    running: float | None = None
    gone: float | None = None


class RawPodWatch:
    """One watch on a namespace, decoded with the json module (the client's models cost ~1 ms an event, which at
    thousands of pods would make the bench, not the agents, the bottleneck)."""

    def __init__(self, core: kubernetes.client.CoreV1Api, namespace: str) -> None:
        self.core, self.namespace = core, namespace
        self.records: dict[str, PodTimes] = {}
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hollow-pod-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the pod watch did not start")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=40)

    def mark_created(self, name: str) -> None:
        with self.lock:
            self.records.setdefault(name, PodTimes()).created = time.monotonic()

    def count(self, what: str) -> int:
        with self.lock:
            return sum(1 for r in self.records.values() if getattr(r, what) is not None)

    def _run(self) -> None:
        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    resp = self.core.list_namespaced_pod(self.namespace, _preload_content=False,
                                                         _request_timeout=cluster.REQUEST_TIMEOUT)
                    body = json.loads(resp.data)
                    version = body["metadata"]["resourceVersion"]
                    for pod in body.get("items", []):
                        self._observe("ADDED", pod)
                    self._ready.set()
                resp = self.core.list_namespaced_pod(self.namespace, watch=True, resource_version=version,
                                                     timeout_seconds=30, allow_watch_bookmarks=True,
                                                     _preload_content=False, _request_timeout=60)
                for line in resp:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    obj = event.get("object", {})
                    if event.get("type") == "ERROR":
                        version = "" if obj.get("code") == 410 else version
                        break
                    version = obj.get("metadata", {}).get("resourceVersion", version)
                    if event.get("type") != "BOOKMARK":
                        self._observe(event["type"], obj)
                    if self._stop.is_set():
                        break
                resp.release_conn()
            except ApiException as exc:
                version = "" if exc.status == 410 else version
                time.sleep(0.2)
            except Exception:  # a dropped connection: resume from the last version
                time.sleep(0.2)

    def _observe(self, kind: str, pod: dict[str, Any]) -> None:
        now = time.monotonic()
        name = pod.get("metadata", {}).get("name", "")
        with self.lock:
            rec = self.records.setdefault(name, PodTimes())
            if rec.bound is None and (pod.get("spec") or {}).get("nodeName"):
                rec.bound = now
            if rec.running is None and _all_started(pod):
                rec.running = now
            if kind == "DELETED" and rec.gone is None:
                rec.gone = now


def _all_started(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    wanted = {c["name"] for c in (pod.get("spec") or {}).get("containers", [])}
    # state.running, not `started`: kubemark's hollow kubelet never sets `started` (its prober is stubbed)
    running = {s["name"] for s in status.get("containerStatuses") or []
               if (s.get("state") or {}).get("running") is not None}
    return wanted <= running


# ---------------------------------------------------------------------------------------------------- the fleets


class Fleet:
    name = ""

    def __init__(self, layout: Layout, nodes: int, workdir: Path, port_base: int) -> None:
        self.layout, self.nodes, self.port_base = layout, nodes, port_base
        self.prefix = f"{self.name}-{uuid.uuid4().hex[:4]}-"
        self.names = [f"{self.prefix}{i}" for i in range(nodes)]
        self.users = {f"system:node:{n}" for n in self.names}
        self.state = Path(tempfile.mkdtemp(prefix=f"{self.name}-", dir=workdir))
        self.procs: list[subprocess.Popen[bytes]] = []

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def start(self) -> None:
        raise NotImplementedError

    def log_tail(self, size: int = 3000) -> str:
        logs = sorted(self.state.glob("*.log"))
        if not logs:
            return ""
        data = logs[0].read_bytes()
        return data[-size:].decode(errors="replace")

    def _spawn(self, argv: list[str], log: Path, env: Mapping[str, str]) -> None:
        with log.open("ab") as out:
            self.procs.append(subprocess.Popen(["setpriv", "--pdeathsig", "KILL", "--", *argv], cwd=REPO,
                                               env=dict(env), stdout=out, stderr=subprocess.STDOUT))

    def stop(self, timeout: float = 60.0) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + timeout
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


class KopfletFleet(Fleet):
    name = "kopflet"

    def start(self) -> None:
        # short: the nodes' unix sockets lie below the state dir (108 bytes at most)
        self.sockets = Path(tempfile.mkdtemp(prefix="kh-", dir="/tmp"))
        argv = [str(agent_python()), "-m", "handlers.cli", "hollow", f"--nodes={self.nodes}",
                f"--name-prefix={self.prefix}", f"--state-dir={self.sockets}", f"--port-base={self.port_base}",
                "--runtime-latency=zero", f"--bootstrap-kubeconfig={self.layout.bootstrap_kubeconfig}",
                f"--node-labels={FLEET_LABEL}={self.name}"]
        env = {**os.environ, "PYTHONPATH": str(REPO), "KUBECONFIG": str(self.state / "no-such-file")}
        self._spawn(argv, self.state / "kopflet-hollow.log", env)

    def stop(self, timeout: float = 60.0) -> None:
        super().stop(timeout)
        shutil.rmtree(getattr(self, "sockets", self.state / "none"), ignore_errors=True)


class KubemarkFleet(Fleet):
    name = "kubemark"

    def start(self) -> None:
        binary = self.layout.bin_dir / "kubemark"
        if not binary.exists():
            raise RuntimeError(f"{binary} is missing: bash devstack/build-binaries.sh --kubemark")
        for i, node in enumerate(self.names):
            home = self.state / node
            home.mkdir()
            argv = [str(binary), "--morph=kubelet", f"--name={node}",
                    f"--bootstrap-kubeconfig={self.layout.bootstrap_kubeconfig}",
                    f"--kubeconfig={home / 'kubeconfig'}", f"--cert-dir={home / 'pki'}",
                    f"--kubelet-port={self.port_base + i}", "--kubelet-read-only-port=0",
                    "--use-host-image-service=false", f"--node-labels={FLEET_LABEL}={self.name}", "--v=1"]
            # its root dir, static pod dir and pod logs are temporary directories (GetHollowKubeletConfig)
            self._spawn(argv, self.state / f"{i:04d}.log", {**os.environ, "TMPDIR": str(home)})


def start_profile(fleet: Fleet) -> subprocess.Popen[bytes]:
    raw = fleet.state / "profile.txt"
    return subprocess.Popen([profile.py_spy(), "record", "--pid", str(fleet.pids()[0]), "--rate", "50", "--gil",
                             "--nonblocking", "--format", "raw", "--output", str(raw)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def end_profile(spy: subprocess.Popen[bytes], fleet: Fleet) -> dict[str, Any]:
    """The samples' largest costs (the raw stacks are kept beside the results)."""
    spy.send_signal(signal.SIGINT)
    _, err = spy.communicate(timeout=120)
    raw = fleet.state / "profile.txt"
    if spy.returncode != 0 or not raw.exists():
        return {"error": f"py-spy failed ({spy.returncode}): {err.decode(errors='replace')[-500:]}"}
    text = raw.read_text()
    stacks = flamegraph.parse(text)
    samples = sum(stacks.values())
    return {"samples": samples, "raw": text,
            "costs": flamegraph.markdown_table(flamegraph.costs(stacks), samples, rows=20)}


def ready_nodes(core: kubernetes.client.CoreV1Api, fleet: Fleet) -> int:
    resp = core.list_node(label_selector=f"{FLEET_LABEL}={fleet.name}", _preload_content=False,
                          _request_timeout=cluster.REQUEST_TIMEOUT)
    count = 0
    for node in json.loads(resp.data).get("items", []):
        if node["metadata"]["name"] in fleet.names and any(
                c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions", [])):
            count += 1
    return count


def _discard(response: Any) -> None:
    """An undecoded answer read to its end before its connection goes back to the pool (left unread, the next
    request on it would read this body as its status line)."""
    response.drain_conn()
    response.release_conn()


def remove_leftovers(core: kubernetes.client.CoreV1Api) -> None:
    """Nodes and namespaces an interrupted run left (its fleets gone, they would stay NotReady for ever)."""
    resp = core.list_node(label_selector=FLEET_LABEL, _preload_content=False, _request_timeout=cluster.REQUEST_TIMEOUT)
    for node in json.loads(resp.data).get("items", []):
        core.delete_node(node["metadata"]["name"], _request_timeout=cluster.REQUEST_TIMEOUT)
    resp = core.list_namespace(_preload_content=False, _request_timeout=cluster.REQUEST_TIMEOUT)
    for ns in json.loads(resp.data).get("items", []):
        if ns["metadata"]["name"].startswith("hollow-bench-") and ns.get("status", {}).get("phase") == "Active":
            core.delete_namespace(ns["metadata"]["name"], _request_timeout=cluster.REQUEST_TIMEOUT)


def pod_manifest(name: str, fleet: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "hollow-bench"}},
            "spec": {"nodeSelector": {FLEET_LABEL: fleet}, "automountServiceAccountToken": False,
                     "terminationGracePeriodSeconds": 1, "enableServiceLinks": False,
                     "containers": [{"name": "c", "image": IMAGE}]}}


def wait_for(check: Any, timeout: float, what: str, fleet: Fleet) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if check():
            return time.monotonic() - t0
        if not fleet.alive():
            raise RuntimeError(f"the {fleet.name} fleet exited waiting for {what}; its log ends:\n{fleet.log_tail()}")
        time.sleep(1)
    raise RuntimeError(f"{what}: not within {timeout:.0f}s")


def measure(fleet: Fleet, core: kubernetes.client.CoreV1Api, plan: Plan, audit_log: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"nodes": plan.nodes, "pods_per_node": plan.pods_per_node}
    tail = audit.AuditTail(audit_log)
    namespace = f"hollow-bench-{fleet.name}-{uuid.uuid4().hex[:6]}"
    cluster.ensure_namespace(core, namespace)
    watch = RawPodWatch(core, namespace)
    try:
        log(f"{fleet.name}: starting {plan.nodes} nodes")
        fleet.start()
        out["ready_seconds"] = round(wait_for(lambda: ready_nodes(core, fleet) == plan.nodes, plan.ready_timeout,
                                              f"{plan.nodes} Ready nodes", fleet), 1)
        log(f"{fleet.name}: all Ready after {out['ready_seconds']} s; settling")
        time.sleep(plan.settle_seconds)
        out["idle"] = fleet_footprint(fleet.pids(), plan.idle_seconds, plan.nodes)
        idle_window = out["idle"]["window"]
        log(f"{fleet.name}: idle {out['idle']}")

        watch.start()
        names = [f"p-{i:05d}" for i in range(plan.nodes * plan.pods_per_node)]
        burst_start = time.time()
        t_create = time.monotonic()

        def create(name: str) -> None:
            watch.mark_created(name)
            # the answer left undecoded: the client's models would make the driver, not the fleet, the bottleneck
            _discard(core.create_namespaced_pod(namespace, pod_manifest(name, fleet.name), _preload_content=False,
                                                _request_timeout=cluster.REQUEST_TIMEOUT))

        creating = threading.Thread(target=cluster.in_parallel, args=(create, names, plan.create_workers),
                                    daemon=True)
        creating.start()
        wait_for(lambda: watch.count("running") >= len(names), plan.pods_timeout, f"{len(names)} pods Running",
                 fleet)
        creating.join()
        all_running = time.monotonic() - t_create
        out["start"] = {"created_to_running": stats.summary(latencies(watch.records, "created")),
                        "bound_to_running": stats.summary(latencies(watch.records, "bound")),
                        "all_running_seconds": round(all_running, 1)}
        log(f"{fleet.name}: {len(names)} pods Running after {all_running:.1f} s")
        time.sleep(plan.settle_seconds)  # the last statuses of the burst are not the running pods' steady cost
        spy = start_profile(fleet) if plan.profile and isinstance(fleet, KopfletFleet) else None
        out["running"] = fleet_footprint(fleet.pids(), plan.hold_seconds, plan.nodes)
        if spy is not None:
            out["profile"] = end_profile(spy, fleet)
        running_window = out["running"]["window"]
        log(f"{fleet.name}: running {out['running']}")

        def delete(name: str) -> None:
            try:
                _discard(core.delete_namespaced_pod(name, namespace, _preload_content=False,
                                                    _request_timeout=cluster.REQUEST_TIMEOUT))
            except ApiException as exc:
                if exc.status != 404:
                    raise

        cluster.in_parallel(delete, names, plan.create_workers)
        wait_for(lambda: watch.count("gone") >= len(names), plan.pods_timeout, f"{len(names)} pods gone", fleet)
        burst_end = time.time()
        time.sleep(2)  # the audit log is written a little after the request
        requests = tail.requests()
        if tail.lost:
            out["api_lost"] = audit.AuditTail.LOST
            log(f"{fleet.name}: {out['api_lost']}")
        for key, (start, end) in {"api_idle": idle_window, "api_running": running_window}.items():
            counts = requests_by_user(requests, fleet.users, start, end)
            out[key] = {"window_seconds": round(end - start, 1), "counts": counts,
                        "per_node_per_minute": per_node_per_minute(counts, plan.nodes, end - start)}
        idle_rate = {k: v * 60 / (idle_window[1] - idle_window[0])
                     for k, v in out["api_idle"]["counts"].items()}
        counts = requests_by_user(requests, fleet.users, burst_start, burst_end)
        pods_cost = audit.per_pod(counts, burst_end - burst_start, idle_rate, len(names))
        out["api_pods"] = {"window_seconds": round(burst_end - burst_start, 1), "counts": counts,
                           "per_pod_by_kind": pods_cost, "per_pod": round(sum(pods_cost.values()), 2)}
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        log(f"{fleet.name}: {out['error']}")
    finally:
        watch.stop()
        fleet.stop()
        for node in fleet.names:
            try:
                core.delete_node(node, _request_timeout=cluster.REQUEST_TIMEOUT)
            except ApiException:
                pass
        try:
            core.delete_namespace(namespace, _request_timeout=cluster.REQUEST_TIMEOUT)
        except ApiException:
            pass
        shutil.rmtree(fleet.state, ignore_errors=True)
    return out


def log(message: str) -> None:
    print(f"bench.hollow {datetime.datetime.now():%H:%M:%S}: {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hollow", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=Plan.nodes)
    parser.add_argument("--pods-per-node", type=int, default=Plan.pods_per_node)
    parser.add_argument("--fleets", default=",".join(FLEETS), help="which fleets, in order (default: both)")
    parser.add_argument("--quick", action="store_true", help="5 nodes, 4 pods each, short windows")
    parser.add_argument("--profile", action="store_true",
                        help="sample the kopflet fleet with py-spy through its hold window (<stem>-profile.*)")
    args = parser.parse_args(argv)
    layout = Layout.from_env()
    busy = other_agents_running()
    if busy:
        print("bench.hollow: a node agent runs on this node; stop it first:\n  " + "\n  ".join(busy), file=sys.stderr)
        return 2
    plan = Plan.quick() if args.quick else dataclasses.replace(Plan(), nodes=args.nodes,
                                                               pods_per_node=args.pods_per_node)
    plan = dataclasses.replace(plan, profile=args.profile)
    workdir = layout.root / "bench" / "hollow"
    workdir.mkdir(parents=True, exist_ok=True)
    core = cluster.api(layout.admin_kubeconfig)
    now = datetime.datetime.now(datetime.UTC)
    results: dict[str, Any] = {
        "date": now.strftime("%Y-%m-%d %H:%M UTC"), "machine": host.machine(), "plan": dataclasses.asdict(plan),
        "versions": {"kubernetes (apiserver)": layout.versions.get("KUBERNETES_VERSION", "?"),
                     "kopflet": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                                               capture_output=True).stdout.strip(),
                     "kubemark": _version([str(layout.bin_dir / "kubemark"), "--version"])},
        "fleets": {}}
    kinds = {"kopflet": KopfletFleet, "kubemark": KubemarkFleet}
    remove_leftovers(core)
    for name in args.fleets.split(","):
        fleet = kinds[name](layout, plan.nodes, workdir, port_base=21000)
        results["fleets"][name] = measure(fleet, core, plan, layout.audit_log)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / (now.strftime("%Y-%m-%d-%H%M") + f"-hollow-{plan.nodes}" + ("-quick" if args.quick else ""))
    for name, fleet_results in results["fleets"].items():
        spied = fleet_results.get("profile", {})
        if "raw" in spied:
            raw = stem.with_name(f"{stem.name}-{name}-profile")
            raw.with_suffix(".txt").write_text(spied.pop("raw"))
            raw.with_suffix(".svg").write_text(flamegraph.svg(
                flamegraph.parse(raw.with_suffix(".txt").read_text()),
                f"kopflet hollow, {plan.nodes} nodes x {plan.pods_per_node} pods running ({spied['samples']} "
                "samples at 50 Hz, --gil)"))
    stem.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    stem.with_suffix(".md").write_text(markdown(results))
    log(f"wrote {stem}.json and .md")
    return 1 if any("error" in f for f in results["fleets"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
