"""kopflet.hooks.api: the verdicts, the plan view's changes and the registry check what a hook asks for at once,
so a wrong one fails inside the hook's own call."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import pytest

from kopflet import hooks
from kopflet.api import spec

NOW = datetime.datetime(2026, 6, 1, 12, 0, 0, tzinfo=datetime.UTC)
POD = spec.pod_from_body({
    "metadata": {"name": "web", "namespace": "ns", "uid": "u1"},
    "spec": {"initContainers": [{"name": "init", "image": "busybox"}],
             "containers": [{"name": "app", "image": "nginx", "env": [{"name": "MODE", "value": "prod"}],
                             "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
             "volumes": [{"name": "data", "emptyDir": {}}]}})


def view() -> hooks.PlanView:
    return hooks.PlanView(pod=POD, node_name="node-1", creates_sandbox=True, starts=("init", "app"), now=NOW)


@pytest.mark.parametrize(("args", "kwargs", "error"), [
    (("",), {}, "the message must be a non-empty string"),
    (("no",), {"reason": "lowercase"}, "reason 'lowercase' must be CamelCase"),
    (("no",), {"reason": "With Space"}, "must be CamelCase"),
    (("no",), {"reason": "A" * 129}, "must be CamelCase"),
])
def test_reject_checks_its_reason_and_message(args: tuple[Any, ...], kwargs: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        hooks.reject(*args, **kwargs)


def test_reject_defaults_its_reason_and_cuts_long_messages() -> None:
    verdict = hooks.reject("x" * 2000)
    assert verdict.reason == "HookRejected" and not verdict.allowed
    assert len(verdict.message) == 1024 and verdict.message.endswith("...")
    assert hooks.allow() == hooks.AdmitVerdict(allowed=True)


def test_the_admit_request_lists_every_containers_image() -> None:
    request = hooks.AdmitRequest(pod=POD, node_name="node-1", now=NOW)
    assert request.images() == (("init", "busybox"), ("app", "nginx"))


Change = Callable[[hooks.PlanView], None]


@pytest.mark.parametrize(("change", "error"), [
    (lambda v: v.delay(0, "x"), "above 0"),
    (lambda v: v.delay(601, "x"), "at most 600"),
    (lambda v: v.delay(True, "x"), "must be a number"),
    (lambda v: v.delay(5, ""), "non-empty"),
    (lambda v: v.set_env("A=B", "1"), "not a valid name"),
    (lambda v: v.set_env("", "1"), "not a valid name"),
    (lambda v: v.set_env("A", 1), "must be a string"),  # type: ignore[arg-type]
    (lambda v: v.set_env("A", "1", containers=["nope"]), "the pod has no container 'nope'"),
    (lambda v: v.set_env("A", "1", containers="app"), "give a list of names"),
    (lambda v: v.set_env("A", "1", containers=[]), "name at least one"),
    (lambda v: v.add_empty_dir("Bad_Name"), "must be a DNS-1123 label"),
    (lambda v: v.add_empty_dir("data"), "already has a volume 'data'"),
    (lambda v: v.add_empty_dir("x", medium="HugePages"), "medium"),  # type: ignore[arg-type]
    (lambda v: v.add_host_path("x", "relative/path"), "must be an absolute path"),
    (lambda v: v.add_host_path("x", "/srv", type="Fancy"), "type 'Fancy'"),
    (lambda v: v.mount("nope", "/x"), "the pod has no volume 'nope'"),
    (lambda v: v.mount("data", "relative"), "must be an absolute path"),
    (lambda v: v.mount("data", "/data", containers=["app"]), "container app already mounts something at /data"),
    (lambda v: v.mount("data", "/x", sub_path="../up"), "must not contain '..'"),
    (lambda v: v.mount("data", "/x", sub_path="/abs"), "must be relative"),
    (lambda v: v.event("Info", "Reason", "m"), "must be 'Normal' or 'Warning'"),
])
def test_a_wrong_change_raises_inside_the_hook(change: Change, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        change(view())


def test_the_changes_a_hook_asked_for() -> None:
    v = view()
    v.set_env("ZONE", "a")
    v.set_env("ONLY_APP", "1", containers=["app"])
    v.add_empty_dir("scratch", medium="Memory", size_limit="64Mi")
    v.add_host_path("certs", "/etc/ssl/certs", type="Directory")
    v.mount("scratch", "/scratch")
    v.mount("certs", "/etc/ssl/certs", containers=["app"], read_only=True)
    v.delay(10, "busy")
    changes = v.changes()
    assert changes.delay == 10.0 and changes.delay_reason == "busy"
    assert [(e.containers, e.name, e.value) for e in changes.env] == [(("init", "app"), "ZONE", "a"),
                                                                      (("app",), "ONLY_APP", "1")]
    assert changes.volumes == ({"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
                               {"name": "certs", "hostPath": {"path": "/etc/ssl/certs", "type": "Directory"}})
    assert [(m.containers, m.mount) for m in changes.mounts] == [
        (("init", "app"), {"name": "scratch", "mountPath": "/scratch"}),
        (("app",), {"name": "certs", "mountPath": "/etc/ssl/certs", "readOnly": True})]
    assert changes.describe()[0] == ("delay the starts by 10s", "busy")


def test_one_hook_call_posts_a_few_events_at_most() -> None:
    v = view()
    for i in range(hooks.api.MAX_EVENTS):
        v.event("Normal", "Step", str(i))
    with pytest.raises(ValueError, match="at most 5 events"):
        v.event("Normal", "Step", "one too many")


@pytest.mark.parametrize(("register", "error"), [
    (lambda r: r.admit(timeout=0)(lambda _: None), "timeout 0 must be above 0"),
    (lambda r: r.plan(timeout=61)(lambda _: None), "at most 60"),
    (lambda r: r.admit(failure_policy="Maybe")(lambda _: None), "failure_policy 'Maybe'"),
    (lambda r: r.register(hooks.Hook("plan", "p", lambda _: None, failure_policy="Fail")), "the others only"),
    (lambda r: r.register(hooks.Hook("mutate", "m", lambda _: None)), "hook kind 'mutate'"),
])
def test_the_registry_refuses_wrong_options(register: Callable[[hooks.Registry], Any], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        register(hooks.Registry())


def test_decorators_register_in_order_once_with_their_names() -> None:
    registry = hooks.Registry()

    @registry.admit
    def bare(_: hooks.AdmitRequest) -> None:
        pass

    @registry.observe(name="custom", timeout=5)
    async def named(_: hooks.DecisionView) -> None:
        pass

    registry.admit(bare)  # a module imported twice registers nothing twice
    assert [(h.kind, h.name, h.timeout, h.is_async) for h in registry.hooks] == [
        ("admit", f"{__name__}.test_decorators_register_in_order_once_with_their_names.<locals>.bare", 2.0, False),
        ("observe", "custom", 5, True)]
