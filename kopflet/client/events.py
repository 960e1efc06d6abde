"""Pod events as the upstream kubelet reports them: source ``kubelet`` on this node, repeated events
counted up instead of duplicated (the client-go event correlator's aggregation, simplified).

Writes (creates and the patches that count repeats up) are rate limited as upstream's event client is
(cmd/kubelet/app/server.go: ``eventRecordQPS`` and ``eventBurst`` become the client's QPS and Burst, a client-go
token bucket; QPS 0 is no limit): a write past the bucket waits its turn, in order. As client-go's broadcaster, at
most 1000 events wait; more are dropped with upstream's error.

Posting an event never fails the caller: events are best effort, as upstream. Every event is also logged at V(3)
(client-go's StartStructuredLogging(3), which the kubelet starts in both modes); in standalone mode that is all
(upstream makeEventRecorder: "No api server defined - no events will be sent to API server").
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import random
import time
from collections.abc import Mapping
from typing import Any

from kopflet.api import spec, times
from kopflet.apis.grpc import ratelimit
from kopflet.client.kubeapi import API_ERRORS, KubeApiError, KubeClient
from kopflet.client.standalone import is_standalone
from kopflet.logs.verbosity import v

logger = logging.getLogger(__name__)

# How long a repeated event is folded into the earlier one (client-go's default is 10 minutes).
AGGREGATION_WINDOW = 600.0
MAX_CACHED = 4096
NODE_EVENT_NAMESPACE = "default"
"""client-go's recorder puts the events of a cluster-scoped object (the Node) in metav1.NamespaceDefault."""
MAX_QUEUED_EVENTS = 1000
"""client-go record's maxQueuedEvents: the broadcaster's queue, past which events are dropped."""
MAX_TRIES = 12
"""client-go record's maxTriesPerEvent."""
RETRY_SLEEP = 10.0
"""client-go record's defaultSleepDuration between tries (the first one randomized)."""
DEFAULT_BURST = 10
"""client-go rest.DefaultBurst: the burst of a client whose Burst is 0 (``--event-burst=0``)."""


def event_limit(qps: float, burst: int) -> ratelimit.Limit | None:
    """The event client's token bucket from eventRecordQPS and eventBurst (server.go: QPS 0 becomes -1, no limit;
    rest.RESTClientFor: Burst 0 becomes DefaultBurst); None: no limit."""
    return ratelimit.Limit(qps, burst or DEFAULT_BURST) if qps > 0 else None


def event_log_line(namespace: str, involved: Mapping[str, str], type_: str, reason: str, message: str) -> str:
    """client-go's "Event occurred" line (record/event.go StartStructuredLogging): the object as klog.KRef
    (``namespace/name``, the name alone for a Node), then its fieldPath, kind, apiVersion and the event's type,
    reason and message."""
    obj = f"{namespace}/{involved['name']}" if involved.get("kind") != "Node" else involved["name"]
    fields = {"object": obj, "fieldPath": involved.get("fieldPath", ""), "kind": involved.get("kind", ""),
              "apiVersion": involved.get("apiVersion", ""), "type": type_, "reason": reason, "message": message}
    return "Event occurred " + " ".join(f"{key}={json.dumps(value)}" for key, value in fields.items())


class EventRecorder:
    def __init__(self, api: KubeClient, node_name: str, *, qps: float = 0, burst: int = 0) -> None:
        """`qps`, `burst`: eventRecordQPS and eventBurst (the defaults: no limit)."""
        self.api, self.node_name = api, node_name
        self._seen: dict[tuple[str, ...], tuple[str, str, int, float]] = {}  # key -> (ns, name, count, when)
        self._tasks: set[asyncio.Task[None]] = set()
        self._limit = event_limit(qps, burst)
        self._bucket = ratelimit.Bucket()
        self._sink = not is_standalone(api)
        """Whether events go to the apiserver (not in standalone mode: to the log only)."""

    def pod_event(self, pod: Any, type_: str, reason: str, message: str, container: str | None = None,
                  init: bool = False) -> None:
        """Fire and forget; ``pod`` is a kopflet.api.spec.Pod (name, namespace, uid)."""
        field_path = ""
        if container:
            kind = "initContainers" if init else "containers"
            if isinstance(pod, spec.Pod) and pod.spec.is_ephemeral(container):
                kind = "ephemeralContainers"  # upstream GenerateContainerRef
            field_path = f"spec.{kind}{{{container}}}"
        involved = {"kind": "Pod", "apiVersion": "v1", "namespace": pod.namespace, "name": pod.name,
                    "uid": pod.uid, **({"fieldPath": field_path} if field_path else {})}
        self._spawn(pod.namespace, involved, type_, reason, message)

    def node_event(self, type_: str, reason: str, message: str, uid: str = "") -> None:
        """Fire and forget, about this node (upstream ``recorder.Eventf(kl.nodeRefWithUID(), ...)``: image GC,
        container GC); `uid` is the Node's once known, left out before (as nodeRefWithUID does)."""
        involved = {"kind": "Node", "apiVersion": "v1", "name": self.node_name, **({"uid": uid} if uid else {})}
        self._spawn(NODE_EVENT_NAMESPACE, involved, type_, reason, message)

    def _spawn(self, namespace: str, involved: dict[str, str], type_: str, reason: str, message: str) -> None:
        if logger.isEnabledFor(v(3)):  # client-go's structured logging watcher of the broadcaster
            logger.log(v(3), event_log_line(namespace, involved, type_, reason, message))
        if not self._sink:
            return
        if len(self._tasks) >= MAX_QUEUED_EVENTS:
            logger.error(f"Unable to record event: too many queued events, dropped event {reason} for "
                         f"{namespace}/{involved['name']}: {message}")
            return
        task = asyncio.create_task(self._post(namespace, involved, type_, reason, message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _throttle(self) -> None:
        """Wait for the event client's token (client-go's rate limiter before each request), in call order."""
        if self._limit is None:
            return
        delay, self._bucket = ratelimit.reserve(self._limit, self._bucket, asyncio.get_running_loop().time())
        if delay > 0:
            await asyncio.sleep(delay)

    async def _post(self, namespace: str, involved: dict[str, str], type_: str, reason: str, message: str) -> None:
        """Write the event; an apiserver that cannot be reached is tried again, MAX_TRIES in all, the first wait
        random up to RETRY_SLEEP then RETRY_SLEEP (client-go recordToSink: events born while the apiserver is away,
        such as a kubeadm control plane's own static pods', still land). An apiserver's refusal is not retried."""
        stamp = times.timestamp(datetime.datetime.now(datetime.UTC))
        await self._throttle()  # before the write: upstream's timestamps are the event's, not the write's
        for tries in range(1, MAX_TRIES + 1):
            error = await self._write(namespace, involved, type_, reason, message, stamp)
            if error is None:
                return
            if tries == MAX_TRIES:
                logger.warning(f"could not post event {reason} for {namespace}/{involved['name']} "
                               f"(retry limit exceeded): {error}")
                return
            if tries == 1:
                logger.debug(f"could not post event {reason} for {namespace}/{involved['name']} (may retry after "
                             f"sleeping): {error}")
            await asyncio.sleep(RETRY_SLEEP * (random.random() if tries == 1 else 1.0))

    async def _write(self, namespace: str, involved: dict[str, str], type_: str, reason: str, message: str,
                     stamp: str) -> BaseException | None:
        """One write: None when done (or refused for good, logged), the transport error when it may be retried."""
        key = (involved["kind"], involved["name"], involved.get("uid", ""), involved.get("fieldPath", ""), type_,
               reason, message)
        loop_now = asyncio.get_running_loop().time()
        try:
            seen = self._seen.get(key)
            if seen and loop_now - seen[3] < AGGREGATION_WINDOW:
                ns, name, count, _ = seen
                await self.api.patch_event(ns, name, {"count": count + 1, "lastTimestamp": stamp})
                self._seen[key] = (ns, name, count + 1, loop_now)
                return
            name = f"{involved['name']}.{time.time_ns():x}"  # client-go makeEvent: "%v.%x" of ref.Name, UnixNano
            await self.api.create_event(namespace, {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": name, "namespace": namespace},
                "involvedObject": involved, "reason": reason, "message": message, "type": type_,
                "source": {"component": "kubelet", "host": self.node_name},
                "reportingComponent": "kubelet", "reportingInstance": self.node_name,
                "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
            })
            if len(self._seen) >= MAX_CACHED:
                self._seen.clear()
            self._seen[key] = (namespace, name, 1, loop_now)
        except API_ERRORS as exc:
            if not isinstance(exc, KubeApiError):
                return exc  # no answer from the apiserver: worth another try
            if exc.status == 403 and "being terminated" in exc.message:
                # The namespace is going away with the pod: nothing to report to (upstream drops these too).
                logger.debug(f"event {reason} for {namespace}/{involved['name']} dropped: {exc.message}")
                return None
            if exc.not_found and key in self._seen:
                del self._seen[key]  # the folded-into event expired; the next repeat creates a new one
            logger.warning(f"could not post event {reason} for {namespace}/{involved['name']}: {exc}")
        return None

    async def flush(self, grace: float | None = None) -> None:
        """Wait for events still being posted (on shutdown and in tests); after ``grace`` seconds the rest are
        dropped (upstream's recorder does not hold the kubelet's exit for events its rate limit still queues)."""
        if not self._tasks:
            return
        tasks = list(self._tasks)
        _, pending = await asyncio.wait(tasks, timeout=grace)
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
