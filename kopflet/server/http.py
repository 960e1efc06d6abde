"""HTTP/1.1 for the kubelet API on h11, over our own asyncio streams.

h11 is sans-I/O, so the raw connection stays ours: after an exec/attach/portForward upgrade its bytes are piped
untouched (SPDY/3.1 or WebSocket), as upstream's ``proxy.UpgradeAwareHandler`` does after hijacking. h11 parses
requests and frames responses (Content-Length, chunked, HEAD, keep-alive, 101) on the client's connection, and
parses the streaming server's answer on ours. By hand here is only what h11 leaves out, each marked where it is
checked: a line-length limit under the 1 MiB head, obsolete line folding, a request line without an HTTP version
(answered at once, as Go's server does, rather than after the head's deadline), HTTP versions other than 1.x, targets
other than a path or with a bad percent-escape, request bodies with a Transfer-Encoding or over 1 MiB, more than
256 header lines, a client too slow to send its request (408), and the ``Date`` header.
"""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import http
import re
from collections.abc import Sequence
from urllib.parse import parse_qs, unquote, unquote_to_bytes

import h11

MAX_LINE = 64 * 1024
"""The longest request line or header line, and the longest head of the streaming server's answer."""
MAX_HEADER_BYTES = 1 << 20
"""All of a request's head, as upstream's ``MaxHeaderBytes``."""
MAX_HEADERS = 256
MAX_BODY = 1 << 20
"""No kubelet endpoint takes a body; a small one is read and ignored."""
IDLE_TIMEOUT = 90.0
"""A kept-alive connection waits this long for its next request (upstream's ``IdleTimeout``)."""
HEAD_TIMEOUT = 60.0
"""Once a request has started, its head and body must arrive within this, or the client gets 408.

Upstream sets no ReadHeaderTimeout, so Go's ReadTimeout (4 hours) bounds a slow client there; a minute is plenty
for a head of at most 1 MiB and a body of at most 1 MiB."""
WRITE_TIMEOUT = 120.0
"""One response write to a client that does not read; streams (logs, upgrades) are not limited."""
READ_SIZE = 64 * 1024

TEXT = "text/plain; charset=utf-8"
NOT_FOUND = "404 page not found\n"
"""Go's http.NotFound: what a ServeMux answers for a path without a handler."""
_TE_REFUSED = "request bodies with Transfer-Encoding are not supported"
_REQUEST_LINE = re.compile(rb"[^ ]* [^ ]* HTTP/[0-9]+\.[0-9]+\r?")
"""Go's parseRequestLine and ParseHTTPVersion: method, target and version apart by single spaces."""
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
# h11's refusals that Go's server words itself (readRequest's badRequestError texts).
_GO_TEXTS = {"Missing mandatory Host: header": "400 Bad Request: missing required Host header",
             "Found multiple Host: headers": "400 Bad Request: too many Host headers"}


class HttpError(Exception):
    """A request we answer with ``status`` and ``message`` and then close the connection."""

    def __init__(self, status: int, message: str | None = None) -> None:
        phrase = http.HTTPStatus(status).phrase
        super().__init__(message or f"{status} {phrase}")
        self.status, self.message = status, message or f"{status} {phrase}"


@dataclasses.dataclass
class Request:
    method: str
    target: str
    """The request-target as sent (path and query)."""
    path: str
    """The percent-decoded path, as Go's ``URL.Path``."""
    query: dict[str, list[str]]
    version: str
    headers: dict[str, list[str]]
    """Lower-case names; repeated headers keep every value in order."""
    body: bytes = b""
    remote: str = ""
    unread_body: int = 0
    """``Expect: 100-continue``: the body was not asked for (nothing here needs one); the connection then closes."""

    def header(self, name: str) -> str | None:
        values = self.headers.get(name.lower())
        return values[0] if values else None

    @property
    def keep_alive(self) -> bool:
        """Whether we may keep the connection; h11 itself closes on the client's ``Connection: close`` and on
        HTTP/1.0, and says so in the response."""
        return not self.unread_body


def split_target(target: str) -> tuple[str, dict[str, list[str]]]:
    """The decoded path and the query's parameters (repeated ones in order, blanks kept)."""
    raw_path, _, raw_query = target.partition("?")
    return unquote(raw_path), parse_qs(raw_query, keep_blank_values=True)


# ------------------------------------------------------------------------- Go's ServeMux: the canonical path

_GO_PATH_KEPT = frozenset(b"$&+,-./0123456789:;=@ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz~")
"""The bytes net/url's escape(s, encodePath) leaves as they are."""
_GO_VALID_ENCODED = frozenset(_GO_PATH_KEPT | frozenset(b"!'()*[]%"))
"""The bytes net/url's validEncoded accepts in a RawPath."""
_HTML_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&#34;", "'": "&#39;"})


def _go_escape_path(raw: bytes) -> str:
    """net/url's ``escape(s, encodePath)``: every other byte as %XX."""
    return "".join(chr(b) if b in _GO_PATH_KEPT else f"%{b:02X}" for b in raw)


def _go_clean(path: str) -> str:
    """``path.Clean`` of a rooted path: no empty or "." segments, ".." removing the one before (none above /)."""
    segments: list[str] = []
    for segment in path.split("/"):
        if segment == "..":
            if segments:
                segments.pop()
        elif segment not in ("", "."):
            segments.append(segment)
    return "/" + "/".join(segments)


def canonical_location(method: str, target: str) -> str | None:
    """Where Go's ``ServeMux`` redirects a request whose path is not canonical (``//``, ``.`` or ``..``
    segments): the cleaned path (escaped once more, as ``url.URL.String`` does) and the query; None when the path
    is canonical, or for CONNECT, which the mux leaves alone.

    Upstream answers this 307 before its filters, so before authentication; no request with a dot segment reaches
    a handler (``%2e%2e`` is no dot segment: that path is served as decoded, and matched by name only here).
    """
    if method == "CONNECT":
        return None
    raw_path, _, raw_query = target.partition("?")
    # r.URL.EscapedPath(): the path as sent when that is a valid escaping of it, else net/url's own escaping
    escaped = raw_path if all(ord(c) in _GO_VALID_ENCODED for c in raw_path) else \
        _go_escape_path(unquote_to_bytes(raw_path))
    cleaned = _go_clean(escaped)  # ServeMux's cleanPath: path.Clean, keeping a trailing slash
    if escaped.endswith("/") and cleaned != "/":
        cleaned += "/"
    if cleaned == escaped:
        return None
    return _go_escape_path(cleaned.encode("ascii")) + (f"?{raw_query}" if raw_query else "")


def redirect_body(method: str, location: str) -> tuple[str | None, str]:
    """``http.Redirect``'s Content-Type and body: a link for GET (HEAD has the type, no body), nothing else."""
    if method not in ("GET", "HEAD"):
        return None, ""
    link = f'<a href="{location.translate(_HTML_ESCAPES)}">{http.HTTPStatus(307).phrase}</a>.\n\n'
    return "text/html; charset=utf-8", link


class _Head:
    """A request's head as it arrives (h11 holds the same bytes), checked for what h11 does not check.

    h11 has one limit, on everything it holds unparsed; it is Go's ``MaxHeaderBytes`` here. Each line is limited
    to MAX_LINE too, so that a long request line is 414 as before, and obsolete line folding is refused (RFC 9112
    5.2 lets a server refuse it or unfold it; h11 unfolds it)."""

    def __init__(self, data: bytes) -> None:
        self.data = bytearray(data)
        self._checked = 0
        self._line = 0
        """Where the line being read starts."""

    def check(self, end: int) -> None:
        """Check ``data[:end]``, all of it head, from where the last check stopped."""
        pos = self._checked
        while pos < end:
            if pos == self._line and self._line and self.data[pos] in b" \t":
                raise HttpError(400, "obsolete line folding is not supported")
            newline = self.data.find(b"\n", pos, end)
            if newline < 0:
                break
            if newline - self._line > MAX_LINE:
                raise self._too_large()
            if self._line == 0 and not _REQUEST_LINE.fullmatch(self.data, 0, newline):
                # Go answers as soon as the request line is read; h11 would wait for an empty line that an
                # HTTP/0.9-style client ("GET /path") never sends, until the head's deadline.
                raise HttpError(400)
            self._line = pos = newline + 1
        self._checked = end
        if end - self._line > MAX_LINE:
            raise self._too_large()
        if end > MAX_HEADER_BYTES:
            raise HttpError(431)  # as Go's server answers a head over MaxHeaderBytes

    def _too_large(self) -> HttpError:
        """414 for the request line, 431 for a header line."""
        return HttpError(414 if self._line == 0 else 431)


def _request(event: h11.Request, remote: str) -> Request:
    """Our request from h11's, refused for what Go's server or this one refuses and h11 accepts."""
    version = f"HTTP/{event.http_version.decode()}"
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        # Go's http1ServerSupportsRequest, in its words; h11 parses any HTTP/d.d
        raise HttpError(505, "505 HTTP Version Not Supported: unsupported protocol version")
    target = event.target.decode("ascii")  # h11 let only visible ASCII through
    if not target.startswith("/"):
        raise HttpError(400)  # origin-form only (RFC 9112 3.2.1): this is no proxy; h11 takes any form
    if _BAD_ESCAPE.search(target.partition("?")[0]):
        raise HttpError(400)  # Go's url.ParseRequestURI: "invalid URL escape" (the query is parsed later, leniently)
    if len(event.headers) > MAX_HEADERS:
        raise HttpError(431)
    headers: dict[str, list[str]] = {}
    for name, value in event.headers:
        headers.setdefault(name.decode("ascii"), []).append(value.decode("latin-1"))
    if "transfer-encoding" in headers:
        raise HttpError(501, _TE_REFUSED)  # Go takes chunked bodies, h11 too; no endpoint here takes a body
    if int(headers.get("content-length", ["0"])[0]) > MAX_BODY:  # h11 made it one number
        raise HttpError(413)
    path, query = split_target(target)
    return Request(event.method.decode("ascii"), target, path, query, version, headers, remote=remote)


def _refusal(exc: h11.RemoteProtocolError) -> HttpError:
    if exc.error_status_hint == 501:
        return HttpError(501, _TE_REFUSED)  # a coding h11 does not know; chunked reaches _request
    return HttpError(exc.error_status_hint, _GO_TEXTS.get(str(exc)))


class HttpConnection:
    """A client's connection: h11's server side, fed from our StreamReader, writing to our StreamWriter."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        peer = writer.get_extra_info("peername")
        self.remote = peer[0] if isinstance(peer, tuple) and peer else ""
        self._h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
        self._head_only = False
        """The request is HEAD: h11 takes no body in the response."""

    @property
    def can_respond(self) -> bool:
        """Nothing of a response to this request has been sent yet."""
        return self._h11.our_state in (h11.IDLE, h11.SEND_RESPONSE)

    def next_cycle(self) -> bool:
        """Ready for the connection's next request; False when it must close (either side said
        ``Connection: close``, HTTP/1.0, a body left unread, an upgrade)."""
        if self._h11.states != {h11.CLIENT: h11.DONE, h11.SERVER: h11.DONE}:
            return False
        self._h11.start_next_cycle()
        self._head_only = False
        return True

    async def read_request(self, *, idle_timeout: float | None = None) -> Request | None:
        """The next request, its body read; None when the client closed the connection (or stayed idle) between
        requests. HttpError for a request to refuse, 408 for one that did not arrive within HEAD_TIMEOUT."""
        head = _Head(self._h11.trailing_data[0])  # the start of a pipelined request, received already
        if not head.data:
            # As Go's server: IdleTimeout until the request's first bytes, then the head has its own deadline.
            try:
                async with asyncio.timeout(IDLE_TIMEOUT if idle_timeout is None else idle_timeout):
                    while not head.data:
                        data = await self.reader.read(READ_SIZE)
                        if not data:
                            return None
                        head.data += data.lstrip(b"\r\n")  # RFC 9112 2.2: empty lines before a request are ignored
            except TimeoutError:
                return None
            self._h11.receive_data(bytes(head.data))
        try:
            async with asyncio.timeout(HEAD_TIMEOUT):
                event = await self._read_head(head)
                self._head_only = event.method == b"HEAD"
                request = _request(event, self.remote)
                length = int(request.header("content-length") or 0)
                if length and self._h11.they_are_waiting_for_100_continue:
                    request.unread_body = length  # answered without "100 Continue": the client does not send it
                else:
                    request.body = await self._read_body()
        except TimeoutError:
            # A slow-loris head or a body shorter than its Content-Length. Go's server hangs up without a word
            # (after 4 hours upstream); RFC 9110 15.5.9's 408 tells the client why.
            raise HttpError(408) from None
        return request

    async def _read_head(self, head: _Head) -> h11.Request:
        while True:
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError as exc:
                if exc.error_status_hint == 431:  # more than MAX_HEADER_BYTES held: which line is too long?
                    head.check(len(head.data))
                raise _refusal(exc) from None
            if isinstance(event, h11.Request):
                head.check(len(head.data) - len(self._h11.trailing_data[0]))
                return event
            if event is not h11.NEED_DATA:
                raise HttpError(400)
            head.check(len(head.data))  # no head yet: all that is held is head
            data = await self.reader.read(READ_SIZE)
            self._h11.receive_data(data)  # b"": the client closed, and h11 refuses the incomplete head
            head.data += data

    async def _read_body(self) -> bytes:
        body = bytearray()
        while True:
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError as exc:
                raise _refusal(exc) from None
            if isinstance(event, h11.EndOfMessage):
                return bytes(body)
            if isinstance(event, h11.Data):
                body += event.data
            elif event is h11.NEED_DATA:
                data = await self.reader.read(READ_SIZE)
                if not data:
                    raise asyncio.IncompleteReadError(bytes(body), None)
                self._h11.receive_data(data)

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        async with asyncio.timeout(WRITE_TIMEOUT):
            await self.writer.drain()

    def _response(self, status: int, headers: Sequence[tuple[str, str]], close: bool) -> bytes:
        # h11 writes no Date header; Go's server writes one in every response.
        fields = [("Date", email.utils.formatdate(usegmt=True)), *headers]
        if close:
            fields.append(("Connection", "close"))
        return self._h11.send(h11.Response(status_code=status, reason=http.HTTPStatus(status).phrase,
                                           headers=fields))

    def _data(self, data: bytes) -> bytes:
        return self._h11.send(h11.Data(data=data)) if data and not self._head_only else b""

    async def respond(self, status: int, body: bytes | str, *, content_type: str | None = TEXT, close: bool = False,
                      headers: Sequence[tuple[str, str]] = (), nosniff: bool | None = None) -> None:
        """A whole response with its Content-Length (the body left out after HEAD); ``close`` ends the connection
        after it. ``content_type`` None: no Content-Type (an empty answer, as Go's redirect of a POST).
        ``nosniff``: ``X-Content-Type-Options: nosniff``; None: with TEXT only (http.Error's), False: never (a
        handler that only wrote text, its type sniffed by Go)."""
        data = body.encode() if isinstance(body, str) else body
        fields = [("Content-Length", str(len(data))), *headers]
        if content_type is not None:
            fields.insert(0, ("Content-Type", content_type))
        if nosniff if nosniff is not None else content_type == TEXT:
            fields.append(("X-Content-Type-Options", "nosniff"))
        await self.write(self._response(status, fields, close) + self._data(data) + self._h11.send(h11.EndOfMessage()))

    async def start_chunked(self, status: int, content_type: str, headers: Sequence[tuple[str, str]] = ()) -> None:
        """A streamed response, after which the connection ends: h11 chunks it (for HTTP/1.0 it ends with the
        connection, as Go's server does)."""
        await self.write(self._response(status, [("Content-Type", content_type), *headers,
                                                 ("X-Content-Type-Options", "nosniff")], close=True))

    async def chunk(self, data: bytes) -> None:
        if data := self._data(data):
            await self.write(data)

    async def end_chunked(self) -> None:
        await self.write(self._h11.send(h11.EndOfMessage()))

    async def wait_closed_by_client(self) -> None:
        """Return when the client closes its side (data it sends meanwhile is dropped: we close after)."""
        while await self.reader.read(READ_SIZE):
            pass

    async def switch_protocols(self, answer: StreamingAnswer) -> None:
        """Answer 101 with the streaming server's headers, and pass on what each side sent past its head (the
        client's first frames, the server's first bytes): from here the connection is piped."""
        event = answer.event
        try:
            head = self._h11.send(h11.InformationalResponse(status_code=101, reason=event.reason,
                                                            headers=event.headers.raw_items()))
        except h11.LocalProtocolError as exc:  # the client sent "Connection: Upgrade" but no Upgrade header
            raise ValueError(f"cannot switch protocols: {exc}") from None
        if early := self._h11.trailing_data[0]:
            answer.writer.write(early)
            async with asyncio.timeout(WRITE_TIMEOUT):
                await answer.writer.drain()
        await self.write(head + answer.connection.trailing_data[0])

    async def relay(self, answer: StreamingAnswer) -> None:
        """The streaming server refused: pass its response on (upstream writes it back as it came), then close.
        ValueError when the streaming server breaks off."""
        event = answer.event
        fields = [(name, value) for name, value in event.headers.raw_items() if name.lower() != b"connection"]
        await self.write(self._h11.send(h11.Response(status_code=event.status_code, reason=event.reason,
                                                     headers=[*fields, (b"Connection", b"close")])))
        sent = 0
        while sent < MAX_BODY:
            part = await answer.next_event()
            if isinstance(part, h11.EndOfMessage):
                await self.write(self._h11.send(h11.EndOfMessage()))
                return
            if isinstance(part, h11.Data):
                sent += len(part.data)
                await self.write(self._data(part.data))


# ----------------------------------------------------------------------------------- the streaming server's side

@dataclasses.dataclass
class StreamingAnswer:
    """The streaming server's answer to a replayed request: its head, read by h11's client side on our stream."""

    event: h11.InformationalResponse | h11.Response
    connection: h11.Connection
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    @property
    def status(self) -> int:
        return self.event.status_code

    async def next_event(self) -> h11.Event:
        """The answer's next part (a body's Data, its EndOfMessage). ValueError when it is not HTTP/1.x."""
        return await _next_event(self.connection, self.reader)


async def _next_event(connection: h11.Connection, reader: asyncio.StreamReader) -> h11.Event:
    while True:
        try:
            event = connection.next_event()
        except h11.RemoteProtocolError as exc:
            raise ValueError(f"malformed response from the streaming server: {exc}") from None
        if event is not h11.NEED_DATA:
            assert event is not h11.PAUSED  # not before its answer's head
            return event
        connection.receive_data(await reader.read(READ_SIZE))


async def replay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, method: str, target: str,
                 headers: Sequence[tuple[str, str]]) -> StreamingAnswer:
    """Send the client's request to the streaming server and read the head of its answer. ValueError when either
    is not HTTP/1.x."""
    connection = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_LINE)
    try:
        data = connection.send(h11.Request(method=method, target=target, headers=[
            (name.encode("latin-1"), value.encode("latin-1")) for name, value in headers]))
        data += connection.send(h11.EndOfMessage())
    except h11.LocalProtocolError as exc:
        raise ValueError(f"cannot replay the request: {exc}") from None
    writer.write(data)
    await writer.drain()
    while not isinstance(event := await _next_event(connection, reader), h11.InformationalResponse | h11.Response):
        pass  # pragma: no cover - a client's first event is its answer's head
    return StreamingAnswer(event, connection, reader, writer)
