"""The trust anchors a projected ``clusterTrustBundle`` source writes, from the cluster's ClusterTrustBundles. Pure.

Mirrors upstream v1.37.1's pkg/kubelet/clustertrustbundle (`InformerManager`: ``GetTrustAnchorsByName``,
``GetTrustAnchorsBySigner``, ``normalizeTrustAnchors``), the ClusterTrustBundle branch of pkg/volume/projected
``collectData`` and apimachinery's ``LabelSelectorAsSelector`` and label requirements; the PEM is Go's
``encoding/pem`` (``Decode``, ``EncodeToMemory``), `kopflet.gopem`: no cryptography package is needed, the
certificates are only decoded from PEM, deduplicated and encoded again, never parsed.

Upstream's kubelet keeps every ClusterTrustBundle in an informer (started on first use, at the first of
certificates.k8s.io v1, v1beta1, v1alpha1 the apiserver serves) and answers from its lister. Here
`kopflet.volumes.trust_bundle_manager` keeps them the same way and passes what it has as `Bundles`: the objects, or
the error upstream gives when it has none. `references` and `affected` say which pods a changed bundle concerns.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from kopflet import gopem, gotext
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


# Go's pem.Block and pem.Decode are kopflet.gopem's; the names stay part of this module's API.
PemBlock = gopem.Block
pem_decode = gopem.decode


def pem_encode(block_type: str, data: bytes) -> bytes:
    """Go's pem.EncodeToMemory of a block without headers, as normalizeTrustAnchors writes each anchor."""
    return gopem.encode(gopem.Block(block_type, data=data))


def normalize_trust_anchors(bundles: Iterable[ClusterTrustBundle], order_seed: bytes) -> bytes:
    """normalizeTrustAnchors: every PEM block of the bundles (whatever its type), deduplicated by content, sorted,
    shuffled (by `order_seed`), and written again as CERTIFICATE blocks, one after the other."""
    anchors: set[bytes] = set()
    for bundle in bundles:
        anchors.update(block.data for block in gopem.decode_all(bundle.trust_bundle.encode()))
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
