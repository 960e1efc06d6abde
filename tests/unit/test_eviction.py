"""kopflet.eviction: threshold parsing, the per-round decisions, ranking, messages, admission, host signals."""

from __future__ import annotations

import dataclasses
import datetime
import os
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from kopflet.api.spec import Pod, pod_from_body
from kopflet.eviction import helpers as h
from kopflet.eviction import signals
from kopflet.eviction import thresholds as th
from kopflet.eviction.helpers import ContainerUsage, EvictionCandidate, EvictionState, FsUsage, Observation, PodUsage
from kopflet.eviction.thresholds import Threshold, ThresholdValue

Mi, Gi = 1024**2, 1024**3


def _hard(signal: str, quantity: str, min_reclaim: str | None = None) -> Threshold:
    reclaim = None if min_reclaim is None else ThresholdValue(quantity=th.qos.parse_quantity(min_reclaim),
                                                              fmt=th.quantity_format(min_reclaim))
    return Threshold(signal=signal, value=ThresholdValue(quantity=th.qos.parse_quantity(quantity),
                                                         fmt=th.quantity_format(quantity)), min_reclaim=reclaim)


def _percent(signal: str, percent: float, grace: float = 0.0) -> Threshold:
    return Threshold(signal=signal, value=ThresholdValue(percentage=th.float32(th.float32(percent) / 100)),
                     grace_period=grace)


# ------------------------------------------------------------------------------------------------ thresholds


def test_unset_eviction_hard_is_the_linux_defaults() -> None:
    result = th.parse_threshold_config([], th.effective_eviction_hard(None))
    assert [(t.signal, str(t.value), t.is_hard) for t in result] == [
        ("memory.available", "100Mi", True), ("nodefs.available", "10%", True), ("nodefs.inodesFree", "5%", True),
        ("imagefs.available", "15%", True), ("imagefs.inodesFree", "5%", True)]


@pytest.mark.parametrize(("configured", "merge", "expected"), [
    pytest.param(None, False, dict(th.DEFAULT_EVICTION_HARD), id="unset: defaults"),
    pytest.param({}, False, {}, id="explicit empty: none"),
    pytest.param({"memory.available": "1Gi"}, False, {"memory.available": "1Gi"}, id="set: replaces"),
    pytest.param({"memory.available": "1Gi"}, True, {**th.DEFAULT_EVICTION_HARD, "memory.available": "1Gi"},
                 id="mergeDefaultEvictionSettings fills the rest"),
])
def test_effective_eviction_hard(configured: dict[str, str] | None, merge: bool, expected: dict[str, str]) -> None:
    assert th.effective_eviction_hard(configured, merge) == expected


@pytest.mark.parametrize(("hard", "soft", "grace", "reclaim", "error"), [
    ({"mem.available": "1Gi"}, {}, {}, {}, "unsupported eviction signal mem.available"),
    ({}, {"memory.available": "1Gi"}, {}, {},
     "grace period must be specified for the soft eviction threshold memory.available"),
    ({}, {"memory.available": "1Gi"}, {"memory.available": "-1m"}, {},
     "invalid eviction grace period specified: -1m, must be a positive value"),
    ({}, {"memory.available": "1Gi"}, {"memory.available": "90"}, {}, 'time: missing unit in duration "90"'),
    ({}, {}, {"memory.available": "1d"}, {}, 'time: unknown unit "d" in duration "1d"'),
    ({}, {}, {"foo": "1m"}, {}, "unsupported eviction signal foo"),
    ({"memory.available": "-1Gi"}, {}, {}, {}, "eviction threshold memory.available must be positive: -1Gi"),
    ({"memory.available": "0"}, {}, {}, {}, "eviction threshold memory.available must be positive: 0"),
    ({"nodefs.available": "101%"}, {}, {}, {}, "eviction percentage threshold nodefs.available must be <= 100%: 101%"),
    ({"nodefs.available": "-1%"}, {}, {}, {}, "eviction percentage threshold nodefs.available must be >= 0%: -1%"),
    ({"nodefs.available": "ten%"}, {}, {}, {}, 'strconv.ParseFloat: parsing "ten": invalid syntax'),
    ({"memory.available": "1Gb"}, {}, {}, {}, "unable to parse quantity's suffix"),
    ({"memory.available": "lots"}, {}, {}, {},
     "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
    ({}, {}, {}, {"memory.available": "-1Mi"}, "negative eviction minimum reclaim specified for memory.available"),
    ({}, {}, {}, {"nodefs.available": "0%"},
     "eviction percentage minimum reclaim nodefs.available must be positive: 0%"),
])
def test_parse_threshold_config_errors_are_upstreams(hard: dict[str, str], soft: dict[str, str], grace: dict[str, str],
                                                     reclaim: dict[str, str], error: str) -> None:
    with pytest.raises(th.ThresholdError) as caught:
        th.parse_threshold_config([], hard, soft, grace, reclaim)
    assert str(caught.value) == error


def test_parse_threshold_config_soft_grace_min_reclaim_and_allocatable() -> None:
    result = th.parse_threshold_config(
        ["pods"], {"memory.available": "100Mi", "nodefs.available": "0%", "imagefs.available": "100%"},
        {"memory.available": "300Mi"}, {"memory.available": "1m30s"}, {"memory.available": "50Mi"})
    assert [(t.signal, str(t.value), t.grace_period, str(t.min_reclaim)) for t in result] == [
        ("memory.available", "100Mi", 0.0, "50Mi"),
        ("memory.available", "300Mi", 90.0, "50Mi"),
        ("allocatableMemory.available", "100Mi", 0.0, "50Mi"),  # only the hard one is copied
    ]


@pytest.mark.parametrize(("text", "seconds"), [
    ("0", 0.0), ("1m30s", 90.0), ("1.5h", 5400.0), ("500ms", 0.5), ("2h45m", 9900.0), ("+10s", 10.0), ("1µs", 1e-6),
])
def test_go_durations(text: str, seconds: float) -> None:
    assert th.parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(("value", "fmt", "expected"), [
    (0, th.BINARY_SI, "0"), (100 * Mi, th.BINARY_SI, "100Mi"), (1024 * Mi, th.BINARY_SI, "1Gi"),
    (1536, th.BINARY_SI, "1536"), (1536 * Mi, th.BINARY_SI, "1536Mi"),
    (1000, th.BINARY_SI, "1k"),  # within (-1024, 1024) BinarySI falls back to DecimalSI
    (-100, th.BINARY_SI, "-100"), (Fraction(1, 2), th.BINARY_SI, "500m"),
    (1000, th.DECIMAL_SI, "1k"), (1500, th.DECIMAL_SI, "1500"), (2_000_000, th.DECIMAL_SI, "2M"),
    (1200, th.DECIMAL_SI, "1200"), (Fraction(1, 10), th.DECIMAL_SI, "100m"), (10**21, th.DECIMAL_SI, "1e21"),
    (1000, th.DECIMAL_EXPONENT, "1e3"),
])
def test_format_quantity_is_gos_canonical_string(value: int | Fraction, fmt: str, expected: str) -> None:
    assert th.format_quantity(value, fmt) == expected


def test_percentages_are_float32_as_upstream() -> None:
    ten = th.parse_threshold_statement("nodefs.available", "10%")
    assert ten is not None
    # float32(0.1) is a little above 0.1: 10% of 100Gi is 160 bytes more than 10Gi.
    assert ten.value.amount(100 * Gi) == (10 * Gi + 160, th.BINARY_SI)


@pytest.mark.parametrize(("image_fs", "split", "disk_from", "inodes_from"), [
    (False, False, "10%", "5%"),      # one filesystem: nodefs
    (True, True, "10%", "5%"),        # containers split from images: nodefs
    (True, False, "15%", "7%"),       # separate image filesystem holding the writable layers: imagefs
])
def test_containerfs_thresholds_copy_nodefs_or_imagefs(image_fs: bool, split: bool, disk_from: str,
                                                       inodes_from: str) -> None:
    configured = th.parse_threshold_config([], {"nodefs.available": "10%", "nodefs.inodesFree": "5%",
                                                "imagefs.available": "15%", "imagefs.inodesFree": "7%",
                                                "containerfs.available": "1%"})
    result, warnings = th.update_container_fs_thresholds(configured, image_fs, split)
    assert warnings == ["found containerfs.available for hard eviction. ignoring"]
    hard = {t.signal: str(t.value) for t in result if t.is_hard and t.operator}
    assert hard["containerfs.available"] == disk_from
    assert hard["containerfs.inodesFree"] == inodes_from
    assert sum(t.signal == "containerfs.available" for t in result) == 2  # the overridden hard one, a soft copy
    soft = [t for t in result if t.signal.startswith("containerfs.") and not t.operator]
    assert len(soft) == 2  # no soft nodefs/imagefs thresholds: empty copies, which never fire
    assert h.thresholds_met(soft, {t.signal: Observation(0, 100) for t in soft}) == []


# ----------------------------------------------------------------------------------------------- thresholds met


@pytest.mark.parametrize(("available", "enforce", "met"), [
    (50 * Mi, False, True),
    (100 * Mi, False, False),        # LessThan: at the threshold is not below it
    (120 * Mi, False, False),
    (120 * Mi, True, True),          # below threshold + min reclaim (150Mi)
    (150 * Mi, True, False),
])
def test_thresholds_met_with_min_reclaim(available: int, enforce: bool, met: bool) -> None:
    threshold = _hard("memory.available", "100Mi", min_reclaim="50Mi")
    observations = {"memory.available": Observation(available=available, capacity=8 * Gi)}
    assert h.thresholds_met([threshold], observations, enforce) == ([threshold] if met else [])


def test_no_observation_meets_nothing() -> None:
    assert h.thresholds_met([_hard("memory.available", "1Gi")], {}) == []


def test_percentage_thresholds_use_capacity() -> None:
    threshold = _percent("nodefs.available", 10)
    assert h.thresholds_met([threshold], {"nodefs.available": Observation(9 * Gi, 100 * Gi)}) == [threshold]
    assert h.thresholds_met([threshold], {"nodefs.available": Observation(11 * Gi, 100 * Gi)}) == []


def _round(thresholds: list[Threshold], available: int, state: EvictionState, now: float,
           stamp: float | None = None) -> h.RoundResult:
    observations = {"memory.available": Observation(available, 8 * Gi, now if stamp is None else stamp)}
    return h.evaluate(thresholds, observations, state, now, 300.0)


def test_hard_threshold_acts_at_once_and_pressure_lingers_for_the_transition_period() -> None:
    hard = _hard("memory.available", "100Mi")
    first = _round([hard], 50 * Mi, EvictionState(), 1000.0)
    assert first.act_on == (hard,)
    assert first.state.node_conditions == ("MemoryPressure",)
    relieved = _round([hard], 1 * Gi, first.state, 1010.0)
    assert relieved.act_on == ()
    assert relieved.state.node_conditions == ("MemoryPressure",)  # within 5m of the last sighting
    later = _round([hard], 1 * Gi, relieved.state, 1300.0)
    assert later.state.node_conditions == ()


def test_soft_threshold_waits_for_its_grace_period_and_restarts_when_relieved() -> None:
    soft = dataclasses_replace(_hard("memory.available", "1Gi"), grace_period=60.0)
    r1 = _round([soft], 512 * Mi, EvictionState(), 0.0)
    assert (r1.act_on, r1.state.node_conditions) == ((), ("MemoryPressure",))  # condition at once, no eviction
    r2 = _round([soft], 512 * Mi, r1.state, 59.0)
    assert r2.act_on == ()
    r3 = _round([soft], 512 * Mi, r2.state, 60.0)
    assert r3.act_on == (soft,)
    relieved = _round([soft], 2 * Gi, r3.state, 70.0)
    again = _round([soft], 512 * Mi, relieved.state, 80.0)
    assert again.act_on == ()  # the grace period starts over
    assert again.state.thresholds_first_observed_at == {soft: 80.0}


def test_a_met_threshold_holds_until_its_min_reclaim_is_satisfied() -> None:
    hard = _hard("memory.available", "100Mi", min_reclaim="500Mi")
    r1 = _round([hard], 50 * Mi, EvictionState(), 0.0)
    r2 = _round([hard], 300 * Mi, r1.state, 10.0)  # above 100Mi, below 600Mi
    assert r2.act_on == (hard,)
    r3 = _round([hard], 700 * Mi, r2.state, 20.0)
    assert r3.act_on == ()
    assert r3.state.thresholds_met == ()


def test_stale_observations_do_not_drive_a_second_eviction() -> None:
    hard = _hard("memory.available", "100Mi")
    r1 = _round([hard], 50 * Mi, EvictionState(), 10.0, stamp=5.0)
    assert r1.act_on == (hard,)
    r2 = _round([hard], 50 * Mi, r1.state, 20.0, stamp=5.0)  # the same reading again
    assert r2.act_on == ()
    assert r2.state.node_conditions == ("MemoryPressure",)
    r3 = _round([hard], 50 * Mi, r2.state, 30.0, stamp=25.0)
    assert r3.act_on == (hard,)


def test_conditions_come_out_in_a_fixed_order() -> None:
    seen = {"PIDPressure": 10.0, "MemoryPressure": 10.0, "DiskPressure": 1.0}
    assert h.node_conditions_observed_since(seen, 300.0, 20.0) == ["MemoryPressure", "DiskPressure", "PIDPressure"]
    assert h.node_conditions_observed_since(seen, 15.0, 20.0) == ["MemoryPressure", "PIDPressure"]


def test_memory_is_reclaimed_first() -> None:
    disk, pid, mem = _percent("nodefs.available", 10), _hard("pid.available", "100"), _hard("memory.available", "1Gi")
    ordered = h.sort_by_eviction_priority([disk, pid, mem])
    assert ordered[0] == mem
    assert h.reclaimable_threshold(ordered) == (mem, "memory")


@pytest.mark.parametrize(("image_fs", "split", "signal", "steps"), [
    (False, False, "nodefs.available", ("containers", "images")),
    (True, False, "nodefs.available", ()),
    (True, False, "imagefs.inodesFree", ("containers", "images")),
    (True, True, "imagefs.available", ("images",)),
    (True, True, "containerfs.available", ("containers",)),
])
def test_node_level_reclaim_steps(image_fs: bool, split: bool, signal: str, steps: tuple[str, ...]) -> None:
    assert h.signal_to_node_reclaim(image_fs, split)[signal] == steps


# ------------------------------------------------------------------------------------------------- ranking


def _pod(name: str, *, priority: int = 0, memory_request: int = 0, memory_usage: int | None = None,
         processes: int = 0, disk: int = 0, disk_request: int = 0, measured: bool = True) -> EvictionCandidate:
    usage = PodUsage(memory_working_set=memory_usage, process_count=processes,
                     containers=(ContainerUsage(name="c", rootfs=FsUsage(disk, disk // 1000), logs=FsUsage(0, 0)),))
    return EvictionCandidate(uid=name, name=name, priority=priority,
                             requests={"memory": Fraction(memory_request), "ephemeral-storage": Fraction(disk_request)},
                             usage=usage if measured else None)


def _names(pods: list[EvictionCandidate]) -> list[str]:
    return [p.name for p in pods]


def test_memory_ranking_over_requests_then_priority_then_usage_above_requests() -> None:
    pods = [
        _pod("guaranteed-within", memory_request=1 * Gi, memory_usage=512 * Mi),
        _pod("high-prio-over", priority=1000, memory_request=100 * Mi, memory_usage=900 * Mi),
        _pod("low-prio-over-a-little", memory_request=100 * Mi, memory_usage=200 * Mi),
        _pod("low-prio-over-a-lot", memory_request=100 * Mi, memory_usage=800 * Mi),
        _pod("best-effort-within-is-impossible", memory_usage=0),
        _pod("unmeasured", priority=5000, measured=False),
    ]
    assert _names(h.rank_memory_pressure(pods)) == [
        "unmeasured", "low-prio-over-a-lot", "low-prio-over-a-little", "high-prio-over",
        "best-effort-within-is-impossible", "guaranteed-within"]


def test_pid_ranking_priority_then_processes() -> None:
    pods = [_pod("a", priority=10, processes=500), _pod("b", processes=5), _pod("c", processes=50)]
    assert _names(h.rank_pid_pressure(pods)) == ["c", "b", "a"]


def test_disk_ranking_over_requests_then_priority_then_usage_above_requests() -> None:
    pods = [_pod("small", disk=1 * Gi, disk_request=2 * Gi), _pod("big", disk=5 * Gi, disk_request=1 * Gi),
            _pod("prio", priority=100, disk=9 * Gi)]
    rank = h.signal_to_rank(False, False)["nodefs.available"]
    assert _names(rank(pods)) == ["big", "prio", "small"]


def test_disk_usage_counts_what_the_layout_says() -> None:
    usage = PodUsage(containers=(ContainerUsage("c", rootfs=FsUsage(100, 1), logs=FsUsage(10, 2)),),
                     volumes={"scratch": FsUsage(1000, 3), "secret": FsUsage(5000, 4)})
    pod = EvictionCandidate(uid="u", name="p", local_volumes=("scratch",), usage=usage)
    assert h.pod_disk_usage(pod, (h.FS_LOGS, h.FS_LOCAL_VOLUME_SOURCE)) == {"ephemeral-storage": 1010, "inodes": 5}
    assert h.pod_disk_usage(pod, (h.FS_ROOT, h.FS_IMAGES)) == {"ephemeral-storage": 100, "inodes": 1}


def _body(**spec: Any) -> Pod:
    containers = spec.pop("containers", [{"name": "app", "image": "busybox"}])
    metadata = {"name": "web", "namespace": "default", "uid": "uid-1", **spec.pop("metadata", {})}
    return pod_from_body({"metadata": metadata, "spec": {"containers": containers, **spec}})


def test_candidate_from_a_pod() -> None:
    pod = _body(containers=[{"name": "app", "image": "busybox",
                             "resources": {"requests": {"memory": "100Mi", "ephemeral-storage": "1Gi"}}}],
                volumes=[{"name": "scratch", "emptyDir": {}}, {"name": "shm", "emptyDir": {"medium": "Memory"}},
                         {"name": "host", "hostPath": {"path": "/x"}}, {"name": "token", "secret": {}}],
                overhead={"memory": "10Mi"}, priority=7, terminationGracePeriodSeconds=45)
    cand = h.candidate(pod, None, generation=3)
    assert cand.requests == {"memory": 110 * Mi, "ephemeral-storage": Gi}
    assert cand.local_volumes == ("scratch", "host")
    assert (cand.priority, cand.qos_class, cand.critical, cand.termination_grace_period_seconds) == (
        7, "Burstable", False, 45)
    assert cand.container_requests == {"app": {"memory": "100Mi", "ephemeral-storage": "1Gi"}}


def test_overhead_is_not_added_to_a_zero_request() -> None:
    assert h.candidate(_body(overhead={"memory": "10Mi"}), None).requests["memory"] == 0


# ------------------------------------------------------------------------------------------------- messages


def test_eviction_message_for_memory_names_the_containers_over_their_requests() -> None:
    pod = EvictionCandidate(
        uid="u", name="web",
        container_requests={"over": {"memory": "100Mi"}, "within": {"memory": "1Gi"}, "none": {}},
        usage=PodUsage(memory_working_set=2 * Gi, containers=(
            ContainerUsage("over", memory_working_set=300 * Mi), ContainerUsage("within", memory_working_set=Mi),
            ContainerUsage("none", memory_working_set=1536), ContainerUsage("debugger", memory_working_set=Gi))))
    thresholds = [_hard("memory.available", "2Gi")]
    observations = {"memory.available": Observation(1500 * Mi, 8 * Gi)}
    message, annotations = h.eviction_message("memory", pod, thresholds, observations)
    assert message == ("The node was low on resource: memory. Threshold quantity: 2Gi, available: 1500Mi. "
                       "Container over was using 300Mi, request is 100Mi, has larger consumption of memory. "
                       "Container none was using 1536, request is 0, has larger consumption of memory. ")
    assert annotations == {"offending_containers": "over,none", "offending_containers_usage": "300Mi,1536",
                           "starved_resource": "memory"}


def test_eviction_message_for_disk_and_pids() -> None:
    pod = EvictionCandidate(uid="u", name="web", container_requests={"above-requests": {"ephemeral-storage": "100Mi"}},
                            usage=PodUsage(containers=(ContainerUsage(
                                "above-requests", rootfs=FsUsage(600 * Mi), logs=FsUsage(100 * Mi)),)))
    message, _ = h.eviction_message("ephemeral-storage", pod, [_hard("nodefs.available", "2Gi")],
                                    {"nodefs.available": Observation(1536 * Mi, 100 * Gi)})
    assert message == ("The node was low on resource: ephemeral-storage. Threshold quantity: 2Gi, available: 1536Mi. "
                       "Container above-requests was using 700Mi, request is 100Mi, has larger consumption of "
                       "ephemeral-storage. ")
    message, annotations = h.eviction_message("pids", dataclasses_replace(pod, usage=None),
                                              [_hard("pid.available", "1200")],
                                              {"pid.available": Observation(500, 4096)})
    assert message == "The node was low on resource: pids. Threshold quantity: 1200, available: 500. "
    assert annotations == {}


def test_eviction_message_with_pod_level_requests() -> None:
    pod = EvictionCandidate(uid="u", name="web", pod_level_requests={"memory": "1Gi"},
                            usage=PodUsage(memory_working_set=512 * Mi))
    message, annotations = h.eviction_message("memory", pod, [], {})
    assert message == ("The node was low on resource: memory. "
                       "Pod web was using 512Mi, request is 1Gi, has larger consumption of memory. ")
    assert annotations["offending_pod"] == "web"
    assert annotations["offending_pod_usage"] == "512Mi"


def test_percentage_threshold_quantity_in_the_message() -> None:
    info = h.threshold_met_info("inodes", [_percent("nodefs.inodesFree", 5)],
                                {"nodefs.inodesFree": Observation(1000, 1_000_000)})
    assert info == ("50000", "1k")  # GetThresholdQuantity is BinarySI, inode counts DecimalSI


def test_evicted_status() -> None:
    now = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    status = h.evicted_status("The node was low on resource: memory. ", generation=2, now=now)
    assert status == {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory. ",
                      "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
                                      "message": "The node was low on resource: memory. ", "observedGeneration": 2,
                                      "lastTransitionTime": "2026-01-02T03:04:05Z"}]}
    assert h.pod_is_evicted(status)
    kept = h.evicted_status("m", now=now, previous_conditions=[
        {"type": "DisruptionTarget", "status": "True", "lastTransitionTime": "2025-01-01T00:00:00Z"}])
    assert kept["conditions"][0]["lastTransitionTime"] == "2025-01-01T00:00:00Z"


@pytest.mark.parametrize(("grace", "pod_grace", "maximum", "expected"), [
    (0.0, 30, 60, 1),         # hard: immediateEvictionGracePeriodSeconds
    (90.0, 30, 60, 30),       # soft: the pod's when lower
    (90.0, 120, 60, 60),      # soft: capped by evictionMaxPodGracePeriod
    (90.0, None, 60, 60),
    (90.0, 30, 0, 0),         # the default maximum (0)
])
def test_eviction_grace_period(grace: float, pod_grace: int | None, maximum: int, expected: int) -> None:
    threshold = dataclasses_replace(_hard("memory.available", "1Gi"), grace_period=grace)
    assert h.eviction_grace_period(threshold, pod_grace, maximum) == expected


# ------------------------------------------------------------------------------------------------ admission

_BEST_EFFORT = {}
_BURSTABLE = {"containers": [{"name": "app", "image": "busybox", "resources": {"requests": {"memory": "1Mi"}}}]}
_TOLERATES = {"tolerations": [{"key": "node.kubernetes.io/memory-pressure", "operator": "Exists",
                               "effect": "NoSchedule"}]}
_TOLERATES_DISK = {"tolerations": [{"key": "node.kubernetes.io/disk-pressure", "operator": "Exists"}]}
_CRITICAL = {"priority": 2_000_000_000}


@pytest.mark.parametrize(("conditions", "pod", "refused"), [
    ([], _BEST_EFFORT, None),
    (["MemoryPressure"], _BURSTABLE, None),
    (["MemoryPressure"], _BEST_EFFORT, "[MemoryPressure]"),
    (["MemoryPressure"], _TOLERATES, None),
    (["MemoryPressure"], _TOLERATES_DISK, "[MemoryPressure]"),
    (["MemoryPressure"], _CRITICAL, None),
    (["DiskPressure"], _BURSTABLE, "[DiskPressure]"),
    (["MemoryPressure", "DiskPressure"], _BURSTABLE, "[MemoryPressure DiskPressure]"),
    (["PIDPressure"], _TOLERATES, "[PIDPressure]"),
    (["DiskPressure", "PIDPressure"], _CRITICAL, None),
])
def test_admission_under_pressure(conditions: list[str], pod: dict[str, Any], refused: str | None) -> None:
    rejection = h.admit(_body(**pod), conditions)
    if refused is None:
        assert rejection is None
    else:
        assert rejection is not None
        assert rejection.reason == "Evicted"
        assert rejection.message == f"Pod was rejected: The node had condition: {refused}. "
        assert rejection.event_message == f"The node had condition: {refused}. "


def test_static_pods_are_critical() -> None:
    static = _body(metadata={"annotations": {"kubernetes.io/config.source": "file"}})
    assert h.admit(static, ["DiskPressure"]) is None


# -------------------------------------------------------------------------------------------------- signals


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_memory_on_cgroup_v1_layout(tmp_path: Path) -> None:
    proc = _write(tmp_path / "proc", {"meminfo": "MemTotal:        8388608 kB\nMemFree: 1 kB\n"})
    cgroup = _write(tmp_path / "cg", {"memory/memory.usage_in_bytes": f"{3 * Gi}\n",
                                      "memory/memory.stat": f"cache 1\ntotal_inactive_file {Gi}\n"})
    assert signals.read_memory(proc, cgroup, now=7.0) == Observation(available=6 * Gi, capacity=8 * Gi, time=7.0)


@pytest.mark.parametrize(("files", "working_set"), [
    ({"memory.stat": f"anon {Gi}\nfile {2 * Gi}\ninactive_file {Gi}\n"}, 2 * Gi),   # the root: no memory.current
    ({"memory.current": f"{4 * Gi}\n", "memory.stat": f"anon 1\ninactive_file {Gi}\n"}, 3 * Gi),
    ({"memory.current": "100\n", "memory.stat": "inactive_file 500\n"}, 0),
])
def test_memory_on_cgroup_v2_layout(tmp_path: Path, files: dict[str, str], working_set: int) -> None:
    proc = _write(tmp_path / "proc", {"meminfo": "MemTotal:        8388608 kB\n"})
    cgroup = _write(tmp_path / "cg", {"cgroup.controllers": "memory pids\n", **files})
    observed = signals.read_memory(proc, cgroup, now=1.0)
    assert observed == Observation(available=8 * Gi - working_set, capacity=8 * Gi, time=1.0)


def test_allocatable_memory_from_the_pods_cgroup(tmp_path: Path) -> None:
    cgroup = _write(tmp_path, {"cgroup.controllers": "", "kubepods/memory.current": f"{Gi}\n",
                               "kubepods/memory.stat": "inactive_file 0\n"})
    observed = signals.read_allocatable_memory(Path("kubepods"), 4 * Gi, cgroup_root=cgroup, now=1.0)
    assert observed == Observation(available=3 * Gi, capacity=4 * Gi, time=1.0)


def test_pids_from_loadavg_and_kernel_limits(tmp_path: Path) -> None:
    proc = _write(tmp_path, {"loadavg": "0.10 0.20 0.30 2/3518 12345\n", "sys/kernel/pid_max": "4194304\n",
                             "sys/kernel/threads-max": "63000\n"})
    assert signals.read_pids(proc, now=1.0) == Observation(available=63000 - 3518, capacity=63000, time=1.0)


def test_fs_signals_are_statvfs(tmp_path: Path) -> None:
    st = os.statvfs(tmp_path)
    observed = signals.read_fs(str(tmp_path), now=1.0)
    assert observed is not None
    space, inodes = observed
    assert space.capacity == st.f_blocks * st.f_frsize
    assert inodes.capacity == st.f_files
    assert signals.read_fs(str(tmp_path / "missing")) is None


def test_observe_reads_the_real_host(tmp_path: Path) -> None:
    observed = signals.observe(str(tmp_path), str(tmp_path))
    assert {"memory.available", "nodefs.available", "nodefs.inodesFree", "imagefs.available",
            "containerfs.available", "pid.available"} <= set(observed)
    memory = observed["memory.available"]
    assert 0 < memory.available <= memory.capacity
    assert 0 < observed["pid.available"].available < observed["pid.available"].capacity
    assert observed["containerfs.available"] == observed["imagefs.available"]
    assert not signals.has_dedicated_image_fs(str(tmp_path), str(tmp_path))


def dataclasses_replace(obj: Any, **changes: Any) -> Any:
    return dataclasses.replace(obj, **changes)


# -------------------------------------------------------------------------------------------------- manager


class _Node:
    """Fakes for the manager's collaborators: a settable reading, recorded kills, GC and events."""

    def __init__(self, pods: list[EvictionCandidate], available: int, *, gc_frees: int = 0) -> None:
        self.pods = pods
        self.available = available
        self.stamp = 0.0
        self.gc_frees = gc_frees
        self.killed: list[tuple[str, dict[str, object], int]] = []
        self.gc_calls: list[str] = []
        self.events: list[tuple[str | None, str, str]] = []

    async def observe(self) -> dict[str, Observation]:
        self.stamp += 1
        return {"memory.available": Observation(self.available, 8 * Gi, self.stamp),
                "nodefs.available": Observation(self.available, 100 * Gi, self.stamp)}

    async def active_pods(self) -> list[EvictionCandidate]:
        return list(self.pods)

    async def evict(self, uid: str, status: dict[str, object], grace_period: int) -> None:
        self.killed.append((uid, status, grace_period))

    async def container_gc(self) -> None:
        self.gc_calls.append("containers")

    async def image_gc(self) -> None:
        self.gc_calls.append("images")
        self.available += self.gc_frees

    def record(self, uid: str | None, reason: str, message: str, annotations: Any) -> None:
        self.events.append((uid, reason, message))


def _manager(node: _Node, thresholds: list[Threshold], now: list[float]) -> Any:
    from kopflet.eviction.manager import EvictionManager
    config = th.EvictionConfig(thresholds=tuple(thresholds), max_pod_grace_period=20)
    return EvictionManager(config, observe=node.observe, active_pods=node.active_pods, evict=node.evict,
                           container_gc=node.container_gc, image_gc=node.image_gc, record_event=node.record,
                           clock=lambda: now[0],
                           wall_clock=lambda: datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC))


async def test_manager_evicts_one_pod_per_round_and_reports_pressure() -> None:
    critical = dataclasses.replace(_pod("critical", memory_usage=4 * Gi), critical=True)
    node = _Node([_pod("small", memory_usage=Mi), critical, _pod("hog", memory_usage=2 * Gi)], 50 * Mi)
    now = [100.0]
    manager = _manager(node, [_hard("memory.available", "100Mi")], now)
    assert manager.conditions() == {"MemoryPressure": False, "DiskPressure": False, "PIDPressure": False}
    evicted = await manager.synchronize()
    assert [p.name for p in evicted] == ["hog"]  # the critical pod ranks first but is skipped
    uid, status, grace = node.killed[0]
    assert (uid, grace, status["reason"]) == ("hog", 1, "Evicted")
    assert status["message"] == ("The node was low on resource: memory. Threshold quantity: 100Mi, "
                                 "available: 50Mi. ")
    assert manager.conditions()["MemoryPressure"]
    assert manager.admit(_body()) is not None  # BestEffort refused under memory pressure
    assert node.events[0] == (None, "EvictionThresholdMet", "Attempting to reclaim memory")
    assert node.events[1][:2] == ("hog", "Evicted")
    node.available = Gi
    now[0] = 110.0
    assert await manager.synchronize() == []
    assert len(node.killed) == 1
    assert manager.is_under_memory_pressure()  # the transition period
    now[0] = 500.0
    await manager.synchronize()
    assert not manager.is_under_memory_pressure()
    assert manager.admit(_body()) is None


async def test_manager_reclaims_node_level_resources_before_evicting() -> None:
    node = _Node([_pod("a", disk=Gi)], 5 * Gi, gc_frees=10 * Gi)
    manager = _manager(node, [_percent("nodefs.available", 10)], [0.0])
    assert await manager.synchronize() == []
    assert node.gc_calls == ["containers", "images"]
    assert node.killed == []
    assert manager.conditions()["DiskPressure"]


async def test_manager_evicts_for_disk_when_gc_is_not_enough() -> None:
    node = _Node([_pod("a", disk=Gi), _pod("b", disk=3 * Gi)], 5 * Gi)
    soft = dataclasses.replace(_percent("nodefs.available", 10), grace_period=30.0)
    now = [0.0]
    manager = _manager(node, [soft], now)
    assert await manager.synchronize() == []  # grace period not yet met
    now[0] = 30.0
    evicted = await manager.synchronize()
    assert [p.name for p in evicted] == ["b"]
    assert node.killed[0][2] == 20  # soft: evictionMaxPodGracePeriod (the pod has no grace period of its own)


async def test_manager_run_waits_for_the_evicted_pod_then_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from kopflet.eviction import manager as manager_module
    from kopflet.eviction.manager import EvictionManager
    monkeypatch.setattr(manager_module, "POD_CLEANUP_POLL", 0.001)
    node = _Node([_pod("a", memory_usage=Gi), _pod("b", memory_usage=2 * Gi)], 50 * Mi)
    asked: list[str] = []
    both_cleaned = asyncio.Event()

    async def cleaned_up(uid: str) -> bool:
        asked.append(uid)
        node.pods = [p for p in node.pods if p.uid != uid]
        if len(asked) == 2:
            both_cleaned.set()
        return True

    manager = EvictionManager(th.EvictionConfig(thresholds=(_hard("memory.available", "100Mi"),)),
                              observe=node.observe, active_pods=node.active_pods, evict=node.evict,
                              pod_cleaned_up=cleaned_up)
    task = asyncio.create_task(manager.run(period=0.001))
    await asyncio.wait_for(both_cleaned.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [k[0] for k in node.killed[:2]] == ["b", "a"]
    assert asked[:2] == ["b", "a"]
