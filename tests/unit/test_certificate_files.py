"""kopflet.certificate.openssl and .store on real files with the real openssl command: keys and requests as the
kubelet makes them, and the ``kubelet-client-*.pem`` store as certificate_store.go keeps it (names, modes, the
``current`` symlink, recovery, and the places it falls back to)."""

from __future__ import annotations

import base64
import datetime
import os
import stat
import subprocess
from pathlib import Path

import pytest

from kopflet.certificate import csr, openssl, pem
from kopflet.certificate.store import FileStore, NoCertKeyError, StoreError


def run_openssl(*args: str, stdin: bytes = b"") -> bytes:
    return subprocess.run(["openssl", *args], input=stdin, capture_output=True, check=True, timeout=30).stdout


def make_ca(directory: Path) -> tuple[Path, Path]:
    key, cert = directory / "ca.key", directory / "ca.crt"
    run_openssl("req", "-x509", "-new", "-nodes", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=test-ca", "-config", "/dev/null",
                "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")
    return cert, key


def sign(ca: tuple[Path, Path], request_pem: bytes, days: int = 1, *, client: bool = True) -> bytes:
    """What the controller-manager's signer does, with openssl: a certificate for the request's subject, key and
    subjectAltNames."""
    directory = ca[0].parent
    (directory / "req.csr").write_bytes(request_pem)
    usage = "clientAuth" if client else "serverAuth"
    (directory / "ext.cnf").write_text("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                                       f"extendedKeyUsage={usage}\n")
    return run_openssl("x509", "-req", "-in", str(directory / "req.csr"), "-CA", str(ca[0]), "-CAkey", str(ca[1]),
                       "-set_serial", str(int.from_bytes(os.urandom(8), "big")), "-days", str(days), "-sha256",
                       "-extfile", str(directory / "ext.cnf"), "-copy_extensions", "copy")  # the request's SANs


async def node_pair(ca: tuple[Path, Path], node: str = "node-a") -> tuple[bytes, bytes]:
    key = await openssl.generate_key()
    request = await openssl.make_request(key, csr.node_subject(node).openssl())
    return sign(ca, request), key


def lexists(path: str | Path) -> bool:
    return os.path.lexists(path)


@pytest.fixture
def ca(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "ca").mkdir()
    return make_ca(tmp_path / "ca")


# ------------------------------------------------------------------------------------------------- openssl


async def test_a_p256_key_and_a_request_with_only_the_subject() -> None:
    key = await openssl.generate_key()
    assert key.startswith(b"-----BEGIN EC PRIVATE KEY-----")  # SEC 1, as keyutil.MakeEllipticPrivateKeyPEM
    assert b"ASN1 OID: prime256v1" in run_openssl("ec", "-noout", "-text", stdin=key)
    request = await openssl.make_request(key, csr.node_subject("node-a").openssl())
    assert request.startswith(b"-----BEGIN CERTIFICATE REQUEST-----")
    text = run_openssl("req", "-noout", "-text", stdin=request).decode()
    assert "Subject: O = system:nodes, CN = system:node:node-a" in text
    assert "ecdsa-with-SHA256" in text
    # no attributes at all (no extension request from the host's openssl.cnf), as certutil.MakeCSR makes it
    assert "extensionRequest" not in run_openssl("asn1parse", stdin=request).decode()
    assert await openssl.request_subject(request) == "CN=system:node:node-a,O=system:nodes"
    assert await openssl.request_signature_valid(request)
    spki = await openssl.public_key_der(key)
    assert spki == await openssl.request_public_key_der(request)
    assert not csr.is_rsa_public_key(spki) and spki.startswith(bytes.fromhex("3059301306072a8648ce3d0201"))


async def test_certificate_info(ca: tuple[Path, Path]) -> None:
    certificate, _ = await node_pair(ca)
    [info] = await openssl.chain_info(certificate + b"\n")
    assert (info.common_name, info.organizations) == ("system:node:node-a", ("system:nodes",))
    assert info.not_after - info.not_before == pytest.approx(86400, abs=2)
    chain = await openssl.chain_info(certificate + ca[0].read_bytes())
    assert [i.common_name for i in chain] == ["system:node:node-a", "test-ca"]


async def test_openssl_errors(tmp_path: Path) -> None:
    with pytest.raises(openssl.OpensslError, match="failed"):
        await openssl.public_key_der(b"not a key")
    with pytest.raises(openssl.OpensslError, match="cannot run"):
        await openssl.generate_key(openssl=str(tmp_path / "missing"))
    slow = tmp_path / "slow-openssl"
    slow.write_text("#!/bin/sh\nexec sleep 30\n")
    slow.chmod(0o755)
    with pytest.raises(openssl.OpensslError, match="did not finish within 0s"):
        await openssl.run(["ecparam"], openssl=str(slow), timeout_seconds=0.2)
    assert not await openssl.request_signature_valid(b"garbage")


# --------------------------------------------------------------------------------------------------- store


def ticking(start: datetime.datetime) -> object:
    moments = iter(start + datetime.timedelta(seconds=i) for i in range(100))
    return lambda: next(moments)


async def test_update_writes_a_timestamped_pair_and_points_current_at_it(tmp_path: Path,
                                                                         ca: tuple[Path, Path]) -> None:
    certs = tmp_path / "pki"
    store = FileStore(str(certs), now=ticking(datetime.datetime(2026, 11, 27, 8, 17, 12)))  # type: ignore[arg-type]
    with pytest.raises(NoCertKeyError, match="no cert/key files read at"):
        store.current()
    first_cert, first_key = await node_pair(ca)
    pair = store.update(first_cert, first_key)
    assert pair.cert_path == pair.key_path == str(certs / "kubelet-client-current.pem") == store.current_path
    first = certs / "kubelet-client-2026-11-27-08-17-12.pem"
    assert stat.S_IMODE(first.stat().st_mode) == 0o600
    assert stat.S_IMODE(certs.stat().st_mode) & 0o777 == 0o755 & ~_umask()
    assert os.readlink(certs / "kubelet-client-current.pem") == str(first)  # absolute target
    assert first.read_bytes() == pem.pair_file(first_cert, first_key).encode()
    assert store.current().certificate_pem == first.read_bytes()

    second_cert, second_key = await node_pair(ca)
    store.update(second_cert, second_key)
    second = certs / "kubelet-client-2026-11-27-08-17-13.pem"
    assert os.readlink(certs / "kubelet-client-current.pem") == str(second)
    assert first.exists()  # the old pair stays, as upstream leaves it
    assert not (certs / "kubelet-client-updated.pem").exists()
    assert store.current().key_pem == second.read_bytes()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


async def test_update_refuses_a_key_that_is_not_the_certificates(tmp_path: Path, ca: tuple[Path, Path]) -> None:
    certificate, _ = await node_pair(ca)
    other_key = await openssl.generate_key()
    store = FileStore(str(tmp_path))
    with pytest.raises(StoreError, match="into cert/key pair"):
        store.update(certificate, other_key)
    assert not lexists(store.current_path)
    with pytest.raises(pem.PemError):
        store.update(b"no certificate", other_key)


async def test_current_falls_back_to_the_kubeconfig_files_then_prefix_files(tmp_path: Path,
                                                                            ca: tuple[Path, Path]) -> None:
    certificate, key = await node_pair(ca)
    (tmp_path / "node.crt").write_bytes(certificate)
    (tmp_path / "node.key").write_bytes(key)
    store = FileStore(str(tmp_path / "pki"), cert_file=str(tmp_path / "node.crt"), key_file=str(tmp_path / "node.key"))
    assert store.current().cert_path == str(tmp_path / "node.crt")
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "kubelet-client.crt").write_bytes(certificate)
    (tmp_path / "pki" / "kubelet-client.key").write_bytes(key)
    assert FileStore(str(tmp_path / "pki")).current().key_path == str(tmp_path / "pki" / "kubelet-client.key")


async def test_recover_finishes_an_interrupted_swap(tmp_path: Path, ca: tuple[Path, Path]) -> None:
    certificate, key = await node_pair(ca)
    target = tmp_path / "kubelet-client-2026-01-01-00-00-00.pem"
    target.write_text(pem.pair_file(certificate, key))
    os.symlink(target, tmp_path / "kubelet-client-updated.pem")
    store = FileStore(str(tmp_path))
    store.recover()
    assert os.readlink(store.current_path) == str(target)
    assert not lexists(tmp_path / "kubelet-client-updated.pem")
    store.recover()  # nothing to do now


def test_regular_files_where_symlinks_go_are_errors(tmp_path: Path) -> None:
    (tmp_path / "kubelet-client-updated.pem").write_text("x")
    with pytest.raises(StoreError, match="to be a symlink but it is a file"):
        FileStore(str(tmp_path)).recover()


async def test_update_never_overwrites_a_regular_current_file(tmp_path: Path, ca: tuple[Path, Path]) -> None:
    certificate, key = await node_pair(ca)
    (tmp_path / "kubelet-client-current.pem").write_text(pem.pair_file(certificate, key))
    with pytest.raises(StoreError, match="to be a symlink but it is a file"):
        FileStore(str(tmp_path)).update(certificate, key)


async def test_a_request_whose_signature_was_tampered_with_does_not_verify() -> None:
    """OpenSSL 3.0's `req -verify` exits 0 on a bad signature: the verdict is read from what it prints."""
    key = await openssl.generate_key()
    request = await openssl.make_request(key, csr.node_subject("node-a").openssl())
    der = bytearray(base64.b64decode(b"".join(request.strip().splitlines()[1:-1])))
    der[-5] ^= 0xFF  # inside the signature's last bytes
    tampered = (b"-----BEGIN CERTIFICATE REQUEST-----\n" + base64.encodebytes(bytes(der))
                + b"-----END CERTIFICATE REQUEST-----\n")
    assert await openssl.request_signature_valid(request)
    assert not await openssl.request_signature_valid(tampered)
