"""
What a podCertificate projected volume source asks for, and where each source stands.

Mirrors upstream pkg/kubelet/podcertificate/podcertificatemanager.go (v1.37.1): one record per source
(namespace, pod, pod UID, volume, index of the source in the volume's ``sources``), moving through

    initial ──► wait ──► fresh ──► waitrefresh ──► fresh ...
                  │                     │
                  ├────► denied ◄───────┤
                  └────► failed ◄───────┘

``initial``: no request yet (the manager creates one: a new key, a PodCertificateRequest carrying a stub PKCS#10
request signed with it); ``wait``: the request is pending; ``fresh``: the signer issued a chain (key and chain are
served until ``beginRefreshAt`` plus up to 5 minutes of jitter, when a new key and request are made);
``waitrefresh``: the refresh request is pending, the old pair is still served; ``denied`` and ``failed`` are final
for the pod. A request the watch has not seen for 10 minutes (plus jitter) after its creation is taken as deleted and
made again.

Also: the PodCertificateRequest body (certificates.k8s.io/v1, GA at 1.37), the key types and how each signs its
stub request (Go's x509.CreateCertificateRequest with an empty template: RSA with SHA-256 and PKCS #1 v1.5, ECDSA
with SHA-256/384/512 by curve, Ed25519 pure), the chain as projected (cleanCertificateChain), and the files of
the source (pkg/volume/projected/projected.go collectData: the credential bundle is the key then the chain).

Pure: no clock (``now`` and ``jitter`` are passed in), no I/O.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Mapping
from typing import Any

from kopflet import gopem, gotext
from kopflet.api import spec, times

API_VERSION = "certificates.k8s.io/v1"
KIND = "PodCertificateRequest"
GENERATE_NAME = "req-"
NODE_NAME_FIELD = "spec.nodeName"
"""The field selector upstream's informer lists and watches with (the Node authorizer allows nothing else)."""

ASSUME_DELETED_THRESHOLD = 10 * 60.0
"""assumeDeletedThreshold: a request unseen this long after its creation (plus jitter) was deleted."""
REFRESH_OVERDUE_DURATION = 10 * 60.0
"""refreshOverdueDuration: this long past beginRefreshAt, the refresh is overdue."""
MAX_JITTER = 5 * 60.0
"""jitterDuration: up to 5 minutes, added to beginRefreshAt and to the deleted threshold."""

CONDITION_DENIED = "Denied"
CONDITION_FAILED = "Failed"
CONDITION_ISSUED = "Issued"

NOT_ISSUED_YET = "credential bundle is not issued yet"
NOT_IMPLEMENTED = "unimplemented"
"""NoOpManager's answer (a kubelet without an apiserver client)."""

EVENT_WARNING = "Warning"
REASON_OVERDUE = "CertificateOverdueForRefresh"
REASON_EXPIRED = "CertificateExpired"

PRIVATE_KEY = "PRIVATE KEY"
CERTIFICATE = "CERTIFICATE"


# ------------------------------------------------------------------------------------------------- key types


@dataclasses.dataclass(frozen=True)
class KeyType:
    """How upstream's generateKeyAndProof makes a key of one type, in ``openssl`` terms."""

    label: str
    """How upstream's error names it: ``while generating <label> key: ...``."""
    genpkey: tuple[str, ...]
    """``openssl genpkey`` arguments: a PKCS #8 ``PRIVATE KEY`` (x509.MarshalPKCS8PrivateKey)."""
    digest: str
    """``openssl req``'s digest for the stub request, as Go's signingParamsForKey picks it ('' for pure Ed25519)."""


_EC = ("-algorithm", "EC", "-pkeyopt", "ec_param_enc:named_curve", "-pkeyopt")
_RSA = ("-algorithm", "RSA", "-pkeyopt", "rsa_keygen_pubexp:65537", "-pkeyopt")
KEY_TYPES: Mapping[str, KeyType] = {
    "RSA3072": KeyType("RSA 3072", (*_RSA, "rsa_keygen_bits:3072"), "-sha256"),
    "RSA4096": KeyType("RSA 4096", (*_RSA, "rsa_keygen_bits:4096"), "-sha256"),
    "ECDSAP256": KeyType("ECDSA P256", (*_EC, "ec_paramgen_curve:P-256"), "-sha256"),
    "ECDSAP384": KeyType("ECDSA P384", (*_EC, "ec_paramgen_curve:P-384"), "-sha384"),
    "ECDSAP521": KeyType("ECDSA P521", (*_EC, "ec_paramgen_curve:P-521"), "-sha512"),
    "ED25519": KeyType("Ed25519", ("-algorithm", "ED25519"), ""),
}


def key_type(name: str) -> KeyType:
    """The key type the source names; ValueError with upstream's message for any other."""
    found = KEY_TYPES.get(name)
    if found is None:
        raise ValueError(f"unknown key type {gotext.go_quote(name)}")
    return found


# --------------------------------------------------------------------------------------------------- sources


@dataclasses.dataclass(frozen=True)
class ProjectionKey:
    """One podCertificate source of one pod (upstream projectionKey)."""

    namespace: str
    pod_name: str
    pod_uid: str
    volume: str
    source_index: int


@dataclasses.dataclass(frozen=True)
class Source:
    """A ``podCertificate`` projection as the pod spells it (core/v1 PodCertificateProjection)."""

    signer_name: str = ""
    key_type: str = ""
    max_expiration_seconds: int | None = None
    credential_bundle_path: str = ""
    key_path: str = ""
    certificate_chain_path: str = ""
    user_annotations: tuple[tuple[str, str], ...] | None = None
    """None when the pod sets none (the request then carries none either)."""

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Source:
        def text(field: str) -> str:
            value = body.get(field)
            return value if isinstance(value, str) else ""

        expiration = body.get("maxExpirationSeconds")
        annotations = body.get("userAnnotations")
        return cls(
            signer_name=text("signerName"), key_type=text("keyType"),
            max_expiration_seconds=expiration if isinstance(expiration, int) and not isinstance(expiration, bool)
            else None,
            credential_bundle_path=text("credentialBundlePath"), key_path=text("keyPath"),
            certificate_chain_path=text("certificateChainPath"),
            user_annotations=tuple((str(k), str(v)) for k, v in annotations.items())
            if isinstance(annotations, Mapping) else None)


def projections(pod: spec.Pod) -> tuple[tuple[ProjectionKey, Source], ...]:
    """Every podCertificate source of the pod, in volume order (upstream queueAllProjectionsForPod); the index is
    the source's place in its volume's ``sources``."""
    found = []
    for volume in pod.spec.volumes:
        projected = volume.get("projected")
        if not isinstance(projected, Mapping):
            continue
        sources = projected.get("sources")
        for index, source in enumerate(sources if isinstance(sources, list | tuple) else ()):
            if isinstance(source, Mapping) and isinstance(source.get("podCertificate"), Mapping):
                key = ProjectionKey(pod.namespace, pod.name, pod.uid, str(volume.get("name") or ""), index)
                found.append((key, Source.from_body(source["podCertificate"])))
    return tuple(found)


# ---------------------------------------------------------------------------------------------- the request


def requests_path(namespace: str | None = None) -> str:
    """The PodCertificateRequests collection, in a namespace or across them (the watch)."""
    if namespace is None:
        return "/apis/certificates.k8s.io/v1/podcertificaterequests"
    return f"/apis/certificates.k8s.io/v1/namespaces/{namespace}/podcertificaterequests"


@dataclasses.dataclass(frozen=True)
class Identity:
    """Who asks: the pod, its ServiceAccount and the node, each with its UID (NodeRestriction checks them all)."""

    namespace: str
    pod_name: str
    pod_uid: str
    service_account_name: str
    service_account_uid: str
    node_name: str
    node_uid: str


def request_body(who: Identity, source: Source, stub_request_der: bytes) -> dict[str, Any]:
    """The PodCertificateRequest upstream's createPodCertificateRequest makes: a generated name, owned by the pod,
    ``maxExpirationSeconds`` and the user annotations copied verbatim (left out when the pod leaves them out: the
    apiserver defaults the former to 24 hours), the stub request in DER (base64 in JSON, as ``[]byte``)."""
    spec_: dict[str, Any] = {
        "signerName": source.signer_name,
        "podName": who.pod_name,
        "podUID": who.pod_uid,
        "serviceAccountName": who.service_account_name,
        "serviceAccountUID": who.service_account_uid,
        "nodeName": who.node_name,
        "nodeUID": who.node_uid,
    }
    if source.max_expiration_seconds is not None:
        spec_["maxExpirationSeconds"] = source.max_expiration_seconds
    spec_["stubPKCS10Request"] = base64.b64encode(stub_request_der).decode()
    if source.user_annotations:  # Go's omitempty leaves out an empty map too
        spec_["unverifiedUserAnnotations"] = dict(source.user_annotations)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "namespace": who.namespace,
            "generateName": GENERATE_NAME,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": who.pod_name, "uid": who.pod_uid}],
        },
        "spec": spec_,
    }


def clean_certificate_chain(chain: str) -> bytes:
    """upstream cleanCertificateChain: every block Go's pem.Decode finds in the issued chain, in order, written
    again by pem.EncodeToMemory as a ``CERTIFICATE`` block without headers, whatever its type; nothing between
    blocks, and a block pem.Decode passes over (a body that is not base64, a mismatched END ...) is left out."""
    return b"".join(gopem.encode(gopem.Block(CERTIFICATE, data=block.data))
                    for block in gopem.decode_all(chain.encode()))


def pem_encode(block_type: str, der: bytes) -> str:
    """Go's pem.EncodeToMemory of a block without headers, as text."""
    return gopem.encode(gopem.Block(block_type, data=der)).decode("utf-8", "surrogateescape")


# ----------------------------------------------------------------------------------------------------- states


@dataclasses.dataclass(frozen=True)
class Initial:
    """credStateInitial: no request yet."""


@dataclasses.dataclass(frozen=True)
class Wait:
    """credStateWait: the first request is pending."""

    private_key: bytes
    request_name: str
    abandon_at: float


@dataclasses.dataclass(frozen=True)
class Denied:
    """credStateDenied: final."""

    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class Failed:
    """credStateFailed: final."""

    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class Fresh:
    """credStateFresh: a key and its chain, served until (and past) ``begin_refresh_at``."""

    private_key: bytes
    certificate_chain: bytes
    begin_refresh_at: float
    not_after: float
    overdue_event_emitted: bool = False
    expired_event_emitted: bool = False


@dataclasses.dataclass(frozen=True)
class WaitRefresh:
    """credStateWaitRefresh: `current` is still served while the refresh request is pending."""

    current: Fresh
    private_key: bytes
    request_name: str
    abandon_at: float


State = Initial | Wait | Denied | Failed | Fresh | WaitRefresh


class BundleError(Exception):
    """No credential bundle to project; ``str(exc)`` is upstream's message (the volume's SetUp error)."""


def credential_bundle(state: State) -> tuple[bytes, bytes]:
    """(private key PEM, certificate chain PEM) the volume gets (upstream getCredBundle), or BundleError."""
    if isinstance(state, Fresh):
        return state.private_key, state.certificate_chain
    if isinstance(state, WaitRefresh):
        return state.current.private_key, state.current.certificate_chain
    if isinstance(state, Denied):
        raise BundleError(f"PodCertificateRequest was permanently denied: reason={gotext.go_quote(state.reason)} "
                          f"message={gotext.go_quote(state.message)}")
    if isinstance(state, Failed):
        raise BundleError(f"PodCertificateRequest was permanently failed: reason={gotext.go_quote(state.reason)} "
                          f"message={gotext.go_quote(state.message)}")
    raise BundleError(NOT_ISSUED_YET)


def metrics_state(state: State, now: float) -> str:
    """The ``state`` label of kubelet_podcertificate_states (upstream metricsState)."""
    if isinstance(state, Denied):
        return "denied"
    if isinstance(state, Failed):
        return "failed"
    fresh = state.current if isinstance(state, WaitRefresh) else state
    if isinstance(fresh, Fresh):
        if now > fresh.not_after:
            return "expired"
        if now > fresh.begin_refresh_at + REFRESH_OVERDUE_DURATION:
            return "overdue_for_refresh"
        return "fresh"
    return "not_yet_issued"


@dataclasses.dataclass(frozen=True)
class Event:
    """A pod event the manager posts."""

    type: str
    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class Step:
    """One handling of a source: its new state, the events, and upstream's handleProjection error (logged, the
    source handled again later) or ''."""

    state: State
    events: tuple[Event, ...] = ()
    error: str = ""


def refresh_due(state: Fresh, now: float) -> bool:
    """Whether a fresh source makes its refresh request now (upstream: not before beginRefreshAt)."""
    return now >= state.begin_refresh_at


def refresh_events(state: Fresh, now: float) -> tuple[Fresh, tuple[Event, ...]]:
    """The once-only warnings of a refresh that is late: overdue 10 minutes past beginRefreshAt, expired past
    notAfter (flags kept on the state so each is posted once)."""
    events = []
    if now > state.begin_refresh_at + REFRESH_OVERDUE_DURATION and not state.overdue_event_emitted:
        events.append(Event(EVENT_WARNING, REASON_OVERDUE, "PodCertificate refresh overdue"))
        state = dataclasses.replace(state, overdue_event_emitted=True)
    if now > state.not_after and not state.expired_event_emitted:
        events.append(Event(EVENT_WARNING, REASON_EXPIRED, "PodCertificate expired"))
        state = dataclasses.replace(state, expired_event_emitted=True)
    return state, tuple(events)


def created(state: Initial | Fresh, private_key: bytes, request: Mapping[str, Any],
            jitter: float) -> Wait | WaitRefresh:
    """The state once the request for `private_key` exists: given up on if unseen 10 minutes (plus `jitter`) after
    its creationTimestamp."""
    meta = request.get("metadata") or {}
    created_at = times.parse_timestamp(meta.get("creationTimestamp"))
    abandon_at = (created_at.timestamp() if created_at is not None else 0.0) + ASSUME_DELETED_THRESHOLD + jitter
    name = str(meta.get("name") or "")
    if isinstance(state, Fresh):
        return WaitRefresh(current=state, private_key=private_key, request_name=name, abandon_at=abandon_at)
    return Wait(private_key=private_key, request_name=name, abandon_at=abandon_at)


def _go_eventf(format_: str, arg: str) -> str:
    """What Go's Sprintf makes of a format without verbs and one argument more: upstream passes the condition's
    reason as Eventf's format and the composed message as its argument (a condition's reason is letters, digits,
    ``_``, ``,`` and ``:``, never ``%``), so the event's message is the reason, then ``%!(EXTRA string=...)``."""
    return f"{format_}%!(EXTRA string={arg})"


def observed(state: Wait | WaitRefresh, namespace: str, request: Mapping[str, Any] | None, *, now: float,
             jitter: float) -> Step:
    """A pending source against its request as the watch has it (None: not seen). The first Denied, Failed or
    Issued condition settles it, whatever its status (upstream switches on the type alone); a request unseen past
    its abandon time is made again (initial or fresh again, and an error); a pending refresh posts the late
    refresh warnings."""
    if request is None:
        if now > state.abandon_at:
            if isinstance(state, WaitRefresh):
                return Step(state.current, error="PodCertificateRequest appears to have been deleted")
            return Step(Initial(), error=f"PodCertificateRequest {gotext.go_quote(f'{namespace}/{state.request_name}')}"
                                         " appears to have been deleted")
        return Step(state, error=f"while getting PodCertificateRequest "
                                 f"{gotext.go_quote(f'{namespace}/{state.request_name}')}: podcertificaterequest."
                                 f"certificates.k8s.io {gotext.go_quote(state.request_name)} not found")
    status = request.get("status") or {}
    ref = f"{namespace}/{state.request_name}"
    for condition in status.get("conditions") or ():
        if not isinstance(condition, Mapping):
            continue
        kind, reason, message = (str(condition.get(k) or "") for k in ("type", "reason", "message"))
        if kind == CONDITION_DENIED:
            text = f"PodCertificateRequest {ref} was denied, reason={gotext.go_quote(reason)}, " \
                   f"message={gotext.go_quote(message)}"
            return Step(Denied(reason, message), (Event(EVENT_WARNING, CONDITION_DENIED, _go_eventf(reason, text)),))
        if kind == CONDITION_FAILED:
            text = f"PodCertificateRequest {ref} failed, reason={gotext.go_quote(reason)}, " \
                   f"message={gotext.go_quote(message)}"
            return Step(Failed(reason, message), (Event(EVENT_WARNING, CONDITION_FAILED, _go_eventf(reason, text)),))
        if kind == CONDITION_ISSUED:
            return Step(Fresh(private_key=state.private_key,
                              certificate_chain=clean_certificate_chain(str(status.get("certificateChain") or "")),
                              begin_refresh_at=_seconds(status.get("beginRefreshAt")) + jitter,
                              not_after=_seconds(status.get("notAfter"))))
    if isinstance(state, WaitRefresh):
        current, events = refresh_events(state.current, now)
        return Step(dataclasses.replace(state, current=current), events)
    return Step(state)


def _seconds(value: Any) -> float:
    """A status timestamp in seconds since the epoch; an absent one (the apiserver requires them with Issued) is
    the epoch, so the source refreshes at once rather than never."""
    parsed = times.parse_timestamp(value)
    return parsed.timestamp() if parsed is not None else 0.0


# ------------------------------------------------------------------------------------------------------ files


def files(source: Source, private_key: bytes, certificate_chain: bytes) -> dict[str, bytes]:
    """The source's files (upstream projected collectData): the credential bundle (the key, then the chain), the
    key alone, the chain alone, each where the source asks for it."""
    out: dict[str, bytes] = {}
    if source.credential_bundle_path:
        out[source.credential_bundle_path] = private_key + certificate_chain
    if source.key_path:
        out[source.key_path] = private_key
    if source.certificate_chain_path:
        out[source.certificate_chain_path] = certificate_chain
    return out
