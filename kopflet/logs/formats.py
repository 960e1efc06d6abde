"""The two log formats of ``--logging-format``: ``text`` (Kopf's line, as kopflet always wrote it) and ``json``
(component-base logs/json).

``json`` is upstream's shape, one object a line, keys in zap's order: ``ts`` (the time in milliseconds since the
epoch, a float: upstream's epochMillisTimeEncoder), ``logger`` (the Python logger's name: zap's NameKey, which
upstream's named loggers fill), ``caller`` (``<directory>/<file>:<line>`` of the call, zap's ShortCallerEncoder),
``msg``, then ``v`` (the V level, `kopflet.logs.verbosity`) for everything but errors, then the key/values: the
object a Kopf per-object logger is about as klog.KObj writes it (``"pod":{"name":...,"namespace":...}``) and any
``extra=`` of the call. Errors (ERROR and CRITICAL) have no ``v``; their exception is ``err`` (its text, as
zapr's ErrorKey), with the Python traceback under ``stacktrace``. Warnings are info lines at ``v`` 0, as klog's
Warning is under the json format (logr has no warning level).

``text`` keeps Kopf's ``[time] logger [LEVEL] message`` (V levels show as ``V1``, ``V2`` ...; V(4) as DEBUG), with
Kopf's ``[namespace/name]`` prefix on per-object lines: klog's own header (``I0102 15:04:05.000000 ...``) would
change every line operators already read, for no information the line lacks.

Pure: a record in, a line out (the record's own time; no clock, no I/O).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, Final

from kopflet.logs.verbosity import verbosity_of

TEXT_LINE: Final = "[%(asctime)s] %(name)-20.20s [%(levelname)-8.8s] %(message)s"
"""Kopf's LogFormat.FULL, the line kopflet has always written."""
K8S_REF: Final = "k8s_ref"
"""The record attribute where Kopf's per-object loggers put the object's reference."""
# LogRecord's own attributes, Kopf's and the formatters': everything else on a record is an `extra=` key/value.
_RESERVED: Final = frozenset({
    *logging.LogRecord("", 0, "", 0, "", (), None).__dict__, "message", "asctime", "taskName",
    K8S_REF, "k8s_skip", "settings",
})


def _object_prefix(record: logging.LogRecord) -> str:
    ref = getattr(record, K8S_REF, None)
    if not isinstance(ref, Mapping):
        return ""
    namespace, name = ref.get("namespace") or "", ref.get("name") or ""
    return f"[{namespace}/{name}] " if namespace else f"[{name}] "


class TextFormatter(logging.Formatter):
    """Kopf's full line with its per-object prefix (Kopf's ObjectPrefixingTextFormatter)."""

    def __init__(self) -> None:
        super().__init__(TEXT_LINE)

    def formatMessage(self, record: logging.LogRecord) -> str:
        prefix = _object_prefix(record)
        if not prefix:
            return super().formatMessage(record)
        saved = record.message
        record.message = prefix + saved
        try:
            return super().formatMessage(record)
        finally:
            record.message = saved


def caller(pathname: str, lineno: int) -> str:
    """zap's ShortCallerEncoder (TrimmedPath): the file with its directory, and the line."""
    parts = pathname.replace("\\", "/").split("/")
    short = "/".join(part for part in parts[-2:] if part)
    return f"{short}:{lineno}"


def object_ref(ref: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
    """A Kopf object reference as klog.KObj writes it under the kind's name: ``pod`` -> ``{name, namespace}``
    (namespace left out for cluster-scoped objects)."""
    key = str(ref.get("kind") or "object").lower()
    value = {"name": str(ref.get("name") or "")}
    if ref.get("namespace"):
        value["namespace"] = str(ref["namespace"])
    return key, value


class JsonFormatter(logging.Formatter):
    """component-base logs/json: one JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {"ts": record.created * 1000.0, "logger": record.name,
                                 "caller": caller(record.pathname, record.lineno), "msg": record.getMessage()}
        error = record.levelno >= logging.ERROR
        if not error:
            entry["v"] = verbosity_of(record.levelno)
        ref = getattr(record, K8S_REF, None)
        if isinstance(ref, Mapping):
            key, value = object_ref(ref)
            entry[key] = value
        for key, value in record.__dict__.items():
            if key not in _RESERVED and key not in entry:
                entry[key] = value
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            entry["err"] = str(exc) or type(exc).__name__
            entry["stacktrace"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["stacktrace"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, separators=(",", ":"), default=str)


def formatter(log_format: str) -> logging.Formatter:
    """The formatter of a ``--logging-format`` (checked by `kopflet.config.log_options`)."""
    return JsonFormatter() if log_format == "json" else TextFormatter()


__all__ = ["K8S_REF", "TEXT_LINE", "JsonFormatter", "TextFormatter", "caller", "formatter", "object_ref"]
