"""kopflet.prober.probes: parsing with defaults and errors, the worker state machine (upstream prober/worker.go),
the result rules and messages (upstream prober.go, pkg/probe/*)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kopflet.api.spec import ContainerPort, ContainerSpec, EnvVar, SpecError, pod_from_body, resolve_port
from kopflet.prober import probes as p
from kopflet.prober.probes import ContainerView, Kind, Outcome, ProbeSpec, Result

EXEC = {"exec": {"command": ["true"]}}


def container(**kwargs: Any) -> ContainerSpec:
    return ContainerSpec(name="app", image="busybox", image_pull_policy="IfNotPresent", hash="h", **kwargs)


# ------------------------------------------------------------------------------------------------ parsing


def test_parse_defaults() -> None:
    probe = p.parse_probe(EXEC, "liveness")
    assert probe == ProbeSpec(kind=Kind.LIVENESS, handler=p.ExecAction(command=("true",)), initial_delay_seconds=0,
                              period_seconds=10, timeout_seconds=1, success_threshold=1, failure_threshold=3,
                              termination_grace_period_seconds=None)


def test_parse_zero_means_default() -> None:
    probe = p.parse_probe({**EXEC, "periodSeconds": 0, "timeoutSeconds": 0, "successThreshold": 0,
                           "failureThreshold": 0}, Kind.READINESS)
    assert (probe.period_seconds, probe.timeout_seconds, probe.success_threshold, probe.failure_threshold) == \
        (10, 1, 1, 3)


def test_parse_everything() -> None:
    raw = {"httpGet": {"path": "/healthz?full=1", "port": "http", "host": "example.org", "scheme": "HTTPS",
                       "httpHeaders": [{"name": "X-Custom", "value": "yes"}, {"name": "Host", "value": "h"}]},
           "initialDelaySeconds": 5, "periodSeconds": 3, "timeoutSeconds": 2, "successThreshold": 1,
           "failureThreshold": 7, "terminationGracePeriodSeconds": 4}
    probe = p.parse_probe(raw, "startup")
    assert probe == ProbeSpec(
        kind=Kind.STARTUP,
        handler=p.HTTPGetAction(port="http", path="/healthz?full=1", host="example.org", scheme="HTTPS",
                                headers=(("X-Custom", "yes"), ("Host", "h"))),
        initial_delay_seconds=5, period_seconds=3, timeout_seconds=2, success_threshold=1, failure_threshold=7,
        termination_grace_period_seconds=4)


@pytest.mark.parametrize(("raw", "handler"), [
    ({"httpGet": {"port": 8080}}, p.HTTPGetAction(port=8080, path="/", scheme="HTTP")),
    ({"httpGet": {"port": "8080"}}, p.HTTPGetAction(port=8080)),
    ({"tcpSocket": {"port": "db"}}, p.TCPSocketAction(port="db")),
    ({"tcpSocket": {"port": 5432, "host": "10.0.0.1"}}, p.TCPSocketAction(port=5432, host="10.0.0.1")),
    ({"grpc": {"port": 9090}}, p.GRPCAction(port=9090, service="")),
    ({"grpc": {"port": 9090, "service": "liveness"}}, p.GRPCAction(port=9090, service="liveness")),
    ({"exec": {"command": ["sh", "-c", "exit 0"]}}, p.ExecAction(command=("sh", "-c", "exit 0"))),
])
def test_parse_handlers(raw: dict[str, Any], handler: p.Handler) -> None:
    assert p.parse_probe(raw, "readiness").handler == handler


@pytest.mark.parametrize(("raw", "kind", "message"), [
    ({}, "liveness", "livenessProbe: Required value: must specify a handler type"),
    ({**EXEC, "tcpSocket": {"port": 1}}, "liveness", "livenessProbe.tcpSocket: Forbidden: may not specify more"),
    ({**EXEC, "successThreshold": 2}, "liveness", "livenessProbe.successThreshold: Invalid value: 2: must be 1"),
    ({**EXEC, "successThreshold": 3}, "startup", "startupProbe.successThreshold: Invalid value: 3: must be 1"),
    ({**EXEC, "periodSeconds": -1}, "readiness", "readinessProbe.periodSeconds: Invalid value: -1: must be greater"),
    ({**EXEC, "timeoutSeconds": "1s"}, "readiness", "readinessProbe.timeoutSeconds: Invalid value: '1s': must be an"),
    ({**EXEC, "failureThreshold": True}, "readiness", "readinessProbe.failureThreshold: Invalid value: True"),
    ({**EXEC, "terminationGracePeriodSeconds": 5}, "readiness",
     "readinessProbe.terminationGracePeriodSeconds: Invalid value: must not be set for readinessProbes"),
    ({**EXEC, "terminationGracePeriodSeconds": 0}, "liveness",
     "livenessProbe.terminationGracePeriodSeconds: Invalid value: 0: must be greater than 0"),
    ({"exec": {"command": []}}, "liveness", "livenessProbe.exec.command: Required value"),
    ({"exec": {"command": "true"}}, "liveness", "livenessProbe.exec.command: Invalid value: must be a list"),
    ({"exec": {"command": ["sh", 1]}}, "liveness", "livenessProbe.exec.command[1]: Invalid value: 1"),
    ({"exec": []}, "liveness", "livenessProbe.exec: Invalid value: list: must be an object"),
    ({"httpGet": {"path": "/"}}, "liveness", "livenessProbe.httpGet.port: Required value"),
    ({"httpGet": {"port": 70000}}, "liveness", "livenessProbe.httpGet.port: Invalid value: 70000: must be between"),
    ({"httpGet": {"port": 0}}, "liveness", "livenessProbe.httpGet.port: Invalid value: 0: must be between"),
    ({"httpGet": {"port": "Web_Port"}}, "liveness", "livenessProbe.httpGet.port: Invalid value: 'Web_Port'"),
    ({"httpGet": {"port": "a-very-long-port-name"}}, "liveness", "livenessProbe.httpGet.port: Invalid value"),
    ({"httpGet": {"port": 80, "scheme": "FTP"}}, "liveness", "livenessProbe.httpGet.scheme: Unsupported value: 'FTP'"),
    ({"httpGet": {"port": 80, "httpHeaders": [{"name": "bad header"}]}}, "liveness",
     "livenessProbe.httpGet.httpHeaders[0].name: Invalid value: 'bad header'"),
    ({"httpGet": {"port": 80, "httpHeaders": [{"value": "x"}]}}, "liveness",
     "livenessProbe.httpGet.httpHeaders[0].name: Required value"),
    ({"tcpSocket": {}}, "liveness", "livenessProbe.tcpSocket.port: Required value"),
    ({"grpc": {"service": "x"}}, "liveness", "livenessProbe.grpc.port: Required value"),
    ({"grpc": {"port": "grpc"}}, "liveness", "livenessProbe.grpc.port: Invalid value: 'grpc': must be an integer"),
])
def test_parse_errors(raw: dict[str, Any], kind: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        p.parse_probe(raw, kind)
    assert str(info.value).startswith(message)
    assert isinstance(info.value, ValueError)


def test_parse_error_path_prefix() -> None:
    with pytest.raises(ValueError, match=r"^spec\.containers\[0\]\.livenessProbe\.httpGet\.port: Required value"):
        p.container_probes(container(liveness_probe={"httpGet": {}}), path="spec.containers[0]")


def test_container_probes_and_grace_period() -> None:
    c = container(liveness_probe={**EXEC, "terminationGracePeriodSeconds": 7}, startup_probe=EXEC,
                  readiness_probe={"tcpSocket": {"port": 80}})
    assert list(p.container_probes(c)) == [Kind.STARTUP, Kind.LIVENESS, Kind.READINESS]
    assert p.container_probes(container()) == {}
    assert p.termination_grace_period(c, Kind.LIVENESS) == 7
    assert p.termination_grace_period(c, Kind.STARTUP) is None
    assert p.termination_grace_period(c, Kind.READINESS) is None


def test_probed_containers_are_regular_and_sidecars() -> None:
    pod = pod_from_body({"metadata": {"name": "p", "uid": "u"}, "spec": {
        "initContainers": [{"name": "init", "image": "i"}, {"name": "side", "image": "i", "restartPolicy": "Always"}],
        "containers": [{"name": "app", "image": "i"}]}})
    assert [(c.name, init) for c, init in p.probed_containers(pod)] == [("side", True), ("app", False)]


# ---------------------------------------------------------------------------------------------- targets


PORTED = container(ports=(ContainerPort(container_port=8080, name="http"), ContainerPort(container_port=53,
                                                                                         name="dns")))


@pytest.mark.parametrize(("port", "expected"), [
    (8080, 8080), ("http", 8080), ("dns", 53), ("9090", 9090),
    ("missing", 'strconv.Atoi: parsing "missing": invalid syntax'),
    (0, "invalid port number: 0"), (65536, "invalid port number: 65536"),
])
def test_resolve_port(port: int | str, expected: int | str) -> None:
    if isinstance(expected, int):
        assert resolve_port(port, PORTED) == expected
    else:
        with pytest.raises(ValueError, match=f"^{expected}$"):
            resolve_port(port, PORTED)


UA = "kube-probe/1.31"


@pytest.mark.parametrize(("action", "pod_ip", "url", "headers", "skip"), [
    (p.HTTPGetAction(port="http"), "10.1.2.3", "http://10.1.2.3:8080/",
     (("User-Agent", UA), ("Accept", "*/*")), ("Accept-Encoding",)),
    (p.HTTPGetAction(port=80, path="/healthz?full=1", scheme="HTTPS"), "10.1.2.3",
     "https://10.1.2.3:80/healthz?full=1", (("User-Agent", UA), ("Accept", "*/*")), ("Accept-Encoding",)),
    (p.HTTPGetAction(port=80, host="example.org", path="/x"), "10.1.2.3", "http://example.org:80/x",
     (("User-Agent", UA), ("Accept", "*/*")), ("Accept-Encoding",)),
    (p.HTTPGetAction(port=80), "fd00::1", "http://[fd00::1]:80/",
     (("User-Agent", UA), ("Accept", "*/*")), ("Accept-Encoding",)),
    (p.HTTPGetAction(port=80, headers=(("x-custom-header", "v"), ("user-agent", "mine"))), "10.0.0.1",
     "http://10.0.0.1:80/", (("X-Custom-Header", "v"), ("User-Agent", "mine"), ("Accept", "*/*")),
     ("Accept-Encoding",)),
    (p.HTTPGetAction(port=80, headers=(("Accept", ""),)), "10.0.0.1", "http://10.0.0.1:80/",
     (("User-Agent", UA),), ("Accept-Encoding", "Accept")),
    (p.HTTPGetAction(port=80, headers=(("Accept", "application/json"),)), "10.0.0.1", "http://10.0.0.1:80/",
     (("Accept", "application/json"), ("User-Agent", UA)), ("Accept-Encoding",)),
])
def test_http_request(action: p.HTTPGetAction, pod_ip: str, url: str, headers: tuple[tuple[str, str], ...],
                      skip: tuple[str, ...]) -> None:
    request = p.http_request(action, PORTED, pod_ip, UA)
    assert (request.url, request.headers, request.skip_headers) == (url, headers, skip)


def test_http_request_errors() -> None:
    with pytest.raises(ValueError, match="no IP address"):
        p.http_request(p.HTTPGetAction(port=80), PORTED, "", UA)
    with pytest.raises(ValueError, match=r"strconv\.Atoi"):
        p.http_request(p.HTTPGetAction(port="nope"), PORTED, "10.0.0.1", UA)


@pytest.mark.parametrize(("version", "agent"), [("0.1.0", "kube-probe/0.1"), ("v1.31.2", "kube-probe/1.31")])
def test_user_agent(version: str, agent: str) -> None:
    assert p.user_agent(version) == agent


@pytest.mark.parametrize(("status", "body", "expected"), [
    (200, b"ok", Result.success("ok")),
    (204, b"", Result.success("")),
    (302, b"<a>moved</a>", Result.warning("Probe terminated redirects, Response body: <a>moved</a>")),
    (399, b"", Result.warning("Probe terminated redirects, Response body: ")),
    (199, b"", Result.failure("HTTP probe failed with statuscode: 199")),
    (400, b"secret body", Result.failure("HTTP probe failed with statuscode: 400")),
    (503, b"", Result.failure("HTTP probe failed with statuscode: 503")),
])
def test_http_result(status: int, body: bytes, expected: Result) -> None:
    assert p.http_result(status, body) == expected


def test_http_result_body_is_capped() -> None:
    assert p.http_result(200, b"x" * 20000).message == "x" * 10240


def test_http_error_wording() -> None:
    assert p.http_error("http://10.0.0.1:80/", p.HTTP_TIMEOUT_DETAIL) == Result.failure(
        'Get "http://10.0.0.1:80/": context deadline exceeded (Client.Timeout exceeded while awaiting headers)')


@pytest.mark.parametrize(("code", "stdout", "stderr", "expected"), [
    (0, b"fine\n", b"", Result.success("fine\n")),
    (1, b"out ", b"err", Result.failure("out err")),
    (137, b"", b"", Result.failure("")),
])
def test_exec_result(code: int, stdout: bytes, stderr: bytes, expected: Result) -> None:
    assert p.exec_result(code, stdout, stderr) == expected


def test_exec_timeout_result() -> None:
    assert p.exec_timeout_result(["sh", "-c", 'sleep "5"']) == Result.failure(
        'command "sh -c sleep \\"5\\"" timed out')


def test_expand_command_uses_static_env_only() -> None:
    c = container(env=(EnvVar(name="FILE", value="/tmp/ok"), EnvVar(name="FROM", value_from={"fieldRef": {}})))
    assert p.expand_command(["cat", "$(FILE)", "$(FROM)", "$(NONE)", "$$(FILE)"], c) == \
        ["cat", "/tmp/ok", "", "$(NONE)", "$(FILE)"]


@pytest.mark.parametrize(("kind", "result", "event"), [
    (Kind.LIVENESS, Result.failure("boom"), ("Warning", "Unhealthy", "Liveness probe failed: boom")),
    (Kind.READINESS, Result.failure(""), ("Warning", "Unhealthy", "Readiness probe failed: ")),
    (Kind.STARTUP, Result.unknown("no runtime"), ("Warning", "Unhealthy", "Startup probe errored: no runtime")),
    (Kind.READINESS, Result.warning("Probe terminated redirects, Response body: x"),
     ("Warning", "ProbeWarning", "Readiness probe warning: Probe terminated redirects, Response body: x")),
    (Kind.LIVENESS, Result.success("ok"), None),
])
def test_probe_event(kind: Kind, result: Result, event: tuple[str, str, str] | None) -> None:
    found = p.probe_event(kind, result)
    assert (None if found is None else (found.type, found.reason, found.message)) == event


@pytest.mark.parametrize(("service", "encoded"), [("", b""), ("db", b"\x0a\x02db"), ("x" * 200, b"\x0a\xc8\x01" +
                                                                                         b"x" * 200)])
def test_grpc_health_request(service: str, encoded: bytes) -> None:
    assert p.grpc_health_request(service) == encoded


@pytest.mark.parametrize(("data", "status"), [
    (b"", 0), (b"\x08\x01", 1), (b"\x08\x02", 2), (b"\x12\x03abc\x08\x01", 1), (b"\x08\x03\x18\x05", 3),
])
def test_grpc_health_status(data: bytes, status: int) -> None:
    assert p.grpc_health_status(data) == status


def test_grpc_health_status_truncated() -> None:
    with pytest.raises(ValueError, match="truncated"):
        p.grpc_health_status(b"\x08")


@pytest.mark.parametrize(("status", "expected"), [
    (1, Result.success("service healthy")),
    (2, Result.failure('service unhealthy (responded with "NOT_SERVING")')),
    (0, Result.failure('service unhealthy (responded with "UNKNOWN")')),
])
def test_grpc_result(status: int, expected: Result) -> None:
    assert p.grpc_result(status) == expected


# ------------------------------------------------------------------------------------ the state machine

T0 = 1_000.0  # the container's startedAt, seconds
S, F, W, U = Outcome.SUCCESS, Outcome.FAILURE, Outcome.WARNING, Outcome.UNKNOWN


def make(kind: Kind, **kwargs: Any) -> p.ProbeState:
    return p.new_state(ProbeSpec(kind=kind, handler=p.ExecAction(command=("true",)), **kwargs))


def running(cid: str = "c1", **kwargs: Any) -> ContainerView:
    return ContainerView(container_id=cid, running=True, started_at=T0, **kwargs)


@pytest.mark.parametrize(("kind", "initial"), [(Kind.READINESS, F), (Kind.LIVENESS, S), (Kind.STARTUP, U)])
def test_initial_results(kind: Kind, initial: Outcome) -> None:
    state = make(kind)
    assert p.published(state) is None  # nothing published before a container is seen
    state = p.observe(state, running())
    assert p.published(state) == ("c1", initial)


# Each case: kind, thresholds, the raw outcomes in order, the published result after each.
THRESHOLDS = [
    ("readiness passes at once", Kind.READINESS, 1, 3, [S], [S]),
    ("readiness needs two successes", Kind.READINESS, 2, 3, [S, S, S], [F, S, S]),
    ("readiness success run broken", Kind.READINESS, 2, 3, [S, F, S, S], [F, F, F, S]),
    ("readiness fails after three", Kind.READINESS, 1, 3, [S, F, F, F], [S, S, S, F]),
    ("readiness failure run broken", Kind.READINESS, 1, 3, [S, F, F, S, F, F], [S, S, S, S, S, S]),
    ("readiness warning is success", Kind.READINESS, 1, 3, [W], [S]),
    ("errors are thrown away", Kind.READINESS, 1, 3, [S, F, U, F, U, F], [S, S, S, S, S, F]),
    ("liveness fails after three", Kind.LIVENESS, 1, 3, [F, F, F], [S, S, F]),
    ("liveness failure threshold one", Kind.LIVENESS, 1, 1, [F], [F]),
    ("liveness recovers in the run", Kind.LIVENESS, 1, 3, [F, F, S, F, F], [S, S, S, S, S]),
    ("startup fails", Kind.STARTUP, 1, 2, [F, F], [U, F]),
    ("startup succeeds", Kind.STARTUP, 1, 3, [F, S], [U, S]),
]


@pytest.mark.parametrize(("kind", "success", "failure", "outcomes", "published"),
                         [case[1:] for case in THRESHOLDS], ids=[case[0] for case in THRESHOLDS])
def test_thresholds(kind: Kind, success: int, failure: int, outcomes: list[Outcome],
                    published: list[Outcome]) -> None:
    state = p.observe(make(kind, success_threshold=success, failure_threshold=failure, period_seconds=1), running())
    now = T0
    seen = []
    for outcome in outcomes:
        assert p.due(state, now), f"not due at {now}: {state}"
        state = p.record(state, Result(outcome, "msg"), now)
        state = p.observe(state, running(), started=True)
        seen.append(state.result)
        now += 1
    assert seen == published


def test_liveness_failure_holds_until_a_new_container() -> None:
    state = p.observe(make(Kind.LIVENESS, failure_threshold=1, period_seconds=1), running("c1"))
    state = p.record(state, Result.failure("dead"), T0)
    assert (state.on_hold, p.published(state), state.message) == (True, ("c1", F), "dead")
    assert not p.due(state, T0 + 100)
    assert p.next_check_in(state, T0 + 100) == 1
    state = p.observe(state, running("c1"))  # still the same container: stays on hold
    assert state.on_hold and not p.due(state, T0 + 100)
    state = p.observe(state, running("c2"))  # restarted: a fresh start, liveness passes again
    assert (state.on_hold, p.published(state), state.result_run, state.message) == (False, ("c2", S), 0, "")
    assert p.due(state, T0 + 100)


def test_readiness_resets_on_container_change() -> None:
    state = p.observe(make(Kind.READINESS, success_threshold=2), running("c1"))
    state = p.record(state, Result.success(), T0)
    state = p.record(state, Result.success(), T0 + 10)
    assert p.published(state) == ("c1", S)
    state = p.record(state, Result.success(), T0 + 20)
    state = p.observe(state, running("c2"))
    assert p.published(state) == ("c2", F)
    state = p.record(state, Result.success(), T0 + 30)
    assert p.published(state) == ("c2", F)  # the old container's successes do not count


@pytest.mark.parametrize(("delay", "now", "due", "check_in"), [
    (0, T0, True, 0.0),
    (5, T0 + 4.9, False, pytest.approx(0.1)),
    (5, T0 + 5, True, 0.0),
    (5, T0 - 10, False, 15.0),  # clock behind the runtime's: still waits for the delay
])
def test_initial_delay_from_started_at(delay: float, now: float, due: bool, check_in: float) -> None:
    state = p.observe(make(Kind.READINESS, initial_delay_seconds=delay), running())
    assert p.due(state, now) is due
    assert p.next_check_in(state, now) == check_in
    assert p.published(state) == ("c1", F)  # readiness is failed during the initial delay


def test_period_between_probes_and_trigger() -> None:
    state = p.observe(make(Kind.READINESS, period_seconds=10), running())
    state = p.record(state, Result.failure("x"), T0 + 1)
    assert not p.due(state, T0 + 10.9)
    assert p.next_check_in(state, T0 + 5) == 6
    assert p.due(state, T0 + 11)
    assert p.due(p.trigger(state), T0 + 2)


@pytest.mark.parametrize("kind", [Kind.LIVENESS, Kind.READINESS])
def test_startup_gate_holds_liveness_and_readiness(kind: Kind) -> None:
    state = p.observe(make(kind), running(), started=False)
    assert not p.due(state, T0 + 100)
    assert p.next_check_in(state, T0 + 100) == 10
    initial = p.INITIAL_RESULT[kind]
    assert p.published(state) == ("c1", initial)
    state = p.observe(state, running(), started=True)
    assert p.due(state, T0 + 100)
    assert p.published(state) == ("c1", initial)


def test_startup_stops_after_success() -> None:
    state = p.observe(make(Kind.STARTUP, period_seconds=1), running())
    assert p.due(state, T0)
    state = p.record(state, Result.success(), T0)
    assert p.published(state) == ("c1", S)
    state = p.observe(state, running())
    assert state.container_started and not p.due(state, T0 + 50)
    state = p.observe(state, running("c2"))  # a restarted container needs to start again
    assert p.published(state) == ("c2", U) and p.due(state, T0 + 50)


@pytest.mark.parametrize(("kind", "result", "stopped", "due"), [
    (Kind.LIVENESS, S, True, False),
    (Kind.STARTUP, S, True, False),
    (Kind.READINESS, F, False, True),  # readiness keeps probing while the pod shuts down
])
def test_deletion(kind: Kind, result: Outcome, stopped: bool, due: bool) -> None:
    state = p.observe(make(kind, failure_threshold=1), running())
    state = p.record(state, Result.failure("x"), T0) if kind is Kind.READINESS else state
    state = p.observe(state, running(deleting=True))
    assert (state.result, state.stopped, p.due(state, T0 + 100)) == (result, stopped, due)
    assert p.next_check_in(state, T0 + 100) == (None if stopped else 0.0)
    if stopped:
        assert p.observe(state, running("c9")) == state  # a finished worker ignores everything


@pytest.mark.parametrize(("view", "stopped"), [
    (ContainerView(container_id="c1", terminated=True, restart_never=True), True),
    (ContainerView(container_id="c1", terminated=True, restart_never=False), False),
    (ContainerView(container_id="c1"), False),  # created, not started yet
])
def test_not_running_fails_and_may_stop(view: ContainerView, stopped: bool) -> None:
    for kind in Kind:
        state = p.observe(p.observe(make(kind), running()), view)
        assert (state.result, state.stopped, p.due(state, T0 + 100)) == (F, stopped, False)


@pytest.mark.parametrize("kind", list(Kind))
def test_created_then_running_starts_from_the_initial_result(kind: Kind) -> None:
    state = p.observe(make(kind), ContainerView(container_id="c1"))  # created, not started
    assert p.published(state) == ("c1", F)
    state = p.observe(state, running("c1"))
    assert p.published(state) == ("c1", p.INITIAL_RESULT[kind])


def test_no_container_waits() -> None:
    state = p.observe(make(Kind.READINESS), ContainerView())
    assert (p.published(state), p.due(state, T0), p.next_check_in(state, T0)) == (None, False, 10)


def test_observe_is_idempotent() -> None:
    state = p.observe(make(Kind.READINESS), running())
    assert p.observe(state, running()) == state


def test_container_view_from_runtime() -> None:
    from kopflet.container.podstate import ContainerInfo, RuntimePodStatus, State
    pod = pod_from_body({"metadata": {"name": "p", "uid": "u", "deletionTimestamp": "2024-01-01T00:00:00Z"},
                         "spec": {"restartPolicy": "Never", "containers": [{"name": "app", "image": "i"}]}})
    runtime = RuntimePodStatus(uid="u", containers=(
        ContainerInfo(id="new", name="app", state=State.RUNNING, created_at=2, started_at=5_500_000_000),
        ContainerInfo(id="old", name="app", state=State.EXITED, created_at=1)))
    assert p.container_view(pod, runtime, "app") == ContainerView(
        container_id="new", running=True, started_at=5.5, terminated=False, restart_never=True, deleting=True)
    assert p.container_view(pod, runtime, "other") == ContainerView(deleting=True)


RULE_42 = [{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}]


@pytest.mark.parametrize(("pod_policy", "fields", "exit_code", "stops"), [
    ("Never", {}, 0, True),
    ("Always", {}, 1, False),
    ("Always", {"restartPolicy": "Never"}, 1, True),               # its own Never wins over the pod's Always
    ("Never", {"restartPolicy": "Always"}, 0, False),              # its own Always wins over the pod's Never
    ("Never", {"restartPolicy": "Never", "restartPolicyRules": RULE_42}, 42, False),  # a rule restarts it
    ("Never", {"restartPolicy": "Never", "restartPolicyRules": RULE_42}, 1, True),
    ("Never", {"restartPolicy": "OnFailure"}, 1, False),
    ("Never", {"restartPolicy": "OnFailure"}, 0, True),
], ids=str)
def test_probing_stops_only_for_a_container_that_will_not_restart(pod_policy: str, fields: dict[str, Any],
                                                                  exit_code: int, stops: bool) -> None:
    """Upstream worker (ContainerRestartRules on): probing a terminated container stops for good only when
    `ContainerShouldRestart` says no for its exit code."""
    from kopflet.container.podstate import ContainerInfo, RuntimePodStatus, State
    pod = pod_from_body({"metadata": {"name": "p", "uid": "u"},
                         "spec": {"restartPolicy": pod_policy,
                                  "containers": [{"name": "app", "image": "i", "livenessProbe": EXEC, **fields}]}})
    runtime = RuntimePodStatus(uid="u", containers=(
        ContainerInfo(id="c1", name="app", state=State.EXITED, exit_code=exit_code),))
    view = p.container_view(pod, runtime, "app")
    assert view.restart_never is stops
    state = p.observe(p.observe(make(Kind.LIVENESS), running()), view)
    assert state.stopped is stops


def test_a_sidecar_under_a_never_pod_keeps_being_probed_after_an_exit() -> None:
    from kopflet.container.podstate import ContainerInfo, RuntimePodStatus, State
    pod = pod_from_body({"metadata": {"name": "p", "uid": "u"}, "spec": {
        "restartPolicy": "Never", "containers": [{"name": "app", "image": "i"}],
        "initContainers": [{"name": "side", "image": "i", "restartPolicy": "Always", "readinessProbe": EXEC}]}})
    runtime = RuntimePodStatus(uid="u", containers=(
        ContainerInfo(id="s1", name="side", state=State.EXITED, exit_code=1),))
    assert not p.container_view(pod, runtime, "side").restart_never


def test_states_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        make(Kind.LIVENESS).result = F  # type: ignore[misc]
