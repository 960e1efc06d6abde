"""kopflet.cm.cgroups' writes on temporary cgroup v1 and v2 trees, with a model of the kernel's refusals: the CFS
period retried after the quota (libcontainer CpuGroup.Set), v1's busy memory limit (fs.setMemory) and
libcontainer's error texts (cgroups.WriteFile)."""

from __future__ import annotations

import errno
from fractions import Fraction
from pathlib import Path

import pytest

from kopflet.cm import cgroups, helpers
from kopflet.cm.cgroups import CgroupError, PodCgroups

POD = "/kubepods/burstable/podu"


def _read_cfs(directory: Path) -> tuple[int, int]:
    return int((directory / "cpu.cfs_quota_us").read_text()), int((directory / "cpu.cfs_period_us").read_text())


def _ratio(quota: int, period: int) -> Fraction | None:
    return None if quota < 0 else Fraction(quota, period)


class V1Kernel:
    """cgroup v1's CFS bandwidth check (kernel tg_cfs_schedulable_down): a cgroup's quota/period may not exceed
    its parent's, nor fall below a child's (an unlimited one inherits its parent's). A write that breaks it is
    EINVAL; every write is logged (file, value, accepted)."""

    def __init__(self, cpu_root: Path) -> None:
        self.cpu_root = cpu_root
        self.log: list[tuple[str, str, bool]] = []

    def _limit(self, directory: Path) -> Fraction | None:
        """The effective ratio: its own, else inherited."""
        own = _ratio(*_read_cfs(directory))
        if own is not None or directory == self.cpu_root:
            return own
        return self._limit(directory.parent)

    def write(self, path: Path, value: str) -> None:
        if path.name in (cgroups.CFS_QUOTA, cgroups.CFS_PERIOD):
            quota, period = _read_cfs(path.parent)
            quota, period = (int(value), period) if path.name == cgroups.CFS_QUOTA else (quota, int(value))
            new = _ratio(quota, period)
            parent = self._limit(path.parent.parent) if path.parent != self.cpu_root else None
            effective = new if new is not None else parent
            children = [_ratio(*_read_cfs(child)) for child in path.parent.iterdir() if child.is_dir()]
            if (new is not None and parent is not None and new > parent) or (
                    effective is not None and any(c is not None and c > effective for c in children)):
                self.log.append((path.name, value, False))
                raise OSError(errno.EINVAL, "Invalid argument")
        self.log.append((path.name, value, True))
        path.write_text(value)


def _cfs_cgroup(directory: Path, quota: int, period: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cpu.shares").write_text("1024")
    (directory / "cpu.cfs_quota_us").write_text(str(quota))
    (directory / "cpu.cfs_period_us").write_text(str(period))


def _v1(tmp_path: Path, pod: tuple[int, int], child: tuple[int, int],
        monkeypatch: pytest.MonkeyPatch) -> tuple[PodCgroups, V1Kernel, Path]:
    root = tmp_path / "cgroup"
    (root / "memory").mkdir(parents=True)
    _cfs_cgroup(root / "cpu", -1, 100000)
    for tier in ("kubepods", "kubepods/burstable"):
        _cfs_cgroup(root / "cpu" / tier, -1, 100000)
    pod_dir = root / "cpu" / POD.strip("/")
    _cfs_cgroup(pod_dir, *pod)
    _cfs_cgroup(pod_dir / "container", *child)
    kernel = V1Kernel(root / "cpu")
    monkeypatch.setattr(cgroups, "write_file", kernel.write)
    return PodCgroups(str(root), v2=False), kernel, pod_dir


# A container at 200m (20000 / 100000) in the pod cgroup.
CHILD = (20000, 100000)


@pytest.mark.parametrize(("pod", "config", "final", "writes", "error"), [
    # Nothing refused: libcontainer's order, shares, period, quota.
    ((20000, 100000), helpers.ResourceConfig(cpu_shares=307, cpu_quota=30000, cpu_period=100000), (30000, 100000),
     [("cpu.shares", "307", True), ("cpu.cfs_period_us", "100000", True), ("cpu.cfs_quota_us", "30000", True)], ""),
    # The period first would leave 10000 / 100000 below the container's 0.2: refused, retried after the quota.
    ((10000, 50000), helpers.ResourceConfig(cpu_quota=30000, cpu_period=100000), (30000, 100000),
     [("cpu.cfs_period_us", "100000", False), ("cpu.cfs_quota_us", "30000", True),
      ("cpu.cfs_period_us", "100000", True)], ""),
    # The same period alone: no quota to write, the refusal stands.
    ((10000, 50000), helpers.ResourceConfig(cpu_period=100000), (10000, 50000),
     [("cpu.cfs_period_us", "100000", False)], 'failed to write "100000": write {pod}/cpu.cfs_period_us: '
                                               "invalid argument"),
    # Retried, and refused again (15000 / 100000 is still below the container's 0.2): the second refusal is the
    # error, the quota stays written.
    ((10000, 50000), helpers.ResourceConfig(cpu_quota=15000, cpu_period=100000), (15000, 50000),
     [("cpu.cfs_period_us", "100000", False), ("cpu.cfs_quota_us", "15000", True),
      ("cpu.cfs_period_us", "100000", False)],
     'failed to write "100000": write {pod}/cpu.cfs_period_us: invalid argument'),
    # A quota refused outright is not retried.
    ((20000, 100000), helpers.ResourceConfig(cpu_quota=10000, cpu_period=100000), (20000, 100000),
     [("cpu.cfs_period_us", "100000", True), ("cpu.cfs_quota_us", "10000", False)],
     'failed to write "10000": write {pod}/cpu.cfs_quota_us: invalid argument'),
    # Unlimited (-1) is a quota too: the refused period is written again after it.
    ((10000, 50000), helpers.ResourceConfig(cpu_quota=-1, cpu_period=100000), (-1, 100000),
     [("cpu.cfs_period_us", "100000", False), ("cpu.cfs_quota_us", "-1", True),
      ("cpu.cfs_period_us", "100000", True)], ""),
])
def test_a_refused_cfs_period_is_written_again_after_the_quota(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pod: tuple[int, int], config: helpers.ResourceConfig,
        final: tuple[int, int], writes: list[tuple[str, str, bool]], error: str) -> None:
    """libcontainer fs CpuGroup.Set: EINVAL on cpu.cfs_period_us is let go when a quota follows, and the period is
    written again after it."""
    manager, kernel, pod_dir = _v1(tmp_path, pod, CHILD, monkeypatch)
    if error:
        with pytest.raises(CgroupError) as caught:
            manager.apply(POD, config)
        assert str(caught.value) == error.format(pod=pod_dir)
    else:
        manager.apply(POD, config)
    assert kernel.log == writes
    assert _read_cfs(pod_dir) == final


def test_v2_writes_quota_and_period_in_one_cpu_max_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """fs2 setCPU: "<quota|max> <period>" in one write, so no order between them can be refused."""
    root = tmp_path / "cgroup"
    pod_dir = root / POD.strip("/")
    pod_dir.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    for name in ("cpu.max", "cpu.weight", "memory.max"):
        (pod_dir / name).write_text("")
    log: list[tuple[str, str]] = []

    def write(path: Path, value: str) -> None:
        log.append((path.name, value))
        path.write_text(value)

    monkeypatch.setattr(cgroups, "write_file", write)
    PodCgroups(str(root), v2=True).apply(POD, helpers.ResourceConfig(cpu_quota=-1, cpu_period=50000))
    PodCgroups(str(root), v2=True).apply(POD, helpers.ResourceConfig(cpu_quota=30000, cpu_period=100000))
    assert log == [("cpu.max", "max 50000"), ("cpu.max", "30000 100000")]


def _memory_cgroup(tmp_path: Path, usage: str | None) -> tuple[PodCgroups, Path]:
    root = tmp_path / "cgroup"
    (root / "cpu").mkdir(parents=True)
    directory = root / "memory" / POD.strip("/")
    directory.mkdir(parents=True)
    (directory / "memory.limit_in_bytes").write_text("134217728")
    if usage is not None:
        (directory / "memory.usage_in_bytes").write_text(f"{usage}\n")
        (directory / "memory.max_usage_in_bytes").write_text("90000000\n")
    return PodCgroups(str(root), v2=False), directory


@pytest.mark.parametrize(("errno_", "usage", "message"), [
    # The kernel could not reclaim below the new limit: fs.setMemory's text, with the usage read then.
    (errno.EBUSY, "83886080", "unable to set memory limit to 67108864 (current usage: 83886080, peak usage: "
                              "90000000)"),
    # The usage unreadable: the write's own error (cgroups.WriteFile).
    (errno.EBUSY, None, 'failed to write "67108864": write {dir}/memory.limit_in_bytes: device or resource busy'),
    (errno.EACCES, "1", 'failed to write "67108864": write {dir}/memory.limit_in_bytes: permission denied'),
])
def test_a_refused_memory_limit_is_worded_as_libcontainer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          errno_: int, usage: str | None, message: str) -> None:
    manager, directory = _memory_cgroup(tmp_path, usage)

    def refuse(path: Path, value: str) -> None:
        raise OSError(errno_, "refused")

    monkeypatch.setattr(cgroups, "write_file", refuse)
    with pytest.raises(CgroupError) as caught:
        manager.apply(POD, helpers.ResourceConfig(memory=64 * 2**20))
    assert str(caught.value) == message.format(dir=directory)
    assert (directory / "memory.limit_in_bytes").read_text() == "134217728"
