"""The trust anchors a projected ``clusterTrustBundle`` source writes, from the cluster's ClusterTrustBundles. Pure.

Mirrors upstream v1.37.1's pkg/kubelet/clustertrustbundle (`InformerManager`: ``GetTrustAnchorsByName``,
``GetTrustAnchorsBySigner``, ``normalizeTrustAnchors``), the ClusterTrustBundle branch of pkg/volume/projected
``collectData``, apimachinery's ``LabelSelectorAsSelector`` and label requirements, and Go's ``encoding/pem``
(``Decode``, ``EncodeToMemory``), written again in Python: no cryptography package is needed, the certificates are
only decoded from PEM, deduplicated and encoded again, never parsed.

Upstream's kubelet keeps every ClusterTrustBundle in an informer (started on first use, at the first of
certificates.k8s.io v1, v1beta1, v1alpha1 the apiserver serves) and answers from its lister. Here
`kopflet.volumes.trust_bundle_manager` keeps them the same way and passes what it has as `Bundles`: the objects, or
the error upstream gives when it has none. `references` and `affected` say which pods a changed bundle concerns.
"""

from __future__ import annotations

import base64
import dataclasses
import random
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from kopflet import gotext
from kopflet.api import spec

API_GROUP = "certificates.k8s.io"
API_VERSIONS = ("v1", "v1beta1", "v1alpha1")
"""LazyInformerManager.ensureManagerSet: the versions tried, in this order; the first served is used."""
RESOURCE = "clustertrustbundles"
_APIS = "/apis"
SYNC_WAIT = 10.0
"""ensureManagerSet: how long the first caller waits for the freshly started informer to sync (seconds)."""

NOT_SYNCED = "ClusterTrustBundle informer has not yet synced"
"""InformerManager's answer until its informer has listed the bundles once (HasSynced)."""

NOT_SUPPORTED = "ClusterTrustBundle projection is not supported in static kubelet mode"
"""NoopManager's answer, which upstream uses when the apiserver serves no ClusterTrustBundle API version."""

DISCOVERY_FAILED = ("failed to ensure informer manager for ClusterTrustBundles: failed to determine which informer "
                    "manager to choose: ")
"""LazyInformerManager's answer when the discovery of a version failed (the cause follows); asked again next time."""

NAME_OR_SIGNER_REQUIRED = "ClusterTrustBundle projection requires either name or signerName to be set"
NO_MATCH = "combination of signerName and labelSelector matched zero ClusterTrustBundles"
MAX_LABEL_SELECTOR_LENGTH = 100 * 1024  # clustertrustbundle_manager.go maxLabelSelectorLength

CERTIFICATE = "CERTIFICATE"
_PEM_START = b"\n-----BEGIN "
_PEM_END = b"\n-----END "
_PEM_END_OF_LINE = b"-----"
_PEM_LINE_LENGTH = 64
_BASE64 = re.compile(rb"[A-Za-z0-9+/]*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")


class TrustAnchorsError(Exception):
    """A source's trust anchors cannot be had; ``str(exc)`` is upstream's error text."""


@dataclasses.dataclass(frozen=True)
class ClusterTrustBundle:
    """What the kubelet reads of a ClusterTrustBundle (the clusterTrustBundleHandlers: name, signer, bundle)."""

    name: str
    signer_name: str
    trust_bundle: str
    labels: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> ClusterTrustBundle:
        """From the API object of any of the API versions (their fields are the same)."""
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
        body = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
        labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
        return cls(name=_text(meta.get("name")), signer_name=_text(body.get("signerName")),
                   trust_bundle=_text(body.get("trustBundle")),
                   labels=tuple(sorted((str(k), _text(v)) for k, v in labels.items())))


@dataclasses.dataclass(frozen=True)
class Bundles:
    """Every ClusterTrustBundle of the cluster as the caller found them (upstream's lister), or `error`, the text
    every source gets when there are none to look at (`NOT_SYNCED`, `NOT_SUPPORTED`).

    `order_seed` fixes the shuffle of the merged anchors. Upstream shuffles them at random each time it merges them
    (meaning "a stable ordering that changes each time Kubelet restarts"; its results are cached five minutes and
    dropped when a bundle changes); here the caller draws the seed once per process, so the order changes with a
    restart and a volume's file is rewritten only when its anchors change."""

    items: tuple[ClusterTrustBundle, ...] = ()
    error: str = ""
    order_seed: bytes = b""

    @classmethod
    def from_list(cls, answer: Mapping[str, Any], order_seed: bytes) -> Bundles:
        """From a list answer (``{"items": [...]}``)."""
        items = answer.get("items") if isinstance(answer.get("items"), list) else []
        return cls(items=tuple(ClusterTrustBundle.from_object(i) for i in items if isinstance(i, Mapping)),
                   order_seed=order_seed)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


# ------------------------------------------------------------------------------------------ the API


def discovery_path(version: str) -> str:
    """The group version's discovery document (ServerResourcesForGroupVersion)."""
    return f"{_APIS}/{API_GROUP}/{version}"


def list_path(version: str) -> str:
    """The collection the informer lists and watches."""
    return f"/apis/certificates.k8s.io/{version}/clustertrustbundles"


def serves_bundles(discovery: Mapping[str, Any]) -> bool:
    """clusterTrustBundlesAvailable: whether the group version's APIResourceList has ``clustertrustbundles``."""
    resources = discovery.get("resources") if isinstance(discovery.get("resources"), list) else []
    return any(isinstance(r, Mapping) and r.get("name") == RESOURCE for r in resources)


# ------------------------------------------------------------------------------------------ who is concerned


Reference = tuple[str, str]
"""What a source reads: ("name", a bundle's name) or ("signer", a signer name)."""
BY_NAME, BY_SIGNER = "name", "signer"


def references(pod: spec.Pod) -> frozenset[Reference]:
    """The bundles the pod's ``clusterTrustBundle`` sources read: by name, or every bundle of a signer (whatever
    their labels: a change of labels may add or take one away). A source with neither reads nothing."""
    found: set[Reference] = set()
    for source in _sources(pod):
        name, signer_name = source.get("name"), source.get("signerName")
        if isinstance(name, str):
            found.add((BY_NAME, name))
        elif isinstance(signer_name, str):
            found.add((BY_SIGNER, signer_name))
    return frozenset(found)


def affected(pods: Mapping[str, frozenset[Reference]], changed: Iterable[ClusterTrustBundle]) -> set[str]:
    """The pods (by UID, from their `references`) whose sources may read otherwise now that `changed` were added,
    modified or deleted: those naming one, and those reading its signer's bundles (upstream's dropCacheFor drops
    the signer's cached answers, or the name's for a bundle without a signer; here a by-name source of a bundle
    with a signer is concerned too)."""
    touched: set[Reference] = set()
    for bundle in changed:
        touched.add((BY_NAME, bundle.name))
        if bundle.signer_name:
            touched.add((BY_SIGNER, bundle.signer_name))
    return {uid for uid, refs in pods.items() if refs & touched}


# ------------------------------------------------------------------------------------------ encoding/pem


@dataclasses.dataclass(frozen=True)
class PemBlock:
    """Go's pem.Block: the type, the headers (``Key: Value`` lines) and the decoded bytes."""

    type: str
    headers: tuple[tuple[str, str], ...]
    data: bytes


def _get_line(data: bytes) -> tuple[bytes, bytes, int]:
    """Go pem's getLine: the first line without its trailing blanks and newline, the rest, the bytes consumed."""
    i = data.find(b"\n")
    if i < 0:
        i = j = len(data)
    else:
        j = i + 1
        if i > 0 and data[i - 1] == 0x0D:
            i -= 1
    return data[:i].rstrip(b" \t"), data[j:], j


def _base64_decode(data: bytes) -> bytes | None:
    """Go's base64.StdEncoding.Decode of a body (blanks and line breaks skipped): whole quantums, padding only at
    the end; None on an error. (binascii's strict mode would take a stray ``=`` after a whole quantum.)"""
    cleaned = data.translate(None, b" \t\r\n")
    if len(cleaned) % 4 or not _BASE64.fullmatch(cleaned):
        return None
    return base64.b64decode(cleaned)


def pem_decode(data: bytes) -> tuple[PemBlock | None, bytes]:
    """Go's pem.Decode: the next PEM block and the input after it, or (None, `data`) when there is none.

    Blocks start and end at the beginnings and ends of lines; the last BEGIN before the first END is taken, so
    repeated BEGIN lines without an END are skipped, and a malformed block is passed over for the next."""
    rest = data
    end_trailer_index = 0
    while True:
        if end_trailer_index < 0 or end_trailer_index > len(rest):
            return None, data
        rest = rest[end_trailer_index:]
        end_index = rest.find(_PEM_END)
        if end_index < 0:
            return None, data
        end_trailer_index = end_index + len(_PEM_END)
        begin_index = rest.rfind(_PEM_START[1:], 0, end_index)
        if begin_index < 0 or (begin_index > 0 and rest[begin_index - 1] != 0x0A):
            continue
        skip = begin_index + len(_PEM_START) - 1
        rest = rest[skip:]
        end_index -= skip
        end_trailer_index -= skip

        type_line, rest, consumed = _get_line(rest)
        end_index -= consumed
        end_trailer_index -= consumed
        if not type_line.endswith(_PEM_END_OF_LINE):
            continue
        type_line = type_line[:-len(_PEM_END_OF_LINE)]

        headers: dict[str, str] = {}
        while True:
            if not rest:
                return None, data
            line, following, consumed = _get_line(rest)
            key, colon, value = line.partition(b":")
            if not colon:
                break
            headers[key.strip().decode("latin-1")] = value.strip().decode("latin-1")
            rest = following
            end_index -= consumed
            end_trailer_index -= consumed

        if headers and end_index < 0:
            continue
        end_trailer = rest[end_trailer_index:]
        end_trailer_length = len(type_line) + len(_PEM_END_OF_LINE)
        if len(end_trailer) < end_trailer_length:
            continue
        rest_of_end_line = end_trailer[end_trailer_length:]
        end_trailer = end_trailer[:end_trailer_length]
        if not end_trailer.startswith(type_line) or not end_trailer.endswith(_PEM_END_OF_LINE):
            continue
        if _get_line(rest_of_end_line)[0]:
            continue  # the END line must end with only blanks

        decoded = b""
        if end_index > 0:
            body = _base64_decode(rest[:end_index])
            if body is None:
                continue
            decoded = body
        _, rest, _ = _get_line(rest[end_index + len(_PEM_END) - 1:])
        return PemBlock(type_line.decode("latin-1"), tuple(headers.items()), decoded), rest


def pem_encode(block_type: str, data: bytes) -> bytes:
    """Go's pem.EncodeToMemory of a block without headers: base64 in lines of 64 characters."""
    text = base64.b64encode(data)
    lines = b"".join(text[i:i + _PEM_LINE_LENGTH] + b"\n" for i in range(0, len(text), _PEM_LINE_LENGTH))
    kind = block_type.encode("latin-1")
    return b"-----BEGIN " + kind + b"-----\n" + lines + b"-----END " + kind + b"-----\n"


def normalize_trust_anchors(bundles: Iterable[ClusterTrustBundle], order_seed: bytes) -> bytes:
    """normalizeTrustAnchors: every PEM block of the bundles (whatever its type), deduplicated by content, sorted,
    shuffled (by `order_seed`), and written again as CERTIFICATE blocks, one after the other."""
    anchors: set[bytes] = set()
    for bundle in bundles:
        rest = bundle.trust_bundle.encode()
        while True:
            block, rest = pem_decode(rest)
            if block is None:
                break
            anchors.add(block.data)
    ordered = sorted(anchors)
    random.Random(order_seed).shuffle(ordered)
    return b"".join(pem_encode(CERTIFICATE, anchor) for anchor in ordered)


# ------------------------------------------------------------------------------------------ label selectors


_OPERATORS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


@dataclasses.dataclass(frozen=True)
class Requirement:
    """One label requirement (apimachinery labels.Requirement): `operator` is ``=``, ``in``, ``notin``,
    ``exists`` or ``!`` (does not exist)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator in ("=", "in"):
            return self.key in labels and labels[self.key] in self.values
        if self.operator == "notin":
            return self.key not in labels or labels[self.key] not in self.values
        if self.operator == "exists":
            return self.key in labels
        return self.key not in labels

    def __str__(self) -> str:
        """Requirement.String: ``k=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k``, ``!k`` (several values sorted)."""
        values = ",".join(self.values if len(self.values) == 1 else sorted(self.values))
        if self.operator == "=":
            return f"{self.key}={values}"
        if self.operator in ("in", "notin"):
            return f"{self.key} {self.operator} ({values})"
        return self.key if self.operator == "exists" else f"!{self.key}"


@dataclasses.dataclass(frozen=True)
class Selector:
    """A label selector: `nothing` matches no labels (a nil LabelSelector); else all `requirements` must match
    (none: everything, an empty LabelSelector)."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        return not self.nothing and all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def label_selector_as_selector(label_selector: Mapping[str, Any] | None) -> Selector:
    """metav1.LabelSelectorAsSelector: None matches nothing, ``{}`` everything; requirements sorted by key.

    TrustAnchorsError for an unknown operator; the rest of NewRequirement's checks (key and value syntax, values
    for In and NotIn only) are the apiserver's ValidateLabelSelector on the pod, and are not made again."""
    if label_selector is None:
        return Selector(nothing=True)
    match_labels = label_selector.get("matchLabels") or {}
    expressions = label_selector.get("matchExpressions") or []
    requirements = [Requirement(str(key), "=", (_text(value),)) for key, value in dict(match_labels).items()]
    for expression in expressions:
        expression = expression if isinstance(expression, Mapping) else {}
        operator = _text(expression.get("operator"))
        if operator not in _OPERATORS:
            raise TrustAnchorsError(f"{gotext.go_quote(operator)} is not a valid label selector operator")
        values = tuple(_text(v) for v in expression.get("values") or ())
        requirements.append(Requirement(_text(expression.get("key")), _OPERATORS[operator], values))
    return Selector(tuple(sorted(requirements, key=lambda r: r.key)))


# -------------------------------------------------------------------------------------------- the manager


def anchors_by_name(bundles: Bundles, name: str, allow_missing: bool) -> bytes:
    """GetTrustAnchorsByName: the anchors of the one bundle of that name; empty when it is missing and may be."""
    if bundles.error:
        raise TrustAnchorsError(bundles.error)
    found = [b for b in bundles.items if b.name == name]
    if not found:
        if allow_missing:
            return b""
        raise TrustAnchorsError(f'while getting ClusterTrustBundle: clustertrustbundle.{API_GROUP} "{name}" '
                                "not found")
    return normalize_trust_anchors(found[:1], bundles.order_seed)


def anchors_by_signer(bundles: Bundles, signer_name: str, label_selector: Mapping[str, Any] | None,
                      allow_missing: bool) -> bytes:
    """GetTrustAnchorsBySigner: the anchors of every bundle of that signer the selector matches (a nil selector
    matches none, an empty one all); zero bundles is an error unless the source is optional."""
    if bundles.error:
        raise TrustAnchorsError(bundles.error)
    try:
        selector = label_selector_as_selector(label_selector)
    except TrustAnchorsError as exc:
        raise TrustAnchorsError(f"while parsing label selector: {exc}") from None
    length = len(str(selector))
    if length > MAX_LABEL_SELECTOR_LENGTH:
        raise TrustAnchorsError(f"label selector length ({length}) is larger than {MAX_LABEL_SELECTOR_LENGTH}")
    found = [b for b in bundles.items if selector.matches(dict(b.labels)) and b.signer_name == signer_name]
    if not found:
        if allow_missing:
            return b""
        raise TrustAnchorsError(NO_MATCH)
    return normalize_trust_anchors(found, bundles.order_seed)


def trust_anchors(source: Mapping[str, Any], bundles: Bundles) -> bytes:
    """A ``clusterTrustBundle`` projection's file content (projected.go collectData): by ``name`` if set, else by
    ``signerName`` and ``labelSelector``; ``optional: true`` makes a missing bundle an empty file."""
    allow_empty = source.get("optional") is True
    name, signer_name = source.get("name"), source.get("signerName")
    if isinstance(name, str):
        return anchors_by_name(bundles, name, allow_empty)
    if isinstance(signer_name, str):
        selector = source.get("labelSelector")
        return anchors_by_signer(bundles, signer_name, selector if isinstance(selector, Mapping) else None,
                                 allow_empty)
    raise TrustAnchorsError(NAME_OR_SIGNER_REQUIRED)


def _sources(pod: spec.Pod) -> Iterator[Mapping[str, Any]]:
    """The pod's ``clusterTrustBundle`` sources."""
    for volume in pod.spec.volumes:
        projected = volume.get("projected")
        sources = projected.get("sources") if isinstance(projected, Mapping) else None
        for source in sources if isinstance(sources, list) else ():
            if isinstance(source, Mapping) and isinstance(source.get("clusterTrustBundle"), Mapping):
                yield source["clusterTrustBundle"]


def wanted(pod: spec.Pod) -> bool:
    """Whether a projected volume of the pod has a ``clusterTrustBundle`` source (the bundles are read only then)."""
    return next(_sources(pod), None) is not None


__all__ = [
    "API_GROUP",
    "API_VERSIONS",
    "BY_NAME",
    "BY_SIGNER",
    "Bundles",
    "ClusterTrustBundle",
    "PemBlock",
    "Reference",
    "Requirement",
    "Selector",
    "TrustAnchorsError",
    "affected",
    "anchors_by_name",
    "anchors_by_signer",
    "discovery_path",
    "label_selector_as_selector",
    "list_path",
    "normalize_trust_anchors",
    "pem_decode",
    "pem_encode",
    "references",
    "serves_bundles",
    "trust_anchors",
    "wanted",
]
