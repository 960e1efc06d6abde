"""kopflet's local stack: ``python -m devstack {dev,up,down,status,run -- CMD}``.

- ``dev``: start the stack and run the agent in the foreground with the node identity; Ctrl-C
  stops the agent and everything this command started.
- ``up`` / ``down`` / ``status``: manage the stack without the agent.
- ``run -- CMD``: bring the stack up, run CMD with the stack's environment, then stop what it
  started (``make test`` uses this).
- ``cluster {up,down,status}``: a kubeadm cluster whose kubelet is kopflet, in place of the stack's own control
  plane (``make cluster``; ``devstack/cluster.py``); ``cluster run -- CMD``: up, CMD, down (``make test``);
  ``cluster {join,leave}``: a second kopflet node joined with ``kubeadm join`` (``devstack/cluster_join.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

from devstack import cluster, cluster_join, configs, processes, stack
from devstack.layout import REPO, Layout


class AlreadyRunning(Exception):
    pass


@contextlib.contextmanager
def dev_lock(layout: Layout) -> Iterator[None]:
    """Held while `make dev` runs, so a second one says so instead of breaking the first."""
    layout.pids.mkdir(parents=True, exist_ok=True)
    path = layout.pids / "dev.lock"
    fh: IO[str] = path.open("a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        owner = fh.read().strip() or "?"
        fh.close()
        raise AlreadyRunning(owner) from None
    fh.seek(0)
    fh.truncate()
    fh.write(f"{os.getpid()}\n")
    fh.flush()
    try:
        yield
    finally:
        fh.close()
        path.unlink(missing_ok=True)


def dev_lock_holder(layout: Layout) -> str | None:
    try:
        with dev_lock(layout):
            return None
    except AlreadyRunning as exc:
        return str(exc)


def stack_env(layout: Layout) -> dict[str, str]:
    env = dict(os.environ)
    for line in configs.env_file(layout).splitlines():
        if line.startswith("export "):
            key, _, value = line[len("export "):].partition("=")
            env[key] = value.strip('"').replace("$PATH", os.environ.get("PATH", ""))
    return env


def agent_argv() -> list[str]:
    kopf = Path(sys.executable).with_name("kopf")
    return [str(kopf), "run", "--standalone", "--all-namespaces", str(REPO / "operator" / "main.py")]


def usage_text(layout: Layout) -> str:
    return f"""
kopflet dev stack is up (node {layout.node_name}).
In another shell:
    source {layout.env_file}
    kubectl get --raw /readyz          # the apiserver, as admin
    kubectl get pods -A -o wide
The agent runs below with the node identity system:node:{layout.node_name}. Ctrl-C stops it and the stack.
"""


def run_foreground(argv: Sequence[str], env: dict[str, str]) -> int:
    """Run a child in our process group; on Ctrl-C/SIGTERM give it time to stop cleanly."""
    proc = subprocess.Popen(list(argv), env=env, cwd=REPO)

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:  # the child got the same SIGINT from the terminal
                try:
                    return proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                except KeyboardInterrupt:
                    proc.kill()
    finally:
        signal.signal(signal.SIGTERM, previous)


def cmd_dev(layout: Layout) -> int:
    try:
        with dev_lock(layout):
            started: list[str] = []
            supervisor = stack.Supervisor(layout)
            try:
                started = stack.up(layout)
                supervisor.start()
                with contextlib.suppress(OSError):
                    print(usage_text(layout), file=sys.stderr, flush=True)
                env = stack_env(layout)
                env["KUBECONFIG"] = str(layout.node_kubeconfig)  # the agent is a node, never admin
                return run_foreground(agent_argv(), env)
            finally:
                with contextlib.suppress(KeyboardInterrupt):
                    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not half-stop
                    if supervisor.is_alive():
                        supervisor.stop()
                    stack.down(layout, only=started)
    except AlreadyRunning as exc:
        print(f"devstack: `make dev` is already running here (pid {exc}); it owns this stack.\n"
              f"  Use it from another shell with: source {layout.env_file}\n"
              f"  Stop it with Ctrl-C in its terminal.", file=sys.stderr)
        return 1


def cmd_run(layout: Layout, argv: Sequence[str]) -> int:
    holder = dev_lock_holder(layout)
    if holder:
        print(f"devstack: `make dev` is running (pid {holder}); stop it before running tests, they start "
              f"agents of their own for node {layout.node_name}.", file=sys.stderr)
        return 1
    started: list[str] = []
    supervisor = stack.Supervisor(layout)
    try:
        started = stack.up(layout)
        supervisor.start()
        return run_foreground(argv, stack_env(layout))
    finally:
        if supervisor.is_alive():
            supervisor.stop()
        stack.down(layout, only=started)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("dev", help="stack + agent in the foreground")
    sub.add_parser("up", help="start the stack (idempotent)")
    sub.add_parser("down", help="stop the stack")
    sub.add_parser("status", help="what runs")
    cluster_cmd = sub.add_parser("cluster", help="a kubeadm cluster with kopflet as its kubelet")
    cluster_cmd.add_argument("action", choices=("up", "down", "status", "run", "join", "leave"))
    cluster_cmd.add_argument("--kubelet", choices=cluster.KUBELETS, default="kopflet",
                             help="the node agent: kopflet (default) or the upstream kubelet of the same release")
    cluster_cmd.add_argument("cmd", nargs=argparse.REMAINDER, help="with run: the command to run on the cluster")
    run = sub.add_parser("run", help="stack up, run a command, stop what was started")
    run.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    layout = Layout.from_env()
    try:
        if args.command == "dev":
            return cmd_dev(layout)
        if args.command == "up":
            stack.up(layout)
            print(usage_text(layout).replace("The agent runs below", "Run the agent (make dev)"))
            return 0
        if args.command == "down":
            holder = dev_lock_holder(layout)
            if holder:
                print(f"devstack: `make dev` (pid {holder}) owns the stack; press Ctrl-C there.", file=sys.stderr)
                return 1
            stack.down(layout)
            return 0
        if args.command == "cluster":
            if args.action == "up":
                cluster.up(layout, args.kubelet)
            elif args.action == "down":
                cluster.down(layout)
            elif args.action == "join":
                cluster_join.join(layout)
            elif args.action == "leave":
                cluster_join.leave(layout)
            elif args.action == "run":
                cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
                if not cmd:
                    parser.error("cluster run needs a command after --")
                return cluster.run(layout, cmd, args.kubelet)
            else:
                return cluster.status(layout)
            return 0
        if args.command == "status":
            names = stack.running(layout)
            for comp in stack.components(layout):
                print(f"{comp.name:24} {'running' if comp.name in names else 'stopped'}")
            return 0
        cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        if not cmd:
            parser.error("run needs a command after --")
        return cmd_run(layout, cmd)
    except processes.StackError as exc:
        print(f"devstack: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
