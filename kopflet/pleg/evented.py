"""Runtime events wake the pods they concern at once (upstream's evented PLEG, done kopflet's way).

The relist (`kopflet.pleg.relist`) finds a container's exit within its period, a second. The runtime says it at
once: containerd's own event service on the CRI socket (containerd 1.6 has no CRI events, and on later releases
every subscriber gets every event there), else CRI's ``GetContainerEvents``. An exit wakes the pod's worker as soon
as the CRI plugin has recorded it: the event reaches every subscriber at the same moment, the CRI plugin included,
so for a few milliseconds the container's status may still say running. A removal wakes it at once.

Unlike upstream's EventedPLEG gate (a 300 s relist), the relist keeps its period: events only make a change seen
sooner, so a lost event or a broken stream costs no more than the relist period did before. A broken stream is
opened again after a capped back-off; a runtime with neither stream leaves the relist to do it all.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence

from cri_client import CriError
from cri_client import types as cri
from kopflet.metrics import KubeletMetrics
from kopflet.pleg.own_stops import OwnStops
from kopflet.pleg.relist import RuntimeCache

logger = logging.getLogger(__name__)

Source = tuple[str, Callable[[], AsyncIterator[cri.ContainerEvent]]]
"""A stream of runtime events and its name for the log."""

SETTLE_DELAYS = (0.005, 0.01, 0.02, 0.04, 0.08) + (0.1,) * 18
"""The waits between reads of an exited container's status until the CRI plugin records the exit: 2 s in all,
after which the pod is woken anyway (and the relist has looked too)."""

RETRY_DELAYS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
"""Back-off before opening a broken stream again; the last repeats."""

STREAM_SETTLED = 2.0
"""A stream open this long without an error is connected, events or not (a quiet node sends none): the success
metric counts it and the back-off starts over. A gRPC server stream answers nothing until its first message."""

WAKING = frozenset({cri.ContainerEventType.STOPPED, cri.ContainerEventType.DELETED})
"""What the agent does not cause itself: an exit, or a removal it may not have made. Creations and starts are the
agent's own actions, after which the worker reads the pod again anyway."""


class RuntimeEvents:
    def __init__(self, cache: RuntimeCache, sources: Sequence[Source], wake: Callable[[Iterable[str]], None],
                 metrics: KubeletMetrics | None = None, clock: Callable[[], float] = time.time,
                 own_stops: OwnStops | None = None) -> None:
        """`sources`: the streams to try, in order; the first the runtime implements is used. `wake`: the pods'
        workers' (`kopflet.pods.workers.PodWorkers.wake`). `own_stops`: the stops the agent is making (the pod
        syncer's), whose exits are read once their call has returned instead of polled for."""
        self.cache, self.sources, self.wake, self.metrics, self.clock = cache, tuple(sources), wake, metrics, clock
        self.own_stops = own_stops if own_stops is not None else OwnStops()
        self.source: str | None = None
        """The stream in use; None until one has given an event or stayed open `STREAM_SETTLED`, while it is
        broken, or when the runtime has none."""
        self._handling: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        """Read events until cancelled; an unimplemented stream moves to the next, a broken one is opened again."""
        index, failures = 0, 0
        loop = asyncio.get_running_loop()
        try:
            while index < len(self.sources):
                name, open_stream = self.sources[index]
                received = False

                def up(source: str = name) -> None:
                    nonlocal received, failures
                    if not received:
                        received, failures = True, 0
                        self._connected(source)

                settled = loop.call_later(STREAM_SETTLED, up)
                try:
                    try:
                        async for event in open_stream():
                            up()
                            self.dispatch(event)
                    finally:  # before any back-off: a failed open plus its wait is not a stream that stayed open
                        settled.cancel()
                    raise CriError("UNAVAILABLE", "the runtime ended the event stream")
                except CriError as exc:
                    if exc.unimplemented and not received:
                        logger.debug(f"the container runtime has no {name} events")
                        index += 1
                        continue
                    self._stopped(name, exc, received or failures == 0)
                    await asyncio.sleep(RETRY_DELAYS[min(failures, len(RETRY_DELAYS) - 1)])
                    failures += 1
                except Exception as exc:  # anything else (a payload that does not decode...): logged, then again
                    self._stopped(name, exc, received or failures == 0, trace=True)
                    await asyncio.sleep(RETRY_DELAYS[min(failures, len(RETRY_DELAYS) - 1)])
                    failures += 1
            logger.info("the container runtime has no container events: changes are seen by relisting alone")
        finally:
            handling = list(self._handling)
            for task in handling:
                task.cancel()
            await asyncio.gather(*handling, return_exceptions=True)

    def _stopped(self, name: str, exc: Exception, say: bool, trace: bool = False) -> None:
        """The stream broke: counted, said once per outage, and the relist alone until it is back."""
        if self.metrics is not None:
            self.metrics.evented_pleg_connection_errors.inc()
        if say:
            logger.warning(f"container events ({name}) stopped, the relist alone sees changes until they are back: "
                           f"{exc}", exc_info=exc if trace else None)
        self.source = None

    def _connected(self, name: str) -> None:
        if self.source != name:
            logger.info(f"watching the container runtime's events ({name})")
        self.source = name
        if self.metrics is not None:
            self.metrics.evented_pleg_connections.inc()

    def dispatch(self, event: cri.ContainerEvent) -> None:
        """Act on one event without holding up the stream: each exit is waited for on its own."""
        if self.metrics is not None and event.created_at:
            self.metrics.observe_runtime_event(self.clock() - event.created_at / 1e9)
        if event.type not in WAKING:
            return
        task = asyncio.create_task(self._handle(event), name=f"runtime-event-{event.container_id[:12]}")
        self._handling.add(task)
        task.add_done_callback(self._handling.discard)

    async def _handle(self, event: cri.ContainerEvent) -> None:
        try:
            owner = self.cache.owner(event.container_id)
            if owner is None:
                if event.type is cri.ContainerEventType.DELETED:
                    return  # never seen, now gone: nothing to tell anyone
                owner = await self._look_up(event.container_id)
                if owner is None:
                    return
            uid, is_sandbox = owner
            if event.type is cri.ContainerEventType.STOPPED:
                # The agent's own stop: its call returns once the CRI plugin has recorded the exit, so the one read
                # after it sees the exit (no polling meanwhile).
                await self.own_stops.wait(event.container_id)
                if self.cache.seen_stopped(event.container_id):
                    return  # the agent's own stop, already read back by its worker (or the relist saw it first)
                await self._settled(event.container_id, is_sandbox)
            self.wake((uid,))
        except CriError as exc:
            logger.debug(f"runtime event for {event.container_id}: {exc}; the relist will see it")
        except Exception:
            logger.exception(f"runtime event for {event.container_id} not handled; the relist will see it")

    async def _look_up(self, object_id: str) -> tuple[str, bool] | None:
        """The pod of a container (or sandbox) the cache has not seen yet: from its labels, as the runtime has them."""
        try:
            return self.cache.owner_of_status(await self.cache.cri.containers.status(object_id))
        except CriError as exc:
            if not exc.not_found:
                raise
        try:
            return self.cache.owner_of_status(await self.cache.cri.sandboxes.status(object_id))
        except CriError as exc:
            if not exc.not_found:
                raise
        return None

    async def _settled(self, object_id: str, is_sandbox: bool) -> None:
        """Wait until the CRI plugin has recorded the exit (bounded): the worker must read it, not the old state."""
        for delay in SETTLE_DELAYS:
            try:
                if is_sandbox:
                    if (await self.cache.cri.sandboxes.status(object_id)).state is not cri.SandboxState.READY:
                        return
                elif (await self.cache.cri.containers.status(object_id)).state is not cri.ContainerState.RUNNING:
                    return
            except CriError as exc:
                if exc.not_found:
                    return
                raise
            await asyncio.sleep(delay)
