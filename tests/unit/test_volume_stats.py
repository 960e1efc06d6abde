"""
Per-pod volume stats in ``/stats/summary`` (upstream pkg/kubelet/server/stats/volume_stat_calculator.go and
pkg/kubelet/stats/helper.go calcEphemeralStorage): the pure parts table-driven, the collector's measurement
against a real temporary directory (real files, real statvfs).
"""

from __future__ import annotations

import textwrap

import pytest

from cri_client import types as cri
from kopflet.stats import summary

# --------------------------------------------------------------------------------------- mount_fstype

POD_VOLUMES = "/var/lib/kubelet/pods/uid-1/volumes"
MOUNTINFO = textwrap.dedent(rf"""
    22 1 253:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
    50 22 0:40 / {POD_VOLUMES}/kubernetes.io~empty-dir/shm rw,relatime shared:30 - tmpfs tmpfs rw,size=65536k
    51 22 0:41 / {POD_VOLUMES}/kubernetes.io~secret/token rw,relatime shared:31 - tmpfs tmpfs rw
    52 22 253:5 / {POD_VOLUMES}/kubernetes.io~empty-dir/over rw shared:32 - tmpfs tmpfs rw
    53 52 253:6 / {POD_VOLUMES}/kubernetes.io~empty-dir/over rw shared:33 - xfs /dev/vde rw
    54 22 0:42 / /mnt/with\040space rw - tmpfs tmpfs rw
    55 22 0:43 / /short rw
""")
FSTYPE_CASES = {
    "tmpfs-on-the-volume-itself": (f"{POD_VOLUMES}/kubernetes.io~empty-dir/shm", "tmpfs"),
    "secret-tmpfs": (f"{POD_VOLUMES}/kubernetes.io~secret/token", "tmpfs"),
    "inside-a-mount-is-not-a-mount-point": (f"{POD_VOLUMES}/kubernetes.io~empty-dir/shm/sub", ""),
    "disk-volume-on-the-root": (f"{POD_VOLUMES}/kubernetes.io~empty-dir/scratch", ""),
    "overmount-last-wins": (f"{POD_VOLUMES}/kubernetes.io~empty-dir/over", "xfs"),
    "escaped-space": ("/mnt/with space", "tmpfs"),
    "malformed-line-skipped": ("/short", ""),
    "root": ("/", "ext4"),
}


@pytest.mark.parametrize(("path", "fstype"), FSTYPE_CASES.values(), ids=FSTYPE_CASES.keys())
def test_mount_fstype(path: str, fstype: str) -> None:
    assert summary.mount_fstype(MOUNTINFO, path) == fstype


def test_mount_fstype_without_mounts() -> None:
    assert summary.mount_fstype("", "/") == ""


def test_mount_source_reads_the_same_lines() -> None:
    assert summary.mount_source(MOUNTINFO, f"{POD_VOLUMES}/kubernetes.io~empty-dir/over/x") == "/dev/vde"
    assert summary.mount_source(MOUNTINFO, "/mnt/with space/x") == "tmpfs"


# ---------------------------------------------------------------------------------- is_local_ephemeral

# upstream volume/util IsLocalEphemeralVolume, by the volume's type and (for an emptyDir) its medium.
EPHEMERAL_CASES = {
    "disk-empty-dir": ("emptyDir", "", True),
    "memory-empty-dir": ("emptyDir", "Memory", False),
    "config-map": ("configMap", "", True),
    "git-repo": ("gitRepo", "", True),
    "secret": ("secret", "", False),
    "downward-api": ("downwardAPI", "", False),
    "projected": ("projected", "", False),
    "host-path": ("hostPath", "", False),
}


@pytest.mark.parametrize(("kind", "medium", "expected"), EPHEMERAL_CASES.values(), ids=EPHEMERAL_CASES.keys())
def test_is_local_ephemeral(kind: str, medium: str, expected: bool) -> None:
    assert summary.is_local_ephemeral(kind, medium) is expected
    fs = summary.FsInfo(capacity_bytes=1)
    sample = summary.VolumeSample(kind=kind, medium=medium, usage=cri.FilesystemUsage(used_bytes=1), fs=fs)
    assert sample.local_ephemeral is expected
