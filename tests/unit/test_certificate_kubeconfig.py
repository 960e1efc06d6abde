"""kopflet.certificate.kubeconfig: the current context of a kubeconfig (clientcmd's loading, relative paths from the
file's directory) and the kubeconfig a bootstrap writes (bootstrap.go writeKubeconfigFromBootstrapping)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import yaml

from kopflet.certificate import kubeconfig
from kopflet.certificate.kubeconfig import ClientConfig, KubeconfigError

CA = b"-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n"


def config(cluster: dict[str, Any], user: dict[str, Any], current: str | None = "c", **extra: Any) -> str:
    body: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "k", "cluster": cluster}, {"name": "other", "cluster": {"server": "https://x"}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}], **extra}
    if current is not None:
        body["current-context"] = current
    return yaml.safe_dump(body)


@pytest.mark.parametrize(("cluster", "user", "expected"), [
    # kubeadm's bootstrap-kubelet.conf: CA file and a bootstrap token
    ({"server": "https://10.0.0.1:6443/", "certificate-authority": "/etc/kubernetes/pki/ca.crt"},
     {"token": "abcdef.0123456789abcdef"},
     ClientConfig("https://10.0.0.1:6443", ca_file="/etc/kubernetes/pki/ca.crt", token="abcdef.0123456789abcdef")),
    # relative paths are relative to the file's directory
    ({"server": "https://a", "certificate-authority": "pki/ca.crt"},
     {"client-certificate": "../node.crt", "client-key": "node.key", "tokenFile": "tok"},
     ClientConfig("https://a", ca_file="/etc/kopflet/pki/ca.crt", cert_file="/etc/node.crt",
                  key_file="/etc/kopflet/node.key", token_file="/etc/kopflet/tok")),
    ({"server": "https://a", "certificate-authority-data": base64.b64encode(CA).decode(),
      "insecure-skip-tls-verify": True},
     {"client-certificate-data": base64.b64encode(b"C").decode(), "client-key-data": base64.b64encode(b"K").decode()},
     ClientConfig("https://a", ca_data=CA, insecure=True, cert_data=b"C", key_data=b"K")),
    ({"server": "https://a"}, {"exec": {"command": "aws"}}, ClientConfig("https://a", unsupported_auth="exec")),
])
def test_parse(cluster: dict[str, Any], user: dict[str, Any], expected: ClientConfig) -> None:
    assert kubeconfig.parse(config(cluster, user), "/etc/kopflet/bootstrap.kubeconfig") == expected


def test_parse_takes_json_and_the_only_context_without_current_context() -> None:
    text = json.dumps(yaml.safe_load(config({"server": "https://a"}, {"token": "t"}, current=None)))
    assert kubeconfig.parse(text, "/k") == ClientConfig("https://a", token="t")


@pytest.mark.parametrize(("text", "message"), [
    ("a: [", "not valid YAML"),
    ("- a", "not a kubeconfig"),
    (config({"server": "https://a"}, {}, current="nope"), "context 'nope' is not in the file"),
    (config({}, {}), "cluster 'k' has no server"),
    (config({"server": "https://a", "certificate-authority": "/ca", "certificate-authority-data": "Q0E="}, {}),
     "certificate-authority-data and certificate-authority are both specified"),
    (config({"server": "https://a"}, {"client-key": "/k", "client-key-data": "Sw=="}),
     "client-key-data and client-key are both specified"),
    (config({"server": "https://a"}, {"client-certificate-data": "!!"}), "client-certificate-data: not base64"),
    (yaml.safe_dump({"contexts": [{"name": "a"}, {"name": "b"}]}), "no current-context"),
])
def test_parse_errors(text: str, message: str) -> None:
    with pytest.raises(KubeconfigError, match=message):
        kubeconfig.parse(text, "/k")


PEM = "/var/lib/kubelet/pki/kubelet-client-current.pem"


def test_bootstrapped_is_the_kubeconfig_upstream_writes() -> None:
    text = kubeconfig.bootstrapped(ClientConfig("https://10.0.0.1:6443", ca_file="/etc/kubernetes/pki/ca.crt",
                                                token="abcdef.0123456789abcdef"), PEM)
    assert text == f"""\
apiVersion: v1
clusters:
- cluster:
    certificate-authority: /etc/kubernetes/pki/ca.crt
    server: https://10.0.0.1:6443
  name: default-cluster
contexts:
- context:
    cluster: default-cluster
    namespace: default
    user: default-auth
  name: default-context
current-context: default-context
kind: Config
preferences: {{}}
users:
- name: default-auth
  user:
    client-certificate: {PEM}
    client-key: {PEM}
"""


@pytest.mark.parametrize(("bootstrap", "cluster"), [
    # the CA's data only when the bootstrap file names no CA file; TLS verification as the bootstrap file has it
    (ClientConfig("https://a", ca_data=CA), {"server": "https://a",
                                             "certificate-authority-data": base64.b64encode(CA).decode()}),
    (ClientConfig("https://a", ca_file="/ca", ca_data=CA), {"server": "https://a", "certificate-authority": "/ca"}),
    (ClientConfig("https://a", insecure=True), {"server": "https://a", "insecure-skip-tls-verify": True}),
])
def test_bootstrapped_cluster(bootstrap: ClientConfig, cluster: dict[str, Any]) -> None:
    body = yaml.safe_load(kubeconfig.bootstrapped(bootstrap, PEM))
    assert body["clusters"] == [{"name": "default-cluster", "cluster": cluster}]


def test_a_bootstrapped_kubeconfig_reads_back_with_the_pair_and_without_the_token() -> None:
    bootstrap = ClientConfig("https://a", ca_file="/ca", token="abcdef.0123456789abcdef")
    assert kubeconfig.parse(kubeconfig.bootstrapped(bootstrap, PEM), "/etc/kubelet.conf") == ClientConfig(
        "https://a", ca_file="/ca", cert_file=PEM, key_file=PEM)


def test_inline_data_wrapped_over_lines_is_read_as_go_reads_it() -> None:
    """Go's base64 skips line breaks: a kubeconfig whose data is a YAML block wrapped at 64 columns logs in."""
    data = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n" + b"x" * 100 + b"\n-----END CERTIFICATE-----\n").decode()
    wrapped = "\n".join(data[i:i + 64] for i in range(0, len(data), 64))
    text = ("apiVersion: v1\nkind: Config\ncurrent-context: c\n"
            "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
            "clusters:\n- name: k\n  cluster:\n    server: https://h:6443\n    certificate-authority-data: |\n"
            + "".join(f"      {line}\n" for line in wrapped.splitlines())
            + "users: [{name: u, user: {token: t}}]\n")
    assert kubeconfig.parse(text, "/etc/kubernetes/kubelet.conf").ca_data == base64.b64decode(data)
    with pytest.raises(kubeconfig.KubeconfigError, match="not base64"):
        block = "certificate-authority-data: |\n      "
        kubeconfig.parse(text.replace(block, block + "!"), "/etc/kubernetes/kubelet.conf")
