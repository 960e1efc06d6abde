"""TLS bootstrap: ``--bootstrap-kubeconfig`` turns a bootstrap token into the node's own client certificate, as
pkg/kubelet/certificate/bootstrap/bootstrap.go does (v1.37.1).

`load_client_cert` (rotation off, upstream LoadClientCert): when the ``--kubeconfig`` file is missing or its client
certificate is unusable or expired, the bootstrap credentials ask for a certificate for ``system:node:<name>``
(request ``node-csr-<digest of key and subject>``, the key kept in ``kubelet-client.key.tmp`` until it is issued,
so a restart asks again under the same name), it is stored in ``--cert-dir`` and a kubeconfig naming
``kubelet-client-current.pem`` is written to the ``--kubeconfig`` path. `load_client_config` (rotation on, upstream
LoadClientConfig) only writes that kubeconfig and leaves the asking to the certificate manager.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import ssl
import tempfile
import time
from collections.abc import Callable

from kopflet.certificate import csr, kubeconfig, openssl, pem, signing
from kopflet.certificate.kubeconfig import ClientConfig
from kopflet.certificate.store import FileStore, StoreError
from kopflet.client.kubeapi import API_ERRORS, Credentials, KubeClient

logger = logging.getLogger(__name__)

# bootstrap.go LoadClientCert: waitForServer(ctx, *bootstrapClientConfig, 1*time.Minute), /healthz with a 1 s
# client timeout, tried every 2 s with 0.2 jitter (wait.JitterUntil).
SERVER_WAIT = 60.0
HEALTHZ_TIMEOUT = 1.0
HEALTHZ_PERIOD = 2.0
HEALTHZ_JITTER = 0.2


class BootstrapError(Exception):
    """The bootstrap cannot go on (a file that cannot be read or written, a kubeconfig kopflet cannot use)."""


async def read_client_config(path: str, what: str) -> ClientConfig:
    """The kubeconfig at ``path`` (``what`` names it in errors: ``bootstrap kubeconfig``, ``kubeconfig``)."""
    try:
        text, location = await asyncio.to_thread(lambda: (_read_text(path), os.path.abspath(path)))
        return kubeconfig.parse(text, location)
    except (OSError, kubeconfig.KubeconfigError) as exc:
        raise BootstrapError(f"unable to load {what}: {path}: {exc}") from exc


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


async def credentials_for(config: ClientConfig, what: str) -> Credentials:
    """kopflet's client credentials for a kubeconfig's context: its server and CA, its token (or token file) and
    client certificate."""
    if config.unsupported_auth:
        raise BootstrapError(f"{what}: {config.unsupported_auth} credentials are not supported by kopflet's client; "
                             f"use a token or a client certificate")
    token = config.token
    if not token and config.token_file:
        try:
            token = (await asyncio.to_thread(_read_text, config.token_file)).strip()
        except OSError as exc:
            raise BootstrapError(f"{what}: tokenFile {config.token_file}: {exc}") from exc
    return Credentials(server=config.server, ca_path=config.ca_file or None, ca_data=config.ca_data or None,
                       insecure=config.insecure, token=token or None,
                       certificate_path=config.cert_file or None, certificate_data=config.cert_data or None,
                       private_key_path=config.key_file or None, private_key_data=config.key_data or None)


def node_credentials(config: ClientConfig, cert_path: str, key_path: str) -> Credentials:
    """The kubeconfig's server and CA with the node's own pair and nothing else (restclient.AnonymousClientConfig
    with the certificate manager's pair, as the kubelet's rotating transport uses them)."""
    return Credentials(server=config.server, ca_path=config.ca_file or None, ca_data=config.ca_data or None,
                       insecure=config.insecure, certificate_path=cert_path, private_key_path=key_path)


def _client_pair(config: ClientConfig) -> bytes:
    """The client certificate (chain) of a kubeconfig after checking its key belongs to it (transport.TLSConfigFor
    loading the pair); ValueError, OSError or ssl.SSLError when it cannot be used. Blocking."""
    def read(path: str, data: bytes) -> bytes:
        if data:
            return data
        with open(path, "rb") as f:
            return f.read()

    if not (config.cert_file or config.cert_data) or not (config.key_file or config.key_data):
        raise ValueError("no client certificate and key")
    certificate, key = read(config.cert_file, config.cert_data), read(config.key_file, config.key_data)
    with tempfile.TemporaryDirectory() as tmp:
        cert_path, key_path = os.path.join(tmp, "tls.crt"), os.path.join(tmp, "tls.key")
        for path, data in ((cert_path, certificate), (key_path, key)):
            fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cert_path, key_path)
    return certificate


async def client_config_still_valid(path: str, *, now: float | None = None,
                                    openssl_command: str = openssl.OPENSSL) -> bool:
    """isClientConfigStillValid: the kubeconfig exists, loads, has a client certificate whose key matches, and none
    of its certificates has expired. A file that exists but cannot be stat'ed is an error (BootstrapError)."""
    try:
        await asyncio.to_thread(os.stat, path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise BootstrapError(f"error reading existing bootstrap kubeconfig {path}: {exc}") from exc
    try:
        config = await read_client_config(path, "kubeconfig")
    except BootstrapError as exc:
        logger.warning(f"unable to read existing bootstrap client config from {path}: {exc}")
        return False
    try:
        certificate = await asyncio.to_thread(_client_pair, config)
        chain = await openssl.chain_info(certificate, openssl=openssl_command)
    except (ValueError, OSError, ssl.SSLError, openssl.OpensslError) as exc:
        logger.warning(f"unable to load TLS configuration from existing bootstrap client config read from {path}: "
                       f"{exc}")
        return False
    moment = time.time() if now is None else now
    for info in chain:
        if moment > info.not_after:
            logger.warning(f"part of the existing bootstrap client certificate in {path} is expired: "
                           f"{time.ctime(info.not_after)}")
            return False
    return True


async def write_kubeconfig(bootstrap: ClientConfig, kubeconfig_path: str, pem_path: str) -> None:
    """writeKubeconfigFromBootstrapping: the bootstrap file's server and CA, the store's current pair; 0600 (its
    directory made 0755 when missing). Written beside and renamed into place, so a reader never sees half."""
    text = kubeconfig.bootstrapped(bootstrap, pem_path)

    def write() -> None:
        directory = os.path.dirname(os.path.abspath(kubeconfig_path))
        os.makedirs(directory, kubeconfig.DIRECTORY_MODE, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".kubeconfig.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(tmp, kubeconfig.FILE_MODE)
            os.replace(tmp, kubeconfig_path)
        except BaseException:
            os.unlink(tmp)
            raise

    try:
        await asyncio.to_thread(write)
    except OSError as exc:
        raise BootstrapError(f"cannot write the kubeconfig {kubeconfig_path}: {exc}") from exc


async def new_store(cert_dir: str, *, cert_file: str = "", key_file: str = "") -> FileStore:
    """NewFileStore("kubelet-client", certDir, certDir, certFile, keyFile), which finishes an interrupted swap."""
    store = FileStore(cert_dir, cert_file=cert_file, key_file=key_file)
    try:
        await asyncio.to_thread(store.recover)
    except (OSError, StoreError) as exc:
        raise BootstrapError(f"unable to build bootstrap cert store: {exc}") from exc
    return store


async def load_client_config(kubeconfig_path: str, bootstrap_path: str,
                             cert_dir: str, *, openssl_command: str = openssl.OPENSSL) -> tuple[ClientConfig,
                                                                                                   ClientConfig]:
    """LoadClientConfig, for rotation: (the config to ask for certificates with, the node's config). Without a
    bootstrap file, or with a still-valid kubeconfig, both are the kubeconfig; otherwise the kubeconfig is written
    now, naming the store's current pair (which the certificate manager is about to get with the bootstrap
    credentials)."""
    if not bootstrap_path or await client_config_still_valid(kubeconfig_path, openssl_command=openssl_command):
        config = await read_client_config(kubeconfig_path, "kubeconfig")
        if bootstrap_path:
            logger.info("Current kubeconfig file contents are still valid, no bootstrap necessary")
        return config, config
    store = await new_store(cert_dir)
    bootstrap = await read_client_config(bootstrap_path, "bootstrap kubeconfig")
    await write_kubeconfig(bootstrap, kubeconfig_path, store.current_path)
    logger.info("Use the bootstrap credentials to request a cert, and set kubeconfig to point to the certificate dir")
    node = ClientConfig(server=bootstrap.server, ca_file=bootstrap.ca_file, ca_data=bootstrap.ca_data,
                        insecure=bootstrap.insecure, cert_file=store.current_path, key_file=store.current_path)
    return bootstrap, node


async def load_or_generate_key(path: str, *, openssl_command: str = openssl.OPENSSL) -> bytes:
    """keyutil.LoadOrGenerateKeyFile: the key in ``path``, or a new P-256 key written there (0600)."""
    try:
        data = await asyncio.to_thread(_read_bytes, path)
    except FileNotFoundError:
        data = None
    except OSError as exc:
        raise BootstrapError(f"error loading key from {path}: {exc}") from exc
    if data is not None:
        try:
            pem.private_key(data)
        except pem.PemError as exc:
            raise BootstrapError(f"error loading key from {path}: {exc}") from None
        return data
    key = await openssl.generate_key(openssl=openssl_command)

    def write() -> None:
        os.makedirs(os.path.dirname(path) or ".", pem.DIRECTORY_MODE, exist_ok=True)
        fd = os.open(path, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, pem.KEY_FILE_MODE)
        with os.fdopen(fd, "wb") as f:
            f.write(key)

    try:
        await asyncio.to_thread(write)
    except OSError as exc:
        raise BootstrapError(f"error writing key to {path}: {exc}") from exc
    return key


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


async def wait_for_server(client: KubeClient, *, deadline: float = SERVER_WAIT,
                          rand: Callable[[], float] = random.random) -> bool:
    """waitForServer: /healthz until it answers or ``deadline`` passes (then only logged, the bootstrap goes on)."""
    try:
        async with asyncio.timeout(deadline):
            while True:
                try:
                    async with asyncio.timeout(HEALTHZ_TIMEOUT):
                        await client.healthz()
                    return True
                except API_ERRORS as exc:
                    logger.info(f"Failed to connect to apiserver: {exc!r}")
                await asyncio.sleep(HEALTHZ_PERIOD * (1 + HEALTHZ_JITTER * rand()))
    except TimeoutError:
        logger.info("Error waiting for apiserver to come up: timed out waiting to connect to apiserver")
        return False


async def request_node_certificate(client: KubeClient, key_pem: bytes, node_name: str, *,
                                   timeout_seconds: float = csr.BOOTSTRAP_WAIT_TIMEOUT,
                                   openssl_command: str = openssl.OPENSSL) -> bytes:
    """requestNodeCertificate: a request for ``system:node:<name>`` in ``system:nodes`` named by the digest of key,
    subject and usages, then its certificate once approved and issued (within ``timeout_seconds``)."""
    subject = csr.node_subject(node_name)
    try:
        public_key = await openssl.public_key_der(key_pem, openssl=openssl_command)
    except openssl.OpensslError as exc:
        raise csr.CsrError(f"invalid private key for certificate request: {exc}") from exc
    try:
        request = await openssl.make_request(key_pem, subject.openssl(), openssl=openssl_command)
    except openssl.OpensslError as exc:
        raise csr.CsrError(f"unable to generate certificate request: {exc}") from exc
    usages = csr.client_usages(rsa=csr.is_rsa_public_key(public_key))
    name = csr.digested_name(public_key, subject, usages)
    name, uid = await signing.request_certificate(client, request, key_pem, usages, name=name,
                                                  openssl_command=openssl_command)
    logger.info(f"Waiting for client certificate to be issued (certificate signing request {name})")
    return await signing.wait_for_certificate(client, name, uid, timeout_seconds)


async def load_client_cert(kubeconfig_path: str, bootstrap_path: str, cert_dir: str, node_name: str, *,
                           timeout_seconds: float = csr.BOOTSTRAP_WAIT_TIMEOUT, server_wait: float = SERVER_WAIT,
                           openssl_command: str = openssl.OPENSSL) -> bool:
    """LoadClientCert: True when a certificate was asked for and the kubeconfig written, False when the kubeconfig
    was still valid. BootstrapError, csr.CsrError (csr.CsrDenied when refused) otherwise."""
    if await client_config_still_valid(kubeconfig_path, openssl_command=openssl_command):
        logger.info(f"Kubeconfig {kubeconfig_path} exists and is valid, skipping bootstrap")
        return False
    logger.info("Using bootstrap kubeconfig to generate TLS client cert, key and kubeconfig file")
    bootstrap = await read_client_config(bootstrap_path, "bootstrap kubeconfig")
    credentials = await credentials_for(bootstrap, "bootstrap kubeconfig")
    store = await new_store(cert_dir)
    key: bytes | None = None
    try:
        key = pem.private_key((await asyncio.to_thread(store.current)).key_pem).text.encode("utf-8", "surrogateescape")
    except (OSError, StoreError, pem.PemError):
        key = None
    # The key waits in its own file until the certificate is issued: the store's current path is its symlink.
    tmp_key = os.path.join(cert_dir, pem.TMP_PRIVATE_KEY_FILE)
    if key is None:
        logger.info("No valid private key and/or certificate found, reusing existing private key or creating a new one")
        key = await load_or_generate_key(tmp_key, openssl_command=openssl_command)
    client = KubeClient(credentials, user_agent=f"kopflet/{node_name} (bootstrap)")
    try:
        await wait_for_server(client, deadline=server_wait)
        certificate = await request_node_certificate(client, key, node_name, timeout_seconds=timeout_seconds,
                                                     openssl_command=openssl_command)
    finally:
        await client.close()
    try:
        await asyncio.to_thread(store.update, certificate, key)
    except (OSError, StoreError, pem.PemError) as exc:
        raise BootstrapError(f"unable to store the new cert/key pair: {exc}") from exc
    try:
        await asyncio.to_thread(os.remove, tmp_key)
    except FileNotFoundError:
        pass
    except OSError as exc:
        logger.info(f"Failed cleaning up private key file {tmp_key}: {exc}")
    await write_kubeconfig(bootstrap, kubeconfig_path, store.current_path)
    logger.info(f"Stored the node's client certificate as {store.current_path} and wrote {kubeconfig_path}")
    return True
