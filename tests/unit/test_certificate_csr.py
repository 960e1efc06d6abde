"""kopflet.certificate.csr: the client certificate's request as upstream's kubelet sends it (bootstrap.go
requestNodeCertificate and digestedName, client-go csr.go) and how an answer to it is read (WaitForCertificate)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from kopflet.certificate import csr
from kopflet.certificate.csr import Subject

# A P-256 SubjectPublicKeyInfo, and the name upstream's digestedName gives a request for node-a with it (computed
# with Go's crypto/sha512 New512_256 and base64.RawURLEncoding, as bootstrap.go does).
P256_SPKI = bytes.fromhex(
    "3059301306072a8648ce3d020106082a8648ce3d030107034200047167cc9f99b7e56dc846fa3cf05793112d7c643f968201e0fcb4e3"
    "6efc05d01180e978f9a02ed15b1f54b99040e6bb1fdb3446cd85c31ac87a29a4243db177ca")
P256_NODE_A_NAME = "node-csr-vfoFoS9Ml2QrcccmIcmdym6Xe1H08a4TuQ2iLeKwEXw"
# The head of an RSA SubjectPublicKeyInfo: SEQUENCE { SEQUENCE { OID rsaEncryption, NULL } ...
RSA_SPKI_HEAD = bytes.fromhex("30820122300d06092a864886f70d0101010500")


def test_the_node_subject_is_what_the_node_authorizer_recognises() -> None:
    assert csr.node_subject("node-a") == Subject("system:node:node-a", ("system:nodes",))


@pytest.mark.parametrize(("subject", "arg"), [
    (Subject("system:node:node-a", ("system:nodes",)), "/O=system:nodes/CN=system:node:node-a"),
    (Subject("cn", ()), "/CN=cn"),
    (Subject("a/b+c\\d", ("x", "y")), "/O=x/O=y/CN=a\\/b\\+c\\\\d"),
])
def test_openssl_subject_puts_organizations_first_and_escapes(subject: Subject, arg: str) -> None:
    assert subject.openssl() == arg


@pytest.mark.parametrize(("spki", "rsa", "usages"), [
    (P256_SPKI, False, ("digital signature", "client auth")),
    (RSA_SPKI_HEAD + b"\x03\x82\x01\x0f\x00", True, ("digital signature", "key encipherment", "client auth")),
])
def test_usages_follow_the_key_type(spki: bytes, rsa: bool, usages: tuple[str, ...]) -> None:
    assert csr.is_rsa_public_key(spki) is rsa
    assert csr.client_usages(rsa) == usages


def test_digested_name_matches_upstream() -> None:
    assert csr.digested_name(P256_SPKI, csr.node_subject("node-a"), csr.client_usages(False)) == P256_NODE_A_NAME


@pytest.mark.parametrize("change", [
    lambda s, u: (csr.node_subject("node-b"), u),
    lambda s, u: (Subject(s.common_name, ()), u),
    lambda s, u: (s, (*u, "key encipherment")),
    lambda s, u: (Subject("system:node:node-", ("asystem:nodes",)), u),  # the delimiter keeps fields apart
])
def test_digested_name_changes_with_any_input(change: Any) -> None:
    subject, usages = change(csr.node_subject("node-a"), csr.client_usages(False))
    assert csr.digested_name(P256_SPKI, subject, usages) != P256_NODE_A_NAME


@pytest.mark.parametrize(("kwargs", "metadata", "extra_spec"), [
    ({}, {"generateName": "csr-"}, {}),
    ({"name": P256_NODE_A_NAME}, {"name": P256_NODE_A_NAME}, {}),
    ({"expiration_seconds": 600}, {"generateName": "csr-"}, {"expirationSeconds": 600}),
])
def test_csr_object(kwargs: dict[str, Any], metadata: dict[str, str], extra_spec: dict[str, Any]) -> None:
    body = csr.csr_object(b"-----BEGIN CERTIFICATE REQUEST-----\n", ["digital signature", "client auth"], **kwargs)
    assert body == {
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": metadata,
        "spec": {"request": base64.b64encode(b"-----BEGIN CERTIFICATE REQUEST-----\n").decode(),
                 "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                 "usages": ["digital signature", "client auth"], **extra_spec},
    }


CERT = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def obj(*conditions: tuple[str, str, str], certificate: bytes = b"", uid: str = "u1") -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": [{"type": t, "reason": r, "message": m} for t, r, m in conditions]}
    if certificate:
        status["certificate"] = base64.b64encode(certificate).decode()
    return {"metadata": {"name": "csr-x", "uid": uid}, "status": status}


@pytest.mark.parametrize(("event", "body", "expected"), [
    ("ADDED", obj(), None),
    ("MODIFIED", obj(("Approved", "AutoApproved", "ok")), None),  # approved, waiting to be issued
    ("MODIFIED", obj(("Approved", "AutoApproved", "ok"), certificate=CERT), CERT),
    (None, obj(("Approved", "", ""), certificate=CERT), CERT),  # a listed object
    ("MODIFIED", obj(certificate=CERT), None),  # a certificate without approval is not taken
    ("BOOKMARK", obj(uid="other"), None),
    ("ERROR", {}, None),
])
def test_issued_certificate(event: str | None, body: dict[str, Any], expected: bytes | None) -> None:
    assert csr.issued_certificate(event, body, "u1") == expected


@pytest.mark.parametrize(("event", "body", "error", "message"), [
    ("MODIFIED", obj(("Denied", "NotMine", "no thanks")), csr.CsrDenied,
     "certificate signing request is denied, reason: NotMine, message: no thanks"),
    ("MODIFIED", obj(("Approved", "", ""), ("Failed", "SignerError", "bad CA")), csr.CsrDenied,
     "certificate signing request failed, reason: SignerError, message: bad CA"),
    ("DELETED", obj(), csr.CsrError, 'csr "csr-x" was deleted'),
    ("MODIFIED", obj(uid="u2"), csr.CsrError, 'csr "csr-x" changed UIDs'),
])
def test_issued_certificate_errors(event: str, body: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error) as info:
        csr.issued_certificate(event, body, "u1")
    assert str(info.value) == message


def test_waiting_error_and_timeouts_are_upstreams() -> None:
    assert csr.waiting_error("x") == "cannot watch on the certificate signing request: x"
    assert (csr.BOOTSTRAP_WAIT_TIMEOUT, csr.ROTATION_WAIT_TIMEOUT) == (3600.0, 900.0)


def _addresses(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"type": kind, "address": value} for kind, value in pairs]


@pytest.mark.parametrize(("addresses", "dns", "ips"), [
    # kopflet's own node addresses: InternalIP and Hostname
    (_addresses(("InternalIP", "10.0.0.5"), ("Hostname", "node-a")), ("node-a",), ("10.0.0.5",)),
    # a Hostname that is an IP is an IP; duplicates go; names and IPs sorted as strings
    (_addresses(("Hostname", "10.0.0.9"), ("InternalIP", "10.0.0.9"), ("ExternalIP", "10.0.0.10"),
                ("InternalDNS", "b.example"), ("ExternalDNS", "a.example")),
     ("a.example", "b.example"), ("10.0.0.10", "10.0.0.9")),
    # an InternalIP that is not an IP is skipped; empty addresses too; IPv6 canonical
    (_addresses(("InternalIP", "not-an-ip"), ("InternalIP", ""), ("ExternalIP", "2001:DB8::1"),
                ("Hostname", "n")), ("n",), ("2001:db8::1",)),
    (_addresses(("InternalIP", "010.000.000.001")), (), ("10.0.0.1",)),  # ParseIPSloppy's leading zeros
])
def test_serving_template_names_the_node_addresses(addresses: list[dict[str, str]], dns: tuple[str, ...],
                                                   ips: tuple[str, ...]) -> None:
    template = csr.serving_template("node-a", addresses)
    assert template == csr.Template(csr.node_subject("node-a"), dns, ips)


def test_serving_template_needs_an_ip_unless_dns_only_is_allowed() -> None:
    addresses = _addresses(("Hostname", "node-a"), ("InternalDNS", "node-a.example"))
    assert csr.serving_template("node-a", addresses) is None  # AllowDNSOnlyNodeCSR is off by default
    assert csr.serving_template("node-a", addresses, allow_dns_only=True) == csr.Template(
        csr.node_subject("node-a"), ("node-a", "node-a.example"), ())
    assert csr.serving_template("node-a", []) is None


def test_template_subject_alt_names_for_openssl() -> None:
    template = csr.Template(csr.node_subject("a"), ("a", "a.example"), ("10.0.0.1", "2001:db8::1"))
    assert template.openssl_san() == "DNS:a,DNS:a.example,IP:10.0.0.1,IP:2001:db8::1"
    assert csr.client_template("a").openssl_san() == ""


@pytest.mark.parametrize(("rsa", "usages"), [
    (False, ("digital signature", "server auth")),
    (True, ("digital signature", "key encipherment", "server auth")),
])
def test_serving_usages_follow_the_key_type(rsa: bool, usages: tuple[str, ...]) -> None:
    assert csr.serving_usages(rsa) == usages
