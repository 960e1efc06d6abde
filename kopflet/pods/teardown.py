"""The one path that takes a pod off the node: its probes, containers, sandboxes, cgroup, allocation, volumes and
directories (upstream killPodNow with a zero grace period, then the kubelet's pod cleanups and GC).

Used for a pod deleted from the API (its worker) and for orphans the housekeeping finds (runtime pods and pod
directories of pods that exist nowhere else).
"""

from __future__ import annotations

from kopflet.api import spec
from kopflet.images.manager import ImageManager
from kopflet.kuberuntime.executor import PodSyncer
from kopflet.pleg.relist import RuntimeCache
from kopflet.prober.manager import ProbeManager


class Teardown:
    def __init__(self, relist: RuntimeCache, executor: PodSyncer, prober: ProbeManager, images: ImageManager) -> None:
        self.relist, self.executor, self.prober, self.images = relist, executor, prober, images

    async def pod(self, uid: str, namespace: str = "", name: str = "") -> None:
        """Remove everything of pod `uid` from the node; its name and namespace default to the runtime's labels."""
        self.prober.forget(uid)
        self.images.forget(uid)
        runtime = await self.relist.refresh_pod(uid)
        pod = spec.minimal_pod(uid, namespace or runtime.namespace, name or runtime.name)
        await self.executor.kill_pod(pod, runtime, grace=0)
        await self.executor.remove_pod(await self.relist.refresh_pod(uid), uid)
        await self.relist.refresh_pod(uid)
        self.relist.forget_pod(uid)
