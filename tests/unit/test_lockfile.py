"""--lock-file and --exit-on-lock-contention (kopflet/lockfile.py, handlers/startup.py take_lock_file).

Real lock files in a tmp dir and real processes: a second agent waits for the first's flock (upstream
flock.Acquire blocks), and an agent watching its lock file stops when another process opens it (upstream
watchForLockfileContention). Flag errors carry upstream's text.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import kopf
import pytest

from handlers import cli, startup
from kopflet.config import settings
from kopflet.config.settings import AgentConfig, ConfigError, load
from kopflet.lockfile import ContentionWatch, LockFile, LockFileError, describe_events, holders

REPO = Path(__file__).resolve().parents[2]
LOGGER = logging.getLogger("test")

# One agent's lock-taking part as its own process: lock, say so, then hold until told (a line on stdin) or, with
# "watch", until another process opens the file. Logs go to stderr.
AGENT = """
import asyncio, logging, sys
from kopflet.lockfile import ContentionWatch, LockFile

logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")

async def main(path: str, mode: str) -> None:
    await LockFile.acquire(path)
    print("locked", flush=True)
    loop = asyncio.get_running_loop()
    if mode == "watch":
        contended = asyncio.Event()
        await ContentionWatch(path, contended.set).start()
        print("watching", flush=True)
        await contended.wait()
        print("contended", flush=True)
    else:
        await loop.run_in_executor(None, sys.stdin.readline)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def spawn(path: Path, mode: str = "hold") -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", AGENT, str(path), mode], cwd=REPO, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def expect_line(proc: subprocess.Popen[str], want: str, timeout: float = 10.0) -> None:
    """Read proc's stdout until the line `want` (a blocking read: the tests' own deadline is the process's)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.strip() == want:
            return
    raise AssertionError(f"no {want!r} from process {proc.pid}: {proc.poll()=}")


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def stderr_until(proc: subprocess.Popen[str], needle: str, timeout: float = 10.0) -> str:
    assert proc.stderr is not None
    text, deadline = "", time.monotonic() + timeout
    while needle not in text and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        text += line
    return text


def is_locked(path: Path) -> bool:
    """Whether some open file description holds a flock on `path` (a fresh open of our own contends too)."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------------------------- flags

def test_exit_on_lock_contention_needs_a_lock_file_with_upstreams_error() -> None:
    with pytest.raises(ConfigError) as err:
        load(["--exit-on-lock-contention"], {}, "node-1", lambda _: "")
    assert str(err.value) == "cannot exit on lock file contention: no lock file specified"
    with pytest.raises(ConfigError, match="no lock file specified"):
        load(["--exit-on-lock-contention", "--lock-file="], {}, "node-1", lambda _: "")


def test_lock_flags_parse() -> None:
    cfg = load(["--lock-file=/run/kopflet.lock", "--exit-on-lock-contention"], {}, "node-1", lambda _: "")
    assert (cfg.lock_file, cfg.exit_on_lock_contention) == ("/run/kopflet.lock", True)
    cfg = load(["--lock-file", "kopflet.lock"], {}, "node-1", lambda _: "")  # relative, as upstream allows
    assert (cfg.lock_file, cfg.exit_on_lock_contention) == ("kopflet.lock", False)
    assert load([], {}, "node-1", lambda _: "").lock_file == ""


def test_the_lock_flags_have_no_config_file_field() -> None:
    """Upstream has them as KubeletFlags only; a config file naming them is refused."""
    header = f"apiVersion: {settings.CONFIG_API_VERSION}\nkind: {settings.CONFIG_KIND}\n"
    for field in ("lockFile", "lockFilePath", "exitOnLockContention"):
        with pytest.raises(ConfigError, match=f'unknown field "{field}"'):
            load(["--config=/k.yaml"], {}, "node-1", lambda _, f=field: header + f"{f}: x\n")
        assert field not in settings.UNSUPPORTED_FIELDS


def test_the_command_refuses_exit_on_lock_contention_alone() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KOPFLET_") and k != "NODE_NAME"}
    proc = subprocess.run([sys.executable, "-m", "handlers.cli", "--exit-on-lock-contention"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == cli.USAGE_ERROR
    assert "cannot exit on lock file contention: no lock file specified" in proc.stderr


def test_help_lists_the_lock_flags() -> None:
    text = settings.usage()
    assert "--lock-file string" in text and "--exit-on-lock-contention " in text


# -------------------------------------------------------------------------------------------------- the lock

def test_a_second_agent_waits_for_the_first_and_says_why(tmp_path: Path,
                                                         procs: list[subprocess.Popen[str]]) -> None:
    path = tmp_path / "kopflet.lock"
    first = spawn(path)
    procs.append(first)
    expect_line(first, "locked")
    assert (path.stat().st_mode & 0o777) == 0o600  # created as upstream's flock.Acquire does
    second = spawn(path)
    procs.append(second)
    logged = stderr_until(second, "waiting for it")
    assert f"the lock file {path} is locked by another process: held by process {first.pid}" in logged
    time.sleep(0.5)
    assert second.poll() is None
    assert first.stdin is not None
    first.stdin.write("\n")
    first.stdin.flush()  # the first agent exits: its lock goes with it
    assert first.wait(timeout=10) == 0
    expect_line(second, "locked")


async def test_waiting_does_not_block_the_event_loop_and_a_cancelled_wait_locks_nothing(
        tmp_path: Path, procs: list[subprocess.Popen[str]]) -> None:
    path = tmp_path / "kopflet.lock"
    holder = spawn(path)
    procs.append(holder)
    await asyncio.to_thread(expect_line, holder, "locked")
    waiting = asyncio.create_task(LockFile.acquire(str(path)))
    ticks = 0
    for _ in range(20):
        await asyncio.sleep(0.01)
        ticks += 1
    assert ticks == 20 and not waiting.done()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert holder.stdin is not None
    holder.stdin.write("\n")
    holder.stdin.flush()
    assert await asyncio.to_thread(holder.wait, 10) == 0
    # The abandoned wait's thread gets the lock once the holder is gone, and drops it at once.
    for _ in range(200):
        if not is_locked(path):
            break
        await asyncio.sleep(0.025)
    assert not is_locked(path)


async def test_an_uncontended_lock_is_taken_at_once_and_held(tmp_path: Path) -> None:
    path = tmp_path / "kopflet.lock"
    lock = await LockFile.acquire(str(path))
    try:
        assert is_locked(path)
        assert holders(str(path)) == [os.getpid()]
    finally:
        lock.release()
    assert not is_locked(path)


async def test_an_unusable_lock_file_is_upstreams_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / "kopflet.lock"
    with pytest.raises(LockFileError) as err:
        await LockFile.acquire(str(missing))
    assert str(err.value) == f'unable to acquire file lock on "{missing}": no such file or directory'
    assert err.value.errno == errno.ENOENT


def test_holders_reads_proc_locks(tmp_path: Path) -> None:
    path = tmp_path / "kopflet.lock"
    path.write_text("")
    st = path.stat()
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    proc_locks = (f"1: FLOCK  ADVISORY  WRITE 4242 {dev} 0 EOF\n"
                  f"1: -> FLOCK  ADVISORY  WRITE 4343 {dev} 0 EOF\n"
                  f"2: POSIX  ADVISORY  WRITE 99 {dev} 0 EOF\n"
                  f"3: FLOCK  ADVISORY  WRITE 77 00:01:{st.st_ino + 1} 0 EOF\n")
    assert holders(str(path), proc_locks) == [4242]
    assert holders(str(tmp_path / "missing"), proc_locks) == []


# --------------------------------------------------------------------------------------- the contention watch

async def test_the_watch_fires_when_another_process_opens_the_file(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "kopflet.lock"
    lock = await LockFile.acquire(str(path))
    fired = asyncio.Event()
    calls: list[int] = []
    watch = ContentionWatch(str(path), lambda: (calls.append(1), fired.set()))
    try:
        with caplog.at_level(logging.INFO, logger="kopflet.lockfile"):
            await watch.start()
            await asyncio.sleep(0.2)
            assert not fired.is_set()  # our own descriptor was opened before the watch: it does not count
            proc = await asyncio.create_subprocess_exec(sys.executable, "-c", f"open({str(path)!r}).close()")
            assert await proc.wait() == 0
            await asyncio.wait_for(fired.wait(), 10)
        assert not watch.active and calls == [1]  # once, then closed (upstream closes its watcher)
        assert f"Inotify event: {path}: IN_OPEN" in caplog.text
    finally:
        watch.close()
        lock.release()


async def test_the_watch_needs_the_file(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="unable to watch lockfile"):
        await ContentionWatch(str(tmp_path / "missing"), lambda: None).start()


def test_describe_events() -> None:
    import struct
    data = struct.pack("iIII", 1, 0x20, 0, 0) + struct.pack("iIII", 1, 0x400 | 0x8000, 0, 0)
    assert describe_events(data) == ["IN_OPEN", "IN_DELETE_SELF|IN_IGNORED"]


def test_the_first_agent_exits_when_a_second_starts(tmp_path: Path, procs: list[subprocess.Popen[str]]) -> None:
    """--exit-on-lock-contention: the second agent's open makes the first stop, and the second gets the lock."""
    path = tmp_path / "kopflet.lock"
    first = spawn(path, "watch")
    procs.append(first)
    expect_line(first, "locked")
    expect_line(first, "watching")
    second = spawn(path)
    procs.append(second)
    expect_line(first, "contended")
    assert first.wait(timeout=10) == 0
    expect_line(second, "locked")


# ------------------------------------------------------------------------------------------ the start-up handler

def memo_with(cfg: AgentConfig) -> kopf.Memo:
    memo = kopf.Memo()
    memo.config = cfg
    return memo


def test_the_lock_is_taken_before_the_runtime_and_the_node() -> None:
    """Kopf runs startup handlers in registration order: the lock comes right after the config is read."""
    from kopf._core.intents import causes
    handlers = kopf.get_default_registry()._activities.get_handlers(activity=causes.Activity.STARTUP)
    ids = [h.id for h in handlers]
    assert ids.index("configure") < ids.index("take_lock_file") < ids.index("connect_runtime") \
        < ids.index("start_agent")


async def test_the_handler_without_a_lock_file_does_nothing() -> None:
    memo = memo_with(AgentConfig(node_name="n"))
    await startup.take_lock_file(memo=memo, logger=LOGGER)
    assert memo.get("lock_file") is None and memo.get("lock_watch") is None


async def test_the_handler_locks_watches_and_stops_the_operator_on_contention(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "kopflet.lock"
    stopped = asyncio.Event()
    monkeypatch.setattr(startup, "stop_operator", stopped.set)
    memo = memo_with(AgentConfig(node_name="n", lock_file=str(path), exit_on_lock_contention=True))
    await startup.take_lock_file(memo=memo, logger=LOGGER)
    try:
        assert is_locked(path)
        await startup.take_lock_file(memo=memo, logger=LOGGER)  # a retried start keeps what it has
        assert not stopped.is_set()
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", f"open({str(path)!r}).close()")
        await proc.wait()
        await asyncio.wait_for(stopped.wait(), 10)
    finally:
        memo.lock_watch.close()
        memo.lock_file.release()


async def test_the_handler_reports_an_unusable_lock_file_permanently(tmp_path: Path) -> None:
    memo = memo_with(AgentConfig(node_name="n", lock_file=str(tmp_path / "no-such-dir" / "x.lock")))
    with pytest.raises(kopf.PermanentError, match="unable to acquire file lock on"):
        await startup.take_lock_file(memo=memo, logger=LOGGER)


def test_stop_operator_is_a_sigterm_to_this_process(tmp_path: Path) -> None:
    """The stop is Kopf's own SIGTERM path (its handler sets the stop flag; cleanup stops the agent)."""
    script = (
        "import asyncio, signal\n"
        "from handlers import startup\n"
        "async def main():\n"
        "    got = asyncio.Event()\n"
        "    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, got.set)\n"
        "    startup.stop_operator()\n"
        "    await asyncio.wait_for(got.wait(), 10)\n"
        "    print('stopped by SIGTERM')\n"
        "asyncio.run(main())\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "stopped by SIGTERM"
