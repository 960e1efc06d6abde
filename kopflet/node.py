"""The composition root: one node agent built in one place from its configuration (upstream kubelet.go
NewMainKubelet, then Run).

`Runtime.connect` opens the CRI endpoints and checks them; `HostFacts.read` reads the machine once; `Node(...)` builds
every part, each getting what it needs in its constructor, in dependency order, with no network I/O (the only read is
the two small allocation checkpoints and the pods' user namespace records, as upstream's allocation and user
namespace managers restore them when built); `Node.start` registers the node and starts the loops, the static pod
source and the kubelet API; `Node.stop` stops them in reverse order.
Nothing here is module state: two Nodes can live in one process (hollow nodes).

Without credentials the Node is standalone (upstream's nil KubeClient, `kopflet.config.modes`): its client is a
`StandaloneClient`, and what upstream runs only with a client is not started here (registration, Lease and node
status, the status manager's writes, the Services informer and their environment variables, mirror pods, pod
certificates, ClusterTrustBundles, the CSINode, serving certificate requests); events go to the log only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cri_client import CriClient, CriError
from cri_client import types as cri_types
from kopflet import backoff as backoffs
from kopflet.allocation.state import AllocationManager
from kopflet.apis.podresources.resources import Providers
from kopflet.apis.podresources.server import PodResourcesServer
from kopflet.certificate.manager import ServerCertificateManager, new_server_manager
from kopflet.client.events import EventRecorder
from kopflet.client.kubeapi import API_ERRORS, Credentials, KubeClient
from kopflet.client.standalone import StandaloneClient
from kopflet.cm import cgroup_names, helpers, node_allocatable
from kopflet.cm.cgroups import PodCgroups, swap_controller
from kopflet.cm.container_manager import ContainerManager, KernelTunables
from kopflet.cm.cpumanager import policy_options
from kopflet.cm.cpumanager.cpu_manager import RunningContainer
from kopflet.cm.cpumanager.manager import CPUManager, read_topology
from kopflet.cm.cpumanager.topology import CPUTopology, TopologyError
from kopflet.cm.devicemanager.manager import DeviceManager
from kopflet.cm.memorymanager.machine import MachineError, NUMANode
from kopflet.cm.memorymanager.manager import MemoryManager, read_numa_nodes
from kopflet.config import static_pods
from kopflet.config.file_source import StaticPodSource
from kopflet.config.http_source import ManifestURLSource
from kopflet.config.settings import AgentConfig
from kopflet.envvars.services import ServiceCache
from kopflet.eviction import helpers as eviction_helpers
from kopflet.eviction import signals
from kopflet.eviction.manager import EvictionManager
from kopflet.hooks import api as hooks_api
from kopflet.hooks import loader as hook_loader
from kopflet.hooks.runner import PolicyHooks
from kopflet.images import gc as image_gc
from kopflet.images.gc_manager import ImageGCManager
from kopflet.images.manager import ImageManager
from kopflet.kuberuntime import gc, sandbox_config
from kopflet.kuberuntime.executor import PodSyncer, read_host_container_facts
from kopflet.kuberuntime.gc_manager import ContainerGC
from kopflet.lifecycle.hooks import HookRunner
from kopflet.logs.manager import ContainerLogManager
from kopflet.logs.rotation import LogRotatePolicy
from kopflet.logs.verbosity import v
from kopflet.metrics import KubeletMetrics, ProbeMetrics
from kopflet.nodeshutdown import rules as shutdown_rules
from kopflet.nodeshutdown.manager import ShutdownManager
from kopflet.nodeshutdown.systemd import DBusError
from kopflet.nodestatus import setters
from kopflet.nodestatus.heartbeat import NodeAgent, read_machine_facts
from kopflet.nodestatus.setters import MachineFacts
from kopflet.oom.watcher import OomWatcher
from kopflet.pleg.evented import RuntimeEvents
from kopflet.pleg.own_stops import OwnStops
from kopflet.pleg.relist import RuntimeCache
from kopflet.pluginmanager.cache import CSI_PLUGIN
from kopflet.pluginmanager.plugin_manager import PluginManager
from kopflet.podcertificate.manager import PodCertificateManager
from kopflet.pods.housekeeping import Housekeeping
from kopflet.pods.teardown import Teardown
from kopflet.pods.workers import PodWorkers
from kopflet.prober.manager import ProbeManager
from kopflet.server.auth_reviews import authenticator_for, authorizer_for
from kopflet.server.backend import AgentBackend
from kopflet.server.healthz_server import HealthzServer
from kopflet.server.server import Server, ServingTLS, serve, serving_tls
from kopflet.stats import summary
from kopflet.stats.collector import StatsCollector
from kopflet.status.manager import StatusManager
from kopflet.tracing.exporter import StartTracer
from kopflet.userns.allocator import UsernsError
from kopflet.userns.userns_manager import UsernsManager, read_kubelet_mappings
from kopflet.util.manager import DirectObjects, PodObjects
from kopflet.util.scavenger import SCAVENGER
from kopflet.volumes import plugins
from kopflet.volumes.csi.handler import RegistrationHandler
from kopflet.volumes.csi.nodeinfomanager import NodeInfoManager
from kopflet.volumes.csi.registration import DriversStore
from kopflet.volumes.manager import VolumeManager
from kopflet.volumes.trust_bundle_manager import ClusterTrustBundleManager
from kopflet.watchdog import rules as watchdog_rules
from kopflet.watchdog.health_checker import Check, HealthChecker, LogFlushCheck, default_checks

logger = logging.getLogger(__name__)

# How long a stopping agent waits for events still queued (behind eventRecordQPS) before it drops them.
EVENT_FLUSH_TIMEOUT = 5.0


def detect_node_ip() -> str:
    """The primary IPv4 address (a UDP connect sends nothing; it only picks the route)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
            return str(s.getsockname()[0])
        except OSError:
            return "127.0.0.1"


def read_host_resolv_conf(path: str = "/etc/resolv.conf") -> str:
    """The host's resolv.conf (what dnsPolicy Default gives pods); blocking: call in a thread."""
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


CGROUP_DRIVER_ATTEMPTS = 3
CGROUP_DRIVER_RETRY_DELAY = 2.0
"""upstream getCgroupDriverFromCRI: three tries, two seconds apart, when RuntimeConfig fails but for UNIMPLEMENTED."""


def cgroup_driver_from_runtime_config(config: cri_types.RuntimeConfig) -> str:
    """The driver a RuntimeConfig answer names ("" without a linux section: the configuration's stays); CriError
    for a value CRI does not define (upstream: "runtime returned an unknown cgroup driver %d")."""
    if config.linux_cgroup_driver is None:
        return ""
    drivers = {cri_types.CGROUP_DRIVER_SYSTEMD: cgroup_names.DRIVER_SYSTEMD,
               cri_types.CGROUP_DRIVER_CGROUPFS: cgroup_names.DRIVER_CGROUPFS}
    if config.linux_cgroup_driver not in drivers:
        raise CriError("UNKNOWN", f"runtime returned an unknown cgroup driver {config.linux_cgroup_driver}",
                       "RuntimeService/RuntimeConfig")
    return drivers[config.linux_cgroup_driver]


async def cgroup_driver_from_cri(cri: CriClient, *, delay: float = CGROUP_DRIVER_RETRY_DELAY) -> str:
    """upstream getCgroupDriverFromCRI: the runtime's cgroup driver, "" when it does not implement RuntimeConfig
    (containerd 1.x: the configured cgroupDriver is used) or sends no linux section. Other errors are tried three
    times (the runtime may still be starting), then raised: the agent does not start."""
    error: CriError | None = None
    for _ in range(CGROUP_DRIVER_ATTEMPTS):
        try:
            config = await cri.runtime_config()
        except CriError as exc:
            if exc.unimplemented:
                logger.info("CRI implementation should be updated to support RuntimeConfig. Falling back to using "
                            "cgroupDriver from kubelet config.")
                return ""
            error = exc
            await asyncio.sleep(delay)
            continue
        driver = cgroup_driver_from_runtime_config(config)
        if driver:
            logger.info(f"Using cgroup driver setting received from the CRI runtime: cgroupDriver={driver}")
        return driver
    assert error is not None
    raise error


@dataclasses.dataclass(frozen=True)
class Runtime:
    """The container runtime's endpoints, connected and checked (upstream getRuntimeAndImageServices)."""

    cri: CriClient
    image_cri: CriClient
    """--image-service-endpoint: images may be served by another endpoint (the same client by default)."""
    name: str
    version: str
    api_version: str
    cgroup_driver: str = ""
    """The runtime's cgroup driver (CRI RuntimeConfig), which replaces cgroupDriver; "" when it does not tell."""

    @classmethod
    async def connect(cls, cfg: AgentConfig,
                      observer: Callable[[str, float, bool], None] | None = None) -> Runtime:
        """Open the endpoints and check the runtime speaks CRI v1, as the kubelet does at start; CriError if not.
        `observer` sees every RPC (the runtime operation metrics)."""
        cri = CriClient(cfg.runtime_endpoint, timeout=cfg.runtime_request_timeout, observer=observer)
        await cri.open()
        try:
            version = await cri.check_runtime()
        except CriError:
            await cri.close()
            raise
        try:
            driver = await cgroup_driver_from_cri(cri)
        except CriError:
            await cri.close()
            raise
        image_cri = cri if cfg.image_endpoint == cfg.runtime_endpoint else \
            CriClient(cfg.image_endpoint, timeout=cfg.runtime_request_timeout, observer=observer)
        await image_cri.open()
        return cls(cri, image_cri, version.runtime_name, version.runtime_version, version.runtime_api_version,
                   driver)

    def configured(self, cfg: AgentConfig) -> AgentConfig:
        """`cfg` with the runtime's cgroup driver when it told one (upstream getCgroupDriverFromCRI overwrites
        the configuration before configz is registered and the container manager is built), and its name."""
        if self.cgroup_driver and self.cgroup_driver != cfg.cgroup_driver:
            cfg = dataclasses.replace(cfg, cgroup_driver=self.cgroup_driver)
        if self.name and self.name != cfg.runtime_name:  # containerIDs are <runtime name>://<id>
            cfg = dataclasses.replace(cfg, runtime_name=self.name)
        return cfg

    @property
    def node_version(self) -> str:
        """``containerd://1.7.24``: the Node's status.nodeInfo.containerRuntimeVersion."""
        return f"{self.name}://{self.version}"

    async def close(self) -> None:
        if self.image_cri is not self.cri:
            await self.image_cri.close()
        await self.cri.close()


@dataclasses.dataclass(frozen=True)
class HostFacts:
    """What the node agent reads of the machine once, at start (a hollow node passes made-up ones)."""

    machine: MachineFacts
    resolv_conf: str
    hugepage_sizes: tuple[str, ...]
    masked_paths: tuple[str, ...]
    max_pid: int | None = None
    """min(kernel.pid_max, kernel.threads-max): the pids capacity ``kubepods`` is sized from; None if unknown."""
    cpu_topology: CPUTopology | None = None
    """The CPUs' sockets, cores and NUMA nodes (sysfs), for the CPU manager; None when unreadable."""
    cpu_topology_error: str = ""
    """Why `cpu_topology` is None (the static policy cannot start without it)."""
    numa_nodes: tuple[NUMANode, ...] = ()
    """The NUMA nodes' memory, hugepages and distances (sysfs), for the memory and topology managers; empty when
    the machine has no NUMA directories or they could not be read (one node with all the memory then)."""
    kubelet_id_mappings: tuple[int, int] | None = None
    """The host IDs the user namespace manager cuts into pod ranges (upstream getKubeletMappings: the ``kubelet``
    user's subordinate IDs, else every ID from 65536 up); None: the default."""
    kubelet_id_mappings_error: str = ""
    """Why getsubids gave no mappings for an existing ``kubelet`` user (upstream's kubelet does not start)."""
    swap_controller: helpers.SwapController = helpers.SwapController.NONE
    """How containers are kept from swap (cgroup v1 memsw, v2 memory.swap.max), or not at all; upstream checks
    once too (initSwapControllerAvailabilityCheck)."""

    @classmethod
    async def read(cls, cfg: AgentConfig) -> HostFacts:
        machine = await asyncio.to_thread(read_machine_facts, cfg.root_dir,
                                          ephemeral_storage=cfg.local_storage_capacity_isolation)
        resolv_conf = await asyncio.to_thread(read_host_resolv_conf)
        hugepage_sizes, masked_paths = await asyncio.to_thread(read_host_container_facts)
        try:
            topology, topology_error = await asyncio.to_thread(read_topology), ""
        except (OSError, TopologyError) as exc:
            topology, topology_error = None, str(exc)
        try:
            numa_nodes = await asyncio.to_thread(read_numa_nodes)
        except (OSError, MachineError) as exc:
            logger.warning(f"cannot read the NUMA nodes, taking one node with all the memory: {exc}")
            numa_nodes = ()
        try:
            mappings, mappings_error = await asyncio.to_thread(read_kubelet_mappings), ""
        except UsernsError as exc:
            mappings, mappings_error = None, str(exc)
        return cls(machine, resolv_conf, hugepage_sizes, masked_paths, await asyncio.to_thread(signals.max_pid),
                   topology, topology_error, numa_nodes, mappings, mappings_error,
                   swap_controller=await asyncio.to_thread(swap_controller))


def new_userns_manager(cfg: AgentConfig, host: HostFacts) -> UsernsManager:
    """Upstream NewMainKubelet's MakeUserNsManager: the kubelet's ID mappings checked against maxPods and every
    pod directory's ``userns`` record read back (small files, as the allocation checkpoints). UsernsError, worded
    as upstream's start-up error, when it cannot be built."""
    if host.kubelet_id_mappings_error:
        raise UsernsError(f"create user namespace manager: kubelet mappings: {host.kubelet_id_mappings_error}")
    try:
        return UsernsManager(cfg.layout, max_pods=cfg.max_pods, kubelet_mappings=host.kubelet_id_mappings)
    except UsernsError as exc:
        raise UsernsError(f"create user namespace manager: {exc}") from None


class Node:
    """One node agent: every part, built from the config, owned here, started and stopped here."""

    def __init__(self, cfg: AgentConfig, *, credentials: Credentials | None, runtime: Runtime, host: HostFacts,
                 metrics: KubeletMetrics | None = None, watchdog: HealthChecker | None = None) -> None:
        """No network I/O: each part gets everything it needs in its constructor, in dependency order (the
        allocation checkpoints are read here; AllocationError when one is unusable; so are the pods' user namespace
        records: UsernsError; and the policy hook modules are imported: HookLoadError). `metrics` is the registry
        `runtime`'s observer already counts into (a new one otherwise). `watchdog` is the process's systemd
        watchdog (upstream kubeDeps.HealthChecker), given the node's health checks once it runs. `credentials` None:
        standalone mode, no apiserver."""
        cfg = runtime.configured(cfg)  # the runtime's cgroup driver, when it tells
        self.cfg, self.runtime, self.host = cfg, runtime, host
        cri = runtime.cri
        self.layout = cfg.layout
        self.metrics = metrics if metrics is not None else KubeletMetrics(cfg.node_name)
        self.probe_metrics = ProbeMetrics()
        self.standalone = credentials is None
        user_agent = f"kopflet/{cfg.node_name}"
        self.api = StandaloneClient(user_agent=user_agent) if credentials is None else \
            KubeClient(credentials, user_agent=user_agent)
        self.recorder = EventRecorder(self.api, cfg.node_name, qps=cfg.event_record_qps, burst=cfg.event_burst)
        self.backoff = backoffs.Backoff()
        # The device plugins' Registration server; a pod holds its devices while a worker has it active or its
        # containers run (a restarted agent's pods reach their workers one by one).
        self.device_manager = DeviceManager(
            self.layout.device_plugins_dir, sources_ready=lambda: self.relist.synced.is_set(),
            active_pods=self._device_pods)
        self.heartbeat = NodeAgent(cfg, self.api, cri, runtime.node_version, host.machine, self.recorder,
                                   pressure=lambda: self.eviction.conditions(), devices=self.device_manager.capacity)
        self.services = ServiceCache(self.api)
        # The ConfigMaps and Secrets pods reference (volumes, env, pull secrets): a watch of each while a pod holds
        # it (upstream's default Watch strategy), or a GET each time ('Get', and standalone, where reads fail).
        self.objects: PodObjects | None = PodObjects(
            self.api, plugins.object_names, sync_frequency=cfg.resync_period) \
            if not self.standalone and cfg.config_map_and_secret_strategy == "Watch" else None
        objects = self.objects if self.objects is not None else DirectObjects(self.api)
        self.images = ImageManager(runtime.image_cri, self.recorder, self.backoff, self.api, metrics=self.metrics,
                                   objects=objects)
        self.allocations = AllocationManager(self.layout)
        self.userns = new_userns_manager(cfg, host)
        self.cgroups = PodCgroups(layout=cfg.cgroup_layout)
        # Admissions, resizes and the CPU manager's own changes one at a time (upstream allocationMutex).
        allocating = asyncio.Lock()
        self.cpu_manager = CPUManager(
            cfg.cpu_manager_policy, cfg.cpu_manager_policy_options, reconcile_period=cfg.cpu_manager_reconcile_period,
            topology=host.cpu_topology, topology_error=host.cpu_topology_error, system_reserved=cfg.system_reserved,
            kube_reserved=cfg.kube_reserved, reserved_cpus=cfg.reserved_system_cpus,
            state_file=self.layout.cpu_manager_state, cri=cri, lock=allocating,
            pods=lambda: self.workers.cpu_pods(), running=self._running_containers, listed=self._listed_pod_uids)
        self.memory_manager = MemoryManager(
            cfg.memory_manager_policy, cfg.reserved_memory, numa_nodes=host.numa_nodes,
            memory_capacity=host.machine.memory_bytes, system_reserved=cfg.system_reserved,
            kube_reserved=cfg.kube_reserved, hard_thresholds=cfg.eviction_config.thresholds,
            topology_policy_name=cfg.topology_manager_policy, topology_scope=cfg.topology_manager_scope,
            topology_options=cfg.topology_manager_policy_options, state_file=self.layout.memory_manager_state,
            lock=allocating, pods=lambda: self.workers.cpu_pods(), listed=self._listed_pod_uids)
        system_reserved, kube_reserved = policy_options.reservations(
            cfg.system_reserved, cfg.kube_reserved, cfg.reserved_system_cpus)  # --reserved-cpus counts
        self.container_manager = ContainerManager(
            self.cgroups, capacity=node_allocatable.internal_capacity(
                host.machine.cpus, host.machine.memory_bytes, host.max_pid),
            system_reserved=system_reserved, kube_reserved=kube_reserved,
            enforcement=cfg.enforce_node_allocatable, hugepage_sizes=host.hugepage_sizes,
            active_pods=lambda: [pod for pod, _ in self.workers.active_pods()],
            node_event=lambda type_, reason, message: self.recorder.node_event(type_, reason, message),
            kernel=KernelTunables(protect=cfg.protect_kernel_defaults), qos_reserved=cfg.qos_reserved_in_force)
        # upstream NewMainKubelet: the pod certificate manager (its informer of this node's PodCertificateRequests),
        # the volume host's source of podCertificate bundles; its metric with it.
        self.pod_certificates = PodCertificateManager(self.api, cfg.node_name, node_uid=lambda: self.heartbeat.uid,
                                                      recorder=self.recorder, wake=self._wake)
        self.metrics.watch_pod_certificates(self.pod_certificates.metric_report)
        # upstream NewMainKubelet: NewLazyInformerManager, the volume host's source of ClusterTrustBundles (its
        # informer started at the first clusterTrustBundle source); a changed bundle wakes the pods reading it.
        self.trust_bundles = ClusterTrustBundleManager(self.api, wake=self._wake)
        servers, searches, options = sandbox_config.parse_resolv_conf(host.resolv_conf)
        dns = sandbox_config.DnsSettings(cluster_dns=cfg.cluster_dns, cluster_domain=cfg.cluster_domain,
                                         host_servers=servers, host_searches=searches, host_options=options)
        own_stops = OwnStops()  # the syncer's stop calls, which the runtime events wait for instead of polling
        self.executor = PodSyncer(
            cfg, cri, self.api, self.recorder, self.images, self.backoff, dns,
            node_memory_capacity=host.machine.memory_bytes,
            services=None if self.standalone else self.services,  # upstream: no Service lister, no variables
            node_allocatable=self.heartbeat.allocatable, allocations=self.allocations, cgroups=self.cgroups,
            layout=self.layout, hooks=HookRunner(cri),
            volumes=VolumeManager(cfg, self.api, self.heartbeat.allocatable, layout=self.layout,
                                  pod_certificates=self.pod_certificates, trust_bundles=self.trust_bundles,
                                  node_labels=self.heartbeat.known_labels, recorder=self.recorder,
                                  objects=objects),
            hugepage_sizes=host.hugepage_sizes, masked_paths=host.masked_paths,
            before_pod_cgroup=self.container_manager.update_qos, cpus=self.cpu_manager, devices=self.device_manager,
            memory=self.memory_manager, userns=self.userns, swap_controller=host.swap_controller,
            metrics=self.metrics, own_stops=own_stops)
        self.relist = RuntimeCache(cri, on_relist=self.metrics.observe_pleg_relist)
        self.prober = ProbeManager(cri, self.recorder, self._wake, metrics=self.probe_metrics)
        self.status = StatusManager(self.api)
        self.teardown = Teardown(self.relist, self.executor, self.prober, self.images)
        # The policy hooks (kopflet.hooks): --hooks and the entry points, imported here (HookLoadError).
        self.policy_hooks = PolicyHooks(hook_loader.load(cfg.hooks, entry_points=cfg.hook_entry_points),
                                        post_event=self._hook_event, metrics=self.metrics)
        # Pod start traces (tracing.samplingRatePerMillion > 0; upstream newTracerProvider): none at rate 0.
        self.tracer = (StartTracer(endpoint=cfg.tracing_endpoint, host_name=cfg.node_name,
                                   rate_per_million=cfg.tracing_sampling_rate_per_million)
                       if cfg.tracing_sampling_rate_per_million > 0 else None)
        self.workers = PodWorkers(
            cfg, relist=self.relist, executor=self.executor, prober=self.prober, status=self.status,
            recorder=self.recorder, backoff=self.backoff, node_info=self.heartbeat.admission_info,
            allocations=self.allocations, cgroups=self.cgroups, images=self.images, teardown=self.teardown,
            metrics=self.metrics, cpus=self.cpu_manager, allocating=allocating, devices=self.device_manager,
            memory=self.memory_manager, hooks=self.policy_hooks, tracer=self.tracer)
        if self.objects is not None:
            self.objects.pods = self.workers  # a registered pod without a worker is let go of
        self.runtime_events = RuntimeEvents(  # the streams opened when it runs: building touches no runtime
            self.relist, (("containerd", lambda: cri.containerd_events()), ("CRI", lambda: cri.container_events())),
            self.workers.wake, self.metrics, own_stops=own_stops)
        self.housekeeping = Housekeeping(self.api, self.relist, self.workers, self.teardown, self.layout,
                                         cfg.pod_field_selector, userns=self.userns, cgroups=self.cgroups,
                                         sources_ready=self._sources_ready)
        self.container_gc = ContainerGC(self.relist, self.executor, gc.GCPolicy(
            min_age=cfg.minimum_container_ttl_duration, max_per_pod_container=cfg.maximum_dead_containers_per_container,
            max_containers=cfg.maximum_dead_containers), terminated=self.workers.terminated)
        # The sandbox (pause) image stays: pinned by the runtime, or named in its CRI config (the manager asks).
        self.image_gc = ImageGCManager(cri, image_gc.ImageGCPolicy(
            high_threshold_percent=cfg.image_gc_high_threshold_percent,
            low_threshold_percent=cfg.image_gc_low_threshold_percent, minimum_gc_age=cfg.image_minimum_gc_age,
            maximum_gc_age=cfg.image_maximum_gc_age), self.recorder, node_uid=lambda: self.heartbeat.uid,
            image_cri=runtime.image_cri,
            collected=lambda reason: self.metrics.image_garbage_collected.labels(reason).inc())
        self.log_manager = ContainerLogManager(
            cri, LogRotatePolicy(max_size=cfg.container_log_max_size, max_files=cfg.container_log_max_files),
            monitor_interval=cfg.container_log_monitor_interval, max_workers=cfg.container_log_max_workers,
            symlink_dir=self.layout.container_logs_dir)
        self.oom = OomWatcher(lambda reason, message: self.recorder.node_event("Warning", reason, message,
                                                                             self.heartbeat.uid))
        # upstream makePodSourceConfig: the file source with staticPodPath, the http source with staticPodURL; both
        # feed one static pod manager (its mirror pods).
        self.static_pods = StaticPodSource(cfg, self.api, self.workers, lambda: self.heartbeat.uid) \
            if cfg.pod_manifest_path or cfg.static_pod_url else None
        self.manifest_url = ManifestURLSource(
            cfg.static_pod_url, cfg.static_pod_url_header, cfg.node_name, cfg.http_check_frequency,
            self.static_pods.apply, self.recorder, lambda: self.heartbeat.uid) \
            if cfg.static_pod_url and self.static_pods is not None else None
        self.stats = StatsCollector(cri, node_name=cfg.node_name, layout=self.layout,
                                    pod_cgroup_candidates=self.cgroups.layout.pod_cgroup_candidates,
                                    volume_stats_period=cfg.volume_stats_agg_period)
        self.eviction = EvictionManager(
            cfg.eviction_config, observe=self._observe_signals, active_pods=self._eviction_candidates,
            evict=self._evict, container_gc=self.container_gc.delete_all_unused,
            image_gc=self.image_gc.delete_unused_images, pod_cleaned_up=self._pod_cleaned_up,
            record_event=self._eviction_event, disk_layout=self._disk_layout,
            local_storage_capacity_isolation=cfg.local_storage_capacity_isolation)
        self._image_fs: str | None = None
        # upstream ListenAndServePodResources: the pods as the pod manager has them, the CPU, memory and device
        # managers' resources (no DRA manager: its provider reports nothing).
        self.pod_resources = PodResourcesServer(
            self.layout.pod_resources_socket, pods=self.workers.bodies, metrics=self.metrics,
            providers=Providers(cpus=self.cpu_manager, memory=self.memory_manager, devices=self.device_manager))
        # The CSI plugin's node side (upstream csi_plugin.go Init): the registered drivers, the Node's and the
        # CSINode's driver entries; the plugin manager hands it the CSIPlugin registration sockets (kubelet.go
        # AddHandler(CSIPlugin, csi.PluginHandler)). Device plugins register through the device manager's own
        # Registration service, and kopflet has no DRA manager: neither type has a handler here.
        self.csi_drivers = DriversStore()
        self.csi_node_info = NodeInfoManager(self.api, cfg.node_name)
        self.csi_registration = RegistrationHandler(self.csi_drivers, self.csi_node_info)
        self.plugin_manager = PluginManager(self.layout.plugins_registry_dir)
        self.plugin_manager.add_handler(CSI_PLUGIN, self.csi_registration)
        # upstream NewMainKubelet: the node shutdown manager (a stub when no grace period is set), its admit handler
        # the last, its error in the Ready condition, its kill the eviction manager's (the pod's worker).
        self.shutdown = ShutdownManager(
            cfg.shutdown_periods, state_file=Path(self.layout.root_dir) / shutdown_rules.STATE_FILE,
            active_pods=self.workers.active_pods, kill=self.workers.evict, cleaned_up=self._pod_shut_down,
            sync_node_status=self._sync_node_status,
            node_event=lambda reason, message: self.recorder.node_event("Normal", reason, message,
                                                                        self.heartbeat.uid),
            metrics=self.metrics if cfg.shutdown_by_pod_priority_gate else None)
        self.heartbeat.shutdown_status = self.shutdown.shutdown_status
        # upstream's one LogHealthz per process: the watchdog's, which /healthz runs too (a node without a
        # watchdog, in tests, has its own).
        self._own_log_check = watchdog is None
        self.log_check = watchdog.log_check if watchdog is not None else LogFlushCheck()
        self.backend = AgentBackend(self.workers, self.relist, cri, self.metrics, self.stats,
                                    self.probe_metrics, health_checks=self.healthz_checks())
        self.server: Server | None = None
        # cmd/kubelet/app/server.go run: the healthz port, ping only, started once the kubelet runs.
        self.healthz_server = HealthzServer(cfg.healthz_bind_address, cfg.healthz_port) if cfg.healthz_port \
            else None
        self.serving_certificates: ServerCertificateManager | None = None
        self.watchdog = watchdog
        self._tasks: list[asyncio.Task[None]] = []
        self._scavenging = False  # holds the process's heap scavenger (from start to stop)

    # ------------------------------------------------------------------------------- eviction's edges

    async def _observe_signals(self) -> Mapping[str, eviction_helpers.Observation]:
        """The node's signals now (the image filesystem's mountpoint is asked of the runtime once)."""
        mountpoint = await self._image_fs_mountpoint()
        allocatable = self.container_manager.allocatable_memory
        return await asyncio.to_thread(
            signals.observe, self.cfg.root_dir, mountpoint or None,
            pods_cgroup=None if allocatable is None else Path(self.cgroups.layout.pods_root.lstrip("/")),
            allocatable_memory=allocatable)

    async def _image_fs_mountpoint(self) -> str:
        """The image filesystem's mountpoint, asked of the runtime once (CRI ImageFsInfo); "" while unknown."""
        if self._image_fs is None:
            try:
                filesystems = (await self.runtime.image_cri.images.fs_info()).image_filesystems
                self._image_fs = filesystems[0].mountpoint if filesystems else ""
            except CriError as exc:
                logger.warning(f"eviction: the image filesystem is unknown for now: {exc}")
                return ""
        return self._image_fs

    async def _disk_layout(self) -> tuple[bool, bool]:
        """(a dedicated image filesystem, containers split from images): the latter never with CRI stats."""
        mountpoint = await self._image_fs_mountpoint()
        if not mountpoint:  # asked again next round (the manager asks until it has an answer)
            raise OSError("the runtime did not tell its image filesystem yet")
        return await asyncio.to_thread(signals.has_dedicated_image_fs, self.cfg.root_dir, mountpoint), False

    async def _eviction_candidates(self) -> list[eviction_helpers.EvictionCandidate]:
        """The admitted, non-terminal pods with their measured usage (a pod the stats missed ranks first)."""
        pods = self.workers.active_pods()
        if not pods:
            return []
        usage = {sample.uid: summary.eviction_usage(sample) for sample in (await self.stats.collect()).pods}
        return [eviction_helpers.candidate(pod, usage.get(pod.uid),
                                           qos_class=(body.get("status") or {}).get("qosClass") or None,
                                           generation=int((body.get("metadata") or {}).get("generation") or 0))
                for pod, body in pods]

    async def _evict(self, uid: str, status: dict[str, object], grace_period: int) -> None:
        if not self.workers.evict(uid, status, grace_period):
            logger.warning(f"eviction: pod {uid} has no worker any more")

    async def _pod_cleaned_up(self, uid: str) -> bool:
        runtime = self.relist.pod(uid)
        return not runtime.running_containers() and not any(s.ready for s in runtime.sandboxes)

    def _eviction_event(self, uid: str | None, reason: str, message: str, annotations: Mapping[str, str]) -> None:
        if uid is None:
            self.recorder.node_event("Warning", reason, message, self.heartbeat.uid)
            return
        pod = self.workers.pod(uid)
        if pod is not None:
            self.recorder.pod_event(pod, "Warning", reason, message)

    # ------------------------------------------------------------------------------- the CPU manager's edges

    def _device_pods(self) -> set[str]:
        """The pods whose devices stay held: the workers' active pods, and pods running on the node that no worker
        has (yet: after a restart, before the watch brings them), as their devices are still in use."""
        return self.workers.device_pods() | {uid for uid, view in list(self.relist.pods.items())
                                             if uid not in self.workers and view.running_containers()}

    def _running_containers(self) -> list[RunningContainer]:
        """The runtime's running containers as the last relist saw them."""
        return [RunningContainer(uid, c.name, c.id) for uid, view in list(self.relist.pods.items())
                for c in view.running_containers()]

    async def _listed_pod_uids(self) -> set[str]:
        """The UIDs of this node's pods in the apiserver (asked before the CPUs of a pod no worker has are
        released); none in standalone mode."""
        if self.standalone:
            return set()
        return {(p.get("metadata") or {}).get("uid", "") for p in await self.api.list_pods(self.cfg.pod_field_selector)}

    def _hook_event(self, pod: Any, event: hooks_api.HookEvent) -> None:
        """An observe hook's event (or its failure) on its pod."""
        self.recorder.pod_event(pod, event.type, event.reason, event.message)

    def _wake(self, uids: set[str]) -> None:
        """A probe result changed, a pod certificate request was answered, a ClusterTrustBundle changed: the pods'
        workers look again."""
        self.workers.wake(uids)

    async def start(self) -> None:
        """Register the node (or, while the apiserver cannot be reached, keep trying in the heartbeat loop, as
        upstream's registerWithAPIServer does beside the pods' work), then start the loops (upstream Run): the
        services cache, the static pod source (its
        first scan before housekeeping may run: static pods' containers are not orphans), the relist, the
        heartbeats, housekeeping, the kubelet API and the pod-resources API, and last the healthz port (a port
        that cannot be bound there is only logged, as upstream's). OSError or ssl.SSLError when an API
        cannot be served; CPUManagerError or MemoryManagerError, before anything else, when the CPU, memory or
        topology manager's policy, the machine and the checkpoint do not fit (upstream refuses to start);
        KernelTunablesError, once the Node is registered, when the kernel tunables are not as the kubelet needs
        them (with protectKernelDefaults) or cannot be read or set (upstream's container manager fails to start).
        Standalone, nothing is registered and the loops that need the apiserver are not started."""
        await self.cpu_manager.start()
        await self.memory_manager.start()
        await self.device_manager.start()  # the checkpoint restored, then kubelet.sock served
        await self.api.open()
        if self.standalone:
            logger.info("No API server defined - no node status update will be sent")  # upstream Kubelet.Run
            self._registered()  # upstream BirthCry: the "Starting kubelet." event (to the log)
        elif await self.heartbeat.try_register():
            self._registered()
        await self.container_manager.start()
        cfg = self.cfg
        if cfg.port:
            reviews = None if self.standalone else self.api  # upstream BuildAuth's nil client: no webhooks
            self.server = await serve(cfg, self.backend, authenticator_for(cfg, reviews),
                                      authorizer_for(cfg, reviews), tls=await self._serving_tls())
            logger.info(f"serving the kubelet API on {cfg.address}:{cfg.port}")
        await self.pod_resources.start()
        if not self.standalone:
            self._tasks.append(asyncio.create_task(self.services.run(), name="services"))
        if self.objects is not None:  # idle watches stopped every minute; every watch at the end
            self._tasks.append(asyncio.create_task(self.objects.run(), name="object-watches"))
        if self.static_pods is not None and cfg.pod_manifest_path:
            await self.static_pods.scan()
            self._tasks.append(asyncio.create_task(self.static_pods.run(), name="static-pods"))
        if self.manifest_url is not None:
            logger.info(f"Adding pod URL with HTTP header: URL {cfg.static_pod_url}, header names "
                        f"{sorted({name for name, _ in self.manifest_url.headers})}")  # the values may be secrets
            self._tasks.append(asyncio.create_task(self.manifest_url.run(), name="static-pods-url"))
        self._tasks += [
            asyncio.create_task(self.relist.run(self.workers.wake), name="runtime-relist"),
            asyncio.create_task(self.runtime_events.run(), name="runtime-events"),
            asyncio.create_task(self.housekeeping.run(), name="housekeeping"),
            asyncio.create_task(self.container_gc.run(), name="container-gc"),
            asyncio.create_task(self.image_gc.run(), name="image-gc"),
            asyncio.create_task(self.log_manager.run(), name="container-log-manager"),
            asyncio.create_task(self.eviction.run(), name="eviction-manager"),
            asyncio.create_task(self.oom.run(), name="oom-watcher"),
            asyncio.create_task(self.container_manager.run(), name="qos-cgroups"),
            asyncio.create_task(self.cpu_manager.run(), name="cpu-manager"),
            asyncio.create_task(self.memory_manager.run(), name="memory-manager"),
            # upstream initializeRuntimeDependentModules: the plugin manager after the container manager
            asyncio.create_task(self.plugin_manager.run(), name="plugin-manager"),
        ]
        SCAVENGER.acquire()  # one per process, however many (hollow) nodes hold it
        self._scavenging = True
        for line in hook_loader.describe(self.policy_hooks.hooks):
            logger.info(line)
        if self.policy_hooks.observes:
            self._tasks.append(asyncio.create_task(self.policy_hooks.run(), name="policy-hook-observers"))
        if self.tracer is not None:
            logger.info("Pod start traces: %d in a million sent to %s", self.tracer.rate, self.tracer.endpoint)
            self.tracer.start()
        if self.standalone:
            logger.info("Kubernetes client is nil, not starting status manager")  # upstream status manager Start
        else:
            self._tasks += [
                asyncio.create_task(self.heartbeat.run(on_registered=self._registered_late), name="node-heartbeat"),
                asyncio.create_task(self.status.run(), name="status-manager"),
                asyncio.create_task(self.pod_certificates.run(), name="pod-certificates"),
                asyncio.create_task(self.trust_bundles.run(), name="cluster-trust-bundles"),
                # upstream initializeCSINode: started with the CSI plugin, the CSINode made once the apiserver answers
                asyncio.create_task(self.csi_node_info.run(), name="csinode-initialization"),
            ]
        if self.shutdown.enabled:  # upstream initializeRuntimeDependentModules: after the plugin manager
            self._tasks.append(asyncio.create_task(self._run_shutdown_manager(), name="node-shutdown-manager"))
        if self.watchdog is not None:  # upstream Run: SetHealthCheckers, right before the sync loop
            self.watchdog.set_health_checkers(self.sync_loop_health_check, self.health_checkers())
        if self.healthz_server is not None:
            # upstream run: the healthz port once RunKubelet returns (the Node need not exist yet), before READY=1;
            # bound in the background, tried again every 5 s while the port is taken
            self.healthz_server.start()

    # ------------------------------------------------------------------------------- the node shutdown manager

    async def _run_shutdown_manager(self) -> None:
        try:
            watching = await self.shutdown.start()
        except (TimeoutError, DBusError, OSError) as exc:
            # upstream: not critical for the kubelet, logged, the kubelet runs on without it
            logger.error(f"Failed to start node shutdown manager: {exc}")
            return
        except Exception:  # nor is a bug in it: logged with its traceback, the agent runs on
            logger.exception("Failed to start node shutdown manager")
            return
        if watching is not None:
            try:
                await watching
            finally:
                watching.cancel()
                await self.shutdown.stop()

    async def _pod_shut_down(self, uid: str) -> bool:
        """Nothing of the pod runs and its volumes are unmounted (upstream killPods: the kill, then
        WaitForAllPodsUnmount, before the next priority group)."""
        return await self._pod_cleaned_up(uid) and await self.executor.volumes.unmounted(uid)

    async def _sync_node_status(self) -> None:
        """upstream syncNodeStatus, started as the shutdown begins: Ready False now, not at the next report."""
        if self.standalone:  # upstream syncNodeStatus: nothing to update without a client
            return
        try:
            await self.heartbeat.post_status(force=True)
        except API_ERRORS as exc:
            logger.warning(f"node status not updated at shutdown: {exc}")

    # ------------------------------------------------------------------------------- health checks

    def sync_loop_health_check(self) -> str:
        """upstream SyncLoopHealthCheck, on kopflet's nearest to the sync loop: the runtime relist, which wakes the
        pods' workers every second (upstream's loop stops too while the runtime is down: runtimeErrors)."""
        return watchdog_rules.sync_loop_error(self.relist.relisted_at, time.monotonic(), self.cfg.resync_period)

    def health_checkers(self) -> list[Check]:
        """upstream containerManager.GetHealthCheckers: the device plugins' registration server."""
        return [("device-plugin", self.device_manager.healthy)]

    def healthz_checks(self) -> tuple[Check, ...]:
        """The kubelet API's ``/healthz`` (InstallAuthNotRequiredHandlers): ping, log, syncloop and the container
        manager's, as the watchdog runs them; the healthz port runs ping alone."""
        return default_checks(self.log_check, self.sync_loop_health_check, self.health_checkers())

    def _sources_ready(self) -> bool:
        """upstream sourcesReady.AllReady: the file source is read before housekeeping starts; the URL counts once it
        has given its pods (an answer decoded, or an empty one)."""
        return self.manifest_url is None or self.manifest_url.synced.is_set()

    def _registered(self) -> None:
        """The Node exists: upstream's "Starting kubelet." event."""
        self.recorder.node_event("Normal", "Starting", "Starting kubelet.", self.heartbeat.uid)

    def _registered_late(self) -> None:
        """The Node exists only now (the apiserver could not be reached at start; it may be one of the static
        pods): the event, and at once the static pods' mirror pods, which name the Node as their owner."""
        self._registered()
        if self.static_pods is not None:
            self._tasks.append(asyncio.create_task(self.static_pods.ensure_mirrors(), name="mirror-pods"))

    async def _serving_tls(self) -> ServingTLS:
        """The kubelet API's certificate (NewMainKubelet): the files' pair, reloaded when they change
        (ReloadKubeletServerCertificateFile); with serverTLSBootstrap, the serving certificate manager's pair,
        each renewal taken for the next handshake. ManagerError when the manager's store is broken."""
        cfg = self.cfg
        tls = await serving_tls(cfg, addresses=[cfg.node_ip] if cfg.node_ip else [])
        if not cfg.server_tls_bootstrap:
            self._tasks.append(asyncio.create_task(tls.watch_files(), name="serving-certificate-files"))
            return tls
        manager = await new_server_manager(cfg.cert_directory, cfg.node_name, self.api,
                                           lambda: setters.addresses(cfg.node_name, cfg.node_ip),
                                           cert_file=cfg.tls_cert_file, key_file=cfg.tls_private_key_file)

        async def take_pair() -> None:
            paths = manager.current_paths()
            if paths is not None:
                await tls.use(*paths)

        await take_pair()  # the pair an earlier run stored (or tlsCertFile) until the first renewal
        if self.standalone:  # client-go's manager without a clientset: the stored pair only, never renewed
            logger.log(v(2), "Certificate rotation is not enabled, no connection to the apiserver")
            return tls
        manager.add_listener(take_pair)
        manager.start()
        self.serving_certificates = manager
        self.metrics.watch_certificate_manager(manager)
        return tls

    def pod_event(self, kind: str | None, body: Mapping[str, Any]) -> None:
        """A pod from the watch: to its worker. A static pod's mirror is not: its manifest is the source of truth."""
        if static_pods.is_mirror(body):
            return
        if kind == "DELETED":
            self.workers.deleted(body)
        else:
            self.workers.update(body)

    async def stop(self, *, close_runtime: bool = True) -> None:
        """Stop the agent's own work, in reverse order; running pods are left as they are for the next start.
        `close_runtime` False keeps the runtime connection open (a start that failed is tried again with it). The
        watchdog loses the node's checks (it pings while the process cleans up, and a start tried again gives it the
        new node's)."""
        if self._scavenging:
            self._scavenging = False
            await SCAVENGER.release()
        if self.watchdog is not None:
            self.watchdog.set_health_checkers(None)
        if self.healthz_server is not None:
            await self.healthz_server.close()
        if self.server is not None:
            await self.server.close()
        if self.serving_certificates is not None:
            await self.serving_certificates.stop()
        await self.pod_resources.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.manifest_url is not None:
            await self.manifest_url.close()
        await self.stats.close()
        await self.container_manager.close()
        await self.workers.stop()
        if self.tracer is not None:
            await self.tracer.close()
        await self.device_manager.stop()
        await self.prober.close()
        await self.recorder.flush(grace=EVENT_FLUSH_TIMEOUT)
        await self.api.close()
        if self._own_log_check:
            self.log_check.close()
        if close_runtime:
            await self.runtime.close()
