"""Removing what the runtime runs for pods that no longer exist (upstream HandlePodCleanups).

Only after the pod watch has synced: an agent that restarts must not kill healthy pods it has not
heard of yet. So each round lists this node's pods from the apiserver first, and only runtime pods that
are neither listed nor handled by a worker are removed.
"""

from __future__ import annotations

import asyncio
import logging
import os

from cri_client import CriError
from kopflet import paths
from kopflet.api import spec
from kopflet.client.kubeapi import API_ERRORS, KubeClient
from kopflet.container import podstate
from kopflet.kuberuntime.executor import PodSyncer
from kopflet.pleg.relist import RuntimeCache
from kopflet.pods.workers import PodWorkers

logger = logging.getLogger(__name__)

PERIOD = 30.0


async def cleanup_orphans(api: KubeClient, cache: RuntimeCache, workers: PodWorkers, syncer: PodSyncer,
                          field_selector: str) -> int:
    await cache.synced.wait()
    dirs = await asyncio.to_thread(pod_dirs, syncer.layout)
    candidates = [uid for uid in (*cache.pods, *dirs) if uid not in workers.workers]
    if not candidates:
        return 0  # every runtime pod and directory has a worker: nothing to confirm with the apiserver
    listed = {p.get("metadata", {}).get("uid", "") for p in await api.list_pods(field_selector)}
    orphans = [uid for uid in list(cache.pods) if uid not in listed and uid not in workers.workers]
    for uid in orphans:
        runtime = cache.pods.get(uid)
        if runtime is None:
            continue
        logger.info(f"removing orphaned pod {runtime.namespace}/{runtime.name} ({uid}) from the runtime")
        await syncer.kill_pod(spec.minimal_pod(uid, runtime.namespace, runtime.name), runtime, grace=0)
        await syncer.remove_pod(await cache.refresh_pod(uid), uid)
        cache.pods.pop(uid, None)
    # Pod directories (volumes, tmpfs mounts) of pods that are gone everywhere: left when a pod was deleted
    # while the agent was down and its sandboxes were removed too (upstream cleanupOrphanedPodDirs).
    for uid in dirs:
        if uid not in listed and uid not in workers.workers and uid not in cache.pods and uid not in orphans:
            logger.info(f"removing the directory of orphaned pod {uid}")
            await syncer.remove_pod(podstate.RuntimePodStatus(uid=uid), uid)
    return len(orphans)


def pod_dirs(layout: paths.Layout) -> list[str]:
    """The pod uids that have a directory under ``<root>/pods`` (upstream `listPodsFromDisk`; blocking: call in a
    thread)."""
    try:
        return [entry.name for entry in os.scandir(layout.pods_dir) if entry.is_dir()]
    except FileNotFoundError:
        return []


async def run(api: KubeClient, cache: RuntimeCache, workers: PodWorkers, syncer: PodSyncer,
              field_selector: str, period: float = PERIOD) -> None:
    while True:
        try:
            await cleanup_orphans(api, cache, workers, syncer, field_selector)
        except (*API_ERRORS, CriError) as exc:
            logger.warning(f"housekeeping failed, retrying later: {exc}")
        await asyncio.sleep(period)
