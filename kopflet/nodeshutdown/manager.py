"""The node shutdown manager (upstream nodeshutdown_manager_linux.go managerImpl): holds a logind delay inhibitor
lock, and when logind announces the shutdown (PrepareForShutdown true) marks the node as shutting down (Ready
False, new pods rejected), kills the pods group by group in ascending priority, each group within its grace
period, then lets the lock go so the shutdown proceeds. A cancelled shutdown (PrepareForShutdown false) takes the
lock again. The rules are in `rules`; the D-Bus side in `systemd`."""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from kopflet import checkpointmanager
from kopflet.lifecycle import admission
from kopflet.nodeshutdown import rules
from kopflet.nodeshutdown.systemd import DBusError, LogindBus

logger = logging.getLogger("kopflet.nodeshutdown")

DBUS_RECONNECT_PERIOD = rules.DBUS_RECONNECT_PERIOD
INHIBIT_DELAY_POLL_DELAYS = rules.INHIBIT_DELAY_POLL_DELAYS
CLEANED_UP_POLL = 0.5


class Bus(Protocol):
    """What the manager needs of the system bus (`LogindBus`; a fake in unit tests)."""

    async def current_inhibit_delay(self) -> float: ...
    async def inhibit_shutdown(self) -> int: ...
    def release_inhibit_lock(self, lock: int) -> None: ...
    async def reload_logind_conf(self) -> None: ...
    async def monitor_shutdown(self, on_event: Callable[[bool], None], on_bad: Callable[[str], None]) -> None: ...
    async def wait_for_disconnect(self) -> None: ...
    def override_inhibit_delay(self, seconds: float) -> None: ...
    def close(self) -> None: ...


class ActivePod(Protocol):
    uid: str


class ShutdownManager:
    """One per node; `periods` empty means off (upstream's managerStub): no bus, everything admitted."""

    def __init__(self, periods: Sequence[rules.ShutdownGracePeriodByPodPriority], *, state_file: Path,
                 active_pods: Callable[[], Sequence[tuple[Any, Mapping[str, Any]]]],
                 kill: Callable[[str, dict[str, Any], int], bool],
                 cleaned_up: Callable[[str], Awaitable[bool]],
                 sync_node_status: Callable[[], Awaitable[None]],
                 node_event: Callable[[str, str], None],
                 metrics: Any = None,
                 connect: Callable[[], Awaitable[Bus]] = LogindBus.connect) -> None:
        self.periods = tuple(periods)
        self.state_file = state_file
        self._active_pods, self._kill, self._cleaned_up = active_pods, kill, cleaned_up
        self._sync_node_status, self._node_event = sync_node_status, node_event
        self._metrics, self._connect = metrics, connect
        self._bus: Bus | None = None
        self._lock: int | None = None
        self._lock_owner: Bus | None = None
        """The connection whose Inhibit gave `_lock`: the descriptor is ours, closed through it even once the
        connection is gone (upstream ReleaseInhibitLock is a plain close)."""
        self._events: asyncio.Queue[bool] = asyncio.Queue()
        self.shutting_down = False
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def enabled(self) -> bool:
        return bool(self.periods)

    # ------------------------------------------------------------------------------------- the node's view

    def shutdown_status(self) -> str | None:
        """The Ready condition's error while the node shuts down (upstream ShutdownStatus)."""
        return rules.SHUTTING_DOWN_ERROR if self.shutting_down else None

    def admit(self) -> admission.Rejection | None:
        return rules.admit(self.shutting_down)

    # ------------------------------------------------------------------------------------- start and watch

    async def start(self) -> asyncio.Task[None] | None:
        """upstream Start: the first connection must succeed (DBusError, OSError, TimeoutError otherwise: the node
        logs it and runs on without the manager); after that, a lost bus is reconnected every second. Returns the
        watching task (None when off)."""
        if not self.enabled:
            return None
        logger.info(f"Creating node shutdown manager: shutdownGracePeriodByPodPriority {self._describe()}")
        await self._start_once()
        await self._restore_metrics()
        return asyncio.create_task(self._run(), name="node-shutdown-manager")

    def _describe(self) -> str:
        """The periods as Go's %v prints the slice: [{0 20} {2000000000 10}]."""
        return "[" + " ".join(f"{{{p.priority} {p.shutdown_grace_period_seconds}}}" for p in self.periods) + "]"

    async def _start_once(self) -> None:
        """upstream start: connect, raise logind's InhibitDelayMaxSec when it is below the requested period (a
        drop-in and a reload), take the lock, watch PrepareForShutdown."""
        bus = await self._connect()
        if self._bus is not None:
            self._bus.close()
        self._bus = bus
        try:
            current = await bus.current_inhibit_delay()
            requested = rules.period_requested(self.periods)
            if requested > current:
                try:
                    await asyncio.to_thread(bus.override_inhibit_delay, requested)
                except DBusError as exc:
                    raise DBusError(f"unable to override inhibit delay by shutdown manager: {exc}") from exc
                await bus.reload_logind_conf()
                # upstream: wait.ExponentialBackoff, a first read at once, then after 100 ms, 200 ms ...
                updated, attempts = await bus.current_inhibit_delay(), 1
                while requested > updated:
                    if attempts > len(INHIBIT_DELAY_POLL_DELAYS):
                        raise DBusError(rules.inhibit_delay_error(attempts, requested, updated))
                    logger.debug(f"InhibitDelayMaxSec still less than requested, retrying: attempt {attempts}, "
                                 f"current {updated}, requested {requested}")
                    await asyncio.sleep(INHIBIT_DELAY_POLL_DELAYS[attempts - 1])
                    attempts += 1
                    updated = await bus.current_inhibit_delay()
            await self._acquire_lock()
            try:
                await bus.monitor_shutdown(self._events.put_nowait, lambda text: logger.error(text))
            except (TimeoutError, DBusError, OSError) as exc:
                lock, self._lock, self._lock_owner = self._lock, None, None
                if lock is not None:
                    try:
                        bus.release_inhibit_lock(lock)
                    except DBusError as release:
                        raise DBusError(f"failed releasing inhibitLock: {release} and failed monitoring shutdown: "
                                        f"{exc}") from exc
                raise DBusError(f"failed to monitor shutdown: {exc}") from exc
        except BaseException:
            bus.close()
            self._bus = None
            raise

    async def _acquire_lock(self) -> None:
        """A new lock first, then the old one let go (upstream acquireInhibitLock)."""
        assert self._bus is not None
        lock = await self._bus.inhibit_shutdown()
        self._release_lock(quiet=True)  # upstream ignores the old one's close error: it is gone either way
        self._lock, self._lock_owner = lock, self._bus

    def _release_lock(self, *, quiet: bool = False) -> None:
        lock, owner = self._lock, self._lock_owner
        self._lock, self._lock_owner = None, None
        if lock is None or owner is None:
            return
        try:
            owner.release_inhibit_lock(lock)
        except DBusError as exc:
            if not quiet:
                logger.warning(str(exc))

    async def _run(self) -> None:
        """Handles each PrepareForShutdown in turn; a lost bus is connected again every second (upstream Start's
        loop)."""
        while True:
            bus = self._bus
            if bus is not None:
                await self._watch(bus)
                logger.error("Ended to watching the node for shutdown events")
            while True:
                await asyncio.sleep(DBUS_RECONNECT_PERIOD)
                logger.debug("Restarting watch for node shutdown events")
                try:
                    await self._start_once()
                    break
                except (TimeoutError, DBusError, OSError) as exc:
                    logger.error(f"Unable to watch the node for shutdown events: {exc}")
                except Exception:  # a bug must not end the watch for good: logged, tried again
                    logger.exception("Unable to watch the node for shutdown events")

    async def _watch(self, bus: Bus) -> None:
        disconnected = asyncio.create_task(bus.wait_for_disconnect())
        event: asyncio.Task[bool] | None = None
        try:
            while True:
                event = asyncio.create_task(self._events.get())
                await asyncio.wait({event, disconnected}, return_when=asyncio.FIRST_COMPLETED)
                if not event.done():
                    return
                await self._on_event(event.result())
        finally:
            disconnected.cancel()
            if event is not None:
                event.cancel()

    async def _on_event(self, shutting_down: bool) -> None:
        logger.info(f"Shutdown manager detected new shutdown event: {'shutdown' if shutting_down else 'cancelled'}")
        self._node_event(rules.EVENT_REASON, rules.EVENT_SHUTDOWN_MESSAGE if shutting_down
                         else rules.EVENT_CANCELLED_MESSAGE)
        self.shutting_down = shutting_down
        if not shutting_down:
            try:
                await self._acquire_lock()
            except (TimeoutError, DBusError, OSError) as exc:
                logger.warning(str(exc))  # upstream drops it: the next reconnect takes the lock again
            return
        task = asyncio.create_task(self._sync_node_status(), name="node-shutdown-status")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        try:
            await self._process_shutdown_event()
        except Exception:
            logger.exception("Shutdown manager failed to process shutdown event")

    async def _process_shutdown_event(self) -> None:
        """upstream processShutdownEvent: the start and end times kept (state file and metrics) around the kill."""
        logger.info("Shutdown manager processing shutdown event")
        pods = list(self._active_pods())
        try:
            if self._metrics is None:
                await self._kill_pods(pods)
                return
            start = _now()
            await self._store_state(start, None)
            self._metrics.graceful_shutdown_start_time.set(_unix(start))
            self._metrics.graceful_shutdown_end_time.set(0)
            try:
                await self._kill_pods(pods)
            finally:
                end = _now()
                await self._store_state(start, end)
                self._metrics.graceful_shutdown_end_time.set(_unix(end))
        finally:
            self._release_lock()
            logger.info("Shutdown manager completed processing shutdown event, node will shutdown shortly")

    async def _kill_pods(self, pods: Sequence[tuple[Any, Mapping[str, Any]]]) -> None:
        """upstream podManager.killPods: group after group in ascending priority; a group's pods killed at once,
        each with the group's grace period or its own shorter one, and waited for up to the group's period."""
        for period, members in rules.group_by_priority(self.periods, pods, _priority):
            if not members:
                continue
            now = _now()
            for pod, body in members:
                spec = body.get("spec") or {}
                own = spec.get("terminationGracePeriodSeconds")
                grace = rules.pod_grace_period(period.shutdown_grace_period_seconds,
                                               int(own) if own is not None else None)
                logger.info(f"Shutdown manager killing pod with gracePeriod: pod {_name(body)}, gracePeriod {grace}")
                status = rules.shutdown_status(body.get("status") or {}, now=now,
                                               generation=int((body.get("metadata") or {}).get("generation") or 0))
                if not self._kill(pod.uid, status, grace):
                    logger.info(f"Shutdown manager failed killing pod {_name(body)}: it has no worker any more")
            uids = [pod.uid for pod, _ in members]
            try:
                await asyncio.wait_for(self._all_cleaned_up(uids), period.shutdown_grace_period_seconds)
                logger.info(f"Done waiting for all pods in group to terminate: gracePeriod "
                            f"{period.shutdown_grace_period_seconds}, priority {period.priority}")
            except TimeoutError:
                logger.info(f"Shutdown manager pod killing time out: gracePeriod "
                            f"{period.shutdown_grace_period_seconds}, priority {period.priority}")

    async def _all_cleaned_up(self, uids: Sequence[str]) -> None:
        pending = list(uids)
        while pending:
            pending = [uid for uid in pending if not await self._cleaned_up(uid)]
            if pending:
                await asyncio.sleep(CLEANED_UP_POLL)

    # ------------------------------------------------------------------------------------- state and metrics

    async def _store_state(self, start: datetime.datetime, end: datetime.datetime | None) -> None:
        try:
            await asyncio.to_thread(checkpointmanager.write_atomically, self.state_file,
                                    rules.encode_state(start, end))
        except OSError as exc:
            logger.error(f"Failed to store graceful shutdown state: {exc}")

    async def _restore_metrics(self) -> None:
        """upstream setMetrics: the last shutdown's times from the state file, so they survive the reboot."""
        if self._metrics is None:
            return
        try:
            text = await asyncio.to_thread(checkpointmanager.read_text, self.state_file)
        except (OSError, UnicodeDecodeError) as exc:
            logger.error(f"Failed to load graceful shutdown state: {exc}")
            return
        if text is None:
            return
        data = text.encode()
        try:
            start, end = rules.decode_state(data)
        except ValueError as exc:
            logger.error(f"Failed to load graceful shutdown state: {exc}")
            return
        if start is not None:
            self._metrics.graceful_shutdown_start_time.set(_unix(start))
        if end is not None:
            self._metrics.graceful_shutdown_end_time.set(_unix(end))

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        self._release_lock()
        if self._bus is not None:
            self._bus.close()
            self._bus = None


def _priority(item: tuple[Any, Mapping[str, Any]]) -> int:
    priority = (item[1].get("spec") or {}).get("priority")
    return int(priority) if isinstance(priority, int) else 0


def _name(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _unix(t: datetime.datetime) -> float:
    return rules.metric_timestamp(t)

