"""Standalone mode: the agent without an apiserver, so without Kopf's operator (upstream server.go run: "Standalone
mode, no API client"; `kopflet.config.modes` decides).

Kopf cannot run without an apiserver (it logs in and watches), but the agent's start-up and clean-up are plain
functions Kopf happens to call (`handlers.startup`): here they are called in Kopf's order, each retried as Kopf
retries a handler's TemporaryError (the runtime not reachable yet) and a PermanentError ends the start, as it ends
the operator. The Node gets no credentials, which makes it standalone (`kopflet.node`); SIGTERM and SIGINT stop the
agent as under Kopf (the clean-up handler: pods are left running), and so does `startup.stop_operator`.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import Any

import kopf

from handlers import startup
from kopflet.config import modes

logger = logging.getLogger("kopflet.standalone")

Handler = Callable[..., Awaitable[None]]
STARTUP: tuple[Handler, ...] = (startup.configure, startup.start_watchdog, startup.take_lock_file,
                                startup.client_certificate, startup.connect_runtime, startup.start_agent)
"""The start-up handlers in the order Kopf runs them (their registration order in handlers/startup.py)."""
CLEANUP: Handler = startup.stop_agent
EXIT_FAILED = 1
RETRY_DELAY = 60.0
"""Kopf's delay before a handler that raised something else than its own errors is run again."""


class StartFailed(Exception):
    """A start-up handler failed for good (its PermanentError): the agent does not run."""


async def _run_handler(handler: Handler, *, settings: kopf.OperatorSettings, memo: kopf.Memo,
                       stopping: asyncio.Event) -> bool:
    """One start-up handler until it succeeds (True), or until a stop is asked for meanwhile (False). As Kopf
    does: a TemporaryError is tried again after its delay, any other exception after a minute; its PermanentError
    is StartFailed."""
    while True:
        try:
            await handler(settings=settings, memo=memo, logger=logger)
            return True
        except kopf.PermanentError as exc:
            raise StartFailed(f"{handler.__name__}: {exc}") from exc
        except kopf.TemporaryError as exc:
            delay = exc.delay if exc.delay is not None else 0.0
            logger.warning(f"{handler.__name__} failed temporarily, trying again in {delay:g}s: {exc}")
        except Exception:
            delay = RETRY_DELAY
            logger.exception(f"{handler.__name__} failed with an exception, trying again in {delay:g}s")
        try:
            await asyncio.wait_for(stopping.wait(), timeout=delay)
            return False
        except TimeoutError:
            continue


async def run(decision: modes.Decision, *, stopping: asyncio.Event | None = None,
              handlers: tuple[Handler, ...] = STARTUP, cleanup: Handler = CLEANUP) -> int:
    """Start the agent standalone, run it until SIGTERM or SIGINT (or `stopping` is set), then stop it; the exit
    status (0, or 1 when the start failed for good, as upstream's kubelet exits 1 when run fails)."""
    stopping = stopping if stopping is not None else asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, stopping.set)
    memo = kopf.Memo(mode_decision=decision)  # `configure` takes the mode from it (under Kopf it decides itself)
    settings = kopf.OperatorSettings()  # what `configure` sets for Kopf's watch is unused here
    logger.info(modes.STANDALONE_MODE)
    try:
        for handler in handlers:
            if stopping.is_set() or not await _run_handler(handler, settings=settings, memo=memo,
                                                           stopping=stopping):
                return 0  # a stop asked for during the start: the later handlers (start_agent) do not run
        await stopping.wait()
        return 0
    except StartFailed as exc:
        logger.error(f"{modes.RUN_FAILED}: {exc}")
        return EXIT_FAILED
    finally:
        await cleanup(memo=memo, logger=logger)
        for sig in signals:
            loop.remove_signal_handler(sig)


def main(decision: modes.Decision, **kwargs: Any) -> int:
    """`run` in an event loop of its own (the ``kopflet`` command's standalone branch)."""
    return asyncio.run(run(decision, **kwargs))
