"""
One pod's persistent volumes through upstream's volume manager loop: what to do next for each (record it attached,
mount it: stage then publish), what it waits for and why, the pod's verdict (WaitForAttachAndMount's), the node's
``status.volumesInUse``, and which mounts and staged devices to tear down.

Mirrors pkg/kubelet/volumemanager: reconciler/reconciler_common.go (`mountOrAttachVolumes`, `waitForVolumeAttach`,
`unmountVolumes`, `unmountDetachDevices`), volume_manager.go (`WaitForAttachAndMount`, `getUnmountedVolumes`,
`getUnattachedVolumes`, `getVolumesNotInDSW`, `GetVolumesInUse`, `podAttachAndMountTimeout`), and
pkg/volume/util/operationexecutor/operation_generator.go (`GenerateVerifyControllerAttachedVolumeFunc`, the checks
of `GenerateMountVolumeFunc` and `GenerateMapVolumeFunc` in their order, with their event texts).

With the controller attach/detach (upstream's default, and the only way for a node that may not create
VolumeAttachments), the kubelet attaches nothing: it reports the volume in ``volumesInUse``, waits for the
attach/detach controller to list it in ``node.status.volumesAttached``, checks the VolumeAttachment is attached, then
stages and publishes it through the node plugin.

Pure: observe (the desired volumes from `kopflet.volumes.pvc.resolve`, the actual state the I/O side keeps, the Node,
the VolumeAttachments `attachments_wanted` names) → `reconcile_pod` → act (the I/O side records, stages, publishes,
with `kopflet.volumes.csi_rules`' requests) → `wait_for_attach_and_mount` on the actual state after acting.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from kopflet import gotext, paths
from kopflet.volumes import csi_rules, pvc

POD_ATTACH_AND_MOUNT_TIMEOUT = 123.0  # volume_manager.go podAttachAndMountTimeout: 2m3s
POD_ATTACH_AND_MOUNT_RETRY_INTERVAL = 0.3  # podAttachAndMountRetryInterval
DEADLINE_EXCEEDED = "context deadline exceeded"  # Go's context.DeadlineExceeded, what the 2m3s poll ends with

FAILED_MOUNT = "FailedMount"  # kubelet events FailedMountVolume
FAILED_MAP_VOLUME = "FailedMapVolume"
FAILED_ATTACH_VOLUME = "FailedAttachVolume"  # the attach/detach controller's, on the pod, when it cannot attach

STEP_MOUNTED = "Mounted"
STEP_WAIT_IN_USE = "WaitForInUse"
"""An attachable volume not yet in the node's ``status.volumesInUse``: the attach/detach controller would not
attach it (nor keep it attached) before; the next node status update reports it."""
STEP_WAIT_ATTACHED = "WaitForControllerAttach"
"""An attachable volume not yet in the node's ``status.volumesAttached``."""
STEP_MOUNT = "Mount"
STEP_FAILED = "Failed"

# The texts of the checks (VolumeToMount.GenerateError prefixes).
NOT_IN_USE = "Volume has not been added to the list of VolumesInUse in the node's volume status"
NOT_ATTACHED = "Volume not attached according to node status"
NODE_AFFINITY_FAILED = "MountVolume.NodeAffinity check failed"
MAP_NODE_AFFINITY_FAILED = "MapVolume.NodeAffinity check failed"
MOUNT_OPTION_FAILED = "MountVolume.MountOptionSupport check failed"
SETUP_FAILED = "MountVolume.SetUp failed"
WAIT_FOR_ATTACH_FAILED = "MountVolume.WaitForAttach failed"
MAP_WAIT_FOR_ATTACH_FAILED = "MapVolume.WaitForAttach failed"
MOUNT_DEVICE_FAILED = "MountVolume.MountDevice failed"
MAP_SETUP_DEVICE_FAILED = "MapVolume.SetUpDevice failed"
MAP_POD_DEVICE_FAILED = "MapVolume.MapPodDevice failed"
NEW_MOUNTER_FAILED = "MountVolume.NewMounter initialization failed"
NO_BLOCK_MAPPER = "MapVolume.FindMapperPluginBySpec failed to find BlockVolumeMapper plugin. Volume plugin is nil."
UNABLE_TO_MOUNT = "Unable to attach or mount volumes: "  # kubelet.go SyncPod's FailedMount event


@dataclasses.dataclass(frozen=True)
class AttachedVolume:
    """A volume the node has (upstream's actual state's attachedVolume): recorded attached, and maybe its device
    mounted (staged: MountDevice / SetUpDevice done)."""

    name: str
    spec_name: str = ""
    attachable: bool = False
    device_path: str = ""
    device_mounted: bool = False
    device_mount_path: str = ""


@dataclasses.dataclass(frozen=True)
class MountedVolume:
    """A volume mounted (published) for one pod."""

    pod_uid: str
    name: str
    spec_name: str = ""
    outer_names: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class ActualState:
    """The actual state of the world for the node's persistent volumes, as the I/O side records it."""

    attached: Mapping[str, AttachedVolume] = dataclasses.field(default_factory=dict)
    mounted: tuple[MountedVolume, ...] = ()

    def is_mounted(self, pod_uid: str, name: str) -> bool:
        return any(m.pod_uid == pod_uid and m.name == name for m in self.mounted)

    def mounted_elsewhere(self, name: str, pod_uid: str) -> bool:
        """Upstream IsVolumeMountedElsewhere: another pod has the volume mounted."""
        return any(m.name == name and m.pod_uid != pod_uid for m in self.mounted)


@dataclasses.dataclass(frozen=True)
class NodeVolumes:
    """What the kubelet reads from its Node for volumes: its labels (PV node affinity), ``status.volumesInUse`` as
    last written (upstream's ReportedInUse), ``status.volumesAttached`` (the attach/detach controller's)."""

    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    in_use: frozenset[str] = frozenset()
    attached: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Unique volume name → device path."""

    @classmethod
    def from_node(cls, node: Mapping[str, Any]) -> NodeVolumes:
        meta = node.get("metadata") if isinstance(node.get("metadata"), Mapping) else {}
        status = node.get("status") if isinstance(node.get("status"), Mapping) else {}
        assert isinstance(meta, Mapping) and isinstance(status, Mapping)
        labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
        assert isinstance(labels, Mapping)
        return cls(labels={str(k): str(v) for k, v in labels.items()},
                   in_use=frozenset(str(n) for n in status.get("volumesInUse") or [] if isinstance(n, str)),
                   attached=attached_from_node_status(status))


def attached_from_node_status(status: Mapping[str, Any]) -> dict[str, str]:
    """Upstream `GetAttachedVolumesFromNodeStatus`: ``status.volumesAttached`` as name → device path."""
    result: dict[str, str] = {}
    for item in status.get("volumesAttached") or []:
        if isinstance(item, Mapping) and isinstance(item.get("name"), str):
            result[item["name"]] = str(item.get("devicePath") or "")
    return result


@dataclasses.dataclass(frozen=True)
class MountOperation:
    """What mounting one volume for the pod takes now (upstream GenerateMountVolumeFunc / GenerateMapVolumeFunc
    after their checks): stage the device first when it is not yet, then publish (set up) for the pod."""

    block: bool
    stage: bool
    """MountDevice (SetUpDevice for a block volume) first: the volume is device-mountable and not staged yet."""
    device_mount_path: str
    """CSI: the staging path (`csi_rules.staging_path`); local: "" (the global path needs the path's file type:
    `pvc.local_global_path`); nothing for hostPath or inline csi volumes."""
    target_path: str
    """Where the volume is set up for the pod: CSI's NodePublishVolume target, the local PV's pod directory, a
    hostPath PV's own path. For a block volume, the device to map (CSI's publish path, the local PV's path);
    the pod's symlink to it is `pvc.host_path`."""
    publish_context: Mapping[str, str] = dataclasses.field(default_factory=dict)
    remount: bool = False
    setup_error: str | None = None
    """An error the SetUp would meet before calling the driver (the lifecycle mode, the fsGroup policy): upstream
    stages first, then fails the SetUp with this (``MountVolume.SetUp failed for volume ... : <it>``)."""


@dataclasses.dataclass(frozen=True)
class VolumeStep:
    """The next step for one volume of the pod."""

    volume: pvc.VolumeToMount
    step: str
    message: str = ""
    """Why it waits (for the log), or the failure's event text."""
    event_reason: str = ""
    """``FailedMount`` or ``FailedMapVolume`` when `message` is an event on the pod; "" for none."""
    mark_attached: str | None = None
    """Record the volume attached first, with this device path (VerifyControllerAttachedVolume's outcome)."""
    operation: MountOperation | None = None


# ----------------------------------------------------------------------------------------------- the pod


def attachments_wanted(desired: pvc.DesiredVolumes, actual: ActualState, node_name: str) -> tuple[str, ...]:
    """The VolumeAttachments to read before `reconcile_pod`: those of the attachable CSI volumes not yet mounted
    for the pod (their WaitForAttach and publish context), by `csi_rules.attachment_name`."""
    names = [csi_rules.attachment_name(v.spec.volume_handle, v.spec.driver, node_name)
             for v in desired.volumes
             if v.attachable and not (actual.is_mounted(desired.pod_uid, v.name) and not v.requires_remount)]
    return tuple(dict.fromkeys(names))


def _failed(volume: pvc.VolumeToMount, prefix: str, detail: str | None, reason: str = FAILED_MOUNT,
            mark_attached: str | None = None) -> VolumeStep:
    message = csi_rules.volume_message(prefix, volume.spec.name, detail)
    return VolumeStep(volume=volume, step=STEP_FAILED, message=message, event_reason=reason,
                      mark_attached=mark_attached)


def _unregistered(volume: pvc.VolumeToMount, *, stage: bool, mark: str | None) -> VolumeStep:
    """The first CSI call's failure when the driver has not registered (newCsiDriverClient), a transient one:
    SetUpDevice's for a block volume, MountDevice's when staging, else SetUp's."""
    missing = csi_rules.driver_not_registered(volume.spec.driver)
    if volume.spec.is_block:
        return _failed(volume, MAP_SETUP_DEVICE_FAILED,
                       csi_rules.csi_log(f"blockMapper.SetUpDevice failed to get CSI client: {missing}"),
                       reason=FAILED_MAP_VOLUME, mark_attached=mark)
    if stage:
        return _failed(volume, MOUNT_DEVICE_FAILED,
                       csi_rules.csi_log(f"attacher.MountDevice failed to create newCsiDriverClient: {missing}"),
                       mark_attached=mark)
    return _failed(volume, SETUP_FAILED, csi_rules.csi_log(f"mounter.SetUpAt failed to get CSI client: {missing}"),
                   mark_attached=mark)


def _driver(drivers: Mapping[str, csi_rules.DriverInfo], name: str) -> csi_rules.DriverInfo:
    return drivers.get(name) or csi_rules.DriverInfo(name=name)


def _setup_error(volume: pvc.VolumeSpec, driver: csi_rules.DriverInfo) -> str | None:
    """csi SetUpAt's checks before any call: the lifecycle mode, then the fsGroup policy."""
    if error := csi_rules.lifecycle_mode_error(driver, volume.lifecycle):
        return csi_rules.csi_log(f"mounter.SetupAt failed to check volume lifecycle mode: {error}")
    _policy, error = csi_rules.fs_group_policy(driver)
    if error:
        return csi_rules.csi_log(f"mounter.SetupAt failed to check fsGroup policy: {error}")
    return None


def reconcile_pod(desired: pvc.DesiredVolumes, actual: ActualState, node: NodeVolumes, *, layout: paths.Layout,
                  node_name: str, attachments: Mapping[str, pvc.Fetched] | None = None,
                  csi_drivers: Mapping[str, csi_rules.DriverInfo] | None = None,
                  registered: Mapping[str, csi_rules.NodeCapabilities] | None = None) -> tuple[VolumeStep, ...]:
    """Upstream `mountOrAttachVolumes` for the pod's volumes: each one's next step.

    `attachments` holds the VolumeAttachments `attachments_wanted` names (None for NotFound, a string for another
    error); `csi_drivers` the CSIDriver objects (`csi_rules.DriverInfo`; a missing name is "no CSIDriver");
    `registered` the CSI drivers registered on the node and their node capabilities (a missing one has not
    registered: its volumes fail as upstream's do without a client). A volume recorded attached in a step
    (`mark_attached`) goes on to its mount in the same step, where upstream's reconciler takes it on its next
    round."""
    attachments = attachments or {}
    drivers = csi_drivers or {}
    plugins = registered or {}
    steps = []
    for volume in desired.volumes:
        spec = volume.spec
        mark: str | None = None
        mounted = actual.is_mounted(desired.pod_uid, volume.name)
        if volume.name not in actual.attached:
            # waitForVolumeAttach with the controller attach/detach: VerifyControllerAttachedVolume.
            if volume.attachable:
                if volume.name not in node.in_use:
                    steps.append(VolumeStep(volume=volume, step=STEP_WAIT_IN_USE,
                                            message=csi_rules.volume_message(NOT_IN_USE, spec.name)))
                    continue
                if volume.name not in node.attached:
                    steps.append(VolumeStep(volume=volume, step=STEP_WAIT_ATTACHED,
                                            message=csi_rules.volume_message(NOT_ATTACHED, spec.name)))
                    continue
                mark = node.attached[volume.name]
            else:
                mark = ""  # not attachable: assumed attached
        elif mounted and not volume.requires_remount:
            steps.append(VolumeStep(volume=volume, step=STEP_MOUNTED))
            continue
        steps.append(_mount_step(volume, desired.pod_uid, actual, node, layout=layout, node_name=node_name,
                                 attachments=attachments, driver=_driver(drivers, spec.driver),
                                 capabilities=plugins.get(spec.driver), mark=mark, remount=mounted))
    return tuple(steps)


def _mount_step(volume: pvc.VolumeToMount, pod_uid: str, actual: ActualState, node: NodeVolumes, *,
                layout: paths.Layout, node_name: str, attachments: Mapping[str, pvc.Fetched],
                driver: csi_rules.DriverInfo, capabilities: csi_rules.NodeCapabilities | None, mark: str | None,
                remount: bool) -> VolumeStep:
    """GenerateMountVolumeFunc's (GenerateMapVolumeFunc's for a block volume) checks in their order, then the
    operation."""
    spec = volume.spec
    block = spec.is_block
    if error := pvc.check_node_affinity(spec, node.labels):
        return _failed(volume, MAP_NODE_AFFINITY_FAILED if block else NODE_AFFINITY_FAILED, error, mark_attached=mark)
    if block and spec.plugin == pvc.PLUGIN_HOST_PATH:  # hostPath has no block mapper: logged, no event
        return _failed(volume, NO_BLOCK_MAPPER, None, reason="", mark_attached=mark)
    if not block:
        if error := pvc.mount_option_error(spec):
            return _failed(volume, MOUNT_OPTION_FAILED, error, mark_attached=mark)
        if error := pvc.read_write_once_pod_conflict(spec, actual.mounted_elsewhere(volume.name, pod_uid)):
            return _failed(volume, SETUP_FAILED, error, mark_attached=mark)
    context: dict[str, str] = {}
    if volume.attachable:
        name = csi_rules.attachment_name(spec.volume_handle, spec.driver, node_name)
        if name not in attachments:
            raise ValueError(f"VolumeAttachment {name!r} was not fetched (see attachments_wanted)")
        context, error = csi_rules.wait_for_attach(spec, node_name, attachments[name])
        if error is not None:
            return _failed(volume, MAP_WAIT_FOR_ATTACH_FAILED if block else WAIT_FOR_ATTACH_FAILED, error,
                           reason=FAILED_MAP_VOLUME if block else FAILED_MOUNT, mark_attached=mark)
    attached = actual.attached.get(volume.name)
    stage = volume.device_mountable and not (attached is not None and attached.device_mounted)
    setup_error: str | None = None
    device_mount_path = ""
    if spec.plugin == pvc.PLUGIN_CSI:
        if capabilities is None:
            return _unregistered(volume, stage=stage, mark=mark)
        if spec.lifecycle == pvc.LIFECYCLE_PERSISTENT:
            device_mount_path = csi_rules.staging_path(spec, layout)
        if not block:
            setup_error = _setup_error(spec, driver)
        target = csi_rules.publish_path(spec, layout, pod_uid)
    elif spec.plugin == pvc.PLUGIN_LOCAL:
        target = spec.local_path if block else pvc.host_path(spec, layout, pod_uid)
    else:
        target = spec.host_path
    operation = MountOperation(block=block, stage=stage, device_mount_path=device_mount_path, target_path=target,
                               publish_context=context, remount=remount, setup_error=setup_error)
    return VolumeStep(volume=volume, step=STEP_MOUNT, mark_attached=mark, operation=operation)


# ------------------------------------------------------------------------------------------- the verdict


@dataclasses.dataclass(frozen=True)
class PodWait:
    """WaitForAttachAndMount's answer for the pod's persistent volumes."""

    done: bool
    message: str = ""
    """The error upstream returns (the sync fails with it): "" while the pod still waits within the timeout."""
    event: str = ""
    """The FailedMount event SyncPod records, only for the populator's errors: a timeout is an interruption, which
    upstream records no event for."""
    unmounted: tuple[str, ...] = ()
    unattached: tuple[str, ...] = ()
    not_processed: tuple[str, ...] = ()


def unmounted_volumes(desired: pvc.DesiredVolumes, actual: ActualState) -> tuple[str, ...]:
    """Upstream `getUnmountedVolumes`: the expected pod volumes not in the desired state or not mounted, sorted."""
    by_outer = desired.by_outer_name()
    return tuple(sorted(outer for outer in desired.expected
                        if outer not in by_outer or not actual.is_mounted(desired.pod_uid, by_outer[outer].name)))


def unattached_volumes(desired: pvc.DesiredVolumes, actual: ActualState) -> tuple[str, ...]:
    """Upstream `getUnattachedVolumes`' pod volume names: attachable volumes not yet recorded attached, sorted."""
    return tuple(sorted(outer for v in desired.volumes if v.attachable and v.name not in actual.attached
                        for outer in v.outer_names))


def volumes_not_processed(desired: pvc.DesiredVolumes) -> tuple[str, ...]:
    """Upstream `getVolumesNotInDSW`: the expected pod volumes the desired state does not hold, sorted."""
    by_outer = desired.by_outer_name()
    return tuple(sorted(outer for outer in desired.expected if outer not in by_outer))


def wait_for_attach_and_mount(desired: pvc.DesiredVolumes, actual: ActualState, *, waited: float = 0.0) -> PodWait:
    """Upstream `WaitForAttachAndMount`, one look: done once every expected volume is mounted for the pod. Until
    then, the populator's errors end the wait at once (the error and the ``Unable to attach or mount volumes:``
    FailedMount event); without errors the pod waits, and after `POD_ATTACH_AND_MOUNT_TIMEOUT` seconds of waiting
    (`waited`, from the first look of this wait) the error ends in ``context deadline exceeded``, with no event."""
    unmounted = unmounted_volumes(desired, actual)
    if not unmounted:
        return PodWait(done=True)
    unattached = unattached_volumes(desired, actual)
    not_processed = volumes_not_processed(desired)
    lists = (f"unmounted volumes={gotext.go_string_slice(unmounted)}, "
             f"unattached volumes={gotext.go_string_slice(unattached)}, "
             f"failed to process volumes={gotext.go_string_slice(not_processed)}")
    found = {"unmounted": unmounted, "unattached": unattached, "not_processed": not_processed}
    if desired.errors:
        message = f"{lists}: {'; '.join(desired.errors)}"
        return PodWait(done=False, message=message, event=UNABLE_TO_MOUNT + message, **found)
    if waited >= POD_ATTACH_AND_MOUNT_TIMEOUT:
        return PodWait(done=False, message=f"{lists}: {DEADLINE_EXCEEDED}", **found)
    return PodWait(done=False, **found)


# --------------------------------------------------------------------------------------------- the node


def volumes_in_use(desired: Iterable[pvc.VolumeToMount], actual: ActualState) -> tuple[str, ...]:
    """Upstream `GetVolumesInUse`, the node's ``status.volumesInUse``: the attachable volumes the node's pods want
    and those still attached, sorted and without duplicates (reported once the reconciler's states are synced)."""
    names = {v.name for v in desired if v.attachable}
    names.update(v.name for v in actual.attached.values() if v.attachable)
    return tuple(sorted(names))


def volumes_to_unmount(desired: Iterable[pvc.VolumeToMount], actual: ActualState) -> tuple[MountedVolume, ...]:
    """Upstream `unmountVolumes`: the mounts (pod, volume) the desired state no longer holds."""
    wanted = {(v.pod_uid, v.name) for v in desired}
    return tuple(m for m in actual.mounted if (m.pod_uid, m.name) not in wanted)


def devices_to_unmount(desired: Iterable[pvc.VolumeToMount], actual: ActualState) -> tuple[AttachedVolume, ...]:
    """Upstream `unmountDetachDevices` with the controller attach/detach: the attached volumes no pod has mounted
    and none wants. One with a mounted device is unstaged (UnmountDevice); the others are only forgotten
    (MarkVolumeAsDetached: the controller detaches)."""
    wanted = {v.name for v in desired}
    mounted = {m.name for m in actual.mounted}
    return tuple(a for a in actual.attached.values() if a.name not in wanted and a.name not in mounted)


__all__ = [
    "FAILED_MAP_VOLUME",
    "FAILED_MOUNT",
    "POD_ATTACH_AND_MOUNT_TIMEOUT",
    "STEP_FAILED",
    "STEP_MOUNT",
    "STEP_MOUNTED",
    "STEP_WAIT_ATTACHED",
    "STEP_WAIT_IN_USE",
    "ActualState",
    "AttachedVolume",
    "MountOperation",
    "MountedVolume",
    "NodeVolumes",
    "PodWait",
    "VolumeStep",
    "attached_from_node_status",
    "attachments_wanted",
    "devices_to_unmount",
    "reconcile_pod",
    "unattached_volumes",
    "unmounted_volumes",
    "volumes_in_use",
    "volumes_not_processed",
    "volumes_to_unmount",
    "wait_for_attach_and_mount",
]
