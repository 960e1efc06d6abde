"""The kubelet API's authentication and authorization: the pure mapping (kopflet.server.auth_rules) and the cached
TokenReview / SubjectAccessReview clients (kopflet.server.auth_reviews) against a fake apiserver client.

The attribute table follows upstream's pkg/kubelet/server/auth_test.go with KubeletFineGrainedAuthz on (GA and
locked in v1.37).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
from typing import Any

import pytest

from kopflet.client.kubeapi import KubeApiError
from kopflet.config.settings import AgentConfig
from kopflet.server import auth_reviews as io_auth
from kopflet.server import auth_rules
from kopflet.server.auth_rules import ANONYMOUS, Attributes, Decision, UserInfo

NODE = "node-1"

# --- request_attributes -----------------------------------------------------------------------------------------

PATHS = {
    "/attach/ns/pod/c": ["proxy"],
    "/attach/ns/pod/uid/c": ["proxy"],
    "/checkpoint/ns/pod/c": ["checkpoint"],
    "/configz": ["configz", "proxy"],
    "/flagz": ["configz"],
    "/statusz": ["statusz"],
    "/containerLogs/ns/pod/c": ["proxy"],
    "/debug/flags/v": ["proxy"],
    "/debug/pprof/heap": ["proxy"],
    "/debug/pods/ns/pod": ["proxy"],  # kopflet explain: upstream's default for a path without a subresource
    "/exec/ns/pod/c": ["proxy"],
    "/exec/ns/pod/uid/c": ["proxy"],
    "/healthz": ["healthz", "proxy"],
    "/healthz/device-plugin": ["healthz", "proxy"],
    "/healthz/log": ["healthz", "proxy"],
    "/healthz/ping": ["healthz", "proxy"],
    "/healthz/syncloop": ["healthz", "proxy"],
    "/logs/": ["log"],
    "/logs": ["log"],
    "/logs/syslog": ["log"],
    "/metrics": ["metrics"],
    "/metrics/slis": ["metrics"],
    "/metrics/cadvisor": ["metrics"],
    "/metrics/probes": ["metrics"],
    "/metrics/resource": ["metrics"],
    "/pods": ["pods", "proxy"],
    "/pods/": ["pods", "proxy"],
    "/allocatedPods": ["pods", "proxy"],
    "/portForward/ns/pod": ["proxy"],
    "/portForward/ns/pod/uid": ["proxy"],
    "/run/ns/pod/c": ["proxy"],
    "/runningpods/": ["pods", "proxy"],
    "/runningpods": ["pods", "proxy"],
    "/stats/": ["stats"],
    "/stats": ["stats"],
    "/stats/summary": ["stats"],
    # Prefixes only match whole segments.
    "/statsfoo": ["proxy"],
    "/podsfoo": ["proxy"],
    "/metricsfoo": ["proxy"],
    "/healthzz": ["proxy"],
    "/": ["proxy"],
    "/unknown/path": ["proxy"],
}


@pytest.mark.parametrize(("path", "subresources"), PATHS.items())
@pytest.mark.parametrize(("method", "verb"), [
    ("POST", "create"), ("GET", "get"), ("PUT", "update"), ("PATCH", "patch"), ("DELETE", "delete"),
    ("HEAD", ""), ("OPTIONS", ""),  # upstream maps no other method: an empty verb matches no RBAC rule
])
def test_request_attributes(method: str, verb: str, path: str, subresources: list[str]) -> None:
    assert auth_rules.request_attributes(method, path, NODE) == [
        Attributes(verb=verb, subresource=sub, name=NODE, path=path, resource="nodes", api_group="",
                   api_version="v1", namespace="") for sub in subresources]


@pytest.mark.parametrize(("subpath", "path", "expected"), [
    ("", "", True), ("foo", "foo", True), ("/foo", "/foo", True), ("/foo/", "/foo/", True),
    ("/foo/bar", "/foo/bar", True), ("/foo", "/", True), ("/foo/", "/", True), ("/foo/bar", "/", True),
    ("/foo/", "/foo", True), ("/foo/bar", "/foo", True),
    ("/foo", "/bar", False), ("/foo", "/foobar", False), ("/foobar", "/foo", False),
])
def test_is_subpath(subpath: str, path: str, expected: bool) -> None:  # upstream's TestIsSubPath
    assert auth_rules.is_subpath(subpath, path) is expected


# --- messages ---------------------------------------------------------------------------------------------------

def test_forbidden_message_lists_every_subresource_tried() -> None:
    user = UserInfo.of("system:anonymous")
    attrs = auth_rules.request_attributes("GET", "/pods", NODE)
    assert auth_rules.forbidden_message(user, attrs) == (
        "Forbidden (user=system:anonymous, verb=get, resource=nodes, subresource(s)=[pods proxy])\n")
    attrs = auth_rules.request_attributes("POST", "/exec/ns/p/c", NODE)
    assert auth_rules.forbidden_message(UserInfo.of("alice"), attrs) == (
        "Forbidden (user=alice, verb=create, resource=nodes, subresource(s)=[proxy])\n")
    assert auth_rules.forbidden_message(user, []) == (
        "Authorization error: could not determine attributes for request")


def test_authorization_error_message() -> None:
    attrs = auth_rules.request_attributes("GET", "/stats/summary", NODE)[0]
    assert auth_rules.authorization_error_message(UserInfo.of("bob"), attrs) == (
        "Authorization error (user=bob, verb=get, resource=nodes, subresource=stats)")


# --- SubjectAccessReview ----------------------------------------------------------------------------------------

def test_sar_body() -> None:
    user = UserInfo.of("alice", uid="u-1", groups=["dev", "system:authenticated"], extra={"scopes": ["a", "b"]})
    attrs = auth_rules.request_attributes("GET", "/stats/summary", NODE)[0]
    assert auth_rules.sar_body(user, attrs) == {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": "alice", "uid": "u-1", "groups": ["dev", "system:authenticated"],
                 "extra": {"scopes": ["a", "b"]},
                 "resourceAttributes": {"verb": "get", "version": "v1", "resource": "nodes",
                                        "subresource": "stats", "name": NODE}},
    }


def test_sar_body_leaves_empty_fields_out() -> None:
    attrs = auth_rules.request_attributes("HEAD", "/", NODE)[0]
    assert auth_rules.sar_body(UserInfo.of("x"), attrs)["spec"] == {
        "user": "x", "resourceAttributes": {"version": "v1", "resource": "nodes", "subresource": "proxy",
                                            "name": NODE}}


@pytest.mark.parametrize(("status", "decision"), [
    ({"allowed": True}, Decision.ALLOW),
    ({"allowed": False, "denied": True, "reason": "no"}, Decision.DENY),
    ({"allowed": False}, Decision.NO_OPINION),
    ({}, Decision.NO_OPINION),
])
def test_sar_decision(status: dict[str, Any], decision: Decision) -> None:
    assert auth_rules.sar_decision({"status": status}) is decision


def test_sar_decision_allowed_and_denied_is_an_error() -> None:
    with pytest.raises(ValueError, match="both allow and deny"):
        auth_rules.sar_decision({"status": {"allowed": True, "denied": True}})


# --- authentication ---------------------------------------------------------------------------------------------

def subject(*pairs: tuple[str, str]) -> tuple[tuple[tuple[str, str], ...], ...]:
    return tuple(((name, value),) for name, value in pairs)


@pytest.mark.parametrize(("subj", "name", "groups"), [
    (subject(("commonName", "system:node:vm"), ("organizationName", "system:nodes")), "system:node:vm",
     ("system:nodes",)),
    (subject(("organizationName", "a"), ("organizationName", "b"), ("commonName", "kube-apiserver-kubelet-client")),
     "kube-apiserver-kubelet-client", ("a", "b")),
    (subject(("countryName", "DE"), ("commonName", "solo")), "solo", ()),
    ((((("commonName", "multi"), ("organizationName", "g1")),)), "multi", ("g1",)),  # a multi-valued RDN
])
def test_user_from_certificate(subj: Any, name: str, groups: tuple[str, ...]) -> None:
    user = auth_rules.user_from_certificate(subj)
    assert user is not None
    assert (user.name, user.groups, user.uid, dict(user.extra)) == (name, groups, "", {})


@pytest.mark.parametrize("subj", [None, (), subject(("organizationName", "system:masters"))])
def test_certificate_without_common_name_is_no_user(subj: Any) -> None:
    assert auth_rules.user_from_certificate(subj) is None


def test_certificate_credential_id() -> None:
    der = b"not really DER"
    user = auth_rules.user_from_certificate(subject(("commonName", "x")), der)
    assert user is not None
    assert dict(user.extra) == {auth_rules.CREDENTIAL_ID_KEY: (f"X509SHA256={hashlib.sha256(der).hexdigest()}",)}


@pytest.mark.parametrize(("user", "groups"), [
    (UserInfo.of("alice", groups=["dev"]), ("dev", "system:authenticated")),
    (UserInfo.of("alice"), ("system:authenticated",)),
    (UserInfo.of("alice", groups=["system:authenticated", "dev"]), ("system:authenticated", "dev")),
    (UserInfo.of("odd", groups=["system:unauthenticated"]), ("system:unauthenticated",)),
    (ANONYMOUS, ("system:unauthenticated",)),
])
def test_with_authenticated_group(user: UserInfo, groups: tuple[str, ...]) -> None:
    assert auth_rules.with_authenticated_group(user).groups == groups


@pytest.mark.parametrize(("header", "token"), [
    ("Bearer abc", "abc"), ("bearer abc", "abc"), ("BEARER abc", "abc"), ("  Bearer abc  ", "abc"),
    ("Bearer abc def", "abc"),  # upstream takes the second field
    ("Bearer  abc", None),  # a space before the token: ignored (with a warning upstream)
    ("Bearer", None), ("Bearer ", None), ("Basic dXNlcg==", None), ("", None), (None, None), ("abc", None),
])
def test_bearer_token(header: str | None, token: str | None) -> None:
    assert auth_rules.bearer_token(header) == token


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize(("headers", "token", "others"), [
    ([f"{auth_rules.BEARER_PROTOCOL_PREFIX}{b64('tok?en>')}, v4.channel.k8s.io"], "tok?en>", ["v4.channel.k8s.io"]),
    (["v4.channel.k8s.io", f"{auth_rules.BEARER_PROTOCOL_PREFIX}{b64('t')}"], "t", ["v4.channel.k8s.io"]),
    (["v4.channel.k8s.io, channel.k8s.io"], None, ["v4.channel.k8s.io", "channel.k8s.io"]),
    ([], None, []),
    ([f"{auth_rules.BEARER_PROTOCOL_PREFIX}, x"], None, ["x"]),  # an empty token is no token
])
def test_websocket_token(headers: list[str], token: str | None, others: list[str]) -> None:
    assert auth_rules.websocket_token(headers) == (token, others)


NOT_UTF8 = base64.urlsafe_b64encode(b"\xff\xfe").decode().rstrip("=")


@pytest.mark.parametrize(("headers", "message"), [
    ([f"{auth_rules.BEARER_PROTOCOL_PREFIX}{b64('a')}, {auth_rules.BEARER_PROTOCOL_PREFIX}{b64('b')}, x"],
     "multiple"),
    ([f"{auth_rules.BEARER_PROTOCOL_PREFIX}{b64('a')}=, x"], "encoding"),
    ([f"{auth_rules.BEARER_PROTOCOL_PREFIX}a+b/, x"], "encoding"),
    ([f"{auth_rules.BEARER_PROTOCOL_PREFIX}{NOT_UTF8}, x"], "invalid base64.bearer.authorization token"),
    ([f"{auth_rules.BEARER_PROTOCOL_PREFIX}{b64('a')}"], "missing additional subprotocol"),
])
def test_websocket_token_errors(headers: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        auth_rules.websocket_token(headers)


def test_token_review_body() -> None:
    assert auth_rules.token_review_body("t") == {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "t"}}
    assert auth_rules.token_review_body("t", ["api"])["spec"] == {"token": "t", "audiences": ["api"]}


@pytest.mark.parametrize(("status", "user", "error"), [
    ({"authenticated": True, "user": {"username": "system:serviceaccount:ns:sa", "uid": "u",
                                      "groups": ["system:serviceaccounts"], "extra": {"k": ["v"]}}},
     UserInfo.of("system:serviceaccount:ns:sa", "u", ["system:serviceaccounts"], {"k": ["v"]}), ""),
    ({"authenticated": False}, None, ""),
    ({"authenticated": False, "error": "token expired"}, None, "token expired"),
    ({}, None, ""),
])
def test_user_from_token_review(status: dict[str, Any], user: UserInfo | None, error: str) -> None:
    assert auth_rules.user_from_token_review({"status": status}) == (user, error)


# --- kopflet.server.auth_reviews: the cached reviews -------------------------------------------------------------

class FakeKube:
    """Answers reviews from functions of the request body and counts the calls."""

    def __init__(self, tokens: dict[str, Any] | None = None, allowed: set[tuple[str, str, str]] | None = None,
                 fail: BaseException | None = None, delay: float = 0.0) -> None:
        self.tokens, self.allowed, self.fail, self.delay = tokens or {}, allowed or set(), fail, delay
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def request(self, method: str, path: str, *, body: Any = None) -> dict[str, Any]:
        assert method == "POST"
        self.calls.append((path, body))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        if path == io_auth.TOKEN_REVIEWS:
            return {**body, "status": self.tokens.get(body["spec"]["token"], {"authenticated": False})}
        spec = body["spec"]
        key = (spec["user"], spec["resourceAttributes"].get("verb", ""), spec["resourceAttributes"]["subresource"])
        return {**body, "status": {"allowed": key in self.allowed}}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


SA = {"authenticated": True, "user": {"username": "system:serviceaccount:default:sa", "groups": ["system:sa"]}}


def authenticator(kube: FakeKube | None, clock: Clock | None = None, **kwargs: Any) -> io_auth.Authenticator:
    options: dict[str, Any] = {"client_certificates": True, "webhook": True, "anonymous": False, **kwargs}
    return io_auth.Authenticator(kube, clock=clock or Clock(), **options)


async def test_client_certificate_wins_and_gets_the_authenticated_group() -> None:
    kube = FakeKube()
    headers = {"authorization": ["Bearer whatever"]}
    user = await authenticator(kube).authenticate(headers, subject(("commonName", "kube-apiserver-kubelet-client")))
    assert user == UserInfo.of("kube-apiserver-kubelet-client", groups=["system:authenticated"])
    assert kube.calls == []


async def test_certificates_are_ignored_without_a_client_ca() -> None:
    auth = authenticator(FakeKube(), client_certificates=False, anonymous=True)
    assert await auth.authenticate({}, subject(("commonName", "alice"))) == ANONYMOUS


async def test_bearer_token_is_reviewed_cached_and_removed_from_the_headers() -> None:
    kube, clock = FakeKube(tokens={"good": SA}), Clock()
    auth = authenticator(kube, clock)
    headers = {"authorization": ["Bearer good"], "x-other": ["1"]}
    user = await auth.authenticate(headers)
    assert user == UserInfo.of("system:serviceaccount:default:sa", groups=["system:sa", "system:authenticated"])
    assert headers == {"x-other": ["1"]}
    assert kube.calls == [(io_auth.TOKEN_REVIEWS, auth_rules.token_review_body("good"))]
    assert await auth.authenticate({"authorization": ["Bearer good"]}) == user
    assert len(kube.calls) == 1
    clock.now += 121  # the 2m TTL is over
    assert await auth.authenticate({"authorization": ["Bearer good"]}) == user
    assert len(kube.calls) == 2


async def test_the_cache_never_holds_the_token() -> None:
    auth = authenticator(FakeKube(tokens={"secret-token": SA}))
    await auth.authenticate({"authorization": ["Bearer secret-token"]})
    keys = list(auth._cache._entries)
    assert len(keys) == 1 and b"secret-token" not in keys[0] and keys[0] != "secret-token"


async def test_bad_token_is_401_even_with_anonymous_and_the_no_is_cached() -> None:
    kube = FakeKube()
    auth = authenticator(kube, anonymous=True)
    assert await auth.authenticate({"authorization": ["Bearer bogus"]}) is None
    assert await auth.authenticate({"authorization": ["Bearer bogus"]}) is None
    assert len(kube.calls) == 1
    assert await auth.authenticate({}) == ANONYMOUS


async def test_review_errors_are_401_and_not_cached() -> None:
    kube = FakeKube(tokens={"t": {"authenticated": False, "error": "webhook down"}})
    auth = authenticator(kube)
    assert await auth.authenticate({"authorization": ["Bearer t"]}) is None
    assert await auth.authenticate({"authorization": ["Bearer t"]}) is None
    assert len(kube.calls) == 2
    kube.fail = KubeApiError(403, "Forbidden", "nope", "POST", io_auth.TOKEN_REVIEWS)
    assert await auth.authenticate({"authorization": ["Bearer t"]}) is None
    assert len(kube.calls) == 3  # a 403 is not retried


async def test_transient_review_failures_are_retried() -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    kube = FakeKube(fail=KubeApiError(503, "ServiceUnavailable", "later", "POST", io_auth.TOKEN_REVIEWS))
    with pytest.raises(KubeApiError):
        await io_auth.review(kube, io_auth.TOKEN_REVIEWS, {}, sleep=sleep)
    assert len(kube.calls) == 5 and len(slept) == 4
    assert all(d <= s <= d * 1.2 for d, s in zip(io_auth.RETRY_DELAYS, slept, strict=True))


async def test_concurrent_requests_share_one_token_review() -> None:
    kube = FakeKube(tokens={"t": SA}, delay=0.05)
    auth = authenticator(kube)
    users = await asyncio.gather(*(auth.authenticate({"authorization": ["Bearer t"]}) for _ in range(5)))
    assert len({u.name for u in users if u}) == 1 and len(kube.calls) == 1


async def test_websocket_protocol_token() -> None:
    kube = FakeKube(tokens={"t": SA})
    headers = {"connection": ["Upgrade"], "upgrade": ["websocket"],
               "sec-websocket-protocol": [f"{auth_rules.BEARER_PROTOCOL_PREFIX}{b64('t')}, v4.channel.k8s.io"]}
    user = await authenticator(kube).authenticate(headers)
    assert user is not None and user.name == "system:serviceaccount:default:sa"
    assert headers["sec-websocket-protocol"] == ["v4.channel.k8s.io"]
    # Not a websocket upgrade: the subprotocol header means nothing.
    assert await authenticator(kube).authenticate({"sec-websocket-protocol": headers["sec-websocket-protocol"]}) is None


async def test_anonymous_only_when_enabled() -> None:
    assert await authenticator(FakeKube()).authenticate({}) is None
    assert await authenticator(FakeKube(), anonymous=True).authenticate({}) == ANONYMOUS


async def test_without_the_webhook_tokens_are_not_looked_at() -> None:
    kube = FakeKube(tokens={"t": SA})
    auth = authenticator(None, webhook=False, anonymous=True)
    assert await auth.authenticate({"authorization": ["Bearer t"]}) == ANONYMOUS
    assert kube.calls == []


def test_authenticator_needs_a_method_and_a_client() -> None:
    with pytest.raises(ValueError, match="no authentication method configured"):
        io_auth.Authenticator(None, client_certificates=False, webhook=False, anonymous=False)
    with pytest.raises(ValueError, match="no client provided"):
        io_auth.Authenticator(None, client_certificates=True, webhook=True)


async def test_authorizer_webhook_caches_allowed_5m_and_denied_30s() -> None:
    kube, clock = FakeKube(allowed={("alice", "get", "stats")}), Clock()
    authz = io_auth.Authorizer(kube, clock=clock)
    stats = auth_rules.request_attributes("GET", "/stats/summary", NODE)[0]
    proxy = auth_rules.request_attributes("GET", "/exec/a/b/c", NODE)[0]
    alice = UserInfo.of("alice")
    assert await authz.authorize(alice, stats) is True
    assert await authz.authorize(alice, proxy) is False
    assert kube.calls[0] == (io_auth.SUBJECT_ACCESS_REVIEWS, auth_rules.sar_body(alice, stats))
    clock.now += 29
    assert (await authz.authorize(alice, stats), await authz.authorize(alice, proxy)) == (True, False)
    assert len(kube.calls) == 2
    clock.now += 2  # the denial expired, the permission did not
    assert (await authz.authorize(alice, stats), await authz.authorize(alice, proxy)) == (True, False)
    assert len(kube.calls) == 3
    clock.now += 300
    await authz.authorize(alice, stats)
    assert len(kube.calls) == 4


async def test_authorizer_errors_propagate_and_are_not_cached() -> None:
    kube = FakeKube(fail=KubeApiError(400, "BadRequest", "x", "POST", io_auth.SUBJECT_ACCESS_REVIEWS))
    authz = io_auth.Authorizer(kube)
    attrs = auth_rules.request_attributes("GET", "/pods", NODE)[0]
    for _ in range(2):
        with pytest.raises(KubeApiError):
            await authz.authorize(UserInfo.of("a"), attrs)
    assert len(kube.calls) == 2


async def test_always_allow_asks_nobody() -> None:
    authz = io_auth.Authorizer(None, mode="AlwaysAllow")
    assert await authz.authorize(ANONYMOUS, auth_rules.request_attributes("POST", "/exec/a/b/c", NODE)[0])


def test_builders_follow_the_config() -> None:
    kube = FakeKube()
    cfg = AgentConfig(node_name=NODE, client_ca_file="/ca.crt", anonymous_auth=True,
                      authentication_token_webhook_cache_ttl=7.0, authorization_mode="Webhook",
                      authorization_webhook_cache_authorized_ttl=9.0, authorization_webhook_cache_unauthorized_ttl=3.0)
    authn = io_auth.authenticator_for(cfg, kube)
    assert (authn.client_certificates, authn.webhook, authn.anonymous, authn.cache_ttl) == (True, True, True, 7.0)
    authz = io_auth.authorizer_for(cfg, kube)
    assert (authz.mode, authz.authorized_ttl, authz.unauthorized_ttl) == ("Webhook", 9.0, 3.0)
    assert io_auth.authorizer_for(AgentConfig(node_name=NODE, authorization_mode="AlwaysAllow"), None).mode == (
        "AlwaysAllow")


def test_ttl_cache_drops_the_oldest_when_full() -> None:
    cache: io_auth.TTLCache[int] = io_auth.TTLCache(max_entries=2, clock=Clock())
    cache.put("a", 1, 10)
    cache.put("b", 2, 10)
    cache.put("c", 3, 10)
    cache.put("zero", 4, 0)  # a TTL of 0 caches nothing
    assert (cache.get("a"), cache.get("b"), cache.get("c"), len(cache)) == ((False, None), (True, 2), (True, 3), 2)
