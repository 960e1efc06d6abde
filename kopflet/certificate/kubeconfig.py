"""Reading the parts of a kubeconfig the client certificate's life needs, and writing the one a bootstrap leaves.
Pure: text in, values out.

Upstream: bootstrap.go loadRESTClientConfig (clientcmd: the current context's cluster and user, relative paths
resolved against the file's directory) and writeKubeconfigFromBootstrapping (clientcmd.WriteToFile), v1.37.1.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import posixpath
from collections.abc import Mapping
from typing import Any

import yaml

# The names writeKubeconfigFromBootstrapping gives its one cluster, user and context.
CLUSTER_NAME = "default-cluster"
USER_NAME = "default-auth"
CONTEXT_NAME = "default-context"
# clientcmd.WriteToFile: the file 0600, a missing directory 0755.
FILE_MODE = 0o600
DIRECTORY_MODE = 0o755


class KubeconfigError(ValueError):
    """The file is not a usable kubeconfig; the message says what is wrong."""


@dataclasses.dataclass(frozen=True)
class ClientConfig:
    """The current context of a kubeconfig, as far as a rest client needs it (restclient.Config's fields)."""

    server: str
    ca_file: str = ""
    ca_data: bytes = b""
    insecure: bool = False
    token: str = ""
    token_file: str = ""
    cert_file: str = ""
    cert_data: bytes = b""
    key_file: str = ""
    key_data: bytes = b""
    unsupported_auth: str = ""
    """An authentication kopflet's own client cannot do (``exec``, ``auth-provider``, ``username``); "" if none."""

    @property
    def has_client_certificate(self) -> bool:
        return bool(self.cert_file or self.cert_data)


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise KubeconfigError(f"{what}: expected a mapping")
    return value


def _named(items: Any, name: str, what: str) -> Mapping[str, Any]:
    """The ``what`` entry called ``name`` in a kubeconfig list (``clusters``, ``users``, ``contexts``)."""
    for item in items or []:
        if isinstance(item, Mapping) and item.get("name") == name:
            return _mapping(item.get(what), f"{what} {name!r}")
    raise KubeconfigError(f"{what} {name!r} is not in the file")


def _data(value: Any, field: str) -> bytes:
    if not value:
        return b""
    try:
        # Go's base64.StdEncoding skips line breaks (a YAML block wrapped at 64 columns); anything else is refused
        return base64.b64decode(str(value).replace("\r", "").replace("\n", ""), validate=True)
    except (binascii.Error, ValueError):
        raise KubeconfigError(f"{field}: not base64") from None


def _path(value: Any, base: str) -> str:
    """clientcmd ResolveLocalPaths: a relative path is relative to the kubeconfig's directory."""
    if not value:
        return ""
    text = str(value)
    return text if posixpath.isabs(text) else posixpath.normpath(posixpath.join(base, text))


def parse(text: str, location: str) -> ClientConfig:
    """The current context of the kubeconfig ``text`` read from the file ``location``. KubeconfigError when it is
    not YAML, names a context, cluster or user it lacks, has no server, or sets both a file and its data."""
    try:
        body = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise KubeconfigError(f"not valid YAML: {exc}") from None
    if not isinstance(body, Mapping):
        raise KubeconfigError("not a kubeconfig (expected a mapping)")
    contexts = body.get("contexts") or []
    current = body.get("current-context") or ""
    if not current:
        names = [c.get("name") for c in contexts if isinstance(c, Mapping)]
        if len(names) != 1:
            raise KubeconfigError("no current-context")
        current = names[0]
    context = _named(contexts, current, "context")
    cluster = _named(body.get("clusters"), str(context.get("cluster", "")), "cluster")
    user = _named(body.get("users"), str(context.get("user", "")), "user") if context.get("user") else {}
    server = str(cluster.get("server") or "")
    if not server:
        raise KubeconfigError(f"cluster {context.get('cluster')!r} has no server")
    base = posixpath.dirname(location)
    for field in ("certificate-authority",):
        if cluster.get(field) and cluster.get(f"{field}-data"):
            raise KubeconfigError(f"{field}-data and {field} are both specified")
    for field in ("client-certificate", "client-key"):
        if user.get(field) and user.get(f"{field}-data"):
            raise KubeconfigError(f"{field}-data and {field} are both specified")
    unsupported = next((key for key in ("exec", "auth-provider", "username") if user.get(key)), "")
    return ClientConfig(
        server=server.rstrip("/"),
        ca_file=_path(cluster.get("certificate-authority"), base),
        ca_data=_data(cluster.get("certificate-authority-data"), "certificate-authority-data"),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        token=str(user.get("token") or ""),
        token_file=_path(user.get("tokenFile"), base),
        cert_file=_path(user.get("client-certificate"), base),
        cert_data=_data(user.get("client-certificate-data"), "client-certificate-data"),
        key_file=_path(user.get("client-key"), base),
        key_data=_data(user.get("client-key-data"), "client-key-data"),
        unsupported_auth=unsupported,
    )


def bootstrapped(bootstrap: ClientConfig, pem_path: str) -> str:
    """The kubeconfig writeKubeconfigFromBootstrapping writes: the bootstrap file's server, CA (its file when it
    names one, else its data) and TLS verification, and the certificate store's current pair for both the client
    certificate and key. Keys sorted and ``preferences: {}``, as clientcmd's YAML encoding has them."""
    cluster: dict[str, Any] = {"server": bootstrap.server}
    if bootstrap.insecure:
        cluster["insecure-skip-tls-verify"] = True
    if bootstrap.ca_file:
        cluster["certificate-authority"] = bootstrap.ca_file
    elif bootstrap.ca_data:
        cluster["certificate-authority-data"] = base64.b64encode(bootstrap.ca_data).decode()
    body = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CLUSTER_NAME, "cluster": cluster}],
        "users": [{"name": USER_NAME, "user": {"client-certificate": pem_path, "client-key": pem_path}}],
        "contexts": [{"name": CONTEXT_NAME,
                      "context": {"cluster": CLUSTER_NAME, "user": USER_NAME, "namespace": "default"}}],
        "current-context": CONTEXT_NAME,
        "preferences": {},
    }
    return yaml.safe_dump(body, sort_keys=True, default_flow_style=False)
