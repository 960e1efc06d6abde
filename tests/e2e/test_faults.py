"""The agent survives its dependencies restarting: containerd and the apiserver go away and come back,
running pods stay untouched, and new pods still start."""

from __future__ import annotations

import time

import pytest

from devstack import processes, stack
from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_pod_lifecycle import container, is_ready, pod_manifest, runtime_containers, statuses, wait_pod


def restart(layout: Layout, name: str, down_for: float = 3.0) -> None:
    comp = next(c for c in stack.components(layout) if c.name == name)
    processes.stop(name, pids=layout.pids)
    time.sleep(down_for)
    processes.start(name, comp.argv, pids=layout.pids, logs=layout.logs, healthy=comp.healthy, timeout=comp.timeout)


@pytest.mark.parametrize("component", ["containerd", "kube-apiserver"])
def test_restart_keeps_pods_and_converges(running_agent: Agent, admin: Kubectl, layout: Layout, namespace: str,
                                          component: str) -> None:
    admin.apply(pod_manifest("before", namespace, layout.node_name, [container("main", "sleep 3600")]))
    pod = wait_pod(admin, namespace, "before", is_ready, what="Ready")
    uid, container_id = pod["metadata"]["uid"], statuses(pod)["main"]["containerID"]

    restart(layout, component)

    admin.apply(pod_manifest("after", namespace, layout.node_name, [container("main", "sleep 3600")]))
    wait_pod(admin, namespace, "after", is_ready, timeout=120, what=f"Ready after a {component} restart")
    pod = admin.json("get", "pod", "before", "-n", namespace)
    assert statuses(pod)["main"]["containerID"] == container_id and statuses(pod)["main"]["restartCount"] == 0
    assert len(runtime_containers(layout, uid)) == 1
    assert running_agent.proc is not None and running_agent.proc.poll() is None
