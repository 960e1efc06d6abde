"""
Pod admission: may this node run this pod at all? The upstream kubelet's admit handlers, as pure logic.

Mirrors, in upstream's order (`pkg/kubelet/kubelet.go` NewMainKubelet adds the handlers; `canAdmitPod` runs
them in turn and the first rejection wins):

1. sysctls (`pkg/kubelet/sysctl`, reason ``SysctlForbidden``): every ``spec.securityContext.sysctls`` name
   must be on the safe list for the node's kernel or match ``allowedUnsafeSysctls``, and a net/ipc sysctl is
   refused when the pod shares that namespace with the host;
   then the container manager's handler (the topology manager's, which allocates the CPU manager's exclusive
   CPUs: ``UnexpectedAdmissionError``, ``SMTAlignmentError``), whose answer the caller passes in
   (`kopflet.cm.cpumanager.cpu_manager.admit`: it needs the CPU manager's state);
2. the predicate handler (`pkg/kubelet/lifecycle/predicate.go`):
   the pod's ``kubernetes.io/os`` label and ``spec.os.name`` against the node's OS, then the fields kopflet cannot
   honour (`kopflet.api.unsupported`: ``SupplementalGroupsPolicyNotSupported``, ``PodFeatureUnsupported``), then
   `generalFilter`:
   resources (`noderesources.Fits`: pod count, cpu, memory, ephemeral-storage, then scalar resources),
   required node affinity and nodeSelector, ``spec.nodeName``, host ports, and last the NoExecute taints
   (static pods exempt);
3. AppArmor (`pkg/kubelet/lifecycle/handlers.go` appArmorAdmitHandler with pkg/security/apparmor's validator,
   reason ``AppArmor``): a pod asking for a profile other than Unconfined is refused on a host without AppArmor
   (`NodeInfo.apparmor_enabled`), and a Localhost profile without a name anywhere.

A rejection carries the reason and message the kubelet writes on the pod (`rejectPod`: phase Failed,
``status.reason``, ``status.message = "Pod was rejected: " + message``) and in the Warning event (reason and
the bare message). Pure: the caller supplies the node and the pods already admitted on it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from kopflet import gotext
from kopflet.api import apparmor, qos, spec, unsupported, validation

REJECTED_PREFIX = "Pod was rejected: "

# Reasons (pkg/kubelet/lifecycle/predicate.go, pkg/kubelet/sysctl/allowlist.go); OutOf<name> for others.
SYSCTL_FORBIDDEN = "SysctlForbidden"
POD_OS_SELECTOR_MISMATCH = "PodOSSelectorNodeLabelDoesNotMatch"
POD_OS_NOT_SUPPORTED = "PodOSNotSupported"
OUT_OF_PREFIX = "OutOf"
OUT_OF_CPU = "OutOfcpu"
OUT_OF_MEMORY = "OutOfmemory"
OUT_OF_EPHEMERAL_STORAGE = "OutOfephemeral-storage"
OUT_OF_PODS = "OutOfpods"
NODE_AFFINITY = "NodeAffinity"
NODE_NAME = "NodeName"
NODE_PORTS = "NodePorts"
TAINT_TOLERATION = "TaintToleration"
APPARMOR = "AppArmor"  # lifecycle.AppArmorNotAdmittedReason
APPARMOR_NOT_ENABLED = "AppArmor is not enabled on the host"  # apparmor validateHost

# Failure descriptions of the scheduler plugins the kubelet reuses (`ErrReason*` constants).
_NODE_AFFINITY_DESC = "node(s) didn't match Pod's node affinity/selector"
_NODE_NAME_DESC = "node(s) didn't match the requested node name"
_NODE_PORTS_DESC = "node(s) didn't have free ports for the requested pod ports"
_TAINT_TOLERATION_DESC = "node(s) had taints that the pod didn't tolerate"

OS_LABEL = "kubernetes.io/os"
NO_EXECUTE = "NoExecute"

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"
_HUGEPAGES_PREFIX = "hugepages-"


# ------------------------------------------------------------------------------------------- data types


@dataclasses.dataclass(frozen=True)
class Taint:
    """A node taint (``spec.taints[]``); effect is NoSchedule, PreferNoSchedule or NoExecute."""

    key: str
    value: str = ""
    effect: str = NO_EXECUTE

    def as_dict(self) -> dict[str, str]:
        """The Node API's form, for ``spec.taints``."""
        body = {"key": self.key, "effect": self.effect}
        if self.value:
            body["value"] = self.value
        return body

    def __str__(self) -> str:
        """The ``--register-with-taints`` form: ``key=value:Effect`` or ``key:Effect``."""
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclasses.dataclass(frozen=True)
class NodeInfo:
    """What admission needs to know about this node.

    `allocatable` holds quantity strings as in ``status.allocatable`` (cpu, memory, pods, ephemeral-storage,
    hugepages-*, extended resources). `allowed_unsafe_sysctls` is the kubelet's ``allowedUnsafeSysctls``
    (names or ``prefix*`` patterns), checked here as the kubelet checks it at start-up. `kernel_version` is
    ``uname -r`` (``5.15.0-91-generic``); empty or unparsable means unknown, which drops the safe sysctls that
    need a minimum kernel.
    """

    name: str
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    allocatable: Mapping[str, str] = dataclasses.field(default_factory=dict)
    os: str = "linux"
    allowed_unsafe_sysctls: tuple[str, ...] = ()
    kernel_version: str = ""
    pressure: tuple[str, ...] = ()
    """The node's pressure conditions now (MemoryPressure, DiskPressure, PIDPressure): the eviction admit."""
    shutting_down: bool = False
    """The node shutdown manager saw logind announce the shutdown: its admit handler, the last, refuses pods."""
    apparmor_enabled: bool = False
    """The kernel enforces AppArmor (read once at start, as upstream's validator checks the host once)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "taints", tuple(self.taints))
        object.__setattr__(self, "allowed_unsafe_sysctls", tuple(self.allowed_unsafe_sysctls))
        validate_sysctl_patterns(self.allowed_unsafe_sysctls)


@dataclasses.dataclass(frozen=True)
class Rejection:
    """Why the pod may not run here: ``status.reason`` and ``status.message`` (already prefixed).

    The Warning event the kubelet records carries the same reason and the message without the prefix
    (`event_message`).
    """

    reason: str
    message: str

    @property
    def event_message(self) -> str:
        return self.message.removeprefix(REJECTED_PREFIX)


def _reject(reason: str, message: str) -> Rejection:
    return Rejection(reason=reason, message=REJECTED_PREFIX + message)


def _predicate_failed(name: str, desc: str) -> Rejection:
    """`PredicateFailureError`: reason is the plugin name, message ``Predicate <name> failed: <desc>``."""
    return _reject(name, f"Predicate {name} failed: {desc}")


# ------------------------------------------------------------------------------------------------ admit


def admit(pod: spec.Pod, node: NodeInfo, admitted: Sequence[spec.Pod], *, static: bool = False,
          pending: bool = True, allocation: Rejection | None = None) -> Rejection | None:
    """None when `node` can run `pod`, else the first failed check's `Rejection`, in upstream's order.

    `admitted` are the pods already admitted on the node and not terminal (not including `pod`): they count
    towards the pod limit, their requests are the node's used resources and their host ports are taken.
    `static` (or a ``kubernetes.io/config.source`` annotation other than ``api``) marks a static pod, which
    is exempt from the taint check. `pending` False (a resize of a pod past phase Pending) skips the AppArmor
    check, as upstream's handler admits such pods. `allocation` is the answer of the container manager's admit
    handler (upstream GetAllocateResourcesPodAdmitHandler: the CPU manager's allocation through the topology
    manager), which the caller computes; upstream runs it after the sysctls and before the predicate handler.
    """
    rejection = _check_sysctls(pod, node) or allocation or _check_os(pod, node) or _check_unsupported(pod, node)
    if rejection is not None:
        return rejection
    rejection = _check_resources(pod, node, admitted)
    if rejection is not None:
        return rejection
    if not required_node_affinity_matches(pod, node):
        return _predicate_failed(NODE_AFFINITY, _NODE_AFFINITY_DESC)
    if pod.spec.node_name and pod.spec.node_name != node.name:
        return _predicate_failed(NODE_NAME, _NODE_NAME_DESC)
    if _host_ports_conflict(pod, admitted):
        return _predicate_failed(NODE_PORTS, _NODE_PORTS_DESC)
    if not (static or spec.is_static(pod)) and untolerated_taint(pod, node.taints, effect=NO_EXECUTE) is not None:
        return _predicate_failed(TAINT_TOLERATION, _TAINT_TOLERATION_DESC)
    return _check_apparmor(pod, node) if pending else None


# ----------------------------------------------------------------------------------------------- AppArmor


def _check_apparmor(pod: spec.Pod, node: NodeInfo) -> Rejection | None:
    """Upstream appArmorAdmitHandler.Admit (for Pending pods only, see `admit`): a pod that needs
    AppArmor (`apparmor.is_required`) on a host without it, or with an unnamed Localhost profile, is refused."""
    if not apparmor.is_required(pod):
        return None
    error = APPARMOR_NOT_ENABLED if not node.apparmor_enabled else apparmor.pod_error(pod)
    return _reject(APPARMOR, f"Cannot enforce AppArmor: {error}") if error else None


# ----------------------------------------------------------------------------------------------- sysctls

# pkg/kubelet/sysctl/safe_sysctls.go (1.37): always safe, and safe from a kernel version on
# (pkg/util/kernel/constants.go; 1.37 added tcp_slow_start_after_idle and tcp_notsent_lowat).
_SAFE_SYSCTLS: tuple[tuple[str, tuple[int, ...] | None], ...] = (
    ("kernel.shm_rmid_forced", None),
    ("net.ipv4.ip_local_port_range", None),
    ("net.ipv4.tcp_syncookies", None),
    ("net.ipv4.ping_group_range", None),
    ("net.ipv4.ip_unprivileged_port_start", None),
    ("net.ipv4.ip_local_reserved_ports", (3, 16)),
    ("net.ipv4.tcp_keepalive_time", (4, 5)),
    ("net.ipv4.tcp_fin_timeout", (4, 6)),
    ("net.ipv4.tcp_keepalive_intvl", (4, 5)),
    ("net.ipv4.tcp_keepalive_probes", (4, 5)),
    ("net.ipv4.tcp_rmem", (4, 15)),
    ("net.ipv4.tcp_wmem", (4, 15)),
    ("net.ipv4.tcp_slow_start_after_idle", (4, 15)),
    ("net.ipv4.tcp_notsent_lowat", (4, 6)),
)

# k8s.io/component-helpers/node/util/sysctl/namespace.go
_IPC, _NET = "ipc", "net"
_NAMESPACED_SYSCTLS = {"kernel.sem": _IPC}
_NAMESPACED_PREFIXES = (("kernel.shm", _IPC), ("kernel.msg", _IPC), ("fs.mqueue.", _IPC), ("net.", _NET))

# pkg/apis/policy/validation: SysctlContainSlashPatternFmt, at most SysctlMaxLength (253) characters.
_SYSCTL_SEGMENT = r"[a-z0-9]([-_a-z0-9]*[a-z0-9])?"
_SYSCTL_PATTERN_FMT = rf"({_SYSCTL_SEGMENT}[\./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]"
_SYSCTL_PATTERN = re.compile(rf"^{_SYSCTL_PATTERN_FMT}$")
_SYSCTL_MAX_LENGTH = 253
_KERNEL_VERSION = re.compile(r"^\s*v?([0-9]+(?:\.[0-9]+)+)")


def kernel_version_tuple(text: str) -> tuple[int, ...] | None:
    """Upstream `version.ParseGeneric`: two or more dot-separated numbers, anything may follow; else None."""
    match = _KERNEL_VERSION.match(text)
    if match is None:
        return None
    parts = match.group(1).split(".")
    if len(parts[0]) > 1 and parts[0].startswith("0"):
        return None
    return tuple(int(p) for p in parts)


def _at_least(version: tuple[int, ...], minimum: tuple[int, ...]) -> bool:
    width = max(len(version), len(minimum))
    return version + (0,) * (width - len(version)) >= minimum + (0,) * (width - len(minimum))


def safe_sysctls(kernel_version: str) -> tuple[str, ...]:
    """The safe sysctls for this kernel (upstream `SafeSysctlAllowlist`); unknown kernel: the ungated ones."""
    version = kernel_version_tuple(kernel_version)
    return tuple(name for name, minimum in _SAFE_SYSCTLS
                 if minimum is None or (version is not None and _at_least(version, minimum)))


def sysctl_dots(name: str) -> str:
    """Upstream `ConvertSysctlVariableToDotsSeparator`: ``net/ipv4/conf/eth0.100/rp_filter`` style (first
    separator a slash) becomes dotted, dots and slashes swapped; dotted names stay."""
    for char in name:
        if char == ".":
            return name
        if char == "/":
            return name.translate(str.maketrans("./", "/."))
    return name


def sysctl_namespace(name: str) -> str | None:
    """Upstream `NamespacedBy`: "ipc", "net", or None when the sysctl is not known to be namespaced."""
    if name in _NAMESPACED_SYSCTLS:
        return _NAMESPACED_SYSCTLS[name]
    return next((ns for prefix, ns in _NAMESPACED_PREFIXES if name.startswith(prefix)), None)


def validate_sysctl_patterns(patterns: Iterable[str]) -> None:
    """Raise ValueError, with upstream `NewAllowlist`'s message, for a pattern the kubelet refuses at start."""
    for pattern in patterns:
        if len(pattern) > _SYSCTL_MAX_LENGTH or not _SYSCTL_PATTERN.match(pattern):
            raise ValueError(f"sysctl {gotext.go_quote(pattern)} must have at most {_SYSCTL_MAX_LENGTH} characters "
                             f"and match regex {_SYSCTL_PATTERN_FMT}")
        dotted = sysctl_dots(pattern)
        if dotted.endswith("*"):
            if sysctl_namespace(dotted[:-1]) is None:
                raise ValueError(f"the sysctls {gotext.go_quote(dotted)} are not known to be namespaced")
        elif sysctl_namespace(dotted) is None:
            raise ValueError(f"the sysctl {gotext.go_quote(dotted)} are not known to be namespaced")


def _sysctl_error(name: str, node: NodeInfo, host_network: bool, host_ipc: bool) -> str | None:
    """Upstream `patternAllowlist.validateSysctl`: None when allowed, else the error text."""
    name = sysctl_dots(name)
    exact = {sysctl_dots(p) for p in (*safe_sysctls(node.kernel_version), *node.allowed_unsafe_sysctls)
             if not p.endswith("*")}
    prefixes = [sysctl_dots(p)[:-1] for p in node.allowed_unsafe_sysctls if p.endswith("*")]
    if name in exact:
        matched: str | None = name
    else:
        matched = next((p for p in prefixes if name.startswith(p)), None)
    if matched is None:
        return f"{gotext.go_quote(name)} not allowlisted"
    namespace = sysctl_namespace(matched)
    if (namespace == _IPC and host_ipc) or (namespace == _NET and host_network):
        return f"{gotext.go_quote(name)} not allowed with host {namespace} enabled"
    return None


def _check_sysctls(pod: spec.Pod, node: NodeInfo) -> Rejection | None:
    for item in pod.spec.security_context.get("sysctls") or ():
        name = item.get("name") if isinstance(item, Mapping) else None
        if not isinstance(name, str):
            continue
        error = _sysctl_error(name, node, pod.spec.host_network, pod.spec.host_ipc)
        if error is not None:
            return _reject(SYSCTL_FORBIDDEN, f"forbidden sysctl: {error}")
    return None


# ----------------------------------------------------------------------------------- fields kopflet lacks


def _check_unsupported(pod: spec.Pod, node: NodeInfo) -> Rejection | None:
    """Fields kopflet cannot honour (`unsupported.pod_refusal`), refused as upstream refuses what its node lacks."""
    refusal = unsupported.pod_refusal(pod)
    return None if refusal is None else _reject(refusal.reason, refusal.message)


# ---------------------------------------------------------------------------------------------------- OS


def _check_os(pod: spec.Pod, node: NodeInfo) -> Rejection | None:
    """`rejectPodAdmissionBasedOnOSSelector` (the pod's own label) and `rejectPodAdmissionBasedOnOSField`.

    Upstream compares with the kubelet's own GOOS (the node label is corrected to it), here `node.os`.
    """
    label = pod.labels.get(OS_LABEL)
    if label is not None and label != node.os:
        return _reject(POD_OS_SELECTOR_MISMATCH,
                       "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label")
    if pod.spec.os_name is not None and pod.spec.os_name != node.os:
        return _reject(POD_OS_NOT_SUPPORTED, "Failed to admit pod as the OS field doesn't match node OS")
    return None


# ----------------------------------------------------------------------------------------------- resources


def is_extended_resource(name: str) -> bool:
    """Upstream `IsExtendedResourceName`: a qualified ``domain/name`` outside ``kubernetes.io``."""
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    return validation.is_qualified_name(f"requests.{name}")


def is_scalar_resource(name: str) -> bool:
    """Upstream `IsScalarResourceName`: extended, hugepages-*, kubernetes.io/-prefixed or attachable-volumes-*."""
    return (is_extended_resource(name) or name.startswith(_HUGEPAGES_PREFIX) or "kubernetes.io/" in name
            or name.startswith("attachable-volumes-"))


def _add(total: dict[str, Fraction], values: Mapping[str, Fraction]) -> None:
    for name, value in values.items():
        total[name] = total.get(name, Fraction(0)) + value


def _maximise(total: dict[str, Fraction], values: Mapping[str, Fraction]) -> None:
    for name, value in values.items():
        if name not in total or value > total[name]:
            total[name] = value


def aggregate(pod: spec.Pod, pick: Callable[[spec.ContainerSpec], Mapping[str, Any]]) -> dict[str, Fraction]:
    """Upstream `aggregateContainerResourcesByFn` over the requests or limits `pick` returns: regular containers
    and sidecars add up; every other init container needs itself plus the sidecars before it; the pod needs the
    larger of the two."""
    result: dict[str, Fraction] = {}
    for container in pod.spec.containers:
        _add(result, qos.parse_resource_list(pick(container)))
    sidecars: dict[str, Fraction] = {}
    init_peak: dict[str, Fraction] = {}
    for container in pod.spec.init_containers:
        own = qos.parse_resource_list(pick(container))
        if container.is_sidecar:
            _add(result, own)
            _add(sidecars, own)
            needed = dict(sidecars)
        else:
            needed = dict(own)
            _add(needed, sidecars)
        _maximise(init_peak, needed)
    _maximise(result, init_peak)
    return result


def pod_requests(pod: spec.Pod) -> dict[str, Fraction]:
    """The pod's effective requests (upstream `resource.PodRequests`), exact.

    Regular containers and sidecars (restartable init containers) add up; each other init container needs
    its own requests plus the sidecars started before it; the pod needs the larger of the two. Pod-level
    ``spec.resources.requests`` (cpu, memory, hugepages-*) replace the aggregate; ``spec.overhead`` is added.
    """
    result = aggregate(pod, lambda c: c.resources.requests)
    pod_level = qos.pod_level_resources(pod)
    pod_level_requests = qos.parse_resource_list((pod_level or {}).get("requests"))
    supported = {k: v for k, v in pod_level_requests.items()
                 if k in (CPU, MEMORY) or k.startswith(_HUGEPAGES_PREFIX)}
    result.update(supported)
    overhead = pod.spec.raw.get("overhead")
    if isinstance(overhead, Mapping):
        _add(result, qos.parse_resource_list(overhead))
    return result


def _integer_resources(requests: Mapping[str, Fraction]) -> dict[str, int]:
    """The scheduler's `framework.Resource` view: milliCPU, bytes, counts (rounded up); other names dropped."""
    result: dict[str, int] = {}
    for name, quantity in requests.items():
        if name == CPU:
            result[name] = qos.milli_value(quantity)
        elif name in (MEMORY, EPHEMERAL_STORAGE, PODS) or is_scalar_resource(name):
            result[name] = qos.value(quantity)
    return result


def _without_missing_extended(pod: spec.Pod, allocatable: Mapping[str, str]) -> spec.Pod:
    """Upstream `removeMissingExtendedResources`: drop container requests of extended resources the node
    does not list at all (cluster-level or DRA-backed resources); the rest is checked as usual."""
    def strip(container: spec.ContainerSpec) -> spec.ContainerSpec:
        requests = {k: v for k, v in container.resources.requests.items()
                    if not is_extended_resource(k) or k in allocatable}
        if len(requests) == len(container.resources.requests):
            return container
        return dataclasses.replace(container, resources=dataclasses.replace(container.resources, requests=requests))

    pod_spec = dataclasses.replace(pod.spec, containers=tuple(strip(c) for c in pod.spec.containers),
                                   init_containers=tuple(strip(c) for c in pod.spec.init_containers),
                                   raw=pod.spec.raw)
    return dataclasses.replace(pod, spec=pod_spec)


def _out_of(name: str, requested: int, used: int, capacity: int) -> Rejection:
    """`InsufficientResourceError`: reason ``OutOf<resource>``, message with the scheduler's integers."""
    return _reject(OUT_OF_PREFIX + name,
                   f"Node didn't have enough resource: {name}, requested: {requested}, used: {used}, "
                   f"capacity: {capacity}")


def _check_resources(pod: spec.Pod, node: NodeInfo, admitted: Sequence[spec.Pod]) -> Rejection | None:
    """Upstream `noderesources.Fits` with the first failure kept (`predicateAdmitHandler.Admit`)."""
    allocatable = _integer_resources(qos.parse_resource_list(node.allocatable))
    allowed_pods = allocatable.get(PODS, 0)
    if len(admitted) + 1 > allowed_pods:
        return _out_of(PODS, 1, len(admitted), allowed_pods)
    wanted = _integer_resources(pod_requests(_without_missing_extended(pod, node.allocatable)))
    wanted.pop(PODS, None)
    used: dict[str, int] = {}
    for other in admitted:
        for name, amount in _integer_resources(pod_requests(other)).items():
            used[name] = used.get(name, 0) + amount
    scalars = sorted(n for n in wanted if n not in (CPU, MEMORY, EPHEMERAL_STORAGE))
    for name in (CPU, MEMORY, EPHEMERAL_STORAGE, *scalars):
        requested = wanted.get(name, 0)
        if requested > 0 and requested > allocatable.get(name, 0) - used.get(name, 0):
            return _out_of(name, requested, used.get(name, 0), allocatable.get(name, 0))
    return None


# ------------------------------------------------------------------------------------------ node affinity

_INT64 = re.compile(r"^[+-]?[0-9]+$")


def _int64(text: str) -> int | None:
    """Go's ``strconv.ParseInt(text, 10, 64)``, None when it fails."""
    if not _INT64.match(text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


def _label_requirement(expr: Mapping[str, Any]) -> tuple[str, str, tuple[str, ...]] | None:
    """A parsed matchExpressions entry (`labels.NewRequirement`), or None when upstream fails to parse it."""
    key, operator, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    if not isinstance(key, str) or not validation.is_qualified_name(key) or not isinstance(values, list):
        return None
    if not all(isinstance(v, str) for v in values):
        return None
    if operator in ("In", "NotIn"):
        ok = len(values) > 0
    elif operator in ("Exists", "DoesNotExist"):
        ok = len(values) == 0
    elif operator in ("Gt", "Lt"):
        ok = len(values) == 1 and _int64(values[0]) is not None
    else:
        ok = False
    if not ok or not all(validation.is_label_value(v) for v in values):
        return None
    return key, operator, tuple(values)


def _label_requirement_matches(requirement: tuple[str, str, tuple[str, ...]], labels: Mapping[str, str]) -> bool:
    key, operator, values = requirement
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    actual = _int64(labels[key]) if present else None
    if actual is None:
        return False
    limit = _int64(values[0])
    assert limit is not None  # checked when parsed
    return actual > limit if operator == "Gt" else actual < limit


def _field_requirement(expr: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """A parsed matchFields entry: In or NotIn with exactly one value (`nodeSelectorRequirementsAsFieldSelector`)."""
    key, operator, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    if (not isinstance(key, str) or operator not in ("In", "NotIn") or not isinstance(values, list)
            or len(values) != 1 or not isinstance(values[0], str)):
        return None
    return key, operator, values[0]


def _term_matches(term: Mapping[str, Any], node: NodeInfo) -> bool:
    """One nodeSelectorTerm: its expressions AND-ed; a term upstream cannot parse matches nothing."""
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    labels = [_label_requirement(e) if isinstance(e, Mapping) else None for e in expressions]
    field_reqs = [_field_requirement(e) if isinstance(e, Mapping) else None for e in fields]
    if any(r is None for r in labels) or any(r is None for r in field_reqs):
        return False
    if not all(_label_requirement_matches(r, node.labels) for r in labels if r is not None):
        return False
    if node.name:  # upstream only applies matchFields when the node has fields (metadata.name)
        node_fields = {"metadata.name": node.name}
        for key, operator, value in (r for r in field_reqs if r is not None):
            if (node_fields.get(key, "") == value) != (operator == "In"):
                return False
    return True


def _child(body: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = body.get(key)
    return value if isinstance(value, Mapping) else {}


def node_selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str], node_name: str = "") -> bool:
    """Upstream `corev1.MatchNodeSelectorTerms` (a `v1.NodeSelector`): its ``nodeSelectorTerms`` OR-ed; an empty or
    unparsable term matches nothing, and so does a selector without terms. `node_name` empty leaves ``matchFields``
    out, as for the label-only Node upstream's `CheckNodeAffinity` builds for a PersistentVolume's node affinity."""
    return _any_term_matches(selector, NodeInfo(name=node_name, labels=labels))


def _any_term_matches(selector: Mapping[str, Any], node: NodeInfo) -> bool:
    """A NodeSelector's ``nodeSelectorTerms`` OR-ed; an empty or unparsable term matches nothing."""
    for term in selector.get("nodeSelectorTerms") or []:
        if not isinstance(term, Mapping) or not (term.get("matchExpressions") or term.get("matchFields")):
            continue
        if _term_matches(term, node):
            return True
    return False


def required_node_affinity_matches(pod: spec.Pod, node: NodeInfo) -> bool:
    """Upstream `GetRequiredNodeAffinity(pod).Match(node)`: ``spec.nodeSelector`` (every label equal) and
    ``requiredDuringSchedulingIgnoredDuringExecution`` (terms OR-ed; empty or unparsable terms match nothing)."""
    node_selector = _child(pod.spec.raw, "nodeSelector")
    for key, value in node_selector.items():
        if key not in node.labels or node.labels[key] != value:
            return False
    node_affinity = _child(_child(pod.spec.raw, "affinity"), "nodeAffinity")
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not isinstance(required, Mapping):
        return True
    return _any_term_matches(required, node)


# -------------------------------------------------------------------------------------------- host ports


def _host_ports(pod: spec.Pod) -> list[tuple[str, str, int]]:
    """Upstream `GetHostPorts`: (hostIP or 0.0.0.0, protocol, hostPort) of the containers and sidecars."""
    containers = (*(c for c in pod.spec.init_containers if c.is_sidecar), *pod.spec.containers)
    return [(p.host_ip or "0.0.0.0", p.protocol or "TCP", p.host_port)
            for c in containers for p in c.ports if p.host_port > 0]


def _host_ports_conflict(pod: spec.Pod, admitted: Sequence[spec.Pod]) -> bool:
    """Upstream `HostPortInfo.CheckConflict`: same protocol and port, and either side 0.0.0.0 or same IP."""
    used = {port for other in admitted for port in _host_ports(other)}
    for ip, protocol, port in _host_ports(pod):
        for used_ip, used_protocol, used_port in used:
            same_port = (used_protocol, used_port) == (protocol, port)
            if same_port and (ip == used_ip or "0.0.0.0" in (ip, used_ip)):
                return True
    return False


# ------------------------------------------------------------------------------------------------ taints


def toleration_tolerates(toleration: Mapping[str, Any], taint: Taint) -> bool:
    """Upstream `Toleration.ToleratesTaint`: empty effect matches every effect, empty key every key (with
    Exists); operator Exists matches any value, Equal (or empty) the same value. The alpha Lt/Gt operators
    (TaintTolerationComparisonOperators, off by default) tolerate nothing."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.effect:
        return False
    key = toleration.get("key") or ""
    if key and key != taint.key:
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Equal":
        return (toleration.get("value") or "") == taint.value
    return operator == "Exists"


def untolerated_taint(pod: spec.Pod, taints: Iterable[Taint], *, effect: str | None = None) -> Taint | None:
    """The first taint (of `effect`, if given) none of the pod's tolerations tolerates (upstream
    `FindMatchingUntoleratedTaint`), or None."""
    tolerations = [t for t in pod.spec.raw.get("tolerations") or () if isinstance(t, Mapping)]
    for taint in taints:
        if effect is not None and taint.effect != effect:
            continue
        if not any(toleration_tolerates(t, taint) for t in tolerations):
            return taint
    return None


__all__ = [
    "APPARMOR",
    "APPARMOR_NOT_ENABLED",
    "NODE_AFFINITY",
    "NODE_NAME",
    "NODE_PORTS",
    "OUT_OF_CPU",
    "OUT_OF_EPHEMERAL_STORAGE",
    "OUT_OF_MEMORY",
    "OUT_OF_PODS",
    "POD_OS_NOT_SUPPORTED",
    "POD_OS_SELECTOR_MISMATCH",
    "REJECTED_PREFIX",
    "SYSCTL_FORBIDDEN",
    "TAINT_TOLERATION",
    "NodeInfo",
    "Rejection",
    "Taint",
    "admit",
    "is_extended_resource",
    "is_scalar_resource",
    "kernel_version_tuple",
    "node_selector_matches",
    "pod_requests",
    "required_node_affinity_matches",
    "safe_sysctls",
    "sysctl_dots",
    "sysctl_namespace",
    "toleration_tolerates",
    "untolerated_taint",
    "validate_sysctl_patterns",
]
