"""The topology manager's admit handler (pkg/kubelet/cm/topologymanager scope.go, scope_container.go,
scope_pod.go, scope_none.go, topology_manager.go) over hint providers, as a pure function.

A hint provider here is an immutable value holding its manager's policy and state (the CPU manager's, the memory
manager's): it answers hints for a container or a whole pod, and `allocate` returns the provider with the
container's resources taken (upstream passes the chosen hint through the topology manager's store,
`GetAffinity`; here it is the argument). `admit` runs upstream's scope over them:

- ``none`` policy (upstream's none scope, `admitPolicyNone`): every container allocated by every provider with no
  hint;
- ``container`` scope: per init then app container, the providers' hints merged by the policy; a hint the policy
  refuses rejects the pod with ``TopologyAffinityError`` ("Resources cannot be allocated with Topology
  locality"); else every provider allocates the container along that hint;
- ``pod`` scope: the providers' pod hints merged once, then every container allocated along the same hint.

A provider whose allocation is I/O (the device manager's: its plugins' Allocate) is ``deferred``: `admit_steps`
is a generator that yields an `AllocationRequest` for it, at the point of upstream's loop where it allocates, and
the caller (`DeviceManager.admit_steps`) allocates, then sends back the provider as it now is (its hints for the
next containers follow from it) or throws the error in. `admit` runs it for pure providers only.

A provider's allocation error rejects the pod as upstream's `admission.GetPodAdmitResult` does: an error with a
reason of its own keeps it, any other is ``UnexpectedAdmissionError`` "Allocate failed due to <err>, which is
unexpected". Pod-level resources take the container paths (upstream's PodLevelResourceManagers gate is off).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Mapping, Sequence
from typing import Protocol, Self, TypeVar

from kopflet.api import spec
from kopflet.cm.topologymanager.policy import (
    ERROR_TOPOLOGY_AFFINITY,
    NO_HINT,
    NONE,
    POLICY_NONE,
    SCOPE_POD,
    TOPOLOGY_AFFINITY_MESSAGE,
    Policy,
    ProviderHints,
    TopologyHint,
    merge,
)
from kopflet.lifecycle import admission

R = TypeVar("R")

UNEXPECTED_ADMISSION_ERROR = "UnexpectedAdmissionError"
"""pkg/kubelet/cm/admission/errors.go ErrorReasonUnexpected."""


class HintProvider(Protocol):
    """Upstream `HintProvider`, immutable: `allocate` returns the provider with the new state and raises
    `ValueError` (an `AdmissionError`, or any other: unexpected) when it cannot."""

    def topology_hints(self, pod: spec.Pod, container: spec.ContainerSpec) -> ProviderHints: ...

    def pod_topology_hints(self, pod: spec.Pod) -> ProviderHints: ...

    def allocate(self, pod: spec.Pod, container: spec.ContainerSpec, hint: TopologyHint) -> Self: ...


class AdmissionError(ValueError):
    """An allocation error with a reason of its own (upstream's `admission.Error` with its `Type`)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class AllocationFailed(ValueError):
    """A deferred provider's allocation error, thrown into `admit_steps` (UnexpectedAdmissionError)."""


class TopologyAffinityError(AdmissionError):
    """Upstream `TopologyAffinityError`."""

    def __init__(self) -> None:
        super().__init__(ERROR_TOPOLOGY_AFFINITY, TOPOLOGY_AFFINITY_MESSAGE)


def pod_admit_result(err: Exception) -> admission.Rejection:
    """Upstream `admission.GetPodAdmitResult` for an error: its own reason (an `AdmissionError`, or an error with
    a string ``reason`` such as the CPU manager's SMTAlignmentError), else UnexpectedAdmissionError."""
    reason = getattr(err, "reason", None)
    if isinstance(reason, str) and reason:
        return admission.Rejection(reason=reason, message=admission.REJECTED_PREFIX + str(err))
    return admission.Rejection(reason=UNEXPECTED_ADMISSION_ERROR,
                               message=admission.REJECTED_PREFIX + f"Allocate failed due to {err}, which is unexpected")


@dataclasses.dataclass(frozen=True)
class Admission:
    """The admit handler's answer: the providers after the allocation (in the order given) and the hint each
    container got, or the rejection."""

    providers: tuple[HintProvider, ...] = ()
    hints: Mapping[str, TopologyHint] = dataclasses.field(default_factory=dict)
    rejection: admission.Rejection | None = None


@dataclasses.dataclass(frozen=True)
class AllocationRequest:
    """A deferred provider's allocation for the caller to make: `container` of `pod` along `hint`. The caller
    answers with the provider after it (`send`) or throws `AllocationFailed` in."""

    provider: HintProvider
    pod: spec.Pod
    container: spec.ContainerSpec
    hint: TopologyHint


AdmitSteps = Generator[AllocationRequest, HintProvider, Admission]


def _is_deferred(provider: HintProvider) -> bool:
    return bool(getattr(provider, "deferred", False))


def _allocate(providers: list[HintProvider], pod: spec.Pod, container: spec.ContainerSpec,
              hint: TopologyHint) -> Generator[AllocationRequest, HintProvider, None]:
    """Upstream `allocateAlignedResources`: each provider in turn; the first error stops."""
    for i, provider in enumerate(providers):
        if _is_deferred(provider):
            providers[i] = yield AllocationRequest(provider, pod, container, hint)
        else:
            providers[i] = provider.allocate(pod, container, hint)


def admit_steps(policy: Policy, scope: str, providers: Sequence[HintProvider], pod: spec.Pod) -> AdmitSteps:
    """Upstream `manager.Admit` for a pod being added, yielding the deferred providers' allocations."""
    current = list(providers)
    containers = (*pod.spec.init_containers, *pod.spec.containers)
    hints: dict[str, TopologyHint] = {}
    try:
        if policy.name == POLICY_NONE:
            for container in containers:
                yield from _allocate(current, pod, container, NO_HINT)
        elif scope == SCOPE_POD:
            best, admit_ = merge(policy, [p.pod_topology_hints(pod) for p in current])
            if not admit_:
                raise TopologyAffinityError()
            for container in containers:
                hints[container.name] = best
                yield from _allocate(current, pod, container, best)
        else:
            for container in containers:
                best, admit_ = merge(policy, [p.topology_hints(pod, container) for p in current])
                if not admit_:
                    raise TopologyAffinityError()
                hints[container.name] = best
                yield from _allocate(current, pod, container, best)
    except ValueError as err:
        return Admission(rejection=pod_admit_result(err))
    return Admission(providers=tuple(current), hints=hints)


def run(steps: Generator[AllocationRequest, HintProvider, R]) -> R:
    """Run `admit_steps` (or a generator built on it) with each request answered by the provider's own
    `allocate` (pure providers)."""
    try:
        request = next(steps)
        while True:
            try:
                answer = request.provider.allocate(request.pod, request.container, request.hint)
            except ValueError as err:
                request = steps.throw(err)
                continue
            request = steps.send(answer)
    except StopIteration as stop:
        result: R = stop.value
        return result


def admit(policy: Policy, scope: str, providers: Sequence[HintProvider], pod: spec.Pod) -> Admission:
    """Upstream `manager.Admit` for a pod being added, over pure providers."""
    return run(admit_steps(policy, scope, providers, pod))


@dataclasses.dataclass(frozen=True)
class TopologyManager:
    """The configured policy and scope (upstream `manager` with its scope)."""

    policy: Policy = NONE
    scope: str = "container"


NO_TOPOLOGY = TopologyManager()
"""The ``none`` policy (upstream's default)."""
