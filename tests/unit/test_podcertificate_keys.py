"""kopflet.podcertificate.keys with the real openssl command: each key type's key (PKCS #8) and its stub PKCS#10
request, checked as the apiserver checks it (validateStubPKCS10Request: a request that parses, a supported key of the
right size or curve, a valid self-signature) and as Go's x509.CreateCertificateRequest makes it from an empty
template (empty subject, no attributes, the signature algorithm Go picks for the key)."""

from __future__ import annotations

import subprocess

import pytest

from kopflet.podcertificate import keys


def openssl(*args: str, stdin: bytes = b"") -> str:
    return subprocess.run(["openssl", *args], input=stdin, capture_output=True, check=True, timeout=60).stdout.decode()


def signature_ok(request_pem: bytes) -> bool:
    """``openssl req -verify`` says whether the self-signature holds (OpenSSL 3.0 exits 0 either way)."""
    done = subprocess.run(["openssl", "req", "-noout", "-verify"], input=request_pem, capture_output=True,
                          timeout=60)
    said = (done.stdout + done.stderr).decode()
    return done.returncode == 0 and "verify OK" in said and "failure" not in said


@pytest.mark.parametrize(("key_type", "public_key", "signature"), [
    ("RSA3072", "Public-Key: (3072 bit)", "sha256WithRSAEncryption"),
    ("RSA4096", "Public-Key: (4096 bit)", "sha256WithRSAEncryption"),
    ("ECDSAP256", "NIST CURVE: P-256", "ecdsa-with-SHA256"),
    ("ECDSAP384", "NIST CURVE: P-384", "ecdsa-with-SHA384"),
    ("ECDSAP521", "NIST CURVE: P-521", "ecdsa-with-SHA512"),
    ("ED25519", "ED25519 Public-Key:", "ED25519"),
])
async def test_each_key_type(key_type: str, public_key: str, signature: str) -> None:
    key_pem, request_der = await keys.generate(key_type)
    assert key_pem.startswith(b"-----BEGIN PRIVATE KEY-----\n") and key_pem.endswith(b"-----END PRIVATE KEY-----\n")
    request_pem = openssl("req", "-inform", "DER", "-outform", "PEM", stdin=request_der).encode()
    assert signature_ok(request_pem)
    text = openssl("req", "-noout", "-text", stdin=request_pem)
    assert public_key in text
    assert f"Signature Algorithm: {signature}" in text
    assert "Subject: \n" in text  # an empty subject
    assert "Attributes:\n            (none)\n" in text  # no attributes, so no extensions either
    # The request carries the key's public key (the signer certifies it, the pod holds the key).
    assert openssl("req", "-noout", "-pubkey", stdin=request_pem) == openssl("pkey", "-pubout", stdin=key_pem)
    assert len(request_der) <= 10 * 1024  # MaxStubPKCS10RequestSize


async def test_each_request_has_a_new_key() -> None:
    first, second = await keys.generate("ECDSAP256"), await keys.generate("ECDSAP256")
    assert first[0] != second[0] and first[1] != second[1]


async def test_the_request_signature_is_checked() -> None:
    """A request whose signature does not match its key fails the check the test above relies on."""
    _, request_der = await keys.generate("ECDSAP256")
    tampered = bytearray(request_der)
    tampered[-5] ^= 0x55
    request_pem = openssl("req", "-inform", "DER", "-outform", "PEM", stdin=bytes(tampered)).encode()
    assert not signature_ok(request_pem)


@pytest.mark.parametrize(("key_type", "command", "message"), [
    ("DSA1024", "openssl", 'unknown key type "DSA1024"'),
    ("RSA3072", "/nonexistent/openssl", "while generating RSA 3072 key: cannot run /nonexistent/openssl"),
    ("ED25519", "false", "while generating Ed25519 key: openssl genpkey failed"),
])
async def test_errors_are_upstreams(key_type: str, command: str, message: str) -> None:
    with pytest.raises(keys.KeyGenerationError) as raised:
        await keys.generate(key_type, command=command)
    assert str(raised.value).startswith(message)
