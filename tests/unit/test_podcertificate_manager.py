"""kopflet.podcertificate.manager against a fake apiserver, with real keys and requests from the openssl command and
a test signer that issues with openssl: the request a source makes (the UIDs NodeRestriction checks, a stub request
the key signed), the watch of the node's requests and the wake of the pod, the answers (issued, denied, failed), the
refresh at beginRefreshAt, a request that vanished, the errors upstream logs, and the bundle as projected, used for a
real mutual TLS handshake between two pods' bundles (what the mTLS conformance spec checks).

Also the volume side: kopflet.volumes.plugins projects the bundle (files, modes, owner)."""

from __future__ import annotations

import asyncio
import base64
import datetime
import itertools
import ssl
import subprocess
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from kopflet.api.spec import Pod, pod_from_body
from kopflet.client.kubeapi import KubeApiError
from kopflet.metrics import KubeletMetrics
from kopflet.paths import Layout
from kopflet.podcertificate.manager import PodCertificateManager
from kopflet.volumes import plugins
from kopflet.volumes.plugins import FileEntry, VolumeError

NODE, NODE_UID, NS = "node-a", "node-uid-1", "shop"
T0 = 1_800_000_000.0
SIGNER = "e2e.example.com/signer"
REQUESTS = "/apis/certificates.k8s.io/v1/podcertificaterequests"
NOT_ISSUED = "credential bundle is not issued yet"


def stamp(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def openssl(*args: str, stdin: bytes = b"") -> bytes:
    return subprocess.run(["openssl", *args], input=stdin, capture_output=True, check=True, timeout=60).stdout


def make_pod(name: str = "web", uid: str = "uid-1", *, sources: list[dict[str, Any]] | None = None,
             account: str = "sa", **spec: Any) -> Pod:
    source = {"signerName": SIGNER, "keyType": "ECDSAP256", "credentialBundlePath": "creds.pem"}
    return pod_from_body({
        "metadata": {"name": name, "namespace": NS, "uid": uid},
        "spec": {"serviceAccountName": account, **spec, "containers": [{"name": "app", "image": "busybox"}],
                 "volumes": [{"name": "tls", "projected": {"sources": sources or [{"podCertificate": source}]}}]},
    })


class Signer:
    """A test CA that issues as the e2e's hermetic signer does: a SPIFFE URI (the path from the user annotation
    ``spiffe/path-overriding``, else the ServiceAccount's), client and server usage, the chain leaf then CA."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.key, self.cert = directory / "ca.key", directory / "ca.crt"
        openssl("req", "-x509", "-new", "-nodes", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-keyout", str(self.key), "-out", str(self.cert), "-days", "2", "-subj", "/CN=test-signer",
                "-config", "/dev/null", "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign")
        self.serials = itertools.count(1)

    def issue(self, pcr: Mapping[str, Any]) -> str:
        spec = pcr["spec"]
        request = openssl("req", "-inform", "DER", "-outform", "PEM",
                          stdin=base64.b64decode(spec["stubPKCS10Request"]))
        path = (spec.get("unverifiedUserAnnotations") or {}).get(
            "spiffe/path-overriding", f"/ns/{pcr['metadata']['namespace']}/sa/{spec['serviceAccountName']}")
        serial = next(self.serials)
        (self.directory / f"{serial}.csr").write_bytes(request)
        (self.directory / f"{serial}.cnf").write_text(
            f"subjectAltName=URI:spiffe://cluster.local{path},DNS:localhost\n"
            "keyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth,serverAuth\n")
        leaf = openssl("x509", "-req", "-in", str(self.directory / f"{serial}.csr"), "-CA", str(self.cert),
                       "-CAkey", str(self.key), "-set_serial", str(serial), "-days", "1",
                       "-extfile", str(self.directory / f"{serial}.cnf"))
        return leaf.decode() + self.cert.read_text()


class FakeApi:
    """The apiserver calls the manager makes: ServiceAccounts, PodCertificateRequests (create, list, watch)."""

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.accounts: dict[tuple[str, str], str] = {(NS, "sa"): "sa-uid"}
        self.requests: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str, Mapping[str, str] | None]] = []
        self.create_error: KubeApiError | None = None
        self.version = 100
        self.names = (f"req-{i}" for i in itertools.count(1))
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.before_reply: Any = None  # awaited with the new request before the POST answers

    async def request(self, method: str, path: str, *, body: Any = None, params: Mapping[str, str] | None = None,
                      content_type: str = "application/json") -> dict[str, Any]:
        self.calls.append((method, path, params))
        if "/serviceaccounts/" in path:
            namespace, name = path.split("/")[4], path.split("/")[6]
            if (namespace, name) not in self.accounts:
                raise KubeApiError(404, "NotFound", f'serviceaccounts "{name}" not found', method, path)
            return {"metadata": {"name": name, "uid": self.accounts[namespace, name]}}
        if method == "POST":
            if self.create_error is not None:
                raise self.create_error
            assert path == f"/apis/certificates.k8s.io/v1/namespaces/{body['metadata']['namespace']}" \
                           "/podcertificaterequests"
            name = next(self.names)
            obj = {**body, "metadata": {**body["metadata"], "name": name, "uid": f"uid-{name}",
                                        "creationTimestamp": stamp(self.clock[0])}, "status": {}}
            obj["metadata"].pop("generateName")
            self.requests[name] = obj
            await self.emit("ADDED", obj)
            if self.before_reply is not None:
                await self.before_reply(name)
            return obj
        assert (method, path, params) == ("GET", REQUESTS, {"fieldSelector": f"spec.nodeName={NODE}"})
        return {"items": list(self.requests.values()), "metadata": {"resourceVersion": str(self.version)}}

    async def emit(self, kind: str, obj: dict[str, Any]) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        await self.events.put({"type": kind, "object": obj})

    async def answer(self, name: str, condition: dict[str, Any], **status: Any) -> None:
        obj = self.requests[name]
        obj["status"] = {"conditions": [{"status": "True", "lastTransitionTime": stamp(self.clock[0]), **condition}],
                         **status}
        await self.emit("MODIFIED", obj)

    async def watch(self, path: str, resource_version: str, *, timeout_seconds: int = 300,
                    params: Mapping[str, str] | None = None) -> AsyncIterator[dict[str, Any]]:
        self.calls.append(("WATCH", path, params))
        while True:
            yield await self.events.get()


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def pod_event(self, pod: Pod, type_: str, reason: str, message: str) -> None:
        self.events.append((pod.name, type_, reason, message))


class Harness:
    def __init__(self, tmp: Path) -> None:
        self.clock = [T0]
        self.api = FakeApi(self.clock)
        self.recorder = Recorder()
        self.woken: list[set[str]] = []
        self.node_uid = NODE_UID
        self.signer = Signer(tmp)
        self.manager = PodCertificateManager(
            self.api, NODE, node_uid=lambda: self.node_uid, recorder=self.recorder,  # type: ignore[arg-type]
            wake=self.woken.append, clock=lambda: self.clock[0], jitter=lambda: 30.0)
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.task = asyncio.create_task(self.manager.run())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)

    async def settle(self) -> None:
        """Until the watch has taken every event."""
        for _ in range(200):
            await asyncio.sleep(0)
            if self.api.events.empty():
                break
        await asyncio.sleep(0.01)

    async def issue(self, name: str, *, begin: float = 3000, lifetime: float = 3600) -> None:
        await self.api.answer(name, {"type": "Issued", "reason": "Reason", "message": "Issued"},
                              certificateChain=self.signer.issue(self.api.requests[name]),
                              notBefore=stamp(self.clock[0]), beginRefreshAt=stamp(self.clock[0] + begin),
                              notAfter=stamp(self.clock[0] + lifetime))
        await self.settle()

    def posts(self) -> list[str]:
        return [path for method, path, _ in self.api.calls if method == "POST"]


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    h = Harness(tmp_path)
    await h.start()
    yield h
    await h.stop()


def public_key(pem: bytes) -> bytes:
    return openssl("pkey", "-pubout", stdin=pem)


def certificate_public_key(chain: bytes) -> bytes:
    return openssl("x509", "-noout", "-pubkey", stdin=chain)


# ---------------------------------------------------------------------------------------------- issuance


async def test_a_source_is_requested_then_issued_and_the_pod_woken(harness: Harness) -> None:
    pod = make_pod(sources=[{"configMap": {"name": "ca"}}, {"podCertificate": {
        "signerName": SIGNER, "keyType": "ECDSAP256", "credentialBundlePath": "creds.pem", "maxExpirationSeconds": 3600,
        "userAnnotations": {"spiffe/path-overriding": "/custom-workload"}}}])
    assert await harness.manager.credentials(pod) == {("tls", 1): NOT_ISSUED}
    # The request: the pod's, its ServiceAccount's and the node's names and UIDs (NodeRestriction checks them).
    assert harness.api.calls[0] == ("GET", "/api/v1/namespaces/shop/serviceaccounts/sa", None)
    assert harness.posts() == ["/apis/certificates.k8s.io/v1/namespaces/shop/podcertificaterequests"]
    pcr = harness.api.requests["req-1"]
    assert pcr["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "uid-1"}]
    assert {k: v for k, v in pcr["spec"].items() if k != "stubPKCS10Request"} == {
        "signerName": SIGNER, "podName": "web", "podUID": "uid-1", "serviceAccountName": "sa",
        "serviceAccountUID": "sa-uid", "nodeName": NODE, "nodeUID": NODE_UID, "maxExpirationSeconds": 3600,
        "unverifiedUserAnnotations": {"spiffe/path-overriding": "/custom-workload"}}
    await harness.settle()
    assert harness.woken == [{"uid-1"}]  # ADDED: the source waits on it
    assert await harness.manager.credentials(pod) == {("tls", 1): NOT_ISSUED}  # pending: no second request
    assert len(harness.posts()) == 1

    await harness.issue("req-1")
    assert harness.woken[-1] == {"uid-1"}
    found = await harness.manager.credentials(pod)
    key, chain = found["tls", 1]
    assert public_key(key) == certificate_public_key(chain)  # the key the request was made with
    assert chain.count(b"-----BEGIN CERTIFICATE-----") == 2
    assert b"URI:spiffe://cluster.local/custom-workload" in openssl("x509", "-noout", "-ext", "subjectAltName",
                                                                   stdin=chain)
    assert harness.manager.metric_report() == {(SIGNER, "fresh"): 1}
    assert harness.recorder.events == []


async def test_an_answer_before_the_creations_reply_still_wakes_the_pod(harness: Harness) -> None:
    await harness.manager.credentials(make_pod("other", "uid-0"))  # the watch running
    await harness.settle()
    harness.api.before_reply = harness.issue  # the signer answers, the watch sees it, then the POST replies
    pod = make_pod()
    assert await harness.manager.credentials(pod) == {("tls", 0): NOT_ISSUED}
    assert {"uid-1"} in harness.woken
    assert isinstance((await harness.manager.credentials(pod))["tls", 0], tuple)


async def test_the_watch_lists_with_the_nodes_field_selector_only_once_a_source_exists(harness: Harness) -> None:
    await harness.settle()
    assert harness.api.calls == []  # no podCertificate source yet: nothing listed
    await harness.manager.credentials(make_pod())
    await harness.settle()
    selector = {"fieldSelector": f"spec.nodeName={NODE}"}
    assert ("GET", REQUESTS, selector) in harness.api.calls and ("WATCH", REQUESTS, selector) in harness.api.calls


async def test_without_podcertificate_sources_nothing_happens(harness: Harness) -> None:
    pod = make_pod(sources=[{"configMap": {"name": "ca"}}])
    assert await harness.manager.credentials(pod) == {}
    assert harness.api.calls == []


@pytest.mark.parametrize(("condition", "bundle_error", "event"), [
    ({"type": "Denied", "reason": "UnsupportedKeyType", "message": "use ED25519"},
     'PodCertificateRequest was permanently denied: reason="UnsupportedKeyType" message="use ED25519"',
     ("web", "Warning", "Denied", 'UnsupportedKeyType%!(EXTRA string=PodCertificateRequest shop/req-1 was denied, '
      'reason="UnsupportedKeyType", message="use ED25519")')),
    ({"type": "Failed", "reason": "SignerDown", "message": "try later"},
     'PodCertificateRequest was permanently failed: reason="SignerDown" message="try later"',
     ("web", "Warning", "Failed", 'SignerDown%!(EXTRA string=PodCertificateRequest shop/req-1 failed, '
      'reason="SignerDown", message="try later")')),
])
async def test_denied_and_failed_are_final(harness: Harness, condition: dict[str, Any], bundle_error: str,
                                           event: tuple[str, str, str, str]) -> None:
    pod = make_pod()
    await harness.manager.credentials(pod)
    await harness.api.answer("req-1", condition)
    await harness.settle()
    assert await harness.manager.credentials(pod) == {("tls", 0): bundle_error}
    assert harness.recorder.events == [event]
    harness.clock[0] += 10 * 86400
    assert await harness.manager.credentials(pod) == {("tls", 0): bundle_error}  # final: no new request
    assert len(harness.posts()) == 1 and harness.recorder.events == [event]


# ---------------------------------------------------------------------------------------------- refresh


async def test_refresh_at_begin_refresh_at_plus_jitter_serves_the_old_pair_until_the_new_one(harness: Harness) -> None:
    pod = make_pod()
    await harness.manager.credentials(pod)
    await harness.settle()
    await harness.issue("req-1", begin=3000, lifetime=7200)
    old = (await harness.manager.credentials(pod))["tls", 0]
    harness.clock[0] += 3000 + 29  # beginRefreshAt + the jitter (30 s here) not yet reached
    assert (await harness.manager.credentials(pod))["tls", 0] == old and len(harness.posts()) == 1
    harness.clock[0] += 1
    assert (await harness.manager.credentials(pod))["tls", 0] == old  # the refresh request made, the old pair served
    assert len(harness.posts()) == 2 and harness.api.requests["req-2"]["spec"]["podUID"] == "uid-1"
    await harness.settle()
    harness.clock[0] += 700  # pending and overdue: warned once
    await harness.manager.credentials(pod)
    await harness.manager.credentials(pod)
    assert harness.recorder.events == [("web", "Warning", "CertificateOverdueForRefresh",
                                        "PodCertificate refresh overdue")]
    assert harness.manager.metric_report() == {(SIGNER, "overdue_for_refresh"): 1}
    await harness.issue("req-2")
    new = (await harness.manager.credentials(pod))["tls", 0]
    assert isinstance(new, tuple) and new[0] != old[0] and public_key(new[0]) == certificate_public_key(new[1])
    assert harness.manager.metric_report() == {(SIGNER, "fresh"): 1}


async def test_a_request_never_seen_is_made_again_after_the_threshold(harness: Harness) -> None:
    pod = make_pod()
    await harness.manager.credentials(pod)
    await harness.settle()
    await harness.api.emit("DELETED", harness.api.requests.pop("req-1"))
    await harness.settle()
    harness.clock[0] += 600 + 30  # creationTimestamp + 10 minutes + jitter: not yet
    assert await harness.manager.credentials(pod) == {("tls", 0): NOT_ISSUED}
    assert len(harness.posts()) == 1
    harness.clock[0] += 1  # taken as deleted: initial again, a new request at the next handling
    assert await harness.manager.credentials(pod) == {("tls", 0): NOT_ISSUED}
    assert await harness.manager.credentials(pod) == {("tls", 0): NOT_ISSUED}
    assert len(harness.posts()) == 2


async def test_before_the_watch_has_listed_a_pending_source_waits(tmp_path: Path) -> None:
    h = Harness(tmp_path)  # run() not started: nothing listed
    pod = make_pod()
    await h.manager.credentials(pod)
    h.clock[0] += 86400
    assert await h.manager.credentials(pod) == {("tls", 0): NOT_ISSUED}
    assert len(h.posts()) == 1


# ---------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(("setup", "logged"), [
    (lambda h: h.api.accounts.clear(),
     'while fetching service account: serviceaccounts "sa" not found'),
    (lambda h: setattr(h, "node_uid", ""),
     'while getting node object from local cache: node "node-a" not found'),
    (lambda h: setattr(h.api, "create_error", KubeApiError(
        403, "Forbidden", 'podcertificaterequests.certificates.k8s.io is forbidden: PodCertificateRequest.Spec.'
                          'NodeName="x", which is not the requesting node "node-a"', "POST", "/x")),
     'while creating initial PodCertificateRequest: while creating on API: podcertificaterequests.certificates.k8s.io '
     'is forbidden'),
])
async def test_errors_are_logged_and_the_source_tried_again(harness: Harness, caplog: pytest.LogCaptureFixture,
                                                            setup: Any, logged: str) -> None:
    setup(harness)
    pod = make_pod()
    assert await harness.manager.credentials(pod) == {("tls", 0): NOT_ISSUED}
    assert f"while handling podCertificate projected volume source: {logged}" in caplog.text
    assert "(pod shop/web, volume tls, sourceIndex 0)" in caplog.text
    harness.api.accounts[NS, "sa"], harness.node_uid, harness.api.create_error = "sa-uid", NODE_UID, None
    await harness.manager.credentials(pod)
    assert harness.api.requests  # tried again at the next sync


async def test_an_unknown_key_type_is_upstreams_error(harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    pod = make_pod(sources=[{"podCertificate": {"signerName": SIGNER, "keyType": "DSA", "keyPath": "k"}}])
    assert await harness.manager.credentials(pod) == {("tls", 0): NOT_ISSUED}
    assert ('while creating initial PodCertificateRequest: while generating keypair: unknown key type "DSA"'
            in caplog.text)
    assert harness.posts() == []


async def test_forget_drops_the_pods_sources(harness: Harness) -> None:
    first, second = make_pod(), make_pod("db", "uid-2")
    await harness.manager.credentials(first)
    await harness.manager.credentials(second)
    harness.manager.forget("uid-1")
    assert harness.manager.metric_report() == {(SIGNER, "not_yet_issued"): 1}
    await harness.manager.credentials(first)  # a pod seen again starts over
    assert len(harness.posts()) == 3


def test_the_metric_family() -> None:
    metrics = KubeletMetrics(NODE)
    report = {("a.io/s", "fresh"): 2, ("b.io/s", "denied"): 1}
    metrics.watch_pod_certificates(lambda: report)
    metrics.watch_pod_certificates(lambda: {("c.io/s", "failed"): 1})  # a start tried again: registered once
    text = metrics.exposition()
    assert "# TYPE kubelet_podcertificate_states gauge" in text
    assert 'kubelet_podcertificate_states{signer_name="c.io/s",state="failed"} 1' in text
    assert "a.io/s" not in text


# ---------------------------------------------------------------------------------------- the volume side


KEY, CHAIN = b"-----BEGIN PRIVATE KEY-----\nK\n-----END PRIVATE KEY-----\n", b"-----BEGIN CERTIFICATE-----\nC\n"
LAYOUT = Layout("/var/lib/kopflet")


def files(pod: Pod, certificates: Mapping[tuple[str, int], tuple[bytes, bytes] | str] | None) -> list[FileEntry]:
    plan = plugins.plan_volumes(pod, layout=LAYOUT, config_maps={"ca": {"ca.crt": b"CA"}}, secrets={}, tokens={},
                                pod_certificates=certificates)
    return list(plan["tls"].files or ())


SOURCE = {"signerName": SIGNER, "keyType": "ED25519", "credentialBundlePath": "creds.pem", "keyPath": "tls/key.pem",
          "certificateChainPath": "tls/chain.pem"}


@pytest.mark.parametrize(("spec", "mode", "owner"), [
    ({}, 0o644, None),
    ({"securityContext": {"fsGroup": 2000}}, 0o600, None),  # SetVolumeOwnership then opens it to the group: 0640
    ({"securityContext": {"runAsUser": 1000}}, 0o600, 1000),  # upstream FsUserFrom: every container's user
])
def test_the_volume_projects_the_bundle(spec: dict[str, Any], mode: int, owner: int | None) -> None:
    pod = make_pod(sources=[{"configMap": {"name": "ca"}}, {"podCertificate": SOURCE}], **spec)
    assert files(pod, {("tls", 1): (KEY, CHAIN)}) == [
        FileEntry("ca.crt", b"CA", 0o644),
        FileEntry("creds.pem", KEY + CHAIN, mode, owner),
        FileEntry("tls/chain.pem", CHAIN, mode, owner),
        FileEntry("tls/key.pem", KEY, mode, owner),
    ]


def test_the_source_default_mode_applies() -> None:
    pod = pod_from_body({"metadata": {"name": "web", "namespace": NS, "uid": "u"}, "spec": {
        "containers": [{"name": "app", "image": "busybox"}],
        "volumes": [{"name": "tls", "projected": {"defaultMode": 0o440, "sources": [{"podCertificate": SOURCE}]}}]}})
    assert {entry.mode for entry in files(pod, {("tls", 0): (KEY, CHAIN)})} == {0o440}


@pytest.mark.parametrize(("certificates", "message"), [
    ({("tls", 1): NOT_ISSUED}, f'MountVolume.SetUp failed for volume "tls" : {NOT_ISSUED}'),
    (None, 'MountVolume.SetUp failed for volume "tls" : unimplemented'),  # no manager: upstream's NoOpManager
    ({("tls", 0): (KEY, CHAIN)}, 'MountVolume.SetUp failed for volume "tls" : unimplemented'),  # the wrong index
])
def test_the_volume_fails_with_the_managers_error(certificates: Any, message: str) -> None:
    pod = make_pod(sources=[{"configMap": {"name": "ca"}}, {"podCertificate": SOURCE}])
    with pytest.raises(VolumeError) as raised:
        files(pod, certificates)
    assert str(raised.value) == message


def test_errors_of_several_sources_are_aggregated() -> None:
    pod = make_pod(sources=[{"configMap": {"name": "missing"}}, {"podCertificate": SOURCE}])
    with pytest.raises(VolumeError) as raised:
        plugins.plan_volumes(pod, layout=LAYOUT, config_maps={"missing": None}, secrets={}, tokens={},
                             pod_certificates={("tls", 1): NOT_ISSUED})
    assert str(raised.value) == f'MountVolume.SetUp failed for volume "tls" : [configmap "missing" not found, ' \
                                f'{NOT_ISSUED}]'


@pytest.mark.parametrize(("containers", "pod_user", "expected"), [
    ([{}], 1000, 1000),
    ([{"runAsUser": 1001}], 1000, 1001),
    ([{}, {"runAsUser": 1000}], 1000, 1000),
    ([{}, {"runAsUser": 1001}], 1000, None),  # two users
    ([{}], None, None),  # one without
    ([{"runAsUser": 0}], None, 0),
    ([{"init": True}, {"runAsUser": 1000}], 1000, 1000),  # init containers count too
    ([{"init": True, "runAsUser": 7}, {}], 1000, None),
])
def test_fs_user(containers: list[dict[str, Any]], pod_user: int | None, expected: int | None) -> None:
    def container(i: int, sc: dict[str, Any]) -> dict[str, Any]:
        return {"name": f"c{i}", "image": "busybox", "securityContext": {k: v for k, v in sc.items() if k != "init"}}

    pod = pod_from_body({"metadata": {"name": "p", "namespace": NS, "uid": "u"}, "spec": {
        "securityContext": {} if pod_user is None else {"runAsUser": pod_user},
        "initContainers": [container(i, sc) for i, sc in enumerate(containers) if sc.get("init")],
        "containers": [container(i, sc) for i, sc in enumerate(containers) if not sc.get("init")],
    }})
    assert plugins.fs_user(pod) == expected


# ---------------------------------------------------------------------------------------- mutual TLS


async def test_two_pods_bundles_make_a_mutual_tls_connection(harness: Harness, tmp_path: Path) -> None:
    """The mTLS conformance spec's check: a server and a client, each with its credential bundle file as projected
    and the signer's CA as the trust bundle, complete a handshake that verifies both sides."""
    bundles = {}
    for name, uid in (("server", "uid-s"), ("client", "uid-c")):
        pod = make_pod(name, uid)
        await harness.manager.credentials(pod)
        await harness.settle()
        await harness.issue(next(n for n, r in harness.api.requests.items() if r["spec"]["podUID"] == uid))
        key, chain = (await harness.manager.credentials(pod))["tls", 0]  # type: ignore[misc]
        entry = next(e for e in files(pod, {("tls", 0): (key, chain)}) if e.path == "creds.pem")
        bundles[name] = tmp_path / f"{name}.pem"
        bundles[name].write_bytes(entry.data)
        assert entry.data.startswith(b"-----BEGIN PRIVATE KEY-----")

    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(bundles["server"])  # the key, then the chain, from one file
    server_context.load_verify_locations(harness.signer.cert)
    server_context.verify_mode = ssl.CERT_REQUIRED
    client_context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_context.load_cert_chain(bundles["client"])
    client_context.load_verify_locations(harness.signer.cert)
    seen: list[Any] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(writer.get_extra_info("peercert"))
        writer.write(b"hello")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_context)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_context,
                                                       server_hostname="localhost")
        assert await reader.read() == b"hello"
        peer = writer.get_extra_info("peercert")
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
    assert ("URI", "spiffe://cluster.local/ns/shop/sa/sa") in peer["subjectAltName"]
    assert ("URI", "spiffe://cluster.local/ns/shop/sa/sa") in seen[0]["subjectAltName"]  # the client's, verified
