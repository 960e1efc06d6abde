"""Container log rotation and the ``/var/log/containers`` symlinks, as decisions (upstream
pkg/kubelet/logs/container_log_manager.go and pkg/kubelet/kuberuntime/legacy.go).

Pure: given the names and sizes of the files next to a container's log, `plan_rotation` says what to remove,
what to compress and what to rename, in upstream rotateLog's order; `kopflet.logs.manager` carries it out.
Keeping the decision here lets it be tested table-driven, without files, clocks or a runtime.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import posixpath
from collections.abc import Mapping
from fractions import Fraction

from kopflet.api.qos import QuantityError, parse_quantity

DEFAULT_MAX_SIZE = 10 * 1024 * 1024
"""``containerLogMaxSize``'s default, ``10Mi`` (apis/config/v1beta1 defaults.go)."""
DEFAULT_MAX_FILES = 5
"""``containerLogMaxFiles``'s default."""
DEFAULT_MAX_WORKERS = 1
"""``containerLogMaxWorkers``'s default: containers rotated at the same time."""
DEFAULT_MONITOR_INTERVAL = 10.0
"""``containerLogMonitorInterval``'s default in seconds: how often the logs' sizes are checked."""
MIN_MONITOR_INTERVAL = 3.0
"""Upstream validation refuses a monitor interval under 3s."""

TIMESTAMP_FORMAT = "%Y%m%d-%H%M%S"
"""Upstream timestampFormat ``20060102-150405``: the suffix of a rotated log (``0.log.20240506-070809``)."""
COMPRESS_SUFFIX = ".gz"
TMP_SUFFIX = ".tmp"

CONTAINER_LOGS_DIR = "/var/log/containers"
"""Upstream legacyContainerLogsDir: where log collectors (fluentd, promtail...) look for every container's log."""
LOG_SUFFIX = ".log"
EXT4_MAX_FILE_NAME_LEN = 255
"""A symlink's name is cut to fit ext4's file name limit (bytes), as upstream logSymlink does."""


# ------------------------------------------------------------------------------------------------- policy


@dataclasses.dataclass(frozen=True)
class LogRotatePolicy:
    """Upstream LogRotatePolicy: rotate a running container's log once it reaches `max_size` bytes and keep at
    most `max_files` files per log (the live one included). A negative `max_size` disables rotation, as
    upstream's stub manager does."""

    max_size: int = DEFAULT_MAX_SIZE
    max_files: int = DEFAULT_MAX_FILES

    def __post_init__(self) -> None:
        # Upstream NewContainerLogManager refuses MaxFiles <= 1: the live file plus the newest rotated one.
        if self.max_files <= 1:
            raise ValueError(f"invalid MaxFiles {self.max_files}, must be > 1")

    @property
    def enabled(self) -> bool:
        """Upstream: `parseMaxSize < 0` gives the stub manager, which rotates nothing."""
        return self.max_size >= 0


def parse_max_size(text: str | int) -> int:
    """``containerLogMaxSize`` (a quantity such as ``10Mi``) in bytes (upstream parseMaxSize); ValueError with
    the message upstream fails with when it is not a quantity or not a whole number of bytes."""
    try:
        value = parse_quantity(text)
    except QuantityError as exc:
        raise ValueError(f"failed to parse container log max size {str(text)!r}: {exc}") from None
    if value.denominator != 1 or not -(2**63) <= value < 2**63:  # quantity.AsInt64 fails
        raise ValueError(f"failed to parse container log max size {str(text)!r}: invalid max log size")
    return int(value)


def validate_settings(max_files: int, max_workers: int = DEFAULT_MAX_WORKERS,
                      monitor_interval: float | Fraction = DEFAULT_MONITOR_INTERVAL) -> list[str]:
    """The errors upstream's KubeletConfiguration validation gives for the log rotation fields, in its order
    and wording; empty when they are valid. (``containerLogMaxSize`` is checked by `parse_max_size`.)"""
    errors = []
    if max_workers < 1:
        errors.append("invalid configuration: containerLogMaxWorkers must be greater than or equal to 1")
    if monitor_interval < MIN_MONITOR_INTERVAL:
        errors.append("invalid configuration: containerLogMonitorInterval must be a positive time duration "
                      "greater than or equal to 3s")
    if max_files <= 1:
        errors.append("invalid configuration: containerLogMaxFiles must be greater than 1")
    return errors


# --------------------------------------------------------------------------------------------------- plan


@dataclasses.dataclass(frozen=True)
class RotationPlan:
    """What one round does to a container's log, in this order; every path is absolute.

    `missing`: the live log is not there; upstream asks the runtime to reopen it (ReopenContainerLog), looks
    again and only then decides. Otherwise: `remove` the leftovers of failed rotations and the oldest rotated
    logs, `compress` each path in it to ``<path>.gz``, then rename the live log to `rotate_to` and have the
    runtime reopen it. A plan with nothing to do is ``RotationPlan()``.
    """

    missing: bool = False
    remove: tuple[str, ...] = ()
    compress: tuple[str, ...] = ()
    rotate_to: str | None = None

    @property
    def empty(self) -> bool:
        return not (self.missing or self.remove or self.compress or self.rotate_to)


def rotated_name(log_path: str, now: dt.datetime) -> str:
    """``<log>.<YYYYmmdd-HHMMSS>``, the rotated log's name (upstream rotateLatestLog; its clock's local time)."""
    return f"{log_path}.{now.strftime(TIMESTAMP_FORMAT)}"


def _in_use(name: str, names: frozenset[str]) -> bool:
    """Upstream isInUse: temporary files are leftovers, compressed logs are kept, and an uncompressed log whose
    compressed twin exists is a leftover of a compression interrupted before the original was removed."""
    if name.endswith(TMP_SUFFIX):
        return False
    if name.endswith(COMPRESS_SUFFIX):
        return True
    return name + COMPRESS_SUFFIX not in names


def split_unused(rotated: list[str]) -> tuple[list[str], list[str]]:
    """Upstream filterUnusedLogs: (in use, unused) among the rotated files of one log, order kept."""
    names = frozenset(rotated)
    in_use = [n for n in rotated if _in_use(n, names)]
    return in_use, [n for n in rotated if not _in_use(n, names)]


def plan_rotation(log_path: str, files: Mapping[str, int], policy: LogRotatePolicy, now: dt.datetime) -> RotationPlan:
    """Upstream processContainer + rotateLog for one running container's log.

    `files` are the names (not paths) and sizes of the files in the log's directory. Nothing happens until the
    live log reaches `policy.max_size` (upstream skips when ``size < MaxSize``), so leftovers and excess files
    are only cleaned on a rotation. Then, as rotateLog: cleanupUnusedLogs, removeExcessLogs (keep the newest
    ``max_files - 2``: with the new live file and the one being rotated there are at most ``max_files``),
    compress every kept rotated log that is not yet (so only the newest rotated log stays readable as text,
    for collectors still reading it), and rotate the live log.
    """
    if not policy.enabled:
        return RotationPlan()
    directory, base = posixpath.split(log_path)
    if base not in files:
        return RotationPlan(missing=True)
    if files[base] < policy.max_size:
        return RotationPlan()
    # Upstream globs "<log>.*" (every rotated, compressed or temporary file of this log); sort.Strings orders
    # the timestamps oldest first.
    rotated = sorted(n for n in files if n.startswith(base + "."))
    in_use, unused = split_unused(rotated)
    keep = max(policy.max_files - 2, 0)
    cut = max(len(in_use) - keep, 0)  # from the oldest, so a `kubectl logs` on a newer one is not broken
    excess, kept = in_use[:cut], in_use[cut:]

    def full(names: list[str]) -> tuple[str, ...]:
        return tuple(posixpath.join(directory, n) for n in names)

    return RotationPlan(
        remove=full(unused) + full(excess),
        compress=full([n for n in kept if not n.endswith(COMPRESS_SUFFIX)]),
        rotate_to=rotated_name(log_path, now),
    )


def all_logs(log_path: str, names: list[str]) -> list[str]:
    """Upstream GetAllLogs: a container's logs oldest first, the rotated ones still in use and then the live
    one; `names` are the file names in the log's directory."""
    directory, base = posixpath.split(log_path)
    rotated = sorted(n for n in names if n.startswith(base + "."))
    in_use, _ = split_unused(rotated)
    return [posixpath.join(directory, n) for n in in_use] + [log_path]


# ----------------------------------------------------------------------------------------------- symlinks


def container_log_symlink(logs_dir: str, pod_name: str, namespace: str, container_name: str,
                          container_id: str) -> str:
    """``<logs_dir>/<pod>_<namespace>_<container>-<id>.log`` (upstream legacyLogSymlink/logSymlink), the link
    collectors read a container's log through; the name is cut to ext4's 255 bytes, ``.log`` kept.

    Cut by bytes as Go does; a multi-byte character cut in two survives as surrogate escapes, which the os
    module writes back as the same bytes (Kubernetes names are ASCII, so this does not happen in practice).
    """
    name = f"{pod_name}_{namespace}_{container_name}-{container_id}".encode("utf-8", "surrogateescape")
    name = name[:EXT4_MAX_FILE_NAME_LEN - len(LOG_SUFFIX)]
    return posixpath.join(logs_dir, name.decode("utf-8", "surrogateescape") + LOG_SUFFIX)


def container_id_from_symlink(path: str) -> str | None:
    """The container ID at the end of a symlink's name, None when there is none (upstream
    getContainerIDFromLegacyLogSymlink: after the last ``-``, before ``.log``, at least 6 characters).

    Upstream splits the whole path, so a name without ``-`` yields a bogus ID whose status lookup then fails;
    here it is None. Either way the dangling link is removed."""
    base = posixpath.basename(path)
    if "-" not in base:
        return None
    last = base.rsplit("-", 1)[-1]
    if not last.endswith(LOG_SUFFIX):
        return None
    container_id = last[:-len(LOG_SUFFIX)]
    return container_id if len(container_id) >= 6 else None


__all__ = [
    "CONTAINER_LOGS_DIR",
    "DEFAULT_MAX_FILES",
    "DEFAULT_MAX_SIZE",
    "DEFAULT_MAX_WORKERS",
    "DEFAULT_MONITOR_INTERVAL",
    "LogRotatePolicy",
    "RotationPlan",
    "all_logs",
    "container_id_from_symlink",
    "container_log_symlink",
    "parse_max_size",
    "plan_rotation",
    "rotated_name",
    "split_unused",
    "validate_settings",
]
