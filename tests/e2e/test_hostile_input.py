"""Hostile input end to end: pods a careless or malicious user could write, each answered with what the upstream
kubelet would show (a container's waiting reason and message, or a rejection, and the event), while the agent keeps
serving everyone else.

One agent for the module. The corpus table (`CORPUS`) names, per bad pod, the outcome and the upstream source of the
text; separate tests cover what a table row cannot (raw log bytes, pod-name limits, static-pod files, a secret's
file mode). The last test checks that a plain pod still becomes Ready and the agent is alive; the `running_agent`
fixture fails the module if the agent logged a Traceback.

Resource rejections already covered by test_admission.py (cpu: "64" -> OutOfcpu, memory: 100Ti -> OutOfmemory, with
their messages) are not repeated; this module adds ephemeral-storage and the first-failure order.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import shutil
import stat
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_pod_lifecycle import (
    BUSYBOX,
    container,
    events,
    is_ready,
    phase,
    pod_manifest,
    runtime_sandboxes,
    statuses,
    wait_gone,
    wait_pod,
)

ROOT_DIR = Path("/var/lib/kopflet")
# The module's agent also watches a static-pod directory (created by the `manifests` fixture; a missing directory
# simply has no manifests), so the static-pod case needs no second agent fighting this one over the node's pods.
MANIFESTS = Path(tempfile.gettempdir()) / f"kopflet-e2e-hostile-{uuid.uuid4().hex[:8]}"
AGENT_ARGS = f"--pod-manifest-path={MANIFESTS}"

SECRET_VALUES: list[str] = []
"""Secret values created by this module: none may ever show in the agent's log."""

HEX64 = "0123456789abcdef" * 4
NO_SUCH_IMAGE = "docker.io/library/kopflet-no-such-image:0"
ENV_VALUE_BYTES = 120 * 1024  # one "NAME=value" string must stay under the kernel's MAX_ARG_STRLEN (128 KiB)
ARGS = ["hostile"] + [f"{i:04d}" + "a" * 96 for i in range(1000)]  # $0 and 1000 arguments of 100 bytes: 100 KiB


def image_name_message(image: str, cause: str) -> str:
    """Upstream image_manager.go:185 wrapping parsers.go:35 (both %q: these images need no escaping)."""
    return f'Failed to apply default image tag "{image}": couldn\'t parse image name "{image}": {cause}'


@dataclasses.dataclass(frozen=True)
class Case:
    """One bad pod and what the user must see. `{ns}` in texts is the test's namespace."""

    id: str
    containers: list[dict[str, Any]]
    waiting: tuple[str, ...] = ()
    """The container's waiting reason must become one of these (two for reasons that alternate)."""
    message: str = ""
    """The waiting message, exactly (or the pod's status.message prefix with `rejected`)."""
    rejected: str = ""
    """Admission: the pod ends Failed with this status.reason."""
    event: tuple[str, str, str] | None = None
    """(type, reason, message fragment) of an event the pod must get."""
    absent_event: str = ""
    """An event reason the pod must not get (no runtime call: no Pulling)."""
    log: str = ""
    """The container runs and is Ready, and its log's first line is this."""
    crashes: bool = False
    """The container starts but cannot run its process: never Ready, a non-zero exit or a start-error reason."""
    setup: Callable[[Kubectl, str], None] | None = None
    source: str = ""
    """Where upstream's text comes from (for the reader; pkg/kubelet/... of kubernetes v1.37.1)."""


def _configmap_and_secret(admin: Kubectl, namespace: str) -> None:
    value = f"hostile-{uuid.uuid4().hex}"
    SECRET_VALUES.append(value)
    admin.run("create", "configmap", "settings", "-n", namespace, "--from-literal=present=yes")
    admin.run("create", "secret", "generic", "creds", "-n", namespace, f"--from-literal=present={value}")


def _env_ref(kind: str, name: str, key: str) -> list[dict[str, Any]]:
    return [{"name": "REF", "valueFrom": {kind: {"name": name, "key": key}}}]


def _image(image: str) -> list[dict[str, Any]]:
    return [container("main", "sleep 3600", image=image)]


def _invalid_image(case_id: str, image: str, cause: str) -> Case:
    message = image_name_message(image, cause)
    return Case(case_id, _image(image), waiting=("InvalidImageName",), message=message,
                event=("Warning", "InspectFailed", message), absent_event="Pulling",
                source="images/image_manager.go:182-188 (applyDefaultImageTag, events.FailedToInspectImage), "
                       "images/types.go:41 (ErrInvalidImageName), util/parsers/parsers.go:35")


def _config_error(case_id: str, env: dict[str, Any], message: str, source: str) -> Case:
    return Case(case_id, [container("main", "sleep 3600", **env)], waiting=("CreateContainerConfigError",),
                message=message, event=("Warning", "Failed", f"Error: {message}"), setup=_configmap_and_secret,
                source=f"{source}; kuberuntime/kuberuntime_container.go:255-261 (ErrCreateContainerConfig, "
                       "event Failed 'Error: <message>')")


def _resources(requests: dict[str, str]) -> list[dict[str, Any]]:
    return [container("main", "sleep 3600", resources={"requests": requests})]


CORPUS: list[Case] = [
    # ---- image references (kopflet.images.imageref mirrors distribution/reference v0.6.0 ParseNormalizedNamed)
    _invalid_image("image-uppercase-repo-and-colons", "Bad:Image:Name",
                   "invalid reference format: repository name (library/Bad) must be lowercase"),
    _invalid_image("image-uppercase-path", "docker.io/library/BusyBox:1.36",
                   "invalid reference format: repository name (library/BusyBox) must be lowercase"),
    _invalid_image("image-short-digest", "busybox@sha256:short", "invalid reference format"),
    _invalid_image("image-trailing-colon", "busybox:", "invalid reference format"),
    _invalid_image("image-double-slash", "docker.io//busybox", "invalid reference format"),
    _invalid_image("image-digest-length", "busybox@sha256:" + "0" * 32, "invalid checksum digest length"),
    _invalid_image("image-64-hex-name", HEX64,
                   f"invalid repository name ({HEX64}), cannot specify 64-byte hexadecimal strings"),
    _invalid_image("image-name-too-long", "r" * 300, "repository name must not be more than 255 characters"),
    # An upper-case first component is a registry host to upstream (splitDockerDomain): valid, so the pull fails.
    Case("image-uppercase-registry-is-pulled", _image("UPPER/case"), waiting=("ErrImagePull", "ImagePullBackOff"),
         event=("Warning", "Failed", 'Failed to pull image "UPPER/case"'),
         source="images/image_manager.go:369 (events.FailedToPullImage), images/types.go:29,35"),
    Case("image-does-not-exist", _image(NO_SUCH_IMAGE), waiting=("ErrImagePull", "ImagePullBackOff"),
         event=("Warning", "Failed", f'Failed to pull image "{NO_SUCH_IMAGE}"'),
         source="images/image_manager.go:345 ('Back-off pulling image %q'), :369; images/types.go:29,35"),
    # ---- huge but legal: these run
    Case("env-2000-variables", [container(
        "main", "echo $HOSTILE_0000 $HOSTILE_1999; sleep 3600",
        env=[{"name": f"HOSTILE_{i:04d}", "value": f"v{i}"} for i in range(2000)])], log="v0 v1999"),
    Case("env-120KiB-value", [container("main", "echo ${#BIG}; sleep 3600",
                                        env=[{"name": "BIG", "value": "x" * ENV_VALUE_BYTES}])],
         log=str(ENV_VALUE_BYTES)),
    Case("args-100KiB", [container("main", "echo $# $0; sleep 3600", args=ARGS)], log=f"{len(ARGS) - 1} hostile"),
    # Over the kernel's per-string limit: the API takes it, the kubelet creates the container, execve(2) refuses it
    # (E2BIG) inside the runtime. The exact reason is the runtime's (runc 1.1: the init exits 1), not the kubelet's.
    Case("env-256KiB-value-over-execve-limit", [container(
        "main", "sleep 3600", env=[{"name": "HUGE", "value": "y" * (256 * 1024)}])], crashes=True),
    # ---- references to what is not there (kubelet_pods.go makeEnvironmentVariables)
    _config_error("configmap-key-missing", {"env": _env_ref("configMapKeyRef", "settings", "missing")},
                  "couldn't find key missing in ConfigMap {ns}/settings", "kubelet_pods.go:917"),
    _config_error("configmap-missing", {"env": _env_ref("configMapKeyRef", "absent", "key")},
                  'configmap "absent" not found',
                  "kubelet_pods.go:902-908; util/manager/watch_based_manager.go:336 with "
                  'configmap/configmap_manager.go:158 (Resource("configmap"))'),
    _config_error("secret-key-missing", {"env": _env_ref("secretKeyRef", "creds", "missing")},
                  "couldn't find key missing in Secret {ns}/creds", "kubelet_pods.go:944"),
    _config_error("secret-missing", {"env": _env_ref("secretKeyRef", "absent", "key")},
                  'secret "absent" not found',
                  "kubelet_pods.go:929-935; util/manager/watch_based_manager.go:336 with "
                  'secret/secret_manager.go:159 (Resource("secret"))'),
    _config_error("envfrom-configmap-missing", {"envFrom": [{"configMapRef": {"name": "absent", "optional": False}}]},
                  'configmap "absent" not found', "kubelet_pods.go:808-815"),
    _config_error("envfrom-secret-missing", {"envFrom": [{"secretRef": {"name": "absent"}}]},
                  'secret "absent" not found', "kubelet_pods.go:836-843"),
    # ---- impossible resources (cpu and memory alone: test_admission.py::test_rejections)
    Case("ephemeral-storage-100Ti", _resources({"ephemeral-storage": "100Ti"}), rejected="OutOfephemeral-storage",
         message="Pod was rejected: Node didn't have enough resource: ephemeral-storage, "
                 "requested: 109951162777600, used: ",
         event=("Warning", "OutOfephemeral-storage", "Node didn't have enough resource: ephemeral-storage, "),
         source="lifecycle/predicate.go:87,224-231,397; kubelet.go:2640-2647 (rejectPod)"),
    Case("cpu-and-memory-first-failure-wins", _resources({"cpu": "1000", "memory": "100Ti"}), rejected="OutOfcpu",
         message="Pod was rejected: Node didn't have enough resource: cpu, requested: 1000000, used: ",
         event=("Warning", "OutOfcpu", "Node didn't have enough resource: cpu, requested: 1000000, used: "),
         source="scheduler/framework/plugins/noderesources/fit.go:734-756 (cpu before memory); "
                "lifecycle/predicate.go:211-231 (reasons[0])"),
]


def create(admin: Kubectl, manifest: str) -> None:
    """`kubectl create`, not apply: apply would copy a huge manifest into an annotation (256 KiB at most)."""
    admin.run("create", "-f", "-", stdin=manifest)


def waiting_of(pod: dict[str, Any]) -> dict[str, Any]:
    return statuses(pod).get("main", {}).get("state", {}).get("waiting") or {}


def wait_event(admin: Kubectl, namespace: str, name: str, type_: str, reason: str, fragment: str,
               timeout: float = 30.0) -> dict[str, Any]:
    """Events are posted after the status; wait for the one wanted."""
    deadline = time.monotonic() + timeout
    seen: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        seen = events(admin, namespace, name)
        found = next((e for e in seen if e["type"] == type_ and e["reason"] == reason
                      and fragment in e.get("message", "")), None)
        if found is not None:
            return found
        time.sleep(0.5)
    raise AssertionError(f"no {type_} {reason} event with {fragment!r} for {namespace}/{name}; saw "
                         f"{[(e['type'], e['reason'], e.get('message', '')[:200]) for e in seen]}")


def first_log_line(admin: Kubectl, namespace: str, name: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc = admin.run("logs", name, "-n", namespace, check=False)
        if proc.returncode == 0 and proc.stdout.strip():
            return proc.stdout.splitlines()[0]
        time.sleep(0.5)
    raise AssertionError(f"pod {namespace}/{name} logged nothing")


def crashed(pod: dict[str, Any]) -> bool:
    """The container is down now after a failed start: terminated non-zero, or waiting to be restarted.

    Not a failed ``lastState`` alone: between a crash-loop restart and runc's failed execve the new instance is
    running, and a running container without a readiness probe is Ready, upstream too (prober_manager.go
    UpdatePodStatus), so that moment says nothing about how a failure is reported.
    """
    state = statuses(pod).get("main", {}).get("state", {})
    if "terminated" in state:
        return state["terminated"].get("exitCode") not in (None, 0)
    return (state.get("waiting") or {}).get("reason") in ("CrashLoopBackOff", "RunContainerError", "StartError")


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CORPUS])
def test_corpus(running_agent: Agent, admin: Kubectl, layout: Layout, namespace: str, case: Case) -> None:
    if case.setup is not None:
        case.setup(admin, namespace)
    name = case.id.lower()  # a DNS subdomain
    create(admin, pod_manifest(name, namespace, layout.node_name, case.containers))
    message = case.message.replace("{ns}", namespace)

    if case.rejected:
        pod = wait_pod(admin, namespace, name, phase("Failed"), timeout=60, what=f"rejected with {case.rejected}")
        assert pod["status"]["reason"] == case.rejected
        assert pod["status"]["message"].startswith(message), pod["status"]["message"]
        assert re.search(r", capacity: \d+$", pod["status"]["message"]), pod["status"]["message"]
        assert runtime_sandboxes(layout, pod["metadata"]["uid"]) == []  # never reached the runtime
    elif case.waiting:
        pod = wait_pod(admin, namespace, name, lambda p: waiting_of(p).get("reason") in case.waiting, timeout=90,
                       what=f"waiting with {'/'.join(case.waiting)}")
        assert pod["status"]["phase"] == "Pending"
        if message:
            assert waiting_of(pod)["message"] == message
    elif case.crashes:
        pod = wait_pod(admin, namespace, name, crashed, timeout=90, what="a failed start")
        assert not is_ready(pod)
        assert pod["status"]["phase"] in ("Pending", "Running"), pod["status"]  # restartPolicy Always: not final
    else:
        wait_pod(admin, namespace, name, is_ready, timeout=90, what="Ready")
        assert first_log_line(admin, namespace, name) == case.log

    if case.event is not None:
        type_, reason, fragment = case.event
        wait_event(admin, namespace, name, type_, reason, fragment.replace("{ns}", namespace))
    if case.absent_event:
        assert case.absent_event not in {e["reason"] for e in events(admin, namespace, name)}
    assert running_agent.proc is not None and running_agent.proc.poll() is None


# ------------------------------------------------------------------------------------------- raw log bytes


def test_non_utf8_log_bytes_come_back_as_written(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                 namespace: str) -> None:
    # Upstream keeps the bytes: the runtime writes them into the CRI log file, ReadLogs copies them through
    # (kuberuntime/logs/logs.go), and neither the apiserver nor kubectl decodes them.
    create(admin, pod_manifest("binary-log", namespace, layout.node_name,
                               [container("main", r"printf '\377\376 bad \200\n'; sleep 3600")]))
    wait_pod(admin, namespace, "binary-log", is_ready, what="Ready")
    argv = [str(admin.binary), f"--kubeconfig={admin.kubeconfig}", "logs", "binary-log", "-n", namespace]
    deadline = time.monotonic() + 30
    out = b""
    while time.monotonic() < deadline and not out:
        out = subprocess.run(argv, capture_output=True, timeout=60).stdout
        time.sleep(0.5)
    assert out == b"\xff\xfe bad \x80\n"
    stamped = subprocess.run([*argv, "--timestamps"], capture_output=True, timeout=60, check=True).stdout
    assert stamped.endswith(b" \xff\xfe bad \x80\n")
    assert running_agent.proc is not None and running_agent.proc.poll() is None


# --------------------------------------------------------------------------------------- pod-name limits


def test_pod_name_at_253_characters_cannot_get_a_log_directory(running_agent: Agent, admin: Kubectl,
                                                               layout: Layout, namespace: str) -> None:
    # The apiserver takes a 253-character name, but upstream's log directory is one path component
    # "<namespace>_<name>_<uid>" (kuberuntime/helpers.go:223), longer than NAME_MAX (255): createPodSandbox fails
    # (kuberuntime_sandbox.go:52-56) and SyncPod reports FailedCreatePodSandBox (kuberuntime_manager.go:1752),
    # upstream's text being "Failed to create pod sandbox: mkdir /var/log/pods/...: file name too long".
    name = "n" * 253
    create(admin, pod_manifest(name, namespace, layout.node_name, [container("main", "sleep 3600")]))
    event = wait_event(admin, namespace, name, "Warning", "FailedCreatePodSandBox", "Failed to create pod sandbox: ",
                       timeout=60)
    assert "file name too long" in event["message"].lower(), event["message"]
    pod = admin.json("get", "pod", name, "-n", namespace)
    assert pod["status"]["phase"] == "Pending"
    assert waiting_of(pod).get("reason", "ContainerCreating") == "ContainerCreating"
    assert runtime_sandboxes(layout, pod["metadata"]["uid"]) == []


def test_longest_pod_name_that_fits_runs_with_a_truncated_hostname(running_agent: Agent, admin: Kubectl,
                                                                   layout: Layout, namespace: str) -> None:
    # The longest name whose log directory "<namespace>_<name>_<36-character uid>" fits in 255 bytes. Its hostname
    # is cut to 63 characters and then loses trailing '-' and '.' (kubelet_pods.go:573-588
    # truncatePodHostnameIfNeeded, from GeneratePodHostNameAndDomain :597-634).
    length = 255 - len(namespace) - 2 - 36
    name = "h" * 62 + "-" + "x" * (length - 63)
    create(admin, pod_manifest(name, namespace, layout.node_name,
                               [container("main", 'echo "$(hostname) $(cat /etc/hostname)"; sleep 3600')]))
    wait_pod(admin, namespace, name, is_ready, what="Ready")
    assert first_log_line(admin, namespace, name).split() == ["h" * 62, "h" * 62]


# ------------------------------------------------------------------------------------------- static pods


@pytest.fixture(scope="module")
def manifests() -> Iterator[Path]:
    MANIFESTS.mkdir(parents=True, exist_ok=True)
    try:
        yield MANIFESTS
    finally:
        shutil.rmtree(MANIFESTS, ignore_errors=True)


def test_malformed_static_pod_files_are_reported_and_the_valid_one_runs(running_agent: Agent, admin: Kubectl,
                                                                        layout: Layout, manifests: Path) -> None:
    name = f"hostile-static-{uuid.uuid4().hex[:6]}"
    mirror = f"{name}-{layout.node_name}"
    broken = {"garbage.yaml": b"kind: Pod\nmetadata: {name: [unclosed\n",
              "binary.json": b"\xff\xfe\x00 not text",
              "list.yaml": b"- apiVersion: v1\n- kind: Pod\n",
              "nameless.yaml": b"apiVersion: v1\nkind: Pod\nmetadata: {}\nspec: {containers: []}\n"}
    for file, data in broken.items():
        (manifests / file).write_bytes(data)
    (manifests / f"{name}.json").write_text(json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"terminationGracePeriodSeconds": 2,
                 "containers": [{"name": "main", "image": BUSYBOX, "command": ["sh", "-c", "sleep 3600"]}]}}))
    try:
        wait_pod(admin, "default", mirror, is_ready, timeout=90, what="a Ready mirror pod")
        for file in broken:
            running_agent.wait_for(rf"static pod manifest skipped: {re.escape(str(manifests / file))}: ", timeout=30)
        assert running_agent.proc is not None and running_agent.proc.poll() is None
    finally:
        for file in [*broken, f"{name}.json"]:
            (manifests / file).unlink(missing_ok=True)
        wait_gone(admin, "default", mirror, timeout=60)


# ---------------------------------------------------------------------------------------------- security


def test_secret_volume_file_is_0400_and_never_logged(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                     namespace: str) -> None:
    value = f"hostile-{uuid.uuid4().hex}"
    SECRET_VALUES.append(value)
    admin.run("create", "secret", "generic", "vault", "-n", namespace, f"--from-literal=token={value}")
    create(admin, pod_manifest(
        "vault", namespace, layout.node_name,
        [container("main", "sleep 3600", volumeMounts=[{"name": "sec", "mountPath": "/etc/sec", "readOnly": True}])],
        volumes=[{"name": "sec", "secret": {"secretName": "vault", "defaultMode": 0o400}}]))
    pod = wait_pod(admin, namespace, "vault", is_ready, what="Ready")
    # <root>/pods/<uid>/volumes/kubernetes.io~secret/<volume>/token -> ..data/token -> ..<timestamp>/token
    file = (ROOT_DIR / "pods" / pod["metadata"]["uid"] / "volumes" / "kubernetes.io~secret" / "sec" / "token").resolve()
    info = file.stat()
    assert stat.S_IMODE(info.st_mode) == 0o400, oct(info.st_mode)
    assert not info.st_mode & (stat.S_IRWXG | stat.S_IRWXO)
    assert file.read_text() == value  # the file checked is the secret's
    assert_no_secret_in_log(running_agent)


def assert_no_secret_in_log(agent: Agent) -> None:
    output = agent.output()
    for value in SECRET_VALUES:
        assert value not in output, "a secret's value is in the agent's log"
        assert base64.b64encode(value.encode()).decode() not in output, "a secret's data is in the agent's log"


# ------------------------------------------------------------------------------------------------ after all


def test_a_plain_pod_still_runs_after_the_corpus(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                 namespace: str) -> None:
    create(admin, pod_manifest("after-all", namespace, layout.node_name, [container("main", "sleep 3600")]))
    wait_pod(admin, namespace, "after-all", is_ready, timeout=60, what="Ready: nothing stalled")
    assert running_agent.proc is not None and running_agent.proc.poll() is None, "the agent died"
    assert_no_secret_in_log(running_agent)
