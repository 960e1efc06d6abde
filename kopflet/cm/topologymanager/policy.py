"""The topology manager's policies and their hint merge (pkg/kubelet/cm/topologymanager policy*.go, numa_info.go,
policy_options.go, topology_manager.go `NewManager`), as pure functions.

Each hint provider (the CPU manager, the memory manager) answers, per resource, the NUMA node sets it could serve a
container (or a pod) from, each marked preferred when it is among the narrowest possible. `merge` takes one hint per
resource in every combination, ANDs their masks with the machine's nodes, and keeps the best (preferred first, then
narrowest, or the closest with ``prefer-closest-numa-nodes``); the policy then says whether that admits the pod:
``best-effort`` always, ``restricted`` and ``single-numa-node`` only a preferred hint (the latter considering only
single-node hints). ``none`` merges nothing.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Mapping, Sequence

from kopflet.cm.topologymanager.bitmask import BitMask
from kopflet.gotext import go_quote

POLICY_NONE = "none"
POLICY_BEST_EFFORT = "best-effort"
POLICY_RESTRICTED = "restricted"
POLICY_SINGLE_NUMA_NODE = "single-numa-node"
POLICIES = (POLICY_NONE, POLICY_BEST_EFFORT, POLICY_RESTRICTED, POLICY_SINGLE_NUMA_NODE)

SCOPE_CONTAINER = "container"
SCOPE_POD = "pod"
SCOPES = (SCOPE_CONTAINER, SCOPE_POD)

PREFER_CLOSEST_NUMA_NODES = "prefer-closest-numa-nodes"
MAX_ALLOWABLE_NUMA_NODES = "max-allowable-numa-nodes"
STABLE_OPTIONS = frozenset({PREFER_CLOSEST_NUMA_NODES, MAX_ALLOWABLE_NUMA_NODES})
"""policy_options.go at v1.37.1: both options are GA; there are no alpha or beta ones."""
DEFAULT_MAX_ALLOWABLE_NUMA_NODES = 8

ERROR_TOPOLOGY_AFFINITY = "TopologyAffinityError"
TOPOLOGY_AFFINITY_MESSAGE = "Resources cannot be allocated with Topology locality"

_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_FALSE = ("0", "f", "F", "FALSE", "false", "False")


class TopologyManagerError(ValueError):
    """The topology manager cannot be built (upstream's message); the agent does not start."""


@dataclasses.dataclass(frozen=True)
class TopologyHint:
    """Upstream `TopologyHint`: a NUMA affinity (None: any) and whether it is preferred."""

    affinity: BitMask | None = None
    preferred: bool = False

    def __str__(self) -> str:
        mask = "<nil>" if self.affinity is None else str(self.affinity)
        return f"{{{mask} {str(self.preferred).lower()}}}"


NO_HINT = TopologyHint()
"""The hint of no preference (upstream's zero `TopologyHint`: what `GetAffinity` gives without a policy)."""

ProviderHints = Mapping[str, Sequence[TopologyHint] | None] | None
"""One provider's answer: resource -> hints. None or {}: no preference at all; a resource with None: no
preference for it; with an empty list: no NUMA affinity can serve it."""


@dataclasses.dataclass(frozen=True)
class PolicyOptions:
    """Upstream `PolicyOptions`."""

    prefer_closest_numa: bool = False
    max_allowable_numa_nodes: int = DEFAULT_MAX_ALLOWABLE_NUMA_NODES


def _atoi(text: str) -> int:
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not all("0" <= c <= "9" for c in digits):
        raise ValueError(f"strconv.Atoi: parsing {go_quote(text)}: invalid syntax")
    value = int(text)
    if not -(1 << 63) <= value < 1 << 63:
        raise ValueError(f"strconv.Atoi: parsing {go_quote(text)}: value out of range")
    return value


def parse_options(options: Mapping[str, str]) -> PolicyOptions:
    """Upstream `NewPolicyOptions` (Go ranges over the map in random order; here the options are checked in
    sorted order). Raises `TopologyManagerError`."""
    prefer, max_nodes = False, DEFAULT_MAX_ALLOWABLE_NUMA_NODES
    for name in sorted(options):
        value = options[name]
        if name not in STABLE_OPTIONS:
            raise TopologyManagerError(f"unknown Topology Manager Policy option: {go_quote(name)}")
        if name == PREFER_CLOSEST_NUMA_NODES:
            if value in _TRUE:
                prefer = True
            elif value in _FALSE:
                prefer = False
            else:
                raise TopologyManagerError(f"bad value for option {go_quote(name)}: strconv.ParseBool: parsing "
                                           f"{go_quote(value)}: invalid syntax")
        else:
            try:
                number = _atoi(value)
            except ValueError as err:
                raise TopologyManagerError(f"unable to convert policy option to integer {go_quote(name)}: "
                                           f"{err}") from None
            if number < DEFAULT_MAX_ALLOWABLE_NUMA_NODES:
                raise TopologyManagerError(f"the minimum value of {go_quote(name)} should not be less than "
                                           f"{DEFAULT_MAX_ALLOWABLE_NUMA_NODES}")
            max_nodes = number
    return PolicyOptions(prefer_closest_numa=prefer, max_allowable_numa_nodes=max_nodes)


@dataclasses.dataclass(frozen=True)
class NUMAInfo:
    """Upstream `NUMAInfo`: the machine's NUMA node ids and (with ``prefer-closest-numa-nodes``) distances."""

    nodes: tuple[int, ...]
    distances: Mapping[int, Sequence[int]] = dataclasses.field(default_factory=dict)

    def default_affinity(self) -> BitMask:
        """Upstream `DefaultAffinityMask`: every node."""
        return BitMask.of(*self.nodes)

    def narrowest(self, m1: BitMask, m2: BitMask) -> BitMask:
        return m1 if m1.is_narrower_than(m2) else m2

    def average_distance(self, mask: BitMask) -> float:
        """Upstream `CalculateAverageFor`."""
        bits = mask.bits()
        if not bits:
            return 0.0
        total = sum(float(self.distances[a][b]) for a in bits for b in bits)
        return total / (len(bits) * len(bits))

    def closest(self, m1: BitMask, m2: BitMask) -> BitMask:
        """Upstream `Closest`: the narrower, or of two as wide the lower average distance (then the lower mask)."""
        if m1.count() != m2.count():
            return self.narrowest(m1, m2)
        d1, d2 = self.average_distance(m1), self.average_distance(m2)
        if d1 == d2:
            return m1 if m1.is_less_than(m2) else m2
        return m1 if d1 < d2 else m2


def new_numa_info(nodes: Iterable[int], distances: Mapping[int, Sequence[int]] | None,
                  options: PolicyOptions) -> NUMAInfo:
    """Upstream `NewNUMAInfo`: the distances are needed only with ``prefer-closest-numa-nodes``."""
    ids = tuple(nodes)
    if options.prefer_closest_numa:
        if distances is None or any(node not in distances for node in ids):
            raise TopologyManagerError("cannot discover NUMA topology: error getting NUMA distances from cadvisor")
        return NUMAInfo(ids, {node: tuple(distances[node]) for node in ids})
    return NUMAInfo(ids)


@dataclasses.dataclass(frozen=True)
class Policy:
    """One topology manager policy over the machine's NUMA nodes."""

    name: str
    numa: NUMAInfo = NUMAInfo(())
    options: PolicyOptions = PolicyOptions()

    @property
    def alignment_guaranteed(self) -> bool:
        """Upstream `IsAlignmentGuaranteed`."""
        return self.name == POLICY_SINGLE_NUMA_NODE


def new_policy(name: str, scope: str, options: Mapping[str, str], nodes: Iterable[int],
               distances: Mapping[int, Sequence[int]] | None = None) -> Policy:
    """Upstream `NewManager`'s checks, in its order: the none policy needs nothing; otherwise the options, the
    NUMA information, the node count (at most ``max-allowable-numa-nodes``), the policy and the scope. Raises
    `TopologyManagerError` with upstream's messages."""
    if name == POLICY_NONE:
        return Policy(POLICY_NONE)
    opts = parse_options(options)
    numa = new_numa_info(nodes, distances, opts)
    if len(numa.nodes) > opts.max_allowable_numa_nodes:
        raise TopologyManagerError(f"unsupported on machines with more than {opts.max_allowable_numa_nodes} "
                                   f"NUMA Nodes")
    if name not in POLICIES:
        raise TopologyManagerError(f'unknown policy: "{name}"')
    if scope not in SCOPES:
        raise TopologyManagerError(f'unknown scope: "{scope}"')
    return Policy(name, numa, opts)


NONE = Policy(POLICY_NONE)
"""The ``none`` policy: nothing merged, every pod admitted."""


# ------------------------------------------------------------------------------------------------ merge


def filter_providers_hints(providers_hints: Sequence[ProviderHints]) -> list[list[TopologyHint]]:
    """Upstream `filterProvidersHints`: one list per resource; no preference is ``{nil, true}``, no possible
    affinity ``{nil, false}``. (Go ranges over a provider's resources in random order; the order does not change
    the merge's result, so here they are sorted.)"""
    out: list[list[TopologyHint]] = []
    for hints in providers_hints:
        if not hints:
            out.append([TopologyHint(None, True)])
            continue
        for resource in sorted(hints):
            found = hints[resource]
            if found is None:
                out.append([TopologyHint(None, True)])
            elif len(found) == 0:
                out.append([TopologyHint(None, False)])
            else:
                out.append(list(found))
    return out


def _merge_permutation(default: BitMask, permutation: Sequence[TopologyHint]) -> TopologyHint:
    """Upstream `mergePermutation`: the AND of the masks; preferred only if every hint is and all masks agree."""
    preferred = True
    masks: list[BitMask] = []
    for hint in permutation:
        if hint.affinity is not None:
            masks.append(hint.affinity)
            if hint.affinity != masks[0]:
                preferred = False
        if not hint.preferred:
            preferred = False
    return TopologyHint(default.and_(*masks), preferred)


def _narrowest_hint(hints: Sequence[TopologyHint]) -> TopologyHint | None:
    best: TopologyHint | None = None
    for hint in hints:
        if hint.affinity is None:
            continue
        if best is None or hint.affinity.is_narrower_than(best.affinity):  # type: ignore[arg-type]
            best = hint
    return best


def _max_of_min_affinity_counts(filtered: Sequence[Sequence[TopologyHint]]) -> int:
    """Upstream `maxOfMinAffinityCounts`."""
    result = 0
    for hints in filtered:
        narrowest = _narrowest_hint(hints)
        if narrowest is not None and narrowest.affinity is not None and narrowest.affinity.count() > result:
            result = narrowest.affinity.count()
    return result


@dataclasses.dataclass(frozen=True)
class _Merger:
    """Upstream `HintMerger`."""

    policy: Policy
    hints: Sequence[Sequence[TopologyHint]]
    best_non_preferred: int

    def _compare_masks(self, current: TopologyHint, candidate: TopologyHint) -> TopologyHint:
        assert current.affinity is not None and candidate.affinity is not None
        if candidate.affinity == current.affinity:
            return current
        if self.policy.name != POLICY_SINGLE_NUMA_NODE and self.policy.options.prefer_closest_numa:
            best = self.policy.numa.closest(current.affinity, candidate.affinity)
        else:
            best = self.policy.numa.narrowest(current.affinity, candidate.affinity)
        return current if best == current.affinity else candidate

    def compare(self, current: TopologyHint | None, candidate: TopologyHint) -> TopologyHint | None:
        """Upstream `HintMerger.compare`."""
        assert candidate.affinity is not None
        if candidate.affinity.count() == 0:
            return current
        if current is None:
            return candidate
        assert current.affinity is not None
        if not current.preferred and candidate.preferred:
            return candidate
        if current.preferred and not candidate.preferred:
            return current
        if current.preferred and candidate.preferred:
            return self._compare_masks(current, candidate)
        best = self.best_non_preferred
        cur, cand = current.affinity.count(), candidate.affinity.count()
        if cur > best:
            return self._compare_masks(current, candidate)
        if cur == best:
            if cand != best:
                return current
            return self._compare_masks(current, candidate)
        if cand > best:
            return current
        if cand == best:
            return candidate
        if cand > cur:
            return candidate
        if cand < cur:
            return current
        return self._compare_masks(current, candidate)

    def merge(self) -> TopologyHint:
        default = self.policy.numa.default_affinity()
        best: TopologyHint | None = None
        for permutation in itertools.product(*self.hints):
            best = self.compare(best, _merge_permutation(default, permutation))
        return best if best is not None else TopologyHint(default, False)


def _filter_single_numa_hints(filtered: Sequence[Sequence[TopologyHint]]) -> list[list[TopologyHint]]:
    """Upstream `filterSingleNumaHints`: only "no preference" and preferred single-node hints stay."""
    return [[h for h in hints if h.preferred and (h.affinity is None or h.affinity.count() == 1)]
            for hints in filtered]


def merge(policy: Policy, providers_hints: Sequence[ProviderHints]) -> tuple[TopologyHint, bool]:
    """Upstream `Policy.Merge`: the best hint and whether the policy admits it."""
    if policy.name == POLICY_NONE:
        return TopologyHint(), True
    filtered = filter_providers_hints(providers_hints)
    if policy.name == POLICY_SINGLE_NUMA_NODE:
        filtered = _filter_single_numa_hints(filtered)
    best = _Merger(policy, filtered, _max_of_min_affinity_counts(filtered)).merge()
    if policy.name == POLICY_SINGLE_NUMA_NODE:
        if best.affinity == policy.numa.default_affinity():
            best = TopologyHint(None, best.preferred)
        return best, best.preferred
    if policy.name == POLICY_RESTRICTED:
        return best, best.preferred
    return best, True
