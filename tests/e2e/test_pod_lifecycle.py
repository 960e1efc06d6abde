"""The pod lifecycle end to end: the agent as system:node:<name> against the real apiserver and containerd.

Each test creates pods bound to the node and reads back what a user would see: pod status, events, and
the runtime's containers (through the CRI client).
"""

from __future__ import annotations

import asyncio
import glob
import json
import subprocess
import time
from collections.abc import Callable
from typing import Any

from cri_client import CriClient
from cri_client import types as cri
from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent

BUSYBOX = "docker.io/library/busybox:1.36"


def pod_manifest(name: str, namespace: str, node: str, containers: list[dict[str, Any]],
                 **spec: Any) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
                       "spec": {"nodeName": node, "automountServiceAccountToken": False,
                                "terminationGracePeriodSeconds": 5, "containers": containers, **spec}})


def container(name: str, script: str, image: str = BUSYBOX, **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": image, "command": ["sh", "-c", script], **extra}


def wait_pod(admin: Kubectl, namespace: str, name: str, predicate: Callable[[dict[str, Any]], bool],
             timeout: float = 90.0, what: str = "") -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    pod: dict[str, Any] = {}
    while time.monotonic() < deadline:
        proc = admin.run("get", "pod", name, "-n", namespace, "-o", "json", check=False)
        if proc.returncode == 0:
            pod = json.loads(proc.stdout)
            if predicate(pod):
                return pod
        time.sleep(0.5)
    raise AssertionError(f"pod {namespace}/{name} never got {what or 'there'}; last status:\n"
                         f"{json.dumps(pod.get('status'), indent=1)}")


def wait_served(admin: Kubectl, namespace: str, name: str, container: str, timeout: float = 60.0) -> None:
    """Wait until the agent serves exec for the pod: a restarted agent answers ``pod "x" does not exist`` (as
    upstream's kubelet does) until its watch has listed the pod, while the apiserver still shows the pod Ready."""
    deadline = time.monotonic() + timeout
    proc = None
    while time.monotonic() < deadline:
        proc = admin.run("exec", "-n", namespace, name, "-c", container, "--", "true", check=False)
        if proc.returncode == 0:
            return
        time.sleep(0.5)
    raise AssertionError(f"the agent never served exec for {namespace}/{name}: {proc.stderr if proc else ''}")


def wait_gone(admin: Kubectl, namespace: str, name: str, timeout: float = 60.0) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if admin.run("get", "pod", name, "-n", namespace, check=False).returncode != 0:
            return time.monotonic() - start
        time.sleep(0.3)
    raise AssertionError(f"pod {namespace}/{name} still exists after {timeout}s")


def wait_node_idle(admin: Kubectl, node: str, timeout: float = 90) -> None:
    """No pod on the node counts towards admission (max-pods, cpu, memory): pods left by earlier tests, whose
    namespaces are deleted without waiting, are gone or terminal. Call it with an agent running: it finishes them."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = admin.json("get", "pods", "-A", "--field-selector", f"spec.nodeName={node}")["items"]
        if all(p.get("status", {}).get("phase") in ("Succeeded", "Failed") for p in pods):
            return
        time.sleep(1)
    raise AssertionError(f"pods still active on {node}: {[p['metadata']['name'] for p in pods]}")


def events(admin: Kubectl, namespace: str, name: str) -> list[dict[str, Any]]:
    items = admin.json("get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}")["items"]
    return sorted(items, key=lambda e: e.get("firstTimestamp") or "")


def statuses(pod: dict[str, Any], key: str = "containerStatuses") -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in pod.get("status", {}).get(key, [])}


def runtime_containers(layout: Layout, pod_uid: str) -> list[cri.Container]:
    async def listing() -> list[cri.Container]:
        async with CriClient(layout.runtime_endpoint) as client:
            return await client.containers.list(
                cri.ContainerFilter(label_selector={"io.kubernetes.pod.uid": pod_uid}))
    return asyncio.run(listing())


def runtime_sandboxes(layout: Layout, pod_uid: str) -> list[cri.PodSandbox]:
    async def listing() -> list[cri.PodSandbox]:
        async with CriClient(layout.runtime_endpoint) as client:
            return await client.sandboxes.list(cri.PodSandboxFilter(label_selector={"io.kubernetes.pod.uid": pod_uid}))
    return asyncio.run(listing())


def pod_cgroups(uid: str) -> list[str]:
    """The pod's cgroup directories in every hierarchy (cgroup v1 controllers or the v2 unified tree)."""
    return glob.glob(f"/sys/fs/cgroup/*/kubepods/besteffort/pod{uid}") + \
        glob.glob(f"/sys/fs/cgroup/kubepods/besteffort/pod{uid}")


def phase(value: str) -> Callable[[dict[str, Any]], bool]:
    return lambda pod: pod.get("status", {}).get("phase") == value


def is_ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def test_running_pod_gets_ip_ready_and_upstream_events(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                       namespace: str) -> None:
    admin.apply(pod_manifest("web", namespace, layout.node_name, [container("main", "sleep 3600")]))
    pod = wait_pod(admin, namespace, "web", is_ready, what="Ready")
    st = pod["status"]
    assert st["phase"] == "Running"
    assert st["podIP"].startswith("10.88.") and st["podIPs"] == [{"ip": st["podIP"]}]
    assert st["hostIP"] and st["startTime"] and st["qosClass"] == "BestEffort"
    conditions = {c["type"]: c["status"] for c in st["conditions"]}
    assert conditions == {"PodReadyToStartContainers": "True", "Initialized": "True", "ContainersReady": "True",
                          "Ready": "True", "PodScheduled": "True"}
    # upstream's ready conditions carry no reason or message when True: not the Pending status's ContainersNotReady
    for ready in (c for c in st["conditions"] if c["type"] in ("Ready", "ContainersReady")):
        assert "reason" not in ready and "message" not in ready, ready
    main = statuses(pod)["main"]
    assert main["ready"] is True and main["started"] is True and main["restartCount"] == 0
    assert "running" in main["state"] and main["state"]["running"]["startedAt"]
    assert main["containerID"].startswith("containerd://")
    assert main["image"] == BUSYBOX and "@sha256:" in main["imageID"]
    reasons = [e["reason"] for e in events(admin, namespace, "web")]
    assert {"Pulled", "Created", "Started"} <= set(reasons), reasons
    assert all(e["source"].get("component") == "kubelet" for e in events(admin, namespace, "web")
               if e["reason"] in ("Pulled", "Created", "Started"))
    meta = pod["metadata"]
    assert not meta.get("finalizers") and not [a for a in meta.get("annotations", {}) if "kopf" in a]

    uid = meta["uid"]
    assert pod_cgroups(uid), "the pod runs in its own cgroup under /kubepods/besteffort"
    admin.run("delete", "pod", "web", "-n", namespace, "--wait=false")
    wait_gone(admin, namespace, "web")
    deadline = time.monotonic() + 30
    while (runtime_containers(layout, uid) or runtime_sandboxes(layout, uid) or pod_cgroups(uid)) \
            and time.monotonic() < deadline:
        time.sleep(0.5)
    assert runtime_containers(layout, uid) == [] and runtime_sandboxes(layout, uid) == []
    assert pod_cgroups(uid) == []


def test_succeeded_with_termination_message(running_agent: Agent, admin: Kubectl, layout: Layout,
                                            namespace: str) -> None:
    admin.apply(pod_manifest("job", namespace, layout.node_name,
                             [container("main", "echo all done > /dev/termination-log; exit 0")],
                             restartPolicy="Never"))
    pod = wait_pod(admin, namespace, "job", phase("Succeeded"), what="Succeeded")
    terminated = statuses(pod)["main"]["state"]["terminated"]
    assert terminated["exitCode"] == 0 and terminated["reason"] == "Completed"
    assert terminated["message"].strip() == "all done"
    assert terminated["startedAt"] and terminated["finishedAt"]
    ready = {c["type"]: c for c in pod["status"]["conditions"]}["Ready"]
    assert ready["status"] == "False" and ready.get("reason") == "PodCompleted"


def test_failed_with_exit_code(running_agent: Agent, admin: Kubectl, layout: Layout, namespace: str) -> None:
    admin.apply(pod_manifest("broken", namespace, layout.node_name, [container("main", "exit 3")],
                             restartPolicy="Never"))
    pod = wait_pod(admin, namespace, "broken", phase("Failed"), what="Failed")
    terminated = statuses(pod)["main"]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (3, "Error")
    time.sleep(3)  # a terminal pod is never restarted
    again = admin.json("get", "pod", "broken", "-n", namespace)
    assert again["status"]["phase"] == "Failed" and statuses(again)["main"]["restartCount"] == 0


def test_crash_loop_backoff(running_agent: Agent, admin: Kubectl, layout: Layout, namespace: str) -> None:
    admin.apply(pod_manifest("crash", namespace, layout.node_name, [container("main", "echo boom; exit 1")]))
    pod = wait_pod(admin, namespace, "crash",
                   lambda p: statuses(p).get("main", {}).get("restartCount", 0) >= 2
                   and "waiting" in statuses(p)["main"]["state"], timeout=120, what="two restarts")
    main = statuses(pod)["main"]
    assert main["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert "back-off" in main["state"]["waiting"]["message"] and "restarting failed container=main" in \
        main["state"]["waiting"]["message"]
    assert main["lastState"]["terminated"]["exitCode"] == 1
    assert pod["status"]["phase"] == "Running"
    assert "BackOff" in {e["reason"] for e in events(admin, namespace, "crash")}
    # Container GC keeps the newest dead instance (lastState, logs --previous), removes older ones.
    uid = pod["metadata"]["uid"]
    deadline = time.monotonic() + 15
    while len(runtime_containers(layout, uid)) > 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert 1 <= len(runtime_containers(layout, uid)) <= 2


def test_a_container_that_never_starts_backs_off(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                 namespace: str) -> None:
    # StartContainer fails for real (runc cannot exec the command): containerd keeps the instance as exited,
    # reason StartError, exit code 128. Upstream doBackOff bumps the crash-loop backoff on every attempt, failed
    # or not, so the next sync waits: CrashLoopBackOff, not a new instance on every relist.
    admin.apply(pod_manifest("nostart", namespace, layout.node_name,
                             [{"name": "main", "image": BUSYBOX, "command": ["/no/such/binary"]}]))
    pod = wait_pod(admin, namespace, "nostart",
                   lambda p: (statuses(p).get("main", {}).get("state", {}).get("waiting") or {}).get("reason")
                   == "CrashLoopBackOff", timeout=90, what="CrashLoopBackOff after failed starts")
    main = statuses(pod)["main"]
    assert main["state"]["waiting"]["message"] == (
        f"back-off {'10s' if main['restartCount'] <= 1 else '20s'} restarting failed container=main "
        f"pod=nostart_{namespace}({pod['metadata']['uid']})")
    last = main["lastState"]["terminated"]
    assert (last["reason"], last["exitCode"]) == ("StartError", 128)
    assert "/no/such/binary" in last["message"]
    reasons = {e["reason"] for e in events(admin, namespace, "nostart")}
    assert {"Failed", "BackOff"} <= reasons
    # Backing off, the instances stay few: one per attempt, and at most one dead one is kept (container GC).
    assert main["restartCount"] <= 2
    assert len(runtime_containers(layout, pod["metadata"]["uid"])) <= 3


def test_init_containers_run_in_order(running_agent: Agent, admin: Kubectl, layout: Layout, namespace: str) -> None:
    admin.apply(pod_manifest("inits", namespace, layout.node_name, [container("main", "sleep 3600")],
                             initContainers=[container("first", "sleep 1"), container("second", "sleep 1")]))
    pod = wait_pod(admin, namespace, "inits", is_ready, what="Ready")
    inits = statuses(pod, "initContainerStatuses")
    first, second = inits["first"]["state"]["terminated"], inits["second"]["state"]["terminated"]
    assert first["reason"] == second["reason"] == "Completed"
    assert first["finishedAt"] <= second["startedAt"]
    assert second["finishedAt"] <= statuses(pod)["main"]["state"]["running"]["startedAt"]


def test_failing_init_container_under_never_fails_the_pod(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                         namespace: str) -> None:
    admin.apply(pod_manifest("badinit", namespace, layout.node_name, [container("main", "sleep 3600")],
                             initContainers=[container("init", "exit 7")], restartPolicy="Never"))
    pod = wait_pod(admin, namespace, "badinit", phase("Failed"), what="Failed")
    assert statuses(pod, "initContainerStatuses")["init"]["state"]["terminated"]["exitCode"] == 7
    assert "running" not in statuses(pod)["main"]["state"]


def test_failing_init_container_under_always_is_restarted(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                          namespace: str) -> None:
    admin.apply(pod_manifest("retryinit", namespace, layout.node_name, [container("main", "sleep 3600")],
                             initContainers=[container("init", "exit 7")]))
    pod = wait_pod(admin, namespace, "retryinit",
                   lambda p: statuses(p, "initContainerStatuses").get("init", {}).get("restartCount", 0) >= 1,
                   timeout=90, what="an init restart")
    assert pod["status"]["phase"] == "Pending"
    main = statuses(pod)["main"]["state"]["waiting"]
    assert main["reason"] == "PodInitializing"


def watched_objects(output: str) -> list[dict[str, Any]]:
    """Parse the concatenated JSON objects `kubectl get -w -o json` printed."""
    decoder, objects, pos = json.JSONDecoder(), [], 0
    while pos < len(output):
        while pos < len(output) and output[pos].isspace():
            pos += 1
        if pos >= len(output):
            break
        obj, pos = decoder.raw_decode(output, pos)
        objects.append(obj)
    return objects


def test_image_pull_errors(running_agent: Agent, admin: Kubectl, layout: Layout, namespace: str) -> None:
    # A watch sees every status the agent writes; ErrImagePull may last only until the next sync.
    watch = subprocess.Popen([str(admin.binary), f"--kubeconfig={admin.kubeconfig}", "get", "pods", "-n", namespace,
                              "-w", "-o", "json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        admin.apply(pod_manifest("noimage", namespace, layout.node_name,
                                 [container("main", "true", image="docker.io/library/does-not-exist:0")]))
        pod = wait_pod(admin, namespace, "noimage",
                       lambda p: statuses(p).get("main", {}).get("state", {}).get("waiting", {}).get("reason")
                       == "ImagePullBackOff", timeout=90, what="ImagePullBackOff")
    finally:
        watch.terminate()
        output, _ = watch.communicate(timeout=10)
    seen = [statuses(p).get("main", {}).get("state", {}).get("waiting", {}) for p in watched_objects(output)]
    err = next((w for w in seen if w.get("reason") == "ErrImagePull"), None)
    assert err is not None, f"ErrImagePull never shown; saw {[w.get('reason') for w in seen]}"
    assert "does-not-exist" in err["message"]
    assert statuses(pod)["main"]["state"]["waiting"]["message"] == \
        'Back-off pulling image "docker.io/library/does-not-exist:0"'
    assert pod["status"]["phase"] == "Pending"
    evs = events(admin, namespace, "noimage")
    assert any(e["reason"] == "Pulling" for e in evs)
    failed = {e["message"]: e for e in evs if e["reason"] == "Failed"}
    assert all(e["type"] == "Warning" for e in failed.values())
    # Upstream's pair: the pull failure itself, then startContainer's "Error: <reason>".
    assert any(m.startswith('Failed to pull image "docker.io/library/does-not-exist:0"') and "does-not-exist" in m
               for m in failed), list(failed)
    assert "Error: ErrImagePull" in failed and "Error: ImagePullBackOff" in failed, list(failed)


def test_missing_config_map_then_created(running_agent: Agent, admin: Kubectl, layout: Layout,
                                         namespace: str) -> None:
    env = [{"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "greeting"}}}]
    admin.apply(pod_manifest("needs-cm", namespace, layout.node_name,
                             [container("main", "echo $GREETING > /dev/termination-log; sleep 3600", env=env)]))
    pod = wait_pod(admin, namespace, "needs-cm",
                   lambda p: statuses(p).get("main", {}).get("state", {}).get("waiting", {}).get("reason")
                   == "CreateContainerConfigError", what="CreateContainerConfigError")
    assert 'configmap "settings" not found' in statuses(pod)["main"]["state"]["waiting"]["message"]
    admin.run("create", "configmap", "settings", "-n", namespace, "--from-literal=greeting=hello")
    wait_pod(admin, namespace, "needs-cm", is_ready, timeout=60, what="Ready once the ConfigMap exists")


def test_graceful_delete_honours_the_grace_period(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                  namespace: str) -> None:
    script = "trap 'sleep 2; exit 0' TERM; while true; do sleep 0.2; done"
    admin.apply(pod_manifest("graceful", namespace, layout.node_name, [container("main", script)],
                             terminationGracePeriodSeconds=20))
    pod = wait_pod(admin, namespace, "graceful", is_ready, what="Ready")
    uid = pod["metadata"]["uid"]
    admin.run("delete", "pod", "graceful", "-n", namespace, "--wait=false")
    took = wait_gone(admin, namespace, "graceful", timeout=40)
    assert 2 <= took < 20, f"the container's 2s TERM handler should bound the deletion, took {took:.1f}s"
    assert "Killing" in {e["reason"] for e in events(admin, namespace, "graceful")}
    deadline = time.monotonic() + 20
    while runtime_sandboxes(layout, uid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert runtime_sandboxes(layout, uid) == []


def test_agent_restart_adopts_running_containers(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                 namespace: str) -> None:
    admin.apply(pod_manifest("survivor", namespace, layout.node_name, [container("main", "sleep 3600")]))
    pod = wait_pod(admin, namespace, "survivor", is_ready, what="Ready")
    uid = pod["metadata"]["uid"]
    before = statuses(pod)["main"]["containerID"]
    running_agent.proc.kill()  # SIGKILL: no cleanup at all
    running_agent.proc.wait()
    running_agent.start()
    running_agent.wait_for(r"Activity 'start_agent' succeeded")
    time.sleep(5)  # a few relists and a housekeeping round
    after = admin.json("get", "pod", "survivor", "-n", namespace)
    assert statuses(after)["main"]["containerID"] == before and statuses(after)["main"]["restartCount"] == 0
    assert len(runtime_containers(layout, uid)) == 1 and len(runtime_sandboxes(layout, uid)) == 1


def test_agent_sigterm_leaves_pods_running(running_agent: Agent, admin: Kubectl, layout: Layout,
                                           namespace: str) -> None:
    admin.apply(pod_manifest("steady", namespace, layout.node_name, [container("main", "sleep 3600")]))
    pod = wait_pod(admin, namespace, "steady", is_ready, what="Ready")
    uid, before = pod["metadata"]["uid"], statuses(pod)["main"]["containerID"]
    assert running_agent.stop() == 0  # SIGTERM: a clean stop
    running = [c for c in runtime_containers(layout, uid) if c.state == cri.ContainerState.RUNNING]
    assert [f"containerd://{c.id}" for c in running] == [before]
    running_agent.start()
    running_agent.wait_for(r"Activity 'start_agent' succeeded")
    time.sleep(3)
    after = admin.json("get", "pod", "steady", "-n", namespace)
    assert statuses(after)["main"]["containerID"] == before and statuses(after)["main"]["restartCount"] == 0

