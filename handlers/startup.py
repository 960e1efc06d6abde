"""Operator start and stop: settings for a node identity, and the connection to the runtime.

Under ``system:node:<name>`` the Node authorizer lets the agent list/watch only the Pods bound to
its node (``fieldSelector=spec.nodeName=<name>``), and NodeRestriction lets it write only their
status. So Kopf must filter on the server, run without peering, and never store anything on Pods:
only ``@kopf.on.event`` handlers are used (no finalizers, no diff-base or progress annotations).
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

import kopf

from cri_client import CriClient, CriError
from kopflet import config as configuration

# How long to wait before retrying when the runtime is not reachable at start.
RUNTIME_RETRY_DELAY = 5.0


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    try:
        cfg = configuration.from_env(os.environ, socket.gethostname())
    except configuration.ConfigError as exc:
        raise kopf.PermanentError(str(exc)) from exc
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
    cfg: configuration.AgentConfig = memo.config
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
    logger.info(f"container runtime {version.runtime_name} {version.runtime_version} "
                f"(CRI {version.runtime_api_version}) at {cfg.runtime_endpoint}")


@kopf.on.cleanup()
async def disconnect_runtime(memo: kopf.Memo, **_: Any) -> None:
    """Close the runtime connection only: running pods are left as they are for the next start."""
    cri: CriClient | None = memo.get("cri")
    if cri is not None:
        await cri.close()
