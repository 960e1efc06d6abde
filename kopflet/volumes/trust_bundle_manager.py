"""The cluster's ClusterTrustBundles for projected ``clusterTrustBundle`` sources (upstream
pkg/kubelet/clustertrustbundle, v1.37.1: LazyInformerManager over InformerManager).

Nothing happens until the first pod with such a source is set up (upstream NewLazyInformerManager: "the
ClusterTrustBundle informer will be started eventually once a trust bundle is requested"). Then, once, as
``ensureManagerSet``: the discovery documents of certificates.k8s.io v1, v1beta1 and v1alpha1 are read in that order,
and the first that lists ``clustertrustbundles`` is the version an informer (`kopflet.client.informer`: list, then
watch, relisting on 410 Gone, backing off on errors) keeps from then on, for the life of the process; the first
caller waits up to 10 s for its first list. A version not served (404) is passed over; none served is upstream's
NoopManager for good ("not supported in static kubelet mode"); a discovery that fails otherwise is an error for this
setup and asked again at the next one. Until the first list, every source gets "ClusterTrustBundle informer has not
yet synced"; after it, the cache, even while the watch is broken and being listed again (HasSynced stays true).

Pods see a changed bundle at their next sync: upstream's informer handlers only drop the cached answers of the
bundle's signer (or name), and its volume manager rewrites projected volumes at each periodic sync (syncFrequency).
Here the pod workers also learn of it at once: each pod set up records the bundles its sources read (by name, by
signer), and a bundle added, modified or deleted wakes the pods that read it, so the projected file changes within
a sync rather than a sync period. A pod told "not yet synced" is woken by the first list.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Sequence

from kopflet.api import spec
from kopflet.client.informer import RETRY_MIN, Delta, Informer
from kopflet.client.kubeapi import API_ERRORS, DEFAULT_TIMEOUT, KubeApiError, KubeClient
from kopflet.logs.verbosity import v
from kopflet.volumes import trust_bundles as ctb

logger = logging.getLogger(__name__)


class ClusterTrustBundleManager:
    def __init__(self, api: KubeClient, *, wake: Callable[[set[str]], None] | None = None,
                 sync_wait: float = ctb.SYNC_WAIT, order_seed: bytes | None = None,
                 retry_min: float = RETRY_MIN, call_timeout: float = DEFAULT_TIMEOUT) -> None:
        """`wake`: the pod workers' wake (the pods reading a changed bundle); `order_seed`: the anchors' shuffle,
        drawn once per process unless given."""
        self.api, self.wake, self.sync_wait = api, wake, sync_wait
        self.retry_min, self.call_timeout = retry_min, call_timeout
        self._order = order_seed if order_seed is not None else os.urandom(16)
        self._lock = asyncio.Lock()  # upstream's managerLock: later callers wait for the first one's sync wait
        self._version: str | None = None  # None: not chosen yet; "": none served (NoopManager)
        self._informer: Informer[ctb.ClusterTrustBundle] | None = None
        self._started = asyncio.Event()
        self._snapshot: ctb.Bundles | None = None
        self._pods: dict[str, frozenset[ctb.Reference]] = {}
        self._unsynced: set[str] = set()  # pods told there were no bundles to look at yet

    @property
    def version(self) -> str | None:
        """The API version in use; "" when none is served, None before the first need."""
        return self._version

    async def bundles(self) -> ctb.Bundles:
        """Every ClusterTrustBundle as the informer has them, or the error every source gets instead."""
        error = await self._ensure()
        if error:
            return ctb.Bundles(error=error)
        if self._informer is None:
            return ctb.Bundles(error=ctb.NOT_SUPPORTED)
        if not self._informer.has_synced():
            return ctb.Bundles(error=ctb.NOT_SYNCED)
        if self._snapshot is None:
            self._snapshot = ctb.Bundles(items=tuple(self._informer.objects.values()), order_seed=self._order)
        return self._snapshot

    async def for_pod(self, pod: spec.Pod) -> ctb.Bundles:
        """`bundles` for one setup of the pod's volumes; the pod is woken when a bundle its sources read changes."""
        bundles = await self.bundles()
        self._pods[pod.uid] = ctb.references(pod)
        if bundles.error and bundles.error != ctb.NOT_SUPPORTED:
            self._unsynced.add(pod.uid)
        return bundles

    def forget(self, uid: str) -> None:
        """The pod is gone: no more wakes for it."""
        self._pods.pop(uid, None)
        self._unsynced.discard(uid)

    async def run(self) -> None:
        """The informer, once the first need has chosen its version (idle until then, and for good when the
        apiserver serves none)."""
        await self._started.wait()
        assert self._informer is not None
        await self._informer.run()

    async def _ensure(self) -> str:
        """ensureManagerSet: the version chosen once (its informer started, the first list awaited up to
        `sync_wait`); upstream's error when the discovery fails, '' otherwise."""
        if self._version is not None and not self._lock.locked():
            return ""
        async with self._lock:
            if self._version is not None:
                return ""
            for version in ctb.API_VERSIONS:
                try:
                    async with asyncio.timeout(self.call_timeout):
                        discovery = await self.api.request("GET", ctb.discovery_path(version))
                except KubeApiError as exc:
                    if exc.not_found:
                        continue
                    logger.warning(f"discovering {ctb.API_GROUP}/{version} failed: {exc}")
                    return ctb.DISCOVERY_FAILED + exc.message
                except API_ERRORS as exc:
                    logger.warning(f"discovering {ctb.API_GROUP}/{version} failed: {exc or type(exc).__name__}")
                    return ctb.DISCOVERY_FAILED + (str(exc) or type(exc).__name__)
                if not ctb.serves_bundles(discovery):
                    continue
                await self._start(version)
                return ""
            self._version = ""
            logger.info("No version of the ClusterTrustBundle API was found, the ClusterTrustBundle informer won't "
                        "be started")
            return ""

    async def _start(self, version: str) -> None:
        self._informer = Informer(self.api, ctb.list_path(version), ctb.ClusterTrustBundle.from_object,
                                  what="ClusterTrustBundle", on_change=self._changed, retry_min=self.retry_min,
                                  call_timeout=self.call_timeout)
        self._version = version
        self._started.set()
        logger.info(f'Started ClusterTrustBundle informer (apiGroup "{ctb.API_GROUP}/{version}")')
        logger.info("Waiting for ClusterTrustBundle informer to sync")
        if await self._informer.wait_synced(self.sync_wait):
            logger.info("ClusterTrustBundle informer synced")
        else:
            logger.info("ClusterTrustBundle informer not synced, continuing to attempt in background")

    def _changed(self, deltas: Sequence[Delta[ctb.ClusterTrustBundle]]) -> None:
        """After each list and each event: the snapshot is taken again, the pods concerned are woken (those reading
        a changed bundle; after a list, also those told there was nothing to look at yet)."""
        self._snapshot = None
        changed = [bundle for d in deltas for bundle in (d.old, d.new) if bundle is not None]
        for d in deltas:
            bundle = d.new or d.old
            assert bundle is not None
            logger.log(v(2), f"ClusterTrustBundle {bundle.name} {d.type.lower()} (signerName "
                             f"{bundle.signer_name!r})")
        uids = ctb.affected(self._pods, changed) | self._unsynced
        self._unsynced.clear()
        if uids and self.wake is not None:
            self.wake(uids)


__all__ = ["ClusterTrustBundleManager"]
