"""kopflet.volumes.pvc: a pod's persistentVolumeClaim, generic ephemeral and inline csi volumes resolved as upstream's
desired_state_of_world_populator does, with upstream's error texts, unique names and mount-time checks.

One base pod (``shop/web``, uid ``uid-1``) whose container mounts the volume ``data``; each case states the PVC and
PV the apiserver answered and the outcome (the spec, or the exact error).
"""

from __future__ import annotations

import stat
from typing import Any

import pytest

from kopflet.api.spec import Pod, pod_from_body
from kopflet.paths import Layout
from kopflet.volumes import pvc
from kopflet.volumes.pvc import ClaimRef, SecretRef, SpecError, VolumeSpec

LAYOUT = Layout("/var/lib/kopflet")
UID = "uid-1"
CLAIM_UID = "claim-uid-1"


def make_pod(volumes: list[dict[str, Any]], *, mounts: tuple[str, ...] = ("data",), devices: tuple[str, ...] = (),
             init_mounts: tuple[str, ...] = (), security_context: dict[str, Any] | None = None) -> Pod:
    container: dict[str, Any] = {"name": "app", "image": "nginx:1",
                                 "volumeMounts": [{"name": n, "mountPath": f"/{n}"} for n in mounts]}
    if devices:
        container["volumeDevices"] = [{"name": n, "devicePath": f"/dev/{n}"} for n in devices]
    body: dict[str, Any] = {"containers": [container], "volumes": volumes,
                            "securityContext": security_context or {}}
    if init_mounts:
        body["initContainers"] = [{"name": "init", "image": "busybox:1",
                                   "volumeMounts": [{"name": n, "mountPath": f"/{n}"} for n in init_mounts]}]
    return pod_from_body({"metadata": {"name": "web", "namespace": "shop", "uid": UID}, "spec": body})


def claim_volume(name: str = "data", claim: str = "data-claim", read_only: bool | None = None) -> dict[str, Any]:
    source: dict[str, Any] = {"claimName": claim}
    if read_only is not None:
        source["readOnly"] = read_only
    return {"name": name, "persistentVolumeClaim": source}


def make_claim(name: str = "data-claim", *, phase: str = "Bound", volume_name: str = "pv-1", uid: str = CLAIM_UID,
               deleting: bool = False, finalizers: tuple[str, ...] = (), owner: str | None = None,
               controller: bool = True, namespace: str = "shop", capacity: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid, "finalizers": list(finalizers)}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": owner,
                                    "controller": controller}]
    claim: dict[str, Any] = {"metadata": meta, "spec": {"volumeName": volume_name}, "status": {"phase": phase}}
    if capacity:
        claim["status"]["capacity"] = {"storage": capacity}
    return claim


def make_pv(name: str = "pv-1", *, source: dict[str, Any] | None = None, claim_uid: str | None = CLAIM_UID,
            mode: str | None = "Filesystem", access_modes: tuple[str, ...] = ("ReadWriteOnce",),
            mount_options: tuple[str, ...] = (), annotations: dict[str, str] | None = None,
            affinity: dict[str, Any] | None = None, capacity: str = "1Gi") -> dict[str, Any]:
    pv_spec: dict[str, Any] = dict(source if source is not None else {"csi": {"driver": "csi.example.com",
                                                                              "volumeHandle": "vol-1"}})
    pv_spec.update({"accessModes": list(access_modes), "capacity": {"storage": capacity}})
    if mode is not None:
        pv_spec["volumeMode"] = mode
    if mount_options:
        pv_spec["mountOptions"] = list(mount_options)
    if claim_uid is not None:
        pv_spec["claimRef"] = {"namespace": "shop", "name": "data-claim", "uid": claim_uid}
    if affinity is not None:
        pv_spec["nodeAffinity"] = {"required": affinity}
    return {"metadata": {"name": name, "annotations": annotations or {}}, "spec": pv_spec}


def resolve_one(pod: Pod, claims: dict[str, Any], pvs: dict[str, Any]) -> VolumeSpec:
    mounts, devices = pvc.pod_volume_names(pod)
    return pvc.resolve_volume(pod, pod.spec.volumes[0], claims=claims, persistent_volumes=pvs, mounts=mounts,
                              devices=devices)


# ------------------------------------------------------------------------------------------ the errors

PREFIX = "error processing PVC shop/data-claim: "

ERROR_CASES: list[tuple[str, Pod, dict[str, Any], dict[str, Any], str]] = [
    ("PVC not found", make_pod([claim_volume()]), {"data-claim": None}, {},
     PREFIX + 'failed to fetch PVC from API server: persistentvolumeclaims "data-claim" not found'),
    ("PVC fetch failed", make_pod([claim_volume()]),
     {"data-claim": 'persistentvolumeclaims "data-claim" is forbidden: no relationship found'}, {},
     PREFIX + 'failed to fetch PVC from API server: persistentvolumeclaims "data-claim" is forbidden: '
              "no relationship found"),
    ("PVC being deleted without pvc-protection", make_pod([claim_volume()]),
     {"data-claim": make_claim(deleting=True)}, {}, PREFIX + "PVC is being deleted"),
    ("PVC pending", make_pod([claim_volume()]), {"data-claim": make_claim(phase="Pending", volume_name="")}, {},
     PREFIX + "PVC is not bound"),
    ("PVC lost", make_pod([claim_volume()]), {"data-claim": make_claim(phase="Lost")}, {},
     PREFIX + "PVC is not bound"),
    ("PVC bound without a volume name", make_pod([claim_volume()]), {"data-claim": make_claim(volume_name="")}, {},
     PREFIX + "PVC has empty pvc.Spec.VolumeName"),
    ("PV not found", make_pod([claim_volume()]), {"data-claim": make_claim()}, {"pv-1": None},
     PREFIX + 'failed to fetch PV pv-1 from API server: persistentvolumes "pv-1" not found'),
    ("PV without a claimRef", make_pod([claim_volume()]), {"data-claim": make_claim()},
     {"pv-1": make_pv(claim_uid=None)},
     PREFIX + "found PV object pv-1 but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"),
    ("PV bound to another claim", make_pod([claim_volume()]), {"data-claim": make_claim()},
     {"pv-1": make_pv(claim_uid="other-uid")},
     PREFIX + "found PV object pv-1 but its pv.Spec.ClaimRef.UID other-uid does not point to claim.UID claim-uid-1"),
    ("PV without a volumeMode", make_pod([claim_volume()]), {"data-claim": make_claim()}, {"pv-1": make_pv(mode=None)},
     "cannot get volumeMode for volume: pv-1"),
    ("block PV mounted", make_pod([claim_volume()]), {"data-claim": make_claim()}, {"pv-1": make_pv(mode="Block")},
     "volume data has volumeMode Block, but is specified in volumeMounts"),
    ("filesystem PV as a device", make_pod([claim_volume()], mounts=(), devices=("data",)),
     {"data-claim": make_claim()}, {"pv-1": make_pv()},
     "volume data has volumeMode Filesystem, but is specified in volumeDevices"),
    ("ephemeral PVC not owned by the pod", make_pod([{"name": "data", "ephemeral": {"volumeClaimTemplate": {}}}]),
     {"web-data": make_claim("web-data", owner="someone-else")}, {},
     "PVC shop/web-data was not created for pod shop/web (pod is not owner)"),
    ("ephemeral PVC owned but not controlled", make_pod([{"name": "data", "ephemeral": {"volumeClaimTemplate": {}}}]),
     {"web-data": make_claim("web-data", owner=UID, controller=False)}, {},
     "PVC shop/web-data was not created for pod shop/web (pod is not owner)"),
    ("ephemeral PVC pending (checked before the owner)",
     make_pod([{"name": "data", "ephemeral": {"volumeClaimTemplate": {}}}]),
     {"web-data": make_claim("web-data", phase="Pending", owner="someone-else")}, {},
     "error processing PVC shop/web-data: PVC is not bound"),
    ("nfs PV", make_pod([claim_volume()]), {"data-claim": make_claim()},
     {"pv-1": make_pv(source={"nfs": {"server": "nfs.example", "path": "/"}})},
     'failed to get Plugin from volumeSpec for volume "pv-1" err=no volume plugin matched: kopflet has no nfs plugin '
     "(it mounts local and hostPath PersistentVolumes)"),
    ("in-tree cloud disk PV", make_pod([claim_volume()]), {"data-claim": make_claim()},
     {"pv-1": make_pv(source={"gcePersistentDisk": {"pdName": "disk-1"}})},
     'failed to get Plugin from volumeSpec for volume "pv-1" err=no volume plugin matched: kopflet has no '
     "gcePersistentDisk plugin and does not translate in-tree volumes to CSI (upstream's CSI migration would use the "
     "pd.csi.storage.gke.io driver)"),
    ("PV without a source", make_pod([claim_volume()]), {"data-claim": make_claim()}, {"pv-1": make_pv(source={})},
     'failed to get Plugin from volumeSpec for volume "pv-1" err=no volume plugin matched: the PersistentVolume has '
     "no volume source"),
    ("empty claimName", make_pod([claim_volume(claim="")]), {}, {},
     "error processing PVC shop/: failed to fetch PVC from API server: resource name may not be empty"),
]


@pytest.mark.parametrize(("pod", "claims", "pvs", "message"), [c[1:] for c in ERROR_CASES],
                         ids=[c[0] for c in ERROR_CASES])
def test_resolution_error(pod: Pod, claims: dict[str, Any], pvs: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError) as caught:
        resolve_one(pod, claims, pvs)
    assert str(caught.value) == message
    assert caught.value.volume == "data"


def test_a_pvc_being_deleted_under_pvc_protection_is_still_used() -> None:
    claims = {"data-claim": make_claim(deleting=True, finalizers=("kubernetes.io/pvc-protection",))}
    assert resolve_one(make_pod([claim_volume()]), claims, {"pv-1": make_pv()}).pv_name == "pv-1"


def test_unfetched_objects_are_a_caller_bug() -> None:
    pod = make_pod([claim_volume()])
    with pytest.raises(ValueError, match="PersistentVolumeClaim 'data-claim' was not fetched"):
        resolve_one(pod, {}, {})
    with pytest.raises(ValueError, match="PersistentVolume 'pv-1' was not fetched"):
        resolve_one(pod, {"data-claim": make_claim()}, {})


# ------------------------------------------------------------------------------------------- the specs

CLAIM = ClaimRef(namespace="shop", name="data-claim", uid=CLAIM_UID)

SPEC_CASES: list[tuple[str, Pod, dict[str, Any], dict[str, Any], VolumeSpec]] = [
    ("csi PV", make_pod([claim_volume()]), {"data-claim": make_claim(capacity="1Gi")},
     {"pv-1": make_pv(source={"csi": {
         "driver": "csi.example.com", "volumeHandle": "vol-1", "fsType": "ext4", "readOnly": True,
         "volumeAttributes": {"tier": "gold"},
         "nodeStageSecretRef": {"name": "stage", "namespace": "kube-system"},
         "nodePublishSecretRef": {"name": "publish", "namespace": "shop"},
         "nodeExpandSecretRef": {"name": "expand", "namespace": "kube-system"}}},
         mount_options=("noatime", "debug"), annotations={"pv.beta.kubernetes.io/gid": "1234"})},
     VolumeSpec(outer_name="data", name="pv-1", plugin="kubernetes.io/csi", read_only=False, pv_name="pv-1",
                claim=CLAIM, driver="csi.example.com", volume_handle="vol-1", fs_type="ext4",
                mount_options=("noatime", "debug"), volume_attributes={"tier": "gold"},
                node_stage_secret=SecretRef("kube-system", "stage"), node_publish_secret=SecretRef("shop", "publish"),
                node_expand_secret=SecretRef("kube-system", "expand"), access_modes=("ReadWriteOnce",),
                capacity="1Gi", claim_capacity="1Gi", volume_gid="1234")),
    ("read-only claim", make_pod([claim_volume(read_only=True)]), {"data-claim": make_claim()}, {"pv-1": make_pv()},
     VolumeSpec(outer_name="data", name="pv-1", plugin="kubernetes.io/csi", read_only=True, pv_name="pv-1",
                claim=CLAIM, driver="csi.example.com", volume_handle="vol-1", access_modes=("ReadWriteOnce",),
                capacity="1Gi")),
    ("local PV with node affinity", make_pod([claim_volume()]), {"data-claim": make_claim()},
     {"pv-1": make_pv(source={"local": {"path": "/mnt/disks/ssd1", "fsType": "xfs"}},
                      affinity={"nodeSelectorTerms": [{"matchExpressions": [
                          {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-a"]}]}]})},
     VolumeSpec(outer_name="data", name="pv-1", plugin="kubernetes.io/local-volume", read_only=False, pv_name="pv-1",
                claim=CLAIM, access_modes=("ReadWriteOnce",), capacity="1Gi", local_path="/mnt/disks/ssd1",
                local_fs_type="xfs", node_affinity={"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-a"]}]}]})),
    ("hostPath PV", make_pod([claim_volume()]), {"data-claim": make_claim()},
     {"pv-1": make_pv(source={"hostPath": {"path": "/srv/data", "type": "DirectoryOrCreate"}})},
     VolumeSpec(outer_name="data", name="pv-1", plugin="kubernetes.io/host-path", read_only=False, pv_name="pv-1",
                claim=CLAIM, access_modes=("ReadWriteOnce",), capacity="1Gi", host_path="/srv/data",
                host_path_type="DirectoryOrCreate")),
    ("block PV as a device", make_pod([claim_volume()], mounts=(), devices=("data",)), {"data-claim": make_claim()},
     {"pv-1": make_pv(mode="Block")},
     VolumeSpec(outer_name="data", name="pv-1", plugin="kubernetes.io/csi", read_only=False, volume_mode="Block",
                pv_name="pv-1", claim=CLAIM, driver="csi.example.com", volume_handle="vol-1",
                access_modes=("ReadWriteOnce",), capacity="1Gi")),
    ("generic ephemeral volume", make_pod([{"name": "data", "ephemeral": {"volumeClaimTemplate": {}}}]),
     {"web-data": make_claim("web-data", owner=UID)}, {"pv-1": make_pv()},
     VolumeSpec(outer_name="data", name="pv-1", plugin="kubernetes.io/csi", read_only=False, pv_name="pv-1",
                claim=ClaimRef("shop", "web-data", CLAIM_UID), generic_ephemeral=True, driver="csi.example.com",
                volume_handle="vol-1", access_modes=("ReadWriteOnce",), capacity="1Gi")),
    ("inline csi volume", make_pod([{"name": "data", "csi": {
        "driver": "inline.example.com", "readOnly": True, "fsType": "ext4", "volumeAttributes": {"size": "1Gi"},
        "nodePublishSecretRef": {"name": "creds"}}}]), {}, {},
     VolumeSpec(outer_name="data", name="data", plugin="kubernetes.io/csi", read_only=True, lifecycle="Ephemeral",
                driver="inline.example.com",
                volume_handle="csi-" + "d6e418cffb6079f9b02d83af7dffbf3511ed5a26b3f106f1f3ca764ed6505c9c",
                fs_type="ext4", volume_attributes={"size": "1Gi"}, node_publish_secret=SecretRef("shop", "creds"))),
]


@pytest.mark.parametrize(("pod", "claims", "pvs", "expected"), [c[1:] for c in SPEC_CASES],
                         ids=[c[0] for c in SPEC_CASES])
def test_resolved_spec(pod: Pod, claims: dict[str, Any], pvs: dict[str, Any], expected: VolumeSpec) -> None:
    assert resolve_one(pod, claims, pvs) == expected


def test_inline_volume_handle_is_upstreams_make_volume_handle() -> None:
    # printf '%s' "uid-1data" | sha256sum
    assert pvc.make_volume_handle("uid-1", "data") == (
        "csi-d6e418cffb6079f9b02d83af7dffbf3511ed5a26b3f106f1f3ca764ed6505c9c")
    assert pvc.make_volume_handle("uid-1", "scratch") == (
        "csi-a919eb5a57ed1bf8c61a802fc713b36e9bfa4fbf009dfb5f4206d253a3a3dc32")


# ------------------------------------------------------------------------------------ what to fetch


def test_what_to_fetch_follows_the_used_volumes_in_spec_order() -> None:
    pod = make_pod([
        claim_volume("b", "claim-b"), claim_volume("unused", "claim-unused"), claim_volume("a", "claim-a"),
        claim_volume("a2", "claim-a"), {"name": "eph", "ephemeral": {"volumeClaimTemplate": {}}},
        {"name": "inline", "csi": {"driver": "inline.example.com"}}, {"name": "cm", "configMap": {"name": "x"}},
    ], mounts=("b", "a", "a2", "cm", "inline"), init_mounts=("eph",))
    assert pvc.claims_wanted(pod) == ("claim-b", "claim-a", "web-eph")
    claims = {"claim-b": make_claim("claim-b", volume_name="pv-b"), "claim-a": make_claim("claim-a", volume_name=""),
              "web-eph": make_claim("web-eph", volume_name="pv-e", owner=UID)}
    assert pvc.volumes_wanted(pod, claims) == ("pv-b", "pv-e")
    pvs = {"pv-b": make_pv("pv-b", source={"csi": {"driver": "b.example.com", "volumeHandle": "h"}}),
           "pv-e": make_pv("pv-e", source={"local": {"path": "/mnt"}})}
    assert pvc.drivers_wanted(pod, claims, pvs) == ("b.example.com", "inline.example.com")


def test_pod_volume_names_cover_init_regular_and_ephemeral_containers() -> None:
    pod = pod_from_body({"metadata": {"name": "web", "namespace": "shop", "uid": UID}, "spec": {
        "initContainers": [{"name": "i", "image": "b", "volumeMounts": [{"name": "init", "mountPath": "/i"}]}],
        "containers": [{"name": "c", "image": "b", "volumeDevices": [{"name": "dev", "devicePath": "/dev/x"}]}],
        "ephemeralContainers": [{"name": "e", "image": "b", "volumeMounts": [{"name": "debug", "mountPath": "/d"}]}],
    }})
    assert pvc.pod_volume_names(pod) == (frozenset({"init", "debug"}), frozenset({"dev"}))


@pytest.mark.parametrize(("volume", "kind", "claim"), [
    (claim_volume(), "persistentVolumeClaim", "data-claim"),
    ({"name": "data", "ephemeral": {"volumeClaimTemplate": {}}}, "ephemeral", "web-data"),
    ({"name": "data", "csi": {"driver": "d"}}, "csi", None),
    ({"name": "data", "emptyDir": {}}, "emptyDir", None),
    ({"name": "data"}, "", None),
])
def test_volume_kind_and_claim(volume: dict[str, Any], kind: str, claim: str | None) -> None:
    pod = make_pod([volume])
    assert pvc.volume_kind(volume) == kind
    assert pvc.claim_name(pod, volume) == claim
    assert pvc.is_persistent(volume) is (kind in ("persistentVolumeClaim", "ephemeral", "csi"))


# ----------------------------------------------------------------------------------- the pod's volumes

CSI_PV = make_pv()
NO_DRIVER = {"csi.example.com": None}


def desired(pod: Pod, claims: dict[str, Any], pvs: dict[str, Any],
            drivers: dict[str, Any] | None = None) -> pvc.DesiredVolumes:
    return pvc.resolve(pod, claims=claims, persistent_volumes=pvs,
                       csi_drivers=drivers if drivers is not None else NO_DRIVER)


UNIQUE_CASES: list[tuple[str, dict[str, Any], Any, str, bool, bool]] = [
    ("csi PV, no CSIDriver: attach", CSI_PV, None, "kubernetes.io/csi/csi.example.com^vol-1", True, True),
    ("csi PV, attachRequired true", CSI_PV, {"spec": {"attachRequired": True}},
     "kubernetes.io/csi/csi.example.com^vol-1", True, True),
    ("csi PV, attachRequired false", CSI_PV, {"spec": {"attachRequired": False}},
     "kubernetes.io/csi/csi.example.com^vol-1", False, True),
    ("csi PV, CSIDriver unreadable", CSI_PV, "csidrivers.storage.k8s.io is forbidden",
     "kubernetes.io/csi/csi.example.com^vol-1", False, True),
    ("local PV", make_pv(source={"local": {"path": "/mnt/disks/ssd1"}}), None,
     "kubernetes.io/local-volume/pv-1", False, True),
    ("hostPath PV: one per pod", make_pv(source={"hostPath": {"path": "/srv/data"}}), None,
     "kubernetes.io/host-path/uid-1-pv-1", False, False),
]


@pytest.mark.parametrize(("pv", "driver", "name", "attachable", "device_mountable"),
                         [c[1:] for c in UNIQUE_CASES], ids=[c[0] for c in UNIQUE_CASES])
def test_unique_volume_name_and_attachability(pv: dict[str, Any], driver: Any, name: str, attachable: bool,
                                              device_mountable: bool) -> None:
    result = desired(make_pod([claim_volume()]), {"data-claim": make_claim()}, {"pv-1": pv},
                     {"csi.example.com": driver})
    assert result.errors == ()
    (volume,) = result.volumes
    assert (volume.name, volume.attachable, volume.device_mountable) == (name, attachable, device_mountable)
    assert volume.outer_names == ("data",) and volume.pod_uid == UID


def test_inline_csi_volume_is_one_per_pod_and_never_attached() -> None:
    pod = make_pod([{"name": "data", "csi": {"driver": "inline.example.com"}}])
    (volume,) = desired(pod, {}, {}, {"inline.example.com": {"spec": {"attachRequired": True}}}).volumes
    assert volume.name == "kubernetes.io/csi/uid-1-data"
    assert (volume.attachable, volume.device_mountable) == (False, False)


def test_a_volume_without_a_driver_name_needs_no_csidriver() -> None:
    pod = make_pod([{"name": "data", "csi": {"driver": ""}}])
    assert pvc.drivers_wanted(pod, {}, {}) == ()
    (volume,) = desired(pod, {}, {}, {}).volumes
    assert volume.name == "kubernetes.io/csi/uid-1-data"


def test_an_unfetched_csidriver_is_a_caller_bug() -> None:
    with pytest.raises(ValueError, match=r"CSIDriver 'csi\.example\.com' was not fetched"):
        desired(make_pod([claim_volume()]), {"data-claim": make_claim()}, {"pv-1": CSI_PV}, {})


def test_two_pod_volumes_naming_one_claim_are_one_volume() -> None:
    pod = make_pod([claim_volume("a"), claim_volume("b")], mounts=("a", "b"))
    result = desired(pod, {"data-claim": make_claim()}, {"pv-1": CSI_PV})
    (volume,) = result.volumes
    assert volume.outer_names == ("a", "b")
    assert result.by_outer_name() == {"a": volume, "b": volume}
    assert result.expected == ("a", "b")


def test_errors_are_the_pods_sorted_and_the_good_volumes_still_added() -> None:
    pod = make_pod([claim_volume("z", "zz"), claim_volume("a", "aa"), claim_volume("ok", "data-claim"),
                    {"name": "unused", "persistentVolumeClaim": {"claimName": "nope"}}], mounts=("z", "a", "ok"))
    result = desired(pod, {"zz": None, "aa": make_claim("aa", phase="Pending"), "data-claim": make_claim()},
                     {"pv-1": CSI_PV})
    assert result.errors == (
        "error processing PVC shop/aa: PVC is not bound",
        'error processing PVC shop/zz: failed to fetch PVC from API server: persistentvolumeclaims "zz" not found')
    assert result.failed == ("z", "a")
    assert [v.outer_names for v in result.volumes] == [("ok",)]
    assert result.expected == ("a", "ok", "z")


def test_a_pod_keeps_at_most_eleven_errors() -> None:
    names = [f"v{i:02d}" for i in range(15)]
    pod = make_pod([claim_volume(n, n) for n in names], mounts=tuple(names))
    result = desired(pod, dict.fromkeys(names), {})
    assert len(result.errors) == 11
    assert result.failed == tuple(names)


def test_requires_republish_comes_from_the_csidriver() -> None:
    result = desired(make_pod([claim_volume()]), {"data-claim": make_claim()}, {"pv-1": CSI_PV},
                     {"csi.example.com": {"spec": {"requiresRepublish": True}}})
    assert result.volumes[0].requires_remount is True


PLUGIN_CASES: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    # (case, PV source, the errors with the volume manager's plugins: local and hostPath)
    ("hostPath PV", {"hostPath": {"path": "/srv"}}, ()),
    ("local PV", {"local": {"path": "/mnt"}}, ()),
    ("csi PV", {"csi": {"driver": "csi.example.com", "volumeHandle": "vol-1"}},
     ('failed to get Plugin from volumeSpec for volume "pv-1" err=no volume plugin matched: kopflet does not mount '
      "CSI volumes yet (it mounts local and hostPath PersistentVolumes)",)),
]


@pytest.mark.parametrize(("source", "errors"), [c[1:] for c in PLUGIN_CASES], ids=[c[0] for c in PLUGIN_CASES])
def test_a_pv_whose_plugin_is_not_run_has_no_plugin(source: dict[str, Any], errors: tuple[str, ...]) -> None:
    result = pvc.resolve(make_pod([claim_volume()]), claims={"data-claim": make_claim()},
                         persistent_volumes={"pv-1": make_pv(source=source)}, csi_drivers={},
                         plugins=(pvc.PLUGIN_LOCAL, pvc.PLUGIN_HOST_PATH))
    assert result.errors == errors
    assert (result.failed, len(result.volumes)) == ((("data",), 0) if errors else ((), 1))
    assert result.expected == ("data",)


def test_an_inline_csi_volume_without_the_csi_plugin_is_left_to_plan_volumes() -> None:
    pod = make_pod([claim_volume(), {"name": "scratch", "csi": {"driver": "inline.example.com"}}],
                   mounts=("data", "scratch"))
    result = pvc.resolve(pod, claims={"data-claim": make_claim()},
                         persistent_volumes={"pv-1": make_pv(source={"local": {"path": "/mnt"}})}, csi_drivers={},
                         plugins=(pvc.PLUGIN_LOCAL, pvc.PLUGIN_HOST_PATH))
    assert result.expected == ("data",) and result.errors == ()
    assert [v.outer_names for v in result.volumes] == [("data",)]


# ------------------------------------------------------------------------------------ mount-time checks

HOSTNAME_A = {"nodeSelectorTerms": [{"matchExpressions": [
    {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-a"]}]}]}


@pytest.mark.parametrize(("affinity", "labels", "error"), [
    (None, {}, None),
    (HOSTNAME_A, {"kubernetes.io/hostname": "node-a"}, None),
    (HOSTNAME_A, {"kubernetes.io/hostname": "node-b"}, "no matching NodeSelectorTerms"),
    ({"nodeSelectorTerms": []}, {"kubernetes.io/hostname": "node-a"}, "no matching NodeSelectorTerms"),
    ({"nodeSelectorTerms": [{}, {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}]}, {"zone": "z1"}, None),
    ({"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["other"]}]}]},
     {}, None),  # upstream's Node there has labels only: matchFields are not applied
    ({"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "Bogus"}]}]}, {"zone": "z1"},
     "no matching NodeSelectorTerms"),
], ids=["none", "matches", "another node", "no terms", "empty term skipped", "fields ignored", "unparsable"])
def test_check_node_affinity(affinity: dict[str, Any] | None, labels: dict[str, str], error: str | None) -> None:
    volume = VolumeSpec(outer_name="data", name="pv-1", plugin=pvc.PLUGIN_LOCAL, read_only=False, pv_name="pv-1",
                        node_affinity=affinity)
    assert pvc.check_node_affinity(volume, labels) == error


def _spec(**fields: Any) -> VolumeSpec:
    base: dict[str, Any] = {"outer_name": "data", "name": "pv-1", "plugin": pvc.PLUGIN_CSI, "read_only": False,
                            "pv_name": "pv-1"}
    base.update(fields)
    return VolumeSpec(**base)


@pytest.mark.parametrize(("volume", "extra", "expected"), [
    (_spec(), (), ()),
    (_spec(mount_options=("noatime", "", "debug", "noatime")), (), ("debug", "noatime")),
    (_spec(mount_options=("noatime",), mount_options_annotation="ro,,sync"), (), ("ro", "sync")),
    (_spec(mount_options=("noatime",)), ("bind",), ("bind", "noatime")),
    (_spec(pv_name="", name="data"), ("bind",), ("bind",)),
], ids=["none", "deduplicated sorted", "annotation first", "with the system's", "inline volume"])
def test_mount_options_from_spec(volume: VolumeSpec, extra: tuple[str, ...], expected: tuple[str, ...]) -> None:
    assert pvc.mount_options_from_spec(volume, *extra) == expected


@pytest.mark.parametrize(("volume", "error"), [
    (_spec(mount_options=("noatime",)), None),
    (_spec(plugin=pvc.PLUGIN_LOCAL, mount_options=("noatime",)), None),
    (_spec(plugin=pvc.PLUGIN_HOST_PATH), None),
    (_spec(plugin=pvc.PLUGIN_HOST_PATH, mount_options=("noatime",)),
     "mount options are not supported for this volume type"),
    (_spec(plugin=pvc.PLUGIN_HOST_PATH, mount_options_annotation="ro"),
     "mount options are not supported for this volume type"),
], ids=["csi", "local", "hostPath without", "hostPath with", "hostPath annotation"])
def test_mount_option_support(volume: VolumeSpec, error: str | None) -> None:
    assert pvc.mount_option_error(volume) == error


@pytest.mark.parametrize(("modes", "elsewhere", "error"), [
    (("ReadWriteOncePod",), True, "volume uses the ReadWriteOncePod access mode and is already in use by another pod"),
    (("ReadWriteOncePod",), False, None),
    (("ReadWriteOncePod", "ReadWriteOnce"), True, None),
    (("ReadWriteOnce",), True, None),
])
def test_read_write_once_pod(modes: tuple[str, ...], elsewhere: bool, error: str | None) -> None:
    assert pvc.read_write_once_pod_conflict(_spec(access_modes=modes), elsewhere) == error


@pytest.mark.parametrize(("volume", "path"), [
    (_spec(), "/var/lib/kopflet/pods/uid-1/volumes/kubernetes.io~csi/pv-1/mount"),
    (_spec(volume_mode="Block"), "/var/lib/kopflet/pods/uid-1/volumeDevices/kubernetes.io~csi/pv-1"),
    (_spec(plugin=pvc.PLUGIN_LOCAL), "/var/lib/kopflet/pods/uid-1/volumes/kubernetes.io~local-volume/pv-1"),
    (_spec(plugin=pvc.PLUGIN_LOCAL, volume_mode="Block"),
     "/var/lib/kopflet/pods/uid-1/volumeDevices/kubernetes.io~local-volume/pv-1"),
    (_spec(plugin=pvc.PLUGIN_HOST_PATH, host_path="/srv/data"), "/srv/data"),
    (_spec(pv_name="", name="scratch", lifecycle="Ephemeral"),
     "/var/lib/kopflet/pods/uid-1/volumes/kubernetes.io~csi/scratch/mount"),
], ids=["csi", "csi block", "local", "local block", "hostPath", "inline csi"])
def test_host_path(volume: VolumeSpec, path: str) -> None:
    assert pvc.host_path(volume, LAYOUT, UID) == path


# ------------------------------------------------------------------------------------------ local PVs

LOCAL = _spec(plugin=pvc.PLUGIN_LOCAL, local_path="/mnt/disks/ssd1")


@pytest.mark.parametrize(("volume", "file_type", "expected"), [
    (LOCAL, "Directory", "/mnt/disks/ssd1"),
    (LOCAL, "BlockDevice", "/var/lib/kopflet/plugins/kubernetes.io/local-volume/mounts/pv-1"),
    (LOCAL, "File", SpecError("only directory and block device are supported")),
    (_spec(plugin=pvc.PLUGIN_LOCAL), "Directory", SpecError("local volume source is nil or local path is not set")),
])
def test_local_global_path(volume: VolumeSpec, file_type: str, expected: str | SpecError) -> None:
    if isinstance(expected, SpecError):
        with pytest.raises(SpecError, match=str(expected)):
            pvc.local_global_path(volume, LAYOUT, file_type)
    else:
        assert pvc.local_global_path(volume, LAYOUT, file_type) == expected


@pytest.mark.parametrize(("volume", "bind", "device"), [
    (LOCAL, ("bind",), ()),
    (_spec(plugin=pvc.PLUGIN_LOCAL, read_only=True, mount_options=("noatime",)), ("bind", "noatime", "ro"),
     ("noatime", "ro")),
])
def test_local_mount_options(volume: VolumeSpec, bind: tuple[str, ...], device: tuple[str, ...]) -> None:
    assert pvc.local_mount_options(volume) == bind
    assert pvc.local_device_mount_options(volume) == device


@pytest.mark.parametrize(("mode", "expected"), [
    (stat.S_IFDIR | 0o755, pvc.FILE_TYPE_DIRECTORY),
    (stat.S_IFREG | 0o644, "File"),
    (stat.S_IFSOCK | 0o777, "Socket"),
    (stat.S_IFCHR | 0o660, "CharDevice"),
    (stat.S_IFBLK | 0o660, pvc.FILE_TYPE_BLOCK_DEVICE),
    (stat.S_IFIFO | 0o644, SpecError("only recognise file, directory, socket, block device and character device")),
])
def test_file_type_is_hostutils(mode: int, expected: str | SpecError) -> None:
    if isinstance(expected, SpecError):
        with pytest.raises(SpecError, match=str(expected)):
            pvc.file_type(mode)
    else:
        assert pvc.file_type(mode) == expected


def test_path_missing_is_get_file_types_error() -> None:
    assert pvc.path_missing("/mnt/disks/ssd1") == 'path "/mnt/disks/ssd1" does not exist'


MOUNTINFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 8:16 / /mnt/disks rw,relatime shared:5 - xfs /dev/sdb rw
90 22 8:16 /ssd1 /var/lib/kopflet/pods/uid-0/volumes/kubernetes.io~local-volume/pv-1 rw shared:5 - xfs /dev/sdb rw
91 22 8:16 /ssd1 /elsewhere/bind rw shared:5 - xfs /dev/sdb rw
92 22 8:1 /ssd1 /var/lib/kopflet/pods/uid-9/volumes/kubernetes.io~local-volume/pv-9 rw shared:1 - ext4 /dev/sda1 rw
93 22 8:16 /ssd2 /var/lib/kopflet/pods/uid-2/volumes/kubernetes.io~local-volume/pv-2 rw shared:5 - xfs /dev/sdb rw
bad line
94 22 x:y /ssd1 /broken rw - xfs /dev/sdb rw
"""
POD_MOUNT = "/var/lib/kopflet/pods/uid-0/volumes/kubernetes.io~local-volume/pv-1"


@pytest.mark.parametrize(("path", "refs"), [
    # the PV's directory below a mount: the mounts of the same device and root (bind mounts of it)
    ("/mnt/disks/ssd1", (POD_MOUNT, "/elsewhere/bind")),
    # a pod's bind mount itself: the other references, the mount under /mnt/disks not (its root is /)
    (POD_MOUNT, ("/elsewhere/bind",)),
    ("/mnt/disks/ssd3", ()),
    ("/srv/data", ()),  # on / : no other mount of /srv/data on 8:1
])
def test_mount_refs_is_search_mount_points(path: str, refs: tuple[str, ...]) -> None:
    assert pvc.mount_refs(pvc.parse_mountinfo(MOUNTINFO), path) == refs


def test_mount_refs_without_a_mount_holding_the_path() -> None:
    with pytest.raises(SpecError, match="failed to get root path and major:minor for /srv"):
        pvc.mount_refs(pvc.parse_mountinfo(MOUNTINFO.split("\n", 1)[1]), "/srv")


def test_pod_mount_refs_are_those_under_the_pods_dir() -> None:
    assert pvc.pod_mount_refs((POD_MOUNT, "/elsewhere/bind", "/var/lib/kopflet/podsx/y"),
                              LAYOUT.pods_dir) == (POD_MOUNT,)


@pytest.mark.parametrize(("options", "source", "bind", "remount"), [
    (("bind",), (), "bind", "bind,remount"),
    (("bind", "ro"), (), "bind", "bind,remount,ro"),
    (("bind", "noatime", "ro"), ("nodev", "relatime"), "bind", "bind,remount,noatime,ro,nodev,relatime"),
    (("_netdev", "bind"), (), "bind,_netdev", "bind,remount,_netdev"),
])
def test_bind_mount_args_are_mount_utils(options: tuple[str, ...], source: tuple[str, ...], bind: str,
                                         remount: str) -> None:
    assert pvc.bind_mount_args("/mnt/d", "/pods/t", options, source) == (
        ("-o", bind, "/mnt/d", "/pods/t"), ("-o", remount, "/mnt/d", "/pods/t"))


def test_bind_mount_args_need_bind() -> None:
    with pytest.raises(ValueError, match="not a bind mount"):
        pvc.bind_mount_args("/a", "/b", ("ro",))


def test_local_fs_type_defaults_to_ext4() -> None:
    assert pvc.local_fs_type(LOCAL) == "ext4"
    assert pvc.local_fs_type(_spec(plugin=pvc.PLUGIN_LOCAL, local_fs_type="xfs")) == "xfs"


def test_already_mounted_volume_warning() -> None:
    assert pvc.already_mounted_volume_warning(2000, "pv-1", 1000) == (
        "The requested fsGroup is 2000, but the volume pv-1 has GID 1000. The volume may not be shareable.")


# ------------------------------------------------------------------------------------------ the rest


@pytest.mark.parametrize(("volume", "required"), [
    (_spec(claim=CLAIM, capacity="2Gi", claim_capacity="1Gi"), True),
    (_spec(claim=CLAIM, capacity="1Gi", claim_capacity="1Gi"), False),
    (_spec(claim=CLAIM, capacity="1Gi", claim_capacity="1024Mi"), False),
    (_spec(claim=CLAIM, capacity="2Gi", claim_capacity="1Gi", read_only=True), False),
    (_spec(capacity="2Gi", claim_capacity="1Gi"), False),
    (_spec(claim=CLAIM, capacity="2Gi"), True),
])
def test_fs_resize_required(volume: VolumeSpec, required: bool) -> None:
    assert pvc.fs_resize_required(volume) is required


def test_extra_supplemental_groups() -> None:
    pod = make_pod([], security_context={"supplementalGroups": [1000]})
    volumes = [_spec(volume_gid="1000"), _spec(volume_gid="3000"), _spec(volume_gid="2000"), _spec(volume_gid="x"),
               _spec(volume_gid="3000"), _spec()]
    assert pvc.extra_supplemental_groups(pod, volumes) == (2000, 3000)


def test_not_found_is_the_apiservers_text() -> None:
    assert pvc.not_found("persistentvolumeclaims", "data") == 'persistentvolumeclaims "data" not found'
    assert pvc.not_found("volumeattachments.storage.k8s.io", "csi-1") == (
        'volumeattachments.storage.k8s.io "csi-1" not found')
