"""Container GC's node-wide cap (upstream's deprecated --maximum-dead-containers): with more dead containers than
the cap, each pod's container keeps its newest dead instance and the oldest go first, node-wide, until the cap
holds (upstream containerGC.evictContainers)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cri_client import CriClient
from cri_client import types as cri
from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent, agent_with
from tests.e2e.test_pod_lifecycle import container, pod_manifest, statuses, wait_pod

CAP = 2
PODS = 3


@pytest.fixture
def capped_agent(layout: Layout, tmp_path: Path) -> Iterator[Agent]:
    args = (f"--maximum-dead-containers={CAP} --maximum-dead-containers-per-container=5 "
            "--minimum-container-ttl-duration=0s")
    yield from agent_with(layout, tmp_path, args)


def dead_containers(layout: Layout, uids: set[str]) -> list[cri.Container]:
    async def listing() -> list[cri.Container]:
        async with CriClient(layout.runtime_endpoint) as client:
            return [c for c in await client.containers.list()
                    if c.state == cri.ContainerState.EXITED and c.labels.get("io.kubernetes.pod.uid") in uids]
    return asyncio.run(listing())


def container_logs(layout: Layout, uids: set[str]) -> dict[str, set[str]]:
    """The log paths of each pod's containers, as the runtime has them now."""
    async def listing() -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        async with CriClient(layout.runtime_endpoint) as client:
            for c in await client.containers.list():
                uid = c.labels.get("io.kubernetes.pod.uid", "")
                if uid in uids:
                    found.setdefault(uid, set()).add((await client.containers.status(c.id)).log_path)
        return found
    return asyncio.run(listing())


def test_the_node_wide_cap_on_dead_containers_holds(capped_agent: Agent, admin: Kubectl, layout: Layout,
                                                     namespace: str) -> None:
    for i in range(PODS):
        admin.apply(pod_manifest(f"crash-{i}", namespace, layout.node_name,
                                 [container("main", "sleep 2; exit 1")]))
    # Each has crashed at least three times: up to 5 dead instances each are allowed per container, 2 node-wide.
    uids = set()
    for i in range(PODS):
        pod = wait_pod(admin, namespace, f"crash-{i}",
                       lambda p: statuses(p).get("main", {}).get("restartCount", 0) >= 3, timeout=240,
                       what="restarted three times")
        uids.add(pod["metadata"]["uid"])
    # Container GC runs every minute (upstream ContainerGCPeriod); the pods keep crashing meanwhile.
    deadline = time.monotonic() + 150
    dead: list[cri.Container] = []
    while time.monotonic() < deadline:
        dead = dead_containers(layout, uids)
        if len(dead) <= CAP:
            break
        time.sleep(2)
    assert len(dead) <= CAP, f"{len(dead)} dead containers of these pods with a node-wide cap of {CAP}"
    # A removed container's log files go with it (upstream removeContainerLog: logManager.Clean): each log file left
    # belongs to a container the runtime still has (a file newer than the listing is a restart since).
    for uid, kept in container_logs(layout, uids).items():
        directory = Path(next(iter(kept))).parent
        numbers = {int(Path(k).name.split(".")[0]) for k in kept}
        files = {str(f) for f in directory.glob("*.log*")}
        stale = sorted(f for f in files - kept if int(Path(f).name.split(".")[0]) <= max(numbers))
        assert not stale, f"log files of removed containers of pod {uid}: {stale}"
    for i in range(PODS):
        admin.run("delete", "pod", f"crash-{i}", "-n", namespace, "--wait=false")
