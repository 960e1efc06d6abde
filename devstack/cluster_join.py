"""A second node for `make cluster`: ``kubeadm join`` with a bootstrap token brings a kopflet node into the cluster
(``python -m devstack cluster join``; ``cluster leave`` takes it out; ``cluster down`` does both).

The machine has one network stack, one /etc/kubernetes and one /var/lib/kubelet, and a node owns all three. So the
second node gets what a second machine would have of its own, and shares the rest (the kernel, the cgroup tree, the
image store's files):

- a network namespace joined to the host by a veth pair (`HOST_ADDR` on the host, `NODE_ADDR` the node's
  InternalIP), with its pods' range (`POD_SUBNET`) routed to it; kube-proxy's DaemonSet pod there programs that
  namespace's iptables, as on another machine;
- a mount namespace, held by a process that only sleeps, with empty directories of its own bound over
  `PRIVATE_PATHS` (/etc/kubernetes, /var/lib/kubelet, /var/lib/kopflet, the pod logs): kubeadm join writes its
  kubelet.conf, bootstrap-kubelet.conf, config.yaml and kubeadm-flags.env there, and the node's kubelet reads them
  there;
- its own containerd (the stack's containerd, config and CNI bridge, in directories of its own), and a read-only
  registry over the stack's registry storage on the namespace's 127.0.0.1:5050, so image names resolve as on the
  first node;
- its own cgroup root (`CGROUP_ROOT`, through a kubeadm patch of the kubelet configuration), so neither node's
  kubelet takes the other's pod cgroups for orphans;
- kopflet as its kubelet, run by the same unit runner as the first node's (kubeadm's kubelet.service and drop-in).

Every process of the node runs in both namespaces (``nsenter --net --mount`` into the holder's). `leave` deletes
the Node, stops the kubelet, removes the node's pods from its containerd, stops containerd and the registry, and
removes the namespaces, the veth, the route, the cgroups and the directories.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc

from devstack import cluster, configs, processes
from devstack.layout import REPO, Layout

VETH_HOST, VETH_NODE = "kn2-host", "kn2-node"
HOST_ADDR, NODE_ADDR, PREFIX = "192.168.222.1", "192.168.222.2", 30
POD_SUBNET = "10.90.0.0/24"  # outside the first node's pod range (10.88.0.0/16) and the DaemonSet's (10.89.0.0/24)
CGROUP_ROOT = "/kopflet-node2"
# /var/lib/kopflet too: kopflet's own default root, where a start without kubeadm's flags would find the host's
# agent state (a client certificate from another cluster, which the kubeconfig then points at).
PRIVATE_PATHS = ("/etc/kubernetes", "/var/lib/kubelet", "/var/lib/kopflet", "/var/log/pods", "/var/log/containers")
JOIN_TIMEOUT = 600.0
READY_TIMEOUT = 300.0
# The node's processes, in start order (each a pid file and a log under the stack's).
HOLDER, REGISTRY, CONTAINERD, UNIT = "node2-namespaces", "node2-registry", "node2-containerd", "node2-kubelet"


def node_layout(layout: Layout) -> Layout:
    """The second node's paths and names: its own directory, runtime directory, node name and pod range."""
    return dataclasses.replace(layout, root=layout.root / "node2", run_dir=Path("/run/kopflet-node2"),
                               node_name=f"{layout.node_name}-2", pod_cidr=POD_SUBNET)


def node_name(layout: Layout) -> str:
    return node_layout(layout).node_name


def join_config(layout: Layout, server: str, token: str, ca_hash: str, *, v1: bool) -> str:
    """kubeadm's v1beta4 JoinConfiguration: the node's containerd, name and address, kubeadm's kubelet root, no
    taints; the token discovery a user's ``kubeadm token create --print-join-command`` gives."""
    node = node_layout(layout)
    ignored = "".join(f"  - {name}\n" for name in cluster.ignored_preflight(v1))
    return f"""\
apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: {server}
    token: {token}
    caCertHashes:
    - {ca_hash}
nodeRegistration:
  name: {node.node_name}
  criSocket: {node.runtime_endpoint}
  imagePullPolicy: IfNotPresent
  taints: []
  kubeletExtraArgs:
  - name: root-dir
    value: {cluster.KUBELET_ROOT}
  - name: node-ip
    value: {NODE_ADDR}
""" + (f"  ignorePreflightErrors:\n{ignored}" if ignored else "") + f"""\
patches:
  directory: {node.root / "patches"}
"""


def kubelet_patch() -> str:
    """kubeadm's patch of the kubelet configuration it writes for this node (target ``kubeletconfiguration``): the
    cluster's KubeletConfiguration is shared, the cgroup root is this node's."""
    return f"cgroupRoot: {CGROUP_ROOT}\n"


# ------------------------------------------------------------------------------------------ namespaces


def _run(argv: list[str], *, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)
    if check and proc.returncode != 0:
        raise processes.StackError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def holder_pid(layout: Layout) -> int | None:
    return processes.read_pid(layout.pids / f"{HOLDER}.pid")


def enter(layout: Layout) -> list[str]:
    """The prefix that runs a command as the node: in its network and mount namespaces."""
    pid = holder_pid(layout)
    if pid is None:
        raise processes.StackError("the second node's namespaces are gone (python -m devstack cluster join)")
    return ["nsenter", f"--target={pid}", "--net", "--mount", "--"]


def make_network(layout: Layout) -> None:
    """The holder's network namespace joined to the host: a veth with addresses and routes both ways, forwarding
    on. Not `ip netns add`: on a host where none was made that way it bind-mounts /run/netns over itself, hiding the
    network namespaces containerd has mounted there from containerd, which then cannot remove its sandboxes."""
    pid = holder_pid(layout)
    if pid is None:
        raise processes.StackError("the second node's namespaces are gone")
    _run(["ip", "link", "add", VETH_HOST, "type", "veth", "peer", "name", VETH_NODE])
    _run(["ip", "link", "set", VETH_NODE, "netns", str(pid)])
    _run(["ip", "addr", "add", f"{HOST_ADDR}/{PREFIX}", "dev", VETH_HOST])
    _run(["ip", "link", "set", VETH_HOST, "up"])
    inside = ["nsenter", f"--target={pid}", "--net", "--"]
    _run([*inside, "ip", "link", "set", "lo", "up"])
    _run([*inside, "ip", "addr", "add", f"{NODE_ADDR}/{PREFIX}", "dev", VETH_NODE])
    _run([*inside, "ip", "link", "set", VETH_NODE, "up"])
    _run([*inside, "ip", "route", "add", "default", "via", HOST_ADDR])
    _run([*inside, "sysctl", "-qw", "net.ipv4.ip_forward=1"])  # /proc/sys/net is the namespace's
    _run(["ip", "route", "replace", POD_SUBNET, "via", NODE_ADDR])


def remove_network() -> None:
    """The route and the veth (its peer goes with it); the namespace goes with its last process."""
    _run(["ip", "route", "del", POD_SUBNET], check=False)
    _run(["ip", "link", "del", VETH_HOST], check=False)


def start_holder(layout: Layout) -> None:
    """A process that sleeps in a new network namespace and a new mount namespace, with the node's own directories
    bound over `PRIVATE_PATHS`; every other process of the node enters its namespaces."""
    node = node_layout(layout)
    binds = []
    for path in PRIVATE_PATHS:
        own = node.root / "fs" / path.strip("/").replace("/", "-")
        own.mkdir(parents=True, exist_ok=True)
        Path(path).mkdir(parents=True, exist_ok=True)
        binds.append(f"mount --bind {own} {path}")
    script = " && ".join([*binds, "exec sleep infinity"])
    processes.start(HOLDER, ["unshare", "--net", "--mount", "--propagation", "private", "sh", "-c", script],
                    pids=layout.pids, logs=layout.logs, healthy=lambda: _bound(layout))


def _bound(layout: Layout) -> bool:
    pid = holder_pid(layout)
    if pid is None:
        return False
    with contextlib.suppress(OSError):
        mounts = Path(f"/proc/{pid}/mountinfo").read_text()
        return all(f" {path} " in mounts for path in PRIVATE_PATHS)
    return False


# ------------------------------------------------------------------------------------------ runtime


def write_runtime_files(layout: Layout) -> None:
    """The stack's containerd config and CNI bridge with the node's paths and pod range, and its registry config."""
    node = node_layout(layout)
    for d in (node.containerd_dir, node.cni_conf_dir, node.containerd_root, node.root / "patches"):
        d.mkdir(parents=True, exist_ok=True)
    (node.containerd_dir / "config.toml").write_text(configs.containerd_config(node))
    (node.cni_conf_dir / "10-kopflet.conflist").write_text(configs.cni_conflist(node))
    for name, text in configs.registry_host_files(node).items():
        (node.containerd_dir / "certs.d" / name).parent.mkdir(parents=True, exist_ok=True)
        (node.containerd_dir / "certs.d" / name).write_text(text)
    read_only = "  maintenance:\n    uploadpurging:\n      enabled: false\n    readonly:\n      enabled: true\n"
    (node.root / "registry.yml").write_text(configs.registry_config(node).replace("  delete:\n    enabled: true\n",
                                                                                  read_only))
    (node.root / "patches" / "kubeletconfiguration.yaml").write_text(kubelet_patch())


def _in_node_ok(layout: Layout, port: int) -> bool:
    code = (f"import socket,sys\ntry:\n socket.create_connection(('127.0.0.1', {port}), 1).close()\n"
            "except OSError:\n sys.exit(1)\n")
    with contextlib.suppress(processes.StackError, subprocess.TimeoutExpired):
        return subprocess.run([*enter(layout), sys.executable, "-c", code], capture_output=True,
                              timeout=10).returncode == 0
    return False


def start_runtime(layout: Layout) -> None:
    node = node_layout(layout)
    port = int(layout.registry_addr.rsplit(":", 1)[1])
    processes.start(REGISTRY, [*enter(layout), "docker-registry", "serve", str(node.root / "registry.yml")],
                    pids=layout.pids, logs=layout.logs, healthy=lambda: _in_node_ok(layout, port))
    processes.start(CONTAINERD, [*enter(layout), "containerd", "--config", str(node.containerd_dir / "config.toml")],
                    pids=layout.pids, logs=layout.logs, healthy=processes.unix_socket_ok(node.containerd_socket))


def start_kubelet(layout: Layout) -> None:
    processes.start(UNIT, [*enter(layout), sys.executable, "-m", "devstack.kubelet_unit",
                           f"--kopflet={cluster.kubelet_bin(layout)}"],
                    pids=layout.pids, logs=layout.logs, healthy=lambda: True, env={"PYTHONPATH": str(REPO)})


# ------------------------------------------------------------------------------------------ join and leave


def join_command(layout: Layout) -> tuple[str, str, str]:
    """A new bootstrap token and the CA's hash, as ``kubeadm token create --print-join-command`` prints them."""
    line = _run([cluster.kubeadm(layout), "token", "create", "--print-join-command",
                 f"--kubeconfig={cluster.ADMIN_CONF}"]).stdout.split()
    # kubeadm join <server> --token <token> --discovery-token-ca-cert-hash sha256:<hash>
    return line[2], line[line.index("--token") + 1], line[line.index("--discovery-token-ca-cert-hash") + 1]


def is_joined(layout: Layout) -> bool:
    return processes.read_pid(layout.pids / f"{UNIT}.pid") is not None


def join(layout: Layout) -> None:
    """The second node: namespaces, runtime, kubelet, ``kubeadm join``; then its Node Ready and its kube-proxy."""
    if not cluster.is_up(layout):
        raise processes.StackError("no cluster to join: python -m devstack cluster up")
    if is_joined(layout):
        cluster._log(f"{node_name(layout)} has joined already")
        return
    leave(layout)  # what a failed join left
    node = node_layout(layout)
    node.root.mkdir(parents=True, exist_ok=True)
    make_cgroup_root()
    start_holder(layout)
    make_network(layout)
    write_runtime_files(layout)
    start_runtime(layout)
    start_kubelet(layout)
    server, token, ca_hash = join_command(layout)
    config = node.root / "kubeadm-join.yaml"
    config.write_text(join_config(layout, server, token, ca_hash, v1=cluster.cgroup_v1()))
    log = layout.logs / "kubeadm-join.log"
    cluster._log(f"kubeadm join {server} as {node.node_name} (log: {log})")
    env = {**os.environ, "PATH": f"{cluster.kubelet_bin(layout).parent}:{os.environ.get('PATH', '')}"}
    with log.open("ab") as out:
        proc = subprocess.run([*enter(layout), cluster.kubeadm(layout), "join", f"--config={config}", "--v=1"],
                              stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=JOIN_TIMEOUT,
                              env=env)
    if proc.returncode != 0:
        raise processes.StackError(f"kubeadm join failed ({proc.returncode}); its log {log} ends:\n"
                                   f"{processes.tail(log)}\nthe node's kubelet's ({layout.logs / f'{UNIT}.log'}):\n"
                                   f"{processes.tail(layout.logs / f'{UNIT}.log')}")
    wait_ready(layout)
    cluster._log(f"{node.node_name} joined: kubectl get nodes -o wide")


def wait_ready(layout: Layout) -> None:
    name = node_name(layout)
    # kubeadm join returns once the kubelet has written kubelet.conf, which (as upstream's bootstrap does) points at
    # the client certificate before the certificate is issued: the Node may not exist yet, and `kubectl wait` for a
    # condition fails at once on a missing object.
    proc = cluster.kubectl(layout, "wait", "--for=create", "--for=condition=Ready", f"node/{name}",
                           f"--timeout={int(READY_TIMEOUT)}s", check=False, timeout=READY_TIMEOUT + 30)
    if proc.returncode != 0:
        raise processes.StackError(f"{name} did not become Ready: {proc.stderr.strip()}\n"
                                   f"{processes.tail(layout.logs / f'{UNIT}.log')}")
    proc = cluster.kubectl(layout, "-n", "kube-system", "rollout", "status", "daemonset/kube-proxy",
                           f"--timeout={int(READY_TIMEOUT)}s", check=False, timeout=READY_TIMEOUT + 30)
    if proc.returncode != 0:
        raise processes.StackError(f"kube-proxy did not roll out to {name}: {proc.stderr.strip()}")


def _kill_leftovers(node: Layout) -> None:
    """Shims and anything else still running from the node's directories (they keep its mount namespace alive)."""
    for needle in (str(node.run_dir), str(node.root)):
        for pid in processes.processes_matching(needle):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _remove_pods(layout: Layout) -> None:
    """Every container and pod sandbox on the node's containerd, stopped and removed (their network namespaces and
    mounts go with them)."""
    from devstack import private_containerd

    node = node_layout(layout)
    if processes.read_pid(layout.pids / f"{CONTAINERD}.pid") is None:
        return
    with grpc.insecure_channel(node.runtime_endpoint) as channel:
        with contextlib.suppress(grpc.RpcError):
            private_containerd.remove_pods(private_containerd.pb_grpc.RuntimeServiceStub(channel), set())


def make_cgroup_root(root: Path = Path("/sys/fs/cgroup")) -> None:
    """The node's cgroup root in every hierarchy: a kubelet refuses a `cgroupRoot` that does not exist (upstream
    "cgroup [...] has some missing paths"), as a machine's init system would have made it. A v1 cpuset cgroup starts
    with no CPUs and no memory nodes: it gets its parent's."""
    unified = (root / "cgroup.controllers").exists()
    for hierarchy in [root] if unified else [p for p in root.iterdir() if p.is_dir() and not p.is_symlink()]:
        top = hierarchy / CGROUP_ROOT.strip("/")
        top.mkdir(exist_ok=True)
        if (hierarchy / "cpuset.cpus").exists() and not unified:
            for name in ("cpuset.cpus", "cpuset.mems"):
                if not (top / name).read_text().strip():
                    (top / name).write_text((hierarchy / name).read_text())


def _remove_cgroups() -> None:
    root = Path("/sys/fs/cgroup")
    for hierarchy in (root, *(p for p in root.iterdir() if p.is_dir())):
        top = hierarchy / CGROUP_ROOT.strip("/")
        if not top.is_dir():
            continue
        for cg in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                cg.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()


def has_traces(layout: Layout) -> bool:
    """Anything of a second node on the machine: a process, the namespace, its directories."""
    node = node_layout(layout)
    return (any(processes.read_pid(layout.pids / f"{name}.pid") is not None
                for name in (HOLDER, REGISTRY, CONTAINERD, UNIT))
            or Path(f"/sys/class/net/{VETH_HOST}").exists() or node.root.exists() or node.run_dir.exists())


def leave(layout: Layout) -> None:
    """The node out of the cluster and off the machine (what a failed join left too)."""
    node = node_layout(layout)
    if cluster.ADMIN_CONF.exists():
        cluster.kubectl(layout, "delete", "node", node.node_name, "--ignore-not-found", "--wait=false", check=False)
    processes.stop(UNIT, pids=layout.pids, timeout=60)
    with contextlib.suppress(processes.StackError, subprocess.TimeoutExpired):
        _remove_pods(layout)
    for name in (CONTAINERD, REGISTRY, HOLDER):
        processes.stop(name, pids=layout.pids, timeout=30)
    _kill_leftovers(node)
    time.sleep(0.5)  # the holder's mount namespace goes with its last process
    remove_network()
    _remove_cgroups()
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for m in sorted((m for m in mounts if m.startswith((f"{node.root}/", f"{node.run_dir}/"))), key=len, reverse=True):
        _run(["umount", "-l", m], check=False)
    for d in (node.root, node.run_dir):
        subprocess.run(["rm", "-rf", "--one-file-system", str(d)], check=False, timeout=120)


__all__ = ["NODE_ADDR", "POD_SUBNET", "is_joined", "join", "leave", "node_layout", "node_name"]
