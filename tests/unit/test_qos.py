"""kopflet.api.qos: quantity parsing and rounding, the QoS class (upstream ComputePodQOS), oom_score_adj."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from kopflet.api import qos
from kopflet.api.spec import Pod, pod_from_body

GI = 2**30


def res(cpu: str | None = None, memory: str | None = None, *, limits: bool = True,
        **more: str) -> dict[str, Any]:
    """requests (and equal limits unless limits=False) for the given cpu/memory."""
    values = {k: v for k, v in (("cpu", cpu), ("memory", memory), *more.items()) if v is not None}
    return {"requests": values, "limits": dict(values)} if limits else {"requests": values}


def make_pod(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = (), **spec: Any) -> Pod:
    body: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
        "spec": {"containers": [{"name": f"c{i}", "image": "busybox", "resources": r}
                                for i, r in enumerate(containers)], **spec},
    }
    if init:
        body["spec"]["initContainers"] = [{"name": f"i{i}", "image": "busybox", **c} for i, c in enumerate(init)]
    return pod_from_body(body)


# ------------------------------------------------------------------------------------------------ quantities


@pytest.mark.parametrize(("text", "expected"), [
    ("1", Fraction(1)),
    ("100m", Fraction(1, 10)),
    ("1.5", Fraction(3, 2)),
    (".5", Fraction(1, 2)),
    ("0.5", Fraction(1, 2)),
    ("-1", Fraction(-1)),
    ("250u", Fraction(1, 4000)),
    ("3n", Fraction(3, 10**9)),
    ("2k", Fraction(2000)),
    ("1M", Fraction(10**6)),
    ("1G", Fraction(10**9)),
    ("1T", Fraction(10**12)),
    ("1P", Fraction(10**15)),
    ("1E", Fraction(10**18)),
    ("1Ki", Fraction(1024)),
    ("64Mi", Fraction(64 * 2**20)),
    ("1.5Gi", Fraction(3 * 2**29)),
    ("1Ti", Fraction(2**40)),
    ("1Pi", Fraction(2**50)),
    ("1Ei", Fraction(2**60)),
    ("1e3", Fraction(1000)),
    ("1E3", Fraction(1000)),
    ("5e-3", Fraction(5, 1000)),
    ("12e+2", Fraction(1200)),
    (3, Fraction(3)),
])
def test_parse_quantity(text: str | int, expected: Fraction) -> None:
    assert qos.parse_quantity(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "1Q", "1KiB", "1.2.3", "Mi", "1 Gi", "1e", "1K"])
def test_parse_quantity_rejects(text: str) -> None:
    with pytest.raises(qos.QuantityError):
        qos.parse_quantity(text)


@pytest.mark.parametrize(("text", "milli", "value"), [
    ("1", 1000, 1),
    ("100m", 100, 1),        # Value rounds up
    ("0.5m", 1, 1),          # MilliValue rounds up too
    ("1.0001", 1001, 2),
    ("1Gi", 1000 * GI, GI),
    ("0", 0, 0),
])
def test_rounding_is_up_like_upstream(text: str, milli: int, value: int) -> None:
    assert qos.milli_value(text) == milli
    assert qos.value(text) == value


def test_unset_quantities_are_zero() -> None:
    assert qos.milli_cpu(None) == 0
    assert qos.byte_value(None) == 0
    assert qos.milli_cpu("250m") == 250
    assert qos.byte_value("128Mi") == 128 * 2**20


# ------------------------------------------------------------------------------------------------------ QoS


@pytest.mark.parametrize(("pod", "expected"), [
    (make_pod({}), qos.BEST_EFFORT),
    (make_pod({}, {}), qos.BEST_EFFORT),
    (make_pod(res("100m", "64Mi")), qos.GUARANTEED),
    (make_pod(res("1", "1Gi"), res("500m", "128Mi")), qos.GUARANTEED),
    (make_pod(res("1", "1Gi"), {"limits": {"cpu": "1000m", "memory": "1073741824"},
                                "requests": {"cpu": "1", "memory": "1Gi"}}), qos.GUARANTEED),  # same value, other text
    (make_pod(res("100m", "64Mi", limits=False)), qos.BURSTABLE),
    (make_pod({"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "64Mi"}}),
     qos.BURSTABLE),
    (make_pod(res("100m")), qos.BURSTABLE),                             # cpu only: memory unset
    (make_pod(res("100m", "64Mi"), {}), qos.BURSTABLE),                 # Guaranteed + BestEffort
    (make_pod({}, res(memory="64Mi", limits=False)), qos.BURSTABLE),
    (make_pod(res(**{"ephemeral-storage": "1Gi"})), qos.BEST_EFFORT),   # neither cpu nor memory
    (make_pod(res("100m", "64Mi"), init=({"resources": res("100m", "64Mi", limits=False)},)), qos.BURSTABLE),
    (make_pod(res("100m", "64Mi"), init=({"resources": res("1", "1Gi")},)), qos.GUARANTEED),
    (make_pod({}, init=({"resources": res("1", "1Gi")},)), qos.BURSTABLE),
    # Pod-level resources decide when present.
    (make_pod({}, resources={"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}),
     qos.GUARANTEED),
    (make_pod(res("1", "1Gi"), resources={"requests": {"cpu": "1"}}), qos.BURSTABLE),
], ids=lambda v: v if isinstance(v, str) else "")
def test_qos_class(pod: Pod, expected: str) -> None:
    assert qos.qos_class(pod) == expected


# ------------------------------------------------------------------------------------------- oom_score_adj

CAPACITY = 4 * GI


@pytest.mark.parametrize(("pod", "expected"), [
    (make_pod(res("1", "1Gi")), -997),                                          # Guaranteed
    (make_pod({}), 1000),                                                       # BestEffort
    (make_pod(res("100m", "1Gi", limits=False)), 750),                          # 1000 - 1000*1/4
    (make_pod(res("100m", "1", limits=False)), 999),                            # rounds to 1000: below BestEffort
    (make_pod(res("100m", limits=False)), 999),                                 # no memory request
    (make_pod(res("100m", "4Gi", limits=False)), 3),                            # all the memory: above Guaranteed
    (make_pod(res("100m", "8Gi", limits=False)), 3),
    (make_pod(res("100m", "1500Mi", limits=False)), 634),                       # 1000 - 366 (integer division)
    (make_pod({}, priorityClassName="system-node-critical", priority=2000001000), -997),
    (make_pod({}, priorityClassName="system-node-critical", priority=0), 1000),  # not critical by priority
], ids=str)
def test_oom_score_adj(pod: Pod, expected: int) -> None:
    assert qos.oom_score_adj(pod, pod.spec.containers[0], CAPACITY) == expected


def test_a_sidecar_is_not_killed_before_the_regular_containers() -> None:
    pod = make_pod(res("100m", "2Gi", limits=False), res("100m", "1Gi", limits=False),
                   init=({"restartPolicy": "Always", "resources": res("100m", limits=False)},))
    sidecar = pod.spec.init_containers[0]
    assert qos.oom_score_adj(pod, sidecar, CAPACITY) == 750  # capped at the smallest regular request's value
    assert qos.oom_score_adj(pod, pod.spec.containers[0], CAPACITY) == 500


def test_static_pods_are_critical() -> None:
    pod = pod_from_body({"metadata": {"name": "p", "namespace": "ns", "uid": "u",
                                      "annotations": {"kubernetes.io/config.source": "file"}},
                         "spec": {"priorityClassName": "system-node-critical",
                                  "containers": [{"name": "c", "image": "busybox"}]}})
    assert qos.is_critical_pod(pod)
    assert qos.oom_score_adj(pod, pod.spec.containers[0], CAPACITY) == -997


def test_memory_capacity_must_be_known() -> None:
    pod = make_pod({})
    with pytest.raises(ValueError, match="memory_capacity"):
        qos.oom_score_adj(pod, pod.spec.containers[0], 0)
