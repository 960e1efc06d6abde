"""Which upstream specs each pass runs.

Pure. The node pass is the selection users already know: ginkgo focus `[NodeConformance]` minus what is
slow, serial, disruptive, flaky, feature-gated behind a `[Feature:…]` or alpha. The serial pass is computed
at run time from two sources of the pinned release, so a version bump recomputes it: the feature gates'
versioned defaults (`pkg/features/kube_features.go` and the staging modules' feature files, read from the Go
module cache), and the suite's own spec list with its ginkgo labels (a dry run of e2e.test). ginkgo then
gets the exact names as its focus.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

NODE_FOCUS = r"\[NodeConformance\]"
NODE_SKIP = r"\[Slow\]|\[Serial\]|\[Disruptive\]|\[Flaky\]|\[Feature:|\[Alpha\]"
CONFORMANCE_FOCUS = r"\[Conformance\]"
CONFORMANCE_SKIP = r"\[Disruptive\]"

# Feature gate files of the pinned release, relative to the Go module cache (k8s.io/kubernetes last: it
# re-declares some staging gates for the Kubernetes binaries, and those are what the suite sees).
GATE_FILES = (
    "k8s.io/apiserver@{staging}/pkg/features/kube_features.go",
    "k8s.io/apiextensions-apiserver@{staging}/pkg/features/kube_features.go",
    "k8s.io/client-go@{staging}/features/known_features.go",
    "k8s.io/component-base@{staging}/logs/api/v1/kube_features.go",
    "k8s.io/component-base@{staging}/metrics/features/kube_features.go",
    "k8s.io/component-base@{staging}/zpages/features/kube_features.go",
    "k8s.io/controller-manager@{staging}/pkg/features/kube_features.go",
    "k8s.io/kubernetes@{kubernetes}/pkg/features/kube_features.go",
)


@dataclasses.dataclass(frozen=True)
class Pass:
    name: str
    title: str
    nodes: int
    rule: str
    focus: str = ""  # empty: computed from the dry run (the serial pass)
    skip: str = ""
    serial_nodes: int | None = None
    """When set, the selected specs marked ``[Serial]`` run apart, in this many processes (1), and the others
    in `nodes`: ginkgo runs specs in parallel whatever their ``Serial`` label says."""
    cluster: bool = False
    """Run on a kubeadm cluster made for each agent (`make cluster`), not on the dev stack."""
    setup: str = ""
    """Where the pass runs, for the report, when not on the dev stack."""


PASSES = {
    "node": Pass("node", "Node pass", 4, "the specs marked `[NodeConformance]` less the slow, serial, disruptive, "
                 "flaky, `[Feature:…]` and alpha ones", focus=NODE_FOCUS, skip=NODE_SKIP),
    "serial": Pass("serial", "Serial pass", 4,
                   "(a) node specs (`NodeConformance`) labelled `Feature:…` or `FeatureGate:…` whose every such "
                   "label names a feature gate on by default at the pinned release, not already in the node pass; "
                   "(b) `Serial` `NodeConformance` specs; neither `Flaky` nor `Disruptive`; the `[Serial]` ones "
                   "one at a time, after the others", serial_nodes=1),
    "cluster": Pass("cluster", "Conformance pass (kubeadm cluster)", 4,
                    "every `[Conformance]` spec but the `[Disruptive]` ones (what Sonobuoy's certified-conformance "
                    "mode runs); the `[Serial]` ones one at a time, after the others",
                    focus=CONFORMANCE_FOCUS, skip=CONFORMANCE_SKIP, serial_nodes=1, cluster=True,
                    setup="On a one-node kubeadm cluster made for each agent by `make cluster` (`kubeadm init` with "
                          "kube-proxy, CoreDNS and metrics-server; `python -m devstack cluster up --kubelet "
                          "kopflet|kubelet`): kopflet installed as the node's `kubelet`, then the upstream kubelet "
                          "of the same release, each run by the same unit with the flags and files kubeadm writes. "
                          "e2e.test gets kubeadm's admin.conf and the kubelet root `/var/lib/kubelet`; the cluster "
                          "is reset (`make cluster-down`) after each agent's run."),
}
STACK_PASSES = tuple(name for name, p in PASSES.items() if not p.cluster)
"""What `make conformance` runs (on the dev stack); the cluster pass is `make conformance-cluster`."""


# ------------------------------------------------------------------------------------------ feature gates

@dataclasses.dataclass(frozen=True)
class Gate:
    name: str
    default: bool
    prerelease: str  # Alpha, Beta, GA, Deprecated


_ENTRY = re.compile(r"^\s*(?:\w+\.)?(\w+):\s*\{\s*$")
_SPEC = re.compile(r'\{\s*Version:\s*version\.MustParse\("(\d+)\.(\d+)"\)([^{}]*)\}')
_DEFAULT = re.compile(r"\bDefault:\s*(true|false)\b")
_PRERELEASE = re.compile(r"\bPreRelease:\s*(?:featuregate\.)?(\w+)")
_END = re.compile(r"^\s*\},?\s*$")


def parse_gates(source: str, minor: int) -> dict[str, Gate]:
    """The feature gates a Go file declares as VersionedSpecs, each as it stands at 1.<minor>.

    Entries look like ``Name: {`` (or ``pkg.Name: {``), one ``{Version: version.MustParse("1.33"), Default:
    true, PreRelease: featuregate.Beta}`` per line, then ``},``; the spec in force is the last one whose
    version is not newer than the release.
    """
    gates: dict[str, Gate] = {}
    name: str | None = None
    specs: list[tuple[int, bool, str]] = []
    for line in source.splitlines():
        code = line.split("//", 1)[0]
        if name is None:
            m = _ENTRY.match(code)
            if m:
                name, specs = m.group(1), []
            continue
        spec = _SPEC.search(code)
        if spec:
            major, at, rest = int(spec.group(1)), int(spec.group(2)), spec.group(3)
            default, pre = _DEFAULT.search(rest), _PRERELEASE.search(rest)
            if major == 1 and default and pre:
                specs.append((at, default.group(1) == "true", pre.group(1)))
        elif _END.match(code):
            current = [s for s in sorted(specs) if s[0] <= minor]
            if current:
                gates[name] = Gate(name, current[-1][1], current[-1][2])
            name = None
    return gates


def merge_gates(sources: Iterable[str], minor: int) -> dict[str, Gate]:
    """All files' gates; a later file's declaration of a gate wins (GATE_FILES' order)."""
    gates: dict[str, Gate] = {}
    for source in sources:
        gates.update(parse_gates(source, minor))
    return gates


# ------------------------------------------------------------------------------------------ the suite's specs

@dataclasses.dataclass(frozen=True)
class Spec:
    text: str  # what ginkgo's --focus/--skip match (after the suite description)
    labels: frozenset[str]


def specs_from_ginkgo_json(report: Sequence[Mapping[str, Any]]) -> list[Spec]:
    """The It specs of a ginkgo JSON report (e2e.test --ginkgo.dry-run --ginkgo.json-report=...)."""
    specs = []
    for suite in report:
        for r in suite.get("SpecReports") or []:
            if r.get("LeafNodeType") != "It":
                continue
            text = " ".join([*(r.get("ContainerHierarchyTexts") or []), r.get("LeafNodeText", "")]).strip()
            labels = {label for group in r.get("ContainerHierarchyLabels") or [] for label in group or []}
            labels |= set(r.get("LeafNodeLabels") or [])
            specs.append(Spec(text, frozenset(labels)))
    return specs


def _matches(pattern: str, text: str) -> bool:
    return bool(pattern) and re.search(pattern, text) is not None


def in_node_pass(spec: Spec) -> bool:
    """ginkgo's own test: focus and skip against "<suite description> <spec text>"."""
    return _matches(NODE_FOCUS, spec.text) and not _matches(NODE_SKIP, spec.text)


def _feature_names(spec: Spec) -> list[str]:
    return [label.split(":", 1)[1] for label in spec.labels
            if label.startswith(("Feature:", "FeatureGate:")) and label != "Feature:OffByDefault"]


def serial_reason(spec: Spec, gates: Mapping[str, Gate]) -> str | None:
    """Why the serial pass runs a spec (None: it does not)."""
    labels = spec.labels
    if "NodeConformance" not in labels or labels & {"Flaky", "Disruptive"}:
        return None
    if "Serial" in labels:
        return "Serial node spec"
    features = _feature_names(spec)
    if not features or "Feature:OffByDefault" in labels or "Alpha" in labels or in_node_pass(spec):
        return None
    if all(name in gates and gates[name].default for name in features):
        return "feature gates on by default: " + ", ".join(sorted(set(features)))
    return None


def serial_selection(specs: Iterable[Spec], gates: Mapping[str, Gate]) -> list[tuple[Spec, str]]:
    return sorted(((s, r) for s in specs if (r := serial_reason(s, gates))), key=lambda sr: sr[0].text)


# ------------------------------------------------------------------------------------------ focus

_GO_REGEXP_SPECIAL = set(r"\.+*?()|[]{}^$")


SERIAL_MARK = "[Serial]"


def split_serial(texts: Iterable[str]) -> tuple[list[str], list[str]]:
    """The spec names marked ``[Serial]`` and the others, each in the given order."""
    names = list(texts)
    return [t for t in names if SERIAL_MARK in t], [t for t in names if SERIAL_MARK not in t]


def go_regexp_quote(text: str) -> str:
    """regexp.QuoteMeta: Python's re.escape also escapes spaces and '-', which Go's RE2 refuses."""
    return "".join("\\" + c if c in _GO_REGEXP_SPECIAL else c for c in text)


def exact_focus(texts: Iterable[str], description: str = "Kubernetes e2e suite") -> str:
    """A ginkgo --focus that selects exactly these specs: ginkgo matches it against "<description> <text>"."""
    alternatives = "|".join(go_regexp_quote(t) for t in sorted(set(texts)))
    return f"^{go_regexp_quote(description)} (?:{alternatives})$"
