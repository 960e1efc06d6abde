"""kopflet.api.spec: parsing Pod bodies, the apiserver's defaults, every SpecError path, and the container hash."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest

from kopflet.api import spec
from kopflet.api.spec import SpecError, container_hash, default_pull_policy, pod_from_body


def body(**spec_fields: Any) -> dict[str, Any]:
    """A minimal valid Pod body; keyword arguments replace fields of spec."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "shop", "uid": "11111111-2222-3333-4444-555555555555"},
        "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}], **spec_fields},
    }


def with_container(**fields: Any) -> dict[str, Any]:
    return body(containers=[{"name": "app", "image": "nginx:1.27", **fields}])


# ---------------------------------------------------------------------------------------------- defaults


def test_minimal_pod_gets_the_apiserver_defaults() -> None:
    pod = pod_from_body(body())
    assert (pod.name, pod.namespace, pod.uid) == ("web", "shop", "11111111-2222-3333-4444-555555555555")
    assert pod.full_name == "web_shop(11111111-2222-3333-4444-555555555555)"
    assert pod.labels == {} and pod.annotations == {}
    assert pod.deletion_timestamp is None and not pod.is_deleting
    assert pod.deletion_grace_period_seconds is None
    s = pod.spec
    assert s.restart_policy == "Always"
    assert s.termination_grace_period_seconds == 30
    assert s.dns_policy == "ClusterFirst"
    assert s.enable_service_links is True
    assert s.automount_service_account_token is None
    assert (s.host_network, s.host_pid, s.host_ipc, s.share_process_namespace) == (False, False, False, False)
    assert s.init_containers == () and s.volumes == () and s.readiness_gates == ()
    assert s.os_name is None and s.runtime_class_name is None and s.priority is None
    [c] = s.containers
    assert c.name == "app" and c.image == "nginx:1.27"
    assert c.image_pull_policy == "IfNotPresent"
    assert c.termination_message_path == "/dev/termination-log"
    assert c.termination_message_policy == "File"
    assert c.command == () and c.args == () and c.env == () and c.ports == ()
    assert c.resources == spec.Resources()
    assert c.restart_policy is None and not c.is_sidecar
    assert c.hash == container_hash({"name": "app", "image": "nginx:1.27"})
    assert c.raw == {"name": "app", "image": "nginx:1.27"}


def test_missing_namespace_defaults_to_default() -> None:
    b = body()
    del b["metadata"]["namespace"]
    assert pod_from_body(b).namespace == "default"


@pytest.mark.parametrize(("image", "policy"), [
    ("busybox", "Always"),
    ("busybox:latest", "Always"),
    ("docker.io/library/busybox:latest", "Always"),
    ("busybox:1.36", "IfNotPresent"),
    ("localhost:5000/app", "Always"),               # the colon belongs to the registry host: no tag
    ("localhost:5000/app:v2", "IfNotPresent"),
    ("busybox@sha256:" + "a" * 64, "IfNotPresent"),  # digest without tag
    ("busybox:latest@sha256:" + "a" * 64, "Always"),
    ("registry.k8s.io/pause:3.10", "IfNotPresent"),
])
def test_default_pull_policy_follows_the_tag(image: str, policy: str) -> None:
    assert default_pull_policy(image) == policy
    assert pod_from_body(with_container(image=image)).spec.containers[0].image_pull_policy == policy


def test_explicit_pull_policy_wins() -> None:
    assert pod_from_body(with_container(image="busybox", imagePullPolicy="Never")).spec.containers[0] \
        .image_pull_policy == "Never"


def test_full_pod_is_parsed() -> None:
    b = body(
        initContainers=[{"name": "setup", "image": "busybox", "command": ["sh", "-c", "true"]},
                        {"name": "proxy", "image": "envoy:v1", "restartPolicy": "Always"}],
        restartPolicy="OnFailure", terminationGracePeriodSeconds=5, activeDeadlineSeconds=600,
        dnsPolicy="None", dnsConfig={"nameservers": ["1.1.1.1"]}, hostname="h", subdomain="sub",
        hostNetwork=True, hostPID=True, hostIPC=True, shareProcessNamespace=True, nodeName="node-1",
        serviceAccountName="sa", automountServiceAccountToken=False,
        volumes=[{"name": "data", "emptyDir": {}}], securityContext={"runAsUser": 1000},
        readinessGates=[{"conditionType": "example.com/ready"}], priority=100, runtimeClassName="gvisor",
        enableServiceLinks=False, hostAliases=[{"ip": "10.0.0.1", "hostnames": ["db"]}], os={"name": "linux"},
    )
    b["metadata"].update(labels={"app": "web"}, annotations={"note": "x"},
                         deletionTimestamp="2024-05-01T10:00:00Z", deletionGracePeriodSeconds=30)
    b["spec"]["containers"][0].update(
        command=["nginx"], args=["-g", "daemon off;"], workingDir="/srv",
        env=[{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        envFrom=[{"configMapRef": {"name": "cm"}}],
        ports=[{"containerPort": 80, "hostPort": 8080, "name": "http", "hostIP": "127.0.0.1"},
               {"containerPort": 53, "protocol": "UDP"}],
        resources={"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": 1}},
        volumeMounts=[{"name": "data", "mountPath": "/data"}],
        terminationMessagePath="/tmp/msg", terminationMessagePolicy="FallbackToLogsOnError",
        livenessProbe={"httpGet": {"port": 80}}, readinessProbe={"tcpSocket": {"port": 80}},
        startupProbe={"exec": {"command": ["true"]}}, lifecycle={"preStop": {"exec": {"command": ["sleep", "1"]}}},
        securityContext={"privileged": False}, stdin=True, stdinOnce=True, tty=True,
    )
    pod = pod_from_body(b)
    assert pod.labels == {"app": "web"} and pod.annotations == {"note": "x"}
    assert pod.deletion_timestamp == datetime.datetime(2024, 5, 1, 10, 0, tzinfo=datetime.UTC)
    assert pod.is_deleting and pod.deletion_grace_period_seconds == 30
    s = pod.spec
    assert [c.name for c in s.init_containers] == ["setup", "proxy"]
    assert s.init_containers[0].command == ("sh", "-c", "true")
    assert s.init_containers[1].is_sidecar
    assert s.container("proxy") is s.init_containers[1] and s.container("app") is s.containers[0]
    assert s.container("nope") is None
    assert (s.restart_policy, s.termination_grace_period_seconds, s.active_deadline_seconds) == ("OnFailure", 5, 600)
    assert s.dns_policy == "None" and s.dns_config == {"nameservers": ["1.1.1.1"]}
    assert (s.hostname, s.subdomain, s.node_name, s.service_account_name) == ("h", "sub", "node-1", "sa")
    assert (s.host_network, s.host_pid, s.host_ipc, s.share_process_namespace) == (True, True, True, True)
    assert s.automount_service_account_token is False and s.enable_service_links is False
    assert s.volumes == ({"name": "data", "emptyDir": {}},)
    assert s.security_context == {"runAsUser": 1000}
    assert s.readiness_gates == ("example.com/ready",)
    assert (s.priority, s.runtime_class_name, s.os_name) == (100, "gvisor", "linux")
    assert s.host_aliases == ({"ip": "10.0.0.1", "hostnames": ["db"]},)
    c = s.containers[0]
    assert c.command == ("nginx",) and c.args == ("-g", "daemon off;") and c.working_dir == "/srv"
    assert c.env == (spec.EnvVar(name="A", value="1"),
                     spec.EnvVar(name="B", value_from={"fieldRef": {"fieldPath": "metadata.name"}}))
    assert c.env_from == ({"configMapRef": {"name": "cm"}},)
    assert c.ports == (spec.ContainerPort(container_port=80, host_port=8080, name="http", host_ip="127.0.0.1"),
                       spec.ContainerPort(container_port=53, protocol="UDP"))
    assert c.resources == spec.Resources(requests={"cpu": "100m", "memory": "64Mi"}, limits={"cpu": "1"})
    assert c.volume_mounts == ({"name": "data", "mountPath": "/data"},)
    assert (c.termination_message_path, c.termination_message_policy) == ("/tmp/msg", "FallbackToLogsOnError")
    assert c.liveness_probe == {"httpGet": {"port": 80}} and c.readiness_probe == {"tcpSocket": {"port": 80}}
    assert c.startup_probe == {"exec": {"command": ["true"]}}
    assert c.lifecycle == {"preStop": {"exec": {"command": ["sleep", "1"]}}}
    assert c.security_context == {"privileged": False}
    assert (c.stdin, c.stdin_once, c.tty) == (True, True, True)


def test_parsed_pod_is_detached_from_the_body() -> None:
    b = with_container(env=[{"name": "A", "value": "1"}], livenessProbe={"exec": {"command": ["true"]}})
    pod = pod_from_body(b)
    b["spec"]["containers"][0]["livenessProbe"]["exec"]["command"].append("changed")
    b["spec"]["containers"][0]["image"] = "other"
    assert pod.spec.containers[0].liveness_probe == {"exec": {"command": ["true"]}}
    assert pod.spec.containers[0].raw["image"] == "nginx:1.27"


def test_deletion_timestamp_with_offset_and_naive_values() -> None:
    b = body()
    b["metadata"]["deletionTimestamp"] = "2024-05-01T12:00:00+02:00"
    assert pod_from_body(b).deletion_timestamp == datetime.datetime(2024, 5, 1, 10, 0, tzinfo=datetime.UTC)
    b["metadata"]["deletionTimestamp"] = datetime.datetime(2024, 5, 1, 10, 0)
    assert pod_from_body(b).deletion_timestamp == datetime.datetime(2024, 5, 1, 10, 0, tzinfo=datetime.UTC)


def test_ephemeral_containers_are_parsed_like_containers_with_a_target() -> None:
    b = body(initContainers=[{"name": "setup", "image": "busybox"}], ephemeralContainers=[
        {"name": "debugger-abc12", "image": "busybox:1.36", "command": ["sh"], "stdin": True, "tty": True,
         "targetContainerName": "app"},
        {"name": "plain", "image": "busybox:1.36", "targetContainerName": "setup"}])
    s = pod_from_body(b).spec
    debugger, plain = s.ephemeral_containers
    assert (debugger.name, debugger.image, debugger.command, debugger.stdin, debugger.tty) == (
        "debugger-abc12", "busybox:1.36", ("sh",), True, True)
    assert debugger.target_container_name == "app" and plain.target_container_name == "setup"
    assert debugger.hash == container_hash({"name": "debugger-abc12", "image": "busybox:1.36"})
    assert debugger.restart_policy is None and not debugger.is_sidecar
    assert s.container("debugger-abc12") is debugger  # upstream GetContainerSpec covers all three lists
    assert s.is_ephemeral("plain") and not s.is_ephemeral("app") and not s.is_ephemeral("setup")
    assert pod_from_body(body()).spec.ephemeral_containers == ()


def test_target_container_name_is_only_read_for_ephemeral_containers() -> None:
    assert pod_from_body(with_container(targetContainerName="app")).spec.containers[0].target_container_name == ""


# ------------------------------------------------------------------------------------------------ errors


def _set(path: str, value: Any) -> dict[str, Any]:
    """A valid body with one field (dotted path, list indexes as numbers) set; `...` deletes it."""
    b = copy.deepcopy(body(initContainers=[{"name": "init", "image": "busybox"}]))
    keys = path.split(".")
    target: Any = b
    for key in keys[:-1]:
        target = target[int(key)] if key.isdigit() else target.setdefault(key, {})
    last: Any = int(keys[-1]) if keys[-1].isdigit() else keys[-1]
    if value is ...:
        del target[last]
    else:
        target[last] = value
    return b


@pytest.mark.parametrize(("path", "value", "field", "detail"), [
    ("metadata", ..., "metadata", "Required value"),
    ("metadata", [], "metadata", "must be an object"),
    ("metadata.name", ..., "metadata.name", "Required value"),
    ("metadata.name", "", "metadata.name", "Required value"),
    ("metadata.name", 7, "metadata.name", "must be a string"),
    ("metadata.name", "Web_1", "metadata.name", "RFC 1123 subdomain"),
    ("metadata.name", "a" * 254, "metadata.name", "at most 253"),
    ("metadata.namespace", "../etc", "metadata.namespace", "RFC 1123 label"),
    ("metadata.uid", ..., "metadata.uid", "Required value"),
    ("metadata.uid", "a/b", "metadata.uid", "Invalid value"),
    ("metadata.uid", "..", "metadata.uid", "Invalid value"),
    ("metadata.labels", {"a": 1}, "metadata.labels['a']", "must be a string"),
    ("metadata.annotations", "x", "metadata.annotations", "must be an object"),
    ("metadata.deletionTimestamp", "yesterday", "metadata.deletionTimestamp", "RFC 3339"),
    ("metadata.deletionGracePeriodSeconds", -1, "metadata.deletionGracePeriodSeconds", "greater than or equal to 0"),
    ("spec", ..., "spec", "Required value"),
    ("spec.containers", ..., "spec.containers", "at least one container"),
    ("spec.containers", [], "spec.containers", "at least one container"),
    ("spec.containers", {"name": "x"}, "spec.containers", "must be a list"),
    ("spec.containers", "app", "spec.containers", "must be a list"),
    ("spec.containers.0", "app", "spec.containers[0]", "must be an object"),
    ("spec.containers.0.name", ..., "spec.containers[0].name", "Required value"),
    ("spec.containers.0.name", "App", "spec.containers[0].name", "RFC 1123 label"),
    ("spec.containers.0.name", "a/b", "spec.containers[0].name", "RFC 1123 label"),
    ("spec.containers.0.name", "init", "spec.containers[0].name", "Duplicate value: 'init'"),
    ("spec.containers.0.image", ..., "spec.containers[0].image", "Required value"),
    ("spec.containers.0.image", "", "spec.containers[0].image", "Required value"),
    ("spec.containers.0.image", ["nginx"], "spec.containers[0].image", "must be a string"),
    ("spec.containers.0.image", " nginx", "spec.containers[0].image", "whitespace"),
    ("spec.containers.0.imagePullPolicy", "Sometimes", "spec.containers[0].imagePullPolicy", "Unsupported value"),
    ("spec.containers.0.command", "nginx -g", "spec.containers[0].command", "must be a list"),
    ("spec.containers.0.args", ["-v", 3], "spec.containers[0].args[1]", "must be a string"),
    ("spec.containers.0.workingDir", 1, "spec.containers[0].workingDir", "must be a string"),
    ("spec.containers.0.env", [{"value": "1"}], "spec.containers[0].env[0].name", "Required value"),
    ("spec.containers.0.env", [{"name": "A", "value": 1}], "spec.containers[0].env[0].value", "must be a string"),
    ("spec.containers.0.env", [{"name": "A", "valueFrom": "x"}], "spec.containers[0].env[0].valueFrom",
     "must be an object"),
    ("spec.containers.0.envFrom", ["x"], "spec.containers[0].envFrom[0]", "must be an object"),
    ("spec.containers.0.ports", [{"name": "http"}], "spec.containers[0].ports[0].containerPort", "Required value"),
    ("spec.containers.0.ports", [{"containerPort": "80"}], "spec.containers[0].ports[0].containerPort",
     "must be an integer"),
    ("spec.containers.0.ports", [{"containerPort": 0}], "spec.containers[0].ports[0].containerPort",
     "greater than or equal to 1"),
    ("spec.containers.0.ports", [{"containerPort": 70000}], "spec.containers[0].ports[0].containerPort",
     "less than or equal to 65535"),
    ("spec.containers.0.ports", [{"containerPort": 80, "hostPort": -1}], "spec.containers[0].ports[0].hostPort",
     "greater than or equal to 0"),
    ("spec.containers.0.ports", [{"containerPort": 80, "protocol": "ICMP"}], "spec.containers[0].ports[0].protocol",
     "Unsupported value"),
    ("spec.containers.0.resources", [], "spec.containers[0].resources", "must be an object"),
    ("spec.containers.0.resources", {"limits": {"cpu": True}}, "spec.containers[0].resources.limits.cpu",
     "must be a quantity"),
    ("spec.containers.0.volumeMounts", "data", "spec.containers[0].volumeMounts", "must be a list"),
    ("spec.containers.0.terminationMessagePath", 5, "spec.containers[0].terminationMessagePath", "must be a string"),
    ("spec.containers.0.terminationMessagePolicy", "Logs", "spec.containers[0].terminationMessagePolicy",
     "Unsupported value"),
    ("spec.containers.0.livenessProbe", "yes", "spec.containers[0].livenessProbe", "must be an object"),
    ("spec.containers.0.lifecycle", [], "spec.containers[0].lifecycle", "must be an object"),
    ("spec.containers.0.securityContext", 1, "spec.containers[0].securityContext", "must be an object"),
    ("spec.containers.0.tty", "true", "spec.containers[0].tty", "must be true or false"),
    ("spec.containers.0.restartPolicy", "Sometimes", "spec.containers[0].restartPolicy", "Unsupported value"),
    ("spec.containers.0.restartPolicy", "", "spec.containers[0].restartPolicy", "Unsupported value: ''"),
    ("spec.initContainers.0.restartPolicy", "Sometimes", "spec.initContainers[0].restartPolicy", "Unsupported value"),
    ("spec.containers.0.restartPolicyRules", [{"action": "Restart", "exitCodes": {"operator": "In", "values": [1]}}],
     "spec.containers[0].restartPolicy", "Required value: must specify restartPolicy when restart rules are used"),
    ("spec.initContainers.0.restartPolicyRules",
     [{"action": "Restart", "exitCodes": {"operator": "In", "values": [1]}}],
     "spec.initContainers[0].restartPolicy", "Required value: must specify restartPolicy"),
    ("spec.containers.0.restartPolicyRules", {"action": "Restart"}, "spec.containers[0].restartPolicyRules",
     "must be a list"),
    ("spec.initContainers.0.image", ..., "spec.initContainers[0].image", "Required value"),
    ("spec.initContainers", {}, "spec.initContainers", "must be a list"),
    ("spec.ephemeralContainers", {}, "spec.ephemeralContainers", "must be a list"),
    ("spec.ephemeralContainers", [{"name": "debug"}], "spec.ephemeralContainers[0].image", "Required value"),
    ("spec.ephemeralContainers", [{"name": "app", "image": "busybox"}], "spec.ephemeralContainers[0].name",
     "Duplicate value: 'app'"),
    ("spec.ephemeralContainers", [{"name": "debug", "image": "busybox", "restartPolicy": "Always"}],
     "spec.ephemeralContainers[0].restartPolicy", "Forbidden: cannot be set for an Ephemeral Container"),
    ("spec.ephemeralContainers", [{"name": "debug", "image": "busybox", "restartPolicyRules": [
        {"action": "Restart", "exitCodes": {"operator": "In", "values": [1]}}]}],
     "spec.ephemeralContainers[0].restartPolicyRules", "Forbidden: cannot be set for an Ephemeral Container"),
    ("spec.ephemeralContainers", [{"name": "debug", "image": "busybox", "targetContainerName": "nope"}],
     "spec.ephemeralContainers[0].targetContainerName", "Not found: 'nope'"),
    ("spec.ephemeralContainers", [{"name": "d1", "image": "busybox"}, {"name": "d2", "image": "busybox",
                                                                       "targetContainerName": "d1"}],
     "spec.ephemeralContainers[1].targetContainerName", "Not found: 'd1'"),
    ("spec.ephemeralContainers", [{"name": "debug", "image": "busybox", "targetContainerName": 1}],
     "spec.ephemeralContainers[0].targetContainerName", "must be a string"),
    ("spec.restartPolicy", "Sometimes", "spec.restartPolicy", 'supported values: "Always", "OnFailure", "Never"'),
    ("spec.terminationGracePeriodSeconds", "30", "spec.terminationGracePeriodSeconds", "must be an integer"),
    ("spec.terminationGracePeriodSeconds", -5, "spec.terminationGracePeriodSeconds", "greater than or equal to 0"),
    ("spec.terminationGracePeriodSeconds", True, "spec.terminationGracePeriodSeconds", "must be an integer"),
    ("spec.activeDeadlineSeconds", 0, "spec.activeDeadlineSeconds", "greater than or equal to 1"),
    ("spec.dnsPolicy", "Cluster", "spec.dnsPolicy", "Unsupported value"),
    ("spec.dnsConfig", "1.1.1.1", "spec.dnsConfig", "must be an object"),
    ("spec.hostNetwork", "yes", "spec.hostNetwork", "must be true or false"),
    ("spec.hostname", 1, "spec.hostname", "must be a string"),
    ("spec.volumes", [1], "spec.volumes[0]", "must be an object"),
    ("spec.securityContext", [], "spec.securityContext", "must be an object"),
    ("spec.readinessGates", [{}], "spec.readinessGates[0].conditionType", "Required value"),
    ("spec.priority", 1.5, "spec.priority", "must be an integer"),
    ("spec.enableServiceLinks", 1, "spec.enableServiceLinks", "must be true or false"),
    ("spec.os", "linux", "spec.os", "must be an object"),
])
def test_spec_errors_name_the_field(path: str, value: Any, field: str, detail: str) -> None:
    with pytest.raises(SpecError) as info:
        pod_from_body(_set(path, value))
    assert info.value.field == field
    assert detail in info.value.detail
    assert str(info.value) == f"{field}: {info.value.detail}"


def _rules(*rules: Any) -> dict[str, Any]:
    return with_container(restartPolicy="Never", restartPolicyRules=list(rules))


def _rule(operator: Any = "In", values: Any = (42,), action: Any = "Restart") -> dict[str, Any]:
    return {"action": action, "exitCodes": {"operator": operator, "values": list(values)}}


RULES = "spec.containers[0].restartPolicyRules"


@pytest.mark.parametrize(("pod_body", "field", "detail"), [
    (_rules(*[_rule()] * 21), RULES, "Too many: 21: must have at most 20 items"),
    (_rules("Restart"), f"{RULES}[0]", "must be an object"),
    (_rules({"exitCodes": {"operator": "In", "values": [1]}}), f"{RULES}[0].action", "Required value"),
    (_rules(_rule(action="Retry")), f"{RULES}[0].action",
     'supported values: "Restart", "RestartAllContainers"'),
    (_rules({"action": "Restart"}), f"{RULES}[0].exitCodes", "Required value: must be specified"),
    (_rules({"action": "Restart", "exitCodes": [1]}), f"{RULES}[0].exitCodes", "must be an object"),
    (_rules(_rule(operator=None)), f"{RULES}[0].exitCodes.operator", "Required value"),
    (_rules(_rule(operator="Equals")), f"{RULES}[0].exitCodes.operator", 'supported values: "In", "NotIn"'),
    (_rules(_rule(values=range(256))), f"{RULES}[0].exitCodes.values", "Too many: 256: must have at most 255 items"),
    (_rules(_rule(values=["42"])), f"{RULES}[0].exitCodes.values[0]", "must be an integer"),
    (_rules(_rule(values=[True])), f"{RULES}[0].exitCodes.values[0]", "must be an integer"),
    (_rules(_rule(values=[None])), f"{RULES}[0].exitCodes.values[0]", "must be an integer"),
    (_rules(_rule(values=[2**31])), f"{RULES}[0].exitCodes.values[0]", "less than or equal to 2147483647"),
    (_rules(_rule(), _rule(values=[1.5])), f"{RULES}[1].exitCodes.values[0]", "must be an integer"),
], ids=str)
def test_restart_rule_errors_name_the_field(pod_body: dict[str, Any], field: str, detail: str) -> None:
    """The apiserver's `validateContainerRestartPolicy`, for bodies that bypass it (static pods)."""
    with pytest.raises(SpecError) as info:
        pod_from_body(pod_body)
    assert info.value.field == field
    assert detail in info.value.detail


def test_container_restart_policy_and_rules_are_parsed() -> None:
    b = body(containers=[{"name": "app", "image": "nginx:1.27", "restartPolicy": "Never", "restartPolicyRules": [
                 {"action": "Restart", "exitCodes": {"operator": "In", "values": [42, 43]}},
                 {"action": "RestartAllContainers", "exitCodes": {"operator": "NotIn", "values": []}}]},
                         {"name": "plain", "image": "nginx:1.27", "restartPolicy": "OnFailure"}],
             initContainers=[{"name": "setup", "image": "busybox", "restartPolicy": "OnFailure",
                              "restartPolicyRules": [{"action": "Restart",
                                                      "exitCodes": {"operator": "NotIn", "values": [0]}}]},
                             {"name": "once", "image": "busybox", "restartPolicy": "Never"},
                             {"name": "proxy", "image": "envoy:v1", "restartPolicy": "Always", "restartPolicyRules": [
                                 {"action": "Restart", "exitCodes": {"operator": "In", "values": [1]}}]}])
    s = pod_from_body(b).spec
    app, plain = s.containers
    assert app.restart_policy == "Never" and not app.is_sidecar
    assert app.restart_policy_rules == (
        spec.RestartRule(action="Restart", operator="In", values=(42, 43)),
        spec.RestartRule(action="RestartAllContainers", operator="NotIn", values=()))
    assert (plain.restart_policy, plain.restart_policy_rules) == ("OnFailure", ())
    setup, once, proxy = s.init_containers
    # Init containers may have any container restartPolicy now (ContainerRestartRules); only Always is a sidecar.
    assert (setup.restart_policy, setup.is_sidecar, once.restart_policy, once.is_sidecar) == (
        "OnFailure", False, "Never", False)
    assert setup.restart_policy_rules == (spec.RestartRule(action="Restart", operator="NotIn", values=(0,)),)
    assert proxy.is_sidecar and len(proxy.restart_policy_rules) == 1
    assert pod_from_body(body()).spec.containers[0].restart_policy_rules == ()
    # Rules do not change the container hash: upstream hashes name and image only.
    assert app.hash == container_hash({"name": "app", "image": "nginx:1.27"})


IN_42 = spec.RestartRule(action="Restart", operator="In", values=(42, 50, 60))
NOT_IN_012 = spec.RestartRule(action="Restart", operator="NotIn", values=(0, 1, 2))
ALL_IN_42 = spec.RestartRule(action="RestartAllContainers", operator="In", values=(42,))


def _container(policy: str | None = None, *rules: spec.RestartRule) -> spec.ContainerSpec:
    return spec.ContainerSpec(name="c", image="busybox", image_pull_policy="IfNotPresent", hash="0",
                              restart_policy=policy, restart_policy_rules=rules)


def _pod_spec(policy: str) -> spec.PodSpec:
    return spec.PodSpec(containers=(_container(),), restart_policy=policy)


@pytest.mark.parametrize(("container", "pod_policy", "exit_code", "expected"), [
    # upstream TestContainerHasRestartablePolicy (pkg/api/v1/pod/util_test.go)
    (_container("Never", IN_42), "Always", 42, True),
    (_container("Never", NOT_IN_012), "Always", 99, True),
    (_container("Never", spec.RestartRule(action="Restart", operator="In", values=(10, 20))), "Always", 30, False),
    (_container("Never", spec.RestartRule(action="Restart", operator="NotIn", values=(10, 20))), "Always", 10, False),
    (_container("Always"), "Never", 0, True),
    (_container("OnFailure"), "Never", 0, False),
    (_container("OnFailure"), "Never", 1, True),
    (_container("Never"), "Always", 1, False),
    (_container(), "Always", 0, True),
    (_container(), "OnFailure", 1, True),
    (_container(), "OnFailure", 0, False),
    (_container(), "Never", 1, False),
    # no rule matches: the container's own policy, not the pod's
    (_container("OnFailure", IN_42), "Never", 3, True),
    (_container("OnFailure", IN_42), "Always", 0, False),
    (_container("Always", IN_42), "Never", 0, True),
    # the first match wins; RestartAllContainers restarts (RestartAllContainersOnContainerExits on at 1.37)
    (_container("Never", ALL_IN_42, spec.RestartRule(action="Restart", operator="NotIn", values=(42,))),
     "Always", 42, True),
    (_container("Never", ALL_IN_42), "Never", 42, True),
    (_container("Never", ALL_IN_42), "Always", 41, False),
    (_container("OnFailure", ALL_IN_42), "Never", 42, True),
    (_container("Never", NOT_IN_012, IN_42), "Never", 42, True),
    # negative exit codes are matched like any other (int32 on the API)
    (_container("Never", spec.RestartRule(action="Restart", operator="In", values=(-1,))), "Never", -1, True),
], ids=str)
def test_container_should_restart(container: spec.ContainerSpec, pod_policy: str, exit_code: int,
                                  expected: bool) -> None:
    assert spec.container_should_restart(container, _pod_spec(pod_policy), exit_code) is expected


def test_matching_restart_rule_is_the_first_match() -> None:
    """Upstream TestFindMatchingContainerRestartRule."""
    in_42_only = spec.RestartRule(action="Restart", operator="In", values=(42,))
    assert spec.matching_restart_rule(_container("Never", IN_42), 42) is IN_42
    assert spec.matching_restart_rule(_container("Never", NOT_IN_012), 99) is NOT_IN_012
    assert spec.matching_restart_rule(_container("Never", IN_42, in_42_only), 42) is IN_42
    assert spec.matching_restart_rule(_container("Never", IN_42), 100) is None
    assert spec.matching_restart_rule(_container(), 0) is None


def test_effective_restart_policy() -> None:
    assert spec.effective_restart_policy(_container("Never", IN_42), _pod_spec("Always")) == "Never"
    assert spec.effective_restart_policy(_container(), _pod_spec("OnFailure")) == "OnFailure"


def test_body_itself_must_be_a_mapping() -> None:
    with pytest.raises(SpecError, match="must be an object"):
        pod_from_body(["not", "a", "pod"])  # type: ignore[arg-type]


def test_duplicate_names_across_init_and_regular_containers() -> None:
    b = body(initContainers=[{"name": "app", "image": "busybox"}])
    with pytest.raises(SpecError) as info:
        pod_from_body(b)
    assert str(info.value) == "spec.containers[0].name: Duplicate value: 'app'"


# -------------------------------------------------------------------------------------------------- hash


def test_hash_encoding_matches_an_upstream_test_vector() -> None:
    # Upstream TestHashContainer (before 1.31, whole-container JSON) pinned 0x3c42280f for this JSON;
    # it proves the JSON -> spew -> fnv-1a pipeline that the current name+image hash also uses.
    go_json = (b'{"name":"test_container","image":"foo/image:v1","args":["/bin/sh","-c","echo abc"],'
               b'"ports":[{"containerPort":8001}],"resources":{}}')
    assert spec._fnv1a_32_of_spewed_bytes(go_json) == 0x3C42280F


@pytest.mark.parametrize(("container", "expected"), [
    ({"name": "foo1", "image": "busybox"}, "3e36954e"),
    ({"name": "test_container", "image": "foo/image:v1"}, container_hash({"image": "foo/image:v1",
                                                                             "name": "test_container"})),
])
def test_hash_is_stable(container: dict[str, Any], expected: str) -> None:
    assert container_hash(container) == expected
    assert container_hash(dict(reversed(list(container.items())))) == expected


def test_hash_changes_with_name_or_image_only() -> None:
    base = {"name": "app", "image": "nginx:1.27", "args": ["a"], "resources": {"limits": {"cpu": "1"}}}
    h = container_hash(base)
    assert h == container_hash({**base, "args": ["b"], "env": [{"name": "X", "value": "1"}]})
    assert h == container_hash({**base, "terminationMessagePath": "/dev/termination-log"})  # a new default
    assert h != container_hash({**base, "image": "nginx:1.28"})
    assert h != container_hash({**base, "name": "app2"})
