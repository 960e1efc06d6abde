"""The agent's log lines on their streams (component-base's output routing): without splitStream everything on
stderr; with it info lines on stdout and the rest on stderr, split as upstream's text and json formats split them;
infoBufferSize holding stdout's lines until the buffer is full, the flush daemon's period or exit. Checked on real
pipes and a real process's stdout and stderr. The settings themselves: test_logging_options.py."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kopflet.logs import routing, setup
from kopflet.logs.verbosity import v

REPO = Path(__file__).resolve().parents[2]

# --- the rules: which stream, how much buffer, how often flushed ----------------------------------------------

@pytest.mark.parametrize(("log_format", "levelno", "split", "stream"), [
    # without splitStream everything goes to stderr, both formats
    ("text", logging.INFO, False, routing.ERROR),
    ("json", v(2), False, routing.ERROR),
    ("json", logging.ERROR, False, routing.ERROR),
    # text: klogMsgRouter, only I lines to the info stream
    ("text", logging.INFO, True, routing.INFO),
    ("text", v(2), True, routing.INFO),
    ("text", logging.DEBUG, True, routing.INFO),
    ("text", 1, True, routing.INFO),
    ("text", logging.WARNING, True, routing.ERROR),
    ("text", logging.ERROR, True, routing.ERROR),
    ("text", logging.CRITICAL, True, routing.ERROR),
    # json: zap's tee at ErrorLevel; warnings are info lines under this format
    ("json", logging.INFO, True, routing.INFO),
    ("json", v(5), True, routing.INFO),
    ("json", logging.WARNING, True, routing.INFO),
    ("json", logging.ERROR, True, routing.ERROR),
    ("json", logging.CRITICAL, True, routing.ERROR),
])
def test_stream_of(log_format: str, levelno: int, split: bool, stream: str) -> None:
    assert routing.stream_of(log_format, levelno, split) == stream


@pytest.mark.parametrize(("split", "size", "expected"), [
    (False, 65536, 0),  # a buffer only for a split info stream
    (True, 0, 0),
    (True, -1024, 0),  # upstream buffers only a positive size
    (True, 1, 1),
    (True, 65536, 65536),
    (True, 2 * 2**30, 2 * 2**30),
    (True, 5 * 2**30, 2 * 2**30),  # capped, as both factories cap it
])
def test_buffer_size(split: bool, size: int, expected: int) -> None:
    assert routing.buffer_size(split, size) == expected


@pytest.mark.parametrize(("log_format", "frequency", "period"), [
    ("text", 5.0, 5.0), ("text", 120.0, 120.0), ("json", 5.0, 5.0), ("json", 120.0, 30.0), ("json", 0.5, 0.5),
])
def test_flush_period(log_format: str, frequency: float, period: float) -> None:
    assert routing.flush_period(log_format, frequency) == period


# --- the buffer: upstream's bufferedWriter ---------------------------------------------------------------------

class Recording(io.StringIO):
    """A stream that keeps each write apart, to see which writes reached it."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)


@pytest.mark.parametrize(("size", "lines", "written"), [
    # held while they fit
    (10, ["abc", "def"], []),
    # exactly full is still held
    (6, ["abc", "def"], []),
    # the line that does not fit flushes what is held first, then is held itself
    (6, ["abc", "def", "g"], ["abcdef"]),
    (6, ["abcd", "efg"], ["abcd"]),
    # a line larger than the whole buffer: what is held first, then the line itself, straight through
    (4, ["ab", "cdefgh"], ["ab", "cdefgh"]),
    (4, ["abcdefgh", "ij"], ["abcdefgh"]),
    # bytes, not characters
    (4, ["é", "é", "x"], ["éé"]),
])
def test_buffered_stream(size: int, lines: list[str], written: list[str]) -> None:
    out = Recording()
    buffered = setup.BufferedStream(out, size)
    for line in lines:
        buffered.write(line)
    assert out.writes == written
    held = "".join(lines)[len("".join(written)):]
    buffered.flush()
    assert out.writes == written + ([held] if held else [])
    assert buffered.buffered == 0


# --- the handler on real pipes ---------------------------------------------------------------------------------

class Pipe:
    """A pipe whose write end is a text stream (block-buffered, as stdout to a pipe is) and whose read end is read
    without waiting."""

    def __init__(self) -> None:
        read, write = os.pipe()
        os.set_blocking(read, False)
        self.read_fd = read
        self.stream = os.fdopen(write, "w", encoding="utf-8")

    def read(self) -> str:
        chunks = []
        while True:
            try:
                chunk = os.read(self.read_fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks).decode()

    def lines(self) -> list[str]:
        return self.read().splitlines()

    def close(self) -> None:
        self.stream.close()
        os.close(self.read_fd)


@pytest.fixture
def pipes() -> Iterator[tuple[Pipe, Pipe]]:
    stdout, stderr = Pipe(), Pipe()
    yield stdout, stderr
    stdout.close()
    stderr.close()


@pytest.fixture
def fresh_logging() -> Iterator[None]:
    root, quiet = logging.getLogger(), logging.getLogger("asyncio")
    saved = (root.handlers[:], root.level, quiet.handlers[:], quiet.propagate)
    yield
    for handler in root.handlers:
        if isinstance(handler, setup.KopfletHandler):
            handler.close()
    root.handlers[:], quiet.handlers[:] = saved[0], saved[2]
    root.setLevel(saved[1])
    quiet.propagate = saved[3]


LOG = logging.getLogger("kopflet.test_log_routing")


def _log_one_of_each() -> None:
    LOG.info("info line")
    LOG.log(v(2), "v2 line")
    LOG.warning("warning line")
    LOG.error("error line")
    LOG.critical("critical line")


def _messages(lines: list[str]) -> list[str]:
    return [line.rsplit("] ", 1)[-1] if not line.startswith("{") else line.split('"msg":"')[1].split('"')[0]
            for line in lines]


@pytest.mark.usefixtures("fresh_logging")
@pytest.mark.parametrize(("log_format", "split", "out", "err"), [
    ("text", False, [], ["info line", "v2 line", "warning line", "error line", "critical line"]),
    ("json", False, [], ["info line", "v2 line", "warning line", "error line", "critical line"]),
    ("text", True, ["info line", "v2 line"], ["warning line", "error line", "critical line"]),
    ("json", True, ["info line", "v2 line", "warning line"], ["error line", "critical line"]),
])
def test_records_land_on_their_stream(pipes: tuple[Pipe, Pipe], log_format: str, split: bool, out: list[str],
                                      err: list[str]) -> None:
    stdout, stderr = pipes
    setup.apply(log_format, 2, (), stream=stderr.stream, info_stream=stdout.stream, split_stream=split)
    _log_one_of_each()
    # unbuffered: each line is in the pipe at once, though the text streams themselves are block-buffered
    assert _messages(stdout.lines()) == out
    assert _messages(stderr.lines()) == err


@pytest.mark.usefixtures("fresh_logging")
def test_the_info_buffer_holds_info_lines_until_flushed(pipes: tuple[Pipe, Pipe]) -> None:
    stdout, stderr = pipes
    handler = setup.apply("json", 0, (), stream=stderr.stream, info_stream=stdout.stream, split_stream=True,
                          info_buffer_bytes=64 * 1024, flush_frequency=3600.0)
    LOG.info("held")
    LOG.warning("held too")
    LOG.error("not held")
    assert stdout.read() == ""
    assert _messages(stderr.lines()) == ["not held"]  # errors are never held
    handler.flush()  # klog.Flush
    assert _messages(stdout.lines()) == ["held", "held too"]


@pytest.mark.usefixtures("fresh_logging")
def test_a_full_buffer_is_written_before_the_line_that_does_not_fit(pipes: tuple[Pipe, Pipe]) -> None:
    stdout, stderr = pipes
    setup.apply("text", 0, (), stream=stderr.stream, info_stream=stdout.stream, split_stream=True,
                info_buffer_bytes=400, flush_frequency=3600.0)
    LOG.info("a" * 100)
    LOG.info("b" * 100)
    assert stdout.read() == ""
    LOG.info("c" * 100)  # three lines of ~160 bytes do not fit in 400: the first two are written whole
    assert [line[-100:] for line in stdout.lines()] == ["a" * 100, "b" * 100]


@pytest.mark.usefixtures("fresh_logging")
def test_the_flush_daemon_writes_the_buffer_every_flush_frequency(pipes: tuple[Pipe, Pipe]) -> None:
    stdout, stderr = pipes
    handler = setup.apply("text", 0, (), stream=stderr.stream, info_stream=stdout.stream, split_stream=True,
                          info_buffer_bytes=64 * 1024, flush_frequency=0.05)
    assert handler.daemon is not None and handler.daemon.running and handler.daemon.period == 0.05
    LOG.info("flushed by the daemon")
    deadline = time.monotonic() + 5.0
    seen: list[str] = []
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
        seen = stdout.lines()
    assert _messages(seen) == ["flushed by the daemon"]


@pytest.mark.usefixtures("fresh_logging")
@pytest.mark.parametrize(("split", "size"), [(False, 65536), (True, 0), (True, -1)])
def test_no_buffer_no_flush_daemon(pipes: tuple[Pipe, Pipe], split: bool, size: int) -> None:
    stdout, stderr = pipes
    handler = setup.apply("text", 0, (), stream=stderr.stream, info_stream=stdout.stream, split_stream=split,
                          info_buffer_bytes=size)
    assert handler.daemon is None
    LOG.info("at once")
    assert _messages((stdout if split else stderr).lines()) == ["at once"]


@pytest.mark.usefixtures("fresh_logging")
def test_a_second_apply_writes_the_first_ones_buffer_and_stops_its_daemon(pipes: tuple[Pipe, Pipe]) -> None:
    stdout, stderr = pipes
    first = setup.apply("text", 0, (), stream=stderr.stream, info_stream=stdout.stream, split_stream=True,
                        info_buffer_bytes=4096, flush_frequency=3600.0)
    LOG.info("from the first")
    setup.apply("text", 0, (), stream=stderr.stream, info_stream=stdout.stream)
    assert _messages(stdout.lines()) == ["from the first"]
    assert first.daemon is not None
    first.daemon._thread.join(timeout=5.0)
    assert not first.daemon.running


SCRIPT = """
import logging, sys
sys.path.insert(0, {repo!r})
from kopflet.logs import setup
setup.apply({log_format!r}, 0, (), split_stream=True, info_buffer_bytes=1 << 20, flush_frequency=3600.0)
log = logging.getLogger("kopflet.exit")
log.info("buffered at exit")
log.error("an error")
{end}
"""


@pytest.mark.parametrize("end", ["", "sys.exit(3)", "raise SystemExit(0)"])
@pytest.mark.parametrize("log_format", ["text", "json"])
def test_the_buffer_is_written_at_exit(log_format: str, end: str) -> None:
    """upstream's logs.FlushLogs at exit: Python's logging.shutdown flushes the handler (real stdout and stderr)."""
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(repo=str(REPO), log_format=log_format, end=end)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert "buffered at exit" in done.stdout and "an error" not in done.stdout
    assert "an error" in done.stderr and "buffered at exit" not in done.stderr
