"""The container manager's resource admit handler (upstream `GetAllocateResourcesPodAdmitHandler`: the topology
manager's `Admit` with its hint providers, pkg/kubelet/cm/container_manager_linux.go): the device manager, the CPU
manager and the memory manager, in upstream's order, aligned by the topology manager's policy and scope. Pure.

The device manager takes part for a pod asking for device plugin resources (`admit_steps` with a
`devices.TopologySnapshot`): its hints come from the snapshot, and its allocations (the plugins' Allocate, I/O)
are yielded to the caller, `DeviceManager.admit_steps`, which makes them and sends back a new snapshot.

Each manager's stale assignments are released first (upstream's providers do it in their hint and allocate calls);
then the topology manager admits (`topology_manager.admit`). The new states are recorded by the caller only if
every admit handler admits the pod.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator
from typing import Any

from kopflet.api import spec
from kopflet.cm.cpumanager import cpu_manager
from kopflet.cm.cpumanager import static_policy as cpu_policy
from kopflet.cm.devicemanager.devices import TopologySnapshot
from kopflet.cm.memorymanager import memory_manager
from kopflet.cm.memorymanager.state import State as MemoryState
from kopflet.cm.topologymanager import topology_manager
from kopflet.cm.topologymanager.topology_manager import TopologyManager
from kopflet.lifecycle import admission


@dataclasses.dataclass(frozen=True)
class Admission:
    """The states to record once the pod is admitted (None: nothing to record for that manager), or why not."""

    cpu_state: cpu_policy.State | None = None
    memory_state: MemoryState | None = None
    rejection: admission.Rejection | None = None


Steps = Generator[topology_manager.AllocationRequest, Any, Admission]


def admit_steps(topology: TopologyManager, cpus: cpu_manager.Snapshot | None,
                memory: memory_manager.Snapshot | None, pod: spec.Pod,
                devices: TopologySnapshot | None = None) -> Steps:
    """The pod's devices, exclusive CPUs and NUMA memory, aligned as the topology manager's policy asks; the
    devices' allocations yielded (`topology_manager.admit_steps`)."""
    cpu_active = cpus is not None and cpus.policy is not None
    memory_active = memory is not None and memory.policy is not None
    if not cpu_active and not memory_active and devices is None:
        return Admission()
    providers: list[topology_manager.HintProvider] = []
    if devices is not None:
        providers.append(devices)  # upstream adds the device manager's hints first
    if cpus is not None:
        state = cpu_manager.remove_stale_state(cpus.state, cpus.pods.with_pod(pod)) if cpu_active else cpus.state
        providers.append(cpu_manager.HintProvider(cpus.policy, state))
    if memory is not None:
        blocks = memory_manager.remove_stale_state(memory.state, memory.pods.with_pod(pod)) if memory_active \
            else memory.state
        providers.append(memory_manager.Provider(memory.policy, blocks))
    result = yield from topology_manager.admit_steps(topology.policy, topology.scope, providers, pod)
    if result.rejection is not None:
        return Admission(rejection=result.rejection)
    cpu_state = memory_blocks = None
    for provider in result.providers:
        if isinstance(provider, cpu_manager.HintProvider) and cpu_active:
            cpu_state = provider.state
        elif isinstance(provider, memory_manager.Provider) and memory_active:
            memory_blocks = provider.state
    return Admission(cpu_state=cpu_state, memory_state=memory_blocks)


def admit(topology: TopologyManager, cpus: cpu_manager.Snapshot | None, memory: memory_manager.Snapshot | None,
          pod: spec.Pod) -> Admission:
    """The pod's exclusive CPUs and NUMA memory (no device plugin resources), aligned as the topology manager's
    policy asks."""
    return topology_manager.run(admit_steps(topology, cpus, memory, pod))
