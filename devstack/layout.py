"""Where the local stack keeps its files, ports and names: one place, so scripts and tests agree.

Per-clone state (certificates, etcd data, logs, kubeconfigs) lives in ``<repo>/.devstack``;
build caches that are worth keeping across clones (Go builds, images, registry blobs) live in
``$KOPFLET_CACHE`` (default ``/var/cache/kopflet``). containerd's state and socket sit under
``/run/kopflet`` to keep the unix socket path short.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def read_versions(path: Path | None = None) -> dict[str, str]:
    """Parse ``versions.env`` (KEY=value lines) without a shell."""
    path = path or Path(__file__).with_name("versions.env")
    versions: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            versions[key.strip()] = value.strip()
    return versions


def default_node_name() -> str:
    """The machine's hostname made a valid node name, as the upstream kubelet defaults it."""
    name = re.sub(r"[^a-z0-9.-]", "-", socket.gethostname().lower()).strip("-.")
    return name or "kopflet-node"


def host_ip() -> str:
    """The address the apiserver advertises: the primary non-loopback IPv4 of this machine.

    The apiserver refuses a loopback advertise address for the ``kubernetes`` Service endpoints.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: UDP connect only picks a route
            return str(s.getsockname()[0])
        except OSError:
            return "127.0.0.1"


@dataclasses.dataclass(frozen=True)
class Layout:
    """Every path, port and name of one local stack."""

    root: Path  # <repo>/.devstack
    cache: Path
    node_name: str
    # Not 5000: upstream's image-pull specs run agnhost's fake registry as a hostNetwork pod on hostPort 5000
    # and pull localhost:5000/pause:testing (test/e2e/framework/registry). images/build-agent-image.sh has the
    # same default.
    registry_addr: str = "127.0.0.1:5050"
    # A second registry that wants a login: what imagePullSecrets are tested against (dev/test credentials).
    private_registry_addr: str = "127.0.0.1:5001"
    private_registry_user: str = "kopflet"
    private_registry_password: str = "kopflet-registry-secret"
    apiserver_port: int = 6443
    etcd_client_port: int = 2379
    etcd_peer_port: int = 2380
    run_dir: Path = Path("/run/kopflet")
    service_cidr: str = "10.96.0.0/12"
    service_ip: str = "10.96.0.1"  # the first address of service_cidr: the `kubernetes` Service
    pod_cidr: str = "10.88.0.0/16"
    cluster_domain: str = "cluster.local"
    sandbox_image: str = "registry.k8s.io/pause:3.10.1"

    @classmethod
    def from_env(cls) -> Layout:
        return cls(
            root=Path(os.environ.get("KOPFLET_DEVSTACK_DIR", REPO / ".devstack")),
            cache=Path(os.environ.get("KOPFLET_CACHE", "/var/cache/kopflet")),
            node_name=os.environ.get("KOPFLET_NODE_NAME") or default_node_name(),
        )

    @property
    def versions(self) -> dict[str, str]:
        return read_versions()

    @property
    def bin_dir(self) -> Path:
        v = self.versions
        return self.cache / "bin" / f"{v['KUBERNETES_VERSION']}-etcd-{v['ETCD_VERSION']}"

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def kubeconfigs(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.kubeconfigs / "admin.kubeconfig"

    @property
    def node_kubeconfig(self) -> Path:
        return self.kubeconfigs / f"node-{self.node_name}.kubeconfig"

    @property
    def bootstrap_kubeconfig(self) -> Path:
        """The node's bootstrap kubeconfig (a bootstrap token), as kubeadm's ``bootstrap-kubelet.conf``: what an agent
        started with ``--bootstrap-kubeconfig`` gets its own client certificate with."""
        return self.kubeconfigs / "bootstrap-kubelet.kubeconfig"

    @property
    def bootstrap_token_file(self) -> Path:
        """The stack's bootstrap token ``<id>.<secret>``, made once (0600)."""
        return self.root / "bootstrap-token"

    @property
    def kubelet_config(self) -> Path:
        """The agent's KubeletConfiguration on this stack: serving cert, client CA, webhook auth."""
        return self.root / "kubelet-config.yaml"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def audit_policy(self) -> Path:
        return self.root / "audit-policy.yaml"

    @property
    def audit_log(self) -> Path:
        """The apiserver's audit log of node requests (JSON lines): the benchmarks count the agent's API cost."""
        return self.logs / "audit.log"

    @property
    def pids(self) -> Path:
        return self.root / "run"

    @property
    def env_file(self) -> Path:
        return self.root / "env"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def containerd_dir(self) -> Path:
        """Generated containerd config, registry hosts and CNI config (per clone)."""
        return self.root / "containerd"

    @property
    def containerd_root(self) -> Path:
        return self.root / "containerd-root"

    @property
    def containerd_state(self) -> Path:
        return self.run_dir / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.containerd_state / "containerd.sock"

    @property
    def runtime_endpoint(self) -> str:
        return f"unix://{self.containerd_socket}"

    @property
    def cni_conf_dir(self) -> Path:
        return self.containerd_dir / "net.d"

    @property
    def cni_data_dir(self) -> Path:
        """host-local IPAM allocations: on tmpfs, like the network namespaces they belong to."""
        return self.run_dir / "cni" / "networks"

    @property
    def private_registry_storage(self) -> Path:
        return self.root / "registry-private"

    @property
    def private_registry_htpasswd(self) -> Path:
        return self.root / "registry-private.htpasswd"

    @property
    def registry_storage(self) -> Path:
        return self.cache / "registry"

    @property
    def apiserver_url(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"
