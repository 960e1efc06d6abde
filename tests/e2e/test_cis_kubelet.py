"""The CIS Kubernetes Benchmark's kubelet checks on the real stack, one test (or case) per automatable check.

docs/security.md lists every check of sections 4.1 (worker node files) and 4.2 (kubelet) with kopflet's default,
how to set it and the test here that checks it; the numbering is the benchmark's v1.9/v1.10 one. The module's
agent is the stack's (its config file: serving certificate from the cluster CA, client CA, webhook authentication
and authorization) plus AGENT_ARGS: ``--seccomp-default`` (4.2.14), which is off by default as upstream's,
``--read-only-port=0`` (4.2.4), ``--pod-max-pids`` (4.2.13), the event limits at upstream's defaults (4.2.8) and a
short ``--streaming-connection-idle-timeout`` (4.2.5) to watch it act. Checks kopflet cannot meet (the refused
iptables chains) have no test here: the doc says so.

The first two tests start agents of their own (self-signed serving certificate, lock file; protectKernelDefaults)
and must run before the module's shared agent starts: keep them first.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import socket
import ssl
import subprocess
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from cri_client import CriClient
from devstack.layout import Layout, default_node_name, host_ip
from kopflet.cm import kernel_tunables
from tests import hostile_requests as hostile
from tests.conftest import Kubectl, forbidden
from tests.e2e.conftest import Agent
from tests.e2e.test_kubelet_api import kubelet_get
from tests.e2e.test_pod_lifecycle import container, events, is_ready, phase, pod_manifest, statuses, wait_pod

STREAM_IDLE_TIMEOUT, POD_MAX_PIDS = 10, 1024
AGENT_ARGS = (f"--seccomp-default --read-only-port=0 --pod-max-pids={POD_MAX_PIDS} --event-qps=50 --event-burst=100 "
              f"--streaming-connection-idle-timeout={STREAM_IDLE_TIMEOUT}s")
API_PORT, HEALTHZ_PORT, READ_ONLY_PORT = 10250, 10248, 10255

# CIS 4.2.12: what a TLS 1.2 client offering only one suite gets from the kubelet API.
STRONG_SUITES = ("ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-GCM-SHA384", "ECDHE-RSA-CHACHA20-POLY1305")
WEAK_SUITES = (
    "ECDHE-RSA-AES128-SHA256",  # TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256: in Go's InsecureCipherSuites
    "ECDHE-RSA-AES256-SHA384",  # CBC, in Python's default list but not in Go
    "ECDHE-RSA-AES128-SHA",  # CBC with SHA-1: in Go's defaults, not in the CIS list
    "ECDHE-RSA-AES256-SHA",
    "AES128-SHA",  # RSA key exchange, CBC
    "AES128-GCM-SHA256",  # RSA key exchange: in the CIS list, but kopflet offers ECDHE only unless told
    "DHE-RSA-AES128-GCM-SHA256",
)

# What the agent may write to the API as its node (docs/security.md, "What the agent writes"): (resource,
# subresource, verb). Reads and watches are not listed.
WRITES = frozenset({
    ("pods", "status", "patch"), ("pods", "", "delete"), ("pods", "", "create"),
    ("nodes", "", "create"), ("nodes", "", "patch"), ("nodes", "status", "patch"),
    ("events", "", "create"), ("events", "", "patch"),
    ("leases", "", "create"), ("leases", "", "patch"),
    ("serviceaccounts", "token", "create"),
    ("csinodes", "", "create"), ("csinodes", "", "update"), ("csinodes", "", "delete"),
    ("tokenreviews", "", "create"), ("subjectaccessreviews", "", "create"),
})
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")


@pytest.fixture(scope="module")
def configz(running_agent: Agent, admin: Kubectl, layout: Layout) -> dict[str, Any]:
    """The module agent's effective configuration, as an auditor reads it: GET /configz through the apiserver."""
    return json.loads(admin.raw(f"/api/v1/nodes/{layout.node_name}/proxy/configz").stdout)["kubeletconfig"]


def private_and_roots(path: Path) -> None:
    """CIS 4.1.x: mode 600 or more restrictive, owned by root:root."""
    info = path.stat()
    mode = info.st_mode & 0o777
    assert mode & ~0o600 == 0, f"{path}: mode {mode:o}, CIS wants 600 or more restrictive"
    assert (info.st_uid, info.st_gid) == (0, 0), f"{path}: owned by {info.st_uid}:{info.st_gid}, not root:root"


def served_certificate(host: str = "127.0.0.1", port: int = API_PORT) -> bytes:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection((host, port), timeout=10) as raw, ctx.wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der
    return der


def tls_handshake(version: ssl.TLSVersion, ciphers: str | None = None, port: int = API_PORT) -> str | None:
    """The suite the kubelet API agrees to with a client speaking only ``version`` and offering only ``ciphers``
    (OpenSSL names; TLS 1.2 and older), or None when it refuses. TLS 1.0/1.1 clients run at security level 0,
    so a refusal is the server's."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    legacy = version in (ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = ctx.maximum_version = version
    if ciphers or legacy:
        ctx.set_ciphers((ciphers or "DEFAULT") + (":@SECLEVEL=0" if legacy else ""))  # raises if the client lacks it
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, ctx.wrap_socket(raw) as tls:
            cipher = tls.cipher()
            return cipher[0] if cipher else ""
    except (ssl.SSLError, ConnectionResetError):
        return None


# -------------------------------------------------------------------- an agent of its own: keep this test first


def test_self_signed_serving_key_and_lock_file_are_private(layout: Layout, tmp_path: Path) -> None:
    """kopflet's own files: without tlsCertFile the serving pair is made in --cert-dir, its key 0600 (as upstream);
    --lock-file is created 0600. The agent serves the certificate it made."""
    config = yaml.safe_load(layout.kubelet_config.read_text())
    for field in ("tlsCertFile", "tlsPrivateKeyFile"):
        config.pop(field, None)
    config_file, cert_dir, lock = tmp_path / "config.yaml", tmp_path / "pki", tmp_path / "kopflet.lock"
    config_file.write_text(yaml.safe_dump(config))
    config_file.chmod(0o600)
    agent = Agent(layout, tmp_path / "agent.log", env={
        "KOPFLET_CONFIG": str(config_file), "KOPFLET_ARGS": f"--cert-dir={cert_dir} --lock-file={lock}"})
    agent.start()
    try:
        agent.wait_for(r"Activity 'start_agent' succeeded")
        private_and_roots(cert_dir / "kubelet.key")
        private_and_roots(lock)
        assert served_certificate() == ssl.PEM_cert_to_DER_cert((cert_dir / "kubelet.crt").read_text())
    finally:
        agent.stop()


def test_protect_kernel_defaults_starts_only_on_the_kubelets_values(layout: Layout, tmp_path: Path) -> None:
    """4.2.6 (v1.8): with --protect-kernel-defaults the agent checks vm.overcommit_memory, vm.panic_on_oom,
    kernel.panic, kernel.panic_on_oops and kernel.keys.root_max{keys,bytes} and changes none of them: on a host with
    the kubelet's values it starts; on any other it stops with upstream's error naming each that differs."""
    def host_values() -> dict[str, str]:
        return {name: Path("/proc/sys", name).read_text().strip() for name, _ in kernel_tunables.DESIRED}

    before = host_values()
    differing = [kernel_tunables.invalid_flag_message(name, value, int(before[name]))
                 for name, value in kernel_tunables.DESIRED if before[name] != str(value)]
    agent = Agent(layout, tmp_path / "agent.log", env={"KOPFLET_ARGS": "--protect-kernel-defaults"})
    agent.start()
    try:
        if not differing:
            agent.wait_for(r"Activity 'start_agent' succeeded")
        else:
            agent.wait_for(r"Failed to start ContainerManager: ")
            assert all(message in agent.output() for message in differing), agent.output()
    finally:
        agent.stop()
    assert host_values() == before


# ------------------------------------------------------------------------------------- 4.1 worker node files


def _kubeconfig_client_key(layout: Layout) -> Path:
    kubeconfig = yaml.safe_load(layout.node_kubeconfig.read_text())
    return Path(kubeconfig["users"][0]["user"]["client-key"])


# What each CIS 4.1 check (and kopflet's own key files) names, on this stack.
FILES: dict[str, Callable[[dict[str, Any], Layout], Path]] = {
    "4.1.5-4.1.6-kubeconfig": lambda c, layout: layout.node_kubeconfig,
    "4.1.7-4.1.8-client-ca-file": lambda c, layout: Path(c["authentication"]["x509"]["clientCAFile"]),
    "4.1.9-4.1.10-config-file": lambda c, layout: Path(os.environ.get("KOPFLET_CONFIG") or layout.kubelet_config),
    "tls-private-key-file": lambda c, layout: Path(c["tlsPrivateKeyFile"]),
    "kubeconfig-client-key": lambda c, layout: _kubeconfig_client_key(layout),
}


@pytest.mark.parametrize("name", list(FILES))
def test_files_are_private_and_roots(name: str, configz: dict[str, Any], layout: Layout) -> None:
    private_and_roots(FILES[name](configz, layout))


# ---------------------------------------------------------------------------------------------- 4.2 kubelet


def test_anonymous_requests_are_refused(configz: dict[str, Any]) -> None:
    """4.2.1: --anonymous-auth=false: a request without credentials is 401 whatever the path."""
    assert configz["authentication"]["anonymous"]["enabled"] is False
    for path in ("/pods", "/runningpods/", "/configz", "/healthz", "/metrics", "/metrics/cadvisor", "/stats/summary",
                 "/containerLogs/default/p/c", "/exec/default/p/c?command=true&output=1", "/portForward/default/p",
                 "/no-such-path"):
        assert kubelet_get(path) == (401, "Unauthorized"), path
    assert kubelet_get("/pods", token="not-a-token")[0] == 401


def test_callers_without_rights_are_forbidden(configz: dict[str, Any], admin: Kubectl, namespace: str) -> None:
    """4.2.2: authorization is Webhook, not AlwaysAllow: an authenticated ServiceAccount without rights on nodes/*
    gets 403 naming the subresources it lacked (docs/security.md has the path-to-subresource table)."""
    assert configz["authorization"]["mode"] == "Webhook"
    token = admin.run("create", "token", "default", "-n", namespace).stdout.strip()
    for path, subresources in (("/pods", "pods proxy"), ("/runningpods/", "pods proxy"), ("/configz", "configz proxy"),
                               ("/healthz", "healthz proxy"), ("/metrics", "metrics"), ("/stats/summary", "stats"),
                               ("/containerLogs/default/p/c", "proxy"), ("/exec/default/p/c", "proxy")):
        code, body = kubelet_get(path, token=token)
        assert code == 403, (path, code, body)
        assert body == (f"Forbidden (user=system:serviceaccount:{namespace}:default, verb=get, resource=nodes, "
                        f"subresource(s)=[{subresources}])\n"), body


def test_each_path_needs_its_own_subresource(running_agent: Agent, admin: Kubectl, namespace: str) -> None:
    """The authorization mapping (docs/security.md): get on nodes/metrics and nodes/stats opens /metrics and
    /stats/summary, and nothing else."""
    name = f"cis-metrics-{namespace}"
    admin.run("create", "clusterrole", name, "--verb=get", "--resource=nodes/metrics,nodes/stats")
    admin.run("create", "clusterrolebinding", name, f"--clusterrole={name}", f"--serviceaccount={namespace}:default")
    try:
        token = admin.run("create", "token", "default", "-n", namespace).stdout.strip()
        deadline = time.monotonic() + 90  # RBAC reaches the authorizer, and a cached "denied" expires (30 s)
        while (code := kubelet_get("/metrics", token=token)[0]) != 200:
            assert time.monotonic() < deadline, f"/metrics still {code} with get on nodes/metrics"
            time.sleep(2)
        assert kubelet_get("/stats/summary", token=token)[0] == 200
        for path in ("/pods", "/configz", "/containerLogs/default/p/c", "/exec/default/p/c"):
            assert kubelet_get(path, token=token)[0] == 403, path
    finally:
        admin.run("delete", "clusterrolebinding", name, check=False)
        admin.run("delete", "clusterrole", name, check=False)


def test_client_certificates_need_the_client_ca(configz: dict[str, Any], layout: Layout, tmp_path: Path) -> None:
    """4.2.3: clientCAFile is set; a certificate it signed authenticates, a look-alike signed by nobody does not."""
    ca = configz["authentication"]["x509"].get("clientCAFile", "")
    assert ca and Path(ca).is_file(), configz["authentication"]
    assert kubelet_get("/pods", cert=(layout.pki / "admin.crt", layout.pki / "admin.key"))[0] == 200
    forged_crt, forged_key = tmp_path / "forged.crt", tmp_path / "forged.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/O=system:masters/CN=kubernetes-admin", "-keyout", str(forged_key), "-out", str(forged_crt)],
                   check=True, capture_output=True)
    try:
        code: int | None = kubelet_get("/pods", cert=(forged_crt, forged_key))[0]
    except OSError:  # the handshake refused (unknown CA), or the connection dropped after it (TLS 1.3)
        code = None
    assert code in (None, 401), code


def test_there_is_no_read_only_port(configz: dict[str, Any]) -> None:
    """4.2.4: kopflet has no read-only port (upstream's --read-only-port, plain HTTP on 10255): it takes
    --read-only-port=0 (this module's agent has it) and refuses any other port; /configz leaves the 0 out, as
    upstream's encoding/json does."""
    assert "readOnlyPort" not in configz
    for host in dict.fromkeys(("127.0.0.1", host_ip())):
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((host, READ_ONLY_PORT), timeout=5).close()


def _listening(pid: int) -> set[tuple[str, int]]:
    """The TCP sockets process ``pid`` listens on, as (address, port), from /proc (x86: little-endian words)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            address, port = fields[1].split(":")
            raw = bytes.fromhex(address)
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            found.add((str(ipaddress.ip_address(raw)), int(port, 16)))
    return found


def test_the_agent_listens_on_its_api_and_loopback_healthz_only(running_agent: Agent) -> None:
    """4.2.4 and the security model: the HTTPS API on --address:--port and nothing else but the unauthenticated
    /healthz on 127.0.0.1 (healthzBindAddress; the agent serves it under `kopf run` as here too): no read-only port,
    no debug or profiling port."""
    assert running_agent.proc is not None
    found = _listening(running_agent.proc.pid)
    assert ("0.0.0.0", API_PORT) in found, found
    assert found <= {("0.0.0.0", API_PORT), ("127.0.0.1", HEALTHZ_PORT)}, found


def test_idle_streams_are_closed(configz: dict[str, Any], admin: Kubectl, layout: Layout, namespace: str) -> None:
    """4.2.5: --streaming-connection-idle-timeout (this module's agent: STREAM_IDLE_TIMEOUT seconds) closes a relayed
    exec session through which no byte has passed either way for that long: long before the runtime would (its
    stream creation timeout is 30s, its idle timeout 4h)."""
    assert configz["streamingConnectionIdleTimeout"] == f"{STREAM_IDLE_TIMEOUT}s"
    admin.apply(pod_manifest("idle", namespace, layout.node_name, [container("main", "sleep 3600")]))
    wait_pod(admin, namespace, "idle", is_ready, what="Ready")
    context = hostile.tls_context(str(layout.pki / "ca.crt"), (str(layout.pki / "admin.crt"),
                                                                str(layout.pki / "admin.key")))
    with hostile.connect(API_PORT, context) as sock:
        sock.sendall(hostile.request(f"/exec/{namespace}/idle/main?command=sleep&command=3600&output=1",
                                     *hostile.SPDY_EXEC, method="POST"))
        assert hostile.read_answer(sock, head_only=True, timeout=30).status == 101
        started = time.monotonic()
        sock.settimeout(STREAM_IDLE_TIMEOUT * 6)
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            while sock.recv(4096):  # whatever the runtime says first (SPDY settings) is activity: the wait restarts
                started = time.monotonic()
        took = time.monotonic() - started
    assert STREAM_IDLE_TIMEOUT - 1 <= took < STREAM_IDLE_TIMEOUT + 10, took


def test_the_runtime_closes_idle_streams(running_agent: Agent, layout: Layout) -> None:
    """4.2.5, behind kopflet: the runtime's streaming server has its own idle timeout; containerd's
    stream_idle_timeout (default 4h) must not be 0 either."""
    async def runtime_config() -> dict[str, Any]:
        async with CriClient(layout.runtime_endpoint) as client:
            return json.loads((await client.status(verbose=True)).info["config"])

    timeout = asyncio.run(runtime_config()).get("streamIdleTimeout", "")
    assert timeout not in ("", "0", "0s"), f"containerd's streamIdleTimeout is {timeout!r}"


def test_the_node_name_is_the_hostname_and_in_the_certificate(configz: dict[str, Any], admin: Kubectl,
                                                               layout: Layout) -> None:
    """4.2.7: no --hostname-override on this stack: the Node is named after the machine, and the serving
    certificate the apiserver verifies names it."""
    assert layout.node_name == default_node_name(), "the stack's node name overrides the hostname"
    node = admin.json("get", "node", layout.node_name)
    assert {"type": "Hostname", "address": layout.node_name} in node["status"]["addresses"]
    ctx = ssl.create_default_context(cafile=str(layout.pki / "ca.crt"))
    with socket.create_connection(("127.0.0.1", API_PORT), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname=layout.node_name):
        pass  # the handshake checked the name


def test_events_are_recorded(configz: dict[str, Any], admin: Kubectl, layout: Layout, namespace: str) -> None:
    """4.2.8: eventRecordQPS and eventBurst are upstream's defaults (50 and 100: writes past them wait their turn,
    none is dropped until 1000 are waiting), and a pod's events are all there, repeats folded into a count."""
    assert (configz["eventRecordQPS"], configz["eventBurst"]) == (50, 100)
    admin.apply(pod_manifest("evented", namespace, layout.node_name, [container("main", "sleep 3600")]))
    wait_pod(admin, namespace, "evented", is_ready, what="Ready")
    deadline = time.monotonic() + 30
    while not {"Pulled", "Created", "Started"} <= {e["reason"] for e in events(admin, namespace, "evented")}:
        assert time.monotonic() < deadline, events(admin, namespace, "evented")
        time.sleep(0.5)
    mine = [e for e in events(admin, namespace, "evented") if e["reason"] in ("Pulled", "Created", "Started")]
    assert all(e["source"] == {"component": "kubelet", "host": layout.node_name} for e in mine), mine


def test_the_serving_certificate_is_from_the_cluster_ca(configz: dict[str, Any], layout: Layout) -> None:
    """4.2.9: tlsCertFile and tlsPrivateKeyFile are set, and the API serves that certificate, which the cluster CA
    verifies for the address the apiserver dials."""
    cert, key = configz.get("tlsCertFile", ""), configz.get("tlsPrivateKeyFile", "")
    assert cert and key, "the agent serves a self-signed certificate"
    assert served_certificate() == ssl.PEM_cert_to_DER_cert(Path(cert).read_text())
    ctx = ssl.create_default_context(cafile=str(layout.pki / "ca.crt"))
    with socket.create_connection(("127.0.0.1", API_PORT), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1"):
        pass


@pytest.mark.parametrize("suite", STRONG_SUITES)
def test_strong_cipher_suites_are_served(running_agent: Agent, suite: str) -> None:
    """4.2.12: the CIS list's ECDHE AEAD suites (this certificate is RSA: the ECDSA ones cannot be offered)."""
    assert tls_handshake(ssl.TLSVersion.TLSv1_2, suite) == suite


@pytest.mark.parametrize("suite", WEAK_SUITES)
def test_weak_cipher_suites_are_refused(running_agent: Agent, suite: str) -> None:
    """4.2.12: with no tlsCipherSuites kopflet offers TLS 1.2 clients ECDHE with AES-GCM or ChaCha20 only."""
    assert tls_handshake(ssl.TLSVersion.TLSv1_2, suite) is None


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1], ids=["TLS1.0", "TLS1.1"])
def test_old_tls_versions_are_refused(configz: dict[str, Any], version: ssl.TLSVersion) -> None:
    """4.2.12: tlsMinVersion defaults to TLS 1.2 (configz leaves the empty default out); TLS 1.3 is served."""
    assert configz.get("tlsMinVersion", "VersionTLS12") in ("VersionTLS12", "VersionTLS13")
    assert tls_handshake(version) is None
    assert tls_handshake(ssl.TLSVersion.TLSv1_3) is not None


def test_pods_get_the_pod_pids_limit(configz: dict[str, Any], admin: Kubectl, layout: Layout,
                                     namespace: str) -> None:
    """4.2.13: with --pod-max-pids (this module's agent) each pod's own cgroup gets pids.max, set when it is made
    (kubepods' limit above it stays node allocatable's)."""
    assert configz["podPidsLimit"] == POD_MAX_PIDS
    admin.apply(pod_manifest("pids", namespace, layout.node_name, [container("main", "sleep 3600")]))
    pod = wait_pod(admin, namespace, "pids", is_ready, what="Ready")
    tier = {"Guaranteed": "", "Burstable": "burstable/", "BestEffort": "besteffort/"}[pod["status"]["qosClass"]]
    relative = f"kubepods/{tier}pod{pod['metadata']['uid']}/pids.max"
    v2 = Path("/sys/fs/cgroup/cgroup.controllers").exists()
    path = Path("/sys/fs/cgroup") / ("" if v2 else "pids") / relative
    assert path.read_text().strip() == str(POD_MAX_PIDS)


def test_seccomp_default_confines_unprofiled_containers(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                        namespace: str) -> None:
    """4.2.14 (v1.10): with --seccomp-default (this module's agent) a container that names no seccomp profile runs
    with the runtime's default one: seccomp mode 2 (filter), not 0."""
    admin.apply(pod_manifest("unprofiled", namespace, layout.node_name, [container(
        "main", "grep ^Seccomp: /proc/self/status | tr -s '\\t' ' ' > /dev/termination-log")],
        restartPolicy="Never"))
    pod = wait_pod(admin, namespace, "unprofiled", phase("Succeeded"), what="Succeeded")
    assert statuses(pod)["main"]["state"]["terminated"].get("message", "").splitlines() == ["Seccomp: 2"]


# ---------------------------------------------------------------------------------------- the security model


def test_the_agent_is_its_node_and_node_restriction_applies(running_agent: Agent, admin: Kubectl,
                                                            node_kubectl: Kubectl, layout: Layout,
                                                            namespace: str) -> None:
    """The agent's kubeconfig is the node identity system:node:<name> (group system:nodes): the Node authorizer
    keeps it from Secrets no pod of its node references, and NodeRestriction from other Nodes' objects."""
    who = json.loads(node_kubectl.run("auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]
    assert who["username"] == f"system:node:{layout.node_name}" and "system:nodes" in who["groups"], who
    admin.run("create", "secret", "generic", "unreferenced", "-n", namespace, "--from-literal=k=v")
    assert forbidden(node_kubectl.run("get", "secret", "unreferenced", "-n", namespace, check=False))
    other = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"cis-other-{namespace}"}}
    assert forbidden(node_kubectl.run("create", "-f", "-", stdin=json.dumps(other), check=False))


def test_the_agent_writes_only_what_the_doc_lists(running_agent: Agent, layout: Layout) -> None:
    """docs/security.md, "What the agent writes": every write the agent made as its node since this module's agent
    started, from the apiserver's audit log of node requests, is one of WRITES. Last in the module, so the pods,
    events and reviews of the tests above are in it."""
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(running_agent.log.stat().st_ctime - 1))
    user = f"system:node:{layout.node_name}"
    seen: set[tuple[str, str, str]] = set()
    for line in layout.audit_log.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if (entry.get("user", {}).get("username") != user or entry.get("verb") not in WRITE_VERBS
                or entry.get("requestReceivedTimestamp", "") < since
                or entry.get("userAgent", "").startswith(("kubectl", "kubelet/", "e2e"))):
            continue
        ref = entry.get("objectRef", {})
        seen.add((ref.get("resource", ""), ref.get("subresource", ""), entry["verb"]))
    assert ("pods", "status", "patch") in seen, "no pod status patch in the audit log: is it the stack's?"
    assert seen <= WRITES, sorted(seen - WRITES)
