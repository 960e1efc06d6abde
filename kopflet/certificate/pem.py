"""PEM blocks, the certificate store's file names, and what ``openssl x509`` says of a certificate. Pure.

Upstream: client-go util/certificate/certificate_store.go (the ``<prefix>-<qualifier>.pem`` names, the
``2006-01-02-15-04-05`` timestamp, the pair file's layout: certificates, then the key), util/cert's ParseCertsPEM,
v1.37.1. The PEM is read and written as Go's encoding/pem does it (`kopflet.gopem`).
"""

from __future__ import annotations

import calendar
import dataclasses
import datetime
import ipaddress

from kopflet import gopem

# certificate_store.go: the pair name prefix the kubelet gives NewFileStore for its client certificate, and the
# qualifiers of the selected pair's symlink and of the one being swapped in.
CLIENT_PAIR_PREFIX = "kubelet-client"
SERVER_PAIR_PREFIX = "kubelet-server"
CURRENT = "current"
UPDATED = "updated"
PEM_EXTENSION = ".pem"
CERT_EXTENSION = ".crt"
KEY_EXTENSION = ".key"
# bootstrap.go tmpPrivateKeyFile: the bootstrap key waits here until its certificate is issued.
TMP_PRIVATE_KEY_FILE = "kubelet-client.key.tmp"
# certificate_store.go Update: the pair file is 0600 in a 0755 directory; keyutil.WriteKey writes 0600 too.
PAIR_FILE_MODE = 0o600
DIRECTORY_MODE = 0o755
KEY_FILE_MODE = 0o600

CERTIFICATE = "CERTIFICATE"
_MONTHS = {name: number for number, name in enumerate(calendar.month_abbr) if name}


class PemError(ValueError):
    """Not the PEM data expected."""


@dataclasses.dataclass(frozen=True)
class Block:
    """One PEM block: its type (``CERTIFICATE``, ``EC PRIVATE KEY`` ...) and its text, BEGIN to END lines as
    pem.Encode writes them (encode it with ``surrogateescape`` to get a non-UTF-8 byte of a type or header back)."""

    type: str
    text: str


def pair_filename(prefix: str, qualifier: str) -> str:
    """``kubelet-client-current.pem``, ``kubelet-client-2026-11-27-08-17-12.pem`` (fileStore.filename)."""
    return f"{prefix}-{qualifier}{PEM_EXTENSION}"


def timestamp(moment: datetime.datetime) -> str:
    """Go's ``2006-01-02-15-04-05`` layout of the local time a pair is stored at."""
    return moment.strftime("%Y-%m-%d-%H-%M-%S")


def _decode(data: bytes | str) -> list[gopem.Block]:
    return gopem.decode_all(data.encode() if isinstance(data, str) else data)


def _block(block: gopem.Block) -> Block:
    return Block(block.type, gopem.encode(block).decode("utf-8", "surrogateescape"))


def blocks(data: bytes | str) -> list[Block]:
    """Every block Go's pem.Decode finds in ``data``, in order (text around and between them is dropped)."""
    return [_block(b) for b in _decode(data)]


def certificates(data: bytes | str) -> list[str]:
    """The CERTIFICATE blocks without headers (certutil.ParseCertsPEM passes over the others): the leaf first, then
    intermediates, each as fileStore.Update writes it (pem.Encode of the certificate). PemError if none."""
    found = [_block(b).text for b in _decode(data) if b.type == CERTIFICATE and not b.headers]
    if not found:
        raise PemError("data does not contain any valid RSA or ECDSA certificates")
    return found


def private_key(data: bytes | str) -> Block:
    """The first block that is a private key (``EC PRIVATE KEY``, ``RSA PRIVATE KEY``, ``PRIVATE KEY``)."""
    for block in blocks(data):
        if block.type.endswith("PRIVATE KEY"):
            return block
    raise PemError("invalid key data")


def pair_file(certificate_pem: bytes | str, key_pem: bytes | str) -> str:
    """What fileStore.Update writes: every certificate, then the key block."""
    return "".join(certificates(certificate_pem)) + private_key(key_pem).text


@dataclasses.dataclass(frozen=True)
class CertificateInfo:
    """A certificate's validity and subject, as ``openssl x509`` prints them."""

    not_before: float
    """Seconds since the epoch."""
    not_after: float
    common_name: str
    organizations: tuple[str, ...]
    dns_names: tuple[str, ...] = ()
    """subjectAltName's DNS names, as listed."""
    ip_addresses: tuple[str, ...] = ()
    """subjectAltName's IP addresses, in Python's (and Go's) canonical text."""


def parse_openssl_time(text: str) -> float:
    """``Nov 27 08:17:12 2026 GMT`` (openssl's default date format) as seconds since the epoch."""
    parts = text.split()
    if len(parts) != 5 or parts[4] != "GMT" or parts[0] not in _MONTHS:
        raise PemError(f"unexpected date {text!r}")
    hour, minute, second = (int(p) for p in parts[2].split(":"))
    moment = datetime.datetime(int(parts[3]), _MONTHS[parts[0]], int(parts[1]), hour, minute, int(second),
                               tzinfo=datetime.UTC)
    return moment.timestamp()


def split_rfc2253(name: str) -> list[tuple[str, str]]:
    """``CN=system:node:a,O=system:nodes`` (``-nameopt RFC2253``) into (type, value) pairs, escapes undone."""
    pairs: list[tuple[str, str]] = []
    current, escaped = "", False
    items: list[str] = []
    for char in name:
        if escaped:
            current += char
            escaped = False
        elif char == "\\":
            escaped = True
        elif char in ",+":
            items.append(current)
            current = ""
        else:
            current += char
    items.append(current)
    for item in items:
        kind, sep, value = item.partition("=")
        if sep:
            pairs.append((kind.strip(), value))
    return pairs


SAN_HEADER = "X509v3 Subject Alternative Name:"


def parse_x509_text(text: str) -> CertificateInfo:
    """The output of ``openssl x509 -noout -startdate -enddate -subject -nameopt RFC2253 -ext subjectAltName``."""
    fields: dict[str, str] = {}
    lines = text.splitlines()
    dns_names: list[str] = []
    ips: list[str] = []
    for number, line in enumerate(lines):
        if line.strip().startswith(SAN_HEADER) and number + 1 < len(lines):
            names = _parse_san(lines[number + 1])
            dns_names, ips = names[0], names[1]
            continue
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip()
    try:
        not_before, not_after = parse_openssl_time(fields["notBefore"]), parse_openssl_time(fields["notAfter"])
    except KeyError as exc:
        raise PemError(f"openssl printed no {exc.args[0]}") from None
    subject = split_rfc2253(fields.get("subject", ""))
    # RFC 2253 lists the RDNs last first; the organizations are put back in the certificate's order.
    organizations = tuple(reversed([v for k, v in subject if k == "O"]))
    common_name = next((v for k, v in subject if k == "CN"), "")
    return CertificateInfo(not_before, not_after, common_name, organizations, tuple(dns_names), tuple(ips))


def _parse_san(line: str) -> tuple[list[str], list[str]]:
    """openssl's one-line subjectAltName (``DNS:a, IP Address:10.0.0.1, IP Address:2001:DB8:0:0:0:0:0:1``): the DNS
    names and the IPs (IPv6 printed in full by openssl, put in canonical form here); other kinds are skipped."""
    dns_names: list[str] = []
    ips: list[str] = []
    for item in line.strip().split(", "):
        kind, sep, value = item.partition(":")
        if not sep:
            continue
        if kind == "DNS":
            dns_names.append(value)
        elif kind == "IP Address":
            try:
                ips.append(str(ipaddress.ip_address(value)))
            except ValueError:
                continue
    return dns_names, ips
