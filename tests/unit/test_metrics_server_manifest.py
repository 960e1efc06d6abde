"""manifests/cluster/metrics-server.yaml: upstream's release components.yaml for the pinned metrics-server, with one
deliberate change (--kubelet-insecure-tls), and the image images/build.py builds.

Pure: reads the manifest, versions.env and, when it is in the Go module cache, the pinned module's manifests/.
"""

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.test_images import ROOT, b

MANIFEST = ROOT / "manifests" / "cluster" / "metrics-server.yaml"
KOPFLET_ARGS = ["--kubelet-insecure-tls"]  # the one change, documented at the top of the manifest
UPSTREAM_ARGS = [
    "--cert-dir=/tmp",
    "--secure-port=10250",
    "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
    "--kubelet-use-node-status-port",
    "--metric-resolution=15s",
]
UPSTREAM_IMAGE = "gcr.io/k8s-staging-metrics-server/metrics-server:master"  # manifests/base, before release's patch


def _objects() -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(MANIFEST.read_text()) if o}


def _container(objects: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    [container] = objects[("Deployment", "metrics-server")]["spec"]["template"]["spec"]["containers"]
    return container


def test_the_image_is_the_pinned_release_images_build_makes():
    version = b.versions_env()["METRICS_SERVER_VERSION"]
    container = _container(_objects())
    assert container["image"] == f"registry.k8s.io/metrics-server/metrics-server:{version}"
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert MANIFEST.read_text().startswith(f"# metrics-server {version} ")


def test_the_args_are_upstreams_plus_kubelet_insecure_tls_only():
    args = _container(_objects())["args"]
    assert args == UPSTREAM_ARGS + KOPFLET_ARGS
    # upstream's address order already reaches the kubelet on the node's InternalIP: no change needed there
    [types] = [a.split("=", 1)[1] for a in args if a.startswith("--kubelet-preferred-address-types=")]
    assert types.split(",")[0] == "InternalIP"
    text = MANIFEST.read_text()
    assert "ONE deliberate change" in text and "self-signed" in text


def test_the_objects_of_components_yaml():
    objects = _objects()
    assert set(objects) == {
        ("ServiceAccount", "metrics-server"),
        ("ClusterRole", "system:aggregated-metrics-reader"),
        ("ClusterRole", "system:metrics-server"),
        ("RoleBinding", "metrics-server-auth-reader"),
        ("ClusterRoleBinding", "metrics-server:system:auth-delegator"),
        ("ClusterRoleBinding", "system:metrics-server"),
        ("Service", "metrics-server"),
        ("Deployment", "metrics-server"),
        ("APIService", "v1beta1.metrics.k8s.io"),
    }
    for obj in objects.values():
        assert obj["metadata"]["labels"]["k8s-app"] == "metrics-server"  # the base's commonLabels
    api = objects[("APIService", "v1beta1.metrics.k8s.io")]["spec"]
    assert api["service"] == {"name": "metrics-server", "namespace": "kube-system"} and api["insecureSkipTLSVerify"]
    # what metrics-server asks of the kubelet's authorizer (nodes/metrics), as upstream's ClusterRole grants it
    rules = objects[("ClusterRole", "system:metrics-server")]["rules"]
    assert {"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]} in rules


def _module_manifests() -> Path | None:
    """The pinned metrics-server module's manifests/, when it is in the Go module cache."""
    if shutil.which("go") is None:
        return None
    modcache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True).stdout.strip()
    path = Path(modcache) / f"sigs.k8s.io/metrics-server@{b.versions_env()['METRICS_SERVER_VERSION']}" / "manifests"
    return path if (path / "base" / "kustomization.yaml").is_file() else None


def _without_common_labels(value: Any) -> Any:
    """The object without what the base's commonLabels adds (k8s-app: metrics-server in labels and selectors)."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key in ("labels", "matchLabels", "selector") and isinstance(item, dict):
                item = {k: v for k, v in item.items() if k != "k8s-app"}
            item = _without_common_labels(item)
            if item != {} or key == "emptyDir":
                out[key] = item
        return out
    if isinstance(value, list):
        return [_without_common_labels(v) for v in value]
    return value


@pytest.mark.skipif(_module_manifests() is None, reason="the pinned metrics-server module is not in the module cache")
def test_the_manifest_is_the_modules_release_overlay():
    """Each object is the module's manifests/base one (the release overlay only adds commonLabels and the image),
    the Deployment's args with kopflet's one change."""
    manifests = _module_manifests()
    base = manifests / "base"
    kustomization = yaml.safe_load((base / "kustomization.yaml").read_text())
    assert kustomization["commonLabels"] == {"k8s-app": "metrics-server"}
    upstream = {
        (o["kind"], o["metadata"]["name"]): o
        for name in kustomization["resources"]
        for o in yaml.safe_load_all((base / name).read_text())
        if o
    }
    release = yaml.safe_load((manifests / "components" / "release" / "kustomization.yaml").read_text())
    [patch] = release["images"]
    version = b.versions_env()["METRICS_SERVER_VERSION"]
    assert (patch["name"], patch["newName"], patch["newTag"]) == (
        UPSTREAM_IMAGE.rsplit(":", 1)[0], "registry.k8s.io/metrics-server/metrics-server", version)  # fmt: skip
    ours = _objects()
    assert set(ours) == set(upstream)
    container = _container(upstream)
    assert container["image"] == UPSTREAM_IMAGE and container["args"] == UPSTREAM_ARGS
    container["image"] = f"{patch['newName']}:{patch['newTag']}"
    container["args"] = UPSTREAM_ARGS + KOPFLET_ARGS
    for key, obj in upstream.items():
        assert _without_common_labels(ours[key]) == _without_common_labels(obj), key
