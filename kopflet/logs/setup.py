"""Logging set up from the configuration, once, before the operator starts (upstream logsapi.ValidateAndApply).

The ``kopflet`` command calls `apply` instead of ``kopf.configure``: one handler on the root logger, writing each
line at once to stderr (upstream's text and json formats both write to stderr; under systemd that is the journal),
in the ``--logging-format`` (`kopflet.logs.formats`), holding back what ``-v`` and ``--vmodule`` do not show
(`kopflet.logs.verbosity`). As ``kopf.configure`` did for ``--debug``, asyncio's own logger is silenced below
``-v=6``. Under ``kopf run`` Kopf's options configure logging instead, and this module is not used.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import TextIO

from kopflet.logs.formats import formatter
from kopflet.logs.verbosity import VerbosityFilter, root_level

ASYNCIO_DEBUG_VERBOSITY = 6
"""From this verbosity asyncio's debug logs are written too (Kopf's ``--debug``)."""


class KopfletHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The agent's handler: marked so that a second `apply` replaces it."""


def apply(log_format: str, verbosity: int, vmodule: Sequence[tuple[str, int]] = (),
          stream: TextIO | None = None) -> KopfletHandler:
    """Route every log record through one handler with the format and verbosity of the configuration."""
    handler = KopfletHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(formatter(log_format))
    handler.addFilter(VerbosityFilter(verbosity, vmodule))
    root = logging.getLogger()
    # Any handler set up before (Kopf's, logging.basicConfig's, an earlier apply's) would write lines twice.
    root.handlers[:] = [handler]
    root.setLevel(root_level(verbosity, vmodule))
    quiet = logging.getLogger("asyncio")
    quiet.propagate = verbosity >= ASYNCIO_DEBUG_VERBOSITY
    quiet.handlers[:] = [] if quiet.propagate else [logging.NullHandler()]
    return handler


__all__ = ["ASYNCIO_DEBUG_VERBOSITY", "KopfletHandler", "apply"]
