"""
Pod start traces sent to an OpenTelemetry collector over OTLP/gRPC.

Upstream's kubelet builds an OpenTelemetry SDK provider (component-base tracing.NewProvider): an insecure OTLP gRPC
exporter to tracing.endpoint behind a batch span processor. This is the same wire protocol, spoken with grpc.aio
and the OTLP schema (opentelemetry-proto) so it runs on the agent's event loop: the spans of a finished start go
into a bounded queue (2048 spans, the batch processor's default; beyond it new spans are dropped and counted), and
one task sends them in batches of at most 512 every 5 s (its defaults), each export with the OTLP exporter's 10 s
timeout. A batch the collector refuses with a retryable code (UNAVAILABLE and the like, as the OTLP exporter
retries) is tried again at the next round, twice at most, then dropped with a warning: a collector that is away
costs the agent a bounded queue, never a stalled pod.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from kopflet.tracing import spans as tracing

if TYPE_CHECKING:
    from kopflet.pods.timeline import Timeline

log = logging.getLogger(__name__)

MAX_QUEUE: Final = 2048
MAX_BATCH: Final = 512
SCHEDULE_DELAY: Final = 5.0
EXPORT_TIMEOUT: Final = 10.0
MAX_TRIES: Final = 3
RETRYABLE: Final = frozenset({grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED,
                              grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.ABORTED,
                              grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DATA_LOSS})
"""The codes the OTLP exporters retry (the OTLP specification's retryable gRPC codes)."""

_KINDS: Final = {tracing.INTERNAL: trace_pb2.Span.SPAN_KIND_INTERNAL, tracing.CLIENT: trace_pb2.Span.SPAN_KIND_CLIENT}


def _value(value: str | int) -> common_pb2.AnyValue:
    return common_pb2.AnyValue(int_value=value) if isinstance(value, int) else common_pb2.AnyValue(string_value=value)


def _attributes(pairs: Sequence[tuple[str, str | int]]) -> list[common_pb2.KeyValue]:
    return [common_pb2.KeyValue(key=key, value=_value(value)) for key, value in pairs]


def span_pb(span: tracing.Span) -> trace_pb2.Span:
    status = (trace_pb2.Status(code=trace_pb2.Status.STATUS_CODE_ERROR, message=span.error) if span.error
              else trace_pb2.Status())
    return trace_pb2.Span(trace_id=span.trace_id, span_id=span.span_id, parent_span_id=span.parent_id,
                          name=span.name, kind=_KINDS[span.kind], start_time_unix_nano=span.start_ns,
                          end_time_unix_nano=span.end_ns, attributes=_attributes(span.attributes), status=status,
                          flags=0x100 | 0x01)  # sampled, and the parent (if any) is local


def export_request(batch: Sequence[tracing.Span], host_name: str) -> trace_service_pb2.ExportTraceServiceRequest:
    """One request for `batch`: the resource upstream's newTracerProvider describes (service.name kubelet,
    host.name), the kubelet's instrumentation scope."""
    resource = resource_pb2.Resource(attributes=_attributes(
        (("service.name", tracing.SERVICE_NAME), ("host.name", host_name))))
    scope = common_pb2.InstrumentationScope(name=tracing.INSTRUMENTATION_SCOPE)
    return trace_service_pb2.ExportTraceServiceRequest(resource_spans=[trace_pb2.ResourceSpans(
        resource=resource, scope_spans=[trace_pb2.ScopeSpans(scope=scope, spans=[span_pb(s) for s in batch])])])


class StartTracer:
    """The pod starts' traces: `record` (sync, from the pod workers) samples and queues; the task `start` starts
    sends, `close` sends what is left and stops it."""

    def __init__(self, *, endpoint: str, rate_per_million: int, host_name: str,
                 random_bytes: Callable[[int], bytes] = os.urandom) -> None:
        self.endpoint = endpoint or tracing.DEFAULT_ENDPOINT
        self.rate, self.host_name, self.random_bytes = rate_per_million, host_name, random_bytes
        self.queue: collections.deque[tuple[tracing.Span, int]] = collections.deque()
        self.dropped = 0
        self.exported = 0
        self._wake = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._channel: grpc.aio.Channel | None = None

    def record(self, timeline: Timeline, pod: tracing.PodRef) -> None:
        """A finished start: its spans queued when its trace is sampled."""
        if timeline.ended is None:
            return
        trace_id = self.random_bytes(16)
        if not tracing.sampled(trace_id, self.rate):
            return
        ids = iter(lambda: self.random_bytes(8), None)
        batch = tracing.start_spans(timeline, pod, trace_id=trace_id, span_ids=ids)
        room = MAX_QUEUE - len(self.queue)
        if room < len(batch):
            self.dropped += len(batch)
            log.warning("The trace of pod %s/%s's start was dropped: %d spans wait for the collector at %s",
                        pod.namespace, pod.name, len(self.queue), self.endpoint)
            return
        before = len(self.queue)
        self.queue.extend((span, 1) for span in batch)
        if before < MAX_BATCH <= len(self.queue):  # a full batch waits: sent now, not at the round (once)
            self._wake.set()

    def start(self) -> None:
        """Send what is queued every `SCHEDULE_DELAY` (sooner when a full batch waits), until `close`."""
        self._task = asyncio.create_task(self._run(), name="pod-start-traces")

    async def _run(self) -> None:
        while True:
            closing = self._closing
            if not closing:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), SCHEDULE_DELAY)
                self._wake.clear()
            while self.queue:
                if not await self.flush_batch() and not self._closing:
                    break  # the collector refused for now: at the next round
            if closing:
                return

    async def flush_batch(self) -> bool:
        """Send one batch; True when it went (or was given up), False when it waits for the next round."""
        taken = [self.queue.popleft() for _ in range(min(MAX_BATCH, len(self.queue)))]
        if not taken:
            return True
        try:
            if self._channel is None:
                self._channel = grpc.aio.insecure_channel(self.endpoint)
            stub = trace_service_pb2_grpc.TraceServiceStub(self._channel)
            await stub.Export(export_request([span for span, _ in taken], self.host_name), timeout=EXPORT_TIMEOUT)
        except asyncio.CancelledError:
            self.dropped += len(taken)  # cut short at stop: counted with what was left
            raise
        except grpc.aio.AioRpcError as exc:
            tries = max(t for _, t in taken)
            if exc.code() in RETRYABLE and tries < MAX_TRIES:
                self.queue.extendleft(reversed([(span, tries + 1) for span, _ in taken]))
                log.info("Sending %d spans to %s failed (%s), tried again in %gs", len(taken), self.endpoint,
                         exc.code().name, SCHEDULE_DELAY)
                return False
            self.dropped += len(taken)
            log.warning("Dropped %d spans the collector at %s refused: %s %s", len(taken), self.endpoint,
                        exc.code().name, exc.details())
            return True
        except Exception:  # a target gRPC cannot use, a span that does not serialize: that batch only
            self.dropped += len(taken)
            log.exception("Dropped %d spans that could not be sent to %s", len(taken), self.endpoint)
            return True
        self.exported += len(taken)
        return True

    async def close(self, grace: float = EXPORT_TIMEOUT) -> None:
        """Send what is left (within `grace`), then close the channel, as the provider's Shutdown flushes. Never
        raises but for its own cancellation: the agent's stop goes on."""
        self._closing = True
        self._wake.set()
        task = self._task
        if task is None or task.done():
            task = self._task = asyncio.create_task(self._run(), name="pod-start-traces")
        try:
            done, _ = await asyncio.wait({task}, timeout=grace)
            if not done:
                task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        finally:
            if task.done() and not task.cancelled() and task.exception() is not None:
                log.error("The pod start traces' sender failed", exc_info=task.exception())
            if not task.done():
                task.cancel()  # close itself was cancelled: the sender goes with it
            if self.queue:
                self.dropped += len(self.queue)
                log.warning("%d spans were not sent to %s before the agent stopped", len(self.queue), self.endpoint)
                self.queue.clear()
            if self._channel is not None:
                await self._channel.close()
                self._channel = None
