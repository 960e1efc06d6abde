"""Reading the agent's configuration at start, and logging in to the apiserver with its ``--kubeconfig``.

The configuration is :func:`kopflet.config.settings.from_env` over the real environment (``KOPFLET_ARGS`` carries the
kubelet flags, since ``kopf run`` owns the command line), the hostname and the real file system for
``--config`` and ``--config-dir``. The credentials come from one function, :func:`connection_info`, used by both
Kopf (through the ``@kopf.on.login`` handler here) and the agent's own apiserver client, so both speak as the same
node.

With ``rotateCertificates`` the client certificate comes from the certificate manager (startup's
``client_certificate`` has put it in memo), as upstream's rotating transport takes the manager's pair whatever the
kubeconfig names; and Kopf's credentials expire shortly after the pair's rotation deadline, so Kopf logs in again
and takes the renewed pair (Kopf re-runs the login handlers once a ConnectionInfo's ``expiration`` has passed).

Where no credentials are found at all (no ``--kubeconfig``, no in-cluster service account, no ``$KUBECONFIG`` nor
``~/.kube/config``), the agent runs standalone (:func:`decide_mode`, `kopflet.config.modes`).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime
import logging
import os
import socket
import stat
from collections.abc import Mapping
from typing import Any

import kopf

from kopflet.certificate import login as login_
from kopflet.certificate.clientcmd import RestConfig
from kopflet.certificate.manager import ClientCertificateManager
from kopflet.config import modes
from kopflet.config import settings as configuration

SERVICE_ACCOUNT_FILES = (login_.TOKEN_FILE, login_.CA_FILE)
"""What the in-cluster login needs (client-go's InClusterConfig), besides the two variables."""
DEFAULT_KUBECONFIG = login_.DEFAULT_KUBECONFIG


def read_text(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def read_dir(path: str) -> list[tuple[str, bool]] | None:
    """A ``--config-dir`` directory's entries (name, is a directory) as Go's WalkDir sees them: the path itself by
    lstat (a symbolic link is not a directory: None), the entries without following links."""
    if not stat.S_ISDIR(os.lstat(path).st_mode):
        return None
    with os.scandir(path) as entries:
        return [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]


def load_agent_config(environ: Mapping[str, str] | None = None) -> configuration.AgentConfig:
    """The configuration from ``$KOPFLET_ARGS``, the legacy variables, the hostname, the ``--config`` file and the
    ``--config-dir`` drop-ins."""
    return configuration.from_env(os.environ if environ is None else environ, socket.gethostname(), read_text,
                                  read_dir, os.getcwd())


def client_sources(environ: Mapping[str, str] | None = None) -> modes.ClientSources:
    """Where the login without ``--kubeconfig`` (`connection_info`, `kopflet.certificate.login.login`) finds
    credentials, in its order: the in-cluster service account (both variables set and not empty, both files there),
    else ``$KUBECONFIG`` when set and not empty (then ``~/.kube/config`` is not read), else ``~/.kube/config``.
    Blocking (stat calls)."""
    environ = os.environ if environ is None else environ
    in_cluster = login_.in_cluster_possible(environ)
    location = environ.get(login_.KUBECONFIG_ENV)
    return modes.ClientSources(
        in_cluster=in_cluster, kubeconfig_env=bool(location),
        default_kubeconfig=not location and os.path.isfile(os.path.expanduser(DEFAULT_KUBECONFIG)))


def decide_mode(cfg: configuration.AgentConfig, environ: Mapping[str, str] | None = None) -> modes.Decision:
    """Cluster or standalone mode for `cfg` here (`kopflet.config.modes.decide`). Blocking: see `client_sources`."""
    return modes.decide(cfg, client_sources(environ))


def connection_info(cfg: configuration.AgentConfig, *, logger: logging.Logger | logging.LoggerAdapter[Any],
                    settings: kopf.OperatorSettings,
                    certificates: ClientCertificateManager | None = None) -> kopf.ConnectionInfo:
    """Credentials from ``--kubeconfig``; without it, in-cluster, then ``$KUBECONFIG``, then ``~/.kube/config``.
    With a certificate manager (``certificates``), its current pair instead of the kubeconfig's authentication.

    Blocking (files, maybe an exec credential plugin): call it in a thread from async code.
    A missing or broken kubeconfig is a permanent error: retrying would not fix it.
    """
    info = _connection_info(cfg, logger=logger, settings=settings)
    return info if certificates is None else with_rotating_certificate(info, certificates)


def with_rotating_certificate(info: kopf.ConnectionInfo, certificates: ClientCertificateManager) -> kopf.ConnectionInfo:
    """The manager's pair as the only credentials (upstream: AnonymousClientConfig with the rotating transport's
    GetClientCertificate), expiring when Kopf should look for a renewed pair (`relogin_at`). The expiration also
    makes each login's ConnectionInfo differ from the last, which Kopf would refuse after a 401 otherwise."""
    paths = certificates.current_paths()
    expiration = datetime.datetime.fromtimestamp(certificates.relogin_at(), datetime.UTC)
    if paths is None:
        return dataclasses.replace(info, expiration=expiration)
    return dataclasses.replace(info, certificate_path=paths[0], certificate_data=None, private_key_path=paths[1],
                               private_key_data=None, token=None, scheme=None, username=None, password=None,
                               expiration=expiration)


def _connection_info(cfg: configuration.AgentConfig, *, logger: logging.Logger | logging.LoggerAdapter[Any],
                     settings: kopf.OperatorSettings) -> kopf.ConnectionInfo:
    """kopflet's own login (`kopflet.certificate.login`): the kubeconfig flag's file, else in-cluster, else
    ``$KUBECONFIG``, else ``~/.kube/config``, as client-go's clientcmd finds them."""
    try:
        found = login_.login(cfg.kubeconfig, logger=logger)
    except login_.LoginError as exc:
        if cfg.kubeconfig:
            raise kopf.PermanentError(f"--kubeconfig {cfg.kubeconfig}: {exc}") from exc
        raise kopf.PermanentError(f"no credentials for the apiserver: {exc} (use --kubeconfig)") from exc
    if found is None:
        raise kopf.PermanentError("no credentials for the apiserver (--kubeconfig, KUBECONFIG or in-cluster)")
    source, rest = found
    logger.debug(f"Logged in with {source}.")
    return as_connection_info(rest, settings)


def as_connection_info(rest: RestConfig, settings: kopf.OperatorSettings) -> kopf.ConnectionInfo:
    """Kopf's form of the credentials. The *_data fields as base64 text, as Kopf's own kubeconfig login passes
    them (Kopf and `kopflet.client.kubeapi.Credentials` decode both that and PEM)."""
    def data(value: bytes) -> str | None:
        return base64.b64encode(value).decode() if value else None

    return kopf.ConnectionInfo(
        server=rest.server,
        default_namespace=rest.namespace or None,
        expiration=rest.expiration,
        ca_path=rest.ca_file or None,
        ca_data=data(rest.ca_data),
        insecure=rest.insecure,
        username=rest.username or None,
        password=rest.password or None,
        scheme="Bearer" if rest.token else None,
        token=rest.token or None,
        certificate_path=rest.cert_file or None,
        certificate_data=data(rest.cert_data),
        private_key_path=rest.key_file or None,
        private_key_data=data(rest.key_data),
        proxy_url=rest.proxy_url or None,
        trust_env=settings.networking.trust_env,
    )


RELOGIN_WINDOW = 60.0
"""A login this soon after the previous one is Kopf's answer to a 401: it is held back (RELOGIN_DELAYS)."""
RELOGIN_DELAYS = (1.0, 2.0, 4.0, 8.0, 10.0)


def relogin_delay(since_last: float | None, repeats: int) -> float:
    """How long a login waits: none for the first or a timely one (an expiration), else a growing delay for the
    `repeats`-th login in a row that follows a refusal."""
    if since_last is None or since_last >= RELOGIN_WINDOW:
        return 0.0
    return RELOGIN_DELAYS[min(repeats, len(RELOGIN_DELAYS) - 1)]


@kopf.on.login()
async def login(memo: kopf.Memo, logger: logging.Logger, settings: kopf.OperatorSettings,
                **_: Any) -> kopf.ConnectionInfo:
    """Kopf's credentials: the same as the agent's client (startup's ``configure`` has put the config in memo).

    A 401 makes Kopf drop the credentials and log in again, and it refuses credentials equal to ones it dropped: the
    node's certificate, refused once by an apiserver still starting (a kubeadm control plane this agent runs) would
    end the agent. Each login is told apart by its ``priority`` (a generation; with one set of credentials it orders
    nothing), and logins that follow each other closely wait a little, so a lasting refusal is retried at a bounded
    rate, as upstream's clients retry with the same certificate."""
    cfg = memo.get("config")
    if cfg is None:
        try:
            cfg = load_agent_config(memo.get("environ"))  # a hollow node's own environment (handlers.hollow)
        except configuration.ConfigError as exc:
            raise kopf.PermanentError(str(exc)) from exc
    loop = asyncio.get_running_loop()
    last: float | None = memo.get("last_login")
    repeats = memo.get("relogins", 0) if last is not None and loop.time() - last < RELOGIN_WINDOW else 0
    delay = relogin_delay(None if last is None else loop.time() - last, repeats)
    if delay:
        logger.warning(f"the apiserver refused the node's credentials; logging in again in {delay:.0f}s")
        await asyncio.sleep(delay)
    info = await asyncio.to_thread(connection_info, cfg, logger=logger, settings=settings,
                                   certificates=memo.get("certificates"))
    generation = memo.get("login_generation", 0) + 1
    memo.login_generation, memo.last_login, memo.relogins = generation, loop.time(), repeats + 1 if delay else 0
    return dataclasses.replace(info, priority=generation)
