"""``hostUsers: false`` end to end: pods in user namespaces of their own on a runtime that supports them.

The stack's containerd 1.6 cannot (its Status lists no runtime handlers): there the pod is refused with upstream's
message (tests/e2e/test_security_context.py, and `test_the_same_pod_is_refused_on_the_stacks_containerd` below). So
this module starts a PRIVATE containerd 2.x (devstack/build-runtime.sh, ``make runtime``; started, stopped and
cleaned up by devstack/private_containerd.py exactly as ``make userns-smoke``) and a kopflet agent for the stack's
node on it (``--container-runtime-endpoint=unix://<private socket>``, its own ``--root-dir`` under the private
runtime's directory). Upstream's behaviour checked: the user namespace manager (pkg/kubelet/userns) gives each pod
65536 host IDs of its own from ``[65536, 2^32)`` (no ``kubelet`` user here), recorded in
``<root-dir>/pods/<uid>/userns``; RunPodSandbox gets mode POD with that mapping; every mount carries it
(applyPlatformSpecificContainerConfig), so the pod's root reads its Secret and writes its emptyDir; the range is
released when the pod goes.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cri_client.proto import api_pb2 as pb
from devstack import private_containerd
from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_hostile_input import wait_event
from tests.e2e.test_pod_lifecycle import container, is_ready, pod_manifest, wait_pod

PRIVATE_DIR = Path("/tmp/kopflet-e2e-userns")  # short: the containerd socket path lives under it
IDS_PER_POD = 65536
NO_USERNS = "can't set `spec.hostUsers: false`, runtime does not support user namespaces"
SECRET_VALUE = "s3cret-for-userns"


@pytest.fixture(scope="module")
def private_runtime() -> Iterator[private_containerd.PrivateRuntime]:
    """containerd 2.x + runc from `make runtime` (built here if missing), private to this module; everything it ran
    or left (pods, mounts, cgroups, bridge, directory) is removed afterwards, also when a test failed."""
    with private_containerd.private_containerd(PRIVATE_DIR, private_containerd.build_runtime()) as runtime:
        yield runtime


def agent_root(runtime: private_containerd.PrivateRuntime) -> Path:
    """The agent's --root-dir: under the private runtime's directory, so its clean-up unmounts the pods' volumes."""
    return runtime.dir / "kubelet"


@pytest.fixture
def userns_agent(layout: Layout, tmp_path: Path,
                 private_runtime: private_containerd.PrivateRuntime) -> Iterator[Agent]:
    """A kopflet agent for the stack's node on the private runtime; it must never crash while syncing."""
    args = (f"--container-runtime-endpoint={private_runtime.endpoint} "
            f"--image-service-endpoint={private_runtime.endpoint} --root-dir={agent_root(private_runtime)}")
    agent = Agent(layout, tmp_path / "agent.log", env={"KOPFLET_ARGS": args})
    agent.start()
    try:
        agent.wait_for(r"Activity 'start_agent' succeeded")
        yield agent
    finally:
        if agent.proc is not None and agent.proc.poll() is None:
            agent.stop()
    crashes = [line for line in agent.output().splitlines() if "sync crashed" in line or "Traceback" in line]
    assert not crashes, "the agent crashed while syncing:\n" + "\n".join(crashes)


def create_userns_pod(admin: Kubectl, layout: Layout, namespace: str, name: str) -> None:
    """A ``hostUsers: false`` pod with an emptyDir and a Secret volume (the Secret created first)."""
    secret = f"{name}-secret"
    admin.apply(json.dumps({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret, "namespace": namespace},
                            "data": {"token": base64.b64encode(SECRET_VALUE.encode()).decode()}}))
    admin.apply(pod_manifest(
        name, namespace, layout.node_name,
        [container("main", "sleep 3600", volumeMounts=[{"name": "data", "mountPath": "/data"},
                                                       {"name": "secret", "mountPath": "/secret"}])],
        hostUsers=False, volumes=[{"name": "data", "emptyDir": {}},
                                  {"name": "secret", "secret": {"secretName": secret}}]))


def userns_pod(admin: Kubectl, layout: Layout, namespace: str, name: str) -> dict[str, Any]:
    """`create_userns_pod`, Ready; its API object."""
    create_userns_pod(admin, layout, namespace, name)
    return wait_pod(admin, namespace, name, is_ready, timeout=180, what="Ready")


def exec_in(admin: Kubectl, namespace: str, name: str, *command: str) -> str:
    return admin.run("exec", "-n", namespace, name, "-c", "main", "--", *command).stdout


def uid_map(admin: Kubectl, namespace: str, name: str) -> list[int]:
    return [int(f) for f in exec_in(admin, namespace, name, "cat", "/proc/self/uid_map").split()]


def host_pid(runtime: private_containerd.PrivateRuntime, pod_uid: str) -> int:
    """The pod's main container's process on the host (the runtime's verbose container status)."""
    rt = runtime.runtime
    found = rt.ListContainers(pb.ListContainersRequest(filter=pb.ContainerFilter(
        state=pb.ContainerStateValue(state=pb.CONTAINER_RUNNING),
        label_selector={"io.kubernetes.pod.uid": pod_uid, "io.kubernetes.container.name": "main"})),
        timeout=30).containers
    assert len(found) == 1, found
    status = rt.ContainerStatus(pb.ContainerStatusRequest(container_id=found[0].id, verbose=True), timeout=30)
    return int(json.loads(status.info["info"])["pid"])


def userns_file(runtime: private_containerd.PrivateRuntime, pod_uid: str) -> Path:
    return agent_root(runtime) / "pods" / pod_uid / "userns"


def test_a_pod_runs_in_its_own_user_namespace(userns_agent: Agent, admin: Kubectl, layout: Layout, namespace: str,
                                              private_runtime: private_containerd.PrivateRuntime) -> None:
    pod = userns_pod(admin, layout, namespace, "userns")
    uid = pod["metadata"]["uid"]
    inside, first, length = uid_map(admin, namespace, "userns")
    assert (inside, length) == (0, IDS_PER_POD)
    assert first >= IDS_PER_POD and first % IDS_PER_POD == 0  # never the host's root range
    # What upstream persists, read back on a restart.
    mapping = {"hostId": first, "containerId": 0, "length": IDS_PER_POD}
    assert json.loads(userns_file(private_runtime, uid).read_text()) == {"uidMappings": [mapping],
                                                                          "gidMappings": [mapping]}
    # On the host, the container's root is that high UID.
    assert Path(f"/proc/{host_pid(private_runtime, uid)}").stat().st_uid == first
    # Its volumes are idmapped: it reads its Secret (root-owned files) and writes its emptyDir, as its root.
    assert exec_in(admin, namespace, "userns", "cat", "/secret/token") == SECRET_VALUE
    exec_in(admin, namespace, "userns", "sh", "-c", "echo written > /data/file")
    assert exec_in(admin, namespace, "userns", "cat", "/data/file") == "written\n"
    written = agent_root(private_runtime) / "pods" / uid / "volumes" / "kubernetes.io~empty-dir" / "data" / "file"
    assert written.stat().st_uid == 0  # the idmapped mount writes the container's root as the host's 0
    assert exec_in(admin, namespace, "userns", "id", "-u") == "0\n"


def test_two_pods_get_disjoint_ranges_and_deleting_one_frees_it(
        userns_agent: Agent, admin: Kubectl, layout: Layout, namespace: str,
        private_runtime: private_containerd.PrivateRuntime) -> None:
    uids, ranges = [], []
    for name in ("userns-a", "userns-b"):
        uids.append(userns_pod(admin, layout, namespace, name)["metadata"]["uid"])
        ranges.append(uid_map(admin, namespace, name)[1])
    assert ranges[0] != ranges[1]  # slots of 65536: different starts are disjoint ranges
    assert all(userns_file(private_runtime, uid).exists() for uid in uids)

    admin.run("delete", "pod", "userns-a", "-n", namespace, "--wait=true", "--timeout=60s")
    deadline = time.monotonic() + 60
    while userns_file(private_runtime, uids[0]).exists():
        assert time.monotonic() < deadline, "the deleted pod's userns record was never removed"
        time.sleep(0.5)
    assert userns_file(private_runtime, uids[1]).exists()  # the other pod keeps its range
    assert uid_map(admin, namespace, "userns-b")[1] == ranges[1]


@pytest.fixture
def stack_agent(layout: Layout, tmp_path: Path) -> Iterator[Agent]:
    """An agent on the stack's own runtime (containerd 1.6), after the private runtime's agent has stopped."""
    agent = Agent(layout, tmp_path / "agent.log")
    agent.start()
    try:
        agent.wait_for(r"Activity 'start_agent' succeeded")
        yield agent
    finally:
        if agent.proc is not None and agent.proc.poll() is None:
            agent.stop()


def test_the_same_pod_is_refused_on_the_stacks_containerd(stack_agent: Agent, admin: Kubectl, layout: Layout,
                                                          namespace: str) -> None:
    """containerd 1.6 lists no runtime handlers: upstream's refusal, never the host's user namespace instead."""
    name = f"userns-{uuid.uuid4().hex[:6]}"
    create_userns_pod(admin, layout, namespace, name)
    event = wait_event(admin, namespace, name, "Warning", "FailedCreatePodSandBox", "hostUsers", timeout=60)
    assert event["message"] == f"Failed to create pod sandbox: {NO_USERNS}"
    pod = admin.json("get", "pod", name, "-n", namespace)
    assert pod["status"]["phase"] == "Pending"
    assert not (Path("/var/lib/kopflet/pods") / pod["metadata"]["uid"] / "userns").exists()  # no range taken
