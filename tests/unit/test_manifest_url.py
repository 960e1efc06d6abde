"""The HTTP static pod source: --manifest-url's settings, the pure decoding of an answer (static_pods.read_url) and
the poller (http_source.ManifestURLSource) against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web

from kopflet.config import configz, http_source, settings, static_pods
from kopflet.config.file_source import StaticPodSource
from kopflet.config.http_source import FAILED_REASON, ManifestURLSource, request_headers
from kopflet.config.static_pods import StaticPod
from kopflet.paths import Layout
from kopflet.pods.housekeeping import Housekeeping

URL = "http://10.0.0.1/pods"


def pod(name: str, image: str = "busybox", **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **meta},
            "spec": {"containers": [{"name": "c", "image": image}]}}


def pod_list(*items: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PodList", "items": list(items)}


def dump(doc: Any) -> bytes:
    return json.dumps(doc).encode()


# ------------------------------------------------------------------------------------------- settings

@pytest.mark.parametrize(("argv", "expected"), [
    (["--manifest-url-header=a:hello,b:again,c:world", "--manifest-url-header", "b:beautiful"],
     {"a": ("hello",), "b": ("again", "beautiful"), "c": ("world",)}),
    (["--manifest-url-header= Authorization : Bearer x:y ,"], {"Authorization": ("Bearer x:y",)}),
    ([], {}),
])
def test_manifest_url_header_flag(argv: list[str], expected: dict[str, tuple[str, ...]]) -> None:
    cfg = settings.load(["--manifest-url=http://h/p", *argv], {}, "node", lambda _: "")
    assert cfg.static_pod_url == "http://h/p" and dict(cfg.static_pod_url_header) == expected


def test_manifest_url_header_flag_needs_pairs() -> None:
    with pytest.raises(settings.ConfigError, match="--manifest-url-header: malformed pair, expect string:string"):
        settings.load(["--manifest-url-header=novalue"], {}, "node", lambda _: "")


def test_manifest_url_header_flag_replaces_the_files() -> None:
    body = ("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodURL: http://f/p\n"
            "staticPodURLHeader: {a: [x], b: [y]}\nhttpCheckFrequency: 5s\n")
    cfg = settings.load(["--config=/c", "--manifest-url-header=b:z"], {}, "node", lambda _: body)
    assert (cfg.static_pod_url, dict(cfg.static_pod_url_header), cfg.http_check_frequency) == \
        ("http://f/p", {"b": ("z",)}, 5.0)
    body = configz.kubelet_configuration(cfg)
    assert (body["staticPodURL"], body["staticPodURLHeader"]) == ("http://f/p", {"b": ["z"]})
    assert list(body).index("staticPodURL") == list(body).index("httpCheckFrequency") + 1  # v1beta1's order


@pytest.mark.parametrize(("text", "message"), [
    ("staticPodURLHeader: {a: x}\n", 'field "staticPodURLHeader": expected a list of strings, got "x" for "a"'),
    ("staticPodURLHeader: [a]\n", 'field "staticPodURLHeader": expected a mapping of lists of strings'),
])
def test_static_pod_url_header_field_is_checked(text: str, message: str) -> None:
    body = f"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{text}"
    with pytest.raises(settings.ConfigError, match=message.replace("[", r"\[")):
        settings.load(["--config=/c"], {}, "node", lambda _: body)


def test_request_headers_are_canonical_and_keep_order() -> None:
    assert request_headers({"x-token": ("a", "b"), "accept": ("*/*",)}) == [
        ("Accept", "*/*"), ("X-Token", "a"), ("X-Token", "b")]


# ------------------------------------------------------------------------------------------- pure decoding

def read(data: bytes, status: int = 200, reason: str = "OK", **kwargs: Any) -> static_pods.URLRead:
    return static_pods.read_url(URL, status, reason, data, "node-a", "2026-01-01T00:00:00Z", **kwargs)


def names(result: static_pods.URLRead) -> list[str] | None:
    return None if result.pods is None else [p.name for p in result.pods]


YAML_POD = b"apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers: [{name: c, image: busybox}]\n"


@pytest.mark.parametrize(("data", "expected"), [
    (dump(pod("web")), ["web-node-a"]),
    (YAML_POD, ["web-node-a"]),
    (dump(pod_list(pod("a"), pod("b", namespace="kube-system"))), ["a-node-a", "b-node-a"]),
    (b"apiVersion: v1\nkind: PodList\nitems:\n- metadata: {name: a}\n  spec: {containers: [{name: c, image: i}]}\n",
     ["a-node-a"]),
    (dump(pod_list()), []),
    # a YAML stream: only the first document counts (go-yaml v2's Unmarshal), the rest is ignored, broken or not
    (YAML_POD + b"---\napiVersion: v1\nkind: Pod\nmetadata: {name: second}\n---\n{{{", ["web-node-a"]),
    # a name twice in a list: the later one is left out (filterInvalidPods)
    (dump(pod_list(pod("a"), pod("a", image="pause"))), ["a-node-a"]),
])
def test_good_answers(data: bytes, expected: list[str]) -> None:
    result = read(data)
    assert (names(result), result.error, result.data, result.data_error) == (expected, "", data, "")


@pytest.mark.parametrize(("data", "error"), [
    (dump(pod("")), "invalid pod: name is needed for the pod"),
    (dump({**pod("x"), "spec": {}}), "invalid pod: [spec.containers: Required value]"),
    (dump(pod_list(pod("a"), {"metadata": {}, "spec": {"containers": [{"name": "c", "image": "i"}]}})),
     "invalid pod: name is needed for the pod"),  # one bad item: the whole list is refused
    (dump({**pod("x"), "spec": {"containers": [{"name": "c", "image": "i",
                                                "securityContext": {"procMount": "Unmasked"}}]}}),
     'invalid pod: [spec.containers[0].securityContext.procMount: Invalid value: "Unmasked": `hostUsers` must be '
     'false to use `Unmasked`]'),
    (dump({**pod("x"), "spec": {"hostUsers": False, "hostNetwork": True, "containers": [{"name": "c", "image": "i"}]}}),
     "invalid pod: [spec.hostNetwork: Forbidden: when `hostUsers` is false]"),
    (b"kind: Service\napiVersion: v1\nmetadata: {name: s}\n",
     f"{URL}: received 'kind: Service\napiVersion: v1\nmetadata: {{name: s}}\n', but couldn't parse as single "
     "(invalid pod: &core.Service{...}) or multiple pods (invalid pods list: &core.Service{...})"),
    (b'{"metadata": {"name": "x"}}',
     f"""{URL}: received '{{"metadata": {{"name": "x"}}}}', but couldn't parse as single (Object 'Kind' is """
     """missing in '{"metadata": {"name": "x"}}') or multiple pods (Object 'Kind' is missing in """
     """'{"metadata": {"name": "x"}}')"""),
    (b"apiVersion: apps/v1\nkind: Pod\n",
     f"{URL}: received 'apiVersion: apps/v1\nkind: Pod\n', but couldn't parse as single (no kind \"Pod\" is "
     "registered for version \"apps/v1\" in scheme \"pkg/api/legacyscheme/scheme.go:30\") or multiple pods (no kind "
     "\"Pod\" is registered for version \"apps/v1\" in scheme \"pkg/api/legacyscheme/scheme.go:30\")"),
    (b"a: [", "couldn't parse as single (yaml: "),
    (b"- 1\n- 2\n", "couldn't parse as single (couldn't get version/kind; json parse error: json: cannot unmarshal "
                    "array into Go value)"),
])
def test_bad_documents_keep_the_set_and_are_remembered(data: bytes, error: str) -> None:
    result = read(data, last=b"older")
    assert result.pods is None and error in result.error
    assert (result.data, result.data_error) == (data, result.error)
    # the same bad document again: not decoded again, still an error (never a success), the set still kept
    again = read(data, last=result.data, last_error=result.data_error)
    assert (again.pods, again.error, again.data) == (None, result.error, data)


@pytest.mark.parametrize(("status", "reason", "data", "expected"), [
    (500, "Internal Server Error", b"boom", (None, f"{URL}: 500 Internal Server Error", b"last")),
    (404, "Not Found", dump(pod("x")), (None, f"{URL}: 404 Not Found", b"last")),
    (200, "OK", b"", ((), f"zero-length data received from {URL}", b"")),  # an empty set, and an error
    (200, "OK", b"last", (None, "", b"last")),  # unchanged: nothing sent
    (200, "OK", b"x" * static_pods.MAX_CONFIG_LENGTH, (None, "the read limit is reached", b"last")),
])
def test_answers_that_send_nothing_or_empty(status: int, reason: str, data: bytes, expected: tuple[Any, ...]) -> None:
    result = read(data, status, reason, last=b"last")
    assert (result.pods, result.error, result.data) == expected


def test_url_pods_are_defaulted_for_source_http() -> None:
    [web_pod] = read(dump(pod("web", annotations={"a": "b"}))).pods or []
    meta = web_pod.body["metadata"]
    assert (web_pod.name, web_pod.namespace, web_pod.path) == ("web-node-a", "default", URL)
    assert meta["annotations"] == {"a": "b", "kubernetes.io/config.hash": web_pod.uid,
                                   "kubernetes.io/config.source": "http",
                                   "kubernetes.io/config.seen": "2026-01-01T00:00:00Z"}
    assert meta["uid"] == web_pod.uid and web_pod.body["spec"]["nodeName"] == "node-a"
    assert "tolerations" not in web_pod.body["spec"]  # applyDefaults adds the NoExecute toleration to a file's only
    # a PodList's items become Pods
    [item] = read(dump(pod_list({"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}))
                  ).pods or []
    assert (item.body["apiVersion"], item.body["kind"]) == ("v1", "Pod")


def test_url_uid_is_the_pod_and_the_url_not_the_node() -> None:
    def uid(data: bytes, url: str = URL, node: str = "node-a") -> str:
        [p] = static_pods.read_url(url, 200, "OK", data, node, "t").pods or []
        return p.uid
    base = uid(dump(pod("web")))
    assert uid(dump(pod("web")), node="node-b") == base  # applyDefaults hashes "url:<url>", no host
    assert uid(dump(pod("web")), url="http://other/") != base
    assert uid(dump(pod("web", image="pause"))) != base
    assert uid(YAML_POD) == base  # the same pod in YAML
    assert static_pods.read_url(URL, 200, "OK", dump(pod("web")), "n", "t2").pods[0].uid == base  # type: ignore[index]


# ------------------------------------------------------------------------------------------- the poller

class Manager:
    """The static pod manager's apply, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, str]]] = []

    async def apply(self, source: str, found: Mapping[str, StaticPod]) -> None:
        self.calls.append((source, {p.name: p.uid for p in found.values()}))


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def node_event(self, type_: str, reason: str, message: str, uid: str = "") -> None:
        self.events.append((type_, reason, message, uid))


class Server:
    """A manifest server: `answer` is (status, body) or a delay in seconds before an answer."""

    def __init__(self) -> None:
        self.status, self.body, self.delay = 200, b"", 0.0
        self.requests: list[list[tuple[str, str]]] = []
        self.url = ""


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    state = Server()

    async def handle(request: web.Request) -> web.StreamResponse:
        state.requests.append(list(request.headers.items()))
        if state.delay:
            await asyncio.sleep(state.delay)
        return web.Response(status=state.status, body=state.body)

    app = web.Application()
    app.router.add_get("/pods", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    state.url = f"http://127.0.0.1:{port}/pods"
    yield state
    await runner.cleanup()


async def test_poller_hands_over_changes_only(server: Server) -> None:
    manager, recorder = Manager(), Recorder()
    source = ManifestURLSource(server.url, {"x-token": ("s3cret",), "X-Multi": ("1", "2")}, "node-a", 20.0,
                               manager.apply, recorder, lambda: "node-uid")
    try:
        # a pod
        server.body = dump(pod("web"))
        await source.poll()
        assert [(s, list(p)) for s, p in manager.calls] == [("http", ["web-node-a"])] and source.synced.is_set()
        first_uid = manager.calls[-1][1]["web-node-a"]
        # the headers arrived, canonical, every value
        sent = server.requests[-1]
        assert ("X-Token", "s3cret") in sent and [v for k, v in sent if k == "X-Multi"] == ["1", "2"]
        # unchanged: nothing handed over
        await source.poll()
        assert len(manager.calls) == 1
        # a change: a new UID
        server.body = dump(pod("web", image="pause"))
        await source.poll()
        assert manager.calls[-1][1]["web-node-a"] != first_uid
        # a list
        server.body = dump(pod_list(pod("web", image="pause"), pod("db")))
        await source.poll()
        assert sorted(manager.calls[-1][1]) == ["db-node-a", "web-node-a"]
        # a removal
        server.body = dump(pod_list(pod("db")))
        await source.poll()
        assert list(manager.calls[-1][1]) == ["db-node-a"]
        assert recorder.events == []
    finally:
        await source.close()


async def test_poller_keeps_the_last_good_set_and_says_why(server: Server, caplog: pytest.LogCaptureFixture) -> None:
    manager, recorder = Manager(), Recorder()
    source = ManifestURLSource(server.url, {}, "node-a", 20.0, manager.apply, recorder, lambda: "node-uid",
                               timeout=0.5)
    try:
        server.body = dump(pod("web"))
        await source.poll()
        assert len(manager.calls) == 1
        # a bad document: nothing handed over, logged and said once in a Node event
        server.body = dump(pod(""))
        caplog.set_level("INFO", logger="kopflet.config.http_source")
        await source.poll()
        await source.poll()
        assert len(manager.calls) == 1
        assert recorder.events == [("Warning", FAILED_REASON, "invalid pod: name is needed for the pod", "node-uid")]
        assert caplog.text.count("Failed to read pods from URL: invalid pod: name is needed for the pod") == 2
        # a 500
        server.status, server.body = 500, b"oops"
        await source.poll()
        assert recorder.events[-1][2] == f"{server.url}: 500 Internal Server Error" and len(manager.calls) == 1
        # a slow answer times out
        server.status, server.body, server.delay = 200, dump(pod("web")), 2.0
        await source.poll()
        assert recorder.events[-1][2] == (f'Get "{server.url}": context deadline exceeded (Client.Timeout exceeded '
                                          "while awaiting headers)")
        assert "Dropping verbosity of this message to V(4)" in caplog.text  # the fourth failure in a row
        assert len(manager.calls) == 1
        # the good document back: a change from the bad one, so handed over (the same UIDs: nothing restarts)
        server.delay = 0.0
        await source.poll()
        assert manager.calls[-1] == manager.calls[0] and "Successfully read pods from URL" in caplog.text
        # an empty answer: an empty set, and an error
        server.body = b""
        await source.poll()
        assert manager.calls[-1] == ("http", {}) and recorder.events[-1][2] == f"zero-length data received from " \
                                                                                 f"{server.url}"
        # and the old document back is handed over again
        server.body = dump(pod("web"))
        await source.poll()
        assert list(manager.calls[-1][1]) == ["web-node-a"]
    finally:
        await source.close()


async def test_poller_unreachable_url(unused_tcp_port: int) -> None:
    manager, recorder = Manager(), Recorder()
    url = f"http://127.0.0.1:{unused_tcp_port}/pods"
    source = ManifestURLSource(url, {}, "node-a", 20.0, manager.apply, recorder)
    try:
        await source.poll()
    finally:
        await source.close()
    assert recorder.events == [("Warning", FAILED_REASON,
                                f'Get "{url}": dial tcp 127.0.0.1:{unused_tcp_port}: connect: connection refused', "")]
    assert manager.calls == [] and not source.synced.is_set()


async def test_run_polls_every_period(server: Server) -> None:
    manager = Manager()
    server.body = dump(pod("web"))
    source = ManifestURLSource(server.url, {}, "node-a", 0.05, manager.apply)
    task = asyncio.create_task(source.run())
    try:
        for _ in range(100):
            if len(server.requests) >= 3:
                break
            await asyncio.sleep(0.02)
        assert len(server.requests) >= 3 and len(manager.calls) == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await source.close()


# ------------------------------------------------------------------------------------------- one manager, two sources

class Workers:
    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []

    def update(self, body: Mapping[str, Any]) -> None:
        self.log.append(("update", body["metadata"]["name"]))

    def deleted(self, body: Mapping[str, Any]) -> None:
        self.log.append(("deleted", body["metadata"]["name"]))

    def status_lost(self, uid: str) -> None:
        pass


class Api:
    async def list_pods(self, selector: str) -> list[dict[str, Any]]:
        return []


async def test_the_url_set_leaves_the_files_alone() -> None:
    workers = Workers()
    manager = StaticPodSource(settings.AgentConfig(node_name="node-a"), Api(), workers,  # type: ignore[arg-type]
                              lambda: "")
    file_pod = static_pods.static_pod("/m/f.yaml", json.dumps(pod("f")), "node-a", "t")
    await manager.apply("file", {file_pod.path: file_pod})
    [a, b] = read(dump(pod_list(pod("a"), pod("b")))).pods or []
    await manager.apply("http", {a.uid: a, b.uid: b})
    await manager.apply("http", {a.uid: a})  # b removed from the URL's list
    [a2] = read(dump(pod("a", image="pause"))).pods or []
    await manager.apply("http", {a2.uid: a2})  # a changed: a new pod
    assert workers.log == [("update", "f-node-a"), ("update", "a-node-a"), ("update", "b-node-a"),
                           ("deleted", "b-node-a"), ("deleted", "a-node-a"), ("update", "a-node-a")]
    assert sorted(p.name for p in manager.pods.values()) == ["a-node-a", "f-node-a"]
    await manager.apply("http", {})
    assert [p.name for p in manager.pods.values()] == ["f-node-a"]


async def test_housekeeping_waits_for_the_urls_first_answer(tmp_path: Path) -> None:
    """upstream sourcesReady: no orphan is removed while staticPodURL has not given its pods (after a restart, its
    pods still run and no worker has them yet)."""
    ready = False
    teardown = HkTeardown()
    keeper = Housekeeping(HkApi(), HkRelist(["url-pod"]), set(), teardown,  # type: ignore[arg-type]
                          Layout(str(tmp_path), pod_log_root=str(tmp_path / "logs")), "spec.nodeName=n",
                          sources_ready=lambda: ready)
    assert await keeper.cleanup_orphans() == 0 and teardown.pods == []
    ready = True
    assert await keeper.cleanup_orphans() == 1 and teardown.pods == ["url-pod"]


class HkRelist:
    def __init__(self, pods: list[str]) -> None:
        self.pods: dict[str, Any] = {uid: SimpleNamespace(namespace="ns", name=uid) for uid in pods}
        self.synced = asyncio.Event()
        self.synced.set()


class HkApi:
    async def list_pods(self, field_selector: str) -> list[dict[str, Any]]:
        return []


class HkTeardown:
    def __init__(self) -> None:
        self.pods: list[str] = []

    async def pod(self, uid: str, namespace: str = "", name: str = "") -> None:
        self.pods.append(uid)


@pytest.mark.parametrize(("url", "stripped", "public"), [
    ("http://h/pods", "http://h/pods", "http://h/pods"),
    ("http://u:s3cret@h:8/p?token=abc#f", "http://u:***@h:8/p?token=abc#f", "http://u:***@h:8/p"),
    ("https://u@h/p?sig=x", "https://u@h/p?sig=x", "https://u@h/p"),
])
def test_urls_in_errors_and_events(url: str, stripped: str, public: str) -> None:
    """Go's client shows a password as *** in its errors; the Node event, which anyone reading events sees, also
    drops the query (a signed URL's token)."""
    assert http_source.strip_password(url) == stripped
    assert http_source.public_url(url) == public


def test_the_event_does_not_quote_the_document() -> None:
    url, body = "http://u:pw@h/p?token=t", b"env: [{name: PASSWORD, value: hunter2}"
    error = f"{url}: received '{body.decode()}', but couldn't parse as single (x) or multiple pods (y)"
    message = http_source.event_message(error, url, body)
    assert "hunter2" not in message and "pw" not in message and "token" not in message
    assert message == f"http://u:***@h/p: received <{len(body)} bytes>, but couldn't parse as single (x) or " \
                      "multiple pods (y)"
    assert len(http_source.event_message("x" * 5000, url, None)) == http_source.MAX_EVENT_MESSAGE


@pytest.mark.parametrize(("url", "environ", "proxy"), [
    ("http://h/p", {}, None),
    ("http://h/p", {"HTTP_PROXY": "http://proxy:3128"}, "http://proxy:3128"),
    ("https://h/p", {"HTTP_PROXY": "http://proxy:3128"}, None),  # by scheme
    ("https://h/p", {"https_proxy": "http://proxy:3128"}, "http://proxy:3128"),
    ("http://h.example/p", {"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": ".example"}, None),
    ("http://localhost:8080/p", {"HTTP_PROXY": "http://proxy:3128"}, None),  # Go never proxies loopback
    ("http://127.0.0.1/p", {"HTTP_PROXY": "http://proxy:3128"}, None),
    ("http://[::1]/p", {"HTTP_PROXY": "http://proxy:3128"}, None),
])
def test_proxy_for(url: str, environ: dict[str, str], proxy: str | None) -> None:
    assert http_source.proxy_for(url, environ) == proxy


async def test_user_info_is_basic_auth_unless_an_authorization_header_is_set(server: Server) -> None:
    """Go's client: the URL's user info as basic auth, but a set Authorization header wins (aiohttp would refuse
    both at once, failing every read)."""
    server.body = dump(pod("web"))
    with_user = server.url.replace("http://", "http://u%40x:p%3Ass@")
    for headers, expected in (({}, "Basic dUB4OnA6c3M="), ({"Authorization": ("Bearer t",)}, "Bearer t")):
        manager = Manager()
        source = ManifestURLSource(with_user, headers, "node-a", 20.0, manager.apply, Recorder(), lambda: "uid")
        try:
            await source.poll()
        finally:
            await source.close()
        assert manager.calls, "the read failed"
        assert dict(server.requests[-1])["Authorization"] == expected
