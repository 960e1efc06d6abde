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
import dataclasses
import datetime
import logging
import os
import socket
import stat
from collections.abc import Mapping
from typing import Any

import kopf

from kopflet.certificate.manager import ClientCertificateManager
from kopflet.config import modes
from kopflet.config import settings as configuration

SERVICE_HOST_ENV = "KUBERNETES_SERVICE_HOST"
SERVICE_PORT_ENV = "KUBERNETES_SERVICE_PORT"
SERVICE_ACCOUNT_FILES = ("/var/run/secrets/kubernetes.io/serviceaccount/token",
                         "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")
"""What the client's in-cluster login needs (kubernetes.config.incluster_config), besides the two variables."""
DEFAULT_KUBECONFIG = "~/.kube/config"


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
    """Where Kopf's client login (`connection_info` without ``--kubeconfig``) would find credentials, looked for as
    the client looks: the in-cluster service account (both variables set and not empty, both files there), else
    ``$KUBECONFIG`` (when set, ``~/.kube/config`` is not read), else ``~/.kube/config``. Blocking (stat calls)."""
    environ = os.environ if environ is None else environ
    in_cluster = bool(environ.get(SERVICE_HOST_ENV)) and bool(environ.get(SERVICE_PORT_ENV)) and \
        all(os.path.isfile(path) for path in SERVICE_ACCOUNT_FILES)
    location = environ.get("KUBECONFIG")
    return modes.ClientSources(
        in_cluster=in_cluster, kubeconfig_env=bool(location),
        default_kubeconfig=location is None and os.path.isfile(os.path.expanduser(DEFAULT_KUBECONFIG)))


def decide_mode(cfg: configuration.AgentConfig, environ: Mapping[str, str] | None = None) -> modes.Decision:
    """Cluster or standalone mode for `cfg` here (`kopflet.config.modes.decide`). Blocking: see `client_sources`."""
    return modes.decide(cfg, client_sources(environ))


def connection_info(cfg: configuration.AgentConfig, *, logger: logging.Logger | logging.LoggerAdapter[Any],
                    settings: kopf.OperatorSettings,
                    certificates: ClientCertificateManager | None = None) -> kopf.ConnectionInfo:
    """Credentials from ``--kubeconfig``; without it, Kopf's own client login (in-cluster, then ``$KUBECONFIG``).
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
    if not cfg.kubeconfig:
        try:
            info = kopf.login_via_client(logger=logger, settings=settings)
        except kopf.LoginError as exc:
            raise kopf.PermanentError(f"no credentials for the apiserver: {exc} (use --kubeconfig)") from exc
        if info is None:
            raise kopf.PermanentError("no credentials for the apiserver (--kubeconfig, KUBECONFIG or in-cluster)")
        return info
    return _login_with_kubeconfig(cfg.kubeconfig, logger=logger, settings=settings)


def _login_with_kubeconfig(path: str, *, logger: logging.Logger | logging.LoggerAdapter[Any],
                           settings: kopf.OperatorSettings) -> kopf.ConnectionInfo:
    """As ``kopf.login_via_client``, but from one given file and without touching the client's global default."""
    import kubernetes.client
    import kubernetes.config

    client_config = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_kube_config(config_file=path, client_configuration=client_config)
    except (kubernetes.config.ConfigException, OSError, ValueError) as exc:
        raise kopf.PermanentError(f"--kubeconfig {path}: {exc}") from exc
    logger.debug(f"Logged in with the kubeconfig file {path}.")
    # The bearer token, if any (an auth provider's or exec plugin's too): newer clients keep it under BearerToken.
    header = (client_config.get_api_key_with_prefix("BearerToken")
              or client_config.get_api_key_with_prefix("authorization"))
    parts = header.split(" ", 1) if header else []
    scheme, token = (None, None) if not parts else (None, parts[0]) if len(parts) == 1 else (parts[0], parts[1])
    return kopf.ConnectionInfo(
        server=client_config.host,
        ca_path=client_config.ssl_ca_cert,
        insecure=not client_config.verify_ssl,
        username=client_config.username or None,
        password=client_config.password or None,
        scheme=scheme,
        token=token,
        certificate_path=client_config.cert_file,
        private_key_path=client_config.key_file,
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
