"""kopflet.oom: /dev/kmsg records into OOM kills, and which of them are system OOMs (upstream oomparser)."""

from __future__ import annotations

import pytest

from kopflet.oom import parser
from kopflet.oom.parser import KmsgRecord, OomStream


def records(*messages: str) -> list[KmsgRecord]:
    return [KmsgRecord(sequence=i, usec=1000 + i, message=m) for i, m in enumerate(messages)]


GLOBAL = records(
    "stress invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0",
    "CPU: 1 PID: 4242 Comm: stress Not tainted 5.15.0-91-generic #101-Ubuntu",
    "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/user.slice,"
    "task=stress,pid=4242,uid=0",
    "Out of memory: Killed process 4242 (stress) total-vm:2104300kB, anon-rss:2097152kB, file-rss:0kB",
)
MEMCG = records(
    "dd invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=999",
    "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=abc,mems_allowed=0,"
    "oom_memcg=/kubepods/burstable/pod1234/abc,task_memcg=/kubepods/burstable/pod1234/abc,task=dd,pid=77,uid=0",
    "Memory cgroup out of memory: Killed process 77 (dd) total-vm:263000kB",
)
LEGACY = records(
    "java invoked oom-killer: gfp_mask=0x24000c0, order=0, oom_score_adj=0",
    "Task in /mem2 killed as a result of limit of /mem3",
    "Memory cgroup out of memory: Kill process 19667 (evil-program2) score 1074 or sacrifice child",
    "Killed process 19667 (evil-program2) total-vm:1460016kB, anon-rss:1414008kB, file-rss:4kB",
)


def feed(lines: list[KmsgRecord]) -> list[parser.OomInstance]:
    stream = OomStream()
    return [oom for r in lines if (oom := stream.feed(r)) is not None]


@pytest.mark.parametrize(("lines", "pid", "name", "victim", "message"), [
    pytest.param(GLOBAL, 4242, "stress", "/", "System OOM encountered, victim process: stress, pid: 4242",
                 id="a global OOM is a system OOM"),
    pytest.param(MEMCG, 77, "dd", "/kubepods/burstable/pod1234/abc", None,
                 id="a container over its limit is not (its pod reports OOMKilled)"),
    pytest.param(LEGACY, 19667, "evil-program2", "/mem3", None, id="pre-5.0 kernels' lines"),
])
def test_oom_kills_and_system_ooms(lines: list[KmsgRecord], pid: int, name: str, victim: str,
                                   message: str | None) -> None:
    [oom] = feed(lines)
    assert (oom.pid, oom.process_name, oom.victim_container_name) == (pid, name, victim)
    assert parser.system_oom_message(oom) == message


def test_each_kill_is_reported_once_and_other_messages_are_ignored() -> None:
    noise = records("eth0: link up", "EXT4-fs (sda1): mounted filesystem")
    assert len(feed([*noise, *GLOBAL, *noise, *GLOBAL])) == 2
    assert feed(noise) == []


def test_no_process_known_says_so_plainly() -> None:
    assert parser.system_oom_message(parser.OomInstance()) == "System OOM encountered"


@pytest.mark.parametrize(("raw", "expected"), [
    ("6,1234,5678901,-;eth0: link up\n", KmsgRecord(1234, 5678901, "eth0: link up")),
    ("3,9,10,c,caller=T1;oom-kill:x\n SUBSYSTEM=mem\n", KmsgRecord(9, 10, "oom-kill:x")),
    ("garbage", None),
    ("6,x,1,-;bad sequence", None),
])
def test_kmsg_records(raw: str, expected: KmsgRecord | None) -> None:
    assert parser.parse_record(raw) == expected


async def test_the_ring_buffer_reaches_the_loop_in_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """3000 records read at start wake the event loop a few times, not once each: thousands of
    call_soon_threadsafe in a burst fill the loop's self-pipe, the signal wake-up fd, and a SIGTERM then is lost.
    The system OOM among them is still reported."""
    import asyncio
    import os
    import threading

    from kopflet.oom import watcher as watcher_module
    noise = [f"6,{i},{i},-;eth0: link up\n" for i in range(3000)]
    oom = [f"6,{3000 + i},{3000 + i},-;{r.message}\n" for i, r in enumerate(GLOBAL)]
    pending = [line.encode() for line in (*noise, *oom)]
    lock = threading.Lock()

    def read(fd: int, size: int) -> bytes:
        with lock:
            if pending:
                return pending.pop(0)
        raise BlockingIOError

    devnull = os.open(os.devnull, os.O_RDONLY)
    monkeypatch.setattr(watcher_module.os, "open", lambda path, flags: devnull)
    monkeypatch.setattr(watcher_module.os, "read", read)
    monkeypatch.setattr(watcher_module, "POLL", 0.01)
    loop = asyncio.get_running_loop()
    wakeups = 0
    original = loop.call_soon_threadsafe

    def counting(*args: object) -> asyncio.Handle:
        nonlocal wakeups
        wakeups += 1
        return original(*args)  # type: ignore[arg-type]
    monkeypatch.setattr(loop, "call_soon_threadsafe", counting)
    reported: list[tuple[str, str]] = []
    seen = asyncio.Event()

    def record(reason: str, message: str) -> None:
        reported.append((reason, message))
        seen.set()
    task = asyncio.create_task(watcher_module.OomWatcher(record, "/dev/kmsg").run())
    try:
        await asyncio.wait_for(seen.wait(), 10)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert reported == [("SystemOOM", "System OOM encountered, victim process: stress, pid: 4242")]
    assert wakeups <= 5, wakeups


async def test_a_descriptor_above_fd_setsize_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """/dev/kmsg opened as a descriptor above 1024 (a busy agent; a process of many hollow nodes) is still waited
    on: select() refuses such a descriptor ("filedescriptor out of range in select()") and the reader died."""
    import asyncio
    import os
    import resource
    import threading

    from kopflet.oom import watcher as watcher_module
    high = 1500
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] <= high:
        pytest.skip("needs more than 1500 open files allowed")
    read_end, write_end = os.pipe()
    os.dup2(read_end, high)
    pending = [f"6,{i},{i},-;{r.message}\n".encode() for i, r in enumerate(GLOBAL)]
    waited = False
    lock = threading.Lock()

    def read(fd: int, size: int) -> bytes:
        nonlocal waited
        with lock:
            if waited and pending:  # nothing at first: the reader waits on the descriptor before its records
                return pending.pop(0)
            waited = True
        raise BlockingIOError

    monkeypatch.setattr(watcher_module.os, "open", lambda path, flags: high)
    monkeypatch.setattr(watcher_module.os, "read", read)
    monkeypatch.setattr(watcher_module, "POLL", 0.01)
    seen = asyncio.Event()
    task = asyncio.create_task(watcher_module.OomWatcher(lambda reason, message: seen.set(), "/dev/kmsg").run())
    try:
        await asyncio.wait_for(seen.wait(), 10)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        for fd in (read_end, write_end):
            os.close(fd)
