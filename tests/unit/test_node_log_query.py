"""The node log query's rules against upstream's kubelet_server_journal.go (texts checked with Go 1.26 where noted)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from kopflet.server import node_log_query as nlq

T1 = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
T2 = datetime(2024, 1, 2, 4, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(("query", "expected"), [
    ({}, None),
    ({"pattern": [""]}, None),  # nothing set: the file server answers
    ({"query": ["kubelet"]}, nlq.NodeLogQuery(services=("kubelet",))),
    ({"query": ["kubelet", "containerd"]}, nlq.NodeLogQuery(services=("kubelet", "containerd"))),
    ({"query": ["/foo.log"]}, nlq.NodeLogQuery(files=("/foo.log",))),
    ({"query": ["a\\b"]}, nlq.NodeLogQuery(files=("a\\b",))),
    ({"query": ["kubelet", "  "]}, nlq.NodeLogQuery(services=("kubelet",))),
    ({"tailLines": ["5"]}, nlq.NodeLogQuery(options=nlq.Options(tail_lines=5))),
    ({"query": ["k"], "sinceTime": ["2024-01-02T03:04:05Z"], "boot": ["-1", "7"], "pattern": ["err"]},
     nlq.NodeLogQuery(services=("k",), options=nlq.Options(since_time=T1, boot=-1, pattern="err"))),
    ({"query": ["k"], "tailLines": ["+5"]}, nlq.NodeLogQuery(services=("k",), options=nlq.Options(tail_lines=5))),
])
def test_parse(query: dict[str, list[str]], expected: nlq.NodeLogQuery | None) -> None:
    assert nlq.parse(query) == expected


@pytest.mark.parametrize(("query", "message"), [
    ({"query": [""]}, 'query: Invalid value: [""]: may not be empty'),
    ({"query": ["  ", ""]}, 'query: Invalid value: ["  ",""]: may not be empty'),
    ({"sinceTime": ["2024-01-02 03:04:05Z"]}, 'sinceTime: Invalid value: "2024-01-02 03:04:05Z": invalid time format'),
    ({"untilTime": ["2024-13-02T03:04:05Z"]}, 'untilTime: Invalid value: "2024-13-02T03:04:05Z": invalid time format'),
    ({"boot": ["x"]}, 'boot: Invalid value: "x": strconv.Atoi: parsing "x": invalid syntax'),
    ({"tailLines": ["99999999999999999999"]},
     'tailLines: Invalid value: "99999999999999999999": strconv.Atoi: parsing "99999999999999999999": value out of '
     'range'),
    ({"tailLines": [" 5"]}, 'tailLines: Invalid value: " 5": strconv.Atoi: parsing " 5": invalid syntax'),
    ({"query": [""], "boot": ["1_0"], "tailLines": ["a"]},
     '[query: Invalid value: [""]: may not be empty, boot: Invalid value: "1_0": strconv.Atoi: parsing "1_0": '
     'invalid syntax, tailLines: Invalid value: "a": strconv.Atoi: parsing "a": invalid syntax]'),
])
def test_parse_errors_are_upstreams_400(query: dict[str, list[str]], message: str) -> None:
    with pytest.raises(nlq.QueryErrors) as info:
        nlq.parse(query)
    assert (info.value.status, str(info.value)) == (400, message)


def q(*services: str, files: tuple[str, ...] = (), **options: object) -> nlq.NodeLogQuery:
    return nlq.NodeLogQuery(services, files, nlq.Options(**options))  # type: ignore[arg-type]


@pytest.mark.parametrize(("request_", "stat_error", "errors"), [
    (q("kubelet"), None, []),
    (q("kubelet@x.service:1"), None, []),
    (q("a;b"), None, ['query: Invalid value: "a;b": input contains unsupported characters']),
    (q("x" * 257), None, [f'query: Invalid value: "{"x" * 257}": length must be less than 256']),
    (q("a", "b", "c", "d", "e"), None, ["query: Too many: 5: must have at most 4 items"]),
    (q(tail_lines=5), None, ["query: Required value: cannot be empty with options"]),
    (q("svc", files=("/a.log",)), None, ['query: Invalid value: "[/a.log], [svc]": cannot specify a file and service']),
    (q(files=("/a", "/b")), None, ['query: Invalid value: ["/a","/b"]: cannot specify more than one file']),
    (q(files=("/a",), boot=0), None, ['query: Invalid value: ["/a"]: cannot specify file with options']),
    (q(files=("/a",)), "statat /a: path escapes from parent",
     ['query: Invalid value: ["/a"]: statat /a: path escapes from parent']),
    (q("k", since_time=T2, until_time=T1), None,
     ['untilTime: Invalid value: "2024-01-02T03:04:05Z": must be after `sinceTime`']),
    (q("k", boot=1), None, ["boot: Invalid value: 1: must be less than 1"]),
    (q("k", tail_lines=-1), None, ["tailLines: Invalid value: -1: must be between 0 and 100000, inclusive"]),
    (q("k", tail_lines=100001), None, ["tailLines: Invalid value: 100001: must be between 0 and 100000, inclusive"]),
    (q("k", tail_lines=100000), None, []),
    (q("k", pattern="("), None, ['pattern: Invalid value: "(": error parsing regexp: missing ), unterminated '
                                 'subpattern: `(`']),
])
def test_validate(request_: nlq.NodeLogQuery, stat_error: str | None, errors: list[str]) -> None:
    assert nlq.validate(request_, stat_error) == errors


def test_validate_errors_aggregate_as_upstream() -> None:
    errors = nlq.validate(q("a;b", "a;b", boot=3))
    assert nlq.aggregate(errors) == ('[query: Invalid value: "a;b": input contains unsupported characters, '
                                     "boot: Invalid value: 3: must be less than 1]")


PLUS2 = timezone(timedelta(hours=2))


@pytest.mark.parametrize(("request_", "services", "argv"), [
    (q("kubelet"), ["kubelet"], ["--utc", "--no-pager", "--output=short-precise", "--unit=kubelet"]),
    (q("a", "b", since_time=datetime(2024, 1, 2, 3, 4, 5, tzinfo=PLUS2), until_time=datetime(2024, 11, 12, 13, 14,
       15, tzinfo=UTC), tail_lines=10, pattern="err|warn", boot=-1), ["a", "b"],
     ["--utc", "--no-pager", "--output=short-precise", "--since=2024-1-2 03:4:5", "--until=2024-11-12 13:14:15",
      "--pager-end", "--lines=10", "--unit=a", "--unit=b", "--grep=err|warn", "--boot", "-1"]),
    (q("a", boot=0, tail_lines=0), ["a"],
     ["--utc", "--no-pager", "--output=short-precise", "--pager-end", "--lines=0", "--unit=a", "--boot", "0"]),
])
def test_journalctl_args_are_get_logging_cmds(request_: nlq.NodeLogQuery, services: list[str],
                                                argv: list[str]) -> None:
    assert nlq.journalctl_args(request_, services) == argv


@pytest.mark.parametrize(("text", "go_json"), [
    ("2024-01-02T03:04:05Z", '"2024-01-02T03:04:05Z"'),
    ("2024-01-02T03:04:05.123+02:00", '"2024-01-02T03:04:05.123+02:00"'),
    ("2024-01-02T03:04:05.500000-05:30", '"2024-01-02T03:04:05.5-05:30"'),
])
def test_rfc3339_round_trip_as_go_marshals_it(text: str, go_json: str) -> None:
    assert nlq._value(nlq.parse_rfc3339(text)) == go_json


@pytest.mark.parametrize("text", ["2024-01-02t03:04:05z", "2024-01-02T03:04:05", "2024-02-30T00:00:00Z",
                                  "2024-01-02T25:00:00Z", "2024-01-02T03:04:05+24:00"])
def test_rfc3339_refusals(text: str) -> None:
    with pytest.raises(ValueError):
        nlq.parse_rfc3339(text)


def test_native_logger_and_file_candidates() -> None:
    units = "containerd.service\nkubelet.service\n"
    assert nlq.is_native(units, "kubelet") and not nlq.is_native(units, "kopflet")
    assert not nlq.is_native(None, "kubelet")
    assert nlq.log_file_candidates("kopflet") == ("kopflet", "kopflet.log", "kopflet/kopflet.log")
    assert nlq.options_with_files(["a", "b"]) == ("\noptions present and query resolved to log files for [a b]\n"
                                                  "try without specifying options\n")
