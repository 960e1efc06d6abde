"""A PRIVATE containerd 2.x (the runtime devstack/build-runtime.sh builds, which supports user namespaces), started
beside the dev stack and removed whole afterwards: shared by ``make userns-smoke`` (devstack/userns_smoke.py) and the
user namespace e2e tests (tests/e2e/test_user_namespaces.py).

It has its own config (version 3), root, state, socket, CNI bridge (`BRIDGE`, `SUBNET`) and a read-only registry
over the stack's registry storage, so it pulls the stack's images without the network; nothing of the dev stack's
containerd (socket, root, config) is touched. On exit, whatever happened: every pod on it is stopped and removed,
containerd and the registry stopped, the mounts under its directory unmounted, the pod cgroups of the pods it ran
removed (the smoke's own parent, and ``kubepods/.../pod<uid>`` for pods a kopflet agent ran there), the bridge
deleted, the directory removed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import grpc

from cri_client.proto import api_pb2 as pb
from cri_client.proto import api_pb2_grpc as pb_grpc
from devstack import configs
from devstack.layout import REPO, Layout

TIMEOUT = 120.0
BRIDGE = "usernstest0"  # not the stack's kopflet0
SUBNET = "10.123.45.0/24"  # not the stack's pod CIDR
SMOKE_CGROUP_PARENT = "/kopflet-userns-smoke"  # the smoke's pods' cgroup parent (kopflet's pods use kubepods)
CGROUP_ROOT = Path("/sys/fs/cgroup")


def containerd_config(d: Path, bin_dir: Path, sandbox_image: str) -> str:
    """Config version 3 (containerd 2.x): the CRI settings of devstack/configs.py's version 2 file, split over the
    ``cri.v1.images`` / ``cri.v1.runtime`` / ``grpc.v1.cri`` plugins; NRI off and the opt dir moved so nothing
    lands on the host's default paths."""
    return f"""\
version = 3
root = "{d}/root"
state = "{d}/state"

[grpc]
  address = "{d}/containerd.sock"

[ttrpc]
  address = "{d}/containerd.sock.ttrpc"

[plugins.'io.containerd.internal.v1.opt']
  path = "{d}/opt"

[plugins.'io.containerd.nri.v1.nri']
  disable = true

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "{sandbox_image}"

[plugins.'io.containerd.cri.v1.images'.registry]
  config_path = "{d}/certs.d"

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  enable_selinux = false
  max_container_log_line_size = 16384
  netns_mounts_under_state_dir = true

[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = "runc"

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  BinaryName = "{bin_dir}/runc"
  SystemdCgroup = false

[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = "{d}/net.d"
  max_conf_num = 1
"""


def cni_conflist(d: Path) -> str:
    """A bridge of its own without masquerading (no iptables rules to clean up)."""
    return json.dumps({
        "cniVersion": "1.0.0",
        "name": "kopflet-userns-smoke",
        "plugins": [{"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False,
                     "ipam": {"type": "host-local", "ranges": [[{"subnet": SUBNET}]],
                              "dataDir": str(d / "cni-data")}}],
    }, indent=2) + "\n"


def registry_config(storage: Path, addr: str) -> str:
    """Read-only, no upload purging: the stack's registry storage is only read."""
    return f"""\
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: {storage}
  maintenance:
    uploadpurging:
      enabled: false
    readonly:
      enabled: true
http:
  addr: {addr}
"""


def write_files(d: Path, bin_dir: Path, layout: Layout, registry_addr: str) -> None:
    for sub in ("root", "state", "opt", "tmp", "net.d", "logs"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    (d / "config.toml").write_text(containerd_config(d, bin_dir, layout.sandbox_image))
    (d / "net.d" / "10-userns-smoke.conflist").write_text(cni_conflist(d))
    (d / "registry.yml").write_text(registry_config(layout.registry_storage, registry_addr))
    for name in ("docker.io", "registry.k8s.io", registry_addr):
        (d / "certs.d" / name).mkdir(parents=True, exist_ok=True)
        (d / "certs.d" / name / "hosts.toml").write_text(configs.registry_hosts(registry_addr))


def build_runtime() -> Path:
    """devstack/build-runtime.sh (``make runtime``): containerd 2.x and runc, built once and cached; their directory."""
    return Path(subprocess.run(["bash", str(REPO / "devstack" / "build-runtime.sh")], check=True,
                               capture_output=True, text=True).stdout.strip())


def free_port() -> int:
    """A TCP port nothing listens on now (for the private registry)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not come up in {timeout:.0f}s")


def start(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def remove_pods(rt: pb_grpc.RuntimeServiceStub, uids: set[str]) -> None:
    """Stop and remove every container and sandbox on the runtime; `uids` gets the pod UIDs they belonged to
    first, so their cgroups go even if a removal fails."""
    sandboxes = rt.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=TIMEOUT).items
    uids.update(s.metadata.uid for s in sandboxes)
    for c in rt.ListContainers(pb.ListContainersRequest(), timeout=TIMEOUT).containers:
        rt.StopContainer(pb.StopContainerRequest(container_id=c.id, timeout=0), timeout=TIMEOUT)
        rt.RemoveContainer(pb.RemoveContainerRequest(container_id=c.id), timeout=TIMEOUT)
    for s in sandboxes:
        rt.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=s.id), timeout=TIMEOUT)
        rt.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=s.id), timeout=TIMEOUT)


def _remove_cgroup_tree(top: Path) -> None:
    for cg in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            cg.rmdir()
    with contextlib.suppress(OSError):
        top.rmdir()


def cleanup_host(d: Path, pod_uids: Iterable[str] = ()) -> None:
    """What the runtime leaves on the host after its pods are gone: mounts under `d` (kopflet's volumes too, when
    its root dir is under `d`), the pod cgroups in every hierarchy (cgroupfs driver: the smoke's parent, and
    kopflet's ``kubepods/<qos>/pod<uid>`` of `pod_uids`), the bridge; then `d` itself."""
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for m in sorted((m for m in mounts if m.startswith(f"{d}/")), key=len, reverse=True):
        subprocess.run(["umount", "-l", m], check=False)
    hierarchies = [CGROUP_ROOT, *(p for p in CGROUP_ROOT.iterdir() if p.is_dir())]
    for hierarchy in hierarchies:
        top = hierarchy / SMOKE_CGROUP_PARENT.lstrip("/")
        if top.is_dir():
            _remove_cgroup_tree(top)
        for uid in pod_uids:
            if uid:  # kubepods/pod<uid> (Guaranteed) or kubepods/{burstable,besteffort}/pod<uid>
                for pod in (*hierarchy.glob(f"kubepods/pod{uid}"), *hierarchy.glob(f"kubepods/*/pod{uid}")):
                    _remove_cgroup_tree(pod)
    subprocess.run(["ip", "link", "del", BRIDGE], check=False, stderr=subprocess.DEVNULL)
    shutil.rmtree(d, ignore_errors=True)


@dataclasses.dataclass(frozen=True)
class PrivateRuntime:
    """A running private containerd: its directory, binaries and a gRPC channel to its CRI socket."""

    dir: Path
    bin_dir: Path
    channel: grpc.Channel

    @property
    def socket(self) -> Path:
        return self.dir / "containerd.sock"

    @property
    def endpoint(self) -> str:
        """For ``--container-runtime-endpoint``."""
        return f"unix://{self.socket}"

    @property
    def runtime(self) -> pb_grpc.RuntimeServiceStub:
        return pb_grpc.RuntimeServiceStub(self.channel)

    @property
    def images(self) -> pb_grpc.ImageServiceStub:
        return pb_grpc.ImageServiceStub(self.channel)


@contextlib.contextmanager
def private_containerd(d: Path, bin_dir: Path, registry_port: int | None = None) -> Iterator[PrivateRuntime]:
    """Start the private containerd in `d` (removed first if a run left it) with a read-only registry on
    `registry_port` (a free one if None); everything is stopped and removed on exit, whatever happened."""
    layout = Layout.from_env()
    registry_addr = f"127.0.0.1:{registry_port or free_port()}"
    if d.exists():
        cleanup_host(d)
    registry = containerd = None
    channel = None
    pod_uids: set[str] = set()
    try:
        write_files(d, bin_dir, layout, registry_addr)
        registry = start(["docker-registry", "serve", str(d / "registry.yml")], d / "logs" / "registry.log")
        # TMPDIR: the overlay snapshotter makes its idmapped lower-layer mounts under it (ovl-idmapped*).
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "TMPDIR": str(d / "tmp")}
        containerd = start([str(bin_dir / "containerd"), "--config", str(d / "config.toml")],
                           d / "logs" / "containerd.log", env)
        wait_for("containerd", (d / "containerd.sock").exists)
        channel = grpc.insecure_channel(f"unix://{d}/containerd.sock")
        yield PrivateRuntime(d, bin_dir, channel)
    finally:
        if channel is not None:
            with contextlib.suppress(grpc.RpcError):
                remove_pods(pb_grpc.RuntimeServiceStub(channel), pod_uids)
            channel.close()
        stop(containerd)
        stop(registry)
        cleanup_host(d, pod_uids)


__all__ = ["BRIDGE", "SUBNET", "PrivateRuntime", "build_runtime", "cleanup_host", "free_port",
           "private_containerd", "wait_for"]
