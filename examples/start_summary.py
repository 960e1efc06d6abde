"""A per-pod start summary, from the agent's own decisions: an observe hook follows each new pod's decisions (admitted,
sandbox created, each container started, held back by a policy hook) and once the pod has started (every regular
container running) it reports the timeline, each step as seconds after the agent first saw the pod:

    Started 2.4s after the agent first saw it: admitted +0.0s, sandbox +0.0s, init container migrate +0.9s,
    container app +1.6s, running +2.4s

where it can be seen without reading the agent's log: a Normal event ``StartSummary`` on the pod (``kubectl describe
pod``, ``kubectl get events``), and, with ``KOPFLET_START_SUMMARY_FILE``, one JSON object a line appended to that file
(``{"namespace", "name", "uid", "firstSeen", "steps": {step: seconds}, "running": seconds}``). It is also logged.

Why not a label or an annotation on the pod: a node's identity cannot change a pod's labels (the NodeRestriction
admission plugin refuses it: "node ... cannot update labels through pod status", and a node may not update a pod at
all, only create and delete mirror pods), and kopflet writes no pod metadata. Events are what a node may create.

The times are those of the decisions (when the agent decided each step, and when it saw the pod running), at the
granularity of its syncs: a step's own duration (a pull, a create) is the start timeline's (issue 25, item 2).

    kopflet --hooks examples.start_summary
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kopflet import hooks

REASON = "StartSummary"
FILE_ENV = "KOPFLET_START_SUMMARY_FILE"
MAX_PODS = 10_000
"""Pods followed at most (the oldest are forgotten first): pods that never start cannot fill the memory."""
ENDED = frozenset({"gone", "invalid", "rejected", "terminating", "terminated"})
"""Lifecycles after which a pod will not start: it is forgotten."""

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class _Start:
    first_seen: datetime.datetime
    steps: dict[str, datetime.datetime] = dataclasses.field(default_factory=dict)


class StartTimeline:
    """Follows new pods' decisions; `sink` gets each summary (a JSON-able dict)."""

    def __init__(self, sink: Callable[[dict[str, Any]], None] | None = None, max_pods: int = MAX_PODS) -> None:
        self.sink, self.max_pods = sink, max_pods
        self._pods: dict[str, _Start] = {}
        self._lock = threading.Lock()

    def observe(self, view: hooks.DecisionView) -> None:
        """The observe hook."""
        decision, uid = view.decision, view.pod.uid
        with self._lock:
            if decision.lifecycle in ENDED:
                self._pods.pop(uid, None)
                return
            start = self._pods.get(uid)
            if start is None:
                if decision.phase not in ("", "Pending"):  # running before the agent (re)started: not a start
                    return
                start = self._pods[uid] = _Start(view.first_seen)
                while len(self._pods) > self.max_pods:
                    self._pods.pop(next(iter(self._pods)))
            for rule in decision.rules:
                step = _step(rule.subject, rule.action)
                if step:
                    start.steps.setdefault(step, decision.time)
            if not view.started:
                return
            del self._pods[uid]
        summary = _summary(view, start, decision.time)
        text = describe(summary)
        logger.info(f"pod {view.pod.namespace}/{view.pod.name}: {text}")
        view.event("Normal", REASON, text)
        if self.sink is not None:
            self.sink(summary)


def _step(subject: str, action: str) -> str:
    """The timeline's name of a rule that fired, "" for one it does not follow."""
    if subject == "pod" and action == "admit":
        return "admitted"
    if subject == "sandbox" and action.startswith(("create", "re-create")):
        return "sandbox"
    if action == "start":  # "container app", "init container migrate", "sidecar proxy"
        return subject
    if subject.startswith("policy hook ") and action.startswith("delay the starts"):
        return "held back by " + subject
    return ""


def _summary(view: hooks.DecisionView, start: _Start, running: datetime.datetime) -> dict[str, Any]:
    def after(at: datetime.datetime) -> float:
        return round(max(0.0, (at - start.first_seen).total_seconds()), 3)
    return {"namespace": view.pod.namespace, "name": view.pod.name, "uid": view.pod.uid,
            "firstSeen": start.first_seen.astimezone(datetime.UTC).isoformat().replace("+00:00", "Z"),
            "steps": {step: after(at) for step, at in sorted(start.steps.items(), key=lambda item: item[1])},
            "running": after(running)}


def describe(summary: dict[str, Any]) -> str:
    """``Started 2.4s after the agent first saw it: admitted +0.0s, ..., running +2.4s``."""
    steps = [f"{step} +{seconds:.1f}s" for step, seconds in summary["steps"].items()]
    return (f"Started {summary['running']:.1f}s after the agent first saw it: "
            + ", ".join([*steps, f"running +{summary['running']:.1f}s"]))


def append_to(path: str) -> Callable[[dict[str, Any]], None]:
    """A sink writing one JSON object a line to `path`."""
    def write(summary: dict[str, Any]) -> None:
        with Path(path).open("a", encoding="utf-8") as f:
            f.write(json.dumps(summary, sort_keys=True) + "\n")
    return write


def register(registry: hooks.Registry, timeline: StartTimeline) -> None:
    registry.observe(name="start-summary")(timeline.observe)


TIMELINE = StartTimeline(append_to(os.environ[FILE_ENV]) if os.environ.get(FILE_ENV) else None)
register(hooks.registry, TIMELINE)
