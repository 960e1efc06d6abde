"""Standalone mode on the real stack: the `kopflet` command with no credentials at all runs a static pod in the
stack's containerd and serves it on its kubelet API, and never speaks to the apiserver (upstream's kubelet without
--kubeconfig: "Standalone mode, no API client").

The agent gets an empty HOME, no KUBECONFIG, no in-cluster variables and no KOPFLET_* (the stack's KOPFLET_CONFIG
included), a node name, ports and --root-dir of its own, webhook authentication off and authorization AlwaysAllow
(standalone refuses the webhooks: upstream's "no client provided ..."), anonymous requests on, and its API on
loopback only.

It runs on a private containerd (devstack/private_containerd.py, as the user namespace tests) without pod cgroups
(--cgroups-per-qos=false): a standalone agent knows no pods but its static ones, so its housekeeping removes every
other pod of its runtime, as upstream's standalone kubelet does on its node; the stack's containerd and kubepods
cgroups are not its to touch.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from cri_client import CriClient
from cri_client import types as cri
from devstack import private_containerd
from tests.conftest import REPO, Kubectl
from tests.e2e.test_static_pods import manifest

KOPFLET = str(Path(sys.executable).with_name("kopflet"))
PORT, HEALTHZ_PORT = 10450, 10448  # neither the stack agent's nor test_kopflet_command's
PRIVATE_DIR = Path("/tmp/kopflet-e2e-standalone")  # short: the containerd socket path lives under it


@pytest.fixture(scope="module")
def private_runtime() -> Iterator[private_containerd.PrivateRuntime]:
    """containerd 2.x from `make runtime`, private to this module and removed whole afterwards."""
    with private_containerd.private_containerd(PRIVATE_DIR, private_containerd.build_runtime()) as runtime:
        yield runtime


def runtime_containers(runtime: private_containerd.PrivateRuntime, pod_uid: str) -> list[cri.Container]:
    async def listing() -> list[cri.Container]:
        async with CriClient(runtime.endpoint) as client:
            return await client.containers.list(
                cri.ContainerFilter(label_selector={"io.kubernetes.pod.uid": pod_uid}))
    return asyncio.run(listing())
T = TypeVar("T")


def no_credentials_env(home: Path) -> dict[str, str]:
    """The test's environment without anything that names an apiserver: no KUBECONFIG, no in-cluster variables, no
    KOPFLET_* (KOPFLET_ARGS, the stack's KOPFLET_CONFIG) or NODE_NAME, and a HOME with no ~/.kube/config."""
    dropped = ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "NODE_NAME")
    env = {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith("KOPFLET_")}
    return {**env, "HOME": str(home)}


def api(path: str) -> tuple[int, str]:
    """GET on the standalone agent's kubelet API (its self-signed certificate; anonymous, AlwaysAllow)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{PORT}{path}", timeout=5, context=ctx) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def eventually(probe: Callable[[], T | None], timeout: float, what: str, log: Path) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"never {what}; the agent's log ends:\n{log.read_text(errors='replace')[-4000:]}")


@contextlib.contextmanager
def standalone_kopflet(runtime: private_containerd.PrivateRuntime, tmp_path: Path, node_name: str,
                       manifests: Path) -> Iterator[Path]:
    """`kopflet` standalone until it serves /healthz on HEALTHZ_PORT (its log's path yielded); it must stop cleanly."""
    home = tmp_path / "home"
    home.mkdir()
    root = Path(tempfile.mkdtemp(prefix="kopflet-sa-", dir=runtime.dir))  # the runtime's clean-up unmounts it
    log = tmp_path / "kopflet.log"
    try:
        with log.open("wb") as out:
            proc = subprocess.Popen(
                ["setpriv", "--pdeathsig", "KILL", "--", KOPFLET, f"--hostname-override={node_name}",
                 f"--container-runtime-endpoint={runtime.endpoint}", f"--image-service-endpoint={runtime.endpoint}",
                 f"--root-dir={root}", "--cgroups-per-qos=false", "--enforce-node-allocatable=none",
                 f"--pod-manifest-path={manifests}", "--address=127.0.0.1", f"--port={PORT}",
                 f"--healthz-port={HEALTHZ_PORT}", "--authentication-token-webhook=false",
                 "--authorization-mode=AlwaysAllow", "--anonymous-auth=true", "--file-check-frequency=5s"],
                cwd=REPO, env=no_credentials_env(home), stdout=out, stderr=subprocess.STDOUT)
            try:
                def healthy() -> bool:
                    assert proc.poll() is None, f"kopflet exited {proc.returncode}:\n{log.read_text()[-4000:]}"
                    try:
                        with urllib.request.urlopen(f"http://127.0.0.1:{HEALTHZ_PORT}/healthz", timeout=2) as resp:
                            return resp.status == 200
                    except OSError:
                        return False
                eventually(healthy, 90, "served /healthz", log)
                yield log
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    code = proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                    raise AssertionError("kopflet ignored SIGTERM for 30s") from None
                assert code == 0, log.read_text()[-4000:]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def listed_pod(name: str) -> dict[str, Any] | None:
    status, body = api("/pods")
    assert status == 200, body
    return next((p for p in json.loads(body)["items"] if p["metadata"]["name"] == name), None)


def not_found(admin: Kubectl, *args: str) -> bool:
    proc = admin.run("get", *args, check=False)
    return proc.returncode != 0 and "NotFound" in proc.stderr


def test_a_static_pod_runs_without_an_apiserver(admin: Kubectl, tmp_path: Path,
                                                private_runtime: private_containerd.PrivateRuntime) -> None:
    node_name = f"standalone-{uuid.uuid4().hex[:6]}"
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    name = "web"
    pod_name = f"{name}-{node_name}"  # a static pod is named after its node
    (manifests / f"{name}.yaml").write_text(manifest(name, "sleep 3600"))
    with standalone_kopflet(private_runtime, tmp_path, node_name, manifests) as log:
        text = log.read_text(errors="replace")
        assert "Standalone mode, no API client" in text
        assert "No API server defined - no node status update will be sent" in text

        # the static pod runs in containerd, and the kubelet API lists it
        listed = eventually(lambda: listed_pod(pod_name), 60, f"listed {pod_name} on /pods", log)
        uid = listed["metadata"]["uid"]
        assert listed["metadata"]["annotations"]["kubernetes.io/config.source"] == "file"

        def running() -> list[cri.Container]:
            return [c for c in runtime_containers(private_runtime, uid) if c.state == cri.ContainerState.RUNNING]
        eventually(running, 120, "ran the static pod's container", log)
        status, body = api("/runningpods/")
        assert status == 200 and uid in body, body
        status, body = api("/metrics")
        assert status == 200 and "kubelet_running_pods" in body
        status, body = api("/healthz")
        assert (status, body) == (200, "ok")

        # nothing in the apiserver: no Node, no Lease, no mirror pod
        assert not_found(admin, "node", node_name)
        assert not_found(admin, "lease", node_name, "-n", "kube-node-lease")
        assert not_found(admin, "pod", pod_name, "-n", "default")

        # the manifest removed: the pod is stopped and gone from the runtime and the API's /pods
        (manifests / f"{name}.yaml").unlink()
        eventually(lambda: not runtime_containers(private_runtime, uid), 60, "removed the static pod's containers", log)
        eventually(lambda: listed_pod(pod_name) is None, 30, f"dropped {pod_name} from /pods", log)
        assert not_found(admin, "node", node_name)
    crashes = [line for line in log.read_text(errors="replace").splitlines()
               if "sync crashed" in line or "Traceback" in line]
    assert not crashes, "the agent crashed:\n" + "\n".join(crashes)


def test_webhooks_are_refused_without_credentials(tmp_path: Path) -> None:
    """kopflet's defaults are both webhooks; with no client upstream refuses them, and so does the command."""
    home = tmp_path / "home"
    home.mkdir()
    proc = subprocess.run([KOPFLET, "--hostname-override=standalone-refused", f"--pod-manifest-path={tmp_path}"],
                          env=no_credentials_env(home), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr == "kopflet: failed to run Kubelet: no client provided, cannot use webhook authentication\n"
