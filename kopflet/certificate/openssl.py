"""Keys, certificate requests and certificate facts with the ``openssl`` command, as the serving certificate is
made (kopflet/server/server.py): no crypto library beyond the host's OpenSSL. Every call is an asyncio
subprocess with a timeout; secrets go through pipes, never the command line.

What upstream does in Go: keyutil.MakeEllipticPrivateKeyPEM (an ECDSA P-256 key, SEC 1 ``EC PRIVATE KEY``),
certutil.MakeCSR (a PKCS#10 request signed with SHA-256, subject only), x509.MarshalPKIXPublicKey.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from kopflet.certificate import pem

OPENSSL = "openssl"
TIMEOUT = 30.0


class OpensslError(RuntimeError):
    """openssl failed, timed out or is missing; the message has its stderr."""


async def run(args: Sequence[str], stdin: bytes = b"", *, openssl: str = OPENSSL,
              timeout_seconds: float = TIMEOUT) -> bytes:
    """openssl's stdout; OpensslError when it exits non-zero, is missing, or takes longer than ``timeout_seconds``."""
    return (await run_both(args, stdin, openssl=openssl, timeout_seconds=timeout_seconds))[0]


async def run_both(args: Sequence[str], stdin: bytes = b"", *, openssl: str = OPENSSL,
                   timeout_seconds: float = TIMEOUT) -> tuple[bytes, bytes]:
    """openssl's stdout and stderr, as `run`."""
    try:
        process = await asyncio.create_subprocess_exec(
            openssl, *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
    except OSError as exc:
        raise OpensslError(f"cannot run {openssl}: {exc}") from exc
    try:
        async with asyncio.timeout(timeout_seconds):
            stdout, stderr = await process.communicate(stdin)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        raise OpensslError(f"openssl {args[0]} did not finish within {timeout_seconds:.0f}s") from None
    if process.returncode != 0:
        raise OpensslError(f"openssl {args[0]} failed: {stderr.decode(errors='replace').strip()}")
    return stdout, stderr


async def generate_key(*, openssl: str = OPENSSL) -> bytes:
    """A new ECDSA P-256 private key, PEM ``EC PRIVATE KEY`` (generateKeyFuncImpl, MakeEllipticPrivateKeyPEM)."""
    return await run(["ecparam", "-name", "prime256v1", "-genkey", "-noout"], openssl=openssl)


async def make_request(key_pem: bytes, subject_arg: str, *, subject_alt_names: str = "",
                       openssl: str = OPENSSL) -> bytes:
    """A PEM certificate request for ``key_pem`` with a subject (``-subj`` syntax) and, for a serving certificate,
    a subjectAltName extension (``DNS:a,IP:10.0.0.1``: certutil.MakeCSRFromTemplate's DNSNames and IPAddresses);
    nothing else from the host's openssl.cnf (``-config /dev/null``); signed with SHA-256."""
    args = ["req", "-new", "-key", "/dev/stdin", "-subj", subject_arg, "-sha256", "-config", "/dev/null"]
    if subject_alt_names:
        args += ["-addext", f"subjectAltName={subject_alt_names}"]
    return await run(args, key_pem, openssl=openssl)


async def public_key_der(key_pem: bytes, *, openssl: str = OPENSSL) -> bytes:
    """The key's SubjectPublicKeyInfo in DER (x509.MarshalPKIXPublicKey)."""
    return await run(["pkey", "-pubout", "-outform", "DER"], key_pem, openssl=openssl)


async def request_public_key_der(request_pem: bytes, *, openssl: str = OPENSSL) -> bytes:
    """The public key a certificate request carries, in DER."""
    public_pem = await run(["req", "-noout", "-pubkey"], request_pem, openssl=openssl)
    return await run(["pkey", "-pubin", "-outform", "DER"], public_pem, openssl=openssl)


async def request_subject(request_pem: bytes, *, openssl: str = OPENSSL) -> str:
    """A certificate request's subject, RFC 2253."""
    out = await run(["req", "-noout", "-subject", "-nameopt", "RFC2253"], request_pem, openssl=openssl)
    return out.decode(errors="replace").strip().removeprefix("subject=")


async def request_signature_valid(request_pem: bytes, *, openssl: str = OPENSSL) -> bool:
    """Whether the request's self-signature checks out with the key it carries. OpenSSL 3.0 exits 0 whatever the
    verification found (Debian 12's 3.0.19 prints "Certificate request self-signature verify failure" and exits 0):
    only its "verify OK" counts."""
    try:
        _, stderr = await run_both(["req", "-noout", "-verify"], request_pem, openssl=openssl)
    except OpensslError:
        return False
    return b"verify OK" in stderr and b"verify failure" not in stderr


async def certificate_info(certificate_pem: bytes | str, *, openssl: str = OPENSSL) -> pem.CertificateInfo:
    """Validity, subject and subjectAltNames of the first certificate in ``certificate_pem``."""
    data = certificate_pem.encode() if isinstance(certificate_pem, str) else certificate_pem
    out = await run(["x509", "-noout", "-startdate", "-enddate", "-subject", "-nameopt", "RFC2253",
                     "-ext", "subjectAltName"], data, openssl=openssl)
    return pem.parse_x509_text(out.decode(errors="replace"))


async def chain_info(data: bytes | str, *, openssl: str = OPENSSL) -> list[pem.CertificateInfo]:
    """Every certificate of a PEM bundle, leaf first (pem.PemError when there is none)."""
    return [await certificate_info(block, openssl=openssl) for block in pem.certificates(data)]
