"""What the kubelet API (kopflet/server/server.py) serves, taken from the running agent: its pods, the runtime,
container logs and the CRI streaming URLs for exec, attach and port-forward.

Upstream the same lives behind the kubelet's `HostInterface` (pkg/kubelet/server/server.go). Names from the URL are
quoted in messages as upstream's ``%q`` does: a caller's newline or NUL never lands raw in a response or a log.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from cri_client import CriClient, CriError
from cri_client.types import ContainerState
from kopflet.container import podstate
from kopflet.gotext import go_quote
from kopflet.logs import cri_logs
from kopflet.logs import reader as agent_logs
from kopflet.metrics import KubeletMetrics, ProbeMetrics
from kopflet.pleg.relist import RuntimeCache
from kopflet.pods.explain import Decision
from kopflet.pods.timeline import Timeline
from kopflet.pods.workers import PodWorkers
from kopflet.stats import collector as agent_stats
from kopflet.watchdog.health_checker import Check

logger = logging.getLogger(__name__)


class AgentBackend:
    def __init__(self, workers: PodWorkers, cache: RuntimeCache, cri: CriClient, metrics: KubeletMetrics,
                 stats: agent_stats.StatsCollector, probes: ProbeMetrics | None = None,
                 health_checks: Sequence[Check] = ()) -> None:
        """`health_checks`: ``/healthz``'s, as the node has them (`kopflet.node.Node.healthz_checks`)."""
        self.workers, self.cache, self.cri, self.metrics_registry, self.stats = workers, cache, cri, metrics, stats
        self.probes = probes
        self._health_checks = tuple(health_checks)

    # ------------------------------------------------------------------------------------------ healthz

    def health_checks(self) -> Sequence[Check]:
        return self._health_checks

    # ------------------------------------------------------------------------------------------ pods

    def pods(self) -> list[dict[str, Any]]:
        """The pods this node runs, as the agent last saw them from the API (and its static pods)."""
        return [dict(body) for body in self.workers.bodies()]

    async def running_pods(self) -> list[dict[str, Any]]:
        """Pods as the runtime knows them (upstream /runningpods): names, uids and containers with images."""
        out = []
        for uid, pod in sorted(self.cache.pods.items()):
            running = [c for c in pod.containers if c.state is podstate.State.RUNNING]
            if not running and not any(s.ready for s in pod.sandboxes):
                continue
            out.append({"metadata": {"name": pod.name, "namespace": pod.namespace, "uid": uid,
                                     "creationTimestamp": None},
                        "spec": {"containers": [{"name": c.name, "image": c.image, "resources": {}}
                                                for c in running]},
                        "status": {}})
        return out

    def _pod(self, namespace: str, name: str, uid: str | None = None) -> Mapping[str, Any]:
        for body in self.workers.bodies():
            meta = body.get("metadata") or {}
            if meta.get("namespace") == namespace and meta.get("name") == name and (not uid or uid == meta.get("uid")):
                return body
        raise LookupError(f"pod {go_quote(name)} does not exist")

    def _running_container(self, pod: Mapping[str, Any], container: str) -> str:
        runtime = self.cache.pod(pod["metadata"]["uid"])
        found = next((c for c in runtime.containers if c.name == container and c.state is podstate.State.RUNNING),
                     None)
        if found is None:
            raise LookupError(f"container not found ({go_quote(container)})")
        return found.id

    async def pod_decisions(self, namespace: str, name: str) -> tuple[str, Sequence[Decision], Timeline | None]:
        """The pod's uid, its worker's last decisions (`kopflet.pods.explain`) and its last start's timeline
        (`kopflet.pods.timeline`)."""
        found = self.workers.decisions(namespace, name)
        if found is None:
            raise LookupError(f"pod {go_quote(name)} does not exist")
        return found

    # ------------------------------------------------------------------------------------------ logs

    async def container_logs(self, namespace: str, pod_name: str, container: str,
                             query: Mapping[str, Sequence[str]], write: Callable[[bytes], Awaitable[None]]) -> None:
        """Stream one container's log (upstream getContainerLogs + kubelet.GetKubeletContainerLogs)."""
        opts = cri_logs.parse_log_options(query)
        pod = self._pod(namespace, pod_name)
        spec = pod.get("spec") or {}
        names = {c.get("name") for key in ("containers", "initContainers", "ephemeralContainers")
                 for c in spec.get(key) or ()}
        if container not in names:
            raise LookupError(f"container {go_quote(container)} not found in pod {go_quote(pod_name)}")
        container_id = cri_logs.log_container_id(pod.get("status") or {}, container, pod_name, opts.previous)
        try:
            path = (await self.cri.containers.status(container_id)).log_path
        except CriError as exc:
            raise ValueError(f'failed to get container status "{container_id}": {exc}') from None
        if not path:
            raise ValueError(f"container {go_quote(container)} in pod {go_quote(pod_name)} has no log file")

        async def is_running() -> bool:
            try:
                return (await self.cri.containers.status(container_id)).state is ContainerState.RUNNING
            except CriError:
                return False

        try:
            await agent_logs.write_container_logs(path, opts, write, is_running=is_running)
        except FileNotFoundError:
            raise ValueError(f'failed to try resolving symlinks in path "{path}": lstat {path}: '
                             "no such file or directory") from None

    # ------------------------------------------------------------------------------ exec, attach, ports

    async def exec_url(self, namespace: str, pod: str, uid: str | None, container: str, command: list[str], *,
                       stdin: bool, stdout: bool, stderr: bool, tty: bool) -> str:
        container_id = self._running_container(self._pod(namespace, pod, uid), container)
        # With a TTY, stderr is merged into stdout: the CRI refuses both.
        return await self.cri.containers.exec(container_id, command, tty=tty, stdin=stdin, stdout=stdout,
                                              stderr=stderr and not tty)

    async def attach_url(self, namespace: str, pod: str, uid: str | None, container: str, *,
                         stdin: bool, stdout: bool, stderr: bool, tty: bool) -> str:
        container_id = self._running_container(self._pod(namespace, pod, uid), container)
        return await self.cri.containers.attach(container_id, tty=tty, stdin=stdin, stdout=stdout,
                                                stderr=stderr and not tty)

    async def port_forward_url(self, namespace: str, pod: str, uid: str | None, ports: list[int]) -> str:
        body = self._pod(namespace, pod, uid)
        sandbox = self.cache.pod(body["metadata"]["uid"]).latest_sandbox
        if sandbox is None or not sandbox.ready:
            raise LookupError(f"pod {go_quote(pod)} has no running sandbox")
        return await self.cri.sandboxes.port_forward(sandbox.id, ports)

    # ------------------------------------------------------------------------------- metrics and stats

    def metrics(self) -> str:
        """The kubelet's own metrics; the running counts as the PLEG sees them now."""
        states: dict[str, int] = {}
        for pod in self.cache.pods.values():
            for container in pod.containers:
                state = container.state.value
                states[state] = states.get(state, 0) + 1
        running = sum(1 for pod in self.cache.pods.values() if any(s.ready for s in pod.sandboxes))
        self.metrics_registry.set_running(running, states)
        return self.metrics_registry.exposition()

    async def probe_metrics(self) -> str:
        return self.probes.exposition() if self.probes is not None else ""

    async def resource_metrics(self) -> str:
        return await self.stats.resource_metrics()

    async def cadvisor_metrics(self) -> str:
        return await self.stats.cadvisor_metrics()

    async def stats_summary(self) -> dict[str, Any]:
        return await self.stats.summary()
