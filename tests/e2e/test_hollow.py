"""Hollow nodes on the real stack: ``kopflet hollow --nodes 3`` runs three whole kopflet nodes in one process over
simulated runtimes. Each gets its own ``system:node:<name>`` certificate through TLS bootstrap (the stack's bootstrap
token), registers its Node (Ready), renews its Lease, and runs the pods bound to it (Running and Ready, with a
readiness probe the agent runs through the simulated runtime) and removes a deleted one.

The Nodes are deleted at the end: the other modules expect the stack's one node.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack.layout import Layout
from tests.conftest import REPO, Kubectl
from tests.e2e.conftest import terminate
from tests.e2e.test_tls_bootstrap import bootstrap_token, certificate_info, lease_renewed_after  # noqa: F401

NODES = 3
START_TIMEOUT = 180.0
BUSYBOX = "registry.k8s.io/e2e-test-images/busybox:1.37.0-2"


def free_ports(count: int) -> int:
    """A base port with `count` free ports after it (each node serves the kubelet API on its own)."""
    for base in range(21250, 30000, 97):
        with contextlib.ExitStack() as stack:
            try:
                for port in range(base, base + count):
                    s = stack.enter_context(socket.socket())
                    s.bind(("0.0.0.0", port))
            except OSError:
                continue
            return base
    raise AssertionError("no free ports")


class Hollow:
    def __init__(self, layout: Layout, tmp_path: Path) -> None:
        self.prefix = f"hollow-{uuid.uuid4().hex[:6]}-"
        self.names = [f"{self.prefix}{i}" for i in range(NODES)]
        # short: the nodes' unix sockets lie below it (108 bytes at most)
        self.state = Path(tempfile.mkdtemp(prefix="hollow-", dir="/tmp"))
        self.log = tmp_path / "hollow.log"
        self.port_base = free_ports(NODES)
        argv = [sys.executable, "-m", "handlers.cli", "hollow", f"--nodes={NODES}", f"--name-prefix={self.prefix}",
                f"--state-dir={self.state}", f"--port-base={self.port_base}",
                f"--bootstrap-kubeconfig={layout.bootstrap_kubeconfig}", "-v=2",
                # the kubelet API as the stack's node serves it: a CA-signed serving certificate (here through
                # serverTLSBootstrap: the apiserver checks it), client certificates and webhook authorization
                "--rotate-server-certificates", f"--client-ca-file={layout.pki / 'ca.crt'}", "--anonymous-auth=false",
                "--authentication-token-webhook", "--authorization-mode=Webhook"]
        env = {**os.environ, "PYTHONPATH": str(REPO), "KUBECONFIG": str(tmp_path / "no-such-file")}
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(["setpriv", "--pdeathsig", "KILL", "--", *argv], cwd=REPO, env=env,
                                         stdout=out, stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self, timeout: float = 60.0) -> int:
        return terminate(self.proc, timeout, "kopflet hollow")


@pytest.fixture
def hollow(layout: Layout, admin: Kubectl, tmp_path: Path, bootstrap_token: str) -> Iterator[Hollow]:  # noqa: F811
    h = Hollow(layout, tmp_path)
    try:
        yield h
    finally:
        code = h.stop()
        for name in h.names:  # no NotReady nodes left behind (their Leases go with them: owned by the Node)
            admin.run("delete", "node", name, "--ignore-not-found", "--wait=false", check=False)
        shutil.rmtree(h.state, ignore_errors=True)
        assert code == 0, f"kopflet hollow exited {code}; its log ends:\n{h.output()[-4000:]}"
    crashes = [line for line in h.output().splitlines() if "sync crashed" in line or "Traceback" in line]
    assert not crashes, "a hollow node crashed:\n" + "\n".join(crashes)


def ready(node: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions", []))


def wait_until(what: str, check: object, hollow: Hollow, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        assert hollow.proc.poll() is None, f"kopflet hollow exited; its log ends:\n{hollow.output()[-4000:]}"
        time.sleep(1)
    raise AssertionError(f"{what} within {timeout:.0f}s; the log ends:\n{hollow.output()[-4000:]}")


def pod(name: str, namespace: str, node: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
                       "spec": {"nodeName": node, "automountServiceAccountToken": False,
                                "terminationGracePeriodSeconds": 1,
                                "containers": [{"name": "c", "image": BUSYBOX, "command": ["sleep", "3600"],
                                                "readinessProbe": {"exec": {"command": ["true"]},
                                                                   "periodSeconds": 1}}]}})


def test_hollow_nodes_register_heartbeat_and_run_pods(hollow: Hollow, admin: Kubectl, namespace: str) -> None:
    def nodes() -> dict[str, dict]:
        return {n["metadata"]["name"]: n for n in admin.json("get", "nodes")["items"]
                if n["metadata"]["name"] in hollow.names}

    wait_until("three Ready hollow nodes", lambda: len(nodes()) == NODES and all(map(ready, nodes().values())),
               hollow, START_TIMEOUT)
    seen = nodes()
    for index, name in enumerate(hollow.names):
        node = seen[name]
        assert node["status"]["nodeInfo"]["containerRuntimeVersion"] == "hollow://0.1.0"
        assert node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == hollow.port_base + index
        # its own identity: a client certificate for system:node:<name>, obtained through TLS bootstrap
        pki = hollow.state / name / "pki" / "kubelet-client-current.pem"
        info = certificate_info(pki.read_bytes())
        assert (info.common_name, info.organizations) == (f"system:node:{name}", ("system:nodes",))
    assert len({n["status"]["nodeInfo"]["machineID"] for n in seen.values()}) == NODES

    # each node's kubelet-serving request, approved as an admin would (nobody else does), then its API through the
    # apiserver
    def serving_requests() -> list[str]:
        return [c["metadata"]["name"] for c in admin.json("get", "csr")["items"]
                if c["spec"]["signerName"] == "kubernetes.io/kubelet-serving"
                and c["spec"]["username"] in {f"system:node:{n}" for n in hollow.names}
                and not (c.get("status") or {}).get("conditions")]

    wait_until("a kubelet-serving request from every node", lambda: len(serving_requests()) == NODES, hollow, 60)
    for name in serving_requests():
        admin.run("certificate", "approve", name)
    for name in hollow.names:
        wait_until(f"{name}'s kubelet API through the apiserver",
                   lambda name=name: admin.raw(f"/api/v1/nodes/{name}/proxy/healthz", check=False).stdout == "ok",
                   hollow, 60)

    moment = time.time()
    for name in hollow.names:  # every node heartbeats (the Lease renewed every 10 s)
        lease_renewed_after(admin, name, moment)

    for index, name in enumerate(hollow.names):
        admin.apply(pod(f"p{index}", namespace, name))

    def running_and_ready() -> bool:
        pods = admin.json("get", "pods", "-n", namespace)["items"]
        return len(pods) == NODES and all(
            p["status"].get("phase") == "Running"
            and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
            for p in pods)

    wait_until("every hollow node's pod Running and Ready", running_and_ready, hollow, 90)
    for index, name in enumerate(hollow.names):
        status = admin.json("get", "pod", f"p{index}", "-n", namespace)
        assert status["spec"]["nodeName"] == name
        assert status["status"]["podIP"].startswith(f"10.224.{index}.")  # the node's own /24
        assert status["status"]["containerStatuses"][0]["ready"]
        # <runtime name>://<id>, the name CRI Version gives (upstream's runtimeName)
        assert status["status"]["containerStatuses"][0]["containerID"].startswith("hollow://")

    assert admin.run("logs", "p2", "-n", namespace).stdout == ""  # the node's log file: nothing printed
    explained = admin.raw(f"/api/v1/nodes/{hollow.names[2]}/proxy/debug/pods/{namespace}/p2?format=text").stdout
    assert "[create]" in explained  # kopflet explain's decisions, from the node that made them

    admin.run("delete", "pod", "p1", "-n", namespace, "--wait=false")
    wait_until("the deleted pod gone", lambda: admin.run("get", "pod", "p1", "-n", namespace,
                                                         check=False).returncode != 0, hollow, 60)
    others = admin.json("get", "pods", "-n", namespace)["items"]
    assert sorted(p["metadata"]["name"] for p in others) == ["p0", "p2"]
    assert all(p["status"]["phase"] == "Running" for p in others)

    renewed = datetime.datetime.now(datetime.UTC).timestamp()
    lease_renewed_after(admin, hollow.names[0], renewed)  # still heartbeating after the pod work
