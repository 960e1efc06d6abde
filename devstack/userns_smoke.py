"""Prove a pod runs in a user namespace (``hostUsers: false``) on the runtime devstack/build-runtime.sh builds.

``python -m devstack.userns_smoke`` starts a PRIVATE containerd 2.x (its own config, root, state, socket, CNI bridge
and pod cgroup parent; nothing of the dev stack's) and a read-only registry over the stack's registry storage, then
does over CRI what kubelet does for such a pod: a sandbox with user namespace mode POD and one 65536-ID mapping (as
upstream's userns manager allocates them), a container with volumes carrying the same ID mappings (upstream
``applyPlatformSpecificContainerConfig``), and checks the mapping inside, the high host UID outside, and that the
volumes are idmapped. Everything it started or made is removed at the end, whatever happened: the private runtime's
start, stop and clean-up are devstack/private_containerd.py's, which the user namespace e2e tests share.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc

from cri_client.proto import api_pb2 as pb
from cri_client.proto import api_pb2_grpc as pb_grpc
from devstack import private_containerd

ID_RANGE = 65536  # upstream userns manager: userNsUnitLength, the IDs of one pod
POD_UID = "5f2c9a7e-0000-4000-8000-00000000beef"
CGROUP_PARENT = private_containerd.SMOKE_CGROUP_PARENT
TIMEOUT = private_containerd.TIMEOUT
IMAGE = "docker.io/library/busybox:1.36"


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


@contextlib.contextmanager
def smoke_volumes(d: Path) -> Iterator[None]:
    """The two volumes the smoke's container mounts idmapped: a 1 MiB tmpfs (as Secret volumes are) and a directory
    on the filesystem under `d` (as emptyDir is); removed with `d` by the private runtime's cleanup."""
    for sub in ("vol-ext4", "vol-tmpfs"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(d / "vol-tmpfs")], check=True)
    yield


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
    private_containerd.wait_for("the container's script", lambda: (d / "vol-ext4" / "new").exists(), timeout=10)
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
    bin_dir = args.bin_dir or private_containerd.build_runtime()
    with private_containerd.private_containerd(args.dir, bin_dir, args.registry_port) as runtime, \
            smoke_volumes(args.dir):
        failures = check(runtime.channel, args.dir, ID_RANGE * args.pod_index)
    for f in failures:
        print(f"FAIL: {f}")
    print("userns smoke: " + ("ok" if not failures else "failed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
