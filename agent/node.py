"""The agent's Node: registration, the Lease heartbeat and the Ready condition (a first cut).

Pods bound to a Node that does not exist are deleted by the pod garbage collector within a minute,
and a Node without heartbeats gets NoExecute taints, so even the pod lifecycle needs this much:
register the Node, renew ``kube-node-lease/<node>`` every 10s (duration 40s), and post node status
when it changes or every 5 minutes, with Ready following the runtime's CRI Status.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import platform
from typing import Any

from agent.kubeapi import MERGE, STRATEGIC_MERGE, KubeApiError, KubeClient, q
from cri_client import CriClient, CriError
from kopflet import __version__
from kopflet.config import AgentConfig

logger = logging.getLogger(__name__)

LEASE_DURATION = 40  # upstream nodeLeaseDurationSeconds
RENEW_INTERVAL = 10.0  # upstream: 25% of the lease duration
STATUS_UPDATE_FREQUENCY = 10.0  # nodeStatusUpdateFrequency
STATUS_REPORT_FREQUENCY = 300.0  # nodeStatusReportFrequency
MAX_PODS = 110

ARCH = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le", "s390x": "s390x"}


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _stamp(t: datetime.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


class NodeAgent:
    def __init__(self, cfg: AgentConfig, api: KubeClient, cri_client: CriClient, runtime_version: str) -> None:
        self.cfg, self.api, self.cri = cfg, api, cri_client
        self.runtime_version = runtime_version
        self.uid = ""
        self._last_conditions: dict[str, tuple[str, str, str]] = {}
        self._transitions: dict[str, str] = {}
        self._last_report = 0.0

    def labels(self) -> dict[str, str]:
        arch = ARCH.get(platform.machine(), platform.machine())
        return {"kubernetes.io/hostname": self.cfg.node_name, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": arch, "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": arch}

    async def register(self) -> None:
        """Create the Node, or adopt the existing one (upstream registerWithAPIServer)."""
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.cfg.node_name, "labels": self.labels()}}
        try:
            node = await self.api.request("POST", "/api/v1/nodes", body=body)
            logger.info(f"registered node {self.cfg.node_name}")
        except KubeApiError as exc:
            if exc.status != 409:
                raise
            node = await self.api.request("PATCH", f"/api/v1/nodes/{q(self.cfg.node_name)}",
                                          body={"metadata": {"labels": self.labels()}}, content_type=MERGE)
        self.uid = node["metadata"]["uid"]
        await self.post_status(force=True)

    async def run(self) -> None:
        """Lease renewals and status updates until cancelled; API or runtime outages are waited out."""
        next_status = 0.0
        loop = asyncio.get_running_loop()
        while True:
            try:
                await self.renew_lease()
                if loop.time() >= next_status:
                    await self.post_status()
                    next_status = loop.time() + STATUS_UPDATE_FREQUENCY
            except (KubeApiError, OSError, TimeoutError) as exc:
                logger.warning(f"node heartbeat failed: {exc}")
            await asyncio.sleep(RENEW_INTERVAL)

    async def renew_lease(self) -> None:
        name, ns = q(self.cfg.node_name), "kube-node-lease"
        renew = _now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        spec = {"holderIdentity": self.cfg.node_name, "leaseDurationSeconds": LEASE_DURATION, "renewTime": renew}
        try:
            await self.api.request("PATCH", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}",
                                   body={"spec": spec}, content_type=MERGE)
        except KubeApiError as exc:
            if not exc.not_found:
                raise
            owner = [{"apiVersion": "v1", "kind": "Node", "name": self.cfg.node_name, "uid": self.uid}] \
                if self.uid else []
            await self.api.request("POST", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases", body={
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.cfg.node_name, "namespace": ns, "ownerReferences": owner},
                "spec": spec})

    async def ready_condition(self) -> tuple[str, str, str]:
        """Ready from the runtime's CRI Status, with upstream's reasons and messages."""
        try:
            status = await self.cri.status()
        except CriError as exc:
            return "False", "KubeletNotReady", f"container runtime is down: {exc.details}"
        conditions = {c.type: c for c in status.conditions}
        for kind, what in (("RuntimeReady", "container runtime"), ("NetworkReady", "container runtime network")):
            c = conditions.get(kind)
            if c is None or not c.status:
                detail = f"{kind}=false reason:{c.reason if c else ''} message:{c.message if c else ''}"
                return "False", "KubeletNotReady", f"{what} not ready: {detail}"
        return "True", "KubeletReady", "kubelet is posting ready status"

    async def post_status(self, force: bool = False) -> None:
        now = _now()
        ready = await self.ready_condition()
        wanted = {
            "Ready": ready,
            "MemoryPressure": ("False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            "DiskPressure": ("False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            "PIDPressure": ("False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        }
        loop_now = asyncio.get_running_loop().time()
        changed = wanted != self._last_conditions
        if not (force or changed or loop_now - self._last_report >= STATUS_REPORT_FREQUENCY):
            return
        for kind, value in wanted.items():
            if self._last_conditions.get(kind, ("",))[0] != value[0] or kind not in self._transitions:
                self._transitions[kind] = _stamp(now)
        conditions = [{"type": kind, "status": s, "reason": r, "message": m, "lastHeartbeatTime": _stamp(now),
                       "lastTransitionTime": self._transitions[kind]} for kind, (s, r, m) in wanted.items()]
        resources = machine_resources()
        addresses = [{"type": "Hostname", "address": self.cfg.node_name}]
        if self.cfg.node_ip:
            addresses.insert(0, {"type": "InternalIP", "address": self.cfg.node_ip})
        status: dict[str, Any] = {
            "conditions": conditions, "capacity": resources, "allocatable": resources, "addresses": addresses,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "kubeletVersion": f"v{__version__}-kopflet", "kubeProxyVersion": "",
                "containerRuntimeVersion": self.runtime_version, "kernelVersion": platform.release(),
                "osImage": os_image(), "operatingSystem": "linux",
                "architecture": ARCH.get(platform.machine(), platform.machine()),
                "machineID": _read("/etc/machine-id"), "systemUUID": _read("/sys/class/dmi/id/product_uuid"),
                "bootID": _read("/proc/sys/kernel/random/boot_id"),
            },
        }
        await self.api.request("PATCH", f"/api/v1/nodes/{q(self.cfg.node_name)}/status",
                               body={"status": status}, content_type=STRATEGIC_MERGE)
        self._last_conditions = wanted
        self._last_report = loop_now


def machine_resources() -> dict[str, str]:
    cpus = os.cpu_count() or 1
    memory_kib = 0
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            memory_kib = int(line.split()[1])
    return {"cpu": str(cpus), "memory": f"{memory_kib}Ki", "pods": str(MAX_PODS)}


def os_image() -> str:
    for line in _read("/etc/os-release").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip('"')
    return "Linux"


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""
