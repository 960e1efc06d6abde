"""The static policy's decisions, table-driven with upstream's cases (policy_static_test.go at v1.37.1:
TestStaticPolicyStart, TestStaticPolicyAdd, TestStaticPolicyRemove, TestStaticPolicyReuseCPUs, NewStaticPolicy)."""

from __future__ import annotations

from typing import Any

import pytest

from kopflet.api.spec import Pod, pod_from_body
from kopflet.cm.cpumanager import assignment
from kopflet.cm.cpumanager import static_policy as sp
from kopflet.cm.cpumanager.cpuset import EMPTY, parse
from kopflet.cm.cpumanager.static_policy import State, StaticPolicy
from kopflet.cm.cpumanager.topology import CPUTopology
from tests.unit.test_cpumanager_assignment import (
    DUAL_SOCKET_HT,
    DUAL_SOCKET_NO_HT,
    SINGLE_SOCKET_HT,
    TWO_SOCKET_EIGHT_CORE_HT,
)


def res(cpu_request: str | None, cpu_limit: str | None = None, memory: str = "1G") -> dict[str, Any]:
    requests = {"memory": memory} | ({"cpu": cpu_request} if cpu_request is not None else {})
    limits = {"memory": memory} | ({"cpu": cpu_limit or cpu_request} if (cpu_limit or cpu_request) else {})
    return {"requests": requests, "limits": limits}


InitSpec = tuple[tuple[str, dict[str, Any], bool], ...]


def make_pod(uid: str, *containers: tuple[str, dict[str, Any]], init: InitSpec = (),
             pod_resources: dict[str, Any] | None = None) -> Pod:
    """upstream makePod / makeMultiContainerPod: (name, resources) containers; init: (name, resources, sidecar)."""
    spec: dict[str, Any] = {"containers": [{"name": n, "image": "i", "resources": r} for n, r in containers]}
    if init:
        spec["initContainers"] = [{"name": n, "image": "i", "resources": r,
                                   **({"restartPolicy": "Always"} if sidecar else {})} for n, r, sidecar in init]
    if pod_resources is not None:
        spec["resources"] = pod_resources
    return pod_from_body({"metadata": {"name": "p", "namespace": "ns", "uid": uid}, "spec": spec})


def policy(t: CPUTopology, num_reserved: int, reserved: str = "", **options: bool) -> StaticPolicy:
    return sp.new_static_policy(t, num_reserved, parse(reserved), **options)


def state(default: str, assignments: dict[str, dict[str, str]] | None = None) -> State:
    return State(default=parse(default),
                 assignments={uid: {n: parse(c) for n, c in cs.items()} for uid, cs in (assignments or {}).items()})


# ------------------------------------------------------------------------------------------ NewStaticPolicy

@pytest.mark.parametrize(("t", "num", "given", "reserved", "physical"), [
    (SINGLE_SOCKET_HT, 2, "", "0,4", "0,4"),  # upstream's doc example: 8 CPUs with HT, 2 reserved -> {0,4}
    (SINGLE_SOCKET_HT, 1, "", "0", "0,4"),
    (DUAL_SOCKET_HT, 2, "1,6", "1,6", "0-1,6-7"),  # --reserved-cpus, not core siblings
    (TWO_SOCKET_EIGHT_CORE_HT, 3, "", "0-1,8", "0-1,8-9"),
    (DUAL_SOCKET_NO_HT, 1, "", "0", "0"),
])
def test_reserved_cpus(t: CPUTopology, num: int, given: str, reserved: str, physical: str) -> None:
    p = policy(t, num, given)
    assert (str(p.reserved), str(p.reserved_physical)) == (reserved, physical)
    assert p.allocatable_cpus() == t.details.cpus() - p.reserved


@pytest.mark.parametrize(("t", "num", "given", "error"), [
    (DUAL_SOCKET_HT, 1, "0-1",
     "[cpumanager] unable to reserve the required amount of CPUs (size of 0-1 did not equal 1)"),
    (SINGLE_SOCKET_HT, 9, "", "[cpumanager] unable to reserve the required amount of CPUs (size of  did not equal 9)"),
    (SINGLE_SOCKET_HT, 1, "42", "[cpumanager] unable to build the reserved physical CPUs from the reserved set: "
                                "unknown CPU ID: 42"),
])
def test_reserved_cpus_errors(t: CPUTopology, num: int, given: str, error: str) -> None:
    with pytest.raises(sp.PolicyError) as err:
        policy(t, num, given)
    assert str(err.value) == error


@pytest.mark.parametrize(("reserved", "expected"), [
    ("1", 1), ("500m", 1), ("1500m", 2), ("2", 2), ("100m", 1), (0.5, 1), (3, 3),
])
def test_num_reserved_cpus(reserved: Any, expected: int) -> None:
    assert sp.num_reserved_cpus(reserved) == expected


def test_num_reserved_cpus_zero() -> None:
    with pytest.raises(sp.PolicyError, match="greater than zero"):
        sp.num_reserved_cpus("0")


# -------------------------------------------------------------------------------- validateState (Start)

@pytest.mark.parametrize(("name", "num", "options", "st", "default", "error"), [
    ("non-corrupted state", 0, {}, state("1-11", {"fakePod": {"0": "0"}}), "1-11", None),
    ("empty cpuset", 1, {}, state(""), "0-11", None),
    ("empty cpuset with strict reservation", 2, {"strict_cpu_reservation": True}, state(""), "1-5,7-11", None),
    ("empty default with assignments", 1, {}, state("", {"fakePod": {"0": "0"}}), None,
     "default cpuset cannot be empty"),
    ("reserved cores 0 & 6 are not present in available cpuset", 2, {}, state("0-1"), None,
     'not all reserved cpus: "0,6" are present in defaultCpuSet: "0-1"'),
    ("some of reserved cores are present in available cpuset (StrictCPUReservationOption)", 2,
     {"strict_cpu_reservation": True}, state("0-1"), None,
     'some of strictly reserved cpus: "0" are present in defaultCpuSet: "0-1"'),
    ("assigned core 2 is still present in available cpuset", 0, {}, state("2-11", {"fakePod": {"0": "0-2"}}), None,
     'pod: fakePod, container: 0 cpuset: "0-2" overlaps with default cpuset "2-11"'),
    ("core 12 is not present in topology but is in state cpuset", 0, {},
     state("5-12", {"fakePod": {"0": "0-2", "1": "3-4"}}), None,
     'current set of available CPUs "0-11" doesn\'t match with CPUs in state "0-12"'),
    ("core 11 is present in topology but is not in state cpuset", 0, {},
     state("5-10", {"fakePod": {"0": "0-2", "1": "3-4"}}), None,
     'current set of available CPUs "0-11" doesn\'t match with CPUs in state "0-10"'),
])
def test_validate_state(name: str, num: int, options: dict[str, bool], st: State, default: str | None,
                        error: str | None) -> None:
    p = policy(DUAL_SOCKET_HT, num, **options)
    if error is None:
        assert str(sp.validate_state(p, st).default) == default, name
        return
    with pytest.raises(sp.PolicyError) as err:
        sp.validate_state(p, st)
    assert str(err.value) == error, name


# ------------------------------------------------------------------------------------------ guaranteedCPUs

@pytest.mark.parametrize(("name", "pod", "container", "expected"), [
    ("guaranteed, integer", make_pod("u", ("c", res("2"))), 0, 2),
    ("guaranteed, 2000m is an integer", make_pod("u", ("c", res("2000m"))), 0, 2),
    ("guaranteed, non-integer", make_pod("u", ("c", res("977m"))), 0, 0),
    ("burstable: request below limit", make_pod("u", ("c", res("1", "2"))), 0, 0),
    ("best effort", make_pod("u", ("c", {})), 0, 0),
    ("guaranteed pod, container without cpu", make_pod("u", ("a", res("1")), ("b", res(None, memory="1G"))), 1, 0),
])
def test_guaranteed_cpus(name: str, pod: Pod, container: int, expected: int) -> None:
    assert sp.guaranteed_cpus(pod, pod.spec.containers[container]) == expected, name


@pytest.mark.parametrize(("name", "pod", "expected"), [
    ("app containers add up", make_pod("u", ("a", res("2")), ("b", res("3"))), 5),
    ("a bigger init container wins", make_pod("u", ("a", res("1")), init=(("i", res("4"), False),)), 4),
    ("init containers do not add up", make_pod("u", ("a", res("1")), init=(("i", res("2"), False),
                                                                           ("j", res("3"), False))), 3),
    ("sidecars add to the app containers", make_pod("u", ("a", res("2")), init=(("s", res("1"), True),)), 3),
    ("an init container after a sidecar runs beside it", make_pod(
        "u", ("a", res("1")), init=(("s", res("2"), True), ("i", res("3"), False))), 5),
])
def test_pod_guaranteed_cpus(name: str, pod: Pod, expected: int) -> None:
    assert sp.pod_guaranteed_cpus(pod) == expected, name


# ------------------------------------------------------------------------------------------------- Allocate

@pytest.mark.parametrize(("name", "t", "num", "reserved", "options", "st", "pod", "expected", "error"), [
    ("GuPodSingleCore, SingleSocketHT, ExpectAllocOneCPU", SINGLE_SOCKET_HT, 1, "", {}, state("0-7"),
     make_pod("fakePod", ("fakecontainer2", res("1000m"))), "4", None),
    ("GuPodMultipleCores, SingleSocketHT, ExpectAllocOneCore", SINGLE_SOCKET_HT, 1, "", {},
     state("0-1,4-5", {"fakePod": {"fakecontainer100": "2-3,6-7"}}),
     make_pod("fakePod", ("fakecontainer3", res("2000m"))), "1,5", None),
    ("GuPodMultipleCores, DualSocketHT, ExpectAllocOneSocket", DUAL_SOCKET_HT, 1, "", {},
     state("0-1,3-11", {"fakePod": {"fakecontainer100": "2"}}),
     make_pod("fakePod", ("fakecontainer3", res("6000m"))), "1,3,5,7,9,11", None),
    ("GuPodMultipleCores, DualSocketHT, ExpectAllocThreeCores", DUAL_SOCKET_HT, 1, "", {},
     state("0,2-4,6-11", {"fakePod": {"fakecontainer100": "1,5"}}),
     make_pod("fakePod", ("fakecontainer3", res("6000m"))), "2-4,8-10", None),
    ("GuPodMultipleCores, DualSocketNoHT, ExpectAllocOneSocket", DUAL_SOCKET_NO_HT, 1, "", {},
     state("0-1,3-7", {"fakePod": {"fakecontainer100": ""}}),
     make_pod("fakePod", ("fakecontainer1", res("4000m"))), "4-7", None),
    ("GuPodMultipleCores, DualSocketNoHT, ExpectAllocFourCores", DUAL_SOCKET_NO_HT, 1, "", {},
     state("0-1,3,6-7", {"fakePod": {"fakecontainer100": "4-5"}}),
     make_pod("fakePod", ("fakecontainer1", res("4000m"))), "1,3,6-7", None),
    ("GuPodMultipleCores, DualSocketHT, ExpectAllocOneSocketOneCore", DUAL_SOCKET_HT, 1, "", {},
     state("0-1,3-11", {"fakePod": {"fakecontainer100": "2"}}),
     make_pod("fakePod", ("fakecontainer3", res("8000m"))), "1,3-5,7,9-11", None),
    ("NonGuPod, SingleSocketHT, NoAlloc", SINGLE_SOCKET_HT, 1, "", {}, state("0-7"),
     make_pod("fakePod", ("fakecontainer1", res("1000m", "2000m"))), None, None),
    ("GuPodNonIntegerCore, SingleSocketHT, NoAlloc", SINGLE_SOCKET_HT, 1, "", {}, state("0-7"),
     make_pod("fakePod", ("fakecontainer4", res("977m"))), None, None),
    ("GuPodSingleCore, SingleSocketHT, ExpectError", SINGLE_SOCKET_HT, 1, "", {}, state("0-7"),
     make_pod("fakePod", ("fakecontainer2", res("8000m"))), None,
     "not enough cpus available to satisfy request: requested=8, available=7"),
    ("GuPodMultipleCores, SingleSocketHT, ExpectSameAllocation", SINGLE_SOCKET_HT, 1, "", {},
     state("0-1,4-5", {"fakePod": {"fakecontainer3": "2-3,6-7"}}),
     make_pod("fakePod", ("fakecontainer3", res("4000m"))), "2-3,6-7", None),
    # full-pcpus-only (upstream smtalignOptionsTestCases)
    ("full-pcpus-only: GuPodSingleCore, SingleSocketHT, reject a lone thread", SINGLE_SOCKET_HT, 1, "",
     {"full_pcpus_only": True}, state("0-7"), make_pod("fakePod", ("fakecontainer2", res("1000m"))), None,
     "SMT Alignment Error: requested 1 cpus not multiple cpus per core = 2"),
    ("full-pcpus-only: GuPodManyCores, DualSocketHT, ExpectDoNotAllocPartialCPU", DUAL_SOCKET_HT, 2, "1,6",
     {"full_pcpus_only": True}, state("0,2-5,7-11"), make_pod("fakePod", ("c", res("10000m"))), None,
     "SMT Alignment Error: not enough free physical CPUs: available physical CPUs = 8, requested CPUs = 10, "
     "CPUs per core = 2"),
    ("full-pcpus-only: GuPodManyCores, DualSocketHT, AutoReserve, ExpectAllocAllCPUs", DUAL_SOCKET_HT, 2, "",
     {"full_pcpus_only": True}, state("1-5,7-11"), make_pod("fakePod", ("c", res("10000m"))), "1-5,7-11", None),
    ("full-pcpus-only: GuPodManyCores, DualSocketHT, ExpectAllocAllCPUs", DUAL_SOCKET_HT, 2, "0,6",
     {"full_pcpus_only": True}, state("1-5,7-11"), make_pod("fakePod", ("c", res("10000m"))), "1-5,7-11", None),
    ("full-pcpus-only: an existing misaligned assignment is kept", SINGLE_SOCKET_HT, 1, "",
     {"full_pcpus_only": True}, state("0-2,4-7", {"fakePod": {"c": "3"}}), make_pod("fakePod", ("c", res("1"))),
     "3", None),
    # the machine: 2 reserved by topology = one core, a 4-CPU container gets two whole cores
    ("2-socket 8-core HT: whole cores on the reserved socket", TWO_SOCKET_EIGHT_CORE_HT, 2, "", {}, state("0-15"),
     make_pod("p", ("c", res("4"))), "1-2,9-10", None),
    ("pod-level resources: gate off, no exclusive CPUs", TWO_SOCKET_EIGHT_CORE_HT, 2, "", {}, state("0-15"),
     make_pod("p", ("c", res("2")), pod_resources=res("2")), None, None),
])
def test_allocate(name: str, t: CPUTopology, num: int, reserved: str, options: dict[str, bool], st: State,
                  pod: Pod, expected: str | None, error: str | None) -> None:
    p = policy(t, num, reserved, **options)
    container = pod.spec.containers[0]
    if error is not None:
        with pytest.raises(assignment.AllocationError) as err:
            sp.allocate(p, st, pod, container)
        assert str(err.value) == error, name
        return
    after = sp.allocate(p, st, pod, container)
    got = after.get(pod.uid, container.name)
    if expected is None:
        assert got is None and after.default == st.default, name
        return
    assert str(got) == expected, name
    assert after.default == st.default - parse(expected), name  # the shared pool shrinks
    assert after.cpuset_or_default(pod.uid, "other") == after.default


def test_allocate_then_remove_round_trip() -> None:
    p = policy(TWO_SOCKET_EIGHT_CORE_HT, 2)
    st = sp.validate_state(p, State())
    pod = make_pod("p1", ("a", res("2")), ("b", res("500m")), ("c", res("4")))
    for container in pod.spec.containers:
        st = sp.allocate(p, st, pod, container)
    assert {n: str(c) for n, c in st.assignments["p1"].items()} == {"a": "1,9", "c": "2-3,10-11"}
    assert str(st.default) == "0,4-8,12-15"
    assert sp.validate_state(p, st) == st  # still a valid state
    st = sp.remove_container(st, "p1", "a")
    assert str(st.default) == "0-1,4-9,12-15"
    st = sp.remove_container(st, "p1", "c")
    assert st.assignments == {} and str(st.default) == "0-15"
    assert sp.remove_container(st, "p1", "c") == st  # unknown container: nothing to do


@pytest.mark.parametrize(("name", "st", "uid", "container", "default", "left"), [
    # upstream TestStaticPolicyRemove
    ("SingleSocketHT, DeAllocOneContainer", state("4-7", {"fakePod": {"fakecontainer1": "1-3"}}),
     "fakePod", "fakecontainer1", "1-7", {}),
    ("SingleSocketHT, DeAllocOneContainer, BeginEmpty", state("4-7", {"fakePod": {"fakecontainer1": "1-3",
                                                                                  "fakecontainer2": "0-1"}}),
     "fakePod", "fakecontainer1", "2-7", {"fakePod": {"fakecontainer2": "0-1"}}),
    ("SingleSocketHT, DeAllocTwoContainer", state("0-1", {"fakePod": {"fakecontainer1": "1,3,5",
                                                                      "fakecontainer2": "2,4"}}),
     "fakePod", "fakecontainer1", "0-1,3,5", {"fakePod": {"fakecontainer2": "2,4"}}),
    ("SingleSocketHT, NoDeAlloc", state("2-7", {"fakePod": {"fakecontainer1": "1,3,5"}}),
     "fakePod", "fakecontainer2", "2-7", {"fakePod": {"fakecontainer1": "1,3,5"}}),
])
def test_remove_container(name: str, st: State, uid: str, container: str, default: str,
                          left: dict[str, dict[str, str]]) -> None:
    after = sp.remove_container(st, uid, container)
    assert str(after.default) == default, name
    assert {u: {n: str(c) for n, c in cs.items()} for u, cs in after.assignments.items()} == left, name


def test_init_container_cpus_are_reused() -> None:
    """upstream TestStaticPolicyReuseCPUs: an app container takes the CPUs its init container had; removing the
    init container then releases nothing the app still holds."""
    p = policy(SINGLE_SOCKET_HT, 1)
    st = state("0-7")
    pod = make_pod("fakePod", ("app", res("4")), init=(("init", res("4"), False),))
    st = sp.allocate(p, st, pod, pod.spec.init_containers[0])
    assert str(st.get("fakePod", "init")) == "1-2,5-6"
    st = sp.allocate(p, st, pod, pod.spec.containers[0])
    assert str(st.get("fakePod", "app")) == "1-2,5-6"
    assert str(st.default) == "0,3-4,7"
    st = sp.remove_container(st, "fakePod", "init")
    assert str(st.default) == "0,3-4,7"
    assert st.cpus_to_reuse == {"fakePod": EMPTY}


def test_sidecar_cpus_are_not_reused() -> None:
    p = policy(SINGLE_SOCKET_HT, 1)
    pod = make_pod("fakePod", ("app", res("2")), init=(("side", res("2"), True),))
    st = sp.allocate(p, state("0-7"), pod, pod.spec.init_containers[0])
    st = sp.allocate(p, st, pod, pod.spec.containers[0])
    assert st.get("fakePod", "side") is not None and st.get("fakePod", "app") is not None
    assert not st.get("fakePod", "side") & st.get("fakePod", "app")  # type: ignore[operator]
