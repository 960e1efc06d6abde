"""docs/conformance.md from ginkgo's JUnit reports: each spec under kopflet beside the upstream kubelet.

Pure: the caller reads the JUnit files, the run metadata and conformance/known-limits.yaml and writes what
this returns. The comparison is the point: a spec that fails under kopflet and passes under the kubelet is
kopflet's own; one that fails under both points at the stack first; one the kubelet fails must be explained
by this machine's kernel (known-limits.yaml) or fixed in the stack.
"""

from __future__ import annotations

import dataclasses
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml

KOPFLET, KUBELET = "kopflet", "kubelet"
AGENT_TITLES = {KOPFLET: "kopflet", KUBELET: "upstream kubelet"}
PASS, FAIL, SKIP, MISSING = "pass", "FAIL", "skip", "-"
README_START, README_END = "<!-- conformance:start -->", "<!-- conformance:end -->"
# ginkgo names a testcase "[<node type>] <full text> [<labels>]"; only [It] nodes are specs.
SPEC_PREFIX = "[It] "
# What ginkgo writes for a spec its --focus/--skip filtered out (a spec that skips itself says why).
FILTERED_OUT = "skipped"


@dataclasses.dataclass(frozen=True)
class Case:
    """One selected spec's outcome under one agent."""

    name: str  # the spec's full text and labels, as the JUnit names it, without "[It] "
    result: str  # PASS, FAIL or SKIP
    seconds: float
    message: str = ""  # the whole failure message, or the reason it skipped itself


@dataclasses.dataclass(frozen=True)
class Suite:
    """One ginkgo run: its selected specs and what failed outside any spec (a BeforeSuite, an interrupt)."""

    cases: dict[str, Case]
    problems: tuple[str, ...] = ()

    def count(self, result: str) -> int:
        return sum(1 for c in self.cases.values() if c.result == result)


def parse_junit(text: str) -> Suite:
    """The selected specs of a ginkgo JUnit report; specs the focus/skip filtered out are left out."""
    root = ET.fromstring(text)
    cases: dict[str, Case] = {}
    problems: list[str] = []
    for tc in root.iter("testcase"):
        name = tc.get("name", "").strip()
        seconds = float(tc.get("time") or 0)
        failure = tc.find("failure")
        if failure is None:
            failure = tc.find("error")
        skipped = tc.find("skipped")
        if not name.startswith(SPEC_PREFIX):
            if failure is not None:
                problems.append(f"{name}: {_failure_message(failure)}")
            continue
        name = name[len(SPEC_PREFIX):]
        if failure is not None:
            cases[name] = Case(name, FAIL, seconds, _failure_message(failure))
        elif skipped is not None:
            message = skipped.get("message", "")
            if message in (FILTERED_OUT, "pending"):
                continue
            cases[name] = Case(name, SKIP, seconds, message.removeprefix(FILTERED_OUT + " - "))
        else:
            cases[name] = Case(name, PASS, seconds)
    return Suite(cases, tuple(problems))


# Go's XML encoder writes the escape character, which XML cannot carry, as U+FFFD.
_ANSI = re.compile(r"[\x1b\ufffd]\[[0-9;]*m")


def _failure_message(element: ET.Element) -> str:
    """ginkgo puts the message in the attribute; the e2e framework's shorter JUnit only in the body. Parallel
    processes' messages can carry colour codes even with --no-color."""
    message = _ANSI.sub("", element.get("message") or (element.text or "").strip())
    kind = element.get("type", "")
    if kind and kind not in ("failed", "timedout") and not message.startswith(kind):
        message = f"{kind}: {message}" if message else kind
    return message


def merge_junit(texts: Sequence[str]) -> str:
    """One JUnit report from several ginkgo runs of disjoint selections of the same suite: the first report whole,
    with the specs the others ran (not those they filtered out) added to its first test suite."""
    root = ET.fromstring(texts[0])
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        raise ValueError("the first JUnit report has no testsuite")
    ran: dict[str, ET.Element] = {}
    for text in texts[1:]:
        for tc in ET.fromstring(text).iter("testcase"):
            skipped = tc.find("skipped")
            if skipped is None or skipped.get("message") not in (FILTERED_OUT, "pending"):
                ran.setdefault(tc.get("name", ""), tc)
    for parent in list(root.iter()):
        for tc in [c for c in parent if c.tag == "testcase"]:
            if tc.get("name", "") in ran and tc.find("skipped") is not None:
                parent.remove(tc)  # filtered out here, run in another part
    for tc in ran.values():
        suite.append(tc)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def trim_junit(text: str) -> str:
    """The JUnit file kept in docs/: the selected specs only, with the captured output of failures alone.

    ginkgo's report lists every spec of the suite (thousands, mostly filtered out) and every passed spec's
    timeline; the whole file stays in the run directory beside ginkgo's log.
    """
    root = ET.fromstring(text)
    for parent in list(root.iter()):
        for tc in [c for c in parent if c.tag == "testcase"]:
            skipped = tc.find("skipped")
            if skipped is not None and skipped.get("message") in (FILTERED_OUT, "pending"):
                parent.remove(tc)
            elif tc.find("failure") is None and tc.find("error") is None:
                for out in [c for c in tc if c.tag in ("system-out", "system-err")]:
                    tc.remove(out)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


# ------------------------------------------------------------------------------------------ messages

def one_line(message: str, limit: int = 200) -> str:
    """A failure message as one table cell: its first lines (a gomega failure's first line alone is often
    just "Expected"), whitespace collapsed, cut at `limit`."""
    lines = [" ".join(line.split()) for line in message.splitlines()]
    text = " ".join([line for line in lines if line][:3])
    if len(text) > limit:
        text = text[:limit - 1].rstrip() + "…"
    return cell(text)


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# Lines of a failure's pod dump and gomega output that say most about why it failed.
_SALIENT = re.compile(
    r"^(restartCount|exitCode|reason|message|signal|restartPolicy|restartPolicyRules|exitCodes|hostIPs?|"
    r"podIPs?|phase|uid)\b:|^<[^>]+>:|^(Expected|to (match|equal|contain|be|have)|not to)\b|"
    r"(error|failed|Error|Failed|denied|not supported|not found|No such file)")


def salient_lines(message: str, limit: int = 25) -> list[str]:
    """The failure's first line and the lines that name state or output, in order, without repeats."""
    lines = [line.strip().removeprefix("- ") for line in message.splitlines() if line.strip()]
    if not lines:
        return []
    picked = [lines[0]]
    for line in lines[1:]:
        if _SALIENT.search(line) and line != picked[-1]:
            picked.append(line[:300])
        if len(picked) >= limit:
            break
    return picked


# ------------------------------------------------------------------------------------------ known limits

@dataclasses.dataclass(frozen=True)
class KnownLimit:
    """A spec the kubelet cannot pass on this machine's kernel, and the evidence (the exact error)."""

    spec: re.Pattern[str]
    evidence: str


def parse_known_limits(text: str) -> list[KnownLimit]:
    """conformance/known-limits.yaml: a list of {spec: <regex on the spec name>, evidence: <text>}."""
    data = yaml.safe_load(text) or []
    if not isinstance(data, list):
        raise ValueError("known-limits: expected a list of {spec, evidence}")
    limits = []
    for i, item in enumerate(data):
        if not isinstance(item, dict) or not item.get("spec") or not str(item.get("evidence", "")).strip():
            raise ValueError(f"known-limits entry {i}: needs a non-empty 'spec' regex and 'evidence'")
        limits.append(KnownLimit(re.compile(str(item["spec"])), str(item["evidence"]).strip()))
    return limits


def explain(name: str, limits: Iterable[KnownLimit]) -> str | None:
    for limit in limits:
        if limit.spec.search(name):
            return limit.evidence
    return None


# ------------------------------------------------------------------------------------------ comparison

@dataclasses.dataclass(frozen=True)
class Comparison:
    """Every spec of a pass under both agents, sorted, split into the tables the report shows."""

    names: list[str]
    kopflet: Mapping[str, Case]
    kubelet: Mapping[str, Case]
    kopflet_gap: list[str]  # fail (or skip) under kopflet, pass under the kubelet: kopflet's own
    both: list[str]  # fail under both: the stack first
    kubelet_only: list[str]  # fail under the kubelet, not under kopflet
    uneven: list[str]  # ran under one agent only, or kopflet failed where the kubelet skipped

    def result(self, agent: str, name: str) -> str:
        case = (self.kopflet if agent == KOPFLET else self.kubelet).get(name)
        return case.result if case else MISSING


def compare(kopflet: Suite, kubelet: Suite) -> Comparison:
    names = sorted(set(kopflet.cases) | set(kubelet.cases))
    gap, both, kubelet_only, uneven = [], [], [], []
    for name in names:
        k, u = kopflet.cases.get(name), kubelet.cases.get(name)
        if k is None or u is None:
            uneven.append(name)
        elif u.result == PASS and k.result != PASS:
            gap.append(name)
        elif u.result == FAIL and k.result == FAIL:
            both.append(name)
        elif u.result == FAIL:
            kubelet_only.append(name)
        elif k.result == FAIL:  # the kubelet skipped it
            uneven.append(name)
    return Comparison(names, kopflet.cases, kubelet.cases, gap, both, kubelet_only, uneven)


# ------------------------------------------------------------------------------------------ markdown

@dataclasses.dataclass(frozen=True)
class PassResult:
    """One pass (node, serial) as run: its metadata (docs/conformance/<pass>.json) and each agent's suite."""

    name: str
    meta: Mapping[str, Any]
    suites: Mapping[str, Suite]

    @property
    def title(self) -> str:
        return str(self.meta.get("title") or f"{self.name} pass")

    def comparison(self) -> Comparison:
        empty = Suite({})
        return compare(self.suites.get(KOPFLET, empty), self.suites.get(KUBELET, empty))


def _detail(case: Case | None) -> str:
    if case is None:
        return "not run"
    if case.result == SKIP:
        return f"skipped: {one_line(case.message)}"
    return one_line(case.message) if case.result == FAIL else case.result


def _totals_line(agent: str, suite: Suite | None) -> str:
    if suite is None:
        return f"- {AGENT_TITLES[agent]}: not run"
    line = (f"- {AGENT_TITLES[agent]}: {len(suite.cases)} specs ran, {suite.count(PASS)} passed, "
            f"{suite.count(FAIL)} failed")
    if suite.count(SKIP):
        line += f", {suite.count(SKIP)} skipped themselves"
    return line


def _selection_text(meta: Mapping[str, Any]) -> str:
    sel = meta.get("selection", {})
    parts = [f"ginkgo {sel.get('nodes', '?')} process{'es' if sel.get('nodes') != 1 else ''}"]
    if sel.get("parts"):
        parts = ["; then ".join(f"{p.get('name')} specs in ginkgo {p.get('nodes')} "
                                f"process{'es' if p.get('nodes') != 1 else ''}" for p in sel["parts"])]
    if sel.get("rule"):
        parts.append(str(sel["rule"]))
    if sel.get("focus_file"):
        parts.append(f"focus: the exact names in `{sel['focus_file']}`")
    elif sel.get("focus"):
        parts.append(f"focus `{sel['focus']}`")
    if sel.get("skip"):
        parts.append(f"skip `{sel['skip']}`")
    if sel.get("count") is not None:
        parts.append(f"{sel['count']} specs selected (dry run)")
    return "; ".join(parts)


def pass_markdown(result: PassResult, limits: Sequence[KnownLimit], level: int = 2) -> list[str]:
    """One pass's sections: totals, the three failure tables, the kernel limits, every spec, details."""
    h = "#" * level
    meta, cmp = result.meta, result.comparison()
    out = [f"{h} {result.title}", ""]
    agents_meta = meta.get("agents", {})
    if meta.get("setup"):
        out += [str(meta["setup"]), ""]
    out.append(f"Run {meta.get('date', '?')} at commit {meta.get('commit', '?')}: {_selection_text(meta)}. "
               f"Arguments to e2e.test: `{' '.join(meta.get('e2e_args', []))}`.")
    out.append("")
    dates = {str(am.get("date")) for am in agents_meta.values() if am.get("date")}
    for agent in (KOPFLET, KUBELET):
        am = agents_meta.get(agent, {})
        line = _totals_line(agent, result.suites.get(agent))
        out.append(line + (f" (run {am['date']})" if len(dates) > 1 and am.get("date") else ""))
        if am.get("error"):
            out.append(f"  - the run did not complete: {cell(str(am['error']))}")
        for problem in result.suites[agent].problems if agent in result.suites else ():
            out.append(f"  - outside any spec: {one_line(problem)}")
    out.append(f"- **fail under kopflet, pass under the kubelet: {len(cmp.kopflet_gap)}**; fail under both: "
               f"{len(cmp.both)}; fail under the kubelet only: {len(cmp.kubelet_only)}"
               + (f"; not comparable (ran under one agent only, or skipped by the kubelet): {len(cmp.uneven)}"
                  if cmp.uneven else ""))
    out.append("")

    out += [f"{h}# Fail under kopflet, pass under the upstream kubelet", "| spec | kopflet's failure |", "|---|---|"]
    out += [f"| {cell(n)} | {_detail(cmp.kopflet.get(n))} |" for n in cmp.kopflet_gap] or ["| (none) | |"]
    out += ["", f"{h}# Fail under both", "| spec | kopflet | kubelet |", "|---|---|---|"]
    out += [f"| {cell(n)} | {_detail(cmp.kopflet.get(n))} | {_detail(cmp.kubelet.get(n))} |"
            for n in cmp.both] or ["| (none) | | |"]
    out += ["", f"{h}# Fail under the upstream kubelet only", "| spec | kopflet | kubelet's failure |", "|---|---|---|"]
    out += [f"| {cell(n)} | {cmp.result(KOPFLET, n)} | {_detail(cmp.kubelet.get(n))} |"
            for n in cmp.kubelet_only] or ["| (none) | | |"]
    if cmp.uneven:
        out += ["", f"{h}# Not comparable", "| spec | kopflet | kubelet |", "|---|---|---|"]
        out += [f"| {cell(n)} | {_detail(cmp.kopflet.get(n))} | {_detail(cmp.kubelet.get(n))} |"
                for n in cmp.uneven]

    kubelet_failures = [n for n in cmp.names if cmp.result(KUBELET, n) == FAIL]
    explained = [(n, e) for n in kubelet_failures if (e := explain(n, limits))]
    unexplained = [n for n in kubelet_failures if not explain(n, limits)]
    out += ["", f"{h}# Upstream kubelet failures explained by this machine's kernel",
            "From `conformance/known-limits.yaml` (spec regex → the evidence, kept by hand so it survives "
            "regeneration). Every other kubelet failure is the stack's to fix.", ""]
    out += [f"- {cell(n)}: {e}" for n, e in explained] or ["- (none)"]
    out += ["", f"Upstream kubelet failures not explained by a kernel limit: **{len(unexplained)}**", ""]

    out += [f"{h}# Every spec", "| spec | kopflet | kubelet | kopflet s | kubelet s |", "|---|---|---|---|---|"]
    for n in cmp.names:
        k, u = cmp.kopflet.get(n), cmp.kubelet.get(n)
        out.append(f"| {cell(n)} | {k.result if k else MISSING} | {u.result if u else MISSING} "
                   f"| {f'{k.seconds:.0f}' if k else MISSING} | {f'{u.seconds:.0f}' if u else MISSING} |")

    detailed = [n for n in cmp.kopflet_gap if cmp.result(KOPFLET, n) == FAIL]
    if detailed:
        out += ["", f"{h}# Kopflet's own failures in more detail",
                "The lines of each failure that say most (the pod's terminated state, the container output the "
                "spec expected, events); the whole report is the JUnit file under `docs/conformance/`.", ""]
        for n in detailed:
            out += [f"{h}## {n}", "```", *salient_lines(cmp.kopflet[n].message), "```", ""]
    return [*out, ""] if out[-1] != "" else out


def markdown(passes: Sequence[PassResult], limits: Sequence[KnownLimit]) -> str:
    """The whole of docs/conformance.md."""
    out = ["# Upstream conformance specs: kopflet and the upstream kubelet", "",
           "Written by `make conformance` and `make conformance-cluster` (`python -m conformance`; `python -m "
           "conformance report` rewrites it from `docs/conformance/`). Each pass runs upstream's e2e binary, built "
           "from `k8s.io/kubernetes` at the pinned release with its own `e2e_test.go`, with `--provider=skeleton` "
           "and the admin kubeconfig, with kopflet as the node's agent and, on the same machine, with the upstream "
           "kubelet of the same release. The node and serial passes run on the project's stack (the kubelet on "
           "the stack's kubelet config, the one `make bench` builds); the Conformance pass runs every "
           "`[Conformance]` spec on a kubeadm cluster made for each agent. "
           "A spec that fails under both points at the stack (an image, a missing component) before the agent; "
           "the spec's source (`test/e2e/common/node`, `test/e2e/common/storage`, `test/e2e/node` at the pinned "
           "release) is the specification.", ""]
    if not passes:
        return "\n".join([*out, "No pass has run yet.", ""])
    first = passes[0].meta
    versions = first.get("versions", {})
    if versions:
        out.append("Versions: " + "; ".join(f"{k} {v}" for k, v in versions.items()) + ".")
        out.append("")
    out += ["| pass | specs | kopflet passed | kubelet passed | fail under kopflet, pass under the kubelet "
            "| fail under both | fail under the kubelet only |", "|---|---|---|---|---|---|---|"]
    out += [_summary_row(p) for p in passes]
    out.append("")
    for p in passes:
        out += pass_markdown(p, limits)
    return "\n".join(out).rstrip("\n") + "\n"


def _summary_row(p: PassResult) -> str:
    cmp = p.comparison()

    def passed(agent: str) -> str:
        suite = p.suites.get(agent)
        return f"{suite.count(PASS)} / {len(suite.cases)}" if suite else "not run"

    return (f"| {p.title} | {len(cmp.names)} | {passed(KOPFLET)} | {passed(KUBELET)} | {len(cmp.kopflet_gap)} "
            f"| {len(cmp.both)} | {len(cmp.kubelet_only)} |")


def readme_block(passes: Sequence[PassResult]) -> str:
    """The totals the README shows between its conformance markers."""
    dates = sorted(str(p.meta.get("date", "?")) for p in passes)
    commits = sorted({str(p.meta.get("commit", "?")) for p in passes})
    lines = [README_START, ""]
    if passes:
        lines += [f"Latest run: {dates[-1]} at commit {', '.join(commits)}; every spec with both results in "
                  "[docs/conformance.md](docs/conformance.md).", "",
                  "| pass | specs | kopflet passed | kubelet passed | fail under kopflet, pass under the kubelet "
                  "| fail under both | fail under the kubelet only |", "|---|---|---|---|---|---|---|"]
        lines += [_summary_row(p) for p in passes]
    else:
        lines.append("Not run yet.")
    return "\n".join([*lines, "", README_END])


def replace_readme_block(readme: str, block: str) -> str:
    """The README with its conformance block replaced (unchanged when it has no markers)."""
    pattern = re.compile(re.escape(README_START) + ".*?" + re.escape(README_END), re.S)
    return pattern.sub(lambda _: block, readme)
