"""The agent's one writer of pod status (upstream pkg/kubelet/status/status_manager.go).

Every status the agent sends goes through `StatusManager.write`: the smallest strategic merge patch between what
the API holds and what the agent wants (`generate.status_patch`), nothing when nothing changed. The final DELETE of a
terminated pod is here too, as upstream's status manager sends it once the terminal status is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kopflet.client.kubeapi import KubeClient
from kopflet.status import generate


class StatusManager:
    def __init__(self, api: KubeClient) -> None:
        self.api = api

    async def write(self, namespace: str, name: str, uid: str, previous: Mapping[str, Any],
                    desired: Mapping[str, Any]) -> dict[str, Any] | None:
        """Send what changed from `previous` to `desired`; the status the API now holds, or None when nothing was
        sent or the object under that name is another pod (upstream checks the UID the same way)."""
        patch = generate.status_patch(previous, desired)
        if not patch:
            return None
        updated = await self.api.patch_pod_status(namespace, name, patch)
        if updated.get("metadata", {}).get("uid") != uid:
            return None
        return dict(updated.get("status") or {})

    async def delete(self, namespace: str, name: str, uid: str) -> bool:
        """The final delete of a terminated pod: grace 0 and a UID precondition (upstream canBeDeleted and
        the status manager's deletion with Preconditions.UID)."""
        return await self.api.delete_pod(namespace, name, uid)
