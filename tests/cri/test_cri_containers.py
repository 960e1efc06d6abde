"""
Container lifecycle against the real containerd: create, start, status, stop, remove, ExecSync,
the streaming URLs, and the CRI log file the runtime writes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from datetime import datetime
from pathlib import Path

import pytest

from cri_client import CriClient, CriError, types

BUSYBOX = "docker.io/library/busybox:1.36"


# A shell that exits 7 on SIGTERM: proves the stop signal reached it and the exit code is reported.
GRACEFUL = ["sh", "-c", 'trap "exit 7" TERM; echo trapped; while true; do sleep 0.1; done']
# busybox sleep as PID 1 ignores SIGTERM: the runtime must SIGKILL it after the grace period.
STUBBORN = ["sleep", "3600"]


async def test_container_lifecycle(cri: CriClient, bench, busybox: str) -> None:
    sandbox_id, sandbox = await bench.run_sandbox()
    config = bench.container_config(sandbox, "main", GRACEFUL)
    container_id = await bench.create_container(sandbox_id, sandbox, config)

    created = await cri.containers.status(container_id)
    assert created.state is types.ContainerState.CREATED
    assert created.metadata == config.metadata
    assert created.created_at > 0 and created.started_at == 0

    await cri.containers.start(container_id)
    running = await bench.wait_for_state(container_id, types.ContainerState.RUNNING)
    assert running.started_at >= running.created_at
    assert running.finished_at == 0
    # containerd 1.6 reports the image as pulled (by tag) and the ref as the repo digest.
    assert running.image in (BUSYBOX, busybox), running
    assert running.image_ref.startswith("docker.io/library/busybox@sha256:"), running
    assert running.labels == config.labels
    assert running.log_path == str(Path(sandbox.log_directory) / "main" / "0.log")

    # RUNNING comes before the shell has set its trap: stop only once it has, or SIGTERM finds no handler.
    log = Path(sandbox.log_directory) / "main" / "0.log"
    for _ in range(600):
        if log.exists() and "trapped" in log.read_text():
            break
        await asyncio.sleep(0.05)
    assert "trapped" in log.read_text()
    await cri.containers.stop(container_id, timeout=10)
    exited = await cri.containers.status(container_id)
    assert exited.state is types.ContainerState.EXITED
    assert exited.exit_code == 7
    assert exited.reason == "Error"  # containerd's reason for a non-zero exit
    assert exited.finished_at >= exited.started_at
    await cri.containers.stop(container_id, timeout=10)  # idempotent

    await cri.containers.remove(container_id)
    with pytest.raises(CriError) as info:
        await cri.containers.status(container_id)
    assert info.value.not_found, info.value
    await cri.containers.remove(container_id)  # idempotent


async def test_stop_kills_after_the_grace_period(cri: CriClient, bench) -> None:
    _, container_id, _, _ = await bench.start_container(STUBBORN)
    await bench.wait_for_state(container_id, types.ContainerState.RUNNING)
    started = time.monotonic()
    await cri.containers.stop(container_id, timeout=1)
    assert time.monotonic() - started >= 0.9
    status = await cri.containers.status(container_id)
    assert status.state is types.ContainerState.EXITED
    assert status.exit_code == 137  # 128 + SIGKILL


async def test_completed_container(cri: CriClient, bench) -> None:
    _, container_id, _, _ = await bench.start_container(["true"])
    status = await bench.wait_for_state(container_id, types.ContainerState.EXITED)
    assert status.exit_code == 0
    assert status.reason == "Completed"


async def test_list_and_filters(cri: CriClient, bench) -> None:
    sandbox_id, container_id, sandbox, config = await bench.start_container(STUBBORN)
    idle_id = await bench.create_container(sandbox_id, sandbox, bench.container_config(sandbox, "idle", STUBBORN))
    await bench.wait_for_state(container_id, types.ContainerState.RUNNING)

    in_sandbox = {c.id: c for c in await cri.containers.list(types.ContainerFilter(pod_sandbox_id=sandbox_id))}
    assert in_sandbox.keys() == {container_id, idle_id}
    item = in_sandbox[container_id]
    assert item.pod_sandbox_id == sandbox_id
    assert item.metadata == config.metadata
    assert item.state is types.ContainerState.RUNNING

    running = await cri.containers.list(
        types.ContainerFilter(pod_sandbox_id=sandbox_id, state=types.ContainerState.RUNNING)
    )
    assert [c.id for c in running] == [container_id]
    created = await cri.containers.list(
        types.ContainerFilter(pod_sandbox_id=sandbox_id, state=types.ContainerState.CREATED)
    )
    assert [c.id for c in created] == [idle_id]


async def test_exec_sync(cri: CriClient, bench) -> None:
    _, container_id, _, _ = await bench.start_container(STUBBORN)
    await bench.wait_for_state(container_id, types.ContainerState.RUNNING)

    result = await cri.containers.exec_sync(container_id, ["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=10)
    assert result == types.ExecSyncResult(stdout=b"out\n", stderr=b"err\n", exit_code=3)

    ok = await cri.containers.exec_sync(container_id, ["cat", "/etc/hostname"])
    assert ok.exit_code == 0 and ok.stdout.strip() and ok.stderr == b""


async def test_exec_sync_timeout_is_deadline_exceeded(cri: CriClient, bench) -> None:
    """How an exec probe's timeoutSeconds shows up: the runtime's own deadline, well before ours."""
    _, container_id, _, _ = await bench.start_container(STUBBORN)
    await bench.wait_for_state(container_id, types.ContainerState.RUNNING)
    started = time.monotonic()
    with pytest.raises(CriError) as info:
        await cri.containers.exec_sync(container_id, ["sleep", "30"], timeout=1)
    assert info.value.deadline_exceeded, info.value
    assert time.monotonic() - started < 10


async def test_exec_sync_in_an_unknown_container_is_not_found(cri: CriClient) -> None:
    with pytest.raises(CriError) as info:
        await cri.containers.exec_sync("0" * 64, ["true"])
    assert info.value.not_found, info.value


async def test_exec_and_attach_return_streaming_urls(cri: CriClient, bench) -> None:
    _, container_id, _, _ = await bench.start_container(STUBBORN)
    await bench.wait_for_state(container_id, types.ContainerState.RUNNING)
    assert (await cri.containers.exec(container_id, ["sh"], stdin=True, tty=True)).startswith("http://")
    assert (await cri.containers.attach(container_id)).startswith("http://")


# <RFC3339Nano time> <stream> <P|F> <content>: the CRI log format kubelet's `logs` endpoint parses.
CRI_LOG_LINE = re.compile(
    r"^(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d)) "
    r"(?P<stream>stdout|stderr) (?P<tag>[PF]) (?P<content>.*)$"
)


def _parse_time(text: str) -> datetime:
    """RFC3339Nano to datetime (Python keeps microseconds: drop the extra digits)."""
    text = text.replace("Z", "+00:00")
    text = re.sub(r"(\.\d{6})\d+", r"\1", text)
    return datetime.fromisoformat(text)


async def test_container_log_file_is_in_cri_format(cri: CriClient, bench) -> None:
    script = "echo line-one; echo to-stderr >&2; echo 'line two with  spaces'"
    before = time.time()
    _, container_id, sandbox, config = await bench.start_container(["sh", "-c", script], name="logger")
    status = await bench.wait_for_state(container_id, types.ContainerState.EXITED)
    assert status.exit_code == 0

    path = Path(sandbox.log_directory) / config.log_path
    assert status.log_path == str(path)
    expected = {("stdout", "line-one"), ("stderr", "to-stderr"), ("stdout", "line two with  spaces")}
    for _ in range(50):  # the runtime may still be flushing right after the exit
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= len(expected):
            break
        await asyncio.sleep(0.1)

    parsed = [CRI_LOG_LINE.match(line) for line in lines]
    assert all(parsed), lines
    assert {(m["stream"], m["content"]) for m in parsed if m} == expected
    assert all(m["tag"] == "F" for m in parsed if m)
    stdout = [m["content"] for m in parsed if m and m["stream"] == "stdout"]
    assert stdout == ["line-one", "line two with  spaces"]  # order within a stream is kept
    for m in parsed:
        assert m
        assert before - 5 <= _parse_time(m["time"]).timestamp() <= time.time() + 5


async def test_create_with_a_missing_image_fails_clearly(cri: CriClient, bench) -> None:
    sandbox_id, sandbox = await bench.run_sandbox()
    config = bench.container_config(sandbox, "ghost", STUBBORN)
    config = dataclasses.replace(config, image="docker.io/library/does-not-exist:0")
    with pytest.raises(CriError) as info:
        await bench.create_container(sandbox_id, sandbox, config)
    assert "does-not-exist" in info.value.details, info.value
    assert BUSYBOX not in info.value.details


async def test_update_resources_changes_the_running_containers_cgroup(cri: CriClient, bench) -> None:
    """UpdateContainerResources (in-place resize) reaches the cgroup the container itself sees, and ContainerStatus
    reports the new values."""
    _, container_id, _, _ = await bench.start_container(STUBBORN)
    await bench.wait_for_state(container_id, types.ContainerState.RUNNING)
    wanted = types.LinuxContainerResources(cpu_period=100000, cpu_quota=30000, cpu_shares=307,
                                           memory_limit_in_bytes=96 << 20)
    await cri.containers.update_resources(container_id, wanted)

    status = await cri.containers.status(container_id)
    assert status.resources is not None
    assert (status.resources.cpu_quota, status.resources.cpu_shares, status.resources.memory_limit_in_bytes) == \
        (30000, 307, 96 << 20), status.resources
    read = "cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null" \
        " || cat /sys/fs/cgroup/cpu.max /sys/fs/cgroup/memory.max"
    result = await cri.containers.exec_sync(container_id, ["sh", "-c", read], timeout=10)
    assert result.stdout.decode().split() in (["30000", str(96 << 20)], ["30000", "100000", str(96 << 20)]), result
