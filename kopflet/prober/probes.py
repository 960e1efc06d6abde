"""
Container probes: the spec, the per-container state machine and the result rules, as upstream
(`pkg/kubelet/prober/worker.go`, `prober.go`, `pkg/probe/{http,exec,tcp,grpc}`).

Pure: no asyncio, no clock, no I/O. Time is a parameter (seconds since the epoch, the runtime's
``startedAt`` converted), the I/O that runs a probe lives in `kopflet.prober.manager`.

- `parse_probe` reads a raw ``livenessProbe`` / ``readinessProbe`` / ``startupProbe`` mapping into a
  `ProbeSpec` with the apiserver's defaults (`SetDefaults_Probe`, `SetDefaults_HTTPGetAction`) and its
  validation (`validateProbe`), raising `spec.SpecError` (a ValueError) naming the field path.
- `ProbeState` is one upstream probe *worker* (one per container name and probe kind): `observe` feeds it
  what the runtime says about the container, `due` says whether to probe now, `record` counts a result
  against the thresholds, `next_check_in` says when to look again.
- `http_request`, `http_result`, `exec_result`, `exec_timeout_result`, `tcp_result`, `grpc_*` turn the raw
  outcome of a probe into a `Result` with upstream's wording; `probe_event` says which event to record.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from kopflet import gotext
from kopflet.api import spec
from kopflet.api.spec import SpecError
from kopflet.container import podstate
from kopflet.envvars import container_env

# Upstream defaults (SetDefaults_Probe).
DEFAULT_INITIAL_DELAY = 0
DEFAULT_PERIOD = 10
DEFAULT_TIMEOUT = 1
DEFAULT_SUCCESS_THRESHOLD = 1
DEFAULT_FAILURE_THRESHOLD = 3

MAX_PROBE_RETRIES = 3  # upstream maxProbeRetries: a probe that *errors* is retried this often at once
MAX_OUTPUT = 10 * 1024  # upstream maxReadLength (exec) / maxRespBodyLength (http): 10 KiB
MAX_REDIRECTS = 10  # upstream RedirectChecker: same-host redirects followed at most 10 times

REASON_UNHEALTHY = "Unhealthy"  # upstream events.ContainerUnhealthy
REASON_PROBE_WARNING = "ProbeWarning"  # upstream events.ContainerProbeWarning
EVENT_WARNING = "Warning"

SCHEME_HTTP = "HTTP"
SCHEME_HTTPS = "HTTPS"

# gRPC health protocol (grpc.health.v1.Health/Check), encoded by hand: one optional string field.
GRPC_HEALTH_METHOD = "/grpc.health.v1.Health/Check"
GRPC_SERVING_STATUS = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}
GRPC_SERVING = 1

_IANA_SVC_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
_HTTP_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")


class Kind(enum.StrEnum):
    """The probe type; ``title`` is upstream's `probeType.String()` used in event messages."""

    LIVENESS = "liveness"
    READINESS = "readiness"
    STARTUP = "startup"

    @property
    def title(self) -> str:
        return self.value.capitalize()

    @property
    def field(self) -> str:
        """The container field holding this probe (``livenessProbe`` ...)."""
        return f"{self.value}Probe"


class Outcome(enum.StrEnum):
    """One probe's raw outcome (upstream `probe.Result`). WARNING counts as success (and gets an event);
    UNKNOWN means the prober itself errored: the result is thrown away, as upstream."""

    SUCCESS = "success"
    WARNING = "warning"
    FAILURE = "failure"
    UNKNOWN = "unknown"


@dataclasses.dataclass(frozen=True)
class Result:
    """What one probe run found, with the output or error upstream puts in the event message."""

    outcome: Outcome
    message: str = ""

    @classmethod
    def success(cls, message: str = "") -> Result:
        return cls(Outcome.SUCCESS, message)

    @classmethod
    def warning(cls, message: str) -> Result:
        return cls(Outcome.WARNING, message)

    @classmethod
    def failure(cls, message: str) -> Result:
        return cls(Outcome.FAILURE, message)

    @classmethod
    def unknown(cls, message: str) -> Result:
        """The prober errored (bad port name, runtime unreachable ...): the message is the error."""
        return cls(Outcome.UNKNOWN, message)


# ------------------------------------------------------------------------------------------------ spec


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExecAction:
    command: tuple[str, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class HTTPGetAction:
    port: int | str
    """A number, or the NAME of one of the container's ports (resolved when probing, as upstream)."""
    path: str = "/"
    host: str = ""
    """Empty means the pod IP."""
    scheme: str = SCHEME_HTTP
    headers: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class TCPSocketAction:
    port: int | str
    host: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class GRPCAction:
    port: int
    service: str = ""


Handler = ExecAction | HTTPGetAction | TCPSocketAction | GRPCAction


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProbeSpec:
    """One probe with the apiserver's defaults. Times are seconds (parsed ones are whole numbers; tests may
    construct shorter ones directly)."""

    kind: Kind
    handler: Handler
    initial_delay_seconds: float = DEFAULT_INITIAL_DELAY
    period_seconds: float = DEFAULT_PERIOD
    timeout_seconds: float = DEFAULT_TIMEOUT
    success_threshold: int = DEFAULT_SUCCESS_THRESHOLD
    failure_threshold: int = DEFAULT_FAILURE_THRESHOLD
    termination_grace_period_seconds: int | None = None
    """Probe-level grace period for the kill after a liveness/startup failure (overrides the pod's)."""


_HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")


def parse_probe(raw: Mapping[str, Any], kind: Kind | str, *, path: str | None = None) -> ProbeSpec:
    """A raw probe mapping as a `ProbeSpec`, defaulted and validated as the apiserver would.

    `path` prefixes error field paths (default ``livenessProbe`` etc.; the caller may pass
    ``spec.containers[0].livenessProbe``). Raises `spec.SpecError` (a ValueError).
    """
    kind = Kind(kind)
    path = path or kind.field
    body = _mapping(raw, path)
    present = [name for name in _HANDLERS if body.get(name) is not None]
    if not present:
        raise SpecError(path, "Required value: must specify a handler type")
    if len(present) > 1:
        raise SpecError(f"{path}.{present[1]}", "Forbidden: may not specify more than 1 handler type")
    name = present[0]
    handler = _HANDLER_PARSERS[name](_mapping(body[name], f"{path}.{name}"), f"{path}.{name}")

    success = _nonnegative(body.get("successThreshold"), f"{path}.successThreshold") or DEFAULT_SUCCESS_THRESHOLD
    if kind is not Kind.READINESS and success != 1:
        raise SpecError(f"{path}.successThreshold", f"Invalid value: {success}: must be 1")
    grace = _int(body.get("terminationGracePeriodSeconds"), f"{path}.terminationGracePeriodSeconds")
    if grace is not None:
        if kind is Kind.READINESS:
            raise SpecError(f"{path}.terminationGracePeriodSeconds",
                            "Invalid value: must not be set for readinessProbes")
        if grace <= 0:
            raise SpecError(f"{path}.terminationGracePeriodSeconds", f"Invalid value: {grace}: must be greater than 0")
    return ProbeSpec(
        kind=kind,
        handler=handler,
        initial_delay_seconds=_nonnegative(body.get("initialDelaySeconds"), f"{path}.initialDelaySeconds") or 0,
        period_seconds=_nonnegative(body.get("periodSeconds"), f"{path}.periodSeconds") or DEFAULT_PERIOD,
        timeout_seconds=_nonnegative(body.get("timeoutSeconds"), f"{path}.timeoutSeconds") or DEFAULT_TIMEOUT,
        success_threshold=success,
        failure_threshold=_nonnegative(body.get("failureThreshold"), f"{path}.failureThreshold")
        or DEFAULT_FAILURE_THRESHOLD,
        termination_grace_period_seconds=grace,
    )


def container_probes(container: spec.ContainerSpec, *, path: str | None = None) -> dict[Kind, ProbeSpec]:
    """The probes a container declares, parsed (`path` is the container's field path for errors)."""
    out: dict[Kind, ProbeSpec] = {}
    for kind, raw in ((Kind.STARTUP, container.startup_probe), (Kind.LIVENESS, container.liveness_probe),
                      (Kind.READINESS, container.readiness_probe)):
        if raw is not None:
            out[kind] = parse_probe(raw, kind, path=f"{path}.{kind.field}" if path else None)
    return out


def probed_containers(pod: spec.Pod) -> tuple[tuple[spec.ContainerSpec, bool], ...]:
    """The containers probes run for, with whether each is an init container: the regular ones and the
    sidecars (restartable init containers); regular init containers cannot have probes."""
    return (*((c, True) for c in pod.spec.init_containers if c.is_sidecar),
            *((c, False) for c in pod.spec.containers))


def termination_grace_period(container: spec.ContainerSpec, kind: Kind) -> int | None:
    """The probe-level terminationGracePeriodSeconds for a kill after this probe failed, or None (use the
    pod's), as upstream `killContainer` picks it for reasons LivenessProbe / StartupProbe."""
    raw = container.liveness_probe if kind is Kind.LIVENESS else (
        container.startup_probe if kind is Kind.STARTUP else None)
    value = raw.get("terminationGracePeriodSeconds") if raw else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _exec(body: Mapping[str, Any], path: str) -> ExecAction:
    command = body.get("command")
    if command is None or command == []:
        raise SpecError(f"{path}.command", "Required value")
    if isinstance(command, str) or not isinstance(command, Sequence):
        raise SpecError(f"{path}.command", "Invalid value: must be a list of strings")
    for i, item in enumerate(command):
        if not isinstance(item, str):
            raise SpecError(f"{path}.command[{i}]", f"Invalid value: {item!r}: must be a string")
    return ExecAction(command=tuple(command))


def _http_get(body: Mapping[str, Any], path: str) -> HTTPGetAction:
    scheme = body.get("scheme") or SCHEME_HTTP
    if scheme not in (SCHEME_HTTP, SCHEME_HTTPS):
        raise SpecError(f"{path}.scheme", f'Unsupported value: {scheme!r}: supported values: "HTTP", "HTTPS"')
    headers = []
    raw_headers = body.get("httpHeaders") or []
    if isinstance(raw_headers, str) or not isinstance(raw_headers, Sequence):
        raise SpecError(f"{path}.httpHeaders", "Invalid value: must be a list")
    for i, item in enumerate(raw_headers):
        header = _mapping(item, f"{path}.httpHeaders[{i}]")
        name = _str(header.get("name"), f"{path}.httpHeaders[{i}].name")
        if not name:
            raise SpecError(f"{path}.httpHeaders[{i}].name", "Required value")
        if not _HTTP_TOKEN.match(name):
            raise SpecError(f"{path}.httpHeaders[{i}].name", f"Invalid value: {name!r}: a valid HTTP header must "
                            "consist of alphanumeric characters or '-'")
        headers.append((name, _str(header.get("value"), f"{path}.httpHeaders[{i}].value")))
    return HTTPGetAction(port=_port(body.get("port"), f"{path}.port"),
                         path=_str(body.get("path"), f"{path}.path") or "/",
                         host=_str(body.get("host"), f"{path}.host"),
                         scheme=scheme, headers=tuple(headers))


def _tcp_socket(body: Mapping[str, Any], path: str) -> TCPSocketAction:
    return TCPSocketAction(port=_port(body.get("port"), f"{path}.port"), host=_str(body.get("host"), f"{path}.host"))


def _grpc(body: Mapping[str, Any], path: str) -> GRPCAction:
    port = _int(body.get("port"), f"{path}.port")
    if port is None:
        raise SpecError(f"{path}.port", "Required value")
    if not 1 <= port <= 65535:
        raise SpecError(f"{path}.port", f"Invalid value: {port}: must be between 1 and 65535, inclusive")
    return GRPCAction(port=port, service=_str(body.get("service"), f"{path}.service"))


_HANDLER_PARSERS: dict[str, Any] = {"exec": _exec, "httpGet": _http_get, "tcpSocket": _tcp_socket, "grpc": _grpc}


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SpecError(path, f"Invalid value: {type(value).__name__}: must be an object")
    return value


def _str(value: Any, path: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise SpecError(path, f"Invalid value: {value!r}: must be a string")
    return value


def _int(value: Any, path: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(path, f"Invalid value: {value!r}: must be an integer")
    return value


def _nonnegative(value: Any, path: str) -> int | None:
    number = _int(value, path)
    if number is not None and number < 0:
        raise SpecError(path, f"Invalid value: {number}: must be greater than or equal to 0")
    return number


def _port(value: Any, path: str) -> int | str:
    if value is None or value == "":
        raise SpecError(path, "Required value")
    if isinstance(value, str):
        if value.isdigit():  # an int stored as a string: upstream's resolver accepts it
            value = int(value)
        elif (len(value) > 15 or not _IANA_SVC_NAME.match(value) or "--" in value
              or not any(c.isalpha() for c in value)):
            raise SpecError(path, f"Invalid value: {value!r}: must be a port number or an IANA_SVC_NAME "
                            "(at most 15 lowercase letters, digits and '-', with at least one letter)")
        else:
            return value
    number = _int(value, path)
    assert number is not None
    if not 1 <= number <= 65535:
        raise SpecError(path, f"Invalid value: {number}: must be between 1 and 65535, inclusive")
    return number


# ------------------------------------------------------------------------------------- the state machine


INITIAL_RESULT = {Kind.READINESS: Outcome.FAILURE, Kind.LIVENESS: Outcome.SUCCESS, Kind.STARTUP: Outcome.UNKNOWN}
"""Upstream `initialValue`: readiness starts failed, liveness passed, startup unknown (= not started)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ContainerView:
    """What the prober needs to know of the latest instance of the probed container."""

    container_id: str = ""
    """Empty: not created yet (or gone)."""
    running: bool = False
    started_at: float = 0.0
    """Seconds since the epoch (the runtime's startedAt)."""
    terminated: bool = False
    restart_never: bool = False
    """Upstream worker's "will not be restarted": `ContainerShouldRestart` says no for the latest instance's exit
    code (its restartPolicyRules, its own restartPolicy, else the pod's); once terminated, probing stops."""
    deleting: bool = False
    """The pod has a deletionTimestamp."""


def container_view(pod: spec.Pod, runtime: podstate.RuntimePodStatus, name: str) -> ContainerView:
    """The view of container `name` from the runtime's latest instance of it."""
    info = runtime.latest_container(name)
    if info is None:
        return ContainerView(deleting=pod.is_deleting)
    container = pod.spec.container(name)
    return ContainerView(container_id=info.id,
                         running=info.state is podstate.State.RUNNING,
                         started_at=info.started_at / 1e9,
                         terminated=info.state is podstate.State.EXITED,
                         restart_never=container is not None
                         and not spec.container_should_restart(container, pod.spec, info.exit_code),
                         deleting=pod.is_deleting)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProbeState:
    """One probe worker (upstream `worker`): the published result for the current container, the run of
    equal raw results, and what it knows about the container."""

    spec: ProbeSpec
    result: Outcome
    """The published result for `container_id` (SUCCESS, FAILURE, or UNKNOWN = startup not decided)."""
    container_id: str = ""
    running: bool = False
    started_at: float = 0.0
    deleting: bool = False
    container_started: bool = False
    """The startup gate: the container has no startup probe or it succeeded (for the startup probe itself:
    its own result)."""
    last_result: Outcome | None = None
    result_run: int = 0
    on_hold: bool = False
    """A liveness/startup failure was published: no probing until a new container appears."""
    stopped: bool = False
    """The worker is done (pod deleting for liveness/startup, or terminated for good)."""
    last_probe_at: float | None = None
    message: str = ""
    """The last probe's output or error."""

    @property
    def kind(self) -> Kind:
        return self.spec.kind


def new_state(probe: ProbeSpec) -> ProbeState:
    """A worker that has seen no container yet."""
    return ProbeState(spec=probe, result=INITIAL_RESULT[probe.kind])


def observe(state: ProbeState, view: ContainerView, *, started: bool = True) -> ProbeState:
    """Feed the worker the latest container view (upstream `doProbe` up to the probe itself).

    `started` is the startup gate for liveness/readiness (the container has no startup probe, or its startup
    result is SUCCESS); the startup probe uses its own result. Idempotent for an unchanged view.
    """
    if state.stopped:
        return state
    if not view.container_id:
        return dataclasses.replace(state, running=False)  # not created yet, or deleted: wait
    if view.container_id != state.container_id:
        # A new container: its result starts over and probing resumes (upstream resets the result and
        # onHold; the run count is reset too, so a new container never inherits the old one's successes).
        state = dataclasses.replace(state, container_id=view.container_id, result=INITIAL_RESULT[state.kind],
                                    last_result=None, result_run=0, on_hold=False, last_probe_at=None,
                                    message="")
    elif view.running and not state.running and not state.on_hold:
        # Seen created (not running: published FAILURE) and now running, same id: start from the initial
        # result, so a stale "liveness failed" cannot get a container killed the moment it starts.
        state = dataclasses.replace(state, result=INITIAL_RESULT[state.kind], last_result=None, result_run=0)
    state = dataclasses.replace(
        state, running=view.running, started_at=view.started_at, deleting=view.deleting,
        container_started=state.result is Outcome.SUCCESS if state.kind is Kind.STARTUP else started)
    if state.on_hold:
        return state
    if not view.running:
        return dataclasses.replace(state, result=Outcome.FAILURE,
                                   stopped=view.terminated and view.restart_never)
    if view.deleting and state.kind in (Kind.LIVENESS, Kind.STARTUP):
        # Graceful shutdown: a last success keeps it quiet, and probing stops.
        return dataclasses.replace(state, result=Outcome.SUCCESS, stopped=True,
                                   container_started=True if state.kind is Kind.STARTUP else started)
    return state


def _gated(state: ProbeState, now: float) -> bool:
    """Not probed now, whatever the period: no running container, on hold, shutting down, in the initial
    delay, or held back by the startup gate."""
    if state.stopped or not state.container_id or state.on_hold or not state.running:
        return True
    if state.deleting and state.kind in (Kind.LIVENESS, Kind.STARTUP):
        return True
    if now - state.started_at < state.spec.initial_delay_seconds:
        return True
    if state.kind is Kind.STARTUP:
        return state.container_started  # started: the startup probe is done for this container
    return not state.container_started  # liveness/readiness wait for the startup probe


def due(state: ProbeState, now: float) -> bool:
    """Whether to run the probe now: nothing holds it back and a period passed since the last run."""
    if _gated(state, now):
        return False
    return state.last_probe_at is None or now >= state.last_probe_at + state.spec.period_seconds


def next_check_in(state: ProbeState, now: float) -> float | None:
    """Seconds until `due` may become true without new information (None: the worker is done). While
    gated by something only news can change (no container, on hold, the startup gate) it is one period:
    the caller also wakes on news."""
    if state.stopped:
        return None
    period = state.spec.period_seconds
    if not state.container_id or state.on_hold or not state.running:
        return period
    delay_left = state.started_at + state.spec.initial_delay_seconds - now
    if delay_left > 0:
        return delay_left
    if _gated(state, now):
        return period
    if state.last_probe_at is None:
        return 0.0
    return max(0.0, state.last_probe_at + period - now)


def trigger(state: ProbeState) -> ProbeState:
    """Probe at the next chance instead of waiting for the period (upstream `manualTriggerCh`, used for
    readiness right after the startup probe succeeded)."""
    return dataclasses.replace(state, last_probe_at=None)


def record(state: ProbeState, result: Result, now: float) -> ProbeState:
    """Count one probe result (upstream `doProbe` after the probe), `now` being when it started.

    UNKNOWN (the prober errored) is thrown away; WARNING counts as success. The published result changes
    only after `successThreshold` / `failureThreshold` equal results in a row; a published liveness or
    startup failure puts the worker on hold until the next container.
    """
    state = dataclasses.replace(state, last_probe_at=now, message=result.message)
    if result.outcome is Outcome.UNKNOWN:
        return state
    outcome = Outcome.SUCCESS if result.outcome is Outcome.WARNING else result.outcome
    if state.last_result is outcome:
        state = dataclasses.replace(state, result_run=state.result_run + 1)
    else:
        state = dataclasses.replace(state, last_result=outcome, result_run=1)
    threshold = state.spec.failure_threshold if outcome is Outcome.FAILURE else state.spec.success_threshold
    if state.result_run < threshold:
        return state
    state = dataclasses.replace(state, result=outcome)
    if outcome is Outcome.FAILURE and state.kind in (Kind.LIVENESS, Kind.STARTUP):
        state = dataclasses.replace(state, on_hold=True, result_run=0)
    if state.kind is Kind.STARTUP:
        state = dataclasses.replace(state, container_started=outcome is Outcome.SUCCESS)
    return state


def published(state: ProbeState) -> tuple[str, Outcome] | None:
    """(container id, result) as the rest of the agent sees it, or None before any container."""
    return (state.container_id, state.result) if state.container_id else None


# ------------------------------------------------------------------------------------------------ events


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProbeEvent:
    """An event for the container (upstream `recordContainerEvent` in prober.probe)."""

    type: str
    reason: str
    message: str


def probe_event(kind: Kind, result: Result) -> ProbeEvent | None:
    """The event upstream records for one probe result: Unhealthy for a failure or an error, ProbeWarning for
    a warning, nothing for a success."""
    if result.outcome is Outcome.FAILURE:
        return ProbeEvent(type=EVENT_WARNING, reason=REASON_UNHEALTHY,
                          message=f"{kind.title} probe failed: {result.message}")
    if result.outcome is Outcome.UNKNOWN:
        return ProbeEvent(type=EVENT_WARNING, reason=REASON_UNHEALTHY,
                          message=f"{kind.title} probe errored: {result.message}")
    if result.outcome is Outcome.WARNING:
        return ProbeEvent(type=EVENT_WARNING, reason=REASON_PROBE_WARNING,
                          message=f"{kind.title} probe warning: {result.message}")
    return None


# ---------------------------------------------------------------------------------------- probe targets


@dataclasses.dataclass(frozen=True, kw_only=True)
class HttpRequest:
    """An httpGet probe request (upstream `NewRequestForHTTPGetAction`)."""

    url: str
    headers: tuple[tuple[str, str], ...]
    """Header names canonicalised as Go does, User-Agent and Accept defaulted; an Accept given empty is
    dropped (`skip_headers` says which defaults the client must not add)."""
    skip_headers: tuple[str, ...] = ()
    hostname: str = ""
    """The URL's host, compared against redirect targets."""


def user_agent(version: str) -> str:
    """``kube-probe/<major>.<minor>`` for the agent's version, as upstream's probes announce themselves."""
    major, _, rest = version.lstrip("v").partition(".")
    minor = rest.partition(".")[0]
    return f"kube-probe/{major}.{minor}"


def http_request(action: HTTPGetAction, container: spec.ContainerSpec, pod_ip: str, agent: str) -> HttpRequest:
    """The request an httpGet probe sends; ValueError (a prober error) for an unresolvable port."""
    scheme = action.scheme.lower() or "http"
    host = action.host or pod_ip
    if not host:
        raise ValueError("the pod has no IP address to probe")
    port = spec.resolve_port(action.port, container)
    # Upstream formatURL: the path is parsed as a URL (keeping its query) and scheme/host are set.
    parts = urllib.parse.urlsplit(action.path)
    url = urllib.parse.urlunsplit((scheme, gotext.join_host_port(host, port), parts.path, parts.query, parts.fragment))
    headers: list[tuple[str, str]] = [(gotext.canonical_header(n), v) for n, v in action.headers]
    names = {n for n, _ in headers}
    skip: list[str] = ["Accept-Encoding"]  # upstream's transport has DisableCompression
    if "User-Agent" not in names:
        headers.append(("User-Agent", agent))
    if "Accept" not in names:
        headers.append(("Accept", "*/*"))
    elif not any(v for n, v in headers if n == "Accept"):
        headers = [(n, v) for n, v in headers if n != "Accept"]
        skip.append("Accept")
    return HttpRequest(url=url, headers=tuple(headers), skip_headers=tuple(skip), hostname=host)


def http_result(status: int, body: bytes) -> Result:
    """Upstream `DoHTTPProbe`: 200-399 succeed (3xx, a redirect not followed, with a warning), anything else
    fails; the body (at most 10 KiB) is only the output of a success."""
    text = body[:MAX_OUTPUT].decode("utf-8", errors="replace")
    if 200 <= status < 400:
        if status >= 300:
            return Result.warning(f"Probe terminated redirects, Response body: {text}")
        return Result.success(text)
    return Result.failure(f"HTTP probe failed with statuscode: {status}")


def http_error(url: str, detail: str) -> Result:
    """A request that failed (refused, timed out, too many redirects): a failure, worded as Go's url.Error."""
    return Result.failure(f"Get {gotext.go_quote(url)}: {detail}")


HTTP_TIMEOUT_DETAIL = "context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
HTTP_REDIRECTS_DETAIL = f"stopped after {MAX_REDIRECTS} redirects"


def expand_command(command: Sequence[str], container: spec.ContainerSpec) -> list[str]:
    """Upstream `ExpandContainerCommandOnlyStatic`: ``$(VAR)`` from the container's plain ``env`` values only
    (a ``valueFrom`` variable expands to empty); exec probes see no other environment."""
    values = {env.name: env.value for env in container.env}
    return [container_env.expand(arg, values) for arg in command]


def exec_result(exit_code: int, stdout: bytes, stderr: bytes) -> Result:
    """An exec probe's result: exit code 0 succeeds; the output is stdout then stderr, at most 10 KiB."""
    output = (stdout + stderr)[:MAX_OUTPUT].decode("utf-8", errors="replace")
    return Result.success(output) if exit_code == 0 else Result.failure(output)


def exec_timeout_result(command: Sequence[str]) -> Result:
    """The runtime reported the command's deadline exceeded: a failure (upstream ExecProbeTimeout wording)."""
    return Result.failure(f"command {gotext.go_quote(' '.join(command))} timed out")


def tcp_refused(host: str, port: int, detail: str) -> Result:
    """A TCP probe that could not connect, worded as Go's dial error."""
    return Result.failure(f"dial tcp {gotext.join_host_port(host, port)}: {detail}")


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def grpc_health_request(service: str) -> bytes:
    """A serialized `grpc.health.v1.HealthCheckRequest{service}` (field 1, a string)."""
    data = service.encode()
    return b"\x0a" + _varint(len(data)) + data if data else b""


def grpc_health_status(data: bytes) -> int:
    """The `status` (field 1, an enum) of a serialized `HealthCheckResponse`; unknown fields skipped."""
    status, pos = 0, 0

    def varint() -> int:
        nonlocal pos
        value, shift = 0, 0
        while True:
            if pos >= len(data):
                raise ValueError("truncated HealthCheckResponse")
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while pos < len(data):
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            value = varint()
            if field == 1:
                status = value
        elif wire == 2:
            length = varint()  # read first: `pos += varint()` would add to the stale position
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire} in HealthCheckResponse")
    return status


def grpc_result(status: int) -> Result:
    """Upstream grpc prober: SERVING succeeds, any other status fails."""
    if status == GRPC_SERVING:
        return Result.success("service healthy")
    name = GRPC_SERVING_STATUS.get(status, str(status))
    return Result.failure(f"service unhealthy (responded with {gotext.go_quote(name)})")


__all__ = [
    "ContainerView",
    "ExecAction",
    "GRPCAction",
    "HTTPGetAction",
    "HttpRequest",
    "Kind",
    "Outcome",
    "ProbeEvent",
    "ProbeSpec",
    "ProbeState",
    "Result",
    "TCPSocketAction",
    "container_probes",
    "container_view",
    "due",
    "exec_result",
    "exec_timeout_result",
    "expand_command",
    "grpc_health_request",
    "grpc_health_status",
    "grpc_result",
    "http_request",
    "http_result",
    "new_state",
    "next_check_in",
    "observe",
    "parse_probe",
    "probe_event",
    "probed_containers",
    "published",
    "record",
    "termination_grace_period",
    "trigger",
]
