"""kopflet.gopem: Go's encoding/pem (Decode, EncodeToMemory) byte for byte.

The cases follow go1.26's src/encoding/pem/pem_test.go (getLine, the block kinds of its pemData, badPEMTests, the
empty block, headers, CVE-2022-24675's repeated BEGIN lines, the line breaker, the round trip) with inputs of
their own, and add what the kubelet's callers meet (text around and between blocks, a block passed over for the
next, CRLF, base64's padding rules, Unicode blanks around header keys and values). Every table here was checked
against Go's encoding/pem on the same inputs.
"""

from __future__ import annotations

import base64

import pytest

from kopflet import gopem
from kopflet.gopem import Block

A, B = b"AAA", bytes(range(100))
A64 = base64.b64encode(A).decode()  # "QUFB"
B64 = base64.b64encode(B).decode()
B64_LINES = B64[:64] + "\n" + B64[64:]


def block(kind: str = "CERTIFICATE", body: str = A64, headers: str = "", end: str = "") -> str:
    """A block as text: ``headers`` go between the BEGIN line and the body; ``end`` is the END line's type."""
    return f"-----BEGIN {kind}-----\n{headers}{body}\n-----END {end or kind}-----\n"


# ------------------------------------------------------------------------------------------------ getLine

# pem_test.go's getLineTests: (input, the line, the rest)
GET_LINE_CASES = [
    (b"abc", b"abc", b""),
    (b"abc\r", b"abc\r", b""),
    (b"abc\n", b"abc", b""),
    (b"abc\r\n", b"abc", b""),
    (b"abc\nd", b"abc", b"d"),
    (b"abc\r\nd", b"abc", b"d"),
    (b"\nabc", b"", b"abc"),
    (b"\r\nabc", b"", b"abc"),
    (b"abc\t \nd", b"abc", b"d"),
    (b"\t abc\nd", b"\t abc", b"d"),
    (b"abc\n\t d", b"abc", b"\t d"),
    (b"abc\nd\t ", b"abc", b"d\t "),
]


@pytest.mark.parametrize(("data", "line", "rest"), GET_LINE_CASES)
def test_get_line(data: bytes, line: bytes, rest: bytes) -> None:
    got, following = gopem._get_line(data)
    assert (got, data[following:]) == (line, rest)
    prefixed = b"xyz\n" + data  # from an offset, as Decode reads its input
    got, following = gopem._get_line(prefixed, 4)
    assert (got, prefixed[following:]) == (line, rest)


# ------------------------------------------------------------------------------------------------- Decode

H = tuple[tuple[str, str], ...]
# (name, input, the first block Decode finds (type, headers, bytes) or None, the rest it returns)
DECODE_CASES: list[tuple[str, str, tuple[str, H, bytes] | None, str]] = [
    ("empty input", "", None, ""),
    ("no PEM", "no pem here\n", None, "no pem here\n"),
    ("one block", block(), ("CERTIFICATE", (), A), ""),
    ("the rest starts on the line after END", block() + "tail\nmore", ("CERTIFICATE", (), A), "tail\nmore"),
    ("no line end after END", block()[:-1], ("CERTIFICATE", (), A), ""),
    ("CRLF line ends", block(body=B64_LINES).replace("\n", "\r\n") + "x", ("CERTIFICATE", (), B), "x"),
    ("blanks after the END line", block()[:-1] + " \t\r\nx", ("CERTIFICATE", (), A), "x"),
    ("blanks after the BEGIN line", block().replace("-----\n", "----- \t\n", 1), ("CERTIFICATE", (), A), ""),
    ("text before, BEGIN at a line start", "verify return:0\n" + block(), ("CERTIFICATE", (), A), ""),
    ("BEGIN not at a line start", "junk " + block(), None, "junk " + block()),
    ("BEGIN indented", "  " + block(), None, "  " + block()),
    ("wrapped body, blanks and tabs in it", block(body=" " + B64[:10] + "\t" + B64[10:64] + " \n" + B64[64:]),
     ("CERTIFICATE", (), B), ""),
    ("any type, with blanks and a colon", block("a:b c"), ("a:b c", (), A), ""),
    # pemData's blocks
    ("headers: Proc-Type, DEK-Info, a blank line, the body",
     block("RSA PRIVATE KEY", headers="Proc-Type: 4,ENCRYPTED\nDEK-Info: DES-EDE3-CBC,80C7C7A0\n\n"),
     ("RSA PRIVATE KEY", (("DEK-Info", "DES-EDE3-CBC,80C7C7A0"), ("Proc-Type", "4,ENCRYPTED")), A), ""),
    ("a body line may follow the headers at once", block(headers="K: v\n"), ("CERTIFICATE", (("K", "v"),), A), ""),
    ("an empty block", "-----BEGIN EMPTY-----\n-----END EMPTY-----", ("EMPTY", (), b""), ""),
    ("an empty block with a blank line", "-----BEGIN EMPTY-----\n\n-----END EMPTY-----\n", ("EMPTY", (), b""), ""),
    ("an empty block with two blank lines", "-----BEGIN EMPTY-----\n\n\n-----END EMPTY-----\n", ("EMPTY", (), b""),
     ""),
    ("headers without the blank line before END", "-----BEGIN X-----\nHeader: 1\n-----END X-----\n", None,
     "-----BEGIN X-----\nHeader: 1\n-----END X-----\n"),
    ("headers, a blank line, no body", "-----BEGIN X-----\nHeader: 1\n\n-----END X-----\n",
     ("X", (("Header", "1"),), b""), ""),
    ("header keys and values trimmed of Unicode blanks",
     block(headers=" \u00a0Key\u2003: \tvalue one\u3000\n\n"), ("CERTIFICATE", (("Key", "value one"),), A), ""),
    ("a header given twice: the last value", block(headers="K: 1\nK: 2\n\n"), ("CERTIFICATE", (("K", "2"),), A), ""),
    ("a header with an empty key", block(headers=": v\n\n"), ("CERTIFICATE", (("", "v"),), A), ""),
    # pem_test.go's badPEMTests: no block, the whole input back
    ("too few trailing dashes", "\n-----BEGIN FOO-----\ndGVzdA==\n-----END FOO----", None,
     "\n-----BEGIN FOO-----\ndGVzdA==\n-----END FOO----"),
    ("too many trailing dashes", "\n-----BEGIN FOO-----\ndGVzdA==\n-----END FOO------", None,
     "\n-----BEGIN FOO-----\ndGVzdA==\n-----END FOO------"),
    ("trailing non-whitespace", "\n-----BEGIN FOO-----\ndGVzdA==\n-----END FOO----- .", None,
     "\n-----BEGIN FOO-----\ndGVzdA==\n-----END FOO----- ."),
    ("incorrect ending type", "\n-----BEGIN FOO-----\ndGVzdA==\n-----END BAR-----", None,
     "\n-----BEGIN FOO-----\ndGVzdA==\n-----END BAR-----"),
    ("missing ending space", "\n-----BEGIN FOO-----\ndGVzdA==\n-----ENDBAR-----", None,
     "\n-----BEGIN FOO-----\ndGVzdA==\n-----ENDBAR-----"),
    ("repeating begin", "-----BEGIN \n" * 10, None, "-----BEGIN \n" * 10),
    ("missing end line", "\n-----BEGIN FOO-----\nHeader: 1", None, "\n-----BEGIN FOO-----\nHeader: 1"),
    ("missing END, body only", "-----BEGIN X-----\nQUFB\n", None, "-----BEGIN X-----\nQUFB\n"),
    ("END of a longer type", block(end="CERTIFICATES"), None, block(end="CERTIFICATES")),
    ("END of a shorter type", block(end="CERT"), None, block(end="CERT")),
    ("END with a blank before its dashes", block(end="CERTIFICATE "), None, block(end="CERTIFICATE ")),
    ("BEGIN line without its dashes", block().replace("CERTIFICATE-----\n", "CERTIFICATE\n", 1), None,
     block().replace("CERTIFICATE-----\n", "CERTIFICATE\n", 1)),
    # a block passed over for the next: Decode goes on past the END it saw
    ("repeated BEGIN lines: the last before END", "-----BEGIN X-----\ngarbage\n-----BEGIN Y-----\n" + block(),
     ("CERTIFICATE", (), A), ""),
    ("bad base64 passed over, the next block taken", block(body="not base64!!") + "between\n" + block("N"),
     ("N", (), A), ""),
    ("a mismatched END passed over", block(end="OTHER") + block("N", B64_LINES) + "z", ("N", (), B), "z"),
    ("text after END passed over", block()[:-1] + " trailing\n" + block("N"), ("N", (), A), ""),
    # base64.StdEncoding: padded, whole quantums, nothing after the padding; the unused bits may be set
    ("padding '='", block(body="QUFBQQ=="), ("CERTIFICATE", (), b"AAAA"), ""),
    ("padding '=' once", block(body="QUFBQUE="), ("CERTIFICATE", (), b"AAAAA"), ""),
    ("padding across a line end", block(body="QUFBQQ=\n="), ("CERTIFICATE", (), b"AAAA"), ""),
    ("unused bits set", block(body="QUF="), ("CERTIFICATE", (), b"AA"), ""),
    ("padding missing", block(body="QUFBQQ"), None, block(body="QUFBQQ")),
    ("padding short", block(body="QUFBQQ="), None, block(body="QUFBQQ=")),
    ("a stray '=' after a whole quantum", block(body="QUFB="), None, block(body="QUFB=")),
    ("text after the padding", block(body="QQ==QUFB"), None, block(body="QQ==QUFB")),
    ("three '='", block(body="Q==="), None, block(body="Q===")),
    ("a vertical tab in the body", block(body="QU\vFB"), None, block(body="QU\vFB")),
    ("URL-safe alphabet", block(body="-_-_"), None, block(body="-_-_")),
]


def _as_tuple(got: Block | None) -> tuple[str, H, bytes] | None:
    return None if got is None else (got.type, got.headers, got.data)


@pytest.mark.parametrize(("text", "expected", "rest"), [c[1:] for c in DECODE_CASES], ids=[c[0] for c in DECODE_CASES])
def test_decode_as_go(text: str, expected: tuple[str, H, bytes] | None, rest: str) -> None:
    got, left = gopem.decode(text.encode())
    assert (_as_tuple(got), left) == (expected, rest.encode())


# pem_test.go's pemData in small: text between blocks, BEGIN lines without END, a key with headers, three empty
# blocks, invalid headers, valid headers. (name, input, every block in order)
ALL_CASES: list[tuple[str, str, list[tuple[str, H, bytes]]]] = [
    ("pemData's shape",
     "verify return:0\n-----BEGIN CERTIFICATE-----\nsdlfkjskldfj\n  -----BEGIN CERTIFICATE-----\n---\n"
     "Certificate chain\n-----BEGIN CERTIFICATE-----\ntesting\n-----BEGIN CERTIFICATE-----\n" + block(body=B64_LINES)
     + " 1 s:/C=ZA/O=Ca Inc./CN=CA Inc\n\n" + block("RSA PRIVATE KEY", headers="Proc-Type: 4,ENCRYPTED\n\n")
     + "\n\n-----BEGIN EMPTY-----\n-----END EMPTY-----\n\n-----BEGIN EMPTY-----\n\n-----END EMPTY-----\n\n"
     "-----BEGIN EMPTY-----\n\n\n-----END EMPTY-----\n\n# no blank line after the headers\n"
     "-----BEGIN INVALID HEADERS-----\nHeader: 1\n-----END INVALID HEADERS-----\n\n# valid\n"
     "-----BEGIN VALID HEADERS-----\nHeader: 1\n\n-----END VALID HEADERS-----",
     [("CERTIFICATE", (), B), ("RSA PRIVATE KEY", (("Proc-Type", "4,ENCRYPTED"),), A), ("EMPTY", (), b""),
      ("EMPTY", (), b""), ("EMPTY", (), b""), ("VALID HEADERS", (("Header", "1"),), b"")]),
    ("a chain with junk around and between", "junk\n" + block() + "between\r\n\r\n" + block(body=B64_LINES) + "after",
     [("CERTIFICATE", (), A), ("CERTIFICATE", (), B)]),
    ("bad blocks between good ones", block() + block(body="!!") + block(end="X") + block("K", B64), [
        ("CERTIFICATE", (), A), ("K", (), B)]),
    ("none", "-----BEGIN X-----\n", []),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in ALL_CASES], ids=[c[0] for c in ALL_CASES])
def test_decode_all_is_the_decode_loop(text: str, expected: list[tuple[str, H, bytes]]) -> None:
    assert [_as_tuple(b) for b in gopem.decode_all(text.encode())] == expected
    looped, rest = [], text.encode()
    while True:
        got, rest = gopem.decode(rest)
        if got is None:
            break
        looped.append(_as_tuple(got))
    assert looped == expected


def test_bytes_that_are_not_utf8_are_kept() -> None:
    """A Go string is any bytes: the type and headers come back as the same bytes when encoded."""
    data = b"-----BEGIN \xff X-----\nK\xfe: \xe9\n\nQUFB\n-----END \xff X-----\n"
    got, rest = gopem.decode(data)
    assert got is not None and rest == b""
    assert gopem.encode(got) == data


@pytest.mark.parametrize("data", [b"-----BEGIN \n" * 1_000_000, b"\n-----END X-----" * 200_000,
                                  (b"-----BEGIN X-----\n\n-----END X-----\n" * 20_000)])
def test_long_inputs_stay_linear(data: bytes) -> None:
    """CVE-2022-24675's repeated BEGIN lines, many END lines, many blocks: each is read once (a second here)."""
    blocks = gopem.decode_all(data)
    assert len(blocks) == (20_000 if data.startswith(b"-----BEGIN X") else 0)


# ------------------------------------------------------------------------------------------ EncodeToMemory


SIXTY_FOUR = "0123456789012345678901234567890123456789012345678901234567890123"
# (name, block, the text EncodeToMemory writes)
ENCODE_CASES: list[tuple[str, Block, str]] = [
    ("empty", Block("EMPTY"), "-----BEGIN EMPTY-----\n-----END EMPTY-----\n"),
    ("one byte", Block("X", data=b"a"), "-----BEGIN X-----\nYQ==\n-----END X-----\n"),
    # the line breaker: 48 bytes fill one line of 64 characters exactly, 49 start a second
    ("one full line", Block("X", data=bytes(48)), f"-----BEGIN X-----\n{'A' * 64}\n-----END X-----\n"),
    ("a line and a bit", Block("X", data=bytes(49)), f"-----BEGIN X-----\n{'A' * 64}\nAA==\n-----END X-----\n"),
    ("two full lines", Block("X", data=bytes(96)), f"-----BEGIN X-----\n{'A' * 64}\n{'A' * 64}\n-----END X-----\n"),
    ("Proc-Type first, the others in byte order, then a blank line",
     Block("RSA PRIVATE KEY", (("b", "2"), ("DEK-Info", "x,y"), ("Proc-Type", "4,ENCRYPTED"), ("a", "1")), b"AAA"),
     "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: x,y\na: 1\nb: 2\n\nQUFB\n"
     "-----END RSA PRIVATE KEY-----\n"),
    ("headers without Proc-Type, no body", Block("X", (("Z", ""), ("Y", "v"))), "-----BEGIN X-----\nY: v\nZ: \n\n"
     "-----END X-----\n"),
    ("the type as given", Block("a:b c", data=SIXTY_FOUR.encode()[:3]), "-----BEGIN a:b c-----\nMDEy\n"
     "-----END a:b c-----\n"),
]


@pytest.mark.parametrize(("given", "text"), [c[1:] for c in ENCODE_CASES], ids=[c[0] for c in ENCODE_CASES])
def test_encode_as_go(given: Block, text: str) -> None:
    assert gopem.encode(given) == text.encode()


def test_encode_refuses_a_header_key_with_a_colon() -> None:
    with pytest.raises(ValueError, match="pem: cannot encode a header key that contains a colon"):
        gopem.encode(Block("X", (("a:b", "v"),)))


@pytest.mark.parametrize("given", [
    Block("EMPTY"),
    Block("CERTIFICATE", data=bytes(range(256)) * 3),
    Block("RSA PRIVATE KEY", (("DEK-Info", "DES-EDE3-CBC,80C7"), ("Proc-Type", "4,ENCRYPTED")), B),
    Block("X", (("", "empty key"), ("k", "")), b"\x00"),
    Block("T\u00e9st", (("K\u00e9y", "v\u00e0l"),), A),
], ids=lambda b: b.type)
def test_encode_then_decode_gives_the_block_back(given: Block) -> None:
    """pem_test.go TestFuzz: a block whose type and headers have no line ends nor outer blanks round-trips (with
    its headers sorted by key, as decode gives them)."""
    assert gopem.decode(gopem.encode(given) + b"rest") == (given, b"rest")
