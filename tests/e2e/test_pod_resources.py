"""The pod-resources gRPC API on the real stack (upstream pkg/kubelet/apis/podresources at v1.37.1), asked over the
agent's real socket ``<root-dir>/pod-resources/kubelet.sock`` with a real gRPC client, as a monitoring agent
(node-exporter, a device plugin, topology-aware schedulers' exporters) asks it:

- with ``--cpu-manager-policy=static --reserved-cpus=0`` (the CPU manager's test's flags): GetAllocatableResources
  answers every online CPU but the reserved one; a Guaranteed pod with an integer CPU request shows its exclusive
  CPUs in List and Get, a Burstable pod on the shared pool shows none; a pod that succeeded is no longer listed and
  Get answers upstream's "pod <name> in namespace <namespace> not found" for it as for an unknown pod;
- with the default none policy: no CPU is allocatable and no container reports any;
- with ``--memory-manager-policy=Static`` (the memory manager's test's flags): GetAllocatableResources answers NUMA
  node 0's allocatable memory (its memory less the 256Mi reserved, as the checkpoint records it), and a Guaranteed
  pod's container shows its 128Mi block on NUMA node 0 in List and Get, next to its exclusive CPU; under the
  ``None`` policy (the first two tests) no memory is reported (upstream's none policy has no blocks and no
  allocatable memory);
- the socket is there once the agent started (its directory 0750) and gone once it stopped.

The calls are few and spaced (the API takes 100 requests a second, 10 at once, as upstream's).

Not run by the helper that wrote them (the stack belongs to another process); run with
``python -m devstack run -- pytest -q tests/e2e/test_pod_resources.py`` (or ``make test``).
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest

from devstack.layout import Layout
from kopflet.apis.podresources.proto.v1 import api_pb2 as v1
from kopflet.apis.podresources.proto.v1 import api_pb2_grpc as v1_grpc
from kopflet.paths import Layout as Paths
from tests.conftest import Kubectl
from tests.e2e import test_memory_manager as memory_manager
from tests.e2e.conftest import agent_with
from tests.e2e.test_cpu_manager import ARGS, EXCLUSIVE, STATE_FILE, burstable, guaranteed, remove_state_file
from tests.e2e.test_pod_lifecycle import container, is_ready, pod_manifest, wait_gone, wait_node_idle, wait_pod

SOCKET = Paths(str(STATE_FILE.parent)).pod_resources_socket  # <root-dir> as the CPU manager's test finds it
TIMEOUT = 10.0
T = TypeVar("T")

running = contextlib.contextmanager(agent_with)


@contextlib.contextmanager
def lister() -> Iterator[v1_grpc.PodResourcesListerStub]:
    with grpc.insecure_channel(f"unix://{SOCKET}") as channel:
        yield v1_grpc.PodResourcesListerStub(channel)


def listed(client: v1_grpc.PodResourcesListerStub, namespace: str) -> dict[str, list[tuple[str, list[int]]]]:
    """This namespace's pods in List: pod name -> its containers in order, with their cpu_ids."""
    answer = client.List(v1.ListPodResourcesRequest(), timeout=TIMEOUT)
    return {p.name: [(c.name, list(c.cpu_ids)) for c in p.containers]
            for p in answer.pod_resources if p.namespace == namespace}


def eventually(read: Callable[[], T], check: Callable[[T], bool], what: str, timeout: float = 30.0) -> T:
    """`read` until `check` holds, once a second (well under the rate limit)."""
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if check(value):
            return value
        assert time.monotonic() < deadline, f"never {what}; last: {value!r}"
        time.sleep(1.0)


def not_found(client: v1_grpc.PodResourcesListerStub, namespace: str, name: str) -> tuple[Any, str]:
    with pytest.raises(grpc.RpcError) as err:
        client.Get(v1.GetPodResourcesRequest(pod_namespace=namespace, pod_name=name), timeout=TIMEOUT)
    return err.value.code(), err.value.details()


@pytest.fixture
def static_node() -> Iterator[None]:
    """The CPU manager's checkpoint removed before and after (upstream's procedure for a policy change)."""
    remove_state_file()
    try:
        yield
    finally:
        remove_state_file()


def test_exclusive_cpus_and_allocatable_cpus_under_the_static_policy(
        static_node: None, admin: Kubectl, layout: Layout, namespace: str, tmp_path: Path) -> None:
    node = layout.node_name
    with running(layout, tmp_path, ARGS), lister() as client:
        wait_node_idle(admin, node)
        try:
            assert stat.S_ISSOCK(os.stat(SOCKET).st_mode)
            assert stat.S_IMODE(os.stat(os.path.dirname(SOCKET)).st_mode) == 0o750

            # every online CPU but the reserved CPU 0
            allocatable = client.GetAllocatableResources(v1.AllocatableResourcesRequest(), timeout=TIMEOUT)
            assert (list(allocatable.cpu_ids), list(allocatable.devices), list(allocatable.memory)) == \
                (EXCLUSIVE.sorted(), [], [])

            admin.apply(burstable("shared", namespace, node))
            wait_pod(admin, namespace, "shared", is_ready, what="Ready")
            admin.apply(guaranteed("pinned", namespace, node, len(EXCLUSIVE)))
            pinned = wait_pod(admin, namespace, "pinned", is_ready, what="Ready")
            assert pinned["status"]["qosClass"] == "Guaranteed"

            # List: the Guaranteed container's own CPUs; the shared pool is never reported
            assert listed(client, namespace) == \
                {"pinned": [("main", EXCLUSIVE.sorted())], "shared": [("main", [])]}

            # Get: the same, one pod; no pod-level CPUs (PodLevelResourceManagers is off)
            got = client.Get(v1.GetPodResourcesRequest(pod_namespace=namespace, pod_name="pinned"),
                             timeout=TIMEOUT).pod_resources
            assert (got.name, got.namespace, [(c.name, list(c.cpu_ids)) for c in got.containers],
                    list(got.cpu_ids)) == ("pinned", namespace, [("main", EXCLUSIVE.sorted())], [])
            assert [list(c.devices) + list(c.memory) + list(c.dynamic_resources) for c in got.containers] == [[]]

            # upstream's error for an unknown pod and an unknown namespace (a plain Go error: code Unknown)
            assert not_found(client, namespace, "nope") == \
                (grpc.StatusCode.UNKNOWN, f"pod nope in namespace {namespace} not found")
            assert not_found(client, "no-such-namespace", "pinned") == \
                (grpc.StatusCode.UNKNOWN, "pod pinned in namespace no-such-namespace not found")

            # Deleted, the pod is no longer listed
            admin.run("delete", "pod", "pinned", "-n", namespace, "--wait=false")
            wait_gone(admin, namespace, "pinned")
            eventually(lambda: listed(client, namespace), lambda pods: "pinned" not in pods,
                       "the deleted pod left List")
        finally:
            admin.run("delete", "pods", "--all", "-n", namespace, "--wait=true", "--timeout=60s", check=False)
    # the agent stopped: its socket is gone with it
    assert not os.path.exists(SOCKET)


def test_terminal_pods_are_not_listed_and_the_none_policy_reports_no_cpus(
        admin: Kubectl, layout: Layout, namespace: str, tmp_path: Path) -> None:
    node = layout.node_name
    with running(layout, tmp_path, ""), lister() as client:
        try:
            assert list(client.GetAllocatableResources(v1.AllocatableResourcesRequest(),
                                                       timeout=TIMEOUT).cpu_ids) == []
            admin.apply(pod_manifest("done", namespace, node, [container("main", "true")], restartPolicy="Never"))
            admin.apply(pod_manifest("web", namespace, node, [container("main", "sleep 3600")],
                                     initContainers=[container("setup", "true"),
                                                     container("proxy", "sleep 3600", restartPolicy="Always")]))
            wait_pod(admin, namespace, "web", is_ready, what="Ready")
            wait_pod(admin, namespace, "done", lambda p: p.get("status", {}).get("phase") == "Succeeded",
                     what="Succeeded")
            # the sidecar then the app container, no ordinary init container, no CPUs; the Succeeded pod left out
            assert eventually(lambda: listed(client, namespace), lambda pods: "done" not in pods,
                              "the Succeeded pod left List") == {"web": [("proxy", []), ("main", [])]}
            assert not_found(client, namespace, "done") == \
                (grpc.StatusCode.UNKNOWN, f"pod done in namespace {namespace} not found")
        finally:
            admin.run("delete", "pods", "--all", "-n", namespace, "--wait=true", "--timeout=60s", check=False)


def memory_of(message: Any) -> list[tuple[str, int, list[int]]]:
    return [(m.memory_type, m.size, [n.ID for n in m.topology.nodes]) for m in message.memory]


@pytest.fixture
def static_memory_node() -> Iterator[None]:
    """Both managers' checkpoints removed before and after (a policy change: drain, remove them, restart)."""
    memory_manager.remove_state_files()
    try:
        yield
    finally:
        memory_manager.remove_state_files()


def test_memory_blocks_under_the_static_memory_policy(
        static_memory_node: None, admin: Kubectl, layout: Layout, namespace: str, tmp_path: Path) -> None:
    node = layout.node_name
    with running(layout, tmp_path, memory_manager.ARGS), lister() as client:
        wait_node_idle(admin, node)
        try:
            # upstream GetAllocatableMemory: per NUMA node and type the allocatable bytes the checkpoint records
            # (this machine has one node; hugepage sizes without pages have none and are left out)
            state = memory_manager.read_state()
            expected = [(kind, table.allocatable, [0])
                        for kind, table in sorted(state.machine_state[0].memory_map.items()) if table.allocatable]
            allocatable = client.GetAllocatableResources(v1.AllocatableResourcesRequest(), timeout=TIMEOUT)
            assert sorted(memory_of(allocatable)) == expected
            assert ("memory", state.machine_state[0].memory_map["memory"].total - 256 * memory_manager.MI, [0]) \
                in memory_of(allocatable)

            admin.apply(memory_manager.guaranteed("pinned", namespace, node, str(len(EXCLUSIVE)), "128Mi"))
            wait_pod(admin, namespace, "pinned", is_ready, what="Ready")
            admin.apply(burstable("shared", namespace, node))
            wait_pod(admin, namespace, "shared", is_ready, what="Ready")

            # List: the Guaranteed container's block on NUMA node 0 and its own CPU; the Burstable one neither
            answer = client.List(v1.ListPodResourcesRequest(), timeout=TIMEOUT)
            pods = {p.name: p for p in answer.pod_resources if p.namespace == namespace}
            [pinned] = pods["pinned"].containers
            assert (pinned.name, memory_of(pinned), list(pinned.cpu_ids)) == \
                ("main", [("memory", 128 * memory_manager.MI, [0])], EXCLUSIVE.sorted())
            [shared] = pods["shared"].containers
            assert (memory_of(shared), list(shared.cpu_ids)) == ([], [])
            assert memory_of(pods["pinned"]) == []  # no pod-level memory (PodLevelResourceManagers is off)

            # Get: the same block
            got = client.Get(v1.GetPodResourcesRequest(pod_namespace=namespace, pod_name="pinned"),
                             timeout=TIMEOUT).pod_resources
            assert memory_of(got.containers[0]) == [("memory", 128 * memory_manager.MI, [0])]

            # Deleted, the pod leaves List; the allocatable memory does not change (capacity, not what is free)
            admin.run("delete", "pod", "pinned", "-n", namespace, "--wait=false")
            wait_gone(admin, namespace, "pinned")
            eventually(lambda: listed(client, namespace), lambda pods: "pinned" not in pods,
                       "the deleted pod left List")
            assert sorted(memory_of(client.GetAllocatableResources(v1.AllocatableResourcesRequest(),
                                                                   timeout=TIMEOUT))) == expected
        finally:
            admin.run("delete", "pods", "--all", "-n", namespace, "--wait=true", "--timeout=60s", check=False)
