"""A real systemd-logind on a private system bus, for graceful node shutdown tests.

A private dbus-daemon (this project's configuration: root only, anything may own names), Debian's
systemd-logind on it with its runtime state in a private tmpfs over /run/systemd (the host's is left alone), and
`devstack.systemd_standin` in place of systemd's manager, so a PowerOff that logind carries out is recorded,
not done. logind reads the host's /etc/systemd/logind.conf.d, as the kubelet's drop-in expects.
The agent under test is given `address` as DBUS_SYSTEM_BUS_ADDRESS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

LOGIND = "/lib/systemd/systemd-logind"
BUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={socket}</listen>
  <auth>EXTERNAL</auth>
  <policy user="root">
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
  <policy context="default">
    <deny own="*"/>
    <deny send_destination="*"/>
  </policy>
</busconfig>
"""


class Logind:
    """Start with `start()`, stop with `stop()` (or use it as a context manager)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.socket = directory / "system_bus_socket"
        self.address = f"unix:path={self.socket}"
        self.jobs_file = directory / "systemd-jobs.jsonl"
        self.procs: list[subprocess.Popen[bytes]] = []

    def env(self) -> dict[str, str]:
        return {**os.environ, "DBUS_SYSTEM_BUS_ADDRESS": self.address}

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        with (self.dir / f"{name}.log").open("ab") as log:
            proc = subprocess.Popen(["setpriv", "--pdeathsig", "KILL", "--", *argv], env=self.env(),
                                    stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def start(self) -> Logind:
        """Everything up, or everything it started stopped again and the error raised."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> Logind:
        self.dir.mkdir(parents=True, exist_ok=True)
        config = self.dir / "bus.conf"
        config.write_text(BUS_CONFIG.format(socket=self.socket))
        self._spawn("dbus-daemon", ["dbus-daemon", f"--config-file={config}", "--nofork", "--nopidfile"])
        self._wait(lambda: self.socket.exists(), "the bus socket")
        self._spawn("systemd-logind", ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                                       f"mkdir -p /run/systemd && mount -t tmpfs tmpfs /run/systemd && exec {LOGIND}"])
        self._wait(lambda: self.busctl("status", "org.freedesktop.login1", check=False).returncode == 0, "logind")
        self.jobs_file.touch()
        self._spawn("systemd-standin", [sys.executable, "-m", "devstack.systemd_standin", str(self.jobs_file)])
        self._wait(lambda: self.busctl("status", "org.freedesktop.systemd1", check=False).returncode == 0,
                   "the systemd stand-in")
        return self

    def _wait(self, ready: Any, what: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [p for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "\n".join(f"{log.name}:\n{log.read_text(errors='replace')[-2000:]}"
                                 for log in sorted(self.dir.glob("*.log")))
                raise RuntimeError(f"{what} did not come up on the private system bus\n{logs}")
            time.sleep(0.1)

    def busctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["busctl", "--system", "--timeout=10", *args], env=self.env(), capture_output=True,
                              text=True, check=check, timeout=30)

    def logind_call(self, member: str, signature: str = "", *args: str) -> str:
        return self.busctl("call", "org.freedesktop.login1", "/org/freedesktop/login1",
                           "org.freedesktop.login1.Manager", member, *([signature, *args] if signature else [])).stdout

    def inhibit_delay_max(self) -> float:
        """InhibitDelayMaxUSec, in seconds."""
        out = self.busctl("get-property", "org.freedesktop.login1", "/org/freedesktop/login1",
                          "org.freedesktop.login1.Manager", "InhibitDelayMaxUSec").stdout.split()
        return int(out[1]) / 1e6

    def inhibitors(self) -> list[tuple[str, str, str, str]]:
        """logind's ListInhibitors as (what, who, why, mode)."""
        out = self.busctl("--json=short", "call", "org.freedesktop.login1", "/org/freedesktop/login1",
                          "org.freedesktop.login1.Manager", "ListInhibitors").stdout
        return [(i[0], i[1], i[2], i[3]) for i in json.loads(out)["data"][0]]

    def power_off(self) -> None:
        """What `systemctl poweroff` asks of logind: PowerOff, not interactive."""
        self.logind_call("PowerOff", "b", "false")

    def cancel_jobs(self) -> None:
        """The pending poweroff job ends as cancelled: logind announces PrepareForShutdown(false)."""
        self.busctl("call", "org.freedesktop.systemd1", "/org/freedesktop/systemd1", "io.kopflet.devstack",
                    "CancelJobs")

    def jobs(self) -> list[dict[str, Any]]:
        """What the stand-in was asked, in order (StartUnit, KillUnit) and what it announced (JobRemoved)."""
        return [json.loads(line) for line in self.jobs_file.read_text().splitlines() if line.strip()]

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.procs.clear()

    def __enter__(self) -> Logind:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
