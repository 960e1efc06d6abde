"""kopflet.podcertificate.states: the podCertificate sources of a pod, the PodCertificateRequest made for one, its
chain as projected, the state machine of upstream's IssuingManager (each transition, its events and errors, with
upstream's messages), the metrics' states and the files a source projects."""

from __future__ import annotations

import base64
import dataclasses
import datetime
from typing import Any

import pytest

from kopflet.api.spec import pod_from_body
from kopflet.podcertificate import states
from kopflet.podcertificate.states import (
    BundleError,
    Denied,
    Event,
    Failed,
    Fresh,
    Initial,
    ProjectionKey,
    Source,
    Step,
    Wait,
    WaitRefresh,
)

NS, POD, UID = "shop", "web", "uid-1"
KEY, KEY2 = b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", b"-----BEGIN PRIVATE KEY-----\nBB\n"
T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
DER1, DER2 = bytes(range(100)), b"\x30\x03\x02\x01\x05"


def pem(der: bytes, kind: str = "CERTIFICATE") -> str:
    return states.pem_encode(kind, der)


CHAIN = pem(DER1) + pem(DER2)


def stamp(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -------------------------------------------------------------------------------------------- key types


@pytest.mark.parametrize(("name", "label", "algorithm", "digest"), [
    ("RSA3072", "RSA 3072", "rsa_keygen_bits:3072", "-sha256"),
    ("RSA4096", "RSA 4096", "rsa_keygen_bits:4096", "-sha256"),
    ("ECDSAP256", "ECDSA P256", "ec_paramgen_curve:P-256", "-sha256"),
    ("ECDSAP384", "ECDSA P384", "ec_paramgen_curve:P-384", "-sha384"),
    ("ECDSAP521", "ECDSA P521", "ec_paramgen_curve:P-521", "-sha512"),
    ("ED25519", "Ed25519", "ED25519", ""),
])
def test_key_types_sign_as_go_picks_for_the_key(name: str, label: str, algorithm: str, digest: str) -> None:
    kind = states.key_type(name)
    assert (kind.label, kind.genpkey[-1], kind.digest) == (label, algorithm, digest)


@pytest.mark.parametrize("name", ["", "ECDSA", "rsa3072", "RSA2048"])
def test_unknown_key_types(name: str) -> None:
    with pytest.raises(ValueError, match=f'^unknown key type "{name}"$'):
        states.key_type(name)


# ---------------------------------------------------------------------------------------------- sources


def make_pod(volumes: list[dict[str, Any]], **spec: Any) -> Any:
    return pod_from_body({"metadata": {"name": POD, "namespace": NS, "uid": UID},
                          "spec": {"serviceAccountName": "sa", "volumes": volumes, **spec,
                                   "containers": [{"name": "app", "image": "busybox"}]}})


CERT_SOURCE = {"signerName": "example.com/s", "keyType": "ED25519", "credentialBundlePath": "creds.pem"}


def test_projections_are_every_podcertificate_source_with_its_index_in_its_volume() -> None:
    pod = make_pod([
        {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}},
        {"name": "tls", "projected": {"sources": [
            {"configMap": {"name": "ca"}},
            {"podCertificate": CERT_SOURCE},
            {"podCertificate": {**CERT_SOURCE, "keyType": "RSA3072", "credentialBundlePath": "b.pem"}},
        ]}},
        {"name": "scratch", "emptyDir": {}},
    ])
    found = states.projections(pod)
    assert [key for key, _ in found] == [ProjectionKey(NS, POD, UID, "tls", 1), ProjectionKey(NS, POD, UID, "tls", 2)]
    assert [source.key_type for _, source in found] == ["ED25519", "RSA3072"]


@pytest.mark.parametrize(("body", "expected"), [
    (CERT_SOURCE, Source("example.com/s", "ED25519", None, "creds.pem")),
    ({**CERT_SOURCE, "maxExpirationSeconds": 3600, "keyPath": "k", "certificateChainPath": "c",
      "userAnnotations": {"spiffe/path-overriding": "/custom"}},
     Source("example.com/s", "ED25519", 3600, "creds.pem", "k", "c", (("spiffe/path-overriding", "/custom"),))),
    ({"signerName": "x/y", "keyType": "ECDSAP256", "userAnnotations": {}, "maxExpirationSeconds": True},
     Source("x/y", "ECDSAP256", None, user_annotations=())),
])
def test_source_from_body(body: dict[str, Any], expected: Source) -> None:
    assert Source.from_body(body) == expected


# ------------------------------------------------------------------------------------------ the request


WHO = states.Identity(NS, POD, UID, "sa", "sa-uid", "node-a", "node-uid")


@pytest.mark.parametrize(("source", "extra"), [
    (Source("example.com/s", "ED25519"), {}),
    (Source("example.com/s", "ED25519", user_annotations=()), {}),  # an empty map is left out (omitempty)
    (Source("example.com/s", "ED25519", 7200, user_annotations=(("a.io/k", "v"),)),
     {"maxExpirationSeconds": 7200, "unverifiedUserAnnotations": {"a.io/k": "v"}}),
])
def test_request_body(source: Source, extra: dict[str, Any]) -> None:
    body = states.request_body(WHO, source, b"\x30\x00")
    assert body == {
        "apiVersion": "certificates.k8s.io/v1", "kind": "PodCertificateRequest",
        "metadata": {"namespace": NS, "generateName": "req-",
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": POD, "uid": UID}]},
        "spec": {"signerName": "example.com/s", "podName": POD, "podUID": UID, "serviceAccountName": "sa",
                 "serviceAccountUID": "sa-uid", "nodeName": "node-a", "nodeUID": "node-uid",
                 "stubPKCS10Request": "MAA=", **extra},
    }


def test_requests_paths() -> None:
    assert states.requests_path() == "/apis/certificates.k8s.io/v1/podcertificaterequests"
    assert states.requests_path("ns") == "/apis/certificates.k8s.io/v1/namespaces/ns/podcertificaterequests"


@pytest.mark.parametrize(("chain", "expected"), [
    (CHAIN, CHAIN),
    ("junk before\n" + pem(DER1) + "between\n\n" + pem(DER2) + "after", CHAIN),
    # headers dropped, every block becomes a CERTIFICATE, the body re-wrapped at 64 characters
    ("-----BEGIN X509 CERTIFICATE-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: x\n\n"
     + base64.b64encode(DER1).decode() + "\n-----END X509 CERTIFICATE-----\n" + pem(DER2).replace("\n", "\r\n"),
     CHAIN),
    ("-----BEGIN CERTIFICATE-----\n!!not base64!!\n-----END CERTIFICATE-----\n" + pem(DER2), pem(DER2)),
    ("", ""),
])
def test_clean_certificate_chain(chain: str, expected: str) -> None:
    assert states.clean_certificate_chain(chain) == expected.encode()


def test_pem_encoding_is_gos() -> None:
    text = states.pem_encode("CERTIFICATE", bytes(range(49)))
    lines = text.splitlines()
    assert lines[0] == "-----BEGIN CERTIFICATE-----" and lines[-1] == "-----END CERTIFICATE-----"
    assert [len(line) for line in lines[1:-1]] == [64, 4] and text.endswith("\n")


# ------------------------------------------------------------------------------------------------ states


FRESH = Fresh(KEY, CHAIN.encode(), begin_refresh_at=T0 + 3600, not_after=T0 + 7200)
WAIT = Wait(KEY, "req-abc", abandon_at=T0 + 600)
REFRESHING = WaitRefresh(FRESH, KEY2, "req-new", abandon_at=T0 + 4200)


@pytest.mark.parametrize(("state", "expected"), [
    (Initial(), "credential bundle is not issued yet"),
    (WAIT, "credential bundle is not issued yet"),
    (Denied("UnsupportedKeyType", 'use "ED25519"'),
     'PodCertificateRequest was permanently denied: reason="UnsupportedKeyType" message="use \\"ED25519\\""'),
    (Failed("SignerDown", "no"), 'PodCertificateRequest was permanently failed: reason="SignerDown" message="no"'),
    (FRESH, (KEY, CHAIN.encode())),
    (REFRESHING, (KEY, CHAIN.encode())),  # the old pair until the refresh is issued
])
def test_credential_bundle(state: states.State, expected: tuple[bytes, bytes] | str) -> None:
    if isinstance(expected, str):
        with pytest.raises(BundleError) as raised:
            states.credential_bundle(state)
        assert str(raised.value) == expected
    else:
        assert states.credential_bundle(state) == expected


def request(*conditions: dict[str, Any], **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "req-abc", "namespace": NS}, "status": {"conditions": list(conditions), **status}}


ISSUED = request({"type": "Issued", "status": "True", "reason": "Reason", "message": "Issued"},
                 certificateChain="x\n" + CHAIN, beginRefreshAt=stamp(T0 + 3000), notAfter=stamp(T0 + 3600))
DENY = {"type": "Denied", "status": "True", "reason": "InvalidUnverifiedUserAnnotations", "message": 'bad "key"'}
FAIL = {"type": "Failed", "status": "True", "reason": "SignerError", "message": "boom"}
DENIED_EVENT = Event("Warning", "Denied", 'InvalidUnverifiedUserAnnotations%!(EXTRA string=PodCertificateRequest '
                     'shop/req-abc was denied, reason="InvalidUnverifiedUserAnnotations", message="bad \\"key\\"")')
FAILED_EVENT = Event("Warning", "Failed", 'SignerError%!(EXTRA string=PodCertificateRequest shop/req-new failed, '
                     'reason="SignerError", message="boom")')
NOT_FOUND = 'while getting PodCertificateRequest "shop/req-abc": podcertificaterequest.certificates.k8s.io ' \
            '"req-abc" not found'
OVERDUE = Event("Warning", "CertificateOverdueForRefresh", "PodCertificate refresh overdue")
EXPIRED = Event("Warning", "CertificateExpired", "PodCertificate expired")

OBSERVED_CASES: list[tuple[str, states.Wait | WaitRefresh, dict[str, Any] | None, float, Step]] = [
    ("pending", WAIT, request(), T0, Step(WAIT)),
    ("pending, other conditions only", WAIT, request({"type": "Progressing", "status": "True"}), T0, Step(WAIT)),
    ("not seen yet", WAIT, None, T0 + 600, Step(WAIT, error=NOT_FOUND)),
    ("not seen past the abandon time: made again", WAIT, None, T0 + 601,
     Step(Initial(), error='PodCertificateRequest "shop/req-abc" appears to have been deleted')),
    ("issued: the chain cleaned, beginRefreshAt jittered", WAIT, ISSUED, T0,
     Step(Fresh(KEY, CHAIN.encode(), begin_refresh_at=T0 + 3000 + 42, not_after=T0 + 3600))),
    ("denied", WAIT, request(DENY), T0, Step(Denied(DENY["reason"], DENY["message"]), (DENIED_EVENT,))),
    ("the first settling condition wins, whatever its status", WAIT, request({**DENY, "status": "False"}, FAIL), T0,
     Step(Denied(DENY["reason"], DENY["message"]), (DENIED_EVENT,))),
    ("refresh issued: the new key", REFRESHING, {**ISSUED, "metadata": {"name": "req-new"}}, T0,
     Step(Fresh(KEY2, CHAIN.encode(), begin_refresh_at=T0 + 3000 + 42, not_after=T0 + 3600))),
    ("refresh failed", REFRESHING, request(FAIL), T0, Step(Failed("SignerError", "boom"), (FAILED_EVENT,))),
    ("refresh pending", REFRESHING, request(), T0 + 3600, Step(REFRESHING)),
    ("refresh pending and overdue", REFRESHING, request(), T0 + 4201,
     Step(dataclasses.replace(REFRESHING, current=dataclasses.replace(FRESH, overdue_event_emitted=True)),
          (OVERDUE,))),
    ("refresh pending and expired", REFRESHING, request(), T0 + 7201,
     Step(dataclasses.replace(REFRESHING, current=dataclasses.replace(
         FRESH, overdue_event_emitted=True, expired_event_emitted=True)), (OVERDUE, EXPIRED))),
    ("refresh pending, warned already", dataclasses.replace(REFRESHING, current=dataclasses.replace(
        FRESH, overdue_event_emitted=True, expired_event_emitted=True)), request(), T0 + 9000,
     Step(dataclasses.replace(REFRESHING, current=dataclasses.replace(
         FRESH, overdue_event_emitted=True, expired_event_emitted=True)))),
    ("refresh not seen past the abandon time: fresh again, a new request next", REFRESHING, None, T0 + 4201,
     Step(FRESH, error="PodCertificateRequest appears to have been deleted")),
]


@pytest.mark.parametrize(("state", "pcr", "now", "expected"), [case[1:] for case in OBSERVED_CASES],
                         ids=[case[0] for case in OBSERVED_CASES])
def test_observed(state: states.Wait | WaitRefresh, pcr: dict[str, Any] | None, now: float, expected: Step) -> None:
    assert states.observed(state, NS, pcr, now=now, jitter=42) == expected


@pytest.mark.parametrize(("now", "due", "events"), [
    (T0 + 3599, False, ()),
    (T0 + 3600, True, ()),
    (T0 + 4200, True, ()),
    (T0 + 4201, True, (OVERDUE,)),
    (T0 + 7201, True, (OVERDUE, EXPIRED)),
])
def test_refresh(now: float, due: bool, events: tuple[Event, ...]) -> None:
    assert states.refresh_due(FRESH, now) is due
    after, posted = states.refresh_events(FRESH, now)
    assert posted == events
    assert states.refresh_events(after, now)[1] == ()  # each warning once


@pytest.mark.parametrize(("state", "expected"), [
    (Initial(), Wait(KEY2, "req-x", T0 + 600 + 7)),
    (FRESH, WaitRefresh(FRESH, KEY2, "req-x", T0 + 600 + 7)),
])
def test_created(state: Initial | Fresh, expected: Wait | WaitRefresh) -> None:
    answer = {"metadata": {"name": "req-x", "namespace": NS, "creationTimestamp": stamp(T0)}}
    assert states.created(state, KEY2, answer, 7) == expected


@pytest.mark.parametrize(("state", "now", "expected"), [
    (Initial(), T0, "not_yet_issued"),
    (WAIT, T0, "not_yet_issued"),
    (Denied("a", "b"), T0, "denied"),
    (Failed("a", "b"), T0, "failed"),
    (FRESH, T0, "fresh"),
    (FRESH, T0 + 4200, "fresh"),
    (FRESH, T0 + 4201, "overdue_for_refresh"),
    (REFRESHING, T0 + 4201, "overdue_for_refresh"),
    (REFRESHING, T0 + 7201, "expired"),
])
def test_metrics_state(state: states.State, now: float, expected: str) -> None:
    assert states.metrics_state(state, now) == expected


# ------------------------------------------------------------------------------------------------- files


@pytest.mark.parametrize(("paths", "expected"), [
    (("creds.pem", "", ""), {"creds.pem": KEY + b"CHAIN"}),
    (("", "tls.key", "tls.crt"), {"tls.key": KEY, "tls.crt": b"CHAIN"}),
    (("all.pem", "k/tls.key", "c/tls.crt"), {"all.pem": KEY + b"CHAIN", "k/tls.key": KEY, "c/tls.crt": b"CHAIN"}),
    (("", "", ""), {}),
])
def test_files(paths: tuple[str, str, str], expected: dict[str, bytes]) -> None:
    source = Source("s/x", "ED25519", credential_bundle_path=paths[0], key_path=paths[1],
                    certificate_chain_path=paths[2])
    assert states.files(source, KEY, b"CHAIN") == expected
