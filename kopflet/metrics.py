"""
Prometheus metrics for the kubelet's ``/metrics`` endpoints, without a client library.

Pure: no I/O. A `Registry` holds `Counter`, `Gauge` and `Histogram` families (label names fixed when a
family is defined) and renders them in the Prometheus text format 0.0.4 with `Registry.exposition()`.
The text matches what the upstream kubelet's Go client writes, byte for byte where it matters to a
scraper or a diff: families sorted by name, label pairs sorted by name, series sorted by label values,
numbers formatted like Go's ``strconv.FormatFloat(v, 'g', -1, 64)`` (``1e+06``, ``0.005``, ``+Inf``), and
help texts annotated with the stability level (``[ALPHA] ...``) as component-base does.

`KubeletMetrics` defines the upstream kubelet metrics kopflet records (pkg/kubelet/metrics/metrics.go,
v1.37) with their exact names, help texts, labels and buckets, plus small recording helpers for the I/O
code. The lower-level helpers (`escape_label_value`, `format_value`, `render_family`) are reused by
`kopflet.stats.summary` for the constant, timestamped samples of ``/metrics/resource``.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Final, Generic, Protocol, TypeVar

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

COUNTER: Final = "counter"
GAUGE: Final = "gauge"
HISTOGRAM: Final = "histogram"

# Stability levels (component-base metrics): prefixed to the help text as "[ALPHA] ".
ALPHA: Final = "ALPHA"
BETA: Final = "BETA"
STABLE: Final = "STABLE"

# prometheus.DefBuckets: Go client's default histogram buckets.
DEFAULT_BUCKETS: Final[tuple[float, ...]] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """prometheus.ExponentialBuckets: multiplied step by step, so the floats equal Go's exactly."""
    if count < 1 or start <= 0 or factor <= 1:
        raise ValueError("exponential buckets need count >= 1, start > 0 and factor > 1")
    buckets = []
    for _ in range(count):
        buckets.append(start)
        start *= factor
    return tuple(buckets)


# ---------------------------------------------------------------------------------------- text format


def escape_label_value(value: str) -> str:
    r"""A label value inside double quotes: backslash, double quote and newline become \\, \" and \n."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def escape_help(text: str) -> str:
    r"""A HELP text: only backslash and newline are escaped (quotes stay as they are)."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    """A sample value or bucket bound as Go writes it (strconv 'g' with the shortest precision).

    Shortest round-trip digits (Python's repr finds the same ones), in exponent form when the decimal
    exponent is below -4 or at least 6 (``1.2345e+07``), else plain (``0.005``, ``3600``).
    """
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    mantissa, _, exponent = repr(abs(value)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    exp10 = int(exponent or 0) + len(whole) - 1
    stripped = digits.lstrip("0")
    exp10 -= len(digits) - len(stripped)
    digits = stripped.rstrip("0") or "0"
    if exp10 < -4 or exp10 >= 6:
        rest = f".{digits[1:]}" if len(digits) > 1 else ""
        return f"{sign}{digits[0]}{rest}e{'-' if exp10 < 0 else '+'}{abs(exp10):02d}"
    point = exp10 + 1
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{sign}{digits}{'0' * (point - len(digits))}"
    return f"{sign}{digits[:point]}.{digits[point:]}"


def format_labels(pairs: Iterable[tuple[str, str]]) -> str:
    """``{a="1",b="2"}`` in the given order, or the empty string for no labels."""
    inner = ",".join(f'{name}="{escape_label_value(value)}"' for name, value in pairs)
    return f"{{{inner}}}" if inner else ""


def sample_line(name: str, pairs: Iterable[tuple[str, str]], value: float, timestamp_ms: int | None = None) -> str:
    """One sample line with its newline; the timestamp (milliseconds since the epoch) is optional."""
    stamp = "" if timestamp_ms is None else f" {int(timestamp_ms)}"
    return f"{name}{format_labels(pairs)} {format_value(value)}{stamp}\n"


def family_header(name: str, help_text: str, type_: str, stability: str = "") -> str:
    """The ``# HELP`` and ``# TYPE`` lines; a stability level is prefixed to the help as component-base does."""
    annotated = f"[{stability}] {help_text}" if stability else help_text
    return f"# HELP {name} {escape_help(annotated)}\n# TYPE {name} {type_}\n"


def render_family(
    name: str,
    help_text: str,
    type_: str,
    samples: Iterable[tuple[Mapping[str, str], float, int | None]],
    stability: str = "",
) -> str:
    """A family of constant samples (labels, value, timestamp in ms or None), as a collector emits them.

    Labels are written sorted by name and samples sorted by their label values, as the Go registry
    sorts them; an empty family renders as nothing (Go omits families without samples).
    """
    rows = sorted(
        ((tuple(sorted(labels.items())), value, timestamp) for labels, value, timestamp in samples),
        key=lambda row: tuple(v for _, v in row[0]),
    )
    if not rows:
        return ""
    body = "".join(sample_line(name, pairs, value, timestamp) for pairs, value, timestamp in rows)
    return family_header(name, help_text, type_, stability) + body


Sample = tuple[Mapping[str, str], float, int | None]
"""A constant sample: its labels, value and timestamp in milliseconds (or None)."""
AddSample = Callable[[str, Mapping[str, str], float, "int | None"], None]
"""``add(family, labels, value, timestamp_ns)``, how the stats endpoints' builders hand over a sample."""


class Samples:
    """Constant samples gathered per family for one scrape, rendered once (the stats endpoints' collectors).

    A repeated label set keeps its first sample: a duplicate would make the whole scrape invalid.
    """

    def __init__(self, families: Mapping[str, tuple[str, ...]]) -> None:
        """`families`: name -> (type, help) or (type, help, stability)."""
        self._families = families
        self._samples: dict[str, list[Sample]] = {name: [] for name in families}

    def add(self, name: str, labels: Mapping[str, str], value: float, timestamp_ns: int | None = None) -> None:
        self._samples[name].append((labels, value, None if timestamp_ns is None else timestamp_ns // 1_000_000))

    def render(self) -> str:
        text = []
        for name in sorted(self._samples):
            type_, help_text, *stability = self._families[name]
            text.append(render_family(name, help_text, type_, self._unique(self._samples[name]), *stability))
        return "".join(text)

    @staticmethod
    def _unique(samples: Iterable[Sample]) -> list[Sample]:
        seen: set[tuple[tuple[str, str], ...]] = set()
        result = []
        for sample in samples:
            key = tuple(sorted(sample[0].items()))
            if key not in seen:
                seen.add(key)
                result.append(sample)
        return result


# -------------------------------------------------------------------------------------------- metrics


class _Child:
    """The value(s) of one labelled series; guarded by the family's lock."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock


class CounterChild(_Child):
    def __init__(self, lock: threading.Lock) -> None:
        super().__init__(lock)
        self.value = 0.0

    def inc(self, amount: float = 1) -> None:
        """Add to the counter; counters only go up (a negative amount is a programming error)."""
        if amount < 0:
            raise ValueError("a counter cannot decrease")
        with self._lock:
            self.value += amount


class GaugeChild(_Child):
    def __init__(self, lock: threading.Lock) -> None:
        super().__init__(lock)
        self.value = 0.0

    def set(self, value: float) -> None:
        with self._lock:
            self.value = float(value)

    def inc(self, amount: float = 1) -> None:
        with self._lock:
            self.value += amount

    def dec(self, amount: float = 1) -> None:
        with self._lock:
            self.value -= amount


class HistogramChild(_Child):
    def __init__(self, lock: threading.Lock, bounds: tuple[float, ...]) -> None:
        super().__init__(lock)
        self._bounds = bounds
        self.counts = [0] * len(bounds)  # per bucket, not cumulative; +Inf is `count`
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        """Record one observation (upper bounds are inclusive: ``le``)."""
        with self._lock:
            for i, bound in enumerate(self._bounds):
                if value <= bound:
                    self.counts[i] += 1
                    break
            self.sum += value
            self.count += 1


_C = TypeVar("_C", bound=_Child)


class _Family(Generic[_C]):
    """A named metric with fixed label names; its series are created by `labels()` on first use."""

    type_: str = ""

    def __init__(
        self, name: str, help_text: str, label_names: Sequence[str] = (), *, stability: str = "", lazy: bool = False
    ) -> None:
        if not name or not all(c.isalnum() or c in "_:" for c in name) or name[0].isdigit():
            raise ValueError(f"invalid metric name {name!r}")
        for label in label_names:
            if not label or not all(c.isalnum() or c == "_" for c in label) or label[0].isdigit():
                raise ValueError(f"invalid label name {label!r} of {name}")
            if label == "le" or label.startswith("__"):
                raise ValueError(f"reserved label name {label!r} of {name}")
        if len(set(label_names)) != len(label_names):
            raise ValueError(f"duplicate label names of {name}: {label_names}")
        self.name = name
        self.help = help_text
        self.label_names = tuple(label_names)
        self.stability = stability
        self._lock = threading.Lock()
        self._children: dict[tuple[str, ...], _C] = {}
        # Like a Go metric without a *Vec, a family without labels shows its zero value from the start;
        # `lazy` makes it behave like a label-less *Vec instead: absent until first used.
        if not self.label_names and not lazy:
            self.labels()

    def _new_child(self) -> _C:
        raise NotImplementedError

    def labels(self, *values: str, **by_name: str) -> _C:
        """The series for these label values (positional in definition order, or all by name)."""
        if values and by_name:
            raise ValueError(f"{self.name}: label values either positionally or by name, not both")
        if by_name:
            if set(by_name) != set(self.label_names):
                raise ValueError(f"{self.name}: expected labels {self.label_names}, got {tuple(by_name)}")
            values = tuple(by_name[label] for label in self.label_names)
        if len(values) != len(self.label_names):
            raise ValueError(f"{self.name}: expected {len(self.label_names)} label values, got {len(values)}")
        key = tuple(str(v) for v in values)
        with self._lock:
            child = self._children.get(key)
            if child is None:
                child = self._children[key] = self._new_child()
        return child

    def remove(self, *values: str) -> None:
        """Forget one series (e.g. of a pod that is gone); absent series are ignored."""
        with self._lock:
            self._children.pop(tuple(str(v) for v in values), None)

    def clear(self) -> None:
        """Forget every series (a family without labels gets its zero series back on next use)."""
        with self._lock:
            self._children.clear()

    def _series(self) -> list[tuple[tuple[tuple[str, str], ...], _C]]:
        with self._lock:
            items = list(self._children.items())
        return sorted(
            ((tuple(sorted(zip(self.label_names, key, strict=True))), child) for key, child in items),
            key=lambda item: tuple(value for _, value in item[0]),
        )

    def _render_series(self, pairs: tuple[tuple[str, str], ...], child: _C) -> str:
        raise NotImplementedError

    def render(self) -> str:
        """This family in the text format, or nothing while it has no series."""
        series = self._series()
        if not series:
            return ""
        header = family_header(self.name, self.help, self.type_, self.stability)
        with self._lock:  # a consistent reading of each series (histogram buckets vs count)
            return header + "".join(self._render_series(pairs, child) for pairs, child in series)


class Counter(_Family[CounterChild]):
    type_ = COUNTER

    def _new_child(self) -> CounterChild:
        return CounterChild(self._lock)

    def inc(self, amount: float = 1) -> None:
        """Shortcut for a counter without labels."""
        self.labels().inc(amount)

    def _render_series(self, pairs: tuple[tuple[str, str], ...], child: CounterChild) -> str:
        return sample_line(self.name, pairs, child.value)


class Gauge(_Family[GaugeChild]):
    type_ = GAUGE

    def _new_child(self) -> GaugeChild:
        return GaugeChild(self._lock)

    def set(self, value: float) -> None:
        """Shortcut for a gauge without labels."""
        self.labels().set(value)

    def _render_series(self, pairs: tuple[tuple[str, str], ...], child: GaugeChild) -> str:
        return sample_line(self.name, pairs, child.value)


class Histogram(_Family[HistogramChild]):
    type_ = HISTOGRAM

    def __init__(
        self,
        name: str,
        help_text: str,
        label_names: Sequence[str] = (),
        *,
        buckets: Sequence[float] = DEFAULT_BUCKETS,
        stability: str = "",
        lazy: bool = False,
    ) -> None:
        bounds = tuple(sorted(float(b) for b in buckets if not math.isinf(b)))
        if not bounds or len(set(bounds)) != len(bounds):
            raise ValueError(f"{name}: histogram buckets must be distinct and not empty")
        self.buckets = bounds
        super().__init__(name, help_text, label_names, stability=stability, lazy=lazy)

    def _new_child(self) -> HistogramChild:
        return HistogramChild(self._lock, self.buckets)

    def observe(self, value: float) -> None:
        """Shortcut for a histogram without labels."""
        self.labels().observe(value)

    def _render_series(self, pairs: tuple[tuple[str, str], ...], child: HistogramChild) -> str:
        lines = []
        cumulative = 0
        for bound, count in zip(self.buckets, child.counts, strict=True):
            cumulative += count
            lines.append(sample_line(f"{self.name}_bucket", (*pairs, ("le", format_value(bound))), cumulative))
        lines.append(sample_line(f"{self.name}_bucket", (*pairs, ("le", "+Inf")), child.count))
        lines.append(sample_line(f"{self.name}_sum", pairs, child.sum))
        lines.append(sample_line(f"{self.name}_count", pairs, child.count))
        return "".join(lines)


_F = TypeVar("_F", bound=_Family)


class Registry:
    """The metric families of one endpoint; names are unique, rendering is sorted by name."""

    def __init__(self) -> None:
        self._families: dict[str, _Family] = {}
        self._lock = threading.Lock()

    def register(self, family: _F) -> _F:
        with self._lock:
            if family.name in self._families:
                raise ValueError(f"metric {family.name!r} is already registered")
            self._families[family.name] = family
        return family

    def counter(
        self, name: str, help_text: str, label_names: Sequence[str] = (), *, stability: str = "", lazy: bool = False
    ) -> Counter:
        return self.register(Counter(name, help_text, label_names, stability=stability, lazy=lazy))

    def gauge(
        self, name: str, help_text: str, label_names: Sequence[str] = (), *, stability: str = "", lazy: bool = False
    ) -> Gauge:
        return self.register(Gauge(name, help_text, label_names, stability=stability, lazy=lazy))

    def histogram(
        self,
        name: str,
        help_text: str,
        label_names: Sequence[str] = (),
        *,
        buckets: Sequence[float] = DEFAULT_BUCKETS,
        stability: str = "",
        lazy: bool = False,
    ) -> Histogram:
        return self.register(Histogram(name, help_text, label_names, buckets=buckets, stability=stability, lazy=lazy))

    def get(self, name: str) -> _Family | None:
        return self._families.get(name)

    def exposition(self) -> str:
        """Every family with samples, in the text format 0.0.4 (serve it with `CONTENT_TYPE`)."""
        with self._lock:
            families = sorted(self._families.values(), key=lambda f: f.name)
        return "".join(family.render() for family in families)


# ------------------------------------------------------------------------------------ kubelet metrics

# pkg/kubelet/metrics/metrics.go (v1.37): hand-picked, roughly exponential bounds for pod start-up.
POD_STARTUP_DURATION_BUCKETS: Final[tuple[float, ...]] = (
    0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600,
)  # fmt: skip
RUNTIME_OPERATIONS_DURATION_BUCKETS: Final = exponential_buckets(0.005, 2.5, 14)
# kopflet_pod_start_step_duration_seconds (kopflet's own): the client's default buckets, then up to an hour for the
# image pulls.
POD_START_STEP_BUCKETS: Final[tuple[float, ...]] = (*DEFAULT_BUCKETS, 30, 60, 120, 300, 600, 1800, 3600)
IMAGE_PULL_DURATION_BUCKETS: Final[tuple[float, ...]] = (
    1, 5, 10, 20, 30, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600,
)  # fmt: skip
# The image_size_in_bytes label of kubelet_image_pull_duration_seconds: each label's lower bound (exclusive), bytes.
_MIB, _GIB = 1024 * 1024, 1024 * 1024 * 1024
IMAGE_SIZE_BUCKETS: Final[tuple[tuple[int, str], ...]] = (
    (0, "0-10MB"), (10 * _MIB, "10MB-100MB"), (100 * _MIB, "100MB-500MB"), (500 * _MIB, "500MB-1GB"),
    (1 * _GIB, "1GB-5GB"), (5 * _GIB, "5GB-10GB"), (10 * _GIB, "10GB-20GB"), (20 * _GIB, "20GB-30GB"),
    (30 * _GIB, "30GB-40GB"), (40 * _GIB, "40GB-60GB"), (60 * _GIB, "60GB-100GB"), (100 * _GIB, "GT100GB"),
)  # fmt: skip


def image_size_bucket(size: int) -> str:
    """Upstream GetImageSizeBucket: "N/A" for an unknown (0) size, else the label of the last bucket whose lower
    bound the size is above (10 MiB exactly is still "0-10MB")."""
    if size <= 0:
        return "N/A"
    return next(label for bound, label in reversed(IMAGE_SIZE_BUCKETS) if size > bound)
# pkg/kubelet/certificate/kubelet.go: 1 minute, 1 hour, 4 hours, 1 day, 1 week, 1, 3 and 6 months, 1 and 4 years.
CERTIFICATE_ROTATION_BUCKETS: Final[tuple[float, ...]] = (
    60, 3600, 14400, 86400, 604800, 2592000, 7776000, 15552000, 31104000, 124416000,
)  # fmt: skip


class CertificateManagerLike(Protocol):
    """What the metrics read of a certificate manager (kopflet.certificate.manager)."""

    kind: str
    renew_errors: int
    rotation_ages: list[float]

    def ttl_seconds(self) -> float: ...

# Values of the labels, as upstream sets them.
CONTAINER = "container"  # container_type of kubelet_started_containers_total
INIT_CONTAINER = "init_container"
EPHEMERAL_CONTAINER = "ephemeral_container"
SYNC_POD_TYPES: Final = ("sync", "update", "create", "kill")  # operation_type of pod_worker_duration (+ "terminated")

# CRI method -> upstream operation_type (pkg/kubelet/kuberuntime/instrumented_services.go).
_CRI_OPERATIONS: Final[Mapping[str, str]] = {
    "Version": "version",
    "Status": "status",
    "CreateContainer": "create_container",
    "StartContainer": "start_container",
    "StopContainer": "stop_container",
    "RemoveContainer": "remove_container",
    "ListContainers": "list_containers",
    "ContainerStatus": "container_status",
    "UpdateContainerResources": "update_container",
    "ReopenContainerLog": "reopen_container_log",
    "ExecSync": "exec_sync",
    "Exec": "exec",
    "Attach": "attach",
    "RunPodSandbox": "run_podsandbox",
    "StopPodSandbox": "stop_podsandbox",
    "RemovePodSandbox": "remove_podsandbox",
    "PodSandboxStatus": "podsandbox_status",
    "ListPodSandbox": "list_podsandbox",
    "ContainerStats": "container_stats",
    "ListContainerStats": "list_container_stats",
    "PodSandboxStats": "podsandbox_stats",
    "ListPodSandboxStats": "list_podsandbox_stats",
    "PortForward": "port_forward",
    "UpdatePodSandboxResources": "update_podsandbox_resources",
    "UpdateRuntimeConfig": "update_runtime_config",
    "ListImages": "list_images",
    "ImageStatus": "image_status",
    "PullImage": "pull_image",
    "RemoveImage": "remove_image",
    "ImageFsInfo": "image_fs_info",
    "CheckpointContainer": "checkpoint_container",
    "GetContainerEvents": "get_container_events",
    "ListMetricDescriptors": "list_metric_descriptors",
    "ListPodSandboxMetrics": "list_podsandbox_metrics",
    "RuntimeConfig": "runtime_config",
}


def runtime_operation(method: str) -> str:
    """The upstream operation_type of a CRI call, from its method name ("RunPodSandbox" -> "run_podsandbox").

    Accepts "Service/Method" too; unknown methods become snake_case.
    """
    method = method.rpartition("/")[2]
    known = _CRI_OPERATIONS.get(method)
    if known is not None:
        return known
    return "".join(f"_{c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(method))


class KubeletMetrics:
    """The upstream kubelet metrics kopflet records, in their own registry (served at ``/metrics``).

    Names, help texts, label names, buckets and stability levels are those of pkg/kubelet/metrics
    (v1.37). The I/O code records through the helpers below or through the families directly.
    """

    def __init__(self, node_name: str = "", registry: Registry | None = None) -> None:
        r = self.registry = registry if registry is not None else Registry()
        self.node_name = r.gauge(
            "kubelet_node_name", "The node's name. The count is always 1.", ("node",), stability=ALPHA
        )
        self.pod_start_duration = r.histogram(
            "kubelet_pod_start_duration_seconds",
            "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
            buckets=POD_STARTUP_DURATION_BUCKETS,
            stability=ALPHA,
        )
        self.pod_start_sli_duration = r.histogram(
            "kubelet_pod_start_sli_duration_seconds",
            "Duration in seconds to start a pod, excluding time to pull images and run init containers, measured"
            " from pod creation timestamp to when all its containers are reported as started and observed via watch",
            buckets=POD_STARTUP_DURATION_BUCKETS,
            stability=ALPHA,
            lazy=True,  # upstream: a HistogramVec without labels, absent until the first pod start
        )
        self.pod_start_total_duration = r.histogram(
            "kubelet_pod_start_total_duration_seconds",
            "Duration in seconds to start a pod since creation, including time to pull images and run init "
            "containers, measured from pod creation timestamp to when all its containers are reported as started "
            "and observed via watch",
            buckets=POD_STARTUP_DURATION_BUCKETS,
            stability=ALPHA,
            lazy=True,  # as the SLI's: a HistogramVec without labels
        )
        # kopflet's own (no upstream kubelet has it): each step of a pod start, from the pod's start timeline
        # (kopflet.pods.timeline), observed once the start ends.
        self.pod_start_step_duration = r.histogram(
            "kopflet_pod_start_step_duration_seconds",
            "Duration in seconds of each step of a pod start, from the agent first seeing the pod until it is "
            "Ready: admission, volumes, sandbox, image_pull, container_create, container_start, until_ready. "
            "kopflet's own.",
            ("step",),
            buckets=POD_START_STEP_BUCKETS,
        )
        # kopflet's own: the policy hooks (kopflet.hooks), by the hook's name (module.function) and kind.
        self.policy_hook_duration = r.histogram(
            "kopflet_policy_hook_duration_seconds",
            "Duration in seconds of each policy hook call, until its answer or its time limit. kopflet's own.",
            ("hook", "kind"),
        )
        self.policy_hook_failures = r.counter(
            "kopflet_policy_hook_failures_total",
            "Policy hook calls that failed (the default decision was used, or the pod rejected under failure "
            "policy Fail), by reason: raised, timeout, busy (still running from a call that timed out), invalid "
            "(a return its kind does not take). kopflet's own.",
            ("hook", "kind", "reason"),
        )
        self.policy_hook_observations_dropped = r.counter(
            "kopflet_policy_hook_observations_dropped_total",
            "Decisions the observe hooks did not see because their queue was full. kopflet's own.",
        )
        self.pod_worker_duration = r.histogram(
            "kubelet_pod_worker_duration_seconds",
            "Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync",
            ("operation_type",),
            stability=ALPHA,
        )
        self.pleg_relist_duration = r.histogram(
            "kubelet_pleg_relist_duration_seconds", "Duration in seconds for relisting pods in PLEG.", stability=ALPHA
        )
        self.pleg_relist_interval = r.histogram(
            "kubelet_pleg_relist_interval_seconds", "Interval in seconds between relisting in PLEG.", stability=ALPHA
        )
        # upstream registers these with its EventedPLEG gate; kopflet's runtime events are always on (kopflet.pleg)
        self.evented_pleg_connection_errors = r.counter(
            "kubelet_evented_pleg_connection_error_count",
            "The number of errors encountered during the establishment of streaming connection with the CRI runtime.",
            stability=ALPHA,
        )
        self.evented_pleg_connections = r.counter(
            "kubelet_evented_pleg_connection_success_count",
            "The number of times a streaming client was obtained to receive CRI Events.",
            stability=ALPHA,
        )
        self.evented_pleg_connection_latency = r.histogram(
            "kubelet_evented_pleg_connection_latency_seconds",
            "The latency of streaming connection with the CRI runtime, measured in seconds.",
            stability=ALPHA,
        )
        self.running_pods = r.gauge(
            "kubelet_running_pods", "Number of pods that have a running pod sandbox", stability=ALPHA
        )
        self.running_containers = r.gauge(
            "kubelet_running_containers",
            "Number of containers currently running",
            ("container_state",),
            stability=ALPHA,
        )
        self.runtime_operations = r.counter(
            "kubelet_runtime_operations_total",
            "Cumulative number of runtime operations by operation type.",
            ("operation_type",),
            stability=ALPHA,
        )
        self.runtime_operations_errors = r.counter(
            "kubelet_runtime_operations_errors_total",
            "Cumulative number of runtime operation errors by operation type.",
            ("operation_type",),
            stability=ALPHA,
        )
        self.runtime_operations_duration = r.histogram(
            "kubelet_runtime_operations_duration_seconds",
            "Duration in seconds of runtime operations. Broken down by operation type.",
            ("operation_type",),
            buckets=RUNTIME_OPERATIONS_DURATION_BUCKETS,
            stability=ALPHA,
        )
        self.started_pods = r.counter(
            "kubelet_started_pods_total", "Cumulative number of pods started", stability=ALPHA
        )
        self.started_pods_errors = r.counter(
            "kubelet_started_pods_errors_total", "Cumulative number of errors when starting pods", stability=ALPHA
        )
        self.started_containers = r.counter(
            "kubelet_started_containers_total",
            "Cumulative number of containers started",
            ("container_type",),
            stability=ALPHA,
        )
        self.started_containers_errors = r.counter(
            "kubelet_started_containers_errors_total",
            "Cumulative number of errors when starting containers",
            ("container_type", "code"),
            stability=ALPHA,
        )
        # Graceful node shutdown (registered as GracefulNodeShutdown and its BasedOnPodPriority are on by default;
        # kept in the root dir's graceful_node_shutdown_state across the reboot).
        self.graceful_shutdown_start_time = r.gauge(
            "kubelet_graceful_shutdown_start_time_seconds", "Last graceful shutdown start time since unix epoch in "
            "seconds", stability=ALPHA)
        self.graceful_shutdown_end_time = r.gauge(
            "kubelet_graceful_shutdown_end_time_seconds", "Last graceful shutdown end time since unix epoch in "
            "seconds", stability=ALPHA)
        # Image volumes (upstream ImageVolume* counters, registered as the ImageVolume gate is on: GA at v1.37).
        self.image_volume_requested = r.counter(
            "kubelet_image_volume_requested_total", "Number of requested image volumes.", stability=BETA)
        self.image_volume_mounted_succeeded = r.counter(
            "kubelet_image_volume_mounted_succeed_total", "Number of successful image volume mounts.", stability=BETA)
        self.image_volume_mounted_errors = r.counter(
            "kubelet_image_volume_mounted_errors_total", "Number of failed image volume mounts.", stability=BETA)
        # upstream ImagePullDuration: from the Pulling event to the image pulled, waiting for the serialized puller
        # included, truncated to the millisecond; by image size bucket (`image_size_bucket`).
        self.image_pull_duration = r.histogram(
            "kubelet_image_pull_duration_seconds",
            "Duration in seconds to pull an image.",
            ("image_size_in_bytes",),
            buckets=IMAGE_PULL_DURATION_BUCKETS,
            stability=ALPHA,
        )
        self.image_garbage_collected = r.counter(
            "kubelet_image_garbage_collected_total",
            "Total number of images garbage collected by the kubelet, whether through disk usage or image age.",
            ("reason",),
            stability=ALPHA,
        )
        # The pod-resources API (upstream PodResourcesEndpoint*: CounterVecs by server_api_version, "v1" or
        # "v1alpha1"; the List and GetAllocatableResources error counters never move at v1.37.1).
        api_version = ("server_api_version",)
        self.pod_resources_requests = r.counter(
            "kubelet_pod_resources_endpoint_requests_total",
            "Cumulative number of requests to the PodResource endpoint. Broken down by server api version.",
            api_version, stability=ALPHA)
        self.pod_resources_requests_list = r.counter(
            "kubelet_pod_resources_endpoint_requests_list",
            "Number of requests to the PodResource List endpoint. Broken down by server api version.",
            api_version, stability=ALPHA)
        self.pod_resources_requests_get_allocatable = r.counter(
            "kubelet_pod_resources_endpoint_requests_get_allocatable",
            "Number of requests to the PodResource GetAllocatableResources endpoint. Broken down by server api "
            "version.", api_version, stability=ALPHA)
        self.pod_resources_errors_list = r.counter(
            "kubelet_pod_resources_endpoint_errors_list",
            "Number of requests to the PodResource List endpoint which returned error. Broken down by server api "
            "version.", api_version, stability=ALPHA)
        self.pod_resources_errors_get_allocatable = r.counter(
            "kubelet_pod_resources_endpoint_errors_get_allocatable",
            "Number of requests to the PodResource GetAllocatableResources endpoint which returned error. Broken "
            "down by server api version.", api_version, stability=ALPHA)
        self.pod_resources_requests_get = r.counter(
            "kubelet_pod_resources_endpoint_requests_get",
            "Number of requests to the PodResource Get endpoint. Broken down by server api version.",
            api_version, stability=ALPHA)
        self.pod_resources_errors_get = r.counter(
            "kubelet_pod_resources_endpoint_errors_get",
            "Number of requests to the PodResource Get endpoint which returned error. Broken down by server api "
            "version.", api_version, stability=ALPHA)
        self._container_states: set[str] = set()
        self._refreshers: list[Callable[[], None]] = []
        self._certificate_managers: dict[str, CertificateManagerLike] = {}
        self._pod_certificates: Callable[[], Mapping[tuple[str, str], int]] | None = None
        if node_name:
            self.set_node_name(node_name)

    def exposition(self) -> str:
        for refresh in list(self._refreshers):  # the values upstream reads at scrape time (GaugeFunc)
            refresh()
        return self.registry.exposition()

    def watch_certificate_manager(self, manager: CertificateManagerLike) -> None:
        """The certificate manager's metrics, registered as upstream registers them when it makes the manager:
        for the client certificate (server.go buildKubeletClientConfig, NewKubeletClientCertificateManager) its
        TTL and renewal errors; for the serving certificate (NewKubeletServerCertificateManager) also how long each
        replaced certificate lived. Watching another manager of the same kind (a start tried again) replaces the
        first: the families are registered once."""
        kind = manager.kind
        if kind in self._certificate_managers:
            self._certificate_managers[kind] = manager
            return
        self._certificate_managers[kind] = manager
        r = self.registry
        if kind == "client":
            errors = r.counter("kubelet_certificate_manager_client_expiration_renew_errors",
                               "Counter of certificate renewal errors.", stability=ALPHA)
            ttl = r.gauge("kubelet_certificate_manager_client_ttl_seconds",
                          "Gauge of the TTL (time-to-live) of the Kubelet's client certificate. The value is in "
                          "seconds until certificate expiry (negative if already expired). If client certificate is "
                          "invalid or unused, the value will be +INF.", stability=ALPHA)
            rotations = None
        else:
            errors = r.counter("kubelet_server_expiration_renew_errors", "Counter of certificate renewal errors.",
                               stability=ALPHA)
            rotations = r.histogram("kubelet_certificate_manager_server_rotation_seconds",
                                    "Histogram of the number of seconds the previous certificate lived before being "
                                    "rotated.", buckets=CERTIFICATE_ROTATION_BUCKETS, stability=ALPHA)
            ttl = r.gauge("kubelet_certificate_manager_server_ttl_seconds",
                          "Gauge of the shortest TTL (time-to-live) of the Kubelet's serving certificate. The value "
                          "is in seconds until certificate expiry (negative if already expired). If serving "
                          "certificate is invalid or unused, the value will be +INF.", stability=ALPHA)
        counted, counting = 0, manager

        def refresh() -> None:
            nonlocal counted, counting
            current = self._certificate_managers[kind]
            if current is not counting:
                counted, counting = 0, current
            if current.renew_errors > counted:
                errors.inc(current.renew_errors - counted)
                counted = current.renew_errors
            ttl.set(current.ttl_seconds())
            if rotations is not None:
                ages, current.rotation_ages[:] = list(current.rotation_ages), []
                for age in ages:
                    rotations.observe(age)

        refresh()
        self._refreshers.append(refresh)

    def watch_pod_certificates(self, report: Callable[[], Mapping[tuple[str, str], int]]) -> None:
        """kubelet_podcertificate_states{signer_name,state}: the pod certificate manager's sources by signer and state,
        read at scrape time (upstream PodCertificateCollectorFor, registered with the IssuingManager). Watching
        another manager (a start tried again) replaces the first: the family is registered once."""
        first = self._pod_certificates is None
        self._pod_certificates = report
        if not first:
            return
        family = self.registry.gauge(
            "kubelet_podcertificate_states",
            "Gauge vector reporting the number of pod certificate projected volume sources, faceted by signer_name "
            "and state.", ("signer_name", "state"), stability=ALPHA)

        def refresh() -> None:
            family.clear()
            if self._pod_certificates is not None:
                for (signer, state), count in self._pod_certificates().items():
                    family.labels(signer, state).set(count)

        self._refreshers.append(refresh)

    def set_node_name(self, node_name: str) -> None:
        """kubelet_node_name{node=...} 1 (upstream SetNodeName); a rename drops the old series."""
        self.node_name.clear()
        self.node_name.labels(node_name).set(1)

    def observe_runtime_operation(self, operation: str, seconds: float, error: bool = False) -> None:
        """One CRI call (upstream recordOperation + recordError): count, duration and, if it failed, an error.

        `operation` is the upstream operation_type or a CRI method name ("PullImage" -> "pull_image").
        """
        op = runtime_operation(operation) if operation[:1].isupper() or "/" in operation else operation
        self.runtime_operations.labels(op).inc()
        self.runtime_operations_duration.labels(op).observe(max(0.0, seconds))
        if error:
            self.runtime_operations_errors.labels(op).inc()

    @contextlib.contextmanager
    def timed_runtime_operation(self, operation: str, clock: Callable[[], float] = time.monotonic) -> Iterator[None]:
        """``with metrics.timed_runtime_operation("PullImage"): ...``: an exception counts as an error."""
        started = clock()
        failed = True
        try:
            yield
            failed = False
        finally:
            self.observe_runtime_operation(operation, clock() - started, error=failed)

    def observe_pod_worker(self, operation_type: str, seconds: float) -> None:
        """One pod sync by its type: "create", "update", "sync", "kill" or "terminated"."""
        self.pod_worker_duration.labels(operation_type).observe(max(0.0, seconds))

    def observe_pleg_relist(self, duration: float, interval: float | None = None) -> None:
        """One relist: how long it took and, except for the first, the time since the previous one."""
        self.pleg_relist_duration.observe(max(0.0, duration))
        if interval is not None:
            self.pleg_relist_interval.observe(max(0.0, interval))

    def observe_runtime_event(self, latency: float | None) -> None:
        """One runtime event received: its delay since the runtime made it (upstream EventedPLEGConnLatency)."""
        if latency is not None:
            self.evented_pleg_connection_latency.observe(max(0.0, latency))

    def set_running(self, running_pods: int, containers_by_state: Mapping[str, int]) -> None:
        """The PLEG's counts: pods with a ready sandbox; containers by state ("running", "exited", ...).

        A state seen before but empty now reads 0 (upstream leaves its last count standing).
        """
        self.running_pods.set(running_pods)
        self._container_states |= set(containers_by_state)
        for state in sorted(self._container_states):
            self.running_containers.labels(state).set(containers_by_state.get(state, 0))


_PROBE_TYPES = {"liveness": "Liveness", "readiness": "Readiness", "startup": "Startup"}
_PROBE_RESULTS = ("successful", "failed", "unknown")


class ProbeMetrics:
    """The prober's metrics (upstream pkg/kubelet/prober), in their own registry, served at ``/metrics/probes``."""

    def __init__(self, registry: Registry | None = None) -> None:
        r = self.registry = registry if registry is not None else Registry()
        self.results = r.counter(
            "prober_probe_total",
            "Cumulative number of a liveness, readiness or startup probe for a container by result.",
            ("probe_type", "result", "container", "pod", "namespace", "pod_uid"), stability=BETA)
        self.duration = r.histogram(
            "prober_probe_duration_seconds", "Duration in seconds for a probe response.",
            ("probe_type", "container", "pod", "namespace"), stability=ALPHA)

    def observe(self, kind: str, result: str, seconds: float, *, container: str, pod: str, namespace: str,
                uid: str) -> None:
        """One probe run; as upstream, only successful runs go into the duration histogram."""
        probe_type = _PROBE_TYPES.get(kind, kind)
        self.results.labels(probe_type, result, container, pod, namespace, uid).inc()
        if result == "successful":
            self.duration.labels(probe_type, container, pod, namespace).observe(max(0.0, seconds))

    def forget(self, kind: str, *, container: str, pod: str, namespace: str, uid: str) -> None:
        """The probe worker stopped: drop its series (upstream worker.stop deletes them)."""
        probe_type = _PROBE_TYPES.get(kind, kind)
        for result in _PROBE_RESULTS:
            self.results.remove(probe_type, result, container, pod, namespace, uid)
        self.duration.remove(probe_type, container, pod, namespace)

    def exposition(self) -> str:
        return self.registry.exposition()
