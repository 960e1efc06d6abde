"""Static pods from manifest files, as the upstream kubelet's file source makes them (pkg/kubelet/config).

A manifest becomes a pod bound to this node: its name gets ``-<node>`` appended, its namespace defaults
to ``default``, its UID is a hash of the manifest, the node and the file (so an edited file is a new pod),
and it carries the ``kubernetes.io/config.{hash,source,seen}`` annotations. Its mirror pod in the API is
the same pod with ``kubernetes.io/config.mirror`` and an owner reference to the Node. Pure: file contents
come in as text.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any

import yaml

CONFIG_HASH = "kubernetes.io/config.hash"
CONFIG_MIRROR = "kubernetes.io/config.mirror"
CONFIG_SOURCE = "kubernetes.io/config.source"
CONFIG_SEEN = "kubernetes.io/config.seen"
SOURCE_FILE = "file"
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


class ManifestError(ValueError):
    """A manifest file that is not a usable Pod; the message names the file and the problem."""


@dataclasses.dataclass(frozen=True)
class StaticPod:
    path: str
    uid: str
    body: Mapping[str, Any]

    @property
    def namespace(self) -> str:
        return str(self.body["metadata"]["namespace"])

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])


def is_manifest_name(filename: str) -> bool:
    """Upstream skips hidden files; we also skip editors' leftovers by taking only YAML/JSON names."""
    return not filename.startswith(".") and filename.endswith(MANIFEST_SUFFIXES)


def is_mirror(body: Mapping[str, Any]) -> bool:
    return CONFIG_MIRROR in (body.get("metadata", {}).get("annotations") or {})


# go-yaml (under sigs.k8s.io/yaml) refuses a document whose aliases expand excessively, so a few hundred
# bytes of nested anchors ("billion laughs") cannot become gigabytes; this budget on the expanded tree does
# the same, and catches self-referencing anchors too.
MAX_EXPANDED_NODES = 1_000_000


def _check_expansion(doc: Any, path: str) -> None:
    budget, stack = MAX_EXPANDED_NODES, [doc]
    while stack:
        node = stack.pop()
        budget -= 1
        if budget < 0:
            raise ManifestError(f"{path}: not valid YAML or JSON: yaml: document contains excessive aliasing")
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def _proc_mount_errors(pod_spec: Mapping[str, Any]) -> list[str]:
    """Upstream ValidateSecurityContext's procMount rule, which the kubelet applies to a manifest (ValidatePodCreate
    in tryDecodeSinglePod): ``Unmasked`` needs ``hostUsers: false``, so an unmasked /proc is never in the host's
    user namespace. Containers, then init containers, as ValidatePodSpec walks them; field.Error's text."""
    if pod_spec.get("hostUsers") is False:
        return []
    errors = []
    for kind in ("containers", "initContainers"):
        items = pod_spec.get(kind)
        for i, container in enumerate(items if isinstance(items, list) else ()):
            context = container.get("securityContext") if isinstance(container, dict) else None
            if isinstance(context, dict) and context.get("procMount") == "Unmasked":
                errors.append(f'spec.{kind}[{i}].securityContext.procMount: Invalid value: "Unmasked": '
                              "`hostUsers` must be false to use `Unmasked`")
    return errors


_FORBIDDEN_WITHOUT_HOST_USERS = "Forbidden: when `hostUsers` is false"


def _host_users_errors(pod_spec: Mapping[str, Any]) -> list[str]:
    """Upstream validateHostUsers (ValidatePodSpec, after the containers' rules): a pod in a user namespace of its
    own shares none of the host's namespaces (hostNetwork: the UserNamespacesHostNetworkSupport gate is alpha, off)
    and has no volumeDevices (no idmapped mounts for them); init, regular, then ephemeral containers, as
    VisitContainersWithPath walks them. The paths' spelling (``HostPID``, ``HostIPC``) is upstream's."""
    if pod_spec.get("hostUsers") is not False:
        return []
    errors = [f"spec.{name}: {_FORBIDDEN_WITHOUT_HOST_USERS}"
              for key, name in (("hostNetwork", "hostNetwork"), ("hostPID", "HostPID"), ("hostIPC", "HostIPC"))
              if pod_spec.get(key) is True]
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        items = pod_spec.get(kind)
        for i, container in enumerate(items if isinstance(items, list) else ()):
            if isinstance(container, dict) and container.get("volumeDevices"):
                errors.append(f"spec.{kind}[{i}].volumeDevices: {_FORBIDDEN_WITHOUT_HOST_USERS}")
    return errors


def static_pod(path: str, text: str, node_name: str, seen: str) -> StaticPod:
    """Parse and default one manifest (upstream applyDefaults in config/common.go); of upstream's validation
    (ValidatePodCreate) the security-relevant procMount and user namespace rules (`_proc_mount_errors`,
    `_host_users_errors`)."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ManifestError(f"{path}: not valid YAML or JSON: {exc}") from None
    _check_expansion(doc, path)
    if not isinstance(doc, dict):
        raise ManifestError(f"{path}: expected a Pod object, got {type(doc).__name__}")
    if doc.get("kind") != "Pod" or doc.get("apiVersion") != "v1":
        raise ManifestError(f"{path}: expected apiVersion v1, kind Pod; got {doc.get('apiVersion')!r}, "
                            f"{doc.get('kind')!r}")
    meta = doc.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise ManifestError(f"{path}: metadata.name: Required value")
    if not isinstance(doc.get("spec"), dict):
        raise ManifestError(f"{path}: spec: Required value")
    if errors := _proc_mount_errors(doc["spec"]) + _host_users_errors(doc["spec"]):
        raise ManifestError(f"{path}: invalid pod: [{' '.join(errors)}]")  # Go's %v of the field.ErrorList
    uid = hashlib.md5(json.dumps(doc, sort_keys=True).encode() + node_name.encode()
                      + f"file:{path}".encode()).hexdigest()
    body = copy.deepcopy(doc)
    meta = body["metadata"]
    if not meta["name"].endswith(f"-{node_name}"):
        meta["name"] = f"{meta['name']}-{node_name}"
    meta["namespace"] = meta.get("namespace") or "default"
    meta["uid"] = uid
    meta["annotations"] = {**(meta.get("annotations") or {}),
                           CONFIG_HASH: uid, CONFIG_SOURCE: SOURCE_FILE, CONFIG_SEEN: seen}
    body["spec"]["nodeName"] = node_name
    # Static pods tolerate every NoExecute taint (upstream adds this toleration in applyDefaults).
    tolerations = list(body["spec"].get("tolerations") or [])
    tolerations.append({"operator": "Exists", "effect": "NoExecute"})
    body["spec"]["tolerations"] = tolerations
    body.setdefault("status", {})
    return StaticPod(path=path, uid=uid, body=body)


def mirror_pod(pod: StaticPod, node_name: str, node_uid: str) -> dict[str, Any]:
    """The API object that shows a static pod (upstream mirror_client.CreateMirrorPod)."""
    body = copy.deepcopy(dict(pod.body))
    meta = body["metadata"]
    meta.pop("uid", None)
    meta.pop("resourceVersion", None)
    meta["annotations"] = {**meta["annotations"], CONFIG_MIRROR: pod.uid}
    # NodeRestriction admits a node's mirror pods only with a controller reference to that Node.
    meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid,
                                "controller": True}]
    body.pop("status", None)
    return body
