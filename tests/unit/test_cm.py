"""kopflet.cm.helpers: pod cgroup settings (upstream ResourceConfigForPod), the cgroup files they become, containers
under pod-level resources, their oom_score_adj, and the QoS-tier cgroups.

Expected values are upstream's own test tables at v1.37.1 where they exist: pkg/kubelet/cm/helpers_linux_test.go,
cgroup_manager_linux_test.go, qos_container_manager_linux_test.go, pkg/kubelet/qos/policy_test.go,
kuberuntime/kuberuntime_container_linux_test.go and opencontainers/cgroups v0.0.7 utils_test.go (DRA cases
left out: kopflet has no DRA). Others were worked out by hand and checked against the upstream Go functions.
"""

from __future__ import annotations

from typing import Any

import pytest

from kopflet.api import qos
from kopflet.api.spec import Pod, Resources, pod_from_body
from kopflet.cm import helpers
from kopflet.cm.helpers import milli_cpu_to_quota

MI = 2**20
GI = 2**30
PERIOD = 100000
TUNED = 5000


def rr(req_cpu: str = "", req_mem: str = "", lim_cpu: str = "", lim_mem: str = "") -> dict[str, Any]:
    """Upstream's getResourceRequirements(getResourceList(cpu, mem), getResourceList(cpu, mem))."""
    requests = {k: v for k, v in (("cpu", req_cpu), ("memory", req_mem)) if v}
    limits = {k: v for k, v in (("cpu", lim_cpu), ("memory", lim_mem)) if v}
    return {"requests": requests, "limits": limits}


def make_pod(*resources: dict[str, Any], init: tuple[dict[str, Any], ...] = (), pod: dict[str, Any] | None = None,
             **spec: Any) -> Pod:
    containers = [{"name": f"c{i}", "image": "busybox", "resources": r} for i, r in enumerate(resources)]
    body: dict[str, Any] = {"containers": containers, **spec}
    if init:
        body["initContainers"] = [{"name": f"i{i}", "image": "busybox", **c} for i, c in enumerate(init)]
    if pod is not None:
        body["resources"] = pod
    return pod_from_body({"metadata": {"name": "p", "namespace": "ns", "uid": "uid-1"}, "spec": body})


# ---------------------------------------------------------------------- TestResourceConfigForPod (no DRA)

G, B = rr("100m", "100Mi", "100m", "100Mi"), rr("100m", "100Mi", "200m", "200Mi")
B_NO_LIMITS = rr("100m", "100Mi")
BE = rr()

# (description, pod, cpu_cfs_quota, period, (shares, quota, period, memory))
RESOURCE_CONFIG_CASES: list[tuple[str, Pod, bool, int, tuple[int | None, ...]]] = [
    ("besteffort", make_pod(BE), True, PERIOD, (2, None, None, None)),
    ("burstable-no-limits", make_pod(B_NO_LIMITS), True, PERIOD, (102, None, None, None)),
    ("burstable-with-limits", make_pod(B), True, PERIOD, (102, 20000, PERIOD, 200 * MI)),
    ("burstable-with-limits-no-cpu-enforcement", make_pod(B), False, PERIOD, (102, -1, PERIOD, 200 * MI)),
    ("burstable-partial-limits", make_pod(B, B_NO_LIMITS), True, PERIOD, (204, None, None, None)),
    ("burstable-with-limits-with-tuned-quota", make_pod(B), True, TUNED, (102, 1000, TUNED, 200 * MI)),
    ("burstable-with-limits-no-cpu-enforcement-with-tuned-quota", make_pod(B), False, TUNED,
     (102, -1, TUNED, 200 * MI)),
    ("burstable-partial-limits-with-tuned-quota", make_pod(B, B_NO_LIMITS), True, TUNED, (204, None, None, None)),
    ("guaranteed", make_pod(G), True, PERIOD, (102, 10000, PERIOD, 100 * MI)),
    ("guaranteed-no-cpu-enforcement", make_pod(G), False, PERIOD, (102, -1, PERIOD, 100 * MI)),
    ("guaranteed-with-tuned-quota", make_pod(G), True, TUNED, (102, 1000, TUNED, 100 * MI)),
    ("guaranteed-no-cpu-enforcement-with-tuned-quota", make_pod(G), False, TUNED, (102, -1, TUNED, 100 * MI)),
    ("burstable-partial-limits-with-init-containers",
     make_pod(rr("100m", "100m", "100m", "100Mi"), rr("100m", "100m"),
              init=({"resources": rr("100m", "100m", "100m", "100Mi")}, {"resources": rr("100m", "100m")})),
     True, TUNED, (204, None, None, None)),
    ("besteffort-with-pod-level-resources-enabled", make_pod(BE, pod={"requests": {}, "limits": {}}), True, PERIOD,
     (2, None, None, None)),
    ("burstable-with-pod-level-requests", make_pod({}, pod={"requests": {"cpu": "100m", "memory": "100Mi"}}),
     True, PERIOD, (102, None, None, None)),
    ("burstable-with-pod-and-container-level-requests",
     make_pod(rr("10m", "50Mi"), pod={"requests": {"cpu": "100m", "memory": "100Mi"}}), True, PERIOD,
     (102, None, None, None)),
    ("burstable-with-pod-level-resources", make_pod({}, pod=rr("100m", "100Mi", "200m", "200Mi")), True, PERIOD,
     (102, 20000, PERIOD, 200 * MI)),
    ("burstable-with-pod-and-container-level-resources",
     make_pod(rr("10m", "50Mi", "50m", "100Mi"), pod=rr("100m", "100Mi", "200m", "200Mi")), True, PERIOD,
     (102, 20000, PERIOD, 200 * MI)),
    ("burstable-with-partial-pod-level-resources-limits",
     make_pod(rr("200m", "200Mi", "200m", "200Mi"), pod={"requests": {"cpu": "200m", "memory": "300Mi"}}),
     True, PERIOD, (204, 20000, PERIOD, 200 * MI)),
    ("guaranteed-with-pod-level-resources", make_pod({}, pod=rr("100m", "100Mi", "100m", "100Mi")), True, PERIOD,
     (102, 10000, PERIOD, 100 * MI)),
    ("guaranteed-with-pod-and-container-level-resources",
     make_pod(rr("10m", "50Mi", "50m", "100Mi"), pod=rr("100m", "100Mi", "100m", "100Mi")), True, PERIOD,
     (102, 10000, PERIOD, 100 * MI)),
    ("guaranteed-pod-level-resources-with-init-containers",
     make_pod(rr("10m", "50Mi", "50m", "50Mi"), init=({"resources": rr("10m", "50Mi", "50m", "50Mi")},),
              pod=rr("100m", "100Mi", "100m", "100Mi")), True, PERIOD, (102, 10000, PERIOD, 100 * MI)),
    # Beyond upstream's table:
    ("overhead adds to the requests and to the non-zero limits",
     make_pod(B, overhead={"cpu": "50m", "memory": "64Mi"}), True, PERIOD, (153, 25000, PERIOD, 264 * MI)),
    ("a sidecar adds up, a later init container needs itself plus the sidecars before it",
     make_pod(rr("100m", "", "200m", ""),
              init=({"resources": rr("50m", "", "100m", ""), "restartPolicy": "Always"},
                    {"resources": rr("120m", "", "250m", "")})),
     True, PERIOD, (174, 35000, PERIOD, None)),
    ("pod-level memory limit only: quota needs every container's cpu limit",
     make_pod(rr("100m", "", "", ""), pod={"limits": {"memory": "1Gi"}}), True, PERIOD, (102, None, None, GI)),
    ("an explicit zero cpu limit counts as no limit", make_pod(rr("100m", "100Mi", "0", "200Mi")), True, PERIOD,
     (102, None, None, 200 * MI)),
]


@pytest.mark.parametrize(("pod", "cfs_quota", "period", "expected"),
                         [case[1:] for case in RESOURCE_CONFIG_CASES], ids=[case[0] for case in RESOURCE_CONFIG_CASES])
def test_pod_resource_config(pod: Pod, cfs_quota: bool, period: int, expected: tuple[int | None, ...]) -> None:
    config = helpers.pod_resource_config(pod, cpu_cfs_quota=cfs_quota, cpu_cfs_quota_period=period)
    assert (config.cpu_shares, config.cpu_quota, config.cpu_period, config.memory) == expected
    assert config.unified == {}
    assert config.pids_limit is None


def test_pod_pids_limit_only_when_positive() -> None:
    pod = make_pod(B)
    assert helpers.pod_resource_config(pod, pod_pids_limit=1024).pids_limit == 1024
    assert helpers.pod_resource_config(pod, pod_pids_limit=-1).pids_limit is None
    assert helpers.pod_resource_config(pod, pod_pids_limit=0).pids_limit is None


def test_status_qos_class_wins_over_the_spec() -> None:
    """GetPodQOS reads status.qosClass first: a Guaranteed-looking spec with a Burstable status."""
    config = helpers.pod_resource_config(make_pod(rr("100m", "100Mi", "", "100Mi")), qos_class=qos.BEST_EFFORT)
    assert (config.cpu_shares, config.memory) == (2, None)


# ------------------------------------------------------------------------------------- TestMilliCPUToQuota


@pytest.mark.parametrize(("milli", "period", "quota"), [
    (0, 0, 0), (5, 100000, 1000), (9, 100000, 1000), (10, 100000, 1000), (200, 100000, 20000),
    (500, 100000, 50000), (1000, 100000, 100000), (1500, 100000, 150000),
])
def test_milli_cpu_to_quota_that_cm_uses(milli: int, period: int, quota: int) -> None:
    assert milli_cpu_to_quota(milli, period) == quota


# --------------------------------------------------------------------------------------- TestHugePageLimits

HUGEPAGE_CASES: list[tuple[str, dict[str, str], dict[int, int]]] = [
    ("no valid hugepages", {"2Mi": "128"}, {}),
    ("2Mi only", {"hugepages-2Mi": "128"}, {2 * MI: 128}),
    ("2Mi and 4Mi", {"hugepages-2Mi": "128", f"hugepages-{2 * MI}": "256", "hugepages-4Mi": "512", "4Mi": "1024"},
     {2 * MI: 384, 4 * MI: 512}),
]


@pytest.mark.parametrize(("resources", "expected"), [c[1:] for c in HUGEPAGE_CASES], ids=[c[0] for c in HUGEPAGE_CASES])
def test_hugepage_limits(resources: dict[str, str], expected: dict[int, int]) -> None:
    assert helpers.hugepage_limits(resources) == expected
    pod = make_pod({"requests": resources})
    assert helpers.pod_resource_config(pod, cpu_cfs_quota=False, cpu_cfs_quota_period=0).hugepage_limits == expected


def test_pod_level_hugepages_replace_the_containers() -> None:
    pod = make_pod({"requests": {"hugepages-2Mi": "4Mi"}, "limits": {"hugepages-2Mi": "4Mi"}},
                   pod={"requests": {"hugepages-2Mi": "8Mi"}, "limits": {"hugepages-2Mi": "8Mi"}})
    assert helpers.pod_resource_config(pod).hugepage_limits == {2 * MI: 8 * MI}


# -------------------------------------------------------------------- TestResourceConfigForPodWithEnforceMemoryQoS

LOW_100, LOW_200, MIN_100 = {"memory.low": "104857600"}, {"memory.low": "209715200"}, {"memory.min": "104857600"}
MEMORY_QOS_CASES: list[tuple[str, Pod, bool, int, dict[str, str]]] = [
    ("besteffort", make_pod(BE), True, PERIOD, {}),
    ("burstable-no-limits", make_pod(B_NO_LIMITS), True, PERIOD, LOW_100),
    ("burstable-with-limits", make_pod(B), True, PERIOD, LOW_100),
    ("burstable-with-limits-no-cpu-enforcement", make_pod(B), False, PERIOD, LOW_100),
    ("burstable-partial-limits", make_pod(B, B_NO_LIMITS), True, PERIOD, LOW_200),
    ("burstable-with-limits-with-tuned-quota", make_pod(B), True, TUNED, LOW_100),
    ("burstable-with-limits-no-cpu-enforcement-with-tuned-quota", make_pod(B), False, TUNED, LOW_100),
    ("burstable-partial-limits-with-tuned-quota", make_pod(B, B_NO_LIMITS), True, TUNED, LOW_200),
    ("guaranteed", make_pod(G), True, PERIOD, MIN_100),
    ("guaranteed-no-cpu-enforcement", make_pod(G), False, PERIOD, MIN_100),
    ("guaranteed-with-tuned-quota", make_pod(G), True, TUNED, MIN_100),
    ("guaranteed-no-cpu-enforcement-with-tuned-quota", make_pod(G), False, TUNED, MIN_100),
]


@pytest.mark.parametrize(("pod", "cfs_quota", "period", "unified"), [c[1:] for c in MEMORY_QOS_CASES],
                         ids=[c[0] for c in MEMORY_QOS_CASES])
def test_tiered_memory_reservation(pod: Pod, cfs_quota: bool, period: int, unified: dict[str, str]) -> None:
    config = helpers.pod_resource_config(pod, cpu_cfs_quota=cfs_quota, cpu_cfs_quota_period=period,
                                         enforce_memory_qos=True,
                                         memory_reservation_policy=helpers.MEMORY_RESERVATION_TIERED)
    assert config.unified == unified


def test_memory_reservation_needs_memory_qos_enforced_and_the_tiered_policy() -> None:
    pod = make_pod(G)
    assert helpers.pod_resource_config(pod, enforce_memory_qos=True).unified == {}
    assert helpers.pod_resource_config(pod, memory_reservation_policy=helpers.MEMORY_RESERVATION_TIERED).unified == {}


# ----------------------------------------------------------------------------------- TestApplyPodLevelMemoryHigh

WITH_OVERHEAD = make_pod(rr("1", "128Mi", "1", "256Mi"), pod=rr("1", "128Mi", "1", "256Mi"),
                         overhead={"memory": "64Mi"})
MEMORY_HIGH_CASES: list[tuple[str, Pod, int | None]] = [
    ("cpu-only pod-level resources does not set memory.high",
     make_pod(rr("100m", "100Mi", "200m"), pod={"limits": {"cpu": "2"}}), None),
    # floor(192Mi + 0.9 * 128Mi) rounded down to a page; without overhead floor(128Mi + 0.9 * 128Mi).
    ("pod overhead is included in memory.high calculation", WITH_OVERHEAD, 322121728),
    ("the same pod without overhead", make_pod(rr("1", "128Mi", "1", "256Mi"), pod=rr("1", "128Mi", "1", "256Mi")),
     255012864),
    ("mixed declared/undeclared memory limits does not set memory.high",
     make_pod(rr("100m", "100Mi", "200m", "200Mi"), rr("100m", "100Mi"), pod={"limits": {"cpu": "2"}}), None),
    ("no pod-level resources: none", make_pod(B), None),
    ("request == limit: none", make_pod({}, pod=rr("", "100Mi", "", "100Mi")), None),
    ("pod-level memory only, container without resources",
     make_pod({}, pod={"requests": {"memory": "100Mi"}, "limits": {"memory": "200Mi"}}), 199229440),
]


@pytest.mark.parametrize(("pod", "expected"), [c[1:] for c in MEMORY_HIGH_CASES], ids=[c[0] for c in MEMORY_HIGH_CASES])
def test_pod_memory_high(pod: Pod, expected: int | None) -> None:
    assert helpers.pod_memory_high(pod, 0.9) == expected
    config = helpers.pod_resource_config(pod, enforce_memory_qos=True, memory_throttling_factor=0.9)
    assert config.unified == ({} if expected is None else {"memory.high": str(expected)})


def test_memory_high_needs_memory_qos_enforced_and_a_factor() -> None:
    assert helpers.pod_resource_config(WITH_OVERHEAD, memory_throttling_factor=0.9).unified == {}
    assert helpers.pod_resource_config(WITH_OVERHEAD, enforce_memory_qos=True).unified == {}


# -------------------------------------------------------------------------------------- cpu unit conversions


@pytest.mark.parametrize(("weight", "shares"), [(1, 2), (2, 28), (3, 54), (4, 80), (245, 6398), (10000, 262144)])
def test_cpu_weight_to_shares(weight: int, shares: int) -> None:
    """TestCpuWeightToCPUShares."""
    assert helpers.cpu_weight_to_shares(weight) == shares


@pytest.mark.parametrize(("shares", "weight"), [
    (2, 1), (3, 1), (51, 2), (102, 4), (1024, 39), (2048, 79), (262143, 9999), (262144, 10000), (300000, 10000),
])
def test_cpu_shares_to_weight_is_the_kubelets_linear_map(shares: int, weight: int) -> None:
    assert helpers.cpu_shares_to_weight(shares) == weight


@pytest.mark.parametrize(("allocated", "readback", "equal"), [
    (51, 28, True), (51, 27, False), (102, 80, True), (102, 102, False), (51, 102, False),
])
def test_cpu_shares_equal_after_v2_round_trip(allocated: int, readback: int, equal: bool) -> None:
    """TestCPUSharesEqualAfterV2RoundTrip (50m is 51 shares, 100m 102)."""
    assert helpers.cpu_shares_equal_after_v2_round_trip(allocated, readback) is equal


@pytest.mark.parametrize(("shares", "weight"), [
    (0, 0), (1, 1), (2, 1), (3, 2), (1024, 100), (262143, 10000), (262144, 10000), (262145, 10000),
    (51, 11), (102, 17), (512, 59), (2048, 174), (10240, 639),
])
def test_runc_cpu_shares_to_weight(shares: int, weight: int) -> None:
    """opencontainers/cgroups v0.0.7 TestConvertCPUSharesToCgroupV2Value, plus values from the Go function."""
    assert helpers.runc_cpu_shares_to_weight(shares) == weight


@pytest.mark.parametrize(("shares", "milli"), [(0, 0), (1, 0), (2, 2), (102, 100), (1024, 1000), (262144, 256000)])
def test_shares_to_milli_cpu(shares: int, milli: int) -> None:
    assert helpers.shares_to_milli_cpu(shares) == milli


@pytest.mark.parametrize(("quota", "period", "milli"), [(-1, 100000, 0), (20000, 100000, 200), (1000, 5000, 200),
                                                         (1001, 100000, 10)])
def test_quota_to_milli_cpu(quota: int, period: int, milli: int) -> None:
    assert helpers.quota_to_milli_cpu(quota, period) == milli


# -------------------------------------------------------------------------------------- cgroup file values

HUGE_SIZES = ("2MB", "1GB")
FILE_CASES: list[tuple[str, helpers.ResourceConfig, dict[str, dict[str, str]], dict[str, str]]] = [
    ("guaranteed 100m/100Mi",
     helpers.ResourceConfig(cpu_shares=102, cpu_quota=10000, cpu_period=PERIOD, memory=100 * MI),
     {"memory": {"memory.limit_in_bytes": "104857600"},
      "cpu": {"cpu.shares": "102", "cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "10000"}},
     {"memory.max": "104857600", "cpu.weight": "4", "cpu.max": "10000 100000"}),
    ("burstable without limits: shares only, the rest stays as it is", helpers.ResourceConfig(cpu_shares=204),
     {"cpu": {"cpu.shares": "204"}}, {"cpu.weight": "8"}),
    ("besteffort", helpers.ResourceConfig(cpu_shares=2), {"cpu": {"cpu.shares": "2"}}, {"cpu.weight": "1"}),
    ("cfs quota off: -1 is max", helpers.ResourceConfig(cpu_shares=1024, cpu_quota=-1, cpu_period=PERIOD),
     {"cpu": {"cpu.shares": "1024", "cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "-1"}},
     {"cpu.weight": "39", "cpu.max": "max 100000"}),
    ("a quota without a period: the v2 default period",
     helpers.ResourceConfig(cpu_quota=50000), {"cpu": {"cpu.cfs_quota_us": "50000"}}, {"cpu.max": "50000 100000"}),
    ("pids, unlimited memory",
     helpers.ResourceConfig(pids_limit=1024, memory=-1),
     {"memory": {"memory.memsw.limit_in_bytes": "-1", "memory.limit_in_bytes": "-1"}, "pids": {"pids.max": "1024"}},
     {"pids.max": "1024", "memory.swap.max": "max", "memory.max": "max"}),
    ("pids 0 is 1, negative is max", helpers.ResourceConfig(pids_limit=0), {"pids": {"pids.max": "1"}},
     {"pids.max": "1"}),
    ("unified files are v2 only, written last",
     helpers.ResourceConfig(cpu_shares=102, memory=200 * MI, unified={"memory.low": "104857600"}),
     {"memory": {"memory.limit_in_bytes": "209715200"}, "cpu": {"cpu.shares": "102"}},
     {"memory.max": "209715200", "cpu.weight": "4", "memory.low": "104857600"}),
]


@pytest.mark.parametrize(("config", "v1", "v2"), [c[1:] for c in FILE_CASES], ids=[c[0] for c in FILE_CASES])
def test_cgroup_files(config: helpers.ResourceConfig, v1: dict[str, dict[str, str]], v2: dict[str, str]) -> None:
    assert helpers.cgroup_v1_files(config) == v1
    assert list(helpers.cgroup_v1_files(config)) == list(v1)
    assert helpers.cgroup_v2_files(config) == v2
    assert list(helpers.cgroup_v2_files(config)) == list(v2)


def test_hugetlb_files_limit_every_node_size() -> None:
    """maybeSetHugetlb: the pod's sizes, then 0 for the node's other sizes (hugepages are denied unless asked)."""
    config = helpers.ResourceConfig(cpu_shares=2, hugepage_limits={2 * MI: 8 * MI})
    assert helpers.cgroup_v1_files(config, hugepage_sizes=HUGE_SIZES)["hugetlb"] == {
        "hugetlb.2MB.limit_in_bytes": "8388608", "hugetlb.2MB.rsvd.limit_in_bytes": "8388608",
        "hugetlb.1GB.limit_in_bytes": "0", "hugetlb.1GB.rsvd.limit_in_bytes": "0"}
    v2 = helpers.cgroup_v2_files(config, hugepage_sizes=HUGE_SIZES)
    assert {k: v for k, v in v2.items() if k.startswith("hugetlb.")} == {
        "hugetlb.2MB.max": "8388608", "hugetlb.2MB.rsvd.max": "8388608", "hugetlb.1GB.max": "0",
        "hugetlb.1GB.rsvd.max": "0"}
    assert "hugetlb" not in helpers.cgroup_v1_files(config)  # no hugetlb controller
    assert helpers.cgroup_v1_files(helpers.ResourceConfig(), hugepage_sizes=()) == {}


def test_pod_config_to_files_end_to_end() -> None:
    config = helpers.pod_resource_config(make_pod({}, pod=rr("250m", "", "500m", "128Mi")), pod_pids_limit=4096)
    assert helpers.cgroup_v1_files(config) == {
        "memory": {"memory.limit_in_bytes": "134217728"},
        "cpu": {"cpu.shares": "256", "cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "50000"},
        "pids": {"pids.max": "4096"}}
    assert helpers.cgroup_v2_files(config) == {"pids.max": "4096", "memory.max": "134217728", "cpu.weight": "10",
                                               "cpu.max": "50000 100000"}


def test_read_back() -> None:
    assert helpers.cpu_config_from_v1("102\n", "-1\n", "100000\n") == helpers.ResourceConfig(
        cpu_shares=102, cpu_quota=-1, cpu_period=100000)
    assert helpers.cpu_config_from_v2("max 100000\n", "4\n") == helpers.ResourceConfig(cpu_shares=80, cpu_quota=-1,
                                                                                       cpu_period=100000)
    assert helpers.cpu_config_from_v2("20000 100000", "39") == helpers.ResourceConfig(cpu_shares=998, cpu_quota=20000,
                                                                                      cpu_period=100000)
    with pytest.raises(ValueError, match=r"cpu\.max"):
        helpers.cpu_config_from_v2("max", "1")
    assert helpers.memory_limit_from_file("max\n") == -1
    assert helpers.memory_limit_from_file("104857600") == 100 * MI
    assert helpers.memory_limit_from_file("9223372036854771712") == helpers.CGROUP_V1_MEMORY_UNLIMITED


# --------------------------------------------------------------------- containers under pod-level resources

# kuberuntime TestGenerateLinuxContainerConfigResources (cpuCFSQuota on), plus cases beyond it.
# (description, container resources, pod-level resources, (shares, quota, period, memory))
CONTAINER_CASES: list[tuple[str, dict[str, Any], dict[str, Any] | None, tuple[int | None, ...]]] = [
    ("Request 128M/1C, Limit 256M/3C", rr("1", "128Mi", "3", "256Mi"), None, (1024, 300000, PERIOD, 256 * MI)),
    ("Request 128M/2C, No Limit", rr("2", "128Mi"), None, (2048, None, PERIOD, None)),
    ("Container Level Request 128M/1C, Pod Level Limit 256M/3C", rr("1", "128Mi"),
     {"limits": {"cpu": "3", "memory": "256Mi"}}, (1024, 300000, PERIOD, 256 * MI)),
    ("No exclusive CPUs", rr("1", "", "1", ""), None, (1024, 100000, PERIOD, None)),
    ("Guaranteed container, non integer CPUs", rr("500m", "", "500m", ""), rr("2", "", "2", ""),
     (512, 50000, PERIOD, None)),
    ("non-Guaranteed container", rr("1", "", "2", ""), rr("2", "", "2", ""), (1024, 200000, PERIOD, None)),
    ("Guaranteed container", rr("1", "100Mi", "1", "100Mi"), rr("2", "", "2", ""),
     (1024, 100000, PERIOD, 100 * MI)),
    ("no resources: shares from the pod-level cpu *limit*", {}, rr("2", "", "2", ""), (2048, 200000, PERIOD, None)),
    ("no resources, pod-level requests only: nothing", {}, {"requests": {"cpu": "2", "memory": "1Gi"}},
     (2, None, PERIOD, None)),
    ("only a memory request: the pod's memory limit", rr("", "64Mi"), {"limits": {"memory": "1Gi"}},
     (2, None, PERIOD, GI)),
    ("own limits win over the pod's", rr("", "", "1", "64Mi"), rr("", "", "3", "1Gi"),
     (1024, 100000, PERIOD, 64 * MI)),
    ("an explicit zero cpu request keeps 2 shares", {"requests": {"cpu": "0"}}, rr("", "", "3", ""),
     (2, 300000, PERIOD, None)),
    ("resources: {} on the pod is not pod-level resources", rr("", "64Mi"), {}, (2, None, PERIOD, None)),
]


@pytest.mark.parametrize(("container", "pod_level", "expected"), [c[1:] for c in CONTAINER_CASES],
                         ids=[c[0] for c in CONTAINER_CASES])
def test_container_resource_config(container: dict[str, Any], pod_level: dict[str, Any] | None,
                                   expected: tuple[int | None, ...]) -> None:
    pod = make_pod(container, pod=pod_level)
    config = helpers.container_resource_config(pod, pod.spec.containers[0])
    assert (config.cpu_shares, config.cpu_quota, config.cpu_period, config.memory) == expected


def test_container_effective_limits_and_cfs_quota_off() -> None:
    pod = make_pod({}, pod=rr("1", "", "2", "512Mi"))
    assert helpers.container_effective_limits(pod, pod.spec.containers[0]) == helpers.ContainerLimits(
        cpu_request_milli=2000, cpu_limit_milli=2000, memory_limit=512 * MI)
    config = helpers.container_resource_config(pod, pod.spec.containers[0], cpu_cfs_quota=False)
    assert (config.cpu_shares, config.cpu_quota, config.cpu_period, config.memory) == (2048, None, None, 512 * MI)


# --------------------------------------------------------------------------------- TestGetContainerOOMScoreAdjust

E9 = 1_000_000_000
MEM_REQ, MEM_LIM = str(E9), str(E9 + 1000)  # standardMemoryAmount/8 and +1000
POD_MEM_REQ, POD_MEM_LIM = str(2 * E9), str(2 * E9 + 1000)  # standardMemoryAmount/4 and +1000


def mem(req: str = "", lim: str = "", cpu_req: str = "", cpu_lim: str = "") -> dict[str, Any]:
    return rr(cpu_req, req, cpu_lim, lim)


def named_pod(containers: dict[str, dict[str, Any]], init: dict[str, dict[str, Any]] | None = None,
              sidecars: tuple[str, ...] = (), pod: dict[str, Any] | None = None) -> Pod:
    body: dict[str, Any] = {"containers": [{"name": n, "image": "b", "resources": r} for n, r in containers.items()]}
    if init:
        body["initContainers"] = [{"name": n, "image": "b", "resources": r,
                                   **({"restartPolicy": "Always"} if n in sidecars else {})} for n, r in init.items()]
    if pod is not None:
        body["resources"] = pod
    return pod_from_body({"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": body})


G_POD = mem(POD_MEM_REQ, POD_MEM_REQ, "5m", "5m")
B_POD = mem(POD_MEM_REQ, POD_MEM_LIM, "5m", "5m")
OOM_CASES: list[tuple[str, Pod, int, dict[str, int]]] = [
    ("guaranteed-pod-resources-no-container-resources",
     named_pod({"no-request-limit-1": {}, "no-request-limit-2": {}}, pod=G_POD), 4 * E9,
     {"no-request-limit-1": -997, "no-request-limit-2": -997}),
    ("guaranteed-pod-resources-equal-container-resources",
     named_pod({"guaranteed-container-1": mem(MEM_REQ, MEM_REQ, "5m", "5m"),
                "guaranteed-container-2": mem(MEM_REQ, MEM_REQ, "5m", "5m")}, pod=G_POD), 4 * E9,
     {"guaranteed-container-1": -997, "guaranteed-container-2": -997}),
    ("guaranteed-pod-resources-unequal-container-requests",
     named_pod({"burstable-container": mem(MEM_REQ, MEM_LIM, "3m", "5m"), "best-effort-container": {}}, pod=G_POD),
     4 * E9, {"burstable-container": -997, "best-effort-container": -997}),
    ("burstable-pod-resources-no-container-resources",
     named_pod({"no-request-limit-1": {}, "no-request-limit-2": {}}, pod=B_POD), 4 * E9,
     {"no-request-limit-1": 750, "no-request-limit-2": 750}),
    ("burstable-pod-resources-equal-container-requests",
     named_pod({"guaranteed-container-1": mem(MEM_REQ, MEM_REQ, "5m", "5m"),
                "guaranteed-container-2": mem(MEM_REQ, MEM_REQ, "5m", "5m")}, pod=B_POD), 4 * E9,
     {"guaranteed-container-1": 750, "guaranteed-container-2": 750}),
    ("burstable-pod-resources-unequal-container-requests",
     named_pod({"burstable-container": mem(MEM_REQ, MEM_REQ, "3m", "5m"), "best-effort-container": {}}, pod=B_POD),
     4 * E9, {"burstable-container": 625, "best-effort-container": 875}),
    ("burstable-pod-resources-no-container-resources-with-sidecar",
     named_pod({"no-request-limit": {}}, init={"no-request-limit-sidecar": {}}, sidecars=("no-request-limit-sidecar",),
               pod=B_POD), 4 * E9, {"no-request-limit": 750, "no-request-limit-sidecar": 750}),
    ("burstable-pod-resources-equal-container-requests-with-sidecar",
     named_pod({"burstable-container": mem(MEM_REQ, MEM_LIM, "5m", "5m")},
               init={"burstable-sidecar": mem(MEM_REQ, MEM_LIM, "5m", "5m")}, sidecars=("burstable-sidecar",),
               pod=B_POD), 4 * E9, {"burstable-container": 750, "burstable-sidecar": 750}),
    ("burstable-pod-resources-unequal-container-requests-with-sidecar",
     named_pod({"burstable-container-1": mem(str(E9), POD_MEM_LIM, "5m", "5m"),
                "burstable-container-2": mem(str(E9 // 2), POD_MEM_LIM, "5m", "5m")},
               init={"burstable-sidecar": mem(str(E9 // 5), POD_MEM_LIM, "5m", "5m")}, sidecars=("burstable-sidecar",),
               pod=mem(str(2 * E9), POD_MEM_LIM, "5m", "5m")), 4 * E9,
     {"burstable-container-1": 725, "burstable-container-2": 850, "burstable-sidecar": 850}),
    # Without pod-level resources the classic formula (qos.oom_score_adj) applies.
    ("burstable-unique-container", named_pod({"burstable-unique-container": mem(MEM_REQ, MEM_LIM)}), 8 * E9,
     {"burstable-unique-container": 875}),
    ("burstable-mixed-multi-container-big-sidecar",
     named_pod({"main-1": mem(MEM_REQ, MEM_LIM)},
               init={"init-container": mem(MEM_REQ, MEM_LIM), "sidecar-big-container": mem(str(4 * E9), MEM_LIM)},
               sidecars=("sidecar-big-container",)), 8 * E9,
     {"init-container": 875, "sidecar-big-container": 500, "main-1": 875}),
    ("pod-level memory request, container without resources",
     named_pod({"c": {}}, pod={"requests": {"memory": "100Mi"}, "limits": {"memory": "200Mi"}}), 4 * E9, {"c": 974}),
]


@pytest.mark.parametrize(("pod", "capacity", "expected"), [c[1:] for c in OOM_CASES], ids=[c[0] for c in OOM_CASES])
def test_container_oom_score_adj(pod: Pod, capacity: int, expected: dict[str, int]) -> None:
    containers = {c.name: c for c in (*pod.spec.init_containers, *pod.spec.containers)}
    assert {name: helpers.container_oom_score_adj(pod, c, capacity) for name, c in containers.items()} == expected


def test_oom_score_adj_without_pod_level_resources_is_qos_oom_score_adj() -> None:
    pod = named_pod({"main-1": mem(MEM_REQ, MEM_LIM)}, init={"s": mem(str(E9 // 10), MEM_LIM)}, sidecars=("s",))
    for container in (*pod.spec.init_containers, *pod.spec.containers):
        assert helpers.container_oom_score_adj(pod, container, 8 * E9) == qos.oom_score_adj(pod, container, 8 * E9)
    with pytest.raises(ValueError, match="memory_capacity"):
        helpers.container_oom_score_adj(pod, pod.spec.containers[0], 0)


# ------------------------------------------------------------------------------------------- QoS class


def test_empty_pod_level_resources_do_not_decide_the_qos_class() -> None:
    """PodLevelResourcesFixKubeletQOSClass (on at 1.37): ``resources: {}`` leaves it to the containers."""
    pod = make_pod(G, pod={})
    assert helpers.pod_qos_class(pod) == qos.GUARANTEED
    assert helpers.pod_level_resources_set(pod) is False
    assert helpers.pod_qos_class(make_pod(G, pod={"limits": {"hugepages-2Mi": "2Mi"}})) == qos.BEST_EFFORT
    assert helpers.pod_qos_class(make_pod(G), qos.BURSTABLE) == qos.BURSTABLE


# ------------------------------------------------------------------------------------------ allocated pods


def test_allocated_pod_replaces_only_resources() -> None:
    pod = make_pod(B, init=({"resources": B_NO_LIMITS},), pod=rr("100m", "100Mi", "200m", "200Mi"))
    allocated = helpers.allocated_pod(pod, {"c0": Resources(requests={"cpu": "300m"}, limits={"cpu": "600m"}),
                                            "i0": Resources()},
                                      Resources(requests={"cpu": "500m", "memory": "300Mi"},
                                                limits={"cpu": "1", "memory": "400Mi"}))
    assert allocated.spec.containers[0].resources == Resources(requests={"cpu": "300m"}, limits={"cpu": "600m"})
    assert allocated.spec.init_containers[0].resources == Resources()
    assert allocated.spec.containers[0].hash == pod.spec.containers[0].hash
    assert allocated.spec.raw["containers"] == pod.spec.raw["containers"]
    config = helpers.pod_resource_config(allocated)
    assert (config.cpu_shares, config.cpu_quota, config.memory) == (512, 100000, 400 * MI)
    unchanged = helpers.allocated_pod(pod, {})
    assert helpers.pod_resource_config(unchanged) == helpers.pod_resource_config(pod)


# ---------------------------------------------------------------------------------------- QoS-tier cgroups


def active_test_pods() -> list[Pod]:
    """qos_container_manager_linux_test.go activeTestPods: one Guaranteed, two Burstable."""
    return [make_pod(rr("1", "128Mi", "1", "128Mi")), make_pod(rr("1", "128Mi", "2", "256Mi")),
            make_pod(rr("2", "256Mi"))]


QOS_CPU_CASES: list[tuple[str, list[Pod], int]] = [
    ("guaranteed-pods-only", [make_pod(rr("1", "128Mi", "1", "128Mi"))], 2),
    ("burstable-pods-only", [make_pod(rr("1", "128Mi", "2", "256Mi"))], 1024),
    ("besteffort-pods-only", [make_pod(BE)], 2),
    ("guaranteed-and-burstable-pods",
     [make_pod(rr("1", "128Mi", "1", "128Mi")), make_pod(rr("1", "128Mi", "2", "256Mi"))], 1024),
    ("besteffort-and-burstable-pods", [make_pod(BE), make_pod(rr("1", "128Mi", "2", "256Mi"))], 1024),
    ("the three test pods", active_test_pods(), 3072),
    ("pod-level requests count", [make_pod({}, pod={"requests": {"cpu": "500m"}})], 512),
]


@pytest.mark.parametrize(("pods", "burstable_shares"), [c[1:] for c in QOS_CPU_CASES],
                         ids=[c[0] for c in QOS_CPU_CASES])
def test_qos_cpu_shares(pods: list[Pod], burstable_shares: int) -> None:
    """TestQOSCPUConfigUpdate: besteffort always 2, burstable from the Burstable pods' cpu requests."""
    configs = helpers.qos_cgroup_configs(pods)
    assert configs[qos.BURSTABLE] == helpers.ResourceConfig(cpu_shares=burstable_shares)
    assert configs[qos.BEST_EFFORT] == helpers.ResourceConfig(cpu_shares=2)
    assert configs[qos.GUARANTEED] == helpers.ResourceConfig()


@pytest.mark.parametrize(("pods", "root_min", "burstable_low"), [
    (active_test_pods(), (384 + 128) * MI, 384 * MI),
    ([make_pod(BE)], 0, 0),
    ([make_pod(rr("1"))], 0, 0),
    ([], 0, 0),
], ids=["writes aggregated memory min", "best effort pod", "burstable pod without memory request", "no pods"])
def test_qos_tiered_memory_reservation(pods: list[Pod], root_min: int, burstable_low: int) -> None:
    """TestQoSContainerCgroup (cgroup v2, TieredReservation)."""
    configs = helpers.qos_cgroup_configs(pods, enforce_memory_qos=True,
                                         memory_reservation_policy=helpers.MEMORY_RESERVATION_TIERED)
    assert configs[qos.GUARANTEED].unified == {"memory.min": str(root_min), "memory.low": str(burstable_low)}
    assert configs[qos.BURSTABLE].unified == {"memory.low": str(burstable_low)}
    assert configs[qos.BEST_EFFORT].unified == {}
    assert helpers.qos_cgroup_configs(pods, enforce_memory_qos=True)[qos.GUARANTEED].unified == {}


def test_qos_hugepages_unbounded_and_qos_reserved() -> None:
    configs = helpers.qos_cgroup_configs(active_test_pods(), hugepage_sizes=HUGE_SIZES, qos_reserved_memory_percent=50,
                                         allocatable_memory=4 * GI)
    for config in configs.values():
        assert config.hugepage_limits == {2 * MI: 1 << 62, GI: 1 << 62}
    assert configs[qos.BURSTABLE].memory == 4 * GI - 64 * MI
    assert configs[qos.BEST_EFFORT].memory == 4 * GI - 64 * MI - 192 * MI
    assert configs[qos.GUARANTEED].memory is None
    assert helpers.qos_cgroup_configs(active_test_pods(), qos_reserved_memory_percent=50)[qos.BURSTABLE].memory is None
    assert helpers.cgroup_v1_files(configs[qos.GUARANTEED], hugepage_sizes=HUGE_SIZES) == {"hugetlb": {
        "hugetlb.2MB.limit_in_bytes": str(1 << 62), "hugetlb.2MB.rsvd.limit_in_bytes": str(1 << 62),
        "hugetlb.1GB.limit_in_bytes": str(1 << 62), "hugetlb.1GB.rsvd.limit_in_bytes": str(1 << 62)}}


@pytest.mark.parametrize(("size", "size_bytes"), [("2MB", 2 * MI), ("1GB", GI), ("64KB", 64 * 1024), ("512B", 512)])
def test_hugepage_size_bytes(size: str, size_bytes: int) -> None:
    assert helpers.hugepage_size_bytes(size) == size_bytes


def test_hugepage_size_bytes_rejects_other_names() -> None:
    with pytest.raises(ValueError, match="hugepage size"):
        helpers.hugepage_size_bytes("2Mi")
