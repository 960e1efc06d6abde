"""
The Pod as the agent needs it: frozen dataclasses parsed from the API body by `pod_from_body`.

Pure: no I/O, no clock. The body is the plain mapping Kopf delivers (already validated and defaulted by the
apiserver), but static pods and tests bypass the apiserver, so parsing checks what kopflet relies on (types,
required fields, names that end up in labels and log paths) and fills in the apiserver's defaults where a
field is absent (`pkg/apis/core/v1/defaults.go`). Anything wrong raises `SpecError` naming the field path in
the apiserver's own style (``spec.containers[1].image: Required value``), because the agent shows the
message in the pod's status.

Fields the agent does not interpret yet (volumes, probes, lifecycle, security contexts ...) are kept as
plain mappings; every ContainerSpec also keeps its raw body (`raw`), from which `container_hash` is computed.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kopflet import gotext
from kopflet.api import times, validation

RESTART_ALWAYS = "Always"
RESTART_ON_FAILURE = "OnFailure"
RESTART_NEVER = "Never"
RESTART_POLICIES = (RESTART_ALWAYS, RESTART_ON_FAILURE, RESTART_NEVER)

# Container restartPolicyRules (ContainerRestartRules, beta and on by default since 1.35).
RULE_ACTION_RESTART = "Restart"
RULE_ACTION_RESTART_ALL_CONTAINERS = "RestartAllContainers"
RULE_ACTIONS = (RULE_ACTION_RESTART, RULE_ACTION_RESTART_ALL_CONTAINERS)
EXIT_CODES_IN = "In"
EXIT_CODES_NOT_IN = "NotIn"
EXIT_CODES_OPERATORS = (EXIT_CODES_IN, EXIT_CODES_NOT_IN)
MAX_RESTART_RULES = 20
MAX_RULE_EXIT_CODES = 255

PULL_ALWAYS = "Always"
PULL_IF_NOT_PRESENT = "IfNotPresent"
PULL_NEVER = "Never"
PULL_POLICIES = (PULL_ALWAYS, PULL_IF_NOT_PRESENT, PULL_NEVER)

TERMINATION_MESSAGE_FILE = "File"
TERMINATION_MESSAGE_FALLBACK_TO_LOGS = "FallbackToLogsOnError"
TERMINATION_MESSAGE_POLICIES = (TERMINATION_MESSAGE_FILE, TERMINATION_MESSAGE_FALLBACK_TO_LOGS)

DNS_POLICIES = ("ClusterFirst", "ClusterFirstWithHostNet", "Default", "None")
PROTOCOLS = ("TCP", "UDP", "SCTP")

# Upstream defaults (SetDefaults_PodSpec / SetDefaults_Container).
DEFAULT_TERMINATION_GRACE_PERIOD = 30
DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"
DEFAULT_DNS_POLICY = "ClusterFirst"
DEFAULT_NAMESPACE = "default"

# pkg/kubelet/types: where a pod came from; "api" (or no annotation) for the apiserver, else a static pod.
CONFIG_SOURCE_ANNOTATION = "kubernetes.io/config.source"

# Names flow into runtime labels and into paths (/var/log/pods/<ns>_<pod>_<uid>/<container>/), so they are
# checked as the apiserver would, even though API-delivered pods are already valid.
_UID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class SpecError(ValueError):
    """The pod body cannot be run as given; `field` is the path (``spec.containers[1].image``)."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"{field}: {detail}")
        self.field = field
        self.detail = detail


# ------------------------------------------------------------------------------------------- dataclasses


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnvVar:
    """One ``env`` entry; `value_from` (configMapKeyRef, secretKeyRef, fieldRef ...) stays raw for now."""

    name: str
    value: str = ""
    value_from: Mapping[str, Any] | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ContainerPort:
    """One ``ports`` entry with the apiserver's default protocol (TCP)."""

    container_port: int
    name: str = ""
    host_port: int = 0
    host_ip: str = ""
    protocol: str = "TCP"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Resources:
    """``resources`` as raw quantity strings (``"100m"``, ``"64Mi"``); parsing quantities is the config's job."""

    requests: Mapping[str, str] = dataclasses.field(default_factory=dict)
    limits: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RestartRule:
    """One ``restartPolicyRules`` entry: `action` applies when the exit code is (``In``) or is not (``NotIn``)
    one of `values` (upstream `ContainerRestartRule` with its `ContainerRestartRuleOnExitCodes`)."""

    action: str
    operator: str
    values: tuple[int, ...] = ()

    def matches(self, exit_code: int) -> bool:
        """Whether the rule applies to a container that exited with `exit_code`."""
        return (exit_code in self.values) == (self.operator == EXIT_CODES_IN)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ContainerSpec:
    """One container (regular, init or ephemeral) with the apiserver's defaults applied; `raw` is the body as sent."""

    name: str
    image: str
    image_pull_policy: str
    hash: str
    """`container_hash(raw)`: stored on the runtime container; a different value means kill and restart."""
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    working_dir: str = ""
    env: tuple[EnvVar, ...] = ()
    env_from: tuple[Mapping[str, Any], ...] = ()
    ports: tuple[ContainerPort, ...] = ()
    resources: Resources = dataclasses.field(default_factory=Resources)
    volume_mounts: tuple[Mapping[str, Any], ...] = ()
    termination_message_path: str = DEFAULT_TERMINATION_MESSAGE_PATH
    termination_message_policy: str = TERMINATION_MESSAGE_FILE
    liveness_probe: Mapping[str, Any] | None = None
    readiness_probe: Mapping[str, Any] | None = None
    startup_probe: Mapping[str, Any] | None = None
    lifecycle: Mapping[str, Any] | None = None
    security_context: Mapping[str, Any] | None = None
    stdin: bool = False
    stdin_once: bool = False
    tty: bool = False
    restart_policy: str | None = None
    """The container's own restartPolicy, None when unset (then the pod's applies). On an init container
    ``"Always"`` makes it a sidecar (upstream restartable init container); elsewhere it overrides the pod's
    (ContainerRestartRules). Never set on ephemeral containers."""
    restart_policy_rules: tuple[RestartRule, ...] = ()
    """``restartPolicyRules``, checked in order against the last exit code before `restart_policy`; the
    apiserver only accepts them together with a container restartPolicy."""
    target_container_name: str = ""
    """Only for ephemeral containers: the container whose PID namespace it joins ("" for none)."""
    raw: Mapping[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @property
    def is_sidecar(self) -> bool:
        """An init container with restartPolicy Always (upstream `IsRestartableInitContainer`)."""
        return self.restart_policy == RESTART_ALWAYS


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodSpec:
    """The parts of ``spec`` the agent uses, defaulted as the apiserver does; `raw` is ``spec`` as sent."""

    containers: tuple[ContainerSpec, ...]
    init_containers: tuple[ContainerSpec, ...] = ()
    ephemeral_containers: tuple[ContainerSpec, ...] = ()
    """Added later through the ``pods/ephemeralcontainers`` subresource (``kubectl debug``); run once, never
    restarted, no probes, ports or resources (the apiserver refuses them)."""
    restart_policy: str = RESTART_ALWAYS
    termination_grace_period_seconds: int = DEFAULT_TERMINATION_GRACE_PERIOD
    active_deadline_seconds: int | None = None
    dns_policy: str = DEFAULT_DNS_POLICY
    dns_config: Mapping[str, Any] | None = None
    hostname: str = ""
    subdomain: str = ""
    hostname_override: str | None = None
    """spec.hostnameOverride: the pod's hostname as given, in place of hostname and subdomain (None: unset)."""
    host_network: bool = False
    host_pid: bool = False
    host_ipc: bool = False
    share_process_namespace: bool = False
    host_users: bool | None = None
    """spec.hostUsers: False asks for a user namespace of the pod's own; None (unset) and True: the host's."""
    node_name: str = ""
    service_account_name: str = ""
    automount_service_account_token: bool | None = None
    volumes: tuple[Mapping[str, Any], ...] = ()
    security_context: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    readiness_gates: tuple[str, ...] = ()
    priority: int | None = None
    runtime_class_name: str | None = None
    enable_service_links: bool = True
    host_aliases: tuple[Mapping[str, Any], ...] = ()
    os_name: str | None = None
    raw: Mapping[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    def container(self, name: str) -> ContainerSpec | None:
        """The init, regular or ephemeral container of that name (names are unique across all three), or None
        (upstream `GetContainerSpec`)."""
        return next((c for c in (*self.init_containers, *self.containers, *self.ephemeral_containers)
                     if c.name == name), None)

    def is_ephemeral(self, name: str) -> bool:
        """Whether that name is one of the pod's ephemeral containers."""
        return any(c.name == name for c in self.ephemeral_containers)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Pod:
    """A Pod bound to this node: identity, metadata the runtime labels need, deletion state and spec."""

    name: str
    namespace: str
    uid: str
    spec: PodSpec
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)
    deletion_timestamp: datetime.datetime | None = None
    deletion_grace_period_seconds: int | None = None

    @property
    def full_name(self) -> str:
        """``<name>_<namespace>(<uid>)``, upstream `format.Pod`, used in kubelet messages."""
        return f"{self.name}_{self.namespace}({self.uid})"

    @property
    def is_deleting(self) -> bool:
        """The apiserver asked for termination (deletionTimestamp set): stop everything, start nothing."""
        return self.deletion_timestamp is not None


def is_static(pod: Pod) -> bool:
    """Upstream `types.IsStaticPod`: a config source annotation other than ``api`` (a manifest file or URL)."""
    source = pod.annotations.get(CONFIG_SOURCE_ANNOTATION)
    return source is not None and source != "api"


# ---------------------------------------------------------------------------------- restart decisions


def matching_restart_rule(container: ContainerSpec, exit_code: int) -> RestartRule | None:
    """The first of the container's restartPolicyRules that matches the exit code, or None (upstream
    `FindMatchingContainerRestartRule`)."""
    return next((rule for rule in container.restart_policy_rules if rule.matches(exit_code)), None)


def container_should_restart(container: ContainerSpec, pod_spec: PodSpec, exit_code: int) -> bool:
    """Whether a container that exited with `exit_code` is to run again (upstream `ContainerShouldRestart`,
    pkg/api/v1/pod/util.go, with ContainerRestartRules on).

    Only with a container-level restartPolicy: the first matching rule decides (Restart and, with
    RestartAllContainersOnContainerExits on as at 1.37, RestartAllContainers: yes), else that policy; without
    one, the pod's. A RestartAllContainers match is acted on by the reconciler's reset
    (`reconciler.compute_pod_actions` with `restart_all_containers`), not by restarting this container alone.
    """
    return restart_verdict(container, pod_spec, exit_code)[0]


def restart_verdict(container: ContainerSpec, pod_spec: PodSpec, exit_code: int) -> tuple[bool, str]:
    """`container_should_restart` with the rule that decided it, as `kopflet explain` shows it: the matching
    ``restartPolicyRules`` entry, the container's own ``restartPolicy`` or the pod's."""
    policy = container.restart_policy
    if policy is not None:
        rule = matching_restart_rule(container, exit_code)
        if rule is not None and rule.action in (RULE_ACTION_RESTART, RULE_ACTION_RESTART_ALL_CONTAINERS):
            codes = ", ".join(str(v) for v in rule.values)
            return True, f"restartPolicyRules {rule.action} (exit code {rule.operator} [{codes}])"
        source = f"container restartPolicy {policy}"
    else:
        policy = pod_spec.restart_policy
        source = f"restartPolicy {policy}"
    if policy == RESTART_NEVER:
        return False, source
    if policy == RESTART_ON_FAILURE:
        return exit_code != 0, source
    return True, source


def all_containers_could_restart(pod_spec: PodSpec) -> bool:
    """Whether an init or regular container has a RestartAllContainers rule (upstream
    `AllContainersCouldRestart`): only such pods get the AllContainersRestarting condition."""
    return any(rule.action == RULE_ACTION_RESTART_ALL_CONTAINERS
               for c in (*pod_spec.init_containers, *pod_spec.containers) for rule in c.restart_policy_rules)


def effective_restart_policy(container: ContainerSpec, pod_spec: PodSpec) -> str:
    """The container's restartPolicy if it has one, else the pod's: what upstream consults where there is no
    exit code to match rules against (a running container killed for a failed probe, an init container in
    unknown state, a new sandbox)."""
    return container.restart_policy if container.restart_policy is not None else pod_spec.restart_policy


# -------------------------------------------------------------------------------------------- the hash


def _fnv1a_32_of_spewed_bytes(data: bytes) -> int:
    """fnv-1a 32 over spew's ``%#v`` of a []byte, as upstream `hashutil.DeepHashObject` writes it."""
    value = 0x811C9DC5
    for byte in b"([]uint8)[" + b" ".join(str(b).encode() for b in data) + b"]":
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def container_hash(container_body: Mapping[str, Any]) -> str:
    """The container's spec hash, exactly as upstream `kubecontainer.HashContainer` (1.31+) computes it.

    Upstream hashes only the fields a pod update may change in place that need a restart, `name` and
    `image` (`pickFieldsToHash`): hashing the whole container restarted containers whenever an apiserver
    upgrade added a defaulted field. Same algorithm (JSON, spew, fnv-1a 32) and same text form
    (``strconv.FormatUint(hash, 16)``), so values match what a kubelet would write.
    """
    picked = {"name": _as_text(container_body.get("name")), "image": _as_text(container_body.get("image"))}
    data = gotext.go_json(picked, sort_keys=True).encode("utf-8", "surrogatepass")  # a Go map[string]string
    return format(_fnv1a_32_of_spewed_bytes(data), "x")


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else ""


# ---------------------------------------------------------------------------------------------- parsing


def default_pull_policy(image: str) -> str:
    """The apiserver's default imagePullPolicy: Always when the tag is ``latest`` or absent, else IfNotPresent.

    Mirrors `SetDefaults_Container` with `parsers.ParseImageName`: no tag and no digest means ``latest``; a
    digest without a tag means IfNotPresent; the tag is after the last ``:`` of the last path component
    (so ``localhost:5000/app`` has no tag).
    """
    name, _, digest = image.partition("@")
    last = name.rsplit("/", 1)[-1]
    tag = last.rpartition(":")[2] if ":" in last else ""
    if not tag and not digest:
        tag = "latest"
    return PULL_ALWAYS if tag == "latest" else PULL_IF_NOT_PRESENT


def pod_from_body(body: Mapping[str, Any]) -> Pod:
    """Parse a Pod API body (a plain mapping) into a `Pod`, or raise `SpecError` naming the bad field."""
    body = _mapping(body, "")
    metadata = _mapping(body.get("metadata"), "metadata", required=True)
    name = _name(metadata.get("name"), "metadata.name", validation.DNS1123_SUBDOMAIN,
                 validation.DNS1123_SUBDOMAIN_MAX_LENGTH, "a lowercase RFC 1123 subdomain")
    raw_namespace = metadata.get("namespace")
    namespace = DEFAULT_NAMESPACE if raw_namespace in (None, "") else _name(
        raw_namespace, "metadata.namespace", validation.DNS1123_LABEL, validation.DNS1123_LABEL_MAX_LENGTH,
        "a lowercase RFC 1123 label")
    uid = _name(metadata.get("uid"), "metadata.uid", _UID, 128, "letters, digits, '.', '_' or '-'")
    spec_body = _mapping(body.get("spec"), "spec", required=True)
    return Pod(
        name=name,
        namespace=namespace,
        uid=uid,
        labels=_string_map(metadata.get("labels"), "metadata.labels"),
        annotations=_string_map(metadata.get("annotations"), "metadata.annotations"),
        deletion_timestamp=_timestamp(metadata.get("deletionTimestamp"), "metadata.deletionTimestamp"),
        deletion_grace_period_seconds=_int(metadata.get("deletionGracePeriodSeconds"),
                                           "metadata.deletionGracePeriodSeconds", minimum=0),
        spec=_pod_spec(spec_body),
    )


def minimal_pod(uid: str, namespace: str = "", name: str = "") -> Pod:
    """A pod with its identity only and no containers: enough to kill what the runtime runs for it and to post
    events about it when there is no spec to go by (the pod is gone, an orphan, its spec does not parse)."""
    return Pod(name=name, namespace=namespace, uid=uid, spec=PodSpec(containers=()))


def _pod_spec(spec: Mapping[str, Any]) -> PodSpec:
    containers = _containers(spec.get("containers"), "spec.containers", required=True)
    init_containers = _containers(spec.get("initContainers"), "spec.initContainers", required=False)
    ephemeral_containers = _containers(spec.get("ephemeralContainers"), "spec.ephemeralContainers", required=False)
    seen: set[str] = set()
    for path, container in [*((f"spec.initContainers[{i}]", c) for i, c in enumerate(init_containers)),
                            *((f"spec.containers[{i}]", c) for i, c in enumerate(containers)),
                            *((f"spec.ephemeralContainers[{i}]", c) for i, c in enumerate(ephemeral_containers))]:
        if container.name in seen:
            raise SpecError(f"{path}.name", f"Duplicate value: {container.name!r}")
        seen.add(container.name)
    targets = {c.name for c in (*init_containers, *containers)}
    for i, container in enumerate(ephemeral_containers):
        # Upstream validateEphemeralContainers: the target must be a regular or init container of the pod.
        if container.target_container_name and container.target_container_name not in targets:
            raise SpecError(f"spec.ephemeralContainers[{i}].targetContainerName",
                            f"Not found: {container.target_container_name!r}")
    grace = _int(spec.get("terminationGracePeriodSeconds"), "spec.terminationGracePeriodSeconds", minimum=0)
    os_body = _mapping(spec.get("os"), "spec.os")
    return PodSpec(
        containers=containers,
        init_containers=init_containers,
        ephemeral_containers=ephemeral_containers,
        restart_policy=_choice(spec.get("restartPolicy"), "spec.restartPolicy", RESTART_POLICIES, RESTART_ALWAYS),
        termination_grace_period_seconds=DEFAULT_TERMINATION_GRACE_PERIOD if grace is None else grace,
        active_deadline_seconds=_int(spec.get("activeDeadlineSeconds"), "spec.activeDeadlineSeconds", minimum=1),
        dns_policy=_choice(spec.get("dnsPolicy"), "spec.dnsPolicy", DNS_POLICIES, DEFAULT_DNS_POLICY),
        dns_config=_optional_mapping(spec.get("dnsConfig"), "spec.dnsConfig"),
        hostname=_str(spec.get("hostname"), "spec.hostname"),
        subdomain=_str(spec.get("subdomain"), "spec.subdomain"),
        hostname_override=(None if spec.get("hostnameOverride") is None
                           else _str(spec.get("hostnameOverride"), "spec.hostnameOverride")),
        host_network=_bool(spec.get("hostNetwork"), "spec.hostNetwork"),
        host_pid=_bool(spec.get("hostPID"), "spec.hostPID"),
        host_ipc=_bool(spec.get("hostIPC"), "spec.hostIPC"),
        share_process_namespace=_bool(spec.get("shareProcessNamespace"), "spec.shareProcessNamespace"),
        host_users=_optional_bool(spec.get("hostUsers"), "spec.hostUsers"),
        node_name=_str(spec.get("nodeName"), "spec.nodeName"),
        service_account_name=_str(spec.get("serviceAccountName"), "spec.serviceAccountName"),
        automount_service_account_token=_optional_bool(spec.get("automountServiceAccountToken"),
                                                       "spec.automountServiceAccountToken"),
        volumes=_raw_list(spec.get("volumes"), "spec.volumes"),
        security_context=_mapping(spec.get("securityContext"), "spec.securityContext"),
        readiness_gates=tuple(
            _str(_mapping(gate, f"spec.readinessGates[{i}]").get("conditionType"),
                 f"spec.readinessGates[{i}].conditionType", required=True)
            for i, gate in enumerate(_list(spec.get("readinessGates"), "spec.readinessGates"))),
        priority=_int(spec.get("priority"), "spec.priority"),
        runtime_class_name=_str(spec.get("runtimeClassName"), "spec.runtimeClassName") or None,
        enable_service_links=_optional_bool(spec.get("enableServiceLinks"), "spec.enableServiceLinks") is not False,
        host_aliases=_raw_list(spec.get("hostAliases"), "spec.hostAliases"),
        os_name=_str(os_body.get("name"), "spec.os.name") or None,
        raw=_plain(spec),
    )


def _containers(value: Any, path: str, *, required: bool) -> tuple[ContainerSpec, ...]:
    items = _list(value, path)
    if required and not items:
        raise SpecError(path, "Required value: a pod needs at least one container")
    kind = "init" if path.endswith("initContainers") else (
        "ephemeral" if path.endswith("ephemeralContainers") else "regular")
    return tuple(_container(item, f"{path}[{i}]", kind=kind) for i, item in enumerate(items))


def _container(value: Any, path: str, *, kind: str) -> ContainerSpec:
    """One container; `kind` is ``init``, ``regular`` or ``ephemeral`` (which restartPolicy values are allowed,
    whether targetContainerName is read)."""
    body = _mapping(value, path)
    name = _name(body.get("name"), f"{path}.name", validation.DNS1123_LABEL, validation.DNS1123_LABEL_MAX_LENGTH,
                 "a lowercase RFC 1123 label")
    image = _str(body.get("image"), f"{path}.image", required=True)
    if image != image.strip():
        raise SpecError(f"{path}.image", f"Invalid value: {image!r}: must not have leading or trailing whitespace")
    resources = _mapping(body.get("resources"), f"{path}.resources")
    restart_policy, restart_rules = _restart_policy(body, path, kind)
    return ContainerSpec(
        name=name,
        image=image,
        image_pull_policy=_choice(body.get("imagePullPolicy"), f"{path}.imagePullPolicy", PULL_POLICIES,
                                  default_pull_policy(image)),
        hash=container_hash(body),
        command=_strings(body.get("command"), f"{path}.command"),
        args=_strings(body.get("args"), f"{path}.args"),
        working_dir=_str(body.get("workingDir"), f"{path}.workingDir"),
        env=tuple(_env(item, f"{path}.env[{i}]") for i, item in enumerate(_list(body.get("env"), f"{path}.env"))),
        env_from=_raw_list(body.get("envFrom"), f"{path}.envFrom"),
        ports=tuple(_port(item, f"{path}.ports[{i}]")
                    for i, item in enumerate(_list(body.get("ports"), f"{path}.ports"))),
        resources=Resources(requests=_quantities(resources.get("requests"), f"{path}.resources.requests"),
                            limits=_quantities(resources.get("limits"), f"{path}.resources.limits")),
        volume_mounts=_raw_list(body.get("volumeMounts"), f"{path}.volumeMounts"),
        termination_message_path=_str(body.get("terminationMessagePath"), f"{path}.terminationMessagePath")
        or DEFAULT_TERMINATION_MESSAGE_PATH,
        termination_message_policy=_choice(body.get("terminationMessagePolicy"), f"{path}.terminationMessagePolicy",
                                           TERMINATION_MESSAGE_POLICIES, TERMINATION_MESSAGE_FILE),
        liveness_probe=_optional_mapping(body.get("livenessProbe"), f"{path}.livenessProbe"),
        readiness_probe=_optional_mapping(body.get("readinessProbe"), f"{path}.readinessProbe"),
        startup_probe=_optional_mapping(body.get("startupProbe"), f"{path}.startupProbe"),
        lifecycle=_optional_mapping(body.get("lifecycle"), f"{path}.lifecycle"),
        security_context=_optional_mapping(body.get("securityContext"), f"{path}.securityContext"),
        stdin=_bool(body.get("stdin"), f"{path}.stdin"),
        stdin_once=_bool(body.get("stdinOnce"), f"{path}.stdinOnce"),
        tty=_bool(body.get("tty"), f"{path}.tty"),
        restart_policy=restart_policy,
        restart_policy_rules=restart_rules,
        target_container_name=_str(body.get("targetContainerName"), f"{path}.targetContainerName")
        if kind == "ephemeral" else "",
        raw=_plain(body),
    )


def _restart_policy(body: Mapping[str, Any], path: str, kind: str) -> tuple[str | None, tuple[RestartRule, ...]]:
    """``restartPolicy`` and ``restartPolicyRules`` of a container, checked as the apiserver does with
    ContainerRestartRules and RestartAllContainersOnContainerExits on (their 1.37 defaults:
    `validateContainerRestartPolicy`, `validateInitContainerRestartPolicy`): any of the three policies on
    regular and init containers, rules only together with a policy, neither on ephemeral containers."""
    raw_policy = body.get("restartPolicy")
    raw_rules = _list(body.get("restartPolicyRules"), f"{path}.restartPolicyRules")
    if kind == "ephemeral":
        for key, present in (("restartPolicy", raw_policy is not None), ("restartPolicyRules", bool(raw_rules))):
            if present:
                raise SpecError(f"{path}.{key}", "Forbidden: cannot be set for an Ephemeral Container")
        return None, ()
    policy = None
    if raw_policy == "":  # set but empty is not unset: the apiserver refuses it, it must not mean Always
        raise SpecError(f"{path}.restartPolicy", "Unsupported value: '': supported values: "
                                                 + ", ".join(f'"{p}"' for p in RESTART_POLICIES))
    if raw_policy is not None:
        policy = _choice(raw_policy, f"{path}.restartPolicy", RESTART_POLICIES, RESTART_ALWAYS)
    if not raw_rules:
        return policy, ()
    if policy is None:
        raise SpecError(f"{path}.restartPolicy", "Required value: must specify restartPolicy when restart rules "
                                                 "are used")
    if len(raw_rules) > MAX_RESTART_RULES:
        raise SpecError(f"{path}.restartPolicyRules",
                        f"Too many: {len(raw_rules)}: must have at most {MAX_RESTART_RULES} items")
    return policy, tuple(_restart_rule(item, f"{path}.restartPolicyRules[{i}]") for i, item in enumerate(raw_rules))


def _restart_rule(value: Any, path: str) -> RestartRule:
    body = _mapping(value, path)
    action = body.get("action")
    if action in (None, ""):
        raise SpecError(f"{path}.action", "Required value")
    action = _choice(action, f"{path}.action", RULE_ACTIONS, RULE_ACTION_RESTART)
    exit_codes = _mapping(body.get("exitCodes"), f"{path}.exitCodes")
    if body.get("exitCodes") is None:
        raise SpecError(f"{path}.exitCodes", "Required value: must be specified")
    operator = exit_codes.get("operator")
    if operator in (None, ""):
        raise SpecError(f"{path}.exitCodes.operator", "Required value")
    operator = _choice(operator, f"{path}.exitCodes.operator", EXIT_CODES_OPERATORS, EXIT_CODES_IN)
    raw_values = _list(exit_codes.get("values"), f"{path}.exitCodes.values")
    if len(raw_values) > MAX_RULE_EXIT_CODES:
        raise SpecError(f"{path}.exitCodes.values",
                        f"Too many: {len(raw_values)}: must have at most {MAX_RULE_EXIT_CODES} items")
    values = []
    for i, item in enumerate(raw_values):
        value = _int(item, f"{path}.exitCodes.values[{i}]", minimum=-2**31, maximum=2**31 - 1)  # int32
        if value is None:
            raise SpecError(f"{path}.exitCodes.values[{i}]", "Invalid value: None: must be an integer")
        values.append(value)
    return RestartRule(action=action, operator=operator, values=tuple(values))


def _env(value: Any, path: str) -> EnvVar:
    body = _mapping(value, path)
    return EnvVar(name=_str(body.get("name"), f"{path}.name", required=True),
                  value=_str(body.get("value"), f"{path}.value"),
                  value_from=_optional_mapping(body.get("valueFrom"), f"{path}.valueFrom"))


def _port(value: Any, path: str) -> ContainerPort:
    body = _mapping(value, path)
    container_port = _int(body.get("containerPort"), f"{path}.containerPort", minimum=1, maximum=65535)
    if container_port is None:
        raise SpecError(f"{path}.containerPort", "Required value")
    return ContainerPort(
        container_port=container_port,
        name=_str(body.get("name"), f"{path}.name"),
        host_port=_int(body.get("hostPort"), f"{path}.hostPort", minimum=0, maximum=65535) or 0,
        host_ip=_str(body.get("hostIP"), f"{path}.hostIP"),
        protocol=_choice(body.get("protocol"), f"{path}.protocol", PROTOCOLS, "TCP"),
    )


# ------------------------------------------------------------------------------------ field primitives


def _describe(value: Any) -> str:
    return type(value).__name__ if isinstance(value, Mapping | list | tuple) else repr(value)


def _mapping(value: Any, path: str, *, required: bool = False) -> Mapping[str, Any]:
    if value is None:
        if required:
            raise SpecError(path, "Required value")
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(path or "<body>", f"Invalid value: {_describe(value)}: must be an object")
    return value


def _optional_mapping(value: Any, path: str) -> Mapping[str, Any] | None:
    return None if value is None else _plain(_mapping(value, path))


def _list(value: Any, path: str) -> Sequence[Any]:
    if value is None:
        return ()
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise SpecError(path, f"Invalid value: {_describe(value)}: must be a list")
    return value


def _raw_list(value: Any, path: str) -> tuple[Mapping[str, Any], ...]:
    return tuple(_plain(_mapping(item, f"{path}[{i}]")) for i, item in enumerate(_list(value, path)))


def _str(value: Any, path: str, *, required: bool = False) -> str:
    if value is None or value == "":
        if required:
            raise SpecError(path, "Required value")
        return ""
    if not isinstance(value, str):
        raise SpecError(path, f"Invalid value: {_describe(value)}: must be a string")
    return value


def _strings(value: Any, path: str) -> tuple[str, ...]:
    items = _list(value, path)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise SpecError(f"{path}[{i}]", f"Invalid value: {_describe(item)}: must be a string")
    return tuple(items)


def _string_map(value: Any, path: str) -> Mapping[str, str]:
    body = _mapping(value, path)
    for key, item in body.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise SpecError(f"{path}[{key!r}]", f"Invalid value: {_describe(item)}: must be a string")
    return dict(body)


def _quantities(value: Any, path: str) -> Mapping[str, str]:
    """Quantities stay strings; a bare JSON number (``cpu: 1``) is accepted and kept as its text."""
    body = _mapping(value, path)
    result: dict[str, str] = {}
    for key, item in body.items():
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            raise SpecError(f"{path}.{key}", f"Invalid value: {_describe(item)}: must be a quantity")
        result[str(key)] = item if isinstance(item, str) else format(item, "g")
    return result


def _bool(value: Any, path: str) -> bool:
    return _optional_bool(value, path) is True


def _optional_bool(value: Any, path: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise SpecError(path, f"Invalid value: {_describe(value)}: must be true or false")


def _int(value: Any, path: str, *, minimum: int | None = None, maximum: int | None = None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(path, f"Invalid value: {_describe(value)}: must be an integer")
    if minimum is not None and value < minimum:
        raise SpecError(path, f"Invalid value: {value}: must be greater than or equal to {minimum}")
    if maximum is not None and value > maximum:
        raise SpecError(path, f"Invalid value: {value}: must be less than or equal to {maximum}")
    return value


def _choice(value: Any, path: str, allowed: Iterable[str], default: str) -> str:
    if value is None or value == "":
        return default
    allowed = tuple(allowed)
    if value not in allowed:
        supported = ", ".join(f'"{a}"' for a in allowed)
        raise SpecError(path, f"Unsupported value: {_describe(value)}: supported values: {supported}")
    return value


def _name(value: Any, path: str, pattern: re.Pattern[str], max_length: int, what: str) -> str:
    text = _str(value, path, required=True)
    if len(text) > max_length or not pattern.match(text) or text in (".", ".."):
        raise SpecError(path, f"Invalid value: {text!r}: must be {what} of at most {max_length} characters")
    return text


def _timestamp(value: Any, path: str) -> datetime.datetime | None:
    if value is None:
        return None
    parsed = times.parse_timestamp(value)
    if parsed is None:
        text = _str(value, path, required=True)  # an empty or non-string value fails here with its own message
        raise SpecError(path, f"Invalid value: {text!r}: must be an RFC 3339 timestamp")
    return parsed


def _plain(value: Any) -> Any:
    """A deep copy as plain dicts and lists, detached from the caller's (possibly mutable, view) body."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def resolve_port(port: int | str, container: ContainerSpec) -> int:
    """Upstream `probe.ResolveContainerPort`: a number, or a port NAME of the container (then a number
    written as a string); ValueError with upstream's message otherwise."""
    if isinstance(port, str):
        found = next((p.container_port for p in container.ports if p.name == port), None)
        if found is None:
            if not port.lstrip("+-").isdigit():
                raise ValueError(f'strconv.Atoi: parsing "{port}": invalid syntax')
            found = int(port)
        port = found
    if 0 < port < 65536:
        return port
    raise ValueError(f"invalid port number: {port}")


__all__ = [
    "ContainerPort",
    "ContainerSpec",
    "EnvVar",
    "Pod",
    "PodSpec",
    "Resources",
    "RestartRule",
    "SpecError",
    "all_containers_could_restart",
    "container_hash",
    "container_should_restart",
    "default_pull_policy",
    "effective_restart_policy",
    "is_static",
    "matching_restart_rule",
    "minimal_pod",
    "pod_from_body",
    "resolve_port",
    "restart_verdict",
]
