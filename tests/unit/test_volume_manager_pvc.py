"""kopflet.volumes.manager with persistentVolumeClaim and generic ephemeral volumes, against a fake apiserver: the
PVC and PV GETs, the hostPath and local PVs mounted (the bind mount's ``mount`` calls recorded, not run), node
affinity, fsGroup and read-only, and upstream's errors as the pod's FailedMount events (the populator's "Unable to
attach or mount volumes" one, the mount operation's own) for what cannot be mounted.

Every case starts from one pod (``shop/web``, uid ``uid-1``, on node ``node-a``) whose container mounts ``data``.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from kopflet.api.spec import Pod, pod_from_body
from kopflet.client.kubeapi import KubeApiError
from kopflet.config.settings import AgentConfig
from kopflet.paths import Layout
from kopflet.volumes import manager
from kopflet.volumes.plugins import VolumeError, VolumePlan

UID = "uid-1"
CLAIM_UID = "claim-uid-1"
NODE = "node-a"
LABELS = {"kubernetes.io/hostname": NODE}
PVC_PATH = "/api/v1/namespaces/shop/persistentvolumeclaims/"
PV_PATH = "/api/v1/persistentvolumes/"
UNABLE = "Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[], failed to process " \
         "volumes=[data]: "


class FakeApi:
    """GET answers by path: an object, or a KubeApiError (a path not listed is NotFound)."""

    def __init__(self, objects: Mapping[str, Any]) -> None:
        self.objects = dict(objects)
        self.calls: list[str] = []

    async def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        assert method == "GET"
        self.calls.append(path)
        answer = self.objects.get(path)
        if answer is None:
            raise KubeApiError(404, "NotFound", f"not found: {path}", method, path)
        if isinstance(answer, KubeApiError):
            raise answer
        return dict(answer)


class FakeRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def pod_event(self, pod: Any, type_: str, reason: str, message: str, **_: Any) -> None:
        self.events.append((type_, reason, message))


def make_pod(volume: dict[str, Any] | None = None, *, security_context: dict[str, Any] | None = None,
             uid: str = UID, name: str = "web", devices: bool = False) -> Pod:
    container: dict[str, Any] = {"name": "app", "image": "busybox"}
    if devices:
        container["volumeDevices"] = [{"name": "data", "devicePath": "/dev/data"}]
    else:
        container["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    return pod_from_body({"metadata": {"name": name, "namespace": "shop", "uid": uid}, "spec": {
        "containers": [container], "securityContext": security_context or {},
        "volumes": [volume or {"name": "data", "persistentVolumeClaim": {"claimName": "data-claim"}}]}})


def claim(name: str = "data-claim", *, phase: str = "Bound", volume: str = "pv-1", owner: str | None = None,
          uid: str = CLAIM_UID) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "shop", "uid": uid}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": owner,
                                    "controller": True}]
    return {"metadata": meta, "spec": {"volumeName": volume, "storageClassName": ""}, "status": {"phase": phase}}


def pv(source: dict[str, Any], *, name: str = "pv-1", claim_uid: str = CLAIM_UID, mode: str = "Filesystem",
       affinity: dict[str, Any] | None = None, access_modes: tuple[str, ...] = ("ReadWriteOnce",)) -> dict[str, Any]:
    pv_spec: dict[str, Any] = {**source, "volumeMode": mode, "accessModes": list(access_modes),
                               "capacity": {"storage": "1Gi"}, "storageClassName": "",
                               "claimRef": {"namespace": "shop", "name": "data-claim", "uid": claim_uid}}
    if affinity is not None:
        pv_spec["nodeAffinity"] = {"required": affinity}
    return {"metadata": {"name": name}, "spec": pv_spec}


def hostname_is(node: str) -> dict[str, Any]:
    return {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}


class Harness:
    """A VolumeManager on `tmp_path` (its root dir under ``root``), its ``mount`` calls recorded."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, objects: Mapping[str, Any],
                 *, labels: Mapping[str, str] = LABELS, mountinfo: str = "") -> None:
        self.tmp = tmp_path
        self.layout = Layout(str(tmp_path / "root"))
        self.api, self.recorder = FakeApi(objects), FakeRecorder()
        self.mounts: list[tuple[str, ...]] = []
        self.mounted: set[str] = set()
        self.owned: list[tuple[Path, int]] = []
        info = tmp_path / "mountinfo"
        info.write_text(mountinfo or "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n")
        self.manager = manager.VolumeManager(
            AgentConfig(node_name=NODE), self.api, layout=self.layout,  # type: ignore[arg-type]
            node_labels=lambda: labels, recorder=self.recorder, mountinfo=str(info))  # type: ignore[arg-type]
        monkeypatch.setattr(manager, "_run_mount", self.mounts.append)
        monkeypatch.setattr(manager, "_source_options", lambda path: ())
        monkeypatch.setattr(manager, "is_mounted", lambda path: str(path) in self.mounted)
        real = manager.set_volume_ownership

        def own(root: Path, fs_group: int, read_only: bool) -> None:
            self.owned.append((root, fs_group))
            real(root, fs_group, read_only)

        monkeypatch.setattr(manager, "set_volume_ownership", own)

    def target(self, pv_name: str = "pv-1", uid: str = UID) -> str:
        return self.layout.local_volume_dir(uid, pv_name)

    async def setup(self, pod: Pod) -> dict[str, VolumePlan]:
        return await self.manager.setup(pod)

    async def failure(self, pod: Pod) -> VolumeError:
        with pytest.raises(VolumeError) as caught:
            await self.manager.setup(pod)
        return caught.value


def local_dir(tmp_path: Path) -> Path:
    path = tmp_path / "disks" / "ssd1"
    path.mkdir(parents=True, exist_ok=True)
    return path


# --------------------------------------------------------------------------------------------- mounted


async def test_a_bound_hostpath_pv_is_its_own_path_type_checked(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    host = tmp_path / "host" / "data"
    h = Harness(tmp_path, monkeypatch, {
        PVC_PATH + "data-claim": claim(),
        PV_PATH + "pv-1": pv({"hostPath": {"path": str(host), "type": "DirectoryOrCreate"}})})
    plans = await h.setup(make_pod())
    assert plans["data"] == VolumePlan(name="data", kind="persistentVolumeClaim", host_path=str(host))
    assert host.is_dir()  # DirectoryOrCreate made it, as the hostPath plugin's type check does
    assert h.api.calls == [PVC_PATH + "data-claim", PV_PATH + "pv-1"]
    assert h.mounts == [] and h.recorder.events == []
    await h.setup(make_pod())  # processed once (upstream's populator): not read again, nothing mounted again
    assert h.api.calls == [PVC_PATH + "data-claim", PV_PATH + "pv-1"]


async def test_a_bound_local_pv_is_bind_mounted_into_the_pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    disk = local_dir(tmp_path)
    h = Harness(tmp_path, monkeypatch, {
        PVC_PATH + "data-claim": claim(),
        PV_PATH + "pv-1": pv({"local": {"path": str(disk)}}, affinity=hostname_is(NODE))})
    plans = await h.setup(make_pod())
    assert plans["data"] == VolumePlan(name="data", kind="persistentVolumeClaim", host_path=h.target())
    assert h.mounts == [("-o", "bind", str(disk), h.target()), ("-o", "bind,remount", str(disk), h.target())]
    assert stat.S_IMODE(os.stat(h.target()).st_mode) == 0o750 and h.owned == []  # no fsGroup: no ownership
    await h.setup(make_pod())
    assert len(h.mounts) == 2  # mounted for the pod: the next syncs leave it


async def test_an_agent_restart_finds_the_bind_mount_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    disk = local_dir(tmp_path)
    h = Harness(tmp_path, monkeypatch, {PVC_PATH + "data-claim": claim(),
                                        PV_PATH + "pv-1": pv({"local": {"path": str(disk)}})})
    os.makedirs(h.target())
    h.mounted.add(h.target())  # SetUpAt: the directory is a mount point already
    await h.setup(make_pod(security_context={"fsGroup": 2000}))
    assert h.mounts == [] and h.owned == []


LOCAL_CASES: list[tuple[str, dict[str, Any], dict[str, Any], list[tuple[str, ...]], bool, bool]] = [
    # (case, pod volume, securityContext, the mount calls, read-only plan, ownership applied)
    ("fsGroup: the volume handed to the group", {"persistentVolumeClaim": {"claimName": "data-claim"}},
     {"fsGroup": 2000}, [("-o", "bind", "{disk}", "{target}"), ("-o", "bind,remount", "{disk}", "{target}")],
     False, True),
    ("read-only claim: ro, no ownership", {"persistentVolumeClaim": {"claimName": "data-claim", "readOnly": True}},
     {"fsGroup": 2000}, [("-o", "bind", "{disk}", "{target}"), ("-o", "bind,remount,ro", "{disk}", "{target}")],
     True, False),
    ("generic ephemeral volume owned by the pod", {"ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
     {}, [("-o", "bind", "{disk}", "{target}"), ("-o", "bind,remount", "{disk}", "{target}")], False, False),
]


@pytest.mark.parametrize(("source", "context", "calls", "read_only", "owned"), [c[1:] for c in LOCAL_CASES],
                         ids=[c[0] for c in LOCAL_CASES])
async def test_local_pv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: dict[str, Any],
                        context: dict[str, Any], calls: list[tuple[str, ...]], read_only: bool, owned: bool) -> None:
    disk = local_dir(tmp_path)
    claim_name = "web-data" if "ephemeral" in source else "data-claim"
    h = Harness(tmp_path, monkeypatch, {
        PVC_PATH + claim_name: claim(claim_name, owner=UID if "ephemeral" in source else None),
        PV_PATH + "pv-1": pv({"local": {"path": str(disk)}}, affinity=hostname_is(NODE))})
    plans = await h.setup(make_pod({"name": "data", **source}, security_context=context))
    assert plans["data"].read_only is read_only and plans["data"].host_path == h.target()
    assert h.mounts == [tuple(a.format(disk=disk, target=h.target()) for a in call) for call in calls]
    assert h.owned == ([(Path(h.target()), 2000)] if owned else [])
    if owned:
        info = os.stat(h.target())
        assert info.st_gid == 2000 and stat.S_IMODE(info.st_mode) == 0o2770
    assert h.recorder.events == []


async def test_on_root_mismatch_skips_a_root_that_has_the_group(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    disk = local_dir(tmp_path)
    h = Harness(tmp_path, monkeypatch, {PVC_PATH + "data-claim": claim(),
                                        PV_PATH + "pv-1": pv({"local": {"path": str(disk)}})})
    os.makedirs(h.target(), mode=0o750)
    os.chown(h.target(), -1, 2000)
    os.chmod(h.target(), 0o2770)  # the bind mount shows the PV's root: group and mode already right
    await h.setup(make_pod(security_context={"fsGroup": 2000, "fsGroupChangePolicy": "OnRootMismatch"}))
    assert len(h.mounts) == 2 and h.owned == []


async def test_a_local_pv_another_pod_has_keeps_its_group_and_warns(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Upstream SetUpAt: another pod's bind mount of the PV (same device and root) means no ownership change, and
    an AlreadyMountedVolume warning when that group differs from the pod's fsGroup."""
    disk = local_dir(tmp_path)
    os.chown(disk, -1, 1000)
    other = Layout(str(tmp_path / "root")).local_volume_dir("uid-0", "pv-1")
    mountinfo = ("22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
                 f"90 22 8:1 {disk} {other} rw,relatime shared:1 - ext4 /dev/sda1 rw\n")
    h = Harness(tmp_path, monkeypatch, {PVC_PATH + "data-claim": claim(),
                                        PV_PATH + "pv-1": pv({"local": {"path": str(disk)}})}, mountinfo=mountinfo)
    await h.setup(make_pod(security_context={"fsGroup": 2000}))
    assert len(h.mounts) == 2 and h.owned == []
    assert h.recorder.events == [("Warning", "AlreadyMountedVolume", "The requested fsGroup is 2000, but the volume "
                                  "pv-1 has GID 1000. The volume may not be shareable.")]


# ---------------------------------------------------------------------------------------- not mounted

ERROR_CASES: list[tuple[str, Pod, dict[str, Any], list[tuple[str, str]]]] = [
    ("unbound PVC", make_pod(), {PVC_PATH + "data-claim": claim(phase="Pending", volume="")},
     [("FailedMount", UNABLE + "error processing PVC shop/data-claim: PVC is not bound")]),
    ("PVC missing", make_pod(), {},
     [("FailedMount", UNABLE + "error processing PVC shop/data-claim: failed to fetch PVC from API server: "
                               'persistentvolumeclaims "data-claim" not found')]),
    ("PVC forbidden", make_pod(), {PVC_PATH + "data-claim": KubeApiError(
        403, "Forbidden", 'persistentvolumeclaims "data-claim" is forbidden: no relationship found', "GET", "/")},
     [("FailedMount", UNABLE + "error processing PVC shop/data-claim: failed to fetch PVC from API server: "
                               'persistentvolumeclaims "data-claim" is forbidden: no relationship found')]),
    ("PV bound to another claim", make_pod(),
     {PVC_PATH + "data-claim": claim(), PV_PATH + "pv-1": pv({"hostPath": {"path": "/srv"}}, claim_uid="other")},
     [("FailedMount", UNABLE + "error processing PVC shop/data-claim: found PV object pv-1 but its "
                               "pv.Spec.ClaimRef.UID other does not point to claim.UID claim-uid-1")]),
    ("nfs PV", make_pod(),
     {PVC_PATH + "data-claim": claim(), PV_PATH + "pv-1": pv({"nfs": {"server": "nfs.example", "path": "/"}})},
     [("FailedMount", UNABLE + 'failed to get Plugin from volumeSpec for volume "pv-1" err=no volume plugin matched: '
                               "kopflet has no nfs plugin (it mounts local and hostPath PersistentVolumes)")]),
    ("csi PV", make_pod(),
     {PVC_PATH + "data-claim": claim(), PV_PATH + "pv-1": pv({"csi": {"driver": "d.example", "volumeHandle": "h"}})},
     [("FailedMount", UNABLE + 'failed to get Plugin from volumeSpec for volume "pv-1" err=no volume plugin matched: '
                               "kopflet does not mount CSI volumes yet (it mounts local and hostPath "
                               "PersistentVolumes)")]),
    ("ephemeral PVC not owned by the pod", make_pod({"name": "data", "ephemeral": {"volumeClaimTemplate": {}}}),
     {PVC_PATH + "web-data": claim("web-data", owner="someone-else")},
     [("FailedMount", UNABLE + "PVC shop/web-data was not created for pod shop/web (pod is not owner)")]),
    ("local PV for another node", make_pod(),
     {PVC_PATH + "data-claim": claim(),
      PV_PATH + "pv-1": pv({"local": {"path": "/mnt/disks/ssd1"}}, affinity=hostname_is("node-b"))},
     [("FailedMount", 'MountVolume.NodeAffinity check failed for volume "pv-1" : no matching NodeSelectorTerms')]),
    ("local PV path missing", make_pod(),
     {PVC_PATH + "data-claim": claim(), PV_PATH + "pv-1": pv({"local": {"path": "/nonexistent/ssd1"}})},
     [("FailedMount", 'MountVolume.NewMounter initialization failed for volume "pv-1" : path "/nonexistent/ssd1" '
                      "does not exist")]),
    ("local PV on a regular file", make_pod(),
     {PVC_PATH + "data-claim": claim(), PV_PATH + "pv-1": pv({"local": {"path": "{file}"}})},
     [("FailedMount", 'MountVolume.NewMounter initialization failed for volume "pv-1" : only directory and block '
                      "device are supported")]),
    ("hostPath PV whose directory is missing", make_pod(),
     {PVC_PATH + "data-claim": claim(),
      PV_PATH + "pv-1": pv({"hostPath": {"path": "/nonexistent/srv", "type": "Directory"}})},
     [("FailedMount", 'MountVolume.SetUp failed for volume "pv-1" : hostPath type check failed: /nonexistent/srv '
                      "does not exist")]),
    ("hostPath PV with mount options", make_pod(),
     {PVC_PATH + "data-claim": claim(),
      PV_PATH + "pv-1": {**pv({"hostPath": {"path": "/srv"}}), "metadata": {
          "name": "pv-1", "annotations": {"volume.beta.kubernetes.io/mount-options": "noatime"}}}},
     [("FailedMount", 'MountVolume.MountOptionSupport check failed for volume "pv-1" : mount options are not '
                      "supported for this volume type")]),
    ("block-mode local PV", make_pod(devices=True),
     {PVC_PATH + "data-claim": claim(), PV_PATH + "pv-1": pv({"local": {"path": "/dev/sdb"}}, mode="Block")},
     [("FailedMapVolume", 'MapVolume.SetUpDevice failed for volume "pv-1" : kopflet does not map raw block volumes '
                          "yet (volumeMode: Block)")]),
]


@pytest.mark.parametrize(("pod", "objects", "events"), [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES])
async def test_what_cannot_be_mounted_is_upstreams_failed_mount(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 pod: Pod, objects: dict[str, Any],
                                                                 events: list[tuple[str, str]]) -> None:
    file = tmp_path / "file"
    file.write_text("x")
    for body in objects.values():
        local = body.get("spec", {}).get("local") if isinstance(body, dict) else None
        if local is not None and local["path"] == "{file}":
            local["path"] = str(file)
    h = Harness(tmp_path, monkeypatch, objects)
    error = await h.failure(pod)
    assert error.events == tuple(events)
    assert str(error) == events[-1][1].removeprefix("Unable to attach or mount volumes: ")
    assert h.mounts == []


async def test_the_pod_starts_once_its_pvc_binds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host = tmp_path / "srv"
    h = Harness(tmp_path, monkeypatch, {PVC_PATH + "data-claim": claim(phase="Pending", volume="")})
    await h.failure(make_pod())
    await h.failure(make_pod())  # retried on every sync: read again while it fails
    assert h.api.calls == [PVC_PATH + "data-claim"] * 2
    h.api.objects.update({PVC_PATH + "data-claim": claim(),
                          PV_PATH + "pv-1": pv({"hostPath": {"path": str(host), "type": "DirectoryOrCreate"}})})
    assert (await h.setup(make_pod()))["data"].host_path == str(host)


async def test_read_write_once_pod_refuses_a_second_pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    disk = local_dir(tmp_path)
    volume = pv({"local": {"path": str(disk)}}, access_modes=("ReadWriteOncePod",))
    h = Harness(tmp_path, monkeypatch, {PVC_PATH + "data-claim": claim(), PV_PATH + "pv-1": volume})
    await h.setup(make_pod())
    error = await h.failure(make_pod(uid="uid-2", name="other"))
    assert error.events == (("FailedMount", 'MountVolume.SetUp failed for volume "pv-1" : volume uses the '
                                            "ReadWriteOncePod access mode and is already in use by another pod"),)
    await h.manager.cleanup(UID)  # the first pod gone: the second one mounts it
    assert (await h.setup(make_pod(uid="uid-2", name="other")))["data"].host_path == h.target(uid="uid-2")


async def test_read_write_once_pod_holds_for_two_pods_at_once(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The two pods' mounts of one volume go one after the other (upstream's nestedpendingoperations): the second
    sees the first's mount."""
    disk = local_dir(tmp_path)
    volume = pv({"local": {"path": str(disk)}}, access_modes=("ReadWriteOncePod",))
    h = Harness(tmp_path, monkeypatch, {PVC_PATH + "data-claim": claim(), PV_PATH + "pv-1": volume})
    results = await asyncio.gather(h.setup(make_pod()), h.setup(make_pod(uid="uid-2", name="other")),
                                   return_exceptions=True)
    assert sorted(type(r).__name__ for r in results) == ["VolumeError", "dict"]
    assert len(h.mounts) == 2  # one bind mount (and its remount)


async def test_an_inline_csi_volume_is_still_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness(tmp_path, monkeypatch, {})
    error = await h.failure(make_pod({"name": "data", "csi": {"driver": "d.example"}}))
    assert str(error) == 'MountVolume.SetUp failed for volume "data" : unsupported volume type csi: kopflet has no ' \
                         "plugin for it"
    assert error.events is None and h.api.calls == []


async def test_cleanup_keeps_a_pod_directory_whose_volumes_stay_mounted(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness(tmp_path, monkeypatch, {})
    monkeypatch.setattr(manager, "unmount_all", lambda folder: [h.target()])
    with pytest.raises(OSError, match="volumes still mounted, its directory is kept"):
        await h.manager.cleanup(UID)
    monkeypatch.setattr(manager, "unmount_all", lambda folder: [])
    await h.manager.cleanup(UID)


def test_mount_points_are_read_unescaped(tmp_path: Path) -> None:
    """A root dir with a space: compared escaped, its bind mounts would be missed and removed through."""
    table = tmp_path / "mounts"
    table.write_text("tmpfs /var/lib/kop\\040flet/pods/u/volumes/a tmpfs rw 0 0\n"
                     "/dev/vda /tab\\011and\\134back ext4 rw 0 0\nshort\n")
    assert manager.mount_points(str(table)) == ["/var/lib/kop flet/pods/u/volumes/a", "/tab\tand\\back"]


async def test_a_volume_stays_in_the_actual_state_while_it_is_still_mounted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """cleanup forgets the pod's volumes only once they are unmounted: until then ReadWriteOncePod and the fsGroup
    check still see them."""
    h = Harness(tmp_path, monkeypatch, {})
    forgotten: list[str] = []
    monkeypatch.setattr(h.manager, "forget", forgotten.append)
    monkeypatch.setattr(manager, "unmount_all", lambda folder: [h.target()])
    with pytest.raises(OSError):
        await h.manager.cleanup(UID)
    assert forgotten == []
    monkeypatch.setattr(manager, "unmount_all", lambda folder: [])
    await h.manager.cleanup(UID)
    assert forgotten == [UID]
