"""
Fixtures for testing cri_client against a REAL container runtime (containerd with the CRI plugin).

The runtime is the one at $CONTAINER_RUNTIME_ENDPOINT (the dev stack exports it). Without that
variable every test here is skipped; with it set but the runtime unusable, they fail loudly: a
misconfigured stack must not look like a green run.

`bench` creates sandboxes and containers with unique names and removes all of them after the test,
whatever the outcome, so reruns never collide and a failing test leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from cri_client import CriClient, CriError, types

BUSYBOX = "docker.io/library/busybox:1.36"
MISSING_IMAGE = "docker.io/library/does-not-exist:0"
TEST_LABEL = "kopflet.dev/cri-test"


@pytest.fixture(scope="session")
def endpoint() -> str:
    value = os.environ.get("CONTAINER_RUNTIME_ENDPOINT", "")
    if not value:
        pytest.skip("CONTAINER_RUNTIME_ENDPOINT is not set: these tests need a real containerd (the dev stack)")
    return value


@pytest.fixture(scope="session")
async def cri(endpoint: str) -> AsyncIterator[CriClient]:
    async with CriClient(endpoint, timeout=60, pull_timeout=300) as client:
        try:
            await client.check_runtime(deadline=15)
        except CriError as e:
            pytest.fail(
                f"CONTAINER_RUNTIME_ENDPOINT={endpoint} is set, but the runtime is not usable: {e}", pytrace=False
            )
        yield client


@pytest.fixture(scope="session")
async def busybox(cri: CriClient) -> str:
    """The image ref of busybox, pulled once per session from the local registry mirror."""
    return await cri.images.pull(BUSYBOX)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class Bench:
    """Builds test sandboxes and containers and guarantees their removal."""

    def __init__(self, cri: CriClient, image: str, tmp: Path) -> None:
        self.cri = cri
        self.image = image
        self.tmp = tmp
        self.sandbox_ids: list[str] = []
        self.container_ids: list[str] = []

    def sandbox_config(self, name: str | None = None) -> types.PodSandboxConfig:
        """A pod sandbox like kubelet's for a plain pod: own PID namespace per container, pod network."""
        name = name or unique("cri-test")
        log_directory = self.tmp / f"pods-{name}"
        log_directory.mkdir(parents=True)  # kubelet creates the pod log directory, not the runtime
        return types.PodSandboxConfig(
            metadata=types.PodSandboxMetadata(name=name, namespace="cri-test", uid=str(uuid.uuid4())),
            hostname=name,
            log_directory=str(log_directory),
            labels={TEST_LABEL: "true", "io.kubernetes.pod.name": name},
            annotations={"kopflet.dev/purpose": "cri_client tests"},
            linux=types.LinuxSandboxConfig(
                security_context=types.SandboxSecurityContext(
                    namespace_options=types.NamespaceOptions(pid=types.NamespaceMode.CONTAINER),
                ),
            ),
        )

    def container_config(
        self, sandbox: types.PodSandboxConfig, name: str, command: Sequence[str]
    ) -> types.ContainerConfig:
        """A container running `command` in busybox, logging to <log_directory>/<name>/0.log."""
        (Path(sandbox.log_directory) / name).mkdir(exist_ok=True)  # kubelet's job too
        return types.ContainerConfig(
            metadata=types.ContainerMetadata(name=name),
            image=self.image,
            user_specified_image=BUSYBOX,
            command=tuple(command),
            log_path=f"{name}/0.log",
            labels={TEST_LABEL: "true"},
            linux=types.LinuxContainerConfig(
                security_context=types.ContainerSecurityContext(
                    namespace_options=types.NamespaceOptions(pid=types.NamespaceMode.CONTAINER),
                ),
            ),
        )

    async def run_sandbox(self, config: types.PodSandboxConfig | None = None) -> tuple[str, types.PodSandboxConfig]:
        config = config or self.sandbox_config()
        sandbox_id = await self.cri.sandboxes.run(config)
        self.sandbox_ids.append(sandbox_id)
        return sandbox_id, config

    async def create_container(
        self, sandbox_id: str, sandbox: types.PodSandboxConfig, config: types.ContainerConfig
    ) -> str:
        container_id = await self.cri.containers.create(sandbox_id, config, sandbox)
        self.container_ids.append(container_id)
        return container_id

    async def start_container(
        self, command: Sequence[str], name: str = "main"
    ) -> tuple[str, str, types.PodSandboxConfig, types.ContainerConfig]:
        """A fresh sandbox with one started container: (sandbox_id, container_id, configs...)."""
        sandbox_id, sandbox = await self.run_sandbox()
        config = self.container_config(sandbox, name, command)
        container_id = await self.create_container(sandbox_id, sandbox, config)
        await self.cri.containers.start(container_id)
        return sandbox_id, container_id, sandbox, config

    async def wait_for_state(
        self, container_id: str, state: types.ContainerState, within: float = 30
    ) -> types.ContainerStatus:
        deadline = time.monotonic() + within
        while True:
            status = await self.cri.containers.status(container_id)
            if status.state == state:
                return status
            if time.monotonic() > deadline:
                raise AssertionError(f"container {container_id} is {status.state.name}, not {state.name}: {status}")
            await asyncio.sleep(0.2)

    async def cleanup(self) -> None:
        """Remove containers, then stop and remove sandboxes; report (not hide) what could not be removed."""
        problems: list[str] = []
        for container_id in reversed(self.container_ids):
            try:
                await self.cri.containers.remove(container_id)
            except CriError as e:
                if not e.not_found:
                    problems.append(f"container {container_id}: {e}")
        for sandbox_id in reversed(self.sandbox_ids):
            for step in (self.cri.sandboxes.stop, self.cri.sandboxes.remove):
                try:
                    await step(sandbox_id)
                except CriError as e:
                    if not e.not_found:
                        problems.append(f"sandbox {sandbox_id}: {e}")
        if problems:
            raise AssertionError("cleanup failed: " + "; ".join(problems))


@pytest.fixture
async def bench(cri: CriClient, busybox: str, tmp_path: Path) -> AsyncIterator[Bench]:
    workbench = Bench(cri, busybox, tmp_path)
    try:
        yield workbench
    finally:
        await workbench.cleanup()
