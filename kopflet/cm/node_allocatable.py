"""Node allocatable on the pods' cgroup: what upstream's node container manager (pkg/kubelet/cm
node_container_manager_linux.go) writes on ``kubepods`` and says about it.

With ``pods`` in enforceNodeAllocatable (the default), every pod together may use no more than the node's capacity
less systemReserved and kubeReserved: ``kubepods`` gets that memory limit, the cpu shares of that much CPU and
that pids limit. Without it, ``kubepods`` still gets the shares of the whole node's CPU (the kernel's default 1024
would starve the pods next to the system's other cgroups), its whole memory and its pid limit. The hard eviction
thresholds are not taken off here: they only shrink the allocatable the scheduler sees.

Pure: the caller (`kopflet.cm.container_manager`) reads the machine and writes the cgroups.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Final

from kopflet import gotext
from kopflet.api import qos
from kopflet.cm import helpers

PODS: Final = "pods"
SYSTEM_RESERVED: Final = "system-reserved"
SYSTEM_RESERVED_COMPRESSIBLE: Final = "system-reserved-compressible"
KUBE_RESERVED: Final = "kube-reserved"
KUBE_RESERVED_COMPRESSIBLE: Final = "kube-reserved-compressible"
NONE: Final = "none"
"""enforceNodeAllocatable's values (upstream kubetypes *EnforcementKey)."""
DEFAULT_ENFORCEMENT: Final = (PODS,)
"""enforceNodeAllocatable's default (v1beta1 DefaultNodeAllocatableEnforcement)."""
PID: Final = "pid"
"""The internal resource name of process IDs (upstream pidlimit.PIDs): reservable, never in the Node's capacity."""

ENFORCED_REASON: Final = "NodeAllocatableEnforced"
ENFORCED_MESSAGE: Final = "Updated Node Allocatable limit across pods"
FAILED_REASON: Final = "FailedNodeAllocatableEnforcement"


def validate_enforcement(values: Iterable[str], *, system_reserved_cgroup: str = "",
                         kube_reserved_cgroup: str = "", cgroups_per_qos: bool = True) -> list[str]:
    """upstream ValidateKubeletConfiguration's checks of enforceNodeAllocatable, with its messages, in its order:
    every enforcement but ``none`` needs cgroupsPerQOS."""
    values = list(values)
    errors = []
    flag = "enforceNodeAllocatable (--enforce-node-allocatable)"
    for plain, compressible in ((SYSTEM_RESERVED, SYSTEM_RESERVED_COMPRESSIBLE),
                                (KUBE_RESERVED, KUBE_RESERVED_COMPRESSIBLE)):
        if plain in values and compressible in values:
            errors.append(f'invalid configuration: both "{plain}" and "{compressible}" cannot be specified together '
                          f"in {flag}")
    seen: set[str] = set()
    for value in values:
        if value in seen:
            errors.append(f'invalid configuration: duplicated enforcements "{value}" in {flag}')
            continue
        seen.add(value)
        if value == NONE:
            if len(values) > 1:
                errors.append(f"invalid configuration: {flag} may not contain additional enforcements when "
                              f'"{NONE}" is specified')
            continue
        if value not in (PODS, SYSTEM_RESERVED, SYSTEM_RESERVED_COMPRESSIBLE, KUBE_RESERVED,
                         KUBE_RESERVED_COMPRESSIBLE):
            errors.append(f'invalid configuration: option "{value}" specified for {flag}. Valid options are "{PODS}", '
                          f'"{SYSTEM_RESERVED}", "{SYSTEM_RESERVED_COMPRESSIBLE}", "{KUBE_RESERVED}", '
                          f'"{KUBE_RESERVED_COMPRESSIBLE}" or "{NONE}"')
            continue
        if value in (SYSTEM_RESERVED, SYSTEM_RESERVED_COMPRESSIBLE) and not system_reserved_cgroup:
            errors.append(f"invalid configuration: systemReservedCgroup (--system-reserved-cgroup) must be specified "
                          f'when "{SYSTEM_RESERVED}" or "{SYSTEM_RESERVED_COMPRESSIBLE}" included in {flag}')
        elif value in (KUBE_RESERVED, KUBE_RESERVED_COMPRESSIBLE) and not kube_reserved_cgroup:
            errors.append(f"invalid configuration: kubeReservedCgroup (--kube-reserved-cgroup) must be specified "
                          f'when "{KUBE_RESERVED}" or "{KUBE_RESERVED_COMPRESSIBLE}" included in {flag}')
        if not cgroups_per_qos:
            errors.append(f"invalid configuration: cgroupsPerQOS (--cgroups-per-qos) must be set to true when "
                          f'"{value}" contained in {flag}')
    return errors


def internal_capacity(cpus: int, memory_bytes: int, max_pid: int | None) -> dict[str, Fraction]:
    """The capacity the top cgroups are sized from (upstream internalCapacity): the machine's CPUs and memory, and
    its process ID limit (min of kernel.pid_max and kernel.threads-max) when known."""
    capacity = {qos.CPU: Fraction(cpus), qos.MEMORY: Fraction(memory_bytes)}
    if max_pid is not None:
        capacity[PID] = Fraction(max_pid)
    return capacity


def allocatable_absolute(capacity: Mapping[str, Fraction], system_reserved: Mapping[str, str],
                         kube_reserved: Mapping[str, str]) -> dict[str, Fraction]:
    """Capacity less both reservations, never below zero (upstream getNodeAllocatableAbsoluteImpl)."""
    result = {}
    for name, total in capacity.items():
        reserved = sum((qos.parse_quantity(r[name]) for r in (system_reserved, kube_reserved) if name in r),
                       start=Fraction(0))
        result[name] = max(total - reserved, Fraction(0))
    return result


def pods_cgroup_config(capacity: Mapping[str, Fraction], system_reserved: Mapping[str, str],
                       kube_reserved: Mapping[str, str], enforcement: Iterable[str]) -> helpers.ResourceConfig:
    """``kubepods``'s settings (upstream enforceNodeAllocatableCgroups with getCgroupConfigInternal): allocatable
    with ``pods`` enforced, else the whole capacity; memory in bytes, cpu as shares, pids as a count."""
    amounts = allocatable_absolute(capacity, system_reserved, kube_reserved) if PODS in set(enforcement) \
        else dict(capacity)
    memory = amounts.get(qos.MEMORY)
    cpu = amounts.get(qos.CPU)
    pids = amounts.get(PID)
    return helpers.ResourceConfig(
        memory=qos.value(memory) if memory is not None else None,
        cpu_shares=helpers.milli_cpu_to_shares(qos.milli_value(cpu)) if cpu is not None else None,
        pids_limit=qos.value(pids) if pids is not None else None,
    )


def failed_message(cgroup_root: str, error: str) -> str:
    """The Warning event's message when ``kubepods`` refuses its limits (upstream formats the cgroup name, a string
    slice, with %q)."""
    parts = " ".join(gotext.go_quote(p) for p in cgroup_root.strip("/").split("/") if p)
    return f"Failed to update Node Allocatable Limits [{parts}]: {error}"


__all__ = [
    "DEFAULT_ENFORCEMENT",
    "ENFORCED_MESSAGE",
    "ENFORCED_REASON",
    "FAILED_REASON",
    "KUBE_RESERVED",
    "KUBE_RESERVED_COMPRESSIBLE",
    "NONE",
    "PID",
    "PODS",
    "SYSTEM_RESERVED",
    "SYSTEM_RESERVED_COMPRESSIBLE",
    "allocatable_absolute",
    "failed_message",
    "internal_capacity",
    "pods_cgroup_config",
    "validate_enforcement",
]
