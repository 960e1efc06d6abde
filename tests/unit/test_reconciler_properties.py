"""kopflet.kuberuntime.reconciler.compute_pod_actions against its invariants, on random pods and runtime states
(hypothesis).

The table-driven tests in test_reconciler.py pin exact answers for hand-picked cases; here hypothesis draws
pods (0-3 init containers, some of them sidecars, 1-3 regular containers, an optional ephemeral container,
every restartPolicy, container-level restartPolicy and restartPolicyRules on some ordinary init and regular
containers, probes, hostNetwork, a deletion timestamp) and runtime states (0-2 sandboxes, ready or
not, with or without IP and in either network mode; 0-2 instances of every container, in every state, in the
current, an older or an unknown sandbox, with current or stale spec hashes; a stray container not in the spec;
probe verdicts; a crash-loop backoff table with random bumps; `now`), and checks what must hold whatever the
answer is:

1. one sandbox: a new sandbox always comes with kill_pod (the old ones are stopped first, upstream
   `KillPod: createPodSandbox`) and the next attempt number; containers only start in a new sandbox or in the
   single ready, newest one;
2. a pod being torn down (deleted, or killed without a new sandbox) gets no container started;
3. restart policies (upstream ContainerShouldRestart): an exited container is run again in the same sandbox
   only if its first matching restartPolicyRules entry says Restart, or else its own restartPolicy, or else
   the pod's allows it for its exit code; in a new sandbox one that succeeded under OnFailure (its own, else the
   pod's) is not; a regular init container that succeeded is never run again in the same sandbox, and a
   sidecar's own restartPolicy Always wins over the pod's;
4. kills: only the instance the rules judge, for a reason the inputs justify; a killed container is restarted
   (kill-and-restart) except a regular one whose own restartPolicy (else the pod's) is Never that failed a
   probe; nothing starts next to a running instance of itself;
5. names: every output name is a container of the pod, of the right kind, once, in spec order, with at most one
   regular init container;
6. crash-loop backoff: a container waiting in backoff is not started, and the backoff outputs agree;
7. purity: same inputs, same answer, no input mutated;
8. RestartAllContainers (upstream `computePodActions` with `restartAllContainers`): only when asked, and then
   every instance of every init and regular container is removed, each once, those not exited killed first,
   regular before init, the instances whose exit triggered it last, and nothing else happens (unless the
   sandbox must be re-created: then the pod is killed and nothing is reset or started).

Each invariant is a separate function so that a failure names it; `test_the_generator_reaches_every_case`
makes sure the strategies really produce the situations the invariants talk about (none is vacuous).
"""

from __future__ import annotations

import dataclasses
import functools
import pickle
from collections import Counter
from collections.abc import Callable
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from cri_client.types import NamespaceMode
from kopflet import backoff as backoffs
from kopflet.api import spec as pod_spec
from kopflet.api.spec import RESTART_NEVER, RESTART_ON_FAILURE, RESTART_POLICIES, ContainerSpec, Pod, pod_from_body
from kopflet.backoff import Backoff
from kopflet.container import podstate
from kopflet.container.podstate import ContainerInfo, SandboxInfo, State
from kopflet.kuberuntime import reconciler
from kopflet.kuberuntime.reconciler import PodActions

S = 1_000_000_000  # ns per second
BASE_NOW = 100_000.0
PROBE = {"exec": {"command": ["true"]}}
STRAY = "stray"  # a runtime container whose name is no longer in the spec
KILL_REASONS = ("", reconciler.REASON_UNKNOWN, reconciler.REASON_LIVENESS_PROBE, reconciler.REASON_STARTUP_PROBE)

# Deterministic in CI: derandomized, no example database. 400 examples take about 2 seconds per test.
PROPERTY_SETTINGS = settings(max_examples=400, deadline=None, derandomize=True, database=None)


@dataclasses.dataclass
class Scenario:
    """One call of compute_pod_actions: all of its inputs."""

    pod: Pod
    runtime: podstate.RuntimePodStatus
    backoff: Backoff
    now: float
    liveness_failures: set[str]
    startup_failures: set[str]
    started: set[str]
    restart_all: bool = False
    """The pod's status says AllContainersRestarting (RestartAllContainers under way)."""

    def compute(self) -> PodActions:
        # Through the module attribute, so a scratch run can monkeypatch a broken reconciler in.
        return reconciler.compute_pod_actions(
            self.pod, self.runtime, backoff=self.backoff, now=self.now, liveness_failures=self.liveness_failures,
            startup_failures=self.startup_failures, started=self.started, restart_all_containers=self.restart_all)

    # --- views on the pod, for the checks

    @property
    def inits(self) -> tuple[ContainerSpec, ...]:
        return self.pod.spec.init_containers

    @property
    def regulars(self) -> tuple[ContainerSpec, ...]:
        return self.pod.spec.containers

    def judged(self, name: str) -> ContainerInfo | None:
        """The instance the rules look at: init containers in the active sandbox only (upstream
        `FindActiveContainerStatusByName`), regular ones across sandboxes (`FindContainerStatusByName`)."""
        if any(c.name == name for c in self.inits):
            return self.runtime.latest_active_container(name)
        return self.runtime.latest_container(name)


# ------------------------------------------------------------------------------------------------ strategies
# One composite strategy with plain helpers and module-level strategies: building strategies inside the draw is
# what makes hypothesis slow. sampled_from with repeats is a cheap bias towards the common, healthy values.


@functools.cache
def _one_of(values: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    return st.sampled_from(values)


_BOOL = st.booleans()
_RARE = _one_of((False, False, False, True))
_VERY_RARE = _one_of((False,) * 7 + (True,))
_STATE = _one_of((State.RUNNING, State.RUNNING, State.EXITED, State.EXITED, State.CREATED, State.UNKNOWN))
_MOSTLY_RUNNING = _one_of((State.RUNNING,) * 4 + (State.EXITED, State.EXITED, State.CREATED, State.UNKNOWN))
_MOSTLY_EXITED = _one_of((State.EXITED,) * 5 + (State.UNKNOWN,))
_OFTEN_EXITED = _one_of((State.RUNNING, State.EXITED, State.EXITED, State.EXITED, State.CREATED, State.UNKNOWN))
_EXIT_CODE = _one_of((0, 0, 1, 137))
_EXIT_REASON = _one_of(("", "", "Error", reconciler.OOM_KILLED))
# Seconds since an exit / a backoff bump: often recent (inside a 10-40s delay), else up to well past the 600s
# expiry; an exit may also lie a little in the future (clock skew).
_EXITED_AGO = st.one_of(st.integers(-5, 15), st.integers(0, 900))
_BUMPED_AGO = st.one_of(st.integers(0, 40), st.integers(0, 1500))
_CREATED = st.integers(1, 1000)
_INSTANCES = _one_of((0, 1, 1, 1, 2))
_FEW_INSTANCES = _one_of((0, 0, 1))
_NONE = st.just(0)
_OWN_STAGE = _one_of(("running", "initialising", "sandbox died"))
_INIT_COUNT = _one_of((0, 0, 1, 2, 3))
_OWN_INIT_COUNT = _one_of((0, 0, 0, 1, 2, 3))
_SANDBOXES = _one_of((0, 0, 1, 1, 1, 1, 1, 2, 2))
_ATTEMPT = st.integers(0, 3)
_IP = _one_of(("10.0.0.1",) * 5 + ("",))
_READY = _one_of((True,) * 5 + (False,))
_NOW = st.integers(0, 10_000)
# A container-level restartPolicy on most ordinary containers, rules on most of those, about the exit codes the
# instances get (0, 1, 137).
_OWN_POLICY = _one_of((None, *RESTART_POLICIES, RESTART_NEVER))
_INIT_OWN_POLICY = _one_of((RESTART_NEVER, RESTART_ON_FAILURE))
_RULES = st.sampled_from((None,
                           ({"action": "Restart", "exitCodes": {"operator": "In", "values": [1]}},),
                           ({"action": "Restart", "exitCodes": {"operator": "NotIn", "values": [0]}},),
                           ({"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [1, 137]}},
                            {"action": "Restart", "exitCodes": {"operator": "NotIn", "values": [0]}})))


def _own_restart_policy(draw: st.DrawFn, body: dict[str, Any]) -> None:
    """Maybe a container-level restartPolicy, and with it maybe restartPolicyRules (ContainerRestartRules)."""
    policy = draw(_OWN_POLICY)
    if policy is None:
        return
    body["restartPolicy"] = policy
    rules = draw(_RULES)
    if rules is not None:
        body["restartPolicyRules"] = [dict(r) for r in rules]


def _pod(draw: st.DrawFn, own_policies: bool = False) -> Pod:
    """0-3 init containers, about half of them sidecars with optional probes; 1-3 regular containers; an optional
    ephemeral one; any restartPolicy; hostNetwork and a deletion timestamp now and then.

    No init container at all is drawn too: only then does a new sandbox start the regular containers directly.
    With `own_policies`, ordinary init and regular containers may get restartPolicy fields of their own
    (`_own_restart_policy`); without, nothing more is drawn than before those existed, so the examples of the
    first property test stay what they were."""
    inits = []
    for i in range(draw(_OWN_INIT_COUNT if own_policies else _INIT_COUNT)):
        body: dict[str, Any] = {"name": f"init{i}", "image": "busybox:1.36"}
        if draw(_BOOL):
            body["restartPolicy"] = "Always"  # a sidecar
            if draw(_BOOL):
                body["startupProbe"] = PROBE
            if draw(_BOOL):
                body["livenessProbe"] = PROBE
        elif own_policies:
            body["restartPolicy"] = draw(_INIT_OWN_POLICY)  # not Always: that would make it a sidecar
            if (rules := draw(_RULES)) is not None:
                body["restartPolicyRules"] = [dict(r) for r in rules]
        inits.append(body)
    containers = []
    for i in range(draw(st.integers(1, 3))):
        body = {"name": f"app{i}", "image": "busybox:1.36"}
        if draw(_BOOL):
            body["livenessProbe"] = PROBE
        if own_policies:
            _own_restart_policy(draw, body)
        containers.append(body)
    spec: dict[str, Any] = {"containers": containers, "initContainers": inits,
                            "restartPolicy": draw(_one_of(RESTART_POLICIES)), "hostNetwork": draw(_RARE)}
    if draw(_RARE):
        spec["ephemeralContainers"] = [{"name": "debugger", "image": "busybox:1.36", "targetContainerName": "app0"}]
    metadata: dict[str, Any] = {"name": "web", "namespace": "default", "uid": "uid-1"}
    if draw(_VERY_RARE):
        metadata["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    return pod_from_body({"metadata": metadata, "spec": spec})


def _sandboxes(draw: st.DrawFn, pod: Pod) -> tuple[SandboxInfo, ...]:
    own = reconciler.network_mode(pod)
    other = NamespaceMode.POD if own is NamespaceMode.NODE else NamespaceMode.NODE
    boxes = [SandboxInfo(id=f"sb{k}", attempt=draw(_ATTEMPT), ready=draw(_READY), ip=draw(_IP),
                         network_mode=draw(_one_of((own,) * 5 + (other,))), created_at=draw(_CREATED) * S)
             for k in range(draw(_SANDBOXES))]
    return tuple(sorted(boxes, key=lambda b: (b.created_at, b.attempt, b.id), reverse=True))  # as podstate sorts


def _instances(draw: st.DrawFn, name: str, spec_hash: str, where: st.SearchStrategy[str], now: float, *,
               states: st.SearchStrategy[State] = _STATE,
               counts: st.SearchStrategy[int] = _INSTANCES) -> list[ContainerInfo]:
    """0-2 instances of one container, in `states`, in the sandboxes `where` draws."""
    hashes = _one_of((spec_hash, spec_hash, spec_hash, "", "0bsolete"))
    result = []
    for attempt in range(draw(counts)):
        state = draw(states)
        exited = state is State.EXITED
        result.append(ContainerInfo(
            id=f"{name}-{attempt}", name=name, state=state, attempt=attempt, restart_count=attempt,
            created_at=draw(_CREATED) * S, hash=draw(hashes), sandbox_id=draw(where),
            finished_at=int((now - draw(_EXITED_AGO)) * S) if exited else 0,
            exit_code=draw(_EXIT_CODE) if exited else 0, reason=draw(_EXIT_REASON) if exited else ""))
    return result


def _backoff(draw: st.DrawFn, pod: Pod, names: tuple[str, ...], now: float) -> Backoff:
    """A crash-loop table with up to 8 bumps of the pod's containers (`names`, repeats make some likelier),
    default or short delays."""
    initial = draw(_one_of((backoffs.INITIAL, backoffs.INITIAL, 2.0)))
    table = Backoff(initial=initial, maximum=draw(_one_of((backoffs.MAXIMUM, initial * 4))))
    bumps = draw(st.lists(st.tuples(_one_of(names), _BUMPED_AGO), max_size=8))
    for name, ago in sorted(bumps, key=lambda bump: -bump[1]):  # oldest first, as time goes
        table.next(reconciler.backoff_key(pod, name), now - ago)
    if draw(_BOOL):  # an entry for the container's previous spec (another hash): must not matter
        table.next(backoffs.crash_loop_key(pod.uid, names[0], pod_name=pod.name, namespace=pod.namespace,
                                           container_hash="0bsolete"), now - 1)
    return table


@st.composite
def scenarios(draw: st.DrawFn, own_policies: bool = False) -> Scenario:
    pod = _pod(draw, own_policies)
    now = BASE_NOW + draw(_NOW) / 8
    stage = "running"
    if draw(_BOOL):
        # Anything goes: any sandboxes, instances anywhere.
        boxes = _sandboxes(draw, pod)
        where = _one_of((*(ids := tuple(b.id for b in boxes)), *ids, "", "sb-gone"))
        states = {c.name: _STATE for c in (*pod.spec.init_containers, *pod.spec.containers)}
        if own_policies:  # exits are what container-level policies are about
            states.update({c.name: _OFTEN_EXITED for c in pod.spec.containers})
    else:
        # A pod that got going: one healthy sandbox holding every instance, init containers that ran to their
        # end (ordinary ones exited, sidecars running), regular containers mostly running, so that the decisions
        # about a running pod come up often. With container-level policies, also a pod still initialising (no
        # regular container yet: failed init containers with policies of their own) and one whose sandbox died
        # (what a new sandbox runs again).
        stage = draw(_OWN_STAGE) if own_policies else "running"
        boxes = (SandboxInfo(id="sb0", attempt=draw(_ATTEMPT), ready=stage != "sandbox died", ip="10.0.0.1",
                             network_mode=reconciler.network_mode(pod)),)
        where = _one_of(("sb0",))
        states = {c.name: _STATE if c.is_sidecar else _MOSTLY_EXITED for c in pod.spec.init_containers}
        states.update({c.name: _OFTEN_EXITED if stage == "sandbox died" else _MOSTLY_RUNNING
                       for c in pod.spec.containers})
    regular = {c.name for c in pod.spec.containers}
    containers = [info for c in (*pod.spec.init_containers, *pod.spec.containers)
                  for info in _instances(draw, c.name, c.hash, where, now, states=states[c.name],
                                         counts=_NONE if stage == "initialising" and c.name in regular else _INSTANCES)]
    for c in pod.spec.ephemeral_containers:  # mostly not started yet
        containers += _instances(draw, c.name, c.hash, where, now, counts=_FEW_INSTANCES)
    if draw(_RARE):
        containers += _instances(draw, STRAY, "0bsolete", where, now)
    containers.sort(key=lambda c: (c.created_at, c.attempt, c.id), reverse=True)  # newest first, as podstate
    runtime = podstate.RuntimePodStatus(uid=pod.uid, name=pod.name, namespace=pod.namespace, sandboxes=boxes,
                                        containers=tuple(containers))
    # Probe verdicts are about running containers (what the probe manager publishes).
    running = tuple(sorted(c.id for c in containers if c.state is State.RUNNING))
    some_running = st.sets(_one_of(running), max_size=2) if running else st.just(set())
    # Backoff entries mostly for containers that exited (those that may be held back), some for the others.
    exited = tuple(sorted({c.name for c in containers if c.state is State.EXITED and c.name != STRAY}))
    names = (*exited, *exited, *exited, *(c.name for c in (*pod.spec.init_containers, *pod.spec.containers)), STRAY)
    return Scenario(pod=pod, runtime=runtime, backoff=_backoff(draw, pod, names, now), now=now,
                    liveness_failures=draw(some_running), startup_failures=draw(some_running),
                    started=draw(some_running), restart_all=own_policies and draw(_RARE))


# ------------------------------------------------------------------------------------------------ invariants


def _starts(a: PodActions) -> tuple[str, ...]:
    return (*a.init_containers_to_start, *a.containers_to_start, *a.ephemeral_containers_to_start)


def _restarting(a: PodActions) -> set[str]:
    """Containers the decision (re)starts now or would start but for their crash-loop backoff."""
    return {*a.init_containers_to_start, *a.containers_to_start, *a.containers_in_backoff}


def check_one_sandbox(s: Scenario, a: PodActions) -> None:
    """1. Never two sandboxes (upstream `PodSandboxChanged` and `KillPod: createPodSandbox`)."""
    boxes = s.runtime.sandboxes
    if a.create_sandbox:
        # Stronger than "no ready sandbox or kill_pod": upstream always kills the pod (every old sandbox) first.
        assert a.kill_pod, "a new sandbox without killing the old ones"
        # kopflet numbers it after the highest attempt of all sandboxes, so an attempt (part of the CRI sandbox
        # name) is never reused even if creation times and attempts disagree.
        assert a.attempt == (max(b.attempt for b in boxes) + 1 if boxes else 0)
        assert a.sandbox_id in ("", boxes[0].id if boxes else "")
    if not a.kill_pod:
        # Anything that starts without a new sandbox starts in the one ready sandbox, the newest, as judged.
        ready = [b for b in boxes if b.ready]
        assert len(ready) == 1 and ready[0] is boxes[0], f"kept sandboxes {boxes}"
        assert a.sandbox_id == boxes[0].id
        assert boxes[0].network_mode is reconciler.network_mode(s.pod)
        assert s.pod.spec.host_network or boxes[0].ip


def check_torn_down_pod_starts_nothing(s: Scenario, a: PodActions) -> None:
    """2. A deleted pod is killed; a pod killed without a new sandbox starts nothing, not even after backoff."""
    if s.pod.is_deleting:
        assert a.kill_pod and not a.create_sandbox, "a deleted pod is not (only) killed"
        assert not a.containers_to_kill, "kill_pod stops every container of a deleted pod, no need to list any"
    if a.kill_pod and not a.create_sandbox:
        assert _starts(a) == (), "a pod being killed starts containers"
        assert not a.containers_in_backoff and not a.backoff_since and a.retry_after is None, \
            "a pod being killed waits for a crash-loop backoff"


def _would_restart(s: Scenario, c: ContainerSpec, exit_code: int) -> bool:
    """Upstream `ContainerShouldRestart`, written out again from its definition (rules only with a container
    restartPolicy; the first match decides; Restart and, with RestartAllContainersOnContainerExits on,
    RestartAllContainers restart; then the container's policy, else the pod's)."""
    policy = c.restart_policy
    if policy is not None:
        for rule in c.restart_policy_rules:
            if (exit_code in rule.values) == (rule.operator == "In"):
                if rule.action in ("Restart", "RestartAllContainers"):
                    return True
                break
    else:
        policy = s.pod.spec.restart_policy
    return policy == "Always" or (policy == RESTART_ON_FAILURE and exit_code != 0)


def check_restart_policies(s: Scenario, a: PodActions) -> None:
    """3. Container-level restartPolicyRules and restartPolicy, else the pod's restartPolicy, for regular and
    init containers; sidecars always restart.

    "Has run" is judged on the newest instance, as upstream `ShouldContainerBeRestarted` does: a container whose
    newest instance is only created (a failed start) or unknown is started again whatever the policy, and so is
    one with no instance left at all (garbage-collected).
    """
    restarting = _restarting(a)
    policy = s.pod.spec.restart_policy
    for c in s.regulars:
        latest = s.runtime.latest_container(c.name)
        if latest is None or latest.state is not State.EXITED:
            continue
        if pod_spec.effective_restart_policy(c, s.pod.spec) == RESTART_ON_FAILURE and latest.exit_code == 0 \
                and a.create_sandbox:
            # Upstream skips containerSucceeded under OnFailure (the container's own, else the pod's) there.
            assert c.name not in restarting, f"{c.name} succeeded under OnFailure and is run again in a new sandbox"
        if not a.create_sandbox and not _would_restart(s, c, latest.exit_code):
            assert c.name not in restarting, \
                f"{c.name} exited {latest.exit_code}, its policy says no, and it is run again"
    if policy == RESTART_NEVER and a.create_sandbox:
        # A new sandbox re-runs everything, even under Never, in two cases only, as upstream: the runtime has no
        # container of the pod (none ever ran), or no sandbox at all (attempt 0; upstream's only reason not to
        # create one is `!shouldRestartOnFailure(pod) && attempt != 0 && len(ContainerStatuses) != 0`).
        assert not s.runtime.containers or not s.runtime.sandboxes, "a new sandbox re-runs a pod under Never"
    if a.create_sandbox:
        return
    for c in s.inits:
        latest = s.runtime.latest_active_container(c.name)
        if c.is_sidecar:
            # The sidecar's own restartPolicy Always wins over the pod's, Never included.
            if not a.kill_pod and latest is not None and latest.state is not State.RUNNING:
                assert c.name in restarting, f"sidecar {c.name} ({latest.state}) is not restarted"
        elif latest is not None and latest.state is State.EXITED:
            if not reconciler.init_container_failed(latest):
                assert c.name not in restarting, f"init container {c.name} succeeded and is run again"
            if not _would_restart(s, c, latest.exit_code):
                assert c.name not in restarting, f"init container {c.name} exited {latest.exit_code}, its policy " \
                                                 "says no, and it is run again"


def _triggers_reset(c: ContainerSpec, info: ContainerInfo) -> bool:
    """An exited instance whose first matching rule is RestartAllContainers (upstream's reset "source")."""
    if info.state is not State.EXITED:
        return False
    for rule in c.restart_policy_rules:
        if (info.exit_code in rule.values) == (rule.operator == "In"):
            return rule.action == "RestartAllContainers"
    return False


def check_reset(s: Scenario, a: PodActions) -> None:
    """8. RestartAllContainers: removes every instance of the init and regular containers, sources last, and
    does nothing else; never without the pod's AllContainersRestarting."""
    if not s.restart_all or s.pod.is_deleting:
        assert a.containers_to_reset == (), "containers reset though no RestartAllContainers is under way"
        return
    assert not _starts(a) and not a.containers_to_kill, "a reset starts or kills containers besides removing them"
    assert not a.containers_in_backoff and not a.backoff_since and a.retry_after is None, "a reset waits for backoff"
    if a.kill_pod:
        assert a.create_sandbox and a.containers_to_reset == (), "a reset kills the pod without a new sandbox"
        return
    assert not a.create_sandbox
    kinds = {c.name: ("init", c) for c in s.inits} | {c.name: ("regular", c) for c in s.regulars}
    expected = {c.id for c in s.runtime.containers if c.name in kinds}
    ids = [r.container_id for r in a.containers_to_reset]
    assert len(ids) == len(set(ids)) and set(ids) == expected, "a reset does not remove each instance exactly once"
    by_id = {c.id: c for c in s.runtime.containers}
    groups = []
    for reset in a.containers_to_reset:
        info = by_id[reset.container_id]
        kind, container = kinds[info.name]
        assert reset.name == info.name and reset.kill == (info.state is not State.EXITED), \
            f"{reset} is not killed exactly when it has not exited"
        groups.append((_triggers_reset(container, info), kind == "init"))
    assert groups == sorted(groups), "reset order is not: regular, init, then the triggering regular, init ones"


def check_kills(s: Scenario, a: PodActions) -> None:
    """4. What may be killed, and what may be started next to a killed or running instance.

    Legal kills (upstream `computePodActions` / `computeInitContainerActions`): a running container whose spec
    hash changed (reason "", restarted whatever the policy), that failed its liveness or startup probe (restarted
    unless it is a regular container under Never), and one in unknown state (reason Unknown, killed before its
    restart). Kill-and-restart of the same container in one decision is legal only for those.
    """
    by_id = {c.id: c for c in s.runtime.containers}
    init_names = {c.name for c in s.inits}
    restarting = _restarting(a)
    assert len({info.name for info in a.containers_to_kill.values()}) == len(a.containers_to_kill), \
        "two instances of one container killed"
    for cid, info in a.containers_to_kill.items():
        instance = by_id.get(cid)
        assert instance is not None and instance.name == info.name, f"kill of unknown instance {cid}"
        container = s.pod.spec.container(info.name)
        assert container is not None and not s.pod.spec.is_ephemeral(info.name), f"kill of {info.name}"
        assert instance == s.judged(info.name), f"{cid} is not the instance of {info.name} that was judged"
        why = f"{cid} killed with reason {info.reason!r}"
        assert info.reason in KILL_REASONS, why
        if info.reason == reconciler.REASON_UNKNOWN:
            assert instance.state is State.UNKNOWN, f"{why} in state {instance.state}"
        else:
            assert instance.state is State.RUNNING, f"{why} in state {instance.state}"
        if info.reason == "":
            assert instance.hash != container.hash, f"{why} (changed spec) but the hash is the same"
        if info.reason == reconciler.REASON_LIVENESS_PROBE:
            assert cid in s.liveness_failures, f"{why} without a liveness failure"
        if info.reason == reconciler.REASON_STARTUP_PROBE:
            assert cid in s.startup_failures, f"{why} without a startup failure"
        if a.kill_pod:
            continue
        kill_only = (info.name not in init_names
                     and pod_spec.effective_restart_policy(container, s.pod.spec) == RESTART_NEVER
                     and info.reason in (reconciler.REASON_LIVENESS_PROBE, reconciler.REASON_STARTUP_PROBE))
        if kill_only:
            assert info.name not in restarting, f"{info.name} failed a probe under Never and is restarted"
        else:
            assert info.name in restarting, f"{info.name} is killed ({info.reason!r}) and not restarted"
    if a.kill_pod:
        return
    # The other way round: nothing is started next to a running (or maybe running) instance of itself.
    for name in (*a.init_containers_to_start, *a.containers_to_start):
        judged = s.judged(name)
        if judged is not None and judged.state in (State.RUNNING, State.UNKNOWN):
            assert a.containers_to_kill.get(judged.id) is not None, f"{name} started next to {judged.id}"
    for name in a.ephemeral_containers_to_start:
        assert s.runtime.latest_container(name) is None, f"ephemeral {name} started twice"


def check_names(s: Scenario, a: PodActions) -> None:
    """5. Names are the pod's, of the right kind, unique and in spec order; one regular init container at most."""
    def in_spec_order(started: tuple[str, ...], specs: tuple[ContainerSpec, ...]) -> None:
        order = [c.name for c in specs]
        assert set(started) <= set(order), f"{started} not among {order}"
        assert list(started) == [n for n in order if n in started], f"{started} not in spec order or repeated"

    in_spec_order(a.init_containers_to_start, s.inits)
    in_spec_order(a.containers_to_start, s.regulars)
    in_spec_order(a.ephemeral_containers_to_start, s.pod.spec.ephemeral_containers)
    assert sum(1 for c in s.inits if c.name in a.init_containers_to_start and not c.is_sidecar) <= 1, \
        f"two ordinary init containers at once: {a.init_containers_to_start}"
    pod_names = {c.name for c in (*s.inits, *s.regulars)}
    assert set(a.containers_in_backoff) <= pod_names, f"backoff for {set(a.containers_in_backoff) - pod_names}"
    assert set(a.backoff_since) <= pod_names, f"backoff_since for {set(a.backoff_since) - pod_names}"


def check_backoff(s: Scenario, a: PodActions) -> None:
    """6. A container waiting in crash-loop backoff is not started; backoff_since and retry_after agree."""
    started = {*a.init_containers_to_start, *a.containers_to_start}
    assert not set(a.containers_in_backoff) & set(_starts(a)), "a container in backoff is started"
    assert (a.retry_after is None) == (not a.containers_in_backoff), "retry_after without backoff or vice versa"
    if a.retry_after is not None:
        assert a.retry_after > 0
    for name in a.containers_in_backoff:
        exited = s.runtime.latest_exited(name)
        assert exited is not None, f"{name} is in backoff without ever having exited"
        assert s.backoff.is_in_backoff_since(reconciler.backoff_key(s.pod, name), exited.finished_at / 1e9, s.now), \
            f"{name} held back though its backoff is over"
    # The executor bumps the backoff for exactly the restarts of an exited container, since its exit.
    expected = {n: e.finished_at / 1e9 for n in started if (e := s.runtime.latest_exited(n)) is not None}
    assert dict(a.backoff_since) == expected, "backoff_since is not the last exit of each restarted container"


def _snapshot(s: Scenario) -> bytes:
    """Every input, deeply, raw bodies included (they are compare=False on the dataclasses); pickle is fast."""
    return pickle.dumps((s.pod, s.runtime, s.backoff, s.now, s.liveness_failures, s.startup_failures, s.started))


SEEN: Counter[str] = Counter()
"""How many of the examples checked showed each feature (see `features`), for the test after."""
SEEN_OWN: Counter[str] = Counter()
"""The same for the examples with container-level restart policies (`own_policy_features`)."""

INVARIANTS: tuple[Callable[[Scenario, PodActions], None], ...] = (
    check_one_sandbox, check_torn_down_pod_starts_nothing, check_restart_policies, check_kills, check_names,
    check_backoff, check_reset)
RESET_INVARIANTS: tuple[Callable[[Scenario, PodActions], None], ...] = (
    check_one_sandbox, check_torn_down_pod_starts_nothing, check_names, check_reset)
"""What must hold while RestartAllContainers removes the containers (the planning rules are not consulted)."""


@settings(PROPERTY_SETTINGS, max_examples=1000)  # 400 left the rarest case at 0-2 hits, by what ran before it
@given(scenarios())
def test_compute_pod_actions_invariants(s: Scenario) -> None:
    before = _snapshot(s)
    actions = s.compute()
    # 7. Pure and deterministic: the inputs are untouched and a second call gives the same answer.
    assert _snapshot(s) == before, "compute_pod_actions mutated its inputs"
    assert s.compute() == actions, "compute_pod_actions is not deterministic"
    for feature, shown in features(s, actions).items():
        SEEN[feature] += shown
        if shown:
            event(feature)  # pytest --hypothesis-show-statistics lists them
    for invariant in INVARIANTS:
        invariant(s, actions)


@settings(PROPERTY_SETTINGS, max_examples=4000)  # more situations to reach: about 10 seconds
@given(scenarios(own_policies=True))
def test_compute_pod_actions_invariants_with_container_restart_policies(s: Scenario) -> None:
    """The same invariants and purity, on pods whose ordinary containers may have a restartPolicy and
    restartPolicyRules of their own (upstream ContainerRestartRules)."""
    before = _snapshot(s)
    actions = s.compute()
    assert _snapshot(s) == before, "compute_pod_actions mutated its inputs"
    assert s.compute() == actions, "compute_pod_actions is not deterministic"
    for feature, shown in own_policy_features(s, actions).items():
        SEEN_OWN[feature] += shown
        if shown:
            event(feature)
    for invariant in RESET_INVARIANTS if s.restart_all and not s.pod.is_deleting else INVARIANTS:
        invariant(s, actions)


# ---------------------------------------------------------------------------------------- the generator's reach


def features(s: Scenario, a: PodActions) -> dict[str, bool]:
    """The situations the invariants are about, and whether this example shows each."""
    policy = s.pod.spec.restart_policy
    regular_exited = [c.name for c in s.regulars if (latest := s.runtime.latest_container(c.name)) is not None
                      and latest.state is State.EXITED]
    restarting = _restarting(a)
    init_names = {c.name for c in s.inits}
    kills = a.containers_to_kill.values()
    found = {
        "new sandbox": a.create_sandbox,
        "new sandbox replacing a ready one": a.create_sandbox and any(b.ready for b in s.runtime.sandboxes),
        "new sandbox replacing two ready ones": a.create_sandbox and sum(b.ready for b in s.runtime.sandboxes) > 1,
        "new sandbox starting init containers": a.create_sandbox and bool(a.init_containers_to_start),
        "new sandbox starting regular containers": a.create_sandbox and bool(a.containers_to_start),
        "new sandbox under Never with no sandbox left": (a.create_sandbox and policy == RESTART_NEVER
                                                         and bool(s.runtime.containers)),
        "deleted pod": s.pod.is_deleting,
        "pod killed without a new sandbox": a.kill_pod and not a.create_sandbox and not s.pod.is_deleting,
        "regular container started in the sandbox": not a.kill_pod and bool(a.containers_to_start),
        "init container started in the sandbox": not a.kill_pod and bool(a.init_containers_to_start),
        "sidecar and regular containers started together": bool(a.init_containers_to_start and a.containers_to_start),
        "ephemeral container started": bool(a.ephemeral_containers_to_start),
        "exited regular container left alone under Never": (policy == RESTART_NEVER and not a.create_sandbox
                                                              and not a.kill_pod and bool(regular_exited)),
        "succeeded regular container left alone under OnFailure": policy == RESTART_ON_FAILURE and any(
            s.runtime.latest_exited(n).exit_code == 0 and n not in restarting for n in regular_exited),
        "succeeded regular container not run again in a new sandbox under OnFailure": (
            a.create_sandbox and policy == RESTART_ON_FAILURE and not s.inits
            and any(s.runtime.latest_exited(n).exit_code == 0 for n in regular_exited)),
        "succeeded init container not run again": not a.create_sandbox and not a.kill_pod and any(
            not c.is_sidecar and (latest := s.runtime.latest_active_container(c.name)) is not None
            and latest.state is State.EXITED and not reconciler.init_container_failed(latest) for c in s.inits),
        "sidecar restarted under Never": policy == RESTART_NEVER and not a.create_sandbox and any(
            c.is_sidecar and c.name in restarting for c in s.inits),
        "kill and restart": any(i.name in restarting for i in kills) and not a.kill_pod,
        "kill and restart of a sidecar": not a.kill_pod and any(
            i.name in restarting and i.name in init_names for i in kills),
        "kill for a changed spec": any(i.reason == "" for i in kills),
        "kill of an unknown instance": any(i.reason == reconciler.REASON_UNKNOWN for i in kills),
        "kill without restart (a probe failed under Never)": not a.kill_pod and any(
            i.name not in restarting for i in kills),
        "container in backoff": bool(a.containers_in_backoff),
        "restart after backoff": bool(a.backoff_since),
    }
    return found


def own_policy_features(s: Scenario, a: PodActions) -> dict[str, bool]:
    """The situations of container-level restart policies and rules, and whether this example shows each."""
    policy = s.pod.spec.restart_policy
    restarting = _restarting(a)
    exited = {c.name: e for c in s.regulars
              if (e := s.runtime.latest_container(c.name)) is not None and e.state is State.EXITED}

    def rule_restarts(c: ContainerSpec) -> bool:
        rule = pod_spec.matching_restart_rule(c, exited[c.name].exit_code)
        return rule is not None and rule.action == "Restart"

    in_sandbox = not a.create_sandbox and not a.kill_pod and not s.restart_all
    resets = {(r.kill, _triggers_reset(next(c for c in (*s.inits, *s.regulars) if c.name == r.name),
                                       next(i for i in s.runtime.containers if i.id == r.container_id)))
              for r in a.containers_to_reset}
    return {
        "regular container restarted by a matching restart rule": in_sandbox and any(
            c.name in exited and c.name in restarting and c.restart_policy != "Always" and rule_restarts(c)
            for c in s.regulars),
        "regular container restarted alone by its RestartAllContainers rule (no reset under way)": in_sandbox and any(
            c.name in exited and c.name in restarting and (r := pod_spec.matching_restart_rule(
                c, exited[c.name].exit_code)) is not None and r.action == "RestartAllContainers" for c in s.regulars),
        "reset removing a triggering instance, a running one and an exited one": {
            (False, True), (True, False), (False, False)} <= resets,
        "reset with a sandbox to re-create: the pod is killed": s.restart_all and a.kill_pod and a.create_sandbox,
        "exited regular container with its own Never left alone in a pod that restarts": (
            policy != RESTART_NEVER and in_sandbox and any(
                c.restart_policy == RESTART_NEVER and c.name in exited and c.name not in restarting
                for c in s.regulars)),
        "regular container with its own Always or OnFailure restarted in a Never pod": (
            policy == RESTART_NEVER and in_sandbox and any(
                c.restart_policy in ("Always", RESTART_ON_FAILURE) and c.name in exited and c.name in restarting
                for c in s.regulars)),
        "failed init container with its own policy restarted": not a.create_sandbox and any(
            not c.is_sidecar and c.restart_policy is not None and c.name in restarting
            and (e := s.runtime.latest_active_container(c.name)) is not None and e.state is State.EXITED
            for c in s.inits),
        "failed init container with its own Never kills a pod that restarts": (
            policy != RESTART_NEVER and a.kill_pod and not a.create_sandbox and any(
                not c.is_sidecar and c.restart_policy == RESTART_NEVER
                and (e := s.runtime.latest_active_container(c.name)) is not None
                and reconciler.init_container_failed(e) for c in s.inits)),
        "succeeded container with its own OnFailure not run again in a new sandbox": (
            a.create_sandbox and not s.inits and any(
                c.restart_policy == RESTART_ON_FAILURE and c.name in exited and exited[c.name].exit_code == 0
                for c in s.regulars)),
        "probe failure kills without restart for a container's own Never": not a.kill_pod and any(
            i.name not in restarting and i.reason in (reconciler.REASON_LIVENESS_PROBE, reconciler.REASON_STARTUP_PROBE)
            and policy != RESTART_NEVER for i in a.containers_to_kill.values()),
    }


def test_the_generator_reaches_every_case() -> None:
    """The invariants are not vacuous: among the examples the property test checked, every situation they
    constrain came up (derandomized: the same examples on every run; 5 times or more each with hypothesis 6.170)."""
    if not SEEN:  # this test was selected alone: run the property test here
        test_compute_pod_actions_invariants()
    missing = [name for name, count in SEEN.items() if not count]
    assert not missing, f"never generated: {missing}; all: {dict(SEEN)}"


def test_the_generator_reaches_every_container_policy_case() -> None:
    """The same for the examples with container-level restart policies and rules (4 times or more each with
    hypothesis 6.170, whether this file runs alone or after the other unit tests: hypothesis's derandomized
    examples shift a little with what ran before in the process)."""
    if not SEEN_OWN:
        test_compute_pod_actions_invariants_with_container_restart_policies()
    missing = [name for name, count in SEEN_OWN.items() if not count]
    assert not missing, f"never generated: {missing}; all: {dict(SEEN_OWN)}"
