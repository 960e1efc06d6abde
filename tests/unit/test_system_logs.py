"""``/logs/``: the file server on a temporary /var/log and the node log query with a fake ``journalctl`` script."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kopflet.config.settings import AgentConfig
from kopflet.server import node_log_query as nlq
from kopflet.server import server as srv
from kopflet.server.auth_reviews import Authenticator
from kopflet.server.system_logs import SystemLogs
from tests.unit.test_server import (
    NODE,
    FakeBackend,
    Harness,
    Pki,
    RecordingAuthorizer,
    call,
    pki,  # noqa: F401  (the fixture)
)
from tests.unit.test_server_auth import FakeKube

UNITS = "kubelet.service\ncontainerd.service\n"


def fake_journalctl(directory: Path, *, units: str | None = UNITS, body: str = "journal line\n",
                    sleep: float = 0) -> str:
    """A journalctl that lists `units` (None: fails) and otherwise prints its arguments and `body`."""
    directory.mkdir(parents=True, exist_ok=True)
    record = directory / "argv"
    script = directory / "journalctl"
    list_part = f"printf '%s' '{units}'; exit 0" if units is not None else "exit 1"
    script.write_text(f"""#!/bin/sh
if [ "$1" = "--field" ]; then {list_part}; fi
printf '%s\\n' "$@" > {record}
sleep {sleep}
printf '%s' '{body}'
echo "to stderr" >&2
exit 0
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    root = tmp_path / "log"
    (root / "apt").mkdir(parents=True)
    (root / "apt" / "history.log").write_text("apt history\n")
    (root / "kopflet.log").write_text("kopflet file log\n")
    (root / "svc").mkdir()
    (root / "svc" / "svc.log").write_text("svc nested log\n")
    (root / "plain").write_text("plain log\n")
    (tmp_path / "secret").write_text("outside\n")
    os.symlink(tmp_path / "secret", root / "escape.log")
    return root


async def collect(logs: SystemLogs, request: nlq.NodeLogQuery) -> str:
    out: list[bytes] = []

    async def write(data: bytes) -> None:
        out.append(data)

    await logs.copy(request, write)
    return b"".join(out).decode()


# ----------------------------------------------------------------------------------------------- the query I/O

@pytest.mark.parametrize(("services", "expected"), [
    (("kopflet",), "kopflet file log\n"),  # /var/log/kopflet.log
    (("plain",), "plain log\n"),  # /var/log/plain
    (("svc",), "svc nested log\n"),  # /var/log/svc/ is a directory: svc/svc.log
    (("nothing",), "\nlog not found for nothing\n"),
    (("kopflet", "nothing", "plain"), "kopflet file log\n\nlog not found for nothing\nplain log\n"),
])
async def test_services_without_journald_are_read_from_files(log_dir: Path, tmp_path: Path,
                                                             services: tuple[str, ...], expected: str) -> None:
    logs = SystemLogs(query=True, log_dir=str(log_dir), journalctl=str(tmp_path / "no-such-journalctl"))
    assert await collect(logs, nlq.NodeLogQuery(services=services)) == expected


async def test_options_with_file_services_say_so(log_dir: Path, tmp_path: Path) -> None:
    logs = SystemLogs(query=True, log_dir=str(log_dir), journalctl=str(tmp_path / "none"))
    request = nlq.NodeLogQuery(services=("kopflet",), options=nlq.Options(tail_lines=5))
    assert await collect(logs, request) == nlq.options_with_files(["kopflet"])


async def test_journald_services_go_to_journalctl_first(log_dir: Path, tmp_path: Path) -> None:
    journalctl = fake_journalctl(tmp_path / "bin")
    logs = SystemLogs(query=True, log_dir=str(log_dir), journalctl=journalctl)
    out = await collect(logs, nlq.NodeLogQuery(services=("kopflet", "kubelet", "containerd")))
    assert out == "journal line\nto stderr\nkopflet file log\n"
    assert (tmp_path / "bin" / "argv").read_text().split("\n")[:-1] == [
        "--utc", "--no-pager", "--output=short-precise", "--unit=kubelet", "--unit=containerd"]


async def test_journalctl_that_cannot_run_is_upstreams_line(log_dir: Path, tmp_path: Path) -> None:
    journalctl = fake_journalctl(tmp_path / "bin")
    logs = SystemLogs(query=True, log_dir=str(log_dir), journalctl=journalctl)
    # it lists kubelet, then disappears before the query runs: exec fails, not an ExitError
    original = logs._units

    async def units_then_gone(deadline: float) -> str | None:
        result = await original(deadline)
        logs.journalctl = str(tmp_path / "gone")
        return result

    logs._units = units_then_gone  # type: ignore[method-assign]
    assert await collect(logs, nlq.NodeLogQuery(services=("kubelet",))) == nlq.JOURNAL_NOT_AVAILABLE


async def test_the_deadline_kills_journalctl(log_dir: Path, tmp_path: Path) -> None:
    journalctl = fake_journalctl(tmp_path / "bin", body="late\n", sleep=5)
    logs = SystemLogs(query=True, log_dir=str(log_dir), journalctl=journalctl, timeout=0.5)
    assert await collect(logs, nlq.NodeLogQuery(services=("kubelet",))) == ""


def test_stat_error_is_os_roots(log_dir: Path) -> None:
    logs = SystemLogs(query=True, log_dir=str(log_dir))
    assert logs.stat_error("apt/history.log") is None
    assert logs.stat_error("/apt/history.log") == "statat /apt/history.log: path escapes from parent"
    assert logs.stat_error("../secret") == "statat ../secret: path escapes from parent"
    assert logs.stat_error("escape.log") == "statat escape.log: path escapes from parent"
    assert logs.stat_error("apt/missing.log") == "statat apt/missing.log: no such file or directory"
    assert logs.stat_error("apt/a\0b") == "statat apt/a\0b: invalid argument"  # EINVAL, not a crash


async def test_a_client_gone_mid_query_leaves_no_journalctl(log_dir: Path, tmp_path: Path) -> None:
    """The answer cancelled while `journalctl --field _SYSTEMD_UNIT` runs: it is killed and reaped."""
    started = tmp_path / "started"
    script = tmp_path / "bin" / "journalctl"
    script.parent.mkdir(parents=True)
    script.write_text(f"#!/bin/sh\necho $$ > {started}\nexec sleep 60\n")
    script.chmod(0o755)
    logs = SystemLogs(query=True, log_dir=str(log_dir), journalctl=str(script))
    task = asyncio.create_task(collect(logs, nlq.NodeLogQuery(services=("kubelet",))))
    for _ in range(100):
        if started.exists() and started.read_text().strip():
            break
        await asyncio.sleep(0.05)
    pid = int(started.read_text())
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    with pytest.raises(ProcessLookupError):  # killed and reaped: no such process any more
        os.kill(pid, 0)


# ---------------------------------------------------------------------------------------------- the HTTP side

@contextlib.asynccontextmanager
async def running(pki: Pki, logs: SystemLogs | None) -> AsyncIterator[Harness]:  # noqa: F811
    kube = FakeKube()
    backend, authorizer = FakeBackend(), RecordingAuthorizer()
    config = AgentConfig(node_name=NODE, address="127.0.0.1", port=0, client_ca_file=pki.ca)
    authenticator = Authenticator(kube, client_certificates=True, webhook=True, anonymous=True)
    server = srv.Server(NODE, backend, authenticator, authorizer, system_logs=logs)
    await server.start(config.address, config.port, srv.tls_context(pki.serving_cert, pki.serving_key, pki.ca))
    try:
        yield Harness(server, backend, authorizer, kube, pki)
    finally:
        await server.close(grace=1.0)


async def test_handler_off_is_405(pki: Pki) -> None:  # noqa: F811
    async with running(pki, None) as h:
        r = await call(h, "GET", "/logs/?query=kubelet")
    assert (r.status, r.text) == (405, srv.LOGS_DISABLED)


@pytest.mark.parametrize(("target", "status", "body", "headers"), [
    ("/logs/plain", 200, "plain log\n", {"content-type": "text/plain; charset=utf-8"}),
    ("/logs/apt/history.log", 200, "apt history\n", {}),
    ("/logs/apt", 301, "", {"location": "apt/"}),
    ("/logs/apt/", 200, '<!doctype html>\n<meta name="viewport" content="width=device-width">\n<pre>\n'
     '<a href="history.log">history.log</a>\n</pre>\n', {"content-type": "text/html; charset=utf-8"}),
    ("/logs/plain/", 301, "", {"location": "../plain"}),
    ("/logs/missing", 404, "404 page not found\n", {}),
    ("/logs", 404, "404 page not found\n", {}),  # go-restful's "" route, then http.StripPrefix("/logs/")
    ("/logs/%2e%2e/%2e%2e/etc/passwd", 404, "404 page not found\n", {}),  # cleaned to /etc/passwd under the root
    ("/logs/a%00b", 500, "500 Internal Server Error\n", {}),  # http.Dir's open: EINVAL
    # the query mode is off: a query is just the file server's
    ("/logs/plain?query=kubelet", 200, "plain log\n", {}),
])
async def test_file_server(pki: Pki, log_dir: Path, target: str, status: int, body: str,  # noqa: F811
                           headers: dict[str, str]) -> None:
    async with running(pki, SystemLogs(query=False, log_dir=str(log_dir))) as h:
        r = await call(h, "GET", target)
        assert (r.status, r.text) == (status, body)
        for name, value in headers.items():
            assert r.header(name) == value
        assert h.authorizer.asked[-1][1].subresource == "log"  # nodes/log


@pytest.mark.parametrize(("target", "status", "body"), [
    ("/logs/?query=kopflet", 200, "kopflet file log\n"),
    ("/logs?query=kopflet", 404, "404 page not found\n"),  # http.StripPrefix("/logs/") before the query
    ("/logs/?query=kubelet&query=nothing", 200, "journal line\nto stderr\n\nlog not found for nothing\n"),
    ("/logs/?query=/apt/history.log".replace("/apt", "apt"), 200, "apt history\n"),
    ("/logs/?query=%2Fapt%2Fhistory.log", 406,
     'query: Invalid value: ["/apt/history.log"]: statat /apt/history.log: path escapes from parent\n'),
    ("/logs/?query=", 400, 'query: Invalid value: [""]: may not be empty\n'),
    ("/logs/?query=k&tailLines=x", 400, 'tailLines: Invalid value: "x": strconv.Atoi: parsing "x": invalid syntax\n'),
    ("/logs/plain?query=kubelet", 406, "path not allowed in query mode\n"),
    ("/logs/?query=a;b", 406, 'query: Invalid value: "a;b": input contains unsupported characters\n'),
    ("/logs/?tailLines=5", 406, "query: Required value: cannot be empty with options\n"),
    ("/logs/?query=a&query=b&query=c&query=d&query=e&boot=1", 406,
     "[query: Too many: 5: must have at most 4 items, boot: Invalid value: 1: must be less than 1]\n"),
    ("/logs/plain", 200, "plain log\n"),  # no query: the file server
])
async def test_query_mode(pki: Pki, log_dir: Path, tmp_path: Path, target: str, status: int,  # noqa: F811
                          body: str) -> None:
    logs = SystemLogs(query=True, log_dir=str(log_dir), journalctl=fake_journalctl(tmp_path / "bin"))
    async with running(pki, logs) as h:
        r = await call(h, "GET", target)
    assert (r.status, r.text) == (status, body)
    if status == 200 and "query" in target and "history" not in target:
        assert r.header("content-type") == nlq.CONTENT_TYPE


async def test_query_is_gzipped_when_asked_exactly(pki: Pki, log_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    logs = SystemLogs(query=True, log_dir=str(log_dir), journalctl=fake_journalctl(tmp_path / "bin"))
    async with running(pki, logs) as h:
        r = await call(h, "GET", "/logs/?query=kubelet", {"Accept-Encoding": "gzip"})
        plain = await call(h, "GET", "/logs/?query=kubelet", {"Accept-Encoding": "gzip, deflate"})
    assert r.header("content-encoding") == "gzip"
    assert gzip.decompress(r.body) == b"journal line\nto stderr\n"
    assert plain.header("content-encoding") is None and plain.body == b"journal line\nto stderr\n"


@pytest.mark.parametrize("method", ["POST", "HEAD", "PUT"])
async def test_only_get(pki: Pki, log_dir: Path, method: str) -> None:  # noqa: F811
    async with running(pki, SystemLogs(query=True, log_dir=str(log_dir))) as h:
        r = await call(h, method, "/logs/?query=kubelet", {"Content-Length": "0"})
    assert r.status == 405 and r.header("allow") == "GET"


def test_upstreams_defaults() -> None:
    assert AgentConfig(node_name=NODE).enable_system_log_handler is True
    assert AgentConfig(node_name=NODE).enable_system_log_query is False


@pytest.mark.parametrize(("handler", "query", "expected"), [(True, False, False), (True, True, True),
                                                            (False, True, None)])
async def test_serve_wires_the_config(pki: Pki, handler: bool, query: bool, expected: bool | None) -> None:  # noqa: F811
    config = AgentConfig(node_name=NODE, address="127.0.0.1", port=0, client_ca_file=pki.ca,
                         enable_system_log_handler=handler, enable_system_log_query=query)
    authenticator = Authenticator(FakeKube(), client_certificates=True, webhook=False, anonymous=True)
    server = await srv.serve(config, FakeBackend(), authenticator, RecordingAuthorizer(),
                             tls=srv.tls_context(pki.serving_cert, pki.serving_key, pki.ca))
    try:
        assert (server.system_logs.query if server.system_logs else None) == expected
    finally:
        await server.close(grace=1.0)
