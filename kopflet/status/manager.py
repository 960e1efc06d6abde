"""The agent's one writer of pod status (upstream pkg/kubelet/status/status_manager.go).

Every status the agent sends goes through `StatusManager.write`: the smallest strategic merge patch between what
the API holds and what the agent wants (`generate.status_patch`), nothing when nothing changed. The final DELETE of a
terminated pod is here too, as upstream's status manager sends it once the terminal status is written.

A status the apiserver cannot take (unreachable, an error, a static pod whose mirror pod is not there yet) does not
hold up the pod's sync: as upstream's status manager, which caches the status and sends it from its own loop, the
write answers with the status the API would hold, and `run` sends it again every `RETRY_PERIOD` until it lands.

In standalone mode (`kopflet.client.standalone`) nothing is sent: upstream's status manager is not started without a
client ("Kubernetes client is nil, not starting status manager") and keeps the statuses in its cache, so a write
answers with the status as if the API had taken it, and there is no final DELETE.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Mapping
from typing import Any

from kopflet.client.kubeapi import API_ERRORS, KubeClient
from kopflet.client.standalone import is_standalone
from kopflet.logs.verbosity import v
from kopflet.status import generate

logger = logging.getLogger(__name__)

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
"""On a mirror pod, the UID of the static pod it mirrors (kopflet/config/static_pods.py)."""
RETRY_PERIOD = 10.0  # upstream status manager's syncPeriod
"""How often the statuses the apiserver did not take are sent again."""


@dataclasses.dataclass
class _Unsent:
    """A pod's status the apiserver does not hold yet: what it last held (`base`) and what it should (`status`)."""

    namespace: str
    name: str
    base: Mapping[str, Any]
    status: Mapping[str, Any]
    failures: int = 0
    precondition: bool = True


class StatusManager:
    def __init__(self, api: KubeClient) -> None:
        self.api = api
        self.standalone = is_standalone(api)
        self._unsent: dict[str, _Unsent] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def write(self, namespace: str, name: str, uid: str, previous: Mapping[str, Any],
                    desired: Mapping[str, Any], *, precondition: bool = True) -> dict[str, Any] | None:
        """Send what changed from `previous` to `desired`; the status the API now holds (or will, once it takes
        it), or None when nothing was sent or the object under that name is another pod (upstream checks the UID
        the same way; a static pod's status lands on its mirror pod, whose annotation names the static pod's UID).

        While the apiserver has not taken an earlier status of the pod, no request is made here: `run` sends the
        latest one, so a pod's sync never waits on an apiserver that does not answer. `precondition`: the patch
        names the pod's UID, so it never lands on a pod recreated under the name (upstream
        preparePatchBytesForPodStatus); not for a static pod, whose mirror pod has a UID of its own. In standalone
        mode nothing is sent and the status is answered at once."""
        patch = generate.status_patch(previous, desired)
        if self.standalone:  # the status stays the agent's own: nothing to send it to
            return generate.apply_status_patch(previous, patch) if patch else None
        unsent = self._unsent.get(uid)
        if not patch and unsent is None:
            return None
        wanted = generate.apply_status_patch(previous, patch)
        if unsent is not None:
            unsent.status = wanted
            if unsent.failures:
                return wanted
        else:
            self._unsent[uid] = _Unsent(namespace, name, previous, wanted, precondition=precondition)
        sent, held = await self._send(uid)
        return held if sent else wanted

    def unsent(self, uid: str) -> bool:
        """Whether the pod has a status the apiserver has not taken yet."""
        return uid in self._unsent

    def observed(self, uid: str, api_status: Mapping[str, Any]) -> dict[str, Any] | None:
        """A pod's body arrived from the watch with the API's `api_status`: the next patch is made against it, and the
        status the agent decided but could not send yet is the one its sync must see (upstream reads its own
        status cache, never the API's copy); None when nothing is unsent."""
        unsent = self._unsent.get(uid)
        if unsent is None:
            return None
        unsent.base = api_status
        return dict(unsent.status)

    @staticmethod
    def _owned(updated: Mapping[str, Any], uid: str) -> bool:
        meta = updated.get("metadata") or {}
        return meta.get("uid") == uid or (meta.get("annotations") or {}).get(MIRROR_ANNOTATION) == uid

    async def _send(self, uid: str) -> tuple[bool, dict[str, Any] | None]:
        """Patch the pod's unsent status: (False, None) when the apiserver did not take it (kept for `run`),
        else (True, the status the API holds, or None when nothing was sent or the name is another pod's)."""
        async with self._locks.setdefault(uid, asyncio.Lock()):
            unsent = self._unsent.get(uid)
            if unsent is None:
                return True, None
            status = unsent.status
            patch = generate.status_patch(unsent.base, status)
            if patch and unsent.precondition:
                patch = {"metadata": {"uid": uid}, **patch}
            try:
                updated = await self.api.patch_pod_status(unsent.namespace, unsent.name, patch) if patch else None
            except API_ERRORS as exc:
                # said once per outage, not every RETRY_PERIOD: a static pod waits for the apiserver it may run
                unsent.failures += 1
                logger.log(logging.WARNING if unsent.failures == 1 else logging.DEBUG,
                           f"pod {unsent.namespace}/{unsent.name}: status not written, sending it again every "
                           f"{RETRY_PERIOD:.0f}s until it is: {exc}")
                return False, None
            if patch and logger.isEnabledFor(v(3)):  # upstream syncPod: "Patch status for pod" at V(3), with the patch
                logger.log(v(3), f"pod {unsent.namespace}/{unsent.name}: status patched: "
                                 f"{json.dumps(patch, separators=(',', ':'), default=str)}")
            held = dict(updated.get("status") or {}) if updated is not None and self._owned(updated, uid) else None
            if unsent.status is status:
                del self._unsent[uid]
                self._locks.pop(uid, None)
            else:  # a newer status came while this one was on its way: it is sent against what the API now holds
                unsent.base = held if held is not None else status
            return True, held

    async def run(self) -> None:
        """Send the statuses the apiserver did not take, every RETRY_PERIOD, until cancelled; all at once, so one
        pod's slow answer does not hold up the others'."""
        while True:
            await asyncio.sleep(RETRY_PERIOD)
            await asyncio.gather(*(self._send(uid) for uid in list(self._unsent)))

    def forget(self, uid: str) -> None:
        """The pod is gone from the agent: its unsent status goes too (upstream RemoveOrphanedStatuses)."""
        self._unsent.pop(uid, None)
        self._locks.pop(uid, None)

    async def delete(self, namespace: str, name: str, uid: str) -> bool:
        """The final delete of a terminated pod: grace 0 and a UID precondition (upstream canBeDeleted and
        the status manager's deletion with Preconditions.UID); False in standalone mode (nothing to delete from)."""
        if self.standalone:
            return False
        deleted = await self.api.delete_pod(namespace, name, uid)
        if deleted:  # upstream syncPod: "Pod fully terminated and removed from etcd" at V(3)
            logger.log(v(3), f"pod {namespace}/{name}: fully terminated and removed from the apiserver")
        return deleted
