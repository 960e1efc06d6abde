"""The exec/attach/portForward requests' own rules, apart from HTTP: their query parameters, and which of the
client's headers are replayed to the runtime's streaming server (as ``proxy.UpgradeAwareHandler`` forwards them).

Pure: the I/O is in :mod:`kopflet.server.server` and :mod:`kopflet.server.http`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from kopflet import gotext

# Request headers never replayed to the streaming server: ours to answer, or already used (the credentials).
NOT_PROXIED = frozenset({"host", "authorization", "content-length", "transfer-encoding", "expect"})


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
