"""kopflet.envvars.container_env: `$(VAR)` expansion (upstream expand_test.go cases) and makeEnvironmentVariables rules.

One base pod; each case gives a container's env/envFrom and the fetched ConfigMaps/Secrets, and states the
whole resolved environment (or the error).
"""

from __future__ import annotations

from typing import Any

import pytest

from kopflet.api.spec import Pod, pod_from_body
from kopflet.envvars import container_env
from kopflet.envvars.container_env import EnvError
from kopflet.nodestatus import setters

# ------------------------------------------------------------------------------------------------ expansion

CONTEXT = {"VAR_A": "A", "VAR_B": "B", "VAR_EMPTY": "", "VAR_REF": "$(VAR_A)"}


@pytest.mark.parametrize(("template", "expected"), [
    ("$(VAR_A)", "A"),
    ("___$(VAR_A)___", "___A___"),
    ("$(VAR_A)-$(VAR_B)", "A-B"),
    ("$(VAR_A)$(VAR_A)", "AA"),
    ("$(VAR_EMPTY)", ""),
    ("$(VAR_REF)", "$(VAR_A)"),          # no recursive expansion
    ("$(VAR_NOPE)", "$(VAR_NOPE)"),      # unknown references stay as written
    ("$$(VAR_A)", "$(VAR_A)"),           # $$ escapes
    ("$$$(VAR_A)", "$A"),
    ("$$$$", "$$"),
    ("$$", "$"),
    ("$", "$"),
    ("foo$", "foo$"),
    ("$VAR_A", "$VAR_A"),                # a $ not followed by ( is kept
    ("$(VAR_A", "$(VAR_A"),              # incomplete reference
    ("$(", "$("),
    ("$()", "$()"),
    ("no refs", "no refs"),
    ("", ""),
])
def test_expand(template: str, expected: str) -> None:
    assert container_env.expand(template, CONTEXT) == expected


def test_mapping_for_looks_in_order() -> None:
    lookup = container_env.mapping_for({"A": "first"}, {"A": "second", "B": "b"})
    assert (lookup("A"), lookup("B"), lookup("C")) == ("first", "b", "$(C)")


# ---------------------------------------------------------------------------------------------- resolution

SERVICES = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "SHARED": "from-service"}
CMS: dict[str, dict[str, str] | None] = {"cm": {"SHARED": "from-cm", "CM_ONLY": "c", "key": "cm-value"},
                                         "gone": None}
SECRETS: dict[str, dict[str, str] | None] = {"sec": {"password": "hunter2"}, "nosec": None}
ALLOCATABLE = {"cpu": "4", "memory": "8Gi", "ephemeral-storage": "100Gi"}


def make_pod(env: list[dict[str, Any]] | None = None, env_from: list[dict[str, Any]] | None = None,
             resources: dict[str, Any] | None = None) -> Pod:
    container: dict[str, Any] = {"name": "app", "image": "busybox", "env": env or [], "envFrom": env_from or []}
    if resources is not None:
        container["resources"] = resources
    return pod_from_body({
        "metadata": {"name": "web", "namespace": "shop", "uid": "uid-1", "labels": {"app": "web"},
                     "annotations": {"team": "blue", "example.com/owner": "me"}},
        "spec": {"nodeName": "node-1", "serviceAccountName": "builder", "containers": [container],
                 "initContainers": [{"name": "setup", "image": "busybox",
                                     "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "init-sec",
                                                                                          "key": "k"}}}]}]},
    })


def resolve(pod: Pod, **kwargs: Any) -> list[tuple[str, str]]:
    args: dict[str, Any] = {"config_maps": CMS, "secrets": SECRETS, "host_ips": ("192.168.1.10", "fd00::10"),
                            "pod_ips": ("10.244.0.5", "fd00:244::5"), "service_env": SERVICES,
                            "node_allocatable": ALLOCATABLE}
    args.update(kwargs)
    return container_env.resolve_env(pod, pod.spec.containers[0], **args)


def field(path: str) -> dict[str, Any]:
    return {"valueFrom": {"fieldRef": {"fieldPath": path}}}


def resource(name: str, divisor: str | None = None) -> dict[str, Any]:
    ref: dict[str, Any] = {"resource": name}
    if divisor is not None:
        ref["divisor"] = divisor
    return {"valueFrom": {"resourceFieldRef": ref}}


def key_ref(kind: str, name: str, key: str, optional: bool | None = None) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": name, "key": key}
    if optional is not None:
        ref["optional"] = optional
    return {"valueFrom": {kind: ref}}


CASES: list[tuple[str, dict[str, Any], list[tuple[str, str]]]] = [
    ("service env only", {}, [("KUBERNETES_SERVICE_HOST", "10.96.0.1"), ("SHARED", "from-service")]),
    ("envFrom overrides service env, env overrides envFrom",
     {"env_from": [{"configMapRef": {"name": "cm"}}], "env": [{"name": "SHARED", "value": "from-env"}]},
     [("SHARED", "from-env"), ("CM_ONLY", "c"), ("key", "cm-value"), ("KUBERNETES_SERVICE_HOST", "10.96.0.1")]),
    ("envFrom prefix",
     {"env_from": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}, {"secretRef": {"name": "sec"}}]},
     [("CM_SHARED", "from-cm"), ("CM_CM_ONLY", "c"), ("CM_key", "cm-value"), ("password", "hunter2"),
      ("KUBERNETES_SERVICE_HOST", "10.96.0.1"), ("SHARED", "from-service")]),
    ("optional missing envFrom is skipped",
     {"env_from": [{"configMapRef": {"name": "gone", "optional": True}},
                   {"secretRef": {"name": "nosec", "optional": True}}]},
     [("KUBERNETES_SERVICE_HOST", "10.96.0.1"), ("SHARED", "from-service")]),
    ("later entries see earlier ones, envFrom and service env; not later ones",
     {"env_from": [{"configMapRef": {"name": "cm"}}],
      "env": [{"name": "FIRST", "value": "1:$(SECOND)"}, {"name": "SECOND", "value": "2"},
              {"name": "THIRD", "value": "$(FIRST)/$(SECOND)/$(CM_ONLY)/$(KUBERNETES_SERVICE_HOST)/$$(SECOND)"},
              {"name": "EMPTY", "value": ""}]},
     [("SHARED", "from-cm"), ("CM_ONLY", "c"), ("key", "cm-value"), ("FIRST", "1:$(SECOND)"), ("SECOND", "2"),
      ("THIRD", "1:$(SECOND)/2/c/10.96.0.1/$(SECOND)"), ("EMPTY", ""), ("KUBERNETES_SERVICE_HOST", "10.96.0.1")]),
    ("a redefined name keeps its first position and takes the last value",
     {"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}, {"name": "A", "value": "$(A)$(B)"}]},
     [("A", "12"), ("B", "2"), ("KUBERNETES_SERVICE_HOST", "10.96.0.1"), ("SHARED", "from-service")]),
    ("fieldRef",
     {"env": [{"name": "NAME", **field("metadata.name")}, {"name": "NS", **field("metadata.namespace")},
              {"name": "UID", **field("metadata.uid")}, {"name": "APP", **field("metadata.labels['app']")},
              {"name": "NOLABEL", **field("metadata.labels['nope']")},
              {"name": "OWNER", **field("metadata.annotations['example.com/owner']")},
              {"name": "NODE", **field("spec.nodeName")}, {"name": "SA", **field("spec.serviceAccountName")},
              {"name": "HOST_IP", **field("status.hostIP")}, {"name": "HOST_IPS", **field("status.hostIPs")},
              {"name": "POD_IP", **field("status.podIP")}, {"name": "POD_IPS", **field("status.podIPs")},
              {"name": "VAL", "value": "$(POD_IP)"}]},
     [("NAME", "web"), ("NS", "shop"), ("UID", "uid-1"), ("APP", "web"), ("NOLABEL", ""), ("OWNER", "me"),
      ("NODE", "node-1"), ("SA", "builder"), ("HOST_IP", "192.168.1.10"), ("HOST_IPS", "192.168.1.10,fd00::10"),
      ("POD_IP", "10.244.0.5"), ("POD_IPS", "10.244.0.5,fd00:244::5"), ("VAL", "10.244.0.5"),
      ("KUBERNETES_SERVICE_HOST", "10.96.0.1"), ("SHARED", "from-service")]),
    ("configMapKeyRef and secretKeyRef, values not expanded",
     {"env": [{"name": "CM", **key_ref("configMapKeyRef", "cm", "key")},
              {"name": "PW", **key_ref("secretKeyRef", "sec", "password")},
              {"name": "RAW", **key_ref("configMapKeyRef", "cm", "CM_ONLY")}]},
     [("CM", "cm-value"), ("PW", "hunter2"), ("RAW", "c"), ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
      ("SHARED", "from-service")]),
    ("optional missing sources and keys leave the variable unset",
     {"env": [{"name": "A", **key_ref("configMapKeyRef", "gone", "k", optional=True)},
              {"name": "B", **key_ref("configMapKeyRef", "cm", "nokey", optional=True)},
              {"name": "C", **key_ref("secretKeyRef", "nosec", "k", optional=True)},
              {"name": "D", **key_ref("secretKeyRef", "sec", "nokey", optional=True)},
              {"name": "E", "value": "[$(A)]"}]},
     [("E", "[$(A)]"), ("KUBERNETES_SERVICE_HOST", "10.96.0.1"), ("SHARED", "from-service")]),
]


@pytest.mark.parametrize(("change", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_resolve_env(change: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    assert resolve(make_pod(**change)) == expected


RESOURCE_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("limits.cpu in cores, rounded up", resource("limits.cpu"), "1"),
    ("limits.cpu in millicores", resource("limits.cpu", "1m"), "500"),
    ("requests.cpu", resource("requests.cpu", "1m"), "250"),
    ("limits.memory in Mi", resource("limits.memory", "1Mi"), "128"),
    ("requests.memory in bytes", resource("requests.memory"), str(64 * 2**20)),
    ("unset limit: node allocatable", resource("limits.ephemeral-storage", "1Gi"), "100"),
    ("unset request: 0", resource("requests.ephemeral-storage"), "0"),
]


@pytest.mark.parametrize(("ref", "expected"), [c[1:] for c in RESOURCE_CASES], ids=[c[0] for c in RESOURCE_CASES])
def test_resource_field_ref(ref: dict[str, Any], expected: str) -> None:
    pod = make_pod(env=[{"name": "V", **ref}], resources={"requests": {"cpu": "250m", "memory": "64Mi"},
                                                          "limits": {"cpu": "500m", "memory": "128Mi"}})
    assert resolve(pod, service_env={}) == [("V", expected)]


def test_unset_cpu_and_memory_limits_default_to_node_allocatable() -> None:
    pod = make_pod(env=[{"name": "CPU", **resource("limits.cpu")}, {"name": "MEM", **resource("limits.memory", "1Gi")}])
    assert resolve(pod, service_env={}) == [("CPU", "4"), ("MEM", "8")]
    assert resolve(pod, service_env={}, node_allocatable={}) == [("CPU", "0"), ("MEM", "0")]


@pytest.mark.parametrize(("isolation", "limits", "expected"), [
    pytest.param(True, {}, "90", id="on: node allocatable (100Gi less nodefs.available 10%)"),
    pytest.param(False, {}, "0", id="off: the Node has no ephemeral-storage, so 0"),
    pytest.param(False, {"ephemeral-storage": "2Gi"}, "2", id="off: the container's own limit still reads"),
])
def test_unset_ephemeral_storage_limit_follows_local_storage_capacity_isolation(
        isolation: bool, limits: dict[str, str], expected: str) -> None:
    # upstream defaultPodLimitsForDownwardAPI merges the Node's allocatable, which has ephemeral-storage only
    # with localStorageCapacityIsolation on; ExtractContainerResourceValue reads an absent limit as 0.
    facts = setters.MachineFacts(cpus=4, memory_bytes=8 * 2**30, ephemeral_storage_bytes=100 * 2**30)
    allocatable = setters.allocatable(
        setters.capacity(facts, 110, local_storage_capacity_isolation=isolation),
        local_storage_capacity_isolation=isolation)
    pod = make_pod(env=[{"name": "DISK", **resource("limits.ephemeral-storage", "1Gi")}],
                   resources={"limits": limits})
    assert resolve(pod, service_env={}, node_allocatable=allocatable) == [("DISK", expected)]


ERROR_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("missing ConfigMap", {"env": [{"name": "A", **key_ref("configMapKeyRef", "gone", "k")}]},
     'configmap "gone" not found'),
    ("missing ConfigMap key", {"env": [{"name": "A", **key_ref("configMapKeyRef", "cm", "nokey")}]},
     "couldn't find key nokey in ConfigMap shop/cm"),
    ("missing Secret", {"env": [{"name": "A", **key_ref("secretKeyRef", "nosec", "k")}]}, 'secret "nosec" not found'),
    ("missing Secret key", {"env": [{"name": "A", **key_ref("secretKeyRef", "sec", "nokey", optional=False)}]},
     "couldn't find key nokey in Secret shop/sec"),
    ("missing envFrom ConfigMap", {"env_from": [{"configMapRef": {"name": "gone"}}]}, 'configmap "gone" not found'),
    ("missing envFrom Secret", {"env_from": [{"secretRef": {"name": "nosec", "optional": False}}]},
     'secret "nosec" not found'),
    ("unsupported fieldPath", {"env": [{"name": "A", **field("spec.restartPolicy")}]},
     "unsupported fieldPath: spec.restartPolicy"),
    ("bad label subscript", {"env": [{"name": "A", **field("metadata.labels['-bad-']")}]},
     "invalid key subscript in metadata.labels['-bad-']"),
    ("unsupported resource", {"env": [{"name": "A", **resource("limits.gpu")}]},
     "unsupported container resource : limits.gpu"),
]


@pytest.mark.parametrize(("change", "message"), [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES])
def test_resolve_env_errors(change: dict[str, Any], message: str) -> None:
    with pytest.raises(EnvError) as error:
        resolve(make_pod(**change))
    assert str(error.value).startswith(message)


def test_unfetched_objects_are_a_caller_bug() -> None:
    pod = make_pod(env=[{"name": "A", **key_ref("configMapKeyRef", "never-fetched", "k", optional=True)}])
    with pytest.raises(ValueError, match="was not fetched") as error:
        resolve(pod)
    assert not isinstance(error.value, EnvError)


def test_invalid_env_from_names_are_skipped_and_reported() -> None:
    pod = make_pod(env_from=[{"configMapRef": {"name": "odd"}}])
    result = container_env.build_env(pod, pod.spec.containers[0],
                                     config_maps={"odd": {"GOOD": "1", "A=B": "2", "": "3"}}, secrets={})
    assert result.env == (("GOOD", "1"),)
    assert result.warnings == ("Keys [, A=B] from the EnvFrom configMap shop/odd were skipped since they are "
                               "considered invalid environment variable names.",)


def test_pod_ip_falls_back_to_the_single_values() -> None:
    pod = make_pod(env=[{"name": "P", **field("status.podIP")}, {"name": "H", **field("status.hostIP")}])
    assert resolve(pod, service_env={}, pod_ips=(), host_ips=(), pod_ip="10.0.0.9", host_ip="192.168.0.9") == [
        ("P", "10.0.0.9"), ("H", "192.168.0.9")]


def test_referenced_objects() -> None:
    pod = make_pod(env=[{"name": "A", **key_ref("configMapKeyRef", "cm-a", "k")},
                        {"name": "B", **key_ref("secretKeyRef", "sec-b", "k", optional=True)},
                        {"name": "C", "value": "plain"}, {"name": "D", **field("metadata.name")}],
                   env_from=[{"configMapRef": {"name": "cm-c"}}, {"secretRef": {"name": "sec-d"}}])
    assert container_env.referenced_objects(pod) == (frozenset({"cm-a", "cm-c"}),
                                                     frozenset({"sec-b", "sec-d", "init-sec"}))
    assert container_env.referenced_objects(pod, pod.spec.init_containers[0]) == (frozenset(), frozenset({"init-sec"}))
