"""kopflet.tracing: the tracing.* settings, the sampling rule, a finished start as spans, the OTLP request, and the
exporter against a real OTLP/gRPC receiver on a unix socket (the collector's side of the protocol, in-process)."""

from __future__ import annotations

import asyncio
import datetime
import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2

from kopflet.config import settings
from kopflet.container.sync_result import ADMISSION, CREATE, IMAGE_PULL, SANDBOX, START, VOLUMES
from kopflet.pods import timeline
from kopflet.tracing import exporter as exporter_module
from kopflet.tracing import spans
from kopflet.tracing.exporter import StartTracer, export_request
from kopflet.tracing.spans import PodRef

POD = PodRef(uid="u-1", name="web", namespace="ns")
T0 = datetime.datetime(2026, 11, 28, 12, 0, 0, tzinfo=datetime.UTC)
EPOCH_NS = int(T0.timestamp()) * 1_000_000_000


def config(body: str) -> settings.AgentConfig:
    text = f"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{body}\n"
    return settings.load(["--config", "/c.yaml"], {}, "node-a", lambda path: text)


# ------------------------------------------------------------------------------------------------ settings


@pytest.mark.parametrize(("body", "endpoint", "rate"), [
    ("", "", 0),
    ("tracing: {}", "", 0),
    ("tracing: {samplingRatePerMillion: 1000000}", "", 1_000_000),
    ("tracing: {endpoint: 'collector:4317', samplingRatePerMillion: 10}", "collector:4317", 10),
    ("tracing: {endpoint: 'unix:///run/otel.sock', samplingRatePerMillion: 1}", "unix:///run/otel.sock", 1),
    ("tracing: {endpoint: 'dns:///otel:4317'}", "dns:///otel:4317", 0),
    ("tracing: {endpoint: '[::1]:4317'}", "[::1]:4317", 0),
    ("tracing: {endpoint: 'DNS://Otel:1'}", "DNS://Otel:1", 0),
    ("tracing: {endpoint: 'unix-abstract:///otel'}", "unix-abstract:///otel", 0),
    ("tracing: {endpoint: 'dns://x@otel:1/p?q#f'}", "dns://x@otel:1/p?q#f", 0),
])
def test_tracing_settings(body: str, endpoint: str, rate: int) -> None:
    cfg = config(body)
    assert (cfg.tracing_endpoint, cfg.tracing_sampling_rate_per_million) == (endpoint, rate)


@pytest.mark.parametrize(("body", "message"), [
    ("tracing: {samplingRatePerMillion: -1}",
     'field "tracing.samplingRatePerMillion": Invalid value: -1: sampling rate must be positive'),
    ("tracing: {samplingRatePerMillion: 1000001}", 'field "tracing.samplingRatePerMillion": Invalid value: 1000001: '
     'sampling rate per million must be less than or equal to one million'),
    ("tracing: {samplingRatePerMillion: 'x'}", 'field "tracing.samplingRatePerMillion": expected an integer'),
    ("tracing: {endpoint: 'http://otel:4318'}", 'field "tracing.endpoint": Invalid value: "http://otel:4318": '
     'unsupported scheme: http.  Options are none, dns, unix, or unix-abstract.  See '
     'https://github.com/grpc/grpc/blob/master/doc/naming.md'),
    # Go's url.Parse, as `go run` printed it for each (component-base's validateEndpoint adds dns:// first)
    ("tracing: {endpoint: '://x'}", 'Invalid value: "://x": parse "://x": missing protocol scheme'),
    ("tracing: {endpoint: '//otel:4317'}", 'Invalid value: "//otel:4317": unsupported scheme: .  Options'),
    ("tracing: {endpoint: '1x://y'}",
     'Invalid value: "1x://y": parse "1x://y": first path segment in URL cannot contain colon'),
    ("tracing: {endpoint: 'otel:notaport'}",
     'Invalid value: "dns://otel:notaport": parse "dns://otel:notaport": invalid port ":notaport" after host'),
    ("tracing: {endpoint: 'dns://a:b:c'}", 'parse "dns://a:b:c": invalid port ":c" after host'),
    ("tracing: {endpoint: 'unix:rel/path'}", 'parse "dns://unix:rel/path": invalid port ":rel" after host'),
    ("tracing: {endpoint: '[::1'}", "parse \"dns://[::1\": missing ']' in host"),
    ("tracing: {endpoint: 'a b:1'}", 'parse "dns://a b:1": invalid character " " in host name'),
    ("tracing: {sampling: 1}", 'unknown field "tracing.sampling"'),
    ("tracing: 5", 'field "tracing": expected a mapping'),
])
def test_tracing_settings_refused(body: str, message: str) -> None:
    with pytest.raises(settings.ConfigError) as err:
        config(body)
    assert message in str(err.value)


# ------------------------------------------------------------------------------------------------ sampling


def trace_id(low: int) -> bytes:
    return bytes(8) + low.to_bytes(8, "big")


@pytest.mark.parametrize(("low", "rate", "kept"), [
    (0, 0, False),  # NeverSample
    ((1 << 64) - 1, 1_000_000, True),  # AlwaysSample
    (0, 1, True),
    ((1 << 64) - 1, 999_999, False),
    # half: the last 8 bytes shifted right once under 2**62
    (((1 << 62) - 1) << 1, 500_000, True),
    ((1 << 62) << 1, 500_000, False),
])
def test_sampled(low: int, rate: int, kept: bool) -> None:
    assert spans.sampled(trace_id(low), rate) is kept


def test_sampling_keeps_about_the_rate() -> None:
    ids = (i.to_bytes(16, "big") for i in range(0, 1 << 64, (1 << 64) // 1000))  # spread over the low bytes
    kept = sum(spans.sampled(i, 250_000) for i in ids)
    assert 240 <= kept <= 260


# ------------------------------------------------------------------------------------------------ spans


def finished() -> timeline.Timeline:
    start = timeline.begin(T0, 100.0)
    start = timeline.add_step(start, ADMISSION, "", 100.0, 100.010)
    start = timeline.add_step(start, VOLUMES, "", 100.010, 100.020)
    start = timeline.add_step(start, SANDBOX, "", 100.020, 100.300)
    start = timeline.add_step(start, IMAGE_PULL, "busybox:1.36", 100.300, 100.400, error="ErrImagePull: boom")
    start = timeline.add_step(start, IMAGE_PULL, "busybox:1.36", 101.400, 101.900)
    start = timeline.add_step(start, CREATE, "app", 101.900, 102.000)
    start = timeline.add_step(start, START, "app", 102.000, 102.100)
    return timeline.finish(start, 102.500)


def ns(seconds: float) -> int:
    return EPOCH_NS + round(seconds * 1e6) * 1000


def test_a_finished_start_is_a_root_span_with_a_span_per_step() -> None:
    ids = (bytes([n]) * 8 for n in itertools.count(1))
    out = spans.start_spans(finished(), POD, trace_id=b"t" * 16, span_ids=ids)
    root, *steps = out
    assert (root.name, root.parent_id, root.kind, root.start_ns, root.end_ns) == (
        "podStart", b"", spans.INTERNAL, ns(0), ns(2.5))
    assert dict(root.attributes) == {"k8s.pod.uid": "u-1", "k8s.pod.name": "web", "k8s.namespace.name": "ns",
                                     "kopflet.pod_start.outcome": "Ready"}
    assert {s.trace_id for s in out} == {b"t" * 16}
    assert {s.parent_id for s in steps} == {root.span_id}
    assert len({s.span_id for s in out}) == len(out)
    assert [(s.name, s.kind, s.start_ns, s.end_ns) for s in steps] == [
        ("admission", spans.INTERNAL, ns(0), ns(0.010)),
        ("volumes", spans.INTERNAL, ns(0.010), ns(0.020)),
        ("runtime.v1.RuntimeService/RunPodSandbox", spans.CLIENT, ns(0.020), ns(0.300)),
        ("runtime.v1.ImageService/PullImage", spans.CLIENT, ns(0.300), ns(1.900)),
        ("runtime.v1.RuntimeService/CreateContainer", spans.CLIENT, ns(1.900), ns(2.000)),
        ("runtime.v1.RuntimeService/StartContainer", spans.CLIENT, ns(2.000), ns(2.100)),
        ("untilReady", spans.INTERNAL, ns(2.100), ns(2.500)),
    ]
    pull = dict(steps[3].attributes)
    assert pull == {"container.image.name": "busybox:1.36", "kopflet.attempts": 2, "rpc.system": "grpc",
                    "rpc.service": "runtime.v1.ImageService", "rpc.method": "PullImage"}
    assert steps[3].error == ""  # the last attempt worked
    assert dict(steps[4].attributes)["k8s.container.name"] == "app"


def test_a_step_that_failed_last_carries_its_error_and_the_outcome_the_phase() -> None:
    start = timeline.add_step(timeline.begin(T0, 0.0), IMAGE_PULL, "nope:1", 0.0, 0.5, error="ErrImagePull: gone")
    ended = timeline.finish(start, 1.0, "Failed")
    root, pull = spans.start_spans(ended, POD, trace_id=b"t" * 16, span_ids=(bytes([n]) * 8 for n in range(1, 9)))
    assert dict(root.attributes)["kopflet.pod_start.outcome"] == "Failed"
    assert pull.error == "ErrImagePull: gone"


def test_the_request_carries_the_kubelets_resource_and_scope() -> None:
    out = spans.start_spans(finished(), POD, trace_id=b"t" * 16, span_ids=(bytes([n]) * 8 for n in range(1, 20)))
    request = export_request(out, "node-a")
    (resource_spans,) = request.resource_spans
    resource = {kv.key: kv.value.string_value for kv in resource_spans.resource.attributes}
    assert resource == {"service.name": "kubelet", "host.name": "node-a"}
    (scope_spans,) = resource_spans.scope_spans
    assert scope_spans.scope.name == "k8s.io/kubernetes/pkg/kubelet"
    pb = list(scope_spans.spans)
    assert [s.name for s in pb] == [s.name for s in out]
    assert pb[0].kind == trace_pb2.Span.SPAN_KIND_INTERNAL and pb[3].kind == trace_pb2.Span.SPAN_KIND_CLIENT
    assert pb[0].start_time_unix_nano == ns(0) and pb[0].end_time_unix_nano == ns(2.5)
    assert pb[1].parent_span_id == pb[0].span_id and pb[0].parent_span_id == b""
    attempts = {kv.key: kv.value for kv in pb[4].attributes}["kopflet.attempts"]
    assert attempts.int_value == 2
    assert pb[4].status.code == trace_pb2.Status.STATUS_CODE_UNSET
    failed = export_request([spans.Span(trace_id=b"t" * 16, span_id=b"s" * 8, name="x", start_ns=1, end_ns=2,
                                        error="boom")], "n")
    status = failed.resource_spans[0].scope_spans[0].spans[0].status
    assert (status.code, status.message) == (trace_pb2.Status.STATUS_CODE_ERROR, "boom")


# ------------------------------------------------------------------------------------------------ exporter


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """The receiving end of OTLP/gRPC: keeps what it is sent, or answers `fail` codes first."""

    def __init__(self) -> None:
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.fail: list[grpc.StatusCode] = []
        self.got = asyncio.Event()

    async def Export(self, request: trace_service_pb2.ExportTraceServiceRequest,
                     context: grpc.aio.ServicerContext) -> trace_service_pb2.ExportTraceServiceResponse:
        if self.fail:
            await context.abort(self.fail.pop(0), "not now")
        self.requests.append(request)
        self.got.set()
        return trace_service_pb2.ExportTraceServiceResponse()

    def names(self) -> list[str]:
        return [s.name for r in self.requests for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans]


@pytest.fixture
async def collector(tmp_path: Path) -> AsyncIterator[tuple[Collector, str]]:
    server = grpc.aio.server()
    servicer = Collector()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(servicer, server)
    address = f"unix://{tmp_path / 'otel.sock'}"
    server.add_insecure_port(address)
    await server.start()
    try:
        yield servicer, address
    finally:
        await server.stop(None)


async def test_a_sampled_start_reaches_the_collector(collector: tuple[Collector, str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    servicer, address = collector
    monkeypatch.setattr(exporter_module, "SCHEDULE_DELAY", 0.05)
    tracer = StartTracer(endpoint=address, rate_per_million=1_000_000, host_name="node-a")
    tracer.start()
    try:
        tracer.record(finished(), POD)
        await asyncio.wait_for(servicer.got.wait(), 10)  # sent by the round, not by close
    finally:
        await tracer.close()
    assert servicer.names()[0] == "podStart" and len(servicer.names()) == 8
    assert (tracer.exported, tracer.dropped, len(tracer.queue)) == (8, 0, 0)


async def test_close_sends_what_is_queued(collector: tuple[Collector, str]) -> None:
    servicer, address = collector
    tracer = StartTracer(endpoint=address, rate_per_million=1_000_000, host_name="node-a")
    tracer.start()  # its round is 5 s away
    tracer.record(finished(), POD)
    await tracer.close()
    assert (tracer.exported, len(servicer.names())) == (8, 8)


async def test_an_unsampled_or_unfinished_start_is_not_sent(collector: tuple[Collector, str]) -> None:
    _, address = collector
    never = StartTracer(endpoint=address, rate_per_million=1, host_name="n", random_bytes=lambda n: b"\xff" * n)
    never.record(finished(), POD)
    always = StartTracer(endpoint=address, rate_per_million=1_000_000, host_name="n")
    always.record(timeline.begin(T0, 0.0), POD)  # still starting
    assert not never.queue and not always.queue


async def test_a_collector_that_refuses_for_now_gets_the_batch_again(collector: tuple[Collector, str]) -> None:
    servicer, address = collector
    servicer.fail = [grpc.StatusCode.UNAVAILABLE]
    tracer = StartTracer(endpoint=address, rate_per_million=1_000_000, host_name="n")
    tracer.record(finished(), POD)
    assert await tracer.flush_batch() is False  # kept for the next round
    assert len(tracer.queue) == 8
    assert await tracer.flush_batch() is True
    await tracer.close()
    assert (tracer.exported, tracer.dropped, len(servicer.names())) == (8, 0, 8)


@pytest.mark.parametrize(("codes", "exported", "dropped"), [
    ([grpc.StatusCode.INVALID_ARGUMENT], 0, 8),  # not retryable: dropped at once
    ([grpc.StatusCode.UNAVAILABLE] * 3, 0, 8),  # MAX_TRIES, then dropped
    ([grpc.StatusCode.UNAVAILABLE] * 2, 8, 0),
])
async def test_refusals_are_bounded(collector: tuple[Collector, str], codes: list[grpc.StatusCode], exported: int,
                                    dropped: int) -> None:
    servicer, address = collector
    servicer.fail = list(codes)
    tracer = StartTracer(endpoint=address, rate_per_million=1_000_000, host_name="n")
    tracer.record(finished(), POD)
    for _ in range(4):
        if tracer.queue:
            await tracer.flush_batch()
    await tracer.close()
    assert (tracer.exported, tracer.dropped, len(tracer.queue)) == (exported, dropped, 0)


async def test_the_queue_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exporter_module, "MAX_QUEUE", 10)
    tracer = StartTracer(endpoint="unix:///nonexistent", rate_per_million=1_000_000, host_name="n")
    tracer.record(finished(), POD)
    tracer.record(finished(), POD)  # 8 + 8 > 10: the second start's trace is dropped whole
    assert (len(tracer.queue), tracer.dropped) == (8, 8)


@pytest.mark.parametrize("endpoint", ["unix:///nonexistent/otel.sock", "dns:///10.255.255.1:4317"])
async def test_close_gives_up_on_a_collector_that_is_not_there(endpoint: str) -> None:
    """Refused at once (no socket) or no answer at all (an address nothing routes): close ends within its grace,
    the spans counted as dropped, the channel closed."""
    tracer = StartTracer(endpoint=endpoint, rate_per_million=1_000_000, host_name="n")
    tracer.start()
    tracer.record(finished(), POD)
    began = asyncio.get_running_loop().time()
    await tracer.close(grace=0.5)
    assert asyncio.get_running_loop().time() - began < 2
    assert (tracer.exported, tracer.dropped, len(tracer.queue)) == (0, 8, 0)
    assert tracer._channel is None


async def test_a_batch_that_cannot_be_sent_is_dropped_and_the_sender_goes_on(
        collector: tuple[Collector, str], monkeypatch: pytest.MonkeyPatch) -> None:
    servicer, address = collector
    tracer = StartTracer(endpoint=address, rate_per_million=1_000_000, host_name="n")
    real = exporter_module.export_request
    calls: list[int] = []

    def breaks_once(batch: Any, host_name: str) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("cannot serialize")
        return real(batch, host_name)

    monkeypatch.setattr(exporter_module, "export_request", breaks_once)
    tracer.start()
    tracer.record(finished(), POD)
    assert await tracer.flush_batch() is True  # given up, not raised
    tracer.record(finished(), POD)
    await tracer.close()
    assert (tracer.exported, tracer.dropped, len(servicer.names())) == (8, 8, 8)


async def test_a_full_batch_wakes_the_sender_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exporter_module, "MAX_BATCH", 10)
    tracer = StartTracer(endpoint="unix:///nonexistent", rate_per_million=1_000_000, host_name="n")
    tracer.record(finished(), POD)
    assert not tracer._wake.is_set()
    tracer.record(finished(), POD)  # 16 >= 10
    assert tracer._wake.is_set()
    tracer._wake.clear()
    tracer.record(finished(), POD)  # still over: no new wake for each start
    assert not tracer._wake.is_set()
