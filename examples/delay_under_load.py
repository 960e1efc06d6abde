"""Hold new pods back while the node is busy: a plan hook that, when a pod is about to start for the first time and
the node's load average per CPU is above a threshold, holds the start back (the pod stays Pending, its sandbox not
yet created) and asks again a few seconds later; after a longest wait it lets the pod start whatever the load.
Critical pods (priority at least system-cluster-critical's) and restarts are never held.

``kopflet explain <namespace>/<pod>`` says why the pod waits (``next: ... — start delayed by policy hook
delay-under-load: load 5.10 per CPU above 2.00``), and each pod gets one Normal event ``StartDelayed`` when it is
first held back.

    KOPFLET_LOAD_THRESHOLD=1.5 kopflet --hooks examples.delay_under_load

- ``KOPFLET_LOAD_THRESHOLD``: the 1-minute load average per CPU above which starts wait (default 2).
- ``KOPFLET_LOAD_RETRY``: seconds before asking again (default 10).
- ``KOPFLET_LOAD_MAX_WAIT``: seconds after the agent first saw a pod when it starts whatever the load (default 300).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping

from kopflet import hooks

CRITICAL_PRIORITY = 2_000_000_000
"""system-cluster-critical's priority (system-node-critical's is above it)."""
REASON = "StartDelayed"


def load_per_cpu() -> float:
    return os.getloadavg()[0] / (os.cpu_count() or 1)


@dataclasses.dataclass
class LoadGate:
    threshold: float = 2.0
    retry: float = 10.0
    max_wait: float = 300.0
    load: Callable[[], float] = load_per_cpu
    told: set[str] = dataclasses.field(default_factory=set)
    """The pods already told (one event each)."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> LoadGate:
        return cls(threshold=float(environ.get("KOPFLET_LOAD_THRESHOLD", "2")),
                   retry=float(environ.get("KOPFLET_LOAD_RETRY", "10")),
                   max_wait=float(environ.get("KOPFLET_LOAD_MAX_WAIT", "300")))

    def plan(self, view: hooks.PlanView) -> None:
        """The plan hook."""
        if not view.creates_sandbox or view.restarts:
            return  # only a pod's first start waits
        if (view.pod.spec.priority or 0) >= CRITICAL_PRIORITY:
            return
        waited = (view.now - view.first_seen).total_seconds()
        if waited >= self.max_wait:
            return
        load = self.load()
        if load <= self.threshold:
            return
        why = f"load {load:.2f} per CPU above {self.threshold:.2f}"
        view.delay(min(self.retry, max(self.max_wait - waited, 1.0)), why)
        if view.pod.uid not in self.told:  # the first time only, not at every retry
            if len(self.told) >= 10_000:
                self.told.clear()
            self.told.add(view.pod.uid)
            view.event("Normal", REASON, f"Start held back: node {why}; the agent tries again every "
                                         f"{self.retry:g}s, for up to {self.max_wait:g}s")


def register(registry: hooks.Registry, gate: LoadGate) -> None:
    registry.plan(name="delay-under-load")(gate.plan)


GATE = LoadGate.from_environ(os.environ)
register(hooks.registry, GATE)
