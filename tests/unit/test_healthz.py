"""kopflet.server.healthz: upstream's healthz answers, byte for byte.

Every expected body below is what k8s.io/apiserver v0.37.1's healthz handlers answered, served by Go 1.26, for the
kubelet API's checks (ping, log, syncloop, device-plugin) and for the healthz port's (ping alone).
"""

from __future__ import annotations

import pytest

from kopflet.server import healthz
from kopflet.server.healthz import Answer

SLOW = "sync Loop took longer than expected"
KUBELET = ("ping", "log", "syncloop", "device-plugin")


def results(errors: dict[str, str], query: dict[str, list[str]], names: tuple[str, ...] = KUBELET
            ) -> list[tuple[str, str | None]]:
    """Each check's outcome as the server gives it: None for an excluded one (not run)."""
    excluded = healthz.excluded(query)
    return [(name, None if name in excluded else errors.get(name, "")) for name in names]


@pytest.mark.parametrize(("errors", "query", "names", "status", "body"), [
    pytest.param({}, {}, KUBELET, 200, "ok", id="all pass"),
    pytest.param({}, {"verbose": [""]}, KUBELET, 200,
                 "[+]ping ok\n[+]log ok\n[+]syncloop ok\n[+]device-plugin ok\nhealthz check passed\n",
                 id="verbose"),
    pytest.param({}, {"verbose": ["0"], "exclude": ["log"]}, KUBELET, 200,
                 "[+]ping ok\n[+]log excluded: ok\n[+]syncloop ok\n[+]device-plugin ok\nhealthz check passed\n",
                 id="verbose whatever its value, one excluded"),
    pytest.param({}, {"exclude": ["nope", "zz", ""]}, KUBELET, 200, "ok",
                 id="unknown exclusions are not listed without verbose"),
    pytest.param({"syncloop": SLOW}, {}, KUBELET, 500,
                 "[+]ping ok\n[+]log ok\n[-]syncloop failed: reason withheld\n[+]device-plugin ok\n"
                 "healthz check failed\n", id="syncloop fails: always verbose, the reason withheld"),
    pytest.param({"syncloop": SLOW}, {"verbose": [""]}, KUBELET, 500,
                 "[+]ping ok\n[+]log ok\n[-]syncloop failed: reason withheld\n[+]device-plugin ok\n"
                 "healthz check failed\n", id="verbose changes nothing on failure"),
    pytest.param({"syncloop": SLOW}, {"verbose": ["0"], "exclude": ["log"]}, KUBELET, 500,
                 "[+]ping ok\n[+]log excluded: ok\n[-]syncloop failed: reason withheld\n[+]device-plugin ok\n"
                 "healthz check failed\n", id="failure with an exclusion"),
    pytest.param({"syncloop": SLOW}, {"exclude": ["nope", "zz", ""]}, KUBELET, 500,
                 "[+]ping ok\n[+]log ok\n[-]syncloop failed: reason withheld\n[+]device-plugin ok\n"
                 'warn: some health checks cannot be excluded: no matches for "","nope","zz"\nhealthz check failed\n',
                 id="unknown exclusions sorted and quoted"),
    pytest.param({"syncloop": SLOW}, {"exclude": ["syncloop"]}, KUBELET, 200, "ok", id="the failing one excluded"),
    pytest.param({"log": "logging blocked", "device-plugin": "device registration error: gone"}, {}, KUBELET, 500,
                 "[+]ping ok\n[-]log failed: reason withheld\n[+]syncloop ok\n[-]device-plugin failed: reason "
                 "withheld\nhealthz check failed\n", id="two fail"),
    pytest.param({}, {}, ("ping",), 200, "ok", id="healthz port"),
    pytest.param({}, {"verbose": [""]}, ("ping",), 200, "[+]ping ok\nhealthz check passed\n",
                 id="healthz port verbose"),
    pytest.param({}, {"verbose": ["0"], "exclude": ["log"]}, ("ping",), 200,
                 '[+]ping ok\nwarn: some health checks cannot be excluded: no matches for "log"\n'
                 "healthz check passed\n",
                 id="healthz port: log is not one of its checks"),
    pytest.param({}, {"exclude": ["syncloop"]}, ("ping",), 200, "ok", id="healthz port: nothing to exclude"),
])
def test_root(errors: dict[str, str], query: dict[str, list[str]], names: tuple[str, ...], status: int,
              body: str) -> None:
    answer = healthz.root(results(errors, query, names), query)
    assert (answer.status, answer.body, answer.nosniff) == (status, body, True)


@pytest.mark.parametrize(("errors", "query", "failure_log", "unmatched_log"), [
    pytest.param({}, {}, "", "", id="nothing to log"),
    pytest.param({"syncloop": SLOW}, {}, f"syncloop check failed: healthz\n[-]syncloop failed: {SLOW}\n", "",
                 id="the reasons go to the log"),
    pytest.param({"log": "logging blocked", "syncloop": SLOW}, {"exclude": ["x", "a"]},
                 f"log,syncloop check failed: healthz\n[-]log failed: logging blocked\n[-]syncloop failed: {SLOW}\n",
                 'cannot exclude some health checks, no health checks are installed matching "a","x"',
                 id="several, and unmatched exclusions"),
    pytest.param({}, {"exclude": ["x"]}, "", 'cannot exclude some health checks, no health checks are installed '
                 'matching "x"', id="unmatched without verbose still logged"),
])
def test_root_logs(errors: dict[str, str], query: dict[str, list[str]], failure_log: str, unmatched_log: str) -> None:
    answer = healthz.root(results(errors, query), query)
    assert (answer.failure_log, answer.unmatched_log) == (failure_log, unmatched_log)


def test_exclusion_names_are_quoted_as_go_does() -> None:
    query = {"exclude": ['a"b', "c\nd"]}
    answer = healthz.root(results({}, query), {**query, "verbose": [""]})
    assert 'no matches for "a\\"b","c\\nd"\n' in answer.body


@pytest.mark.parametrize(("error", "expected"), [
    pytest.param("", Answer(200, "ok", nosniff=False), id="ok: Go sniffs the type, no nosniff"),
    pytest.param(SLOW, Answer(500, f"internal server error: {SLOW}\n"), id="http.Error"),
])
def test_individual(error: str, expected: Answer) -> None:
    assert healthz.individual(error) == expected


@pytest.mark.parametrize(("path", "expected"), [
    ("/healthz", ""),
    ("/healthz/ping", "ping"),
    ("/healthz/device-plugin", "device-plugin"),
    ("/healthz/", None),
    ("/healthz/nope", None),
    ("/healthz/ping/x", None),
    ("/healthzz", None),
    ("/", None),
])
def test_target(path: str, expected: str | None) -> None:
    assert healthz.target(path, KUBELET) == expected


def test_target_of_the_healthz_port() -> None:
    assert [healthz.target(p, ("ping",)) for p in ("/healthz", "/healthz/ping", "/healthz/syncloop")] == \
        ["", "ping", None]


@pytest.mark.parametrize(("query", "expected"), [
    ({}, frozenset()),
    ({"exclude": ["log"]}, frozenset({"log"})),
    ({"exclude": ["log", "log", ""], "verbose": [""]}, frozenset({"log", ""})),
])
def test_excluded(query: dict[str, list[str]], expected: frozenset[str]) -> None:
    assert healthz.excluded(query) == expected
