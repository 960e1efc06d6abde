"""The static pod source: manifests in ``--pod-manifest-path`` run without the apiserver and show in it
as mirror pods (upstream pkg/kubelet/config/file.go and pod/mirror_client.go).

The directory is rescanned every ``fileCheckFrequency`` (20s), and within a second when a file's name,
size or mtime changes. A changed manifest is a new pod (its UID hashes the content): the old one is
killed, the new one started. A broken file is logged once per content and skipped, as upstream's file
source skips it; the other manifests are unaffected. Mirror pods are (re)created whenever missing,
stale or being deleted, and removed with their static pod; in standalone mode there are none (upstream's mirror client
without an apiserver client does nothing).

`StaticPodSource` is also the static pod manager of the other source, ``staticPodURL``
(`kopflet.config.http_source`): each source hands it its whole set (`StaticPodSource.apply`).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from kopflet.api import times
from kopflet.client.kubeapi import API_ERRORS, KubeClient
from kopflet.client.standalone import is_standalone
from kopflet.config import static_pods
from kopflet.config.settings import AgentConfig
from kopflet.config.static_pods import ManifestError, StaticPod

logger = logging.getLogger(__name__)

CHANGE_POLL = 1.0


def read_manifests(directory: str) -> dict[str, str]:
    """Manifest path -> text (blocking: call in a thread). A missing directory has no manifests."""
    out: dict[str, str] = {}
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return out
    for name in names:
        path = os.path.join(directory, name)
        if static_pods.is_manifest_name(name) and os.path.isfile(path):
            try:
                with open(path, encoding="utf-8") as f:
                    out[path] = f.read()
            except (OSError, UnicodeDecodeError) as exc:
                out[path] = f"\0unreadable: {exc}"
    return out


def directory_signature(directory: str) -> tuple[tuple[str, int, int], ...]:
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except FileNotFoundError:
        return ()
    return tuple((e.name, int(e.stat().st_mtime_ns), e.stat().st_size) for e in entries)


class PodSink(Protocol):
    """Where a pod source's changes go (the pod workers): upstream's config.PodUpdate channel."""

    def update(self, body: Mapping[str, Any]) -> None: ...

    def deleted(self, body: Mapping[str, Any]) -> None: ...

    def status_lost(self, uid: str) -> None: ...


class StaticPodSource:
    def __init__(self, cfg: AgentConfig, api: KubeClient, workers: PodSink, node_uid: Callable[[], str]) -> None:
        """`node_uid` gives the registered Node's uid, which mirror pods name as their owner."""
        self.cfg, self.api, self.workers, self.node_uid = cfg, api, workers, node_uid
        self.mirrors = not is_standalone(api)
        """Whether static pods have mirror pods (not in standalone mode)."""
        self._sources: dict[str, dict[str, StaticPod]] = {}  # source ("file", "http") -> key -> pod
        self._reported: dict[str, str] = {}
        self._mirrors = asyncio.Lock()  # one pass over the mirror pods at a time (a scan, the Node's registration)
        self._applying = asyncio.Lock()  # one source's set replaced at a time (upstream podStorage's podLock)

    @property
    def pods(self) -> dict[str, StaticPod]:
        """Every source's static pods: a file's keyed by its path, a URL's by their UID."""
        return {key: pod for pods in self._sources.values() for key, pod in pods.items()}

    async def scan(self) -> None:
        files = await asyncio.to_thread(read_manifests, self.cfg.pod_manifest_path)
        seen = times.micro_timestamp(datetime.datetime.now(datetime.UTC))
        found: dict[str, StaticPod] = {}
        for path, text in files.items():
            try:
                if text.startswith("\0unreadable: "):
                    raise ManifestError(f"{path}: {text.removeprefix(chr(0) + 'unreadable: ')}")
                pod = static_pods.static_pod(path, text, self.cfg.node_name, seen)
            except ManifestError as exc:
                if self._reported.get(path) != text:
                    self._reported[path] = text
                    logger.error(f"static pod manifest skipped: {exc}")
                continue
            self._reported.pop(path, None)
            found[path] = pod
        await self.apply(static_pods.SOURCE_FILE, found)

    async def apply(self, source: str, found: Mapping[str, StaticPod]) -> None:
        """A source's whole set of static pods (upstream's SET update, podStorage.merge): the pods gone or changed
        (a new UID) are stopped with their mirror pods, the new ones started; an unchanged pod keeps its seen time."""
        async with self._applying:
            current = self._sources.get(source, {})
            by_uid = {p.uid: p for p in current.values()}
            found = {key: by_uid.get(pod.uid, pod) for key, pod in found.items()}
            kept = {p.uid for p in found.values()}
            for old in current.values():
                if old.uid not in kept:
                    logger.info(f"static pod {old.namespace}/{old.name} from {old.path} removed or changed: "
                                f"stopping it")
                    self.workers.deleted(dict(old.body))
                    await self._delete_mirror(old)
            self._sources[source] = dict(found)
            await self.ensure_mirrors()
            for pod in found.values():
                if pod.uid not in by_uid:
                    logger.info(f"static pod {pod.namespace}/{pod.name} from {pod.path}")
                    self.workers.update(dict(pod.body))

    async def ensure_mirrors(self) -> None:
        """Every static pod has exactly one current mirror pod (upstream syncPod's mirror handling).

        Mirrors are found by listing this node's pods: the Node authorizer answers a GET of a pod that
        does not exist (yet) with 403, not 404, since it has no relationship to the node."""
        async with self._mirrors:
            await self._ensure_mirrors()

    async def _ensure_mirrors(self) -> None:
        if not self.mirrors or not self.pods or not self.node_uid():
            return  # upstream syncPod makes no mirror pod while the Node cannot be had (not registered yet)
        try:
            bound = {(p["metadata"]["namespace"], p["metadata"]["name"]): p
                     for p in await self.api.list_pods(self.cfg.pod_field_selector)}
        except API_ERRORS as exc:
            logger.warning(f"cannot list this node's pods to check mirror pods: {exc}")
            return
        for pod in list(self.pods.values()):
            try:
                mirror = bound.get((pod.namespace, pod.name))
                if mirror is not None:
                    meta = mirror.get("metadata", {})
                    current = (meta.get("annotations") or {}).get(static_pods.CONFIG_MIRROR) == pod.uid
                    if current and not meta.get("deletionTimestamp"):
                        continue
                    await self.api.delete_pod(pod.namespace, pod.name, meta.get("uid", ""))
                await self.api.request("POST", f"/api/v1/namespaces/{pod.namespace}/pods",
                                       body=static_pods.mirror_pod(pod, self.cfg.node_name, self.node_uid()))
                self.workers.status_lost(pod.uid)
            except API_ERRORS as exc:
                logger.warning(f"mirror pod {pod.namespace}/{pod.name}: {exc}")

    async def _delete_mirror(self, pod: StaticPod) -> None:
        if not self.mirrors:
            return
        try:
            mirror = next((p for p in await self.api.list_pods(self.cfg.pod_field_selector)
                           if (p["metadata"]["namespace"], p["metadata"]["name"]) == (pod.namespace, pod.name)),
                          None)
            if mirror is not None and (mirror["metadata"].get("annotations") or {}).get(
                    static_pods.CONFIG_MIRROR) == pod.uid:
                await self.api.delete_pod(pod.namespace, pod.name, mirror["metadata"]["uid"])
        except API_ERRORS as exc:
            logger.warning(f"mirror pod {pod.namespace}/{pod.name}: {exc}")

    async def run(self) -> None:
        """Rescan on change (checked every second) or every fileCheckFrequency."""
        loop = asyncio.get_running_loop()
        signature: Any = await asyncio.to_thread(directory_signature, self.cfg.pod_manifest_path)
        next_full = loop.time() + self.cfg.file_check_frequency
        while True:
            await asyncio.sleep(CHANGE_POLL)
            current = await asyncio.to_thread(directory_signature, self.cfg.pod_manifest_path)
            if current != signature or loop.time() >= next_full:
                signature, next_full = current, loop.time() + self.cfg.file_check_frequency
                try:
                    await self.scan()
                except API_ERRORS as exc:
                    logger.warning(f"static pod scan failed: {exc}")
