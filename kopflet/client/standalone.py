"""The apiserver client of standalone mode: none (upstream's nil KubeClient, EventClient and HeartbeatClient).

`StandaloneClient` stands where `KubeClient` would, so every part keeps its one client, but it never opens a
connection: the parts upstream leaves out without a client (registration, Lease, node status, pod status, mirror pods,
the pod and Service watches, events in the API, CSINode, pod certificates, ClusterTrustBundles) look at
`is_standalone` where upstream checks ``kubeClient == nil``, and are not run. Anything else that still asks (a static
pod's ConfigMap or Secret volume, a RuntimeClass lookup that slipped through) gets `StandaloneError`, a refusal, as
upstream's volume host refuses them in standalone mode.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from kopflet.client.kubeapi import WATCH_TIMEOUT, Credentials, KubeApiError, KubeClient

NOT_SUPPORTED = "not supported due to running kubelet in standalone mode"
"""upstream volume_host.go GetSecretFunc/GetConfigMapFunc without a client."""


class StandaloneError(KubeApiError):
    """A request made in standalone mode: there is no apiserver to send it to (never retried: it would not help)."""

    def __init__(self, method: str, path: str, message: str = NOT_SUPPORTED) -> None:
        super().__init__(0, "", message, method, path)
        self.args = (f"{method} {path}: {message}",)


class StandaloneClient(KubeClient):
    """No apiserver: opens nothing, sends nothing; every request is a `StandaloneError`."""

    def __init__(self, *, user_agent: str = "kopflet") -> None:
        super().__init__(Credentials(server=""), user_agent=user_agent)

    async def open(self) -> None:
        return None

    async def renew_connections(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def request(self, method: str, path: str, *, body: Any = None, content_type: str = "application/json",
                      params: Mapping[str, str] | None = None) -> dict[str, Any]:
        raise StandaloneError(method, path)

    async def watch(self, path: str, resource_version: str, *, timeout_seconds: int = WATCH_TIMEOUT,
                    params: Mapping[str, str] | None = None) -> AsyncIterator[dict[str, Any]]:
        raise StandaloneError("WATCH", path)
        yield {}  # an async generator, as KubeClient.watch


def is_standalone(api: object) -> bool:
    """Whether `api` is standalone mode's client: upstream's ``kubeClient == nil``."""
    return isinstance(api, StandaloneClient)
