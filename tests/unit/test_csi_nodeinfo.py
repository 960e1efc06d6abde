"""What CSI driver registration writes into the Node and its CSINode (upstream nodeinfomanager.go): the pure rules as
tables, then the node info manager's calls, retries and ownership against an in-memory apiserver."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from kopflet.client.kubeapi import KubeApiError
from kopflet.volumes.csi import nodeinfo
from kopflet.volumes.csi.nodeinfo import ANNOTATION_KEY_NODE_ID as KEY
from kopflet.volumes.csi.nodeinfo import MIGRATED_PLUGINS_ANNOTATION_KEY as MIGRATED
from kopflet.volumes.csi.nodeinfo import NodeInfoError
from kopflet.volumes.csi.nodeinfomanager import NodeInfoManager, NodeInfoManagerError
from tests.unit.csi_fakes import FakeKube

ALL_MIGRATED = ("kubernetes.io/aws-ebs,kubernetes.io/azure-disk,kubernetes.io/azure-file,kubernetes.io/cinder,"
                "kubernetes.io/gce-pd,kubernetes.io/portworx-volume,kubernetes.io/vsphere-volume")

# ------------------------------------------------------------------------------------------ the Node


@pytest.mark.parametrize(("annotations", "driver", "node_id", "expected"), [
    pytest.param(None, "a.csi", "n1", {KEY: '{"a.csi":"n1"}'}, id="first driver"),
    pytest.param({"other": "x"}, "a.csi", "n1", {"other": "x", KEY: '{"a.csi":"n1"}'}, id="other annotations kept"),
    pytest.param({KEY: '{"b.csi":"n2"}'}, "a.csi", "n1", {KEY: '{"a.csi":"n1","b.csi":"n2"}'},
                 id="second driver: keys sorted, compact"),
    pytest.param({KEY: '{"a.csi":"n0"}'}, "a.csi", "n1", {KEY: '{"a.csi":"n1"}'}, id="new node ID"),
    pytest.param({KEY: '{"a.csi":"n1"}'}, "a.csi", "n1", None, id="already there: no update"),
    pytest.param({KEY: ""}, "a.csi", "n1", {KEY: '{"a.csi":"n1"}'}, id="empty annotation"),
    pytest.param({KEY: "null"}, "a.csi", "n1", {KEY: '{"a.csi":"n1"}'}, id="JSON null: no map"),
    pytest.param({KEY: '{"a.csi":null}'}, "a.csi", "", None, id="a null ID is an empty one"),
    pytest.param(None, "a.csi", "<&>", {KEY: '{"a.csi":"\\u003c\\u0026\\u003e"}'}, id="Go escapes HTML"),
])
def test_update_node_id(annotations: Mapping[str, str] | None, driver: str, node_id: str,
                        expected: dict[str, str] | None) -> None:
    assert nodeinfo.update_node_id(annotations, driver, node_id) == expected


@pytest.mark.parametrize(("value", "error"), [
    ("[1]", "json: cannot unmarshal array into Go value of type map[string]string"),
    ('{"a":1}', "json: cannot unmarshal number into Go value of type string"),
    ('"x"', "json: cannot unmarshal string into Go value of type map[string]string"),
])
def test_a_bad_annotation_is_upstreams_error(value: str, error: str) -> None:
    with pytest.raises(NodeInfoError) as caught:
        nodeinfo.update_node_id({KEY: value}, "a.csi", "n1")
    assert str(caught.value) == (f'failed to parse node\'s "csi.volume.kubernetes.io/nodeid" annotation value '
                                 f"({json.dumps(value)}) err={error}")
    with pytest.raises(NodeInfoError):
        nodeinfo.remove_node_id({KEY: value}, "a.csi")


def test_a_bad_json_annotation_is_refused() -> None:
    with pytest.raises(NodeInfoError, match=r'^failed to parse node\'s "csi.volume.kubernetes.io/nodeid" annotation '
                                            r'value \("\{nope"\) err='):
        nodeinfo.node_id_map({KEY: "{nope"})


@pytest.mark.parametrize(("annotations", "driver", "expected"), [
    pytest.param(None, "a.csi", None, id="no annotations"),
    pytest.param({KEY: ""}, "a.csi", None, id="empty annotation"),
    pytest.param({KEY: '{"b.csi":"n2"}'}, "a.csi", None, id="not there"),
    pytest.param({KEY: '{"a.csi":"n1","b.csi":"n2"}', "o": "x"}, "a.csi", {KEY: '{"b.csi":"n2"}', "o": "x"},
                 id="one of two"),
    pytest.param({KEY: '{"a.csi":"n1"}', "o": "x"}, "a.csi", {"o": "x"}, id="the last one: annotation removed"),
])
def test_remove_node_id(annotations: Mapping[str, str] | None, driver: str, expected: dict[str, str] | None) -> None:
    assert nodeinfo.remove_node_id(annotations, driver) == expected


@pytest.mark.parametrize(("labels", "topology", "expected"), [
    pytest.param({"a": "1"}, None, None, id="no topology"),
    pytest.param({"a": "1"}, {}, None, id="empty topology"),
    pytest.param(None, {"topology.hostpath.csi/node": "n1"}, {"topology.hostpath.csi/node": "n1"}, id="added"),
    pytest.param({"a": "1", "zone": "z"}, {"zone": "z"}, {"a": "1", "zone": "z"},
                 id="already there: still an update (an empty patch), as upstream's"),
])
def test_update_topology_labels(labels: Mapping[str, str] | None, topology: Mapping[str, str] | None,
                                expected: dict[str, str] | None) -> None:
    assert nodeinfo.update_topology_labels(labels, topology) == expected


def test_a_topology_collision_is_upstreams_error() -> None:
    with pytest.raises(NodeInfoError) as caught:
        nodeinfo.update_topology_labels({"zone": "a", "rack": "1"}, {"zone": "b", "rack": "2"})
    assert str(caught.value) == 'detected topology value collision: driver reported "rack":"2" but existing label ' \
                                'is "rack":"1"'


@pytest.mark.parametrize(("metadata", "labels", "annotations", "patch"), [
    pytest.param({}, None, None, {}, id="nothing"),
    pytest.param({"labels": {"a": "1"}}, {"a": "1"}, None, {}, id="same labels: empty patch"),
    pytest.param({"labels": {"a": "1"}, "annotations": {"x": "1"}}, {"a": "1", "b": "2"}, {"x": "2"},
                 {"metadata": {"labels": {"b": "2"}, "annotations": {"x": "2"}}}, id="added and changed"),
    pytest.param({"annotations": {KEY: "{}", "o": "x"}}, None, {"o": "x"},
                 {"metadata": {"annotations": {KEY: None}}}, id="removed: null"),
])
def test_node_patch(metadata: dict[str, Any], labels: dict[str, str] | None, annotations: dict[str, str] | None,
                    patch: dict[str, Any]) -> None:
    assert nodeinfo.node_patch(metadata, labels, annotations) == patch


# ---------------------------------------------------------------------------------------------- CSINode


@pytest.mark.parametrize(("annotations", "expected"), [
    pytest.param(None, {MIGRATED: ALL_MIGRATED}, id="none"),
    pytest.param({"o": "x"}, {"o": "x", MIGRATED: ALL_MIGRATED}, id="others kept"),
    pytest.param({MIGRATED: "kubernetes.io/gce-pd"}, {MIGRATED: ALL_MIGRATED}, id="some"),
    pytest.param({MIGRATED: ",".join(reversed(ALL_MIGRATED.split(",")))}, None, id="all, in another order"),
    pytest.param({MIGRATED: ALL_MIGRATED}, None, id="all"),
])
def test_set_migration_annotation(annotations: dict[str, str] | None, expected: dict[str, str] | None) -> None:
    assert nodeinfo.set_migration_annotation(annotations) == expected


def test_new_csi_node() -> None:
    assert nodeinfo.new_csi_node("node-a", "uid-a") == {
        "apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
        "metadata": {"name": "node-a",
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "uid-a"}],
                     "annotations": {MIGRATED: ALL_MIGRATED}},
        "spec": {"drivers": []}}


def _owned(*refs: tuple[str, str, str]) -> dict[str, Any]:
    return {"metadata": {"ownerReferences": [{"kind": k, "name": n, "uid": u} for k, n, u in refs]}}


@pytest.mark.parametrize(("csi_node", "expected"), [
    pytest.param(_owned(("Node", "node-a", "uid-a")), (True, "uid-a"), id="ours"),
    pytest.param(_owned(("Node", "node-a", "uid-old")), (False, "uid-old"), id="an earlier Node of the name"),
    pytest.param(_owned(("Pod", "node-a", "uid-a")), (False, ""), id="not a Node"),
    pytest.param(_owned(("Node", "node-b", "uid-b"), ("Node", "node-a", "uid-a")), (True, "uid-a"), id="among others"),
    pytest.param({"metadata": {}}, (False, ""), id="no owner"),
])
def test_owner_uid(csi_node: dict[str, Any], expected: tuple[bool, str]) -> None:
    assert nodeinfo.owner_uid(csi_node, "node-a", "uid-a") == expected


def _csi(*drivers: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "node-a", "annotations": {MIGRATED: ALL_MIGRATED} if annotations is None
                         else annotations, "resourceVersion": "7"}, "spec": {"drivers": list(drivers)}}


A = {"name": "a.csi", "nodeID": "n1", "topologyKeys": ["zone"], "allocatable": {"count": 5}}
B = {"name": "b.csi", "nodeID": "n2", "topologyKeys": []}


@pytest.mark.parametrize(("csi_node", "args", "expected"), [
    pytest.param(_csi(), ("a.csi", "n1", 5, {"zone": "z"}), _csi(A), id="first driver"),
    pytest.param(_csi(A), ("a.csi", "n1", 5, {"zone": "other value, same key"}), None, id="the same: unchanged"),
    pytest.param(_csi(A, B), ("a.csi", "n9", 5, {"zone": "z"}), _csi(B, {**A, "nodeID": "n9"}),
                 id="changed: moved to the end"),
    pytest.param(_csi(B), ("a.csi", "n1", 0, {"zone": "z", "rack": "r"}),
                 _csi(B, {"name": "a.csi", "nodeID": "n1", "topologyKeys": ["rack", "zone"]}),
                 id="no limit: no allocatable; keys sorted"),
    pytest.param(_csi(A), ("a.csi", "n1", 0, {"zone": "z"}), _csi({k: v for k, v in A.items() if k != "allocatable"}),
                 id="limit dropped"),
    pytest.param(_csi(A, annotations={}), ("a.csi", "n1", 5, {"zone": "z"}), _csi(A),
                 id="same entry, annotation missing: written"),
    pytest.param(_csi(), ("a.csi", "n1", 0, None), _csi({"name": "a.csi", "nodeID": "n1", "topologyKeys": []}),
                 id="no topology"),
])
def test_install_driver(csi_node: dict[str, Any], args: tuple[Any, ...], expected: dict[str, Any] | None) -> None:
    install = nodeinfo.install_driver(csi_node, *args)
    assert install.csi_node == expected
    assert (install.warnings, install.errors) == ((), ())


def test_install_driver_limits() -> None:
    big = nodeinfo.install_driver(_csi(), "a.csi", "n1", 2**40, None)
    assert big.csi_node is not None and big.csi_node["spec"]["drivers"][0]["allocatable"] == {"count": 2**31 - 1}
    assert big.warnings == ("Exceeded max supported attach limit value, truncating it to 2147483647",)
    negative = nodeinfo.install_driver(_csi(), "a.csi", "n1", -3, None)
    assert negative.csi_node is not None and "allocatable" not in negative.csi_node["spec"]["drivers"][0]
    assert negative.errors == ('Invalid attach limit value -3 cannot be added to CSINode object for "a.csi"',)


@pytest.mark.parametrize(("csi_node", "driver", "expected"), [
    pytest.param(_csi(A, B), "a.csi", _csi(B), id="removed"),
    pytest.param(_csi(B), "a.csi", None, id="not there"),
    pytest.param(_csi(A), "a.csi", _csi(), id="the last one: the CSINode stays"),
])
def test_uninstall_driver(csi_node: dict[str, Any], driver: str, expected: dict[str, Any] | None) -> None:
    assert nodeinfo.uninstall_driver(csi_node, driver) == expected


@pytest.mark.parametrize(("errors", "text"), [
    (["a"], "a"), (["a", "a"], "a"), (["a", "b", "a"], "[a, b]"),
])
def test_aggregate(errors: list[str], text: str) -> None:
    assert nodeinfo.aggregate(errors) == text


# ------------------------------------------------------------------------------------ the manager's calls


def _manager(kube: FakeKube, waits: list[float] | None = None) -> NodeInfoManager:
    async def sleep(seconds: float) -> None:
        if waits is not None:
            waits.append(seconds)

    return NodeInfoManager(kube, kube.node_name, sleep=sleep, jitter=lambda: 0.0)  # type: ignore[arg-type]


def _conflict(method: str, path: str) -> KubeApiError:
    return KubeApiError(409, "Conflict", "the object has been modified", method, path)


async def test_install_then_uninstall() -> None:
    kube = FakeKube()
    nim = _manager(kube)
    await nim.install_csi_driver("hostpath.csi.k8s.io", "node-a", 0, {"topology.hostpath.csi/node": "node-a"})
    meta = kube.node["metadata"]
    assert meta["annotations"] == {KEY: '{"hostpath.csi.k8s.io":"node-a"}'}
    assert meta["labels"] == {"topology.hostpath.csi/node": "node-a"}
    assert kube.csi_node is not None
    assert kube.csi_node["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "uid-a"}]
    assert kube.csi_node["metadata"]["annotations"] == {MIGRATED: ALL_MIGRATED}
    assert kube.csi_node["spec"]["drivers"] == [{"name": "hostpath.csi.k8s.io", "nodeID": "node-a",
                                                 "topologyKeys": ["topology.hostpath.csi/node"]}]
    patch = next(body for method, path, body in kube.calls if method == "PATCH")
    assert patch == {"metadata": {"labels": {"topology.hostpath.csi/node": "node-a"},
                                  "annotations": {KEY: '{"hostpath.csi.k8s.io":"node-a"}'}}}
    kube.calls.clear()
    await nim.install_csi_driver("hostpath.csi.k8s.io", "node-a", 0, {"topology.hostpath.csi/node": "node-a"})
    assert [(m, p) for m, p, _ in kube.calls] == [  # again: an empty patch (upstream's), no CSINode write
        ("GET", "/api/v1/nodes/node-a"), ("PATCH", "/api/v1/nodes/node-a/status"),
        ("GET", "/apis/storage.k8s.io/v1/csinodes/node-a")]
    await nim.uninstall_csi_driver("hostpath.csi.k8s.io")
    assert kube.csi_node["spec"]["drivers"] == []
    assert kube.node["metadata"]["annotations"] == {}
    assert kube.node["metadata"]["labels"] == {"topology.hostpath.csi/node": "node-a"}  # upstream leaves them


async def test_an_empty_node_id_is_refused() -> None:
    kube = FakeKube()
    with pytest.raises(NodeInfoManagerError) as caught:
        await _manager(kube).install_csi_driver("a.csi", "", 0, None)
    assert str(caught.value) == "error adding CSI driver node info: driverNodeID must not be empty"
    assert kube.calls == []


async def test_conflicts_are_retried_with_upstreams_backoff() -> None:
    kube = FakeKube()
    waits: list[float] = []
    nim = _manager(kube, waits)
    path = "/apis/storage.k8s.io/v1/csinodes"
    kube.fail[("POST", path)] = [_conflict("POST", path), _conflict("POST", path)]
    await nim.install_csi_driver("a.csi", "n1", 3, None)
    assert waits == [0.01, 0.05]
    assert kube.csi_node is not None and kube.csi_node["spec"]["drivers"][0]["allocatable"] == {"count": 3}


async def test_four_failed_tries_give_upstreams_error() -> None:
    kube = FakeKube()
    waits: list[float] = []
    node = "/api/v1/nodes/node-a"
    kube.fail[("GET", node)] = [KubeApiError(503, "ServiceUnavailable", f"try {i}", "GET", node) for i in range(4)]
    with pytest.raises(NodeInfoManagerError) as caught:
        await _manager(kube, waits).install_csi_driver("a.csi", "n1", 0, None)
    assert waits == [0.01, 0.05, 0.25]
    assert str(caught.value) == ("error updating Node object with CSI driver node info: error updating node: timed "
                                 "out waiting for the condition; caused by: [try 0, try 1, try 2, try 3]")


async def test_a_refused_node_patch_is_wrapped_as_upstreams() -> None:
    kube = FakeKube()
    status = "/api/v1/nodes/node-a/status"
    forbidden = 'nodes "node-a" is forbidden: is not allowed to modify labels: topology.kubernetes.io/x'
    kube.fail[("PATCH", status)] = [KubeApiError(403, "Forbidden", forbidden, "PATCH", status)] * 4
    with pytest.raises(NodeInfoManagerError) as caught:
        await _manager(kube).install_csi_driver("a.csi", "n1", 0, {"topology.kubernetes.io/x": "1"})
    patch = ('{"metadata":{"annotations":{"csi.volume.kubernetes.io/nodeid":"{\\"a.csi\\":\\"n1\\"}"},'
             '"labels":{"topology.kubernetes.io/x":"1"}}}')
    assert str(caught.value) == (
        "error updating Node object with CSI driver node info: error updating node: timed out waiting for the "
        f"condition; caused by: failed to patch status {json.dumps(patch)} for node \"node-a\": {forbidden}")


async def test_a_csi_node_of_another_node_is_replaced() -> None:
    kube = FakeKube()
    kube.csi_node = {**nodeinfo.new_csi_node("node-a", "uid-old"), "spec": {"drivers": [B]}}
    kube.csi_node["metadata"]["resourceVersion"] = "1"
    waits: list[float] = []
    await _manager(kube, waits).install_csi_driver("a.csi", "n1", 0, None)
    assert waits == [0.01]  # the first try deleted it and failed; the second made it anew
    assert ("DELETE", "/apis/storage.k8s.io/v1/csinodes/node-a", None) in kube.calls
    assert kube.csi_node is not None
    assert kube.csi_node["metadata"]["ownerReferences"][0]["uid"] == "uid-a"
    assert [d["name"] for d in kube.csi_node["spec"]["drivers"]] == ["a.csi"]


async def test_uninstall_without_a_csi_node_only_fixes_the_annotation() -> None:
    kube = FakeKube()
    kube.node["metadata"]["annotations"] = {KEY: '{"a.csi":"n1"}'}
    await _manager(kube).uninstall_csi_driver("a.csi")
    assert kube.node["metadata"]["annotations"] == {}
    assert kube.csi_node is None


async def test_initialize_creates_the_csi_node() -> None:
    kube = FakeKube()
    nim = _manager(kube)
    await nim.initialize_csi_node()
    assert nim.node_uid == "uid-a"
    assert kube.csi_node is not None and kube.csi_node["spec"] == {"drivers": []}
    assert kube.csi_node["metadata"]["annotations"] == {MIGRATED: ALL_MIGRATED}


async def test_initialize_fixes_the_annotation_of_an_existing_csi_node() -> None:
    kube = FakeKube()
    kube.csi_node = {**nodeinfo.new_csi_node("node-a", "uid-a"), "spec": {"drivers": [A]}}
    kube.csi_node["metadata"]["annotations"] = {MIGRATED: "kubernetes.io/gce-pd", "o": "x"}
    kube.csi_node["metadata"]["resourceVersion"] = "1"
    await _manager(kube).initialize_csi_node()
    assert kube.csi_node["metadata"]["annotations"] == {MIGRATED: ALL_MIGRATED, "o": "x"}
    assert kube.csi_node["spec"]["drivers"] == [A]


async def test_initialize_waits_for_the_apiserver_and_starts_over_after_failing() -> None:
    kube = FakeKube()
    waits: list[float] = []
    path = "/apis/storage.k8s.io/v1/csinodes/node-a"
    kube.fail[("GET", path)] = [OSError("connection refused")] * 2
    node = "/api/v1/nodes/node-a"
    # 6 initialization tries of 4 each fail (the Node is not there yet), then the whole starts over and succeeds
    kube.fail[("GET", node)] = [KubeApiError(404, "NotFound", 'nodes "node-a" not found', "GET", node)] * 24
    await _manager(kube, waits).initialize_csi_node()
    assert waits[:2] == [1.0, 1.0]  # waitForAPIServerForever's polls
    assert waits[2:5] == [0.01, 0.05, 0.25]
    assert [w for w in waits if w > 0.3 and w != 1.0] == [1.92, 15.36, 122.88]
    assert kube.csi_node is not None
