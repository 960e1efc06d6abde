"""handlers/startup.py: a CPU manager that cannot start stops the operator for good (upstream's kubelet exits with
the same error at every start until the operator removes the checkpoint or fixes the configuration)."""

from __future__ import annotations

import logging
from typing import Any

import kopf
import pytest

from handlers import configuring, startup
from kopflet.cm.cpumanager.manager import CPUManagerError
from kopflet.config.settings import AgentConfig


class FailingNode:
    stopped = False

    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    async def start(self) -> None:
        raise CPUManagerError('start cpu manager error: could not restore state from checkpoint: configured policy '
                              '"static" differs from state checkpoint policy "none"')

    async def stop(self, *, close_runtime: bool = True) -> None:
        FailingNode.stopped = not close_runtime


async def test_a_cpu_manager_error_is_permanent(monkeypatch: pytest.MonkeyPatch) -> None:
    async def host(_: Any) -> None:
        return None

    monkeypatch.setattr(startup, "Node", FailingNode)
    monkeypatch.setattr(startup.HostFacts, "read", host)
    monkeypatch.setattr(configuring, "connection_info", lambda *_, **__: kopf.ConnectionInfo(server="https://x"))
    memo = kopf.Memo(config=AgentConfig(node_name="n"), runtime=object(), metrics=None)
    with pytest.raises(kopf.PermanentError, match='configured policy "static" differs'):
        await startup.start_agent(settings=kopf.OperatorSettings(), memo=memo, logger=logging.getLogger("t"))
    assert FailingNode.stopped and memo.get("node") is None


class NoPodResourcesSocket(FailingNode):
    async def start(self) -> None:
        from kopflet.apis.podresources.server import ListenerError
        raise ListenerError("failed to create listener for podResources endpoint "
                            "unix:///var/lib/kopflet/pod-resources/kubelet.sock: [Errno 20] Not a directory")


async def test_a_pod_resources_socket_that_cannot_be_made_is_permanent_and_named(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Upstream exits when it cannot listen on the pod-resources socket; the message names that socket, not the
    kubelet API's port."""
    async def host(_: Any) -> None:
        return None

    monkeypatch.setattr(startup, "Node", NoPodResourcesSocket)
    monkeypatch.setattr(startup.HostFacts, "read", host)
    monkeypatch.setattr(configuring, "connection_info", lambda *_, **__: kopf.ConnectionInfo(server="https://x"))
    memo = kopf.Memo(config=AgentConfig(node_name="n"), runtime=object(), metrics=None)
    FailingNode.stopped = False
    with pytest.raises(kopf.PermanentError) as err:
        await startup.start_agent(settings=kopf.OperatorSettings(), memo=memo, logger=logging.getLogger("t"))
    assert str(err.value) == ("failed to create listener for podResources endpoint "
                              "unix:///var/lib/kopflet/pod-resources/kubelet.sock: [Errno 20] Not a directory")
    assert FailingNode.stopped and memo.get("node") is None


class KernelNotAsNeeded(FailingNode):
    async def start(self) -> None:
        from kopflet.cm.container_manager import KernelTunablesError
        raise KernelTunablesError("invalid kernel flag: kernel/panic, expected value: 10, actual value: 0")


async def test_kernel_tunables_not_as_needed_are_permanent(monkeypatch: pytest.MonkeyPatch) -> None:
    """protectKernelDefaults: upstream's container manager fails to start ("Failed to start ContainerManager") and
    the kubelet exits, at every start until the host's tunables are fixed."""
    async def host(_: Any) -> None:
        return None

    monkeypatch.setattr(startup, "Node", KernelNotAsNeeded)
    monkeypatch.setattr(startup.HostFacts, "read", host)
    monkeypatch.setattr(configuring, "connection_info", lambda *_, **__: kopf.ConnectionInfo(server="https://x"))
    memo = kopf.Memo(config=AgentConfig(node_name="n", protect_kernel_defaults=True), runtime=object(),
                     metrics=None)
    FailingNode.stopped = False
    with pytest.raises(kopf.PermanentError) as err:
        await startup.start_agent(settings=kopf.OperatorSettings(), memo=memo, logger=logging.getLogger("t"))
    assert str(err.value) == ("Failed to start ContainerManager: invalid kernel flag: kernel/panic, expected value: "
                              "10, actual value: 0")
    assert FailingNode.stopped and memo.get("node") is None
