"""The exec/attach/portForward requests' own rules, apart from HTTP: their query parameters, which of the
client's headers are replayed to the runtime's streaming server (as ``proxy.UpgradeAwareHandler`` forwards them),
and the upgrade handshakes that streaming server would refuse, refused here before the runtime is asked for a
session.

Pure: the I/O is in :mod:`kopflet.server.server` and :mod:`kopflet.server.http`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from kopflet import gotext

# Request headers never replayed to the streaming server: ours to answer, or already used (the credentials).
NOT_PROXIED = frozenset({"host", "authorization", "content-length", "transfer-encoding", "expect"})

# What the CRI streaming server (k8s.io/cri-streaming, containerd's and CRI-O's) speaks. SPDY: X-Stream-Protocol-
# Version, remotecommand.SupportedStreamingProtocols and portforward.SupportedProtocols, in its order of preference.
REMOTE_COMMAND_PROTOCOLS = ("v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io")
PORT_FORWARD_PROTOCOLS = ("portforward.k8s.io",)
# WebSocket subprotocols: the channel protocols of remotecommand/websocket.go and portforward/websocket.go ("": the
# client named none).
REMOTE_COMMAND_WEBSOCKET = ("", "channel.k8s.io", "base64.channel.k8s.io", "v4.channel.k8s.io",
                            "v4.base64.channel.k8s.io")
PORT_FORWARD_WEBSOCKET = ("", "v4.channel.k8s.io", "v4.base64.channel.k8s.io")
PROTOCOL_HEADER = "X-Stream-Protocol-Version"
ACCEPTED_PROTOCOLS_HEADER = "X-Accepted-Stream-Protocol-Versions"


@dataclasses.dataclass(frozen=True)
class StreamOptions:
    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool


def stream_options(query: Mapping[str, list[str]]) -> StreamOptions:
    """``remotecommand.NewOptions``: ``input``/``output``/``error``/``tty`` are on when "1"; no tty stderr."""
    def on(name: str) -> bool:
        return (query.get(name) or [""])[0] == "1"

    tty, stdin, stdout, stderr = on("tty"), on("input"), on("output"), on("error")
    if tty and stderr:
        stderr = False  # upstream ignores stderr with a tty
    if not (stdin or stdout or stderr):
        raise ValueError("you must specify at least 1 of stdin, stdout, stderr")
    return StreamOptions(stdin=stdin, stdout=stdout, stderr=stderr, tty=tty)


def port_forward_ports(query: Mapping[str, list[str]], websocket: bool) -> list[int]:
    """``portforward.NewV4Options``: a websocket names its ports in ``port`` (required); SPDY names none here."""
    if not websocket:
        return []
    values = query.get("port") or []
    if not values:
        raise ValueError('query parameter "port" is required')
    ports: list[int] = []
    for value in values:
        if not value:
            raise ValueError('query parameter "port" cannot be empty')
        for part in value.split(","):
            if not part.isdigit() or int(part) > 65535:
                raise ValueError(f'unable to parse "{value}" as a port')
            if int(part) < 1:
                raise ValueError(f'port "{value}" must be > 0')
            ports.append(int(part))
    return ports


def replayed_headers(headers: Mapping[str, Sequence[str]], host: str, remote: str) -> list[tuple[str, str]]:
    """The client's headers as replayed to the streaming server at ``host``: minus the used credentials and our
    framing, names canonical, and ``X-Forwarded-For`` extended with the client's address."""
    replayed = [("Host", host)]
    for name, values in headers.items():
        if name in NOT_PROXIED or name == "x-forwarded-for":
            continue
        replayed.extend((gotext.canonical_header(name), value) for value in values)
    forwarded = ", ".join([*headers.get("x-forwarded-for", []), *([remote] if remote else [])])
    if forwarded:
        replayed.append(("X-Forwarded-For", forwarded))
    return replayed


# ------------------------------------------------------------------------------------------- the handshake

@dataclasses.dataclass(frozen=True)
class Refusal:
    """The streaming server's answer to a handshake it cannot take."""

    status: int
    message: str
    headers: tuple[tuple[str, str], ...] = ()


def handshake_refusal(method: str, replayed: Sequence[tuple[str, str]], *, port_forward: bool) -> Refusal | None:
    """What the runtime's streaming server would answer to this upgrade request (``replayed``: the headers as it
    would receive them), or None when it would take it.

    Upstream the kubelet asks the runtime for a session first and the streaming server then refuses; refusing here
    keeps a bad handshake from ever reaching the runtime, with the same status and text: for WebSocket
    golang.org/x/net/websocket's ReadHandshake and wsstream's subprotocol handshake, for SPDY
    ``httpstream.Handshake`` then ``spdy.responseUpgrader.UpgradeResponse`` (``http.Error`` ends the text with a
    newline; x/net writes its own without one).
    """
    header: dict[str, list[str]] = {}  # Go's req.Header on the streaming server: Host is not in it
    for name, value in replayed:
        if name != "Host":
            header.setdefault(name, []).append(value)

    def get(name: str) -> str:
        return (header.get(name) or [""])[0]

    upgrade = any("upgrade" in value.lower() for value in header.get("Connection", ()))  # IsUpgradeRequest
    if upgrade and get("Upgrade").lower() == "websocket":  # wsstream.IsWebSocketRequest
        if method != "GET":
            return Refusal(405, "bad method")
        if "upgrade" not in get("Connection").lower():
            return Refusal(400, "not websocket protocol")
        if not get("Sec-Websocket-Key"):
            return Refusal(400, "mismatch challenge/response")
        if get("Sec-Websocket-Version") != "13":
            return Refusal(400, "missing or bad WebSocket Version", (("Sec-WebSocket-Version", "13"),))
        offered = get("Sec-Websocket-Protocol").strip()
        requested = [protocol.strip() for protocol in offered.split(",")] if offered else []
        allowed = PORT_FORWARD_WEBSOCKET if port_forward else REMOTE_COMMAND_WEBSOCKET
        if any(protocol in allowed for protocol in requested or [""]):
            return None
        # x/net answers a bare 403; this is the reason wsstream's handshake gives it (Go prints "" as nothing).
        return Refusal(403, f"requested protocol(s) are not supported: {gotext.go_string_slice(requested)}; "
                            f"supports {gotext.go_string_slice(allowed)}")
    values = header.get(PROTOCOL_HEADER)
    if values is None:
        return Refusal(400, f"unable to upgrade: header {PROTOCOL_HEADER} does not exist in request with "
                            f"{len(header)} headers\n")
    client = [part.strip(" ") for value in values for part in value.split(",") if part.strip(" ")]
    if not client:
        return Refusal(400, f"unable to upgrade: header {PROTOCOL_HEADER} contains {gotext.go_string_slice(values)}, "
                            "but no valid protocols\n")
    server = PORT_FORWARD_PROTOCOLS if port_forward else REMOTE_COMMAND_PROTOCOLS
    if not any(protocol in server for protocol in client):
        return Refusal(403, "unable to upgrade: unable to negotiate protocol: client supports "
                            f"{gotext.go_string_slice(client)}, server accepts {gotext.go_string_slice(server)}\n",
                       tuple((ACCEPTED_PROTOCOLS_HEADER, protocol) for protocol in server))
    if "upgrade" not in get("Connection").lower() or "spdy/3.1" not in get("Upgrade").lower():
        return Refusal(400, f"unable to upgrade: missing upgrade headers in request: {_go_header(header)}\n")
    return None


def _go_header(header: Mapping[str, Sequence[str]]) -> str:
    """``fmt``'s ``%#v`` of an ``http.Header``: keys sorted, values quoted (bytes as UTF-8, bad ones U+FFFD)."""
    def quote(value: str) -> str:
        return gotext.go_quote(value.encode("latin-1").decode("utf-8", "replace"))

    entries = (f"{quote(name)}:[]string{{{', '.join(quote(v) for v in values)}}}"
               for name, values in sorted(header.items()))
    return f"http.Header{{{', '.join(entries)}}}"
