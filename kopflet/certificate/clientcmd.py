"""kubeconfig files to what a rest client needs, as client-go's clientcmd builds a rest.Config; and the exec
credential plugin's input and output. Pure: texts in, values out (the files, the plugin and the in-cluster service
account are read by `kopflet.certificate.login`).

Upstream (k8s.io/client-go@v0.37.1): tools/clientcmd/loader.go (Load: ``$KUBECONFIG``'s files merged, the first
file to set a map key or ``current-context`` wins; ResolveLocalPaths: relative paths against each file's own
directory), client_config.go (DirectClientConfig.ClientConfig: which of token, tokenFile, client certificate,
username/password and exec is used), validation.go (ConfirmUsable's messages), rest/config.go InClusterConfig, and
plugin/pkg/client/auth/exec/exec.go (refreshCredsLocked: KUBERNETES_EXEC_INFO in, ExecCredential out).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json
import posixpath
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from kopflet import gotext
from kopflet.certificate.kubeconfig import KubeconfigError, _data, _mapping
from kopflet.certificate.kubeconfig import _path as _resolve  # loader.go ResolvePaths

EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
"""The ExecCredential versions client-go v0.37 speaks (exec.go apiVersions)."""
EXEC_INFO_ENV = "KUBERNETES_EXEC_INFO"
EXEC_CLUSTER_EXTENSION = "client.authentication.k8s.io/exec"
"""The cluster extension handed to a plugin with provideClusterInfo (client_config.go clusterExtensionKey)."""
INTERACTIVE_MODES = ("Never", "IfAvailable", "Always")
EMPTY_CONFIG = "no configuration has been provided, try setting KUBERNETES_MASTER environment variable"
EMPTY_CLUSTER = "cluster has no server defined"


@dataclasses.dataclass(frozen=True)
class ExecConfig:
    """A user's ``exec`` credential plugin (clientcmdapi.ExecConfig), its command already resolved against the
    kubeconfig's directory when it names a path."""

    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    api_version: str = ""
    install_hint: str = ""
    provide_cluster_info: bool = False
    interactive_mode: str = ""
    cluster_config: Any = None
    """The cluster's ``client.authentication.k8s.io/exec`` extension, passed on as ``spec.cluster.config``."""


@dataclasses.dataclass(frozen=True)
class RestConfig:
    """What a rest client needs (restclient.Config's fields kopflet uses). An ``exec`` plugin still to run leaves
    the credentials empty; `with_exec_credential` fills them from its answer."""

    server: str
    tls_server_name: str = ""
    ca_file: str = ""
    ca_data: bytes = b""
    insecure: bool = False
    proxy_url: str = ""
    token: str = ""
    token_file: str = ""
    cert_file: str = ""
    cert_data: bytes = b""
    key_file: str = ""
    key_data: bytes = b""
    username: str = ""
    password: str = ""
    namespace: str = ""
    """The context's namespace ("" when it sets none: the client's default, ``default``)."""
    exec: ExecConfig | None = None
    expiration: datetime.datetime | None = None
    """When the credentials expire (an exec plugin's ``expirationTimestamp``): log in again then."""

    @property
    def has_static_auth(self) -> bool:
        """Credentials that keep an exec plugin from running (exec.go UpdateTransportConfig: token, basic or
        certificate authentication already there)."""
        return bool(self.token or self.token_file or self.username or self.password
                    or ((self.cert_file or self.cert_data) and (self.key_file or self.key_data)))


@dataclasses.dataclass(frozen=True)
class Kubeconfig:
    """One kubeconfig file, or several merged: the named entries as decoded, relative paths already resolved."""

    clusters: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    users: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    contexts: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    current_context: str = ""


def _entries(items: Any, kind: str) -> dict[str, Mapping[str, Any]]:
    """A kubeconfig list (``clusters``, ``users``, ``contexts``) by name; a later duplicate replaces an earlier one,
    as the v1 list-to-map conversion does."""
    if items is None:
        return {}
    if not isinstance(items, list):
        raise KubeconfigError(f"{kind}s: expected a list")
    out: dict[str, Mapping[str, Any]] = {}
    for item in items:
        item = _mapping(item, f"{kind}s")
        out[str(item.get("name") or "")] = _mapping(item.get(kind), f"{kind} {item.get('name')!r}")
    return out


def load(text: str, location: str) -> Kubeconfig:
    """The kubeconfig ``text`` read from ``location`` (an absolute path): its paths (certificate-authority,
    client-certificate, client-key, tokenFile, and an exec command naming a path) resolved against the file's
    directory (loader.go LoadFromFile and ResolveLocalPaths). An empty file is an empty config, as upstream's Load."""
    try:
        body = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise KubeconfigError(f"not valid YAML: {exc}") from None
    body = _mapping(body, "not a kubeconfig")
    base = posixpath.dirname(location)
    clusters = {}
    for name, cluster in _entries(body.get("clusters"), "cluster").items():
        clusters[name] = {**cluster, "certificate-authority": _resolve(cluster.get("certificate-authority"), base)}
    users = {}
    for name, user in _entries(body.get("users"), "user").items():
        user = {**user, **{key: _resolve(user.get(key), base) for key in ("client-certificate", "client-key",
                                                                          "tokenFile")}}
        exec_ = _mapping(user.get("exec"), f"user {name!r}: exec")
        command = str(exec_.get("command") or "")
        if "/" in command:  # GetAuthInfoFileReferences: only a command naming a path, not one found in $PATH
            user["exec"] = {**exec_, "command": _resolve(command, base)}
        users[name] = user
    return Kubeconfig(clusters=clusters, users=users, contexts=_entries(body.get("contexts"), "context"),
                      current_context=str(body.get("current-context") or ""))


def merge(configs: Sequence[Kubeconfig]) -> Kubeconfig:
    """``$KUBECONFIG``'s files as one (loader.go Load): the first file to set a cluster, user or context name keeps
    it whole, and the first file to set ``current-context`` chooses it."""
    merged = Kubeconfig(clusters={}, users={}, contexts={})
    for config in configs:
        for field in ("clusters", "users", "contexts"):
            into = getattr(merged, field)
            for name, entry in getattr(config, field).items():
                into.setdefault(name, entry)
    current = next((config.current_context for config in configs if config.current_context), "")
    return dataclasses.replace(merged, current_context=current)


def _aggregate(errors: Sequence[str]) -> str:
    """errConfigurationInvalid.Error: one error as it is, several in brackets (utilerrors.NewAggregate)."""
    return "invalid configuration: " + (errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]")


def _validate_cluster(name: str, cluster: Mapping[str, Any]) -> list[str]:
    """validation.go validateClusterInfo, but for the files' existence (the login checks those)."""
    if not any(cluster.values()):
        return [EMPTY_CLUSTER]
    errors = []
    if not cluster.get("server"):
        errors.append(f'no server found for cluster "{name}"' if name else "default cluster has no server defined")
    proxy = str(cluster.get("proxy-url") or "")
    if proxy:
        scheme = urllib.parse.urlsplit(proxy).scheme
        if scheme not in ("http", "https", "socks5"):
            errors.append(f'invalid \'proxy-url\' "{proxy}" for cluster "{name}": unsupported scheme "{scheme}", '
                          f'must be http, https, or socks5')
    if cluster.get("certificate-authority") and cluster.get("certificate-authority-data"):
        errors.append(f"certificate-authority-data and certificate-authority are both specified for {name}. "
                      f"certificate-authority-data will override.")
    return errors


def _validate_user(name: str, user: Mapping[str, Any]) -> list[str]:
    """validation.go validateAuthInfo, but for the files' existence (the login checks those); and an auth-provider
    refused: client-go v0.37 has none built in (gcp and azure were removed) and kopflet loads none."""
    errors = []
    methods = (["token"] if user.get("token") else []) + \
        (["basicAuth"] if user.get("username") or user.get("password") else [])
    if user.get("client-certificate") or user.get("client-certificate-data"):
        if user.get("client-certificate") and user.get("client-certificate-data"):
            errors.append(f"client-cert-data and client-cert are both specified for {name}. "
                          f"client-cert-data will override.")
        if user.get("client-key") and user.get("client-key-data"):
            errors.append(f"client-key-data and client-key are both specified for {name}; "
                          f"client-key-data will override")
        if not user.get("client-key") and not user.get("client-key-data"):
            errors.append(f"client-key-data or client-key must be specified for {name} to use the clientCert "
                          f"authentication method.")
    provider = user.get("auth-provider")
    exec_ = user.get("exec")
    if exec_:
        exec_ = _mapping(exec_, f"user {name!r}: exec")
        if provider:
            errors.append(f"authProvider cannot be provided in combination with an exec plugin for {name}")
        if not exec_.get("command"):
            errors.append(f"command must be specified for {name} to use exec authentication plugin")
        if not exec_.get("apiVersion"):
            errors.append(f"apiVersion must be specified for {name} to use exec authentication plugin")
        for env in exec_.get("env") or []:
            if not isinstance(env, Mapping) or not env.get("name"):
                errors.append(f"env variable name must be specified for {name} to use exec authentication plugin")
        mode = _interactive_mode(exec_)
        if not mode:
            errors.append(f"interactiveMode must be specified for {name} to use exec authentication plugin")
        elif mode not in INTERACTIVE_MODES:
            errors.append(f'invalid interactiveMode for {name}: "{mode}"')
    elif provider:
        provider_name = _mapping(provider, f"user {name!r}: auth-provider").get("name") or ""
        errors.append(f'user {name}: auth-provider "{provider_name}" is not supported by kopflet (client-go has no '
                      f"built-in auth providers): use an exec credential plugin")
    if len(methods) > 1:
        errors.append(f"more than one authentication method found for {name}; found [{' '.join(methods)}], "
                      f"only one is allowed")
    return errors


def _interactive_mode(exec_: Mapping[str, Any]) -> str:
    """v1 SetDefaults_ExecConfig: a v1beta1 plugin without interactiveMode is IfAvailable; v1 must say."""
    mode = str(exec_.get("interactiveMode") or "")
    if not mode and exec_.get("apiVersion") == "client.authentication.k8s.io/v1beta1":
        return "IfAvailable"
    return mode


def _exec_config(exec_: Mapping[str, Any], cluster: Mapping[str, Any]) -> ExecConfig:
    api_version = str(exec_.get("apiVersion") or "")
    if api_version not in EXEC_API_VERSIONS:
        raise KubeconfigError(f'exec plugin: invalid apiVersion "{api_version}"')  # exec.go newAuthenticator
    extension = None
    for item in cluster.get("extensions") or []:
        if isinstance(item, Mapping) and item.get("name") == EXEC_CLUSTER_EXTENSION:
            extension = item.get("extension")
    return ExecConfig(
        command=str(exec_.get("command")),
        args=tuple(str(arg) for arg in exec_.get("args") or []),
        env=tuple((str(env["name"]), str(env.get("value") or "")) for env in exec_.get("env") or []),
        api_version=api_version,
        install_hint=str(exec_.get("installHint") or ""),
        provide_cluster_info=bool(exec_.get("provideClusterInfo")),
        interactive_mode=_interactive_mode(exec_),
        cluster_config=extension,
    )


def client_config(config: Kubeconfig) -> RestConfig:
    """The current context's rest config (client_config.go DirectClientConfig.ClientConfig with ConfirmUsable's
    validation): the cluster's server, CA, TLS and proxy settings, and the user's credentials, taken only for an
    https server (IsConfigTransportTLS). KubeconfigError with upstream's ``invalid configuration: ...`` message."""
    name = config.current_context
    context = config.contexts.get(name, {})
    cluster_name = str(context.get("cluster") or "")
    user_name = str(context.get("user") or "")
    cluster = config.clusters.get(cluster_name, {})
    user = config.users.get(user_name, {})
    errors = [f"context was not found for specified context: {name}"] if name and name not in config.contexts \
        else []
    errors += _validate_user(user_name, user) + _validate_cluster(cluster_name, cluster)
    if errors == [EMPTY_CLUSTER]:
        errors = [EMPTY_CONFIG]
    if errors:
        raise KubeconfigError(_aggregate(errors))
    server = str(cluster.get("server")).rstrip("/")
    rest = RestConfig(server=server, proxy_url=str(cluster.get("proxy-url") or ""),
                      namespace=str(context.get("namespace") or ""))
    if urllib.parse.urlsplit(server).scheme != "https":
        return rest  # client_config.go: "only try to read the auth information if we are secure"
    token = str(user.get("token") or "")
    cert = bool(user.get("client-certificate") or user.get("client-certificate-data"))
    exec_ = _mapping(user.get("exec"), "exec")
    return dataclasses.replace(
        rest,
        tls_server_name=str(cluster.get("tls-server-name") or ""),
        ca_file=str(cluster.get("certificate-authority") or ""),
        ca_data=_data(cluster.get("certificate-authority-data"), "certificate-authority-data"),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        # getUserIdentificationPartialConfig: a token wins over tokenFile (which is then only re-read later)
        token=token,
        token_file=str(user.get("tokenFile") or ""),
        cert_file=str(user.get("client-certificate") or "") if cert else "",
        cert_data=_data(user.get("client-certificate-data"), "client-certificate-data") if cert else b"",
        key_file=str(user.get("client-key") or "") if cert else "",
        key_data=_data(user.get("client-key-data"), "client-key-data") if cert else b"",
        username=str(user.get("username") or ""),
        password=str(user.get("password") or ""),
        exec=_exec_config(exec_, cluster) if exec_ else None,
    )


def in_cluster(host: str, port: str, token: str, ca_file: str, namespace: str) -> RestConfig:
    """The service account's rest config (rest/config.go InClusterConfig; the namespace as clientcmd's
    inClusterClientConfig.Namespace reads it)."""
    return RestConfig(server="https://" + gotext.join_host_port(host, port), ca_file=ca_file, token=token.strip(),
                      namespace=namespace.strip())


# --- the exec credential plugin -------------------------------------------------------------------------------------

def exec_info(rest: RestConfig, ca_data: bytes, interactive: bool = False) -> str:
    """KUBERNETES_EXEC_INFO: the ExecCredential a plugin reads (exec.go refreshCredsLocked), ``spec.cluster``
    (rest/exec.go ConfigToExecCluster; ``ca_data`` is the CA's data, or its file's content) when the plugin asks."""
    assert rest.exec is not None
    spec: dict[str, Any] = {"interactive": interactive}
    if rest.exec.provide_cluster_info:
        cluster: dict[str, Any] = {"server": rest.server}
        if rest.tls_server_name:
            cluster["tls-server-name"] = rest.tls_server_name
        if rest.insecure:
            cluster["insecure-skip-tls-verify"] = True
        if ca_data:
            cluster["certificate-authority-data"] = base64.b64encode(ca_data).decode()
        if rest.proxy_url:
            cluster["proxy-url"] = rest.proxy_url
        if rest.exec.cluster_config is not None:
            cluster["config"] = rest.exec.cluster_config
        spec["cluster"] = cluster
    return json.dumps({"kind": "ExecCredential", "apiVersion": rest.exec.api_version, "spec": spec},
                      separators=(",", ":"))


def interactive(exec_: ExecConfig) -> bool:
    """exec.go isInteractive for a daemon (standard input never a terminal): never interactive, and a plugin that
    must be is refused."""
    if exec_.interactive_mode == "Always":
        raise KubeconfigError("exec plugin cannot support interactive mode: standard input is not a terminal")
    return False


def with_exec_credential(rest: RestConfig, stdout: str) -> RestConfig:
    """The plugin's answer (its standard output, an ExecCredential) as the credentials: a token or a certificate and
    key, and when they expire (exec.go refreshCredsLocked, its messages)."""
    assert rest.exec is not None
    try:
        body = json.loads(stdout)
    except ValueError as exc:
        raise KubeconfigError(f"decoding stdout: {exc}") from None
    if not isinstance(body, Mapping):
        raise KubeconfigError("decoding stdout: not a JSON object")
    returned = str(body.get("apiVersion") or "")
    if returned != rest.exec.api_version:
        raise KubeconfigError(f"exec plugin is configured to use API version {rest.exec.api_version}, "
                              f"plugin returned version {returned}")
    if body.get("kind") != "ExecCredential":
        raise KubeconfigError(f"decoding stdout: kind {body.get('kind')!r} is not ExecCredential")
    status = body.get("status")
    if not isinstance(status, Mapping):
        raise KubeconfigError("exec plugin didn't return a status field")
    token = str(status.get("token") or "")
    cert = str(status.get("clientCertificateData") or "")
    key = str(status.get("clientKeyData") or "")
    if not token and not cert and not key:
        raise KubeconfigError("exec plugin didn't return a token or cert/key pair")
    if bool(cert) != bool(key):
        raise KubeconfigError("exec plugin returned only certificate or key, not both")
    expiration = None
    if status.get("expirationTimestamp"):
        try:
            expiration = datetime.datetime.fromisoformat(str(status["expirationTimestamp"]).replace("Z", "+00:00"))
        except ValueError as exc:
            raise KubeconfigError(f"decoding stdout: expirationTimestamp: {exc}") from None
        if expiration.tzinfo is None:
            expiration = expiration.replace(tzinfo=datetime.UTC)
    return dataclasses.replace(rest, token=token, cert_file="", cert_data=cert.encode(), key_file="",
                               key_data=key.encode(), expiration=expiration, exec=None)
