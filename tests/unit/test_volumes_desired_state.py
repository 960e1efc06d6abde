"""kopflet.volumes.desired_state: each persistent volume's next step for a pod (upstream's reconciler and operation
generator, their checks in order and their event texts), WaitForAttachAndMount's verdict and message, the node's
volumesInUse, and the teardown.
"""

from __future__ import annotations

from typing import Any

import pytest

from kopflet.paths import Layout
from kopflet.volumes import desired_state as ds
from kopflet.volumes import pvc
from kopflet.volumes.csi_rules import DriverInfo, NodeCapabilities
from kopflet.volumes.desired_state import (
    ActualState,
    AttachedVolume,
    MountedVolume,
    MountOperation,
    NodeVolumes,
    PodWait,
    VolumeStep,
)
from kopflet.volumes.pvc import DesiredVolumes, VolumeSpec, VolumeToMount

LAYOUT = Layout("/var/lib/kopflet")
UID = "uid-1"
NODE = "node-a"
CSI_NAME = "kubernetes.io/csi/csi.example.com^vol-1"
VA_NAME = "csi-664f93e6befe920d56b73708bbb3eb1888cad5fb3e7203b1b501f466d0bea90f"  # sha256("vol-1" "csi..." "node-a")
STAGING = ("/var/lib/kopflet/plugins/kubernetes.io/csi/csi.example.com/"
           "d2e8363faaac7ae76def3b14091d8eb5755f6b92e9531627aeec833a8731cc49/globalmount")
TARGET = "/var/lib/kopflet/pods/uid-1/volumes/kubernetes.io~csi/pv-1/mount"
REGISTERED = {"csi.example.com": NodeCapabilities(stage_unstage=True)}
ATTACHED_VA = {"metadata": {"name": VA_NAME}, "status": {"attached": True, "attachmentMetadata": {"dev": "/dev/sdb"}}}


def spec(**fields: Any) -> VolumeSpec:
    base: dict[str, Any] = {"outer_name": "data", "name": "pv-1", "plugin": pvc.PLUGIN_CSI, "read_only": False,
                            "pv_name": "pv-1", "driver": "csi.example.com", "volume_handle": "vol-1",
                            "fs_type": "ext4", "access_modes": ("ReadWriteOnce",)}
    base.update(fields)
    return VolumeSpec(**base)


def vtm(volume_spec: VolumeSpec | None = None, *, name: str = CSI_NAME, attachable: bool = True,
        device_mountable: bool = True, outer: tuple[str, ...] = ("data",), remount: bool = False,
        pod_uid: str = UID) -> VolumeToMount:
    return VolumeToMount(name=name, spec=volume_spec or spec(), pod_uid=pod_uid, outer_names=outer,
                         attachable=attachable, device_mountable=device_mountable, requires_remount=remount)


def pod_volumes(*volumes: VolumeToMount, errors: tuple[str, ...] = (), expected: tuple[str, ...] | None = None,
                failed: tuple[str, ...] = ()) -> DesiredVolumes:
    outers = sorted({o for v in volumes for o in v.outer_names} | set(failed))
    return DesiredVolumes(pod_uid=UID, volumes=volumes, errors=errors,
                          expected=tuple(outers) if expected is None else expected, failed=failed)


def step(volume: VolumeToMount, actual: ActualState | None = None, node: NodeVolumes | None = None, *,
         attachments: dict[str, Any] | None = None, drivers: dict[str, DriverInfo] | None = None,
         registered: dict[str, NodeCapabilities] | None = None) -> VolumeStep:
    (result,) = ds.reconcile_pod(pod_volumes(volume), actual or ActualState(), node or NodeVolumes(), layout=LAYOUT,
                                 node_name=NODE, attachments=attachments if attachments is not None else {},
                                 csi_drivers=drivers, registered=REGISTERED if registered is None else registered)
    return result


IN_USE_ATTACHED = NodeVolumes(in_use=frozenset({CSI_NAME}), attached={CSI_NAME: "/dev/sdb"})
ATTACHED = ActualState(attached={CSI_NAME: AttachedVolume(name=CSI_NAME, spec_name="pv-1", attachable=True)})
STAGED = ActualState(attached={CSI_NAME: AttachedVolume(name=CSI_NAME, spec_name="pv-1", attachable=True,
                                                        device_mounted=True, device_mount_path=STAGING)})
MOUNTED = ActualState(attached=STAGED.attached, mounted=(MountedVolume(UID, CSI_NAME, "pv-1", ("data",)),))
ELSEWHERE = ActualState(attached=STAGED.attached, mounted=(MountedVolume("uid-2", CSI_NAME, "pv-1"),))


def mount(target: str = TARGET, *, stage: bool = True, device_mount_path: str = STAGING, block: bool = False,
          context: dict[str, str] | None = None, remount: bool = False,
          setup_error: str | None = None) -> MountOperation:
    return MountOperation(block=block, stage=stage, device_mount_path=device_mount_path, target_path=target,
                          publish_context=context if context is not None else {"dev": "/dev/sdb"}, remount=remount,
                          setup_error=setup_error)


def failed(message: str, reason: str = "FailedMount", mark: str | None = None,
           volume: VolumeToMount | None = None) -> VolumeStep:
    return VolumeStep(volume=volume or vtm(), step="Failed", message=message, event_reason=reason,
                      mark_attached=mark)


LOCAL = spec(plugin=pvc.PLUGIN_LOCAL, driver="", volume_handle="", local_path="/mnt/disks/ssd1",
             node_affinity={"nodeSelectorTerms": [{"matchExpressions": [
                 {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-a"]}]}]})
LOCAL_NAME = "kubernetes.io/local-volume/pv-1"
HOST = spec(plugin=pvc.PLUGIN_HOST_PATH, driver="", volume_handle="", host_path="/srv/data")
HOST_NAME = "kubernetes.io/host-path/uid-1-pv-1"
INLINE = spec(name="scratch", outer_name="scratch", pv_name="", lifecycle="Ephemeral", access_modes=(),
              volume_handle="csi-inline")
INLINE_NAME = "kubernetes.io/csi/uid-1-scratch"
INLINE_TARGET = "/var/lib/kopflet/pods/uid-1/volumes/kubernetes.io~csi/scratch/mount"
HOSTNAME_A = NodeVolumes(labels={"kubernetes.io/hostname": "node-a"})
HOSTNAME_B = NodeVolumes(labels={"kubernetes.io/hostname": "node-b"})
NOT_REGISTERED = "driver name csi.example.com not found in the list of registered CSI drivers"

STEP_CASES: list[tuple[str, VolumeStep, VolumeStep]] = [
    ("attachable, not yet in volumesInUse", step(vtm()),
     VolumeStep(volume=vtm(), step="WaitForInUse", message=(
         'Volume has not been added to the list of VolumesInUse in the node\'s volume status for volume "pv-1" '))),
    ("in use, not yet in volumesAttached", step(vtm(), node=NodeVolumes(in_use=frozenset({CSI_NAME}))),
     VolumeStep(volume=vtm(), step="WaitForControllerAttach",
                message='Volume not attached according to node status for volume "pv-1" ')),
    ("attached by the controller: recorded, then mounted",
     step(vtm(), node=IN_USE_ATTACHED, attachments={VA_NAME: ATTACHED_VA}),
     VolumeStep(volume=vtm(), step="Mount", mark_attached="/dev/sdb", operation=mount())),
    ("attached and staged", step(vtm(), STAGED, IN_USE_ATTACHED, attachments={VA_NAME: ATTACHED_VA}),
     VolumeStep(volume=vtm(), step="Mount", operation=mount(stage=False))),
    ("mounted", step(vtm(), MOUNTED, IN_USE_ATTACHED), VolumeStep(volume=vtm(), step="Mounted")),
    ("mounted, the driver requires republish", step(vtm(remount=True), MOUNTED, IN_USE_ATTACHED,
                                                     attachments={VA_NAME: ATTACHED_VA}),
     VolumeStep(volume=vtm(remount=True), step="Mount", operation=mount(stage=False, remount=True))),
    ("not attachable: assumed attached", step(vtm(attachable=False)),
     VolumeStep(volume=vtm(attachable=False), step="Mount", mark_attached="", operation=mount(context={}))),
    ("VolumeAttachment not attached yet", step(vtm(), ATTACHED, IN_USE_ATTACHED,
                                                attachments={VA_NAME: {"status": {"attached": False}}}),
     failed(f'MountVolume.WaitForAttach failed for volume "pv-1" : volume vol-1 is not attached for volume '
            f"attachment {VA_NAME}")),
    ("VolumeAttachment missing, recorded attached first",
     step(vtm(), node=IN_USE_ATTACHED, attachments={VA_NAME: None}),
     failed(f'MountVolume.WaitForAttach failed for volume "pv-1" : volume vol-1 has GET error for volume attachment '
            f'{VA_NAME}: volumeattachments.storage.k8s.io "{VA_NAME}" not found', mark="/dev/sdb")),
    ("block WaitForAttach", step(vtm(spec(volume_mode="Block")), ATTACHED, IN_USE_ATTACHED,
                                 attachments={VA_NAME: {"status": {"attachError": {"message": "no such disk"}}}}),
     failed('MapVolume.WaitForAttach failed for volume "pv-1" : no such disk', "FailedMapVolume",
            volume=vtm(spec(volume_mode="Block")))),
    ("driver not registered, to stage", step(vtm(attachable=False), registered={}),
     failed(f'MountVolume.MountDevice failed for volume "pv-1" : kubernetes.io/csi: attacher.MountDevice failed to '
            f"create newCsiDriverClient: {NOT_REGISTERED}", mark="", volume=vtm(attachable=False))),
    ("driver not registered, staged", step(vtm(attachable=False), STAGED, registered={}),
     failed(f'MountVolume.SetUp failed for volume "pv-1" : kubernetes.io/csi: mounter.SetUpAt failed to get CSI '
            f"client: {NOT_REGISTERED}", volume=vtm(attachable=False))),
    ("driver not registered, block", step(vtm(spec(volume_mode="Block"), attachable=False), registered={}),
     failed(f'MapVolume.SetUpDevice failed for volume "pv-1" : kubernetes.io/csi: blockMapper.SetUpDevice failed to '
            f"get CSI client: {NOT_REGISTERED}", "FailedMapVolume", mark="",
            volume=vtm(spec(volume_mode="Block"), attachable=False))),
    ("read-write-once-pod mounted by another pod",
     step(vtm(spec(access_modes=("ReadWriteOncePod",))), ELSEWHERE, IN_USE_ATTACHED),
     failed('MountVolume.SetUp failed for volume "pv-1" : volume uses the ReadWriteOncePod access mode and is already '
            "in use by another pod", volume=vtm(spec(access_modes=("ReadWriteOncePod",))))),
    ("local PV on this node", step(vtm(LOCAL, name=LOCAL_NAME, attachable=False), node=HOSTNAME_A),
     VolumeStep(volume=vtm(LOCAL, name=LOCAL_NAME, attachable=False), step="Mount", mark_attached="", operation=mount(
         "/var/lib/kopflet/pods/uid-1/volumes/kubernetes.io~local-volume/pv-1", device_mount_path="", context={}))),
    ("local PV of another node", step(vtm(LOCAL, name=LOCAL_NAME, attachable=False), node=HOSTNAME_B),
     failed('MountVolume.NodeAffinity check failed for volume "pv-1" : no matching NodeSelectorTerms', mark="",
            volume=vtm(LOCAL, name=LOCAL_NAME, attachable=False))),
    ("block local PV of another node",
     step(vtm(spec(plugin=pvc.PLUGIN_LOCAL, volume_mode="Block", node_affinity=LOCAL.node_affinity),
              name=LOCAL_NAME, attachable=False), node=HOSTNAME_B),
     failed('MapVolume.NodeAffinity check failed for volume "pv-1" : no matching NodeSelectorTerms', mark="",
            volume=vtm(spec(plugin=pvc.PLUGIN_LOCAL, volume_mode="Block", node_affinity=LOCAL.node_affinity),
                       name=LOCAL_NAME, attachable=False))),
    ("block local PV", step(vtm(spec(plugin=pvc.PLUGIN_LOCAL, volume_mode="Block", local_path="/dev/sdc"),
                                name=LOCAL_NAME, attachable=False)),
     VolumeStep(volume=vtm(spec(plugin=pvc.PLUGIN_LOCAL, volume_mode="Block", local_path="/dev/sdc"),
                           name=LOCAL_NAME, attachable=False), step="Mount", mark_attached="",
                operation=mount("/dev/sdc", device_mount_path="", context={}, block=True))),
    ("hostPath PV", step(vtm(HOST, name=HOST_NAME, attachable=False, device_mountable=False)),
     VolumeStep(volume=vtm(HOST, name=HOST_NAME, attachable=False, device_mountable=False), step="Mount",
                mark_attached="", operation=mount("/srv/data", stage=False, device_mount_path="", context={}))),
    ("hostPath PV with mount options",
     step(vtm(spec(plugin=pvc.PLUGIN_HOST_PATH, host_path="/srv", mount_options=("ro",)), name=HOST_NAME,
              attachable=False, device_mountable=False)),
     failed('MountVolume.MountOptionSupport check failed for volume "pv-1" : mount options are not supported for '
            "this volume type", mark="", volume=vtm(spec(plugin=pvc.PLUGIN_HOST_PATH, host_path="/srv",
                                                         mount_options=("ro",)), name=HOST_NAME, attachable=False,
                                                    device_mountable=False))),
    ("block hostPath PV: no mapper, no event",
     step(vtm(spec(plugin=pvc.PLUGIN_HOST_PATH, volume_mode="Block"), name=HOST_NAME, attachable=False,
              device_mountable=False)),
     failed('MapVolume.FindMapperPluginBySpec failed to find BlockVolumeMapper plugin. Volume plugin is nil. '
            'for volume "pv-1" ', "", mark="",
            volume=vtm(spec(plugin=pvc.PLUGIN_HOST_PATH, volume_mode="Block"), name=HOST_NAME, attachable=False,
                       device_mountable=False))),
    ("inline csi volume without a CSIDriver", step(vtm(INLINE, name=INLINE_NAME, attachable=False,
                                                       device_mountable=False, outer=("scratch",))),
     VolumeStep(volume=vtm(INLINE, name=INLINE_NAME, attachable=False, device_mountable=False, outer=("scratch",)),
                step="Mount", mark_attached="", operation=mount(
                    INLINE_TARGET, stage=False, device_mount_path="", context={},
                    setup_error='kubernetes.io/csi: mounter.SetupAt failed to check volume lifecycle mode: volume mode '
                                '"Ephemeral" not supported by driver csi.example.com (no CSIDriver object)'))),
    ("inline csi volume of an ephemeral driver",
     step(vtm(INLINE, name=INLINE_NAME, attachable=False, device_mountable=False, outer=("scratch",)),
          drivers={"csi.example.com": DriverInfo(name="csi.example.com", exists=True, lifecycle_modes=("Ephemeral",))}),
     VolumeStep(volume=vtm(INLINE, name=INLINE_NAME, attachable=False, device_mountable=False, outer=("scratch",)),
                step="Mount", mark_attached="",
                operation=mount(INLINE_TARGET, stage=False, device_mount_path="", context={}))),
    ("CSIDriver without an fsGroupPolicy", step(vtm(attachable=False), STAGED, drivers={
        "csi.example.com": DriverInfo(name="csi.example.com", exists=True, fs_group_policy="")}),
     VolumeStep(volume=vtm(attachable=False), step="Mount", operation=mount(
         stage=False, context={}, setup_error="kubernetes.io/csi: mounter.SetupAt failed to check fsGroup policy: "
                                              "kubernetes.io/csi: expected valid fsGroupPolicy, received nil value or "
                                              "empty string"))),
]


@pytest.mark.parametrize(("got", "expected"), [c[1:] for c in STEP_CASES], ids=[c[0] for c in STEP_CASES])
def test_next_step(got: VolumeStep, expected: VolumeStep) -> None:
    assert got == expected


def test_an_unfetched_volume_attachment_is_a_caller_bug() -> None:
    with pytest.raises(ValueError, match="was not fetched"):
        step(vtm(), ATTACHED, IN_USE_ATTACHED, attachments={})


def test_attachments_wanted() -> None:
    other = vtm(spec(volume_handle="vol-2", outer_name="logs"), name="kubernetes.io/csi/csi.example.com^vol-2",
                outer=("logs",))
    desired = pod_volumes(vtm(), other, vtm(LOCAL, name=LOCAL_NAME, attachable=False, outer=("local",)))
    assert ds.attachments_wanted(desired, ActualState(), NODE) == (
        VA_NAME, "csi-70bb88c7d93cd25caa7c6533045fce62cb9e8fd26d777005a1e7af45c5538338")
    mounted = ActualState(mounted=(MountedVolume(UID, CSI_NAME),))
    assert ds.attachments_wanted(desired, mounted, NODE) == (
        "csi-70bb88c7d93cd25caa7c6533045fce62cb9e8fd26d777005a1e7af45c5538338",)


# ------------------------------------------------------------------------------------------- the verdict

A = vtm(name="kubernetes.io/csi/d^a", outer=("a",))
B = vtm(name="kubernetes.io/csi/d^b", outer=("b", "b2"))
LOCAL_C = vtm(LOCAL, name=LOCAL_NAME, attachable=False, outer=("c",))


def mounted(*volumes: VolumeToMount, attached: tuple[VolumeToMount, ...] = ()) -> ActualState:
    return ActualState(attached={v.name: AttachedVolume(name=v.name, attachable=v.attachable)
                                 for v in (*volumes, *attached)},
                       mounted=tuple(MountedVolume(UID, v.name) for v in volumes))


WAIT_CASES: list[tuple[str, DesiredVolumes, ActualState, float, PodWait]] = [
    ("all mounted", pod_volumes(A, B, LOCAL_C), mounted(A, B, LOCAL_C), 0.0, PodWait(done=True)),
    ("nothing expected", pod_volumes(), ActualState(), 500.0, PodWait(done=True)),
    ("waiting", pod_volumes(A, B, LOCAL_C), mounted(LOCAL_C, attached=(A,)), 10.0,
     PodWait(done=False, unmounted=("a", "b", "b2"), unattached=("b", "b2"))),
    ("timed out", pod_volumes(A, B, LOCAL_C), mounted(LOCAL_C, attached=(A,)), 123.0, PodWait(
        done=False, message="unmounted volumes=[a b b2], unattached volumes=[b b2], failed to process volumes=[]: "
                            "context deadline exceeded", unmounted=("a", "b", "b2"), unattached=("b", "b2"))),
    ("the populator's errors", pod_volumes(A, errors=("error processing PVC shop/x: PVC is not bound",
                                                      "error processing PVC shop/y: PVC is being deleted"),
                                           failed=("y", "x")), mounted(A), 0.0, PodWait(
        done=False, message="unmounted volumes=[x y], unattached volumes=[], failed to process volumes=[x y]: "
                            "error processing PVC shop/x: PVC is not bound; error processing PVC shop/y: PVC is being "
                            "deleted",
        event="Unable to attach or mount volumes: unmounted volumes=[x y], unattached volumes=[], failed to process "
              "volumes=[x y]: error processing PVC shop/x: PVC is not bound; error processing PVC shop/y: PVC is being "
              "deleted", unmounted=("x", "y"), not_processed=("x", "y"))),
    ("errors, yet every volume mounted", pod_volumes(A, errors=("stale",)), mounted(A), 0.0, PodWait(done=True)),
]


@pytest.mark.parametrize(("desired", "actual", "waited", "expected"), [c[1:] for c in WAIT_CASES],
                         ids=[c[0] for c in WAIT_CASES])
def test_wait_for_attach_and_mount(desired: DesiredVolumes, actual: ActualState, waited: float,
                                   expected: PodWait) -> None:
    assert ds.wait_for_attach_and_mount(desired, actual, waited=waited) == expected


def test_another_pods_mount_does_not_count() -> None:
    other = ActualState(attached=mounted(A).attached, mounted=(MountedVolume("uid-2", A.name),))
    assert ds.unmounted_volumes(pod_volumes(A), other) == ("a",)


# ------------------------------------------------------------------------------------------- the node


def test_volumes_in_use_are_the_attachable_ones_sorted_once() -> None:
    desired = [B, A, LOCAL_C, vtm(name="kubernetes.io/csi/d^a", outer=("again",), pod_uid="uid-2")]
    actual = ActualState(attached={
        "kubernetes.io/csi/d^z": AttachedVolume(name="kubernetes.io/csi/d^z", attachable=True),
        LOCAL_NAME: AttachedVolume(name=LOCAL_NAME, attachable=False)})
    assert ds.volumes_in_use(desired, actual) == (
        "kubernetes.io/csi/d^a", "kubernetes.io/csi/d^b", "kubernetes.io/csi/d^z")


def test_node_volumes_from_the_node() -> None:
    node = {"metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}},
            "status": {"volumesInUse": [CSI_NAME], "volumesAttached": [
                {"name": CSI_NAME, "devicePath": "/dev/sdb"}, {"name": "kubernetes.io/csi/d^b"}, {"devicePath": "x"}]}}
    assert NodeVolumes.from_node(node) == NodeVolumes(
        labels={"kubernetes.io/hostname": NODE}, in_use=frozenset({CSI_NAME}),
        attached={CSI_NAME: "/dev/sdb", "kubernetes.io/csi/d^b": ""})
    assert NodeVolumes.from_node({}) == NodeVolumes()


def test_teardown() -> None:
    gone = MountedVolume("uid-2", B.name)
    actual = ActualState(
        attached={A.name: AttachedVolume(name=A.name, attachable=True, device_mounted=True),
                  B.name: AttachedVolume(name=B.name, attachable=True, device_mounted=True),
                  LOCAL_NAME: AttachedVolume(name=LOCAL_NAME),
                  "kubernetes.io/csi/d^z": AttachedVolume(name="kubernetes.io/csi/d^z", device_mounted=True)},
        mounted=(MountedVolume(UID, A.name), gone))
    desired = [A]
    assert ds.volumes_to_unmount(desired, actual) == (gone,)
    # B is still mounted for uid-2 (unmounted first, unstaged on a later round); A is wanted.
    assert ds.devices_to_unmount(desired, actual) == (actual.attached[LOCAL_NAME],
                                                      actual.attached["kubernetes.io/csi/d^z"])
