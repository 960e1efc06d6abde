"""The kubelet's systemd unit as kubeadm's packages install it, for a machine without systemd: kopflet in its place.

kubeadm's `kubelet.service` with its `10-kubeadm.conf` drop-in runs, again and again::

    EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env      # KUBELET_KUBEADM_ARGS, written by kubeadm
    EnvironmentFile=-/etc/default/kubelet                    # KUBELET_EXTRA_ARGS, the user's
    ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
    Restart=always
    RestartSec=10

with `--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf` and
`--config=/var/lib/kubelet/config.yaml`. Before `kubeadm init` or `join` writes the config the kubelet exits at once
and systemd starts it again ten seconds later; this runner does the same, reading the environment files at each
start as systemd does. ``python -m devstack.kubelet_unit [--kopflet PATH]``; SIGTERM stops kopflet and the runner.

kopflet's unit (manifests/systemd/kubelet.service, with 10-kubeadm.conf: these constants, which
tests/unit/test_systemd_units.py holds to the files) is ``Type=notify``: as systemd, the runner gives kopflet a
``$NOTIFY_SOCKET`` of its own and prints what kopflet says there (``kubelet.service: READY=1``), so the cluster's log
shows when the agent was ready, as ``systemctl status`` would. As systemd, it gives a start-up ``TimeoutStartSec``
(90 s) to say ``READY=1``, extended by each ``EXTEND_TIMEOUT_USEC``; a start-up that runs out is terminated
(SIGTERM, SIGKILL 90 s later) and started again after ``RestartSec``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

KUBEADM_FLAGS_ENV = Path("/var/lib/kubelet/kubeadm-flags.env")
KUBELET_CONFIG = Path("/var/lib/kubelet/config.yaml")
FLAGS_WAIT = 5.0
"""How long a start waits for kubeadm's flags once its config is there (see `wait_for_flags`)."""
DEFAULTS_ENV = Path("/etc/default/kubelet")
KUBECONFIG_ARGS = ("--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
                   "--kubeconfig=/etc/kubernetes/kubelet.conf")
CONFIG_ARGS = ("--config=/var/lib/kubelet/config.yaml",)
RESTART_SEC = 10.0
TIMEOUT_START_SEC = 90.0  # systemd's DefaultTimeoutStartSec; neither unit sets its own
TIMEOUT_STOP_SEC = 90.0  # DefaultTimeoutStopSec: SIGTERM, then SIGKILL this much later
SERVICE_TYPE = "notify"
NOTIFY_SOCKET_ENV = "NOTIFY_SOCKET"


class NotifySocket:
    """systemd's end of Type=notify: a datagram socket in a directory of its own; `receive` returns one
    notification's assignments (None after `timeout` seconds of silence)."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "notify"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self.sock.bind(str(self.path))

    def receive(self, timeout: float) -> list[str] | None:
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(4096)
        except TimeoutError:
            return None
        return [line for line in data.decode(errors="replace").split("\n") if line]

    def close(self) -> None:
        self.sock.close()


class StartTimeout:
    """systemd's start-up timeout of a Type=notify service: ``READY=1`` within ``TimeoutStartSec`` of the start, or
    within the last ``EXTEND_TIMEOUT_USEC`` when that runs later (sd_notify(3): the extension applies only beyond the
    original maximum). Times are monotonic seconds; thread-safe, as notifications arrive on their own thread."""

    def __init__(self, started: float, timeout: float = TIMEOUT_START_SEC) -> None:
        self._lock = threading.Lock()
        self.deadline: float | None = started + timeout
        self.ready = False

    def notified(self, states: Sequence[str], now: float) -> None:
        with self._lock:
            for state in states:
                key, _, value = state.partition("=")
                if key == "READY" and value == "1":
                    self.ready, self.deadline = True, None
                elif key == "EXTEND_TIMEOUT_USEC" and self.deadline is not None and value.isdigit():
                    self.deadline = max(self.deadline, now + int(value) / 1_000_000)

    def expired(self, now: float) -> bool:
        with self._lock:
            return self.deadline is not None and now >= self.deadline


def _print_notifications(notify: NotifySocket, stopped: threading.Event, current: list[StartTimeout]) -> None:
    while not stopped.is_set():
        try:
            states = notify.receive(0.5)
        except OSError:
            return
        for state in states or ():
            print(f"kubelet.service: {state}", flush=True)
        if states and current:
            current[-1].notified(states, time.monotonic())


def parse_environment_file(text: str) -> dict[str, str]:
    """systemd's EnvironmentFile= syntax as kubeadm writes it: ``KEY=value`` lines, the value optionally quoted,
    ``#`` and ``;`` comment lines."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;" or "=" not in line:
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out[key.strip()] = value
    return out


def exec_start(kopflet: str, env: Mapping[str, str]) -> list[str]:
    """ExecStart's command line: ``$VAR`` expands to the variable split at whitespace, as systemd does."""
    return [kopflet, *KUBECONFIG_ARGS, *CONFIG_ARGS,
            *shlex.split(env.get("KUBELET_KUBEADM_ARGS", "")), *shlex.split(env.get("KUBELET_EXTRA_ARGS", ""))]


def read_env(paths: Sequence[Path]) -> dict[str, str]:
    env: dict[str, str] = {}
    for path in paths:  # the leading "-": a missing file is no error
        try:
            env.update(parse_environment_file(path.read_text()))
        except OSError:
            continue
    return env


RESTARTED = -1000
"""`_wait`'s answer for a kopflet stopped because kubeadm's environment changed: started again at once."""


def _wait(child: subprocess.Popen[bytes], start: StartTimeout,
          environment: Callable[[], Mapping[str, str]] | None = None) -> int:
    """The main process's exit code; a start-up that runs out of time is terminated as systemd does it.

    `environment` reads the unit's environment files: when what it gives changes, kopflet is stopped and
    `RESTARTED` returned. kubeadm writes kubeadm-flags.env (the node's ``--hostname-override``) and then runs
    ``systemctl restart kubelet``, which fails here without systemd; a kopflet started between its start and the
    file would otherwise run on without those flags (and register under the host's name)."""
    killed_at: float | None = None
    started_with = environment() if environment is not None else None
    restarting = False
    while True:
        try:
            code = child.wait(timeout=0.5)
            return RESTARTED if restarting else code
        except subprocess.TimeoutExpired:
            pass
        except InterruptedError:
            continue
        now = time.monotonic()
        if not restarting and killed_at is None and environment is not None and environment() != started_with:
            print("kubelet.service: kubeadm-flags.env changed (kubeadm restarts the kubelet): restarting",
                  flush=True)
            child.send_signal(signal.SIGTERM)
            restarting, killed_at = True, now
        elif killed_at is None and start.expired(now):
            print("kubelet.service: start operation timed out. Terminating.", flush=True)
            child.send_signal(signal.SIGTERM)
            killed_at = now
        elif killed_at is not None and now - killed_at >= TIMEOUT_STOP_SEC:
            print("kubelet.service: State 'stop-sigterm' timed out. Killing.", flush=True)
            child.kill()
            killed_at = float("inf")


def wait_for_flags(config: Path = KUBELET_CONFIG, flags: Path = KUBEADM_FLAGS_ENV, timeout: float = FLAGS_WAIT,
                   stopping: Callable[[], bool] = lambda: False) -> bool:
    """kubeadm writes config.yaml and then kubeadm-flags.env; a start between the two runs without the node's flags
    (no --hostname-override: the devstack's second node takes the host's name and cert directory, and what that
    start writes, a kubeconfig for the wrong identity, outlives kubeadm's restart). A real node's name is its host's,
    so there the window is harmless; this stand-in waits up to `timeout` for the flags once the config is there, then
    starts as systemd would. True when the flags are written (or no config is)."""
    deadline = time.monotonic() + timeout
    # kubeadm's WriteFile creates the file and then writes it: an empty file is not written yet.
    while config.exists() and not (flags.exists() and flags.stat().st_size > 0):
        if stopping() or time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def wait_for_config(config: Path = KUBELET_CONFIG, stopping: Callable[[], bool] = lambda: False) -> bool:
    """Until kubeadm has written the kubelet's config (True), or the unit stops (False). systemd would start the
    kubelet and let it fail every 10 s instead; but a start whose check comes just before kubeadm writes config.yaml
    and kubeadm-flags.env reads the config and not the flags (it is still importing when they are written), and
    runs as the host. kubeadm stops the kubelet before writing them, which this stand-in cannot be asked to do."""
    while not config.exists():
        if stopping():
            return False
        time.sleep(0.1)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack.kubelet_unit", description=__doc__.split("\n\n")[0])
    parser.add_argument("--kopflet", default=str(Path(sys.executable).with_name("kopflet")))
    args = parser.parse_args(argv)
    child: subprocess.Popen[bytes] | None = None
    stopping = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    with contextlib.ExitStack() as cleanup:
        notify = NotifySocket(Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="kubelet-unit-"))))
        cleanup.callback(notify.close)
        listening = threading.Event()
        cleanup.callback(listening.set)
        current: list[StartTimeout] = []
        threading.Thread(target=_print_notifications, args=(notify, listening, current), daemon=True).start()
        env = {**os.environ, NOTIFY_SOCKET_ENV: str(notify.path)}  # Type=notify
        while not stopping:
            if not wait_for_config(stopping=lambda: stopping):
                break
            wait_for_flags(stopping=lambda: stopping)
            environment = read_env([KUBEADM_FLAGS_ENV, DEFAULTS_ENV])
            command = exec_start(args.kopflet, environment)
            print(f"kubelet.service: starting {shlex.join(command)}", flush=True)
            current.append(StartTimeout(time.monotonic()))
            del current[:-1]
            child = subprocess.Popen(command, env=env)
            if stopping:  # a SIGTERM between the loop's check and the start: this agent stops too
                child.send_signal(signal.SIGTERM)
            code = _wait(child, current[-1], lambda: read_env([KUBEADM_FLAGS_ENV, DEFAULTS_ENV]))
            if stopping:
                break
            if code == RESTARTED:
                continue
            print(f"kubelet.service: main process exited, code={code}; restarting in {RESTART_SEC:.0f}s",
                  flush=True)
            deadline = time.monotonic() + RESTART_SEC
            while not stopping and time.monotonic() < deadline:
                time.sleep(0.5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
