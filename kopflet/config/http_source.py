"""The HTTP static pod source: the pods ``--manifest-url`` (``staticPodURL``) serves run as static pods (upstream
pkg/kubelet/config/http.go, sourceURL).

Every ``httpCheckFrequency`` (and first at start) the URL is read with a GET carrying ``staticPodURLHeader``, under
upstream's 10 s client timeout, TLS verified against the system's roots and redirects followed as Go's default
client does; at most 10 MiB is read. The answer is decoded by `kopflet.config.static_pods.read_url` (one Pod or a
PodList) and its whole set handed to the static pod manager (`StaticPodSource.apply`, source ``http``), which
starts, stops and mirrors the pods as it does a file's. An unchanged answer sends nothing. A failed read or a bad
document keeps the last good set; it is logged as upstream logs it (the first three failures, then at V(4)) and,
beyond upstream, said in a Warning event on the Node (once per distinct error). An empty answer is an empty set.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import errno
import ipaddress
import logging
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol

import aiohttp

from kopflet import gotext
from kopflet.api import times
from kopflet.config import static_pods
from kopflet.config.static_pods import StaticPod
from kopflet.logs.verbosity import v
from kopflet.rounds import log_failed_round

logger = logging.getLogger(__name__)

REQUEST_TIMEOUT = 10.0
"""NewSourceURL's ``http.Client{Timeout: 10 * time.Second}``: the whole request, the body read too."""
FAILED_REASON = "FailedToReadPodsFromURL"
"""The Node event's reason when staticPodURL cannot be read or its document is bad (kopflet's own: upstream only
logs it)."""
MAX_EVENT_MESSAGE = 1024
"""An event's message is cut to this (the error quotes a bad document whole)."""
_QUIET_AFTER = 3
"""sourceURL.run: the first three failures are logged, then at V(4)."""


class NodeEvents(Protocol):
    def node_event(self, type_: str, reason: str, message: str, uid: str = "") -> None: ...


Apply = Callable[[str, Mapping[str, StaticPod]], Awaitable[None]]


def strip_password(url: str) -> str:
    """net/http's stripPassword: a URL's password as ``***`` in the client's errors (``Get "<url>": ...``)."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    return url.replace(f"{parts.username}:{parts.password}@", f"{parts.username}:***@", 1)


def public_url(url: str) -> str:
    """The URL as a Node event may show it (anyone who reads events sees it): no password, no query (a signed URL's
    token), no fragment."""
    parts = urllib.parse.urlsplit(strip_password(url))
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


def event_message(error: str, url: str, body: bytes | None) -> str:
    """The log's error as the Node event says it: the document it quotes as its size (it may hold secrets: a
    manifest's env values), the URL as `public_url`, cut to MAX_EVENT_MESSAGE."""
    text = error
    quoted = body.decode("utf-8", errors="replace") if body else ""
    if quoted:
        text = text.replace(f"'{quoted}'", f"<{len(body or b'')} bytes>")
    text = text.replace(url, public_url(url)).replace(strip_password(url), public_url(url))
    return text if len(text) <= MAX_EVENT_MESSAGE else text[:MAX_EVENT_MESSAGE - 3] + "..."


def proxy_for(url: str, environ: Mapping[str, str] | None = None) -> str | None:
    """Go's ProxyFromEnvironment: HTTPS_PROXY / HTTP_PROXY by scheme unless NO_PROXY covers the host; localhost and
    loopback addresses are never proxied."""
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost" or _loopback(host):
        return None
    proxies = urllib.request.getproxies_environment() if environ is None else {
        key.lower().removesuffix("_proxy"): value for key, value in environ.items()
        if key.lower().endswith("_proxy") and value}
    if urllib.request.proxy_bypass_environment(host, proxies):
        return None
    return proxies.get(urllib.parse.urlsplit(url).scheme) or None


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def credentials(url: str, headers: Sequence[tuple[str, str]]) -> tuple[str, list[tuple[str, str]]]:
    """The URL without its user info, and the headers to send: Go's client turns the user info into basic auth only
    when no Authorization header is set (the header wins); aiohttp refuses a URL with user info beside one."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
        return url, list(headers)
    netloc = parts.netloc.rsplit("@", 1)[1]
    bare = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    if any(name.lower() == "authorization" for name, _ in headers):
        return bare, list(headers)
    user = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
    return bare, [*headers, ("Authorization", "Basic " + base64.b64encode(user.encode()).decode())]


def request_headers(headers: Mapping[str, Sequence[str]]) -> list[tuple[str, str]]:
    """staticPodURLHeader as http.Header.Add makes it (makePodSourceConfig): names canonicalized, every value sent
    in order."""
    return [(gotext.canonical_header(name), value) for name in sorted(headers) for value in headers[name]]


def _dial_error(url: str, exc: aiohttp.ClientConnectorError) -> str:
    """Go's url.Error of a failed connect: ``Get "<url>": dial tcp 127.0.0.1:80: connect: connection refused``."""
    address = gotext.join_host_port(exc.host, exc.port)
    error = exc.os_error
    if isinstance(error, ConnectionRefusedError) or error.errno == errno.ECONNREFUSED:
        detail = "connect: connection refused"
    elif error.strerror:
        detail = f"connect: {error.strerror.lower()}"
    else:
        detail = str(error) or "connect failed"
    return f"Get {gotext.go_quote(url)}: dial tcp {address}: {detail}"


class FetchError(Exception):
    """A GET that got no answer; the message is Go's client error text."""


class ManifestURLSource:
    """Reads staticPodURL every httpCheckFrequency and hands its pods to the static pod manager (`apply`).

    `recorder` posts the Node events, `node_uid` gives the Node's uid for them (empty before registration)."""

    def __init__(self, url: str, headers: Mapping[str, Sequence[str]], node_name: str, period: float, apply: Apply,
                 recorder: NodeEvents | None = None, node_uid: Callable[[], str] = lambda: "", *,
                 timeout: float = REQUEST_TIMEOUT) -> None:
        self.url, self.node_name, self.period, self.timeout = url, node_name, period, timeout
        self.headers = request_headers(headers)
        self.apply, self.recorder, self.node_uid = apply, recorder, node_uid
        self._data: bytes | None = None
        self._data_error = ""
        self._failures = 0
        self._said = ""  # the error the last event was about
        self._session: aiohttp.ClientSession | None = None
        self.synced = asyncio.Event()
        """Set once a set of pods was handed over (the config mux's seen source: upstream's sourcesReady)."""

    async def fetch(self) -> tuple[int, str, bytes]:
        """One GET: (status, reason, at most MAX_CONFIG_LENGTH bytes of body); FetchError with Go's text."""
        if self._session is None or self._session.closed:
            # Go's default client: keep-alive, system roots; no cookies kept; proxies from the environment as Go
            # reads them (`proxy_for`), not aiohttp's trust_env, which also reads ~/.netrc
            self._session = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar(), trust_env=False)
        url, headers = credentials(self.url, self.headers)
        reading = False
        try:
            async with asyncio.timeout(self.timeout):
                async with self._session.get(url, headers=headers, proxy=proxy_for(self.url)) as response:
                    reading = True
                    body = await response.content.read(static_pods.MAX_CONFIG_LENGTH)
                    while len(body) < static_pods.MAX_CONFIG_LENGTH and (
                            more := await response.content.read(static_pods.MAX_CONFIG_LENGTH - len(body))):
                        body += more
                    return response.status, response.reason or "", body
        except TimeoutError:
            if reading:  # the body's own read error, not wrapped in a url.Error
                raise FetchError("context deadline exceeded (Client.Timeout or context cancellation while reading "
                                 "body)") from None
            raise FetchError(f"Get {gotext.go_quote(strip_password(self.url))}: context deadline exceeded "
                             f"(Client.Timeout exceeded while awaiting headers)") from None
        except aiohttp.ClientConnectorError as exc:
            raise FetchError(_dial_error(strip_password(self.url), exc)) from None
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            raise FetchError(f"Get {gotext.go_quote(strip_password(self.url))}: {exc or type(exc).__name__}") from None

    async def poll(self) -> None:
        """One read (sourceURL.run, extractFromURL): the set handed over when it changed; a failure logged and said."""
        seen = times.micro_timestamp(datetime.datetime.now(datetime.UTC))
        try:
            status, reason, body = await self.fetch()
        except FetchError as exc:
            self._failed(str(exc), None)
            return
        # decoding a large document (up to 10 MiB of YAML) takes seconds: off the event loop
        result = await asyncio.to_thread(static_pods.read_url, self.url, status, reason, body, self.node_name, seen,
                                         last=self._data, last_error=self._data_error)
        self._data, self._data_error = result.data, result.data_error
        for warning in result.warnings:
            logger.warning(f"static pod from {self.url}: {warning}")
        if result.pods is not None:
            await self.apply(static_pods.SOURCE_HTTP, {pod.uid: pod for pod in result.pods})
            self.synced.set()
        if result.error:
            self._failed(result.error, body)
        elif self._failures:
            logger.info("Successfully read pods from URL")
            self._failures, self._said = 0, ""

    def _failed(self, error: str, body: bytes | None) -> None:
        if self._failures < _QUIET_AFTER:
            logger.info(f"Failed to read pods from URL: {error}")
        elif self._failures == _QUIET_AFTER:
            logger.info(f"Failed to read pods from URL. Dropping verbosity of this message to V(4): {error}")
        else:
            logger.log(v(4), f"Failed to read pods from URL: {error}")
        self._failures += 1
        if self.recorder is not None and error != self._said:
            self._said = error
            self.recorder.node_event("Warning", FAILED_REASON, event_message(error, self.url, body), self.node_uid())

    async def run(self) -> None:
        """wait.Until: a read, then httpCheckFrequency after it ends, forever; a round that fails unexpectedly is
        logged and the loop goes on."""
        logger.log(v(1), f"Watching URL {self.url}")
        while True:
            try:
                await self.poll()
            except Exception as exc:  # wait.Until: the loop outlives a bad round
                log_failed_round(logger, f"reading static pods from {self.url} failed", exc)
            await asyncio.sleep(self.period)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
