"""The policy hook examples under examples/: loaded the way the agent loads them (configured from the environment),
then driven through the runner as the pod workers drive them."""

from __future__ import annotations

import asyncio
import datetime
import importlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from kopflet import hooks
from kopflet.api import spec
from kopflet.container.sync_result import ADMISSION, CREATE, IMAGE_PULL, SANDBOX, START, VOLUMES
from kopflet.hooks import loader
from kopflet.hooks.runner import PolicyHooks
from kopflet.pods import explain, timeline

NOW = datetime.datetime(2026, 6, 1, 12, 0, 0, tzinfo=datetime.UTC)
EXAMPLES = ("examples.image_allowlist", "examples.start_timeline", "examples.delay_under_load")


def example(name: str, **env: str) -> ModuleType:
    """An example module, imported with `env` into a registry of its own: importing one registers its hook, which
    must not reach the agent's default registry (other tests build agents)."""
    saved_env = {k: os.environ.get(k) for k in env}
    saved = hooks.registry, hooks.api.registry
    hooks.registry = hooks.api.registry = hooks.Registry()
    os.environ.update(env)
    try:
        sys.modules.pop(f"examples.{name}", None)
        return importlib.import_module(f"examples.{name}")
    finally:
        sys.modules.pop(f"examples.{name}", None)
        hooks.registry, hooks.api.registry = saved
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


image_allowlist = example("image_allowlist", KOPFLET_IMAGE_ALLOWLIST="*")
start_timeline = example("start_timeline")
delay_under_load = example("delay_under_load")


def pod(*images: str, namespace: str = "ns", priority: int | None = None, init: str = "") -> spec.Pod:
    body: dict[str, Any] = {
        "metadata": {"name": "web", "namespace": namespace, "uid": "u1"},
        "spec": {"containers": [{"name": f"c{i}", "image": image} for i, image in enumerate(images)]}}
    if init:
        body["spec"]["initContainers"] = [{"name": "migrate", "image": init}]
    if priority is not None:
        body["spec"]["priority"] = priority
    return spec.pod_from_body(body)


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[hooks.Registry]:
    """A default registry of the test's own, and the examples imported anew (as the agent's first import)."""
    registry = hooks.Registry()
    monkeypatch.setattr(hooks.api, "registry", registry)
    monkeypatch.setattr(hooks, "registry", registry)
    for name in EXAMPLES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    yield registry
    for name in EXAMPLES:
        sys.modules.pop(name, None)


# --------------------------------------------------------------------------------------------- image allowlist

ALLOWLIST = image_allowlist.Allowlist(("registry.example.com/*", "docker.io/library/busybox:*"))


@pytest.mark.parametrize(("image", "allowed"), [
    ("registry.example.com/team/app:1.2", True),
    ("registry.example.com/app@sha256:" + "a" * 64, True),
    ("busybox", True),  # docker.io/library/busybox:latest
    ("busybox:1.36", True),
    ("docker.io/library/busybox:1.36", True),
    ("index.docker.io/library/busybox", True),  # the legacy domain is docker.io
    ("nginx:1.27", False),
    ("registry.example.com.evil.io/app:1", False),
    ("evil.io/registry.example.com/app:1", False),
    ("Registry.Example.com/app", False),  # does not parse: refused, as the kubelet would refuse it
])
def test_an_image_is_allowed_when_its_normalised_reference_matches(image: str, allowed: bool) -> None:
    assert ALLOWLIST.allows(image) is allowed


async def test_a_pod_with_one_image_outside_the_list_is_rejected() -> None:
    registry = hooks.Registry()
    image_allowlist.register(registry, ALLOWLIST)
    runner = PolicyHooks(registry.hooks)

    async def admit(p: spec.Pod) -> Any:
        return await runner.admit(p, lambda: hooks.AdmitRequest(pod=p, node_name="edge-1", now=NOW))

    assert (await admit(pod("busybox", "registry.example.com/app:1"))).rejection is None
    outcome = await admit(pod("busybox", init="evil.io/miner:1"))
    assert outcome.rejection == hooks.AdmitVerdict(
        False, "ImageNotAllowed", 'container migrate: image "evil.io/miner:1" is not allowed on node edge-1 (not in '
                                  'its image allowlist)')
    exempt = image_allowlist.Allowlist(ALLOWLIST.patterns, frozenset({"kube-system"}))
    assert exempt.admit(hooks.AdmitRequest(pod=pod("evil.io/x", namespace="kube-system"), node_name="n",
                                           now=NOW)) is None


def test_the_allowlist_is_read_from_the_environment_and_registered_to_fail_closed(
        fresh: hooks.Registry, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    listing = tmp_path / "allowlist"
    listing.write_text("# the team's registry\nregistry.example.com/*\n\nquay.io/org/*  # and quay\n")
    monkeypatch.setenv(image_allowlist.ALLOWLIST_ENV, "docker.io/library/busybox:*")
    monkeypatch.setenv(image_allowlist.ALLOWLIST_FILE_ENV, str(listing))
    monkeypatch.setenv(image_allowlist.EXEMPT_ENV, "kube-system, monitoring")
    found = loader.load(["examples.image_allowlist"], entry_points=False)
    assert [(h.kind, h.name, h.failure_policy) for h in found] == [("admit", "image-allowlist", "Fail")]
    allowlist = sys.modules["examples.image_allowlist"].ALLOWLIST
    assert allowlist.patterns == ("docker.io/library/busybox:*", "registry.example.com/*", "quay.io/org/*")
    assert allowlist.exempt_namespaces == frozenset({"kube-system", "monitoring"})


def test_an_allowlist_without_patterns_stops_the_start(fresh: hooks.Registry,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(image_allowlist.ALLOWLIST_ENV, raising=False)
    monkeypatch.delenv(image_allowlist.ALLOWLIST_FILE_ENV, raising=False)
    with pytest.raises(loader.HookLoadError, match="no image patterns: set KOPFLET_IMAGE_ALLOWLIST"):
        loader.load(["examples.image_allowlist"], entry_points=False)


# ---------------------------------------------------------------------------------------------- start timeline

ORIGIN = 1000.0


def started(outcome: str = timeline.READY, origin: float = ORIGIN) -> timeline.Timeline:
    """admission, volumes, sandbox, a pull tried twice, create and start, then Ready (or the pod's end)."""
    t = timeline.begin(NOW, origin)
    for kind, detail, begin, end, error in (
            (ADMISSION, "", 0.0, 0.001, ""), (VOLUMES, "", 0.002, 0.005, ""), (SANDBOX, "", 0.005, 0.215, ""),
            (IMAGE_PULL, "busybox:1.36", 0.215, 0.5, "ErrImagePull"), (IMAGE_PULL, "busybox:1.36", 0.9, 1.415, ""),
            (CREATE, "app", 1.415, 1.435, ""), (START, "app", 1.435, 1.466, "")):
        t = timeline.add_step(t, kind, detail, origin + begin, origin + end, error)
    return timeline.finish(t, origin + 2.412, outcome)


def decision(lifecycle: str = "syncing") -> explain.Decision:
    return explain.Decision(time=NOW, sync="sync", lifecycle=lifecycle, phase="Pending", next_at=NOW)


def view(start: timeline.Timeline | None, lifecycle: str = "syncing", uid: str = "u1") -> hooks.DecisionView:
    return hooks.DecisionView(pod=spec.minimal_pod(uid, "ns", "web"), decision=decision(lifecycle),
                              first_seen=NOW, timeline=start)


TEXT = ("Ready after 2.412s: admission 1ms, volumes 3ms, sandbox 210ms, image pull busybox:1.36 1.2s (2 attempts), "
        "create app 20ms, start app 31ms, until ready 946ms")


async def test_a_started_pod_gets_its_start_timeline_as_an_event_and_a_json_line(tmp_path: Path) -> None:
    out = tmp_path / "starts.jsonl"
    registry = hooks.Registry()
    start_timeline.register(registry, start_timeline.StartReporter(start_timeline.append_to(str(out))))
    posted: list[tuple[str, str, str]] = []
    runner = PolicyHooks(registry.hooks, post_event=lambda p, e: posted.append((e.type, e.reason, e.message)))
    unfinished = timeline.begin(NOW, ORIGIN)
    task = asyncio.create_task(runner.run())
    try:
        for start in (None, unfinished, started(), started()):  # decisions before, at and after the end of the start
            runner.observe(spec.minimal_pod("u1", "ns", "web"), lambda start=start: view(start))
        await asyncio.wait_for(runner.drain(), 5)
    finally:
        task.cancel()
    assert posted == [("Normal", "StartTimeline", TEXT)]  # once
    record = json.loads(out.read_text())
    assert (record["namespace"], record["name"], record["uid"], record["outcome"], record["seconds"]) == (
        "ns", "web", "u1", "Ready", 2.412)
    assert [(s["name"], s["attempts"]) for s in record["steps"]] == [
        ("admission", 1), ("volumes", 1), ("sandbox", 1), ("image pull busybox:1.36", 2), ("create app", 1),
        ("start app", 1), ("until ready", 1)]


def test_a_new_start_is_reported_again_and_a_pod_that_ended_first_says_so() -> None:
    reporter, records = start_timeline.StartReporter(), []
    reporter.sink = records.append
    reporter.observe(view(started()))
    reporter.observe(view(started("Failed", origin=ORIGIN + 60)))  # its sandbox re-created: a start of its own
    assert [r["outcome"] for r in records] == ["Ready", "Failed"]
    assert start_timeline.describe(started("Failed")).startswith("ended Failed after 2.412s, never Ready: admission")


def test_the_reported_pods_are_forgotten_when_gone_and_bounded() -> None:
    reporter = start_timeline.StartReporter(max_pods=2)
    for uid in ("a", "b", "c"):
        reporter.observe(view(started(), uid=uid))
    assert list(reporter._reported) == ["b", "c"]
    reporter.observe(view(None, lifecycle="gone", uid="b"))
    assert list(reporter._reported) == ["c"]


def test_the_timeline_file_comes_from_the_environment(fresh: hooks.Registry, monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    monkeypatch.setenv(start_timeline.FILE_ENV, str(tmp_path / "s.jsonl"))
    module: ModuleType = importlib.import_module("examples.start_timeline")
    assert [(h.kind, h.name) for h in fresh.hooks] == [("observe", "start-timeline")]
    assert module.REPORTER.sink is not None


# -------------------------------------------------------------------------------------------- delay under load

def at(seconds: float) -> datetime.datetime:
    return NOW + datetime.timedelta(seconds=seconds)


def plan_view(p: spec.Pod, *, waited: float = 0.0, creates_sandbox: bool = True,
              restarts: tuple[str, ...] = ()) -> hooks.PlanView:
    return hooks.PlanView(pod=p, node_name="n", creates_sandbox=creates_sandbox, starts=("c0",), restarts=restarts,
                          now=at(waited), first_seen=NOW)


@pytest.mark.parametrize(("load", "kwargs", "delay"), [
    (5.1, {}, (10.0, "load 5.10 per CPU above 2.00")),
    (1.0, {}, None),
    (5.1, {"waited": 295.0}, (5.0, "load 5.10 per CPU above 2.00")),  # never past the longest wait
    (5.1, {"waited": 300.0}, None),
    (5.1, {"restarts": ("c0",), "creates_sandbox": False}, None),
    (5.1, {"p": pod("busybox", priority=2_000_001_000)}, None),
])
def test_a_first_start_waits_while_the_node_is_busy(load: float, kwargs: dict[str, Any],
                                                    delay: tuple[float, str] | None) -> None:
    gate = delay_under_load.LoadGate(load=lambda: load)
    v = plan_view(kwargs.pop("p", pod("busybox")), **kwargs)
    gate.plan(v)
    changes = v.changes()
    assert ((changes.delay, changes.delay_reason) if changes.delay is not None else None) == delay


def test_a_held_pod_is_told_once() -> None:
    gate = delay_under_load.LoadGate(load=lambda: 9.0)
    views = [plan_view(pod("busybox"), waited=w) for w in (0, 10, 20)]
    for v in views:
        gate.plan(v)
    assert [len(v.events) for v in views] == [1, 0, 0]
    assert views[0].events[0].reason == "StartDelayed"


def test_loading_the_examples_here_left_the_agents_registry_as_it_was() -> None:
    assert all(not h.name.startswith(("image-allowlist", "start-timeline", "delay-under-load"))
               for h in hooks.registry.hooks)
    assert hooks.registry is hooks.api.registry
