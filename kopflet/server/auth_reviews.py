"""Who is calling the kubelet API, and may they: TokenReviews and SubjectAccessReviews on the apiserver, cached.

The upstream kubelet delegates both questions to the apiserver (``cmd/kubelet/app/auth.go``): a client
certificate the TLS layer verified against ``--client-ca-file`` names the user itself; a bearer token is sent
in a ``TokenReview``; a request without credentials is ``system:anonymous`` when ``--anonymous-auth`` allows it.
Each of the request's authorization attributes (``kopflet.server.auth_rules.request_attributes``) is then asked in a
``SubjectAccessReview`` until one is allowed. Answers are cached with upstream's TTLs (tokens 2m, allowed 5m,
denied 30s); failures to ask are never cached, and tokens are kept only as an HMAC with a per-process key.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import os
import random
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, MutableMapping
from typing import Any, Generic, Protocol, TypeVar

from kopflet.client.kubeapi import API_ERRORS, KubeApiError
from kopflet.config.modes import NO_CLIENT_WEBHOOK_AUTHENTICATION, NO_CLIENT_WEBHOOK_AUTHORIZATION
from kopflet.config.settings import AgentConfig
from kopflet.server import auth_rules
from kopflet.server.auth_rules import Attributes, Subject, UserInfo

logger = logging.getLogger(__name__)

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"

# One review, retries included (the token cache's sharedLookupTimeout upstream).
REVIEW_TIMEOUT = 30.0
# DefaultAuthWebhookRetryBackoff: 500ms, x1.5, 20% jitter, 5 attempts.
RETRY_DELAYS = (0.5, 0.75, 1.125, 1.6875)
RETRY_JITTER = 0.2
CACHE_ENTRIES = 4096
# Upstream does not cache SubjectAccessReviews whose caller-controlled attributes are this big.
MAX_CACHED_KEY = 10000

V = TypeVar("V")


class ReviewClient(Protocol):
    """What the reviews need of ``kopflet.client.kubeapi.KubeClient``."""

    async def request(self, method: str, path: str, *, body: Any = None) -> dict[str, Any]: ...


class TTLCache(Generic[V]):
    """Entries that expire; the oldest go first when full. Small and single-threaded (the event loop)."""

    def __init__(self, max_entries: int = CACHE_ENTRIES, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries, self.clock = max_entries, clock
        self._entries: OrderedDict[Hashable, tuple[float, V]] = OrderedDict()

    def get(self, key: Hashable) -> tuple[bool, V | None]:
        """(True, value) on a live hit, (False, None) otherwise."""
        entry = self._entries.get(key)
        if entry is None:
            return False, None
        expires, value = entry
        if expires <= self.clock():
            del self._entries[key]
            return False, None
        return True, value

    def put(self, key: Hashable, value: V, ttl: float) -> None:
        if ttl <= 0:
            return
        self._entries.pop(key, None)
        self._entries[key] = (self.clock() + ttl, value)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


def _retryable(exc: BaseException) -> bool:
    """webhook.DefaultShouldRetry: no answer, too many requests, or a server error."""
    if isinstance(exc, KubeApiError):
        return exc.status == 429 or exc.status >= 500
    return isinstance(exc, API_ERRORS)


async def review(kube: ReviewClient, path: str, body: dict[str, Any],
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> dict[str, Any]:
    """POST one review, retrying transient failures with upstream's backoff (callers bound the whole)."""
    for delay in RETRY_DELAYS:
        try:
            return await kube.request("POST", path, body=body)
        except API_ERRORS as exc:
            if not _retryable(exc):
                raise
            logger.debug(f"Retrying {path} after {exc!r}")
            await sleep(delay * (1 + RETRY_JITTER * random.random()))
    return await kube.request("POST", path, body=body)


class Authenticator:
    """x509 client certificates, then bearer tokens (TokenReview), then anonymous, as upstream's union.

    A presented credential that fails means 401 even when anonymous requests are allowed (FailOnError).
    """

    def __init__(self, kube: ReviewClient | None, *, client_certificates: bool, webhook: bool = True,
                 anonymous: bool = False, cache_ttl: float = 120.0, timeout: float = REVIEW_TIMEOUT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if webhook and kube is None:
            raise ValueError(NO_CLIENT_WEBHOOK_AUTHENTICATION)
        if not (client_certificates or webhook or anonymous):
            raise ValueError("no authentication method configured: enable client certificates (--client-ca-file), "
                             "the token webhook or anonymous requests")
        self.kube, self.client_certificates = kube, client_certificates
        self.webhook, self.anonymous = webhook, anonymous
        self.cache_ttl, self.timeout = cache_ttl, timeout
        self._cache: TTLCache[UserInfo | None] = TTLCache(clock=clock)
        self._inflight: dict[bytes, asyncio.Future[tuple[UserInfo | None, str]]] = {}
        self._key = os.urandom(32)

    async def authenticate(self, headers: MutableMapping[str, list[str]], subject: Subject | None = None,
                           der: bytes | None = None) -> UserInfo | None:
        """The caller, or None (401). ``headers`` (lower-case names) lose the credential that was used, so it is
        never proxied on, as upstream deletes ``Authorization`` and the websocket token subprotocol."""
        if self.client_certificates and subject:
            user = auth_rules.user_from_certificate(subject, der)
            if user is not None:
                return auth_rules.with_authenticated_group(user)
        failed = False
        if self.webhook:
            token = auth_rules.bearer_token((headers.get("authorization") or [None])[0])
            if token is not None:
                user = await self._token_user(token)
                if user is not None:
                    headers.pop("authorization", None)
                    return auth_rules.with_authenticated_group(user)
                failed = True
            if auth_rules.is_websocket_request(headers):
                try:
                    token, others = auth_rules.websocket_token(headers.get("sec-websocket-protocol", []))
                except ValueError as exc:
                    logger.debug(f"Refused a websocket bearer token: {exc}")
                    return None
                if token is not None:
                    user = await self._token_user(token)
                    if user is not None:
                        headers["sec-websocket-protocol"] = [",".join(others)]
                        return auth_rules.with_authenticated_group(user)
                    failed = True
        if failed or not self.anonymous:
            return None
        return auth_rules.ANONYMOUS

    async def _token_user(self, token: str) -> UserInfo | None:
        """The token's user from the cache or one shared TokenReview (concurrent callers wait for the same one)."""
        key = hmac.new(self._key, token.encode(), hashlib.sha256).digest()
        hit, user = self._cache.get(key)
        if hit:
            return user
        future = self._inflight.get(key)
        if future is None:
            future = asyncio.ensure_future(self._review_token(key, token))
            self._inflight[key] = future
            future.add_done_callback(lambda _: self._inflight.pop(key, None))
        user, _ = await asyncio.shield(future)
        return user

    async def _review_token(self, key: bytes, token: str) -> tuple[UserInfo | None, str]:
        assert self.kube is not None
        try:
            async with asyncio.timeout(self.timeout):
                answer = await review(self.kube, TOKEN_REVIEWS, auth_rules.token_review_body(token))
        except (*API_ERRORS, ValueError) as exc:
            logger.error(f"Unable to authenticate a bearer token: the TokenReview failed: {exc}")
            return None, str(exc)
        user, error = auth_rules.user_from_token_review(answer)
        if error:
            logger.info(f"A TokenReview did not authenticate the token: {error}")
            return None, error  # an error, not a "no": not cached, as upstream
        self._cache.put(key, user, self.cache_ttl)
        return user, ""


class Authorizer:
    """``AlwaysAllow``, or ``Webhook``: one SubjectAccessReview per question, answers cached by their spec."""

    def __init__(self, kube: ReviewClient | None, *, mode: str = "Webhook", authorized_ttl: float = 300.0,
                 unauthorized_ttl: float = 30.0, timeout: float = REVIEW_TIMEOUT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if mode not in ("AlwaysAllow", "Webhook"):
            raise ValueError(f"unknown authorization mode {mode}")
        if mode == "Webhook" and kube is None:
            raise ValueError(NO_CLIENT_WEBHOOK_AUTHORIZATION)
        self.kube, self.mode, self.timeout = kube, mode, timeout
        self.authorized_ttl, self.unauthorized_ttl = authorized_ttl, unauthorized_ttl
        self._cache: TTLCache[dict[str, Any]] = TTLCache(clock=clock)

    async def authorize(self, user: UserInfo, attrs: Attributes) -> bool:
        """Allowed or not; raises when the apiserver cannot be asked or answers nonsense (the server's 500)."""
        if self.mode == "AlwaysAllow":
            return True
        assert self.kube is not None
        body = auth_rules.sar_body(user, attrs)
        key = json.dumps(body["spec"], sort_keys=True)
        hit, status = self._cache.get(key)
        if not hit:
            async with asyncio.timeout(self.timeout):
                answer = await review(self.kube, SUBJECT_ACCESS_REVIEWS, body)
            status = dict(answer.get("status") or {})
            if len(key) < MAX_CACHED_KEY:
                self._cache.put(key, status, self.authorized_ttl if status.get("allowed") else self.unauthorized_ttl)
        decision = auth_rules.sar_decision({"status": status})
        if decision is not auth_rules.Decision.ALLOW and status and status.get("reason"):
            logger.debug(f"{user.name} may not {attrs.verb} nodes/{attrs.subresource}: {status['reason']}")
        return decision is auth_rules.Decision.ALLOW


def authenticator_for(config: AgentConfig, kube: ReviewClient | None) -> Authenticator:
    """The authenticator the flags ask for (``--client-ca-file``, ``--authentication-token-webhook`` ...)."""
    return Authenticator(kube, client_certificates=bool(config.client_ca_file),
                         webhook=config.authentication_token_webhook, anonymous=config.anonymous_auth,
                         cache_ttl=config.authentication_token_webhook_cache_ttl)


def authorizer_for(config: AgentConfig, kube: ReviewClient | None) -> Authorizer:
    """The authorizer the flags ask for (``--authorization-mode`` and its cache TTLs)."""
    return Authorizer(kube, mode=config.authorization_mode,
                      authorized_ttl=config.authorization_webhook_cache_authorized_ttl,
                      unauthorized_ttl=config.authorization_webhook_cache_unauthorized_ttl)
