"""Static pods from --manifest-url (upstream's http pod source): a real HTTP server in the test serves the document;
the agent runs its pods with mirror pods, keeps the last good set on a bad document or an error answer, follows a
change and a removal, and sends the --manifest-url-header headers."""

from __future__ import annotations

import http.server
import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_pod_lifecycle import is_ready, runtime_containers, statuses, wait_gone, wait_pod
from tests.e2e.test_static_pods import manifest, mirror_hash


class Manifests:
    """What the server answers (`status`, `body`) and the headers of every request it got."""

    def __init__(self) -> None:
        self.status = 200
        self.body = b'{"apiVersion": "v1", "kind": "PodList", "items": []}'
        self.headers: list[dict[str, str]] = []
        self.lock = threading.Lock()


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[Manifests, str]]:
    state = Manifests()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with state.lock:
                state.headers.append({k.lower(): v for k, v in self.headers.items()})
                status, body = state.status, state.body
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}/pods"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def url_agent(layout: Layout, served: tuple[Manifests, str],
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    _, url = served
    a = Agent(layout, tmp_path_factory.mktemp("agent") / "agent.log",
              env={"KOPFLET_ARGS": f"--manifest-url={url} --manifest-url-header=X-Token:e2e "
                                   "--http-check-frequency=2s"})
    a.start()
    a.wait_for(r"Activity 'start_agent' succeeded")
    yield a
    a.stop()


def serve(state: Manifests, document: str | bytes, status: int = 200) -> None:
    with state.lock:
        state.body = document.encode() if isinstance(document, str) else document
        state.status = status


def pod_list(*pods: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "PodList", "items": [json.loads(p) for p in pods]})


def newest_node_event(admin: Kubectl, node: str, reason: str, text: str, timeout: float = 30) -> dict[str, Any]:
    """The node's newest `reason` event (by its time, not the list's order: a long-lived stack holds older ones),
    once its message has `text`; the event is posted a little after the log line."""
    def when(event: dict[str, Any]) -> str:
        return event.get("lastTimestamp") or event.get("eventTime") or event["metadata"]["creationTimestamp"]

    deadline = time.monotonic() + timeout
    while True:
        events = admin.json("get", "events", "-A", "--field-selector",
                            f"involvedObject.kind=Node,involvedObject.name={node},reason={reason}")["items"]
        newest = max(events, key=when) if events else None
        if newest is not None and text in newest["message"]:
            return newest
        assert time.monotonic() < deadline, f"no {reason} event saying {text!r}; the newest: {newest}"
        time.sleep(1)


def wait_containers_gone(layout: Layout, config_hash: str) -> None:
    deadline = time.monotonic() + 20
    while runtime_containers(layout, config_hash) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert runtime_containers(layout, config_hash) == []


def test_pods_from_a_url(url_agent: Agent, served: tuple[Manifests, str], admin: Kubectl, layout: Layout) -> None:
    state, url = served
    name = f"url-{uuid.uuid4().hex[:6]}"
    mirror_name = f"{name}-{layout.node_name}"
    serve(state, manifest(name, "sleep 3600"))

    pod = wait_pod(admin, "default", mirror_name, is_ready, timeout=60, what="a Ready mirror pod")
    first_hash = mirror_hash(pod)
    assert first_hash and pod["metadata"]["annotations"]["kubernetes.io/config.source"] == "http"
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "Node"
    with state.lock:
        assert any(h.get("x-token") == "e2e" for h in state.headers), state.headers[-1:]
    # upstream adds the toleration of every NoExecute taint (no key) to file pods only; the apiserver's
    # DefaultTolerationSeconds still adds its keyed not-ready/unreachable ones
    assert not any(not t.get("key") and t.get("operator") == "Exists" and t.get("effect") == "NoExecute"
                   for t in pod["spec"].get("tolerations") or [])
    first_id = statuses(pod)["main"]["containerID"]

    # A bad document keeps the pod that runs, and says why in the log and in a Node event.
    serve(state, '{"apiVersion": "v1", "kind": "Pod", "metadata": {}}')
    url_agent.wait_for(r"Failed to read pods from URL: .*name is needed for the pod")
    assert newest_node_event(admin, layout.node_name, "FailedToReadPodsFromURL", "name is needed for the pod")
    serve(state, b"", status=500)
    url_agent.wait_for(rf"{url}: 500 Internal Server Error")
    time.sleep(3)
    assert statuses(admin.json("get", "pod", mirror_name, "-n", "default"))["main"]["containerID"] == first_id

    # A changed pod is a new pod; the old one leaves the runtime.
    v2 = manifest(name, "echo v2; sleep 3600")
    serve(state, v2)
    pod = wait_pod(admin, "default", mirror_name, lambda p: mirror_hash(p) not in ("", first_hash) and is_ready(p),
                   timeout=60, what="updated")
    second_hash, second_id = mirror_hash(pod), statuses(pod)["main"]["containerID"]
    assert second_id != first_id
    wait_containers_gone(layout, first_hash)

    # A list: the unchanged pod keeps its container, the new one starts.
    other = f"url-{uuid.uuid4().hex[:6]}"
    serve(state, pod_list(v2, manifest(other, "sleep 3600")))
    wait_pod(admin, "default", f"{other}-{layout.node_name}", is_ready, timeout=60, what="the second pod Ready")
    assert statuses(admin.json("get", "pod", mirror_name, "-n", "default"))["main"]["containerID"] == second_id

    # Removed from the document: the pod and its mirror go; an empty list takes the rest.
    serve(state, pod_list(manifest(other, "sleep 3600")))
    wait_gone(admin, "default", mirror_name, timeout=40)
    wait_containers_gone(layout, second_hash)
    serve(state, pod_list())
    wait_gone(admin, "default", f"{other}-{layout.node_name}", timeout=40)
