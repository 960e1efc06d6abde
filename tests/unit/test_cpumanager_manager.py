"""The CPU manager's rules around the static policy (cpu_manager.go, policy_options.go, the topology manager's none
admit handler, pkg/kubelet/cm/admission/errors.go at v1.37.1), table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from kopflet.cm.cpumanager import cpu_manager as cm
from kopflet.cm.cpumanager import policy_options as po
from kopflet.cm.cpumanager import state as cs
from kopflet.cm.cpumanager import static_policy as sp
from kopflet.cm.cpumanager.cpu_manager import Pods, RunningContainer, Snapshot
from kopflet.cm.cpumanager.cpuset import parse
from kopflet.cm.cpumanager.static_policy import State
from kopflet.cm.cpumanager.topology import CPUInfo, from_cpu_infos
from kopflet.lifecycle import admission
from tests.unit.test_cpumanager_assignment import DUAL_SOCKET_HT, SINGLE_SOCKET_HT
from tests.unit.test_cpumanager_static_policy import make_pod, res

# This project's machine: 2 CPUs, one socket, one NUMA node, no SMT.
TWO_CPUS = from_cpu_infos({cpu: CPUInfo(numa_node_id=0, socket_id=0, core_id=cpu) for cpu in (0, 1)})


def st(default: str, assignments: dict[str, dict[str, str]] | None = None) -> State:
    return State(default=parse(default),
                 assignments={u: {n: parse(c) for n, c in v.items()} for u, v in (assignments or {}).items()})


def pods(**active: tuple[str, ...]) -> Pods:
    return Pods(known=frozenset(active), active={uid: frozenset(names) for uid, names in active.items()})


def static(topology: Any = TWO_CPUS, **kwargs: Any) -> sp.StaticPolicy:
    kwargs.setdefault("system_reserved", {"cpu": "1"})
    kwargs.setdefault("kube_reserved", {})
    policy = cm.new_policy("static", kwargs.pop("options", {}), topology=topology, **kwargs)
    assert policy is not None
    return policy


# ---------------------------------------------------------------------------------------------- options

@pytest.mark.parametrize(("policy", "options", "milli", "expected"), [
    ("none", {}, 0, po.StaticPolicyOptions()),
    ("static", {}, 1, po.StaticPolicyOptions()),
    ("static", {"full-pcpus-only": "true"}, 1000, po.StaticPolicyOptions(full_pcpus_only=True)),
    ("static", {"strict-cpu-reservation": "True", "full-pcpus-only": "0"}, 1000,
     po.StaticPolicyOptions(strict_cpu_reservation=True)),
    # upstream options kopflet does not implement change nothing when off
    ("static", {"distribute-cpus-across-numa": "false", "prefer-align-cpus-by-uncorecache": "F"}, 1000,
     po.StaticPolicyOptions()),
])
def test_valid_configurations(policy: str, options: dict[str, str], milli: int,
                              expected: po.StaticPolicyOptions) -> None:
    assert po.validate(policy, options, milli) == expected


@pytest.mark.parametrize(("policy", "options", "milli", "error"), [
    ("Static", {}, 1000, 'unknown policy: "Static"'),
    ("none", {"full-pcpus-only": "true", "a": "b"}, 1000,
     "new none policy error: None policy: received unsupported options=map[a:b full-pcpus-only:true]"),
    # a zero reservation leaves cpu out of upstream's reservation map
    ("static", {}, 0, "[cpumanager] unable to determine reserved CPU resources for static policy"),
    ("static", {"full-pcpus-only": "true"}, 0,
     "[cpumanager] unable to determine reserved CPU resources for static policy"),
    ("static", {"foo": "true"}, 1000, 'new static policy error: unknown CPU Manager Policy option: "foo"'),
    ("static", {"align-by-socket": "true"}, 1000,
     'new static policy error: CPU Manager Policy Alpha-level Options not enabled, but option "align-by-socket" '
     'provided'),
    ("static", {"distribute-cpus-across-cores": "false"}, 1000,
     'new static policy error: CPU Manager Policy Alpha-level Options not enabled, but option '
     '"distribute-cpus-across-cores" provided'),
    ("static", {"full-pcpus-only": "yes"}, 1000,
     'new static policy error: bad value for option "full-pcpus-only": strconv.ParseBool: parsing "yes": '
     'invalid syntax'),
    ("static", {"distribute-cpus-across-numa": "true"}, 1000,
     'new static policy error: unsupported cpumanager option: "distribute-cpus-across-numa" (true)'),
    ("static", {"prefer-align-cpus-by-uncorecache": "1"}, 1000,
     'new static policy error: unsupported cpumanager option: "prefer-align-cpus-by-uncorecache" (1)'),
])
def test_refused_configurations(policy: str, options: dict[str, str], milli: int, error: str) -> None:
    with pytest.raises(po.OptionsError) as err:
        po.validate(policy, options, milli)
    assert str(err.value) == error


@pytest.mark.parametrize(("system", "kube", "reserved", "expected_system", "expected_kube", "milli"), [
    ({}, {}, "", {}, {}, 0),
    ({"cpu": "100m"}, {"cpu": "200m", "memory": "1Gi"}, "", {"cpu": "100m"}, {"cpu": "200m", "memory": "1Gi"}, 300),
    # --reserved-cpus replaces both cpu reservations by its count (upstream server.go run)
    ({"cpu": "100m", "memory": "1Gi"}, {"cpu": "200m"}, "0", {"cpu": "1", "memory": "1Gi"}, {}, 1000),
    ({}, {"cpu": "3"}, "0-1,6", {"cpu": "3"}, {}, 3000),
    ({}, {"cpu": "1500u"}, "", {}, {"cpu": "1500u"}, 2),  # MilliValue rounds up
])
def test_reservations(system: dict[str, str], kube: dict[str, str], reserved: str, expected_system: dict[str, str],
                      expected_kube: dict[str, str], milli: int) -> None:
    got_system, got_kube = po.reservations(system, kube, reserved)
    assert (dict(got_system), dict(got_kube)) == (expected_system, expected_kube)
    assert po.reserved_cpu_milli(got_system, got_kube) == milli


@pytest.mark.parametrize(("milli", "count"), [(1, 1), (999, 1), (1000, 1), (1001, 2), (2000, 2)])
def test_num_reserved_cpus_is_the_ceiling(milli: int, count: int) -> None:
    assert po.num_reserved_cpus(milli) == count


def test_reserved_cpus_parse_error_is_upstreams() -> None:
    with pytest.raises(po.OptionsError) as err:
        po.parse_reserved_cpus("0-x")
    assert str(err.value) == ('invalid configuration: unable to parse reservedSystemCPUs (--reserved-cpus) 0-x, '
                              'error: strconv.Atoi: parsing "x": invalid syntax')


# ------------------------------------------------------------------------------------------- new_policy

@pytest.mark.parametrize(("kwargs", "reserved", "physical"), [
    ({"system_reserved": {"cpu": "1"}}, "0", "0"),
    ({"system_reserved": {"cpu": "100m"}, "kube_reserved": {"cpu": "100m"}}, "0", "0"),  # ceil(200m) = 1
    ({"system_reserved": {}, "reserved_cpus": "1"}, "1", "1"),
    ({"system_reserved": {"cpu": "2"}, "kube_reserved": {"cpu": "1"}, "reserved_cpus": "1"}, "1", "1"),
    ({"topology": SINGLE_SOCKET_HT, "system_reserved": {"cpu": "1500m"}}, "0,4", "0,4"),
    ({"topology": DUAL_SOCKET_HT, "system_reserved": {}, "reserved_cpus": "1,6"}, "1,6", "0-1,6-7"),
])
def test_new_static_policy(kwargs: dict[str, Any], reserved: str, physical: str) -> None:
    policy = static(**kwargs)
    assert (str(policy.reserved), str(policy.reserved_physical)) == (reserved, physical)


def test_new_policy_options_reach_the_policy() -> None:
    policy = static(SINGLE_SOCKET_HT, options={"full-pcpus-only": "true", "strict-cpu-reservation": "true"})
    assert (policy.full_pcpus_only, policy.strict_cpu_reservation) == (True, True)


def test_none_policy_needs_no_topology() -> None:
    assert cm.new_policy("none", {}, topology=None, topology_error="boom", system_reserved={},
                         kube_reserved={}) is None


@pytest.mark.parametrize(("name", "kwargs", "error"), [
    ("static", {"system_reserved": {}}, "[cpumanager] unable to determine reserved CPU resources for static policy"),
    ("static", {"system_reserved": {}, "reserved_cpus": "2"}, "reserved-cpus: 2 is not a subset of online-cpus: 0-1"),
    ("none", {"system_reserved": {}, "reserved_cpus": "0-3"}, "reserved-cpus: 0-3 is not a subset of online-cpus: 0-1"),
    ("static", {"system_reserved": {"cpu": "3"}},
     "new static policy error: [cpumanager] unable to reserve the required amount of CPUs (size of  did not equal 3)"),
    ("static", {"topology": None, "topology_error": "could not detect number of cpus"},
     "could not detect number of cpus"),
    ("none", {"topology": None, "topology_error": "open /sys: denied", "reserved_cpus": "0"},
     "unable to discover CPU topology info: open /sys: denied"),
    ("static", {"options": {"full-pcpus-only": "maybe"}},
     'new static policy error: bad value for option "full-pcpus-only": strconv.ParseBool: parsing "maybe": '
     'invalid syntax'),
])
def test_new_policy_errors(name: str, kwargs: dict[str, Any], error: str) -> None:
    kwargs.setdefault("system_reserved", {"cpu": "1"})
    kwargs.setdefault("kube_reserved", {})
    kwargs.setdefault("topology", TWO_CPUS)
    with pytest.raises(cm.ManagerError) as err:
        cm.new_policy(name, kwargs.pop("options", {}), **kwargs)
    assert str(err.value) == error


# ---------------------------------------------------------------------------------------------- restore

PATH = "/var/lib/kopflet/cpu_manager_state"


@pytest.mark.parametrize(("policy_name", "text", "state", "write"), [
    ("none", None, st(""), True),  # upstream writes a checkpoint for the none policy too
    ("static", None, st("0-1"), True),  # a new state: every CPU shared
    ("static", cs.encode("static", st("0-1")), st("0-1"), False),
    ("static", cs.encode("static", st("0", {"pod": {"c": "1"}})), st("0", {"pod": {"c": "1"}}), False),
    ("none", cs.encode("none", st("")), st(""), False),
])
def test_restore(policy_name: str, text: str | None, state: State, write: bool) -> None:
    policy = static() if policy_name == "static" else None
    assert cm.restore(policy, policy_name, text, PATH) == (state, write)


@pytest.mark.parametrize(("policy_name", "text", "error"), [
    # a policy change without removing the file (upstream's documented procedure: drain, delete, restart)
    ("static", cs.encode("none", st("")),
     'start cpu manager error: could not restore state from checkpoint: configured policy "static" differs from '
     'state checkpoint policy "none", please drain this node and delete the CPU manager checkpoint file '
     '"/var/lib/kopflet/cpu_manager_state" before restarting Kubelet'),
    ("none", cs.encode("static", st("0-1")),
     'start cpu manager error: could not restore state from checkpoint: configured policy "none" differs from '
     'state checkpoint policy "static", please drain this node and delete the CPU manager checkpoint file '
     '"/var/lib/kopflet/cpu_manager_state" before restarting Kubelet'),
    ("static", "{", "start cpu manager error: could not restore state from checkpoint: failed to deserialize cpu "
                    "manager checkpoint: Expecting property name enclosed in double quotes: line 1 column 2 (char 1), "
                    "please drain this node and delete the CPU manager checkpoint file "
                    '"/var/lib/kopflet/cpu_manager_state" before restarting Kubelet'),
    # validateState: the machine changed, or another reservation
    ("static", cs.encode("static", st("0-3")),
     'start cpu manager error: current set of available CPUs "0-1" doesn\'t match with CPUs in state "0-3"'),
    ("static", cs.encode("static", st("1", {"pod": {"c": "0"}})),
     'start cpu manager error: not all reserved cpus: "0" are present in defaultCpuSet: "1"'),
    ("static", cs.encode("static", st("0-1", {"pod": {"c": "1"}})),
     'start cpu manager error: pod: pod, container: c cpuset: "1" overlaps with default cpuset "0-1"'),
])
def test_restore_errors(policy_name: str, text: str, error: str) -> None:
    policy = static() if policy_name == "static" else None
    with pytest.raises(cm.ManagerError) as err:
        cm.restore(policy, policy_name, text, PATH)
    assert str(err.value) == error


# ------------------------------------------------------------------------------------------ stale state

@pytest.mark.parametrize(("state", "known_pods", "gone", "expected"), [
    # active containers keep their CPUs
    (st("0", {"a": {"c": "1"}}), pods(a=("c",)), (), st("0", {"a": {"c": "1"}})),
    # a known pod that is no longer active (terminal, deleted) releases them
    (st("0", {"a": {"c": "1"}}), pods(), (), st("0", {"a": {"c": "1"}})),
    (st("0", {"a": {"c": "1"}}), Pods(known=frozenset({"a"})), (), st("0-1")),
    # a container no longer in its pod's spec
    (st("0", {"a": {"c": "1"}}), pods(a=("other",)), (), st("0-1")),
    # an unknown pod's CPUs are kept until the apiserver confirms it is gone
    (st("0", {"a": {"c": "1"}}), pods(b=("c",)), ("a",), st("0-1")),
    (st("0", {"a": {"c": "1"}}), pods(b=("c",)), ("b",), st("0", {"a": {"c": "1"}})),
])
def test_remove_stale_state(state: State, known_pods: Pods, gone: tuple[str, ...], expected: State) -> None:
    assert cm.remove_stale_state(state, known_pods, gone) == expected


def test_stale_removal_keeps_cpus_a_sibling_still_holds() -> None:
    state = st("0", {"a": {"init": "1", "app": "1"}})
    assert cm.remove_stale_state(state, pods(a=("app",)), ()) == st("0", {"a": {"app": "1"}})


# -------------------------------------------------------------------------------------------- admission

GUARANTEED_1 = res("1")


def admit(state: State, pod: Any, known_pods: Pods | None = None, **policy_kwargs: Any) -> cm.Admission:
    return cm.admit(Snapshot(policy=static(**policy_kwargs), state=state, pods=known_pods or Pods()), pod)


def rejection(reason: str, message: str) -> admission.Rejection:
    return admission.Rejection(reason=reason, message="Pod was rejected: " + message)


@pytest.mark.parametrize(("state", "pod", "known_pods", "expected"), [
    # a Guaranteed container with an integer request gets CPU 1 (CPU 0 is reserved)
    (st("0-1"), make_pod("p", ("c", GUARANTEED_1)), Pods(), cm.Admission(state=st("0", {"p": {"c": "1"}}))),
    # shared-pool containers change nothing: fractional, Burstable, BestEffort
    (st("0-1"), make_pod("p", ("c", res("500m"))), Pods(), cm.Admission(state=st("0-1"))),
    (st("0-1"), make_pod("p", ("c", res("1", "2"))), Pods(), cm.Admission(state=st("0-1"))),
    (st("0-1"), make_pod("p", ("c", {})), Pods(), cm.Admission(state=st("0-1"))),
    # no CPU left: upstream's UnexpectedAdmissionError wrapping of the allocation error
    (st("0", {"a": {"c": "1"}}), make_pod("p", ("c", GUARANTEED_1)), pods(a=("c",)),
     cm.Admission(rejection=rejection(
         "UnexpectedAdmissionError",
         "Allocate failed due to not enough cpus available to satisfy request: requested=1, available=0, "
         "which is unexpected"))),
    # the stale assignment of a pod that is gone is released first, then allocated again
    (st("0", {"a": {"c": "1"}}), make_pod("p", ("c", GUARANTEED_1)), Pods(known=frozenset({"a"})),
     cm.Admission(state=st("0", {"p": {"c": "1"}}))),
    # a pod already in the state (admitted before a restart) keeps its CPUs
    (st("0", {"p": {"c": "1"}}), make_pod("p", ("c", GUARANTEED_1)), Pods(),
     cm.Admission(state=st("0", {"p": {"c": "1"}}))),
])
def test_admit(state: State, pod: Any, known_pods: Pods, expected: cm.Admission) -> None:
    assert admit(state, pod, known_pods) == expected


def test_admit_allocates_every_container_in_order() -> None:
    pod = make_pod("p", ("a1", res("1")), ("a2", res("1")), init=(("i", res("2"), False),))
    got = cm.admit(Snapshot(policy=static(SINGLE_SOCKET_HT), state=st("0-7")), pod)
    assert got.rejection is None and got.state is not None
    held = got.state.assignments["p"]
    assert [len(held[n]) for n in ("i", "a1", "a2")] == [2, 1, 1] and not held["a1"] & held["a2"]
    # the init container's CPUs are reused by an app container (upstream cpusToReuse) and stay out of the pool
    assert held["a2"].is_subset_of(held["i"])
    assert not got.state.default & (held["i"] | held["a1"] | held["a2"])
    assert got.state.default | held["i"] | held["a1"] | held["a2"] == parse("0-7")


def test_admit_smt_alignment_error_is_its_own_reason() -> None:
    pod = make_pod("p", ("c", res("1")))
    got = cm.admit(Snapshot(policy=static(SINGLE_SOCKET_HT, options={"full-pcpus-only": "true"}), state=st("0-7")),
                   pod)
    assert got == cm.Admission(rejection=rejection(
        "SMTAlignmentError", "SMT Alignment Error: requested 1 cpus not multiple cpus per core = 2"))
    assert got.rejection is not None and got.rejection.event_message.startswith("SMT Alignment Error")


def test_admit_under_the_none_policy_records_nothing() -> None:
    assert cm.admit(Snapshot(policy=None, state=State()), make_pod("p", ("c", GUARANTEED_1))) == cm.Admission()


def test_the_pod_being_admitted_counts_as_active() -> None:
    """Its own assignment (a retried admission) is not stale even if the workers do not list it yet."""
    state = st("0", {"p": {"c": "1"}})
    got = admit(state, make_pod("p", ("c", GUARANTEED_1)), Pods(known=frozenset({"p"})))
    assert got.state == state


# -------------------------------------------------------------------------------------------- reconcile

@pytest.mark.parametrize(("state", "active", "running", "applied", "expected"), [
    # an exclusive container and a shared one, both already as the state says: nothing to do
    (st("0", {"g": {"c": "1"}}), pods(g=("c",), b=("c",)),
     [("g", "c", "id-g"), ("b", "c", "id-b")], {"id-g": "1", "id-b": "0"}, []),
    # the shared pool shrank: the shared container is updated
    (st("0", {"g": {"c": "1"}}), pods(g=("c",), b=("c",)),
     [("g", "c", "id-g"), ("b", "c", "id-b")], {"id-g": "1", "id-b": "0-1"}, [("id-b", "0")]),
    # the pool grew back after a release
    (st("0-1"), pods(b=("c",)), [("b", "c", "id-b")], {"id-b": "0"}, [("id-b", "0-1")]),
    # a container never given one (adopted after a restart) gets it
    (st("0-1"), pods(b=("c",)), [("b", "c", "id-b")], {}, [("id-b", "0-1")]),
    # containers of inactive pods, or not in the spec (ephemeral), are left alone
    (st("0-1"), pods(b=("c",)), [("x", "c", "id-x"), ("b", "debug", "id-d")], {}, []),
    # an empty cpuset is never given (the none policy's state)
    (st(""), pods(b=("c",)), [("b", "c", "id-b")], {}, []),
])
def test_reconcile_updates(state: State, active: Pods, running: list[tuple[str, str, str]], applied: dict[str, str],
                           expected: list[tuple[str, str]]) -> None:
    containers = [RunningContainer(*c) for c in running]
    got = cm.reconcile_updates(state, active, containers, {k: parse(v) for k, v in applied.items()})
    assert [(c.container_id, str(cpus)) for c, cpus in got] == expected
