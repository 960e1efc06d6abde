"""
PersistentVolumeClaim-backed pod volumes as upstream's volume manager resolves them: from a pod's
``persistentVolumeClaim``, generic ``ephemeral`` and inline ``csi`` volumes, with the PVCs, PVs and CSIDrivers the
I/O side fetched, to the volumes to mount (their specs, unique names, attachability) or upstream's errors.

Mirrors pkg/kubelet/volumemanager/populator/desired_state_of_world_populator.go (`processPodVolumes`,
`createVolumeSpec`, `getPVCExtractPV`, `getPVSpec`, `checkVolumeFSResize`), component-helpers storage/ephemeral
(`VolumeClaimName`, `VolumeIsForPod`), pkg/kubelet/volumemanager/cache/desired_state_of_world.go (`AddPodToVolume`:
the plugin, the unique name, the pod's errors), pkg/volume/util/util.go (`GetUniqueVolumeName*`, `GetPodVolumeNames`,
`GetVolumeMode`, `MountOptionFromSpec`, `JoinMountOptions`), component-helpers storage/volume (`CheckNodeAffinity`),
and the plugins' `CanSupport`/`GetVolumeName`/`CanAttach`/`CanDeviceMount` (pkg/volume/csi, local, hostpath).

The rules know three plugins for them: CSI (``kubernetes.io/csi``), local (``kubernetes.io/local-volume``) and
hostPath PersistentVolumes (``kubernetes.io/host-path``). The volume manager (`kopflet.volumes.manager`) runs the
local and hostPath ones; CSI volumes are refused there until their staging and publishing are wired (`resolve`'s
``plugins``). Any other PV type (nfs, iscsi, the in-tree cloud disks upstream migrates to their CSI drivers) is
refused with upstream's no-plugin error and a word on why.

Pure. The fetched objects come in mappings keyed by name: the object's body, ``None`` for "the apiserver answered
NotFound", or a string, the apiserver's error text for any other failure. A name missing from a mapping was not
fetched at all (a caller bug: ValueError), as in `kopflet.volumes.plugins`. `claims_wanted`, `volumes_wanted` and
`drivers_wanted` say what to fetch, in that order.
"""

from __future__ import annotations

import dataclasses
import hashlib
import posixpath
import stat
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from kopflet import gotext, paths
from kopflet.api import qos, spec
from kopflet.lifecycle import admission

# Pod volume sources handled here (the other kinds are kopflet.volumes.plugins').
KIND_PVC = "persistentVolumeClaim"
KIND_EPHEMERAL = "ephemeral"
KIND_CSI = "csi"
POD_VOLUME_KINDS = (KIND_PVC, KIND_EPHEMERAL, KIND_CSI)

# The plugins' names (GetPluginName).
PLUGIN_CSI = paths.CSI_PLUGIN_NAME
PLUGIN_LOCAL = paths.LOCAL_PLUGIN_NAME
PLUGIN_HOST_PATH = "kubernetes.io/host-path"

VOLUME_MODE_FILESYSTEM = "Filesystem"
VOLUME_MODE_BLOCK = "Block"
LIFECYCLE_PERSISTENT = "Persistent"  # storage/v1 VolumeLifecyclePersistent
LIFECYCLE_EPHEMERAL = "Ephemeral"  # storage/v1 VolumeLifecycleEphemeral

READ_WRITE_ONCE = "ReadWriteOnce"
READ_ONLY_MANY = "ReadOnlyMany"
READ_WRITE_MANY = "ReadWriteMany"
READ_WRITE_ONCE_POD = "ReadWriteOncePod"

PVC_PROTECTION_FINALIZER = "kubernetes.io/pvc-protection"  # pkg/volume/util PVCProtectionFinalizer
VOLUME_GID_ANNOTATION = "pv.beta.kubernetes.io/gid"  # pkg/volume/util VolumeGidAnnotationKey
MOUNT_OPTIONS_ANNOTATION = "volume.beta.kubernetes.io/mount-options"  # v1.MountOptionAnnotation
CONTROLLER_MANAGED_ATTACH_ANNOTATION = "volumes.kubernetes.io/controller-managed-attach-detach"
"""The Node annotation (pkg/volume/util ControllerManagedAttachAnnotation) the kubelet sets at registration
(enableControllerAttachDetach, true by default) so the attach/detach controller attaches volumes to the node: a
node may not create VolumeAttachments itself (the Node authorizer only lets it read them)."""

MAX_POD_ERRORS = 10  # desired_state_of_world.go maxPodErrors: a pod keeps at most 11 distinct errors

NO_PLUGIN_MATCHED = "no volume plugin matched"  # pkg/volume ErrNoPluginMatched

PLUGINS = (PLUGIN_CSI, PLUGIN_LOCAL, PLUGIN_HOST_PATH)
"""The plugins these rules know. The volume manager runs local and hostPath only (`resolve`'s ``plugins``): CSI's
rules are written, its staging and publishing are not wired."""
PLUGIN_SOURCES = {PLUGIN_CSI: "csi", PLUGIN_LOCAL: "local", PLUGIN_HOST_PATH: "hostPath"}
"""Each plugin's PV source (``spec.csi``, ``spec.local``, ``spec.hostPath``)."""
MOUNTED_TYPES = "local and hostPath PersistentVolumes"
"""What kopflet mounts, in the no-plugin error's words."""

# The in-tree PV types upstream translates to a CSI driver (csi-translation-lib): kopflet does not translate them.
MIGRATED_DRIVERS = {
    "awsElasticBlockStore": "ebs.csi.aws.com",
    "azureDisk": "disk.csi.azure.com",
    "azureFile": "file.csi.azure.com",
    "cinder": "cinder.csi.openstack.org",
    "gcePersistentDisk": "pd.csi.storage.gke.io",
    "portworxVolume": "pxd.portworx.com",
    "vsphereVolume": "csi.vsphere.vmware.com",
}

_PV_SOURCES = ("csi", "local", "hostPath", *MIGRATED_DRIVERS, "nfs", "iscsi", "fc", "rbd", "cephfs", "glusterfs",
               "flexVolume", "flocker", "quobyte", "scaleIO", "storageos", "photonPersistentDisk")

Fetched = Mapping[str, Any] | str | None
"""One fetched API object: its body, None for NotFound, or the apiserver's error text."""


class SpecError(Exception):
    """A pod volume that cannot be resolved now; ``str(exc)`` is upstream's error text (the populator's
    ``AddErrorToPod``), `volume` the pod volume's name."""

    def __init__(self, message: str, volume: str = "") -> None:
        super().__init__(message)
        self.volume = volume


@dataclasses.dataclass(frozen=True)
class SecretRef:
    """A CSI secret reference: a PV's carries its namespace; an inline volume's is in the pod's namespace."""

    namespace: str
    name: str


@dataclasses.dataclass(frozen=True)
class ClaimRef:
    """The PVC a PV-backed volume came through."""

    namespace: str
    name: str
    uid: str


@dataclasses.dataclass(frozen=True)
class VolumeSpec:
    """Upstream's `volume.Spec` flattened for kopflet's three plugins: what mounting the volume takes."""

    outer_name: str
    """The pod's volume name (upstream's outerVolumeSpecName)."""
    name: str
    """Upstream's `Spec.Name()`: the PV's name for a PV-backed volume, else the pod volume's. It names the
    volume in the mount events (``MountVolume.SetUp failed for volume "<name>"``) and in its paths."""
    plugin: str
    read_only: bool
    """The pod volume's ``readOnly`` (`NewSpecFromPersistentVolume(pv, pvcSource.ReadOnly)`); an inline csi
    volume's own. A CSI PV's ``csi.readOnly`` is the external attacher's (ControllerPublishVolume), not the
    kubelet's: upstream's NodePublishVolume never reads it."""
    volume_mode: str = VOLUME_MODE_FILESYSTEM
    pv_name: str = ""
    claim: ClaimRef | None = None
    generic_ephemeral: bool = False
    lifecycle: str = LIFECYCLE_PERSISTENT
    """CSI's VolumeLifecycleMode: Ephemeral for an inline csi volume (upstream getVolumeLifecycleMode)."""
    driver: str = ""
    volume_handle: str = ""
    fs_type: str = ""
    mount_options: tuple[str, ...] = ()
    """``spec.mountOptions`` as written: CSI passes them as they are (NodeStage/NodePublish mount_flags)."""
    mount_options_annotation: str | None = None
    """The beta ``volume.beta.kubernetes.io/mount-options`` annotation, which `mount_options_from_spec` prefers."""
    volume_attributes: Mapping[str, str] = dataclasses.field(default_factory=dict)
    node_stage_secret: SecretRef | None = None
    node_publish_secret: SecretRef | None = None
    node_expand_secret: SecretRef | None = None
    access_modes: tuple[str, ...] = ()
    capacity: str = ""
    """The PV's ``spec.capacity.storage`` (a quantity), the size the volume should have."""
    claim_capacity: str = ""
    """The PVC's ``status.capacity.storage``, the size the filesystem was last grown to."""
    local_path: str = ""
    local_fs_type: str | None = None
    host_path: str = ""
    host_path_type: str = ""
    node_affinity: Mapping[str, Any] | None = None
    """The PV's ``spec.nodeAffinity.required`` (a NodeSelector), checked before each mount."""
    volume_gid: str = ""
    """The PV's ``pv.beta.kubernetes.io/gid`` annotation: an extra supplemental group for the pod."""

    @property
    def is_block(self) -> bool:
        return self.volume_mode == VOLUME_MODE_BLOCK


@dataclasses.dataclass(frozen=True)
class VolumeToMount:
    """One volume of the desired state of the world for one pod (upstream cache.VolumeToMount)."""

    name: str
    """The unique volume name (`unique_volume_name`): ``kubernetes.io/csi/<driver>^<handle>``, ..."""
    spec: VolumeSpec
    pod_uid: str
    outer_names: tuple[str, ...]
    """Every pod volume naming this volume (two may name one PVC), in the pod's order."""
    attachable: bool
    device_mountable: bool
    requires_remount: bool = False
    """The CSIDriver's ``requiresRepublish``: NodePublishVolume again on every sync (upstream RequiresRemount)."""


@dataclasses.dataclass(frozen=True)
class DesiredVolumes:
    """One pod's persistent volumes in the desired state of the world, and what could not be resolved."""

    pod_uid: str
    volumes: tuple[VolumeToMount, ...] = ()
    errors: tuple[str, ...] = ()
    """The populator's errors for the pod (AddErrorToPod then PopPodErrors): distinct, sorted, at most 11."""
    expected: tuple[str, ...] = ()
    """The persistent pod volumes the containers use (mounts or devices), sorted: what the pod waits for."""
    failed: tuple[str, ...] = ()
    """The pod volumes whose error is in `errors`."""

    def by_outer_name(self) -> dict[str, VolumeToMount]:
        return {outer: volume for volume in self.volumes for outer in volume.outer_names}


# ------------------------------------------------------------------------------------------------ pod side


def volume_kind(volume: Mapping[str, Any]) -> str:
    """The pod volume's source (``persistentVolumeClaim``, ``csi``, ``configMap``, ...); "" for none."""
    for key in POD_VOLUME_KINDS:
        if isinstance(volume.get(key), Mapping):
            return key
    for key, value in volume.items():
        if key != "name" and value is not None:
            return str(key)
    return ""


def is_persistent(volume: Mapping[str, Any]) -> bool:
    """Whether this module resolves the pod volume (a PVC, a generic ephemeral volume or an inline csi volume)."""
    return volume_kind(volume) in POD_VOLUME_KINDS


def _name(volume: Mapping[str, Any]) -> str:
    name = volume.get("name")
    return name if isinstance(name, str) else ""


def _body(volume: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    body = volume.get(kind)
    return body if isinstance(body, Mapping) else {}


def _all_containers(pod: spec.Pod) -> tuple[spec.ContainerSpec, ...]:
    """Upstream `podutil.VisitContainers(..., AllFeatureEnabledContainers())`: init, regular, ephemeral."""
    return (*pod.spec.init_containers, *pod.spec.containers, *pod.spec.ephemeral_containers)


def pod_volume_names(pod: spec.Pod) -> tuple[frozenset[str], frozenset[str]]:
    """Upstream `GetPodVolumeNames`: the volume names the containers mount, and those they take as devices."""
    mounts: set[str] = set()
    devices: set[str] = set()
    for container in _all_containers(pod):
        mounts.update(str(m.get("name") or "") for m in container.volume_mounts if isinstance(m, Mapping))
        raw_devices = container.raw.get("volumeDevices")
        if isinstance(raw_devices, list):
            devices.update(str(d.get("name") or "") for d in raw_devices if isinstance(d, Mapping))
    return frozenset(mounts), frozenset(devices)


def ephemeral_claim_name(pod: spec.Pod, volume_name: str) -> str:
    """Upstream ephemeral `VolumeClaimName`: the PVC made for a generic ephemeral volume, ``<pod>-<volume>``."""
    return f"{pod.name}-{volume_name}"


def claim_name(pod: spec.Pod, volume: Mapping[str, Any]) -> str | None:
    """The PVC a pod volume uses: a ``persistentVolumeClaim``'s ``claimName``, a generic ephemeral volume's
    ``<pod>-<volume>``; None for any other volume."""
    kind = volume_kind(volume)
    if kind == KIND_PVC:
        name = _body(volume, kind).get("claimName")
        return name if isinstance(name, str) else ""
    if kind == KIND_EPHEMERAL:
        return ephemeral_claim_name(pod, _name(volume))
    return None


def _used_persistent(pod: spec.Pod) -> list[Mapping[str, Any]]:
    """The pod's persistent volumes a container uses (upstream skips the unused ones: "Skipping unused volume")."""
    mounts, devices = pod_volume_names(pod)
    return [v for v in pod.spec.volumes if is_persistent(v) and (_name(v) in mounts or _name(v) in devices)]


def claims_wanted(pod: spec.Pod) -> tuple[str, ...]:
    """The PVCs to fetch (in the pod's namespace) before `resolve`: those of the used volumes, in spec order."""
    names = (claim_name(pod, v) for v in _used_persistent(pod))
    return tuple(dict.fromkeys(n for n in names if n))  # an empty claimName is never fetched (see _claim_error)


def _bound_volume_name(claim: Fetched) -> str:
    if not isinstance(claim, Mapping):
        return ""
    volume_name = _child(claim, "spec").get("volumeName")
    return volume_name if isinstance(volume_name, str) else ""


def volumes_wanted(pod: spec.Pod, claims: Mapping[str, Fetched]) -> tuple[str, ...]:
    """The PersistentVolumes to fetch: those the fetched claims are bound to (``spec.volumeName``), in spec order."""
    names = (_bound_volume_name(claims.get(name)) for name in claims_wanted(pod))
    return tuple(dict.fromkeys(n for n in names if n))


def drivers_wanted(pod: spec.Pod, claims: Mapping[str, Fetched],
                   persistent_volumes: Mapping[str, Fetched]) -> tuple[str, ...]:
    """The CSIDrivers to fetch (cluster-scoped; NotFound is an answer: the driver then has upstream's defaults):
    the inline csi volumes' drivers and the CSI PVs'."""
    drivers: list[str] = []
    for volume in _used_persistent(pod):
        if volume_kind(volume) == KIND_CSI:
            drivers.append(str(_body(volume, KIND_CSI).get("driver") or ""))
            continue
        pv = persistent_volumes.get(_bound_volume_name(claims.get(claim_name(pod, volume) or "")))
        if isinstance(pv, Mapping):
            csi = _child(_child(pv, "spec"), "csi")
            if csi:
                drivers.append(str(csi.get("driver") or ""))
    return tuple(dict.fromkeys(d for d in drivers if d))


# ---------------------------------------------------------------------------------------------- resolution


def _child(body: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = body.get(key)
    return value if isinstance(value, Mapping) else {}


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def not_found(resource: str, name: str) -> str:
    """The apiserver's NotFound text, as client-go's error prints it: ``persistentvolumeclaims "data" not found``
    (``volumeattachments.storage.k8s.io "csi-..." not found`` for a group's resource)."""
    return f"{resource} {gotext.go_quote(name)} not found"


def _fetched(objects: Mapping[str, Fetched], name: str, what: str) -> Fetched:
    if name not in objects:
        raise ValueError(f"{what} {name!r} was not fetched (missing from the mapping passed in)")
    return objects[name]


def _error_text(value: Fetched, resource: str, name: str) -> str:
    return value if isinstance(value, str) else not_found(resource, name)


def _is_controlled_by(obj: Mapping[str, Any], owner_uid: str) -> bool:
    """apimachinery `metav1.IsControlledBy`: the first owner reference with ``controller: true`` is the owner."""
    for ref in _child(obj, "metadata").get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return ref.get("uid") == owner_uid
    return False


def volume_is_for_pod(pod: spec.Pod, claim: Mapping[str, Any]) -> str | None:
    """Upstream ephemeral `VolumeIsForPod`: the error when the PVC is not the one made for the pod, else None."""
    meta = _child(claim, "metadata")
    namespace, name = _str(meta.get("namespace")), _str(meta.get("name"))
    if namespace != pod.namespace or not _is_controlled_by(claim, pod.uid):
        return (f"PVC {namespace}/{name} was not created for pod {pod.namespace}/{pod.name} "
                "(pod is not owner)")
    return None


def _claim_error(claim: Fetched, name: str) -> str | None:
    """Upstream `getPVCExtractPV`'s error for the claim, or None when it is bound."""
    if not name:  # client-go refuses a Get without a name before asking (the apiserver forbids it anyway)
        return "failed to fetch PVC from API server: resource name may not be empty"
    if not isinstance(claim, Mapping):
        return f"failed to fetch PVC from API server: {_error_text(claim, 'persistentvolumeclaims', name)}"
    meta = _child(claim, "metadata")
    finalizers = meta.get("finalizers") or []
    # A PVC being deleted without the pvc-protection finalizer (which keeps it until its pods are gone) must not
    # be started on.
    if meta.get("deletionTimestamp") and PVC_PROTECTION_FINALIZER not in finalizers:
        return "PVC is being deleted"
    if _child(claim, "status").get("phase") != "Bound":
        return "PVC is not bound"
    if not _bound_volume_name(claim):
        return "PVC has empty pvc.Spec.VolumeName"
    return None


def _pv_error(pv: Fetched, pv_name: str, claim_uid: str) -> str | None:
    """Upstream `getPVSpec`'s error, or None when the PV is bound to this very claim."""
    if not isinstance(pv, Mapping):
        return f"failed to fetch PV {pv_name} from API server: {_error_text(pv, 'persistentvolumes', pv_name)}"
    claim_ref = _child(pv, "spec").get("claimRef")
    if not isinstance(claim_ref, Mapping):
        return (f"found PV object {pv_name} but it has a nil pv.Spec.ClaimRef indicating it is not yet bound "
                "to the claim")
    if claim_ref.get("uid") != claim_uid:
        return (f"found PV object {pv_name} but its pv.Spec.ClaimRef.UID {_str(claim_ref.get('uid'))} does not "
                f"point to claim.UID {claim_uid}")
    return None


def _secret_ref(ref: Any, default_namespace: str | None = None) -> SecretRef | None:
    if not isinstance(ref, Mapping):
        return None
    namespace = _str(ref.get("namespace")) if default_namespace is None else default_namespace
    return SecretRef(namespace=namespace, name=_str(ref.get("name")))


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list | tuple) else ()


def _string_map(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


def pv_source(pv: Mapping[str, Any]) -> str:
    """The PV's volume source (``csi``, ``local``, ``hostPath``, ``nfs``, ...), "" for none."""
    pv_spec = _child(pv, "spec")
    for key in _PV_SOURCES:
        if isinstance(pv_spec.get(key), Mapping):
            return key
    return ""


def no_plugin_error(spec_name: str, source: str) -> str:
    """AddPodToVolume's ``failed to get Plugin`` error for a PV kopflet has no plugin for, saying why."""
    if source in MIGRATED_DRIVERS:
        why = (f"kopflet has no {source} plugin and does not translate in-tree volumes to CSI (upstream's CSI "
               f"migration would use the {MIGRATED_DRIVERS[source]} driver)")
    elif source == "csi":
        why = f"kopflet does not mount CSI volumes yet (it mounts {MOUNTED_TYPES})"
    elif source:
        why = f"kopflet has no {source} plugin (it mounts {MOUNTED_TYPES})"
    else:
        why = "the PersistentVolume has no volume source"
    return (f"failed to get Plugin from volumeSpec for volume {gotext.go_quote(spec_name)} "
            f"err={NO_PLUGIN_MATCHED}: {why}")


def _required_affinity(pv_spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    required = _child(pv_spec, "nodeAffinity").get("required")
    return required if isinstance(required, Mapping) else None


def _pv_spec(pod_volume: str, pv: Mapping[str, Any], *, read_only: bool, claim: ClaimRef,
             claim_body: Mapping[str, Any], generic_ephemeral: bool) -> VolumeSpec:
    """Upstream `NewSpecFromPersistentVolume(pv, pvcReadOnly)`, with the plugin chosen (FindPluginBySpec)."""
    meta, pv_spec = _child(pv, "metadata"), _child(pv, "spec")
    pv_name = _str(meta.get("name"))
    annotations = _string_map(meta.get("annotations"))
    source = pv_source(pv)
    common: dict[str, Any] = {
        "outer_name": pod_volume, "name": pv_name, "read_only": read_only,
        "volume_mode": _str(pv_spec.get("volumeMode")), "pv_name": pv_name, "claim": claim,
        "generic_ephemeral": generic_ephemeral,
        "mount_options": _strings(pv_spec.get("mountOptions")),
        "mount_options_annotation": annotations.get(MOUNT_OPTIONS_ANNOTATION),
        "access_modes": _strings(pv_spec.get("accessModes")),
        "capacity": _str(_child(pv_spec, "capacity").get("storage")),
        "claim_capacity": _str(_child(_child(claim_body, "status"), "capacity").get("storage")),
        "node_affinity": _required_affinity(pv_spec),
        "volume_gid": annotations.get(VOLUME_GID_ANNOTATION, ""),
    }
    if source == "csi":
        csi = _child(pv_spec, "csi")
        return VolumeSpec(
            plugin=PLUGIN_CSI, driver=_str(csi.get("driver")), volume_handle=_str(csi.get("volumeHandle")),
            fs_type=_str(csi.get("fsType")), volume_attributes=_string_map(csi.get("volumeAttributes")),
            node_stage_secret=_secret_ref(csi.get("nodeStageSecretRef")),
            node_publish_secret=_secret_ref(csi.get("nodePublishSecretRef")),
            node_expand_secret=_secret_ref(csi.get("nodeExpandSecretRef")), **common)
    if source == "local":
        local = _child(pv_spec, "local")
        fs_type = local.get("fsType")
        return VolumeSpec(plugin=PLUGIN_LOCAL, local_path=_str(local.get("path")),
                          local_fs_type=fs_type if isinstance(fs_type, str) else None, **common)
    if source == "hostPath":
        host_path = _child(pv_spec, "hostPath")
        return VolumeSpec(plugin=PLUGIN_HOST_PATH, host_path=_str(host_path.get("path")),
                          host_path_type=_str(host_path.get("type")), **common)
    raise SpecError(no_plugin_error(pv_name, source), pod_volume)


def make_volume_handle(pod_uid: str, spec_name: str) -> str:
    """Upstream csi `makeVolumeHandle`: an inline csi volume's ID, ``csi-<sha256(podUID + volume name)>``."""
    return "csi-" + hashlib.sha256(f"{pod_uid}{spec_name}".encode()).hexdigest()


def _inline_csi_spec(pod: spec.Pod, volume: Mapping[str, Any]) -> VolumeSpec:
    """Upstream `NewSpecFromVolume` for an inline csi volume (lifecycle Ephemeral; csi NewMounter's handle)."""
    name = _name(volume)
    body = _body(volume, KIND_CSI)
    fs_type = body.get("fsType")
    return VolumeSpec(
        outer_name=name, name=name, plugin=PLUGIN_CSI, read_only=body.get("readOnly") is True,
        lifecycle=LIFECYCLE_EPHEMERAL, driver=_str(body.get("driver")),
        volume_handle=make_volume_handle(pod.uid, name), fs_type=fs_type if isinstance(fs_type, str) else "",
        volume_attributes=_string_map(body.get("volumeAttributes")),
        node_publish_secret=_secret_ref(body.get("nodePublishSecretRef"), pod.namespace))


def resolve_volume(pod: spec.Pod, volume: Mapping[str, Any], *, claims: Mapping[str, Fetched],
                   persistent_volumes: Mapping[str, Fetched], mounts: Iterable[str] = (),
                   devices: Iterable[str] = ()) -> VolumeSpec:
    """Upstream `createVolumeSpec` plus the plugin lookup of `AddPodToVolume`: the volume's spec, or `SpecError`
    with upstream's text. `mounts` and `devices` are `pod_volume_names`' (the volume mode is checked against them)."""
    kind = volume_kind(volume)
    name = _name(volume)
    if kind == KIND_CSI:
        return _inline_csi_spec(pod, volume)
    if kind not in (KIND_PVC, KIND_EPHEMERAL):
        raise ValueError(f"volume {name!r} is a {kind or 'sourceless'} volume, not a persistent one")
    claim = claim_name(pod, volume) or ""
    prefix = f"error processing PVC {pod.namespace}/{claim}: "
    claim_body = _fetched(claims, claim, "PersistentVolumeClaim") if claim else None
    if error := _claim_error(claim_body, claim):
        raise SpecError(prefix + error, name)
    assert isinstance(claim_body, Mapping)
    if kind == KIND_EPHEMERAL and (error := volume_is_for_pod(pod, claim_body)):
        raise SpecError(error, name)
    pv_name = _bound_volume_name(claim_body)
    claim_uid = _str(_child(claim_body, "metadata").get("uid"))
    pv = _fetched(persistent_volumes, pv_name, "PersistentVolume")
    if error := _pv_error(pv, pv_name, claim_uid):
        raise SpecError(prefix + error, name)
    assert isinstance(pv, Mapping)
    # The generic ephemeral volume's stand-in PVC source has only the claim's name: never read-only.
    read_only = kind == KIND_PVC and _body(volume, KIND_PVC).get("readOnly") is True
    volume_mode = _str(_child(pv, "spec").get("volumeMode"))
    if not volume_mode:  # GetVolumeMode (the apiserver defaults it to Filesystem)
        raise SpecError(f"cannot get volumeMode for volume: {pv_name}", name)
    if name in set(mounts) and volume_mode != VOLUME_MODE_FILESYSTEM:
        raise SpecError(f"volume {name} has volumeMode {volume_mode}, but is specified in volumeMounts", name)
    if name in set(devices) and volume_mode != VOLUME_MODE_BLOCK:
        raise SpecError(f"volume {name} has volumeMode {volume_mode}, but is specified in volumeDevices", name)
    ref = ClaimRef(namespace=pod.namespace, name=claim, uid=claim_uid)
    return _pv_spec(name, pv, read_only=read_only, claim=ref, claim_body=claim_body,
                    generic_ephemeral=kind == KIND_EPHEMERAL)


# ------------------------------------------------------------------------------------------- unique names


def unique_volume_name(plugin: str, volume_name: str) -> str:
    """Upstream `GetUniqueVolumeName`: ``<plugin>/<volume name>``."""
    return f"{plugin}/{volume_name}"


def unique_volume_name_with_pod(plugin: str, pod_uid: str, spec_name: str) -> str:
    """Upstream `GetUniqueVolumeNameFromSpecWithPod`: ``<plugin>/<pod uid>-<spec name>``, for a volume neither
    attachable nor device-mountable (one per pod)."""
    return f"{plugin}/{pod_uid}-{spec_name}"


def plugin_volume_name(volume: VolumeSpec) -> str:
    """The plugin's `GetVolumeName`: CSI ``<driver>^<handle>``, local the PV's name, hostPath its path."""
    if volume.plugin == PLUGIN_CSI:
        return f"{volume.driver}^{volume.volume_handle}"
    if volume.plugin == PLUGIN_LOCAL:
        return volume.name
    return volume.host_path


def attach_required(driver: Fetched) -> bool:
    """Upstream csi `skipAttach` negated: a CSIDriver saying ``attachRequired: false`` skips the attach; no
    CSIDriver (NotFound) does not. A CSIDriver that could not be read makes upstream's CanAttach fail, and the
    volume is then not attachable (FindAttachablePluginBySpec's error)."""
    if isinstance(driver, str):
        return False
    return not (isinstance(driver, Mapping) and _child(driver, "spec").get("attachRequired") is False)


def is_attachable(volume: VolumeSpec, driver: Fetched) -> bool:
    """Upstream `IsAttachableVolume`: only a persistent CSI volume whose driver requires the attach."""
    return volume.plugin == PLUGIN_CSI and volume.lifecycle == LIFECYCLE_PERSISTENT and attach_required(driver)


def is_device_mountable(volume: VolumeSpec) -> bool:
    """Upstream `IsDeviceMountableVolume`: a persistent CSI volume (staged once per node), a local PV (its block
    device mounted once); not a hostPath or inline csi volume."""
    if volume.plugin == PLUGIN_CSI:
        return volume.lifecycle == LIFECYCLE_PERSISTENT
    return volume.plugin == PLUGIN_LOCAL


def volume_name_for(volume: VolumeSpec, pod_uid: str, *, attachable: bool, device_mountable: bool) -> str:
    """AddPodToVolume's unique name: the plugin's (`GetUniqueVolumeNameFromSpec`) for an attachable or
    device-mountable volume, else one per pod (`GetUniqueVolumeNameFromSpecWithPod`)."""
    if attachable or device_mountable:
        return unique_volume_name(volume.plugin, plugin_volume_name(volume))
    return unique_volume_name_with_pod(volume.plugin, pod_uid, volume.name)


# ------------------------------------------------------------------------------------------------ the pod


def _requires_republish(driver: Fetched) -> bool:
    return isinstance(driver, Mapping) and _child(driver, "spec").get("requiresRepublish") is True


def resolve(pod: spec.Pod, *, claims: Mapping[str, Fetched], persistent_volumes: Mapping[str, Fetched],
            csi_drivers: Mapping[str, Fetched], plugins: Collection[str] = PLUGINS) -> DesiredVolumes:
    """Upstream `processPodVolumes` for the pod's persistent volumes: each used one resolved and added to the
    desired state (its unique name shared by the pod volumes that name one PVC), or its error kept for the pod.

    `plugins` are the plugins the caller runs: a PV whose plugin is not among them fails as a PV of a type without a
    plugin does (`no_plugin_error`, in the pod's errors); an inline csi volume without the CSI plugin is left out
    (not expected either): `kopflet.volumes.plugins.plan_volumes` refuses it as a volume type kopflet has no plugin
    for, as it refuses the other inline types. No CSIDriver is read for a volume refused so."""
    mounts, devices = pod_volume_names(pod)
    volumes: dict[str, VolumeToMount] = {}
    errors: set[str] = set()
    failed: list[str] = []
    used = [v for v in _used_persistent(pod) if volume_kind(v) != KIND_CSI or PLUGIN_CSI in plugins]
    for volume in used:
        outer = _name(volume)
        try:
            resolved = resolve_volume(pod, volume, claims=claims, persistent_volumes=persistent_volumes,
                                      mounts=mounts, devices=devices)
            if resolved.plugin not in plugins:  # FindPluginBySpec with fewer plugins registered
                raise SpecError(no_plugin_error(resolved.name, PLUGIN_SOURCES[resolved.plugin]), outer)
        except SpecError as exc:
            if len(errors) <= MAX_POD_ERRORS:
                errors.add(str(exc))
            failed.append(outer)
            continue
        # No CSIDriver is read for a volume without a driver's name (drivers_wanted leaves it out).
        driver = (_fetched(csi_drivers, resolved.driver, "CSIDriver")
                  if resolved.plugin == PLUGIN_CSI and resolved.driver else None)
        attachable = is_attachable(resolved, driver)
        device_mountable = is_device_mountable(resolved)
        name = volume_name_for(resolved, pod.uid, attachable=attachable, device_mountable=device_mountable)
        existing = volumes.get(name)
        outer_names = (*existing.outer_names, outer) if existing is not None else (outer,)
        volumes[name] = VolumeToMount(
            name=name, spec=existing.spec if existing is not None else resolved, pod_uid=pod.uid,
            outer_names=outer_names, attachable=attachable, device_mountable=device_mountable,
            requires_remount=_requires_republish(driver))
    return DesiredVolumes(pod_uid=pod.uid, volumes=tuple(volumes.values()), errors=tuple(sorted(errors)),
                          expected=tuple(sorted({_name(v) for v in used})), failed=tuple(failed))


# ------------------------------------------------------------------------------------- checks at mount time


def check_node_affinity(volume: VolumeSpec, node_labels: Mapping[str, str]) -> str | None:
    """Upstream `CheckNodeAffinity` (component-helpers storage/volume): the error when the PV's required node
    affinity does not select this node (by its labels only), else None. An unparsable term selects nothing, as
    upstream; its parse error's text is not reproduced."""
    if volume.node_affinity is None:
        return None
    if admission.node_selector_matches(volume.node_affinity, node_labels):
        return None
    return "no matching NodeSelectorTerms"


def join_mount_options(user: Iterable[str], system: Iterable[str] = ()) -> tuple[str, ...]:
    """Upstream `JoinMountOptions`: the user's (empty ones dropped) and the system's, deduplicated and sorted."""
    return tuple(sorted({o for o in user if o} | set(system)))


def mount_options_from_spec(volume: VolumeSpec, *options: str) -> tuple[str, ...]:
    """Upstream `MountOptionFromSpec`: the PV's beta annotation (comma-separated) first, else ``spec.mountOptions``,
    joined with `options`; `options` alone for a volume without a PV."""
    if not volume.pv_name:
        return tuple(options)
    if volume.mount_options_annotation is not None:
        return join_mount_options(volume.mount_options_annotation.split(","), options)
    if volume.mount_options:
        return join_mount_options(volume.mount_options, options)
    return tuple(options)


def supports_mount_options(plugin: str) -> bool:
    """The plugin's `SupportsMountOption`: CSI and local do, hostPath does not."""
    return plugin != PLUGIN_HOST_PATH


def mount_option_error(volume: VolumeSpec) -> str | None:
    """Upstream `checkMountOptionSupport`: mount options on a volume whose plugin takes none."""
    if mount_options_from_spec(volume) and not supports_mount_options(volume.plugin):
        return "mount options are not supported for this volume type"
    return None


def read_write_once_pod_conflict(volume: VolumeSpec, mounted_elsewhere: bool) -> str | None:
    """GenerateMountVolumeFunc's ReadWriteOncePod check: a volume whose only access mode is ReadWriteOncePod and
    that another pod on the node has mounted."""
    if mounted_elsewhere and volume.access_modes == (READ_WRITE_ONCE_POD,):
        return "volume uses the ReadWriteOncePod access mode and is already in use by another pod"
    return None


def host_path(volume: VolumeSpec, layout: paths.Layout, pod_uid: str) -> str:
    """Where the containers' bind mounts (or, for a block volume, devices) come from once the volume is set up:
    the CSI target's ``mount`` directory, the local PV's pod directory, a hostPath PV's own path; a block volume's
    symlink under the pod's ``volumeDevices`` (upstream GetPath / GetPodDeviceMapPath)."""
    if volume.is_block:
        return layout.pod_device_map_path(pod_uid, volume.plugin, volume.name)
    if volume.plugin == PLUGIN_CSI:
        return layout.csi_mount_path(pod_uid, volume.name)
    if volume.plugin == PLUGIN_LOCAL:
        return layout.local_volume_dir(pod_uid, volume.name)
    return volume.host_path


# ---------------------------------------------------------------------------------------------- local PVs

FILE_TYPE_DIRECTORY = "Directory"  # hostutil FileTypeDirectory
FILE_TYPE_BLOCK_DEVICE = "BlockDevice"  # hostutil FileTypeBlockDev
LOCAL_DEFAULT_FS_TYPE = "ext4"  # pkg/volume/local defaultFSType


def local_global_path(volume: VolumeSpec, layout: paths.Layout, file_type: str) -> str:
    """Upstream local `getGlobalLocalPath`: the PV's path itself for a directory, ``plugins/kubernetes.io/
    local-volume/mounts/<pv>`` for a block device (formatted and mounted there first); `SpecError` otherwise.
    `file_type` is what the I/O side found at the path (`FILE_TYPE_*`, or another hostutil type)."""
    if not volume.local_path:
        raise SpecError("local volume source is nil or local path is not set", volume.outer_name)
    if file_type == FILE_TYPE_DIRECTORY:
        return volume.local_path
    if file_type == FILE_TYPE_BLOCK_DEVICE:
        return layout.local_device_mount_path(volume.name)
    raise SpecError("only directory and block device are supported", volume.outer_name)


FILE_TYPE_FILE = "File"  # hostutil FileTypeFile
FILE_TYPE_SOCKET = "Socket"  # hostutil FileTypeSocket
FILE_TYPE_CHAR_DEVICE = "CharDevice"  # hostutil FileTypeCharDev
UNKNOWN_FILE_TYPE = "only recognise file, directory, socket, block device and character device"  # errUnknownFileType


def file_type(mode: int) -> str:
    """Upstream hostutil `getFileType` on a path's ``stat`` mode (symlinks followed): its FileType, or `SpecError`
    with upstream's errUnknownFileType (a FIFO)."""
    if stat.S_ISDIR(mode):
        return FILE_TYPE_DIRECTORY
    if stat.S_ISREG(mode):
        return FILE_TYPE_FILE
    if stat.S_ISSOCK(mode):
        return FILE_TYPE_SOCKET
    if stat.S_ISCHR(mode):
        return FILE_TYPE_CHAR_DEVICE
    if stat.S_ISBLK(mode):
        return FILE_TYPE_BLOCK_DEVICE
    raise SpecError(UNKNOWN_FILE_TYPE)


def path_missing(path: str) -> str:
    """Upstream `getFileType`'s error for a path that does not exist."""
    return f"path {gotext.go_quote(path)} does not exist"


@dataclasses.dataclass(frozen=True)
class MountInfo:
    """One line of /proc/self/mountinfo, the fields `mount_refs` reads (mount-utils MountInfo)."""

    id: int
    major: int
    minor: int
    root: str
    mount_point: str


def parse_mountinfo(text: str) -> tuple[MountInfo, ...]:
    """mount-utils `ParseMountInfo`, the fields kept here; a line it would refuse is skipped, paths are left escaped
    as the kernel writes them (``\\040`` for a space), as upstream leaves them."""
    infos = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 10:
            continue
        major, _, minor = fields[2].partition(":")
        try:
            infos.append(MountInfo(id=int(fields[0]), major=int(major), minor=int(minor), root=fields[3],
                                   mount_point=fields[4]))
        except ValueError:
            continue
    return tuple(infos)


def _within(path: str, base: str) -> bool:
    """mount-utils `PathWithinBase`: `path` is `base` or below it."""
    relative = posixpath.relpath(path, base)
    return relative != ".." and not relative.startswith("../")


def mount_refs(mounts: Sequence[MountInfo], path: str) -> tuple[str, ...]:
    """mount-utils `SearchMountPoints`: the other mount points of what is at `path` (resolved, no symlinks), bind
    mounts of it included. The last mount holding `path` gives its device and root inside that device; every other
    mount of the same device and root is a reference. None found: `SpecError` with upstream's text."""
    for info in reversed(mounts):
        if path == info.mount_point or _within(path, info.mount_point):
            rest = path[len(info.mount_point):] if path.startswith(info.mount_point) else path
            root = posixpath.normpath(posixpath.join(info.root, rest.lstrip("/")))
            return tuple(m.mount_point for m in mounts
                         if m.id != info.id and m.root == root and (m.major, m.minor) == (info.major, info.minor))
    raise SpecError(f"failed to get root path and major:minor for {path}")


def pod_mount_refs(refs: Iterable[str], pods_dir: str) -> tuple[str, ...]:
    """The local plugin's `filterPodMounts`: the references under the pods directory, other pods' mounts."""
    return tuple(r for r in refs if r.startswith(pods_dir.rstrip("/") + "/"))


def local_mount_options(volume: VolumeSpec) -> tuple[str, ...]:
    """The local plugin's bind mount into the pod (SetUpAt): ``bind`` (``ro`` too when read-only) joined with the
    PV's mount options."""
    return join_mount_options(("bind", "ro") if volume.read_only else ("bind",), mount_options_from_spec(volume))


BIND_REMOUNT_FLAGS = ("ro", "nodev", "noexec", "nosuid", "noatime", "relatime", "nodiratime")
"""mount-utils getBindMountOptions: the source filesystem's flags a bind mount is remounted with (statfs)."""


def bind_mount_args(source: str, target: str, options: Sequence[str],
                    source_options: Iterable[str] = ()) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """mount-utils `MakeBindOptsSensitive` and `bindMountSensitive`: the two ``mount`` calls of a bind mount with
    options: ``-o bind`` first, then ``-o bind,remount,<the other options>,<the source's flags>`` (a read-only bind
    mount only becomes read-only when remounted). `options` must hold ``bind``; `source_options` are the source
    filesystem's `BIND_REMOUNT_FLAGS`."""
    if "bind" not in options:
        raise ValueError(f"not a bind mount: {list(options)}")
    bind_opts = ["bind", *(["_netdev"] if "_netdev" in options else [])]
    remount = ["bind", "remount", *(o for o in options if o not in ("bind", "remount")), *source_options]
    return ("-o", ",".join(bind_opts), source, target), ("-o", ",".join(remount), source, target)


def local_device_mount_options(volume: VolumeSpec) -> tuple[str, ...]:
    """A local PV on a block device, formatted and mounted at its global path (mountLocalBlockDevice): ``ro`` when
    read-only, with the PV's mount options; `local_fs_type` or ext4."""
    return mount_options_from_spec(volume, *(("ro",) if volume.read_only else ()))


def local_fs_type(volume: VolumeSpec) -> str:
    return volume.local_fs_type if volume.local_fs_type is not None else LOCAL_DEFAULT_FS_TYPE


def already_mounted_volume_warning(fs_group: int, volume: str, gid: int) -> str:
    """The WarnAlreadyMountedVolume event a local PV mounted by another pod with another group gets (SetUpAt)."""
    return (f"The requested fsGroup is {fs_group}, but the volume {volume} has GID {gid}. "
            "The volume may not be shareable.")


# ------------------------------------------------------------------------------------------------- the rest


def fs_resize_required(volume: VolumeSpec) -> bool:
    """Upstream `checkVolumeFSResize`'s question: a PV-backed, writable volume whose PV is larger than the size
    the claim's filesystem last reached (NodeExpandVolume would grow it; kopflet does not do that yet)."""
    if volume.claim is None or volume.read_only or not volume.capacity:
        return False
    try:
        return qos.value(volume.capacity) > qos.value(volume.claim_capacity or "0")
    except (TypeError, ValueError):
        return False


def extra_supplemental_groups(pod: spec.Pod, volumes: Sequence[VolumeSpec]) -> tuple[int, ...]:
    """Upstream `GetExtraSupplementalGroupsForPod`: the mounted PVs' ``pv.beta.kubernetes.io/gid`` the pod does not
    already list in ``supplementalGroups`` (unparsable ones skipped), sorted here (upstream's order is a set's)."""
    existing = pod.spec.security_context.get("supplementalGroups") or []
    groups: set[int] = set()
    for volume in volumes:
        text = volume.volume_gid
        if not text or not text.lstrip("+-").isdigit():
            continue
        gid = int(text)
        if -(2**63) <= gid < 2**63 and gid not in existing:
            groups.add(gid)
    return tuple(sorted(groups))


__all__ = [
    "CONTROLLER_MANAGED_ATTACH_ANNOTATION",
    "KIND_CSI",
    "KIND_EPHEMERAL",
    "KIND_PVC",
    "PLUGIN_CSI",
    "PLUGIN_HOST_PATH",
    "PLUGIN_LOCAL",
    "POD_VOLUME_KINDS",
    "ClaimRef",
    "DesiredVolumes",
    "SecretRef",
    "SpecError",
    "VolumeSpec",
    "VolumeToMount",
    "already_mounted_volume_warning",
    "attach_required",
    "check_node_affinity",
    "claim_name",
    "claims_wanted",
    "drivers_wanted",
    "extra_supplemental_groups",
    "fs_resize_required",
    "host_path",
    "is_attachable",
    "is_device_mountable",
    "is_persistent",
    "local_global_path",
    "make_volume_handle",
    "mount_option_error",
    "mount_options_from_spec",
    "no_plugin_error",
    "not_found",
    "pod_volume_names",
    "read_write_once_pod_conflict",
    "resolve",
    "resolve_volume",
    "unique_volume_name",
    "volume_is_for_pod",
    "volume_kind",
    "volumes_wanted",
]
