"""Pod watch glue: every event goes to the pod's worker. ``@kopf.on.event`` only: it writes nothing to
the Pod (no finalizer, no annotation)."""

from __future__ import annotations

import logging
from typing import Any

import kopf


@kopf.on.event("v1", "pods")
async def pod_event(type: str | None, body: kopf.Body, name: str, namespace: str, memo: kopf.Memo,
                    logger: logging.Logger, **_: Any) -> None:
    logger.debug(f"pod {namespace}/{name}: {type or 'LISTED'}")
    node = memo.get("node")
    if node is not None:
        node.pod_event(type, dict(body))  # the latest object as the watch delivered it
