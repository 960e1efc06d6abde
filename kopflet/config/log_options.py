"""The config file's ``logging`` (component-base logs/api/v1 ``LoggingConfiguration``) and its flags
(``--logging-format``, ``-v``, ``--vmodule``, ``--log-flush-frequency``), held to what kopflet's logging does.

Upstream decodes the struct strictly, defaults it (``SetRecommendedLoggingConfiguration``: format ``text``,
flushFrequency 5s, both formats' ``infoBufferSize`` "0") and checks it (``logsapi.Validate``). kubeadm writes it
at those defaults, so a kubeadm node's file carries it. kopflet logs through Python's ``logging``
(`kopflet.logs.setup`): the ``text`` or ``json`` format, at the verbosity of ``-v`` with ``--vmodule``'s per-file
verbosities (klog's semantics, `kopflet.logs.verbosity`); its handler writes each line at once, so any
flushFrequency holds. What it does not have (``splitStream``, a non-zero ``infoBufferSize``: upstream's alpha
options behind the LoggingAlphaOptions gate, off by default) is refused with `NOT_YET`, never ignored.

Pure: the YAML values and flag text in, the values kopflet keeps or a `LoggingError` out. ``flushFrequency`` is read
by `kopflet.config.settings` (a Go duration, or integer nanoseconds).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

from kopflet import gotext
from kopflet.api import qos

TEXT_FORMAT: Final = "text"
"""logsapi.DefaultLogFormat."""
JSON_FORMAT: Final = "json"
"""logsapi.JSONLogFormat: component-base logs/json, one JSON object a line."""
FORMATS: Final = (JSON_FORMAT, TEXT_FORMAT)
"""The formats ``--logging-format`` permits, as upstream's flag help lists them."""
DEFAULT_FLUSH_FREQUENCY: Final = 5.0
"""logsapi.LogFlushFreqDefault, what a zero flushFrequency becomes."""
MAX_VERBOSITY: Final = 2**31 - 1
"""logsapi.Validate: klog takes a positive int32 only."""
NOT_YET: Final = ("kopflet's logging has the text and json formats, the verbosity (-v, logging.verbosity), vmodule "
                  "and any flushFrequency; splitStream and a non-zero infoBufferSize (upstream's alpha options) it "
                  "does not have yet")
VMODULE_NOT_TEXT: Final = "logging.vmodule: Forbidden: Only supported for text log format"
"""logsapi.Validate's error for per-file verbosities with another format than text (field.Forbidden)."""


class LoggingError(ValueError):
    """A ``logging`` value upstream refuses, or one kopflet does not honour (`NOT_YET`)."""


@dataclasses.dataclass(frozen=True)
class OutputRouting:
    """logsapi.OutputRoutingOptions: one format's options."""

    split_stream: bool = False
    """Info messages to stdout, errors to stderr (upstream's alpha option)."""
    info_buffer_size: int = 0
    """Bytes of info messages buffered with splitStream (0: none)."""


@dataclasses.dataclass(frozen=True)
class FormatOptions:
    """logsapi.FormatOptions: the options of the text and json formats."""

    text: OutputRouting = OutputRouting()
    json: OutputRouting = OutputRouting()


DEFAULT_OPTIONS: Final = FormatOptions()


def _show(value: Any) -> str:
    if isinstance(value, str):
        return gotext.go_quote(value)
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return str(value).lower() if isinstance(value, bool) else repr(value)


def parse_format(value: Any) -> str:
    """``logging.format`` / ``--logging-format``: "" (the default, text), ``text`` or ``json`` (upstream's
    LoggingBetaOptions gate, on by default; kopflet takes every gate at its default only)."""
    if not isinstance(value, str):
        raise LoggingError(f"expected a string, got {_show(value)}")
    if value in ("", TEXT_FORMAT):
        return TEXT_FORMAT
    if value == JSON_FORMAT:
        return JSON_FORMAT
    raise LoggingError(f"Invalid value: {_show(value)}: Unsupported log format")  # logsapi.Validate's


def parse_verbosity(value: Any) -> int:
    """``logging.verbosity``: a VerbosityLevel (uint32), at most MaxInt32 (logsapi.Validate)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise LoggingError(f"expected a non-negative integer, got {_show(value)}")
    if value > MAX_VERBOSITY:
        raise LoggingError(f"Invalid value: {value}: Must be <= {MAX_VERBOSITY}")
    return value


def _check_pattern(pattern: str, where: str) -> None:
    """logsapi.Validate's checks of one filePattern (field.Required, field.Invalid)."""
    if not pattern:
        raise LoggingError(f"{where}Required value: File pattern must not be empty")
    if "=" in pattern or "," in pattern:
        raise LoggingError(f"{where}Invalid value: {_show(pattern)}: File pattern must not contain equal sign or "
                           f"comma")


def parse_vmodule(value: Any) -> tuple[tuple[str, int], ...]:
    """``logging.vmodule``: a list of ``{filePattern, verbosity}``, checked as logsapi.Validate checks it."""
    if not isinstance(value, list):
        raise LoggingError(f"expected a list of {{filePattern, verbosity}}, got {_show(value)}")
    items = []
    for index, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise LoggingError(f"item {index}: expected a mapping with filePattern and verbosity, got {_show(item)}")
        unknown = sorted(str(key) for key in set(item) - {"filePattern", "verbosity"})
        if unknown:
            raise LoggingError(f"item {index}: unknown field {_show(unknown[0])}")
        pattern = item.get("filePattern", "")
        if pattern is None:
            pattern = ""
        if not isinstance(pattern, str):
            raise LoggingError(f"item {index}: filePattern: expected a string, got {_show(pattern)}")
        try:
            level = parse_verbosity(item.get("verbosity", 0) if item.get("verbosity") is not None else 0)
        except LoggingError as exc:
            raise LoggingError(f"item {index}: verbosity: {exc}") from None
        _check_pattern(pattern, f"item {index}: ")
        items.append((pattern, level))
    return tuple(items)


def _go_parse_uint31(text: str) -> int:
    """strconv.ParseUint(text, 10, 31), with Go's error text (``strconv.ParseUint: parsing "x": invalid syntax``)."""
    if not text or not text.isascii() or not text.isdigit():
        raise LoggingError(f"strconv.ParseUint: parsing {gotext.go_quote(text)}: invalid syntax")
    number = int(text)
    if number > MAX_VERBOSITY:
        raise LoggingError(f"strconv.ParseUint: parsing {gotext.go_quote(text)}: value out of range")
    return number


def parse_vmodule_flag(text: str) -> tuple[tuple[str, int], ...]:
    """``--vmodule``: a comma-separated list of ``pattern=N`` (component-base VModuleConfigurationPflag.Set, which
    mirrors klog's parser): empty items (a trailing comma) are skipped; the errors are upstream's."""
    items = []
    for item in text.split(","):
        if not item:
            continue
        parts = item.split("=")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise LoggingError(f"{gotext.go_quote(item)} does not have the pattern=N format")
        try:
            level = _go_parse_uint31(parts[1])
        except LoggingError as exc:
            raise LoggingError(f"parsing verbosity in {gotext.go_quote(item)}: {exc}") from None
        items.append((parts[0], level))
    return tuple(items)


def render_vmodule(vmodule: tuple[tuple[str, int], ...]) -> str:
    """The ``--vmodule`` text of the items (VModuleConfigurationPflag.String)."""
    return ",".join(f"{pattern}={level}" for pattern, level in vmodule)


def validate(log_format: str, vmodule: tuple[tuple[str, int], ...]) -> list[str]:
    """The checks of logsapi.Validate across fields, once flags and file are merged: per-file verbosities only with
    the text format."""
    return [VMODULE_NOT_TEXT] if vmodule and log_format != TEXT_FORMAT else []


def _routing(name: str, value: Any) -> OutputRouting:
    """One format's options (``{splitStream, infoBufferSize}``), as decoded: a bool and a quantity of bytes."""
    if not isinstance(value, Mapping):
        raise LoggingError(f"{name}: expected a mapping with splitStream and infoBufferSize, got {_show(value)}")
    unknown = sorted(str(key) for key in set(value) - {"splitStream", "infoBufferSize"})
    if unknown:
        raise LoggingError(f"{name}: unknown field {_show(unknown[0])}")
    split = value.get("splitStream", False)
    if not isinstance(split, bool):
        raise LoggingError(f"{name}.splitStream: expected true or false, got {_show(split)}")
    size = value.get("infoBufferSize", 0)
    try:
        if isinstance(size, bool) or not isinstance(size, str | int | float):
            raise qos.QuantityError("not a quantity")
        amount = qos.value(size)  # Quantity.Value: bytes, rounded up
    except qos.QuantityError:
        raise LoggingError(f"{name}.infoBufferSize: expected a quantity such as \"0\" or \"64Ki\", "
                           f"got {_show(size)}") from None
    return OutputRouting(split_stream=split, info_buffer_size=amount)


def parse_options(value: Any) -> FormatOptions:
    """``logging.options``: ``{text: {...}, json: {...}}``; only upstream's defaults for now (no splitStream, an
    infoBufferSize of 0), as kubeadm writes them (`NOT_YET`)."""
    if not isinstance(value, Mapping):
        raise LoggingError(f"expected a mapping with text and json, got {_show(value)}")
    unknown = sorted(str(key) for key in set(value) - {"text", "json"})
    if unknown:
        raise LoggingError(f"unknown field {_show(unknown[0])}")
    options = FormatOptions(**{name: _routing(name, value[name] if value[name] is not None else {})
                               for name in ("text", "json") if name in value})
    for name in ("text", "json"):
        routing: OutputRouting = getattr(options, name)
        if routing.split_stream:
            raise LoggingError(f"{name}.splitStream true: {NOT_YET}")
        if routing.info_buffer_size:
            raise LoggingError(f"{name}.infoBufferSize {routing.info_buffer_size}: {NOT_YET}")
    return options


def render_options(options: FormatOptions) -> dict[str, Any]:
    """``options`` as encoding/json writes the defaulted struct: text then json, splitStream left out when false
    (omitempty), infoBufferSize as a quantity string (a defaulted QuantityValue is "0", never left out)."""
    def routing(value: OutputRouting) -> dict[str, Any]:
        body: dict[str, Any] = {"splitStream": True} if value.split_stream else {}
        body["infoBufferSize"] = str(value.info_buffer_size)
        return body
    return {"text": routing(options.text), "json": routing(options.json)}


__all__ = ["DEFAULT_FLUSH_FREQUENCY", "DEFAULT_OPTIONS", "FORMATS", "JSON_FORMAT", "MAX_VERBOSITY", "NOT_YET",
           "TEXT_FORMAT", "VMODULE_NOT_TEXT", "FormatOptions", "LoggingError", "OutputRouting", "parse_format",
           "parse_options", "parse_verbosity", "parse_vmodule", "parse_vmodule_flag", "render_options",
           "render_vmodule", "validate"]
