"""
A pod start as an OpenTelemetry trace: one root span for the start, one child span per step of its timeline
(`kopflet.pods.timeline`), and the sampling rule that decides whether a trace is kept.

Upstream's kubelet traces (KubeletTracing, component-base/tracing) are a ``syncPod`` span per sync with the CRI
calls under it as otelgrpc client spans (``runtime.v1.RuntimeService/RunPodSandbox``, ...), named by their gRPC
method. kopflet's trace is per start, as its timeline is: the root is ``podStart`` with the pod's attributes
upstream's ``syncPod`` carries (``k8s.pod.uid``, ``k8s.pod.name``, ``k8s.namespace.name``); the steps that are a
CRI call keep that call's otelgrpc name and client kind (``rpc.system``, ``rpc.service``, ``rpc.method``), the
others (``admission``, ``volumes``, ``untilReady``) are internal spans. A step tried again (an image pull backing
off) is one span over all its attempts, with ``kopflet.attempts``; a step that failed last carries an error status
with its message.

Sampling follows component-base's tracing.NewProvider: ParentBased(TraceIDRatioBased(rate / 1e6)), and
NeverSample when the rate is 0; a pod start has no parent, so the ratio decides alone, from the trace id as
OpenTelemetry's TraceIDRatioBased reads it. Pure: ids and times come in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Final

from kopflet.container.sync_result import ADMISSION, CREATE, IMAGE_PULL, SANDBOX, START, UNTIL_READY, VOLUMES

if TYPE_CHECKING:  # the pod workers hand their timelines down (kopflet.pods sits above tracing)
    from kopflet.pods.timeline import Timeline

INSTRUMENTATION_SCOPE: Final = "k8s.io/kubernetes/pkg/kubelet"
"""Upstream kubelet.go's instrumentationScope, the tracer its syncPod spans come from."""
SERVICE_NAME: Final = "kubelet"
"""The resource's service.name, as upstream's newTracerProvider sets it (server.ComponentKubelet)."""
DEFAULT_ENDPOINT: Final = "localhost:4317"
"""Where spans go when tracing.endpoint is not set: the OTLP gRPC exporter's default, as upstream's."""
MAX_SAMPLING_RATE: Final = 1_000_000
ROOT: Final = "podStart"

INTERNAL: Final = "internal"
CLIENT: Final = "client"

_RUNTIME, _IMAGES = "runtime.v1.RuntimeService", "runtime.v1.ImageService"
CRI_CALLS: Final[Mapping[str, tuple[str, str]]] = {
    SANDBOX: (_RUNTIME, "RunPodSandbox"), IMAGE_PULL: (_IMAGES, "PullImage"),
    CREATE: (_RUNTIME, "CreateContainer"), START: (_RUNTIME, "StartContainer"),
}
"""The steps that are a CRI call: its gRPC service and method, which otelgrpc names the span after."""
_OTHER_NAMES: Final[Mapping[str, str]] = {ADMISSION: "admission", VOLUMES: "volumes", UNTIL_READY: "untilReady"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Span:
    """One span, ready to export: ids are bytes (16 for the trace, 8 for a span), times ns since the epoch."""

    trace_id: bytes
    span_id: bytes
    parent_id: bytes = b""
    name: str
    kind: str = INTERNAL
    start_ns: int
    end_ns: int
    attributes: tuple[tuple[str, str | int], ...] = ()
    error: str = ""
    """The status message of a span that failed ("": its status is unset, as otel leaves a span that did not)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodRef:
    uid: str
    name: str
    namespace: str


def sampled(trace_id: bytes, rate_per_million: int) -> bool:
    """Whether a trace is kept at `rate_per_million`: never at 0, always at a million, else when the trace id's
    last 8 bytes (big-endian, shifted right once) fall under the rate's share of 2**63, as the Go SDK's
    TraceIDRatioBased compares."""
    if rate_per_million <= 0:
        return False
    if rate_per_million >= MAX_SAMPLING_RATE:
        return True
    bound = int(rate_per_million / MAX_SAMPLING_RATE * (1 << 63))
    return (int.from_bytes(trace_id[8:16], "big") >> 1) < bound


def _ns(timeline: Timeline, moment: float) -> int:
    at = timeline.at(moment)
    return int(at.timestamp()) * 1_000_000_000 + at.microsecond * 1000


def start_spans(timeline: Timeline, pod: PodRef, *, trace_id: bytes, span_ids: Iterator[bytes]) -> list[Span]:
    """A finished start as spans, the root first: the root from the first sighting to the end of the start, each
    step under it. `span_ids` gives the fresh span ids (the root's first)."""
    assert timeline.ended is not None, "only a finished start is traced"
    root_id = next(span_ids)
    spans = [Span(trace_id=trace_id, span_id=root_id, name=ROOT, start_ns=_ns(timeline, timeline.origin),
                  end_ns=_ns(timeline, timeline.ended),
                  attributes=(("k8s.pod.uid", pod.uid), ("k8s.pod.name", pod.name),
                              ("k8s.namespace.name", pod.namespace), ("kopflet.pod_start.outcome", timeline.outcome)))]
    for step in timeline.steps:
        attributes: list[tuple[str, str | int]] = []
        if step.kind == IMAGE_PULL:
            attributes.append(("container.image.name", step.detail))
        elif step.detail:
            attributes.append(("k8s.container.name", step.detail))
        if step.attempts > 1:
            attributes.append(("kopflet.attempts", step.attempts))
        call = CRI_CALLS.get(step.kind)
        if call is not None:
            service, method = call
            attributes += [("rpc.system", "grpc"), ("rpc.service", service), ("rpc.method", method)]
            name, kind = f"{service}/{method}", CLIENT
        else:
            name, kind = _OTHER_NAMES.get(step.kind, step.kind.replace(" ", "_")), INTERNAL
        spans.append(Span(trace_id=trace_id, span_id=next(span_ids), parent_id=root_id, name=name, kind=kind,
                          start_ns=_ns(timeline, step.start), end_ns=_ns(timeline, step.end),
                          attributes=tuple(attributes), error=step.error))
    return spans
