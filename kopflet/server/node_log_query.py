"""The node log query's rules (upstream pkg/kubelet/kubelet_server_journal.go, _linux.go, kubelet.go Run's logServer).

``GET /logs/?query=<service>|<file>`` with ``enableSystemLogQuery`` (and ``enableSystemLogHandler``, the NodeLogQuery
gate: GA and locked on at v1.37.1). Here: the query's parameters parsed and validated with upstream's field errors
and their aggregate text (`parse`, `validate`), the ``journalctl`` argv (getLoggingCmd), the files a service's logs
may be in (heuristicsCopyFileLogs), and the texts written into the stream. Pure: the one check that needs the disk
(a file query's ``root.Stat``) is handed in as its error text.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta, timezone

from kopflet.gotext import go_json, go_quote

MAX_TAIL_LINES = 100000  # maxTailLines
MAX_SERVICE_LENGTH = 256  # maxServiceLength
MAX_SERVICES = 4  # maxServices
NODE_LOG_DIR = "/var/log/"  # nodeLogDir
TIMEOUT = 30.0
"""Copy's deadline across the whole answer (context.WithDeadline 30s): journalctl runs and file copies."""
CONTENT_TYPE = "text/plain;charset=UTF-8"  # journalServer.ServeHTTP
PATH_NOT_ALLOWED = "path not allowed in query mode"  # kubelet.go Run: 406
JOURNAL_NOT_AVAILABLE = "\nerror: journal output not available\n"  # copyServiceLogs: journalctl did not run
_UNSAFE = re.compile(r"[^a-zA-Z\-_.:0-9@]+")  # reServiceNameUnsafeCharacters
_ATOI = re.compile(r"[+-]?[0-9]+")  # strconv.Atoi's syntax (no spaces, no underscores)
_RFC3339 = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-]\d{2}:\d{2})")
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 63) - 1


class QueryErrors(ValueError):
    """A field.ErrorList; ``str()`` is its ToAggregate().Error() text, ``status`` the answer's (400 or 406)."""

    def __init__(self, errors: Sequence[str], status: int) -> None:
        super().__init__(aggregate(errors))
        self.errors, self.status = tuple(errors), status


def aggregate(errors: Sequence[str]) -> str:
    """utilerrors' aggregate text: duplicates dropped; one error alone, else ``[a, b]``."""
    unique = list(dict.fromkeys(errors))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


def _value(value: object) -> str:
    """field.Error's bad value: a string %q, anything else (Go int, slices, *time.Time) as json.Marshal writes it."""
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, datetime):
        return go_json(go_rfc3339(value))
    return go_json(value)


def invalid(path: str, value: object, detail: str) -> str:
    """field.Invalid(path, value, detail).Error()."""
    return f"{path}: Invalid value: {_value(value)}: {detail}"


def required(path: str, detail: str) -> str:
    """field.Required(path, detail).Error()."""
    return f"{path}: Required value: {detail}"


def too_many(path: str, actual: int, maximum: int) -> str:
    """field.TooMany(path, actual, maximum).Error()."""
    return f"{path}: Too many: {actual}: must have at most {maximum} {'item' if maximum == 1 else 'items'}"


# ------------------------------------------------------------------------------------------------ Go's parsers

def atoi(text: str) -> int:
    """strconv.Atoi (64-bit); ValueError with its error text."""
    if not _ATOI.fullmatch(text):
        raise ValueError(f"strconv.Atoi: parsing {go_quote(text)}: invalid syntax")
    value = int(text)
    if not _INT_MIN <= value <= _INT_MAX:
        raise ValueError(f"strconv.Atoi: parsing {go_quote(text)}: value out of range")
    return value


def parse_rfc3339(text: str) -> datetime:
    """time.Parse(time.RFC3339, text), keeping the offset written; ValueError when Go would refuse it."""
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise ValueError(text)
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction, zone = match.group(7) or "", match.group(8)
    if zone == "Z":
        tz = UTC
    else:
        hours, minutes = int(zone[1:3]), int(zone[4:6])
        if hours > 23 or minutes > 59:
            raise ValueError(text)
        sign = -1 if zone[0] == "-" else 1
        tz = timezone(sign * timedelta(hours=hours, minutes=minutes))
    micro = int((fraction[1:] + "000000")[:6]) if fraction else 0
    try:
        value = datetime(year, month, day, hour, minute, second, micro, tzinfo=tz)
    except ValueError:
        raise ValueError(text) from None
    return value.replace(microsecond=micro)


def go_rfc3339(value: datetime) -> str:
    """A time as json.Marshal writes it (RFC3339Nano: trailing zeros of the fraction dropped; Z for UTC)."""
    text = value.strftime("%Y-%m-%dT%H:%M:%S")
    if value.microsecond:
        text += "." + f"{value.microsecond:06d}".rstrip("0")
    offset = value.utcoffset() or timedelta(0)
    if offset == timedelta(0) and value.tzinfo is UTC:
        return text + "Z"
    total = int(offset.total_seconds()) // 60
    sign = "-" if total < 0 else "+"
    return text + f"{sign}{abs(total) // 60:02d}:{abs(total) % 60:02d}"


def journal_date(value: datetime) -> str:
    """The time in dateLayout ``2006-1-2 15:4:5``: in the offset it was written with, month, day, minute and
    second unpadded, the hour padded (Go's ``15``)."""
    return f"{value.year}-{value.month}-{value.day} {value.hour:02d}:{value.minute}:{value.second}"


def pattern_error(pattern: str) -> str | None:
    """regexp/syntax.Parse(pattern, syntax.Perl)'s error text, or None. Approximated with Python's re: the
    patterns both refuse are refused, in Go's wording where the reason is the same."""
    try:
        re.compile(pattern)
    except re.error as exc:
        return f"error parsing regexp: {exc.msg}: `{pattern}`"
    return None


# ---------------------------------------------------------------------------------------------- the request

@dataclasses.dataclass(frozen=True)
class Options:
    """upstream's options: only those given are set."""

    since_time: datetime | None = None
    until_time: datetime | None = None
    tail_lines: int | None = None
    boot: int | None = None
    pattern: str = ""

    @property
    def empty(self) -> bool:
        return self == Options()


@dataclasses.dataclass(frozen=True)
class NodeLogQuery:
    """nodeLogQuery: the services, the files (a query with ``/`` or ``\\``), the options."""

    services: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    options: Options = Options()


def parse(query: Mapping[str, Sequence[str]]) -> NodeLogQuery | None:
    """newNodeLogQuery: the request, None when there is nothing to query (the file server answers then);
    QueryErrors (400) with every parameter's error."""
    errors: list[str] = []
    services: list[str] = []
    files: list[str] = []
    queries = list(query.get("query", ()))
    for value in queries:
        if "/" in value or "\\" in value:
            files.append(value)
        elif value.strip():  # Go's TrimSpace; a blank query is no service
            services.append(value)
    if "query" in query and not files and not services:
        errors.append(invalid("query", queries, "may not be empty"))

    def first(name: str) -> str:
        return (list(query.get(name, ())) or [""])[0]  # url.Values.Get

    times: dict[str, datetime | None] = {}
    for name in ("sinceTime", "untilTime"):
        times[name] = None
        if text := first(name):
            try:
                times[name] = parse_rfc3339(text)
            except ValueError:
                errors.append(invalid(name, text, "invalid time format"))
    numbers: dict[str, int | None] = {}
    for name in ("boot", "tailLines"):
        numbers[name] = None
        if text := first(name):
            try:
                numbers[name] = atoi(text)
            except ValueError as exc:
                errors.append(invalid(name, text, str(exc)))
    if errors:
        raise QueryErrors(errors, 400)
    request = NodeLogQuery(tuple(services), tuple(files), Options(
        since_time=times["sinceTime"], until_time=times["untilTime"], tail_lines=numbers["tailLines"],
        boot=numbers["boot"], pattern=first("pattern")))
    return None if request == NodeLogQuery() else request


def safe_service_name(name: str) -> str | None:
    """safeServiceName's error text, or None."""
    if len(name.encode()) > MAX_SERVICE_LENGTH:
        return f"length must be less than {MAX_SERVICE_LENGTH}"
    if _UNSAFE.search(name):
        return "input contains unsupported characters"
    return None


def validate(request: NodeLogQuery, file_stat_error: str | None = None) -> list[str]:
    """nodeLogQuery.validate's errors (answered 406), in its order. `file_stat_error`: the error of
    ``os.OpenRoot(nodeLogDir).Stat(file)`` when one file is queried (the I/O side looks)."""
    errors: list[str] = []
    for service in request.services:
        if (problem := safe_service_name(service)) is not None:
            errors.append(invalid("query", service, problem))
    if len(request.services) > MAX_SERVICES:
        errors.append(too_many("query", len(request.services), MAX_SERVICES))
    files, services, options = list(request.files), list(request.services), request.options
    if not files and not services:
        errors.append(required("query", "cannot be empty with options"))
    elif files and services:
        # fmt's %v of two []string, joined: "[a/b], [c]", quoted as a string value
        errors.append(invalid("query", f"[{' '.join(files)}], [{' '.join(services)}]",
                              "cannot specify a file and service"))
    elif len(files) > 1:
        errors.append(invalid("query", files, "cannot specify more than one file"))
    elif files and not options.empty:
        errors.append(invalid("query", files, "cannot specify file with options"))
    elif files and file_stat_error is not None:
        errors.append(invalid("query", files, file_stat_error))
    if options.since_time and options.until_time and options.since_time > options.until_time:
        errors.append(invalid("untilTime", options.until_time, "must be after `sinceTime`"))
    if options.boot is not None and options.boot > 0:
        errors.append(invalid("boot", options.boot, "must be less than 1"))
    if options.tail_lines is not None and not 0 <= options.tail_lines <= MAX_TAIL_LINES:
        errors.append(invalid("tailLines", options.tail_lines,
                              f"must be between 0 and {MAX_TAIL_LINES}, inclusive"))
    if (problem := pattern_error(options.pattern)) is not None:
        errors.append(invalid("pattern", options.pattern, problem))
    return errors


def journalctl_args(request: NodeLogQuery, services: Sequence[str]) -> list[str]:
    """getLoggingCmd (linux): journalctl's arguments for `services` (those journald knows)."""
    options = request.options
    args = ["--utc", "--no-pager", "--output=short-precise"]
    if options.since_time is not None:
        args.append(f"--since={journal_date(options.since_time)}")
    if options.until_time is not None:
        args.append(f"--until={journal_date(options.until_time)}")
    if options.tail_lines is not None:
        args += ["--pager-end", f"--lines={options.tail_lines}"]
    args += [f"--unit={service}" for service in services if service]
    if options.pattern:
        args.append(f"--grep={options.pattern}")
    if options.boot is not None:
        args += ["--boot", str(options.boot)]
    return args


UNITS_ARGS = ("--field", "_SYSTEMD_UNIT")
"""checkForNativeLogger: ``journalctl --field _SYSTEMD_UNIT`` lists the units journald has entries of."""


def is_native(units_output: str | None, service: str) -> bool:
    """checkForNativeLogger: the service logs to journald when ``<service>.service`` is in the units listed
    (None: journalctl failed, so maybe a file)."""
    return units_output is not None and f"{service}.service" in units_output


def log_file_candidates(service: str) -> tuple[str, str, str]:
    """heuristicsCopyFileLogs: the service's log under /var/log, tried in order, the first found wins."""
    return service, f"{service}.log", f"{service}/{service}.log"


def options_with_files(file_services: Sequence[str]) -> str:
    """copyForBoot: services that resolved to files are not read when options were given."""
    return (f"\noptions present and query resolved to log files for [{' '.join(file_services)}]\n"
            "try without specifying options\n")


def log_not_found(service: str) -> str:
    return f"\nlog not found for {service}\n"


def log_error(service: str, error: str) -> str:
    return f"\nerror getting log for {service}: {error}\n"


def context_error(error: str) -> str:
    """copyFileLogs when the deadline passed before the files."""
    return f"\ncontext error: {error}\n"


DEADLINE_EXCEEDED = "context deadline exceeded"
