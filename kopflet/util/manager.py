"""The ConfigMaps and Secrets the node's pods reference, each from a watch of its own (upstream's default
``configMapAndSecretChangeDetectionStrategy: Watch``: pkg/kubelet/util/manager's watch-based manager, behind the
configmap and secret managers).

Why not a GET each time: the volume manager sets a pod's volumes up again at every sync, so 110 pods with the
ServiceAccount's ``kube-root-ca.crt`` would send 110 GETs a minute for as long as they run; upstream's kubelet
sends none once its watches hold the objects. As upstream:

- a pod is registered (`PodObjects.register`, at each of its syncs; idempotent) with every object it references
  (`kopflet.volumes.plugins.object_names`): ConfigMaps and Secrets of its volumes (projected sources included), of
  its containers' ``env`` and ``envFrom``, and its ``imagePullSecrets``; a new reference starts a watch of that one
  object (field selector ``metadata.name``, the only watch the node authorizer lets a node make), a reference
  dropped or the pod unregistered (`unregister`, once its volumes are torn down) stops it when no other pod holds
  it; an identity refused the watch (a role that grants get only) reads that object with a GET instead;
- a read waits for the watch's first answer (as long as a GET may take; then ``failed to sync configmap cache:
  timed out waiting for the condition``), then answers from the cache: None when the object does not exist;
- an immutable object's watch stops at its first read (it cannot change) and the object stays cached;
- a watch no read has used for five sync periods (an object only ``env`` reads, at container creation) is stopped
  by `recycle_idle` and started again by the next read, which waits for it.

Each watch is a WatchList (its current object first, then changes: one request per object, as upstream's).
`DirectObjects` is the ``Get`` strategy (a GET for every read), for callers built without the node's managers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Container, Mapping
from typing import Any, Protocol

from kopflet.api import spec
from kopflet.client.informer import Informer
from kopflet.client.kubeapi import DEFAULT_TIMEOUT, KubeApiError, KubeClient, q
from kopflet.logs.verbosity import v

logger = logging.getLogger(__name__)

SYNC_TIMEOUT = DEFAULT_TIMEOUT
"""How long a read waits for its watch's first answer: as long as a GET may take. upstream's Get polls for one
second (wait.PollImmediate(10ms, 1s, hasSynced)) and its volume reconciler tries again every 100 ms; a kopflet sync
that fails is tried again after ten seconds, so a slow first answer must not fail it."""
MIN_IDLE_TIME = 60.0
"""upstream minIdleTime; maxIdleTime is five resync periods (NewWatchBasedManager), never less than this."""
RECYCLE_PERIOD = 60.0
"""upstream: startRecycleIdleWatch every minute."""
MIN_WATCH_TIMEOUT = 30 * 60
"""upstream NewWatchBasedManager: each object's reflector has MinWatchTimeout 30 minutes (client-go's default 5
bumped "to avoid recreating watches too often"), so a watch ends after 30 to 60 minutes, not 5 to 10."""
KEPT_FIELDS = ("data", "binaryData", "stringData", "type", "immutable")
"""What the cache keeps of an object (its readers use these; managedFields and the rest are dropped)."""

Object = Mapping[str, Any]
Key = tuple[str, str]


class CacheSyncError(TimeoutError):
    """The object's watch has not answered within `SYNC_TIMEOUT` (upstream: failed to sync <resource> cache)."""


class NotRegisteredError(LookupError):
    """No pod references the object (upstream: object "<ns>"/"<name>" not registered)."""


def trimmed(obj: Mapping[str, Any]) -> Object:
    return {k: obj[k] for k in KEPT_FIELDS if k in obj}


def _trimmed_or_none(obj: Mapping[str, Any] | None) -> Object | None:
    return None if obj is None else trimmed(obj)


def immutable(obj: Object) -> bool:
    return obj.get("immutable") is True


@dataclasses.dataclass(eq=False)
class _Item:
    """One watched object (upstream objectCacheItem): who holds it, its watch, when it was last read."""

    informer: Informer[Object]
    refs: dict[str, int] = dataclasses.field(default_factory=dict)
    task: asyncio.Task[None] | None = None
    last_access: float = 0.0
    immutable: bool = False
    direct: bool = False
    """The identity may not watch it (401, 403): read with a GET each time instead."""


class ObjectCache:
    """Watched objects of one resource by (namespace, name), reference-counted by pod UID (upstream objectCache)."""

    def __init__(self, api: KubeClient, resource: str, collection: Callable[[str], str],
                 fetch: Callable[[str, str], Awaitable[Object | None]], *, max_idle: float = MIN_IDLE_TIME,
                 sync_timeout: float = SYNC_TIMEOUT, clock: Callable[[], float] = time.monotonic) -> None:
        """`resource`: the plural, for messages; `collection`: its path in a namespace; `fetch`: a GET of one
        object (None when it does not exist), for an identity that may not watch it; `max_idle`: how long a watch
        may go unread before `recycle_idle` stops it (at least `MIN_IDLE_TIME`)."""
        self.api, self.resource, self.collection, self.fetch = api, resource, collection, fetch
        self._watch_list = True  # False once the server has refused one (each later watch lists instead)
        self._refusal_logged = False
        self.max_idle, self.sync_timeout, self.clock = max(max_idle, MIN_IDLE_TIME), sync_timeout, clock
        self._items: dict[Key, _Item] = {}
        self._stopping: set[asyncio.Task[None]] = set()
        self._closed = False

    def _informer(self, namespace: str, name: str) -> Informer[Object]:
        return Informer(self.api, self.collection(namespace), trimmed,
                        what=f"{self.resource} {namespace}/{name}", params={"fieldSelector": f"metadata.name={name}"},
                        watch_list=self._watch_list, watch_timeout=MIN_WATCH_TIMEOUT)

    def _start(self, item: _Item, namespace: str, name: str) -> None:
        if self._closed:  # upstream: no reflector is started once the kubelet shuts down (its reads time out)
            return
        item.task = asyncio.get_running_loop().create_task(
            item.informer.run(), name=f"watch-{self.resource}-{namespace}-{name}")

    def _stop(self, item: _Item) -> None:
        if item.task is not None:
            item.task.cancel()
            self._stopping.add(item.task)
            item.task.add_done_callback(self._stopping.discard)
            item.task = None

    def add_reference(self, namespace: str, name: str, uid: str) -> None:
        """The first reference starts the object's watch (its first read waits for it)."""
        item = self._items.get((namespace, name))
        if item is None:
            item = self._items[(namespace, name)] = _Item(self._informer(namespace, name), last_access=self.clock())
            self._start(item, namespace, name)
        item.refs[uid] = item.refs.get(uid, 0) + 1

    def delete_reference(self, namespace: str, name: str, uid: str) -> None:
        """The last reference stops the watch and forgets the object."""
        item = self._items.get((namespace, name))
        if item is None:
            return
        count = item.refs.get(uid, 0) - 1
        if count > 0:
            item.refs[uid] = count
        else:
            item.refs.pop(uid, None)
        if not item.refs:
            self._stop(item)
            del self._items[(namespace, name)]

    def registered(self, namespace: str, name: str) -> bool:
        return (namespace, name) in self._items

    async def get(self, namespace: str, name: str) -> Object | None:
        """The object as its watch last saw it; None when it does not exist. NotRegisteredError when no pod references
        it; CacheSyncError when its watch has not answered within `sync_timeout` or the cache is closed. An identity
        refused the watch (401, 403: a role that grants get only) reads the object with a GET from then on."""
        item = self._items.get((namespace, name))
        if item is None:
            raise NotRegisteredError(f'object "{namespace}"/"{name}" not registered')
        singular = self.resource.removesuffix("s")
        if self._closed:
            raise CacheSyncError(f"failed to sync {singular} cache: the {singular} manager is stopped")
        if item.direct:
            return _trimmed_or_none(await self.fetch(namespace, name))
        item.last_access = self.clock()  # before waiting: a slow first answer is not taken for idleness
        if item.task is None and not item.immutable:  # stopped while idle: watched again, its cache from scratch
            item.informer = self._informer(namespace, name)
            self._start(item, namespace, name)
        informer = item.informer
        if not informer.has_synced() and not await informer.wait_synced(self.sync_timeout, or_refused=True):
            error = informer.last_error
            if isinstance(error, KubeApiError) and error.status in (401, 403):
                return await self._refused(item, namespace, name, error)
            cause = f": {error}" if error is not None else ""
            raise CacheSyncError(f"failed to sync {singular} cache: timed out waiting for the condition{cause}")
        if not informer.watch_list:
            self._watch_list = False
        obj = informer.objects.get((namespace, name))
        if obj is not None and immutable(obj) and not item.immutable and self._items.get((namespace, name)) is item:
            item.immutable = True  # it cannot change: its watch is no longer needed
            self._stop(item)
            logger.log(v(4), f"Stopped watching for changes - object is immutable: {self.resource} {namespace}/{name}")
        return obj

    async def _refused(self, item: _Item, namespace: str, name: str, error: KubeApiError) -> Object | None:
        """The watch was refused: GETs for this object from now on (a GET refused too is the read's error)."""
        if not self._refusal_logged:
            self._refusal_logged = True
            logger.warning(f"cannot watch {self.resource} ({error.message}): reading {self.resource} the agent may "
                           f"not watch with a GET at each read; with a role that grants get only, set "
                           f"configMapAndSecretChangeDetectionStrategy: Get")
        item.direct = True
        self._stop(item)
        return _trimmed_or_none(await self.fetch(namespace, name))

    def recycle_idle(self) -> int:
        """Stop the watches no read has used for `max_idle` (upstream startRecycleIdleWatch); how many."""
        now, stopped = self.clock(), 0
        for (namespace, name), item in self._items.items():
            if item.task is not None and item.informer.has_synced() and now - item.last_access > self.max_idle:
                self._stop(item)
                stopped += 1
                logger.log(v(4), f"Not acquired for long time, Stopped watching for changes: {self.resource} "
                                 f"{namespace}/{name}")
        return stopped

    async def close(self) -> None:
        self._closed = True
        for item in self._items.values():
            self._stop(item)
        self._items.clear()
        if self._stopping:
            await asyncio.gather(*self._stopping, return_exceptions=True)


class Objects(Protocol):
    """What the volume manager, the container environment and the image pulls read a pod's objects through."""

    async def config_map(self, pod: spec.Pod, name: str) -> Object | None: ...

    async def secret(self, pod: spec.Pod, name: str) -> Object | None: ...

    def unregister(self, uid: str) -> None: ...


class DirectObjects:
    """upstream's ``Get`` strategy: a GET for every read, nothing kept."""

    def __init__(self, api: KubeClient) -> None:
        self.api = api

    async def config_map(self, pod: spec.Pod, name: str) -> Object | None:
        return await self.api.get_config_map(pod.namespace, name)

    async def secret(self, pod: spec.Pod, name: str) -> Object | None:
        return await self.api.get_secret(pod.namespace, name)

    def unregister(self, uid: str) -> None:
        pass


@dataclasses.dataclass
class _Registered:
    """What a pod holds: its spec's references and the names read for it beyond them (kept until it goes)."""

    namespace: str
    config_maps: frozenset[str]
    secrets: frozenset[str]
    extra_config_maps: frozenset[str] = frozenset()
    extra_secrets: frozenset[str] = frozenset()


class PodObjects:
    """The ConfigMaps and Secrets of the registered pods (upstream's cacheBasedManager over two objectCaches)."""

    def __init__(self, api: KubeClient, names: Callable[[spec.Pod], tuple[frozenset[str], frozenset[str]]], *,
                 sync_frequency: float = 60.0, pods: Container[str] = (),
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`names`: the ConfigMaps and the Secrets a pod references (`kopflet.volumes.plugins.object_names`: the
        volumes live above this module); `pods`: the UIDs the node has workers for; each minute a registered pod
        not among them is unregistered (a pod gone without its volumes' teardown holds no watch)."""
        self.names, self.pods = names, pods
        max_idle = 5 * sync_frequency  # upstream NewWatchBasedManager: an integer multiple of the resync period
        self.config_maps = ObjectCache(api, "configmaps", lambda ns: f"/api/v1/namespaces/{q(ns)}/configmaps",
                                       api.get_config_map, max_idle=max_idle, clock=clock)
        self.secrets = ObjectCache(api, "secrets", lambda ns: f"/api/v1/namespaces/{q(ns)}/secrets",
                                   api.get_secret, max_idle=max_idle, clock=clock)
        self._pods: dict[str, _Registered] = {}
        self._specs: dict[str, spec.Pod] = {}

    def register(self, pod: spec.Pod) -> None:
        """Reference what the pod references now: what it no longer does is dropped (upstream RegisterPod)."""
        if self._specs.get(pod.uid) is pod:
            return
        before = self._pods.get(pod.uid) or _Registered(pod.namespace, frozenset(), frozenset())
        config_maps, secrets = self.names(pod)
        now = _Registered(pod.namespace, config_maps | before.extra_config_maps, secrets | before.extra_secrets,
                          before.extra_config_maps, before.extra_secrets)
        self._pods[pod.uid], self._specs[pod.uid] = now, pod
        for cache, new, old in ((self.config_maps, now.config_maps, before.config_maps),
                                (self.secrets, now.secrets, before.secrets)):
            for name in new - old:
                cache.add_reference(pod.namespace, name, pod.uid)
            for name in old - new:
                cache.delete_reference(pod.namespace, name, pod.uid)

    def unregister(self, uid: str) -> None:
        """The pod's references dropped (upstream UnregisterPod, once its volumes are torn down); idempotent."""
        before = self._pods.pop(uid, None)
        self._specs.pop(uid, None)
        if before is None:
            return
        for name in before.config_maps:
            self.config_maps.delete_reference(before.namespace, name, uid)
        for name in before.secrets:
            self.secrets.delete_reference(before.namespace, name, uid)

    async def config_map(self, pod: spec.Pod, name: str) -> Object | None:
        return await self._get(self.config_maps, pod, name)

    async def secret(self, pod: spec.Pod, name: str) -> Object | None:
        return await self._get(self.secrets, pod, name)

    async def _get(self, cache: ObjectCache, pod: spec.Pod, name: str) -> Object | None:
        self.register(pod)
        kept = self._pods[pod.uid]
        held = kept.config_maps if cache is self.config_maps else kept.secrets
        if name not in held:
            # Not a reference the pod's spec shows (a caller's own read): held for the pod all the same, until it is
            # unregistered, so the read is answered as the others are.
            cache.add_reference(pod.namespace, name, pod.uid)
            if cache is self.config_maps:
                self._pods[pod.uid] = dataclasses.replace(kept, config_maps=kept.config_maps | {name},
                                                          extra_config_maps=kept.extra_config_maps | {name})
            else:
                self._pods[pod.uid] = dataclasses.replace(kept, secrets=kept.secrets | {name},
                                                          extra_secrets=kept.extra_secrets | {name})
        return await cache.get(pod.namespace, name)

    def registered_pods(self) -> frozenset[str]:
        return frozenset(self._pods)

    def retain(self, keep: Container[str]) -> None:
        """Unregister every pod not in `keep`."""
        for uid in [u for u in self._pods if u not in keep]:
            self.unregister(uid)

    async def run(self) -> None:
        """Each minute, let go of pods without a worker and stop idle watches, until cancelled; then every watch."""
        try:
            while True:
                await asyncio.sleep(RECYCLE_PERIOD)
                try:
                    self.retain(self.pods)
                    self.config_maps.recycle_idle()
                    self.secrets.recycle_idle()
                except Exception:  # a round's failure is logged; the watches stay, as the next round
                    logger.exception("the ConfigMap and Secret watches' housekeeping failed")
        finally:
            await self.close()

    async def close(self) -> None:
        self._pods.clear()
        self._specs.clear()
        await self.config_maps.close()
        await self.secrets.close()


__all__ = ["CacheSyncError", "DirectObjects", "NotRegisteredError", "ObjectCache", "Objects", "PodObjects", "immutable",
           "trimmed"]
