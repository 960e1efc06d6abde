"""The cluster's Services, kept current by a list+watch, for the service link environment variables.

Upstream the kubelet has a Service informer for the same purpose (`serviceLister`); the node identity may
list and watch Services in every namespace. The list+watch is `kopflet.client.informer`'s.
"""

from __future__ import annotations

from kopflet.client.informer import Informer
from kopflet.client.kubeapi import KubeClient
from kopflet.envvars import service_env

# Upstream fails container creation when the Service informer has not synced yet; a short wait first
# spares pods synced in the agent's first moments that error.
SYNC_WAIT = 10.0


class ServiceCache:
    def __init__(self, api: KubeClient) -> None:
        self.api = api
        self._informer = Informer(api, "/api/v1/services", service_env.Service.from_object, what="service")

    async def env(self, namespace: str, enable_service_links: bool, *, static: bool = False) -> dict[str, str]:
        """The service link variables for a pod in `namespace`; raises ValueError before the first list, except
        for a static pod, which gets what is known (upstream makeEnvironmentVariables: a static pod must start
        without the apiserver, which may be one of the static pods)."""
        if not self._informer.has_synced() and not static:
            if not await self._informer.wait_synced(SYNC_WAIT):
                raise ValueError("services have not yet been read at least once, cannot construct envvars")
        return service_env.service_env(self._informer.objects.values(), namespace, enable_service_links)

    async def run(self) -> None:
        """List, then watch from that version; list again on 410 Gone or any error, with backoff."""
        await self._informer.run()

