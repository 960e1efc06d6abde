"""The `kopflet` command (handlers/cli.py) and the login with --kubeconfig (handlers/configuring.py).

No cluster: the command is run as a subprocess for --help and bad flags (it must exit before anything starts),
and in-process with kopf.run replaced to see what it would start. The login reads real kubeconfig files.
"""

from __future__ import annotations

import configparser
import dataclasses
import logging
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import kopf
import pytest

from handlers import cli, configuring
from kopflet.config import modes
from kopflet.config.settings import AgentConfig

REPO = Path(__file__).resolve().parents[2]
LOGGER = logging.getLogger("test")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("KOPFLET_ARGS", "NODE_NAME", "KOPFLET_NODE_NAME") and not k.startswith("KOPFLET_")}
    return {**env, "NODE_NAME": "test-node", **extra}


def kopflet(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "handlers.cli", *args], cwd=REPO, env=clean_env(**env),
                          capture_output=True, text=True, timeout=60)


# --- as a process -----------------------------------------------------------------------------------------------

def test_help_lists_the_kubelet_flags() -> None:
    proc = kopflet("--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Usage: kopflet [flags]")
    for flag in ("--kubeconfig", "--hostname-override", "--register-with-taints", "--config", "--healthz-port"):
        assert flag in proc.stdout
    assert proc.stderr == ""


def test_version() -> None:
    proc = kopflet("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("kopflet ")
    assert proc.stdout.rstrip().endswith("(Kubernetes v1.37.1)")


def test_as_the_nodes_kubelet_the_version_is_upstreams_line_as_kubeadm_parses_it() -> None:
    # kubeadm's preflight (KubeletVersion, SystemVerification): ^\s*Kubernetes v(semver)\s*$
    line = cli.version_line("/usr/local/bin/kubelet")
    assert re.fullmatch(r"\s*Kubernetes v(\d+)\.(\d+)\.(\d+)([-0-9a-zA-Z_.+]*)?\s*", line), line
    assert line.startswith("Kubernetes v1.37.1+kopflet.")


@pytest.mark.parametrize(("args", "env", "message"), [
    (["--max-pods=many"], {}, '--max-pods: expected an integer, got "many"'),
    (["--no-such-flag"], {}, "unknown flag: --no-such-flag"),
    (["run", "operator/main.py"], {}, 'unexpected argument "run"'),
    ([], {"KOPFLET_ARGS": "--register-with-taints=k=v"}, "--register-with-taints: invalid taint"),
    ([], {"KOPFLET_ARGS": "'unbalanced"}, "KOPFLET_ARGS: cannot split"),
    (["--config=/nonexistent/kubelet.yaml"], {}, "--config /nonexistent/kubelet.yaml: cannot read it"),
    (["--kubeconfig=/nonexistent/node.kubeconfig"], {}, "--kubeconfig /nonexistent/node.kubeconfig: no such file"),
])
def test_a_bad_flag_exits_2_before_anything_starts(args: list[str], env: dict[str, str], message: str) -> None:
    proc = kopflet(*args, **env)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_a_bad_config_file_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "kubelet.yaml"
    path.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfooBar: 1\n")
    proc = kopflet(f"--config={path}")
    assert proc.returncode == 2
    assert f'config file {path}: unknown field "fooBar"' in proc.stderr


def test_the_console_script_is_declared() -> None:
    parser = configparser.ConfigParser()
    parser.read(REPO / "setup.cfg")
    scripts = parser["options.entry_points"]["console_scripts"].strip().splitlines()
    assert "kopflet = handlers.cli:main" in [line.strip() for line in scripts]
    installed = Path(sys.executable).with_name("kopflet")
    if installed.exists():  # after `pip install -e .` (make venv): the real script behaves the same
        proc = subprocess.run([str(installed), "--max-pods=x"], env=clean_env(), capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 2 and "--max-pods" in proc.stderr


# --- in-process: what it starts ----------------------------------------------------------------------------------

@pytest.fixture
def sources(monkeypatch: pytest.MonkeyPatch) -> list[modes.ClientSources]:
    """The credentials `configuring.client_sources` finds: an in-cluster service account unless a test says."""
    found = [modes.ClientSources(in_cluster=True)]
    monkeypatch.setattr(configuring, "client_sources", lambda environ=None: found[0])
    return found


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch, sources: list[modes.ClientSources]) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(kopf, "run", lambda **kwargs: calls.append({**kwargs, "env": os.environ.get("KOPFLET_ARGS")}))
    monkeypatch.setattr(cli.standalone, "main", lambda decision: calls.append({"standalone": decision}) or 0)
    monkeypatch.setattr(kopf, "configure", lambda **kwargs: calls.append({"configure": kwargs}))
    monkeypatch.setattr(cli.logs_setup, "apply",
                        lambda *args, **kwargs: calls.append({"logging": args, "routing": kwargs}))
    for name in list(os.environ):
        if name.startswith("KOPFLET_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("NODE_NAME", "test-node")
    return calls


def test_main_runs_the_operator_with_the_flags_in_kopflet_args(started: list[dict[str, Any]]) -> None:
    args = ["--hostname-override=edge-1", "--node-labels=tier=a", "-v", "4"]
    assert cli.main(args) == 0
    configure, run = started
    # the format, -v and --vmodule, the format's output routing and the flush period, before the operator runs
    assert configure == {"logging": ("text", 4, ()),
                         "routing": {"split_stream": False, "info_buffer_bytes": 0, "flush_frequency": 5.0}}
    # No Kopf liveness endpoint: the agent serves the healthz port itself (kopflet.server.healthz_server).
    assert run == {"standalone": True, "clusterwide": True, "env": shlex.join(args)}


@pytest.mark.parametrize(("args", "routing"), [
    # only the options of the format in use apply (upstream's factories read their own format's)
    (["--logging-format=json", "--log-json-split-stream", "--log-json-info-buffer-size=64Ki",
      "--log-text-info-buffer-size=1Mi", "--log-flush-frequency=2s"],
     {"split_stream": True, "info_buffer_bytes": 65536, "flush_frequency": 2.0}),
    (["--log-json-split-stream", "--log-text-split-stream", "--log-text-info-buffer-size=1.5k"],
     {"split_stream": True, "info_buffer_bytes": 1500, "flush_frequency": 5.0}),
    (["--logging-format=json", "--log-text-split-stream"],
     {"split_stream": False, "info_buffer_bytes": 0, "flush_frequency": 5.0}),
])
def test_main_applies_the_formats_output_routing(started: list[dict[str, Any]], args: list[str],
                                                  routing: dict[str, Any]) -> None:
    assert cli.main(["--feature-gates=LoggingAlphaOptions=true", *args]) == 0
    assert started[0]["routing"] == routing


def test_main_refuses_split_streams_without_the_alpha_gate(started: list[dict[str, Any]],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--logging-format=json", "--log-json-split-stream"]) == 2
    assert started == []
    assert capsys.readouterr().err.startswith(
        "kopflet: invalid configuration: logging.options.json.splitStream: Forbidden: Feature LoggingAlphaOptions "
        "is disabled\n")


def test_main_puts_kopflet_args_from_the_environment_first(started: list[dict[str, Any]],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KOPFLET_ARGS", "--max-pods=3 --healthz-port=0")
    assert cli.main(["--max-pods=4"]) == 0
    run = started[-1]
    assert shlex.split(run["env"]) == ["--max-pods=3", "--healthz-port=0", "--max-pods=4"]
    assert "liveness_endpoint" not in run


def test_main_bad_flag_starts_nothing(started: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--max-pods=x"]) == 2
    assert started == []
    assert "--max-pods" in capsys.readouterr().err


def test_main_without_credentials_runs_standalone_without_kopf(started: list[dict[str, Any]],
                                                               sources: list[modes.ClientSources]) -> None:
    sources[0] = modes.ClientSources()
    args = ["--pod-manifest-path=/etc/kubernetes/manifests", "--authentication-token-webhook=false",
            "--authorization-mode=AlwaysAllow", "--anonymous-auth"]
    assert cli.main(args) == 0
    configure, run = started
    assert "logging" in configure  # logging is set up as for the operator
    assert run == {"standalone": modes.Decision(modes.Mode.STANDALONE)}
    assert shlex.split(os.environ["KOPFLET_ARGS"]) == args  # the start-up handler reads the flags from there


@pytest.mark.parametrize(("args", "message"), [
    ([], modes.NO_CLIENT_WEBHOOK_AUTHENTICATION),  # kopflet's defaults: both webhooks
    (["--authentication-token-webhook=false"], modes.NO_CLIENT_WEBHOOK_AUTHORIZATION),
])
def test_main_refuses_webhooks_in_standalone_mode_as_upstream(started: list[dict[str, Any]],
                                                              sources: list[modes.ClientSources],
                                                              capsys: pytest.CaptureFixture[str], args: list[str],
                                                              message: str) -> None:
    sources[0] = modes.ClientSources()
    assert cli.main(["--pod-manifest-path=/m", *args]) == 1  # upstream: run's error, exit status 1
    assert started == []  # nothing started, not even logging
    assert capsys.readouterr().err == f"kopflet: failed to run Kubelet: {message}\n"


def test_runonce_is_refused_with_upstreams_message(started: list[dict[str, Any]],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--runonce"]) == 2
    assert started == []
    assert capsys.readouterr().err.startswith("kopflet: invalid configuration: runOnce (--runOnce) true, Runonce mode "
                                              "has been deprecated and should not be set\n")


@pytest.mark.parametrize(("environ", "files", "expected"), [
    ({}, set(), modes.ClientSources()),
    ({"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}, set(configuring.SERVICE_ACCOUNT_FILES),
     modes.ClientSources(in_cluster=True)),
    # the client's in-cluster login needs both variables, not empty, and both files
    ({"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, set(configuring.SERVICE_ACCOUNT_FILES), modes.ClientSources()),
    ({"KUBERNETES_SERVICE_HOST": "", "KUBERNETES_SERVICE_PORT": "443"}, set(configuring.SERVICE_ACCOUNT_FILES),
     modes.ClientSources()),
    ({"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"},
     {configuring.SERVICE_ACCOUNT_FILES[0]}, modes.ClientSources()),
    # $KUBECONFIG set: taken as it is (a wrong path is the login's error); ~/.kube/config is then not read
    ({"KUBECONFIG": "/nowhere"}, {"HOME/.kube/config"}, modes.ClientSources(kubeconfig_env=True)),
    # ... but an empty one is as unset (client-go NewDefaultClientConfigLoadingRules: len(envVarFiles) != 0)
    ({"KUBECONFIG": ""}, {"HOME/.kube/config"}, modes.ClientSources(default_kubeconfig=True)),
    ({"KUBECONFIG": ""}, set(), modes.ClientSources()),
    ({}, {"HOME/.kube/config"}, modes.ClientSources(default_kubeconfig=True)),
])
def test_client_sources_are_looked_for_as_the_clients_login_looks(monkeypatch: pytest.MonkeyPatch,
                                                                  environ: dict[str, str], files: set[str],
                                                                  expected: modes.ClientSources) -> None:
    monkeypatch.setattr(configuring.os.path, "expanduser", lambda path: path.replace("~", "HOME"))
    monkeypatch.setattr(configuring.os.path, "isfile", lambda path: path in files)
    assert configuring.client_sources(environ) == expected


# --- login ---------------------------------------------------------------------------------------------------------

def write_kubeconfig(folder: Path) -> Path:
    (folder / "ca.crt").write_text("not really a certificate")
    path = folder / "node.kubeconfig"
    path.write_text("""\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", certificate-authority: ca.crt}}]
users: [{name: u, user: {token: secret-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
""")
    return path


def test_login_with_the_kubeconfig_flag(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path)
    cfg = AgentConfig(node_name="n", kubeconfig=str(path))
    info = configuring.connection_info(cfg, logger=LOGGER, settings=kopf.OperatorSettings())
    assert info.server == "https://127.0.0.1:6443"
    assert (info.scheme, info.token) == ("Bearer", "secret-token")
    assert info.ca_path == str(tmp_path / "ca.crt")  # relative to the kubeconfig, as kubectl resolves it
    assert info.insecure is False


async def test_kopf_and_the_agent_log_in_the_same_way(tmp_path: Path) -> None:
    cfg = AgentConfig(node_name="n", kubeconfig=str(write_kubeconfig(tmp_path)))
    settings = kopf.OperatorSettings()
    from_handler = await configuring.login(memo=kopf.Memo(config=cfg), logger=LOGGER, settings=settings)
    assert dataclasses.replace(from_handler, priority=0) == configuring.connection_info(cfg, logger=LOGGER,
                                                                                         settings=settings)


async def test_a_login_after_a_refusal_is_new_to_kopf_and_held_back(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Kopf refuses credentials equal to ones a 401 made it drop; an apiserver still starting answers 401 once."""
    sleeps: list[float] = []

    async def sleep(delay: float) -> None:
        sleeps.append(delay)

    monkeypatch.setattr(configuring.asyncio, "sleep", sleep)
    memo = kopf.Memo(config=AgentConfig(node_name="n", kubeconfig=str(write_kubeconfig(tmp_path))))
    infos = [await configuring.login(memo=memo, logger=LOGGER, settings=kopf.OperatorSettings()) for _ in range(4)]
    assert [i.priority for i in infos] == [1, 2, 3, 4]  # so each differs from every one Kopf dropped
    assert infos[0] != infos[1]
    assert sleeps == [1.0, 2.0, 4.0]  # the first login waits for nothing


@pytest.mark.parametrize(("since_last", "repeats", "delay"), [
    (None, 0, 0.0), (120.0, 3, 0.0), (0.5, 0, 1.0), (0.5, 3, 8.0), (10.0, 9, 10.0),
])
def test_relogin_delay(since_last: float | None, repeats: int, delay: float) -> None:
    assert configuring.relogin_delay(since_last, repeats) == delay


def test_login_with_a_missing_kubeconfig_is_permanent(tmp_path: Path) -> None:
    cfg = AgentConfig(node_name="n", kubeconfig=str(tmp_path / "missing"))
    with pytest.raises(kopf.PermanentError, match=r"--kubeconfig .*missing"):
        configuring.connection_info(cfg, logger=LOGGER, settings=kopf.OperatorSettings())


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A process with none of the login's sources: not in a pod, no $KUBECONFIG, an empty home; returns the home."""
    for name in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "KUBECONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(("kubeconfig_env", "error"), [
    (None, r"^no credentials for the apiserver \(--kubeconfig, KUBECONFIG or in-cluster\)$"),
    ("", r"^no credentials for the apiserver \(--kubeconfig, KUBECONFIG or in-cluster\)$"),
    # $KUBECONFIG names only missing files: the login's error (client-go's MissingConfigError)
    ("/nowhere/a:/nowhere/b", r"^no credentials for the apiserver: Config not found: /nowhere/a, /nowhere/b "
                              r"\(use --kubeconfig\)$"),
])
def test_without_kubeconfig_and_no_credentials_the_login_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                                    no_credentials: Path, kubeconfig_env: str | None,
                                                                    error: str) -> None:
    if kubeconfig_env is not None:
        monkeypatch.setenv("KUBECONFIG", kubeconfig_env)
    with pytest.raises(kopf.PermanentError, match=error):
        configuring.connection_info(AgentConfig(node_name="n"), logger=LOGGER, settings=kopf.OperatorSettings())
    assert configuring.decide_mode(AgentConfig(node_name="n")).mode is (
        modes.Mode.CLUSTER if kubeconfig_env else modes.Mode.STANDALONE)  # the mode agrees with the login


@pytest.mark.parametrize("where", ["KUBECONFIG", "home"])
def test_without_kubeconfig_kubeconfig_env_or_the_home_file_is_used(monkeypatch: pytest.MonkeyPatch,
                                                                    no_credentials: Path, where: str) -> None:
    folder = no_credentials / ".kube"
    folder.mkdir()
    path = write_kubeconfig(folder)
    if where == "KUBECONFIG":
        monkeypatch.setenv("KUBECONFIG", f"/nowhere:{path}")  # a missing file in the list is skipped
    else:
        path.rename(folder / "config")
    info = configuring.connection_info(AgentConfig(node_name="n"), logger=LOGGER, settings=kopf.OperatorSettings())
    assert (info.server, info.token, info.ca_path) == ("https://127.0.0.1:6443", "secret-token", str(folder / "ca.crt"))
    assert configuring.decide_mode(AgentConfig(node_name="n")).mode is modes.Mode.CLUSTER


def test_without_kubeconfig_the_in_cluster_service_account_comes_first(monkeypatch: pytest.MonkeyPatch,
                                                                       no_credentials: Path) -> None:
    account = no_credentials / "sa"
    account.mkdir()
    for name, content in (("token", "sa-token\n"), ("ca.crt", "CA"), ("namespace", "kopflet-system")):
        (account / name).write_text(content)
    monkeypatch.setattr(configuring.login_, "TOKEN_FILE", str(account / "token"))
    monkeypatch.setattr(configuring.login_, "CA_FILE", str(account / "ca.crt"))
    monkeypatch.setattr(configuring.login_, "NAMESPACE_FILE", str(account / "namespace"))
    monkeypatch.setattr(configuring, "SERVICE_ACCOUNT_FILES", (str(account / "token"), str(account / "ca.crt")))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(no_credentials)))  # not read: in-cluster wins
    info = configuring.connection_info(AgentConfig(node_name="n"), logger=LOGGER, settings=kopf.OperatorSettings())
    assert info == kopf.ConnectionInfo(server="https://[fd00::1]:443", ca_path=str(account / "ca.crt"),
                                       insecure=False, scheme="Bearer", token="sa-token",
                                       default_namespace="kopflet-system")
    assert configuring.client_sources().in_cluster
