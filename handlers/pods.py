"""Pod watch glue: every event goes to the pod's worker. ``@kopf.on.event`` only: it writes nothing to
the Pod (no finalizer, no annotation)."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from kopflet.logs.verbosity import v


def sync_loop_operation(event_type: str | None, body: kopf.Body) -> str:
    """Upstream's name for what a watch event is to the sync loop (pkg/kubelet/config: ADD, UPDATE, DELETE for a
    graceful deletion, REMOVE once the pod is gone from the apiserver); the initial listing's pods are ADDs."""
    if event_type == "DELETED":
        return "REMOVE"
    if event_type == "MODIFIED":
        return "DELETE" if (body.get("metadata") or {}).get("deletionTimestamp") else "UPDATE"
    return "ADD"


@kopf.on.event("v1", "pods")
async def pod_event(type: str | None, body: kopf.Body, name: str, namespace: str, memo: kopf.Memo,
                    logger: logging.Logger, **_: Any) -> None:
    # upstream kubelet.go syncLoopIteration: "SyncLoop ADD/UPDATE/DELETE/REMOVE", source api, at V(2)
    logger.log(v(2), f"SyncLoop {sync_loop_operation(type, body)} (source api): pod {namespace}/{name}")
    node = memo.get("node")
    if node is not None:
        node.pod_event(type, dict(body))  # the latest object as the watch delivered it
