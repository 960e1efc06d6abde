"""``kopflet explain`` (handlers/explain.py): the command line, where the credentials come from, and the request
through the apiserver's node proxy against a small fake apiserver on 127.0.0.1 (plain HTTP, a kubeconfig naming it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from handlers import cli
from handlers import explain as command
from kopflet.client.kubeapi import KubeApiError

# ------------------------------------------------------------------------------------------- the command line


@pytest.mark.parametrize(("argv", "expected"), [
    (["ns/web-1"], command.Args(namespace="ns", name="web-1")),
    (["web-1"], command.Args(namespace="default", name="web-1")),
    (["-n", "kube-system", "web-1"], command.Args(namespace="kube-system", name="web-1")),
    (["ns/web-1", "-n", "ignored"], command.Args(namespace="ns", name="web-1")),
    (["--node", "edge-1", "--kubeconfig", "/k", "-o", "json", "ns/web-1"],
     command.Args(namespace="ns", name="web-1", node="edge-1", kubeconfig="/k", output="json")),
])
def test_arguments(argv: list[str], expected: command.Args) -> None:
    assert command.parse_args(argv) == expected


@pytest.mark.parametrize(("argv", "message"), [
    ([], "the following arguments are required: <namespace>/<pod>"),
    (["a/b/c"], 'expected <namespace>/<pod>, got "a/b/c"'),
    (["/web-1"], 'expected <namespace>/<pod>, got "/web-1"'),
    (["ns/"], 'expected <namespace>/<pod>, got "ns/"'),
    (["ns/web-1", "-o", "yaml"], "invalid choice: 'yaml'"),
    (["ns/web-1", "--frobnicate"], "unrecognized arguments: --frobnicate"),
])
def test_a_bad_command_line_exits_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["explain", *argv]) == command.USAGE_ERROR
    out, err = capsys.readouterr()
    assert out == "" and message in err and err.startswith("usage: kopflet explain")


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["explain", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: kopflet explain")
    assert cli.main(["--help"]) == 0
    assert "kopflet explain <namespace>/<pod>" in capsys.readouterr().out


def test_where_the_credentials_are_looked_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = tmp_path / "a.kubeconfig", tmp_path / "b.kubeconfig"
    second.write_text("x")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert command.kubeconfig_path("/given", {"KUBECONFIG": str(second)}) == "/given"
    assert command.kubeconfig_path("", {"KUBECONFIG": f"{first}:{second}"}) == str(second)  # the first that exists
    assert command.kubeconfig_path("", {"KUBECONFIG": str(first)}) == ""  # set: ~/.kube/config is not read
    assert command.kubeconfig_path("", {}) == ""
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text("x")
    assert command.kubeconfig_path("", {}) == str(tmp_path / ".kube" / "config")


def test_without_credentials_it_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert command.main(["ns/web-1"], {}) == command.FAILED
    assert capsys.readouterr().err == ("kopflet explain: no credentials for the apiserver (--kubeconfig, KUBECONFIG, "
                                       "~/.kube/config or in-cluster)\n")
    (tmp_path / "bad").write_text("clusters: [")
    assert command.main(["--kubeconfig", str(tmp_path / "bad"), "ns/web-1"], {}) == command.FAILED
    assert f"unable to load kubeconfig: {tmp_path / 'bad'}: not valid YAML" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ the request, faked


class FakeClient:
    def __init__(self, pods: Mapping[str, Any], answer: str | KubeApiError = "decisions\n") -> None:
        self.pods, self.answer = pods, answer
        self.asked: list[tuple[str, Any]] = []

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.asked.append(("pod", f"{namespace}/{name}"))
        return self.pods.get(f"{namespace}/{name}")

    async def get_text(self, path: str, *, params: Mapping[str, str] | None = None) -> str:
        self.asked.append((path, dict(params or {})))
        if isinstance(self.answer, KubeApiError):
            raise self.answer
        return self.answer


BOUND = {"ns/web-1": {"spec": {"nodeName": "edge-1"}}, "ns/pending": {"spec": {}}}
PROXY = "/api/v1/nodes/edge-1/proxy/debug/pods/ns/web-1"
FORBIDDEN = 'nodes "edge-1" is forbidden: User "bob" cannot get resource "nodes/proxy"'


async def test_the_node_is_the_pods() -> None:
    client = FakeClient(BOUND)
    assert await command.fetch(client, command.Args(namespace="ns", name="web-1")) == "decisions\n"
    assert client.asked == [("pod", "ns/web-1"), (PROXY, {"format": "text"})]


async def test_a_node_given_is_asked_without_reading_the_pod() -> None:
    client = FakeClient({})
    await command.fetch(client, command.Args(namespace="ns", name="web 1", node="edge-1", output="json"))
    assert client.asked == [("/api/v1/nodes/edge-1/proxy/debug/pods/ns/web%201", {"format": "json"})]


@pytest.mark.parametrize(("name", "answer", "message"), [
    ("nope", "", "pod ns/nope not found"),
    ("pending", "", "pod ns/pending is not bound to a node yet: no agent has decided anything about it"),
    ("web-1", KubeApiError(404, "", 'pod "web-1" does not exist', "GET", PROXY),
     'node edge-1: pod "web-1" does not exist (is the pod on this node, and is its agent kopflet?)'),
    ("web-1", KubeApiError(403, "Forbidden", FORBIDDEN, "GET", PROXY), f"node edge-1: 403 Forbidden: {FORBIDDEN}"),
    ("web-1", KubeApiError(503, "ServiceUnavailable", "no endpoints", "GET", PROXY),
     "node edge-1: 503 ServiceUnavailable: no endpoints"),
])
async def test_clear_errors(name: str, answer: str | KubeApiError, message: str) -> None:
    with pytest.raises(command.ExplainError) as caught:
        await command.fetch(FakeClient(BOUND, answer), command.Args(namespace="ns", name=name))
    assert str(caught.value).startswith(message)


# ---------------------------------------------------------------------------------- against a fake apiserver


@contextlib.asynccontextmanager
async def apiserver() -> AsyncIterator[tuple[str, list[str]]]:
    seen: list[str] = []

    async def pod(request: web.Request) -> web.Response:
        seen.append(request.path_qs)
        if request.match_info["name"] != "web-1":
            return web.json_response({"kind": "Status", "reason": "NotFound",
                                      "message": f'pods "{request.match_info["name"]}" not found'}, status=404)
        return web.json_response({"kind": "Pod", "spec": {"nodeName": "edge-1"}})

    async def proxy(request: web.Request) -> web.Response:
        seen.append(request.path_qs)
        if request.match_info["node"] == "locked":
            return web.json_response({"kind": "Status", "reason": "Forbidden", "message": "nodes \"locked\" is "
                                      "forbidden: User \"bob\" cannot get resource \"nodes/proxy\""}, status=403)
        if request.match_info["name"] != "web-1":
            return web.Response(status=404, text=f'pod "{request.match_info["name"]}" does not exist')
        return web.Response(text=f"decisions of {request.match_info['ns']}/{request.match_info['name']} "
                                 f"as {request.query['format']}\n")

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{ns}/pods/{name}", pod)
    app.router.add_get("/api/v1/nodes/{node}/proxy/debug/pods/{ns}/{name}", proxy)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


def kubeconfig(tmp_path: Path, server: str) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    return str(path)


@pytest.mark.parametrize(("argv", "status", "out", "err"), [
    (["ns/web-1"], 0, "decisions of ns/web-1 as text\n", ""),
    (["-o", "json", "ns/web-1"], 0, "decisions of ns/web-1 as json\n", ""),
    (["ns/other", "--node", "edge-1"], 1, "",
     'kopflet explain: node edge-1: pod "other" does not exist (is the pod on this node, and is its agent kopflet?)\n'),
    (["ns/web-1", "--node", "locked"], 1, "",
     'kopflet explain: node locked: 403 Forbidden: nodes "locked" is forbidden: User "bob" cannot get resource '
     '"nodes/proxy"\n'),
    (["ns/gone"], 1, "", "kopflet explain: pod ns/gone not found\n"),
])
async def test_kopflet_explain_through_the_apiserver(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     argv: list[str], status: int, out: str, err: str) -> None:
    async with apiserver() as (server, seen):
        config = kubeconfig(tmp_path, server)
        assert await asyncio.to_thread(cli.main, ["explain", "--kubeconfig", config, *argv]) == status
    assert capsys.readouterr() == (out, err)
    assert seen  # it asked


async def test_an_unreachable_apiserver(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with apiserver() as (server, _):
        pass  # closed again: nothing listens on the port any more
    config = kubeconfig(tmp_path, server)
    assert await asyncio.to_thread(command.main, ["--kubeconfig", config, "ns/web-1"], {}) == command.FAILED
    assert capsys.readouterr().err.startswith(f"kopflet explain: cannot reach the apiserver at {server}: ")
