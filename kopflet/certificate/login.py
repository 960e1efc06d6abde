"""kopflet's own login to the apiserver: a kubeconfig, or else the in-cluster service account, ``$KUBECONFIG`` or
``~/.kube/config``, made into a `clientcmd.RestConfig` with its credentials at hand (a tokenFile read, an exec
credential plugin run). The I/O half of `kopflet.certificate.clientcmd`; no Kubernetes client library (Kopf would
import one whenever it is installed, for ~18 MiB).

Blocking (files, a plugin): call it in a thread from async code.

Upstream (k8s.io/client-go@v0.37.1): clientcmd's loading rules (loader.go NewDefaultClientConfigLoadingRules and Load,
client_config.go validation's file checks), rest/config.go InClusterConfig, and plugin/pkg/client/auth/exec/exec.go.
Where kopflet differs: a token file is read at each login, not re-read every minute as client-go's
CachingTokenSource does (Kopf logs in again after a 401 or an expiration); and an exec plugin that has not answered
in `EXEC_TIMEOUT` fails (client-go waits for it without a limit, fine for kubectl, not for a node agent).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

from kopflet.certificate import clientcmd
from kopflet.certificate.clientcmd import RestConfig
from kopflet.certificate.kubeconfig import KubeconfigError

SERVICE_HOST_ENV = "KUBERNETES_SERVICE_HOST"
SERVICE_PORT_ENV = "KUBERNETES_SERVICE_PORT"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_FILE = f"{SERVICE_ACCOUNT_DIR}/token"
CA_FILE = f"{SERVICE_ACCOUNT_DIR}/ca.crt"
NAMESPACE_FILE = f"{SERVICE_ACCOUNT_DIR}/namespace"
KUBECONFIG_ENV = "KUBECONFIG"
DEFAULT_KUBECONFIG = "~/.kube/config"
EXEC_TIMEOUT = 60.0
"""Seconds an exec credential plugin may take (kopflet's limit; client-go has none)."""
INSTALL_HINT_HELP = """

It looks like you are trying to use a client-go credential plugin that is not installed.

To learn more about this feature, consult the documentation available at:
      https://kubernetes.io/docs/reference/access-authn-authz/authentication/#client-go-credential-plugins"""
"""exec.go installHintVerboseHelp, told when the plugin is not found."""
STDERR_LIMIT = 2000
"""How much of a failed plugin's standard error its error message carries (the end of it)."""

Logger = logging.Logger | logging.LoggerAdapter[Any]


class LoginError(Exception):
    """No usable credentials; the message says why (a file, the kubeconfig, or the exec plugin)."""


def in_cluster_possible(environ: Mapping[str, str]) -> bool:
    """Whether the in-cluster service account is there: both variables set and not empty, and the token and CA
    files (both, as the Kubernetes Python client's in-cluster login, which kopflet used before, required). Blocking."""
    return bool(environ.get(SERVICE_HOST_ENV)) and bool(environ.get(SERVICE_PORT_ENV)) and \
        os.path.isfile(TOKEN_FILE) and os.path.isfile(CA_FILE)


def kubeconfig_files(environ: Mapping[str, str]) -> list[str]:
    """The files the client's default loading rules read: ``$KUBECONFIG``'s list (split on ':', each path once, in
    order) when it is set and not empty, else ``~/.kube/config`` (loader.go NewDefaultClientConfigLoadingRules)."""
    listed = environ.get(KUBECONFIG_ENV) or ""
    if not listed:
        return [os.path.expanduser(DEFAULT_KUBECONFIG)]
    return list(dict.fromkeys(path for path in listed.split(os.pathsep) if path))


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def load_file(path: str) -> clientcmd.Kubeconfig:
    """One kubeconfig file (loader.go LoadFromFile). OSError, KubeconfigError."""
    return clientcmd.load(_read(path), os.path.abspath(path))


def load_files(paths: list[str]) -> clientcmd.Kubeconfig:
    """``$KUBECONFIG``'s files merged (loader.go Load): a missing file is skipped, a broken one is an error; none
    there at all is an error too (MissingConfigError's message), as there is nothing to log in with."""
    configs, missing, errors = [], [], []
    for path in paths:
        try:
            configs.append(load_file(path))
        except FileNotFoundError:
            missing.append(path)
        except (OSError, UnicodeDecodeError, KubeconfigError) as exc:
            errors.append(f'error loading config file "{path}": {_reason(exc)}')
    if errors:
        raise LoginError(errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]")
    if not configs:
        raise LoginError(f"Config not found: {', '.join(missing)}")
    return clientcmd.merge(configs)


def _reason(exc: BaseException) -> str:
    return exc.strerror.lower() if isinstance(exc, OSError) and exc.strerror else str(exc)


def from_in_cluster(environ: Mapping[str, str]) -> RestConfig:
    """The service account's credentials (rest/config.go InClusterConfig): the token read now, the CA by its path;
    the namespace from ``$POD_NAMESPACE``, else the account's namespace file (clientcmd inClusterClientConfig).
    The files are this module's TOKEN_FILE, CA_FILE and NAMESPACE_FILE, looked up at each call."""
    token_file, ca_file, namespace_file = TOKEN_FILE, CA_FILE, NAMESPACE_FILE
    try:
        token = _read(token_file)
    except OSError as exc:
        raise LoginError(f"in-cluster service account: {token_file}: {_reason(exc)}") from exc
    namespace = environ.get("POD_NAMESPACE") or ""
    if not namespace:
        try:
            namespace = _read(namespace_file)
        except OSError:
            namespace = ""
    return clientcmd.in_cluster(environ[SERVICE_HOST_ENV], environ[SERVICE_PORT_ENV], token,
                                ca_file if os.path.isfile(ca_file) else "", namespace)


def _check_files(rest: RestConfig, cluster: str, user: str) -> None:
    """validation.go's checks that the named files can be read: certificate-authority, client-cert, client-key."""
    errors = []
    for path, what, name in ((rest.ca_file, "certificate-authority", cluster), (rest.cert_file, "client-cert", user),
                             (rest.key_file, "client-key", user)):
        if path:
            try:
                with open(path, "rb"):
                    pass
            except OSError as exc:
                errors.append(f"unable to read {what} {path} for {name} due to open {path}: {_reason(exc)}")
    if errors:
        raise LoginError("invalid configuration: " + (errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]"))


def credentials(config: clientcmd.Kubeconfig, environ: Mapping[str, str], logger: Logger | None = None) -> RestConfig:
    """The current context's rest config with its credentials at hand: a tokenFile's token read (when no token
    is given: a token wins), an exec plugin run (unless static credentials are there, as exec.go skips it)."""
    try:
        rest = clientcmd.client_config(config)
    except KubeconfigError as exc:
        raise LoginError(str(exc)) from exc
    context = config.contexts.get(config.current_context, {})
    _check_files(rest, str(context.get("cluster") or ""), str(context.get("user") or ""))
    if rest.token_file and not rest.token:
        try:
            token = _read(rest.token_file).strip()
        except OSError as exc:
            raise LoginError(f"open {rest.token_file}: {_reason(exc)}") from exc
        if not token:
            raise LoginError(f'read empty token from file "{rest.token_file}"')  # token_source.go fileTokenSource
        rest = dataclasses.replace(rest, token=token)
    if rest.exec is not None and not rest.has_static_auth:
        rest = run_exec(rest, environ, logger)
    return rest


def run_exec(rest: RestConfig, environ: Mapping[str, str], logger: Logger | None = None) -> RestConfig:
    """The exec plugin run as exec.go's refreshCredsLocked runs it: the process's environment and the plugin's
    ``env`` (which wins), KUBERNETES_EXEC_INFO, standard input closed (never interactive), its answer on standard
    output; its standard error is logged (client-go passes it through), and told when it fails."""
    exec_ = rest.exec
    assert exec_ is not None
    try:
        interactive = clientcmd.interactive(exec_)
        ca_data = rest.ca_data
        if not ca_data and rest.ca_file and exec_.provide_cluster_info:
            try:
                with open(rest.ca_file, "rb") as f:
                    ca_data = f.read()
            except OSError as exc:
                raise LoginError(f"failed to load CA bundle for execProvider: {_reason(exc)}") from exc
        info = clientcmd.exec_info(rest, ca_data, interactive)
    except KubeconfigError as exc:
        raise LoginError(str(exc)) from exc
    # exec.Command looks a bare name up in the process's own PATH, not in the plugin's env
    command = exec_.command if "/" in exec_.command else shutil.which(exec_.command, path=environ.get("PATH"))
    if command is None:
        hint = INSTALL_HINT_HELP + (f"\n\n{exec_.install_hint}" if exec_.install_hint else "")
        raise LoginError(f"exec: executable {exec_.command} not found{hint}")
    env = {**environ, **dict(exec_.env), clientcmd.EXEC_INFO_ENV: info}
    try:
        proc = subprocess.run([command, *exec_.args], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=EXEC_TIMEOUT, check=False)
    except subprocess.TimeoutExpired as exc:
        raise LoginError(f"exec: executable {exec_.command} did not answer in {EXEC_TIMEOUT:g}s"
                         f"{_stderr(exc.stderr)}") from exc
    except OSError as exc:
        raise LoginError(f"exec: fork/exec {command}: {_reason(exc)}") from exc
    if proc.returncode != 0:
        code = proc.returncode if proc.returncode > 0 else -1  # Go's ExitCode: -1 when a signal ended it
        raise LoginError(f"exec: executable {exec_.command} failed with exit code {code}{_stderr(proc.stderr)}")
    stderr = proc.stderr.decode(errors="replace").strip()
    if stderr and logger is not None:
        logger.warning(f"exec plugin {exec_.command}: {stderr[-STDERR_LIMIT:]}")
    try:
        return clientcmd.with_exec_credential(rest, proc.stdout.decode(errors="replace"))
    except KubeconfigError as exc:
        raise LoginError(str(exc)) from exc


def _stderr(data: bytes | None) -> str:
    text = (data or b"").decode(errors="replace").strip()
    return f": {text[-STDERR_LIMIT:]}" if text else ""


def login(kubeconfig: str, environ: Mapping[str, str] | None = None, logger: Logger | None = None,
          ) -> tuple[str, RestConfig] | None:
    """Where the credentials came from, and them: ``kubeconfig`` when given (the file must be there), else the
    in-cluster service account, else ``$KUBECONFIG`` (merged), else ``~/.kube/config``; None if none of these is
    there. LoginError when the chosen one is not usable."""
    environ = os.environ if environ is None else environ
    if kubeconfig:
        try:
            config = load_file(kubeconfig)
        except (OSError, UnicodeDecodeError, KubeconfigError) as exc:
            raise LoginError(_reason(exc)) from exc
        return f"the kubeconfig file {kubeconfig}", credentials(config, environ, logger)
    if in_cluster_possible(environ):
        return "the in-cluster service account", from_in_cluster(environ)
    files = kubeconfig_files(environ)
    if not environ.get(KUBECONFIG_ENV) and not os.path.isfile(files[0]):
        return None
    return f"the kubeconfig {', '.join(files)}", credentials(load_files(files), environ, logger)
