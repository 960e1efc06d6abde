"""A fault-injecting CRI proxy for tests: ``python -m devstack.criproxy --listen PATH --upstream PATH``.

It mirrors upstream Kubernetes' ``test/e2e_node/criproxy``: the agent under test is pointed at the
proxy's socket instead of containerd's, the proxy forwards every CRI call to the real runtime, and a
test tells it to fail, delay or hang chosen calls. That is how the agent's error handling (retries,
backoff, "the runtime did it but the reply was lost") is tested against a real runtime, without
breaking the runtime itself.

Forwarding is generic and byte-for-byte: one `grpc.GenericRpcHandler` answers every method name with
identity (bytes) serializers, so the proxy needs no protobuf and forwards methods it has never heard
of. Request metadata and the caller's deadline go upstream; the runtime's metadata, status and
details come back unchanged.

Usage::

    with CriProxy(listen=tmp / "cri.sock", upstream="unix:///run/containerd/containerd.sock") as proxy:
        proxy.inject("RunPodSandbox", Fail(grpc.StatusCode.UNAVAILABLE, "injected"), times=1)
        proxy.inject("StartContainer", Hang(), when=lambda request: b"pod-a" in request)
        ...  # run the agent with --container-runtime-endpoint=proxy.endpoint
        assert proxy.calls("RunPodSandbox") == 2

The server is grpc's synchronous one (its own threads), so plain synchronous pytest tests can drive
it while the agent runs in another process.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Final, NamedTuple, Self

import grpc

RUNTIME_SERVICE: Final = "runtime.v1.RuntimeService"
IMAGE_SERVICE: Final = "runtime.v1.ImageService"
CONTAINERD_EVENTS: Final = "containerd.services.events.v1.Events"
"""containerd's own event service on the same socket, which the agent subscribes to (kopflet.pleg.evented)."""

# The CRI v1 (k8s.io/cri-api v0.37) methods whose responses are a stream, and containerd's event subscription;
# every other method, including ones this list does not know, is forwarded as unary-unary. A test in
# tests/unit/test_criproxy.py keeps this in step with the generated stubs.
STREAMING_METHODS: Final = frozenset({
    f"/{RUNTIME_SERVICE}/GetContainerEvents",
    f"/{RUNTIME_SERVICE}/StreamPodSandboxes",
    f"/{RUNTIME_SERVICE}/StreamContainers",
    f"/{RUNTIME_SERVICE}/StreamContainerStats",
    f"/{RUNTIME_SERVICE}/StreamPodSandboxStats",
    f"/{RUNTIME_SERVICE}/StreamPodSandboxMetrics",
    f"/{IMAGE_SERVICE}/StreamImages",
    f"/{CONTAINERD_EVENTS}/Subscribe",
})

# The same limit as cri_client (kubelet's 16 MiB): the proxy must not be what breaks a big ListContainers.
_MAX_MESSAGE_BYTES: Final = 16 * 1024 * 1024
_CHANNEL_OPTIONS: Final[Sequence[tuple[str, Any]]] = (
    ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
    ("grpc.enable_http_proxy", 0),
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
)
_SERVER_OPTIONS: Final[Sequence[tuple[str, Any]]] = (
    ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
)
# Metadata gRPC itself sets on every call; forwarding it would duplicate or contradict the upstream call's own.
_TRANSPORT_METADATA: Final = frozenset({"user-agent", "content-type", "te", "host"})
# A call without a deadline reports a remaining time of centuries: pass "no timeout" upstream instead.
_NO_DEADLINE: Final = 365 * 24 * 3600.0
_DEFAULT_UPSTREAM: Final = "unix:///run/containerd/containerd.sock"

Metadata = tuple[tuple[str, str | bytes], ...]
Predicate = Callable[[bytes], bool]


# ----------------------------------------------------------------------------------------------- faults


@dataclasses.dataclass(frozen=True)
class Fail:
    """Answer with an error instead of the runtime (upstream's criproxy injectors return an error too).

    `after_forward=True` forwards the call first and discards the runtime's answer: the runtime did
    the work, the caller sees an error (a reply lost on the way back). A streaming call is drained
    to its end before the error, so do not use it on an endless stream like GetContainerEvents.
    """

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN
    details: str = "injected by criproxy"
    after_forward: bool = False

    def __post_init__(self) -> None:
        if self.code is grpc.StatusCode.OK:
            raise ValueError("Fail needs an error code, not OK")


@dataclasses.dataclass(frozen=True)
class Delay:
    """Hold the call for `seconds`, then forward it: a slow runtime.

    A caller that gives up meanwhile is not forwarded (the runtime never hears of the call).
    """

    seconds: float

    def __post_init__(self) -> None:
        if self.seconds < 0:
            raise ValueError("Delay needs seconds >= 0")


@dataclasses.dataclass(frozen=True)
class Hang:
    """Hold the call without forwarding it: a stuck runtime.

    It ends when the caller's deadline passes (the caller sees DEADLINE_EXCEEDED from its own side) or
    when the test calls `release()`, `clear()` or `stop()`; a released call is answered with
    `code`/`details`, still without reaching the runtime.

    `after_forward=True` forwards the call first and holds the runtime's answer instead: the runtime did
    the work and the caller is stuck waiting. That is "right after step X" for the agent kill matrix:
    the test kills the agent while it waits, knowing exactly what the runtime has done.
    """

    code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE
    details: str = "hung call released by criproxy"
    after_forward: bool = False

    def __post_init__(self) -> None:
        if self.code is grpc.StatusCode.OK:
            raise ValueError("Hang needs an error code for released calls, not OK")


Fault = Fail | Delay | Hang


def method_matches(pattern: str, method: str) -> bool:
    """Whether a call to the gRPC path `method` is meant by `pattern`.

    `pattern` is a short name ("RunPodSandbox", any service), a service-qualified name
    ("RuntimeService/Version" or "runtime.v1.RuntimeService/Version"), a full path
    ("/runtime.v1.RuntimeService/Version") or "*" (every method).
    """
    if pattern == "*":
        return True
    path = method.lstrip("/")
    pattern = pattern.lstrip("/")
    if "/" not in pattern:
        return path.rpartition("/")[2] == pattern
    return path == pattern or path.endswith(f".{pattern}")


@dataclasses.dataclass(eq=False)
class Injection:
    """One `inject()` rule; `hits` counts the calls it has applied to so far."""

    method: str
    fault: Fault
    times: int | None = None
    when: Predicate | None = None
    hits: int = 0

    def applies(self, method: str, request: bytes) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        if not method_matches(self.method, method):
            return False
        return self.when is None or bool(self.when(request))

    @property
    def exhausted(self) -> bool:
        return self.times is not None and self.hits >= self.times


class Record(NamedTuple):
    """One call the proxy saw: its gRPC path and what the proxy decided to do with it.

    Outcomes: ``forwarded`` (the runtime's answer, OK or not, went back), ``delayed`` (then forwarded),
    ``failed`` (an injected error, not forwarded), ``lost`` (forwarded, answer replaced by an error),
    ``hung`` (held, not forwarded).
    """

    method: str
    outcome: str


FORWARDED: Final = "forwarded"
DELAYED: Final = "delayed"
FAILED: Final = "failed"
LOST: Final = "lost"
HUNG: Final = "hung"


class _Hold:
    """A call held by Delay or Hang: woken when the caller goes away, or released by the test."""

    def __init__(self, method: str, hang: bool) -> None:
        self.method, self.hang = method, hang
        self.event = threading.Event()
        self.released = False

    def release(self) -> None:
        self.released = True
        self.event.set()


# ------------------------------------------------------------------------------------------------ proxy


def _unix_path(endpoint: str | Path) -> Path:
    text = str(endpoint)
    if text.startswith("unix://"):
        return Path(text.removeprefix("unix://"))
    if text.startswith("unix:"):
        return Path(text.removeprefix("unix:"))
    return Path(text)


def _target(endpoint: str | Path) -> str:
    """A gRPC channel target: bare socket paths become unix:// (like cri_client.normalize_endpoint)."""
    text = str(endpoint)
    return f"unix://{text}" if text.startswith("/") else text


class _Handler(grpc.GenericRpcHandler):
    """Answers every method name: the one place that decides unary-unary versus unary-stream."""

    def __init__(self, proxy: CriProxy) -> None:
        self._proxy = proxy

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method: str = handler_call_details.method  # type: ignore[attr-defined]
        proxy = self._proxy
        if method in proxy.streaming:
            def stream(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
                return proxy._stream(method, request, context)

            return grpc.unary_stream_rpc_method_handler(stream)

        def unary(request: bytes, context: grpc.ServicerContext) -> bytes:
            return proxy._unary(method, request, context)

        return grpc.unary_unary_rpc_method_handler(unary)


class CriProxy:
    """A CRI endpoint in front of the real runtime that forwards every call and injects chosen faults.

    `listen` is the socket path to serve on (a path or ``unix://`` URL; a stale socket file is
    replaced); `upstream` is the runtime's endpoint (a path, ``unix://`` URL or any gRPC target).
    `streaming` adds gRPC paths to forward as unary-stream besides `STREAMING_METHODS`.
    `observer`, if given, is called with every `Record` as the call arrives (the CLI's -v).
    """

    def __init__(
        self,
        listen: str | Path,
        upstream: str | Path = _DEFAULT_UPSTREAM,
        *,
        streaming: Iterable[str] = (),
        max_workers: int = 32,
        observer: Callable[[Record], None] | None = None,
    ) -> None:
        self.listen: Final = _unix_path(listen)
        self.upstream: Final = _target(upstream)
        self.streaming: Final = STREAMING_METHODS | frozenset(streaming)
        self.observer = observer
        self._max_workers = max_workers
        self._lock = threading.Condition()
        self._injections: list[Injection] = []
        self._holds: set[_Hold] = set()
        self._counts: collections.Counter[str] = collections.Counter()
        self._log: list[Record] = []
        self._server: grpc.Server | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._channel: grpc.Channel | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.listen)!r} -> {self.upstream!r})"

    @property
    def endpoint(self) -> str:
        """What to give the agent as --container-runtime-endpoint."""
        return f"unix://{self.listen}"

    # -------------------------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Listen and serve in grpc's own threads; returns at once. The upstream connects lazily."""
        if self._server is not None:
            raise RuntimeError(f"{self!r} is already started")
        self.listen.parent.mkdir(parents=True, exist_ok=True)
        self._channel = grpc.insecure_channel(self.upstream, options=list(_CHANNEL_OPTIONS))
        self._executor = ThreadPoolExecutor(max_workers=self._max_workers, thread_name_prefix="criproxy")
        server = grpc.server(self._executor, handlers=[_Handler(self)], options=list(_SERVER_OPTIONS))
        try:
            if server.add_insecure_port(f"unix://{self.listen}") == 0:
                raise RuntimeError(f"cannot listen on {self.listen}")
            server.start()
        except BaseException:
            self._channel.close()
            self._executor.shutdown(wait=False)
            self._channel = self._executor = None
            raise
        self._server = server

    def stop(self, grace: float | None = 1.0) -> None:
        """Release held calls, stop serving (calls still running get `grace` seconds), close everything.

        Safe to call twice. grpc does not shut down an executor it was given, so this does.
        """
        server, self._server = self._server, None
        if server is None:
            return
        with self._lock:
            for hold in self._holds:
                hold.release()
        server.stop(grace).wait()
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        self._executor = None
        self.listen.unlink(missing_ok=True)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------------------------ test controls

    def inject(
        self,
        method: str,
        fault: Fault,
        *,
        times: int | None = None,
        when: Predicate | None = None,
    ) -> Injection:
        """Apply `fault` to the next `times` calls of `method` (None: every call) that `when` accepts.

        `method` is matched by `method_matches`; `when` sees the raw request bytes (``lambda r: b"pod-a" in r``).
        Rules are tried in the order they were added, and one call gets at most one fault, so
        ``inject(m, Fail(...), times=1); inject(m, Delay(1))`` fails the first call and slows the rest.
        """
        if times is not None and times < 1:
            raise ValueError("times must be None (forever) or at least 1")
        injection = Injection(method, fault, times, when)
        with self._lock:
            self._injections.append(injection)
        return injection

    def clear(self) -> None:
        """Remove every rule and release every hung call."""
        with self._lock:
            self._injections.clear()
        self.release()

    def release(self, method: str = "*") -> int:
        """Release the hung calls of `method` (default: all), answering them with their Hang's error; how many."""
        with self._lock:
            held = [hold for hold in self._holds if hold.hang and method_matches(method, hold.method)]
            for hold in held:
                hold.release()
        return len(held)

    def calls(self, method: str = "*") -> int:
        """How many calls of `method` (see `method_matches`) arrived, whatever happened to them."""
        with self._lock:
            return sum(n for path, n in self._counts.items() if method_matches(method, path))

    def wait_calls(self, method: str, count: int = 1, timeout: float = 10.0) -> bool:
        """Wait until at least `count` calls of `method` arrived: the agent is in the call now. False on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: self.calls(method) >= count, timeout)

    def held(self, method: str = "*") -> int:
        """How many calls of `method` are being held (by Delay or Hang) right now."""
        with self._lock:
            return sum(1 for hold in self._holds if method_matches(method, hold.method))

    @property
    def log(self) -> list[Record]:
        """Every call so far, in arrival order (a copy)."""
        with self._lock:
            return list(self._log)

    def reset(self) -> None:
        """Forget counts and the log (rules stay): for a test that reuses one proxy."""
        with self._lock:
            self._counts.clear()
            self._log.clear()

    # -------------------------------------------------------------------------------------- the calls

    def _admit(self, method: str, request: bytes) -> tuple[Fault | None, _Hold | None]:
        """Count the call, pick its fault (consuming one use of the rule) and register a hold, atomically.

        Atomic so that a test that saw `calls()` go up can `release()` and be sure to reach the call.
        """
        with self._lock:
            fault: Fault | None = None
            for injection in self._injections:
                if injection.applies(method, request):
                    injection.hits += 1
                    if injection.exhausted:
                        self._injections.remove(injection)
                    fault = injection.fault
                    break
            hold = None
            match fault:
                case None:
                    outcome = FORWARDED
                case Fail(after_forward=True):
                    outcome = LOST
                case Fail():
                    outcome = FAILED
                case Delay():
                    outcome, hold = DELAYED, _Hold(method, hang=False)
                case Hang():
                    outcome, hold = HUNG, _Hold(method, hang=True)
            if hold is not None:
                self._holds.add(hold)
            record = Record(method, outcome)
            self._counts[method] += 1
            self._log.append(record)
            self._lock.notify_all()
        if self.observer is not None:
            self.observer(record)
        return fault, hold

    def _hold(self, hold: _Hold, context: grpc.ServicerContext, seconds: float | None) -> bool:
        """Wait for `seconds` (None: until released). True if the caller still waits afterwards."""
        if not context.add_callback(hold.event.set):
            hold.event.set()
        deadline = None if seconds is None else time.monotonic() + seconds
        try:
            while context.is_active() and not hold.released:
                step = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
                if step <= 0:
                    break
                hold.event.wait(step)
        finally:
            with self._lock:
                self._holds.discard(hold)
        return context.is_active()

    def _prelude(self, method: str, request: bytes,
                 context: grpc.ServicerContext) -> tuple[Fault | None, _Hold | None]:
        """Apply the pre-forwarding part of a fault; returns the fault (and its hold) if it still matters
        after forwarding."""
        fault, hold = self._admit(method, request)
        match fault:
            case Fail(after_forward=False):
                context.abort(fault.code, fault.details)
            case Delay():
                assert hold is not None
                if not self._hold(hold, context, fault.seconds):
                    context.abort(grpc.StatusCode.CANCELLED, "the caller went away while criproxy delayed the call")
            case Hang(after_forward=False):
                self._hang(fault, hold, context)
        return fault, hold

    def _hang(self, fault: Hang, hold: _Hold | None, context: grpc.ServicerContext) -> None:
        assert hold is not None
        if self._hold(hold, context, None):
            context.abort(fault.code, fault.details)
        context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "the caller went away while criproxy held the call")

    def _upstream_args(self, context: grpc.ServicerContext) -> dict[str, Any]:
        remaining = context.time_remaining()
        metadata = tuple(
            (key, value) for key, value in context.invocation_metadata()
            if not key.startswith((":", "grpc-")) and key not in _TRANSPORT_METADATA
        )
        return {
            "timeout": None if remaining is None or remaining > _NO_DEADLINE else remaining,
            "metadata": metadata,
            "wait_for_ready": False,  # a runtime that is down is an outage the caller must see, not a queue
        }

    def _relay_error(self, error: grpc.RpcError, context: grpc.ServicerContext) -> None:
        """Send the runtime's error back as it was: code, details, metadata."""
        call: grpc.Call = error  # type: ignore[assignment]  # errors of calls are grpc.Call too
        initial, trailing = call.initial_metadata(), call.trailing_metadata()
        if initial:
            context.send_initial_metadata(initial)
        if trailing:
            context.set_trailing_metadata(trailing)
        context.abort(call.code(), call.details() or "")

    def _upstream(self, context: grpc.ServicerContext) -> grpc.Channel:
        channel = self._channel
        if channel is None:  # a call still in a Delay while stop() closed the channel
            context.abort(grpc.StatusCode.UNAVAILABLE, "criproxy is stopping")
        return channel

    def _unary(self, method: str, request: bytes, context: grpc.ServicerContext) -> bytes:
        fault, hold = self._prelude(method, request, context)
        rpc = self._upstream(context).unary_unary(method)  # no serializers: bytes in, bytes out
        future = rpc.future(request, **self._upstream_args(context))
        context.add_callback(future.cancel)  # the caller gone (deadline, cancel) cancels the runtime's call
        try:
            response: bytes = future.result()
        except grpc.FutureCancelledError:
            context.abort(grpc.StatusCode.CANCELLED, "cancelled")
        except grpc.RpcError as error:
            if isinstance(fault, Hang):
                self._hang(fault, hold, context)
            if isinstance(fault, Fail):
                context.abort(fault.code, fault.details)
            self._relay_error(error, context)
        if isinstance(fault, Hang):
            self._hang(fault, hold, context)
        if isinstance(fault, Fail):
            context.abort(fault.code, fault.details)
        initial = future.initial_metadata()
        if initial:
            context.send_initial_metadata(initial)
        trailing = future.trailing_metadata()
        if trailing:
            context.set_trailing_metadata(trailing)
        return response

    def _stream(self, method: str, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        fault, hold = self._prelude(method, request, context)
        if isinstance(fault, Hang):  # after_forward on a stream: held before forwarding, like a plain Hang
            self._hang(fault, hold, context)
        rpc = self._upstream(context).unary_stream(method)
        responses = rpc(request, **self._upstream_args(context))
        context.add_callback(responses.cancel)
        try:
            initial = responses.initial_metadata()
            if initial and not isinstance(fault, Fail):
                context.send_initial_metadata(initial)
            for response in responses:
                if not isinstance(fault, Fail):
                    yield response
        except grpc.RpcError as error:
            if isinstance(fault, Fail):
                context.abort(fault.code, fault.details)
            self._relay_error(error, context)
        if isinstance(fault, Fail):
            context.abort(fault.code, fault.details)
        trailing = responses.trailing_metadata()
        if trailing:
            context.set_trailing_metadata(trailing)


# -------------------------------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    """Forward only, no faults: for watching what an agent asks the runtime (-v prints every call)."""
    parser = argparse.ArgumentParser(prog="python -m devstack.criproxy", description=main.__doc__)
    parser.add_argument("--listen", required=True, help="socket path to serve CRI on")
    parser.add_argument("--upstream", default=_DEFAULT_UPSTREAM,
                        help=f"the runtime's endpoint (default {_DEFAULT_UPSTREAM})")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every call")
    args = parser.parse_args(argv)

    def show(record: Record) -> None:
        print(f"{time.strftime('%H:%M:%S')} {record.method} {record.outcome}", flush=True)

    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with CriProxy(args.listen, args.upstream, observer=show if args.verbose else None) as proxy:
        print(f"criproxy: {proxy.endpoint} -> {proxy.upstream}", flush=True)
        while not stopping.wait(1.0):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
