"""kopflet as a ``kubeadm init``/``join`` node's kubelet: the KubeletConfiguration kubeadm v1.37.1 writes to
/var/lib/kubelet/config.yaml, read with the flags of kubeadm's systemd drop-in, and the fields it carries at
upstream's defaults that kopflet takes only at values whose behaviour it has (everything else refused, by name).

The fixture is kubeadm's file for a cluster whose kubeadm config sets ``cgroupDriver: cgroupfs`` (kubeadm's own
default is systemd); ``kubeadm join`` writes the same file from the kubelet-config ConfigMap.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from kopflet.config import configz, log_options, settings
from kopflet.config.settings import AgentConfig, ConfigError, load
from kopflet.nodeshutdown import rules as nodeshutdown
from kopflet.nodeshutdown.rules import ShutdownGracePeriodByPodPriority
from tests.unit.test_config import with_file

KUBEADM_FILE = Path(__file__).resolve().parents[1] / "data" / "kubeadm-v1.37.1-kubelet-config.yaml"
# kubeadm's 10-kubeadm.conf: KUBELET_KUBECONFIG_ARGS, KUBELET_CONFIG_ARGS (KUBELET_KUBEADM_ARGS adds
# --hostname-override or --register-with-taints only when needed).
DROP_IN_ARGS = ["--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
                "--kubeconfig=/etc/kubernetes/kubelet.conf", "--config=/var/lib/kubelet/config.yaml"]


def kubeadm_config(text: str | None = None, *extra: str) -> AgentConfig:
    body = KUBEADM_FILE.read_text() if text is None else text

    def read(path: str) -> str:
        assert path == "/var/lib/kubelet/config.yaml"
        return body
    return load([*DROP_IN_ARGS, *extra], {}, "cp-1", read)


def test_the_kubeadm_file_is_accepted_with_upstreams_defaults() -> None:
    cfg = kubeadm_config()
    assert cfg == AgentConfig(
        node_name="cp-1", kubeconfig="/etc/kubernetes/kubelet.conf",
        bootstrap_kubeconfig="/etc/kubernetes/bootstrap-kubelet.conf", rotate_certificates=True,
        runtime_endpoint="unix:///run/kopflet/containerd/containerd.sock",
        image_endpoint="unix:///run/kopflet/containerd/containerd.sock",
        cluster_dns=("10.96.0.10",), cluster_domain="cluster.local", client_ca_file="/etc/kubernetes/pki/ca.crt",
        pod_manifest_path="/etc/kubernetes/manifests", cgroup_driver="cgroupfs",
    )
    # Every 0s, 0 and {} of the file is upstream's default, as v1beta1 SetDefaults_KubeletConfiguration makes it:
    assert (cfg.http_check_frequency, cfg.volume_stats_agg_period, cfg.file_check_frequency) == (20.0, 60.0, 20.0)
    assert (cfg.shutdown_grace_period, cfg.shutdown_grace_period_critical_pods) == (0.0, 0.0)
    assert cfg.max_container_restart_period == 300.0 and cfg.memory_swap_behavior == ""
    assert (cfg.log_format, cfg.log_flush_frequency, cfg.log_verbosity, cfg.log_vmodule) == ("text", 5.0, 0, ())
    assert cfg.log_options == log_options.DEFAULT_OPTIONS
    assert (cfg.resync_period, cfg.runtime_request_timeout, cfg.streaming_connection_idle_timeout) == \
        (60.0, 120.0, 4 * 3600.0)
    assert (cfg.authentication_token_webhook_cache_ttl, cfg.authorization_webhook_cache_authorized_ttl,
            cfg.authorization_webhook_cache_unauthorized_ttl) == (120.0, 300.0, 30.0)
    assert (cfg.node_status_update_frequency, cfg.node_status_report_frequency) == (10.0, 300.0)
    assert (cfg.image_minimum_gc_age, cfg.image_maximum_gc_age, cfg.cpu_manager_reconcile_period,
            cfg.eviction_pressure_transition_period) == (120.0, 0.0, 10.0, 300.0)
    assert (cfg.anonymous_auth, cfg.authentication_token_webhook, cfg.authorization_mode) == (False, True, "Webhook")
    assert (cfg.healthz_bind_address, cfg.healthz_port) == ("127.0.0.1", 10248)


def test_configz_serves_the_kubeadm_fields_as_upstream_defaults_them() -> None:
    body = configz.kubelet_configuration(kubeadm_config())
    assert body["httpCheckFrequency"] == "20s" and body["volumeStatsAggPeriod"] == "1m0s"
    assert body["memorySwap"] == {}
    assert body["logging"] == {"format": "text", "flushFrequency": "5s", "verbosity": 0,
                               "options": {"text": {"infoBufferSize": "0"}, "json": {"infoBufferSize": "0"}}}
    assert (body["shutdownGracePeriod"], body["shutdownGracePeriodCriticalPods"]) == ("0s", "0s")
    assert body["crashLoopBackOff"] == {"maxContainerRestartPeriod": "5m0s"}


def test_kubeadms_default_systemd_driver_is_read_and_left_to_the_start_up_check() -> None:
    """Without a cgroupDriver in its own config kubeadm writes systemd: the file is fine; the agent refuses to start
    where systemd is not the init system (cgroups.systemd_running), as before."""
    text = KUBEADM_FILE.read_text().replace("cgroupDriver: cgroupfs", "cgroupDriver: systemd")
    assert kubeadm_config(text).cgroup_driver == "systemd"


# ------------------------------------------------------------------------- the seven fields, value by value


@pytest.mark.parametrize(("body", "expected"), [
    # crashLoopBackOff: {} or kopflet's cap (KubeletCrashLoopBackOffMax on defaults the pointer to 300s).
    ("crashLoopBackOff: {}\n", {"max_container_restart_period": 300.0}),
    ("crashLoopBackOff:\n", {"max_container_restart_period": 300.0}),
    ("crashLoopBackOff: {maxContainerRestartPeriod: 5m}\n", {"max_container_restart_period": 300.0}),
    ("crashLoopBackOff: {maxContainerRestartPeriod: 300s}\n", {"max_container_restart_period": 300.0}),
    # httpCheckFrequency: any duration, 0 the default (20s); no effect without staticPodURL, as upstream.
    ("httpCheckFrequency: 0s\n", {"http_check_frequency": 20.0}),
    ("httpCheckFrequency: 45s\n", {"http_check_frequency": 45.0}),
    # logging at upstream's defaults, and the verbosity (-v's).
    ("logging: {}\n", {}),
    ("logging: {format: text, flushFrequency: 5s, verbosity: 0, vmodule: [], options: {}}\n", {}),
    ("logging: {format: \"\", options: {text: {splitStream: false, infoBufferSize: 0}, json: {}}}\n", {}),
    ("logging: {flushFrequency: 10s}\n", {"log_flush_frequency": 10.0}),
    ("logging: {flushFrequency: 2000000000}\n", {"log_flush_frequency": 2.0}),  # integer nanoseconds
    ("logging: {verbosity: 4}\n", {"log_verbosity": 4}),
    ("logging: {options: {json: {infoBufferSize: 0Ki}}}\n", {}),
    ("logging: {format: json}\n", {"log_format": "json"}),
    ("logging: {vmodule: [{filePattern: server, verbosity: 4}, {filePattern: 'work*', verbosity: 0}]}\n",
     {"log_vmodule": (("server", 4), ("work*", 0))}),
    ("logging: {vmodule: [{filePattern: server}]}\n", {"log_vmodule": (("server", 0),)}),
    # memorySwap: NoSwap, upstream's default ("" is the same).
    ("memorySwap: {}\n", {}),
    ("memorySwap: {swapBehavior: \"\"}\n", {}),
    ("memorySwap: {swapBehavior: NoSwap}\n", {"memory_swap_behavior": "NoSwap"}),
    # graceful node shutdown: off (0s, upstream's default), the two periods, or the periods by priority as written.
    ("shutdownGracePeriod: 0s\nshutdownGracePeriodCriticalPods: 0s\n", {}),
    ("shutdownGracePeriodByPodPriority: []\n", {}),
    ("shutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\n",
     {"shutdown_grace_period": 30.0, "shutdown_grace_period_critical_pods": 10.0}),
    ("shutdownGracePeriod: 1s\nshutdownGracePeriodCriticalPods: 1s\n",
     {"shutdown_grace_period": 1.0, "shutdown_grace_period_critical_pods": 1.0}),
    ("shutdownGracePeriod: 1m30s\n", {"shutdown_grace_period": 90.0}),
    ("shutdownGracePeriodByPodPriority: [{priority: 100000, shutdownGracePeriodSeconds: 20}, {priority: 0}]\n",
     {"shutdown_grace_period_by_pod_priority": (ShutdownGracePeriodByPodPriority(100000, 20),
                                                ShutdownGracePeriodByPodPriority(0, 0))}),
    # upstream checks no values: a negative priority or grace period is taken, as are duplicates
    ("shutdownGracePeriodByPodPriority: [{priority: -2147483648, shutdownGracePeriodSeconds: -1}, {priority: 5}, "
     "{priority: 5}]\n",
     {"shutdown_grace_period_by_pod_priority": (ShutdownGracePeriodByPodPriority(-2147483648, -1),
                                                ShutdownGracePeriodByPodPriority(5, 0),
                                                ShutdownGracePeriodByPodPriority(5, 0))}),
    ("shutdownGracePeriodByPodPriority: [{shutdownGracePeriodSeconds: 9223372036854775807}]\n",
     {"shutdown_grace_period_by_pod_priority": (ShutdownGracePeriodByPodPriority(0, 2**63 - 1),)}),
    # volumeStatsAggPeriod: 0 is 1m; negative turns volume stats off, as upstream.
    ("volumeStatsAggPeriod: 0s\n", {"volume_stats_agg_period": 60.0}),
    ("volumeStatsAggPeriod: 1m0s\n", {"volume_stats_agg_period": 60.0}),
    ("volumeStatsAggPeriod: 2m30s\n", {"volume_stats_agg_period": 150.0}),
    ("volumeStatsAggPeriod: -1s\n", {"volume_stats_agg_period": -1.0}),
])
def test_accepted(body: str, expected: dict[str, Any]) -> None:
    cfg = with_file(body)
    assert {name: getattr(cfg, name) for name in expected} == expected
    assert cfg == AgentConfig(node_name="node-1", **expected)


@pytest.mark.parametrize(("body", "message"), [
    # crashLoopBackOff: upstream's range first, then kopflet's one cap.
    ("crashLoopBackOff: {maxContainerRestartPeriod: 1m}\n",
     r'field "crashLoopBackOff.maxContainerRestartPeriod": kopflet\'s crash-loop backoff is capped at 5m0s '
     r'\(upstream\'s default\); it cannot be changed yet: got "1m"'),
    ("crashLoopBackOff: {maxContainerRestartPeriod: 0s}\n",  # a pointer: an explicit 0s is a value
     r'invalid configuration: CrashLoopBackOff.MaxContainerRestartPeriod \(got: 0 seconds\) must be set between '
     r'1s and 300s'),
    ("crashLoopBackOff: {maxContainerRestartPeriod: 10m}\n", r"\(got: 600 seconds\) must be set between 1s and 300s"),
    ("crashLoopBackOff: {maxContainerRestartPeriod: 300001ms}\n", r"\(got: 300.001 seconds\)"),
    ("crashLoopBackOff: {maxContainerRestartPeriod: 300001us}\n", r"\(got: 0.300001 seconds\)"),
    ("crashLoopBackOff: {maxRestartPeriod: 5m}\n",
     r'unknown field "crashLoopBackOff.maxRestartPeriod" '
     r'\(did you mean crashLoopBackOff.maxContainerRestartPeriod\?\)'),
    ("crashLoopBackOff: 5m\n", r'field "crashLoopBackOff": expected a mapping, got "5m"'),
    ("httpCheckFrequency: -1s\n", r'field "httpCheckFrequency": must not be a negative duration, got "-1s"'),
    # logging: what kopflet does not have yet, and what upstream refuses.
    ("logging: {format: xml}\n", r'field "logging.format": Invalid value: "xml": Unsupported log format'),
    ("logging: {format: json, vmodule: [{filePattern: server, verbosity: 4}]}\n",
     r'^invalid configuration: logging.vmodule: Forbidden: Only supported for text log format$'),
    ("logging: {vmodule: [{verbosity: 4}]}\n",
     r'field "logging.vmodule": item 0: Required value: File pattern must not be empty'),
    ("logging: {vmodule: [{filePattern: 'a=b', verbosity: 4}]}\n",
     r'field "logging.vmodule": item 0: Invalid value: "a=b": File pattern must not contain equal sign or comma'),
    ("logging: {vmodule: [{filePattern: a, verbosity: 2147483648}]}\n",
     r'field "logging.vmodule": item 0: verbosity: Invalid value: 2147483648: Must be <= 2147483647'),
    # the output routing options are alpha: refused without LoggingAlphaOptions, in logsapi.Validate's words
    ("logging: {options: {text: {splitStream: true}}}\n",
     r'^invalid configuration: logging.options.text.splitStream: Forbidden: Feature LoggingAlphaOptions is '
     r'disabled$'),
    ("logging: {vmodule: [{filePattern: server, level: 4}]}\n",
     r'field "logging.vmodule": item 0: unknown field "level"'),
    ("logging: {options: {json: {infoBufferSize: 64Ki}}}\n",
     r'^invalid configuration: logging.options.json.infoBufferSize: Forbidden: Feature LoggingAlphaOptions is '
     r'disabled$'),
    ("logging: {options: {json: {infoBufferSize: lots}}}\n",
     r'field "logging.options.json.infoBufferSize": expected a quantity such as "0" or "64Ki", got "lots"'),
    ("logging: {options: {yaml: {}}}\n", r'unknown field "logging.options.yaml"'),
    ("logging: {options: {text: {split: true}}}\n",
     r'unknown field "logging.options.text.split" \(did you mean logging.options.text.splitStream\?\)'),
    ("logging: {options: {json: true}}\n", r'field "logging.options.json": expected a mapping, got true'),
    ("logging: {options: {json: {splitStream: \"true\"}}}\n",
     r'field "logging.options.json.splitStream": expected true or false, got "true"'),
    ("logging: {flushFrequency: -1}\n", r'field "logging.flushFrequency": Invalid value: -1: Must be greater than '
                                        r'zero'),
    ("logging: {flushFrequency: 1.5}\n", r'field "logging.flushFrequency": expected a duration such as "5s" or a '
                                         r'number of nanoseconds, got 1.5'),
    ("logging: {verbosity: -1}\n", r'field "logging.verbosity": expected a non-negative integer, got -1'),
    ("logging: {verbosity: 2147483648}\n", r'field "logging.verbosity": Invalid value: 2147483648: Must be <= '
                                           r'2147483647'),
    ("logging: {sanitization: true}\n", r'unknown field "logging.sanitization"'),
    # memorySwap: LimitedSwap not implemented; anything else upstream's message.
    ("memorySwap: {swapBehavior: LimitedSwap}\n",
     r'field "memorySwap.swapBehavior": kopflet implements only NoSwap \(containers get no swap, upstream\'s '
     r'default\); LimitedSwap is not supported'),
    ("memorySwap: {swapBehavior: UnlimitedSwap}\n",
     r'field "memorySwap.swapBehavior": invalid configuration: memorySwap.swapBehavior "UnlimitedSwap" must be one '
     r'of: "", "LimitedSwap" or "NoSwap"'),
    # graceful node shutdown: upstream ValidateKubeletConfiguration's checks, in its order (several: aggregated), a
    # metav1.Duration printed as fmt's %v of the struct ("{500ms}").
    ("shutdownGracePeriod: 500ms\n", r'^invalid configuration: shutdownGracePeriod \{500ms\} must be either zero or '
                                     r'otherwise >= 1 sec$'),
    # a negative period: 0s of critical pods is already more (upstream checks that first)
    ("shutdownGracePeriod: -1s\n",
     r'^\[invalid configuration: shutdownGracePeriodCriticalPods \{0s\} must be <= shutdownGracePeriod \{-1s\}, '
     r'invalid configuration: shutdownGracePeriod \{-1s\} must be either zero or otherwise >= 1 sec\]$'),
    ("shutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 20s\n",
     r'^invalid configuration: shutdownGracePeriodCriticalPods \{20s\} must be <= shutdownGracePeriod \{10s\}$'),
    ("shutdownGracePeriodCriticalPods: 1s\n",
     r'^invalid configuration: shutdownGracePeriodCriticalPods \{1s\} must be <= shutdownGracePeriod \{0s\}$'),
    ("shutdownGracePeriodCriticalPods: -1s\n", r"^invalid configuration: shutdownGracePeriodCriticalPods \{-1s\} must "
                                               r"be either zero or otherwise >= 1 sec$"),
    ("shutdownGracePeriod: 1s\nshutdownGracePeriodCriticalPods: 1500ms\n",
     r'^invalid configuration: shutdownGracePeriodCriticalPods \{1.5s\} must be <= shutdownGracePeriod \{1s\}$'),
    ("shutdownGracePeriod: 500ms\nshutdownGracePeriodCriticalPods: 800ms\n",
     r'^\[invalid configuration: shutdownGracePeriodCriticalPods \{800ms\} must be <= shutdownGracePeriod '
     r'\{500ms\}, invalid configuration: shutdownGracePeriod \{500ms\} must be either zero or otherwise >= 1 sec, '
     r'invalid configuration: shutdownGracePeriodCriticalPods \{800ms\} must be either zero or otherwise >= 1 sec\]$'),
    ("shutdownGracePeriod: 999ms\nshutdownGracePeriodCriticalPods: 999ms\n",
     r'^\[invalid configuration: shutdownGracePeriod \{999ms\} must be either zero or otherwise >= 1 sec, invalid '
     r'configuration: shutdownGracePeriodCriticalPods \{999ms\} must be either zero or otherwise >= 1 sec\]$'),
    ("shutdownGracePeriod: 30s\nshutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 30}]\n",
     r'^invalid configuration: Cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod at the '
     r'same time$'),
    ("shutdownGracePeriod: 0s\nshutdownGracePeriodCriticalPods: 5s\nshutdownGracePeriodByPodPriority: [{}]\n",
     r'^\[invalid configuration: shutdownGracePeriodCriticalPods \{5s\} must be <= shutdownGracePeriod \{0s\}, '
     r'invalid configuration: Cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod at the '
     r'same time\]$'),
    ("shutdownGracePeriod: 30\n", r'field "shutdownGracePeriod": expected a string, got 30'),
    # shutdownGracePeriodByPodPriority: the shape of []ShutdownGracePeriodByPodPriority (priority int32, seconds int64)
    ("shutdownGracePeriodByPodPriority: {priority: 0}\n",
     r'field "shutdownGracePeriodByPodPriority": expected a list of \{priority, shutdownGracePeriodSeconds\}, got a '
     r'mapping'),
    ("shutdownGracePeriodByPodPriority: [30]\n",
     r'field "shutdownGracePeriodByPodPriority": item 0: expected a mapping with priority and '
     r'shutdownGracePeriodSeconds, got 30'),
    ("shutdownGracePeriodByPodPriority: [{priority: 0}, {priority: 1, gracePeriod: 5}]\n",
     r'field "shutdownGracePeriodByPodPriority": item 1: unknown field "gracePeriod" \(an item has priority and '
     r'shutdownGracePeriodSeconds\)'),
    ("shutdownGracePeriodByPodPriority: [{priority: 2147483648}]\n",
     r'field "shutdownGracePeriodByPodPriority": item 0: priority: expected an int32, got 2147483648'),
    ("shutdownGracePeriodByPodPriority: [{priority: high}]\n",
     r'field "shutdownGracePeriodByPodPriority": item 0: priority: expected an int32, got "high"'),
    ("shutdownGracePeriodByPodPriority: [{shutdownGracePeriodSeconds: 1.5}]\n",
     r'field "shutdownGracePeriodByPodPriority": item 0: shutdownGracePeriodSeconds: expected an int64, got 1.5'),
    ("shutdownGracePeriodByPodPriority: [{shutdownGracePeriodSeconds: true}]\n",
     r'item 0: shutdownGracePeriodSeconds: expected an int64, got true'),
    ("shutdownGracePeriodByPodPriority: [{shutdownGracePeriodSeconds: 9223372036854775808}]\n",
     r'item 0: shutdownGracePeriodSeconds: expected an int64, got 9223372036854775808'),
    ("volumeStatsAggPeriod: 1 minute\n", r'field "volumeStatsAggPeriod": expected a duration'),
])
def test_refused(body: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        with_file(body)


_BY_PRIORITY = (ShutdownGracePeriodByPodPriority(0, 30),)
_OFF = {"GracefulNodeShutdown": False, "GracefulNodeShutdownBasedOnPodPriority": False}


@pytest.mark.parametrize(("values", "errors"), [
    # the gates at their defaults (on), as kopflet takes them
    ({"shutdown_grace_period": 30.0, "shutdown_grace_period_critical_pods": 10.0}, []),
    ({"shutdown_grace_period_by_pod_priority": _BY_PRIORITY}, []),
    ({"feature_gates": {"GracefulNodeShutdown": True}, "shutdown_grace_period_critical_pods": 2.0,
      "shutdown_grace_period": 1.0},
     ["invalid configuration: shutdownGracePeriodCriticalPods {2s} must be <= shutdownGracePeriod {1s}"]),
    ({"shutdown_grace_period": 0.001}, ["invalid configuration: shutdownGracePeriod {1ms} must be either zero or "
                                        "otherwise >= 1 sec"]),
    # upstream's table with the gates off (kopflet refuses them off at start: these checks are upstream's own)
    ({"feature_gates": _OFF, "shutdown_grace_period": 1.0},
     ["invalid configuration: specifying shutdownGracePeriod or shutdownGracePeriodCriticalPods requires feature "
      "gate GracefulNodeShutdown"]),
    ({"feature_gates": _OFF, "shutdown_grace_period_critical_pods": 1.0},
     ["invalid configuration: specifying shutdownGracePeriod or shutdownGracePeriodCriticalPods requires feature "
      "gate GracefulNodeShutdown"]),
    ({"feature_gates": _OFF, "shutdown_grace_period": 0.5, "shutdown_grace_period_critical_pods": 5.0},
     ["invalid configuration: specifying shutdownGracePeriod or shutdownGracePeriodCriticalPods requires feature "
      "gate GracefulNodeShutdown"]),  # with the gate off the periods themselves are not checked
    ({"feature_gates": _OFF}, []),
    ({"feature_gates": {"GracefulNodeShutdownBasedOnPodPriority": False},
      "shutdown_grace_period_by_pod_priority": (ShutdownGracePeriodByPodPriority(0, 0),)},
     ["invalid configuration: Specifying shutdownGracePeriodByPodPriority requires feature gate "
      "GracefulNodeShutdownBasedOnPodPriority"]),
    ({"feature_gates": {"GracefulNodeShutdownBasedOnPodPriority": False}, "shutdown_grace_period": 30.0,
      "shutdown_grace_period_critical_pods": 10.0, "shutdown_grace_period_by_pod_priority": _BY_PRIORITY},
     ["invalid configuration: Specifying shutdownGracePeriodByPodPriority requires feature gate "
      "GracefulNodeShutdownBasedOnPodPriority"]),  # "Cannot specify both" needs that gate on
    ({"feature_gates": {"GracefulNodeShutdownBasedOnPodPriority": True}, "shutdown_grace_period": 30.0,
      "shutdown_grace_period_critical_pods": 10.0, "shutdown_grace_period_by_pod_priority": _BY_PRIORITY},
     ["invalid configuration: Cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod at the "
      "same time"]),
])
def test_shutdown_checks_follow_the_gates(values: dict[str, Any], errors: list[str]) -> None:
    """upstream validation_test.go's graceful shutdown cases, gates off included (kopflet takes both gates only on,
    so these branches are reached only here)."""
    assert settings._shutdown_errors(values) == errors


@pytest.mark.parametrize(("body", "served"), [
    ("", None),  # omitempty
    ("shutdownGracePeriodByPodPriority: []\n", None),
    # sorted by priority, as upstream's newPodManager sorts the slice /configz's object shares
    ("shutdownGracePeriodByPodPriority: [{priority: 2000000000, shutdownGracePeriodSeconds: 10}, "
     "{priority: 0, shutdownGracePeriodSeconds: 30}, {priority: 10000, shutdownGracePeriodSeconds: 20}]\n",
     [{"priority": 0, "shutdownGracePeriodSeconds": 30}, {"priority": 10000, "shutdownGracePeriodSeconds": 20},
      {"priority": 2000000000, "shutdownGracePeriodSeconds": 10}]),
    ("shutdownGracePeriodByPodPriority: [{priority: 7}]\n", [{"priority": 7, "shutdownGracePeriodSeconds": 0}]),
])
def test_configz_serves_the_shutdown_grace_periods_by_priority(body: str, served: list[dict[str, int]] | None) -> None:
    body_served = configz.kubelet_configuration(with_file(body))
    assert body_served.get("shutdownGracePeriodByPodPriority") == served
    assert list(body_served).index("shutdownGracePeriodCriticalPods") + (served is not None) == \
        list(body_served).index("crashLoopBackOff") - 1  # between shutdownGracePeriodCriticalPods and crashLoopBackOff


@pytest.mark.parametrize(("body", "periods", "requested"), [
    ("", (), 0.0),  # off
    ("shutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\n",
     ((0, 20), (2000000000, 10)), 30.0),
    ("shutdownGracePeriod: 30s\n", ((0, 30), (2000000000, 0)), 30.0),
    ("shutdownGracePeriodByPodPriority: [{priority: 10, shutdownGracePeriodSeconds: 5}, {priority: -1, "
     "shutdownGracePeriodSeconds: 7}]\n", ((-1, 7), (10, 5)), 12.0),
])
def test_the_shutdown_managers_periods(body: str, periods: tuple[tuple[int, int], ...], requested: float) -> None:
    cfg = with_file(body)
    assert cfg.graceful_node_shutdown_gate and cfg.shutdown_by_pod_priority_gate
    assert cfg.shutdown_periods == tuple(ShutdownGracePeriodByPodPriority(p, s) for p, s in periods)
    assert nodeshutdown.period_requested(cfg.shutdown_periods) == requested


@pytest.mark.parametrize(("argv", "body", "verbosity"), [
    ((), "logging: {verbosity: 3}\n", 3),
    (("-v=5",), "logging: {verbosity: 3}\n", 5),  # the flag wins (upstream's flag precedence)
    (("-v", "0"), "logging: {verbosity: 3}\n", 0),
    (("--v=2",), "", 2),
])
def test_the_verbosity_is_the_flags_else_the_files(argv: tuple[str, ...], body: str, verbosity: int) -> None:
    cfg = with_file(body, *argv)
    assert cfg.log_verbosity == verbosity
    assert configz.kubelet_configuration(cfg)["logging"]["verbosity"] == verbosity


@pytest.mark.parametrize(("argv", "body", "expected"), [
    # --logging-format: the flag wins over logging.format
    (("--logging-format=json",), "", {"log_format": "json"}),
    (("--logging-format", "text"), "logging: {format: json}\n", {"log_format": "text"}),
    (("--logging-format=",), "logging: {format: json}\n", {"log_format": "json"}),  # empty: unset
    # --vmodule: pflag's Set appends, across repeats and after the file's items (kubeletConfigFlagPrecedence)
    (("--vmodule=workers=4,prober*=3,",), "", {"log_vmodule": (("workers", 4), ("prober*", 3))}),
    (("--vmodule=a=1", "--vmodule", "b=2"), "", {"log_vmodule": (("a", 1), ("b", 2))}),
    (("--vmodule=b=2",), "logging: {vmodule: [{filePattern: a, verbosity: 1}]}\n",
     {"log_vmodule": (("a", 1), ("b", 2))}),
    (("--vmodule=a=0",), "", {"log_vmodule": (("a", 0),)}),  # kept, as upstream's config keeps it
    # --log-flush-frequency: any positive duration
    (("--log-flush-frequency=1s",), "logging: {flushFrequency: 10s}\n", {"log_flush_frequency": 1.0}),
])
def test_the_logging_flags(argv: tuple[str, ...], body: str, expected: dict[str, Any]) -> None:
    cfg = with_file(body, *argv)
    assert {name: getattr(cfg, name) for name in expected} == expected


@pytest.mark.parametrize(("argv", "message"), [
    # component-base VModuleConfigurationPflag.Set's errors (pflag prefixes the flag)
    (("--vmodule=workers",), r'^--vmodule: "workers" does not have the pattern=N format$'),
    (("--vmodule=workers=4=5",), r'^--vmodule: "workers=4=5" does not have the pattern=N format$'),
    (("--vmodule==4",), r'^--vmodule: "=4" does not have the pattern=N format$'),
    (("--vmodule=workers=",), r'^--vmodule: "workers=" does not have the pattern=N format$'),
    (("--vmodule=workers=-1",), r'^--vmodule: parsing verbosity in "workers=-1": strconv.ParseUint: parsing '
                                r'"-1": invalid syntax$'),
    (("--vmodule=workers=2147483648",), r'^--vmodule: parsing verbosity in "workers=2147483648": '
                                        r'strconv.ParseUint: parsing "2147483648": value out of range$'),
    (("--logging-format=xml",), r'^--logging-format: Invalid value: "xml": Unsupported log format$'),
    (("--logging-format=json", "--vmodule=workers=4"),
     r"^invalid configuration: logging.vmodule: Forbidden: Only supported for text log format$"),
    (("--log-flush-frequency=0s",), r'^--log-flush-frequency: Invalid value: "0s": Must be greater than zero$'),
    (("--log-flush-frequency=-1s",), r'^--log-flush-frequency: Invalid value: "-1s": Must be greater than zero$'),
])
def test_the_logging_flags_refused(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        with_file("", *argv)


def test_configz_serves_the_vmodule_and_format() -> None:
    cfg = with_file("", "--vmodule=workers=4,prober*=3")
    assert configz.kubelet_configuration(cfg)["logging"]["vmodule"] == [
        {"filePattern": "workers", "verbosity": 4}, {"filePattern": "prober*", "verbosity": 3}]
    assert configz.kubelet_configuration(with_file("", "--logging-format=json"))["logging"]["format"] == "json"


@pytest.mark.parametrize(("flag", "period"), [("0", 0.0), ("-1m", -60.0), ("90s", 90.0)])
def test_the_volume_stats_flag_takes_any_duration(flag: str, period: float) -> None:
    """Upstream's --volume-stats-agg-period (a DurationVar): 0 on the command line disables as a negative does
    (only the file's 0 is defaulted)."""
    assert with_file("", f"--volume-stats-agg-period={flag}").volume_stats_agg_period == period


def test_the_kubeadm_file_with_a_refused_value_names_it_among_the_others() -> None:
    """Every problem at once, as before: a LimitedSwap node's kubeadm file is refused for exactly that."""
    text = KUBEADM_FILE.read_text().replace("memorySwap: {}", "memorySwap: {swapBehavior: LimitedSwap}")
    with pytest.raises(ConfigError, match=r"^config file /var/lib/kubelet/config.yaml: field "
                                          r"\"memorySwap.swapBehavior\": kopflet implements only NoSwap"):
        kubeadm_config(text)


UPSTREAM_TYPES = Path(os.environ.get("GOMODCACHE") or Path.home() / "go" / "pkg" / "mod") / \
    "k8s.io/kubelet@v0.37.1/config/v1beta1/types.go"


@pytest.mark.skipif(not UPSTREAM_TYPES.is_file(), reason="k8s.io/kubelet@v0.37.1 is not in the Go module cache")
def test_every_upstream_field_is_honoured_or_refused_by_name() -> None:
    """Each KubeletConfiguration field of v1beta1 (staging k8s.io/kubelet types.go) is a setting or in
    UNSUPPORTED_FIELDS, so a file setting it gets either its behaviour or "not supported by kopflet", never the
    "unknown field" of a typo."""
    struct = UPSTREAM_TYPES.read_text().split("type KubeletConfiguration struct {", 1)[1].split("\n}\n", 1)[0]
    upstream = {name for name in re.findall(r'json:"([A-Za-z0-9]+)', struct)}
    honoured = {s.field.split(".")[0] for s in settings.SETTINGS if s.field}
    assert upstream - honoured - settings.UNSUPPORTED_FIELDS == set()
