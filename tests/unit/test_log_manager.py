"""kopflet.logs.manager on real temporary files against a fake CRI: rotation rounds as upstream
containerLogManager does them, gzip compression, and the /var/log/containers symlinks."""

from __future__ import annotations

import asyncio
import datetime as dt
import gzip
import os
from pathlib import Path
from typing import Any

import pytest

from cri_client import CriError
from cri_client import types as cri
from kopflet.logs import manager as log_manager
from kopflet.logs.cri_logs import LogOptions
from kopflet.logs.manager import (
    ContainerLogManager,
    compress_log,
    create_container_symlink,
    remove_container_symlink,
    scan_log_files,
    sweep_dangling_symlinks,
)
from kopflet.logs.reader import write_container_logs
from kopflet.logs.rotation import LogRotatePolicy, container_log_symlink

NOW = dt.datetime(2024, 5, 6, 7, 8, 9)
STAMP = "20240506-070809"


class FakeContainers:
    """Containers with a log path each; ReopenContainerLog creates the live file as containerd does."""

    def __init__(self) -> None:
        self.logs: dict[str, str] = {}
        self.states: dict[str, cri.ContainerState] = {}
        self.reopened: list[str] = []
        self.reopen_error: CriError | None = None
        self.list_error: CriError | None = None
        self.status_delay = 0.0
        self.active = self.peak = 0

    async def list(self, filter: cri.ContainerFilter | None = None) -> list[cri.Container]:
        if self.list_error is not None:
            error, self.list_error = self.list_error, None
            raise error
        return [cri.Container(id=cid, state=state) for cid, state in self.states.items()
                if filter is None or filter.state is None or state == filter.state]

    async def status(self, container_id: str) -> cri.ContainerStatus:
        if container_id not in self.states:
            raise CriError("NOT_FOUND", f"container {container_id} not found")
        self.active += 1
        self.peak = max(self.peak, self.active)
        await asyncio.sleep(self.status_delay)
        self.active -= 1
        return cri.ContainerStatus(id=container_id, state=self.states[container_id],
                                   log_path=self.logs.get(container_id, ""))

    async def reopen_log(self, container_id: str) -> None:
        if self.reopen_error is not None:
            raise self.reopen_error
        self.reopened.append(container_id)
        touch(self.logs[container_id])


def touch(path: str) -> None:
    Path(path).touch()


def files_under(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob("*") if p.is_file())


def read(path: str) -> bytes:
    return Path(path).read_bytes()


class FakeCri:
    def __init__(self) -> None:
        self.containers = FakeContainers()


def add(fake: FakeCri, tmp_path: Path, cid: str, content: bytes | None = b"x" * 200,
        state: cri.ContainerState = cri.ContainerState.RUNNING) -> Path:
    log = tmp_path / cid / "0.log"
    log.parent.mkdir(exist_ok=True)
    if content is not None:
        log.write_bytes(content)
    fake.containers.logs[cid], fake.containers.states[cid] = str(log), state
    return log


def make(fake: FakeCri, **kwargs: Any) -> ContainerLogManager:
    kwargs.setdefault("policy", LogRotatePolicy(max_size=100, max_files=3))
    return ContainerLogManager(fake, clock=lambda: NOW, **kwargs)  # type: ignore[arg-type]


async def test_a_round_rotates_compresses_and_trims_a_running_containers_log(tmp_path: Path) -> None:
    fake = FakeCri()
    log = add(fake, tmp_path, "c1", b"live\n" * 40)
    (tmp_path / "c1" / "0.log.20240101-000001.gz").write_bytes(b"oldest")
    (tmp_path / "c1" / "0.log.20240101-000002").write_bytes(b"previous\n")
    (tmp_path / "c1" / "0.log.20240101-000002.gz.tmp").write_bytes(b"half")
    (tmp_path / "c1" / "1.log").write_bytes(b"x" * 500)  # another instance's log: not this one's
    await make(fake).rotate_logs()
    assert fake.containers.reopened == ["c1"]
    assert sorted(scan_log_files(str(log))) == ["0.log", "0.log.20240101-000002.gz", f"0.log.{STAMP}"]
    assert log.read_bytes() == b""  # the runtime's new file
    assert (tmp_path / "c1" / f"0.log.{STAMP}").read_bytes() == b"live\n" * 40
    assert gzip.decompress((tmp_path / "c1" / "0.log.20240101-000002.gz").read_bytes()) == b"previous\n"
    assert (tmp_path / "c1" / "1.log").exists()


async def test_small_logs_and_stopped_containers_are_left_alone(tmp_path: Path) -> None:
    fake = FakeCri()
    small = add(fake, tmp_path, "small", b"x" * 99)
    add(fake, tmp_path, "exited", b"x" * 500, state=cri.ContainerState.EXITED)
    await make(fake).rotate_logs()
    assert fake.containers.reopened == []
    assert files_under(tmp_path) == ["0.log", "0.log"]
    assert small.read_bytes() == b"x" * 99


async def test_a_failed_reopen_renames_the_log_back(tmp_path: Path) -> None:
    fake = FakeCri()
    log = add(fake, tmp_path, "c1")
    fake.containers.reopen_error = CriError("UNKNOWN", "container is not running")
    await make(fake).rotate_logs()  # logged, not raised
    assert sorted(scan_log_files(str(log))) == ["0.log"]
    assert log.read_bytes() == b"x" * 200


async def test_a_missing_live_log_is_reopened_then_looked_at_again(tmp_path: Path) -> None:
    fake = FakeCri()
    log = add(fake, tmp_path, "c1", content=None)
    await make(fake).rotate_logs()
    assert fake.containers.reopened == ["c1"]  # once: the new file is empty, nothing to rotate
    assert log.exists()


async def test_status_errors_and_containers_without_a_log_path_are_skipped(tmp_path: Path) -> None:
    fake = FakeCri()
    add(fake, tmp_path, "c1")
    fake.containers.logs["c1"] = ""
    manager = make(fake)
    await manager.rotate_logs()
    await manager.process_container("gone")  # NOT_FOUND: logged
    assert fake.containers.reopened == []


async def test_disabled_policy_rotates_nothing_and_run_returns(tmp_path: Path) -> None:
    fake = FakeCri()
    add(fake, tmp_path, "c1", b"x" * 10**4)
    await asyncio.wait_for(make(fake, policy=LogRotatePolicy(max_size=-1)).run(), 1)
    assert fake.containers.reopened == []


async def test_at_most_max_workers_containers_at_a_time(tmp_path: Path) -> None:
    fake = FakeCri()
    for i in range(6):
        add(fake, tmp_path, f"c{i}", b"x")
    fake.containers.status_delay = 0.02
    await make(fake, max_workers=2).rotate_logs()
    assert fake.containers.peak == 2
    fake.containers.peak = 0
    await make(fake).rotate_logs()
    assert fake.containers.peak == 1  # upstream's default: one worker


def test_max_workers_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="containerLogMaxWorkers must be greater than or equal to 1"):
        ContainerLogManager(FakeCri(), max_workers=0)  # type: ignore[arg-type]


async def test_the_loop_outlives_a_failed_round(tmp_path: Path) -> None:
    fake = FakeCri()
    add(fake, tmp_path, "c1")
    fake.containers.list_error = CriError("UNAVAILABLE", "runtime down")
    task = asyncio.create_task(make(fake, monitor_interval=0.01).run())
    for _ in range(200):
        if fake.containers.reopened:
            break
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert fake.containers.reopened[:1] == ["c1"]


# --------------------------------------------------------------------------------------------- compression


def test_compress_log_gzips_through_a_tmp_file_and_removes_the_original(tmp_path: Path) -> None:
    log = tmp_path / "0.log.20240101-000001"
    log.write_bytes(b"line\n" * 1000)
    log.chmod(0o640)
    compress_log(str(log))
    compressed = tmp_path / "0.log.20240101-000001.gz"
    assert sorted(p.name for p in tmp_path.iterdir()) == [compressed.name]
    assert gzip.decompress(compressed.read_bytes()) == b"line\n" * 1000
    assert compressed.stat().st_mode & 0o777 == 0o640


def test_a_failed_compression_leaves_the_original_and_no_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "0.log.1"
    log.write_bytes(b"data")

    def broken(src: Any, dst: Any, length: int = 0) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(log_manager.shutil, "copyfileobj", broken)
    with pytest.raises(OSError, match="No space"):
        compress_log(str(log))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0.log.1"]


# ------------------------------------------------------------------------------------------------ symlinks

CID = "0123456789abcdef" * 4


async def test_the_symlink_points_at_the_log_and_is_removed_with_the_container(tmp_path: Path) -> None:
    links = tmp_path / "containers"
    log = tmp_path / "pods" / "ns_web_uid" / "app" / "0.log"
    log.parent.mkdir(parents=True)
    log.write_bytes(b"hello\n")
    link = await create_container_symlink(str(links), "web", "ns", "app", CID, str(log))
    assert link == container_log_symlink(str(links), "web", "ns", "app", CID) == f"{links}/web_ns_app-{CID}.log"
    assert os.readlink(link) == str(log)
    assert read(link) == b"hello\n"
    await remove_container_symlink(str(links), "web", "ns", "app", CID)
    assert link not in {str(p) for p in links.iterdir()}
    await remove_container_symlink(str(links), "web", "ns", "app", CID)  # already gone: fine


async def test_no_symlink_to_a_log_that_does_not_exist_and_failures_do_not_raise(tmp_path: Path) -> None:
    links = tmp_path / "containers"
    assert await create_container_symlink(str(links), "web", "ns", "app", CID, str(tmp_path / "none.log")) is None
    assert not links.exists()
    log = tmp_path / "0.log"
    log.touch()
    assert await create_container_symlink(str(links), "web", "ns", "app", CID, str(log)) is not None
    assert await create_container_symlink(str(links), "web", "ns", "app", CID, str(log)) is None  # exists: logged


async def test_sweep_removes_dangling_links_of_exited_or_unknown_containers_only(tmp_path: Path) -> None:
    fake = FakeCri()
    links = tmp_path / "containers"
    links.mkdir()
    live = tmp_path / "live.log"
    live.touch()

    def link(name: str, target: Path) -> Path:
        path = links / name
        path.symlink_to(target)
        return path

    healthy = link(f"p_ns_a-{'a' * 64}.log", live)
    exited = link(f"p_ns_b-{'b' * 64}.log", tmp_path / "gone-b")
    rotating = link(f"p_ns_c-{'c' * 64}.log", tmp_path / "gone-c")
    unknown = link(f"p_ns_d-{'d' * 64}.log", tmp_path / "gone-d")
    no_id = link("p_ns_e-abc.log", tmp_path / "gone-e")
    other = link("p_ns_f.txt", tmp_path / "gone-f")
    fake.containers.states = {"b" * 64: cri.ContainerState.EXITED, "c" * 64: cri.ContainerState.RUNNING}
    assert await sweep_dangling_symlinks(fake, str(links)) == 3  # type: ignore[arg-type]
    remaining = {p.name for p in links.iterdir()}
    assert remaining == {healthy.name, rotating.name, other.name}
    assert not {exited.name, unknown.name, no_id.name} & remaining
    assert await sweep_dangling_symlinks(fake, str(tmp_path / "missing")) == 0  # type: ignore[arg-type]


async def test_run_makes_the_symlink_directory_and_sweeps_it(tmp_path: Path) -> None:
    fake = FakeCri()
    links = tmp_path / "var" / "log" / "containers"
    manager = make(fake, policy=LogRotatePolicy(max_size=-1), symlink_dir=str(links), gc_period=0.01)
    task = asyncio.create_task(manager.run())
    for _ in range(200):
        if links.exists():
            break
        await asyncio.sleep(0.01)
    (links / f"p_ns_c-{'c' * 64}.log").symlink_to(tmp_path / "gone")
    for _ in range(200):
        if not any(links.iterdir()):
            break
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert links.stat().st_mode & 0o777 == 0o755 & ~current_umask()
    assert not any(links.iterdir())


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ------------------------------------------------------------------------------ with `kubectl logs [-f]`


def cri_lines(*contents: str) -> bytes:
    return b"".join(f"2024-05-06T07:08:09.000000000Z stdout F {c}\n".encode() for c in contents)


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as f:
        f.write(data)


async def test_a_follower_reads_on_across_the_managers_rotations(tmp_path: Path) -> None:
    """Upstream ReadLogs: the old file is finished, then the new one read from its start; a rotated log that
    is compressed later was already read. Without follow only the live file is read."""
    fake = FakeCri()
    log = add(fake, tmp_path, "c1", cri_lines(*(f"old {i}" for i in range(4))))
    clock = iter([NOW, NOW + dt.timedelta(seconds=10)])
    manager = ContainerLogManager(fake, LogRotatePolicy(max_size=100, max_files=3),  # type: ignore[arg-type]
                                  clock=lambda: next(clock))
    running, out = True, bytearray()

    async def sink(data: bytes) -> None:
        out.extend(data)

    async def is_running() -> bool:
        return running

    async def until(expected: bytes) -> None:
        for _ in range(500):
            if bytes(out) == expected:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"{bytes(out)!r} != {expected!r}")

    task = asyncio.create_task(write_container_logs(str(log), LogOptions(follow=True), sink, is_running=is_running,
                                                    poll_interval=0.01, check_interval=0.05))
    await until(b"old 0\nold 1\nold 2\nold 3\n")
    await manager.rotate_logs()
    append(log, cri_lines(*(f"new {i}" for i in range(4))))
    await until(b"old 0\nold 1\nold 2\nold 3\nnew 0\nnew 1\nnew 2\nnew 3\n")
    await manager.rotate_logs()  # the first rotated file is compressed now
    append(log, cri_lines("newest"))
    await until(b"old 0\nold 1\nold 2\nold 3\nnew 0\nnew 1\nnew 2\nnew 3\nnewest\n")
    running = False
    await asyncio.wait_for(task, 5)
    assert sorted(scan_log_files(str(log))) == ["0.log", f"0.log.{STAMP}.gz", "0.log.20240506-070819"]

    current = bytearray()

    async def collect(data: bytes) -> None:
        current.extend(data)

    await write_container_logs(str(log), LogOptions(), collect, is_running=is_running)
    assert bytes(current) == b"newest\n"
