"""Setting up a pod's volumes on the node (upstream volumemanager + the volume plugins' SetUp).

What each volume holds is decided by the pure ``kopflet.volumes.plugins``; this module fetches what it needs
(ConfigMaps and Secrets one at a time, ServiceAccount tokens through TokenRequest bound to the pod, the
cluster's ClusterTrustBundles from the ClusterTrustBundle manager's list+watch cache when a projected volume has a
``clusterTrustBundle`` source, podCertificate sources' keys and chains from the pod certificate manager),
mounts tmpfs where the plan says, checks hostPath types, and writes file volumes atomically the way
upstream's AtomicWriter does (a timestamped directory, the ``..data`` symlink swapped in one rename,
and top-level symlinks into it), so a reader never sees half an update. Called on every sync, so
ConfigMap/Secret changes, ClusterTrustBundle changes (which also wake the pods that read them) and token rotation
(at 80% of the token's lifetime) reach running pods.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import shutil
import stat
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kopflet import paths
from kopflet.api import spec, times
from kopflet.client.kubeapi import KubeApiError, KubeClient, q
from kopflet.client.standalone import is_standalone
from kopflet.config.settings import AgentConfig
from kopflet.podcertificate.manager import PodCertificateManager
from kopflet.volumes import plugins, pvc
from kopflet.volumes import trust_bundles as ctb
from kopflet.volumes.plugins import VolumeError, VolumePlan
from kopflet.volumes.trust_bundle_manager import ClusterTrustBundleManager

logger = logging.getLogger(__name__)

DATA_DIR = "..data"
TOKEN_REFRESH_FRACTION = 0.8  # upstream: rotate when 80% of the lifetime has passed


class VolumeManager:
    def __init__(self, cfg: AgentConfig, api: KubeClient, node_allocatable: Callable[[], Mapping[str, str]] = dict,
                 *, layout: paths.Layout | None = None, pod_certificates: PodCertificateManager | None = None,
                 trust_bundles: ClusterTrustBundleManager | None = None) -> None:
        """`pod_certificates`: None, podCertificate sources fail as upstream's NoOpManager makes them fail;
        `trust_bundles`: None, clusterTrustBundle sources fail as upstream's NoopManager makes them fail."""
        self.cfg, self.api, self.node_allocatable = cfg, api, node_allocatable
        self.layout = layout if layout is not None else cfg.layout
        self.pod_certificates, self.trust_bundles = pod_certificates, trust_bundles
        self._tokens: dict[tuple[str, str, int], tuple[str, float]] = {}  # (uid, audience, exp) -> (token, refresh_at)

    async def setup(self, pod: spec.Pod) -> dict[str, VolumePlan]:
        """Fetch, plan and materialize every volume of the pod; VolumeError says what is missing (in standalone mode,
        the first volume that needs the apiserver, as upstream's plugins refuse it without a client)."""
        refusal = plugins.standalone_refusal(pod) if is_standalone(self.api) else ""
        if refusal:
            raise VolumeError(refusal)
        config_map_names, secret_names = plugins.referenced_objects(pod)
        config_maps = {n: await self.api.config_map_data(pod.namespace, n) for n in sorted(config_map_names)}
        secrets = {n: await self.api.secret_data(pod.namespace, n) for n in sorted(secret_names)}
        tokens = {}
        for token in plugins.token_requests(pod):
            tokens[(token.audience, token.expiration_seconds)] = await self._token(pod, token)
        trust_bundles = await self._trust_bundles(pod) if ctb.wanted(pod) else None
        certificates = await self.pod_certificates.credentials(pod) if self.pod_certificates is not None else {}
        plans = plugins.plan_volumes(pod, layout=self.layout, config_maps=config_maps, secrets=secrets,
                                     tokens=tokens, node_name=self.cfg.node_name,
                                     node_allocatable=self.node_allocatable(), trust_bundles=trust_bundles,
                                     pod_certificates=certificates)
        fs_group = pod.spec.security_context.get("fsGroup")
        await asyncio.to_thread(materialize, plans, fs_group if isinstance(fs_group, int) else None)
        return plans

    async def _token(self, pod: spec.Pod, token: plugins.TokenSpec) -> str:
        """A token bound to the pod (NodeRestriction lets a node request tokens only for its own pods)."""
        key = (pod.uid, token.audience, token.expiration_seconds)
        cached = self._tokens.get(key)
        if cached is not None and time.time() < cached[1]:
            return cached[0]
        account = pod.spec.service_account_name or "default"
        body: dict[str, Any] = {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"audiences": [token.audience] if token.audience else [],
                     "expirationSeconds": token.expiration_seconds,
                     "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid}}}
        try:
            answer = await self.api.request(
                "POST", f"/api/v1/namespaces/{q(pod.namespace)}/serviceaccounts/{q(account)}/token", body=body)
        except KubeApiError as exc:
            raise VolumeError(f'MountVolume.SetUp failed for volume "{token.volume}" : failed to fetch token: '
                              f"{exc.message}") from exc
        status = answer.get("status", {})
        expires = times.parse_timestamp(status.get("expirationTimestamp"))
        now = time.time()
        lifetime = (expires.timestamp() - now) if expires is not None else token.expiration_seconds
        self._tokens[key] = (status.get("token", ""), now + lifetime * TOKEN_REFRESH_FRACTION)
        return str(status.get("token", ""))

    async def _trust_bundles(self, pod: spec.Pod) -> ctb.Bundles:
        """The cluster's ClusterTrustBundles from the manager's cache (upstream's informer lister), or the error
        every clusterTrustBundle source of the pod then gets."""
        if self.trust_bundles is None:
            return ctb.Bundles(error=ctb.NOT_SUPPORTED)
        return await self.trust_bundles.for_pod(pod)

    def forget(self, uid: str) -> None:
        for key in [k for k in self._tokens if k[0] == uid]:
            del self._tokens[key]
        if self.pod_certificates is not None:
            self.pod_certificates.forget(uid)
        if self.trust_bundles is not None:
            self.trust_bundles.forget(uid)

    async def cleanup(self, uid: str) -> None:
        """Unmount the pod's tmpfs volumes; the caller then removes the pod's directory."""
        self.forget(uid)
        await asyncio.to_thread(unmount_all, Path(self.layout.volumes_dir(uid)))


# ------------------------------------------------------------------------------------ blocking helpers


def is_mounted(path: Path) -> bool:
    target = str(path.resolve())
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == target for line in f if len(line.split()) > 1)


def mount_tmpfs(path: Path, size_limit: int | None) -> None:
    """Upstream setupTmpfs passes no mode, so the mount's root is tmpfs's default 1777 (drwxrwxrwt): the sticky
    bit shows in the container, and a subPath created in the volume inherits it."""
    argv = ["mount", "-t", "tmpfs", *(["-o", f"size={size_limit}"] if size_limit else []), "tmpfs", str(path)]
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


def unmount_all(volumes_dir: Path) -> None:
    if not volumes_dir.is_dir():
        return
    prefix = str(volumes_dir.resolve()) + "/"
    with open("/proc/self/mounts") as f:
        targets = [line.split()[1] for line in f if len(line.split()) > 1 and line.split()[1].startswith(prefix)]
    for target in sorted(targets, key=len, reverse=True):
        subprocess.run(["umount", target], capture_output=True, timeout=30)


def materialize(plans: Mapping[str, VolumePlan], fs_group: int | None = None) -> None:
    """Make every planned volume real on the node; with an fsGroup, hand it the volume's files (blocking: run in
    a thread)."""
    for plan in plans.values():
        path = Path(plan.host_path)
        try:
            if plan.kind == plugins.KIND_HOST_PATH:
                check_host_path(plan)
                continue
            if plan.kind == plugins.KIND_IMAGE:
                continue  # upstream's image plugin: SetUp is a no-op, the runtime mounts the pulled image
            if plan.kind in pvc.POD_VOLUME_KINDS:
                continue  # set up by the volume manager's loop (stage, publish) before it was planned
            created = not path.exists()
            # Upstream emptyDir setupDir, which configMap, secret, downwardAPI and projected volumes wrap too: the
            # volume's directory is 0777 whatever the umask, so any uid the containers run as can reach it.
            path.mkdir(mode=0o777, parents=True, exist_ok=True)
            if stat.S_IMODE(path.stat().st_mode) & 0o777 != 0o777:
                os.chmod(path, stat.S_IMODE(path.stat().st_mode) | 0o777)
            if plan.tmpfs and not is_mounted(path):
                mount_tmpfs(path, plan.size_limit)
                created = True
            changed = write_atomically(path, plan.files, fs_group) if plan.files is not None else created
            if fs_group is not None and changed:
                set_volume_ownership(path, fs_group, read_only=plan.files is not None)
        except (OSError, subprocess.SubprocessError) as exc:
            raise VolumeError(f'MountVolume.SetUp failed for volume "{plan.name}" : {exc}') from exc


def check_host_path(plan: VolumePlan) -> None:
    """Upstream hostPath type checks, creating what the *OrCreate types ask for."""
    path = Path(plan.host_path)
    kind = plan.host_path_type
    fail = f'MountVolume.SetUp failed for volume "{plan.name}" : hostPath type check failed: {path} '
    if kind == "DirectoryOrCreate":
        path.mkdir(mode=0o755, parents=True, exist_ok=True)
    elif kind == "FileOrCreate" and not path.exists():
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        path.touch(mode=0o644)
    checks = {
        "Directory": (stat.S_ISDIR, "is not a directory"), "DirectoryOrCreate": (stat.S_ISDIR, "is not a directory"),
        "File": (stat.S_ISREG, "is not a file"), "FileOrCreate": (stat.S_ISREG, "is not a file"),
        "Socket": (stat.S_ISSOCK, "is not a socket file"), "CharDevice": (stat.S_ISCHR, "is not a character device"),
        "BlockDevice": (stat.S_ISBLK, "is not a block device"),
    }
    if kind in checks:
        test, what = checks[kind]
        try:
            mode = path.stat().st_mode
        except FileNotFoundError:
            raise VolumeError(fail + "does not exist") from None
        if not test(mode):
            raise VolumeError(fail + what)


def set_volume_ownership(root: Path, fs_group: int, read_only: bool) -> None:
    """Upstream SetVolumeOwnership: every file and directory gets group `fs_group`, group read (and write unless
    the volume is read-only: configMap, secret, downwardAPI, projected), directories setgid so new files inherit
    the group; symlinks are re-grouped but not chmod'ed."""
    def own(path: str) -> None:
        info = os.lstat(path)
        os.lchown(path, -1, fs_group)
        if not stat.S_ISLNK(info.st_mode):
            os.chmod(path, plugins.ownership_mode(info.st_mode, is_dir=stat.S_ISDIR(info.st_mode),
                                                  read_only=read_only))

    own(str(root))
    for folder, dirs, names in os.walk(root):
        for name in (*dirs, *names):
            own(os.path.join(folder, name))


def write_atomically(target: Path, files: tuple[plugins.FileEntry, ...], fs_group: int | None = None) -> bool:
    """Upstream AtomicWriter: write a fresh timestamped dir, swap ``..data`` to it with one rename, link
    the top-level names through ``..data``, then drop the old dir and names no longer in the payload.
    A file with an owner (FsUser) is chowned to it, and so is the top-level link made for it.
    False when the payload was already there (nothing written), the modes as `fs_group`'s ownership left them."""
    current = target / DATA_DIR
    if current.is_symlink() and _same_payload(current, files, fs_group):
        return False
    stamp = datetime.datetime.now(datetime.UTC).strftime("..%Y_%m_%d_%H_%M_%S.%f")
    new_dir = target / stamp
    new_dir.mkdir(mode=0o755)
    for entry in files:
        file = new_dir / entry.path
        file.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        file.write_bytes(entry.data)
        os.chmod(file, entry.mode)
        if entry.owner is not None:
            os.lchown(file, entry.owner, -1)
    tmp_link = target / "..data_tmp"
    if tmp_link.is_symlink():
        tmp_link.unlink()
    os.symlink(stamp, tmp_link)
    os.rename(tmp_link, current)
    tops: dict[str, int | None] = {}
    for entry in files:
        tops.setdefault(entry.path.split("/", 1)[0], entry.owner)
    for top, owner in tops.items():
        link = target / top
        if not link.is_symlink():
            os.symlink(f"{DATA_DIR}/{top}", link)
            if owner is not None:
                os.lchown(link, owner, -1)
    for child in target.iterdir():
        if child.name.startswith(".."):
            if child.name != stamp and child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)  # the previous payload, or a crashed write's
        elif child.is_symlink() and child.name not in tops:
            child.unlink()
    return True


def _same_payload(current: Path, files: tuple[plugins.FileEntry, ...], fs_group: int | None) -> bool:
    """Whether ``..data`` holds these files already; under an fsGroup a file's mode is the one
    set_volume_ownership gave it (a 0600 file is 0640), so an unchanged payload is not written again each sync."""
    try:
        existing = {str(p.relative_to(current.resolve())) for p in current.resolve().rglob("*") if p.is_file()}
        if existing != {e.path for e in files}:
            return False
        for entry in files:
            file = current / entry.path
            info = file.stat()
            mode = entry.mode if fs_group is None else plugins.ownership_mode(entry.mode, is_dir=False,
                                                                               read_only=True)
            if file.read_bytes() != entry.data or stat.S_IMODE(info.st_mode) != mode:
                return False
            if entry.owner is not None and info.st_uid != entry.owner:
                return False
    except OSError:
        return False
    return True
