"""The agent's settings: a frozen tree built by a pure function from flags, a config file and the environment.

Names, formats and defaults follow the upstream kubelet: its flags (``--hostname-override``,
``--container-runtime-endpoint``, ``--register-with-taints`` ...) and its ``KubeletConfiguration`` file
(``kubelet.config.k8s.io/v1beta1``, read with ``--config``). Precedence is upstream's: a flag beats the
file, the file beats the default. Below the file sit the older ``KOPFLET_*`` / ``CONTAINER_RUNTIME_ENDPOINT``
environment variables (the dev stack and the tests use them), and ``NODE_NAME`` (a DaemonSet's downward API)
for the node name.

Nothing here does I/O: :func:`load` gets the command line, the environment and the hostname as values and
reads the config file only through the ``read_file`` callable it is given. Every problem is a
:class:`ConfigError` whose message names the flag, field or variable; nothing is silently ignored.
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import json
import math
import re
import shlex
import textwrap
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import yaml

from kopflet import backoff, gotext, paths
from kopflet.api import qos, validation
from kopflet.cm import cgroup_names, helpers, node_allocatable
from kopflet.cm.cpumanager import policy_options
from kopflet.cm.memorymanager import memory_manager
from kopflet.cm.memorymanager.memory_manager import MemoryReservation
from kopflet.cm.topologymanager import policy as topology_policy
from kopflet.config import dropins, feature_gates, log_options, tls_options
from kopflet.eviction import thresholds
from kopflet.lifecycle import admission
from kopflet.nodeshutdown import rules as nodeshutdown
from kopflet.nodeshutdown.rules import ShutdownGracePeriodByPodPriority

# The upstream kubelet's default CRI endpoint for containerd.
DEFAULT_RUNTIME_ENDPOINT = "unix:///run/containerd/containerd.sock"
# --runtime-request-timeout default: 2 minutes.
DEFAULT_RUNTIME_REQUEST_TIMEOUT = 120.0
# The kubelet API server's authorization modes (KubeletAuthorizationMode).
AUTHORIZATION_MODES = ("AlwaysAllow", "Webhook")

# The kubelet's flags as one shell-quoted string: how they reach the agent under `kopf run`, which owns argv.
ARGS_ENV = "KOPFLET_ARGS"
# The DaemonSet downward-API variable for the node name (`fieldRef: spec.nodeName`).
NODE_NAME_ENV = "NODE_NAME"

CONFIG_API_VERSION = "kubelet.config.k8s.io/v1beta1"
CONFIG_KIND = "KubeletConfiguration"

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# Resources the kubelet accepts in systemReserved / kubeReserved (pkg/kubelet: parseResourceList).
RESERVABLE_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pid")
MEMORY_RESOURCE = "memory"

_DURATION_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}

# Labels a kubelet may set on its own Node (k8s.io/kubelet/pkg/apis: IsKubeletLabel); NodeRestriction refuses others.
_KUBELET_LABELS = frozenset({
    "kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch",
    "topology.kubernetes.io/zone", "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/os", "beta.kubernetes.io/arch",
})
_KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")


class ConfigError(ValueError):
    """A setting is invalid; the message names the flag, config field or variable and what it expects."""


class _Invalid(ValueError):
    """A value is wrong; the caller prefixes the message with where the value came from."""


# One taint type for the whole core: admission matches tolerations against the same objects.
Taint = admission.Taint


def _frozen(mapping: Mapping[str, str] | None = None) -> Mapping[str, str]:
    return MappingProxyType(dict(mapping or {}))


def _format_options(values: Mapping[str, Any]) -> log_options.FormatOptions:
    """``logging.options`` from the four settings its fields and flags are (absent ones at their defaults)."""
    def routing(name: str) -> log_options.OutputRouting:
        default = log_options.OutputRouting()
        return log_options.OutputRouting(
            split_stream=values.get(f"log_{name}_split_stream", default.split_stream),
            info_buffer_size=values.get(f"log_{name}_info_buffer_size", default.info_buffer_size))
    return log_options.FormatOptions(text=routing("text"), json=routing("json"))


@dataclasses.dataclass(frozen=True)
class AgentConfig:
    node_name: str
    """The Node this agent is; only Pods with ``spec.nodeName`` equal to it are watched."""
    runtime_endpoint: str = DEFAULT_RUNTIME_ENDPOINT
    """``--container-runtime-endpoint``: CRI socket, ``unix://`` only (as the upstream kubelet on Linux)."""
    image_endpoint: str = DEFAULT_RUNTIME_ENDPOINT
    """``--image-service-endpoint``: CRI image service; :func:`load` defaults it to ``runtime_endpoint``."""
    runtime_request_timeout: float = DEFAULT_RUNTIME_REQUEST_TIMEOUT
    """Deadline for every CRI call except image pulls, which get their own."""
    node_ip: str = ""
    """The node's InternalIP (``--node-ip``): hostIP of its pods. Empty: detected at start."""
    root_dir: str = paths.DEFAULT_ROOT_DIR
    """Per-pod files (termination-log files, later volumes), as ``/var/lib/kubelet`` upstream."""
    pod_log_root: str = paths.DEFAULT_POD_LOG_ROOT
    """``podLogsDir``: where CRI container logs go; log collectors expect the default."""
    runtime_name: str = "containerd"
    """The container runtime's name as CRI Version tells it (upstream kubeGenericRuntimeManager's runtimeName, the
    ``<name>://`` of every containerID): no setting; `kopflet.node.Runtime.configured` sets it at start."""
    container_logs_dir: str = paths.DEFAULT_CONTAINER_LOGS_DIR
    """Where the symlinks to the containers' logs go: no setting (upstream fixes ``/var/log/containers``); a hollow
    node (`kopflet.hollow.plan`) moves it into its own directory, as many agents share the machine."""
    cluster_dns: tuple[str, ...] = ()
    """``--cluster-dns``: nameservers for ClusterFirst pods; empty means pods fall back to the host's."""
    cluster_domain: str = "cluster.local"
    """``--cluster-domain``."""
    resync_period: float = 60.0
    """``syncFrequency``: every pod is synced at least this often."""
    config_map_and_secret_strategy: str = "Watch"
    """``configMapAndSecretChangeDetectionStrategy``: ``Watch`` (a watch per object pods reference) or ``Get``
    (a GET at each read); ``Cache`` (upstream's TTL cache) is refused (`kopflet.util.manager`)."""
    kubeconfig: str = ""
    """``--kubeconfig``: the apiserver credentials; empty means in-cluster, then ``$KUBECONFIG``/``~/.kube/config``,
    and with none of them standalone mode (`kopflet.config.modes`)."""
    bootstrap_kubeconfig: str = ""
    """``--bootstrap-kubeconfig``: credentials (a bootstrap token) to get the node's client certificate with when the
    ``kubeconfig`` file is missing or its certificate unusable; that file is then written. Needs ``kubeconfig``."""
    rotate_certificates: bool = False
    """``rotateCertificates``: renew the client certificate through the certificates API before it expires.
    Needs ``kubeconfig``."""
    server_tls_bootstrap: bool = False
    """``serverTLSBootstrap``: the kubelet API's certificate comes from a ``kubernetes.io/kubelet-serving``
    certificate request, renewed before it expires, instead of a self-signed one."""
    pod_manifest_path: str = ""
    """``--pod-manifest-path`` / ``staticPodPath``: static pod manifests (a directory or one file); empty: none."""
    file_check_frequency: float = 20.0
    """``fileCheckFrequency``: how often the static pod path is re-read, in seconds."""
    http_check_frequency: float = 20.0
    """``--http-check-frequency`` / ``httpCheckFrequency``: how often ``static_pod_url`` is read, in seconds."""
    static_pod_url: str = ""
    """``--manifest-url`` / ``staticPodURL``: static pods from this URL (a Pod or a PodList), read every
    ``http_check_frequency`` (upstream pkg/kubelet/config/http.go); empty: none."""
    static_pod_url_header: Mapping[str, tuple[str, ...]] = dataclasses.field(
        default_factory=lambda: MappingProxyType({}))
    """``--manifest-url-header`` / ``staticPodURLHeader``: HTTP headers (name -> values, in order) sent with every
    read of ``static_pod_url``."""
    run_once: bool = False
    """``--runonce`` / ``runOnce``: always False; true is refused with upstream's validation error (run-once mode is
    deprecated upstream, and kopflet has none)."""
    max_pods: int = 110
    """``--max-pods``: admission rejects pods beyond this (``OutOfpods``); also the Node's ``pods`` capacity."""
    node_labels: Mapping[str, str] = dataclasses.field(default_factory=_frozen)
    """``--node-labels``: extra labels for the Node at registration."""
    register_with_taints: tuple[Taint, ...] = ()
    """``--register-with-taints``: taints for the Node at its first registration."""
    system_reserved: Mapping[str, str] = dataclasses.field(default_factory=_frozen)
    """``--system-reserved``: resource name -> quantity held back from pods for the OS."""
    kube_reserved: Mapping[str, str] = dataclasses.field(default_factory=_frozen)
    """``--kube-reserved``: resource name -> quantity held back from pods for Kubernetes daemons."""
    allowed_unsafe_sysctls: tuple[str, ...] = ()
    """``--allowed-unsafe-sysctls``: unsafe sysctls (or ``prefix*`` patterns) pods may set."""
    node_status_update_frequency: float = 10.0
    """``nodeStatusUpdateFrequency``: how often node status is computed (and posted if changed)."""
    node_status_report_frequency: float = 300.0
    """``nodeStatusReportFrequency``: node status is posted at least this often even if unchanged."""
    serialize_image_pulls: bool = True
    """``serializeImagePulls``: pull one image at a time."""
    healthz_port: int = 10248
    """``--healthz-port``: the liveness endpoint's port; 0 disables it."""
    healthz_bind_address: str = "127.0.0.1"
    """``--healthz-bind-address``."""
    log_verbosity: int = 0
    """``-v``/``--v`` (``logging.verbosity`` in the file): klog's verbosity; a line at V(n) is written when n is at
    most this (`kopflet.logs.verbosity`: V(4) is Python's debug level)."""
    log_format: str = log_options.TEXT_FORMAT
    """``--logging-format`` / ``logging.format``: ``text`` or ``json`` (component-base logs/json's shape)."""
    log_flush_frequency: float = log_options.DEFAULT_FLUSH_FREQUENCY
    """``logging.flushFrequency``: the most a log line waits in a buffer (klog's flush daemon): only the info
    stream with splitStream and an infoBufferSize is buffered; every other line is written at once."""
    log_vmodule: tuple[tuple[str, int], ...] = ()
    """``--vmodule`` / ``logging.vmodule``: (file pattern, verbosity) pairs, klog's per-file verbosities, matched
    against the base name of the source file that logs, without ``.py``; text format only."""
    log_text_split_stream: bool = False
    """``--log-text-split-stream`` / ``logging.options.text.splitStream``: with the text format, info lines to
    stdout and warnings and errors to stderr (LoggingAlphaOptions)."""
    log_text_info_buffer_size: str = "0"
    """``--log-text-info-buffer-size`` / ``logging.options.text.infoBufferSize``: a quantity (its canonical form);
    with the text format's splitStream, stdout is buffered up to that many bytes (LoggingAlphaOptions)."""
    log_json_split_stream: bool = False
    """``--log-json-split-stream`` / ``logging.options.json.splitStream``: the json format's (info and warnings to
    stdout, errors to stderr)."""
    log_json_info_buffer_size: str = "0"
    """``--log-json-info-buffer-size`` / ``logging.options.json.infoBufferSize``: the json format's."""
    address: str = "0.0.0.0"
    """``--address``: where the kubelet API (HTTPS: logs, exec, port-forward, stats) listens."""
    port: int = 10250
    """``--port``: the kubelet API's port."""
    read_only_port: int = 0
    """``readOnlyPort``: always 0 (disabled), as CIS 4.2.4 asks; kopflet serves no read-only port, so any other value
    is refused."""
    streaming_connection_idle_timeout: float = 4 * 3600.0
    """``streamingConnectionIdleTimeout``: a proxied exec/attach/portForward session with no byte either way for this
    long is closed; 0: never (the flag only: in the file 0 means the default, 4h)."""
    event_record_qps: int = 50
    """``eventRecordQPS``: events created or updated per second (a token bucket, as upstream's event client); 0: no
    limit."""
    event_burst: int = 100
    """``eventBurst``: the most events written at once before ``event_record_qps`` holds them back."""
    pod_pids_limit: int = -1
    """``podPidsLimit``: each pod cgroup's ``pids.max`` when positive; -1 or 0: none of its own (the pod is held by
    ``kubepods``' limit only)."""
    fail_cgroup_v1: bool = False
    """``failCgroupV1``: refuse to start on a cgroup v1 host. Off by default, unlike upstream v1.37 (on): kopflet
    keeps running where upstream's kubelet needs ``failCgroupV1: false`` (this project's own hosts among them)."""
    enable_system_log_handler: bool = True
    """``enableSystemLogHandler``: serve /var/log on the kubelet API's ``/logs/`` (authorized as ``nodes/log``);
    off: 405 ``logs endpoint is disabled.``"""
    enable_system_log_query: bool = False
    """``enableSystemLogQuery``: the node log query on ``/logs/?query=`` (journalctl, or the service's file under
    /var/log); needs ``enable_system_log_handler``."""
    protect_kernel_defaults: bool = False
    """``protectKernelDefaults``: refuse to start when the kernel tunables the kubelet expects differ, instead of
    setting them."""
    tls_cert_file: str = ""
    """``--tls-cert-file``: the API's serving certificate (intermediates after it); empty: self-signed."""
    tls_private_key_file: str = ""
    """``--tls-private-key-file``: the key of ``tls_cert_file``."""
    tls_cipher_suites: tuple[str, ...] = ()
    """``tlsCipherSuites``: Go's IANA suite names the API offers to TLS 1.0-1.2 clients; empty: the default list."""
    tls_min_version: str = ""
    """``tlsMinVersion``: ``VersionTLS10`` .. ``VersionTLS13``; empty: TLS 1.2, upstream's default."""
    cert_dir: str = ""
    """``--cert-dir``: where the self-signed ``kubelet.crt``/``kubelet.key`` and the client certificates
    (``kubelet-client-*.pem``) live; empty: ``<root_dir>/pki``."""
    client_ca_file: str = ""
    """``authentication.x509.clientCAFile``: CA bundle for client certificates (the apiserver's); empty: none."""
    anonymous_auth: bool = False
    """``authentication.anonymous.enabled``: requests without credentials become ``system:anonymous``.
    False as in the KubeletConfiguration file (upstream's flag alone, without ``--config``, defaults to true)."""
    authentication_token_webhook: bool = True
    """``authentication.webhook.enabled``: bearer tokens are checked with a TokenReview."""
    authentication_token_webhook_cache_ttl: float = 120.0
    """``authentication.webhook.cacheTTL``: how long TokenReview answers are cached, in seconds; 0: not cached."""
    authorization_mode: str = "Webhook"
    """``authorization.mode``: ``Webhook`` (a SubjectAccessReview per request) or ``AlwaysAllow``."""
    authorization_webhook_cache_authorized_ttl: float = 300.0
    """``authorization.webhook.cacheAuthorizedTTL``: how long an "allowed" answer is cached, in seconds."""
    authorization_webhook_cache_unauthorized_ttl: float = 30.0
    """``authorization.webhook.cacheUnauthorizedTTL``: how long a "denied" answer is cached, in seconds."""
    container_log_max_size: int = 10 * 1024 * 1024
    """``containerLogMaxSize``: a container's log is rotated once it is larger than this many bytes."""
    container_log_max_files: int = 5
    """``containerLogMaxFiles``: the most log files (the current one and rotated ones) kept per container."""
    container_log_max_workers: int = 1
    """``containerLogMaxWorkers``: how many containers' logs are rotated at once."""
    container_log_monitor_interval: float = 10.0
    """``containerLogMonitorInterval``: how often log sizes are checked, in seconds."""
    image_gc_high_threshold_percent: int = 85
    """``imageGCHighThresholdPercent``: image GC runs when the image filesystem is at least this full."""
    image_gc_low_threshold_percent: int = 80
    """``imageGCLowThresholdPercent``: image GC frees space until usage is below this."""
    image_minimum_gc_age: float = 120.0
    """``imageMinimumGCAge``: an unused image younger than this (since first seen) is never removed."""
    image_maximum_gc_age: float = 0.0
    """``imageMaximumGCAge``: an image unused this long is removed whatever the disk usage; 0: never."""
    minimum_container_ttl_duration: float = 0.0
    """``--minimum-container-ttl-duration`` (deprecated upstream): a dead container younger than this is kept."""
    maximum_dead_containers_per_container: int = 1
    """``--maximum-dead-containers-per-container`` (deprecated upstream): dead instances kept per container."""
    maximum_dead_containers: int = -1
    """``--maximum-dead-containers`` (deprecated upstream): dead containers kept on the node; negative: no cap."""
    eviction_hard: Mapping[str, str] | None = None
    """``evictionHard``: signal -> threshold (``100Mi``, ``10%``); None: upstream's Linux defaults."""
    eviction_soft: Mapping[str, str] = dataclasses.field(default_factory=_frozen)
    """``evictionSoft``: thresholds that must hold for their grace period before a pod is evicted."""
    eviction_soft_grace_period: Mapping[str, str] = dataclasses.field(default_factory=_frozen)
    """``evictionSoftGracePeriod``: signal -> duration, one per soft threshold."""
    eviction_minimum_reclaim: Mapping[str, str] = dataclasses.field(default_factory=_frozen)
    """``evictionMinimumReclaim``: signal -> how much beyond the threshold is reclaimed once it is met."""
    eviction_pressure_transition_period: float = 300.0
    """``evictionPressureTransitionPeriod``: a pressure condition stays this long after its last sighting."""
    eviction_max_pod_grace_period: int = 0
    """``evictionMaxPodGracePeriod``: the most grace a soft eviction gives a pod, in seconds."""
    merge_default_eviction_settings: bool = False
    """``mergeDefaultEvictionSettings``: the defaults fill in the hard thresholds evictionHard leaves out."""
    volume_stats_agg_period: float = 60.0
    """``volumeStatsAggPeriod``: how long a pod's volume measurement (a du of each volume) is reused; 0 or
    negative: volumes are not measured (upstream's fsResourceAnalyzer disabled)."""
    memory_swap_behavior: str = ""
    """``memorySwap.swapBehavior``: "" or ``NoSwap`` (the same: containers get no swap); LimitedSwap is refused."""
    shutdown_grace_period: float = 0.0
    """``shutdownGracePeriod``: how long the node shutdown manager delays a node shutdown (a logind inhibitor lock)
    to terminate the pods, the critical pods' period included; 0: off (upstream's default)."""
    shutdown_grace_period_critical_pods: float = 0.0
    """``shutdownGracePeriodCriticalPods``: the last part of `shutdown_grace_period`, kept for the critical pods
    (priority 2000000000 and up)."""
    shutdown_grace_period_by_pod_priority: tuple[ShutdownGracePeriodByPodPriority, ...] = ()
    """``shutdownGracePeriodByPodPriority``: the grace period per pod priority range, in place of the two above
    (`shutdown_periods`)."""
    max_container_restart_period: float = backoff.MAXIMUM
    """``crashLoopBackOff.maxContainerRestartPeriod``: the crash-loop backoff's cap, always kopflet's (upstream's
    default, 5m0s: KubeletCrashLoopBackOffMax on by default defaults the field to it); others are refused."""
    tracing_endpoint: str = ""
    """``tracing.endpoint``: the OTLP gRPC collector pod start traces go to ("": localhost:4317, the exporter's
    default)."""
    tracing_sampling_rate_per_million: int = 0
    """``tracing.samplingRatePerMillion``: how many pod starts in a million are traced; 0 (upstream's default):
    none, and no exporter runs."""
    local_storage_capacity_isolation: bool = True
    """``localStorageCapacityIsolation``: the Node reports ``ephemeral-storage`` capacity and allocatable (so pods
    requesting it are admitted) and pods over their emptyDir ``sizeLimit`` or ``ephemeral-storage`` limits are
    evicted. Off, none of that: for hosts where the root filesystem's usage cannot be measured."""
    cgroup_root: str = ""
    """``cgroupRoot``: the cgroup the pods' ``kubepods`` goes under (``/custom`` puts them in ``/custom/kubepods``);
    "" is the root, ``/``. It must exist. Without cgroupsPerQOS: the cgroup whose limits are set to the whole node
    (none when "")."""
    cgroups_per_qos: bool = True
    """``cgroupsPerQOS``: ``kubepods``, its QoS tiers and a cgroup per pod (the pod-level limits). Off: none of them;
    the sandboxes get no cgroup parent (the runtime's default), and enforceNodeAllocatable must be empty or
    ``none``."""
    cgroup_driver: str = cgroup_names.DRIVER_CGROUPFS
    """``cgroupDriver``: ``cgroupfs`` or ``systemd`` (slices: ``kubepods.slice``, ``kubepods-burstable.slice`` ...).
    The runtime's own driver (CRI RuntimeConfig) replaces it when the runtime tells."""
    enforce_node_allocatable: tuple[str, ...] = node_allocatable.DEFAULT_ENFORCEMENT
    """``enforceNodeAllocatable``: with ``pods``, all pods together are held to the node's allocatable (capacity less
    systemReserved and kubeReserved) by the limits on ``kubepods``, and eviction watches
    allocatableMemory.available. Empty or ``none``: ``kubepods`` is sized to the whole node."""
    cpu_manager_policy: str = "none"
    """``cpuManagerPolicy``: ``none`` (containers share every CPU) or ``static`` (Guaranteed pods' containers with
    integer CPU requests get CPUs of their own; the rest share the others)."""
    cpu_manager_policy_options: Mapping[str, str] = dataclasses.field(default_factory=_frozen)
    """``cpuManagerPolicyOptions``: the static policy's options (``full-pcpus-only``, ``strict-cpu-reservation``)."""
    cpu_manager_reconcile_period: float = 10.0
    """``cpuManagerReconcilePeriod``: how often running containers' cpusets are brought in line with the state."""
    reserved_system_cpus: str = ""
    """``reservedSystemCPUs`` (``--reserved-cpus``): a cpuset kept for the system; its CPU count replaces the cpu
    of systemReserved and kubeReserved."""
    memory_manager_policy: str = memory_manager.POLICY_NONE
    """``memoryManagerPolicy``: ``None`` or ``Static`` (Guaranteed pods' containers get memory and hugepages on
    NUMA nodes of their own choosing, and ``cpuset.mems`` confining them there)."""
    reserved_memory: tuple[MemoryReservation, ...] = ()
    """``reservedMemory`` (``--reserved-memory``): the memory and hugepages kept for the system per NUMA node; with
    the Static policy their total per type must equal systemReserved + kubeReserved + the hard memory.available
    threshold."""
    topology_manager_policy: str = topology_policy.POLICY_NONE
    """``topologyManagerPolicy``: how the CPU and memory managers' NUMA placements are aligned: ``none``,
    ``best-effort``, ``restricted`` or ``single-numa-node``."""
    topology_manager_scope: str = topology_policy.SCOPE_CONTAINER
    """``topologyManagerScope``: align each ``container`` apart, or the whole ``pod`` together."""
    topology_manager_policy_options: Mapping[str, str] = dataclasses.field(default_factory=_frozen)
    """``topologyManagerPolicyOptions``: ``prefer-closest-numa-nodes``, ``max-allowable-numa-nodes``."""
    lock_file: str = ""
    """``--lock-file`` (flag only, as upstream): an exclusive flock on it is held for the agent's life; a second
    agent with the same file waits for it. Empty: no lock."""
    exit_on_lock_contention: bool = False
    """``--exit-on-lock-contention`` (needs ``lock_file``): the agent stops when another process opens the file."""
    hooks: tuple[str, ...] = ()
    """``--hooks`` (kopflet's own, no upstream flag): the policy hook modules to load (``package.module``,
    ``package.module:registry`` or ``/path/to/file.py``), in order (`kopflet.hooks.loader`)."""
    hook_entry_points: bool = True
    """``--hook-entry-points`` (kopflet's own): also load the installed packages' ``kopflet.hooks`` entry points."""
    seccomp_default: bool = False
    """``seccompDefault``: containers that set no seccomp profile get RuntimeDefault instead of Unconfined."""
    seccomp_default_flag: bool = False
    """``--seccomp-default``: the same, as upstream's separate kubelet flag (either one turns it on)."""
    feature_gates: Mapping[str, bool] = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    """``featureGates`` (``--feature-gates``): gate -> on, as given (the flag's merged over the file's): the gates
    kopflet implements (`feature_gates.IMPLEMENTED`: QOSReserved, LoggingAlphaOptions, LoggingBetaOptions) either
    way, SystemdWatchdog (locked on) at true, any other upstream gate only at its v1.37.1 default (a no-op,
    `startup_notes`)."""
    qos_reserved: Mapping[str, str] = dataclasses.field(default_factory=_frozen)
    """``qosReserved`` (``--qos-reserved``): resource -> percentage, as given (``memory: 50%``; checked by
    `helpers.parse_qos_reserved`). In force only with the QOSReserved gate on (`qos_reserved_in_force`)."""

    @property
    def log_options(self) -> log_options.FormatOptions:
        """``logging.options``: both formats' options, all validated (`log_options.validate`)."""
        return _format_options(vars(self))

    @property
    def log_routing(self) -> log_options.OutputRouting:
        """The options of the format in use (upstream's factories read only their own format's)."""
        options = self.log_options
        return options.json if self.log_format == log_options.JSON_FORMAT else options.text

    @property
    def qos_reserved_gate(self) -> bool:
        """Whether the QOSReserved feature gate is on (alpha, off by default)."""
        return feature_gates.enabled(self.feature_gates, feature_gates.QOS_RESERVED)

    @property
    def qos_reserved_in_force(self) -> Mapping[str, int] | None:
        """What the container manager reserves (upstream's NodeConfig.QOSReserved, which UpdateCgroups reads only
        with the QOSReserved gate on): resource -> percent with the gate on, None with it off."""
        if not self.qos_reserved_gate:
            return None
        return MappingProxyType(helpers.parse_qos_reserved(self.qos_reserved))

    @property
    def startup_warnings(self) -> tuple[str, ...]:
        """Settings accepted but without effect, logged at start so that none is silently ignored (upstream
        accepts qosReserved with its gate off and ignores it without a word)."""
        warnings = []
        if self.qos_reserved and not self.qos_reserved_gate:
            warnings.append(f"qosReserved (--qos-reserved) is ignored: the {feature_gates.QOS_RESERVED} feature gate "
                            f"is disabled (enable it with --feature-gates={feature_gates.QOS_RESERVED}=true or "
                            f"featureGates: {{{feature_gates.QOS_RESERVED}: true}})")
        elif self.qos_reserved and not self.cgroups_per_qos:
            warnings.append("qosReserved (--qos-reserved) is ignored: without cgroupsPerQOS (--cgroups-per-qos) "
                            "there are no QoS cgroups to limit")
        elif self.qos_reserved_gate and MEMORY_RESOURCE not in self.qos_reserved:
            warnings.append(f"the {feature_gates.QOS_RESERVED} feature gate is enabled but qosReserved "
                            f"(--qos-reserved) reserves no memory: the QoS cgroups get no memory limits")
        return tuple(warnings)

    @property
    def startup_notes(self) -> tuple[str, ...]:
        """Settings accepted as no-ops, logged at INFO at start: upstream feature gates set to their v1.37.1
        default, which kopflet takes without implementing (it behaves as upstream does at that default)."""
        return tuple(f"feature gate {name}={str(self.feature_gates[name]).lower()} is upstream's default: accepted, "
                     f"nothing to do" for name in feature_gates.no_ops(self.feature_gates))

    @property
    def graceful_node_shutdown_gate(self) -> bool:
        """Whether the GracefulNodeShutdown feature gate is on (beta, on by default; kopflet takes it on only)."""
        return feature_gates.enabled(self.feature_gates, feature_gates.GRACEFUL_NODE_SHUTDOWN)

    @property
    def shutdown_by_pod_priority_gate(self) -> bool:
        """Whether the GracefulNodeShutdownBasedOnPodPriority gate is on (beta, on by default; on only here too).
        Upstream's manager also writes its state file and metrics only with it on."""
        return feature_gates.enabled(self.feature_gates, feature_gates.GRACEFUL_NODE_SHUTDOWN_BASED_ON_POD_PRIORITY)

    @property
    def shutdown_periods(self) -> nodeshutdown.Periods:
        """The node shutdown manager's grace periods by priority, lowest first (upstream NewManager and
        newPodManager); empty when graceful node shutdown is off (upstream's managerStub)."""
        if not self.graceful_node_shutdown_gate:
            return ()
        return nodeshutdown.periods(self.shutdown_grace_period_by_pod_priority, self.shutdown_grace_period,
                                    self.shutdown_grace_period_critical_pods,
                                    priority_gate=self.shutdown_by_pod_priority_gate)

    @property
    def effective_seccomp_default(self) -> bool:
        """Upstream server.go hands the runtime manager ``KubeletFlags.SeccompDefault ||
        KubeletConfiguration.SeccompDefault``: the flag cannot turn off what the file turns on."""
        return self.seccomp_default or self.seccomp_default_flag

    @property
    def effective_eviction_hard(self) -> dict[str, str]:
        """The hard thresholds in force (upstream's loader: defaults unless set, merged on request)."""
        return thresholds.effective_eviction_hard(self.eviction_hard, self.merge_default_eviction_settings)

    @property
    def eviction_config(self) -> thresholds.EvictionConfig:
        """The eviction manager's configuration (`load` has checked that it parses)."""
        return thresholds.EvictionConfig(
            thresholds=tuple(thresholds.parse_threshold_config(
                self.enforce_node_allocatable, self.effective_eviction_hard, self.eviction_soft,
                self.eviction_soft_grace_period, self.eviction_minimum_reclaim)),
            pressure_transition_period=self.eviction_pressure_transition_period,
            max_pod_grace_period=self.eviction_max_pod_grace_period)

    @property
    def cgroup_layout(self) -> cgroup_names.CgroupLayout:
        """Where the pod cgroups are (cgroupRoot, cgroupsPerQOS, cgroupDriver)."""
        return cgroup_names.CgroupLayout(cgroup_root=self.cgroup_root, cgroups_per_qos=self.cgroups_per_qos,
                                         driver=self.cgroup_driver)

    @property
    def pod_field_selector(self) -> str:
        return f"spec.nodeName={self.node_name}"

    @property
    def layout(self) -> paths.Layout:
        """The node's kubelet directories (pods, checkpoints, logs) under `root_dir` and `pod_log_root`."""
        return paths.Layout(root_dir=self.root_dir, pod_log_root=self.pod_log_root,
                            container_logs_dir=self.container_logs_dir)

    @property
    def cert_directory(self) -> str:
        """``--cert-dir`` as upstream defaults it: ``<root-dir>/pki``."""
        return self.cert_dir or self.layout.cert_dir

    @property
    def healthz_endpoint(self) -> str:
        """The healthz port's URL (what a liveness probe or kubeadm's ``kubelet-check`` asks), or "" when
        ``healthz_port`` is 0."""
        if not self.healthz_port:
            return ""
        return f"http://{gotext.join_host_port(self.healthz_bind_address, self.healthz_port)}/healthz"


# ---------------------------------------------------------------------------------------------------------------
# Values: text (flags, environment) and YAML (config file) parsers. They raise _Invalid with a message that does
# not say where the value came from.

def _show(value: Any) -> str:
    """A value as an error message shows it: strings quoted, collections by kind."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, str | int | float):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return f"a {type(value).__name__}"


def parse_duration(text: str) -> float:
    """Seconds in a Go duration (``time.ParseDuration``): ``2m0s``, ``1h30m``, ``500ms``, ``0``."""
    s = text
    sign = -1.0 if s.startswith("-") else 1.0
    if s[:1] in ("+", "-"):
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise _Invalid(f'expected a duration such as "1m30s", got {_show(text)}')
    total, pos = 0.0, 0
    while pos < len(s):
        match = _DURATION_PART.match(s, pos)
        if match is None:
            raise _Invalid(f'expected a duration such as "1m30s" (units h, m, s, ms, us, ns), got {_show(text)}')
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    return sign * total


def _positive_duration(text: str) -> float:
    seconds = parse_duration(text)
    if seconds <= 0:
        raise _Invalid(f"must be a positive duration, got {_show(text)}")
    return seconds


def _non_negative_duration(text: str) -> float:
    seconds = parse_duration(text)
    if seconds < 0:
        raise _Invalid(f"must not be a negative duration, got {_show(text)}")
    return seconds


def _seconds_or_duration(text: str) -> float:
    """The legacy ``KOPFLET_RUNTIME_REQUEST_TIMEOUT``: a plain number of seconds, or a Go duration."""
    try:
        seconds = float(text)
    except ValueError:
        try:
            seconds = parse_duration(text)
        except _Invalid:
            raise _Invalid(f'expected a number of seconds or a duration such as "2m0s", got {_show(text)}') from None
    if not (seconds > 0 and math.isfinite(seconds)):
        raise _Invalid(f"must be positive, got {_show(text)}")
    return seconds


def _integer(text: str) -> int:
    if not re.fullmatch(r"[+-]?\d+", text.strip()):
        raise _Invalid(f"expected an integer, got {_show(text)}")
    return int(text)


def _bool(text: str) -> bool:
    # strconv.ParseBool, as pflag.
    if text in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if text in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    raise _Invalid(f"expected true or false, got {_show(text)}")


def _string(text: str) -> str:
    return text


def _endpoint(text: str) -> str:
    if text.startswith("/"):
        text = f"unix://{text}"  # the kubelet's deprecated fallback for a bare socket path
    if not text.startswith("unix://") or len(text) <= len("unix://"):
        raise _Invalid(f"{_show(text)} must be a unix:// socket address such as {_show(DEFAULT_RUNTIME_ENDPOINT)}")
    return text


def _absolute_path(text: str) -> str:
    if not text.startswith("/"):
        raise _Invalid(f"{_show(text)} must be an absolute path")
    return text


def _ip(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text.strip()))
    except ValueError:
        raise _Invalid(f"{_show(text)} is not an IP address") from None


def _node_ip(text: str) -> str:
    if "," in text:
        raise _Invalid(f"{_show(text)}: dual-stack node IPs are not supported, give one IP address")
    return _ip(text)


def _ips(text: str) -> tuple[str, ...]:
    return tuple(_ip(part) for part in _csv(text))


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


_HOOK_MODULE = re.compile(r"^(?:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*|/\S*\.py)(?::[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)?$")


def _hook_module(text: str) -> str:
    """One --hooks entry: ``package.module``, ``/path/to/file.py``, either with ``:attribute``."""
    target = text.partition(":")[0]
    if target.endswith(".py") and not target.startswith("/"):
        raise _Invalid(f"{_show(text)}: give a .py file as an absolute path")
    if not _HOOK_MODULE.match(text):
        raise _Invalid(f"{_show(text)} is not a module path (package.module), an absolute path to a .py file, or "
                       f"either with :attribute")
    return text


def _domain(text: str) -> str:
    domain = text.strip().rstrip(".").lower()
    if not validation.is_dns1123_subdomain(domain):
        raise _Invalid(f"{_show(text)} is not a valid DNS domain")
    return domain


def _non_negative(text: str) -> int:
    number = _integer(text)
    if number < 0:
        raise _Invalid(f"must not be negative, got {number}")
    return number


def _port(text: str) -> int:
    number = _integer(text)
    if not 0 <= number <= 65535:
        raise _Invalid(f"must be a port number from 0 (disabled) to 65535, got {number}")
    return number


def _server_port(text: str) -> int:
    number = _integer(text)
    if not 1 <= number <= 65535:
        raise _Invalid(f"must be between 1 and 65535, inclusive, got {number}")
    return number


def _authorization_mode(text: str) -> str:
    if text not in AUTHORIZATION_MODES:
        raise _Invalid(f"unknown authorization mode {_show(text)}: expected one of {', '.join(AUTHORIZATION_MODES)}")
    return text


def check_label_key(key: str) -> None:
    """``validation.IsQualifiedName``: ``[prefix/]name``, the prefix a DNS subdomain, the name up to 63 characters."""
    if key.count("/") > 1:
        raise _Invalid(f"invalid label key {_show(key)}: at most one '/'")
    prefix, slash, name = key.rpartition("/")
    if slash and not validation.is_dns1123_subdomain(prefix):
        raise _Invalid(f"invalid label key {_show(key)}: the prefix must be a lowercase DNS subdomain")
    if not validation.is_qualified_name_part(name):
        raise _Invalid(f"invalid label key {_show(key)}: the name must be 1-63 characters of [A-Za-z0-9-_.], "
                       f"starting and ending with a letter or digit")


def check_label_value(key: str, value: str) -> None:
    """``validation.IsValidLabelValue``: empty, or up to 63 characters like a label name."""
    if not validation.is_label_value(value):
        raise _Invalid(f"invalid value {_show(value)} for {_show(key)}: at most 63 characters of [A-Za-z0-9-_.], "
                       f"starting and ending with a letter or digit")


def _pairs(text: str) -> dict[str, str]:
    """``k=v,k2=v2`` as the kubelet's ``MapStringString`` flags; keys and values are trimmed."""
    pairs: dict[str, str] = {}
    for part in text.split(","):
        if not part:
            continue
        key, eq, value = part.partition("=")
        if not eq:
            raise _Invalid(f"malformed pair {_show(part)}, expected key=value")
        pairs[key.strip()] = value.strip()
    return pairs


def _pair(text: str) -> dict[str, str]:
    """One ``key=value`` (cliflag MapStringString with NoSplit: commas are part of the value)."""
    key, eq, value = text.partition("=")
    if not eq:
        raise _Invalid("malformed pair, expect string=string")
    return {key.strip(): value.strip()}


def _colon_multimap(text: str) -> Mapping[str, tuple[str, ...]]:
    """``a:hello,b:again,b:beautiful`` as cliflag's ColonSeparatedMultimapStringString: pairs split on ``,``, each on
    its first ``:``, keys and values trimmed; a key repeated keeps its values in order."""
    out: dict[str, tuple[str, ...]] = {}
    for pair in text.split(","):
        if not pair:
            continue
        key, colon, value = pair.partition(":")
        if not colon:
            raise _Invalid("malformed pair, expect string:string")
        out[key.strip()] = (*out.get(key.strip(), ()), value.strip())
    return MappingProxyType(out)


def _append_multimap(old: Mapping[str, tuple[str, ...]],
                     new: Mapping[str, tuple[str, ...]]) -> Mapping[str, tuple[str, ...]]:
    out = dict(old)
    for key, values in new.items():
        out[key] = out.get(key, ()) + values
    return MappingProxyType(out)


def _labels(text: str) -> Mapping[str, str]:
    labels = _pairs(text)
    for key, value in labels.items():
        check_label_key(key)
        check_label_value(key, value)
        namespace = key.partition("/")[0] if "/" in key else ""
        is_k8s = any(namespace == ns or namespace.endswith(f".{ns}") for ns in ("kubernetes.io", "k8s.io"))
        allowed = key in _KUBELET_LABELS or any(
            namespace == ns or namespace.endswith(f".{ns}") for ns in _KUBELET_LABEL_NAMESPACES)
        if is_k8s and not allowed:
            raise _Invalid(f"label {_show(key)} is in the 'kubernetes.io' or 'k8s.io' namespace: a kubelet may only "
                           f"set those under {', '.join(_KUBELET_LABEL_NAMESPACES)} or the well-known "
                           f"{', '.join(sorted(_KUBELET_LABELS))}")
    return _frozen(labels)


def _quantities(pairs: Mapping[str, str]) -> Mapping[str, str]:
    for name, quantity in pairs.items():
        if name not in RESERVABLE_RESOURCES:
            raise _Invalid(f"cannot reserve {_show(name)}: only {', '.join(RESERVABLE_RESOURCES)}")
        try:
            amount = qos.parse_quantity(quantity)
        except qos.QuantityError as exc:
            raise _Invalid(f"{name}: {exc}") from None
        if amount < 0:
            raise _Invalid(f"resource quantity for {_show(name)} cannot be negative: {_show(quantity)}")
    return _frozen(pairs)


def _reserved(text: str) -> Mapping[str, str]:
    return _quantities(_pairs(text))


def _cpu_manager_error(values: Mapping[str, Any]) -> str:
    """The CPU manager's checks that need no topology (upstream `NewManager`, and reservedSystemCPUs' parse in
    config validation), with upstream's messages; "" when fine."""
    reserved_text = values.get("reserved_system_cpus", "")
    try:
        reserved = policy_options.parse_reserved_cpus(reserved_text)
        system, kube = policy_options.reservations(values.get("system_reserved", {}),
                                                   values.get("kube_reserved", {}), reserved)
        policy_options.validate(values.get("cpu_manager_policy", AgentConfig.cpu_manager_policy),
                                values.get("cpu_manager_policy_options", {}),
                                policy_options.reserved_cpu_milli(system, kube))
    except policy_options.OptionsError as exc:
        return str(exc)
    return ""


def _event_limit_errors(values: Mapping[str, Any]) -> list[str]:
    """Upstream ValidateKubeletConfiguration's checks of eventBurst and eventRecordQPS, in its order and words."""
    errors = []
    burst = values.get("event_burst", AgentConfig.event_burst)
    if burst < 0:
        errors.append(f"invalid configuration: eventBurst (--event-burst) {burst} must not be a negative number")
    qps = values.get("event_record_qps", AgentConfig.event_record_qps)
    if qps < 0:
        errors.append(f"invalid configuration: eventRecordQPS (--event-qps) {qps} must not be a negative number")
    return errors


def _cgroup_error(values: Mapping[str, Any]) -> str:
    """cgroupDriver is one of the two drivers (upstream takes anything else for cgroupfs; kopflet refuses a typo
    rather than ignore it), and cgroupRoot spells as a systemd slice with that driver (upstream panics when
    converting it); "" when fine."""
    driver = values.get("cgroup_driver", AgentConfig.cgroup_driver)
    if driver not in cgroup_names.DRIVERS:
        return (f"invalid configuration: option {gotext.go_quote(driver)} specified for cgroupDriver "
                f"(--cgroup-driver). Valid options are {gotext.go_quote(cgroup_names.DRIVER_CGROUPFS)} or "
                f"{gotext.go_quote(cgroup_names.DRIVER_SYSTEMD)}")
    layout = cgroup_names.CgroupLayout(cgroup_root=values.get("cgroup_root", ""), driver=driver,
                                       cgroups_per_qos=values.get("cgroups_per_qos", AgentConfig.cgroups_per_qos))
    try:
        layout.pods_root  # noqa: B018 (the name converts)
    except cgroup_names.CgroupNameError as exc:
        return f"invalid configuration: cgroupRoot (--cgroup-root) {gotext.go_quote(layout.cgroup_root)}: {exc}"
    return ""


def _memory_manager_error(values: Mapping[str, Any]) -> str:
    """The memory and topology managers' checks that need no machine (upstream config validation: the topology
    policy and scope, the reserved memory; `NewManager`: the memory policy name, the topology options), with
    upstream's messages; "" when fine."""
    errors = []
    policy = values.get("topology_manager_policy", AgentConfig.topology_manager_policy)
    if policy not in topology_policy.POLICIES:
        errors.append(f"invalid configuration: topologyManagerPolicy (--topology-manager-policy) "
                      f"{gotext.go_quote(policy)} must be one of: "
                      f"[{' '.join(gotext.go_quote(p) for p in topology_policy.POLICIES)}]")
    scope = values.get("topology_manager_scope", AgentConfig.topology_manager_scope)
    if scope not in topology_policy.SCOPES:
        errors.append(f"invalid configuration: topologyManagerScope (--topology-manager-scope) "
                      f'{gotext.go_quote(scope)} must be one of: "container", or "pod"')
    errors += memory_manager.validate_reserved_memory(values.get("reserved_memory", ()))
    if errors:
        return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"  # upstream's aggregate error
    if policy != topology_policy.POLICY_NONE:
        try:
            topology_policy.parse_options(values.get("topology_manager_policy_options", {}))
        except topology_policy.TopologyManagerError as exc:
            return str(exc)
    memory_policy = values.get("memory_manager_policy", AgentConfig.memory_manager_policy)
    if memory_policy not in memory_manager.POLICIES:
        return f"unknown policy: {gotext.go_quote(memory_policy)}"
    return ""


def _reserved_memory_flag(text: str) -> tuple[MemoryReservation, ...]:
    try:
        return memory_manager.parse_reserved_memory_flag(text)
    except ValueError as exc:
        raise _Invalid(str(exc)) from None


def _yaml_reserved_memory(value: Any) -> tuple[MemoryReservation, ...]:
    """``reservedMemory``: a list of ``{numaNode: <int>, limits: {<type>: <quantity>}}``."""
    if not isinstance(value, list):
        raise _Invalid(f"expected a list of reservations, got {_show(value)}")
    out = []
    for index, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise _Invalid(f"item {index}: expected a mapping with numaNode and limits, got {_show(item)}")
        unknown = set(item) - {"numaNode", "limits"}
        if unknown:
            raise _Invalid(f"item {index}: unknown field {_show(sorted(unknown)[0])}")
        node = item.get("numaNode", 0)
        if isinstance(node, bool) or not isinstance(node, int) or not -(1 << 31) <= node < 1 << 31:
            raise _Invalid(f"item {index}: numaNode: expected an int32, got {_show(node)}")
        limits = item.get("limits") or {}
        if not isinstance(limits, Mapping):
            raise _Invalid(f"item {index}: limits: expected a mapping of quantities, got {_show(limits)}")
        parsed: dict[str, str] = {}
        for name, quantity in limits.items():
            text = str(quantity) if isinstance(quantity, int) and not isinstance(quantity, bool) else quantity
            if not isinstance(text, str):
                raise _Invalid(f"item {index}: limits: {name}: expected a quantity, got {_show(quantity)}")
            try:
                qos.parse_quantity(text)
            except qos.QuantityError as exc:
                raise _Invalid(f"item {index}: limits: {name}: {exc}") from None
            parsed[str(name)] = text
        out.append(MemoryReservation(node, _frozen(parsed)))
    return tuple(out)


def _sysctl(name: str) -> str:
    """An unsafe sysctl or ``prefix*`` pattern, checked as the kubelet does at start (sysctl NewAllowlist)."""
    try:
        admission.validate_sysctl_patterns([name])
    except ValueError as exc:
        raise _Invalid(str(exc)) from None
    return name


def _sysctls(text: str) -> tuple[str, ...]:
    return tuple(_sysctl(name) for name in _csv(text))


def _taint(key: str, value: str, effect: str, spec: str) -> Taint:
    if effect not in TAINT_EFFECTS:
        raise _Invalid(f"invalid taint {_show(spec)}: effect {_show(effect)} is not one of {', '.join(TAINT_EFFECTS)}")
    try:
        check_label_key(key)
        check_label_value(key, value)
    except _Invalid as exc:
        raise _Invalid(f"invalid taint {_show(spec)}: {exc}") from None
    return Taint(key=key, value=value, effect=effect)


def _unique_taints(taints: Sequence[Taint]) -> tuple[Taint, ...]:
    seen: set[tuple[str, str]] = set()
    for taint in taints:
        if (taint.key, taint.effect) in seen:
            raise _Invalid(f"duplicated taints with the same key and effect: {taint.key}:{taint.effect}")
        seen.add((taint.key, taint.effect))
    return tuple(taints)


def parse_taint(spec: str) -> Taint:
    """``key=value:Effect`` or ``key:Effect`` (pkg/util/taints: parseTaint); the effect is required."""
    head, colon, effect = spec.rpartition(":")
    if not colon or not head:
        raise _Invalid(f"invalid taint {_show(spec)}: expected key=value:Effect or key:Effect")
    key, _, value = head.partition("=")
    if "=" in value:
        raise _Invalid(f"invalid taint {_show(spec)}: more than one '='")
    if ":" in head:
        raise _Invalid(f"invalid taint {_show(spec)}: more than one ':'")
    return _taint(key, value, effect, spec)


def _taints(text: str) -> tuple[Taint, ...]:
    return _unique_taints([parse_taint(part) for part in _csv(text)])


def _langle_pairs(text: str) -> Mapping[str, str]:
    """``memory.available<1Gi,nodefs.available<10%`` (cliflag LangleSeparatedMapStringString)."""
    pairs: dict[str, str] = {}
    for part in text.split(","):
        if not part:
            continue
        key, lt, value = part.partition("<")
        if not lt:
            raise _Invalid(f"malformed pair, expect string<string: {_show(part)}")
        pairs[key.strip()] = value.strip()
    return _frozen(pairs)


def _percent(text: str) -> int:
    number = _integer(text)
    if not 0 <= number <= 100:
        raise _Invalid(f"{number} must be between 0 and 100, inclusive")
    return number


def _log_max_size(text: str) -> int:
    """``containerLogMaxSize``: a quantity of bytes (``10Mi``), as upstream's container log manager parses it."""
    try:
        amount = qos.parse_quantity(text)
    except qos.QuantityError as exc:
        raise _Invalid(f"failed to parse container log max size {_show(text)}: {exc}") from None
    if amount <= 0:
        raise _Invalid(f"container log max size must be positive, got {_show(text)}")
    return int(amount)


def _log_max_files(text: str) -> int:
    number = _integer(text)
    if number <= 1:
        raise _Invalid("containerLogMaxFiles must be greater than 1")
    return number


def _log_max_workers(text: str) -> int:
    number = _integer(text)
    if number < 1:
        raise _Invalid("containerLogMaxWorkers must be greater than or equal to 1")
    return number


def _log_monitor_interval(text: str) -> float:
    seconds = parse_duration(text)
    if seconds < 3:
        raise _Invalid("containerLogMonitorInterval must be a positive time duration greater than or equal to 3s")
    return seconds


def _tls_min_version(text: str) -> str:
    try:
        return tls_options.parse_min_version(text)
    except ValueError as exc:
        raise _Invalid(str(exc)) from None


def _cipher_suite(name: str) -> str:
    try:
        return tls_options.parse_cipher_suite(name)
    except ValueError as exc:
        raise _Invalid(str(exc)) from None


def _cipher_suites(text: str) -> tuple[str, ...]:
    """pflag's StringSlice: comma-separated, nothing trimmed (upstream refuses " TLS_..." as unknown)."""
    return tuple(_cipher_suite(name) for name in text.split(",")) if text else ()


READ_ONLY_PORT_REFUSED = ("kopflet serves no read-only port: readOnlyPort (--read-only-port) must be 0 (disabled), "
                          "as the CIS Kubernetes Benchmark asks; the authenticated API on --port serves the same "
                          "paths")


def _read_only_port(text: str) -> int:
    number = _integer(text)
    if not 0 <= number <= 65535:  # upstream ValidateKubeletConfiguration's message
        raise _Invalid(f"invalid configuration: readOnlyPort (--read-only-port) {number} must be between 0 and "
                       f"65535, inclusive")
    if number:
        raise _Invalid(f"{READ_ONLY_PORT_REFUSED}, got {number}")
    return number


def _verbosity(text: str) -> int:
    return _non_negative(text)


def _logging(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A `log_options` reader with its LoggingError as this module's _Invalid."""
    def read(value: Any) -> Any:
        try:
            return parse(value)
        except log_options.LoggingError as exc:
            raise _Invalid(str(exc)) from None
    return read


def _flush_frequency_flag(text: str) -> float:
    """``--log-flush-frequency``: a Go duration; upstream's Validate refuses zero and negative ones (only the file's
    zero is defaulted to 5s)."""
    seconds = parse_duration(text)
    if seconds <= 0:
        raise _Invalid(f"Invalid value: {_show(text)}: Must be greater than zero")
    return seconds


def _flush_frequency(value: Any) -> float:
    """``logging.flushFrequency``: a Go duration string or integer nanoseconds (logsapi.TimeOrMetaDuration); 0 is
    the default (5s), a negative one upstream's Validate refuses."""
    if isinstance(value, str):
        seconds = parse_duration(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        seconds = value / 1e9
    else:
        raise _Invalid(f'expected a duration such as "5s" or a number of nanoseconds, got {_show(value)}')
    if seconds < 0:
        raise _Invalid(f"Invalid value: {_show(value)}: Must be greater than zero")
    return seconds


def _go_struct_duration(seconds: float) -> str:
    """fmt's %v of a metav1.Duration (a struct without a String method): its time.Duration in braces, ``{30s}``."""
    return "{" + gotext.go_duration(seconds) + "}"


def _shutdown_errors(values: Mapping[str, Any]) -> list[str]:
    """Upstream ValidateKubeletConfiguration's checks of graceful node shutdown, in its order and words, with the
    feature gates as configured (upstream's localFeatureGate): the critical pods' period within the grace period,
    each zero or at least 1s, the gates, and not both ways of setting the periods."""
    gates = values.get("feature_gates", {})
    node_shutdown = feature_gates.enabled(gates, feature_gates.GRACEFUL_NODE_SHUTDOWN)
    by_priority_gate = feature_gates.enabled(gates, feature_gates.GRACEFUL_NODE_SHUTDOWN_BASED_ON_POD_PRIORITY)
    grace = values.get("shutdown_grace_period", AgentConfig.shutdown_grace_period)
    critical = values.get("shutdown_grace_period_critical_pods", AgentConfig.shutdown_grace_period_critical_pods)
    by_priority = values.get("shutdown_grace_period_by_pod_priority", ())
    grace_ns, critical_ns = round(grace * 1e9), round(critical * 1e9)  # compared as time.Duration
    errors = []
    if node_shutdown:
        if critical_ns > grace_ns:
            errors.append(f"invalid configuration: shutdownGracePeriodCriticalPods {_go_struct_duration(critical)} "
                          f"must be <= shutdownGracePeriod {_go_struct_duration(grace)}")
        if grace_ns < 0 or 0 < grace_ns < 1_000_000_000:
            errors.append(f"invalid configuration: shutdownGracePeriod {_go_struct_duration(grace)} must be either "
                          f"zero or otherwise >= 1 sec")
        if critical_ns < 0 or 0 < critical_ns < 1_000_000_000:
            errors.append(f"invalid configuration: shutdownGracePeriodCriticalPods {_go_struct_duration(critical)} "
                          f"must be either zero or otherwise >= 1 sec")
    if (grace_ns > 0 or critical_ns > 0) and not node_shutdown:
        errors.append("invalid configuration: specifying shutdownGracePeriod or shutdownGracePeriodCriticalPods "
                      "requires feature gate GracefulNodeShutdown")
    if by_priority_gate and by_priority and (grace_ns > 0 or critical_ns > 0):
        errors.append("invalid configuration: Cannot specify both shutdownGracePeriodByPodPriority and "
                      "shutdownGracePeriod at the same time")
    if not by_priority_gate and by_priority:
        errors.append("invalid configuration: Specifying shutdownGracePeriodByPodPriority requires feature gate "
                      "GracefulNodeShutdownBasedOnPodPriority")
    return errors


_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _yaml_shutdown_by_priority(value: Any) -> tuple[ShutdownGracePeriodByPodPriority, ...]:
    """``shutdownGracePeriodByPodPriority``: a list of ``{priority: <int32>, shutdownGracePeriodSeconds:
    <int64>}``, a missing one 0 (Go's zero value), in the file's order (the manager sorts them). Upstream checks no
    values beyond the types."""
    if not isinstance(value, list):
        raise _Invalid(f"expected a list of {{priority, shutdownGracePeriodSeconds}}, got {_show(value)}")
    out = []
    for index, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise _Invalid(f"item {index}: expected a mapping with priority and shutdownGracePeriodSeconds, got "
                           f"{_show(item)}")
        unknown = sorted(str(key) for key in set(item) - {"priority", "shutdownGracePeriodSeconds"})
        if unknown:
            raise _Invalid(f"item {index}: unknown field {_show(unknown[0])} (an item has priority and "
                           f"shutdownGracePeriodSeconds)")
        numbers = []
        for name, (low, high), kind in (("priority", _INT32, "int32"), ("shutdownGracePeriodSeconds", _INT64, "int64")):
            number = item.get(name)
            if number is None:
                number = 0
            if isinstance(number, bool) or not isinstance(number, int) or not low <= number <= high:
                raise _Invalid(f"item {index}: {name}: expected an {kind}, got {_show(number)}")
            numbers.append(number)
        out.append(ShutdownGracePeriodByPodPriority(priority=numbers[0], shutdown_grace_period_seconds=numbers[1]))
    return tuple(out)


def _file_only(text: str) -> Any:  # pragma: no cover - no flag has such a kind
    raise _Invalid(f"a config file field only, got {_show(text)}")


def _max_container_restart_period(text: str) -> float:
    """``crashLoopBackOff.maxContainerRestartPeriod``: upstream's range (1s to 300s, with KubeletCrashLoopBackOffMax,
    on by default and kept on by kopflet), then only kopflet's crash-loop cap, `backoff.MAXIMUM`."""
    seconds = parse_duration(text)
    if not 1000 <= int(seconds * 1000) <= 300000:  # validation.go: IsInRange of the milliseconds
        raise _Invalid(f"invalid configuration: CrashLoopBackOff.MaxContainerRestartPeriod (got: "
                       f"{gotext.go_float(round(seconds * 1e9) / 1e9)} seconds) must be set between 1s and 300s")
    if seconds != backoff.MAXIMUM:
        raise _Invalid(f"kopflet's crash-loop backoff is capped at {gotext.go_duration(backoff.MAXIMUM)} (upstream's "
                       f"default); it cannot be changed yet: got {_show(text)}")
    return seconds


def _go_url_parse(raw: str) -> tuple[str, str]:
    """Go's ``url.Parse`` as far as its errors and scheme go: (the scheme, lowercased, "" when none; "" or the
    error's text, ``parse "<url>": <why>``). IPv6 literals are taken as they are."""
    def failed(why: str) -> tuple[str, str]:
        return "", f"parse {gotext.go_quote(raw)}: {why}"

    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in raw):
        return failed("net/url: invalid control character in URL")
    rest, scheme = raw.split("#", 1)[0], ""
    for index, char in enumerate(rest):  # getScheme
        if char.isascii() and char.isalpha():
            continue
        if char.isascii() and (char.isdigit() or char in "+-."):
            if index == 0:
                break
            continue
        if char == ":":
            if index == 0:
                return failed("missing protocol scheme")
            scheme, rest = rest[:index].lower(), rest[index + 1:]
        break
    rest = rest.split("?", 1)[0]
    if not rest.startswith("/"):
        if scheme:
            return scheme, ""  # opaque (unix:relative/path)
        if ":" in rest.split("/", 1)[0]:
            return failed("first path segment in URL cannot contain colon")
    if rest.startswith("//") and (scheme or not rest.startswith("///")):
        authority = rest[2:].split("/", 1)[0]
        host = authority.rsplit("@", 1)[-1]
        port = host[host.rfind("]") + 1:] if host.startswith("[") else host[host.rfind(":"):] if ":" in host else ""
        if host.startswith("[") and "]" not in host:
            return failed("missing ']' in host")
        if port and not ((port.startswith(":") and port[1:].isdigit()) or port == ":"):
            return failed(f"invalid port {gotext.go_quote(port)} after host")
        name = host if host.startswith("[") else host[:len(host) - len(port)]
        bad = next((c for c in name if c.isascii() and not (c.isalnum() or c in _HOST_CHARS)), None)
        if bad is not None:
            return failed(f"invalid character {gotext.go_quote(bad)} in host name")
    return scheme, ""


_HOST_CHARS = frozenset("-_.~!$&'()*+,;=:[]<>\"%")
"""What Go's url.Parse takes unescaped in a host name (shouldEscape's encodeHost set, and ``%`` escapes)."""


def _tracing_endpoint(text: str) -> str:
    """``tracing.endpoint``: a gRPC target, as component-base's validateEndpoint reads it (no ``//``: a dns name
    and port) with Go's url.Parse; only the dns, unix and unix-abstract schemes."""
    url = text if "//" in text else f"dns://{text}"
    scheme, error = _go_url_parse(url)
    if error:
        raise _Invalid(f"Invalid value: {gotext.go_quote(url)}: {error}")
    if scheme not in ("dns", "unix", "unix-abstract"):
        raise _Invalid(f"Invalid value: {gotext.go_quote(url)}: unsupported scheme: {scheme}.  Options are "
                       "none, dns, unix, or unix-abstract.  See https://github.com/grpc/grpc/blob/master/doc/naming.md")
    return text


def _sampling_rate(value: Any) -> int:
    """``tracing.samplingRatePerMillion``: an int32 from 0 to a million (component-base validateSamplingRate)."""
    rate = _yaml_integer(value)
    if rate < 0:
        raise _Invalid(f"Invalid value: {rate}: sampling rate must be positive")
    if rate > 1_000_000:
        raise _Invalid(f"Invalid value: {rate}: sampling rate per million must be less than or equal to one million")
    return rate


SWAP_BEHAVIORS = ("", "NoSwap", "LimitedSwap")  # kubetypes: "" is NoSwap
LIMITED_SWAP_REFUSED = ("kopflet implements only NoSwap (containers get no swap, upstream's default); "
                        "LimitedSwap is not supported")


def _swap_behavior(text: str) -> str:
    """``memorySwap.swapBehavior``: "" or NoSwap (upstream's validation words any other value; NodeSwap is locked
    on)."""
    if text not in SWAP_BEHAVIORS:
        raise _Invalid(f"invalid configuration: memorySwap.swapBehavior {gotext.go_quote(text)} must be one of: \"\", "
                       f"\"LimitedSwap\" or \"NoSwap\"")
    if text == "LimitedSwap":
        raise _Invalid(LIMITED_SWAP_REFUSED)
    return text


def _gates(gates: Mapping[str, bool]) -> Mapping[str, bool]:
    try:
        return feature_gates.check(gates)
    except feature_gates.FeatureGateError as exc:
        raise _Invalid(str(exc)) from None


def _feature_gates(text: str) -> Mapping[str, bool]:
    """``--feature-gates=QOSReserved=true,...`` (upstream's MapStringBool): gates kopflet implements, or others at
    their upstream default."""
    try:
        gates = feature_gates.parse_flag(text)
    except feature_gates.FeatureGateError as exc:
        raise _Invalid(str(exc)) from None
    return _gates(gates)


def _qos_reserved(pairs: Mapping[str, str]) -> Mapping[str, str]:
    """``qosReserved``: checked as upstream's ParseQOSReserved at start (only memory, ``N%`` from 0 to 100), kept as
    written for configz."""
    try:
        helpers.parse_qos_reserved(pairs)
    except ValueError as exc:
        raise _Invalid(str(exc)) from None
    return _frozen(pairs)


# YAML values (the config file): the JSON types the Go struct decodes.

def _yaml_string(value: Any) -> str:
    if not isinstance(value, str):
        raise _Invalid(f"expected a string, got {_show(value)}")
    return value


def _yaml_integer(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Invalid(f"expected an integer, got {_show(value)}")
    return value


def _yaml_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Invalid(f"expected true or false, got {_show(value)}")
    return value


def _yaml_strings(value: Any) -> list[str]:
    if not isinstance(value, list):
        raise _Invalid(f"expected a list of strings, got {_show(value)}")
    for item in value:
        if not isinstance(item, str):
            raise _Invalid(f"expected a list of strings, got an item {_show(item)}")
    return value


def _yaml_string_map(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise _Invalid(f"expected a mapping of strings, got {_show(value)}")
    for key, item in value.items():
        if not isinstance(item, str):
            raise _Invalid(f"expected a mapping of strings, got {_show(item)} for {_show(key)}")
    return {str(key): item for key, item in value.items()}


def _yaml_multimap(value: Any) -> Mapping[str, tuple[str, ...]]:
    """``staticPodURLHeader``: map[string][]string."""
    if not isinstance(value, Mapping):
        raise _Invalid(f"expected a mapping of lists of strings, got {_show(value)}")
    out: dict[str, tuple[str, ...]] = {}
    for key, items in value.items():
        if items is None:
            items = []
        if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
            raise _Invalid(f"expected a list of strings, got {_show(items)} for {_show(key)}")
        out[str(key)] = tuple(items)
    return MappingProxyType(out)


def _yaml_feature_gates(value: Any) -> Mapping[str, bool]:
    """``featureGates``: a mapping of gate names to YAML booleans (map[string]bool)."""
    if not isinstance(value, Mapping):
        raise _Invalid(f"expected a mapping of feature gate names to true or false, got {_show(value)}")
    for key, item in value.items():
        if not isinstance(item, bool):
            raise _Invalid(f"expected true or false, got {_show(item)} for {_show(key)}")
    return _gates({str(key): item for key, item in value.items()})


def _yaml_taints(value: Any) -> tuple[Taint, ...]:
    if not isinstance(value, list):
        raise _Invalid(f"expected a list of taints, got {_show(value)}")
    taints = []
    for index, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise _Invalid(f"item {index}: expected a taint (key, value, effect), got {_show(item)}")
        extra = sorted(set(item) - {"key", "value", "effect"})
        if extra:
            raise _Invalid(f"item {index}: unknown field {_show(extra[0])} (a taint has key, value, effect)")
        fields = {}
        for name in ("key", "value", "effect"):
            if item.get(name) is not None and not isinstance(item[name], str):
                raise _Invalid(f"item {index}: {name}: expected a string, got {_show(item[name])}")
            fields[name] = item.get(name) or ""
        if not fields["key"] or not fields["effect"]:
            raise _Invalid(f"item {index}: a taint needs a key and an effect")
        taints.append(_taint(fields["key"], fields["value"], fields["effect"], str(Taint(**fields))))
    return _unique_taints(taints)


@dataclasses.dataclass(frozen=True)
class _Kind:
    """How one type of setting is read from text (flags, environment) and from YAML (the config file)."""

    metavar: str
    from_text: Callable[[str], Any]
    from_yaml: Callable[[Any], Any] | None = None
    accumulate: Callable[[Any, Any], Any] | None = None
    """Repeated flags: combine (maps merge, lists append); None: the last one wins."""
    empty_is_unset: bool = False
    """An empty string means "not set": the file's, environment's or built-in value applies."""
    is_bool: bool = False


def _merge(old: Mapping[str, str], new: Mapping[str, str]) -> Mapping[str, str]:
    return _frozen({**old, **new})


def _merge_gates(old: Mapping[str, bool], new: Mapping[str, bool]) -> Mapping[str, bool]:
    return MappingProxyType({**old, **new})


def _append(old: tuple[Any, ...], new: tuple[Any, ...]) -> tuple[Any, ...]:
    return old + new


def _text_then(kind_text: Callable[[str], Any]) -> Callable[[Any], Any]:
    return lambda value: kind_text(_yaml_string(value))


STRING = _Kind("string", _string, _yaml_string, empty_is_unset=True)
ENDPOINT = _Kind("string", _endpoint, _text_then(_endpoint), empty_is_unset=True)
ABSOLUTE_PATH = _Kind("string", _absolute_path, _text_then(_absolute_path), empty_is_unset=True)
IP = _Kind("ip", _ip, _text_then(_ip), empty_is_unset=True)
NODE_IP = _Kind("ip", _node_ip, None, empty_is_unset=True)
IPS = _Kind("ips", _ips, lambda v: tuple(_ip(ip) for ip in _yaml_strings(v)), accumulate=_append)
DOMAIN = _Kind("string", _domain, _text_then(_domain), empty_is_unset=True)
COUNT = _Kind("int", _non_negative, lambda v: _non_negative(str(_yaml_integer(v))))
PORT = _Kind("int", _port, lambda v: _port(str(_yaml_integer(v))))
# --port must name a port; in the file 0 means the default (10250), as upstream's defaulting.
SERVER_PORT = _Kind("int", _server_port, lambda v: _port(str(_yaml_integer(v))))
# An empty mode in the file means the default (Webhook).
AUTHORIZATION_MODE = _Kind("string", _authorization_mode,
                           lambda v: _yaml_string(v) and _authorization_mode(v), empty_is_unset=True)
BOOL = _Kind("bool", _bool, _yaml_bool, is_bool=True)
# In the file a zero duration means the default (upstream defaulting); on the command line it is an error.
DURATION = _Kind("duration", _positive_duration, _text_then(_non_negative_duration))
# Cache TTLs: on the command line 0 turns the cache off; in the file 0 means the default, as upstream.
TTL = _Kind("duration", _non_negative_duration, _text_then(_non_negative_duration))
LABELS = _Kind("mapStringString", _labels, None, accumulate=_merge)
RESERVED = _Kind("mapStringString", _reserved, lambda v: _quantities(_yaml_string_map(v)), accumulate=_merge)
SYSCTLS = _Kind("strings", _sysctls, lambda v: tuple(_sysctl(s) for s in _yaml_strings(v)), accumulate=_append)
TAINTS = _Kind("[]Taint", _taints, _yaml_taints)
# -v; in the file logging.verbosity (the flag wins, as upstream's flag precedence over the file).
VERBOSITY = _Kind("Level", _verbosity, _logging(log_options.parse_verbosity))
LOG_FORMAT = _Kind("string", _logging(log_options.parse_format), _logging(log_options.parse_format),
                   empty_is_unset=True)
FLUSH_FREQUENCY = _Kind("duration", _flush_frequency_flag, _flush_frequency)
# --vmodule appends, as pflag's Set of upstream's VModuleConfigurationPflag does (and after the file's: `load`).
VMODULE = _Kind("pattern=N,...", _logging(log_options.parse_vmodule_flag), _logging(log_options.parse_vmodule),
                accumulate=_append)
# logging.options.{text,json}.infoBufferSize and their flags: a resource.QuantityValue (pflag type "quantity").
INFO_BUFFER_SIZE = _Kind("quantity", _logging(log_options.parse_info_buffer_size_flag),
                         _logging(log_options.parse_info_buffer_size))
# shutdownGracePeriodByPodPriority: config file only, as upstream (no flag).
SHUTDOWN_BY_PRIORITY = _Kind("[]ShutdownGracePeriodByPodPriority", _file_only, _yaml_shutdown_by_priority)
# A pointer upstream: in the file an explicit value, 0s too, is checked (zero_is_default=False).
MAX_RESTART_PERIOD = _Kind("duration", _max_container_restart_period, _text_then(_max_container_restart_period))
TRACING_ENDPOINT = _Kind("string", _tracing_endpoint, _text_then(_tracing_endpoint), empty_is_unset=True)
SAMPLING_RATE = _Kind("int32", lambda text: _sampling_rate(_integer(text)), _sampling_rate)
SWAP_BEHAVIOR = _Kind("string", _swap_behavior, _text_then(_swap_behavior), empty_is_unset=True)
# volumeStatsAggPeriod: any duration, as upstream's flag (a DurationVar); 0 or negative turns volume stats off
# (in the file 0 means the default, 1m).
ANY_DURATION = _Kind("duration", parse_duration, _text_then(parse_duration))
# shutdownGracePeriod, shutdownGracePeriodCriticalPods: any duration, checked together (_shutdown_errors).
SHUTDOWN_GRACE_PERIOD = ANY_DURATION
# Fields that are pointers upstream (nil is the default): in the file an explicit 0 is a value, and is checked.
LANGLE_MAP = _Kind("mapStringString", _langle_pairs, lambda v: _frozen(_yaml_string_map(v)), accumulate=_merge)
STRING_MAP = _Kind("mapStringString", lambda t: _frozen(_pairs(t)), lambda v: _frozen(_yaml_string_map(v)),
                   accumulate=_merge)
INT = _Kind("int32", _integer, lambda v: _yaml_integer(v))
PERCENT = _Kind("int", _percent, lambda v: _percent(str(_yaml_integer(v))))
LOG_MAX_SIZE = _Kind("string", _log_max_size, _text_then(_log_max_size), empty_is_unset=True)
LOG_MAX_FILES = _Kind("int", _log_max_files, lambda v: _log_max_files(str(_yaml_integer(v))))
LOG_MAX_WORKERS = _Kind("int", _log_max_workers, lambda v: _log_max_workers(str(_yaml_integer(v))))
TLS_VERSION = _Kind("string", _tls_min_version, _text_then(_tls_min_version), empty_is_unset=True)
CIPHER_SUITES = _Kind("strings", _cipher_suites, lambda v: tuple(_cipher_suite(s) for s in _yaml_strings(v)),
                      accumulate=_append)
# --cpu-manager-policy-options takes one key=value per flag (cliflag.NewMapStringStringNoSplit).
POLICY_OPTIONS = _Kind("mapStringString", lambda t: _frozen(_pair(t)), lambda v: _frozen(_yaml_string_map(v)),
                       accumulate=_merge)
# --manifest-url-header: cliflag ColonSeparatedMultimapStringString (repeated flags append; a flag replaces the file's).
URL_HEADERS = _Kind("colonSeparatedMultimapStringString", _colon_multimap, _yaml_multimap, accumulate=_append_multimap)
# --reserved-memory: repeated flags append (upstream ReservedMemoryVar).
RESERVED_MEMORY = _Kind("reserved-memory", _reserved_memory_flag, _yaml_reserved_memory, accumulate=_append)
# --hooks: module paths or .py files, checked for their form only (importing them is the loader's, at start).
HOOK_MODULES = _Kind("strings", lambda t: tuple(_hook_module(m) for m in _csv(t)), None, accumulate=_append)
ENFORCEMENTS = _Kind("strings", lambda t: tuple(_csv(t)), lambda v: tuple(_yaml_strings(v)), accumulate=_append)
# Repeated --feature-gates merge, as upstream's MapStringBool; so do the file's and the flags' (load).
FEATURE_GATES = _Kind("mapStringBool", _feature_gates, _yaml_feature_gates, accumulate=_merge_gates)
QOS_RESERVED_MAP = _Kind("mapStringString", lambda t: _qos_reserved(_pairs(t)),
                         lambda v: _qos_reserved(_yaml_string_map(v)), accumulate=_merge)
LOG_MONITOR_INTERVAL = _Kind("duration", _log_monitor_interval, _text_then(_log_monitor_interval))
# readOnlyPort: upstream's range check, then kopflet's own refusal of any port at all.
READ_ONLY_PORT = _Kind("int32", _read_only_port, lambda v: _read_only_port(str(_yaml_integer(v))))
# podPidsLimit is an *int64 defaulted to -1 when nil or negative (v1beta1 SetDefaults); the flag keeps what it is given.
POD_PIDS_LIMIT = _Kind("int", _integer, lambda v: _yaml_integer(v) if _yaml_integer(v) >= 0 else -1)


@dataclasses.dataclass(frozen=True)
class Setting:
    """One setting: its AgentConfig attribute, upstream flag and config-file field, and what it means."""

    attr: str
    flag: str | None
    field: str | None
    kind: _Kind
    default: str
    """The default as the docs show it."""
    help: str
    zero_is_default: bool = True
    """In the file, a zero value (0, "0s", "") means the default, as upstream's defaulting of omitempty fields."""


# The settings kopflet honours. `flag` is the upstream kubelet flag name, `field` the KubeletConfiguration field.
SETTINGS: tuple[Setting, ...] = (
    Setting("kubeconfig", "kubeconfig", None, STRING, '""',
            "Path to a kubeconfig file with the node's credentials. Empty: in-cluster, then $KUBECONFIG or "
            "~/.kube/config; with none of them, standalone mode (static pods only, no apiserver)."),
    # TLS bootstrap and client certificate rotation (upstream KubeletFlags.BootstrapKubeconfig,
    # KubeletConfiguration.RotateCertificates with its deprecated flag).
    Setting("bootstrap_kubeconfig", "bootstrap-kubeconfig", None, STRING, '""',
            "A kubeconfig (usually a bootstrap token) used to get the node's client certificate when the --kubeconfig "
            "file is missing or its certificate is unusable or expired: a CertificateSigningRequest for "
            "system:node:<name> is sent, and once it is approved and issued the certificate is stored in --cert-dir "
            "and a kubeconfig naming it is written to --kubeconfig. Needs --kubeconfig."),
    Setting("rotate_certificates", "rotate-certificates", "rotateCertificates", BOOL, "false",
            "Renew the client certificate through the certificates API at 70-90% of its lifetime, storing it in "
            "--cert-dir and switching to it without a restart. Needs --kubeconfig and an approver (the "
            "controller-manager approves a node's renewal with the selfnodeclient role)."),
    Setting("server_tls_bootstrap", "rotate-server-certificates", "serverTLSBootstrap", BOOL, "false",
            "Get the kubelet API's serving certificate through the certificates API (signer kubernetes.io/"
            "kubelet-serving, for system:node:<name> with the node's hostname and IP as subject alternative names) "
            "and renew it at 70-90% of its lifetime, without a restart. No self-signed certificate is made: until "
            "the request is approved (by an admin, e.g. kubectl certificate approve, or an approver; the "
            "controller-manager does not approve these) and issued, --tls-cert-file is served if given, else TLS "
            "handshakes fail with \"no serving certificate available for the kubelet\"."),
    Setting("_config", "config", None, STRING, '""',
            "A KubeletConfiguration file (kubelet.config.k8s.io/v1beta1). Flags override its fields."),
    Setting("_config_dir", "config-dir", None, STRING, '""',
            "Path to a directory containing drop-in configuration files that override settings from defaults and "
            "the --config file. The path may be absolute or relative; relative paths start at the Kubelet's current "
            "working directory. Drop-in files must have a '.conf' suffix (e.g., '99-kubelet-address.conf') and are "
            "processed in lexical order. Only '.conf' files are loaded; all other files are ignored. All .conf files "
            "in the directory and its subdirectories are processed in lexical order."),
    Setting("node_name", "hostname-override", None, STRING, "the hostname",
            "The node's name. Without it: $NODE_NAME, then the hostname; lowercased."),
    Setting("node_ip", "node-ip", None, NODE_IP, "detected",
            "The node's InternalIP address (hostIP of its pods). Empty: the address of the default route."),
    Setting("runtime_endpoint", "container-runtime-endpoint", "containerRuntimeEndpoint", ENDPOINT,
            DEFAULT_RUNTIME_ENDPOINT, "The CRI runtime service's unix socket."),
    Setting("image_endpoint", "image-service-endpoint", "imageServiceEndpoint", ENDPOINT,
            "the runtime endpoint", "The CRI image service's unix socket."),
    Setting("runtime_request_timeout", "runtime-request-timeout", "runtimeRequestTimeout", DURATION, "2m0s",
            "Timeout of every CRI call except image pulls."),
    Setting("pod_manifest_path", "pod-manifest-path", "staticPodPath", STRING, '""',
            "Directory (or one file) of static pod manifests. Empty: no static pods."),
    Setting("file_check_frequency", "file-check-frequency", "fileCheckFrequency", DURATION, "20s",
            "How often the static pod path is checked for changes."),
    Setting("http_check_frequency", "http-check-frequency", "httpCheckFrequency", DURATION, "20s",
            "Duration between checking http for new data (the static pods of --manifest-url)."),
    # The HTTP static pod source (upstream makePodSourceConfig: NewSourceURL when staticPodURL is set).
    Setting("static_pod_url", "manifest-url", "staticPodURL", STRING, '""',
            "URL for accessing additional Pod specifications to run: a Pod or a PodList (YAML or JSON), read every "
            "--http-check-frequency; its pods run as static pods (source http) with mirror pods. Empty: none."),
    Setting("static_pod_url_header", "manifest-url-header", "staticPodURLHeader", URL_HEADERS, "none",
            "Comma-separated list of HTTP headers to use when accessing the url provided to --manifest-url. "
            "Multiple headers with the same name will be added in the same order provided. This flag can be "
            "repeatedly invoked. For example: --manifest-url-header 'a:hello,b:again,c:world' --manifest-url-header "
            "'b:beautiful'"),
    Setting("run_once", "runonce", "runOnce", BOOL, "false",
            "Only false is accepted: true is refused, as upstream refuses it (run-once mode is deprecated)."),
    Setting("resync_period", "sync-frequency", "syncFrequency", DURATION, "1m0s",
            "Every pod is synced with the runtime at least this often."),
    Setting("config_map_and_secret_strategy", None, "configMapAndSecretChangeDetectionStrategy", STRING, '"Watch"',
            "How the ConfigMaps and Secrets pods reference are read: 'Watch', a watch of each one while a pod "
            "references it (reads answered from it); 'Get', a GET at every read (every sync of every pod reads its "
            "volumes' objects again). upstream's 'Cache' (a TTL cache) is refused."),
    Setting("max_pods", "max-pods", "maxPods", COUNT, "110",
            "The most pods this node runs; more are rejected (OutOfpods)."),
    Setting("pod_pids_limit", "pod-max-pids", "podPidsLimit", POD_PIDS_LIMIT, "-1",
            "The most processes (pids.max) in each pod's cgroup, set when the pod cgroup is made. -1 or 0: no limit "
            "of the pod's own (all pods together are held by kubepods' limit, from --system-reserved and "
            "--kube-reserved pid).", zero_is_default=False),
    Setting("node_labels", "node-labels", None, LABELS, "none",
            "Labels for the Node at registration: key=value,key2=value2. In kubernetes.io and k8s.io only "
            "the kubelet's own (node.kubernetes.io/..., kubelet.kubernetes.io/... and the well-known ones)."),
    Setting("register_with_taints", "register-with-taints", "registerWithTaints", TAINTS, "none",
            "Taints for the Node at its first registration: key=value:Effect or key:Effect, comma separated; "
            "effects NoSchedule, PreferNoSchedule, NoExecute."),
    Setting("root_dir", "root-dir", None, ABSOLUTE_PATH, paths.DEFAULT_ROOT_DIR,
            "Directory for the agent's per-pod files."),
    Setting("pod_log_root", None, "podLogsDir", ABSOLUTE_PATH, paths.DEFAULT_POD_LOG_ROOT,
            "Directory of the containers' log files."),
    Setting("cluster_dns", "cluster-dns", "clusterDNS", IPS, "none",
            "Comma-separated IP addresses of the cluster DNS service for dnsPolicy ClusterFirst pods. "
            "Empty: such pods get the host's resolvers."),
    Setting("cluster_domain", "cluster-domain", "clusterDomain", DOMAIN, "cluster.local",
            "The cluster's DNS domain, searched by ClusterFirst pods."),
    Setting("system_reserved", "system-reserved", "systemReserved", RESERVED, "none",
            "Resources held back from pods for the OS: cpu=100m,memory=200Mi,ephemeral-storage=1Gi,pid=1000."),
    Setting("kube_reserved", "kube-reserved", "kubeReserved", RESERVED, "none",
            "Resources held back from pods for Kubernetes daemons (same form as --system-reserved)."),
    Setting("allowed_unsafe_sysctls", "allowed-unsafe-sysctls", "allowedUnsafeSysctls", SYSCTLS, "none",
            "Comma-separated unsafe sysctls or patterns ending in '*' that pods may set."),
    Setting("node_status_update_frequency", "node-status-update-frequency", "nodeStatusUpdateFrequency",
            DURATION, "10s", "How often node status is computed, and posted when it changed."),
    Setting("node_status_report_frequency", None, "nodeStatusReportFrequency", DURATION, "5m0s",
            "Node status is posted at least this often even if unchanged. If only nodeStatusUpdateFrequency "
            "is set in the file, this defaults to it (as upstream)."),
    Setting("serialize_image_pulls", "serialize-image-pulls", "serializeImagePulls", BOOL, "true",
            "Pull images one at a time.", zero_is_default=False),
    Setting("healthz_port", "healthz-port", "healthzPort", PORT, "10248",
            "Port of the /healthz liveness endpoint; 0 disables it.", zero_is_default=False),
    Setting("healthz_bind_address", "healthz-bind-address", "healthzBindAddress", IP, "127.0.0.1",
            "Address the /healthz endpoint listens on."),
    Setting("log_verbosity", "v", "logging.verbosity", VERBOSITY, "0",
            "Log verbosity, klog's levels: 0 what an operator needs (start-up, the Node, failures), 1 probe "
            "failures, 2 each pod's watch events, sync decisions and container kills (upstream's SyncLoop lines), "
            "3 status patches, 4 debug (each sync's steps, library debug logs), 6 and above also asyncio's debug "
            "logs. The flag wins over the file's logging.verbosity (the kopflet command; under kopf run, Kopf's "
            "own options)."),
    # The rest of upstream's LoggingConfiguration (component-base logs/api/v1) and its flags.
    Setting("log_format", "logging-format", "logging.format", LOG_FORMAT, "text",
            "Sets the log format. Permitted formats: \"json\", \"text\". text: one line per message, "
            "\"[time] logger [LEVEL] message\"; json: one JSON object per line with upstream's keys (ts in "
            "milliseconds, logger, caller, msg, v, then key/values; errors have err instead of v)."),
    Setting("log_flush_frequency", "log-flush-frequency", "logging.flushFrequency", FLUSH_FREQUENCY, "5s",
            "Maximum time between log flushes (a duration; in the file also nanoseconds): how long info lines "
            "wait in the buffer of --log-text-info-buffer-size or --log-json-info-buffer-size; every other line is "
            "written at once. Zero (on the command line) or negative is refused, as upstream."),
    Setting("log_vmodule", "vmodule", "logging.vmodule", VMODULE, "none",
            "Comma-separated list of pattern=N settings for file-filtered logging (only works for text log "
            "format): a line logged from a source file whose base name without .py matches the glob pattern is "
            "written at verbosity N or -v, whichever is higher (klog's -vmodule; the first matching pattern wins; "
            "N=0 patterns are ignored). In the file a list of {filePattern, verbosity}; the flag's are added "
            "after the file's."),
    # logsapi.AddFlags' output routing flags, upstream's help first; the file's logging.options.{text,json}.
    Setting("log_text_split_stream", "log-text-split-stream", "logging.options.text.splitStream", BOOL, "false",
            "[Alpha] In text format, write error messages to stderr and info messages to stdout. The default is to "
            "write a single stream to stdout. Enable the LoggingAlphaOptions feature gate to use this. (kopflet "
            "command only. Info lines, V levels included, go to stdout and warnings and errors to stderr, as klog's "
            "router sends every line but an I line there; without it every line goes to stderr, as upstream writes "
            "it whatever its help says.)"),
    Setting("log_text_info_buffer_size", "log-text-info-buffer-size", "logging.options.text.infoBufferSize",
            INFO_BUFFER_SIZE, "0",
            "[Alpha] In text format with split output streams, the info messages can be buffered for a while to "
            "increase performance. The default value of zero bytes disables buffering. The size can be specified "
            "as number of bytes (512), multiples of 1000 (1K), multiples of 1024 (2Ki), or powers of those (3M, 4G, "
            "5Mi, 6Gi). Enable the LoggingAlphaOptions feature gate to use this. (kopflet command only. 1k, not 1K: "
            "upstream's quantity parser refuses K, as kopflet's does. Buffered "
            "lines are written when the next would not fit, every --log-flush-frequency and at exit; at most 2Gi, "
            "as upstream; a negative size, like zero, buffers nothing.)"),
    Setting("log_json_split_stream", "log-json-split-stream", "logging.options.json.splitStream", BOOL, "false",
            "[Alpha] In JSON format, write error messages to stderr and info messages to stdout. The default is to "
            "write a single stream to stdout. Enable the LoggingAlphaOptions feature gate to use this. (kopflet "
            "command only. Info lines and warnings (klog's Warning is an info line under this format) go to "
            "stdout, errors to stderr; without it every line goes to stderr, as upstream writes it whatever its "
            "help says.)"),
    Setting("log_json_info_buffer_size", "log-json-info-buffer-size", "logging.options.json.infoBufferSize",
            INFO_BUFFER_SIZE, "0",
            "[Alpha] In JSON format with split output streams, the info messages can be buffered for a while to "
            "increase performance. The default value of zero bytes disables buffering. The size can be specified "
            "as number of bytes (512), multiples of 1000 (1K), multiples of 1024 (2Ki), or powers of those (3M, 4G, "
            "5Mi, 6Gi). Enable the LoggingAlphaOptions feature gate to use this. (kopflet command only. 1k, not 1K: "
            "upstream's quantity parser refuses K, as kopflet's does. Buffered "
            "lines are written when the next would not fit, every --log-flush-frequency (at least every 30s, "
            "zap's own flush) and at exit; at most 2Gi, as upstream.)"),
    # The kubelet API server (HTTPS): logs, exec/attach/port-forward, pods, stats, metrics.
    Setting("address", "address", "address", IP, "0.0.0.0",
            "The IP address the kubelet API serves on (0.0.0.0 or :: for all interfaces)."),
    Setting("port", "port", "port", SERVER_PORT, "10250", "The port the kubelet API serves on."),
    # CIS 4.2.4: upstream's read-only HTTP port (10255) is unauthenticated; kopflet has none, and takes only 0.
    Setting("read_only_port", "read-only-port", "readOnlyPort", READ_ONLY_PORT, "0",
            "The read-only port: only 0 (disabled) is accepted, as kopflet serves no unauthenticated port "
            "(upstream's flag defaults to 10255 without --config; its config file field to 0)."),
    Setting("streaming_connection_idle_timeout", "streaming-connection-idle-timeout",
            "streamingConnectionIdleTimeout", TTL, "4h0m0s",
            "A proxied exec, attach or port-forward session with no bytes either way for this long is closed, both "
            "sides. 0 on the command line: no timeout (in the file 0 means the default). The runtime's streaming "
            "server has its own timeout too (containerd: stream_idle_timeout)."),
    Setting("event_record_qps", "event-qps", "eventRecordQPS", INT, "50",
            "Events created or updated per second, a token bucket of --event-burst (upstream's event client); more "
            "wait their turn (at most 1000 queued, the rest dropped). 0: no limit.", zero_is_default=False),
    Setting("event_burst", "event-burst", "eventBurst", INT, "100",
            "The most events written at once while --event-qps is above 0 (0 on the command line: client-go's "
            "default burst, 10)."),
    Setting("tls_cert_file", "tls-cert-file", "tlsCertFile", STRING, '""',
            "The kubelet API's x509 serving certificate (intermediates after it). Without it and "
            "--tls-private-key-file, a self-signed certificate and key are made once in --cert-dir."),
    Setting("tls_private_key_file", "tls-private-key-file", "tlsPrivateKeyFile", STRING, '""',
            "The private key of --tls-cert-file."),
    Setting("tls_cipher_suites", "tls-cipher-suites", "tlsCipherSuites", CIPHER_SUITES, "none",
            "Comma-separated cipher suites (Go's IANA names, e.g. TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256) the kubelet "
            "API offers to TLS 1.2 and older clients; upstream's insecure ones too, if the host's OpenSSL has them "
            "(else the API refuses to start). TLS 1.3 suites are accepted but cannot be restricted (as upstream); "
            "naming only those refuses TLS 1.2 clients. Empty: ECDHE with AES-GCM or ChaCha20-Poly1305 only "
            "(the CIS Benchmark's strong suites)."),
    Setting("tls_min_version", "tls-min-version", "tlsMinVersion", TLS_VERSION, "VersionTLS12",
            "The oldest TLS version the kubelet API accepts: VersionTLS10, VersionTLS11, VersionTLS12 or "
            "VersionTLS13. TLS 1.0 and 1.1 lower OpenSSL's security level to 0 for them to work."),
    Setting("cert_dir", "cert-dir", None, STRING, "<root-dir>/pki",
            "Where the self-signed kubelet.crt and kubelet.key are kept (unless --tls-cert-file), and the client "
            "certificates of --bootstrap-kubeconfig and rotateCertificates (kubelet-client-current.pem)."),
    Setting("client_ca_file", "client-ca-file", "authentication.x509.clientCAFile", STRING, '""',
            "CA bundle: a client certificate signed by it authenticates as its CommonName, with its "
            "Organizations as groups. Empty: no client certificates."),
    Setting("anonymous_auth", "anonymous-auth", "authentication.anonymous.enabled", BOOL, "false",
            "Requests without credentials are served as system:anonymous (group system:unauthenticated). "
            "False as in the KubeletConfiguration file; upstream's flag alone defaults to true.",
            zero_is_default=False),
    Setting("authentication_token_webhook", "authentication-token-webhook", "authentication.webhook.enabled",
            BOOL, "true", "Bearer tokens are checked with a TokenReview on the apiserver.", zero_is_default=False),
    Setting("authentication_token_webhook_cache_ttl", "authentication-token-webhook-cache-ttl",
            "authentication.webhook.cacheTTL", TTL, "2m0s", "How long TokenReview answers are cached."),
    Setting("authorization_mode", "authorization-mode", "authorization.mode", AUTHORIZATION_MODE, "Webhook",
            "Webhook (a SubjectAccessReview on nodes/<subresource> per request) or AlwaysAllow."),
    Setting("authorization_webhook_cache_authorized_ttl", "authorization-webhook-cache-authorized-ttl",
            "authorization.webhook.cacheAuthorizedTTL", TTL, "5m0s", "How long an allowed answer is cached."),
    Setting("authorization_webhook_cache_unauthorized_ttl", "authorization-webhook-cache-unauthorized-ttl",
            "authorization.webhook.cacheUnauthorizedTTL", TTL, "30s", "How long a denied answer is cached."),
    # Container log rotation (upstream container log manager).
    Setting("container_log_max_size", "container-log-max-size", "containerLogMaxSize", LOG_MAX_SIZE, "10Mi",
            "A container's log file is rotated once it is larger than this (a quantity, e.g. 10Mi)."),
    Setting("container_log_max_files", "container-log-max-files", "containerLogMaxFiles", LOG_MAX_FILES, "5",
            "The most log files kept per container, the current one included; at least 2.",
            zero_is_default=False),
    Setting("container_log_max_workers", None, "containerLogMaxWorkers", LOG_MAX_WORKERS, "1",
            "How many containers' logs are rotated concurrently.", zero_is_default=False),
    Setting("container_log_monitor_interval", None, "containerLogMonitorInterval", LOG_MONITOR_INTERVAL, "10s",
            "How often container log sizes are checked for rotation; at least 3s."),
    # Image garbage collection (upstream image GC manager).
    Setting("image_gc_high_threshold_percent", "image-gc-high-threshold", "imageGCHighThresholdPercent", PERCENT,
            "85", "Disk usage of the image filesystem (percent) from which image GC always runs; 100 disables it.",
            zero_is_default=False),
    Setting("image_gc_low_threshold_percent", "image-gc-low-threshold", "imageGCLowThresholdPercent", PERCENT,
            "80", "Disk usage (percent) image GC frees down to; must be less than --image-gc-high-threshold.",
            zero_is_default=False),
    Setting("image_minimum_gc_age", "minimum-image-ttl-duration", "imageMinimumGCAge", TTL, "2m0s",
            "Minimum age of an unused image before it is garbage collected."),
    Setting("image_maximum_gc_age", None, "imageMaximumGCAge", TTL, "0s",
            "An image unused for this long is removed whatever the disk usage; 0s: never."),
    # Container garbage collection (upstream's deprecated GC flags; command line only, as upstream).
    Setting("minimum_container_ttl_duration", "minimum-container-ttl-duration", None, TTL, "0s",
            "Minimum age of a dead container before it is garbage collected (deprecated upstream)."),
    Setting("maximum_dead_containers_per_container", "maximum-dead-containers-per-container", None, INT, "1",
            "Dead instances kept per container (deprecated upstream); they back lastState and logs --previous."),
    Setting("maximum_dead_containers", "maximum-dead-containers", None, INT, "-1",
            "Dead containers kept on the node in all; negative: no limit (deprecated upstream)."),
    # Node pressure and eviction (upstream eviction manager).
    Setting("eviction_hard", "eviction-hard", "evictionHard", LANGLE_MAP,
            "memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%,imagefs.available<15%,"
            "imagefs.inodesFree<5%",
            "Hard eviction thresholds (signal<quantity or percent): met, a pod is evicted at once. Setting them "
            "replaces the defaults unless mergeDefaultEvictionSettings.", zero_is_default=False),
    Setting("eviction_soft", "eviction-soft", "evictionSoft", LANGLE_MAP, "none",
            "Soft eviction thresholds: met for their grace period, a pod is evicted."),
    Setting("eviction_soft_grace_period", "eviction-soft-grace-period", "evictionSoftGracePeriod", STRING_MAP,
            "none", "Grace periods of the soft thresholds: memory.available=1m30s,..."),
    Setting("eviction_minimum_reclaim", "eviction-minimum-reclaim", "evictionMinimumReclaim", STRING_MAP, "none",
            "How much beyond a met threshold is reclaimed: imagefs.available=2Gi,..."),
    Setting("eviction_pressure_transition_period", "eviction-pressure-transition-period",
            "evictionPressureTransitionPeriod", TTL, "5m0s",
            "How long a pressure condition stays after its threshold was last met."),
    Setting("eviction_max_pod_grace_period", "eviction-max-pod-grace-period", "evictionMaxPodGracePeriod", INT,
            "0", "The most grace (seconds) a soft eviction gives a pod; 0 or negative: the pod's own."),
    Setting("merge_default_eviction_settings", None, "mergeDefaultEvictionSettings", BOOL, "false",
            "The default hard thresholds fill in the signals evictionHard leaves out."),
    # Local ephemeral storage isolation (upstream kubelet.go supportLocalStorageCapacityIsolation). Upstream's
    # flag is deprecated in favour of the field, as every KubeletConfiguration flag; kopflet takes both.
    Setting("local_storage_capacity_isolation", "local-storage-capacity-isolation", "localStorageCapacityIsolation",
            BOOL, "true",
            "Local ephemeral storage isolation: the Node reports ephemeral-storage capacity and allocatable (so pods "
            "requesting it fit), and a pod over an emptyDir sizeLimit or its ephemeral-storage limits is evicted. "
            "Off: neither, nor does the Ready condition need ephemeral-storage capacity; for hosts where the root "
            "filesystem's usage cannot be measured (upstream names rootless kind).", zero_is_default=False),
    # Volume stats (upstream's fsResourceAnalyzer: kubelet.go NewResourceAnalyzer(VolumeStatsAggPeriod)).
    Setting("volume_stats_agg_period", "volume-stats-agg-period", "volumeStatsAggPeriod", ANY_DURATION, "1m0s",
            "How long a pod's volume measurements (a du of each emptyDir, configMap, secret, downwardAPI and "
            "projected volume, for /stats/summary and the local storage evictions) are reused before they are "
            "taken again. 0 or negative: volumes are not measured (in the file, 0 means the default), so neither "
            "the summary nor the emptyDir sizeLimit evictions see them, as upstream."),
    # Swap (upstream memorySwap, NodeSwap locked on: kuberuntime configureContainerSwapResources).
    Setting("memory_swap_behavior", None, "memorySwap.swapBehavior", SWAP_BEHAVIOR, "NoSwap",
            "NoSwap (or empty, the same): containers get no swap where the node has a swap controller (cgroup v1 "
            "memory.memsw.limit_in_bytes: the memory+swap limit equals the memory limit; cgroup v2 "
            "memory.swap.max: 0). LimitedSwap is refused: kopflet does not implement it."),
    # Graceful node shutdown (upstream's node shutdown manager, pkg/kubelet/nodeshutdown). Config-file fields
    # only, as upstream.
    Setting("shutdown_grace_period", None, "shutdownGracePeriod", SHUTDOWN_GRACE_PERIOD, "0s",
            "How long a node shutdown is delayed (a systemd-logind delay inhibitor lock; logind's InhibitDelayMaxSec "
            "is raised to it when lower) for the pods to be terminated: the pods below priority 2000000000 first, "
            "given this less shutdownGracePeriodCriticalPods, then the critical ones, given "
            "shutdownGracePeriodCriticalPods (a pod's shorter terminationGracePeriodSeconds is kept). Meanwhile the "
            "node is not Ready and refuses new pods (NodeShutdown), and each pod ends Failed with reason Terminated. "
            "0s: off. Zero or at least 1s."),
    Setting("shutdown_grace_period_critical_pods", None, "shutdownGracePeriodCriticalPods", SHUTDOWN_GRACE_PERIOD,
            "0s", "The part of shutdownGracePeriod kept for the critical pods (priority 2000000000 and up: "
            "system-cluster-critical, system-node-critical), terminated last. At most shutdownGracePeriod; zero or "
            "at least 1s."),
    Setting("shutdown_grace_period_by_pod_priority", None, "shutdownGracePeriodByPodPriority", SHUTDOWN_BY_PRIORITY,
            "none", "Shutdown grace periods by pod priority, instead of shutdownGracePeriod and "
            "shutdownGracePeriodCriticalPods (not both): a list of {priority, shutdownGracePeriodSeconds}. A pod "
            "gets the period of the highest priority at or below its own (the lowest one's when it is below all); "
            "the groups are terminated from the lowest priority up, each waited for at most its period, and the "
            "shutdown is delayed by the sum of the periods."),
    # The crash-loop backoff's cap (upstream KubeletCrashLoopBackOffMax, on by default: newCrashLoopBackOff).
    Setting("max_container_restart_period", None, "crashLoopBackOff.maxContainerRestartPeriod", MAX_RESTART_PERIOD,
            "5m0s", "The crash-loop backoff's cap: only 5m0s, kopflet's (and upstream's default); upstream's range "
            "is 1s to 300s, but kopflet cannot change its cap yet, so other values are refused.",
            zero_is_default=False),
    # Tracing (upstream KubeletTracing, GA: component-base's TracingConfiguration, config file only): kopflet traces
    # each pod start (kopflet/tracing), not each sync.
    Setting("tracing_endpoint", None, "tracing.endpoint", TRACING_ENDPOINT, '"localhost:4317"',
            "The OpenTelemetry collector (OTLP over gRPC, without TLS, as upstream) the pod start traces are sent "
            "to: host:port, or a gRPC target with the dns, unix or unix-abstract scheme."),
    Setting("tracing_sampling_rate_per_million", None, "tracing.samplingRatePerMillion", SAMPLING_RATE, "0",
            "How many pod starts in a million are traced (0 to 1000000; upstream's TraceIDRatioBased on the trace "
            "id). Each traced start is a podStart span with a span per step: admission, volumes, the CRI calls by "
            "their gRPC names (runtime.v1.RuntimeService/RunPodSandbox, runtime.v1.ImageService/PullImage, "
            "CreateContainer, StartContainer) and untilReady, service.name kubelet. 0: nothing is traced."),
    # The pods' cgroups (upstream KubeletConfiguration CgroupRoot, CgroupsPerQOS, CgroupDriver).
    Setting("cgroup_root", "cgroup-root", "cgroupRoot", STRING, '""',
            "The cgroup the pods go under: their kubepods cgroup is <cgroup-root>/kubepods (/custom: /custom/kubepods; "
            "with the systemd driver /custom.slice/custom-kubepods.slice). It must exist in every cgroup hierarchy. "
            "Empty: the root cgroup (/kubepods). Without --cgroups-per-qos, the cgroup whose cpu shares, memory and "
            "pids limits are set to the whole node (empty: none)."),
    Setting("cgroups_per_qos", "cgroups-per-qos", "cgroupsPerQOS", BOOL, "true",
            "Create the QoS cgroup hierarchy: kubepods, kubepods/burstable and kubepods/besteffort, and a cgroup per "
            "pod with its pod-level limits. Off: none of them (sandboxes get no cgroup parent, the runtime's "
            "default; pod cgroup resizes and QoS updates are skipped), and --enforce-node-allocatable must be "
            "empty or 'none'.", zero_is_default=False),
    Setting("cgroup_driver", "cgroup-driver", "cgroupDriver", STRING, '"cgroupfs"',
            "How cgroups are named: 'cgroupfs' (/kubepods/burstable/pod<uid>) or 'systemd' (slices: "
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid with _ for ->.slice). A runtime "
            "that tells its own driver (CRI RuntimeConfig, containerd 2.0 and later) overrides it. The systemd "
            "driver needs systemd running as the init system: the agent does not start otherwise."),
    Setting("enforce_node_allocatable", "enforce-node-allocatable", "enforceNodeAllocatable", ENFORCEMENTS, "[pods]",
            "Comma-separated levels at which node allocatable is enforced: 'pods' holds every pod together to "
            "capacity less --system-reserved and --kube-reserved (the limits on the kubepods cgroup, and the "
            "allocatableMemory.available eviction signal); 'none' or empty: no enforcement. 'system-reserved' and "
            "'kube-reserved' need their cgroups, which kopflet does not manage."),
    # Feature gates (upstream --feature-gates): the ones kopflet implements, others only at their default; QoS-level
    # memory reservations (upstream qosReserved, behind the QOSReserved gate: cm/qos_container_manager_linux.go
    # setMemoryReserve).
    Setting("feature_gates", "feature-gates", "featureGates", FEATURE_GATES, "none",
            "Feature gates as Name=true|false pairs, comma separated (in the file a mapping of names to booleans); "
            "the flag's are merged over the file's, as upstream. kopflet implements three gates: QOSReserved (alpha, "
            "default false: qosReserved), LoggingAlphaOptions (alpha, default false: the logging.options and "
            "--log-*-split-stream, --log-*-info-buffer-size) and LoggingBetaOptions (beta, default true: the json "
            "logging format), and SystemdWatchdog's behaviour (GA, locked to true: the systemd "
            "watchdog, on whenever the unit sets WatchdogSec) and GracefulNodeShutdown's and "
            "GracefulNodeShutdownBasedOnPodPriority's at their default, true (beta: graceful node shutdown, "
            "shutdownGracePeriod and shutdownGracePeriodByPodPriority). Any other gate upstream v1.37.1 knows is "
            "accepted only at that release's default, as a no-op (kopflet behaves as upstream does with it at its "
            "default; logged at start); set "
            "to the other value it stops the agent at start: 'cannot set feature gate <name> to <value>, feature "
            "is locked to <default>' (upstream's message) for a gate locked to its default, else that kopflet "
            "does not implement its non-default behaviour. A name upstream does not know either stops it with "
            "'unrecognized feature gate: <name>' (upstream's message)."),
    Setting("qos_reserved", "qos-reserved", "qosReserved", QOS_RESERVED_MAP, "none",
            "memory=<N>% (N from 0 to 100; only memory, as upstream): with the QOSReserved feature gate on, the "
            "burstable QoS cgroup's memory limit is the node's allocatable memory (capacity less --system-reserved "
            "and --kube-reserved memory) less N% of the Guaranteed pods' memory requests, and the besteffort one's "
            "that less N% of the Burstable pods' requests, so lower classes cannot use what higher ones requested. "
            "Updated every minute and before each new pod cgroup; a tier using more than its new limit is held at "
            "its usage. With the gate off it is ignored, with a warning at start (upstream ignores it silently)."),
    # The CPU manager (upstream pkg/kubelet/cm/cpumanager).
    Setting("cpu_manager_policy", "cpu-manager-policy", "cpuManagerPolicy", STRING, '"none"',
            "CPU manager policy: 'none' or 'static' (a Guaranteed pod's containers with integer CPU requests get "
            "exclusive CPUs and no CFS quota, every other container the shared pool; needs a CPU reservation: "
            "--kube-reserved or "
            "--system-reserved cpu, or --reserved-cpus). A policy change needs <root-dir>/cpu_manager_state "
            "removed (drain the node first)."),
    Setting("cpu_manager_policy_options", "cpu-manager-policy-options", "cpuManagerPolicyOptions", POLICY_OPTIONS,
            "none", "key=value options of the static policy, one per flag: full-pcpus-only=true (whole physical "
            "cores only), strict-cpu-reservation=true (the reserved CPUs leave the shared pool)."),
    Setting("cpu_manager_reconcile_period", "cpu-manager-reconcile-period", "cpuManagerReconcilePeriod", DURATION,
            "10s", "How often the CPU manager updates running containers' cpusets when the shared pool changed "
            "and releases the CPUs of containers gone."),
    Setting("reserved_system_cpus", "reserved-cpus", "reservedSystemCPUs", STRING, '""',
            "CPUs kept for the system and Kubernetes daemons, as a cpuset (0-1,6); their count replaces the cpu of "
            "--system-reserved and --kube-reserved."),
    # The memory manager and the topology manager (upstream pkg/kubelet/cm/memorymanager, topologymanager).
    Setting("memory_manager_policy", "memory-manager-policy", "memoryManagerPolicy", STRING, '"None"',
            "Memory manager policy: 'None' or 'Static' (a Guaranteed pod's containers get their memory and hugepages "
            "on NUMA nodes chosen with the topology manager, and cpuset.mems keeping them there; needs "
            "--reserved-memory). A policy change needs <root-dir>/memory_manager_state removed (drain the node "
            "first)."),
    Setting("reserved_memory", "reserved-memory", "reservedMemory", RESERVED_MEMORY, "none",
            "Memory reserved per NUMA node, e.g. '0:memory=1Gi,hugepages-2Mi=2Gi', several nodes separated by ';' "
            "or in repeated flags. With the Static memory policy the total per type must equal --system-reserved "
            "+ --kube-reserved + the hard memory.available eviction threshold."),
    Setting("topology_manager_policy", "topology-manager-policy", "topologyManagerPolicy", STRING, '"none"',
            "Topology manager policy: 'none', 'best-effort' (align the CPU and memory managers' NUMA placements when "
            "possible), 'restricted' (reject a pod whose placement cannot be the narrowest possible) or "
            "'single-numa-node' (reject a pod that cannot have all on one NUMA node), with reason "
            "TopologyAffinityError."),
    Setting("topology_manager_scope", "topology-manager-scope", "topologyManagerScope", STRING, '"container"',
            "What the topology manager aligns: each 'container' apart, or the whole 'pod' together."),
    Setting("topology_manager_policy_options", "topology-manager-policy-options", "topologyManagerPolicyOptions",
            STRING_MAP, "none",
            "key=value options of the topology manager policy: prefer-closest-numa-nodes=true (of equally wide "
            "placements, the NUMA nodes closest to each other), max-allowable-numa-nodes=<n> (default 8: more NUMA "
            "nodes refuse to start)."),
    # One agent per node (upstream's flags only, no config-file field: cmd/kubelet/app/options KubeletFlags).
    Setting("lock_file", "lock-file", None, STRING, '""',
            "A file the agent holds an exclusive lock (flock) on while it runs; a second agent given the same file "
            "waits until the first is gone. Empty: no lock."),
    Setting("exit_on_lock_contention", "exit-on-lock-contention", None, BOOL, "false",
            "Stop (leaving pods running) when another process opens --lock-file, e.g. a new agent starting; "
            "needs --lock-file."),
    # Policy hooks: kopflet's own flags (no upstream kubelet has them), no config-file field (the file is upstream's
    # KubeletConfiguration).
    Setting("hooks", "hooks", None, HOOK_MODULES, "none",
            "kopflet only: comma-separated policy hook modules to load at start, in order: package.module (its "
            "@hooks.admit, @hooks.plan and @hooks.observe functions), package.module:attribute (a "
            "kopflet.hooks.Registry) or /path/to/file.py; repeated flags append. A module that cannot be imported "
            "stops the start. See docs/extending.md."),
    Setting("hook_entry_points", "hook-entry-points", None, BOOL, "true",
            "kopflet only: also load the policy hooks of the installed packages' entry points of group "
            "kopflet.hooks (each names a module or a module:Registry), after --hooks, by entry point name."),
    # Kernel tunables (upstream containerManagerImpl.setupNode: setupKernelTunables).
    Setting("fail_cgroup_v1", "fail-cgroupv1", "failCgroupV1", BOOL, "false",
            "Refuse to start on a host using cgroup v1, with upstream's error. Upstream v1.37 defaults to true; "
            "kopflet to false, so it keeps running on the cgroup v1 hosts upstream's kubelet needs false for "
            "(kubeadm's own instructions on cgroup v1: false, and its SystemVerification preflight check skipped)."),
    # The kubelet API's /logs/ (upstream InstallSystemLogHandler, kubelet.go Run's logServer, the NodeLogQuery gate:
    # GA and locked on at v1.37.1). Config-file fields only, as upstream.
    Setting("enable_system_log_handler", None, "enableSystemLogHandler", BOOL, "true",
            "Serve the node's log files under /var/log on the kubelet API's /logs/ (kubectl get --raw through the "
            "apiserver's node proxy, path logs/<path>), to callers allowed nodes/log. Off: /logs/ answers 405 "
            "\"logs endpoint is disabled.\".", zero_is_default=False),
    Setting("enable_system_log_query", None, "enableSystemLogQuery", BOOL, "false",
            "The node log query: /logs/?query=<service> streams journalctl's entries of that unit (or its log file "
            "under /var/log when journald has none), with sinceTime, untilTime, tailLines, pattern and boot; "
            "/logs/?query=<file> a file under /var/log. Needs enableSystemLogHandler.", zero_is_default=False),
    Setting("protect_kernel_defaults", "protect-kernel-defaults", "protectKernelDefaults", BOOL, "false",
            "Refuse to start when vm.overcommit_memory, vm.panic_on_oom, kernel.panic, kernel.panic_on_oops, "
            "kernel.keys.root_maxkeys or kernel.keys.root_maxbytes differ from the kubelet's values (1, 0, 10, 1, "
            "1000000, 25000000). Off: the agent sets them to those values at start."),
    # seccomp (upstream: the flag is a KubeletFlags field apart from the config file's, and either turns it on).
    Setting("seccomp_default", None, "seccompDefault", BOOL, "false",
            "Containers that set no seccomp profile (nor their pod) run with the runtime's default profile "
            "(RuntimeDefault) instead of Unconfined. --seccomp-default does the same; either one turns it on.",
            zero_is_default=False),
    Setting("seccomp_default_flag", "seccomp-default", None, BOOL, "false",
            "The same as the config file's seccompDefault (upstream keeps the flag apart from the file's field: "
            "with either one true, RuntimeDefault is the default seccomp profile)."),
)

_BY_FLAG = {s.flag: s for s in SETTINGS if s.flag}
_BY_FIELD = {s.field: s for s in SETTINGS if s.field}
# Nested structs of the file (authentication, authentication.x509 ...): dotted paths of the mappings that hold fields.
_GROUPS = frozenset(".".join(s.field.split(".")[:i]) for s in SETTINGS if s.field
                    for i in range(1, s.field.count(".") + 1))
_SHORTHANDS = {"v": "v"}

# The older environment variables, below flags and the file.
LEGACY_ENV: Mapping[str, tuple[str, Callable[[str], Any]]] = MappingProxyType({
    "CONTAINER_RUNTIME_ENDPOINT": ("runtime_endpoint", _endpoint),
    "KOPFLET_RUNTIME_REQUEST_TIMEOUT": ("runtime_request_timeout", _seconds_or_duration),
    "KOPFLET_NODE_IP": ("node_ip", _node_ip),
    "KOPFLET_ROOT_DIR": ("root_dir", _absolute_path),
    "KOPFLET_CLUSTER_DNS": ("cluster_dns", _ips),
    "KOPFLET_CLUSTER_DOMAIN": ("cluster_domain", _domain),
})
LEGACY_NODE_NAME_ENV = "KOPFLET_NODE_NAME"
# upstream's error for --exit-on-lock-contention without --lock-file (cmd/kubelet/app/server.go run).
LOCK_CONTENTION_WITHOUT_FILE = "cannot exit on lock file contention: no lock file specified"
# upstream ValidateKubeletConfiguration's refusal of runOnce (%v of the bool: always "true" here).
RUN_ONCE_DEPRECATED = ("invalid configuration: runOnce (--runOnce) true, Runonce mode has been deprecated and should "
                       "not be set")
# Upstream runs without an apiserver (standalone) when --kubeconfig is empty and then ignores these; kopflet logs in
# some other way then (in-cluster, $KUBECONFIG), so it refuses them rather than ignore them.
BOOTSTRAP_WITHOUT_KUBECONFIG = ("--bootstrap-kubeconfig needs --kubeconfig: the path the kubeconfig naming the node's "
                                "client certificate is written to")
ROTATION_WITHOUT_KUBECONFIG = ("rotateCertificates (--rotate-certificates) needs --kubeconfig: the credentials whose "
                               "client certificate is renewed")
CONFIG_ENV = "KOPFLET_CONFIG"  # the config file when --config is not given (the dev stack sets it)

# Every field of the upstream KubeletConfiguration v1beta1 (staging/src/k8s.io/kubelet/config/v1beta1/types.go)
# that kopflet does not honour: setting one is an error, not a silent no-op.
UNSUPPORTED_FIELDS = frozenset({
    "enableServer",
    "tlsCurvePreferences",
    "registryPullQPS",
    "registryBurst", "imagePullCredentialsVerificationPolicy", "preloadedImagesVerificationAllowlist",
    "enableDebuggingHandlers", "enableContentionProfiling", "oomScoreAdj",
    "nodeLeaseDurationSeconds", "kubeletCgroups",
    "systemCgroups", "singleProcessOOMKill",
    "draManagerReconcilePeriod", "hairpinMode",
    "podCIDR", "resolvConf", "cpuCFSQuota", "cpuCFSQuotaPeriod", "nodeStatusMaxImages",
    "maxOpenFiles", "contentType", "kubeAPIQPS", "kubeAPIBurst", "maxParallelImagePulls",
    "podsPerCore", "enableControllerAttachDetach",
    "makeIPTablesUtilChains", "iptablesMasqueradeBit", "iptablesDropBit",
    "failSwapOn", "defaultPodSysctls",
    "showHiddenMetricsForVersion", "systemReservedCgroup", "kubeReservedCgroup",
    "volumePluginDir", "providerID", "kernelMemcgNotification",
    "enableProfilingHandler",
    "enableDebugFlagsHandler", "memoryThrottlingFactor", "memoryReservationPolicy",
    "registerNode", "userNamespaces",
})


# ---------------------------------------------------------------------------------------------------------------
# Sources.

def _suggest(name: str, candidates: Sequence[str], prefix: str = "") -> str:
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.75)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""


def split_args(text: str) -> list[str]:
    """``KOPFLET_ARGS``: the flags as one shell-quoted string."""
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise ConfigError(f"{ARGS_ENV}: cannot split {_show(text)} like a shell: {exc}") from None


def parse_flags(argv: Sequence[str]) -> dict[str, Any]:
    """The command line as pflag reads it: ``--name=value``, ``--name value``, bare ``--bool``, ``-v 4``/``-v=4``."""
    values: dict[str, Any] = {}
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            if i < len(args):
                raise ConfigError(f"unexpected argument {_show(args[i])}: kopflet takes flags only")
            break
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            shown = f"--{name}"
        elif arg.startswith("-") and len(arg) > 1:
            short, rest = arg[1], arg[2:]
            if short not in _SHORTHANDS:
                raise ConfigError(f"unknown shorthand flag: {_show(short)} in {arg}" + _suggest(
                    arg.lstrip("-"), sorted(_BY_FLAG), "--"))
            name, shown = _SHORTHANDS[short], f"-{short}"
            eq, value = ("=", rest.removeprefix("=")) if rest else ("", "")
        else:
            raise ConfigError(f"unexpected argument {_show(arg)}: kopflet takes flags only")
        setting = _BY_FLAG.get(name)
        if setting is None:
            raise ConfigError(f"unknown flag: {shown}" + _suggest(name, sorted(_BY_FLAG), "--"))
        if not eq:
            if setting.kind.is_bool:
                value = "true"
            elif i < len(args):
                value = args[i]
                i += 1
            else:
                raise ConfigError(f"flag needs an argument: {shown}")
        if value == "" and setting.kind.empty_is_unset:
            values.pop(setting.attr, None)
            continue
        try:
            parsed = setting.kind.from_text(value)
        except _Invalid as exc:
            raise ConfigError(f"{shown}: {exc}") from None
        if setting.kind.accumulate is not None and setting.attr in values:
            parsed = setting.kind.accumulate(values[setting.attr], parsed)
        values[setting.attr] = parsed
    return values


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key twice in one mapping (sigs.k8s.io/yaml's strict decoding does too)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        try:
            duplicate = key in seen
        except TypeError:
            continue  # unhashable: construct_mapping reports it
        if duplicate:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate field {_show(key)}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_config_file(path: str, text: str) -> dict[str, Any]:
    """A KubeletConfiguration document -> {attribute: value}; every problem found is in one ConfigError."""
    return _config_values(f"config file {path}", _config_body(path, text))


def _config_body(path: str, text: str) -> Mapping[Any, Any]:
    """The one KubeletConfiguration mapping of a ``--config`` file, its apiVersion and kind checked."""
    where = f"config file {path}"
    try:
        documents = [doc for doc in yaml.load_all(text, Loader=_StrictLoader) if doc is not None]
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML: {exc}") from None
    if len(documents) != 1:
        raise ConfigError(f"{where}: expected one {CONFIG_KIND} document, found {len(documents)}")
    body = documents[0]
    if not isinstance(body, Mapping):
        raise ConfigError(f"{where}: expected a {CONFIG_KIND} mapping, got {_show(body)}")
    if body.get("apiVersion") != CONFIG_API_VERSION:
        raise ConfigError(f"{where}: apiVersion must be {_show(CONFIG_API_VERSION)}, "
                          f"got {_show(body.get('apiVersion'))}")
    if body.get("kind") != CONFIG_KIND:
        raise ConfigError(f"{where}: kind must be {_show(CONFIG_KIND)}, got {_show(body.get('kind'))}")
    return body


def _config_values(where: str, body: Mapping[Any, Any], *, ignore_unknown: bool = False) -> dict[str, Any]:
    values: dict[str, Any] = {}
    problems: list[str] = []
    _read_fields(body, "", values, problems, ignore_unknown=ignore_unknown)
    if len(problems) == 1:
        raise ConfigError(f"{where}: {problems[0]}")
    if problems:
        raise ConfigError(f"{where}: {len(problems)} problems:\n  " + "\n  ".join(problems))
    return values


def unsupported_fields(body: Mapping[Any, Any], prefix: str = "") -> list[str]:
    """The fields of a document (set, not null) that kopflet does not honour, by their dotted names."""
    found: list[str] = []
    for key, raw in body.items():
        name = f"{prefix}{key}"
        if raw is None:
            continue
        if name in _GROUPS and isinstance(raw, Mapping):
            found.extend(unsupported_fields(raw, f"{name}."))
        elif name in UNSUPPORTED_FIELDS:
            found.append(name)
    return found


def _dropin_check(document: Mapping[str, Any]) -> str | None:
    """kopflet's own refusal in a drop-in: a field it would not honour (upstream takes it)."""
    found = unsupported_fields(document)
    return (f"field {_show(found[0])} is not supported by kopflet (it would have no effect); remove it"
            if found else None)


def merge_config_dir(config_body: Mapping[str, Any] | None, config_dir: str, read_dir: dropins.ReadDir,
                     read_file: Callable[[str], str], cwd: str) -> dict[str, Any]:
    """``--config-dir``: the drop-ins merged onto the ``--config`` document (upstream mergeKubeletConfigurations),
    then read as one configuration. Unknown fields in a drop-in are dropped, as upstream's encoding/json drops
    them; a wrongly typed value is upstream's unmarshal error of the merged configuration."""
    base = dropins.merge_base(None if config_body is None else {str(k): v for k, v in config_body.items()})
    try:
        merged, _skipped = dropins.merge(base, config_dir, read_dir, read_file, cwd, check=_dropin_check)
    except dropins.DropInError as exc:
        raise ConfigError(str(exc)) from None
    return _config_values("failed to merge kubelet configs: failed to unmarshal merged JSON into kubelet "
                          "configuration", merged, ignore_unknown=True)


def _read_fields(body: Mapping[Any, Any], prefix: str, values: dict[str, Any], problems: list[str], *,
                 ignore_unknown: bool = False) -> None:
    """The fields of one mapping of the file into ``values``; nested structs (``authentication.x509``) recurse.

    Fields are named by their dotted path (``authentication.webhook.cacheTTL``) in messages and in SETTINGS.
    """
    for key, raw in body.items():
        if not prefix and key in ("apiVersion", "kind"):
            continue
        name = f"{prefix}{key}"
        if isinstance(key, str) and name in _GROUPS:
            if raw is None:
                continue
            if not isinstance(raw, Mapping):
                problems.append(f"field {_show(name)}: expected a mapping, got {_show(raw)}")
                continue
            _read_fields(raw, f"{name}.", values, problems, ignore_unknown=ignore_unknown)
            continue
        setting = _BY_FIELD.get(name) if isinstance(key, str) else None
        if setting is None:
            if name in UNSUPPORTED_FIELDS:
                problems.append(f"field {_show(name)} is not supported by kopflet (it would have no effect); "
                                f"remove it")
            elif ignore_unknown:
                pass  # a drop-in's unknown field: upstream's encoding/json unmarshal drops it
            else:
                problems.append(f"unknown field {_show(name)}" + _suggest(name, sorted({*_BY_FIELD, *_GROUPS})))
            continue
        if raw is None:
            continue
        if setting.kind.from_yaml is None:  # pragma: no cover - every Setting with a field has one
            raise AssertionError(f"{name} has no YAML reader")
        try:
            value = setting.kind.from_yaml(raw)
        except _Invalid as exc:
            problems.append(f"field {_show(name)}: {exc}")
            continue
        if setting.zero_is_default and isinstance(value, int | float | str) and not value:
            continue
        values[setting.attr] = value


def parse_legacy_env(environ: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name, (attr, parse) in LEGACY_ENV.items():
        text = environ.get(name, "")
        if not text:
            continue
        try:
            values[attr] = parse(text)
        except _Invalid as exc:
            raise ConfigError(f"{name}: {exc}") from None
    return values


def _node_name(flag: str | None, environ: Mapping[str, str], hostname: str) -> str:
    candidates = [("--hostname-override", flag), (NODE_NAME_ENV, environ.get(NODE_NAME_ENV)),
                  (LEGACY_NODE_NAME_ENV, environ.get(LEGACY_NODE_NAME_ENV)), ("the hostname", hostname)]
    source, raw = next(((s, v) for s, v in candidates if v and v.strip()), ("the hostname", hostname))
    name = (raw or "").strip().lower()
    if not validation.is_dns1123_subdomain(name):
        raise ConfigError(f"{source}: {_show(raw)} is not a valid node name "
                          f"(a lowercase RFC 1123 subdomain of at most 253 characters)")
    return name


def load(argv: Sequence[str], environ: Mapping[str, str], hostname: str,
         read_file: Callable[[str], str], read_dir: dropins.ReadDir | None = None, cwd: str = "/") -> AgentConfig:
    """The agent's configuration: flags > ``--config-dir`` drop-ins > ``--config`` file > legacy environment
    variables > defaults.

    ``read_file(path)`` returns a file's text (or raises OSError); it is called for ``--config`` and the drop-ins.
    ``read_dir(path)`` lists a directory (see :data:`dropins.ReadDir`), for ``--config-dir`` only; ``cwd`` is the
    working directory relative drop-in paths are shown against (upstream's filepath.Abs).
    """
    flags = parse_flags(argv)
    file_values: dict[str, Any] = {}
    flag_path = flags.pop("_config", "")
    config_dir = flags.pop("_config_dir", "")
    path, source = (flag_path, "--config") if flag_path else (environ.get(CONFIG_ENV, ""), CONFIG_ENV)
    config_body: Mapping[Any, Any] | None = None
    if path:
        try:
            text = read_file(path)
        except OSError as exc:
            raise ConfigError(f"{source} {path}: cannot read it: {exc.strerror or exc}") from None
        config_body = _config_body(path, text)
        file_values = _config_values(f"config file {path}", config_body)
    if config_dir:
        if read_dir is None:
            raise ConfigError(f"--config-dir {config_dir}: no way to list a directory here")
        file_values = merge_config_dir(config_body, config_dir, read_dir, read_file, cwd)
    env_values = parse_legacy_env(environ)

    values: dict[str, Any] = {**env_values, **file_values, **flags}
    if "feature_gates" in file_values and "feature_gates" in flags:
        # upstream kubeletConfigFlagPrecedence: the file's gates stay unless a flag sets the same gate
        values["feature_gates"] = _merge_gates(file_values["feature_gates"], flags["feature_gates"])
    if "log_vmodule" in file_values and "log_vmodule" in flags:
        # upstream kubeletConfigFlagPrecedence re-parses the flags onto the file's struct: --vmodule appends
        values["log_vmodule"] = file_values["log_vmodule"] + flags["log_vmodule"]
    gates = values.get("feature_gates", {})
    logging_errors = log_options.validate(
        values.get("log_format", AgentConfig.log_format), values.get("log_vmodule", AgentConfig.log_vmodule),
        _format_options(values),
        alpha_options=feature_gates.enabled(gates, feature_gates.LOGGING_ALPHA_OPTIONS),
        beta_options=feature_gates.enabled(gates, feature_gates.LOGGING_BETA_OPTIONS))
    if logging_errors:  # upstream's ValidateAndApplyAsField: its ErrorList as one aggregate error
        raise ConfigError("invalid configuration: " + (logging_errors[0] if len(logging_errors) == 1 else
                                                       "[" + ", ".join(logging_errors) + "]"))
    values["node_name"] = _node_name(flags.get("node_name"), environ, hostname)
    values.setdefault("image_endpoint", values.get("runtime_endpoint", DEFAULT_RUNTIME_ENDPOINT))
    if "node_status_report_frequency" not in values and "node_status_update_frequency" in file_values:
        # v1beta1 defaulting: an explicit nodeStatusUpdateFrequency in the file is also the report default.
        values["node_status_report_frequency"] = file_values["node_status_update_frequency"]
    low = values.get("image_gc_low_threshold_percent", AgentConfig.image_gc_low_threshold_percent)
    high = values.get("image_gc_high_threshold_percent", AgentConfig.image_gc_high_threshold_percent)
    if low >= high:
        raise ConfigError(f"invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) {low} must "
                          f"be less than imageGCHighThresholdPercent (--image-gc-high-threshold) {high}")
    min_age = values.get("image_minimum_gc_age", AgentConfig.image_minimum_gc_age)
    max_age = values.get("image_maximum_gc_age", AgentConfig.image_maximum_gc_age)
    if max_age > 0 and max_age <= min_age:
        raise ConfigError(f"invalid configuration: imageMaximumGCAge {gotext.go_duration(max_age)} must be greater "
                          f"than imageMinimumGCAge {gotext.go_duration(min_age)}")
    event_errors = _event_limit_errors(values)
    if event_errors:
        raise ConfigError(event_errors[0] if len(event_errors) == 1 else
                          "[" + ", ".join(event_errors) + "]")  # upstream's aggregate error
    if values.get("run_once"):
        raise ConfigError(RUN_ONCE_DEPRECATED)  # upstream ValidateKubeletConfiguration, after the merge
    cpu_manager_error = _cpu_manager_error(values)
    if cpu_manager_error:
        raise ConfigError(cpu_manager_error)
    memory_manager_error = _memory_manager_error(values)
    if memory_manager_error:
        raise ConfigError(memory_manager_error)
    shutdown_errors = _shutdown_errors(values)
    if shutdown_errors:
        raise ConfigError(shutdown_errors[0] if len(shutdown_errors) == 1 else
                          "[" + ", ".join(shutdown_errors) + "]")  # upstream's aggregate error
    try:
        AgentConfig(node_name="-", **{k: v for k, v in values.items() if k.startswith(("eviction_", "merge_"))}) \
            .eviction_config  # noqa: B018 (parses the thresholds: upstream ParseThresholdConfig at start)
    except thresholds.ThresholdError as exc:
        raise ConfigError(f"invalid eviction thresholds: {exc}") from None
    if bool(values.get("tls_cert_file")) != bool(values.get("tls_private_key_file")):
        raise ConfigError("--tls-cert-file (tlsCertFile) and --tls-private-key-file (tlsPrivateKeyFile) must be "
                          "given together, or neither for a self-signed certificate in --cert-dir")
    enforcement_errors = node_allocatable.validate_enforcement(
        values.get("enforce_node_allocatable", AgentConfig.enforce_node_allocatable),
        cgroups_per_qos=values.get("cgroups_per_qos", AgentConfig.cgroups_per_qos))
    if enforcement_errors:
        raise ConfigError(enforcement_errors[0] if len(enforcement_errors) == 1 else
                          "[" + ", ".join(enforcement_errors) + "]")  # upstream's aggregate error
    cgroup_error = _cgroup_error(values)
    if cgroup_error:
        raise ConfigError(cgroup_error)
    strategy = values.get("config_map_and_secret_strategy", AgentConfig.config_map_and_secret_strategy)
    if strategy == "Cache":
        raise ConfigError('configMapAndSecretChangeDetectionStrategy "Cache" is not supported by kopflet (upstream\'s '
                          'TTL cache); use "Watch" or "Get"')
    if strategy not in ("Watch", "Get"):
        raise ConfigError(f"unknown configmap and secret manager mode: {strategy}")  # upstream NewMainKubelet
    if values.get("exit_on_lock_contention") and not values.get("lock_file"):
        raise ConfigError(LOCK_CONTENTION_WITHOUT_FILE)  # upstream server.go run, before it takes the lock
    if values.get("bootstrap_kubeconfig") and not values.get("kubeconfig"):
        raise ConfigError(BOOTSTRAP_WITHOUT_KUBECONFIG)
    if values.get("rotate_certificates") and not values.get("kubeconfig"):
        raise ConfigError(ROTATION_WITHOUT_KUBECONFIG)
    return AgentConfig(**values)


def from_env(environ: Mapping[str, str], hostname: str, read_file: Callable[[str], str],
             read_dir: dropins.ReadDir | None = None, cwd: str = "/") -> AgentConfig:
    """The agent's configuration when ``kopf run`` owns the command line: the flags come from ``KOPFLET_ARGS``."""
    return load(split_args(environ.get(ARGS_ENV, "")), environ, hostname, read_file, read_dir, cwd)


def usage(program: str = "kopflet") -> str:
    """The ``--help`` text, flags sorted as pflag prints them."""
    rows = []
    for setting in sorted((s for s in SETTINGS if s.flag), key=lambda s: s.flag or ""):
        short = "-v, " if setting.flag == "v" else "    "
        metavar = "" if setting.kind.is_bool else f" {setting.kind.metavar}"
        default = "" if setting.default in ("none", '""') else f" (default {setting.default})"
        rows.append((f"  {short}--{setting.flag}{metavar}", setting.help + default))
    rows.append(("  -h, --help", "Show this help and exit."))
    rows.append(("      --version", "Print the version and exit."))
    width = max(len(left) for left, _ in rows) + 3
    lines = [
        f"Usage: {program} [flags]",
        "",
        "kopflet: a Kubernetes node agent (kubelet) on Kopf. Flags have the upstream kubelet's names; they are",
        f"read from ${ARGS_ENV} first, then from the command line (the later of a repeated flag wins), and",
        f"override the --config file's fields. The node name is --hostname-override, else ${NODE_NAME_ENV}, else",
        "the hostname.",
        "",
        "Flags:",
    ]
    for left, right in rows:
        wrapped = textwrap.wrap(right, width=max(40, 110 - width)) or [""]
        lines.append(left.ljust(width) + wrapped[0])
        lines.extend(" " * width + more for more in wrapped[1:])
    return "\n".join(lines) + "\n"
