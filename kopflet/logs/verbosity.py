"""klog's verbosity (``-v``, ``--vmodule``) on Python's logging levels.

Upstream logs ``klog.V(n).Info`` lines only when ``n`` is at most ``-v``, or at most the level of the first
``--vmodule`` pattern matching the base name of the Go file that logs (without ``.go``). kopflet logs through
Python's ``logging``, so each V level is a logging level (`v`):

- V(0) is INFO (and WARNING, ERROR above it: always written);
- V(1), V(2), V(3) are the levels just below INFO (19, 18, 17), named ``V1``, ``V2``, ``V3``;
- V(4) is DEBUG (10): the Kubernetes convention ("V(4): debug level verbosity"), so every library's and Kopf's
  debug lines come at ``-v=4``, as they did before kopflet had V levels;
- V(5) and up are below DEBUG (9, 8, ... down to 1), named ``V5`` ...

`VerbosityFilter` (on the one handler of the root logger, `kopflet.logs.setup`) decides each record as klog's
``V()``: written when its V level is at most ``-v``, or at most the level of the first non-zero ``--vmodule`` pattern
matching the record's ``module`` (Python's name for the base name of the source file without ``.py``, the same
thing klog matches). It also puts Kopf's per-object lines (the ``kopf.objects`` logger at INFO: "Handler
'pod_event' succeeded." for every pod event) at V(2), where upstream writes its per-pod SyncLoop lines.

Pure: levels and records in, decisions out. Importing it names the V levels in ``logging`` (`logging.addLevelName`),
so records show ``V2`` rather than ``Level 18`` whoever configured the handlers.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Final

MAX_LEVEL: Final = 13
"""The deepest V level with a logging level of its own (1); deeper ones share it."""
KOPF_OBJECTS_LOGGER: Final = "kopf.objects"
"""Kopf's per-object logger: its INFO lines are per event."""
DEMOTED: Final[Mapping[str, int]] = {KOPF_OBJECTS_LOGGER: 2}
"""Loggers whose INFO lines are per-event chatter, and the V level they are written at instead."""

_DEBUG_VERBOSITY: Final = 4


def v(level: int) -> int:
    """The logging level of klog's ``V(level)``: ``logger.log(v(2), ...)`` is ``klog.V(2).Info(...)``."""
    if level <= 0:
        return logging.INFO
    if level < _DEBUG_VERBOSITY:
        return logging.INFO - level
    return max(logging.DEBUG - (level - _DEBUG_VERBOSITY), 1)


def verbosity_of(levelno: int) -> int:
    """The V level a record of this logging level is written at: the least ``-v`` that shows it (a level between
    V(3) and DEBUG counts as V(4); one below V(13) as V(13))."""
    for level in range(MAX_LEVEL + 1):
        if v(level) <= levelno:
            return level
    return MAX_LEVEL


for _level in range(1, MAX_LEVEL + 1):
    if _level != _DEBUG_VERBOSITY:
        logging.addLevelName(v(_level), f"V{_level}")


def _glob_regex(pattern: str) -> re.Pattern[str] | None:
    """Go's ``filepath.Match`` pattern as a regular expression: ``*`` any run of characters but ``/``, ``?`` one of
    them, ``[...]`` a class (``^`` negates, ``a-z`` ranges), ``\\`` escapes. A malformed pattern is None: Go's
    ErrBadPattern, which klog takes as no match."""
    out = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        i += 1
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "\\":
            if i == len(pattern):
                return None
            out.append(re.escape(pattern[i]))
            i += 1
        elif char == "[":
            negate = i < len(pattern) and pattern[i] == "^"
            if negate:
                i += 1
            ranges = []
            first = True
            while True:
                if i == len(pattern):
                    return None  # no closing ]
                if pattern[i] == "]" and not first:
                    i += 1
                    break
                first = False
                low, i = _class_char(pattern, i)
                if low is None:
                    return None
                high = low
                if i < len(pattern) and pattern[i] == "-":
                    high, i = _class_char(pattern, i + 1)
                    if high is None or high < low:
                        return None
                ranges.append(re.escape(low) if low == high else f"{re.escape(low)}-{re.escape(high)}")
            body = "".join(ranges)
            out.append(f"[^/{body}]" if negate else f"[{body}]")
        else:
            out.append(re.escape(char))
    return re.compile("".join(out) + r"\Z", re.DOTALL)


def _class_char(pattern: str, i: int) -> tuple[str | None, int]:
    """One character of a ``[...]`` class (Go's getEsc): an escaped one, or any but ``-``, ``]`` and the end."""
    if i >= len(pattern) or pattern[i] in "-]":
        return None, i
    if pattern[i] == "\\":
        i += 1
        if i >= len(pattern):
            return None, i
    return pattern[i], i + 1


def match(pattern: str, name: str) -> bool:
    """klog's modulePat.match: a literal pattern (no ``\\*?[]``) compared as a string, else Go's filepath.Match."""
    if not any(char in pattern for char in "\\*?[]"):
        return name == pattern
    regex = _glob_regex(pattern)
    return regex is not None and regex.match(name) is not None


def module_verbosity(module: str, vmodule: Sequence[tuple[str, int]]) -> int:
    """The V level ``--vmodule`` gives a source file (its base name without the extension): the first matching
    pattern's, 0 when none matches. klog drops ``pattern=0`` items when it parses the flag, so they never match."""
    for pattern, level in vmodule:
        if level > 0 and match(pattern, module):
            return level
    return 0


def root_level(verbosity: int, vmodule: Sequence[tuple[str, int]]) -> int:
    """The root logger's level: low enough for the most verbose of ``-v`` and ``--vmodule`` (the filter then
    holds back what a file's own verbosity does not show)."""
    return v(max([verbosity, *(level for _, level in vmodule)]))


class VerbosityFilter(logging.Filter):
    """klog's V() for every record that reaches the handler it is on."""

    def __init__(self, verbosity: int, vmodule: Sequence[tuple[str, int]] = (),
                 demoted: Mapping[str, int] = DEMOTED) -> None:
        super().__init__()
        self.verbosity = verbosity
        self.vmodule = tuple((pattern, level) for pattern, level in vmodule if level > 0)
        self.demoted = dict(demoted)
        self._modules: dict[str, int] = {}

    def threshold(self, module: str) -> int:
        """The verbosity lines from this source file are written up to: ``-v``, or its ``--vmodule`` level."""
        if not self.vmodule:
            return self.verbosity
        found = self._modules.get(module)
        if found is None:
            found = self._modules[module] = max(self.verbosity, module_verbosity(module, self.vmodule))
        return found

    def filter(self, record: logging.LogRecord) -> bool:
        demoted = self.demoted.get(record.name)
        if demoted is not None and record.levelno == logging.INFO:
            record.levelno, record.levelname = v(demoted), logging.getLevelName(v(demoted))
        return verbosity_of(record.levelno) <= self.threshold(record.module)


__all__ = ["DEMOTED", "KOPF_OBJECTS_LOGGER", "MAX_LEVEL", "VerbosityFilter", "match", "module_verbosity",
           "root_level", "v", "verbosity_of"]
