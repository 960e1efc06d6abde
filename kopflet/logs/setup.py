"""Logging set up from the configuration, once, before the operator starts (upstream logsapi.ValidateAndApply).

The ``kopflet`` command calls `apply` instead of ``kopf.configure``: one handler on the root logger, in the
``--logging-format`` (`kopflet.logs.formats`), holding back what ``-v`` and ``--vmodule`` do not show
(`kopflet.logs.verbosity`). Every line goes to stderr, written at once (upstream's text and json formats both write
to stderr; under systemd that is the journal), unless the format's ``splitStream`` option sends info lines to
stdout (`kopflet.logs.routing`); with ``infoBufferSize`` those are held in a buffer (`BufferedStream`: upstream's
bufferedWriter, zap's BufferedWriteSyncer) that a daemon thread flushes every ``flushFrequency`` (klog's flush
daemon), as does the handler's flush at exit (``logging.shutdown``, upstream's ``logs.FlushLogs``). As
``kopf.configure`` did for ``--debug``, asyncio's own logger is silenced below ``-v=6``. Under ``kopf run`` Kopf's
options configure logging instead, and this module is not used.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TextIO

from kopflet.logs import routing
from kopflet.logs.formats import formatter
from kopflet.logs.verbosity import VerbosityFilter, root_level

ASYNCIO_DEBUG_VERBOSITY = 6
"""From this verbosity asyncio's debug logs are written too (Kopf's ``--debug``)."""


class BufferedStream:
    """Lines held in memory up to `size` bytes, then written on: upstream's bufferedWriter (text) and zap's
    BufferedWriteSyncer (json). A line that does not fit in what is left flushes the buffer first, so no line is
    ever written in parts; one larger than the whole buffer is written straight through. Not thread-safe: the
    handler's lock guards it."""

    def __init__(self, stream: TextIO, size: int) -> None:
        self.stream = stream
        self.size = size
        self._lines: list[str] = []
        self._buffered = 0

    @property
    def buffered(self) -> int:
        """Bytes waiting for a flush."""
        return self._buffered

    def _bytes(self, text: str) -> int:
        return len(text.encode(getattr(self.stream, "encoding", None) or "utf-8", errors="replace"))

    def write(self, text: str) -> None:
        length = self._bytes(text)
        if length > self.size - self._buffered and self._buffered:
            self.flush()
        if length > self.size:
            self.stream.write(text)
            self.stream.flush()
            return
        self._lines.append(text)
        self._buffered += length

    def flush(self) -> None:
        """Write what is held (dropped if the stream fails, as bufio's error leaves it unwritten for good)."""
        lines, self._lines, self._buffered = self._lines, [], 0
        if lines:
            self.stream.write("".join(lines))
        self.stream.flush()


class FlushDaemon:
    """klog's flush daemon (StartFlushDaemon): a daemon thread calling `flush` every `period` seconds, so buffered
    lines wait at most that long even while the event loop is busy."""

    def __init__(self, flush: Callable[[], None], period: float) -> None:
        self._flush = flush
        self.period = period
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kopflet-log-flush", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self._flush()

    def stop(self) -> None:
        """Ends the loop; not joined (the thread may be waiting for the lock of whoever calls this)."""
        self._stop.set()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()


class KopfletHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The agent's handler: each line to the error stream (``self.stream``), or with `split_stream` the format's
    info lines to `info_stream` (buffered when `buffer_size` is positive). Marked so that a second `apply`
    replaces it."""

    def __init__(self, stream: TextIO, *, log_format: str = "text", split_stream: bool = False,
                 info_stream: TextIO | None = None, buffer_size: int = 0) -> None:
        super().__init__(stream)
        self.log_format = log_format
        self.split_stream = split_stream
        info = info_stream if info_stream is not None else sys.stdout
        self.info: TextIO | BufferedStream | None = None
        if split_stream:
            self.info = BufferedStream(info, buffer_size) if buffer_size > 0 else info
        self.daemon: FlushDaemon | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + self.terminator
            if self.info is not None and routing.stream_of(self.log_format, record.levelno,
                                                           self.split_stream) == routing.INFO:
                self.info.write(line)
                if not isinstance(self.info, BufferedStream):
                    self.info.flush()
            else:
                self.stream.write(line)
                self.stream.flush()
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)

    def flush(self) -> None:
        """Both streams, the info buffer written out (klog.Flush; Python's logging.shutdown calls it at exit)."""
        with self.lock:
            try:
                if self.info is not None:
                    self.info.flush()
                if self.stream and hasattr(self.stream, "flush"):
                    self.stream.flush()
            except (OSError, ValueError):
                pass  # upstream ignores flush errors (bufferedWriter.Flush, zap's Sync on stderr)

    def start_flushing(self, period: float) -> None:
        """klog.StartFlushDaemon, when there is a buffer to flush."""
        if isinstance(self.info, BufferedStream) and self.daemon is None:
            self.daemon = FlushDaemon(self.flush, period)
            self.daemon.start()

    def close(self) -> None:
        if self.daemon is not None:
            self.daemon.stop()
        self.flush()
        super().close()


def apply(log_format: str, verbosity: int, vmodule: Sequence[tuple[str, int]] = (),
          stream: TextIO | None = None, *, split_stream: bool = False, info_buffer_bytes: int = 0,
          flush_frequency: float = 5.0, info_stream: TextIO | None = None) -> KopfletHandler:
    """Route every log record through one handler with the format, verbosity and output routing of the
    configuration (`stream` and `info_stream` stand for stderr and stdout)."""
    handler = KopfletHandler(sys.stderr if stream is None else stream, log_format=log_format,
                             split_stream=split_stream, info_stream=info_stream,
                             buffer_size=routing.buffer_size(split_stream, info_buffer_bytes))
    handler.setFormatter(formatter(log_format))
    handler.addFilter(VerbosityFilter(verbosity, vmodule))
    root = logging.getLogger()
    # Any handler set up before (Kopf's, logging.basicConfig's, an earlier apply's) would write lines twice; an
    # earlier apply's is closed, so its buffer is written and its flush daemon ends.
    previous = [old for old in root.handlers if isinstance(old, KopfletHandler)]
    root.handlers[:] = [handler]
    for old in previous:
        old.close()
    root.setLevel(root_level(verbosity, vmodule))
    quiet = logging.getLogger("asyncio")
    quiet.propagate = verbosity >= ASYNCIO_DEBUG_VERBOSITY
    quiet.handlers[:] = [] if quiet.propagate else [logging.NullHandler()]
    handler.start_flushing(routing.flush_period(log_format, flush_frequency))
    return handler


__all__ = ["ASYNCIO_DEBUG_VERBOSITY", "BufferedStream", "FlushDaemon", "KopfletHandler", "apply"]
