"""What a pod worker keeps of the watch's pod: everything but metadata.managedFields."""

from __future__ import annotations

from kopflet.pods.workers import _kept


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
