"""
Pod sandbox lifecycle against the real containerd: run (with a CNI IP), status, list, stop, remove.
"""

from __future__ import annotations

import ipaddress
import time

import pytest

from cri_client import CriClient, CriError, types


async def test_sandbox_lifecycle(cri: CriClient, bench) -> None:
    before = time.time_ns()
    sandbox_id, config = await bench.run_sandbox()

    status = await cri.sandboxes.status(sandbox_id)
    assert status.id == sandbox_id
    assert status.state is types.SandboxState.READY
    assert status.metadata == config.metadata
    assert status.created_at >= before - 1_000_000_000  # ns, allowing for clock granularity
    ip = ipaddress.ip_address(status.ip)  # the CNI bridge gave it an address
    assert not ip.is_loopback and not ip.is_unspecified
    assert status.ips[0] == status.ip
    assert status.labels == config.labels
    assert status.annotations == config.annotations
    assert status.namespace_options is not None
    assert status.namespace_options.pid is types.NamespaceMode.CONTAINER
    assert status.namespace_options.network is types.NamespaceMode.POD

    await cri.sandboxes.stop(sandbox_id)
    assert (await cri.sandboxes.status(sandbox_id)).state is types.SandboxState.NOTREADY
    await cri.sandboxes.stop(sandbox_id)  # idempotent, as kubelet relies on

    await cri.sandboxes.remove(sandbox_id)
    with pytest.raises(CriError) as info:
        await cri.sandboxes.status(sandbox_id)
    assert info.value.not_found, info.value
    await cri.sandboxes.remove(sandbox_id)  # idempotent too


async def test_list_and_filters(cri: CriClient, bench) -> None:
    sandbox_id, config = await bench.run_sandbox()
    other_id, _ = await bench.run_sandbox()

    everything = {s.id: s for s in await cri.sandboxes.list()}
    assert {sandbox_id, other_id} <= everything.keys()
    item = everything[sandbox_id]
    assert item.metadata == config.metadata
    assert item.state is types.SandboxState.READY
    assert item.created_at > 0

    by_id = await cri.sandboxes.list(types.PodSandboxFilter(id=sandbox_id))
    assert [s.id for s in by_id] == [sandbox_id]

    by_label = await cri.sandboxes.list(
        types.PodSandboxFilter(label_selector={"io.kubernetes.pod.name": config.metadata.name})
    )
    assert [s.id for s in by_label] == [sandbox_id]

    await cri.sandboxes.stop(other_id)
    ready = {s.id for s in await cri.sandboxes.list(types.PodSandboxFilter(state=types.SandboxState.READY))}
    not_ready = {s.id for s in await cri.sandboxes.list(types.PodSandboxFilter(state=types.SandboxState.NOTREADY))}
    assert sandbox_id in ready and sandbox_id not in not_ready
    assert other_id in not_ready and other_id not in ready


async def test_status_of_an_unknown_sandbox_is_not_found(cri: CriClient) -> None:
    with pytest.raises(CriError) as info:
        await cri.sandboxes.status("0" * 64)
    assert info.value.not_found, info.value
    assert info.value.method == "RuntimeService/PodSandboxStatus"


async def test_port_forward_returns_a_streaming_url(cri: CriClient, bench) -> None:
    sandbox_id, _ = await bench.run_sandbox()
    url = await cri.sandboxes.port_forward(sandbox_id, [80])
    assert url.startswith("http://")
