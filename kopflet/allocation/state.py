"""The allocated and actuated resources of each pod, kept on disk (the I/O half of `kopflet.allocation.policy`; upstream
pkg/kubelet/allocation's state and kuberuntime's actuated state).

``<root-dir>/allocated_pods_state`` holds what each admitted pod was granted (its spec's resources at admission,
then at each accepted resize); ``<root-dir>/actuated_pods_state`` what the runtime was last told (containers as
created or updated, the pod cgroup's pod-level values). Both survive an agent restart, so a restarted agent
neither re-grants a deferred resize nor mistakes a finished one for a pending one. Same format as upstream's
checkpoints. A file whose checksum does not match stops the agent, as upstream refuses to start with it.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from kopflet import checkpointmanager, paths
from kopflet.allocation import policy
from kopflet.allocation.policy import PodAllocation
from kopflet.api import spec

logger = logging.getLogger(__name__)


class AllocationError(Exception):
    """A checkpoint that cannot be used: upstream's "could not restore state from checkpoint"."""


class _State:
    """One checkpoint file and its entries by pod UID; writes are synchronous and small (a few KiB).

    Writers run in threads (asyncio.to_thread), several at once under load: one lock makes each change and its
    write whole, so two writers never share the temporary file nor iterate the entries while one changes them.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self.entries: dict[str, PodAllocation] = {}
        self._file = checkpointmanager.CheckpointFile(path)  # a torn file would stop the agent at its start
        text = self._file.read()
        if text is not None:
            try:
                self.entries = policy.read_checkpoint(text)
            except policy.CheckpointError as exc:
                raise AllocationError(
                    f"could not restore state from checkpoint: {exc}, please drain this node and delete pod "
                    f"resource information checkpoint file {str(path)!r} before restarting the agent") from exc

    def get(self, uid: str) -> PodAllocation | None:
        return self.entries.get(uid)

    def set(self, uid: str, value: PodAllocation) -> None:
        with self._lock:
            self.entries = {**self.entries, uid: value}
            self._save()

    def remove(self, uid: str) -> None:
        with self._lock:
            if uid in self.entries:
                self.entries = {k: v for k, v in self.entries.items() if k != uid}
                self._save()

    def _save(self) -> None:
        self._file.write(policy.checkpoint_text(self.entries))


class AllocationManager:
    """Allocated and actuated resources by pod UID (upstream allocation manager + actuated state). Reads are from
    memory; the setters write the file (small, fsynced): call them through ``asyncio.to_thread``."""

    def __init__(self, layout: paths.Layout) -> None:
        self.allocated = _State(Path(layout.allocated_state))
        self.actuated = _State(Path(layout.actuated_state))

    def allocation(self, uid: str) -> PodAllocation | None:
        return self.allocated.get(uid)

    def set_allocation(self, pod: spec.Pod) -> PodAllocation:
        value = PodAllocation.from_pod(pod)
        self.allocated.set(pod.uid, value)
        return value

    def actuation(self, uid: str) -> PodAllocation | None:
        return self.actuated.get(uid)

    def set_actuated_container(self, uid: str, name: str, resources: spec.Resources) -> None:
        """A container was created or updated with `resources` (limits merged with the pod-level ones)."""
        current = self.actuated.get(uid) or PodAllocation()
        containers = {**current.containers, name: resources}
        self.actuated.set(uid, PodAllocation(containers=containers, pod_level=current.pod_level))

    def set_actuated_pod(self, uid: str, value: PodAllocation) -> None:
        self.actuated.set(uid, value)

    def set_actuated_pod_level(self, uid: str, resources: spec.Resources | None) -> None:
        current = self.actuated.get(uid) or PodAllocation()
        self.actuated.set(uid, PodAllocation(containers=dict(current.containers), pod_level=resources))

    def remove(self, uid: str) -> None:
        self.allocated.remove(uid)
        self.actuated.remove(uid)
