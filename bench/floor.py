"""The runtime floor: what a pod start and stop cost straight through CRI, with no agent and no apiserver.

The same sandbox shape an agent asks for (its own pod cgroup under the BestEffort tier, a log directory, and the
RuntimeDefault seccomp profile, which upstream's kubelet asks for every sandbox whatever the pod says:
kuberuntime_sandbox.go, issue #84623), the same pre-pulled image and command as the benchmark pods.
Start = RunPodSandbox + CreateContainer + StartContainer; stop = StopContainer (the container exits on SIGTERM) +
StopPodSandbox + RemovePodSandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
import uuid
from pathlib import Path

from bench import workload
from cri_client import CriClient, types

LABEL = "kopflet.dev/bench-floor"


class _Pod:
    def __init__(self, cri: CriClient, image: str, logs: Path) -> None:
        self.cri, self.image, self.logs = cri, image, logs
        self.uid = str(uuid.uuid4())
        self.sandbox_id = ""
        self.container_id = ""

    async def start(self) -> float:
        t0 = time.monotonic()
        name = f"floor-{self.uid[:8]}"
        log_dir = self.logs / name
        log_dir.mkdir()
        config = types.PodSandboxConfig(
            metadata=types.PodSandboxMetadata(name=name, namespace="bench-floor", uid=self.uid),
            hostname=name, log_directory=str(log_dir), labels={LABEL: "true"},
            linux=types.LinuxSandboxConfig(
                cgroup_parent=f"/kubepods/besteffort/pod{self.uid}",
                security_context=types.SandboxSecurityContext(
                    seccomp=types.SecurityProfile(profile_type=types.ProfileType.RUNTIME_DEFAULT))))
        self.sandbox_id = await self.cri.sandboxes.run(config)
        self.container_id = await self.cri.containers.create(
            self.sandbox_id,
            types.ContainerConfig(metadata=types.ContainerMetadata(name="main"), image=self.image,
                                  command=("sh", "-c", workload.SLEEP_UNTIL_TERM), log_path="main/0.log",
                                  labels={LABEL: "true"}),
            config)
        await self.cri.containers.start(self.container_id)
        return time.monotonic() - t0

    async def stop(self) -> float:
        t0 = time.monotonic()
        await self.cri.containers.stop(self.container_id, timeout=30)
        await self.cri.sandboxes.stop(self.sandbox_id)
        await self.cri.sandboxes.remove(self.sandbox_id)
        elapsed = time.monotonic() - t0
        # The pod cgroup is the agent's to remove (the runtime leaves it), so not part of the floor.
        await asyncio.to_thread(_remove_pod_cgroups, self.uid)
        return elapsed


def _remove_pod_cgroups(uid: str) -> None:
    for cgroup in Path("/sys/fs/cgroup").glob(f"*/kubepods/besteffort/pod{uid}"):
        with contextlib.suppress(OSError):
            cgroup.rmdir()


async def _measure(endpoint: str, sequential: int, bursts: tuple[int, ...]) -> dict:
    async with CriClient(endpoint, timeout=120, pull_timeout=300) as cri:
        image = await cri.images.pull(workload.IMAGE)
        with tempfile.TemporaryDirectory(prefix="kopflet-bench-floor-") as tmp:
            logs = Path(tmp)
            starts, stops = [], []
            for _ in range(sequential):
                pod = _Pod(cri, image, logs)
                starts.append(await pod.start())
                stops.append(await pod.stop())
            out: dict = {"start": starts, "stop": stops, "bursts": {}}
            for size in bursts:
                pods = [_Pod(cri, image, logs) for _ in range(size)]
                t0 = time.monotonic()
                per_pod = await asyncio.gather(*(p.start() for p in pods))
                all_started = time.monotonic() - t0
                await asyncio.gather(*(p.stop() for p in pods))
                out["bursts"][str(size)] = {"per_pod": list(per_pod), "all_started": all_started}
            return out


def measure(endpoint: str, sequential: int, bursts: tuple[int, ...]) -> dict:
    """Raw seconds: {"start": [...], "stop": [...], "bursts": {"30": {"per_pod": [...], "all_started": s}}}."""
    return asyncio.run(_measure(endpoint, sequential, bursts))
