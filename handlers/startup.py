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
import logging
import os
import socket
import ssl
from typing import Any

import kopf

from cri_client import CriClient, CriError
from handlers import configuring
from kopflet import backoff as backoffs
from kopflet.client.events import EventRecorder
from kopflet.client.kubeapi import Credentials, KubeClient
from kopflet.config import settings as configuration
from kopflet.config.file_source import StaticPodSource
from kopflet.envvars.services import ServiceCache
from kopflet.images.manager import ImageManager
from kopflet.kuberuntime import sandbox_config
from kopflet.kuberuntime.executor import PodSyncer, read_host_container_facts
from kopflet.metrics import KubeletMetrics, ProbeMetrics
from kopflet.nodestatus.heartbeat import NodeAgent, read_machine_facts
from kopflet.pleg.relist import RuntimeCache
from kopflet.pods import housekeeping
from kopflet.pods.workers import PodWorkers
from kopflet.prober.manager import ProbeManager
from kopflet.server.auth_reviews import authenticator_for, authorizer_for
from kopflet.server.backend import AgentBackend
from kopflet.server.server import serve
from kopflet.stats.collector import StatsCollector

# How long to wait before retrying when the runtime is not reachable at start.
RUNTIME_RETRY_DELAY = 5.0


def detect_node_ip() -> str:
    """The primary IPv4 address (a UDP connect sends nothing; it only picks the route)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
            return str(s.getsockname()[0])
        except OSError:
            return "127.0.0.1"


def read_host_resolv_conf(path: str = "/etc/resolv.conf") -> str:
    """The host's resolv.conf (what dnsPolicy Default gives pods); blocking: call in a thread."""
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    try:
        cfg = configuration.from_env(os.environ, socket.gethostname(), read_file=configuring.read_text)
    except configuration.ConfigError as exc:
        raise kopf.PermanentError(str(exc)) from exc
    if not cfg.node_ip:
        cfg = dataclasses.replace(cfg, node_ip=detect_node_ip())
    settings.watching.field_selectors["v1", "pods"] = cfg.pod_field_selector
    settings.peering.standalone = True
    settings.peering.mandatory = False
    settings.posting.enabled = False  # Kopf's own log events are not kubelet events
    settings.scanning.disabled = True  # a node may not list CRDs or namespaces; pods are all it watches
    memo.config = cfg
    logger.info(f"kopflet for node {cfg.node_name!r}: watching pods with {cfg.pod_field_selector!r}")


@kopf.on.startup()
async def connect_runtime(memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    """Connect to the CRI runtime and check it speaks CRI v1, as the upstream kubelet does at start."""
    cfg: configuration.AgentConfig | None = memo.get("config")
    if cfg is None:
        raise kopf.PermanentError("not configured: see the error of the 'configure' activity")
    cri = CriClient(cfg.runtime_endpoint, timeout=cfg.runtime_request_timeout)
    await cri.open()
    try:
        version = await cri.check_runtime()
    except CriError as exc:
        await cri.close()
        if exc.unavailable or exc.deadline_exceeded:
            raise kopf.TemporaryError(f"container runtime not reachable: {exc}", delay=RUNTIME_RETRY_DELAY) from exc
        raise kopf.PermanentError(f"container runtime unusable: {exc}") from exc
    memo.cri = cri
    # --image-service-endpoint: images may be served by another endpoint (same runtime by default).
    memo.image_cri = cri if cfg.image_endpoint == cfg.runtime_endpoint else \
        CriClient(cfg.image_endpoint, timeout=cfg.runtime_request_timeout)
    await memo.image_cri.open()
    memo.runtime_version = f"{version.runtime_name}://{version.runtime_version}"
    logger.info(f"container runtime {version.runtime_name} {version.runtime_version} "
                f"(CRI {version.runtime_api_version}) at {cfg.runtime_endpoint}")


@kopf.on.startup()
async def start_agent(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: logging.Logger,
                      **_: Any) -> None:
    """Register the node and start the runtime relist, the heartbeats and housekeeping."""
    cfg: configuration.AgentConfig | None = memo.get("config")
    if cfg is None:
        raise kopf.PermanentError("not configured: see the error of the 'configure' activity")
    cri: CriClient | None = memo.get("cri")
    if cri is None:
        raise kopf.TemporaryError("waiting for the container runtime", delay=RUNTIME_RETRY_DELAY)
    info = await asyncio.to_thread(configuring.connection_info, cfg, logger=logger, settings=settings)
    api = KubeClient(Credentials.from_kopf(info), user_agent=f"kopflet/{cfg.node_name}")
    await api.open()
    recorder = EventRecorder(api, cfg.node_name)
    facts = await asyncio.to_thread(read_machine_facts, cfg.root_dir)
    backoff = backoffs.Backoff()
    servers, searches, options = sandbox_config.parse_resolv_conf(await asyncio.to_thread(read_host_resolv_conf))
    dns = sandbox_config.DnsSettings(cluster_dns=cfg.cluster_dns, cluster_domain=cfg.cluster_domain,
                                     host_servers=servers, host_searches=searches, host_options=options)
    node = NodeAgent(cfg, api, cri, memo.runtime_version, facts)
    service_cache = ServiceCache(api)
    syncer = PodSyncer(cfg, cri, api, recorder, ImageManager(memo.image_cri, recorder, backoff, api), backoff, dns,
                       node_memory_capacity=facts.memory_bytes, services=service_cache,
                       node_allocatable=node.allocatable)
    syncer.hugepage_sizes, syncer.masked_paths = await asyncio.to_thread(read_host_container_facts)
    cache = RuntimeCache(cri)
    await node.register()
    workers = PodWorkers(cfg, api, cache, syncer, recorder, backoff, node.admission_info)
    workers.probes = ProbeManager(cri, recorder, workers.wake)
    memo.api, memo.recorder, memo.workers = api, recorder, workers
    metrics, probe_metrics = KubeletMetrics(cfg.node_name), ProbeMetrics()
    for client in {cri, memo.image_cri}:
        client.observer = metrics.observe_runtime_operation
    cache.on_relist, workers.metrics, workers.probes.metrics = metrics.observe_pleg_relist, metrics, probe_metrics
    if cfg.port:
        backend = AgentBackend(workers, cache, cri, metrics, StatsCollector(
            cri, node_name=cfg.node_name, layout=syncer.layout), probe_metrics)
        try:
            memo.server = await serve(cfg, backend, authenticator_for(cfg, api), authorizer_for(cfg, api),
                                      addresses=[cfg.node_ip] if cfg.node_ip else [])
        except (OSError, ssl.SSLError) as exc:
            # Upstream exits when it cannot serve its API: the apiserver could not reach the node's pods.
            raise kopf.PermanentError(f"cannot serve the kubelet API on {cfg.address}:{cfg.port}: {exc}") from exc
        logger.info(f"serving the kubelet API on {cfg.address}:{cfg.port}")
    tasks = [asyncio.create_task(service_cache.run(), name="services")]
    if cfg.pod_manifest_path:
        # The first scan runs before housekeeping can run: static pods' containers are not orphans.
        source = StaticPodSource(cfg, api, workers, lambda: node.uid)
        await source.scan()
        tasks.append(asyncio.create_task(source.run(), name="static-pods"))
    tasks += [
        asyncio.create_task(cache.run(workers.wake), name="runtime-relist"),
        asyncio.create_task(node.run(), name="node-heartbeat"),
        asyncio.create_task(housekeeping.run(api, cache, workers, syncer, cfg.pod_field_selector),
                            name="housekeeping"),
    ]
    memo.tasks = tasks


@kopf.on.cleanup()
async def stop_agent(memo: kopf.Memo, **_: Any) -> None:
    """Stop the agent's own tasks only: running pods are left as they are for the next start."""
    if "server" in memo:
        await memo.server.close()
    for task in memo.get("tasks", []):
        task.cancel()
    await asyncio.gather(*memo.get("tasks", []), return_exceptions=True)
    if "workers" in memo:
        await memo.workers.stop()
        if memo.workers.probes is not None:
            await memo.workers.probes.close()
    if "recorder" in memo:
        await memo.recorder.flush()
    if "api" in memo:
        await memo.api.close()
    for name in ("image_cri", "cri"):
        client: CriClient | None = memo.get(name)
        if client is not None:
            await client.close()
