"""kopflet.api.unsupported: the pod fields kopflet cannot honour are refused with upstream's reasons, at admission,
and again when a container added after admission (an ephemeral one) is created."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kopflet.api import spec, unsupported
from kopflet.envvars import container_env
from kopflet.lifecycle import admission
from kopflet.volumes import plugins

BASE: dict[str, Any] = {
    "metadata": {"name": "p", "namespace": "ns", "uid": "uid-p"},
    "spec": {"containers": [{"name": "c", "image": "busybox"}]},
}
NODE = admission.NodeInfo(name="node", allocatable={"cpu": "4", "memory": "8Gi", "pods": "110",
                                                    "ephemeral-storage": "20Gi"})


def make_pod(fragment: dict[str, Any]) -> spec.Pod:
    """A one-container pod with `fragment` merged into its spec."""
    body = copy.deepcopy(BASE)
    body["spec"].update(copy.deepcopy(fragment))
    return spec.pod_from_body(body)


def container_errors(pod: spec.Pod) -> list[str]:
    """What creating each container says: its environment, then its mounts (the order of upstream's
    generateContainerConfig: makeEnvironmentVariables, then makeMounts); every volume is an emptyDir named v."""
    errors = []
    plans = {"v": plugins.VolumePlan(name="v", kind=plugins.KIND_EMPTY_DIR, host_path="/v/v")}
    for container in (*pod.spec.init_containers, *pod.spec.containers, *pod.spec.ephemeral_containers):
        try:
            env = container_env.resolve_env(pod, container, config_maps={}, secrets={})
            plugins.container_mounts(pod, container, plans, dict(env))
        except (container_env.EnvError, plugins.VolumeError) as exc:
            errors.append(str(exc))
    return errors


def test_a_pod_without_those_fields_is_admitted_and_created() -> None:
    assert admission.admit(make_pod({}), NODE, []) is None
    assert container_errors(make_pod({"containers": [{"name": "c", "image": "busybox", "volumeMounts": [
        {"name": "v", "mountPath": "/v", "readOnly": True, "recursiveReadOnly": "IfPossible"}]}]})) == []


def test_the_admission_message_names_each_feature_with_its_first_field() -> None:
    pod = make_pod({"resourceClaims": [{"name": "a", "resourceClaimName": "a"}],
                "containers": [{"name": "c", "image": "busybox", "lifecycle": {"stopSignal": "SIGUSR1"},
                                "resources": {"claims": [{"name": "a"}]}}],
                "volumes": [{"name": "v", "emptyDir": {"mode": 448}}]})
    rejection = admission.admit(pod, NODE, [])
    assert rejection == admission.Rejection(
        reason="PodFeatureUnsupported",
        message="Pod was rejected: Pod requires node features that are not available: DynamicResourceAllocation "
                "(spec.resourceClaims[0]: kopflet has no DRA manager to prepare resource claims), ContainerStopSignals "
                "(spec.containers[0].lifecycle.stopSignal: kopflet does not pass a stop signal to the runtime), "
                "EmptyDirVolumeMode (spec.volumes[0].emptyDir.mode: kopflet makes every emptyDir world-writable "
                "(0777))")
    assert rejection.event_message.startswith("Pod requires node features that are not available: ")


def test_strict_supplemental_groups_are_refused_with_upstreams_reason_and_message() -> None:
    strict = make_pod({"securityContext": {"supplementalGroupsPolicy": "Strict"}})
    assert admission.admit(strict, NODE, []) == admission.Rejection(
        reason="SupplementalGroupsPolicyNotSupported",
        message="Pod was rejected: SupplementalGroupsPolicy=Strict is not supported in this node")
    assert admission.admit(make_pod({"securityContext": {"supplementalGroupsPolicy": "Merge"}}), NODE, []) is None


def test_the_os_checks_come_first() -> None:
    """Upstream's predicate handler checks the OS, then the supplemental groups policy."""
    pod = make_pod({"os": {"name": "windows"}, "securityContext": {"supplementalGroupsPolicy": "Strict"}})
    rejection = admission.admit(pod, NODE, [])
    assert rejection is not None and rejection.reason == admission.POD_OS_NOT_SUPPORTED


@pytest.mark.parametrize(("volume", "field"), [
    ({"configMap": {"name": "o", "defaultUser": 7}}, "spec.volumes[0].configMap.defaultUser"),
    ({"secret": {"secretName": "o", "items": [{"key": "k", "path": "k", "user": 7}]}},
     "spec.volumes[0].secret.items[0].user"),
    ({"projected": {"sources": [{"serviceAccountToken": {"path": "t", "user": 7}}]}},
     "spec.volumes[0].projected.sources[0].serviceAccountToken.user"),
    ({"projected": {"sources": [{"downwardAPI": {"items": [{"path": "n", "user": 7,
                                                            "fieldRef": {"fieldPath": "metadata.name"}}]}}]}},
     "spec.volumes[0].projected.sources[0].downwardAPI.items[0].user"),
])
def test_volume_file_owners_are_refused_at_the_field(volume: dict[str, Any], field: str) -> None:
    pod = make_pod({"volumes": [{"name": "v", **volume}]})
    assert unsupported.unsupported_features(pod) == {unsupported.ATOMIC_WRITE_VOLUME_USER_FIELDS: field}


def test_an_ephemeral_container_added_later_is_refused_when_it_is_created() -> None:
    """Admission ran before `kubectl debug` added it: its environment and mounts refuse what kopflet cannot do."""
    pod = make_pod({"ephemeralContainers": [{"name": "dbg", "image": "busybox", "env": [
        {"name": "E", "valueFrom": {"fileKeyRef": {"volumeName": "v", "path": "f", "key": "K"}}}]}]})
    assert container_errors(pod) == [
        "env E: valueFrom.fileKeyRef is not supported: kopflet does not read environment variables from files "
        "(EnvFiles)"]
    pod = make_pod({"ephemeralContainers": [{"name": "dbg", "image": "busybox", "volumeMounts": [
        {"name": "v", "mountPath": "/v", "bindMountOptions": ["nodev"]}]}]})
    assert container_errors(pod) == [
        'volume "v" asks for bindMountOptions in container "dbg": kopflet does not pass bind mount options to the '
        "runtime (VolumeBindMountOptions)"]


def test_recursive_read_only_enabled_is_upstreams_refusal_on_a_runtime_without_it() -> None:
    pod = make_pod({"containers": [{"name": "c", "image": "busybox", "volumeMounts": [
        {"name": "v", "mountPath": "/v", "readOnly": True, "recursiveReadOnly": "Enabled"}]}]})
    assert container_errors(pod) == [
        'volume "v" requested recursive read-only mode, but it is not supported by the runtime']
