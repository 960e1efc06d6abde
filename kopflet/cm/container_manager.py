"""The node's top pod cgroups: ``kubepods`` sized to node allocatable, and the QoS tiers under it (upstream
pkg/kubelet/cm containerManagerImpl.setupNode, node_container_manager_linux.go and qos_container_manager_linux.go,
cgroupfs driver).

At start, ``kubepods`` gets its limits (`node_allocatable.pods_cgroup_config`) and ``kubepods/burstable`` and
``kubepods/besteffort`` exist with their settings; a ``NodeAllocatableEnforced`` event says so, or a
``FailedNodeAllocatableEnforcement`` warning says why not, retried each minute until it holds (the pods' usage may
be above a lowered limit until evictions bring it down). The QoS tiers follow the pods: every minute and before
each new pod cgroup, the Burstable tier's cpu shares are the sum of its pods' requests (`helpers.qos_cgroup_configs`).
With the QOSReserved gate and ``qosReserved: {memory: N%}``, the same update gives the Burstable and BestEffort tiers
memory limits (upstream setMemoryReserve: allocatable less N% of the higher classes' memory requests); a tier the
kernel will not limit below its usage is held at its usage instead (upstream retrySetMemoryReserve). Without them,
no memory limit is written on the tiers (nor taken off: a limit left by an earlier run stays, as upstream, with a
warning at start).

Where: ``<cgroupRoot>/kubepods`` in the cgroup driver's spelling (`cgroup_names.CgroupLayout`); cgroupRoot must
exist in every hierarchy first (upstream NewContainerManager's check), else a `CgroupConfigError`. Without
cgroupsPerQOS there is no ``kubepods`` and no QoS tier (upstream's noop QoS container manager): only a non-empty
cgroupRoot gets the whole node's shares, memory and pids, as upstream's enforceNodeAllocatableCgroups still writes.
With the systemd driver where systemd is not running, the agent does not start (`CgroupConfigError`: upstream's
libcontainer refuses the first cgroup it creates with the same error, and the kubelet exits).

Before any of that, the kernel tunables the kubelet expects are checked (`kernel_tunables`): set to its values, or
with ``protectKernelDefaults`` a `KernelTunablesError` when one differs, and the agent does not start.

The cgroup and sysctl writes block: they run in threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction

from kopflet.api import qos, spec
from kopflet.cm import cgroup_names, helpers, kernel_tunables, node_allocatable
from kopflet.cm.cgroups import SYSTEMD_RUNTIME_DIR, CgroupError, PodCgroups, systemd_running

logger = logging.getLogger(__name__)

QOS_UPDATE_PERIOD = 60.0
"""upstream periodicQOSCgroupUpdateInterval (1m)."""
ENFORCE_RETRY_PERIOD = 60.0
"""How long upstream waits before writing kubepods' limits again after a failure (1m)."""

NodeEvent = Callable[[str, str, str], None]
"""(type, reason, message): an event about this node."""

SYSCTL_ROOT = "/proc/sys"
"""component-helpers sysctl's sysctlBase."""
UID_MAP = "/proc/self/uid_map"


class KernelTunablesError(Exception):
    """The kernel tunables are not as the kubelet needs them, or cannot be read or set (upstream's container manager
    fails to start: "Failed to start ContainerManager", and the kubelet exits)."""


def _go_path_error(op: str, path: str, exc: OSError) -> str:
    """An OSError as Go's *PathError prints it: ``open /proc/sys/kernel/panic: permission denied``."""
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    return f"{op} {path}: {reason[:1].lower()}{reason[1:]}"


def running_in_user_namespace(uid_map: str = UID_MAP) -> bool:
    """moby/sys userns RunningInUserNS: a uid_map other than the whole range mapped to itself."""
    try:
        with open(uid_map) as f:
            lines = [line.split() for line in f if line.strip()]
    except OSError:
        return False
    return lines != [["0", "0", "4294967295"]]


class KernelTunables:
    """Upstream setupKernelTunables on the files under `root` (``/proc/sys``; tests pass a directory)."""

    def __init__(self, *, protect: bool, root: str = SYSCTL_ROOT, uid_map: str = UID_MAP) -> None:
        self.protect, self.root, self.uid_map = protect, root, uid_map

    def _path(self, sysctl: str) -> str:
        return os.path.join(self.root, sysctl)

    def _read(self, sysctl: str) -> int | str:
        """GetSysctl: the value, or the error text (a *PathError, or strconv's)."""
        path = self._path(sysctl)
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            return _go_path_error("open", path, exc)
        try:
            data = os.read(fd, 4096)  # os.ReadFile: a directory opens, and fails to read
        except OSError as exc:
            return _go_path_error("read", path, exc)
        finally:
            os.close(fd)
        return kernel_tunables.parse_value(data.decode(errors="replace"))

    def _write(self, sysctl: str, value: int) -> None:
        """SetSysctl: os.WriteFile of the decimal value (mode 0640 were it created; it never is under /proc/sys)."""
        path = self._path(sysctl)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
        except OSError as exc:
            raise OSError(exc.errno, _go_path_error("open", path, exc)) from None
        try:
            os.write(fd, str(value).encode())
        except OSError as exc:
            raise OSError(exc.errno, _go_path_error("write", path, exc)) from None
        finally:
            os.close(fd)

    def setup(self) -> None:
        """Check, and without `protect` set, the tunables; KernelTunablesError with upstream's aggregate error when
        one cannot be read, differs under `protect`, or cannot be written (unless in a user namespace, where a
        failed write is only logged: KubeletInUserNamespace, on by default since 1.37)."""
        current = {sysctl: self._read(sysctl) for sysctl, _ in kernel_tunables.DESIRED}
        decision = kernel_tunables.decide(current, self.protect)
        errors = list(decision.errors)
        for sysctl, value in decision.writes:
            logger.info(f"Updating kernel flag {kernel_tunables.display_name(sysctl)}: expected value {value}, "
                        f"actual value {current[sysctl]}")
            try:
                self._write(sysctl, value)
            except OSError as exc:
                message = exc.strerror or str(exc)
                if running_in_user_namespace(self.uid_map):
                    logger.info(f"Updating kernel flag {kernel_tunables.display_name(sysctl)} failed (running in "
                                f"UserNS, ignoring): {message}")
                    continue
                errors.append(message)
        if errors:
            raise KernelTunablesError(kernel_tunables.aggregate(errors))


class CgroupConfigError(Exception):
    """cgroupRoot does not exist, or the systemd driver is asked for where systemd is not running: the agent does
    not start (upstream NewContainerManager's "invalid configuration", or its container manager's start failing)."""


class ContainerManager:
    """Owns ``kubepods`` and its QoS tiers; `start` once, then `run` for the periodic QoS update."""

    def __init__(self, cgroups: PodCgroups, *, capacity: Mapping[str, Fraction], system_reserved: Mapping[str, str],
                 kube_reserved: Mapping[str, str], enforcement: Iterable[str], hugepage_sizes: Sequence[str],
                 active_pods: Callable[[], Iterable[spec.Pod]], node_event: NodeEvent,
                 kernel: KernelTunables | None = None, systemd_dir: str = SYSTEMD_RUNTIME_DIR,
                 qos_reserved: Mapping[str, int] | None = None) -> None:
        """`kernel`: the tunables to check and set at start (None: left alone, for a hollow node or a test).
        The cgroups' layout (`cgroups.layout`) says where ``kubepods`` is; `systemd_dir` is where a running systemd
        is seen (tests pass a directory). `qos_reserved`: resource -> percent (`AgentConfig.qos_reserved_in_force`)
        with the QOSReserved gate on, None with it off."""
        self.cgroups, self.kernel, self.systemd_dir = cgroups, kernel, systemd_dir
        self.layout = cgroups.layout
        self.enforcement = frozenset(enforcement)
        self.pods_config = node_allocatable.pods_cgroup_config(capacity, system_reserved, kube_reserved,
                                                               self.enforcement)
        self.qos_reserved = None if qos_reserved is None else dict(qos_reserved)
        # upstream GetNodeAllocatableAbsolute: capacity less both reservations, whatever the enforcement
        absolute = node_allocatable.allocatable_absolute(capacity, system_reserved, kube_reserved)
        self.allocatable_absolute_memory = qos.value(absolute.get(qos.MEMORY, 0))
        self.hugepage_sizes = tuple(hugepage_sizes)
        self.active_pods, self.node_event = active_pods, node_event
        self._lock = asyncio.Lock()
        self._qos_kept: dict[str, tuple[spec.Pod, helpers.PodQOSRequests]] = {}
        self._enforcing: asyncio.Task[None] | None = None

    @property
    def allocatable_memory(self) -> int | None:
        """The memory limit on ``kubepods`` with ``pods`` enforced (allocatableMemory.available measures against
        it), None without enforcement (upstream adds no allocatable threshold then)."""
        return self.pods_config.memory if node_allocatable.PODS in self.enforcement else None

    async def start(self) -> None:
        """Create the top cgroups and enforce node allocatable (upstream setupNode). The enforcement is retried in
        the background while the kernel refuses it, as upstream's goroutine does. KernelTunablesError first, when
        the kernel tunables are not as needed (setupKernelTunables)."""
        await self.check_layout()
        if self.kernel is not None:
            await asyncio.to_thread(self.kernel.setup)
        if self.layout.cgroups_per_qos:
            tiers = helpers.qos_cgroup_configs(self.active_pods(), hugepage_sizes=self.hugepage_sizes)
            async with self._lock:
                for klass in (qos.BURSTABLE, qos.BEST_EFFORT):
                    # Created with the tier's settings, or brought back to them (upstream qosContainerManager.Start).
                    await asyncio.to_thread(self.cgroups.apply, self.layout.qos_cgroup(klass), tiers[klass],
                                            hugepage_sizes=self.hugepage_sizes)
            await self._check_stale_memory_limits()
            if self.memory_reserved is not None:
                # upstream's wait.Until runs UpdateCgroups at once: the reserve holds from the start, not a minute on
                await self.update_qos()
        if not self.layout.root_name:
            return  # cgroupsPerQOS off and no cgroupRoot: the root cgroup is not the kubelet's to limit (upstream)
        self._enforcing = asyncio.create_task(self._enforce(), name="node-allocatable")
        await asyncio.wait([self._enforcing], timeout=5.0)  # its event is usually the first after Starting

    async def check_layout(self) -> None:
        """CgroupConfigError unless the cgroup layout can be used here: the systemd driver needs systemd running
        (opencontainers/cgroups manager.New), and with cgroupsPerQOS cgroupRoot must exist (upstream
        NewContainerManager: cgroupManager.Validate of the root, in the driver's spelling)."""
        if self.layout.systemd and not await asyncio.to_thread(systemd_running, self.systemd_dir):
            # upstream: the first cgroup created fails, then "Failed to start ContainerManager" and the kubelet exits
            raise CgroupConfigError(f"Failed to start ContainerManager: {cgroup_names.SYSTEMD_NOT_RUNNING}")
        if self.layout.cgroups_per_qos:
            try:
                error = await asyncio.to_thread(self.cgroups.validate, self.layout.configured_root)
            except cgroup_names.CgroupNameError as exc:
                # a root the runtime's systemd driver cannot spell (the config was checked for its own driver)
                raise CgroupConfigError(
                    f"invalid configuration: cgroupRoot {self.layout.cgroup_root!r}: {exc}") from exc
            if error:
                raise CgroupConfigError(error)
            logger.info(f"Container manager verified user specified cgroup-root exists: "
                        f"{self.layout.literal(self.layout.configured_root)}")

    async def _enforce(self) -> None:
        root = self.layout.pods_root
        while True:
            try:
                async with self._lock:
                    await asyncio.to_thread(self.cgroups.apply, root, self.pods_config)
            except (CgroupError, OSError) as exc:
                # upstream formats the internal name (["kubepods"]), whatever the driver
                message = node_allocatable.failed_message(cgroup_names.to_cgroupfs(self.layout.root_name), str(exc))
                logger.warning(message)
                self.node_event("Warning", node_allocatable.FAILED_REASON, message)
                await asyncio.sleep(ENFORCE_RETRY_PERIOD)
                continue
            logger.info(f"node allocatable on {root}: {self.pods_config}")
            self.node_event("Normal", node_allocatable.ENFORCED_REASON, node_allocatable.ENFORCED_MESSAGE)
            return

    @property
    def memory_reserved(self) -> int | None:
        """The percent of memory requests reserved (qosReserved's memory with the QOSReserved gate on), else None."""
        return None if self.qos_reserved is None else self.qos_reserved.get(qos.MEMORY)

    def qos_configs(self, pods: Iterable[spec.Pod]) -> dict[str, helpers.ResourceConfig]:
        """The tiers' settings for the active `pods` (keyed by class; Guaranteed is ``kubepods``)."""
        summaries = self._kept_qos_requests(pods)
        percent = self.memory_reserved
        if percent is not None and self.allocatable_absolute_memory == 0:
            logger.debug("Allocatable memory reported as 0, might be in standalone mode, not setting QoS memory limits")
        elif percent is not None and logger.isEnabledFor(logging.DEBUG):
            requests = helpers.qos_memory_requests(summaries)
            for klass in (qos.GUARANTEED, qos.BURSTABLE):
                logger.debug(f"QoS pod memory limit: qos={klass} limits={requests[klass]} percentReserve={percent}")
        return helpers.qos_cgroup_configs(summaries, hugepage_sizes=self.hugepage_sizes,
                                          qos_reserved_memory_percent=percent,
                                          allocatable_memory=self.allocatable_absolute_memory)

    def _kept_qos_requests(self, pods: Iterable[spec.Pod]) -> list[helpers.PodQOSRequests]:
        """Each pod's `PodQOSRequests`, kept while the pod is the same object (a pod's spec objects are never
        changed; a resize or a new pod brings a new one): the tiers are brought up to date before every new pod
        cgroup, over every active pod, so a burst would otherwise work out each pod's requests N times."""
        kept, self._qos_kept = self._qos_kept, {}
        out = []
        for pod in pods:
            held = kept.get(pod.uid)
            requests = held[1] if held is not None and held[0] is pod else helpers.pod_qos_requests(pod)
            self._qos_kept[pod.uid] = (pod, requests)
            out.append(requests)
        return out

    def _tiers(self) -> tuple[tuple[str, str], ...]:
        """(class, cgroup) in the order they are written: burstable, besteffort, then kubepods (whose own QoS
        settings are hugepages only; its cpu and memory are node allocatable's)."""
        return ((qos.BURSTABLE, self.layout.qos_cgroup(qos.BURSTABLE)),
                (qos.BEST_EFFORT, self.layout.qos_cgroup(qos.BEST_EFFORT)),
                (qos.GUARANTEED, self.layout.pods_root))

    def _apply_all(self, configs: Mapping[str, helpers.ResourceConfig], *, stop_at_error: bool) -> Exception | None:
        """Write each tier's settings (blocking); the first error, after trying every tier unless `stop_at_error`."""
        first: Exception | None = None
        for klass, name in self._tiers():
            try:
                self.cgroups.apply(name, configs[klass], hugepage_sizes=self.hugepage_sizes)
            except (CgroupError, OSError) as exc:
                first = first or exc
                if stop_at_error:
                    break
        return first

    def _update_qos_sync(self, configs: dict[str, helpers.ResourceConfig]) -> None:
        """Upstream UpdateCgroups' writes (blocking). Gate on: every tier is written; if one was refused and memory is
        reserved, each tier using more than its new limit is given its usage as the limit (retrySetMemoryReserve),
        then every tier is written once more, stopping at an error, which is raised."""
        if self.qos_reserved is not None:
            if self._apply_all(configs, stop_at_error=False) is None:
                logger.debug("Updated QoS cgroup configuration")
                return
            if self.memory_reserved is not None:
                usage = [(klass, self.cgroups.memory_usage(name)) for klass, name in self._tiers()]
                if any(used is None for _, used in usage):
                    logger.debug("Failed to get resource stats: the memory usage of a QoS cgroup cannot be read")
                configs = helpers.qos_memory_retry_limits(configs, usage)
        error = self._apply_all(configs, stop_at_error=True)
        if error is not None:
            raise error
        logger.debug("Updated QoS cgroup configuration")

    async def update_qos(self) -> None:
        """Bring the QoS tiers to what the active pods need (upstream UpdateCgroups); a failure is logged, as
        upstream's caller does, and the pod sync goes on."""
        if not self.layout.cgroups_per_qos:
            return  # upstream qosContainerManagerNoop: no QoS tiers
        try:
            async with self._lock:
                configs = self.qos_configs(self.active_pods())
                await asyncio.to_thread(self._update_qos_sync, configs)
        except (CgroupError, OSError) as exc:
            # upstream: "Failed to update QoS cgroup configuration", then its caller's "Failed to reserve QoS requests"
            logger.warning(f"failed to update the QoS cgroups: {exc}")

    async def _check_stale_memory_limits(self) -> None:
        """Without a memory reserve, say so when a tier still has a memory limit (an earlier run's qosReserved):
        upstream leaves it there silently; kopflet leaves it too, but not silently."""
        if self.memory_reserved is not None:
            return
        for klass in (qos.BURSTABLE, qos.BEST_EFFORT):
            name = self.layout.qos_cgroup(klass)
            limit = await asyncio.to_thread(self.cgroups.memory_limit, name)
            # unlimited reads as -1 ("max", v2) or PAGE_COUNTER_MAX pages (v1), above 2^62 whatever the page size
            if limit is not None and 0 <= limit < 1 << 62:
                logger.warning(f"the QoS cgroup {name} has a memory limit of {limit} bytes, left by an earlier "
                               f"qosReserved: without the QOSReserved gate and qosReserved memory it is not updated "
                               f"(nor removed, as upstream); write -1 (cgroup v1) or max (v2) to its memory limit to "
                               f"remove it")

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


__all__ = ["ENFORCE_RETRY_PERIOD", "QOS_UPDATE_PERIOD", "CgroupConfigError", "ContainerManager", "KernelTunables",
           "KernelTunablesError", "running_in_user_namespace"]
