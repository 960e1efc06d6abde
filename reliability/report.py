"""From a pytest JUnit XML file and churn figures to the reliability report (markdown).

Pure: the XML text and dicts in, markdown out. Each test tells what was injected and what the user saw
through pytest's `record_property("injected", ...)` and `record_property("saw", ...)`; a test that records
nothing is listed by its name.
"""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from typing import Any


@dataclasses.dataclass(frozen=True, kw_only=True)
class Case:
    module: str
    name: str
    outcome: str  # passed, failed, error, skipped
    seconds: float
    injected: str = ""
    saw: str = ""
    detail: str = ""  # the failure message, first line


def parse_junit(xml_text: str) -> list[Case]:
    cases = []
    for tc in ET.fromstring(xml_text).iter("testcase"):
        props = {p.get("name", ""): p.get("value", "") for p in tc.iter("property")}
        outcome, detail = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = tc.find(tag)
            if el is not None:
                outcome = "failed" if tag == "failure" else tag
                detail = (el.get("message") or "").splitlines()[0][:200] if el.get("message") else ""
                break
        cases.append(Case(module=tc.get("classname", "").rsplit(".", 1)[-1], name=tc.get("name", ""),
                          outcome=outcome, seconds=float(tc.get("time", "0") or 0),
                          injected=props.get("injected", ""), saw=props.get("saw", ""), detail=detail))
    return cases


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(cases: Iterable[Case], churn: Mapping[str, Any] | None, header: Mapping[str, str]) -> str:
    cases = list(cases)
    passed = sum(c.outcome == "passed" for c in cases)
    lines = ["# kopflet reliability report", "",
             *(f"- {k}: {v}" for k, v in header.items()),
             f"- tests: {passed} passed of {len(cases)}"
             + (f"; not passing: {', '.join(c.name for c in cases if c.outcome != 'passed')}"
                if passed != len(cases) else ""),
             "", "Regenerate with `make reliability` (the stack, the fault tests and the churn; about 20 minutes).",
             ""]
    modules: dict[str, list[Case]] = {}
    for case in cases:
        modules.setdefault(case.module, []).append(case)
    for module, group in modules.items():
        lines += [f"## {module}", "", "| test | result | injected | what the user saw |", "|---|---|---|---|"]
        for c in group:
            result = c.outcome + (f": {_cell(c.detail)}" if c.detail else "")
            lines.append(f"| {_cell(c.name)} | {result} | {_cell(c.injected)} | {_cell(c.saw)} |")
        lines.append("")
    if churn:
        left = churn.get("leftovers", {})
        lines += ["## Churn", "",
                  f"{churn['cycles']} create/delete cycles ({churn['parallel']} at a time, mixed specs: plain, "
                  f"emptyDir, init container) in {churn['seconds']} s; {len(churn.get('failures', []))} failed.", "",
                  "| leftover | right after | after one GC period |", "|---|---|---|"]
        at_once = churn.get("leftovers_at_once", {})
        for key in left:
            lines.append(f"| {key.replace('_', ' ')} | {at_once.get(key, '-')} | {left[key]} |")
        lines += ["", f"Agent memory: {churn.get('idle_rss_mib', '-')} MiB idle before, "
                      f"{churn.get('peak_rss_mib', '-')} MiB peak during, {churn.get('rss_after_gc_mib', '-')} MiB "
                      f"after.", ""]
        if churn.get("failures"):
            lines += ["Failures:", "", *(f"- {_cell(f)}" for f in churn["failures"][:20]), ""]
    return "\n".join(lines)
