"""kopflet.client.informer: the list+watch cache (client-go's reflector and informer) against a fake apiserver: the
cache after a list and after ADDED, MODIFIED, DELETED and BOOKMARK events, the changes handed to the handler, the
watch resumed from the last resourceVersion, a relist at once on 410 Gone, backoff on other failures (reset only by a
working watch), a very short watch, bounded calls, and cluster-scoped and namespaced keys."""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pytest

from kopflet.client import informer as informer_module
from kopflet.client.informer import ADDED, DELETED, INITIAL_EVENTS_END, MODIFIED, Delta, Informer
from kopflet.client.kubeapi import KubeApiError

PATH = "/apis/example.com/v1/things"
END = object()
"""Queued to end the current watch as the server does when its timeout passes."""


def thing(name: str, value: str, namespace: str = "") -> dict[str, Any]:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"metadata": meta, "spec": {"value": value}}


class FakeApi:
    """One collection: a list answers what `objects` holds at its resourceVersion, each watch request takes what is
    queued (events, END, or an exception the watch raises)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.version = 100
        self.events: asyncio.Queue[Any] = asyncio.Queue()
        self.calls: list[tuple[str, str, Mapping[str, str] | None]] = []  # (LIST, path, params) / (WATCH, rv, params)
        self.list_errors: list[BaseException] = []
        self.list_hangs = False
        self.list_version: str | None = None  # an answer's resourceVersion other than the current one
        self.watch_list_refused: BaseException | None = None  # a server without the WatchList feature
        self.initial_events_end = True  # False: a WatchList that never says its initial events are over
        self.timeouts: list[int] = []  # each watch request's timeoutSeconds

    async def request(self, method: str, path: str, *, params: Mapping[str, str] | None = None,
                      **_: Any) -> dict[str, Any]:
        assert (method, path) == ("GET", PATH)
        self.calls.append(("LIST", path, params))
        if self.list_hangs:
            await asyncio.sleep(3600)
        if self.list_errors:
            raise self.list_errors.pop(0)
        version = str(self.version) if self.list_version is None else self.list_version
        return {"metadata": {"resourceVersion": version}, "items": [copy.deepcopy(o) for o in self.objects.values()]}

    async def watch(self, path: str, resource_version: str, *, timeout_seconds: int = 300,
                    params: Mapping[str, str] | None = None) -> AsyncIterator[dict[str, Any]]:
        assert path == PATH
        self.timeouts.append(timeout_seconds)
        if params is not None and params.get("sendInitialEvents") == "true":
            # a WatchList: the objects as ADDED events, the bookmark that ends them, then what is queued
            self.calls.append(("WATCHLIST", resource_version, params))
            if self.watch_list_refused is not None:
                raise self.watch_list_refused
            for obj in list(self.objects.values()):
                yield {"type": ADDED, "object": copy.deepcopy(obj)}
            if self.initial_events_end:
                yield {"type": "BOOKMARK", "object": {"metadata": {
                    "resourceVersion": str(self.version), "annotations": {INITIAL_EVENTS_END: "true"}}}}
        else:
            self.calls.append(("WATCH", resource_version, params))
        while True:
            item = await self.events.get()
            if item is END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def change(self, kind: str, obj: dict[str, Any], *, emit: bool = True) -> dict[str, Any]:
        """The object stored (or removed) at a new resourceVersion; its event queued unless `emit` is False (a change
        the watch misses, e.g. while it is broken)."""
        self.version += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.version)
        key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        if kind == DELETED:
            self.objects.pop(key, None)
        else:
            self.objects[key] = obj
        if emit:
            self.events.put_nowait({"type": kind, "object": copy.deepcopy(obj)})
        return obj

    def lists(self) -> int:
        return sum(1 for c in self.calls if c[0] == "LIST")

    def watches(self) -> list[str]:
        return [str(c[1]) for c in self.calls if c[0] == "WATCH"]

    def watch_lists(self) -> int:
        return sum(1 for c in self.calls if c[0] == "WATCHLIST")


def value(obj: Mapping[str, Any]) -> str:
    return str(obj["spec"]["value"])


class Harness:
    def __init__(self, **options: Any) -> None:
        self.api = FakeApi()
        self.changes: list[list[tuple[str, str | None, str | None]]] = []
        self.informer: Informer[str] = Informer(self.api, PATH, value, what="thing",  # type: ignore[arg-type]
                                                on_change=self.record, retry_min=0.01, retry_max=0.04, **options)
        self.task: asyncio.Task[None] | None = None

    def record(self, deltas: Sequence[Delta[str]]) -> None:
        self.changes.append([(d.type, d.old, d.new) for d in deltas])

    async def start(self) -> None:
        self.task = asyncio.create_task(self.informer.run())
        await self.settle()

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)

    async def settle(self, seconds: float = 0.02) -> None:
        for _ in range(100):
            await asyncio.sleep(0)
        await asyncio.sleep(seconds)

    def cache(self) -> dict[tuple[str, str], str]:
        return dict(self.informer.objects)


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    h = Harness()
    yield h
    await h.stop()


async def test_a_list_fills_the_cache_then_events_change_it(harness: Harness) -> None:
    api = harness.api
    api.change(ADDED, thing("a", "1"), emit=False)
    api.change(ADDED, thing("b", "1", namespace="ns"), emit=False)
    assert not harness.informer.has_synced()
    await harness.start()
    assert harness.informer.has_synced()
    assert harness.cache() == {("", "a"): "1", ("ns", "b"): "1"}  # cluster-scoped and namespaced keys
    assert harness.changes == [[(ADDED, None, "1"), (ADDED, None, "1")]]
    assert api.watches() == ["102"]  # from the list's resourceVersion

    api.change(ADDED, thing("c", "1"))
    api.change(MODIFIED, thing("a", "2"))
    api.change(DELETED, thing("b", "1", namespace="ns"))
    await harness.settle()
    assert harness.cache() == {("", "a"): "2", ("", "c"): "1"}
    assert harness.changes[1:] == [[(ADDED, None, "1")], [(MODIFIED, "1", "2")], [(DELETED, "1", None)]]
    assert api.lists() == 1


async def test_the_watch_resumes_from_the_last_version_seen_bookmarks_included(harness: Harness) -> None:
    api = harness.api
    await harness.start()
    api.change(ADDED, thing("a", "1"))
    api.events.put_nowait(END)  # the server's timeout: watch again from 101, no list
    await harness.settle()
    api.events.put_nowait({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "150"}}})
    api.events.put_nowait(END)
    await harness.settle()
    assert api.watches() == ["100", "101", "150"] and api.lists() == 1
    assert harness.changes == [[], [(ADDED, None, "1")]]  # the bookmark changes nothing


async def test_410_gone_lists_again_at_once_and_hands_over_only_what_changed(harness: Harness,
                                                                           caplog: pytest.LogCaptureFixture) -> None:
    api = harness.api
    for name in ("same", "changed", "gone"):
        api.change(ADDED, thing(name, "1"), emit=False)
    await harness.start()
    harness.changes.clear()
    # while the watch is broken: one changes, one goes, one comes; then the watch is too old
    api.change(MODIFIED, thing("changed", "2"), emit=False)
    api.change(DELETED, thing("gone", "1"), emit=False)
    api.change(ADDED, thing("new", "1"), emit=False)
    api.events.put_nowait(KubeApiError(410, "Expired", "too old resource version: 103 (200)", "WATCH", PATH))
    with caplog.at_level(logging.WARNING):
        await harness.settle(0)  # no pause before the relist
    assert api.lists() == 2 and api.watches() == ["103", "106"]
    assert harness.cache() == {("", "same"): "1", ("", "changed"): "2", ("", "new"): "1"}
    assert harness.changes == [[(MODIFIED, "1", "2"), (ADDED, None, "1"), (DELETED, "1", None)]]
    assert "watch failed" not in caplog.text


@pytest.mark.parametrize("failure", [
    KubeApiError(500, "InternalError", "etcd is gone", "WATCH", PATH),
    KubeApiError(403, "Forbidden", 'cannot watch resource "things"', "WATCH", PATH),
    ConnectionResetError("reset by peer"),
    TimeoutError(),
    ValueError("Expecting value: line 1 column 1 (char 0)"),
], ids=["500", "403", "reset", "timeout", "bad-json"])
async def test_a_broken_watch_is_logged_and_listed_again_after_a_pause(harness: Harness, failure: BaseException,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    api = harness.api
    await harness.start()
    api.events.put_nowait(failure)
    await harness.settle(0)
    assert api.lists() == 1  # pausing
    await harness.settle(0.03)
    assert api.lists() == 2 and harness.informer.has_synced()
    assert "thing watch failed, listing again in 0s: " in caplog.text


async def test_the_pause_doubles_until_a_watch_works(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    pauses: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(delay: float) -> None:
        pauses.append(delay)
        await real_sleep(0)

    monkeypatch.setattr(informer_module.asyncio, "sleep", sleep)
    api = harness.api
    api.list_errors = [ConnectionRefusedError("refused")] * 4
    harness.task = asyncio.create_task(harness.informer.run())
    for _ in range(200):
        await real_sleep(0)
    assert pauses == [0.01, 0.02, 0.04, 0.04]  # retry_max caps it
    assert harness.informer.has_synced()
    # a list that works while the watch does not (e.g. no watch permission): the pause keeps growing
    pauses.clear()
    for _ in range(2):
        api.events.put_nowait(KubeApiError(403, "Forbidden", "no watch", "WATCH", PATH))
    for _ in range(200):
        await real_sleep(0)
    assert pauses == [0.04, 0.04]
    # a watch that delivers an event resets it
    pauses.clear()
    api.change(ADDED, thing("a", "1"))
    api.events.put_nowait(KubeApiError(500, "InternalError", "x", "WATCH", PATH))
    for _ in range(200):
        await real_sleep(0)
    assert pauses == [0.01]


async def test_a_very_short_watch_is_a_failure(harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    api = harness.api
    api.events.put_nowait(END)  # the first watch ends at once without an event
    await harness.start()
    assert "very short watch" in caplog.text
    await harness.settle(0.05)
    assert api.lists() >= 2


async def test_a_list_without_a_resource_version_is_listed_again(harness: Harness,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    harness.api.list_version = ""
    await harness.start()
    assert "has no resourceVersion to watch from" in caplog.text and harness.api.watches() == []
    harness.api.list_version = None
    await harness.settle(0.05)
    assert harness.api.watches() == ["100"]


async def test_a_hung_list_is_cut_off() -> None:
    h = Harness(call_timeout=0.01)
    h.api.list_hangs = True
    h.task = asyncio.create_task(h.informer.run())
    await h.settle(0.1)
    assert h.api.lists() >= 2 and not h.informer.has_synced()
    h.api.list_hangs = False
    await h.settle(0.1)
    assert h.informer.has_synced()
    await h.stop()


async def test_a_failing_handler_does_not_stop_the_watch(harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    def broken(deltas: Sequence[Delta[str]]) -> None:
        raise RuntimeError("handler bug")

    harness.informer.on_change = broken
    await harness.start()
    harness.api.change(ADDED, thing("a", "1"))
    await harness.settle()
    assert harness.cache() == {("", "a"): "1"} and harness.api.lists() == 1
    assert "a thing change handler failed" in caplog.text


async def test_wait_synced() -> None:
    h = Harness()
    assert not await h.informer.wait_synced(0.01)
    await h.start()
    assert await h.informer.wait_synced(0.01)
    await h.stop()


async def test_list_and_watch_parameters() -> None:
    h = Harness(params={"fieldSelector": "spec.nodeName=n"})
    await h.start()
    assert h.api.calls == [("LIST", PATH, {"fieldSelector": "spec.nodeName=n"}),
                           ("WATCH", "100", {"fieldSelector": "spec.nodeName=n"})]
    await h.stop()


@pytest.mark.parametrize("watch_list", [False, True])
async def test_each_watch_asks_for_between_one_and_two_watch_timeouts_at_random(
        watch_list: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # client-go's reflector: timeoutSeconds = minWatchTimeout * (1 + rand), so watches do not all end together
    draws = iter([0.0, 0.5, 0.999])
    monkeypatch.setattr("kopflet.client.informer.random.random", lambda: next(draws))
    h = Harness(watch_timeout=300, watch_list=watch_list)
    await h.start()
    try:
        for _ in range(2):
            h.api.events.put_nowait(END)
            await h.settle()
        assert h.api.timeouts == [300, 450, 599]
    finally:
        await h.stop()


# ------------------------------------------------------------------------------------------------ WatchList

async def test_a_watch_list_fills_the_cache_in_one_request_then_goes_on_as_a_watch() -> None:
    h = Harness(watch_list=True)
    api = h.api
    api.change(ADDED, thing("a", "1", namespace="ns"), emit=False)
    api.change(ADDED, thing("b", "1", namespace="ns"), emit=False)
    try:
        await h.start()
        assert h.informer.has_synced() and api.lists() == 0 and api.watch_lists() == 1
        (call,) = [c for c in api.calls if c[0] == "WATCHLIST"]
        assert call[1] == "" and call[2] == {"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}
        assert h.cache() == {("ns", "a"): "1", ("ns", "b"): "1"}
        assert h.changes == [[(ADDED, None, "1"), (ADDED, None, "1")]]  # one change set, as after a list
        api.change(MODIFIED, thing("a", "2", namespace="ns"))
        await h.settle()
        assert h.cache()[("ns", "a")] == "2" and h.changes[1:] == [[(MODIFIED, "1", "2")]]
        api.events.put_nowait(END)  # the server's timeout: a plain watch from the last version, no list
        await h.settle()
        assert api.watches() == ["103"] and api.lists() == 0 and api.watch_lists() == 1
    finally:
        await h.stop()


async def test_a_watch_list_is_not_synced_before_its_initial_events_end() -> None:
    h = Harness(watch_list=True)
    h.api.initial_events_end = False
    h.api.change(ADDED, thing("a", "1"), emit=False)
    try:
        await h.start()
        assert not h.informer.has_synced() and h.cache() == {}
        h.api.events.put_nowait(END)  # ended before the bookmark: a failure, tried again after the pause
        await h.settle(0.05)
        assert not h.informer.has_synced() and h.api.watch_lists() >= 2 and h.api.lists() == 0
    finally:
        await h.stop()


@pytest.mark.parametrize("status", [400, 422])
async def test_a_server_that_refuses_a_watch_list_is_listed_from_then_on(
        status: int, caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(watch_list=True)
    h.api.watch_list_refused = KubeApiError(status, "Invalid", "sendInitialEvents is forbidden", "WATCH", PATH)
    h.api.change(ADDED, thing("a", "1"), emit=False)
    try:
        with caplog.at_level(logging.INFO):
            await h.start()
        assert h.informer.has_synced() and h.cache() == {("", "a"): "1"}
        assert h.api.watch_lists() == 1 and h.api.lists() == 1 and h.api.watches() == ["101"]
        assert "refuses a watch list" in caplog.text and "watch failed" not in caplog.text
        h.api.events.put_nowait(KubeApiError(410, "Expired", "too old", "WATCH", PATH))
        await h.settle()
        assert h.api.watch_lists() == 1 and h.api.lists() == 2  # listed again, no second WatchList
    finally:
        await h.stop()


async def test_a_watch_list_forbidden_is_a_failure_not_a_fallback_and_says_so_to_a_reader() -> None:
    h = Harness(watch_list=True)
    forbidden = KubeApiError(403, "Forbidden", "cannot watch", "WATCH", PATH)
    h.api.watch_list_refused = forbidden
    try:
        await h.start()
        assert not await asyncio.wait_for(h.informer.wait_synced(30, or_refused=True), 1.0)
        assert h.informer.refused and h.informer.last_error is forbidden
        await h.settle(0.05)
        assert not h.informer.has_synced() and h.api.lists() == 0 and h.api.watch_lists() >= 2
        h.api.watch_list_refused = None  # allowed now (the node authorizer's graph caught up)
        await h.settle(0.05)
        assert h.informer.has_synced() and not h.informer.refused and h.informer.last_error is None
    finally:
        await h.stop()


async def test_a_reader_waits_through_other_failures_and_is_told_when_the_run_ends() -> None:
    h = Harness()
    h.api.list_errors = [KubeApiError(500, "InternalError", "etcd is gone", "GET", PATH)]
    waiting = asyncio.create_task(h.informer.wait_synced(30, or_refused=True))
    try:
        await h.start()
        await h.settle(0.05)
        assert await asyncio.wait_for(waiting, 1.0)  # the 500 was tried again, and the list came
        h2 = Harness()
        h2.api.list_hangs = True
        await h2.start()
        reader = asyncio.create_task(h2.informer.wait_synced(30, or_refused=True))
        await h2.stop()
        assert not await asyncio.wait_for(reader, 1.0) and h2.informer.refused
    finally:
        await h.stop()
