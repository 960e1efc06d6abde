"""--bootstrap-kubeconfig and rotateCertificates as settings: flags, the config file's field, what they need, the
``kopflet`` command's checks and /configz."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from handlers import cli
from kopflet.config import configz, settings
from kopflet.config.settings import AgentConfig, ConfigError, load

REPO = Path(__file__).resolve().parents[2]
HEADER = f"apiVersion: {settings.CONFIG_API_VERSION}\nkind: {settings.CONFIG_KIND}\n"


def run(argv: list[str], body: str = "") -> AgentConfig:
    return load(argv, {}, "node-1", lambda _: HEADER + body)


@pytest.mark.parametrize(("argv", "body", "bootstrap", "rotate"), [
    ([], "", "", False),  # upstream's v1beta1 default: rotation off
    (["--kubeconfig=/k", "--bootstrap-kubeconfig=/b"], "", "/b", False),
    (["--kubeconfig=/k", "--rotate-certificates"], "", "", True),
    (["--kubeconfig=/k", "--config=/c"], "rotateCertificates: true\n", "", True),
    (["--kubeconfig=/k", "--config=/c", "--rotate-certificates=false"], "rotateCertificates: true\n", "", False),
    (["--kubeconfig=/k", "--config=/c"], "rotateCertificates: false\n", "", False),
])
def test_the_settings(argv: list[str], body: str, bootstrap: str, rotate: bool) -> None:
    cfg = run(argv, body)
    assert (cfg.bootstrap_kubeconfig, cfg.rotate_certificates) == (bootstrap, rotate)


def test_rotate_certificates_is_a_supported_field_and_bootstrap_kubeconfig_a_flag_only() -> None:
    assert "rotateCertificates" not in settings.UNSUPPORTED_FIELDS
    with pytest.raises(ConfigError, match='unknown field "bootstrapKubeconfig"'):
        run(["--config=/c"], "bootstrapKubeconfig: /b\n")


@pytest.mark.parametrize(("argv", "body", "message"), [
    (["--bootstrap-kubeconfig=/b"], "", settings.BOOTSTRAP_WITHOUT_KUBECONFIG),
    (["--rotate-certificates"], "", settings.ROTATION_WITHOUT_KUBECONFIG),
    (["--config=/c"], "rotateCertificates: true\n", settings.ROTATION_WITHOUT_KUBECONFIG),
])
def test_both_need_a_kubeconfig_path(argv: list[str], body: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        run(argv, body)
    assert str(err.value) == message


def test_configz_has_rotate_certificates_after_tls_min_version() -> None:
    body = configz.kubelet_configuration(AgentConfig(node_name="n", rotate_certificates=True,
                                                     tls_min_version="VersionTLS13"))
    names = list(body)
    assert body["rotateCertificates"] is True
    assert names.index("rotateCertificates") == names.index("tlsMinVersion") + 1  # v1beta1's field order
    assert "rotateCertificates" not in configz.kubelet_configuration(AgentConfig(node_name="n"))  # omitempty


def command(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KOPFLET_") and k != "NODE_NAME"}
    return subprocess.run([sys.executable, "-m", "handlers.cli", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60)


def test_the_command_wants_the_kubeconfig_or_the_bootstrap_file(tmp_path: Path) -> None:
    missing = tmp_path / "kubelet.conf"
    proc = command(f"--kubeconfig={missing}")
    assert proc.returncode == cli.USAGE_ERROR and f"--kubeconfig {missing}: no such file" in proc.stderr
    proc = command(f"--kubeconfig={missing}", f"--bootstrap-kubeconfig={tmp_path / 'nope'}")
    assert proc.returncode == cli.USAGE_ERROR and "--bootstrap-kubeconfig" in proc.stderr


def test_help_lists_both() -> None:
    text = settings.usage()
    assert "--bootstrap-kubeconfig string" in text and "--rotate-certificates " in text


@pytest.mark.parametrize(("args", "server_timeout"), [
    ("--kubeconfig=/k --rotate-certificates", 300),  # Kopf's watch renewed often enough to take a renewed pair
    ("--kubeconfig=/k", None),  # otherwise as the apiserver decides
])
async def test_kopfs_watch_timeout_with_rotation(monkeypatch: pytest.MonkeyPatch, args: str,
                                                 server_timeout: int | None) -> None:
    import logging

    import kopf

    from handlers import startup

    for name in ("KOPFLET_CONFIG", "NODE_NAME", "KOPFLET_NODE_NAME", "KOPFLET_NODE_IP"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KOPFLET_ARGS", f"{args} --hostname-override=node-a --node-ip=10.0.0.5")
    settings, memo = kopf.OperatorSettings(), kopf.Memo()
    await startup.configure(settings=settings, memo=memo, logger=logging.getLogger("test"))
    assert settings.watching.server_timeout == server_timeout
    # Kopf sends it as timeoutSeconds: "300.0" is a 400 Bad Request from the apiserver (strconv.ParseInt)
    assert type(settings.watching.server_timeout) is type(server_timeout)
    assert memo.config.rotate_certificates is (server_timeout is not None)
