"""The config file's ``logging`` (component-base logs/api/v1 ``LoggingConfiguration``) and its flags
(``--logging-format``, ``-v``, ``--vmodule``, ``--log-flush-frequency``, ``--log-{text,json}-split-stream``,
``--log-{text,json}-info-buffer-size``), checked as upstream checks them.

Upstream decodes the struct strictly, defaults it (``SetRecommendedLoggingConfiguration``: format ``text``,
flushFrequency 5s, both formats' ``infoBufferSize`` "0") and checks it (``logsapi.Validate``, `validate`). kubeadm
writes it at those defaults, so a kubeadm node's file carries it. kopflet logs through Python's ``logging``
(`kopflet.logs.setup`): the ``text`` or ``json`` format, at the verbosity of ``-v`` with ``--vmodule``'s per-file
verbosities (klog's semantics, `kopflet.logs.verbosity`). Each format's output routing options (``splitStream``:
info lines to stdout, errors to stderr; ``infoBufferSize``: the info stream buffered, flushed every flushFrequency
and at exit) are upstream's alpha options: `validate` refuses them unless the LoggingAlphaOptions gate is on, in
upstream's words (``logging.options.json.splitStream: Forbidden: Feature LoggingAlphaOptions is disabled``), and
the json format unless LoggingBetaOptions is (on by default).

Pure: the YAML values and flag text in, the values kopflet keeps or a `LoggingError` out. ``flushFrequency`` is read
by `kopflet.config.settings` (a Go duration, or integer nanoseconds).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

from kopflet import gotext
from kopflet.api import qos
from kopflet.eviction import thresholds

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
LOGGING_ALPHA_OPTIONS: Final = "LoggingAlphaOptions"
"""logsapi.LoggingAlphaOptions (alpha, off): guards splitStream and a non-zero infoBufferSize of either format."""
LOGGING_BETA_OPTIONS: Final = "LoggingBetaOptions"
"""logsapi.LoggingBetaOptions (beta, on): guards the json format (logs/json/register)."""
VMODULE_NOT_TEXT: Final = "logging.vmodule: Forbidden: Only supported for text log format"
"""logsapi.Validate's error for per-file verbosities with another format than text (field.Forbidden)."""
JSON_DISABLED: Final = f"logging.format: Forbidden: Log format json is disabled, see {LOGGING_BETA_OPTIONS} feature"
"""logsapi.Validate's error for the json format with LoggingBetaOptions off."""
# apimachinery resource.ParseQuantity's errors (ErrFormatWrong, ErrSuffix), as QuantityValue.Set returns them.
_ERR_FORMAT_WRONG: Final = ("quantities must match the regular expression "
                            "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
_ERR_SUFFIX: Final = "unable to parse quantity's suffix"


class LoggingError(ValueError):
    """A ``logging`` value upstream refuses, in its words where it has them."""


def alpha_option_disabled(path: str) -> str:
    """logsapi.Validate's error for an alpha option set with LoggingAlphaOptions off (field.Forbidden)."""
    return f"{path}: Forbidden: Feature {LOGGING_ALPHA_OPTIONS} is disabled"


@dataclasses.dataclass(frozen=True)
class OutputRouting:
    """logsapi.OutputRoutingOptions: one format's options."""

    split_stream: bool = False
    """Info messages to stdout, errors to stderr (upstream's alpha option)."""
    info_buffer_size: str = "0"
    """The quantity of bytes of info messages buffered with splitStream, as Quantity.String() writes it ("0":
    none, the default SetRecommendedLoggingConfiguration gives)."""

    @property
    def info_buffer_bytes(self) -> int:
        """``InfoBufferSize.Value()``: the bytes, rounded up (what Validate tests against zero and the factories
        buffer when positive)."""
        return qos.value(self.info_buffer_size)


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
    """``logging.format`` / ``--logging-format``: "" (the default, text), ``text`` or ``json`` (which needs the
    LoggingBetaOptions gate, on by default: `validate`)."""
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


def validate(log_format: str, vmodule: tuple[tuple[str, int], ...], options: FormatOptions | None = None, *,
             alpha_options: bool = False, beta_options: bool = True) -> list[str]:
    """logsapi.Validate's checks across fields, once flags and file are merged, in its order and words: the json
    format needs LoggingBetaOptions; per-file verbosities only with the text format; both formats' options (all
    validated, though only the selected one's are used) need LoggingAlphaOptions to leave their defaults."""
    errors = []
    if log_format == JSON_FORMAT and not beta_options:
        errors.append(JSON_DISABLED)
    if vmodule and log_format != TEXT_FORMAT:
        errors.append(VMODULE_NOT_TEXT)
    for name, routing in (("text", (options or DEFAULT_OPTIONS).text), ("json", (options or DEFAULT_OPTIONS).json)):
        if routing.split_stream and not alpha_options:
            errors.append(alpha_option_disabled(f"logging.options.{name}.splitStream"))
        if routing.info_buffer_bytes != 0 and not alpha_options:
            errors.append(alpha_option_disabled(f"logging.options.{name}.infoBufferSize"))
    return errors


def _canonical_quantity(text: str) -> str:
    """resource.ParseQuantity, then Quantity.String(): the canonical form upstream writes back (``64Ki``, ``1k``
    for 1000, ``0``)."""
    try:
        amount = qos.parse_quantity(text)
    except qos.QuantityError as exc:
        raise LoggingError(_ERR_FORMAT_WRONG if str(exc).startswith("quantities must") else _ERR_SUFFIX) from None
    return thresholds.format_quantity(amount, thresholds.quantity_format(text))


def parse_info_buffer_size_flag(text: str) -> str:
    """``--log-{text,json}-info-buffer-size``: resource.QuantityValue.Set (ParseQuantity; its errors)."""
    return _canonical_quantity(text)


def parse_info_buffer_size(value: Any) -> str:
    """``logging.options.{text,json}.infoBufferSize``: a quantity, as a string or a number (Quantity.UnmarshalJSON
    parses a JSON number's text)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise LoggingError(f'expected a quantity such as "0" or "64Ki", got {_show(value)}')
    try:
        return _canonical_quantity(value if isinstance(value, str) else repr(value))
    except LoggingError:
        raise LoggingError(f'expected a quantity such as "0" or "64Ki", got {_show(value)}') from None


def render_options(options: FormatOptions) -> dict[str, Any]:
    """``options`` as encoding/json writes the defaulted struct: text then json, splitStream left out when false
    (omitempty), infoBufferSize as a quantity string (a defaulted QuantityValue is "0", never left out)."""
    def routing(value: OutputRouting) -> dict[str, Any]:
        body: dict[str, Any] = {"splitStream": True} if value.split_stream else {}
        body["infoBufferSize"] = value.info_buffer_size
        return body
    return {"text": routing(options.text), "json": routing(options.json)}


__all__ = ["DEFAULT_FLUSH_FREQUENCY", "DEFAULT_OPTIONS", "FORMATS", "JSON_DISABLED", "JSON_FORMAT",
           "LOGGING_ALPHA_OPTIONS", "LOGGING_BETA_OPTIONS", "MAX_VERBOSITY", "TEXT_FORMAT", "VMODULE_NOT_TEXT",
           "FormatOptions", "LoggingError", "OutputRouting", "alpha_option_disabled", "parse_format",
           "parse_info_buffer_size", "parse_info_buffer_size_flag", "parse_verbosity", "parse_vmodule",
           "parse_vmodule_flag", "render_options", "render_vmodule", "validate"]
