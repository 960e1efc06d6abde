"""The topology manager (pkg/kubelet/cm/topologymanager at v1.37.1): bitmasks, the policies' hint merge, the options
and `NewManager`'s checks, and the scopes' admission over hint providers. Multi-NUMA machines are synthetic, as in
upstream's tests (several tables are theirs: policy_test.go, bitmask_test.go)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from kopflet.api import spec
from kopflet.cm.topologymanager import policy as tp
from kopflet.cm.topologymanager import topology_manager as tm
from kopflet.cm.topologymanager.bitmask import BitMask, BitMaskError, all_bitmasks
from kopflet.cm.topologymanager.policy import TopologyHint
from tests.unit.test_cpumanager_static_policy import make_pod, res


def M(*bits: int) -> BitMask:
    return BitMask.of(*bits)


def H(mask: BitMask | None, preferred: bool) -> TopologyHint:
    return TopologyHint(mask, preferred)


# ------------------------------------------------------------------------------------------------ bitmask

@pytest.mark.parametrize(("bits", "text"), [
    ((), "00"), ((0,), "01"), ((1,), "10"), ((0, 1), "11"), ((0, 2), "0101"), ((3,), "1000"),
    ((2,), "100"),  # Go pads to an even width only above a power of 4
    ((63,), "1" + "0" * 63),
])
def test_string(bits: tuple[int, ...], text: str) -> None:
    assert str(M(*bits)) == text


@pytest.mark.parametrize(("first", "second", "narrower"), [
    ((0,), (0, 1), True), ((0, 1), (0,), False), ((0, 1), (1, 2), True), ((1, 2), (0, 1), False),  # bitmask_test
    ((0, 3), (1, 2), False), ((1, 2), (0, 3), True),
])
def test_is_narrower_than(first: tuple[int, ...], second: tuple[int, ...], narrower: bool) -> None:
    assert M(*first).is_narrower_than(M(*second)) is narrower


def test_bits_range_and_iteration_order() -> None:
    with pytest.raises(BitMaskError, match="bit number must be in range 0-63"):
        M(64)
    assert [m.bits() for m in all_bitmasks([0, 1, 2])] == [[0], [1], [2], [0, 1], [0, 2], [1, 2], [0, 1, 2]]
    assert M(0, 2).count() == 2 and M(0, 2).is_set(2) and not M(0, 2).is_set(1)


# ------------------------------------------------------------------------------------------------ merge

FOUR = tp.NUMAInfo((0, 1, 2, 3), {0: (10, 11, 12, 12), 1: (11, 10, 12, 12), 2: (12, 12, 10, 11),
                                  3: (12, 12, 11, 10)})
EIGHT = tp.NUMAInfo(tuple(range(8)), {
    0: (10, 11, 12, 12, 30, 30, 30, 30), 1: (11, 10, 12, 12, 30, 30, 30, 30), 2: (12, 12, 10, 11, 30, 30, 30, 30),
    3: (12, 12, 11, 10, 30, 30, 30, 30), 4: (30, 30, 30, 30, 10, 11, 12, 12), 5: (30, 30, 30, 30, 11, 10, 12, 12),
    6: (30, 30, 30, 30, 12, 12, 10, 11), 7: (30, 30, 30, 30, 12, 12, 11, 10)})
TWO = tp.NUMAInfo((0, 1))


def pol(name: str, numa: tp.NUMAInfo = TWO, closest: bool = False) -> tp.Policy:
    return tp.Policy(name, numa, tp.PolicyOptions(prefer_closest_numa=closest))


BE, RE, SN = tp.POLICY_BEST_EFFORT, tp.POLICY_RESTRICTED, tp.POLICY_SINGLE_NUMA_NODE

# (name, numa, providers' hints, {policy: (best hint, admit)}); upstream's commonPolicyMergeTestCases and the
# policies' own cases.
MERGE_CASES: list[tuple[str, tp.NUMAInfo, list[Any], dict[str, tuple[TopologyHint, bool]]]] = [
    ("TopologyHint not set", TWO, [], {BE: (H(M(0, 1), True), True), RE: (H(M(0, 1), True), True),
                                       SN: (H(None, True), True)}),
    ("empty non-nil map", TWO, [{}], {BE: (H(M(0, 1), True), True), SN: (H(None, True), True)}),
    ("nil hints for a resource", TWO, [{"r": None}], {BE: (H(M(0, 1), True), True), SN: (H(None, True), True)}),
    ("no possible affinity for a resource", TWO, [{"r": []}],
     {BE: (H(M(0, 1), False), True), RE: (H(M(0, 1), False), False), SN: (H(None, False), False)}),
    ("single hint nil preferred", TWO, [{"r": [H(None, True)]}], {BE: (H(M(0, 1), True), True),
                                                                 SN: (H(None, True), True)}),
    ("single hint nil not preferred", TWO, [{"r": [H(None, False)]}],
     {BE: (H(M(0, 1), False), True), RE: (H(M(0, 1), False), False), SN: (H(None, False), False)}),
    ("two providers, same mask, both preferred 1/2", TWO, [{"r1": [H(M(0), True)]}, {"r2": [H(M(0), True)]}],
     {BE: (H(M(0), True), True), RE: (H(M(0), True), True), SN: (H(M(0), True), True)}),
    ("two providers, same mask, both preferred 2/2", TWO, [{"r1": [H(M(1), True)]}, {"r2": [H(M(1), True)]}],
     {BE: (H(M(1), True), True), SN: (H(M(1), True), True)}),
    ("two providers, 1 no hints, 1 single hint preferred", TWO, [{}, {"r": [H(M(0), True)]}],
     {BE: (H(M(0), True), True), SN: (H(M(0), True), True)}),
    ("two providers, 1 with 2 hints, 1 with single hint matching", TWO,
     [{"r1": [H(M(0), True), H(M(1), True)]}, {"r2": [H(M(0), True)]}],
     {BE: (H(M(0), True), True), SN: (H(M(0), True), True)}),
    ("two providers, both with 2 hints, matching narrower preferred hint from both", TWO,
     [{"r1": [H(M(0), True), H(M(0, 1), False)]}, {"r2": [H(M(0), True), H(M(0, 1), False)]}],
     {BE: (H(M(0), True), True), SN: (H(M(0), True), True)}),
    ("less narrow preferred hints are chosen over narrower non-preferred hints", TWO,
     [{"r1": [H(M(1), True), H(M(0, 1), False)]}, {"r2": [H(M(0), True), H(M(1), True), H(M(0, 1), False)]}],
     {BE: (H(M(1), True), True), SN: (H(M(1), True), True)}),
    ("multiple resources, same provider", TWO,
     [{"r1": [H(M(1), True), H(M(0, 1), False)], "r2": [H(M(0), True), H(M(1), True), H(M(0, 1), False)]}],
     {BE: (H(M(1), True), True)}),
    ("two providers, 1 hint each, no common mask", TWO, [{"r1": [H(M(0), True)]}, {"r2": [H(M(1), True)]}],
     {BE: (H(M(0, 1), False), True), RE: (H(M(0, 1), False), False), SN: (H(None, False), False)}),
    ("two providers, same mask, 1 preferred, 1 not", TWO, [{"r1": [H(M(0), True)]}, {"r2": [H(M(0), False)]}],
     {BE: (H(M(0), False), True), RE: (H(M(0), False), False), SN: (H(None, False), False)}),
    ("two providers, 1 wider mask, both preferred", TWO, [{"r1": [H(M(0), True)]}, {"r2": [H(M(0, 1), True)]}],
     {BE: (H(M(0), False), True), RE: (H(M(0), False), False), SN: (H(None, False), False)}),
    ("two providers, 1 with 2 hints, 1 with single non-preferred hint matching", TWO,
     [{"r1": [H(M(0), True), H(M(1), True)]}, {"r2": [H(M(0, 1), False)]}],
     {BE: (H(M(0), False), True), RE: (H(M(0), False), False), SN: (H(None, False), False)}),
    ("bestNonPreferredAffinityCount (1)", FOUR,
     [{"r1": [H(M(0, 1, 2, 3), False), H(M(0, 1), False)]}, {"r2": [H(M(0, 1), False)]}],
     {BE: (H(M(0, 1), False), True), RE: (H(M(0, 1), False), False)}),
    ("bestNonPreferredAffinityCount (2)", FOUR,
     [{"r1": [H(M(0, 1, 2, 3), False), H(M(0, 1), False)]}, {"r2": [H(M(0, 3), False)]}],
     {BE: (H(M(0, 3), False), True)}),
    ("bestNonPreferredAffinityCount (3)", FOUR,
     [{"r1": [H(M(0, 1, 2, 3), False), H(M(0, 1), False)]}, {"r2": [H(M(1, 2), False)]}],
     {BE: (H(M(1, 2), False), True)}),
    ("bestNonPreferredAffinityCount (4)", FOUR,
     [{"r1": [H(M(0, 1, 2, 3), False), H(M(0, 1), False)]}, {"r2": [H(M(2, 3), False)]}],
     {BE: (H(M(2, 3), False), True)}),
    ("bestNonPreferredAffinityCount (5)", FOUR,
     [{"r1": [H(M(0, 1, 2, 3), False), H(M(0, 1), False)]}, {"r2": [H(M(1, 2), False), H(M(2, 3), False)]}],
     {BE: (H(M(1, 2), False), True)}),
    ("bestNonPreferredAffinityCount (6)", FOUR,
     [{"r1": [H(M(0, 1, 2, 3), False), H(M(0, 1), False)]},
      {"r2": [H(M(1, 2, 3), False), H(M(1, 2), False), H(M(1, 3), False), H(M(2, 3), False)]}],
     {BE: (H(M(1, 2), False), True)}),
    ("single NUMA hint generation", FOUR,
     [{"r1": [H(M(0, 1), True)], "r2": [H(M(0), True), H(M(0, 1), False)]}],
     {SN: (H(None, False), False)}),
]


@pytest.mark.parametrize(("name", "numa", "providers", "expected"), MERGE_CASES, ids=[c[0] for c in MERGE_CASES])
def test_merge(name: str, numa: tp.NUMAInfo, providers: list[Any],
               expected: dict[str, tuple[TopologyHint, bool]]) -> None:
    for policy_name, want in expected.items():
        assert tp.merge(pol(policy_name, numa), providers) == want, policy_name


@pytest.mark.parametrize(("numa", "providers", "expected"), [
    # upstream's mergeTestCasesClosestNUMA: of two equally wide masks, the one with the lower average distance
    (FOUR, [{"r1": [H(M(0, 1, 2, 3), False), H(M(0, 1), False)]}, {"r2": [H(M(1, 2), False), H(M(2, 3), False)]}],
     H(M(2, 3), False)),
    (FOUR, [{"r1": [H(M(0, 1, 2, 3), False), H(M(0, 1), False)]},
            {"r2": [H(M(1, 2, 3), False), H(M(1, 2), False), H(M(1, 3), False), H(M(2, 3), False)]}],
     H(M(2, 3), False)),
    (EIGHT, [{"r1": [H(M(0, 4), True), H(M(0, 2), True)]}, {"r2": [H(M(0, 4), True), H(M(0, 2), True)]}],
     H(M(0, 2), True)),
    (EIGHT, [{"r1": [H(M(4), True), H(M(0, 2), True)]}, {"r2": [H(M(4), True), H(M(0, 2), True)]}], H(M(4), True)),
])
def test_merge_prefer_closest_numa_nodes(numa: tp.NUMAInfo, providers: list[Any], expected: TopologyHint) -> None:
    assert tp.merge(pol(BE, numa, closest=True), providers) == (expected, True)


def test_none_policy_merges_nothing() -> None:
    assert tp.merge(tp.NONE, [{"r": []}]) == (TopologyHint(), True)


# ------------------------------------------------------------------------------------------- options, NewManager

@pytest.mark.parametrize(("options", "expected", "error"), [
    ({}, tp.PolicyOptions(), ""),
    ({"prefer-closest-numa-nodes": "true"}, tp.PolicyOptions(prefer_closest_numa=True), ""),
    ({"prefer-closest-numa-nodes": "yes"}, None,
     'bad value for option "prefer-closest-numa-nodes": strconv.ParseBool: parsing "yes": invalid syntax'),
    ({"max-allowable-numa-nodes": "12"}, tp.PolicyOptions(max_allowable_numa_nodes=12), ""),
    ({"max-allowable-numa-nodes": "4"}, None, 'the minimum value of "max-allowable-numa-nodes" should not be less '
                                              'than 8'),
    ({"max-allowable-numa-nodes": "x"}, None, 'unable to convert policy option to integer "max-allowable-numa-nodes": '
                                              'strconv.Atoi: parsing "x": invalid syntax'),
    ({"foo": "1"}, None, 'unknown Topology Manager Policy option: "foo"'),
])
def test_policy_options(options: dict[str, str], expected: tp.PolicyOptions | None, error: str) -> None:
    if error:
        with pytest.raises(tp.TopologyManagerError) as info:
            tp.parse_options(options)
        assert str(info.value) == error
    else:
        assert tp.parse_options(options) == expected


@pytest.mark.parametrize(("name", "scope", "options", "nodes", "distances", "error"), [
    ("none", "bogus", {"foo": "x"}, range(20), None, ""),  # the none policy checks nothing
    ("best-effort", "container", {}, range(2), None, ""),
    ("best-effort", "container", {}, range(9), None, "unsupported on machines with more than 8 NUMA Nodes"),
    ("best-effort", "container", {"max-allowable-numa-nodes": "9"}, range(9), None, ""),
    ("restricted", "container", {"prefer-closest-numa-nodes": "true"}, range(2), None,
     "cannot discover NUMA topology: error getting NUMA distances from cadvisor"),
    ("restricted", "pod", {"prefer-closest-numa-nodes": "true"}, range(2), {0: (10, 20), 1: (20, 10)}, ""),
    ("other", "container", {}, range(2), None, 'unknown policy: "other"'),
    ("single-numa-node", "node", {}, range(2), None, 'unknown scope: "node"'),
])
def test_new_policy(name: str, scope: str, options: dict[str, str], nodes: range,
                    distances: dict[int, tuple[int, ...]] | None, error: str) -> None:
    if error:
        with pytest.raises(tp.TopologyManagerError) as info:
            tp.new_policy(name, scope, options, nodes, distances)
        assert str(info.value) == error
    else:
        assert tp.new_policy(name, scope, options, nodes, distances).name == name


# ------------------------------------------------------------------------------------------------- scopes

@dataclasses.dataclass(frozen=True)
class FakeProvider:
    """Hints by container name (and for the pod); records what it allocated with which hint."""

    hints: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    pod_hints: Any = None
    fail_on: str = ""
    error: Exception = dataclasses.field(default_factory=lambda: ValueError("boom"))
    allocated: tuple[tuple[str, TopologyHint], ...] = ()

    def topology_hints(self, pod: spec.Pod, container: spec.ContainerSpec) -> Any:
        return self.hints.get(container.name)

    def pod_topology_hints(self, pod: spec.Pod) -> Any:
        return self.pod_hints

    def allocate(self, pod: spec.Pod, container: spec.ContainerSpec, hint: TopologyHint) -> FakeProvider:
        if container.name == self.fail_on:
            raise self.error
        return dataclasses.replace(self, allocated=(*self.allocated, (container.name, hint)))


POD = make_pod("u1", ("a", res("1")), ("b", res("1")), init=(("i", res("1"), False),))


def allocated(result: tm.Admission) -> list[Sequence[tuple[str, TopologyHint]]]:
    return [list(p.allocated) for p in result.providers]  # type: ignore[attr-defined]


def test_container_scope_aligns_each_container() -> None:
    cpu = FakeProvider({"i": {"cpu": [H(M(0), True), H(M(1), True)]}, "a": {"cpu": [H(M(1), True)]}})
    mem = FakeProvider({"i": {"memory": [H(M(0), True)]}, "a": {"memory": [H(M(1), True), H(M(0, 1), False)]}})
    result = tm.admit(pol(SN), tp.SCOPE_CONTAINER, [cpu, mem], POD)
    assert result.rejection is None
    assert result.hints == {"i": H(M(0), True), "a": H(M(1), True), "b": H(None, True)}
    assert allocated(result) == [[("i", H(M(0), True)), ("a", H(M(1), True)), ("b", H(None, True))]] * 2


def test_container_scope_rejects_with_topology_affinity_error() -> None:
    cpu = FakeProvider({"a": {"cpu": [H(M(0), True)]}})
    mem = FakeProvider({"a": {"memory": [H(M(1), True)]}})
    result = tm.admit(pol(RE), tp.SCOPE_CONTAINER, [cpu, mem], POD)
    assert result.rejection is not None
    assert (result.rejection.reason, result.rejection.message) == (
        "TopologyAffinityError", "Pod was rejected: Resources cannot be allocated with Topology locality")
    assert result.providers == ()


def test_pod_scope_uses_one_hint_for_every_container() -> None:
    cpu = FakeProvider(pod_hints={"cpu": [H(M(1), True), H(M(0, 1), False)]})
    mem = FakeProvider(pod_hints={"memory": [H(M(1), True)]})
    result = tm.admit(pol(SN), tp.SCOPE_POD, [cpu, mem], POD)
    assert result.hints == {"i": H(M(1), True), "a": H(M(1), True), "b": H(M(1), True)}
    rejected = tm.admit(pol(SN), tp.SCOPE_POD, [cpu, FakeProvider(pod_hints={"memory": []})], POD)
    assert rejected.rejection is not None and rejected.rejection.reason == "TopologyAffinityError"


def test_none_policy_allocates_without_hints() -> None:
    result = tm.admit(tp.NONE, tp.SCOPE_POD, [FakeProvider(pod_hints={"cpu": []})], POD)
    assert allocated(result) == [[("i", TopologyHint()), ("a", TopologyHint()), ("b", TopologyHint())]]


@pytest.mark.parametrize(("error", "reason", "message"), [
    (ValueError("not enough cpus"), "UnexpectedAdmissionError",
     "Pod was rejected: Allocate failed due to not enough cpus, which is unexpected"),
    (tm.AdmissionError("SMTAlignmentError", "SMT Alignment Error: x"), "SMTAlignmentError",
     "Pod was rejected: SMT Alignment Error: x"),
])
def test_an_allocation_error_rejects_as_get_pod_admit_result(error: Exception, reason: str, message: str) -> None:
    result = tm.admit(pol(BE), tp.SCOPE_CONTAINER, [FakeProvider(), FakeProvider(fail_on="a", error=error)], POD)
    assert result.rejection is not None
    assert (result.rejection.reason, result.rejection.message) == (reason, message)
