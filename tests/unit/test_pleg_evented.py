"""Runtime events: containerd's envelopes read as CRI's events, and the pods they wake (kopflet.pleg.evented)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any

import pytest

from cri_client import CriError, convert
from cri_client import types as cri
from cri_client.proto import events_pb2 as events_pb
from kopflet.container import labels
from kopflet.metrics import KubeletMetrics
from kopflet.pleg import evented
from kopflet.pleg.evented import RuntimeEvents
from kopflet.pleg.own_stops import OwnStops
from kopflet.pleg.relist import RuntimeCache

STOPPED, DELETED, STARTED = (cri.ContainerEventType.STOPPED, cri.ContainerEventType.DELETED,
                             cri.ContainerEventType.STARTED)

# ------------------------------------------------------------------------------------- containerd's envelopes


@pytest.mark.parametrize(("topic", "message", "type_name", "expected"), [
    ("/tasks/exit", events_pb.TaskExit(container_id="c1", id="c1", pid=7, exit_status=137),
     "containerd.events.TaskExit", cri.ContainerEvent(container_id="c1", type=STOPPED, created_at=5_000_000_001)),
    # The task's own exit may come without the exec id.
    ("/tasks/exit", events_pb.TaskExit(container_id="c1"), "containerd.events.TaskExit",
     cri.ContainerEvent(container_id="c1", type=STOPPED, created_at=5_000_000_001)),
    # An exec's exit (a probe, kubectl exec) is not the container's.
    ("/tasks/exit", events_pb.TaskExit(container_id="c1", id="exec-1"), "containerd.events.TaskExit", None),
    ("/tasks/start", events_pb.TaskStart(container_id="c2", pid=9), "containerd.events.TaskStart",
     cri.ContainerEvent(container_id="c2", type=STARTED, created_at=5_000_000_001)),
    ("/containers/delete", events_pb.ContainerDelete(id="c3"), "containerd.events.ContainerDelete",
     cri.ContainerEvent(container_id="c3", type=DELETED, created_at=5_000_000_001)),
    # The type URL may carry a prefix; a payload that is not the topic's is not read.
    ("/tasks/exit", events_pb.TaskExit(container_id="c1"), "types.containerd.io/containerd.events.TaskExit",
     cri.ContainerEvent(container_id="c1", type=STOPPED, created_at=5_000_000_001)),
    ("/tasks/exit", events_pb.TaskStart(container_id="c1"), "containerd.events.TaskStart", None),
    ("/tasks/oom", events_pb.TaskStart(container_id="c1"), "containerd.events.TaskOOM", None),
    ("/tasks/exit", events_pb.TaskExit(), "containerd.events.TaskExit", None),
])
def test_containerd_envelopes_read_as_cri_events(topic: str, message: Any, type_name: str,
                                                 expected: cri.ContainerEvent | None) -> None:
    envelope = convert.envelope(topic, message, type_name, at=5_000_000_001)
    assert convert.container_event_from_envelope(envelope) == expected


def test_an_envelope_without_a_payload_or_a_time() -> None:
    assert convert.container_event_from_envelope(events_pb.Envelope(topic="/tasks/exit")) is None
    envelope = convert.envelope("/containers/delete", events_pb.ContainerDelete(id="c"),
                                      "containerd.events.ContainerDelete")
    assert convert.container_event_from_envelope(envelope) == cri.ContainerEvent(container_id="c", type=DELETED)


@pytest.mark.parametrize("kind", [STARTED, STOPPED, DELETED])
def test_envelopes_as_containerd_packs_them_read_back(kind: cri.ContainerEventType) -> None:
    event = cri.ContainerEvent(container_id="c", type=kind, created_at=1_700_000_000_123_456_789)
    envelope = events_pb.Envelope.FromString(convert.container_event_to_envelope(event).SerializeToString())
    assert convert.container_event_from_envelope(envelope) == event


def test_a_creation_has_no_containerd_envelope_kopflet_reads() -> None:
    with pytest.raises(ValueError, match="containerd has no event kopflet reads for CREATED"):
        convert.container_event_to_envelope(cri.ContainerEvent(container_id="c", type=cri.ContainerEventType.CREATED))


def test_an_unknown_cri_event_type_reads_as_a_stop() -> None:
    event = cri.ContainerEvent(container_id="c", type=DELETED, created_at=12)
    newer = convert.container_event_to_pb(event)
    newer.container_event_type = 9  # type: ignore[assignment]
    assert convert.container_event_from_pb(newer).type is STOPPED


# ------------------------------------------------------------------------------------------ the pods woken

def pod_labels(uid: str) -> dict[str, str]:
    return {labels.POD_UID: uid, labels.POD_NAME: "p", labels.POD_NAMESPACE: "ns"}


class FakeRuntime:
    """Statuses by id, each read in turn (the last one repeats): the CRI plugin recording an exit late."""

    def __init__(self) -> None:
        self.container_states: dict[str, list[cri.ContainerStatus]] = {}
        self.sandbox_states: dict[str, list[cri.PodSandboxStatus]] = {}
        self.reads: list[str] = []
        runtime = self

        class Containers:
            async def status(self, cid: str) -> cri.ContainerStatus:
                return runtime._next(runtime.container_states, cid)

        class Sandboxes:
            async def status(self, sid: str) -> cri.PodSandboxStatus:
                return runtime._next(runtime.sandbox_states, sid)

        self.containers, self.sandboxes = Containers(), Sandboxes()

    def _next(self, table: dict[str, list[Any]], object_id: str) -> Any:
        self.reads.append(object_id)
        if object_id not in table:
            raise CriError("NOT_FOUND", f"an object with id {object_id} does not exist")
        states = table[object_id]
        return states.pop(0) if len(states) > 1 else states[0]


def container(cid: str, uid: str, state: cri.ContainerState) -> cri.ContainerStatus:
    return cri.ContainerStatus(id=cid, state=state, labels=pod_labels(uid))


def sandbox(sid: str, uid: str, state: cri.SandboxState) -> cri.PodSandboxStatus:
    return cri.PodSandboxStatus(id=sid, state=state, labels=pod_labels(uid))


def cache_with(runtime: FakeRuntime, *known: cri.ContainerStatus | cri.PodSandboxStatus) -> RuntimeCache:
    cache = RuntimeCache(runtime)  # type: ignore[arg-type]
    for status in known:
        table = cache._sandboxes if isinstance(status, cri.PodSandboxStatus) else cache._containers
        table[status.id] = status  # type: ignore[index]
    return cache


Stream = Callable[[], AsyncIterator[cri.ContainerEvent]]


def stream_of(*items: cri.ContainerEvent | CriError, hold: bool = True) -> Stream:
    """One stream per open, each giving `items` in turn (an error item ends it with that error); then it stays
    open (`hold`) or ends."""
    async def events() -> AsyncIterator[cri.ContainerEvent]:
        for item in items:
            if isinstance(item, CriError):
                raise item
            yield item
        if hold:
            await asyncio.Event().wait()
    return events


async def until(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(5):
        while not check():  # noqa: ASYNC110
            await asyncio.sleep(0.005)


async def running(events: RuntimeEvents) -> asyncio.Task[None]:
    return asyncio.create_task(events.run())


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def reopened(streams: Sequence[Stream], opened: list[int], woken: list[str],
             metrics: KubeletMetrics) -> RuntimeEvents:
    """Runtime events over one source whose every opening takes the next of `streams` (the last repeats), each
    opening counted in `opened`."""
    runtime = FakeRuntime()
    for cid, uid in (("c1", "u1"), ("c2", "u2"), ("c3", "u3")):
        runtime.container_states[cid] = [container(cid, uid, cri.ContainerState.EXITED)]

    def open_next() -> AsyncIterator[cri.ContainerEvent]:
        opened.append(len(opened))
        return streams[min(len(opened) - 1, len(streams) - 1)]()

    return RuntimeEvents(cache_with(runtime), [("containerd", open_next)], woken.extend, metrics)


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evented, "SETTLE_DELAYS", (0.001,) * 20)
    monkeypatch.setattr(evented, "RETRY_DELAYS", (0.001, 0.002))


async def test_an_exit_wakes_its_pod_once_the_runtime_status_shows_it() -> None:
    runtime = FakeRuntime()
    # The CRI plugin records the exit two reads late.
    runtime.container_states["c1"] = [container("c1", "u1", cri.ContainerState.RUNNING)] * 2 + \
        [container("c1", "u1", cri.ContainerState.EXITED)]
    woken: list[tuple[str, int]] = []
    cache = cache_with(runtime, container("c1", "u1", cri.ContainerState.RUNNING))
    events = RuntimeEvents(cache, [("containerd", stream_of(cri.ContainerEvent(container_id="c1", type=STOPPED)))],
                           lambda uids: woken.extend((uid, len(runtime.reads)) for uid in uids))
    task = await running(events)
    try:
        await until(lambda: bool(woken))
        assert woken == [("u1", 3)]  # woken after the third read, the first to say exited
        assert events.source == "containerd"
    finally:
        await stop(task)


@pytest.mark.parametrize("is_sandbox", [False, True], ids=["container", "sandbox"])
async def test_the_agents_own_stop_is_waited_for_not_polled(is_sandbox: bool) -> None:
    """An exit the agent's own stop call causes: no status read while the call runs, one read once it returned (the
    CRI plugin has recorded the exit by then), then the pod is woken."""
    runtime = FakeRuntime()
    if is_sandbox:
        runtime.sandbox_states["x1"] = [sandbox("x1", "u1", cri.SandboxState.NOTREADY)]
        known: cri.ContainerStatus | cri.PodSandboxStatus = sandbox("x1", "u1", cri.SandboxState.READY)
    else:
        runtime.container_states["x1"] = [container("x1", "u1", cri.ContainerState.EXITED)]
        known = container("x1", "u1", cri.ContainerState.RUNNING)
    stops, woken = OwnStops(), []
    events = RuntimeEvents(cache_with(runtime, known),
                           [("containerd", stream_of(cri.ContainerEvent(container_id="x1", type=STOPPED)))],
                           woken.extend, own_stops=stops)
    call_ends = asyncio.Event()

    async def stop_call() -> None:
        async with stops.stopping("x1"):
            await call_ends.wait()

    stopping = asyncio.create_task(stop_call())
    await asyncio.sleep(0)
    task = await running(events)
    try:
        await asyncio.sleep(0.05)  # the event is in; the stop call still runs
        assert runtime.reads == [] and woken == []
        call_ends.set()
        await until(lambda: bool(woken))
        assert woken == ["u1"] and runtime.reads == ["x1"]
    finally:
        await stop(task)
        await stopping


async def test_own_stops_of_one_object_end_with_the_last() -> None:
    stops = OwnStops()
    assert not await stops.wait("x")  # none running: at once
    first, second = asyncio.Event(), asyncio.Event()

    async def call(done: asyncio.Event) -> None:
        async with stops.stopping("x"):
            await done.wait()

    calls = [asyncio.create_task(call(first)), asyncio.create_task(call(second))]
    await asyncio.sleep(0)
    waiting = asyncio.create_task(stops.wait("x"))
    first.set()
    await asyncio.sleep(0.01)
    assert not waiting.done()
    second.set()
    assert await asyncio.wait_for(waiting, 1)
    await asyncio.gather(*calls)
    assert not await stops.wait("x")


async def test_a_sandbox_exit_waits_for_the_sandbox_to_be_not_ready() -> None:
    runtime = FakeRuntime()
    runtime.sandbox_states["s1"] = [sandbox("s1", "u1", cri.SandboxState.READY),
                                    sandbox("s1", "u1", cri.SandboxState.NOTREADY)]
    woken: list[str] = []
    cache = cache_with(runtime, sandbox("s1", "u1", cri.SandboxState.READY))
    events = RuntimeEvents(cache, [("containerd", stream_of(cri.ContainerEvent(container_id="s1", type=STOPPED)))],
                           woken.extend)
    task = await running(events)
    try:
        await until(lambda: bool(woken))
        assert woken == ["u1"] and runtime.reads == ["s1", "s1"]
    finally:
        await stop(task)


async def test_a_container_the_cache_has_not_seen_is_found_by_its_labels() -> None:
    runtime = FakeRuntime()
    runtime.container_states["new"] = [container("new", "u2", cri.ContainerState.EXITED)]
    runtime.sandbox_states["new-sandbox"] = [sandbox("new-sandbox", "u3", cri.SandboxState.NOTREADY)]
    runtime.container_states["foreign"] = [cri.ContainerStatus(id="foreign", state=cri.ContainerState.EXITED)]
    woken: list[str] = []
    events = RuntimeEvents(cache_with(runtime), [("containerd", stream_of(
        cri.ContainerEvent(container_id="foreign", type=STOPPED),  # not a pod's: nobody woken
        cri.ContainerEvent(container_id="gone", type=STOPPED),  # removed already: nobody woken
        cri.ContainerEvent(container_id="new", type=STOPPED),
        cri.ContainerEvent(container_id="new-sandbox", type=STOPPED)))], woken.extend)
    task = await running(events)
    try:
        await until(lambda: len(woken) == 2)
        assert sorted(woken) == ["u2", "u3"]
    finally:
        await stop(task)


async def test_removals_wake_at_once_and_the_agent_s_own_starts_not_at_all() -> None:
    runtime = FakeRuntime()
    woken: list[str] = []
    cache = cache_with(runtime, container("c1", "u1", cri.ContainerState.EXITED))
    events = RuntimeEvents(cache, [("containerd", stream_of(
        cri.ContainerEvent(container_id="c1", type=STARTED),
        cri.ContainerEvent(container_id="c1", type=cri.ContainerEventType.CREATED),
        cri.ContainerEvent(container_id="unknown", type=DELETED),
        cri.ContainerEvent(container_id="c1", type=DELETED)))], woken.extend)
    task = await running(events)
    try:
        await until(lambda: bool(woken))
        await asyncio.sleep(0.02)
        assert woken == ["u1"] and runtime.reads == []
    finally:
        await stop(task)


async def test_an_unimplemented_stream_moves_to_the_next_and_none_leaves_the_relist_alone(
        caplog: pytest.LogCaptureFixture) -> None:
    runtime = FakeRuntime()
    runtime.container_states["c1"] = [container("c1", "u1", cri.ContainerState.EXITED)]
    woken: list[str] = []
    unimplemented = CriError("UNIMPLEMENTED", "unknown service containerd.services.events.v1.Events")
    exit_event = cri.ContainerEvent(container_id="c1", type=STOPPED)
    events = RuntimeEvents(cache_with(runtime), [("containerd", stream_of(unimplemented)),
                                                 ("CRI", stream_of(exit_event))], woken.extend)
    task = await running(events)
    try:
        await until(lambda: bool(woken))
        assert woken == ["u1"] and events.source == "CRI"
    finally:
        await stop(task)

    caplog.set_level("INFO")
    none = RuntimeEvents(cache_with(runtime), [("containerd", stream_of(unimplemented)),
                                               ("CRI", stream_of(unimplemented))], woken.extend)
    await asyncio.wait_for(none.run(), 5)  # returns: nothing to watch
    assert none.source is None
    assert "the container runtime has no container events: changes are seen by relisting alone" in caplog.text


async def test_a_broken_stream_is_opened_again_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    opened: list[int] = []
    streams: Sequence[Stream] = (
        stream_of(cri.ContainerEvent(container_id="c1", type=STOPPED), CriError("UNAVAILABLE", "connection reset")),
        stream_of(CriError("UNAVAILABLE", "connection refused")),  # the runtime is still down
        stream_of(cri.ContainerEvent(container_id="c2", type=STOPPED), hold=False),  # the runtime ends it
        stream_of(cri.ContainerEvent(container_id="c3", type=STOPPED)),
    )
    woken: list[str] = []
    metrics = KubeletMetrics()
    events = reopened(streams, opened, woken, metrics)
    task = await running(events)
    try:
        await until(lambda: len(woken) == 3)
        assert sorted(woken) == ["u1", "u2", "u3"] and len(opened) == 4
        assert metrics.evented_pleg_connection_errors.labels().value == 3
        assert metrics.evented_pleg_connections.labels().value == 3
        assert events.source == "containerd"
    finally:
        await stop(task)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    # One warning per outage: the refused reopening in the first outage is not repeated.
    assert warnings == ["container events (containerd) stopped, the relist alone sees changes until they are back: "
                        + str(CriError("UNAVAILABLE", "connection reset")),
                        "container events (containerd) stopped, the relist alone sees changes until they are back: "
                        + str(CriError("UNAVAILABLE", "the runtime ended the event stream"))]


async def test_an_exit_the_runtime_never_records_wakes_the_pod_after_the_bound() -> None:
    runtime = FakeRuntime()
    runtime.container_states["c1"] = [container("c1", "u1", cri.ContainerState.RUNNING)]
    woken: list[str] = []
    events = RuntimeEvents(cache_with(runtime, container("c1", "u1", cri.ContainerState.RUNNING)),
                           [("containerd", stream_of(cri.ContainerEvent(container_id="c1", type=STOPPED)))],
                           woken.extend)
    task = await running(events)
    try:
        await until(lambda: bool(woken))
        assert woken == ["u1"] and len(runtime.reads) == len(evented.SETTLE_DELAYS)
    finally:
        await stop(task)


async def test_event_latency_is_observed() -> None:
    metrics = KubeletMetrics()
    events = RuntimeEvents(cache_with(FakeRuntime()), [], lambda uids: None, metrics, clock=lambda: 10.25)
    events.dispatch(cri.ContainerEvent(container_id="c", type=STARTED, created_at=10_000_000_000))
    events.dispatch(cri.ContainerEvent(container_id="c", type=STARTED))  # no time said: not observed
    latency = metrics.evented_pleg_connection_latency.labels()
    assert (latency.count, latency.sum) == (1, 0.25)


async def test_an_exit_the_cache_already_holds_wakes_nobody() -> None:
    """The agent's own stop: its worker read the container back as exited before the event came."""
    runtime = FakeRuntime()
    woken: list[str] = []
    cache = cache_with(runtime, container("c1", "u1", cri.ContainerState.EXITED),
                       sandbox("s1", "u1", cri.SandboxState.NOTREADY),
                       container("c2", "u2", cri.ContainerState.RUNNING))
    runtime.container_states["c2"] = [container("c2", "u2", cri.ContainerState.EXITED)]
    events = RuntimeEvents(cache, [("containerd", stream_of(
        cri.ContainerEvent(container_id="c1", type=STOPPED), cri.ContainerEvent(container_id="s1", type=STOPPED),
        cri.ContainerEvent(container_id="c2", type=STOPPED)))], woken.extend)
    task = await running(events)
    try:
        await until(lambda: bool(woken))
        await asyncio.sleep(0.02)
        assert woken == ["u2"] and runtime.reads == ["c2"]
    finally:
        await stop(task)


async def test_any_other_error_of_a_stream_is_logged_and_the_stream_opened_again(
        caplog: pytest.LogCaptureFixture) -> None:
    runtime = FakeRuntime()
    runtime.container_states["c1"] = [container("c1", "u1", cri.ContainerState.EXITED)]
    opened: list[int] = []

    def open_next() -> AsyncIterator[cri.ContainerEvent]:
        opened.append(1)
        if len(opened) == 1:
            return broken()
        return stream_of(cri.ContainerEvent(container_id="c1", type=STOPPED))()

    async def broken() -> AsyncIterator[cri.ContainerEvent]:
        raise RuntimeError("a payload that does not decode")
        yield  # an async generator

    woken: list[str] = []
    events = RuntimeEvents(cache_with(runtime), [("containerd", open_next)], woken.extend)
    task = await running(events)
    try:
        await until(lambda: bool(woken))
        assert woken == ["u1"] and len(opened) == 2
    finally:
        await stop(task)
    warning = next(r for r in caplog.records if r.levelname == "WARNING")
    assert warning.getMessage().endswith("a payload that does not decode") and warning.exc_info is not None


async def test_an_event_whose_handling_fails_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    runtime = FakeRuntime()
    runtime.container_states["c2"] = [container("c2", "u2", cri.ContainerState.EXITED)]
    woken: list[str] = []

    def wake(uids: Iterable[str]) -> None:
        for uid in uids:
            if uid == "u1":
                raise RuntimeError("a worker that cannot be woken")
            woken.append(uid)

    cache = cache_with(runtime, container("c1", "u1", cri.ContainerState.EXITED))
    events = RuntimeEvents(cache, [("containerd", stream_of(
        cri.ContainerEvent(container_id="c1", type=DELETED), cri.ContainerEvent(container_id="c2", type=STOPPED)))],
                           wake)
    task = await running(events)
    try:
        await until(lambda: bool(woken))
        assert woken == ["u2"]
    finally:
        await stop(task)
    assert any("runtime event for c1 not handled" in r.getMessage() for r in caplog.records)


async def test_a_quiet_stream_that_stays_open_is_connected_and_starts_the_back_off_over(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A node where nothing exits sends no event: a stream open `STREAM_SETTLED` is connected all the same (the
    success metric, the source), and a later break backs off from the start again, not from where the outage
    before it left off (the third delay, 5 s, would outlast the test)."""
    monkeypatch.setattr(evented, "STREAM_SETTLED", 0.05)
    monkeypatch.setattr(evented, "RETRY_DELAYS", (0.001, 0.001, 5.0))
    refused = CriError("UNAVAILABLE", "connection refused")

    def quiet_then_broken() -> AsyncIterator[cri.ContainerEvent]:
        async def events() -> AsyncIterator[cri.ContainerEvent]:
            await asyncio.sleep(0.2)
            raise CriError("UNAVAILABLE", "connection reset")
            yield  # an async generator
        return events()

    streams: Sequence[Stream] = (stream_of(refused), quiet_then_broken, stream_of(refused),
                                 stream_of(cri.ContainerEvent(container_id="c1", type=STOPPED)))
    opened: list[int] = []
    woken: list[str] = []
    metrics = KubeletMetrics()
    events = reopened(streams, opened, woken, metrics)
    task = await running(events)
    try:
        await until(lambda: len(opened) == 2 and events.source == "containerd")  # quiet, and connected
        assert metrics.evented_pleg_connections.labels().value == 1
        await until(lambda: woken == ["u1"])
        assert len(opened) == 4 and metrics.evented_pleg_connections.labels().value == 2
    finally:
        await stop(task)


async def test_a_runtime_that_keeps_refusing_is_never_connected(monkeypatch: pytest.MonkeyPatch) -> None:
    """The back-off outlasts `STREAM_SETTLED`: waiting to open again is not a stream that stayed open."""
    monkeypatch.setattr(evented, "STREAM_SETTLED", 0.02)
    monkeypatch.setattr(evented, "RETRY_DELAYS", (0.05,))
    opened: list[int] = []
    metrics = KubeletMetrics()
    events = reopened((stream_of(CriError("UNAVAILABLE", "connection refused")),), opened, [], metrics)
    task = await running(events)
    try:
        await until(lambda: len(opened) >= 5)
        assert metrics.evented_pleg_connections.labels().value == 0 and events.source is None
        assert metrics.evented_pleg_connection_errors.labels().value >= 4
    finally:
        await stop(task)
