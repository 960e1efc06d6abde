"""Setting up a pod's volumes on the node (upstream volumemanager + the volume plugins' SetUp).

What each volume holds is decided by the pure ``kopflet.volumes.plugins``; this module fetches what it needs
(ConfigMaps and Secrets from `kopflet.util.manager`, the node's watch of each one its pods reference, or a GET
with the Get strategy; ServiceAccount tokens through TokenRequest bound to the pod, the
cluster's ClusterTrustBundles from the ClusterTrustBundle manager's list+watch cache when a projected volume has a
``clusterTrustBundle`` source, podCertificate sources' keys and chains from the pod certificate manager),
mounts tmpfs where the plan says, checks hostPath types, mounts the pod's persistent volumes (see below), and
writes file volumes atomically the way
upstream's AtomicWriter does (a timestamped directory, the ``..data`` symlink swapped in one rename,
and top-level symlinks into it), so a reader never sees half an update. Called on every sync, so
ConfigMap/Secret changes, ClusterTrustBundle changes (which also wake the pods that read them) and token rotation
(at 80% of the token's lifetime) reach running pods.

PersistentVolumeClaim and generic ephemeral volumes go as upstream's volume manager takes them: the PVCs (GET in
the pod's namespace) and the PVs they are bound to (GET, cluster-scoped) resolved by `kopflet.volumes.pvc`
(upstream's desired-state populator, its errors word for word), each volume's next step from
`kopflet.volumes.desired_state` (upstream's reconciler: node affinity, mount options, ReadWriteOncePod), then the
mount: a hostPath PV is its own path, type-checked as the hostPath plugin does; a local PV's directory is bind-mounted
into the pod's volume directory (upstream's local plugin SetUpAt, fsGroup ownership included). The actual state (what
is mounted for which pod) is kept in memory; after a restart a local PV's bind mount is found again (SetUpAt looks
whether its directory is a mount point). CSI volumes (PVs and inline ones) and block-mode volumes are refused: their
staging, publishing and mapping are not wired.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import datetime
import logging
import os
import re
import shutil
import stat
import subprocess
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from kopflet import paths
from kopflet.api import spec, times
from kopflet.api.events import WARNING
from kopflet.client.events import EventRecorder
from kopflet.client.kubeapi import KubeApiError, KubeClient, config_map_bytes, q, secret_bytes
from kopflet.client.standalone import is_standalone
from kopflet.config.settings import AgentConfig
from kopflet.libc import libc
from kopflet.podcertificate import states as pc_states
from kopflet.podcertificate.manager import PodCertificateManager
from kopflet.util.manager import CacheSyncError, DirectObjects, NotRegisteredError, Objects
from kopflet.volumes import csi_rules, desired_state, plugins, pvc
from kopflet.volumes import trust_bundles as ctb
from kopflet.volumes.plugins import VolumeError, VolumePlan
from kopflet.volumes.trust_bundle_manager import ClusterTrustBundleManager

logger = logging.getLogger(__name__)

DATA_DIR = "..data"
TOKEN_REFRESH_FRACTION = 0.8  # upstream: rotate when 80% of the lifetime has passed
PERSISTENT_PLUGINS = (pvc.PLUGIN_LOCAL, pvc.PLUGIN_HOST_PATH)
"""The PersistentVolume plugins the volume manager runs (CSI's staging and publishing are not wired yet)."""
ALREADY_MOUNTED_VOLUME = "AlreadyMountedVolume"  # kubelet events WarnAlreadyMountedVolume
MOUNTINFO = "/proc/self/mountinfo"
OBJECT_READ_ERRORS = (CacheSyncError, NotRegisteredError, KubeApiError)
"""A ConfigMap or Secret read's failures that are its volume's SetUp error (a FailedMount), as upstream's; no answer
at all (the apiserver unreachable) is still the sync's failure, retried."""
BLOCK_NOT_MAPPED = "kopflet does not map raw block volumes yet (volumeMode: Block)"
LOCAL_BLOCK_DEVICE_NOT_MOUNTED = ("kopflet does not format and mount local volumes on block devices yet (a local "
                                  "PersistentVolume's path must be a directory)")


class VolumeManager:
    def __init__(self, cfg: AgentConfig, api: KubeClient, node_allocatable: Callable[[], Mapping[str, str]] = dict,
                 *, layout: paths.Layout | None = None, pod_certificates: PodCertificateManager | None = None,
                 trust_bundles: ClusterTrustBundleManager | None = None,
                 node_labels: Callable[[], Mapping[str, str]] = dict, recorder: EventRecorder | None = None,
                 mountinfo: str = MOUNTINFO, objects: Objects | None = None) -> None:
        """`pod_certificates`: None, podCertificate sources fail as upstream's NoOpManager makes them fail;
        `trust_bundles`: None, clusterTrustBundle sources fail as upstream's NoopManager makes them fail.
        `node_labels`: the Node's labels as last read (a PV's node affinity is checked against them, as upstream's
        CheckNodeAffinity against its node lister's Node); `recorder`: where the AlreadyMountedVolume warning goes
        (None: logged only); `mountinfo`: the mount table a local PV's other mounts are looked up in; `objects`:
        where the ConfigMaps and Secrets pods reference are read (the node's watches; default a GET each time),
        which the container environment and the image pulls read through too."""
        self.cfg, self.api, self.node_allocatable = cfg, api, node_allocatable
        self.objects: Objects = objects if objects is not None else DirectObjects(api)
        self.layout = layout if layout is not None else cfg.layout
        self.pod_certificates, self.trust_bundles = pod_certificates, trust_bundles
        self.node_labels, self.recorder, self.mountinfo = node_labels, recorder, mountinfo
        self._tokens: dict[tuple[str, str, int], tuple[str, float]] = {}  # (uid, audience, exp) -> (token, refresh_at)
        self.actual = desired_state.ActualState()
        """The persistent volumes mounted on the node, and for which pods (upstream's actual state of the world)."""
        self._locks: dict[str, asyncio.Lock] = {}
        """One per unique volume name: its mount operations one at a time."""
        self._processed: dict[str, pvc.DesiredVolumes] = {}
        """The pods whose persistent volumes all resolved (upstream's populator: processed pods are not looked at
        again, so their PVCs and PVs are read once)."""

    async def setup(self, pod: spec.Pod) -> dict[str, VolumePlan]:
        """Fetch, plan and materialize every volume of the pod; VolumeError says what is missing (in standalone mode,
        the first volume that needs the apiserver, as upstream's plugins refuse it without a client)."""
        refusal = plugins.standalone_refusal(pod) if is_standalone(self.api) else ""
        if refusal:
            raise VolumeError(refusal)
        config_map_names, secret_names = plugins.referenced_objects(pod)
        config_map_list, secret_list = sorted(config_map_names), sorted(secret_names)
        # One request per audience and lifetime (the first volume's, which its error names): volumes asking for the
        # same token share it, as they did through the token cache when read one by one.
        token_list: list[plugins.TokenSpec] = []
        for token in plugins.token_requests(pod):
            if all((t.audience, t.expiration_seconds) != (token.audience, token.expiration_seconds)
                   for t in token_list):
                token_list.append(token)
        # The sources are independent reads (and token requests): all at once, not one round trip after another.
        # The error raised is the first in this order, as it was when they were read one by one.
        bundles = ctb.wanted(pod)
        certificates_wanted = self.pod_certificates is not None and bool(pc_states.projections(pod))
        reads: list[Awaitable[Any]] = [
            *(self.config_map_data(pod, n) for n in config_map_list),
            *(self.secret_data(pod, n) for n in secret_list),
            *(self._token(pod, token) for token in token_list),
            self._trust_bundles(pod) if bundles else _none(),
            self.pod_certificates.credentials(pod) if self.pod_certificates is not None else _none()]
        if len(config_map_list) + len(secret_list) + len(token_list) + bundles + certificates_wanted > 1:
            fetched = await asyncio.gather(*reads, return_exceptions=True)
        else:  # one source or none: no tasks to make for it
            fetched = [await _outcome(read) for read in reads]
        objects_read = len(config_map_list) + len(secret_list)
        for index, outcome in enumerate(fetched):
            if index < objects_read and isinstance(outcome, OBJECT_READ_ERRORS):
                # upstream: getConfigMap/getSecret's error fails the volume's SetUp (a FailedMount naming it, with
                # the pod's other volumes), not the sync: "failed to sync configmap cache: timed out waiting for
                # the condition", `object "ns"/"x" not registered`, a refused or failed read.
                fetched[index] = plugins.FetchError(_read_error(outcome))
            elif isinstance(outcome, BaseException):
                raise outcome
        answers = iter(fetched)
        config_maps = {n: next(answers) for n in config_map_list}
        secrets = {n: next(answers) for n in secret_list}
        tokens = {(token.audience, token.expiration_seconds): next(answers) for token in token_list}
        trust_bundles, certificates = next(answers), next(answers)
        if certificates is None:
            certificates = {}
        persistent = await self._persistent(pod)
        plans = plugins.plan_volumes(pod, layout=self.layout, config_maps=config_maps, secrets=secrets,
                                     tokens=tokens, node_name=self.cfg.node_name,
                                     node_allocatable=self.node_allocatable(), trust_bundles=trust_bundles,
                                     pod_certificates=certificates, persistent=persistent)
        fs_group = pod.spec.security_context.get("fsGroup")
        await asyncio.to_thread(materialize, plans, fs_group if isinstance(fs_group, int) else None)
        return plans

    async def config_map_data(self, pod: spec.Pod, name: str) -> dict[str, bytes] | None:
        """A ConfigMap the pod references, its ``data`` and ``binaryData`` as bytes; None when it does not exist."""
        obj = await self.objects.config_map(pod, name)
        return None if obj is None else config_map_bytes(obj)

    async def secret_data(self, pod: spec.Pod, name: str) -> dict[str, bytes] | None:
        """A Secret the pod references, its ``data`` decoded; None when it does not exist."""
        obj = await self.objects.secret(pod, name)
        return None if obj is None else secret_bytes(obj)

    # ---------------------------------------------------------------------------------- persistent volumes

    async def _get(self, path: str) -> pvc.Fetched:
        """One PVC or PV: its body, None for NotFound, or the apiserver's error text (client-go's error, which the
        populator's message quotes: a 403 is ``persistentvolumeclaims "x" is forbidden: ...``). No answer at all
        (the apiserver unreachable) is raised: the sync is retried, as for a ConfigMap."""
        try:
            return await self.api.request("GET", path)
        except KubeApiError as exc:
            return None if exc.not_found else exc.message

    async def _persistent(self, pod: spec.Pod) -> dict[str, pvc.VolumeToMount]:
        """The pod's PVC-backed volumes mounted (upstream's populator, reconciler and WaitForAttachAndMount in one
        pass), by pod volume name; VolumeError with the events upstream records when one is not."""
        if not any(pvc.is_persistent(v) for v in pod.spec.volumes):
            return {}
        desired = self._processed.get(pod.uid)
        if desired is None:
            claims = {name: await self._get(
                f"/api/v1/namespaces/{q(pod.namespace)}/persistentvolumeclaims/{q(name)}")
                for name in pvc.claims_wanted(pod)}
            volumes = {name: await self._get(f"/api/v1/persistentvolumes/{q(name)}")
                       for name in pvc.volumes_wanted(pod, claims)}
            desired = pvc.resolve(pod, claims=claims, persistent_volumes=volumes, csi_drivers={},
                                  plugins=PERSISTENT_PLUGINS)
            if not desired.errors:  # upstream markPodProcessed: all its volumes added, not read again
                self._processed[pod.uid] = desired
        node = desired_state.NodeVolumes(labels=dict(self.node_labels()))
        failures: list[tuple[str, str]] = []
        for volume in desired.volumes:
            # One operation at a time per volume (upstream's nestedpendingoperations): another pod's mount of the
            # same local PV is seen by this one's ReadWriteOncePod and fsGroup checks.
            async with self._locks.setdefault(volume.name, asyncio.Lock()):
                (step,) = desired_state.reconcile_pod(dataclasses.replace(desired, volumes=(volume,)), self.actual,
                                                      node, layout=self.layout, node_name=self.cfg.node_name)
                if step.mark_attached is not None:
                    self._mark_attached(step.volume, step.mark_attached)
                if step.step == desired_state.STEP_FAILED:
                    failures.append((step.event_reason, step.message))
                elif step.step == desired_state.STEP_MOUNT and step.operation is not None:
                    try:
                        await self._mount(pod, step.volume, step.operation)
                    except VolumeError as exc:
                        failures.append(exc.events[0] if exc.events else (desired_state.FAILED_MOUNT, str(exc)))
                elif step.step != desired_state.STEP_MOUNTED:  # an attachable volume's wait: not for these plugins
                    failures.append(("", step.message))
        verdict = desired_state.wait_for_attach_and_mount(desired, self.actual)
        if verdict.done:
            return desired.by_outer_name()
        events = tuple((r, m) for r, m in failures if r)
        if verdict.event:
            events += ((desired_state.FAILED_MOUNT, verdict.event),)
        message = verdict.message or (failures[0][1] if failures else verdict.event)
        raise VolumeError(message, events=events)

    def _mark_attached(self, volume: pvc.VolumeToMount, device_path: str) -> None:
        attached = dict(self.actual.attached)
        attached[volume.name] = desired_state.AttachedVolume(
            name=volume.name, spec_name=volume.spec.name, attachable=volume.attachable, device_path=device_path)
        self.actual = dataclasses.replace(self.actual, attached=attached)

    def _mark_mounted(self, pod: spec.Pod, volume: pvc.VolumeToMount, device_mount_path: str | None) -> None:
        attached = dict(self.actual.attached)
        if device_mount_path is not None and volume.name in attached:
            attached[volume.name] = dataclasses.replace(attached[volume.name], device_mounted=True,
                                                        device_mount_path=device_mount_path)
        mounted = tuple(m for m in self.actual.mounted if (m.pod_uid, m.name) != (pod.uid, volume.name))
        mounted += (desired_state.MountedVolume(pod_uid=pod.uid, name=volume.name, spec_name=volume.spec.name,
                                                outer_names=volume.outer_names),)
        self.actual = desired_state.ActualState(attached=attached, mounted=mounted)

    async def _mount(self, pod: spec.Pod, volume: pvc.VolumeToMount, operation: desired_state.MountOperation) -> None:
        """GenerateMountVolumeFunc's operation for a hostPath or local PV (the checks before it are
        `desired_state`'s): VolumeError whose one event is upstream's (prefix, spec name, detail)."""
        volume_spec = volume.spec
        if operation.block:  # upstream's local plugin maps block PVs; kopflet does not (yet)
            raise _failed(desired_state.MAP_SETUP_DEVICE_FAILED, volume_spec, BLOCK_NOT_MAPPED,
                          desired_state.FAILED_MAP_VOLUME)
        fs_group = pod.spec.security_context.get("fsGroup")
        fs_group = fs_group if isinstance(fs_group, int) and not isinstance(fs_group, bool) else None
        policy = pod.spec.security_context.get("fsGroupChangePolicy")
        if volume_spec.plugin == pvc.PLUGIN_HOST_PATH:
            # hostPath SetUp: the type check (creating what DirectoryOrCreate/FileOrCreate ask for); no ownership.
            plan = plugins.VolumePlan(name=volume_spec.name, kind=plugins.KIND_HOST_PATH,
                                      host_path=volume_spec.host_path, host_path_type=volume_spec.host_path_type)
            try:
                await asyncio.to_thread(check_host_path, plan)
            except OSError as exc:
                raise _failed(desired_state.SETUP_FAILED, volume_spec, str(exc)) from exc
            except VolumeError as exc:
                raise VolumeError(str(exc), events=((desired_state.FAILED_MOUNT, str(exc)),)) from exc
            self._mark_mounted(pod, volume, None)
            return
        warning = await asyncio.to_thread(
            mount_local_volume, volume_spec, operation.target_path, self.layout, fs_group=fs_group,
            fs_group_policy=policy if isinstance(policy, str) else None, mountinfo=self.mountinfo)
        if warning:
            logger.warning(f"pod {pod.namespace}/{pod.name}: {warning}")
            if self.recorder is not None:
                self.recorder.pod_event(pod, WARNING, ALREADY_MOUNTED_VOLUME, warning)
        self._mark_mounted(pod, volume, volume_spec.local_path if operation.stage else None)

    def _forget_persistent(self, uid: str) -> None:
        """Drop the pod's mounts from the actual state, and the volumes no pod has mounted any more (a local PV on
        a directory and a hostPath PV have nothing to unstage: upstream's UnmountDevice is a no-op for them)."""
        self._processed.pop(uid, None)
        mounted = tuple(m for m in self.actual.mounted if m.pod_uid != uid)
        still = {m.name for m in mounted}
        attached = {name: a for name, a in self.actual.attached.items() if name in still}
        self.actual = desired_state.ActualState(attached=attached, mounted=mounted)
        wanted = {v.name for desired in self._processed.values() for v in desired.volumes}
        for name in [n for n, lock in self._locks.items() if n not in still | wanted and not lock.locked()]:
            del self._locks[name]

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
        self.objects.unregister(uid)  # upstream: the secret and configmap managers let go once the volumes are gone
        for key in [k for k in self._tokens if k[0] == uid]:
            del self._tokens[key]
        self._forget_persistent(uid)
        if self.pod_certificates is not None:
            self.pod_certificates.forget(uid)
        if self.trust_bundles is not None:
            self.trust_bundles.forget(uid)

    async def cleanup(self, uid: str) -> None:
        """Unmount the pod's tmpfs volumes and local PVs' bind mounts; the caller then removes the pod's directory.
        OSError when a mount is left (upstream keeps a pod directory whose volumes are still mounted): removing the
        directory would remove a PersistentVolume's files through its bind mount."""
        left = await asyncio.to_thread(unmount_all, Path(self.layout.volumes_dir(uid)))
        if left:  # the volumes stay in the actual state until they are really gone (ReadWriteOncePod, fsGroup)
            raise OSError(f"pod {uid}: volumes still mounted, its directory is kept: {', '.join(left)}")
        self.forget(uid)

    async def unmounted(self, uid: str) -> bool:
        """Nothing of the pod is mounted under its volumes directory any more (upstream WaitForAllPodsUnmount's
        condition, which the node shutdown manager waits for before the next priority group)."""
        volumes_dir = Path(self.layout.volumes_dir(uid))
        return not await asyncio.to_thread(_mounted_below, str(volumes_dir) + "/")


# ------------------------------------------------------------------------------------ blocking helpers


_MOUNT_ESCAPES = re.compile(r"\\([0-7]{3})")


def mount_points(table: str = "/proc/self/mounts") -> list[str]:
    """The mount points, unescaped: the kernel writes a space, tab, newline and backslash as ``\\040``,
    ``\\011``, ``\\012``, ``\\134``. A path compared escaped would never match, and a bind mount missed here
    is a directory whose removal goes into the mounted filesystem."""
    with open(table) as f:
        return [_MOUNT_ESCAPES.sub(lambda m: chr(int(m.group(1), 8)), fields[1])
                for fields in (line.split() for line in f) if len(fields) > 1]


def is_mounted(path: Path) -> bool:
    target = str(path.resolve())
    return target in mount_points()


def mount_tmpfs(path: Path, size_limit: int | None) -> None:
    """Upstream setupTmpfs passes no mode, so the mount's root is tmpfs's default 1777 (drwxrwxrwt): the sticky
    bit shows in the container, and a subPath created in the volume inherits it. mount(2) itself, what ``mount -t
    tmpfs [-o size=N] tmpfs <path>`` asks the kernel (upstream execs mount(8)): no fork and exec per Secret or
    projected volume, a few milliseconds of every pod start."""
    data = f"size={size_limit}".encode() if size_limit else None
    if libc().mount(b"tmpfs", os.fsencode(str(path)), b"tmpfs", ctypes.c_ulong(0), data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount tmpfs at {path}: {os.strerror(err)}")


def is_mount_point(path: Path) -> bool:
    """mount-utils IsLikelyNotMountPoint, negated: a directory on another device than its parent (what upstream's
    emptyDir and tmpfs-backed volumes check before mounting; a tmpfs always is one). Two stat calls, not a parse of
    the node's whole mount table at every sync of every pod."""
    return os.stat(path).st_dev != os.stat(path.parent).st_dev


def _mounted_below(prefix: str) -> list[str]:
    if not os.path.exists(prefix):
        return []
    prefix = os.path.realpath(prefix) + "/"
    return [point for point in mount_points() if point.startswith(prefix)]


def unmount_all(volumes_dir: Path) -> list[str]:
    """Unmount everything below `volumes_dir` (deepest first); the mount points still there after."""
    if not volumes_dir.is_dir():
        return []
    prefix = str(volumes_dir.resolve()) + "/"
    for target in sorted(_mounted_below(prefix), key=len, reverse=True):
        unmount(target)
    return _mounted_below(prefix)


def unmount(target: str) -> None:
    """umount(2) itself, what ``umount <target>`` asks the kernel for the tmpfs volumes the agent mounts (upstream
    execs umount(8)): no fork and exec of the agent per volume at every pod's teardown. When the kernel refuses
    (a mount that needs its umount helper, say), umount(8) is run as before; what stays mounted is the caller's to
    report."""
    if libc().umount2(os.fsencode(target), 0) != 0:
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
            if plan.tmpfs and not is_mount_point(path):
                mount_tmpfs(path, plan.size_limit)
                created = True
            changed = write_atomically(path, plan.files, fs_group) if plan.files is not None else created
            if fs_group is not None and changed:
                set_volume_ownership(path, fs_group, read_only=plan.files is not None)
        except (OSError, subprocess.SubprocessError) as exc:
            raise VolumeError(f'MountVolume.SetUp failed for volume "{plan.name}" : {exc}') from exc


def _failed(prefix: str, volume: pvc.VolumeSpec, detail: str,
            reason: str = desired_state.FAILED_MOUNT) -> VolumeError:
    """Upstream GenerateError's event (``<prefix> for volume "<spec name>" : <detail>``) as the one event."""
    message = csi_rules.volume_message(prefix, volume.name, detail)
    return VolumeError(message, volume.outer_name, events=((reason, message),))


def _go_os_error(op: str, path: str, exc: OSError) -> str:
    """Go's *PathError text (``stat /x: permission denied``): the errno's text, lower-case as Go's."""
    return f"{op} {path}: {(exc.strerror or str(exc)).lower()}"


def _run_mount(args: tuple[str, ...]) -> None:
    """mount-utils doMount: ``mount <args>``; its error as upstream's text."""
    done = subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        output = (done.stdout or "") + (done.stderr or "")
        raise OSError(f"mount failed: exit status {done.returncode}\nMounting command: mount\n"
                      f"Mounting arguments: {' '.join(args)}\nOutput: {output}")


_STATFS_FLAGS = {"ro": os.ST_RDONLY, "nodev": os.ST_NODEV, "noexec": os.ST_NOEXEC, "nosuid": os.ST_NOSUID,
                 "noatime": os.ST_NOATIME, "relatime": os.ST_RELATIME, "nodiratime": os.ST_NODIRATIME}


def _source_options(path: str) -> tuple[str, ...]:
    """mount-utils getBindMountOptions: the source filesystem's ro, nodev, noexec ... flags (statfs)."""
    flags = os.statvfs(path).f_flag
    return tuple(name for name in pvc.BIND_REMOUNT_FLAGS if flags & _STATFS_FLAGS[name])


def mount_local_volume(volume: pvc.VolumeSpec, target: str, layout: paths.Layout, *, fs_group: int | None,
                       fs_group_policy: str | None, mountinfo: str = MOUNTINFO) -> str | None:
    """Upstream's local plugin for a Filesystem PV (blocking: run in a thread): NewMounter's global path (the PV's
    directory), MountDevice (nothing for a directory; a block device is refused), then SetUpAt: nothing when
    `target` is already a mount point; else the bind mount (``ro`` when read-only, the PV's mount options) and, the
    first time (no other pod has it mounted) and writable, the fsGroup's ownership (skipped under
    ``fsGroupChangePolicy: OnRootMismatch`` when the root has it already). VolumeError with upstream's event; the
    AlreadyMountedVolume warning's text when another pod mounted it under another group."""
    try:
        try:
            kind = pvc.file_type(os.stat(volume.local_path).st_mode) if volume.local_path else ""
        except FileNotFoundError:
            raise pvc.SpecError(pvc.path_missing(volume.local_path)) from None
        except OSError as exc:
            raise pvc.SpecError(_go_os_error("stat", volume.local_path, exc)) from None
        global_path = pvc.local_global_path(volume, layout, kind)
    except pvc.SpecError as exc:
        raise _failed(desired_state.NEW_MOUNTER_FAILED, volume, str(exc)) from None
    if kind == pvc.FILE_TYPE_BLOCK_DEVICE:
        raise _failed(desired_state.MOUNT_DEVICE_FAILED, volume, LOCAL_BLOCK_DEVICE_NOT_MOUNTED)
    try:
        if Path(target).is_dir() and is_mounted(Path(target)):
            return None  # SetUpAt: already mounted (a restarted agent finds its earlier bind mount)
        warning = None
        others: tuple[str, ...] = ()
        if fs_group is not None:
            with open(mountinfo) as f:
                table = pvc.parse_mountinfo(f.read())
            try:
                others = pvc.pod_mount_refs(pvc.mount_refs(table, os.path.realpath(global_path)), layout.pods_dir)
            except pvc.SpecError as exc:
                raise OSError(str(exc)) from None
            if others:
                gid = os.stat(global_path).st_gid
                if gid != fs_group:
                    warning = pvc.already_mounted_volume_warning(fs_group, volume.name, gid)
        os.makedirs(target, mode=0o750, exist_ok=True)
        bind, remount = pvc.bind_mount_args(global_path, target, pvc.local_mount_options(volume),
                                            _source_options(global_path))
        _run_mount(bind)
        try:
            _run_mount(remount)
        except OSError:
            subprocess.run(["umount", target], capture_output=True, timeout=30)
            raise
        if not volume.read_only and not others and fs_group is not None:
            info = os.stat(target)
            if not plugins.skip_permission_change(fs_group_policy, gid=info.st_gid, mode=info.st_mode,
                                                  is_dir=stat.S_ISDIR(info.st_mode), fs_group=fs_group,
                                                  read_only=False):
                set_volume_ownership(Path(target), fs_group, read_only=False)
        return warning
    except (OSError, subprocess.SubprocessError) as exc:
        if Path(target).is_dir() and not is_mounted(Path(target)):
            with contextlib.suppress(OSError):
                os.rmdir(target)  # SetUpAt removes the directory it made when the mount failed
        raise _failed(desired_state.SETUP_FAILED, volume, str(exc)) from exc


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


async def _none() -> None:
    """An absent source's place among the gathered ones."""
    return None


def _read_error(exc: BaseException) -> str:
    """The error as upstream's getter says it: the apiserver's own message for a refused read (``secrets "x" is
    forbidden: ...``), the cache's text otherwise."""
    return exc.message if isinstance(exc, KubeApiError) and exc.message else str(exc)


async def _outcome(read: Awaitable[Any]) -> Any:
    """What `read` returns, or the exception it raises (as gather's ``return_exceptions`` gives it)."""
    try:
        return await read
    except Exception as exc:
        return exc
