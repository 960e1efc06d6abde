"""Removing what the runtime runs for pods that no longer exist (upstream HandlePodCleanups).

Only after the pod watch has synced: an agent that restarts must not kill healthy pods it has not
heard of yet. So each round lists this node's pods from the apiserver first, and only runtime pods that
are neither listed nor handled by a worker are removed. In standalone mode nothing is listed (there is no
apiserver): every runtime pod no worker has (the static pods have theirs) is removed, as upstream's HandlePodCleanups
removes what its pod manager does not know.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable

from cri_client import CriError
from kopflet import paths
from kopflet.client.kubeapi import API_ERRORS, KubeClient
from kopflet.client.standalone import is_standalone
from kopflet.cm.cgroups import CgroupError, PodCgroups
from kopflet.kuberuntime.executor import pod_log_dir_names
from kopflet.logs.verbosity import v
from kopflet.pleg.relist import RuntimeCache
from kopflet.pods.teardown import Teardown
from kopflet.pods.workers import PodWorkers
from kopflet.userns.allocator import UsernsError
from kopflet.userns.userns_manager import UsernsManager

logger = logging.getLogger(__name__)

PERIOD = 30.0


class Housekeeping:
    def __init__(self, api: KubeClient, relist: RuntimeCache, workers: PodWorkers, teardown: Teardown,
                 layout: paths.Layout, field_selector: str, userns: UsernsManager | None = None,
                 cgroups: PodCgroups | None = None, sources_ready: Callable[[], bool] = lambda: True) -> None:
        """`userns` is the user namespace manager, whose orphaned ranges each round frees; `cgroups` the pod
        cgroups, whose orphans each round destroys; `sources_ready` says whether every pod source has given its
        pods once (upstream sourcesReady.AllReady: until then no round runs)."""
        self.api, self.relist, self.workers, self.teardown = api, relist, workers, teardown
        self.layout, self.field_selector, self.userns, self.cgroups = layout, field_selector, userns, cgroups
        self.sources_ready = sources_ready

    async def cleanup_orphans(self) -> int:
        """Tear down the runtime pods, pod directories and pod log directories no worker has and the apiserver does
        not list."""
        if not self.sources_ready():
            # upstream syncLoopIteration: a static pod source that has not answered yet (staticPodURL) may have pods
            # running that no worker has
            logger.log(v(4), "SyncLoop (housekeeping, skipped): sources aren't ready yet")
            return 0
        await self.relist.synced.wait()
        dirs = await asyncio.to_thread(pod_dirs, self.layout)
        # Log directories outlive everything else of a pod removed while the agent was down (its sandboxes gone,
        # nothing names it any more): upstream's container GC removes them by UID (evictPodLogsDirectories).
        log_dirs = {paths.pod_uid_from_log_dir(name)
                    for name in await asyncio.to_thread(pod_log_dir_names, self.layout.pod_log_root)}
        dirs += sorted(log_dirs - set(dirs))
        cgroups = await asyncio.to_thread(self.cgroups.pod_cgroups) if self.cgroups is not None else {}
        candidates = [uid for uid in (*self.relist.pods, *dirs, *cgroups) if uid not in self.workers]
        if not candidates:
            # every runtime pod and directory has a worker: nothing to confirm with the apiserver
            await self.cleanup_user_namespaces(set())
            return 0
        listed = set() if is_standalone(self.api) else \
            {p.get("metadata", {}).get("uid", "") for p in await self.api.list_pods(self.field_selector)}
        orphans = [uid for uid in list(self.relist.pods) if uid not in listed and uid not in self.workers]
        for uid in orphans:
            runtime = self.relist.pods.get(uid)
            if runtime is None:
                continue
            logger.info(f"removing orphaned pod {runtime.namespace}/{runtime.name} ({uid}) from the runtime")
            await self._tear_down(uid, runtime.namespace, runtime.name)
        # Pod directories (volumes, tmpfs mounts) of pods that are gone everywhere: left when a pod was deleted
        # while the agent was down and its sandboxes were removed too (upstream cleanupOrphanedPodDirs).
        for uid in dirs:
            if uid not in listed and uid not in self.workers and uid not in self.relist.pods and uid not in orphans:
                logger.info(f"removing the directory of orphaned pod {uid}")
                await self._tear_down(uid)
        # The runtime's orphans took their cgroups with them; the rest is looked at again under the lock (a
        # directory's teardown that left its volumes leaves the cgroup at the minimum shares).
        await self.cleanup_pod_cgroups({uid: names for uid, names in cgroups.items()
                                        if uid not in listed and uid not in orphans})
        await self.cleanup_user_namespaces(listed)
        return len(orphans)

    async def _tear_down(self, uid: str, namespace: str = "", name: str = "") -> None:
        """One orphan's teardown; its failure is logged and the round goes on with the others (upstream's
        HandlePodCleanups hands each orphan to its own pod worker and logs a kill that fails), and the next round
        finds it again."""
        try:
            await self.teardown.pod(uid, namespace, name)
        except (CriError, OSError) as exc:
            logger.warning(f"failed to remove orphaned pod {namespace}/{name} ({uid}), retrying later: {exc}"
                           if name else f"failed to remove the directory of orphaned pod {uid}, retrying later: {exc}")

    async def cleanup_pod_cgroups(self, found: dict[str, list[str]]) -> None:
        """upstream cleanupOrphanedPodCgroups: the cgroups of pods that are not running (no worker, nothing on the
        runtime; the caller leaves out the pods the apiserver lists and the runtime orphans torn down this round) are
        destroyed, their processes killed first. A pod whose volumes directory is still there keeps its cgroup at
        the minimum cpu shares until the volumes are gone (memory-backed volumes' charges stay in it). Failures are
        logged; the next round tries again."""
        if self.cgroups is None:
            return
        for uid, names in found.items():
            async with self.cgroups.lock:
                if uid in self.workers or uid in self.relist.pods:
                    continue
                try:
                    if await asyncio.to_thread(os.path.isdir, self.layout.volumes_dir(uid)):
                        logger.info(f"orphaned pod {uid} found, but volumes not yet removed: reducing cpu to minimum")
                        for name in names:
                            await asyncio.to_thread(self.cgroups.reduce_cpu_limits, name)
                        continue
                    logger.info(f"orphaned pod {uid} found, removing pod cgroups")
                    await asyncio.to_thread(self.cgroups.destroy, uid, names)
                except (CgroupError, OSError) as exc:
                    logger.warning(f"failed to destroy orphaned pod cgroup of pod {uid}: {exc}")

    async def cleanup_user_namespaces(self, listed: set[str]) -> None:
        """Upstream HandlePodCleanups' CleanupOrphanedPodUsernsAllocations: free the user namespace ranges of pods
        no one knows any more (not `listed` by the apiserver, no worker, nothing on the runtime) and of pods whose
        directory is gone. Whether a pod is known is asked under the manager's lock, so a pod whose worker
        allocates meanwhile keeps its range. A failure is logged, as upstream does."""
        if self.userns is None or not self.userns.holds_ranges:
            return  # nothing to free: no directory read, no thread

        def known(uid: str) -> bool:
            return uid in listed or uid in self.workers or uid in self.relist.pods

        try:
            released = await asyncio.to_thread(self.userns.cleanup_orphaned, known)
        except UsernsError as exc:
            logger.warning(f"failed cleaning up orphaned pod user namespaces allocations: {exc}")
            return
        for uid in released:
            logger.info(f"freed the user namespace range of orphaned pod {uid}")

    async def run(self, period: float = PERIOD) -> None:
        while True:
            try:
                await self.cleanup_orphans()
            except (*API_ERRORS, CriError, OSError) as exc:
                logger.warning(f"housekeeping failed, retrying later: {exc}")
            await asyncio.sleep(period)


def pod_dirs(layout: paths.Layout) -> list[str]:
    """The pod uids that have a directory under ``<root>/pods`` (upstream `listPodsFromDisk`; blocking: call in a
    thread)."""
    try:
        return [entry.name for entry in os.scandir(layout.pods_dir) if entry.is_dir()]
    except FileNotFoundError:
        return []
