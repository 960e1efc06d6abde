"""qosReserved (issue 20): the QoS tiers' memory limits as upstream's qos_container_manager_linux.go sets them.

The pure rule (`kopflet.cm.helpers`: ParseQOSReserved, getQoSMemoryRequests, setMemoryReserve,
retrySetMemoryReserve) table-driven; then the container manager writing it into cgroup v1 and v2 trees made for the
test, with a fake kernel that refuses what the real one refuses (a v1 limit below the usage: EBUSY; a negative limit
other than -1: EINVAL).
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kopflet.api import qos, spec
from kopflet.cm import cgroups, helpers, node_allocatable
from kopflet.cm.cgroup_names import CgroupLayout
from kopflet.cm.cgroups import PodCgroups
from kopflet.cm.container_manager import ContainerManager

MI = 1 << 20
GI = 1 << 30
CAPACITY = node_allocatable.internal_capacity(4, 8 * GI, 32768)
ALLOCATABLE = 8 * GI - GI  # CAPACITY less systemReserved memory=1Gi


def pod(uid: str, *containers: dict[str, Any], init: tuple[dict[str, Any], ...] = (),
        **pod_spec: Any) -> spec.Pod:
    """A pod of containers given as ``{"requests": {...}, "limits": {...}}`` (plus ``restartPolicy`` for a sidecar)."""
    def container(index: int, prefix: str, c: dict[str, Any]) -> dict[str, Any]:
        body = {"name": f"{prefix}{index}", "image": "i",
                "resources": {k: v for k, v in c.items() if k in ("requests", "limits")}}
        if "restartPolicy" in c:
            body["restartPolicy"] = c["restartPolicy"]
        return body
    body = {"metadata": {"uid": uid, "name": uid, "namespace": "ns"},
            "spec": {"containers": [container(i, "c", c) for i, c in enumerate(containers)],
                     "initContainers": [container(i, "i", c) for i, c in enumerate(init)], **pod_spec}}
    return spec.pod_from_body(body)


def guaranteed(uid: str, memory: str) -> spec.Pod:
    return pod(uid, {"requests": {"cpu": "100m", "memory": memory}, "limits": {"cpu": "100m", "memory": memory}})


def burstable(uid: str, memory: str, cpu: str = "100m") -> spec.Pod:
    return pod(uid, {"requests": {"cpu": cpu, "memory": memory}})


def best_effort(uid: str) -> spec.Pod:
    return pod(uid, {})


# ----------------------------------------------------------------------------------- ParseQOSReserved


@pytest.mark.parametrize(("values", "expected"), [
    ({}, {}),
    ({"memory": "0%"}, {"memory": 0}),
    ({"memory": "100%"}, {"memory": 100}),
    ({"memory": "50%%"}, {"memory": 50}),  # strings.TrimRight trims every trailing '%'
    ({"memory": "+7%"}, {"memory": 7}),  # strconv.ParseInt takes a sign
    ({"memory": "007%"}, {"memory": 7}),
])
def test_parse_qos_reserved(values: dict[str, str], expected: dict[str, int]) -> None:
    assert helpers.parse_qos_reserved(values) == expected


@pytest.mark.parametrize(("values", "message"), [
    # upstream's cgroup_manager_test.go Test table, with the messages ParseQOSReserved gives
    ({"memory": ""}, """failed to parse percentage "" for "memory" resource: percentage expected, got ''"""),
    ({"memory": "a"}, """failed to parse percentage "a" for "memory" resource: percentage expected, got 'a'"""),
    ({"memory": "a%"}, """failed to parse percentage "a%" for "memory" resource: invalid number in percentage 'a%'"""),
    ({"memory": "200%"}, 'failed to parse percentage "200%" for "memory" resource: percentage must be between 0 and '
                         '100'),
    ({"memory": "100%", "cpu": "50%"}, 'cannot reserve "cpu" resource'),
    # and the edges of the number
    ({"memory": "-1%"}, 'failed to parse percentage "-1%" for "memory" resource: percentage must be between 0 and '
                        '100'),
    ({"memory": "%"}, """failed to parse percentage "%" for "memory" resource: invalid number in percentage '%'"""),
    ({"memory": "1.5%"}, "invalid number in percentage '1.5%'"),
    ({"memory": " 5%"}, "invalid number in percentage ' 5%'"),
    ({"memory": "99999999999999999999%"}, "invalid number in percentage '99999999999999999999%'"),
    ({"hugepages-2Mi": "10%"}, 'cannot reserve "hugepages-2Mi" resource'),
])
def test_parse_qos_reserved_errors_are_upstreams(values: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError) as caught:
        helpers.parse_qos_reserved(values)
    assert message in str(caught.value)


# ----------------------------------------------------------------------------------- which requests count


@pytest.mark.parametrize(("pods", "expected"), [
    ([], {qos.GUARANTEED: 0, qos.BURSTABLE: 0}),
    ([guaranteed("g", "64Mi")], {qos.GUARANTEED: 64 * MI, qos.BURSTABLE: 0}),
    ([burstable("b", "32Mi")], {qos.GUARANTEED: 0, qos.BURSTABLE: 32 * MI}),
    ([best_effort("e")], {qos.GUARANTEED: 0, qos.BURSTABLE: 0}),
    ([guaranteed("g1", "64Mi"), guaranteed("g2", "1Gi"), burstable("b1", "32Mi"), burstable("b2", "10Mi"),
      best_effort("e")], {qos.GUARANTEED: GI + 64 * MI, qos.BURSTABLE: 42 * MI}),
    # a Burstable pod without a memory request counts for nothing
    ([burstable("b", "0", cpu="1")], {qos.GUARANTEED: 0, qos.BURSTABLE: 0}),
    # the larger of an init container and the app containers (PodRequests' max over the init phase)
    ([pod("b", {"requests": {"memory": "10Mi"}}, {"requests": {"memory": "20Mi"}},
          init=({"requests": {"memory": "100Mi"}},))], {qos.GUARANTEED: 0, qos.BURSTABLE: 100 * MI}),
    ([pod("b", {"requests": {"memory": "100Mi"}}, init=({"requests": {"memory": "10Mi"}},))],
     {qos.GUARANTEED: 0, qos.BURSTABLE: 100 * MI}),
    # a sidecar (restartable init container) runs next to the app containers: added to them
    ([pod("b", {"requests": {"memory": "100Mi"}},
          init=({"requests": {"memory": "10Mi"}, "restartPolicy": "Always"},))],
     {qos.GUARANTEED: 0, qos.BURSTABLE: 110 * MI}),
    # pod-level requests replace the containers' sum; the overhead is added
    ([pod("b", {"requests": {"memory": "10Mi"}}, resources={"requests": {"memory": "300Mi"}})],
     {qos.GUARANTEED: 0, qos.BURSTABLE: 300 * MI}),
    ([pod("g", {"requests": {"cpu": "1", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "64Mi"}},
          overhead={"memory": "16Mi"})], {qos.GUARANTEED: 80 * MI, qos.BURSTABLE: 0}),
    # a fraction of a byte is a byte (Quantity.Value rounds up), per pod
    ([burstable("b1", "100m"), burstable("b2", "100m")], {qos.GUARANTEED: 0, qos.BURSTABLE: 2}),
], ids=["no pods", "guaranteed", "burstable", "besteffort", "all classes", "burstable without memory",
        "init larger", "init smaller", "sidecar", "pod-level", "overhead", "rounded up"])
def test_qos_memory_requests(pods: list[spec.Pod], expected: dict[str, int]) -> None:
    """getQoSMemoryRequests with resource.PodRequests."""
    assert helpers.qos_memory_requests(pods) == expected


# ----------------------------------------------------------------------------------- setMemoryReserve


@pytest.mark.parametrize(("guaranteed_requests", "burstable_requests", "allocatable", "percent", "expected"), [
    (0, 0, 4 * GI, 100, (4 * GI, 4 * GI)),
    (64 * MI, 0, 4 * GI, 100, (4 * GI - 64 * MI, 4 * GI - 64 * MI)),
    (64 * MI, 32 * MI, 4 * GI, 100, (4 * GI - 64 * MI, 4 * GI - 96 * MI)),
    (64 * MI, 32 * MI, 4 * GI, 50, (4 * GI - 32 * MI, 4 * GI - 48 * MI)),
    (64 * MI, 32 * MI, 4 * GI, 0, (4 * GI, 4 * GI)),
    (3, 3, 1000, 50, (999, 998)),  # (3 * 50) / 100 truncated
    # nothing clamped: the requests above allocatable give limits at or below zero, handed to the kernel as they are
    (5 * GI, GI, 4 * GI, 100, (-GI, -2 * GI)),
    (4 * GI, 0, 4 * GI, 100, (0, 0)),
    (0, 0, 0, 100, None),  # "Allocatable memory reported as 0, might be in standalone mode"
])
def test_qos_reserved_memory_limits(guaranteed_requests: int, burstable_requests: int, allocatable: int,
                                    percent: int, expected: tuple[int, int] | None) -> None:
    requests = {qos.GUARANTEED: guaranteed_requests, qos.BURSTABLE: burstable_requests}
    limits = helpers.qos_reserved_memory_limits(requests, allocatable, percent)
    assert (None if limits is None else (limits.burstable, limits.best_effort)) == expected


def test_the_tier_configs_carry_the_limits_only_with_a_percent() -> None:
    pods = [guaranteed("g", "64Mi"), burstable("b", "32Mi", cpu="500m"), best_effort("e")]
    on = helpers.qos_cgroup_configs(pods, qos_reserved_memory_percent=100, allocatable_memory=4 * GI)
    assert on[qos.BURSTABLE] == helpers.ResourceConfig(cpu_shares=512, memory=4 * GI - 64 * MI)
    assert on[qos.BEST_EFFORT] == helpers.ResourceConfig(cpu_shares=2, memory=4 * GI - 96 * MI)
    assert on[qos.GUARANTEED] == helpers.ResourceConfig()  # kubepods' memory is node allocatable's
    off = helpers.qos_cgroup_configs(pods, allocatable_memory=4 * GI)
    assert off[qos.BURSTABLE].memory is None and off[qos.BEST_EFFORT].memory is None
    # what libcontainer writes for them (0: nothing; -1: unlimited; the rest as they are)
    assert helpers.cgroup_v1_files(on[qos.BURSTABLE])["memory"] == {"memory.limit_in_bytes": str(4 * GI - 64 * MI)}
    assert helpers.cgroup_v2_files(on[qos.BEST_EFFORT])["memory.max"] == str(4 * GI - 96 * MI)
    assert "memory" not in helpers.cgroup_v1_files(helpers.ResourceConfig(memory=0))


# ----------------------------------------------------------------------------------- retrySetMemoryReserve


@pytest.mark.parametrize(("limits", "usage", "expected"), [
    ({qos.BURSTABLE: 100, qos.BEST_EFFORT: 50}, [(qos.BURSTABLE, 80), (qos.BEST_EFFORT, 70)],
     {qos.BURSTABLE: 100, qos.BEST_EFFORT: 70}),
    ({qos.BURSTABLE: 100, qos.BEST_EFFORT: 50}, [(qos.BURSTABLE, 100), (qos.BEST_EFFORT, 50)],
     {qos.BURSTABLE: 100, qos.BEST_EFFORT: 50}),  # only above the limit
    ({qos.BURSTABLE: -10, qos.BEST_EFFORT: -20}, [(qos.BURSTABLE, 0), (qos.BEST_EFFORT, 7)],
     {qos.BURSTABLE: 0, qos.BEST_EFFORT: 7}),
    ({qos.BURSTABLE: 100, qos.BEST_EFFORT: 50}, [(qos.BURSTABLE, 200), (qos.BEST_EFFORT, None)],
     {qos.BURSTABLE: 200, qos.BEST_EFFORT: 50}),  # an unreadable usage stops there
    ({qos.BURSTABLE: 100, qos.BEST_EFFORT: 50}, [(qos.GUARANTEED, None), (qos.BURSTABLE, 200)],
     {qos.BURSTABLE: 100, qos.BEST_EFFORT: 50}),
    ({qos.BURSTABLE: 100, qos.BEST_EFFORT: 50}, [(qos.GUARANTEED, 10**12)],
     {qos.BURSTABLE: 100, qos.BEST_EFFORT: 50}),  # kubepods has no QoS memory limit to adjust
])
def test_qos_memory_retry_limits(limits: dict[str, int], usage: list[tuple[str, int | None]],
                                 expected: dict[str, int]) -> None:
    configs = {qos.GUARANTEED: helpers.ResourceConfig(),
               **{k: helpers.ResourceConfig(cpu_shares=2, memory=v) for k, v in limits.items()}}
    adjusted = helpers.qos_memory_retry_limits(configs, usage)
    assert {k: adjusted[k].memory for k in expected} == expected
    assert adjusted[qos.GUARANTEED].memory is None
    assert all(adjusted[k].cpu_shares == 2 for k in expected)


# ----------------------------------------------------------------------------------- the writes


class FakeKernel:
    """Cgroup file writes refused as the kernel refuses them: a memory limit other than -1/max below zero (EINVAL),
    on v1 a limit below the cgroup's usage (EBUSY, after failing to reclaim). `refuse` makes any write to a file
    fail."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.writes: list[tuple[str, str]] = []
        self.refuse: set[str] = set()
        real = cgroups.write_file

        def write(path: Path, value: str) -> None:
            if path.name in ("memory.limit_in_bytes", "memory.max") and value not in ("-1", "max"):
                if int(value) < 0:
                    raise OSError(errno.EINVAL, "Invalid argument")
                usage = path.parent / "memory.usage_in_bytes"
                if path.name == "memory.limit_in_bytes" and usage.exists() and int(value) < int(usage.read_text()):
                    raise OSError(errno.EBUSY, "Device or resource busy")
            if path.name in self.refuse:
                raise OSError(errno.EACCES, "Permission denied")
            self.writes.append((str(path), value))
            real(path, value)

        monkeypatch.setattr(cgroups, "write_file", write)


@pytest.fixture
def kernel(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeKernel]:
    yield FakeKernel(monkeypatch)


def v1_tree(root: Path) -> Path:
    """cgroupfs v1 as it looks with kubepods and its tiers made (files a tmpfs tree would not have)."""
    controllers = (("cpu", {"cpu.shares": "1024", "cpu.cfs_quota_us": "-1", "cpu.cfs_period_us": "100000"}),
                   ("memory", {"memory.limit_in_bytes": str(helpers.CGROUP_V1_MEMORY_UNLIMITED),
                               "memory.usage_in_bytes": "0", "memory.max_usage_in_bytes": "0"}),
                   ("pids", {"pids.max": "max"}))
    for tier in ("kubepods", "kubepods/burstable", "kubepods/besteffort"):
        for controller, files in controllers:
            directory = root / controller / tier
            directory.mkdir(parents=True, exist_ok=True)
            for name, value in files.items():
                (directory / name).write_text(value)
    return root


def v2_tree(root: Path) -> Path:
    (root / "cgroup.controllers").parent.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids\n")
    (root / "cgroup.subtree_control").write_text("")
    for tier in ("kubepods", "kubepods/burstable", "kubepods/besteffort"):
        directory = root / tier
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids\n")
        for name, value in (("cpu.weight", "100"), ("cpu.max", "max 100000"), ("memory.max", "max"),
                            ("memory.current", "0"), ("pids.max", "max")):
            (directory / name).write_text(value)
    return root


def manager(root: Path, pods: list[spec.Pod], *, v2: bool = False, qos_reserved: dict[str, int] | None,
            system_reserved: dict[str, str] | None = None,
            layout: CgroupLayout | None = None) -> ContainerManager:
    cgroups_ = PodCgroups(str(root), v2=v2, **({"layout": layout} if layout else {}))
    return ContainerManager(
        cgroups_, capacity=CAPACITY, system_reserved={"memory": "1Gi"} if system_reserved is None else system_reserved,
        kube_reserved={}, enforcement=("pods",), hugepage_sizes=(), active_pods=lambda: pods,
        node_event=lambda *_: None, qos_reserved=qos_reserved)


def limit_reader(root: Path, v2: bool) -> Callable[[str], str]:
    def read(tier: str) -> str:
        path = root / "kubepods" / tier / "memory.max" if v2 else root / "memory" / "kubepods" / tier / \
            "memory.limit_in_bytes"
        return path.read_text()
    return read


@pytest.mark.parametrize("v2", [False, True], ids=["cgroup v1", "cgroup v2"])
async def test_the_tiers_follow_the_pods(tmp_path: Path, kernel: FakeKernel, v2: bool) -> None:
    """The e2e scenario on a tree: memory=100%, a Guaranteed pod of 64Mi comes (before its pod cgroup) and goes."""
    root = v2_tree(tmp_path) if v2 else v1_tree(tmp_path)
    read = limit_reader(root, v2)
    pods: list[spec.Pod] = [burstable("b", "32Mi")]
    cm = manager(root, pods, v2=v2, qos_reserved={"memory": 100})
    await cm.start()  # upstream's wait.Until runs the first update at once
    assert (read("burstable"), read("besteffort")) == (str(ALLOCATABLE), str(ALLOCATABLE - 32 * MI))

    pods.append(guaranteed("g", "64Mi"))
    await cm.update_qos()
    assert (read("burstable"), read("besteffort")) == (str(ALLOCATABLE - 64 * MI), str(ALLOCATABLE - 96 * MI))
    cpu = root / "kubepods" / "burstable" / "cpu.weight" if v2 else root / "cpu" / "kubepods" / "burstable" / \
        "cpu.shares"
    assert cpu.read_text() == ("4" if v2 else "102")  # the cpu shares still follow the Burstable pods

    pods.remove(pods[-1])
    await cm.update_qos()
    assert (read("burstable"), read("besteffort")) == (str(ALLOCATABLE), str(ALLOCATABLE - 32 * MI))
    # kubepods keeps node allocatable's limit: the QoS update never writes its memory
    kubepods = root / "kubepods" / "memory.max" if v2 else root / "memory" / "kubepods" / "memory.limit_in_bytes"
    assert kubepods.read_text() == str(ALLOCATABLE)
    await cm.close()


@pytest.mark.parametrize("v2", [False, True], ids=["cgroup v1", "cgroup v2"])
@pytest.mark.parametrize("qos_reserved", [None, {}], ids=["gate off", "gate on, no memory"])
async def test_without_a_memory_reserve_no_limit_is_written(tmp_path: Path, kernel: FakeKernel, v2: bool,
                                                            qos_reserved: dict[str, int] | None) -> None:
    root = v2_tree(tmp_path) if v2 else v1_tree(tmp_path)
    read = limit_reader(root, v2)
    unlimited = "max" if v2 else str(helpers.CGROUP_V1_MEMORY_UNLIMITED)
    pods = [guaranteed("g", "64Mi"), burstable("b", "32Mi")]
    cm = manager(root, pods, v2=v2, qos_reserved=qos_reserved)
    await cm.start()
    await cm.update_qos()
    assert (read("burstable"), read("besteffort")) == (unlimited, unlimited)
    assert not [w for w in kernel.writes if "/burstable/memory" in w[0] or "/besteffort/memory" in w[0]]
    await cm.close()


async def test_a_tier_above_its_new_limit_is_held_at_its_usage(tmp_path: Path, kernel: FakeKernel) -> None:
    """v1 refuses a limit below the usage (EBUSY): upstream's retry sets each tier over its limit to its usage, then
    writes every tier again."""
    root = v1_tree(tmp_path)
    read = limit_reader(root, False)
    (root / "memory" / "kubepods" / "besteffort" / "memory.usage_in_bytes").write_text(str(ALLOCATABLE - 10 * MI))
    pods: list[spec.Pod] = []
    cm = manager(root, pods, qos_reserved={"memory": 100})
    await cm.start()
    pods.append(guaranteed("g", "64Mi"))
    await cm.update_qos()
    assert read("burstable") == str(ALLOCATABLE - 64 * MI)
    assert read("besteffort") == str(ALLOCATABLE - 10 * MI)  # its usage, not the 64Mi less it was given
    refused = [w for w in kernel.writes if w[0].endswith("besteffort/memory.limit_in_bytes")]
    assert refused[-1][1] == str(ALLOCATABLE - 10 * MI)
    # once the usage is down, the next update gives it its limit
    (root / "memory" / "kubepods" / "besteffort" / "memory.usage_in_bytes").write_text(str(GI))
    await cm.update_qos()
    assert read("besteffort") == str(ALLOCATABLE - 64 * MI)
    await cm.close()


async def test_requests_above_allocatable_give_a_limit_the_kernel_refuses(tmp_path: Path,
                                                                         kernel: FakeKernel) -> None:
    """Nothing clamped, as upstream: a negative limit is refused (EINVAL) and the retry holds the tier at its
    usage."""
    root = v1_tree(tmp_path)
    read = limit_reader(root, False)
    (root / "memory" / "kubepods" / "burstable" / "memory.usage_in_bytes").write_text(str(5 * MI))
    (root / "memory" / "kubepods" / "besteffort" / "memory.usage_in_bytes").write_text(str(3 * MI))
    pods = [guaranteed("g", "8Gi")]
    cm = manager(root, pods, qos_reserved={"memory": 100})
    await cm.start()
    assert (read("burstable"), read("besteffort")) == (str(5 * MI), str(3 * MI))
    await cm.close()


async def test_a_failure_after_the_retry_is_logged_and_the_sync_goes_on(
        tmp_path: Path, kernel: FakeKernel, caplog: pytest.LogCaptureFixture) -> None:
    root = v1_tree(tmp_path)
    pods = [guaranteed("g", "64Mi")]
    cm = manager(root, pods, qos_reserved={"memory": 100})
    await cm.start()
    kernel.refuse.add("memory.limit_in_bytes")
    with caplog.at_level(logging.WARNING, logger="kopflet.cm.container_manager"):
        await cm.update_qos()  # no exception: the pod cgroup is made anyway
    assert "failed to update the QoS cgroups: failed to write" in caplog.text
    assert "memory.limit_in_bytes: permission denied" in caplog.text
    attempts = [w for w in kernel.writes if w[0].endswith("burstable/memory.limit_in_bytes")]
    assert len(attempts) == 1  # the write at start only
    await cm.close()


async def test_allocatable_zero_sets_no_memory_limit(tmp_path: Path, kernel: FakeKernel) -> None:
    root = v1_tree(tmp_path)
    read = limit_reader(root, False)
    cm = manager(root, [guaranteed("g", "64Mi")], qos_reserved={"memory": 100}, system_reserved={"memory": "9Gi"})
    await cm.start()
    await cm.update_qos()
    assert read("burstable") == read("besteffort") == str(helpers.CGROUP_V1_MEMORY_UNLIMITED)
    await cm.close()


async def test_without_cgroups_per_qos_there_is_nothing_to_limit(tmp_path: Path, kernel: FakeKernel) -> None:
    root = v1_tree(tmp_path)
    cm = manager(root, [guaranteed("g", "64Mi")], qos_reserved={"memory": 100},
                 layout=CgroupLayout(cgroups_per_qos=False))
    await cm.update_qos()
    assert not kernel.writes


@pytest.mark.parametrize(("limit", "warned"), [
    (str(3 * GI), True), (str(helpers.CGROUP_V1_MEMORY_UNLIMITED), False), ("9223372036854710272", False),
], ids=["a limit left", "unlimited (4k pages)", "unlimited (64k pages)"])
async def test_a_limit_left_by_an_earlier_run_is_reported_not_removed(
        tmp_path: Path, kernel: FakeKernel, caplog: pytest.LogCaptureFixture, limit: str, warned: bool) -> None:
    """Upstream neither updates nor removes a tier's memory limit once the reserve is off; kopflet says so."""
    root = v1_tree(tmp_path)
    (root / "memory" / "kubepods" / "burstable" / "memory.limit_in_bytes").write_text(limit)
    cm = manager(root, [], qos_reserved=None)
    with caplog.at_level(logging.WARNING, logger="kopflet.cm.container_manager"):
        await cm.start()
    assert ("the QoS cgroup /kubepods/burstable has a memory limit of 3221225472 bytes" in caplog.text) is warned
    assert (root / "memory" / "kubepods" / "burstable" / "memory.limit_in_bytes").read_text() == limit
    await cm.close()


def test_the_tiers_count_each_pod_once_while_it_is_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each pod's requests are worked out once for as long as the manager is given the same pod object: a new
    object (a resize) is worked out again, and a pod no longer active is forgotten."""
    pods = [guaranteed("g", "64Mi"), burstable("b", "32Mi", cpu="500m"), best_effort("e")]
    tiers = manager(tmp_path, pods, qos_reserved=None)
    expected = helpers.qos_cgroup_configs(pods)
    worked_out: list[str] = []
    real = helpers.pod_qos_requests

    def counting(pod: spec.Pod) -> helpers.PodQOSRequests:
        worked_out.append(pod.uid)
        return real(pod)

    monkeypatch.setattr(helpers, "pod_qos_requests", counting)
    first = tiers.qos_configs(pods)
    assert first == expected and first[qos.BURSTABLE].cpu_shares == 512
    assert sorted(worked_out) == ["b", "e", "g"]
    assert tiers.qos_configs(pods) == first and len(worked_out) == 3
    resized = burstable("b", "32Mi", cpu="1")
    assert tiers.qos_configs([pods[0], resized])[qos.BURSTABLE].cpu_shares == 1024
    assert worked_out[3:] == ["b"]
    assert tiers.qos_configs([pods[0]])[qos.BURSTABLE].cpu_shares == 2 and worked_out[4:] == []
    assert set(tiers._qos_kept) == {"g"}
