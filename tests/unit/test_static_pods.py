"""kopflet.config.static_pods: manifests to static pods and their mirror pods."""

from __future__ import annotations

import pytest

from kopflet.config import static_pods
from kopflet.config.static_pods import ManifestError

MANIFEST = """
apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: web}}
spec:
  containers: [{name: c, image: busybox}]
"""


def test_static_pod_is_named_bound_and_annotated() -> None:
    pod = static_pods.static_pod("/etc/m/web.yaml", MANIFEST, "node-a", "2026-11-22T00:00:00Z")
    meta = pod.body["metadata"]
    assert (pod.name, pod.namespace) == ("web-node-a", "default")
    assert meta["uid"] == pod.uid and len(pod.uid) == 32
    assert meta["annotations"] == {"kubernetes.io/config.hash": pod.uid, "kubernetes.io/config.source": "file",
                                   "kubernetes.io/config.seen": "2026-11-22T00:00:00Z"}
    assert pod.body["spec"]["nodeName"] == "node-a"
    assert {"operator": "Exists", "effect": "NoExecute"} in pod.body["spec"]["tolerations"]


def test_uid_changes_with_content_node_and_file_only() -> None:
    uid = static_pods.static_pod("/m/a.yaml", MANIFEST, "n", "t1").uid
    assert static_pods.static_pod("/m/a.yaml", MANIFEST, "n", "t2").uid == uid  # seen time is not content
    assert static_pods.static_pod("/m/a.yaml", MANIFEST.replace("busybox", "pause"), "n", "t1").uid != uid
    assert static_pods.static_pod("/m/a.yaml", MANIFEST, "other", "t1").uid != uid
    assert static_pods.static_pod("/m/b.yaml", MANIFEST, "n", "t1").uid != uid


def test_mirror_pod_points_at_the_static_pod_and_the_node() -> None:
    pod = static_pods.static_pod("/m/a.yaml", MANIFEST, "n", "t")
    mirror = static_pods.mirror_pod(pod, "n", "node-uid")
    assert mirror["metadata"]["annotations"]["kubernetes.io/config.mirror"] == pod.uid
    assert "uid" not in mirror["metadata"] and "status" not in mirror
    assert mirror["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "node-uid", "controller": True}]
    assert static_pods.is_mirror(mirror) and not static_pods.is_mirror(pod.body)


@pytest.mark.parametrize(("text", "message"), [
    ("{", "not valid YAML"),
    ("- a\n- b", "expected a Pod object"),
    ("apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {}", "kind Pod"),
    ("apiVersion: v1\nkind: Pod\nmetadata: {}\nspec: {}", "metadata.name: Required value"),
    ("apiVersion: v1\nkind: Pod\nmetadata: {name: x}", "spec: Required value"),
])
def test_broken_manifests_name_the_file_and_problem(text: str, message: str) -> None:
    with pytest.raises(ManifestError, match=message) as exc:
        static_pods.static_pod("/m/broken.yaml", text, "n", "t")
    assert str(exc.value).startswith("/m/broken.yaml: ")


UNMASKED = 'spec.{}.securityContext.procMount: Invalid value: "Unmasked": `hostUsers` must be false to use `Unmasked`'
UNMASKED_C = "{name: c, image: busybox, securityContext: {procMount: Unmasked}}"
UNMASKED_I = "{name: i, image: busybox, securityContext: {procMount: Unmasked}}"


@pytest.mark.parametrize(("spec", "errors"), [
    (f"containers: [{UNMASKED_C}]", [UNMASKED.format("containers[0]")]),
    (f"hostUsers: true\n  containers: [{UNMASKED_C}]", [UNMASKED.format("containers[0]")]),
    (f"containers: [{{name: a, image: busybox}}, {UNMASKED_C}]\n  initContainers: [{UNMASKED_I}]",
     [UNMASKED.format("containers[1]"), UNMASKED.format("initContainers[0]")]),
    (f"hostUsers: false\n  containers: [{UNMASKED_C}]", []),
    ("containers: [{name: c, image: busybox, securityContext: {procMount: Default}}]", []),
], ids=["host users by default", "hostUsers true", "every container, containers first", "hostUsers false",
        "Default"])
def test_unmasked_proc_mount_needs_hostusers_false(spec: str, errors: list[str]) -> None:
    """Upstream validates a manifest as the apiserver validates a pod (tryDecodeSinglePod: ValidatePodCreate):
    an unmasked /proc in the host's user namespace is refused, the file skipped."""
    text = f"apiVersion: v1\nkind: Pod\nmetadata: {{name: x}}\nspec:\n  {spec}\n"
    if not errors:
        assert static_pods.static_pod("/m/p.yaml", text, "n", "t").name == "x-n"
        return
    with pytest.raises(ManifestError) as exc:
        static_pods.static_pod("/m/p.yaml", text, "n", "t")
    assert str(exc.value) == f"/m/p.yaml: invalid pod: [{' '.join(errors)}]"


@pytest.mark.parametrize(("name", "expected"), [
    ("web.yaml", True), ("web.yml", True), ("web.json", True), (".web.yaml.swp", False), ("web.yaml~", False),
    ("README", False),
])
def test_manifest_names(name: str, expected: bool) -> None:
    assert static_pods.is_manifest_name(name) is expected


BILLION_LAUGHS = """\
apiVersion: v1
kind: Pod
metadata: {name: laughs}
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
spec: {containers: [{name: c, image: busybox, command: *i}]}
"""


@pytest.mark.parametrize("text", [
    BILLION_LAUGHS,
    "apiVersion: v1\nkind: Pod\nmetadata: {name: loop}\nspec: &s {containers: [{name: c, image: i, x: *s}]}\n",
])
def test_excessive_aliasing_is_refused_not_expanded(text: str) -> None:
    """~600 bytes that would expand to ~10^9 nodes, or a loop: refused at once (go-yaml's "excessive aliasing")."""
    with pytest.raises(ManifestError, match=r"^/m/bad\.yaml: .*excessive aliasing$"):
        static_pods.static_pod("/m/bad.yaml", text, "node", "")


def test_ordinary_anchors_are_fine() -> None:
    text = ("apiVersion: v1\nkind: Pod\nmetadata: {name: anchors}\nspec:\n  containers:\n"
            "  - {name: a, image: busybox, env: &env [{name: X, value: '1'}]}\n"
            "  - {name: b, image: busybox, env: *env}\n")
    pod = static_pods.static_pod("/m/anchors.yaml", text, "node", "")
    assert pod.body["spec"]["containers"][1]["env"] == [{"name": "X", "value": "1"}]


FORBIDDEN = "spec.{}: Forbidden: when `hostUsers` is false"


@pytest.mark.parametrize(("spec", "errors"), [
    ("hostUsers: false\n  containers: [{name: c, image: busybox}]", []),
    ("hostNetwork: true\n  hostPID: true\n  hostIPC: true\n  containers: [{name: c, image: busybox}]", []),
    ("hostUsers: false\n  hostNetwork: true\n  hostPID: true\n  hostIPC: true\n  containers: [{name: c, image: b}]",
     [FORBIDDEN.format("hostNetwork"), FORBIDDEN.format("HostPID"), FORBIDDEN.format("HostIPC")]),
    ("hostUsers: false\n  containers: [{name: c, image: b, volumeDevices: [{name: v, devicePath: /dev/x}]}]\n"
     "  initContainers: [{name: i, image: b, volumeDevices: [{name: v, devicePath: /dev/x}]}]",
     [FORBIDDEN.format("initContainers[0].volumeDevices"), FORBIDDEN.format("containers[0].volumeDevices")]),
], ids=["hostUsers false alone", "host namespaces with the host's users", "host namespaces", "volumeDevices"])
def test_hostusers_false_shares_no_host_namespace(spec: str, errors: list[str]) -> None:
    """Upstream validateHostUsers, which the kubelet applies to a manifest (tryDecodeSinglePod: ValidatePodCreate)."""
    text = f"apiVersion: v1\nkind: Pod\nmetadata: {{name: x}}\nspec:\n  {spec}\n"
    if not errors:
        assert static_pods.static_pod("/m/p.yaml", text, "n", "t").name == "x-n"
        return
    with pytest.raises(ManifestError) as exc:
        static_pods.static_pod("/m/p.yaml", text, "n", "t")
    assert str(exc.value) == f"/m/p.yaml: invalid pod: [{' '.join(errors)}]"
