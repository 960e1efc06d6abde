"""
What the kubelet asks a CSI node plugin, and when: NodeStageVolume and NodePublishVolume requests built from a
volume's spec, the CSIDriver object's say (attach, pod info, tokens, fsGroup policy, lifecycle modes), the node
plugin's capabilities and the VolumeAttachment's answer.

Mirrors pkg/volume/csi: csi_attacher.go (`getAttachmentName`, `makeDeviceMountPath`, `MountDevice`,
`WaitForAttach`, `verifyAttachmentStatus`), csi_mounter.go (`SetUpAt`, `podServiceAccountTokenAttrs`,
`supportsFSGroup`, `getFSGroupPolicy`, `supportsVolumeLifecycleMode`, the ``vol_data.json`` keys), csi_block.go
(`stageVolumeForBlock`, `publishVolumeForBlock`), csi_plugin.go (`skipAttach`, `podInfoEnabled`,
`getPublishContext`), csi_util.go (`getPodInfoAttrs`, `saveVolumeData`), csi_client.go (`NodeStageVolume`,
`NodePublishVolume`: the volume capability, the access-mode mappings), and pkg/volume/volume_linux.go
(`skipPermissionChange`) for the fsGroup change policy.

Pure: the I/O side (the CSI gRPC client, the API fetches) calls these with what it has read and sends what they
build. Secrets come decoded (the Secret's ``data`` as strings, as `getCredentialsFromSecret` makes them).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from kopflet import gotext, paths
from kopflet.api import spec
from kopflet.volumes import pvc

CSI_LOG_PREFIX = paths.CSI_PLUGIN_NAME + ": "
"""Upstream csi `log()`: most of the CSI plugin's own errors start with ``kubernetes.io/csi: ``."""
FS_TYPE_BLOCK = "block"  # csi_plugin.go fsTypeBlockName: NodeStage/NodePublish of a block volume

# storage/v1 FSGroupPolicy
FS_GROUP_POLICY_RWO_WITH_FS_TYPE = "ReadWriteOnceWithFSType"
FS_GROUP_POLICY_FILE = "File"
FS_GROUP_POLICY_NONE = "None"
FS_GROUP_CHANGE_ON_ROOT_MISMATCH = "OnRootMismatch"  # v1.FSGroupChangeOnRootMismatch
FS_GROUP_CHANGE_ALWAYS = "Always"

# podInfoOnMount's volume context keys (csi_util.go getPodInfoAttrs), and the service account tokens' key.
POD_NAME_KEY = "csi.storage.k8s.io/pod.name"
POD_NAMESPACE_KEY = "csi.storage.k8s.io/pod.namespace"
POD_UID_KEY = "csi.storage.k8s.io/pod.uid"
SERVICE_ACCOUNT_NAME_KEY = "csi.storage.k8s.io/serviceAccount.name"
EPHEMERAL_KEY = "csi.storage.k8s.io/ephemeral"
SERVICE_ACCOUNT_TOKENS_KEY = "csi.storage.k8s.io/serviceAccount.tokens"

# csi.proto VolumeCapability.AccessMode.Mode
ACCESS_MODES = {
    "UNKNOWN": 0,
    "SINGLE_NODE_WRITER": 1,
    "SINGLE_NODE_READER_ONLY": 2,
    "MULTI_NODE_READER_ONLY": 3,
    "MULTI_NODE_SINGLE_WRITER": 4,
    "MULTI_NODE_MULTI_WRITER": 5,
    "SINGLE_NODE_SINGLE_WRITER": 6,
    "SINGLE_NODE_MULTI_WRITER": 7,
}

# csi.proto NodeServiceCapability.RPC.Type
CAP_STAGE_UNSTAGE_VOLUME = "STAGE_UNSTAGE_VOLUME"
CAP_GET_VOLUME_STATS = "GET_VOLUME_STATS"
CAP_EXPAND_VOLUME = "EXPAND_VOLUME"
CAP_VOLUME_CONDITION = "VOLUME_CONDITION"
CAP_SINGLE_NODE_MULTI_WRITER = "SINGLE_NODE_MULTI_WRITER"
CAP_VOLUME_MOUNT_GROUP = "VOLUME_MOUNT_GROUP"

# vol_data.json keys (csi_mounter.go volDataKey)
VOL_DATA_SPEC_VOL_ID = "specVolID"
VOL_DATA_VOLUME_HANDLE = "volumeHandle"
VOL_DATA_DRIVER_NAME = "driverName"
VOL_DATA_NODE_NAME = "nodeName"
VOL_DATA_ATTACHMENT_ID = "attachmentID"
VOL_DATA_LIFECYCLE_MODE = "volumeLifecycleMode"


def csi_log(message: str) -> str:
    """Upstream csi `log`: the CSI plugin's prefix on one of its errors."""
    return CSI_LOG_PREFIX + message


def volume_message(prefix: str, spec_name: str, detail: str | None = None) -> str:
    """Upstream VolumeToMount `GenerateError`'s event text: ``<prefix> for volume "<spec name>" : <detail>``, and
    with no error ``<prefix> for volume "<spec name>" `` (Go's format keeps the trailing space). `spec_name` is the
    PV's name for a PV-backed volume (`VolumeSpec.name`)."""
    suffix = f": {detail}" if detail is not None else ""
    return f"{prefix} for volume {gotext.go_quote(spec_name)} {suffix}"


def driver_not_registered(driver: str) -> str:
    """Upstream `newCsiDriverClient`'s error: the driver has not registered through the plugin watcher."""
    if not driver:
        return "driver name is empty"
    return f"driver name {driver} not found in the list of registered CSI drivers"


# -------------------------------------------------------------------------------------------- the driver


@dataclasses.dataclass(frozen=True)
class TokenRequest:
    """A CSIDriver ``spec.tokenRequests`` entry: a ServiceAccount token to request for the pod at NodePublish."""

    audience: str
    expiration_seconds: int | None = None


@dataclasses.dataclass(frozen=True)
class DriverInfo:
    """What a CSIDriver object says, with the apiserver's defaults (storage/v1 SetDefaults_CSIDriver); `exists`
    False when there is none (NotFound: CSIDriver objects are optional, and then only persistent volumes work)."""

    name: str
    exists: bool = False
    attach_required: bool = True
    pod_info_on_mount: bool = False
    fs_group_policy: str = FS_GROUP_POLICY_RWO_WITH_FS_TYPE
    lifecycle_modes: tuple[str, ...] = (pvc.LIFECYCLE_PERSISTENT,)
    token_requests: tuple[TokenRequest, ...] = ()
    requires_republish: bool = False
    service_account_token_in_secrets: bool = False
    se_linux_mount: bool = False

    @classmethod
    def from_object(cls, name: str, body: Mapping[str, Any] | None) -> DriverInfo:
        """`body` a CSIDriver as the API returns it, None for NotFound. A field the apiserver would have defaulted
        but is missing takes its default, except ``fsGroupPolicy``, left empty so `fs_group_policy` fails as
        upstream's getFSGroupPolicy does on a CSIDriver without one."""
        if body is None:
            return cls(name=name)
        driver_spec = body.get("spec") if isinstance(body.get("spec"), Mapping) else {}
        assert isinstance(driver_spec, Mapping)
        modes = driver_spec.get("volumeLifecycleModes")
        tokens = []
        for item in driver_spec.get("tokenRequests") or []:
            if isinstance(item, Mapping):
                expiration = item.get("expirationSeconds")
                tokens.append(TokenRequest(
                    audience=str(item.get("audience") or ""),
                    expiration_seconds=expiration if isinstance(expiration, int) and not isinstance(expiration, bool)
                    else None))
        policy = driver_spec.get("fsGroupPolicy")
        return cls(
            name=name, exists=True, attach_required=driver_spec.get("attachRequired") is not False,
            pod_info_on_mount=driver_spec.get("podInfoOnMount") is True,
            fs_group_policy=policy if isinstance(policy, str) else "",
            lifecycle_modes=tuple(str(m) for m in modes) if isinstance(modes, list) else (pvc.LIFECYCLE_PERSISTENT,),
            token_requests=tuple(tokens), requires_republish=driver_spec.get("requiresRepublish") is True,
            service_account_token_in_secrets=driver_spec.get("serviceAccountTokenInSecrets") is True,
            se_linux_mount=driver_spec.get("seLinuxMount") is True)


@dataclasses.dataclass(frozen=True)
class NodeCapabilities:
    """The node plugin's NodeGetCapabilities answer, as the kubelet reads it."""

    stage_unstage: bool = False
    volume_mount_group: bool = False
    single_node_multi_writer: bool = False
    expand_volume: bool = False
    get_volume_stats: bool = False

    @classmethod
    def from_names(cls, names: Iterable[str]) -> NodeCapabilities:
        """From the RPC types' names (``STAGE_UNSTAGE_VOLUME``, ...); unknown ones are ignored."""
        found = set(names)
        return cls(stage_unstage=CAP_STAGE_UNSTAGE_VOLUME in found, volume_mount_group=CAP_VOLUME_MOUNT_GROUP in found,
                   single_node_multi_writer=CAP_SINGLE_NODE_MULTI_WRITER in found,
                   expand_volume=CAP_EXPAND_VOLUME in found, get_volume_stats=CAP_GET_VOLUME_STATS in found)


def lifecycle_mode_error(driver: DriverInfo, lifecycle: str) -> str | None:
    """Upstream `supportsVolumeLifecycleMode`: a persistent volume needs no CSIDriver; an ephemeral (inline) one
    needs a CSIDriver listing ``Ephemeral``. SetUp's error then reads ``kubernetes.io/csi: mounter.SetupAt failed
    to check volume lifecycle mode: <this>``."""
    if not driver.exists:
        if lifecycle == pvc.LIFECYCLE_PERSISTENT:
            return None
        return f"volume mode {gotext.go_quote(lifecycle)} not supported by driver {driver.name} (no CSIDriver object)"
    if lifecycle in driver.lifecycle_modes:
        return None
    modes = "[" + " ".join(gotext.go_quote(m) for m in driver.lifecycle_modes) + "]"
    return f"volume mode {gotext.go_quote(lifecycle)} not supported by driver {driver.name} (only supports {modes})"


def attachment_name(volume_handle: str, driver: str, node_name: str) -> str:
    """Upstream `getAttachmentName`: the VolumeAttachment's name, ``csi-<sha256(handle + driver + node)>``."""
    return "csi-" + hashlib.sha256(f"{volume_handle}{driver}{node_name}".encode()).hexdigest()


def pod_info_attributes(pod: spec.Pod, lifecycle: str) -> dict[str, str]:
    """Upstream `getPodInfoAttrs`: the volume context keys a ``podInfoOnMount`` driver gets at NodePublish."""
    return {
        POD_NAME_KEY: pod.name,
        POD_NAMESPACE_KEY: pod.namespace,
        POD_UID_KEY: pod.uid,
        SERVICE_ACCOUNT_NAME_KEY: pod.spec.service_account_name,
        EPHEMERAL_KEY: "true" if lifecycle == pvc.LIFECYCLE_EPHEMERAL else "false",
    }


def token_request_body(pod: spec.Pod, request: TokenRequest) -> dict[str, Any]:
    """The TokenRequest for one ``tokenRequests`` entry (podServiceAccountTokenAttrs): bound to the pod, for the
    pod's ServiceAccount; an empty audience asks for the apiserver's own."""
    token_spec: dict[str, Any] = {
        "audiences": [request.audience] if request.audience else [],
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid},
    }
    if request.expiration_seconds is not None:
        token_spec["expirationSeconds"] = request.expiration_seconds
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": token_spec}


def service_account_tokens(statuses: Mapping[str, tuple[str, str]]) -> dict[str, str]:
    """Upstream `podServiceAccountTokenAttrs`' attribute: ``csi.storage.k8s.io/serviceAccount.tokens``, the
    JSON of each audience's TokenRequest status (`statuses`: audience → (token, expirationTimestamp as the API
    wrote it)); nothing for a driver without tokenRequests."""
    if not statuses:
        return {}
    document = {audience: {"token": token, "expirationTimestamp": expires}
                for audience, (token, expires) in sorted(statuses.items())}
    return {SERVICE_ACCOUNT_TOKENS_KEY: gotext.go_json(document)}


# ------------------------------------------------------------------------------------------------ fsGroup


def fs_group_policy(driver: DriverInfo) -> tuple[str, str | None]:
    """Upstream `getFSGroupPolicy`: the policy, and the error a CSIDriver without one gives (SetUp then fails with
    ``kubernetes.io/csi: mounter.SetupAt failed to check fsGroup policy: <error>``)."""
    if not driver.exists:
        return FS_GROUP_POLICY_RWO_WITH_FS_TYPE, None
    if not driver.fs_group_policy:
        return FS_GROUP_POLICY_RWO_WITH_FS_TYPE, csi_log("expected valid fsGroupPolicy, received nil value or empty "
                                                         "string")
    return driver.fs_group_policy, None


def _has_read_write_once(modes: Iterable[str]) -> bool:
    return any(m in (pvc.READ_WRITE_ONCE, pvc.READ_WRITE_ONCE_POD) for m in modes)


def supports_fs_group(volume: pvc.VolumeSpec, fs_group: int | None, policy: str) -> bool:
    """Upstream csi `supportsFSGroup`: whether the kubelet hands the volume to the pod's fsGroup. Never for a
    read-only volume or under policy None; always under File; under ReadWriteOnceWithFSType only with an fsType
    and, for a PV, a ReadWriteOnce(Pod) access mode (an inline volume is mounted ReadWriteOnce)."""
    if fs_group is None or policy == FS_GROUP_POLICY_NONE or volume.read_only:
        return False
    if policy == FS_GROUP_POLICY_FILE:
        return True
    if not volume.fs_type:
        return False
    if volume.pv_name:
        return bool(volume.access_modes) and _has_read_write_once(volume.access_modes)
    return True


def kubelet_applies_fs_group(volume: pvc.VolumeSpec, fs_group: int | None, policy: str,
                             capabilities: NodeCapabilities) -> bool:
    """SetUpAt's choice: a driver with VOLUME_MOUNT_GROUP gets the fsGroup in its requests and applies it itself;
    otherwise the kubelet changes the published volume's ownership when `supports_fs_group` says so."""
    return not capabilities.volume_mount_group and supports_fs_group(volume, fs_group, policy)


def skip_permission_change(change_policy: str | None, *, root_gid: int, root_mode: int, is_dir: bool,
                           fs_group: int, read_only: bool) -> bool:
    """Upstream `skipPermissionChange` from the volume root's stat: only under OnRootMismatch, and only when the
    root is a directory of group `fs_group` already carrying group rw (r under read-only), x and setgid. Always
    (or unset) walks the whole volume."""
    if change_policy != FS_GROUP_CHANGE_ON_ROOT_MISMATCH:
        return False
    if root_gid != fs_group or not is_dir:
        return False
    wanted = (0o440 if read_only else 0o660) | 0o110
    return (root_mode & 0o777 & wanted) == wanted and bool(root_mode & 0o2000)


# ----------------------------------------------------------------------------------------------- requests


@dataclasses.dataclass(frozen=True)
class VolumeCapability:
    """csi.proto VolumeCapability: a block volume, or a mount with its fsType, flags and volume_mount_group."""

    access_mode: str
    block: bool = False
    fs_type: str = ""
    mount_flags: tuple[str, ...] = ()
    volume_mount_group: str = ""

    @property
    def access_mode_value(self) -> int:
        """The enum's number, for the proto."""
        return ACCESS_MODES[self.access_mode]


@dataclasses.dataclass(frozen=True)
class NodeStageRequest:
    """csi.proto NodeStageVolumeRequest as upstream's MountDevice (or SetUpDevice for a block volume) fills it."""

    volume_id: str
    staging_target_path: str
    volume_capability: VolumeCapability
    publish_context: Mapping[str, str] = dataclasses.field(default_factory=dict)
    secrets: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False)
    volume_context: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class NodePublishRequest:
    """csi.proto NodePublishVolumeRequest as upstream's SetUpAt (or MapPodDevice for a block volume) fills it."""

    volume_id: str
    target_path: str
    volume_capability: VolumeCapability
    readonly: bool = False
    staging_target_path: str = ""
    publish_context: Mapping[str, str] = dataclasses.field(default_factory=dict)
    secrets: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False)
    volume_context: Mapping[str, str] = dataclasses.field(default_factory=dict)


def csi_access_mode(access_mode: str, *, single_node_multi_writer: bool) -> str:
    """Upstream `asCSIAccessModeV1` (and, for a driver with SINGLE_NODE_MULTI_WRITER,
    `asSingleNodeMultiWriterCapableCSIAccessModeV1`): a Kubernetes access mode as CSI's."""
    if single_node_multi_writer:
        table = {pvc.READ_WRITE_ONCE: "SINGLE_NODE_MULTI_WRITER", pvc.READ_ONLY_MANY: "MULTI_NODE_READER_ONLY",
                 pvc.READ_WRITE_MANY: "MULTI_NODE_MULTI_WRITER", pvc.READ_WRITE_ONCE_POD: "SINGLE_NODE_SINGLE_WRITER"}
    else:  # ReadWriteOncePod as SINGLE_NODE_WRITER lets drivers without the capability serve it
        table = {pvc.READ_WRITE_ONCE: "SINGLE_NODE_WRITER", pvc.READ_ONLY_MANY: "MULTI_NODE_READER_ONLY",
                 pvc.READ_WRITE_MANY: "MULTI_NODE_MULTI_WRITER", pvc.READ_WRITE_ONCE_POD: "SINGLE_NODE_WRITER"}
    return table.get(access_mode, "UNKNOWN")


def _access_mode(volume: pvc.VolumeSpec) -> str:
    """The one access mode upstream passes: the PV's first, ReadWriteOnce without one (and for inline volumes)."""
    return volume.access_modes[0] if volume.access_modes else pvc.READ_WRITE_ONCE


def _capability(volume: pvc.VolumeSpec, capabilities: NodeCapabilities, *, block: bool, fs_type: str = "",
                mount_flags: tuple[str, ...] = (), fs_group: int | None = None) -> VolumeCapability:
    mode = csi_access_mode(_access_mode(volume), single_node_multi_writer=capabilities.single_node_multi_writer)
    if block:
        return VolumeCapability(access_mode=mode, block=True)
    group = str(fs_group) if fs_group is not None and capabilities.volume_mount_group else ""
    return VolumeCapability(access_mode=mode, fs_type=fs_type, mount_flags=mount_flags, volume_mount_group=group)


def staging_path(volume: pvc.VolumeSpec, layout: paths.Layout) -> str:
    """The staging_target_path: ``globalmount`` under the sha256 of the handle (makeDeviceMountPath), a block
    volume's ``volumeDevices/staging/<pv>``."""
    if volume.is_block:
        return layout.csi_block_staging_path(volume.name)
    return layout.csi_device_mount_path(volume.driver, volume.volume_handle)


def publish_path(volume: pvc.VolumeSpec, layout: paths.Layout, pod_uid: str) -> str:
    """The target_path: the pod's ``kubernetes.io~csi/<spec name>/mount``, a block volume's
    ``volumeDevices/publish/<pv>/<pod uid>``."""
    if volume.is_block:
        return layout.csi_block_publish_path(volume.name, pod_uid)
    return layout.csi_mount_path(pod_uid, volume.name)


def node_stage_request(volume: pvc.VolumeSpec, layout: paths.Layout, *, capabilities: NodeCapabilities,
                       publish_context: Mapping[str, str] | None = None, secrets: Mapping[str, str] | None = None,
                       fs_group: int | None = None) -> NodeStageRequest | None:
    """Upstream MountDevice / stageVolumeForBlock: the NodeStageVolume request, or None for a driver without
    STAGE_UNSTAGE_VOLUME (MountDevice then only makes the directory). `secrets` are the NodeStageSecretRef's
    (fetched only for a stage-capable driver), `fs_group` the pod's (sent only to a VOLUME_MOUNT_GROUP driver; a
    block volume gets neither it nor mount flags)."""
    if volume.lifecycle != pvc.LIFECYCLE_PERSISTENT:
        raise ValueError(f"volume {volume.name!r} is an inline (ephemeral) csi volume: it is never staged")
    if not capabilities.stage_unstage:
        return None
    if volume.is_block:
        capability = _capability(volume, capabilities, block=True)
    else:
        capability = _capability(volume, capabilities, block=False, fs_type=volume.fs_type,
                                 mount_flags=volume.mount_options, fs_group=fs_group)
    return NodeStageRequest(volume_id=volume.volume_handle, staging_target_path=staging_path(volume, layout),
                            volume_capability=capability, publish_context=dict(publish_context or {}),
                            secrets=dict(secrets or {}), volume_context=dict(volume.volume_attributes))


def node_publish_request(volume: pvc.VolumeSpec, pod: spec.Pod, layout: paths.Layout, *, driver: DriverInfo,
                         capabilities: NodeCapabilities, publish_context: Mapping[str, str] | None = None,
                         secrets: Mapping[str, str] | None = None, tokens: Mapping[str, str] | None = None,
                         fs_group: int | None = None) -> NodePublishRequest:
    """Upstream SetUpAt (publishVolumeForBlock for a block volume): the NodePublishVolume request.

    The volume context is the volume's attributes, then the pod's (a ``podInfoOnMount`` driver), then `tokens`
    (`service_account_tokens`' attribute; only a driver with ``tokenRequests`` gets them), which go to the secrets
    instead for a ``serviceAccountTokenInSecrets`` driver. `secrets` are the NodePublishSecretRef's. A persistent
    volume is published from its staging path when the driver stages; an inline one never is, and gets no publish
    context and no mount options. A block volume names its staging path always, and gets no token, mount option or
    fsGroup."""
    pod_info = pod_info_attributes(pod, volume.lifecycle) if driver.pod_info_on_mount else {}
    context = {**volume.volume_attributes, **pod_info}
    all_secrets = dict(secrets or {})
    if volume.is_block:
        return NodePublishRequest(
            volume_id=volume.volume_handle, target_path=publish_path(volume, layout, pod.uid),
            volume_capability=_capability(volume, capabilities, block=True), readonly=volume.read_only,
            staging_target_path=staging_path(volume, layout), publish_context=dict(publish_context or {}),
            secrets=all_secrets, volume_context=context)
    token_attributes = dict(tokens or {}) if driver.token_requests else {}
    if driver.service_account_token_in_secrets:
        all_secrets.update(token_attributes)
    else:
        context.update(token_attributes)
    persistent = volume.lifecycle == pvc.LIFECYCLE_PERSISTENT
    capability = _capability(volume, capabilities, block=False, fs_type=volume.fs_type,
                             mount_flags=volume.mount_options if persistent else (), fs_group=fs_group)
    staged = persistent and capabilities.stage_unstage
    return NodePublishRequest(
        volume_id=volume.volume_handle, target_path=publish_path(volume, layout, pod.uid),
        volume_capability=capability, readonly=volume.read_only,
        staging_target_path=staging_path(volume, layout) if staged else "",
        publish_context=dict(publish_context or {}) if persistent else {}, secrets=all_secrets,
        volume_context=context)


def secrets_wanted(volume: pvc.VolumeSpec, capabilities: NodeCapabilities) -> tuple[pvc.SecretRef, ...]:
    """The Secrets to read before staging and publishing: the NodeStageSecretRef only for a driver that stages
    (MountDevice, stageVolumeForBlock), the NodePublishSecretRef always."""
    refs = []
    if volume.node_stage_secret is not None and capabilities.stage_unstage:
        refs.append(volume.node_stage_secret)
    if volume.node_publish_secret is not None:
        refs.append(volume.node_publish_secret)
    return tuple(dict.fromkeys(refs))


def secret_error(field: str, ref: pvc.SecretRef, api_error: str) -> str:
    """The error a Secret that cannot be read gives (getCredentialsFromSecret wrapped by MountDevice / SetUpAt):
    `field` ``NodeStageSecretRef`` or ``NodePublishSecretRef``, `api_error` the apiserver's text
    (`pvc.not_found("secrets", name)` for NotFound)."""
    inner = csi_log(f"failed to find the secret {ref.name} in the namespace {ref.namespace} with error: {api_error}")
    return f"fetching {field} {ref.namespace}/{ref.name} failed: {inner}"


# ------------------------------------------------------------------------------------- VolumeAttachments


def wait_for_attach(volume: pvc.VolumeSpec, node_name: str,
                    attachment: Mapping[str, Any] | str | None) -> tuple[dict[str, str], str | None]:
    """Upstream csi `WaitForAttach` (one look, no waiting: the reconciler retries): the publish context (the
    VolumeAttachment's ``status.attachmentMetadata``) once attached, or the error (then ``MountVolume.WaitForAttach
    failed for volume "<pv>" : <error>``). `attachment` the VolumeAttachment named `attachment_name`, None for
    NotFound, or the apiserver's error text."""
    name = attachment_name(volume.volume_handle, volume.driver, node_name)
    if not isinstance(attachment, Mapping):
        text = attachment if isinstance(attachment, str) else pvc.not_found("volumeattachments.storage.k8s.io", name)
        return {}, f"volume {volume.volume_handle} has GET error for volume attachment {name}: {text}"
    attached, error = verify_attachment_status(attachment)
    if error is not None:
        return {}, error
    if not attached:
        return {}, f"volume {volume.volume_handle} is not attached for volume attachment {name}"
    return publish_context(attachment), None


def verify_attachment_status(attachment: Mapping[str, Any]) -> tuple[bool, str | None]:
    """Upstream `verifyAttachmentStatus`: being deleted fails at once, attached succeeds, the attacher's
    ``attachError`` fails with its message, anything else waits."""
    meta = attachment.get("metadata") if isinstance(attachment.get("metadata"), Mapping) else {}
    status = attachment.get("status") if isinstance(attachment.get("status"), Mapping) else {}
    assert isinstance(meta, Mapping) and isinstance(status, Mapping)
    if meta.get("deletionTimestamp"):
        return False, "volume attachment is being deleted"
    if status.get("attached") is True:
        return True, None
    attach_error = status.get("attachError")
    if isinstance(attach_error, Mapping):
        return False, str(attach_error.get("message") or "")
    return False, None


def publish_context(attachment: Mapping[str, Any] | None) -> dict[str, str]:
    """Upstream `getPublishContext`'s answer: the VolumeAttachment's ``status.attachmentMetadata`` (empty for a
    driver whose volumes are not attached)."""
    if not isinstance(attachment, Mapping):
        return {}
    status = attachment.get("status")
    metadata = status.get("attachmentMetadata") if isinstance(status, Mapping) else None
    return {str(k): str(v) for k, v in metadata.items()} if isinstance(metadata, Mapping) else {}


# ------------------------------------------------------------------------------------------ vol_data.json


def publish_vol_data(volume: pvc.VolumeSpec, node_name: str) -> dict[str, str]:
    """What SetUpAt saves beside the pod's ``mount`` directory for the teardown (and reconstruction)."""
    return {
        VOL_DATA_SPEC_VOL_ID: volume.name,
        VOL_DATA_VOLUME_HANDLE: volume.volume_handle,
        VOL_DATA_DRIVER_NAME: volume.driver,
        VOL_DATA_NODE_NAME: node_name,
        VOL_DATA_LIFECYCLE_MODE: volume.lifecycle,
        VOL_DATA_ATTACHMENT_ID: attachment_name(volume.volume_handle, volume.driver, node_name),
    }


def staging_vol_data(volume: pvc.VolumeSpec) -> dict[str, str]:
    """What MountDevice saves beside ``globalmount`` (read back by UnmountDevice)."""
    return {VOL_DATA_VOLUME_HANDLE: volume.volume_handle, VOL_DATA_DRIVER_NAME: volume.driver}


def block_vol_data(volume: pvc.VolumeSpec, node_name: str) -> dict[str, str]:
    """What NewBlockVolumeMapper saves in ``volumeDevices/<pv>/data``."""
    return {
        VOL_DATA_SPEC_VOL_ID: volume.name,
        VOL_DATA_VOLUME_HANDLE: volume.volume_handle,
        VOL_DATA_DRIVER_NAME: volume.driver,
        VOL_DATA_NODE_NAME: node_name,
        VOL_DATA_ATTACHMENT_ID: attachment_name(volume.volume_handle, volume.driver, node_name),
    }


def render_vol_data(data: Mapping[str, str]) -> str:
    """`saveVolumeData`'s file: Go's json Encoder of a map (keys sorted, HTML escaped) and its newline."""
    return gotext.go_json(dict(data), sort_keys=True) + "\n"


def parse_vol_data(text: str) -> dict[str, str]:
    """`loadVolumeData`: the saved map; ValueError when it is not a JSON object of strings."""
    data = json.loads(text)
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise ValueError("volume data file is not a JSON object of strings")
    return {str(k): v for k, v in data.items()}


__all__ = [
    "DriverInfo",
    "NodeCapabilities",
    "NodePublishRequest",
    "NodeStageRequest",
    "TokenRequest",
    "VolumeCapability",
    "attachment_name",
    "block_vol_data",
    "csi_access_mode",
    "csi_log",
    "driver_not_registered",
    "fs_group_policy",
    "kubelet_applies_fs_group",
    "lifecycle_mode_error",
    "node_publish_request",
    "node_stage_request",
    "parse_vol_data",
    "pod_info_attributes",
    "publish_context",
    "publish_path",
    "publish_vol_data",
    "render_vol_data",
    "secret_error",
    "secrets_wanted",
    "service_account_tokens",
    "skip_permission_change",
    "staging_path",
    "staging_vol_data",
    "supports_fs_group",
    "token_request_body",
    "verify_attachment_status",
    "volume_message",
    "wait_for_attach",
]
