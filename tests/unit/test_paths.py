"""kopflet.paths: the node's kubelet directories, checked against the strings upstream produces.

The rows follow upstream's tests: kubelet_getters_test.go (`TestKubeletDirs`: pod abc123, container def456),
kuberuntime_sandbox_test.go (`new_bar_12345678`) and kuberuntime_container_test.go (``foo/0.log``), with the
default root directory and podLogsDir.
"""

from __future__ import annotations

import pytest

from kopflet.paths import DEFAULT_POD_LOG_ROOT, Layout, escape_qualified_name, pod_uid_from_log_dir

LAYOUT = Layout("/var/lib/kubelet")

ROWS: list[tuple[str, str, str]] = [
    ("getPodsDir", LAYOUT.pods_dir, "/var/lib/kubelet/pods"),
    ("getPodDir", LAYOUT.pod_dir("abc123"), "/var/lib/kubelet/pods/abc123"),
    ("getPodVolumesDir", LAYOUT.volumes_dir("abc123"), "/var/lib/kubelet/pods/abc123/volumes"),
    ("getPodVolumeDir configmap", LAYOUT.volume_dir("abc123", "kubernetes.io/configmap", "cfg"),
     "/var/lib/kubelet/pods/abc123/volumes/kubernetes.io~configmap/cfg"),
    ("getPodVolumeDir empty-dir", LAYOUT.volume_dir("abc123", "kubernetes.io/empty-dir", "scratch"),
     "/var/lib/kubelet/pods/abc123/volumes/kubernetes.io~empty-dir/scratch"),
    ("getPodVolumeDir unqualified plugin", LAYOUT.volume_dir("abc123", "plugin", "foobar"),
     "/var/lib/kubelet/pods/abc123/volumes/plugin/foobar"),
    ("getPodContainerDir", LAYOUT.container_dir("abc123", "def456"), "/var/lib/kubelet/pods/abc123/containers/def456"),
    ("getEtcHostsPath", LAYOUT.etc_hosts("abc123"), "/var/lib/kubelet/pods/abc123/etc-hosts"),
    ("allocatedPodsStateFile", LAYOUT.allocated_state, "/var/lib/kubelet/allocated_pods_state"),
    ("actuatedPodsStateFile", LAYOUT.actuated_state, "/var/lib/kubelet/actuated_pods_state"),
    ("cpuManagerStateFileName", LAYOUT.cpu_manager_state, "/var/lib/kubelet/cpu_manager_state"),
    ("--cert-dir default", LAYOUT.cert_dir, "/var/lib/kubelet/pki"),
    ("seccompProfileRoot", LAYOUT.seccomp_dir, "/var/lib/kubelet/seccomp"),
    ("BuildPodLogsDirectory", LAYOUT.pod_log_dir("new", "bar", "12345678"), "/var/log/pods/new_bar_12345678"),
    ("BuildContainerLogsDirectory", LAYOUT.container_log_dir("new", "bar", "12345678", "foo"),
     "/var/log/pods/new_bar_12345678/foo"),
    ("buildContainerLogsPath", LAYOUT.relative_log_path("foo", 0), "foo/0.log"),
    ("LogDirectory + LogPath", LAYOUT.container_log_path("new", "bar", "12345678", "foo", 0),
     "/var/log/pods/new_bar_12345678/foo/0.log"),
    ("getPluginsDir", LAYOUT.plugins_dir, "/var/lib/kubelet/plugins"),
    ("getPluginDir csi (not escaped)", LAYOUT.plugin_dir("kubernetes.io/csi"),
     "/var/lib/kubelet/plugins/kubernetes.io/csi"),
    ("getVolumeDevicePluginDir csi", LAYOUT.volume_device_plugin_dir("kubernetes.io/csi"),
     "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices"),
    ("getPodVolumeDevicesDir", LAYOUT.pod_volume_devices_dir("abc123"), "/var/lib/kubelet/pods/abc123/volumeDevices"),
    ("getPodVolumeDeviceDir csi", LAYOUT.pod_volume_device_dir("abc123", "kubernetes.io/csi"),
     "/var/lib/kubelet/pods/abc123/volumeDevices/kubernetes.io~csi"),
    ("GetPodDeviceMapPath joined", LAYOUT.pod_device_map_path("abc123", "kubernetes.io/csi", "pv-1"),
     "/var/lib/kubelet/pods/abc123/volumeDevices/kubernetes.io~csi/pv-1"),
    ("csi getTargetPath", LAYOUT.csi_volume_dir("abc123", "pv-1"),
     "/var/lib/kubelet/pods/abc123/volumes/kubernetes.io~csi/pv-1"),
    ("csi getTargetPath escapes the spec name", LAYOUT.csi_volume_dir("abc123", "a/b"),
     "/var/lib/kubelet/pods/abc123/volumes/kubernetes.io~csi/a~b"),
    ("csiMountMgr.GetPath", LAYOUT.csi_mount_path("abc123", "pv-1"),
     "/var/lib/kubelet/pods/abc123/volumes/kubernetes.io~csi/pv-1/mount"),
    ("csi vol_data.json", LAYOUT.csi_vol_data_path("abc123", "pv-1"),
     "/var/lib/kubelet/pods/abc123/volumes/kubernetes.io~csi/pv-1/vol_data.json"),
    # printf '%s' project/zone/test-vol1 | sha256sum (csi_attacher_test.go's handle)
    ("makeDeviceMountPath", LAYOUT.csi_device_mount_path("pd.csi.storage.gke.io", "project/zone/test-vol1"),
     "/var/lib/kubelet/plugins/kubernetes.io/csi/pd.csi.storage.gke.io/"
     "499e124114963a0c3bde28794f1045fb2327a7484f2d26afafaf0765f0985a95/globalmount"),
    ("MountDevice vol_data.json", LAYOUT.csi_device_vol_data_path("pd.csi.storage.gke.io", "project/zone/test-vol1"),
     "/var/lib/kubelet/plugins/kubernetes.io/csi/pd.csi.storage.gke.io/"
     "499e124114963a0c3bde28794f1045fb2327a7484f2d26afafaf0765f0985a95/vol_data.json"),
    ("csi getVolumePluginDir", LAYOUT.csi_block_volume_dir("pv-1"),
     "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/pv-1"),
    ("csiBlockMapper.GetGlobalMapPath", LAYOUT.csi_block_global_map_path("pv-1"),
     "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/pv-1/dev"),
    ("getVolumeDeviceDataDir", LAYOUT.csi_block_data_dir("pv-1"),
     "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/pv-1/data"),
    ("csiBlockMapper.GetStagingPath", LAYOUT.csi_block_staging_path("pv-1"),
     "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/staging/pv-1"),
    ("csiBlockMapper.getPublishPath", LAYOUT.csi_block_publish_path("pv-1", "abc123"),
     "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/publish/pv-1/abc123"),
    ("localVolume.GetPath", LAYOUT.local_volume_dir("abc123", "pv-1"),
     "/var/lib/kubelet/pods/abc123/volumes/kubernetes.io~local-volume/pv-1"),
    ("getGlobalLocalPath block device", LAYOUT.local_device_mount_path("pv-1"),
     "/var/lib/kubelet/plugins/kubernetes.io/local-volume/mounts/pv-1"),
    ("localVolume.GetGlobalMapPath (escaped)", LAYOUT.local_block_global_map_path("pv-1"),
     "/var/lib/kubelet/plugins/kubernetes.io~local-volume/volumeDevices/pv-1"),
    ("root with a trailing slash", Layout("/var/lib/kubelet/").pod_dir("abc123"), "/var/lib/kubelet/pods/abc123"),
    ("another podLogsDir", Layout("/var/lib/kopflet", "/srv/logs").pod_log_dir("shop", "web", "uid-1"),
     "/srv/logs/shop_web_uid-1"),
]


@pytest.mark.parametrize(("got", "expected"), [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_layout(got: str, expected: str) -> None:
    assert got == expected


def test_defaults() -> None:
    assert DEFAULT_POD_LOG_ROOT == "/var/log/pods"
    assert Layout("/r").pod_log_root == DEFAULT_POD_LOG_ROOT


def test_escape_qualified_name() -> None:
    assert escape_qualified_name("kubernetes.io/downward-api") == "kubernetes.io~downward-api"
    assert escape_qualified_name("plain") == "plain"


@pytest.mark.parametrize(("name", "uid"), [
    ("default_web_0d3c-11ef", "0d3c-11ef"),
    ("my-ns_web_with_underscores_uid-9", "uid-9"),  # upstream takes the last part: names cannot hold "_"
    ("no-delimiter", "no-delimiter"),
])
def test_pod_uid_from_log_dir(name: str, uid: str) -> None:
    assert pod_uid_from_log_dir(name) == uid
