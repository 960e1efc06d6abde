"""What a pod worker keeps of the watch's pod: everything but metadata.managedFields; its parsed pod, as long as
the body's metadata and spec are the same objects."""

from __future__ import annotations

import pytest

from kopflet.api import spec
from kopflet.pods.workers import _kept, _Worker


def test_managed_fields_are_dropped_and_nothing_else() -> None:
    body = {"metadata": {"name": "web", "uid": "u", "resourceVersion": "7",
                         "managedFields": [{"manager": "kopflet", "operation": "Update", "subresource": "status"}]},
            "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Running"}}
    kept = _kept(body)
    assert kept == {"metadata": {"name": "web", "uid": "u", "resourceVersion": "7"},
                    "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Running"}}
    assert "managedFields" in body["metadata"]  # the caller's object is left alone


def test_a_body_without_managed_fields_is_kept_as_it_is() -> None:
    body = {"metadata": {"name": "web", "uid": "u"}, "spec": {}}
    assert _kept(body) is body
    odd = {"metadata": None}
    assert _kept(odd) is odd


def test_the_pod_is_parsed_again_only_for_new_metadata_or_spec() -> None:
    body = {"metadata": {"name": "web", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}, "status": {"phase": "Pending"}}
    worker = _Worker("u", body)
    pod = worker.parsed(body)
    assert pod == spec.pod_from_body(body)
    # a status written: a new body with the same metadata and spec
    assert worker.parsed({**body, "status": {"phase": "Running"}}) is pod
    # a watch event: new objects, parsed again (labels changed)
    relabeled = {**body, "metadata": {**body["metadata"], "labels": {"app": "web"}}}
    assert worker.parsed(relabeled).labels == {"app": "web"}
    respecced = {**relabeled, "spec": {"containers": [{"name": "d", "image": "busybox"}]}}
    assert [c.name for c in worker.parsed(respecced).spec.containers] == ["d"]
    broken = {**respecced, "spec": {"containers": "none"}}
    for _ in range(2):  # a body that does not parse raises every time, never a kept pod
        with pytest.raises(spec.SpecError):
            worker.parsed(broken)
    assert worker.parsed(respecced).spec.containers[0].name == "d"
