"""The CPU manager's configuration checks that need no topology, with upstream v1.37.1's texts.

Upstream checks these when it builds the container manager (pkg/kubelet/cm/cpumanager/cpu_manager.go `NewManager`,
policy_none.go `NewNonePolicy`, policy_options.go `NewStaticPolicyOptions` / `CheckPolicyOptionAvailable`); the
kubelet then refuses to start. Here `validate` runs while the configuration is loaded, so a bad setting is a
message naming it before anything starts, in upstream's order: the policy name, the none policy's options, the
static policy's CPU reservation, then its options.

Options: ``full-pcpus-only`` and ``strict-cpu-reservation`` are honoured (the pure policy implements them). The
alpha options (``align-by-socket``, ``distribute-cpus-across-cores``) are refused as upstream refuses them with
its CPUManagerPolicyAlphaOptions gate off (kopflet has no feature gates). ``distribute-cpus-across-numa`` (beta,
on by default upstream) and ``prefer-align-cpus-by-uncorecache`` (GA) are upstream options kopflet does not
implement: set to true they are refused with upstream's message for an option its policy does not handle
(``unsupported cpumanager option``); set to false they change nothing, as upstream. Pure.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from kopflet.api import qos
from kopflet.cm.cpumanager import cpuset
from kopflet.gotext import go_quote

POLICY_NONE = "none"
POLICY_STATIC = "static"
POLICIES = (POLICY_NONE, POLICY_STATIC)

FULL_PCPUS_ONLY = "full-pcpus-only"
DISTRIBUTE_CPUS_ACROSS_NUMA = "distribute-cpus-across-numa"
ALIGN_BY_SOCKET = "align-by-socket"
DISTRIBUTE_CPUS_ACROSS_CORES = "distribute-cpus-across-cores"
STRICT_CPU_RESERVATION = "strict-cpu-reservation"
PREFER_ALIGN_BY_UNCORE_CACHE = "prefer-align-cpus-by-uncorecache"

# policy_options.go: the options by maturity; alpha ones need a gate that is off by default.
ALPHA_OPTIONS = frozenset({ALIGN_BY_SOCKET, DISTRIBUTE_CPUS_ACROSS_CORES})
BETA_OPTIONS = frozenset({DISTRIBUTE_CPUS_ACROSS_NUMA})
STABLE_OPTIONS = frozenset({FULL_PCPUS_ONLY, STRICT_CPU_RESERVATION, PREFER_ALIGN_BY_UNCORE_CACHE})
SUPPORTED_OPTIONS = (FULL_PCPUS_ONLY, STRICT_CPU_RESERVATION)
"""The options kopflet's static policy implements."""

_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_FALSE = ("0", "f", "F", "FALSE", "false", "False")


class OptionsError(ValueError):
    """The CPU manager's configuration cannot work (upstream's message)."""


@dataclasses.dataclass(frozen=True)
class StaticPolicyOptions:
    """Upstream `StaticPolicyOptions`, the fields kopflet implements."""

    full_pcpus_only: bool = False
    strict_cpu_reservation: bool = False


def go_map(options: Mapping[str, str]) -> str:
    """Go's ``%v`` of a ``map[string]string``: ``map[a:1 b:2]``, keys sorted."""
    return "map[" + " ".join(f"{key}:{options[key]}" for key in sorted(options)) + "]"


def _parse_bool(name: str, value: str) -> bool:
    """strconv.ParseBool, with `NewStaticPolicyOptions`'s wrapping."""
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise OptionsError(f"bad value for option {go_quote(name)}: strconv.ParseBool: parsing {go_quote(value)}: "
                       f"invalid syntax")


def check_option_available(name: str) -> None:
    """Upstream `CheckPolicyOptionAvailable` with the default gates (alpha off, beta on)."""
    if name not in ALPHA_OPTIONS | BETA_OPTIONS | STABLE_OPTIONS:
        raise OptionsError(f"unknown CPU Manager Policy option: {go_quote(name)}")
    if name in ALPHA_OPTIONS:
        raise OptionsError(f"CPU Manager Policy Alpha-level Options not enabled, but option {go_quote(name)} "
                           f"provided")


def parse_static_options(options: Mapping[str, str]) -> StaticPolicyOptions:
    """Upstream `NewStaticPolicyOptions` (Go ranges over a map in random order; here the names are checked in
    sorted order, so of several bad options the first by name is reported)."""
    values: dict[str, bool] = {}
    for name in sorted(options):
        check_option_available(name)
        values[name] = _parse_bool(name, options[name])
        if values[name] and name not in SUPPORTED_OPTIONS:
            raise OptionsError(f"unsupported cpumanager option: {go_quote(name)} ({options[name]})")
    return StaticPolicyOptions(full_pcpus_only=values.get(FULL_PCPUS_ONLY, False),
                               strict_cpu_reservation=values.get(STRICT_CPU_RESERVATION, False))


def reservations(system_reserved: Mapping[str, str], kube_reserved: Mapping[str, str],
                 reserved_cpus: str | cpuset.CPUSet = "") -> tuple[Mapping[str, str], Mapping[str, str]]:
    """systemReserved and kubeReserved as the node counts them (upstream cmd/kubelet/app/server.go `run`): with
    ``reservedSystemCPUs`` (a cpuset, as text or parsed; the configuration has checked it parses) kubeReserved loses
    its cpu and systemReserved's cpu is its CPU count, for the Node's allocatable, ``kubepods`` and the CPU manager
    alike."""
    count = (cpuset.parse(reserved_cpus) if isinstance(reserved_cpus, str) else reserved_cpus).size()
    if count == 0:
        return system_reserved, kube_reserved
    return ({**system_reserved, qos.CPU: str(count)},
            {name: amount for name, amount in kube_reserved.items() if name != qos.CPU})


def reserved_cpu_milli(system_reserved: Mapping[str, str], kube_reserved: Mapping[str, str]) -> int:
    """The node's CPU reservation in millicores (upstream `GetNodeAllocatableReservation`'s cpu: systemReserved
    plus kubeReserved; hard eviction thresholds reserve no cpu)."""
    total = sum((qos.parse_quantity(r["cpu"]) for r in (system_reserved, kube_reserved) if "cpu" in r),
                start=qos.parse_quantity(0))
    return math.ceil(total * 1000)


def num_reserved_cpus(reserved_milli: int) -> int:
    """Upstream `NewManager`: the ceiling of the reservation; CPUs cannot be shared out in fractions."""
    return math.ceil(reserved_milli / 1000)


def validate(policy: str, options: Mapping[str, str], reserved_milli: int) -> StaticPolicyOptions:
    """Upstream `NewManager`'s checks before the topology is needed; the static policy's options when it is
    the policy. `reserved_milli` is the CPU reservation after ``reservedSystemCPUs`` replaced it
    (`reserved_cpu_milli`). Raises `OptionsError`."""
    if policy == POLICY_NONE:
        if options:
            raise OptionsError(f"new none policy error: None policy: received unsupported options="
                               f"{go_map(options)}")
        return StaticPolicyOptions()
    if policy != POLICY_STATIC:
        raise OptionsError(f'unknown policy: "{policy}"')
    if reserved_milli <= 0:
        # Upstream's map of reservations leaves a zero cpu out, so this is the message a zero reservation gets
        # (its "requires systemreserved.cpu + kubereserved.cpu to be greater than zero" cannot be reached).
        raise OptionsError("[cpumanager] unable to determine reserved CPU resources for static policy")
    try:
        return parse_static_options(options)
    except OptionsError as err:
        raise OptionsError(f"new static policy error: {err}") from None


def parse_reserved_cpus(text: str) -> cpuset.CPUSet:
    """``reservedSystemCPUs`` (``--reserved-cpus``) as upstream's config validation parses it."""
    try:
        return cpuset.parse(text)
    except cpuset.CPUSetError as err:
        raise OptionsError(f"invalid configuration: unable to parse reservedSystemCPUs (--reserved-cpus) {text}, "
                           f"error: {err}") from None
