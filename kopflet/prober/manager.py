"""Running container probes (upstream prober manager + workers): one asyncio task per container name and
probe kind, probing on its period and publishing results the pod worker reads.

The decisions are `kopflet.prober.probes` (the state machine, the result rules, the messages); this module only
runs the probes: exec through the CRI's ExecSync, httpGet with aiohttp, tcpSocket with
`asyncio.open_connection`, grpc with `grpc.aio` and a hand-encoded `grpc.health.v1.Health/Check`
(grpcio-health-checking is not needed). Every probe runs under a timeout; nothing blocks.

The pod worker calls `sync_pod` after each runtime refresh (tasks are created, updated with the latest
container view, or cancelled) and `forget` when the pod is gone; it reads `readiness` / `started` for the
status and `liveness_failures` / `startup_failures` for `compute_pod_actions`. When a published result
flips, the manager calls `wake({uid})` so the worker syncs again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import logging
import random
import socket
import struct
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

import aiohttp
import yarl

import kopflet
from cri_client import CriError
from cri_client.types import ExecSyncResult
from kopflet import gotext
from kopflet.api import spec
from kopflet.container import podstate
from kopflet.logs.verbosity import v
from kopflet.metrics import ProbeMetrics
from kopflet.prober import probes as p
from kopflet.prober.probes import Kind, Outcome, ProbeSpec, Result

logger = logging.getLogger(__name__)

EXEC_GRACE = 130.0
"""How much longer than its timeout an exec probe may take before the agent gives up on it (the CRI call
has its own deadline: the client timeout plus the command timeout)."""

_REDIRECT_CODES = (301, 302, 303, 307, 308)

ExecSync = Callable[[str, Sequence[str], float], Awaitable[ExecSyncResult]]


class Recorder(Protocol):
    def pod_event(self, pod: Any, type_: str, reason: str, message: str, container: str | None = None,
                  init: bool = False) -> None: ...


@dataclasses.dataclass(eq=False)
class _Worker:
    uid: str
    pod: spec.Pod
    container: spec.ContainerSpec
    is_init: bool
    probe: ProbeSpec
    state: p.ProbeState
    view: p.ContainerView = dataclasses.field(default_factory=p.ContainerView)
    pod_ip: str = ""
    news: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class ProbeManager:
    """Probes of every pod on the node.

    `cri_client` provides ``containers.exec_sync`` (or pass `exec_sync` directly); `recorder` posts the
    Unhealthy / ProbeWarning events; `wake` is `PodWorkers.wake`. `specs` reads a container's probes
    (default `kopflet.prober.probes.container_probes`; tests pass one with sub-second periods). `jitter` spreads
    the first probes over one period when the agent just started, as upstream.
    """

    def __init__(self, cri_client: Any, recorder: Recorder | None, wake: Callable[[set[str]], None], *,
                 exec_sync: ExecSync | None = None,
                 specs: Callable[[spec.ContainerSpec], Mapping[Kind, ProbeSpec]] = p.container_probes,
                 user_agent: str | None = None,
                 jitter: bool = True,
                 metrics: ProbeMetrics | None = None) -> None:
        self.cri, self.recorder, self.wake = cri_client, recorder, wake
        self._exec_sync = exec_sync
        self._specs = specs
        self.user_agent = user_agent or p.user_agent(kopflet.__version__)
        self.jitter = jitter
        self._started = time.monotonic()
        self._workers: dict[str, dict[tuple[str, Kind], _Worker]] = {}
        self._session: aiohttp.ClientSession | None = None
        self.metrics = metrics

    # ------------------------------------------------------------------------------------- inputs

    def sync_pod(self, pod: spec.Pod, runtime: podstate.RuntimePodStatus, pod_ip: str) -> None:
        """Bring the pod's probe tasks in line with its spec and the runtime's latest view of it.

        Call after every runtime refresh of the pod (and before computing its status): starts a task
        for each probe of each container (regular and sidecar), hands the tasks the latest container id,
        state, start time, deletion and pod IP, and drops tasks of probes the spec no longer has.
        """
        workers = self._workers.setdefault(pod.uid, {})
        wanted: set[tuple[str, Kind]] = set()
        for container, is_init in p.probed_containers(pod):
            try:
                specs = self._specs(container)
            except ValueError as exc:
                logger.warning(f"pod {pod.namespace}/{pod.name}: container {container.name}: bad probe: {exc}")
                continue
            for kind, probe in specs.items():
                key = (container.name, kind)
                wanted.add(key)
                worker = workers.get(key)
                if worker is not None and worker.probe != probe:
                    self._cancel(worker)
                    worker = None
                if worker is None:
                    worker = workers[key] = _Worker(uid=pod.uid, pod=pod, container=container, is_init=is_init,
                                                    probe=probe, state=p.new_state(probe))
                    worker.task = asyncio.create_task(self._run(worker),
                                                      name=f"probe-{pod.uid}-{container.name}-{kind}")
                worker.pod, worker.container, worker.pod_ip = pod, container, pod_ip
                view = p.container_view(pod, runtime, container.name)
                if view != worker.view:
                    worker.view = view
                    worker.news.set()
        for key in set(workers) - wanted:
            self._cancel(workers.pop(key))
        # Apply the new views at once, so the results read right after this call are current (startup
        # workers first: the others' gate reads their result).
        for worker in sorted(workers.values(), key=lambda w: w.probe.kind is not Kind.STARTUP):
            worker.state = p.observe(worker.state, worker.view, started=self._started_gate(worker))
            if worker.state.stopped and worker.task is not None and not worker.task.done():
                worker.news.set()  # let the task notice and end

    def forget(self, uid: str) -> None:
        """The pod is gone (or terminal): stop its probes and drop their results."""
        for worker in self._workers.pop(uid, {}).values():
            self._cancel(worker)

    async def close(self) -> None:
        """Stop every probe and release the HTTP client."""
        tasks = [w.task for ws in self._workers.values() for w in ws.values() if w.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._workers.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None

    # ------------------------------------------------------------------------------------ outputs

    def readiness(self, uid: str) -> dict[str, bool]:
        """Container id -> ready, for containers with a readiness probe (status `readiness=`)."""
        return {cid: result is Outcome.SUCCESS for cid, result in self._published(uid, Kind.READINESS)}

    def started(self, uid: str) -> dict[str, bool]:
        """Container id -> started, for containers with a startup probe (status `startup=`)."""
        return {cid: result is Outcome.SUCCESS for cid, result in self._published(uid, Kind.STARTUP)}

    def liveness_failures(self, uid: str) -> set[str]:
        """Ids of containers whose liveness probe failed (`compute_pod_actions(liveness_failures=)`)."""
        return {cid for cid, result in self._published(uid, Kind.LIVENESS) if result is Outcome.FAILURE}

    def startup_failures(self, uid: str) -> set[str]:
        """Ids of containers whose startup probe failed (`compute_pod_actions(startup_failures=)`)."""
        return {cid for cid, result in self._published(uid, Kind.STARTUP) if result is Outcome.FAILURE}

    def _published(self, uid: str, kind: Kind) -> list[tuple[str, Outcome]]:
        out = []
        for (_, worker_kind), worker in self._workers.get(uid, {}).items():
            value = p.published(worker.state) if worker_kind is kind else None
            if value is not None:
                out.append(value)
        return out

    # --------------------------------------------------------------------------------------- loop

    def _cancel(self, worker: _Worker) -> None:
        if worker.task is not None:
            worker.task.cancel()
        if self.metrics is not None:
            self.metrics.forget(worker.probe.kind, container=worker.container.name, pod=worker.pod.name,
                                namespace=worker.pod.namespace, uid=worker.uid)

    def _sibling(self, worker: _Worker, kind: Kind) -> _Worker | None:
        return self._workers.get(worker.uid, {}).get((worker.container.name, kind))

    def _started_gate(self, worker: _Worker) -> bool:
        """The container has no startup probe, or it succeeded for this very container."""
        startup = self._sibling(worker, Kind.STARTUP)
        if startup is None or worker.probe.kind is Kind.STARTUP:
            return True
        return startup.state.result is Outcome.SUCCESS and startup.state.container_id == worker.view.container_id

    async def _wait(self, worker: _Worker, seconds: float) -> None:
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancel that lands as its timeout
        # fires, and a forgotten pod's probe would then run on.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(seconds, 0.0)):
                await worker.news.wait()
        worker.news.clear()

    async def _run(self, worker: _Worker) -> None:
        period = worker.probe.period_seconds
        if self.jitter and time.monotonic() - self._started < period:
            # The agent just (re)started: do not fire every probe of the node at once.
            await self._wait(worker, random.uniform(0, period))
        while True:
            try:
                worker.state = p.observe(worker.state, worker.view, started=self._started_gate(worker))
                if worker.state.stopped:
                    return
                now = time.time()
                if p.due(worker.state, now):
                    await self._probe_once(worker, now)
                delay = p.next_check_in(worker.state, time.time())
            except Exception:
                logger.exception(f"probe {worker.probe.kind} of {worker.container.name} in pod {worker.uid} crashed")
                delay = period
            if delay is None:
                return
            await self._wait(worker, delay)

    async def _probe_once(self, worker: _Worker, now: float) -> None:
        container_id = worker.state.container_id
        kind = worker.probe.kind
        result = Result.unknown("not run")
        started = time.monotonic()
        for _ in range(p.MAX_PROBE_RETRIES):  # upstream runProbeWithRetries: only errors are retried
            result = await self.run_probe(worker.probe, worker.container, container_id, worker.pod_ip)
            if result.outcome is not Outcome.UNKNOWN:
                break
        if worker.state.container_id != container_id:
            return  # the container changed while probing: the result is about a container now gone
        if self.metrics is not None:
            outcome = {Outcome.SUCCESS: "successful", Outcome.WARNING: "successful",
                       Outcome.FAILURE: "failed"}.get(result.outcome, "unknown")
            self.metrics.observe(kind, outcome, time.monotonic() - started, container=worker.container.name,
                                 pod=worker.pod.name, namespace=worker.pod.namespace, uid=worker.uid)
        before = p.published(worker.state)
        worker.state = p.record(worker.state, result, now)
        event = p.probe_event(kind, result)
        if event is not None:
            # upstream prober.go: "Probe failed" at V(1) (the Unhealthy event says it to the pod's owner)
            logger.log(v(1), f"pod {worker.pod.namespace}/{worker.pod.name}: container {worker.container.name}: "
                             f"{event.message}")
            if self.recorder is not None:
                self.recorder.pod_event(worker.pod, event.type, event.reason, event.message,
                                        container=worker.container.name, init=worker.is_init)
        if p.published(worker.state) != before:
            if kind is Kind.STARTUP and worker.state.result is Outcome.SUCCESS:
                # Started: check readiness right away instead of a period later (upstream manualTriggerCh).
                readiness = self._sibling(worker, Kind.READINESS)
                if readiness is not None:
                    readiness.state = p.trigger(readiness.state)
                    readiness.news.set()
                liveness = self._sibling(worker, Kind.LIVENESS)
                if liveness is not None:
                    liveness.news.set()
            self.wake({worker.uid})

    # -------------------------------------------------------------------------------- execution

    async def run_probe(self, probe: ProbeSpec, container: spec.ContainerSpec, container_id: str,
                        pod_ip: str) -> Result:
        """Run one probe once and say what it found (never raises, never outlives its timeout for long)."""
        handler = probe.handler
        try:
            if isinstance(handler, p.ExecAction):
                return await self.exec_probe(container_id, p.expand_command(handler.command, container),
                                             probe.timeout_seconds)
            if isinstance(handler, p.HTTPGetAction):
                request = p.http_request(handler, container, pod_ip, self.user_agent)
                return await self.http_probe(request, probe.timeout_seconds)
            if isinstance(handler, p.TCPSocketAction):
                host = handler.host or pod_ip
                if not host:
                    return Result.unknown("the pod has no IP address to probe")
                return await tcp_probe(host, spec.resolve_port(handler.port, container), probe.timeout_seconds)
            if isinstance(handler, p.GRPCAction):
                if not pod_ip:
                    return Result.unknown("the pod has no IP address to probe")
                return await grpc_probe(pod_ip, handler.port, handler.service, probe.timeout_seconds,
                                        self.user_agent)
            return Result.unknown(f"missing probe handler for {container.name}")
        except ValueError as exc:  # an unresolvable port, a bad URL: a prober error, as upstream
            return Result.unknown(str(exc))
        except Exception as exc:
            logger.exception(f"{probe.kind} probe of {container.name} crashed")
            return Result.unknown(f"{type(exc).__name__}: {exc}")

    async def exec_probe(self, container_id: str, command: Sequence[str], timeout_seconds: float) -> Result:
        """ExecSync in the container: exit 0 succeeds, a runtime deadline is a timed-out failure, any other
        runtime error is a prober error."""
        exec_sync = self._exec_sync or self.cri.containers.exec_sync
        try:
            async with asyncio.timeout(timeout_seconds + EXEC_GRACE):
                response = await exec_sync(container_id, list(command), timeout_seconds)
        except CriError as exc:
            if exc.deadline_exceeded:
                return p.exec_timeout_result(command)
            return Result.unknown(str(exc))
        except TimeoutError:
            return p.exec_timeout_result(command)
        return p.exec_result(response.exit_code, response.stdout, response.stderr)

    async def http_probe(self, request: p.HttpRequest, timeout_seconds: float) -> Result:
        """GET the URL without verifying TLS; same-host redirects are followed (at most 10), a redirect
        elsewhere ends the probe with the 3xx (a success with a warning); at most 10 KiB of body is read."""
        session = self._http_session()
        url = request.url
        headers = list(request.headers)
        try:
            async with asyncio.timeout(timeout_seconds):
                for _ in range(p.MAX_REDIRECTS + 1):
                    async with session.get(yarl.URL(url), headers=headers, allow_redirects=False, ssl=False,
                                           skip_auto_headers=request.skip_headers) as response:
                        location = response.headers.get("Location")
                        if response.status in _REDIRECT_CODES and location:
                            target = yarl.URL(url).join(yarl.URL(location))
                            if target.host == request.hostname and target.scheme in ("http", "https"):
                                url = str(target)
                                continue
                        body = await _read_at_most(response.content, p.MAX_OUTPUT)
                        return p.http_result(response.status, body)
                return p.http_error(url, p.HTTP_REDIRECTS_DETAIL)
        except TimeoutError:
            return p.http_error(url, p.HTTP_TIMEOUT_DETAIL)
        except aiohttp.ClientConnectorError as exc:
            return p.http_error(url, _dial_error(exc.host, exc.port, exc.os_error))
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            return p.http_error(url, str(exc) or type(exc).__name__)

    def _http_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # No keep-alive (upstream DisableKeepAlives), no proxy from the environment, no cookies.
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True, limit=0),
                                                  cookie_jar=aiohttp.DummyCookieJar(), trust_env=False)
        return self._session


async def _read_at_most(stream: aiohttp.StreamReader, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = await stream.read(limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _dial_error(host: str, port: int, error: OSError | None) -> str:
    """Go's dial error text for a failed connect (``dial tcp 10.0.0.1:80: connect: connection refused``)."""
    address = gotext.join_host_port(host, port)
    if isinstance(error, ConnectionRefusedError) or (error is not None and error.errno == errno.ECONNREFUSED):
        return f"dial tcp {address}: connect: connection refused"
    if error is not None and error.strerror:
        return f"dial tcp {address}: connect: {error.strerror.lower()}"
    return f"dial tcp {address}: {error or 'connect failed'}"


async def tcp_probe(host: str, port: int, timeout_seconds: float) -> Result:
    """Open a TCP connection within the timeout (upstream DoTCPProbe); closed at once with a short linger
    (upstream's ProbeDialer) so probes leave no TIME_WAIT sockets behind."""
    try:
        async with asyncio.timeout(timeout_seconds):
            _, writer = await asyncio.open_connection(host, port)
    except TimeoutError:
        return p.tcp_refused(host, port, "i/o timeout")
    except OSError as exc:
        return Result.failure(_dial_error(host, port, exc))
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 1))
    writer.close()
    with contextlib.suppress(OSError, TimeoutError):
        async with asyncio.timeout(1.0):
            await writer.wait_closed()
    return Result.success()


async def grpc_probe(host: str, port: int, service: str, timeout_seconds: float, user_agent: str) -> Result:
    """`grpc.health.v1.Health/Check` over plaintext within the timeout (upstream grpc prober), with the
    request and response encoded by hand so grpcio-health-checking is not needed."""
    import grpc  # only here: the rest of the agent reaches gRPC through cri_client
    import grpc.aio

    address = gotext.join_host_port(host, port)
    duration = gotext.go_duration(timeout_seconds)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_seconds
    channel = grpc.aio.insecure_channel(address, options=[("grpc.primary_user_agent", user_agent)])
    try:
        try:
            await asyncio.wait_for(channel.channel_ready(), timeout=timeout_seconds)
        except TimeoutError:
            return Result.failure(f"timeout: failed to connect service {gotext.go_quote(address)} within {duration}: "
                                  "context deadline exceeded")
        check = channel.unary_unary(p.GRPC_HEALTH_METHOD)  # no serializers: raw bytes both ways
        try:
            response = await check(p.grpc_health_request(service), timeout=max(deadline - loop.time(), 0.001))
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            if code == grpc.StatusCode.UNIMPLEMENTED:
                return Result.failure("error: this server does not implement the grpc health protocol "
                                      f"(grpc.health.v1.Health): {exc.details()}")
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                return Result.failure(f"timeout: health rpc did not complete within {duration}")
            return Result.failure(f"error: health rpc probe failed: rpc error: code = {_go_code(code)} "
                                  f"desc = {exc.details()}")
        try:
            status = p.grpc_health_status(response)
        except ValueError as exc:
            return Result.failure(f"error: health rpc probe failed: {exc}")
        return p.grpc_result(status)
    finally:
        await channel.close()


def _go_code(code: Any) -> str:
    """A grpc.StatusCode as Go's codes.Code prints (``NOT_FOUND`` -> ``NotFound``)."""
    return "".join(part.capitalize() for part in code.name.split("_"))

