"""kopflet.kuberuntime.executor.PodSyncer.kill_pod against a fake CRI: the upstream termination order of pods with
sidecars.

Regular containers are stopped first, then the sidecars in reverse spec order (upstream terminationOrdering);
ephemeral containers and pods without sidecars are stopped all at once. And `reset_containers`
(RestartAllContainers): one at a time, stop (grace 0, so 2s) only those that have not exited, then remove.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from cri_client import CriError
from cri_client import types as cri
from kopflet.api.spec import Pod, pod_from_body
from kopflet.cm import helpers
from kopflet.cm.cgroups import CgroupError
from kopflet.container import labels
from kopflet.container.podstate import ContainerInfo, RuntimePodStatus, SandboxInfo, State
from kopflet.kuberuntime import reconciler, sandbox_config
from kopflet.kuberuntime.executor import MINIMUM_GRACE_PERIOD, PodSyncer, _sandbox_user_namespace
from kopflet.logs.rotation import container_log_symlink
from kopflet.logs.verbosity import v
from kopflet.paths import Layout
from kopflet.pleg.own_stops import OwnStops
from kopflet.userns.userns_manager import UsernsManager
from kopflet.volumes.plugins import VolumeError


class FakeContainers:
    def __init__(self, slow: dict[str, float]) -> None:
        self.slow = slow
        self.calls: list[tuple[str, int]] = []
        self.done: list[str] = []
        self.log: list[tuple[str, str]] = []  # ("stop" | "remove", id), in call order
        self.gone: set[str] = set()
        self.log_paths: dict[str, str] = {}

    async def status(self, container_id: str) -> cri.ContainerStatus:
        """Labelled as kopflet labels its containers (c-<name> in pod ns/p), NOT_FOUND for `gone` ones."""
        if container_id in self.gone:
            raise CriError("NOT_FOUND", "not found")
        name = container_id.removeprefix("c-")
        return cri.ContainerStatus(id=container_id, labels={labels.POD_NAME: "p", labels.POD_NAMESPACE: "ns",
                                                            labels.POD_UID: "u", labels.CONTAINER_NAME: name},
                                   log_path=self.log_paths.get(container_id, ""))

    async def remove(self, container_id: str) -> None:
        self.log.append(("remove", container_id))

    async def stop(self, container_id: str, seconds: int) -> None:
        self.calls.append((container_id, seconds))
        self.log.append(("stop", container_id))
        await asyncio.sleep(self.slow.get(container_id, 0.0))
        self.done.append(container_id)


class FakeSandboxes:
    def __init__(self) -> None:
        self.stopped: list[str] = []

    async def stop(self, sandbox_id: str) -> None:
        self.stopped.append(sandbox_id)


class FakeCri:
    def __init__(self, slow: dict[str, float]) -> None:
        self.containers = FakeContainers(slow)
        self.sandboxes = FakeSandboxes()


class FakeRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def pod_event(self, pod: Any, type_: str, reason: str, message: str, container: str | None = None,
                  init: bool = False) -> None:
        self.events.append((type_, reason, message, container, init))


def make_syncer(slow: dict[str, float]) -> tuple[PodSyncer, FakeCri, FakeRecorder]:
    syncer = PodSyncer.__new__(PodSyncer)  # kill_pod needs only the CRI and the recorder
    cri, recorder = FakeCri(slow), FakeRecorder()
    syncer.cri, syncer.recorder = cri, recorder  # type: ignore[assignment]
    syncer.layout = Layout(f"/nonexistent-{id(syncer)}", container_logs_dir=f"/nonexistent-{id(syncer)}/containers")
    syncer.own_stops = OwnStops()
    return syncer, cri, recorder


def make_pod(sidecars: bool = True) -> Pod:
    init = [{"name": "setup", "image": "busybox"}]
    if sidecars:
        init += [{"name": "proxy", "image": "busybox", "restartPolicy": "Always"},
                 {"name": "logger", "image": "busybox", "restartPolicy": "Always"}]
    return pod_from_body({"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
                          "spec": {"initContainers": init, "terminationGracePeriodSeconds": 30,
                                   "containers": [{"name": "app", "image": "busybox"},
                                                  {"name": "worker", "image": "busybox"}],
                                   "ephemeralContainers": [{"name": "debugger", "image": "busybox"}]}})


def runtime(*names: str) -> RuntimePodStatus:
    return RuntimePodStatus(uid="u", sandboxes=(SandboxInfo(id="sb", ready=True, ip="10.0.0.1"),),
                            containers=tuple(ContainerInfo(id=f"c-{n}", name=n, state=State.RUNNING) for n in names))


ALL = ("proxy", "logger", "app", "worker", "debugger")


async def test_regular_containers_stop_first_then_sidecars_in_reverse_order() -> None:
    syncer, cri, recorder = make_syncer({"c-app": 0.05, "c-worker": 0.1, "c-logger": 0.05})
    await syncer.kill_pod(make_pod(), runtime(*ALL), grace=None)
    order = [cid for cid, _ in cri.containers.calls]
    assert set(order[:3]) == {"c-app", "c-worker", "c-debugger"}  # ephemeral containers wait for nothing
    assert order[3:] == ["c-logger", "c-proxy"]
    assert cri.containers.done.index("c-logger") < cri.containers.done.index("c-proxy")
    assert all(seconds >= 29 for _, seconds in cri.containers.calls)  # the wait comes off the grace period
    assert cri.sandboxes.stopped == ["sb"]
    assert {e[3] for e in recorder.events if e[1] == "Killing"} == set(ALL)


async def test_each_kill_is_logged_at_v2(caplog: pytest.LogCaptureFixture) -> None:
    """Upstream killContainer: "Killing container with a grace period" at V(2), per container: not at -v=0."""
    caplog.set_level(v(2), logger="kopflet.kuberuntime.executor")
    syncer, _, _ = make_syncer({})
    await syncer.kill_pod(make_pod(sidecars=False), runtime("app"), grace=None)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (v(2), "pod ns/p: killing container app (c-app) with a grace period of 30s")]


async def test_a_sidecar_whose_later_sidecar_does_not_run_waits_for_the_regular_containers_only() -> None:
    syncer, cri, _ = make_syncer({"c-app": 0.05})
    await syncer.kill_pod(make_pod(), runtime("proxy", "app"), grace=None)
    assert [cid for cid, _ in cri.containers.calls] == ["c-app", "c-proxy"]


async def test_without_sidecars_or_with_grace_zero_everything_stops_at_once() -> None:
    for pod, grace in ((make_pod(sidecars=False), None), (make_pod(), 0)):
        names = ("app", "worker", "debugger") if grace is None else ALL
        syncer, cri, _ = make_syncer({f"c-{n}": 0.05 for n in names})
        started = asyncio.get_running_loop().time()
        await syncer.kill_pod(pod, runtime(*names), grace=grace)
        assert asyncio.get_running_loop().time() - started < 0.09  # concurrent: one delay, not several
        assert sorted(cid for cid, _ in cri.containers.calls) == sorted(f"c-{n}" for n in names)


async def test_reset_containers_stops_what_runs_with_no_grace_and_removes_each_in_order() -> None:
    """Upstream SyncPod's ContainersToReset: killContainer with gracePeriodOverride 0 (Killing "killing", no
    preStop, the 2s minimum), then removeContainer, one after the other."""
    syncer, cri, recorder = make_syncer({})
    resets = (reconciler.ResetInfo(container_id="c-app", name="app", kill=True),
              reconciler.ResetInfo(container_id="c-setup", name="setup"),
              reconciler.ResetInfo(container_id="c-proxy", name="proxy", kill=True),
              reconciler.ResetInfo(container_id="c-worker", name="worker"))
    await syncer.reset_containers(make_pod(), resets)
    assert cri.containers.log == [("stop", "c-app"), ("remove", "c-app"), ("remove", "c-setup"),
                                  ("stop", "c-proxy"), ("remove", "c-proxy"), ("remove", "c-worker")]
    assert cri.containers.calls == [("c-app", MINIMUM_GRACE_PERIOD), ("c-proxy", MINIMUM_GRACE_PERIOD)]
    assert [(e[1], e[2], e[3], e[4]) for e in recorder.events] == [("Killing", "killing", "app", False),
                                                                  ("Killing", "killing", "proxy", True)]


def write_file(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True)
    path.write_bytes(data)


async def test_container_log_symlinks_are_made_after_start_and_removed_before_the_container(tmp_path: Path) -> None:
    """Upstream startContainer links /var/log/containers/<pod>_<ns>_<container>-<id>.log to the log once the
    container started; removeContainer removes the link first (named from the container's labels)."""
    syncer, cri_fake, _ = make_syncer({})
    syncer.layout = Layout(str(tmp_path / "root"), str(tmp_path / "pods"), str(tmp_path / "containers"))
    pod = make_pod()
    log = Path(syncer.layout.container_log_path("ns", "p", "u", "app", 2))
    write_file(log, b"hi\n")
    await syncer._link_log(pod, "app", "c-app", 2)
    await syncer._link_log(pod, "worker", "c-worker", 0)  # no log file (yet): no link
    link = Path(container_log_symlink(str(tmp_path / "containers"), "p", "ns", "app", "c-app"))
    assert [p.name for p in (tmp_path / "containers").iterdir()] == [link.name]
    assert os.readlink(link) == str(log)
    cri_fake.containers.gone.add("c-gone")
    await syncer.remove(["c-app", "c-gone"], [])
    assert not any((tmp_path / "containers").iterdir())
    assert cri_fake.containers.log == [("remove", "c-app"), ("remove", "c-gone")]


async def test_a_removed_container_takes_its_log_files_a_reset_one_keeps_them(tmp_path: Path) -> None:
    """Upstream removeContainerLog: logManager.Clean removes ``<log path>*`` (the log and its rotated files); the
    RestartAllContainers reset removes with logs kept (kept until the pod goes)."""
    syncer, cri_fake, _ = make_syncer({})
    directory = tmp_path / "pods" / "ns_p_u" / "app"
    names = ("1.log", "1.log.20261127-101010.gz", "1.log.20261127-111111", "11.log", "2.log")
    directory.mkdir(parents=True)
    for name in names:
        (directory / name).write_bytes(b"x")
    cri_fake.containers.log_paths = {"c-app": str(directory / "1.log"), "c-app2": str(directory / "2.log")}
    await syncer.remove(["c-app"], [])
    assert sorted(p.name for p in directory.iterdir()) == ["11.log", "2.log"]
    await syncer.reset_containers(make_pod(), (reconciler.ResetInfo(container_id="c-app2", name="app"),))
    assert sorted(p.name for p in directory.iterdir()) == ["11.log", "2.log"]


# ------------------------------------------------------------------------------------------- user namespaces


class StatusCri:
    """A runtime whose Status lists `handlers` (containerd 1.6 lists none), or fails."""

    def __init__(self, handlers: tuple[cri.RuntimeHandler, ...] = (), fail: bool = False) -> None:
        self.handlers, self.fail, self.asked = handlers, fail, 0

    async def status(self) -> cri.RuntimeStatus:
        self.asked += 1
        if self.fail:
            raise CriError("UNAVAILABLE", "connection refused")
        return cri.RuntimeStatus(handlers=self.handlers)


class NoVolumes:
    async def setup(self, pod: Pod) -> dict[str, Any]:
        return {}


def userns_pod(host_users: bool | None) -> Pod:
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "busybox"}]}
    if host_users is not None:
        spec["hostUsers"] = host_users
    return pod_from_body({"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": spec})


def userns_syncer(runtime_cri: StatusCri) -> tuple[PodSyncer, FakeRecorder]:
    from kopflet.config.settings import AgentConfig

    syncer = PodSyncer.__new__(PodSyncer)
    recorder = FakeRecorder()
    syncer.cri, syncer.recorder, syncer.volumes = runtime_cri, recorder, NoVolumes()  # type: ignore[assignment]
    syncer.dns, syncer.layout = sandbox_config.DnsSettings(), Layout("/nonexistent")
    syncer.cfg, syncer.before_pod_cgroup = AgentConfig(node_name="n"), None
    syncer.cgroups, syncer.allocations = RecordingCgroups(), ActuatedAllocations()  # type: ignore[assignment]
    return syncer, recorder


NOT_SUPPORTED = "Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user " \
                "namespaces"


@pytest.mark.parametrize(("runtime_cri", "message"), [
    (StatusCri(), NOT_SUPPORTED),
    (StatusCri(fail=True), NOT_SUPPORTED),
    (StatusCri((cri.RuntimeHandler(name="", user_namespaces=True),)),
     f"Failed to create pod sandbox: {sandbox_config.USERNS_NOT_IMPLEMENTED}"),
], ids=["containerd 1.6: no handlers", "Status failed", "supported: no ID mappings"])
async def test_a_hostusers_false_pod_gets_no_sandbox(runtime_cri: StatusCri, message: str) -> None:
    """Upstream createPodSandbox: generatePodSandboxConfig fails in NamespacesForPod; SyncPod records
    FailedCreatePodSandBox ("Failed to create pod sandbox: <error>") and no sandbox is created (the pod cgroup is:
    upstream's syncPod makes it before it waits for the volumes)."""
    syncer, recorder = userns_syncer(runtime_cri)
    actions = reconciler.PodActions(create_sandbox=True, containers_to_start=("app",))
    result = await syncer.sync(userns_pod(False), RuntimePodStatus(uid="u"), actions)
    assert result.sandbox_error == message
    assert recorder.events == [("Warning", "FailedCreatePodSandBox", message, None, False)]
    assert [name for name, _ in syncer.cgroups.applied] == [helpers.pod_cgroup_parent(userns_pod(False))]  # type: ignore[attr-defined]


@pytest.mark.parametrize("host_users", [None, True])
async def test_the_runtime_is_asked_about_user_namespaces_only_for_hostusers_false(host_users: bool | None) -> None:
    runtime_cri = StatusCri()
    syncer, _ = userns_syncer(runtime_cri)
    assert await syncer.user_namespace_facts(userns_pod(host_users)) == ("", ())
    assert await syncer.user_namespace_facts(userns_pod(False)) == ("", ())
    assert runtime_cri.asked == 1


class FailingVolumes:
    def __init__(self, error: VolumeError) -> None:
        self.error = error

    async def setup(self, pod: Pod) -> dict[str, Any]:
        raise self.error


MOUNT_FAILED = 'MountVolume.NodeAffinity check failed for volume "pv-1" : no matching NodeSelectorTerms'


@pytest.mark.parametrize(("error", "events"), [
    (VolumeError('MountVolume.SetUp failed for volume "c" : configmap "c" not found'),
     [("Warning", "FailedMount", 'MountVolume.SetUp failed for volume "c" : configmap "c" not found', None, False)]),
    (VolumeError(MOUNT_FAILED, events=(("FailedMount", MOUNT_FAILED), ("FailedMapVolume", "map failed"))),
     [("Warning", "FailedMount", MOUNT_FAILED, None, False),
      ("Warning", "FailedMapVolume", "map failed", None, False)]),
    (VolumeError("logged only", events=()), []),
], ids=["one FailedMount", "the volume manager's events", "no event"])
async def test_a_volume_error_is_its_events_and_nothing_starts(error: VolumeError,
                                                               events: list[tuple[Any, ...]]) -> None:
    syncer, recorder = userns_syncer(StatusCri())
    syncer.volumes = FailingVolumes(error)  # type: ignore[assignment]
    actions = reconciler.PodActions(create_sandbox=True, containers_to_start=("app",))
    result = await syncer.sync(userns_pod(None), RuntimePodStatus(uid="u"), actions)
    assert result.volume_error == str(error) and result.failed
    assert recorder.events == events
    # Upstream's syncPod makes the pod cgroup before it waits for the volumes: it is there all the same.
    assert [name for name, _ in syncer.cgroups.applied] == [helpers.pod_cgroup_parent(userns_pod(None))]  # type: ignore[attr-defined]


def test_containers_get_the_sandboxs_user_namespace() -> None:
    config = sandbox_config.build_sandbox_config(userns_pod(None), 0, dns=sandbox_config.DnsSettings(),
                                                 layout=Layout("/nonexistent"))
    assert _sandbox_user_namespace(config) == cri.UserNamespace(mode=cri.NamespaceMode.NODE)
    assert _sandbox_user_namespace(cri.PodSandboxConfig(metadata=cri.PodSandboxMetadata(name="p"))) is None


class UnreadableCgroups:
    def read(self, name: str) -> None:
        return None  # the pod cgroup cannot be read (gone, or an unreadable file)


async def test_a_resize_with_an_unreadable_pod_cgroup_fails_and_changes_nothing() -> None:
    """Upstream doPodResizeAction: GetPodCgroupConfig failing is "unable to get pod cgroup memory config for pod
    <format.Pod>", before any write; the next sync tries again."""
    from kopflet.kuberuntime import resize
    from kopflet.kuberuntime.executor import SyncResult

    syncer, cri_fake, _ = make_syncer({})
    syncer.cgroups = UnreadableCgroups()  # type: ignore[assignment]
    syncer.pod_cgroup_config = lambda pod: None  # type: ignore[method-assign,assignment,return-value]
    result = SyncResult()
    await syncer.resize(make_pod(), runtime("app"), resize.ResizeActions(), result)
    assert result.resize_error == 'unable to get pod cgroup memory config for pod "p_ns(u)"'
    assert cri_fake.containers.log == [] and cri_fake.containers.calls == []


# --------------------------------------------------------------- resize: UpdatePodSandboxResources first

MI = 2**20
BEFORE = helpers.ResourceConfig(cpu_shares=102, cpu_quota=10000, cpu_period=100000, memory=64 * MI)
AFTER = helpers.ResourceConfig(cpu_shares=204, cpu_quota=20000, cpu_period=100000, memory=128 * MI)


class ResizeCgroups:
    """The pod cgroup at BEFORE; `apply` logs each write, and refuses those of `fail_on` (a field name)."""

    def __init__(self, log: list[tuple[str, Any]], fail_on: str = "") -> None:
        self.log, self.fail_on = log, fail_on

    def read(self, name: str) -> helpers.ResourceConfig:
        return BEFORE

    def apply(self, name: str, config: helpers.ResourceConfig) -> None:
        if self.fail_on and getattr(config, self.fail_on) is not None:
            raise CgroupError(f"failed to write {self.fail_on}")
        self.log.append(("cgroup", config))


class ResizeSandboxes:
    """UpdatePodSandboxResources: logged, then answered with `errors` in turn (None: OK)."""

    def __init__(self, log: list[tuple[str, Any]], errors: list[CriError | None]) -> None:
        self.log, self.errors = log, errors

    async def update_resources(self, sandbox_id: str, resources: cri.LinuxContainerResources,
                               overhead: cri.LinuxContainerResources) -> None:
        self.log.append(("runtime", (sandbox_id, resources.memory_limit_in_bytes, resources.cpu_shares,
                                     resources.cpu_quota)))
        error = self.errors.pop(0) if self.errors else None
        if error is not None:
            raise error


class ResizeAllocations:
    def __init__(self) -> None:
        self.pod_level: list[Any] = []

    def set_actuated_pod_level(self, uid: str, level: Any) -> None:
        self.pod_level.append(level)


def resize_syncer(errors: list[CriError | None], fail_on: str = ""
                  ) -> tuple[PodSyncer, list[tuple[str, Any]], ResizeAllocations]:
    syncer, cri_fake, _ = make_syncer({})
    log: list[tuple[str, Any]] = []
    cri_fake.sandboxes = ResizeSandboxes(log, errors)  # type: ignore[assignment]
    allocations = ResizeAllocations()
    syncer.cgroups, syncer.allocations = ResizeCgroups(log, fail_on), allocations  # type: ignore[assignment]
    syncer.pod_cgroup_config = lambda pod: AFTER  # type: ignore[method-assign,assignment,return-value]
    return syncer, log, allocations


async def run_resize(syncer: PodSyncer) -> Any:
    from kopflet.kuberuntime import resize
    from kopflet.kuberuntime.executor import SyncResult

    result = SyncResult()
    await syncer.resize(make_pod(), runtime("app"), resize.ResizeActions(update_pod_resources=True), result)
    return result


# What the runtime is told before each write (sandbox, memory, shares, quota), the merged resources so far.
GROWN_MEMORY = ("runtime", ("sb", 128 * MI, 102, 10000))
GROWN_QUOTA = ("runtime", ("sb", 128 * MI, 102, 20000))
GROWN_CPU = ("runtime", ("sb", 128 * MI, 204, 20000))


@pytest.mark.parametrize("errors", [
    [], [CriError("UNIMPLEMENTED", "unknown method"), CriError("UNIMPLEMENTED", "unknown method")],
    [CriError("UNKNOWN", "not implemented yet"), CriError("UNKNOWN", "not implemented yet")],
], ids=["accepted", "UNIMPLEMENTED", "containerd 2.2"])
async def test_a_resize_tells_the_runtime_before_each_pod_cgroup_write(errors: list[CriError | None]) -> None:
    """Upstream setPodCgroupConfig: UpdatePodSandboxResources with the resources merged so far, then the write; a
    runtime without the call (updatePodSandboxResources: best effort) changes nothing. Upstream resizeContainers:
    the cpu limit (quota and period) and the request (shares) are two writes, the limit first when both grow."""
    syncer, log, allocations = resize_syncer(errors + errors)
    result = await run_resize(syncer)
    assert result.resize_error == ""
    assert log == [GROWN_MEMORY, ("cgroup", helpers.ResourceConfig(memory=128 * MI)),
                   GROWN_QUOTA, ("cgroup", helpers.ResourceConfig(cpu_quota=20000, cpu_period=100000)),
                   GROWN_CPU, ("cgroup", helpers.ResourceConfig(cpu_shares=204))]
    assert len(allocations.pod_level) == 1


async def test_a_runtime_refusing_the_new_resources_rejects_the_resize_before_any_write() -> None:
    syncer, log, allocations = resize_syncer([CriError("INVALID_ARGUMENT", "too big")])
    result = await run_resize(syncer)
    assert result.resize_error == (
        "failed to notify runtime for UpdatePodSandboxResources (resource=memory); resize rejected: "
        'updatePodSandboxResources failed for sanboxID "sb": rpc error: code = InvalidArgument desc = too big')
    assert log == [GROWN_MEMORY]
    assert allocations.pod_level == []


@pytest.mark.parametrize("rollback_error", [None, CriError("UNAVAILABLE", "connection refused")])
async def test_a_failed_pod_cgroup_write_tells_the_runtime_the_previous_resources(
        rollback_error: CriError | None) -> None:
    """Upstream setPodCgroupConfig: after a failed write the runtime gets the resources before it (a failure of
    that is only logged); the write's error is the resize's."""
    syncer, log, allocations = resize_syncer([None, None, None, rollback_error], fail_on="cpu_shares")
    result = await run_resize(syncer)
    assert result.resize_error == "failed to write cpu_shares"
    # The memory and quota writes stay: only the shares are rolled back.
    assert log == [GROWN_MEMORY, ("cgroup", helpers.ResourceConfig(memory=128 * MI)),
                   GROWN_QUOTA, ("cgroup", helpers.ResourceConfig(cpu_quota=20000, cpu_period=100000)),
                   GROWN_CPU, GROWN_QUOTA]
    assert allocations.pod_level == []


# ------------------------------------------------------- resize: pod cgroup vs containers, the memory check


class OrderCgroups:
    """A pod cgroup reading `current`, its memory usage `usage` (None: unreadable); writes and reads logged."""

    def __init__(self, log: list[tuple[str, Any]], current: helpers.ResourceConfig, usage: int | None) -> None:
        self.log, self.current, self.usage = log, current, usage

    def read(self, name: str) -> helpers.ResourceConfig:
        return self.current

    def apply(self, name: str, config: helpers.ResourceConfig) -> None:
        self.log.append(("cgroup", config))

    def memory_usage(self, name: str) -> int | None:
        self.log.append(("usage", name))
        return self.usage


class OrderContainers:
    """UpdateContainerResources logged; ContainerStats answering `usage` bytes."""

    def __init__(self, log: list[tuple[str, Any]], usage: int) -> None:
        self.log, self.usage = log, usage

    async def update_resources(self, container_id: str, resources: cri.LinuxContainerResources) -> None:
        self.log.append(("container", (container_id, resources.cpu_quota, resources.memory_limit_in_bytes)))

    async def stats(self, container_id: str) -> cri.ContainerStats:
        return cri.ContainerStats(id=container_id, memory=cri.MemoryUsage(usage_bytes=self.usage))


class OrderAllocations:
    def __init__(self) -> None:
        self.pod_level: list[Any] = []

    def actuation(self, uid: str) -> None:
        return None

    def set_actuated_container(self, uid: str, name: str, resources: Any) -> None:
        pass

    def set_actuated_pod_level(self, uid: str, level: Any) -> None:
        self.pod_level.append(level)


def order_syncer(target: helpers.ResourceConfig, current: helpers.ResourceConfig, *, pod_usage: int | None = None,
                 container_usage: int = 0) -> tuple[PodSyncer, list[tuple[str, Any]]]:
    syncer, cri_fake, _ = make_syncer({})
    log: list[tuple[str, Any]] = []
    cri_fake.sandboxes = ResizeSandboxes(log, [])  # type: ignore[assignment]
    cri_fake.containers = OrderContainers(log, container_usage)  # type: ignore[assignment]
    syncer.cgroups = OrderCgroups(log, current, pod_usage)  # type: ignore[assignment]
    syncer.allocations = OrderAllocations()  # type: ignore[assignment]
    syncer.node_memory_capacity, syncer.hugepage_sizes = 8 * 2**30, ()
    syncer.pod_cgroup_config = lambda pod: target  # type: ignore[method-assign,assignment,return-value]
    return syncer, log


def update(resource: str, desired: Any, current: Any) -> Any:
    from kopflet.kuberuntime import resize
    return resize.ContainerUpdate(name="app", container_id="c-app", resource=resource, desired=desired,
                                  current=current)


async def resize_with(syncer: PodSyncer, actions: Any) -> Any:
    from kopflet.kuberuntime.executor import SyncResult

    result = SyncResult()
    await syncer.resize(make_pod(), runtime("app"), actions, result)
    return result


CPU_SET = helpers.ResourceConfig(cpu_shares=102, cpu_quota=30000, cpu_period=100000, memory=64 * MI)
CPU_UNLIMITED = helpers.ResourceConfig(cpu_shares=102, cpu_quota=-1, cpu_period=100000, memory=64 * MI)


@pytest.mark.parametrize(("target", "current", "limit", "expected"), [
    # A cpu quota set where the pod cgroup had none (-1, the smallest): the pod cgroup before the container.
    (CPU_SET, CPU_UNLIMITED, (300, 0), [("runtime", ("sb", 64 * MI, 102, 30000)),
                                        ("cgroup", helpers.ResourceConfig(cpu_quota=30000, cpu_period=100000)),
                                        ("container", ("c-app", 30000, 0))]),
    # Back to unlimited (cpuCFSQuota off, or exclusive CPUs upstream): the container first, then the pod cgroup.
    (CPU_UNLIMITED, CPU_SET, (0, 300), [("container", ("c-app", 0, 0)),
                                        ("runtime", ("sb", 64 * MI, 102, -1)),
                                        ("cgroup", helpers.ResourceConfig(cpu_quota=-1, cpu_period=100000))]),
    # The pod's quota unchanged: only the container.
    (CPU_SET, CPU_SET, (300, 200), [("container", ("c-app", 30000, 0))]),
])
async def test_an_unlimited_cpu_quota_is_the_smallest_when_ordering_the_pod_cgroup_and_the_containers(
        target: helpers.ResourceConfig, current: helpers.ResourceConfig, limit: tuple[int, int],
        expected: list[tuple[str, Any]]) -> None:
    """Upstream doPodResizeAction compares the int64 quotas: -1 grows to any limit and any limit shrinks to -1."""
    from kopflet.kuberuntime import resize

    syncer, log = order_syncer(target, current)
    desired, actuated = limit
    actions = resize.ResizeActions(cpu_updates=(update(resize.CPU, resize.Values(cpu_limit=desired),
                                                       resize.Values(cpu_limit=actuated)),))
    result = await resize_with(syncer, actions)
    assert result.resize_error == ""
    assert log == expected


POD_64 = helpers.ResourceConfig(cpu_shares=102, memory=64 * MI)
POD_96 = helpers.ResourceConfig(cpu_shares=102, memory=96 * MI)


async def test_pod_level_resources_lowered_alone_are_written_without_the_usage_check() -> None:
    """Upstream validatePodResizeAction runs for container memory updates and restarts, not UpdatePodLevelResources
    alone: the pod cgroup's lower limit is written (after the containers) and the kernel has the last word."""
    from kopflet.kuberuntime import resize

    syncer, log = order_syncer(POD_64, POD_96, pod_usage=80 * MI)
    result = await resize_with(syncer, resize.ResizeActions(update_pod_level_resources=True))
    assert result.resize_error == ""
    assert log == [("runtime", ("sb", 64 * MI, 102, 0)), ("cgroup", helpers.ResourceConfig(memory=64 * MI))]


@pytest.mark.parametrize(("actions", "pod_usage", "error", "usage_read"), [
    # A container's memory changing in place: the pod limit is checked against the pod's usage.
    ("container", 80 * MI, "cannot decrease memory limits: attempting to set pod memory limit (67108864) below "
                           "current usage (83886080)", True),
    ("container", 10 * MI, "", True),
    ("container", None, 'unable to read memory usage for pod "p_ns(u)"', True),
    # A restart for resize (UpdatePodResources): checked too.
    ("restart", 80 * MI, "cannot decrease memory limits: attempting to set pod memory limit (67108864) below "
                         "current usage (83886080)", True),
    # Pod-level only: not checked, not read.
    ("pod-level", None, "", False),
])
async def test_the_pod_memory_limit_is_checked_against_its_usage_when_upstream_checks_it(
        actions: str, pod_usage: int | None, error: str, usage_read: bool) -> None:
    from kopflet.kuberuntime import resize

    syncer, log = order_syncer(POD_64, POD_96, pod_usage=pod_usage, container_usage=MI)
    cpu_only = update(resize.CPU, resize.Values(cpu_request=200), resize.Values(cpu_request=100))
    chosen = {"container": resize.ResizeActions(memory_updates=(update(
                  resize.MEMORY, resize.Values(memory_request=32 * MI), resize.Values(memory_request=16 * MI)),)),
              "restart": resize.ResizeActions(update_pod_resources=True, cpu_updates=(cpu_only,)),
              "pod-level": resize.ResizeActions(update_pod_level_resources=True)}[actions]
    result = await resize_with(syncer, chosen)
    assert result.resize_error == error
    assert any(entry[0] == "usage" for entry in log) is usage_read
    if error:
        assert [entry for entry in log if entry[0] != "usage"] == []  # refused before anything changed


# ------------------------------------------------------------------------- the user namespace manager

U = 65536
SUPPORTED = StatusCri((cri.RuntimeHandler(name="", user_namespaces=True),))


Managed = tuple[PodSyncer, FakeRecorder, list[cri.PodSandboxConfig]]


def managed_syncer(tmp_path: Path, runtime_cri: StatusCri, *, max_pods: int = 110,
                   mappings: tuple[int, int] | None = None) -> Managed:
    """A syncer with a user namespace manager on `tmp_path` that stops at RunPodSandbox, keeping its config."""
    syncer, recorder = userns_syncer(runtime_cri)
    syncer.layout = Layout(str(tmp_path))
    syncer.userns = UsernsManager(syncer.layout, max_pods=max_pods, kubelet_mappings=mappings, start=lambda _n: 2)
    configs: list[cri.PodSandboxConfig] = []

    async def ensure_pod_cgroup(pod: Pod, result: Any) -> bool:
        return True

    async def create_sandbox(pod: Pod, config: cri.PodSandboxConfig, result: Any) -> str:
        configs.append(config)
        return ""

    syncer.ensure_pod_cgroup, syncer.create_sandbox = ensure_pod_cgroup, create_sandbox  # type: ignore[method-assign]
    return syncer, recorder, configs


async def test_a_hostusers_false_pod_gets_its_own_range_when_the_runtime_supports_it(tmp_path: Path) -> None:
    """Upstream GetOrCreateUserNamespaceMappings: mode POD, one 65536-ID mapping for UIDs and GIDs, recorded in
    the pod's directory; the next sync (and every container) gets the same."""
    syncer, recorder, configs = managed_syncer(tmp_path, SUPPORTED)
    actions = reconciler.PodActions(create_sandbox=True, containers_to_start=("app",))
    for _ in range(2):
        result = await syncer.sync(userns_pod(False), RuntimePodStatus(uid="u"), actions)
        assert not result.sandbox_error and not recorder.events
    ids = (cri.IDMapping(host_id=3 * U, container_id=0, length=U),)
    assert [_sandbox_user_namespace(c) for c in configs] == [cri.UserNamespace(mode=cri.NamespaceMode.POD,
                                                                               uids=ids, gids=ids)] * 2
    assert (tmp_path / "pods" / "u" / "userns").exists()


async def test_no_range_is_allocated_on_a_runtime_without_user_namespaces(tmp_path: Path) -> None:
    syncer, _, configs = managed_syncer(tmp_path, StatusCri())
    actions = reconciler.PodActions(create_sandbox=True, containers_to_start=("app",))
    result = await syncer.sync(userns_pod(False), RuntimePodStatus(uid="u"), actions)
    assert result.sandbox_error == NOT_SUPPORTED and not configs
    assert syncer.userns is not None and not syncer.userns.allocations.used_by
    assert not (tmp_path / "pods" / "u" / "userns").exists()


async def test_no_range_left_fails_the_sandbox(tmp_path: Path) -> None:
    syncer, recorder, configs = managed_syncer(tmp_path, SUPPORTED, max_pods=1, mappings=(U, U))
    assert syncer.userns is not None
    syncer.userns.get_or_create("other")
    actions = reconciler.PodActions(create_sandbox=True, containers_to_start=("app",))
    result = await syncer.sync(userns_pod(False), RuntimePodStatus(uid="u"), actions)
    message = ("Failed to create pod sandbox: create user namespace: could not find an empty slot to allocate a user "
               "namespace")
    assert result.sandbox_error == message and not configs
    assert recorder.events == [("Warning", "FailedCreatePodSandBox", message, None, False)]


@pytest.mark.parametrize("host_users", [None, True])
async def test_host_users_pods_get_no_range(tmp_path: Path, host_users: bool | None) -> None:
    syncer, _, configs = managed_syncer(tmp_path, SUPPORTED)
    actions = reconciler.PodActions(create_sandbox=True, containers_to_start=("app",))
    await syncer.sync(userns_pod(host_users), RuntimePodStatus(uid="u"), actions)
    assert [_sandbox_user_namespace(c) for c in configs] == [cri.UserNamespace(mode=cri.NamespaceMode.NODE)]
    assert syncer.userns is not None and not syncer.userns.allocations.used_by


class Forgets:
    """The parts remove_pod and release_volumes ask to forget a pod."""

    async def cleanup(self, uid: str) -> None:
        pass

    def remove(self, uid: str) -> None:
        pass


@pytest.mark.parametrize("how", ["terminated", "removed"])
async def test_the_range_is_freed_when_the_pod_terminates_or_goes(tmp_path: Path, how: str) -> None:
    """Upstream SyncTerminatedPod releases it; kopflet's removal of a pod (its teardown) too."""
    syncer, _, _ = managed_syncer(tmp_path, SUPPORTED)
    assert syncer.userns is not None
    syncer.userns.get_or_create("u")
    syncer.volumes = syncer.cgroups = syncer.allocations = Forgets()  # type: ignore[assignment]
    if how == "terminated":
        await syncer.release_volumes("u")
    else:
        await syncer.remove_pod(RuntimePodStatus(uid="u"), "u")
    assert not syncer.userns.allocations.used_by
    assert not (tmp_path / "pods" / "u" / "userns").exists()


# --------------------------------------------------------------- podPidsLimit: pids.max of a new pod cgroup

class RecordingCgroups:
    """No pod cgroup yet; `apply` records what the new one is made with."""

    def __init__(self) -> None:
        self.applied: list[tuple[str, helpers.ResourceConfig]] = []
        self.lock = asyncio.Lock()

    def exists(self, name: str) -> bool:
        return False

    def apply(self, name: str, config: helpers.ResourceConfig) -> None:
        self.applied.append((name, config))


class ActuatedAllocations:
    def actuation(self, uid: str) -> object:
        return object()  # recorded already: nothing to initialise


@pytest.mark.parametrize(("limit", "pids_max"), [(-1, None), (0, None), (1, 1), (1024, 1024)])
async def test_a_new_pod_cgroup_gets_the_pod_pids_limit(limit: int, pids_max: int | None) -> None:
    """Upstream podContainerManager.EnsureExists: PidsLimit = podPidsLimit when it is above 0; -1 (the default) and
    0 leave pids.max to the kubepods limit above."""
    from kopflet.config.settings import AgentConfig
    from kopflet.kuberuntime.executor import SyncResult

    syncer, _, recorder = make_syncer({})
    cgroups = RecordingCgroups()
    syncer.cfg = AgentConfig(node_name="n", pod_pids_limit=limit)
    syncer.cgroups, syncer.allocations = cgroups, ActuatedAllocations()  # type: ignore[assignment]
    syncer.before_pod_cgroup = None
    assert await syncer.ensure_pod_cgroup(make_pod(), SyncResult())
    [(name, config)] = cgroups.applied
    assert name == helpers.pod_cgroup_parent(make_pod())
    assert config.pids_limit == pids_max
    assert config == dataclasses.replace(syncer.pod_cgroup_config(make_pod()), pids_limit=pids_max)
    # What a resize aims at never has it: upstream's resize writes cpu and memory only.
    assert syncer.pod_cgroup_config(make_pod()).pids_limit is None
    assert recorder.events == []
    if pids_max is not None:
        assert helpers.cgroup_v2_files(config)["pids.max"] == str(pids_max)
        assert helpers.cgroup_v1_files(config)["pids"] == {"pids.max": str(pids_max)}


# --------------------------------------------------------------------------------- cgroupsPerQOS off


async def test_without_cgroups_per_qos_no_pod_cgroup_is_made() -> None:
    """upstream podContainerManagerNoop.EnsureExists: nothing; the QoS tiers are not updated either."""
    from kopflet.cm.cgroup_names import CgroupLayout
    from kopflet.config.settings import AgentConfig
    from kopflet.kuberuntime.executor import SyncResult

    syncer, _, recorder = make_syncer({})
    cgroups = RecordingCgroups()
    syncer.cfg = AgentConfig(node_name="n", cgroups_per_qos=False, enforce_node_allocatable=())
    syncer.cgroups, syncer.allocations = cgroups, ActuatedAllocations()  # type: ignore[assignment]
    syncer.cgroup_layout = CgroupLayout(cgroups_per_qos=False)
    updated: list[bool] = []

    async def update_qos() -> None:
        updated.append(True)

    syncer.before_pod_cgroup = update_qos
    assert await syncer.ensure_pod_cgroup(make_pod(), SyncResult())
    assert cgroups.applied == [] and updated == [] and recorder.events == []


async def test_without_cgroups_per_qos_a_resize_changes_the_containers_only() -> None:
    """upstream's noop pod container manager: GetPodCgroupConfig reads nothing (the allocated resources stand),
    SetPodCgroupConfig writes nothing. With the pod's resources taken as they are allocated nothing differs, so
    resizeContainers has no pod cgroup write to make and the runtime is not told (upstream itself dereferences the
    noop manager's nil config here)."""
    from kopflet.cm.cgroup_names import CgroupLayout

    syncer, log, allocations = resize_syncer([])
    syncer.cgroup_layout = CgroupLayout(cgroups_per_qos=False)
    result = await run_resize(syncer)
    assert result.resize_error == ""
    assert log == []  # no read-back, no cgroup write, nothing to tell the runtime
    assert len(allocations.pod_level) == 1  # the pod-level resources count as actuated


class FailingCgroups(RecordingCgroups):
    def apply(self, name: str, config: helpers.ResourceConfig) -> None:
        raise OSError(28, "No space left on device")


async def test_a_pod_cgroup_that_cannot_be_made_is_the_syncs_one_failure() -> None:
    """Upstream's syncPod stops at the pod cgroup, before it waits for the volumes: with both failing, the cgroup's
    FailedCreatePodSandBox is the one event and error (the volumes, set up beside it, report nothing)."""
    syncer, recorder = userns_syncer(StatusCri())
    syncer.cgroups = FailingCgroups()  # type: ignore[assignment]
    syncer.volumes = FailingVolumes(VolumeError('configmap "c" not found'))  # type: ignore[assignment]
    actions = reconciler.PodActions(create_sandbox=True, containers_to_start=("app",))
    result = await syncer.sync(userns_pod(None), RuntimePodStatus(uid="u"), actions)
    assert result.volume_error == "" and result.sandbox_error.startswith(
        "Failed to create pod sandbox: failed to ensure that the pod cgroup exists: ")
    assert [(type_, reason) for type_, reason, *_ in recorder.events] == [("Warning", "FailedCreatePodSandBox")]
    assert [(step.kind, step.error) for step in result.steps] == [("sandbox", "FailedCreatePodSandBox")]


class CountingVolumes(NoVolumes):
    def __init__(self) -> None:
        self.setups = 0

    async def setup(self, pod: Pod) -> dict[str, Any]:
        self.setups += 1
        return await super().setup(pod)


@pytest.mark.parametrize("cgroups_fail", [False, True])
async def test_a_running_pods_sync_makes_the_cgroup_then_the_volumes(cgroups_fail: bool) -> None:
    """No sandbox to create: upstream's order, one after the other; a pod cgroup that cannot be made stops the sync
    before the volumes."""
    syncer, _ = userns_syncer(StatusCri())
    syncer.cgroups = FailingCgroups() if cgroups_fail else RecordingCgroups()  # type: ignore[assignment]
    syncer.volumes = volumes = CountingVolumes()  # type: ignore[assignment]
    result = await syncer.sync(userns_pod(None), RuntimePodStatus(uid="u"), reconciler.PodActions())
    assert volumes.setups == (0 if cgroups_fail else 1)
    assert bool(result.sandbox_error) == cgroups_fail and not result.volume_error
