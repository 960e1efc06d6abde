"""``rotateCertificates`` and ``serverTLSBootstrap``: the client and serving certificate managers (client-go
util/certificate/certificate_manager.go with the kubelet's templates, pkg/kubelet/certificate/kubelet.go
NewKubeletClientCertificateManager and NewKubeletServerCertificateManager, and the exitAfter checks of
pkg/kubelet/certificate/transport.go; v1.37.1).

At a jittered 70-90% of the certificate's lifetime a new P-256 key and a request for ``system:node:<name>`` (signer
kube-apiserver-client-kubelet, named by the apiserver: ``csr-``) are sent with the current certificate (the
controller-manager approves a node's request for itself: selfnodeclient), or with the bootstrap credentials while
there is none; the certificate is stored as ``kubelet-client-<time>.pem`` and becomes ``kubelet-client-current.pem``.
Failures are retried after 2, 4, 8, 16 s, then every 32 s. Whoever uses the pair is told (``add_listener``): the
agent's client opens new connections with it; Kopf takes it at its next login (``relogin_at``).

The serving certificate is renewed the same way, asked for with the agent's own client under signer
kubelet-serving, for the node's addresses (``system:node:<name>``, its hostname and IP as subjectAltNames), and
stored as ``kubelet-server-*.pem``; the kubelet API takes each new pair for its next TLS handshake. The node's
addresses do not change while kopflet runs, so upstream's watch for a changed template has nothing to watch.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kopflet.certificate import bootstrap, csr, openssl, pem, rotation, signing
from kopflet.certificate.kubeconfig import ClientConfig
from kopflet.certificate.store import FileStore, NoCertKeyError, Pair, StoreError
from kopflet.client.kubeapi import KubeClient

logger = logging.getLogger(__name__)

Listener = Callable[[], Awaitable[None]]


class ManagerError(Exception):
    """The manager cannot be made: the store has something that is not a certificate pair."""


@dataclasses.dataclass(frozen=True)
class Current:
    """The selected certificate: its files, its leaf's validity and subject, and when it is to be renewed."""

    pair: Pair
    info: pem.CertificateInfo
    deadline: float


class CertificateManager:
    """One certificate of the node's (client-go's certificate manager): loaded at start, renewed in the background
    (`start`), told to listeners. The client and serving certificates differ in their template, signer, usages
    and the credentials they ask with (the subclasses)."""

    kind = "client"
    """Which certificate, in log lines."""

    def __init__(self, node_name: str, store: FileStore, *, get_template: Callable[[], csr.Template | None],
                 signer_name: str, usages: Callable[[bool], tuple[str, ...]],
                 bootstrap_pair: tuple[bytes, bytes] | None = None, openssl_command: str = openssl.OPENSSL,
                 wait_timeout: float = csr.ROTATION_WAIT_TIMEOUT, clock: Callable[[], float] = time.time,
                 rand: Callable[[], float] = random.random,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        """``get_template``: what to ask for, None while there is nothing to ask for yet (a serving certificate
        before the node has an address); ``bootstrap_pair``: certificate and key data to start from (kubeadm's
        initial credentials), stored and renewed at once when the store has no valid pair."""
        self.node_name, self.store = node_name, store
        self.get_template, self.signer_name, self.usages = get_template, signer_name, usages
        self.bootstrap_pair = bootstrap_pair
        self.openssl, self.wait_timeout = openssl_command, wait_timeout
        self._clock, self._rand, self._sleep = clock, rand, sleep
        self._current: Current | None = None
        self._force_rotation = False
        self._due: float | None = None
        """The deadline the renewal loop waits for now (None: the current pair's own, not yet taken up)."""
        self.server_healthy = False
        """updateServerError's guess: the apiserver answered the last request as a healthy one would."""
        self.renew_errors = 0
        """<kind>_expiration_renew_errors: renewals that failed."""
        self.rotation_ages: list[float] = []
        """certificate_manager_server_rotation_seconds' observations: how long each replaced certificate had
        lived (the metrics read and clear them)."""
        self._listeners: list[Listener] = []
        self._ready = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    # ------------------------------------------------------------------------------------------ the pair

    async def load(self) -> None:
        """getCurrentCertificateOrBootstrap: the store's pair while it has not expired; else the kubeconfig's
        certificate data, stored, to be renewed at once; else nothing (renewed at once with ``cert_config``)."""
        try:
            pair = await asyncio.to_thread(self.store.current)
            info = (await openssl.chain_info(pair.certificate_pem, openssl=self.openssl))[0]
        except NoCertKeyError:
            pass
        except (OSError, StoreError, pem.PemError, openssl.OpensslError) as exc:
            raise ManagerError(f"failed to initialize {self.kind} certificate manager: {exc}") from exc
        else:
            if self._clock() < info.not_after:
                self._select(pair, info)
                return
        self._force_rotation = True
        if self.bootstrap_pair is None:
            return
        try:
            pair = await asyncio.to_thread(self.store.update, *self.bootstrap_pair)
            info = (await openssl.chain_info(pair.certificate_pem, openssl=self.openssl))[0]
        except (OSError, StoreError, pem.PemError, openssl.OpensslError) as exc:
            logger.error(f"Unable to set the cert/key pair to the bootstrap certificate: {exc}")
            return
        self._select(pair, info)

    def _select(self, pair: Pair, info: pem.CertificateInfo) -> None:
        deadline = rotation.rotation_deadline(info.not_before, info.not_after, self._rand())
        self._current = Current(pair, info, deadline)
        self._due = None
        self._ready.set()
        logger.info(f"Certificate rotation deadline determined: expiration {time.ctime(info.not_after)}, "
                    f"deadline {time.ctime(deadline)}")

    def current(self) -> Current | None:
        """The selected certificate; None while there is none or it has expired (the manager's Current())."""
        current = self._current
        if current is None or self._clock() > current.info.not_after:
            return None
        return current

    def current_paths(self) -> tuple[str, str] | None:
        """The certificate and key files of the selected pair (even expired: nothing better is there)."""
        current = self._current
        return None if current is None else (current.pair.cert_path, current.pair.key_path)

    def ttl_seconds(self) -> float:
        """certificate_manager_<kind>_ttl_seconds: seconds until the certificate expires; +Inf without one."""
        current = self.current()
        return float("inf") if current is None else float(int(current.info.not_after - self._clock()))

    async def wait_for_certificate(self) -> None:
        """Until there is a pair (at once when the store had one)."""
        await self._ready.wait()

    def add_listener(self, listener: Listener) -> None:
        """``listener`` is awaited after each renewal (the agent's client renews its connections)."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        with contextlib.suppress(ValueError):
            self._listeners.remove(listener)

    # ---------------------------------------------------------------------------------------- the loops

    def start(self, on_fatal: Callable[[str], None] | None = None) -> None:
        """The renewal loop, and the exitAfter watch calling ``on_fatal`` (upstream exits the process)."""
        if self._tasks:
            return
        self._tasks.append(asyncio.create_task(self.run(), name=f"{self.kind}-certificate-rotation"))
        if on_fatal is not None:
            self._tasks.append(asyncio.create_task(self.watch_expiry(on_fatal), name=f"{self.kind}-certificate-watch"))

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def next_deadline(self) -> float:
        """nextRotationDeadline: now when forced (no valid pair at start), when there is no pair or it no longer
        fits the template (another node name); else the pair's jittered deadline."""
        if self._force_rotation:
            self._force_rotation = False
            return self._clock()
        current = self._current
        if current is None or not rotation.satisfies_template(current.info, self.get_template()):
            return self._clock()
        return current.deadline

    async def run(self) -> None:
        """Forever: sleep until the deadline, then renew, retrying with upstream's backoff until it works."""
        logger.info("Certificate rotation is enabled")
        while True:
            self._due = self.next_deadline()
            delay = self._due - self._clock()
            if delay > 0:
                logger.info(f"Waiting {delay:.0f}s for the next {self.kind} certificate rotation")
                await self._sleep(delay)
            if self.get_template() is None:  # nothing to ask for yet: no backoff, look again in a second
                await self._sleep(rotation.ROUND_PAUSE)
                continue
            delays = rotation.retry_delays(self._rand)
            attempts = 0
            while not await self.rotate():
                attempts += 1
                if attempts == rotation.BACKOFF_STEPS:
                    logger.error("Reached backoff limit, still unable to rotate certs")
                await self._sleep(next(delays))
            await self._sleep(rotation.ROUND_PAUSE)

    async def rotate(self) -> bool:
        """rotateCerts: one attempt (a new key and request, its certificate within the wait timeout, stored and
        selected). False when any step failed, logged and counted."""
        logger.info(f"Rotating {self.kind} certificates")
        template = self.get_template()
        if template is None:
            return self._failed("unable to create a csr, no template available")
        try:
            key = await openssl.generate_key(openssl=self.openssl)
            public_key = await openssl.public_key_der(key, openssl=self.openssl)
            request = await openssl.make_request(key, template.subject.openssl(),
                                                 subject_alt_names=template.openssl_san(), openssl=self.openssl)
        except openssl.OpensslError as exc:
            return self._failed(f"Unable to generate a certificate signing request: {exc}")
        try:
            client, owned = await self._requesting_client()
        except bootstrap.BootstrapError as exc:
            return self._failed(f"Unable to load a client to request certificates: {exc}")
        try:
            try:
                name, uid = await signing.request_certificate(
                    client, request, key, self.usages(csr.is_rsa_public_key(public_key)),
                    signer_name=self.signer_name, openssl_command=self.openssl)
            except signing.CsrRequestError as exc:
                self._update_server_health(exc.status)
                return self._failed(f"Failed while requesting a signed certificate from the control plane: {exc}")
            try:
                certificate = await signing.wait_for_certificate(client, name, uid, self.wait_timeout)
            except csr.CsrError as exc:
                return self._failed(f"Certificate request {name} was not signed: {exc}")
        finally:
            if owned:
                await client.close()
        try:
            pair = await asyncio.to_thread(self.store.update, certificate, key)
            info = (await openssl.chain_info(pair.certificate_pem, openssl=self.openssl))[0]
        except (OSError, StoreError, pem.PemError, openssl.OpensslError) as exc:
            return self._failed(f"Unable to store the new cert/key pair: {exc}")
        self.server_healthy = True
        self._force_rotation = False  # done, whether or not the loop has taken it up yet
        previous = self._current
        if previous is not None:  # updateCached: how long the certificate being replaced lived
            self.rotation_ages.append(self._clock() - previous.info.not_before)
        self._select(pair, info)
        logger.info(f"Rotated the {self.kind} certificate (request {name}): {pair.cert_path} valid until "
                    f"{time.ctime(info.not_after)}")
        for listener in list(self._listeners):
            try:
                await listener()
            except Exception as exc:  # one user's failure must not stop the others from getting the pair
                logger.error(f"Switching to the new {self.kind} certificate failed: {exc!r}")
        return True

    async def _requesting_client(self) -> tuple[KubeClient, bool]:
        """The apiserver client to ask with, and whether it is this call's to close."""
        raise NotImplementedError

    def _failed(self, message: str) -> bool:
        logger.error(message)
        self.renew_errors += 1
        return False

    def _update_server_health(self, status: int | None) -> None:
        """updateServerError: 401 (a TLS-terminating proxy may answer so) is healthy, a server error is not, and
        otherwise only the answers expected of a working apiserver (404, 403) are."""
        if status == 401:
            self.server_healthy = True
        elif status is None or status >= 500:
            self.server_healthy = False
        else:
            self.server_healthy = status in (403, 404)

class ClientCertificateManager(CertificateManager):
    """The node's client certificate (``rotateCertificates``), asked for with the node's own pair, or with the
    bootstrap credentials while there is none."""

    kind = "client"

    def __init__(self, node_name: str, store: FileStore, *, node_config: ClientConfig, cert_config: ClientConfig,
                 **kwargs: Any) -> None:
        """``node_config``: the server and CA to reach with the node's own pair; ``cert_config``: the credentials to
        ask with while there is no valid pair (the bootstrap kubeconfig, or the kubeconfig itself)."""
        template = csr.client_template(node_name)
        super().__init__(node_name, store, get_template=lambda: template, signer_name=csr.SIGNER_NAME,
                         usages=csr.client_usages, **kwargs)
        self.node_config, self.cert_config = node_config, cert_config

    def relogin_at(self) -> float:
        """When Kopf should log in again to take a renewed pair (rotation.relogin_at): after the deadline the
        renewal loop waits for, which is now when the pair is to be replaced at once (forced at start, or it does
        not fit the node)."""
        now, current = self._clock(), self._current
        if current is None:
            return now + rotation.RELOGIN_GRACE
        if self._force_rotation:
            deadline = now
        else:
            deadline = current.deadline if self._due is None else self._due
        return rotation.relogin_at(now, deadline, current.info.not_after)

    async def _requesting_client(self) -> tuple[KubeClient, bool]:
        current = self.current()
        credentials = (bootstrap.node_credentials(self.node_config, current.pair.cert_path, current.pair.key_path)
                       if current is not None else
                       await bootstrap.credentials_for(self.cert_config, "bootstrap kubeconfig"))
        return KubeClient(credentials, user_agent=f"kopflet/{self.node_name} (certificate rotation)"), True

    async def watch_expiry(self, on_fatal: Callable[[str], None]) -> None:
        """The rotating transport's exitAfter check, every 10 s: no usable pair for 5 minutes while the apiserver
        answers ends the agent (``on_fatal``), so a restart can bootstrap again; it is only logged otherwise."""
        last_available = self._clock()
        while True:
            now = self._clock()
            available = self.current() is not None
            if available:
                last_available = now
            problem = rotation.certificate_problem(now, available=available, last_available=last_available,
                                                   server_healthy=self.server_healthy)
            if problem is not None:
                message, fatal = problem
                logger.error(message)
                if fatal:
                    on_fatal(message)
                    return
            await self._sleep(rotation.TRANSPORT_CHECK_PERIOD)



class ServerCertificateManager(CertificateManager):
    """The kubelet API's serving certificate (``serverTLSBootstrap``): NewKubeletServerCertificateManager. Asked
    for with the agent's own apiserver client, for the node's addresses; stored as ``kubelet-server-*.pem``. Nobody
    approves these requests by default: an admin (``kubectl certificate approve``) or an approver must."""

    kind = "server"

    def __init__(self, node_name: str, store: FileStore, client: KubeClient,
                 get_addresses: Callable[[], list[dict[str, str]]], **kwargs: Any) -> None:
        super().__init__(node_name, store, get_template=lambda: csr.serving_template(node_name, get_addresses()),
                         signer_name=csr.SERVING_SIGNER_NAME, usages=csr.serving_usages, **kwargs)
        self.client = client

    async def _requesting_client(self) -> tuple[KubeClient, bool]:
        return self.client, False


async def new_client_manager(kubeconfig_path: str, bootstrap_path: str, cert_dir: str, node_name: str, *,
                             openssl_command: str = openssl.OPENSSL, **kwargs: object) -> ClientCertificateManager:
    """buildKubeletClientConfig's rotation branch: LoadClientConfig, then the manager over the store in
    ``cert_dir`` (which also looks at the kubeconfig's certificate files), loaded."""
    cert_config, node_config = await bootstrap.load_client_config(kubeconfig_path, bootstrap_path, cert_dir,
                                                                  openssl_command=openssl_command)
    store = await bootstrap.new_store(cert_dir, cert_file=node_config.cert_file, key_file=node_config.key_file)
    embedded = (node_config.cert_data, node_config.key_data) if node_config.cert_data and node_config.key_data \
        else None
    manager = ClientCertificateManager(node_name, store, node_config=node_config, cert_config=cert_config,
                                       bootstrap_pair=embedded, openssl_command=openssl_command,
                                       **kwargs)  # type: ignore[arg-type]
    await manager.load()
    return manager


async def new_server_manager(cert_dir: str, node_name: str, client: KubeClient,
                             get_addresses: Callable[[], list[dict[str, str]]], *, cert_file: str = "",
                             key_file: str = "", **kwargs: Any) -> ServerCertificateManager:
    """NewKubeletServerCertificateManager: the store ``kubelet-server`` in ``cert_dir`` (which also looks at
    ``tlsCertFile``/``tlsPrivateKeyFile``), loaded."""
    store = FileStore(cert_dir, prefix=pem.SERVER_PAIR_PREFIX, cert_file=cert_file, key_file=key_file)
    try:
        await asyncio.to_thread(store.recover)
    except (OSError, StoreError) as exc:
        raise ManagerError(f"failed to initialize server certificate store: {exc}") from exc
    manager = ServerCertificateManager(node_name, store, client, get_addresses, **kwargs)
    await manager.load()
    return manager
