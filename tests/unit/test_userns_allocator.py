"""The user namespace allocator's rules, as upstream's userns_manager_test.go and kubelet_pods_test.go
(TestParseGetSubIdsOutput) check them."""

from __future__ import annotations

import json

import pytest

from cri_client import types as cri
from kopflet.userns import allocator
from kopflet.userns.allocator import Allocations, UsernsError

U = 65536
POD = cri.NamespaceMode.POD


def mapping(host_id: int, container_id: int = 0, length: int = U) -> cri.IDMapping:
    return cri.IDMapping(host_id=host_id, container_id=container_id, length=length)


# ------------------------------------------------------------------------------------- kubelet mappings

def test_the_default_kubelet_mappings_leave_out_the_first_pods_worth() -> None:
    """Upstream getKubeletMappings without a kubelet user: [idsPerPod, 2^32)."""
    assert allocator.default_kubelet_mappings() == (U, 2**32 - U)
    assert allocator.default_kubelet_mappings(2 * U) == (2 * U, 2**32 - 2 * U)
    default = Allocations.for_kubelet(*allocator.default_kubelet_mappings(), max_pods=110)
    assert (default.offset, default.count) == (1, 65535)


GETSUBIDS: list[tuple[str, str, tuple[int, int] | str]] = [
    ("valid", "0: kubelet 65536 2147483648", (65536, 2147483648)),
    ("valid, a trailing newline", "0: kubelet 65536 2147483648\n", (65536, 2147483648)),
    ("multiple lines", "0: kubelet 1 2\n1: kubelet 3 4\n",
     'error parsing line "0: kubelet 1 2\\n1: kubelet 3 4\\n": it must contain only one line'),
    ("wrong format", "0: kubelet 65536", 'invalid line "0: kubelet 65536"'),
    ("non numeric 1", "0: kubelet Foo 65536",
     'error parsing line "0: kubelet Foo 65536": strconv.ParseUint: parsing "Foo": invalid syntax'),
    ("non numeric 2", "0: kubelet 0 Bar",
     'error parsing line "0: kubelet 0 Bar": strconv.ParseUint: parsing "Bar": invalid syntax'),
    ("overflow 1", "0: kubelet 4294967296 2147483648",
     'error parsing line "0: kubelet 4294967296 2147483648": strconv.ParseUint: parsing "4294967296": '
     'value out of range'),
    ("overflow 2", "0: kubelet 65536 4294967296",
     'error parsing line "0: kubelet 65536 4294967296": strconv.ParseUint: parsing "4294967296": value out of range'),
    ("negative value 1", "0: kubelet -1 2147483648",
     'error parsing line "0: kubelet -1 2147483648": strconv.ParseUint: parsing "-1": invalid syntax'),
    ("negative value 2", "0: kubelet 65536 -1",
     'error parsing line "0: kubelet 65536 -1": strconv.ParseUint: parsing "-1": invalid syntax'),
]


@pytest.mark.parametrize(("output", "expected"), [c[1:] for c in GETSUBIDS], ids=[c[0] for c in GETSUBIDS])
def test_parse_getsubids_output(output: str, expected: tuple[int, int] | str) -> None:
    if isinstance(expected, str):
        with pytest.raises(UsernsError) as error:
            allocator.parse_getsubids_output(output)
        assert str(error.value) == expected
    else:
        assert allocator.parse_getsubids_output(output) == expected


# (first ID, length, max pods, IDs per pod, the error or the (offset, count)), as upstream TestMakeUserNsManager
MAKE: list[tuple[str, int, int, int, int, tuple[int, int] | str]] = [
    ("default", U, U * 2000, 110, U, (1, 2000)),
    ("custom length", 2 * U, 2 * U * 2000, 110, 2 * U, (1, 2000)),
    ("length not a multiple of 65536", U, U * 2000, 110, U + 1,
     "kubelet user namespace length 65537 is not a multiple of 65536"),
    ("firstID not multiple", U + 1, U * 2000, 110, U, "kubelet user assigned ID 65537 is not a multiple of 65536"),
    ("firstID is less than 65535", 0, U * 2000, 110, U, "kubelet user assigned ID 0 must be greater or equal to 65536"),
    ("mappingLen not multiple", U, U + 1, 110, U, "kubelet user assigned IDs length 65537 is not a multiple of 65536"),
    ("range can't fit maxPods", U, U, 2, U, "kubelet user assigned IDs are not enough to support 2 pods"),
    ("exactly maxPods", 3 * U, 2 * U, 2, U, (3, 2)),
]


@pytest.mark.parametrize(("first", "length", "max_pods", "per_pod", "expected"), [c[1:] for c in MAKE],
                         ids=[c[0] for c in MAKE])
def test_kubelet_mappings_checks(first: int, length: int, max_pods: int, per_pod: int,
                                 expected: tuple[int, int] | str) -> None:
    if isinstance(expected, str):
        with pytest.raises(UsernsError) as error:
            Allocations.for_kubelet(first, length, max_pods=max_pods, ids_per_pod=per_pod)
        assert str(error.value) == expected
    else:
        made = Allocations.for_kubelet(first, length, max_pods=max_pods, ids_per_pod=per_pod)
        assert (made.offset, made.count, made.ids_per_pod) == (*expected, per_pod)


# ------------------------------------------------------------------------------------------- the slots

SMALL = Allocations(offset=1, count=3)


@pytest.mark.parametrize(("held", "start", "expected"), [
    ({}, 0, U),
    ({}, 2, 3 * U),
    ({}, 5, 3 * U),  # the start wraps around
    ({"a": U}, 0, 2 * U),
    ({"a": 3 * U}, 2, U),  # from the last slot on, round to the first
    ({"a": U, "b": 3 * U}, 0, 2 * U),
])
def test_allocate_scans_from_the_start_for_a_free_slot(held: dict[str, int], start: int, expected: int) -> None:
    after, first = Allocations(offset=1, count=3, used_by=held).allocate("new", start)
    assert first == expected
    assert after.used_by == {**held, "new": expected}


def test_allocate_when_every_slot_is_taken() -> None:
    full = Allocations(offset=1, count=2, used_by={"a": U, "b": 2 * U})
    with pytest.raises(UsernsError, match=r"^could not find an empty slot to allocate a user namespace$"):
        full.allocate("c", 0)


def test_allocations_are_disjoint_until_released() -> None:
    state, seen = SMALL, []
    for uid in ("a", "b", "c"):
        state, first = state.allocate(uid, 0)
        seen.append(first)
    assert sorted(seen) == [U, 2 * U, 3 * U]
    state = state.release("b")
    state, first = state.allocate("d", 0)
    assert first == 2 * U
    assert state.release("unknown") is state


RECORD: list[tuple[str, dict[str, int], str, int, int, dict[str, int] | str]] = [
    ("basic", {}, "p", 2 * U, U, {"p": 2 * U}),
    ("again: nothing to do", {"p": 2 * U}, "p", 2 * U, U, {"p": 2 * U}),
    ("invalid length", {}, "p", 2 * U, U + 1, "wrong user namespace length 65537"),
    ("wrong offset", {}, "p", 2 * U + 1, U, "wrong user namespace offset specified 131073"),
    ("a different range", {"p": U}, "p", 2 * U, U, 'different user namespace range already used by pod "p"'),
    ("below the kubelet's range", {}, "p", 0, U, "id 0 is out of range"),
    ("above the kubelet's range", {}, "p", 4 * U, U, "id 262144 is out of range"),
    ("taken by another pod", {"q": 2 * U}, "p", 2 * U, U, 'range picked for pod "p" already taken'),
]


@pytest.mark.parametrize(("held", "uid", "first", "length", "expected"), [c[1:] for c in RECORD],
                         ids=[c[0] for c in RECORD])
def test_record(held: dict[str, int], uid: str, first: int, length: int, expected: dict[str, int] | str) -> None:
    state = Allocations(offset=1, count=3, used_by=held)
    if isinstance(expected, str):
        with pytest.raises(UsernsError) as error:
            state.record(uid, first, length)
        assert str(error.value) == expected
    else:
        assert state.record(uid, first, length).used_by == expected


def test_is_set() -> None:
    state = Allocations(offset=1, count=3, used_by={"a": 2 * U})
    assert [state.is_set(i * U) for i in range(5)] == [True, False, True, False, True]


@pytest.mark.parametrize(("allocated", "on_disk", "known", "expected"), [
    ((), (), (), []),
    (("a",), ("a",), ("a",), []),
    (("a",), ("a",), (), ["a"]),  # a directory no one knows
    (("a",), (), ("a",), ["a"]),  # an allocation whose directory is gone
    (("a", "b"), ("b", "c"), ("b",), ["c", "a"]),
])
def test_orphaned(allocated: tuple[str, ...], on_disk: tuple[str, ...], known: tuple[str, ...],
                  expected: list[str]) -> None:
    assert allocator.orphaned(allocated, on_disk, known.__contains__) == expected


# ------------------------------------------------------------------------------------ the per-pod record

def test_a_new_record_maps_root_for_uids_and_gids_alike() -> None:
    assert allocator.new_record(3 * U, U) == cri.UserNamespace(mode=POD, uids=(mapping(3 * U),),
                                                               gids=(mapping(3 * U),))


def test_the_record_is_upstreams_json() -> None:
    text = allocator.record_json(allocator.new_record(3 * U, U))
    assert text == ('{"uidMappings":[{"hostId":196608,"containerId":0,"length":65536}],'
                    '"gidMappings":[{"hostId":196608,"containerId":0,"length":65536}]}')
    assert allocator.parse_record(text) == allocator.new_record(3 * U, U)


def _file(uids: list[dict[str, int]], gids: list[dict[str, int]]) -> str:
    return json.dumps({"uidMappings": uids, "gidMappings": gids})


M = {"hostId": 2 * U, "containerId": 0, "length": U}
PARSE: list[tuple[str, str, cri.UserNamespace | str]] = [
    ("basic", _file([M], [M]), allocator.new_record(2 * U, U)),
    ("keys in any case, as Go's decoder", '{"UIDMAPPINGS":[{"hostid":131072,"length":65536}],'
                                          '"gidmappings":[{"HostId":131072,"Length":65536}]}',
     allocator.new_record(2 * U, U)),
    ("not JSON", "{", "invalid user namespace mappings file: "),
    ("no mappings", "{}", "invalid user namespace configuration: no more than one mapping allowed."),
    ("two UID mappings", _file([M, M], [M]), "invalid user namespace configuration: no more than one mapping allowed."),
    ("two GID mappings", _file([M], [M, M]),
     "invalid user namespace configuration: GID and UID mappings should be identical."),
    ("different GID mapping", _file([M], [{**M, "hostId": 3 * U}]),
     "invalid user namespace configuration: GID and UID mapping should be identical"),
    ("no root UID", _file([{**M, "containerId": 1}], [{**M, "containerId": 1}]),
     "invalid user namespace configuration: UID 0 must be mapped"),
    ("a negative ID", _file([{**M, "hostId": -1}], [M]),
     "invalid user namespace mappings file: json: cannot unmarshal -1 into Go struct field "
     "idMapping.uidMappings.hostId of type uint32"),
]


@pytest.mark.parametrize(("content", "expected"), [c[1:] for c in PARSE], ids=[c[0] for c in PARSE])
def test_parse_record(content: str, expected: cri.UserNamespace | str) -> None:
    if isinstance(expected, str):
        with pytest.raises(UsernsError) as error:
            allocator.parse_record(content)
        assert str(error.value).startswith(expected)
    else:
        assert allocator.parse_record(content) == expected
