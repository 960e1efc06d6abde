"""
Go's text formats, in one place: how the upstream kubelet's Go prints values into messages, events, headers and
hashes, so that kopflet's text is the same byte for byte.

Pure: no I/O.

- `go_quote`: ``strconv.Quote`` (``fmt``'s ``%q`` of a string).
- `go_string_slice`: ``fmt``'s ``%s`` / ``%v`` of a ``[]string``.
- `go_duration`: ``time.Duration.String`` (``%v`` of a duration), with ``Duration.Truncate``.
- `go_float`: ``fmt``'s ``%v`` of a ``float64``.
- `canonical_header`: ``textproto.CanonicalMIMEHeaderKey`` (what ``http.Header`` does to a name).
- `go_json`: ``encoding/json.Marshal``.
- `join_host_port`: ``net.JoinHostPort``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

# ------------------------------------------------------------------------------------------------ strings

_QUOTE_ESCAPES = {"\a": r"\a", "\b": r"\b", "\f": r"\f", "\n": r"\n", "\r": r"\r", "\t": r"\t", "\v": r"\v",
                  '"': r"\"", "\\": r"\\"}


def go_quote(text: str) -> str:
    """Go's ``strconv.Quote`` (``%q``): printable runes kept, the rest escaped as Go writes them."""
    out = []
    for char in text:
        code = ord(char)
        if char in _QUOTE_ESCAPES:
            out.append(_QUOTE_ESCAPES[char])
        elif char == " " or char.isprintable():
            out.append(char)
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append("\ufffd")  # a lone surrogate cannot reach Go: its JSON decoder makes it U+FFFD, printable
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


def go_string_slice(items: Iterable[str]) -> str:
    """Go's ``%s`` / ``%v`` of a ``[]string`` (fmt's printValue of a slice): ``[a b c]``, nothing quoted."""
    return "[" + " ".join(items) + "]"


# ---------------------------------------------------------------------------------------------- durations

_SECOND = 1_000_000_000
_SMALL_UNITS = (("ms", 1_000_000), ("µs", 1_000), ("ns", 1))  # Go writes U+00B5 MICRO SIGN


def go_duration(seconds: float, *, truncate: float = 0) -> str:
    """Go's ``time.Duration.String`` (``10s``, ``1m20s``, ``5m0s``, ``1.5ms``) of a duration given in seconds.

    ``truncate`` > 0 is Go's ``d.Truncate(m)`` first (toward zero to a multiple of it), as the kubelet does to
    image pull times; done on whole nanoseconds, so ``1.001`` truncated to ``0.001`` stays ``1.001s``."""
    nanos = round(seconds * 1e9)
    step = round(truncate * 1e9)
    if step > 0:  # d - d%m, Go's % keeping the sign of d
        rest = abs(nanos) % step
        nanos -= rest if nanos > 0 else -rest
    if nanos == 0:
        return "0s"
    sign = "-" if nanos < 0 else ""
    nanos = abs(nanos)
    if nanos < _SECOND:
        unit, size = next((u, s) for u, s in _SMALL_UNITS if nanos >= s)
        return sign + _fraction(nanos, size) + unit
    hours, rest = divmod(nanos, 3600 * _SECOND)
    minutes, rest = divmod(rest, 60 * _SECOND)
    text = _fraction(rest, _SECOND) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{text}"
    if minutes:
        return f"{sign}{minutes}m{text}"
    return sign + text


def go_float(value: float) -> str:
    """``fmt``'s ``%v`` of a ``float64`` (strconv's ``'g'`` at the shortest precision): ``600``, ``0.5``, and the
    exponent form when the exponent is below -4 or at least 6 (``1e-05``, ``1.234567e+06``). Python's shortest
    digits (``repr``) are Go's."""
    if not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    if value == 0:
        return "0"
    number = Decimal(repr(float(value))).normalize()
    sign, digits, exponent = number.as_tuple()
    assert isinstance(exponent, int)
    point = exponent + len(digits) - 1  # the exponent of the first digit
    if -4 <= point < 6:  # strconv: shortest, so eprec is 6
        return format(number, "f")
    mantissa = str(digits[0]) + ("." + "".join(map(str, digits[1:])) if len(digits) > 1 else "")
    return f"{'-' if sign else ''}{mantissa}e{'+' if point >= 0 else '-'}{abs(point):02d}"


def _fraction(value: int, unit: int) -> str:
    """``value / unit`` in decimal, exact, trailing zeros dropped (Go's fmtFrac and fmtInt)."""
    whole, rest = divmod(value, unit)
    if not rest:
        return str(whole)
    digits = len(str(unit)) - 1
    return f"{whole}." + f"{rest:0{digits}d}".rstrip("0")


# ----------------------------------------------------------------------------------------------- network

# net/textproto isTokenTable (validHeaderFieldByte): the bytes a header name may have.
_TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def canonical_header(name: str) -> str:
    """Go's ``textproto.CanonicalMIMEHeaderKey``: upper case first and after each ``-``, lower case elsewhere
    (``x-custom-header`` -> ``X-Custom-Header``); a name with a byte that is not a token (a space, non-ASCII)
    is returned unchanged."""
    if any(char not in _TOKEN for char in name):
        return name
    out = []
    upper = True
    for char in name:
        out.append(char.upper() if upper else char.lower())
        upper = char == "-"
    return "".join(out)


def join_host_port(host: str, port: int | str) -> str:
    """Go's ``net.JoinHostPort``: a host with a colon (an IPv6 literal) goes in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# --------------------------------------------------------------------------------------------------- JSON

_HTML_ESCAPES = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"))
_LINE_SEPARATOR_ESCAPES = (("\u2028", "\\u2028"), ("\u2029", "\\u2029"))


def go_json(value: Any, *, sort_keys: bool = False, escape_html: bool = True, ensure_ascii: bool = False) -> str:
    """Go's ``json.Marshal`` text of strings, numbers, lists and maps: compact, UTF-8, ``<``, ``>`` and ``&``
    escaped as ``\\u003c`` etc., U+2028 and U+2029 always escaped.

    ``sort_keys`` where the value stands for a Go map (Go sorts map keys), not where it stands for a struct
    (built in the struct's field order). ``escape_html=False`` is an Encoder with ``SetEscapeHTML(false)``.
    ``ensure_ascii`` (non-ASCII as ``\\uXXXX``) is not Go's: only for callers whose output already has it.
    Floats are not formatted as Go formats them; the callers have none."""
    text = json.dumps(value, sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=ensure_ascii)
    for char, escape in (*_HTML_ESCAPES, *_LINE_SEPARATOR_ESCAPES) if escape_html else _LINE_SEPARATOR_ESCAPES:
        text = text.replace(char, escape)
    return text


__all__ = ["canonical_header", "go_duration", "go_float", "go_json", "go_quote", "go_string_slice", "join_host_port"]
