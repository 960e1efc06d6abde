"""Who may call the kubelet API, and for what: the pure half of the server's authentication and authorization.

It mirrors upstream v1.37: the x509 and bearer-token authenticators of ``k8s.io/apiserver`` (CN is the user,
O the groups; a ``TokenReview`` for a bearer token), the authenticated-group adder, and the kubelet's
``nodeAuthorizerAttributesGetter`` (``pkg/kubelet/server/auth.go``), which turns a request into
``SubjectAccessReview`` attributes on ``nodes/<subresource>``. Since ``KubeletFineGrainedAuthz`` is GA and
locked on in v1.37, ``/pods``, ``/runningpods/``, ``/healthz`` and ``/configz`` are first checked against their
own subresource and then against ``proxy``: either one allows the request.

Nothing here does I/O; ``kopflet/server/auth_reviews.py`` sends the reviews and caches the answers.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import enum
import hashlib
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

ANONYMOUS_USER = "system:anonymous"
UNAUTHENTICATED_GROUP = "system:unauthenticated"
AUTHENTICATED_GROUP = "system:authenticated"
# user.CredentialIDKey: the x509 authenticator records which certificate was used.
CREDENTIAL_ID_KEY = "authentication.kubernetes.io/credential-id"

# The bodies upstream writes (server.go InstallAuthFilter); the 403 one ends with a newline there too.
UNAUTHORIZED_MESSAGE = "Unauthorized"

# The websocket subprotocol that can carry a bearer token (request/websocket/protocol.go).
BEARER_PROTOCOL_PREFIX = "base64url.bearer.authorization.k8s.io."
_RAW_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")

AUTHENTICATION_API = "authentication.k8s.io/v1"
AUTHORIZATION_API = "authorization.k8s.io/v1"


def _frozen(extra: Mapping[str, Sequence[str]] | None) -> Mapping[str, tuple[str, ...]]:
    return MappingProxyType({str(k): tuple(str(v) for v in values) for k, values in (extra or {}).items()})


@dataclasses.dataclass(frozen=True)
class UserInfo:
    """An authenticated caller, as ``user.Info``: what a ``SubjectAccessReview`` is asked about."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=lambda: _frozen(None))

    @classmethod
    def of(cls, name: str, uid: str = "", groups: Sequence[str] = (),
           extra: Mapping[str, Sequence[str]] | None = None) -> UserInfo:
        """A UserInfo from loose values (lists from JSON), normalised to tuples and a read-only mapping."""
        return cls(name=name, uid=uid, groups=tuple(groups), extra=_frozen(extra))


ANONYMOUS = UserInfo(name=ANONYMOUS_USER, groups=(UNAUTHENTICATED_GROUP,))


def with_authenticated_group(user: UserInfo) -> UserInfo:
    """``group.AuthenticatedGroupAdder``: every authenticated user but anonymous is in system:authenticated."""
    if user.name == ANONYMOUS_USER or AUTHENTICATED_GROUP in user.groups or UNAUTHENTICATED_GROUP in user.groups:
        return user
    return dataclasses.replace(user, groups=(*user.groups, AUTHENTICATED_GROUP))


# ---------------------------------------------------------------------------------------------- authentication

Subject = Sequence[Sequence[tuple[str, str]]]
"""A certificate subject as Python's ``ssl`` gives it: RDNs, each a sequence of (attribute, value) pairs."""


def user_from_certificate(subject: Subject | None, der: bytes | None = None) -> UserInfo | None:
    """``x509.CommonNameUserConversion``: CN is the user name and every O a group; no CN, no user.

    ``der`` (the certificate itself) adds the credential id upstream records, ``X509SHA256=<hex digest>``.
    The TLS layer must already have verified the certificate against the client CA.
    """
    common_name = ""
    organizations: list[str] = []
    for rdn in subject or ():
        for attribute, value in rdn:
            if attribute == "commonName":
                common_name = value  # Go's pkix.Name keeps the last CN
            elif attribute == "organizationName":
                organizations.append(value)
    if not common_name:
        return None
    extra = {CREDENTIAL_ID_KEY: [f"X509SHA256={hashlib.sha256(der).hexdigest()}"]} if der else None
    return UserInfo.of(common_name, groups=organizations, extra=extra)


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, as the bearertoken authenticator reads it."""
    value = (authorization or "").strip()
    if not value:
        return None
    parts = value.split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
        return None
    return parts[1]


def is_upgrade_request(headers: Mapping[str, Sequence[str]]) -> bool:
    """``httpstream.IsUpgradeRequest``: a Connection header (lower-case names here) with the ``upgrade`` token."""
    return any(t.strip().lower() == "upgrade" for v in headers.get("connection", ()) for t in v.split(","))


def is_websocket_request(headers: Mapping[str, Sequence[str]]) -> bool:
    """``wsstream.IsWebSocketRequest``: an upgrade to ``websocket``."""
    upgrade = headers.get("upgrade") or [""]
    return is_upgrade_request(headers) and upgrade[0].strip().lower() == "websocket"


def websocket_token(protocol_headers: Sequence[str]) -> tuple[str | None, list[str]]:
    """A bearer token carried as a websocket subprotocol, and the other subprotocols (to forward without it).

    Raises ValueError as upstream refuses the request: two tokens, bad encoding, or no other subprotocol.
    """
    token: str | None = None
    others: list[str] = []
    for header in protocol_headers:
        for protocol in (p.strip() for p in header.split(",")):
            if not protocol.startswith(BEARER_PROTOCOL_PREFIX):
                others.append(protocol)
                continue
            if token is not None:
                raise ValueError("multiple base64.bearer.authorization tokens specified")
            encoded = protocol[len(BEARER_PROTOCOL_PREFIX):]
            try:
                if not _RAW_BASE64URL.fullmatch(encoded):
                    raise binascii.Error("not unpadded base64url")
                raw = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
            except binascii.Error:
                raise ValueError("invalid base64.bearer.authorization token encoding") from None
            try:
                token = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError("invalid base64.bearer.authorization token") from None
    if token and not others:
        raise ValueError("missing additional subprotocol")
    return (token or None), others


def token_review_body(token: str, audiences: Sequence[str] = ()) -> dict[str, Any]:
    """An ``authentication.k8s.io/v1`` TokenReview; the kubelet asks with no audiences (the apiserver's own)."""
    spec: dict[str, Any] = {"token": token}
    if audiences:
        spec["audiences"] = list(audiences)
    return {"apiVersion": AUTHENTICATION_API, "kind": "TokenReview", "spec": spec}


def user_from_token_review(review: Mapping[str, Any]) -> tuple[UserInfo | None, str]:
    """The reviewed user (None when not authenticated) and the review's error text ("" when none).

    As the webhook token authenticator: an unauthenticated answer with an error is an error (not cached),
    one without is a plain "no".
    """
    status = review.get("status") or {}
    if not status.get("authenticated"):
        return None, str(status.get("error") or "")
    user = status.get("user") or {}
    return UserInfo.of(str(user.get("username") or ""), str(user.get("uid") or ""),
                       [str(g) for g in user.get("groups") or ()], user.get("extra") or None), ""


# ----------------------------------------------------------------------------------------------- authorization

_VERBS = {"POST": "create", "GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}

# Paths (server.go, healthz, configz, statusz, flagz) that pick a subresource.
_FINE_GRAINED = (("/allocatedPods", "pods"), ("/pods", "pods"), ("/healthz", "healthz"), ("/configz", "configz"),
                 ("/runningpods/", "pods"))
_COARSE = (("/stats/", "stats"), ("/metrics", "metrics"), ("/logs/", "log"), ("/checkpoint/", "checkpoint"),
           ("/statusz", "statusz"), ("/flagz", "configz"))


def api_verb(method: str) -> str:
    """The API verb of an HTTP method; upstream leaves others (HEAD, OPTIONS ...) empty, so they match no rule."""
    return _VERBS.get(method, "")


def is_subpath(subpath: str, path: str) -> bool:
    """``isSubpath``: ``path`` itself or below it; a trailing slash of ``path`` does not matter."""
    path = path.removesuffix("/")
    return subpath == path or (subpath.startswith(path) and subpath[len(path):len(path) + 1] == "/")


@dataclasses.dataclass(frozen=True)
class Attributes:
    """One authorizer question: may the user <verb> ``nodes/<subresource>`` named ``name``?"""

    verb: str
    subresource: str
    name: str
    path: str
    resource: str = "nodes"
    api_group: str = ""
    api_version: str = "v1"
    namespace: str = ""


def request_attributes(method: str, path: str, node_name: str) -> list[Attributes]:
    """The attributes of a kubelet API request, in the order they are tried; any one allowed is enough.

    ``path`` is the decoded URL path without the query, as Go's ``r.URL.Path``.
    """
    subresources = [sub for prefix, sub in _FINE_GRAINED if is_subpath(path, prefix)][:1]
    coarse = next((sub for prefix, sub in _COARSE if is_subpath(path, prefix)), "proxy")
    subresources.append(coarse)
    verb = api_verb(method)
    return [Attributes(verb=verb, subresource=sub, name=node_name, path=path) for sub in subresources]


def sar_body(user: UserInfo, attrs: Attributes) -> dict[str, Any]:
    """An ``authorization.k8s.io/v1`` SubjectAccessReview for one question, empty fields left out (omitempty)."""
    resource = {"namespace": attrs.namespace, "verb": attrs.verb, "group": attrs.api_group,
                "version": attrs.api_version, "resource": attrs.resource, "subresource": attrs.subresource,
                "name": attrs.name}
    spec: dict[str, Any] = {"resourceAttributes": {k: v for k, v in resource.items() if v}, "user": user.name}
    if user.groups:
        spec["groups"] = list(user.groups)
    if user.extra:
        spec["extra"] = {k: list(v) for k, v in user.extra.items()}
    if user.uid:
        spec["uid"] = user.uid
    return {"apiVersion": AUTHORIZATION_API, "kind": "SubjectAccessReview", "spec": spec}


class Decision(enum.Enum):
    ALLOW = "allow"
    DENY = "deny"
    NO_OPINION = "no-opinion"


def sar_decision(review: Mapping[str, Any]) -> Decision:
    """The decision in a SubjectAccessReview's status; both allowed and denied is an error (ValueError)."""
    status = review.get("status") or {}
    allowed, denied = bool(status.get("allowed")), bool(status.get("denied"))
    if allowed and denied:
        raise ValueError("webhook subject access review returned both allow and deny response")
    return Decision.ALLOW if allowed else Decision.DENY if denied else Decision.NO_OPINION


def forbidden_message(user: UserInfo, attrs: Sequence[Attributes]) -> str:
    """The 403 body: the attributes differ only by subresource, listed as Go prints a []string."""
    if not attrs:
        return "Authorization error: could not determine attributes for request"
    first = attrs[0]
    subresources = " ".join(a.subresource for a in attrs)
    return (f"Forbidden (user={user.name}, verb={first.verb}, resource={first.resource}, "
            f"subresource(s)=[{subresources}])\n")


def authorization_error_message(user: UserInfo, attrs: Attributes) -> str:
    """The 500 body when the authorizer could not answer (the apiserver was unreachable, say)."""
    return (f"Authorization error (user={user.name}, verb={attrs.verb}, resource={attrs.resource}, "
            f"subresource={attrs.subresource})")
