"""manifests/systemd/: kopflet's units parse as systemd reads them, run kopflet with flags it accepts (through its own
flag parser), are Type=notify (kopflet sends READY=1, `kopflet.sdnotify`), and agree with what devstack/kubelet_unit.py
runs where there is no systemd. The runner's notify side is tested with a real datagram socket. Neither unit sets
WatchdogSec (upstream's packaging does not); the guide's drop-in does."""

from __future__ import annotations

import re
import shlex
import socket
import textwrap
import threading
from collections.abc import Mapping
from pathlib import Path

import pytest

from devstack import kubelet_unit
from kopflet import sdnotify
from kopflet.config import settings

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "manifests" / "systemd"
# Sections and keys the units may use (systemd.unit(5), systemd.service(5), systemd.exec(5)): a typo is caught here.
KNOWN = {
    "Unit": {"Description", "Documentation", "Wants", "After", "Requires"},
    "Service": {"Type", "ExecStart", "Restart", "StartLimitInterval", "RestartSec", "Environment", "EnvironmentFile",
                "SyslogIdentifier"},
    "Install": {"WantedBy"},
}


def parse_unit(text: str) -> list[tuple[str, str, str]]:
    """A unit file as systemd reads it: (section, key, value) in order, repeats kept; ``#``/``;`` comment lines."""
    entries: list[tuple[str, str, str]] = []
    section = ""
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        assert not line.endswith("\\"), f"line {number}: no continuations here"
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, eq, value = line.partition("=")
        assert eq and section, f"line {number}: {raw!r} is not an assignment in a section"
        entries.append((section, key.strip(), value.strip()))
    return entries


def values(entries: list[tuple[str, str, str]], section: str, key: str) -> list[str]:
    """A list setting's values: an empty assignment resets the list (``ExecStart=`` in a drop-in)."""
    out: list[str] = []
    for sec, k, value in entries:
        if (sec, k) == (section, key):
            out = [] if value == "" else [*out, value]
    return out


def environment(entries: list[tuple[str, str, str]]) -> dict[str, str]:
    """``Environment="KEY=value words"`` assignments (one per line here)."""
    env: dict[str, str] = {}
    for assignment in values(entries, "Service", "Environment"):
        for word in shlex.split(assignment):
            key, _, value = word.partition("=")
            env[key] = value
    return env


def expand(command: str, env: Mapping[str, str]) -> list[str]:
    """ExecStart's words, ``$VAR`` replaced by the variable's value split at whitespace (an unset one: nothing)."""
    words: list[str] = []
    for word in shlex.split(command):
        match = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if match:
            words.extend(env.get(match.group(1), "").split())
        else:
            assert "$" not in word, word
            words.append(word)
    return words


def unit(name: str) -> list[tuple[str, str, str]]:
    return parse_unit((UNITS / name).read_text())


@pytest.mark.parametrize("name", ["kubelet.service", "10-kubeadm.conf", "kopflet.service"])
def test_the_units_use_known_sections_and_keys(name: str) -> None:
    entries = unit(name)
    assert entries
    for section, key, _ in entries:
        assert key in KNOWN.get(section, set()), (name, section, key)


@pytest.mark.parametrize("name", ["kubelet.service", "kopflet.service"])
def test_the_services_are_notify_and_restart_as_kubeadms(name: str) -> None:
    entries = unit(name)
    assert values(entries, "Service", "Type") == ["notify"]
    assert values(entries, "Service", "Restart") == ["always"]
    assert values(entries, "Service", "RestartSec") == ["10"]
    assert values(entries, "Install", "WantedBy") == ["multi-user.target"]


def test_the_kubeadm_unit_runs_kopflet_as_the_kubelet_with_the_drop_ins_flags() -> None:
    service, drop_in = unit("kubelet.service"), unit("10-kubeadm.conf")
    command = values(service + drop_in, "Service", "ExecStart")
    assert len(command) == 1  # the drop-in's ExecStart= reset the unit's
    kubeadm_flags = {"KUBELET_KUBEADM_ARGS": "--container-runtime-endpoint=unix:///run/containerd/containerd.sock "
                                             "--node-ip=192.0.2.10 --hostname-override=cp-1"}
    extra = {"KUBELET_EXTRA_ARGS": "--v=2 --vmodule=workers=4"}
    argv = expand(command[0], {**environment(drop_in), **kubeadm_flags, **extra})
    assert argv[0] == "/usr/bin/kubelet"  # kopflet installed as the node's kubelet
    flags = settings.parse_flags(argv[1:])  # kopflet's own parser: a flag it does not know would raise
    assert flags["kubeconfig"] == "/etc/kubernetes/kubelet.conf"
    assert flags["bootstrap_kubeconfig"] == "/etc/kubernetes/bootstrap-kubelet.conf"
    assert (flags["log_verbosity"], flags["log_vmodule"]) == (2, (("workers", 4),))
    assert values(drop_in, "Service", "EnvironmentFile") == ["-/var/lib/kubelet/kubeadm-flags.env",
                                                             "-/etc/default/kubelet"]


def test_the_standalone_unit_runs_kopflet_with_flags_it_accepts() -> None:
    entries = unit("kopflet.service")
    (command,) = values(entries, "Service", "ExecStart")
    argv = expand(command, {})
    assert argv[0] == "/opt/kopflet/bin/kopflet"
    assert settings.parse_flags(argv[1:]) == {"kubeconfig": "/etc/kopflet/node.kubeconfig",
                                              "_config": "/etc/kopflet/config.yaml"}
    assert values(entries, "Service", "SyslogIdentifier") == ["kopflet"]
    assert "containerd.service" in values(entries, "Unit", "Requires")


def test_the_devstack_runner_is_the_kubeadm_unit() -> None:
    """devstack/kubelet_unit.py stands in for systemd with these units: the same flags, files, restart and type."""
    service, drop_in = unit("kubelet.service"), unit("10-kubeadm.conf")
    env = environment(drop_in)
    assert tuple(env["KUBELET_KUBECONFIG_ARGS"].split()) == kubelet_unit.KUBECONFIG_ARGS
    assert tuple(env["KUBELET_CONFIG_ARGS"].split()) == kubelet_unit.CONFIG_ARGS
    assert values(drop_in, "Service", "EnvironmentFile") == [f"-{kubelet_unit.KUBEADM_FLAGS_ENV}",
                                                             f"-{kubelet_unit.DEFAULTS_ENV}"]
    assert float(values(service, "Service", "RestartSec")[0]) == kubelet_unit.RESTART_SEC
    assert values(service, "Service", "Type") == [kubelet_unit.SERVICE_TYPE]
    assert kubelet_unit.NOTIFY_SOCKET_ENV == sdnotify.NOTIFY_SOCKET_ENV
    env_files = {"KUBELET_KUBEADM_ARGS": "--node-ip=192.0.2.10", "KUBELET_EXTRA_ARGS": "--v=4"}
    (command,) = values(service + drop_in, "Service", "ExecStart")
    assert kubelet_unit.exec_start("/usr/bin/kubelet", env_files) == expand(command, {**env, **env_files})


def test_the_runners_notify_socket_hears_kopflet(tmp_path: Path) -> None:
    notify = kubelet_unit.NotifySocket(tmp_path)
    try:
        assert sdnotify.notify(sdnotify.READY, environ={sdnotify.NOTIFY_SOCKET_ENV: str(notify.path)})
        assert notify.receive(5) == ["READY=1"]
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(b"STOPPING=1\nSTATUS=bye\n", str(notify.path))
        assert notify.receive(5) == ["STOPPING=1", "STATUS=bye"]
        assert notify.receive(0.05) is None
    finally:
        notify.close()


def test_the_operations_guide_shows_the_standalone_unit_as_it_is() -> None:
    guide = (REPO / "docs" / "operations.md").read_text()
    file = "\n".join(line for line in (UNITS / "kopflet.service").read_text().splitlines()
                     if not line.startswith("#"))
    assert f"```ini\n{file}\n```" in guide


@pytest.mark.parametrize("name", ["kubelet.service", "10-kubeadm.conf", "kopflet.service"])
def test_no_unit_sets_a_watchdog_as_upstreams_packaging_sets_none(name: str) -> None:
    """kubernetes/release's kubelet.service and kubeadm's drop-in have no WatchdogSec=; the watchdog is a drop-in of
    the operator's (docs/operations.md)."""
    assert values(unit(name), "Service", "WatchdogSec") == []


def test_the_operations_guide_shows_a_watchdog_drop_in() -> None:
    guide = (REPO / "docs" / "operations.md").read_text()
    blocks = [textwrap.dedent(b) for b in re.findall(r"```ini\n(.*?)```", guide, re.S) if "WatchdogSec" in b]
    assert len(blocks) == 1
    entries = parse_unit(blocks[0])
    assert entries == [("Service", "WatchdogSec", "30s")]
    assert "kopflet.service.d/" in blocks[0] and "kubelet.service.d/" in blocks[0]


def test_a_start_waits_for_kubeadms_flags_once_its_config_is_there(tmp_path: Path) -> None:
    """A start between kubeadm's config.yaml and its kubeadm-flags.env would run without --hostname-override."""
    config, flags = tmp_path / "config.yaml", tmp_path / "kubeadm-flags.env"
    assert kubelet_unit.wait_for_flags(config, flags, timeout=0.2)  # no config yet: start (and fail) as before
    config.write_text("kind: KubeletConfiguration\n")
    assert not kubelet_unit.wait_for_flags(config, flags, timeout=0.2)  # never written: start anyway after the wait
    timer = threading.Timer(0.2, flags.write_text, args=("KUBELET_KUBEADM_ARGS=--hostname-override=vm-2\n",))
    timer.start()
    try:
        assert kubelet_unit.wait_for_flags(config, flags, timeout=5.0)
    finally:
        timer.cancel()
