"""
Runtime-level calls against the real containerd: Version, the CRI v1 check, Status.
"""

from __future__ import annotations

from cri_client import CriClient


async def test_version_is_containerd_speaking_cri_v1(cri: CriClient) -> None:
    version = await cri.version()
    assert version.runtime_name == "containerd"
    assert version.runtime_api_version == "v1"
    assert version.runtime_version


async def test_check_runtime_returns_the_version(cri: CriClient) -> None:
    assert await cri.check_runtime() == await cri.version()


async def test_status_reports_runtime_and_network_ready(cri: CriClient) -> None:
    status = await cri.status()
    assert status.runtime_ready, status
    assert status.network_ready, status  # the stack installs a CNI config


async def test_verbose_status_carries_info(cri: CriClient) -> None:
    status = await cri.status(verbose=True)
    assert status.info  # containerd dumps its CRI config here
