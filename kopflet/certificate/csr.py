"""The CertificateSigningRequest a kubelet sends for its client certificate, and what an answer to it means. Pure.

Upstream: pkg/kubelet/certificate/bootstrap/bootstrap.go (requestNodeCertificate, digestedName), client-go
util/certificate/csr/csr.go (RequestCertificateWithContext, WaitForCertificate) and
util/certificate/certificate_manager.go (DefaultKubeletClientGetUsages, certificateWaitTimeout), v1.37.1.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any

# certificatesv1.KubeAPIServerClientKubeletSignerName: the signer of kubelets' client certificates, which the
# controller-manager's csrapproving controller auto-approves (nodeclient, selfnodeclient).
SIGNER_NAME = "kubernetes.io/kube-apiserver-client-kubelet"
# certificatesv1.KubeletServingSignerName: the signer of kubelets' serving certificates. Nothing in the cluster
# approves these requests by itself (the csrapproving controller leaves them alone): an admin or an approver does.
SERVING_SIGNER_NAME = "kubernetes.io/kubelet-serving"
NODES_GROUP = "system:nodes"
NODE_USER_PREFIX = "system:node:"
CSR_PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests"

# certificatesv1.KeyUsage values.
USAGE_DIGITAL_SIGNATURE = "digital signature"
USAGE_KEY_ENCIPHERMENT = "key encipherment"
USAGE_CLIENT_AUTH = "client auth"
USAGE_SERVER_AUTH = "server auth"

# bootstrap.go requestNodeCertificate: context.WithTimeout(ctx, 3600*time.Second) around WaitForCertificate.
BOOTSTRAP_WAIT_TIMEOUT = 3600.0
# certificate_manager.go certificateWaitTimeout: one rotation attempt waits 15 minutes for approval.
ROTATION_WAIT_TIMEOUT = 15 * 60.0
# RequestCertificateWithContext: a request without a name gets one from the apiserver (the rotation's).
GENERATE_NAME = "csr-"

# The DER of the rsaEncryption OID (1.2.840.113549.1.1.1), as it appears in an RSA SubjectPublicKeyInfo.
_RSA_OID_DER = bytes.fromhex("06092a864886f70d010101")


class CsrError(Exception):
    """The request failed or cannot be waited for; the message is upstream's."""


class CsrDenied(CsrError):
    """The request was Denied or Failed: asking again with the same one would not help."""


@dataclasses.dataclass(frozen=True)
class Subject:
    """An X.509 subject as the kubelet's template has it: one CommonName, Organizations in order."""

    common_name: str
    organizations: tuple[str, ...] = ()

    def openssl(self) -> str:
        """``-subj`` for ``openssl req``, in Go's pkix.Name order (O before CN): ``/O=system:nodes/CN=...``."""
        parts = [("O", o) for o in self.organizations] + [("CN", self.common_name)]
        return "".join(f"/{kind}={_escape_subj(value)}" for kind, value in parts)


def _escape_subj(value: str) -> str:
    return value.replace("\\", "\\\\").replace("/", "\\/").replace("+", "\\+")


def node_subject(node_name: str) -> Subject:
    """O=system:nodes, CN=system:node:<name>: what the Node authorizer and NodeRestriction recognise."""
    return Subject(f"{NODE_USER_PREFIX}{node_name}", (NODES_GROUP,))


@dataclasses.dataclass(frozen=True)
class Template:
    """What a request asks for (x509.CertificateRequest's template): the subject, and for a serving certificate the
    names the node is reached by (subjectAltName), sorted as upstream sorts them."""

    subject: Subject
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()

    def openssl_san(self) -> str:
        """``subjectAltName`` for ``openssl req -addext`` (``DNS:a,IP:10.0.0.1``); "" without names."""
        return ",".join([f"DNS:{n}" for n in self.dns_names] + [f"IP:{ip}" for ip in self.ip_addresses])


def client_template(node_name: str) -> Template:
    """NewKubeletClientCertificateManager's template: the node's subject, no names."""
    return Template(node_subject(node_name))


def serving_template(node_name: str, addresses: Sequence[Mapping[str, str]], *,
                     allow_dns_only: bool = False) -> Template | None:
    """newGetTemplateFn: the node's subject with its status addresses as subjectAltNames (addressesToHostnamesAndIPs:
    a Hostname is an IP or a DNS name, Internal/ExternalIP IPs, Internal/ExternalDNS names; deduplicated, sorted as
    strings). None, so nothing is asked for, while the node has no IP address (AllowDNSOnlyNodeCSR, off by default,
    also takes DNS names alone)."""
    dns_names: set[str] = set()
    ips: set[str] = set()
    for address in addresses:
        kind, value = address.get("type", ""), address.get("address", "")
        if not value:
            continue
        ip = _ip(value)
        if kind == "Hostname":
            (ips if ip else dns_names).add(ip or value)
        elif kind in ("InternalIP", "ExternalIP"):
            if ip:
                ips.add(ip)
        elif kind in ("InternalDNS", "ExternalDNS"):
            dns_names.add(value)
    if not ips and not (allow_dns_only and dns_names):
        return None
    return Template(node_subject(node_name), tuple(sorted(dns_names)), tuple(sorted(ips)))


def _ip(text: str) -> str:
    """The IP in Go's canonical text (net.IP.String), "" when ``text`` is not one (ParseIPSloppy also takes
    leading zeros in IPv4 parts)."""
    candidate = text
    if "." in text and ":" not in text:
        parts = text.split(".")
        if len(parts) == 4 and all(p.isdigit() for p in parts):
            candidate = ".".join(str(int(p)) for p in parts)
    try:
        return str(ipaddress.ip_address(candidate))
    except ValueError:
        return ""


def is_rsa_public_key(public_key_der: bytes) -> bool:
    """Whether a SubjectPublicKeyInfo (DER) holds an RSA key."""
    return _RSA_OID_DER in public_key_der


def client_usages(rsa: bool) -> tuple[str, ...]:
    """DefaultKubeletClientGetUsages: digital signature and client auth; key encipherment too for RSA keys."""
    if rsa:
        return (USAGE_DIGITAL_SIGNATURE, USAGE_KEY_ENCIPHERMENT, USAGE_CLIENT_AUTH)
    return (USAGE_DIGITAL_SIGNATURE, USAGE_CLIENT_AUTH)


def serving_usages(rsa: bool) -> tuple[str, ...]:
    """DefaultKubeletServingGetUsages: digital signature and server auth; key encipherment too for RSA keys."""
    if rsa:
        return (USAGE_DIGITAL_SIGNATURE, USAGE_KEY_ENCIPHERMENT, USAGE_SERVER_AUTH)
    return (USAGE_DIGITAL_SIGNATURE, USAGE_SERVER_AUTH)


def digested_name(public_key_der: bytes, subject: Subject, usages: Sequence[str]) -> str:
    """``node-csr-<hash>``, bootstrap.go digestedName: SHA-512/256 over the base64url (unpadded) public key,
    CommonName, Organizations and usages, each followed by ``|``. The same key asks under the same name, so a
    restarted bootstrap finds its earlier request instead of making another."""
    digest = hashlib.new("sha512_256")
    for data in (public_key_der, subject.common_name.encode(), *(o.encode() for o in subject.organizations),
                 *(u.encode() for u in usages)):
        digest.update(_b64url(data).encode())
        digest.update(b"|")
    return f"node-csr-{_b64url(digest.digest())}"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def csr_object(request_pem: bytes, usages: Sequence[str], *, name: str = "", signer_name: str = SIGNER_NAME,
               expiration_seconds: int | None = None) -> dict[str, Any]:
    """The certificates.k8s.io/v1 object RequestCertificateWithContext creates: named, or ``generateName: csr-``
    without a name; ``expirationSeconds`` only when a lifetime is asked for (the kubelet asks for none)."""
    metadata: dict[str, Any] = {"name": name} if name else {"generateName": GENERATE_NAME}
    spec: dict[str, Any] = {"request": base64.b64encode(request_pem).decode(), "signerName": signer_name,
                            "usages": list(usages)}
    if expiration_seconds is not None:
        spec["expirationSeconds"] = int(expiration_seconds)
    return {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": metadata,
            "spec": spec}


def issued_certificate(event_type: str | None, obj: Mapping[str, Any], uid: str) -> bytes | None:
    """One watch event of the request (WaitForCertificate's condition): the certificate once Approved and issued,
    None to keep waiting. CsrError when it was deleted or replaced, CsrDenied when Denied or Failed, each with
    upstream's message (the caller prefixes "cannot watch on the certificate signing request: ")."""
    name = str((obj.get("metadata") or {}).get("name", ""))
    if event_type == "DELETED":
        raise CsrError(f'csr "{name}" was deleted')
    if event_type not in (None, "ADDED", "MODIFIED"):
        return None
    if str((obj.get("metadata") or {}).get("uid", "")) != uid:
        raise CsrError(f'csr "{name}" changed UIDs')
    status = obj.get("status") or {}
    approved = False
    for condition in status.get("conditions") or []:
        kind, reason, message = condition.get("type"), condition.get("reason", ""), condition.get("message", "")
        if kind == "Denied":
            raise CsrDenied(f"certificate signing request is denied, reason: {reason}, message: {message}")
        if kind == "Failed":
            raise CsrDenied(f"certificate signing request failed, reason: {reason}, message: {message}")
        if kind == "Approved":
            approved = True
    certificate = status.get("certificate")
    if approved and certificate:
        return base64.b64decode(certificate)
    return None


def waiting_error(problem: str) -> str:
    """WaitForCertificate's formatError around whatever ended the wait."""
    return f"cannot watch on the certificate signing request: {problem}"


# wait.ErrorInterrupted's message: the wait's deadline passed.
TIMED_OUT = "timed out waiting for the condition"
