"""The node info manager's I/O (upstream pkg/volume/csi/nodeinfomanager at v1.37.1): the Node and CSINode writes of
CSI driver registration, with upstream's retries. What each write holds is `kopflet.volumes.csi.nodeinfo`'s.

- `install_csi_driver` (a driver registered): the Node's ``csi.volume.kubernetes.io/nodeid`` annotation and the
  driver's topology labels (GET the Node, then a strategic merge patch of its metadata on ``nodes/<name>/status``,
  as upstream's PatchNodeStatus), then the driver's entry in the CSINode (GET, created when missing, PUT).
- `uninstall_csi_driver` (its registration socket gone): the CSINode entry, then the annotation.
- `initialize_csi_node` (at start, upstream's initializeCSINode goroutine): wait until the apiserver answers for
  the CSINode, then create it (owned by the Node, with the migrated-plugins annotation) or fix its annotation,
  retried as upstream's (6 tries over some 140 s); where upstream's kubelet then exits to try again from the start,
  the agent logs the error and starts over.

Every write is tried up to 4 times (upstream updateBackoff: 10, 50, 250 ms apart), then fails with upstream's
``timed out waiting for the condition; caused by: ...`` text. A CSINode owned by another Node of the same name (the
Node was deleted and made again) is deleted and made again. The node's UID for the owner reference is read from
the Node by the initialization, or at the first write that needs it when a driver registers before that.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kopflet.client.kubeapi import API_ERRORS, STRATEGIC_MERGE, KubeApiError, KubeClient, q
from kopflet.gotext import go_json, go_quote
from kopflet.volumes.csi import nodeinfo
from kopflet.volumes.csi.nodeinfo import NodeInfoError

logger = logging.getLogger(__name__)

CSINODES = "/apis/storage.k8s.io/v1/csinodes"
API_POLL = 1.0  # waitForAPIServerForever: wait.PollImmediateInfinite(time.Second, ...)
INIT_BACKOFF = (0.03, 0.24, 1.92, 15.36, 122.88)
"""initializeCSINode's wait.Backoff (Steps 6, Duration 30 ms, Factor 8, Jitter 0.1): the waits between its tries."""


class NodeInfoManagerError(Exception):
    """A Node or CSINode write failed for good; the text is upstream's."""


def _text(exc: BaseException) -> str:
    """An attempt's error as client-go prints it: the apiserver's message for an answer."""
    return exc.message if isinstance(exc, KubeApiError) else str(exc) or type(exc).__name__


class NodeInfoManager:
    """Upstream nodeInfoManager for the Node `node_name`."""

    def __init__(self, api: KubeClient, node_name: str, *,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 jitter: Callable[[], float] = random.random) -> None:
        self.api, self.node_name = api, node_name
        self.node_uid = ""
        self.sleep, self.jitter = sleep, jitter
        self._lock = asyncio.Lock()  # upstream nim.lock: one try at a time

    @property
    def _csi_node_path(self) -> str:
        return f"{CSINODES}/{q(self.node_name)}"

    async def _with_backoff(self, attempt: Callable[[], Awaitable[None]],
                            waits: tuple[float, ...] = nodeinfo.UPDATE_BACKOFF) -> list[str] | None:
        """wait.ExponentialBackoff over `attempt`: None once one succeeds, else every try's error."""
        errors: list[str] = []
        for wait in (*waits, None):
            try:
                await attempt()
                return None
            except (*API_ERRORS, NodeInfoError, NodeInfoManagerError) as exc:
                errors.append(_text(exc))
            if wait is not None:
                await self.sleep(wait * (1 + nodeinfo.UPDATE_BACKOFF_JITTER * self.jitter()))
        return errors

    # ------------------------------------------------------------------------------------------- drivers

    async def install_csi_driver(self, driver: str, node_id: str, max_attach_limit: int,
                                 topology: Mapping[str, str] | None) -> None:
        """Upstream InstallCSIDriver: the Node's annotation and labels, then the CSINode's entry."""
        if not node_id:
            raise NodeInfoManagerError("error adding CSI driver node info: driverNodeID must not be empty")

        def change(labels: Mapping[str, str] | None, annotations: Mapping[str, str] | None
                   ) -> tuple[dict[str, str] | None, dict[str, str] | None]:
            return (nodeinfo.update_topology_labels(labels, topology),
                    nodeinfo.update_node_id(annotations, driver, node_id))

        errors = await self._with_backoff(lambda: self._try_update_node(change))
        if errors is not None:
            raise NodeInfoManagerError(f"error updating Node object with CSI driver node info: "
                                       f"{nodeinfo.retries_exhausted('node', errors)}")
        await self.update_csi_driver(driver, node_id, max_attach_limit, topology)

    async def update_csi_driver(self, driver: str, node_id: str, max_attach_limit: int,
                                topology: Mapping[str, str] | None) -> None:
        """Upstream UpdateCSIDriver (and InstallCSIDriver's second half): the driver's CSINode entry."""
        errors = await self._with_backoff(
            lambda: self._try_update_csi_node(driver, node_id, max_attach_limit, topology))
        if errors is not None:
            raise NodeInfoManagerError(f"error updating CSINode object with CSI driver node info: "
                                       f"{nodeinfo.retries_exhausted('CSINode', errors)}")

    async def uninstall_csi_driver(self, driver: str) -> None:
        """Upstream UninstallCSIDriver: the CSINode's entry, then the Node's annotation."""
        errors = await self._with_backoff(lambda: self._try_uninstall_from_csi_node(driver))
        if errors is not None:
            raise NodeInfoManagerError(f"error uninstalling CSI driver from CSINode object "
                                       f"{nodeinfo.retries_exhausted('CSINode', errors)}")

        def change(labels: Mapping[str, str] | None, annotations: Mapping[str, str] | None
                   ) -> tuple[dict[str, str] | None, dict[str, str] | None]:
            return None, nodeinfo.remove_node_id(annotations, driver)

        errors = await self._with_backoff(lambda: self._try_update_node(change))
        if errors is not None:
            raise NodeInfoManagerError(f"error removing CSI driver node info from Node object "
                                       f"{nodeinfo.retries_exhausted('node', errors)}")

    async def _try_update_node(self, change: Callable[[Mapping[str, str] | None, Mapping[str, str] | None],
                                                      tuple[dict[str, str] | None, dict[str, str] | None]]) -> None:
        """Upstream tryUpdateNode: the Node as it is now, changed, patched when a change says it updated."""
        async with self._lock:
            node = await self.api.request("GET", f"/api/v1/nodes/{q(self.node_name)}")
            metadata = node.get("metadata") or {}
            labels, annotations = change(metadata.get("labels"), metadata.get("annotations"))
            if labels is None and annotations is None:
                return
            patch = nodeinfo.node_patch(metadata, labels, annotations)
            try:
                await self.api.request("PATCH", f"/api/v1/nodes/{q(self.node_name)}/status", body=patch,
                                       content_type=STRATEGIC_MERGE)
            except KubeApiError as exc:  # nodeutil.PatchNodeStatus's wrapping
                raise NodeInfoManagerError(f"failed to patch status {go_quote(go_json(patch, sort_keys=True))} for "
                                           f"node {go_quote(self.node_name)}: {exc.message}") from None

    # ------------------------------------------------------------------------------------------- CSINode

    async def _node_uid(self) -> str:
        if not self.node_uid:
            node = await self.api.request("GET", f"/api/v1/nodes/{q(self.node_name)}")
            self.node_uid = str((node.get("metadata") or {}).get("uid", ""))
        return self.node_uid

    async def create_csi_node(self) -> dict[str, Any]:
        """Upstream CreateCSINode."""
        body = nodeinfo.new_csi_node(self.node_name, await self._node_uid())
        return await self.api.request("POST", CSINODES, body=body)

    async def _ensure_owned(self, csi_node: Mapping[str, Any]) -> None:
        """Upstream ensureNodeOwnsCSINode: a CSINode of another Node is deleted, and this try fails."""
        owned, old_uid = nodeinfo.owner_uid(csi_node, self.node_name, await self._node_uid())
        if owned:
            return
        logger.info(f"existing CSINode {go_quote(self.node_name)} is owned by different node "
                    f"(oldNodeID={go_quote(old_uid)}, newNodeID={go_quote(self.node_uid)}), cleaning up...")
        try:
            await self.api.request("DELETE", self._csi_node_path)
        except API_ERRORS as exc:
            raise NodeInfoManagerError(f"error deleting existing CSINode {go_quote(self.node_name)}: "
                                       f"{_text(exc)}") from None
        raise NodeInfoManagerError(nodeinfo.not_owned_message(self.node_name, old_uid, self.node_uid))

    async def _try_update_csi_node(self, driver: str, node_id: str, max_attach_limit: int,
                                   topology: Mapping[str, str] | None) -> None:
        """Upstream tryUpdateCSINode + installDriverToCSINode."""
        async with self._lock:
            csi_node = await self.api.get_or_none(self._csi_node_path)
            if csi_node is None:
                csi_node = await self.create_csi_node()
            await self._ensure_owned(csi_node)
            install = nodeinfo.install_driver(csi_node, driver, node_id, max_attach_limit, topology)
            for line in install.warnings:
                logger.warning(line)
            for line in install.errors:
                logger.error(line)
            if install.csi_node is not None:
                await self.api.request("PUT", self._csi_node_path, body=install.csi_node)

    async def _try_uninstall_from_csi_node(self, driver: str) -> None:
        """Upstream tryUninstallDriverFromCSINode: nothing to do without a CSINode."""
        async with self._lock:
            csi_node = await self.api.get_or_none(self._csi_node_path)
            if csi_node is None:
                return
            updated = nodeinfo.uninstall_driver(csi_node, driver)
            if updated is not None:
                await self.api.request("PUT", self._csi_node_path, body=updated)

    # ------------------------------------------------------------------------------------ initialization

    async def initialize_csi_node_with_annotation(self) -> None:
        """Upstream InitializeCSINodeWithAnnotation: the Node's UID read, the CSINode created or its migration
        annotation set; upstream's error after 4 failed tries (the last try's error only)."""
        errors = await self._with_backoff(self._try_initialize)
        if errors is not None:
            raise NodeInfoManagerError(f"error updating CSINode annotation: {nodeinfo.WAIT_TIMEOUT}; caused by: "
                                       f"{errors[-1]}")

    async def _try_initialize(self) -> None:
        try:
            async with self._lock:
                node = await self.api.request("GET", f"/api/v1/nodes/{q(self.node_name)}")
                self.node_uid = str((node.get("metadata") or {}).get("uid", ""))
                csi_node = await self.api.get_or_none(self._csi_node_path)
                if csi_node is None:
                    await self.create_csi_node()
                    return
                await self._ensure_owned(csi_node)
                annotations = nodeinfo.set_migration_annotation((csi_node.get("metadata") or {}).get("annotations"))
                if annotations is not None:
                    body = {**csi_node, "metadata": {**csi_node["metadata"], "annotations": annotations}}
                    await self.api.request("PUT", self._csi_node_path, body=body)
        except (*API_ERRORS, NodeInfoManagerError) as exc:
            logger.debug(f"Failed to publish CSINode: {_text(exc)}")
            raise

    async def wait_for_api_server(self) -> None:
        """Upstream waitForAPIServerForever: until a GET of the CSINode is answered (found or not), every second."""
        while True:
            try:
                await self.api.request("GET", self._csi_node_path)
                return
            except KubeApiError as exc:
                if exc.not_found:
                    return
                error = _text(exc)
            except API_ERRORS as exc:
                error = _text(exc)
            logger.debug(f"Failed to contact API server when waiting for CSINode publishing: {error}")
            await self.sleep(API_POLL)

    async def initialize_csi_node(self) -> None:
        """Upstream initializeCSINode's goroutine, until the CSINode is initialized (cancel to stop it)."""
        while True:
            await self.wait_for_api_server()
            errors = await self._with_backoff(self._initialize_once, INIT_BACKOFF)
            if errors is None:
                logger.info(f"CSINode {self.node_name} initialized")
                return
            # upstream: klog.Fatalf, and the restarted kubelet tries again from the start
            logger.error(f"Failed to initialize CSINode after retrying: {nodeinfo.WAIT_TIMEOUT}")

    async def run(self) -> None:
        """The node's loop: `initialize_csi_node`, then nothing more (driver registrations write the rest)."""
        await self.initialize_csi_node()

    async def _initialize_once(self) -> None:
        try:
            await self.initialize_csi_node_with_annotation()
        except NodeInfoManagerError as exc:
            logger.error(f"Failed to initialize CSINode: {exc}")
            raise


__all__ = ["CSINODES", "NodeInfoManager", "NodeInfoManagerError"]
