"""The systemd watchdog's loop (upstream pkg/kubelet/watchdog/watchdog_linux.go healthChecker).

Made once per process, first thing at start (upstream cmd/kubelet/app/server.go run: NewHealthChecker, then
Start), from ``$WATCHDOG_USEC`` and ``$WATCHDOG_PID`` (`HealthChecker.from_environ`; `rules.notify_interval` says
which values stop the agent). With a watchdog, one asyncio task checks and pings every half of systemd's timeout,
counted from the end of the previous round (wait.UntilWithContext). Until the agent's loops run there are no checks
and every round pings (the start-up may take long: the runtime, the client certificate); `Node.start` then hands
over its checks (upstream kubelet.go Run: SetHealthCheckers right before the sync loop): ping, log, syncloop and
the container manager's. A round with a failed check logs upstream's error and does not ping, so a stuck agent is
restarted by systemd; a ping that cannot be sent is tried again once about a second later (V(5) lines), and a
``$NOTIFY_SOCKET`` that is unset is an error each round, as upstream.

`LogFlushCheck` is healthz's LogHealthz: a thread flushes the root logger's handlers every minute, and the check
fails once the last flush ended two minutes ago (a handler stuck writing to a full stderr holds its lock). As
upstream's LogHealthz, there is one per process: the watchdog's, which the kubelet API's ``/healthz`` runs too
(`default_checks` names the checks both run).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import random
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence

from kopflet import rounds, sdnotify
from kopflet.gotext import go_duration
from kopflet.logs.verbosity import v
from kopflet.watchdog import rules

logger = logging.getLogger(__name__)

Check = tuple[str, Callable[[], str]]
"""A named health check (upstream healthz.HealthChecker): its name and a call that returns "" when healthy, else
why not."""


def ping() -> str:
    """healthz.PingHealthz: always healthy."""
    return ""


def _flush_root_handlers() -> None:
    for handler in list(logging.getLogger().handlers):
        handler.flush()


class LogFlushCheck:
    """healthz.LogHealthz: started by its first check (sync.Once), a daemon thread flushes the log every minute
    (klog.Flush; here the root logger's handlers, which take each handler's lock) and notes when each flush ended;
    the check fails with "logging blocked" once that was two minutes ago. A flush that raises still counts: only a
    flush that never returns is blocked."""

    def __init__(self, *, period: float = rules.LOG_FLUSH_PERIOD, flush: Callable[[], None] = _flush_root_handlers,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.period, self._flush, self._clock = period, flush, clock
        self._last = 0.0
        self._thread: threading.Thread | None = None
        self._started = threading.Lock()
        self._stopped = threading.Event()

    def __call__(self) -> str:
        with self._started:
            if self._thread is None:
                self._last = self._clock()
                self._thread = threading.Thread(target=self._run, name="watchdog-log-flush", daemon=True)
                self._thread.start()
        return rules.log_error(self._last, self._clock())

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self._flush()
            except Exception:  # a broken stream is not a blocked one (klog.Flush ignores errors)
                pass
            self._last = self._clock()
            self._stopped.wait(self.period)

    def close(self) -> None:
        """End the thread after its current flush (a blocked one stays blocked: it is a daemon thread)."""
        self._stopped.set()


def default_checks(log: Callable[[], str], sync_loop: Callable[[], str], checkers: Sequence[Check] = ()
                   ) -> tuple[Check, ...]:
    """The kubelet's health checks in upstream's order: healthz's ping and log (`log`: the process's one
    `LogFlushCheck`, as upstream's LogHealthz is one), syncloop, then `checkers` (the container manager's). The
    watchdog (SetHealthCheckers) and the kubelet API's ``/healthz`` (InstallAuthNotRequiredHandlers) run the same."""
    return (("ping", ping), ("log", log), ("syncloop", sync_loop), *checkers)


def outcome(check: Callable[[], str]) -> str:
    """A check's error; one that raises fails with what it raised (a bug, never a reason to stop checking)."""
    try:
        return check()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def _why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


class HealthChecker:
    """The watchdog of one process: `start` it once, hand it the agent's checks with `set_health_checkers`,
    `stop` it last."""

    def __init__(self, interval: float | None, *, environ: Mapping[str, str] | None = None,
                 notify: Callable[[], Awaitable[bool]] | None = None, rand: Callable[[], float] = random.random,
                 log_check: LogFlushCheck | None = None) -> None:
        """`interval`: seconds between rounds, None without a watchdog. `notify` sends ``WATCHDOG=1`` (True sent,
        False without ``$NOTIFY_SOCKET``, NotifyError or TimeoutError when it could not be sent); by default to
        the ``$NOTIFY_SOCKET`` of `environ` (the process's when None)."""
        self.interval = interval
        self._notify = notify or (lambda: sdnotify.notify_async(sdnotify.WATCHDOG, environ=environ))
        self._rand = rand
        self._log = log_check if log_check is not None else LogFlushCheck()
        self._checks: tuple[Check, ...] = ()
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None, pid: int | None = None, *,
                     notify: Callable[[], Awaitable[bool]] | None = None, rand: Callable[[], float] = random.random,
                     log_check: LogFlushCheck | None = None) -> HealthChecker:
        """watchdog_linux.go NewHealthChecker: the interval from ``$WATCHDOG_USEC`` and ``$WATCHDOG_PID``
        (the process's environment and PID unless given); "Systemd watchdog is not enabled" when there is none.
        WatchdogConfigError, in upstream's words, when they cannot be used."""
        env = os.environ if environ is None else environ
        interval = rules.notify_interval(env, os.getpid() if pid is None else pid)
        if interval is None:
            logger.info(rules.NOT_ENABLED)
        return cls(interval, environ=environ, notify=notify, rand=rand, log_check=log_check)

    @property
    def log_check(self) -> LogFlushCheck:
        """The process's log check, shared with the kubelet API's ``/healthz`` (upstream's one LogHealthz)."""
        return self._log

    @property
    def enabled(self) -> bool:
        return bool(self.interval)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def set_health_checkers(self, sync_loop: Callable[[], str] | None, checkers: Sequence[Check] = ()) -> None:
        """upstream SetHealthCheckers: ping, log and syncloop (`sync_loop`), then `checkers`, checked in that
        order each round. None: no checks (the agent's loops are stopped; every round pings again)."""
        if sync_loop is None:
            self._checks = ()
        else:
            self._checks = default_checks(self._log, sync_loop, checkers)

    @property
    def check_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self._checks)

    def start(self) -> None:
        """upstream Start: the loop, when there is a watchdog (its interval logged); said when there is none."""
        if self._task is not None:
            return
        if not self.interval or self.interval <= 0:
            logger.info(rules.NOT_STARTED)
            return
        logger.info(f"{rules.STARTING} {go_duration(self.interval)}")
        self._task = asyncio.create_task(self._run(self.interval), name="systemd-watchdog")

    async def stop(self) -> None:
        """The loop ends (upstream: its context is cancelled at exit), and the log check's thread with it."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self._log.close()

    async def _run(self, interval: float) -> None:
        while True:
            try:
                await self.check_and_notify()
            except Exception as exc:
                rounds.log_failed_round(logger, "systemd watchdog round failed", exc)
            await asyncio.sleep(interval)

    def check(self) -> str:
        """doCheck: the first failed check, as upstream words it; "" when all pass (or there are none)."""
        return rules.first_failure((name, outcome(check)) for name, check in self._checks)

    async def check_and_notify(self) -> bool:
        """One round: the checks, then ``WATCHDOG=1`` only when they pass, tried as `rules.NOTIFY_RETRY` says.
        Whether systemd was pinged."""
        error = self.check()
        if error:
            logger.error(f"{rules.UNHEALTHY}: {error}")
            return False
        delays: Iterator[float] = iter(rules.retry_delays(rules.NOTIFY_RETRY,
                                                          (self._rand() for _ in itertools.count())))
        for attempt in range(rules.NOTIFY_RETRY.steps):
            if attempt:
                await asyncio.sleep(next(delays))
            try:
                sent = await self._notify()
            except (sdnotify.NotifyError, TimeoutError) as exc:
                logger.log(v(5), f"{rules.RETRYING}: {_why(exc)}")
                continue
            if not sent:
                logger.error(f"{rules.FAILED}: {rules.NOT_SUPPORTED}")
                return False
            logger.log(v(5), f"{rules.NOTIFIED}: acknowledgment=true state={sdnotify.WATCHDOG}")
            return True
        logger.error(f"{rules.FAILED}: {rules.TIMED_OUT}")
        return False


__all__ = ["Check", "HealthChecker", "LogFlushCheck", "default_checks", "outcome", "ping"]
