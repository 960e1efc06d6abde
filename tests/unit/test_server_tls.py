"""The kubelet API's tlsMinVersion / tlsCipherSuites on real handshakes on 127.0.0.1, and GET /configz."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import ssl
import subprocess
import warnings
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from kopflet.config.settings import AgentConfig
from kopflet.server import server as srv
from kopflet.server.auth_reviews import Authenticator
from tests.unit import test_server
from tests.unit.test_server import NODE, FakeBackend, Harness, Pki, RecordingAuthorizer, call, running
from tests.unit.test_server_auth import FakeKube

pki = test_server.pki  # the session's serving certificate and client CA (a fixture)


@contextlib.asynccontextmanager
async def tls_server(pki: Pki, min_version: str = "", suites: Sequence[str] = ()) -> AsyncIterator[int]:
    """A kubelet API on 127.0.0.1 with the TLS the options give; yields its port."""
    tls = srv.tls_context(pki.serving_cert, pki.serving_key, min_version=min_version, cipher_suites=suites)
    authenticator = Authenticator(FakeKube(), client_certificates=False, webhook=False, anonymous=True)
    server = srv.Server(NODE, FakeBackend(), authenticator, RecordingAuthorizer())
    await server.start("127.0.0.1", 0, tls)
    try:
        yield server.port
    finally:
        await server.close(grace=1.0)


def client(version: str | None = None, ciphers: str | None = None, *, legacy: bool = False) -> ssl.SSLContext:
    """A client that speaks only ``version`` (an ssl.TLSVersion name) and offers only ``ciphers`` if given."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        if version:
            context.minimum_version = context.maximum_version = ssl.TLSVersion[version]
    if ciphers or legacy:
        context.set_ciphers((ciphers or "DEFAULT") + (":@SECLEVEL=0" if legacy else ""))
    return context


async def handshake(port: int, context: ssl.SSLContext) -> tuple[str, str] | None:
    """(version, cipher) the server agreed to, or None when it refused the handshake."""
    try:
        async with asyncio.timeout(10):
            _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    except (ssl.SSLError, ConnectionError):
        return None
    ssl_object = writer.get_extra_info("ssl_object")
    agreed = ssl_object.version(), ssl_object.cipher()[0]
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()
    return agreed


def _openssl_has(name: str) -> bool:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.set_ciphers(f"{name}:@SECLEVEL=0")
    except ssl.SSLError:
        return False
    return True


@pytest.mark.parametrize(("min_version", "suites", "client_version", "client_ciphers", "expected"), [
    # The default: TLS 1.2 and up ...
    ("", (), "TLSv1_2", None, "TLSv1.2"),
    ("", (), "TLSv1_3", None, "TLSv1.3"),
    ("", (), None, None, "TLSv1.3"),
    ("", (), "TLSv1_1", None, None),
    ("VersionTLS12", (), "TLSv1_1", None, None),
    # ... with ECDHE AEAD suites only for TLS 1.2 (CIS 4.2.12): no CBC, no RSA key exchange.
    ("", (), "TLSv1_2", "ECDHE-RSA-AES128-GCM-SHA256", "TLSv1.2/ECDHE-RSA-AES128-GCM-SHA256"),
    ("", (), "TLSv1_2", "ECDHE-RSA-CHACHA20-POLY1305", "TLSv1.2/ECDHE-RSA-CHACHA20-POLY1305"),
    ("", (), "TLSv1_2", "ECDHE-RSA-AES128-SHA256", None),
    ("", (), "TLSv1_2", "ECDHE-RSA-AES256-SHA384", None),
    ("", (), "TLSv1_2", "ECDHE-RSA-AES128-SHA", None),
    # VersionTLS13 refuses a TLS 1.2 client.
    ("VersionTLS13", (), "TLSv1_2", None, None),
    ("VersionTLS13", (), "TLSv1_3", None, "TLSv1.3"),
    ("VersionTLS13", ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",), "TLSv1_2", None, None),
    # VersionTLS10/11 let old clients in, with Go's default suites.
    ("VersionTLS10", (), "TLSv1", None, "TLSv1"),
    ("VersionTLS11", (), "TLSv1_1", None, "TLSv1.1"),
    ("VersionTLS11", (), "TLSv1", None, None),
    ("VersionTLS10", (), "TLSv1_3", None, "TLSv1.3"),
    # Named suites bound TLS 1.2 ...
    ("", ("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",), "TLSv1_2", None, "TLSv1.2/ECDHE-RSA-AES256-GCM-SHA384"),
    ("", ("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",), "TLSv1_2", "ECDHE-RSA-AES128-GCM-SHA256", None),
    ("", ("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",), "TLSv1_2", None, "TLSv1.2/ECDHE-RSA-CHACHA20-POLY1305"),
    # ... an insecure one is served when asked for (RSA key exchange, not in the default list) ...
    ("", ("TLS_RSA_WITH_AES_128_GCM_SHA256",), "TLSv1_2", "AES128-GCM-SHA256", "TLSv1.2/AES128-GCM-SHA256"),
    ("", (), "TLSv1_2", "AES128-GCM-SHA256", None),
    # ... but not TLS 1.3, whose suites cannot be restricted (as in Go).
    ("", ("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",), "TLSv1_3", None, "TLSv1.3"),
    # Only TLS 1.3 suites: TLS 1.2 clients are refused, as Go has no suite for them.
    ("", ("TLS_AES_128_GCM_SHA256",), "TLSv1_2", None, None),
    ("", ("TLS_AES_128_GCM_SHA256",), "TLSv1_3", None, "TLSv1.3"),
])
async def test_handshakes(pki: Pki, min_version: str, suites: tuple[str, ...], client_version: str | None,
                          client_ciphers: str | None, expected: str | None) -> None:
    legacy = client_version in ("TLSv1", "TLSv1_1")
    async with tls_server(pki, min_version, suites) as port:
        agreed = await handshake(port, client(client_version, client_ciphers, legacy=legacy))
    if expected is None or agreed is None:
        assert agreed is expected
    elif "/" in expected:
        assert "/".join(agreed) == expected
    else:
        assert agreed[0] == expected


def test_a_suite_the_hosts_openssl_lacks_is_refused(pki: Pki) -> None:
    if _openssl_has("RC4-SHA"):
        pytest.skip("this OpenSSL still has RC4")
    with pytest.raises(ValueError, match=r"tlsCipherSuites: TLS_RSA_WITH_RC4_128_SHA not available in this host's "
                                         r"OpenSSL .*; remove them"):
        srv.tls_context(pki.serving_cert, pki.serving_key,
                        cipher_suites=("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_RSA_WITH_RC4_128_SHA"))


def test_upstreams_start_messages_are_logged(pki: Pki, caplog: pytest.LogCaptureFixture) -> None:
    srv.tls_context(pki.serving_cert, pki.serving_key, min_version="VersionTLS13",
                    cipher_suites=("TLS_RSA_WITH_AES_128_GCM_SHA256",))
    assert 'Use of insecure cipher detected. cipher="TLS_RSA_WITH_AES_128_GCM_SHA256"' in caplog.text
    assert "TLS 1.3 cipher suites are not configurable, ignoring --tls-cipher-suites" in caplog.text


async def test_serving_tls_honours_the_config(pki: Pki) -> None:
    config = AgentConfig(node_name=NODE, tls_cert_file=pki.serving_cert, tls_private_key_file=pki.serving_key,
                         tls_min_version="VersionTLS13")
    tls = await srv.serving_tls(config)
    assert tls.context is not None and tls.context.minimum_version == ssl.TLSVersion.TLSv1_3
    assert tls.has_certificate


# --- the certificate can change while the API serves (GetCertificate) ----------------------------------------

def _pair(directory: Path, name: str) -> tuple[str, str]:
    """A self-signed serving pair for 127.0.0.1, named ``name`` (its CN)."""
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", f"/CN={name}", "-config",
                    "/dev/null", "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True,
                   timeout=30)
    return str(cert), str(key)


async def served_name(port: int) -> str | None:
    """The CN of the certificate served on a new connection; None when the handshake fails."""
    try:
        async with asyncio.timeout(10):
            _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client())
    except (ssl.SSLError, ConnectionError):
        return None
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()
    return await asyncio.to_thread(_subject_cn, der)


def _subject_cn(der: bytes) -> str:
    text = subprocess.run(["openssl", "x509", "-inform", "DER", "-noout", "-subject"], input=der,
                          capture_output=True, check=True, timeout=30).stdout.decode()
    return text.strip().rsplit("=", 1)[-1].strip()


@contextlib.asynccontextmanager
async def serving(tls: srv.ServingTLS) -> AsyncIterator[int]:
    authenticator = Authenticator(FakeKube(), client_certificates=False, webhook=False, anonymous=True)
    server = srv.Server(NODE, FakeBackend(), authenticator, RecordingAuthorizer())
    await server.start("127.0.0.1", 0, tls.context)
    try:
        yield server.port
    finally:
        await server.close(grace=1.0)


async def test_without_a_certificate_handshakes_fail_with_upstreams_message(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """serverTLSBootstrap before the request is approved: no self-signed pair, no certificate at all."""
    config = AgentConfig(node_name=NODE, server_tls_bootstrap=True, cert_dir=str(tmp_path / "pki"))
    tls = await srv.serving_tls(config)
    assert not tls.has_certificate and not (tmp_path / "pki").exists()
    async with serving(tls) as port:
        assert await served_name(port) is None
        assert "no serving certificate available for the kubelet" in caplog.text
        await tls.use(*_pair(tmp_path, "issued"))
        assert await served_name(port) == "issued"


async def test_a_new_pair_is_served_from_the_next_handshake_and_open_connections_go_on(tmp_path: Path) -> None:
    tls = srv.ServingTLS(AgentConfig(node_name=NODE))
    await tls.open()
    await tls.use(*_pair(tmp_path, "first"))
    async with serving(tls) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client())
        await tls.use(*_pair(tmp_path, "second"))
        assert await served_name(port) == "second"
        # the connection made with the first certificate still serves requests
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        await writer.drain()
        async with asyncio.timeout(10):
            answer = await reader.read()
        assert answer.startswith(b"HTTP/1.1 ")
        writer.close()


async def test_changed_files_are_loaded_again_and_a_broken_pair_is_not(tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    """ReloadKubeletServerCertificateFile: tlsCertFile and tlsPrivateKeyFile replaced on disk."""
    cert, key = _pair(tmp_path, "first")
    config = AgentConfig(node_name=NODE, tls_cert_file=cert, tls_private_key_file=key)
    tls = await srv.serving_tls(config)
    async with serving(tls) as port:
        assert await served_name(port) == "first"
        assert not await tls.reload_if_changed()  # unchanged
        new_cert, new_key = _pair(tmp_path, "second")
        os.replace(new_cert, cert)
        os.replace(new_key, key)
        assert await tls.reload_if_changed()
        assert await served_name(port) == "second"
        await asyncio.to_thread(Path(cert).write_text, "not a certificate")
        assert not await tls.reload_if_changed()
        assert "invalid certificate and key pair from file" in caplog.text
        assert await served_name(port) == "second"  # the old pair stays


# --- GET /configz ------------------------------------------------------------------------------------------------

@pytest.fixture
async def h(pki: Pki) -> AsyncIterator[Harness]:
    async with running(pki) as harness:
        yield harness


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "DELETE"])
async def test_configz(h: Harness, method: str) -> None:
    response = await call(h, method, "/configz")
    assert response.status == 200
    assert response.header("content-type") == "application/json"
    assert response.header("x-content-type-options") == "nosniff"
    body = json.loads(response.body)
    assert list(body) == ["kubeletconfig"]
    config = body["kubeletconfig"]
    assert (config["kind"], config["apiVersion"]) == ("KubeletConfiguration", "kubelet.config.k8s.io/v1beta1")
    assert (config["address"], config["authentication"]["x509"]["clientCAFile"]) == ("127.0.0.1", h.pki.ca)
    assert "port" not in config  # 0 (any port) in this harness: omitempty
    asked = [attrs for _, attrs in h.authorizer.asked]
    assert [a.subresource for a in asked] == ["configz"]  # allowed on its own subresource first


@pytest.mark.parametrize("path", ["/configz/", "/configz/x", "/configzz"])
async def test_configz_is_one_exact_path(h: Harness, path: str) -> None:
    assert (await call(h, "GET", path)).status == 404


async def test_configz_falls_back_to_proxy_then_is_forbidden(pki: Pki) -> None:
    allowed = {("system:anonymous", "proxy")}
    async with running(pki, authorizer=RecordingAuthorizer(allowed)) as harness:
        assert (await call(harness, "GET", "/configz")).status == 200
        assert [a.subresource for _, a in harness.authorizer.asked] == ["configz", "proxy"]
    async with running(pki, authorizer=RecordingAuthorizer(set())) as harness:
        response = await call(harness, "GET", "/configz")
    assert response.status == 403
    assert response.text == ("Forbidden (user=system:anonymous, verb=get, resource=nodes, "
                             "subresource(s)=[configz proxy])\n")
