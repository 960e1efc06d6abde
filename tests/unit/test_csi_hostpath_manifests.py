"""manifests/csi-hostpath/: upstream's hostpath CSI driver deployment (csi-driver-host-path's kubernetes-latest, as
k8s.io/kubernetes v1.37.1's e2e manifests carry it) less the containers the stack cannot run, each sidecar's RBAC from
its module at the pinned tag, the CSIDriver and a StorageClass; images pinned as devstack/versions.env pins them.

Pure: reads the manifests and versions.env, and the pinned modules when they are in the Go module cache.
"""

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.test_images import ROOT, b
from tests.unit.test_images_csi import NOT_BUILT, SIDECARS, _module_dir

DIR = ROOT / "manifests" / "csi-hostpath"
DRIVER = "hostpath.csi.k8s.io"
# What kopflet's copy leaves out of upstream's csi-hostpath-plugin.yaml (its header says why).
DROPPED_CONTAINERS = {"csi-external-health-monitor-controller", "csi-snapshotter", "csi-snapshot-metadata"}
DROPPED_BINDINGS = {
    ("ClusterRoleBinding", "csi-hostpathplugin-health-monitor-controller-cluster-role"),
    ("ClusterRoleBinding", "csi-hostpathplugin-snapshotter-cluster-role"),
    ("ClusterRoleBinding", "csi-hostpathplugin-snapshot-metadata-cluster-role"),
    ("RoleBinding", "csi-hostpathplugin-health-monitor-controller-role"),
    ("RoleBinding", "csi-hostpathplugin-snapshotter-role"),
}
DROPPED_VOLUMES = {"csi-snapshot-metadata-server-certs"}
RBAC = {  # kopflet's file -> (the sidecar, its module)
    "rbac-csi-attacher.yaml": "csi-attacher",
    "rbac-csi-provisioner.yaml": "csi-provisioner",
    "rbac-csi-resizer.yaml": "csi-resizer",
}
Key = tuple[str, str]


def _objects(name: str) -> dict[Key, dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all((DIR / name).read_text()) if o}


def _all() -> dict[Key, dict[str, Any]]:
    found: dict[Key, dict[str, Any]] = {}
    for path in sorted(DIR.glob("*.yaml")):
        for key, obj in _objects(path.name).items():
            assert key not in found, key
            found[key] = obj
    return found


def _statefulset(objects: dict[Key, dict[str, Any]]) -> dict[str, Any]:
    return objects[("StatefulSet", "csi-hostpathplugin")]


def _body(path: Path) -> str:
    """The file without kopflet's header (the comment lines before the first line of upstream's text)."""
    lines = path.read_text().splitlines(keepends=True)
    end = next(i for i, line in enumerate(lines) if line == "#\n")  # the header ends with a bare '#'
    return "".join(lines[end + 1 :])


def test_every_file_says_where_it_came_from():
    for path in sorted(DIR.glob("*.yaml")):
        head = path.read_text().split("\n", 1)[0]
        assert head.startswith("# "), path.name
    assert "ONE deliberate change" in (DIR / "csi-hostpath-plugin.yaml").read_text()


def test_images_are_pinned_and_the_built_ones_are_images_builds():
    versions = b.versions_env()
    pinned = {f"registry.k8s.io/sig-storage/{n}": versions[v] for n, v in {**SIDECARS, **NOT_BUILT}.items()}
    containers = _statefulset(_all())["spec"]["template"]["spec"]["containers"]
    images = dict(c["image"].rsplit(":", 1) for c in containers)
    assert {n.rsplit("/", 1)[1] for n in images} == {
        "hostpathplugin", "csi-node-driver-registrar", "livenessprobe", "csi-attacher", "csi-provisioner",
        "csi-resizer"}  # fmt: skip
    for repo, tag in images.items():
        assert pinned[repo] == tag, repo
        name = repo.rsplit("/", 1)[1]
        assert (name in b.CSI_SIDECARS) != (name in NOT_BUILT), name


def test_the_deployment_hangs_together():
    objects = _all()
    sts = _statefulset(objects)
    spec = sts["spec"]["template"]["spec"]
    assert sts["spec"]["replicas"] == 1 and spec["serviceAccountName"] == "csi-hostpathplugin-sa"
    assert objects[("CSIDriver", DRIVER)]["spec"]["volumeLifecycleModes"] == ["Persistent", "Ephemeral"]
    assert objects[("StorageClass", "csi-hostpath-sc")]["provisioner"] == DRIVER
    assert objects[("StorageClass", "csi-hostpath-sc")]["allowVolumeExpansion"] is True
    hostpath = next(c for c in spec["containers"] if c["name"] == "hostpath")
    assert f"--drivername={DRIVER}" in hostpath["args"]
    # every mounted volume is declared, every declared volume mounted
    mounted = {m["name"] for c in spec["containers"] for m in c.get("volumeMounts", [])}
    assert mounted == {v["name"] for v in spec["volumes"]}
    # the registrar tells the kubelet where the driver's socket is: the socket-dir host path
    registrar = next(c for c in spec["containers"] if c["name"] == "node-driver-registrar")
    socket_dir = next(v for v in spec["volumes"] if v["name"] == "socket-dir")["hostPath"]["path"]
    assert f"--kubelet-registration-path={socket_dir}/csi.sock" in registrar["args"]
    # each binding's role is one of the sidecars' RBAC files, bound to the plugin's service account
    for (kind, name), obj in objects.items():
        if kind in ("ClusterRoleBinding", "RoleBinding") and name.startswith("csi-hostpathplugin-"):
            role = obj["roleRef"]
            assert (role["kind"], role["name"]) in objects, name
            assert obj["subjects"][0]["name"] == "csi-hostpathplugin-sa", name


def _e2e_hostpath_dir() -> Path | None:
    k8s = _module_dir("k8s.io/kubernetes", b.versions_env()["KUBERNETES_VERSION"])
    path = k8s / "test/e2e/testing-manifests/storage-csi/hostpath/hostpath" if k8s else None
    return path if path is not None and (path / "csi-hostpath-plugin.yaml").is_file() else None


@pytest.mark.skipif(_e2e_hostpath_dir() is None, reason="the pinned k8s.io/kubernetes module is not in the cache")
def test_the_deployment_is_upstreams_less_what_the_stack_cannot_run():
    upstream_text = (_e2e_hostpath_dir() / "csi-hostpath-plugin.yaml").read_text()
    upstream = {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(upstream_text) if o}
    ours = _objects("csi-hostpath-plugin.yaml")
    assert set(upstream) - set(ours) == DROPPED_BINDINGS and set(ours) <= set(upstream)
    for key in ours:
        if key[0] != "StatefulSet":
            assert ours[key] == upstream[key], key
    sts = _statefulset(upstream)
    spec = sts["spec"]["template"]["spec"]
    spec["containers"] = [c for c in spec["containers"] if c["name"] not in DROPPED_CONTAINERS]
    spec["volumes"] = [v for v in spec["volumes"] if v["name"] not in DROPPED_VOLUMES]
    assert _statefulset(ours) == sts
    driverinfo = _e2e_hostpath_dir() / "csi-hostpath-driverinfo.yaml"
    assert _body(DIR / "csi-hostpath-driverinfo.yaml") == driverinfo.read_text()


@pytest.mark.parametrize("name", list(RBAC))
def test_the_rbac_is_the_sidecar_modules_at_the_pinned_tag(name):
    sidecar = RBAC[name]
    module = b.CSI_SIDECARS[sidecar][0]
    version = b.versions_env()[SIDECARS[sidecar]]
    text = (DIR / name).read_text()
    assert f"{module} {version}" in text.split("\n#\n", 1)[0]
    d = _module_dir(module, version)
    if d is None:
        pytest.skip(f"{module} {version} is not in the Go module cache")
    assert _body(DIR / name) == (d / "deploy" / "kubernetes" / "rbac.yaml").read_text()
