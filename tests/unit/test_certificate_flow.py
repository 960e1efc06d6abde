"""TLS bootstrap and certificate rotation end to end against a small fake apiserver on 127.0.0.1 (aiohttp over TLS,
with a test CA): real keys and requests from the openssl command, real TLS handshakes with a bootstrap token or the
node's certificate, the request created, watched, approved and signed (with openssl, as the controller-manager's
signer would), the pair stored and the kubeconfig written as upstream's bootstrap.go and certificate_manager.go do."""

from __future__ import annotations

import asyncio
import base64
import datetime
import itertools
import json
import os
import ssl
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from kopflet.certificate import bootstrap, csr, openssl, pem
from kopflet.certificate.kubeconfig import ClientConfig
from kopflet.certificate.manager import ClientCertificateManager, new_client_manager, new_server_manager
from kopflet.certificate.store import FileStore
from kopflet.client.kubeapi import CSR_PATH, KubeClient
from tests.unit.test_certificate_files import make_ca, node_pair, run_openssl, sign

TOKEN = "abcdef.0123456789abcdef"
BOOTSTRAP_USER = "system:bootstrap:abcdef"
NODE = "node-a"


class FakeApiserver:
    """The certificates API of an apiserver with a signer and an approver behind it: ``policy`` says what happens to
    a new request (approve and sign, deny, or hold it); every request's user is recorded (the token's, or the
    client certificate's CommonName and serial)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.ca = make_ca(directory)
        self.policy = "approve"
        self.csrs: dict[str, dict[str, Any]] = {}
        self.requesters: dict[str, str] = {}
        self.events: list[tuple[int, str, dict[str, Any]]] = []
        self.version = 100
        self.changed = asyncio.Condition()
        self.create_failures: list[int] = []
        self.seen: list[tuple[str, str]] = []  # (path, user or "serial:<n>")
        self.serials: list[str] = []
        self.names = (f"csr-{i:05d}" for i in itertools.count())
        self.url = ""
        self.closing = False
        self._runner: web.AppRunner | None = None

    # -------------------------------------------------------------------------------------------- serving

    def _server_context(self) -> ssl.SSLContext:
        key = self.directory / "server.key"
        run_openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key))
        request = run_openssl("req", "-new", "-key", str(key), "-subj", "/CN=kube-apiserver", "-config", "/dev/null")
        (self.directory / "req.csr").write_bytes(request)
        (self.directory / "server.cnf").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
        cert = run_openssl("x509", "-req", "-in", str(self.directory / "req.csr"), "-CA", str(self.ca[0]),
                           "-CAkey", str(self.ca[1]), "-set_serial", "7", "-days", "1",
                           "-extfile", str(self.directory / "server.cnf"))
        (self.directory / "server.crt").write_bytes(cert)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.directory / "server.crt", key)
        context.load_verify_locations(self.ca[0])
        context.verify_mode = ssl.CERT_OPTIONAL
        return context

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self.healthz)
        app.router.add_post(CSR_PATH, self.create)
        app.router.add_get(CSR_PATH, self.list_or_watch)
        app.router.add_get(CSR_PATH + "/{name}", self.get)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self._server_context())
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"https://127.0.0.1:{port}"

    async def stop(self) -> None:
        async with self.changed:  # open watches end now, not at their timeout
            self.closing = True
            self.changed.notify_all()
        if self._runner is not None:
            await self._runner.cleanup()

    def user(self, request: web.Request) -> str | None:
        if request.headers.get("Authorization") == f"Bearer {TOKEN}":
            return BOOTSTRAP_USER
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        if peer:
            self.serials.append(peer["serialNumber"])
            return next(value for rdn in peer["subject"] for key, value in rdn if key == "commonName")
        return None

    @staticmethod
    def status(code: int, reason: str, message: str) -> web.Response:
        return web.json_response({"kind": "Status", "status": "Failure", "code": code, "reason": reason,
                                  "message": message}, status=code)

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def create(self, request: web.Request) -> web.Response:
        user = self.user(request)
        if user is None:
            return self.status(401, "Unauthorized", "Unauthorized")
        if self.create_failures:
            code = self.create_failures.pop(0)
            return self.status(code, "InternalError" if code >= 500 else "Forbidden", f"failure {code}")
        body = await request.json()
        meta = body["metadata"]
        name = meta.get("name") or f"{meta['generateName'][:-4]}{next(self.names)}"
        if name in self.csrs:
            return self.status(409, "AlreadyExists", f'certificatesigningrequests "{name}" already exists')
        self.version += 1
        obj = {**body, "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": str(self.version)},
               "status": {}}
        self.csrs[name], self.requesters[name] = obj, user
        await self.record("ADDED", obj)
        if self.policy != "hold":
            asyncio.get_running_loop().call_later(0.05, lambda: asyncio.ensure_future(self.decide(name)))
        return web.json_response(obj, status=201)

    async def decide(self, name: str, policy: str | None = None) -> None:
        """The approver and the signer: Approved and issued, or Denied."""
        obj = self.csrs[name]
        if (policy or self.policy) == "deny":
            obj["status"] = {"conditions": [{"type": "Denied", "reason": "Nope", "message": "not this node"}]}
        else:
            request = base64.b64decode(obj["spec"]["request"])
            certificate = await asyncio.to_thread(sign, self.ca, request,
                                                  client=obj["spec"]["signerName"] != csr.SERVING_SIGNER_NAME)
            obj["status"] = {"conditions": [{"type": "Approved", "reason": "AutoApproved", "message": "auto"}],
                             "certificate": base64.b64encode(certificate).decode()}
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        await self.record("MODIFIED", obj)

    async def record(self, kind: str, obj: dict[str, Any]) -> None:
        async with self.changed:
            self.events.append((self.version, kind, json.loads(json.dumps(obj))))
            self.changed.notify_all()

    async def get(self, request: web.Request) -> web.Response:
        if self.user(request) is None:
            return self.status(401, "Unauthorized", "Unauthorized")
        obj = self.csrs.get(request.match_info["name"])
        return web.json_response(obj) if obj else self.status(404, "NotFound", "not found")

    async def list_or_watch(self, request: web.Request) -> web.StreamResponse:
        user = self.user(request)
        if user is None:
            return self.status(401, "Unauthorized", "Unauthorized")
        self.seen.append((request.path_qs, user))
        name = request.query.get("fieldSelector", "").removeprefix("metadata.name=")
        if request.query.get("watch") != "1":
            items = [o for n, o in self.csrs.items() if n == name]
            return web.json_response({"metadata": {"resourceVersion": str(self.version)}, "items": items})
        since = int(request.query["resourceVersion"])
        response = web.StreamResponse()
        await response.prepare(request)
        sent = 0
        try:
            async with asyncio.timeout(float(request.query.get("timeoutSeconds", "5"))):
                while True:
                    async with self.changed:
                        await self.changed.wait_for(lambda seen=sent: self.closing or len(self.events) > seen)
                        if self.closing:
                            break
                        new, sent = self.events[sent:], len(self.events)
                    for version, kind, obj in new:
                        if version > since and obj["metadata"]["name"] == name:
                            await response.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
        except TimeoutError:
            pass
        return response

    # ------------------------------------------------------------------------------------------ kubeconfig

    def bootstrap_kubeconfig(self, path: Path) -> Path:
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "tls-bootstrap-token-user@kubernetes",
            "clusters": [{"name": "kubernetes", "cluster": {"server": self.url,
                                                            "certificate-authority": str(self.ca[0])}}],
            "users": [{"name": "tls-bootstrap-token-user", "user": {"token": TOKEN}}],
            "contexts": [{"name": "tls-bootstrap-token-user@kubernetes",
                          "context": {"cluster": "kubernetes", "user": "tls-bootstrap-token-user"}}]}))
        return path


@pytest.fixture
async def apiserver(tmp_path: Path) -> AsyncIterator[FakeApiserver]:
    (tmp_path / "apiserver").mkdir()
    server = FakeApiserver(tmp_path / "apiserver")
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def mode(path: str | Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def exists(path: str | Path) -> bool:
    return os.path.exists(path)


def read(path: str | Path) -> bytes:
    return Path(path).read_bytes()


def read_yaml(path: str | Path) -> Any:
    return yaml.safe_load(Path(path).read_text())


def paths(tmp_path: Path, apiserver: FakeApiserver) -> tuple[str, str, str]:
    return (str(tmp_path / "etc" / "kubelet.conf"),
            str(apiserver.bootstrap_kubeconfig(tmp_path / "bootstrap-kubelet.conf")), str(tmp_path / "pki"))


# ------------------------------------------------------------------------------------------- LoadClientCert


async def test_bootstrap_gets_a_certificate_and_writes_the_kubeconfig(tmp_path: Path,
                                                                      apiserver: FakeApiserver) -> None:
    kubeconfig, bootstrap_path, cert_dir = paths(tmp_path, apiserver)
    assert await bootstrap.load_client_cert(kubeconfig, bootstrap_path, cert_dir, NODE, server_wait=5)

    [(name, obj)] = apiserver.csrs.items()
    request = base64.b64decode(obj["spec"]["request"])
    assert apiserver.requesters[name] == BOOTSTRAP_USER
    assert obj["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet"
    assert obj["spec"]["usages"] == ["digital signature", "client auth"]
    assert "expirationSeconds" not in obj["spec"]
    assert await openssl.request_subject(request) == "CN=system:node:node-a,O=system:nodes"
    public_key = await openssl.request_public_key_der(request)
    assert name == csr.digested_name(public_key, csr.node_subject(NODE), csr.client_usages(False))
    assert any("watch=1" in path for path, _ in apiserver.seen)  # it waited on a watch

    current = Path(cert_dir) / "kubelet-client-current.pem"
    target = Path(os.readlink(current))
    assert target.parent == Path(cert_dir) and target.name.startswith("kubelet-client-2")
    assert len(target.name) == len("kubelet-client-2026-11-27-08-17-12.pem")
    assert mode(target) == 0o600
    assert not (Path(cert_dir) / "kubelet-client.key.tmp").exists()
    [info] = await openssl.chain_info(current.read_bytes())
    assert (info.common_name, info.organizations) == ("system:node:node-a", ("system:nodes",))
    assert await openssl.public_key_der(pem.private_key(current.read_bytes()).text.encode()) == public_key

    assert mode(kubeconfig) == 0o600
    written = read_yaml(kubeconfig)
    assert written["clusters"] == [{"name": "default-cluster", "cluster": {
        "server": apiserver.url, "certificate-authority": str(apiserver.ca[0])}}]
    assert written["users"] == [{"name": "default-auth", "user": {"client-certificate": str(current),
                                                                  "client-key": str(current)}}]
    assert await bootstrap.client_config_still_valid(kubeconfig)
    # the node's own credentials work against the apiserver
    client = KubeClient(await bootstrap.credentials_for(await bootstrap.read_client_config(kubeconfig, "k"), "k"))
    try:
        await client.get_csr(name)
    finally:
        await client.close()
    # a valid kubeconfig is kept
    assert not await bootstrap.load_client_cert(kubeconfig, bootstrap_path, cert_dir, NODE, server_wait=5)
    assert len(apiserver.csrs) == 1


async def test_a_denied_request_is_final_with_upstreams_message(tmp_path: Path, apiserver: FakeApiserver) -> None:
    apiserver.policy = "deny"
    kubeconfig, bootstrap_path, cert_dir = paths(tmp_path, apiserver)
    with pytest.raises(csr.CsrDenied) as info:
        await bootstrap.load_client_cert(kubeconfig, bootstrap_path, cert_dir, NODE, server_wait=5)
    assert str(info.value) == ("cannot watch on the certificate signing request: certificate signing request is "
                               "denied, reason: Nope, message: not this node")
    assert not exists(kubeconfig)
    assert (Path(cert_dir) / "kubelet-client.key.tmp").exists()  # kept for the next try


async def test_a_restarted_bootstrap_finds_its_request_under_the_same_name(tmp_path: Path,
                                                                           apiserver: FakeApiserver) -> None:
    apiserver.policy = "hold"
    kubeconfig, bootstrap_path, cert_dir = paths(tmp_path, apiserver)
    with pytest.raises(csr.CsrError, match="timed out waiting for the condition"):
        await bootstrap.load_client_cert(kubeconfig, bootstrap_path, cert_dir, NODE, timeout_seconds=0.5,
                                         server_wait=5)
    tmp_key = Path(cert_dir) / "kubelet-client.key.tmp"
    assert stat.S_IMODE(tmp_key.stat().st_mode) == 0o600
    [name] = apiserver.csrs
    await apiserver.decide(name, "approve")
    assert await bootstrap.load_client_cert(kubeconfig, bootstrap_path, cert_dir, NODE, server_wait=5)
    assert list(apiserver.csrs) == [name]  # AlreadyExists: the same request, checked compatible and reused
    assert not tmp_key.exists()


async def test_an_incompatible_request_under_our_name_is_refused(tmp_path: Path, apiserver: FakeApiserver) -> None:
    apiserver.policy = "hold"
    key = await openssl.generate_key()
    request = await openssl.make_request(key, csr.node_subject(NODE).openssl())
    client = KubeClient(await bootstrap.credentials_for(
        await bootstrap.read_client_config(paths(tmp_path, apiserver)[1], "b"), "b"))
    other = await openssl.make_request(await openssl.generate_key(), csr.node_subject(NODE).openssl())
    try:
        await client.create_csr(csr.csr_object(other, csr.client_usages(False), name="node-csr-x"))
        with pytest.raises(csr.CsrError, match="retrieved csr is not compatible: error validating signature"):
            from kopflet.certificate import signing
            await signing.request_certificate(client, request, key, csr.client_usages(False), name="node-csr-x")
    finally:
        await client.close()


async def test_client_config_still_valid(tmp_path: Path, apiserver: FakeApiserver) -> None:
    certificate, key = await node_pair(apiserver.ca)
    (tmp_path / "node.crt").write_bytes(certificate)
    (tmp_path / "node.key").write_bytes(key)

    def kubeconfig(name: str, user: dict[str, Any]) -> str:
        path = tmp_path / name
        path.write_text(yaml.safe_dump({"current-context": "c", "contexts": [
            {"name": "c", "context": {"cluster": "k", "user": "u"}}], "clusters": [
            {"name": "k", "cluster": {"server": apiserver.url}}], "users": [{"name": "u", "user": user}]}))
        return str(path)

    good = kubeconfig("good", {"client-certificate": "node.crt", "client-key": "node.key"})
    assert await bootstrap.client_config_still_valid(good)
    assert await bootstrap.client_config_still_valid(kubeconfig("data", {
        "client-certificate-data": base64.b64encode(certificate).decode(),
        "client-key-data": base64.b64encode(key).decode()}))
    far = datetime.datetime.now().timestamp() + 3 * 86400
    assert not await bootstrap.client_config_still_valid(good, now=far)  # expired
    assert not await bootstrap.client_config_still_valid(str(tmp_path / "missing"))
    assert not await bootstrap.client_config_still_valid(kubeconfig("token", {"token": TOKEN}))
    (tmp_path / "other.key").write_bytes(await openssl.generate_key())
    assert not await bootstrap.client_config_still_valid(
        kubeconfig("mismatch", {"client-certificate": "node.crt", "client-key": "other.key"}))
    assert not await bootstrap.client_config_still_valid(kubeconfig("gone", {"client-certificate": "nope.crt",
                                                                             "client-key": "node.key"}))
    (tmp_path / "garbage").write_text("{{{")
    assert not await bootstrap.client_config_still_valid(str(tmp_path / "garbage"))


# --------------------------------------------------------------------------------------- rotateCertificates


async def test_rotation_bootstraps_with_the_token_then_renews_as_the_node(tmp_path: Path,
                                                                          apiserver: FakeApiserver) -> None:
    kubeconfig, bootstrap_path, cert_dir = paths(tmp_path, apiserver)
    manager = await new_client_manager(kubeconfig, bootstrap_path, cert_dir, NODE)
    # LoadClientConfig wrote the kubeconfig at once, naming the pair the manager is about to get
    written = read_yaml(kubeconfig)
    assert written["users"][0]["user"]["client-certificate"] == str(Path(cert_dir) / "kubelet-client-current.pem")
    assert manager.current() is None and manager.next_deadline() <= datetime.datetime.now().timestamp()
    told: list[str] = []

    async def listener() -> None:
        told.append("rotated")

    manager.add_listener(listener)
    assert await manager.rotate()
    [first] = apiserver.csrs
    assert first.startswith("csr-") and apiserver.requesters[first] == BOOTSTRAP_USER  # generateName, the token
    assert "expirationSeconds" not in apiserver.csrs[first]["spec"]
    current = manager.current()
    assert current is not None and told == ["rotated"]
    assert current.info.not_before + 0.7 * 86400 - 5 <= current.deadline <= current.info.not_before + 0.9 * 86400 + 5
    first_target = os.readlink(Path(cert_dir) / "kubelet-client-current.pem")
    assert manager.current_paths() == (str(Path(cert_dir) / "kubelet-client-current.pem"),) * 2
    await manager.wait_for_certificate()

    await asyncio.sleep(1.05)  # the pair files are named to the second
    assert await manager.rotate()  # the next one asks as the node (selfnodeclient)
    second = next(n for n in apiserver.csrs if n != first)
    assert apiserver.requesters[second] == "system:node:node-a"
    assert os.readlink(Path(cert_dir) / "kubelet-client-current.pem") != first_target
    assert exists(first_target)
    assert told == ["rotated", "rotated"] and manager.renew_errors == 0 and manager.server_healthy


async def test_the_agents_client_switches_to_the_rotated_pair(tmp_path: Path, apiserver: FakeApiserver) -> None:
    kubeconfig, bootstrap_path, cert_dir = paths(tmp_path, apiserver)
    manager = await new_client_manager(kubeconfig, bootstrap_path, cert_dir, NODE)
    assert await manager.rotate()
    cert_path, key_path = manager.current_paths() or ("", "")
    client = KubeClient(bootstrap.node_credentials(manager.node_config, cert_path, key_path))
    manager.add_listener(client.renew_connections)
    try:
        await client.list_csrs("metadata.name=x")
        before = apiserver.serials[-1]
        await asyncio.sleep(1.05)  # the pair files are named to the second
        assert await manager.rotate()
        await client.list_csrs("metadata.name=x")
        assert apiserver.serials[-1] != before  # a new connection, with the new certificate
    finally:
        await client.close()
    await client.renew_connections()  # closed: nothing to renew


class Clock:
    """A clock that moves only when the code under test sleeps."""

    def __init__(self, start: float) -> None:
        self.now, self.sleeps = start, []
        self.stop_after: float | None = None

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 3))
        if self.stop_after is not None and seconds >= self.stop_after:
            raise asyncio.CancelledError
        self.now += seconds


async def test_run_renews_at_once_when_forced_with_upstreams_backoff(tmp_path: Path,
                                                                     apiserver: FakeApiserver) -> None:
    kubeconfig, bootstrap_path, cert_dir = paths(tmp_path, apiserver)
    clock = Clock(datetime.datetime.now().timestamp())
    clock.stop_after = 3600.0  # the wait for the next deadline ends the test
    apiserver.create_failures = [500, 403, 503]
    manager = await new_client_manager(kubeconfig, bootstrap_path, cert_dir, NODE, clock=clock, rand=lambda: 0.5,
                                       sleep=clock.sleep)
    with pytest.raises(asyncio.CancelledError):
        await manager.run()
    current = manager.current()
    assert current is not None
    # three failures: 2, 4, 8 s (+5%), then the round's pause, then the wait for the jittered deadline (80%)
    assert clock.sleeps[:4] == [2.1, 4.2, 8.4, 1.0]
    assert clock.sleeps[4] == pytest.approx(current.info.not_before + 0.8 * 86400 - clock.now, abs=0.01)
    assert manager.renew_errors == 3 and manager.server_healthy


async def test_a_denied_renewal_is_counted_and_retried(tmp_path: Path, apiserver: FakeApiserver) -> None:
    kubeconfig, bootstrap_path, cert_dir = paths(tmp_path, apiserver)
    manager = await new_client_manager(kubeconfig, bootstrap_path, cert_dir, NODE)
    apiserver.policy = "deny"
    assert not await manager.rotate()
    assert manager.renew_errors == 1 and manager.current() is None


async def test_no_certificate_for_five_minutes_stops_the_agent(tmp_path: Path) -> None:
    clock = Clock(1000.0)
    manager = ClientCertificateManager(NODE, FileStore(str(tmp_path)), node_config=None,  # type: ignore[arg-type]
                                       cert_config=None, clock=clock, sleep=clock.sleep)  # type: ignore[arg-type]
    manager.server_healthy = True
    stopped: list[str] = []
    await manager.watch_expiry(stopped.append)
    assert stopped == ["No valid client certificate is found and the server is responsive, exiting."]
    assert clock.now == 1310.0  # the first check after 5 minutes, every 10 s


async def test_the_kubeconfigs_own_pair_is_used_then_renewed(tmp_path: Path, apiserver: FakeApiserver) -> None:
    """kubeadm's case: the kubeconfig carries certificate data; it is stored as the current pair and renewed at once."""
    certificate, key = await node_pair(apiserver.ca)
    path = tmp_path / "kubelet.conf"
    path.write_text(yaml.safe_dump({"current-context": "c", "contexts": [
        {"name": "c", "context": {"cluster": "k", "user": "u"}}], "clusters": [
        {"name": "k", "cluster": {"server": apiserver.url, "certificate-authority": str(apiserver.ca[0])}}],
        "users": [{"name": "u", "user": {"client-certificate-data": base64.b64encode(certificate).decode(),
                                         "client-key-data": base64.b64encode(key).decode()}}]}))
    manager = await new_client_manager(str(path), "", str(tmp_path / "pki"), NODE)
    assert manager.current() is not None
    assert read(manager.current_paths()[0]).startswith(certificate.strip())  # type: ignore[index]
    now = datetime.datetime.now().timestamp()
    assert manager.relogin_at() == pytest.approx(now + 60, abs=2)  # Kopf takes the renewed pair a minute later
    assert manager.next_deadline() <= now + 1  # forced
    assert await manager.rotate()
    assert apiserver.requesters[next(iter(apiserver.csrs))] == "system:node:node-a"


async def test_kopf_logs_in_with_the_managers_pair_until_shortly_after_the_deadline(
        tmp_path: Path, apiserver: FakeApiserver) -> None:
    import kopf

    from handlers import configuring

    kubeconfig, bootstrap_path, cert_dir = paths(tmp_path, apiserver)
    manager = await new_client_manager(kubeconfig, bootstrap_path, cert_dir, NODE)
    assert await manager.rotate()
    info = kopf.ConnectionInfo(server=apiserver.url, token="t", scheme="Bearer", certificate_data="Zm9v",
                               private_key_data="YmFy")
    got = configuring.with_rotating_certificate(info, manager)
    pem_path = str(Path(cert_dir) / "kubelet-client-current.pem")
    assert (got.certificate_path, got.private_key_path, got.certificate_data, got.token) == (pem_path, pem_path,
                                                                                              None, None)
    current = manager.current()
    assert current is not None and got.expiration is not None
    assert got.expiration.timestamp() == pytest.approx(min(current.deadline + 60, current.info.not_after))


# ------------------------------------------------------------------------------------- serverTLSBootstrap

async def node_client(tmp_path: Path, apiserver: FakeApiserver) -> KubeClient:
    """The agent's own client: the node's client certificate from the cluster CA."""
    certificate, key = await node_pair(apiserver.ca, NODE)
    (tmp_path / "node.crt").write_bytes(certificate)
    (tmp_path / "node.key").write_bytes(key)
    config = ClientConfig(server=apiserver.url, ca_file=str(apiserver.ca[0]))
    return KubeClient(bootstrap.node_credentials(config, str(tmp_path / "node.crt"), str(tmp_path / "node.key")))


NODE_ADDRESSES = [{"type": "InternalIP", "address": "10.0.0.5"}, {"type": "Hostname", "address": NODE}]


async def test_the_serving_certificate_is_asked_for_with_the_agents_client_for_the_node_addresses(
        tmp_path: Path, apiserver: FakeApiserver) -> None:
    client = await node_client(tmp_path, apiserver)
    cert_dir = tmp_path / "pki"
    try:
        manager = await new_server_manager(str(cert_dir), NODE, client, lambda: NODE_ADDRESSES)
        assert manager.current() is None and manager.next_deadline() <= datetime.datetime.now().timestamp()
        assert await manager.rotate()
        [name] = apiserver.csrs
        spec = apiserver.csrs[name]["spec"]
        assert name.startswith("csr-") and apiserver.requesters[name] == f"system:node:{NODE}"
        assert spec["signerName"] == "kubernetes.io/kubelet-serving"
        assert spec["usages"] == ["digital signature", "server auth"]
        asked = run_openssl("req", "-noout", "-text", stdin=base64.b64decode(spec["request"])).decode()
        assert "DNS:node-a, IP Address:10.0.0.5" in asked
        current = manager.current()
        assert current is not None
        assert (current.info.common_name, current.info.dns_names, current.info.ip_addresses) == (
            f"system:node:{NODE}", (NODE,), ("10.0.0.5",))
        link = cert_dir / "kubelet-server-current.pem"
        assert manager.current_paths() == (str(link), str(link))
        assert os.path.basename(os.readlink(link)).startswith("kubelet-server-2")
        assert mode(os.readlink(link)) == 0o600
        assert manager.next_deadline() == current.deadline  # it fits the template: renewed at the deadline
        assert manager.ttl_seconds() > 0 and manager.rotation_ages == []

        await asyncio.sleep(1.05)  # the pair files are named to the second
        assert await manager.rotate()
        assert len(manager.rotation_ages) == 1 and manager.rotation_ages[0] >= 0
        # the agent's client is the manager's to use, not to close
        await client.list_csrs("metadata.name=x")

        # a new run takes the stored pair
        again = await new_server_manager(str(cert_dir), NODE, client, lambda: NODE_ADDRESSES)
        assert again.current() is not None and again.next_deadline() > datetime.datetime.now().timestamp()
        # a changed address: the certificate no longer fits and is renewed at once
        moved = await new_server_manager(str(cert_dir), NODE, client,
                                         lambda: [{"type": "InternalIP", "address": "10.0.0.6"}])
        assert moved.next_deadline() <= datetime.datetime.now().timestamp()
    finally:
        await client.close()


async def test_without_an_address_nothing_is_asked_for(tmp_path: Path, apiserver: FakeApiserver) -> None:
    client = await node_client(tmp_path, apiserver)
    try:
        manager = await new_server_manager(str(tmp_path / "pki"), NODE, client,
                                           lambda: [{"type": "Hostname", "address": NODE}])
        assert not await manager.rotate()
        assert apiserver.csrs == {} and manager.renew_errors == 1
        clock = Clock(1000.0)
        manager._clock, manager._sleep = clock, clock.sleep
        clock.stop_after = 1.0
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(manager.run(), timeout=5)
        assert clock.sleeps == [1.0] and apiserver.csrs == {}  # it looks again in a second: no backoff, no request
    finally:
        await client.close()


async def test_the_server_store_falls_back_to_the_tls_cert_file(tmp_path: Path, apiserver: FakeApiserver) -> None:
    certificate, key = await node_pair(apiserver.ca, NODE)
    (tmp_path / "serving.crt").write_bytes(certificate)
    (tmp_path / "serving.key").write_bytes(key)
    client = await node_client(tmp_path, apiserver)
    try:
        manager = await new_server_manager(str(tmp_path / "pki"), NODE, client, lambda: NODE_ADDRESSES,
                                           cert_file=str(tmp_path / "serving.crt"),
                                           key_file=str(tmp_path / "serving.key"))
        assert manager.current_paths() == (str(tmp_path / "serving.crt"), str(tmp_path / "serving.key"))
        # it has no SANs, so it does not fit the node's template: renewed at once
        assert manager.next_deadline() <= datetime.datetime.now().timestamp()
    finally:
        await client.close()
