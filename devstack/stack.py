"""Bring the local stack up and down: etcd, kube-apiserver, controller-manager, scheduler, the image
registry with the project's images, and containerd with CNI.

``up`` is idempotent (a running component is reused) and returns once everything is healthy;
``down`` stops what runs, after removing every pod sandbox from containerd so no container, shim,
mount or network namespace outlives the stack.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from devstack import configs, pki, processes
from devstack.layout import REPO, Layout, host_ip


@dataclasses.dataclass(frozen=True)
class Component:
    name: str
    argv: Sequence[str]
    healthy: processes.HealthCheck
    ports: Sequence[int] = ()
    timeout: float = 90.0


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, readable and writable by its owner only (0600) whatever its mode was: the CIS
    Kubernetes Benchmark's mode for a kubelet's kubeconfig and config file (4.1.5, 4.1.9; docs/security.md)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        os.fchmod(fd, 0o600)
        out.write(text)


def prepare(layout: Layout) -> None:
    """Certificates, kubeconfigs and config files: created once, kept across restarts."""
    ip = host_ip()
    pki.ensure_all(layout.pki, layout.node_name, ip, layout.service_ip, layout.cluster_domain)
    layout.kubeconfigs.mkdir(parents=True, exist_ok=True)
    p = layout.pki
    for path, stem, user in [
        (layout.admin_kubeconfig, "admin", "kubernetes-admin"),
        (layout.kubeconfigs / "controller-manager.kubeconfig", "controller-manager", "system:kube-controller-manager"),
        (layout.kubeconfigs / "scheduler.kubeconfig", "scheduler", "system:kube-scheduler"),
        (layout.node_kubeconfig, f"node-{layout.node_name}", f"system:node:{layout.node_name}"),
    ]:
        write_private(path, configs.kubeconfig(layout.apiserver_url, p / "ca.crt", p / f"{stem}.crt",
                                               p / f"{stem}.key", user))
    write_private(layout.bootstrap_kubeconfig, configs.bootstrap_kubeconfig(layout.apiserver_url, p / "ca.crt",
                                                                           bootstrap_token(layout)))
    layout.containerd_dir.mkdir(parents=True, exist_ok=True)
    (layout.containerd_dir / "config.toml").write_text(configs.containerd_config(layout))
    for rel, text in configs.registry_host_files(layout).items():
        (layout.containerd_dir / "certs.d" / rel).parent.mkdir(parents=True, exist_ok=True)
        (layout.containerd_dir / "certs.d" / rel).write_text(text)
    layout.cni_conf_dir.mkdir(parents=True, exist_ok=True)
    (layout.cni_conf_dir / "10-kopflet.conflist").write_text(configs.cni_conflist(layout))
    prune_host_dirs(layout.containerd_dir / "certs.d", configs.registry_host_files(layout))
    for path, text in registry_configs(layout).values():
        path.write_text(text)
    layout.audit_policy.write_text(configs.audit_policy())
    if not layout.private_registry_htpasswd.exists():
        line = subprocess.run(["htpasswd", "-nbB", layout.private_registry_user, layout.private_registry_password],
                              capture_output=True, text=True, check=True).stdout.strip()
        layout.private_registry_htpasswd.write_text(line + "\n")
    layout.private_registry_storage.mkdir(parents=True, exist_ok=True)
    write_private(layout.kubelet_config, configs.kubelet_config(layout))
    layout.registry_storage.mkdir(parents=True, exist_ok=True)
    for d in (layout.containerd_state, layout.cni_data_dir, layout.etcd_data):
        d.mkdir(parents=True, exist_ok=True)
    layout.etcd_data.chmod(0o700)
    # Now, not only once everything runs: an env file left by an older layout (another registry port) must not
    # outlive a failed start.
    layout.env_file.write_text(configs.env_file(layout))


BOOTSTRAP_TOKEN = re.compile(r"([a-z0-9]{6})\.([a-z0-9]{16})")


def bootstrap_token(layout: Layout) -> str:
    """The stack's bootstrap token (``[a-z0-9]{6}.[a-z0-9]{16}``, the format the apiserver accepts), made once and
    kept, so the bootstrap kubeconfig and the Secret agree across restarts."""
    path = layout.bootstrap_token_file
    if path.exists() and BOOTSTRAP_TOKEN.fullmatch(text := path.read_text().strip()):
        return text
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    token = "".join(secrets.choice(alphabet) for _ in range(6)) + "." + \
        "".join(secrets.choice(alphabet) for _ in range(16))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


def registry_configs(layout: Layout) -> dict[str, tuple[Path, str]]:
    """Each registry component's config file and the text this version writes into it."""
    return {
        "registry": (layout.root / "registry.yml", configs.registry_config(layout)),
        "registry-private": (layout.root / "registry-private.yml", configs.private_registry_config(layout)),
    }


def prune_host_dirs(certs_d: Path, wanted: Mapping[str, str]) -> list[str]:
    """Remove containerd's hosts directories no registry of this layout has (``127.0.0.1:5000`` once the
    registry moved), so no stale route outlives its registry; return their names."""
    keep = {rel.split("/", 1)[0] for rel in wanted}
    stale = sorted(d.name for d in certs_d.iterdir() if d.is_dir() and d.name not in keep) if certs_d.is_dir() else []
    for name in stale:
        shutil.rmtree(certs_d / name)
    return stale


# Daemons restarted by `up` when they run with other flags than this version passes (the apiserver got
# --enable-bootstrap-token-auth; a test's controller-manager with a short --cluster-signing-duration left behind).
RESTART_ON_NEW_FLAGS = ("kube-apiserver", "kube-controller-manager")


def reconfigured(layout: Layout) -> list[str]:
    """Daemons that run with another configuration than this version writes: registries started from a clone whose
    registry had another address (127.0.0.1:5000 before it moved to leave that port to upstream's specs), where
    waiting for one on its new address would only time out; and the daemons of RESTART_ON_NEW_FLAGS started with
    other flags."""
    changed = []
    for comp in components(layout):
        if comp.name in RESTART_ON_NEW_FLAGS:
            pid = processes.read_pid(layout.pids / f"{comp.name}.pid")
            if pid is not None and processes.cmdline(pid) not in (None, list(comp.argv)):
                changed.append(comp.name)
    for name, (path, text) in registry_configs(layout).items():
        if processes.read_pid(layout.pids / f"{name}.pid") is None:
            continue
        try:
            current = path.read_text()
        except OSError:
            current = None
        if current != text:
            changed.append(name)
    return changed


def components(layout: Layout) -> list[Component]:
    """The daemons in start order (``down`` stops them in reverse)."""
    b, p, k = layout.bin_dir, layout.pki, layout.kubeconfigs
    ca = p / "ca.crt"
    admin = (p / "admin.crt", p / "admin.key")
    etcd_url = f"https://127.0.0.1:{layout.etcd_client_port}"
    peer_url = f"http://127.0.0.1:{layout.etcd_peer_port}"
    return [
        Component("registry", ["docker-registry", "serve", str(layout.root / "registry.yml")],
                  processes.http_ok(f"http://{layout.registry_addr}/v2/"),
                  ports=(int(layout.registry_addr.rsplit(":", 1)[1]),)),
        Component("registry-private", ["docker-registry", "serve", str(layout.root / "registry-private.yml")],
                  processes.http_status(f"http://{layout.private_registry_addr}/v2/", 401),
                  ports=(int(layout.private_registry_addr.rsplit(":", 1)[1]),)),
        Component("containerd", ["containerd", "--config", str(layout.containerd_dir / "config.toml")],
                  processes.unix_socket_ok(layout.containerd_socket)),
        Component("etcd", [
            str(b / "etcd"), "--name=devstack", f"--data-dir={layout.etcd_data}",
            f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=devstack={peer_url}", "--listen-metrics-urls=http://127.0.0.1:2381",
            f"--cert-file={p / 'etcd-server.crt'}", f"--key-file={p / 'etcd-server.key'}",
            f"--trusted-ca-file={ca}", "--client-cert-auth=true", "--log-level=warn",
        ], processes.http_ok("http://127.0.0.1:2381/health"),
            ports=(layout.etcd_client_port, layout.etcd_peer_port, 2381)),
        Component("kube-apiserver", [
            str(b / "kube-apiserver"),
            f"--etcd-servers={etcd_url}", f"--etcd-cafile={ca}",
            f"--etcd-certfile={p / 'apiserver-etcd-client.crt'}", f"--etcd-keyfile={p / 'apiserver-etcd-client.key'}",
            "--bind-address=0.0.0.0", f"--advertise-address={host_ip()}", f"--secure-port={layout.apiserver_port}",
            f"--tls-cert-file={p / 'apiserver.crt'}", f"--tls-private-key-file={p / 'apiserver.key'}",
            f"--client-ca-file={ca}",
            "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
            "--enable-bootstrap-token-auth=true",  # TLS bootstrap as kubeadm sets it up (bootstrap kubeconfig)
            "--allow-privileged=true",
            f"--service-cluster-ip-range={layout.service_cidr}",
            f"--service-account-issuer=https://kubernetes.default.svc.{layout.cluster_domain}",
            f"--service-account-key-file={p / 'sa.pub'}", f"--service-account-signing-key-file={p / 'sa.key'}",
            f"--kubelet-client-certificate={p / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={p / 'apiserver-kubelet-client.key'}",
            f"--kubelet-certificate-authority={ca}",
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            f"--audit-policy-file={layout.audit_policy}", f"--audit-log-path={layout.audit_log}",
            "--audit-log-format=json", "--audit-log-maxsize=200", "--audit-log-maxbackup=1",
            "--profiling=false", "--v=1",
        ], processes.https_ok(f"{layout.apiserver_url}/readyz", ca, admin),
            ports=(layout.apiserver_port,), timeout=120),
        Component("kube-controller-manager", [
            str(b / "kube-controller-manager"),
            f"--kubeconfig={k / 'controller-manager.kubeconfig'}",
            f"--authentication-kubeconfig={k / 'controller-manager.kubeconfig'}",
            f"--authorization-kubeconfig={k / 'controller-manager.kubeconfig'}",
            "--bind-address=127.0.0.1", "--secure-port=10257", "--leader-elect=false",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={p / 'sa.key'}", f"--root-ca-file={ca}",
            f"--cluster-signing-cert-file={ca}", f"--cluster-signing-key-file={p / 'ca.key'}",
            f"--service-cluster-ip-range={layout.service_cidr}",
            "--controllers=*,bootstrapsigner,tokencleaner", "--profiling=false", "--v=1",
        ], processes.https_ok("https://127.0.0.1:10257/healthz"), ports=(10257,)),
        Component("kube-scheduler", [
            str(b / "kube-scheduler"),
            f"--kubeconfig={k / 'scheduler.kubeconfig'}",
            f"--authentication-kubeconfig={k / 'scheduler.kubeconfig'}",
            f"--authorization-kubeconfig={k / 'scheduler.kubeconfig'}",
            "--bind-address=127.0.0.1", "--secure-port=10259", "--leader-elect=false",
            "--profiling=false", "--v=1",
        ], processes.https_ok("https://127.0.0.1:10259/healthz"), ports=(10259,)),
    ]


def _log(msg: str) -> None:
    """Progress to stderr; never fails, so a closed terminal or pipe cannot abort a shutdown half-way."""
    with contextlib.suppress(OSError, ValueError):
        print(f"devstack: {msg}", file=sys.stderr, flush=True)


def running(layout: Layout) -> list[str]:
    return [c.name for c in components(layout) if processes.read_pid(layout.pids / f"{c.name}.pid")]


def build_binaries() -> None:
    subprocess.run(["bash", str(REPO / "devstack" / "build-binaries.sh")], check=True, stdout=subprocess.DEVNULL)


def push_images(layout: Layout) -> None:
    """The project's own images, built from Debian binaries, into the local registry."""
    subprocess.run([sys.executable, str(REPO / "images" / "build.py"), "--registry", layout.registry_addr,
                    "--cache", str(layout.cache / "images"), "--bin-dir", str(layout.bin_dir)], check=True)


PRIVATE_IMAGES = {"library/busybox:1.36": "private/busybox:1.36"}


def fill_private_registry(layout: Layout) -> None:
    """Copies of the project's images behind the private registry's login (skopeo skips what is there)."""
    creds = f"{layout.private_registry_user}:{layout.private_registry_password}"
    for source, target in PRIVATE_IMAGES.items():
        subprocess.run(["skopeo", "copy", "--quiet", "--preserve-digests", "--src-tls-verify=false",
                        "--dest-tls-verify=false", "--dest-creds", creds,
                        f"docker://{layout.registry_addr}/{source}",
                        f"docker://{layout.private_registry_addr}/{target}"], check=True)


def up(layout: Layout, on_started: Callable[[str], None] = lambda name: None,
       only: Sequence[str] | None = None) -> list[str]:
    """Start every component (or ``only`` those) not yet running; return the names this call started."""
    build_binaries()
    restarted = reconfigured(layout)
    for name in restarted:
        _log(f"restarting {name}: it runs with an older configuration (another address or other flags)")
        processes.stop(name, pids=layout.pids)
    prepare(layout)
    started: list[str] = []
    for comp in components(layout):
        if only is not None and comp.name not in only:
            continue
        if processes.read_pid(layout.pids / f"{comp.name}.pid") is None:
            for port in comp.ports:
                owner = processes.port_owner(port)
                if owner:
                    raise processes.StackError(
                        f"cannot start {comp.name}: port {port} is taken ({owner}). Another kopflet "
                        f"stack (from another clone?) or a system service runs; stop it first.")
        _log(f"starting {comp.name}" if comp.name not in running(layout) else f"{comp.name} already runs")
        # A registry restarted for its new address ran before this call: it is not this call's to stop.
        if processes.start(comp.name, comp.argv, pids=layout.pids, logs=layout.logs,
                           healthy=comp.healthy, timeout=comp.timeout) and comp.name not in restarted:
            started.append(comp.name)
            on_started(comp.name)
        if comp.name == "registry":
            push_images(layout)
        if comp.name == "registry-private":
            fill_private_registry(layout)
        if comp.name == "kube-apiserver":
            bootstrap(layout)
    return started


def kubectl(layout: Layout, *args: str, stdin: str | None = None) -> str:
    return subprocess.run(
        [str(layout.bin_dir / "kubectl"), f"--kubeconfig={layout.admin_kubeconfig}", *args],
        input=stdin, capture_output=True, text=True, check=True).stdout


def bootstrap(layout: Layout) -> None:
    """Cluster objects a kubeadm cluster would have that the stack's identities rely on: the apiserver's access to
    the kubelet API, and TLS bootstrap's token Secret and bindings (``kubectl apply``: the same objects on every
    start)."""
    kubectl(layout, "apply", "-f", "-", stdin=configs.KUBELET_API_ADMIN_BINDING)
    token_id, _, token_secret = bootstrap_token(layout).partition(".")
    kubectl(layout, "apply", "-f", "-", stdin=configs.bootstrap_token_secret(token_id, token_secret))
    kubectl(layout, "apply", "-f", "-", stdin=configs.TLS_BOOTSTRAP_BINDINGS)
    route_kubernetes_service(layout)


SERVICE_CHAIN = "KOPFLET-SERVICES"


def _iptables(*args: str, check: bool = True) -> bool:
    return subprocess.run(["iptables", "-w", "-t", "nat", *args], capture_output=True, check=check).returncode == 0


def route_kubernetes_service(layout: Layout) -> None:
    """kube-proxy's job for the one Service every pod relies on: ``kubernetes`` (service_ip:443) → the apiserver.

    The stack runs no kube-proxy; without this, pods (agnhost inclusterclient, client-go in-cluster config)
    could not reach the apiserver through KUBERNETES_SERVICE_HOST as they do in a real cluster.
    """
    _iptables("-N", SERVICE_CHAIN, check=False)
    _iptables("-F", SERVICE_CHAIN)
    _iptables("-A", SERVICE_CHAIN, "-d", f"{layout.service_ip}/32", "-p", "tcp", "--dport", "443",
              "-j", "DNAT", "--to-destination", f"{host_ip()}:{layout.apiserver_port}")
    for hook in ("PREROUTING", "OUTPUT"):
        if not _iptables("-C", hook, "-j", SERVICE_CHAIN, check=False):
            _iptables("-I", hook, "1", "-j", SERVICE_CHAIN)


def unroute_kubernetes_service() -> None:
    """Remove what route_kubernetes_service added, leaving the host's tables as they were."""
    for hook in ("PREROUTING", "OUTPUT"):
        while _iptables("-D", hook, "-j", SERVICE_CHAIN, check=False):
            pass
    _iptables("-F", SERVICE_CHAIN, check=False)
    _iptables("-X", SERVICE_CHAIN, check=False)


class Supervisor(threading.Thread):
    """Starts a daemon again when it dies on its own, as systemd's ``Restart=always`` in the units the Debian
    packages ship does on a real node (containerd.service among them): the agent must ride out a runtime crash,
    and one crash of a daemon must not fail every test after it. A daemon stopped on purpose
    (`processes.stop`, which removes its pid file first) stays stopped.

    Each crash is reported on stderr with the end of the daemon's log and recorded in ``crashes.log`` beside the
    logs, where the tests look for crashes during their module."""

    def __init__(self, layout: Layout, period: float = 2.0,
                 daemons: Callable[[Layout], Sequence[Component]] | None = None) -> None:
        super().__init__(name="devstack-supervisor", daemon=True)
        self.layout, self.period = layout, period
        self.daemons = daemons or components
        self.stopping = threading.Event()

    def run(self) -> None:
        daemons: Sequence[Component] | None = None  # listed once: the stack's daemons do not change while it runs
        while not self.stopping.wait(self.period):
            if daemons is None:
                try:
                    daemons = self.daemons(self.layout)
                except Exception as exc:  # never let a round end the supervision
                    _log(f"supervisor: cannot list the daemons: {exc}")
                    continue
            for comp in daemons:
                if self.stopping.is_set():
                    return
                try:
                    self._check(comp)
                except Exception as exc:
                    _log(f"supervisor: checking {comp.name} failed: {exc}")

    def _check(self, comp: Component) -> None:
        pidfile = self.layout.pids / f"{comp.name}.pid"
        try:
            pid = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            return  # not running, or stopped on purpose
        if processes.alive(pid):
            return
        status, pid_done, raw = "", 0, 0
        with contextlib.suppress(ChildProcessError, OSError):  # our own child: reap it, learn how it ended
            pid_done, raw = os.waitpid(pid, os.WNOHANG)
            status = f" ({_exit_status(raw)})" if pid_done else ""
        if not pidfile.exists() or self.stopping.is_set():
            return  # stopped on purpose meanwhile
        tail = processes.tail(self.layout.logs / f"{comp.name}.log", 40)
        report = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {comp.name} (pid {pid}) exited on its own{status}"
        _log(f"{report}; starting it again. Its log ends:\n{tail}")
        with contextlib.suppress(OSError), (self.layout.logs / "crashes.log").open("a") as out:
            out.write(f"{report}\n{tail}\n\n")
        pidfile.unlink(missing_ok=True)
        try:
            processes.start(comp.name, comp.argv, pids=self.layout.pids, logs=self.layout.logs,
                            healthy=comp.healthy, timeout=comp.timeout)
        except processes.StackError as exc:
            _log(f"could not start {comp.name} again: {exc}")

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=120)


def _exit_status(raw: int) -> str:
    if os.WIFSIGNALED(raw):
        return f"killed by {signal.Signals(os.WTERMSIG(raw)).name}"
    return f"exit status {os.WEXITSTATUS(raw)}" if os.WIFEXITED(raw) else f"wait status {raw}"


def down(layout: Layout, only: Sequence[str] | None = None) -> None:
    """Stop the components (all, or ``only`` those), newest first."""
    for comp in reversed(components(layout)):
        if only is not None and comp.name not in only:
            continue
        try:
            if comp.name == "containerd":
                remove_all_pods(layout)
            if processes.stop(comp.name, pids=layout.pids):
                _log(f"stopped {comp.name}")
            if comp.name == "kube-apiserver":
                unroute_kubernetes_service()
            if comp.name == "containerd":
                sweep_shims(layout)
        except Exception as exc:  # keep stopping the others: no stray processes
            _log(f"could not stop {comp.name} cleanly: {exc}")


def remove_all_pods(layout: Layout) -> None:
    """Stop and remove every sandbox (and so every container) through CRI, the clean way."""
    if processes.read_pid(layout.pids / "containerd.pid") is None:
        return
    from cri_client import CriClient, CriError

    async def clean() -> int:
        async with CriClient(layout.runtime_endpoint, timeout=30) as cri:
            sandboxes = await cri.sandboxes.list()
            for sb in sandboxes:
                with contextlib.suppress(CriError):
                    await cri.sandboxes.stop(sb.id)
                with contextlib.suppress(CriError):
                    await cri.sandboxes.remove(sb.id)
            return len(sandboxes)

    try:
        count = asyncio.run(clean())
    except Exception as exc:  # best effort: sweep_shims still catches leftovers
        _log(f"could not remove pods through CRI: {exc}")
        return
    if count:
        _log(f"removed {count} pod sandbox(es)")


def sweep_shims(layout: Layout) -> None:
    """Kill any shim (and its container processes) left behind by this stack's containerd."""
    for pid in processes.processes_matching(f"-address {layout.containerd_socket}"):
        for child in processes.processes_matching(""):
            with contextlib.suppress(OSError):
                if Path(f"/proc/{child}/stat").read_text().split(") ")[1].split()[1] == str(pid):
                    os.kill(child, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            _log(f"killed leftover shim {pid}")
