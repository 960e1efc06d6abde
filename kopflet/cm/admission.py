"""The container manager's resource admit handler (upstream `GetAllocateResourcesPodAdmitHandler`: the topology
manager's `Admit` with its hint providers, pkg/kubelet/cm/container_manager_linux.go): the CPU manager and the
memory manager, in upstream's order, aligned by the topology manager's policy and scope. Pure.

Each manager's stale assignments are released first (upstream's providers do it in their hint and allocate calls);
then the topology manager admits (`topology_manager.admit`). The new states are recorded by the caller only if
every admit handler admits the pod.
"""

from __future__ import annotations

import dataclasses

from kopflet.api import spec
from kopflet.cm.cpumanager import cpu_manager
from kopflet.cm.cpumanager import static_policy as cpu_policy
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


def admit(topology: TopologyManager, cpus: cpu_manager.Snapshot | None, memory: memory_manager.Snapshot | None,
          pod: spec.Pod) -> Admission:
    """The pod's exclusive CPUs and NUMA memory, aligned as the topology manager's policy asks."""
    cpu_active = cpus is not None and cpus.policy is not None
    memory_active = memory is not None and memory.policy is not None
    if not cpu_active and not memory_active:
        return Admission()
    providers: list[topology_manager.HintProvider] = []
    if cpus is not None:
        state = cpu_manager.remove_stale_state(cpus.state, cpus.pods.with_pod(pod)) if cpu_active else cpus.state
        providers.append(cpu_manager.HintProvider(cpus.policy, state))
    if memory is not None:
        blocks = memory_manager.remove_stale_state(memory.state, memory.pods.with_pod(pod)) if memory_active \
            else memory.state
        providers.append(memory_manager.Provider(memory.policy, blocks))
    result = topology_manager.admit(topology.policy, topology.scope, providers, pod)
    if result.rejection is not None:
        return Admission(rejection=result.rejection)
    cpu_state = memory_blocks = None
    for provider in result.providers:
        if isinstance(provider, cpu_manager.HintProvider) and cpu_active:
            cpu_state = provider.state
        elif isinstance(provider, memory_manager.Provider) and memory_active:
            memory_blocks = provider.state
    return Admission(cpu_state=cpu_state, memory_state=memory_blocks)
