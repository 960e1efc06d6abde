"""kopflet.logs.cri_logs (query options, CRI lines, formatting, tail) and kopflet.logs.reader (reading, following,
rotation)."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from kopflet.logs import reader as agent_logs
from kopflet.logs.cri_logs import (
    LogEntry,
    LogFormatter,
    LogOptions,
    LogOptionsError,
    format_timestamp,
    log_container_id,
    parse_cri_line,
    parse_log_options,
    scan_tail_block,
    since_cutoff,
    tail_start_offset,
)
from kopflet.logs.reader import write_container_logs

UTC = dt.UTC
T0 = "2024-05-06T07:08:09.123456789Z"


def cri(content: str, *, ts: str = T0, stream: str = "stdout", tag: str = "F") -> bytes:
    """One CRI log line as containerd writes it."""
    return f"{ts} {stream} {tag} {content}\n".encode()


def q(**params: str) -> dict[str, list[str]]:
    return {k: [v] for k, v in params.items()}


# --- parse_log_options --------------------------------------------------------------------------------------


def test_no_parameters_give_the_defaults() -> None:
    assert parse_log_options({}) == LogOptions()
    assert LogOptions().stream == "All"


def test_every_parameter_is_decoded() -> None:
    opts = parse_log_options(q(follow="true", previous="true", timestamps="1", limitBytes="100",
                               sinceSeconds="60", stream="Stderr"))
    assert opts == LogOptions(follow=True, previous=True, timestamps=True, limit_bytes=100, since_seconds=60,
                              stream="Stderr")
    assert parse_log_options(q(tailLines="10")).tail_lines == 10


@pytest.mark.parametrize(("value", "expected"), [
    ("true", True), ("1", True), ("True", True), ("yes", True), ("", True),  # anything but 0/false is true
    ("false", False), ("FALSE", False), ("False", False), ("0", False),
])
def test_booleans_decode_as_apimachinery_does(value: str, expected: bool) -> None:
    opts = parse_log_options(q(follow=value, previous=value, timestamps=value))
    assert (opts.follow, opts.previous, opts.timestamps) == (expected, expected, expected)


def test_only_the_first_value_of_a_repeated_parameter_counts() -> None:
    assert parse_log_options({"tailLines": ["3", "-1"], "follow": ["0", "1"]}) == LogOptions(tail_lines=3)


@pytest.mark.parametrize(("query", "tail"), [
    (q(tail="5"), 5),
    (q(tail="5", tailLines="7"), 5),  # the legacy parameter wins
    (q(tail="all", tailLines="7"), None),  # "all" means no tail at all
    (q(tail="", tailLines="7"), 7),
    (q(tailLines="+4"), 4),
    (q(tailLines="0"), 0),
])
def test_legacy_tail_parameter(query: dict[str, list[str]], tail: int | None) -> None:
    assert parse_log_options(query).tail_lines == tail


@pytest.mark.parametrize(("value", "expected"), [
    ("2024-01-02T03:04:05Z", dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
    ("2024-01-02T05:04:05+02:00", dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
    ("2024-01-02T03:04:05.5Z", dt.datetime(2024, 1, 2, 3, 4, 5, 500000, tzinfo=UTC)),
    ("", dt.datetime(1, 1, 1, tzinfo=UTC)),  # metav1.Time: empty is the zero time
    ("null", dt.datetime(1, 1, 1, tzinfo=UTC)),
])
def test_since_time_is_rfc3339(value: str, expected: dt.datetime) -> None:
    assert parse_log_options(q(sinceTime=value)).since_time == expected


def test_previous_with_follow_is_allowed() -> None:
    opts = parse_log_options(q(previous="true", follow="true"))
    assert opts.previous and opts.follow


@pytest.mark.parametrize(("query", "status", "message"), [
    (q(tailLines="-1"), 422, "tailLines: Invalid value: -1: must be greater than or equal to 0"),
    (q(limitBytes="0"), 422, "limitBytes: Invalid value: 0: must be greater than 0"),
    (q(sinceSeconds="0"), 422, "sinceSeconds: Invalid value: 0: must be greater than 0"),
    (q(sinceSeconds="10", sinceTime="2024-01-02T03:04:05Z"), 422,
     "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"),
    (q(sinceSeconds="10", sinceTime=""), 422, "at most one of `sinceTime` or `sinceSeconds`"),
    (q(stream="stdout"), 422, 'stream: Unsupported value: "stdout": supported values: "All", "Stderr", "Stdout"'),
    (q(stream="Stdout", tailLines="3"), 422, "`tailLines` and specific `stream` are mutually exclusive for now"),
    (q(tailLines="-1", limitBytes="0"), 422, "[tailLines: Invalid value: -1: must be greater than or equal to 0, "
                                             "limitBytes: Invalid value: 0: must be greater than 0]"),
    (q(tailLines="ten"), 400, 'tailLines: strconv.ParseInt: parsing "ten": invalid syntax'),
    (q(tailLines=" 1"), 400, "invalid syntax"),
    (q(tailLines="1_0"), 400, "invalid syntax"),
    (q(limitBytes="9223372036854775808"), 400, "value out of range"),
    (q(sinceTime="2024-01-02"), 400, "sinceTime: parsing time"),
    (q(sinceTime="2024-13-02T03:04:05Z"), 400, "sinceTime: parsing time"),
])
def test_invalid_queries_are_refused_with_upstream_status_and_wording(
        query: dict[str, list[str]], status: int, message: str) -> None:
    with pytest.raises(LogOptionsError) as info:
        parse_log_options(query)
    assert info.value.status == status
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


def test_stream_all_may_go_with_tail_lines() -> None:
    assert parse_log_options(q(stream="All", tailLines="3")) == LogOptions(tail_lines=3)


NOW = dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)


@pytest.mark.parametrize(("opts", "cutoff"), [
    (LogOptions(), None),
    (LogOptions(since_seconds=60), NOW - dt.timedelta(seconds=60)),
    (LogOptions(since_time=NOW - dt.timedelta(hours=1)), NOW - dt.timedelta(hours=1)),
])
def test_since_cutoff(opts: LogOptions, cutoff: dt.datetime | None) -> None:
    assert since_cutoff(opts, NOW) == cutoff


# --- parse_cri_line -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("line", "stream", "partial", "tags", "content"), [
    (b"2024-05-06T07:08:09.123456789Z stdout F hello world\n", "stdout", False, ("F",), b"hello world\n"),
    (b"2024-05-06T07:08:09.123456789Z stderr F oops\n", "stderr", False, ("F",), b"oops\n"),
    (b"2024-05-06T07:08:09.123456789Z stdout P first half\n", "stdout", True, ("P",), b"first half"),
    (b"2024-05-06T07:08:09.123456789Z stdout P:x:y piece\n", "stdout", True, ("P", "x", "y"), b"piece"),
    (b"2024-05-06T07:08:09.123456789Z stdout X odd tag\n", "stdout", False, ("X",), b"odd tag\n"),
    (b"2024-05-06T07:08:09.123456789Z stdout F no newline", "stdout", False, ("F",), b"no newline"),
    (b"2024-05-06T07:08:09.123456789Z stdout F \n", "stdout", False, ("F",), b"\n"),  # an empty line
    (b"2024-05-06T07:08:09.123456789Z stdout F  two  spaces \r\n", "stdout", False, ("F",), b" two  spaces \r\n"),
])
def test_cri_lines(line: bytes, stream: str, partial: bool, tags: tuple[str, ...], content: bytes) -> None:
    entry = parse_cri_line(line)
    assert (entry.stream, entry.partial, entry.tags, entry.content) == (stream, partial, tags, content)
    assert entry.raw_timestamp == T0
    assert entry.timestamp == dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    assert entry.nanosecond == 123456789


@pytest.mark.parametrize(("raw", "utc", "nanosecond"), [
    ("2024-05-06T07:08:09Z", dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC), 0),
    ("2024-05-06T07:08:09.5Z", dt.datetime(2024, 5, 6, 7, 8, 9, 500000, tzinfo=UTC), 500_000_000),
    ("2024-05-06T09:08:09.000000001+02:00", dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC), 1),
    ("2024-05-06T02:38:09.1-04:30", dt.datetime(2024, 5, 6, 7, 8, 9, 100000, tzinfo=UTC), 100_000_000),
])
def test_cri_timestamps_are_lenient_rfc3339nano(raw: str, utc: dt.datetime, nanosecond: int) -> None:
    entry = parse_cri_line(f"{raw} stdout F x\n".encode())
    assert entry.timestamp == utc
    assert entry.nanosecond == nanosecond


@pytest.mark.parametrize(("line", "error"), [
    (b"", "timestamp is not found"),
    (b"garbage\n", "timestamp is not found"),
    (b"not-a-time stdout F x\n", "unexpected timestamp format"),
    (b"2024-05-06T07:08:09.1234567891Z stdout F x\n", "unexpected timestamp format"),  # 10 digits
    (b"2024-02-30T07:08:09Z stdout F x\n", "unexpected timestamp format"),
    (b"2024-05-06T07:08:09Z stdout\n", "stream type is not found"),
    (b"2024-05-06T07:08:09Z stdin F x\n", 'unexpected stream type "stdin"'),
    (b"2024-05-06T07:08:09Z stdout F\n", "log tag is not found"),
])
def test_malformed_cri_lines_raise_value_error(line: bytes, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse_cri_line(line)


@pytest.mark.parametrize(("raw", "formatted"), [
    ("2024-05-06T07:08:09.123456789Z", "2024-05-06T07:08:09.123456789Z"),
    ("2024-05-06T07:08:09Z", "2024-05-06T07:08:09.000000000Z"),
    ("2024-05-06T07:08:09.1Z", "2024-05-06T07:08:09.100000000Z"),
    ("2024-05-06T07:08:09.000001Z", "2024-05-06T07:08:09.000001000Z"),
    ("2024-05-06T09:08:09.5+02:00", "2024-05-06T09:08:09.500000000+02:00"),  # the zone is kept, as Go does
    ("2024-05-06T07:08:09.5+00:00", "2024-05-06T07:08:09.500000000Z"),  # Z07:00 writes a zero offset as Z
    ("0999-01-01T00:00:00-00:30", "0999-01-01T00:00:00.000000000-00:30"),
])
def test_timestamps_are_written_fixed_width(raw: str, formatted: str) -> None:
    assert format_timestamp(parse_cri_line(f"{raw} stdout F x\n".encode())) == formatted


def test_epoch_ns_is_exact() -> None:
    entry = parse_cri_line(b"1970-01-01T00:00:01.000000007Z stdout F x\n")
    assert isinstance(entry, LogEntry)
    assert entry.epoch_ns == 1_000_000_007


# --- LogFormatter -------------------------------------------------------------------------------------------

TS = "2024-05-06T07:08:09.000000001Z"
LOG = (cri("out 1", ts=TS) + cri("err 1", ts=TS, stream="stderr")
       + cri("long ", ts="2024-05-06T07:08:10Z", tag="P") + cri("line", ts="2024-05-06T07:08:11Z", tag="P")
       + cri("!", ts="2024-05-06T07:08:12Z") + cri("out 2", ts="2024-05-06T07:08:13Z"))


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({}, b"out 1\nerr 1\nlong line!\nout 2\n"),
    ({"stream": "Stdout"}, b"out 1\nlong line!\nout 2\n"),
    ({"stream": "Stderr"}, b"err 1\n"),
    ({"timestamps": True},
     b"2024-05-06T07:08:09.000000001Z out 1\n2024-05-06T07:08:09.000000001Z err 1\n"
     b"2024-05-06T07:08:10.000000000Z long line!\n2024-05-06T07:08:13.000000000Z out 2\n"),
    ({"since": dt.datetime(2024, 5, 6, 7, 8, 11, tzinfo=UTC)}, b"line!\nout 2\n"),
    ({"since": dt.datetime(2024, 5, 6, 7, 8, 11, tzinfo=UTC), "timestamps": True},
     b"2024-05-06T07:08:11.000000000Z line!\n2024-05-06T07:08:13.000000000Z out 2\n"),
    ({"limit_bytes": 8}, b"out 1\ner"),
    ({"limit_bytes": 6}, b"out 1\n"),
    ({"limit_bytes": 10_000}, b"out 1\nerr 1\nlong line!\nout 2\n"),
    ({"limit_bytes": 33, "timestamps": True}, b"2024-05-06T07:08:09.000000001Z ou"),  # the prefix counts
    ({"max_entries": 2}, b"out 1\nerr 1\n"),
    ({"max_entries": 2, "stream": "Stderr"}, b"err 1\n"),  # filtered entries count against the cap
])
def test_formatter_rules(kwargs: dict[str, object], expected: bytes) -> None:
    assert LogFormatter(**kwargs).feed(LOG) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("chunk_size", [1, 2, 7, 50, len(LOG)])
def test_any_chunking_gives_the_same_output(chunk_size: int) -> None:
    formatter = LogFormatter(timestamps=True)
    out = b"".join(formatter.feed(LOG[i:i + chunk_size]) for i in range(0, len(LOG), chunk_size))
    assert out == LogFormatter(timestamps=True).feed(LOG)
    assert formatter.pending == 0


def test_since_compares_nanoseconds() -> None:
    cutoff = dt.datetime(2024, 5, 6, 7, 8, 9, 1, tzinfo=UTC)  # 09.000001000
    log = (cri("before", ts="2024-05-06T07:08:09.000000999Z") + cri("at", ts="2024-05-06T07:08:09.000001Z")
           + cri("after", ts="2024-05-06T07:08:09.000001001Z"))
    assert LogFormatter(since=cutoff).feed(log) == b"at\nafter\n"  # upstream skips only what is Before


def test_limit_bytes_sets_done_and_ignores_the_rest() -> None:
    formatter = LogFormatter(limit_bytes=3)
    assert not formatter.done
    assert formatter.feed(cri("abcdef") + b"2024-05-06T07:08:09Z stdout F incompl") == b"abc"
    assert formatter.done and formatter.pending == 0
    assert formatter.feed(cri("more")) == b""
    assert formatter.flush() == b""


def test_incomplete_line_waits_for_its_newline_then_flush_writes_it() -> None:
    formatter = LogFormatter()
    line = cri("complete")
    assert formatter.feed(line[:-1]) == b""
    assert formatter.pending == len(line) - 1
    assert formatter.flush() == b"complete"  # written without the newline it never got
    assert formatter.pending == 0


def test_malformed_lines_are_skipped_and_counted() -> None:
    formatter = LogFormatter()
    assert formatter.feed(b"junk\n" + cri("ok") + b"\n" + b"2024-05-06T07:08:09Z stdin F x\n") == b"ok\n"
    assert formatter.skipped == 3


def test_carriage_returns_do_not_split_entries() -> None:
    assert LogFormatter().feed(cri("progress 10%\rprogress 20%")) == b"progress 10%\rprogress 20%\n"


def test_partial_entries_of_both_streams_interleave_without_stray_timestamps() -> None:
    log = cri("a", tag="P") + cri("x", stream="stderr") + cri("b")
    # Stdout only: "a" and "b" form one output line with a single timestamp.
    assert LogFormatter(stream="Stdout", timestamps=True).feed(log) == f"{T0} ab\n".encode()


def test_from_options_caps_entries_only_without_follow() -> None:
    log = cri("1") + cri("2") + cri("3")
    assert LogFormatter.from_options(LogOptions(tail_lines=2), now=NOW).feed(log) == b"1\n2\n"
    assert LogFormatter.from_options(LogOptions(tail_lines=2, follow=True), now=NOW).feed(log) == b"1\n2\n3\n"
    assert LogFormatter.from_options(LogOptions(tail_lines=0), now=NOW).done


def test_from_options_applies_since_seconds() -> None:
    log = cri("old", ts="2024-05-06T07:07:00Z") + cri("new", ts="2024-05-06T07:08:00Z")
    assert LogFormatter.from_options(LogOptions(since_seconds=60), now=NOW).feed(log) == b"new\n"


# --- tail ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("data", "n", "offset"), [
    (b"a\nb\nc\n", 0, 6),  # n=0: the end of the file
    (b"a\nb\nc\n", 1, 4),
    (b"a\nb\nc\n", 2, 2),
    (b"a\nb\nc\n", 3, 0),
    (b"a\nb\nc\n", 10, 0),  # more than there are
    (b"a\nb\nc", 0, 4),  # an unterminated last line is not a line of its own...
    (b"a\nb\nc", 1, 2),  # ...it comes along with the last complete one
    (b"a\nb\nc", 2, 0),
    (b"abc", 0, 0),
    (b"abc", 1, 0),
    (b"", 0, 0),
    (b"", 5, 0),
    (b"\n\n\n", 1, 2),
    (b"a\nb\n", None, 0),
    (b"a\nb\n", -1, 0),
])
def test_tail_start_offset(data: bytes, n: int | None, offset: int) -> None:
    assert tail_start_offset(data, n) == offset


@pytest.mark.parametrize("block_size", [1, 2, 3, 5, 64])
@pytest.mark.parametrize("n", [0, 1, 2, 5, 40])
def test_scanning_blocks_backwards_agrees_with_the_whole_file(block_size: int, n: int) -> None:
    data = b"".join(f"line {i}\n".encode() * (i % 3 + 1) for i in range(12)) + b"tail"
    needed, right, found = n + 1, len(data), 0
    while right > 0:
        left = max(0, right - block_size)
        offset, needed = scan_tail_block(data[left:right], needed)
        if offset is not None:
            found = left + offset
            break
        right = left
    assert found == tail_start_offset(data, n)


# --- kopflet.logs.reader ---------------------------------------------------------------------------------------------


class Sink:
    """Collects what write_container_logs writes."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    async def __call__(self, data: bytes) -> None:
        self.chunks.append(data)

    @property
    def data(self) -> bytes:
        return b"".join(self.chunks)


async def _running() -> bool:
    return True


async def _stopped() -> bool:
    return False


def lines(*contents: str) -> bytes:
    return b"".join(cri(c) for c in contents)


@pytest.fixture
def log_file(tmp_path: Path) -> Path:
    path = tmp_path / "0.log"
    path.write_bytes(lines(*(f"line {i}" for i in range(1, 6))))
    return path


@pytest.mark.parametrize(("opts", "expected"), [
    (LogOptions(), b"line 1\nline 2\nline 3\nline 4\nline 5\n"),
    (LogOptions(tail_lines=2), b"line 4\nline 5\n"),
    (LogOptions(tail_lines=0), b""),
    (LogOptions(tail_lines=100), b"line 1\nline 2\nline 3\nline 4\nline 5\n"),
    (LogOptions(limit_bytes=10), b"line 1\nlin"),
    (LogOptions(tail_lines=1, timestamps=True), f"{T0} line 5\n".encode()),
])
async def test_reads_a_file(log_file: Path, opts: LogOptions, expected: bytes) -> None:
    sink = Sink()
    await write_container_logs(str(log_file), opts, sink, is_running=_running)
    assert sink.data == expected


async def test_tail_reads_backwards_in_blocks(log_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent_logs, "READ_SIZE", 7)  # several blocks per line, forwards and backwards
    sink = Sink()
    await write_container_logs(str(log_file), LogOptions(tail_lines=3), sink, is_running=_running)
    assert sink.data == b"line 3\nline 4\nline 5\n"


async def test_symlinked_log_is_followed_to_its_file(log_file: Path) -> None:
    link = log_file.parent / "link.log"
    link.symlink_to(log_file)
    sink = Sink()
    await write_container_logs(str(link), LogOptions(tail_lines=1), sink, is_running=_running)
    assert sink.data == b"line 5\n"


@pytest.mark.parametrize("follow", [False, True])
async def test_missing_file_raises_file_not_found(tmp_path: Path, follow: bool) -> None:
    with pytest.raises(FileNotFoundError):
        await write_container_logs(str(tmp_path / "nope.log"), LogOptions(follow=follow), Sink(),
                                   is_running=_running)


async def test_follow_of_a_stopped_container_returns_after_the_file(log_file: Path) -> None:
    sink = Sink()
    await asyncio.wait_for(write_container_logs(str(log_file), LogOptions(follow=True, tail_lines=1), sink,
                                                is_running=_stopped, poll_interval=0.01), 5)
    assert sink.data == b"line 5\n"


class Container:
    """A running container whose state the test flips; counts how often it was asked."""

    def __init__(self) -> None:
        self.running = True
        self.checks = 0

    async def is_running(self) -> bool:
        self.checks += 1
        return self.running


async def wait_for(condition: Callable[[], bool], within: float = 5.0) -> None:
    """Poll `condition` until it holds; fail the test after `within` seconds."""
    for _ in range(int(within / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"condition not met within {within}s")


def append(path: Path, data: bytes) -> None:
    """What the runtime does: append to the log file (one write per call)."""
    with path.open("ab") as f:
        f.write(data)


async def test_follow_picks_up_appended_lines_and_ends_when_the_container_stops(log_file: Path) -> None:
    container, sink = Container(), Sink()
    task = asyncio.create_task(write_container_logs(
        str(log_file), LogOptions(follow=True, tail_lines=1), sink, is_running=container.is_running,
        poll_interval=0.01, check_interval=0.05))
    await wait_for(lambda: sink.data == b"line 5\n")
    append(log_file, cri("line 6") + cri("half ", tag="P")[:20])  # the P entry reaches the file in two pieces
    await wait_for(lambda: sink.data == b"line 5\nline 6\n")
    append(log_file, cri("half ", tag="P")[20:] + cri("done"))
    await wait_for(lambda: sink.data.endswith(b"half done\n"))
    assert not task.done()
    container.running = False
    append(log_file, cri("last words"))  # written as the container exits: still drained
    await asyncio.wait_for(task, 5)
    assert sink.data == b"line 5\nline 6\nhalf done\nlast words\n"


async def test_follow_checks_the_container_state_at_most_every_check_interval(log_file: Path) -> None:
    container, sink = Container(), Sink()
    task = asyncio.create_task(write_container_logs(
        str(log_file), LogOptions(follow=True, tail_lines=0), sink, is_running=container.is_running,
        poll_interval=0.001, check_interval=0.2))
    await asyncio.sleep(0.5)
    container.running = False
    await asyncio.wait_for(task, 5)
    assert 2 <= container.checks <= 5  # hundreds of polls, a handful of state checks
    assert sink.data == b""


async def test_follow_stops_at_limit_bytes_while_the_container_runs(log_file: Path) -> None:
    container, sink = Container(), Sink()
    task = asyncio.create_task(write_container_logs(
        str(log_file), LogOptions(follow=True, tail_lines=0, limit_bytes=12), sink,
        is_running=container.is_running, poll_interval=0.01, check_interval=0.05))
    await asyncio.sleep(0.05)
    append(log_file, lines("first", "second", "third"))
    await asyncio.wait_for(task, 5)
    assert sink.data == b"first\nsecond"
    assert container.running


def rotate(path: Path, new_content: bytes) -> Path:
    """What the kubelet's log manager and containerd do: rename the file aside, then create a new one."""
    rotated = path.with_name(path.name + ".20240506-070809")
    path.rename(rotated)
    path.write_bytes(new_content)
    return rotated


async def test_follow_continues_into_the_new_file_after_rotation(
        log_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    late: list[bytes] = [cri("old 6")]
    rotated = log_file.with_name(log_file.name + ".20240506-070809")
    original = agent_logs._replaced

    def replaced_with_a_late_write(path: str, current: os.stat_result) -> bool:
        # The race the reader must survive: the runtime still writes to the old file right when the
        # reader notices the rotation, before it switches over.
        result = original(path, current)
        if result and late:
            append(rotated, late.pop())
        return result

    monkeypatch.setattr(agent_logs, "_replaced", replaced_with_a_late_write)
    container, sink = Container(), Sink()
    task = asyncio.create_task(write_container_logs(
        str(log_file), LogOptions(follow=True, tail_lines=1), sink, is_running=container.is_running,
        poll_interval=0.01, check_interval=0.05))
    await wait_for(lambda: sink.data == b"line 5\n")
    rotate(log_file, lines("new 1"))
    await wait_for(lambda: sink.data.endswith(b"new 1\n"))
    append(log_file, lines("new 2"))
    await wait_for(lambda: sink.data.endswith(b"new 2\n"))
    container.running = False
    await asyncio.wait_for(task, 5)
    assert sink.data == b"line 5\nold 6\nnew 1\nnew 2\n"


async def test_follow_waits_for_a_rotated_file_to_be_recreated(log_file: Path) -> None:
    container, sink = Container(), Sink()
    task = asyncio.create_task(write_container_logs(
        str(log_file), LogOptions(follow=True, tail_lines=0), sink, is_running=container.is_running,
        poll_interval=0.01, check_interval=0.05))
    await asyncio.sleep(0.05)
    os.rename(log_file, log_file.with_name("0.log.rotated"))
    await asyncio.sleep(0.1)  # no file at the path for a while
    assert not task.done()
    append(log_file, lines("after the gap"))
    await wait_for(lambda: sink.data == b"after the gap\n")
    container.running = False
    await asyncio.wait_for(task, 5)


def truncate(path: Path, data: bytes) -> None:
    """copytruncate-style rotation: the same file, emptied in place, then written again."""
    with path.open("r+b") as f:
        f.truncate(0)
        f.write(data)


async def test_truncated_file_is_read_again_from_the_start(log_file: Path) -> None:
    container, sink = Container(), Sink()
    task = asyncio.create_task(write_container_logs(
        str(log_file), LogOptions(follow=True, tail_lines=0), sink, is_running=container.is_running,
        poll_interval=0.01, check_interval=0.05))
    await asyncio.sleep(0.05)
    truncate(log_file, lines("fresh"))
    await wait_for(lambda: sink.data == b"fresh\n")
    container.running = False
    await asyncio.wait_for(task, 5)


# ------------------------------------------------------------------------------- log_container_id

RUNNING = {"running": {"startedAt": "x"}}
LAST = {"terminated": {"exitCode": 1, "containerID": "containerd://old"}}


@pytest.mark.parametrize(("status", "previous", "expected"), [
    ({"containerStatuses": [{"name": "c", "state": RUNNING, "containerID": "containerd://new"}]}, False, "new"),
    ({"containerStatuses": [{"name": "c", "state": RUNNING, "containerID": "containerd://new", "lastState": LAST}]},
     True, "old"),
    ({"initContainerStatuses": [{"name": "c", "state": {"terminated": {"containerID": "containerd://done"}}}]},
     False, "done"),
    # a restart not yet started: the terminated state has no id, the last one is used
    ({"containerStatuses": [{"name": "c", "state": {"terminated": {}}, "lastState": LAST}]}, False, "old"),
    ({"containerStatuses": [{"name": "c", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                             "lastState": LAST}]}, False, "old"),
])
def test_log_container_id(status: dict, previous: bool, expected: str) -> None:
    assert log_container_id(status, "c", "p", previous) == expected


@pytest.mark.parametrize(("status", "previous", "message"), [
    ({}, False, 'container "c" in pod "p" is not available'),
    ({"containerStatuses": [{"name": "c", "state": RUNNING, "containerID": "containerd://x"}]}, True,
     'previous terminated container "c" in pod "p" not found'),
    ({"containerStatuses": [{"name": "c", "state": {"waiting": {"reason": "ContainerCreating"}}}]}, False,
     'container "c" in pod "p" is waiting to start: ContainerCreating'),
    ({"containerStatuses": [{"name": "c", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}, False,
     'container "c" in pod "p" is waiting to start: trying and failing to pull image'),
    ({"containerStatuses": [{"name": "c", "state": {"waiting": {"reason": "ErrImagePull"}}}]}, False,
     'container "c" in pod "p" is waiting to start: image can\'t be pulled'),
    ({"containerStatuses": [{"name": "c", "state": {"terminated": {}}}]}, False,
     'container "c" in pod "p" is terminated'),
    ({"containerStatuses": [{"name": "c", "state": {}}]}, False,
     'container "c" in pod "p" is waiting to start - no logs yet'),
])
def test_log_container_id_errors(status: dict, previous: bool, message: str) -> None:
    with pytest.raises(ValueError) as err:
        log_container_id(status, "c", "p", previous)
    assert str(err.value) == message
