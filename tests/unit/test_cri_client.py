"""
CriClient behaviour that needs no container runtime: the choke point, deadlines, the runtime check.

Where a server is needed, a small real gRPC server on a temporary unix socket answers with what the
case needs (a wrong API version, a slow reply); the client code under test is unchanged. The real
runtime is exercised in tests/cri.
"""

from __future__ import annotations

import asyncio
import copy
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import ClassVar

import grpc
import grpc.aio
import pytest

from cri_client import CriClient, CriError
from cri_client.client import normalize_endpoint
from cri_client.proto import api_pb2 as pb
from cri_client.proto import api_pb2_grpc as pb_grpc

REPO = Path(__file__).resolve().parents[2]


def test_endpoint_normalisation() -> None:
    assert normalize_endpoint("/run/x.sock") == "unix:///run/x.sock"
    assert normalize_endpoint("unix:///run/x.sock") == "unix:///run/x.sock"
    assert CriClient("/run/x.sock").endpoint == "unix:///run/x.sock"


async def test_calls_before_open_are_a_programming_error() -> None:
    with pytest.raises(RuntimeError, match="not open"):
        await CriClient("/nonexistent.sock").version()


async def test_close_is_idempotent() -> None:
    client = CriClient("/nonexistent.sock")
    await client.open()
    await client.close()
    await client.close()


async def test_unreachable_runtime_fails_fast_and_names_the_endpoint(tmp_path: Path) -> None:
    endpoint = f"unix://{tmp_path}/missing.sock"
    async with CriClient(endpoint, timeout=30) as cri:
        started = time.monotonic()
        with pytest.raises(CriError) as info:
            await cri.check_runtime()
        assert time.monotonic() - started < 5, "must not wait for the deadline while nothing listens"
    assert info.value.unavailable
    assert info.value.endpoint == endpoint
    assert endpoint in str(info.value)
    assert "unreachable" in str(info.value)


def test_cri_error_properties_and_pickling() -> None:
    error = CriError(grpc.StatusCode.NOT_FOUND, "sandbox x not found", "RuntimeService/PodSandboxStatus", "unix:///s")
    assert error.not_found and not error.unavailable and not error.deadline_exceeded
    assert error.code == "NOT_FOUND"  # the grpc.StatusCode name, so no grpc is needed to inspect it
    assert str(error) == "RuntimeService/PodSandboxStatus at unix:///s: NOT_FOUND: sandbox x not found"
    for clone in (pickle.loads(pickle.dumps(error)), copy.copy(error)):
        assert (clone.code, clone.details, clone.method, clone.endpoint) == (
            error.code,
            error.details,
            error.method,
            error.endpoint,
        )
    assert CriError(grpc.StatusCode.UNAVAILABLE).unavailable
    assert CriError(grpc.StatusCode.DEADLINE_EXCEEDED).deadline_exceeded
    assert str(CriError(grpc.StatusCode.UNKNOWN)) == "UNKNOWN: (no details)"
    assert CriError("NOT_FOUND").not_found


def test_types_errors_and_convert_do_not_import_grpc() -> None:
    """The pure core may use cri_client.types and CriError: importing them must not drag in grpc."""
    script = (
        "import sys, cri_client, cri_client.types, cri_client.errors, cri_client.convert\n"
        "from cri_client import CriError\n"
        "print(sorted(m for m in sys.modules if m == 'grpc' or m.startswith('grpc.')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


class _Runtime(pb_grpc.RuntimeServiceServicer):
    """Answers Version with a configurable API version; Status sleeps to provoke deadlines."""

    api_version = "v1alpha2"

    async def Version(self, request: pb.VersionRequest, context: grpc.aio.ServicerContext) -> pb.VersionResponse:
        return pb.VersionResponse(runtime_name="old", runtime_version="0.9", runtime_api_version=self.api_version)

    async def Status(self, request: pb.StatusRequest, context: grpc.aio.ServicerContext) -> pb.StatusResponse:
        await asyncio.sleep(10)
        return pb.StatusResponse()

    async def ContainerStatus(
        self, request: pb.ContainerStatusRequest, context: grpc.aio.ServicerContext
    ) -> pb.ContainerStatusResponse:
        await context.abort(grpc.StatusCode.NOT_FOUND, f"container {request.container_id!r} not found")
        raise AssertionError("unreachable")

    reopened: ClassVar[list[str]] = []

    async def ReopenContainerLog(
        self, request: pb.ReopenContainerLogRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReopenContainerLogResponse:
        if request.container_id != "running":
            await context.abort(grpc.StatusCode.UNKNOWN, "container is not running")
        self.reopened.append(request.container_id)
        return pb.ReopenContainerLogResponse()

    sandbox_updates: ClassVar[list[pb.UpdatePodSandboxResourcesRequest]] = []

    async def UpdatePodSandboxResources(
        self, request: pb.UpdatePodSandboxResourcesRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpdatePodSandboxResourcesResponse:
        if request.pod_sandbox_id == "containerd-2.2":
            await context.abort(grpc.StatusCode.UNKNOWN, "not implemented yet")
        self.sandbox_updates.append(request)
        return pb.UpdatePodSandboxResourcesResponse()


@pytest.fixture
async def server_endpoint() -> AsyncIterator[str]:
    with tempfile.TemporaryDirectory(prefix="kopflet-cri-") as tmp:
        endpoint = f"unix://{tmp}/cri.sock"
        server = grpc.aio.server()
        pb_grpc.add_RuntimeServiceServicer_to_server(_Runtime(), server)
        server.add_insecure_port(endpoint)
        await server.start()
        try:
            yield endpoint
        finally:
            await server.stop(grace=None)


async def test_check_runtime_rejects_other_cri_versions(server_endpoint: str) -> None:
    async with CriClient(server_endpoint) as cri:
        assert (await cri.version()).runtime_api_version == "v1alpha2"
        with pytest.raises(CriError) as info:
            await cri.check_runtime()
    assert info.value.code == "FAILED_PRECONDITION"
    assert "'v1alpha2'" in str(info.value) and server_endpoint in str(info.value)


async def test_every_call_has_a_deadline(server_endpoint: str) -> None:
    async with CriClient(server_endpoint, timeout=0.5) as cri:
        started = time.monotonic()
        with pytest.raises(CriError) as info:
            await cri.status()
        assert time.monotonic() - started < 5
    assert info.value.deadline_exceeded
    assert info.value.method == "RuntimeService/Status"


async def test_runtime_status_codes_and_messages_reach_the_caller(server_endpoint: str) -> None:
    async with CriClient(server_endpoint) as cri:
        with pytest.raises(CriError) as info:
            await cri.containers.status("abc")
    assert info.value.not_found
    assert info.value.details == "container 'abc' not found"
    assert info.value.method == "RuntimeService/ContainerStatus"
    assert info.value.__cause__ is not None  # the grpc error stays available for debugging


async def test_unimplemented_service_is_a_cri_error(server_endpoint: str) -> None:
    """The test server has no ImageService: like an old or partial runtime."""
    async with CriClient(server_endpoint) as cri:
        with pytest.raises(CriError) as info:
            await cri.images.list()
    assert info.value.unimplemented


@pytest.mark.parametrize(("code", "name"), [
    (grpc.StatusCode.UNKNOWN, "Unknown"), (grpc.StatusCode.DEADLINE_EXCEEDED, "DeadlineExceeded"),
    (grpc.StatusCode.NOT_FOUND, "NotFound"), (grpc.StatusCode.CANCELLED, "Canceled"),
    (grpc.StatusCode.INVALID_ARGUMENT, "InvalidArgument"),
])
def test_go_text_is_grpc_gos_status_error(code: grpc.StatusCode, name: str) -> None:
    assert CriError(code, "boom").go_text == f"rpc error: code = {name} desc = boom"


async def test_reopen_log_asks_the_runtime_and_reports_its_refusal(server_endpoint: str) -> None:
    async with CriClient(server_endpoint) as cri:
        await cri.containers.reopen_log("running")
        with pytest.raises(CriError) as info:
            await cri.containers.reopen_log("exited")
    assert _Runtime.reopened[-1] == "running"
    assert info.value.method == "RuntimeService/ReopenContainerLog"
    assert info.value.details == "container is not running"


async def test_update_sandbox_resources_sends_resources_and_overhead(server_endpoint: str) -> None:
    """UpdatePodSandboxResources carries the sandbox, its pod resources and its overhead; the runtime's refusal
    reaches the caller as a CriError with its code and message."""
    from cri_client import types

    resources = types.LinuxContainerResources(cpu_period=100000, cpu_quota=50000, cpu_shares=512,
                                              memory_limit_in_bytes=128 * 2**20, unified={"memory.high": "max"})
    overhead = types.LinuxContainerResources(cpu_period=100000, cpu_quota=10000, cpu_shares=102)
    async with CriClient(server_endpoint) as cri:
        await cri.sandboxes.update_resources("sb1", resources, overhead)
        await cri.sandboxes.update_resources("sb2", resources)
        with pytest.raises(CriError) as info:
            await cri.sandboxes.update_resources("containerd-2.2", resources, overhead)
    first, second = _Runtime.sandbox_updates[-2:]
    assert first.pod_sandbox_id == "sb1"
    assert (first.resources.cpu_quota, first.resources.cpu_shares, first.resources.memory_limit_in_bytes) == (
        50000, 512, 128 * 2**20)
    assert dict(first.resources.unified) == {"memory.high": "max"}
    assert (first.overhead.cpu_quota, first.overhead.cpu_shares) == (10000, 102)
    assert second.pod_sandbox_id == "sb2" and not second.HasField("overhead") and second.HasField("resources")
    assert (info.value.code, info.value.details) == ("UNKNOWN", "not implemented yet")
    assert info.value.method == "RuntimeService/UpdatePodSandboxResources"
