"""
Container logs for the kubelet API's ``/containerLogs/{ns}/{pod}/{container}``: the query options, the CRI
log format and the formatting rules, as upstream (`pkg/kubelet/server/server.go` getContainerLogs,
`pkg/api/v1/validation` ValidatePodLogOptions, `k8s.io/cri-client/pkg/logs/logs.go` ReadLogs / logWriter,
`findTailLineStartIndex`).

Pure: no asyncio, no clock, no I/O. "now" is a parameter; the file reading, following and rotation live in
`kopflet.logs.reader`.

- `parse_log_options` reads the URL query the apiserver sends into `LogOptions`, raising `LogOptionsError`
  (a ValueError carrying the HTTP status upstream answers with: 400 for an undecodable query, 422 for an
  invalid one).
- `parse_cri_line` parses one line of a containerd CRI log file into a `LogEntry`; `format_timestamp` writes
  its timestamp back in upstream's fixed-width layout.
- `LogFormatter` turns raw file bytes into response bytes incrementally (since, stream, timestamps,
  limitBytes, the non-follow tailLines cap), so one code path serves a plain read and ``follow``.
- `tail_start_offset` / `scan_tail_block` find where the last N lines of a file start, a block at a time.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Mapping, Sequence
from typing import Any

STREAM_ALL = "All"
STREAM_STDOUT = "Stdout"
STREAM_STDERR = "Stderr"
STREAMS = (STREAM_ALL, STREAM_STDERR, STREAM_STDOUT)  # v1.LogStream*, sorted as upstream lists them

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_ZERO_TIME = dt.datetime(1, 1, 1, tzinfo=dt.UTC)  # Go's time.Time{}: what an empty sinceTime decodes to


class LogOptionsError(ValueError):
    """A bad containerLogs query; `status` is what upstream answers: 400 undecodable, 422 invalid."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclasses.dataclass(frozen=True, kw_only=True)
class LogOptions:
    """The v1.PodLogOptions fields the kubelet acts on (``container`` is in the URL path instead)."""

    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    tail_lines: int | None = None
    since_seconds: int | None = None
    since_time: dt.datetime | None = None
    limit_bytes: int | None = None
    stream: str = STREAM_ALL


# --- query parsing ------------------------------------------------------------------------------------------

_INT_RE = re.compile(r"[+-]?[0-9]+", re.ASCII)
_RFC3339_RE = re.compile(
    r"(?P<year>[0-9]{4})-(?P<month>[0-9]{2})-(?P<day>[0-9]{2})T(?P<hour>[0-9]{2}):(?P<minute>[0-9]{2})"
    r":(?P<second>[0-9]{2})(?:\.(?P<frac>[0-9]{1,9}))?(?P<zone>Z|[+-][0-9]{2}:[0-9]{2})",
    re.ASCII,
)


def _first(query: Mapping[str, Sequence[str]], name: str) -> str | None:
    """The first value of a parameter, None when absent (url.Values semantics: later duplicates are ignored)."""
    values = query.get(name)
    return values[0] if values else None


def _go_bool(value: str | None) -> bool:
    """apimachinery `Convert_Slice_string_To_bool`: only absent, "0" and "false" (any case) are false.

    Deliberately not strconv.ParseBool: the kubelet decodes the query through the generated url.Values
    conversion, which takes any other value ("", "yes", "True") as true.
    """
    return value is not None and value != "0" and value.lower() != "false"


def _go_int64(name: str, value: str | None) -> int | None:
    """strconv.ParseInt(value, 10, 64): ASCII digits with an optional sign, no spaces or underscores."""
    if value is None:
        return None
    if not _INT_RE.fullmatch(value):
        raise LogOptionsError(f'{name}: strconv.ParseInt: parsing "{value}": invalid syntax', status=400)
    number = int(value)
    if not _INT64_MIN <= number <= _INT64_MAX:
        raise LogOptionsError(f'{name}: strconv.ParseInt: parsing "{value}": value out of range', status=400)
    return number


def _parse_rfc3339(text: str) -> tuple[dt.datetime, int]:
    """A Go RFC3339 / RFC3339Nano timestamp: (aware datetime truncated to µs, nanoseconds within the second).

    Raises ValueError for anything Go's time.Parse would refuse (wrong shape, out-of-range fields).
    """
    m = _RFC3339_RE.fullmatch(text)
    if m is None:
        raise ValueError(f"cannot parse {text!r} as RFC3339")
    zone = m["zone"]
    if zone == "Z":
        tz = dt.UTC
    else:
        hours, minutes = int(zone[1:3]), int(zone[4:6])
        if hours > 23 or minutes > 59:
            raise ValueError(f"time zone offset out of range in {text!r}")
        offset = dt.timedelta(hours=hours, minutes=minutes)
        tz = dt.timezone(-offset if zone[0] == "-" else offset)
    nanos = int((m["frac"] or "0").ljust(9, "0"))
    stamp = dt.datetime(int(m["year"]), int(m["month"]), int(m["day"]), int(m["hour"]), int(m["minute"]),
                        int(m["second"]), nanos // 1000, tzinfo=tz)
    return stamp, nanos


def _since_time(value: str | None) -> dt.datetime | None:
    """metav1.Time.UnmarshalQueryParameter: "" and "null" give the zero time (still "set"), else RFC3339."""
    if value is None:
        return None
    if value in ("", "null"):
        return _ZERO_TIME
    try:
        return _parse_rfc3339(value)[0]
    except ValueError as e:
        raise LogOptionsError(f'sinceTime: parsing time "{value}" as RFC3339: {e}', status=400) from None


def parse_log_options(query: Mapping[str, Sequence[str]]) -> LogOptions:
    """The options of one containerLogs request, decoded and validated as the kubelet does.

    Mirrors getContainerLogs: the legacy ``tail`` parameter overrides ``tailLines`` ("all" removes it), the
    query decodes into v1.PodLogOptions (400 on failure), then ValidatePodLogOptions (422, all errors at once).
    ``stream`` is accepted as with the PodLogsQuerySplitStreams gate on; an absent one means "All".
    """
    tail_lines_raw = _first(query, "tailLines")
    legacy_tail = _first(query, "tail")
    if legacy_tail:
        tail_lines_raw = None if legacy_tail == "all" else legacy_tail

    tail_lines = _go_int64("tailLines", tail_lines_raw)
    since_seconds = _go_int64("sinceSeconds", _first(query, "sinceSeconds"))
    limit_bytes = _go_int64("limitBytes", _first(query, "limitBytes"))
    since_time = _since_time(_first(query, "sinceTime"))
    stream = _first(query, "stream")

    errors: list[str] = []
    if tail_lines is not None and tail_lines < 0:
        errors.append(f"tailLines: Invalid value: {tail_lines}: must be greater than or equal to 0")
    if limit_bytes is not None and limit_bytes < 1:
        errors.append(f"limitBytes: Invalid value: {limit_bytes}: must be greater than 0")
    if since_seconds is not None and since_time is not None:
        errors.append("Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified")
    elif since_seconds is not None and since_seconds < 1:
        errors.append(f"sinceSeconds: Invalid value: {since_seconds}: must be greater than 0")
    if stream is not None:
        if stream not in STREAMS:
            supported = ", ".join(f'"{s}"' for s in STREAMS)
            errors.append(f'stream: Unsupported value: "{stream}": supported values: {supported}')
        if stream != STREAM_ALL and tail_lines is not None:
            errors.append("Forbidden: `tailLines` and specific `stream` are mutually exclusive for now")
    if errors:
        # utilerrors.NewAggregate: one error as is, several as "[a, b]".
        raise LogOptionsError(errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]", status=422)

    return LogOptions(
        follow=_go_bool(_first(query, "follow")),
        previous=_go_bool(_first(query, "previous")),
        timestamps=_go_bool(_first(query, "timestamps")),
        tail_lines=tail_lines,
        since_seconds=since_seconds,
        since_time=since_time,
        limit_bytes=limit_bytes,
        stream=stream if stream is not None else STREAM_ALL,
    )


def since_cutoff(opts: LogOptions, now: dt.datetime) -> dt.datetime | None:
    """Entries older than this are skipped (upstream NewLogOptions: now - sinceSeconds, or a later sinceTime)."""
    cutoff = now - dt.timedelta(seconds=opts.since_seconds) if opts.since_seconds is not None else None
    if opts.since_time is not None and (cutoff is None or opts.since_time > cutoff):
        cutoff = opts.since_time
    return cutoff


# --- the CRI log format -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class LogEntry:
    """One line of a CRI log file: ``<RFC3339Nano> <stdout|stderr> <P|F>[:tags] <content>``.

    `timestamp` is truncated to microseconds (datetime's limit); `nanosecond` keeps the exact fraction of the
    second so comparisons and the output timestamp lose nothing.
    """

    timestamp: dt.datetime
    nanosecond: int
    raw_timestamp: str
    stream: str
    partial: bool
    tags: tuple[str, ...]
    content: bytes

    @property
    def epoch_ns(self) -> int:
        """Nanoseconds since the Unix epoch, exact."""
        return _epoch_ns(self.timestamp.replace(microsecond=0)) + self.nanosecond


def _epoch_ns(stamp: dt.datetime) -> int:
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.UTC)
    delta = stamp - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def parse_cri_line(line: bytes) -> LogEntry:
    """Parse one CRI log line (with or without its trailing newline), as upstream parseCRILog.

    The content keeps the line's newline for a full (F) entry; a partial (P) entry loses it, so partial
    pieces concatenate into one line. An unknown first tag counts as full. Raises ValueError with upstream's
    wording for a malformed line; callers skip such lines, as ReadLogs does.
    """
    ts_end = line.find(b" ")
    if ts_end < 0:
        raise ValueError("timestamp is not found")
    raw_timestamp = line[:ts_end].decode("ascii", "replace")
    try:
        timestamp, nanosecond = _parse_rfc3339(raw_timestamp)
    except ValueError as e:
        raise ValueError(f'unexpected timestamp format "2006-01-02T15:04:05.999999999Z07:00": {e}') from None

    rest = line[ts_end + 1:]
    stream_end = rest.find(b" ")
    if stream_end < 0:
        raise ValueError("stream type is not found")
    stream = rest[:stream_end].decode("ascii", "replace")
    if stream not in ("stdout", "stderr"):
        raise ValueError(f'unexpected stream type "{stream}"')

    rest = rest[stream_end + 1:]
    tag_end = rest.find(b" ")
    if tag_end < 0:
        raise ValueError("log tag is not found")
    tags = tuple(rest[:tag_end].decode("ascii", "replace").split(":"))  # forward compatible, as upstream
    partial = tags[0] == "P"
    content = rest[tag_end + 1:]
    if partial and content.endswith(b"\n"):
        content = content[:-1]
    return LogEntry(timestamp=timestamp, nanosecond=nanosecond, raw_timestamp=raw_timestamp, stream=stream,
                    partial=partial, tags=tags, content=content)


def format_timestamp(entry: LogEntry) -> str:
    """The entry's timestamp in upstream's RFC3339NanoFixed (``2006-01-02T15:04:05.000000000Z07:00``).

    Always nine fractional digits; the zone as the runtime wrote it, "Z" for a zero offset (Go's Z07:00).
    """
    t = entry.timestamp
    offset = t.utcoffset() or dt.timedelta(0)
    if offset:
        sign = "-" if offset < dt.timedelta(0) else "+"
        minutes = abs(offset) // dt.timedelta(minutes=1)
        zone = f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"
    else:
        zone = "Z"
    return (f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}"
            f".{entry.nanosecond:09d}{zone}")


# --- formatting ---------------------------------------------------------------------------------------------


class LogFormatter:
    """Raw CRI log bytes in, response bytes out, incrementally (upstream ReadLogs' loop and logWriter).

    `feed` takes any chunk of the file and returns what to send; an incomplete last line is buffered until
    its newline arrives. `flush` ends the input (a final line without a newline is still written, as a
    non-follow read does). Once `done` (limitBytes reached, or the non-follow tailLines cap hit) everything
    else is ignored and the caller stops reading.

    Malformed lines are skipped and counted in `skipped` (upstream logs them and continues).
    """

    def __init__(self, *, since: dt.datetime | None = None, stream: str = STREAM_ALL, timestamps: bool = False,
                 limit_bytes: int | None = None, max_entries: int | None = None) -> None:
        if stream not in STREAMS:
            raise ValueError(f"unknown stream {stream!r}")
        self._since_ns = _epoch_ns(since) if since is not None else None
        self._want = {STREAM_ALL: ("stdout", "stderr"), STREAM_STDOUT: ("stdout",),
                      STREAM_STDERR: ("stderr",)}[stream]
        self._timestamps = timestamps
        self._remaining = limit_bytes
        self._entries_left = max_entries
        self._buffer = bytearray()
        self._line_start = True  # the output is at the start of a line: the next entry gets a timestamp
        self._done = (limit_bytes is not None and limit_bytes <= 0) or (max_entries is not None and max_entries <= 0)
        self.skipped = 0

    @classmethod
    def from_options(cls, opts: LogOptions, *, now: dt.datetime) -> LogFormatter:
        """The formatter for one request; tailLines caps the entries only when not following (upstream)."""
        return cls(since=since_cutoff(opts, now), stream=opts.stream, timestamps=opts.timestamps,
                   limit_bytes=opts.limit_bytes, max_entries=None if opts.follow else opts.tail_lines)

    @property
    def done(self) -> bool:
        """Nothing more will be written: stop reading (and following)."""
        return self._done

    @property
    def pending(self) -> int:
        """Bytes of an incomplete line waiting for the rest of it."""
        return len(self._buffer)

    def feed(self, chunk: bytes) -> bytes:
        """Consume a chunk of the file; returns the output for the complete lines in it so far."""
        if self._done:
            return b""
        self._buffer += chunk
        end = self._buffer.rfind(b"\n")
        if end < 0:
            return b""
        complete = bytes(self._buffer[:end + 1])
        del self._buffer[:end + 1]
        out: list[bytes] = []
        # Split on b"\n" only: content may hold a lone "\r", which bytes.splitlines would also break at.
        for line in complete[:-1].split(b"\n"):
            self._write(line + b"\n", out)
            if self._done:
                self._buffer.clear()
                break
        return b"".join(out)

    def flush(self) -> bytes:
        """End of input: write a buffered line that never got its newline (upstream "Incomplete line")."""
        if self._done or not self._buffer:
            self._buffer.clear()
            return b""
        line = bytes(self._buffer)
        self._buffer.clear()
        out: list[bytes] = []
        self._write(line, out)
        return b"".join(out)

    def _write(self, line: bytes, out: list[bytes]) -> None:
        try:
            entry = parse_cri_line(line)
        except ValueError:
            self.skipped += 1
            return
        # Upstream counts every parsed entry against the non-follow tail cap, written or filtered.
        if self._entries_left is not None:
            self._entries_left -= 1
            if self._entries_left <= 0:
                self._done = True
        if self._since_ns is not None and entry.epoch_ns < self._since_ns:
            return
        if entry.stream not in self._want:
            return
        data = entry.content
        # Only the first piece of a line split into partial entries gets a timestamp (upstream isNewLine).
        if self._timestamps and self._line_start:
            data = format_timestamp(entry).encode() + b" " + data
        self._line_start = not entry.content or entry.content.endswith(b"\n")
        if self._remaining is not None:
            data = data[:self._remaining]
            self._remaining -= len(data)
            if self._remaining <= 0:
                self._done = True
        if data:
            out.append(data)


# --- tail ---------------------------------------------------------------------------------------------------


def scan_tail_block(block: bytes, newlines_needed: int) -> tuple[int | None, int]:
    """Look for the `newlines_needed`-th newline from the end of `block` (a file read backwards blockwise).

    Returns (offset just after it within the block, 0) when found, else (None, newlines still needed from
    the blocks before this one).
    """
    if newlines_needed <= 0:
        return len(block), 0
    count = block.count(b"\n")
    if count < newlines_needed:
        return None, newlines_needed - count
    pos = len(block)
    for _ in range(newlines_needed):
        pos = block.rfind(b"\n", 0, pos)
    return pos + 1, 0


def tail_start_offset(data: bytes, n: int | None) -> int:
    """Where the last `n` lines of `data` start (upstream findTailLineStartIndex).

    Counts raw newlines, so an unterminated last line is not a line of its own but comes along with the
    last `n` complete ones; n=0 gives the end of the last complete line; None or negative gives 0 (all).
    """
    if n is None or n < 0:
        return 0
    offset, _ = scan_tail_block(data, n + 1)
    return 0 if offset is None else offset


# ------------------------------------------------------------------------------- which container's log


def log_container_id(pod_status: Mapping[str, Any], container: str, pod_name: str, previous: bool) -> str:
    """The runtime id of the container instance whose log a request reads, from the pod's API status.

    Mirrors upstream `validateContainerLogStatus` (pkg/kubelet/kubelet_pods.go), including its messages,
    which `kubectl logs` shows as they are; raises ValueError (the kubelet answers 400 Bad Request).
    """
    status = next((s for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses")
                   for s in pod_status.get(key) or () if s.get("name") == container), None)
    if status is None:
        raise ValueError(f'container "{container}" in pod "{pod_name}" is not available')
    state, last = status.get("state") or {}, (status.get("lastState") or {}).get("terminated")
    last_id = (last or {}).get("containerID") or ""
    if previous:
        if not last_id:
            raise ValueError(f'previous terminated container "{container}" in pod "{pod_name}" not found')
        found = last_id
    elif "running" in state:
        found = status.get("containerID") or ""
    elif "terminated" in state:
        found = (state["terminated"] or {}).get("containerID") or last_id
        if not found:
            raise ValueError(f'container "{container}" in pod "{pod_name}" is terminated')
    elif last is not None:
        if not last_id:
            raise ValueError(f'container "{container}" in pod "{pod_name}" is terminated')
        found = last_id
    elif "waiting" in state:
        reason = (state["waiting"] or {}).get("reason") or ""
        detail = {"ErrImagePull": "image can't be pulled",
                  "ImagePullBackOff": "trying and failing to pull image"}.get(reason, reason)
        raise ValueError(f'container "{container}" in pod "{pod_name}" is waiting to start: {detail}')
    else:
        raise ValueError(f'container "{container}" in pod "{pod_name}" is waiting to start - no logs yet')
    return found.partition("://")[2] or found
