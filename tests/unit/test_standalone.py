"""Standalone mode's seams (upstream's nil kubeClient): the client that sends nothing, the parts that look at it and
leave the apiserver alone, the Node that starts only what needs no apiserver, and the start-up loop run without Kopf.

No stack: the client raises if anything asks it, so a part that should have skipped the apiserver fails the test.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kopf
import pytest

from handlers import standalone, startup
from kopflet.api.spec import pod_from_body
from kopflet.client.events import EventRecorder, event_log_line
from kopflet.client.kubeapi import API_ERRORS, KubeApiError
from kopflet.client.standalone import NOT_SUPPORTED, StandaloneClient, StandaloneError, is_standalone
from kopflet.config import modes
from kopflet.config.file_source import StaticPodSource
from kopflet.config.settings import AgentConfig
from kopflet.envvars import container_env
from kopflet.logs.verbosity import v
from kopflet.nodestatus.heartbeat import NodeAgent
from kopflet.nodestatus.setters import MachineFacts
from kopflet.pods.housekeeping import Housekeeping
from kopflet.status.manager import StatusManager
from kopflet.volumes import plugins
from kopflet.volumes.plugins import VolumeError
from tests.unit.test_housekeeping_userns import Relist, Teardown
from tests.unit.test_node import node

FACTS = MachineFacts(cpus=2, memory_bytes=4 << 30, ephemeral_storage_bytes=20 << 30)


def pod(spec: Mapping[str, Any], **meta: Any) -> Any:
    return pod_from_body({"metadata": {"name": "p", "namespace": "ns", "uid": "u1", **meta},
                          "spec": {"containers": [{"name": "main", "image": "busybox"}], **spec}})


# ------------------------------------------------------------------------------------------------- the client

async def test_the_standalone_client_opens_nothing_and_refuses_every_request() -> None:
    api = StandaloneClient(user_agent="kopflet/n")
    await api.open()
    assert api._session is None  # no connection pool, no TLS context read
    with pytest.raises(StandaloneError) as info:
        await api.list_pods("spec.nodeName=n")
    assert str(info.value) == f"GET /api/v1/pods: {NOT_SUPPORTED}"
    assert isinstance(info.value, API_ERRORS) and isinstance(info.value, KubeApiError)  # a refusal to the callers
    assert info.value.message == "not supported due to running kubelet in standalone mode"  # volume_host.go
    with pytest.raises(StandaloneError):
        await api.get_config_map("ns", "cm")
    with pytest.raises(StandaloneError):
        async for _ in api.watch("/api/v1/services", "0"):
            pass
    await api.renew_connections()
    await api.close()


def test_is_standalone_is_upstreams_nil_client_check() -> None:
    assert is_standalone(StandaloneClient())
    assert not is_standalone(object())  # a real client, or a test's fake


# ------------------------------------------------------------------------------------------------- the parts

PREVIOUS = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}


async def test_the_status_manager_keeps_the_status_and_sends_nothing() -> None:
    """upstream status manager Start without a client: not started; the status stays in its cache."""
    status = StatusManager(StandaloneClient())
    desired = {**PREVIOUS, "phase": "Running"}
    assert await status.write("ns", "p", "u1", PREVIOUS, desired, precondition=False) == desired
    assert await status.write("ns", "p", "u1", desired, dict(desired)) is None  # nothing changed
    assert not status.unsent("u1")  # nothing for its loop to send again
    assert await status.delete("ns", "p", "u1") is False  # no final DELETE


async def test_events_go_to_the_log_only(caplog: pytest.LogCaptureFixture) -> None:
    recorder = EventRecorder(StandaloneClient(), "edge-1")
    with caplog.at_level(v(3), logger="kopflet.client.events"):
        recorder.pod_event(pod({}), "Normal", "Started", "Started container main", container="main")
        recorder.node_event("Normal", "Starting", "Starting kubelet.")
    assert not recorder._tasks  # nothing queued for the apiserver
    await recorder.flush()
    assert [r.getMessage() for r in caplog.records] == [
        'Event occurred object="ns/p" fieldPath="spec.containers{main}" kind="Pod" apiVersion="v1" type="Normal" '
        'reason="Started" message="Started container main"',
        'Event occurred object="edge-1" fieldPath="" kind="Node" apiVersion="v1" type="Normal" reason="Starting" '
        'message="Starting kubelet."']


def test_the_event_line_quotes_as_go_does() -> None:
    line = event_log_line("default", {"kind": "Node", "apiVersion": "v1", "name": "n"}, "Warning", "SystemOOM",
                          'victim "sh"\nnext')
    assert line.endswith('message="victim \\"sh\\"\\nnext"')


class Workers:
    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []

    def update(self, body: Mapping[str, Any]) -> None:
        self.log.append(("update", body["metadata"]["name"]))

    def deleted(self, body: Mapping[str, Any]) -> None:
        self.log.append(("deleted", body["metadata"]["name"]))

    def status_lost(self, uid: str) -> None:
        self.log.append(("status_lost", uid))


async def test_static_pods_run_without_mirror_pods(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """upstream's mirror client without an apiserver client does nothing: the pods start and stop, no request."""
    (tmp_path / "web.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: web}\n"
                                       "spec: {containers: [{name: c, image: busybox}]}\n")
    workers = Workers()
    source = StaticPodSource(AgentConfig(node_name="edge-1", pod_manifest_path=str(tmp_path)), StandaloneClient(),
                             workers, lambda: "node-uid")  # a Node UID: only standalone mode keeps the mirrors off
    assert source.mirrors is False
    with caplog.at_level(logging.WARNING):
        await source.scan()
        (tmp_path / "web.yaml").unlink()
        await source.scan()
    assert workers.log == [("update", "web-edge-1"), ("deleted", "web-edge-1")]
    assert caplog.records == []  # no "mirror pod ...: <error>" from a request that should not have been made


async def test_housekeeping_lists_nothing_and_removes_every_pod_no_worker_has(tmp_path: Path) -> None:
    """upstream HandlePodCleanups: the pod manager (the static pods) is all there is."""
    from kopflet.paths import Layout
    teardown = Teardown()
    keeper = Housekeeping(StandaloneClient(), Relist(["static", "stray"]), {"static"}, teardown,  # type: ignore[arg-type]
                          Layout(str(tmp_path), pod_log_root=str(tmp_path / "logs")), "spec.nodeName=edge-1")
    assert await keeper.cleanup_orphans() == 1
    assert teardown.pods == ["stray"]


async def test_admission_reads_no_node() -> None:
    """upstream GetNode without a client: initialNode, the labels the node would register with."""
    agent = NodeAgent(AgentConfig(node_name="edge-1", node_labels={"tier": "edge"}), StandaloneClient(),
                      None, "containerd://1.7", FACTS)  # type: ignore[arg-type]
    info = await agent.admission_info()  # the client raises if asked
    assert info.labels is not None and info.labels["tier"] == "edge"
    assert info.labels["kubernetes.io/hostname"] == "edge-1"


@pytest.mark.parametrize(("container", "refusal"), [
    ({}, ""),
    ({"env": [{"name": "A", "value": "a"}, {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]},
     ""),
    ({"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k", "optional": True}}}]},
     "couldn't get secret ns/s, no kubeClient defined"),  # optional or not: upstream checks the client first
    ({"env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]},
     "couldn't get configMap ns/c, no kubeClient defined"),
    # envFrom before env, in order
    ({"env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}],
      "envFrom": [{"secretRef": {"name": "s"}}, {"configMapRef": {"name": "d"}}]},
     "couldn't get secret ns/s, no kubeClient defined"),
])
def test_the_environment_cannot_reference_configmaps_or_secrets(container: dict[str, Any], refusal: str) -> None:
    p = pod({"containers": [{"name": "main", "image": "busybox", **container}]})
    assert container_env.standalone_refusal(p, p.spec.containers[0]) == refusal


@pytest.mark.parametrize(("volumes", "refusal"), [
    ([], ""),
    ([{"name": "scratch", "emptyDir": {}}, {"name": "host", "hostPath": {"path": "/etc"}},
      {"name": "info", "downwardAPI": {"items": [{"path": "n", "fieldRef": {"fieldPath": "metadata.name"}}]}}], ""),
    ([{"name": "scratch", "emptyDir": {}}, {"name": "conf", "configMap": {"name": "c", "optional": True}}],
     'MountVolume.SetUp failed for volume "conf" : not supported due to running kubelet in standalone mode'),
    ([{"name": "creds", "secret": {"secretName": "s"}}],
     'MountVolume.SetUp failed for volume "creds" : not supported due to running kubelet in standalone mode'),
    # projected.go collectData: no client, no projected volume at all (a downwardAPI source alone too)
    ([{"name": "all", "projected": {"sources": [{"downwardAPI": {"items": [
        {"path": "n", "fieldRef": {"fieldPath": "metadata.name"}}]}}]}}],
     'MountVolume.SetUp failed for volume "all" : cannot setup projected volume all because kube client is not '
     'configured'),
])
def test_volumes_that_need_the_apiserver(volumes: list[dict[str, Any]], refusal: str) -> None:
    assert plugins.standalone_refusal(pod({"volumes": volumes})) == refusal


# ------------------------------------------------------------------------------------------------- the Node

def test_a_node_without_credentials_is_standalone() -> None:
    n = node("edge-1", "/var/lib/a", standalone=True, pod_manifest_path="/etc/kubernetes/manifests")
    assert n.standalone and isinstance(n.api, StandaloneClient)
    assert n.executor.services is None  # upstream: no Service lister, no service link variables
    assert n.status.standalone and n.recorder._sink is False
    assert n.static_pods is not None and n.static_pods.mirrors is False
    cluster = node("node-a", "/var/lib/b", pod_manifest_path="/etc/kubernetes/manifests")
    assert not cluster.standalone and not is_standalone(cluster.api) and cluster.executor.services is cluster.services
    assert cluster.status.standalone is False and cluster.recorder._sink is True
    assert cluster.static_pods is not None and cluster.static_pods.mirrors is True


async def test_the_executor_asks_no_runtime_class_and_no_objects() -> None:
    n = node("edge-1", "/var/lib/a", standalone=True)
    assert await n.executor.runtime_handler(pod({"runtimeClassName": "gvisor"})) == ""  # the runtime's default
    p = pod({"containers": [{"name": "main", "image": "busybox", "envFrom": [{"configMapRef": {"name": "c"}}]}]})
    with pytest.raises(container_env.EnvError, match=r"^couldn't get configMap ns/c, no kubeClient defined$"):
        await n.executor.environment(p, p.spec.containers[0], None)  # type: ignore[arg-type]
    with pytest.raises(VolumeError, match=r'volume "conf" : not supported due to running kubelet in standalone'):
        await n.executor.volumes.setup(pod({"volumes": [{"name": "conf", "configMap": {"name": "c"}}]}))


async def _idle(*_: Any, **__: Any) -> None:
    await asyncio.Event().wait()


async def _nothing(*_: Any, **__: Any) -> Any:
    return None


async def test_start_runs_only_what_needs_no_apiserver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    from kopflet import node as node_module
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    n = node("edge-1", str(tmp_path), standalone=True, pod_manifest_path=str(manifests),
             authentication_token_webhook=False, authorization_mode="AlwaysAllow", anonymous_auth=True)
    n.cfg = dataclasses.replace(n.cfg, port=10250)  # served by the fake `serve` below: nothing is bound
    served: list[tuple[Any, Any]] = []

    async def serve(cfg: AgentConfig, backend: Any, authenticator: Any, authorizer: Any, **_: Any) -> None:
        served.append((authenticator, authorizer))

    monkeypatch.setattr(node_module, "serve", serve)
    monkeypatch.setattr(n, "_serving_tls", _nothing)
    for part, method in ((n.cpu_manager, "start"), (n.memory_manager, "start"), (n.device_manager, "start"),
                         (n.container_manager, "start"), (n.pod_resources, "start")):
        setattr(part, method, _nothing)
    ran: list[str] = []
    parts = {"services": n.services, "relist": n.relist, "heartbeat": n.heartbeat, "status": n.status,
             "housekeeping": n.housekeeping, "container_gc": n.container_gc, "image_gc": n.image_gc,
             "log_manager": n.log_manager, "eviction": n.eviction, "oom": n.oom, "qos": n.container_manager,
             "cpu_manager": n.cpu_manager, "memory_manager": n.memory_manager, "pod_certificates": n.pod_certificates,
             "trust_bundles": n.trust_bundles, "csi_node_info": n.csi_node_info, "plugin_manager": n.plugin_manager,
             "static_pods": n.static_pods}
    for name, part in parts.items():
        async def run(*_: Any, name: str = name, **__: Any) -> None:
            ran.append(name)
            await _idle()
        part.run = run  # type: ignore[method-assign]

    async def register() -> bool:
        raise AssertionError("a standalone node registered")
    n.heartbeat.try_register = register  # type: ignore[method-assign]
    try:
        with caplog.at_level(v(3)):
            await n.start()
            await asyncio.sleep(0)
        assert sorted(ran) == sorted(["relist", "housekeeping", "container_gc", "image_gc", "log_manager", "eviction",
                                      "oom", "qos", "cpu_manager", "memory_manager", "plugin_manager", "static_pods"])
        (authenticator, authorizer), = served
        assert authenticator.kube is None and authorizer.kube is None  # BuildAuth's nil client
        text = caplog.text
        assert "No API server defined - no node status update will be sent" in text
        assert "Kubernetes client is nil, not starting status manager" in text
        assert 'reason="Starting" message="Starting kubelet."' in text  # BirthCry, to the log
    finally:
        await n.stop(close_runtime=False)


# ------------------------------------------------------------------------------------------------- the entry

def test_the_entry_runs_kopfs_start_up_handlers_in_kopfs_order() -> None:
    from kopf._core.intents import causes
    registry = kopf.get_default_registry()._activities
    kopfs = [h.fn for h in registry.get_handlers(activity=causes.Activity.STARTUP)]
    assert list(standalone.STARTUP) == kopfs
    assert [h.fn for h in registry.get_handlers(activity=causes.Activity.CLEANUP)] == [standalone.CLEANUP]


class Steps:
    """Start-up handlers that record their calls and fail as told."""

    def __init__(self, failures: dict[str, list[BaseException]]) -> None:
        self.failures = failures
        self.calls: list[str] = []
        self.memo: kopf.Memo | None = None
        self.reached: dict[str, asyncio.Event] = {}

    def event(self, name: str) -> asyncio.Event:
        """Set once the handler `name` has been called."""
        return self.reached.setdefault(name, asyncio.Event())

    def handler(self, name: str) -> Any:
        async def step(*, settings: kopf.OperatorSettings, memo: kopf.Memo, logger: logging.Logger) -> None:
            self.calls.append(name)
            self.memo = memo
            self.event(name).set()
            if self.failures.get(name):
                raise self.failures[name].pop(0)
        step.__name__ = name
        return step

    async def cleanup(self, *, memo: kopf.Memo, logger: logging.Logger) -> None:
        self.calls.append("cleanup")


DECISION = modes.Decision(modes.Mode.STANDALONE)


async def test_a_temporary_error_is_tried_again_then_the_agent_runs_until_stopped() -> None:
    steps = Steps({"connect": [kopf.TemporaryError("not yet", delay=0)]})
    stopping = asyncio.Event()
    task = asyncio.create_task(standalone.run(DECISION, stopping=stopping, cleanup=steps.cleanup,
                                              handlers=(steps.handler("configure"), steps.handler("connect"),
                                                        steps.handler("start"))))
    await asyncio.wait_for(steps.event("start").wait(), 5)
    assert not task.done()  # it runs until asked to stop
    stopping.set()
    assert await task == 0
    assert steps.calls == ["configure", "connect", "connect", "start", "cleanup"]
    assert steps.memo is not None and steps.memo.get("mode_decision") is DECISION


async def test_a_permanent_error_stops_the_start_with_exit_status_1(caplog: pytest.LogCaptureFixture) -> None:
    steps = Steps({"connect": [kopf.PermanentError("container runtime unusable: too old")]})
    status = await standalone.run(DECISION, stopping=asyncio.Event(), cleanup=steps.cleanup,
                                  handlers=(steps.handler("connect"), steps.handler("start")))
    assert status == 1
    assert steps.calls == ["connect", "cleanup"]
    assert "failed to run Kubelet: connect: container runtime unusable: too old" in caplog.text


async def test_a_stop_while_waiting_to_try_again_stops_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(standalone, "RETRY_DELAY", 3600.0)
    steps = Steps({"connect": [RuntimeError("unexpected")]})  # Kopf: any other exception, tried again later
    stopping = asyncio.Event()
    task = asyncio.create_task(standalone.run(DECISION, stopping=stopping, cleanup=steps.cleanup,
                                              handlers=(steps.handler("connect"), steps.handler("start"))))
    await asyncio.wait_for(steps.event("connect").wait(), 5)
    stopping.set()
    assert await asyncio.wait_for(task, 5) == 0
    assert steps.calls == ["connect", "cleanup"]


async def test_configure_takes_the_mode_and_refuses_standalone_under_kopf(monkeypatch: pytest.MonkeyPatch) -> None:
    from handlers import configuring
    for name in ("KOPFLET_CONFIG", "NODE_NAME", "KOPFLET_NODE_NAME", "KOPFLET_NODE_IP"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KOPFLET_ARGS", "--hostname-override=edge-1 --node-ip=10.0.0.5 --pod-manifest-path=/m "
                                       "--authentication-token-webhook=false --authorization-mode=AlwaysAllow")
    monkeypatch.setattr(configuring, "client_sources", lambda environ=None: modes.ClientSources())
    log = logging.getLogger("test")
    memo = kopf.Memo(mode_decision=DECISION)  # handlers.standalone's
    await startup.configure(settings=kopf.OperatorSettings(), memo=memo, logger=log)
    assert memo.mode is modes.Mode.STANDALONE and memo.config.node_name == "edge-1"
    with pytest.raises(kopf.PermanentError, match=r"Standalone mode, no API client: .* not under kopf run"):
        await startup.configure(settings=kopf.OperatorSettings(), memo=kopf.Memo(), logger=log)  # kopf run's


async def test_start_agent_gives_a_standalone_node_no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    from handlers import configuring
    built: list[Any] = []

    class Node:
        def __init__(self, cfg: AgentConfig, *, credentials: Any, **_: Any) -> None:
            built.append(credentials)

        async def start(self) -> None:
            return None

    def no_login(*_: Any, **__: Any) -> Any:
        raise AssertionError("a standalone node logged in")

    async def host(cfg: AgentConfig) -> Any:
        return None

    monkeypatch.setattr(startup, "Node", Node)
    monkeypatch.setattr(startup.HostFacts, "read", host)
    monkeypatch.setattr(configuring, "connection_info", no_login)
    monkeypatch.setattr(startup.sdnotify, "notify_async", _nothing)
    memo = kopf.Memo(config=AgentConfig(node_name="edge-1"), mode=modes.Mode.STANDALONE, runtime=object(),
                     metrics=None)
    await startup.start_agent(settings=kopf.OperatorSettings(), memo=memo, logger=logging.getLogger("test"))
    assert built == [None]
