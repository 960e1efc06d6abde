"""kopflet.volumes.manager's tmpfs: mount(2) itself, as ``mount -t tmpfs [-o size=N] tmpfs <dir>`` asks it, and the
mount point check upstream's IsLikelyNotMountPoint makes. Needs root (CAP_SYS_ADMIN), as the agent does."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from kopflet.volumes import manager

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting needs root")


def test_a_tmpfs_with_its_size_and_tmpfs_default_mode(tmp_path: Path) -> None:
    target = tmp_path / "vol"
    target.mkdir()
    assert not manager.is_mount_point(target)
    manager.mount_tmpfs(target, 2 * 1024 * 1024)
    try:
        assert manager.is_mount_point(target)
        with open("/proc/self/mounts") as table:
            (line,) = [fields for fields in (entry.split() for entry in table) if fields[1] == str(target)]
        assert line[0] == line[2] == "tmpfs" and "size=2048k" in line[3].split(",") and "rw" in line[3].split(",")
        assert oct(os.stat(target).st_mode & 0o7777) == "0o1777"  # upstream passes no mode: the sticky 1777
    finally:
        subprocess.run(["umount", str(target)], check=True)
    assert not manager.is_mount_point(target)


def test_a_mount_that_fails_says_where_and_why(tmp_path: Path) -> None:
    with pytest.raises(OSError, match=f"mount tmpfs at {tmp_path}/missing: No such file or directory"):
        manager.mount_tmpfs(tmp_path / "missing", None)


def test_unmount_all_takes_every_mount_below_deepest_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """umount(2) for each mount below the folder, the nested one first (no umount(8) needed); none is left and the
    folders stay."""
    outer, inner = tmp_path / "vols" / "a", tmp_path / "vols" / "a" / "nested"
    outer.mkdir(parents=True)
    manager.mount_tmpfs(outer, None)
    inner.mkdir()
    manager.mount_tmpfs(inner, None)
    try:
        with monkeypatch.context() as patched:
            patched.setattr(manager.subprocess, "run", lambda *a, **k: pytest.fail(f"umount(8) run: {a}"))
            assert manager.unmount_all(tmp_path / "vols") == []
        assert not manager.is_mount_point(outer) and outer.is_dir()
    finally:
        for target in (inner, outer):
            subprocess.run(["umount", str(target)], capture_output=True)


def test_unmount_of_what_is_not_mounted_changes_nothing(tmp_path: Path) -> None:
    manager.unmount(str(tmp_path))  # the kernel refuses (EINVAL), and umount(8) says so: nothing raised
    assert tmp_path.is_dir() and not manager.is_mount_point(tmp_path)
