"""kopflet.kuberuntime.resize's UpdatePodSandboxResources request: the pod's resources without its overhead and the
overhead apart (upstream generateUpdatePodSandboxResourcesRequest, subtractOverheadFromResourceConfig,
convertOverheadToLinuxResources, convertResourceConfigToLinuxContainerResources, mergeResourceConfig), and
container_config.calculate_linux_resources (upstream calculateLinuxResources)."""

from __future__ import annotations

from typing import Any

import pytest

from cri_client import types as cri
from kopflet.api.spec import Pod, pod_from_body
from kopflet.cm import helpers
from kopflet.kuberuntime import container_config, resize

MI = 2**20
PERIOD = helpers.QUOTA_PERIOD


def pod(overhead: Any = None, containers: Any = None) -> Pod:
    body: dict[str, Any] = {"containers": containers or [{"name": "app", "image": "busybox"}]}
    if overhead is not None:
        body["overhead"] = overhead
    return pod_from_body({"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": body})


def linux(**fields: Any) -> cri.LinuxContainerResources:
    return cri.LinuxContainerResources(**fields)


@pytest.mark.parametrize(("overhead", "config", "want_overhead", "want_resources"), [
    pytest.param(None, helpers.ResourceConfig(cpu_shares=512, cpu_quota=50000, cpu_period=PERIOD, memory=128 * MI,
                                              unified={"memory.high": "max"}),
                 linux(),
                 linux(cpu_shares=512, cpu_quota=50000, cpu_period=PERIOD, memory_limit_in_bytes=128 * MI,
                       unified={"memory.high": "max"}),
                 id="no overhead: nothing subtracted, an empty overhead"),
    # 1 cpu + 256Mi of containers, 250m + 120Mi of overhead: the pod cgroup has 1250m (1280 shares, 125000 quota).
    pytest.param({"cpu": "250m", "memory": "120Mi"},
                 helpers.ResourceConfig(cpu_shares=1280, cpu_quota=125000, cpu_period=PERIOD, memory=376 * MI),
                 linux(cpu_shares=256, cpu_quota=25000, cpu_period=PERIOD, memory_limit_in_bytes=120 * MI),
                 linux(cpu_shares=1024, cpu_quota=100000, cpu_period=PERIOD, memory_limit_in_bytes=256 * MI),
                 id="cpu and memory overhead"),
    # Burstable without cpu limits: no quota to subtract from; shares via milliCPU (307 -> 300m -> 200m -> 204).
    pytest.param({"cpu": "100m"}, helpers.ResourceConfig(cpu_shares=307),
                 linux(cpu_shares=102, cpu_quota=10000, cpu_period=PERIOD),
                 linux(cpu_shares=204), id="cpu overhead, no quota"),
    pytest.param({"cpu": "100m"}, helpers.ResourceConfig(cpu_shares=2, cpu_quota=-1, cpu_period=PERIOD),
                 linux(cpu_shares=102, cpu_quota=10000, cpu_period=PERIOD),
                 linux(cpu_shares=2, cpu_quota=-10001, cpu_period=PERIOD),
                 id="shares never below 2; an unlimited quota is subtracted from as upstream does"),
    # 100m bytes is no whole number (Quantity.AsInt64 fails): the limit stays; the overhead's limit rounds up.
    pytest.param({"memory": "100m"}, helpers.ResourceConfig(cpu_shares=1024, memory=64 * MI),
                 linux(cpu_shares=2, cpu_period=PERIOD, memory_limit_in_bytes=1),
                 linux(cpu_shares=1024, memory_limit_in_bytes=64 * MI), id="fractional memory overhead"),
    pytest.param({}, helpers.ResourceConfig(cpu_shares=1024, memory=64 * MI),
                 linux(cpu_shares=2, cpu_period=PERIOD),
                 linux(cpu_shares=1024, memory_limit_in_bytes=64 * MI), id="empty overhead"),
])
def test_sandbox_resources(overhead: Any, config: helpers.ResourceConfig, want_overhead: cri.LinuxContainerResources,
                           want_resources: cri.LinuxContainerResources) -> None:
    assert resize.sandbox_resources(pod(overhead), config) == (want_overhead, want_resources)


def test_a_pod_with_overhead_reports_what_its_containers_have() -> None:
    """The pod cgroup (containers plus overhead, upstream ResourceConfigForPod) less the overhead is the containers'
    sum again."""
    a, b = {"cpu": "600m", "memory": "200Mi"}, {"cpu": "400m", "memory": "56Mi"}
    guaranteed = pod({"cpu": "250m", "memory": "120Mi"}, [
        {"name": "a", "image": "busybox", "resources": {"requests": a, "limits": a}},
        {"name": "b", "image": "busybox", "resources": {"requests": b, "limits": b}}])
    overhead, resources = resize.sandbox_resources(guaranteed, helpers.pod_resource_config(guaranteed))
    assert resources == linux(cpu_shares=1024, cpu_quota=100000, cpu_period=PERIOD, memory_limit_in_bytes=256 * MI)
    assert overhead == linux(cpu_shares=256, cpu_quota=25000, cpu_period=PERIOD, memory_limit_in_bytes=120 * MI)


@pytest.mark.parametrize(("source", "update", "want"), [
    (helpers.ResourceConfig(cpu_shares=1024, cpu_quota=100000, cpu_period=PERIOD, memory=64 * MI),
     helpers.ResourceConfig(memory=128 * MI),
     helpers.ResourceConfig(cpu_shares=1024, cpu_quota=100000, cpu_period=PERIOD, memory=128 * MI)),
    (helpers.ResourceConfig(cpu_shares=1024, memory=64 * MI, hugepage_limits={2 * MI: 0}, unified={"a": "1"}),
     helpers.ResourceConfig(cpu_shares=512, cpu_quota=-1, cpu_period=PERIOD, hugepage_limits={MI: 5},
                            unified={"a": "2", "b": "3"}, pids_limit=10),
     helpers.ResourceConfig(cpu_shares=512, cpu_quota=-1, cpu_period=PERIOD, memory=64 * MI, pids_limit=10,
                            hugepage_limits={2 * MI: 0, MI: 5}, unified={"a": "2", "b": "3"})),
    (helpers.ResourceConfig(cpu_shares=1024), helpers.ResourceConfig(), helpers.ResourceConfig(cpu_shares=1024)),
])
def test_merge_resource_config(source: helpers.ResourceConfig, update: helpers.ResourceConfig,
                               want: helpers.ResourceConfig) -> None:
    assert resize.merge_resource_config(source, update) == want


@pytest.mark.parametrize(("args", "options", "want"), [
    (("500m", "1", "64Mi"), {}, linux(cpu_shares=512, cpu_quota=100000, cpu_period=PERIOD,
                                      memory_limit_in_bytes=64 * MI)),
    ((None, "1", 0), {}, linux(cpu_shares=1024, cpu_quota=100000, cpu_period=PERIOD)),  # shares from the limit
    ((None, None, 0), {}, linux(cpu_shares=2, cpu_period=PERIOD)),
    (("500m", "1", 0), {"cpu_cfs_quota": False}, linux(cpu_shares=512)),
    (("500m", "1", 0), {"disable_cpu_quota": True}, linux(cpu_shares=512, cpu_quota=-1, cpu_period=PERIOD)),
    ((0, 0, 0), {"memory_oom_group": True}, linux(cpu_shares=2, cpu_period=PERIOD,
                                                  unified={"memory.oom.group": "1"})),
])
def test_calculate_linux_resources(args: tuple[Any, Any, Any], options: dict[str, bool],
                                   want: cri.LinuxContainerResources) -> None:
    assert container_config.calculate_linux_resources(*args, **options) == want
