"""The kubelet API's reviews against the real apiserver, asked as the node (system:node:<name>) like the agent:
TokenReviews of a real ServiceAccount token and of a bogus one, SubjectAccessReviews for the apiserver's
kubelet client identity (allowed, bound to system:kubelet-api-admin) and a plain ServiceAccount (denied), and
the HTTPS server itself with those real answers, reached with the apiserver's kubelet client certificate.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import kopf
import pytest

from devstack.layout import Layout
from handlers.configuring import connection_info
from kopflet.client.kubeapi import Credentials, KubeClient
from kopflet.config.settings import AgentConfig
from kopflet.server import auth_rules
from kopflet.server import server as srv
from kopflet.server.auth_reviews import Authenticator, Authorizer, authenticator_for, authorizer_for
from kopflet.server.auth_rules import UserInfo
from tests.conftest import Kubectl

pytestmark = pytest.mark.stack

APISERVER_KUBELET_CLIENT = "kube-apiserver-kubelet-client"


@pytest.fixture
async def kube(layout: Layout) -> AsyncIterator[KubeClient]:
    """The agent's own client, logged in with the node's kubeconfig exactly as handlers/startup.py does."""
    config = AgentConfig(node_name=layout.node_name, kubeconfig=str(layout.node_kubeconfig))
    info = await asyncio.to_thread(connection_info, config, logger=logging.getLogger("test"),
                                   settings=kopf.OperatorSettings())
    client = KubeClient(Credentials.from_kopf(info), user_agent=f"kopflet-test/{layout.node_name}")
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture(scope="module")
def sa_token(admin: Kubectl) -> str:
    return admin.run("create", "token", "default", "-n", "default", "--duration=10m").stdout.strip()


async def test_the_agent_speaks_as_the_node(kube: KubeClient, layout: Layout) -> None:
    review = await kube.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                                body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    assert review["status"]["userInfo"]["username"] == f"system:node:{layout.node_name}"


async def test_token_review_of_a_service_account_token(kube: KubeClient, sa_token: str) -> None:
    authenticator = Authenticator(kube, client_certificates=False, webhook=True)
    headers = {"authorization": [f"Bearer {sa_token}"]}
    user = await authenticator.authenticate(headers)
    assert user is not None
    assert user.name == "system:serviceaccount:default:default"
    assert user.uid
    assert {"system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"} <= set(user.groups)
    assert headers == {}  # the used credential is not passed on


@pytest.mark.parametrize("token", ["bogus", "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"])
async def test_bogus_token_is_unauthenticated(kube: KubeClient, token: str) -> None:
    answer = await kube.request("POST", "/apis/authentication.k8s.io/v1/tokenreviews",
                                body=auth_rules.token_review_body(token))
    assert auth_rules.user_from_token_review(answer)[0] is None
    authenticator = Authenticator(kube, client_certificates=False, webhook=True, anonymous=True)
    assert await authenticator.authenticate({"authorization": [f"Bearer {token}"]}) is None


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/exec/default/p/c"), ("GET", "/exec/default/p/c"), ("GET", "/containerLogs/default/p/c"),
    ("GET", "/stats/summary"), ("GET", "/metrics/resource"), ("GET", "/pods"), ("POST", "/portForward/default/p"),
])
async def test_the_apiserver_kubelet_client_is_allowed(kube: KubeClient, layout: Layout, method: str,
                                                       path: str) -> None:
    authorizer = Authorizer(kube)
    user = auth_rules.with_authenticated_group(UserInfo.of(APISERVER_KUBELET_CLIENT))
    attributes = auth_rules.request_attributes(method, path, layout.node_name)
    assert await authorizer.authorize(user, attributes[0]) is True


async def test_a_plain_service_account_is_denied(kube: KubeClient, layout: Layout, sa_token: str) -> None:
    user = await Authenticator(kube, client_certificates=False).authenticate({"authorization": [f"Bearer {sa_token}"]})
    assert user is not None
    authorizer = Authorizer(kube)
    for method, path in (("GET", "/pods"), ("POST", "/exec/default/p/c"), ("GET", "/stats/summary")):
        for attrs in auth_rules.request_attributes(method, path, layout.node_name):
            assert await authorizer.authorize(user, attrs) is False, (method, path, attrs.subresource)


async def test_an_unbound_user_is_denied_even_for_another_node(kube: KubeClient) -> None:
    attrs = auth_rules.request_attributes("GET", "/pods", "some-other-node")
    assert await Authorizer(kube).authorize(UserInfo.of(APISERVER_KUBELET_CLIENT), attrs[-1]) is True
    assert await Authorizer(kube).authorize(UserInfo.of("nobody-at-all"), attrs[-1]) is False


# --- the server with the real reviews ---------------------------------------------------------------------------

class Backend:
    def health_checks(self) -> tuple:
        return ()

    def pods(self) -> list[dict]:
        return []

    async def running_pods(self) -> list[dict]:
        return []

    def metrics(self) -> str:
        return ""

    async def resource_metrics(self) -> str:
        return ""

    async def probe_metrics(self) -> str:
        return ""

    async def cadvisor_metrics(self) -> str:
        return ""

    async def stats_summary(self) -> dict:
        return {}

    async def container_logs(self, *args: object, **kwargs: object) -> None:
        raise LookupError("no such container")

    async def exec_url(self, *args: object, **kwargs: object) -> str:
        raise LookupError("no such pod")

    async def attach_url(self, *args: object, **kwargs: object) -> str:
        raise LookupError("no such pod")

    async def port_forward_url(self, *args: object, **kwargs: object) -> str:
        raise LookupError("no such pod")


async def _get(port: int, path: str, *, token: str | None = None,
               cert: tuple[Path, Path] | None = None) -> tuple[int, str]:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    if cert is not None:
        context.load_cert_chain(*cert)
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    try:
        auth = f"Authorization: Bearer {token}\r\n" if token else ""
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{auth}\r\n".encode())
        data = await asyncio.wait_for(reader.read(), 30)
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body.decode()


@contextlib.asynccontextmanager
async def kubelet_api(kube: KubeClient, layout: Layout, tmp_path: Path) -> AsyncIterator[srv.Server]:
    config = AgentConfig(node_name=layout.node_name, address="127.0.0.1", port=0, root_dir=str(tmp_path),
                         client_ca_file=str(layout.pki / "ca.crt"))
    server = await srv.serve(config, Backend(), authenticator_for(config, kube), authorizer_for(config, kube),
                             addresses=["127.0.0.1"])
    try:
        yield server
    finally:
        await server.close()


async def test_server_with_real_reviews(kube: KubeClient, layout: Layout, sa_token: str, tmp_path: Path) -> None:
    client_cert = (layout.pki / "apiserver-kubelet-client.crt", layout.pki / "apiserver-kubelet-client.key")
    async with kubelet_api(kube, layout, tmp_path) as server:
        assert (tmp_path / "pki" / "kubelet.crt").exists()  # the self-signed serving pair under <root-dir>/pki
        assert await _get(server.port, "/pods", cert=client_cert) == (
            200, '{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[]}')
        assert await _get(server.port, "/containerLogs/default/p/c", cert=client_cert) == (404, "no such container")
        assert await _get(server.port, "/pods") == (401, "Unauthorized")
        assert await _get(server.port, "/pods", token="bogus") == (401, "Unauthorized")
        assert await _get(server.port, "/pods", token=sa_token) == (
            403, "Forbidden (user=system:serviceaccount:default:default, verb=get, resource=nodes, "
                 "subresource(s)=[pods proxy])\n")
