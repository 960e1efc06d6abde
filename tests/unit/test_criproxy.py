"""
devstack.criproxy against a small in-process upstream: forwarding, the faults, the counters, shutdown.

The upstream is a real gRPC server on a unix socket that answers any method by echoing the request
bytes (so no protobuf is needed on either side) and streams three messages for GetContainerEvents;
it records what reached it, which is how "not forwarded" and "forwarded exactly once" are checked.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from cri_client.proto import api_pb2 as pb
from cri_client.proto import events_pb2 as events_pb
from devstack.criproxy import (
    DELAYED,
    FAILED,
    FORWARDED,
    HUNG,
    LOST,
    STREAMING_METHODS,
    CriProxy,
    Delay,
    Fail,
    Hang,
    Record,
    method_matches,
)

REPO = Path(__file__).resolve().parents[2]
RUN = "/runtime.v1.RuntimeService/RunPodSandbox"
START = "/runtime.v1.RuntimeService/StartContainer"
PULL = "/runtime.v1.ImageService/PullImage"
EVENTS = "/runtime.v1.RuntimeService/GetContainerEvents"
BROKEN = "/test.Upstream/Broken"


class Upstream(grpc.GenericRpcHandler):
    """Echoes every unary call, streams three events, fails BROKEN; remembers each call it answered."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bytes, dict[str, str | bytes], float]] = []
        self.lock = threading.Lock()

    def count(self, method: str) -> int:
        with self.lock:
            return sum(1 for seen in self.seen if seen[0] == method)

    def _remember(self, method: str, request: bytes, context: grpc.ServicerContext) -> None:
        with self.lock:
            self.seen.append((method, request, dict(context.invocation_metadata()), context.time_remaining()))

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        method = handler_call_details.method

        if method == EVENTS:
            def events(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
                self._remember(method, request, context)
                context.send_initial_metadata((("x-upstream", "events"),))
                for i in range(3):
                    yield b"event-%d" % i

            return grpc.unary_stream_rpc_method_handler(events)

        def unary(request: bytes, context: grpc.ServicerContext) -> bytes:
            self._remember(method, request, context)
            if method == BROKEN:
                context.set_trailing_metadata((("x-why", "broken"),))
                context.abort(grpc.StatusCode.NOT_FOUND, "no such thing")
            context.send_initial_metadata((("x-upstream", method),))
            context.set_trailing_metadata((("x-trailer", "t"),))
            return b"echo:" + request

        return grpc.unary_unary_rpc_method_handler(unary)


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[tuple[Upstream, Path]]:
    handler = Upstream()
    executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="upstream")
    server = grpc.server(executor, handlers=[handler])
    socket = tmp_path / "upstream.sock"
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    yield handler, socket
    server.stop(None).wait()
    executor.shutdown(wait=True)


@pytest.fixture
def proxy(tmp_path: Path, upstream: tuple[Upstream, Path]) -> Iterator[CriProxy]:
    with CriProxy(listen=tmp_path / "proxy.sock", upstream=f"unix://{upstream[1]}") as proxy:
        yield proxy


@pytest.fixture
def channel(proxy: CriProxy) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(proxy.endpoint) as channel:
        yield channel


def call(channel: grpc.Channel, method: str, request: bytes = b"req", timeout: float = 5.0,
         metadata: tuple[tuple[str, str | bytes], ...] = ()) -> bytes:
    return channel.unary_unary(method)(request, timeout=timeout, metadata=metadata)


def code_of(channel: grpc.Channel, method: str, request: bytes = b"req", timeout: float = 5.0) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as info:
        call(channel, method, request, timeout)
    return info.value.code()


# ------------------------------------------------------------------------------------------- forwarding


GRPC_DEADLINE_SLACK = 0.05  # seconds


def test_forwards_bytes_metadata_and_the_deadline(proxy: CriProxy, channel: grpc.Channel,
                                                  upstream: tuple[Upstream, Path]) -> None:
    request = bytes(range(256)) * 4
    response, rpc = channel.unary_unary(RUN).with_call(
        request, timeout=3.0, metadata=(("x-trace", "abc"), ("x-blob-bin", b"\x00\xff")))
    assert response == b"echo:" + request
    assert ("x-upstream", RUN) in rpc.initial_metadata()
    assert ("x-trailer", "t") in rpc.trailing_metadata()
    method, seen_request, metadata, remaining = upstream[0].seen[0]
    assert (method, seen_request) == (RUN, request)
    assert metadata["x-trace"] == "abc"
    assert metadata["x-blob-bin"] == b"\x00\xff"
    # The caller's deadline, not none (centuries) nor one of the proxy's own: gRPC's timeout header rounds up to
    # three significant figures at each hop and its clock is coarse, so a few milliseconds over 3.0 can be seen.
    assert 0 < remaining <= 3.0 + GRPC_DEADLINE_SLACK, "the caller's deadline must reach the runtime"
    assert proxy.log == [Record(RUN, FORWARDED)]


def test_runtime_errors_come_back_unchanged(channel: grpc.Channel) -> None:
    with pytest.raises(grpc.RpcError) as info:
        call(channel, BROKEN)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    assert info.value.details() == "no such thing"
    assert ("x-why", "broken") in info.value.trailing_metadata()


def test_unknown_methods_are_forwarded(channel: grpc.Channel, upstream: tuple[Upstream, Path]) -> None:
    assert call(channel, "/runtime.v2.FutureService/Whatever", b"x") == b"echo:x"
    assert upstream[0].count("/runtime.v2.FutureService/Whatever") == 1


def test_server_streaming_is_forwarded(proxy: CriProxy, channel: grpc.Channel) -> None:
    responses = channel.unary_stream(EVENTS)(b"", timeout=5.0)
    assert list(responses) == [b"event-0", b"event-1", b"event-2"]
    assert ("x-upstream", "events") in responses.initial_metadata()
    proxy.inject("GetContainerEvents", Fail(grpc.StatusCode.UNAVAILABLE), times=1)
    with pytest.raises(grpc.RpcError) as info:
        list(channel.unary_stream(EVENTS)(b"", timeout=5.0))
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def test_the_streaming_list_matches_the_cri_stubs() -> None:
    streaming = {
        f"/{service.full_name}/{method.name}"
        for descriptor in (pb.DESCRIPTOR, events_pb.DESCRIPTOR)
        for service in descriptor.services_by_name.values()
        for method in service.methods
        if method.server_streaming
    }
    assert streaming == STREAMING_METHODS
    assert "/containerd.services.events.v1.Events/Subscribe" in streaming
    assert "/runtime.v1.RuntimeService/GetContainerEvents" in streaming


def test_a_runtime_that_is_down_is_unavailable_at_once(tmp_path: Path) -> None:
    with CriProxy(tmp_path / "p.sock", upstream=str(tmp_path / "missing.sock")) as proxy, \
            grpc.insecure_channel(proxy.endpoint) as channel:
        started = time.monotonic()
        assert code_of(channel, RUN, timeout=5.0) == grpc.StatusCode.UNAVAILABLE
        assert time.monotonic() - started < 2


def test_method_names() -> None:
    assert method_matches("RunPodSandbox", RUN)
    assert method_matches("RuntimeService/RunPodSandbox", RUN)
    assert method_matches("runtime.v1.RuntimeService/RunPodSandbox", RUN)
    assert method_matches(RUN, RUN)
    assert method_matches("*", RUN)
    assert not method_matches("PodSandbox", RUN)
    assert not method_matches("ImageService/RunPodSandbox", RUN)
    assert not method_matches("Service/RunPodSandbox", RUN)


# ------------------------------------------------------------------------------------------------ faults


def test_fail_once_then_forward(proxy: CriProxy, channel: grpc.Channel, upstream: tuple[Upstream, Path]) -> None:
    injection = proxy.inject("RunPodSandbox", Fail(grpc.StatusCode.UNAVAILABLE, "injected"), times=1)
    with pytest.raises(grpc.RpcError) as info:
        call(channel, RUN)
    assert (info.value.code(), info.value.details()) == (grpc.StatusCode.UNAVAILABLE, "injected")
    assert call(channel, RUN) == b"echo:req"
    assert upstream[0].count(RUN) == 1, "a failed call must not reach the runtime"
    assert injection.hits == 1
    assert proxy.log == [Record(RUN, FAILED), Record(RUN, FORWARDED)]


def test_faults_are_consumed_in_order(proxy: CriProxy, channel: grpc.Channel) -> None:
    proxy.inject("RunPodSandbox", Fail(grpc.StatusCode.UNAVAILABLE), times=1)
    proxy.inject("RunPodSandbox", Fail(grpc.StatusCode.RESOURCE_EXHAUSTED), times=2)
    codes = [code_of(channel, RUN) for _ in range(3)]
    assert codes == [grpc.StatusCode.UNAVAILABLE, *[grpc.StatusCode.RESOURCE_EXHAUSTED] * 2]
    assert call(channel, RUN) == b"echo:req"


def test_forever_until_cleared(proxy: CriProxy, channel: grpc.Channel) -> None:
    proxy.inject("*", Fail(grpc.StatusCode.INTERNAL))
    assert [code_of(channel, m) for m in (RUN, PULL, RUN)] == [grpc.StatusCode.INTERNAL] * 3
    proxy.clear()
    assert call(channel, PULL) == b"echo:req"


def test_when_targets_one_pods_calls(proxy: CriProxy, channel: grpc.Channel) -> None:
    proxy.inject("RunPodSandbox", Fail(grpc.StatusCode.UNAVAILABLE), when=lambda request: b"pod-a" in request)
    assert call(channel, RUN, b"pod-b") == b"echo:pod-b"
    assert code_of(channel, RUN, b"pod-a") == grpc.StatusCode.UNAVAILABLE
    assert call(channel, START, b"pod-a") == b"echo:pod-a", "other methods are not affected"
    assert code_of(channel, RUN, b"pod-a") == grpc.StatusCode.UNAVAILABLE, "times=None applies forever"


def test_delay_then_forward(proxy: CriProxy, channel: grpc.Channel) -> None:
    proxy.inject("PullImage", Delay(seconds=0.3), times=1)
    started = time.monotonic()
    assert call(channel, PULL) == b"echo:req"
    assert 0.3 <= time.monotonic() - started < 2
    assert proxy.log == [Record(PULL, DELAYED)]


def test_a_delay_longer_than_the_deadline_is_not_forwarded(proxy: CriProxy, channel: grpc.Channel,
                                                           upstream: tuple[Upstream, Path]) -> None:
    proxy.inject("PullImage", Delay(seconds=0.2), times=1)
    assert code_of(channel, PULL, timeout=0.1) == grpc.StatusCode.DEADLINE_EXCEEDED
    time.sleep(0.25)  # past the end of the delay: the runtime still never hears of the call
    assert upstream[0].count(PULL) == 0
    assert proxy.held() == 0


def test_hang_lasts_until_the_callers_deadline(proxy: CriProxy, channel: grpc.Channel,
                                              upstream: tuple[Upstream, Path]) -> None:
    proxy.inject("StartContainer", Hang())
    started = time.monotonic()
    assert code_of(channel, START, timeout=0.3) == grpc.StatusCode.DEADLINE_EXCEEDED
    assert 0.3 <= time.monotonic() - started < 1.5
    assert upstream[0].count(START) == 0
    assert proxy.log == [Record(START, HUNG)]
    deadline = time.monotonic() + 2
    while proxy.held() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proxy.held() == 0, "the proxy must let go of a call whose caller gave up"


def test_a_hung_call_is_released_by_clear(proxy: CriProxy, channel: grpc.Channel,
                                          upstream: tuple[Upstream, Path]) -> None:
    proxy.inject("StartContainer", Hang())
    future = channel.unary_unary(START).future(b"req", timeout=10.0)
    assert proxy.wait_calls("StartContainer", 1, timeout=2)
    assert proxy.held("StartContainer") == 1
    started = time.monotonic()
    proxy.clear()
    with pytest.raises(grpc.RpcError) as info:
        future.result(timeout=2)
    assert time.monotonic() - started < 1
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert upstream[0].count(START) == 0
    assert call(channel, START) == b"echo:req", "clear() removed the rule too"


def test_release_lets_go_of_one_method(proxy: CriProxy, channel: grpc.Channel) -> None:
    proxy.inject("StartContainer", Hang(grpc.StatusCode.ABORTED, "let go"), times=1)
    proxy.inject("RunPodSandbox", Hang(), times=1)
    start = channel.unary_unary(START).future(b"req", timeout=10.0)
    run = channel.unary_unary(RUN).future(b"req", timeout=0.3)
    assert proxy.wait_calls("*", 2, timeout=2)
    assert proxy.release("StartContainer") == 1
    with pytest.raises(grpc.RpcError) as info:
        start.result(timeout=2)
    assert (info.value.code(), info.value.details()) == (grpc.StatusCode.ABORTED, "let go")
    with pytest.raises(grpc.RpcError) as info:
        run.result(timeout=2)
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


def test_fail_after_forward_loses_the_reply(proxy: CriProxy, channel: grpc.Channel,
                                            upstream: tuple[Upstream, Path]) -> None:
    proxy.inject("RunPodSandbox", Fail(grpc.StatusCode.DEADLINE_EXCEEDED, "reply lost", after_forward=True), times=1)
    with pytest.raises(grpc.RpcError) as info:
        call(channel, RUN, b"pod-a")
    assert (info.value.code(), info.value.details()) == (grpc.StatusCode.DEADLINE_EXCEEDED, "reply lost")
    assert upstream[0].count(RUN) == 1, "the runtime did the work"
    assert upstream[0].seen[0][1] == b"pod-a"
    assert proxy.log == [Record(RUN, LOST)]


def test_hang_after_forward_holds_the_reply_of_work_done(proxy: CriProxy, channel: grpc.Channel,
                                                        upstream: tuple[Upstream, Path]) -> None:
    """The kill matrix's "right after step X": the runtime has the call, the caller waits for its reply."""
    proxy.inject("RunPodSandbox", Hang(after_forward=True), times=1)
    future = channel.unary_unary(RUN).future(b"pod-a", timeout=10.0)
    deadline = time.monotonic() + 2
    while upstream[0].count(RUN) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert upstream[0].count(RUN) == 1, "the runtime did the work"
    time.sleep(0.2)
    assert not future.done(), "the reply is held"
    assert proxy.release("RunPodSandbox") == 1
    with pytest.raises(grpc.RpcError) as info:
        future.result(timeout=2)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert call(channel, RUN, b"pod-b") == b"echo:pod-b", "times=1: the next call goes through"


def test_fail_after_forward_on_a_stream(proxy: CriProxy, channel: grpc.Channel,
                                        upstream: tuple[Upstream, Path]) -> None:
    proxy.inject(EVENTS, Fail(grpc.StatusCode.UNAVAILABLE, after_forward=True), times=1)
    with pytest.raises(grpc.RpcError) as info:
        list(channel.unary_stream(EVENTS)(b"", timeout=5.0))
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert upstream[0].count(EVENTS) == 1


def test_bad_faults_are_refused(proxy: CriProxy) -> None:
    with pytest.raises(ValueError, match="error code"):
        Fail(grpc.StatusCode.OK)
    with pytest.raises(ValueError, match="seconds"):
        Delay(-1)
    with pytest.raises(ValueError, match="times"):
        proxy.inject("Version", Fail(), times=0)


# ---------------------------------------------------------------------------------------------- counting


def test_calls_and_log(proxy: CriProxy, channel: grpc.Channel) -> None:
    proxy.inject("PullImage", Fail(), times=1)
    call(channel, RUN)
    call(channel, RUN)
    code_of(channel, PULL)
    call(channel, PULL)
    assert proxy.calls("RunPodSandbox") == 2
    assert proxy.calls(RUN) == 2
    assert proxy.calls("ImageService/PullImage") == 2
    assert proxy.calls("StartContainer") == 0
    assert proxy.calls() == 4
    assert proxy.log == [Record(RUN, FORWARDED), Record(RUN, FORWARDED), Record(PULL, FAILED), Record(PULL, FORWARDED)]
    assert [method for method, outcome in proxy.log if outcome == FAILED] == [PULL]
    proxy.reset()
    assert (proxy.calls(), proxy.log) == (0, [])


# ------------------------------------------------------------------------------------------------ lifecycle


def _new_threads(before: set[threading.Thread]) -> set[str]:
    """Threads started since `before`, except the upstream's own workers (the fixture stops those)."""
    return {t.name for t in set(threading.enumerate()) - before if not t.name.startswith("upstream")}


def test_stop_is_clean_even_with_a_hung_call(tmp_path: Path, upstream: tuple[Upstream, Path]) -> None:
    before = set(threading.enumerate())
    proxy = CriProxy(f"unix://{tmp_path}/p.sock", upstream=upstream[1])
    proxy.start()
    with pytest.raises(RuntimeError, match="already started"):
        proxy.start()
    proxy.inject("StartContainer", Hang())
    with grpc.insecure_channel(proxy.endpoint) as channel:
        assert call(channel, RUN) == b"echo:req"
        future = channel.unary_unary(START).future(b"req", timeout=10.0)
        assert proxy.wait_calls("StartContainer", timeout=2)
        assert any(name.startswith("criproxy") for name in _new_threads(before))
        started = time.monotonic()
        proxy.stop()
        assert time.monotonic() - started < 1.5, "a hung call must not hold up stop()"
        with pytest.raises(grpc.RpcError):
            future.result(timeout=2)
    proxy.stop()
    assert not (tmp_path / "p.sock").exists()
    deadline = time.monotonic() + 2
    while _new_threads(before) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _new_threads(before), "stop() must leave no thread behind"


def test_the_cli_forwards_until_terminated(tmp_path: Path, upstream: tuple[Upstream, Path]) -> None:
    listen = tmp_path / "cli.sock"
    proc = subprocess.Popen(
        [sys.executable, "-m", "devstack.criproxy", "--listen", str(listen), "--upstream", str(upstream[1]), "-v"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()  # printed once it listens: no connect attempt (and backoff) before that
        assert banner.startswith("criproxy: unix://"), banner
        with grpc.insecure_channel(f"unix://{listen}") as channel:
            assert call(channel, RUN) == b"echo:req"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=5)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    assert f"{RUN} forwarded" in out
