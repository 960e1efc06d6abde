"""Carrying out a pod's PodActions on the runtime, in upstream ``SyncPod`` order; it decides nothing.

Order: kill the pod (or the containers to kill, then the containers to reset for RestartAllContainers:
killed with no grace period if they have not exited, and removed), create the sandbox, start the next init
container, start the containers. Each step records what the pod's status must show (waiting reasons) and the
kubelet's events. Where the sandbox, a container's log directory and its termination-log file are
made: here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import glob
import logging
import os
import secrets
import shutil
import stat
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from cri_client import CriClient, CriError
from cri_client import types as cri
from kopflet import backoff as backoffs
from kopflet import paths
from kopflet.allocation import policy
from kopflet.allocation.policy import PodAllocation
from kopflet.allocation.state import AllocationManager
from kopflet.api import qos, spec
from kopflet.api.events import NORMAL, WARNING
from kopflet.client.events import EventRecorder
from kopflet.client.kubeapi import KubeApiError, KubeClient
from kopflet.client.standalone import is_standalone
from kopflet.cm import helpers
from kopflet.cm.cgroup_names import DEFAULT_LAYOUT, CgroupLayout
from kopflet.cm.cgroups import CgroupError, PodCgroups
from kopflet.cm.cpumanager.manager import CPUManager
from kopflet.cm.devicemanager.devices import AllocationError, RunContainerOptions
from kopflet.cm.devicemanager.manager import DeviceManager
from kopflet.cm.memorymanager.manager import MemoryManager
from kopflet.config.settings import AgentConfig
from kopflet.container import labels, podstate
from kopflet.container.sync_result import CREATE, SANDBOX, START, VOLUMES, StepTime, SyncResult, Waiting
from kopflet.envvars import container_env
from kopflet.envvars.services import ServiceCache
from kopflet.images.manager import ImageError, ImageManager
from kopflet.kuberuntime import container_config, image_volumes, reconciler, resize, sandbox_config
from kopflet.lifecycle.hooks import HookRunner
from kopflet.logs import manager as log_manager
from kopflet.logs.verbosity import v
from kopflet.metrics import KubeletMetrics
from kopflet.pleg.own_stops import OwnStops
from kopflet.prober import probes
from kopflet.userns.allocator import UsernsError
from kopflet.userns.userns_manager import UsernsManager
from kopflet.util.manager import CacheSyncError, NotRegisteredError
from kopflet.volumes import plugins
from kopflet.volumes.manager import VolumeManager
from kopflet.volumes.plugins import VolumeError

logger = logging.getLogger(__name__)
_R = TypeVar("_R")

CREATE_CONTAINER_CONFIG_ERROR = "CreateContainerConfigError"
CREATE_CONTAINER_ERROR = "CreateContainerError"
RUN_CONTAINER_ERROR = "RunContainerError"
POST_START_HOOK_ERROR = "PostStartHookError"
# Upstream's minimum grace period when stopping a container that is not force-deleted.
MINIMUM_GRACE_PERIOD = 2


class PodSyncer:
    cpus: CPUManager | None = None
    """The CPU manager (None: none; also for parts built without `__init__` in tests), set by the constructor."""
    devices: DeviceManager | None = None
    """The device manager (None: no device plugins; also for parts built without `__init__` in tests)."""
    memory: MemoryManager | None = None
    """The memory manager (None: none), set by the constructor."""
    userns: UsernsManager | None = None
    """The user namespace manager (None: ``hostUsers: false`` pods are refused), set by the constructor."""
    cgroup_layout: CgroupLayout = DEFAULT_LAYOUT
    """Where the pod cgroups are (the cgroups' layout, set by the constructor; the default for parts built without
    `__init__` in tests)."""
    swap_controller: helpers.SwapController = helpers.SwapController.NONE
    """The node's swap controller (`cgroups.swap_controller`, read once at start): containers get no swap through it
    (upstream NoSwap), at creation and at each in-place resize."""
    metrics: KubeletMetrics | None = None
    """The kubelet's metrics (None: not recorded), for the image volume counters."""

    def __init__(self, cfg: AgentConfig, cri_client: CriClient, api: KubeClient, recorder: EventRecorder,
                 images: ImageManager, backoff: backoffs.Backoff, dns: sandbox_config.DnsSettings,
                 node_memory_capacity: int, services: ServiceCache | None = None,
                 node_allocatable: Callable[[], Mapping[str, str]] = dict,
                 allocations: AllocationManager | None = None, cgroups: PodCgroups | None = None, *,
                 layout: paths.Layout | None = None, hooks: HookRunner | None = None,
                 volumes: VolumeManager | None = None, hugepage_sizes: Sequence[str] = (),
                 masked_paths: Sequence[str] = container_config.DEFAULT_MASKED_PATHS,
                 before_pod_cgroup: Callable[[], Awaitable[None]] | None = None,
                 cpus: CPUManager | None = None, devices: DeviceManager | None = None,
                 memory: MemoryManager | None = None, userns: UsernsManager | None = None,
                 swap_controller: helpers.SwapController = helpers.SwapController.NONE,
                 metrics: KubeletMetrics | None = None, own_stops: OwnStops | None = None) -> None:
        """The parts default to ones of its own; the node's composition root (`kopflet.node`) passes its own.
        `hugepage_sizes` and `masked_paths` are the host's (`read_host_container_facts`); `before_pod_cgroup` brings
        the QoS tiers up to date before a new pod cgroup is made (the container manager's `update_qos`); `cpus` is
        the CPU manager, which gives each container its cpuset at creation; `memory` the memory manager, which
        gives it its NUMA nodes (``cpuset.mems``); `devices` the device manager, whose plugins' Allocate answers go
        into the container's config; `userns` the user namespace manager, which gives ``hostUsers: false`` pods
        their ID ranges (none of its own: it reads every pod directory when built); `swap_controller` the node's
        (`cgroups.swap_controller`); `metrics` the kubelet's metrics, where the image volume counters go; `own_stops`
        where each stop call is marked while it runs (the runtime events wait for it instead of polling)."""
        self.before_pod_cgroup, self.cpus, self.devices, self.memory = before_pod_cgroup, cpus, devices, memory
        self.swap_controller, self.metrics = swap_controller, metrics
        self.userns = userns
        self.own_stops = own_stops if own_stops is not None else OwnStops()
        self.cfg, self.cri, self.api, self.recorder = cfg, cri_client, api, recorder
        self.layout = layout if layout is not None else cfg.layout
        self.allocations = allocations if allocations is not None else AllocationManager(self.layout)
        self.cgroups = cgroups if cgroups is not None else PodCgroups()
        self.cgroup_layout = self.cgroups.layout
        self.services, self.node_allocatable = services, node_allocatable
        self.hugepage_sizes, self.masked_paths = tuple(hugepage_sizes), tuple(masked_paths)
        self.images, self.backoff, self.dns = images, backoff, dns
        self.node_memory_capacity = node_memory_capacity
        self.hooks = hooks if hooks is not None else HookRunner(cri_client)
        self.volumes = volumes if volumes is not None else VolumeManager(cfg, api, node_allocatable, layout=self.layout)

    # ------------------------------------------------------------------------------------------ sync

    async def sync(self, pod: spec.Pod, runtime: podstate.RuntimePodStatus,
                   actions: reconciler.PodActions, resizing: resize.ResizeActions | None = None) -> SyncResult:
        """Carry out `actions` for the allocated `pod`; `resizing` are the in-place resize steps (upstream
        SyncPod step 6, after the kills and the sandbox, before anything starts)."""
        result = SyncResult(retry_after=actions.retry_after)  # crash-loop waits are decide's (the BackOff events)

        if actions.kill_pod:
            if actions.create_sandbox and actions.sandbox_id:
                self.recorder.pod_event(pod, NORMAL, "SandboxChanged",
                                        "Pod sandbox changed, it will be killed and re-created.")
            await self.kill_pod(pod, runtime, grace=None)
        else:
            await asyncio.gather(*(
                self.stop_container(pod, runtime, cid, info.message, grace=_kill_grace(pod, info))
                for cid, info in actions.containers_to_kill.items()))
            await self.reset_containers(pod, actions.containers_to_reset)

        # Volumes first, as upstream waits for them before creating anything; on every sync, so ConfigMap,
        # Secret and token updates reach running pods. A missing source keeps the pod ContainerCreating. The pod
        # cgroup is made meanwhile: upstream's syncPod makes it before it waits for the volumes, and neither needs
        # the other.
        began = time.monotonic()
        if actions.create_sandbox:  # a start waits for both: side by side
            volumes, cgroup = await asyncio.gather(self.volumes.setup(pod), self.ensure_pod_cgroup(pod, result),
                                                   return_exceptions=True)
        else:  # a running pod's sync (no wait to shorten): one after the other, in upstream's order
            cgroup = await _outcome(self.ensure_pod_cgroup(pod, result))
            volumes = await _outcome(self.volumes.setup(pod)) if cgroup is True else None
        if cgroup is not True:
            # Upstream's syncPod stops at the pod cgroup, before the volumes: its failure (the event is sent) or its
            # error is the sync's, whatever the volumes did.
            if isinstance(volumes, BaseException) and not isinstance(volumes, VolumeError):
                logger.warning(f"{pod.namespace}/{pod.name}: volume setup failed too: {volumes}")
            if isinstance(cgroup, BaseException):
                raise cgroup
            if actions.create_sandbox:
                result.steps.append(StepTime(SANDBOX, "", began, time.monotonic(), "FailedCreatePodSandBox"))
            return result
        if isinstance(volumes, VolumeError):
            result.volume_error = str(volumes)
            events = volumes.events if volumes.events is not None else (("FailedMount", str(volumes)),)
            for reason, message in events:
                self.recorder.pod_event(pod, WARNING, reason, message)
            failure = events[0][0] if events else "FailedMount"
            result.steps.append(StepTime(VOLUMES, "", began, time.monotonic(), failure))
            return result
        if isinstance(volumes, BaseException):
            raise volumes
        plans: dict[str, plugins.VolumePlan] = volumes
        result.steps.append(StepTime(VOLUMES, "", began, time.monotonic()))

        # The sandbox step, when there is one to create: its config and RunPodSandbox (the pod cgroup's time is in
        # the volumes step, which it runs beside).
        began = time.monotonic()

        def sandbox_step(error: str = "") -> None:
            if actions.create_sandbox:
                result.steps.append(StepTime(SANDBOX, "", began, time.monotonic(), error))

        sandbox_id = actions.sandbox_id
        try:
            handler, handlers = await self.user_namespace_facts(pod)
            mappings = await self.user_namespace_mappings(pod, handler, handlers)
            # upstream applySandboxResources: the pod's resources (no CFS quota when a container has exclusive
            # CPUs: calculateSandboxResources) and its overhead apart
            config = sandbox_config.build_sandbox_config(
                pod, actions.attempt, dns=self.dns, layout=self.layout,
                cgroup_parent=self.cgroup_layout.pod_cgroup_parent(pod), runtime_handler=handler,
                runtime_handlers=handlers, userns_mappings=mappings,
                resources=container_config.sandbox_linux_resources(pod, exclusive_cpus=self.exclusive_cpus(pod)),
                overhead=resize.overhead_linux_resources(pod))
        except (sandbox_config.SandboxConfigError, LookupError, UsernsError) as exc:
            # Upstream createPodSandbox: generatePodSandboxConfig's error (a hostUsers: false pod on a runtime
            # without user namespaces, or with no ID range left, among them) becomes the FailedCreatePodSandBox
            # event, and SyncPod retries.
            result.sandbox_error = f"Failed to create pod sandbox: {exc}"
            self.recorder.pod_event(pod, WARNING, "FailedCreatePodSandBox", result.sandbox_error)
            sandbox_step("FailedCreatePodSandBox")
            return result
        if actions.create_sandbox:
            sandbox_id = await self.create_sandbox(pod, config, result)
            sandbox_step("" if sandbox_id else "FailedCreatePodSandBox")
            if not sandbox_id:
                return result
        if not sandbox_id:
            return result
        sandbox = await self.cri.sandboxes.status(sandbox_id)
        if resizing is not None and resizing.any and not actions.kill_pod:
            # A failed resize is recorded (PodResizeInProgress Error) and the sync goes on, as upstream's SyncPod:
            # containers killed for a RestartContainer resize and crashed ones still start.
            await self.resize(pod, runtime, resizing, result)

        # Upstream SyncPod steps 7-9: ephemeral containers first (they may run while init is stuck), then the
        # init containers in order, then the regular containers.
        ephemeral = actions.ephemeral_containers_to_start
        to_start = [(c, False) for c in pod.spec.ephemeral_containers if c.name in ephemeral]
        to_start += [(c, True) for c in pod.spec.init_containers if c.name in actions.init_containers_to_start]
        to_start += [(c, False) for c in pod.spec.containers if c.name in actions.containers_to_start]
        # Upstream lazyStart: the image volumes are pulled once, before the first container this sync starts.
        pulls = await self.pull_image_volumes(pod, config, plans) if to_start else {}
        attempted: list[str] = []
        for container, is_init in to_start:
            attempted.append(container.name)
            if not await self.start_container(pod, container, is_init, sandbox_id, config, sandbox, runtime, result,
                                              plans, image_volume_pulls=pulls) and is_init and not container.is_sidecar:
                break  # a regular init container failed to start: nothing after it may start (a sidecar: go on)
        # Every attempt counts, failed ones too: upstream doBackOff calls Next before startContainer, so a container
        # that never starts (StartError) goes into CrashLoopBackOff instead of being retried on every relist.
        reconciler.note_restarts(actions, pod, self.backoff, time.time(), attempted=attempted)
        return result

    # ---------------------------------------------------------------------------------- pod cgroup, resize

    def exclusive_cpus(self, pod: spec.Pod) -> helpers.ExclusiveCPUs:
        """The pod's exclusive CPUs by container, as the CPU manager holds them since admission (upstream
        GetExclusiveCPUs); none without a CPU manager or under its none policy."""
        return self.cpus.exclusive_cpus(pod.uid) if self.cpus is not None else helpers.NO_EXCLUSIVE_CPUS

    def pod_cgroup_config(self, pod: spec.Pod) -> helpers.ResourceConfig:
        """The allocated pod's cgroup settings (upstream ResourceConfigForPod with the kubelet's flags): CFS quota -1
        when a container has exclusive CPUs (upstream EnsureExists and doPodResizeAction with
        DisableCPUQuotaWithExclusiveCPUs: enforceCPULimits false)."""
        return helpers.pod_resource_config(pod, exclusive_cpus=self.exclusive_cpus(pod))

    def new_pod_cgroup_config(self, pod: spec.Pod) -> helpers.ResourceConfig:
        """The settings a new pod cgroup is made with: `pod_cgroup_config` and, when ``podPidsLimit`` is positive,
        ``pids.max`` (upstream podContainerManager.EnsureExists sets PidsLimit only there; a resize never touches
        it, and -1 or 0 leaves the pod to ``kubepods``' limit)."""
        config = self.pod_cgroup_config(pod)
        limit = self.cfg.pod_pids_limit
        return dataclasses.replace(config, pids_limit=limit) if limit > 0 else config

    async def ensure_pod_cgroup(self, pod: spec.Pod, result: SyncResult) -> bool:
        """Create the pod's cgroup with its limits before the sandbox (upstream podContainerManager.EnsureExists,
        on every sync: an existing one is left alone, resizes change it). The first time, the allocation is
        recorded as actuated too (upstream InitializeActuatedPod), so a new pod never counts as resizing."""
        if self.allocations.actuation(pod.uid) is None:
            # Upstream InitializeActuatedPod, on every sync: a pod with no record (new, or from before the record
            # existed) counts as running with what is allocated, never as resizing.
            level = policy.pod_level(pod)
            await asyncio.to_thread(self.allocations.set_actuated_pod, pod.uid, PodAllocation(
                containers={c.name: resize.effective(level, c.resources)
                            for c in (*pod.spec.init_containers, *pod.spec.containers)}, pod_level=level))
        name = self.cgroup_layout.pod_cgroup_parent(pod)
        if not name:
            return True  # no cgroupsPerQOS: no pod cgroup (upstream podContainerManagerNoop.EnsureExists)
        async with self.cgroups.lock:  # housekeeping destroys orphaned pod cgroups under it
            if await asyncio.to_thread(self.cgroups.exists, name):
                return True
            if self.before_pod_cgroup is not None:
                await self.before_pod_cgroup()  # upstream SyncPod: UpdateQOSCgroups when the pod cgroup does not exist
            try:
                await asyncio.to_thread(self.cgroups.apply, name, self.new_pod_cgroup_config(pod))
            except (CgroupError, OSError) as exc:
                result.sandbox_error = \
                    f"Failed to create pod sandbox: failed to ensure that the pod cgroup exists: {exc}"
                self.recorder.pod_event(pod, WARNING, "FailedCreatePodSandBox", result.sandbox_error)
                return False
        return True

    async def resize(self, pod: spec.Pod, runtime: podstate.RuntimePodStatus, actions: resize.ResizeActions,
                     result: SyncResult) -> None:
        """Upstream doPodResizeAction: check memory decreases against usage first when a container's memory changes
        (nothing changes if one would go below it), then per resource (memory, then cpu) the pod cgroup's values
        that grow before the containers and those that shrink after them (`resize.pod_cgroup_writes`), each
        container with one UpdateContainerResources; stop at the first error. Before each pod cgroup write the
        runtime gets the pod's new resources (UpdatePodSandboxResources)."""
        name = self.cgroup_layout.pod_cgroup_parent(pod)
        target = self.pod_cgroup_config(pod)
        # No cgroupsPerQOS: no pod cgroup; upstream's noop manager reads nothing (the pod's resources stand as
        # allocated) and writes nothing, so only the containers are resized.
        current = await asyncio.to_thread(self.cgroups.read, name) if name else target
        if current is None:  # upstream GetPodCgroupConfig failed: nothing is changed, the next sync tries again
            result.resize_error = f'unable to get pod cgroup memory config for pod "{pod.full_name}"'
            logger.warning(f"{pod.namespace}/{pod.name}: resize failed: {result.resize_error}")
            return
        sandbox = runtime.latest_sandbox
        sandbox_id = sandbox.id if sandbox is not None else ""  # upstream podActions.SandboxID
        # The pod's resources as they stand, updated after each pod cgroup write (upstream currentPodResources:
        # ResourceConfigForPod merged with the cgroup's memory and cpu settings).
        pod_resources = resize.merge_resource_config(target, current)

        async def set_pod_cgroup(resource_name: str, change: helpers.ResourceConfig) -> None:
            """Upstream setPodCgroupConfig: the runtime is told first (its refusal rejects the resize), then the
            pod cgroup is written; a failed write tells the runtime the previous resources again."""
            nonlocal pod_resources
            merged = resize.merge_resource_config(pod_resources, change)
            try:
                await self._update_sandbox_resources(pod, sandbox_id, merged)
            except _ResizeError as exc:
                raise _ResizeError(f"failed to notify runtime for UpdatePodSandboxResources "
                                   f"(resource={resource_name}); resize rejected: {exc}") from exc
            try:
                if name:  # no cgroupsPerQOS: upstream's noop SetPodCgroupConfig (the runtime was told all the same)
                    await asyncio.to_thread(self.cgroups.apply, name, change)
            except (CgroupError, OSError):
                try:
                    await self._update_sandbox_resources(pod, sandbox_id, pod_resources)
                except _ResizeError as exc:
                    logger.error(f"{pod.namespace}/{pod.name}: failed to notify runtime to rollback "
                                 f"UpdatePodSandboxResources (resource={resource_name}): {exc}")
                raise
            pod_resources = merged

        try:
            if resize.memory_check_runs(actions):
                await self._check_memory_decreases(pod, name, target, current, actions)
            memory_done = {update.name for update in actions.memory_updates}
            for resource_name, updates in ((resize.MEMORY, actions.memory_updates), (resize.CPU, actions.cpu_updates)):
                if not resize.resource_pass_runs(actions, resource_name):
                    continue
                # Pod cgroup values that grow are written before the containers, those that shrink after them,
                # each limit and request on its own (cgroup v1 refuses a child quota above its parent's):
                # upstream doPodResizeAction's resizeContainers.
                before, after = resize.pod_cgroup_writes(resource_name, target, current)
                for change in before:
                    await set_pod_cgroup(resource_name, change)
                for update in updates:
                    await self._update_container(
                        pod, update, result, other_done=resource_name == resize.CPU and update.name in memory_done)
                for change in after:
                    await set_pod_cgroup(resource_name, change)
        except (CgroupError, CriError, _ResizeError, OSError) as exc:
            result.resize_error = exc.go_text if isinstance(exc, CriError) else str(exc)
            logger.warning(f"{pod.namespace}/{pod.name}: resize failed: {result.resize_error}")
            return
        await asyncio.to_thread(self.allocations.set_actuated_pod_level, pod.uid, policy.pod_level(pod))

    async def _update_sandbox_resources(self, pod: spec.Pod, sandbox_id: str,
                                        pod_resources: helpers.ResourceConfig) -> None:
        """UpdatePodSandboxResources with the pod's resources (upstream updatePodSandboxResources). Best effort where
        the runtime lacks the call: UNIMPLEMENTED, or containerd 2.2's UNKNOWN "not implemented yet"; any other
        error is a _ResizeError."""
        overhead, resources = resize.sandbox_resources(pod, pod_resources)
        try:
            await self.cri.sandboxes.update_resources(sandbox_id, resources, overhead)
        except CriError as exc:
            if exc.unimplemented or (exc.code == "UNKNOWN" and "not implemented" in exc.details):
                logger.debug(f"{pod.namespace}/{pod.name}: UpdatePodSandboxResources is not implemented by the "
                             f"runtime; this call is best-effort: proceeding with resize")
                return
            # "sanboxID": upstream's spelling.
            raise _ResizeError(f'updatePodSandboxResources failed for sanboxID "{sandbox_id}": {exc.go_text}') from exc

    async def _check_memory_decreases(self, pod: spec.Pod, cgroup: str, target: helpers.ResourceConfig,
                                      current: helpers.ResourceConfig, actions: resize.ResizeActions) -> None:
        """Upstream validateMemoryResizeAction: a memory limit added or lowered must stay above what is in use. The
        usage is read only when one is (upstream PodCPUAndMemoryStats): the pod's from its cgroup, the containers'
        from the runtime's stats."""
        pod_limit, container_limits = resize.memory_limit_decreases(target, current, actions.memory_updates)
        if pod_limit is None and not container_limits:
            return
        usage = await self._memory_usage(cgroup, [u for u in actions.memory_updates if u.name in container_limits])
        error = resize.memory_resize_error(pod.full_name, pod_limit, container_limits, usage)
        if error:
            raise _ResizeError(error)

    async def _memory_usage(self, cgroup: str, updates: Sequence[resize.ContainerUpdate]) -> resize.MemoryUsage:
        """The pod's and the `updates`' containers' memory usage as upstream's PodCPUAndMemoryStats gives it: the
        pod's from its cgroup (cAdvisor's), the containers' from the runtime's stats. The pod cgroup unreadable,
        or the runtime failing, is "unreadable"; a container the runtime no longer knows has no stats."""
        pod_usage = await asyncio.to_thread(self.cgroups.memory_usage, cgroup)
        if pod_usage is None:
            return resize.MemoryUsage(readable=False)
        containers: dict[str, int | None] = {}
        for update in updates:
            try:
                stats = await self.cri.containers.stats(update.container_id)
            except CriError as exc:
                if exc.not_found:
                    continue
                return resize.MemoryUsage(readable=False)
            containers[update.name] = stats.memory.usage_bytes if stats.memory is not None else None
        return resize.MemoryUsage(pod=pod_usage, containers=containers)

    async def _update_container(self, pod: spec.Pod, update: resize.ContainerUpdate, result: SyncResult, *,
                                other_done: bool = False) -> None:
        """One UpdateContainerResources with the container's whole cgroup settings as at creation, `update`'s
        resource at its desired values and the other as actuated (upstream updateContainerResources)."""
        container = next(c for c in (*pod.spec.init_containers, *pod.spec.containers) if c.name == update.name)
        wanted = update.resources(other_done=other_done)
        resources = spec.Resources(
            requests={**container.resources.requests, **_quantities(wanted, "request")},
            limits={**container.resources.limits, **_quantities(wanted, "limit")})
        resources = spec.Resources(requests={k: v for k, v in resources.requests.items() if _nonzero(v)},
                                   limits={k: v for k, v in resources.limits.items() if _nonzero(v)})
        shaped = dataclasses.replace(container, resources=resources)
        linux = container_config.linux_resources(pod, shaped, memory_capacity=self.node_memory_capacity,
                                                 hugepage_sizes=self.hugepage_sizes,
                                                 exclusive_cpus=self.exclusive_cpus(pod),
                                                 swap=self.swap_controller)  # as at creation: upstream's
        await self.cri.containers.update_resources(update.container_id, linux)
        result.resized.append(update.container_id)
        actuated = self.allocations.actuation(pod.uid)
        before = actuated.containers.get(update.name, spec.Resources()) if actuated is not None else spec.Resources()
        merged = resize.effective(policy.pod_level(pod), container.resources)
        kind = update.resource
        await asyncio.to_thread(self.allocations.set_actuated_container, pod.uid, update.name, spec.Resources(
            requests=_with_resource(before.requests, merged.requests, kind),
            limits=_with_resource(before.limits, merged.limits, kind)))

    async def create_sandbox(self, pod: spec.Pod, config: cri.PodSandboxConfig, result: SyncResult) -> str:
        """RunPodSandbox with the pod's log directory in place (upstream createPodSandbox)."""
        try:
            handler = await self.runtime_handler(pod)
            try:
                await asyncio.to_thread(Path(config.log_directory).mkdir, mode=0o755, parents=True, exist_ok=True)
            except OSError as exc:
                raise LookupError(_path_error("mkdir", exc)) from None
            logger.log(v(4), f"pod {pod.namespace}/{pod.name}: creating PodSandbox")  # upstream SyncPod, V(4)
            sandbox_id = await self.cri.sandboxes.run(config, runtime_handler=handler)
            logger.log(v(4), f"pod {pod.namespace}/{pod.name}: created PodSandbox {sandbox_id}")
            return sandbox_id
        except (CriError, LookupError) as exc:
            # Upstream prints RunPodSandbox's error whole ("rpc error: code = ... desc = ..."), unlike the
            # container errors, where it keeps only the status message.
            message = f"Failed to create pod sandbox: {exc.go_text if isinstance(exc, CriError) else exc}"
            result.sandbox_error = message
            self.recorder.pod_event(pod, WARNING, "FailedCreatePodSandBox", message)
            logger.warning(f"{pod.namespace}/{pod.name}: {message}")
            return ""

    async def user_namespace_facts(self, pod: spec.Pod) -> tuple[str, tuple[cri.RuntimeHandler, ...]]:
        """The pod's runtime handler and the runtime's handlers with their features, which decide
        ``hostUsers: false`` (upstream NamespacesForPod asks the RuntimeClass manager, and HandlerSupportsUserNamespaces
        the runtime state from the last Status). Asked only for such pods; a Status that fails lists no handlers,
        which refuses the user namespace. LookupError when the RuntimeClass cannot be found."""
        if pod.spec.host_users is not False:
            return "", ()
        handler = await self.runtime_handler(pod)
        try:
            handlers = (await self.cri.status()).handlers
        except CriError as exc:
            logger.warning(f"{pod.namespace}/{pod.name}: the runtime's handlers are unknown: {exc}")
            handlers = ()
        return handler, handlers

    async def user_namespace_mappings(self, pod: spec.Pod, handler: str,
                                      handlers: tuple[cri.RuntimeHandler, ...]) -> cri.UserNamespace | None:
        """The ``hostUsers: false`` pod's own user namespace from the user namespace manager (the range recorded in
        its directory, or a new one), asked only once the runtime handler is known to support user namespaces, as
        upstream GetOrCreateUserNamespaceMappings checks before it allocates; None otherwise (the pure
        `sandbox_config.user_namespace` then gives the host's or the refusal). UsernsError when no range can be
        had."""
        if pod.spec.host_users is not False or self.userns is None or \
                not sandbox_config.handler_supports_user_namespaces(handler, handlers)[0]:
            return None
        return await asyncio.to_thread(self.userns.get_or_create, pod.uid)

    async def runtime_handler(self, pod: spec.Pod) -> str:
        """The CRI runtime handler of the pod's RuntimeClass ("" for none); LookupError with the upstream text
        when it cannot be found (upstream runtimeClassManager.LookupRuntimeHandler)."""
        name = pod.spec.runtime_class_name
        if not name or is_standalone(self.api):  # upstream: no RuntimeClass manager without a client
            return ""
        try:
            found = await self.api.get_or_none(f"/apis/node.k8s.io/v1/runtimeclasses/{name}")
        except KubeApiError as exc:
            raise LookupError(f"failed to lookup RuntimeClass {name}: {exc}") from None
        if found is None:
            raise LookupError(f'runtimeclass.node.k8s.io "{name}" not found')
        return str(found.get("handler") or "")

    async def pull_image_volumes(self, pod: spec.Pod, config: cri.PodSandboxConfig,
                                 plans: Mapping[str, plugins.VolumePlan]) -> dict[str, image_volumes.ImageVolumePull]:
        """Upstream getImageVolumes: each image volume's image made present under its pull policy, in spec order,
        with the pod's pull secrets and the image manager's backoff and events (on the pod). A failure is kept for
        the containers that mount the volume; the others start all the same. The runtime failing to say whether
        the image is there fails it as it fails a container's own image (CreateContainerError)."""
        pulls: dict[str, image_volumes.ImageVolumePull] = {}
        for plan in plans.values():
            if plan.kind != plugins.KIND_IMAGE:
                continue
            try:
                ref = await self.images.ensure_image(pod, plan.image, plan.pull_policy, config)
            except ImageError as exc:
                logger.error(f"{pod.namespace}/{pod.name}: failed to ensure image {plan.image!r} of volume "
                             f"{plan.name}: {exc}")
                pulls[plan.name] = image_volumes.failed(exc.reason, exc.message)
                continue
            except CriError as exc:
                logger.error(f"{pod.namespace}/{pod.name}: failed to ensure image {plan.image!r} of volume "
                             f"{plan.name}: {exc}")
                pulls[plan.name] = image_volumes.failed(CREATE_CONTAINER_ERROR, _details(exc))
                continue
            logger.log(v(4), f"pod {pod.namespace}/{pod.name}: pulled image {ref} of volume {plan.name}")
            pulls[plan.name] = image_volumes.pulled(plan.image, ref, pod.annotations)
        return pulls

    async def start_container(self, pod: spec.Pod, container: spec.ContainerSpec, init: bool, sandbox_id: str,
                              config: cri.PodSandboxConfig, sandbox: cri.PodSandboxStatus,
                              runtime: podstate.RuntimePodStatus, result: SyncResult,
                              plans: Mapping[str, plugins.VolumePlan], *,
                              image_volume_pulls: Mapping[str, image_volumes.ImageVolumePull] | None = None) -> bool:
        """Pull, create, start (upstream startContainer); failures become the container's waiting reason.

        `image_volume_pulls` are this sync's image volume pulls (`pull_image_volumes`): a mounted one that failed
        fails the start first, with its reason (upstream toKubeContainerImageVolumes), and the counters of image
        volume mounts move once the start was tried (upstream incrementImageVolumeMetrics)."""
        name = container.name
        mine = image_volumes.for_container(container, image_volume_pulls or {})
        if mine.waiting is not None:
            for message in mine.events:
                self.recorder.pod_event(pod, WARNING, image_volumes.FAILED_TO_CREATE_CONTAINER, message, name, init)
            result.waiting[name] = mine.waiting
            return False
        started = await self._start_container(pod, container, init, sandbox_id, config, sandbox, runtime, result,
                                              plans, mine.images)
        if self.metrics is not None:
            waiting = result.waiting.get(name)
            create_error = waiting.message if waiting is not None and waiting.reason == CREATE_CONTAINER_ERROR \
                else None
            counts = image_volumes.mount_counts(container, mine.images, create_error)
            self.metrics.image_volume_requested.inc(counts.requested)
            self.metrics.image_volume_mounted_succeeded.inc(counts.succeeded)
            self.metrics.image_volume_mounted_errors.inc(counts.errors)
        return started

    async def _start_container(self, pod: spec.Pod, container: spec.ContainerSpec, init: bool, sandbox_id: str,
                               config: cri.PodSandboxConfig, sandbox: cri.PodSandboxStatus,
                               runtime: podstate.RuntimePodStatus, result: SyncResult,
                               plans: Mapping[str, plugins.VolumePlan], images: Mapping[str, cri.ImageSpec]) -> bool:
        name = container.name
        # The step under way once the image is there (create, then start) and when it began, for the start timeline.
        step, began = "", 0.0

        def timed(error: str = "") -> None:
            if step:
                result.steps.append(StepTime(step, name, began, time.monotonic(), error))

        def failed(reason: str, message: str) -> bool:
            result.waiting[name] = Waiting(reason, message)
            self.recorder.pod_event(pod, WARNING, "Failed", f"Error: {message}", name, init)
            timed(reason)
            return False

        try:
            image_ref = await self.images.ensure(pod, container, config, init)
        except ImageError as exc:
            # Upstream startContainer records "Error: <the error>" after EnsureImageExists fails, and that
            # error's text is the reason itself (ErrImagePull, ImagePullBackOff, InvalidImageName...).
            result.waiting[name] = Waiting(exc.reason, exc.message)
            self.recorder.pod_event(pod, WARNING, "Failed", f"Error: {exc.reason}", name, init)
            return False
        except CriError as exc:
            return failed(CREATE_CONTAINER_ERROR, _details(exc))
        step, began = CREATE, time.monotonic()

        # upstream GenerateRunContainerOptions: the device plugins' part first (PreStartContainer where asked)
        device_opts: RunContainerOptions | None = None
        if self.devices is not None:
            try:
                device_opts = await self.devices.run_container_options(pod, container)
            except AllocationError as exc:
                return failed(CREATE_CONTAINER_CONFIG_ERROR, str(exc))
        device_opts = device_opts or RunContainerOptions()
        try:
            env = [*device_opts.envs, *await self.environment(pod, container, sandbox)]
        except container_env.EnvError as exc:
            return failed(CREATE_CONTAINER_CONFIG_ERROR, str(exc))
        except KubeApiError as exc:
            return failed(CREATE_CONTAINER_CONFIG_ERROR, exc.message)
        except (CacheSyncError, NotRegisteredError) as exc:  # upstream: generateContainerConfig's errors are all this
            return failed(CREATE_CONTAINER_CONFIG_ERROR, str(exc))
        try:  # upstream generateContainerConfig: the image's user decides runAsNonRoot
            image = await self.images.image_status(image_ref)
        except CriError as exc:
            return failed(CREATE_CONTAINER_CONFIG_ERROR, _details(exc))
        refusal = container_config.verify_run_as_non_root(
            pod, container, image.uid if image is not None else None, image.username if image is not None else "")
        if refusal:
            return failed(CREATE_CONTAINER_CONFIG_ERROR, refusal)

        log_dir = Path(self.layout.container_log_dir(pod.namespace, pod.name, pod.uid, name))
        previous = runtime.latest_container(name)
        if previous is not None:
            restart_count = previous.restart_count + 1
        else:  # none left on the runtime (RestartAllContainers removed it): go on from its log files
            restart_count = await asyncio.to_thread(_restart_count_from_logs, log_dir)
        try:
            target_id = reconciler.namespace_target_id(container, runtime)  # ephemeral: the target's PID namespace
        except LookupError as exc:
            return failed(CREATE_CONTAINER_CONFIG_ERROR, str(exc))
        try:
            volume_mounts = plugins.container_mounts(pod, container, plans, dict(env), images)
            await asyncio.to_thread(_ensure_sub_paths, [m for m in volume_mounts if m.image is None],
                                    [plan.host_path for plan in plans.values() if plan.host_path])
        except (VolumeError, OSError) as exc:
            return failed(CREATE_CONTAINER_CONFIG_ERROR, str(exc))
        try:
            pod_ips = self._pod_ips(pod, sandbox)
            device_mounts = [cri.Mount(container_path=m.container_path, host_path=m.host_path, readonly=m.read_only)
                             for m in device_opts.mounts]
            mounts = device_mounts + volume_mounts + \
                await asyncio.to_thread(self._prepare_files, pod, container, log_dir, pod_ips)
            # upstream PreCreateContainer: the CPU manager's cpuset (exclusive CPUs, else the shared pool)
            cpus = self.cpus.affinity(pod.uid, name) if self.cpus is not None else ""
            mems = self.memory.cpuset_mems(pod.uid, name) if self.memory is not None else ""  # GetMemoryNUMANodes
            ccfg = container_config.build_container_config(
                pod, container, restart_count=restart_count, env=env, image_ref=image_ref, mounts=mounts,
                memory_capacity=self.node_memory_capacity, pid_target_id=target_id,
                masked_paths=self.masked_paths, hugepage_sizes=self.hugepage_sizes,
                seccomp_profile_root=self.layout.seccomp_dir, seccomp_default=self.cfg.effective_seccomp_default,
                userns=_sandbox_user_namespace(config), cpuset_cpus=cpus, cpuset_mems=mems,
                devices=[cri.Device(container_path=d.container_path, host_path=d.host_path, permissions=d.permissions)
                         for d in device_opts.devices],
                cdi_devices=device_opts.cdi_devices, device_annotations=dict(device_opts.annotations),
                exclusive_cpus=self.exclusive_cpus(pod),  # no CFS quota on exclusive CPUs
                swap=self.swap_controller)
            # upstream SyncPod's start: "Creating container in pod" at V(4)
            logger.log(v(4), f"pod {pod.namespace}/{pod.name}: creating container {name}")
            container_id = await self.cri.containers.create(sandbox_id, ccfg, config)
        except container_config.ContainerConfigError as exc:  # upstream generateContainerConfig's errors
            return failed(CREATE_CONTAINER_CONFIG_ERROR, str(exc))
        except (CriError, OSError) as exc:
            return failed(CREATE_CONTAINER_ERROR, _details(exc))
        if self.cpus is not None:
            self.cpus.container_created(container_id, cpus)  # upstream PreStartContainer's AddContainer
        if self.memory is not None:
            await self.memory.container_added(pod, name)  # upstream PreStartContainer: the memory manager's too
        # What this container now runs with is what a later resize compares against (upstream SetActuatedResources).
        await asyncio.to_thread(self.allocations.set_actuated_container,
                                pod.uid, name, resize.effective(policy.pod_level(pod), container.resources))
        self.recorder.pod_event(pod, NORMAL, "Created", f"Created container: {name}", name, init)
        timed()
        step, began = START, time.monotonic()
        try:
            await self.cri.containers.start(container_id)
        except CriError as exc:
            return failed(RUN_CONTAINER_ERROR, _details(exc))
        self.recorder.pod_event(pod, NORMAL, "Started", f"Started container {name}", name, init)
        await self._link_log(pod, name, container_id, restart_count)
        post_start = (container.lifecycle or {}).get("postStart")
        if post_start:
            # Upstream: a failed postStart hook kills the container; its status waits with PostStartHookError.
            error = await self.hooks.run(post_start, pod, container, container_id, sandbox.ip,
                                         seconds=self.cfg.runtime_request_timeout)
            if error is not None:
                self.recorder.pod_event(pod, WARNING, "FailedPostStartHook", error, name, init)
                await self._stop(pod, container_id, name, init, "FailedPostStartHook", self._grace(pod, None))
                result.waiting[name] = Waiting(POST_START_HOOK_ERROR, error)
                timed(POST_START_HOOK_ERROR)
                return False
        timed()  # started once its postStart hook ran (upstream startContainer)
        return True

    async def _link_log(self, pod: spec.Pod, name: str, container_id: str, restart_count: int) -> None:
        """The container's ``/var/log/containers`` symlink for log collectors, made once it started (upstream
        startContainer; the runtime opens the log file on start). A failure is only logged."""
        await log_manager.create_container_symlink(
            self.layout.container_logs_dir, pod.name, pod.namespace, name, container_id,
            self.layout.container_log_path(pod.namespace, pod.name, pod.uid, name, restart_count))

    async def _remove_container(self, container_id: str, *, keep_logs: bool = False) -> None:
        """Upstream removeContainer: the container's log files (its log and the rotated ones, unless `keep_logs`)
        and its symlink go first (found from ContainerStatus, as upstream removeContainerLog), then
        RemoveContainer; already gone is fine."""
        try:
            status = await self.cri.containers.status(container_id)
        except CriError as exc:
            if not exc.not_found:
                raise
        else:
            if status.log_path and not keep_logs:
                await asyncio.to_thread(_remove_log_files, status.log_path)
            pod = labels.pod_identity(status.labels)
            if pod.name:
                await log_manager.remove_container_symlink(self.layout.container_logs_dir, pod.name, pod.namespace,
                                                           labels.container_name(status.labels), container_id)
        try:
            await self.cri.containers.remove(container_id)
        except CriError as exc:
            if not exc.not_found:
                raise

    async def environment(self, pod: spec.Pod, container: spec.ContainerSpec,
                          sandbox: cri.PodSandboxStatus) -> list[tuple[str, str]]:
        """Read the ConfigMaps/Secrets the container references (through the volume manager's objects: the node's
        watches of what its pods reference), then resolve in upstream order. In standalone
        mode there is nothing to fetch them from: a reference is upstream's error."""
        refusal = container_env.standalone_refusal(pod, container) if is_standalone(self.api) else ""
        if refusal:
            raise container_env.EnvError(refusal)
        config_map_names, secret_names = container_env.referenced_objects(pod, container)
        config_maps = {n: _text(await self.volumes.config_map_data(pod, n)) for n in sorted(config_map_names)}
        secret_values = {n: _text(await self.volumes.secret_data(pod, n)) for n in sorted(secret_names)}
        pod_ips = self._pod_ips(pod, sandbox)
        service_env: Mapping[str, str] = {}
        if self.services is not None:
            try:
                service_env = await self.services.env(pod.namespace, pod.spec.enable_service_links,
                                                       static=spec.is_static(pod))
            except ValueError as exc:
                raise container_env.EnvError(str(exc)) from None
        return container_env.resolve_env(
            pod, container, config_maps=config_maps, secrets=secret_values, node_name=self.cfg.node_name,
            host_ip=self.cfg.node_ip, pod_ip=pod_ips[0] if pod_ips else "", pod_ips=pod_ips,
            service_env=service_env, node_allocatable=self.node_allocatable())

    def _pod_ips(self, pod: spec.Pod, sandbox: cri.PodSandboxStatus) -> tuple[str, ...]:
        """The IPs the pod's status shows, which a hostNetwork pod's containers see as ``status.podIP`` too."""
        node_ips = (self.cfg.node_ip,) if self.cfg.node_ip else ()
        sandbox_ips = [ip for ip in (sandbox.ip, *sandbox.additional_ips) if ip]
        return tuple(sandbox_config.effective_pod_ips(pod, sandbox_ips, node_ips))

    def _prepare_files(self, pod: spec.Pod, container: spec.ContainerSpec, log_dir: Path,
                       pod_ips: Sequence[str]) -> list[cri.Mount]:
        """The container's log directory, its termination-log file and the pod's managed /etc/hosts (blocking:
        run in a thread)."""
        log_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        mounts: list[cri.Mount] = []
        if container.termination_message_path:
            folder = Path(self.layout.container_dir(pod.uid, container.name))
            folder.mkdir(mode=0o750, parents=True, exist_ok=True)
            file = folder / secrets.token_hex(4)
            file.touch(mode=0o666)
            os.chmod(file, 0o666)  # writable by any uid the container runs as, as upstream
            mount = container_config.termination_message_mount(container, str(file))
            if mount is not None:
                mounts.append(mount)
        if container_config.should_mount_etc_hosts(pod, container, pod_ips):
            mounts.append(container_config.etc_hosts_mount(self._ensure_hosts_file(pod, pod_ips)))
        return mounts

    def _ensure_hosts_file(self, pod: spec.Pod, pod_ips: Sequence[str]) -> str:
        """``<pod dir>/etc-hosts``, written once per pod as upstream `ensureHostsFile` does (blocking)."""
        path = Path(self.layout.etc_hosts(pod.uid))
        if path.exists():
            return str(path)
        if pod.spec.host_network:
            content = container_config.node_hosts_file(Path("/etc/hosts").read_text(errors="replace"),
                                                       pod.spec.host_aliases)
        else:
            hostname, domain = sandbox_config.pod_hostname_and_domain(pod, self.cfg.cluster_domain)
            content = container_config.managed_hosts_file(pod_ips, hostname, domain, pod.spec.host_aliases)
        path.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}-{secrets.token_hex(4)}")
        tmp.write_text(content)
        tmp.chmod(0o644)
        tmp.replace(path)
        return str(path)

    # ----------------------------------------------------------------------------------------- kill

    async def stop_container(self, pod: spec.Pod, runtime: podstate.RuntimePodStatus, container_id: str,
                             message: str, grace: int | None,
                             wait_turn: Callable[[float], Awaitable[None]] | None = None) -> None:
        """Upstream killContainer: preStop hook, then (`wait_turn`, killing a pod with sidecars) wait within
        the grace period left for the containers that must stop first, then StopContainer."""
        info = next((c for c in runtime.containers if c.id == container_id), None)
        name = info.name if info is not None else ""
        seconds = self._grace(pod, grace)
        is_init = any(c.name == name for c in pod.spec.init_containers)
        container = pod.spec.container(name)
        pre_stop = (container.lifecycle or {}).get("preStop") if container is not None else None
        if pre_stop and container is not None and info is not None and info.state == podstate.State.RUNNING:
            # Upstream killContainer: the preStop hook gets the grace period; what it used is deducted,
            # leaving at least the minimum grace period for SIGTERM.
            started = time.monotonic()
            pod_ip = next(iter(runtime.ips), "")
            try:
                error = await asyncio.wait_for(
                    self.hooks.run(pre_stop, pod, container, container_id, pod_ip, seconds=seconds), seconds)
            except TimeoutError:
                error = (f"PreStopHook for Container \"{name}\" in Pod \"{pod.full_name}\" "
                         f"did not complete in {seconds}s")
            if error is not None:
                self.recorder.pod_event(pod, WARNING, "FailedPreStopHook", error, name, is_init)
            seconds = max(int(seconds - (time.monotonic() - started)), MINIMUM_GRACE_PERIOD)
        if wait_turn is not None and grace != 0:
            # Upstream terminationOrdering.waitForTurn: the wait is deducted from the grace period.
            started = time.monotonic()
            await wait_turn(seconds)
            seconds = max(int(seconds - (time.monotonic() - started)), MINIMUM_GRACE_PERIOD)
        await self._stop(pod, container_id, name, is_init, message, seconds)

    async def _stop(self, pod: spec.Pod, container_id: str, name: str, init: bool, message: str,
                    seconds: int) -> None:
        """StopContainer with a grace period: SIGTERM, then SIGKILL when it runs out (the runtime does both)."""
        self.recorder.pod_event(pod, NORMAL, "Killing", message or f"Stopping container {name}", name or None, init)
        # upstream killContainer: "Killing container with a grace period" at V(2)
        logger.log(v(2), f"pod {pod.namespace}/{pod.name}: killing container {name} ({container_id}) with a grace "
                         f"period of {seconds}s")
        try:
            async with self.own_stops.stopping(container_id):
                await self.cri.containers.stop(container_id, seconds)
        except CriError as exc:
            if not exc.not_found:
                raise

    async def reset_containers(self, pod: spec.Pod, resets: Sequence[reconciler.ResetInfo]) -> None:
        """RestartAllContainers (upstream SyncPod's ContainersToReset): one at a time in the given order, stop
        a container that has not exited with grace period 0 (no preStop hook, the runtime's minimum of 2s;
        Killing event "killing"), then remove it; its log files stay. A failure stops here (retried on the
        next sync, which still sees AllContainersRestarting)."""
        for reset in resets:
            is_init = any(c.name == reset.name for c in pod.spec.init_containers)
            if reset.kill:
                await self._stop(pod, reset.container_id, reset.name, is_init, "killing", MINIMUM_GRACE_PERIOD)
            await self._remove_container(reset.container_id, keep_logs=True)

    async def kill_pod(self, pod: spec.Pod, runtime: podstate.RuntimePodStatus, grace: int | None) -> None:
        """Stop every running container concurrently, then every sandbox (upstream killPodWithSyncResult).

        With sidecars, each sidecar waits (within its grace period) until the regular containers and the
        sidecars after it have stopped (upstream terminationOrdering): regular containers first, then sidecars
        in reverse order."""
        running = [c for c in runtime.containers if c.state in (podstate.State.RUNNING, podstate.State.UNKNOWN)]
        prereqs = reconciler.termination_prereqs(pod, {c.name for c in running})
        stopped = {c.name: asyncio.Event() for c in running}

        async def stop(info: podstate.ContainerInfo) -> None:
            waits = [stopped[n] for n in prereqs.get(info.name, ())]

            async def wait_turn(seconds: float) -> None:
                with contextlib.suppress(TimeoutError):  # asyncio.timeout keeps a cancel that races the timeout
                    async with asyncio.timeout(seconds):
                        await asyncio.gather(*(e.wait() for e in waits))

            try:
                await self.stop_container(pod, runtime, info.id, "", grace, wait_turn=wait_turn if waits else None)
            finally:
                stopped[info.name].set()

        await asyncio.gather(*(stop(c) for c in running))
        for sandbox in runtime.sandboxes:
            if sandbox.ready:
                try:
                    async with self.own_stops.stopping(sandbox.id):
                        await self.cri.sandboxes.stop(sandbox.id)
                except CriError as exc:
                    if not exc.not_found:
                        raise

    async def remove(self, container_ids: Iterable[str], sandbox_ids: Iterable[str]) -> None:
        """Remove containers, then sandboxes (stopped first); already gone is fine."""
        for cid in container_ids:
            await self._remove_container(cid)
        for sid in sandbox_ids:
            try:
                async with self.own_stops.stopping(sid):
                    await self.cri.sandboxes.stop(sid)
                await self.cri.sandboxes.remove(sid)
            except CriError as exc:
                if not exc.not_found:
                    raise

    async def release_volumes(self, uid: str) -> None:
        """A terminated pod's volumes are torn down before the pod is deleted (upstream's volume manager drops
        pods whose runtime may be removed from its desired state: tmpfs unmounted, emptyDir contents gone), so a
        Failed or Succeeded pod holds no disk or memory through its volumes. Its user namespace range is free again
        too (upstream SyncTerminatedPod: usernsManager.Release once the volumes and the pod cgroup are gone)."""
        await self.volumes.cleanup(uid)
        await asyncio.to_thread(_remove_tree, Path(self.layout.volumes_dir(uid)))
        # upstream SyncTerminatedPod: the pod cgroup goes once the volumes are gone (nothing of the pod runs)
        await asyncio.to_thread(self.cgroups.remove, uid)
        if self.userns is not None:
            await asyncio.to_thread(self.userns.release, uid)

    async def remove_pod(self, runtime: podstate.RuntimePodStatus, uid: str) -> None:
        """Remove a deleted pod's containers, sandboxes, cgroup and directories (upstream: GC and cleanup).

        Every log directory of the UID goes, whatever namespace and name it carries (upstream
        evictPodLogsDirectories goes by the UID alone): the runtime may have nothing left to name the pod by."""
        await self.remove([c.id for c in runtime.containers], [s.id for s in runtime.sandboxes])
        await asyncio.to_thread(self.cgroups.remove, uid)
        await asyncio.to_thread(self.allocations.remove, uid)  # the checkpoint file is written and fsynced
        await self.volumes.cleanup(uid)
        for directory in await asyncio.to_thread(pod_log_dirs, self.layout.pod_log_root, uid):
            await asyncio.to_thread(_remove_tree, directory)
        if self.userns is not None:  # its range is free, its userns file gone (upstream Release)
            await asyncio.to_thread(self.userns.release, uid)
        await asyncio.to_thread(_remove_tree, Path(self.layout.pod_dir(uid)))

    def _grace(self, pod: spec.Pod, grace: int | None) -> int:
        if grace is None:
            grace = pod.deletion_grace_period_seconds if pod.is_deleting and \
                pod.deletion_grace_period_seconds is not None else pod.spec.termination_grace_period_seconds
        return max(int(grace), MINIMUM_GRACE_PERIOD) if grace else MINIMUM_GRACE_PERIOD


def read_host_container_facts(sys_root: str = "/sys") -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The node's hugepage sizes and the masked paths every container gets (upstream adds the CPUs'
    thermal_throttle directories that exist to the defaults). Blocking: run in a thread."""
    try:
        sizes = container_config.hugepage_page_sizes(sorted(os.listdir(f"{sys_root}/kernel/mm/hugepages")))
    except OSError:
        sizes = ()
    try:
        cpus = container_config.possible_cpus(Path(f"{sys_root}/devices/system/cpu/possible").read_text())
    except OSError:
        cpus = None
    cpus = cpus if cpus is not None else list(range(os.cpu_count() or 1))
    throttles = [p for p in container_config.thermal_throttle_paths(cpus)
                 if os.path.exists(p.replace("/sys", sys_root, 1))]
    return sizes, (*container_config.DEFAULT_MASKED_PATHS, *throttles)


def _sandbox_user_namespace(config: cri.PodSandboxConfig) -> cri.UserNamespace | None:
    """The user namespace the sandbox was given: its containers share it (upstream asks the user namespace
    manager again, which answers the same)."""
    context = config.linux.security_context if config.linux is not None else None
    options = context.namespace_options if context is not None else None
    return options.userns_options if options is not None else None


def _kill_grace(pod: spec.Pod, info: reconciler.KillInfo) -> int | None:
    """A probe's own terminationGracePeriodSeconds for the kill it caused, unless the pod is being deleted
    (upstream `setTerminationGracePeriod`); None means the pod's period."""
    if pod.is_deleting:
        return None
    kind = {reconciler.REASON_LIVENESS_PROBE: probes.Kind.LIVENESS,
            reconciler.REASON_STARTUP_PROBE: probes.Kind.STARTUP}.get(info.reason)
    container = next((c for c in (*pod.spec.init_containers, *pod.spec.containers) if c.name == info.name), None)
    if kind is None or container is None:
        return None
    return probes.termination_grace_period(container, kind)


def _ensure_sub_paths(mounts: Iterable[cri.Mount], volume_roots: Iterable[str]) -> None:
    """A subPath that does not exist yet in its volume is created as a directory with the volume's own mode,
    setgid and sticky bits included (upstream makeMounts: SafeMakeDir with GetMode of the volume), so an
    fsGroup volume's subPath is group-inherited like the volume."""
    roots = sorted((root.rstrip("/") for root in volume_roots), key=len, reverse=True)
    for mount in mounts:
        path = Path(mount.host_path)
        if path.exists() or path.is_symlink():
            continue
        root = next((Path(r) for r in roots if mount.host_path.startswith(r + "/")), None)
        mode = stat.S_IMODE(root.stat().st_mode) if root is not None and root.is_dir() else 0o777
        missing = [path, *(p for p in path.parents if not p.exists())]
        for folder in reversed(missing):
            folder.mkdir()
            os.chmod(folder, mode)  # mkdir is subject to the umask and drops setgid/sticky


def _restart_count_from_logs(folder: Path) -> int:
    """Upstream calcRestartCountByLogDir on a container's log directory (blocking: run in a thread)."""
    try:
        names = [entry.name for entry in os.scandir(folder) if not entry.is_dir()]
    except OSError:
        return 0
    return container_config.restart_count_from_log_names(names)


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def pod_log_dirs(pod_log_root: str, uid: str | None = None) -> list[Path]:
    """The pod log directories under `pod_log_root`, those of pod `uid` only when given (blocking)."""
    return [Path(pod_log_root, name) for name in pod_log_dir_names(pod_log_root)
            if uid is None or paths.pod_uid_from_log_dir(name) == uid]


def pod_log_dir_names(pod_log_root: str) -> list[str]:
    """The names of the pod log directories under `pod_log_root` (blocking)."""
    try:
        entries = list(os.scandir(pod_log_root))
    except FileNotFoundError:
        return []
    return [e.name for e in entries if e.is_dir(follow_symlinks=False)]


async def _outcome(step: Awaitable[_R]) -> _R | Exception:
    """What `step` returns, or the exception it raises (as gather's ``return_exceptions`` gives it)."""
    try:
        return await step
    except Exception as exc:
        return exc


def _remove_log_files(log_path: str) -> None:
    """A removed container's log and its rotated files, ``<path>*`` (upstream logManager.Clean's glob)."""
    for path in glob.glob(glob.escape(log_path) + "*"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def _text(data: Mapping[str, bytes] | None) -> dict[str, str] | None:
    return None if data is None else {k: v.decode(errors="replace") for k, v in data.items()}


def _details(exc: Exception) -> str:
    return exc.details if isinstance(exc, CriError) else str(exc)


def _path_error(op: str, exc: OSError) -> str:
    """Go's *PathError text, as upstream's messages carry it: "mkdir <path>: file name too long"."""
    return f"{op} {exc.filename}: {os.strerror(exc.errno).lower()}" if exc.errno else f"{op}: {exc}"


class _ResizeError(Exception):
    """A resize refused before anything changed (upstream validatePodResizeAction), or refused by the runtime
    (UpdatePodSandboxResources) before a pod cgroup write."""


def _quantities(values: resize.Values, kind: str) -> dict[str, str]:
    """`values`' cpu (milli) and memory (bytes) request or limit as quantities; "0" where unset."""
    if kind == "request":
        return {"cpu": f"{values.cpu_request}m", "memory": str(values.memory_request)}
    return {"cpu": f"{values.cpu_limit}m", "memory": str(values.memory_limit)}


def _nonzero(quantity: str) -> bool:
    return qos.parse_quantity(quantity) != 0


def _with_resource(before: Mapping[str, str], after: Mapping[str, str], kind: str) -> dict[str, str]:
    """`before` with resource `kind` taken from `after` (absent there: absent here)."""
    result = {k: v for k, v in before.items() if k != kind}
    if kind in after:
        result[kind] = after[kind]
    return result
