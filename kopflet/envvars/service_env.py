"""Service link environment variables (``KUBERNETES_SERVICE_HOST`` ...), as the kubelet injects them.

Mirrors upstream `getServiceEnvVarMap` (pkg/kubelet/kubelet_pods.go) and `envvars.FromServices`
(pkg/kubelet/envvars/envvars.go): the ``kubernetes`` Service of the ``default`` namespace is always
included; the other Services of the pod's own namespace only when ``enableServiceLinks`` is true (the
default). Services without a cluster IP (headless, ExternalName) are skipped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from kopflet import gotext

MASTER_NAMESPACE = "default"
MASTER_SERVICES = frozenset({"kubernetes"})


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServicePort:
    name: str
    port: int
    protocol: str = "TCP"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Service:
    namespace: str
    name: str
    cluster_ip: str
    ports: tuple[ServicePort, ...] = ()

    @property
    def ip_set(self) -> bool:
        """Upstream `IsServiceIPSet`: a real cluster IP, not headless "None" nor empty."""
        return self.cluster_ip not in ("", "None")

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Service:
        meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        ports = tuple(ServicePort(name=str(p.get("name") or ""), port=int(p.get("port") or 0),
                                  protocol=str(p.get("protocol") or "TCP"))
                      for p in spec.get("ports") or () if isinstance(p, Mapping))
        return cls(namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""),
                   cluster_ip=str(spec.get("clusterIP") or ""), ports=ports)


def visible_services(services: Iterable[Service], namespace: str, enable_service_links: bool) -> list[Service]:
    """The Services whose variables a pod in `namespace` gets, by name (upstream `getServiceEnvVarMap`)."""
    chosen: dict[str, Service] = {}
    for service in services:
        if not service.ip_set:
            continue
        if service.namespace == MASTER_NAMESPACE and service.name in MASTER_SERVICES:
            chosen.setdefault(service.name, service)
        elif service.namespace == namespace and enable_service_links:
            chosen[service.name] = service
    return [chosen[name] for name in sorted(chosen)]


def _env_name(name: str) -> str:
    return name.replace("-", "_").upper()


def service_env(services: Iterable[Service], namespace: str, enable_service_links: bool = True) -> dict[str, str]:
    """The service link variables of a pod, in upstream order (`FromServices` plus Docker link variables)."""
    env: dict[str, str] = {}
    for service in visible_services(services, namespace, enable_service_links):
        if not service.ports:
            continue
        prefix = _env_name(service.name)
        env[f"{prefix}_SERVICE_HOST"] = service.cluster_ip
        env[f"{prefix}_SERVICE_PORT"] = str(service.ports[0].port)
        for port in service.ports:
            if port.name:
                env[f"{prefix}_SERVICE_PORT_{_env_name(port.name)}"] = str(port.port)
        for index, port in enumerate(service.ports):
            proto = port.protocol.lower()
            url = f"{proto}://{gotext.join_host_port(service.cluster_ip, port.port)}"
            if index == 0:
                env[f"{prefix}_PORT"] = url  # Docker special-cases the first port
            port_prefix = f"{prefix}_PORT_{port.port}_{port.protocol.upper()}"
            env[port_prefix] = url
            env[f"{port_prefix}_PROTO"] = proto
            env[f"{port_prefix}_PORT"] = str(port.port)
            env[f"{port_prefix}_ADDR"] = service.cluster_ip
    return env
