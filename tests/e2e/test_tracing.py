"""Pod start traces on the real stack (docs/operations.md, "Pod start traces"): an agent whose config file sets
`tracing` sends each start over OTLP/gRPC; an OTLP receiver in the test (the collector's side of the protocol, on a
unix socket) gets a podStart span for the pod with its steps under it, upstream's resource and scope."""

from __future__ import annotations

import calendar
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.test_image_gc import start_agent
from tests.e2e.test_pod_lifecycle import container, is_ready, pod_manifest, wait_pod


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.lock = threading.Lock()

    def Export(self, request: trace_service_pb2.ExportTraceServiceRequest,
               context: grpc.ServicerContext) -> trace_service_pb2.ExportTraceServiceResponse:
        with self.lock:
            self.requests.append(request)
        return trace_service_pb2.ExportTraceServiceResponse()

    def spans(self) -> list[tuple[dict[str, str], str, Any]]:
        """Every span received: its resource's attributes, its scope's name, the span."""
        with self.lock:
            return [({kv.key: kv.value.string_value for kv in rs.resource.attributes}, ss.scope.name, span)
                    for request in self.requests for rs in request.resource_spans for ss in rs.scope_spans
                    for span in ss.spans]


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[tuple[Receiver, str]]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = Receiver()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(servicer, server)
    address = f"unix://{tmp_path / 'otlp.sock'}"
    server.add_insecure_port(address)
    server.start()
    try:
        yield servicer, address
    finally:
        server.stop(None)


def attributes(span: Any) -> dict[str, Any]:
    return {kv.key: kv.value.string_value or kv.value.int_value for kv in span.attributes}


def test_a_pod_start_is_a_trace_at_the_collector(receiver: tuple[Receiver, str], layout: Layout, admin: Kubectl,
                                                 namespace: str, tmp_path: Path) -> None:
    servicer, address = receiver
    config = tmp_path / "config.yaml"
    config.write_text(layout.kubelet_config.read_text() +
                      f"tracing:\n  endpoint: {address}\n  samplingRatePerMillion: 1000000\n")
    agent = start_agent(layout, tmp_path / "agent.log", f"--config={config}")
    try:
        admin.apply(pod_manifest("traced", namespace, layout.node_name, [container("app", "sleep 3600")]))
        pod = wait_pod(admin, namespace, "traced", is_ready, what="Ready")
        uid = pod["metadata"]["uid"]
        deadline = time.monotonic() + 30  # one batch round (5 s) after the start ended
        while not [s for _, _, s in servicer.spans() if s.name == "podStart" and attributes(s)["k8s.pod.uid"] == uid]:
            assert time.monotonic() < deadline, f"no podStart span for {uid}: {servicer.spans()}"
            time.sleep(0.5)
    finally:
        assert agent.stop() == 0
    assert "Pod start traces: 1000000 in a million sent to " in agent.output()
    received = servicer.spans()
    (root,) = [s for _, _, s in received if s.name == "podStart" and attributes(s)["k8s.pod.uid"] == uid]
    resource, scope, _ = next(r for r in received if r[2] is root)
    assert resource == {"service.name": "kubelet", "host.name": layout.node_name}
    assert scope == "k8s.io/kubernetes/pkg/kubelet"
    assert attributes(root) == {"k8s.pod.uid": uid, "k8s.pod.name": "traced", "k8s.namespace.name": namespace,
                                "kopflet.pod_start.outcome": "Ready"}
    steps = sorted((s for _, _, s in received if s.trace_id == root.trace_id and s is not root),
                   key=lambda s: s.start_time_unix_nano)
    assert all(s.parent_span_id == root.span_id for s in steps)
    names = [s.name for s in steps]
    assert names[0] == "admission" and names[-1] == "untilReady", names
    for call in ("runtime.v1.RuntimeService/RunPodSandbox", "runtime.v1.RuntimeService/CreateContainer",
                 "runtime.v1.RuntimeService/StartContainer"):
        assert call in names, names
    start = next(s for s in steps if s.name == "runtime.v1.RuntimeService/StartContainer")
    assert attributes(start)["k8s.container.name"] == "app"
    assert attributes(start)["rpc.method"] == "StartContainer"
    for span in (root, *steps):
        assert 0 < span.start_time_unix_nano <= span.end_time_unix_nano
        assert root.start_time_unix_nano <= span.start_time_unix_nano
        assert span.end_time_unix_nano <= root.end_time_unix_nano
    # the pod's creation is within the trace's second: the spans are on the wall clock
    created = calendar.timegm(time.strptime(pod["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ"))
    assert abs(root.start_time_unix_nano / 1e9 - created) < 5
