"""bench.hollow's pure parts: the fleet's API counts and rates, the pod latencies and the report."""

from __future__ import annotations

import pytest

from bench import audit, hollow


def request(user: str, verb: str, resource: str, received: float) -> audit.Request:
    return audit.Request(audit_id=f"{user}{verb}{resource}{received}", user=user, user_agent="ua", verb=verb,
                         resource=resource, code=200, received=received)


def test_requests_by_user_counts_only_the_fleet_in_the_window() -> None:
    requests = [request("system:node:a", "patch", "leases", 10.0),
                request("system:node:b", "patch", "leases", 11.0),
                request("system:node:b", "patch", "pods/status", 12.0),
                request("system:node:other", "patch", "leases", 11.0),  # not the fleet's
                request("system:node:a", "patch", "leases", 20.0),  # after the window
                request("system:node:a", "get", "nodes", 9.99)]  # before it
    assert hollow.requests_by_user(requests, {"system:node:a", "system:node:b"}, 10.0, 20.0) == {
        "patch leases": 2, "patch pods/status": 1}


@pytest.mark.parametrize(("counts", "nodes", "seconds", "expected"), [
    ({"patch leases": 100, "patch nodes/status": 20}, 10, 60.0, 12.0),
    ({"patch leases": 100}, 10, 30.0, 20.0),
    ({}, 10, 60.0, 0.0),
    ({"patch leases": 5}, 0, 60.0, 0.0),
    ({"patch leases": 5}, 5, 0.0, 0.0),
])
def test_per_node_per_minute(counts: dict[str, int], nodes: int, seconds: float, expected: float) -> None:
    assert hollow.per_node_per_minute(counts, nodes, seconds) == expected


def test_latencies_from_creation_or_binding() -> None:
    records = {"a": hollow.PodTimes(created=1.0, bound=1.5, running=2.0),
               "b": hollow.PodTimes(created=1.0, bound=None, running=None),  # never ran: no sample
               "c": hollow.PodTimes(created=None, bound=3.0, running=3.25)}  # created before the watch counted
    assert sorted(hollow.latencies(records, "created")) == [1.0]
    assert sorted(hollow.latencies(records, "bound")) == [0.25, 0.5]


@pytest.mark.parametrize(("pod", "running"), [
    ({"spec": {"containers": [{"name": "c"}]},
      "status": {"phase": "Running", "containerStatuses": [{"name": "c", "state": {"running": {}}}]}}, True),
    ({"spec": {"containers": [{"name": "c"}, {"name": "d"}]},
      "status": {"phase": "Running", "containerStatuses": [{"name": "c", "state": {"running": {}}}]}}, False),
    ({"spec": {"containers": [{"name": "c"}]},
      "status": {"phase": "Pending", "containerStatuses": [{"name": "c", "state": {"waiting": {}}}]}}, False),
    ({"spec": {"containers": [{"name": "c"}]}, "status": {}}, False),
])
def test_running_means_every_container_running(pod: dict, running: bool) -> None:
    assert hollow._all_started(pod) is running


def test_markdown_has_both_fleets_and_an_error() -> None:
    summary = {"n": 3, "p50": 0.5, "p90": 0.6, "p99": 0.7, "max": 0.8, "mean": 0.6}
    done = {"nodes": 2, "ready_seconds": 3.0,
            "idle": {"rss_mib_per_node": 20.0, "pss_mib_per_node": 18.0, "cpu_percent_per_node": 0.5},
            "running": {"rss_mib_per_node": 21.0, "cpu_percent_per_node": 0.7},
            "api_idle": {"per_node_per_minute": 6.0, "window_seconds": 60.0, "counts": {"patch leases": 12}},
            "api_running": {"per_node_per_minute": 12.0, "window_seconds": 60.0, "counts": {}},
            "api_pods": {"per_pod": 7.5, "window_seconds": 30.0, "counts": {"create events": 9}},
            "start": {"created_to_running": summary, "bound_to_running": summary, "all_running_seconds": 4.2},
            "api_lost": "the audit log rotated twice during the run: some requests are not counted"}
    results = {"date": "2026-11-28 15:00 UTC",
               "machine": {"cpu": "cpu", "cores": 2, "memory_mib": 1024, "kernel": "6"},
               "versions": {"kopflet": "abc"}, "plan": {"nodes": 2},
               "fleets": {"kopflet": done, "kubemark": {"nodes": 2, "error": "RuntimeError: boom"}}}
    text = hollow.markdown(results)
    assert "| kopflet | 2 | 3.0 | 20.0 | 18.0 | 0.5 | 21.0 | 0.7 | 6.0 | 12.0 | 7.5 |" in text
    assert "| kopflet | 3 | created → running | 500 | 600 | 700 | 800 | 4.2 |" in text
    assert "| kubemark | 2 | did not complete: RuntimeError: boom" in text
    assert "- kubemark: RuntimeError: boom" in text
    assert "**kopflet:** the audit log rotated twice during the run: some requests are not counted." in text
    assert "- kopflet, idle (60.0 s): patch leases: 12" in text
