"""CRI faults injected between the agent and the real containerd (devstack.criproxy, like upstream's node e2e
CRI proxy): each failure shows up with upstream's reason, is retried, and converges with no duplicate
sandbox or container.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from devstack.criproxy import CriProxy, Delay, Fail, Hang
from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_pod_lifecycle import (
    container,
    events,
    is_ready,
    pod_manifest,
    runtime_containers,
    runtime_sandboxes,
    statuses,
    wait_gone,
    wait_pod,
    watched_objects,
)

# Short enough that a hung call's deadline fires within a test, long enough for a real start.
REQUEST_TIMEOUT = 10


@pytest.fixture(scope="module")
def proxy(layout: Layout, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CriProxy]:
    with CriProxy(listen=tmp_path_factory.mktemp("criproxy") / "cri.sock", upstream=layout.runtime_endpoint) as p:
        yield p


@pytest.fixture(scope="module")
def proxied_agent(layout: Layout, proxy: CriProxy, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    a = Agent(layout, tmp_path_factory.mktemp("agent") / "agent.log",
              env={"CONTAINER_RUNTIME_ENDPOINT": proxy.endpoint,
                   "KOPFLET_ARGS": f"--runtime-request-timeout={REQUEST_TIMEOUT}s"})
    a.start()
    a.wait_for(r"Activity 'start_agent' succeeded")
    try:
        yield a
    finally:
        proxy.clear()
        if a.proc is not None and a.proc.poll() is None:
            a.stop()
    crashes = [line for line in a.output().splitlines() if "sync crashed" in line or "Traceback" in line]
    assert not crashes, "the agent crashed while syncing:\n" + "\n".join(crashes)


@pytest.fixture(autouse=True)
def no_faults_left(proxy: CriProxy) -> Iterator[None]:
    yield
    proxy.clear()


@contextlib.contextmanager
def watching(admin: Kubectl, namespace: str) -> Iterator[list[dict[str, Any]]]:
    """Every version of the namespace's pods the apiserver sent: transient reasons last one sync only."""
    seen: list[dict[str, Any]] = []
    watch = subprocess.Popen([str(admin.binary), f"--kubeconfig={admin.kubeconfig}", "get", "pods", "-n", namespace,
                              "-w", "-o", "json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        yield seen
    finally:
        watch.terminate()
        output, _ = watch.communicate(timeout=10)
        seen.extend(watched_objects(output))


def waiting_reasons(objects: list[dict[str, Any]], name: str) -> list[str]:
    return [statuses(p).get("main", {}).get("state", {}).get("waiting", {}).get("reason", "")
            for p in objects if p["metadata"]["name"] == name]


def for_pod(name: str) -> Any:
    """Match a CRI request carrying this pod's sandbox config (its metadata name is in the bytes)."""
    return lambda request: name.encode() in request


def sleeper(name: str, namespace: str, layout: Layout, **extra: Any) -> str:
    return pod_manifest(name, namespace, layout.node_name, [container("main", "sleep 3600", **extra)])


def assert_one_of_each(layout: Layout, pod: dict[str, Any]) -> None:
    uid = pod["metadata"]["uid"]
    ready = [s for s in runtime_sandboxes(layout, uid) if s.state.name == "READY"]
    assert len(ready) == 1, f"ready sandboxes: {ready}"
    running = [c for c in runtime_containers(layout, uid) if c.state.name == "RUNNING"]
    assert len(running) == 1, f"running containers: {running}"


def test_run_pod_sandbox_fails_once(proxied_agent: Agent, proxy: CriProxy, admin: Kubectl, layout: Layout,
                                    namespace: str, record_property: Any) -> None:
    proxy.inject("RunPodSandbox", Fail(grpc.StatusCode.UNKNOWN, "injected sandbox failure"), times=1,
                 when=for_pod("sb-fail"))
    admin.apply(sleeper("sb-fail", namespace, layout))
    pod = wait_pod(admin, namespace, "sb-fail", is_ready, timeout=90, what="Ready after a failed sandbox")
    failed = [e for e in events(admin, namespace, "sb-fail") if e["reason"] == "FailedCreatePodSandBox"]
    assert failed and failed[0]["type"] == "Warning"
    assert "Failed to create pod sandbox: rpc error: code = Unknown desc = injected sandbox failure" \
        in failed[0]["message"]
    assert proxy.calls("RunPodSandbox") >= 2
    assert_one_of_each(layout, pod)
    record_property("injected", "RunPodSandbox fails once (Unknown)")
    record_property("saw", f"Warning FailedCreatePodSandBox '{failed[0]['message']}', then Ready; 1 sandbox")


def test_lost_run_pod_sandbox_reply_adopts_the_sandbox(proxied_agent: Agent, proxy: CriProxy, admin: Kubectl,
                                                       layout: Layout, namespace: str, record_property: Any) -> None:
    """containerd made the sandbox but the agent saw an error: the next sync finds it; never a second one."""
    proxy.inject("RunPodSandbox", Fail(grpc.StatusCode.UNAVAILABLE, "reply lost", after_forward=True), times=1,
                 when=for_pod("sb-lost"))
    admin.apply(sleeper("sb-lost", namespace, layout))
    pod = wait_pod(admin, namespace, "sb-lost", is_ready, timeout=90, what="Ready after a lost reply")
    assert len(runtime_sandboxes(layout, pod["metadata"]["uid"])) == 1
    assert_one_of_each(layout, pod)
    record_property("injected", "RunPodSandbox done by containerd, its reply replaced by Unavailable")
    record_property("saw", "Ready with the one sandbox containerd made (adopted, no second sandbox)")


def test_pull_image_fails_then_recovers(proxied_agent: Agent, proxy: CriProxy, admin: Kubectl, layout: Layout,
                                        namespace: str, record_property: Any) -> None:
    proxy.inject("PullImage", Fail(grpc.StatusCode.UNAVAILABLE, "injected registry outage"), times=2,
                 when=for_pod("pull-fail"))
    with watching(admin, namespace) as seen:
        admin.apply(sleeper("pull-fail", namespace, layout, imagePullPolicy="Always"))
        pod = wait_pod(admin, namespace, "pull-fail", is_ready, timeout=120, what="Ready after pull failures")
    reasons = waiting_reasons(seen, "pull-fail")
    assert "ErrImagePull" in reasons and "ImagePullBackOff" in reasons, reasons
    failed = [e for e in events(admin, namespace, "pull-fail") if e["reason"] == "Failed"]
    assert any("injected registry outage" in e["message"] for e in failed)
    assert any(e["reason"] == "BackOff" for e in events(admin, namespace, "pull-fail"))
    assert_one_of_each(layout, pod)
    record_property("injected", "PullImage fails twice (Unavailable)")
    record_property("saw", f"waiting reasons {sorted(set(reasons) - {''})}, Failed and BackOff events, then Ready")


@pytest.mark.parametrize(("method", "reason"), [("CreateContainer", "CreateContainerError"),
                                                ("StartContainer", "RunContainerError")])
def test_container_errors_show_and_back_off(proxied_agent: Agent, proxy: CriProxy, admin: Kubectl, layout: Layout,
                                            namespace: str, method: str, reason: str, record_property: Any) -> None:
    name = f"{method.lower()}-fail"
    # StartContainer carries only the container ID: no other pod starts a container meanwhile.
    when = for_pod(name) if method == "CreateContainer" else None
    proxy.inject(method, Fail(grpc.StatusCode.UNKNOWN, f"injected {method} failure"), times=2, when=when)
    with watching(admin, namespace) as seen:
        admin.apply(sleeper(name, namespace, layout))
        pod = wait_pod(admin, namespace, name, is_ready, timeout=120, what=f"Ready after {method} failures")
    assert reason in waiting_reasons(seen, name), waiting_reasons(seen, name)
    failed = [e for e in events(admin, namespace, name) if e["reason"] == "Failed"]
    assert any(f"injected {method} failure" in e["message"] for e in failed)
    assert_one_of_each(layout, pod)
    record_property("injected", f"{method} fails twice (Unknown)")
    record_property("saw", f"waiting reason {reason}, Warning Failed events, then Ready; 1 running container")


def test_hung_call_hits_the_deadline_and_others_progress(proxied_agent: Agent, proxy: CriProxy, admin: Kubectl,
                                                         layout: Layout, namespace: str,
                                                         record_property: Any) -> None:
    proxy.inject("RunPodSandbox", Hang(), times=1, when=for_pod("hung"))
    admin.apply(sleeper("hung", namespace, layout))
    assert proxy.wait_calls("RunPodSandbox", timeout=30)
    started = time.monotonic()
    admin.apply(sleeper("bystander", namespace, layout))
    wait_pod(admin, namespace, "bystander", is_ready, timeout=REQUEST_TIMEOUT * 2,
             what="Ready while another pod's CRI call hangs")
    assert time.monotonic() - started < REQUEST_TIMEOUT, "the bystander waited for the hung call"
    pod = wait_pod(admin, namespace, "hung", is_ready, timeout=REQUEST_TIMEOUT * 6,
                   what="Ready once the hung call timed out and was retried")
    failed = [e for e in events(admin, namespace, "hung") if e["reason"] == "FailedCreatePodSandBox"]
    assert failed and "DeadlineExceeded" in failed[0]["message"], failed
    assert_one_of_each(layout, pod)
    record_property("injected", f"RunPodSandbox of one pod hangs (runtime-request-timeout {REQUEST_TIMEOUT}s)")
    record_property("saw", f"another pod Ready meanwhile; '{failed[0]['message']}', then Ready")


def test_slow_runtime_still_converges(proxied_agent: Agent, proxy: CriProxy, admin: Kubectl, layout: Layout,
                                      namespace: str, record_property: Any) -> None:
    proxy.inject("*", Delay(0.3), when=for_pod("slow"))
    admin.apply(sleeper("slow", namespace, layout))
    pod = wait_pod(admin, namespace, "slow", is_ready, timeout=90, what="Ready on a slow runtime")
    assert_one_of_each(layout, pod)
    record_property("injected", "every CRI call naming the pod delayed 0.3 s")
    record_property("saw", "Ready; 1 sandbox, 1 container")


def test_stop_container_failing_during_delete_is_retried(proxied_agent: Agent, proxy: CriProxy, admin: Kubectl,
                                                         layout: Layout, namespace: str,
                                                         record_property: Any) -> None:
    admin.apply(sleeper("stop-fail", namespace, layout))
    pod = wait_pod(admin, namespace, "stop-fail", is_ready, what="Ready")
    uid = pod["metadata"]["uid"]
    proxy.inject("StopContainer", Fail(grpc.StatusCode.UNKNOWN, "injected stop failure"), times=2)
    admin.run("delete", "pod", "stop-fail", "-n", namespace, "--wait=false")
    wait_gone(admin, namespace, "stop-fail", timeout=120)
    assert proxy.calls("StopContainer") >= 3
    assert runtime_containers(layout, uid) == [] or all(
        c.state.name == "EXITED" for c in runtime_containers(layout, uid))
    kills = [e for e in events(admin, namespace, "stop-fail") if e["reason"] in ("FailedKillPod", "Killing")]
    assert kills, "no Killing/FailedKillPod event"
    record_property("injected", "StopContainer fails twice (Unknown) while the pod is deleted")
    record_property("saw", f"events {sorted({e['reason'] for e in kills})}; the stop retried; the Pod gone")


def test_proxy_is_in_the_path(proxied_agent: Agent, proxy: CriProxy) -> None:
    """Guards the other tests: the agent talks to the runtime only through the proxy."""
    assert proxy.calls("ListPodSandbox") > 0
    assert Path(proxy.endpoint.removeprefix("unix://")).is_socket()
