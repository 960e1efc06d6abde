"""The CPU manager's I/O (upstream pkg/kubelet/cm/cpumanager/cpu_manager.go `manager`, state_checkpoint.go): the
machine's CPU topology read once from sysfs, the ``<root-dir>/cpu_manager_state`` checkpoint, and the reconcile
loop that keeps running containers' cpusets as the state says.

The decisions are pure (`kopflet.cm.cpumanager.cpu_manager`, `static_policy`); here they meet the files and the
runtime:

- `start`: the policy is built, the checkpoint read (a new one written, as upstream writes one for either policy)
  and checked; any problem is a `CPUManagerError` with upstream's message and the agent does not start.
- admission happens in the pod worker's decide step, under the node's allocation lock (the lock this manager is
  given): the worker takes a `snapshot` and records the state the admitted pod needs with `commit`, which writes
  the checkpoint (a temporary file, fsynced, renamed over the old one) before the pod's containers are created.
- `affinity`: the cpuset a container is created with (upstream PreCreateContainer's `GetCPUAffinity`): its
  exclusive CPUs, else the shared pool; nothing under the none policy.
- `run` (static policy only, every ``cpuManagerReconcilePeriod``): stale assignments released (those of pods the
  agent does not handle only once the apiserver confirms they are gone), then ``UpdateContainerResources`` with
  the new ``cpusetCpus`` for each running container whose cpuset changed, as upstream's `reconcileState`.
- `get_cpus`, `get_pod_cpus`, `get_allocatable_cpus`: the pod-resources API's CPUs provider (upstream's container
  manager implements podresources.CPUsProvider).
- `exclusive_cpus`: a pod's exclusive CPUs by container (upstream GetExclusiveCPUs), which take the CFS quota off
  the containers holding them, their pod cgroup and their sandbox (DisableCPUQuotaWithExclusiveCPUs).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from cri_client import CriClient, CriError
from cri_client import types as cri
from kopflet import checkpointmanager
from kopflet.client.kubeapi import API_ERRORS
from kopflet.cm.cpumanager import cpu_manager, cpuset, topology
from kopflet.cm.cpumanager import state as checkpoint
from kopflet.cm.cpumanager.cpu_manager import Pods, RunningContainer, Snapshot
from kopflet.cm.cpumanager.cpuset import CPUSet
from kopflet.cm.cpumanager.static_policy import State, StaticPolicy
from kopflet.cm.cpumanager.topology import CPUTopology
from kopflet.rounds import log_failed_round

logger = logging.getLogger(__name__)

_CPU_ENTRY = re.compile(r"^cpu(\d+)$")
_NODE_ENTRY = re.compile(r"^node(\d+)$")


class CPUManagerError(Exception):
    """The CPU manager cannot start: the configuration, the machine and the checkpoint do not fit together."""


def read_topology(cpu_dir: str = topology.CPU_DIR, node_dir: str = topology.NODE_DIR) -> CPUTopology:
    """The machine's CPU topology from sysfs (what cadvisor reads for upstream's `topology.Discover`): each
    ``cpuN``'s package and core ids and whether it is online, each NUMA node's ``cpulist``. Blocking: call it in a
    thread. Raises OSError or `topology.TopologyError`."""
    def ids(directory: str, pattern: re.Pattern[str]) -> list[int]:
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return []
        return sorted(int(m.group(1)) for name in names if (m := pattern.match(name)))

    files: dict[str, str] = {}
    for path in topology.sysfs_paths(ids(cpu_dir, _CPU_ENTRY), ids(node_dir, _NODE_ENTRY)):
        # the paths are the pure module's (/sys/...): read them under the given directories
        real = path.replace(topology.CPU_DIR, cpu_dir, 1).replace(topology.NODE_DIR, node_dir, 1)
        try:
            files[path] = Path(real).read_text()
        except FileNotFoundError:
            continue  # no `online` for the boot CPU; a missing topology file is the pure reader's error
    return topology.from_sysfs(files)


class CPUManager:
    """One node's CPU manager: the policy, its state and the checkpoint file, the containers' last cpusets."""

    def __init__(self, policy_name: str, options: Mapping[str, str], *, reconcile_period: float,
                 topology: CPUTopology | None, topology_error: str = "", system_reserved: Mapping[str, str],
                 kube_reserved: Mapping[str, str], reserved_cpus: str, state_file: str, cri: CriClient | None,
                 lock: asyncio.Lock, pods: Callable[[], Pods] = Pods,
                 running: Callable[[], Iterable[RunningContainer]] = tuple,
                 listed: Callable[[], Awaitable[Iterable[str]]] | None = None) -> None:
        """No I/O. `lock` is the node's allocation lock (the pod workers' admissions take it too); `pods` the pods
        the agent handles, `running` the runtime's running containers, `listed` the UIDs of the node's pods in the
        apiserver (the reconcile loop asks it before releasing the CPUs of a pod no worker has)."""
        self.policy_name, self.options = policy_name, dict(options)
        self.reconcile_period = reconcile_period
        self.topology, self.topology_error = topology, topology_error
        self.system_reserved, self.kube_reserved, self.reserved_cpus = system_reserved, kube_reserved, reserved_cpus
        self.state_file = state_file
        self.cri, self.lock, self.pods, self.running, self.listed = cri, lock, pods, running, listed
        self.policy: StaticPolicy | None = None
        self.state = State()
        self._file = checkpointmanager.CheckpointFile(self.state_file)
        self.applied: dict[str, CPUSet] = {}
        """What each container (by ID) was last given: at its creation or by an update."""
        self.started = False

    @property
    def static(self) -> bool:
        return self.policy is not None

    # ----------------------------------------------------------------------------------------- start

    async def start(self) -> None:
        """Upstream `NewManager` then `Start`: build the policy, restore and check the checkpoint, write it when
        new or initialised. Raises `CPUManagerError`."""
        try:
            self.policy = cpu_manager.new_policy(
                self.policy_name, self.options, topology=self.topology, topology_error=self.topology_error,
                system_reserved=self.system_reserved, kube_reserved=self.kube_reserved,
                reserved_cpus=self.reserved_cpus)
        except cpu_manager.ManagerError as err:
            raise CPUManagerError(str(err)) from None
        try:
            text = await asyncio.to_thread(self._file.read)
        except OSError as err:
            raise CPUManagerError(f"start cpu manager error: failed to initialize checkpoint manager: {err}") from None
        try:
            state, write = cpu_manager.restore(self.policy, self.policy_name, text, self.state_file)
        except cpu_manager.ManagerError as err:
            raise CPUManagerError(str(err)) from None
        self.state = state
        if write:
            try:
                await asyncio.to_thread(self._save, state)
            except OSError as err:
                raise CPUManagerError(f"start cpu manager error: could not write {self.state_file}: {err}") \
                    from None
        self.started = True
        if self.policy is not None:
            logger.info(f"cpu manager: static policy, reserved CPUs {self.policy.reserved or '(none)'}, shared "
                        f"pool {state.default}, reconciled every {self.reconcile_period:g}s")

    def _save(self, state: State) -> None:
        """The checkpoint as upstream writes it, atomically, when it changed. Blocking: call it in a thread."""
        self._file.write(checkpoint.encode(self.policy_name, state))

    # ------------------------------------------------------------------------------------- admission

    def snapshot(self, pods: Pods) -> Snapshot:
        """What admission decides against (take it under the allocation lock)."""
        return Snapshot(policy=self.policy, state=self.state, pods=pods)

    async def commit(self, state: State) -> None:
        """Record the state an admission allocated (under the allocation lock); the checkpoint is written before
        the pod's containers are created, as upstream's state writes through on each change."""
        self.state = state
        await asyncio.to_thread(self._save, state)

    def affinity(self, pod_uid: str, container: str) -> str:
        """The ``cpusetCpus`` a container is created with (upstream PreCreateContainer): its exclusive CPUs, else
        the shared pool; "" under the none policy (the runtime's default)."""
        if self.policy is None:
            return ""
        return str(self.state.cpuset_or_default(pod_uid, container))

    def exclusive_cpus(self, pod_uid: str) -> dict[str, CPUSet]:
        """The pod's exclusive CPUs by container name (upstream GetExclusiveCPUs for each): none on the shared pool,
        none under the none policy. What `helpers.pod_has_exclusive_cpus` and the container configs decide on."""
        return cpu_manager.pod_exclusive_cpus(self.state, pod_uid)

    def container_created(self, container_id: str, cpus: str) -> None:
        """A container was created with `cpus` (upstream AddContainer's lastUpdateState)."""
        if self.policy is not None and cpus:
            self.applied[container_id] = cpuset.parse(cpus)

    # --------------------------------------------------------------------------------- pod resources

    def get_cpus(self, pod: Mapping[str, Any], container: Mapping[str, Any]) -> tuple[int, ...]:
        """The container's exclusive CPUs (none on the shared pool), for the pod-resources API."""
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        return cpu_manager.container_cpu_ids(self.state, uid, str(container.get("name", "")))

    def get_pod_cpus(self, pod_uid: str) -> tuple[int, ...]:
        """Pod-level exclusive CPUs: none (kopflet's state has no pod-level assignments; `PodLevelResourceManagers`
        is off)."""
        return ()

    def get_allocatable_cpus(self) -> tuple[int, ...]:
        """The CPUs the static policy may hand out (none under the none policy, or before `start`)."""
        return cpu_manager.allocatable_cpu_ids(self.policy)

    # ------------------------------------------------------------------------------------- reconcile

    async def remove_stale_state(self) -> None:
        """Upstream `removeStaleState`, with the apiserver asked first about pods the agent has no worker for."""
        unknown = set(self.state.assignments) - self.pods().known
        gone: set[str] = set()
        if unknown and self.listed is not None:
            try:
                gone = unknown - set(await self.listed())
            except API_ERRORS as exc:  # asked again next round; the containers are reconciled meanwhile
                logger.warning(f"cpu manager: cannot list the node's pods to release stale CPUs: {exc}")
        async with self.lock:
            state = cpu_manager.remove_stale_state(self.state, self.pods(), gone)
            if state != self.state:
                logger.info(f"cpu manager: released the CPUs of containers no longer active; shared pool "
                            f"{state.default}")
                await self.commit(state)

    async def reconcile(self) -> None:
        """One round of upstream `reconcileState`."""
        await self.remove_stale_state()
        running = list(self.running())
        live = {c.container_id for c in running}
        self.applied = {cid: cpus for cid, cpus in self.applied.items() if cid in live}
        for container, cpus in cpu_manager.reconcile_updates(self.state, self.pods(), running, self.applied):
            if self.cri is None:
                break
            try:
                await self.cri.containers.update_resources(container.container_id,
                                                           cri.LinuxContainerResources(cpuset_cpus=str(cpus)))
            except CriError as exc:
                logger.warning(f"cpu manager: failed to update container {container.container_id} "
                               f"({container.name} of pod {container.pod_uid}) to cpuset {cpus}: {exc}")
                continue
            self.applied[container.container_id] = cpus

    async def run(self) -> None:
        """The reconcile loop (upstream starts it for the static policy only)."""
        if self.policy is None:
            return
        while True:  # wait.Until: a round at once, then every period; a failed round is logged
            try:
                await self.reconcile()
            except Exception as exc:
                log_failed_round(logger, "cpu manager: reconcile failed", exc)
            await asyncio.sleep(self.reconcile_period)
