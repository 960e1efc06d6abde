"""
Per-pod volume stats in ``/stats/summary`` (upstream pkg/kubelet/server/stats/volume_stat_calculator.go and
pkg/kubelet/stats/helper.go calcEphemeralStorage): the pure parts table-driven, the collector's measurement
against a real temporary directory (real files, real statvfs).
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from cri_client import types as cri
from kopflet.paths import Layout
from kopflet.stats import collector, summary

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


# ------------------------------------------------------------------- summary: volume, ephemeral-storage

T0 = 1_624_396_278_302_091_597  # 2021-06-22T21:11:18.302091597Z
SECOND = 1_000_000_000
MiB = 1 << 20


def _text(ns: int) -> str:
    return summary.rfc3339(ns) or ""


ROOT = summary.FsInfo(timestamp=T0, capacity_bytes=1000 * MiB, available_bytes=600 * MiB, inodes=100_000,
                      inodes_free=70_000)
TMPFS = summary.FsInfo(timestamp=T0, capacity_bytes=64 * MiB, available_bytes=56 * MiB, inodes=4000,
                       inodes_free=3990)
ROOT_JSON = {"availableBytes": 600 * MiB, "capacityBytes": 1000 * MiB, "inodesFree": 70_000, "inodes": 100_000}


def _volume(kind: str, used: int | None, inodes: int | None, *, at: int = T0, medium: str = "",
            fs: summary.FsInfo = ROOT) -> summary.VolumeSample:
    usage = cri.FilesystemUsage(mountpoint="/v", timestamp=at, used_bytes=used, inodes_used=inodes)
    return summary.VolumeSample(kind=kind, medium=medium, usage=usage, fs=fs)


SCRATCH = _volume("emptyDir", 8 * MiB, 3, at=T0 + 20 * SECOND)  # measured last: the newest time
SHM = _volume("emptyDir", 2 * MiB, 2, medium="Memory", fs=TMPFS)
CONF = _volume("configMap", 12288, 5)
TOKEN = _volume("secret", 8192, 4, fs=TMPFS)
INFO = _volume("downwardAPI", 4096, 3, fs=TMPFS)
BUNDLE = _volume("projected", 4096, 3, fs=TMPFS)
BLANK = _volume("emptyDir", None, None, fs=summary.FsInfo(timestamp=T0, capacity_bytes=10, available_bytes=5))


def _volume_json(name: str, volume: summary.VolumeSample) -> dict[str, object]:
    fs = volume.fs
    return {"time": _text(volume.usage.timestamp), "availableBytes": fs.available_bytes,
            "capacityBytes": fs.capacity_bytes, "usedBytes": volume.usage.used_bytes,
            "inodesFree": fs.inodes_free, "inodes": fs.inodes, "inodesUsed": volume.usage.inodes_used, "name": name}


LAYER = cri.FilesystemUsage(mountpoint="/images", timestamp=T0, used_bytes=1 * MiB, inodes_used=10)
LOGS = cri.FilesystemUsage(timestamp=T0, used_bytes=4096, inodes_used=2)
POD_LOGS = cri.FilesystemUsage(timestamp=T0 + 30 * SECOND, used_bytes=8192, inodes_used=1)
ETC_HOSTS = cri.FilesystemUsage(timestamp=T0, used_bytes=4096, inodes_used=1)
BASE_USED, BASE_INODES = 1 * MiB + 4096, 12  # the writable layer and the container's logs

# id: (volumes, pod log files, etc-hosts, the "volume" list expected, the ephemeral-storage used bytes, inodes
# used and time expected)
SUMMARY_CASES = {
    "no-volumes-no-list": ({}, None, None, None, BASE_USED, BASE_INODES, T0),
    "disk-empty-dir-counts-and-its-time": (
        {"scratch": SCRATCH}, None, None, [_volume_json("scratch", SCRATCH)],
        BASE_USED + 8 * MiB, BASE_INODES + 3, T0 + 20 * SECOND),
    "memory-empty-dir-listed-not-counted": (
        {"shm": SHM}, None, None, [_volume_json("shm", SHM)], BASE_USED, BASE_INODES, T0),
    "config-map-counted": (
        {"conf": CONF}, None, None, [_volume_json("conf", CONF)], BASE_USED + 12288, BASE_INODES + 5, T0),
    "tmpfs-volumes-listed-not-counted": (
        {"token": TOKEN, "info": INFO, "bundle": BUNDLE}, None, None,
        [_volume_json("bundle", BUNDLE), _volume_json("info", INFO), _volume_json("token", TOKEN)],
        BASE_USED, BASE_INODES, T0),
    "local-ephemeral-first-then-the-others": (
        {"token": TOKEN, "shm": SHM, "scratch": SCRATCH, "conf": CONF}, None, None,
        [_volume_json("conf", CONF), _volume_json("scratch", SCRATCH), _volume_json("shm", SHM),
         _volume_json("token", TOKEN)],
        BASE_USED + 8 * MiB + 12288, BASE_INODES + 3 + 5, T0 + 20 * SECOND),
    "pod-log-files-and-etc-hosts-counted": (
        {}, POD_LOGS, ETC_HOSTS, None, BASE_USED + 8192 + 4096, BASE_INODES + 2, T0 + 30 * SECOND),
    "unknown-numbers-are-zero-in-the-list-and-add-nothing": (
        {"blank": BLANK}, None, None,
        [{"time": _text(T0), "availableBytes": 5, "capacityBytes": 10, "usedBytes": 0, "inodesFree": 0,
          "inodes": 0, "inodesUsed": 0, "name": "blank"}],
        BASE_USED, BASE_INODES, T0),
}


def _pod(volumes: dict[str, summary.VolumeSample], pod_logs: cri.FilesystemUsage | None,
         etc_hosts: cri.FilesystemUsage | None) -> summary.PodSample:
    stats = cri.ContainerStats(id="c-1", writable_layer=LAYER)
    app = summary.ContainerSample(name="app", start_time=T0, stats=stats, logs=LOGS)
    return summary.PodSample(name="web", namespace="default", uid="uid-web", start_time=T0, containers=(app,),
                             volumes=volumes, pod_logs=pod_logs, etc_hosts=etc_hosts)


@pytest.mark.parametrize(("volumes", "pod_logs", "etc_hosts", "listed", "used", "inodes_used", "at"),
                         SUMMARY_CASES.values(), ids=SUMMARY_CASES.keys())
def test_summary_volumes_and_ephemeral_storage(
        volumes: dict[str, summary.VolumeSample], pod_logs: cri.FilesystemUsage | None,
        etc_hosts: cri.FilesystemUsage | None, listed: list[dict[str, object]] | None, used: int, inodes_used: int,
        at: int) -> None:
    node = summary.NodeSample(node_name="node-1", root_fs=ROOT)
    snapshot = summary.StatsSnapshot(timestamp=T0 + 60 * SECOND, node=node, pods=(_pod(volumes, pod_logs, etc_hosts),),
                                     filesystems={"/images": ROOT})
    (pod,) = summary.summary(snapshot)["pods"]
    assert pod.get("volume") == listed
    assert pod["ephemeral-storage"] == {"time": _text(at), **ROOT_JSON, "usedBytes": used, "inodesUsed": inodes_used}
    if listed:  # the Go struct's order: network, volume, ephemeral-storage
        assert list(pod).index("volume") + 1 == list(pod).index("ephemeral-storage")


def test_eviction_usage_passes_every_volume_on() -> None:
    """The eviction manager filters by the spec (localVolumeNames, IsLocalEphemeralVolume, sizeLimit) itself."""
    usage = summary.eviction_usage(_pod({"scratch": SCRATCH, "shm": SHM, "token": TOKEN}, None, None))
    assert {name: (v.used_bytes, v.inodes_used) for name, v in usage.volumes.items()} == {
        "scratch": (8 * MiB, 3), "shm": (2 * MiB, 2), "token": (8192, 4)}


# ------------------------------------------------------- the collector's measurement, on a real directory


def _write(path: Path, size: int) -> None:
    """A file of `size` bytes on disk (fsynced: its blocks are allocated when du looks)."""
    with path.open("wb") as f:
        f.write(b"k" * size)
        f.flush()
        os.fsync(f.fileno())


def _pod_tree(root: Path, uid: str) -> Path:
    """A pod's volumes directory as the volume manager lays it out, with data in each volume."""
    volumes = root / "pods" / uid / "volumes"
    for plugin, name, size in (("kubernetes.io~empty-dir", "scratch", 3 * MiB), ("kubernetes.io~empty-dir", "shm", 0),
                               ("kubernetes.io~configmap", "conf", 100), ("kubernetes.io~secret", "token", 900),
                               ("kubernetes.io~projected", "kube-api-access", 1200),
                               ("kubernetes.io~downward-api", "info", 10)):
        (volumes / plugin / name).mkdir(parents=True)
        _write(volumes / plugin / name / "data", size)
    (volumes / "kubernetes.io~empty-dir" / "stray-file").write_text("not a volume\n")
    (volumes / "kubernetes.io~empty-dir" / "link").symlink_to(volumes / "kubernetes.io~configmap" / "conf")
    (volumes / "kubernetes.io~unknown-plugin" / "other").mkdir(parents=True)  # no MetricsDu: not measured
    return volumes


def _blocks(*paths: Path) -> int:
    return sum(p.lstat().st_blocks * 512 for p in paths)


def test_pod_volumes_on_a_real_directory(tmp_path: Path) -> None:
    volumes = _pod_tree(tmp_path, "u1")
    real_mountinfo = Path("/proc/self/mountinfo").read_text()  # the test directory holds no mount points
    found = collector.pod_volumes(Layout(str(tmp_path)), "u1", real_mountinfo)
    assert {name: (v.kind, v.medium, v.local_ephemeral) for name, v in found.items()} == {
        "scratch": ("emptyDir", "", True), "shm": ("emptyDir", "", True), "conf": ("configMap", "", True),
        "token": ("secret", "", False), "kube-api-access": ("projected", "", False),
        "info": ("downwardAPI", "", False)}
    scratch = volumes / "kubernetes.io~empty-dir" / "scratch"
    usage = found["scratch"].usage
    assert usage.used_bytes == _blocks(scratch, scratch / "data") and usage.used_bytes >= 3 * MiB
    assert usage.inodes_used == 2 and usage.mountpoint == str(scratch) and usage.timestamp > 0
    # Capacity and inodes are the filesystem's (statfs of the volume's directory), as upstream's MetricsDu.
    st = os.statvfs(scratch)
    size = found["scratch"].fs
    assert (size.capacity_bytes, size.inodes) == (st.f_blocks * st.f_frsize, st.f_files)
    assert 0 < size.available_bytes <= size.capacity_bytes and size.inodes_free is not None
    assert collector.pod_volumes(Layout(str(tmp_path)), "nobody", real_mountinfo) == {}


def test_a_tmpfs_mounted_on_an_empty_dir_is_the_memory_medium(tmp_path: Path) -> None:
    volumes = _pod_tree(tmp_path, "u1")
    shm = os.path.realpath(volumes / "kubernetes.io~empty-dir" / "shm")
    token = os.path.realpath(volumes / "kubernetes.io~secret" / "token")
    mountinfo = (f"22 1 253:1 / / rw - ext4 /dev/vda1 rw\n"
                 f"50 22 0:40 / {shm} rw - tmpfs tmpfs rw,size=65536k\n"
                 f"51 22 0:41 / {token} rw - tmpfs tmpfs rw\n")
    found = collector.pod_volumes(Layout(str(tmp_path)), "u1", mountinfo)
    assert (found["shm"].medium, found["shm"].local_ephemeral) == ("Memory", False)
    assert (found["scratch"].medium, found["token"].medium) == ("", "")  # a medium is an emptyDir's only


def test_measure_volume_of_a_missing_directory(tmp_path: Path) -> None:
    assert collector.measure_volume(str(tmp_path / "gone"), "emptyDir", "") is None
