"""The agent SIGKILLed right after each step of a pod's start and termination, then started again.

"Right after" is exact: the CRI proxy forwards the step's call to containerd and holds the reply
(Hang(after_forward=True)), so the runtime has done the step and the agent is killed before it learns so.
Every case must converge to the right status with one sandbox and one container, and a container that was
already running is never restarted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.criproxy import CriProxy, Hang
from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_cri_faults import for_pod, sleeper
from tests.e2e.test_pod_lifecycle import (
    is_ready,
    runtime_containers,
    runtime_sandboxes,
    statuses,
    wait_gone,
    wait_pod,
)


@pytest.fixture(scope="module")
def proxy(layout: Layout, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CriProxy]:
    with CriProxy(listen=tmp_path_factory.mktemp("criproxy") / "cri.sock", upstream=layout.runtime_endpoint) as p:
        yield p


class Restartable:
    """The agent through the proxy, killed and started again as one test needs."""

    def __init__(self, layout: Layout, proxy: CriProxy, log: Path) -> None:
        self.agent = Agent(layout, log, env={"CONTAINER_RUNTIME_ENDPOINT": proxy.endpoint})
        self.starts = 0

    def start(self) -> None:
        self.agent.start()
        self.starts += 1
        deadline = time.monotonic() + 90
        while self.agent.output().count("Activity 'start_agent' succeeded") < self.starts:
            assert time.monotonic() < deadline, f"the agent did not start:\n{self.agent.output()[-3000:]}"
            assert self.agent.proc is not None and self.agent.proc.poll() is None, self.agent.output()[-3000:]
            time.sleep(0.2)

    def kill(self) -> None:
        assert self.agent.proc is not None and self.agent.proc.poll() is None, "the agent died on its own"
        self.agent.proc.kill()
        self.agent.proc.wait()


@pytest.fixture
def agent(layout: Layout, proxy: CriProxy, tmp_path: Path) -> Iterator[Restartable]:
    a = Restartable(layout, proxy, tmp_path / "agent.log")
    a.start()
    try:
        yield a
    finally:
        proxy.clear()
        if a.agent.proc is not None and a.agent.proc.poll() is None:
            a.agent.stop()
    crashes = [line for line in a.agent.output().splitlines() if "sync crashed" in line or "Traceback" in line]
    assert not crashes, "the agent crashed while syncing:\n" + "\n".join(crashes)


def one_sandbox_one_container(layout: Layout, uid: str, settle: float = 30) -> tuple[str, str]:
    """The pod has exactly one sandbox (ready) and one live container (running); their IDs.

    A container created but never started by the killed agent is removed by the sync after the one that started
    its successor (upstream leaves it to the container GC, later still), so the runtime gets `settle` seconds to
    drop it; nothing else may be there."""
    deadline = time.monotonic() + settle
    while True:
        sandboxes = runtime_sandboxes(layout, uid)
        live = [c for c in runtime_containers(layout, uid) if c.state.name in ("RUNNING", "CREATED")]
        if [c.state.name for c in live] == ["RUNNING"] or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert [s.state.name for s in sandboxes] == ["READY"], sandboxes
    assert [c.state.name for c in live] == ["RUNNING"], live
    return sandboxes[0].id, live[0].id


# The start steps: the CRI call whose reply is held, and whether the call names the pod (so the hold
# cannot catch another pod's call); StartContainer carries only a container ID.
START_STEPS = [("sandbox created", "RunPodSandbox", True), ("image pulled", "PullImage", True),
               ("container created", "CreateContainer", True), ("container started", "StartContainer", False)]


@pytest.mark.parametrize(("step", "method", "by_pod"), START_STEPS, ids=[s[0] for s in START_STEPS])
def test_killed_during_start_converges(agent: Restartable, proxy: CriProxy, admin: Kubectl, layout: Layout,
                                       namespace: str, step: str, method: str, by_pod: bool,
                                       record_property: Any) -> None:
    name = method.lower()
    proxy.inject(method, Hang(after_forward=True), times=1, when=for_pod(name) if by_pod else None)
    before = proxy.calls(method)
    admin.apply(sleeper(name, namespace, layout, imagePullPolicy="Always"))
    assert proxy.wait_calls(method, before + 1, timeout=60), f"the agent never reached {method}"
    time.sleep(0.5)  # the runtime finishes the step; its reply stays held
    agent.kill()
    proxy.clear()
    agent.start()
    pod = wait_pod(admin, namespace, name, is_ready, timeout=120, what=f"Ready after a kill at '{step}'")
    uid = pod["metadata"]["uid"]
    _, container_id = one_sandbox_one_container(layout, uid)
    main = statuses(pod)["main"]
    assert main["containerID"].endswith(container_id)
    # A container created but never started still counts as an attempt (upstream computes the next attempt
    # from every instance the runtime has): the one after it is restart 1. Nothing that ran was restarted.
    assert main["restartCount"] == (1 if method == "CreateContainer" else 0), f"after a kill at '{step}'"
    record_property("injected", f"SIGKILL after '{step}' ({method} done by containerd, its reply held)")
    record_property("saw", "Ready after the restart; 1 sandbox, 1 running container, restartCount 0")


def test_killed_after_status_written_keeps_the_running_container(agent: Restartable, admin: Kubectl,
                                                                 layout: Layout, namespace: str,
                                                                 record_property: Any) -> None:
    admin.apply(sleeper("written", namespace, layout))
    pod = wait_pod(admin, namespace, "written", is_ready, what="Ready")
    agent.kill()
    sandbox_id, container_id = one_sandbox_one_container(layout, pod["metadata"]["uid"])
    agent.start()
    admin.apply(sleeper("marker", namespace, layout))  # the restarted agent has synced by the time this runs
    wait_pod(admin, namespace, "marker", is_ready, what="Ready after the restart")
    pod = admin.json("get", "pod", "written", "-n", namespace)
    assert is_ready(pod) and statuses(pod)["main"]["restartCount"] == 0
    assert one_sandbox_one_container(layout, pod["metadata"]["uid"]) == (sandbox_id, container_id)
    record_property("injected", "SIGKILL after the Running status was written")
    record_property("saw", "the same sandbox and container adopted, restartCount 0")


STOP_STEPS = [("container stopped", "StopContainer"), ("sandbox stopped", "StopPodSandbox"),
              ("sandbox removed", "RemovePodSandbox")]


@pytest.mark.parametrize(("step", "method"), STOP_STEPS, ids=[s[0] for s in STOP_STEPS])
def test_killed_during_termination_converges(agent: Restartable, proxy: CriProxy, admin: Kubectl, layout: Layout,
                                             namespace: str, step: str, method: str, record_property: Any) -> None:
    name = method.lower()
    admin.apply(sleeper(name, namespace, layout))
    uid = wait_pod(admin, namespace, name, is_ready, what="Ready")["metadata"]["uid"]
    proxy.inject(method, Hang(after_forward=True), times=1)
    before = proxy.calls(method)
    admin.run("delete", "pod", name, "-n", namespace, "--wait=false")
    assert proxy.wait_calls(method, before + 1, timeout=60), f"the agent never reached {method}"
    time.sleep(0.5)
    agent.kill()
    proxy.clear()
    agent.start()
    wait_gone(admin, namespace, name, timeout=120)
    deadline = time.monotonic() + 60
    left: list[Any] = []
    while time.monotonic() < deadline:
        left = [*runtime_sandboxes(layout, uid), *runtime_containers(layout, uid)]
        if not left:
            break
        time.sleep(1)
    assert not left, f"left in the runtime after a kill at '{step}': {left}"
    record_property("injected", f"pod deleted; SIGKILL after '{step}' ({method} done, its reply held)")
    record_property("saw", "the Pod object gone after the restart; nothing left in the runtime")


def test_pods_changed_while_the_agent_was_down(agent: Restartable, admin: Kubectl, layout: Layout,
                                               namespace: str, record_property: Any) -> None:
    """Created and deleted while no agent ran: started and cleaned up when it returns."""
    admin.apply(sleeper("old", namespace, layout))
    old_uid = wait_pod(admin, namespace, "old", is_ready, what="Ready")["metadata"]["uid"]
    agent.kill()
    admin.run("delete", "pod", "old", "-n", namespace, "--wait=false")
    admin.apply(sleeper("new", namespace, layout))
    time.sleep(2)
    agent.start()
    pod = wait_pod(admin, namespace, "new", is_ready, timeout=90, what="Ready once the agent is back")
    one_sandbox_one_container(layout, pod["metadata"]["uid"])
    wait_gone(admin, namespace, "old", timeout=90)
    deadline = time.monotonic() + 60
    while runtime_sandboxes(layout, old_uid) and time.monotonic() < deadline:
        time.sleep(1)
    assert runtime_sandboxes(layout, old_uid) == [] and runtime_containers(layout, old_uid) == []
    record_property("injected", "agent SIGKILLed; a pod deleted and another created; agent started again")
    record_property("saw", "the new pod Ready, the deleted one gone with nothing left in the runtime")
