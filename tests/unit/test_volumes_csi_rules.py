"""kopflet.volumes.csi_rules: what the kubelet asks a CSI node plugin (NodeStage/NodePublish requests), the CSIDriver's
say, fsGroup, the VolumeAttachment's answer, vol_data.json, and the upstream texts of their failures.

The hashes were computed apart (``printf '%s' ... | sha256sum``) and the JSON texts with Go's encoding/json.
"""

from __future__ import annotations

from typing import Any

import pytest

from kopflet.api.spec import Pod, pod_from_body
from kopflet.paths import Layout
from kopflet.volumes import csi_rules, pvc
from kopflet.volumes.csi_rules import (
    DriverInfo,
    NodeCapabilities,
    NodePublishRequest,
    NodeStageRequest,
    TokenRequest,
    VolumeCapability,
)
from kopflet.volumes.pvc import SecretRef, VolumeSpec

LAYOUT = Layout("/var/lib/kopflet")
POD: Pod = pod_from_body({"metadata": {"name": "web", "namespace": "shop", "uid": "uid-1"},
                          "spec": {"serviceAccountName": "builder", "containers": [{"name": "c", "image": "b"}]}})
SHA_VOL_1 = "d2e8363faaac7ae76def3b14091d8eb5755f6b92e9531627aeec833a8731cc49"  # sha256("vol-1")
STAGING = f"/var/lib/kopflet/plugins/kubernetes.io/csi/csi.example.com/{SHA_VOL_1}/globalmount"
TARGET = "/var/lib/kopflet/pods/uid-1/volumes/kubernetes.io~csi/pv-1/mount"
STAGE = NodeCapabilities(stage_unstage=True)
NO_STAGE = NodeCapabilities()


def spec(**fields: Any) -> VolumeSpec:
    base: dict[str, Any] = {"outer_name": "data", "name": "pv-1", "plugin": pvc.PLUGIN_CSI, "read_only": False,
                            "pv_name": "pv-1", "driver": "csi.example.com", "volume_handle": "vol-1",
                            "fs_type": "ext4", "access_modes": ("ReadWriteOnce",)}
    base.update(fields)
    return VolumeSpec(**base)


INLINE = spec(name="scratch", outer_name="scratch", pv_name="", lifecycle="Ephemeral", access_modes=(),
              volume_handle="csi-inline")
BLOCK = spec(volume_mode="Block")


# ------------------------------------------------------------------------------------ names and paths


@pytest.mark.parametrize(("handle", "driver", "node", "expected"), [
    ("vol-1", "csi.example.com", "node-a", "csi-664f93e6befe920d56b73708bbb3eb1888cad5fb3e7203b1b501f466d0bea90f"),
    ("testvol-01", "testdriver-01", "testnode-01",
     "csi-4d8f42c5f953488d695504cfaf9658961d83f72b5ac9bba3e32c2ddb7708e84f"),
])
def test_attachment_name(handle: str, driver: str, node: str, expected: str) -> None:
    assert csi_rules.attachment_name(handle, driver, node) == expected


def test_paths() -> None:
    assert csi_rules.staging_path(spec(), LAYOUT) == STAGING
    assert csi_rules.publish_path(spec(), LAYOUT, "uid-1") == TARGET
    assert csi_rules.staging_path(BLOCK, LAYOUT) == (
        "/var/lib/kopflet/plugins/kubernetes.io/csi/volumeDevices/staging/pv-1")
    assert csi_rules.publish_path(BLOCK, LAYOUT, "uid-1") == (
        "/var/lib/kopflet/plugins/kubernetes.io/csi/volumeDevices/publish/pv-1/uid-1")


@pytest.mark.parametrize(("prefix", "detail", "expected"), [
    ("MountVolume.SetUp failed", "boom", 'MountVolume.SetUp failed for volume "pv-1" : boom'),
    ("Volume not attached according to node status", None,
     'Volume not attached according to node status for volume "pv-1" '),
])
def test_volume_message_is_generate_errors(prefix: str, detail: str | None, expected: str) -> None:
    assert csi_rules.volume_message(prefix, "pv-1", detail) == expected


def test_driver_not_registered() -> None:
    assert csi_rules.driver_not_registered("csi.example.com") == (
        "driver name csi.example.com not found in the list of registered CSI drivers")
    assert csi_rules.driver_not_registered("") == "driver name is empty"


# ------------------------------------------------------------------------------------------ the driver


DRIVER_CASES: list[tuple[str, dict[str, Any] | None, DriverInfo]] = [
    ("no CSIDriver", None, DriverInfo(name="d")),
    ("defaults", {"spec": {}}, DriverInfo(name="d", exists=True, fs_group_policy="")),
    ("everything", {"spec": {
        "attachRequired": False, "podInfoOnMount": True, "fsGroupPolicy": "File",
        "volumeLifecycleModes": ["Persistent", "Ephemeral"], "requiresRepublish": True,
        "serviceAccountTokenInSecrets": True, "seLinuxMount": True,
        "tokenRequests": [{"audience": "vault", "expirationSeconds": 3600}, {"audience": ""}]}},
     DriverInfo(name="d", exists=True, attach_required=False, pod_info_on_mount=True, fs_group_policy="File",
                lifecycle_modes=("Persistent", "Ephemeral"), requires_republish=True,
                service_account_token_in_secrets=True, se_linux_mount=True,
                token_requests=(TokenRequest("vault", 3600), TokenRequest("", None)))),
]


@pytest.mark.parametrize(("body", "expected"), [c[1:] for c in DRIVER_CASES], ids=[c[0] for c in DRIVER_CASES])
def test_driver_info(body: dict[str, Any] | None, expected: DriverInfo) -> None:
    assert DriverInfo.from_object("d", body) == expected


def test_node_capabilities_from_names() -> None:
    assert NodeCapabilities.from_names(["STAGE_UNSTAGE_VOLUME", "VOLUME_MOUNT_GROUP", "UNKNOWN"]) == (
        NodeCapabilities(stage_unstage=True, volume_mount_group=True))
    assert NodeCapabilities.from_names(["SINGLE_NODE_MULTI_WRITER", "EXPAND_VOLUME", "GET_VOLUME_STATS"]) == (
        NodeCapabilities(single_node_multi_writer=True, expand_volume=True, get_volume_stats=True))


@pytest.mark.parametrize(("driver", "lifecycle", "error"), [
    (DriverInfo(name="d"), "Persistent", None),
    (DriverInfo(name="d"), "Ephemeral", 'volume mode "Ephemeral" not supported by driver d (no CSIDriver object)'),
    (DriverInfo(name="d", exists=True), "Ephemeral",
     'volume mode "Ephemeral" not supported by driver d (only supports ["Persistent"])'),
    (DriverInfo(name="d", exists=True, lifecycle_modes=("Ephemeral",)), "Persistent",
     'volume mode "Persistent" not supported by driver d (only supports ["Ephemeral"])'),
    (DriverInfo(name="d", exists=True, lifecycle_modes=("Persistent", "Ephemeral")), "Ephemeral", None),
])
def test_lifecycle_mode_error(driver: DriverInfo, lifecycle: str, error: str | None) -> None:
    assert csi_rules.lifecycle_mode_error(driver, lifecycle) == error


def test_pod_info_attributes() -> None:
    assert csi_rules.pod_info_attributes(POD, "Persistent") == {
        "csi.storage.k8s.io/pod.name": "web", "csi.storage.k8s.io/pod.namespace": "shop",
        "csi.storage.k8s.io/pod.uid": "uid-1", "csi.storage.k8s.io/serviceAccount.name": "builder",
        "csi.storage.k8s.io/ephemeral": "false"}
    assert csi_rules.pod_info_attributes(POD, "Ephemeral")["csi.storage.k8s.io/ephemeral"] == "true"


def test_service_account_tokens_attribute_is_go_json() -> None:
    statuses = {"vault": ("t2", "2026-01-01T00:00:00Z"), "": ("t1", "2026-01-01T01:00:00Z")}
    assert csi_rules.service_account_tokens(statuses) == {"csi.storage.k8s.io/serviceAccount.tokens": (
        '{"":{"token":"t1","expirationTimestamp":"2026-01-01T01:00:00Z"},'
        '"vault":{"token":"t2","expirationTimestamp":"2026-01-01T00:00:00Z"}}')}
    assert csi_rules.service_account_tokens({}) == {}


@pytest.mark.parametrize(("request_", "body"), [
    (TokenRequest("vault", 3600), {"audiences": ["vault"], "expirationSeconds": 3600}),
    (TokenRequest("", None), {"audiences": []}),
])
def test_token_request_body(request_: TokenRequest, body: dict[str, Any]) -> None:
    assert csi_rules.token_request_body(POD, request_) == {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {**body, "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "uid-1"}}}


# --------------------------------------------------------------------------------------------- fsGroup


@pytest.mark.parametrize(("driver", "policy", "error"), [
    (DriverInfo(name="d"), "ReadWriteOnceWithFSType", None),
    (DriverInfo(name="d", exists=True, fs_group_policy="File"), "File", None),
    (DriverInfo(name="d", exists=True, fs_group_policy=""), "ReadWriteOnceWithFSType",
     "kubernetes.io/csi: expected valid fsGroupPolicy, received nil value or empty string"),
])
def test_fs_group_policy(driver: DriverInfo, policy: str, error: str | None) -> None:
    assert csi_rules.fs_group_policy(driver) == (policy, error)


FS_GROUP_CASES: list[tuple[str, VolumeSpec, int | None, str, bool]] = [
    ("no fsGroup", spec(), None, "ReadWriteOnceWithFSType", False),
    ("policy None", spec(), 2000, "None", False),
    ("read-only", spec(read_only=True), 2000, "File", False),
    ("File without an fsType", spec(fs_type="", access_modes=("ReadWriteMany",)), 2000, "File", True),
    ("RWO with fsType", spec(), 2000, "ReadWriteOnceWithFSType", True),
    ("RWOP with fsType", spec(access_modes=("ReadWriteOncePod",)), 2000, "ReadWriteOnceWithFSType", True),
    ("no fsType", spec(fs_type=""), 2000, "ReadWriteOnceWithFSType", False),
    ("RWX", spec(access_modes=("ReadWriteMany",)), 2000, "ReadWriteOnceWithFSType", False),
    ("PV without access modes", spec(access_modes=()), 2000, "ReadWriteOnceWithFSType", False),
    ("inline volume", INLINE, 2000, "ReadWriteOnceWithFSType", True),
]


@pytest.mark.parametrize(("volume", "fs_group", "policy", "supported"), [c[1:] for c in FS_GROUP_CASES],
                         ids=[c[0] for c in FS_GROUP_CASES])
def test_supports_fs_group(volume: VolumeSpec, fs_group: int | None, policy: str, supported: bool) -> None:
    assert csi_rules.supports_fs_group(volume, fs_group, policy) is supported


def test_a_volume_mount_group_driver_applies_the_fs_group_itself() -> None:
    assert csi_rules.kubelet_applies_fs_group(spec(), 2000, "File", NO_STAGE) is True
    assert csi_rules.kubelet_applies_fs_group(spec(), 2000, "File", NodeCapabilities(volume_mount_group=True)) is False


@pytest.mark.parametrize(("policy", "gid", "mode", "is_dir", "read_only", "skip"), [
    (None, 2000, 0o2770, True, False, False),
    ("Always", 2000, 0o2770, True, False, False),
    ("OnRootMismatch", 2000, 0o2770, True, False, True),
    ("OnRootMismatch", 2000, 0o2775, True, False, True),
    ("OnRootMismatch", 1000, 0o2770, True, False, False),
    ("OnRootMismatch", 2000, 0o770, True, False, False),
    ("OnRootMismatch", 2000, 0o2750, True, False, False),
    ("OnRootMismatch", 2000, 0o2550, True, True, True),
    ("OnRootMismatch", 2000, 0o2770, False, False, False),
], ids=["unset", "Always", "matches", "superset", "other group", "no setgid", "no group write", "read-only",
        "not a directory"])
def test_skip_permission_change(policy: str | None, gid: int, mode: int, is_dir: bool, read_only: bool,
                                skip: bool) -> None:
    assert csi_rules.skip_permission_change(policy, root_gid=gid, root_mode=mode, is_dir=is_dir, fs_group=2000,
                                            read_only=read_only) is skip


# -------------------------------------------------------------------------------------------- requests


@pytest.mark.parametrize(("mode", "plain", "multi_writer"), [
    ("ReadWriteOnce", "SINGLE_NODE_WRITER", "SINGLE_NODE_MULTI_WRITER"),
    ("ReadOnlyMany", "MULTI_NODE_READER_ONLY", "MULTI_NODE_READER_ONLY"),
    ("ReadWriteMany", "MULTI_NODE_MULTI_WRITER", "MULTI_NODE_MULTI_WRITER"),
    ("ReadWriteOncePod", "SINGLE_NODE_WRITER", "SINGLE_NODE_SINGLE_WRITER"),
    ("Bogus", "UNKNOWN", "UNKNOWN"),
])
def test_csi_access_mode(mode: str, plain: str, multi_writer: str) -> None:
    assert csi_rules.csi_access_mode(mode, single_node_multi_writer=False) == plain
    assert csi_rules.csi_access_mode(mode, single_node_multi_writer=True) == multi_writer


def test_access_mode_values_are_the_protos() -> None:
    assert VolumeCapability(access_mode="SINGLE_NODE_WRITER").access_mode_value == 1
    assert VolumeCapability(access_mode="SINGLE_NODE_MULTI_WRITER").access_mode_value == 7


FULL = spec(mount_options=("noatime",), volume_attributes={"tier": "gold"},
            access_modes=("ReadOnlyMany", "ReadWriteOnce"))

STAGE_CASES: list[tuple[str, VolumeSpec, NodeCapabilities, int | None, NodeStageRequest | None]] = [
    ("no STAGE_UNSTAGE_VOLUME", FULL, NO_STAGE, None, None),
    ("filesystem", FULL, STAGE, 2000, NodeStageRequest(
        volume_id="vol-1", staging_target_path=STAGING,
        volume_capability=VolumeCapability(access_mode="MULTI_NODE_READER_ONLY", fs_type="ext4",
                                           mount_flags=("noatime",)),
        publish_context={"devicePath": "/dev/sdb"}, secrets={"key": "s3cret"}, volume_context={"tier": "gold"})),
    ("VOLUME_MOUNT_GROUP", FULL, NodeCapabilities(stage_unstage=True, volume_mount_group=True), 2000,
     NodeStageRequest(
         volume_id="vol-1", staging_target_path=STAGING,
         volume_capability=VolumeCapability(access_mode="MULTI_NODE_READER_ONLY", fs_type="ext4",
                                            mount_flags=("noatime",), volume_mount_group="2000"),
         publish_context={"devicePath": "/dev/sdb"}, secrets={"key": "s3cret"}, volume_context={"tier": "gold"})),
    ("no access mode", spec(access_modes=()), NodeCapabilities(stage_unstage=True, single_node_multi_writer=True),
     None, NodeStageRequest(
         volume_id="vol-1", staging_target_path=STAGING,
         volume_capability=VolumeCapability(access_mode="SINGLE_NODE_MULTI_WRITER", fs_type="ext4"),
         publish_context={"devicePath": "/dev/sdb"}, secrets={"key": "s3cret"})),
    ("block", spec(volume_mode="Block", mount_options=("noatime",)),
     NodeCapabilities(stage_unstage=True, volume_mount_group=True), 2000, NodeStageRequest(
         volume_id="vol-1", staging_target_path="/var/lib/kopflet/plugins/kubernetes.io/csi/volumeDevices/staging/pv-1",
         volume_capability=VolumeCapability(access_mode="SINGLE_NODE_WRITER", block=True),
         publish_context={"devicePath": "/dev/sdb"}, secrets={"key": "s3cret"})),
]


@pytest.mark.parametrize(("volume", "capabilities", "fs_group", "expected"), [c[1:] for c in STAGE_CASES],
                         ids=[c[0] for c in STAGE_CASES])
def test_node_stage_request(volume: VolumeSpec, capabilities: NodeCapabilities, fs_group: int | None,
                            expected: NodeStageRequest | None) -> None:
    got = csi_rules.node_stage_request(volume, LAYOUT, capabilities=capabilities,
                                       publish_context={"devicePath": "/dev/sdb"}, secrets={"key": "s3cret"},
                                       fs_group=fs_group)
    assert got == expected


def test_an_inline_volume_is_never_staged() -> None:
    with pytest.raises(ValueError, match="never staged"):
        csi_rules.node_stage_request(INLINE, LAYOUT, capabilities=STAGE)


POD_INFO = {"csi.storage.k8s.io/pod.name": "web", "csi.storage.k8s.io/pod.namespace": "shop",
            "csi.storage.k8s.io/pod.uid": "uid-1", "csi.storage.k8s.io/serviceAccount.name": "builder"}
TOKENS = {"csi.storage.k8s.io/serviceAccount.tokens": '{"vault":{"token":"t","expirationTimestamp":"x"}}'}
VAULT = (TokenRequest("vault"),)
INFO = DriverInfo(name="csi.example.com", exists=True, pod_info_on_mount=True, token_requests=VAULT)
INLINE_TARGET = "/var/lib/kopflet/pods/uid-1/volumes/kubernetes.io~csi/scratch/mount"

PUBLISH_CASES: list[tuple[str, VolumeSpec, DriverInfo, NodeCapabilities, int | None, NodePublishRequest]] = [
    ("persistent, staged, pod info and tokens", FULL, INFO, STAGE, None, NodePublishRequest(
        volume_id="vol-1", target_path=TARGET, staging_target_path=STAGING, readonly=False,
        volume_capability=VolumeCapability(access_mode="MULTI_NODE_READER_ONLY", fs_type="ext4",
                                           mount_flags=("noatime",)),
        publish_context={"devicePath": "/dev/sdb"}, secrets={"key": "s3cret"},
        volume_context={"tier": "gold", **POD_INFO, "csi.storage.k8s.io/ephemeral": "false", **TOKENS})),
    ("persistent, not staged, no CSIDriver: no tokens", spec(read_only=True), DriverInfo(name="csi.example.com"),
     NO_STAGE, 2000,
     NodePublishRequest(
         volume_id="vol-1", target_path=TARGET, readonly=True,
         volume_capability=VolumeCapability(access_mode="SINGLE_NODE_WRITER", fs_type="ext4"),
         publish_context={"devicePath": "/dev/sdb"}, secrets={"key": "s3cret"}, volume_context={})),
    ("tokens in the secrets, VOLUME_MOUNT_GROUP", spec(),
     DriverInfo(name="csi.example.com", exists=True, service_account_token_in_secrets=True, token_requests=VAULT),
     NodeCapabilities(volume_mount_group=True), 2000, NodePublishRequest(
         volume_id="vol-1", target_path=TARGET,
         volume_capability=VolumeCapability(access_mode="SINGLE_NODE_WRITER", fs_type="ext4",
                                            volume_mount_group="2000"),
         publish_context={"devicePath": "/dev/sdb"}, secrets={"key": "s3cret", **TOKENS}, volume_context={})),
    ("inline", spec(name="scratch", outer_name="scratch", pv_name="", lifecycle="Ephemeral", access_modes=(),
                    volume_handle="csi-inline", mount_options=("ignored",)),
     DriverInfo(name="csi.example.com", exists=True, pod_info_on_mount=True, lifecycle_modes=("Ephemeral",),
                token_requests=VAULT), STAGE,
     None, NodePublishRequest(
         volume_id="csi-inline", target_path=INLINE_TARGET,
         volume_capability=VolumeCapability(access_mode="SINGLE_NODE_WRITER", fs_type="ext4"),
         secrets={"key": "s3cret"},
         volume_context={**POD_INFO, "csi.storage.k8s.io/ephemeral": "true", **TOKENS})),
    ("block", spec(volume_mode="Block", mount_options=("noatime",), read_only=True), INFO,
     NodeCapabilities(volume_mount_group=True), 2000, NodePublishRequest(
         volume_id="vol-1", target_path="/var/lib/kopflet/plugins/kubernetes.io/csi/volumeDevices/publish/pv-1/uid-1",
         staging_target_path="/var/lib/kopflet/plugins/kubernetes.io/csi/volumeDevices/staging/pv-1", readonly=True,
         volume_capability=VolumeCapability(access_mode="SINGLE_NODE_WRITER", block=True),
         publish_context={"devicePath": "/dev/sdb"}, secrets={"key": "s3cret"},
         volume_context={**POD_INFO, "csi.storage.k8s.io/ephemeral": "false"})),
]


@pytest.mark.parametrize(("volume", "driver", "capabilities", "fs_group", "expected"),
                         [c[1:] for c in PUBLISH_CASES], ids=[c[0] for c in PUBLISH_CASES])
def test_node_publish_request(volume: VolumeSpec, driver: DriverInfo, capabilities: NodeCapabilities,
                              fs_group: int | None, expected: NodePublishRequest) -> None:
    got = csi_rules.node_publish_request(volume, POD, LAYOUT, driver=driver, capabilities=capabilities,
                                         publish_context={"devicePath": "/dev/sdb"}, secrets={"key": "s3cret"},
                                         tokens=TOKENS, fs_group=fs_group)
    assert got == expected


def test_pod_info_overrides_a_volume_attribute_of_the_same_key() -> None:
    volume = spec(volume_attributes={"csi.storage.k8s.io/pod.name": "forged", "tier": "gold"})
    got = csi_rules.node_publish_request(volume, POD, LAYOUT, driver=INFO, capabilities=NO_STAGE)
    assert got.volume_context["csi.storage.k8s.io/pod.name"] == "web"


@pytest.mark.parametrize(("volume", "capabilities", "wanted"), [
    (spec(), STAGE, ()),
    (spec(node_stage_secret=SecretRef("ks", "stage"), node_publish_secret=SecretRef("shop", "pub")), STAGE,
     (SecretRef("ks", "stage"), SecretRef("shop", "pub"))),
    (spec(node_stage_secret=SecretRef("ks", "stage"), node_publish_secret=SecretRef("shop", "pub")), NO_STAGE,
     (SecretRef("shop", "pub"),)),
    (spec(node_stage_secret=SecretRef("ks", "s"), node_publish_secret=SecretRef("ks", "s")), STAGE,
     (SecretRef("ks", "s"),)),
], ids=["none", "both", "not staged", "one secret for both"])
def test_secrets_wanted(volume: VolumeSpec, capabilities: NodeCapabilities, wanted: tuple[SecretRef, ...]) -> None:
    assert csi_rules.secrets_wanted(volume, capabilities) == wanted


def test_secret_error() -> None:
    assert csi_rules.secret_error("NodePublishSecretRef", SecretRef("shop", "creds"),
                                  pvc.not_found("secrets", "creds")) == (
        "fetching NodePublishSecretRef shop/creds failed: kubernetes.io/csi: failed to find the secret creds in the "
        'namespace shop with error: secrets "creds" not found')


# --------------------------------------------------------------------------------- VolumeAttachments

VA_NAME = "csi-664f93e6befe920d56b73708bbb3eb1888cad5fb3e7203b1b501f466d0bea90f"


def attachment(*, attached: bool = False, deleting: bool = False, error: str | None = None,
               metadata: dict[str, str] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"attached": attached}
    if error is not None:
        status["attachError"] = {"message": error, "time": "2026-01-01T00:00:00Z"}
    if metadata is not None:
        status["attachmentMetadata"] = metadata
    meta: dict[str, Any] = {"name": VA_NAME}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"attacher": "csi.example.com", "nodeName": "node-a"}, "status": status}


WAIT_CASES: list[tuple[str, Any, dict[str, str], str | None]] = [
    ("not found", None, {}, f'volume vol-1 has GET error for volume attachment {VA_NAME}: '
                            f'volumeattachments.storage.k8s.io "{VA_NAME}" not found'),
    ("unreadable", "the server was unable to return a response in the time allotted", {},
     f"volume vol-1 has GET error for volume attachment {VA_NAME}: the server was unable to return a response in the "
     "time allotted"),
    ("not yet attached", attachment(), {}, f"volume vol-1 is not attached for volume attachment {VA_NAME}"),
    ("attach error", attachment(error="rpc error: code = NotFound desc = disk gone"), {},
     "rpc error: code = NotFound desc = disk gone"),
    ("being deleted", attachment(attached=True, deleting=True), {}, "volume attachment is being deleted"),
    ("attached", attachment(attached=True, metadata={"devicePath": "/dev/sdb"}), {"devicePath": "/dev/sdb"}, None),
    ("attached, no metadata", attachment(attached=True), {}, None),
]


@pytest.mark.parametrize(("va", "context", "error"), [c[1:] for c in WAIT_CASES], ids=[c[0] for c in WAIT_CASES])
def test_wait_for_attach(va: Any, context: dict[str, str], error: str | None) -> None:
    assert csi_rules.wait_for_attach(spec(), "node-a", va) == (context, error)


# ------------------------------------------------------------------------------------- vol_data.json


def test_vol_data_contents() -> None:
    assert csi_rules.publish_vol_data(spec(), "node-a") == {
        "specVolID": "pv-1", "volumeHandle": "vol-1", "driverName": "csi.example.com", "nodeName": "node-a",
        "volumeLifecycleMode": "Persistent", "attachmentID": VA_NAME}
    assert csi_rules.staging_vol_data(spec()) == {"volumeHandle": "vol-1", "driverName": "csi.example.com"}
    assert csi_rules.block_vol_data(spec(), "node-a") == {
        "specVolID": "pv-1", "volumeHandle": "vol-1", "driverName": "csi.example.com", "nodeName": "node-a",
        "attachmentID": VA_NAME}


def test_vol_data_file_is_gos_json_encoder() -> None:
    data = {"specVolID": "pv-<1>", "volumeHandle": "h&1", "driverName": "csi.example.com", "nodeName": "node-a",
            "volumeLifecycleMode": "Persistent", "attachmentID": "csi-x"}
    text = csi_rules.render_vol_data(data)
    assert text == ('{"attachmentID":"csi-x","driverName":"csi.example.com","nodeName":"node-a",'
                    '"specVolID":"pv-\\u003c1\\u003e","volumeHandle":"h\\u00261","volumeLifecycleMode":"Persistent"}\n')
    assert csi_rules.parse_vol_data(text) == data


@pytest.mark.parametrize("text", ["[]", '{"a": 1}', "not json"])
def test_vol_data_that_is_not_a_map_of_strings(text: str) -> None:
    with pytest.raises(ValueError):
        csi_rules.parse_vol_data(text)
