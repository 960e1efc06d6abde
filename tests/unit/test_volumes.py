"""kopflet.volumes.plugins: volume plans per kind, payloads (items, modes, optional), errors as FailedMount messages,
mounts.

One base pod; each case gives its volumes (and mounts) and the fetched ConfigMaps/Secrets/tokens, and states
the plan (or the exact error message).
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from pathlib import Path
from typing import Any

import pytest

from cri_client.types import Device, ImageSpec, Mount, MountPropagation
from kopflet.api.spec import Pod, pod_from_body
from kopflet.paths import Layout
from kopflet.volumes import plugins, pvc
from kopflet.volumes.manager import materialize, set_volume_ownership
from kopflet.volumes.plugins import FileEntry, TokenSpec, VolumeError, VolumePlan

ROOT = "/var/lib/kopflet"
LAYOUT = Layout(ROOT)
UID = "uid-1"


def vdir(plugin: str, name: str) -> str:
    return f"{ROOT}/pods/{UID}/volumes/kubernetes.io~{plugin}/{name}"


def make_pod(vols: list[dict[str, Any]], mounts: list[dict[str, Any]] | None = None,
             resources: dict[str, Any] | None = None) -> Pod:
    return pod_from_body({
        "metadata": {"name": "web", "namespace": "shop", "uid": UID,
                     "labels": {"app": "web", "tier": "front"}, "annotations": {"note": 'say "hi"'}},
        "spec": {"serviceAccountName": "default", "volumes": vols,
                 "containers": [{"name": "app", "image": "nginx:1", "volumeMounts": mounts or [],
                                 "resources": resources or {}}]},
    })


UNSYNCED = "failed to sync configmap cache: timed out waiting for the condition"
CONFIG_MAPS: dict[str, plugins.ObjectData] = {
    "cfg": {"a.conf": b"A", "b.conf": b"B"},
    "kube-root-ca.crt": {"ca.crt": b"CERT"},
    "missing": None,
    "unsynced": plugins.FetchError(UNSYNCED),
}
SECRETS: dict[str, plugins.ObjectData] = {"creds": {"user": b"u", "pass": b"p"}, "gone": None,
                                          "forbidden": plugins.FetchError('secrets "forbidden" is forbidden: no')}
TOKENS = {("", 3607): "TOKEN", ("vault", 600): "VAULT-TOKEN"}

KUBE_API_ACCESS = {"name": "kube-api-access-x1y2z", "projected": {"defaultMode": 420, "sources": [
    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
    {"downwardAPI": {"items": [{"path": "namespace",
                                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
]}}


def plan(vols: list[dict[str, Any]], **kwargs: Any) -> dict[str, VolumePlan]:
    return plugins.plan_volumes(make_pod(vols, **kwargs), layout=LAYOUT, config_maps=CONFIG_MAPS, secrets=SECRETS,
                                tokens=TOKENS, node_allocatable={"cpu": "4", "memory": "8Gi"})


def files(*entries: tuple[str, bytes, int]) -> tuple[FileEntry, ...]:
    return tuple(FileEntry(path, data, mode) for path, data, mode in entries)


# ------------------------------------------------------------------------------------------------- layout


def test_volume_dir_layout() -> None:
    assert Layout("/r").volume_dir("u", "kubernetes.io/empty-dir", "v") == "/r/pods/u/volumes/kubernetes.io~empty-dir/v"


# ------------------------------------------------------------------------------------------------ plans


PLAN_CASES: list[tuple[str, dict[str, Any], VolumePlan]] = [
    ("emptyDir on disk", {"name": "scratch", "emptyDir": {}},
     VolumePlan("scratch", "emptyDir", vdir("empty-dir", "scratch"))),
    ("no source defaults to emptyDir", {"name": "scratch"},
     VolumePlan("scratch", "emptyDir", vdir("empty-dir", "scratch"))),
    ("emptyDir in memory with sizeLimit", {"name": "cache", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
     VolumePlan("cache", "emptyDir", vdir("empty-dir", "cache"), tmpfs=True, size_limit=64 * 2**20)),
    ("hostPath untyped", {"name": "logs", "hostPath": {"path": "/var/log"}},
     VolumePlan("logs", "hostPath", "/var/log")),
    ("hostPath typed", {"name": "sock", "hostPath": {"path": "/run/x.sock", "type": "Socket"}},
     VolumePlan("sock", "hostPath", "/run/x.sock", host_path_type="Socket")),
    ("configMap all keys, defaultMode", {"name": "c", "configMap": {"name": "cfg"}},
     VolumePlan("c", "configMap", vdir("configmap", "c"), read_only=True,
                files=files(("a.conf", b"A", 0o644), ("b.conf", b"B", 0o644)))),
    ("configMap custom defaultMode", {"name": "c", "configMap": {"name": "cfg", "defaultMode": 0o400}},
     VolumePlan("c", "configMap", vdir("configmap", "c"), read_only=True,
                files=files(("a.conf", b"A", 0o400), ("b.conf", b"B", 0o400)))),
    ("configMap items: key to path, item mode over defaultMode",
     {"name": "c", "configMap": {"name": "cfg", "defaultMode": 0o600, "items": [
         {"key": "a.conf", "path": "etc/app.conf", "mode": 0o755}, {"key": "b.conf", "path": "b"}]}},
     VolumePlan("c", "configMap", vdir("configmap", "c"), read_only=True,
                files=files(("b", b"B", 0o600), ("etc/app.conf", b"A", 0o755)))),
    ("configMap optional and missing: empty volume", {"name": "c", "configMap": {"name": "missing", "optional": True}},
     VolumePlan("c", "configMap", vdir("configmap", "c"), read_only=True, files=())),
    ("configMap optional, missing key skipped",
     {"name": "c", "configMap": {"name": "cfg", "optional": True, "items": [
         {"key": "nope", "path": "x"}, {"key": "a.conf", "path": "a"}]}},
     VolumePlan("c", "configMap", vdir("configmap", "c"), read_only=True, files=files(("a", b"A", 0o644)))),
    ("secret on tmpfs", {"name": "s", "secret": {"secretName": "creds"}},
     VolumePlan("s", "secret", vdir("secret", "s"), tmpfs=True, read_only=True,
                files=files(("pass", b"p", 0o644), ("user", b"u", 0o644)))),
    ("secret items and mode", {"name": "s", "secret": {"secretName": "creds", "defaultMode": 0o440,
                                                       "items": [{"key": "user", "path": "login/user"}]}},
     VolumePlan("s", "secret", vdir("secret", "s"), tmpfs=True, read_only=True,
                files=files(("login/user", b"u", 0o440)))),
    ("secret optional and missing", {"name": "s", "secret": {"secretName": "gone", "optional": True}},
     VolumePlan("s", "secret", vdir("secret", "s"), tmpfs=True, read_only=True, files=())),
    ("downwardAPI fields and resources", {"name": "d", "downwardAPI": {"items": [
        {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
        {"path": "uid", "fieldRef": {"fieldPath": "metadata.uid"}, "mode": 0o400},
        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
        {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}},
        {"path": "app", "fieldRef": {"fieldPath": "metadata.labels['app']"}},
        {"path": "mem", "resourceFieldRef": {"containerName": "app", "resource": "limits.memory",
                                             "divisor": "1Mi"}},
        {"path": "cpu", "resourceFieldRef": {"containerName": "app", "resource": "requests.cpu",
                                             "divisor": "1m"}},
    ]}},
     VolumePlan("d", "downwardAPI", vdir("downward-api", "d"), tmpfs=True, read_only=True, files=files(
         ("annotations", b'note="say \\"hi\\""', 0o644),
         ("app", b"web", 0o644),
         ("cpu", b"250", 0o644),
         ("labels", b'app="web"\ntier="front"', 0o644),
         ("mem", b"8192", 0o644),  # no memory limit: node allocatable
         ("name", b"web", 0o644),
         ("uid", UID.encode(), 0o400),
     ))),
    ("projected: sources merged, secret means tmpfs", {"name": "p", "projected": {"defaultMode": 0o444, "sources": [
        {"configMap": {"name": "cfg", "items": [{"key": "a.conf", "path": "a"}]}},
        {"secret": {"name": "creds", "items": [{"key": "user", "path": "user", "mode": 0o400}]}},
        {"configMap": {"name": "missing", "optional": True}},
    ]}},
     VolumePlan("p", "projected", vdir("projected", "p"), tmpfs=True, read_only=True,
                files=files(("a", b"A", 0o444), ("user", b"u", 0o400)))),
    # Upstream projected and downwardAPI volumes always wrap an emptyDir of medium Memory.
    ("projected without secret or token: tmpfs too", {"name": "p", "projected": {"sources": [
        {"configMap": {"name": "cfg", "items": [{"key": "b.conf", "path": "./dir//b"}]}}]}},
     VolumePlan("p", "projected", vdir("projected", "p"), tmpfs=True, read_only=True,
                files=files(("dir/b", b"B", 0o644)))),
    ("configMap on disk", {"name": "c", "configMap": {"name": "cfg", "items": [{"key": "b.conf", "path": "b"}]}},
     VolumePlan("c", "configMap", vdir("configmap", "c"), read_only=True, files=files(("b", b"B", 0o644)))),
    ("projected token with audience", {"name": "p", "projected": {"sources": [
        {"serviceAccountToken": {"audience": "vault", "expirationSeconds": 600, "path": "vault/token"}}]}},
     VolumePlan("p", "projected", vdir("projected", "p"), tmpfs=True, read_only=True,
                files=files(("vault/token", b"VAULT-TOKEN", 0o644)))),
    # Upstream's image plugin: no path, read-only, nothing to set up; the pull policy as the apiserver defaults it.
    ("image, pull policy as given", {"name": "i", "image": {"reference": "kitten:1.8", "pullPolicy": "Always"}},
     VolumePlan("i", "image", "", read_only=True, image="kitten:1.8", pull_policy="Always")),
    ("image tagged: IfNotPresent by default", {"name": "i", "image": {"reference": "registry.k8s.io/kitten:1.8"}},
     VolumePlan("i", "image", "", read_only=True, image="registry.k8s.io/kitten:1.8", pull_policy="IfNotPresent")),
    ("image untagged: Always by default", {"name": "i", "image": {"reference": "localhost:5000/kitten"}},
     VolumePlan("i", "image", "", read_only=True, image="localhost:5000/kitten", pull_policy="Always")),
    ("image :latest: Always by default", {"name": "i", "image": {"reference": "kitten:latest", "pullPolicy": ""}},
     VolumePlan("i", "image", "", read_only=True, image="kitten:latest", pull_policy="Always")),
    ("image by digest: IfNotPresent by default", {"name": "i", "image": {"reference": "kitten@sha256:" + "a" * 64}},
     VolumePlan("i", "image", "", read_only=True, image="kitten@sha256:" + "a" * 64, pull_policy="IfNotPresent")),
    ("image Never", {"name": "i", "image": {"reference": "kitten:1.8", "pullPolicy": "Never"}},
     VolumePlan("i", "image", "", read_only=True, image="kitten:1.8", pull_policy="Never")),
    ("image without a reference: refused when pulled", {"name": "i", "image": {}},
     VolumePlan("i", "image", "", read_only=True, image="", pull_policy="Always")),
    ("kube-api-access", KUBE_API_ACCESS,
     VolumePlan("kube-api-access-x1y2z", "projected", vdir("projected", "kube-api-access-x1y2z"), tmpfs=True,
                read_only=True,
                files=files(("ca.crt", b"CERT", 0o644), ("namespace", b"shop", 0o644), ("token", b"TOKEN", 0o644)))),
]


@pytest.mark.parametrize(("volume", "expected"), [c[1:] for c in PLAN_CASES], ids=[c[0] for c in PLAN_CASES])
def test_plan(volume: dict[str, Any], expected: VolumePlan) -> None:
    resources = {"requests": {"cpu": "250m"}}
    assert plan([volume], resources=resources) == {expected.name: expected}


def test_plans_keep_spec_order() -> None:
    result = plan([{"name": "z", "emptyDir": {}}, {"name": "a", "hostPath": {"path": "/a"}}])
    assert list(result) == ["z", "a"]


# ----------------------------------------------------------------------------------------------- errors


def failed(volume: str, detail: str) -> str:
    return f'MountVolume.SetUp failed for volume "{volume}" : {detail}'


ERROR_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("configMap missing", {"name": "c", "configMap": {"name": "missing"}},
     failed("c", 'configmap "missing" not found')),
    ("secret missing", {"name": "s", "secret": {"secretName": "gone"}},
     failed("s", 'secret "gone" not found')),
    # a read that failed (not NotFound) fails the volume's SetUp, optional or not (upstream configmap/secret SetUpAt)
    ("configMap not synced", {"name": "c", "configMap": {"name": "unsynced"}}, failed("c", UNSYNCED)),
    ("optional configMap not synced", {"name": "c", "configMap": {"name": "unsynced", "optional": True}},
     failed("c", UNSYNCED)),
    ("secret refused", {"name": "s", "secret": {"secretName": "forbidden", "optional": True}},
     failed("s", 'secrets "forbidden" is forbidden: no')),
    ("projected configMap not synced, with a missing secret", {"name": "p", "projected": {"sources": [
        {"configMap": {"name": "unsynced", "optional": True}}, {"secret": {"name": "gone"}}]}},
     failed("p", f'[{UNSYNCED}, secret "gone" not found]')),
    ("configMap missing key", {"name": "c", "configMap": {"name": "cfg", "items": [{"key": "nope", "path": "x"}]}},
     failed("c", "configmap references non-existent config key: nope")),
    ("secret missing key", {"name": "s", "secret": {"secretName": "creds", "items": [{"key": "k", "path": "x"}]}},
     failed("s", "secret references non-existent secret key: k")),
    ("projected missing configMap", {"name": "p", "projected": {"sources": [{"configMap": {"name": "missing"}}]}},
     failed("p", 'configmap "missing" not found')),
    ("projected errors aggregated", {"name": "p", "projected": {"sources": [
        {"configMap": {"name": "missing"}}, {"secret": {"name": "gone"}}]}},
     failed("p", '[configmap "missing" not found, secret "gone" not found]')),
    ("projected token not fetched", {"name": "p", "projected": {"sources": [
        {"serviceAccountToken": {"audience": "other", "path": "t"}}]}},
     failed("p", 'failed to fetch token: no token for audience "other" expiring in 3600s')),
    ("projected token too short", {"name": "p", "projected": {"sources": [
        {"serviceAccountToken": {"expirationSeconds": 60, "path": "t"}}]}},
     failed("p", "serviceAccountToken.expirationSeconds: Invalid value: 60: may not specify a duration less "
                 "than 10 minutes")),
    ("projected unsupported source", {"name": "p", "projected": {"sources": [{"futureSource": {"path": "c"}}]}},
     failed("p", "unsupported projected volume source futureSource")),
    ("projected podCertificate without a pod certificate manager (upstream's NoOpManager)", {
        "name": "p", "projected": {"sources": [
            {"podCertificate": {"signerName": "example.com/s", "keyType": "ED25519", "credentialBundlePath": "c"}}]}},
     failed("p", "unimplemented")),
    ("absolute item path", {"name": "c", "configMap": {"name": "cfg", "items": [{"key": "a.conf", "path": "/x"}]}},
     failed("c", "invalid path: must be relative path: /x")),
    ("'..' item path", {"name": "c", "configMap": {"name": "cfg", "items": [{"key": "a.conf", "path": "a/../../x"}]}},
     failed("c", "invalid path: must not contain '..': a/../../x")),
    ("'..'-prefixed item path", {"name": "c", "configMap": {"name": "cfg", "items": [
        {"key": "a.conf", "path": "..data/x"}]}},
     failed("c", "invalid path: must not start with '..': ..data/x")),
    ("empty item path", {"name": "c", "configMap": {"name": "cfg", "items": [{"key": "a.conf", "path": ""}]}},
     failed("c", 'invalid path: must not be empty: ""')),
    ("downwardAPI unsupported field", {"name": "d", "downwardAPI": {"items": [
        {"path": "node", "fieldRef": {"fieldPath": "spec.nodeName"}}]}},
     failed("d", "unsupported fieldPath: spec.nodeName")),
    ("downwardAPI unknown container", {"name": "d", "downwardAPI": {"items": [
        {"path": "cpu", "resourceFieldRef": {"containerName": "nope", "resource": "limits.cpu"}}]}},
     failed("d", "container nope not found")),
    ("PVC unsupported", {"name": "data", "persistentVolumeClaim": {"claimName": "pvc"}},
     failed("data", "unsupported volume type persistentVolumeClaim: kopflet has no plugin for it")),
    ("nfs unsupported", {"name": "data", "nfs": {"server": "s", "path": "/"}},
     failed("data", "unsupported volume type nfs: kopflet has no plugin for it")),
    ("csi unsupported", {"name": "data", "csi": {"driver": "d"}},
     failed("data", "unsupported volume type csi: kopflet has no plugin for it")),
    ("hostPath bad type", {"name": "h", "hostPath": {"path": "/x", "type": "Weird"}},
     failed("h", "invalid HostPathType Weird")),
    ("emptyDir hugepages", {"name": "e", "emptyDir": {"medium": "HugePages"}},
     failed("e", "unsupported emptyDir medium HugePages")),
    ("image bad pull policy (a static pod's)", {"name": "i", "image": {"reference": "k:1", "pullPolicy": "Sometimes"}},
     failed("i", "unsupported image volume pullPolicy Sometimes")),
]


@pytest.mark.parametrize(("volume", "message"), [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES])
def test_plan_error(volume: dict[str, Any], message: str) -> None:
    with pytest.raises(VolumeError) as info:
        plan([volume])
    assert str(info.value) == message
    assert info.value.volume == volume["name"]


def test_unfetched_object_is_a_caller_bug() -> None:
    with pytest.raises(ValueError, match="not fetched"):
        plan([{"name": "c", "configMap": {"name": "never-fetched"}}])


# ------------------------------------------------------------------------------------------ references


def test_referenced_objects_and_token_requests() -> None:
    pod = make_pod([
        {"name": "c", "configMap": {"name": "cfg"}},
        {"name": "s", "secret": {"secretName": "creds"}},
        {"name": "p", "projected": {"sources": [
            {"configMap": {"name": "extra", "optional": True}}, {"secret": {"name": "more"}},
            {"serviceAccountToken": {"audience": "vault", "expirationSeconds": 900, "path": "v"}}]}},
        KUBE_API_ACCESS,
        {"name": "e", "emptyDir": {}},
    ])
    assert plugins.referenced_objects(pod) == (frozenset({"cfg", "extra", "kube-root-ca.crt"}),
                                               frozenset({"creds", "more"}))
    assert plugins.token_requests(pod) == (TokenSpec("p", "v", "vault", 900),
                                           TokenSpec("kube-api-access-x1y2z", "token", "", 3607))


def test_token_request_defaults() -> None:
    pod = make_pod([{"name": "p", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}])
    assert plugins.token_requests(pod) == (TokenSpec("p", "t", "", 3600),)


# ---------------------------------------------------------------------------------------------- mounts

MOUNT_VOLUMES = [
    {"name": "data", "emptyDir": {}},
    {"name": "cfg", "configMap": {"name": "cfg"}},
    {"name": "host", "hostPath": {"path": "/srv"}},
]
DATA = vdir("empty-dir", "data")
ENV = {"POD_NAME": "web", "EMPTY": ""}

MOUNT_CASES: list[tuple[str, dict[str, Any], Mount]] = [
    ("plain", {"name": "data", "mountPath": "/data"}, Mount(container_path="/data", host_path=DATA)),
    ("readOnly", {"name": "data", "mountPath": "/data", "readOnly": True},
     Mount(container_path="/data", host_path=DATA, readonly=True)),
    ("configMap is always read-only", {"name": "cfg", "mountPath": "/etc/cfg"},
     Mount(container_path="/etc/cfg", host_path=vdir("configmap", "cfg"), readonly=True)),
    ("subPath", {"name": "data", "mountPath": "/d", "subPath": "a/b"},
     Mount(container_path="/d", host_path=f"{DATA}/a/b")),
    ("subPath file of a configMap", {"name": "cfg", "mountPath": "/etc/a.conf", "subPath": "a.conf"},
     Mount(container_path="/etc/a.conf", host_path=vdir("configmap", "cfg") + "/a.conf", readonly=True)),
    ("subPathExpr", {"name": "data", "mountPath": "/d", "subPathExpr": "logs/$(POD_NAME)"},
     Mount(container_path="/d", host_path=f"{DATA}/logs/web")),
    ("hostPath", {"name": "host", "mountPath": "/srv", "mountPropagation": "HostToContainer"},
     Mount(container_path="/srv", host_path="/srv", propagation=MountPropagation.HOST_TO_CONTAINER)),
    ("propagation None", {"name": "data", "mountPath": "/d", "mountPropagation": "None"},
     Mount(container_path="/d", host_path=DATA, propagation=MountPropagation.PRIVATE)),
    ("propagation Bidirectional", {"name": "host", "mountPath": "/srv", "mountPropagation": "Bidirectional"},
     Mount(container_path="/srv", host_path="/srv", propagation=MountPropagation.BIDIRECTIONAL)),
]


def mounts_for(mounts: list[dict[str, Any]]) -> list[Mount]:
    pod = make_pod(MOUNT_VOLUMES, mounts)
    plans = plugins.plan_volumes(pod, layout=LAYOUT, config_maps=CONFIG_MAPS, secrets=SECRETS, tokens=TOKENS)
    return plugins.container_mounts(pod, pod.spec.containers[0], plans, ENV)


@pytest.mark.parametrize(("mount", "expected"), [c[1:] for c in MOUNT_CASES], ids=[c[0] for c in MOUNT_CASES])
def test_container_mount(mount: dict[str, Any], expected: Mount) -> None:
    assert mounts_for([mount]) == [expected]


MOUNT_ERRORS: list[tuple[str, dict[str, Any], str]] = [
    ("unknown volume", {"name": "nope", "mountPath": "/x"}, 'cannot find volume "nope" to mount into container "app"'),
    ("absolute subPath", {"name": "data", "mountPath": "/x", "subPath": "/etc"},
     "error SubPath `/etc` must not be an absolute path"),
    ("escaping subPath", {"name": "data", "mountPath": "/x", "subPath": "a/../../etc"},
     "unable to provision SubPath `a/../../etc`: must not contain '..'"),
    ("escaping subPathExpr", {"name": "data", "mountPath": "/x", "subPathExpr": "$(POD_NAME)/../.."},
     "unable to provision SubPath `web/../..`: must not contain '..'"),
    ("subPathExpr unknown variable", {"name": "data", "mountPath": "/x", "subPathExpr": "$(NOPE)/$(EMPTY)"},
     "missing value for EMPTY, NOPE"),
    ("bad propagation", {"name": "data", "mountPath": "/x", "mountPropagation": "Sideways"},
     'invalid MountPropagation mode: "Sideways"'),
]


@pytest.mark.parametrize(("mount", "message"), [c[1:] for c in MOUNT_ERRORS], ids=[c[0] for c in MOUNT_ERRORS])
def test_container_mount_error(mount: dict[str, Any], message: str) -> None:
    with pytest.raises(VolumeError) as info:
        mounts_for([mount])
    assert str(info.value) == message


def test_validate_path() -> None:
    assert plugins.validate_path("a/b.c") is None
    assert plugins.validate_path("..") == "invalid path: must not contain '..': .."
    assert plugins.validate_path("x" * 256) == "invalid path: filenames must be less than or equal to 255 characters"
    assert plugins.validate_path("/".join(["x" * 200] * 21)) == (
        "invalid path: must be less than or equal to 4096 characters")


@pytest.mark.parametrize(("mode", "is_dir", "read_only", "expected"), [
    (0o644, False, False, 0o664),
    (0o644, False, True, 0o644),
    (0o600, False, True, 0o640),
    (0o755, True, False, 0o2775),
    (0o777, True, False, 0o2777),
    (0o100600, False, False, 0o660),  # file type bits dropped
])
def test_ownership_mode_under_fs_group(mode: int, is_dir: bool, read_only: bool, expected: int) -> None:
    assert plugins.ownership_mode(mode, is_dir=is_dir, read_only=read_only) == expected


@pytest.mark.parametrize(("policy", "gid", "mode", "is_dir", "read_only", "skip"), [
    # upstream skipPermissionChange / requiresPermissionChange, fsGroup 2000
    ("OnRootMismatch", 2000, 0o2770, True, False, True),
    ("OnRootMismatch", 2000, 0o2775, True, False, True),
    ("OnRootMismatch", 1000, 0o2770, True, False, False),  # another group
    ("OnRootMismatch", 2000, 0o0770, True, False, False),  # no setgid
    ("OnRootMismatch", 2000, 0o2750, True, False, False),  # no group write
    ("OnRootMismatch", 2000, 0o2750, True, True, True),  # read-only: group read and execute are enough
    ("OnRootMismatch", 2000, 0o2660, False, False, False),  # not a directory
    ("Always", 2000, 0o2770, True, False, False),
    (None, 2000, 0o2770, True, False, False),  # the default is Always
])
def test_skip_permission_change(policy: str | None, gid: int, mode: int, is_dir: bool, read_only: bool,
                                skip: bool) -> None:
    assert plugins.skip_permission_change(policy, gid=gid, mode=mode, is_dir=is_dir, fs_group=2000,
                                          read_only=read_only) is skip


def test_set_volume_ownership_walks_the_volume(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir(mode=0o755)
    (tmp_path / "d" / "f").write_text("x")
    os.chmod(tmp_path / "d" / "f", 0o600)
    os.symlink("d/f", tmp_path / "link")
    set_volume_ownership(tmp_path, 4321, read_only=False)
    for path in (tmp_path, tmp_path / "d", tmp_path / "d" / "f"):
        assert os.lstat(path).st_gid == 4321
    assert stat.S_IMODE(os.stat(tmp_path / "d").st_mode) == 0o2775
    assert stat.S_IMODE(os.stat(tmp_path / "d" / "f").st_mode) == 0o660
    assert os.lstat(tmp_path / "link").st_gid == 4321


# ------------------------------------------------------------------------------------------- image volumes

KITTEN = "registry.k8s.io/e2e-test-images/kitten:1.8"
PULLED = {"img": ImageSpec(image="sha256:kitten", user_specified_image=KITTEN)}
IMAGE_VOLUMES = [*MOUNT_VOLUMES, {"name": "img", "image": {"reference": KITTEN, "pullPolicy": "Always"}}]

IMAGE_MOUNT_CASES: list[tuple[str, dict[str, Any], Mount]] = [
    # upstream makeMounts: Image set, no host path, ReadOnly from the plugin's attributes whatever the mount says
    ("plain", {"name": "img", "mountPath": "/volume"},
     Mount(container_path="/volume", readonly=True, image=PULLED["img"])),
    ("readOnly false stays read-only", {"name": "img", "mountPath": "/volume", "readOnly": False},
     Mount(container_path="/volume", readonly=True, image=PULLED["img"])),
    # the subPath goes to the runtime as ImageSubPath, as written: the runtime opens it inside the image
    ("subPath", {"name": "img", "mountPath": "/volume", "subPath": "etc"},
     Mount(container_path="/volume", readonly=True, image=PULLED["img"], image_sub_path="etc")),
    ("subPath uncleaned", {"name": "img", "mountPath": "/volume", "subPath": "./etc//x"},
     Mount(container_path="/volume", readonly=True, image=PULLED["img"], image_sub_path="./etc//x")),
    ("subPathExpr", {"name": "img", "mountPath": "/volume", "subPathExpr": "$(POD_NAME)"},
     Mount(container_path="/volume", readonly=True, image=PULLED["img"], image_sub_path="web")),
    ("propagation", {"name": "img", "mountPath": "/volume", "mountPropagation": "HostToContainer"},
     Mount(container_path="/volume", readonly=True, image=PULLED["img"],
           propagation=MountPropagation.HOST_TO_CONTAINER)),
]


def image_mounts_for(mounts: list[dict[str, Any]], images: dict[str, Any] | None = PULLED) -> list[Mount]:
    pod = make_pod(IMAGE_VOLUMES, mounts)
    plans = plugins.plan_volumes(pod, layout=LAYOUT, config_maps=CONFIG_MAPS, secrets=SECRETS, tokens=TOKENS)
    return plugins.container_mounts(pod, pod.spec.containers[0], plans, ENV, images)


@pytest.mark.parametrize(("mount", "expected"), [c[1:] for c in IMAGE_MOUNT_CASES],
                         ids=[c[0] for c in IMAGE_MOUNT_CASES])
def test_image_volume_mount(mount: dict[str, Any], expected: Mount) -> None:
    assert image_mounts_for([mount]) == [expected]


def test_image_volume_mounts_beside_the_others() -> None:
    """Other volumes' mounts are as without image volumes; two mounts of one image volume both name its image."""
    mounts = image_mounts_for([{"name": "data", "mountPath": "/d", "subPath": "a"},
                               {"name": "img", "mountPath": "/v1"}, {"name": "img", "mountPath": "/v2",
                                                                    "subPath": "etc"}])
    assert mounts == [Mount(container_path="/d", host_path=f"{DATA}/a"),
                      Mount(container_path="/v1", readonly=True, image=PULLED["img"]),
                      Mount(container_path="/v2", readonly=True, image=PULLED["img"], image_sub_path="etc")]


@pytest.mark.parametrize(("mount", "message"), [
    ("absolute subPath", "error SubPath `/etc` must not be an absolute path"),
    ("escaping subPath", "unable to provision SubPath `a/../../etc`: must not contain '..'"),
])
def test_image_volume_subpath_checks_are_the_kubelets(mount: str, message: str) -> None:
    """makeMounts checks the subPath before it knows the volume is an image: the same errors as any volume's."""
    sub_path = "/etc" if mount == "absolute subPath" else "a/../../etc"
    with pytest.raises(VolumeError) as info:
        image_mounts_for([{"name": "img", "mountPath": "/x", "subPath": sub_path}])
    assert str(info.value) == message


def test_an_image_volume_without_its_pulled_image_is_a_caller_bug() -> None:
    with pytest.raises(ValueError, match="no pulled image"):
        image_mounts_for([{"name": "img", "mountPath": "/volume"}], images=None)
    assert image_mounts_for([{"name": "data", "mountPath": "/d"}], images=None) == [
        Mount(container_path="/d", host_path=DATA)]


def test_an_image_volume_puts_nothing_on_the_node(tmp_path: Path) -> None:
    """Upstream's image plugin SetUp does nothing: no directory under the pod's volumes, beside an emptyDir's."""
    pod = make_pod([{"name": "img", "image": {"reference": KITTEN}}, {"name": "data", "emptyDir": {}}])
    plans = plugins.plan_volumes(pod, layout=Layout(str(tmp_path)), config_maps={}, secrets={}, tokens={})
    materialize(plans)
    volumes = tmp_path / "pods" / UID / "volumes"
    assert sorted(str(p.relative_to(volumes)) for p in volumes.rglob("*")) == ["kubernetes.io~empty-dir",
                                                                              "kubernetes.io~empty-dir/data"]


@pytest.mark.parametrize(("security_context", "mode", "owner"), [
    ({}, 0o644, None),
    ({"runAsUser": 1000}, 0o600, 1000),  # FsUserFrom: every container runs as 1000
    ({"fsGroup": 2000}, 0o600, None),  # SetVolumeOwnership then adds group read
    ({"fsGroup": True}, 0o644, None),  # not a group
])
def test_a_projected_token_is_0600_and_owned_by_the_pods_user(security_context: dict[str, Any], mode: int,
                                                               owner: int | None) -> None:
    """upstream collectData's ServiceAccountToken branch: like trust bundles and pod certificates, the token is
    private to the pod's user (or group), whatever the defaultMode; the namespace and CA files keep it."""
    body = pod_from_body({"metadata": {"name": "web", "namespace": "shop", "uid": UID},
                          "spec": {"securityContext": security_context, "volumes": [KUBE_API_ACCESS],
                                   "containers": [{"name": "app", "image": "nginx:1"}]}})
    plans = plugins.plan_volumes(body, layout=LAYOUT, config_maps=CONFIG_MAPS, secrets=SECRETS, tokens=TOKENS)
    by_path = {f.path: f for f in plans["kube-api-access-x1y2z"].files}
    assert (by_path["token"].mode, by_path["token"].owner) == (mode, owner)
    assert by_path["ca.crt"].mode == by_path["namespace"].mode == 0o644


# ------------------------------------------------------------------------------------ persistent volumes

PERSISTENT_VOLUMES = [
    {"name": "data", "persistentVolumeClaim": {"claimName": "data-claim", "readOnly": True}},
    {"name": "raw", "persistentVolumeClaim": {"claimName": "raw-claim"}},
    {"name": "scratch", "csi": {"driver": "inline.example.com"}},
    {"name": "unused", "ephemeral": {"volumeClaimTemplate": {}}},
    {"name": "cfg", "configMap": {"name": "cfg"}},
]


def persistent_pod(devices: list[dict[str, Any]] | None = None) -> Pod:
    container: dict[str, Any] = {"name": "app", "image": "nginx:1", "volumeMounts": [
        {"name": "data", "mountPath": "/data"}, {"name": "scratch", "mountPath": "/scratch"},
        {"name": "cfg", "mountPath": "/cfg"}],
        "volumeDevices": devices if devices is not None else [{"name": "raw", "devicePath": "/dev/xvda"}]}
    return pod_from_body({"metadata": {"name": "web", "namespace": "shop", "uid": UID},
                          "spec": {"volumes": PERSISTENT_VOLUMES, "containers": [container]}})


def mounted_volume(outer: str, **spec: Any) -> pvc.VolumeToMount:
    fields: dict[str, Any] = {"outer_name": outer, "name": "pv-" + outer, "plugin": pvc.PLUGIN_CSI,
                              "read_only": False, "pv_name": "pv-" + outer, "driver": "csi.example.com",
                              "volume_handle": outer}
    fields.update(spec)
    volume = pvc.VolumeSpec(**fields)
    return pvc.VolumeToMount(name=f"kubernetes.io/csi/csi.example.com^{outer}", spec=volume, pod_uid=UID,
                             outer_names=(outer,), attachable=True, device_mountable=True)


MOUNTED = {
    "data": mounted_volume("data", read_only=True),
    "raw": mounted_volume("raw", volume_mode="Block"),
    "scratch": mounted_volume("scratch", name="scratch", pv_name="", lifecycle="Ephemeral"),
}


def persistent_plans(pod: Pod, persistent: dict[str, pvc.VolumeToMount] | None = MOUNTED) -> dict[str, VolumePlan]:
    return plugins.plan_volumes(pod, layout=LAYOUT, config_maps=CONFIG_MAPS, secrets=SECRETS, tokens=TOKENS,
                                persistent=persistent)


def test_mounted_persistent_volumes_are_planned_where_their_plugin_set_them_up() -> None:
    plans = persistent_plans(persistent_pod())
    assert list(plans) == ["data", "raw", "scratch", "cfg"]  # the unused ephemeral volume is never mounted
    assert plans["data"] == VolumePlan(name="data", kind="persistentVolumeClaim",
                                       host_path=vdir("csi", "pv-data") + "/mount", read_only=True)
    assert plans["raw"] == VolumePlan(name="raw", kind="persistentVolumeClaim", block=True,
                                      host_path=f"{ROOT}/pods/{UID}/volumeDevices/kubernetes.io~csi/pv-raw")
    assert plans["scratch"] == VolumePlan(name="scratch", kind="csi", host_path=vdir("csi", "scratch") + "/mount")


def test_a_used_persistent_volume_not_mounted_is_a_caller_bug() -> None:
    with pytest.raises(ValueError, match="'raw' is used but not mounted"):
        persistent_plans(persistent_pod(), {k: v for k, v in MOUNTED.items() if k != "raw"})


def test_without_their_mounted_volumes_persistent_volumes_are_refused_as_before() -> None:
    with pytest.raises(VolumeError, match="unsupported volume type persistentVolumeClaim"):
        persistent_plans(persistent_pod(), None)


def test_persistent_volumes_as_mounts_and_devices() -> None:
    pod = persistent_pod()
    plans = persistent_plans(pod)
    container = pod.spec.containers[0]
    mounts = plugins.container_mounts(pod, container, plans, {})
    assert [(m.container_path, m.host_path, m.readonly) for m in mounts] == [
        ("/data", vdir("csi", "pv-data") + "/mount", True), ("/scratch", vdir("csi", "scratch") + "/mount", False),
        ("/cfg", vdir("configmap", "cfg"), True)]
    assert plugins.container_devices(container, plans) == [
        Device(container_path="/dev/xvda", host_path=f"{ROOT}/pods/{UID}/volumeDevices/kubernetes.io~csi/pv-raw",
               permissions="mrw")]
    read_only = {**plans, "raw": dataclasses.replace(plans["raw"], read_only=True)}
    assert plugins.container_devices(container, read_only)[0].permissions == "r"


@pytest.mark.parametrize(("devices", "message"), [
    ([{"name": "raw", "devicePath": "dev/xvda"}], "error DevicePath `dev/xvda` must be an absolute path"),
    ([{"name": "data", "devicePath": "/dev/xvda"}], 'cannot find volume "data" to pass into container "app"'),
    ([{"name": "nope", "devicePath": "/dev/xvda"}], 'cannot find volume "nope" to pass into container "app"'),
])
def test_container_device_errors(devices: list[dict[str, Any]], message: str) -> None:
    pod = persistent_pod(devices)
    with pytest.raises(VolumeError, match=re.escape(message)):
        plugins.container_devices(pod.spec.containers[0], persistent_plans(pod))


def test_a_device_without_a_block_volume_is_still_refused_at_the_mounts() -> None:
    pod = persistent_pod([{"name": "data", "devicePath": "/dev/xvda"}])
    with pytest.raises(VolumeError, match='cannot find volume "data" to pass into container "app": kopflet has no raw '
                                          "block volumes"):
        plugins.container_mounts(pod, pod.spec.containers[0], persistent_plans(pod), {})


def test_a_block_volume_cannot_be_mounted() -> None:
    pod = persistent_pod()
    plans = persistent_plans(pod)
    container = dataclasses.replace(pod.spec.containers[0], volume_mounts=({"name": "raw", "mountPath": "/raw"},))
    with pytest.raises(VolumeError, match='cannot find volume "raw" to mount into container "app"'):
        plugins.container_mounts(pod, container, plans, {})


def test_materialize_leaves_persistent_volumes_to_the_volume_manager(tmp_path: Path) -> None:
    plan_ = VolumePlan(name="data", kind="persistentVolumeClaim", host_path=str(tmp_path / "csi" / "mount"))
    materialize({"data": plan_}, fs_group=2000)
    assert not (tmp_path / "csi").exists()
