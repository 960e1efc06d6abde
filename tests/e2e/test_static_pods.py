"""Static pods from --pod-manifest-path: run without the apiserver, mirrored into it, updated with the
file, removed with it; a broken file is reported and leaves the others alone."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_pod_lifecycle import is_ready, runtime_containers, statuses, wait_gone, wait_pod


@pytest.fixture(scope="module")
def manifests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("manifests")


@pytest.fixture(scope="module")
def static_agent(layout: Layout, manifests: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    a = Agent(layout, tmp_path_factory.mktemp("agent") / "agent.log",
              env={"KOPFLET_ARGS": f"--pod-manifest-path={manifests}"})
    a.start()
    a.wait_for(r"Activity 'start_agent' succeeded")
    yield a
    a.stop()


def manifest(name: str, script: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                       "spec": {"terminationGracePeriodSeconds": 2, "containers": [
                           {"name": "main", "image": "docker.io/library/busybox:1.36",
                            "command": ["sh", "-c", script]}]}})


def mirror_hash(pod: dict[str, Any]) -> str:
    return pod["metadata"].get("annotations", {}).get("kubernetes.io/config.mirror", "")


def test_static_pod_lifecycle(static_agent: Agent, admin: Kubectl, layout: Layout, manifests: Path) -> None:
    name = f"static-{uuid.uuid4().hex[:6]}"
    mirror_name = f"{name}-{layout.node_name}"
    path = manifests / f"{name}.yaml"
    path.write_text(manifest(name, "sleep 3600"))

    pod = wait_pod(admin, "default", mirror_name, is_ready, timeout=60, what="a Ready mirror pod")
    first_hash = mirror_hash(pod)
    assert first_hash and pod["metadata"]["annotations"]["kubernetes.io/config.source"] == "file"
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "Node"
    first_id = statuses(pod)["main"]["containerID"]

    # A broken file is reported and does not disturb the running static pod.
    (manifests / "broken.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {}\n")
    static_agent.wait_for(r"static pod manifest skipped: .*broken\.yaml: metadata\.name: Required value")
    time.sleep(2)
    assert statuses(admin.json("get", "pod", mirror_name, "-n", "default"))["main"]["containerID"] == first_id

    # An edited file is a new pod: new hash, new container; the old one is removed from the runtime.
    path.write_text(manifest(name, "echo v2; sleep 3600"))
    pod = wait_pod(admin, "default", mirror_name, lambda p: mirror_hash(p) not in ("", first_hash) and is_ready(p),
                   timeout=60, what="updated")
    assert statuses(pod)["main"]["containerID"] != first_id
    deadline = time.monotonic() + 20
    while runtime_containers(layout, first_hash) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert runtime_containers(layout, first_hash) == []

    # A removed file removes the pod and its mirror.
    second_hash = mirror_hash(pod)
    path.unlink()
    wait_gone(admin, "default", mirror_name, timeout=40)
    deadline = time.monotonic() + 20
    while runtime_containers(layout, second_hash) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert runtime_containers(layout, second_hash) == []
    (manifests / "broken.yaml").unlink()


def test_deleted_mirror_pod_is_recreated(static_agent: Agent, admin: Kubectl, layout: Layout,
                                         manifests: Path) -> None:
    name = f"static-{uuid.uuid4().hex[:6]}"
    mirror_name = f"{name}-{layout.node_name}"
    path = manifests / f"{name}.yaml"
    path.write_text(manifest(name, "sleep 3600"))
    try:
        pod = wait_pod(admin, "default", mirror_name, is_ready, timeout=60, what="a Ready mirror pod")
        container_id = statuses(pod)["main"]["containerID"]
        old_uid = pod["metadata"]["uid"]
        admin.run("delete", "pod", mirror_name, "-n", "default", "--wait=false")
        pod = wait_pod(admin, "default", mirror_name,
                       lambda p: p["metadata"]["uid"] != old_uid and is_ready(p), timeout=60, what="recreated")
        assert statuses(pod)["main"]["containerID"] == container_id  # the static pod itself kept running
    finally:
        path.unlink()
        wait_gone(admin, "default", mirror_name, timeout=40)
