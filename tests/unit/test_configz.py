"""GET /configz's body: AgentConfig as upstream's v1beta1 KubeletConfiguration under "kubeletconfig"."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kopflet.cm.memorymanager.memory_manager import MemoryReservation
from kopflet.config import configz, settings
from kopflet.config.settings import AgentConfig, Taint
from tests.unit.test_config import FULL_FILE, HEADER

DEFAULTS = {
    "kind": "KubeletConfiguration", "apiVersion": "kubelet.config.k8s.io/v1beta1",
    "podLogsDir": "/var/log/pods", "syncFrequency": "1m0s", "fileCheckFrequency": "20s", "httpCheckFrequency": "20s",
    "address": "0.0.0.0", "port": 10250,
    "authentication": {"x509": {}, "webhook": {"enabled": True, "cacheTTL": "2m0s"}, "anonymous": {"enabled": False}},
    "authorization": {"mode": "Webhook", "webhook": {"cacheAuthorizedTTL": "5m0s", "cacheUnauthorizedTTL": "30s"}},
    "eventRecordQPS": 50, "eventBurst": 100,
    "healthzPort": 10248, "healthzBindAddress": "127.0.0.1", "clusterDomain": "cluster.local",
    "streamingConnectionIdleTimeout": "4h0m0s",
    "nodeStatusUpdateFrequency": "10s", "nodeStatusReportFrequency": "5m0s",
    "imageMinimumGCAge": "2m0s", "imageMaximumGCAge": "0s",
    "imageGCHighThresholdPercent": 85, "imageGCLowThresholdPercent": 80, "volumeStatsAggPeriod": "1m0s",
    "cgroupsPerQOS": True, "cgroupDriver": "cgroupfs",
    "cpuManagerPolicy": "none", "cpuManagerReconcilePeriod": "10s", "memoryManagerPolicy": "None",
    "topologyManagerPolicy": "none", "topologyManagerScope": "container",
    "runtimeRequestTimeout": "2m0s", "maxPods": 110, "podPidsLimit": -1, "serializeImagePulls": True,
    "evictionHard": {"imagefs.available": "15%", "imagefs.inodesFree": "5%", "memory.available": "100Mi",
                     "nodefs.available": "10%", "nodefs.inodesFree": "5%"},
    "evictionPressureTransitionPeriod": "5m0s", "mergeDefaultEvictionSettings": False,
    "memorySwap": {},
    "containerLogMaxSize": "10Mi", "containerLogMaxFiles": 5, "containerLogMaxWorkers": 1,
    "containerLogMonitorInterval": "10s", "configMapAndSecretChangeDetectionStrategy": "Watch",
    "enforceNodeAllocatable": ["pods"],
    "logging": {"format": "text", "flushFrequency": "5s", "verbosity": 0,
                "options": {"text": {"infoBufferSize": "0"}, "json": {"infoBufferSize": "0"}}},
    "enableSystemLogHandler": True, "enableSystemLogQuery": False,  # a defaulted *bool; the internal bool converted
    "shutdownGracePeriod": "0s", "shutdownGracePeriodCriticalPods": "0s",
    "crashLoopBackOff": {"maxContainerRestartPeriod": "5m0s"}, "seccompDefault": False,
    "localStorageCapacityIsolation": True,
    "containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
    "imageServiceEndpoint": "unix:///run/containerd/containerd.sock",
    "failCgroupV1": False,
}


def render(**overrides: Any) -> dict[str, Any]:
    return configz.kubelet_configuration(AgentConfig(node_name="n", **overrides))


def test_defaults_in_the_struct_order() -> None:
    body = render()
    assert body == DEFAULTS
    assert list(body) == list(DEFAULTS)  # kind, apiVersion, then v1beta1's field order


@pytest.mark.parametrize(("overrides", "changed"), [
    # Zero values of omitempty fields are left out ...
    ({"max_pods": 0}, {"maxPods": None}),
    ({"address": ""}, {"address": None}),
    ({"eviction_hard": {}}, {"evictionHard": None}),
    # ... pointers upstream defaults are kept, zero or false.
    ({"healthz_port": 0}, {"healthzPort": 0}),
    ({"serialize_image_pulls": False, "local_storage_capacity_isolation": False},
     {"serializeImagePulls": False, "localStorageCapacityIsolation": False}),
    ({"image_gc_low_threshold_percent": 0}, {"imageGCLowThresholdPercent": 0}),
    # Durations as Go prints them.
    ({"resync_period": 90.0, "image_maximum_gc_age": 7 * 86400.0, "runtime_request_timeout": 0.5},
     {"syncFrequency": "1m30s", "imageMaximumGCAge": "168h0m0s", "runtimeRequestTimeout": "500ms"}),
    # Quantities as strings.
    ({"container_log_max_size": 50 * 1024 * 1024}, {"containerLogMaxSize": "50Mi"}),
    ({"container_log_max_size": 10_000_000}, {"containerLogMaxSize": "10M"}),
    ({"container_log_max_size": 1023}, {"containerLogMaxSize": "1023"}),
    ({"system_reserved": {"memory": "256Mi", "cpu": "100m"}}, {"systemReserved": {"cpu": "100m", "memory": "256Mi"}}),
    # TLS and authentication.
    ({"tls_min_version": "VersionTLS13", "tls_cipher_suites": ("TLS_AES_128_GCM_SHA256",)},
     {"tlsCipherSuites": ["TLS_AES_128_GCM_SHA256"], "tlsMinVersion": "VersionTLS13"}),
    ({"tls_cert_file": "/c", "tls_private_key_file": "/k"}, {"tlsCertFile": "/c", "tlsPrivateKeyFile": "/k"}),
    ({"client_ca_file": "/ca", "anonymous_auth": True, "authentication_token_webhook": False},
     {"authentication": {"x509": {"clientCAFile": "/ca"}, "webhook": {"enabled": False, "cacheTTL": "2m0s"},
                         "anonymous": {"enabled": True}}}),
    ({"authorization_mode": "AlwaysAllow", "authorization_webhook_cache_authorized_ttl": 0.0},
     {"authorization": {"mode": "AlwaysAllow",
                        "webhook": {"cacheAuthorizedTTL": "0s", "cacheUnauthorizedTTL": "30s"}}}),
    # Lists, taints (value omitempty) and eviction.
    ({"cluster_dns": ("10.96.0.10",), "allowed_unsafe_sysctls": ("kernel.shm*",), "pod_manifest_path": "/m"},
     {"clusterDNS": ["10.96.0.10"], "allowedUnsafeSysctls": ["kernel.shm*"], "staticPodPath": "/m"}),
    ({"register_with_taints": (Taint("a", "b", "NoSchedule"), Taint("c", "", "NoExecute"))},
     {"registerWithTaints": [{"key": "a", "value": "b", "effect": "NoSchedule"}, {"key": "c", "effect": "NoExecute"}]}),
    ({"eviction_hard": {"memory.available": "1Gi"}, "merge_default_eviction_settings": True,
      "eviction_soft": {"memory.available": "2Gi"}, "eviction_soft_grace_period": {"memory.available": "1m"},
      "eviction_minimum_reclaim": {"memory.available": "0.5Gi"}, "eviction_max_pod_grace_period": 30},
     {"evictionHard": {**DEFAULTS["evictionHard"], "memory.available": "1Gi"},
      "evictionSoft": {"memory.available": "2Gi"}, "evictionSoftGracePeriod": {"memory.available": "1m"},
      "evictionMaxPodGracePeriod": 30, "evictionMinimumReclaim": {"memory.available": "0.5Gi"},
      "mergeDefaultEvictionSettings": True}),
    ({"fail_cgroup_v1": True}, {"failCgroupV1": True}),
    ({"image_endpoint": "unix:///run/i.sock"}, {"imageServiceEndpoint": "unix:///run/i.sock"}),
    # The CPU manager; reservedSystemCPUs as written, kubeReserved's cpu kept (upstream renders before the override).
    ({"cpu_manager_policy": "static", "cpu_manager_policy_options": {"full-pcpus-only": "true"},
      "cpu_manager_reconcile_period": 5.0, "reserved_system_cpus": "0", "kube_reserved": {"cpu": "1"}},
     {"cpuManagerPolicy": "static", "cpuManagerPolicyOptions": {"full-pcpus-only": "true"},
      "cpuManagerReconcilePeriod": "5s", "reservedSystemCPUs": "0", "kubeReserved": {"cpu": "1"}}),
    # The memory and topology managers; reservedMemory's limits as canonical quantities (a ResourceList).
    ({"memory_manager_policy": "Static", "topology_manager_policy": "single-numa-node",
      "topology_manager_scope": "pod", "topology_manager_policy_options": {"prefer-closest-numa-nodes": "true"},
      "reserved_memory": (MemoryReservation(0, {"memory": "1024Mi", "hugepages-2Mi": "4194304"}),
                          MemoryReservation(1, {"memory": "0.5Gi"}))},
     {"memoryManagerPolicy": "Static", "topologyManagerPolicy": "single-numa-node", "topologyManagerScope": "pod",
      "topologyManagerPolicyOptions": {"prefer-closest-numa-nodes": "true"},
      "reservedMemory": [{"numaNode": 0, "limits": {"hugepages-2Mi": "4194304", "memory": "1Gi"}},
                         {"numaNode": 1, "limits": {"memory": "512Mi"}}]}),
    # seccompDefault is the file's (upstream's KubeletConfiguration); --seccomp-default is a KubeletFlags field.
    ({"seccomp_default": True}, {"seccompDefault": True}),
    ({"seccomp_default_flag": True}, {}),
    # The pods' cgroups: cgroupRoot omitempty, cgroupsPerQOS a defaulted pointer (false written), cgroupDriver the
    # runtime's when it tells (the agent replaces it before configz is built, as upstream's server.go does).
    ({"cgroup_root": "/custom", "cgroups_per_qos": False, "cgroup_driver": "systemd", "enforce_node_allocatable": ()},
     {"cgroupRoot": "/custom", "cgroupsPerQOS": False, "cgroupDriver": "systemd", "enforceNodeAllocatable": None}),
    # The CIS settings: eventRecordQPS and podPidsLimit are defaulted pointers (0 kept), eventBurst and
    # protectKernelDefaults omitempty, readOnlyPort always 0 and so never written (as upstream's disabled port).
    ({"event_record_qps": 0, "event_burst": 0, "pod_pids_limit": 0, "streaming_connection_idle_timeout": 0.0},
     {"eventRecordQPS": 0, "eventBurst": None, "podPidsLimit": 0, "streamingConnectionIdleTimeout": "0s"}),
    ({"event_record_qps": 5, "event_burst": 10, "pod_pids_limit": 4096, "protect_kernel_defaults": True,
      "streaming_connection_idle_timeout": 300.0},
     {"eventRecordQPS": 5, "eventBurst": 10, "podPidsLimit": 4096, "protectKernelDefaults": True,
      "streamingConnectionIdleTimeout": "5m0s"}),
])
def test_fields(overrides: dict[str, Any], changed: dict[str, Any]) -> None:
    expected = {**DEFAULTS, **changed}
    assert render(**overrides) == {k: v for k, v in expected.items() if v is not None}


def test_every_honoured_field_is_served() -> None:
    """Each config-file field kopflet honours appears in /configz once set (a new setting cannot be forgotten)."""
    cfg = settings.load(["--config=/k.yaml", "--kubeconfig=/k"], {}, "n", lambda _: HEADER + FULL_FILE)
    paths = set(configz.field_paths(configz.kubelet_configuration(cfg)))
    # readOnlyPort takes only 0 and runOnce only false, which encoding/json leaves out (omitempty): upstream's body
    # has neither for a disabled port and no run-once mode.
    assert {s.field for s in settings.SETTINGS if s.field} - {"readOnlyPort", "runOnce"} <= paths
    assert "readOnlyPort" not in paths and "runOnce" not in paths
    assert paths - {s.field for s in settings.SETTINGS if s.field} == {"kind", "apiVersion"}


def test_body_is_the_registered_configs_as_go_marshals_them() -> None:
    cfg = AgentConfig(node_name="n", node_labels={"x": "<&>"}, pod_manifest_path="/a<b>&c")
    text = configz.configz_body(cfg)
    assert text.startswith('{"kubeletconfig":{"kind":"KubeletConfiguration","apiVersion":')
    assert '"staticPodPath":"/a\\u003cb\\u003e\\u0026c"' in text  # encoding/json escapes HTML
    assert json.loads(text) == {"kubeletconfig": configz.kubelet_configuration(cfg)}


@pytest.mark.parametrize(("amount", "text"), [
    (0, "0"), (1, "1"), (1024, "1Ki"), (1536, "1536"), (3 * 2**30, "3Gi"), (1000, "1k"), (2_000_000, "2M"),
    (1024000, "1000Ki"), (2**60, "1Ei"),
])
def test_quantity(amount: int, text: str) -> None:
    assert configz.quantity(amount) == text
