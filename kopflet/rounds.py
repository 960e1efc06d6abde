"""The node's background rounds (container GC, log rotation, eviction): a failed round is logged and the loop goes
on, as upstream's ``wait.Until`` does."""

from __future__ import annotations

import logging

from cri_client.errors import CriError


def log_failed_round(logger: logging.Logger, message: str, exc: BaseException) -> None:
    """Runtime outages and filesystem errors are expected (a containerd restart): one line. Anything else is a bug
    and gets its traceback."""
    if isinstance(exc, CriError | OSError | TimeoutError):
        logger.warning(f"{message}: {exc}")
    else:
        logger.error(f"{message}: {exc}", exc_info=exc)
