"""A podCertificate source's key and its stub PKCS#10 request, made with the ``openssl`` command (upstream
generateKeyAndProof and pemEncodeKey; kopflet has no crypto library beyond the host's OpenSSL).

The key is a PKCS #8 ``PRIVATE KEY`` PEM block (x509.MarshalPKCS8PrivateKey); the request is what Go's
x509.CreateCertificateRequest makes of an empty template: an empty subject, no attributes, signed with the key by the
algorithm Go picks for it (`states.KEY_TYPES`). The apiserver checks that signature and the key's type and size
(pkg/apis/certificates/validation validateStubPKCS10Request). The key goes through a pipe, never a file or the
command line.
"""

from __future__ import annotations

from kopflet.certificate import openssl
from kopflet.podcertificate import states


class KeyGenerationError(Exception):
    """The key or its request could not be made; ``str(exc)`` is upstream's message."""


async def generate(key_type: str, *, command: str = openssl.OPENSSL) -> tuple[bytes, bytes]:
    """(private key PEM, stub request DER) for a source's ``keyType``; KeyGenerationError when the type is unknown
    or openssl fails."""
    try:
        kind = states.key_type(key_type)
    except ValueError as exc:
        raise KeyGenerationError(str(exc)) from None
    try:
        key_pem = await openssl.run(["genpkey", *kind.genpkey], openssl=command)
    except openssl.OpensslError as exc:
        raise KeyGenerationError(f"while generating {kind.label} key: {exc}") from exc
    args = ["req", "-new", "-key", "/dev/stdin", "-subj", "/", "-config", "/dev/null", "-outform", "DER"]
    try:
        request = await openssl.run([*args, *([kind.digest] if kind.digest else [])], key_pem, openssl=command)
    except openssl.OpensslError as exc:
        raise KeyGenerationError(f"while generating stub PKCS#10 request: {exc}") from exc
    return key_pem, request
