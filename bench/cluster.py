"""The benchmark's side of the apiserver: creating and deleting pods as admin, and a watch that timestamps
what the node agent reports, the way a user (or upstream's node e2e density test) observes it.

Synchronous client calls in threads: the benchmark is a driver, not the agent, and its own timing is taken
on the monotonic clock when a watch event arrives.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import kubernetes
from kubernetes.client.exceptions import ApiException

REQUEST_TIMEOUT = 30


def api(kubeconfig: Path) -> kubernetes.client.CoreV1Api:
    client = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
    client.configuration.connection_pool_maxsize = 64  # bursts create pods from many threads
    return kubernetes.client.CoreV1Api(client)


def all_started(pod: Any) -> bool:
    """Running with every container started: the pod start SLI's end point (upstream pod_start_sli_duration)."""
    status = pod.status
    if status is None or status.phase != "Running":
        return False
    statuses = status.container_statuses or []
    wanted = {c.name for c in pod.spec.containers}
    running = {s.name for s in statuses if s.state and s.state.running and s.started}
    return wanted <= running


def all_terminated(pod: Any) -> bool:
    statuses = (pod.status.container_statuses or []) if pod.status else []
    return bool(statuses) and all(s.state and s.state.terminated for s in statuses)


class PodRecord:
    """What the watch saw of one pod, on the monotonic clock (and the wall clock where a runtime stamp is
    compared against it)."""

    def __init__(self) -> None:
        self.created: float | None = None  # just before the create call
        self.running: float | None = None
        self.terminated_wall: float | None = None
        self.finished: float | None = None  # phase Succeeded or Failed (restarts included: the pod is done)
        self.phase: str = ""
        self.restarts: int = 0  # the highest sum of containerStatuses[].restartCount seen
        self.delete_called: float | None = None
        self.gone: float | None = None
        self.uid: str = ""
        self.events = threading.Event()


class PodWatcher:
    """One watch on the benchmark namespace; records the first time each pod reached each milestone."""

    def __init__(self, core: kubernetes.client.CoreV1Api, namespace: str) -> None:
        self.core, self.namespace = core, namespace
        self.records: dict[str, PodRecord] = {}
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)
        self._ready = threading.Event()

    def record(self, name: str) -> PodRecord:
        with self._lock:
            return self.records.setdefault(name, PodRecord())

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the pod watch did not start")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=REQUEST_TIMEOUT + 5)

    def _run(self) -> None:
        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    listing = self.core.list_namespaced_pod(self.namespace, _request_timeout=REQUEST_TIMEOUT)
                    version = listing.metadata.resource_version
                    for pod in listing.items:
                        self._observe("ADDED", pod)
                    self._ready.set()
                watch = kubernetes.watch.Watch()
                for event in watch.stream(self.core.list_namespaced_pod, self.namespace, resource_version=version,
                                          timeout_seconds=20, allow_watch_bookmarks=True,
                                          _request_timeout=REQUEST_TIMEOUT):
                    obj = event["object"]
                    version = obj.metadata.resource_version or version
                    if event["type"] != "BOOKMARK":
                        self._observe(event["type"], obj)
                    if self._stop.is_set():
                        break
            except ApiException as exc:
                if exc.status == 410:  # expired: list again
                    version = ""
                else:
                    time.sleep(0.2)
            except Exception:  # a dropped connection: resume from the last version
                time.sleep(0.2)

    def _observe(self, kind: str, pod: Any) -> None:
        now, wall = time.monotonic(), time.time()
        with self._cond:
            rec = self.records.setdefault(pod.metadata.name, PodRecord())
            rec.uid = rec.uid or pod.metadata.uid
            if rec.running is None and all_started(pod):
                rec.running = now
            if rec.terminated_wall is None and all_terminated(pod):
                rec.terminated_wall = wall
            if pod.status is not None:
                rec.phase = pod.status.phase or rec.phase
                rec.restarts = max(rec.restarts, sum(s.restart_count or 0 for s in pod.status.container_statuses or []))
                if rec.finished is None and rec.phase in ("Succeeded", "Failed"):
                    rec.finished = now
            if kind == "DELETED" and rec.gone is None:
                rec.gone = now
            self._cond.notify_all()

    def wait(self, names: Iterable[str], done: Callable[[PodRecord], bool], timeout: float) -> bool:
        names = list(names)
        deadline = time.monotonic() + timeout
        with self._cond:
            while not all(done(self.records.setdefault(n, PodRecord())) for n in names):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 1.0))
        return True


def create_pod(core: kubernetes.client.CoreV1Api, namespace: str, manifest: dict, watcher: PodWatcher) -> None:
    rec = watcher.record(manifest["metadata"]["name"])
    rec.created = time.monotonic()
    core.create_namespaced_pod(namespace, manifest, _request_timeout=REQUEST_TIMEOUT)


def delete_pod(core: kubernetes.client.CoreV1Api, namespace: str, name: str, watcher: PodWatcher) -> None:
    watcher.record(name).delete_called = time.monotonic()
    try:
        core.delete_namespaced_pod(name, namespace, _request_timeout=REQUEST_TIMEOUT)
    except ApiException as exc:
        if exc.status != 404:
            raise


def in_parallel(fn: Callable[[Any], None], items: Iterable[Any], workers: int = 16) -> None:
    """Run fn over items from a thread pool (a burst of creates or deletes), re-raising the first error."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for future in [pool.submit(fn, item) for item in items]:
            future.result()


def ensure_namespace(core: kubernetes.client.CoreV1Api, name: str, timeout: float = 60) -> None:
    """Create the namespace and wait for its default ServiceAccount (pods are refused until it exists)."""
    core.create_namespace({"metadata": {"name": name}}, _request_timeout=REQUEST_TIMEOUT)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            core.read_namespaced_service_account("default", name, _request_timeout=REQUEST_TIMEOUT)
            return
        except ApiException as exc:
            if exc.status != 404:
                raise
        time.sleep(0.2)
    raise RuntimeError(f"namespace {name} never got its default ServiceAccount")


def remove_leftover_namespaces(core: kubernetes.client.CoreV1Api, prefix: str) -> list[str]:
    """The namespaces named `prefix`... that an interrupted run left, and their pods: such a pod is bound to the node
    and counts against the next run's pods (a 110-pod burst then has one refused, OutOfpods). The pods are deleted at
    once (no agent runs to stop them; the next agent removes what the runtime still holds), then the namespaces.
    The names removed."""
    removed = []
    for ns in core.list_namespace(_request_timeout=REQUEST_TIMEOUT).items:
        name = ns.metadata.name
        if not name.startswith(prefix):
            continue
        core.delete_collection_namespaced_pod(name, grace_period_seconds=0, _request_timeout=REQUEST_TIMEOUT)
        if ns.status is None or ns.status.phase != "Terminating":
            core.delete_namespace(name, _request_timeout=REQUEST_TIMEOUT)
        removed.append(name)
    return removed


def node_ready_since(core: kubernetes.client.CoreV1Api, node: str, since_wall: float) -> bool:
    """The node is Ready on a heartbeat written after `since_wall` (so by the agent under test)."""
    try:
        obj = core.read_node(node, _request_timeout=REQUEST_TIMEOUT)
    except ApiException:
        return False
    for cond in (obj.status.conditions or []) if obj.status else []:
        if cond.type == "Ready" and cond.status == "True" and cond.last_heartbeat_time is not None:
            return cond.last_heartbeat_time.timestamp() >= since_wall - 1
    return False
