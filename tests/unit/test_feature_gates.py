"""featureGates / --feature-gates and qosReserved / --qos-reserved as settings (issue 20).

kopflet implements three gates, QOSReserved, LoggingAlphaOptions and LoggingBetaOptions (the logging options, checked
in test_logging_options.py), and SystemdWatchdog's behaviour (locked on: taken at true, not a no-op);
any other gate upstream v1.37.1 knows is taken only at its default there
(a no-op, noted at start), and refused at start at the other value (upstream's words for a gate locked to its
default); a name upstream does not know either gets upstream's message. qosReserved is parsed as upstream's
ParseQOSReserved, in force only with the gate on, and a warning at start says when it is not.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from kopflet.config import configz, feature_gates, settings
from kopflet.config.feature_gates import FeatureGateError
from kopflet.config.settings import AgentConfig, ConfigError
from kopflet.config.upstream_feature_gates import (
    EMULATION_VERSION,
    KUBERNETES_VERSION,
    LOCKED_TO_DEFAULT,
    PRE_ALPHA,
    UPSTREAM_FEATURE_GATES,
)
from tests.unit.test_config import run, with_file

REPO = Path(__file__).resolve().parents[2]


def _generator() -> Any:
    loaded = importlib.util.spec_from_file_location("gen_feature_gates", REPO / "tests" / "data" /
                                                    "gen_feature_gates.py")
    assert loaded is not None and loaded.loader is not None
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    return module


GEN = _generator()
VERSION, STAGING = GEN.pinned_versions()


# ------------------------------------------------------------------------------------- upstream's gate names


def test_the_gate_list_is_of_the_pinned_release() -> None:
    assert KUBERNETES_VERSION == VERSION
    # one of each source: pkg/features, the apiserver's, client-go's, the logs API's, zpages', the special gates
    for name in ("QOSReserved", "PodLevelResources", "InPlacePodVerticalScaling", "APIResponseCompression",
                 "WatchListClient", "ContextualLogging", "ComponentFlagz", "AllAlpha", "AllBeta"):
        assert name in UPSTREAM_FEATURE_GATES
    assert "LoggingStableOptions" not in UPSTREAM_FEATURE_GATES  # declared, never registered upstream
    assert len(UPSTREAM_FEATURE_GATES) > 200
    assert EMULATION_VERSION == "1.37"
    assert LOCKED_TO_DEFAULT <= UPSTREAM_FEATURE_GATES.keys() and PRE_ALPHA <= UPSTREAM_FEATURE_GATES.keys()


@pytest.mark.parametrize(("name", "default", "locked"), [
    ("QOSReserved", False, False),  # 1.11 alpha
    ("PodLevelResources", True, False),  # 1.32 alpha, 1.34 beta on
    ("MemoryQoS", True, False),  # 1.22 alpha, 1.37 beta on: an entry at exactly the emulation version counts
    ("InPlacePodVerticalScaling", True, True),  # 1.35 GA, LockToDefault
    ("CPUManagerPolicyAlphaOptions", False, False),
    ("AllowOverwriteTerminationGracePeriodSeconds", False, True),  # 1.35 deprecated, locked to false
    ("CustomCPUCFSQuotaPeriod", True, False),  # 1.36 GA; "LockToDefault in 1.37" is only a comment upstream
    ("DRAFractionalCapacityRange", False, False),  # its 1.37 on-by-default entry needs min compatibility 1.37 (>1.36)
    ("ContextualLogging", True, False),  # component-base logs API
    ("AllAlpha", False, False), ("AllBeta", False, False),  # component-base's special gates
])
def test_each_gate_has_its_default_at_the_emulation_version(name: str, default: bool, locked: bool) -> None:
    """component-base featureSpecAtEmulationAndMinCompatVersion at 1.37 (min compatibility 1.36)."""
    assert UPSTREAM_FEATURE_GATES[name] is default
    assert (name in LOCKED_TO_DEFAULT) is locked


def test_the_generator_picks_the_spec_at_the_emulation_version() -> None:
    """The rule on its own, with entries past the emulation version and a MinCompatibilityVersion one."""
    specs = (
        '{Version: version.MustParse("1.30"), Default: false, PreRelease: featuregate.Alpha},\n'
        '{Version: version.MustParse("1.36"), Default: true, PreRelease: featuregate.Beta},\n'
        '{Version: version.MustParse("1.37"), Default: true, PreRelease: featuregate.GA, LockToDefault: true},\n'
        '{Version: version.MustParse("1.38"), Default: false, PreRelease: featuregate.Deprecated},\n'
    )
    assert GEN._spec_at(specs, (1, 37)) == (True, True, False)
    assert GEN._spec_at(specs, (1, 36)) == (True, False, False)
    assert GEN._spec_at(specs, (1, 29)) == (False, False, True)  # none yet: PreAlpha, default false
    compat = (
        '{Version: version.MustParse("1.37"), Default: false, PreRelease: featuregate.Beta},\n'
        '{Version: version.MustParse("1.37"), Default: true, PreRelease: featuregate.Beta, '
        'MinCompatibilityVersion: version.MustParse("1.37")},\n'
    )
    assert GEN._spec_at(compat, (1, 37)) == (False, False, False)
    assert GEN._spec_at(compat, (1, 38)) == (True, False, False)


@pytest.mark.skipif(not (GEN.kubernetes_dir(VERSION) / "pkg" / "features" / "kube_features.go").is_file(),
                    reason="the pinned module is not in the Go module cache")
def test_the_gate_list_is_generated_from_the_pinned_sources() -> None:
    assert GEN.TARGET.read_text(encoding="utf-8") == GEN.render(VERSION, STAGING), \
        "kopflet/config/upstream_feature_gates.py is out of date: run tests/data/gen_feature_gates.py"


# ------------------------------------------------------------------------------------------- the flag's syntax


@pytest.mark.parametrize(("text", "gates"), [
    ("QOSReserved=true", {"QOSReserved": True}),
    ("QOSReserved=false", {"QOSReserved": False}),
    (" QOSReserved = 1 ", {"QOSReserved": True}),  # names and values trimmed
    ("QOSReserved=T,,", {"QOSReserved": True}),  # empty pairs skipped
    ("QOSReserved=true,QOSReserved=False", {"QOSReserved": False}),  # the last wins
    ("", {}),
    ("A=true,B=0", {"A": True, "B": False}),  # the syntax only: names are checked apart
])
def test_parse_flag(text: str, gates: dict[str, bool]) -> None:
    assert feature_gates.parse_flag(text) == gates


@pytest.mark.parametrize(("text", "message"), [
    ("QOSReserved", "malformed pair, expect string=bool"),
    ("QOSReserved=yes", 'invalid value of QOSReserved: yes, err: strconv.ParseBool: parsing "yes": invalid syntax'),
    ("QOSReserved=", 'invalid value of QOSReserved: , err: strconv.ParseBool: parsing "": invalid syntax'),
])
def test_parse_flag_errors_are_upstreams(text: str, message: str) -> None:
    """component-base cli/flag MapStringBool.Set's errors."""
    with pytest.raises(FeatureGateError) as caught:
        feature_gates.parse_flag(text)
    assert str(caught.value) == message


# ------------------------------------------------------------------------------------------- which gates


NOT_IMPLEMENTED = ("cannot set feature gate {name} to {value}, kopflet does not implement it (it takes {name} only "
                   "at upstream's default, {default}; the only feature gates it implements both ways are "
                   "LoggingAlphaOptions, LoggingBetaOptions and QOSReserved)")


@pytest.mark.parametrize(("gates", "errors", "no_ops"), [
    ({}, [], []),
    ({"QOSReserved": True}, [], []),  # implemented both ways: never a no-op
    ({"QOSReserved": False}, [], []),
    ({"LoggingAlphaOptions": True}, [], []),  # the logging options, both ways
    ({"LoggingAlphaOptions": False}, [], []),
    ({"LoggingBetaOptions": False}, [], []),  # the json format, both ways
    ({"LoggingBetaOptions": True}, [], []),
    ({"NoSuchGate": True}, ["unrecognized feature gate: NoSuchGate"], []),
    ({"NoSuchGate": False}, ["unrecognized feature gate: NoSuchGate"], []),
    ({"qosreserved": True}, ["unrecognized feature gate: qosreserved"], []),  # names are case-sensitive, as upstream
    # at the v1.37.1 default: taken, nothing to do
    ({"PodLevelResources": True}, [], ["PodLevelResources"]),
    ({"InPlacePodVerticalScaling": True}, [], ["InPlacePodVerticalScaling"]),  # locked, at its default
    ({"SystemdWatchdog": True}, [], []),  # locked, at its default, and implemented (the watchdog): no no-op
    ({"SystemdWatchdog": False}, ["cannot set feature gate SystemdWatchdog to false, feature is locked to true"], []),
    # graceful node shutdown: implemented on (its default), not off
    ({"GracefulNodeShutdown": True, "GracefulNodeShutdownBasedOnPodPriority": True}, [], []),
    ({"GracefulNodeShutdown": False},
     [NOT_IMPLEMENTED.format(name="GracefulNodeShutdown", value="false", default="true")], []),
    ({"GracefulNodeShutdownBasedOnPodPriority": False},
     [NOT_IMPLEMENTED.format(name="GracefulNodeShutdownBasedOnPodPriority", value="false", default="true")], []),
    ({"WindowsGracefulNodeShutdown": True}, [], ["WindowsGracefulNodeShutdown"]),  # a no-op on Linux
    ({"AllAlpha": False, "QOSReserved": True}, [], ["AllAlpha"]),
    ({"CPUManagerPolicyAlphaOptions": False, "ContextualLogging": True}, [],
     ["CPUManagerPolicyAlphaOptions", "ContextualLogging"]),
    # the other value: kopflet's refusal, upstream's for a locked gate
    ({"PodLevelResources": False},
     [NOT_IMPLEMENTED.format(name="PodLevelResources", value="false", default="true")], []),
    ({"CPUManagerPolicyAlphaOptions": True},
     [NOT_IMPLEMENTED.format(name="CPUManagerPolicyAlphaOptions", value="true", default="false")], []),
    ({"AllAlpha": True, "QOSReserved": True}, [NOT_IMPLEMENTED.format(name="AllAlpha", value="true", default="false")],
     []),
    ({"InPlacePodVerticalScaling": False},
     ["cannot set feature gate InPlacePodVerticalScaling to false, feature is locked to true"], []),
    ({"AllowOverwriteTerminationGracePeriodSeconds": True},
     ["cannot set feature gate AllowOverwriteTerminationGracePeriodSeconds to true, feature is locked to false"], []),
    # mixed: every problem in name order, no-ops listed apart
    ({"Zed": True, "Alpha": False, "QOSReserved": True, "PodLevelResources": True},
     ["unrecognized feature gate: Alpha", "unrecognized feature gate: Zed"], ["PodLevelResources"]),
    ({"PodLevelResources": False, "MemoryQoS": True, "InPlacePodVerticalScaling": False},
     ["cannot set feature gate InPlacePodVerticalScaling to false, feature is locked to true",
      NOT_IMPLEMENTED.format(name="PodLevelResources", value="false", default="true")], ["MemoryQoS"]),
])
def test_which_gates_are_taken(gates: dict[str, bool], errors: list[str], no_ops: list[str]) -> None:
    assert feature_gates.problems(gates) == errors
    assert feature_gates.no_ops(gates) == no_ops


@pytest.mark.parametrize("value", [True, False])
def test_a_pre_alpha_gate_is_refused_either_way(monkeypatch: pytest.MonkeyPatch, value: bool) -> None:
    """Upstream refuses a gate with no spec at its emulation version whatever the value (none such at v1.37.1)."""
    monkeypatch.setattr(feature_gates, "UPSTREAM_FEATURE_GATES", {**UPSTREAM_FEATURE_GATES, "Future": False})
    monkeypatch.setattr(feature_gates, "PRE_ALPHA", frozenset({"Future"}))
    assert feature_gates.problems({"Future": value}) == [
        f"cannot set feature gate Future to {str(value).lower()}, feature is PreAlpha at emulated version 1.37, min "
        f"compatibility version 1.36"]
    assert feature_gates.no_ops({"Future": value}) == []


def test_every_known_gate_is_taken_at_its_default_and_refused_otherwise() -> None:
    for name, default in UPSTREAM_FEATURE_GATES.items():
        if name in feature_gates.IMPLEMENTED:
            continue
        assert feature_gates.problems({name: default}) == [], name
        # a gate whose behaviour at its default kopflet implements is taken at its default, but is no no-op
        implemented = feature_gates.IMPLEMENTED_LOCKED | feature_gates.IMPLEMENTED_AT_DEFAULT
        assert feature_gates.no_ops({name: default}) == ([] if name in implemented else [name])
        assert len(feature_gates.problems({name: not default})) == 1, name


def test_the_locked_gates_kopflet_implements_are_upstreams_locked_gates() -> None:
    """SystemdWatchdog (kopflet.watchdog), NodeLogQuery (kopflet.server.node_log_query): GA, locked to true at
    v1.37.1."""
    assert feature_gates.IMPLEMENTED_LOCKED == {"SystemdWatchdog", "NodeLogQuery"}
    for name in feature_gates.IMPLEMENTED_LOCKED:
        assert name in LOCKED_TO_DEFAULT and name not in feature_gates.IMPLEMENTED
    assert UPSTREAM_FEATURE_GATES["SystemdWatchdog"] is True
    assert UPSTREAM_FEATURE_GATES["NodeLogQuery"] is True


def test_check_aggregates_as_upstream() -> None:
    with pytest.raises(FeatureGateError) as caught:
        feature_gates.check({"B": True, "A": True})
    assert str(caught.value) == "[unrecognized feature gate: A, unrecognized feature gate: B]"
    assert feature_gates.check({"QOSReserved": True}) == {"QOSReserved": True}


def test_the_graceful_node_shutdown_gates_are_upstreams_beta_gates_on() -> None:
    assert feature_gates.IMPLEMENTED_AT_DEFAULT == {"GracefulNodeShutdown", "GracefulNodeShutdownBasedOnPodPriority"}
    for name in feature_gates.IMPLEMENTED_AT_DEFAULT:
        assert UPSTREAM_FEATURE_GATES[name] is True and name not in LOCKED_TO_DEFAULT
        assert name not in feature_gates.IMPLEMENTED and name not in feature_gates.IMPLEMENTED_LOCKED


@pytest.mark.parametrize(("gates", "name", "on"), [
    ({}, "GracefulNodeShutdown", True),  # a gate outside IMPLEMENTED: its upstream default
    ({}, "GracefulNodeShutdownBasedOnPodPriority", True),
    ({"GracefulNodeShutdown": False}, "GracefulNodeShutdown", False),  # as set (settings refuses it first)
    ({}, "PodLevelResources", True),
    ({}, "CPUManagerPolicyAlphaOptions", False),
])
def test_enabled_falls_back_to_upstreams_default(gates: dict[str, bool], name: str, on: bool) -> None:
    assert feature_gates.enabled(gates, name) is on


@pytest.mark.parametrize(("gates", "on"), [({}, False), ({"QOSReserved": False}, False), ({"QOSReserved": True}, True)])
def test_qos_reserved_is_alpha_and_off_by_default(gates: dict[str, bool], on: bool) -> None:
    assert feature_gates.enabled(gates, feature_gates.QOS_RESERVED) is on


# ------------------------------------------------------------------------------------------- as settings


@pytest.mark.parametrize(("argv", "body", "gates"), [
    ((), "", {}),
    (("--feature-gates=QOSReserved=true",), "", {"QOSReserved": True}),
    ((), "featureGates: {QOSReserved: true}\n", {"QOSReserved": True}),
    (("--feature-gates=QOSReserved=false",), "featureGates: {QOSReserved: true}\n", {"QOSReserved": False}),
    (("--feature-gates=QOSReserved=false", "--feature-gates=QOSReserved=true"), "", {"QOSReserved": True}),
    (("--feature-gates=",), "featureGates: {QOSReserved: true}\n", {"QOSReserved": True}),  # merged, not replaced
    ((), "featureGates: {}\n", {}),
], ids=["none", "flag", "file", "flag over file", "repeated flags", "empty flag keeps the file's", "empty map"])
def test_feature_gates_from_flags_and_file(argv: tuple[str, ...], body: str, gates: dict[str, bool]) -> None:
    """Upstream kubeletConfigFlagPrecedence: the flags' gates are merged over the file's."""
    assert dict(with_file(body, *argv).feature_gates) == gates


@pytest.mark.parametrize(("argv", "body", "message"), [
    (("--feature-gates=Foo=true",), "", "--feature-gates: unrecognized feature gate: Foo"),
    (("--feature-gates=PodLevelResources=false",), "",
     "--feature-gates: cannot set feature gate PodLevelResources to false, kopflet does not implement it"),
    ((), "featureGates: {InPlacePodVerticalScaling: false}\n",
     'field "featureGates": cannot set feature gate InPlacePodVerticalScaling to false, feature is locked to true'),
    (("--feature-gates=CPUManagerPolicyAlphaOptions=true",), "featureGates: {PodLevelResources: true}\n",
     "--feature-gates: cannot set feature gate CPUManagerPolicyAlphaOptions to true, kopflet does not implement it"),
    (("--feature-gates=QOSReserved",), "", "--feature-gates: malformed pair, expect string=bool"),
    ((), "featureGates: {Foo: true}\n", 'field "featureGates": unrecognized feature gate: Foo'),
    ((), "featureGates: {QOSReserved: 'true'}\n", 'field "featureGates": expected true or false, got "true" for '
                                                  '"QOSReserved"'),
    ((), "featureGates: [QOSReserved]\n", 'field "featureGates": expected a mapping of feature gate names'),
])
def test_feature_gate_errors_name_where_they_are(argv: tuple[str, ...], body: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        with_file(body, *argv)
    assert message in str(caught.value)


@pytest.mark.parametrize(("argv", "body", "reserved"), [
    ((), "", {}),
    (("--qos-reserved=memory=50%",), "", {"memory": "50%"}),
    ((), "qosReserved: {memory: 100%}\n", {"memory": "100%"}),
    (("--qos-reserved=memory=0%",), "qosReserved: {memory: 100%}\n", {"memory": "0%"}),  # a flag replaces the map
    (("--qos-reserved=",), "qosReserved: {memory: 100%}\n", {}),
], ids=["none", "flag", "file", "flag over file", "empty flag"])
def test_qos_reserved_from_flags_and_file(argv: tuple[str, ...], body: str, reserved: dict[str, str]) -> None:
    assert dict(with_file(body, *argv).qos_reserved) == reserved


@pytest.mark.parametrize(("argv", "body", "message"), [
    (("--qos-reserved=cpu=50%",), "", '--qos-reserved: cannot reserve "cpu" resource'),
    (("--qos-reserved=memory=50",), "",
     "--qos-reserved: failed to parse percentage \"50\" for \"memory\" resource: percentage expected, got '50'"),
    ((), "qosReserved: {memory: 101%}\n",
     'field "qosReserved": failed to parse percentage "101%" for "memory" resource: percentage must be between 0 '
     'and 100'),
    ((), "qosReserved: {memory: 50}\n", 'field "qosReserved": expected a mapping of strings, got 50'),
    # parsed whether or not the gate is on, as upstream's server.go does
    (("--qos-reserved=memory=x%",), "featureGates: {QOSReserved: false}\n", "invalid number in percentage 'x%'"),
])
def test_qos_reserved_errors(argv: tuple[str, ...], body: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        with_file(body, *argv)
    assert message in str(caught.value)


@pytest.mark.parametrize(("argv", "in_force", "warnings"), [
    ((), None, ()),
    (("--qos-reserved=memory=50%",), None,
     ("qosReserved (--qos-reserved) is ignored: the QOSReserved feature gate is disabled (enable it with "
      "--feature-gates=QOSReserved=true or featureGates: {QOSReserved: true})",)),
    (("--qos-reserved=memory=50%", "--feature-gates=QOSReserved=false"), None,
     ("qosReserved (--qos-reserved) is ignored: the QOSReserved feature gate is disabled (enable it with "
      "--feature-gates=QOSReserved=true or featureGates: {QOSReserved: true})",)),
    (("--qos-reserved=memory=50%", "--feature-gates=QOSReserved=true"), {"memory": 50}, ()),
    (("--feature-gates=QOSReserved=true",), {},
     ("the QOSReserved feature gate is enabled but qosReserved (--qos-reserved) reserves no memory: the QoS cgroups "
      "get no memory limits",)),
    (("--qos-reserved=memory=50%", "--feature-gates=QOSReserved=true", "--cgroups-per-qos=false",
      "--enforce-node-allocatable="), {"memory": 50},
     ("qosReserved (--qos-reserved) is ignored: without cgroupsPerQOS (--cgroups-per-qos) there are no QoS cgroups "
      "to limit",)),
], ids=["nothing", "gate off", "gate explicitly off", "gate on", "gate on, nothing reserved", "no QoS cgroups"])
def test_what_is_in_force_and_the_start_up_warnings(argv: tuple[str, ...], in_force: dict[str, int] | None,
                                                    warnings: tuple[str, ...]) -> None:
    cfg = run(argv)
    assert (None if cfg.qos_reserved_in_force is None else dict(cfg.qos_reserved_in_force)) == in_force
    assert cfg.startup_warnings == warnings


@pytest.mark.parametrize(("argv", "body", "gates", "notes"), [
    ((), "", {}, ()),
    (("--feature-gates=QOSReserved=true",), "", {"QOSReserved": True}, ()),
    (("--feature-gates=PodLevelResources=true",), "", {"PodLevelResources": True},
     ("feature gate PodLevelResources=true is upstream's default: accepted, nothing to do",)),
    ((), "featureGates: {InPlacePodVerticalScaling: true, AllAlpha: false, QOSReserved: true}\n",
     {"InPlacePodVerticalScaling": True, "AllAlpha": False, "QOSReserved": True},
     ("feature gate AllAlpha=false is upstream's default: accepted, nothing to do",
      "feature gate InPlacePodVerticalScaling=true is upstream's default: accepted, nothing to do")),
], ids=["nothing", "implemented", "flag at the default", "file at the defaults"])
def test_gates_at_their_default_start_with_a_note(argv: tuple[str, ...], body: str, gates: dict[str, bool],
                                                  notes: tuple[str, ...]) -> None:
    """A kubelet config that spells out upstream's defaults starts; the gates are kept as given (configz)."""
    cfg = with_file(body, *argv)
    assert dict(cfg.feature_gates) == gates
    assert cfg.startup_notes == notes
    assert configz.kubelet_configuration(cfg).get("featureGates", {}) == gates


def test_neither_is_refused_as_unsupported_any_more() -> None:
    assert not {"featureGates", "qosReserved"} & settings.UNSUPPORTED_FIELDS
    assert "--feature-gates" in settings.usage() and "--qos-reserved" in settings.usage()


# ------------------------------------------------------------------------------------------------- configz


def test_configz_places_them_in_the_v1beta1_order() -> None:
    """types.go: qosReserved after topologyManagerPolicyOptions, featureGates after protectKernelDefaults; both
    omitempty maps, as given."""
    body = configz.kubelet_configuration(AgentConfig(
        node_name="n", feature_gates={"QOSReserved": True}, qos_reserved={"memory": "50%"},
        topology_manager_policy_options={"prefer-closest-numa-nodes": "true"}, protect_kernel_defaults=True))
    keys = list(body)
    assert body["qosReserved"] == {"memory": "50%"}
    assert body["featureGates"] == {"QOSReserved": True}
    assert keys.index("qosReserved") == keys.index("topologyManagerPolicyOptions") + 1
    assert keys[keys.index("qosReserved") + 1] == "runtimeRequestTimeout"
    assert keys.index("featureGates") == keys.index("protectKernelDefaults") + 1
    assert keys[keys.index("featureGates") + 1] == "memorySwap"  # types.go: failSwapOn (refused), then memorySwap
    empty = configz.kubelet_configuration(AgentConfig(node_name="n"))
    assert "qosReserved" not in empty and "featureGates" not in empty
    assert '"featureGates":{"QOSReserved":true}' in configz.configz_body(AgentConfig(
        node_name="n", feature_gates={"QOSReserved": True}))
