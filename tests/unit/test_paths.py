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
