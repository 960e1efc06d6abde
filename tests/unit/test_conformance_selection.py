"""The conformance passes' selection: feature gate defaults read from the pinned Go source, the serial pass's
rule over the suite's labels, the exact ginkgo focus, and the runner's small pure helpers."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from conformance import run, selection
from conformance.selection import Gate, Spec

GO = """
var defaultVersionedKubernetesFeatureGates = map[featuregate.Feature]featuregate.VersionedSpecs{
	AllowDNSOnlyNodeCSR: {
		{Version: version.MustParse("1.0"), Default: true, PreRelease: featuregate.GA},
		{Version: version.MustParse("1.31"), Default: false, PreRelease: featuregate.Deprecated},
	},

	ContainerRestartRules: {
		{Version: version.MustParse("1.34"), Default: false, PreRelease: featuregate.Alpha},
		{Version: version.MustParse("1.35"), Default: true, PreRelease: featuregate.Beta}, // on from here
	},

	NewInNextRelease: {
		{Version: version.MustParse("1.38"), Default: true, PreRelease: featuregate.Beta},
	},

	genericfeatures.APIResponseCompression: {
		{Version: version.MustParse("1.8"), PreRelease: featuregate.Alpha, Default: false},
		{Version: version.MustParse("1.16"), PreRelease: featuregate.Beta, Default: true},
	},

	Locked: {
		{Version: version.MustParse("1.32"), Default: true, LockToDefault: true, PreRelease: featuregate.GA},
	},

	WithMinCompat: {
		{Version: version.MustParse("1.37"), Default: true, PreRelease: featuregate.Beta, MIN_COMPAT},
	},
}

var defaultKubernetesFeatureGateDependencies = map[featuregate.Feature][]featuregate.Feature{
	AllowDNSOnlyNodeCSR: {},
	RestartAllContainersOnContainerExits: {ContainerRestartRules, NodeDeclaredFeatures},
	MultiLine: {
		ContainerRestartRules,
	},
}
""".replace("MIN_COMPAT", 'MinCompatibilityVersion: version.MustParse("1.37")')  # a line too long to write here

CLIENT_GO = """
var defaultVersionedKubernetesFeatureGates = map[Feature]VersionedSpecs{
	WatchListClient: {
		{Version: version.MustParse("1.30"), Default: false, PreRelease: Beta},
		{Version: version.MustParse("1.36"), Default: true, PreRelease: Beta},
	},
	ContainerRestartRules: {
		{Version: version.MustParse("1.30"), Default: false, PreRelease: Alpha},
	},
}
"""


@pytest.mark.parametrize(("minor", "expected"), [
    (37, {"AllowDNSOnlyNodeCSR": Gate("AllowDNSOnlyNodeCSR", False, "Deprecated"),
          "ContainerRestartRules": Gate("ContainerRestartRules", True, "Beta"),
          "APIResponseCompression": Gate("APIResponseCompression", True, "Beta"),
          "Locked": Gate("Locked", True, "GA"),
          "WithMinCompat": Gate("WithMinCompat", True, "Beta")}),
    (34, {"AllowDNSOnlyNodeCSR": Gate("AllowDNSOnlyNodeCSR", False, "Deprecated"),
          "ContainerRestartRules": Gate("ContainerRestartRules", False, "Alpha"),
          "APIResponseCompression": Gate("APIResponseCompression", True, "Beta"),
          "Locked": Gate("Locked", True, "GA")}),
    (30, {"AllowDNSOnlyNodeCSR": Gate("AllowDNSOnlyNodeCSR", True, "GA"),
          "APIResponseCompression": Gate("APIResponseCompression", True, "Beta")}),
])
def test_parse_gates_takes_the_spec_in_force_at_the_release(minor: int, expected: dict[str, Gate]) -> None:
    assert selection.parse_gates(GO, minor) == expected


def test_merge_gates_lets_the_later_file_win() -> None:
    gates = selection.merge_gates([CLIENT_GO, GO], 37)
    assert gates["ContainerRestartRules"].default is True
    assert gates["WatchListClient"] == Gate("WatchListClient", True, "Beta")
    assert selection.merge_gates([GO, CLIENT_GO], 37)["ContainerRestartRules"].default is False


def test_the_pinned_sources_parse_as_the_suite_labels_them() -> None:
    """Against the real files when the Go module cache has them (after `build-binaries.sh --e2e`)."""
    out = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=False).stdout.strip()
    root = Path(out or "/nonexistent")
    paths = [root / f.format(staging="v0.37.1", kubernetes="v1.37.1") for f in selection.GATE_FILES]
    if not all(p.is_file() for p in paths):
        pytest.skip("the pinned Kubernetes modules are not in the Go module cache")
    gates = selection.merge_gates([p.read_text() for p in paths], 37)
    assert gates["ContainerRestartRules"] == Gate("ContainerRestartRules", True, "Beta")
    assert gates["AtomicWriteVolumeUserFields"] == Gate("AtomicWriteVolumeUserFields", False, "Alpha")
    assert gates["InPlacePodVerticalScaling"].default and gates["WatchListClient"].default
    assert len(gates) > 200


REPORT = [{"SuiteDescription": "Kubernetes e2e suite", "SpecReports": [
    {"LeafNodeType": "SynchronizedBeforeSuite", "LeafNodeText": ""},
    {"LeafNodeType": "It", "ContainerHierarchyTexts": ["[sig-node] Pods", "when x"], "LeafNodeText": "should y",
     "ContainerHierarchyLabels": [["sig-node"], []], "LeafNodeLabels": ["NodeConformance"]},
    {"LeafNodeType": "It", "ContainerHierarchyTexts": None, "LeafNodeText": "top level", "LeafNodeLabels": None},
]}]


def test_specs_from_ginkgo_json() -> None:
    assert selection.specs_from_ginkgo_json(REPORT) == [
        Spec("[sig-node] Pods when x should y", frozenset({"sig-node", "NodeConformance"})),
        Spec("top level", frozenset())]


GATES = {"ContainerRestartRules": Gate("ContainerRestartRules", True, "Beta"),
         "NodeDeclaredFeatures": Gate("NodeDeclaredFeatures", True, "GA"),
         "InPlacePodVerticalScaling": Gate("InPlacePodVerticalScaling", True, "GA"),
         "AtomicWriteVolumeUserFields": Gate("AtomicWriteVolumeUserFields", False, "Alpha"),
         "EnvFiles": Gate("EnvFiles", True, "Beta")}


def spec(text: str, *labels: str) -> Spec:
    return Spec(text, frozenset(labels))


@pytest.mark.parametrize(("s", "reason"), [
    (spec("pull image [NodeConformance] [Serial]", "NodeConformance", "Serial"), "Serial node spec"),
    (spec("x [FeatureGate:ContainerRestartRules] y [Beta] [FeatureGate:NodeDeclaredFeatures] [NodeConformance] [Slow]",
          "FeatureGate:ContainerRestartRules", "FeatureGate:NodeDeclaredFeatures", "Beta", "NodeConformance", "Slow"),
     "feature gates on by default: ContainerRestartRules, NodeDeclaredFeatures"),
    (spec("resize [Feature:InPlacePodVerticalScaling] [NodeConformance] [Slow]", "Feature:InPlacePodVerticalScaling",
          "NodeConformance", "Slow"), "feature gates on by default: InPlacePodVerticalScaling"),
    # Already in the node pass: a default-on beta gate's spec that is not slow.
    (spec("x [FeatureGate:ContainerRestartRules] y [Beta] [NodeConformance]", "FeatureGate:ContainerRestartRules",
          "Beta", "NodeConformance"), None),
    (spec("x [FeatureGate:AtomicWriteVolumeUserFields] [Alpha] [NodeConformance] [Slow]",
          "FeatureGate:AtomicWriteVolumeUserFields", "Alpha", "Feature:OffByDefault", "NodeConformance", "Slow"), None),
    # One gate of several off by default is enough to leave it out.
    (spec("x [FeatureGate:ContainerRestartRules] [Slow] [NodeConformance]", "FeatureGate:ContainerRestartRules",
          "FeatureGate:AtomicWriteVolumeUserFields", "NodeConformance", "Slow"), None),
    # A Feature that names no gate is a cluster the suite needs (SELinux, a DRA driver), not a default.
    (spec("x [Feature:SELinux] [NodeConformance] [Slow]", "Feature:SELinux", "NodeConformance", "Slow"), None),
    (spec("x [FeatureGate:Unknown] [NodeConformance] [Slow]", "FeatureGate:Unknown", "NodeConformance", "Slow"), None),
    (spec("x [FeatureGate:EnvFiles] [Beta]", "FeatureGate:EnvFiles", "Beta", "sig-node"), None),  # not a node spec
    (spec("x [NodeConformance] [Serial] [Disruptive]", "NodeConformance", "Serial", "Disruptive"), None),
    (spec("x [NodeConformance] [Serial] [Flaky]", "NodeConformance", "Serial", "Flaky"), None),
    (spec("plain [NodeConformance]", "NodeConformance"), None),
])
def test_serial_reason(s: Spec, reason: str | None) -> None:
    assert selection.serial_reason(s, GATES) == reason


def test_serial_selection_is_sorted_by_name() -> None:
    specs = [spec("b [NodeConformance] [Serial]", "NodeConformance", "Serial"), spec("c"),
             spec("a [NodeConformance] [Serial]", "NodeConformance", "Serial")]
    assert [s.text for s, _ in selection.serial_selection(specs, GATES)] == [
        "a [NodeConformance] [Serial]", "b [NodeConformance] [Serial]"]


@pytest.mark.parametrize(("text", "in_pass"), [
    ("[sig-node] Pods should x [NodeConformance] [Conformance]", True),
    ("[sig-node] Pods should x [NodeConformance] [Slow]", False),
    ("[sig-node] x [FeatureGate:ContainerRestartRules] y [Beta] [NodeConformance]", True),
    ("[sig-node] x [Feature:EnvFiles] [NodeConformance]", False),
    ("[sig-node] Pods should x", False),
])
def test_in_node_pass_is_the_issues_focus_and_skip(text: str, in_pass: bool) -> None:
    assert selection.in_node_pass(spec(text)) is in_pass


def test_exact_focus_matches_the_names_and_nothing_longer() -> None:
    names = ["[sig-node] A (x) [Beta] [NodeConformance]", "[sig-node] B.c? {d} | e-f $ ^ * + [Serial]"]
    focus = selection.exact_focus(names)
    assert " " in focus and "\\ " not in focus and "\\-" not in focus  # RE2 refuses escaped spaces
    assert selection.go_regexp_quote("a\\b") == "a\\\\b"
    for name in names:
        assert re.search(focus, f"Kubernetes e2e suite {name}")
        assert not re.search(focus, f"Kubernetes e2e suite {name} and more")
    assert not re.search(focus, "Kubernetes e2e suite [sig-node] A")


@pytest.mark.parametrize(("text", "seconds"), [("3h", 10800), ("90m", 5400), ("1h30m", 5400), ("45s", 45),
                                               ("1.5h", 5400)])
def test_parse_duration(text: str, seconds: float) -> None:
    assert run.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["3", "h", "3d", ""])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        run.parse_duration(text)


def test_ginkgo_argv_puts_the_report_under_the_output_dir() -> None:
    argv = run.ginkgo_argv(Path("/b/ginkgo"), Path("/b/e2e.test"), {"nodes": 4, "focus": "F", "skip": "S"},
                           Path("/r"), "node-kopflet.xml", "3h", ["--provider=skeleton"])
    assert argv == ["/b/ginkgo", "--nodes=4", "--focus=F", "--skip=S", "--output-dir=/r",
                    "--junit-report=node-kopflet.xml", "--timeout=3h", "--no-color", "/b/e2e.test", "--",
                    "--provider=skeleton"]
    assert "--skip=" not in " ".join(run.ginkgo_argv(Path("g"), Path("e"), {"nodes": 1, "focus": "F"}, Path("/r"),
                                                     "j.xml", "6h", []))


def test_the_passes() -> None:
    node, serial = selection.PASSES["node"], selection.PASSES["serial"]
    assert (node.focus, node.skip, node.nodes) == (
        r"\[NodeConformance\]", r"\[Slow\]|\[Serial\]|\[Disruptive\]|\[Flaky\]|\[Feature:|\[Alpha\]", 4)
    assert (serial.focus, serial.nodes, serial.serial_nodes) == ("", 4, 1)
    cluster = selection.PASSES["cluster"]
    assert (cluster.focus, cluster.skip, cluster.nodes, cluster.serial_nodes, cluster.cluster) == (
        r"\[Conformance\]", r"\[Disruptive\]", 4, 1, True)
    assert selection.STACK_PASSES == ("node", "serial")


def test_a_regex_pass_runs_its_serial_specs_by_name_after_the_others(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    names = ["[sig-a] x [Conformance]", "[sig-b] y [Serial] [Conformance]", "[sig-c] z (1) [Conformance]"]
    calls = []

    def dry_run(e2e: Path, workdir: Path, name: str, focus: str = "", skip: str = "") -> list[Spec]:
        calls.append((focus, skip))
        return [Spec(n, frozenset()) for n in names]

    monkeypatch.setattr(run, "dry_run", dry_run)
    sel = run.plan(selection.PASSES["cluster"], None, Path("e2e.test"), tmp_path, None)  # type: ignore[arg-type]
    assert calls == [(r"\[Conformance\]", r"\[Disruptive\]")] * 2
    assert sel["count"] == 3
    parallel, serial = sel["parts"]
    assert (parallel["nodes"], parallel["focus"], parallel["skip"]) == (
        4, r"\[Conformance\]", r"\[Disruptive\]|\[Serial\]")
    assert serial["nodes"] == 1 and "skip" not in serial
    assert re.search(serial["focus"], f"Kubernetes e2e suite {names[1]}")
    assert not any(re.search(serial["focus"], f"Kubernetes e2e suite {n}") for n in (names[0], names[2]))
    focused = run.plan(selection.PASSES["cluster"], None, Path("e2e.test"), tmp_path, "F")  # type: ignore[arg-type]
    assert (focused["focus"], focused.get("parts")) == ("F", None)


def test_split_serial_keeps_the_serial_specs_apart_in_order() -> None:
    names = ["a [Serial] x", "b", "c [Serial]", "d [NodeConformance]"]
    assert selection.split_serial(names) == (["a [Serial] x", "c [Serial]"], ["b", "d [NodeConformance]"])


def test_a_run_of_one_agent_keeps_the_other_agents_published_half(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    import json

    from conformance import __main__ as cli

    monkeypatch.setattr(cli, "DOCS", tmp_path)
    meta = {"pass": "cluster", "date": "D2", "commit": "c2", "versions": {"kubelet": "v1.37.1"},
            "agents": {"kubelet": {"junit": "cluster-kubelet.xml", "date": "D2"}}}
    assert cli.with_published_agents("cluster", meta) == meta  # nothing published yet
    (tmp_path / "cluster.json").write_text(json.dumps({
        "date": "D1", "commit": "c1", "versions": {"kopflet": "k1", "kubelet": "old"},
        "agents": {"kopflet": {"junit": "cluster-kopflet.xml"}, "kubelet": {"junit": "cluster-kubelet.xml"}}}))
    merged = cli.with_published_agents("cluster", meta)
    assert list(merged["agents"]) == ["kopflet", "kubelet"]
    assert merged["agents"]["kopflet"] == {"junit": "cluster-kopflet.xml", "date": "D1", "published": True}
    assert merged["agents"]["kubelet"] == meta["agents"]["kubelet"]
    assert (merged["commit"], merged["versions"]) == ("c1", {"kubelet": "v1.37.1", "kopflet": "k1"})
    assert meta["agents"].keys() == {"kubelet"}  # not changed in place


def test_halves_of_different_cluster_shapes_are_not_merged(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import json

    from conformance import __main__ as cli

    monkeypatch.setattr(cli, "DOCS", tmp_path)
    (tmp_path / "cluster.json").write_text(json.dumps({"selection": {"cluster_nodes": 1}, "versions": {},
                                                       "agents": {"kubelet": {"junit": "cluster-kubelet.xml"}}}))
    meta = {"selection": {"cluster_nodes": 2}, "versions": {}, "agents": {"kopflet": {"junit": "cluster-kopflet.xml"}}}
    assert cli.with_published_agents("cluster", meta) == meta
    meta["selection"]["cluster_nodes"] = 1
    assert list(cli.with_published_agents("cluster", meta)["agents"]) == ["kopflet", "kubelet"]
