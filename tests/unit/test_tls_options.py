"""tlsMinVersion and tlsCipherSuites: upstream's names (component-base ciphersuites_flag.go), their OpenSSL
spellings, and the SSLContext plan that reproduces Go's tls.Config; the handshakes are in test_server_tls.py."""

from __future__ import annotations

import ssl

import pytest

from kopflet.config import tls_options
from kopflet.config.tls_options import CIPHER_SUITES, Plan, plan

GO_SECURE = {  # tls.CipherSuites() in Go 1.26, plus upstream's two legacy aliases
    "TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305", "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
}
GO_INSECURE = {  # tls.InsecureCipherSuites()
    "TLS_RSA_WITH_RC4_128_SHA", "TLS_RSA_WITH_3DES_EDE_CBC_SHA", "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA", "TLS_RSA_WITH_AES_128_CBC_SHA256", "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384", "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA", "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA", "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
}


def test_the_accepted_names_are_upstreams() -> None:
    assert set(CIPHER_SUITES) == GO_SECURE | GO_INSECURE
    assert {n for n, s in CIPHER_SUITES.items() if s.insecure} == GO_INSECURE
    assert {n for n, s in CIPHER_SUITES.items() if s.tls13} == {
        "TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}
    assert set(tls_options.VERSIONS) == {"VersionTLS10", "VersionTLS11", "VersionTLS12", "VersionTLS13"}
    assert all(hasattr(ssl.TLSVersion, v) for v in tls_options.VERSIONS.values())


def test_openssl_names_are_the_same_suites() -> None:
    """Every suite this host's OpenSSL knows has the IANA id the table gives (OpenSSL's id is 0x0300XXXX)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.set_ciphers("ALL:COMPLEMENTOFALL:@SECLEVEL=0")
    known = {c["name"]: c["id"] & 0xFFFF for c in context.get_ciphers()}
    checked = 0
    for name, suite in CIPHER_SUITES.items():
        if suite.openssl in known:
            assert known[suite.openssl] == suite.id, name
            checked += 1
    # Everything but RC4 and 3DES is in any OpenSSL 3 build.
    assert checked >= len(CIPHER_SUITES) - 5


@pytest.mark.parametrize(("name", "error"), [
    ("VersionTLS14", 'unknown tls version "VersionTLS14"'),
    ("TLS12", 'unknown tls version "TLS12"'),
    ("versiontls12", 'unknown tls version "versiontls12"'),
    ('Version"TLS', 'unknown tls version "Version\\"TLS"'),
])
def test_unknown_versions(name: str, error: str) -> None:
    with pytest.raises(ValueError) as info:
        tls_options.parse_min_version(name)
    assert str(info.value) == error


@pytest.mark.parametrize("name", ["", "VersionTLS10", "VersionTLS11", "VersionTLS12", "VersionTLS13"])
def test_known_versions(name: str) -> None:
    assert tls_options.parse_min_version(name) == name


@pytest.mark.parametrize("name", ["ECDHE-RSA-AES128-GCM-SHA256", "tls_aes_128_gcm_sha256", "",
                                  " TLS_AES_128_GCM_SHA256", "TLS_FALLBACK_SCSV", "TLS_EMPTY_RENEGOTIATION_INFO_SCSV"])
def test_unknown_cipher_suites(name: str) -> None:
    with pytest.raises(ValueError) as info:
        tls_options.parse_cipher_suite(name)
    assert str(info.value) == f"Cipher suite {name} not supported or doesn't exist"


GO_DEFAULT = ("ECDHE-ECDSA-AES128-SHA:ECDHE-ECDSA-AES256-SHA:ECDHE-RSA-AES128-SHA:ECDHE-RSA-AES256-SHA:"
              "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES128-GCM-SHA256:"
              "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-RSA-CHACHA20-POLY1305:ECDHE-ECDSA-CHACHA20-POLY1305")
STRONG = ("ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-AES128-GCM-SHA256:"
          "ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305")
TLS13_IGNORED = "Warning: TLS 1.3 cipher suites are not configurable, ignoring --tls-cipher-suites"


@pytest.mark.parametrize(("version", "suites", "expected"), [
    # The defaults: TLS 1.2 with ECDHE AEAD suites only (CIS 4.2.12's strong list), TLS 1.3 as it comes.
    ("", (), Plan("TLSv1_2", STRONG, tuple(STRONG.split(":")))),
    ("VersionTLS12", (), Plan("TLSv1_2", STRONG, tuple(STRONG.split(":")))),
    ("VersionTLS13", (), Plan("TLSv1_3", None)),
    # TLS 1.0/1.1: security level 0 and Go's default suites.
    ("VersionTLS10", (), Plan("TLSv1", GO_DEFAULT + ":@SECLEVEL=0", tuple(GO_DEFAULT.split(":")))),
    ("VersionTLS11", ("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",),
     Plan("TLSv1_1", "ECDHE-RSA-AES128-SHA:@SECLEVEL=0", ("ECDHE-RSA-AES128-SHA",))),
    # Named suites; TLS 1.3 ones left out (not configurable); aliases and repeats once.
    ("", ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256"),
     Plan("TLSv1_2", "ECDHE-RSA-AES128-GCM-SHA256", ("ECDHE-RSA-AES128-GCM-SHA256",))),
    ("", ("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305", "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"),
     Plan("TLSv1_2", "ECDHE-RSA-CHACHA20-POLY1305", ("ECDHE-RSA-CHACHA20-POLY1305",))),
    # Insecure ones are served, and logged as upstream does.
    ("", ("TLS_RSA_WITH_AES_128_GCM_SHA256",),
     Plan("TLSv1_2", "AES128-GCM-SHA256", ("AES128-GCM-SHA256",),
          ('Use of insecure cipher detected. cipher="TLS_RSA_WITH_AES_128_GCM_SHA256"',))),
    # TLS 1.3 minimum: the suites do not matter, as upstream warns.
    ("VersionTLS13", ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",), Plan("TLSv1_3", None, notes=(TLS13_IGNORED,))),
    # Only TLS 1.3 suites: Go has none for TLS 1.2, so such clients are refused.
    ("", ("TLS_AES_128_GCM_SHA256",), Plan("TLSv1_3", None, notes=(
        "tlsCipherSuites names only TLS 1.3 suites: TLS 1.2 and older clients are refused",))),
])
def test_plan(version: str, suites: tuple[str, ...], expected: Plan) -> None:
    assert plan(version, suites) == expected


# The CIS Kubernetes Benchmark's strong suites (4.2.12, as kube-bench checks them).
CIS_STRONG = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_RSA_WITH_AES_256_GCM_SHA384", "TLS_RSA_WITH_AES_128_GCM_SHA256",
}


def test_the_default_suites_are_strong_and_in_pythons_default_list() -> None:
    openssl_of = {suite.openssl for name, suite in CIPHER_SUITES.items() if name in CIS_STRONG}
    default = [CIPHER_SUITES[name] for name in tls_options.DEFAULT_SUITES]
    assert all(s.openssl in openssl_of and not s.insecure and not s.tls13 for s in default)
    python_default = {c["name"] for c in ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).get_ciphers()}
    assert {s.openssl for s in default} <= python_default
