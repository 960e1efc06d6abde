"""
Every field of the pinned PodSpec, classified: does kopflet honour it, refuse it, or is it not the kubelet's at all?

The project's rule (issue 19): a pod field the agent cannot honour is refused clearly, never ignored. `FIELDS` maps
every field path of the pinned schema (tests/data/pod_fields_<version>.json, generated from the apiserver's OpenAPI
by tests/data/gen_pod_fields.py) to one `Field`:

- `HANDLED`: kopflet acts on it; `where` names the code. Values it cannot honour may still be refused (then
  `refusal` says how: ``hostUsers: false``, ``supplementalGroupsPolicy: Strict``, an AppArmor profile on a host
  without AppArmor ...);
- `REFUSED`: kopflet refuses a pod (or a container) that sets it; `refusal` is a tiny example and where it shows;
- `NOT_APPLICABLE`: the upstream kubelet does not act on it either (the scheduler's fields, the apiserver's
  admission plugins', controllers', Windows-only ones, or fields the apiserver refuses where they are); `where`
  cites upstream (paths in k8s.io/kubernetes at the pinned version).

An entry with ``subtree=True`` covers every field below its path (a volume type kopflet has no plugin for, the
scheduler's affinity terms); other entries are leaves. tests/unit/test_pod_fields.py fails when a field of the
schema is not covered, when an entry names a field the schema does not have, and when a `refusal` example is not
refused at its stage with the stated reason.

The container fields are written once (`_container_fields`) for ``containers``, ``initContainers`` and
``ephemeralContainers``: the apiserver forbids lifecycle, probes, ports, resources and resizePolicy on ephemeral
containers (pkg/apis/core/validation `allowedEphemeralContainerFields`), and the restart fields are refused by
kopflet's parser there too.

Pure: data only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from kopflet.api import unsupported

HANDLED = "handled"
REFUSED = "refused"
NOT_APPLICABLE = "n/a"
STATUSES = (HANDLED, REFUSED, NOT_APPLICABLE)

# Where a refusal shows, and the pure code the test asks.
ADMISSION = "admission"
"""`kopflet.lifecycle.admission.admit`: the pod is Failed with this ``status.reason`` and a Warning event."""
SANDBOX = "sandbox"
"""`kopflet.kuberuntime.sandbox_config.build_sandbox_config` raises: FailedCreatePodSandBox events, no sandbox."""
VOLUME = "volume"
"""`kopflet.volumes.plugins.plan_volumes` raises: FailedMount events, the pod stays ContainerCreating."""
CONTAINER = "container"
"""The container's environment (`kopflet.envvars.container_env`) or mounts (`kopflet.volumes.plugins.
container_mounts`) cannot be made: the container waits with CreateContainerConfigError."""
HOOK = "hook"
"""`kopflet.lifecycle.hooks.HookRunner.run` fails the hook: FailedPostStartHook / FailedPreStopHook, as upstream."""
SPEC = "spec"
"""`kopflet.api.spec.pod_from_body` raises SpecError: the pod cannot be parsed at all."""
STAGES = (ADMISSION, SANDBOX, VOLUME, CONTAINER, HOOK, SPEC)

K8S = "k8s.io/kubernetes@v1.37.1/"
"""Upstream paths below are relative to this module."""


@dataclasses.dataclass(frozen=True)
class Refusal:
    """How kopflet refuses a value: `example` is a ``spec`` fragment (merged into a one-container pod's spec) that
    `stage` refuses, and `says` is the rejection's reason (admission) or a part of the error's message."""

    stage: str
    says: str
    example: Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Field:
    """One field path's class; `where` names kopflet's code (handled, refused) or upstream's (n/a)."""

    status: str
    where: str
    why: str = ""
    subtree: bool = False
    refusal: Refusal | None = None


def _handled(where: str, why: str = "", *, subtree: bool = False, refusal: Refusal | None = None) -> Field:
    return Field(HANDLED, where, why, subtree, refusal)


def _refused(refusal: Refusal, where: str, why: str, *, subtree: bool = False) -> Field:
    return Field(REFUSED, where, why, subtree, refusal)


def _na(where: str, why: str, *, subtree: bool = False) -> Field:
    return Field(NOT_APPLICABLE, where, why, subtree)


def _pod(**fragment: Any) -> dict[str, Any]:
    return dict(fragment)


def _container(kind: str, **fragment: Any) -> dict[str, Any]:
    """A spec fragment with one container of `kind` (its name and image filled in) carrying `fragment`."""
    return {kind: [{"name": "x", "image": "busybox", **fragment}]}


def _features_unsupported(kind: str, feature: str, **fragment: Any) -> Refusal:
    """An admission refusal by `unsupported.pod_refusal` for a container field; on an ephemeral container (added
    after admission, `kubectl debug`) the container-level check says it instead."""
    if kind == "ephemeralContainers":
        return Refusal(CONTAINER, feature, _container(kind, **fragment))
    return Refusal(ADMISSION, unsupported.POD_FEATURE_UNSUPPORTED, _container(kind, **fragment))


# ------------------------------------------------------------------------------------------------ upstream

_SCHEDULER = "the scheduler's; the kubelet's admission (pkg/kubelet/lifecycle/predicate.go generalFilter) does not run "
_SPEC_PY = "kopflet.api.spec.pod_from_body"
_ADMISSION = "kopflet.lifecycle.admission"
_UNSUPPORTED = "kopflet.api.unsupported.pod_refusal (admission)"
_SANDBOX = "kopflet.kuberuntime.sandbox_config"
_CONTAINER = "kopflet.kuberuntime.container_config"
_SECURITY = "kopflet.kuberuntime.container_config.container_security_context"
_PROBES = "kopflet.prober.probes, kopflet.prober.manager"
_HOOKS = "kopflet.lifecycle.hooks"
_ENV = "kopflet.envvars.container_env"
_MOUNTS = "kopflet.volumes.plugins.container_mounts"
_VOLUMES = "kopflet.volumes.plugins, kopflet.volumes.manager"
_EPHEMERAL_FORBIDDEN = _na(
    f"{K8S}pkg/apis/core/validation/validation.go validateEphemeralContainers (allowedEphemeralContainerFields)",
    "the apiserver refuses it on an ephemeral container", subtree=True)


# ------------------------------------------------------------------------------------------------ containers


def _probe(kind: str, probe: str) -> dict[str, Field]:
    """One of livenessProbe, readinessProbe, startupProbe (upstream pkg/kubelet/prober)."""
    if kind == "ephemeralContainers":
        return {probe: _EPHEMERAL_FORBIDDEN}
    fields = {name: _handled(_PROBES) for name in (
        "exec.command", "failureThreshold", "grpc.port", "grpc.service", "httpGet.host", "httpGet.httpHeaders[].name",
        "httpGet.httpHeaders[].value", "httpGet.path", "httpGet.port", "httpGet.scheme", "initialDelaySeconds",
        "periodSeconds", "successThreshold", "tcpSocket.host", "tcpSocket.port", "timeoutSeconds")}
    fields["grpc.mode"] = _handled(
        _PROBES + "; TLS: " + _UNSUPPORTED, "Plaintext (the default) is what kopflet's gRPC probe speaks",
        refusal=_features_unsupported(kind, unsupported.GRPC_PROBE_TLS, **{
            "restartPolicy": "Always", probe: {"grpc": {"port": 8080, "mode": "TLS"}}} if kind == "initContainers"
            else {probe: {"grpc": {"port": 8080, "mode": "TLS"}}}))
    fields["httpGet.protocol"] = _handled(
        _PROBES + "; HTTP2: " + _UNSUPPORTED, "HTTP1 (the default) is what kopflet's HTTP probe speaks",
        refusal=_features_unsupported(kind, unsupported.H2C_PROBE, **{
            "restartPolicy": "Always", probe: {"httpGet": {"port": 80, "protocol": "HTTP2"}}}
            if kind == "initContainers" else {probe: {"httpGet": {"port": 80, "protocol": "HTTP2"}}}))
    if probe == "readinessProbe":
        fields["terminationGracePeriodSeconds"] = _na(
            f"{K8S}pkg/apis/core/validation/validation.go validateReadinessProbe",
            "the apiserver refuses it on a readiness probe (and kopflet.prober.probes.parse_probe too)")
    else:
        fields["terminationGracePeriodSeconds"] = _handled("kopflet.prober.probes, kopflet.kuberuntime.executor")
    return {f"{probe}.{name}": field for name, field in fields.items()}


def _handler(kind: str, hook: str) -> dict[str, Field]:
    """postStart or preStop (upstream pkg/kubelet/lifecycle/handlers.go handlerRunner.Run)."""
    fields = {name: _handled(_HOOKS) for name in (
        "exec.command", "httpGet.host", "httpGet.httpHeaders[].name", "httpGet.httpHeaders[].value", "httpGet.path",
        "httpGet.port", "httpGet.scheme", "sleep.seconds")}
    fields["httpGet.protocol"] = _na(
        f"{K8S}pkg/kubelet/lifecycle/handlers.go runHTTPHandler",
        "upstream's hook runner never reads it (HTTP/1.1 always, as kopflet's); only probes speak H2C")
    fields["tcpSocket"] = _refused(
        Refusal(HOOK, "Cannot run handler: invalid lifecycle handler",
                _container(kind, lifecycle={hook: {"tcpSocket": {"port": 80}}})),
        "kopflet.lifecycle.hooks.HookRunner.run",
        "deprecated and never run: the hook fails as upstream's handlerRunner.Run fails it ('Cannot run handler: "
        "invalid handler')", subtree=True)
    return {f"lifecycle.{hook}.{name}": field for name, field in fields.items()}


def _key_ref(where: str) -> dict[str, Field]:
    return {name: _handled(where) for name in ("key", "name", "optional")}


def _container_fields(kind: str) -> dict[str, Field]:
    """The fields of one container of `kind` (``containers``, ``initContainers``, ``ephemeralContainers``),
    relative to ``spec.<kind>[]``."""
    ephemeral = kind == "ephemeralContainers"
    fields: dict[str, Field] = {
        "name": _handled(_SPEC_PY + ", kopflet.container.labels"),
        "image": _handled("kopflet.images.manager, " + _CONTAINER),
        "imagePullPolicy": _handled("kopflet.images.manager"),
        "command": _handled(_CONTAINER + ".expand_command_and_args"),
        "args": _handled(_CONTAINER + ".expand_command_and_args"),
        "workingDir": _handled(_CONTAINER + ".build_container_config"),
        "env[].name": _handled(_ENV),
        "env[].value": _handled(_ENV),
        "env[].valueFrom.fieldRef.apiVersion": _handled(_ENV + ".field_ref_value"),
        "env[].valueFrom.fieldRef.fieldPath": _handled(_ENV + ".field_ref_value"),
        "env[].valueFrom.resourceFieldRef.containerName": _handled(_ENV + ".resource_field_ref_value"),
        "env[].valueFrom.resourceFieldRef.divisor": _handled(_ENV + ".resource_field_ref_value"),
        "env[].valueFrom.resourceFieldRef.resource": _handled(_ENV + ".resource_field_ref_value"),
        "env[].valueFrom.fileKeyRef": _refused(
            _features_unsupported(kind, unsupported.ENV_FILES, env=[{"name": "E", "valueFrom": {"fileKeyRef": {
                "volumeName": "v", "path": "env", "key": "K"}}}]),
            _UNSUPPORTED + "; kopflet.api.unsupported.env_source_error (" + _ENV + ")",
            "EnvFiles (beta, on at 1.37): kopflet does not read env files out of a volume", subtree=True),
        "envFrom[].prefix": _handled(_ENV),
        "stdin": _handled(_CONTAINER + ", kopflet.server.streaming"),
        "stdinOnce": _handled(_CONTAINER + ", kopflet.server.streaming"),
        "tty": _handled(_CONTAINER + ", kopflet.server.streaming"),
        "terminationMessagePath": _handled(_CONTAINER + ".termination_message_mount, kopflet.pods.workers"),
        "terminationMessagePolicy": _handled("kopflet.pods.workers, kopflet.container.labels"),
        "volumeMounts[].name": _handled(_MOUNTS),
        "volumeMounts[].mountPath": _handled(_MOUNTS),
        "volumeMounts[].readOnly": _handled(_MOUNTS),
        "volumeMounts[].mountPropagation": _handled(_MOUNTS),
        "volumeMounts[].subPath": _handled(_MOUNTS, "the apiserver refuses it on ephemeral containers"
                                           if ephemeral else ""),
        "volumeMounts[].subPathExpr": _handled(_MOUNTS, "the apiserver refuses it on ephemeral containers"
                                               if ephemeral else ""),
        "volumeMounts[].recursiveReadOnly": _handled(
            _MOUNTS + " (kopflet.api.unsupported.mount_error), kopflet.status.generate",
            "Disabled, and IfPossible as an ordinary read-only mount: the runtime (containerd 1.6) reports no "
            "recursive read-only support, as upstream's resolveRecursiveReadOnly then does; Enabled is refused as "
            "upstream refuses it there",
            refusal=Refusal(CONTAINER, "requested recursive read-only mode, but it is not supported by the runtime",
                            _container(kind, volumeMounts=[{"name": "v", "mountPath": "/v", "readOnly": True,
                                                            "recursiveReadOnly": "Enabled"}]))),
        "volumeMounts[].bindMountOptions": _refused(
            _features_unsupported(kind, unsupported.VOLUME_BIND_MOUNT_OPTIONS,
                                  volumeMounts=[{"name": "v", "mountPath": "/v", "bindMountOptions": ["noexec"]}]),
            _UNSUPPORTED + "; kopflet.api.unsupported.mount_error (" + _MOUNTS + ")",
            "VolumeBindMountOptions (alpha): upstream's declared-features admission refuses it on a node that does "
            "not declare the feature, as kopflet does not"),
        "volumeDevices[]": _refused(
            Refusal(CONTAINER, "kopflet has no raw block volumes",
                    _container(kind, volumeDevices=[{"name": "v", "devicePath": "/dev/xvda"}])),
            "kopflet.api.unsupported.volume_devices_error (" + _MOUNTS + ")",
            "raw block volumes come from PersistentVolumeClaims of volumeMode Block, which kopflet does not map "
            "(FailedMapVolume) either; upstream makeBlockVolumes' error", subtree=True),
        "securityContext.allowPrivilegeEscalation": _handled(_SECURITY + " (no_new_privs)"),
        "securityContext.appArmorProfile.type": _handled(
            _SECURITY + ", kopflet.api.apparmor, " + _ADMISSION + "._check_apparmor",
            "a profile other than Unconfined is refused on a host without AppArmor, as upstream",
            refusal=Refusal(ADMISSION, "AppArmor",
                            _container(kind, securityContext={"appArmorProfile": {"type": "RuntimeDefault"}}))
            if not ephemeral else None),
        "securityContext.appArmorProfile.localhostProfile": _handled(_SECURITY + ", kopflet.api.apparmor"),
        "securityContext.capabilities.add": _handled(_SECURITY),
        "securityContext.capabilities.drop": _handled(_SECURITY),
        "securityContext.privileged": _handled(_SECURITY + ", " + _SANDBOX + ".has_privileged_container"),
        "securityContext.procMount": _handled(
            _CONTAINER + ".proc_mount_paths, kopflet.config.static_pods",
            "Unmasked needs hostUsers: false (static pods are checked as upstream validates them), which runs only "
            "where the runtime handler supports user namespaces and is refused elsewhere",
            refusal=Refusal(SANDBOX, "hostUsers", {"hostUsers": False, **_container(
                kind, securityContext={"procMount": "Unmasked"})})),
        "securityContext.readOnlyRootFilesystem": _handled(_SECURITY),
        "securityContext.runAsGroup": _handled(_SECURITY),
        "securityContext.runAsNonRoot": _handled(_CONTAINER + ".verify_run_as_non_root"),
        "securityContext.runAsUser": _handled(_SECURITY + ", " + _CONTAINER + ".verify_run_as_non_root"),
        "securityContext.seLinuxOptions.level": _handled(_SECURITY),
        "securityContext.seLinuxOptions.role": _handled(_SECURITY),
        "securityContext.seLinuxOptions.type": _handled(_SECURITY),
        "securityContext.seLinuxOptions.user": _handled(_SECURITY),
        "securityContext.seccompProfile.type": _handled(_CONTAINER + ".seccomp_profile"),
        "securityContext.seccompProfile.localhostProfile": _handled(_CONTAINER + ".seccomp_profile"),
        "securityContext.windowsOptions": _na(
            f"{K8S}pkg/kubelet/kuberuntime/security_context_windows.go, kuberuntime_container_windows.go",
            "Windows only: upstream's Linux kubelet never reads it", subtree=True),
    }
    for source in ("configMapKeyRef", "secretKeyRef"):
        fields.update({f"env[].valueFrom.{source}.{name}": field for name, field in _key_ref(_ENV).items()})
    for source in ("configMapRef", "secretRef"):
        fields.update({f"envFrom[].{source}.{name}": _handled(_ENV) for name in ("name", "optional")})
    if ephemeral:
        fields["targetContainerName"] = _handled(_SPEC_PY + ", " + _CONTAINER + ".target_pid_namespace")
        for name in ("lifecycle", "ports[]", "resources", "resizePolicy[]"):
            fields[name] = _EPHEMERAL_FORBIDDEN
        for name, example in (("restartPolicy", {"restartPolicy": "Always"}), ("restartPolicyRules[]", {
                "restartPolicyRules": [{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}]})):
            fields[name] = _refused(
                Refusal(SPEC, "cannot be set for an Ephemeral Container", _container(kind, **example)),
                _SPEC_PY + " (_restart_policy)", "as the apiserver, which forbids it there",
                subtree=name.endswith("[]"))
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            fields.update(_probe(kind, probe))
        return fields
    fields.update({
        "ports[].containerPort": _handled(_SANDBOX + ".port_mappings"),
        "ports[].hostIP": _handled(_SANDBOX + ".port_mappings, " + _ADMISSION + " (NodePorts)"),
        "ports[].hostPort": _handled(_SANDBOX + ".port_mappings, " + _ADMISSION + " (NodePorts)"),
        "ports[].name": _handled(_SANDBOX + ".port_mappings, kopflet.api.spec.resolve_port"),
        "ports[].protocol": _handled(_SANDBOX + ".port_mappings"),
        "resources.limits": _handled(_CONTAINER + ".linux_resources, kopflet.api.qos, kopflet.eviction"),
        "resources.requests": _handled(_CONTAINER + ".linux_resources, " + _ADMISSION + ", kopflet.api.qos"),
        "resources.claims[]": _refused(
            Refusal(ADMISSION, unsupported.POD_FEATURE_UNSUPPORTED, _container(kind, resources={"claims": [
                {"name": "gpu"}]})),
            _UNSUPPORTED, "DynamicResourceAllocation: kopflet has no DRA manager to prepare claims", subtree=True),
        "resizePolicy[].resourceName": _handled("kopflet.kuberuntime.resize"),
        "resizePolicy[].restartPolicy": _handled("kopflet.kuberuntime.resize"),
        "restartPolicy": _handled("kopflet.api.spec.container_should_restart, kopflet.kuberuntime.reconciler"),
        "restartPolicyRules[].action": _handled("kopflet.api.spec.matching_restart_rule, kopflet.kuberuntime."
                                                "reconciler"),
        "restartPolicyRules[].exitCodes.operator": _handled("kopflet.api.spec.matching_restart_rule"),
        "restartPolicyRules[].exitCodes.values": _handled("kopflet.api.spec.matching_restart_rule"),
        "lifecycle.stopSignal": _refused(
            _features_unsupported(kind, unsupported.CONTAINER_STOP_SIGNALS, lifecycle={"stopSignal": "SIGUSR1"}),
            _UNSUPPORTED, "ContainerStopSignals (alpha): kopflet stops containers with the image's signal"),
    })
    for hook in ("postStart", "preStop"):
        fields.update(_handler(kind, hook))
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        fields.update(_probe(kind, probe))
    return fields


# --------------------------------------------------------------------------------------------------- volumes

_NO_PLUGIN = ("awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "csi", "fc",
              "flexVolume", "flocker", "gcePersistentDisk", "gitRepo", "glusterfs", "iscsi", "nfs",
              "photonPersistentDisk", "portworxVolume", "quobyte", "rbd", "scaleIO", "storageos", "vsphereVolume")
"""Inline volume types kopflet has no plugin for (`kopflet.volumes.plugins.SUPPORTED_KINDS` and the
PersistentVolumeClaim-backed ones, `kopflet.volumes.pvc`, are the others)."""
_NO_PLUGIN_EXAMPLES: dict[str, dict[str, Any]] = {
    "nfs": {"server": "nfs.example", "path": "/"},
    "csi": {"driver": "csi.example"},
}
_PVC = "kopflet.volumes.pvc.resolve, kopflet.volumes.manager (the PVC and PV GETs, the mount)"
_PV_TYPES = ("the PV it is bound to is mounted when it is a hostPath or local PV; any other type (nfs, iscsi, csi, "
             "the in-tree cloud disks ...) fails at mount time with upstream's 'no volume plugin matched' error "
             "(FailedMount, the pod stays ContainerCreating), as do an unbound PVC, a PVC being deleted and a PV bound "
             "to another claim")


def _file_items(prefix: str, where: str, *, user_example: dict[str, Any]) -> dict[str, Field]:
    """``items`` of a configMap/secret source (KeyToPath), `user_example` a spec fragment setting ``items[].user``."""
    return {
        f"{prefix}.items[].key": _handled(where),
        f"{prefix}.items[].path": _handled(where + ", kopflet.volumes.plugins.validate_path"),
        f"{prefix}.items[].mode": _handled(where),
        f"{prefix}.items[].user": _atomic_user(user_example),
    }


def _atomic_user(example: dict[str, Any]) -> Field:
    return _refused(Refusal(ADMISSION, unsupported.POD_FEATURE_UNSUPPORTED, example), _UNSUPPORTED,
                    "AtomicWriteVolumeUserFields (alpha): kopflet writes volume files owned by root")


def _downward_items(prefix: str, user_example: dict[str, Any]) -> dict[str, Field]:
    where = "kopflet.volumes.plugins (_downward_payload)"
    return {
        f"{prefix}.items[].path": _handled(where + ", kopflet.volumes.plugins.validate_path"),
        f"{prefix}.items[].mode": _handled(where),
        f"{prefix}.items[].fieldRef.apiVersion": _handled(where + ", " + _ENV + ".field_ref_value"),
        f"{prefix}.items[].fieldRef.fieldPath": _handled(where + ", " + _ENV + ".field_ref_value"),
        f"{prefix}.items[].resourceFieldRef.containerName": _handled(where),
        f"{prefix}.items[].resourceFieldRef.divisor": _handled(where + ", " + _ENV + ".resource_field_ref_value"),
        f"{prefix}.items[].resourceFieldRef.resource": _handled(where + ", " + _ENV + ".resource_field_ref_value"),
        f"{prefix}.items[].user": _atomic_user(user_example),
    }


def _volume(**source: Any) -> dict[str, Any]:
    return {"volumes": [{"name": "v", **source}]}


def _volume_fields() -> dict[str, Field]:
    v = "spec.volumes[]"
    fields: dict[str, Field] = {
        f"{v}.name": _handled(_VOLUMES),
        f"{v}.emptyDir.medium": _handled(
            _VOLUMES, "'' (disk) and Memory (tmpfs); HugePages media are refused",
            refusal=Refusal(VOLUME, "unsupported emptyDir medium HugePages",
                            _volume(emptyDir={"medium": "HugePages"}))),
        f"{v}.emptyDir.sizeLimit": _handled(_VOLUMES + ", kopflet.eviction.local_storage"),
        f"{v}.emptyDir.mode": _refused(
            Refusal(ADMISSION, unsupported.POD_FEATURE_UNSUPPORTED, _volume(emptyDir={"mode": 0o755})),
            _UNSUPPORTED, "EmptyDirVolumeMode (alpha): kopflet makes every emptyDir 0777"),
        f"{v}.hostPath.path": _handled(_VOLUMES),
        f"{v}.hostPath.type": _handled(_VOLUMES + " (check_host_path)"),
        f"{v}.image.reference": _handled(
            "kopflet.volumes.plugins (_image_plan), kopflet.kuberuntime.image_volumes, kopflet.images.manager",
            "pulled before the pod's containers start, mounted by the runtime (CRI Mount.image)"),
        f"{v}.image.pullPolicy": _handled("kopflet.volumes.plugins (_image_plan), kopflet.images.manager"),
    }
    for kind, name_field in (("configMap", "name"), ("secret", "secretName")):
        where = f"kopflet.volumes.plugins ({kind})"
        fields.update({
            f"{v}.{kind}.{name_field}": _handled(where),
            f"{v}.{kind}.optional": _handled(where),
            f"{v}.{kind}.defaultMode": _handled(where),
            f"{v}.{kind}.defaultUser": _atomic_user(_volume(**{kind: {name_field: "o", "defaultUser": 1000}})),
        })
        fields.update(_file_items(f"{v}.{kind}", where, user_example=_volume(**{kind: {
            name_field: "o", "items": [{"key": "k", "path": "k", "user": 1000}]}})))
    fields.update({
        f"{v}.downwardAPI.defaultMode": _handled("kopflet.volumes.plugins (downwardAPI)"),
        f"{v}.downwardAPI.defaultUser": _atomic_user(_volume(downwardAPI={"defaultUser": 1000})),
        f"{v}.projected.defaultMode": _handled("kopflet.volumes.plugins (projected)"),
        f"{v}.projected.defaultUser": _atomic_user(_volume(projected={"sources": [], "defaultUser": 1000})),
    })
    fields.update(_downward_items(f"{v}.downwardAPI", _volume(downwardAPI={"items": [
        {"path": "n", "fieldRef": {"fieldPath": "metadata.name"}, "user": 1000}]})))
    s = f"{v}.projected.sources[]"
    where = "kopflet.volumes.plugins (_projected_payload)"
    for kind in ("configMap", "secret"):
        fields.update({f"{s}.{kind}.name": _handled(where), f"{s}.{kind}.optional": _handled(where)})
        fields.update(_file_items(f"{s}.{kind}", where, user_example=_volume(projected={"sources": [{kind: {
            "name": "o", "items": [{"key": "k", "path": "k", "user": 1000}]}}]})))
    fields.update(_downward_items(f"{s}.downwardAPI", _volume(projected={"sources": [{"downwardAPI": {"items": [
        {"path": "n", "fieldRef": {"fieldPath": "metadata.name"}, "user": 1000}]}}]})))
    token = "kopflet.volumes.plugins.token_requests, kopflet.volumes.manager (TokenRequest)"
    fields.update({
        f"{s}.serviceAccountToken.audience": _handled(token),
        f"{s}.serviceAccountToken.expirationSeconds": _handled(token),
        f"{s}.serviceAccountToken.path": _handled(token),
        f"{s}.serviceAccountToken.user": _atomic_user(_volume(projected={"sources": [{"serviceAccountToken": {
            "path": "token", "user": 1000}}]})),
    })
    trust = "kopflet.volumes.trust_bundles.trust_anchors, kopflet.volumes.trust_bundle_manager (the bundles cache)"
    fields.update({f"{s}.clusterTrustBundle.{name}": _handled(trust) for name in (
        "name", "signerName", "labelSelector", "optional", "path")})
    fields[f"{s}.clusterTrustBundle.user"] = _atomic_user(_volume(projected={"sources": [{"clusterTrustBundle": {
        "signerName": "example.com/s", "path": "ca.pem", "user": 1000}}]}))
    pod_certificate = "kopflet.podcertificate.states, kopflet.podcertificate.manager (PodCertificateRequest)"
    pod_certificate_files = "kopflet.volumes.plugins (_pod_certificate_payload), kopflet.podcertificate.states.files"
    fields.update({
        f"{s}.podCertificate.signerName": _handled(pod_certificate),
        f"{s}.podCertificate.keyType": _handled(pod_certificate + ", kopflet.podcertificate.keys"),
        f"{s}.podCertificate.maxExpirationSeconds": _handled(pod_certificate),
        f"{s}.podCertificate.userAnnotations": _handled(pod_certificate),
        f"{s}.podCertificate.credentialBundlePath": _handled(pod_certificate_files),
        f"{s}.podCertificate.keyPath": _handled(pod_certificate_files),
        f"{s}.podCertificate.certificateChainPath": _handled(pod_certificate_files),
        f"{s}.podCertificate.user": _atomic_user(_volume(projected={"sources": [{"podCertificate": {
            "signerName": "example.com/s", "keyType": "ED25519", "credentialBundlePath": "creds.pem",
            "user": 1000}}]})),
    })
    fields.update({
        f"{v}.persistentVolumeClaim.claimName": _handled(_PVC, _PV_TYPES),
        f"{v}.persistentVolumeClaim.readOnly": _handled(
            "kopflet.volumes.pvc.resolve_volume, kopflet.volumes.plugins (_persistent_plan), kopflet.volumes.manager "
            "(a local PV's ro bind mount)"),
        f"{v}.ephemeral": _handled(
            _PVC + ", kopflet.volumes.pvc.volume_is_for_pod",
            "the kubelet mounts the PVC <pod>-<volume> once it is bound and owned by the pod, as for a "
            "persistentVolumeClaim volume; volumeClaimTemplate is read by the ephemeral volume controller "
            f"({K8S}pkg/controller/volume/ephemeral), which makes that PVC", subtree=True),
    })
    for kind in _NO_PLUGIN:
        example = _NO_PLUGIN_EXAMPLES.get(kind, {})
        fields[f"{v}.{kind}"] = _refused(
            Refusal(VOLUME, f"unsupported volume type {kind}", _volume(**{kind: example})),
            "kopflet.volumes.plugins (_plan)",
            "kopflet has no plugin for this volume type: FailedMount, the pod stays ContainerCreating"
            + (" (upstream's is disabled too: GitRepoVolumeDriver)" if kind == "gitRepo" else ""), subtree=True)
    return fields


# ------------------------------------------------------------------------------------------------------ pod


def _pod_fields() -> dict[str, Field]:
    sc = "spec.securityContext"
    return {
        "spec.activeDeadlineSeconds": _handled("kopflet.lifecycle.deadline"),
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution": _handled(
            _ADMISSION + ".required_node_affinity_matches", "upstream's predicate handler checks it again",
            subtree=True),
        "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[]": _na(
            f"{K8S}pkg/scheduler/framework/plugins/nodeaffinity (Score)", _SCHEDULER + "scoring", subtree=True),
        "spec.affinity.podAffinity": _na(
            f"{K8S}pkg/scheduler/framework/plugins/interpodaffinity", _SCHEDULER + "InterPodAffinity", subtree=True),
        "spec.affinity.podAntiAffinity": _na(
            f"{K8S}pkg/scheduler/framework/plugins/interpodaffinity", _SCHEDULER + "InterPodAffinity", subtree=True),
        "spec.automountServiceAccountToken": _na(
            f"{K8S}plugin/pkg/admission/serviceaccount",
            "the apiserver's ServiceAccount admission plugin adds (or not) the token volume; the kubelet mounts "
            "what spec.volumes says"),
        "spec.dnsConfig.nameservers": _handled(_SANDBOX + ".pod_dns_config"),
        "spec.dnsConfig.searches": _handled(_SANDBOX + ".pod_dns_config"),
        "spec.dnsConfig.options[].name": _handled(_SANDBOX + ".pod_dns_config"),
        "spec.dnsConfig.options[].value": _handled(_SANDBOX + ".pod_dns_config"),
        "spec.dnsPolicy": _handled(_SANDBOX + ".pod_dns_config"),
        "spec.enableServiceLinks": _handled("kopflet.envvars.service_env"),
        "spec.evictionResponders[]": _na(
            f"{K8S}pkg/features/kube_features.go EvictionRequestAPI (alpha)",
            "read by the eviction request controller and the responders, never by the kubelet", subtree=True),
        "spec.hostAliases[].hostnames": _handled(_CONTAINER + ".managed_hosts_file"),
        "spec.hostAliases[].ip": _handled(_CONTAINER + ".managed_hosts_file"),
        "spec.hostIPC": _handled(_SANDBOX + ".namespace_options, " + _ADMISSION + " (sysctls)"),
        "spec.hostNetwork": _handled(_SANDBOX + ".namespace_options, " + _ADMISSION + " (sysctls)"),
        "spec.hostPID": _handled(_SANDBOX + ".namespace_options"),
        "spec.hostUsers": _handled(
            _SANDBOX + ".user_namespace, kopflet.userns", "unset and true: the host's user namespace; false: the "
            "pod's own, with a 65536-ID range from the user namespace manager and idmapped mounts, when the runtime "
            "handler supports user namespaces; refused otherwise (containerd 1.6 has none), never run in the host's",
            refusal=Refusal(SANDBOX, "can't set `spec.hostUsers: false`", _pod(hostUsers=False))),
        "spec.hostname": _handled(_SANDBOX + ".pod_hostname_and_domain"),
        "spec.hostnameOverride": _handled(_SANDBOX + ".pod_hostname_and_domain"),
        "spec.imagePullSecrets[].name": _handled("kopflet.images.manager, kopflet.images.credentials"),
        "spec.nodeName": _handled(_ADMISSION + " (NodeName)"),
        "spec.nodeSelector": _handled(_ADMISSION + ".required_node_affinity_matches"),
        "spec.os.name": _handled(_ADMISSION + " (PodOSNotSupported)"),
        "spec.overhead": _handled(_ADMISSION + ".pod_requests, kopflet.cm.helpers, kopflet.eviction.helpers"),
        "spec.preemptionPolicy": _na(
            f"{K8S}pkg/scheduler/framework/plugins/defaultpreemption",
            "the scheduler's preemption; the kubelet's critical pod preemption (pkg/kubelet/preemption) does not "
            "read it"),
        "spec.priority": _handled("kopflet.eviction.helpers (ranking), kopflet.api.qos.is_critical_pod"),
        "spec.priorityClassName": _handled("kopflet.api.qos.is_node_critical_pod",
                                           "system-node-critical pods get oom_score_adj -997, as upstream"),
        "spec.readinessGates[].conditionType": _handled("kopflet.status.generate"),
        "spec.resourceClaims[]": _refused(
            Refusal(ADMISSION, unsupported.POD_FEATURE_UNSUPPORTED, _pod(resourceClaims=[
                {"name": "gpu", "resourceClaimName": "gpu"}])),
            _UNSUPPORTED, "DynamicResourceAllocation (GA): kopflet has no DRA manager to prepare claims",
            subtree=True),
        "spec.resources.limits": _handled("kopflet.api.qos.pod_level_resources, kopflet.cm.helpers"),
        "spec.resources.requests": _handled("kopflet.api.qos.pod_level_resources, " + _ADMISSION + ".pod_requests"),
        "spec.resources.claims[]": _refused(
            Refusal(ADMISSION, unsupported.POD_FEATURE_UNSUPPORTED, _pod(resources={"claims": [{"name": "gpu"}]})),
            _UNSUPPORTED, "the apiserver refuses claims in pod-level resources; a static pod's are refused as DRA",
            subtree=True),
        "spec.restartPolicy": _handled("kopflet.api.spec.container_should_restart, kopflet.kuberuntime.reconciler"),
        "spec.runtimeClassName": _handled("kopflet.kuberuntime.executor.PodSyncer.runtime_handler"),
        "spec.schedulerName": _na(f"{K8S}pkg/scheduler/profile", "picks the scheduler; the kubelet runs what is bound"),
        "spec.schedulingGates[]": _na(
            f"{K8S}pkg/scheduler/framework/plugins/schedulinggates",
            "a gated pod is never bound, so never reaches a kubelet", subtree=True),
        "spec.schedulingGroup": _na(
            f"{K8S}pkg/features/kube_features.go GenericWorkload (beta, off)",
            "the scheduler's gang scheduling; the kubelet never reads it", subtree=True),
        "spec.serviceAccount": _na(
            f"{K8S}pkg/apis/core/v1/defaults.go SetDefaults_PodSpec",
            "deprecated alias the apiserver copies into serviceAccountName, which is what the kubelet reads"),
        "spec.serviceAccountName": _handled("kopflet.volumes.manager (TokenRequest), " + _ENV),
        "spec.setHostnameAsFQDN": _handled(_SANDBOX + ".kernel_hostname"),
        "spec.shareProcessNamespace": _handled(_SANDBOX + ".namespace_options"),
        "spec.subdomain": _handled(_SANDBOX + ".pod_hostname_and_domain"),
        "spec.terminationGracePeriodSeconds": _handled("kopflet.kuberuntime.executor, kopflet.eviction.helpers"),
        "spec.tolerations[].effect": _handled(_ADMISSION + ".toleration_tolerates, kopflet.eviction.helpers.admit"),
        "spec.tolerations[].key": _handled(_ADMISSION + ".toleration_tolerates, kopflet.eviction.helpers.admit"),
        "spec.tolerations[].operator": _handled(_ADMISSION + ".toleration_tolerates"),
        "spec.tolerations[].value": _handled(_ADMISSION + ".toleration_tolerates"),
        "spec.tolerations[].tolerationSeconds": _na(
            f"{K8S}pkg/controller/tainteviction", "how long a pod stays on a NoExecute-tainted node is the taint "
            "eviction controller's; the kubelet's admission only asks whether the taint is tolerated"),
        "spec.topologySpreadConstraints[]": _na(
            f"{K8S}pkg/scheduler/framework/plugins/podtopologyspread", _SCHEDULER + "PodTopologySpread",
            subtree=True),
        f"{sc}.appArmorProfile.type": _handled(
            _SECURITY + ", kopflet.api.apparmor, " + _ADMISSION + "._check_apparmor",
            "a profile other than Unconfined is refused on a host without AppArmor, as upstream",
            refusal=Refusal(ADMISSION, "AppArmor",
                            _pod(securityContext={"appArmorProfile": {"type": "RuntimeDefault"}}))),
        f"{sc}.appArmorProfile.localhostProfile": _handled(_SECURITY + ", kopflet.api.apparmor"),
        f"{sc}.fsGroup": _handled(_SANDBOX + ".pod_supplemental_groups, kopflet.volumes.manager.set_volume_ownership, "
                                  "kopflet.volumes.manager.mount_local_volume"),
        f"{sc}.fsGroupChangePolicy": _handled(
            "kopflet.volumes.manager.mount_local_volume, kopflet.volumes.plugins.skip_permission_change",
            "OnRootMismatch skips the recursive ownership change of a local PersistentVolume whose root has the group "
            "and mode already, as upstream's local plugin; upstream's emptyDir, configMap, secret, projected and "
            "downwardAPI plugins ignore it (NewVolumeOwnership with a nil policy), hostPath gets no ownership at all"),
        f"{sc}.runAsGroup": _handled(_SECURITY + ", " + _SANDBOX + ".linux_sandbox_config"),
        f"{sc}.runAsNonRoot": _handled(_CONTAINER + ".verify_run_as_non_root"),
        f"{sc}.runAsUser": _handled(_SECURITY + ", " + _SANDBOX + ".linux_sandbox_config"),
        f"{sc}.seLinuxChangePolicy": _na(
            f"{K8S}pkg/volume/util/selinux.go; SupportsSELinuxContextMount is false in pkg/volume/emptydir, "
            "configmap, secret, projected, downwardapi, hostpath",
            "only chooses between a context mount option and relabelling for volumes that support the mount "
            "option (CSI, FC, iSCSI), none of which kopflet mounts"),
        f"{sc}.seLinuxOptions.level": _handled(_SECURITY + ", " + _SANDBOX + ".selinux_options"),
        f"{sc}.seLinuxOptions.role": _handled(_SECURITY + ", " + _SANDBOX + ".selinux_options"),
        f"{sc}.seLinuxOptions.type": _handled(_SECURITY + ", " + _SANDBOX + ".selinux_options"),
        f"{sc}.seLinuxOptions.user": _handled(_SECURITY + ", " + _SANDBOX + ".selinux_options"),
        f"{sc}.seccompProfile.type": _handled(_CONTAINER + ".seccomp_profile"),
        f"{sc}.seccompProfile.localhostProfile": _handled(_CONTAINER + ".seccomp_profile"),
        f"{sc}.supplementalGroups": _handled(_SANDBOX + ".pod_supplemental_groups"),
        f"{sc}.supplementalGroupsPolicy": _handled(
            _UNSUPPORTED, "Merge (the default) is what the runtime does; Strict is refused as upstream refuses it on "
            "a node whose runtime does not report support (status.features.supplementalGroupsPolicy)",
            refusal=Refusal(ADMISSION, unsupported.SUPPLEMENTAL_GROUPS_POLICY_NOT_SUPPORTED,
                            _pod(securityContext={"supplementalGroupsPolicy": "Strict"}))),
        f"{sc}.sysctls[].name": _handled(_ADMISSION + " (SysctlForbidden), " + _SANDBOX + ".linux_sandbox_config"),
        f"{sc}.sysctls[].value": _handled(_SANDBOX + ".linux_sandbox_config"),
        f"{sc}.windowsOptions": _na(
            f"{K8S}pkg/kubelet/kuberuntime/security_context_windows.go",
            "Windows only: upstream's Linux kubelet never reads it", subtree=True),
    }


def _build() -> dict[str, Field]:
    fields = _pod_fields()
    for kind in ("containers", "initContainers", "ephemeralContainers"):
        fields.update({f"spec.{kind}[].{path}": field for path, field in _container_fields(kind).items()})
    fields.update(_volume_fields())
    return fields


FIELDS: dict[str, Field] = _build()
"""Every field path of the pinned PodSpec (or the root of a subtree) with its class."""


def covering(path: str) -> str | None:
    """The `FIELDS` entry that classifies `path`: its own, or the nearest ancestor's with ``subtree``; None if none."""
    if path in FIELDS:
        return path
    parts = path.split(".")
    for end in range(len(parts) - 1, 0, -1):
        ancestor = ".".join(parts[:end])
        if ancestor in FIELDS and FIELDS[ancestor].subtree:
            return ancestor
    return None


__all__ = [
    "ADMISSION",
    "CONTAINER",
    "FIELDS",
    "HANDLED",
    "HOOK",
    "NOT_APPLICABLE",
    "REFUSED",
    "SANDBOX",
    "SPEC",
    "STAGES",
    "STATUSES",
    "VOLUME",
    "Field",
    "Refusal",
    "covering",
]
