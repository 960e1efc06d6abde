"""kopflet.nodestatus.setters: node labels, capacity/allocatable, conditions, readiness, images."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from cri_client import types as cri
from kopflet.api import apparmor, spec
from kopflet.client.informer import Delta
from kopflet.client.kubeapi import KubeApiError
from kopflet.config.settings import AgentConfig
from kopflet.lifecycle import admission
from kopflet.nodestatus import heartbeat, setters
from kopflet.nodestatus.setters import Condition, MachineFacts

FACTS = MachineFacts(cpus=2, memory_bytes=24 * 1024**3, ephemeral_storage_bytes=100 * 1024**3, machine="x86_64")
NOW = datetime.datetime(2026, 11, 22, 1, 0, 0, tzinfo=datetime.UTC)
READY = Condition("True", "KubeletReady", "kubelet is posting ready status")


def test_labels_are_the_well_known_ones_plus_node_labels() -> None:
    assert setters.node_labels("n1", FACTS, {"team": "edge"}) == {
        "kubernetes.io/hostname": "n1", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64", "team": "edge"}


def test_capacity_from_the_machine() -> None:
    assert setters.capacity(FACTS, 110) == {"cpu": "2", "memory": "25165824Ki",
                                            "ephemeral-storage": "104857600Ki", "pods": "110"}


@pytest.mark.parametrize(("system", "kube", "expected"), [
    pytest.param({}, {}, {"cpu": "2", "memory": f"{25165824 - 102400}Ki",
                          "ephemeral-storage": f"{104857600 - 10485760}Ki", "pods": "110"},
                 id="hard eviction thresholds only (100Mi memory, 10% nodefs)"),
    pytest.param({"cpu": "500m", "memory": "1Gi"}, {"cpu": "100m"},
                 {"cpu": "1400m", "memory": f"{25165824 - 102400 - 1048576}Ki",
                  "ephemeral-storage": f"{104857600 - 10485760}Ki", "pods": "110"}, id="reservations"),
])
def test_allocatable(system: dict[str, str], kube: dict[str, str], expected: dict[str, str]) -> None:
    cap = setters.capacity(FACTS, 110)
    assert setters.allocatable(cap, system_reserved=system, kube_reserved=kube) == expected


def test_conditions_keep_transition_time_while_status_holds() -> None:
    first = setters.conditions(READY, [], NOW)
    assert [c["type"] for c in first] == ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
    later = NOW + datetime.timedelta(seconds=10)
    again = setters.conditions(READY, first, later)
    ready = next(c for c in again if c["type"] == "Ready")
    assert ready["lastTransitionTime"] == "2026-11-22T01:00:00Z"
    assert ready["lastHeartbeatTime"] == "2026-11-22T01:00:10Z"
    down = setters.conditions(Condition("False", "KubeletNotReady", "x"), again, later)
    assert next(c for c in down if c["type"] == "Ready")["lastTransitionTime"] == "2026-11-22T01:00:10Z"


@pytest.mark.parametrize(("runtime", "error", "expected"), [
    pytest.param(cri.RuntimeStatus(conditions=(cri.RuntimeCondition(type="RuntimeReady", status=True),
                                               cri.RuntimeCondition(type="NetworkReady", status=True))),
                 "", READY, id="ready"),
    pytest.param(None, "connection refused", Condition("False", "KubeletNotReady",
                                                      "container runtime is down: connection refused"), id="down"),
    pytest.param(cri.RuntimeStatus(conditions=(
        cri.RuntimeCondition(type="RuntimeReady", status=True),
        cri.RuntimeCondition(type="NetworkReady", status=False, reason="NetworkPluginNotReady",
                             message="cni plugin not initialized"))), "",
        Condition("False", "KubeletNotReady", "container runtime network not ready: NetworkReady=false "
                  "reason:NetworkPluginNotReady message:cni plugin not initialized"), id="network not ready"),
])
def test_ready_condition(runtime: cri.RuntimeStatus | None, error: str, expected: Condition) -> None:
    assert setters.ready_condition(runtime, error) == expected


def test_images_biggest_first_with_digests_and_tags() -> None:
    small = cri.Image(id="sha256:a", repo_tags=("x:1",), repo_digests=("x@sha256:1",), size=10)
    big = cri.Image(id="sha256:b", repo_tags=("y:1",), size=99)
    assert setters.images([small, big], limit=1) == [{"names": ["y:1"], "sizeBytes": 99}]
    assert setters.images([small]) == [{"names": ["x@sha256:1", "x:1"], "sizeBytes": 10}]


def test_changes_ignore_heartbeats() -> None:
    a = {"conditions": setters.conditions(READY, [], NOW)}
    b = {"conditions": setters.conditions(READY, a["conditions"], NOW + datetime.timedelta(seconds=10))}
    assert setters.without_heartbeats(a) == setters.without_heartbeats(b)


def _conds(**statuses: str) -> list[dict[str, str]]:
    return [{"type": kind, "status": status} for kind, status in statuses.items()]


@pytest.mark.parametrize(("previous", "current", "expected"), [
    pytest.param([], _conds(MemoryPressure="False", DiskPressure="False", PIDPressure="False", Ready="True"),
                 ["NodeHasSufficientMemory", "NodeHasNoDiskPressure", "NodeHasSufficientPID", "NodeReady"],
                 id="a new node announces every condition"),
    pytest.param(_conds(MemoryPressure="False", Ready="True"), _conds(MemoryPressure="False", Ready="True"), [],
                 id="nothing moved: nothing said (an agent restart)"),
    pytest.param(_conds(MemoryPressure="False", Ready="True"), _conds(MemoryPressure="True", Ready="False"),
                 ["NodeHasInsufficientMemory", "NodeNotReady"], id="flips"),
    pytest.param(_conds(DiskPressure="True", PIDPressure="True"), _conds(DiskPressure="False", PIDPressure="False"),
                 ["NodeHasNoDiskPressure", "NodeHasSufficientPID"], id="pressure gone"),
])
def test_condition_events_as_upstream_record_node_status_event(previous: list[dict[str, str]],
                                                               current: list[dict[str, str]],
                                                               expected: list[str]) -> None:
    events = setters.condition_events("n1", previous, current)
    assert [reason for reason, _ in events] == expected
    assert all(message == f"Node n1 status is now: {reason}" for reason, message in events)


def test_rebooted_only_when_the_node_reported_another_boot() -> None:
    assert setters.rebooted_message("n1", "aaa", "bbb") == "Node n1 has been rebooted, boot id: bbb"
    assert setters.rebooted_message("n1", "", "bbb") is None
    assert setters.rebooted_message("n1", "bbb", "bbb") is None


# --- localStorageCapacityIsolation -----------------------------------------------------------------------------
# upstream nodestatus.MachineInfo + cm GetCapacity/Start (ephemeral-storage only when on), GetNodeAllocatable-
# Reservation (reserves only for the container manager's capacity), ReadyCondition (requiredCapacities).

STALE = "52428800Ki"  # what a Node registered with isolation on still reports after a restart with it off


@pytest.mark.parametrize(("isolation", "reported", "ephemeral"), [
    pytest.param(True, {}, "104857600Ki", id="on: the root dir's filesystem"),
    pytest.param(True, {"ephemeral-storage": STALE}, "104857600Ki", id="on: measured again, not the old value"),
    pytest.param(False, {}, None, id="off, a new Node: none"),
    pytest.param(False, {"cpu": "64"}, None, id="off, the Node never had it: none"),
    pytest.param(False, {"ephemeral-storage": STALE}, STALE, id="off, the Node had it: left as it was"),
])
def test_capacity_ephemeral_storage(isolation: bool, reported: dict[str, str], ephemeral: str | None) -> None:
    cap = setters.capacity(FACTS, 110, local_storage_capacity_isolation=isolation, reported=reported)
    assert cap.get("ephemeral-storage") == ephemeral
    assert {k: v for k, v in cap.items() if k != "ephemeral-storage"} == {
        "cpu": "2", "memory": "25165824Ki", "pods": "110"}


@pytest.mark.parametrize(("isolation", "reported", "reserved", "ephemeral"), [
    pytest.param(True, {}, {}, f"{104857600 - 10485760}Ki", id="on: nodefs.available 10% held back"),
    pytest.param(True, {}, {"ephemeral-storage": "10Gi"}, f"{104857600 - 10485760 - 10485760}Ki",
                 id="on: and the reservation"),
    pytest.param(False, {}, {"ephemeral-storage": "10Gi"}, None, id="off: nothing to offer"),
    pytest.param(False, {"ephemeral-storage": STALE}, {"ephemeral-storage": "10Gi"}, STALE,
                 id="off, stale capacity: allocatable whole, nothing reserved"),
    pytest.param(False, {"ephemeral-storage": "50Gi"}, {}, "50Gi", id="off, stale capacity: copied as written"),
])
def test_allocatable_ephemeral_storage(isolation: bool, reported: dict[str, str], reserved: dict[str, str],
                                       ephemeral: str | None) -> None:
    cap = setters.capacity(FACTS, 110, local_storage_capacity_isolation=isolation, reported=reported)
    alloc = setters.allocatable(cap, system_reserved=reserved, local_storage_capacity_isolation=isolation)
    assert alloc.get("ephemeral-storage") == ephemeral
    assert alloc["memory"] == f"{25165824 - 102400}Ki"  # the other resources are reserved for either way


@pytest.mark.parametrize(("cap", "isolation", "missing"), [
    pytest.param({"cpu": "2", "memory": "1Ki", "pods": "110", "ephemeral-storage": "1Ki"}, True, [], id="on, all"),
    pytest.param({"cpu": "2", "memory": "1Ki", "pods": "110"}, True, ["ephemeral-storage"], id="on, no storage"),
    pytest.param({"cpu": "2", "memory": "1Ki", "pods": "110"}, False, [], id="off: storage not required"),
    pytest.param({"pods": "110"}, False, ["cpu", "memory"], id="off: the others still are"),
    pytest.param({}, True, ["cpu", "memory", "pods", "ephemeral-storage"], id="on, nothing"),
])
def test_missing_capacities(cap: dict[str, str], isolation: bool, missing: list[str]) -> None:
    assert setters.missing_capacities(cap, local_storage_capacity_isolation=isolation) == missing


RUNTIME_READY = cri.RuntimeStatus(conditions=(cri.RuntimeCondition(type="RuntimeReady", status=True),
                                              cri.RuntimeCondition(type="NetworkReady", status=True)))


@pytest.mark.parametrize(("runtime", "missing", "expected"), [
    pytest.param(RUNTIME_READY, [], Condition("False", "KubeletNotReady", "node is shutting down"), id="alone"),
    pytest.param(None, ["cpu"], Condition("False", "KubeletNotReady", "[container runtime is down: refused, node is "
                                          "shutting down, missing node capacity for resources: cpu]"),
                 id="after the runtime's errors, before the capacities (upstream's order)"),
])
def test_ready_condition_while_the_node_shuts_down(runtime: cri.RuntimeStatus | None, missing: list[str],
                                                  expected: Condition) -> None:
    assert setters.ready_condition(runtime, "refused", missing=missing, shutdown="node is shutting down") == expected


@pytest.mark.parametrize(("runtime", "missing", "expected"), [
    pytest.param(RUNTIME_READY, [], READY, id="nothing missing"),
    pytest.param(RUNTIME_READY, ["ephemeral-storage"],
                 Condition("False", "KubeletNotReady", "missing node capacity for resources: ephemeral-storage"),
                 id="ephemeral-storage missing"),
    pytest.param(RUNTIME_READY, ["cpu", "ephemeral-storage"],
                 Condition("False", "KubeletNotReady", "missing node capacity for resources: cpu, ephemeral-storage"),
                 id="two missing, one message"),
    pytest.param(None, ["ephemeral-storage"],
                 Condition("False", "KubeletNotReady", "[container runtime is down: refused, "
                                                       "missing node capacity for resources: ephemeral-storage]"),
                 id="after the runtime's errors, aggregated"),
])
def test_ready_condition_needs_the_required_capacities(runtime: cri.RuntimeStatus | None, missing: list[str],
                                                       expected: Condition) -> None:
    assert setters.ready_condition(runtime, "refused", missing=missing) == expected


def test_machine_facts_measure_the_root_filesystem_only_with_isolation(monkeypatch: pytest.MonkeyPatch) -> None:
    def statvfs(path: str) -> None:
        raise OSError(5, "Input/output error", path)
    monkeypatch.setattr(heartbeat.os, "statvfs", statvfs)
    assert heartbeat.read_machine_facts("/var/lib/kopflet", ephemeral_storage=False).ephemeral_storage_bytes == 0
    with pytest.raises(OSError):  # upstream: "failed to get rootfs info", the kubelet exits
        heartbeat.read_machine_facts("/var/lib/kopflet")


@pytest.mark.parametrize(("securityfs", "parameter", "expected"), [
    (True, b"Y\n", True),
    (True, b"N\n", False),
    (True, b"Y", False),  # upstream wants more than one byte
    (True, None, False),  # no apparmor module (this project's hosts)
    (False, b"Y\n", False),  # securityfs without apparmor
], ids=["enabled", "disabled", "one byte", "no module", "no securityfs"])
def test_apparmor_host_check(tmp_path: Path, securityfs: bool, parameter: bytes | None, expected: bool) -> None:
    """Upstream's forked libcontainer IsEnabled: /sys/kernel/security/apparmor exists and the module's enabled
    parameter starts with Y."""
    if securityfs:
        (tmp_path / "kernel/security/apparmor").mkdir(parents=True)
    if parameter is not None:
        (tmp_path / "module/apparmor/parameters").mkdir(parents=True)
        (tmp_path / "module/apparmor/parameters/enabled").write_bytes(parameter)
    assert heartbeat.read_apparmor_enabled(str(tmp_path)) is expected
    assert apparmor.host_enabled(securityfs, parameter) is expected


async def test_admission_knows_whether_the_host_has_apparmor() -> None:
    for enabled in (False, True):
        facts = dataclasses.replace(FACTS, apparmor_enabled=enabled)
        agent = heartbeat.NodeAgent(AgentConfig(node_name="n1"), FakeApi(None), FakeCri(), "containerd://2",
                                    facts)  # type: ignore[arg-type]
        assert (await agent.admission_info()).apparmor_enabled is enabled


@pytest.mark.parametrize(("cfg", "cpu"), [
    ({"kube_reserved": {"cpu": "500m"}, "system_reserved": {"cpu": "250m"}}, "1250m"),
    # --reserved-cpus replaces both cpu reservations by its count (upstream server.go), memory stays
    ({"kube_reserved": {"cpu": "500m"}, "system_reserved": {"cpu": "250m", "memory": "1Gi"},
      "reserved_system_cpus": "0"}, "1"),
    ({"reserved_system_cpus": "0-1"}, "0"),
])
def test_allocatable_cpu_with_reserved_cpus(cfg: dict[str, Any], cpu: str) -> None:
    agent = heartbeat.NodeAgent(AgentConfig(node_name="n1", **cfg), FakeApi(None), FakeCri(), "containerd://2",
                                FACTS)  # type: ignore[arg-type]
    assert agent.allocatable()["cpu"] == cpu


class FakeApi:
    """The apiserver as NodeAgent uses it: a Node (None: not registered yet), the Lease, status patches."""

    def __init__(self, existing: dict[str, Any] | None) -> None:
        self.existing = existing
        self.patched: list[dict[str, Any]] = []

    async def request(self, method: str, path: str, body: Any = None, content_type: str = "") -> dict[str, Any]:
        if path == "/api/v1/nodes" and method == "POST":
            if self.existing is not None:
                raise KubeApiError(409, "AlreadyExists", "exists", method, path)
            return {"metadata": {"uid": "u1", "name": "n1"}}
        if path.endswith("/status"):
            self.patched.append(body["status"])
            return {}
        if path.startswith("/api/v1/nodes/"):
            return self.existing or {"metadata": {"uid": "u1"}}
        return {}


class FakeCri:
    def __init__(self) -> None:
        self.images = self

    async def status(self) -> cri.RuntimeStatus:
        return RUNTIME_READY

    async def list(self) -> list[cri.Image]:
        return []


@pytest.mark.parametrize(("isolation", "existing", "capacity", "allocatable", "ready"), [
    pytest.param(True, None, "104857600Ki", f"{104857600 - 10485760}Ki", "True", id="on, new Node"),
    pytest.param(False, None, None, None, "True", id="off, new Node: none, and still Ready"),
    pytest.param(False, {"metadata": {"uid": "u1"}, "status": {"capacity": {"ephemeral-storage": STALE}}},
                 STALE, STALE, "True", id="off, a Node that had it: kept, allocatable whole"),
    pytest.param(True, {"metadata": {"uid": "u1"}, "status": {"capacity": {"ephemeral-storage": STALE}}},
                 "104857600Ki", f"{104857600 - 10485760}Ki", "True", id="on, a Node that had it: measured"),
])
async def test_node_status_and_admission_follow_isolation(isolation: bool, existing: dict[str, Any] | None,
                                                          capacity: str | None, allocatable: str | None,
                                                          ready: str) -> None:
    cfg = AgentConfig(node_name="n1", local_storage_capacity_isolation=isolation)
    api = FakeApi(existing)
    agent = heartbeat.NodeAgent(cfg, api, FakeCri(), "containerd://2", FACTS)  # type: ignore[arg-type]
    await agent.register()
    status = api.patched[-1]
    assert status["capacity"].get("ephemeral-storage") == capacity
    assert status["allocatable"].get("ephemeral-storage") == allocatable
    assert next(c for c in status["conditions"] if c["type"] == "Ready")["status"] == ready
    info = await agent.admission_info()
    assert info.allocatable.get("ephemeral-storage") == allocatable


class LateApi(FakeApi):
    """An apiserver that refuses the first `down` requests (a kubeadm control plane this node starts itself)."""

    def __init__(self, down: int) -> None:
        super().__init__(None)
        self.down, self.refused = down, 0

    async def request(self, method: str, path: str, body: Any = None, content_type: str = "") -> dict[str, Any]:
        if self.refused < self.down:
            self.refused += 1
            raise ConnectionRefusedError(111, "Connect call failed")
        return await super().request(method, path, body, content_type)


async def test_registration_is_tried_again_with_upstreams_backoff_until_the_apiserver_answers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sleeps: list[float] = []

    async def sleep(delay: float) -> None:
        sleeps.append(delay)

    monkeypatch.setattr(heartbeat.asyncio, "sleep", sleep)
    api = LateApi(down=8)
    agent = heartbeat.NodeAgent(AgentConfig(node_name="n1"), api, FakeCri(), "containerd://2",  # type: ignore[arg-type]
                                FACTS)
    assert not await agent.try_register()
    assert agent.uid == ""
    await agent.register_with_api_server()
    assert agent.uid == "u1"
    assert api.patched  # the first status went with it
    # upstream registerWithAPIServer: 100 ms, doubling, at most 7 s
    assert sleeps == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 7.0]


class StatusDownApi(FakeApi):
    """The Node is created, then the first status patch gets no answer: a registration cut short."""

    def __init__(self) -> None:
        super().__init__(None)
        self.failed = False

    async def request(self, method: str, path: str, body: Any = None, content_type: str = "") -> dict[str, Any]:
        if path.endswith("/status") and not self.failed:
            self.failed = True
            raise ConnectionRefusedError(111, "Connect call failed")
        return await super().request(method, path, body, content_type)


async def test_a_registration_cut_short_is_done_again_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    async def sleep(delay: float) -> None:
        return None

    monkeypatch.setattr(heartbeat.asyncio, "sleep", sleep)
    api = StatusDownApi()
    agent = heartbeat.NodeAgent(AgentConfig(node_name="n1"), api, FakeCri(), "containerd://2",  # type: ignore[arg-type]
                                FACTS)
    assert not await agent.try_register()
    assert agent.uid == ""  # so the heartbeat loop registers (and says so) instead of taking it as done
    await agent.register_with_api_server()
    assert agent.uid == "u1" and api.patched


async def test_admission_sees_the_labels_others_put_on_the_node() -> None:
    """A label set on the Node by someone else (kubectl label; the DaemonSet and NodeSelector [Conformance] specs)
    counts for admission at once, as upstream's node lister sees it; before the Node is read, the agent's own."""
    cfg = AgentConfig(node_name="n1")
    api = FakeApi(None)
    agent = heartbeat.NodeAgent(cfg, api, FakeCri(), "containerd://2", FACTS)  # type: ignore[arg-type]
    api.existing = {"metadata": {"uid": "u1", "labels": {"kubernetes.io/hostname": "n1", "color": "blue"}}}
    info = await agent.admission_info()
    assert info.labels == {"kubernetes.io/hostname": "n1", "color": "blue"}
    pod = spec.pod_from_body({"metadata": {"name": "p", "namespace": "ns", "uid": "p1"},
                              "spec": {"nodeSelector": {"color": "blue"}, "containers": [{"name": "c", "image": "i"}]}})
    assert admission.admit(pod, info, []) is None
    api.existing["metadata"]["labels"].pop("color")  # the label is taken off again
    rejection = admission.admit(pod, await agent.admission_info(), [])
    assert rejection is not None and rejection.reason == "NodeAffinity"


class Listed:
    """The node watch as admission reads it: listed, holding the Node."""

    objects: Mapping[tuple[str, str], Any] = {("", "n1"): {}}

    def has_synced(self) -> bool:
        return True


class CountingApi(FakeApi):
    def __init__(self, existing: dict[str, Any] | None) -> None:
        super().__init__(existing)
        self.reads = 0

    async def request(self, method: str, path: str, body: Any = None, content_type: str = "") -> dict[str, Any]:
        if method == "GET" and path == "/api/v1/nodes/n1":
            self.reads += 1
        return await super().request(method, path, body, content_type)


def selecting(labels: dict[str, str], tolerations: list[dict[str, Any]] | None = None) -> spec.Pod:
    return spec.pod_from_body({"metadata": {"name": "p", "namespace": "ns", "uid": "p1"},
                               "spec": {"nodeSelector": labels, "tolerations": tolerations or [],
                                        "containers": [{"name": "c", "image": "i"}]}})


NOEXEC = {"key": "gone", "effect": "NoExecute"}


@pytest.mark.parametrize(("watched_labels", "watched_taints", "api_node", "pod", "reads", "admitted"), [
    pytest.param({"color": "blue"}, [], None, selecting({"color": "blue"}), 0, True,
                 id="the watch lets it in: no request"),
    pytest.param({}, [], {"metadata": {"labels": {"color": "blue"}}}, selecting({"color": "blue"}), 1, True,
                 id="a label the watch has not seen yet: read, and admitted"),
    pytest.param({}, [], {"metadata": {"labels": {}}}, selecting({"color": "blue"}), 1, False,
                 id="a label that is not there: read, then refused"),
    pytest.param({}, [NOEXEC], {"metadata": {}, "spec": {"taints": []}}, selecting({}), 1, True,
                 id="a taint the watch still holds but is gone: read, and admitted"),
    pytest.param({}, [NOEXEC], None, selecting({}, [{"key": "gone", "operator": "Exists"}]), 0, True,
                 id="a tolerated taint: no request"),
    pytest.param({}, [{"key": "soft", "effect": "NoSchedule"}], None, selecting({}), 0, True,
                 id="NoSchedule is not admission's: no request"),
])
async def test_admission_reads_the_node_from_its_watch_and_again_before_refusing(
        watched_labels: dict[str, str], watched_taints: list[dict[str, str]], api_node: dict[str, Any] | None,
        pod: spec.Pod, reads: int, admitted: bool) -> None:
    api = CountingApi(api_node)
    agent = heartbeat.NodeAgent(AgentConfig(node_name="n1"), api, FakeCri(), "containerd://2",  # type: ignore[arg-type]
                                FACTS)
    agent.node_watch = Listed()  # type: ignore[assignment]
    node = {"metadata": {"name": "n1", "labels": watched_labels}, "spec": {"taints": watched_taints}}
    agent._node_changed([Delta("ADDED", None, heartbeat.labels_and_taints(node))])
    info = await agent.admission_info(pod)
    assert api.reads == reads
    assert (admission.admit(pod, info, []) is None) is admitted
    # what the watch saw stays what is kept: the read was for this decision (the watch may be newer than it)
    assert agent.labels == watched_labels
    assert [t.key for t in agent.taints] == [t["key"] for t in watched_taints]


async def test_without_a_listed_node_admission_reads_it() -> None:
    api = CountingApi({"metadata": {"labels": {"color": "blue"}}})
    agent = heartbeat.NodeAgent(AgentConfig(node_name="n1"), api, FakeCri(), "containerd://2",  # type: ignore[arg-type]
                                FACTS)
    assert agent.node_watch is not None and not agent._watched()  # built, not run: nothing listed
    info = await agent.admission_info(selecting({"color": "blue"}))
    assert api.reads == 1 and info.labels == {"color": "blue"}


async def test_admission_labels_before_the_node_was_read() -> None:
    cfg = AgentConfig(node_name="n1", node_labels={"zone": "a"})

    class DownApi(FakeApi):
        async def request(self, method: str, path: str, body: Any = None, content_type: str = "") -> dict[str, Any]:
            raise KubeApiError(503, "ServiceUnavailable", "down", method, path)

    agent = heartbeat.NodeAgent(cfg, DownApi(None), FakeCri(), "containerd://2", FACTS)  # type: ignore[arg-type]
    info = await agent.admission_info()
    assert info.labels["zone"] == "a" and info.labels["kubernetes.io/hostname"] == "n1"
