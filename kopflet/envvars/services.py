"""The cluster's Services, kept current by a list+watch, for the service link environment variables.

Upstream the kubelet has a Service informer for the same purpose (`serviceLister`); the node identity may
list and watch Services in every namespace.
"""

from __future__ import annotations

import asyncio
import logging

from kopflet.client.kubeapi import API_ERRORS, KubeApiError, KubeClient
from kopflet.envvars import service_env

logger = logging.getLogger(__name__)

RETRY_MIN, RETRY_MAX = 1.0, 30.0
# Upstream fails container creation when the Service informer has not synced yet; a short wait first
# spares pods synced in the agent's first moments that error.
SYNC_WAIT = 10.0


class ServiceCache:
    def __init__(self, api: KubeClient) -> None:
        self.api = api
        self._services: dict[tuple[str, str], service_env.Service] = {}
        self._synced = asyncio.Event()

    async def env(self, namespace: str, enable_service_links: bool, *, static: bool = False) -> dict[str, str]:
        """The service link variables for a pod in `namespace`; raises ValueError before the first list, except
        for a static pod, which gets what is known (upstream makeEnvironmentVariables: a static pod must start
        without the apiserver, which may be one of the static pods)."""
        if not self._synced.is_set() and not static:
            try:
                await asyncio.wait_for(self._synced.wait(), SYNC_WAIT)
            except TimeoutError:
                raise ValueError("services have not yet been read at least once, cannot construct envvars") from None
        return service_env.service_env(self._services.values(), namespace, enable_service_links)

    async def run(self) -> None:
        """List, then watch from that version; list again on 410 Gone or any error, with backoff."""
        delay = RETRY_MIN
        while True:
            try:
                version = await self._list()
                delay = RETRY_MIN
                while True:
                    async for event in self.api.watch("/api/v1/services", version):
                        version = self._apply(event) or version
            except (*API_ERRORS, ValueError) as exc:
                if not (isinstance(exc, KubeApiError) and exc.status == 410):
                    logger.warning(f"service watch failed, listing again in {delay:.0f}s: {exc}")
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, RETRY_MAX)

    async def _list(self) -> str:
        payload = await self.api.request("GET", "/api/v1/services")
        self._services = {}
        for item in payload.get("items") or ():
            service = service_env.Service.from_object(item)
            self._services[service.namespace, service.name] = service
        self._synced.set()
        return str((payload.get("metadata") or {}).get("resourceVersion") or "")

    def _apply(self, event: dict) -> str:
        obj = event.get("object") or {}
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if event.get("type") == "BOOKMARK":
            return version
        service = service_env.Service.from_object(obj)
        if event.get("type") == "DELETED":
            self._services.pop((service.namespace, service.name), None)
        else:
            self._services[service.namespace, service.name] = service
        return version
