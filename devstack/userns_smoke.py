"""Prove a pod runs in a user namespace (``hostUsers: false``) on the runtime devstack/build-runtime.sh builds.

``python -m devstack.userns_smoke`` starts a PRIVATE containerd 2.x (its own config, root, state, socket, CNI bridge
and pod cgroup parent; nothing of the dev stack's) and a read-only registry over the stack's registry storage, then
does over CRI what kubelet does for such a pod: a sandbox with user namespace mode POD and one 65536-ID mapping (as
upstream's userns manager allocates them), a container with volumes carrying the same ID mappings (upstream
``applyPlatformSpecificContainerConfig``), and checks the mapping inside, the high host UID outside, and that the
volumes are idmapped. Everything it started or made is removed at the end, whatever happened.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc

from cri_client.proto import api_pb2 as pb
from cri_client.proto import api_pb2_grpc as pb_grpc
from devstack import configs
from devstack.layout import REPO, Layout

TIMEOUT = 120.0
ID_RANGE = 65536  # upstream userns manager: userNsUnitLength, the IDs of one pod
POD_UID = "5f2c9a7e-0000-4000-8000-00000000beef"
CGROUP_PARENT = "/kopflet-userns-smoke"
BRIDGE = "usernstest0"  # not the stack's kopflet0
SUBNET = "10.123.45.0/24"  # not the stack's pod CIDR
IMAGE = "docker.io/library/busybox:1.36"


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
    for sub in ("root", "state", "opt", "tmp", "net.d", "logs", "vol-ext4", "vol-tmpfs"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    (d / "config.toml").write_text(containerd_config(d, bin_dir, layout.sandbox_image))
    (d / "net.d" / "10-userns-smoke.conflist").write_text(cni_conflist(d))
    (d / "registry.yml").write_text(registry_config(layout.registry_storage, registry_addr))
    for name in ("docker.io", "registry.k8s.io", registry_addr):
        (d / "certs.d" / name).mkdir(parents=True, exist_ok=True)
        (d / "certs.d" / name / "hosts.toml").write_text(configs.registry_hosts(registry_addr))


def mapping(host_id: int) -> list[pb.IDMapping]:
    return [pb.IDMapping(host_id=host_id, container_id=0, length=ID_RANGE)]


def sandbox_config(d: Path, host_id: int) -> pb.PodSandboxConfig:
    ids = mapping(host_id)
    return pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name="userns-smoke", namespace="default", uid=POD_UID),
        hostname="userns-smoke",
        log_directory=str(d / "logs" / "pod"),
        linux=pb.LinuxPodSandboxConfig(
            cgroup_parent=f"{CGROUP_PARENT}/pod{POD_UID}",
            security_context=pb.LinuxSandboxSecurityContext(namespace_options=pb.NamespaceOption(
                network=pb.POD, pid=pb.CONTAINER, ipc=pb.POD,
                userns_options=pb.UserNamespace(mode=pb.POD, uids=ids, gids=ids))),
        ),
    )


def container_config(d: Path, sandbox: pb.PodSandboxConfig, host_id: int) -> pb.ContainerConfig:
    ids = mapping(host_id)
    script = ("cat /proc/self/uid_map; ls -ln /vol-tmpfs /vol-ext4; cat /vol-tmpfs/token; echo x > /vol-ext4/new; "
              "touch /rootfs-file; exec sleep 3600")
    return pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name="main"),
        image=pb.ImageSpec(image=IMAGE),
        command=["sh", "-c", script],
        log_path="main/0.log",
        mounts=[pb.Mount(container_path=f"/{v}", host_path=str(d / v), uidMappings=ids, gidMappings=ids)
                for v in ("vol-tmpfs", "vol-ext4")],
        linux=pb.LinuxContainerConfig(security_context=pb.LinuxContainerSecurityContext(
            namespace_options=sandbox.linux.security_context.namespace_options)),
    )


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


def remove_pods(rt: pb_grpc.RuntimeServiceStub) -> None:
    for c in rt.ListContainers(pb.ListContainersRequest(), timeout=TIMEOUT).containers:
        rt.StopContainer(pb.StopContainerRequest(container_id=c.id, timeout=0), timeout=TIMEOUT)
        rt.RemoveContainer(pb.RemoveContainerRequest(container_id=c.id), timeout=TIMEOUT)
    for s in rt.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=TIMEOUT).items:
        rt.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=s.id), timeout=TIMEOUT)
        rt.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=s.id), timeout=TIMEOUT)


def cleanup_host(d: Path) -> None:
    """What the runtime leaves on the host after its pods are gone: mounts under `d`, the pod cgroups in every
    hierarchy (cgroupfs driver), the bridge; then `d` itself."""
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for m in sorted((m for m in mounts if m.startswith(f"{d}/")), key=len, reverse=True):
        subprocess.run(["umount", "-l", m], check=False)
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        top = hierarchy / CGROUP_PARENT.lstrip("/")
        if top.is_dir():
            for cg in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    cg.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()
    subprocess.run(["ip", "link", "del", BRIDGE], check=False, stderr=subprocess.DEVNULL)
    shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def private_runtime(d: Path, bin_dir: Path, registry_port: int) -> Iterator[grpc.Channel]:
    layout = Layout.from_env()
    registry_addr = f"127.0.0.1:{registry_port}"
    if d.exists():
        cleanup_host(d)
    write_files(d, bin_dir, layout, registry_addr)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(d / "vol-tmpfs")], check=True)
    registry = containerd = None
    channel = None
    try:
        registry = start(["docker-registry", "serve", str(d / "registry.yml")], d / "logs" / "registry.log")
        # TMPDIR: the overlay snapshotter makes its idmapped lower-layer mounts under it (ovl-idmapped*).
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "TMPDIR": str(d / "tmp")}
        containerd = start([str(bin_dir / "containerd"), "--config", str(d / "config.toml")],
                           d / "logs" / "containerd.log", env)
        wait_for("containerd", (d / "containerd.sock").exists)
        channel = grpc.insecure_channel(f"unix://{d}/containerd.sock")
        yield channel
    finally:
        if channel is not None:
            with contextlib.suppress(grpc.RpcError):
                remove_pods(pb_grpc.RuntimeServiceStub(channel))
            channel.close()
        stop(containerd)
        stop(registry)
        cleanup_host(d)


def check(channel: grpc.Channel, d: Path, host_id: int) -> list[str]:
    """The checks; returns the failures (empty: the pod ran in its user namespace)."""
    rt, im = pb_grpc.RuntimeServiceStub(channel), pb_grpc.ImageServiceStub(channel)
    failures: list[str] = []
    v = rt.Version(pb.VersionRequest(version="v1"), timeout=TIMEOUT)
    print(f"runtime: {v.runtime_name} {v.runtime_version} (CRI {v.runtime_api_version})")
    handlers = {h.name: h.features.user_namespaces for h in rt.Status(pb.StatusRequest(), timeout=TIMEOUT)
                .runtime_handlers}
    print(f"RuntimeHandlerFeatures.user_namespaces: {handlers}")
    if not handlers.get(""):
        failures.append("the default runtime handler does not report user_namespaces")
    (d / "vol-tmpfs" / "token").write_text("secret\n")
    (d / "vol-tmpfs" / "token").chmod(0o600)
    im.PullImage(pb.PullImageRequest(image=pb.ImageSpec(image=IMAGE)), timeout=TIMEOUT)
    sandbox = sandbox_config(d, host_id)
    sid = rt.RunPodSandbox(pb.RunPodSandboxRequest(config=sandbox), timeout=TIMEOUT).pod_sandbox_id
    cid = rt.CreateContainer(pb.CreateContainerRequest(
        pod_sandbox_id=sid, config=container_config(d, sandbox, host_id), sandbox_config=sandbox),
        timeout=TIMEOUT).container_id
    rt.StartContainer(pb.StartContainerRequest(container_id=cid), timeout=TIMEOUT)
    r = rt.ExecSync(pb.ExecSyncRequest(container_id=cid, cmd=["cat", "/proc/self/uid_map"], timeout=10),
                    timeout=TIMEOUT)
    uid_map = r.stdout.decode().split()
    print(f"inside: /proc/self/uid_map = {' '.join(uid_map)}")
    if uid_map != ["0", str(host_id), str(ID_RANGE)]:
        failures.append(f"uid_map is {uid_map}, want 0 {host_id} {ID_RANGE}")
    status = rt.ContainerStatus(pb.ContainerStatusRequest(container_id=cid, verbose=True), timeout=TIMEOUT)
    pid = json.loads(status.info["info"])["pid"]
    host_uid = Path(f"/proc/{pid}").stat().st_uid
    print(f"host: container pid {pid} runs as uid {host_uid}")
    if host_uid != host_id:
        failures.append(f"the container's process runs as host uid {host_uid}, want {host_id}")
    wait_for("the container's script", lambda: (d / "vol-ext4" / "new").exists(), timeout=10)
    owner = (d / "vol-ext4" / "new").stat().st_uid
    print(f"host: a file the container's root wrote to an idmapped volume is owned by uid {owner}")
    if owner != 0:
        failures.append(f"the idmapped volume's new file is owned by host uid {owner}, want 0")
    log = next((d / "logs" / "pod").rglob("0.log")).read_text()
    if "secret" not in log:
        failures.append("the container could not read its root-owned 0600 file on the idmapped tmpfs volume")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin-dir", type=Path, help="containerd 2.x and runc (default: build-runtime.sh's output)")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/userns-ctd"))
    parser.add_argument("--registry-port", type=int, default=5098)
    parser.add_argument("--pod-index", type=int, default=3, help="the pod's host IDs start at 65536 * this")
    args = parser.parse_args()
    bin_dir = args.bin_dir or Path(subprocess.run(
        ["bash", str(REPO / "devstack" / "build-runtime.sh")], check=True, capture_output=True, text=True,
    ).stdout.strip())
    with private_runtime(args.dir, bin_dir, args.registry_port) as channel:
        failures = check(channel, args.dir, ID_RANGE * args.pod_index)
    for f in failures:
        print(f"FAIL: {f}")
    print("userns smoke: " + ("ok" if not failures else "failed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
