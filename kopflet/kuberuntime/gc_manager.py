"""The node-wide container GC loop (upstream containerGC, run every ContainerGCPeriod = 1 minute).

A pod's own worker already drops its older dead instances as it syncs; this pass also covers pods no worker is
syncing right now and applies the node-wide cap (--maximum-dead-containers), so ``crictl ps -a`` stays bounded
under churn. Pods that were deleted are not its business: their worker (or the housekeeping, for orphans the
apiserver confirms gone) tears them down whole.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection

from kopflet.kuberuntime import gc
from kopflet.kuberuntime.executor import PodSyncer
from kopflet.pleg.relist import RuntimeCache
from kopflet.rounds import log_failed_round

logger = logging.getLogger(__name__)

PERIOD = 60.0  # upstream ContainerGCPeriod


class ContainerGC:
    def __init__(self, relist: RuntimeCache, executor: PodSyncer, policy: gc.GCPolicy,
                 terminated: Callable[[], Collection[str]] = frozenset) -> None:
        """`terminated` lists the pods that are terminal (Succeeded, Failed): their runtime may go when the eviction
        manager reclaims (upstream ShouldPodRuntimeBeRemoved)."""
        self.relist, self.executor, self.policy, self.terminated = relist, executor, policy, terminated

    async def collect(self, *, evict_terminated: bool = False) -> gc.Evictions:
        """One pass over the last relist's view (dead containers do not come back, so a second-old view is safe)."""
        if not self.relist.synced.is_set():
            return gc.Evictions()
        remove_all = self.terminated() if evict_terminated else ()
        plan = gc.collect(dict(self.relist.pods), self.policy, remove_all, time.time_ns())
        if plan.containers or plan.sandboxes:
            logger.debug(f"container GC: removing {len(plan.containers)} container(s), "
                         f"{len(plan.sandboxes)} sandbox(es)")
            await self.executor.remove(plan.containers, plan.sandboxes)
        return plan

    async def delete_all_unused(self) -> None:
        """Node-level reclaim for the eviction manager (upstream DeleteAllUnusedContainers): the usual pass, and every
        dead container and sandbox of terminal pods too."""
        await self.collect(evict_terminated=True)

    async def run(self, period: float = PERIOD) -> None:
        while True:
            await asyncio.sleep(period)
            try:
                await self.collect()
            except Exception as exc:
                log_failed_round(logger, "container garbage collection failed", exc)
