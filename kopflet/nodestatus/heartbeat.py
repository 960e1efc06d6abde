"""The agent's Node: registration, the Lease heartbeat and node status (upstream kubelet_node_status.go).

Register (create, or adopt and reconcile labels of) the Node; renew ``kube-node-lease/<node>`` every
10s with a 40s duration; compute node status every ``nodeStatusUpdateFrequency`` (10s) and post it when
it changed (heartbeat times aside) or ``nodeStatusReportFrequency`` (5m) passed. What goes into the
status is computed by the pure ``kopflet.nodestatus.setters``; this module only gathers facts and talks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import os
import platform
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cri_client import CriClient, CriError
from kopflet import __version__
from kopflet.api import apparmor, spec, times
from kopflet.client.events import EventRecorder
from kopflet.client.informer import Delta, Informer
from kopflet.client.kubeapi import API_ERRORS, MERGE, STRATEGIC_MERGE, KubeApiError, KubeClient, q
from kopflet.client.standalone import is_standalone
from kopflet.cm.cpumanager import policy_options
from kopflet.config.settings import AgentConfig
from kopflet.config.upstream_feature_gates import KUBERNETES_VERSION
from kopflet.lifecycle import admission
from kopflet.nodestatus import setters

logger = logging.getLogger(__name__)

LEASE_DURATION = 40  # nodeLeaseDurationSeconds
RENEW_INTERVAL = 10.0  # upstream: 25% of the lease duration
LEASE_NAMESPACE = "kube-node-lease"
# The release whose behaviour kopflet implements, with kopflet's own version as semver build metadata: what reads
# kubeletVersion for version skew (kubeadm upgrade, the apiserver's and controllers' checks) compares v1.37.1, and
# `kubectl get nodes` still shows which agent runs (the same string as `kubelet --version`).
KUBELET_VERSION = f"{KUBERNETES_VERSION}+kopflet.{__version__}"
# upstream registerWithAPIServer: 100 ms before the first try, doubled after each, at most 7 s apart.
REGISTER_FIRST_STEP, REGISTER_MAX_STEP = 0.1, 7.0


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def read_machine_facts(root_dir: str, *, ephemeral_storage: bool = True) -> setters.MachineFacts:
    """The machine's facts (blocking reads of /proc, /sys, /etc: call in a thread, once).

    The root dir's filesystem is measured only for `ephemeral_storage` (localStorageCapacityIsolation):
    upstream's container manager asks cAdvisor's RootFsInfo at start only then, and exits if it fails."""
    memory_kib = 0
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            memory_kib = int(line.split()[1])
    storage_bytes = 0
    if ephemeral_storage:
        path = root_dir
        while not os.path.exists(path) and path not in ("", "/"):
            path = os.path.dirname(path)
        st = os.statvfs(path or "/")
        storage_bytes = st.f_blocks * st.f_frsize
    os_image = "Linux"
    for line in _read("/etc/os-release").splitlines():
        if line.startswith("PRETTY_NAME="):
            os_image = line.split("=", 1)[1].strip('"')
    return setters.MachineFacts(
        cpus=os.cpu_count() or 1, memory_bytes=memory_kib * 1024, ephemeral_storage_bytes=storage_bytes,
        machine=platform.machine(), kernel_version=platform.release(), os_image=os_image,
        machine_id=_read("/etc/machine-id"), system_uuid=_read("/sys/class/dmi/id/product_uuid").lower(),
        boot_id=_read("/proc/sys/kernel/random/boot_id"), apparmor_enabled=read_apparmor_enabled())


def read_apparmor_enabled(sys_root: str = "/sys") -> bool:
    """Whether the kernel enforces AppArmor, read once at start as upstream's validator reads it (blocking)."""
    try:
        with open(f"{sys_root}/module/apparmor/parameters/enabled", "rb") as f:
            parameter: bytes | None = f.read()
    except OSError:
        parameter = None
    return apparmor.host_enabled(os.path.isdir(f"{sys_root}/kernel/security/apparmor"), parameter)


LabelsAndTaints = tuple[dict[str, str], tuple[admission.Taint, ...]]
"""What admission reads of the Node (`labels_and_taints`)."""


class NodeAgent:
    def __init__(self, cfg: AgentConfig, api: KubeClient, cri_client: CriClient, runtime_version: str,
                 facts: setters.MachineFacts, recorder: EventRecorder | None = None,
                 pressure: Callable[[], Mapping[str, bool]] = dict,
                 devices: Callable[[], tuple[Mapping[str, str], Mapping[str, str]]] | None = None) -> None:
        """`pressure` gives the eviction manager's MemoryPressure/DiskPressure/PIDPressure as last decided,
        `devices` the device plugins' resources (capacity, allocatable: the device manager's `capacity`)."""
        self.cfg, self.api, self.cri, self.facts, self.recorder = cfg, api, cri_client, facts, recorder
        self.devices = devices
        self.pressure = pressure
        self.runtime_version = runtime_version
        self.uid = ""
        self.taints: tuple[admission.Taint, ...] = tuple(cfg.register_with_taints)
        self.labels: dict[str, str] | None = None
        """The Node object's labels as last read (None until then): what others add (`kubectl label`, an e2e
        spec's node selector) counts for admission, as upstream's node lister sees it."""
        self.node_watch: Informer[LabelsAndTaints] | None = None if is_standalone(api) else Informer(
            api, "/api/v1/nodes", labels_and_taints, what="node",
            params={"fieldSelector": f"metadata.name={cfg.node_name}"}, on_change=self._node_changed)
        """The Node itself, listed and watched (upstream's node informer, field selector metadata.name), cached as
        its labels and taints only: they follow without a request per pod; `run` runs it."""
        self._posted: dict[str, Any] = {}
        self._conditions: list[dict[str, str]] = []
        self._last_report = 0.0
        self._reported_capacity: Mapping[str, str] = {}
        self._watch_task: asyncio.Task[None] | None = None
        self.shutdown_status: Callable[[], str | None] = lambda: None
        """The node shutdown manager's error while the node shuts down (Ready False, new pods rejected)."""

    def capacity(self) -> dict[str, str]:
        """The Node's capacity: ephemeral-storage per localStorageCapacityIsolation (off, what the Node
        reported at registration stays, as upstream's setter leaves it)."""
        out = setters.capacity(self.facts, self.cfg.max_pods,
                               local_storage_capacity_isolation=self.cfg.local_storage_capacity_isolation,
                               reported=self._reported_capacity)
        if self.devices is not None:  # upstream MachineInfo setter: devicePluginCapacity (0 once removed)
            out.update(self.devices()[0])
        return out

    def allocatable(self) -> dict[str, str]:
        """What the node offers pods (resourceFieldRef defaults unset limits to it, as upstream)."""
        system, kube = policy_options.reservations(self.cfg.system_reserved, self.cfg.kube_reserved,
                                                   self.cfg.reserved_system_cpus)  # --reserved-cpus counts
        out = setters.allocatable(self.capacity(), system_reserved=system, kube_reserved=kube,
                                  eviction_hard=self.cfg.effective_eviction_hard,
                                  local_storage_capacity_isolation=self.cfg.local_storage_capacity_isolation)
        if self.devices is not None:  # upstream: devicePluginAllocatable (the healthy devices) overrides
            out.update(self.devices()[1])
        return out

    def known_labels(self) -> dict[str, str]:
        """The Node's labels as last read, or before it ever was the labels the agent registers it with (upstream
        getNodeAnyWay's initialNode): what a local PersistentVolume's node affinity is checked against."""
        if self.labels is not None:
            return dict(self.labels)
        return setters.node_labels(self.cfg.node_name, self.facts, self.cfg.node_labels)

    async def admission_info(self, pod: spec.Pod | None = None) -> admission.NodeInfo:
        """This node as admission sees it: its labels, current taints and allocatable resources.

        Labels and taints come from the Node as the node watch last saw it, as upstream's node lister. When they
        would refuse `pod` (its node selector or required node affinity, an untolerated NoExecute taint), or the
        watch has not listed the Node yet, they are read again with a GET first: a pod is never rejected for a
        taint already gone or a label not yet seen (a DaemonSet's node selector on a label set a moment before
        its pod; upstream's lister can lag there). Before the Node was ever read, the labels the agent registers
        it with stand in (upstream getNodeAnyWay's initialNode), as they always do in standalone mode (GetNode
        without a client is initialNode)."""
        info = self._node_info()
        if is_standalone(self.api) or (self._watched() and pod is not None and _fits(pod, info)):
            return info
        try:
            labels, taints = await self._read_node()
        except API_ERRORS as exc:
            logger.warning(f"could not read node {self.cfg.node_name}, admitting with known taints: {exc}")
            return info
        if not self._watched():
            self.labels, self.taints = labels, taints
        # Watched: this read is for this decision only; the watch alone updates what is kept (a GET answered
        # before a newer event the watch already applied must not roll it back).
        return dataclasses.replace(info, labels=labels, taints=taints)

    def _node_info(self) -> admission.NodeInfo:
        return admission.NodeInfo(
            name=self.cfg.node_name,
            labels=self.known_labels(),
            taints=self.taints, os="linux", kernel_version=self.facts.kernel_version,
            allowed_unsafe_sysctls=self.cfg.allowed_unsafe_sysctls, allocatable=self.allocatable(),
            pressure=tuple(kind for kind, on in self.pressure().items() if on),
            shutting_down=self.shutdown_status() is not None, apparmor_enabled=self.facts.apparmor_enabled)

    def _watched(self) -> bool:
        """Whether the node watch holds the Node (listed, and not deleted)."""
        watch = self.node_watch
        return watch is not None and watch.has_synced() and ("", self.cfg.node_name) in watch.objects

    def _node_changed(self, deltas: Sequence[Delta[LabelsAndTaints]]) -> None:
        for delta in deltas:
            if delta.new is not None:
                self.labels, self.taints = delta.new

    async def _read_node(self) -> LabelsAndTaints:
        return labels_and_taints(await self.api.request("GET", f"/api/v1/nodes/{q(self.cfg.node_name)}"))

    async def register(self) -> None:
        """Create the Node with its taints, or adopt the existing one and reconcile its labels
        (upstream registerWithAPIServer + reconcileExtendedResource/labels; NodeRestriction forbids a
        node to change its taints after creation, so they are only set here)."""
        labels = setters.node_labels(self.cfg.node_name, self.facts, self.cfg.node_labels)
        taints = [t.as_dict() for t in self.cfg.register_with_taints]
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.cfg.node_name, "labels": labels},
                "spec": {"taints": taints} if taints else {}}
        try:
            node = await self.api.request("POST", "/api/v1/nodes", body=body)
            logger.info(f"registered node {self.cfg.node_name}")
        except KubeApiError as exc:
            if exc.status != 409:
                raise
            node = await self.api.request("PATCH", f"/api/v1/nodes/{q(self.cfg.node_name)}",
                                          body={"metadata": {"labels": labels}}, content_type=MERGE)
            logger.info(f"node {self.cfg.node_name} already registered; adopted it")
        self.uid = node["metadata"]["uid"]
        self._reported_capacity = dict((node.get("status") or {}).get("capacity") or {})
        previous_boot = str(((node.get("status") or {}).get("nodeInfo") or {}).get("bootID") or "")
        rebooted = setters.rebooted_message(self.cfg.node_name, previous_boot, self.facts.boot_id)
        if rebooted and self.recorder is not None:
            self.recorder.node_event("Warning", "Rebooted", rebooted, self.uid)
        await self.refresh_node()
        self._conditions = list(node.get("status", {}).get("conditions", []))
        await self.renew_lease()
        await self.post_status(force=True)

    async def try_register(self) -> bool:
        """One registration attempt: False (logged) when the apiserver cannot be reached or refuses."""
        try:
            await self.register()
        except API_ERRORS as exc:
            # upstream tryRegisterWithAPIServer's "Unable to register node with API server"
            logger.warning(f"Unable to register node {self.cfg.node_name} with API server: {exc}")
            self.uid = ""  # a registration cut short is done again whole (the Node is adopted the second time)
            return False
        return True

    async def register_with_api_server(self) -> None:
        """Register, tried until it works (upstream registerWithAPIServer): the agent runs its static pods
        meanwhile, and the apiserver may be one of them (a kubeadm control plane)."""
        step = REGISTER_FIRST_STEP
        while True:
            await asyncio.sleep(step)
            step = min(step * 2, REGISTER_MAX_STEP)
            if await self.try_register():
                return

    async def run(self, on_registered: Callable[[], None] = lambda: None) -> None:
        """Registration if the start could not register, then lease renewals and status updates until cancelled;
        API or runtime outages are waited out. `on_registered` is called once the Node exists."""
        if not self.uid:
            await self.register_with_api_server()
            on_registered()
        if self.node_watch is not None:
            self._watch_task = asyncio.create_task(self.node_watch.run(), name="node-informer")
        try:
            await self._beat()
        finally:
            if self._watch_task is not None:
                self._watch_task.cancel()
                await asyncio.gather(self._watch_task, return_exceptions=True)

    async def _beat(self) -> None:
        loop = asyncio.get_running_loop()
        next_status = loop.time() + self.cfg.node_status_update_frequency
        while True:
            await asyncio.sleep(min(RENEW_INTERVAL, self.cfg.node_status_update_frequency))
            try:
                await self.renew_lease()
                if loop.time() >= next_status:
                    next_status = loop.time() + self.cfg.node_status_update_frequency
                    await self.post_status()
            except API_ERRORS as exc:
                logger.warning(f"node heartbeat failed: {exc}")

    async def renew_lease(self) -> None:
        renew = times.micro_timestamp(_now())
        spec = {"holderIdentity": self.cfg.node_name, "leaseDurationSeconds": LEASE_DURATION, "renewTime": renew}
        path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases"
        try:
            await self.api.request("PATCH", f"{path}/{q(self.cfg.node_name)}", body={"spec": spec}, content_type=MERGE)
        except KubeApiError as exc:
            if not exc.not_found:
                raise
            owner = [{"apiVersion": "v1", "kind": "Node", "name": self.cfg.node_name, "uid": self.uid}] \
                if self.uid else []
            await self.api.request("POST", path, body={
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.cfg.node_name, "namespace": LEASE_NAMESPACE, "ownerReferences": owner},
                "spec": spec})

    async def refresh_node(self) -> None:
        """Read the Node's labels and taints now and keep them (at registration, before the watch runs)."""
        self.labels, self.taints = await self._read_node()

    async def compute_status(self) -> dict[str, Any]:
        try:
            runtime: Any = await self.cri.status()
            error = ""
        except CriError as exc:
            runtime, error = None, exc.details
        try:
            images = setters.images(await self.cri.images.list())
        except CriError:
            images = self._posted.get("images", [])
        capacity = self.capacity()
        missing = setters.missing_capacities(
            capacity, local_storage_capacity_isolation=self.cfg.local_storage_capacity_isolation)
        ready = setters.ready_condition(runtime, error, missing=missing, shutdown=self.shutdown_status())
        return {
            "conditions": setters.conditions(ready, self._conditions, _now(), pressure=self.pressure()),
            "capacity": capacity,
            "allocatable": self.allocatable(),
            "addresses": setters.addresses(self.cfg.node_name, self.cfg.node_ip),
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.cfg.port}},
            "nodeInfo": setters.node_info(self.facts, KUBELET_VERSION, self.runtime_version),
            "images": images,
            "declaredFeatures": setters.declared_features(),
        }

    async def post_status(self, force: bool = False) -> None:
        status = await self.compute_status()
        loop_now = asyncio.get_running_loop().time()
        changed = setters.without_heartbeats(status) != setters.without_heartbeats(self._posted)
        if not (force or changed or loop_now - self._last_report >= self.cfg.node_status_report_frequency):
            return
        await self.api.request("PATCH", f"/api/v1/nodes/{q(self.cfg.node_name)}/status",
                               body={"status": status}, content_type=STRATEGIC_MERGE)
        if self.recorder is not None:
            for reason, message in setters.condition_events(self.cfg.node_name, self._conditions,
                                                            status["conditions"]):
                self.recorder.node_event("Normal", reason, message, self.uid)
        if changed and self._posted and status["conditions"] != self._posted.get("conditions"):
            ready = next(c for c in status["conditions"] if c["type"] == "Ready")
            logger.info(f"node {self.cfg.node_name} Ready={ready['status']}: {ready['message']}")
        self._posted, self._conditions, self._last_report = status, status["conditions"], loop_now


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _fits(pod: spec.Pod, node: admission.NodeInfo) -> bool:
    """Whether the node's labels and taints let `pod` in, as kubelet admission checks them (its node selector and
    required node affinity; NoExecute taints: upstream's admission checks no others)."""
    return admission.required_node_affinity_matches(pod, node) and \
        admission.untolerated_taint(pod, node.taints, effect=admission.NO_EXECUTE) is None


def labels_and_taints(node: Mapping[str, Any]) -> LabelsAndTaints:
    """What admission reads of a Node: its labels and taints."""
    labels = {str(k): str(v) for k, v in ((node.get("metadata") or {}).get("labels") or {}).items()}
    taints = tuple(admission.Taint(t.get("key", ""), t.get("value", ""), t.get("effect", ""))
                   for t in (node.get("spec") or {}).get("taints", []) or [])
    return labels, taints
