"""The answers of ``/healthz`` as upstream's healthz package writes them (k8s.io/apiserver pkg/server/healthz).

Upstream's kubelet installs it twice: on its API (``--port``, InstallAuthNotRequiredHandlers: ping, log, syncloop
and the container manager's device-plugin check) and on the plain ``--healthz-port`` (cmd/kubelet/app/server.go:
``healthz.InstallHandler(mux)`` with no checks, so ping alone). ``/healthz`` runs every check not excluded
(``?exclude=<name>``, repeatable) and answers 200 ``ok`` when they pass (each check's line and ``healthz check
passed`` with ``?verbose``), else 500 with each check's line, a failure's reason withheld, and ``healthz check
failed`` (http.Error's newline after it); ``/healthz/<name>`` runs one check: 200 ``ok`` or 500 ``internal server
error: <why>``. The bytes, headers included, were compared with upstream's handlers served by Go 1.26.

Pure: check names, their outcomes and the query in; status, body, headers and log lines out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from kopflet.gotext import go_quote

PATH: Final = "/healthz"
"""healthz.DefaultHealthzPath."""
CONTENT_TYPE: Final = "text/plain; charset=utf-8"
"""Every answer's: set by the root handler and http.Error, sniffed by Go for an individual check's ``ok``."""
PING: Final = "ping"
LOG: Final = "log"
SYNC_LOOP: Final = "syncloop"


@dataclasses.dataclass(frozen=True)
class Answer:
    """One healthz response, and what upstream logs with it."""

    status: int
    body: str
    nosniff: bool = True
    """``X-Content-Type-Options: nosniff``: on the root's answers and http.Error's, not on an individual ``ok``."""
    failure_log: str = ""
    """Logged at V(2) when checks failed: their names, and each failure with its reason."""
    unmatched_log: str = ""
    """Logged at V(6) when ``exclude`` named checks that are not installed."""


def target(path: str, names: Iterable[str]) -> str | None:
    """Which handler serves `path` (Go's ServeMux, exact patterns): "" for ``/healthz``, a check's name for
    ``/healthz/<name>``, None for any other path (a 404)."""
    if path == PATH:
        return ""
    prefix = PATH + "/"
    if path.startswith(prefix) and (name := path[len(prefix):]) in names:
        return name
    return None


def excluded(query: Mapping[str, Sequence[str]]) -> frozenset[str]:
    """getExcludedChecks: every ``exclude`` value (an empty one too)."""
    return frozenset(query.get("exclude", ()))


def _quoted(names: Iterable[str]) -> str:
    """formatQuoted: each name as Go's %q, comma-separated."""
    return ",".join(go_quote(name) for name in names)


def root(results: Sequence[tuple[str, str | None]], query: Mapping[str, Sequence[str]],
         name: str = "healthz") -> Answer:
    """handleRootHealth: `results` are the installed checks in order, each with its error ("" passed, None: not
    run, as `excluded` names it). `name` is the path's first segment, as upstream names the endpoint."""
    exclude = excluded(query)
    unknown = set(exclude)
    lines: list[str] = []
    failed: list[str] = []
    reasons: list[str] = []
    for check, error in results:
        if check in exclude:
            unknown.discard(check)
            lines.append(f"[+]{check} excluded: ok\n")
        elif error:
            # The reason is withheld from the public answer; the log has it.
            lines.append(f"[-]{check} failed: reason withheld\n")
            reasons.append(f"[-]{check} failed: {error}\n")
            failed.append(check)
        else:
            lines.append(f"[+]{check} ok\n")
    unmatched_log = ""
    if unknown:
        names = _quoted(sorted(unknown))  # sets.String.List(): sorted
        lines.append(f"warn: some health checks cannot be excluded: no matches for {names}\n")
        unmatched_log = f"cannot exclude some health checks, no health checks are installed matching {names}"
    listing = "".join(lines)
    if failed:  # always verbose on failure; http.Error adds the newline
        return Answer(500, f"{listing}{name} check failed\n",
                      failure_log=f"{','.join(failed)} check failed: {name}\n{''.join(reasons)}",
                      unmatched_log=unmatched_log)
    if "verbose" not in query:  # the key's presence, whatever its value
        return Answer(200, "ok", unmatched_log=unmatched_log)
    return Answer(200, f"{listing}{name} check passed\n", unmatched_log=unmatched_log)


def individual(error: str) -> Answer:
    """adaptCheckToHandler: ``/healthz/<name>``, whatever the query."""
    if error:
        return Answer(500, f"internal server error: {error}\n")
    return Answer(200, "ok", nosniff=False)


__all__ = ["CONTENT_TYPE", "LOG", "PATH", "PING", "SYNC_LOOP", "Answer", "excluded", "individual", "root", "target"]
