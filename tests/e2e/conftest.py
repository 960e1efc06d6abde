"""Run the real agent (`kopf run operator/main.py`) as the node against the real stack."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack import processes, stack
from devstack.layout import Layout
from tests.conftest import REPO, Kubectl


class Agent:
    """The agent process; its combined output goes to a log file the test can wait on."""

    def __init__(self, layout: Layout, log: Path, env: dict[str, str] | None = None) -> None:
        self.layout, self.log, self.extra_env = layout, log, env or {}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "KUBECONFIG": str(self.layout.node_kubeconfig),
               "KOPFLET_NODE_NAME": self.layout.node_name,
               "CONTAINER_RUNTIME_ENDPOINT": self.layout.runtime_endpoint, **self.extra_env}
        kopf = Path(sys.executable).with_name("kopf")
        with self.log.open("ab") as out:
            # setpriv --pdeathsig: the agent must not outlive a killed test run. Not a preexec_fn: that forces
            # fork() in a process with live gRPC threads (the tests' CRI client), which can break the child.
            self.proc = subprocess.Popen(
                ["setpriv", "--pdeathsig", "KILL", "--", str(kopf), "run", "--standalone", "--all-namespaces",
                 "--verbose", str(REPO / "operator" / "main.py")],
                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_for(self, pattern: str, timeout: float = 60.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = re.search(pattern, self.output())
            if match:
                return match
            if self.proc is not None and self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(f"agent log never matched {pattern!r}; it ends:\n{self.output()[-4000:]}")

    def stop(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        return terminate(self.proc, timeout, "agent")


def terminate(proc: subprocess.Popen[bytes], timeout: float, what: str) -> int:
    """SIGTERM, then its exit status; one that ignores SIGTERM for `timeout` is killed and fails the test."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError(f"{what} ignored SIGTERM for {timeout}s") from None
    return proc.returncode


class DaemonCrashed(UserWarning):
    """A daemon of the stack died on its own during a module and the dev stack's supervisor started it again."""


@pytest.fixture(scope="module", autouse=True)
def stack_survives(layout: Layout) -> Iterator[None]:
    """Every daemon of the stack runs when a module ends (tests that stop one start it again). A crash the dev
    stack's supervisor recovered from (`devstack.stack.Supervisor`, like systemd's Restart=always) is a warning
    with the daemon's log; one still down (not started again, or stopped by a test and left so) fails the module,
    with its log and the kernel's."""
    crashes = layout.logs / "crashes.log"
    seen = crashes.stat().st_size if crashes.exists() else 0
    yield
    # A daemon that just crashed is the supervisor's to start again (it checks every 2 s, and waits for health).
    deadline = time.monotonic() + 120
    while (down := [c for c in stack.components(layout)
                    if processes.read_pid(layout.pids / f"{c.name}.pid") is None]) and time.monotonic() < deadline:
        time.sleep(1)
    if crashes.exists() and crashes.stat().st_size > seen:
        with crashes.open() as log:
            log.seek(seen)
            warnings.warn(DaemonCrashed(log.read()), stacklevel=1)
    if down:
        kernel = subprocess.run(["dmesg", "--ctime"], capture_output=True, text=True, check=False).stdout
        report = "\n\n".join(f"{c.name} is down; its log ends:\n{processes.tail(layout.logs / f'{c.name}.log', 60)}"
                             for c in down) + "\nthe kernel log ends:\n" + "\n".join(kernel.splitlines()[-20:])
        for comp in down:  # so the modules after this one do not all fail behind it
            processes.start(comp.name, comp.argv, pids=layout.pids, logs=layout.logs, healthy=comp.healthy,
                            timeout=comp.timeout)
        pytest.fail(report, pytrace=False)


@pytest.fixture
def agent(layout: Layout, tmp_path: Path) -> Iterator[Agent]:
    a = Agent(layout, tmp_path / "agent.log")
    a.start()
    try:
        yield a
    finally:
        if a.proc is not None and a.proc.poll() is None:
            a.proc.kill()
            a.proc.wait()


def agent_with(layout: Layout, tmp_path: Path, args: str) -> Iterator[Agent]:
    """An agent of its own for one test, with these flags (the KOPFLET_ARGS string); stopped afterwards."""
    agent = Agent(layout, tmp_path / "agent.log", env={"KOPFLET_ARGS": args})
    agent.start()
    agent.wait_for(r"Activity 'start_agent' succeeded")
    try:
        yield agent
    finally:
        agent.stop()


@pytest.fixture(scope="module")
def running_agent(layout: Layout, tmp_path_factory: pytest.TempPathFactory,
                  request: pytest.FixtureRequest) -> Iterator[Agent]:
    """One agent for a whole test module (with the module's AGENT_ARGS flags); it must never crash while syncing."""
    args = getattr(request.module, "AGENT_ARGS", "")
    a = Agent(layout, tmp_path_factory.mktemp("agent") / "agent.log", env={"KOPFLET_ARGS": args} if args else None)
    a.start()
    a.wait_for(r"Activity 'start_agent' succeeded")
    try:
        yield a
    finally:
        if a.proc is not None and a.proc.poll() is None:
            a.stop()
    crashes = [line for line in a.output().splitlines() if "sync crashed" in line or "Traceback" in line]
    assert not crashes, "the agent crashed while syncing:\n" + "\n".join(crashes)


@pytest.fixture
def namespace(admin: Kubectl) -> Iterator[str]:
    """A fresh namespace, ready for pods (its default ServiceAccount exists)."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    admin.run("create", "namespace", name)
    deadline = time.monotonic() + 60
    while admin.run("get", "serviceaccount", "default", "-n", name, check=False).returncode != 0:
        assert time.monotonic() < deadline, "the default ServiceAccount never appeared"
        time.sleep(0.2)
    try:
        yield name
    finally:
        admin.run("delete", "namespace", name, "--wait=false")
