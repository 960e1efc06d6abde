"""Static pods from manifest files, as the upstream kubelet's file source makes them (pkg/kubelet/config).

A manifest becomes a pod bound to this node: its name gets ``-<node>`` appended, its namespace defaults
to ``default``, its UID is a hash of the manifest, the node and the file (so an edited file is a new pod),
and it carries the ``kubernetes.io/config.{hash,source,seen}`` annotations. Its mirror pod in the API is
the same pod with ``kubernetes.io/config.mirror`` and an owner reference to the Node. Pure: file contents
come in as text.

The pods ``staticPodURL`` serves (upstream's http source) are made by the same rules from an answer's bytes
(`read_url`): one Pod or a PodList, source ``http``, the UID a hash of the pod and the URL.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any

import yaml

from kopflet import gotext

CONFIG_HASH = "kubernetes.io/config.hash"
CONFIG_MIRROR = "kubernetes.io/config.mirror"
CONFIG_SOURCE = "kubernetes.io/config.source"
CONFIG_SEEN = "kubernetes.io/config.seen"
SOURCE_FILE = "file"
SOURCE_HTTP = "http"
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
    return StaticPod(path=path, uid=uid, body=_defaulted(doc, uid, node_name, seen, SOURCE_FILE))


def _defaulted(doc: Mapping[str, Any], uid: str, node_name: str, seen: str, source: str) -> dict[str, Any]:
    """Upstream applyDefaults (config/common.go) and the mux's annotations (config.go): the name suffixed with the
    node, namespace ``default``, bound to the node, the hash and source annotations."""
    body = copy.deepcopy(dict(doc))
    meta = body["metadata"]
    if not meta["name"].endswith(f"-{node_name}"):
        meta["name"] = f"{meta['name']}-{node_name}"
    meta["namespace"] = meta.get("namespace") or "default"
    meta["uid"] = uid
    meta["annotations"] = {**(meta.get("annotations") or {}),
                           CONFIG_HASH: uid, CONFIG_SOURCE: source, CONFIG_SEEN: seen}
    body["spec"]["nodeName"] = node_name
    if source == SOURCE_FILE:
        # A file's static pods tolerate every NoExecute taint (applyDefaults adds it when isFile; a URL's do not).
        tolerations = list(body["spec"].get("tolerations") or [])
        tolerations.append({"operator": "Exists", "effect": "NoExecute"})
        body["spec"]["tolerations"] = tolerations
    body.setdefault("status", {})
    return body


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


# ---------------------------------------------------------------------------------------------------------------
# The HTTP source (upstream pkg/kubelet/config/http.go): the answer to a GET of staticPodURL.

MAX_CONFIG_LENGTH = 10 << 20
"""maxConfigLength (config/common.go): at most 10 MiB of an answer is read."""
READ_LIMIT_REACHED = "the read limit is reached"
"""k8s.io/utils/io ErrLimitReached: an answer of maxConfigLength bytes or more."""
_NO_NAME = "invalid pod: name is needed for the pod"


@dataclasses.dataclass(frozen=True)
class URLRead:
    """What one answer from staticPodURL does (sourceURL.extractFromURL)."""

    pods: tuple[StaticPod, ...] | None
    """The source's new set of pods (upstream's SET update); None: the current set stays."""
    error: str = ""
    """Why the answer was not used (upstream's error text), or empty."""
    data: bytes | None = None
    """The answer the next one is compared with: an unchanged answer sends nothing."""
    data_error: str = ""
    """Why `data` was not used: an unchanged bad document is still bad (said again, never a success)."""
    warnings: tuple[str, ...] = ()
    """Pods left out of the set (filterInvalidPods: a name twice)."""


def read_url(url: str, status: int, reason: str, data: bytes, node_name: str, seen: str, *,
             last: bytes | None = None, last_error: str = "") -> URLRead:
    """One answer: too long, not 200, empty, unchanged, or decoded as one Pod or a PodList (extractFromURL's order).
    `last`, `last_error`: the previous answer's `data` and `data_error`.

    A bad document is remembered, so it is decoded once, and keeps the last good set; an empty answer is an empty
    set and an error, as upstream's (its data is not remembered there, so an unchanged document after it would not
    be sent again; here it is: b"" is remembered)."""
    if len(data) >= MAX_CONFIG_LENGTH:
        return URLRead(None, READ_LIMIT_REACHED, last, last_error)
    if status != 200:
        return URLRead(None, f"{url}: {status} {reason}".rstrip(), last, last_error)  # Go's resp.Status
    if not data:
        return URLRead((), f"zero-length data received from {url}", b"")
    if data == last:
        return URLRead(None, last_error, last, last_error)
    try:
        pods, warnings = url_pods(url, data, node_name, seen)
    except ManifestError as exc:
        return URLRead(None, str(exc), data, str(exc))
    return URLRead(pods, "", data, "", warnings)


def url_pods(url: str, data: bytes, node_name: str, seen: str) -> tuple[tuple[StaticPod, ...], tuple[str, ...]]:
    """The pods of an answer: first as one Pod (tryDecodeSinglePod), then as a PodList (tryDecodePodList; one bad
    item fails it whole); ManifestError with upstream's text otherwise. Of a YAML stream only the first document
    counts (go-yaml v2's Unmarshal, under sigs.k8s.io/yaml, reads one and ignores the rest). A name twice: the later
    pod is left out, with a warning (config.go filterInvalidPods)."""
    text = data.decode("utf-8", errors="replace")
    try:
        doc: Any = next(iter(yaml.safe_load_all(text)), None)
    except yaml.YAMLError as exc:
        single_error = list_error = f"yaml: {_yaml_problem(exc)}"
        raise ManifestError(f"{url}: received '{text}', but couldn't parse as single ({single_error}) or multiple "
                            f"pods ({list_error})") from None
    _check_expansion(doc, url)
    single_error = _kind_error(doc, text, "Pod")
    if single_error is None:
        return (_url_pod(url, doc, node_name, seen),), ()
    list_error = _kind_error(doc, text, "PodList")
    if list_error is not None:
        raise ManifestError(f"{url}: received '{text}', but couldn't parse as single ({single_error}) or multiple "
                            f"pods ({list_error})")
    items = doc.get("items") or []
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise ManifestError(f"{url}: received '{text}', but couldn't parse as single ({single_error}) or multiple "
                            f"pods (PodList.items: expected a list of pods)")
    pods: list[StaticPod] = []
    names: set[tuple[str, str]] = set()
    warnings: list[str] = []
    for item in items:
        pod = _url_pod(url, item, node_name, seen)
        key = (pod.namespace, pod.name)
        if key in names:
            warnings.append(f"Error validating pod {pod.name}_{pod.namespace}({pod.uid}) from {SOURCE_HTTP} due to "
                            f"duplicate pod name {gotext.go_quote(pod.name)}, ignoring")
            continue
        names.add(key)
        pods.append(pod)
    return tuple(pods), tuple(warnings)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    return f"line {mark.line + 1}: {problem}" if mark is not None else problem


def _kind_error(doc: Any, text: str, kind: str) -> str | None:
    """runtime.Decode's refusal of a document that is not a v1 `kind` (the legacy scheme's texts), or None."""
    if not isinstance(doc, dict):
        return f"couldn't get version/kind; json parse error: json: cannot unmarshal {_json_type(doc)} into Go value"
    if not doc.get("kind"):
        return f"Object 'Kind' is missing in '{text.strip()}'"
    if doc.get("apiVersion") != "v1":
        return (f"no kind {gotext.go_quote(str(doc.get('kind')))} is registered for version "
                f"{gotext.go_quote(str(doc.get('apiVersion') or ''))} in scheme \"pkg/api/legacyscheme/scheme.go:30\"")
    if doc["kind"] != kind:
        return f"invalid {'pod' if kind == 'Pod' else 'pods list'}: &core.{doc['kind']}{{...}}"
    return None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return "array"
    return "string"


def _url_pod(url: str, doc: dict[str, Any], node_name: str, seen: str) -> StaticPod:
    """One pod of the answer checked and defaulted as tryDecodeSinglePod does it for the http source: its UID a hash
    of the pod and the URL (applyDefaults for a non-file source: not the node), no NoExecute toleration."""
    meta = doc.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise ManifestError(_NO_NAME)
    spec = doc.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("containers"), list) or not spec["containers"]:
        raise ManifestError("invalid pod: [spec.containers: Required value]")
    if errors := _proc_mount_errors(spec) + _host_users_errors(spec):
        raise ManifestError(f"invalid pod: [{' '.join(errors)}]")  # Go's %v of the field.ErrorList
    doc = {**doc, "apiVersion": "v1", "kind": "Pod"}  # a PodList's items need not say it
    uid = hashlib.md5(json.dumps(doc, sort_keys=True).encode() + f"url:{url}".encode()).hexdigest()
    return StaticPod(path=url, uid=uid, body=_defaulted(doc, uid, node_name, seen, SOURCE_HTTP))
