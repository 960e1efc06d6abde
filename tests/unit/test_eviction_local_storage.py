"""kopflet.eviction.local_storage and the manager's local storage limit evictions (upstream localStorageEviction)."""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Any

import pytest

from kopflet.api.spec import Pod, pod_from_body
from kopflet.eviction import helpers as h
from kopflet.eviction import local_storage as ls
from kopflet.eviction import thresholds as th
from kopflet.eviction.helpers import ContainerUsage, EvictionCandidate, FsUsage, Observation, PodUsage
from kopflet.eviction.local_storage import ContainerDisk

Mi, Gi = 1024**2, 1024**3


def _pod(containers: list[dict[str, Any]] | None = None, **spec: Any) -> Pod:
    containers = containers or [{"name": "app", "image": "busybox"}]
    return pod_from_body({"metadata": {"name": "web", "namespace": "default", "uid": "uid-1"},
                          "spec": {"containers": containers, **spec}})


def _c(name: str, limit: str | None = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "image": "busybox", **extra}
    if limit is not None:
        body["resources"] = {"limits": {"ephemeral-storage": limit}}
    return body


SIDECAR = {"restartPolicy": "Always"}


# ---------------------------------------------------------------------------------------------- the spec


@pytest.mark.parametrize(("containers", "init", "overhead", "expected"), [
    ([_c("a")], [], None, None),  # no container lists it: not found, no pod check
    ([_c("a", "100Mi"), _c("b")], [], None, "100Mi"),
    ([_c("a", "100Mi"), _c("b", "200Mi")], [], None, "300Mi"),
    ([_c("a", "1.5Gi")], [], None, "1536Mi"),  # Go prints the canonical form, not the text
    ([_c("a", "1G"), _c("b", "100Mi")], [], None, "1104857600"),  # Add keeps the receiver's DecimalSI
    ([_c("a", "0"), _c("b", "100Mi")], [], None, "100Mi"),  # ... unless the receiver is zero
    ([_c("a", "100Mi")], [_c("init", "1Gi")], None, "1Gi"),  # an init container needs itself: the max
    ([_c("a", "100Mi")], [_c("side", "50Mi", **SIDECAR)], None, "150Mi"),  # sidecars add up
    ([_c("a", "100Mi")], [_c("side", "50Mi", **SIDECAR), _c("init", "100Mi")], None, "150Mi"),
    ([_c("a", "10Mi")], [_c("side", "50Mi", **SIDECAR), _c("init", "100Mi")], None, "150Mi"),  # init + sidecar
    ([_c("a", "100Mi")], [], {"ephemeral-storage": "28Mi"}, "128Mi"),
    ([_c("a", "0")], [], {"ephemeral-storage": "28Mi"}, "0"),  # overhead only on a non-zero limit
])
def test_pod_limit_is_upstreams_pod_limits(containers: list[dict[str, Any]], init: list[dict[str, Any]],
                                           overhead: dict[str, str] | None, expected: str | None) -> None:
    extra: dict[str, Any] = {"initContainers": init}
    if overhead:
        extra["overhead"] = overhead
    limit = ls.pod_limit(_pod(containers, **extra))
    assert (limit.text if limit else None) == expected


def test_pod_level_ephemeral_storage_is_not_a_pod_level_resource() -> None:
    pod = _pod([_c("a", "100Mi")], resources={"limits": {"ephemeral-storage": "1Gi", "memory": "1Gi"}})
    assert ls.pod_limit(pod) == ls.Limit(Fraction(100 * Mi), "100Mi")


def test_storage_limits_from_the_spec() -> None:
    pod = _pod([_c("app", "1Gi"), _c("zero", "0"), _c("none")],
               initContainers=[_c("side", "64Mi", **SIDECAR), _c("init", "2Gi")],
               volumes=[{"name": "scratch", "emptyDir": {"sizeLimit": "100Mi"}},
                        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1G"}},
                        {"name": "unbounded", "emptyDir": {}}, {"name": "zero", "emptyDir": {"sizeLimit": "0"}},
                        {"name": "conf", "configMap": {"name": "c"}}, {"name": "token", "secret": {}},
                        {"name": "host", "hostPath": {"path": "/x"}}])
    limits = ls.storage_limits(pod)
    assert limits.empty_dirs == (("scratch", ls.Limit(Fraction(100 * Mi), "100Mi")),
                                 ("shm", ls.Limit(Fraction(10**9), "1G")))
    assert {n: lim.text for n, lim in limits.containers.items()} == {"app": "1Gi", "side": "64Mi"}
    assert limits.pod is not None and limits.pod.text == "2112Mi"  # max(1Gi + 64Mi, 2Gi + 64Mi)
    assert limits.ephemeral_volumes == ("scratch", "unbounded", "zero", "conf")
    assert limits.enforced
    assert not ls.storage_limits(_pod()).enforced


# ------------------------------------------------------------------------------------------------ checks

_VOLUMES = [{"name": "scratch", "emptyDir": {"sizeLimit": "100Mi"}},
            {"name": "cache", "emptyDir": {"sizeLimit": "1.5Gi"}},
            {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
            {"name": "conf", "configMap": {"name": "c"}}]


@pytest.mark.parametrize(("containers", "volumes", "disks", "other", "dedicated", "expected"), [
    # emptyDir sizeLimit: strictly more than the limit, first in spec order; a volume without stats is skipped
    ([_c("app")], {"scratch": 100 * Mi}, [], 0, False, None),
    ([_c("app")], {"scratch": 100 * Mi + 1}, [], 0, False,
     'Usage of EmptyDir volume "scratch" exceeds the limit "100Mi". '),
    ([_c("app")], {"cache": 2 * Gi, "scratch": Gi}, [], 0, False,
     'Usage of EmptyDir volume "scratch" exceeds the limit "100Mi". '),
    ([_c("app")], {"cache": 2 * Gi}, [], 0, False, 'Usage of EmptyDir volume "cache" exceeds the limit "1536Mi". '),
    ([_c("app")], {"shm": 65 * Mi}, [], 0, False,  # memory medium: checked (the 1.37 gate is off)
     'Usage of EmptyDir volume "shm" exceeds the limit "64Mi". '),
    # the pod's total: writable layers + logs + local ephemeral volumes + pod log files and etc-hosts
    ([_c("app", "100Mi"), _c("b", "100Mi")], {"scratch": 50 * Mi, "conf": 50 * Mi},
     [ContainerDisk("app", 40 * Mi, 10 * Mi), ContainerDisk("b", 40 * Mi, 10 * Mi)], 0, False, None),
    ([_c("app", "100Mi"), _c("b", "100Mi")], {"scratch": 50 * Mi, "conf": 50 * Mi},
     [ContainerDisk("app", 40 * Mi, 10 * Mi), ContainerDisk("b", 40 * Mi, 10 * Mi)], 1, False,
     "Pod ephemeral local storage usage exceeds the total limit of containers 200Mi. "),
    ([_c("app", "100Mi")], {"shm": 64 * Mi}, [ContainerDisk("app", 50 * Mi, 0)], 0, False, None),  # tmpfs: memory
    # logs count toward the pod's total only alongside a writable layer, toward the container's always
    ([_c("app", "100Mi"), _c("b", "50Mi")], {}, [ContainerDisk("app", None, 120 * Mi)], 0, False,
     'Container app exceeded its local ephemeral storage limit "100Mi". '),
    # one container over its own limit (the pod's total is checked first: make it roomy with a second one)
    ([_c("app", "50Mi"), _c("big", "1Gi")], {}, [ContainerDisk("app", 40 * Mi, 10 * Mi + 1)], 0, False,
     'Container app exceeded its local ephemeral storage limit "50Mi". '),
    ([_c("app", "50Mi"), _c("big", "1Gi")], {}, [ContainerDisk("app", 40 * Mi, 10 * Mi)], 0, False, None),
    ([_c("app", "50Mi"), _c("big", "1Gi")], {}, [ContainerDisk("app", 500 * Mi, 10 * Mi)], 0, True, None),  # imagefs
    ([_c("app", "50Mi"), _c("big", "1Gi")], {}, [ContainerDisk("app", 0, 60 * Mi)], 0, True,
     'Container app exceeded its local ephemeral storage limit "50Mi". '),
])
def test_local_storage_messages(containers: list[dict[str, Any]], volumes: dict[str, int],
                                disks: list[ContainerDisk], other: int, dedicated: bool,
                                expected: str | None) -> None:
    limits = ls.storage_limits(_pod(containers, volumes=_VOLUMES))
    found = ls.eviction_message(limits, volumes=volumes, containers=disks, other=other,
                                dedicated_image_fs=dedicated)
    assert (found[1] if found else None) == expected


def test_checks_run_in_upstreams_order() -> None:
    limits = ls.storage_limits(_pod([_c("app", "10Mi")], volumes=_VOLUMES))
    disks = [ContainerDisk("app", 20 * Mi, 0)]
    assert ls.eviction_message(limits, volumes={"scratch": Gi}, containers=disks) == (
        "emptydirfs.limit", 'Usage of EmptyDir volume "scratch" exceeds the limit "100Mi". ')
    assert ls.eviction_message(limits, volumes={}, containers=disks) == (
        "ephemeralpodfs.limit", "Pod ephemeral local storage usage exceeds the total limit of containers 10Mi. ")


def test_only_sidecars_among_init_containers_have_container_limits() -> None:
    pod = _pod([_c("app")], initContainers=[_c("side", "10Mi", **SIDECAR), _c("init", "10Mi")])
    limits = dataclasses.replace(ls.storage_limits(pod), pod=None)  # the container check alone
    over = [ContainerDisk("init", 0, 50 * Mi), ContainerDisk("side", 0, 50 * Mi)]
    assert ls.container_message(limits, over, dedicated_image_fs=False) == (
        'Container side exceeded its local ephemeral storage limit "10Mi". ')
    assert ls.container_message(limits, over[:1], dedicated_image_fs=False) is None


def test_candidate_carries_the_limits_and_its_usage_feeds_the_checks() -> None:
    pod = _pod([_c("app", "1Gi")], volumes=_VOLUMES)
    usage = PodUsage(containers=(ContainerUsage("app", rootfs=FsUsage(10 * Mi, 1), logs=FsUsage(Mi, 1)),),
                     volumes={"conf": FsUsage(Mi, 2)}, pod_logs=FsUsage(Gi, 1), etc_hosts=FsUsage(4096, 1))
    cand = h.candidate(pod, usage)
    assert cand.storage_limits == ls.storage_limits(pod)
    assert h.local_storage_eviction(cand, dedicated_image_fs=False) == (
        "ephemeralpodfs.limit", "Pod ephemeral local storage usage exceeds the total limit of containers 1Gi. ")
    assert h.local_storage_eviction(dataclasses.replace(cand, usage=None), dedicated_image_fs=False) is None


def test_evicted_status_without_disruption_target() -> None:
    assert h.evicted_status("m", generation=3, disruption_target=False) == {
        "phase": "Failed", "reason": "Evicted", "message": "m"}


# --------------------------------------------------------------------------------------------- manager


def _candidate(name: str, *, limit: str | None = None, size_limit: str | None = None, layer: int = 0,
               volume: int | None = None, critical: bool = False, memory: int = 0) -> EvictionCandidate:
    volumes = [{"name": "data", "emptyDir": {"sizeLimit": size_limit} if size_limit else {}}]
    body = pod_from_body({"metadata": {"name": name, "namespace": "default", "uid": name},
                          "spec": {"containers": [_c("app", limit)], "volumes": volumes,
                                   "terminationGracePeriodSeconds": 30}})
    usage = PodUsage(memory_working_set=memory,
                     containers=(ContainerUsage("app", memory_working_set=memory, rootfs=FsUsage(layer, 1),
                                                logs=FsUsage(0, 0)),),
                     volumes={"data": FsUsage(volume, 1)} if volume is not None else {})
    return dataclasses.replace(h.candidate(body, usage), critical=critical)


class _Node:
    """Fakes for the manager's collaborators: a fixed reading, recorded kills and events."""

    def __init__(self, pods: list[EvictionCandidate], available: int = 8 * Gi, image_fs: bool = False) -> None:
        self.pods, self.available, self.image_fs = pods, available, image_fs
        self.killed: list[tuple[str, dict[str, object], int]] = []
        self.events: list[tuple[str | None, str, str, Any]] = []
        self.stamp = 0.0

    async def observe(self) -> dict[str, Observation]:
        self.stamp += 1
        return {"memory.available": Observation(self.available, 8 * Gi, self.stamp)}

    async def active_pods(self) -> list[EvictionCandidate]:
        return list(self.pods)

    async def evict(self, uid: str, status: dict[str, object], grace_period: int) -> None:
        self.killed.append((uid, status, grace_period))

    async def disk_layout(self) -> tuple[bool, bool]:
        return self.image_fs, False

    def record(self, uid: str | None, reason: str, message: str, annotations: Any) -> None:
        self.events.append((uid, reason, message, dict(annotations)))


def _manager(node: _Node, thresholds: tuple[th.Threshold, ...] = ()) -> Any:
    from kopflet.eviction.manager import EvictionManager
    return EvictionManager(th.EvictionConfig(thresholds=thresholds), observe=node.observe,
                           active_pods=node.active_pods, evict=node.evict, disk_layout=node.disk_layout,
                           record_event=node.record)


async def test_manager_evicts_every_pod_over_a_limit_before_thresholds() -> None:
    hard = th.Threshold(signal="memory.available",
                        value=th.ThresholdValue(quantity=Fraction(100 * Mi), fmt=th.BINARY_SI))
    node = _Node([_candidate("fits", limit="1Gi", layer=Mi, memory=4 * Gi),
                  _candidate("dir", size_limit="10Mi", volume=11 * Mi),
                  _candidate("layer", limit="10Mi", layer=20 * Mi),
                  _candidate("critical", limit="10Mi", layer=20 * Mi, critical=True),
                  _candidate("unmeasured-dir", size_limit="10Mi")], available=50 * Mi)
    manager = _manager(node, (hard,))
    evicted = await manager.synchronize()
    assert [p.name for p in evicted] == ["dir", "layer"]
    assert node.killed == [
        ("dir", {"phase": "Failed", "reason": "Evicted",
                 "message": 'Usage of EmptyDir volume "data" exceeds the limit "10Mi". '}, 1),
        ("layer", {"phase": "Failed", "reason": "Evicted",
                   "message": "Pod ephemeral local storage usage exceeds the total limit of containers 10Mi. "}, 1)]
    assert [(e[0], e[1], e[3]) for e in node.events] == [("dir", "Evicted", {}), ("layer", "Evicted", {})]
    assert manager.is_under_memory_pressure()  # the round's bookkeeping still ran; its eviction waits
    node.pods = [node.pods[0]]
    evicted = await manager.synchronize()
    assert [p.name for p in evicted] == ["fits"]  # now the threshold's eviction, with its DisruptionTarget
    assert node.killed[-1][1]["conditions"]


async def test_manager_enforces_limits_without_thresholds() -> None:
    node = _Node([_candidate("layer", limit="10Mi", layer=20 * Mi)])
    assert [p.name for p in await _manager(node).synchronize()] == ["layer"]


async def test_manager_counts_only_logs_against_a_container_on_a_dedicated_image_fs() -> None:
    over = _candidate("c", limit="10Mi", layer=20 * Mi)
    roomy = dataclasses.replace(over, storage_limits=dataclasses.replace(over.storage_limits, pod=None))
    assert [p.name for p in await _manager(_Node([roomy])).synchronize()] == ["c"]
    assert await _manager(_Node([roomy], image_fs=True)).synchronize() == []


async def test_run_waits_for_every_evicted_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from kopflet.eviction import manager as manager_module
    from kopflet.eviction.manager import EvictionManager
    monkeypatch.setattr(manager_module, "POD_CLEANUP_POLL", 0.001)
    node = _Node([_candidate("a", limit="10Mi", layer=20 * Mi), _candidate("b", limit="10Mi", layer=20 * Mi)])
    gone: set[str] = set()
    asked: list[str] = []
    done = asyncio.Event()

    async def cleaned_up(uid: str) -> bool:
        asked.append(uid)
        if uid == "b" and "a" in gone:
            gone.add("b")
            node.pods = []
            done.set()
            return True
        if uid == "a":
            gone.add("a")
            return len(asked) > 2  # a is not cleaned up at the first poll
        return False

    manager = EvictionManager(th.EvictionConfig(), observe=node.observe, active_pods=node.active_pods,
                              evict=node.evict, pod_cleaned_up=cleaned_up)
    task = asyncio.create_task(manager.run(period=0.001))
    await asyncio.wait_for(done.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [k[0] for k in node.killed] == ["a", "b"]  # one round, then it waited for both
    assert asked[:4] == ["a", "a", "a", "b"]


# ------------------------------------------------------------------------ localStorageCapacityIsolation


class _CountingNode(_Node):
    """Also counts what the manager asked for: a round that returns at once asks nothing."""

    def __init__(self, pods: list[EvictionCandidate], available: int = 8 * Gi) -> None:
        super().__init__(pods, available)
        self.asked: list[str] = []

    async def observe(self) -> dict[str, Observation]:
        self.asked.append("observe")
        return await super().observe()

    async def active_pods(self) -> list[EvictionCandidate]:
        self.asked.append("pods")
        return await super().active_pods()

    async def disk_layout(self) -> tuple[bool, bool]:
        self.asked.append("layout")
        return await super().disk_layout()


MEMORY_HARD = th.Threshold(signal="memory.available",
                           value=th.ThresholdValue(quantity=Fraction(100 * Mi), fmt=th.BINARY_SI))


@pytest.mark.parametrize(("isolation", "thresholds", "available", "evicted", "asked", "pressure"), [
    pytest.param(True, (), 8 * Gi, ["layer"], ["layout", "pods", "observe"], False,
                 id="on, no thresholds: the limits are enforced"),
    pytest.param(False, (), 8 * Gi, [], [], False,
                 id="off, no thresholds: synchronize returns at once, asking nothing"),
    pytest.param(False, (MEMORY_HARD,), 8 * Gi, [], ["layout", "pods", "observe"], False,
                 id="off, a threshold not met: the round runs, the limits are not enforced"),
    pytest.param(False, (MEMORY_HARD,), 50 * Mi, ["hog"], ["layout", "pods", "observe"], True,
                 id="off, a threshold met: its eviction (by memory), not the pod over its limit"),
    pytest.param(True, (MEMORY_HARD,), 50 * Mi, ["layer"], ["layout", "pods", "observe"], True,
                 id="on, a threshold met: the limits first, the threshold next round"),
])
async def test_manager_follows_local_storage_capacity_isolation(
        isolation: bool, thresholds: tuple[th.Threshold, ...], available: int, evicted: list[str],
        asked: list[str], pressure: bool) -> None:
    from kopflet.eviction.manager import EvictionManager
    node = _CountingNode([_candidate("layer", limit="10Mi", layer=20 * Mi, memory=Mi),
                          _candidate("hog", memory=4 * Gi)], available=available)
    manager = EvictionManager(th.EvictionConfig(thresholds=thresholds), observe=node.observe,
                              active_pods=node.active_pods, evict=node.evict, disk_layout=node.disk_layout,
                              record_event=node.record, local_storage_capacity_isolation=isolation)
    assert [p.name for p in await manager.synchronize()] == evicted
    assert node.asked == asked
    assert manager.is_under_memory_pressure() is pressure
