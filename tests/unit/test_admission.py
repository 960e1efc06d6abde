"""kopflet.lifecycle.admission: the kubelet's admit handlers, one table per check, with upstream's reasons and
messages."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from kopflet.api.spec import Pod, pod_from_body
from kopflet.lifecycle import admission
from kopflet.lifecycle.admission import NodeInfo, Rejection, Taint, admit
from kopflet.nodestatus import setters

GI = 2**30
PREFIX = "Pod was rejected: "


def make_pod(*containers: dict[str, Any], name: str = "p", init: tuple[dict[str, Any], ...] = (),
             labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
             **spec: Any) -> Pod:
    """A pod whose containers are given as partial container bodies (name/image filled in)."""
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels or {},
                     "annotations": annotations or {}},
        "spec": {"containers": [{"name": f"c{i}", "image": "busybox", **c} for i, c in enumerate(containers or ({},))],
                 **spec},
    }
    if init:
        body["spec"]["initContainers"] = [{"name": f"i{i}", "image": "busybox", **c} for i, c in enumerate(init)]
    return pod_from_body(body)


def req(**requests: str) -> dict[str, Any]:
    """A container body part with these requests (``ephemeral_storage`` for ephemeral-storage)."""
    return {"resources": {"requests": {k.replace("_", "-"): v for k, v in requests.items()}}}


def node(**overrides: Any) -> NodeInfo:
    values: dict[str, Any] = {
        "name": "node-1",
        "labels": {"kubernetes.io/hostname": "node-1", "kubernetes.io/os": "linux", "zone": "a", "gen": "5"},
        "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110", "ephemeral-storage": "10Gi"},
        "kernel_version": "6.8.0-1017-azure",
    }
    values.update(overrides)
    return NodeInfo(**values)


def rejected(reason: str, message: str) -> Rejection:
    return Rejection(reason=reason, message=PREFIX + message)


def insufficient(name: str, requested: int, used: int, capacity: int) -> Rejection:
    return rejected(f"OutOf{name}", f"Node didn't have enough resource: {name}, requested: {requested}, "
                                    f"used: {used}, capacity: {capacity}")


AFFINITY = rejected("NodeAffinity",
                    "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector")
TAINTS = rejected("TaintToleration",
                  "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate")
NODE_NAME = rejected("NodeName", "Predicate NodeName failed: node(s) didn't match the requested node name")
NODE_PORTS = rejected("NodePorts",
                      "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports")
OS_LABEL = rejected("PodOSSelectorNodeLabelDoesNotMatch",
                    "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label")
OS_FIELD = rejected("PodOSNotSupported", "Failed to admit pod as the OS field doesn't match node OS")


def sysctl_forbidden(error: str) -> Rejection:
    return rejected("SysctlForbidden", f"forbidden sysctl: {error}")


def others(*requests: dict[str, Any], count: int | None = None) -> list[Pod]:
    """Admitted pods: one per requests body, or `count` pods without requests."""
    if count is not None:
        return [make_pod(name=f"o{i}") for i in range(count)]
    return [make_pod(r, name=f"o{i}") for i, r in enumerate(requests)]


# ---------------------------------------------------------------------------------------------- resources

RESOURCE_CASES = [
    pytest.param(make_pod(req(cpu="1")), node(), others(req(cpu="1")), None, id="cpu fits exactly"),
    pytest.param(make_pod(req(cpu="1", memory="3Gi", ephemeral_storage="10Gi")), node(),
                 others(req(cpu="1", memory="1Gi")), None, id="everything fits exactly"),
    pytest.param(make_pod(req(cpu="3")), node(), others(req(cpu="1")), insufficient("cpu", 3000, 1000, 2000),
                 id="OutOfcpu upstream example"),
    pytest.param(make_pod(req(cpu="1001m")), node(), others(req(cpu="1")), insufficient("cpu", 1001, 1000, 2000),
                 id="OutOfcpu by one millicore"),
    pytest.param(make_pod(req(memory="2Gi")), node(), others(req(memory="3Gi")),
                 insufficient("memory", 2 * GI, 3 * GI, 4 * GI), id="OutOfmemory"),
    pytest.param(make_pod(req(ephemeral_storage="11Gi")), node(), [],
                 insufficient("ephemeral-storage", 11 * GI, 0, 10 * GI), id="OutOfephemeral-storage"),
    pytest.param(make_pod(), node(allocatable={"cpu": "2", "pods": "3"}), others(count=3),
                 insufficient("pods", 1, 3, 3), id="OutOfpods at max-pods"),
    pytest.param(make_pod(), node(allocatable={"cpu": "2", "pods": "3"}), others(count=2), None,
                 id="last pod slot fits"),
    pytest.param(make_pod(req(cpu="5")), node(allocatable={"cpu": "2", "pods": "1"}), others(count=1),
                 insufficient("pods", 1, 1, 1), id="pods checked before cpu"),
    pytest.param(make_pod(), node(allocatable={"cpu": "2"}), [], insufficient("pods", 1, 0, 0),
                 id="no pods allocatable"),
    pytest.param(make_pod(req(cpu="3", memory="5Gi")), node(), [], insufficient("cpu", 3000, 0, 2000),
                 id="cpu reported before memory"),
    pytest.param(make_pod(req(memory="5Gi", ephemeral_storage="20Gi")), node(), [],
                 insufficient("memory", 5 * GI, 0, 4 * GI), id="memory before ephemeral-storage"),
    pytest.param(make_pod(), node(allocatable={"pods": "110"}), others(req(cpu="8")), None,
                 id="nothing requested nothing checked"),
    pytest.param(make_pod(req(memory="1Gi")), node(allocatable={"memory": "2Gi", "pods": "10"}),
                 others(req(cpu="64")), None, id="only requested resources checked"),
    pytest.param(make_pod(req(cpu="500m")), node(), others(req(cpu="1"), req(cpu="600m")),
                 insufficient("cpu", 500, 1600, 2000), id="used sums the admitted pods"),
    pytest.param(make_pod(req(cpu="1"), init=(req(cpu="3"),)), node(), [], insufficient("cpu", 3000, 0, 2000),
                 id="init container max over the sum"),
    pytest.param(make_pod(req(cpu="1"), req(cpu="500m"), init=(req(cpu="1"), req(cpu="1200m"))), node(), [],
                 None, id="sum of containers over the init max"),
    pytest.param(make_pod(req(cpu="1"), init=({"restartPolicy": "Always", **req(cpu="1")}, req(cpu="1500m"))),
                 node(), [], insufficient("cpu", 2500, 0, 2000), id="sidecar adds to later init containers"),
    pytest.param(make_pod(req(cpu="500m"), init=({"restartPolicy": "Always", **req(cpu="1")}, req(cpu="100m"))),
                 node(), others(req(cpu="600m")), insufficient("cpu", 1500, 600, 2000),
                 id="sidecar adds to regular containers"),
    pytest.param(make_pod(req(cpu="1"), overhead={"cpu": "250m"}), node(), others(req(cpu="800m")),
                 insufficient("cpu", 1250, 800, 2000), id="pod overhead added"),
    pytest.param(make_pod(req(cpu="1"), req(cpu="1"), resources={"requests": {"cpu": "1"}}), node(),
                 others(req(cpu="1")), None, id="pod-level requests replace the sum"),
    pytest.param(make_pod(req(memory="1Gi"), resources={"requests": {"memory": "5Gi"}}), node(), [],
                 insufficient("memory", 5 * GI, 0, 4 * GI), id="pod-level memory request"),
    pytest.param(make_pod(req(cpu="1"), name="a"), node(),
                 [*others(req(cpu="1")), make_pod(req(cpu="1"), resources={"requests": {"cpu": "100m"}}, name="pl")],
                 insufficient("cpu", 1000, 1100, 2000), id="admitted pod-level requests count as used"),
    pytest.param(make_pod({"resources": {"requests": {"example.com/gpu": "2"}}}),
                 node(allocatable={"pods": "10", "example.com/gpu": "1"}), [],
                 insufficient("example.com/gpu", 2, 0, 1), id="OutOf extended resource"),
    pytest.param(make_pod({"resources": {"requests": {"example.com/gpu": "1"}}}),
                 node(allocatable={"pods": "10", "example.com/gpu": "1"}),
                 [make_pod({"resources": {"requests": {"example.com/gpu": "1"}}}, name="o")],
                 insufficient("example.com/gpu", 1, 1, 1), id="extended resource used by admitted pods"),
    pytest.param(make_pod({"resources": {"requests": {"example.com/gpu": "1"}}}),
                 node(allocatable={"pods": "10", "example.com/gpu": "0"}), [],
                 insufficient("example.com/gpu", 1, 0, 0), id="extended resource listed at zero"),
    pytest.param(make_pod({"resources": {"requests": {"example.com/gpu": "1"}}}),
                 node(allocatable={"pods": "10"}), [], None,
                 id="extended resource the node does not list is dropped like upstream"),
    pytest.param(make_pod({"resources": {"requests": {"hugepages-2Mi": "4Mi"}}}),
                 node(allocatable={"pods": "10"}), [], insufficient("hugepages-2Mi", 4 * 2**20, 0, 0),
                 id="hugepages missing from allocatable"),
    pytest.param(make_pod({"resources": {"requests": {"b.io/x": "1", "a.io/y": "1"}}}),
                 node(allocatable={"pods": "10", "a.io/y": "0", "b.io/x": "0"}),
                 [], insufficient("a.io/y", 1, 0, 0), id="scalar resources in name order"),
    pytest.param(make_pod(req(cpu="1m")), node(allocatable={"cpu": "1m", "pods": "5"}), [], None,
                 id="one millicore fits"),
    pytest.param(make_pod(req(cpu="0.5m")), node(allocatable={"cpu": "0", "pods": "5"}), [],
                 insufficient("cpu", 1, 0, 0), id="sub-millicore rounds up"),
    pytest.param(make_pod(req(memory="1.5")), node(allocatable={"memory": "1", "pods": "5"}), [],
                 insufficient("memory", 2, 0, 1), id="memory bytes round up"),
]


@pytest.mark.parametrize(("pod", "node_info", "admitted", "expected"), RESOURCE_CASES)
def test_resources(pod: Pod, node_info: NodeInfo, admitted: list[Pod], expected: Rejection | None) -> None:
    assert admit(pod, node_info, admitted) == expected


FACTS = setters.MachineFacts(cpus=2, memory_bytes=4 * GI, ephemeral_storage_bytes=100 * GI)


@pytest.mark.parametrize(("isolation", "reported", "pod", "expected"), [
    pytest.param(True, {}, make_pod(req(ephemeral_storage="1Gi")), None, id="on: fits"),
    pytest.param(False, {}, make_pod(req(ephemeral_storage="1Gi")), insufficient("ephemeral-storage", GI, 0, 0),
                 id="off: no ephemeral-storage on the Node, OutOfephemeral-storage"),
    pytest.param(False, {}, make_pod(req(cpu="1")), None, id="off: a pod not asking for it fits"),
    pytest.param(False, {"ephemeral-storage": "2Gi"}, make_pod(req(ephemeral_storage="1Gi")), None,
                 id="off, stale capacity from before: fits within it"),
    pytest.param(False, {"ephemeral-storage": "2Gi"}, make_pod(req(ephemeral_storage="3Gi")),
                 insufficient("ephemeral-storage", 3 * GI, 0, 2 * GI), id="off, stale capacity: and not beyond"),
])
def test_ephemeral_storage_requests_with_local_storage_capacity_isolation(
        isolation: bool, reported: dict[str, str], pod: Pod, expected: Rejection | None) -> None:
    # Upstream's predicate handler is the same either way; only the Node's allocatable differs
    # (nodestatus MachineInfo with GetCapacity(localStorageCapacityIsolation)).
    allocatable = setters.allocatable(
        setters.capacity(FACTS, 110, local_storage_capacity_isolation=isolation, reported=reported),
        local_storage_capacity_isolation=isolation)
    assert admit(pod, node(allocatable=allocatable), []) == expected


@pytest.mark.parametrize(("reason", "resource"), [
    ("OutOfcpu", "cpu"), ("OutOfmemory", "memory"), ("OutOfephemeral-storage", "ephemeral-storage"),
    ("OutOfpods", "pods"),
])
def test_out_of_reason_constants(reason: str, resource: str) -> None:
    assert getattr(admission, "OUT_OF_" + resource.upper().replace("-", "_")) == reason


def test_pod_requests_are_exact() -> None:
    pod = make_pod(req(cpu="100m"), req(cpu="150m"), init=(req(cpu="200m", memory="1Gi"),),
                   overhead={"memory": "10Mi"})
    assert admission.pod_requests(pod) == {"cpu": Fraction(1, 4), "memory": GI + 10 * 2**20}


# ------------------------------------------------------------------------------------------- node affinity


def affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                                          {"nodeSelectorTerms": list(terms)}}}}


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": operator, **({"values": list(values)} if values else {})}]}


def field(operator: str, *values: str) -> dict[str, Any]:
    return {"matchFields": [{"key": "metadata.name", "operator": operator, "values": list(values)}]}


AFFINITY_CASES = [
    pytest.param({}, True, id="no selector"),
    pytest.param({"nodeSelector": {"zone": "a"}}, True, id="nodeSelector matches"),
    pytest.param({"nodeSelector": {"zone": "a", "gen": "5"}}, True, id="nodeSelector all labels"),
    pytest.param({"nodeSelector": {"zone": "b"}}, False, id="nodeSelector other value"),
    pytest.param({"nodeSelector": {"disk": ""}}, False, id="nodeSelector absent label"),
    pytest.param({"nodeSelector": {"zone": "a", "disk": "ssd"}}, False, id="nodeSelector one label missing"),
    pytest.param(affinity(expr("zone", "In", "b", "a")), True, id="In"),
    pytest.param(affinity(expr("zone", "In", "b")), False, id="In other values"),
    pytest.param(affinity(expr("disk", "In", "ssd")), False, id="In absent label"),
    pytest.param(affinity(expr("zone", "NotIn", "b")), True, id="NotIn"),
    pytest.param(affinity(expr("zone", "NotIn", "a")), False, id="NotIn listed value"),
    pytest.param(affinity(expr("disk", "NotIn", "ssd")), True, id="NotIn absent label matches"),
    pytest.param(affinity(expr("zone", "Exists")), True, id="Exists"),
    pytest.param(affinity(expr("disk", "Exists")), False, id="Exists absent"),
    pytest.param(affinity(expr("disk", "DoesNotExist")), True, id="DoesNotExist"),
    pytest.param(affinity(expr("zone", "DoesNotExist")), False, id="DoesNotExist present"),
    pytest.param(affinity(expr("gen", "Gt", "4")), True, id="Gt"),
    pytest.param(affinity(expr("gen", "Gt", "5")), False, id="Gt equal"),
    pytest.param(affinity(expr("gen", "Lt", "6")), True, id="Lt"),
    pytest.param(affinity(expr("gen", "Lt", "5")), False, id="Lt equal"),
    pytest.param(affinity(expr("zone", "Gt", "1")), False, id="Gt non-numeric label"),
    pytest.param(affinity(expr("disk", "Lt", "9")), False, id="Lt absent label"),
    pytest.param(affinity(expr("gen", "Gt", "4", "3")), False, id="Gt two values does not parse"),
    pytest.param(affinity(expr("gen", "Gt", "x")), False, id="Gt non-integer value does not parse"),
    pytest.param(affinity(expr("zone", "In")), False, id="In without values does not parse"),
    pytest.param(affinity(expr("zone", "Exists", "a")), False, id="Exists with values does not parse"),
    pytest.param(affinity(expr("zone", "Like", "a")), False, id="unknown operator does not parse"),
    pytest.param(affinity({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]},
                                                {"key": "gen", "operator": "In", "values": ["4"]}]}),
                 False, id="expressions are AND-ed"),
    pytest.param(affinity(expr("zone", "In", "b"), expr("gen", "In", "5")), True, id="terms are OR-ed"),
    pytest.param(affinity(expr("zone", "Like", "a"), expr("zone", "In", "a")), True,
                 id="a broken term does not spoil the others"),
    pytest.param(affinity(), False, id="no terms match nothing"),
    pytest.param(affinity({}), False, id="an empty term matches nothing"),
    pytest.param(affinity({}, expr("zone", "In", "a")), True, id="empty term skipped"),
    pytest.param(affinity(field("In", "node-1")), True, id="matchFields metadata.name In"),
    pytest.param(affinity(field("In", "node-2")), False, id="matchFields other node"),
    pytest.param(affinity(field("NotIn", "node-2")), True, id="matchFields NotIn"),
    pytest.param(affinity(field("NotIn", "node-1")), False, id="matchFields NotIn this node"),
    pytest.param(affinity(field("In", "node-1", "node-2")), False, id="matchFields two values do not parse"),
    pytest.param(affinity(field("Exists")), False, id="matchFields Exists does not parse"),
    pytest.param(affinity({**expr("zone", "In", "a"), **field("In", "node-1")}), True, id="labels and fields"),
    pytest.param(affinity({**expr("zone", "In", "a"), **field("In", "node-2")}), False,
                 id="labels match fields do not"),
    pytest.param({"nodeSelector": {"zone": "b"}, **affinity(expr("zone", "In", "a"))}, False,
                 id="nodeSelector and affinity both required"),
    pytest.param({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": expr("zone", "In", "b")}]}}}, True, id="preferred terms ignored"),
]


@pytest.mark.parametrize(("spec", "fits"), AFFINITY_CASES)
def test_node_affinity(spec: dict[str, Any], fits: bool) -> None:
    assert admit(make_pod(**spec), node(), []) == (None if fits else AFFINITY)


# ------------------------------------------------------------------------------------------------ taints

NO_EXEC = Taint("dedicated", "db", "NoExecute")

TAINT_CASES = [
    pytest.param((), [], None, id="no taints"),
    pytest.param((NO_EXEC,), [], TAINTS, id="NoExecute untolerated"),
    pytest.param((Taint("dedicated", "db", "NoSchedule"),), [], None, id="NoSchedule ignored by the kubelet"),
    pytest.param((Taint("dedicated", "db", "PreferNoSchedule"),), [], None, id="PreferNoSchedule ignored"),
    pytest.param((NO_EXEC,), [{"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoExecute"}],
                 None, id="Equal tolerates"),
    pytest.param((NO_EXEC,), [{"key": "dedicated", "value": "db"}], None, id="operator defaults to Equal"),
    pytest.param((NO_EXEC,), [{"key": "dedicated", "operator": "Equal", "value": "web"}], TAINTS,
                 id="Equal other value"),
    pytest.param((NO_EXEC,), [{"key": "dedicated", "operator": "Exists"}], None, id="Exists any value"),
    pytest.param((NO_EXEC,), [{"key": "other", "operator": "Exists"}], TAINTS, id="Exists other key"),
    pytest.param((NO_EXEC,), [{"operator": "Exists"}], None, id="empty key with Exists tolerates all"),
    pytest.param((NO_EXEC,), [{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}], None,
                 id="matching effect"),
    pytest.param((NO_EXEC,), [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}], TAINTS,
                 id="other effect"),
    pytest.param((NO_EXEC,), [{"key": "dedicated", "operator": "Gt", "value": "1"}], TAINTS,
                 id="alpha Lt/Gt operators tolerate nothing"),
    pytest.param((NO_EXEC, Taint("gpu", "", "NoExecute")), [{"key": "dedicated", "operator": "Exists"}], TAINTS,
                 id="every NoExecute taint must be tolerated"),
    pytest.param((NO_EXEC, Taint("gpu", "", "NoExecute")),
                 [{"key": "dedicated", "operator": "Exists"}, {"key": "gpu", "operator": "Exists"}], None,
                 id="each taint by its toleration"),
]


@pytest.mark.parametrize(("taints", "tolerations", "expected"), TAINT_CASES)
def test_taints(taints: tuple[Taint, ...], tolerations: list[dict[str, str]], expected: Rejection | None) -> None:
    assert admit(make_pod(tolerations=tolerations), node(taints=taints), []) == expected


@pytest.mark.parametrize(("pod", "static"), [
    pytest.param(make_pod(), True, id="static flag"),
    pytest.param(make_pod(annotations={"kubernetes.io/config.source": "file"}), False, id="file source annotation"),
])
def test_static_pods_skip_the_taint_check(pod: Pod, static: bool) -> None:
    assert admit(pod, node(taints=(NO_EXEC,)), [], static=static) is None


def test_api_source_pod_is_not_static() -> None:
    pod = make_pod(annotations={"kubernetes.io/config.source": "api"})
    assert admit(pod, node(taints=(NO_EXEC,)), []) == TAINTS


def test_static_pods_still_get_the_other_checks() -> None:
    assert admit(make_pod(req(cpu="3")), node(), [], static=True) == insufficient("cpu", 3000, 0, 2000)
    assert admit(make_pod(nodeSelector={"zone": "b"}), node(), [], static=True) == AFFINITY


def test_untolerated_taint_names_the_taint() -> None:
    gpu = Taint("gpu", "", "NoSchedule")
    pod = make_pod(tolerations=[{"key": "dedicated", "operator": "Exists"}])
    assert admission.untolerated_taint(pod, (NO_EXEC, gpu)) == gpu
    assert admission.untolerated_taint(pod, (NO_EXEC, gpu), effect="NoExecute") is None


# ---------------------------------------------------------------------------------------------------- OS

OS_CASES = [
    pytest.param({}, {}, None, id="nothing said"),
    pytest.param({"kubernetes.io/os": "linux"}, {}, None, id="label linux"),
    pytest.param({"kubernetes.io/os": "windows"}, {}, OS_LABEL, id="label windows"),
    pytest.param({}, {"os": {"name": "linux"}}, None, id="field linux"),
    pytest.param({}, {"os": {"name": "windows"}}, OS_FIELD, id="field windows"),
    pytest.param({"kubernetes.io/os": "windows"}, {"os": {"name": "windows"}}, OS_LABEL, id="label checked first"),
    pytest.param({}, {"nodeSelector": {"kubernetes.io/os": "windows"}}, AFFINITY,
                 id="an os nodeSelector is node affinity"),
]


@pytest.mark.parametrize(("labels", "spec", "expected"), OS_CASES)
def test_os(labels: dict[str, str], spec: dict[str, Any], expected: Rejection | None) -> None:
    assert admit(make_pod(labels=labels, **spec), node(), []) == expected


# ----------------------------------------------------------------------------------------------- sysctls


def sysctls(*names: str, **spec: Any) -> Pod:
    return make_pod(securityContext={"sysctls": [{"name": n, "value": "1"} for n in names]}, **spec)


SYSCTL_CASES = [
    pytest.param(sysctls(), node(), None, id="none"),
    pytest.param(sysctls("kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range"), node(), None, id="safe"),
    pytest.param(sysctls("net.core.somaxconn"), node(), sysctl_forbidden('"net.core.somaxconn" not allowlisted'),
                 id="unsafe"),
    pytest.param(sysctls("net.ipv4.tcp_syncookies", "kernel.msgmax"), node(),
                 sysctl_forbidden('"kernel.msgmax" not allowlisted'), id="first forbidden one reported"),
    pytest.param(sysctls("net.core.somaxconn"), node(allowed_unsafe_sysctls=("net.core.somaxconn",)), None,
                 id="allowed unsafe"),
    pytest.param(sysctls("net.core.somaxconn", "kernel.msgmax"),
                 node(allowed_unsafe_sysctls=("net.core.*", "kernel.msg*")), None, id="allowed unsafe patterns"),
    pytest.param(sysctls("net.ipv6.conf.all.forwarding"), node(allowed_unsafe_sysctls=("net.core.*",)),
                 sysctl_forbidden('"net.ipv6.conf.all.forwarding" not allowlisted'), id="other prefix"),
    pytest.param(sysctls("net/ipv4/ip_local_port_range"), node(), None, id="slash form"),
    pytest.param(sysctls("net/ipv4/conf/eth0.100/rp_filter"), node(allowed_unsafe_sysctls=("net.ipv4.conf.*",)),
                 None, id="slash form with a dotted interface"),
    pytest.param(sysctls("net/core/somaxconn"), node(), sysctl_forbidden('"net.core.somaxconn" not allowlisted'),
                 id="slash form reported dotted"),
    pytest.param(sysctls("net.ipv4.ip_local_port_range", hostNetwork=True), node(),
                 sysctl_forbidden('"net.ipv4.ip_local_port_range" not allowed with host net enabled'),
                 id="net sysctl with host network"),
    pytest.param(sysctls("kernel.shm_rmid_forced", hostIPC=True), node(),
                 sysctl_forbidden('"kernel.shm_rmid_forced" not allowed with host ipc enabled'),
                 id="ipc sysctl with host ipc"),
    pytest.param(sysctls("kernel.shm_rmid_forced", hostNetwork=True), node(), None,
                 id="ipc sysctl with host network"),
    pytest.param(sysctls("kernel.sem", hostIPC=True), node(allowed_unsafe_sysctls=("kernel.sem",)),
                 sysctl_forbidden('"kernel.sem" not allowed with host ipc enabled'), id="allowed unsafe host ipc"),
    pytest.param(sysctls("net.core.somaxconn", hostNetwork=True), node(allowed_unsafe_sysctls=("net.*",)),
                 sysctl_forbidden('"net.core.somaxconn" not allowed with host net enabled'),
                 id="allowed unsafe pattern host net"),
    pytest.param(sysctls("net.ipv4.tcp_rmem"), node(kernel_version="4.14.0"),
                 sysctl_forbidden('"net.ipv4.tcp_rmem" not allowlisted'), id="kernel too old"),
    pytest.param(sysctls("net.ipv4.tcp_rmem"), node(kernel_version="4.15.0-20-generic"), None,
                 id="kernel new enough"),
    pytest.param(sysctls("net.ipv4.tcp_keepalive_time"), node(kernel_version=""),
                 sysctl_forbidden('"net.ipv4.tcp_keepalive_time" not allowlisted'), id="kernel unknown"),
    pytest.param(sysctls("net.ipv4.ping_group_range"), node(kernel_version=""), None,
                 id="ungated with kernel unknown"),
]


@pytest.mark.parametrize(("pod", "node_info", "expected"), SYSCTL_CASES)
def test_sysctls(pod: Pod, node_info: NodeInfo, expected: Rejection | None) -> None:
    assert admit(pod, node_info, []) == expected


@pytest.mark.parametrize(("kernel", "expected_gated"), [
    ("", ()),
    ("garbage", ()),
    ("3.10.0-1160.el7.x86_64", ()),
    ("3.18.0-957.27.2.el7.x86_64", ("net.ipv4.ip_local_reserved_ports",)),
    ("4.5", ("net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_keepalive_intvl",
             "net.ipv4.tcp_keepalive_probes")),
    ("5.15.0-75-generic", ("net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time",
                           "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                           "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
                           "net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_notsent_lowat")),
])
def test_safe_sysctls_by_kernel(kernel: str, expected_gated: tuple[str, ...]) -> None:
    always = ("kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
              "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start")
    assert admission.safe_sysctls(kernel) == always + expected_gated


@pytest.mark.parametrize(("patterns", "error"), [
    (("net.core.somaxconn", "kernel.shm*", "fs.mqueue.*", "kernel.sem", "net/ipv4/tcp_rmem"), None),
    (("kernel.panic",), 'the sysctl "kernel.panic" are not known to be namespaced'),
    (("vm.*",), 'the sysctls "vm.*" are not known to be namespaced'),
    (("*",), 'the sysctls "*" are not known to be namespaced'),
    (("Net.Core",), 'sysctl "Net.Core" must have at most 253 characters and match regex'),
    (("net..core",), 'sysctl "net..core" must have at most 253 characters'),
])
def test_allowed_unsafe_sysctls_are_validated_like_the_kubelet(patterns: tuple[str, ...], error: str | None) -> None:
    if error is None:
        node(allowed_unsafe_sysctls=patterns)
    else:
        with pytest.raises(ValueError, match="^" + error.replace("*", r"\*").replace(".", r"\.")):
            node(allowed_unsafe_sysctls=patterns)


# --------------------------------------------------------------------------------- node name, host ports


@pytest.mark.parametrize(("node_name", "expected"), [
    ("", None), ("node-1", None), ("node-2", NODE_NAME),
])
def test_node_name(node_name: str, expected: Rejection | None) -> None:
    assert admit(make_pod(nodeName=node_name), node(), []) == expected


def ports(*entries: tuple[int, str, str]) -> dict[str, Any]:
    return {"ports": [{"containerPort": 80, "hostPort": p, "protocol": proto, "hostIP": ip}
                      for p, proto, ip in entries]}


HOST_PORT_CASES = [
    pytest.param(ports((8080, "TCP", "")), [ports((8080, "TCP", ""))], NODE_PORTS, id="same port"),
    pytest.param(ports((8080, "TCP", "")), [ports((8081, "TCP", ""))], None, id="other port"),
    pytest.param(ports((8080, "UDP", "")), [ports((8080, "TCP", ""))], None, id="other protocol"),
    pytest.param(ports((8080, "TCP", "10.0.0.1")), [ports((8080, "TCP", "10.0.0.2"))], None, id="other host IPs"),
    pytest.param(ports((8080, "TCP", "10.0.0.1")), [ports((8080, "TCP", "10.0.0.1"))], NODE_PORTS,
                 id="same host IP"),
    pytest.param(ports((8080, "TCP", "10.0.0.1")), [ports((8080, "TCP", "0.0.0.0"))], NODE_PORTS,
                 id="taken on all addresses"),
    pytest.param(ports((8080, "TCP", "")), [ports((8080, "TCP", "10.0.0.1"))], NODE_PORTS,
                 id="wanted on all addresses"),
    pytest.param({"ports": [{"containerPort": 8080}]}, [{"ports": [{"containerPort": 8080}]}], None,
                 id="container ports without host ports"),
]


@pytest.mark.parametrize(("wanted", "taken", "expected"), HOST_PORT_CASES)
def test_host_ports(wanted: dict[str, Any], taken: list[dict[str, Any]], expected: Rejection | None) -> None:
    admitted = [make_pod(t, name=f"o{i}") for i, t in enumerate(taken)]
    assert admit(make_pod(wanted), node(), admitted) == expected


def test_host_ports_of_sidecars_count_and_plain_init_containers_do_not() -> None:
    sidecar = make_pod(init=({"restartPolicy": "Always", **ports((9000, "TCP", ""))},), name="s")
    plain_init = make_pod(init=(ports((9001, "TCP", "")),), name="i")
    assert admit(make_pod(ports((9000, "TCP", ""))), node(), [sidecar]) == NODE_PORTS
    assert admit(make_pod(ports((9001, "TCP", ""))), node(), [plain_init]) is None


# -------------------------------------------------------------------------------------------------- order

PORT = ports((8080, "TCP", ""))
FULL = node(allocatable={"cpu": "2", "pods": "1"}, taints=(NO_EXEC,))  # with one admitted pod: OutOfpods
TAINTED = node(taints=(NO_EXEC,))

ORDER_CASES = [
    pytest.param(sysctls("net.core.somaxconn", labels={"kubernetes.io/os": "windows"}, nodeName="node-2"),
                 FULL, sysctl_forbidden('"net.core.somaxconn" not allowlisted'), id="sysctls before os"),
    pytest.param(make_pod(labels={"kubernetes.io/os": "windows"}, os={"name": "windows"}), FULL, OS_LABEL,
                 id="os before resources"),
    pytest.param(make_pod(os={"name": "windows"}), FULL, OS_FIELD, id="os field before resources"),
    pytest.param(make_pod(nodeSelector={"zone": "b"}), FULL, insufficient("pods", 1, 1, 1),
                 id="resources before affinity"),
    pytest.param(make_pod(PORT, nodeSelector={"zone": "b"}, nodeName="node-2"), TAINTED, AFFINITY,
                 id="affinity before node name"),
    pytest.param(make_pod(PORT, nodeName="node-2"), TAINTED, NODE_NAME, id="node name before ports"),
    pytest.param(make_pod(PORT), TAINTED, NODE_PORTS, id="ports before taints"),
    pytest.param(make_pod(securityContext={"appArmorProfile": {"type": "RuntimeDefault"}}), TAINTED,
                 rejected("TaintToleration", "Predicate TaintToleration failed: node(s) had taints that the pod "
                                             "didn't tolerate"), id="taints before AppArmor"),
]


@pytest.mark.parametrize(("pod", "node_info", "expected"), ORDER_CASES)
def test_check_order(pod: Pod, node_info: NodeInfo, expected: Rejection) -> None:
    """Upstream order: sysctl handler, then OS label, OS field, resources, affinity, node name, ports, taints;
    each case fails every later check too."""
    assert admit(pod, node_info, [make_pod(PORT, name="o")]) == expected


def test_event_message_is_the_bare_message() -> None:
    rejection = admit(make_pod(req(cpu="3")), node(), [])
    assert rejection is not None
    assert rejection.message.startswith("Pod was rejected: ")
    assert rejection.event_message == "Node didn't have enough resource: cpu, requested: 3000, used: 0, capacity: 2000"


# ---------------------------------------------------------------------------------------------------- AppArmor

AA = "container.apparmor.security.beta.kubernetes.io/"
NO_APPARMOR = rejected("AppArmor", "Cannot enforce AppArmor: AppArmor is not enabled on the host")


def aa(kind: str, name: str | None = None) -> dict[str, Any]:
    """A securityContext with an appArmorProfile."""
    return {"appArmorProfile": {"type": kind, **({} if name is None else {"localhostProfile": name})}}


def empty_name(profile: str) -> Rejection:
    return rejected("AppArmor", f"Cannot enforce AppArmor: invalid empty AppArmor profile name: {profile}")


# (pod, AppArmor enabled on the host, the rejection), as upstream's TestValidateBadHost / TestValidateValidHost
# (pkg/security/apparmor/validate_test.go) and the admit handler's reason and message (lifecycle/handlers.go).
APPARMOR_CASES: list[tuple[str, Pod, bool, Rejection | None]] = [
    ("nothing asked, no AppArmor", make_pod(), False, None),
    ("pod Unconfined, no AppArmor", make_pod(securityContext=aa("Unconfined")), False, None),
    ("container Unconfined, no AppArmor", make_pod({"securityContext": aa("Unconfined")}), False, None),
    ("annotation unconfined, no AppArmor", make_pod(annotations={AA + "c0": "unconfined"}), False, None),
    ("pod RuntimeDefault, no AppArmor", make_pod(securityContext=aa("RuntimeDefault")), False, NO_APPARMOR),
    ("pod Localhost, no AppArmor", make_pod(securityContext=aa("Localhost", "k8s-deny")), False, NO_APPARMOR),
    ("container RuntimeDefault, no AppArmor", make_pod({}, {"securityContext": aa("RuntimeDefault")}), False,
     NO_APPARMOR),
    ("init container Localhost, no AppArmor", make_pod(init=({"securityContext": aa("Localhost", "p")},)), False,
     NO_APPARMOR),
    ("ephemeral container, no AppArmor", make_pod(ephemeralContainers=[
        {"name": "dbg", "image": "busybox", "securityContext": aa("RuntimeDefault")}]), False, NO_APPARMOR),
    ("annotation runtime/default, no AppArmor", make_pod(annotations={AA + "c0": "runtime/default"}), False,
     NO_APPARMOR),
    ("annotation localhost/, no AppArmor", make_pod(annotations={AA + "c0": "localhost/k8s-deny"}), False,
     NO_APPARMOR),
    ("an unknown annotation value counts, no AppArmor", make_pod(annotations={AA + "c0": "enforce"}), False,
     NO_APPARMOR),
    ("one annotation not unconfined among others, no AppArmor",
     make_pod({}, {}, annotations={AA + "c0": "unconfined", AA + "c1": "runtime/default"}), False, NO_APPARMOR),
    ("pod RuntimeDefault, AppArmor", make_pod(securityContext=aa("RuntimeDefault")), True, None),
    ("container Localhost, AppArmor", make_pod({"securityContext": aa("Localhost", "k8s-deny")}), True, None),
    ("annotation localhost/ without a name, AppArmor", make_pod(annotations={AA + "c0": "localhost/"}), True,
     empty_name('&{"Localhost" %!q(*string="")}')),
    ("blank Localhost name, AppArmor", make_pod({"securityContext": aa("Localhost", "  ")}), True,
     empty_name('&{"Localhost" %!q(*string="  ")}')),
    ("Localhost without a name, AppArmor", make_pod(securityContext=aa("Localhost")), True,
     empty_name('&{"Localhost" %!q(*string=<nil>)}')),
]


@pytest.mark.parametrize(("pod", "enabled", "expected"), [case[1:] for case in APPARMOR_CASES],
                         ids=[case[0] for case in APPARMOR_CASES])
def test_apparmor(pod: Pod, enabled: bool, expected: Rejection | None) -> None:
    assert admit(pod, node(apparmor_enabled=enabled), []) == expected


def test_apparmor_rejection_event() -> None:
    rejection = admit(make_pod(securityContext=aa("RuntimeDefault")), node(), [])
    assert rejection is not None
    assert (rejection.reason, rejection.event_message) == (
        "AppArmor", "Cannot enforce AppArmor: AppArmor is not enabled on the host")


def test_apparmor_is_not_rechecked_past_pending() -> None:
    """Upstream appArmorAdmitHandler admits a pod whose phase is no longer Pending (a resize's admission)."""
    pod = make_pod(securityContext=aa("RuntimeDefault"))
    assert admit(pod, node(), [], pending=False) is None
    assert admit(pod, node(), []) == NO_APPARMOR


def _expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, **({"values": list(values)} if values else {})}


@pytest.mark.parametrize(("terms", "labels", "node_name", "matches"), [
    ([{"matchExpressions": [_expr("zone", "In", "a", "b")]}], {"zone": "b"}, "", True),
    ([{"matchExpressions": [_expr("zone", "In", "a")]}], {"zone": "b"}, "", False),
    ([{"matchExpressions": [_expr("zone", "In", "a")]}, {"matchExpressions": [_expr("disk", "Exists")]}],
     {"disk": "ssd"}, "", True),
    ([], {"zone": "a"}, "", False),
    ([{}], {"zone": "a"}, "", False),
    ([{"matchExpressions": [_expr("zone", "Unknown")]}], {"zone": "a"}, "", False),
    ([{"matchFields": [_expr("metadata.name", "In", "node-b")]}], {}, "", True),
    ([{"matchFields": [_expr("metadata.name", "In", "node-b")]}], {}, "node-a", False),
    ([{"matchFields": [_expr("metadata.name", "In", "node-a")]}], {}, "node-a", True),
], ids=["In", "not In", "terms OR-ed", "no terms", "empty term", "unparsable", "fields without a name",
        "fields of another node", "fields of this node"])
def test_node_selector_matches(terms: list[dict[str, Any]], labels: dict[str, str], node_name: str,
                               matches: bool) -> None:
    """Upstream corev1.MatchNodeSelectorTerms, as CheckNodeAffinity uses it for PersistentVolumes (labels only)."""
    assert admission.node_selector_matches({"nodeSelectorTerms": terms}, labels, node_name) is matches
