"""The systemd watchdog's rules, as upstream's kubelet has them (pkg/kubelet/watchdog/watchdog_linux.go over
go-systemd's ``daemon.SdWatchdogEnabled``, the healthz checks it runs, and the kubelet's SyncLoopHealthCheck).

With ``WatchdogSec=`` in its unit, systemd gives the service ``$WATCHDOG_USEC`` (the timeout, in microseconds) and
``$WATCHDOG_PID`` (the process meant), and restarts it when no ``WATCHDOG=1`` arrives within the timeout. Upstream's
kubelet reads both once at start (`notify_interval`): unset, or another process's PID, and there is no watchdog; a
value it cannot use, or a timeout of a second or less, and the kubelet does not start. It then pings every half of
the timeout, but only when every health check passes (`first_failure`): ping, log (`log_error`), syncloop
(`sync_loop_error`), and the container manager's (the device plugins' registration server); a ping that cannot be
sent is tried once more a second later (`NOTIFY_RETRY`, `retry_delays`).

Pure: the environment's values, times and check results in; intervals, messages and decisions out.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Final

from kopflet.gotext import go_duration, go_quote

WATCHDOG_USEC_ENV: Final = "WATCHDOG_USEC"
WATCHDOG_PID_ENV: Final = "WATCHDOG_PID"
MINIMAL_NOTIFY_INTERVAL: Final = 1.0
"""watchdog_linux.go minimalNotifyInterval: a timeout of at most this many seconds is refused."""
SYNC_LOOP_MIN_DURATION: Final = 300.0
"""kubelet.go SyncLoopHealthCheck: the loop may go this long (or twice syncFrequency, if longer) unentered."""
LOG_FLUSH_PERIOD: Final = 60.0
"""healthz.LogHealthz: the log is flushed this often ..."""
LOG_BLOCKED_AFTER: Final = 120.0
"""... and counts as blocked when the last flush ended this long ago."""

# Upstream's messages, as its log lines and errors say them.
NOT_ENABLED: Final = "Systemd watchdog is not enabled"
NOT_STARTED: Final = ("Systemd watchdog is not enabled or the interval is invalid, so health checking will not be "
                      "started.")
STARTING: Final = "Starting systemd watchdog with interval"
UNHEALTHY: Final = "Do not notify watchdog this iteration as the kubelet is reportedly not healthy"
RETRYING: Final = "Failed to notify systemd watchdog, retrying"
NOTIFIED: Final = "Watchdog plugin notified"
FAILED: Final = "Failed to notify watchdog"
NOT_SUPPORTED: Final = ("failed to notify systemd watchdog, notification not supported - (i.e. NOTIFY_SOCKET is "
                        "unset)")
TIMED_OUT: Final = "timed out waiting for the condition"
"""apimachinery wait.ErrWaitTimeout: every try of a round failed to send."""
SYNC_LOOP_SLOW: Final = "sync Loop took longer than expected"
LOGGING_BLOCKED: Final = "logging blocked"

_INT64_MIN, _INT64_MAX = -(2 ** 63), 2 ** 63 - 1
_DECIMAL = re.compile(r"[+-]?[0-9]+", re.ASCII)


class WatchdogConfigError(ValueError):
    """$WATCHDOG_USEC or $WATCHDOG_PID cannot be used: upstream's kubelet refuses to start."""


@dataclasses.dataclass(frozen=True)
class Backoff:
    """apimachinery ``wait.Backoff`` without a cap: the first wait, its growth, the jitter, the tries."""

    duration: float
    factor: float
    jitter: float
    steps: int


NOTIFY_RETRY: Final = Backoff(duration=1.0, factor=2.0, jitter=0.1, steps=2)
"""watchdog_linux.go retryBackoff: two tries a round, about a second apart."""


def atoi(name: str, text: str) -> int:
    """Go's ``strconv.Atoi`` (decimal, an optional sign, 64 bits), its errors as go-systemd wraps them."""
    if not _DECIMAL.fullmatch(text):
        raise WatchdogConfigError(f"error converting {name}: strconv.Atoi: parsing {go_quote(text)}: invalid syntax")
    value = int(text)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise WatchdogConfigError(f"error converting {name}: strconv.Atoi: parsing {go_quote(text)}: value out of "
                                  f"range")
    return value


def watchdog_timeout(environ: Mapping[str, str], pid: int) -> float | None:
    """go-systemd ``SdWatchdogEnabled``: systemd's timeout in seconds, or None when it expects no pings from
    process `pid` ($WATCHDOG_USEC unset or empty; $WATCHDOG_PID naming another process). WatchdogConfigError, in
    go-systemd's words, for a value that is not a number or a timeout that is not positive."""
    usec_text = environ.get(WATCHDOG_USEC_ENV, "")
    if not usec_text:
        return None
    usec = atoi(WATCHDOG_USEC_ENV, usec_text)
    if usec <= 0:
        raise WatchdogConfigError(f"error {WATCHDOG_USEC_ENV} must be a positive number")
    pid_text = environ.get(WATCHDOG_PID_ENV, "")
    if pid_text and atoi(WATCHDOG_PID_ENV, pid_text) != pid:
        return None
    return usec / 1e6


def notify_interval(environ: Mapping[str, str], pid: int) -> float | None:
    """watchdog_linux.go ``NewHealthChecker``: how often process `pid` pings (half of systemd's timeout), or None
    without a watchdog. WatchdogConfigError with upstream's message (the kubelet then does not start) for what
    `watchdog_timeout` refuses and for a timeout of a second or less."""
    try:
        timeout = watchdog_timeout(environ, pid)
    except WatchdogConfigError as exc:
        raise WatchdogConfigError(f"configure watchdog: {exc}") from None
    if timeout is None:
        return None
    if timeout <= MINIMAL_NOTIFY_INTERVAL:
        raise WatchdogConfigError(f"configure watchdog timeout too small: {go_duration(timeout)}")
    return timeout / 2


def first_failure(results: Iterable[tuple[str, str]]) -> str:
    """watchdog_linux.go ``doCheck``: the first failed check of (name, error) results (an error "" passes) as
    upstream words it, "" when all pass; a lazy iterable is read no further than that failure."""
    for name, error in results:
        if error:
            return f"checker {name} failed: {error}"
    return ""


def should_notify(results: Iterable[tuple[str, str]]) -> bool:
    """Whether this round pings systemd: only when every check passes."""
    return not first_failure(results)


def sync_loop_error(last_entry: float | None, now: float, resync_period: float) -> str:
    """kubelet.go ``SyncLoopHealthCheck``: "" unless the loop was entered once and not since for longer than twice
    syncFrequency (at least five minutes); a loop never entered yet is healthy."""
    limit = max(2 * resync_period, SYNC_LOOP_MIN_DURATION)
    if last_entry is not None and now > last_entry + limit:
        return SYNC_LOOP_SLOW
    return ""


def log_error(last_verified: float, now: float) -> str:
    """healthz ``LogHealthz``: "" while the last flush of the log ended less than two minutes ago."""
    return "" if now - last_verified < LOG_BLOCKED_AFTER else LOGGING_BLOCKED


def retry_delays(backoff: Backoff, randoms: Iterable[float]) -> list[float]:
    """apimachinery ``ExponentialBackoffWithContext``'s waits between `backoff.steps` tries (one fewer than the
    tries), each jittered by one of `randoms` in [0, 1) as ``wait.Jitter``."""
    delays, duration = [], backoff.duration
    draws = iter(randoms)
    for _ in range(backoff.steps - 1):
        delays.append(duration + (next(draws) * backoff.jitter * duration if backoff.jitter > 0 else 0.0))
        duration *= backoff.factor
    return delays


__all__ = ["FAILED", "LOGGING_BLOCKED", "LOG_BLOCKED_AFTER", "LOG_FLUSH_PERIOD", "MINIMAL_NOTIFY_INTERVAL",
           "NOTIFIED", "NOTIFY_RETRY", "NOT_ENABLED", "NOT_STARTED", "NOT_SUPPORTED", "RETRYING", "STARTING",
           "SYNC_LOOP_MIN_DURATION", "SYNC_LOOP_SLOW", "TIMED_OUT", "UNHEALTHY", "WATCHDOG_PID_ENV",
           "WATCHDOG_USEC_ENV", "Backoff", "WatchdogConfigError", "atoi", "first_failure", "log_error",
           "notify_interval", "retry_delays", "should_notify", "sync_loop_error", "watchdog_timeout"]
