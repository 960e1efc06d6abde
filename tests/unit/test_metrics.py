"""
kopflet.metrics: the Prometheus text format 0.0.4 as the Go client writes it, and the kubelet's metrics.

Exact text comparisons: what a scraper parses is the contract. The expected numbers and help texts are
those of the upstream kubelet (v1.37) and Go's strconv.FormatFloat(v, 'g', -1, 64).
"""

from __future__ import annotations

import math
import textwrap

import pytest

from kopflet import metrics
from kopflet.metrics import Counter, Gauge, Histogram, KubeletMetrics, Registry


def text(block: str) -> str:
    return textwrap.dedent(block).lstrip("\n")


# ------------------------------------------------------------------------------------------- numbers

FLOATS = [
    (0, "0"),
    (-0.0, "0"),
    (1, "1"),
    (-1, "-1"),
    (2, "2"),
    (0.5, "0.5"),
    (0.005, "0.005"),
    (0.0001, "0.0001"),
    (0.00001, "1e-05"),
    (0.000025, "2.5e-05"),
    (3600, "3600"),
    (123456, "123456"),
    (999999, "999999"),
    (1_000_000, "1e+06"),
    (1_234_567, "1.234567e+06"),
    (12_345_678, "1.2345678e+07"),
    (3_195_174_912, "3.195174912e+09"),
    (1e21, "1e+21"),
    (1e100, "1e+100"),
    (0.1 + 0.2, "0.30000000000000004"),
    (745.0580596923828, "745.0580596923828"),
    (1624396278.302, "1.624396278302e+09"),
    (math.inf, "+Inf"),
    (-math.inf, "-Inf"),
    (math.nan, "NaN"),
]


@pytest.mark.parametrize(("value", "expected"), FLOATS, ids=[f"{v!r}" for v, _ in FLOATS])
def test_format_value_is_gos_shortest_g(value: float, expected: str) -> None:
    assert metrics.format_value(value) == expected


def test_exponential_buckets_are_the_go_values() -> None:
    assert [metrics.format_value(b) for b in metrics.RUNTIME_OPERATIONS_DURATION_BUCKETS] == [
        "0.005", "0.0125", "0.03125", "0.078125", "0.1953125", "0.48828125", "1.220703125", "3.0517578125",
        "7.62939453125", "19.073486328125", "47.6837158203125", "119.20928955078125", "298.0232238769531",
        "745.0580596923828",
    ]  # fmt: skip
    with pytest.raises(ValueError):
        metrics.exponential_buckets(0, 2, 3)


# ------------------------------------------------------------------------------------------ escaping

ESCAPES = {
    "plain": ("pod-a", "pod-a"),
    "backslash": ("C:\\path", "C:\\\\path"),
    "quote": ('say "hi"', 'say \\"hi\\"'),
    "newline": ("two\nlines", "two\\nlines"),
    "all-at-once": ('\\"\n', '\\\\\\"\\n'),
    "unicode-kept": ("žluť", "žluť"),
}


@pytest.mark.parametrize(("raw", "escaped"), ESCAPES.values(), ids=ESCAPES.keys())
def test_label_values_are_escaped(raw: str, escaped: str) -> None:
    assert metrics.escape_label_value(raw) == escaped
    registry = Registry()
    registry.gauge("g", "h", ("name",)).labels(raw).set(1)
    assert f'g{{name="{escaped}"}} 1\n' in registry.exposition()


def test_help_escapes_backslash_and_newline_but_not_quotes() -> None:
    registry = Registry()
    registry.counter("c_total", 'a "quoted" \\ help\nwith two lines')
    assert registry.exposition() == text(
        """
        # HELP c_total a "quoted" \\\\ help\\nwith two lines
        # TYPE c_total counter
        c_total 0
        """
    )


# ---------------------------------------------------------------------------------------- exposition


def test_counter_gauge_and_ordering() -> None:
    registry = Registry()
    requests = registry.counter("requests_total", "Requests.", ("path", "code"))
    temperature = registry.gauge("a_temperature", "Degrees.", stability=metrics.ALPHA)
    requests.labels(path="/b", code="200").inc()
    requests.labels("/a", "500").inc(2.5)
    requests.labels(code="200", path="/a").inc()
    temperature.set(-3.5)
    temperature.labels().inc(0.5)
    # Families by name; label pairs by name (code before path); series by their values.
    assert registry.exposition() == text(
        """
        # HELP a_temperature [ALPHA] Degrees.
        # TYPE a_temperature gauge
        a_temperature -3
        # HELP requests_total Requests.
        # TYPE requests_total counter
        requests_total{code="200",path="/a"} 1
        requests_total{code="200",path="/b"} 1
        requests_total{code="500",path="/a"} 2.5
        """
    )


def test_histogram_is_cumulative_with_inf_sum_and_count() -> None:
    registry = Registry()
    latency = registry.histogram("op_seconds", "Latency.", ("op",), buckets=(1, 0.5))
    for value in (0.1, 0.5, 0.7, 3):
        latency.labels("pull").observe(value)
    latency.labels(op="a").observe(1)
    assert registry.exposition() == text(
        """
        # HELP op_seconds Latency.
        # TYPE op_seconds histogram
        op_seconds_bucket{op="a",le="0.5"} 0
        op_seconds_bucket{op="a",le="1"} 1
        op_seconds_bucket{op="a",le="+Inf"} 1
        op_seconds_sum{op="a"} 1
        op_seconds_count{op="a"} 1
        op_seconds_bucket{op="pull",le="0.5"} 2
        op_seconds_bucket{op="pull",le="1"} 3
        op_seconds_bucket{op="pull",le="+Inf"} 4
        op_seconds_sum{op="pull"} 4.3
        op_seconds_count{op="pull"} 4
        """
    )


def test_unlabelled_histogram_shows_zeros_until_used() -> None:
    registry = Registry()
    registry.histogram("h", "H.", buckets=(1,))
    assert registry.exposition() == text(
        """
        # HELP h H.
        # TYPE h histogram
        h_bucket{le="1"} 0
        h_bucket{le="+Inf"} 0
        h_sum 0
        h_count 0
        """
    )


def test_families_without_series_are_not_written() -> None:
    registry = Registry()
    labelled = registry.counter("labelled_total", "L.", ("x",))
    lazy = registry.histogram("lazy", "Lazy.", lazy=True)
    assert registry.exposition() == ""
    lazy.observe(0.2)
    labelled.labels("1").inc()
    assert "lazy_count 1\n" in registry.exposition()
    labelled.remove("1")
    assert "labelled_total" not in registry.exposition()


def test_render_family_with_timestamps() -> None:
    samples = [({"pod": "b", "namespace": "ns"}, 2, 1624396278302), ({"pod": "a", "namespace": "ns"}, 1e7, None)]
    assert metrics.render_family("pod_x", "X.", metrics.GAUGE, samples, metrics.STABLE) == text(
        """
        # HELP pod_x [STABLE] X.
        # TYPE pod_x gauge
        pod_x{namespace="ns",pod="a"} 1e+07
        pod_x{namespace="ns",pod="b"} 2 1624396278302
        """
    )
    assert metrics.render_family("empty", "E.", metrics.GAUGE, []) == ""


# ------------------------------------------------------------------------------------- misuse guards

MISUSE = {
    "too-few-values": lambda: Counter("c", "h", ("a", "b")).labels("1"),
    "wrong-names": lambda: Counter("c", "h", ("a",)).labels(b="1"),
    "both-styles": lambda: Counter("c", "h", ("a", "b")).labels("1", b="2"),
    "negative-inc": lambda: Counter("c", "h").inc(-1),
    "bad-metric-name": lambda: Gauge("bad-name", "h"),
    "bad-label-name": lambda: Gauge("g", "h", ("bad-label",)),
    "reserved-le": lambda: Histogram("h", "h", ("le",)),
    "duplicate-labels": lambda: Gauge("g", "h", ("a", "a")),
    "empty-buckets": lambda: Histogram("h", "h", buckets=()),
}


@pytest.mark.parametrize("misuse", MISUSE.values(), ids=MISUSE.keys())
def test_misuse_is_a_programming_error(misuse) -> None:
    with pytest.raises(ValueError):
        misuse()


def test_names_are_unique_in_a_registry() -> None:
    registry = Registry()
    registry.counter("x_total", "X.")
    with pytest.raises(ValueError, match="already registered"):
        registry.gauge("x_total", "X.")


# ----------------------------------------------------------------------------------- kubelet metrics

# HELP and TYPE of upstream pkg/kubelet/metrics/metrics.go v1.37 (component-base adds the stability level).
KUBELET_FAMILIES = {
    "kubelet_node_name": ("gauge", "[ALPHA] The node's name. The count is always 1."),
    "kubelet_pod_start_duration_seconds": (
        "histogram",
        "[ALPHA] Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
    ),
    "kubelet_pod_start_sli_duration_seconds": (
        "histogram",
        "[ALPHA] Duration in seconds to start a pod, excluding time to pull images and run init containers,"
        " measured from pod creation timestamp to when all its containers are reported as started and observed"
        " via watch",
    ),
    "kubelet_pod_start_total_duration_seconds": (
        "histogram",
        "[ALPHA] Duration in seconds to start a pod since creation, including time to pull images and run init"
        " containers, measured from pod creation timestamp to when all its containers are reported as started and"
        " observed via watch",
    ),
    "kubelet_image_pull_duration_seconds": ("histogram", "[ALPHA] Duration in seconds to pull an image."),
    "kubelet_pod_worker_duration_seconds": (
        "histogram",
        "[ALPHA] Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync",
    ),
    "kubelet_pleg_relist_duration_seconds": ("histogram", "[ALPHA] Duration in seconds for relisting pods in PLEG."),
    "kubelet_pleg_relist_interval_seconds": ("histogram", "[ALPHA] Interval in seconds between relisting in PLEG."),
    "kubelet_running_pods": ("gauge", "[ALPHA] Number of pods that have a running pod sandbox"),
    "kubelet_graceful_shutdown_start_time_seconds": (
        "gauge", "[ALPHA] Last graceful shutdown start time since unix epoch in seconds"),
    "kubelet_graceful_shutdown_end_time_seconds": (
        "gauge", "[ALPHA] Last graceful shutdown end time since unix epoch in seconds"),
    "kubelet_running_containers": ("gauge", "[ALPHA] Number of containers currently running"),
    "kubelet_runtime_operations_total": (
        "counter",
        "[ALPHA] Cumulative number of runtime operations by operation type.",
    ),
    "kubelet_runtime_operations_errors_total": (
        "counter",
        "[ALPHA] Cumulative number of runtime operation errors by operation type.",
    ),
    "kubelet_runtime_operations_duration_seconds": (
        "histogram",
        "[ALPHA] Duration in seconds of runtime operations. Broken down by operation type.",
    ),
    "kubelet_started_pods_total": ("counter", "[ALPHA] Cumulative number of pods started"),
    "kubelet_started_pods_errors_total": ("counter", "[ALPHA] Cumulative number of errors when starting pods"),
    "kubelet_started_containers_total": ("counter", "[ALPHA] Cumulative number of containers started"),
    "kubelet_started_containers_errors_total": (
        "counter",
        "[ALPHA] Cumulative number of errors when starting containers",
    ),
    "kubelet_image_garbage_collected_total": (
        "counter",
        "[ALPHA] Total number of images garbage collected by the kubelet, whether through disk usage or image age.",
    ),
    "kubelet_image_volume_requested_total": ("counter", "[BETA] Number of requested image volumes."),
    "kubelet_image_volume_mounted_succeed_total": ("counter", "[BETA] Number of successful image volume mounts."),
    "kubelet_image_volume_mounted_errors_total": ("counter", "[BETA] Number of failed image volume mounts."),
}


def _exercised() -> KubeletMetrics:
    """Every family with one series, so each shows its HELP and TYPE."""
    m = KubeletMetrics("node-1")
    m.pod_start_sli_duration.observe(3)
    m.pod_start_total_duration.observe(4)
    m.image_pull_duration.labels("0-10MB").observe(1.5)
    m.observe_pod_worker("sync", 0.2)
    m.set_running(1, {"running": 2})
    m.observe_runtime_operation("RunPodSandbox", 0.3, error=True)
    m.started_containers.labels(metrics.CONTAINER).inc()
    m.started_containers_errors.labels(metrics.INIT_CONTAINER, "CreateContainerError").inc()
    m.image_garbage_collected.labels("age").inc()
    return m


@pytest.mark.parametrize(("name", "expected"), KUBELET_FAMILIES.items(), ids=KUBELET_FAMILIES.keys())
def test_kubelet_families_are_upstreams(name: str, expected: tuple[str, str]) -> None:
    exposition = _exercised().exposition()
    type_, help_text = expected
    assert f"# HELP {name} {help_text}\n# TYPE {name} {type_}\n" in exposition


def test_kubelet_family_set_and_labels() -> None:
    m = KubeletMetrics()
    families = {f.name: f for f in (m.registry.get(n) for n in KUBELET_FAMILIES) if f is not None}
    assert set(families) == set(KUBELET_FAMILIES)
    assert families["kubelet_image_pull_duration_seconds"].label_names == ("image_size_in_bytes",)
    assert m.image_pull_duration.buckets == (1, 5, 10, 20, 30, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800,
                                             2700, 3600)
    assert m.pod_start_total_duration.buckets == metrics.POD_STARTUP_DURATION_BUCKETS
    assert families["kubelet_node_name"].label_names == ("node",)
    assert families["kubelet_running_containers"].label_names == ("container_state",)
    assert families["kubelet_started_containers_errors_total"].label_names == ("container_type", "code")
    assert families["kubelet_image_garbage_collected_total"].label_names == ("reason",)
    for name in ("kubelet_runtime_operations_total", "kubelet_runtime_operations_errors_total",
                 "kubelet_runtime_operations_duration_seconds", "kubelet_pod_worker_duration_seconds"):  # fmt: skip
        assert families[name].label_names == ("operation_type",)
    assert m.pod_start_duration.buckets == m.pod_start_sli_duration.buckets == metrics.POD_STARTUP_DURATION_BUCKETS
    assert m.pleg_relist_duration.buckets == metrics.DEFAULT_BUCKETS
    # Upstream's SLI and total histograms are vectors without labels: they only appear with the first pod start.
    assert "kubelet_pod_start_sli_duration_seconds" not in m.exposition()
    assert "kubelet_pod_start_total_duration_seconds" not in m.exposition()
    assert "kubelet_node_name" not in m.exposition()


MIB, GIB = 1024 * 1024, 1024 * 1024 * 1024


@pytest.mark.parametrize(("size", "label"), [
    (0, "N/A"), (1, "0-10MB"), (10 * MIB, "0-10MB"), (10 * MIB + 1, "10MB-100MB"), (300 * MIB, "100MB-500MB"),
    (GIB, "500MB-1GB"), (2 * GIB, "1GB-5GB"), (50 * GIB, "40GB-60GB"), (100 * GIB + 1, "GT100GB"),
])
def test_image_size_bucket_is_upstreams(size: int, label: str) -> None:
    """Upstream GetImageSizeBucket: the last bucket whose lower bound the size is strictly above; 0 is unknown."""
    assert metrics.image_size_bucket(size) == label


def test_the_pod_start_step_histogram_is_kopflets_own() -> None:
    m = KubeletMetrics()
    m.pod_start_step_duration.labels("image_pull").observe(3.0)
    out = m.exposition()
    assert "# HELP kopflet_pod_start_step_duration_seconds Duration in seconds of each step of a pod start" in out
    assert "[ALPHA]" not in out.split("kopflet_pod_start_step_duration_seconds", 1)[1].split("\n", 1)[0]
    assert 'kopflet_pod_start_step_duration_seconds_bucket{step="image_pull",le="2.5"} 0\n' in out
    assert 'kopflet_pod_start_step_duration_seconds_bucket{step="image_pull",le="5"} 1\n' in out
    assert 'kopflet_pod_start_step_duration_seconds_bucket{step="image_pull",le="3600"} 1\n' in out


def test_runtime_operation_records_count_duration_and_error() -> None:
    m = KubeletMetrics()
    m.observe_runtime_operation("PullImage", 1.3)
    m.observe_runtime_operation("RuntimeService/ContainerStatus", 0.002, error=True)
    m.observe_runtime_operation("container_status", 0.004)
    out = m.exposition()
    assert 'kubelet_runtime_operations_total{operation_type="pull_image"} 1\n' in out
    assert 'kubelet_runtime_operations_total{operation_type="container_status"} 2\n' in out
    assert 'kubelet_runtime_operations_errors_total{operation_type="container_status"} 1\n' in out
    assert 'kubelet_runtime_operations_errors_total{operation_type="pull_image"}' not in out
    assert 'kubelet_runtime_operations_duration_seconds_bucket{operation_type="pull_image",le="1.220703125"} 0\n' in out
    assert (
        'kubelet_runtime_operations_duration_seconds_bucket{operation_type="pull_image",le="3.0517578125"} 1\n' in out
    )
    assert 'kubelet_runtime_operations_duration_seconds_sum{operation_type="container_status"} 0.006\n' in out


def test_timed_runtime_operation_counts_an_exception_as_an_error() -> None:
    ticks = iter([10.0, 10.25, 20.0, 20.5])
    m = KubeletMetrics()
    with m.timed_runtime_operation("StopContainer", clock=lambda: next(ticks)):
        pass
    with pytest.raises(RuntimeError), m.timed_runtime_operation("StopContainer", clock=lambda: next(ticks)):
        raise RuntimeError("boom")
    out = m.exposition()
    assert 'kubelet_runtime_operations_total{operation_type="stop_container"} 2\n' in out
    assert 'kubelet_runtime_operations_errors_total{operation_type="stop_container"} 1\n' in out
    assert 'kubelet_runtime_operations_duration_seconds_sum{operation_type="stop_container"} 0.75\n' in out


OPERATIONS = {
    "RunPodSandbox": "run_podsandbox",
    "ListPodSandbox": "list_podsandbox",
    "PodSandboxStats": "podsandbox_stats",
    "ImageFsInfo": "image_fs_info",
    "UpdateContainerResources": "update_container",
    "ImageService/PullImage": "pull_image",
    "SomeNewCall": "some_new_call",
}


@pytest.mark.parametrize(("method", "operation"), OPERATIONS.items(), ids=OPERATIONS.keys())
def test_cri_methods_map_to_upstream_operation_types(method: str, operation: str) -> None:
    assert metrics.runtime_operation(method) == operation


def test_node_name_and_running_counts() -> None:
    m = KubeletMetrics("node-1")
    m.set_node_name("node-2")
    m.set_running(3, {"running": 4, "exited": 1})
    m.set_running(2, {"running": 2})
    out = m.exposition()
    assert 'kubelet_node_name{node="node-2"} 1\n' in out and "node-1" not in out
    assert "kubelet_running_pods 2\n" in out
    assert 'kubelet_running_containers{container_state="exited"} 0\n' in out
    assert 'kubelet_running_containers{container_state="running"} 2\n' in out


def test_pleg_and_pod_start() -> None:
    m = KubeletMetrics()
    m.observe_pleg_relist(0.02)
    m.observe_pleg_relist(0.03, interval=1.0)
    m.pod_start_duration.observe(2.5)
    out = m.exposition()
    assert "kubelet_pleg_relist_duration_seconds_count 2\n" in out
    assert "kubelet_pleg_relist_interval_seconds_count 1\n" in out
    assert 'kubelet_pod_start_duration_seconds_bucket{le="2"} 0\n' in out
    assert 'kubelet_pod_start_duration_seconds_bucket{le="3"} 1\n' in out


def test_probe_metrics_count_by_result_and_time_only_successes() -> None:
    from kopflet.metrics import ProbeMetrics

    m = ProbeMetrics()
    who = {"container": "c", "pod": "p", "namespace": "n", "uid": "u"}
    m.observe("readiness", "successful", 0.25, **who)
    m.observe("readiness", "failed", 9.0, **who)
    text = m.exposition()
    assert ('prober_probe_total{container="c",namespace="n",pod="p",pod_uid="u",probe_type="Readiness",'
            'result="successful"} 1') in text
    assert 'result="failed"' in text
    assert 'prober_probe_duration_seconds_count{container="c",namespace="n",pod="p",probe_type="Readiness"} 1' in text
    m.forget("readiness", **who)
    assert 'pod="p"' not in m.exposition()


class _Manager:
    def __init__(self, kind: str, ttl: float, errors: int = 0) -> None:
        self.kind, self.renew_errors, self.rotation_ages, self._ttl = kind, errors, [], ttl

    def ttl_seconds(self) -> float:
        return self._ttl


def test_certificate_manager_metrics_are_registered_once_and_follow_the_latest_manager() -> None:
    """A start tried again makes a new serving certificate manager: its metrics replace the first one's."""
    m = KubeletMetrics("n")
    first = _Manager("server", 100.0, errors=2)
    first.rotation_ages.append(30.0)
    m.watch_certificate_manager(first)
    text = m.exposition()
    assert "kubelet_certificate_manager_server_ttl_seconds 100\n" in text
    assert "kubelet_server_expiration_renew_errors 2\n" in text
    assert "kubelet_certificate_manager_server_rotation_seconds_count 1\n" in text
    second = _Manager("server", 50.0, errors=1)
    m.watch_certificate_manager(second)  # no "already registered"
    text = m.exposition()
    assert "kubelet_certificate_manager_server_ttl_seconds 50\n" in text
    assert "kubelet_server_expiration_renew_errors 3\n" in text  # a counter only grows
    m.watch_certificate_manager(_Manager("client", math.inf))
    assert "kubelet_certificate_manager_client_ttl_seconds +Inf\n" in m.exposition()


def test_the_image_volume_counters_show_zero_from_the_start() -> None:
    """Upstream registers them as plain counters (no labels) when ImageVolume is on, so they read 0 before use."""
    exposition = KubeletMetrics().exposition()
    for name in ("kubelet_image_volume_requested_total", "kubelet_image_volume_mounted_succeed_total",
                 "kubelet_image_volume_mounted_errors_total"):
        assert f"\n{name} 0\n" in exposition
