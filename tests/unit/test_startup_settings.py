"""handlers/startup.py's Kopf settings for a node agent: API requests are retried as long as the apiserver is away."""

from __future__ import annotations

import collections.abc
import itertools

import kopf

from handlers.startup import EndlessBackoffs, WatchOnlyDiffBase


def test_request_retries_never_give_up_and_kopf_sees_no_limit() -> None:
    backoffs = EndlessBackoffs()
    assert isinstance(backoffs, collections.abc.Iterable)
    assert not isinstance(backoffs, collections.abc.Sized)  # Kopf counts the retries of a sized one, then fails
    assert list(itertools.islice(backoffs, 10)) == [1, 1, 2, 3, 5, 8, 13, 13, 13, 13]
    assert list(itertools.islice(backoffs, 3)) == [1, 1, 2]  # each request starts over


def test_no_diff_base_is_built_and_only_event_handlers_watch_pods() -> None:
    """WatchOnlyDiffBase skips Kopf's per-event deep copy: right only while no handler diffs pods (on.create,
    on.update, on.field, daemons, timers would need the essence, and would write annotations a node may not)."""
    import handlers.pods  # noqa: F401 - registers the handlers

    registry = kopf.get_default_registry()
    watching = registry._watching.get_all_handlers()
    assert any(h.selector is not None and h.selector.any_name == "pods" for h in watching)
    assert not registry._changing.get_all_handlers()  # no change handler on any resource
    assert not registry._spawning.get_all_handlers()  # nor daemons and timers
    storage = WatchOnlyDiffBase()
    body = kopf.Body({"metadata": {"name": "p", "uid": "u"}, "spec": {"containers": [{"name": "c"}]}})
    assert storage.build(body=body) == {} and storage.fetch(body=body) is None
