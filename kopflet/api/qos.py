"""
Resource quantities, the pod's QoS class and the OOM score adjustment of its containers.

Mirrors upstream `k8s.io/apimachinery/pkg/api/resource` (parsing, `Value`/`MilliValue` rounding up),
`pkg/apis/core/v1/helper/qos` (`ComputePodQOS`: per-container classes aggregated, init containers included,
pod-level ``spec.resources`` winning when set) and `pkg/kubelet/qos/policy.go` (`GetContainerOOMScoreAdjust`).

Pure: quantities are exact `Fraction`s, the node's memory capacity is a parameter.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from kopflet.api import spec

GUARANTEED = "Guaranteed"
BURSTABLE = "Burstable"
BEST_EFFORT = "BestEffort"

CPU = "cpu"
MEMORY = "memory"
_QOS_RESOURCES = (CPU, MEMORY)

# pkg/kubelet/qos/policy.go
GUARANTEED_OOM_SCORE_ADJ = -997
BEST_EFFORT_OOM_SCORE_ADJ = 1000

# pkg/kubelet/types: IsCriticalPod / IsNodeCriticalPod.
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000
SYSTEM_NODE_CRITICAL = "system-node-critical"
CONFIG_MIRROR_ANNOTATION = "kubernetes.io/config.mirror"

_QUANTITY = re.compile(r"^([+-]?)(\d+\.?\d*|\.\d+)(.*)$")
_EXPONENT = re.compile(r"^[eE]([+-]?\d+)$")
_SUFFIXES: dict[str, Fraction] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 10**3),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9),
    "T": Fraction(10**12), "P": Fraction(10**15), "E": Fraction(10**18),
    "Ki": Fraction(2**10), "Mi": Fraction(2**20), "Gi": Fraction(2**30),
    "Ti": Fraction(2**40), "Pi": Fraction(2**50), "Ei": Fraction(2**60),
}


class QuantityError(ValueError):
    """Not a Kubernetes quantity; the message is the apimachinery parser's."""


Quantity = str | int | float | Fraction


def parse_quantity(text: Quantity) -> Fraction:
    """The exact value of a quantity string (``100m``, ``1.5Gi``, ``1e3``, ``2k``), as `resource.ParseQuantity`."""
    if isinstance(text, Fraction):
        return text
    if isinstance(text, bool):
        raise QuantityError(f"quantities must be strings or numbers, not {text!r}")
    if isinstance(text, int | float):
        return Fraction(text)
    return _parse_text(text)


@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> Fraction:
    """`parse_quantity` of a string, remembered: the same few quantities are compared on every pod sync (resize
    progress, eviction ranking), and a Fraction is immutable."""
    match = _QUANTITY.match(text)
    if match is None:
        raise QuantityError(f"quantities must match the regular expression "
                            f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text!r}")
    sign, number, suffix = match.groups()
    value = Fraction(number)
    if suffix in _SUFFIXES:
        value *= _SUFFIXES[suffix]
    elif (exponent := _EXPONENT.match(suffix)) is not None:
        value *= Fraction(10) ** int(exponent.group(1))
    else:
        raise QuantityError(f"unable to parse quantity's suffix: {text!r}")
    return -value if sign == "-" else value


def parse_resource_list(values: Mapping[str, Quantity] | None) -> dict[str, Fraction]:
    """A ResourceList (name -> quantity) with exact values; empty for None, as Go ranges over a nil map."""
    return {str(name): parse_quantity(amount) for name, amount in (values or {}).items()}


def value(quantity: Quantity) -> int:
    """The quantity as an integer, rounded up (upstream `Quantity.Value`): bytes for memory."""
    return math.ceil(parse_quantity(quantity))


def milli_value(quantity: Quantity) -> int:
    """The quantity in thousandths, rounded up (upstream `Quantity.MilliValue`): milliCPU for cpu."""
    return math.ceil(parse_quantity(quantity) * 1000)


def milli_cpu(quantity: Quantity | None) -> int:
    """milliCPU of a cpu quantity; 0 when unset."""
    return 0 if quantity is None else milli_value(quantity)


def byte_value(quantity: Quantity | None) -> int:
    """Bytes of a memory (or storage) quantity; 0 when unset."""
    return 0 if quantity is None else value(quantity)


# --------------------------------------------------------------------------------------------------- QoS


def resource_qos(requests: Mapping[str, Quantity], limits: Mapping[str, Quantity]) -> str:
    """The class of one set of requests/limits (upstream `resourceQOS`).

    Any resource at all but no cpu/memory makes it BestEffort; cpu and memory must each have request ==
    limit, and either both set (Guaranteed) or both unset (BestEffort), else Burstable.
    """
    if not requests and not limits:
        return BEST_EFFORT
    result = ""
    for name in _QOS_RESOURCES:
        request = parse_quantity(requests.get(name, 0))
        limit = parse_quantity(limits.get(name, 0))
        if request != limit:
            return BURSTABLE
        best_effort = request == 0
        if not result:
            result = BEST_EFFORT if best_effort else GUARANTEED
        elif best_effort != (result == BEST_EFFORT):
            return BURSTABLE
    return result


def pod_level_resources(pod: spec.Pod) -> Mapping[str, Any] | None:
    """``spec.resources`` (PodLevelResources), which PodSpec keeps only in its raw body."""
    resources = pod.spec.raw.get("resources")
    return resources if isinstance(resources, Mapping) else None


def qos_class(pod: spec.Pod) -> str:
    """The pod's QoS class (upstream `ComputePodQOS`): "Guaranteed", "Burstable" or "BestEffort".

    Pod-level resources decide when set; otherwise every init and regular container is classed on its own
    and the classes combine: any Burstable, or a mix of Guaranteed and BestEffort, makes the pod Burstable.
    The API's ``status.qosClass`` (set once by the apiserver) takes precedence in `status.py`.
    """
    pod_resources = pod_level_resources(pod)
    if pod_resources is not None:
        return resource_qos(pod_resources.get("requests") or {}, pod_resources.get("limits") or {})
    return containers_qos_class(pod)


def containers_qos_class(pod: spec.Pod) -> str:
    """The QoS class the pod's init and regular containers make, whatever its pod-level resources say."""
    result = ""
    for container in (*pod.spec.init_containers, *pod.spec.containers):
        current = resource_qos(container.resources.requests, container.resources.limits)
        if current == BURSTABLE:
            return BURSTABLE
        if not result:
            result = current
        elif result != current:
            return BURSTABLE
    return result or BEST_EFFORT


def is_critical_pod(pod: spec.Pod) -> bool:
    """Upstream `IsCriticalPod`: a static or mirror pod, or one with a system-critical priority."""
    if spec.is_static(pod) or CONFIG_MIRROR_ANNOTATION in pod.annotations:
        return True
    return pod.spec.priority is not None and pod.spec.priority >= SYSTEM_CRITICAL_PRIORITY


def is_node_critical_pod(pod: spec.Pod) -> bool:
    """Upstream `IsNodeCriticalPod`: critical and of priority class ``system-node-critical``."""
    return is_critical_pod(pod) and pod.spec.raw.get("priorityClassName") == SYSTEM_NODE_CRITICAL


def oom_score_adj(pod: spec.Pod, container: spec.ContainerSpec, memory_capacity: int) -> int:
    """The container's oom_score_adj (upstream `GetContainerOOMScoreAdjust`).

    Guaranteed (and node-critical) -997, BestEffort 1000, Burstable ``1000 - 1000*request/capacity`` kept
    within [3, 999] (above a Guaranteed pod using all memory, below BestEffort); a sidecar gets at most the
    value of the regular container with the smallest memory request. Pod-level memory requests are not
    spread over the containers yet (upstream does that with PodLevelResources).
    """
    if memory_capacity <= 0:
        raise ValueError(f"memory_capacity must be positive, got {memory_capacity}")
    if is_node_critical_pod(pod):
        return GUARANTEED_OOM_SCORE_ADJ
    klass = qos_class(pod)
    if klass == GUARANTEED:
        return GUARANTEED_OOM_SCORE_ADJ
    if klass == BEST_EFFORT:
        return BEST_EFFORT_OOM_SCORE_ADJ
    adjust = 1000 - (1000 * byte_value(container.resources.requests.get(MEMORY))) // memory_capacity
    is_sidecar = container.is_sidecar and any(c.name == container.name for c in pod.spec.init_containers)
    if is_sidecar and pod.spec.containers:
        smallest = min(byte_value(c.resources.requests.get(MEMORY)) for c in pod.spec.containers)
        adjust = min(adjust, 1000 - (1000 * smallest) // memory_capacity)
    if adjust < 1000 + GUARANTEED_OOM_SCORE_ADJ:
        return 1000 + GUARANTEED_OOM_SCORE_ADJ
    if adjust == BEST_EFFORT_OOM_SCORE_ADJ:
        return adjust - 1
    return adjust


__all__ = [
    "BEST_EFFORT",
    "BURSTABLE",
    "GUARANTEED",
    "QuantityError",
    "byte_value",
    "containers_qos_class",
    "milli_cpu",
    "milli_value",
    "oom_score_adj",
    "parse_quantity",
    "parse_resource_list",
    "qos_class",
    "resource_qos",
    "value",
]
