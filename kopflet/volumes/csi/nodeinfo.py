"""
The node information a CSI driver's NodeGetInfo gives, as upstream's node info manager writes it
(pkg/volume/csi/nodeinfomanager/nodeinfomanager.go at v1.37.1): what changes in the Node and in its CSINode.

The Node (`update_node_id`, `remove_node_id`, `update_topology_labels`, `node_patch`):

- the annotation ``csi.volume.kubernetes.io/nodeid`` is a JSON map of driver name → the driver's node ID
  (Go's ``json.Marshal`` of a map: sorted keys, compact); removing the last driver removes the annotation;
- the driver's accessible topology becomes labels; a label already there with another value is upstream's
  "topology value collision" error (NodeRestriction may still refuse labels in the kubernetes.io and k8s.io
  namespaces that are not kubelet labels: the apiserver answers, as upstream's);
- the change is sent as upstream's ``PatchNodeStatus`` sends it: a two-way strategic merge patch of the metadata
  (changed keys with their value, removed ones null) on ``nodes/<name>/status``.

The CSINode (`new_csi_node`, `owner_uid`, `install_driver`, `uninstall_driver`, `set_migration_annotation`):

- created with the Node as its owner and the ``storage.alpha.kubernetes.io/migrated-plugins`` annotation listing
  every in-tree plugin migrated to CSI (all seven are, for good, at v1.37);
- one ``spec.drivers`` entry per driver: name, nodeID, sorted topologyKeys, ``allocatable.count`` from
  max_volumes_per_node (none for 0; capped at 2^31-1; a negative one is an error log and no count); an entry that
  would not change is not written again, a changed one moves to the end (upstream appends it);
- a CSINode owned by another Node (an earlier Node of the same name) is deleted and made again.

Pure: objects are the API's JSON (dicts); nothing here talks to the apiserver (`nodeinfomanager` does).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kopflet.gotext import go_json, go_quote

ANNOTATION_KEY_NODE_ID = "csi.volume.kubernetes.io/nodeid"
"""Upstream annotationKeyNodeID: the Node's JSON map of CSI driver name → node ID."""
MIGRATED_PLUGINS_ANNOTATION_KEY = "storage.alpha.kubernetes.io/migrated-plugins"
"""core/v1 MigratedPluginsAnnotationKey: on the CSINode, the in-tree plugins the kubelet migrated to CSI."""
MIGRATED_PLUGINS = (  # csi_plugin.go Init's migratedPlugins (csi-translation-lib plugin names), all migrated
    "kubernetes.io/aws-ebs", "kubernetes.io/azure-disk", "kubernetes.io/azure-file", "kubernetes.io/cinder",
    "kubernetes.io/gce-pd", "kubernetes.io/portworx-volume", "kubernetes.io/vsphere-volume",
)
MAX_INT32 = 2**31 - 1
UPDATE_BACKOFF = (0.01, 0.05, 0.25)
"""upstream updateBackoff (Steps 4, Duration 10 ms, Factor 5): the waits between its four tries (jitter 10%)."""
UPDATE_BACKOFF_JITTER = 0.1
WAIT_TIMEOUT = "timed out waiting for the condition"
"""wait.ErrWaitTimeout's text: the tries ran out."""


class NodeInfoError(ValueError):
    """The node information cannot be computed (a bad annotation, a topology collision); upstream's text."""


_JSON_KINDS = {bool: "bool", int: "number", float: "number", str: "string", list: "array", dict: "object"}


def _go_json_error(value: Any) -> str | None:
    """encoding/json's error for a decoded `value` that does not fit a ``map[string]string`` (null does: a nil
    map; so does a null value: an empty string), or None."""
    if value is None:
        return None
    if not isinstance(value, dict):
        return f"json: cannot unmarshal {_JSON_KINDS[type(value)]} into Go value of type map[string]string"
    for item in value.values():
        if item is not None and not isinstance(item, str):
            return f"json: cannot unmarshal {_JSON_KINDS[type(item)]} into Go value of type string"
    return None


def node_id_map(annotations: Mapping[str, str] | None) -> dict[str, str]:
    """Upstream buildNodeIDMapFromAnnotation: the driver → node ID map the annotation holds (empty when there is
    none); NodeInfoError with upstream's text when it is not a JSON object of strings."""
    value = (annotations or {}).get(ANNOTATION_KEY_NODE_ID, "")
    if not value:
        return {}
    try:
        decoded = json.loads(value)
        error = _go_json_error(decoded)
    except ValueError as exc:  # Python's words for bad JSON, not Go's
        error = str(exc)
        decoded = None
    if error is not None:
        raise NodeInfoError(f"failed to parse node's {go_quote(ANNOTATION_KEY_NODE_ID)} annotation value "
                            f"({go_quote(value)}) err={error}")
    # JSON null is Go's nil map; a null value in the object leaves that key's string empty
    return {key: item or "" for key, item in (decoded or {}).items()}


def update_node_id(annotations: Mapping[str, str] | None, driver: str, node_id: str) -> dict[str, str] | None:
    """Upstream updateNodeIDInNode: the Node's annotations with `driver`'s node ID in the map, or None when it is
    there already."""
    drivers = node_id_map(annotations)
    if driver in drivers and drivers[driver] == node_id:
        return None
    drivers[driver] = node_id
    return {**(annotations or {}), ANNOTATION_KEY_NODE_ID: go_json(drivers, sort_keys=True)}


def remove_node_id(annotations: Mapping[str, str] | None, driver: str) -> dict[str, str] | None:
    """Upstream removeNodeIDFromNode: the Node's annotations without `driver` in the map (and without the
    annotation once the map is empty), or None when it is not there."""
    if not (annotations or {}).get(ANNOTATION_KEY_NODE_ID, ""):
        return None
    drivers = node_id_map(annotations)
    if driver not in drivers:
        return None
    del drivers[driver]
    out = dict(annotations or {})
    if drivers:
        out[ANNOTATION_KEY_NODE_ID] = go_json(drivers, sort_keys=True)
    else:
        del out[ANNOTATION_KEY_NODE_ID]
    return out


def update_topology_labels(labels: Mapping[str, str] | None, topology: Mapping[str, str] | None
                           ) -> dict[str, str] | None:
    """Upstream updateTopologyLabels: the Node's labels with the topology's, or None without topology (with some,
    upstream counts the Node as updated even when the labels are there already: its patch is then empty).
    NodeInfoError on a label that has another value (the first such key in sorted order; upstream's map order is
    random)."""
    if not topology:
        return None
    current = dict(labels or {})
    for key, value in sorted(topology.items()):
        if key in current and current[key] != value:
            raise NodeInfoError(f"detected topology value collision: driver reported {go_quote(key)}:"
                                f"{go_quote(value)} but existing label is {go_quote(key)}:{go_quote(current[key])}")
    return {**current, **topology}


def _map_patch(old: Mapping[str, str] | None, new: Mapping[str, str] | None) -> dict[str, str | None]:
    old, new = old or {}, new or {}
    patch: dict[str, str | None] = {key: value for key, value in new.items() if key not in old or old[key] != value}
    patch.update({key: None for key in old if key not in new})
    return patch


def node_patch(old_metadata: Mapping[str, Any], labels: Mapping[str, str] | None,
               annotations: Mapping[str, str] | None) -> dict[str, Any]:
    """The strategic merge patch upstream's PatchNodeStatus computes (CreateTwoWayMergePatch of the Node before
    and after) when only its labels and annotations changed: ``{}`` when nothing did."""
    metadata: dict[str, Any] = {}
    for field, new in (("labels", labels), ("annotations", annotations)):
        old = old_metadata.get(field) or {}
        if new is not None and (changes := _map_patch(old, new)):
            metadata[field] = changes
    return {"metadata": metadata} if metadata else {}


# ----------------------------------------------------------------------------------------------- CSINode

def set_migration_annotation(annotations: Mapping[str, str] | None) -> dict[str, str] | None:
    """Upstream setMigrationAnnotation: the CSINode's annotations naming every migrated plugin (comma-separated,
    sorted), or None when they name exactly those already."""
    current = dict(annotations or {})
    listed = current.get(MIGRATED_PLUGINS_ANNOTATION_KEY, "")
    if (set(listed.split(",")) if listed else set()) == set(MIGRATED_PLUGINS):
        return None
    current[MIGRATED_PLUGINS_ANNOTATION_KEY] = ",".join(sorted(MIGRATED_PLUGINS))
    return current


def new_csi_node(node_name: str, node_uid: str) -> dict[str, Any]:
    """Upstream CreateCSINode's object: named after the Node, owned by it, the migration annotation, no drivers."""
    return {
        "apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
        "metadata": {
            "name": node_name,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid}],
            "annotations": set_migration_annotation({}),
        },
        "spec": {"drivers": []},
    }


def owner_uid(csi_node: Mapping[str, Any], node_name: str, node_uid: str) -> tuple[bool, str]:
    """Upstream nodeOwnsCSINode: whether a Node owner reference names this Node with its UID, and the UID of the
    last Node owner looked at (for the message when it does not)."""
    seen = ""
    for ref in (csi_node.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") != "Node":
            continue
        seen = str(ref.get("uid", ""))
        if ref.get("name") != node_name:
            continue
        if seen == node_uid:
            return True, seen
    return False, seen


def not_owned_message(name: str, old_uid: str, new_uid: str) -> str:
    """Upstream ensureNodeOwnsCSINode's error once it deleted a CSINode of another Node."""
    return (f"CSINode {go_quote(name)} was owned by different node (oldNodeID={go_quote(old_uid)}, "
            f"newNodeID={go_quote(new_uid)}), deleted it")


def _keep_allocatable_count(entry: Mapping[str, Any], max_attach_limit: int) -> bool:
    """Upstream keepAllocatableCount: the entry's allocatable count already says `max_attach_limit`."""
    count = (entry.get("allocatable") or {}).get("count")
    if max_attach_limit == 0:
        return count is None
    return count is not None and int(count) == max_attach_limit


@dataclasses.dataclass(frozen=True)
class Install:
    """What installing a driver into a CSINode gives: the object to update (None: unchanged) and the log lines
    upstream writes on the way (warnings, errors)."""

    csi_node: dict[str, Any] | None
    warnings: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()


def install_driver(csi_node: Mapping[str, Any], driver: str, node_id: str, max_attach_limit: int,
                   topology: Mapping[str, str] | None) -> Install:
    """Upstream installDriverToCSINode: the CSINode with `driver`'s entry (re)written last, or unchanged when the
    entry says the same and the migration annotation is right."""
    keys = sorted(topology or {})
    drivers = list((csi_node.get("spec") or {}).get("drivers") or [])
    spec_modified = True
    others = []
    for entry in drivers:
        if entry.get("name") == driver:
            if (entry.get("nodeID") == node_id and set(entry.get("topologyKeys") or ()) == set(keys)
                    and _keep_allocatable_count(entry, max_attach_limit)):
                spec_modified = False
        else:
            others.append(entry)
    metadata = dict(csi_node.get("metadata") or {})
    annotations = set_migration_annotation(metadata.get("annotations"))
    if not spec_modified and annotations is None:
        return Install(None)
    entry: dict[str, Any] = {"name": driver, "nodeID": node_id, "topologyKeys": keys}
    warnings, errors = [], []
    if max_attach_limit > 0:
        if max_attach_limit > MAX_INT32:
            warnings.append(f"Exceeded max supported attach limit value, truncating it to {MAX_INT32}")
            max_attach_limit = MAX_INT32
        entry["allocatable"] = {"count": max_attach_limit}
    elif max_attach_limit != 0:
        errors.append(f"Invalid attach limit value {max_attach_limit} cannot be added to CSINode object for "
                      f"{go_quote(driver)}")
    updated = copy.deepcopy(dict(csi_node))
    if annotations is not None:
        updated["metadata"] = {**metadata, "annotations": annotations}
    updated["spec"] = {**(csi_node.get("spec") or {}), "drivers": [*others, entry]}
    return Install(updated, tuple(warnings), tuple(errors))


def uninstall_driver(csi_node: Mapping[str, Any], driver: str) -> dict[str, Any] | None:
    """Upstream tryUninstallDriverFromCSINode: the CSINode without `driver`'s entry, or None when it has none."""
    drivers = list((csi_node.get("spec") or {}).get("drivers") or [])
    kept = [entry for entry in drivers if entry.get("name") != driver]
    if len(kept) == len(drivers):
        return None
    updated = copy.deepcopy(dict(csi_node))
    updated["spec"] = {**(csi_node.get("spec") or {}), "drivers": kept}
    return updated


def aggregate(messages: Sequence[str]) -> str:
    """utilerrors.NewAggregate(errs).Error(): one error as itself, several deduplicated in ``[a, b]``."""
    if len(messages) == 1:
        return messages[0]
    unique = list(dict.fromkeys(messages))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


def retries_exhausted(what: str, errors: Iterable[str]) -> str:
    """Upstream's error after the update backoff's tries all failed: ``error updating <what>: timed out waiting
    for the condition; caused by: <the tries' errors>``."""
    return f"error updating {what}: {WAIT_TIMEOUT}; caused by: {aggregate(list(errors))}"


__all__ = [
    "ANNOTATION_KEY_NODE_ID", "MAX_INT32", "MIGRATED_PLUGINS", "MIGRATED_PLUGINS_ANNOTATION_KEY", "UPDATE_BACKOFF",
    "UPDATE_BACKOFF_JITTER", "WAIT_TIMEOUT", "Install", "NodeInfoError", "aggregate", "install_driver",
    "new_csi_node", "node_id_map", "node_patch", "not_owned_message", "owner_uid", "remove_node_id",
    "retries_exhausted", "set_migration_annotation", "uninstall_driver", "update_node_id", "update_topology_labels",
]
