"""The node agents under test, started one at a time on the same stack: kopflet and the upstream kubelet.

Both run as the node's own identity (system:node:<name>) against the same apiserver and containerd, with
their defaults; the kubelet gets only what this host needs (cgroupfs, cgroup v1 allowed, swap allowed) and
the stack's serving certificate, so `kubectl logs` works the same way for both.
"""

from __future__ import annotations

import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from devstack import cluster as devcluster
from devstack import configs
from devstack.__main__ import stack_env
from devstack.layout import REPO, Layout
from kopflet.config.settings import AgentConfig
from kopflet.paths import Layout as KubeletLayout


class Agent:
    name: str = ""
    user_agent_hint: str = ""
    owns_cluster = False
    """True when starting the agent makes its own cluster (and stopping it removes the cluster with its pods)."""

    def __init__(self, layout: Layout, workdir: Path) -> None:
        self.layout, self.workdir = layout, workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)

    @property
    def log(self) -> Path:
        return self.workdir / f"{self.name}.log"

    @property
    def pod_dirs(self) -> Path:
        raise NotImplementedError

    @property
    def admin_kubeconfig(self) -> Path:
        return self.layout.admin_kubeconfig

    @property
    def node_name(self) -> str:
        return self.layout.node_name

    def argv(self) -> list[str]:
        raise NotImplementedError

    def version(self) -> str:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        return stack_env(self.layout)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> None:
        self._log = self.log.open("ab")
        # --pdeathsig: never outlive the benchmark.
        self.proc = subprocess.Popen(["setpriv", "--pdeathsig", "KILL", "--", *self.argv()], cwd=REPO,
                                     env=self.env(), stdout=self._log, stderr=subprocess.STDOUT)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 60) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not None:
            self._log.close()


AGENT_VENV_ENV = "KOPFLET_AGENT_VENV"


def agent_python() -> Path:
    """The interpreter kopflet runs under in the benchmarks: the runtime-only venv the Makefile names
    ($KOPFLET_AGENT_VENV, what `pip install kopflet` installs), else this one. The development venv also holds the
    harness's `kubernetes` client, which Kopf imports whenever it is installed."""
    venv = os.environ.get(AGENT_VENV_ENV)
    if venv and (Path(venv) / "bin" / "python").exists():
        return Path(venv) / "bin" / "python"
    return Path(sys.executable)


class Kopflet(Agent):
    name = "kopflet"

    @property
    def pod_dirs(self) -> Path:
        return Path(KubeletLayout(AgentConfig.root_dir).pods_dir)  # the agent runs with the default --root-dir

    def argv(self) -> list[str]:
        kopf = agent_python().with_name("kopf")
        return [str(kopf), "run", "--standalone", "--all-namespaces", str(REPO / "operator" / "main.py")]

    def env(self) -> dict[str, str]:
        return {**super().env(), "KUBECONFIG": str(self.layout.node_kubeconfig),
                "KOPFLET_NODE_NAME": self.layout.node_name}

    def version(self) -> str:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True).stdout.strip()
        return f"{rev.stdout.strip() or '?'}{'-dirty' if dirty else ''}"


class UpstreamKubelet(Agent):
    """The kubelet built from the same k8s.io/kubernetes release as the apiserver (devstack/build-binaries.sh
    --kubelet), with its default kubeAPIQPS (50) and burst (100)."""

    name = "kubelet"

    @property
    def binary(self) -> Path:
        return self.layout.bin_dir / "kubelet"

    @property
    def root(self) -> Path:
        return self.workdir / "kubelet-root"

    @property
    def pod_dirs(self) -> Path:
        return Path(KubeletLayout(str(self.root)).pods_dir)

    def config(self) -> str:
        """The stack's kubelet config (the same serving cert and auth kopflet gets), plus what this host needs."""
        return configs.kubelet_config(self.layout) + f"""\
containerRuntimeEndpoint: {self.layout.runtime_endpoint}
# containerd here uses cgroupfs, the host is on cgroup v1, swap is not off.
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
clusterDomain: {self.layout.cluster_domain}
"""

    def argv(self) -> list[str]:
        path = self.workdir / "kubelet-config.yaml"
        path.write_text(self.config())
        return [str(self.binary), f"--config={path}", f"--kubeconfig={self.layout.node_kubeconfig}",
                f"--hostname-override={self.layout.node_name}", f"--root-dir={self.root}",
                f"--cert-dir={self.workdir / 'kubelet-pki'}", "--v=1"]

    def version(self) -> str:
        return subprocess.run([str(self.binary), "--version"], capture_output=True, text=True).stdout.strip()


def wait_until(check: Callable[[], bool], timeout: float, what: str, agent: Agent | None = None) -> None:
    """Poll `check()` until true; fail with `what` (and the agent's log tail if it died)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if agent is not None and not agent.alive():
            raise RuntimeError(f"{agent.name} exited while waiting for {what}:\n{_tail(agent.log)}")
        time.sleep(0.5)
    raise RuntimeError(f"timed out waiting for {what}" + (f":\n{_tail(agent.log)}" if agent else ""))


def _tail(path: Path, size: int = 3000) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-size:].decode(errors="replace")


def _version(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return out.splitlines()[0] if out else "?"


def versions(layout: Layout, agents: dict[str, Agent]) -> dict[str, str]:
    out = {"kubernetes (apiserver)": layout.versions.get("KUBERNETES_VERSION", "?"),
           "containerd": _version(["containerd", "--version"]).split()[-1],
           "runc": _version(["runc", "--version"]).split()[-1],
           "python": platform.python_version()}
    for name, agent in agents.items():
        try:
            out[name] = agent.version()
        except OSError as exc:
            out[name] = f"unavailable: {exc}"
    return out


def other_agents_running() -> list[str]:
    """The node takes one agent at a time: a running kopflet or kubelet would skew (and fight) the run."""
    # The agent is the program itself (argv[0] a kubelet, or a kopf/python running operator/main.py), not a
    # process that merely names one (`go build -o .../kubelet`, an editor, grep).
    found = subprocess.run(["pgrep", "-af", r"^(\S*/)?kubelet( |$)|^\S*(kopf|python[0-9.]*) .*operator/main\.py"],
                           capture_output=True, text=True)
    return [line for line in found.stdout.splitlines() if "pgrep" not in line]


def agents_by_name(layout: Layout, workdir: Path) -> dict[str, Agent]:
    return {"kopflet": Kopflet(layout, workdir), "kubelet": UpstreamKubelet(layout, workdir)}


class KubeadmNode(Agent):
    """A kubeadm cluster whose kubelet is `kubelet` (kopflet, or upstream's of the same release), as `make cluster`
    makes it: start is ``kubeadm init`` with the add-ons up, stop is `make cluster-down`; every start is a new
    cluster, so neither agent inherits the other's objects."""

    owns_cluster = True

    def __init__(self, layout: Layout, workdir: Path, kubelet: str, nodes: int = 1) -> None:
        super().__init__(layout, workdir)
        self.name, self.nodes = kubelet, nodes
        if nodes not in (1, 2):
            raise ValueError(f"a kubeadm cluster here has one node or two (cluster join), not {nodes}")

    @property
    def admin_kubeconfig(self) -> Path:
        return devcluster.ADMIN_CONF

    @property
    def node_name(self) -> str:
        return self.layout.node_name

    @property
    def pod_dirs(self) -> Path:
        return Path(KubeletLayout(devcluster.KUBELET_ROOT).pods_dir)

    @property
    def unit_log(self) -> Path:
        return self.layout.logs / "kubelet.log"

    def start(self) -> None:
        # The unit appends to its log: what this cluster's kubelet says starts at this offset.
        self._offset = self.unit_log.stat().st_size if self.unit_log.exists() else 0
        devcluster.up(self.layout, self.name)
        if self.nodes == 2:  # the same agent on a second node (kubeadm join; devstack/cluster_join.py)
            from devstack import cluster_join

            cluster_join.join(self.layout)

    def alive(self) -> bool:
        return devcluster.is_up(self.layout)

    def stop(self, timeout: float = 60) -> None:
        try:
            devcluster.down(self.layout)
        finally:
            if self.unit_log.exists():
                with self.unit_log.open("rb") as src, self.log.open("ab") as out:
                    src.seek(getattr(self, "_offset", 0))
                    shutil.copyfileobj(src, out)

    def version(self) -> str:
        target = devcluster.kubelet_target(self.layout, self.name)
        return subprocess.run([str(target), "--version"], capture_output=True, text=True,
                              timeout=30).stdout.strip()


def kubeadm_nodes(layout: Layout, workdir: Path, nodes: int = 1) -> dict[str, Agent]:
    return {name: KubeadmNode(layout, workdir, name, nodes) for name in devcluster.KUBELETS}
