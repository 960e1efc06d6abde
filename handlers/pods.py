"""Pod watch glue: every event goes to the pod's worker. ``@kopf.on.event`` only: it writes nothing to
the Pod (no finalizer, no annotation)."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from kopflet.config import static_pods


@kopf.on.event("v1", "pods")
async def pod_event(type: str | None, body: kopf.Body, name: str, namespace: str, memo: kopf.Memo,
                    logger: logging.Logger, **_: Any) -> None:
    logger.debug(f"pod {namespace}/{name}: {type or 'LISTED'}")
    workers = memo.get("workers")
    if workers is None:
        return
    raw = dict(body)  # the latest object as the watch delivered it
    if static_pods.is_mirror(raw):
        return  # a static pod's mirror: its manifest file is the source of truth, not the API object
    if type == "DELETED":
        workers.deleted(raw)
    else:
        workers.update(raw)
