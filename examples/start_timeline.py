"""Each pod's start timeline, where it can be seen without the agent's API: an observe hook that, once a pod's start
is over (Ready, or the pod ended first), posts it on the pod as a Normal event ``StartTimeline``

    Ready after 2.412s: admission 1ms, volumes 3ms, sandbox 210ms, image pull busybox:1.36 1.2s (2 attempts),
    create app 20ms, start app 31ms, until ready 946ms

(``kubectl describe pod``, ``kubectl get events``) and, with ``KOPFLET_START_TIMELINE_FILE``, appends it to that file
as one JSON object a line: the pod's namespace, name and uid with the timeline as ``/debug/pods`` serves it (``start``,
``outcome``, ``seconds``, ``steps``: name, kind, detail, start, offsetSeconds, seconds, attempts, error). It is
logged too. A start is reported once; a pod whose sandbox is re-created starts again, and is reported again.

Why not labels or annotations: a node's identity cannot change a pod's labels (the NodeRestriction admission plugin
refuses it: "node ... cannot update labels through pod status"; a node may not update a pod at all, only create and
delete mirror pods), and kopflet writes no pod metadata. Events are what a node may create.

    KOPFLET_START_TIMELINE_FILE=/var/log/kopflet-starts.jsonl kopflet --hooks examples.start_timeline ...
"""

from __future__ import annotations

import collections
import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kopflet import gotext, hooks
from kopflet.pods import timeline

REASON = "StartTimeline"
FILE_ENV = "KOPFLET_START_TIMELINE_FILE"
MAX_PODS = 10_000
"""Pods whose last reported start is remembered (the oldest forgotten first)."""

logger = logging.getLogger(__name__)


class StartReporter:
    """Reports each finished start once; `sink` gets each as a JSON-able dict."""

    def __init__(self, sink: Callable[[dict[str, Any]], None] | None = None, max_pods: int = MAX_PODS) -> None:
        self.sink, self.max_pods = sink, max_pods
        self._reported: collections.OrderedDict[str, float] = collections.OrderedDict()
        """Pod uid -> the origin of its last reported start."""
        self._lock = threading.Lock()

    def observe(self, view: hooks.DecisionView) -> None:
        """The observe hook."""
        uid, start = view.pod.uid, view.timeline
        with self._lock:
            if view.decision.lifecycle == "gone":
                self._reported.pop(uid, None)
                return
            if start is None or not start.finished or self._reported.get(uid) == start.origin:
                return
            self._reported[uid] = start.origin
            self._reported.move_to_end(uid)
            while len(self._reported) > self.max_pods:
                self._reported.popitem(last=False)
        text = describe(start)
        logger.info(f"pod {view.pod.namespace}/{view.pod.name}: {text}")
        view.event("Normal", REASON, text)
        if self.sink is not None:
            self.sink({"namespace": view.pod.namespace, "name": view.pod.name, "uid": uid,
                       **timeline.to_json(start)})


def _took(seconds: float) -> str:
    return gotext.go_duration(max(0.0, seconds), truncate=0.001)


def describe(start: timeline.Timeline) -> str:
    """``Ready after 2.412s: admission 1ms, ..., until ready 947ms`` (``ended Failed after 3s, never Ready: ...``)."""
    total = _took((start.ended or start.origin) - start.origin)
    head = f"Ready after {total}" if start.outcome == timeline.READY else \
        f"ended {start.outcome} after {total}, never Ready"
    steps = [f"{s.name} {_took(s.duration)}" + (f" ({s.attempts} attempts)" if s.attempts > 1 else "")
             for s in start.steps]
    return f"{head}: {', '.join(steps)}" if steps else head


def append_to(path: str) -> Callable[[dict[str, Any]], None]:
    """A sink writing one JSON object a line to `path`."""
    def write(record: dict[str, Any]) -> None:
        with Path(path).open("a", encoding="utf-8") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
    return write


def register(registry: hooks.Registry, reporter: StartReporter) -> None:
    registry.observe(name="start-timeline")(reporter.observe)


REPORTER = StartReporter(append_to(os.environ[FILE_ENV]) if os.environ.get(FILE_ENV) else None)
register(hooks.registry, REPORTER)
