"""A list+watch cache of one kind of object (client-go's reflector, store and informer event handlers, in one).

`Informer.run` lists the objects, then watches them from the list's resourceVersion, resuming each watch the server
ends from the last resourceVersion seen (bookmarks included). With `watch_list` the list is client-go's WatchList
instead: one watch asked to send the current objects first (``sendInitialEvents``), ending them with a bookmark
annotated ``k8s.io/initial-events-end``, and going on as a watch (one request where list+watch is two); a server
that refuses it (400 or 422: the WatchList feature off) is listed from then on, as client-go falls back. A watch
that answers 410 Gone (its version too old) is followed at once by a new list; any other failure (an error answer,
no answer, a malformed event, a watch ended within a second without an event: client-go's "very short watch") by a
new list after a pause that doubles from `retry_min` up to `retry_max` and is reset only once a watch has worked, so
an identity that may list but not watch lists every `retry_max` seconds, not every second. Every call is bounded: a
list by `call_timeout`, a watch by its own timeout plus `call_timeout`. Each watch asks the server to end it after
between one and two `watch_timeout`s, picked at random per watch (client-go's reflector: minWatchTimeout of 5
minutes times 1 + rand), so the watches of an agent, and of many agents, do not all end and resume together.

The cache (`objects`) holds each object transformed (client-go's SetTransform), keyed by (namespace, name), with
namespace "" for cluster-scoped kinds. `on_change` gets what changed, as client-go's OnAdd, OnUpdate and OnDelete:
after every list (what differs from the cache before it, compared by resourceVersion: an unchanged object is no
change, so a relist after 410 wakes nothing; possibly empty, so a caller learns of each list) and after every
event that changes the cache. It runs synchronously in the loop and should only look and wake.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from kopflet.client.kubeapi import API_ERRORS, DEFAULT_TIMEOUT, WATCH_TIMEOUT, KubeApiError, KubeClient
from kopflet.logs.verbosity import v

logger = logging.getLogger(__name__)

T = TypeVar("T")
Key = tuple[str, str]
"""(namespace, name); namespace "" for cluster-scoped objects."""

RETRY_MIN, RETRY_MAX = 1.0, 30.0
SHORT_WATCH = 1.0
"""client-go's reflector: a watch closed within a second without an event is an error (backoff, relist)."""

ADDED, MODIFIED, DELETED, BOOKMARK = "ADDED", "MODIFIED", "DELETED", "BOOKMARK"
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
"""The annotation on the bookmark that ends a WatchList's initial events (metav1.InitialEventsAnnotationKey)."""


@dataclasses.dataclass(frozen=True)
class Delta(Generic[T]):
    """One change of the cache: ADDED (`old` None), MODIFIED (both) or DELETED (`new` None)."""

    type: str
    old: T | None
    new: T | None


class ShortWatchError(Exception):
    """The watch ended at once without an event (client-go: "very short watch")."""


def object_key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def resource_version(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    return str(meta.get("resourceVersion") or "")


class Informer(Generic[T]):
    def __init__(self, api: KubeClient, path: str, transform: Callable[[Mapping[str, Any]], T], *, what: str,
                 params: Mapping[str, str] | None = None,
                 on_change: Callable[[Sequence[Delta[T]]], None] | None = None,
                 retry_min: float = RETRY_MIN, retry_max: float = RETRY_MAX,
                 call_timeout: float = DEFAULT_TIMEOUT, watch_timeout: float = WATCH_TIMEOUT,
                 watch_list: bool = False) -> None:
        """`path`: the collection (``/apis/<group>/<version>/<resource>``); `params`: its list and watch
        parameters (a field selector ...); `what`: the kind, for the log; `watch_list`: fill the cache with a
        WatchList rather than a list (see above)."""
        self.api, self.path, self.transform, self.what = api, path, transform, what
        self.params = dict(params or {})
        self.on_change = on_change
        self.retry_min, self.retry_max = retry_min, retry_max
        self.call_timeout, self.watch_timeout = call_timeout, watch_timeout
        self.watch_list = watch_list
        self._objects: dict[Key, T] = {}
        self._versions: dict[Key, str] = {}
        self._synced = asyncio.Event()
        self._hopeless = asyncio.Event()
        """Set once the informer cannot sync without help: a list or watch refused (401, 403), or its run ended."""
        self.last_error: BaseException | None = None
        """The last failure (for a reader's error message); None once a list or WatchList has filled the cache."""
        self._delay = retry_min

    @property
    def objects(self) -> Mapping[Key, T]:
        """The cache (a read-only view; empty until the first list)."""
        return types.MappingProxyType(self._objects)

    def has_synced(self) -> bool:
        """Whether a list has filled the cache (client-go HasSynced: stays true once true)."""
        return self._synced.is_set()

    async def wait_synced(self, within: float, *, or_refused: bool = False) -> bool:
        """Wait up to `within` seconds for the first list (client-go WaitForCacheSync); whether it came. With
        `or_refused`, the wait also ends once the informer is refused or stops (`refused`, `last_error`)."""
        if self._synced.is_set():
            return True
        waits = [asyncio.ensure_future(self._synced.wait())]
        if or_refused:
            waits.append(asyncio.ensure_future(self._hopeless.wait()))
        try:
            await asyncio.wait(waits, timeout=within, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        return self._synced.is_set()

    @property
    def refused(self) -> bool:
        """Whether the server refused this identity the list or watch (401, 403) since the last sync, or the
        informer's run has ended: waiting for it is of no use."""
        return self._hopeless.is_set()

    async def run(self) -> None:
        """List, then watch from that version, for as long as the task runs (cancel it to stop)."""
        try:
            await self._run()
        finally:
            self._hopeless.set()

    async def _run(self) -> None:
        while True:
            try:
                version = await self._watch_list() if self.watch_list else await self._list()
                while True:
                    version = await self._watch(version)
            except KubeApiError as exc:
                if exc.status == 410:
                    logger.log(v(2), f"{self.what} watch: too old resource version ({exc.message}), listing again")
                    continue
                if self.watch_list and exc.status in (400, 422):
                    logger.info(f"{self.what} watch: the server refuses a watch list ({exc.message}), listing instead")
                    self.watch_list = False
                    continue
                await self._pause(exc)
            except (*API_ERRORS, ValueError, ShortWatchError) as exc:
                await self._pause(exc)

    async def _pause(self, exc: BaseException) -> None:
        self.last_error = exc
        if isinstance(exc, KubeApiError) and exc.status in (401, 403):
            self._hopeless.set()
        logger.warning(f"{self.what} watch failed, listing again in {self._delay:.0f}s: {exc or type(exc).__name__}")
        await asyncio.sleep(self._delay)
        self._delay = min(self._delay * 2, self.retry_max)

    async def _list(self) -> str:
        """One list into the cache; the version to watch from. ValueError when the answer has none."""
        async with asyncio.timeout(self.call_timeout):
            payload = await self.api.request("GET", self.path, params=self.params or None)
        version = str((payload.get("metadata") or {}).get("resourceVersion") or "")
        if not version:
            raise ValueError(f"the list of {self.path} has no resourceVersion to watch from")
        self._replace([i for i in payload.get("items") or () if isinstance(i, Mapping)], version)
        return version

    async def _watch_list(self) -> str:
        """One WatchList request: its initial events into the cache as a list's items, then its other events, until
        the server ends it; the version to go on from. ValueError when it ends before its initial events do."""
        params = {**self.params, "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}
        initial: dict[Key, Mapping[str, Any]] | None = {}
        version = ""
        timeout = self._watch_seconds()
        async with asyncio.timeout(timeout + self.call_timeout):
            async for event in self.api.watch(self.path, "", timeout_seconds=timeout, params=params):
                if initial is None:  # the initial events are in: a watch like any other
                    version = self._apply(event) or version
                    continue
                obj = event.get("object")
                if not isinstance(obj, Mapping):
                    raise ValueError(f"a {self.what} watch event without an object: {event.get('type')}")
                kind, version = event.get("type"), resource_version(obj) or version
                if kind == BOOKMARK:
                    meta = obj.get("metadata")
                    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
                    if isinstance(annotations, Mapping) and annotations.get(INITIAL_EVENTS_END) == "true":
                        self._replace(list(initial.values()), version)
                        initial = None
                        self._delay = self.retry_min
                elif kind in (ADDED, MODIFIED):
                    initial[object_key(obj)] = obj
                elif kind == DELETED:
                    initial.pop(object_key(obj), None)
                else:
                    raise ValueError(f"a {self.what} watch event of unknown type {kind!r}")
        if initial is not None:
            raise ValueError(f"the watch list of {self.path} ended before its initial events did")
        return version

    def _watch_seconds(self) -> int:
        """This watch's timeoutSeconds: `watch_timeout` times 1 + rand (client-go's reflector), whole seconds (the
        apiserver refuses a fraction)."""
        return max(1, int(self.watch_timeout * (1.0 + random.random())))

    def _replace(self, items: Sequence[Mapping[str, Any]], version: str) -> None:
        """The cache made what a list (or a WatchList's initial events) says, its changes notified."""
        deltas: list[Delta[T]] = []
        objects: dict[Key, T] = {}
        versions: dict[Key, str] = {}
        for item in items:
            key, rv = object_key(item), resource_version(item)
            old = self._objects.get(key)
            if key in self._objects and self._versions.get(key) == rv:
                objects[key] = old  # type: ignore[assignment]  # unchanged: no delta, the same transform
            else:
                objects[key] = self.transform(item)
                deltas.append(Delta(MODIFIED if key in self._objects else ADDED, old, objects[key]))
            versions[key] = rv
        deltas += [Delta(DELETED, old, None) for key, old in self._objects.items() if key not in objects]
        self._objects, self._versions = objects, versions
        self.last_error = None
        self._hopeless.clear()
        self._synced.set()
        logger.log(v(4), f"listed {len(objects)} {self.what} objects at resourceVersion {version}")
        self._notify(deltas)

    async def _watch(self, version: str) -> str:
        """One watch request from `version`, until the server ends it; the version to go on from."""
        started, seen = time.monotonic(), 0
        timeout = self._watch_seconds()
        async with asyncio.timeout(timeout + self.call_timeout):
            async for event in self.api.watch(self.path, version, timeout_seconds=timeout, params=self.params or None):
                seen += 1
                self._delay = self.retry_min  # the watch works: the next failure starts the backoff afresh
                version = self._apply(event) or version
        if not seen and time.monotonic() - started < SHORT_WATCH:
            raise ShortWatchError("very short watch: the watch lasted less than a second and no items were received")
        self._delay = self.retry_min
        return version

    def _apply(self, event: Mapping[str, Any]) -> str:
        """One watch event into the cache; its resourceVersion."""
        obj = event.get("object")
        if not isinstance(obj, Mapping):
            raise ValueError(f"a {self.what} watch event without an object: {event.get('type')}")
        kind, key, rv = event.get("type"), object_key(obj), resource_version(obj)
        if kind == BOOKMARK:
            return rv
        old = self._objects.get(key)
        if kind == DELETED:
            self._objects.pop(key, None)
            self._versions.pop(key, None)
            self._notify([Delta(DELETED, old if old is not None else self.transform(obj), None)])
        elif kind in (ADDED, MODIFIED):
            new = self._objects[key] = self.transform(obj)
            self._versions[key] = rv
            self._notify([Delta(MODIFIED if old is not None else ADDED, old, new)])
        else:
            raise ValueError(f"a {self.what} watch event of unknown type {kind!r}")
        return rv

    def _notify(self, deltas: Sequence[Delta[T]]) -> None:
        """The handler's failure is logged, never the watch's end (client-go's handlers cannot fail it either)."""
        if self.on_change is None:
            return
        try:
            self.on_change(deltas)
        except Exception:
            logger.exception(f"a {self.what} change handler failed")


__all__ = ["ADDED", "DELETED", "MODIFIED", "Delta", "Informer", "Key", "ShortWatchError", "object_key",
           "resource_version"]
