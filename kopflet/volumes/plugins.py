"""
Pod volumes as the kubelet sets them up: where each lives on the node, what goes into it, how it is mounted.

Mirrors the upstream volume plugins (pkg/volume/emptydir, hostpath, configmap, secret, downwardapi,
projected, image), the atomic writer's path checks (pkg/volume/util/atomic_writer.go `validatePath`) and
`makeMounts` / `translateMountPropagation` (pkg/kubelet/kubelet_pods.go, kuberuntime_container.go).

An image volume (upstream pkg/volume/image, ImageVolume: GA and locked on at v1.37) has nothing on the node: its
plugin's SetUp is a no-op, the kubelet pulls the image before the pod's containers start (the executor, through the
image manager) and each mount names the pulled image to the runtime (CRI ``Mount.image``, ``image_sub_path``),
which mounts it read-only itself.

Pure: `plan_volumes` computes a `VolumePlan` per volume (directory, tmpfs or not, the files of a
configMap/secret/projected/downwardAPI volume); the caller creates the directories, mounts tmpfs and writes
the files atomically. ConfigMaps, Secrets and service account tokens are passed in, already fetched:
`referenced_objects` and `token_requests` say which. In `config_maps` / `secrets`, ``None`` means "fetched,
does not exist"; a name missing from the mapping means "not fetched" (a caller bug: ValueError). Values are
bytes (ConfigMap ``data`` encoded as UTF-8 merged with ``binaryData``; Secret values decoded from base64).
The cluster's ClusterTrustBundles come as `trust_bundles.Bundles` when `trust_bundles.wanted` says so, and
podCertificate sources' keys and chains as the pod certificate manager answers them.

A volume that cannot be set up raises `VolumeError`, whose text is the ``FailedMount`` event message.

PersistentVolumeClaim, generic ephemeral and inline csi volumes are `kopflet.volumes.pvc`'s: resolved and mounted by
the volume manager (`kopflet.volumes.manager`, with `kopflet.volumes.desired_state`'s steps) before the plan. Given
their mounted volumes (`persistent`), `plan_volumes` plans them where their plugin set them up; without (the
default), they are refused as volume types kopflet has no plugin for.
"""

from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Mapping
from typing import Any

from cri_client import types as cri
from kopflet import gotext, paths
from kopflet.api import qos, spec, unsupported
from kopflet.envvars import container_env
from kopflet.images import credentials
from kopflet.podcertificate import states as podcertificate
from kopflet.volumes import pvc
from kopflet.volumes import trust_bundles as ctb

KIND_EMPTY_DIR = "emptyDir"
KIND_HOST_PATH = "hostPath"
KIND_CONFIG_MAP = "configMap"
KIND_SECRET = "secret"
KIND_PROJECTED = "projected"
KIND_DOWNWARD_API = "downwardAPI"
KIND_IMAGE = "image"
SUPPORTED_KINDS = (KIND_EMPTY_DIR, KIND_HOST_PATH, KIND_CONFIG_MAP, KIND_SECRET, KIND_PROJECTED, KIND_DOWNWARD_API,
                   KIND_IMAGE)

# The plugins' qualified names (pkg/volume/*: `EmptyDirPluginName`, `configMapPluginName`, ...), which name their
# directories under the pod's volumes directory (`paths.Layout.volume_dir`).
PLUGIN_NAMES = {
    KIND_EMPTY_DIR: "kubernetes.io/empty-dir",
    KIND_CONFIG_MAP: "kubernetes.io/configmap",
    KIND_SECRET: "kubernetes.io/secret",
    KIND_PROJECTED: "kubernetes.io/projected",
    KIND_DOWNWARD_API: "kubernetes.io/downward-api",
    KIND_IMAGE: "kubernetes.io/image",  # no directory: the runtime mounts the image
}

DEFAULT_MODE = 0o644
DEFAULT_TOKEN_EXPIRATION = 3600
MIN_TOKEN_EXPIRATION = 600
HOST_PATH_TYPES = ("", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice",
                   "BlockDevice")
MEDIUM_DEFAULT = ""
MEDIUM_MEMORY = "Memory"

# atomic_writer.go
_MAX_PATH_LENGTH = 4096
_MAX_FILE_NAME_LENGTH = 255

# Downward API volumes only support the metadata fields (`fieldpath.ExtractFieldPathAsString`).
_VOLUME_FIELD_PATHS = ("metadata.name", "metadata.namespace", "metadata.uid", "metadata.labels",
                       "metadata.annotations")

_PROPAGATION = {
    None: cri.MountPropagation.PRIVATE,
    "None": cri.MountPropagation.PRIVATE,
    "HostToContainer": cri.MountPropagation.HOST_TO_CONTAINER,
    "Bidirectional": cri.MountPropagation.BIDIRECTIONAL,
}


class VolumeError(Exception):
    """A volume cannot be set up or mounted; ``str(exc)`` is the error (the FailedMount event message), `volume` the
    volume's name. `events`, when given, are the Warning events to record instead, as (reason, message): a
    persistent volume's mount failures (FailedMount, FailedMapVolume) and the pod's ``Unable to attach or mount
    volumes`` one, or none (an error upstream only logs)."""

    def __init__(self, message: str, volume: str = "", events: tuple[tuple[str, str], ...] | None = None) -> None:
        super().__init__(message)
        self.volume = volume
        self.events = events


def _setup_failed(volume: str, detail: str) -> VolumeError:
    return VolumeError(f'MountVolume.SetUp failed for volume "{volume}" : {detail}', volume)


@dataclasses.dataclass(frozen=True)
class FetchError:
    """A ConfigMap or Secret that could not be read (its cache not synced, the read refused): the error upstream's
    getConfigMap/getSecret returns, which fails the volume's SetUp (a FailedMount) even for an optional source; only
    NotFound (None) lets an optional one through."""

    message: str


ObjectData = Mapping[str, bytes] | FetchError | None
"""A referenced ConfigMap's or Secret's data: None when it does not exist."""


@dataclasses.dataclass(frozen=True)
class FileEntry:
    """One file of a configMap/secret/projected/downwardAPI volume, relative to the volume's directory."""

    path: str
    data: bytes
    mode: int
    owner: int | None = None
    """The UID to own the file (upstream FileProjection.FsUser), or None to leave it root's."""


@dataclasses.dataclass(frozen=True)
class VolumePlan:
    """One pod volume as the node sets it up (see the module docstring)."""

    name: str
    kind: str
    host_path: str
    tmpfs: bool = False
    size_limit: int | None = None
    files: tuple[FileEntry, ...] | None = None
    host_path_type: str = ""
    read_only: bool = False
    image: str = ""
    """An image volume's reference as the pod names it (``host_path`` is then empty: nothing is on the node)."""
    pull_policy: str = ""
    """An image volume's pull policy, defaulted as the apiserver does (SetDefaults_Volume)."""
    block: bool = False
    """A block-mode PersistentVolume: `host_path` is the symlink to the device, passed to containers as a device
    (``volumeDevices``), never mounted."""


@dataclasses.dataclass(frozen=True)
class TokenSpec:
    """A projected ``serviceAccountToken`` source: the TokenRequest to make, and where the token goes."""

    volume: str
    path: str
    audience: str
    expiration_seconds: int


def _source(volume: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """The volume's type and source body; a volume with no source is an emptyDir (apiserver default)."""
    keys = [key for key in volume if key != "name" and volume[key] is not None]
    for key in keys:
        if key in SUPPORTED_KINDS:
            body = volume[key]
            return key, body if isinstance(body, Mapping) else {}
    if keys:
        return keys[0], {}
    return KIND_EMPTY_DIR, {}


def _volume_name(volume: Mapping[str, Any]) -> str:
    name = volume.get("name")
    return name if isinstance(name, str) else ""


def _optional(ref: Mapping[str, Any]) -> bool:
    return ref.get("optional") is True


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def _mappings(value: Any) -> list[Mapping[str, Any]]:
    return [item for item in _list(value) if isinstance(item, Mapping)]


# --------------------------------------------------------------------------------------------- references


def referenced_objects(pod: spec.Pod) -> tuple[frozenset[str], frozenset[str]]:
    """Names of the ConfigMaps and Secrets the pod's volumes use (projected sources included, optional too)."""
    config_maps: set[str] = set()
    secrets: set[str] = set()

    def add(names: set[str], ref: Any, field: str = "name") -> None:
        if isinstance(ref, Mapping) and isinstance(ref.get(field), str) and ref[field]:
            names.add(ref[field])

    for volume in pod.spec.volumes:
        kind, body = _source(volume)
        if kind == KIND_CONFIG_MAP:
            add(config_maps, body)
        elif kind == KIND_SECRET:
            add(secrets, body, "secretName")
        elif kind == KIND_PROJECTED:
            for source in _mappings(body.get("sources")):
                add(config_maps, source.get("configMap"))
                add(secrets, source.get("secret"))
    return frozenset(config_maps), frozenset(secrets)


def object_names(pod: spec.Pod) -> tuple[frozenset[str], frozenset[str]]:
    """Every ConfigMap and Secret the pod references, what the node's watches of them are registered with
    (`kopflet.util.manager`; upstream getConfigMapNames and getSecretNames): its volumes' (projected sources too),
    every container's ``env`` and ``envFrom`` (init, regular and ephemeral), and, for Secrets, its
    ``imagePullSecrets``."""
    config_maps, secrets = referenced_objects(pod)
    for container in (None, *pod.spec.ephemeral_containers):  # None: the init and regular containers
        env_config_maps, env_secrets = container_env.referenced_objects(pod, container)
        config_maps, secrets = config_maps | env_config_maps, secrets | env_secrets
    return config_maps, secrets | frozenset(credentials.pull_secret_names(pod.spec.raw))


STANDALONE_NOT_SUPPORTED = "not supported due to running kubelet in standalone mode"
"""upstream volume_host.go GetConfigMapFunc/GetSecretFunc without a client."""


def standalone_refusal(pod: spec.Pod) -> str:
    """Why the pod's volumes cannot be set up without an apiserver client ("" when they can): the FailedMount message
    of its first volume that needs one, a configMap or secret volume (optional or not: upstream's getter fails before
    optional is looked at) or any projected volume (upstream projected.go collectData: "cannot setup projected volume
    <name> because kube client is not configured", even for a downwardAPI-only one)."""
    for volume in pod.spec.volumes:
        kind, _ = _source(volume)
        name = _volume_name(volume)
        if kind in (KIND_CONFIG_MAP, KIND_SECRET):
            return f'MountVolume.SetUp failed for volume "{name}" : {STANDALONE_NOT_SUPPORTED}'
        if kind == KIND_PROJECTED:
            return (f'MountVolume.SetUp failed for volume "{name}" : cannot setup projected volume {name} because '
                    f"kube client is not configured")
    return ""


def _token_spec(volume: str, source: Mapping[str, Any]) -> TokenSpec:
    expiration = source.get("expirationSeconds")
    return TokenSpec(
        volume=volume,
        path=source.get("path") if isinstance(source.get("path"), str) else "",
        audience=source.get("audience") if isinstance(source.get("audience"), str) else "",
        expiration_seconds=expiration if isinstance(expiration, int) and not isinstance(expiration, bool)
        else DEFAULT_TOKEN_EXPIRATION,
    )


def token_requests(pod: spec.Pod) -> tuple[TokenSpec, ...]:
    """Every projected ``serviceAccountToken`` source, in volume order, with defaults applied (never raises)."""
    specs = []
    for volume in pod.spec.volumes:
        kind, body = _source(volume)
        if kind != KIND_PROJECTED:
            continue
        for source in _mappings(body.get("sources")):
            if isinstance(source.get("serviceAccountToken"), Mapping):
                specs.append(_token_spec(_volume_name(volume), source["serviceAccountToken"]))
    return tuple(specs)


# ------------------------------------------------------------------------------------------------ paths


def validate_path(path: str) -> str | None:
    """Upstream atomic writer `validatePath`: the error text for a bad payload path, or None."""
    if not path:
        return f"invalid path: must not be empty: {gotext.go_quote(path)}"
    if path.startswith("/"):
        return f"invalid path: must be relative path: {path}"
    if len(path) > _MAX_PATH_LENGTH:
        return f"invalid path: must be less than or equal to {_MAX_PATH_LENGTH} characters"
    items = path.split("/")
    for item in items:
        if item == "..":
            return f"invalid path: must not contain '..': {path}"
        if len(item) > _MAX_FILE_NAME_LENGTH:
            return f"invalid path: filenames must be less than or equal to {_MAX_FILE_NAME_LENGTH} characters"
    if items[0].startswith("..") and len(items[0]) > 2:
        return f"invalid path: must not start with '..': {path}"
    return None


# ----------------------------------------------------------------------------------------------- payloads


def _mode(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _fetched(name: str, objects: Mapping[str, ObjectData], kind: str) -> Mapping[str, bytes] | None:
    if name not in objects:
        raise ValueError(f"{kind} {name!r} was not fetched (missing from the mapping passed in)")
    data = objects[name]
    if isinstance(data, FetchError):  # upstream: getConfigMap/getSecret's error fails SetUp, optional or not
        raise _Failed(data.message)
    return data


def _key_payload(ref: Mapping[str, Any], data: Mapping[str, bytes], default_mode: int,
                 label: str) -> dict[str, tuple[bytes, int]]:
    """Upstream configmap/secret `MakePayload`: every key, or the listed items (key -> path, mode)."""
    items = _mappings(ref.get("items"))
    if not items:
        return {key: (_as_bytes(value), default_mode) for key, value in data.items()}
    payload = {}
    for item in items:
        key = item.get("key")
        if key not in data:
            if _optional(ref):
                continue
            raise _KeyMissing(f"{label}: {key}")
        payload[str(item.get("path") or "")] = (_as_bytes(data[key]), _mode(item.get("mode"), default_mode))
    return payload


class _KeyMissing(Exception):
    pass


def _as_bytes(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def _object_payload(ref: Mapping[str, Any], objects: Mapping[str, ObjectData], kind: str,
                    default_mode: int) -> dict[str, tuple[bytes, int]]:
    """A configMap or secret source: raises VolumeError's detail as `_Failed`."""
    name = ref.get("secretName" if kind == KIND_SECRET and "secretName" in ref else "name") or ""
    data = _fetched(name, objects, kind)
    if data is None:
        if not _optional(ref):
            raise _Failed(f'{kind.lower()} "{name}" not found')
        data = {}
    label = ("configmap references non-existent config key" if kind == KIND_CONFIG_MAP
             else "secret references non-existent secret key")
    try:
        return _key_payload(ref, data, default_mode, label)
    except _KeyMissing as exc:
        raise _Failed(str(exc)) from None


class _Failed(Exception):
    """The detail of a SetUp failure, wrapped into a VolumeError by `plan_volumes`."""


def _downward_payload(body: Mapping[str, Any], pod: spec.Pod, default_mode: int,
                      node_allocatable: Mapping[str, str] | None) -> tuple[dict[str, tuple[bytes, int]], list[str]]:
    """Upstream downwardapi `CollectData`: the files, and the errors (collected, not raised at the first)."""
    payload: dict[str, tuple[bytes, int]] = {}
    errors: list[str] = []
    for item in _mappings(body.get("items")):
        path = str(item.get("path") or "")
        mode = _mode(item.get("mode"), default_mode)
        try:
            if isinstance(item.get("fieldRef"), Mapping):
                field_path = item["fieldRef"].get("fieldPath") or ""
                if field_path not in _VOLUME_FIELD_PATHS and not field_path.startswith(
                        ("metadata.labels[", "metadata.annotations[")):
                    raise container_env.EnvError(f"unsupported fieldPath: {field_path}")
                value = container_env.field_ref_value(item["fieldRef"], pod)
            elif isinstance(item.get("resourceFieldRef"), Mapping):
                ref = item["resourceFieldRef"]
                container = pod.spec.container(ref.get("containerName") or "")
                if container is None:
                    raise container_env.EnvError(f"container {ref.get('containerName') or ''} not found")
                value = container_env.resource_field_ref_value(ref, pod, container, node_allocatable=node_allocatable)
            else:
                raise container_env.EnvError(f"downwardAPI item {path} has neither fieldRef nor resourceFieldRef")
        except (container_env.EnvError, qos.QuantityError) as exc:
            errors.append(str(exc))
            continue
        payload[path] = (value.encode(), mode)
    return payload, errors


def _aggregate(errors: list[str]) -> str:
    """Go's `utilerrors.NewAggregate(...).Error()`: one message as is, several as ``[a, b]`` (deduplicated)."""
    unique = list(dict.fromkeys(errors))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


_File = tuple[bytes, int] | tuple[bytes, int, int | None]
"""A payload entry: the data, the mode and, for the sources whose files get one, the owner (FsUser)."""


def _files(volume: str, payload: Mapping[str, _File]) -> tuple[FileEntry, ...]:
    """Validate the paths as the atomic writer does and clean them (``a//b`` -> ``a/b``), sorted by path."""
    files: dict[str, FileEntry] = {}
    for path, entry in payload.items():
        error = validate_path(path)
        if error is not None:
            raise _setup_failed(volume, error)
        clean = posixpath.normpath(path)
        files[clean] = FileEntry(path=clean, data=entry[0], mode=entry[1], owner=entry[2] if len(entry) > 2 else None)
    return tuple(files[path] for path in sorted(files))


# ------------------------------------------------------------------------------------------------- planning


def plan_volumes(pod: spec.Pod, *, layout: paths.Layout, config_maps: Mapping[str, ObjectData],
                 secrets: Mapping[str, ObjectData], tokens: Mapping[tuple[str, int], str],
                 node_name: str = "", node_allocatable: Mapping[str, str] | None = None,
                 trust_bundles: ctb.Bundles | None = None,
                 pod_certificates: Mapping[tuple[str, int], tuple[bytes, bytes] | str] | None = None,
                 persistent: Mapping[str, pvc.VolumeToMount] | None = None,
                 ) -> dict[str, VolumePlan]:
    """A `VolumePlan` per pod volume (in spec order), or `VolumeError` for the first that cannot be set up.

    `layout` places the volumes' directories. `tokens` maps ``(audience, expiration_seconds)`` (as in `TokenSpec`)
    to the token text. `node_name` is accepted for symmetry with the env API (downward API volumes cannot read
    ``spec.nodeName``). `trust_bundles`: the cluster's ClusterTrustBundles, needed (else ValueError) when a
    projected volume has a ``clusterTrustBundle`` source. `pod_certificates` maps a podCertificate source's
    ``(volume, index in its sources)`` to its (private key, certificate chain) or to why there is none (the pod
    certificate manager's answer; a source missing from it fails as upstream's NoOpManager makes it fail).
    `persistent` maps the pod's persistentVolumeClaim, ephemeral and csi volumes to their mounted volumes
    (`kopflet.volumes.desired_state` says when all are): each is planned at its plugin's path, read-only as its
    spec says; one a container uses but missing from it is a caller bug (ValueError), an unused one is left out
    (upstream never mounts it), except an inline csi volume, refused as before when missing (the volume manager
    mounts no CSI volume yet). None: those volumes are refused (``unsupported volume type``).
    """
    del node_name  # not readable through downward API volumes (only metadata.* fields are)
    plans: dict[str, VolumePlan] = {}
    used = set().union(*pvc.pod_volume_names(pod)) if persistent is not None else set()
    for volume in pod.spec.volumes:
        name = _volume_name(volume)
        kind, body = _source(volume)
        # An inline csi volume the volume manager did not mount (it runs no CSI plugin yet) is refused below as a
        # volume type kopflet has no plugin for, used or not, as the other inline types are.
        if persistent is not None and pvc.is_persistent(volume) and (
                name in persistent or pvc.volume_kind(volume) != pvc.KIND_CSI):
            if name in persistent:
                plans[name] = _persistent_plan(pod, name, pvc.volume_kind(volume), persistent[name], layout)
            elif name in used:
                raise ValueError(f"persistent volume {name!r} is used but not mounted (missing from `persistent`)")
            continue
        try:
            plans[name] = _plan(pod, name, kind, body, layout=layout, config_maps=config_maps,
                                secrets=secrets, tokens=tokens, node_allocatable=node_allocatable,
                                trust_bundles=trust_bundles, pod_certificates=pod_certificates or {})
        except _Failed as exc:
            raise _setup_failed(name, str(exc)) from None
    return plans


def _plan(pod: spec.Pod, name: str, kind: str, body: Mapping[str, Any], *, layout: paths.Layout,
          config_maps: Mapping[str, ObjectData], secrets: Mapping[str, ObjectData],
          tokens: Mapping[tuple[str, int], str], node_allocatable: Mapping[str, str] | None,
          trust_bundles: ctb.Bundles | None = None,
          pod_certificates: Mapping[tuple[str, int], tuple[bytes, bytes] | str] | None = None) -> VolumePlan:
    if kind not in SUPPORTED_KINDS:
        raise _Failed(f"unsupported volume type {kind}: kopflet has no plugin for it")
    if kind == KIND_HOST_PATH:
        path = body.get("path")
        host_type = body.get("type") or ""
        if not isinstance(path, str) or not path:
            raise _Failed("hostPath.path: Required value")
        if host_type not in HOST_PATH_TYPES:
            raise _Failed(f"invalid HostPathType {host_type}")
        return VolumePlan(name=name, kind=kind, host_path=path, host_path_type=host_type)
    if kind == KIND_IMAGE:
        return _image_plan(name, body)
    directory = layout.volume_dir(pod.uid, PLUGIN_NAMES[kind], name)
    if kind == KIND_EMPTY_DIR:
        medium = body.get("medium") or MEDIUM_DEFAULT
        if medium not in (MEDIUM_DEFAULT, MEDIUM_MEMORY):
            raise _Failed(f"unsupported emptyDir medium {medium}")
        size = body.get("sizeLimit")
        try:
            size_limit = qos.value(size) if size not in (None, "") else None
        except (TypeError, ValueError):
            raise _Failed(f"invalid emptyDir sizeLimit {size}") from None
        return VolumePlan(name=name, kind=kind, host_path=directory, tmpfs=medium == MEDIUM_MEMORY,
                          size_limit=size_limit)
    default_mode = _mode(body.get("defaultMode"), DEFAULT_MODE)
    payload: Mapping[str, _File]
    # Upstream secret, downwardAPI and projected volumes wrap an emptyDir of medium Memory; configMap one on disk.
    tmpfs = kind != KIND_CONFIG_MAP
    if kind == KIND_CONFIG_MAP:
        payload = _object_payload(body, config_maps, KIND_CONFIG_MAP, default_mode)
    elif kind == KIND_SECRET:
        payload = _object_payload(body, secrets, KIND_SECRET, default_mode)
    elif kind == KIND_DOWNWARD_API:
        payload, errors = _downward_payload(body, pod, default_mode, node_allocatable)
        if errors:
            raise _Failed(_aggregate(errors))
    else:
        payload = _projected_payload(pod, name, body, default_mode, config_maps=config_maps,
                                     secrets=secrets, tokens=tokens, node_allocatable=node_allocatable,
                                     trust_bundles=trust_bundles, pod_certificates=pod_certificates or {})
    return VolumePlan(name=name, kind=kind, host_path=directory, tmpfs=tmpfs, files=_files(name, payload),
                      read_only=True)


def _persistent_plan(pod: spec.Pod, name: str, kind: str, volume: pvc.VolumeToMount,
                     layout: paths.Layout) -> VolumePlan:
    """A mounted PVC-backed or inline csi volume: where its plugin set it up for the pod (`pvc.host_path`), and
    read-only as its spec says (upstream makeMounts: the mounter's ReadOnly attribute)."""
    return VolumePlan(name=name, kind=kind, host_path=pvc.host_path(volume.spec, layout, pod.uid),
                      read_only=volume.spec.read_only, block=volume.spec.is_block)


def _image_plan(name: str, body: Mapping[str, Any]) -> VolumePlan:
    """Upstream's image plugin: no path (GetPath ""), always read-only (its Attributes), nothing to set up. The
    reference is checked when it is pulled (InvalidImageName), as upstream's EnsureImageExists does; the pull
    policy, when unset (a static pod's), is the apiserver's default: Always for ``:latest`` or no tag, else
    IfNotPresent (SetDefaults_Volume)."""
    reference = body.get("reference")
    reference = reference if isinstance(reference, str) else ""
    policy = body.get("pullPolicy")
    if policy in (None, ""):
        policy = spec.default_pull_policy(reference)
    if policy not in spec.PULL_POLICIES:
        raise _Failed(f"unsupported image volume pullPolicy {policy}")
    return VolumePlan(name=name, kind=KIND_IMAGE, host_path="", read_only=True, image=reference,
                      pull_policy=str(policy))


def _projected_payload(pod: spec.Pod, name: str, body: Mapping[str, Any], default_mode: int, *,
                       config_maps: Mapping[str, ObjectData],
                       secrets: Mapping[str, ObjectData], tokens: Mapping[tuple[str, int], str],
                       node_allocatable: Mapping[str, str] | None,
                       trust_bundles: ctb.Bundles | None = None,
                       pod_certificates: Mapping[tuple[str, int], tuple[bytes, bytes] | str] | None = None,
                       ) -> dict[str, _File]:
    """Upstream projected `collectData`: sources in order (later paths win), errors collected."""
    payload: dict[str, _File] = {}
    errors: list[str] = []
    for index, source in enumerate(_list(body.get("sources"))):
        if not isinstance(source, Mapping):
            continue
        try:
            if isinstance(source.get("configMap"), Mapping):
                payload.update(_object_payload(source["configMap"], config_maps, KIND_CONFIG_MAP, default_mode))
            elif isinstance(source.get("secret"), Mapping):
                payload.update(_object_payload(source["secret"], secrets, KIND_SECRET, default_mode))
            elif isinstance(source.get("downwardAPI"), Mapping):
                files, failures = _downward_payload(source["downwardAPI"], pod, default_mode, node_allocatable)
                payload.update(files)
                errors.extend(failures)
            elif isinstance(source.get("serviceAccountToken"), Mapping):
                token = _token_spec(name, source["serviceAccountToken"])
                if token.expiration_seconds < MIN_TOKEN_EXPIRATION:
                    raise _Failed(f"serviceAccountToken.expirationSeconds: Invalid value: "
                                  f"{token.expiration_seconds}: may not specify a duration less than 10 minutes")
                text = tokens.get((token.audience, token.expiration_seconds))
                if text is None:
                    raise _Failed(f"failed to fetch token: no token for audience {gotext.go_quote(token.audience)} "
                                  f"expiring in {token.expiration_seconds}s")
                mode, owner = _sensitive_file(pod, default_mode)
                payload[token.path] = (text.encode(), mode, owner)
            elif isinstance(source.get("clusterTrustBundle"), Mapping):
                payload.update(_trust_bundle_payload(pod, source["clusterTrustBundle"], default_mode, trust_bundles))
            elif isinstance(source.get("podCertificate"), Mapping):
                payload.update(_pod_certificate_payload(pod, (pod_certificates or {}).get((name, index)),
                                                        source["podCertificate"], default_mode))
            else:
                kinds = ", ".join(key for key in source if source[key] is not None) or "(none)"
                raise _Failed(f"unsupported projected volume source {kinds}")
        except _Failed as exc:
            errors.append(str(exc))
    if errors:
        raise _Failed(_aggregate(errors))
    return payload


def _trust_bundle_payload(pod: spec.Pod, source: Mapping[str, Any], default_mode: int,
                          trust_bundles: ctb.Bundles | None) -> dict[str, _File]:
    """collectData's ClusterTrustBundle branch: the merged anchors at ``path``, 0600 and owned by the pod's user
    when all its containers run as one (FsUserFrom), or under an fsGroup (SetVolumeOwnership then adds group read)."""
    if trust_bundles is None:
        raise ValueError("the ClusterTrustBundles were not fetched (trust_bundles passed in as None)")
    try:
        anchors = ctb.trust_anchors(source, trust_bundles)
    except ctb.TrustAnchorsError as exc:
        raise _Failed(str(exc)) from None
    mode, owner = _sensitive_file(pod, default_mode)
    return {str(source.get("path") or ""): (anchors, mode, owner)}


def _pod_certificate_payload(pod: spec.Pod, credentials: tuple[bytes, bytes] | str | None,
                             body: Mapping[str, Any], default_mode: int) -> dict[str, _File]:
    """collectData's PodCertificate branch: the manager's bundle (or its error) as the source's files (the
    credential bundle, the key, the chain), 0600 and owned by the pod's user when all its containers run as one
    (FsUserFrom), or under an fsGroup (SetVolumeOwnership then adds group read), the defaultMode otherwise."""
    if credentials is None:  # upstream NoOpManager: a kubelet without a pod certificate manager
        credentials = podcertificate.NOT_IMPLEMENTED
    if isinstance(credentials, str):
        raise _Failed(credentials)
    mode, owner = _sensitive_file(pod, default_mode)
    files = podcertificate.files(podcertificate.Source.from_body(body), *credentials)
    return {path: (data, mode, owner) for path, data in files.items()}


def _sensitive_file(pod: spec.Pod, default_mode: int) -> tuple[int, int | None]:
    """The mode and owner of a projected token, trust bundle or pod certificate file (upstream collectData): 0600 and
    owned by the pods' user when all its containers run as one (FsUserFrom), 0600 under an fsGroup (SetVolumeOwnership
    then adds group read), the defaultMode otherwise."""
    owner = fs_user(pod)
    fs_group = pod.spec.security_context.get("fsGroup")
    return (0o600 if owner is not None or (isinstance(fs_group, int) and not isinstance(fs_group, bool))
            else default_mode), owner


def fs_user(pod: spec.Pod) -> int | None:
    """Upstream volume util FsUserFrom: the runAsUser every container (init, regular, ephemeral) runs as, from its
    own securityContext or the pod's; None when one has none or two differ."""
    pod_user = pod.spec.security_context.get("runAsUser")
    user: int | None = None
    for container in (*pod.spec.init_containers, *pod.spec.containers, *pod.spec.ephemeral_containers):
        own = (container.security_context or {}).get("runAsUser")
        effective = own if isinstance(own, int) else pod_user
        if not isinstance(effective, int) or isinstance(effective, bool) or (user is not None and user != effective):
            return None
        user = effective
    return user


# -------------------------------------------------------------------------------------------------- mounts


def container_mounts(pod: spec.Pod, container: spec.ContainerSpec, plans: Mapping[str, VolumePlan],
                     env: Mapping[str, str], images: Mapping[str, cri.ImageSpec] | None = None) -> list[cri.Mount]:
    """The container's ``volumeMounts`` as CRI mounts (upstream `makeMounts` + `translateMountPropagation`).

    `env` is the container's resolved environment, for ``subPathExpr``. The caller creates a missing subPath
    directory inside the volume before CreateContainer, as the kubelet does. `images` are the pulled images of
    the image volumes this container mounts, by volume name: such a mount names its image and takes the subPath
    inside it (upstream's ImageSubPath, checked by the runtime, which refuses one that is missing or not a
    directory), with no host path; an image volume without its image here is a caller bug (ValueError).
    """
    del pod  # kept for the API's symmetry (upstream makeMounts takes the pod)
    block = frozenset(n for n, p in plans.items() if p.block)
    if error := unsupported.volume_devices_error(container, block):  # refused, not skipped (upstream makeBlockVolumes)
        raise VolumeError(error)
    mounts = []
    for mount in container.volume_mounts:
        name = mount.get("name") or ""
        if error := unsupported.mount_error(container, mount):  # recursiveReadOnly Enabled, bindMountOptions
            raise VolumeError(error, name)
        plan = plans.get(name)
        if plan is None or plan.block:  # a block volume has no mounter (its mode was checked when resolved)
            raise VolumeError(f'cannot find volume "{name}" to mount into container "{container.name}"', name)
        sub_path = mount.get("subPath") or ""
        if mount.get("subPathExpr"):
            sub_path = _expand_sub_path(mount["subPathExpr"], env, name)
        host_path = plan.host_path
        if sub_path:
            if sub_path.startswith("/"):
                raise VolumeError(f"error SubPath `{sub_path}` must not be an absolute path", name)
            if ".." in sub_path.split("/"):
                raise VolumeError(f"unable to provision SubPath `{sub_path}`: must not contain '..'", name)
        image: cri.ImageSpec | None = None
        if plan.kind == KIND_IMAGE:
            image = (images or {}).get(name)
            if image is None:
                raise ValueError(f"image volume {name!r} has no pulled image (the caller pulls it first)")
        elif sub_path:
            host_path = posixpath.join(host_path, posixpath.normpath(sub_path))
        propagation = mount.get("mountPropagation")
        if propagation not in _PROPAGATION:
            raise VolumeError(f'invalid MountPropagation mode: "{propagation}"', name)
        mounts.append(cri.Mount(
            container_path=str(mount.get("mountPath") or ""),
            host_path=host_path,
            readonly=mount.get("readOnly") is True or plan.read_only,
            propagation=_PROPAGATION[propagation],
            image=image,
            image_sub_path=sub_path if image is not None else "",
        ))
    return mounts


def container_devices(container: spec.ContainerSpec, plans: Mapping[str, VolumePlan]) -> list[cri.Device]:
    """The container's ``volumeDevices`` as CRI devices (upstream `makeBlockVolumes`): each block volume's symlink
    under the pod's ``volumeDevices`` directory at the device path, ``r`` when read-only, else ``mrw``. The caller
    leaves out a device whose symlink does not exist (upstream skips it)."""
    devices = []
    for device in container.raw.get("volumeDevices") or []:
        if not isinstance(device, Mapping):
            continue
        name, path = str(device.get("name") or ""), str(device.get("devicePath") or "")
        if not path.startswith("/"):
            raise VolumeError(f"error DevicePath `{path}` must be an absolute path", name)
        plan = plans.get(name)
        if plan is None or not plan.block:
            raise VolumeError(f"cannot find volume {gotext.go_quote(name)} to pass into container "
                              f"{gotext.go_quote(container.name)}", name)
        devices.append(cri.Device(container_path=path, host_path=plan.host_path,
                                  permissions="r" if plan.read_only else "mrw"))
    return devices


def _expand_sub_path(template: str, env: Mapping[str, str], volume: str) -> str:
    """Upstream `ExpandContainerVolumeMounts`: unknown or empty variables are an error, not kept as written."""
    missing: set[str] = set()

    def lookup(key: str) -> str:
        value = env.get(key, "")
        if not value:
            missing.add(key)
        return value

    expanded = container_env.expand(template, lookup)
    if missing:
        raise VolumeError(f"missing value for {', '.join(sorted(missing))}", volume)
    return expanded


__all__ = [
    "FetchError",
    "FileEntry",
    "ObjectData",
    "TokenSpec",
    "VolumeError",
    "VolumePlan",
    "container_devices",
    "container_mounts",
    "fs_user",
    "plan_volumes",
    "referenced_objects",
    "token_requests",
    "validate_path",
]


FS_GROUP_CHANGE_ON_ROOT_MISMATCH = "OnRootMismatch"  # v1.FSGroupChangeOnRootMismatch


def requires_permission_change(*, gid: int, mode: int, is_dir: bool, fs_group: int, read_only: bool) -> bool:
    """Upstream `requiresPermissionChange`: whether a volume's root (its ``stat`` group and mode) still needs the
    fsGroup's ownership: another group, not a directory, or group read (write unless read-only), execute and setgid
    missing."""
    if gid != fs_group or not is_dir:
        return True
    wanted = (0o440 if read_only else 0o660) | 0o110
    return (mode & wanted) != wanted or not mode & 0o2000


def skip_permission_change(policy: str | None, *, gid: int, mode: int, is_dir: bool, fs_group: int,
                           read_only: bool) -> bool:
    """Upstream `skipPermissionChange`: with ``fsGroupChangePolicy: OnRootMismatch`` and a root that already has the
    group and mode, the recursive change is skipped; with any other policy (Always, the default) it never is."""
    if policy != FS_GROUP_CHANGE_ON_ROOT_MISMATCH:
        return False
    return not requires_permission_change(gid=gid, mode=mode, is_dir=is_dir, fs_group=fs_group, read_only=read_only)


def ownership_mode(mode: int, *, is_dir: bool, read_only: bool) -> int:
    """The permission bits a volume entry gets under an fsGroup (upstream SetVolumeOwnership): group read, plus
    write unless read-only, plus execute and setgid on directories, on top of what it had."""
    mask = 0o440 if read_only else 0o660
    if is_dir:
        mask |= 0o110 | 0o2000
    return (mode & 0o7777) | mask
