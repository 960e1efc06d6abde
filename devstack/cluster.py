"""A kubeadm cluster whose kubelet is kopflet: ``python -m devstack cluster {up,down,status}`` (``make cluster``).

`up` starts the stack's registry and containerd (not its hand-made control plane: kubeadm makes its own), puts
the images kubeadm pulls into the registry (built from the project's binaries, `images/build.py`), starts the
kubelet "unit" (`devstack/kubelet_unit.py`: kopflet with the flags kubeadm's systemd drop-in gives the kubelet),
and runs ``kubeadm init``. kubeadm writes the kubelet's config, certificates and control-plane manifests; kopflet
runs etcd, kube-apiserver, kube-controller-manager and kube-scheduler as static pods, registers the node, and
then runs the kube-proxy DaemonSet and the CoreDNS Deployment kubeadm installs, and metrics-server. The node
carries no control-plane taint (the kubeadm config's ``taints: []``), as kubeadm documents for a single-node cluster, so
ordinary pods run on it too.

`down` is ``kubeadm reset`` after the kubelet stops, plus what reset leaves to the user: kube-proxy's iptables
rules (``kube-proxy --cleanup``) and the CNI state; then the registry and containerd stop.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from devstack import processes, stack
from devstack.layout import REPO, Layout, host_ip

KUBELET_UNIT = "kubelet"
KUBEADM_CONFIG_NAME = "kubeadm.yaml"
ADMIN_CONF = Path("/etc/kubernetes/admin.conf")
INIT_TIMEOUT = 900.0
ADDONS_TIMEOUT = 300.0
BASE_COMPONENTS = ("registry", "registry-private", "containerd")
# kubeadm's kubelet directory: its certificates (kubelet-finalize points kubelet.conf at pki/kubelet-client-current.pem
# there), config and pods, which `kubeadm reset` empties. kopflet's own default root (/var/lib/kopflet) is for a
# kopflet beside another kubelet; as the kubelet of a kubeadm node it takes kubeadm's, through kubeadm-flags.env.
KUBELET_ROOT = "/var/lib/kubelet"


def cgroup_v1(root: Path = Path("/sys/fs/cgroup")) -> bool:
    return not (root / "cgroup.controllers").exists()


def ignored_preflight(v1: bool) -> tuple[str, ...]:
    """On a cgroup v1 host kubeadm's SystemVerification fails ("cgroups v1 support is deprecated"), and kubeadm asks
    for the check to be skipped explicitly, with the kubelet's failCgroupV1 false (KEP 5573), as for upstream's
    kubelet."""
    return ("SystemVerification",) if v1 else ()


def kubeadm_config(layout: Layout, advertise_address: str, *, v1: bool) -> str:
    """kubeadm's v1beta4 configuration for this node: the stack's containerd, its pod and service ranges, the
    cgroupfs driver (no systemd here), cgroup v1 allowed on a v1 host, and no control-plane taint."""
    fail_cgroup_v1 = "failCgroupV1: false\n" if v1 else ""
    return f"""\
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: {advertise_address}
  bindPort: {layout.apiserver_port}
nodeRegistration:
  name: {layout.node_name}
  criSocket: {layout.runtime_endpoint}
  imagePullPolicy: IfNotPresent
  taints: []
  kubeletExtraArgs:
  - name: root-dir
    value: {KUBELET_ROOT}
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: {layout.versions['KUBERNETES_VERSION']}
networking:
  podSubnet: {layout.pod_cidr}
  serviceSubnet: {layout.service_cidr}
  dnsDomain: {layout.cluster_domain}
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
{fail_cgroup_v1}"""


def _log(msg: str) -> None:
    print(f"devstack cluster: {msg}", file=sys.stderr, flush=True)


def cluster_dir(layout: Layout) -> Path:
    return layout.root / "cluster"


def kubeadm(layout: Layout) -> str:
    return str(layout.bin_dir / "kubeadm")


def kubectl(layout: Layout, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`timeout`: longer than any ``--timeout`` the command itself is given."""
    return subprocess.run([str(layout.bin_dir / "kubectl"), f"--kubeconfig={ADMIN_CONF}", *args],
                          capture_output=True, text=True, check=check, timeout=timeout)


def build(layout: Layout) -> None:
    """kubeadm, kube-proxy, etcd and CoreDNS binaries (`build-binaries.sh --cluster`), which the images kubeadm pulls
    are made of."""
    subprocess.run(["bash", str(REPO / "devstack" / "build-binaries.sh"), "--cluster"], check=True,
                   stdout=subprocess.DEVNULL)


def kubelet_bin(layout: Layout) -> Path:
    """kopflet installed as the node's ``kubelet`` (a symlink): kubeadm's preflight runs ``kubelet --version``."""
    return cluster_dir(layout) / "bin" / "kubelet"


KUBELETS = ("kopflet", "kubelet")
"""The node agents a cluster can have: kopflet, or the upstream kubelet of the same release (for comparisons:
`build-binaries.sh --kubelet` builds it), started by the same unit with the same flags."""


def kubelet_target(layout: Layout, kubelet: str) -> Path:
    if kubelet not in KUBELETS:
        raise processes.StackError(f"unknown kubelet {kubelet!r}; known: {', '.join(KUBELETS)}")
    return Path(sys.executable).with_name("kopflet") if kubelet == "kopflet" else layout.bin_dir / "kubelet"


def install_kubelet(layout: Layout, kubelet: str = "kopflet") -> None:
    """`kubelet` installed as the node's ``kubelet`` (a symlink the unit and kubeadm's preflight run)."""
    target = kubelet_target(layout, kubelet)
    if not target.exists():
        raise processes.StackError(f"{target} is missing (the upstream kubelet: bash devstack/build-binaries.sh "
                                   f"--kubelet)")
    link = kubelet_bin(layout)
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink() or link.readlink() != target:
        link.unlink(missing_ok=True)
        link.symlink_to(target)


def installed_kubelet(layout: Layout) -> str:
    """Which agent the node's ``kubelet`` is (kopflet when none is installed yet)."""
    link = kubelet_bin(layout)
    return "kubelet" if link.is_symlink() and link.readlink() == layout.bin_dir / "kubelet" else "kopflet"


def start_kubelet(layout: Layout) -> None:
    processes.start(KUBELET_UNIT, [sys.executable, "-m", "devstack.kubelet_unit", f"--kopflet={kubelet_bin(layout)}"],
                    pids=layout.pids, logs=layout.logs, healthy=lambda: True, env={"PYTHONPATH": str(REPO)})


def init(layout: Layout) -> None:
    """``kubeadm init`` with the config above; its output goes to the cluster log."""
    directory = cluster_dir(layout)
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / KUBEADM_CONFIG_NAME
    v1 = cgroup_v1()
    config.write_text(kubeadm_config(layout, host_ip(), v1=v1))
    log = layout.logs / "kubeadm-init.log"
    _log(f"kubeadm init (log: {log})")
    ignored = ignored_preflight(v1)
    env = {**os.environ, "PATH": f"{kubelet_bin(layout).parent}:{os.environ.get('PATH', '')}"}
    with log.open("ab") as out:
        proc = subprocess.run([kubeadm(layout), "init", f"--config={config}", "--v=1",
                               *([f"--ignore-preflight-errors={','.join(ignored)}"] if ignored else [])],
                              stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=INIT_TIMEOUT,
                              env=env)
    if proc.returncode != 0:
        raise processes.StackError(f"kubeadm init failed ({proc.returncode}); its log {log} ends:\n"
                                   f"{processes.tail(log)}\nthe kubelet's ({layout.logs / 'kubelet.log'}):\n"
                                   f"{processes.tail(layout.logs / 'kubelet.log')}")


METRICS_SERVER = REPO / "manifests" / "cluster" / "metrics-server.yaml"


def install_metrics_server(layout: Layout) -> None:
    """metrics-server (upstream's release manifest; manifests/cluster/metrics-server.yaml says its one change), which
    `kubectl top` reads, from the kubelets' /metrics/resource."""
    kubectl(layout, "apply", "-f", str(METRICS_SERVER))


def wait_addons(layout: Layout) -> None:
    """kube-proxy on the node, CoreDNS and metrics-server ready, and the metrics API served: what a user checks
    after ``kubeadm init`` and the add-ons."""
    deadline = time.monotonic() + ADDONS_TIMEOUT
    for kind, name in (("daemonset", "kube-proxy"), ("deployment", "coredns"), ("deployment", "metrics-server")):
        remaining = max(1, int(deadline - time.monotonic()))
        proc = kubectl(layout, "-n", "kube-system", "rollout", "status", f"{kind}/{name}", f"--timeout={remaining}s",
                       check=False, timeout=remaining + 30)
        if proc.returncode != 0:
            pods = kubectl(layout, "get", "pods", "-A", "-o", "wide", check=False).stdout
            raise processes.StackError(f"{kind}/{name} did not roll out: {proc.stderr.strip()}\n{pods}")
    remaining = max(1, int(deadline - time.monotonic()))
    proc = kubectl(layout, "wait", "--for=condition=Available", "apiservice/v1beta1.metrics.k8s.io",
                   f"--timeout={remaining}s", check=False, timeout=remaining + 30)
    if proc.returncode != 0:
        raise processes.StackError(f"the metrics API is not available: {proc.stderr.strip()}")


SERVICE_DEVICE = "kopflet-svc0"


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False, timeout=30)


def hold_service_range(layout: Layout) -> None:
    """The Service range routed to a device that leads nowhere (a bridge without ports: this kernel has no dummy
    devices), so a packet to a ClusterIP kube-proxy does not translate (a port a Service no longer has) ends here,
    "no route to host", instead of leaving through the default route: nothing of the cluster is off this machine,
    and a test that a port stops answering sees it stop. Translated packets, the host's own too, are routed again
    after kube-proxy's DNAT, to the pod."""
    _ip("link", "add", SERVICE_DEVICE, "type", "bridge")
    _ip("link", "set", SERVICE_DEVICE, "up")
    proc = _ip("route", "replace", layout.service_cidr, "dev", SERVICE_DEVICE)
    if proc.returncode != 0:
        raise processes.StackError(f"cannot route {layout.service_cidr} to {SERVICE_DEVICE}: {proc.stderr.strip()}")


def release_service_range() -> None:
    _ip("link", "delete", SERVICE_DEVICE)  # its route goes with it


def is_up(layout: Layout) -> bool:
    return ADMIN_CONF.exists() and processes.read_pid(layout.pids / f"{KUBELET_UNIT}.pid") is not None


def check_no_dev_stack(layout: Layout) -> None:
    """StackError while the dev stack's control plane runs: its ports are the ones kubeadm's takes, and its
    containerd and registries are not this command's to reset or stop."""
    for name in ("kube-apiserver", "etcd"):
        if processes.read_pid(layout.pids / f"{name}.pid") is not None:
            raise processes.StackError(f"the dev stack's {name} runs: it takes the ports kubeadm's control plane "
                                       f"needs, and its runtime is not the cluster's; stop it first (make down)")


def up(layout: Layout, kubelet: str = "kopflet") -> None:
    """The cluster with `kubelet` (kopflet, or upstream's kubelet) as its node agent."""
    if is_up(layout):
        if installed_kubelet(layout) != kubelet:
            raise processes.StackError(f"the cluster runs with {installed_kubelet(layout)} as its kubelet; "
                                       f"make cluster-down first")
        _log("the cluster is up already")
        return
    check_no_dev_stack(layout)
    build(layout)
    stack.up(layout, only=BASE_COMPONENTS)
    hold_service_range(layout)
    stack.push_images(layout)  # with the cluster's binaries built, the images kubeadm pulls too (skips what is there)
    install_kubelet(layout, kubelet)
    start_kubelet(layout)
    if not ADMIN_CONF.exists():
        init(layout)
    install_metrics_server(layout)
    wait_addons(layout)
    _log(f"up: export KUBECONFIG={ADMIN_CONF}; kubectl get nodes,pods -A -o wide")


def reset(layout: Layout) -> None:
    """``kubeadm reset`` and what it leaves for the user to clean: kube-proxy's rules, the CNI state."""
    if shutil.which("iptables") and (layout.bin_dir / "kube-proxy").exists():
        subprocess.run([str(layout.bin_dir / "kube-proxy"), "--cleanup"], capture_output=True, check=False,
                       timeout=120)
    if (layout.bin_dir / "kubeadm").exists():
        subprocess.run([kubeadm(layout), "reset", "--force", f"--cri-socket={layout.runtime_endpoint}"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, timeout=600)


def stop_kubelet(layout: Layout) -> bool:
    """The unit, then any agent it left (a runner killed before its kopflet stopped: kubeadm reset must not race it)."""
    stopped = processes.stop(KUBELET_UNIT, pids=layout.pids, timeout=60)
    for pid in processes.processes_matching(str(kubelet_bin(layout))):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            stopped = True
    return stopped


def down(layout: Layout) -> None:
    """Stop the kubelet, reset what kubeadm made, and stop the registry and containerd. Refused while the dev stack's
    control plane runs: that containerd is the dev stack's."""
    check_no_dev_stack(layout)
    from devstack import cluster_join  # it builds on this module

    if cluster_join.has_traces(layout):
        cluster_join.leave(layout)
        _log(f"{cluster_join.node_name(layout)} left")
    kubelet_ran = stop_kubelet(layout)
    if kubelet_ran:
        _log("stopped the kubelet")
    if (kubelet_ran or ADMIN_CONF.exists()) and processes.read_pid(layout.pids / "containerd.pid") is not None:
        reset(layout)
    release_service_range()
    stack.down(layout, only=BASE_COMPONENTS)


def run(layout: Layout, argv: list[str], kubelet: str = "kopflet") -> int:
    """`up`, then `argv` (the cluster's tests, `make test`), then `down` whatever happened, unless the cluster was
    up before: the machine is left as it was. Nothing is touched while the dev stack runs."""
    check_no_dev_stack(layout)
    was_up = is_up(layout)
    try:
        up(layout, kubelet)
        return subprocess.run(argv, cwd=REPO, check=False).returncode
    finally:
        if not was_up:
            down(layout)


def status(layout: Layout) -> int:
    running = processes.read_pid(layout.pids / f"{KUBELET_UNIT}.pid") is not None
    print(f"{'kubelet (kopflet)':24} {'running' if running else 'stopped'}")
    if ADMIN_CONF.exists():
        print(kubectl(layout, "get", "nodes,pods", "-A", "-o", "wide", check=False).stdout, end="")
    return 0
