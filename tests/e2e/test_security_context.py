"""Pod security fields the agent refuses rather than ignores, and seccomp profiles from the agent's root dir, on the
real stack (containerd 1.6, runc, a kernel without AppArmor): what a user sees in the pod's status and events.

- ``hostUsers: false``: containerd 1.6's Status lists no runtime handlers, so none supports user namespaces; upstream's
  user namespace manager refuses the pod in NamespacesForPod (userns_manager.go:424-432), createPodSandbox reports it
  (kuberuntime_sandbox.go:44-48) and SyncPod posts FailedCreatePodSandBox (kuberuntime_manager.go:1752): the pod stays
  Pending, never on the runtime, never in the host's user namespace.
- AppArmor: upstream's admit handler (lifecycle/handlers.go:199-214, pkg/security/apparmor validate.go:51-58) rejects
  a pod asking for any profile but Unconfined on a host without AppArmor: Failed, reason AppArmor.
- seccomp ``Localhost``: the profile is ``<root-dir>/seccomp/<localhostProfile>`` (kuberuntime_manager.go:273,
  helpers.go:288-297); a missing file is the runtime's CreateContainer error, CreateContainerError.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_admission import rejected
from tests.e2e.test_hostile_input import wait_event, waiting_of
from tests.e2e.test_pod_lifecycle import container, is_ready, phase, pod_manifest, runtime_sandboxes, statuses, wait_pod

ROOT_DIR = Path("/var/lib/kopflet")  # the running agent's --root-dir (the default)
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
NO_APPARMOR = "Pod was rejected: Cannot enforce AppArmor: AppArmor is not enabled on the host"
NO_USERNS = "can't set `spec.hostUsers: false`, runtime does not support user namespaces"
# mkdir(2) and mkdirat(2) fail with EPERM (errno 1); everything else is allowed.
DENY_MKDIR = {"defaultAction": "SCMP_ACT_ALLOW",
              "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]}


def test_host_kernel_has_no_apparmor() -> None:
    """The premise of the AppArmor cases: this host's kernel has no AppArmor module."""
    assert not Path("/sys/module/apparmor/parameters/enabled").exists()


# ------------------------------------------------------------------------------------------- user namespaces


def test_host_users_false_never_runs(running_agent: Agent, admin: Kubectl, layout: Layout, namespace: str) -> None:
    admin.apply(pod_manifest("userns", namespace, layout.node_name, [container("main", "sleep 3600")],
                             hostUsers=False))
    event = wait_event(admin, namespace, "userns", "Warning", "FailedCreatePodSandBox", "hostUsers", timeout=60)
    assert event["message"] == f"Failed to create pod sandbox: {NO_USERNS}"
    pod = admin.json("get", "pod", "userns", "-n", namespace)
    assert pod["status"]["phase"] == "Pending"
    assert waiting_of(pod).get("reason", "ContainerCreating") == "ContainerCreating"
    assert runtime_sandboxes(layout, pod["metadata"]["uid"]) == []  # not in the host's user namespace either


def test_host_users_false_names_the_runtime_class_handler(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                          namespace: str) -> None:
    name = f"kopflet-runc-{namespace}"
    admin.apply(json.dumps({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name},
                            "handler": "runc"}))
    try:
        admin.apply(pod_manifest("userns-rc", namespace, layout.node_name, [container("main", "sleep 3600")],
                                 hostUsers=False, runtimeClassName=name))
        event = wait_event(admin, namespace, "userns-rc", "Warning", "FailedCreatePodSandBox", "hostUsers", timeout=60)
        assert event["message"] == ('Failed to create pod sandbox: can\'t set `spec.hostUsers: false`, RuntimeClass '
                                    'handler "runc" does not support user namespaces')
        uid = admin.json("get", "pod", "userns-rc", "-n", namespace)["metadata"]["uid"]
        assert runtime_sandboxes(layout, uid) == []
    finally:
        admin.run("delete", "runtimeclass", name, "--wait=false")


# ------------------------------------------------------------------------------------------------- AppArmor


@pytest.mark.parametrize(("name", "spec", "metadata"), [
    ("aa-pod-default", {"securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}}}, {}),
    ("aa-localhost", {"containers": [container("main", "sleep 3600", securityContext={
        "appArmorProfile": {"type": "Localhost", "localhostProfile": "k8s-apparmor-example-deny-write"}})]}, {}),
    ("aa-annotation", {}, {"annotations": {APPARMOR_ANNOTATION + "main": "runtime/default"}}),
], ids=["pod RuntimeDefault", "container Localhost", "beta annotation"])
def test_apparmor_profile_is_rejected_without_apparmor(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                       namespace: str, name: str, spec: dict[str, Any],
                                                       metadata: dict[str, Any]) -> None:
    containers = spec.get("containers", [container("main", "sleep 3600")])
    extra = {k: v for k, v in spec.items() if k != "containers"}
    body = json.loads(pod_manifest(name, namespace, layout.node_name, containers, **extra))
    body["metadata"].update(metadata)
    admin.apply(json.dumps(body))
    pod = rejected(admin, namespace, name, layout)
    assert (pod["status"]["reason"], pod["status"]["message"]) == ("AppArmor", NO_APPARMOR)
    event = wait_event(admin, namespace, name, "Warning", "AppArmor", "Cannot enforce AppArmor")
    assert event["message"] == NO_APPARMOR.removeprefix("Pod was rejected: ")


def test_apparmor_unconfined_runs_without_apparmor(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                   namespace: str) -> None:
    admin.apply(pod_manifest("aa-unconfined", namespace, layout.node_name, [container("main", "sleep 3600")],
                             securityContext={"appArmorProfile": {"type": "Unconfined"}}))
    wait_pod(admin, namespace, "aa-unconfined", is_ready, what="Ready")


# -------------------------------------------------------------------------------------------------- seccomp


@pytest.fixture
def deny_mkdir_profile() -> Iterator[str]:
    """A Localhost profile under the agent's <root-dir>/seccomp; its localhostProfile name."""
    name = f"kopflet-e2e-{uuid.uuid4().hex[:8]}/deny-mkdir.json"
    path = ROOT_DIR / "seccomp" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(DENY_MKDIR))
    try:
        yield name
    finally:
        path.unlink(missing_ok=True)
        path.parent.rmdir()


def mkdir_pod(name: str, namespace: str, node: str, security_context: dict[str, Any]) -> str:
    script = ("grep ^Seccomp: /proc/self/status | tr -s '\\t' ' ' > /dev/termination-log; "
              "mkdir /tmp/made 2>> /dev/termination-log")
    return pod_manifest(name, namespace, node, [container("main", script)], restartPolicy="Never",
                        securityContext=security_context)


def test_localhost_seccomp_profile_from_the_root_dir_is_applied(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                                namespace: str, deny_mkdir_profile: str) -> None:
    admin.apply(mkdir_pod("confined", namespace, layout.node_name,
                          {"seccompProfile": {"type": "Localhost", "localhostProfile": deny_mkdir_profile}}))
    pod = wait_pod(admin, namespace, "confined", phase("Failed"), what="Failed: mkdir refused")
    terminated = statuses(pod)["main"]["state"]["terminated"]
    assert terminated["exitCode"] == 1, terminated
    lines = terminated.get("message", "").splitlines()
    assert lines[0] == "Seccomp: 2" and "Operation not permitted" in lines[1], lines
    # The same pod without the profile makes its directory (Unconfined, the default without seccompDefault).
    admin.apply(mkdir_pod("free", namespace, layout.node_name, {}))
    pod = wait_pod(admin, namespace, "free", phase("Succeeded"), what="Succeeded")
    assert statuses(pod)["main"]["state"]["terminated"].get("message", "").splitlines() == ["Seccomp: 0"]


def test_missing_localhost_seccomp_profile_is_a_create_container_error(running_agent: Agent, admin: Kubectl,
                                                                       layout: Layout, namespace: str) -> None:
    missing = f"kopflet-e2e-missing-{uuid.uuid4().hex[:8]}.json"
    admin.apply(pod_manifest("unprofiled", namespace, layout.node_name, [container("main", "sleep 3600")],
                             securityContext={"seccompProfile": {"type": "Localhost", "localhostProfile": missing}}))
    pod = wait_pod(admin, namespace, "unprofiled",
                   lambda p: waiting_of(p).get("reason") == "CreateContainerError", what="CreateContainerError")
    message = waiting_of(pod).get("message", "")
    # containerd's own words, naming the path kopflet made of the name: upstream surfaces them as they are.
    assert str(ROOT_DIR / "seccomp" / missing) in message, message
    assert "no such file or directory" in message, message
    event = wait_event(admin, namespace, "unprofiled", "Warning", "Failed", "Error: ")
    assert str(ROOT_DIR / "seccomp" / missing) in event["message"]
    assert runtime_sandboxes(layout, pod["metadata"]["uid"])  # the sandbox runs: RuntimeDefault, not the pod's
