"""
Go's ``encoding/pem``, byte for byte: `decode` is ``pem.Decode``, `encode` is ``pem.EncodeToMemory``. Pure.

The upstream kubelet reads every PEM input with pem.Decode (the clusterTrustBundle sources' anchors, the
podCertificate chains, client-go's certificate store) and writes PEM with pem.Encode, so kopflet uses this one codec
for all of them, not a pattern that only looks like it: pem.Decode takes a block only at a line's start, takes the
last BEGIN before the first END (repeated BEGIN lines are skipped), reads ``Key: Value`` header lines, wants a blank
line between headers and the END line, an END line of the block's own type ending in blanks only, and a body that
decodes as padded standard base64 once blanks and line ends are dropped; a block that fails any of these is passed
over for the next one. Types and header text are Go strings (any bytes), kept here as str through UTF-8 with
``surrogateescape``, so they are written back as the same bytes.

Mirrors go1.26 src/encoding/pem/pem.go (getLine, removeSpacesAndTabs, Decode, Encode, lineBreaker) and the parts of
encoding/base64 (StdEncoding.Decode) and bytes.TrimSpace it relies on.
"""

from __future__ import annotations

import base64
import dataclasses
import re

_PEM_START = b"\n-----BEGIN "
_PEM_END = b"\n-----END "
_PEM_END_OF_LINE = b"-----"
_PEM_LINE_LENGTH = 64
_PROC_TYPE = "Proc-Type"
"""RFC 1421 section 4.6.1.1: Encode writes this header first, the others sorted by key."""

_BASE64 = re.compile(rb"[A-Za-z0-9+/]*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")
# What bytes.TrimSpace trims: ASCII's \t \n \v \f \r and space, and the other runes unicode.IsSpace takes (U+0085,
# U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000), in UTF-8. Every alternative starts with
# a byte that starts a rune, so the runs found are the runes Go's DecodeRune and DecodeLastRune see.
_SPACE = rb"(?:[\t\n\v\f\r ]|\xc2[\x85\xa0]|\xe1\x9a\x80|\xe2\x80[\x80-\x8a\xa8\xa9\xaf]|\xe2\x81\x9f|\xe3\x80\x80)"
_LEADING_SPACE = re.compile(_SPACE + rb"+")
_TRAILING_SPACE = re.compile(_SPACE + rb"+\Z")


@dataclasses.dataclass(frozen=True)
class Block:
    """Go's pem.Block: the type (``CERTIFICATE``, ``RSA PRIVATE KEY`` ...), the headers (``Key: Value`` lines, one
    per key: a Go map, so `decode` gives them sorted by key) and the decoded bytes."""

    type: str
    headers: tuple[tuple[str, str], ...] = ()
    data: bytes = b""


def _text(raw: bytes) -> str:
    """A Go string as str: UTF-8, any other byte kept (``surrogateescape``) so `_raw` gives it back."""
    return raw.decode("utf-8", "surrogateescape")


def _raw(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _get_line(data: bytes, start: int = 0) -> tuple[bytes, int]:
    """getLine on ``data[start:]``: the first line (up to ``\\n`` or ``\\r\\n``) without its trailing blanks, and
    where the rest after its line end starts (offsets, not copies, keep a long input linear as Go's slices do)."""
    i = data.find(b"\n", start)
    if i < 0:
        i = j = len(data)
    else:
        j = i + 1
        if i > start and data[i - 1] == 0x0D:
            i -= 1
    return data[start:i].rstrip(b" \t"), j


def _trim_space(data: bytes) -> bytes:
    """bytes.TrimSpace: Unicode white space off both ends (Python's bytes.strip knows only ASCII's)."""
    start = _LEADING_SPACE.match(data)
    data = data[start.end():] if start else data
    end = _TRAILING_SPACE.search(data)
    return data[:end.start()] if end else data


def _base64_decode(body: bytes) -> bytes | None:
    """removeSpacesAndTabs, then base64.StdEncoding.Decode (which skips ``\\r`` and ``\\n``): whole quantums, the
    padding only at the very end; None on its CorruptInputError. Not binascii alone: its strict mode would take a
    stray ``=`` after a whole quantum. Like StdEncoding (not Strict), the unused bits of the last quantum may be set."""
    cleaned = body.translate(None, b" \t\r\n")
    if len(cleaned) % 4 or not _BASE64.fullmatch(cleaned):
        return None
    return base64.b64decode(cleaned)


def _decode_at(data: bytes, start: int) -> tuple[Block | None, int]:
    """pem.Decode of ``data[start:]``: the block and where its rest starts, or (None, `start`). Go's ``rest`` is
    ``data[base:]`` here, its indexes relative to ``base`` as in Go."""
    base = start
    end_trailer_index = 0
    while True:
        # Past the END already seen, when a block was tried and failed.
        if end_trailer_index < 0 or end_trailer_index > len(data) - base:
            return None, start
        base += end_trailer_index

        # The first END line, then the last BEGIN line before it, which must start a line (or the input).
        end_index = data.find(_PEM_END, base)
        if end_index < 0:
            return None, start
        end_index -= base
        end_trailer_index = end_index + len(_PEM_END)
        begin_index = data.rfind(_PEM_START[1:], base, base + end_index) - base
        if begin_index < 0 or (begin_index > 0 and data[base + begin_index - 1] != 0x0A):
            continue
        skip = begin_index + len(_PEM_START) - 1
        base += skip
        end_index -= skip
        end_trailer_index -= skip

        type_line, following = _get_line(data, base)
        end_index -= following - base
        end_trailer_index -= following - base
        base = following
        if not type_line.endswith(_PEM_END_OF_LINE):
            continue
        type_line = type_line[:-len(_PEM_END_OF_LINE)]

        headers: dict[bytes, bytes] = {}
        while True:
            if base == len(data):
                return None, start
            line, following = _get_line(data, base)
            key, colon, value = line.partition(b":")
            if not colon:
                break
            headers[_trim_space(key)] = _trim_space(value)
            end_index -= following - base
            end_trailer_index -= following - base
            base = following

        # With headers, a line break must separate them from the END line.
        if headers and end_index < 0:
            continue

        # After END's dashes and space: the same type, five dashes, then blanks only to the line's end.
        end_trailer_length = len(type_line) + len(_PEM_END_OF_LINE)
        trailer_start = base + end_trailer_index
        if len(data) - trailer_start < end_trailer_length:
            continue
        end_trailer = data[trailer_start:trailer_start + end_trailer_length]
        if not end_trailer.startswith(type_line) or not end_trailer.endswith(_PEM_END_OF_LINE):
            continue
        if _get_line(data, trailer_start + end_trailer_length)[0]:
            continue

        body = b""
        if end_index > 0:
            decoded = _base64_decode(data[base:base + end_index])
            if decoded is None:
                continue
            body = decoded
        # The -1: an empty block's END may have matched without its leading line break (end_index is -1 then).
        _, following = _get_line(data, base + end_index + len(_PEM_END) - 1)
        return Block(_text(type_line), tuple(sorted((_text(k), _text(v)) for k, v in headers.items())), body), following


def decode(data: bytes) -> tuple[Block | None, bytes]:
    """pem.Decode: the next PEM block and the input after it (from the line after its END line), or (None,
    `data`) when there is none."""
    block, following = _decode_at(data, 0)
    return (block, data[following:]) if block is not None else (None, data)


def decode_all(data: bytes) -> list[Block]:
    """Every block pem.Decode finds, in order: the ``for { b, rest = pem.Decode(rest); if b == nil { break } }``
    loop of its callers (text around and between blocks, and the blocks it passes over, are dropped)."""
    found = []
    position = 0
    while True:
        block, position = _decode_at(data, position)
        if block is None:
            return found
        found.append(block)


def encode(block: Block) -> bytes:
    """pem.EncodeToMemory: the BEGIN line, the headers (``Proc-Type`` first, the others sorted by key, then a blank
    line), the base64 in lines of 64 characters, the END line. ValueError (Encode's error, where EncodeToMemory
    gives nil) for a header key with a colon, before anything is written."""
    headers = dict(block.headers)
    if any(":" in key for key in headers):
        raise ValueError("pem: cannot encode a header key that contains a colon")
    kind = _raw(block.type)
    out = [_PEM_START[1:], kind, b"-----\n"]
    if headers:
        keys = sorted((k for k in headers if k != _PROC_TYPE), key=_raw)  # slices.Sort: byte order
        if _PROC_TYPE in headers:
            keys.insert(0, _PROC_TYPE)
        out.extend(_raw(k) + b": " + _raw(headers[k]) + b"\n" for k in keys)
        out.append(b"\n")
    text = base64.b64encode(block.data)
    out.extend(text[i:i + _PEM_LINE_LENGTH] + b"\n" for i in range(0, len(text), _PEM_LINE_LENGTH))
    out += [_PEM_END[1:], kind, b"-----\n"]
    return b"".join(out)


__all__ = ["Block", "decode", "decode_all", "encode"]
