"""kopflet.gotext: Go's text formats. Every expected value is what Go (1.26) prints for the same input."""

from __future__ import annotations

from typing import Any

import pytest

from kopflet import gotext

# ------------------------------------------------------------------------------- strconv.Quote (%q)


@pytest.mark.parametrize(("text", "quoted"), [
    ("plain", '"plain"'),
    ('a"b\\c', '"a\\"b\\\\c"'),
    ("\a\b\f\n\r\t\v", '"\\a\\b\\f\\n\\r\\t\\v"'),
    ("\x00\x1f\x7f", '"\\x00\\x1f\\x7f"'),
    ("café ü", '"café ü"'),  # printable runes stay as they are
    ("\u00a0\u200b", '"\\u00a0\\u200b"'),  # non-printing ones are escaped
    ("\U000e0001", '"\\U000e0001"'),
    # control characters: C0 as \x, C1 and the line/paragraph separators as \u
    ("\x1b[31mred\x1b[0m", '"\\x1b[31mred\\x1b[0m"'),
    ("\x01", '"\\x01"'),
    ("tab\there", '"tab\\there"'),
    ("\u0085", '"\\u0085"'),
    ("\u2028\u2029", '"\\u2028\\u2029"'),
    ("\ufeff", '"\\ufeff"'),
    ("😀", '"😀"'),
    ("", '""'),
])
def test_go_quote(text: str, quoted: str) -> None:
    assert gotext.go_quote(text) == quoted


# ------------------------------------------------------------------------------------- %s of []string


@pytest.mark.parametrize(("items", "text"), [
    (["a", "b"], "[a b]"),
    (["sh", "-c", "echo 1"], "[sh -c echo 1]"),
    ([], "[]"),
])
def test_go_string_slice(items: list[str], text: str) -> None:
    assert gotext.go_string_slice(items) == text


# ------------------------------------------------------------------------------- time.Duration.String

BACKOFF_DURATIONS = [  # from test_backoff.py
    (0, "0s"), (10, "10s"), (20, "20s"), (40, "40s"), (80, "1m20s"), (160, "2m40s"), (300, "5m0s"),
    (1.5, "1.5s"), (0.25, "250ms"), (0.0000015, "1.5µs"), (3600, "1h0m0s"), (3661, "1h1m1s"), (-10, "-10s"),
]
PROBE_DURATIONS = [(1, "1s"), (30, "30s"), (0.1, "100ms"), (1.5, "1.5s")]  # from test_probes.py
LONG_DURATIONS = [  # 60 s and more: minutes and hours, as probe timeouts and pull times may be
    (59.999, "59.999s"), (60, "1m0s"), (90, "1m30s"), (61.5, "1m1.5s"), (7200.5, "2h0m0.5s"),
    (172800, "48h0m0s"), (-90, "-1m30s"),
]
FINE_DURATIONS = [(0.000000001, "1ns"), (0.001234567, "1.234567ms"), (1.000000001, "1.000000001s")]


@pytest.mark.parametrize(("seconds", "text"), BACKOFF_DURATIONS + PROBE_DURATIONS + LONG_DURATIONS + FINE_DURATIONS)
def test_go_duration(seconds: float, text: str) -> None:
    assert gotext.go_duration(seconds) == text


@pytest.mark.parametrize(("seconds", "text"), [
    (0.0615009, "61ms"), (1.001, "1.001s"), (0.0004, "0s"), (61.500999, "1m1.5s"), (-1.5005, "-1.5s"),
])
def test_go_duration_truncated_to_the_millisecond(seconds: float, text: str) -> None:
    """``d.Truncate(time.Millisecond)``, as the image manager's Pulled event prints its times."""
    assert gotext.go_duration(seconds, truncate=0.001) == text


# ------------------------------------------------------------------------------- CanonicalMIMEHeaderKey


@pytest.mark.parametrize(("value", "text"), [
    (600.0, "600"), (300.0, "300"), (0.5, "0.5"), (0.999, "0.999"), (300.001, "300.001"), (1e-5, "1e-05"),
    (1.5e-7, "1.5e-07"), (0.0001, "0.0001"), (123456.0, "123456"), (1234567.0, "1.234567e+06"), (1e21, "1e+21"),
    (1.2345678901234568e17, "1.2345678901234568e+17"), (-0.25, "-0.25"), (0.0, "0"), (float("inf"), "+Inf"),
    (float("nan"), "NaN"), (-2e-9, "-2e-09"),
])
def test_go_float(value: float, text: str) -> None:
    """fmt's %v of a float64 (the seconds in upstream's crashLoopBackOff message)."""
    assert gotext.go_float(value) == text


@pytest.mark.parametrize(("name", "canonical"), [
    ("sec-websocket-protocol", "Sec-Websocket-Protocol"), ("x-stream-protocol-version", "X-Stream-Protocol-Version"),
    ("upgrade", "Upgrade"), ("USER-AGENT", "User-Agent"),  # from test_server.py
    ("content-type", "Content-Type"), ("x--y", "X--Y"), ("-x", "-X"), ("a_b-c", "A_b-C"), ("X-1abc", "X-1abc"),
    ("", ""),
    ("foo bar", "foo bar"), ("x-ü", "x-ü"), ("x:y", "x:y"),  # not a token: left as it is
])
def test_canonical_header(name: str, canonical: str) -> None:
    assert gotext.canonical_header(name) == canonical


# ----------------------------------------------------------------------------------------- JoinHostPort


@pytest.mark.parametrize(("host", "port", "address"), [
    ("10.0.0.1", 80, "10.0.0.1:80"), ("fd00::1", 8080, "[fd00::1]:8080"), ("localhost", "443", "localhost:443"),
    ("fe80::1%eth0", 80, "[fe80::1%eth0]:80"),
])
def test_join_host_port(host: str, port: int | str, address: str) -> None:
    assert gotext.join_host_port(host, port) == address


# ------------------------------------------------------------------------------------------ json.Marshal


def test_go_json_of_a_map_as_the_container_hash_sees_it() -> None:
    # Go's json.Marshal escapes <, > and & as \u003c etc.; the hash must see the same bytes (from test_spec.py).
    def go_json(value: dict[str, str]) -> bytes:
        return gotext.go_json(value, sort_keys=True).encode()

    assert go_json({"image": "a<b>&c", "name": "x"}) == b'{"image":"a\\u003cb\\u003e\\u0026c","name":"x"}'
    assert go_json({"image": "caf\u00e9", "name": "x"}) == '{"image":"café","name":"x"}'.encode()


@pytest.mark.parametrize(("value", "options", "text"), [
    ({"name": "x\u2028y\n\x01\"\\", "image": "😀"}, {"sort_keys": True},
     '{"image":"😀","name":"x\\u2028y\\n\\u0001\\"\\\\"}'),
    ({"z": "<", "a": 1}, {}, '{"z":"\\u003c","a":1}'),  # a struct: fields in their order
    ({"a": "<&>", "b": "\u2028"}, {"escape_html": False}, '{"a":"<&>","b":"\\u2028"}'),  # SetEscapeHTML(false)
])
def test_go_json(value: Any, options: dict[str, bool], text: str) -> None:
    assert gotext.go_json(value, **options) == text
