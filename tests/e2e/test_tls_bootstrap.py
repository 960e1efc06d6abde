"""TLS bootstrap, client and serving certificate rotation on the real stack: an agent given only the stack's bootstrap
token (``--bootstrap-kubeconfig``, as kubeadm's ``bootstrap-kubelet.conf``) gets its own ``system:node:<name>``
certificate through a CertificateSigningRequest the controller-manager approves (nodeclient) and signs, lays the
files out as upstream's kubelet does and runs pods; with ``--rotate-certificates`` and certificates signed for 3
minutes, it renews its certificate three times while it runs (selfnodeclient) and keeps working after the first one
has expired.

With ``serverTLSBootstrap`` the kubelet API's certificate comes from a ``kubernetes.io/kubelet-serving`` request,
which nobody approves but the test (as an admin would), and is renewed while ``kubectl exec`` streams stay open.

The controller-manager signs for a year; the rotation tests restart it with ``--cluster-signing-duration=3m`` for its
own length only (the upstream kubelet asks for no particular lifetime: no ``expirationSeconds``), then restarts it as
the stack runs it.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime
import json
import os
import re
import socket
import ssl
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devstack import processes, stack
from devstack.layout import Layout
from kopflet.certificate import csr, pem
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_lock_file import running_container, sleeper

SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
START_TIMEOUT = 180.0


@pytest.fixture(scope="module")
def bootstrap_token(layout: Layout, admin: Kubectl) -> str:
    """The stack's token, which the apiserver must accept for TLS bootstrap (--enable-bootstrap-token-auth, the
    bootstrap-token Secret and kubeadm's bindings, put in place by `python -m devstack up`)."""
    token = stack.bootstrap_token(layout)
    bootstrapper = Kubectl(layout.bin_dir / "kubectl", layout.bootstrap_kubeconfig)
    proc = bootstrapper.run("auth", "can-i", "create", "certificatesigningrequests.certificates.k8s.io", check=False)
    if proc.stdout.strip() != "yes":
        pytest.fail(f"the stack's bootstrap token cannot create CSRs ({proc.stdout.strip()} {proc.stderr.strip()}): "
                    f"the apiserver needs --enable-bootstrap-token-auth; restart the stack (python -m devstack down, "
                    f"then make test)", pytrace=False)
    return token


def bootstrap_agent(layout: Layout, tmp_path: Path, extra: str = "", log: str = "agent.log") -> Agent:
    """An agent with no credentials but the bootstrap kubeconfig: a fresh --kubeconfig path and --cert-dir, and no
    $KUBECONFIG to fall back on."""
    args = (f"--bootstrap-kubeconfig={layout.bootstrap_kubeconfig} --kubeconfig={tmp_path / 'kubelet.conf'} "
            f"--cert-dir={tmp_path / 'pki'} {extra}")
    return Agent(layout, tmp_path / log, env={"KOPFLET_ARGS": args, "KUBECONFIG": str(tmp_path / "no-such-file")})


def csrs(admin: Kubectl) -> dict[str, dict[str, Any]]:
    return {item["metadata"]["name"]: item for item in admin.json("get", "csr")["items"]}


def openssl(*args: str, stdin: bytes) -> bytes:
    return subprocess.run(["openssl", *args], input=stdin, capture_output=True, check=True, timeout=30).stdout


def certificate_info(data: bytes) -> pem.CertificateInfo:
    text = openssl("x509", "-noout", "-startdate", "-enddate", "-subject", "-nameopt", "RFC2253", "-ext",
                   "subjectAltName", stdin=data)
    return pem.parse_x509_text(text.decode())


def pair_files(cert_dir: Path) -> list[Path]:
    return sorted(p for p in cert_dir.glob("kubelet-client-2*.pem"))


def lease_renewed_after(admin: Kubectl, node: str, moment: float, timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        renew = admin.json("get", "lease", node, "-n", "kube-node-lease")["spec"]["renewTime"]
        if datetime.datetime.fromisoformat(renew.replace("Z", "+00:00")).timestamp() > moment:
            return
        time.sleep(1)
    raise AssertionError(f"the Lease was not renewed after {time.ctime(moment)}")


def approved_and_issued(item: dict[str, Any]) -> bool:
    conditions = {c["type"]: c for c in (item.get("status") or {}).get("conditions") or []}
    return "Approved" in conditions and bool((item.get("status") or {}).get("certificate"))


def test_an_agent_with_a_bootstrap_token_gets_its_certificate_and_runs_pods(
        admin: Kubectl, layout: Layout, namespace: str, tmp_path: Path, bootstrap_token: str) -> None:
    before = set(csrs(admin))
    kubeconfig, cert_dir = tmp_path / "kubelet.conf", tmp_path / "pki"
    agent = bootstrap_agent(layout, tmp_path)
    agent.start()
    try:
        agent.wait_for(r"Activity 'start_agent' succeeded", timeout=START_TIMEOUT)

        # The request, as upstream's bootstrap sends it: named by the digest of key, subject and usages, by the
        # bootstrap token's user, approved by the controller-manager (nodeclient) and signed.
        [name] = [n for n in csrs(admin) if n not in before and n.startswith("node-csr-")]
        request = csrs(admin)[name]
        token_id = bootstrap_token.split(".")[0]
        assert request["spec"]["username"] == f"system:bootstrap:{token_id}"
        assert "system:bootstrappers:kubeadm:default-node-token" in request["spec"]["groups"]
        assert request["spec"]["signerName"] == SIGNER
        assert request["spec"]["usages"] == ["digital signature", "client auth"]
        assert "expirationSeconds" not in request["spec"]
        assert approved_and_issued(request)
        assert next(c for c in request["status"]["conditions"] if c["type"] == "Approved")["reason"] == \
            "AutoApproved"

        # The files, as upstream's certificate store and writeKubeconfigFromBootstrapping lay them out.
        current = cert_dir / "kubelet-client-current.pem"
        [pair] = pair_files(cert_dir)
        assert re.fullmatch(r"kubelet-client-\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d\.pem", pair.name)
        assert current.is_symlink() and os.readlink(current) == str(pair)
        assert stat.S_IMODE(pair.stat().st_mode) == 0o600
        assert not (cert_dir / "kubelet-client.key.tmp").exists()
        data = pair.read_bytes()
        issued = base64.b64decode(request["status"]["certificate"])
        assert pem.certificates(data)[0].strip() == issued.decode().strip()
        info = certificate_info(data)
        assert (info.common_name, info.organizations) == (f"system:node:{layout.node_name}", ("system:nodes",))
        public_key = openssl("pkey", "-pubout", "-outform", "DER", stdin=pem.private_key(data).text.encode())
        assert name == csr.digested_name(public_key, csr.node_subject(layout.node_name), csr.client_usages(False))
        assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
        written = yaml.safe_load(kubeconfig.read_text())
        bootstrap = yaml.safe_load(layout.bootstrap_kubeconfig.read_text())
        assert written["clusters"][0]["cluster"] == {
            "server": bootstrap["clusters"][0]["cluster"]["server"],
            "certificate-authority": bootstrap["clusters"][0]["cluster"]["certificate-authority"]}
        assert written["users"][0]["user"] == {"client-certificate": str(current), "client-key": str(current)}
        assert "token" not in json.dumps(written)

        # The node works with it: heartbeats and a pod.
        lease_renewed_after(admin, layout.node_name, time.time())
        admin.apply(sleeper(layout, namespace))
        running_container(admin, namespace)
        assert agent.stop() == 0

        # A valid kubeconfig is kept: no new request on the next start.
        again = bootstrap_agent(layout, tmp_path, log="again.log")
        again.start()
        try:
            again.wait_for(r"exists and is valid, skipping bootstrap", timeout=START_TIMEOUT)
            again.wait_for(r"Activity 'start_agent' succeeded", timeout=START_TIMEOUT)
            assert [n for n in csrs(admin) if n not in before] == [name]
            assert pair_files(cert_dir) == [pair]
        finally:
            again.stop()
    finally:
        if agent.proc is not None and agent.proc.poll() is None:
            agent.stop()


@contextlib.contextmanager
def short_signing_duration(layout: Layout, duration: str) -> Iterator[None]:
    """The controller-manager signing for ``duration`` while the block runs (the last of a repeated flag wins), then
    as the stack runs it. Every certificate it signs meanwhile is that short: only this test's agent asks."""
    manager = next(c for c in stack.components(layout) if c.name == "kube-controller-manager")
    short = dataclasses.replace(manager, argv=[*manager.argv, f"--cluster-signing-duration={duration}"])
    processes.stop(manager.name, pids=layout.pids)
    try:
        processes.start(short.name, short.argv, pids=layout.pids, logs=layout.logs, healthy=short.healthy,
                        timeout=short.timeout)
        yield
    finally:
        processes.stop(manager.name, pids=layout.pids)
        processes.start(manager.name, manager.argv, pids=layout.pids, logs=layout.logs, healthy=manager.healthy,
                        timeout=manager.timeout)


def test_the_agent_rotates_its_certificate_while_it_runs(admin: Kubectl, layout: Layout, namespace: str,
                                                         tmp_path: Path, bootstrap_token: str) -> None:
    """Signed for 3 minutes (the signer backdates NotBefore by 5 minutes: 8 minutes in all), each certificate is
    renewed at 70-90% of that, 36 to 132 s after it was issued; the agent renews three times in a row while it runs,
    goes on past the first certificate's end with the renewed ones (its own client and Kopf's watch), and every
    renewal asks as the node itself."""
    before = set(csrs(admin))
    cert_dir = tmp_path / "pki"
    rotations = 3
    with short_signing_duration(layout, "3m"):
        agent = bootstrap_agent(layout, tmp_path, "--rotate-certificates")
        agent.start()
        try:
            agent.wait_for(r"Activity 'start_agent' succeeded", timeout=START_TIMEOUT)
            # With rotation on, the first certificate comes from the certificate manager (generateName csr-) with
            # the bootstrap token, as upstream's LoadClientConfig leaves it to the manager.
            [first_request] = [n for n in csrs(admin) if n not in before]
            assert first_request.startswith("csr-")
            assert csrs(admin)[first_request]["spec"]["username"] == f"system:bootstrap:{bootstrap_token[:6]}"
            [first] = pair_files(cert_dir)
            first_info = certificate_info(first.read_bytes())
            lifetime = first_info.not_after - first_info.not_before
            assert lifetime == pytest.approx(480, abs=5)

            # Renewed again and again, each at its jittered deadline (at most 90% of the lifetime after NotBefore).
            # The pair is on disk a moment before the agent says it rotated (it reads the new certificate first):
            # both are waited for.
            deadline = time.monotonic() + rotations * (0.9 * lifetime - 300) + 120

            def rotated() -> int:
                return len(re.findall(r"Rotated the client certificate \(request csr-", agent.output()))

            while len(pair_files(cert_dir)) < rotations + 1 or rotated() < rotations + 1:
                assert time.monotonic() < deadline, (f"{len(pair_files(cert_dir)) - 1} renewals, {rotated()} "
                                                     f"rotations said; the agent log ends:\n{agent.output()[-4000:]}")
                time.sleep(2)
            pairs = pair_files(cert_dir)
            infos = [certificate_info(p.read_bytes()) for p in pairs]
            assert [i.not_before for i in infos] == sorted({i.not_before for i in infos})  # each a new one
            renewals = [item for n, item in csrs(admin).items() if n not in before and n != first_request]
            assert len(renewals) >= rotations
            for renewal in renewals:
                assert renewal["spec"]["username"] == f"system:node:{layout.node_name}"  # selfnodeclient
                assert renewal["spec"]["signerName"] == SIGNER and approved_and_issued(renewal)
            newest = pair_files(cert_dir)[-1]
            assert os.readlink(cert_dir / "kubelet-client-current.pem") == str(newest)

            # Past the first certificate's end, the agent works with the renewed ones only.
            time.sleep(max(0.0, first_info.not_after - time.time()) + 15)
            assert agent.proc is not None and agent.proc.poll() is None
            # Kopf takes a renewed pair at its first request after its credentials' expiration (a minute after the
            # deadline, at most the certificate's end): its pod watch, renewed every 5 minutes with rotation.
            agent.wait_for(r"Re-authentication has finished", timeout=360)
            lease_renewed_after(admin, layout.node_name, first_info.not_after)
            admin.apply(sleeper(layout, namespace))  # its status is the agent's own client's write
            running_container(admin, namespace)
            assert "Unauthorized" not in agent.output()
            metrics = admin.run("get", "--raw", f"/api/v1/nodes/{layout.node_name}/proxy/metrics").stdout
            ttl = float(re.search(r"^kubelet_certificate_manager_client_ttl_seconds (\S+)$", metrics, re.M)[1])
            assert 0 < ttl <= lifetime
            assert re.search(r"^kubelet_certificate_manager_client_expiration_renew_errors 0$", metrics, re.M)
            assert agent.stop() == 0
        finally:
            if agent.proc is not None and agent.proc.poll() is None:
                agent.stop()


SERVING_SIGNER = "kubernetes.io/kubelet-serving"


def serving_bootstrap_config(layout: Layout, tmp_path: Path) -> Path:
    """The stack's agent config without its CA-signed serving pair, with serverTLSBootstrap."""
    config = yaml.safe_load(layout.kubelet_config.read_text())
    del config["tlsCertFile"], config["tlsPrivateKeyFile"]
    config["serverTLSBootstrap"] = True
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def served_certificate(layout: Layout) -> bytes | None:
    """The certificate the kubelet API serves (PEM), checked against the cluster CA; None when the handshake
    fails."""
    context = ssl.create_default_context(cafile=str(layout.pki / "ca.crt"))
    context.check_hostname = False
    try:
        with socket.create_connection(("127.0.0.1", 10250), timeout=10) as raw, \
                context.wrap_socket(raw) as tls:
            der = tls.getpeercert(binary_form=True)
    except (ssl.SSLError, OSError):
        return None
    assert der is not None
    return ssl.DER_cert_to_PEM_cert(der).encode()


def serving_requests(admin: Kubectl, node: str, before: set[str]) -> dict[str, dict[str, Any]]:
    return {name: item for name, item in csrs(admin).items()
            if name not in before and item["spec"]["signerName"] == SERVING_SIGNER
            and item["spec"]["username"] == f"system:node:{node}"}


def approve_pending(admin: Kubectl, requests: dict[str, dict[str, Any]]) -> list[str]:
    """What an admin (or an approver) does for each pending serving request: approve it."""
    pending = [name for name, item in requests.items() if not (item.get("status") or {}).get("conditions")]
    for name in pending:
        admin.run("certificate", "approve", name)
    return pending


def server_pairs(cert_dir: Path) -> list[Path]:
    return sorted(cert_dir.glob("kubelet-server-2*.pem"))


def wait_until(condition: Any, timeout: float, what: str, agent: Agent) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"{what}; the agent log ends:\n{agent.output()[-4000:]}")


def test_the_serving_certificate_comes_from_an_approved_request_and_is_renewed(
        admin: Kubectl, layout: Layout, namespace: str, tmp_path: Path) -> None:
    """Signed for 3 minutes (NotBefore backdated 5 minutes: 8 minutes in all), the serving certificate is renewed
    0.6 to 2.2 minutes after it was issued, once the renewal is approved; the API serves the new one from the next
    handshake while an exec stream opened before goes on."""
    before = set(csrs(admin))
    cert_dir = tmp_path / "pki"
    node = layout.node_name
    with short_signing_duration(layout, "3m"):
        agent = Agent(layout, tmp_path / "agent.log",
                      env={"KOPFLET_CONFIG": str(serving_bootstrap_config(layout, tmp_path)),
                           "KOPFLET_ARGS": f"--cert-dir={cert_dir}"})
        agent.start()
        stream: subprocess.Popen[str] | None = None
        try:
            agent.wait_for(r"Activity 'start_agent' succeeded", timeout=START_TIMEOUT)
            admin.apply(sleeper(layout, namespace))
            running_container(admin, namespace)

            # The request, as NewKubeletServerCertificateManager sends it, with the agent's own credentials; nobody
            # approves it, so there is no certificate: no self-signed one either, every handshake fails.
            [(first_request, request)] = wait_until(lambda: list(serving_requests(admin, node, before).items()), 60,
                                                    "no kubelet-serving request", agent)
            assert first_request.startswith("csr-")
            assert request["spec"]["usages"] == ["digital signature", "server auth"]
            assert not (request.get("status") or {}).get("conditions")
            asked = openssl("req", "-noout", "-text", stdin=base64.b64decode(request["spec"]["request"])).decode()
            assert f"CN = system:node:{node}" in asked and "O = system:nodes" in asked
            node_ip = next(a["address"] for a in admin.json("get", "node", node)["status"]["addresses"]
                           if a["type"] == "InternalIP")
            assert f"DNS:{node}, IP Address:{node_ip}" in asked
            assert served_certificate(layout) is None
            agent.wait_for(r"no serving certificate available for the kubelet", timeout=30)
            refused = admin.run("logs", "sleeper", "-n", namespace, check=False)
            assert refused.returncode != 0, refused.stdout
            assert not (cert_dir / "kubelet.crt").exists()

            # Approved (by the test, as an admin would) and signed: stored, and served from the next handshake.
            admin.run("certificate", "approve", first_request)
            first_pem = wait_until(lambda: served_certificate(layout), 60, "the approved certificate is not served",
                                   agent)
            [first_pair] = server_pairs(cert_dir)
            assert os.readlink(cert_dir / "kubelet-server-current.pem") == str(first_pair)
            assert stat.S_IMODE(first_pair.stat().st_mode) == 0o600
            assert pem.certificates(first_pair.read_bytes())[0].strip() == first_pem.decode().strip()
            first = certificate_info(first_pem)
            assert (first.common_name, first.organizations) == (f"system:node:{node}", ("system:nodes",))
            assert (first.dns_names, first.ip_addresses) == ((node,), (node_ip,))
            # The apiserver checks it against the cluster CA (--kubelet-certificate-authority) at the node's IP.
            assert admin.run("exec", "sleeper", "-n", namespace, "--", "echo", "served").stdout == "served\n"

            # An exec stream opened with the first certificate.
            stream = subprocess.Popen(
                [str(admin.binary), f"--kubeconfig={admin.kubeconfig}", "exec", "-i", "sleeper", "-n", namespace,
                 "--", "sh"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert stream.stdin is not None and stream.stdout is not None
            stream.stdin.write("echo before\n")
            stream.stdin.flush()
            assert stream.stdout.readline() == "before\n"

            # The renewal: asked for at the jittered deadline, approved like the first, stored and served.
            def renewed() -> bool:
                approve_pending(admin, serving_requests(admin, node, before))
                return len(server_pairs(cert_dir)) >= 2

            wait_until(renewed, max(0.0, first.not_before + 0.9 * (first.not_after - first.not_before) - time.time())
                       + 90, "the serving certificate was not renewed", agent)
            second_pair = server_pairs(cert_dir)[1]
            second_pem = pem.certificates(second_pair.read_bytes())[0].encode()
            wait_until(lambda: served_certificate(layout) == second_pem, 30, "the renewed certificate is not served",
                       agent)
            second = certificate_info(second_pem)
            assert second.not_before > first.not_before
            assert (second.dns_names, second.ip_addresses) == ((node,), (node_ip,))
            assert agent.proc is not None and agent.proc.poll() is None  # no restart

            # The stream opened before goes on; new ones and logs work with the new certificate.
            stream.stdin.write("echo after\n")
            stream.stdin.flush()
            assert stream.stdout.readline() == "after\n"
            assert admin.run("exec", "sleeper", "-n", namespace, "--", "echo", "renewed").stdout == "renewed\n"
            admin.run("logs", "sleeper", "-n", namespace)
            metrics = admin.run("get", "--raw", f"/api/v1/nodes/{node}/proxy/metrics").stdout
            ttl = float(re.search(r"^kubelet_certificate_manager_server_ttl_seconds (\S+)$", metrics, re.M)[1])
            assert 0 < ttl <= second.not_after - time.time() + 5
            assert re.search(r"^kubelet_certificate_manager_server_rotation_seconds_count [1-9]", metrics, re.M)
            assert re.search(r"^kubelet_server_expiration_renew_errors 0$", metrics, re.M)
            assert agent.stop() == 0
        finally:
            if stream is not None:
                stream.kill()
                stream.wait()
            if agent.proc is not None and agent.proc.poll() is None:
                agent.stop()
