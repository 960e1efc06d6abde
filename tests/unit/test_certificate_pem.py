"""kopflet.certificate.pem: PEM blocks, the store's file names (certificate_store.go) and ``openssl x509`` output."""

from __future__ import annotations

import datetime

import pytest

from kopflet.certificate import pem

CERT_A = "-----BEGIN CERTIFICATE-----\nQUFB\n-----END CERTIFICATE-----\n"
CERT_B = "-----BEGIN CERTIFICATE-----\nQkJC\n-----END CERTIFICATE-----\n"
EC_KEY = "-----BEGIN EC PRIVATE KEY-----\nS0VZ\n-----END EC PRIVATE KEY-----\n"


@pytest.mark.parametrize(("qualifier", "name"), [
    ("current", "kubelet-client-current.pem"),
    ("updated", "kubelet-client-updated.pem"),
    (pem.timestamp(datetime.datetime(2026, 1, 2, 3, 4, 5)), "kubelet-client-2026-01-02-03-04-05.pem"),
])
def test_pair_filename(qualifier: str, name: str) -> None:
    assert pem.pair_filename(pem.CLIENT_PAIR_PREFIX, qualifier) == name


def test_modes_are_upstreams() -> None:
    assert (pem.PAIR_FILE_MODE, pem.DIRECTORY_MODE, pem.KEY_FILE_MODE) == (0o600, 0o755, 0o600)
    assert pem.TMP_PRIVATE_KEY_FILE == "kubelet-client.key.tmp"


def test_blocks_in_order_text_around_ignored() -> None:
    data = f"junk\n{CERT_A}between\r\n{EC_KEY}{CERT_B}".encode()
    assert [b.type for b in pem.blocks(data)] == ["CERTIFICATE", "EC PRIVATE KEY", "CERTIFICATE"]
    assert pem.certificates(data) == [CERT_A, CERT_B]
    assert pem.private_key(data) == pem.Block("EC PRIVATE KEY", EC_KEY)


def test_pair_file_is_the_certificates_then_the_key() -> None:
    assert pem.pair_file(CERT_A + CERT_B, "leading\n" + EC_KEY) == CERT_A + CERT_B + EC_KEY


@pytest.mark.parametrize(("call", "message"), [
    (lambda: pem.certificates(EC_KEY), "does not contain any valid RSA or ECDSA certificates"),
    (lambda: pem.private_key(CERT_A), "invalid key data"),
    (lambda: pem.pair_file(CERT_A, "nothing"), "invalid key data"),
])
def test_pem_errors(call: object, message: str) -> None:
    with pytest.raises(pem.PemError, match=message):
        call()  # type: ignore[operator]


@pytest.mark.parametrize(("text", "moment"), [
    ("Nov 27 08:17:12 2026 GMT", datetime.datetime(2026, 11, 27, 8, 17, 12, tzinfo=datetime.UTC)),
    ("Jan  1 00:00:00 2030 GMT", datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)),
])
def test_parse_openssl_time(text: str, moment: datetime.datetime) -> None:
    assert pem.parse_openssl_time(text) == moment.timestamp()


@pytest.mark.parametrize("text", ["2026-11-27 08:17:12Z", "Foo 27 08:17:12 2026 GMT", "Nov 27 08:17:12 2026 CET"])
def test_parse_openssl_time_refuses_other_formats(text: str) -> None:
    with pytest.raises(pem.PemError):
        pem.parse_openssl_time(text)


@pytest.mark.parametrize(("name", "pairs"), [
    ("CN=system:node:a,O=system:nodes", [("CN", "system:node:a"), ("O", "system:nodes")]),
    ("CN=a\\,b,O=x\\+y+OU=z", [("CN", "a,b"), ("O", "x+y"), ("OU", "z")]),
    ("", []),
])
def test_split_rfc2253(name: str, pairs: list[tuple[str, str]]) -> None:
    assert pem.split_rfc2253(name) == pairs


def test_parse_x509_text() -> None:
    info = pem.parse_x509_text("notBefore=Nov 27 08:17:12 2026 GMT\nnotAfter=Nov 28 08:17:12 2026 GMT\n"
                               "subject=CN=system:node:n1,O=second\\, inc,O=system:nodes\n")
    assert info == pem.CertificateInfo(
        datetime.datetime(2026, 11, 27, 8, 17, 12, tzinfo=datetime.UTC).timestamp(),
        datetime.datetime(2026, 11, 28, 8, 17, 12, tzinfo=datetime.UTC).timestamp(),
        "system:node:n1", ("system:nodes", "second, inc"))
    with pytest.raises(pem.PemError, match="notAfter"):
        pem.parse_x509_text("notBefore=Nov 27 08:17:12 2026 GMT\n")


def test_parse_x509_text_reads_the_subject_alt_names() -> None:
    info = pem.parse_x509_text(
        "notBefore=Nov 27 08:17:12 2026 GMT\nnotAfter=Nov 28 08:17:12 2026 GMT\nsubject=CN=system:node:n1\n"
        "X509v3 Subject Alternative Name: critical\n"
        "    DNS:n1, DNS:n1.example, IP Address:10.0.0.1, IP Address:2001:DB8:0:0:0:0:0:1, email:a@b, URI:x:y\n")
    assert info.dns_names == ("n1", "n1.example")
    assert info.ip_addresses == ("10.0.0.1", "2001:db8::1")  # openssl prints IPv6 in full: made canonical


def test_parse_x509_text_without_subject_alt_names() -> None:
    info = pem.parse_x509_text("notBefore=Nov 27 08:17:12 2026 GMT\nnotAfter=Nov 28 08:17:12 2026 GMT\n"
                               "subject=CN=a\n")
    assert (info.dns_names, info.ip_addresses) == ((), ())
