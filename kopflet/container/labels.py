"""
Runtime labels and annotations: how sandboxes and containers carry their pod's identity and recovery state.

Mirrors upstream `pkg/kubelet/kuberuntime/labels.go` and `pkg/kubelet/types/labels.go`, key for key, so a
restarted agent can adopt what runs (pod uid/name/namespace, container name, spec hash, restart count) and
crictl or log collectors understand kopflet's containers as they understand the kubelet's.

Builders are pure dict builders. Readers never raise: like upstream, a missing or garbled value reads as
its zero value (0, "" or None), because an unreadable annotation must not stop the agent from managing
(or cleaning up) the container.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from kopflet.api import spec

# Labels (pkg/kubelet/types/labels.go): identity, queried with label selectors.
POD_NAME = "io.kubernetes.pod.name"
POD_NAMESPACE = "io.kubernetes.pod.namespace"
POD_UID = "io.kubernetes.pod.uid"
CONTAINER_NAME = "io.kubernetes.container.name"

# Annotations (pkg/kubelet/kuberuntime/labels.go): recovery state, read back from the runtime.
POD_DELETION_GRACE_PERIOD = "io.kubernetes.pod.deletionGracePeriod"
POD_TERMINATION_GRACE_PERIOD = "io.kubernetes.pod.terminationGracePeriod"
CONTAINER_HASH = "io.kubernetes.container.hash"
CONTAINER_RESTART_COUNT = "io.kubernetes.container.restartCount"
CONTAINER_TERMINATION_MESSAGE_PATH = "io.kubernetes.container.terminationMessagePath"
CONTAINER_TERMINATION_MESSAGE_POLICY = "io.kubernetes.container.terminationMessagePolicy"
CONTAINER_PRESTOP_HANDLER = "io.kubernetes.container.preStopHandler"
CONTAINER_PORTS = "io.kubernetes.container.ports"
CONTAINER_TYPE = "io.kubernetes.container.type"

# Values of CONTAINER_TYPE.
TYPE_INIT = "init"
TYPE_CONTAINER = "container"
TYPE_EPHEMERAL = "ephemeral"

_IDENTITY_LABELS = (POD_NAME, POD_NAMESPACE, POD_UID)


# ---------------------------------------------------------------------------------------------- builders


def sandbox_labels(pod: spec.Pod) -> dict[str, str]:
    """The pod's own labels plus its identity (upstream `newPodLabels`); identity wins on a clash."""
    return {**pod.labels, POD_NAME: pod.name, POD_NAMESPACE: pod.namespace, POD_UID: pod.uid}


def sandbox_annotations(pod: spec.Pod) -> dict[str, str]:
    """The pod's annotations, copied (upstream `newPodAnnotations`)."""
    return dict(pod.annotations)


def container_labels(pod: spec.Pod, container: spec.ContainerSpec) -> dict[str, str]:
    """Identity only (upstream `newContainerLabels`): pod name, namespace, uid and the container's name."""
    return {POD_NAME: pod.name, POD_NAMESPACE: pod.namespace, POD_UID: pod.uid, CONTAINER_NAME: container.name}


def container_annotations(pod: spec.Pod, container: spec.ContainerSpec, restart_count: int) -> dict[str, str]:
    """Recovery state of one container instance (upstream `newContainerAnnotations`).

    The hash says which spec the instance runs; the restart count is carried from instance to instance
    (the next one gets the dead one's count + 1); the grace periods and the preStop handler let a restarted
    agent stop the container properly even if the Pod is already gone from the API.
    """
    annotations = {
        CONTAINER_HASH: container.hash,
        CONTAINER_RESTART_COUNT: str(restart_count),
        CONTAINER_TERMINATION_MESSAGE_PATH: container.termination_message_path,
        CONTAINER_TERMINATION_MESSAGE_POLICY: container.termination_message_policy,
        POD_TERMINATION_GRACE_PERIOD: str(pod.spec.termination_grace_period_seconds),
    }
    if pod.deletion_grace_period_seconds is not None:
        annotations[POD_DELETION_GRACE_PERIOD] = str(pod.deletion_grace_period_seconds)
    pre_stop = (container.lifecycle or {}).get("preStop")
    if pre_stop is not None:
        annotations[CONTAINER_PRESTOP_HANDLER] = json.dumps(pre_stop, separators=(",", ":"))
    if container.ports:
        annotations[CONTAINER_PORTS] = json.dumps([_port_json(p) for p in container.ports], separators=(",", ":"))
    kind = container_type(pod, container.name)
    if kind:
        annotations[CONTAINER_TYPE] = kind
    return annotations


def container_type(pod: spec.Pod, name: str) -> str:
    """``init``, ``container`` or ``ephemeral`` for a container of the pod ("" if it has none of that name).

    The runtime annotation (`CONTAINER_TYPE`, as older upstream kubelets wrote it) tells a restarted agent or
    crictl which list a container came from; the spec decides it while the pod exists, since names are unique
    across the three lists.
    """
    if any(c.name == name for c in pod.spec.init_containers):
        return TYPE_INIT
    if any(c.name == name for c in pod.spec.containers):
        return TYPE_CONTAINER
    if pod.spec.is_ephemeral(name):
        return TYPE_EPHEMERAL
    return ""


def _port_json(port: spec.ContainerPort) -> dict[str, Any]:
    """A v1.ContainerPort as Go marshals it (field order, omitempty on name, hostPort, hostIP)."""
    result: dict[str, Any] = {}
    if port.name:
        result["name"] = port.name
    if port.host_port:
        result["hostPort"] = port.host_port
    result["containerPort"] = port.container_port
    result["protocol"] = port.protocol
    if port.host_ip:
        result["hostIP"] = port.host_ip
    return result


# ----------------------------------------------------------------------------------------------- readers


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodIdentity:
    """Who a sandbox or container belongs to, read from its labels ("" where a label is missing)."""

    uid: str = ""
    name: str = ""
    namespace: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ContainerAnnotations:
    """What upstream `getContainerInfoFromAnnotations` reads back; zero values where missing or garbled."""

    hash: str = ""
    """Normalised lowercase hex without leading zeros (as FormatUint writes it); "" when unknown."""
    restart_count: int = 0
    termination_message_path: str = ""
    termination_message_policy: str = ""
    pod_deletion_grace_period: int | None = None
    pod_termination_grace_period: int | None = None
    pre_stop_handler: Mapping[str, Any] | None = None
    ports: tuple[Mapping[str, Any], ...] = ()
    container_type: str = ""


def pod_identity(labels: Mapping[str, str]) -> PodIdentity:
    """The pod identity labels of a sandbox or container."""
    return PodIdentity(uid=_text(labels, POD_UID), name=_text(labels, POD_NAME), namespace=_text(labels, POD_NAMESPACE))


def pod_uid(labels: Mapping[str, str]) -> str:
    """The pod UID label of a sandbox or container ("" when it is missing): `pod_identity`'s uid."""
    return _text(labels, POD_UID)


def container_name(labels: Mapping[str, str]) -> str:
    """The container's name in its pod ("" when the label is missing)."""
    return _text(labels, CONTAINER_NAME)


def pod_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """A sandbox's labels without the identity ones: the Pod's own labels (upstream `getPodSandboxInfoFromLabels`)."""
    return {k: v for k, v in labels.items() if k not in _IDENTITY_LABELS}


def container_annotations_info(annotations: Mapping[str, str]) -> ContainerAnnotations:
    """Parse a container's annotations back; never raises."""
    ports = _json(annotations, CONTAINER_PORTS)
    pre_stop = _json(annotations, CONTAINER_PRESTOP_HANDLER)
    return ContainerAnnotations(
        hash=parse_hash(annotations.get(CONTAINER_HASH)),
        restart_count=parse_restart_count(annotations.get(CONTAINER_RESTART_COUNT)),
        termination_message_path=_text(annotations, CONTAINER_TERMINATION_MESSAGE_PATH),
        termination_message_policy=_text(annotations, CONTAINER_TERMINATION_MESSAGE_POLICY),
        pod_deletion_grace_period=parse_grace_period(annotations.get(POD_DELETION_GRACE_PERIOD)),
        pod_termination_grace_period=parse_grace_period(annotations.get(POD_TERMINATION_GRACE_PERIOD)),
        pre_stop_handler=pre_stop if isinstance(pre_stop, dict) else None,
        ports=tuple(p for p in ports if isinstance(p, dict)) if isinstance(ports, list) else (),
        container_type=_text(annotations, CONTAINER_TYPE),
    )


def parse_hash(value: str | None) -> str:
    """The hash normalised to FormatUint's form; "" for missing or garbled values (never equals a real hash)."""
    if not isinstance(value, str):
        return ""
    try:
        number = int(value.strip(), 16)
    except ValueError:
        return ""
    return format(number, "x") if 0 <= number < 2**64 else ""


def parse_restart_count(value: str | None) -> int:
    """The restart count; 0 for missing, garbled or negative values (upstream: 0 on error)."""
    try:
        count = int(value) if isinstance(value, str) else 0
    except ValueError:
        return 0
    return max(count, 0)


def parse_grace_period(value: str | None) -> int | None:
    """A grace period in seconds; None for missing or garbled values (upstream: nil pointer)."""
    try:
        seconds = int(value) if isinstance(value, str) else None
    except ValueError:
        return None
    return seconds if seconds is None or seconds >= 0 else None


def _text(values: Mapping[str, str], key: str) -> str:
    value = values.get(key)
    return value if isinstance(value, str) else ""


def _json(values: Mapping[str, str], key: str) -> Any:
    raw = values.get(key)
    if not isinstance(raw, str):
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None
