"""Pod watch glue. ``@kopf.on.event`` only: it writes nothing to the Pod (no finalizer, no annotation)."""

from __future__ import annotations

import logging
from typing import Any

import kopf


@kopf.on.event("v1", "pods")
async def pod_event(type: str | None, name: str, namespace: str, logger: logging.Logger, **_: Any) -> None:
    logger.debug(f"pod {namespace}/{name}: {type or 'LISTED'}")
