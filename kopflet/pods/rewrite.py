"""
Between a pod's decision and the policy hooks (`kopflet.hooks`): the view a plan hook is given of a decided `Plan`,
and what the hooks' answers do to it. `decide.decide` stays as it was: an admit hook's rejection reaches it as an
input (`Observation.hook_rejection`), a plan hook's changes are applied to its output here.

A plan hook's edits (environment variables, emptyDir and hostPath volumes and their mounts) change the pod the
executor runs this plan with (`Plan.pod`), never the API object, the status written from it, or the container hash
(upstream's hash of the API spec: a hook's edit does not restart a running container). A delay holds back this sync's
starts (the sandbox and every container) and looks again after it; what the plan stops still stops.

Pure.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Sequence
from typing import Any

from kopflet.api import spec
from kopflet.hooks import api
from kopflet.lifecycle import admission
from kopflet.pods.decide import WAKE_STEPS, Event, Lifecycle, Observation, Plan

DELAYED = "start delayed by policy hook {hook}: {reason}"
"""`Plan.reason` and `Plan.wake_reason` of a plan whose starts a hook held back."""


def rejection(verdict: api.AdmitVerdict) -> admission.Rejection:
    """An admit hook's rejection as upstream's admit handlers give theirs: the status message prefixed with
    ``Pod was rejected: ``, the event's without."""
    return admission.Rejection(reason=verdict.reason or api.DEFAULT_REASON,
                               message=admission.REJECTED_PREFIX + verdict.message)


def events(hook_events: Iterable[api.HookEvent]) -> tuple[Event, ...]:
    """Events of the hooks (theirs and their failures) as the plan's."""
    return tuple(Event(e.type, e.reason, e.message) for e in hook_events)


def starts(plan: Plan) -> bool:
    """The plan starts something (the sandbox or a container): when the plan hooks are asked."""
    actions = plan.actions
    return plan.lifecycle is Lifecycle.SYNCING and actions is not None and bool(
        actions.create_sandbox or actions.ephemeral_containers_to_start or actions.init_containers_to_start
        or actions.containers_to_start)


def plan_view(obs: Observation, plan: Plan, *, node_name: str, first_seen: datetime.datetime) -> api.PlanView:
    """A plan hook's view of `plan` (which `starts`)."""
    actions = plan.actions
    if actions is None:
        raise ValueError("a plan without actions starts nothing")
    ordered = (*actions.ephemeral_containers_to_start, *actions.init_containers_to_start, *actions.containers_to_start)
    return api.PlanView(pod=plan.pod, node_name=node_name, creates_sandbox=actions.create_sandbox, starts=ordered,
                        restarts=tuple(n for n in ordered if obs.runtime.latest_container(n) is not None),
                        now=obs.now, first_seen=first_seen)


def apply(obs: Observation, plan: Plan, changes: Sequence[tuple[str, api.Rewrite]]) -> Plan:
    """`plan` (decided from `obs`) with the plan hooks' changes, in the hooks' order (for one volume name or mount
    path the first hook's wins; an environment variable is set by each hook in turn, so the last one's value
    stays); of several delays, the longest."""
    pod, rules = plan.pod, list(plan.hook_rules)
    for hook, rewrite in changes:
        pod = _edit(pod, rewrite)
        rules += [(hook, action, reason) for action, reason in rewrite.describe()]
    plan = dataclasses.replace(plan, pod=pod, hook_rules=tuple(rules))
    delays = [(rewrite.delay, hook, rewrite.delay_reason) for hook, rewrite in changes if rewrite.delay is not None]
    if delays and starts(plan):
        seconds, hook, reason = max(delays, key=lambda d: d[0])
        plan = _hold_starts(obs, plan, seconds, DELAYED.format(hook=hook, reason=reason))
    return plan


def _hold_starts(obs: Observation, plan: Plan, seconds: float, why: str) -> Plan:
    """Nothing starts in this sync; kills and resizes go on. With steps left the pod is observed at once (as after
    any steps, and the hooks are asked again), else after `seconds`."""
    actions = plan.actions
    if actions is None:
        return plan
    # Upstream's computePodActions kills the pod with every sandbox it creates, even when nothing of it runs: that
    # kill is held with the sandbox unless something runs (else every held sync would be "steps" to observe).
    runs = bool(obs.runtime.running_containers()) or any(s.ready for s in obs.runtime.sandboxes)
    held = dataclasses.replace(actions, create_sandbox=False, sandbox_id="" if actions.create_sandbox
                               else actions.sandbox_id, kill_pod=actions.kill_pod and runs,
                               ephemeral_containers_to_start=(), init_containers_to_start=(), containers_to_start=())
    plan = dataclasses.replace(plan, actions=held)
    steps = plan.changes_runtime
    return dataclasses.replace(plan, memory=dataclasses.replace(plan.memory, followup=steps),
                               wake_after=0.0 if steps else seconds, wake_reason=WAKE_STEPS if steps else why,
                               reason=why)


def _edit(pod: spec.Pod, rewrite: api.Rewrite) -> spec.Pod:
    if not (rewrite.env or rewrite.volumes or rewrite.mounts):
        return pod
    names = {v.get("name") for v in pod.spec.volumes}
    volumes = (*pod.spec.volumes, *(v for v in rewrite.volumes if v.get("name") not in names))

    def container(c: spec.ContainerSpec) -> spec.ContainerSpec:
        env = list(c.env)
        for change in rewrite.env:
            if c.name in change.containers:
                env = [e for e in env if e.name != change.name] + [spec.EnvVar(name=change.name, value=change.value)]
        mounts: list[Any] = list(c.volume_mounts)
        for mount in rewrite.mounts:
            if c.name in mount.containers and all(m.get("mountPath") != mount.mount["mountPath"] for m in mounts):
                mounts.append(dict(mount.mount))
        if env == list(c.env) and len(mounts) == len(c.volume_mounts):
            return c
        return dataclasses.replace(c, env=tuple(env), volume_mounts=tuple(mounts))  # the hash stays the API's

    edited = dataclasses.replace(
        pod.spec, volumes=volumes, init_containers=tuple(container(c) for c in pod.spec.init_containers),
        containers=tuple(container(c) for c in pod.spec.containers),
        ephemeral_containers=tuple(container(c) for c in pod.spec.ephemeral_containers))
    return dataclasses.replace(pod, spec=edited)
