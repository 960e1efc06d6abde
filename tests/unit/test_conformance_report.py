"""The conformance report: ginkgo's JUnit read as upstream writes it, each spec classified under kopflet beside
the upstream kubelet, the kernel-limit explanations joined in, and the README block."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from conformance import report
from conformance.report import FAIL, MISSING, PASS, SKIP, Case, Suite

HEAD = '<?xml version="1.0" encoding="UTF-8"?>\n<testsuites tests="9"><testsuite name="Kubernetes e2e suite">'
TAIL = "</testsuite></testsuites>"


def case(name: str, body: str = "", time: float = 1.0, kind: str = "It") -> str:
    full = f"[{kind}] {name}".strip()
    return f'<testcase name="{full}" classname="Kubernetes e2e suite" status="x" time="{time}">{body}</testcase>'


def failure(message: str, kind: str = "failed") -> str:
    escaped = message.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace("\n", "&#xA;")
    return f'<failure message="{escaped}" type="{kind}">[FAILED] {message.splitlines()[0]}\nat e2e.go:1</failure>' \
           "<system-err>timeline of the failure</system-err>"


def junit(*cases: str) -> str:
    return HEAD + "".join(cases) + TAIL


MULTILINE = ('expected "[1-9]" in container output: Expected\n'
             '    <string>: content of file "/etc/podinfo/cpu_limit": 0\n'
             "to match regular expression\n    <string>: [1-9]")

KOPFLET_XML = junit(
    case("[sig-node] A passes [NodeConformance] [sig-node, NodeConformance]", "<system-out>log</system-out>", 2.4),
    case("[sig-node] B multi-line [NodeConformance] [sig-node, NodeConformance]", failure(MULTILINE), 3.0),
    case("[sig-node] C fails under both [NodeConformance] [sig-node, NodeConformance]",
         failure("Timed out after 300.001s.\nmore"), 302.0),
    case("[sig-node] D kubelet only [NodeConformance] [sig-node, NodeConformance]", "", 4.0),
    case("[sig-node] E skips itself [NodeConformance]", '<skipped message="skipped - Only supported for node OS '
         'distro [gci ubuntu] (not debian)"/>', 0.0),
    case("[sig-node] F filtered out [Serial]", '<skipped message="skipped"/>', 0.0),
    case("[sig-node] G pending", '<skipped message="pending"/>', 0.0),
    case("[sig-node] H kopflet only ran it [NodeConformance]", failure("boom | with a pipe"), 1.0),
    case("[sig-node] I interrupted [NodeConformance]", '<error message="Interrupted by Timeout" type="interrupted">'
         "stack</error>", 9.0),
    case("", failure("setup went wrong"), 0.5, kind="SynchronizedBeforeSuite"),
    case("", "", 0.1, kind="SynchronizedAfterSuite"),
)

KUBELET_XML = junit(
    case("[sig-node] A passes [NodeConformance] [sig-node, NodeConformance]", "", 3.6),
    case("[sig-node] B multi-line [NodeConformance] [sig-node, NodeConformance]", "", 4.0),
    case("[sig-node] C fails under both [NodeConformance] [sig-node, NodeConformance]",
         failure("Timed out after 300.000s."), 301.0),
    case("[sig-node] D kubelet only [NodeConformance] [sig-node, NodeConformance]",
         failure('cmd [ip link add dummy1 type dummy], stderr "ip: RTNETLINK answers: Operation not supported"'), 5.0),
    case("[sig-node] E skips itself [NodeConformance]", "", 1.0),
    case("[sig-node] I interrupted [NodeConformance]", "", 2.0),
    case("[sig-node] J kubelet only ran it [NodeConformance]", "", 2.0),
)


@pytest.fixture
def kopflet() -> Suite:
    return report.parse_junit(KOPFLET_XML)


@pytest.fixture
def kubelet() -> Suite:
    return report.parse_junit(KUBELET_XML)


@pytest.mark.parametrize(("short", "result", "seconds", "message"), [
    ("A passes", PASS, 2.4, ""),
    ("B multi-line", FAIL, 3.0, MULTILINE),
    ("C fails under both", FAIL, 302.0, "Timed out after 300.001s.\nmore"),
    ("D kubelet only", PASS, 4.0, ""),
    ("E skips itself", SKIP, 0.0, "Only supported for node OS distro [gci ubuntu] (not debian)"),
    ("H kopflet only ran it", FAIL, 1.0, "boom | with a pipe"),
    ("I interrupted", FAIL, 9.0, "interrupted: Interrupted by Timeout"),
])
def test_parse_junit_reads_each_selected_spec(kopflet: Suite, short: str, result: str, seconds: float,
                                              message: str) -> None:
    (name,) = [n for n in kopflet.cases if f"] {short} [" in n]
    c = kopflet.cases[name]
    assert (c.result, c.seconds, c.message) == (result, seconds, message)
    assert not name.startswith("[It]"), "the node type prefix is not part of the spec's name"


def test_parse_junit_leaves_out_filtered_and_pending_specs_and_setup_nodes(kopflet: Suite) -> None:
    assert len(kopflet.cases) == 7
    assert not [n for n in kopflet.cases if "filtered out" in n or "pending" in n or "Suite" in n]
    assert (kopflet.count(PASS), kopflet.count(FAIL), kopflet.count(SKIP)) == (2, 4, 1)


def test_parse_junit_reports_a_failure_outside_any_spec(kopflet: Suite, kubelet: Suite) -> None:
    assert kopflet.problems == ("[SynchronizedBeforeSuite]: setup went wrong",)
    assert kubelet.problems == ()


def test_parse_junit_drops_colour_codes_from_messages() -> None:
    text = junit(case("", '<failure message="\ufffd[1m\ufffd[38;5;9mSynchronizedBeforeSuite failed\ufffd[0m" '
                          'type="failed">x</failure>', kind="SynchronizedBeforeSuite"))
    assert report.parse_junit(text).problems == ("[SynchronizedBeforeSuite]: SynchronizedBeforeSuite failed",)


def test_parse_junit_reads_the_frameworks_short_junit_whose_failures_have_no_message_attribute() -> None:
    text = junit(case("[sig-node] X [NodeConformance]", '<failure type="failed">[FAILED] it broke\nat x.go:3'
                                                        "</failure>"))
    assert report.parse_junit(text).cases["[sig-node] X [NodeConformance]"].message == "[FAILED] it broke\nat x.go:3"


@pytest.mark.parametrize(("short", "kopflet_result", "kubelet_result", "table"), [
    ("A passes", PASS, PASS, None),
    ("B multi-line", FAIL, PASS, "kopflet_gap"),
    ("C fails under both", FAIL, FAIL, "both"),
    ("D kubelet only", PASS, FAIL, "kubelet_only"),
    ("E skips itself", SKIP, PASS, "kopflet_gap"),
    ("H kopflet only ran it", FAIL, MISSING, "uneven"),
    ("I interrupted", FAIL, PASS, "kopflet_gap"),
    ("J kubelet only ran it", MISSING, PASS, "uneven"),
])
def test_compare_puts_each_spec_in_one_table(kopflet: Suite, kubelet: Suite, short: str, kopflet_result: str,
                                             kubelet_result: str, table: str | None) -> None:
    cmp = report.compare(kopflet, kubelet)
    (name,) = [n for n in cmp.names if f"] {short} [" in n]
    assert (cmp.result(report.KOPFLET, name), cmp.result(report.KUBELET, name)) == (kopflet_result, kubelet_result)
    tables = {t for t in ("kopflet_gap", "both", "kubelet_only", "uneven") if name in getattr(cmp, t)}
    assert tables == ({table} if table else set())


def test_compare_a_kubelet_skip_against_a_kopflet_failure_is_not_comparable() -> None:
    k = Suite({"s": Case("s", FAIL, 1, "x")})
    u = Suite({"s": Case("s", SKIP, 0, "why")})
    cmp = report.compare(k, u)
    assert (cmp.kopflet_gap, cmp.both, cmp.kubelet_only, cmp.uneven) == ([], [], [], ["s"])


@pytest.mark.parametrize(("message", "expected"), [
    ("Timed out after 300.001s.", "Timed out after 300.001s."),
    (MULTILINE, 'expected "[1-9]" in container output: Expected <string>: content of file '
                '"/etc/podinfo/cpu_limit": 0 to match regular expression'),
    ("a | b\n\n\nc", "a \\| b c"),
    ("x" * 300, "x" * 199 + "…"),
    ("", ""),
])
def test_one_line(message: str, expected: str) -> None:
    assert report.one_line(message) == expected


def test_salient_lines_keep_the_first_line_and_the_pod_state() -> None:
    message = ('expected pod "p" success: Told to stop trying after 2.006s.\nExpected\n    <*v1.Pod>: \n'
               "      metadata:\n        name: p\n      status:\n        containerStatuses:\n"
               "        - restartCount: 0\n          state:\n            terminated:\n              exitCode: 2\n"
               "              reason: Error\n        hostIP: 192.0.2.2\n        podIP: 192.0.2.2\n")
    assert report.salient_lines(message) == [
        'expected pod "p" success: Told to stop trying after 2.006s.', "Expected", "<*v1.Pod>:",
        "restartCount: 0", "exitCode: 2", "reason: Error", "hostIP: 192.0.2.2", "podIP: 192.0.2.2"]


KNOWN = """
- spec: 'D kubelet only'
  evidence: >-
    `ip link add dummy1 type dummy`: "Operation not supported";
    /proc/config.gz says # CONFIG_DUMMY is not set
"""


def test_known_limits_are_parsed_and_matched_by_regex() -> None:
    limits = report.parse_known_limits(KNOWN)
    assert report.explain("[sig-node] D kubelet only [NodeConformance]", limits) == (
        '`ip link add dummy1 type dummy`: "Operation not supported"; /proc/config.gz says # CONFIG_DUMMY is not set')
    assert report.explain("[sig-node] C fails under both", limits) is None


@pytest.mark.parametrize("text", ["spec: x", "- spec: x", "- evidence: y", "- spec: x\n  evidence: ' '"])
def test_known_limits_refuse_an_entry_without_spec_or_evidence(text: str) -> None:
    with pytest.raises(ValueError):
        report.parse_known_limits(text)


def test_the_repositorys_known_limits_file_parses() -> None:
    from pathlib import Path
    path = Path(report.__file__).with_name("known-limits.yaml")
    assert report.parse_known_limits(path.read_text())


def _pass(kopflet: Suite, kubelet: Suite) -> report.PassResult:
    meta = {"title": "Node pass", "date": "2026-11-25 10:00 UTC", "commit": "abc1234",
            "versions": {"kubernetes": "v1.37.1", "ginkgo": "v2.32.0"},
            "selection": {"nodes": 4, "focus": r"\[NodeConformance\]", "skip": r"\[Slow\]|\[Serial\]", "count": 8},
            "e2e_args": ["--provider=skeleton"], "agents": {"kubelet": {"error": "ginkgo exited 1"}}}
    return report.PassResult("node", meta, {report.KOPFLET: kopflet, report.KUBELET: kubelet})


def _section(md: str, title: str) -> str:
    match = re.search(rf"^#+ {re.escape(title)}\n(.*?)(?=^#+ |\Z)", md, re.S | re.M)
    assert match, f"no section {title!r}"
    return match.group(1)


def test_markdown_tables(kopflet: Suite, kubelet: Suite) -> None:
    md = report.markdown([_pass(kopflet, kubelet)], report.parse_known_limits(KNOWN))
    gap = _section(md, "Fail under kopflet, pass under the upstream kubelet")
    assert "| [sig-node] B multi-line [NodeConformance] [sig-node, NodeConformance] | expected \"[1-9]\" in " \
           "container output: Expected <string>: content of file" in gap
    assert "| [sig-node] E skips itself [NodeConformance] | skipped: Only supported for node OS distro" in gap
    assert "interrupted: Interrupted by Timeout" in gap
    both = _section(md, "Fail under both")
    assert "| [sig-node] C fails under both [NodeConformance] [sig-node, NodeConformance] " \
           "| Timed out after 300.001s. more | Timed out after 300.000s. |" in both
    only = _section(md, "Fail under the upstream kubelet only")
    assert "| [sig-node] D kubelet only [NodeConformance] [sig-node, NodeConformance] | pass " \
           "| cmd [ip link add dummy1 type dummy]" in only
    uneven = _section(md, "Not comparable")
    assert "| [sig-node] H kopflet only ran it [NodeConformance] | boom \\| with a pipe | not run |" in uneven
    assert "| [sig-node] J kubelet only ran it [NodeConformance] | not run | pass |" in uneven
    every = _section(md, "Every spec")
    assert "| [sig-node] A passes [NodeConformance] [sig-node, NodeConformance] | pass | pass | 2 | 4 |" in every
    assert "| [sig-node] J kubelet only ran it [NodeConformance] | - | pass | - | 2 |" in every
    assert len([line for line in every.splitlines() if line.startswith("| [sig-node]")]) == 8


def test_markdown_totals_selection_and_explanations(kopflet: Suite, kubelet: Suite) -> None:
    md = report.markdown([_pass(kopflet, kubelet)], report.parse_known_limits(KNOWN))
    assert "- kopflet: 7 specs ran, 2 passed, 4 failed, 1 skipped themselves" in md
    assert "- upstream kubelet: 7 specs ran, 5 passed, 2 failed" in md
    assert "  - outside any spec: [SynchronizedBeforeSuite]: setup went wrong" in md
    assert "  - the run did not complete: ginkgo exited 1" in md
    assert "- **fail under kopflet, pass under the kubelet: 3**; fail under both: 1; fail under the kubelet only: 1; " \
           "not comparable (ran under one agent only, or skipped by the kubelet): 2" in md
    assert "focus `\\[NodeConformance\\]`; skip `\\[Slow\\]|\\[Serial\\]`; 8 specs selected (dry run)" in md
    assert "Run 2026-11-25 10:00 UTC at commit abc1234: ginkgo 4 processes" in md
    assert "| Node pass | 8 | 2 / 7 | 5 / 7 | 3 | 1 | 1 |" in md
    kernel = _section(md, "Upstream kubelet failures explained by this machine's kernel")
    assert "- [sig-node] D kubelet only [NodeConformance] [sig-node, NodeConformance]: `ip link add dummy1" in kernel
    assert "Upstream kubelet failures not explained by a kernel limit: **1**" in kernel
    detail = _section(md, "[sig-node] B multi-line [NodeConformance] [sig-node, NodeConformance]")
    assert detail.splitlines()[:3] == ["```", 'expected "[1-9]" in container output: Expected',
                                       '<string>: content of file "/etc/podinfo/cpu_limit": 0']


def test_markdown_with_one_agent_missing(kopflet: Suite) -> None:
    md = report.markdown([report.PassResult("serial", {"title": "Serial pass"}, {report.KOPFLET: kopflet})], [])
    assert "- upstream kubelet: not run" in md
    assert "| Serial pass | 7 | 2 / 7 | not run |" in md


def test_trim_junit_keeps_the_selected_specs_and_the_output_of_failures_only() -> None:
    trimmed = report.trim_junit(KOPFLET_XML)
    assert report.parse_junit(trimmed) == report.parse_junit(KOPFLET_XML)
    root = ET.fromstring(trimmed)
    names = [tc.get("name") for tc in root.iter("testcase")]
    assert len(names) == 9 and not [n for n in names if "filtered out" in n or "pending" in n]
    passed = next(tc for tc in root.iter("testcase") if "A passes" in tc.get("name", ""))
    assert passed.find("system-out") is None
    failed = next(tc for tc in root.iter("testcase") if "B multi-line" in tc.get("name", ""))
    assert failed.find("system-err") is not None


def test_readme_block_and_its_replacement(kopflet: Suite, kubelet: Suite) -> None:
    block = report.readme_block([_pass(kopflet, kubelet)])
    assert block.startswith(report.README_START) and block.endswith(report.README_END)
    assert "Latest run: 2026-11-25 10:00 UTC at commit abc1234" in block
    assert "| Node pass | 8 | 2 / 7 | 5 / 7 | 3 | 1 | 1 |" in block
    readme = f"# x\n\n{report.README_START}\nold\n{report.README_END}\n\nrest\n"
    assert report.replace_readme_block(readme, block) == f"# x\n\n{block}\n\nrest\n"
    assert report.replace_readme_block("no markers", block) == "no markers"
    assert "Not run yet." in report.readme_block([])


def test_merge_junit_adds_what_the_other_parts_ran_in_place_of_their_filtered_entries() -> None:
    skipped = '<skipped message="skipped"></skipped>'
    parallel = junit(case("[sig-node] A [NodeConformance]"), case("[sig-node] S [Serial]", skipped))
    serial = junit(case("[sig-node] A [NodeConformance]", skipped),
                   case("[sig-node] S [Serial]", failure("it broke")))
    merged = report.parse_junit(report.merge_junit([parallel, serial]))
    assert {name: c.result for name, c in merged.cases.items()} == {
        "[sig-node] A [NodeConformance]": PASS, "[sig-node] S [Serial]": FAIL}
    assert merged.cases["[sig-node] S [Serial]"].message == "it broke"
