"""Runtime events from the real containerd: the client's streams, and the PLEG's use of them (kopflet.pleg.evented)
with the relist under it, a stream broken in the middle of a burst of exits included."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import uuid
from collections.abc import AsyncIterator

from cri_client import CriClient, CriError, types
from kopflet.container import labels
from kopflet.pleg.evented import RuntimeEvents
from kopflet.pleg.relist import RuntimeCache
from tests.cri.conftest import Bench

STOPPED, STARTED, DELETED = types.ContainerEventType.STOPPED, types.ContainerEventType.STARTED, \
    types.ContainerEventType.DELETED


class Collector:
    """Reads a stream into a list in the background."""

    def __init__(self, stream: AsyncIterator[types.ContainerEvent]) -> None:
        self.events: list[types.ContainerEvent] = []
        self.error: CriError | None = None
        self.task = asyncio.create_task(self._read(stream))

    async def _read(self, stream: AsyncIterator[types.ContainerEvent]) -> None:
        try:
            async for event in stream:
                self.events.append(event)
        except CriError as exc:
            self.error = exc

    def of(self, object_id: str) -> list[types.ContainerEventType]:
        return [e.type for e in self.events if e.container_id == object_id]

    async def until(self, check: object, within: float = 30) -> None:
        async with asyncio.timeout(within):
            while not check():  # type: ignore[operator]  # noqa: ASYNC110
                await asyncio.sleep(0.05)

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


def pod_sandbox(bench: Bench, uid: str) -> types.PodSandboxConfig:
    config = bench.sandbox_config()
    return dataclasses.replace(config, labels={**config.labels, labels.POD_UID: uid})


async def start_in_pod(bench: Bench, cri: CriClient, command: list[str], uid: str = "") -> tuple[str, str]:
    """A sandbox and a started container in it, both labelled with `uid` as the agent labels a pod's."""
    uid = uid or str(uuid.uuid4())
    sandbox_id, sandbox = await bench.run_sandbox(pod_sandbox(bench, uid))
    config = bench.container_config(sandbox, "main", command)
    config = dataclasses.replace(config, labels={**config.labels, labels.POD_UID: uid})
    container_id = await bench.create_container(sandbox_id, sandbox, config)
    await cri.containers.start(container_id)
    return sandbox_id, container_id


async def test_containerd_events_say_starts_exits_and_removals_but_not_exec_exits(cri: CriClient, bench: Bench) -> None:
    events = Collector(cri.containerd_events())
    try:
        await asyncio.sleep(0.2)  # subscribed before anything happens
        _, short = await start_in_pod(bench, cri, ["sh", "-c", "sleep 0.5; exit 3"])
        _, long = await start_in_pod(bench, cri, ["sleep", "3600"])
        assert (await cri.containers.exec_sync(long, ["true"], timeout=10)).exit_code == 0
        await events.until(lambda: STOPPED in events.of(short))
        await bench.wait_for_state(short, types.ContainerState.EXITED)
        await cri.containers.remove(short)
        await events.until(lambda: DELETED in events.of(short))
        assert events.error is None
        assert events.of(short) == [STARTED, STOPPED, DELETED]
        assert events.of(long) == [STARTED]  # the exec's exit is not the container's
        stopped = next(e for e in events.events if e.container_id == short and e.type is STOPPED)
        assert stopped.created_at > 0
    finally:
        await events.close()


async def test_cri_container_events_where_the_runtime_has_them(cri: CriClient, bench: Bench) -> None:
    """containerd before 1.7 has no CRI events (UNIMPLEMENTED); from 1.7 on, they say a start."""
    version = await cri.version()
    found = re.match(r"v?(\d+)\.(\d+)", version.runtime_version)
    assert found, version
    events = Collector(cri.container_events())
    try:
        if (int(found[1]), int(found[2])) < (1, 7):
            await events.until(lambda: events.error is not None, within=10)
            assert events.error is not None and events.error.unimplemented, events.error
        else:
            _, container_id = await start_in_pod(bench, cri, ["sleep", "3600"])
            await events.until(lambda: STARTED in events.of(container_id))
    finally:
        await events.close()


async def test_every_exit_of_a_burst_reaches_its_pod_though_the_event_stream_breaks_midway(
        cri: CriClient, bench: Bench) -> None:
    """The agent's arrangement: the relist loop and the runtime events both wake pods. The stream is cut after
    the burst's third exit and opened again after the back-off; whatever happened in between, the relist finds."""
    pods = 6
    uids = [str(uuid.uuid4()) for _ in range(pods)]
    containers = {}
    for i, uid in enumerate(uids):
        # Staggered exits, 0.3 s apart, starting once every pod runs.
        _, containers[uid] = await start_in_pod(bench, cri, ["sh", "-c", f"sleep {3 + 0.3 * i}; exit {i + 1}"], uid)

    cache = RuntimeCache(cri)
    seen_exited: dict[str, int] = {}
    checks: set[asyncio.Task[None]] = set()

    async def worker(uid: str) -> None:
        """What a pod's worker does when woken: read the pod again, and see the exit."""
        view = await cache.refresh_pod(uid)
        for c in view.containers:
            if c.id == containers[uid] and c.exit_code:
                seen_exited[uid] = c.exit_code

    def wake(woken: object) -> None:
        for uid in woken:  # type: ignore[attr-defined]
            if uid in containers:
                task = asyncio.create_task(worker(uid))
                checks.add(task)
                task.add_done_callback(checks.discard)

    opened: list[int] = []

    async def cut_after_three_exits() -> AsyncIterator[types.ContainerEvent]:
        opened.append(1)
        exits = 0
        async for event in cri.containerd_events():
            yield event
            exits += event.type is STOPPED and event.container_id in containers.values()
            if len(opened) == 1 and exits == 3:
                raise CriError("UNAVAILABLE", "cut by the test")

    events = RuntimeEvents(cache, [("containerd", cut_after_three_exits)], wake)
    relist = asyncio.create_task(cache.run(wake))
    watching = asyncio.create_task(events.run())
    try:
        async with asyncio.timeout(60):
            while len(seen_exited) < pods:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        assert seen_exited == {uid: i + 1 for i, uid in enumerate(uids)}
        assert len(opened) >= 2 and events.source == "containerd"
    finally:
        for task in (relist, watching, *checks):
            task.cancel()
        await asyncio.gather(relist, watching, *checks, return_exceptions=True)
