"""
A pod's AppArmor profiles: which profile each container asks for, and whether the pod needs AppArmor at all.

Mirrors upstream pkg/security/apparmor: `GetProfile` and `getProfileFromPodAnnotations` (helpers.go), `isRequired`
(helpers.go) and the pod part of the validator's `Validate` (validate.go). The host part (is AppArmor enabled in
the kernel? `host_enabled`) is a fact read once at start (`kopflet.nodestatus.heartbeat.read_machine_facts`, as
upstream's `NewValidator` checks the host once); the admit handler that uses both is `kopflet.lifecycle.admission`,
the CRI side `kopflet.kuberuntime.container_config`.

Pure: a profile is the API's ``appArmorProfile`` mapping (``type``, ``localhostProfile``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from kopflet import gotext
from kopflet.api import spec

RUNTIME_DEFAULT = "RuntimeDefault"
UNCONFINED = "Unconfined"
LOCALHOST = "Localhost"

# k8s.io/api/core/v1 annotation_key_constants.go: the deprecated beta annotations and their values.
ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"
BETA_RUNTIME_DEFAULT = "runtime/default"
BETA_UNCONFINED = "unconfined"
BETA_LOCALHOST_PREFIX = "localhost/"


def host_enabled(securityfs_present: bool, enabled_parameter: bytes | None) -> bool:
    """Whether the kernel enforces AppArmor (upstream's forked libcontainer `IsEnabled`): securityfs has an
    ``apparmor`` directory and /sys/module/apparmor/parameters/enabled (None: unreadable) says ``Y``."""
    return securityfs_present and enabled_parameter is not None and len(enabled_parameter) > 1 \
        and enabled_parameter.startswith(b"Y")


def _profile(context: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    profile = (context or {}).get("appArmorProfile")
    return profile if isinstance(profile, Mapping) else None


def _from_annotation(annotations: Mapping[str, str], container: str) -> Mapping[str, Any] | None:
    """Upstream `getProfileFromPodAnnotations`: the beta annotation's value as a profile; None when absent or
    not one of the known forms."""
    value = annotations.get(ANNOTATION_PREFIX + container)
    if value is None:
        return None
    if value == BETA_RUNTIME_DEFAULT:
        return {"type": RUNTIME_DEFAULT}
    if value == BETA_UNCONFINED:
        return {"type": UNCONFINED}
    if value.startswith(BETA_LOCALHOST_PREFIX):
        # An empty name is kept: the admit handler refuses it (`pod_error`).
        return {"type": LOCALHOST, "localhostProfile": value.removeprefix(BETA_LOCALHOST_PREFIX)}
    return None


def profile_for(pod: spec.Pod, container: spec.ContainerSpec) -> Mapping[str, Any] | None:
    """The container's AppArmor profile (upstream `GetProfile`): its own field, else its beta annotation (static pods
    may carry only the annotation), else the pod's field; None when nothing is set."""
    for profile in (_profile(container.security_context), _from_annotation(pod.annotations, container.name)):
        if profile is not None:
            return profile
    return _profile(pod.spec.security_context)


def _all_containers(pod: spec.Pod) -> Iterator[spec.ContainerSpec]:
    """Upstream `podutil.VisitContainers(..., AllContainers)`: init, regular, then ephemeral containers."""
    yield from pod.spec.init_containers
    yield from pod.spec.containers
    yield from pod.spec.ephemeral_containers


def is_required(pod: spec.Pod) -> bool:
    """Whether the pod asks for any profile other than Unconfined (upstream `isRequired`): on the pod, on a
    container, or in a beta annotation.

    Upstream decides by the first annotation its (randomly ordered) map walk meets; here any annotation that is not
    ``unconfined`` counts, so a pod upstream would sometimes refuse is always refused, never run unconfined."""
    pod_profile = _profile(pod.spec.security_context)
    if pod_profile is not None and pod_profile.get("type") != UNCONFINED:
        return True
    for container in _all_containers(pod):
        profile = _profile(container.security_context)
        if profile is not None and profile.get("type") != UNCONFINED:
            return True
    return any(key.startswith(ANNOTATION_PREFIX) and value != BETA_UNCONFINED
               for key, value in pod.annotations.items())


def _go_profile(profile: Mapping[str, Any]) -> str:
    """Go's ``%q`` of a ``*v1.AppArmorProfile``: ``&{"Localhost" %!q(*string=<nil>)}``. A set localhostProfile
    is a pointer Go prints by its address, which kopflet does not have: its quoted value stands in for it."""
    name = profile.get("localhostProfile")
    pointer = "<nil>" if name is None else gotext.go_quote(str(name))
    return f"&{{{gotext.go_quote(str(profile.get('type') or ''))} %!q(*string={pointer})}}"


def pod_error(pod: spec.Pod) -> str:
    """The pod part of upstream's validator `Validate`: a Localhost profile with an empty (or blank) name, for the
    first container that has one; "" when the profiles are usable."""
    for container in _all_containers(pod):
        profile = profile_for(pod, container)
        if profile is None or profile.get("type") != LOCALHOST:
            continue
        name = profile.get("localhostProfile")
        if not isinstance(name, str) or not name.strip():
            return f"invalid empty AppArmor profile name: {_go_profile(profile)}"
    return ""


__all__ = [
    "ANNOTATION_PREFIX",
    "BETA_LOCALHOST_PREFIX",
    "BETA_RUNTIME_DEFAULT",
    "BETA_UNCONFINED",
    "LOCALHOST",
    "RUNTIME_DEFAULT",
    "UNCONFINED",
    "host_enabled",
    "is_required",
    "pod_error",
    "profile_for",
]
