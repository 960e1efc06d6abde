"""Operator start and stop: settings for a node identity, the runtime connection, and the agent's parts.

Under ``system:node:<name>`` the Node authorizer lets the agent list/watch only the Pods bound to
its node (``fieldSelector=spec.nodeName=<name>``), and NodeRestriction lets it write only their
status. So Kopf must filter on the server, run without peering or CRD scanning, and never store
anything on Pods: only ``@kopf.on.event`` handlers are used (no finalizers, no diff-base or progress
annotations).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import os
import signal
import ssl
from collections.abc import Iterator
from typing import Any

import kopf

from cri_client import CriError
from handlers import configuring
from kopflet import sdnotify
from kopflet.apis.podresources.server import ListenerError as PodResourcesListenerError
from kopflet.certificate.bootstrap import BootstrapError, load_client_cert
from kopflet.certificate.csr import CsrDenied, CsrError
from kopflet.certificate.manager import ManagerError, new_client_manager
from kopflet.certificate.openssl import OpensslError
from kopflet.client.kubeapi import Credentials
from kopflet.cm.cgroups import is_cgroup2
from kopflet.cm.container_manager import CgroupConfigError, KernelTunablesError
from kopflet.cm.cpumanager.manager import CPUManagerError
from kopflet.cm.devicemanager.manager import DeviceManagerError
from kopflet.cm.memorymanager.manager import MemoryManagerError
from kopflet.config import modes
from kopflet.config import settings as configuration
from kopflet.hooks.loader import HookLoadError
from kopflet.lockfile import ContentionWatch, LockFile, LockFileError
from kopflet.metrics import KubeletMetrics
from kopflet.node import HostFacts, Node, Runtime, detect_node_ip
from kopflet.userns.allocator import UsernsError
from kopflet.watchdog.health_checker import HealthChecker
from kopflet.watchdog.rules import WatchdogConfigError

# How long to wait before retrying when the runtime is not reachable at start.
RUNTIME_RETRY_DELAY = 5.0
# With rotateCertificates, Kopf's watch requests end after this (client-go reflectors ask for 5-10 minutes): Kopf
# takes a renewed client certificate at its first request after its credentials' expiration, and its pod watch is
# otherwise one request for as long as the apiserver keeps it (30-60 minutes).
FAIL_CGROUP_V1_MESSAGE = ("kubelet is configured to not run on a host using cgroup v1. cgroup v1 support is "
                          "unsupported and will be removed in a future release")
STANDALONE_UNDER_KOPF = (f"{modes.STANDALONE_MODE}: no --kubeconfig, in-cluster service account, $KUBECONFIG or "
                         "~/.kube/config; standalone mode runs with the kopflet command, not under kopf run")
"""Kopf needs an apiserver: without credentials `kopf run` stops at once (`handlers.standalone` runs the agent)."""


class EndlessBackoffs:
    """Kopf's retries of a failed API request (a refused connection, a 5xx, a timeout), never given up: Kopf's
    default gives up after about a minute and the operator exits. A kubelet outlives any apiserver outage
    (client-go's reflectors and the status manager retry forever), and on a kubeadm node the apiserver is a
    static pod this very agent starts. Iterable but not sized, which Kopf takes as no limit."""

    STEPS = (1, 1, 2, 3, 5, 8, 13)

    def __iter__(self) -> Iterator[float]:
        return itertools.chain(self.STEPS, itertools.repeat(self.STEPS[-1]))


ROTATION_WATCH_TIMEOUT = 300  # an int: Kopf sends it as timeoutSeconds, which the apiserver parses as one
# How long to wait before asking for a client certificate again when the last request was not answered in time
# (upstream exits then, and its service manager starts it again).
BOOTSTRAP_RETRY_DELAY = 10.0


def _config(memo: kopf.Memo) -> configuration.AgentConfig:
    cfg: configuration.AgentConfig | None = memo.get("config")
    if cfg is None:
        raise kopf.PermanentError("not configured: see the error of the 'configure' activity")
    return cfg


class WatchOnlyDiffBase(kopf.AnnotationsDiffBaseStorage):
    """Kopf builds each event's "essence" (a deep copy of the body) to diff it for change handlers; kopflet has
    only ``@kopf.on.event`` handlers, which take the body as it came, so there is nothing to diff: the copy was 5 %
    of the agent's time in a 110-pod burst (bench/results/2026-11-28-profile.md). Nothing is ever stored."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    try:  # a hollow node (handlers.hollow) brings its own environment: its flags, not the process's
        cfg = configuring.load_agent_config(memo.get("environ"))
    except configuration.ConfigError as exc:
        raise kopf.PermanentError(str(exc)) from exc
    overrides: dict[str, Any] | None = memo.get("config_overrides")  # a hollow node's directories, not settings
    if overrides:
        cfg = dataclasses.replace(cfg, **overrides)
    if cfg.fail_cgroup_v1 and not await asyncio.to_thread(is_cgroup2):
        # upstream validateKubeletOSConfiguration, at start: the kubelet exits
        raise kopf.PermanentError(f"failed to validate kubelet configuration, error: {FAIL_CGROUP_V1_MESSAGE}")
    decision: modes.Decision | None = memo.get("mode_decision")
    if decision is None:  # under `kopf run`: Kopf needs the apiserver
        decision = await asyncio.to_thread(configuring.decide_mode, cfg)
        if decision.mode is modes.Mode.STANDALONE:
            raise kopf.PermanentError(STANDALONE_UNDER_KOPF)
    if not cfg.node_ip:
        cfg = dataclasses.replace(cfg, node_ip=detect_node_ip())
    settings.watching.field_selectors["v1", "pods"] = cfg.pod_field_selector
    settings.peering.standalone = True
    settings.peering.mandatory = False
    settings.posting.enabled = False  # Kopf's own log events are not kubelet events
    settings.scanning.disabled = True  # a node may not list CRDs or namespaces; pods are all it watches
    settings.persistence.diffbase_storage = WatchOnlyDiffBase()
    settings.networking.error_backoffs = EndlessBackoffs()
    if cfg.rotate_certificates:
        settings.watching.server_timeout = ROTATION_WATCH_TIMEOUT
    memo.config, memo.mode = cfg, decision.mode
    if decision.mode is modes.Mode.STANDALONE:
        logger.info(f"kopflet for node {cfg.node_name!r}: standalone, static pods only")
    else:
        logger.info(f"kopflet for node {cfg.node_name!r}: watching pods with {cfg.pod_field_selector!r}")
    for warning in (*cfg.startup_warnings, *decision.warnings):  # accepted settings without effect: never silently
        logger.warning(warning)
    for note in cfg.startup_notes:  # accepted no-ops (feature gates at upstream's default): said, not warned
        logger.info(note)


@kopf.on.startup()
async def start_watchdog(memo: kopf.Memo, **_: Any) -> None:
    """The systemd watchdog, before anything that may take long (upstream server.go run: NewHealthChecker and
    Start come first): with ``WatchdogSec=`` in the unit, ``WATCHDOG=1`` goes out while the agent starts, and from
    `Node.start` on only while its health checks pass (`kopflet.watchdog`). A watchdog configured wrongly stops the
    agent with upstream's error."""
    if memo.get("watchdog") is not None:
        return
    try:
        watchdog = HealthChecker.from_environ()
    except WatchdogConfigError as exc:
        raise kopf.PermanentError(f"create health checker: {exc}") from exc
    watchdog.start()
    memo.watchdog = watchdog


def stop_operator() -> None:
    """Stop as SIGTERM does (systemctl stop, a pod's deletion): Kopf's signal handler sets its stop flag, the
    cleanup handler stops the agent's own tasks, and pods and the Node are left as they are."""
    os.kill(os.getpid(), signal.SIGTERM)


@kopf.on.startup()
async def take_lock_file(memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    """--lock-file: before anything touches the runtime or the node, wait for the node's lock (upstream server.go
    run: flock.Acquire, then watchForLockfileContention with --exit-on-lock-contention)."""
    cfg = _config(memo)
    if not cfg.lock_file:
        return
    if memo.get("lock_file") is None:
        try:
            memo.lock_file = await LockFile.acquire(cfg.lock_file)
        except LockFileError as exc:
            raise kopf.PermanentError(str(exc)) from exc
    if cfg.exit_on_lock_contention and memo.get("lock_watch") is None:
        watch = ContentionWatch(cfg.lock_file, on_contention=lambda: _lock_contended(cfg.lock_file, logger))
        try:
            await watch.start()
        except OSError as exc:
            raise kopf.PermanentError(str(exc)) from exc
        memo.lock_watch = watch


def _lock_contended(path: str, logger: logging.Logger) -> None:
    logger.info(f"another process opened the lock file {path}: stopping (--exit-on-lock-contention)")
    stop_operator()


@kopf.on.startup()
async def client_certificate(memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    """--bootstrap-kubeconfig and rotateCertificates, before anything speaks to the apiserver (upstream server.go
    buildKubeletClientConfig). Rotation on: the certificate manager (memo ``certificates``) is made and started, and
    the agent waits for its first pair (asked for with the bootstrap credentials when the kubeconfig has none that
    is valid). Rotation off: LoadClientCert asks once, if the kubeconfig needs it, and writes the kubeconfig."""
    cfg = _config(memo)
    if memo.get("client_certificate_ready") or not (cfg.bootstrap_kubeconfig or cfg.rotate_certificates):
        return
    try:
        async with sdnotify.extending_start("waiting for the node's client certificate"):
            await _client_certificate(cfg, memo, logger)
    except (BootstrapError, ManagerError, CsrDenied, OpensslError) as exc:
        raise kopf.PermanentError(f"no client certificate: {exc}") from exc
    except CsrError as exc:
        raise kopf.TemporaryError(f"no client certificate yet: {exc}", delay=BOOTSTRAP_RETRY_DELAY) from exc
    memo.client_certificate_ready = True


async def _client_certificate(cfg: configuration.AgentConfig, memo: kopf.Memo, logger: logging.Logger) -> None:
    """The wait itself; under a Type=notify unit systemd is told to keep waiting (`sdnotify.extending_start`) as
    long as it lasts (upstream waits up to an hour for the request's approval)."""
    if cfg.rotate_certificates:
        manager = memo.get("certificates")
        if manager is None:
            manager = await new_client_manager(cfg.kubeconfig, cfg.bootstrap_kubeconfig, cfg.cert_directory,
                                               cfg.node_name)
            memo.certificates = manager
            manager.start(on_fatal=lambda message: _certificate_lost(message, logger))
        if manager.current() is None:
            logger.info("waiting for the node's client certificate (rotateCertificates)")
        await manager.wait_for_certificate()
    else:
        await load_client_cert(cfg.kubeconfig, cfg.bootstrap_kubeconfig, cfg.cert_directory, cfg.node_name)


def _certificate_lost(message: str, logger: logging.Logger) -> None:
    """The certificate manager's exitAfter: no usable client certificate for 5 minutes while the apiserver answers.
    Upstream exits so that a restart bootstraps again; kopflet stops (pods are left running)."""
    logger.error(f"stopping: {message}")
    stop_operator()


@kopf.on.startup()
async def connect_runtime(memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    """Connect to the CRI runtime and check it speaks CRI v1, as the upstream kubelet does at start."""
    cfg = _config(memo)
    metrics = KubeletMetrics(cfg.node_name)  # the runtime's operations are the first thing it counts
    try:
        runtime = await Runtime.connect(cfg, observer=metrics.observe_runtime_operation)
    except CriError as exc:
        if exc.unavailable or exc.deadline_exceeded:
            raise kopf.TemporaryError(f"container runtime not reachable: {exc}", delay=RUNTIME_RETRY_DELAY) from exc
        raise kopf.PermanentError(f"container runtime unusable: {exc}") from exc
    memo.runtime, memo.metrics = runtime, metrics
    logger.info(f"container runtime {runtime.name} {runtime.version} "
                f"(CRI {runtime.api_version}) at {cfg.runtime_endpoint}")


@kopf.on.startup()
async def start_agent(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: logging.Logger,
                      **_: Any) -> None:
    """Build the node agent (`kopflet.node.Node`), register the node and start its loops and the kubelet API."""
    cfg = _config(memo)
    runtime: Runtime | None = memo.get("runtime")
    if runtime is None:
        raise kopf.TemporaryError("waiting for the container runtime", delay=RUNTIME_RETRY_DELAY)
    if (cfg.bootstrap_kubeconfig or cfg.rotate_certificates) and not memo.get("client_certificate_ready"):
        raise kopf.TemporaryError("waiting for the node's client certificate", delay=BOOTSTRAP_RETRY_DELAY)
    certificates = memo.get("certificates")
    credentials: Credentials | None = None  # standalone: no apiserver client (handlers.standalone)
    if memo.get("mode") is not modes.Mode.STANDALONE:
        info = await asyncio.to_thread(configuring.connection_info, cfg, logger=logger, settings=settings,
                                       certificates=certificates)
        credentials = Credentials.from_kopf(info)
    try:
        host: HostFacts = memo.get("host_facts") or await HostFacts.read(cfg)  # a hollow node's are made up
        node = Node(cfg, credentials=credentials, runtime=runtime, host=host,
                    metrics=memo.metrics, watchdog=memo.get("watchdog"))
    except UsernsError as exc:
        raise kopf.PermanentError(str(exc)) from exc  # upstream NewMainKubelet fails: the same error at every start
    except HookLoadError as exc:
        raise kopf.PermanentError(str(exc)) from exc  # a policy missing: the same error at every start
    try:
        await node.start()
    except PodResourcesListenerError as exc:
        await node.stop(close_runtime=False)
        raise kopf.PermanentError(str(exc)) from exc  # upstream exits: it cannot serve the pod-resources API
    except (OSError, ssl.SSLError) as exc:
        await node.stop(close_runtime=False)
        # Upstream exits when it cannot serve its API: the apiserver could not reach the node's pods.
        raise kopf.PermanentError(f"cannot serve the kubelet API on {cfg.address}:{cfg.port}: {exc}") from exc
    except (CPUManagerError, MemoryManagerError, ManagerError) as exc:
        await node.stop(close_runtime=False)
        raise kopf.PermanentError(str(exc)) from exc  # upstream exits: the same error at every start
    except CgroupConfigError as exc:
        await node.stop(close_runtime=False)
        raise kopf.PermanentError(str(exc)) from exc  # upstream exits: the same error at every start
    except (KernelTunablesError, DeviceManagerError) as exc:
        await node.stop(close_runtime=False)
        # upstream initializeRuntimeDependentModules: "Failed to start ContainerManager", then os.Exit(1)
        raise kopf.PermanentError(f"Failed to start ContainerManager: {exc}") from exc
    except BaseException:
        await node.stop(close_runtime=False)  # tried again with the same runtime connection
        raise
    if certificates is not None:
        certificates.add_listener(node.api.renew_connections)  # a renewed pair: new connections (transport.go)
        node.metrics.watch_certificate_manager(certificates)
    memo.node = node
    # upstream server.go run: READY=1 once the kubelet's loops and its server are started (a Type=notify unit)
    await _notify(logger, sdnotify.READY)


async def _notify(logger: logging.Logger, state: str) -> None:
    """Tell systemd (when it started the agent with $NOTIFY_SOCKET); upstream ignores a failure, kopflet says it."""
    try:
        await sdnotify.notify_async(state)
    except (sdnotify.NotifyError, TimeoutError) as exc:
        logger.warning(f"{state}: {exc}")


@kopf.on.cleanup()
async def stop_agent(memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    """Stop the agent's own tasks only: running pods are left as they are for the next start."""
    await _notify(logger, sdnotify.STOPPING)
    watch: ContentionWatch | None = memo.get("lock_watch")
    if watch is not None:
        watch.close()  # the lock itself is held until the process exits, as upstream
    certificates = memo.get("certificates")
    if certificates is not None:
        await certificates.stop()
    node: Node | None = memo.get("node")
    if node is not None:
        await node.stop()
    elif memo.get("runtime") is not None:
        await memo.runtime.close()
    watchdog: HealthChecker | None = memo.get("watchdog")
    if watchdog is not None:  # last: it pings while the rest stops (upstream's ends with the process)
        await watchdog.stop()
