"""kopflet.certificate.clientcmd: kubeconfig files to a rest config as client-go's clientcmd builds one (merging,
relative paths, which credentials, ConfirmUsable's messages), the in-cluster config, and an exec plugin's
ExecCredential in and out (client-go v0.37.1)."""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json
from typing import Any

import pytest
import yaml

from kopflet.certificate import clientcmd
from kopflet.certificate.clientcmd import ExecConfig, Kubeconfig, RestConfig
from kopflet.certificate.kubeconfig import KubeconfigError

V1 = "client.authentication.k8s.io/v1"
V1BETA1 = "client.authentication.k8s.io/v1beta1"


def text(cluster: dict[str, Any] | None = None, user: dict[str, Any] | None = None,
         context: dict[str, Any] | None = None, current: str = "c") -> str:
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "k", "cluster": {"server": "https://a:6443"} if cluster is None else cluster}],
        "users": [{"name": "u", "user": user or {}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", **(context or {})}}],
        "current-context": current})


def rest(cluster: dict[str, Any] | None = None, user: dict[str, Any] | None = None, **kwargs: Any) -> RestConfig:
    return clientcmd.client_config(clientcmd.load(text(cluster, user, **kwargs), "/etc/kopflet/node.kubeconfig"))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize(("cluster", "user", "context", "expected"), [
    (None, {"token": "t"}, None, RestConfig("https://a:6443", token="t")),
    # relative paths against the file's directory (ResolveLocalPaths); a trailing slash dropped
    ({"server": "https://a:6443/", "certificate-authority": "pki/ca.crt"},
     {"client-certificate": "../node.crt", "client-key": "node.key"}, None,
     RestConfig("https://a:6443", ca_file="/etc/kopflet/pki/ca.crt", cert_file="/etc/node.crt",
                key_file="/etc/kopflet/node.key")),
    ({"server": "https://a:6443", "certificate-authority": "/abs/ca.crt"}, {"tokenFile": "tok"}, None,
     RestConfig("https://a:6443", ca_file="/abs/ca.crt", token_file="/etc/kopflet/tok")),
    # a token and a tokenFile: both kept, the token is used (getUserIdentificationPartialConfig)
    (None, {"token": "t", "tokenFile": "/t"}, None, RestConfig("https://a:6443", token="t", token_file="/t")),
    ({"server": "https://a:6443", "certificate-authority-data": b64(b"CA"), "insecure-skip-tls-verify": True,
      "tls-server-name": "api", "proxy-url": "socks5://p:1080"},
     {"client-certificate-data": b64(b"C"), "client-key-data": b64(b"K")}, {"namespace": "ns"},
     RestConfig("https://a:6443", ca_data=b"CA", insecure=True, tls_server_name="api", proxy_url="socks5://p:1080",
                cert_data=b"C", key_data=b"K", namespace="ns")),
    (None, {"username": "admin", "password": "secret"}, None,
     RestConfig("https://a:6443", username="admin", password="secret")),
    # a key without a certificate is no client certificate (only with one are both taken)
    (None, {"client-key": "k.key", "token": "t"}, None, RestConfig("https://a:6443", token="t")),
    # not https: no credentials and no TLS settings (IsConfigTransportTLS)
    ({"server": "http://a:8080", "certificate-authority": "/ca"}, {"token": "t"}, {"namespace": "ns"},
     RestConfig("http://a:8080", namespace="ns")),
    # exec: a command naming a path is resolved, a bare one is left to $PATH; v1beta1 defaults to IfAvailable
    (None, {"exec": {"apiVersion": V1BETA1, "command": "./bin/plugin", "args": ["get", 1],
                     "env": [{"name": "A", "value": "b"}], "installHint": "install it", "provideClusterInfo": True}},
     None, RestConfig("https://a:6443", exec=ExecConfig(
         "/etc/kopflet/bin/plugin", ("get", "1"), (("A", "b"),), V1BETA1, "install it", True, "IfAvailable"))),
    ({"server": "https://a:6443", "extensions": [{"name": "client.authentication.k8s.io/exec",
                                                  "extension": {"audience": "x"}}]},
     {"exec": {"apiVersion": V1, "command": "aws", "interactiveMode": "Never"}}, None,
     RestConfig("https://a:6443", exec=ExecConfig("aws", api_version=V1, interactive_mode="Never",
                                                  cluster_config={"audience": "x"}))),
])
def test_client_config(cluster: dict[str, Any] | None, user: dict[str, Any], context: dict[str, Any] | None,
                       expected: RestConfig) -> None:
    assert rest(cluster, user, context=context) == expected


@pytest.mark.parametrize(("kubeconfig", "message"), [
    (text(current="nope"), "invalid configuration: [context was not found for specified context: nope, "
                           "cluster has no server defined]"),
    ("", "invalid configuration: no configuration has been provided, try setting KUBERNETES_MASTER environment "
         "variable"),
    (text(current=""), "invalid configuration: no configuration has been provided"),
    (text({"certificate-authority": "/ca"}), 'invalid configuration: no server found for cluster "k"'),
    (text({"server": "https://a", "certificate-authority": "/ca", "certificate-authority-data": b64(b"x")}),
     "certificate-authority-data and certificate-authority are both specified for k."),
    (text({"server": "https://a", "proxy-url": "ftp://p"}),
     'invalid \'proxy-url\' "ftp://p" for cluster "k": unsupported scheme "ftp", must be http, https, or socks5'),
    (text(user={"client-certificate": "c.crt"}),
     "client-key-data or client-key must be specified for u to use the clientCert authentication method."),
    (text(user={"client-certificate": "c", "client-certificate-data": b64(b"c"), "client-key": "k"}),
     "client-cert-data and client-cert are both specified for u."),
    (text(user={"token": "t", "username": "a", "password": "b"}),
     "more than one authentication method found for u; found [token basicAuth], only one is allowed"),
    (text(user={"auth-provider": {"name": "gcp", "config": {}}}),
     'user u: auth-provider "gcp" is not supported by kopflet (client-go has no built-in auth providers): use an '
     "exec credential plugin"),
    (text(user={"auth-provider": {"name": "oidc"}, "exec": {"command": "x", "apiVersion": V1,
                                                            "interactiveMode": "Never"}}),
     "authProvider cannot be provided in combination with an exec plugin for u"),
    (text(user={"exec": {"command": "x", "apiVersion": V1}}),
     "interactiveMode must be specified for u to use exec authentication plugin"),
    (text(user={"exec": {"command": "x", "apiVersion": V1, "interactiveMode": "Sometimes"}}),
     'invalid interactiveMode for u: "Sometimes"'),
    (text(user={"exec": {"apiVersion": V1, "interactiveMode": "Never", "env": [{"value": "v"}]}}),
     "[command must be specified for u to use exec authentication plugin, env variable name must be specified for u"),
    (text(user={"exec": {"command": "x", "interactiveMode": "Never"}}),
     "apiVersion must be specified for u to use exec authentication plugin"),
    (text(user={"exec": {"command": "x", "apiVersion": "client.authentication.k8s.io/v1alpha1",
                         "interactiveMode": "Never"}}),
     'exec plugin: invalid apiVersion "client.authentication.k8s.io/v1alpha1"'),
    (text(user={"client-certificate-data": "not base64!", "client-key-data": b64(b"k")}),
     "client-certificate-data: not base64"),
    ("clusters: [", "not valid YAML"),
    ("- a list", "not a kubeconfig"),
    ("clusters: {k: {}}", "clusters: expected a list"),
])
def test_a_config_that_is_not_usable_says_why(kubeconfig: str, message: str) -> None:
    with pytest.raises(KubeconfigError) as exc:
        clientcmd.client_config(clientcmd.load(kubeconfig, "/k"))
    assert message in str(exc.value)


def file(clusters: dict[str, str], users: dict[str, dict[str, Any]], contexts: dict[str, tuple[str, str]],
         current: str | None, location: str) -> Kubeconfig:
    body: dict[str, Any] = {
        "clusters": [{"name": n, "cluster": {"server": s, "certificate-authority": "ca.crt"}}
                     for n, s in clusters.items()],
        "users": [{"name": n, "user": u} for n, u in users.items()],
        "contexts": [{"name": n, "context": {"cluster": c, "user": u}} for n, (c, u) in contexts.items()]}
    if current is not None:
        body["current-context"] = current
    return clientcmd.load(yaml.safe_dump(body), location)


@pytest.mark.parametrize(("files", "expected"), [
    # the first file to set current-context chooses; each entry keeps its own file's directory
    ([file({"k": "https://one"}, {"u": {"tokenFile": "t1"}}, {"c": ("k", "u")}, None, "/one/config"),
      file({"k": "https://two"}, {"u": {"tokenFile": "t2"}}, {"c": ("k", "u"), "d": ("k", "u")}, "c", "/two/config"),
      file({}, {}, {}, "d", "/three/config")],
     RestConfig("https://one", ca_file="/one/ca.crt", token_file="/one/t1")),
    # the first file to name a cluster, user or context keeps it whole: no field-by-field merge
    ([file({}, {}, {"c": ("k2", "u2")}, "c", "/one/config"),
      file({"k2": "https://k2"}, {"u2": {"token": "t"}}, {"c": ("k", "u")}, "d", "/two/config"),
      file({"k2": "https://no"}, {"u2": {"token": "no", "username": "x"}}, {}, None, "/three/config")],
     RestConfig("https://k2", ca_file="/two/ca.crt", token="t")),
])
def test_kubeconfig_files_merge_as_clientcmd_merges_them(files: list[Kubeconfig], expected: RestConfig) -> None:
    assert clientcmd.client_config(clientcmd.merge(files)) == expected


@pytest.mark.parametrize(("host", "server"), [
    ("10.96.0.1", "https://10.96.0.1:443"),
    ("fd00::1", "https://[fd00::1]:443"),
    ("kubernetes.default.svc", "https://kubernetes.default.svc:443"),
])
def test_in_cluster(host: str, server: str) -> None:
    assert clientcmd.in_cluster(host, "443", "tok\n", "/sa/ca.crt", "kube-system\n") == RestConfig(
        server, ca_file="/sa/ca.crt", token="tok", namespace="kube-system")


EXEC = ExecConfig("plugin", api_version=V1, interactive_mode="IfAvailable")


@pytest.mark.parametrize(("config", "ca_data", "expected"), [
    (RestConfig("https://a", exec=EXEC), b"",
     {"kind": "ExecCredential", "apiVersion": V1, "spec": {"interactive": False}}),
    (RestConfig("https://a", tls_server_name="api", insecure=True, proxy_url="http://p",
                exec=dataclasses.replace(EXEC, provide_cluster_info=True, cluster_config={"k": "v"})), b"CA",
     {"kind": "ExecCredential", "apiVersion": V1, "spec": {"interactive": False, "cluster": {
         "server": "https://a", "tls-server-name": "api", "insecure-skip-tls-verify": True,
         "certificate-authority-data": b64(b"CA"), "proxy-url": "http://p", "config": {"k": "v"}}}}),
])
def test_exec_info(config: RestConfig, ca_data: bytes, expected: dict[str, Any]) -> None:
    assert json.loads(clientcmd.exec_info(config, ca_data)) == expected


@pytest.mark.parametrize(("mode", "refused"), [("Never", False), ("IfAvailable", False), ("Always", True)])
def test_a_daemon_is_never_interactive(mode: str, refused: bool) -> None:
    exec_ = ExecConfig("p", api_version=V1, interactive_mode=mode)
    if refused:
        with pytest.raises(KubeconfigError, match="standard input is not a terminal"):
            clientcmd.interactive(exec_)
    else:
        assert clientcmd.interactive(exec_) is False


def answer(status: Any, api_version: str = V1, kind: str = "ExecCredential") -> str:
    return json.dumps({"apiVersion": api_version, "kind": kind, "status": status})


@pytest.mark.parametrize(("stdout", "expected"), [
    (answer({"token": "t"}), RestConfig("https://a", token="t")),
    (answer({"clientCertificateData": "CERT", "clientKeyData": "KEY", "expirationTimestamp": "2030-01-02T03:04:05Z"}),
     RestConfig("https://a", cert_data=b"CERT", key_data=b"KEY",
                expiration=datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.UTC))),
    ("not json", "decoding stdout: "),
    (answer({"token": "t"}, api_version=V1BETA1),
     f"exec plugin is configured to use API version {V1}, plugin returned version {V1BETA1}"),
    (answer({"token": "t"}, kind="Other"), "decoding stdout: kind 'Other' is not ExecCredential"),
    (answer(None), "exec plugin didn't return a status field"),
    (answer({}), "exec plugin didn't return a token or cert/key pair"),
    (answer({"clientCertificateData": "CERT"}), "exec plugin returned only certificate or key, not both"),
    (answer({"token": "t", "expirationTimestamp": "soon"}), "decoding stdout: expirationTimestamp"),
])
def test_the_exec_plugins_answer(stdout: str, expected: RestConfig | str) -> None:
    config = RestConfig("https://a", exec=EXEC)
    if isinstance(expected, str):
        with pytest.raises(KubeconfigError) as exc:
            clientcmd.with_exec_credential(config, stdout)
        assert str(exc.value).startswith(expected)
    else:
        assert clientcmd.with_exec_credential(config, stdout) == expected


@pytest.mark.parametrize(("config", "static"), [
    (RestConfig("https://a"), False),
    (RestConfig("https://a", token_file="/t"), True),
    (RestConfig("https://a", username="u"), True),
    (RestConfig("https://a", cert_data=b"c"), False),  # a certificate without a key is no certificate auth
    (RestConfig("https://a", cert_data=b"c", key_file="/k"), True),
])
def test_static_credentials_keep_the_plugin_from_running(config: RestConfig, static: bool) -> None:
    assert config.has_static_auth is static
