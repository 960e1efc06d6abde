"""kopflet's own login (kopflet.certificate.login, through handlers.configuring.connection_info): real kubeconfig
files, token files and exec credential plugins (small Python scripts) in tmp_path, as client-go's clientcmd and
exec.go would read and run them; and the agent's modules importable and logging in without the ``kubernetes``
package."""

from __future__ import annotations

import base64
import datetime
import json
import logging
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml

from handlers import configuring
from kopflet.certificate import login
from kopflet.client.kubeapi import Credentials
from kopflet.config.settings import AgentConfig

REPO = Path(__file__).resolve().parents[2]
LOGGER = logging.getLogger("test")
V1 = "client.authentication.k8s.io/v1"
V1BETA1 = "client.authentication.k8s.io/v1beta1"


def kubeconfig(folder: Path, user: dict[str, Any], cluster: dict[str, Any] | None = None,
               name: str = "node.kubeconfig", namespace: str | None = None) -> Path:
    context: dict[str, Any] = {"cluster": "c", "user": "u"}
    if namespace:
        context["namespace"] = namespace
    path = folder / name
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster or {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": context}], "current-context": "x"}))
    return path


def connect(path: Path) -> kopf.ConnectionInfo:
    return configuring.connection_info(AgentConfig(node_name="n", kubeconfig=str(path)), logger=LOGGER,
                                       settings=kopf.OperatorSettings())


def plugin(folder: Path, body: str, name: str = "plugin") -> Path:
    """An exec credential plugin: a Python script that records what it was given (argv, KUBERNETES_EXEC_INFO, its
    env, whether stdin is a terminal) in seen.json, then runs ``body``."""
    path = folder / name
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent("""\
        import json, os, sys
        seen = {"argv": sys.argv[1:], "info": json.loads(os.environ["KUBERNETES_EXEC_INFO"]),
                "A": os.environ.get("A"), "HOME": os.environ.get("HOME"), "stdin": sys.stdin.read()}
        json.dump(seen, open(os.path.join(os.path.dirname(__file__), "seen.json"), "w"))
        """) + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def credential(status: dict[str, Any], api_version: str = V1) -> str:
    return f"print({json.dumps(json.dumps({'apiVersion': api_version, 'kind': 'ExecCredential', 'status': status}))})"


def exec_user(command: str, api_version: str = V1, **extra: Any) -> dict[str, Any]:
    return {"exec": {"apiVersion": api_version, "command": command, "interactiveMode": "IfAvailable", **extra}}


# --- kubeconfig credentials -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("user", "files", "expected"), [
    ({"token": "t"}, {}, {"scheme": "Bearer", "token": "t"}),
    ({"tokenFile": "token"}, {"token": "from-file\n"}, {"scheme": "Bearer", "token": "from-file"}),
    ({"token": "t", "tokenFile": "token"}, {"token": "from-file"}, {"scheme": "Bearer", "token": "t"}),
    ({"username": "admin", "password": "pw"}, {}, {"username": "admin", "password": "pw"}),
    ({"client-certificate": "node.crt", "client-key": "node.key"}, {"node.crt": "C", "node.key": "K"},
     {"certificate_path": "{dir}/node.crt", "private_key_path": "{dir}/node.key"}),
    ({"client-certificate-data": base64.b64encode(b"C").decode(), "client-key-data": base64.b64encode(b"K").decode()},
     {}, {"certificate_data": base64.b64encode(b"C").decode(), "private_key_data": base64.b64encode(b"K").decode()}),
])
def test_the_users_credentials(tmp_path: Path, user: dict[str, Any], files: dict[str, str],
                               expected: dict[str, Any]) -> None:
    for name, content in files.items():
        (tmp_path / name).write_text(content)
    info = connect(kubeconfig(tmp_path, user, namespace="ns"))
    want = kopf.ConnectionInfo(server="https://127.0.0.1:6443", insecure=False, default_namespace="ns",
                               **{k: v.format(dir=tmp_path) for k, v in expected.items()})
    assert info == want


def test_the_clusters_settings_reach_kopf_and_the_agents_client(tmp_path: Path) -> None:
    ca = b"-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n"
    cluster = {"server": "https://api:6443", "certificate-authority-data": base64.b64encode(ca).decode(),
               "insecure-skip-tls-verify": True, "proxy-url": "http://proxy:3128"}
    info = connect(kubeconfig(tmp_path, {"client-certificate-data": base64.b64encode(b"CERT").decode(),
                                         "client-key-data": base64.b64encode(b"KEY").decode()}, cluster))
    assert (info.insecure, info.proxy_url, info.default_namespace) == (True, "http://proxy:3128", None)
    agent = Credentials.from_kopf(info)  # the agent's own client decodes the same bytes
    assert (agent.ca_data, agent.certificate_data, agent.private_key_data) == (ca, b"CERT", b"KEY")


@pytest.mark.parametrize(("user", "cluster", "message"), [
    ({"auth-provider": {"name": "oidc", "config": {"idp-issuer-url": "https://x"}}}, None,
     'auth-provider "oidc" is not supported by kopflet'),
    ({"tokenFile": "missing-token"}, None, "open {dir}/missing-token: no such file or directory"),
    ({"tokenFile": "empty"}, None, 'read empty token from file "{dir}/empty"'),
    ({"client-certificate": "c.crt", "client-key": "c.key"}, None,
     "invalid configuration: [unable to read client-cert {dir}/c.crt for u due to open {dir}/c.crt: no such file or "
     "directory, unable to read client-key {dir}/c.key for u"),
    ({"token": "t"}, {"server": "https://a", "certificate-authority": "ca.crt"},
     "unable to read certificate-authority {dir}/ca.crt for c due to"),
    ({"token": "t"}, {"certificate-authority-data": "Q0E="}, 'invalid configuration: no server found for cluster "c"'),
])
def test_a_kubeconfig_that_is_not_usable_is_a_permanent_error(tmp_path: Path, user: dict[str, Any],
                                                              cluster: dict[str, Any] | None, message: str) -> None:
    (tmp_path / "empty").write_text("\n")
    path = kubeconfig(tmp_path, user, cluster)
    with pytest.raises(kopf.PermanentError) as exc:
        connect(path)
    assert str(exc.value).startswith(f"--kubeconfig {path}: ")
    assert message.format(dir=tmp_path) in str(exc.value)


@pytest.mark.parametrize(("content", "message"), [
    (None, "no such file or directory"),
    ("clusters: [", "not valid YAML"),
    ("", "no configuration has been provided"),
])
def test_a_missing_or_broken_kubeconfig_file(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "node.kubeconfig"
    if content is not None:
        path.write_text(content)
    with pytest.raises(kopf.PermanentError, match=f"^--kubeconfig {path}: .*{message}"):
        connect(path)


# --- $KUBECONFIG ----------------------------------------------------------------------------------------------------

def test_kubeconfig_env_files_are_merged_and_their_paths_are_their_own(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    (two / "tok").write_text("two-token")
    (one / "first").write_text(yaml.safe_dump({"current-context": "x"}))  # only chooses the context
    kubeconfig(two, {"tokenFile": "tok"}, name="second")
    kubeconfig(one, {"token": "ignored"}, {"server": "https://ignored"}, name="third")  # its names are taken
    environ = {"KUBECONFIG": f"{one / 'first'}:{two / 'second'}:{tmp_path / 'missing'}:{one / 'third'}"}
    source, rest = login.login("", environ)
    assert rest.server == "https://127.0.0.1:6443" and rest.token == "two-token"
    assert rest.token_file == str(two / "tok")
    assert source.startswith("the kubeconfig ")


def test_a_broken_file_in_kubeconfig_env_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "bad").write_text("users: 3")
    with pytest.raises(login.LoginError, match=f'^error loading config file "{tmp_path}/bad": users: expected a list'):
        login.login("", {"KUBECONFIG": str(tmp_path / "bad")})


# --- exec credential plugins ------------------------------------------------------------------------------------

def test_an_exec_plugin_is_run_as_client_go_runs_it(tmp_path: Path) -> None:
    command = plugin(tmp_path, credential({"token": "exec-token", "expirationTimestamp": "2030-01-02T03:04:05Z"}))
    (tmp_path / "ca.crt").write_bytes(b"CA")
    path = kubeconfig(tmp_path, exec_user(f"./{command.name}", args=["get-token", "--x"],
                                          env=[{"name": "A", "value": "from-config"}], provideClusterInfo=True),
                      {"server": "https://127.0.0.1:6443", "certificate-authority": "ca.crt"})
    info = connect(path)
    assert (info.scheme, info.token) == ("Bearer", "exec-token")
    assert info.expiration == datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)  # Kopf logs in again then
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["argv"] == ["get-token", "--x"]
    assert seen["A"] == "from-config" and seen["HOME"] == os.environ.get("HOME")  # the process's env and its own
    assert seen["stdin"] == ""  # not a terminal: nothing to read
    assert seen["info"] == {"kind": "ExecCredential", "apiVersion": V1, "spec": {"interactive": False, "cluster": {
        "server": "https://127.0.0.1:6443", "certificate-authority-data": base64.b64encode(b"CA").decode()}}}


def test_an_exec_plugin_on_path_with_a_certificate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plugin(tmp_path, credential({"clientCertificateData": "-----BEGIN CERTIFICATE-----\nC\n",
                                 "clientKeyData": "-----BEGIN PRIVATE KEY-----\nK\n"}, V1BETA1), name="kube-plugin")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    info = connect(kubeconfig(tmp_path, exec_user("kube-plugin", V1BETA1)))
    assert info.token is None and info.expiration is None
    agent = Credentials.from_kopf(info)
    assert (agent.certificate_data, agent.private_key_data) == (b"-----BEGIN CERTIFICATE-----\nC\n",
                                                                b"-----BEGIN PRIVATE KEY-----\nK\n")
    assert json.loads((tmp_path / "seen.json").read_text())["info"] == {
        "kind": "ExecCredential", "apiVersion": V1BETA1, "spec": {"interactive": False}}


def test_static_credentials_keep_the_exec_plugin_from_running(tmp_path: Path) -> None:
    command = plugin(tmp_path, "raise SystemExit(1)")
    info = connect(kubeconfig(tmp_path, {"token": "static", **exec_user(str(command))}))
    assert info.token == "static"
    assert not (tmp_path / "seen.json").exists()


@pytest.mark.parametrize(("body", "extra", "message"), [
    ("import sys; print('token expired, run login', file=sys.stderr); raise SystemExit(3)", {},
     "exec: executable {command} failed with exit code 3: token expired, run login"),
    ("print('{not json')", {}, "decoding stdout: "),
    (credential({"token": "t"}, V1BETA1), {},
     f"exec plugin is configured to use API version {V1}, plugin returned version {V1BETA1}"),
    (credential({}), {}, "exec plugin didn't return a token or cert/key pair"),
    ("print('{}')", {"interactiveMode": "Always"},
     "exec plugin cannot support interactive mode: standard input is not a terminal"),
])
def test_an_exec_plugin_that_fails_is_a_permanent_error(tmp_path: Path, body: str, extra: dict[str, Any],
                                                        message: str) -> None:
    command = plugin(tmp_path, body)
    path = kubeconfig(tmp_path, exec_user(str(command), **extra))
    with pytest.raises(kopf.PermanentError) as exc:
        connect(path)
    assert str(exc.value).startswith(f"--kubeconfig {path}: {message.format(command=command)}")


def test_a_missing_exec_plugin_gives_its_install_hint(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path, exec_user("no-such-kopflet-plugin", installHint="apt install the-plugin"))
    with pytest.raises(kopf.PermanentError) as exc:
        connect(path)
    assert "exec: executable no-such-kopflet-plugin not found\n\nIt looks like you are trying" in str(exc.value)
    assert str(exc.value).endswith("\n\napt install the-plugin")


def test_an_exec_plugin_that_hangs_is_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(login, "EXEC_TIMEOUT", 0.5)
    command = plugin(tmp_path, "import time; time.sleep(30)")
    with pytest.raises(kopf.PermanentError, match=r"exec: executable .* did not answer in 0.5s"):
        connect(kubeconfig(tmp_path, exec_user(str(command))))


# --- without the kubernetes package -----------------------------------------------------------------------------

NO_KUBERNETES = """
import sys
sys.modules["kubernetes"] = None  # any import of it (or of kubernetes.*) now raises ImportError
import kopf, logging
import handlers, handlers.cli, handlers.explain, handlers.hollow, handlers.standalone
import kopflet.node
from handlers import configuring
from kopflet.config.settings import AgentConfig
info = configuring.connection_info(AgentConfig(node_name="n", kubeconfig=sys.argv[1]),
                                   logger=logging.getLogger("t"), settings=kopf.OperatorSettings())
assert info.token == "secret-token", info
loaded = [name for name, module in sys.modules.items() if module is not None and name.split(".")[0] == "kubernetes"]
assert loaded == [], loaded
print("ok")
"""


def test_the_agent_imports_and_logs_in_without_the_kubernetes_package(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path, {"token": "secret-token"})
    env = {k: v for k, v in os.environ.items() if not k.startswith("KOPFLET_")}
    proc = subprocess.run([sys.executable, "-c", NO_KUBERNETES, str(path)], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={**env, "PYTHONPATH": str(REPO), "NODE_NAME": "n"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
