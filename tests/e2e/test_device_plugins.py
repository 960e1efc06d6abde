"""Device plugins on the real stack (upstream pkg/kubelet/cm/devicemanager at v1.37.1) with upstream's own sample
device plugin (k8s.io/kubernetes/test/images/sample-device-plugin, built by devstack/build-binaries.sh): it registers
``example.com/resource`` with two devices, Dev-1 and Dev-2, on kopflet's ``<root-dir>/device-plugins/kubelet.sock``;
the Node shows them; a pod asking for one runs with the mount the plugin's Allocate answer gives (``/tmp/Dev-N``, an
empty file the plugin creates on the host); the allocation is in ``kubelet_internal_checkpoint`` and survives the
agent's restart (the plugin sees kubelet.sock created again and registers again); a pod asking for more than is left
is rejected with upstream's reason; when the plugin stops, its devices turn unhealthy (allocatable 0 at the next
status update) and, after upstream's 5 minute grace period, the resource is dropped (capacity 0). The pod-resources
API (``<root-dir>/pod-resources/kubelet.sock``) lists the pod's device ID under its container and the healthy
devices as allocatable, without topology (the sample plugin reports none), and none once the plugin is gone.

The sample plugin registers on the fixed ``/var/lib/kubelet/device-plugins/kubelet.sock`` (pluginapi.KubeletSocket)
and skips registering when ``/var/lib/kubelet/device-plugins/DEPRECATION`` exists; it serves on
``$PLUGIN_SOCK_DIR/dp.<unix time>`` and sends that name relative to the directory. So it runs in a mount namespace
of its own (``unshare --mount``) in which kopflet's ``<root-dir>/device-plugins`` is bind-mounted over
``/var/lib/kubelet/device-plugins``: the machine's own kubelet (if any) never sees it. No CDI (``CDI_ENABLED`` unset).

Not run by the helper that wrote them (the stack belongs to another process); run with
``python -m devstack run -- pytest -q tests/e2e/test_device_plugins.py`` (or ``make test``).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from devstack.layout import Layout
from kopflet import paths
from kopflet.apis.podresources.proto.v1 import api_pb2 as v1
from kopflet.apis.podresources.proto.v1 import api_pb2_grpc as v1_grpc
from kopflet.cm.devicemanager import checkpoint, devices
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent, agent_with
from tests.e2e.test_pod_lifecycle import container, is_ready, pod_manifest, wait_gone, wait_pod, wait_served

RESOURCE = "example.com/resource"
ROOT_DIR = Path(os.environ.get("KOPFLET_ROOT_DIR", paths.DEFAULT_ROOT_DIR))
SOCKET_DIR = ROOT_DIR / paths.DEVICE_PLUGINS_DIR_NAME
CHECKPOINT = SOCKET_DIR / checkpoint.CHECKPOINT_NAME
UPSTREAM_DIR = "/var/lib/kubelet/device-plugins"
STATUS_WAIT = 60.0  # nodeStatusUpdateFrequency is 10 s
POD_RESOURCES = paths.Layout(str(ROOT_DIR)).pod_resources_socket

running = contextlib.contextmanager(agent_with)


class SamplePlugin:
    """Upstream's sample device plugin, in a mount namespace where kopflet's socket directory is upstream's."""

    def __init__(self, layout: Layout, log: Path) -> None:
        self.binary = layout.bin_dir / "sample-device-plugin"
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        assert self.binary.exists(), f"{self.binary} missing: run devstack/build-binaries.sh"
        SOCKET_DIR.mkdir(parents=True, exist_ok=True)
        script = (f'mkdir -p {UPSTREAM_DIR} && mount --bind "$KOPFLET_DP_DIR" {UPSTREAM_DIR} && '
                  f'exec "$SAMPLE_DEVICE_PLUGIN"')
        env = {**os.environ, "KOPFLET_DP_DIR": str(SOCKET_DIR), "SAMPLE_DEVICE_PLUGIN": str(self.binary),
               "PLUGIN_SOCK_DIR": UPSTREAM_DIR}
        env.pop("CDI_ENABLED", None)
        env.pop("REGISTER_CONTROL_FILE", None)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                ["setpriv", "--pdeathsig", "KILL", "--", "unshare", "--mount", "--propagation", "private", "--",
                 "sh", "-c", script], env=env, stdout=out, stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        """SIGTERM: the stub stops its server and removes its socket, so kopflet's ListAndWatch ends."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def plugin(layout: Layout, tmp_path: Path) -> Iterator[SamplePlugin]:
    p = SamplePlugin(layout, tmp_path / "sample-device-plugin.log")
    try:
        yield p
    finally:
        p.stop()


def wait_for(check: Callable[[], bool], what: str, timeout: float = STATUS_WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.5)


def node_resource(admin: Kubectl, node: str) -> tuple[str | None, str | None]:
    status = admin.json("get", "node", node)["status"]
    return status.get("capacity", {}).get(RESOURCE), status.get("allocatable", {}).get(RESOURCE)


def device_pod(name: str, namespace: str, node: str, count: int = 1) -> str:
    resources = {"requests": {RESOURCE: str(count)}, "limits": {RESOURCE: str(count)}}
    return pod_manifest(name, namespace, node, [container("main", "ls /tmp; sleep 3600", resources=resources)],
                        terminationGracePeriodSeconds=0)


def mounted_devices(admin: Kubectl, namespace: str, pod: str) -> list[str]:
    out = admin.run("exec", "-n", namespace, pod, "-c", "main", "--", "sh", "-c", "ls /tmp").stdout
    return sorted(name for name in out.split() if name.startswith("Dev-"))


def read_checkpoint() -> checkpoint.Checkpoint:
    """The file as a v1.37 kubelet reads it (its checksum verified)."""
    return checkpoint.decode(CHECKPOINT.read_bytes())


@contextlib.contextmanager
def pod_resources() -> Iterator[v1_grpc.PodResourcesListerStub]:
    with grpc.insecure_channel(f"unix://{POD_RESOURCES}") as channel:
        yield v1_grpc.PodResourcesListerStub(channel)


def listed_devices(client: v1_grpc.PodResourcesListerStub, namespace: str) -> dict[str, list[tuple[str, Any]]]:
    """This namespace's pods in List: pod name -> (container, [(resource, device IDs, NUMA nodes or None)])."""
    answer = client.List(v1.ListPodResourcesRequest(), timeout=10)
    return {p.name: [(c.name, [(d.resource_name, list(d.device_ids),
                                [n.ID for n in d.topology.nodes] if d.HasField("topology") else None)
                               for d in c.devices]) for c in p.containers]
            for p in answer.pod_resources if p.namespace == namespace}


def allocatable_devices(client: v1_grpc.PodResourcesListerStub) -> list[tuple[str, list[str], Any]]:
    answer = client.GetAllocatableResources(v1.AllocatableResourcesRequest(), timeout=10)
    return sorted((d.resource_name, list(d.device_ids),
                   [n.ID for n in d.topology.nodes] if d.HasField("topology") else None)
                  for d in answer.devices if d.resource_name == RESOURCE)


def rejected(pod: dict[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") == "Failed"


def test_the_sample_device_plugin_end_to_end(admin: Kubectl, layout: Layout, namespace: str, tmp_path: Path,
                                             plugin: SamplePlugin) -> None:
    node = layout.node_name
    with running(layout, tmp_path, "") as agent:
        try:
            assert (SOCKET_DIR / devices.KUBELET_SOCKET).is_socket()
            plugin.start()
            agent.wait_for(r"Device plugin connected: example\.com/resource", timeout=60)
            wait_for(lambda: node_resource(admin, node) == ("2", "2"), "example.com/resource 2/2 on the Node")

            # A pod asking for one device runs with the Allocate answer's mount (/tmp/Dev-N from the host).
            admin.apply(device_pod("one", namespace, node))
            one = wait_pod(admin, namespace, "one", is_ready, what="Ready")
            held = mounted_devices(admin, namespace, "one")
            assert len(held) == 1 and held[0] in ("Dev-1", "Dev-2")
            uid = one["metadata"]["uid"]
            entries = [(e.pod_uid, e.container_name, e.resource_name) for e in read_checkpoint().entries or ()]
            assert entries == [(uid, "main", RESOURCE)]
            assert read_checkpoint().registered == {RESOURCE: ("Dev-1", "Dev-2")}

            # The pod-resources API: the pod's device under its container, both healthy devices allocatable (capacity,
            # not what is free), no topology (the sample plugin reports none: upstream lists them without).
            with pod_resources() as client:
                assert listed_devices(client, namespace)["one"] == [("main", [(RESOURCE, held, None)])]
                assert allocatable_devices(client) == [(RESOURCE, ["Dev-1"], None), (RESOURCE, ["Dev-2"], None)]

            # Two more than there are left: rejected as upstream rejects it.
            admin.apply(device_pod("two", namespace, node, count=2))
            two = wait_pod(admin, namespace, "two", rejected, what="rejected")
            assert two["status"]["reason"] == "UnexpectedAdmissionError"
            assert two["status"]["message"] == (
                "Pod was rejected: Allocate failed due to requested number of devices unavailable for "
                f"{RESOURCE}. Requested: 2, Available: 1, which is unexpected")

            # The agent restarts: the allocation comes back from the checkpoint, the plugin registers again (it
            # sees kubelet.sock created anew), the pod is not restarted and keeps its device.
            before = [(e.pod_uid, e.container_name, e.resource_name, dict(e.device_ids or {}))
                      for e in read_checkpoint().entries or ()]
            assert agent.stop() == 0
            again = Agent(layout, tmp_path / "agent-again.log")
            again.start()
            try:
                again.wait_for(r"Activity 'start_agent' succeeded")
                again.wait_for(r"Device plugin connected: example\.com/resource", timeout=90)
                one = wait_pod(admin, namespace, "one", is_ready, what="Ready after the restart")
                assert one["status"]["containerStatuses"][0]["restartCount"] == 0
                wait_served(admin, namespace, "one", "main")
                assert mounted_devices(admin, namespace, "one") == held
                assert [(e.pod_uid, e.container_name, e.resource_name, dict(e.device_ids or {}))
                        for e in read_checkpoint().entries or ()] == before
                wait_for(lambda: node_resource(admin, node) == ("2", "2"), "2/2 after the restart")

                # The other device goes to a new pod, never the held one.
                admin.apply(device_pod("other", namespace, node))
                wait_pod(admin, namespace, "other", is_ready, what="Ready")
                other = mounted_devices(admin, namespace, "other")
                assert len(other) == 1 and other != held

                # Deleted, the first pod gives its device back for the next pod.
                admin.run("delete", "pod", "one", "-n", namespace, "--wait=false")
                wait_gone(admin, namespace, "one")
                admin.apply(device_pod("third", namespace, node))
                wait_pod(admin, namespace, "third", is_ready, what="Ready with the freed device")
                assert mounted_devices(admin, namespace, "third") == held

                # The plugin stops: its devices are unhealthy at once (allocatable 0, capacity still 2 during
                # upstream's 5 minute grace period); running pods keep running.
                plugin.stop()
                wait_for(lambda: node_resource(admin, node) == ("2", "0"), "allocatable 0 once the plugin is gone")
                assert is_ready(admin.json("get", "pod", "third", "-n", namespace))
                with pod_resources() as client:
                    # nothing allocatable (its devices are unhealthy); the running pod still holds its device
                    assert allocatable_devices(client) == []
                    assert listed_devices(client, namespace)["third"] == [("main", [(RESOURCE, held, None)])]
                admin.apply(device_pod("late", namespace, node))
                late = wait_pod(admin, namespace, "late", rejected, what="rejected without healthy devices")
                assert late["status"]["reason"] in ("UnexpectedAdmissionError", f"OutOf{RESOURCE}")
            finally:
                admin.run("delete", "pods", "--all", "-n", namespace, "--wait=true", "--timeout=60s", check=False)
                assert again.stop() == 0
        finally:
            admin.run("delete", "pods", "--all", "-n", namespace, "--wait=true", "--timeout=60s", check=False)


def test_a_stopped_plugins_resource_is_dropped_after_the_grace_period(admin: Kubectl, layout: Layout,
                                                                      tmp_path: Path, plugin: SamplePlugin) -> None:
    """Upstream's endpointStopGracePeriod (5 minutes): then GetCapacity drops the resource and the Node shows 0
    (not absent: a resource a device plugin advertised stays at 0 in the Node's status). Takes about 6 minutes."""
    node = layout.node_name
    with running(layout, tmp_path, ""):
        plugin.start()
        wait_for(lambda: node_resource(admin, node) == ("2", "2"), "2/2 on the Node")
        plugin.stop()
        stopped = time.monotonic()
        wait_for(lambda: node_resource(admin, node) == ("2", "0"), "allocatable 0 once the plugin is gone")
        wait_for(lambda: node_resource(admin, node) == ("0", "0"), "capacity 0 after the grace period",
                 timeout=devices.ENDPOINT_STOP_GRACE_PERIOD + 2 * STATUS_WAIT)
        assert time.monotonic() - stopped >= devices.ENDPOINT_STOP_GRACE_PERIOD - 1
        assert read_checkpoint().registered == {}
