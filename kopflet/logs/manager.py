"""Rotating the running containers' logs, and the ``/var/log/containers`` symlinks (upstream
pkg/kubelet/logs/container_log_manager.go; the symlinks of kuberuntime_container.go and kuberuntime_gc.go).

The decisions are `kopflet.logs.rotation`'s; this module does the I/O: every filesystem call runs in
`asyncio.to_thread`, every CRI call carries the client's deadline (`CriClient` sets one on each RPC), and a
failure is logged and left to the next round, never ending the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import gzip
import logging
import os
import shutil
from collections.abc import Callable

from cri_client import CriClient, CriError
from cri_client import types as cri
from kopflet.logs import rotation
from kopflet.logs.rotation import COMPRESS_SUFFIX, TMP_SUFFIX, LogRotatePolicy, RotationPlan
from kopflet.rounds import log_failed_round

logger = logging.getLogger(__name__)

CONTAINER_GC_PERIOD = 60.0
"""Upstream ContainerGCPeriod: how often the container GC (which removes dead symlinks) runs."""
SYMLINK_DIR_MODE = 0o755
"""Upstream creates ContainerLogsDir 0755 at start when it is missing."""


def _local_now() -> dt.datetime:
    """Upstream formats the rotation timestamp in the kubelet's local time (clock.RealClock)."""
    return dt.datetime.now()


# ------------------------------------------------------------------------------------ blocking file work


def scan_log_files(log_path: str) -> dict[str, int]:
    """Names and sizes of the log and its rotated, compressed and temporary files (``<log>.*``) in its
    directory (blocking). Files that vanish while listed are left out; no directory gives {}."""
    directory, base = os.path.split(log_path)
    found: dict[str, int] = {}
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return found
    for entry in entries:
        if entry.name == base or entry.name.startswith(base + "."):
            with contextlib.suppress(FileNotFoundError):
                found[entry.name] = entry.stat().st_size
    return found


def _remove(path: str) -> None:
    """Remove a file; one already gone is fine (a concurrent cleanup got there first)."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


def compress_log(path: str) -> None:
    """Gzip `path` to ``<path>.gz`` and remove `path` (blocking; upstream compressLog).

    As upstream: written to ``<path>.gz.tmp`` first and renamed, so a crash never leaves a truncated ``.gz``
    that would be kept (the next rotation removes the ``.tmp``, and the text original whose ``.gz`` exists);
    the mode of the original is kept. No name or time in the gzip header, as Go's gzip.Writer.
    """
    compressed = path + COMPRESS_SUFFIX
    tmp = compressed + TMP_SUFFIX
    mode = os.stat(path).st_mode & 0o7777
    try:
        with open(path, "rb") as src:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
            with os.fdopen(fd, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as out:
                shutil.copyfileobj(src, out, 1024 * 1024)
        os.rename(tmp, compressed)
    finally:
        _remove(tmp)  # best effort, as upstream's deferred Remove
    os.remove(path)


# ----------------------------------------------------------------------------------------------- symlinks


def _missing(path: str) -> bool:
    """Upstream's ``os.IsNotExist(Stat(path))``: only "not there" counts, not a stat that failed otherwise."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


def _symlink(target: str, link: str) -> None:
    """Create `link` -> `target`, making the directory first (blocking)."""
    os.makedirs(os.path.dirname(link), mode=SYMLINK_DIR_MODE, exist_ok=True)
    os.symlink(target, link)


async def create_container_symlink(logs_dir: str, pod_name: str, namespace: str, container_name: str,
                                   container_id: str, log_path: str) -> str | None:
    """Link ``<logs_dir>/<pod>_<ns>_<container>-<id>.log`` to the container's log file `log_path` (absolute);
    the link's path, or None when none was made. Never raises: a failure is logged, as upstream startContainer
    does, because a missing link must not fail the container.

    Only when the log file exists (or cannot be checked): a link to nothing would only be removed again by
    the dangling-link sweep (upstream: the journald logging driver case).
    """
    link = rotation.container_log_symlink(logs_dir, pod_name, namespace, container_name, container_id)
    try:
        if await asyncio.to_thread(_missing, log_path):
            return None
        await asyncio.to_thread(_symlink, log_path, link)
    except OSError as exc:
        logger.error(f"Failed to create legacy symbolic link {link} to the log {log_path} of container "
                     f"{container_id}: {exc}")
        return None
    return link


async def remove_container_symlink(logs_dir: str, pod_name: str, namespace: str, container_name: str,
                                   container_id: str) -> None:
    """Remove the container's link, if any (upstream removeContainerLog, before RemoveContainer). Never raises:
    a link left behind dangles once the log is gone and the sweep removes it."""
    link = rotation.container_log_symlink(logs_dir, pod_name, namespace, container_name, container_id)
    try:
        await asyncio.to_thread(_remove, link)
    except OSError as exc:
        logger.error(f"Failed to remove container {container_id} log legacy symbolic link {link}: {exc}")


def _dangling_links(logs_dir: str) -> list[str]:
    """The ``*.log`` entries of `logs_dir` whose target does not exist (blocking; os.stat follows the link)."""
    try:
        entries = list(os.scandir(logs_dir))
    except FileNotFoundError:
        return []
    dangling = []
    for entry in entries:
        if entry.name.endswith(rotation.LOG_SUFFIX) and _missing(entry.path):
            dangling.append(entry.path)
    return dangling


async def sweep_dangling_symlinks(cri_client: CriClient, logs_dir: str) -> int:
    """Remove the links under `logs_dir` whose log file is gone (upstream evictContainers' "Remove dead
    container log symlinks"); how many were removed.

    A link whose container the runtime still reports as not exited is kept: its log is missing only for the
    moment between rotation's rename and the runtime's reopen (upstream issue 52172). As upstream, a link is
    removed when its container cannot be looked up (NOT_FOUND and any other error alike) or its name holds no
    container ID.
    """
    removed = 0
    for link in await asyncio.to_thread(_dangling_links, logs_dir):
        container_id = rotation.container_id_from_symlink(link)
        if container_id is not None:
            try:
                status = await cri_client.containers.status(container_id)
            except CriError as exc:
                logger.info(f"Error getting ContainerStatus for containerID {container_id}: {exc}")
            else:
                if status.state != cri.ContainerState.EXITED:
                    logger.debug(f"Container {container_id} is still running, not removing symlink {link}")
                    continue
        try:
            await asyncio.to_thread(_remove, link)
        except OSError as exc:
            logger.error(f"Failed to remove container log dead symlink {link}: {exc}")
        else:
            removed += 1
            logger.debug(f"Removed symlink {link}")
    return removed


# ----------------------------------------------------------------------------------------------- rotation


class ContainerLogManager:
    """Upstream containerLogManager: every `monitor_interval` seconds, each running container's log is checked
    and rotated by `policy`, at most `max_workers` containers at a time. With `symlink_dir`, the directory is
    made at start and its dangling links are swept every `gc_period` seconds (upstream does that in the
    container GC, which kopflet has no node-wide loop for).

    Wiring: construct with plain values and run `run()` as a task; cancel it to stop.
    """

    def __init__(self, cri_client: CriClient, policy: LogRotatePolicy | None = None, *,
                 monitor_interval: float = rotation.DEFAULT_MONITOR_INTERVAL,
                 max_workers: int = rotation.DEFAULT_MAX_WORKERS, symlink_dir: str | None = None,
                 gc_period: float = CONTAINER_GC_PERIOD, clock: Callable[[], dt.datetime] = _local_now) -> None:
        if max_workers < 1:
            raise ValueError("invalid configuration: containerLogMaxWorkers must be greater than or equal to 1")
        self.cri = cri_client
        self.policy = policy if policy is not None else LogRotatePolicy()
        self.monitor_interval, self.max_workers = monitor_interval, max_workers
        self.symlink_dir, self.gc_period, self.clock = symlink_dir, gc_period, clock
        # Upstream holds one mutex over a rotation round (and Clean): rounds never overlap here, as each round
        # is awaited before the next starts; the semaphore is the worker pool.
        self._workers = asyncio.Semaphore(max_workers)

    async def run(self) -> None:
        """The rotation loop and, with a symlink directory, the dangling-link sweep; runs until cancelled."""
        loops = []
        if self.policy.enabled:
            logger.info(f"Initializing container log rotate workers: workers={self.max_workers} "
                        f"monitorPeriod={self.monitor_interval}s")
            loops.append(self._rotate_forever())
        if self.symlink_dir is not None:
            try:
                await asyncio.to_thread(os.makedirs, self.symlink_dir, SYMLINK_DIR_MODE, True)
            except OSError as exc:
                logger.error(f"failed to create directory {self.symlink_dir!r}: {exc}")
            loops.append(self._sweep_forever())
        await asyncio.gather(*loops)

    async def _rotate_forever(self) -> None:
        while True:
            try:
                await self.rotate_logs()
            except Exception as exc:  # the loop must outlive anything a round does
                log_failed_round(logger, "Failed to rotate container logs", exc)
            await asyncio.sleep(self.monitor_interval)

    async def _sweep_forever(self) -> None:
        assert self.symlink_dir is not None
        while True:
            try:
                await sweep_dangling_symlinks(self.cri, self.symlink_dir)
            except Exception as exc:  # as above
                log_failed_round(logger, "Failed to remove dead container log symlinks", exc)
            await asyncio.sleep(self.gc_period)

    async def rotate_logs(self) -> None:
        """One round (upstream rotateLogs): every running container, `max_workers` at a time. Only running ones:
        the others write nothing more, and a rotation would leave them an empty live log. CriError when the
        containers cannot be listed."""
        containers = await self.cri.containers.list(cri.ContainerFilter(state=cri.ContainerState.RUNNING))
        ids = [c.id for c in containers if c.state == cri.ContainerState.RUNNING]
        await asyncio.gather(*(self._process_limited(cid) for cid in ids))

    async def _process_limited(self, container_id: str) -> None:
        async with self._workers:
            try:
                await self.process_container(container_id)
            except Exception as exc:  # a bug for one container must not leave the round's others running unawaited
                log_failed_round(logger, f"Failed to rotate the log of container {container_id}", exc)

    async def process_container(self, container_id: str) -> None:
        """Check one container's log and rotate it when due (upstream processContainer). Never raises (but
        cancellation): what fails is logged and tried again next round."""
        try:
            status = await self.cri.containers.status(container_id)
        except CriError as exc:
            logger.error(f"Failed to get container status of {container_id}: {exc}")
            return
        path = status.log_path
        if not path:
            return  # a runtime that keeps no log file (upstream would fail to stat "")
        try:
            plan = await self._plan(path)
            if plan.missing:
                # Upstream: the live log is gone (a rotation interrupted between rename and reopen, say), so
                # the runtime is asked to reopen it, then it is looked at again.
                try:
                    await self.cri.containers.reopen_log(container_id)
                except CriError as exc:
                    logger.error(f"Container log {path} of {container_id} doesn't exist, "
                                 f"reopen container log failed: {exc}")
                    return
                plan = await self._plan(path)
                if plan.missing:
                    logger.error(f"Failed to stat container log {path} of {container_id} after reopen")
                    return
            if not plan.empty:
                await self.rotate_log(container_id, path, plan)
        except (OSError, CriError) as exc:
            logger.error(f"Failed to rotate log {path} of container {container_id}: {exc}")

    async def _plan(self, path: str) -> RotationPlan:
        files = await asyncio.to_thread(scan_log_files, path)
        return rotation.plan_rotation(path, files, self.policy, self.clock())

    async def rotate_log(self, container_id: str, path: str, plan: RotationPlan) -> None:
        """Carry out `plan` in upstream rotateLog's order; the first failure stops it (OSError or CriError)."""
        for name in plan.remove:  # cleanupUnusedLogs, then removeExcessLogs (oldest first)
            await asyncio.to_thread(_remove, name)
        for name in plan.compress:
            await asyncio.to_thread(compress_log, name)
        if plan.rotate_to is not None:
            await self.rotate_latest_log(container_id, path, plan.rotate_to)

    async def rotate_latest_log(self, container_id: str, path: str, rotated: str) -> None:
        """Rename the live log aside, uncompressed so the runtime and collectors can finish with it, and have the
        runtime reopen the path (upstream rotateLatestLog). When the reopen fails the rename is undone, so the
        next round tries again; CriError then."""
        await asyncio.to_thread(os.rename, path, rotated)
        try:
            await self.cri.containers.reopen_log(container_id)
        except CriError:
            # Not on cancellation (shutdown): the reopen may have happened, and renaming back would then bury
            # the new file; left as it is, the next start finds the live log missing and asks for a reopen.
            try:
                await asyncio.to_thread(os.rename, rotated, path)
            except OSError as exc:
                # Upstream: "This shouldn't happen"; the original log would be lost on a restart now.
                logger.error(f"Failed to rename rotated log {rotated} back to {path} for container "
                             f"{container_id}: {exc}")
            raise
        logger.debug(f"Rotated log {path} of container {container_id} to {rotated}")


__all__ = [
    "CONTAINER_GC_PERIOD",
    "ContainerLogManager",
    "compress_log",
    "create_container_symlink",
    "remove_container_symlink",
    "scan_log_files",
    "sweep_dangling_symlinks",
]
