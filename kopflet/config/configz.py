"""``GET /configz``: the agent's effective configuration as upstream's kubelet serves it.

Upstream registers the defaulted ``KubeletConfiguration``, converted to ``kubelet.config.k8s.io/v1beta1`` with its
kind and apiVersion stamped (cmd/kubelet/app/server.go: initConfigz, convertToVersionedKubeletConfig), under the
name ``kubeletconfig`` (k8s.io/component-base/configz), whose handler writes every registered config as one JSON
object: ``{"kubeletconfig": {...}}``, Go's ``encoding/json`` of the struct.

Here that object is built from :class:`AgentConfig` with the same field names, in the struct's order
(staging/src/k8s.io/kubelet/config/v1beta1/types.go) and with its ``omitempty`` rules: an empty string, zero
integer, empty map or list is left out; a duration (a struct to ``encoding/json``) and a defaulted pointer
(``healthzPort``, ``serializeImagePulls`` ...) are always there. Only fields kopflet has appear; flags without a
field (``--hostname-override``, ``--node-ip`` ...) are not in the upstream object either. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from fractions import Fraction
from typing import Any

from kopflet import gotext
from kopflet.api import qos
from kopflet.cm.memorymanager.memory_manager import MemoryReservation
from kopflet.config import log_options
from kopflet.config.settings import CONFIG_API_VERSION, CONFIG_KIND, AgentConfig
from kopflet.eviction import thresholds

CONFIGZ_PATH = "/configz"  # configz.DefaultConfigzPath
CONFIGZ_NAME = "kubeletconfig"  # configz.New("kubeletconfig") in cmd/kubelet/app/server.go

def quantity(amount: int | Fraction) -> str:
    """A byte count as a quantity string (``10Mi``): binary when a power of 1024 divides it, else decimal, in Go's
    canonical form (`thresholds.format_quantity`).

    Upstream keeps the text the user wrote; kopflet keeps the number, so ``1000Ki`` written as ``1024000`` comes
    back as ``1000Ki``: the same quantity."""
    whole = int(amount)
    return thresholds.format_quantity(whole, thresholds.BINARY_SI if whole % 1024 == 0 else thresholds.DECIMAL_SI)


def _reservation(reservation: MemoryReservation) -> dict[str, Any]:
    """A `MemoryReservation` as encoding/json writes it: the limits as canonical quantities (a ResourceList)."""
    limits = {name: thresholds.format_quantity(qos.parse_quantity(text), thresholds.quantity_format(text))
              for name, text in sorted(reservation.limits.items())}
    return {"numaNode": reservation.numa_node, "limits": limits}


def _duration(seconds: float) -> str:
    return gotext.go_duration(seconds)  # metav1.Duration marshals as time.Duration.String()


def _map(mapping: Mapping[str, str] | None) -> dict[str, str]:
    return {key: str(mapping[key]) for key in sorted(mapping or {})}  # encoding/json sorts a map's keys


def _put(body: dict[str, Any], name: str, value: Any, *, omitempty: bool = True) -> None:
    """One struct field, left out when ``omitempty`` and the value is Go's zero ("", 0, false, empty)."""
    if omitempty and (value is None or value == "" or value is False or value == 0 or value in ({}, [])):
        return
    body[name] = value


def _taints(config: AgentConfig) -> list[dict[str, str]]:
    """``[]v1.Taint``: key, value (omitempty), effect."""
    out = []
    for taint in config.register_with_taints:
        item = {"key": taint.key}
        _put(item, "value", taint.value)
        item["effect"] = taint.effect
        out.append(item)
    return out


def _logging(config: AgentConfig) -> dict[str, Any]:
    """logsapi.LoggingConfiguration as defaulted: format, flushFrequency (a string once defaulted), verbosity (no
    omitempty: the flag's when -v was given), vmodule (omitempty), options (a struct: always there).

    Upstream writes a flushFrequency the file gave as a number of nanoseconds back as that number; kopflet keeps
    seconds and writes the duration string, the same value."""
    body: dict[str, Any] = {}
    _put(body, "format", config.log_format)
    body["flushFrequency"] = _duration(config.log_flush_frequency)
    body["verbosity"] = config.log_verbosity
    _put(body, "vmodule", [{"filePattern": p, "verbosity": v} for p, v in config.log_vmodule])
    body["options"] = log_options.render_options(config.log_options)
    return body


def _authentication(config: AgentConfig) -> dict[str, Any]:
    x509: dict[str, Any] = {}
    _put(x509, "clientCAFile", config.client_ca_file)
    return {
        "x509": x509,
        "webhook": {"enabled": config.authentication_token_webhook,
                    "cacheTTL": _duration(config.authentication_token_webhook_cache_ttl)},
        "anonymous": {"enabled": config.anonymous_auth},
    }


def _authorization(config: AgentConfig) -> dict[str, Any]:
    body: dict[str, Any] = {}
    _put(body, "mode", config.authorization_mode)
    body["webhook"] = {
        "cacheAuthorizedTTL": _duration(config.authorization_webhook_cache_authorized_ttl),
        "cacheUnauthorizedTTL": _duration(config.authorization_webhook_cache_unauthorized_ttl),
    }
    return body


def _shutdown_by_priority(config: AgentConfig) -> list[dict[str, int]]:
    """``[]ShutdownGracePeriodByPodPriority``. Sorted by priority with both graceful node shutdown gates on:
    upstream's newPodManager sorts the configuration's own slice in place, and the v1beta1 object /configz holds
    shares that slice (the generated conversion casts it), so it is served sorted once the kubelet is built.
    (Go's sort.Slice is an insertion sort, stable, below 13 items.)"""
    items = list(config.shutdown_grace_period_by_pod_priority)
    if config.graceful_node_shutdown_gate and config.shutdown_by_pod_priority_gate:
        items.sort(key=lambda item: item.priority)
    return [{"priority": item.priority, "shutdownGracePeriodSeconds": item.shutdown_grace_period_seconds}
            for item in items]


# (field, value of the config, omitempty) in the v1beta1 struct's order. Pointers upstream defaults are always
# set, so they are written even when zero or false (omitempty=False), as are durations and the structs.
_FIELDS: tuple[tuple[str, Callable[[AgentConfig], Any], bool], ...] = (
    ("staticPodPath", lambda c: c.pod_manifest_path, True),
    ("podLogsDir", lambda c: c.pod_log_root, True),
    ("syncFrequency", lambda c: _duration(c.resync_period), False),
    ("fileCheckFrequency", lambda c: _duration(c.file_check_frequency), False),
    ("httpCheckFrequency", lambda c: _duration(c.http_check_frequency), False),
    ("staticPodURL", lambda c: c.static_pod_url, True),
    # served as set: upstream masks the headers only in its start-up log (marshalKubeletConfigForLog), not here
    ("staticPodURLHeader", lambda c: {k: list(c.static_pod_url_header[k]) for k in sorted(c.static_pod_url_header)},
     True),
    ("address", lambda c: c.address, True),
    ("port", lambda c: c.port, True),
    ("readOnlyPort", lambda c: c.read_only_port, True),  # always 0: left out, as upstream's disabled port
    ("tlsCertFile", lambda c: c.tls_cert_file, True),
    ("tlsPrivateKeyFile", lambda c: c.tls_private_key_file, True),
    ("tlsCipherSuites", lambda c: list(c.tls_cipher_suites), True),
    ("tlsMinVersion", lambda c: c.tls_min_version, True),
    ("rotateCertificates", lambda c: c.rotate_certificates, True),
    ("serverTLSBootstrap", lambda c: c.server_tls_bootstrap, True),
    ("authentication", _authentication, False),
    ("authorization", _authorization, False),
    ("eventRecordQPS", lambda c: c.event_record_qps, False),
    ("eventBurst", lambda c: c.event_burst, True),
    ("healthzPort", lambda c: c.healthz_port, False),
    ("healthzBindAddress", lambda c: c.healthz_bind_address, True),
    ("clusterDomain", lambda c: c.cluster_domain, True),
    ("clusterDNS", lambda c: list(c.cluster_dns), True),
    ("streamingConnectionIdleTimeout", lambda c: _duration(c.streaming_connection_idle_timeout), False),
    ("nodeStatusUpdateFrequency", lambda c: _duration(c.node_status_update_frequency), False),
    ("nodeStatusReportFrequency", lambda c: _duration(c.node_status_report_frequency), False),
    ("imageMinimumGCAge", lambda c: _duration(c.image_minimum_gc_age), False),
    ("imageMaximumGCAge", lambda c: _duration(c.image_maximum_gc_age), False),
    ("imageGCHighThresholdPercent", lambda c: c.image_gc_high_threshold_percent, False),
    ("imageGCLowThresholdPercent", lambda c: c.image_gc_low_threshold_percent, False),
    ("volumeStatsAggPeriod", lambda c: _duration(c.volume_stats_agg_period), False),
    ("cgroupRoot", lambda c: c.cgroup_root, True),
    ("cgroupsPerQOS", lambda c: c.cgroups_per_qos, False),
    ("cgroupDriver", lambda c: c.cgroup_driver, True),  # the runtime's when it tells (configz is set after)
    ("cpuManagerPolicy", lambda c: c.cpu_manager_policy, True),
    ("cpuManagerPolicyOptions", lambda c: _map(c.cpu_manager_policy_options), True),
    ("cpuManagerReconcilePeriod", lambda c: _duration(c.cpu_manager_reconcile_period), False),
    ("memoryManagerPolicy", lambda c: c.memory_manager_policy, True),
    ("topologyManagerPolicy", lambda c: c.topology_manager_policy, True),
    ("topologyManagerScope", lambda c: c.topology_manager_scope, True),
    ("topologyManagerPolicyOptions", lambda c: _map(c.topology_manager_policy_options), True),
    ("qosReserved", lambda c: _map(c.qos_reserved), True),
    ("runtimeRequestTimeout", lambda c: _duration(c.runtime_request_timeout), False),
    ("maxPods", lambda c: c.max_pods, True),
    ("podPidsLimit", lambda c: c.pod_pids_limit, False),
    ("runOnce", lambda c: c.run_once, True),  # always false: left out, as upstream's
    ("serializeImagePulls", lambda c: c.serialize_image_pulls, False),
    ("evictionHard", lambda c: _map(c.effective_eviction_hard), True),
    ("evictionSoft", lambda c: _map(c.eviction_soft), True),
    ("evictionSoftGracePeriod", lambda c: _map(c.eviction_soft_grace_period), True),
    ("evictionPressureTransitionPeriod", lambda c: _duration(c.eviction_pressure_transition_period), False),
    ("evictionMaxPodGracePeriod", lambda c: c.eviction_max_pod_grace_period, True),
    ("evictionMinimumReclaim", lambda c: _map(c.eviction_minimum_reclaim), True),
    ("mergeDefaultEvictionSettings", lambda c: c.merge_default_eviction_settings, False),
    ("protectKernelDefaults", lambda c: c.protect_kernel_defaults, True),
    ("featureGates", lambda c: {name: c.feature_gates[name] for name in sorted(c.feature_gates)}, True),
    ("memorySwap", lambda c: {"swapBehavior": c.memory_swap_behavior} if c.memory_swap_behavior else {}, False),
    ("containerLogMaxSize", lambda c: quantity(c.container_log_max_size), True),
    ("containerLogMaxFiles", lambda c: c.container_log_max_files, False),
    ("containerLogMaxWorkers", lambda c: c.container_log_max_workers, False),
    ("containerLogMonitorInterval", lambda c: _duration(c.container_log_monitor_interval), False),
    ("configMapAndSecretChangeDetectionStrategy", lambda c: c.config_map_and_secret_strategy, True),
    ("systemReserved", lambda c: _map(c.system_reserved), True),
    ("kubeReserved", lambda c: _map(c.kube_reserved), True),
    ("reservedSystemCPUs", lambda c: c.reserved_system_cpus, True),  # as written (upstream's configz is set first)
    ("enforceNodeAllocatable", lambda c: list(c.enforce_node_allocatable), True),
    ("allowedUnsafeSysctls", lambda c: list(c.allowed_unsafe_sysctls), True),
    ("logging", _logging, False),
    ("enableSystemLogHandler", lambda c: c.enable_system_log_handler, False),  # a *bool upstream defaults
    ("enableSystemLogQuery", lambda c: c.enable_system_log_query, False),  # the internal bool, converted: always
    ("shutdownGracePeriod", lambda c: _duration(c.shutdown_grace_period), False),
    ("shutdownGracePeriodCriticalPods", lambda c: _duration(c.shutdown_grace_period_critical_pods), False),
    ("shutdownGracePeriodByPodPriority", _shutdown_by_priority, True),
    # KubeletCrashLoopBackOffMax (on by default) defaults the pointer: always there.
    ("crashLoopBackOff", lambda c: {"maxContainerRestartPeriod": _duration(c.max_container_restart_period)}, False),
    ("reservedMemory", lambda c: [_reservation(r) for r in c.reserved_memory], True),
    ("seccompDefault", lambda c: c.seccomp_default, False),  # the file's value: --seccomp-default is not in it
    ("registerWithTaints", _taints, True),
    # a *TracingConfiguration: nil (left out) unless the file set one of its fields; each a pointer, omitempty
    ("tracing", lambda c: {**({"endpoint": c.tracing_endpoint} if c.tracing_endpoint else {}),
                           **({"samplingRatePerMillion": c.tracing_sampling_rate_per_million}
                              if c.tracing_sampling_rate_per_million else {})}, True),
    ("localStorageCapacityIsolation", lambda c: c.local_storage_capacity_isolation, False),
    ("containerRuntimeEndpoint", lambda c: c.runtime_endpoint, False),  # no omitempty upstream
    ("imageServiceEndpoint", lambda c: c.image_endpoint, True),
    ("failCgroupV1", lambda c: c.fail_cgroup_v1, False),  # a *bool upstream defaults: always there
)


def kubelet_configuration(config: AgentConfig) -> dict[str, Any]:
    """The v1beta1 ``KubeletConfiguration`` of ``config``, fields in the Go struct's order (kind, apiVersion
    first: the inlined TypeMeta)."""
    body: dict[str, Any] = {"kind": CONFIG_KIND, "apiVersion": CONFIG_API_VERSION}
    for name, get, omitempty in _FIELDS:
        _put(body, name, get(config), omitempty=omitempty)
    return body


# The nested structs of the object (the rest of its mappings are Go maps).
_STRUCTS = frozenset({"authentication", "authentication.x509", "authentication.webhook", "authentication.anonymous",
                      "authorization", "authorization.webhook", "memorySwap", "logging", "logging.options",
                      "logging.options.text", "logging.options.json", "crashLoopBackOff", "tracing"})


def field_paths(body: Mapping[str, Any], prefix: str = "") -> Iterable[str]:
    """The dotted paths of a rendered configuration's leaves (``authentication.webhook.cacheTTL``); maps count
    as leaves."""
    for key, value in body.items():
        path = f"{prefix}{key}"
        if path in _STRUCTS:
            yield from field_paths(value, f"{path}.")
        else:
            yield path


def configz_body(config: AgentConfig) -> str:
    """The bytes of ``GET /configz``: ``encoding/json`` of the registered configs (one, ``kubeletconfig``)."""
    return gotext.go_json({CONFIGZ_NAME: kubelet_configuration(config)})


__all__ = ["CONFIGZ_NAME", "CONFIGZ_PATH", "configz_body", "field_paths", "kubelet_configuration", "quantity"]
