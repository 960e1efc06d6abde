"""The benchmark's pure parts: percentiles, the audit-log API cost, the summary and its rendering."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from bench import audit, cluster, report, run, stats, workload
from bench.__main__ import README_END, README_START, readme_block


@pytest.mark.parametrize(("samples", "p", "expected"), [
    ([1.0], 50, 1.0),
    ([3.0, 1.0, 2.0], 50, 2.0),
    ([1.0, 2.0, 3.0, 4.0], 50, 2.0),  # nearest rank: ceil(0.5*4) = 2nd
    ([1.0, 2.0, 3.0, 4.0], 90, 4.0),
    (list(map(float, range(1, 101))), 99, 99.0),
    (list(map(float, range(1, 101))), 100, 100.0),
    (list(map(float, range(1, 11))), 90, 9.0),
])
def test_percentile_is_nearest_rank(samples, p, expected):
    assert stats.percentile(samples, p) == expected


@pytest.mark.parametrize("p", [0, -1, 101])
def test_percentile_refuses_out_of_range(p):
    with pytest.raises(ValueError):
        stats.percentile([1.0], p)


def test_summary_and_ratios():
    s = stats.summary([0.1, 0.2, 0.3, 0.4])
    assert s == {"n": 4, "p50": 0.2, "p90": 0.4, "p99": 0.4, "max": 0.4, "mean": 0.25}
    assert stats.summary([]) == {"n": 0}
    assert stats.ratios({"p50": 1.0, "p90": 3.0, "p99": 4.0, "max": 5.0},
                        {"p50": 0.5, "p90": 1.0, "p99": 0.0, "max": 5.0}) == {"p50": 2.0, "p90": 3.0, "max": 1.0}


def _event(audit_id, user="system:node:vm", verb="get", resource="pods", sub="", stage="ResponseComplete",
           at="2026-11-22T05:00:10.500000Z", agent="kopf/1.45"):
    ref = {"resource": resource, "namespace": "ns", "name": "x"}
    if sub:
        ref["subresource"] = sub
    return json.dumps({"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata", "auditID": audit_id,
                       "stage": stage, "verb": verb, "user": {"username": user}, "userAgent": agent,
                       "objectRef": ref, "responseStatus": {"code": 200}, "requestReceivedTimestamp": at})


def test_audit_counts_each_request_once_by_user_verb_resource_and_window():
    lines = [
        _event("a", verb="watch", stage="ResponseStarted"),
        _event("a", verb="watch"),  # the same watch completing: counted once
        _event("b", verb="patch", sub="status"),
        _event("c", verb="patch", sub="status"),
        _event("d", user="system:kube-scheduler", verb="create", resource="bindings"),
        _event("e", at="2026-11-22T05:01:00Z"),  # outside the window
        "not json",
        json.dumps({"kind": "EventList"}),
    ]
    requests = audit.parse(lines)
    assert [r.audit_id for r in requests] == ["a", "b", "c", "d", "e"]
    start = requests[0].received - 1
    counts = audit.count(requests, "system:node:vm", start, start + 10)
    assert counts == {"patch pods/status": 2, "watch pods": 1}
    assert audit.user_agents(requests, "system:node:vm", start, start + 10) == ["kopf/1.45"]


def _audit_line(audit_id: str) -> str:
    return json.dumps({"kind": "Event", "auditID": audit_id, "verb": "get", "user": {"username": "u"},
                       "objectRef": {"resource": "pods"}, "requestReceivedTimestamp": "2026-11-29T12:00:00Z"}) + "\n"


def _append(path, *ids: str) -> None:
    with path.open("a") as f:
        f.writelines(_audit_line(i) for i in ids)


def test_the_audit_tail_reads_from_its_start_point_across_the_apiservers_rotation(tmp_path):
    log = tmp_path / "audit.log"
    _append(log, "before")
    tail = audit.AuditTail(log)
    _append(log, "a", "b")
    assert [r.audit_id for r in tail.requests()] == ["a", "b"]
    # The apiserver renames the full file beside it and begins a new one.
    log.rename(tmp_path / "audit-2026-11-29T12-00-00.000.log")
    _append(log, "c")
    assert [r.audit_id for r in tail.requests()] == ["a", "b", "c"]
    assert not tail.lost
    # Rotated again: the first backup, then the second one whole, then the new file.
    log.rename(tmp_path / "audit-2026-11-29T12-05-00.000.log")
    _append(log, "d")
    assert [r.audit_id for r in tail.requests()] == ["a", "b", "c", "d"]
    assert not tail.lost
    # With one backup kept, the oldest goes: what it held after the point is lost, the rest is still read.
    (tmp_path / "audit-2026-11-29T12-00-00.000.log").unlink()
    assert [r.audit_id for r in tail.requests()] == ["c", "d"]
    assert tail.lost


def test_an_audit_tail_begun_before_the_log_exists_reads_it_whole(tmp_path):
    log = tmp_path / "audit.log"
    old_backup = tmp_path / "audit-2026-11-28T00-00-00.000.log"
    _append(old_backup, "older")
    os.utime(old_backup, (1, 1))  # renamed long before the tail began
    tail = audit.AuditTail(log)
    assert tail.requests() == []
    _append(log, "a")
    assert [r.audit_id for r in tail.requests()] == ["a"]
    log.rename(tmp_path / "audit-2026-11-29T12-00-00.000.log")  # rotated since: its lines still count
    _append(log, "b")
    assert [r.audit_id for r in tail.requests()] == ["a", "b"]
    assert not tail.lost


def test_audit_rates_and_net_cost_per_pod():
    assert audit.rate_per_minute({"update leases": 6}, 60) == {"update leases": 6.0}
    assert audit.rate_per_minute({"x": 1}, 0) == {}
    # 120 s window with 50 pods: the idle lease renewals (6/min -> 12) are not the pods' cost.
    window = {"update leases": 13, "patch pods/status": 150, "get nodes": 0}
    net = audit.per_pod(window, 120, {"update leases": 6.0, "get nodes": 1.0}, 50)
    assert net == {"patch pods/status": 3.0, "update leases": 0.02}
    assert audit.per_pod(window, 120, {}, 0) == {}


def _raw_agent(scale: float, version: str) -> dict:
    return {
        "version": version,
        "idle": {"rss_mib": 80.0 * scale, "cpu_seconds": 0.5, "cpu_percent_of_core": 1.0, "window_seconds": 60},
        "api_idle": {"per_minute": {"update leases": 6.0}, "counts": {}, "window_seconds": 60, "user_agents": []},
        "api_per_pod": {"net_per_pod": {"patch pods/status": 3.0 * scale, "get pods": 1.0}, "user_agents": ["x"],
                        "counts": {}, "pods": 2, "window_seconds": 10},
        "sequential": {"start": [1.0 * scale, 2.0 * scale], "delete": [0.5, 0.7]},
        "exit_to_status": [0.2 * scale, 0.3 * scale],
        "bursts": {"3": {"per_pod": [1.0, 2.0, 3.0], "all_running": 3.1, "all_deleted": 2.0, "peak_rss_mib": 90.0,
                         "cpu_seconds": 1.5, "held": {"rss_mib": 85.0, "cpu_percent_of_core": 2.0}}},
        "churn": {"cycles": 4, "parallel": 2, "seconds": 9.0, "start": [1.0, 1.2], "failures": [],
                  "peak_rss_mib": 95.0, "cpu_seconds": 3.0, "rss_after_mib": 81.0,
                  "leftovers": {"sandboxes": 0, "containers": 0}},
    }


def _results() -> dict:
    return {
        "date": "2026-11-22 05:00 UTC",
        "machine": {"cpu": "Test CPU", "cores": 2, "memory_mib": 1024, "kernel": "6.1", "cgroup": "v1"},
        "versions": {"kubernetes (apiserver)": "v1.37.1"},
        "plan": {"sequential": 2},
        "floor": {"start": [0.5, 1.0], "stop": [0.3, 0.4],
                  "bursts": {"3": {"per_pod": [0.5, 0.6, 0.7], "all_started": 0.8}}},
        "agents": {"kopflet": _raw_agent(2.0, "kopflet abc"), "kubelet": _raw_agent(1.0, "Kubernetes v1.37.1")},
    }


def test_summary_has_ratios_to_floor_and_to_the_kubelet():
    s = report.summarize(_results())
    kopflet = s["agents"]["kopflet"]
    assert kopflet["start"]["p50"] == 2.0
    assert kopflet["start_vs_floor"]["p50"] == 4.0  # 2.0 / 0.5
    assert kopflet["vs_kubelet"]["start"] == {"p50": 2.0, "p90": 2.0, "p99": 2.0, "max": 2.0}
    assert kopflet["bursts"]["3"]["per_pod_vs_floor"]["p50"] == pytest.approx(2.0 / 0.6, abs=0.01)
    assert kopflet["api"]["per_pod_total"] == 7.0
    assert "vs_kubelet" not in s["agents"]["kubelet"]  # the reference is not compared with itself
    assert s["agents"]["kubelet"]["churn"]["failures"] == 0


def _floor(start: float, burst: float, all_started: float) -> dict:
    return {"start": [start], "stop": [0.3], "bursts": {"3": {"per_pod": [burst], "all_started": all_started}}}


def test_floors_merge_every_sample_and_average_the_all_started_times():
    merged = report.merge_floors([_floor(0.5, 1.0, 2.0), _floor(0.7, 1.4, 3.0)])
    assert merged == {"start": [0.5, 0.7], "stop": [0.3, 0.3],
                      "bursts": {"3": {"per_pod": [1.0, 1.4], "all_started": 2.5}}}
    partial = _floor(0.6, 1.0, 2.0)
    partial["bursts"] = {}  # a size one run lacks is left out, not taken from the others alone
    assert report.merge_floors([_floor(0.5, 1.0, 2.0), partial])["bursts"] == {}
    assert report.merge_floors([]) == {}


def test_each_agent_is_compared_with_the_floors_around_it():
    results = _results()
    # The machine slowed down between the agents: kopflet's floors are fast, the kubelet's slow.
    results["floors"] = [_floor(0.4, 0.5, 1.0), _floor(0.6, 0.7, 1.0), _floor(1.0, 1.5, 2.0)]
    results["floor_brackets"] = {"kopflet": [0, 1], "kubelet": [1, 2]}
    results["floor"] = report.merge_floors(results["floors"])
    s = report.summarize(results)
    kopflet, kubelet = s["agents"]["kopflet"], s["agents"]["kubelet"]
    assert kopflet["floor"]["start"]["n"] == 2 and kubelet["floor"]["start"]["n"] == 2
    assert kopflet["start_vs_floor"]["p50"] == pytest.approx(2.0 / 0.4, abs=0.01)  # the p50 of 0.4, 0.6
    assert kubelet["start_vs_floor"]["p50"] == pytest.approx(1.0 / 0.6, abs=0.01)  # 1.0 over the p50 of 0.6, 1.0
    assert kubelet["bursts"]["3"]["per_pod_vs_floor"]["p50"] == pytest.approx(2.0 / 0.7, abs=0.01)  # over 0.7, 1.5
    assert s["floor"]["start"]["n"] == 3  # the tables' overall floor: every run
    results["summary"] = s
    md = report.markdown(results)
    assert report.BRACKET_TEXT in md
    assert "| runtime floor (CRI), around kubelet | 2 | 600 | 1000 |" in md
    assert "| runtime floor (CRI), around kopflet | 2 | 500 | 700 | 700 | 700 | all started 1.00 s (mean) |" in md
    assert "| runtime floor (CRI) | 3 |" not in md  # no overall row when each agent has its own


def test_a_failed_floor_run_leaves_the_others_to_compare_with():
    results = _results()
    results["floors"] = [_floor(0.4, 0.5, 1.0), {"error": "CriError: unavailable"}, _floor(1.0, 1.5, 2.0)]
    results["floor_brackets"] = {"kopflet": [0, 1], "kubelet": [1, 2]}
    results["floor"] = report.merge_floors(results["floors"])
    assert results["floor"]["start"] == [0.4, 1.0]
    s = report.summarize(results)
    assert s["agents"]["kopflet"]["floor"]["start"]["n"] == 1  # the run before it alone
    assert s["agents"]["kopflet"]["start_vs_floor"]["p50"] == pytest.approx(2.0 / 0.4, abs=0.01)
    # Both runs around an agent failed: it is compared with every run that worked.
    results["floors"][2] = {"error": "CriError: unavailable"}
    results["floor"] = report.merge_floors(results["floors"])
    s = report.summarize(results)
    assert "floor" not in s["agents"]["kubelet"]
    assert s["agents"]["kubelet"]["start_vs_floor"]["p50"] == pytest.approx(1.0 / 0.4, abs=0.01)
    results["summary"] = s
    report.markdown(results)  # renders
    block = readme_block(results, "x.md")
    assert "| runtime floor (CRI), around kopflet | 400 / 400 |" in block
    assert "around kubelet" not in block


def test_a_failed_agent_still_summarises():
    results = _results()
    results["agents"]["kubelet"] = {"version": "v1.37.1", "error": "RuntimeError: refused"}
    s = report.summarize(results)
    assert s["agents"]["kubelet"]["error"] == "RuntimeError: refused"
    assert "vs_kubelet" not in s["agents"]["kopflet"]
    results["summary"] = s
    assert "**kubelet did not complete:** `RuntimeError: refused`" in report.markdown(results)


def test_markdown_and_readme_block_show_the_figures():
    results = _results()
    results["summary"] = report.summarize(results)
    md = report.markdown(results)
    assert "| kopflet | 2 | 2000 | 4000 | 4000 | 4000 | vs floor 4.0x / 4.0x |" in md
    assert "| runtime floor (CRI) | 2 | 500 | 1000 | 1000 | 1000 |  |" in md
    assert "| kopflet | 7.0 | 6.0 |" in md
    block = readme_block(results, "2026-11-22.md")
    assert block.startswith(README_START) and block.endswith(README_END)
    assert "| kopflet | 2000 / 4000 |" in block


def test_plot_writes_a_png(tmp_path):
    path = tmp_path / "plot.png"
    report.plot(_results(), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_workloads_are_bound_and_exit_on_sigterm():
    pod = workload.pod("p", "node-a")
    assert pod["spec"]["nodeName"] == "node-a"
    assert "trap 'exit 0' TERM" in pod["spec"]["containers"][0]["command"][2]
    assert workload.exiting_pod("e", "n")["spec"]["restartPolicy"] == "Never"
    kinds = {("volumes" in p["spec"], "initContainers" in p["spec"])
             for p in (workload.churn_pod(f"c{i}", "n", i) for i in range(3))}
    assert kinds == {(False, False), (True, False), (False, True)}


CGROUPS = {"cgroupsPerQOS": True, "cgroupDriver": "cgroupfs", "cgroupRoot": "", "enforceNodeAllocatable": ["pods"],
           "cpuManagerPolicy": "none", "memoryManagerPolicy": "None", "topologyManagerPolicy": "none"}


def test_cgroup_settings_come_from_configz_with_an_omitted_root_as_empty():
    configz = {"kubeletconfig": {**{k: v for k, v in CGROUPS.items() if k != "cgroupRoot"}, "podPidsLimit": -1}}
    assert run.cgroup_settings(configz) == CGROUPS


def test_the_report_says_when_both_agents_ran_with_the_same_cgroup_settings():
    results = _results()
    for agent in results["agents"].values():
        agent["cgroups"] = dict(CGROUPS)
    results["summary"] = report.summarize(results)
    sentence = ("Cgroup settings, the same for kopflet and kubelet (read from each agent's /configz): cgroupsPerQOS "
                'true, cgroupDriver cgroupfs, cgroupRoot "", enforceNodeAllocatable [pods], cpuManagerPolicy none, '
                "memoryManagerPolicy None, topologyManagerPolicy none.")
    assert sentence in report.markdown(results)
    assert readme_block(results, "x.md").endswith(f"|\n\n{sentence}\n\n{README_END}")


def test_the_report_shows_each_agents_cgroup_settings_when_they_differ():
    results = _results()
    results["agents"]["kopflet"]["cgroups"] = dict(CGROUPS)
    results["agents"]["kubelet"]["cgroups"] = {**CGROUPS, "cgroupsPerQOS": False}
    results["summary"] = report.summarize(results)
    md = report.markdown(results)
    assert "the same for" not in md
    assert "kopflet: cgroupsPerQOS true," in md and "; kubelet: cgroupsPerQOS false," in md


def test_the_churn_table_shows_what_was_left_before_the_agent_started():
    results = _results()
    results["agents"]["kopflet"]["leftovers_before"] = {"sandboxes": 0, "pod_cgroups": 8}
    results["summary"] = report.summarize(results)
    md = report.markdown(results)
    assert "| kopflet | 4 | 2 | 9.0 | 0 | 1000 | 1200 | pod_cgroups 8 | none | none |" in md
    assert "| kubelet | 4 | 2 | 9.0 | 0 | 1000 | 1200 | - | none | none |" in md  # a run from before it was counted


class LeftoverCore:
    """Namespaces by name and phase; the deletes recorded."""

    def __init__(self, namespaces: dict[str, str]) -> None:
        self.namespaces, self.calls = namespaces, []

    def list_namespace(self, **_: object) -> SimpleNamespace:
        return SimpleNamespace(items=[SimpleNamespace(metadata=SimpleNamespace(name=n), status=SimpleNamespace(phase=p))
                                      for n, p in self.namespaces.items()])

    def delete_collection_namespaced_pod(self, namespace: str, grace_period_seconds: int, **_: object) -> None:
        self.calls.append(("pods", namespace, grace_period_seconds))

    def delete_namespace(self, name: str, **_: object) -> None:
        self.calls.append(("namespace", name))


def test_an_interrupted_runs_namespaces_and_pods_are_removed_first() -> None:
    """A pod an interrupted run left is bound to the node: it would take one of the 110 places of the next burst."""
    core = LeftoverCore({"bench-kopflet-7430cb": "Active", "bench-kubelet-24b765": "Terminating",
                         "default": "Active", "hollow-bench-kopflet": "Active"})
    removed = cluster.remove_leftover_namespaces(core, "bench-")  # type: ignore[arg-type]
    assert removed == ["bench-kopflet-7430cb", "bench-kubelet-24b765"]
    assert core.calls == [("pods", "bench-kopflet-7430cb", 0), ("namespace", "bench-kopflet-7430cb"),
                          ("pods", "bench-kubelet-24b765", 0)]
