"""The kubelet API's TLS options, ``tlsMinVersion`` and ``tlsCipherSuites``, as upstream names them.

Upstream reads both with ``k8s.io/component-base/cli/flag`` (ciphersuites_flag.go: ``TLSVersion``,
``TLSCipherSuites``): the version names ``VersionTLS10`` .. ``VersionTLS13`` and the IANA names of the cipher
suites Go's ``crypto/tls`` implements (``CipherSuites()`` and ``InsecureCipherSuites()``, plus two legacy
ChaCha20 aliases), and the kubelet hands them to ``tls.Config`` (cmd/kubelet/app/server.go: InitializeTLS).

kopflet serves TLS with OpenSSL through Python's ``ssl``, so this module also says how each Go suite is spelled
in OpenSSL and plans the ``SSLContext`` settings that reproduce Go's behaviour (:func:`plan`). Pure: the
server module applies the plan.

Go and Python share one limit: TLS 1.3 suites cannot be chosen (Go ignores them in ``CipherSuites``; Python's
``ssl`` has no ``set_ciphersuites``). Naming them is accepted, as upstream, and has no effect: TLS 1.3 always
offers AES-128-GCM, AES-256-GCM and ChaCha20-Poly1305, the same three in both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from kopflet import gotext

# ssl.TLSVersion member names, by upstream's version names (ciphersuites_flag.go `versions`).
VERSIONS: Mapping[str, str] = MappingProxyType({
    "VersionTLS10": "TLSv1",
    "VersionTLS11": "TLSv1_1",
    "VersionTLS12": "TLSv1_2",
    "VersionTLS13": "TLSv1_3",
})
# An empty tlsMinVersion is upstream's DefaultTLSVersion: TLS 1.2 (what kopflet always served).
DEFAULT_MIN_VERSION = "VersionTLS12"


@dataclasses.dataclass(frozen=True)
class CipherSuite:
    """One Go cipher suite: its IANA id, OpenSSL's name for it, and Go's classification."""

    id: int
    openssl: str
    tls13: bool = False
    """A TLS 1.3 suite: accepted by name, never configurable (Go and Python alike)."""
    insecure: bool = False
    """In Go's ``InsecureCipherSuites()``: upstream accepts it and logs "Use of insecure cipher detected."."""


# Go's crypto/tls suites (cipher_suites.go, Go 1.26), by IANA name; the OpenSSL spelling is OpenSSL's own
# (`openssl ciphers -stdname`). TLS 1.3 suites have the same name in both.
CIPHER_SUITES: Mapping[str, CipherSuite] = MappingProxyType({
    # tls.CipherSuites(): TLS 1.3 ...
    "TLS_AES_128_GCM_SHA256": CipherSuite(0x1301, "TLS_AES_128_GCM_SHA256", tls13=True),
    "TLS_AES_256_GCM_SHA384": CipherSuite(0x1302, "TLS_AES_256_GCM_SHA384", tls13=True),
    "TLS_CHACHA20_POLY1305_SHA256": CipherSuite(0x1303, "TLS_CHACHA20_POLY1305_SHA256", tls13=True),
    # ... and TLS 1.0-1.2.
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": CipherSuite(0xC009, "ECDHE-ECDSA-AES128-SHA"),
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": CipherSuite(0xC00A, "ECDHE-ECDSA-AES256-SHA"),
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": CipherSuite(0xC013, "ECDHE-RSA-AES128-SHA"),
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": CipherSuite(0xC014, "ECDHE-RSA-AES256-SHA"),
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": CipherSuite(0xC02B, "ECDHE-ECDSA-AES128-GCM-SHA256"),
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": CipherSuite(0xC02C, "ECDHE-ECDSA-AES256-GCM-SHA384"),
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": CipherSuite(0xC02F, "ECDHE-RSA-AES128-GCM-SHA256"),
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": CipherSuite(0xC030, "ECDHE-RSA-AES256-GCM-SHA384"),
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": CipherSuite(0xCCA8, "ECDHE-RSA-CHACHA20-POLY1305"),
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": CipherSuite(0xCCA9, "ECDHE-ECDSA-CHACHA20-POLY1305"),
    # The legacy names upstream keeps for backward compatibility.
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": CipherSuite(0xCCA8, "ECDHE-RSA-CHACHA20-POLY1305"),
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": CipherSuite(0xCCA9, "ECDHE-ECDSA-CHACHA20-POLY1305"),
    # tls.InsecureCipherSuites(). RC4 and 3DES are usually missing from OpenSSL 3 builds; the server refuses
    # to start rather than serve without a suite it was told to offer.
    "TLS_RSA_WITH_RC4_128_SHA": CipherSuite(0x0005, "RC4-SHA", insecure=True),
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA": CipherSuite(0x000A, "DES-CBC3-SHA", insecure=True),
    "TLS_RSA_WITH_AES_128_CBC_SHA": CipherSuite(0x002F, "AES128-SHA", insecure=True),
    "TLS_RSA_WITH_AES_256_CBC_SHA": CipherSuite(0x0035, "AES256-SHA", insecure=True),
    "TLS_RSA_WITH_AES_128_CBC_SHA256": CipherSuite(0x003C, "AES128-SHA256", insecure=True),
    "TLS_RSA_WITH_AES_128_GCM_SHA256": CipherSuite(0x009C, "AES128-GCM-SHA256", insecure=True),
    "TLS_RSA_WITH_AES_256_GCM_SHA384": CipherSuite(0x009D, "AES256-GCM-SHA384", insecure=True),
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA": CipherSuite(0xC007, "ECDHE-ECDSA-RC4-SHA", insecure=True),
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA": CipherSuite(0xC011, "ECDHE-RSA-RC4-SHA", insecure=True),
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA": CipherSuite(0xC012, "ECDHE-RSA-DES-CBC3-SHA", insecure=True),
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": CipherSuite(0xC023, "ECDHE-ECDSA-AES128-SHA256", insecure=True),
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": CipherSuite(0xC027, "ECDHE-RSA-AES128-SHA256", insecure=True),
})

# The TLS 1.2 suites offered when none are named: Python's default list (``ssl``'s) cut to its ECDHE suites with
# AEAD ciphers, which is the CIS Kubernetes Benchmark's strong list (4.2.12) less its RSA key exchange ones. The rest
# of Python's list is ECDHE with AES-CBC-SHA256/SHA384 (TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256 is among Go's
# insecure suites, the SHA384 one is not in Go at all) and DHE (not negotiable without DH parameters).
DEFAULT_SUITES: tuple[str, ...] = (
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
)

# Go's default TLS 1.0-1.2 suites (the non-TLS 1.3 part of CipherSuites()): what Go offers to a TLS 1.0/1.1
# client when no suites are named. Python's default list has no SHA-1 suites, so it could serve no such client.
GO_DEFAULT_LEGACY_SUITES: tuple[str, ...] = tuple(
    name for name, suite in CIPHER_SUITES.items()
    if not suite.tls13 and not suite.insecure and not name.endswith("_POLY1305"))


def parse_min_version(name: str) -> str:
    """A ``tlsMinVersion`` name, checked; "" is the default. ValueError with upstream's text otherwise."""
    if name and name not in VERSIONS:
        raise ValueError(f"unknown tls version {gotext.go_quote(name)}")
    return name


def parse_cipher_suite(name: str) -> str:
    """One ``tlsCipherSuites`` name, checked. ValueError with upstream's text (``TLSCipherSuites``) otherwise."""
    if name not in CIPHER_SUITES:
        raise ValueError(f"Cipher suite {name} not supported or doesn't exist")
    return name


@dataclasses.dataclass(frozen=True)
class Plan:
    """How to set up an ``SSLContext`` so it behaves as Go's ``tls.Config`` with the same options would."""

    minimum_version: str
    """An ``ssl.TLSVersion`` member name."""
    ciphers: str | None
    """For ``SSLContext.set_ciphers`` (TLS 1.0-1.2 only), or None to keep Python's default list."""
    openssl_names: tuple[str, ...] = ()
    """The OpenSSL suites ``ciphers`` must enable; a missing one means the host's OpenSSL lacks it."""
    notes: tuple[str, ...] = ()
    """What upstream logs at start (insecure suites, ignored TLS 1.3 suites), for the server to log."""


def plan(min_version: str = "", cipher_suites: Sequence[str] = ()) -> Plan:
    """The ``SSLContext`` settings for ``tlsMinVersion`` and ``tlsCipherSuites`` (both already checked).

    - No suites and TLS 1.2 (the default): :data:`DEFAULT_SUITES`, ECDHE with AES-GCM or ChaCha20-Poly1305 only.
      No suites and TLS 1.3: nothing to choose.
    - TLS 1.0 or 1.1 allowed: OpenSSL 3 refuses those versions above security level 0 (they sign with SHA-1)
      and Python's default list has no suite for them, so the level is lowered and, unless suites are named,
      Go's default suites are offered: what Go serves to such a client.
    - Only TLS 1.3 suites named: Go then has no suite for TLS 1.2 and below, so such clients fail the handshake;
      here the minimum becomes TLS 1.3, which refuses them the same way.
    """
    version = min_version or DEFAULT_MIN_VERSION
    minimum = VERSIONS[version]
    notes = [f"Use of insecure cipher detected. cipher={gotext.go_quote(name)}"
             for name in dict.fromkeys(cipher_suites) if CIPHER_SUITES[name].insecure]
    legacy = version in ("VersionTLS10", "VersionTLS11")
    if version == "VersionTLS13" and cipher_suites:
        notes.append("Warning: TLS 1.3 cipher suites are not configurable, ignoring --tls-cipher-suites")
    if not cipher_suites:
        if version == "VersionTLS13":
            return Plan(minimum, None, notes=tuple(notes))
        names = GO_DEFAULT_LEGACY_SUITES if legacy else DEFAULT_SUITES
    else:
        names = tuple(name for name in cipher_suites if not CIPHER_SUITES[name].tls13)
        if version == "VersionTLS13":
            return Plan(minimum, None, notes=tuple(notes))
        if not names:
            notes.append("tlsCipherSuites names only TLS 1.3 suites: TLS 1.2 and older clients are refused")
            return Plan(VERSIONS["VersionTLS13"], None, notes=tuple(notes))
    openssl = tuple(dict.fromkeys(CIPHER_SUITES[name].openssl for name in names))
    ciphers = ":".join(openssl) + (":@SECLEVEL=0" if legacy else "")
    return Plan(minimum, ciphers, openssl, tuple(notes))


__all__ = ["CIPHER_SUITES", "DEFAULT_MIN_VERSION", "DEFAULT_SUITES", "GO_DEFAULT_LEGACY_SUITES", "VERSIONS",
           "CipherSuite", "Plan", "parse_cipher_suite", "parse_min_version", "plan"]
