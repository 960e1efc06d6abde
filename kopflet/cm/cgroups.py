"""Pod cgroups on the node: the I/O half of `kopflet.cm.helpers` and `kopflet.cm.cgroup_names` (upstream
pkg/kubelet/cm podContainerManager and cgroupManager).

Where the cgroups are is the `cgroup_names.CgroupLayout`'s (cgroupRoot, cgroupsPerQOS, the driver). They are always
written through cgroupfs: with the systemd driver the names are systemd's slices
(``/kubepods.slice/kubepods-burstable.slice/...``), which upstream creates through systemd's D-Bus API; the agent
refuses to start with that driver where systemd is not running (`systemd_running`), so those writes are not made
on such a host. Without cgroupsPerQOS there are no pod cgroups: the pod cgroup calls are not made.

The pod's cgroup (``/kubepods[/burstable|/besteffort]/pod<uid>`` by default) is created with its limits before the
sandbox, so the runtime nests the sandbox and the containers under it, and rewritten when an in-place resize changes the
pod's resources. cgroup v1 gets the cpu, memory and pids controllers written (runc makes the other controllers'
directories when it places the sandbox); cgroup v2 gets one directory with its controllers enabled.

Blocking file I/O: call these through ``asyncio.to_thread``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path

from kopflet import gotext
from kopflet.api import qos, spec
from kopflet.cm import cgroup_names, helpers

FS_ROOT = "/sys/fs/cgroup"
SYSTEMD_RUNTIME_DIR = "/run/systemd/system"
"""sd_booted(3): systemd is the init system when this is a directory (opencontainers/cgroups IsRunningSystemd)."""
# upstream cgroupV1impl.Validate's allowlist (hugetlb only where it is mounted) and getSupportedUnifiedControllers.
V1_VALIDATED_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "systemd", "pids", "hugetlb")
V2_VALIDATED_CONTROLLERS = frozenset({"cpu", "cpuset", "memory", "hugetlb", "pids"})


CFS_PERIOD = "cpu.cfs_period_us"
CFS_QUOTA = "cpu.cfs_quota_us"
V1_MEMORY_LIMIT = "memory.limit_in_bytes"


class CgroupError(Exception):
    """A cgroup value the kernel refused, worded as libcontainer's error (upstream's message)."""


def write_file(path: Path, value: str) -> None:
    """One cgroup file write (one write(2): the kernel takes the value or refuses it with an errno)."""
    path.write_text(value)


def _write_error(path: Path, value: str, exc: OSError) -> CgroupError:
    """libcontainer's error for a refused write: cgroups.WriteFile's ``failed to write "<value>": write <path>:
    <errno text>``; for v1's memory.limit_in_bytes refused as busy (the usage does not fit below the new limit),
    fs.setMemory's ``unable to set memory limit to <value> (current usage: <usage>, peak usage: <peak>)``."""
    if path.name == V1_MEMORY_LIMIT and exc.errno == errno.EBUSY:
        try:
            usage = int((path.parent / "memory.usage_in_bytes").read_text().strip())
            peak = int((path.parent / "memory.max_usage_in_bytes").read_text().strip())
        except (OSError, ValueError):
            pass
        else:
            return CgroupError(f"unable to set memory limit to {value} (current usage: {usage}, peak usage: {peak})")
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    return CgroupError(f"failed to write {gotext.go_quote(value)}: write {path}: {reason[:1].lower()}{reason[1:]}")


def is_cgroup2(fs_root: str = FS_ROOT) -> bool:
    return (Path(fs_root) / "cgroup.controllers").exists()


def swap_controller(fs_root: str = FS_ROOT, proc_root: str = "/proc") -> helpers.SwapController:
    """Upstream kuberuntime checkSwapControllerAvailability: on cgroup v1 the memory hierarchy's root has
    memory.memsw.limit_in_bytes (swap accounting on); on v2 this process's own cgroup (from /proc/self/cgroup: the
    root cgroup has no memory.swap.max) has memory.swap.max. Anything unreadable: none, as upstream assumes."""
    root = Path(fs_root)
    if not is_cgroup2(fs_root):
        found = (root / "memory" / helpers.CGROUP1_MEMSW_LIMIT).exists()
        return helpers.SwapController.V1 if found else helpers.SwapController.NONE
    try:
        own = helpers.unified_cgroup_path((Path(proc_root) / "self" / "cgroup").read_text())
    except OSError:
        return helpers.SwapController.NONE
    if own is None or not (root / own.lstrip("/") / helpers.CGROUP2_MAX_SWAP).exists():
        return helpers.SwapController.NONE
    return helpers.SwapController.V2


def systemd_running(runtime_dir: str = SYSTEMD_RUNTIME_DIR) -> bool:
    """opencontainers/cgroups systemd.IsRunningSystemd: /run/systemd/system is a directory (not a symlink to one)."""
    path = Path(runtime_dir)
    return path.is_dir() and not path.is_symlink()


class PodCgroups:
    """Create, update, read and remove pod cgroups under `fs_root` (``/sys/fs/cgroup``; tests pass a tree)."""

    def __init__(self, fs_root: str = FS_ROOT, *, v2: bool | None = None,
                 layout: cgroup_names.CgroupLayout = cgroup_names.DEFAULT_LAYOUT) -> None:
        self.fs_root = Path(fs_root)
        self.v2 = is_cgroup2(fs_root) if v2 is None else v2
        self.layout = layout
        self.lock = asyncio.Lock()
        """Held while a pod cgroup is looked for and made (a worker) or found orphaned and destroyed
        (housekeeping), so a pod starting meanwhile never loses the cgroup it is about to use (upstream runs both
        on the one sync loop)."""

    def pod_cgroup_parent(self, pod: spec.Pod) -> str:
        """The pod's cgroup (the sandbox's CgroupParent); "" without cgroupsPerQOS: no pod cgroup of its own."""
        return self.layout.pod_cgroup_parent(pod)

    def validate(self, name: cgroup_names.CgroupName) -> str:
        """upstream cgroupManager.Validate of `name` in the layout's driver spelling: "" when it exists in every
        hierarchy the kubelet uses (v1: cpu, cpuacct, cpuset, memory, systemd, pids, and hugetlb where mounted), or
        has every controller the kubelet uses that the root has (v2); else the error, as NewContainerManager
        words it."""
        if not name:
            return ""  # the root cgroup: every hierarchy's mountpoint, there as long as cgroups are
        literal = self.layout.literal(name).strip("/")
        if self.v2:
            def controllers(directory: Path) -> set[str]:
                return set((directory / "cgroup.controllers").read_text().split())
            try:
                available = controllers(self.fs_root)
                enabled = controllers(self.fs_root / literal)
            except OSError as exc:
                path = self.fs_root / literal / "cgroup.controllers"
                reason = os.strerror(exc.errno) if exc.errno else str(exc)
                return cgroup_names.root_unreadable_error(name, f"open {path}: {reason[:1].lower()}{reason[1:]}")
            missing = (V2_VALIDATED_CONTROLLERS & available) - enabled
            return cgroup_names.root_controllers_error(name, sorted(missing)) if missing else ""
        missing_paths = []
        for controller in V1_VALIDATED_CONTROLLERS:
            mount = self.fs_root / controller
            if not mount.is_dir():
                continue  # only the hierarchies mounted here are looked at (upstream's MountPoints)
            if not (mount / literal).exists():
                missing_paths.append(str(mount / literal) if literal else str(mount))
        return cgroup_names.root_validation_error(name, missing_paths) if missing_paths else ""

    def _dir(self, name: str, subsystem: str) -> Path:
        relative = name.strip("/")
        return self.fs_root / relative if self.v2 else self.fs_root / subsystem / relative

    def apply(self, name: str, config: helpers.ResourceConfig, *, hugepage_sizes: Sequence[str] | None = None) -> None:
        """Make the cgroup `name` (``/kubepods/burstable/pod<uid>``) exist with `config`'s values; with the node's
        `hugepage_sizes`, its hugetlb limits are written too (each size `config` leaves out as 0)."""
        files = {"": helpers.cgroup_v2_files(config, hugepage_sizes=hugepage_sizes)} if self.v2 else \
            helpers.cgroup_v1_files(config, hugepage_sizes=hugepage_sizes)
        if self.v2:
            self._ensure_v2(name)
        for subsystem, values in files.items():
            if not self.v2 and not (self.fs_root / subsystem).is_dir():
                continue  # a controller not mounted here (libcontainer skips it too): no directory in cgroupfs' tmpfs
            directory = self._dir(name, subsystem)
            directory.mkdir(parents=True, exist_ok=True)
            self._write_all(directory, values)

    def read(self, name: str) -> helpers.ResourceConfig | None:
        """The pod cgroup's cpu and memory settings as the kernel has them (upstream `GetPodCgroupConfig`), None
        when the cgroup does not exist or cannot be read."""
        try:
            if self.v2:
                directory = self._dir(name, "")
                cpu = helpers.cpu_config_from_v2((directory / "cpu.max").read_text(),
                                                 (directory / "cpu.weight").read_text())
                memory = helpers.memory_limit_from_file((directory / "memory.max").read_text())
            else:
                cpu_dir = self._dir(name, "cpu")
                cpu = helpers.cpu_config_from_v1((cpu_dir / "cpu.shares").read_text(),
                                                 (cpu_dir / "cpu.cfs_quota_us").read_text(),
                                                 (cpu_dir / "cpu.cfs_period_us").read_text())
                limit_file = self._dir(name, "memory") / "memory.limit_in_bytes"
                memory = helpers.memory_limit_from_file(limit_file.read_text())
        except (OSError, ValueError):
            return None
        return dataclasses.replace(cpu, memory=memory)

    def memory_usage(self, name: str) -> int | None:
        """The cgroup's memory usage in bytes (memory.usage_in_bytes / memory.current: upstream cgroupManager
        MemoryUsage), None if unknown."""
        path = self._dir(name, "") / "memory.current" if self.v2 else \
            self._dir(name, "memory") / "memory.usage_in_bytes"
        try:
            return int(path.read_text().strip())
        except (OSError, ValueError):
            return None

    def memory_limit(self, name: str) -> int | None:
        """The cgroup's memory limit in bytes as the kernel reads it back (memory.limit_in_bytes / memory.max:
        `helpers.memory_limit_from_file`, -1 for v2's "max"), None if unknown."""
        path = self._dir(name, "") / "memory.max" if self.v2 else \
            self._dir(name, "memory") / V1_MEMORY_LIMIT
        try:
            return helpers.memory_limit_from_file(path.read_text())
        except (OSError, ValueError):
            return None

    def exists(self, name: str) -> bool:
        return self._dir(name, "" if self.v2 else "cpu").is_dir()

    def _write_all(self, directory: Path, values: Mapping[str, str]) -> None:
        """Write `values` in their order (libcontainer's: `helpers.cgroup_v1_files`, `cgroup_v2_files`), a file
        this kernel lacks skipped.

        cgroup v1's CFS period and quota are two files the kernel checks as a pair against the parent's and the
        children's quotas: a new period may be refused (EINVAL) with the old quota and accepted with the new one.
        As libcontainer's CpuGroup.Set, such a refusal is let go when a quota is written too, and the period is
        written again after the quota. (v2's cpu.max takes both in one write.)"""
        refused_period: OSError | None = None
        for filename, value in values.items():
            path = directory / filename
            if not path.exists():
                continue  # a controller this kernel lacks (e.g. no pids): upstream skips it too
            try:
                write_file(path, value)
            except OSError as exc:
                if filename == CFS_PERIOD and exc.errno == errno.EINVAL and CFS_QUOTA in values:
                    refused_period = exc  # retried after the quota
                    continue
                raise _write_error(path, value, exc) from exc
            if filename == CFS_QUOTA and refused_period is not None:
                refused_period = None
                try:
                    write_file(directory / CFS_PERIOD, values[CFS_PERIOD])
                except OSError as exc:
                    raise _write_error(directory / CFS_PERIOD, values[CFS_PERIOD], exc) from exc
        if refused_period is not None:  # no quota file to write after all: the period's refusal stands
            raise _write_error(directory / CFS_PERIOD, values[CFS_PERIOD], refused_period) from refused_period

    def _ensure_v2(self, name: str) -> None:
        """Each ancestor enables the controllers for its children (cgroup.subtree_control), as runc's fs2 does."""
        current = self.fs_root
        wanted = {"cpu", "memory", "pids", "cpuset", "hugetlb", "io"}
        for part in [p for p in name.strip("/").split("/") if p]:
            available = set((current / "cgroup.controllers").read_text().split()) \
                if (current / "cgroup.controllers").exists() else set()
            enabled = set((current / "cgroup.subtree_control").read_text().split()) \
                if (current / "cgroup.subtree_control").exists() else set()
            for controller in sorted((wanted & available) - enabled):
                with contextlib.suppress(OSError):
                    (current / "cgroup.subtree_control").write_text(f"+{controller}")
            current = current / part
            current.mkdir(exist_ok=True)

    def _hierarchies(self) -> list[Path]:
        """Where each hierarchy's tree starts: ``fs_root`` on v2 (only: its top-level cgroups are other owners'
        trees, a container's or a nested cluster's), each mounted controller's directory on v1 (the comounted
        aliases, symlinks, skipped). Upstream: the subsystems' mount points."""
        if self.v2:
            return [self.fs_root]
        return [p for p in self.fs_root.iterdir() if p.is_dir() and not p.is_symlink()]

    def pod_cgroups(self) -> dict[str, list[str]]:
        """upstream GetAllPodsFromCgroups: the pods with a cgroup under a QoS tier in any hierarchy, each UID with
        its cgroups' literal names; nothing without cgroupsPerQOS."""
        if not self.layout.cgroups_per_qos or not self.fs_root.is_dir():
            return {}
        found: dict[str, list[str]] = {}
        tiers = [self.layout.qos_cgroup(klass) for klass in (qos.BEST_EFFORT, qos.BURSTABLE, qos.GUARANTEED)]
        for base in self._hierarchies():
            for tier in tiers:
                try:
                    entries = [e.name for e in os.scandir(base / tier.strip("/")) if e.is_dir(follow_symlinks=False)]
                except (FileNotFoundError, NotADirectoryError):
                    continue
                for entry in entries:
                    uid = self.layout.pod_uid(tier, entry)
                    name = f"{tier.rstrip('/')}/{entry}"
                    if uid is not None and name not in found.setdefault(uid, []):
                        found[uid].append(name)
        return found

    def pids(self, name: str) -> list[int]:
        """upstream cgroupManager.Pids: every process in the cgroup `name` or below it, in any hierarchy."""
        pids: set[int] = set()
        for base in self._hierarchies():
            for dirpath, _dirs, files in os.walk(base / name.strip("/")):
                if "cgroup.procs" not in files:
                    continue
                with contextlib.suppress(OSError, ValueError):
                    pids.update(int(line) for line in Path(dirpath, "cgroup.procs").read_text().split())
        return sorted(pids)

    def reduce_cpu_limits(self, name: str) -> None:
        """upstream ReduceCPULimits: the minimum cpu shares for an orphaned pod's cgroup whose volumes remain; an
        update only (upstream cgroupManager.Update): a cgroup already gone is not made again."""
        if self.exists(name):
            self.apply(name, helpers.ResourceConfig(cpu_shares=helpers.MIN_SHARES))

    def destroy(self, uid: str, names: Sequence[str]) -> None:
        """upstream podContainerManager.Destroy of an orphaned pod's cgroup: its processes killed (SIGKILL, up to
        five tries; one already gone counts as killed), then the cgroup removed. CgroupError when some survive."""
        for name in names:
            left: list[int] = []
            for _attempt in range(5):
                left = []
                for pid in self.pids(name):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    except OSError:
                        left.append(pid)
                if not left:
                    break
            if left:
                raise CgroupError(f"failed to kill all the processes attached to the {name} cgroups : {left}")
        self.remove(uid)
        busy = [str(base / name.strip("/")) for base in self._hierarchies() for name in names
                if (base / name.strip("/")).is_dir()]
        if busy:  # killed processes still exiting: the next round removes them (libcontainer retries the rmdir)
            raise CgroupError(f"failed to remove {busy}: still in use")

    def remove(self, uid: str) -> None:
        """Remove the pod's (now empty) cgroup in every hierarchy, whatever its QoS tier was (upstream
        podContainerManager.Destroy); nothing without cgroupsPerQOS (upstream skips it then)."""
        candidates = self.layout.pod_cgroup_candidates(uid)
        if not candidates or not self.fs_root.is_dir():
            return
        for base in self._hierarchies():
            for candidate in candidates:
                pod_dir = base / candidate.strip("/")
                if not pod_dir.is_dir():
                    continue
                for dirpath, _dirs, _files in sorted(os.walk(pod_dir), key=lambda w: -len(w[0])):
                    with contextlib.suppress(OSError):
                        os.rmdir(dirpath)
