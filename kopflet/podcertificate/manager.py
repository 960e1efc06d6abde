"""The pod certificate manager: a PodCertificateRequest per podCertificate source, watched until its signer
answers, refreshed at ``beginRefreshAt`` (upstream pkg/kubelet/podcertificate IssuingManager, v1.37.1).

Upstream keeps a workqueue of sources, fed by the pod manager (TrackPod), by a PodCertificateRequest informer and by a
refresh pass every minute, and the projected volume reads the bundle of its source (GetPodCertificateCredentialBundle).
kopflet handles the sources of a pod when its volumes are set up, which its worker does on every sync (at least every
syncFrequency: the refresh pass); the watch of the node's requests (`run`, upstream's informer, listed and watched
with ``spec.nodeName=<node>``, which the Node authorizer allows; `kopflet.client.informer`) is where a pending
source learns its answer, and an answer wakes the pod's worker, as upstream's informer handlers queue the pod's
sources. What the apiserver lets a node do: create a request (NodeRestriction checks that its node, pod,
ServiceAccount and their UIDs are this node's, the pod's and its ServiceAccount's, and that the pod's volumes name
the signer), get, list and watch the node's requests; read the ServiceAccounts of its pods (for the UID).

The watch starts with the first podCertificate source (a node without one never lists), and nothing survives a
restart: every source then gets a new key and request, as upstream. The rules are in `states` (pure).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kopflet import gotext
from kopflet.api import spec
from kopflet.certificate import openssl
from kopflet.client.events import EventRecorder
from kopflet.client.informer import Delta, Informer
from kopflet.client.kubeapi import API_ERRORS, KubeApiError, KubeClient, q
from kopflet.logs.verbosity import v
from kopflet.podcertificate import keys, states
from kopflet.podcertificate.states import ProjectionKey

logger = logging.getLogger(__name__)

Credentials = tuple[bytes, bytes] | str
"""A source's (private key, certificate chain), or why there is none (the volume's error)."""


class _HandleError(Exception):
    """upstream handleProjection's error: logged, and the source handled again at the pod's next sync."""


def _api_error(exc: BaseException) -> str:
    """An API error as Go's client prints it: the Status message, or what failed to connect."""
    return exc.message if isinstance(exc, KubeApiError) else str(exc) or type(exc).__name__


def _jitter() -> float:
    return random.uniform(0, states.MAX_JITTER)


class PodCertificateManager:
    def __init__(self, api: KubeClient, node_name: str, *, node_uid: Callable[[], str],
                 recorder: EventRecorder | None = None, wake: Callable[[set[str]], None] | None = None,
                 clock: Callable[[], float] = time.time, jitter: Callable[[], float] = _jitter,
                 openssl_command: str = openssl.OPENSSL) -> None:
        """`node_uid`: the registered Node's UID ('' before registration); `wake`: the pod workers' wake (an
        answer to a pending request wakes the pod); `clock`: wall time (the requests' timestamps are)."""
        self.api, self.node_name, self.node_uid = api, node_name, node_uid
        self.recorder, self.wake, self.clock, self.jitter = recorder, wake, clock, jitter
        self.openssl_command = openssl_command
        self._states: dict[ProjectionKey, states.State] = {}
        self._signers: dict[ProjectionKey, str] = {}
        self._informer: Informer[Mapping[str, Any]] = Informer(  # upstream's pcrInformer, its lister by (ns, name)
            api, states.requests_path(), lambda obj: obj, what="PodCertificateRequest",
            params={"fieldSelector": f"{states.NODE_NAME_FIELD}={node_name}"}, on_change=self._changed)
        self._needed = asyncio.Event()

    # ------------------------------------------------------------------------------------------ the sources

    async def credentials(self, pod: spec.Pod) -> dict[tuple[str, int], Credentials]:
        """Each podCertificate source of the pod, by (volume, index in its sources): handled once (a request made,
        an answer taken, a refresh started), then its credential bundle or upstream's error for the volume."""
        out: dict[tuple[str, int], Credentials] = {}
        for key, source in states.projections(pod):
            self._needed.set()
            self._signers[key] = source.signer_name
            try:
                await self._handle(pod, key, source)
            except _HandleError as exc:
                # upstream: utilruntime.HandleError, then the key is queued again with backoff
                logger.warning(f"while handling podCertificate projected volume source: {exc} "
                               f"(pod {key.namespace}/{key.pod_name}, volume {key.volume}, "
                               f"sourceIndex {key.source_index})")
            try:
                out[key.volume, key.source_index] = states.credential_bundle(self._states[key])
            except states.BundleError as exc:
                out[key.volume, key.source_index] = str(exc)
        return out

    def forget(self, uid: str) -> None:
        """The pod is gone (upstream ForgetPod): its sources' keys and state go with it."""
        for key in [k for k in self._states if k.pod_uid == uid]:
            del self._states[key]
            self._signers.pop(key, None)

    def metric_report(self) -> dict[tuple[str, str], int]:
        """(signer name, state) -> how many sources (upstream MetricReport, kubelet_podcertificate_states)."""
        report: dict[tuple[str, str], int] = {}
        now = self.clock()
        for key, state in list(self._states.items()):
            label = (self._signers.get(key, ""), states.metrics_state(state, now))
            report[label] = report.get(label, 0) + 1
        return report

    async def _handle(self, pod: spec.Pod, key: ProjectionKey, source: states.Source) -> None:
        """upstream handleProjection: one step of the source's state machine."""
        state = self._states.setdefault(key, states.Initial())
        if isinstance(state, states.Initial):
            key_pem, request = await self._create(pod, source, "initial")
            waiting = states.created(state, key_pem, request, self.jitter())
            self._states[key] = waiting
            logger.log(v(4), f"PodCertificateRequest {key.namespace}/{waiting.request_name} created, moving to "
                             f"credStateWait (pod {key.pod_name}, volume {key.volume}, source {key.source_index})")
        elif isinstance(state, states.Wait | states.WaitRefresh):
            if not self._informer.has_synced():
                return  # upstream handles nothing before its informer has synced
            pcr = self._informer.objects.get((key.namespace, state.request_name))  # upstream's pcrLister
            step = states.observed(state, key.namespace, pcr, now=self.clock(), jitter=self.jitter())
            self._states[key] = step.state
            self._post(pod, step.events)
            if step.state != state:
                logger.log(v(4), f"pod {key.namespace}/{key.pod_name} volume {key.volume} source "
                                 f"{key.source_index}: {type(state).__name__} -> {type(step.state).__name__}")
            if step.error:
                raise _HandleError(step.error)
        elif isinstance(state, states.Fresh) and states.refresh_due(state, self.clock()):
            state, events = states.refresh_events(state, self.clock())
            self._states[key] = state
            self._post(pod, events)
            key_pem, request = await self._create(pod, source, "refresh")
            waiting = states.created(state, key_pem, request, self.jitter())
            self._states[key] = waiting
            logger.log(v(4), f"PodCertificateRequest {key.namespace}/{waiting.request_name} created, moving to "
                             f"credStateWaitRefresh (pod {key.pod_name}, volume {key.volume}, "
                             f"source {key.source_index})")
        # denied and failed are final; fresh before beginRefreshAt waits

    async def _create(self, pod: spec.Pod, source: states.Source, which: str) -> tuple[bytes, Mapping[str, Any]]:
        """A new key and its request on the apiserver (upstream createPodCertificateRequest), with the UIDs
        NodeRestriction checks: the ServiceAccount's (read now, as upstream), the Node's."""
        account = pod.spec.service_account_name
        if not account:  # client-go refuses a Get without a name before sending it
            raise _HandleError("while fetching service account: resource name may not be empty")
        try:
            body = await self.api.request(
                "GET", f"/api/v1/namespaces/{q(pod.namespace)}/serviceaccounts/{q(account)}")
        except API_ERRORS as exc:
            raise _HandleError(f"while fetching service account: {_api_error(exc)}") from exc
        node_uid = self.node_uid()
        if not node_uid:  # the lister's NotFound: the Node is not registered (yet)
            raise _HandleError(f"while getting node object from local cache: node "
                               f"{gotext.go_quote(self.node_name)} not found")
        prefix = f"while creating {which} PodCertificateRequest"
        try:
            key_pem, stub = await keys.generate(source.key_type, command=self.openssl_command)
        except keys.KeyGenerationError as exc:
            raise _HandleError(f"{prefix}: while generating keypair: {exc}") from exc
        who = states.Identity(
            namespace=pod.namespace, pod_name=pod.name, pod_uid=pod.uid, service_account_name=account,
            service_account_uid=str((body.get("metadata") or {}).get("uid") or ""),
            node_name=self.node_name, node_uid=node_uid)
        try:
            request = await self.api.request("POST", states.requests_path(pod.namespace),
                                              body=states.request_body(who, source, stub))
        except API_ERRORS as exc:
            raise _HandleError(f"{prefix}: while creating on API: {_api_error(exc)}") from exc
        return key_pem, request

    def _post(self, pod: spec.Pod, events: Iterable[states.Event]) -> None:
        if self.recorder is not None:
            for event in events:
                self.recorder.pod_event(pod, event.type, event.reason, event.message)

    # ------------------------------------------------------------------------------------------ the watch

    async def run(self) -> None:
        """List the node's requests, then watch them from that version (`kopflet.client.informer`: list again on
        410 Gone or any error, with backoff); each change wakes the pod a pending source of which waits on it.
        Idle until a pod has a podCertificate source."""
        await self._needed.wait()
        await self._informer.run()

    def _changed(self, deltas: Sequence[Delta[Mapping[str, Any]]]) -> None:
        """upstream's informer handlers: the pods of the requests listed or changed, if a source of theirs waits."""
        self._wake_waiting({str(((d.new or d.old or {}).get("spec") or {}).get("podUID") or "") for d in deltas})

    def _wake_waiting(self, uids: set[str]) -> None:
        """Wake the pods among `uids` with a source waiting for an answer, or still creating its request (the answer
        may come before the creation's own reply); a wake is a whole sync, so pods with nothing pending are left
        alone."""
        waiting = {key.pod_uid for key, state in self._states.items()
                   if isinstance(state, states.Initial | states.Wait | states.WaitRefresh) and key.pod_uid in uids}
        if waiting and self.wake is not None:
            self.wake(waiting)
