"""The node's top pod cgroups: ``kubepods`` sized to node allocatable, and the QoS tiers under it (upstream
pkg/kubelet/cm containerManagerImpl.setupNode, node_container_manager_linux.go and qos_container_manager_linux.go,
cgroupfs driver).

At start, ``kubepods`` gets its limits (`node_allocatable.pods_cgroup_config`) and ``kubepods/burstable`` and
``kubepods/besteffort`` exist with their settings; a ``NodeAllocatableEnforced`` event says so, or a
``FailedNodeAllocatableEnforcement`` warning says why not, retried each minute until it holds (the pods' usage may
be above a lowered limit until evictions bring it down). The QoS tiers follow the pods: every minute and before
each new pod cgroup, the Burstable tier's cpu shares are the sum of its pods' requests (`helpers.qos_cgroup_configs`).

The cgroup writes block: they run in threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction

from kopflet.api import qos, spec
from kopflet.cm import helpers, node_allocatable
from kopflet.cm.cgroups import CgroupError, PodCgroups

logger = logging.getLogger(__name__)

QOS_UPDATE_PERIOD = 60.0
"""upstream periodicQOSCgroupUpdateInterval (1m)."""
ENFORCE_RETRY_PERIOD = 60.0
"""How long upstream waits before writing kubepods' limits again after a failure (1m)."""

NodeEvent = Callable[[str, str, str], None]
"""(type, reason, message): an event about this node."""


class ContainerManager:
    """Owns ``kubepods`` and its QoS tiers; `start` once, then `run` for the periodic QoS update."""

    def __init__(self, cgroups: PodCgroups, *, capacity: Mapping[str, Fraction], system_reserved: Mapping[str, str],
                 kube_reserved: Mapping[str, str], enforcement: Iterable[str], hugepage_sizes: Sequence[str],
                 active_pods: Callable[[], Iterable[spec.Pod]], node_event: NodeEvent) -> None:
        self.cgroups = cgroups
        self.enforcement = frozenset(enforcement)
        self.pods_config = node_allocatable.pods_cgroup_config(capacity, system_reserved, kube_reserved,
                                                               self.enforcement)
        self.hugepage_sizes = tuple(hugepage_sizes)
        self.active_pods, self.node_event = active_pods, node_event
        self._lock = asyncio.Lock()
        self._enforcing: asyncio.Task[None] | None = None

    @property
    def allocatable_memory(self) -> int | None:
        """The memory limit on ``kubepods`` with ``pods`` enforced (allocatableMemory.available measures against
        it), None without enforcement (upstream adds no allocatable threshold then)."""
        return self.pods_config.memory if node_allocatable.PODS in self.enforcement else None

    async def start(self) -> None:
        """Create the top cgroups and enforce node allocatable (upstream setupNode). The enforcement is retried in
        the background while the kernel refuses it, as upstream's goroutine does."""
        root = helpers.CGROUP_ROOT
        tiers = helpers.qos_cgroup_configs(self.active_pods(), hugepage_sizes=self.hugepage_sizes)
        async with self._lock:
            for klass in (qos.BURSTABLE, qos.BEST_EFFORT):
                # Created with the tier's settings, or brought back to them (upstream qosContainerManager.Start).
                await asyncio.to_thread(self.cgroups.apply, f"{root}/{klass.lower()}", tiers[klass],
                                        hugepage_sizes=self.hugepage_sizes)
        self._enforcing = asyncio.create_task(self._enforce(), name="node-allocatable")
        await asyncio.wait([self._enforcing], timeout=5.0)  # its event is usually the first after Starting

    async def _enforce(self) -> None:
        root = helpers.CGROUP_ROOT
        while True:
            try:
                async with self._lock:
                    await asyncio.to_thread(self.cgroups.apply, root, self.pods_config)
            except (CgroupError, OSError) as exc:
                message = node_allocatable.failed_message(root, str(exc))
                logger.warning(message)
                self.node_event("Warning", node_allocatable.FAILED_REASON, message)
                await asyncio.sleep(ENFORCE_RETRY_PERIOD)
                continue
            logger.info(f"node allocatable on {root}: {self.pods_config}")
            self.node_event("Normal", node_allocatable.ENFORCED_REASON, node_allocatable.ENFORCED_MESSAGE)
            return

    async def update_qos(self) -> None:
        """Bring the QoS tiers to what the active pods need (upstream UpdateCgroups); a failure is logged, as
        upstream's caller does, and the pod sync goes on."""
        configs = helpers.qos_cgroup_configs(self.active_pods(), hugepage_sizes=self.hugepage_sizes)
        root = helpers.CGROUP_ROOT
        try:
            async with self._lock:
                for klass in (qos.BURSTABLE, qos.BEST_EFFORT):
                    await asyncio.to_thread(self.cgroups.apply, f"{root}/{klass.lower()}", configs[klass],
                                            hugepage_sizes=self.hugepage_sizes)
                # kubepods' own QoS settings are hugepages only (its cpu and memory are node allocatable's).
                await asyncio.to_thread(self.cgroups.apply, root, configs[qos.GUARANTEED],
                                        hugepage_sizes=self.hugepage_sizes)
        except (CgroupError, OSError) as exc:
            logger.warning(f"failed to update the QoS cgroups: {exc}")

    async def run(self) -> None:
        """The periodic QoS update (upstream wait.Until UpdateCgroups, every minute)."""
        while True:
            await asyncio.sleep(QOS_UPDATE_PERIOD)
            await self.update_qos()

    async def close(self) -> None:
        if self._enforcing is not None and not self._enforcing.done():
            self._enforcing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._enforcing


__all__ = ["ENFORCE_RETRY_PERIOD", "QOS_UPDATE_PERIOD", "ContainerManager"]
