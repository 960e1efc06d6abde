"""kopflet.node: the composition root builds every part in its constructor, with no I/O, and two Nodes in one
process share nothing (hollow nodes will run many)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kopflet.apis.grpc.ratelimit import Limit
from kopflet.client.kubeapi import Credentials
from kopflet.config.settings import AgentConfig
from kopflet.node import HostFacts, Node, Runtime
from kopflet.nodestatus.setters import MachineFacts
from kopflet.watchdog.health_checker import HealthChecker


class FakeCri:
    """Stands for a connected CriClient: the constructor must not call it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"Node() used the runtime ({name}) while building")


HOST = HostFacts(machine=MachineFacts(cpus=2, memory_bytes=4 << 30, ephemeral_storage_bytes=20 << 30),
                 resolv_conf="nameserver 10.0.0.10\n", hugepage_sizes=("2MB",), masked_paths=("/proc/kcore",))


def node(name: str, root: str, host: HostFacts = HOST, *, watchdog: HealthChecker | None = None,
         standalone: bool = False, **settings: Any) -> Node:
    """A node on no fixed port: neither the kubelet API's nor the healthz port (never this machine's 10248);
    `standalone`: without credentials."""
    settings.setdefault("healthz_port", 0)
    cri = FakeCri()
    runtime = Runtime(cri, cri, "containerd", "1.7.24", "v1")  # type: ignore[arg-type]
    cfg = AgentConfig(node_name=name, root_dir=root, pod_log_root=f"{root}/logs", node_ip="10.0.0.9", port=0,
                      **settings)
    return Node(cfg, credentials=None if standalone else Credentials(server="https://127.0.0.1:6443"),
                runtime=runtime, host=host, watchdog=watchdog)


def _parts(n: Node) -> dict[str, Any]:
    return {k: v for k, v in vars(n).items() if k not in ("cfg", "host", "runtime", "layout", "server", "_tasks")
            and v is not None}


def test_every_part_is_built_in_the_constructor_from_the_config_and_host() -> None:
    n = node("node-a", "/var/lib/a")
    assert n.executor.hugepage_sizes == ("2MB",) and n.executor.masked_paths == ("/proc/kcore",)
    assert n.executor.allocations is n.allocations and n.executor.cgroups is n.cgroups
    assert n.workers.prober is n.prober and n.workers.status is n.status and n.workers.teardown is n.teardown
    assert n.prober.metrics is n.probe_metrics and n.relist.on_relist == n.metrics.observe_pleg_relist
    assert n.layout.pods_dir == "/var/lib/a/pods"
    assert n.static_pods is None and n.server is None


def test_two_nodes_in_one_process_share_no_part() -> None:
    a, b = node("node-a", "/var/lib/a"), node("node-b", "/var/lib/b")
    shared = [name for name, part in _parts(a).items()
              if not isinstance(part, (str, int, float, bool, tuple)) and part is _parts(b).get(name)]
    assert shared == []
    assert a.allocations.allocated is not b.allocations.allocated
    assert a.executor.layout.pods_dir != b.executor.layout.pods_dir



@pytest.mark.parametrize(("isolation", "thresholds", "runtime_asked"), [
    pytest.param(True, {}, True, id="on: the limits need the disk layout (asked of the runtime)"),
    pytest.param(False, {}, False, id="off, no thresholds: nothing to do, the runtime is not asked"),
    pytest.param(False, {"memory.available": "100Mi"}, True, id="off, a threshold: the round runs"),
])
async def test_the_eviction_manager_gets_local_storage_capacity_isolation(
        isolation: bool, thresholds: dict[str, str], runtime_asked: bool, caplog: pytest.LogCaptureFixture) -> None:
    n = node("node-a", "/var/lib/a", local_storage_capacity_isolation=isolation, eviction_hard=thresholds)
    assert await n.eviction.synchronize() == []
    # FakeCri refuses every use; the manager logs the failed layout query and gives up the round.
    assert ("failed to get the image filesystem layout" in caplog.text) is runtime_asked


@pytest.mark.parametrize("isolation", [True, False])
async def test_host_facts_measure_the_root_filesystem_only_with_isolation(
        isolation: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from kopflet import node as node_module
    calls: list[tuple[str, bool]] = []

    def read(root_dir: str, *, ephemeral_storage: bool = True) -> MachineFacts:
        calls.append((root_dir, ephemeral_storage))
        return HOST.machine
    monkeypatch.setattr(node_module, "read_machine_facts", read)
    monkeypatch.setattr(node_module, "read_host_container_facts", lambda: ((), ()))
    await HostFacts.read(AgentConfig(node_name="n", root_dir="/srv/k", local_storage_capacity_isolation=isolation))
    assert calls == [("/srv/k", isolation)]


def test_the_cpu_manager_is_wired_to_admission_creation_and_the_allocation_lock() -> None:
    n = node("node-a", "/var/lib/a", cpu_manager_policy="static", reserved_system_cpus="0",
             kube_reserved={"cpu": "500m"})
    assert n.executor.cpus is n.cpu_manager and n.workers.cpus is n.cpu_manager
    assert n.workers.allocating is n.cpu_manager.lock
    assert n.cpu_manager.state_file == "/var/lib/a/cpu_manager_state"
    assert (n.cpu_manager.policy_name, n.cpu_manager.reconcile_period) == ("static", 10.0)
    # --reserved-cpus=0 replaces kubeReserved's 500m: kubepods gets 2 - 1 CPUs' shares
    assert n.container_manager.pods_config.cpu_shares == 1024


async def test_a_cpu_manager_that_cannot_start_stops_the_node_before_it_registers(tmp_path: Any) -> None:
    from kopflet.cm.cpumanager import state as cs
    from kopflet.cm.cpumanager.manager import CPUManagerError
    from kopflet.cm.cpumanager.static_policy import State
    from tests.unit.test_cpumanager_manager import TWO_CPUS
    (tmp_path / "cpu_manager_state").write_text(cs.encode("none", State()))
    n = node("node-a", str(tmp_path), dataclasses.replace(HOST, cpu_topology=TWO_CPUS), cpu_manager_policy="static",
             reserved_system_cpus="0")
    with pytest.raises(CPUManagerError, match='configured policy "static" differs from state checkpoint policy '
                                              '"none"'):
        await n.start()  # FakeCri and the unopened API client were never used
    await n.stop(close_runtime=False)


async def test_host_facts_read_the_cpu_topology(monkeypatch: pytest.MonkeyPatch) -> None:
    from kopflet import node as node_module
    from kopflet.cm.cpumanager.topology import TopologyError
    monkeypatch.setattr(node_module, "read_machine_facts", lambda *_, **__: HOST.machine)
    monkeypatch.setattr(node_module, "read_host_container_facts", lambda: ((), ()))
    facts = await HostFacts.read(AgentConfig(node_name="n"))
    assert facts.cpu_topology is not None and facts.cpu_topology.num_cpus >= 1 and facts.cpu_topology_error == ""

    def broken() -> None:
        raise TopologyError("could not detect number of cpus")
    monkeypatch.setattr(node_module, "read_topology", broken)
    facts = await HostFacts.read(AgentConfig(node_name="n"))
    assert (facts.cpu_topology, facts.cpu_topology_error) == (None, "could not detect number of cpus")


def test_the_pod_resources_api_is_wired_to_the_pods_and_the_cpu_manager() -> None:
    n = node("node-a", "/var/lib/a")
    assert n.pod_resources.socket_path == "/var/lib/a/pod-resources/kubelet.sock"
    assert n.pod_resources.providers.cpus is n.cpu_manager and n.pod_resources.metrics is n.metrics
    assert n.pod_resources.providers.memory is n.memory_manager
    assert n.pod_resources.providers.devices is n.device_manager
    assert n.pod_resources.pods == n.workers.bodies
    assert (n.pod_resources.use_active_pods, n.pod_resources.pod_level) == (True, False)


@pytest.mark.parametrize("protect", [False, True])
def test_the_container_manager_checks_the_kernel_tunables_under_proc_sys(protect: bool) -> None:
    n = node("node-a", "/var/lib/a", protect_kernel_defaults=protect)
    kernel = n.container_manager.kernel
    assert kernel is not None and (kernel.protect, kernel.root) == (protect, "/proc/sys")


@pytest.mark.parametrize(("settings", "limit"), [
    ({}, Limit(50, 100)), ({"event_record_qps": 0}, None), ({"event_record_qps": 5, "event_burst": 0}, Limit(5, 10)),
])
def test_the_event_recorder_gets_event_qps_and_burst(settings: dict[str, int], limit: Limit | None) -> None:
    assert node("node-a", "/var/lib/a", **settings).recorder._limit == limit


def test_the_swap_controller_and_the_volume_stats_period_are_wired() -> None:
    """HostFacts' swap controller reaches the pod syncer (NoSwap at creation and resize); volumeStatsAggPeriod the
    stats collector."""
    from kopflet.cm.helpers import SwapController
    n = node("node-a", "/var/lib/a", dataclasses.replace(HOST, swap_controller=SwapController.V1),
             volume_stats_agg_period=-1.0)
    assert n.executor.swap_controller is SwapController.V1
    assert n.stats.volume_stats_period == -1.0
    assert node("node-b", "/var/lib/b").executor.swap_controller is SwapController.NONE


async def test_host_facts_read_the_swap_controller(monkeypatch: pytest.MonkeyPatch) -> None:
    from kopflet import node as node_module
    from kopflet.cm.helpers import SwapController
    monkeypatch.setattr(node_module, "read_machine_facts", lambda *_, **__: HOST.machine)
    monkeypatch.setattr(node_module, "read_host_container_facts", lambda: ((), ()))
    monkeypatch.setattr(node_module, "swap_controller", lambda: SwapController.V2)
    assert (await HostFacts.read(AgentConfig(node_name="n"))).swap_controller is SwapController.V2


def test_the_plugin_manager_hands_csi_plugins_to_the_csi_registration_handler() -> None:
    """upstream kubelet.go: AddHandler(CSIPlugin, csi.PluginHandler) on the plugin manager of
    <root-dir>/plugins_registry; the handler records drivers in the node's own store and writes the node's own Node
    and CSINode (two Nodes share neither)."""
    from kopflet.pluginmanager.cache import CSI_PLUGIN

    n = node("node-a", "/var/lib/a")
    assert n.plugin_manager.sock_dir == "/var/lib/a/plugins_registry"
    assert n.plugin_manager.handlers == {CSI_PLUGIN: n.csi_registration}
    assert n.csi_registration.drivers is n.csi_drivers and n.csi_registration.nim is n.csi_node_info
    assert n.csi_node_info.api is n.api and n.csi_node_info.node_name == "node-a"
