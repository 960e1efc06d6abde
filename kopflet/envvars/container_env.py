"""
A container's environment, resolved as the kubelet does before CreateContainer.

Mirrors upstream `makeEnvironmentVariables` (pkg/kubelet/kubelet_pods.go) with `podFieldSelectorRuntimeValue`,
`containerResourceRuntimeValue` (pkg/api/v1/resource) and `$(VAR)` expansion from
third_party/forked/golang/expansion/expand.go.

Precedence, lowest first: service link variables, then ``envFrom`` (in order, with prefix), then ``env`` in
order; a plain ``value`` is expanded against everything defined so far (then the service variables), so
later entries see earlier ones; ``valueFrom`` results are never expanded.

Pure: ConfigMaps and Secrets are passed in, already fetched (`referenced_objects` says which). In
`config_maps` / `secrets`, ``None`` means "fetched, does not exist", a name missing from the mapping means
"not fetched" (a caller bug: ValueError). Secret values must already be decoded from base64. A missing
non-optional source or key raises `EnvError` with the kubelet's message; the caller shows it as waiting
reason ``CreateContainerConfigError`` (and a ``Failed`` event ``Error: <message>``).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kopflet import gotext
from kopflet.api import qos, spec, unsupported, validation

_OPERATOR = "$"
_OPENER = "("
_CLOSER = ")"

_SUBSCRIPTED = re.compile(r"^(metadata\.(?:labels|annotations))\['(.*)'\]$")
# Defaulted from node allocatable when the container sets no limit (upstream MergeContainerResourceLimits).
_DEFAULTED_LIMITS = ("cpu", "memory", "ephemeral-storage")


class EnvError(ValueError):
    """The environment cannot be built (missing ConfigMap, Secret or key ...): CreateContainerConfigError."""


# ------------------------------------------------------------------------------------------- expansion


def mapping_for(*contexts: Mapping[str, str]) -> Callable[[str], str]:
    """Look a name up in each context in turn; unknown names stay as written (upstream `MappingFuncFor`)."""
    def lookup(name: str) -> str:
        for context in contexts:
            if name in context:
                return context[name]
        return f"{_OPERATOR}{_OPENER}{name}{_CLOSER}"
    return lookup


def expand(template: str, lookup: Callable[[str], str] | Mapping[str, str]) -> str:
    """Expand ``$(VAR)`` references (upstream `expansion.Expand`).

    ``$$`` is an escaped ``$``; ``$(`` without a closing ``)`` and ``$`` before anything else are kept as
    written; a reference the lookup does not know is kept as written (`mapping_for` does that).
    """
    resolve = mapping_for(lookup) if isinstance(lookup, Mapping) else lookup
    out: list[str] = []
    checkpoint = 0
    cursor = 0
    while cursor < len(template):
        if template[cursor] == _OPERATOR and cursor + 1 < len(template):
            out.append(template[checkpoint:cursor])
            read, is_var, advance = _read_variable_name(template[cursor + 1:])
            out.append(resolve(read) if is_var else read)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + template[checkpoint:]


def _read_variable_name(rest: str) -> tuple[str, bool, int]:
    """Upstream `tryReadVariableName`: what follows a ``$``, whether it is a reference, bytes consumed."""
    if rest[0] == _OPERATOR:
        return _OPERATOR, False, 1
    if rest[0] == _OPENER:
        closer = rest.find(_CLOSER, 1)
        if closer != -1:
            return rest[1:closer], True, closer + 1
        return _OPERATOR + _OPENER, False, 1
    return _OPERATOR + rest[0], False, 1


# ----------------------------------------------------------------------------------------- the result


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnvResult:
    """The resolved environment and warnings for ``InvalidEnvironmentVariableNames`` events."""

    env: tuple[tuple[str, str], ...]
    warnings: tuple[str, ...] = ()


def referenced_objects(pod: spec.Pod,
                       container: spec.ContainerSpec | None = None) -> tuple[frozenset[str], frozenset[str]]:
    """Names of the ConfigMaps and Secrets the env of `container` (default: every container) refers to.

    Optional references are included: whether they exist changes the environment.
    """
    containers = (container,) if container is not None else (*pod.spec.init_containers, *pod.spec.containers)
    config_maps: set[str] = set()
    secrets: set[str] = set()
    for item in containers:
        for source in item.env_from:
            _add_name(config_maps, source.get("configMapRef"))
            _add_name(secrets, source.get("secretRef"))
        for var in item.env:
            value_from = var.value_from or {}
            _add_name(config_maps, value_from.get("configMapKeyRef"))
            _add_name(secrets, value_from.get("secretKeyRef"))
    return frozenset(config_maps), frozenset(secrets)


def standalone_refusal(pod: spec.Pod, container: spec.ContainerSpec) -> str:
    """Why `container`'s environment cannot be built without an apiserver ("" when it can): its first ConfigMap or
    Secret reference, ``envFrom`` before ``env``, optional or not (upstream makeEnvironmentVariables with a nil
    kubeClient: "couldn't get configMap <ns>/<name>, no kubeClient defined", the same for a secret)."""
    refs: list[tuple[str, Any]] = []
    for source in container.env_from:
        refs += [("configMap", source.get("configMapRef")), ("secret", source.get("secretRef"))]
    for var in container.env:
        value_from = var.value_from or {}
        refs += [("configMap", value_from.get("configMapKeyRef")), ("secret", value_from.get("secretKeyRef"))]
    for kind, ref in refs:
        if isinstance(ref, Mapping) and isinstance(ref.get("name"), str):
            return f"couldn't get {kind} {pod.namespace}/{ref['name']}, no kubeClient defined"
    return ""


def _add_name(names: set[str], ref: Any) -> None:
    if isinstance(ref, Mapping) and isinstance(ref.get("name"), str):
        names.add(ref["name"])


# ------------------------------------------------------------------------------------------ resolution


def resolve_env(pod: spec.Pod, container: spec.ContainerSpec, **inputs: Any) -> list[tuple[str, str]]:
    """The container's environment as (name, value) pairs, names unique: `build_env` (which takes the keyword
    `inputs`) without its warnings."""
    return list(build_env(pod, container, **inputs).env)


def build_env(pod: spec.Pod, container: spec.ContainerSpec, *,
              config_maps: Mapping[str, Mapping[str, str] | None],
              secrets: Mapping[str, Mapping[str, str] | None],
              node_name: str = "",
              host_ip: str = "",
              host_ips: Sequence[str] = (),
              pod_ip: str = "",
              pod_ips: Sequence[str] = (),
              service_env: Mapping[str, str] | None = None,
              node_allocatable: Mapping[str, str] | None = None) -> EnvResult:
    """Resolve the environment of one container (upstream `makeEnvironmentVariables`).

    `service_env` holds the service link variables (``KUBERNETES_SERVICE_HOST`` ...) the caller computed;
    `node_allocatable` defaults unset limits for ``resourceFieldRef``; `host_ips` / `pod_ips` are primary
    first (`host_ip` / `pod_ip` are used when those are empty); `node_name` is used when the pod's
    ``spec.nodeName`` is empty (static pods). Output order: ``envFrom`` then ``env`` names in first-seen
    order, then the service variables nothing overrode.
    """
    services = dict(service_env or {})
    context = _FieldContext(pod=pod, node_name=pod.spec.node_name or node_name,
                            host_ips=tuple(host_ips) or ((host_ip,) if host_ip else ()),
                            pod_ips=tuple(pod_ips) or ((pod_ip,) if pod_ip else ()),
                            allocatable=node_allocatable or {})
    env: dict[str, str] = {}
    warnings: list[str] = []

    for index, source in enumerate(container.env_from):
        prefix = source.get("prefix") or ""
        if not isinstance(prefix, str):
            raise EnvError(f"envFrom[{index}].prefix must be a string")
        if isinstance(source.get("configMapRef"), Mapping):
            kind, ref, objects = "configMap", source["configMapRef"], config_maps
        elif isinstance(source.get("secretRef"), Mapping):
            kind, ref, objects = "secret", source["secretRef"], secrets
        else:
            continue
        data = _fetched(kind, ref, objects, pod.namespace)
        if data is None:
            continue
        invalid = []
        for key, item in data.items():
            name = prefix + key
            if _env_name_errors(name):
                invalid.append(name)
                continue
            env[name] = item
        if invalid:
            warnings.append(f"Keys [{', '.join(sorted(invalid))}] from the EnvFrom {kind} "
                            f"{pod.namespace}/{ref.get('name')} were skipped since they are considered invalid "
                            f"environment variable names.")

    lookup = mapping_for(env, services)  # sees `env` as it grows: later entries see earlier ones
    for var in container.env:
        if var.value:
            env[var.name] = expand(var.value, lookup)
        elif var.value_from is not None:
            if error := unsupported.env_source_error(var):  # refused, never an empty value (EnvFiles)
                raise EnvError(error)
            resolved = _value_from(var.value_from, container, context, config_maps, secrets)
            if resolved is None:
                continue  # optional source or key missing: the variable is not set at all
            env[var.name] = resolved
        else:
            env[var.name] = ""

    result = list(env.items()) + [(k, v) for k, v in services.items() if k not in env]
    return EnvResult(env=tuple(result), warnings=tuple(warnings))


def _fetched(kind: str, ref: Mapping[str, Any], objects: Mapping[str, Mapping[str, str] | None],
             namespace: str) -> Mapping[str, str] | None:
    """The data of a referenced ConfigMap/Secret; None when it is missing and optional; EnvError otherwise."""
    name = ref.get("name")
    if not isinstance(name, str) or not name:
        raise EnvError(f"{kind} reference without a name")
    if name not in objects:
        raise ValueError(f"{kind} {namespace}/{name} was not fetched: pass it (or None) to resolve the env")
    data = objects[name]
    if data is None:
        if ref.get("optional") is True:
            return None
        raise EnvError(f'{"configmap" if kind == "configMap" else "secret"} "{name}" not found')
    return data


def _env_name_errors(name: str) -> bool:
    """Upstream `IsRelaxedEnvVarName` fails: empty, or anything but printable ASCII other than ``=``."""
    return not name or any(not (32 <= ord(char) <= 126) or char == "=" for char in name)


@dataclasses.dataclass(frozen=True, kw_only=True)
class _FieldContext:
    pod: spec.Pod
    node_name: str
    host_ips: tuple[str, ...]
    pod_ips: tuple[str, ...]
    allocatable: Mapping[str, str]


def _value_from(value_from: Mapping[str, Any], container: spec.ContainerSpec, context: _FieldContext,
                config_maps: Mapping[str, Mapping[str, str] | None],
                secrets: Mapping[str, Mapping[str, str] | None]) -> str | None:
    """One ``valueFrom``; None when an optional source or key is missing."""
    if isinstance(value_from.get("fieldRef"), Mapping):
        return field_ref_value(value_from["fieldRef"], context.pod, node_name=context.node_name,
                               host_ips=context.host_ips, pod_ips=context.pod_ips)
    if isinstance(value_from.get("resourceFieldRef"), Mapping):
        return resource_field_ref_value(value_from["resourceFieldRef"], context.pod, container,
                                        node_allocatable=context.allocatable)
    for key, kind, objects, label in (("configMapKeyRef", "configMap", config_maps, "ConfigMap"),
                                      ("secretKeyRef", "secret", secrets, "Secret")):
        ref = value_from.get(key)
        if not isinstance(ref, Mapping):
            continue
        data = _fetched(kind, ref, objects, context.pod.namespace)
        if data is None:
            return None
        item = ref.get("key")
        if item not in data:
            if ref.get("optional") is True:
                return None
            raise EnvError(f"couldn't find key {item} in {label} {context.pod.namespace}/{ref.get('name')}")
        return data[item]
    return ""  # an unknown source leaves the value empty (fileKeyRef is refused before: `build_env`)


def field_ref_value(field_ref: Mapping[str, Any], pod: spec.Pod, *, node_name: str = "",
                    host_ips: Sequence[str] = (), pod_ips: Sequence[str] = ()) -> str:
    """A downward API ``fieldRef`` (upstream `podFieldSelectorRuntimeValue` + `ExtractFieldPathAsString`)."""
    version = field_ref.get("apiVersion") or "v1"
    path = field_ref.get("fieldPath") or ""
    if version != "v1":
        raise EnvError(f"unsupported pod version: {version}")
    if path == "spec.nodeName":
        return node_name or pod.spec.node_name
    if path == "spec.serviceAccountName":
        return pod.spec.service_account_name
    if path == "status.hostIP":
        return host_ips[0] if host_ips else ""
    if path == "status.hostIPs":
        return ",".join(host_ips)
    if path == "status.podIP":
        return pod_ips[0] if pod_ips else ""
    if path == "status.podIPs":
        return ",".join(pod_ips)
    if path == "metadata.name":
        return pod.name
    if path == "metadata.namespace":
        return pod.namespace
    if path == "metadata.uid":
        return pod.uid
    if path in ("metadata.labels", "metadata.annotations"):
        return _format_map(pod.labels if path == "metadata.labels" else pod.annotations)
    subscripted = _SUBSCRIPTED.match(path)
    if subscripted is not None:
        which, key = subscripted.groups()
        errors = _qualified_name_errors(key.lower() if which == "metadata.annotations" else key)
        if errors:
            raise EnvError(f"invalid key subscript in {path}: {';'.join(errors)}")
        values = pod.labels if which == "metadata.labels" else pod.annotations
        return values.get(key, "")
    raise EnvError(f"unsupported fieldPath: {path}")


def _format_map(values: Mapping[str, str]) -> str:
    """Upstream `fieldpath.FormatMap`: sorted ``key="value"`` lines."""
    return "\n".join(f"{key}={gotext.go_quote(values[key])}" for key in sorted(values))


def _qualified_name_errors(name: str) -> list[str]:
    """Upstream `IsQualifiedName`, reduced to its verdicts (messages shortened)."""
    prefix, slash, local = name.rpartition("/")
    errors = []
    if slash and not validation.is_dns1123_subdomain(prefix):
        errors.append("prefix part must be a lowercase RFC 1123 subdomain")
    if not validation.is_qualified_name_part(local):
        errors.append("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
                      "end with an alphanumeric character, at most 63 characters")
    return errors


def resource_field_ref_value(ref: Mapping[str, Any], pod: spec.Pod, container: spec.ContainerSpec, *,
                             node_allocatable: Mapping[str, str] | None = None) -> str:
    """A downward API ``resourceFieldRef`` (upstream `ExtractContainerResourceValue`).

    Unset (or zero) cpu/memory/ephemeral-storage limits read as node allocatable, as the kubelet defaults
    them for the downward API; the value is divided by `divisor` (default 1) and rounded up.
    """
    name = ref.get("containerName") or ""
    target = container
    if name:
        found = pod.spec.container(name)
        if found is None:
            raise EnvError(f"container {name} not found")
        target = found
    resource = ref.get("resource") or ""
    divisor = qos.parse_quantity(ref.get("divisor") or 0)
    if divisor == 0:
        divisor = qos.parse_quantity(1)
    kind, _, resource_name = resource.partition(".")
    if kind not in ("limits", "requests") or not (
            resource_name in ("cpu", "memory", "ephemeral-storage") or resource_name.startswith("hugepages-")):
        raise EnvError(f"unsupported container resource : {resource}")
    values = dict(target.resources.limits if kind == "limits" else target.resources.requests)
    if kind == "limits":
        for defaulted in _DEFAULTED_LIMITS:
            if qos.parse_quantity(values.get(defaulted, 0)) == 0 and defaulted in (node_allocatable or {}):
                values[defaulted] = (node_allocatable or {})[defaulted]
    amount = values.get(resource_name, 0)
    if resource_name == "cpu":
        return str(math.ceil(qos.milli_value(amount) / qos.milli_value(divisor)))
    return str(math.ceil(qos.value(amount) / qos.value(divisor)))


__all__ = [
    "EnvError",
    "EnvResult",
    "build_env",
    "expand",
    "field_ref_value",
    "mapping_for",
    "referenced_objects",
    "resolve_env",
    "resource_field_ref_value",
]
