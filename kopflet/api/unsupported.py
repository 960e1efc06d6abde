"""
Pod fields kopflet cannot honour, refused rather than ignored.

A Pod may set fields this agent has no code for: alpha fields whose gate a cluster turned on, DRA claims, a
projected source or a mount option the runtime would need to be told about. Running such a pod as if the field
were not there would give it something other than what it asked for, so kopflet refuses it, the way upstream's
kubelet refuses a pod that needs what its node lacks:

- `pod_refusal`, called by the admit handlers (`kopflet.lifecycle.admission`): upstream's
  `rejectPodAdmissionBasedOnSupplementalGroupsPolicy` (reason ``SupplementalGroupsPolicyNotSupported``, the node
  reports no support: containerd 1.6 has none) and, for the rest, the shape of upstream's
  `declaredFeaturesAdmitHandler` (pkg/kubelet/lifecycle/handlers.go: reason ``PodFeatureUnsupported``, message
  ``Pod requires node features that are not available: <features>``), each feature named by its upstream feature
  gate with the first field that needs it and why kopflet cannot;
- `env_source_error` and `mount_error`, for containers created after admission (ephemeral containers added with
  ``kubectl debug``): their text becomes ``CreateContainerConfigError``, as upstream's `makeEnvironmentVariables`
  and `makeMounts` / `makeBlockVolumes` errors do (a recursive read-only mount on a runtime without support is
  exactly upstream's refusal).

`kopflet.api.fields` classifies every field of the pinned PodSpec as handled, refused (pointing here, or at the
other places that refuse: volume plugins, the sandbox's user namespace) or not the kubelet's business.

Pure: the pod and the mappings in it only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterator, Mapping
from typing import Any

from kopflet.api import spec

POD_FEATURE_UNSUPPORTED = "PodFeatureUnsupported"
"""Upstream lifecycle.PodFeatureUnsupported: the declared-features admit handler's reason."""
FEATURES_UNAVAILABLE = "Pod requires node features that are not available: "
SUPPLEMENTAL_GROUPS_POLICY_NOT_SUPPORTED = "SupplementalGroupsPolicyNotSupported"
SUPPLEMENTAL_GROUPS_POLICY_STRICT = "Strict"
SUPPLEMENTAL_GROUPS_POLICY_MESSAGE = "SupplementalGroupsPolicy=Strict is not supported in this node"

# The features, by upstream feature gate (pkg/features/kube_features.go), and why kopflet lacks each.
DYNAMIC_RESOURCE_ALLOCATION = "DynamicResourceAllocation"
ENV_FILES = "EnvFiles"
VOLUME_BIND_MOUNT_OPTIONS = "VolumeBindMountOptions"
CONTAINER_STOP_SIGNALS = "ContainerStopSignals"
GRPC_PROBE_TLS = "GRPCContainerProbeTLS"
H2C_PROBE = "H2CContainerProbe"
EMPTY_DIR_VOLUME_MODE = "EmptyDirVolumeMode"
ATOMIC_WRITE_VOLUME_USER_FIELDS = "AtomicWriteVolumeUserFields"
WHY = {
    DYNAMIC_RESOURCE_ALLOCATION: "kopflet has no DRA manager to prepare resource claims",
    ENV_FILES: "kopflet does not read environment variables from files",
    VOLUME_BIND_MOUNT_OPTIONS: "kopflet does not pass bind mount options to the runtime",
    CONTAINER_STOP_SIGNALS: "kopflet does not pass a stop signal to the runtime",
    GRPC_PROBE_TLS: "kopflet's gRPC probes are plaintext only",
    H2C_PROBE: "kopflet's HTTP probes speak HTTP/1.1 only",
    EMPTY_DIR_VOLUME_MODE: "kopflet makes every emptyDir world-writable (0777)",
    ATOMIC_WRITE_VOLUME_USER_FIELDS: "kopflet writes volume files owned by root",
}

GRPC_MODE_TLS = "TLS"
HTTP_PROTOCOL_HTTP2 = "HTTP2"
RECURSIVE_READ_ONLY_ENABLED = "Enabled"
_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
_FILE_VOLUMES = ("configMap", "secret", "downwardAPI", "projected")


@dataclasses.dataclass(frozen=True)
class Refusal:
    """Why the pod may not run on this node: ``status.reason`` and the message (without the kubelet's
    ``Pod was rejected: `` prefix, which the admit handler adds)."""

    reason: str
    message: str


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _items(value: Any) -> Iterator[tuple[int, Mapping[str, Any]]]:
    if isinstance(value, list | tuple):
        yield from ((i, item) for i, item in enumerate(value) if isinstance(item, Mapping))


def _set(value: Any) -> bool:
    """Set as the API means it for an optional field: present and not null (an empty list is unset)."""
    return value is not None and value != [] and value != ()


# --------------------------------------------------------------------------------------------- admission


def _containers(pod_spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Upstream `podutil.VisitContainers(..., AllContainers)` order: init, regular, ephemeral."""
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for i, container in _items(pod_spec.get(key)):
            yield f"spec.{key}[{i}]", container


def _container_needs(path: str, container: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(feature, field path) for each field of one container kopflet cannot honour."""
    for i, _claim in _items(_mapping(container.get("resources")).get("claims")):
        yield DYNAMIC_RESOURCE_ALLOCATION, f"{path}.resources.claims[{i}]"
    for i, var in _items(container.get("env")):
        if _set(_mapping(var.get("valueFrom")).get("fileKeyRef")):
            yield ENV_FILES, f"{path}.env[{i}].valueFrom.fileKeyRef"
    for i, mount in _items(container.get("volumeMounts")):
        if _set(mount.get("bindMountOptions")):
            yield VOLUME_BIND_MOUNT_OPTIONS, f"{path}.volumeMounts[{i}].bindMountOptions"
    lifecycle = _mapping(container.get("lifecycle"))
    if _set(lifecycle.get("stopSignal")):
        yield CONTAINER_STOP_SIGNALS, f"{path}.lifecycle.stopSignal"
    for kind in _PROBES:
        probe = _mapping(container.get(kind))
        if _mapping(probe.get("grpc")).get("mode") == GRPC_MODE_TLS:
            yield GRPC_PROBE_TLS, f"{path}.{kind}.grpc.mode"
        if _mapping(probe.get("httpGet")).get("protocol") == HTTP_PROTOCOL_HTTP2:
            yield H2C_PROBE, f"{path}.{kind}.httpGet.protocol"


def _volume_needs(path: str, volume: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(feature, field path) for each field of one volume kopflet cannot honour (the volume types it has no
    plugin for at all are the volume plugins' refusal: FailedMount)."""
    if _set(_mapping(volume.get("emptyDir")).get("mode")):
        yield EMPTY_DIR_VOLUME_MODE, f"{path}.emptyDir.mode"
    for kind in _FILE_VOLUMES:
        source = _mapping(volume.get(kind))
        if _set(source.get("defaultUser")):
            yield ATOMIC_WRITE_VOLUME_USER_FIELDS, f"{path}.{kind}.defaultUser"
        yield from _owned_files(f"{path}.{kind}", source)
        for i, projection in _items(source.get("sources")):
            for name, body in projection.items():
                body = _mapping(body)
                if _set(body.get("user")):
                    yield ATOMIC_WRITE_VOLUME_USER_FIELDS, f"{path}.{kind}.sources[{i}].{name}.user"
                yield from _owned_files(f"{path}.{kind}.sources[{i}].{name}", body)


def _owned_files(path: str, source: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    for i, item in _items(source.get("items")):
        if _set(item.get("user")):
            yield ATOMIC_WRITE_VOLUME_USER_FIELDS, f"{path}.items[{i}].user"


def _needs(pod_spec: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    for i, _claim in _items(pod_spec.get("resourceClaims")):
        yield DYNAMIC_RESOURCE_ALLOCATION, f"spec.resourceClaims[{i}]"
    for i, _claim in _items(_mapping(pod_spec.get("resources")).get("claims")):
        yield DYNAMIC_RESOURCE_ALLOCATION, f"spec.resources.claims[{i}]"
    for path, container in _containers(pod_spec):
        yield from _container_needs(path, container)
    for i, volume in _items(pod_spec.get("volumes")):
        yield from _volume_needs(f"spec.volumes[{i}]", volume)


def unsupported_features(pod: spec.Pod) -> dict[str, str]:
    """The features the pod needs that kopflet lacks, each with the first field that needs it, in walk order."""
    found: dict[str, str] = {}
    for feature, path in _needs(pod.spec.raw):
        found.setdefault(feature, path)
    return found


def pod_refusal(pod: spec.Pod) -> Refusal | None:
    """None when kopflet can honour every field the pod sets, else why not (see the module docstring).

    Checked with the OS checks, where upstream's predicate handler checks the supplemental groups policy (its
    declared-features handler runs later, after AppArmor: a pod both would refuse gets this reason here).
    """
    context = _mapping(pod.spec.raw.get("securityContext"))
    if context.get("supplementalGroupsPolicy") == SUPPLEMENTAL_GROUPS_POLICY_STRICT:
        # Upstream admits Strict only on a node whose status.features.supplementalGroupsPolicy is true: the runtime
        # must report it (containerd 2.0+), and kopflet neither asks the runtime nor sends the CRI policy.
        return Refusal(SUPPLEMENTAL_GROUPS_POLICY_NOT_SUPPORTED, SUPPLEMENTAL_GROUPS_POLICY_MESSAGE)
    features = unsupported_features(pod)
    if not features:
        return None
    listed = ", ".join(f"{feature} ({path}: {WHY[feature]})" for feature, path in features.items())
    return Refusal(POD_FEATURE_UNSUPPORTED, FEATURES_UNAVAILABLE + listed)


# ------------------------------------------------------------------------------------- container creation


def env_source_error(var: spec.EnvVar) -> str | None:
    """Why an ``env`` entry's source cannot be resolved by kopflet, or None (a ``fileKeyRef``, EnvFiles)."""
    if var.value_from is not None and _set(var.value_from.get("fileKeyRef")):
        return f"env {var.name}: valueFrom.fileKeyRef is not supported: {WHY[ENV_FILES]} ({ENV_FILES})"
    return None


def mount_error(container: spec.ContainerSpec, mount: Mapping[str, Any]) -> str | None:
    """Why one ``volumeMounts`` entry cannot be made as asked, or None.

    ``recursiveReadOnly: Enabled`` is upstream's `resolveRecursiveReadOnly` on a runtime that does not support
    recursive read-only mounts (kopflet never asks for them: containerd 1.6 lists no runtime handler features);
    ``IfPossible`` then means an ordinary read-only mount, as upstream. ``bindMountOptions``: VolumeBindMountOptions.
    """
    name = mount.get("name") or ""
    if mount.get("recursiveReadOnly") == RECURSIVE_READ_ONLY_ENABLED:
        return f'volume "{name}" requested recursive read-only mode, but it is not supported by the runtime'
    if _set(mount.get("bindMountOptions")):
        return (f'volume "{name}" asks for bindMountOptions in container "{container.name}": '
                f"{WHY[VOLUME_BIND_MOUNT_OPTIONS]} ({VOLUME_BIND_MOUNT_OPTIONS})")
    return None


def volume_devices_error(container: spec.ContainerSpec, block_volumes: Collection[str] = ()) -> str | None:
    """Upstream `makeBlockVolumes`' error for a device whose volume has no block mapper. `block_volumes` are the
    pod's volumes set up as raw block devices (block-mode PersistentVolumes, once mounted); none otherwise, and
    every device is refused."""
    for _i, device in _items(container.raw.get("volumeDevices")):
        if device.get("name") in block_volumes:
            continue
        return (f'cannot find volume "{device.get("name") or ""}" to pass into container "{container.name}": '
                "kopflet has no raw block volumes (volumeDevices)")
    return None


__all__ = [
    "ATOMIC_WRITE_VOLUME_USER_FIELDS",
    "CONTAINER_STOP_SIGNALS",
    "DYNAMIC_RESOURCE_ALLOCATION",
    "EMPTY_DIR_VOLUME_MODE",
    "ENV_FILES",
    "FEATURES_UNAVAILABLE",
    "GRPC_PROBE_TLS",
    "H2C_PROBE",
    "POD_FEATURE_UNSUPPORTED",
    "SUPPLEMENTAL_GROUPS_POLICY_MESSAGE",
    "SUPPLEMENTAL_GROUPS_POLICY_NOT_SUPPORTED",
    "VOLUME_BIND_MOUNT_OPTIONS",
    "WHY",
    "Refusal",
    "env_source_error",
    "mount_error",
    "pod_refusal",
    "unsupported_features",
    "volume_devices_error",
]
