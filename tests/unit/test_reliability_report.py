"""The reliability report's rendering from pytest's JUnit XML and the churn figures."""

from __future__ import annotations

from reliability import report

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="3">
 <testcase classname="tests.e2e.test_cri_faults" name="test_run_pod_sandbox_fails_once" time="4.2">
  <properties><property name="injected" value="RunPodSandbox fails once"/>
   <property name="saw" value="FailedCreatePodSandBox | then Ready"/></properties>
 </testcase>
 <testcase classname="tests.e2e.test_kill_matrix" name="test_x[image pulled]" time="9.0">
  <failure message="AssertionError: restarted&#10;more lines">trace</failure>
 </testcase>
 <testcase classname="tests.unit.test_reconciler_properties" name="test_y" time="0.1">
  <skipped message="no stack"/>
 </testcase>
</testsuite></testsuites>"""


def test_parse_junit_reads_outcomes_and_properties():
    cases = report.parse_junit(JUNIT)
    assert [(c.module, c.outcome) for c in cases] == [
        ("test_cri_faults", "passed"), ("test_kill_matrix", "failed"), ("test_reconciler_properties", "skipped")]
    assert cases[0].injected == "RunPodSandbox fails once" and cases[0].saw.startswith("FailedCreatePodSandBox")
    assert cases[1].detail == "AssertionError: restarted"


def test_markdown_lists_each_case_and_the_churn_leftovers():
    churn = {"cycles": 1000, "parallel": 10, "seconds": 321.0, "failures": [],
             "leftovers": {"sandboxes": 0, "cni_ips": 0}, "leftovers_at_once": {"sandboxes": 2, "cni_ips": 0},
             "idle_rss_mib": 80.0, "peak_rss_mib": 95.5, "rss_after_gc_mib": 82.0}
    md = report.markdown(report.parse_junit(JUNIT), churn, {"commit": "abc"})
    assert "- tests: 1 passed of 3; not passing: test_x[image pulled], test_y" in md
    assert "| test_run_pod_sandbox_fails_once | passed | RunPodSandbox fails once | FailedCreatePodSandBox \\| " \
           "then Ready |" in md
    assert "| test_x[image pulled] | failed: AssertionError: restarted |" in md
    assert "| sandboxes | 2 | 0 |" in md
    assert "80.0 MiB idle before, 95.5 MiB peak during, 82.0 MiB after" in md
    assert "1000 create/delete cycles (10 at a time" in md
