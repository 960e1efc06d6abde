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
from kopflet.hooks import loader
from kopflet.hooks.runner import PolicyHooks
from kopflet.pods import explain

NOW = datetime.datetime(2026, 6, 1, 12, 0, 0, tzinfo=datetime.UTC)
EXAMPLES = ("examples.image_allowlist", "examples.start_summary", "examples.delay_under_load")


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
start_summary = example("start_summary")
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


# ----------------------------------------------------------------------------------------------- start summary

def at(seconds: float) -> datetime.datetime:
    return NOW + datetime.timedelta(seconds=seconds)


def decision(seconds: float, *rules: tuple[str, str], lifecycle: str = "syncing",
             phase: str = "Pending") -> explain.Decision:
    return explain.Decision(time=at(seconds), sync="sync", lifecycle=lifecycle, phase=phase, next_at=at(seconds),
                            rules=tuple(explain.Rule(subject=s, action=a) for s, a in rules))


def view(d: explain.Decision, started: bool = False, uid: str = "u1") -> hooks.DecisionView:
    p = spec.minimal_pod(uid, "ns", "web")
    return hooks.DecisionView(pod=p, decision=d, started=started, first_seen=NOW, status=None)


START = [
    (decision(0.1, ("pod", "admit"), ("sandbox", "create (attempt 0)"), ("init container migrate", "start"),
              ("status", "write")), False),
    (decision(0.3, ("status", "write")), False),
    (decision(1.2, ("container app", "start")), False),
    (decision(2.4, ("status", "write"), phase="Pending"), True),
]


async def test_a_started_pod_gets_its_start_summary_as_an_event_and_a_json_line(tmp_path: Path) -> None:
    out = tmp_path / "starts.jsonl"
    registry = hooks.Registry()
    start_summary.register(registry, start_summary.StartTimeline(start_summary.append_to(str(out))))
    posted: list[tuple[str, str, str]] = []
    runner = PolicyHooks(registry.hooks, post_event=lambda p, e: posted.append((e.type, e.reason, e.message)))
    task = asyncio.create_task(runner.run())
    try:
        for d, started in START:
            runner.observe(spec.minimal_pod("u1", "ns", "web"), lambda d=d, started=started: view(d, started))
        await asyncio.wait_for(runner.drain(), 5)
    finally:
        task.cancel()
    text = ("Started 2.4s after the agent first saw it: admitted +0.1s, sandbox +0.1s, init container migrate +0.1s, "
            "container app +1.2s, running +2.4s")
    assert posted == [("Normal", "StartSummary", text)]
    assert json.loads(out.read_text()) == {
        "namespace": "ns", "name": "web", "uid": "u1", "firstSeen": "2026-06-01T12:00:00Z", "running": 2.4,
        "steps": {"admitted": 0.1, "sandbox": 0.1, "init container migrate": 0.1, "container app": 1.2}}


def test_a_held_back_start_is_in_the_summary() -> None:
    timeline, summaries = start_summary.StartTimeline(), []
    timeline.sink = summaries.append
    timeline.observe(view(decision(0.0, ("pod", "admit"), ("policy hook load", "delay the starts by 10s"))))
    timeline.observe(view(decision(10.0, ("sandbox", "create (attempt 0)"), ("container app", "start"))))
    timeline.observe(view(decision(11.0), started=True))
    assert summaries[0]["steps"] == {"admitted": 0.0, "held back by policy hook load": 0.0, "sandbox": 10.0,
                                     "container app": 10.0}


@pytest.mark.parametrize("first", [
    pytest.param(decision(0, ("status", "write"), phase="Running"), id="adopted running: not a start"),
    pytest.param(decision(0, ("pod", "reject"), lifecycle="rejected"), id="rejected: never starts"),
])
def test_pods_that_do_not_start_here_are_not_followed(first: explain.Decision) -> None:
    timeline, summaries = start_summary.StartTimeline(), []
    timeline.sink = summaries.append
    timeline.observe(view(first))
    timeline.observe(view(decision(1, phase="Running"), started=True))
    assert summaries == [] and timeline._pods == {}


def test_a_pod_deleted_before_it_started_is_forgotten_and_the_followed_pods_are_bounded() -> None:
    timeline = start_summary.StartTimeline(max_pods=2)
    timeline.observe(view(decision(0, ("pod", "admit"))))
    timeline.observe(view(decision(1, lifecycle="terminating")))
    assert timeline._pods == {}
    for uid in ("a", "b", "c"):
        timeline.observe(view(decision(0, ("pod", "admit")), uid=uid))
    assert list(timeline._pods) == ["b", "c"]


def test_the_summary_file_comes_from_the_environment(fresh: hooks.Registry, monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    monkeypatch.setenv(start_summary.FILE_ENV, str(tmp_path / "s.jsonl"))
    module: ModuleType = importlib.import_module("examples.start_summary")
    assert [(h.kind, h.name) for h in fresh.hooks] == [("observe", "start-summary")]
    assert module.TIMELINE.sink is not None


# -------------------------------------------------------------------------------------------- delay under load

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
    assert all(not h.name.startswith(("image-allowlist", "start-summary", "delay-under-load"))
               for h in hooks.registry.hooks)
    assert hooks.registry is hooks.api.registry
